/* Philox4x32-10 on vectors of 8 counters, for the AVX2 random / MVUE kernels (prune_mvue_avx2.c,
 * prune_sampled_avx2.c; compiled with -mavx2): bitwise sdgp_philox_draw of each lane's group. */
#ifndef SDGP_PRUNE_PHILOX_AVX2_H
#define SDGP_PRUNE_PHILOX_AVX2_H

#include <immintrin.h>
#include <stdint.h>

#include "core/philox.h"

#define CHAINS 4 /* Philox chains of 8 groups: one alone waits on the multiply latency */

#define INLINE static inline __attribute__((always_inline))

/* ---- Philox4x32-10 on 8 * CHAINS counters ---- */

/* hi and lo 32 bits of a * b (b broadcast) for 8 lanes from the even and the odd lanes' products. */
INLINE void mul_hilo(__m256i *hi, __m256i *lo, __m256i a, __m256i b) {
    __m256i even = _mm256_mul_epu32(a, b), odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), b);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xaa);
    *lo = _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xaa);
}

/* Words w[b][0..3] of draw block blk[b] of groups g[b] + order[lane], b < CHAINS. */
INLINE void philox_chains(__m256i w[CHAINS][4], sdgp_philox_key key, const uint64_t g[CHAINS], const uint32_t blk[CHAINS],
                          __m256i order) {
    const __m256i M0 = _mm256_set1_epi32((int)0xD2511F53u), M1 = _mm256_set1_epi32((int)0xCD9E8D57u);
    __m256i(*c)[4] = w;
    for (int b = 0; b < CHAINS; b++) {
        const __m256i gl = _mm256_set1_epi32((int)(uint32_t)g[b]), lo = _mm256_add_epi32(gl, order);
        /* the high word carries where the low word wrapped: hi + 1, minus 1 where lo >= g */
        const __m256i nowrap = _mm256_cmpeq_epi32(_mm256_max_epu32(lo, gl), lo);
        c[b][0] = lo;
        c[b][1] = _mm256_add_epi32(_mm256_set1_epi32((int)((uint32_t)(g[b] >> 32) + 1u)), nowrap);
        c[b][2] = _mm256_set1_epi32((int)blk[b]), c[b][3] = _mm256_set1_epi32(0x53444750); /* "SDGP" */
    }
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int r = 0; r < 10; r++) {
        const __m256i K0 = _mm256_set1_epi32((int)k0), K1 = _mm256_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int b = 0; b < CHAINS; b++) {
            __m256i hi0, lo0, hi1, lo1;
            mul_hilo(&hi0, &lo0, c[b][0], M0);
            mul_hilo(&hi1, &lo1, c[b][2], M1);
            c[b][0] = _mm256_xor_si256(_mm256_xor_si256(hi1, c[b][1]), K0);
            c[b][1] = lo1;
            c[b][2] = _mm256_xor_si256(_mm256_xor_si256(hi0, c[b][3]), K1);
            c[b][3] = lo0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
}

/* Words w[b][0..3] (draw block 0) of groups g0 + 8 b + order[lane], b < CHAINS. */
INLINE void philox(__m256i w[CHAINS][4], sdgp_philox_key key, uint64_t g0, __m256i order) {
    uint64_t g[CHAINS];
    uint32_t blk[CHAINS];
    for (int b = 0; b < CHAINS; b++) g[b] = g0 + 8 * (uint64_t)b, blk[b] = 0;
    philox_chains(w, key, g, blk, order);
}

/* sdgp_u01d of 4 words (half h of w); AVX2 converts only signed: (double)(int)(w - 2^31) + 2^31 is exactly (double)w. */
INLINE __m256d u01_half(__m256i w, int h) {
    __m128i x = _mm_xor_si128(h ? _mm256_extracti128_si256(w, 1) : _mm256_castsi256_si128(w), _mm_set1_epi32((int)0x80000000u));
    return _mm256_mul_pd(_mm256_add_pd(_mm256_cvtepi32_pd(x), _mm256_set1_pd(2147483648.0)), _mm256_set1_pd(1.0 / 4294967296.0));
}

#endif
