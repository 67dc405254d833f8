/* The forward product of a conv with block-masked N:M weights (--weight-groups block16 | block32)
 * or masks along output channels (cout): one of the entries of the forward's implementation list
 * (model_fwd_impls):
 * oneDNN's dense forward on W~, the sparse-weight kernel (src/kernels/spfwd.c), which runs the
 * product over each block's kept input channels only, the same in the Winograd domain
 * (spfwd_wino.c; 3x3 stride-1 layers), or for the cout form the kernel vectorised over images that
 * feeds each loaded input to a group's kept output channels only (spcout.c; stride 1 or 2). Per layer,
 * by --sparse-kernel as for the data gradient: on = a sparse kernel wherever one runs (Winograd
 * where the layer has it: fewer multiplies by 2.25x), off = dense, auto and fastest = the fastest
 * of all, timed at start with the packing included (never slower than dense). The choice is part of
 * the choice text that checkpoints keep (model_tune.c), a letter per layer, so a resumed run
 * computes the same bits: the implementations differ in rounding. */
#include <string.h>

#include "model/model_internal.h"
#include "sdgp/sparse.h"

int model_fwd_supported(const sdgp_model *m, const op *o) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    if (o->kind != OP_CONV || !o->sparse_w || o->geom.groups != 1 || w->n >= w->m) return 0;
    return w->group == SDGP_WGROUP_COUT ? sdgp_sparse_fwd_cout_supports(&o->geom, w->n, w->m)
                                        : sdgp_weights_group_block(w->group) > 1;
}

/* ---- dense: oneDNN on W~ (or on the weights of a layer without a sparse forward) ---- */
static const char *dense_unsupported(const sdgp_model *m, const op *o) {
    (void)m;
    return o->fwd_ok ? NULL : "no block-masked or cout-form sparse weights";
}
static sdgp_status dense_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    return sdgp_conv_forward(o->dnnl, a->out, a->x, model_op_weights(m, o), NULL, err);
}

/* ---- the sparse-weight kernels: direct and Winograd (block masks), cout ---- */
static const char *block_unsupported(const sdgp_model *m, const op *o) {
    if (!o->fwd_ok || m->cfg.weights.group == SDGP_WGROUP_COUT) return "no block-masked sparse weights";
    return NULL;
}
static const char *wino_unsupported(const sdgp_model *m, const op *o) {
    const char *why = block_unsupported(m, o);
    return why ? why : sdgp_sparse_fwd_wino_supports(&o->geom) ? NULL : "not a 3x3 stride-1 conv with padding <= 2";
}
static const char *cout_unsupported(const sdgp_model *m, const op *o) {
    return o->fwd_ok && m->cfg.weights.group == SDGP_WGROUP_COUT ? NULL : "no cout-form sparse weights";
}
static sdgp_status direct_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    return sdgp_sparse_fwd_create((sdgp_sparse_fwd **)plan, &o->geom, w->n, w->m, sdgp_weights_group_block(w->group),
                                  m->cfg.prune.isa, m->cfg.threads, err);
}
/* the Winograd plan holds U, 4x the kept weights (19 MB at 512 channels): plans exist only for the
 * implementation in use (and while the tuner times) */
static sdgp_status wino_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    return sdgp_sparse_fwd_create_wino((sdgp_sparse_fwd **)plan, &o->geom, w->n, w->m, sdgp_weights_group_block(w->group), 4,
                                       m->cfg.prune.isa, m->cfg.threads, err);
}
static sdgp_status cout_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    return sdgp_sparse_fwd_create_cout((sdgp_sparse_fwd **)plan, &o->geom, w->n, w->m, m->cfg.prune.isa, m->cfg.threads, err);
}
static sdgp_status sparse_pack(sdgp_model *m, op *o, sdgp_error *err) {
    (void)m;
    sdgp_status st = sdgp_sparse_fwd_pack(o->plan[MODEL_FWD], o->w_eff, err);
    o->fwd_packed = st == SDGP_OK;
    return st;
}
static sdgp_status sparse_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    /* a failed pack (internal: W~ has the block form by construction) leaves the dense product */
    return o->fwd_packed ? sdgp_sparse_fwd_run(o->plan[MODEL_FWD], a->out, a->x, err) : dense_run(m, o, a, err);
}
static size_t sparse_workspace_bytes(const void *plan) { return sdgp_sparse_fwd_workspace_bytes(plan); }
static sdgp_status sparse_set_workspace(void *plan, void *ws, size_t bytes, sdgp_error *err) {
    return sdgp_sparse_fwd_set_workspace(plan, ws, bytes, err);
}
static void sparse_destroy(void *plan) { sdgp_sparse_fwd_destroy(plan); }

/* sdgp kernels: the plan's ISA path on the probe layer g (2:4, 16-channel blocks) */
static sdgp_status fwd_describe(int kind, const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    sdgp_sparse_fwd *p = NULL;
    sdgp_status st = kind == 'c'   ? sdgp_sparse_fwd_create_cout(&p, g, 2, 4, SDGP_ISA_AUTO, threads, err)
                     : kind == 'w' ? sdgp_sparse_fwd_create_wino(&p, g, 2, 4, 16, 4, SDGP_ISA_AUTO, threads, err)
                                   : sdgp_sparse_fwd_create(&p, g, 2, 4, 16, SDGP_ISA_AUTO, threads, err);
    if (st == SDGP_OK) model_describe_caches(sdgp_sparse_fwd_isa(p), out);
    sdgp_sparse_fwd_destroy(p);
    return st;
}
static sdgp_status direct_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    return fwd_describe('s', g, threads, out, err);
}
static sdgp_status wino_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    return fwd_describe('w', g, threads, out, err);
}
static sdgp_status cout_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    return fwd_describe('c', g, threads, out, err);
}

#define SPARSE .pass = MODEL_FWD, .sparse = 1, .pack = sparse_pack, .run = sparse_run, \
               .workspace_bytes = sparse_workspace_bytes, .set_workspace = sparse_set_workspace, .destroy = sparse_destroy
static const model_impl impl_cout = {SPARSE, .code = 'c', .name = "sparse-weights-cout", .unsupported = cout_unsupported,
                                     .create = cout_create, .describe = cout_describe};
static const model_impl impl_wino = {SPARSE, .code = 'w', .name = "sparse-weights-winograd", .unsupported = wino_unsupported,
                                     .create = wino_create, .describe = wino_describe};
static const model_impl impl_direct = {SPARSE, .code = 's', .name = "sparse-weights", .unsupported = block_unsupported,
                                       .create = direct_create, .describe = direct_describe};
#undef SPARSE
static const model_impl impl_dense = {.pass = MODEL_FWD, .code = 'd', .name = "dense", .onednn = 1,
                                      .unsupported = dense_unsupported, .run = dense_run};

/* In order of preference: under --sparse-kernel on the first sparse entry a layer supports runs
 * (the fewest multiplies: Winograd where the layer has it, by 2.25x). */
const model_impl *const model_fwd_impls[] = {&impl_cout, &impl_wino, &impl_direct, &impl_dense, NULL};

int model_fwd_allowed(const sdgp_model *m, const op *o, const model_impl *impl) {
    if (impl->unsupported(m, o)) return 0;
    switch (m->cfg.sparse) {
    case SDGP_SPARSE_OFF: return !impl->sparse;
    case SDGP_SPARSE_ON: return impl->sparse;
    default: return 1;
    }
}

void model_fwd_product(sdgp_model *m, op *o, float *z, const float *x) {
    /* failures would be internal: shapes were validated at build */
    model_args a = {.out = z, .x = x};
    if (o->impl[MODEL_FWD]) (void)o->impl[MODEL_FWD]->run(m, o, &a, NULL);
    else (void)dense_run(m, o, &a, NULL);
}

void model_fwd_pack(sdgp_model *m, op *o) {
    const model_impl *impl = o->impl[MODEL_FWD];
    if (impl && impl->pack) (void)impl->pack(m, o, NULL);
}

/* Every supported layer gets its implementation: the first allowed (on: the sparse kernel with the
 * fewest multiplies; off: dense); under auto and fastest model_tune times the others. The image
 * slot is the caller's: a conv on it stays dense under auto. */
sdgp_status model_fwd_setup(sdgp_model *m, sdgp_error *err) {
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        o->fwd_ok = model_fwd_supported(m, o);
        if (!o->fwd_ok) continue;
        const int tune = m->cfg.sparse != SDGP_SPARSE_ON && m->cfg.sparse != SDGP_SPARSE_OFF;
        st = tune && o->in == 0 ? model_impl_set(m, o, MODEL_FWD, &impl_dense, err) : model_impl_default(m, o, MODEL_FWD, err);
        if (st == SDGP_OK) model_fwd_pack(m, o);
    }
    return st == SDGP_OK ? model_conv_share_workspace(m, err) : st;
}
