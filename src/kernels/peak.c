/* The measured FMA ceiling (GFLOP/s) of the ISA path on a team of threads: each thread runs a
 * pure register FMA loop (peak_<isa>.c) for about `seconds`; the best of three rounds counts.
 * The portable path measures scalar multiply-adds (SSE mul + add: no FMA in the baseline ISA). */
#include <omp.h>

#include "kernels/spconv_internal.h"

static int64_t peak_loop_ref(int64_t iters, float *sink) {
    float a0 = 0, a1 = 1, a2 = 2, a3 = 3, a4 = 4, a5 = 5, a6 = 6, a7 = 7, a8 = 8, a9 = 9, a10 = 10, a11 = 11;
    for (int64_t it = 0; it < iters; it++) {
        a0 = a0 * 0.999999f + 1e-7f, a1 = a1 * 0.999999f + 1e-7f, a2 = a2 * 0.999999f + 1e-7f;
        a3 = a3 * 0.999999f + 1e-7f, a4 = a4 * 0.999999f + 1e-7f, a5 = a5 * 0.999999f + 1e-7f;
        a6 = a6 * 0.999999f + 1e-7f, a7 = a7 * 0.999999f + 1e-7f, a8 = a8 * 0.999999f + 1e-7f;
        a9 = a9 * 0.999999f + 1e-7f, a10 = a10 * 0.999999f + 1e-7f, a11 = a11 * 0.999999f + 1e-7f;
        /* keeps the 12 chains in (SSE) registers and un-vectorized */
        __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6), "+x"(a7), "+x"(a8),
                         "+x"(a9), "+x"(a10), "+x"(a11));
    }
    *sink = a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7 + a8 + a9 + a10 + a11;
    return iters * 12;
}

double spconv_fma_ceiling(sdgp_isa isa, int threads, double seconds) {
    int64_t (*loop)(int64_t, float *) = isa == SDGP_ISA_AVX512 ? spconv_peak_loop_avx512
                                        : isa == SDGP_ISA_AVX2 ? spconv_peak_loop_avx2
                                                               : peak_loop_ref;
    if (threads < 1) threads = omp_get_max_threads();
    /* Calibrate the iteration count on one thread, then time the team. */
    float sink = 0;
    int64_t iters = 1 << 16;
    for (;;) {
        double t0 = omp_get_wtime();
        loop(iters, &sink);
        double t = omp_get_wtime() - t0;
        if (t > seconds / 8 || iters > ((int64_t)1 << 40)) {
            iters = (int64_t)((double)iters * seconds / (t > 1e-9 ? t : 1e-9));
            break;
        }
        iters *= 4;
    }
    double best = 0;
    for (int round = 0; round < 3; round++) {
        int64_t fmas = 0;
        double t0 = omp_get_wtime();
#pragma omp parallel num_threads(threads) reduction(+ : fmas)
        {
            float s;
            fmas += loop(iters, &s);
            if (s == 12345.0f) fmas++; /* keeps the result alive */
        }
        double gf = 2.0 * (double)fmas / (omp_get_wtime() - t0) * 1e-9;
        if (gf > best) best = gf;
    }
    (void)sink;
    return best;
}
