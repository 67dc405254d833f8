/* The dense convolution of include/sdgp/conv.h through oneDNN's C API (2.x).
 *
 * One sdgp_conv holds, for one geometry: a CPU engine and stream, the three convolution
 * primitives (forward, backward-data, backward-weights), and for each the weights in the layout
 * oneDNN chose (format_tag any) plus the reorder between that layout and the caller's OIHW.
 * Weights change every step, so the forward and backward-data calls reorder OIHW -> chosen layout
 * on every call, and backward-weights computes into its chosen layout and reorders back to OIHW.
 * DIRECT: activations are passed to oneDNN as plain NHWC (the caller's memory, no copies): its jit
 * kernels take NHWC fp32 directly on AVX2/AVX-512, so we ask for exactly that layout.
 * WINOGRAD: oneDNN's Winograd kernel only takes its blocked layout (nChw16c), so the activations
 * are asked for as format_tag any and each call reorders the caller's NHWC tensors into blocked
 * copies in the workspace (and the result back). Measured on this 2-core AVX-512 CPU for the
 * ResNet-9 layers (3x3, 64-512 channels, 4x4 to 32x32 pixels): each direction 1.5-2.5x faster than
 * DIRECT; one reorder costs 1-25 % of a direction's time (the most for 32x32 images, whose tensors
 * do not fit in the caches).
 *
 * Workspace: the primitives' scratchpads (user mode), the weights in oneDNN's layouts and (WINOGRAD)
 * the blocked activation copies are needed only during a call, so they live in one buffer,
 * [weights | blocked x | blocked y | scratchpads]: the three directions and the reorders take
 * turns in it (calls run one after another on one stream). By default the
 * conv owns that buffer; sdgp_conv_set_workspace lets convs that never run at the same time (the
 * layers of one model) share one, which saves about two copies of the weights plus all but one
 * scratchpad per model. One sdgp_conv must therefore not be used from two threads at once.
 *
 * Threads: oneDNN's OpenMP runtime sizes its parallel regions by omp_get_max_threads() of the
 * calling thread, both when a primitive is created (it fixes the work split) and when it runs.
 * With threads > 0, create and every call set that value to `threads` for their duration and
 * restore the caller's value before returning; threads == 0 leaves the caller's setting alone. */
#include "sdgp/conv.h"

#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <dnnl.h>
#include <dnnl_debug.h>

/* One convolution direction: the primitive and its weights-layout handling. */
typedef struct {
    dnnl_primitive_desc_t pd;  /* kept only while creating */
    dnnl_primitive_desc_t wpd; /* the weights reorder's pd, while creating (NULL: no reorder) */
    dnnl_primitive_t prim;
    dnnl_memory_t scratch;     /* the primitive's scratchpad, a view into the workspace */
    dnnl_memory_t wmem;        /* (diff) weights in the primitive's layout; NULL when that is OIHW */
    dnnl_primitive_t wreorder; /* OIHW -> wmem (forward, backward-data) or wmem -> OIHW (backward-weights) */
    dnnl_memory_t wscratch;    /* the reorder's scratchpad view */
    const char *wreorder_name; /* for error messages */
} conv_dir;

/* WINOGRAD: one activation reorder between the caller's NHWC and the blocked copy. */
typedef struct {
    dnnl_primitive_desc_t pd; /* kept only while creating */
    dnnl_primitive_t prim;
    dnnl_memory_t scratch; /* its scratchpad, a view into the workspace */
    const char *name;
} act_reorder;

struct sdgp_conv {
    sdgp_conv_geom g;
    int with_bias, threads;
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    /* The caller's tensors; data handles are set on every call. x also serves as diff_src and y
     * as diff_dst (same NHWC descriptors). */
    dnnl_memory_t x, y, w, b;
    conv_dir fwd, bwd_data, bwd_weights;
    sdgp_conv_algo algo;
    /* WINOGRAD only (NULL / 0 for DIRECT): x and y (also diff_src, diff_dst) in the blocked
     * layout, views into the workspace, and the reorders x -> xb, xb -> x, y -> yb, yb -> y. */
    dnnl_memory_t xb, yb;
    act_reorder x_in, x_out, y_in, y_out;
    /* the workspace, [weights | xb | yb | scratchpads], each part rounded up to 64 bytes */
    size_t wbytes, xb_bytes, yb_bytes, scratch_bytes;
    void *own_ws;                 /* the conv's own workspace (NULL while a shared one is set) */
    void *ws;                     /* the workspace in use */
    float *dbias_sink; /* receives dbias when the caller passes dbias = NULL (with_bias only) */
};

static sdgp_status dnnl_ok(dnnl_status_t s, sdgp_error *err, const char *what) {
    if (s == dnnl_success) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s failed: %s (dnnl status %d)", what, dnnl_status2str(s),
                     (int)s);
}

/* Sets the OpenMP team size for oneDNN (threads > 0) and returns the value to restore. */
static int threads_enter(int threads) {
    int saved = omp_get_max_threads();
    if (threads > 0) omp_set_num_threads(threads);
    return saved;
}
static void threads_leave(int threads, int saved) {
    if (threads > 0) omp_set_num_threads(saved);
}

/* The geometry must be one sdgp_conv_geom_init accepts; checking it again keeps a hand-filled
 * struct from reaching oneDNN with inconsistent output sizes. */
static sdgp_status check_geom(const sdgp_conv_geom *g, sdgp_error *err) {
    sdgp_conv_geom chk;
    sdgp_status st = sdgp_conv_geom_init(&chk, g->B, g->H, g->W, g->Cin, g->Cout, g->kh, g->kw, g->stride, g->pad, err);
    if (st != SDGP_OK) return st;
    if (chk.Ho != g->Ho || chk.Wo != g->Wo)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: output %dx%d does not match the geometry (expected %dx%d)",
                         g->Ho, g->Wo, chk.Ho, chk.Wo);
    return SDGP_OK;
}

static size_t pd_scratch_bytes(const_dnnl_primitive_desc_t pd) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    return md ? dnnl_memory_desc_get_size(md) : 0;
}

/* Phase 1 for one direction: given its pd, plans the reorder between the chosen weights layout
 * (query wq) and OIHW. to_user: the reorder goes chosen -> OIHW (diff weights). */
static sdgp_status dir_plan(conv_dir *d, sdgp_conv *c, dnnl_query_t wq, int to_user, const dnnl_memory_desc_t *md_oihw,
                            const_dnnl_primitive_attr_t attr, size_t *scratch_max, sdgp_error *err, const char *name) {
    const dnnl_memory_desc_t *md_w = dnnl_primitive_desc_query_md(d->pd, wq, 0);
    if (!md_w) return sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s: no weights descriptor", name);
    size_t s = pd_scratch_bytes(d->pd);
    if (s > *scratch_max) *scratch_max = s;
    if (dnnl_memory_desc_equal(md_w, md_oihw)) return SDGP_OK;
    size_t wb = (dnnl_memory_desc_get_size(md_w) + 63) / 64 * 64;
    if (wb > c->wbytes) c->wbytes = wb;
    sdgp_status st = dnnl_ok(dnnl_memory_create(&d->wmem, md_w, c->engine, DNNL_MEMORY_NONE), err, name);
    if (st != SDGP_OK) return st;
    const dnnl_memory_desc_t *from = to_user ? md_w : md_oihw, *to = to_user ? md_oihw : md_w;
    st = dnnl_ok(dnnl_reorder_primitive_desc_create(&d->wpd, from, c->engine, to, c->engine, attr), err,
                 d->wreorder_name);
    if (st != SDGP_OK) return st;
    s = pd_scratch_bytes(d->wpd);
    if (s > *scratch_max) *scratch_max = s;
    return SDGP_OK;
}

/* Phase 2: the primitives and their workspace views (bound to a buffer by bind_workspace). */
static sdgp_status dir_build(conv_dir *d, sdgp_conv *c, sdgp_error *err, const char *name) {
    sdgp_status st = dnnl_ok(dnnl_primitive_create(&d->prim, d->pd), err, name);
    if (st != SDGP_OK) return st;
    st = dnnl_ok(dnnl_memory_create(&d->scratch, dnnl_primitive_desc_query_md(d->pd, dnnl_query_scratchpad_md, 0),
                                    c->engine, DNNL_MEMORY_NONE),
                 err, name);
    if (st != SDGP_OK) return st;
    if (d->wpd) {
        st = dnnl_ok(dnnl_primitive_create(&d->wreorder, d->wpd), err, d->wreorder_name);
        if (st != SDGP_OK) return st;
        st = dnnl_ok(dnnl_memory_create(&d->wscratch, dnnl_primitive_desc_query_md(d->wpd, dnnl_query_scratchpad_md, 0),
                                        c->engine, DNNL_MEMORY_NONE),
                     err, d->wreorder_name);
        if (st != SDGP_OK) return st;
    }
    return SDGP_OK;
}

static sdgp_status bind_view(dnnl_memory_t view, void *at, sdgp_error *err) {
    return view ? dnnl_ok(dnnl_memory_set_data_handle(view, at), err, "workspace binding") : SDGP_OK;
}

/* Points every direction's weights memory at the start of ws, the blocked activations after them,
 * and all scratchpads after those. */
static sdgp_status bind_workspace(sdgp_conv *c, void *ws, sdgp_error *err) {
    c->ws = ws;
    char *xb = (char *)ws + c->wbytes, *yb = xb + c->xb_bytes, *scratch = yb + c->yb_bytes;
    sdgp_status st;
    conv_dir *dirs[3] = {&c->fwd, &c->bwd_data, &c->bwd_weights};
    for (int i = 0; i < 3; i++)
        if ((st = bind_view(dirs[i]->wmem, ws, err)) || (st = bind_view(dirs[i]->scratch, scratch, err)) ||
            (st = bind_view(dirs[i]->wscratch, scratch, err)))
            return st;
    act_reorder *ar[4] = {&c->x_in, &c->x_out, &c->y_in, &c->y_out};
    for (int i = 0; i < 4; i++)
        if ((st = bind_view(ar[i]->scratch, scratch, err))) return st;
    if ((st = bind_view(c->xb, xb, err))) return st;
    return bind_view(c->yb, yb, err);
}

static void dir_free(conv_dir *d) {
    if (d->pd) dnnl_primitive_desc_destroy(d->pd);
    if (d->wpd) dnnl_primitive_desc_destroy(d->wpd);
    if (d->prim) dnnl_primitive_destroy(d->prim);
    if (d->wreorder) dnnl_primitive_destroy(d->wreorder);
    if (d->scratch) dnnl_memory_destroy(d->scratch);
    if (d->wmem) dnnl_memory_destroy(d->wmem);
    if (d->wscratch) dnnl_memory_destroy(d->wscratch);
}

static void act_reorder_free(act_reorder *r) {
    if (r->pd) dnnl_primitive_desc_destroy(r->pd);
    if (r->prim) dnnl_primitive_destroy(r->prim);
    if (r->scratch) dnnl_memory_destroy(r->scratch);
    r->pd = NULL;
}

/* WINOGRAD: plans the reorder from -> to (one of them the caller's NHWC) and counts its scratchpad. */
static sdgp_status act_reorder_plan(act_reorder *r, sdgp_conv *c, const dnnl_memory_desc_t *from,
                                    const dnnl_memory_desc_t *to, const_dnnl_primitive_attr_t attr, size_t *scratch_max,
                                    sdgp_error *err) {
    sdgp_status st = dnnl_ok(dnnl_reorder_primitive_desc_create(&r->pd, from, c->engine, to, c->engine, attr), err,
                             r->name);
    if (st != SDGP_OK) return st;
    size_t s = pd_scratch_bytes(r->pd);
    if (s > *scratch_max) *scratch_max = s;
    return SDGP_OK;
}

static sdgp_status act_reorder_build(act_reorder *r, sdgp_conv *c, sdgp_error *err) {
    sdgp_status st = dnnl_ok(dnnl_primitive_create(&r->prim, r->pd), err, r->name);
    if (st != SDGP_OK) return st;
    return dnnl_ok(dnnl_memory_create(&r->scratch, dnnl_primitive_desc_query_md(r->pd, dnnl_query_scratchpad_md, 0),
                                      c->engine, DNNL_MEMORY_NONE),
                   err, r->name);
}

/* DIRECT: the activations oneDNN will read/write must be the plain NHWC of the caller. WINOGRAD:
 * every direction must use the forward's blocked layouts (the copies are shared). */
static sdgp_status check_act(const_dnnl_primitive_desc_t pd, dnnl_query_t q, const dnnl_memory_desc_t *want,
                             sdgp_error *err, const char *name) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, q, 0);
    if (md && want && dnnl_memory_desc_equal(md, want)) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "conv: oneDNN %s chose an activation layout other than the expected one",
                     name);
}

/* A primitive desc of the requested algorithm; "no such kernel" is UNSUPPORTED, not a bug. */
static sdgp_status create_pd(dnnl_primitive_desc_t *pd, const void *desc, const_dnnl_primitive_attr_t attr,
                             sdgp_conv *c, const_dnnl_primitive_desc_t hint, sdgp_error *err, const char *name) {
    dnnl_status_t s = dnnl_primitive_desc_create(pd, desc, attr, c->engine, hint);
    if (s == dnnl_unimplemented)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "conv: oneDNN has no %s %s kernel for %dx%d kernels, stride %d, %d -> %d channels on this CPU",
                         c->algo == SDGP_CONV_WINOGRAD ? "Winograd" : "direct", name, c->g.kh, c->g.kw, c->g.stride,
                         c->g.Cin, c->g.Cout);
    return dnnl_ok(s, err, name);
}

static sdgp_status conv_build(sdgp_conv *c, sdgp_error *err) {
    const sdgp_conv_geom *g = &c->g;
    dnnl_memory_desc_t md_x, md_y, md_x_act, md_y_act, md_w_any, md_w_oihw, md_b;
    const dnnl_format_tag_t act_tag = c->algo == SDGP_CONV_WINOGRAD ? dnnl_format_tag_any : dnnl_nhwc;
    const dnnl_alg_kind_t alg = c->algo == SDGP_CONV_WINOGRAD ? dnnl_convolution_winograd : dnnl_convolution_direct;
    const dnnl_dims_t dx = {g->B, g->Cin, g->H, g->W}, dy = {g->B, g->Cout, g->Ho, g->Wo};
    const dnnl_dims_t dw = {g->Cout, g->Cin, g->kh, g->kw}, db = {g->Cout};
    /* Symmetric padding as PyTorch passes it; oneDNN accepts a right pad the floor division
     * leaves partly unused. */
    const dnnl_dims_t strides = {g->stride, g->stride}, pad = {g->pad, g->pad};
    sdgp_status st;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_convolution_desc_t cd;
    size_t scratch_max = 0;

    if ((st = dnnl_ok(dnnl_engine_create(&c->engine, dnnl_cpu, 0), err, "engine create")) ||
        (st = dnnl_ok(dnnl_stream_create(&c->stream, c->engine, dnnl_stream_default_flags), err, "stream create")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_x, 4, dx, dnnl_f32, dnnl_nhwc), err, "src memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_y, 4, dy, dnnl_f32, dnnl_nhwc), err, "dst memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_x_act, 4, dx, dnnl_f32, act_tag), err, "src memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_y_act, 4, dy, dnnl_f32, act_tag), err, "dst memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_w_any, 4, dw, dnnl_f32, dnnl_format_tag_any), err,
                      "weights memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_w_oihw, 4, dw, dnnl_f32, dnnl_oihw), err, "OIHW memory desc")) ||
        (st = dnnl_ok(dnnl_memory_desc_init_by_tag(&md_b, 1, db, dnnl_f32, dnnl_x), err, "bias memory desc")) ||
        (st = dnnl_ok(dnnl_primitive_attr_create(&attr), err, "attr create")) ||
        (st = dnnl_ok(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user), err, "attr scratchpad")))
        goto done;
    const dnnl_memory_desc_t *bias = c->with_bias ? &md_b : NULL;

    /* Backward pds take the forward pd as hint, so all three agree on the weights layout when
     * oneDNN can. */
    if ((st = dnnl_ok(dnnl_convolution_forward_desc_init(&cd, dnnl_forward_training, alg, &md_x_act, &md_w_any, bias,
                                                         &md_y_act, strides, pad, pad),
                      err, "forward desc")) ||
        (st = create_pd(&c->fwd.pd, &cd, attr, c, NULL, err, "forward")) ||
        (st = dnnl_ok(dnnl_convolution_backward_data_desc_init(&cd, alg, &md_x_act, &md_w_any, &md_y_act, strides, pad,
                                                               pad),
                      err, "backward-data desc")) ||
        (st = create_pd(&c->bwd_data.pd, &cd, attr, c, c->fwd.pd, err, "backward-data")) ||
        (st = dnnl_ok(dnnl_convolution_backward_weights_desc_init(&cd, alg, &md_x_act, &md_w_any, bias, &md_y_act,
                                                                  strides, pad, pad),
                      err, "backward-weights desc")) ||
        (st = create_pd(&c->bwd_weights.pd, &cd, attr, c, c->fwd.pd, err, "backward-weights")))
        goto done;

    /* the layouts every direction must use: the caller's NHWC (DIRECT), the forward's (WINOGRAD) */
    const dnnl_memory_desc_t *want_x = &md_x, *want_y = &md_y;
    if (c->algo == SDGP_CONV_WINOGRAD) {
        want_x = dnnl_primitive_desc_query_md(c->fwd.pd, dnnl_query_src_md, 0);
        want_y = dnnl_primitive_desc_query_md(c->fwd.pd, dnnl_query_dst_md, 0);
    }
    if ((st = check_act(c->fwd.pd, dnnl_query_src_md, want_x, err, "forward src")) != SDGP_OK ||
        (st = check_act(c->fwd.pd, dnnl_query_dst_md, want_y, err, "forward dst")) != SDGP_OK ||
        (st = check_act(c->bwd_data.pd, dnnl_query_diff_src_md, want_x, err, "backward-data diff_src")) != SDGP_OK ||
        (st = check_act(c->bwd_data.pd, dnnl_query_diff_dst_md, want_y, err, "backward-data diff_dst")) != SDGP_OK ||
        (st = check_act(c->bwd_weights.pd, dnnl_query_src_md, want_x, err, "backward-weights src")) != SDGP_OK ||
        (st = check_act(c->bwd_weights.pd, dnnl_query_diff_dst_md, want_y, err, "backward-weights diff_dst")) != SDGP_OK)
        goto done;
    if (c->algo == SDGP_CONV_WINOGRAD) {
        c->xb_bytes = (dnnl_memory_desc_get_size(want_x) + 63) / 64 * 64;
        c->yb_bytes = (dnnl_memory_desc_get_size(want_y) + 63) / 64 * 64;
        if ((st = act_reorder_plan(&c->x_in, c, &md_x, want_x, attr, &scratch_max, err)) ||
            (st = act_reorder_plan(&c->x_out, c, want_x, &md_x, attr, &scratch_max, err)) ||
            (st = act_reorder_plan(&c->y_in, c, &md_y, want_y, attr, &scratch_max, err)) ||
            (st = act_reorder_plan(&c->y_out, c, want_y, &md_y, attr, &scratch_max, err)) ||
            (st = dnnl_ok(dnnl_memory_create(&c->xb, want_x, c->engine, DNNL_MEMORY_NONE), err, "blocked src memory")) ||
            (st = dnnl_ok(dnnl_memory_create(&c->yb, want_y, c->engine, DNNL_MEMORY_NONE), err, "blocked dst memory")) ||
            (st = act_reorder_build(&c->x_in, c, err)) || (st = act_reorder_build(&c->x_out, c, err)) ||
            (st = act_reorder_build(&c->y_in, c, err)) || (st = act_reorder_build(&c->y_out, c, err)))
            goto done;
    }

    if ((st = dir_plan(&c->fwd, c, dnnl_query_weights_md, 0, &md_w_oihw, attr, &scratch_max, err, "forward")) ||
        (st = dir_plan(&c->bwd_data, c, dnnl_query_weights_md, 0, &md_w_oihw, attr, &scratch_max, err,
                       "backward-data")) ||
        (st = dir_plan(&c->bwd_weights, c, dnnl_query_diff_weights_md, 1, &md_w_oihw, attr, &scratch_max, err,
                       "backward-weights")))
        goto done;

    /* The workspace (64-byte aligned, at least one line so the views are never NULL). */
    c->scratch_bytes = (scratch_max + 63) / 64 * 64;
    if (c->wbytes + c->scratch_bytes == 0) c->scratch_bytes = 64;
    c->own_ws = aligned_alloc(64, sdgp_conv_workspace_bytes(c));
    if (!c->own_ws) {
        st = sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: workspace of %zu bytes", sdgp_conv_workspace_bytes(c));
        goto done;
    }
    if (c->with_bias) {
        c->dbias_sink = malloc(sizeof(float) * (size_t)g->Cout);
        if (!c->dbias_sink) {
            st = sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: %d bias floats", g->Cout);
            goto done;
        }
    }
    if ((st = dir_build(&c->fwd, c, err, "forward primitive")) ||
        (st = dir_build(&c->bwd_data, c, err, "backward-data primitive")) ||
        (st = dir_build(&c->bwd_weights, c, err, "backward-weights primitive")) ||
        (st = bind_workspace(c, c->own_ws, err)))
        goto done;
    if ((st = dnnl_ok(dnnl_memory_create(&c->x, &md_x, c->engine, DNNL_MEMORY_NONE), err, "src memory")) ||
        (st = dnnl_ok(dnnl_memory_create(&c->y, &md_y, c->engine, DNNL_MEMORY_NONE), err, "dst memory")) ||
        (st = dnnl_ok(dnnl_memory_create(&c->w, &md_w_oihw, c->engine, DNNL_MEMORY_NONE), err, "weights memory")) ||
        (st = dnnl_ok(dnnl_memory_create(&c->b, &md_b, c->engine, DNNL_MEMORY_NONE), err, "bias memory")))
        goto done;

done:
    if (attr) dnnl_primitive_attr_destroy(attr);
    conv_dir *dirs[3] = {&c->fwd, &c->bwd_data, &c->bwd_weights};
    for (int i = 0; i < 3; i++) { /* the primitives keep what they need of their pds */
        if (dirs[i]->pd) dnnl_primitive_desc_destroy(dirs[i]->pd);
        if (dirs[i]->wpd) dnnl_primitive_desc_destroy(dirs[i]->wpd);
        dirs[i]->pd = dirs[i]->wpd = NULL;
    }
    act_reorder *ar[4] = {&c->x_in, &c->x_out, &c->y_in, &c->y_out};
    for (int i = 0; i < 4; i++)
        if (ar[i]->pd) {
            dnnl_primitive_desc_destroy(ar[i]->pd);
            ar[i]->pd = NULL;
        }
    return st;
}

/* AUTO's rule, from the layers of ResNet-9 timed on this CPU (`sdgp bench layers --conv-algo`):
 * Winograd's 4x4 output tiles and 16-channel blocks are padded, so it loses where few input
 * channels fill a block (1 -> 32 channels: 5x slower) or where the output wastes many tile
 * positions (5x5 outputs use 25 of 64: 15 % slower), and wins elsewhere (14x14: 1.2-1.4x,
 * 32x32 and 4x4-16x16 with 128-512 channels: 2-2.5x). */
static int winograd_pays(const sdgp_conv_geom *g) {
    int64_t tiles = (int64_t)((g->Ho + 3) / 4) * ((g->Wo + 3) / 4) * 16;
    return g->Cin >= 16 && (int64_t)g->Ho * g->Wo * 4 >= tiles * 3; /* >= 75 % of tile outputs used */
}

sdgp_status sdgp_conv_create(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads, sdgp_error *err) {
    return sdgp_conv_create_algo(out, g, with_bias, threads, SDGP_CONV_DIRECT, err);
}

sdgp_status sdgp_conv_create_algo(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                  sdgp_conv_algo algo, sdgp_error *err) {
    if (!out || !g) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: NULL %s", out ? "geometry" : "output");
    *out = NULL;
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: threads=%d < 0", threads);
    if (algo != SDGP_CONV_DIRECT && algo != SDGP_CONV_WINOGRAD && algo != SDGP_CONV_AUTO)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_create: unknown algorithm %d", (int)algo);
    if (algo == SDGP_CONV_AUTO) {
        sdgp_status st = SDGP_ERR_UNSUPPORTED;
        if (winograd_pays(g)) st = sdgp_conv_create_algo(out, g, with_bias, threads, SDGP_CONV_WINOGRAD, err);
        return st == SDGP_ERR_UNSUPPORTED ? sdgp_conv_create_algo(out, g, with_bias, threads, SDGP_CONV_DIRECT, err) : st;
    }
    sdgp_status st = check_geom(g, err);
    if (st != SDGP_OK) return st;
    sdgp_conv *c = calloc(1, sizeof *c);
    if (!c) return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_create: out of memory");
    c->g = *g;
    c->with_bias = with_bias != 0;
    c->threads = threads;
    c->algo = algo;
    c->x_in.name = "src reorder (NHWC -> blocked)";
    c->x_out.name = "diff_src reorder (blocked -> NHWC)";
    c->y_in.name = "diff_dst reorder (NHWC -> blocked)";
    c->y_out.name = "dst reorder (blocked -> NHWC)";
    c->fwd.wreorder_name = "forward weights reorder (OIHW -> oneDNN layout)";
    c->bwd_data.wreorder_name = "backward-data weights reorder (OIHW -> oneDNN layout)";
    c->bwd_weights.wreorder_name = "backward-weights diff-weights reorder (oneDNN layout -> OIHW)";
    int saved = threads_enter(threads);
    st = conv_build(c, err);
    threads_leave(threads, saved);
    if (st != SDGP_OK) {
        sdgp_conv_destroy(c);
        return st;
    }
    *out = c;
    return SDGP_OK;
}

void sdgp_conv_destroy(sdgp_conv *c) {
    if (!c) return;
    dir_free(&c->fwd);
    dir_free(&c->bwd_data);
    dir_free(&c->bwd_weights);
    act_reorder_free(&c->x_in);
    act_reorder_free(&c->x_out);
    act_reorder_free(&c->y_in);
    act_reorder_free(&c->y_out);
    dnnl_memory_t mems[6] = {c->x, c->y, c->w, c->b, c->xb, c->yb};
    for (int i = 0; i < 6; i++)
        if (mems[i]) dnnl_memory_destroy(mems[i]);
    if (c->stream) dnnl_stream_destroy(c->stream);
    if (c->engine) dnnl_engine_destroy(c->engine);
    free(c->own_ws);
    free(c->dbias_sink);
    free(c);
}

size_t sdgp_conv_workspace_bytes(const sdgp_conv *c) {
    return c ? c->wbytes + c->xb_bytes + c->yb_bytes + c->scratch_bytes : 0;
}

sdgp_conv_algo sdgp_conv_get_algo(const sdgp_conv *c) { return c ? c->algo : SDGP_CONV_DIRECT; }

static const char *const algo_names[] = {"direct", "winograd", "auto"}; /* indexed by sdgp_conv_algo */

const char *sdgp_conv_algo_name(sdgp_conv_algo algo) {
    return algo >= SDGP_CONV_DIRECT && algo <= SDGP_CONV_AUTO ? algo_names[algo] : "?";
}

sdgp_status sdgp_conv_algo_parse(const char *name, sdgp_conv_algo *out, sdgp_error *err) {
    if (!name || !out) return sdgp_fail(err, SDGP_ERR_INVALID, "conv algorithm name or output is NULL");
    for (int i = SDGP_CONV_DIRECT; i <= SDGP_CONV_AUTO; i++)
        if (strcmp(name, algo_names[i]) == 0) {
            *out = (sdgp_conv_algo)i;
            return SDGP_OK;
        }
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown conv algorithm '%s' (expected direct, winograd or auto)", name);
}

sdgp_status sdgp_conv_set_workspace(sdgp_conv *c, void *ws, sdgp_error *err) {
    if (!c) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_set_workspace: NULL conv");
    if ((uintptr_t)ws % 64 != 0)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv_set_workspace: buffer %p is not 64-byte aligned", ws);
    if (ws && ws == c->own_ws) return SDGP_OK; /* already in use, and not to be freed below */
    void *own = NULL;
    if (!ws) { /* back to a workspace of its own */
        if (c->own_ws) return SDGP_OK;
        own = aligned_alloc(64, sdgp_conv_workspace_bytes(c));
        if (!own) return sdgp_fail(err, SDGP_ERR_NOMEM, "conv_set_workspace: %zu bytes", sdgp_conv_workspace_bytes(c));
        ws = own;
    }
    void *before = c->ws;
    sdgp_status st = bind_workspace(c, ws, err);
    if (st != SDGP_OK) { /* the views may be half rebound: point them all back where they were */
        free(own);
        (void)bind_workspace(c, before, NULL);
        return st;
    }
    free(c->own_ws);
    c->own_ws = own;
    return SDGP_OK;
}

/* Points a memory object at caller data (oneDNN takes void *; inputs are only read). */
static sdgp_status bind(dnnl_memory_t m, const void *p, sdgp_error *err) {
    return dnnl_ok(dnnl_memory_set_data_handle(m, (void *)(uintptr_t)p), err, "set data handle");
}

static sdgp_status run(sdgp_conv *c, dnnl_primitive_t p, int nargs, const dnnl_exec_arg_t *args, sdgp_error *err,
                       const char *name) {
    sdgp_status st = dnnl_ok(dnnl_primitive_execute(p, c->stream, nargs, args), err, name);
    if (st == SDGP_OK) st = dnnl_ok(dnnl_stream_wait(c->stream), err, name);
    return st;
}

/* WINOGRAD: one activation reorder (NHWC <-> blocked copy in the workspace). */
static sdgp_status reorder_act(sdgp_conv *c, act_reorder *r, dnnl_memory_t from, dnnl_memory_t to, sdgp_error *err) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}, {DNNL_ARG_SCRATCHPAD, r->scratch}};
    return run(c, r->prim, 3, args, err, r->name);
}

/* The user's OIHW weights into the direction's layout; returns the memory the primitive reads. */
static sdgp_status weights_in(sdgp_conv *c, conv_dir *d, dnnl_memory_t *wmem, sdgp_error *err) {
    *wmem = c->w;
    if (!d->wmem) return SDGP_OK;
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, c->w}, {DNNL_ARG_TO, d->wmem}, {DNNL_ARG_SCRATCHPAD, d->wscratch}};
    *wmem = d->wmem;
    return run(c, d->wreorder, 3, args, err, d->wreorder_name);
}

static sdgp_status forward_impl(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias,
                                sdgp_error *err) {
    dnnl_memory_t wm;
    sdgp_status st;
    if ((st = bind(c->x, x, err)) || (st = bind(c->y, y, err)) || (st = bind(c->w, w, err))) return st;
    if (c->with_bias && (st = bind(c->b, bias, err))) return st;
    if ((st = weights_in(c, &c->fwd, &wm, err))) return st;
    int wino = c->algo == SDGP_CONV_WINOGRAD;
    if (wino && (st = reorder_act(c, &c->x_in, c->x, c->xb, err))) return st;
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, wino ? c->xb : c->x}, {DNNL_ARG_WEIGHTS, wm},
                               {DNNL_ARG_DST, wino ? c->yb : c->y}, {DNNL_ARG_SCRATCHPAD, c->fwd.scratch},
                               {DNNL_ARG_BIAS, c->b}};
    if ((st = run(c, c->fwd.prim, c->with_bias ? 5 : 4, args, err, "forward convolution"))) return st;
    return wino ? reorder_act(c, &c->y_out, c->yb, c->y, err) : SDGP_OK;
}

sdgp_status sdgp_conv_forward(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias,
                              sdgp_error *err) {
    if (!c || !y || !x || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_forward: NULL argument");
    if (c->with_bias && !bias) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_forward: created with bias but bias is NULL");
    int saved = threads_enter(c->threads);
    sdgp_status st = forward_impl(c, y, x, w, bias, err);
    threads_leave(c->threads, saved);
    return st;
}

static sdgp_status backward_data_impl(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err) {
    dnnl_memory_t wm;
    sdgp_status st;
    if ((st = bind(c->x, dx, err)) || (st = bind(c->y, dy, err)) || (st = bind(c->w, w, err))) return st;
    if ((st = weights_in(c, &c->bwd_data, &wm, err))) return st;
    int wino = c->algo == SDGP_CONV_WINOGRAD;
    if (wino && (st = reorder_act(c, &c->y_in, c->y, c->yb, err))) return st;
    dnnl_exec_arg_t args[4] = {{DNNL_ARG_DIFF_DST, wino ? c->yb : c->y}, {DNNL_ARG_WEIGHTS, wm},
                               {DNNL_ARG_DIFF_SRC, wino ? c->xb : c->x}, {DNNL_ARG_SCRATCHPAD, c->bwd_data.scratch}};
    if ((st = run(c, c->bwd_data.prim, 4, args, err, "backward-data convolution"))) return st;
    return wino ? reorder_act(c, &c->x_out, c->xb, c->x, err) : SDGP_OK;
}

sdgp_status sdgp_conv_backward_data(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err) {
    if (!c || !dx || !dy || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_backward_data: NULL argument");
    int saved = threads_enter(c->threads);
    sdgp_status st = backward_data_impl(c, dx, dy, w, err);
    threads_leave(c->threads, saved);
    return st;
}

static sdgp_status backward_weights_impl(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                         sdgp_error *err) {
    conv_dir *d = &c->bwd_weights;
    sdgp_status st;
    if ((st = bind(c->x, x, err)) || (st = bind(c->y, dy, err)) || (st = bind(c->w, dw, err))) return st;
    if (c->with_bias && (st = bind(c->b, dbias ? dbias : c->dbias_sink, err))) return st;
    int wino = c->algo == SDGP_CONV_WINOGRAD;
    if (wino && ((st = reorder_act(c, &c->x_in, c->x, c->xb, err)) || (st = reorder_act(c, &c->y_in, c->y, c->yb, err))))
        return st;
    dnnl_exec_arg_t args[5] = {{DNNL_ARG_SRC, wino ? c->xb : c->x}, {DNNL_ARG_DIFF_DST, wino ? c->yb : c->y},
                               {DNNL_ARG_DIFF_WEIGHTS, d->wmem ? d->wmem : c->w}, {DNNL_ARG_SCRATCHPAD, d->scratch},
                               {DNNL_ARG_DIFF_BIAS, c->b}};
    if ((st = run(c, d->prim, c->with_bias ? 5 : 4, args, err, "backward-weights convolution"))) return st;
    if (!d->wmem) return SDGP_OK;
    dnnl_exec_arg_t rargs[3] = {{DNNL_ARG_FROM, d->wmem}, {DNNL_ARG_TO, c->w}, {DNNL_ARG_SCRATCHPAD, d->wscratch}};
    return run(c, d->wreorder, 3, rargs, err, d->wreorder_name);
}

sdgp_status sdgp_conv_backward_weights(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                       sdgp_error *err) {
    if (!c || !dw || !x || !dy) return sdgp_fail(err, SDGP_ERR_INVALID, "conv_backward_weights: NULL argument");
    int saved = threads_enter(c->threads);
    sdgp_status st = backward_weights_impl(c, dw, dbias, x, dy, err);
    threads_leave(c->threads, saved);
    return st;
}
