/* The implementations of a pruned conv's data gradient, as one ordered list (oneDNN's
 * implementation lists are the model): each entry says which layers it supports under the model's
 * configuration, how to create its plan, and how to run. The model runs the entry a layer holds;
 * the per-layer tuner (model_tune.c) times every supported entry and keeps the fastest. Adding a
 * kernel is one entry here; nothing else branches on kernel kinds.
 *
 *   dense     prune dL/dO in the pixel domain to a dense tensor, then oneDNN's backward-data (its
 *             best algorithm for the layer: the dense baseline every sparse kernel must beat);
 *   sparse    prune in the pixel domain to the compressed form, then the N:M sparse kernel
 *             (src/kernels/spconv.c);
 *   sparse-fused  the same product with the pruning inside the kernel's packing (one read of dL/dO,
 *             no compressed tensor; sdgp_sparse_bwd_data_pruned): bitwise `sparse`, so the tuner may
 *             pick either without changing a bit of training;
 *   winograd  prune the F(2x2,3x3)-transformed dL/dO and run the sparse kernel on it
 *             (src/kernels/spwino.c): a different estimator of dL/dD, only under --sdgp-domain
 *             winograd or auto;
 *   pruned+sparse-weights  prune in the pixel domain to a dense tensor, then the sparse-weight
 *             data-gradient kernel (block-masked W~, src/kernels/spfwd_wino.c): skips W~'s zeros,
 *             not dL/dO's.
 * Layers that do not prune (no SDGP, or --sparse-kernel fastest keeping dL/dO exact) choose among
 * the entries that do not: unpruned (oneDNN) and sparse-weights (the sparse-weight kernel on the
 * exact dL/dO): a layer with block-masked weights and no SDGP holds one of these too. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/spconv_internal.h"
#include "kernels/spwino_internal.h"
#include "model/model_internal.h"
#include "sdgp/sparse.h"

static double now_ms(void) { return 1e3 * sdgp_now_s(); }

/* The pixel-domain pruning into the dense tensor (scratch2) or the compressed one (m->nm). */
static sdgp_status prune_pixels(sdgp_model *m, const op *o, const float *dz, const sdgp_prune_cfg *pc, int compressed,
                                double *prune_ms, sdgp_error *err) {
    double t0 = now_ms();
    m->nm.rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    m->nm.C = o->geom.Cout;
    sdgp_prune_cfg c = *pc;
    c.mask_line = o->geom.Wo; /* shared masks: blocks of pixels along a row of dL/dO */
    sdgp_status st = sdgp_prune(&c, dz, m->B, (int64_t)o->geom.Ho * o->geom.Wo, o->geom.Cout, compressed ? NULL : m->scratch2,
                                compressed ? &m->nm : NULL, err);
    *prune_ms = now_ms() - t0;
    return st;
}

/* ---- dense: pixel-domain pruning + oneDNN ---- */
static const char *any_layer(const sdgp_model *m, const op *o) {
    (void)m, (void)o;
    return NULL;
}
static sdgp_status dense_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_status st = prune_pixels(m, o, a->dz, a->pc, 0, &a->prune_ms, err);
    return st != SDGP_OK ? st : sdgp_conv_backward_data(o->dnnl, a->out, m->scratch2, model_op_weights(m, o), err);
}
static sdgp_status dense_pruned(sdgp_model *m, op *o, const float **used, sdgp_error *err) {
    (void)o, (void)err;
    *used = m->scratch2;
    return SDGP_OK;
}

/* ---- sparse: pixel-domain pruning + the N:M sparse kernel ---- */
/* the sparse kernel's layers: grouped ones too when each group of m lies in one conv group (a
 * grouped layer whose Cout/groups m does not divide prunes into the dense kernel) */
static const char *nm_within_groups(const sdgp_model *m, const op *o) {
    return (o->geom.Cout / o->geom.groups) % m->cfg.prune.m == 0 ? NULL : "m does not divide a conv group's output channels";
}
static sdgp_status sparse_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_prune_cfg *pc = &m->cfg.prune;
    sdgp_status st = sdgp_sparse_bwd_create((sdgp_sparse_bwd **)plan, &o->geom, pc->n, pc->m, pc->isa, m->cfg.threads, err);
    /* prune_pixels shares masks along rows of dL/dO (mask_line = Wo): the plan may rely on it */
    if (st == SDGP_OK && pc->mask_block > 1 && (st = sdgp_sparse_bwd_set_mask_block(*plan, pc->mask_block, err)) != SDGP_OK) {
        sdgp_sparse_bwd_destroy(*plan);
        *plan = NULL;
    }
    return st;
}
static sdgp_status sparse_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_sparse_bwd *plan = o->plan[MODEL_BWD_DATA];
    sdgp_status st = prune_pixels(m, o, a->dz, a->pc, 1, &a->prune_ms, err);
    if (st == SDGP_OK) st = sdgp_sparse_bwd_pack(plan, model_op_weights(m, o), err);
    return st != SDGP_OK ? st : sdgp_sparse_bwd_data(plan, a->out, &m->nm, err);
}
static sdgp_status sparse_pruned(sdgp_model *m, op *o, const float **used, sdgp_error *err) {
    (void)o;
    *used = m->scratch2;
    return sdgp_nm_decompress(&m->nm, m->scratch2, err);
}
static void sparse_destroy(void *plan) { sdgp_sparse_bwd_destroy(plan); }

/* ---- sparse-fused: the sparse kernel pruning dL/dO as it packs it ---- */
typedef struct {
    sdgp_sparse_bwd *bwd;
    sdgp_prune_cfg pc; /* the last run's pruning, for the dz hook */
} fused_plan;

static sdgp_status fused_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    fused_plan *f = calloc(1, sizeof *f);
    if (!f) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory for a fused plan");
    const sdgp_prune_cfg *pc = &m->cfg.prune;
    sdgp_status st = sdgp_sparse_bwd_create(&f->bwd, &o->geom, pc->n, pc->m, pc->isa, m->cfg.threads, err);
    if (st == SDGP_OK && pc->mask_block > 1 && (st = sdgp_sparse_bwd_set_mask_block(f->bwd, pc->mask_block, err)) != SDGP_OK)
        sdgp_sparse_bwd_destroy(f->bwd);
    if (st != SDGP_OK) {
        free(f);
        return st;
    }
    *plan = f;
    return SDGP_OK;
}
static sdgp_status fused_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    fused_plan *f = o->plan[MODEL_BWD_DATA]; /* the pruning's time is the kernel's */
    f->pc = *a->pc;
    f->pc.mask_line = o->geom.Wo; /* as prune_pixels: blocks of pixels along a row of dL/dO */
    sdgp_status st = sdgp_sparse_bwd_pack(f->bwd, model_op_weights(m, o), err);
    return st != SDGP_OK ? st : sdgp_sparse_bwd_data_pruned(f->bwd, a->out, a->dz, &f->pc, err);
}
static sdgp_status fused_pruned(sdgp_model *m, op *o, const float **used, sdgp_error *err) {
    const fused_plan *f = o->plan[MODEL_BWD_DATA]; /* the tensor the kernel used, made again: pruning is deterministic */
    sdgp_status st = sdgp_prune(&f->pc, *used, m->B, (int64_t)o->geom.Ho * o->geom.Wo, o->geom.Cout, m->scratch2, NULL, err);
    if (st == SDGP_OK) *used = m->scratch2;
    return st;
}
static void fused_destroy(void *plan) {
    fused_plan *f = plan;
    if (f) sdgp_sparse_bwd_destroy(f->bwd);
    free(f);
}

/* ---- winograd: F(2x2,3x3)-domain pruning fused with the sparse kernel ---- */
static const char *wino_unsupported(const sdgp_model *m, const op *o) {
    (void)m;
    return sdgp_sparse_wino_supports(&o->geom) ? NULL : "not an ungrouped 3x3 stride-1 conv with padding <= 2";
}
static sdgp_status wino_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_prune_cfg *pc = &m->cfg.prune;
    return sdgp_sparse_wino_create((sdgp_sparse_wino **)plan, &o->geom, pc->n, pc->m, pc->isa, m->cfg.threads, err);
}
static sdgp_status wino_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_sparse_wino *plan = o->plan[MODEL_BWD_DATA]; /* the pruning's time is the kernel's */
    sdgp_status st = sdgp_sparse_wino_pack(plan, model_op_weights(m, o), err);
    return st != SDGP_OK ? st : sdgp_sparse_wino_data(plan, a->out, a->dz, a->pc, err);
}
static sdgp_status wino_pruned(sdgp_model *m, op *o, const float **used, sdgp_error *err) {
    (void)m, (void)o, (void)err;
    *used = NULL; /* the pruned tensor is V, in the transformed domain */
    return SDGP_OK;
}
static void wino_destroy(void *plan) { sdgp_sparse_wino_destroy(plan); }

/* ---- sparse-weights: block-masked W~ (S-STE / SR-STE, --weight-groups block16 | block32) by the
 * sparse-weight kernel in the Winograd domain F(4x4), on the exact or the pixel-pruned dL/dO ---- */
static const char *wdata_unsupported(const sdgp_model *m, const op *o) {
    /* block masks only: the cout form's data gradient keeps a mask per output row of its product */
    if (!model_fwd_supported(m, o) || sdgp_weights_group_block(m->cfg.weights.group) <= 1)
        return "no block-masked sparse weights (--weight-groups block16 | block32)";
    return sdgp_sparse_wdata_supports(&o->geom) ? NULL : "not an ungrouped 3x3 stride-1 conv with padding <= 2";
}
static sdgp_status wdata_create(sdgp_model *m, const op *o, void **plan, sdgp_error *err) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    return sdgp_sparse_wdata_create((sdgp_sparse_wdata **)plan, &o->geom, w->n, w->m, sdgp_weights_group_block(w->group), 4,
                                    m->cfg.prune.isa, m->cfg.threads, err);
}
/* W~ changes every step: packed here, once per step (the layer's one data-gradient product) */
static sdgp_status wdata_product(op *o, float *dx, const float *dz, const float *w, sdgp_error *err) {
    sdgp_sparse_wdata *plan = o->plan[MODEL_BWD_DATA];
    sdgp_status st = sdgp_sparse_wdata_pack(plan, w, err);
    return st != SDGP_OK ? st : sdgp_sparse_wdata_run(plan, dx, dz, err);
}
static sdgp_status wdata_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    return wdata_product(o, a->out, a->dz, model_op_weights(m, o), err);
}
static sdgp_status wdata_pruned_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    sdgp_status st = prune_pixels(m, o, a->dz, a->pc, 0, &a->prune_ms, err);
    return st != SDGP_OK ? st : wdata_product(o, a->out, m->scratch2, model_op_weights(m, o), err);
}
static void wdata_destroy(void *plan) { sdgp_sparse_wdata_destroy(plan); }

/* ---- unpruned: --sparse-kernel fastest keeps a layer's exact dL/dO where no sparse kernel beats
 * the plain dense step (pruning into the dense kernel would only add the pruning's cost) ---- */
static sdgp_status unpruned_run(sdgp_model *m, op *o, model_args *a, sdgp_error *err) {
    return sdgp_conv_backward_data(o->dnnl, a->out, a->dz, model_op_weights(m, o), err);
}
static sdgp_status unpruned_dz(sdgp_model *m, op *o, const float **used, sdgp_error *err) {
    (void)m, (void)o, (void)used, (void)err; /* *used stays dz itself */
    return SDGP_OK;
}

/* ---- sdgp kernels: the plans' ISA paths and blockings on the probe layer g ---- */
static sdgp_status sparse_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    sdgp_sparse_bwd *p = NULL;
    sdgp_status st = sdgp_sparse_bwd_create(&p, g, 2, 4, SDGP_ISA_AUTO, threads, err);
    if (st != SDGP_OK) return st;
    snprintf(out->isa, sizeof out->isa, "%s", sdgp_isa_name(sdgp_sparse_bwd_isa(p)));
    spconv_describe(p, out->blocking, sizeof out->blocking);
    sdgp_sparse_bwd_destroy(p);
    return SDGP_OK;
}
static sdgp_status wino_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    sdgp_sparse_wino *p = NULL;
    sdgp_status st = sdgp_sparse_wino_create(&p, g, 2, 4, SDGP_ISA_AUTO, threads, err);
    if (st != SDGP_OK) return st;
    snprintf(out->isa, sizeof out->isa, "%s", sdgp_isa_name(sdgp_sparse_wino_isa(p)));
    spwino_describe(p, out->blocking, sizeof out->blocking);
    sdgp_sparse_wino_destroy(p);
    return SDGP_OK;
}
static sdgp_status wdata_describe(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err) {
    sdgp_sparse_wdata *p = NULL;
    sdgp_status st = sdgp_sparse_wdata_create(&p, g, 2, 4, 16, 4, SDGP_ISA_AUTO, threads, err);
    if (st != SDGP_OK) return st;
    model_describe_caches(sdgp_sparse_wdata_isa(p), out);
    sdgp_sparse_wdata_destroy(p);
    return SDGP_OK;
}

#define ENTRY .pass = MODEL_BWD_DATA /* .domain: SDGP_DOMAIN_PIXEL (0) unless said */
static const model_impl impl_dense = {ENTRY, .code = 'd', .name = "dense", .prunes = 1, .onednn = 1, .unsupported = any_layer,
                                      .run = dense_run, .pruned_dz = dense_pruned};
static const model_impl impl_sparse = {ENTRY, .code = 's', .name = "sparse", .sparse = 1, .prunes = 1,
                                       .unsupported = nm_within_groups, .create = sparse_create, .run = sparse_run,
                                       .pruned_dz = sparse_pruned, .destroy = sparse_destroy, .describe = sparse_describe};
static const model_impl impl_fused = {ENTRY, .code = 'f', .name = "sparse-fused", .sparse = 1, .prunes = 1,
                                      .unsupported = nm_within_groups, .create = fused_create, .run = fused_run,
                                      .pruned_dz = fused_pruned, .destroy = fused_destroy, .describe = sparse_describe};
static const model_impl impl_wino = {ENTRY, .code = 'w', .name = "winograd", .sparse = 1, .prunes = 1,
                                     .domain = SDGP_DOMAIN_WINOGRAD, .unsupported = wino_unsupported, .create = wino_create,
                                     .run = wino_run, .pruned_dz = wino_pruned, .destroy = wino_destroy,
                                     .describe = wino_describe};
static const model_impl impl_wdata_pruned = {ENTRY, .code = 'v', .name = "pruned+sparse-weights", .sparse = 1, .prunes = 1,
                                             .wsparse = 1, .unsupported = wdata_unsupported, .create = wdata_create,
                                             .run = wdata_pruned_run, .pruned_dz = dense_pruned, .destroy = wdata_destroy,
                                             .describe = wdata_describe};
static const model_impl impl_wdata = {ENTRY, .code = 'x', .name = "sparse-weights", .sparse = 1, .wsparse = 1,
                                      .unsupported = wdata_unsupported, .create = wdata_create, .run = wdata_run,
                                      .pruned_dz = unpruned_dz, .destroy = wdata_destroy, .describe = wdata_describe};
static const model_impl impl_unpruned = {ENTRY, .code = 'u', .name = "unpruned", .onednn = 1, .unsupported = any_layer,
                                         .run = unpruned_run, .pruned_dz = unpruned_dz};
#undef ENTRY

/* In order of preference: the first allowed entry is the layer's choice without tuning (so
 * --sdgp-domain winograd puts the Winograd domain first, and a layer that does not prune takes the
 * sparse-weight kernel before oneDNN), and ties in tuning go to the earlier. */
const model_impl *const model_bwd_impls[] = {&impl_wino, &impl_sparse, &impl_fused, &impl_wdata_pruned, &impl_dense,
                                             &impl_wdata, &impl_unpruned, NULL};

/* Whether some sparse entry that prunes as layer o does (of the Winograd domain only, when
 * winograd_domain) can run it. */
static int sparse_applies(const sdgp_model *m, const op *o, int winograd_domain) {
    for (int i = 0; model_bwd_impls[i]; i++) {
        const model_impl *impl = model_bwd_impls[i];
        if (impl->sparse && impl->prunes == o->prune && (!winograd_domain || impl->domain == SDGP_DOMAIN_WINOGRAD) &&
            !impl->unsupported(m, o))
            return 1;
    }
    return 0;
}

int model_bwd_allowed(const sdgp_model *m, const op *o, const model_impl *impl) {
    if (impl->unsupported(m, o)) return 0;
    /* --sparse-kernel off: no sparse entry; on: a sparse entry wherever one applies */
    if ((m->cfg.sparse == SDGP_SPARSE_OFF && impl->sparse) ||
        (m->cfg.sparse == SDGP_SPARSE_ON && !impl->sparse && sparse_applies(m, o, 0) && impl->prunes == o->prune))
        return 0;
    if (!o->prune) return !impl->prunes; /* exact dL/dO: the entries that keep it */
    /* fastest: a sparse kernel or no pruning at all (never pruning into the dense kernel); the
     * other modes always prune */
    if (m->cfg.sparse == SDGP_SPARSE_FASTEST) {
        if (impl == &impl_dense) return 0;
        if (!impl->prunes) return 1;
    } else if (!impl->prunes) {
        return 0;
    }
    switch (m->cfg.domain) {
    case SDGP_DOMAIN_PIXEL: return impl->domain == SDGP_DOMAIN_PIXEL;
    case SDGP_DOMAIN_WINOGRAD: return impl->domain == SDGP_DOMAIN_WINOGRAD || !sparse_applies(m, o, 1);
    default: return 1;
    }
}

int model_bwd_wanted(const sdgp_model *m, const op *o) {
    return o->prune || (m->cfg.sparse != SDGP_SPARSE_OFF && sparse_applies(m, o, 0));
}

const char *const sdgp_prune_domain_names[] = {"pixel", "winograd", "auto", NULL};
const char *const sdgp_sparse_mode_names[] = {"auto", "on", "off", "fastest", NULL};

const char *sdgp_prune_domain_name(sdgp_prune_domain d) {
    return (unsigned)d <= SDGP_DOMAIN_AUTO ? sdgp_prune_domain_names[d] : "?";
}

sdgp_status sdgp_prune_domain_parse(const char *name, sdgp_prune_domain *out, sdgp_error *err) {
    for (int i = 0; sdgp_prune_domain_names[i]; i++)
        if (name && !strcmp(name, sdgp_prune_domain_names[i])) {
            *out = (sdgp_prune_domain)i;
            return SDGP_OK;
        }
    return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp domain '%s' is not pixel, winograd or auto", name ? name : "(null)");
}
