/* The forward product of a conv with block-masked N:M weights (--weight-groups block16 | block32)
 * or masks along output channels (cout): one of an ordered list of implementations (MODEL_FWD_*):
 * oneDNN's dense forward on W~, the sparse-weight kernel (src/kernels/spfwd.c), which runs the
 * product over each block's kept input channels only, the same in the Winograd domain
 * (spfwd_wino.c; 3x3 stride-1 layers), or for the cout form the kernel vectorised over images that
 * feeds each loaded input to a group's kept output channels only (spcout.c; stride 1 or 2). Per layer,
 * by --sparse-kernel as for the data gradient: on = a sparse kernel wherever one runs (Winograd
 * where the layer has it: fewer multiplies by 2.25x), off = dense, auto and fastest = the fastest
 * of all, timed at start with the packing included (never slower than dense). The choice is part of
 * the kernel-choice text that checkpoints keep (model_tune.c), one letter per layer, so a resumed
 * run computes the same bits: the implementations differ in rounding. */
#include <math.h>
#include <string.h>

#include "core/clock.h"
#include "model/model_internal.h"
#include "sdgp/sparse.h"

#define FWD_TUNE_REPS 5

int model_fwd_supported(const sdgp_model *m, const op *o) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    if (o->kind != OP_CONV || !o->sparse_w || o->geom.groups != 1 || w->n >= w->m) return 0;
    return w->group == SDGP_WGROUP_COUT ? sdgp_sparse_fwd_cout_supports(&o->geom, w->n, w->m)
                                        : sdgp_weights_group_block(w->group) > 1;
}

static const char impl_letter[MODEL_FWD_NIMPL] = {'d', 's', 'w', 'c'};

/* The implementation a choice letter names, -1 for none ('-' and unknown letters). */
static int impl_of_letter(char c) {
    const char *l = c ? memchr(impl_letter, c, MODEL_FWD_NIMPL) : NULL;
    return l ? (int)(l - impl_letter) : -1;
}

static sdgp_sparse_fwd *impl_plan(const op *o, int impl) { return impl == MODEL_FWD_DENSE ? NULL : o->spfwd[impl - 1]; }

/* Whether the layer can run impl (its plan may not exist yet: plans are made on demand): the block
 * kernels for block masks, the cout kernel for the cout form. */
static int impl_supported(const sdgp_model *m, const op *o, int impl) {
    if (impl == MODEL_FWD_DENSE) return 1;
    if (!o->fwd_ok) return 0;
    if (m->cfg.weights.group == SDGP_WGROUP_COUT) return impl == MODEL_FWD_COUT;
    return impl == MODEL_FWD_DIRECT || (impl == MODEL_FWD_WINO && sdgp_sparse_fwd_wino_supports(&o->geom));
}

/* impl's plan, made if missing (the Winograd one holds U, 4x the kept weights: 19 MB at 512
 * channels, so only the implementations in use keep a plan). */
static sdgp_status impl_make(const sdgp_model *m, op *o, int impl, sdgp_error *err) {
    if (impl == MODEL_FWD_DENSE || o->spfwd[impl - 1]) return SDGP_OK;
    const sdgp_weights_cfg *w = &m->cfg.weights;
    const int block = sdgp_weights_group_block(w->group);
    if (impl == MODEL_FWD_COUT) return sdgp_sparse_fwd_create_cout(&o->spfwd[2], &o->geom, w->n, w->m, m->cfg.prune.isa, m->cfg.threads, err);
    return impl == MODEL_FWD_WINO
               ? sdgp_sparse_fwd_create_wino(&o->spfwd[1], &o->geom, w->n, w->m, block, 4, m->cfg.prune.isa, m->cfg.threads, err)
               : sdgp_sparse_fwd_create(&o->spfwd[0], &o->geom, w->n, w->m, block, m->cfg.prune.isa, m->cfg.threads, err);
}

/* Whether one of the layer's plans runs in a workspace (the cout form's transposes). */
static int needs_workspace(const op *o) {
    for (int i = 0; i < MODEL_FWD_NIMPL - 1; i++)
        if (sdgp_sparse_fwd_workspace_bytes(o->spfwd[i])) return 1;
    return 0;
}

/* Runs impl from now on, and frees the other plans. */
static void impl_use(op *o, int impl) {
    for (int i = MODEL_FWD_DIRECT; i < MODEL_FWD_NIMPL; i++)
        if (i != impl) {
            sdgp_sparse_fwd_destroy(o->spfwd[i - 1]);
            o->spfwd[i - 1] = NULL;
        }
    o->fwd_impl = impl;
    o->info.sparse_forward = impl;
    model_fwd_pack(o);
}

void model_fwd_product(sdgp_model *m, op *o, float *z, const float *x) {
    /* failures would be internal: shapes were validated at build, and W~ has the block form by
     * construction (a failed pack leaves fwd_packed 0 and the dense product runs) */
    sdgp_sparse_fwd *plan = impl_plan(o, o->fwd_impl);
    if (plan && o->fwd_packed) (void)sdgp_sparse_fwd_run(plan, z, x, NULL);
    else (void)sdgp_conv_forward(o->dnnl, z, x, model_op_weights(m, o), NULL, NULL);
}

void model_fwd_pack(op *o) {
    sdgp_sparse_fwd *plan = impl_plan(o, o->fwd_impl);
    if (plan) o->fwd_packed = sdgp_sparse_fwd_pack(plan, o->w_eff, NULL) == SDGP_OK;
}

/* The layer's implementations (plans made) against each other (pack + run) on random input in the
 * layer's own buffers (free before the first step), interleaved, the best of each. The image slot
 * is the caller's: a conv on it stays dense under auto. */
static void tune_layer(sdgp_model *m, op *o, int index) {
    if (o->in == 0) return;
    float *x = m->slots[o->in].act, *z = o->z_fwd;
    model_fill_random(x, m->slots[o->in].count, 0xD1B54A32D192ED03ull * (uint64_t)(index + 1));
    double best[MODEL_FWD_NIMPL];
    for (int i = 0; i < MODEL_FWD_NIMPL; i++) best[i] = INFINITY;
    for (int r = 0; r < FWD_TUNE_REPS; r++)
        for (int i = 0; i < MODEL_FWD_NIMPL; i++) {
            if (i != MODEL_FWD_DENSE && !impl_plan(o, i)) continue;
            double t0 = sdgp_now_s();
            o->fwd_impl = i;
            model_fwd_pack(o);
            model_fwd_product(m, o, z, x);
            best[i] = fmin(best[i], sdgp_now_s() - t0);
        }
    o->fwd_impl = MODEL_FWD_DENSE;
    for (int i = 0; i < MODEL_FWD_NIMPL; i++)
        if (best[i] < best[o->fwd_impl]) o->fwd_impl = i;
}

/* Every supported layer gets the plan of its choice (none under off: a checkpoint's choice makes
 * what it asks for). */
sdgp_status model_fwd_setup(sdgp_model *m, sdgp_error *err) {
    int timing = m->timing;
    m->timing = 0;
    sdgp_status st = SDGP_OK;
    int shared = 0; /* some plan ran in the shared workspace */
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        o->fwd_ok = model_fwd_supported(m, o);
        if (!o->fwd_ok || m->cfg.sparse == SDGP_SPARSE_OFF) continue;
        /* under on: the kernel with the fewest multiplies the layer has */
        int impl = impl_supported(m, o, MODEL_FWD_COUT) ? MODEL_FWD_COUT
                   : impl_supported(m, o, MODEL_FWD_WINO) ? MODEL_FWD_WINO
                                                          : MODEL_FWD_DIRECT;
        if (m->cfg.sparse != SDGP_SPARSE_ON) /* auto, fastest: time them all */
            for (int k = MODEL_FWD_DIRECT; k < MODEL_FWD_NIMPL && st == SDGP_OK; k++)
                if (impl_supported(m, o, k)) st = impl_make(m, o, k, err);
        if (st == SDGP_OK) st = impl_make(m, o, impl, err);
        /* the cout plans' transposes run in the model's shared workspace, tuning included */
        if (st == SDGP_OK && needs_workspace(o)) {
            shared = 1;
            st = model_conv_share_workspace(m, err);
        }
        if (st != SDGP_OK) break;
        if (m->cfg.sparse != SDGP_SPARSE_ON) {
            tune_layer(m, o, i);
            impl = o->fwd_impl;
        }
        impl_use(o, impl);
    }
    m->timing = timing;
    /* sized to the plans that stayed */
    return st == SDGP_OK && shared ? model_conv_share_workspace(m, err) : st;
}

void model_fwd_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + 1 < size; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        buf[k++] = !o->fwd_ok ? '-' : impl_letter[o->fwd_impl];
    }
    if (size) buf[k] = 0;
}

int model_fwd_any(const sdgp_model *m) {
    for (int i = 0; i < m->n_convs; i++)
        if (m->ops[m->conv_ops[i]].fwd_ok) return 1;
    return 0;
}

sdgp_status model_fwd_set_choice(sdgp_model *m, const char *choice, size_t len, sdgp_error *err) {
    if ((int)len != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "forward kernel choice '%.*s' does not fit a model of %d conv layers", (int)len,
                         choice, m->n_convs);
    for (int i = 0; i < m->n_convs; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        const int impl = impl_of_letter(choice[i]);
        int ok = choice[i] == '-' || (impl >= 0 && impl_supported(m, o, impl)); /* '-': dense */
        if (!ok) return sdgp_fail(err, SDGP_ERR_FORMAT, "forward kernel choice '%.*s': layer %d cannot be '%c'", (int)len, choice, i, choice[i]);
    }
    /* the plans first (making one can fail: then nothing has changed but a plan more) */
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        const int impl = impl_of_letter(choice[i]);
        sdgp_status st = impl >= 0 ? impl_make(m, o, impl, err) : SDGP_OK;
        if (st != SDGP_OK) return st;
    }
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        const int impl = impl_of_letter(choice[i]);
        if (o->fwd_ok) impl_use(o, impl >= 0 ? impl : MODEL_FWD_DENSE);
    }
    int shared = 0;
    for (int i = 0; i < m->n_convs; i++) shared |= needs_workspace(&m->ops[m->conv_ops[i]]);
    return shared ? model_conv_share_workspace(m, err) : SDGP_OK;
}
