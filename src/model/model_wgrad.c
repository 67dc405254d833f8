/* The weight gradient of a conv layer under --prune-wgrad: dL/dO pruned along positions, then
 * oneDNN's backward-weights on the dense pruned tensor, or the N:M weight-gradient kernel on its
 * compressed form (sdgp_sparse_wgrad, src/kernels/spwgrad.c). Which layers can take the kernel,
 * the per-layer choice (timed as the data gradient's is, model_tune.c; --sparse-kernel on / off
 * force it), and the choice's part of the kernel-choice text. */
#include <math.h>
#include <stdlib.h>

#include "core/clock.h"
#include "model/model_internal.h"

#define TUNE_REPS 5

/* Whether --prune-wgrad prunes layer o's dL/dO for its weight gradient: every conv but the first,
 * unless --prune-wgrad-first. The first conv's product is the cheapest of the model (1-3 input
 * channels: ResNet-9 w0.25 at batch 512 4-6 ms), while pruning its dL/dO reads and writes its whole
 * output (32 channels at 28x28: ~20 ms for MVUE on 2 threads), so pruning it only costs time. */
int model_wgrad_pruned(const sdgp_model *m, const op *o) {
    return m->cfg.prune_wgrad.fn != SDGP_PRUNE_NONE && (o->conv_index > 0 || m->cfg.prune_wgrad_first_layer);
}

/* The kernel's forms: rows kept per channel (mask_block 1), m | 8; and a compressed dL/dO that fits
 * scratch2 (the dense path's buffer): n/m of the values and a byte each, so 5n <= 4m. */
int model_wgrad_supported(const sdgp_model *m, const op *o) {
    const sdgp_prune_cfg *c = &m->cfg.prune_wgrad;
    return model_wgrad_pruned(m, o) && c->n < c->m && c->mask_block <= 1 && 8 % c->m == 0 && 5 * c->n <= 4 * c->m &&
           o->geom.groups <= 1 && m->cfg.sparse != SDGP_SPARSE_OFF;
}

int model_wgrad_any(const sdgp_model *m) {
    for (int i = 0; i < m->n_convs; i++)
        if (model_wgrad_supported(m, &m->ops[m->conv_ops[i]])) return 1;
    return 0;
}

/* scratch2 as the compressed dL/dO of layer o: the values, then the indices */
static sdgp_nm_tensor compressed_view(const sdgp_model *m, const op *o) {
    const sdgp_prune_cfg *c = &m->cfg.prune_wgrad;
    const int64_t rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    const size_t slots = (size_t)(rows / c->m * c->n) * o->geom.Cout;
    return (sdgp_nm_tensor){SDGP_AXIS_ROW, c->n, c->m, rows, o->geom.Cout, m->scratch2, (uint8_t *)(m->scratch2 + slots)};
}

sdgp_status model_conv_backward_weights(sdgp_model *m, op *o, float *dw, const float *x, const float *dz, uint64_t step,
                                        sdgp_error *err) {
    if (!model_wgrad_pruned(m, o)) return sdgp_conv_backward_weights(o->dnnl, dw, NULL, x, dz, err);
    /* seed ^ "wgra": masks independent of the data gradient's */
    sdgp_prune_cfg pc = model_prune_cfg(m, o, m->cfg.prune_wgrad, SDGP_AXIS_ROW, m->cfg.seed ^ 0x77677261ull, step);
    const int64_t P = (int64_t)o->geom.Ho * o->geom.Wo;
    sdgp_status st;
    if (!o->wgrad) {
        st = sdgp_prune(&pc, dz, m->B, P, o->geom.Cout, m->scratch2, NULL, err);
        return st != SDGP_OK ? st : sdgp_conv_backward_weights(o->dnnl, dw, NULL, x, m->scratch2, err);
    }
    sdgp_nm_tensor nm = compressed_view(m, o);
    st = sdgp_prune(&pc, dz, m->B, P, o->geom.Cout, NULL, &nm, err);
    return st != SDGP_OK ? st : sdgp_sparse_wgrad_run(o->wgrad, dw, x, &nm, err);
}

static void use_plan(op *o, sdgp_sparse_wgrad *plan) {
    if (o->wgrad != plan) sdgp_sparse_wgrad_destroy(o->wgrad);
    o->wgrad = plan;
    o->info.sparse_wgrad = plan != NULL;
}

/* use_plan, then the plan's scratch from the model's one workspace (model_conv_share_workspace: the
 * AVX2 path's padded input would otherwise be one per layer, 220 MB over ResNet-9 w0.25 at batch 512) */
static sdgp_status adopt(sdgp_model *m, op *o, sdgp_sparse_wgrad *plan, sdgp_error *err) {
    use_plan(o, plan);
    return model_conv_share_workspace(m, err);
}

static sdgp_status make_plan(sdgp_model *m, op *o, sdgp_sparse_wgrad **plan, sdgp_error *err) {
    return sdgp_sparse_wgrad_create(plan, &o->geom, m->cfg.prune_wgrad.n, m->cfg.prune_wgrad.m, SDGP_ISA_AUTO,
                                    m->cfg.threads, err);
}

/* One layer: oneDNN on the dense pruned tensor against the kernel on the compressed one, pruning
 * included, interleaved repetitions, the best of each; the kernel stays when it is faster. */
static sdgp_status tune_layer(sdgp_model *m, op *o, int index, sdgp_error *err) {
    sdgp_sparse_wgrad *plan = NULL;
    sdgp_status st = make_plan(m, o, &plan, err);
    if (st != SDGP_OK) return st;
    if (m->cfg.sparse == SDGP_SPARSE_ON) return adopt(m, o, plan, err);
    /* before the first step the activations are free (model_tune.c): the output slot holds a random
     * dL/dO; the input slot is read as it is (the times do not depend on its values) */
    float *dz = m->slots[o->out].act, *image = NULL;
    const float *x = m->slots[o->in].act;
    if (!x) { /* the image: no buffer of the model's before a forward */
        x = image = calloc(m->slots[o->in].count, sizeof(float));
        if (!image) {
            sdgp_sparse_wgrad_destroy(plan);
            return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory timing %s's weight gradient", o->name);
        }
    }
    model_fill_random(dz, m->slots[o->out].count, 0x7767726164ull * (uint64_t)(index + 1));
    double best[2] = {INFINITY, INFINITY};
    for (int r = 0; r < TUNE_REPS && st == SDGP_OK; r++)
        for (int c = 0; c < 2 && st == SDGP_OK; c++) {
            o->wgrad = c ? plan : NULL;
            const double t0 = sdgp_now_s();
            st = model_conv_backward_weights(m, o, m->params[o->p_w].grad, x, dz, 0, err);
            const double t = sdgp_now_s() - t0;
            if (t < best[c]) best[c] = t;
        }
    free(image);
    o->wgrad = NULL;
    if (st == SDGP_OK && best[1] < best[0]) return adopt(m, o, plan, err);
    sdgp_sparse_wgrad_destroy(plan);
    return st;
}

sdgp_status model_wgrad_tune(sdgp_model *m, sdgp_error *err) {
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (model_wgrad_supported(m, o)) st = tune_layer(m, o, i, err);
    }
    return st;
}

void model_wgrad_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + 1 < size; i++) buf[k++] = m->ops[m->conv_ops[i]].wgrad ? 'm' : '-';
    if (size) buf[k] = 0;
}

sdgp_status model_wgrad_set_choice(sdgp_model *m, const char *choice, size_t len, sdgp_error *err) {
    if (choice && (int)len != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "weight-gradient kernel choice '%.*s' does not fit a model of %d conv layers",
                         (int)len, choice, m->n_convs);
    for (int i = 0; choice && i < m->n_convs; i++)
        if (choice[i] != '-' && (choice[i] != 'm' || !model_wgrad_supported(m, &m->ops[m->conv_ops[i]])))
            return sdgp_fail(err, SDGP_ERR_FORMAT, "weight-gradient kernel choice '%.*s': layer %d cannot be '%c'", (int)len,
                             choice, i, choice[i]);
    for (int i = 0; i < m->n_convs; i++) { /* no text: every layer dense */
        op *o = &m->ops[m->conv_ops[i]];
        const int want = choice && choice[i] == 'm';
        sdgp_sparse_wgrad *plan = want ? o->wgrad : NULL;
        if (want && !plan) {
            sdgp_status st = make_plan(m, o, &plan, err);
            if (st != SDGP_OK) return st;
        }
        use_plan(o, plan);
    }
    return model_conv_share_workspace(m, err);
}
