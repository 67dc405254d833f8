/* The forward product of a conv with block-masked N:M weights (--weight-groups block16 | block32):
 * oneDNN's dense forward on W~, or the sparse-weight kernel (src/kernels/spfwd.c), which runs the
 * product over each block's kept input channels only. Per layer, by --sparse-kernel as for the data
 * gradient: on = the sparse kernel wherever it runs, off = dense, auto and fastest = the faster of
 * the two, timed at start with the packing included (never slower than dense). The choice is part
 * of the kernel-choice text that checkpoints keep (model_tune.c), so a resumed run computes the same
 * bits: the two differ in rounding. */
#include <math.h>

#include "core/clock.h"
#include "model/model_internal.h"
#include "sdgp/sparse.h"

#define FWD_TUNE_REPS 5

int model_fwd_supported(const sdgp_model *m, const op *o) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    return o->kind == OP_CONV && o->sparse_w && o->geom.groups == 1 && sdgp_weights_group_block(w->group) > 1 &&
           w->n < w->m;
}

void model_fwd_product(sdgp_model *m, op *o, float *z, const float *x) {
    /* failures would be internal: shapes were validated at build, and W~ has the block form by
     * construction (a failed pack leaves fwd_packed 0 and the dense product runs) */
    if (o->fwd_sparse && o->fwd_packed) (void)sdgp_sparse_fwd_run(o->spfwd, z, x, NULL);
    else (void)sdgp_conv_forward(o->dnnl, z, x, model_op_weights(m, o), NULL, NULL);
}

void model_fwd_pack(op *o) {
    if (o->fwd_sparse) o->fwd_packed = sdgp_sparse_fwd_pack(o->spfwd, o->w_eff, NULL) == SDGP_OK;
}

/* Dense against sparse (pack + run) on random input in the layer's own buffers (free before the
 * first step), interleaved, the best of each. The image slot is the caller's: a conv on it stays
 * dense under auto. */
static void tune_layer(sdgp_model *m, op *o, int index) {
    if (o->in == 0) return;
    float *x = m->slots[o->in].act, *z = o->z_fwd;
    model_fill_random(x, m->slots[o->in].count, 0xD1B54A32D192ED03ull * (uint64_t)(index + 1));
    double dense = INFINITY, sparse = INFINITY;
    for (int r = 0; r < FWD_TUNE_REPS; r++) {
        double t0 = sdgp_now_s();
        o->fwd_sparse = 0;
        model_fwd_product(m, o, z, x);
        double t1 = sdgp_now_s();
        o->fwd_sparse = 1;
        model_fwd_pack(o);
        model_fwd_product(m, o, z, x);
        double t2 = sdgp_now_s();
        dense = fmin(dense, t1 - t0);
        sparse = fmin(sparse, t2 - t1);
    }
    o->fwd_sparse = sparse < dense;
}

/* Every supported layer gets a plan, under off too: a checkpoint's choice may ask for it. */
sdgp_status model_fwd_setup(sdgp_model *m, sdgp_error *err) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    int timing = m->timing;
    m->timing = 0;
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (!model_fwd_supported(m, o)) continue;
        sdgp_status st = sdgp_sparse_fwd_create(&o->spfwd, &o->geom, w->n, w->m, sdgp_weights_group_block(w->group),
                                                m->cfg.prune.isa, m->cfg.threads, err);
        if (st != SDGP_OK) {
            m->timing = timing;
            return st;
        }
        if (m->cfg.sparse == SDGP_SPARSE_ON) o->fwd_sparse = 1;
        else if (m->cfg.sparse != SDGP_SPARSE_OFF) tune_layer(m, o, i);
        model_fwd_pack(o);
        o->info.sparse_forward = o->fwd_sparse;
    }
    m->timing = timing;
    return SDGP_OK;
}

void model_fwd_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + 1 < size; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        buf[k++] = !o->spfwd ? '-' : o->fwd_sparse ? 's' : 'd';
    }
    if (size) buf[k] = 0;
}

int model_fwd_any(const sdgp_model *m) {
    for (int i = 0; i < m->n_convs; i++)
        if (m->ops[m->conv_ops[i]].spfwd) return 1;
    return 0;
}

sdgp_status model_fwd_set_choice(sdgp_model *m, const char *choice, size_t len, sdgp_error *err) {
    if ((int)len != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "forward kernel choice '%.*s' does not fit a model of %d conv layers", (int)len,
                         choice, m->n_convs);
    for (int i = 0; i < m->n_convs; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        int ok = choice[i] == '-' || choice[i] == 'd' || (choice[i] == 's' && o->spfwd);
        if (!ok) return sdgp_fail(err, SDGP_ERR_FORMAT, "forward kernel choice '%.*s': layer %d cannot be '%c'", (int)len, choice, i, choice[i]);
    }
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        o->fwd_sparse = choice[i] == 's';
        o->info.sparse_forward = o->fwd_sparse;
        model_fwd_pack(o);
    }
    return SDGP_OK;
}
