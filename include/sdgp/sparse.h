/* sdgp: the N:M sparse backward-data convolutions, dD = prune(dO) x W, in the pixel domain
 * (sdgp_sparse_bwd_*) and in the Winograd domain (sdgp_sparse_wino_*). Geometry and layouts are
 * those of sdgp/conv.h (activations NHWC fp32, weights OIHW); pruning is that of sdgp/prune.h. */
#ifndef SDGP_SPARSE_H
#define SDGP_SPARSE_H

#include "sdgp/conv.h"
#include "sdgp/export.h"
#include "sdgp/isa.h"
#include "sdgp/prune.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- N:M sparse backward-data: dD = prune(dO) x W ----
 * dO arrives compressed along Cout (sdgp_nm_tensor, axis CHANNEL, rows = B*Ho*Wo, C = Cout).
 * The plan holds the packed weights; pack again whenever the weights change (packing time is
 * part of the step). See src/kernels/README.md for the kernel contract and the design.
 * A plan owns its buffers (packed W: about Cin*Cout*kh*kw floats; dO entries: 8 bytes per kept
 * slot, B*Ho*Wo*Cout/m*n): one plan must not be used by two threads at once. */
typedef struct sdgp_sparse_bwd sdgp_sparse_bwd;

/* g must be a geometry sdgp_conv_geom_init accepts (checked again); 1 <= n <= m <= SDGP_NM_MAX_M,
 * Cout % m == 0; kh, kw <= 64. Grouped convolutions (sdgp_conv_geom_set_groups): m must divide
 * Cout/groups, so each group of m output channels lies in one conv group (SDGP_ERR_INVALID naming
 * groups, Cout and m otherwise); the weights are then Cout x Cin/groups x kh x kw, and dD's
 * channels of group g sum over that group's kept dO channels only. threads: the OpenMP team size of pack and data (0 = the
 * omp_get_max_threads() of the calling thread, read now). isa: SDGP_ISA_AUTO or a path this
 * CPU runs (SDGP_ERR_UNSUPPORTED otherwise). On failure *out is NULL. */
SDGP_API sdgp_status sdgp_sparse_bwd_create(sdgp_sparse_bwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                            int threads, sdgp_error *err);
SDGP_API void sdgp_sparse_bwd_destroy(sdgp_sparse_bwd *p); /* NULL is fine */
/* The ISA path that runs (after resolving SDGP_ISA_AUTO / SDGP_ISA). */
SDGP_API sdgp_isa sdgp_sparse_bwd_isa(const sdgp_sparse_bwd *p);
/* Packs w (OIHW: Cout x Cin/groups x kh x kw) into the plan's layout. Required before the first
 * sdgp_sparse_bwd_data. */
SDGP_API sdgp_status sdgp_sparse_bwd_pack(sdgp_sparse_bwd *p, const float *w, sdgp_error *err);
/* The same for weights of any layout: element (o, i, h, w) at w + o*strides[0] + i*strides[1] +
 * h*strides[2] + w*strides[3] (in floats, >= 0), e.g. PyTorch's channels_last weights (OHWI,
 * strides {kh*kw*Cin, 1, kw*Cin, Cin}, Cin/groups for grouped plans) read in place. The packed
 * plan is the same bits. */
SDGP_API sdgp_status sdgp_sparse_bwd_pack_strided(sdgp_sparse_bwd *p, const float *w, const int64_t strides[4],
                                                  sdgp_error *err);
/* dD (B x H x W x Cin, or the layout set below; fully overwritten; positions no tap reaches get 0) = the input gradient of
 * the convolution for the compressed dO, which must match the plan (axis CHANNEL, n, m, rows =
 * B*Ho*Wo, C = Cout). The result is bitwise the same for every thread count; relative error
 * against the dense product <= ~1e-6 (fp32 FMAs, the sum order of README.md). */
SDGP_API sdgp_status sdgp_sparse_bwd_data(sdgp_sparse_bwd *p, float *dD, const sdgp_nm_tensor *dO, sdgp_error *err);
/* The same product with the pruning fused into the kernel's packing: dO is the dense gradient
 * (B x Ho x Wo x Cout, NHWC), pruned with cfg (channel axis, NHWC: any function, cfg->n:cfg->m
 * equal to the plan's) while each work unit packs the rows it reads, so dO is read once and no
 * compressed tensor is written. dD is bitwise sdgp_sparse_bwd_data's for sdgp_prune(cfg, dO)'s
 * compressed form (same masks, values, Philox counters and rescale factors); rescaled runs its
 * first pass (the scope's sums) over dO before the kernel. Shared masks (cfg->mask_block > 1):
 * along lines (cfg->mask_line, 0 = Ho x Wo) that divide Wo, or equal it when the plan was told of
 * blocks (sdgp_sparse_bwd_set_mask_block, whose block must then be cfg's: SDGP_ERR_INVALID);
 * other lines SDGP_ERR_UNSUPPORTED. Errors as sdgp_prune's (SDGP_ERR_NUMERIC for non-finite values
 * under MVUE / rescaled, dD then unspecified); SDGP_ERR_UNSUPPORTED for the row axis or NCHW
 * input. cfg->threads 0: the plan's threads. Per-thread buffers of about 16 KiB (at least a line
 * of slots) are allocated at the first call. */
SDGP_API sdgp_status sdgp_sparse_bwd_data_pruned(sdgp_sparse_bwd *p, float *dD, const float *dO, const sdgp_prune_cfg *cfg,
                                                 sdgp_error *err);
/* Shared masks: the dO of later sdgp_sparse_bwd_data calls comes in blocks of `block` consecutive
 * pixels along each row of dO whose slots hold the same indices (sdgp_prune with mask_block =
 * block and mask_line = Wo writes them so; a dO without that structure gives a wrong result).
 * Stride-1 plans then run the shared-mask micro-kernel, which loads each kept weight row once per
 * block instead of once per pixel; other plans ignore it. block 1 (the default): a mask per row.
 * The sum order changes (README.md), the result stays bitwise the same for every thread count.
 * SDGP_ERR_INVALID for block outside [1, SDGP_MASK_BLOCK_MAX]. */
SDGP_API sdgp_status sdgp_sparse_bwd_set_mask_block(sdgp_sparse_bwd *p, int block, sdgp_error *err);
/* dD's layout in later sdgp_sparse_bwd_data calls: SDGP_LAYOUT_NHWC (the default, B x H x W x Cin)
 * or SDGP_LAYOUT_NCHW (B x Cin x H x W, PyTorch's default), bitwise the NHWC result transposed.
 * NCHW: each work unit computes into a per-thread NHWC buffer (the unit's dD block, ~256 KiB x
 * Cin/64, allocated at the first such call) and transposes every column block of it into dD while
 * it is in cache. SDGP_ERR_INVALID for another value. */
SDGP_API sdgp_status sdgp_sparse_bwd_set_output_layout(sdgp_sparse_bwd *p, sdgp_layout layout, sdgp_error *err);

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
 * never exist for the whole batch (src/kernels/spwino.md). */
typedef struct sdgp_sparse_wino sdgp_sparse_wino;

/* 1 when the geometry has a Winograd-domain kernel: 3x3, stride 1, pad <= 2, groups 1 (any B, H, W, C). */
SDGP_API int sdgp_sparse_wino_supports(const sdgp_conv_geom *g);
/* As sdgp_sparse_bwd_create; SDGP_ERR_UNSUPPORTED (naming the reason) for other geometries. */
SDGP_API sdgp_status sdgp_sparse_wino_create(sdgp_sparse_wino **out, const sdgp_conv_geom *g, int n, int m,
                                             sdgp_isa isa, int threads, sdgp_error *err);
SDGP_API void sdgp_sparse_wino_destroy(sdgp_sparse_wino *p); /* NULL is fine */
SDGP_API sdgp_isa sdgp_sparse_wino_isa(const sdgp_sparse_wino *p);
/* Transforms and packs w (OIHW) into U. Required before the first sdgp_sparse_wino_data and
 * whenever the weights change. */
SDGP_API sdgp_status sdgp_sparse_wino_pack(sdgp_sparse_wino *p, const float *w, sdgp_error *err);
/* dD (B x H x W x Cin, overwritten) from dense dO (B x Ho x Wo x Cout, read only), pruned in the
 * Winograd domain with cfg (fn and n:m must be the plan's, axis CHANNEL; scope, seed, step and
 * layer as in sdgp_prune; cfg->isa and cfg->threads are ignored: the plan's; cfg->layout must be NHWC). n == m (any fn, and
 * fn NONE, which requires a plan with n == m): no pruning, the dense Winograd product. Bitwise the
 * same for every thread count.
 * SDGP_ERR_NUMERIC when MVUE / rescaled meet a non-finite value, as sdgp_prune. */
SDGP_API sdgp_status sdgp_sparse_wino_data(sdgp_sparse_wino *p, float *dD, const float *dO, const sdgp_prune_cfg *cfg,
                                           sdgp_error *err);

/* ---- N:M sparse-weight forward: Y = conv(X, W) for weights with one N:M mask per block ----
 * W (OIHW) has, for each block of `block` consecutive output channels (16 or 32; the last block
 * holds what remains of Cout) and each group of m consecutive input channels, at most n input
 * channels whose weights are nonzero anywhere in the block (any tap): the form of
 * --weight-groups block16 / block32 (sdgp_weights_project). The kernel runs the dense product over
 * the kept input channels only: n/m of the multiplies. X, Y NHWC; no grouped convolutions; Cin % m
 * == 0; block 16 or 32; other arguments as sdgp_sparse_bwd_create. src/kernels/spfwd.md has the
 * design and the measurements. */
typedef struct sdgp_sparse_fwd sdgp_sparse_fwd;

SDGP_API sdgp_status sdgp_sparse_fwd_create(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, int block,
                                            sdgp_isa isa, int threads, sdgp_error *err);
SDGP_API void sdgp_sparse_fwd_destroy(sdgp_sparse_fwd *p); /* NULL is fine */
SDGP_API sdgp_isa sdgp_sparse_fwd_isa(const sdgp_sparse_fwd *p);
/* Packs w (OIHW) into the plan: the kept input channels of each block and their weights. Again
 * whenever the weights change. SDGP_ERR_INVALID, naming the block and the input channels, when a
 * block's group holds more than n nonzero input channels (the plan then holds no weights). */
SDGP_API sdgp_status sdgp_sparse_fwd_pack(sdgp_sparse_fwd *p, const float *w, sdgp_error *err);
/* y (B x Ho x Wo x Cout, overwritten) = the convolution of x (B x H x W x Cin) with the packed
 * weights. Bitwise the same for every thread count and every ISA path (one fp32 FMA chain per
 * output element, taps then kept channels in order). */
SDGP_API sdgp_status sdgp_sparse_fwd_run(sdgp_sparse_fwd *p, float *y, const float *x, sdgp_error *err);

/* The same product by Winograd's algorithm F(tile x tile, 3x3), tile 2 or 4, for 3x3 stride-1
 * convolutions (padding 0-2): a block mask zeroes whole 3x3 kernels, so it holds in the Winograd
 * domain exactly and each of the (tile+2)^2 element products runs over the block's kept channels
 * only: n/m of 16/36 (tile 2) or 36/144 (tile 4) of the direct multiplies. Pack and run as above;
 * the result differs from the direct algorithm's by the transforms' rounding (tile 4 more: its
 * matrices hold 4, 5, 8 and 1/6), but is bitwise the same for every thread count and ISA path.
 * SDGP_ERR_UNSUPPORTED for other geometries. */
SDGP_API int sdgp_sparse_fwd_wino_supports(const sdgp_conv_geom *g);
SDGP_API sdgp_status sdgp_sparse_fwd_create_wino(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, int block,
                                                 int tile, sdgp_isa isa, int threads, sdgp_error *err);

/* The same product for weights with N:M masks along *output* channels (--weight-groups cout): at
 * each (input channel, tap), at most n of every m consecutive output channels have a nonzero
 * weight. The plan transposes X to channel-major with images innermost, so one loaded vector of 8
 * images feeds the n kept output channels of its group: n/m of the multiplies. Stride 1 or 2, no groups,
 * 1 <= n <= 4, n < m <= 8, m dividing Cout (sdgp_sparse_fwd_cout_supports; else
 * SDGP_ERR_UNSUPPORTED). Pack and run as above (pack: SDGP_ERR_INVALID, naming the output channels,
 * input channel and tap, when a group keeps more than n). Its run needs a workspace for the transposed
 * input and output (sdgp_sparse_fwd_workspace_bytes, below). One fp32 FMA chain per output element, input channels
 * in chunks and subsets in order: bitwise the same for every thread count and ISA path, but not the
 * direct kernel's order. AVX-512 machines run an AVX-512 micro-kernel with wider tiles (1.5-1.7x the
 * AVX2 one at 2:4, 1.2-1.45x at 1:4 on Zen 5: src/kernels/spcout.md). */
SDGP_API int sdgp_sparse_fwd_cout_supports(const sdgp_conv_geom *g, int n, int m);
SDGP_API sdgp_status sdgp_sparse_fwd_create_cout(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                                 int threads, sdgp_error *err);
/* Scratch memory of a run besides the plan: the cout form's transposed input (about the layer's
 * input, batch rounded up to 16, padding included) and one output tile per thread (0 for the other
 * forms). By default the plan allocates it at its first run and keeps it; set_workspace gives it
 * the caller's buffer instead (64-byte aligned, at least workspace_bytes), so that plans that never
 * run at the same time (a model's layers) share one; NULL returns to the plan's own. The plan never
 * frees the caller's buffer. */
SDGP_API size_t sdgp_sparse_fwd_workspace_bytes(const sdgp_sparse_fwd *p);
SDGP_API sdgp_status sdgp_sparse_fwd_set_workspace(sdgp_sparse_fwd *p, void *ws, size_t bytes, sdgp_error *err);

/* ---- N:M sparse-weight data gradient: dL/dX of Y = conv(X, W) for block-masked weights ----
 * The backward-data product of the forward above, for the same weights (the same block form:
 * `block` consecutive output channels share one N:M mask over the input channels), by Winograd's
 * algorithm F(tile x tile, 3x3), tile 2 or 4, for 3x3 stride-1 convolutions with padding 0-2
 * (sdgp_sparse_wdata_supports): dX is the correlation of dY, padded by 2 - pad, with the rotated,
 * transposed kernels, and the block mask holds in its Winograd domain too, so each element product
 * runs over each block's kept input channels only (n/m of the multiplies). g is the *forward*
 * geometry (X: B x H x W x Cin, Y: B x Ho x Wo x Cout, NHWC); W is OIHW. Pack whenever the weights
 * change (the same check as sdgp_sparse_fwd_pack: SDGP_ERR_INVALID, naming the block and input
 * channels, when a group holds more than n nonzero channels). Run overwrites dx (B x H x W x Cin)
 * with the gradient for dy (B x Ho x Wo x Cout). The result differs from the direct product by the
 * transforms' rounding, as the Winograd forward's; it is bitwise the same for every thread count
 * and every ISA path (one fp32 FMA chain per (element, block, input channel) over the block's
 * output channels, blocks added in order). SDGP_ERR_UNSUPPORTED for other geometries. */
typedef struct sdgp_sparse_wdata sdgp_sparse_wdata;

SDGP_API int sdgp_sparse_wdata_supports(const sdgp_conv_geom *g);
SDGP_API sdgp_status sdgp_sparse_wdata_create(sdgp_sparse_wdata **out, const sdgp_conv_geom *g, int n, int m, int block,
                                              int tile, sdgp_isa isa, int threads, sdgp_error *err);
SDGP_API void sdgp_sparse_wdata_destroy(sdgp_sparse_wdata *p); /* NULL is fine */
SDGP_API sdgp_isa sdgp_sparse_wdata_isa(const sdgp_sparse_wdata *p);
SDGP_API sdgp_status sdgp_sparse_wdata_pack(sdgp_sparse_wdata *p, const float *w, sdgp_error *err);
SDGP_API sdgp_status sdgp_sparse_wdata_run(sdgp_sparse_wdata *p, float *dx, const float *dy, sdgp_error *err);

/* ---- N:M sparse weight gradient: dW = X^T x dY for dY pruned along positions ----
 * dY comes in the row-axis compressed form (sdgp_nm_tensor, axis SDGP_AXIS_ROW, rows = B*Ho*Wo,
 * C = Cout): for every output channel, n of every m consecutive rows are stored, as MVUE's
 * pruning for the weight gradient (--prune-wgrad) writes them. The kernel computes
 *   dW[co][ci][i][j] = sum over the stored slots (row r, value v) of channel co of
 *                      v * X[b, ho*stride - pad + i, wo*stride - pad + j, ci]     (r = (b*Ho + ho)*Wo + wo)
 * by the direct algorithm (any kernel size, stride and padding; no grouped convolutions), running
 * only the stored slots: n/m of the multiplies. Each output channel keeps its own rows (MVUE's
 * masks are not shared by channels): output channels sit in the vector lanes and a lane-wise
 * permute picks each channel's row, so m must divide 8 (1:2, 2:4, 1:4, 2:8, 4:8, ...; other m:
 * SDGP_ERR_UNSUPPORTED). g is the forward geometry (X: B x H x W x Cin, NHWC); dw is OIHW
 * (Cout x Cin x kh x kw), overwritten. Bitwise the same for every thread count and every ISA path:
 * one fp32 FMA chain per output element over its channel's slots in row order.
 * src/kernels/spwgrad.md has the design and the measurements (on Zen 5 the permutes bound it: at
 * 2:4 about as fast as a dense product at the FMA ceiling; the AVX2 path runs a row-wise form with
 * the same bits instead, 1.45-1.54x over oneDNN at 2:4 on Zen 3, and so does the AVX-512 path on
 * stride-1 layers of 3x3 kernels or larger, where it measured about as fast as the permute form on
 * Zen 5 and 1.5-1.7x faster than AVX2's row-wise kernel). */
typedef struct sdgp_sparse_wgrad sdgp_sparse_wgrad;

SDGP_API sdgp_status sdgp_sparse_wgrad_create(sdgp_sparse_wgrad **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                              int threads, sdgp_error *err);
SDGP_API void sdgp_sparse_wgrad_destroy(sdgp_sparse_wgrad *p); /* NULL is fine */
SDGP_API sdgp_isa sdgp_sparse_wgrad_isa(const sdgp_sparse_wgrad *p);
/* SDGP_ERR_INVALID when dy is not the plan's form (axis, n:m, rows = B*Ho*Wo, C = Cout; the message
 * names the mismatch) or a stored index is >= m (dw then unspecified). */
SDGP_API sdgp_status sdgp_sparse_wgrad_run(sdgp_sparse_wgrad *p, float *dw, const float *x, const sdgp_nm_tensor *dy,
                                           sdgp_error *err);
/* Scratch memory of a run besides the plan: the row-wise form's zero-padded copy of X (B x (H+2 pad)
 * x (W+2 pad) x Cin floats, Cin rounded up to 8; 0 where the plan runs the permute form). By default the plan allocates
 * it at its first run and keeps it; set_workspace gives it the caller's buffer instead (64-byte
 * aligned, at least workspace_bytes), so that plans that never run at the same time (a model's
 * layers) share one; NULL returns to the plan's own. The plan never frees the caller's buffer. */
SDGP_API size_t sdgp_sparse_wgrad_workspace_bytes(const sdgp_sparse_wgrad *p);
SDGP_API sdgp_status sdgp_sparse_wgrad_set_workspace(sdgp_sparse_wgrad *p, void *ws, size_t bytes, sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
