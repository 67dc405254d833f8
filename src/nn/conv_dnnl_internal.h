/* The dense convolution's internals, shared by conv_dnnl.c (the API and the calls) and
 * conv_dnnl_pass.c (building one pass). See conv_dnnl.c for the design. */
#ifndef SDGP_CONV_DNNL_INTERNAL_H
#define SDGP_CONV_DNNL_INTERNAL_H

#include <stddef.h>

#include <dnnl.h>

#include "sdgp/conv.h"

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
} conv_pass;

/* What building a pass needs to know of its conv. */
typedef struct {
    sdgp_conv_geom g;
    int with_bias;
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

#endif
