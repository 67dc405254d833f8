/* An 8 x 8 float transpose in ymm registers, for files compiled with -mavx2 (transpose_avx2.c,
 * prune_sampled_avx2.c). */
#ifndef SDGP_TRANSPOSE8_AVX2_H
#define SDGP_TRANSPOSE8_AVX2_H

#include <immintrin.h>

/* In place: r[i] lane l <- r[l] lane i. After the unpacks and shuffles, u[k] holds column k (lane 0)
 * and column 4 + k (lane 1) of rows 0-3, u[4 + k] the same of rows 4-7; the lane permutes join them. */
static inline void transpose8x8_ps(__m256 r[8]) {
    __m256 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm256_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm256_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int h = 0; h < 2; h++) {
        u[4 * h + 0] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0x44);
        u[4 * h + 1] = _mm256_shuffle_ps(t[4 * h], t[4 * h + 2], 0xEE);
        u[4 * h + 2] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0x44);
        u[4 * h + 3] = _mm256_shuffle_ps(t[4 * h + 1], t[4 * h + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        r[k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x20);
        r[4 + k] = _mm256_permute2f128_ps(u[k], u[4 + k], 0x31);
    }
}

#endif
