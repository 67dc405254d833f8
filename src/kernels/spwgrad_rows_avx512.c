/* AVX-512 micro-kernel of the sparse weight gradient's rows form (contract: spwgrad_internal.h,
 * spwgrad_rows_tile): per entry one broadcast of the kept value and nr x nj x nv/2 zmm FMAs (a ymm
 * one more per tap for an odd nv) whose memory operands are the entry's input pixel at each tap.
 *
 * Why AVX-512 runs this form rather than the permute form: the permute form spends a vpermps per
 * FMA, and the permute port caps it at 0.66 of the FMA ceiling in L1 (spwgrad.md); here each FMA
 * needs a load instead, and Zen 5 issues two 512-bit loads and two 512-bit FMAs a cycle, so the loop
 * can run at the FMA ceiling while its input stays in L1. With 32 zmm registers every shape of the
 * contract fits (3 kernel rows x 3 taps x 2 zmm = 18 accumulators + the value), so a whole 3x3
 * kernel of a 32-channel block is one call: each entry's broadcast feeds 18 FMAs, where AVX2's 12
 * ymm accumulators take a kernel row at a time. The sums are the same chains: the same bits. */
#include <immintrin.h>
#include <string.h>

#include "kernels/spwgrad_internal.h"

/* NR kernel rows x NJ taps of each x NV vectors of 8 input channels: NV/2 zmm and NV%2 ymm
 * accumulators per tap. A tap's pixel is ps = 8*NV floats after the previous one, so the offsets
 * within a kernel row are constants and only NR row pointers are live. Accumulators are loaded and
 * stored unaligned (acc_st, the input channels rounded up to 8, may be an odd multiple of 8). */
static inline __attribute__((always_inline)) void rows_fixed(const spwgrad_rows_tile *t, const int NR, const int NJ,
                                                             const int NV) {
    const int NZ = NV / 2, NY = NV % 2;
    __m512 acc[3][3][2];
    __m256 accy[3][3];
    const float *x[3];
#pragma GCC unroll 3
    for (int r = 0; r < NR; r++) x[r] = t->x + t->roff[r];
    /* a mask on the loads rather than a select per accumulator: with the select, GCC merged the two
     * cases through the stack (18 zmm stored and reloaded per call) */
    const __mmask16 keep = t->fresh ? 0 : 0xffff;
#pragma GCC unroll 3
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int j = 0; j < NJ; j++) {
            const float *a = t->acc + r * t->acc_rs + j * t->acc_st;
#pragma GCC unroll 2
            for (int z = 0; z < NZ; z++) acc[r][j][z] = _mm512_maskz_loadu_ps(keep, a + 16 * z);
            if (NY) accy[r][j] = _mm256_maskz_loadu_ps((__mmask8)keep, a + 16 * NZ);
        }
    const char *ent = (const char *)t->ent;
    for (int e = 0; e < t->ne; e++, ent += sizeof(uint64_t)) {
        /* the value and the pixel straight from memory (little endian: the value's bits in the low
         * half): a broadcast load, not a move from a general register to a vector one */
        float v;
        uint32_t pixel;
        memcpy(&v, ent, sizeof v);
        memcpy(&pixel, ent + 4, sizeof pixel);
        const __m512 val = _mm512_set1_ps(v);
        const int64_t off = (int64_t)pixel * (8 * NV);
#pragma GCC unroll 3
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
            for (int j = 0; j < NJ; j++) {
                const float *in = x[r] + off + 8 * NV * j;
#pragma GCC unroll 2
                for (int z = 0; z < NZ; z++) acc[r][j][z] = _mm512_fmadd_ps(val, _mm512_loadu_ps(in + 16 * z), acc[r][j][z]);
                if (NY) accy[r][j] = _mm256_fmadd_ps(_mm512_castps512_ps256(val), _mm256_loadu_ps(in + 16 * NZ), accy[r][j]);
            }
    }
#pragma GCC unroll 3
    for (int r = 0; r < NR; r++)
#pragma GCC unroll 3
        for (int j = 0; j < NJ; j++) {
            float *a = t->acc + r * t->acc_rs + j * t->acc_st;
#pragma GCC unroll 2
            for (int z = 0; z < NZ; z++) _mm512_storeu_ps(a + 16 * z, acc[r][j][z]);
            if (NY) _mm256_storeu_ps(a + 16 * NZ, accy[r][j]);
        }
}

#define ROWS(NR, NJ, NV) \
    static void rows_##NR##_##NJ##_##NV(const spwgrad_rows_tile *t) { rows_fixed(t, NR, NJ, NV); }
#define ROWS_NV(NR, NJ) ROWS(NR, NJ, 1) ROWS(NR, NJ, 2) ROWS(NR, NJ, 3) ROWS(NR, NJ, 4)
ROWS_NV(1, 1) ROWS_NV(1, 2) ROWS_NV(1, 3)
ROWS_NV(2, 1) ROWS_NV(2, 2) ROWS_NV(2, 3)
ROWS_NV(3, 1) ROWS_NV(3, 2) ROWS_NV(3, 3)
#undef ROWS_NV
#undef ROWS

#define BY_NV(NR, NJ) {rows_##NR##_##NJ##_1, rows_##NR##_##NJ##_2, rows_##NR##_##NJ##_3, rows_##NR##_##NJ##_4}

void spwgrad_rows_avx512(const spwgrad_rows_tile *t) {
    /* [nr-1][nj-1][nv-1]: every shape of the contract (at most 18 accumulator registers) */
    static const spwgrad_rows_fn by_shape[3][3][4] = {
        {BY_NV(1, 1), BY_NV(1, 2), BY_NV(1, 3)},
        {BY_NV(2, 1), BY_NV(2, 2), BY_NV(2, 3)},
        {BY_NV(3, 1), BY_NV(3, 2), BY_NV(3, 3)},
    };
    by_shape[t->nr - 1][t->nj - 1][t->nv - 1](t);
}
