/* AVX2 micro-kernel of the sparse weight gradient's rows form (contract: spwgrad_internal.h,
 * spwgrad_rows_tile): per entry one broadcast of the kept value and nr x nj x nv FMAs whose memory
 * operands are the entry's input pixel at each tap. Without AVX-512 the permute form runs one vpermps
 * per FMA and stays at dense speed at 2:4; here every FMA needs a load instead, and Zen 3 issues two
 * 256-bit loads and two FMAs per cycle. */
#include <immintrin.h>

#include "kernels/spwgrad_internal.h"

/* NR kernel rows x NJ taps of each x NV vectors: at most 12 accumulators, the rest of the 16 ymm
 * registers for the broadcast value. A tap's pixel is ps = 8*NV floats after the previous one, so the
 * offsets within a kernel row are constants and only NR row pointers are live. */
static inline __attribute__((always_inline)) void rows_fixed(const spwgrad_rows_tile *t, const int NR, const int NJ,
                                                             const int NV) {
    __m256 acc[3][3][4];
    const float *x[3];
    for (int r = 0; r < NR; r++) {
        x[r] = t->x + t->roff[r];
        for (int j = 0; j < NJ; j++)
            for (int v = 0; v < NV; v++)
                acc[r][j][v] = t->fresh ? _mm256_setzero_ps() : _mm256_loadu_ps(t->acc + r * t->acc_rs + j * t->acc_st + 8 * v);
    }
    for (int e = 0; e < t->ne; e++) {
        const uint64_t en = t->ent[e];
        const __m256 val = _mm256_castsi256_ps(_mm256_set1_epi32((int)(uint32_t)en));
        const int64_t off = (int64_t)(en >> 32) * (8 * NV);
        for (int r = 0; r < NR; r++)
            for (int j = 0; j < NJ; j++)
                for (int v = 0; v < NV; v++)
                    acc[r][j][v] = _mm256_fmadd_ps(val, _mm256_loadu_ps(x[r] + off + 8 * (NV * j + v)), acc[r][j][v]);
    }
    for (int r = 0; r < NR; r++)
        for (int j = 0; j < NJ; j++)
            for (int v = 0; v < NV; v++) _mm256_storeu_ps(t->acc + r * t->acc_rs + j * t->acc_st + 8 * v, acc[r][j][v]);
}

#define ROWS(NR, NJ, NV) \
    static void rows_##NR##_##NJ##_##NV(const spwgrad_rows_tile *t) { rows_fixed(t, NR, NJ, NV); }
#define ROWS_NV(NR, NJ) ROWS(NR, NJ, 1) ROWS(NR, NJ, 2) ROWS(NR, NJ, 3) ROWS(NR, NJ, 4)
ROWS_NV(1, 1) ROWS_NV(1, 2) ROWS_NV(1, 3)
ROWS(2, 1, 1) ROWS(2, 1, 2) ROWS(2, 1, 3) ROWS(2, 1, 4)
ROWS(2, 2, 1) ROWS(2, 2, 2) ROWS(2, 2, 3)
ROWS(2, 3, 1) ROWS(2, 3, 2)
ROWS(3, 1, 1) ROWS(3, 1, 2) ROWS(3, 1, 3) ROWS(3, 1, 4)
ROWS(3, 2, 1) ROWS(3, 2, 2)
ROWS(3, 3, 1)
#undef ROWS_NV
#undef ROWS

void spwgrad_rows_avx2(const spwgrad_rows_tile *t) {
    /* [nr-1][nj-1][nv-1]; NULL where nr * nj * nv > 12 (the contract excludes those) */
    static const spwgrad_rows_fn by_shape[3][3][4] = {
        {{rows_1_1_1, rows_1_1_2, rows_1_1_3, rows_1_1_4},
         {rows_1_2_1, rows_1_2_2, rows_1_2_3, rows_1_2_4},
         {rows_1_3_1, rows_1_3_2, rows_1_3_3, rows_1_3_4}},
        {{rows_2_1_1, rows_2_1_2, rows_2_1_3, rows_2_1_4},
         {rows_2_2_1, rows_2_2_2, rows_2_2_3, NULL},
         {rows_2_3_1, rows_2_3_2, NULL, NULL}},
        {{rows_3_1_1, rows_3_1_2, rows_3_1_3, rows_3_1_4},
         {rows_3_2_1, rows_3_2_2, NULL, NULL},
         {rows_3_3_1, NULL, NULL, NULL}},
    };
    by_shape[t->nr - 1][t->nj - 1][t->nv - 1](t);
}
