/* AVX-512 micro-kernel of the sparse weight gradient (contract: spwgrad_internal.h).
 *
 * Accumulators: R vectors of 16 output channels x NC input channels. Per block of 16 rows, NC loads
 * bring the rows of each input channel; per slot and channel vector, the picks and values are
 * loaded once, and each input channel costs one vpermps (every lane picks its own row) and one FMA. */
#include <immintrin.h>

#include "kernels/spwgrad_internal.h"

static inline __attribute__((always_inline)) void tile_fixed(const spwgrad_tile *t, const int R, const int NC) {
    __m512 acc[2][8];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NC; c++) acc[r][c] = t->fresh ? _mm512_setzero_ps() : _mm512_load_ps(t->acc + c * t->acc_sc + 16 * r);
    const int n = t->n, per_block = 16 / t->m * n, ns = t->ng * n;
    for (int s0 = 0; s0 < ns; s0 += per_block) {
        __m512 x[8];
        for (int c = 0; c < NC; c++) x[c] = _mm512_load_ps(t->xt + c * t->xt_sc + s0 / n * t->m);
        const int s1 = s0 + per_block < ns ? s0 + per_block : ns;
        for (int s = s0; s < s1; s++)
            for (int r = 0; r < R; r++) {
                const __m512i ix = _mm512_load_si512(t->pick + r * t->vs + 16 * s);
                const __m512 v = _mm512_load_ps(t->val + r * t->vs + 16 * s);
                for (int c = 0; c < NC; c++) acc[r][c] = _mm512_fmadd_ps(v, _mm512_permutexvar_ps(ix, x[c]), acc[r][c]);
            }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < NC; c++) _mm512_store_ps(t->acc + c * t->acc_sc + 16 * r, acc[r][c]);
}

/* nc as 8 + 4 + 2 + 1 column groups: four widths compiled per R */
static void tile_r(const spwgrad_tile *t, const int R) {
    spwgrad_tile part = *t;
    for (int done = 0; done < t->nc;) {
        const int left = t->nc - done, w = left >= 8 ? 8 : left >= 4 ? 4 : left >= 2 ? 2 : 1;
        part.xt = t->xt + done * t->xt_sc;
        part.acc = t->acc + done * t->acc_sc;
        switch (w) {
        case 8: tile_fixed(&part, R, 8); break;
        case 4: tile_fixed(&part, R, 4); break;
        case 2: tile_fixed(&part, R, 2); break;
        default: tile_fixed(&part, R, 1); break;
        }
        done += w;
    }
}

void spwgrad_tile_avx512(const spwgrad_tile *t) {
    if (t->R == 2) tile_r(t, 2);
    else tile_r(t, 1);
}
