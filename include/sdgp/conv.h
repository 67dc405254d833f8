/* sdgp: convolution geometry, the dense convolution (oneDNN), and a naive backward-data loop.
 * The N:M sparse backward-data kernels that take this geometry are in sdgp/sparse.h.
 *
 * Layouts: activations NHWC fp32 (x: B x H x W x Cin, y: B x Ho x Wo x Cout); weights OIHW
 * (Cout x Cin x kh x kw, as PyTorch); bias Cout. Zero padding, one stride for both dims. */
#ifndef SDGP_CONV_H
#define SDGP_CONV_H

#include <stddef.h>

#include "sdgp/export.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, H, W, Cin;   /* input */
    int Cout, kh, kw;   /* weights */
    int stride, pad;
    int Ho, Wo;         /* output, derived: (H + 2 pad - kh) / stride + 1 */
    int groups;         /* grouped convolution: Cin and Cout split into groups; weights are
                           Cout x (Cin/groups) x kh x kw (PyTorch's); 1 by sdgp_conv_geom_init */
} sdgp_conv_geom;

/* Validates (all sizes >= 1, pad >= 0, pad < k, output >= 1x1, no int overflow of tensor sizes)
 * and fills Ho, Wo; groups = 1. The message names the bad value. */
SDGP_API sdgp_status sdgp_conv_geom_init(sdgp_conv_geom *g, int B, int H, int W, int Cin, int Cout, int kh, int kw,
                                         int stride, int pad, sdgp_error *err);
/* Makes g a grouped convolution: groups >= 1 must divide Cin and Cout. Only oneDNN's direct kernel
 * runs grouped convolutions (no Winograd); of the sparse kernels, sdgp_sparse_bwd_* takes them (N:M
 * within each group's output channels), the Winograd-domain one takes groups = 1 only. */
SDGP_API sdgp_status sdgp_conv_geom_set_groups(sdgp_conv_geom *g, int groups, sdgp_error *err);

/* ---- Dense convolution through oneDNN (primitives created once per geometry) ---- */
typedef struct sdgp_conv sdgp_conv;

/* The algorithm of the convolution. DIRECT (oneDNN's) reads and writes the caller's NHWC tensors in
 * place. WINOGRAD, F(4x4, 3x3) for 3x3 kernels at stride 1, does 4x fewer multiplications in its
 * products. Two implementations: oneDNN's jit_wino_4x3 (AVX-512 only) needs oneDNN's blocked
 * activation layout, so each call reorders between NHWC and that layout in the workspace, and
 * oneDNN's scratchpad holds the transformed tiles and weights (for ResNet-9 w=1 at batch 64, up to
 * 230 MB for one layer). Where oneDNN has none, sdgp's own kernels run the three passes (padding
 * 0-2, no groups) on NHWC, their workspace the transformed weights (forward, backward-data: 36 Cin
 * Cout floats) or the weight gradient's 36 Cin Cout sums and a chunk of transformed tiles (about 16
 * MB); oneDNN's direct kernel is 1.2-4.4x slower than them on AVX2 (src/nn/conv_sdgp_wino.c has the
 * measurements). The environment variable SDGP_WINOGRAD=sdgp puts sdgp's first, =onednn leaves it
 * out. Winograd's rounding differs from DIRECT's: relative error against an exact product ~1e-6 instead of ~1e-7.
 * AUTO: WINOGRAD where a kernel of it runs the pass and it measured faster (at least 16 input
 * channels and at least 75 % of its 4x4 output tiles used with oneDNN's kernel, a third with
 * sdgp's), DIRECT elsewhere; one rule for all three passes of a layer.
 * MEASURED: a model setting only (sdgp_model_config.conv_algo; a conv refuses it): the model times
 * each pass of each layer with DIRECT and with WINOGRAD at start and keeps the faster per pass
 * (sdgp_model_tune_conv), planned here by sdgp_conv_create_passes. */
typedef enum { SDGP_CONV_DIRECT = 0, SDGP_CONV_WINOGRAD = 1, SDGP_CONV_AUTO = 2, SDGP_CONV_MEASURED = 3 } sdgp_conv_algo;
/* The names, indexed by the enum and NULL-terminated: "direct", "winograd", "auto", "measured";
 * SDGP_CONV_ALGO_LIST(X) expands X(name) for each in that order (for help texts:
 * SDGP_CONV_ALGO_LIST(SDGP_CONV_ALGO_HELP) + 3 is "direct | winograd | auto | measured"). */
extern SDGP_API const char *const sdgp_conv_algo_names[];
#define SDGP_CONV_ALGO_LIST(X) X(direct) X(winograd) X(auto) X(measured)
#define SDGP_CONV_ALGO_HELP(name) " | " #name

/* The three passes of a convolution; each is planned on its own. */
typedef enum { SDGP_CONV_FORWARD = 0, SDGP_CONV_BACKWARD_DATA = 1, SDGP_CONV_BACKWARD_WEIGHTS = 2 } sdgp_conv_pass;

/* workspace_limit (bytes, 0 = none) bounds each pass's workspace. A WINOGRAD pass over the
 * limit runs as several oneDNN calls: the batch in chunks of `chunk` images (a divisor of B; the
 * weight gradient sums the chunks) times `parts` slices of the channels the pass writes (forward
 * and backward-weights: Cout, backward-data: Cin; multiples of 16). Among the splits that fit it
 * takes the one with the fewest calls. If none fits, AUTO runs that pass DIRECT, WINOGRAD takes
 * the split with the smallest workspace (the limit is then exceeded). sdgp's Winograd pass is one
 * call (its backward-weights takes the batch in chunks that fit the limit beside its 36 Cin Cout
 * sums): over the limit, AUTO runs DIRECT, WINOGRAD exceeds it. DIRECT ignores the limit (its
 * workspace is a few MB). */
typedef struct {
    sdgp_conv_algo algo;
    size_t workspace_limit;
} sdgp_conv_options;

/* How one pass runs: algo DIRECT or WINOGRAD; chunk x parts calls (DIRECT: B x 1); impl "onednn",
 * or "sdgp" for WINOGRAD by sdgp's own kernels (sdgp_conv_create_opts). */
typedef struct {
    sdgp_conv_algo algo;
    int chunk, parts;
    size_t workspace_bytes;
    const char *impl;
} sdgp_conv_pass_plan;

/* threads: the OpenMP team size oneDNN uses (0 = the caller's omp_get_max_threads()). With
 * threads > 0, create and each call below set omp_set_num_threads(threads) for their duration
 * and restore the caller's value before returning.
 * One sdgp_conv must not be used by two threads at once (its buffers are shared by the calls);
 * inputs are only read. Errors inside oneDNN return SDGP_ERR_INTERNAL naming the primitive.
 * Results repeat bitwise for a fixed thread count and plan, but oneDNN's work split depends on
 * both: measured here, backward-weights (and for some shapes forward) differ in the last bits
 * between 1, 2 and 3 threads. */
SDGP_API sdgp_status sdgp_conv_create(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                      sdgp_error *err);
/* The same with a chosen algorithm and workspace limit (opt NULL: DIRECT). SDGP_ERR_UNSUPPORTED
 * (nothing created; the message names the pass) when no kernel of that algorithm runs a pass of
 * this geometry on this CPU (WINOGRAD: not 3x3 stride 1, groups; with SDGP_WINOGRAD=onednn also no
 * AVX-512 or channel counts oneDNN cannot block); SDGP_ERR_INVALID for MEASURED, a value outside the
 * enum, or an unknown SDGP_WINOGRAD. */
SDGP_API sdgp_status sdgp_conv_create_opts(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                           const sdgp_conv_options *opt, sdgp_error *err);
/* The same with an algorithm per pass: pass i (sdgp_conv_pass) runs pass_algo[i], DIRECT, WINOGRAD
 * or AUTO, each with the meaning above for that pass alone, under opt's workspace limit (opt NULL:
 * none; opt->algo is ignored). E.g. {WINOGRAD, DIRECT, WINOGRAD}: the model's measured choice. */
SDGP_API sdgp_status sdgp_conv_create_passes(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                             const sdgp_conv_algo pass_algo[3], const sdgp_conv_options *opt,
                                             sdgp_error *err);
/* = create_opts with {algo, no limit}. */
SDGP_API sdgp_status sdgp_conv_create_algo(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                           sdgp_conv_algo algo, sdgp_error *err);
/* WINOGRAD when any pass runs Winograd, else DIRECT (never AUTO). */
SDGP_API sdgp_conv_algo sdgp_conv_get_algo(const sdgp_conv *c);
SDGP_API sdgp_conv_pass_plan sdgp_conv_get_plan(const sdgp_conv *c, sdgp_conv_pass pass);
/* sdgp_conv_algo_names[algo] ("?" for other values), and the parse of those names. */
SDGP_API const char *sdgp_conv_algo_name(sdgp_conv_algo algo);
SDGP_API sdgp_status sdgp_conv_algo_parse(const char *name, sdgp_conv_algo *out, sdgp_error *err);
/* The instruction set oneDNN's kernels (direct and its Winograd) run here, as oneDNN names it:
 * "avx512_core_bf16", "avx2", ... The CPU's best unless the environment variable DNNL_MAX_CPU_ISA
 * (oneDNN's) lowers it; SDGP_ISA lowers sdgp's own kernels only. */
SDGP_API const char *sdgp_conv_onednn_isa(void);
SDGP_API void sdgp_conv_destroy(sdgp_conv *c);
/* Workspace: what a call needs only while it runs (oneDNN's scratchpads, the weights in
 * oneDNN's layouts, WINOGRAD's blocked activations): the largest of the three passes'. Each conv
 * starts with its own. Convs that never run at the same time (the layers of one model, called
 * one after another) can share one buffer of the largest
 * sdgp_conv_workspace_bytes among them: set_workspace(c, buf) makes c use buf (64-byte aligned,
 * owned by the caller, alive while c uses it) and frees c's own; buf = NULL gives c its own again. */
SDGP_API size_t sdgp_conv_workspace_bytes(const sdgp_conv *c);
SDGP_API sdgp_status sdgp_conv_set_workspace(sdgp_conv *c, void *buf, sdgp_error *err);
/* y = conv(x, w) (+ bias when created with_bias; bias ignored otherwise). */
SDGP_API sdgp_status sdgp_conv_forward(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias,
                                       sdgp_error *err);
/* dx = dL/dx from dy and w (dx overwritten). */
SDGP_API sdgp_status sdgp_conv_backward_data(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err);
/* dw (OIHW) and dbias (nullable; only with_bias) from x and dy, overwritten. */
SDGP_API sdgp_status sdgp_conv_backward_weights(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                                sdgp_error *err);

/* A naive C loop for the same product (test oracle): dD from dense dO (B x Ho x Wo x Cout) and w (OIHW). */
SDGP_API void sdgp_conv_backward_data_naive(float *dD, const float *dO, const float *w, const sdgp_conv_geom *g);
/* The forward: y (B x Ho x Wo x Cout) from x (B x H x W x Cin) and w (OIHW), double accumulation. */
SDGP_API void sdgp_conv_forward_naive(float *y, const float *x, const float *w, const sdgp_conv_geom *g);

#ifdef __cplusplus
}
#endif
#endif
