/* AVX2 micro-kernel of the sparse weight gradient's rows form (contract: spwgrad_internal.h,
 * spwgrad_rows_tile): per entry one broadcast of the kept value and nt x nv FMAs whose memory
 * operands are the entry's input row at each tap. Without AVX-512 the permute form runs one vpermps
 * per FMA and stays at dense speed at 2:4; here every FMA needs a load instead, and Zen 3 issues two
 * 256-bit loads and two FMAs per cycle. */
#include <immintrin.h>

#include "kernels/spwgrad_internal.h"

static inline __attribute__((always_inline)) void rows_fixed(const spwgrad_rows_tile *t, const int NT, const int NV) {
    __m256 acc[3][4];
    const float *x[3];
    for (int a = 0; a < NT; a++) {
        x[a] = t->x + t->toff[a];
        for (int v = 0; v < NV; v++)
            acc[a][v] = t->fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(t->acc + a * t->acc_st + 8 * v);
    }
    for (int e = 0; e < t->ne; e++) {
        const uint64_t en = t->ent[e];
        const __m256 val = _mm256_castsi256_ps(_mm256_set1_epi32((int)(uint32_t)en));
        const int64_t off = (int64_t)(en >> 32) * t->ps;
        for (int a = 0; a < NT; a++)
            for (int v = 0; v < NV; v++) acc[a][v] = _mm256_fmadd_ps(val, _mm256_loadu_ps(x[a] + off + 8 * v), acc[a][v]);
    }
    for (int a = 0; a < NT; a++)
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(t->acc + a * t->acc_st + 8 * v, acc[a][v]);
}

#define ROWS(NT, NV) \
    static void rows_##NT##_##NV(const spwgrad_rows_tile *t) { rows_fixed(t, NT, NV); }
ROWS(1, 1) ROWS(1, 2) ROWS(1, 3) ROWS(1, 4)
ROWS(2, 1) ROWS(2, 2) ROWS(2, 3) ROWS(2, 4)
ROWS(3, 1) ROWS(3, 2) ROWS(3, 3) ROWS(3, 4)
#undef ROWS

void spwgrad_rows_avx2(const spwgrad_rows_tile *t) {
    static const spwgrad_rows_fn by_shape[3][4] = {
        {rows_1_1, rows_1_2, rows_1_3, rows_1_4},
        {rows_2_1, rows_2_2, rows_2_3, rows_2_4},
        {rows_3_1, rows_3_2, rows_3_3, rows_3_4},
    };
    by_shape[t->nt - 1][t->nv - 1](t);
}
