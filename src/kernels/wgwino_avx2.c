/* The Winograd weight gradient's AVX2 micro-kernel and dY transform (contracts in
 * wgwino_internal.h). Up to 6 rows x 16 columns of M in 12 ymm accumulators; per tile, two vector
 * loads of V, six broadcasts of Y, twelve FMAs (15 of the 16 registers). Column blocks that are not
 * whole vectors (fewer than 8 or 16 columns) take the reference loop: no layer Winograd pays for
 * has them (AUTO's rule wants 16 input channels or more). */
#include <immintrin.h>

#include "kernels/wgwino_internal.h"

#define WGWINO_DY wgwino_dy_avx2
#include "kernels/wgwino_loops.h"

/* Named accumulators, not an array: GCC kept an array of __m256 in memory and stored every
 * accumulator back each tile (31 % of the FMA ceiling; 72-78 % with registers). Rows i >= MR
 * and the second vector when NV = 1 are dead code after inlining. */
#define ACC_ROW(i)                                                                                                     \
    __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();                                              \
    if (MR > i && acc) {                                                                                               \
        c##i##0 = _mm256_loadu_ps(m + i * ldm);                                                                        \
        if (NV > 1) c##i##1 = _mm256_loadu_ps(m + i * ldm + 8);                                                        \
    }
#define FMA_ROW(i)                                                                                                     \
    if (MR > i) {                                                                                                      \
        const __m256 b = _mm256_broadcast_ss(yt + i);                                                                  \
        c##i##0 = _mm256_fmadd_ps(b, v0, c##i##0);                                                                     \
        if (NV > 1) c##i##1 = _mm256_fmadd_ps(b, v1, c##i##1);                                                         \
    }
#define STORE_ROW(i)                                                                                                   \
    if (MR > i) {                                                                                                      \
        _mm256_storeu_ps(m + i * ldm, c##i##0);                                                                        \
        if (NV > 1) _mm256_storeu_ps(m + i * ldm + 8, c##i##1);                                                        \
    }

static inline __attribute__((always_inline)) void gemm_block(float *m, int64_t ldm, const float *y, int64_t ldy,
                                                             const float *v, int64_t ldv, int64_t K, int acc, const int MR,
                                                             const int NV) {
    ACC_ROW(0) ACC_ROW(1) ACC_ROW(2) ACC_ROW(3) ACC_ROW(4) ACC_ROW(5)
    for (int64_t t = 0; t < K; t++) {
        const float *vt = v + t * ldv, *yt = y + t * ldy;
        const __m256 v0 = _mm256_loadu_ps(vt), v1 = NV > 1 ? _mm256_loadu_ps(vt + 8) : v0;
        FMA_ROW(0) FMA_ROW(1) FMA_ROW(2) FMA_ROW(3) FMA_ROW(4) FMA_ROW(5)
    }
    STORE_ROW(0) STORE_ROW(1) STORE_ROW(2) STORE_ROW(3) STORE_ROW(4) STORE_ROW(5)
}

#define CASE(MR)                                                                                                       \
    case MR:                                                                                                           \
        if (nc == 16)                                                                                                  \
            gemm_block(m, ldm, y, ldy, v, ldv, K, acc, MR, 2);                                                         \
        else                                                                                                           \
            gemm_block(m, ldm, y, ldy, v, ldv, K, acc, MR, 1);                                                         \
        return;

void wgwino_gemm_avx2(float *m, int64_t ldm, const float *y, int64_t ldy, const float *v, int64_t ldv, int64_t K,
                      int mr, int nc, int acc) {
    if (nc != 8 && nc != 16) {
        wgwino_gemm_ref(m, ldm, y, ldy, v, ldv, K, mr, nc, acc);
        return;
    }
    switch (mr) {
        CASE(1)
        CASE(2)
        CASE(3)
        CASE(4)
        CASE(5)
        CASE(6)
    }
}
