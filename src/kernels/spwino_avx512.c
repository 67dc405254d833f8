/* The Winograd-domain data loops compiled for AVX-512 (spwino_loops.h). */
#include <immintrin.h>

#include "kernels/spwino_loops.h"

/* 16 slots at a time whose channels lie within 32 of the first one, base: one vpermt2ps of the
 * two vectors of channels from base (masked loads at the slice's end) by kept - base, and the
 * rescale factors alike (sc; f = 1 otherwise); MVUE multiplies by inv in double (the same single
 * rounding as the scalar expression). Offsets are kept * row_bytes; the values' bits,
 * zero-extended to 64 bits and or'ed with the offsets in the high half, are stored as entries.
 * Factors and offsets are not read from f or from a table made per block: a vector load of
 * values just written by scalar stores waits until they reach the cache (perf). */
static void spwino_block_row(spconv_entry *restrict out, const float *restrict x, const prune_block_slice *b, uint32_t row_bytes,
                             int64_t ns, int mvue) {
    const __m512i rb = _mm512_set1_epi32((int)row_bytes);
    for (int64_t k = 0; k < ns; k += 16) {
        const int cnt = ns - k < 16 ? (int)(ns - k) : 16;
        const int32_t base = b->kept[k];
        if (b->kept[k + cnt - 1] - base >= 32) {
            spwino_block_slots(out, x, b, row_bytes, k, k + cnt, mvue);
            continue;
        }
        const int64_t valid = b->c1 - base; /* channels readable from base */
        const __mmask16 kc = (__mmask16)((1u << cnt) - 1), v0 = valid >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << valid) - 1),
                        v1 = valid >= 32 ? (__mmask16)0xffff : valid <= 16 ? 0 : (__mmask16)((1u << (valid - 16)) - 1);
        const __mmask8 k0 = (__mmask8)kc, k1 = (__mmask8)(kc >> 8);
        const __m512i kept = _mm512_maskz_loadu_epi32(kc, b->kept + k), idx = _mm512_sub_epi32(kept, _mm512_set1_epi32(base));
        const __m512 v = _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(v0, x + base), idx, _mm512_maskz_loadu_ps(v1, x + base + 16));
        __m256i y0, y1;
        if (mvue) {
            const __m512d d0 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(v)), _mm512_maskz_loadu_pd(k0, b->inv + k));
            const __m512d d1 = _mm512_mul_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1)), _mm512_maskz_loadu_pd(k1, b->inv + k + 8));
            y0 = _mm256_castps_si256(_mm512_cvtpd_ps(d0));
            y1 = _mm256_castps_si256(_mm512_cvtpd_ps(d1));
        } else {
            const __m512 f = b->sc ? _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(v0, b->sc + base), idx,
                                                            _mm512_maskz_loadu_ps(v1, b->sc + base + 16))
                                   : _mm512_set1_ps(1.0f);
            const __m512i y = _mm512_castps_si512(_mm512_mul_ps(v, f));
            y0 = _mm512_castsi512_si256(y);
            y1 = _mm512_extracti32x8_epi32(y, 1);
        }
        const __m512i o = _mm512_mullo_epi32(kept, rb);
        const __m512i e0 = _mm512_or_si512(_mm512_cvtepu32_epi64(y0), _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(o)), 32));
        const __m512i e1 =
            _mm512_or_si512(_mm512_cvtepu32_epi64(y1), _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_extracti32x8_epi32(o, 1)), 32));
        if (cnt >= 8)
            _mm512_storeu_si512(out + k, e0);
        else
            _mm512_mask_storeu_epi64(out + k, k0, e0);
        if (cnt == 16)
            _mm512_storeu_si512(out + k + 8, e1);
        else if (cnt > 8)
            _mm512_mask_storeu_epi64(out + k + 8, k1, e1);
    }
}

const spwino_loops spwino_loops_avx512 = SPWINO_LOOPS_TABLE;
