/* What the C benchmarks in bench/ share: deterministic fill and the relative L2 error of a result
 * against a reference (header-only: each benchmark is one translation unit). */
#ifndef SDGP_BENCH_UTIL_H
#define SDGP_BENCH_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

/* x[i] uniform in [-1, 1), from a 64-bit LCG seeded by seed */
static inline void bench_fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int32_t)(seed >> 32)) * (1.0f / 2147483648.0f);
    }
}

/* ||a - b|| / ||b|| (||b|| = 0: the absolute norm) */
static inline double bench_rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return sqrt(d / (s > 0 ? s : 1));
}

#endif
