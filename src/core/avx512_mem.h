/* A masked AVX-512 load that is a plain one when the mask is full. On the Zen 5 host a
 * masked load or store costs several times a plain one (MVUE pruning along positions: 3.4-3.9 ns
 * per float with masked loads and stores, 1.8 with plain loads, 0.9 with both plain;
 * docs/bench/hosts/amd-zen5-f26m2/prune-masks/ab.txt), so kernels whose masks are almost always full load through this, and
 * call their stores with a constant full mask where a vector is whole (the compiler then emits plain ones).
 * The sparse convolution kernels keep their masked forms: their masked loads and stores sit outside
 * the inner loops, and the same change there measured no difference (`sdgp bench conv`, `sdgp bench
 * layers`, within the host's +-8 %). For AVX-512 translation units only. A zero mask reads and
 * writes nothing, as the masked forms. */
#ifndef SDGP_CORE_AVX512_MEM_H
#define SDGP_CORE_AVX512_MEM_H

#include <immintrin.h>

static inline __m512 mem_load_ps(__mmask16 m, const float *p) {
    return m == (__mmask16)0xffff ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(m, p);
}

#endif
