/* The measured FMA ceiling (GFLOP/s) of the ISA path on a team of threads: each thread runs a
 * pure register FMA loop (peak_<isa>.c) for about `seconds`; the best of three rounds counts.
 * The portable path measures scalar multiply-adds as the compiler emits them. */
#include <omp.h>

#include "kernels/spconv_internal.h"

static int64_t peak_loop_ref(int64_t iters, float *sink) {
    float a[12];
    for (int q = 0; q < 12; q++) a[q] = (float)q;
    for (int64_t it = 0; it < iters; it++) {
        for (int q = 0; q < 12; q++) a[q] = a[q] * 0.999999f + 1e-7f;
        __asm__ volatile("" : "+m"(a));
    }
    float s = 0;
    for (int q = 0; q < 12; q++) s += a[q];
    *sink = s;
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
