/* What bounds the N:M weight-gradient kernel (sdgp_sparse_wgrad, src/kernels/spwgrad*.c) on this core:
 * its micro-kernel alone, every operand in L1 (a 256-row run, 2 x 16 output channels x 8 input
 * channels per call, random picks), against the FMA ceiling of the same ISA, one thread.
 *   pair ns      time per kept slot and input channel: one vpermps and one FMA (16 lanes)
 *   GFLOP/s      useful (kept) multiply-adds
 *   dense-equiv  the dense product's GFLOP/s this would amount to (useful x m/n), the number to hold
 *                against the ceiling: a dense kernel at the ceiling ties it
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_wgrad_micro && build/sdgp_nm_wgrad_micro [isa]
 * isa: avx512 (default) or avx2. Measure quietly: any other busy process halves the numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/spconv_internal.h"
#include "kernels/spwgrad_internal.h"
#include "sdgp/isa.h"

int main(int argc, char **argv) {
    const int avx2 = argc > 1 && !strcmp(argv[1], "avx2");
    const sdgp_isa isa = avx2 ? SDGP_ISA_AVX2 : SDGP_ISA_AVX512;
    sdgp_isa got;
    sdgp_error e;
    if (sdgp_isa_resolve(isa, &got, &e) != SDGP_OK) return fprintf(stderr, "nm_wgrad_micro: %s\n", e.msg), 2;
    const spwgrad_tile_fn tile = avx2 ? spwgrad_tile_avx2 : spwgrad_tile_avx512;
    const int block = avx2 ? 8 : 16, R = avx2 ? 1 : 2, NC = avx2 ? 4 : 8;
    const double ceiling = spconv_fma_ceiling(isa, 1, 0.3);
    printf("# %s, one thread: FMA ceiling %.1f GFLOP/s; micro-kernel R=%d x 16 channels, nc=%d, 256 rows in L1\n",
           sdgp_isa_name(isa), ceiling, R, NC);
    printf("%-5s %8s %9s %12s %9s\n", "n:m", "pair ns", "GFLOP/s", "dense-equiv", "/ceiling");
    static const int forms[][2] = {{1, 2}, {2, 4}, {1, 4}, {2, 8}, {1, 8}};
    float *xt = aligned_alloc(64, (size_t)NC * 256 * sizeof(float)), *acc = aligned_alloc(64, (size_t)NC * 32 * sizeof(float));
    float *val = aligned_alloc(64, 2 * 128 * 16 * sizeof(float));
    int32_t *pick = aligned_alloc(64, 2 * 128 * 16 * sizeof(int32_t));
    if (!xt || !acc || !val || !pick) return fprintf(stderr, "nm_wgrad_micro: out of memory\n"), 1;
    for (int i = 0; i < NC * 256; i++) xt[i] = 1e-3f * (float)(i % 7);
    memset(acc, 0, (size_t)NC * 32 * sizeof(float));
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++) {
        const int n = forms[f][0], m = forms[f][1], ng = 256 / m, ns = ng * n;
        uint32_t s = 12345;
        for (int v = 0; v < 2; v++)
            for (int k = 0; k < ns * 16; k++) {
                s = s * 1664525u + 1013904223u;
                val[v * 128 * 16 + k] = 1e-6f;
                pick[v * 128 * 16 + k] = (k / 16 / n * m) % block + (int)(s >> 16) % m;
            }
        spwgrad_tile t = {xt, 256, val, pick, 128 * 16, ng, n, m, R, NC, 0, acc, 32};
        double best = 1e30;
        for (int round = 0; round < 5; round++) {
            const double t0 = sdgp_now_s();
            for (int it = 0; it < 20000; it++) tile(&t);
            const double dt = sdgp_now_s() - t0;
            if (dt < best) best = dt;
        }
        const double pairs = 20000.0 * ns * R * NC, gf = pairs * 32 / best * 1e-9;
        printf("%d:%-3d %8.3f %9.1f %12.1f %8.2fx\n", n, m, best / pairs * 1e9, gf, gf * m / n, gf * m / n / ceiling);
    }
    free(xt), free(acc), free(val), free(pick);
    return 0;
}
