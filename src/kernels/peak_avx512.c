/* The FMA ceiling of this core with 512-bit vectors: a pure register loop, 12 independent
 * accumulators (more than latency x throughput), no memory traffic. Used by `sdgp bench conv` to
 * put kernel throughput in proportion. Returns the FMAs executed (16 lanes each).
 * Named variables, not an array: GCC keeps an array of vectors on the stack here. */
#include <immintrin.h>

#include "kernels/spconv_internal.h"

int64_t spconv_peak_loop_avx512(int64_t iters, float *sink) {
    const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f), one = _mm512_set1_ps(1.0f);
    __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_add_ps(a0, one), a2 = _mm512_add_ps(a1, one), a3 = _mm512_add_ps(a2, one);
    __m512 a4 = _mm512_add_ps(a3, one), a5 = _mm512_add_ps(a4, one), a6 = _mm512_add_ps(a5, one), a7 = _mm512_add_ps(a6, one);
    __m512 a8 = _mm512_add_ps(a7, one), a9 = _mm512_add_ps(a8, one), a10 = _mm512_add_ps(a9, one), a11 = _mm512_add_ps(a10, one);
    for (int64_t it = 0; it < iters; it++) {
        a0 = _mm512_fmadd_ps(a0, m, c), a1 = _mm512_fmadd_ps(a1, m, c), a2 = _mm512_fmadd_ps(a2, m, c);
        a3 = _mm512_fmadd_ps(a3, m, c), a4 = _mm512_fmadd_ps(a4, m, c), a5 = _mm512_fmadd_ps(a5, m, c);
        a6 = _mm512_fmadd_ps(a6, m, c), a7 = _mm512_fmadd_ps(a7, m, c), a8 = _mm512_fmadd_ps(a8, m, c);
        a9 = _mm512_fmadd_ps(a9, m, c), a10 = _mm512_fmadd_ps(a10, m, c), a11 = _mm512_fmadd_ps(a11, m, c);
        /* keeps the 12 chains distinct (no common subexpressions) and in registers */
        __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), "+v"(a7), "+v"(a8),
                         "+v"(a9), "+v"(a10), "+v"(a11));
    }
    __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                             _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
    s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
    *sink = _mm512_reduce_add_ps(s);
    return iters * 12 * 16;
}
