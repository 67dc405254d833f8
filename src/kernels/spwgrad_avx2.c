/* AVX2 micro-kernel of the sparse weight gradient (contract: spwgrad_internal.h): the AVX-512
 * kernel's loop on blocks of 8 rows (vpermps picks within 8 lanes), a vector of 16 output channels
 * as two ymm. */
#include <immintrin.h>

#include "kernels/spwgrad_internal.h"

static inline __attribute__((always_inline)) void tile_fixed(const spwgrad_tile *t, const int NC) {
    __m256 acc[2][4];
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < NC; c++) acc[h][c] = t->fresh ? _mm256_setzero_ps() : _mm256_load_ps(t->acc + c * t->acc_sc + 8 * h);
    const int n = t->n, per_block = 8 / t->m * n, ns = t->ng * n;
    for (int s0 = 0; s0 < ns; s0 += per_block) {
        __m256 x[4];
        for (int c = 0; c < NC; c++) x[c] = _mm256_load_ps(t->xt + c * t->xt_sc + s0 / n * t->m);
        const int s1 = s0 + per_block < ns ? s0 + per_block : ns;
        for (int s = s0; s < s1; s++)
            for (int h = 0; h < 2; h++) {
                const __m256i ix = _mm256_load_si256((const __m256i *)(t->pick + 16 * s + 8 * h));
                const __m256 v = _mm256_load_ps(t->val + 16 * s + 8 * h);
                for (int c = 0; c < NC; c++) acc[h][c] = _mm256_fmadd_ps(v, _mm256_permutevar8x32_ps(x[c], ix), acc[h][c]);
            }
    }
    for (int h = 0; h < 2; h++)
        for (int c = 0; c < NC; c++) _mm256_store_ps(t->acc + c * t->acc_sc + 8 * h, acc[h][c]);
}

void spwgrad_tile_avx2(const spwgrad_tile *t) {
    spwgrad_tile part = *t;
    for (int done = 0; done < t->nc;) {
        const int left = t->nc - done, w = left >= 4 ? 4 : left >= 2 ? 2 : 1;
        part.xt = t->xt + done * t->xt_sc;
        part.acc = t->acc + done * t->acc_sc;
        switch (w) {
        case 4: tile_fixed(&part, 4); break;
        case 2: tile_fixed(&part, 2); break;
        default: tile_fixed(&part, 1); break;
        }
        done += w;
    }
}
