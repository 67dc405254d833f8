/* The FMA ceiling with 256-bit vectors (see peak_avx512.c). 12 accumulators fit 16 ymm. */
#include <immintrin.h>

#include "kernels/spconv_internal.h"

int64_t spconv_peak_loop_avx2(int64_t iters, float *sink) {
    const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f), one = _mm256_set1_ps(1.0f);
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_add_ps(a0, one), a2 = _mm256_add_ps(a1, one), a3 = _mm256_add_ps(a2, one);
    __m256 a4 = _mm256_add_ps(a3, one), a5 = _mm256_add_ps(a4, one), a6 = _mm256_add_ps(a5, one), a7 = _mm256_add_ps(a6, one);
    __m256 a8 = _mm256_add_ps(a7, one), a9 = _mm256_add_ps(a8, one), a10 = _mm256_add_ps(a9, one), a11 = _mm256_add_ps(a10, one);
    for (int64_t it = 0; it < iters; it++) {
        a0 = _mm256_fmadd_ps(a0, m, c), a1 = _mm256_fmadd_ps(a1, m, c), a2 = _mm256_fmadd_ps(a2, m, c);
        a3 = _mm256_fmadd_ps(a3, m, c), a4 = _mm256_fmadd_ps(a4, m, c), a5 = _mm256_fmadd_ps(a5, m, c);
        a6 = _mm256_fmadd_ps(a6, m, c), a7 = _mm256_fmadd_ps(a7, m, c), a8 = _mm256_fmadd_ps(a8, m, c);
        a9 = _mm256_fmadd_ps(a9, m, c), a10 = _mm256_fmadd_ps(a10, m, c), a11 = _mm256_fmadd_ps(a11, m, c);
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
                         "+x"(a9), "+x"(a10), "+x"(a11));
    }
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
    float t[8];
    _mm256_storeu_ps(t, s);
    *sink = t[0] + t[1] + t[2] + t[3] + t[4] + t[5] + t[6] + t[7];
    return iters * 12 * 8;
}
