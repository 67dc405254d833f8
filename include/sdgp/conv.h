/* sdgp: convolution geometry, the dense convolution (oneDNN), and the N:M sparse
 * backward-data convolution.
 *
 * Layouts: activations NHWC fp32 (x: B x H x W x Cin, y: B x Ho x Wo x Cout); weights OIHW
 * (Cout x Cin x kh x kw, as PyTorch); bias Cout. Zero padding, one stride for both dims. */
#ifndef SDGP_CONV_H
#define SDGP_CONV_H

#include "sdgp/isa.h"
#include "sdgp/prune.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int B, H, W, Cin;   /* input */
    int Cout, kh, kw;   /* weights */
    int stride, pad;
    int Ho, Wo;         /* output, derived: (H + 2 pad - kh) / stride + 1 */
} sdgp_conv_geom;

/* Validates (all sizes >= 1, pad >= 0, pad < k, output >= 1x1, no int overflow of tensor sizes)
 * and fills Ho, Wo. The message names the bad value. */
sdgp_status sdgp_conv_geom_init(sdgp_conv_geom *g, int B, int H, int W, int Cin, int Cout, int kh, int kw,
                                int stride, int pad, sdgp_error *err);

/* ---- Dense convolution through oneDNN (primitives created once per geometry) ---- */
typedef struct sdgp_conv sdgp_conv;

/* The algorithm of oneDNN's convolution. DIRECT reads and writes the caller's NHWC tensors in
 * place. WINOGRAD (F(4x4, 3x3), oneDNN's jit_wino_4x3: 3x3 kernels, stride 1, AVX-512) does 4x
 * fewer multiplications in its products; it needs oneDNN's blocked activation layout, so each
 * call reorders between NHWC and that layout in the workspace, and oneDNN's scratchpad holds the
 * transformed tiles and weights (for ResNet-9 w=1 at batch 64, up to 230 MB for one layer). Its
 * rounding differs from DIRECT's: relative error against an exact product ~1e-6 instead of ~1e-7.
 * AUTO: WINOGRAD where oneDNN has that kernel and it measured faster here (at least 16 input
 * channels and at least 75 % of its 4x4 output tiles used), DIRECT elsewhere. */
typedef enum { SDGP_CONV_DIRECT = 0, SDGP_CONV_WINOGRAD = 1, SDGP_CONV_AUTO = 2 } sdgp_conv_algo;

/* The three passes of a convolution; each is planned on its own. */
typedef enum { SDGP_CONV_FORWARD = 0, SDGP_CONV_BACKWARD_DATA = 1, SDGP_CONV_BACKWARD_WEIGHTS = 2 } sdgp_conv_pass;

/* workspace_limit (bytes, 0 = none) bounds each pass's workspace. A WINOGRAD pass over the
 * limit runs as several oneDNN calls: the batch in chunks of `chunk` images (a divisor of B; the
 * weight gradient sums the chunks) times `parts` slices of the channels the pass writes (forward
 * and backward-weights: Cout, backward-data: Cin; multiples of 16). Among the splits that fit it
 * takes the one with the fewest calls. If none fits, AUTO runs that pass DIRECT, WINOGRAD takes
 * the split with the smallest workspace (the limit is then exceeded). DIRECT ignores the limit
 * (its workspace is a few MB). */
typedef struct {
    sdgp_conv_algo algo;
    size_t workspace_limit;
} sdgp_conv_options;

/* How one pass runs: algo DIRECT or WINOGRAD; chunk x parts calls (DIRECT: B x 1). */
typedef struct {
    sdgp_conv_algo algo;
    int chunk, parts;
    size_t workspace_bytes;
} sdgp_conv_pass_plan;

/* threads: the OpenMP team size oneDNN uses (0 = the caller's omp_get_max_threads()). With
 * threads > 0, create and each call below set omp_set_num_threads(threads) for their duration
 * and restore the caller's value before returning.
 * One sdgp_conv must not be used by two threads at once (its buffers are shared by the calls);
 * inputs are only read. Errors inside oneDNN return SDGP_ERR_INTERNAL naming the primitive.
 * Results repeat bitwise for a fixed thread count and plan, but oneDNN's work split depends on
 * both: measured here, backward-weights (and for some shapes forward) differ in the last bits
 * between 1, 2 and 3 threads. */
sdgp_status sdgp_conv_create(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads, sdgp_error *err);
/* The same with a chosen algorithm and workspace limit (opt NULL: DIRECT). SDGP_ERR_UNSUPPORTED
 * (nothing created) when oneDNN has no kernel of that algorithm for this geometry on this CPU
 * (WINOGRAD: not 3x3 stride 1, no AVX-512, channel counts it cannot block). */
sdgp_status sdgp_conv_create_opts(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                  const sdgp_conv_options *opt, sdgp_error *err);
/* = create_opts with {algo, no limit}. */
sdgp_status sdgp_conv_create_algo(sdgp_conv **out, const sdgp_conv_geom *g, int with_bias, int threads,
                                  sdgp_conv_algo algo, sdgp_error *err);
/* WINOGRAD when any pass runs Winograd, else DIRECT (never AUTO). */
sdgp_conv_algo sdgp_conv_get_algo(const sdgp_conv *c);
sdgp_conv_pass_plan sdgp_conv_get_plan(const sdgp_conv *c, sdgp_conv_pass pass);
/* "direct", "winograd", "auto" ("?" for other values), and the parse of those names. */
const char *sdgp_conv_algo_name(sdgp_conv_algo algo);
sdgp_status sdgp_conv_algo_parse(const char *name, sdgp_conv_algo *out, sdgp_error *err);
void sdgp_conv_destroy(sdgp_conv *c);
/* Workspace: what a call needs only while it runs (oneDNN's scratchpads, the weights in
 * oneDNN's layouts, WINOGRAD's blocked activations): the largest of the three passes'. Each conv
 * starts with its own. Convs that never run at the same time (the layers of one model, called
 * one after another) can share one buffer of the largest
 * sdgp_conv_workspace_bytes among them: set_workspace(c, buf) makes c use buf (64-byte aligned,
 * owned by the caller, alive while c uses it) and frees c's own; buf = NULL gives c its own again. */
size_t sdgp_conv_workspace_bytes(const sdgp_conv *c);
sdgp_status sdgp_conv_set_workspace(sdgp_conv *c, void *buf, sdgp_error *err);
/* y = conv(x, w) (+ bias when created with_bias; bias ignored otherwise). */
sdgp_status sdgp_conv_forward(sdgp_conv *c, float *y, const float *x, const float *w, const float *bias, sdgp_error *err);
/* dx = dL/dx from dy and w (dx overwritten). */
sdgp_status sdgp_conv_backward_data(sdgp_conv *c, float *dx, const float *dy, const float *w, sdgp_error *err);
/* dw (OIHW) and dbias (nullable; only with_bias) from x and dy, overwritten. */
sdgp_status sdgp_conv_backward_weights(sdgp_conv *c, float *dw, float *dbias, const float *x, const float *dy,
                                       sdgp_error *err);

/* ---- N:M sparse backward-data: dD = prune(dO) x W ----
 * dO arrives compressed along Cout (sdgp_nm_tensor, axis CHANNEL, rows = B*Ho*Wo, C = Cout).
 * The plan holds the packed weights; pack again whenever the weights change (packing time is
 * part of the step). See src/kernels/README.md for the kernel contract and the design.
 * A plan owns its buffers (packed W: about Cin*Cout*kh*kw floats; dO entries: 8 bytes per kept
 * slot, B*Ho*Wo*Cout/m*n): one plan must not be used by two threads at once. */
typedef struct sdgp_sparse_bwd sdgp_sparse_bwd;

/* g must be a geometry sdgp_conv_geom_init accepts (checked again); 1 <= n <= m <= SDGP_NM_MAX_M,
 * Cout % m == 0; kh, kw <= 64. threads: the OpenMP team size of pack and data (0 = the
 * omp_get_max_threads() of the calling thread, read now). isa: SDGP_ISA_AUTO or a path this
 * CPU runs (SDGP_ERR_UNSUPPORTED otherwise). On failure *out is NULL. */
sdgp_status sdgp_sparse_bwd_create(sdgp_sparse_bwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                   int threads, sdgp_error *err);
void sdgp_sparse_bwd_destroy(sdgp_sparse_bwd *p); /* NULL is fine */
/* The ISA path that runs (after resolving SDGP_ISA_AUTO / SDGP_ISA). */
sdgp_isa sdgp_sparse_bwd_isa(const sdgp_sparse_bwd *p);
/* Packs w (OIHW) into the plan's layout. Required before the first sdgp_sparse_bwd_data. */
sdgp_status sdgp_sparse_bwd_pack(sdgp_sparse_bwd *p, const float *w, sdgp_error *err);
/* dD (B x H x W x Cin, fully overwritten; positions no tap reaches get 0) = the input gradient of
 * the convolution for the compressed dO, which must match the plan (axis CHANNEL, n, m, rows =
 * B*Ho*Wo, C = Cout). The result is bitwise the same for every thread count; relative error
 * against the dense product <= ~1e-6 (fp32 FMAs, the sum order of README.md). */
sdgp_status sdgp_sparse_bwd_data(sdgp_sparse_bwd *p, float *dD, const sdgp_nm_tensor *dO, sdgp_error *err);

/* ---- SDGP in the Winograd domain: dD = A^T [ prune(V) x U ] A ----
 * For 3x3 stride-1 convolutions (pad 0, 1 or 2). Backward-data is a 3x3 correlation of the
 * zero-padded dO with the weights rotated by 180 degrees and transposed in (Cout, Cin); F(2x2,3x3)
 * computes it per 2x2 output tile t of dD from the 4x4 tile d of padded dO:
 *   V[e][t][k] = (B^T d_k B)[e],  U[e][k][c] = (G g_kc G^T)[e],  M[e][t][c] = sum_k V[e][t][k] U[e][k][c],
 *   dD tile = A^T M A,   e = 0..15 the transform elements (B, G, A: Lavin & Gray's F(2x2,3x3)).
 * The pruning is applied to V, not to dO: N:M along k (Cout) for every (e, image, tile) row,
 * with the functions of sdgp_prune, exactly as sdgp_prune would prune the tensor V laid out as
 * (16*B) x T x Cout (sample index e*B + b, T tiles per image, row r = (e*B + b)*T + t):
 *   magnitude, random, MVUE, MVUE-approx: per row, their randomness keyed by (seed, step, layer)
 *       with group counter r*(Cout/m) + g, as in sdgp_prune;
 *   rescaled, scope sample-channel: one factor per (e, b, k) over the image's T tiles;
 *            scope channel: one factor per k over every (e, b, t).
 * A^T (.) A is linear, so MVUE on V stays an unbiased estimator of dL/dD. V's transform uses only
 * additions (B has entries 0, +-1), so V is the same bits on every path. A per-pixel mask of dO
 * would not survive the transform (every V value mixes 16 pixels): hence pruning V itself.
 * The GEMM stage runs on the sparse micro-kernels of sdgp_sparse_bwd (same ISA table), with the
 * transform, pruning and inverse transform fused per work unit (whole images) so that V and M
 * never exist for the whole batch (src/kernels/README.md). */
typedef struct sdgp_sparse_wino sdgp_sparse_wino;

/* 1 when the geometry has a Winograd-domain kernel: 3x3, stride 1, pad <= 2 (any B, H, W, C). */
int sdgp_sparse_wino_supports(const sdgp_conv_geom *g);
/* As sdgp_sparse_bwd_create; SDGP_ERR_UNSUPPORTED (naming the reason) for other geometries. */
sdgp_status sdgp_sparse_wino_create(sdgp_sparse_wino **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                    int threads, sdgp_error *err);
void sdgp_sparse_wino_destroy(sdgp_sparse_wino *p); /* NULL is fine */
sdgp_isa sdgp_sparse_wino_isa(const sdgp_sparse_wino *p);
/* Transforms and packs w (OIHW) into U. Required before the first sdgp_sparse_wino_data and
 * whenever the weights change. */
sdgp_status sdgp_sparse_wino_pack(sdgp_sparse_wino *p, const float *w, sdgp_error *err);
/* dD (B x H x W x Cin, overwritten) from dense dO (B x Ho x Wo x Cout, read only), pruned in the
 * Winograd domain with cfg (fn and n:m must be the plan's, axis CHANNEL; scope, seed, step and
 * layer as in sdgp_prune; cfg->isa and cfg->threads are ignored: the plan's). n == m (any fn, and
 * fn NONE, which requires a plan with n == m): no pruning, the dense Winograd product. Bitwise the
 * same for every thread count.
 * SDGP_ERR_NUMERIC when MVUE / rescaled meet a non-finite value, as sdgp_prune. */
sdgp_status sdgp_sparse_wino_data(sdgp_sparse_wino *p, float *dD, const float *dO, const sdgp_prune_cfg *cfg,
                                  sdgp_error *err);

/* A naive C loop for the same product (test oracle): dD from dense dO (B x Ho x Wo x Cout) and w (OIHW). */
void sdgp_conv_backward_data_naive(float *dD, const float *dO, const float *w, const sdgp_conv_geom *g);

#ifdef __cplusplus
}
#endif
#endif
