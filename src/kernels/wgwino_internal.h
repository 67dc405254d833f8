/* The dense weight gradient of 3x3 stride-1 convolutions by Winograd F(4x4,3x3) (wgwino.c), for the
 * CPUs where oneDNN has no Winograd kernel. Design and measurements: wgwino.md.
 *
 * dW = G^T [ sum over tiles of (A dY A^T) (.) (B^T X B) ] G: the forward's input transform of X
 * (spfwd_wino_loops.h), the transpose of its output transform applied to the 4x4 tiles of dY, and
 * G^T (.) G at the end. Per Winograd element e (36) that is one GEMM over all tiles of the batch:
 * M_e[k][c] = sum_t Y_e[t][k] V_e[t][c]. */
#ifndef SDGP_WGWINO_INTERNAL_H
#define SDGP_WGWINO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/spfwd_internal.h"
#include "sdgp/isa.h"
#include "sdgp/sparse.h"

/* The micro-kernel: for i < mr (<= WGWINO_MR), j < nc (<= WGWINO_NR),
 *
 *   m[i*ldm + j] = (acc ? m[i*ldm + j] : 0) + sum over t < K, in order, of y[t*ldy + i] * v[t*ldv + j]
 *
 * as one fp32 FMA chain per element (fmaf in the reference), so every ISA path gives the same bits.
 * y and v need no alignment. */
#define WGWINO_MR 6
#define WGWINO_NR 16
typedef void (*wgwino_gemm_fn)(float *m, int64_t ldm, const float *y, int64_t ldy, const float *v, int64_t ldv,
                               int64_t K, int mr, int nc, int acc);

/* Row a of A dY A^T for image b's tiles of dY (B x Ho x Wo x Cout): element bb of tile t at
 * out + bb*ostride + t*tstride (tstride >= Cout); rows and columns past Ho, Wo read zrow (Cout
 * zeros). Coefficients are powers of two and the additions' order is fixed: every path the same
 * bits. */
typedef void (*wgwino_dy_fn)(const spfwd_wino_shape *s, float *out, int64_t ostride, int64_t tstride, const float *dy,
                             const float *zrow, int64_t b, int a);

typedef struct {
    sdgp_isa isa;
    wgwino_gemm_fn gemm;
    wgwino_dy_fn dy_in;
    spfwd_wino_in_fn x_in;
} wgwino_kernels;

void wgwino_gemm_ref(float *m, int64_t ldm, const float *y, int64_t ldy, const float *v, int64_t ldv, int64_t K, int mr,
                     int nc, int acc);
void wgwino_gemm_avx2(float *m, int64_t ldm, const float *y, int64_t ldy, const float *v, int64_t ldv, int64_t K,
                      int mr, int nc, int acc);
void wgwino_dy_ref(const spfwd_wino_shape *s, float *out, int64_t ostride, int64_t tstride, const float *dy,
                   const float *zrow, int64_t b, int a);
void wgwino_dy_avx2(const spfwd_wino_shape *s, float *out, int64_t ostride, int64_t tstride, const float *dy,
                    const float *zrow, int64_t b, int a);

typedef struct wgwino wgwino;

/* A plan for g (3x3, stride 1, padding 0-2, no groups: sdgp_sparse_fwd_wino_supports). isa AUTO
 * follows SDGP_ISA; AVX-512 runs the AVX2 kernels. threads 0: omp_get_max_threads(). ws_limit
 * (bytes, 0: none): chunks of the batch small enough that the working memory fits, where one
 * image's tiles beside M fit at all (else the smallest chunk, over the limit). */
sdgp_status wgwino_create(wgwino **out, const sdgp_conv_geom *g, sdgp_isa isa, int threads, size_t ws_limit,
                          sdgp_error *err);
void wgwino_destroy(wgwino *p);
/* Its working memory (M, and one chunk's transformed tiles), which the caller lends. */
size_t wgwino_ws_bytes(const wgwino *p);
void wgwino_set_ws(wgwino *p, void *ws);
/* Reads x as the space-to-depth view of an Hs x Ws tensor (spfwd_wino_shape's s2d_in). */
void wgwino_set_s2d(wgwino *p, int Hs, int Ws);
const sdgp_conv_geom *wgwino_geom(const wgwino *p);
/* dw (Cout x Cin x 3 x 3) and, when db is not NULL, db (Cout) from x (NHWC) and dy (NHWC),
 * overwritten. Bitwise the same for every thread count and ISA path. */
sdgp_status wgwino_run(wgwino *p, float *dw, float *db, const float *x, const float *dy, sdgp_error *err);

#endif
