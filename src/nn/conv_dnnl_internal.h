/* The dense convolution's internals, shared by conv_dnnl.c (the API and the calls) and
 * conv_dnnl_pass.c (building one pass). See conv_dnnl.c for the design. */
#ifndef SDGP_CONV_DNNL_INTERNAL_H
#define SDGP_CONV_DNNL_INTERNAL_H

#include <stddef.h>

#include <dnnl.h>

#include "core/align.h"
#include "sdgp/conv.h"
#include "sdgp/sparse.h"

/* One reorder primitive and its scratchpad view. */
typedef struct {
    dnnl_primitive_t prim;
    dnnl_memory_t scratch;
    const char *name; /* for error messages */
} conv_reorder;

/* One pass, run as (B / chunk) x parts oneDNN calls. Each call sees the caller's tensors through
 * the memories x, y, w, b, described for one call (chunk images, the pass's channel slice, NHWC
 * or OIHW strides of the whole tensor) and pointed at the call's part of the data. */
typedef struct {
    sdgp_conv_pass pass;
    sdgp_conv_algo algo; /* DIRECT or WINOGRAD */
    int chunk, parts;
    int slice;           /* channels per part: of Cout (forward, backward-weights) or Cin (backward-data) */
    dnnl_primitive_t prim;
    const char *name;
    dnnl_memory_t scratch;  /* the primitive's scratchpad view */
    dnnl_memory_t x, y, w, b; /* x: src / diff_src, y: dst / diff_dst, w: (diff) weights, b: (diff) bias */
    /* (diff) weights in the primitive's layout (NULL: it uses w itself) and the reorders between
     * them: forward, backward-data: w -> wmem; backward-weights: wmem -> w, and w_add (wmem + w ->
     * w) for the chunks after the first. */
    dnnl_memory_t wmem;
    conv_reorder w_re, w_add;
    /* WINOGRAD: x and y in the primitive's blocked layout, and the reorders caller <-> blocked
     * (forward: x in, y out; backward-data: y in, x out; backward-weights: x in, y in). */
    dnnl_memory_t xb, yb;
    conv_reorder x_re, y_re;
    /* its workspace: [wmem | xb | yb | scratchpads], each part a multiple of 64 bytes */
    size_t w_bytes, xb_bytes, yb_bytes, scratch_bytes;
    /* WINOGRAD by sdgp's own kernels instead (conv_sdgp_wino.c; prim is then NULL): the plan of
     * the forward or of the backward-data, whose U is the pass's workspace, or of the
     * backward-weights, whose transformed tiles and M are; own_bytes counts them and own_s2d_w */
    sdgp_sparse_fwd *own_fwd;
    sdgp_sparse_wdata *own_data;
    struct wgwino *own_wgrad;
    size_t own_bytes;
    /* a 5x5 stride-2 conv run as its space-to-depth 3x3 one (own_s2d set): that conv's weights
     * (forward, backward-data) or weight gradient (backward-weights), Cout x 4 Cin x 3 x 3, in the
     * workspace after U or the tiles: only the pass's call uses them, so the layers share them too */
    int own_s2d;
    float *own_s2d_w;
} conv_pass;

/* What building a pass needs to know of its conv. */
typedef struct {
    sdgp_conv_geom g;
    int with_bias;
    int threads; /* the conv's (0: the caller's omp_get_max_threads() at create) */
    int wino_order; /* conv_sdgp_wino_order's, read once at create */
    dnnl_engine_t engine;
} conv_ctx;

/* Builds pass p (its pass member set): DIRECT as one call, WINOGRAD with the split of least
 * modelled extra work (split_cost) whose workspace is at most limit (0: none). No split fits:
 * fallback_direct ? DIRECT : the WINOGRAD split with the smallest workspace. SDGP_ERR_UNSUPPORTED
 * when oneDNN has no such kernel. On failure p holds nothing (conv_pass_free not needed). */
sdgp_status conv_pass_plan(conv_pass *p, const conv_ctx *ctx, sdgp_conv_algo algo, size_t limit,
                           int fallback_direct, sdgp_error *err);
size_t conv_pass_bytes(const conv_pass *p);
/* Points the pass's workspace views into ws. */
sdgp_status conv_pass_bind(conv_pass *p, void *ws, sdgp_error *err);
void conv_pass_free(conv_pass *p);

sdgp_status conv_dnnl_ok(dnnl_status_t s, sdgp_error *err, const char *what);

/* conv_sdgp_wino.c: WINOGRAD by sdgp's own F(4x4,3x3) kernels. The order of the two Winograd
 * implementations from SDGP_WINOGRAD: 0 oneDNN's first (unset or empty), 1 sdgp's first ("sdgp"),
 * -1 oneDNN's only ("onednn"); SDGP_ERR_INVALID naming the variable for anything else. */
sdgp_status conv_sdgp_wino_order(int *order, sdgp_error *err);
/* Whether sdgp's kernels run this pass of ctx's convolution (every pass: no groups, and 3x3,
 * stride 1, padding 0-2, or 5x5, stride 2, padding 2 by space-to-depth), and the plan of a pass they
 * run (p->pass set; limit: the workspace limit, which the backward-weights sizes its chunks of the
 * batch by, 0 none). */
int conv_sdgp_wino_supports(const conv_ctx *ctx, sdgp_conv_pass pass);
/* Whether g is a 5x5 stride-2 conv with padding 2, which sdgp's kernels run by space-to-depth. */
int conv_sdgp_wino_s2d(const sdgp_conv_geom *g);
sdgp_status conv_sdgp_wino_plan(conv_pass *p, const conv_ctx *ctx, size_t limit, sdgp_error *err);
/* Points the plan's working memory (U, or the weight gradient's tiles) at the workspace. */
void conv_sdgp_wino_bind(conv_pass *p, void *ws);
void conv_sdgp_wino_free(conv_pass *p);
/* The passes' calls: pack the caller's OIHW weights into U, then the product (forward: + bias). */
sdgp_status conv_sdgp_wino_forward(conv_pass *p, float *y, const float *x, const float *w, const float *bias,
                                   sdgp_error *err);
sdgp_status conv_sdgp_wino_backward_data(conv_pass *p, float *dx, const float *dy, const float *w, sdgp_error *err);
/* dw and (when not NULL) dbias, overwritten. */
sdgp_status conv_sdgp_wino_backward_weights(conv_pass *p, float *dw, float *dbias, const float *x, const float *dy,
                                            sdgp_error *err);

#endif
