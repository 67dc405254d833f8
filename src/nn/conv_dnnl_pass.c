/* Building one pass of the dense convolution (conv_dnnl.c): the memory descriptors of one call,
 * oneDNN's primitive, the reorders around it, its workspace size, and the choice of split under a
 * workspace limit.
 *
 * Why splits: oneDNN's Winograd scratchpad holds the transformed tiles of the whole batch and,
 * for backward-weights, (threads + 1) copies of the transformed weights (36 Cin Cout floats each).
 * Measured here for ResNet-9 w=1 at batch 64: 138 MB (forward) and 178 MB (backward-weights) for
 * the 256 -> 512 channel layer, 160 MB for 512 -> 512 backward-weights even at batch 16. Chunks of
 * the batch shrink the tiles; slices of the written channels shrink both. Their cost, measured for
 * these layers at 2 threads: a 4-chunk forward 0-25 % slower than one call, a 4-slice one 30 %
 * (every slice transforms the whole input again), backward-weights 10-30 % (and it must add the
 * chunks' weight gradients) - still 2-4x faster than DIRECT. */
#include <stdint.h>
#include <string.h>

#include <dnnl_debug.h>

#include "conv_dnnl_internal.h"

sdgp_status conv_dnnl_ok(dnnl_status_t s, sdgp_error *err, const char *what) {
    if (s == dnnl_success) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s failed: %s (dnnl status %d)", what, dnnl_status2str(s),
                     (int)s);
}

static size_t scratch_of(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = pd ? dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0) : NULL;
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* n images x c channels of a B x H x W x C NHWC tensor, given as strides of the whole tensor: with
 * the data handle at the slice's first float, one descriptor serves every chunk and slice. */
static dnnl_status_t nhwc_slice(dnnl_memory_desc_t *md, int n, int c, int h, int w, int C) {
    dnnl_dims_t dims = {n, c, h, w}, strides = {(dnnl_dim_t)h * w * C, 1, (dnnl_dim_t)w * C, C};
    return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

/* o x i of Cout x Cin OIHW weights (a slice of rows or of columns); a grouped conv (never sliced):
 * its Cout x Cin/G OIHW weights as oneDNN's G x Cout/G x Cin/G x kh x kw. */
static dnnl_status_t oihw_slice(dnnl_memory_desc_t *md, int o, int i, int kh, int kw, int Cin, int G) {
    if (G > 1) {
        dnnl_dims_t dims = {G, o / G, i / G, kh, kw};
        return dnnl_memory_desc_init_by_tag(md, 5, dims, dnnl_f32, dnnl_goihw);
    }
    dnnl_dims_t dims = {o, i, kh, kw}, strides = {(dnnl_dim_t)Cin * kh * kw, (dnnl_dim_t)kh * kw, kw, 1};
    return dnnl_memory_desc_init_by_strides(md, 4, dims, dnnl_f32, strides);
}

/* The primitive descs of a pass while it is being built, and the layouts its primitive chose for
 * x, y and the (diff) weights (owned by pd). */
typedef struct {
    dnnl_primitive_desc_t pd, hint, w, w_add, x, y;
    const dnnl_memory_desc_t *xk, *yk, *wk;
} pass_pds;

static void pds_free(pass_pds *q) {
    dnnl_primitive_desc_t all[6] = {q->pd, q->hint, q->w, q->w_add, q->x, q->y};
    for (int i = 0; i < 6; i++)
        if (all[i]) dnnl_primitive_desc_destroy(all[i]);
}

static sdgp_status reorder_pd(dnnl_primitive_desc_t *pd, const dnnl_memory_desc_t *from, const dnnl_memory_desc_t *to,
                              dnnl_engine_t e, const_dnnl_primitive_attr_t attr, sdgp_error *err, const char *name) {
    return conv_dnnl_ok(dnnl_reorder_primitive_desc_create(pd, from, e, to, e, attr), err, name);
}

static sdgp_status make_reorder(conv_reorder *r, const_dnnl_primitive_desc_t pd, dnnl_engine_t e, sdgp_error *err) {
    if (!pd) return SDGP_OK;
    sdgp_status st = conv_dnnl_ok(dnnl_primitive_create(&r->prim, pd), err, r->name);
    if (st != SDGP_OK) return st;
    return conv_dnnl_ok(dnnl_memory_create(&r->scratch, dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0), e,
                                           DNNL_MEMORY_NONE),
                        err, r->name);
}

static sdgp_status make_mem(dnnl_memory_t *m, const dnnl_memory_desc_t *md, dnnl_engine_t e, sdgp_error *err) {
    return conv_dnnl_ok(dnnl_memory_create(m, md, e, DNNL_MEMORY_NONE), err, "memory create");
}

static const char *const pass_names[3] = {"forward", "backward-data", "backward-weights"};

/* The pass's primitive desc (and the forward hint the backward ones need), for one call's shapes. */
static sdgp_status primitive_pd(pass_pds *q, const conv_pass *p, const conv_ctx *ctx, const dnnl_memory_desc_t *xa,
                                const dnnl_memory_desc_t *ya, const dnnl_memory_desc_t *wany,
                                const dnnl_memory_desc_t *bias, const_dnnl_primitive_attr_t attr, sdgp_error *err) {
    const sdgp_conv_geom *g = &ctx->g;
    const dnnl_alg_kind_t alg = p->algo == SDGP_CONV_WINOGRAD ? dnnl_convolution_winograd : dnnl_convolution_direct;
    const dnnl_dims_t strides = {g->stride, g->stride}, pad = {g->pad, g->pad};
    dnnl_convolution_desc_t cd;
    /* Symmetric padding as PyTorch passes it; oneDNN accepts a right pad the floor division
     * leaves partly unused. Backward pds take a forward pd of the same shapes as hint. */
    sdgp_status st = conv_dnnl_ok(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, xa, wany,
                                                                     p->pass == SDGP_CONV_FORWARD ? bias : NULL, ya,
                                                                     strides, pad, pad),
                                  err, "forward desc");
    dnnl_primitive_desc_t *fwd = p->pass == SDGP_CONV_FORWARD ? &q->pd : &q->hint;
    dnnl_status_t s = st == SDGP_OK ? dnnl_primitive_desc_create(fwd, &cd, attr, ctx->engine, NULL) : dnnl_success;
    if (st == SDGP_OK && s == dnnl_success && p->pass == SDGP_CONV_BACKWARD_DATA) {
        st = conv_dnnl_ok(dnnl_convolution_backward_data_desc_init(&cd, alg, xa, wany, ya, strides, pad, pad), err,
                          "backward-data desc");
        if (st == SDGP_OK) s = dnnl_primitive_desc_create(&q->pd, &cd, attr, ctx->engine, q->hint);
    } else if (st == SDGP_OK && s == dnnl_success && p->pass == SDGP_CONV_BACKWARD_WEIGHTS) {
        st = conv_dnnl_ok(dnnl_convolution_backward_weights_desc_init(&cd, alg, xa, wany, bias, ya, strides, pad, pad),
                          err, "backward-weights desc");
        if (st == SDGP_OK) s = dnnl_primitive_desc_create(&q->pd, &cd, attr, ctx->engine, q->hint);
    }
    if (st != SDGP_OK) return st;
    if (s == dnnl_unimplemented)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "conv: oneDNN has no %s %s kernel for %dx%d kernels, stride %d, %d -> %d channels on this CPU",
                         p->algo == SDGP_CONV_WINOGRAD ? "Winograd" : "direct", pass_names[p->pass], g->kh, g->kw,
                         g->stride, g->Cin, g->Cout);
    return conv_dnnl_ok(s, err, pass_names[p->pass]);
}

/* Everything but the primitives: descs, layouts, sizes. */
static sdgp_status plan_pds(conv_pass *p, pass_pds *q, const conv_ctx *ctx, const dnnl_memory_desc_t *md_x,
                            const dnnl_memory_desc_t *md_y, const dnnl_memory_desc_t *md_w,
                            const dnnl_memory_desc_t *md_b, sdgp_error *err) {
    const sdgp_conv_geom *g = &ctx->g;
    const int wino = p->algo == SDGP_CONV_WINOGRAD;
    dnnl_memory_desc_t xa = *md_x, ya = *md_y, wany;
    dnnl_primitive_attr_t attr = NULL, add_attr = NULL;
    dnnl_post_ops_t sum = NULL;
    sdgp_status st;
    if ((st = conv_dnnl_ok(dnnl_memory_desc_init_by_tag(&wany, md_w->ndims, md_w->dims, dnnl_f32, dnnl_format_tag_any), err,
                           "weights desc")) ||
        (wino && ((st = conv_dnnl_ok(dnnl_memory_desc_init_by_tag(&xa, 4, md_x->dims, dnnl_f32, dnnl_format_tag_any),
                                     err, "src desc")) ||
                  (st = conv_dnnl_ok(dnnl_memory_desc_init_by_tag(&ya, 4, md_y->dims, dnnl_f32, dnnl_format_tag_any),
                                     err, "dst desc")))) ||
        (st = conv_dnnl_ok(dnnl_primitive_attr_create(&attr), err, "attr")) ||
        (st = conv_dnnl_ok(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), err, "attr")) ||
        (st = primitive_pd(q, p, ctx, &xa, &ya, &wany, ctx->with_bias ? md_b : NULL, attr, err)))
        goto done;

    const dnnl_query_t qx = p->pass == SDGP_CONV_BACKWARD_DATA ? dnnl_query_diff_src_md : dnnl_query_src_md;
    const dnnl_query_t qy = p->pass == SDGP_CONV_FORWARD ? dnnl_query_dst_md : dnnl_query_diff_dst_md;
    const dnnl_query_t qw = p->pass == SDGP_CONV_BACKWARD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md;
    const dnnl_memory_desc_t *xk = q->xk = dnnl_primitive_desc_query_md(q->pd, qx, 0);
    const dnnl_memory_desc_t *yk = q->yk = dnnl_primitive_desc_query_md(q->pd, qy, 0);
    const dnnl_memory_desc_t *wk = q->wk = dnnl_primitive_desc_query_md(q->pd, qw, 0);
    if (!xk || !yk || !wk) {
        st = sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s: missing descriptor", p->name);
        goto done;
    }
    size_t scratch = scratch_of(q->pd);
    if (!wino && (!dnnl_memory_desc_equal(xk, md_x) || !dnnl_memory_desc_equal(yk, md_y))) {
        /* DIRECT promises in-place NHWC; a kernel that wants another layout is a bug to report */
        st = sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s chose an activation layout other than NHWC", p->name);
        goto done;
    }
    if (wino) {
        int x_in = p->pass != SDGP_CONV_BACKWARD_DATA, y_in = p->pass != SDGP_CONV_FORWARD;
        p->xb_bytes = sdgp_align64(dnnl_memory_desc_get_size(xk));
        p->yb_bytes = sdgp_align64(dnnl_memory_desc_get_size(yk));
        if ((st = reorder_pd(&q->x, x_in ? md_x : xk, x_in ? xk : md_x, ctx->engine, attr, err, p->x_re.name)) ||
            (st = reorder_pd(&q->y, y_in ? md_y : yk, y_in ? yk : md_y, ctx->engine, attr, err, p->y_re.name)))
            goto done;
    }
    /* Chunked backward-weights adds each chunk's gradient to the caller's, through wmem even
     * when the primitive could write OIHW itself. */
    int add = p->pass == SDGP_CONV_BACKWARD_WEIGHTS && p->chunk < g->B;
    if (add || !dnnl_memory_desc_equal(wk, md_w)) {
        int to_user = p->pass == SDGP_CONV_BACKWARD_WEIGHTS;
        p->w_bytes = sdgp_align64(dnnl_memory_desc_get_size(wk));
        if ((st = reorder_pd(&q->w, to_user ? wk : md_w, to_user ? md_w : wk, ctx->engine, attr, err, p->w_re.name)))
            goto done;
        if (add && ((st = conv_dnnl_ok(dnnl_primitive_attr_clone(&add_attr, attr), err, "attr")) ||
                    (st = conv_dnnl_ok(dnnl_post_ops_create(&sum), err, "post-ops")) ||
                    (st = conv_dnnl_ok(dnnl_post_ops_append_sum(sum, 1.0f), err, "post-ops")) ||
                    (st = conv_dnnl_ok(dnnl_primitive_attr_set_post_ops(add_attr, sum), err, "post-ops")) ||
                    (st = reorder_pd(&q->w_add, wk, md_w, ctx->engine, add_attr, err, p->w_add.name))))
            goto done;
    }
    dnnl_primitive_desc_t re[4] = {q->w, q->w_add, q->x, q->y};
    for (int i = 0; i < 4; i++)
        if (scratch_of(re[i]) > scratch) scratch = scratch_of(re[i]);
    p->scratch_bytes = sdgp_align64(scratch);
done:
    if (sum) dnnl_post_ops_destroy(sum);
    if (add_attr) dnnl_primitive_attr_destroy(add_attr);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return st;
}

static sdgp_status make_prims(conv_pass *p, const pass_pds *q, const conv_ctx *ctx, const dnnl_memory_desc_t *md_x,
                              const dnnl_memory_desc_t *md_y, const dnnl_memory_desc_t *md_w,
                              const dnnl_memory_desc_t *md_b, sdgp_error *err) {
    dnnl_engine_t e = ctx->engine;
    sdgp_status st;
    if ((st = conv_dnnl_ok(dnnl_primitive_create(&p->prim, q->pd), err, p->name)) ||
        (st = make_mem(&p->scratch, dnnl_primitive_desc_query_md(q->pd, dnnl_query_scratchpad_md, 0), e, err)) ||
        (st = make_mem(&p->x, md_x, e, err)) || (st = make_mem(&p->y, md_y, e, err)) ||
        (st = make_mem(&p->w, md_w, e, err)) || (st = make_mem(&p->b, md_b, e, err)) ||
        (st = make_reorder(&p->w_re, q->w, e, err)) || (st = make_reorder(&p->w_add, q->w_add, e, err)) ||
        (st = make_reorder(&p->x_re, q->x, e, err)) || (st = make_reorder(&p->y_re, q->y, e, err)))
        return st;
    if (q->w && (st = make_mem(&p->wmem, q->wk, e, err))) return st;
    if (p->algo == SDGP_CONV_WINOGRAD && ((st = make_mem(&p->xb, q->xk, e, err)) || (st = make_mem(&p->yb, q->yk, e, err))))
        return st;
    return SDGP_OK;
}

static void set_names(conv_pass *p) {
    static const char *const prim[3] = {"forward convolution", "backward-data convolution",
                                        "backward-weights convolution"};
    p->name = prim[p->pass];
    p->w_re.name = p->pass == SDGP_CONV_BACKWARD_WEIGHTS ? "diff-weights reorder (oneDNN layout -> OIHW)"
                                                         : "weights reorder (OIHW -> oneDNN layout)";
    p->w_add.name = "diff-weights reorder adding a chunk (oneDNN layout -> OIHW)";
    p->x_re.name = p->pass == SDGP_CONV_BACKWARD_DATA ? "diff_src reorder (blocked -> NHWC)" : "src reorder (NHWC -> blocked)";
    p->y_re.name = p->pass == SDGP_CONV_FORWARD ? "dst reorder (blocked -> NHWC)" : "diff_dst reorder (NHWC -> blocked)";
}

/* Builds the pass with this split unless its workspace exceeds limit (0: none): then *fits = 0 and
 * p is left empty (its size in *bytes), without the cost of creating (jit-compiling) primitives. */
static sdgp_status pass_build(conv_pass *p, const conv_ctx *ctx, sdgp_conv_algo algo, int chunk, int parts,
                              size_t limit, size_t *bytes, int *fits, sdgp_error *err) {
    const sdgp_conv_geom *g = &ctx->g;
    const sdgp_conv_pass pass = p->pass;
    memset(p, 0, sizeof *p);
    p->pass = pass;
    p->algo = algo;
    p->chunk = chunk;
    p->parts = parts;
    set_names(p);
    p->slice = (pass == SDGP_CONV_BACKWARD_DATA ? g->Cin : g->Cout) / parts;
    const int ci = pass == SDGP_CONV_BACKWARD_DATA ? p->slice : g->Cin;
    const int co = pass == SDGP_CONV_BACKWARD_DATA ? g->Cout : p->slice;
    dnnl_memory_desc_t md_x, md_y, md_w, md_b;
    const dnnl_dims_t db = {co};
    pass_pds q = {0};
    sdgp_status st;
    if ((st = conv_dnnl_ok(nhwc_slice(&md_x, chunk, ci, g->H, g->W, g->Cin), err, "src desc")) ||
        (st = conv_dnnl_ok(nhwc_slice(&md_y, chunk, co, g->Ho, g->Wo, g->Cout), err, "dst desc")) ||
        (st = conv_dnnl_ok(oihw_slice(&md_w, co, ci, g->kh, g->kw, g->Cin, g->groups), err, "weights desc")) ||
        (st = conv_dnnl_ok(dnnl_memory_desc_init_by_tag(&md_b, 1, db, dnnl_f32, dnnl_x), err, "bias desc")) ||
        (st = plan_pds(p, &q, ctx, &md_x, &md_y, &md_w, &md_b, err)))
        goto done;
    *bytes = conv_pass_bytes(p);
    *fits = limit == 0 || *bytes <= limit;
    if (*fits) st = make_prims(p, &q, ctx, &md_x, &md_y, &md_w, &md_b, err);
done:
    if (st != SDGP_OK || !*fits) conv_pass_free(p);
    pds_free(&q);
    return st;
}

static sdgp_status pass_build_any(conv_pass *p, const conv_ctx *ctx, sdgp_conv_algo algo, int chunk, int parts,
                                  sdgp_error *err) {
    size_t bytes;
    int fits;
    return pass_build(p, ctx, algo, chunk, parts, 0, &bytes, &fits, err);
}

size_t conv_pass_bytes(const conv_pass *p) {
    return p->w_bytes + p->xb_bytes + p->yb_bytes + p->scratch_bytes + p->own_bytes;
}

typedef struct {
    int chunk, parts;
    double cost;
} split;

/* The work a split adds to one call, in transformed floats (a model, not a measurement): every
 * slice transforms the whole input again (B x tiles x the channels read), every chunk transforms
 * the weights again (Cin x Cout), backward-weights also reduces and adds each chunk's gradient
 * (counted twice). It ranks the splits of ResNet-9's layers as their measured times do (2 threads,
 * w=1, batch 64): 256 -> 256 at 16x16, backward-weights: 64 x 2 37.6 ms < 16 x 1 38.3 < 16 x 2 42.4
 * < 64 x 4 50; 512 -> 512 at 8x8, forward: 64 x 4 39.6 ~ 16 x 1 38.6 < 16 x 4 49 < 8 x 1 50. */
static double split_cost(const sdgp_conv_geom *g, sdgp_conv_pass pass, int chunk, int parts) {
    double tiles = (double)((g->Ho + 3) / 4) * ((g->Wo + 3) / 4);
    double read = pass == SDGP_CONV_BACKWARD_DATA ? g->Cout : g->Cin, chunks = g->B / chunk;
    double per_chunk = (double)g->Cin * g->Cout * (pass == SDGP_CONV_BACKWARD_WEIGHTS ? 2 : 1);
    return (parts - 1) * g->B * tiles * read + (chunks - 1) * per_chunk + 1e-3 * chunks * parts; /* ties: fewer calls */
}

/* oneDNN's Winograd: the splits, chunks that divide B, slices of multiples of 16 channels (oneDNN's
 * blocking), at most 16 calls, built in the order of split_cost until one fits. */
static sdgp_status plan_dnnl_winograd(conv_pass *p, const conv_ctx *ctx, sdgp_conv_algo algo, size_t limit,
                                      int fallback_direct, sdgp_error *err) {
    const sdgp_conv_geom *g = &ctx->g;
    const int B = g->B, wide = p->pass == SDGP_CONV_BACKWARD_DATA ? g->Cin : g->Cout;
    if (g->groups > 1)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "conv: oneDNN has no Winograd kernel for grouped convolutions (groups=%d)",
                         g->groups);
    split cand[64]; /* 50 for 16 calls */
    int n = 0;
    for (int chunks = 1; chunks <= 16; chunks++)
        for (int parts = 1; chunks * parts <= 16; parts++) {
            if (B % chunks || wide % parts || (parts > 1 && (wide / parts) % 16)) continue;
            cand[n].chunk = B / chunks, cand[n].parts = parts;
            cand[n++].cost = split_cost(g, p->pass, B / chunks, parts);
        }
    for (int i = 1; i < n; i++) /* insertion sort by cost; (B, 1) costs least and comes first */
        for (int j = i; j > 0 && cand[j].cost < cand[j - 1].cost; j--) {
            split t = cand[j];
            cand[j] = cand[j - 1], cand[j - 1] = t;
        }
    int best = -1;
    size_t best_bytes = SIZE_MAX;
    for (int i = 0; i < n; i++) {
        size_t bytes;
        int fits;
        sdgp_status st = pass_build(p, ctx, algo, cand[i].chunk, cand[i].parts, limit, &bytes, &fits, err);
        if (st == SDGP_ERR_UNSUPPORTED && i == 0) return st; /* no such kernel at all */
        if (st == SDGP_ERR_UNSUPPORTED) continue;             /* not for this split */
        if (st != SDGP_OK || fits) return st;
        if (bytes < best_bytes) best_bytes = bytes, best = i;
    }
    if (fallback_direct || best < 0) return pass_build_any(p, ctx, SDGP_CONV_DIRECT, B, 1, err);
    return pass_build_any(p, ctx, algo, cand[best].chunk, cand[best].parts, err);
}

/* sdgp's Winograd: one call whose workspace is U (forward, backward-data) or M and a chunk of tiles
 * sized to the limit (backward-weights); over the limit, DIRECT when allowed. */
static sdgp_status plan_sdgp_winograd(conv_pass *p, const conv_ctx *ctx, size_t limit, int fallback_direct,
                                      sdgp_error *err) {
    sdgp_status st = conv_sdgp_wino_plan(p, ctx, limit, err);
    if (st != SDGP_OK || !limit || conv_pass_bytes(p) <= limit || !fallback_direct) return st;
    conv_pass_free(p);
    return pass_build_any(p, ctx, SDGP_CONV_DIRECT, ctx->g.B, 1, err);
}

/* WINOGRAD's implementations in SDGP_WINOGRAD's order: the first that has a kernel for the pass.
 * Where none has, the error is oneDNN's. */
sdgp_status conv_pass_plan(conv_pass *p, const conv_ctx *ctx, sdgp_conv_algo algo, size_t limit, int fallback_direct,
                           sdgp_error *err) {
    if (algo == SDGP_CONV_DIRECT) return pass_build_any(p, ctx, SDGP_CONV_DIRECT, ctx->g.B, 1, err);
    const int order = ctx->wino_order;
    const int ours = order >= 0 && conv_sdgp_wino_supports(ctx, p->pass);
    if (order > 0 && ours) return plan_sdgp_winograd(p, ctx, limit, fallback_direct, err);
    sdgp_status st = plan_dnnl_winograd(p, ctx, algo, limit, fallback_direct, err);
    if (st == SDGP_ERR_UNSUPPORTED && ours) return plan_sdgp_winograd(p, ctx, limit, fallback_direct, err);
    return st;
}

static sdgp_status bind_view(dnnl_memory_t view, void *at, sdgp_error *err) {
    return view ? conv_dnnl_ok(dnnl_memory_set_data_handle(view, at), err, "workspace binding") : SDGP_OK;
}

sdgp_status conv_pass_bind(conv_pass *p, void *ws, sdgp_error *err) {
    conv_sdgp_wino_bind(p, ws);
    char *xb = (char *)ws + p->w_bytes, *yb = xb + p->xb_bytes, *scratch = yb + p->yb_bytes;
    dnnl_memory_t scratches[5] = {p->scratch, p->w_re.scratch, p->w_add.scratch, p->x_re.scratch, p->y_re.scratch};
    sdgp_status st;
    for (int i = 0; i < 5; i++)
        if ((st = bind_view(scratches[i], scratch, err))) return st;
    if ((st = bind_view(p->wmem, ws, err)) || (st = bind_view(p->xb, xb, err))) return st;
    return bind_view(p->yb, yb, err);
}

void conv_pass_free(conv_pass *p) {
    dnnl_primitive_t prims[5] = {p->prim, p->w_re.prim, p->w_add.prim, p->x_re.prim, p->y_re.prim};
    dnnl_memory_t mems[12] = {p->scratch, p->x,  p->y,  p->w,  p->b, p->wmem, p->w_re.scratch, p->w_add.scratch,
                              p->x_re.scratch, p->y_re.scratch, p->xb, p->yb};
    for (int i = 0; i < 5; i++)
        if (prims[i]) dnnl_primitive_destroy(prims[i]);
    for (int i = 0; i < 12; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    conv_sdgp_wino_free(p);
    const sdgp_conv_pass pass = p->pass;
    memset(p, 0, sizeof *p);
    p->pass = pass;
}
