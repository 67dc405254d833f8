/* AVX2 micro-kernel of the cout-form sparse-weight forward (contract: spcout_internal.h). Per
 * entry: J * NB input vectors loaded once each, K broadcasts, K * J * NB FMAs into accumulators that
 * stay in registers for the whole loop (at most 12; with the inputs and broadcasts live at once, 15
 * or 16 ymm). At 2:4 (K 2, J 3, NB 2): 6 loads + 2 broadcasts + the entry's offset per 12 FMAs,
 * FMA-bound on Zen 3. NB 2 is for K <= 2 only (the plan's rule), so the K > 2 path is NB 1. */
#include <immintrin.h>
#include <string.h>

#include "kernels/spcout_internal.h"

/* GCC would fold each input load into both FMAs that use it (a load per FMA: load-bound); the empty
 * asm makes it keep the loaded vector in a register. */
#define LOAD_REG(dst, ptr)                                                                                             \
    do {                                                                                                               \
        dst = _mm256_load_ps(ptr);                                                                                     \
        __asm__("" : "+x"(dst));                                                                                       \
    } while (0)

/* One subset's loop: K rows (pointers rows[]) x J columns x NB image vectors (x and y offsets v * 8,
 * v * yb), over entries e .. end; column j reads the inputs j * S columns (of SPCOUT_XCOL floats) on. */
static inline __attribute__((always_inline)) void loop_kjn(const spcout_tile *t, float *const *rows, const float *x0,
                                                           const float *e, const float *end, const int K, const int J,
                                                           const int NB, const int S) {
    __m256 acc[SPCOUT_MAX_N][SPCOUT_TW][2];
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 3
        for (int j = 0; j < J; j++)
#pragma GCC unroll 2
            for (int v = 0; v < NB; v++) acc[r][j][v] = _mm256_load_ps(rows[r] + j * t->yc + v * t->yb);
    for (; e < end; e += 1 + K) {
        int32_t off;
        memcpy(&off, e, sizeof off);
        const float *x = x0 + off;
        if (K <= 2) { /* the K broadcasts first, then each input once: 12 + 2 + 1 registers */
            __m256 w[2];
#pragma GCC unroll 2
            for (int r = 0; r < K; r++) w[r] = _mm256_broadcast_ss(e + 1 + r);
#pragma GCC unroll 3
            for (int j = 0; j < J; j++)
#pragma GCC unroll 2
                for (int v = 0; v < NB; v++) {
                    __m256 in;
                    LOAD_REG(in, x + j * S * SPCOUT_XCOL + v * SPCOUT_VL);
#pragma GCC unroll 2
                    for (int r = 0; r < K; r++) acc[r][j][v] = _mm256_fmadd_ps(w[r], in, acc[r][j][v]);
                }
        } else { /* the J inputs first, then one broadcast per row: 12 + 3 + 1 */
            __m256 in[SPCOUT_TW];
#pragma GCC unroll 3
            for (int j = 0; j < J; j++) LOAD_REG(in[j], x + j * S * SPCOUT_XCOL);
#pragma GCC unroll 4
            for (int r = 0; r < K; r++) {
                const __m256 w = _mm256_broadcast_ss(e + 1 + r);
#pragma GCC unroll 3
                for (int j = 0; j < J; j++) acc[r][j][0] = _mm256_fmadd_ps(w, in[j], acc[r][j][0]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 3
        for (int j = 0; j < J; j++)
#pragma GCC unroll 2
            for (int v = 0; v < NB; v++) _mm256_store_ps(rows[r] + j * t->yc + v * t->yb, acc[r][j][v]);
}

/* The tile: every subset's loop with the same (K, J, NB, S), fixed at compile time. */
static inline __attribute__((always_inline)) void tile_kjn(const spcout_tile *t, const int K, const int J, const int NB,
                                                           const int S) {
    if (t->first)
        for (int i = 0; i < t->m; i++)
#pragma GCC unroll 3
            for (int j = 0; j < J; j++) {
                _mm256_store_ps(t->y + i * t->ldr + j * t->yc, _mm256_setzero_ps());
                _mm256_store_ps(t->y + i * t->ldr + j * t->yc + t->yb, _mm256_setzero_ps());
            }
    const int es = 1 + K;
    for (int s = 0; s < t->nsub; s++) {
        if (t->run[s] == t->run[s + 1]) continue;
        float *rows[SPCOUT_MAX_N];
        for (int i = 0, r = 0; i < t->m; i++)
            if (t->sub_bits[s] >> i & 1) rows[r++] = t->y + i * t->ldr;
        const float *e = t->e + (int64_t)t->run[s] * es, *end = t->e + (int64_t)t->run[s + 1] * es;
        if (NB == 2) {
            loop_kjn(t, rows, t->x, e, end, K, J, 2, S);
        } else { /* the two image vectors one after the other */
            loop_kjn(t, rows, t->x, e, end, K, J, 1, S);
            float *rows1[SPCOUT_MAX_N];
            for (int r = 0; r < K; r++) rows1[r] = rows[r] + t->yb;
            loop_kjn(t, rows1, t->x + SPCOUT_VL, e, end, K, J, 1, S);
        }
    }
}

#define CASE_J(K, NB, S)                                                                                               \
    switch (t->J) {                                                                                                    \
    case 1: tile_kjn(t, K, 1, NB, S); return;                                                                          \
    case 2: tile_kjn(t, K, 2, NB, S); return;                                                                          \
    default: tile_kjn(t, K, 3, NB, S); return;                                                                         \
    }

/* NB 2 for K <= 2 (K * J * NB <= 12) */
#define CASE_K(S)                                                                                                      \
    switch (t->K) {                                                                                                    \
    case 1: CASE_J(1, 2, S)                                                                                            \
    case 2: CASE_J(2, 2, S)                                                                                            \
    case 3: CASE_J(3, 1, S)                                                                                            \
    default: CASE_J(4, 1, S)                                                                                           \
    }

void spcout_tile_avx2(const spcout_tile *t) {
    if (t->S == 1) CASE_K(1)
    CASE_K(2)
}
