/* The Winograd-domain data loops compiled for AVX2 (spwino_loops.h). */
#include <immintrin.h>

#include "kernels/spwino_loops.h"

/* 8 slots at a time whose channels lie within 16 of the first one, base: a vpermps of each of
 * the two vectors of channels from base (masked loads at the slice's end) by kept - base, blended
 * by which vector a lane reads, and the rescale factors alike (sc; f = 1 otherwise); MVUE
 * multiplies by inv in double (the same single rounding as the scalar expression). Offsets are
 * kept * row_bytes; the values' bits, zero-extended to 64 bits and or'ed with the offsets in the
 * high half, are stored as entries (vpmaskmov, slow on AMD cores, only for the row's last few).
 * Factors and offsets are not read from f or from a table made per block: a vector load of
 * values just written by scalar stores waits until they reach the cache (perf). */
static void spwino_block_row(spconv_entry *restrict out, const float *restrict x, const prune_block_slice *b, uint32_t row_bytes,
                             int64_t ns, int mvue) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), seven = _mm256_set1_epi32(7);
    const __m256i lane0 = _mm256_setr_epi64x(0, 1, 2, 3), lane1 = _mm256_setr_epi64x(4, 5, 6, 7), rb = _mm256_set1_epi32((int)row_bytes);
    for (int64_t k = 0; k < ns; k += 8) {
        const int cnt = ns - k < 8 ? (int)(ns - k) : 8;
        const int32_t base = b->kept[k];
        if (b->kept[k + cnt - 1] - base >= 16) {
            spwino_block_slots(out, x, b, row_bytes, k, k + cnt, mvue);
            continue;
        }
        const int64_t valid = b->c1 - base; /* channels readable from base */
        const __m256i v0 = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid >= 8 ? 8 : (int)valid), lane),
                      v1 = _mm256_cmpgt_epi32(_mm256_set1_epi32(valid >= 16 ? 8 : valid <= 8 ? 0 : (int)valid - 8), lane);
        const __m256i kc = _mm256_cmpgt_epi32(_mm256_set1_epi32(cnt), lane);
        const __m256i k0 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(cnt), lane0), k1 = _mm256_cmpgt_epi64(_mm256_set1_epi64x(cnt), lane1);
        const __m256i kept = cnt == 8 ? _mm256_loadu_si256((const __m256i *)(b->kept + k)) : _mm256_maskload_epi32(b->kept + k, kc);
        const __m256i idx = _mm256_sub_epi32(kept, _mm256_set1_epi32(base));
        const __m256 hi = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, seven));
        const __m256 v = _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_maskload_ps(x + base, v0), idx),
                                          _mm256_permutevar8x32_ps(_mm256_maskload_ps(x + base + 8, v1), idx), hi);
        __m128i y0, y1;
        if (mvue) {
            const __m256d d0 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), _mm256_maskload_pd(b->inv + k, k0));
            const __m256d d1 = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), _mm256_maskload_pd(b->inv + k + 4, k1));
            y0 = _mm_castps_si128(_mm256_cvtpd_ps(d0));
            y1 = _mm_castps_si128(_mm256_cvtpd_ps(d1));
        } else {
            const __m256 f = b->sc ? _mm256_blendv_ps(_mm256_permutevar8x32_ps(_mm256_maskload_ps(b->sc + base, v0), idx),
                                                      _mm256_permutevar8x32_ps(_mm256_maskload_ps(b->sc + base + 8, v1), idx), hi)
                                   : _mm256_set1_ps(1.0f);
            const __m256i y = _mm256_castps_si256(_mm256_mul_ps(v, f));
            y0 = _mm256_castsi256_si128(y);
            y1 = _mm256_extracti128_si256(y, 1);
        }
        const __m256i o = _mm256_mullo_epi32(kept, rb);
        const __m256i e0 = _mm256_or_si256(_mm256_cvtepu32_epi64(y0), _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_castsi256_si128(o)), 32));
        const __m256i e1 =
            _mm256_or_si256(_mm256_cvtepu32_epi64(y1), _mm256_slli_epi64(_mm256_cvtepu32_epi64(_mm256_extracti128_si256(o, 1)), 32));
        long long *dst = (long long *)(out + k);
        if (cnt >= 4)
            _mm256_storeu_si256((__m256i *)dst, e0);
        else
            _mm256_maskstore_epi64(dst, k0, e0);
        if (cnt == 8)
            _mm256_storeu_si256((__m256i *)(dst + 4), e1);
        else if (cnt > 4)
            _mm256_maskstore_epi64(dst + 4, k1, e1);
    }
}

const spwino_loops spwino_loops_avx2 = SPWINO_LOOPS_TABLE;
