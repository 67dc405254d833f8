/* Helpers of the AVX2 pruning kernels (prune_avx2.c, prune_mvue_avx2.c; compiled with -mavx2 -mbmi2):
 * the compressed slots of 8 lanes, 8 mask bits as lanes, tails of fewer than 8 lanes, bytes of lanes. */
#ifndef SDGP_PRUNE_AVX2_PACK_H
#define SDGP_PRUNE_AVX2_PACK_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

/* The kept lanes of y (kp all-ones) in order to vals[pos..), their numbers as bytes to idx[pos..),
 * each (lane & lane_and) + lane_add; returns how many. pdep spreads the 8 mask bits to bytes, pext
 * picks those lanes' numbers, vpermps gathers the values. Whole 8-lane stores where the row (slots
 * long) has room: the excess is overwritten by the next store, and never reaches another row. */
static inline int compress8(float *vals, uint8_t *idx, int64_t pos, int64_t slots, __m256 y, __m256i kp, uint64_t lane_and,
                            uint64_t lane_add) {
    const unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(kp));
    const int count = __builtin_popcount(bits);
    const uint64_t lanes = _pext_u64(0x0706050403020100ull, _pdep_u64(bits, 0x0101010101010101ull) * 0xff);
    const __m256 v = _mm256_permutevar8x32_ps(y, _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)lanes)));
    const uint64_t ib = (lanes & lane_and) + lane_add; /* bytes < 64: no carries between them */
    if (pos + 8 <= slots) {
        _mm256_storeu_ps(vals + pos, v);
        memcpy(idx + pos, &ib, 8);
    } else {
        float t[8];
        _mm256_storeu_ps(t, v);
        memcpy(vals + pos, t, (size_t)count * sizeof *t);
        memcpy(idx + pos, &ib, (size_t)count);
    }
    return count;
}

/* 8 bits of a stored keep mask, spread to all-ones lanes. */
static inline __m256i spread8(int bits) {
    const __m256i lane_bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    return _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_set1_epi32(bits), lane_bit), lane_bit);
}

/* All-ones in lanes 0 .. cnt-1. */
static inline __attribute__((always_inline)) __m256i lanes_below(int cnt) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* cnt floats at p: a plain access for a whole vector (cnt a constant 8 there), masked for tails. */
static inline __attribute__((always_inline)) __m256 load_ps(const float *p, int cnt) {
    return cnt == 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, lanes_below(cnt));
}
static inline __attribute__((always_inline)) void store_ps(float *p, __m256 v, int cnt) {
    cnt == 8 ? _mm256_storeu_ps(p, v) : _mm256_maskstore_ps(p, lanes_below(cnt), v);
}

/* The low bytes of 8 lanes: those of lanes 0-3 at dword 0 of lo, those of lanes 4-7 at dword 0 of hi. */
static inline void low_bytes(__m128i *lo, __m128i *hi, __m256i v) {
    __m256i p = _mm256_packus_epi16(_mm256_packs_epi32(v, v), _mm256_setzero_si256());
    *lo = _mm256_castsi256_si128(p);
    *hi = _mm256_extracti128_si256(p, 1);
}

#endif
