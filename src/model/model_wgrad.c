/* The weight gradient of a conv layer under --prune-wgrad: dL/dO pruned along positions, then
 * oneDNN's backward-weights on the dense pruned tensor, or the N:M weight-gradient kernel on its
 * compressed form (sdgp_sparse_wgrad, src/kernels/spwgrad.c). Which layers can take the kernel,
 * the per-layer choice (timed as the data gradient's is, model_tune.c: oneDNN on the dense pruned
 * tensor against the kernel on the compressed one, pruning included; --sparse-kernel on / off
 * force it). */

#include "model/model_internal.h"

/* Whether --prune-wgrad prunes layer o's dL/dO for its weight gradient: every conv but the first,
 * unless --prune-wgrad-first. The first conv's product is the cheapest of the model (1-3 input
 * channels: ResNet-9 w0.25 at batch 512 4-6 ms), while pruning its dL/dO reads and writes its whole
 * output (32 channels at 28x28: ~20 ms for MVUE on 2 threads), so pruning it only costs time. */
int model_wgrad_pruned(const sdgp_model *m, const op *o) {
    return m->cfg.prune_wgrad.fn != SDGP_PRUNE_NONE && (o->conv_index > 0 || m->cfg.prune_wgrad_first_layer);
}

/* ---- sparse: the N:M weight-gradient kernel on the compressed pruned dL/dO ---- */
/* The kernel's forms: rows kept per channel (mask_block 1), m | 8; and a compressed dL/dO that fits
 * scratch2 (the dense path's buffer): n/m of the values and a byte each, so 5n <= 4m. */
static const char *sparse_unsupported(const sdgp_model *m, const op *o) {
    const sdgp_prune_cfg *c = &m->cfg.prune_wgrad;
    if (!model_wgrad_pruned(m, o)) return "its weight gradient is not pruned (--prune-wgrad)";
    if (m->cfg.sparse == SDGP_SPARSE_OFF) return "--sparse-kernel off";
    if (c->n >= c->m || c->mask_block > 1 || 8 % c->m != 0 || 5 * c->n > 4 * c->m)
        return "the kernel takes n < m, m dividing 8, 5n <= 4m and no --wgrad-block";
    return o->geom.groups <= 1 ? NULL : "a grouped conv";
}

/* scratch2 as the compressed dL/dO of layer o: the values, then the indices */
static sdgp_nm_tensor compressed_view(const sdgp_model *m, const op *o) {
    const sdgp_prune_cfg *c = &m->cfg.prune_wgrad;
    const int64_t rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    const size_t slots = (size_t)(rows / c->m * c->n) * o->geom.Cout;
    return (sdgp_nm_tensor){SDGP_AXIS_ROW, c->n, c->m, rows, o->geom.Cout, m->scratch2, (uint8_t *)(m->scratch2 + slots)};
}

static sdgp_status sparse_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    /* the ISA --isa gives every sparse kernel (it was AUTO here: only SDGP_ISA reached this one) */
    return sdgp_sparse_wgrad_create((sdgp_sparse_wgrad **)plan, &o->geom, m->cfg.prune_wgrad.n, m->cfg.prune_wgrad.m,
                                    m->cfg.prune.isa, m->cfg.threads, err);
}
static sdgp_status sparse_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_nm_tensor nm = compressed_view(m, o);
    sdgp_status st = sdgp_prune(a->pc, a->dz, m->B, (int64_t)o->geom.Ho * o->geom.Wo, o->geom.Cout, NULL, &nm, err);
    return st != SDGP_OK ? st : sdgp_sparse_wgrad_run(o->plan[MODEL_BWD_WEIGHTS], a->out, a->x, &nm, err);
}
/* its scratch (the AVX2 path's padded input) from the model's one workspace: one per layer would
 * take 220 MB over ResNet-9 w0.25 at batch 512 */
static size_t sparse_workspace_bytes(const void *plan) { return sdgp_sparse_wgrad_workspace_bytes(plan); }
static sdgp_status sparse_set_workspace(void *plan, void *ws, size_t bytes, sdgp_error *err) {
    return sdgp_sparse_wgrad_set_workspace(plan, ws, bytes, err);
}
static void sparse_destroy(void *plan) { sdgp_sparse_wgrad_destroy(plan); }

/* ---- dense: the pruned dL/dO as a dense tensor into oneDNN's backward-weights ---- */
static const char *dense_unsupported(const sdgp_model *m, const op *o) {
    return model_wgrad_pruned(m, o) ? NULL : "its weight gradient is not pruned (--prune-wgrad)";
}
static sdgp_status dense_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_status st = sdgp_prune(a->pc, a->dz, m->B, (int64_t)o->geom.Ho * o->geom.Wo, o->geom.Cout, m->scratch2, NULL, err);
    return st != SDGP_OK ? st : sdgp_conv_backward_weights(o->dnnl, a->out, NULL, a->x, m->scratch2, err);
}

static sdgp_status sparse_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    sdgp_sparse_wgrad *p = NULL;
    sdgp_status st = sdgp_sparse_wgrad_create(&p, g, 2, 4, SDGP_ISA_AUTO, threads, err);
    if (st == SDGP_OK) model_describe_caches(sdgp_sparse_wgrad_isa(p), out);
    sdgp_sparse_wgrad_destroy(p);
    return st;
}

/* The choice text's letters: 'm' the kernel, '-' oneDNN (on the pruned tensor where the layer
 * prunes). */
static const model_impl impl_sparse = {.pass = MODEL_BWD_WEIGHTS, .code = 'm', .name = "sparse", .sparse = 1, .prunes = 1,
                                       .unsupported = sparse_unsupported, .create = sparse_create, .run = sparse_run,
                                       .workspace_bytes = sparse_workspace_bytes, .set_workspace = sparse_set_workspace,
                                       .destroy = sparse_destroy, .describe = sparse_describe};
static const model_impl impl_dense = {.pass = MODEL_BWD_WEIGHTS, .code = '-', .name = "dense", .prunes = 1, .onednn = 1,
                                      .unsupported = dense_unsupported, .run = dense_run};

const model_impl *const model_wgrad_impls[] = {&impl_sparse, &impl_dense, NULL};

int model_wgrad_allowed(const sdgp_model *m, const op *o, const model_impl *impl) {
    if (impl->unsupported(m, o)) return 0;
    /* on: the kernel wherever it runs */
    return m->cfg.sparse != SDGP_SPARSE_ON || impl->sparse || impl_sparse.unsupported(m, o);
}

sdgp_status model_conv_backward_weights(sdgp_model *m, op *o, float *dw, const float *x, const float *dz, uint64_t step,
                                        sdgp_error *err) {
    if (!o->impl[MODEL_BWD_WEIGHTS]) return sdgp_conv_backward_weights(o->dnnl, dw, NULL, x, dz, err);
    sdgp_prune_cfg pc = model_prune_cfg(m, o, m->cfg.prune_wgrad, SDGP_AXIS_ROW, m->cfg.seed ^ MODEL_WGRAD_SEED, step);
    model_args a = {.out = dw, .x = x, .dz = dz, .pc = &pc};
    return model_impl_run(m, o, MODEL_BWD_WEIGHTS, &a, err);
}
