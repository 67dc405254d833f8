/* AVX-512 micro-kernel of the cout-form sparse-weight forward (contract: spcout_internal.h). One zmm
 * holds a (row, column)'s two image vectors, as Xt holds an input column's (one cache line), so per
 * entry: J input zmm loaded once each, K broadcasts, K * J FMAs into accumulators that stay in
 * registers for the whole subset loop. Ytile is the pair layout (yc 16, yb 8): an accumulator is one
 * aligned load and one store per subset.
 *
 * Why the tile is wider than AVX2's (J up to spcout_kernel.tw = 8 or 6 columns, not 3): AVX2 covers
 * the FMA latency with 2 vectors x K x 3 columns of ymm chains (12 at 2:4); in zmm the two vectors
 * are one chain, so 3 columns left 6 chains at 2:4 and 3 at 1:4, under the 8 that two FMA pipes of
 * 4 cycles' latency need. More columns also feed each entry's broadcasts and its offset to more FMAs
 * (2:4 at J 6: 6 input loads + 2 broadcasts per 12 FMAs). The bits are the same at any J. */
#include <immintrin.h>
#include <string.h>

#include "kernels/spcout_internal.h"

/* GCC would fold each input load into every FMA that uses it (a load per FMA); the empty asm makes
 * it keep the loaded vector in a register ("v": any of the 32 zmm). */
#define LOAD_REG(dst, ptr)                                                                                             \
    do {                                                                                                               \
        dst = _mm512_load_ps(ptr);                                                                                     \
        __asm__("" : "+v"(dst));                                                                                       \
    } while (0)

/* One subset's loop: K rows (pointers rows[]) x J columns, over entries e .. end; column j reads the
 * input j * S columns (of SPCOUT_XCOL floats) on and accumulates at rows[r] + j * SPCOUT_XCOL. */
static inline __attribute__((always_inline)) void loop_kj(float *const *rows, const float *x0, const float *e,
                                                          const float *end, const int K, const int J, const int S) {
    __m512 acc[SPCOUT_MAX_N][SPCOUT_TW_MAX];
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 8
        for (int j = 0; j < J; j++) acc[r][j] = _mm512_load_ps(rows[r] + j * SPCOUT_XCOL);
    for (; e < end; e += 1 + K) {
        int32_t off;
        memcpy(&off, e, sizeof off);
        const float *x = x0 + off;
        if (K <= 2) { /* the K broadcasts first, then each input once: K * J + K + 1 registers */
            __m512 w[2];
#pragma GCC unroll 2
            for (int r = 0; r < K; r++) w[r] = _mm512_set1_ps(e[1 + r]);
#pragma GCC unroll 8
            for (int j = 0; j < J; j++) {
                __m512 in;
                LOAD_REG(in, x + j * S * SPCOUT_XCOL);
#pragma GCC unroll 2
                for (int r = 0; r < K; r++) acc[r][j] = _mm512_fmadd_ps(w[r], in, acc[r][j]);
            }
        } else { /* the J inputs first, then one broadcast per row: K * J + J + 1 */
            __m512 in[SPCOUT_TW_MAX];
#pragma GCC unroll 8
            for (int j = 0; j < J; j++) LOAD_REG(in[j], x + j * S * SPCOUT_XCOL);
#pragma GCC unroll 4
            for (int r = 0; r < K; r++) {
                const __m512 w = _mm512_set1_ps(e[1 + r]);
#pragma GCC unroll 8
                for (int j = 0; j < J; j++) acc[r][j] = _mm512_fmadd_ps(w, in[j], acc[r][j]);
            }
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < K; r++)
#pragma GCC unroll 8
        for (int j = 0; j < J; j++) _mm512_store_ps(rows[r] + j * SPCOUT_XCOL, acc[r][j]);
}

/* Two one-row subsets' loops interleaved (K 1): rows ra and rb, entries ea .. ea+nq and eb .. eb+nq
 * (1 + 1 floats each), 2 * J chains where one subset's loop has J. The rows differ, so each chain
 * keeps its order (the contract allows it). */
static inline __attribute__((always_inline)) void loop_pair(float *ra, float *rb, const float *x0, const float *ea,
                                                            const float *eb, int64_t nq, const int J, const int S) {
    __m512 acc[2][SPCOUT_TW_MAX];
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) acc[0][j] = _mm512_load_ps(ra + j * SPCOUT_XCOL), acc[1][j] = _mm512_load_ps(rb + j * SPCOUT_XCOL);
    for (int64_t q = 0; q < nq; q++, ea += 2, eb += 2) {
        int32_t oa, ob;
        memcpy(&oa, ea, sizeof oa);
        memcpy(&ob, eb, sizeof ob);
        const float *xa = x0 + oa, *xb = x0 + ob;
        const __m512 wa = _mm512_set1_ps(ea[1]), wb = _mm512_set1_ps(eb[1]);
#pragma GCC unroll 8
        for (int j = 0; j < J; j++) {
            acc[0][j] = _mm512_fmadd_ps(wa, _mm512_load_ps(xa + j * S * SPCOUT_XCOL), acc[0][j]);
            acc[1][j] = _mm512_fmadd_ps(wb, _mm512_load_ps(xb + j * S * SPCOUT_XCOL), acc[1][j]);
        }
    }
#pragma GCC unroll 8
    for (int j = 0; j < J; j++) _mm512_store_ps(ra + j * SPCOUT_XCOL, acc[0][j]), _mm512_store_ps(rb + j * SPCOUT_XCOL, acc[1][j]);
}

/* The tile: every subset's loop with the same (K, J, S), fixed at compile time. With K 1 the
 * subsets are one row each, all different: pairs of them run interleaved as far as both have
 * entries (1:4 at J 4: 8 chains, not 4), the rest of the longer one alone. */
static inline __attribute__((always_inline)) void tile_kj(const spcout_tile *t, const int K, const int J, const int S) {
    if (t->first)
        for (int i = 0; i < t->m; i++)
#pragma GCC unroll 8
            for (int j = 0; j < J; j++) _mm512_store_ps(t->y + i * t->ldr + j * SPCOUT_XCOL, _mm512_setzero_ps());
    const int es = 1 + K;
    if (K == 1) {
        for (int s = 0; s < t->nsub; s += 2) {
            float *ra = t->y + __builtin_ctz(t->sub_bits[s]) * t->ldr;
            const float *ea = t->e + (int64_t)t->run[s] * 2, *enda = t->e + (int64_t)t->run[s + 1] * 2;
            if (s + 1 == t->nsub) {
                if (ea < enda) loop_kj(&ra, t->x, ea, enda, 1, J, S);
                break;
            }
            float *rb = t->y + __builtin_ctz(t->sub_bits[s + 1]) * t->ldr;
            const float *eb = t->e + (int64_t)t->run[s + 1] * 2, *endb = t->e + (int64_t)t->run[s + 2] * 2;
            const int64_t na = (enda - ea) / 2, nb = (endb - eb) / 2, nq = na < nb ? na : nb;
            if (nq) loop_pair(ra, rb, t->x, ea, eb, nq, J, S);
            if (na > nq) loop_kj(&ra, t->x, ea + 2 * nq, enda, 1, J, S);
            if (nb > nq) loop_kj(&rb, t->x, eb + 2 * nq, endb, 1, J, S);
        }
        return;
    }
    for (int s = 0; s < t->nsub; s++) {
        if (t->run[s] == t->run[s + 1]) continue;
        float *rows[SPCOUT_MAX_N];
        for (int i = 0, r = 0; i < t->m; i++)
            if (t->sub_bits[s] >> i & 1) rows[r++] = t->y + i * t->ldr;
        loop_kj(rows, t->x, t->e + (int64_t)t->run[s] * es, t->e + (int64_t)t->run[s + 1] * es, K, J, S);
    }
}

/* J 1 .. 8 for K <= 2, 1 .. 6 for K > 2 (4 x 6 accumulators + 6 inputs + a broadcast: 31 zmm) */
#define CASE_J6(K, S)                                                                                                  \
    case 1: tile_kj(t, K, 1, S); return;                                                                               \
    case 2: tile_kj(t, K, 2, S); return;                                                                               \
    case 3: tile_kj(t, K, 3, S); return;                                                                               \
    case 4: tile_kj(t, K, 4, S); return;                                                                               \
    case 5: tile_kj(t, K, 5, S); return;                                                                               \
    default: tile_kj(t, K, 6, S); return;
#define CASE_J8(K, S)                                                                                                  \
    switch (t->J) {                                                                                                    \
    case 7: tile_kj(t, K, 7, S); return;                                                                               \
    case 8: tile_kj(t, K, 8, S); return;                                                                               \
        CASE_J6(K, S)                                                                                                  \
    }
#define CASE_K(S)                                                                                                      \
    switch (t->K) {                                                                                                    \
    case 1: CASE_J8(1, S)                                                                                              \
    case 2: CASE_J8(2, S)                                                                                              \
    case 3: switch (t->J) { CASE_J6(3, S) }                                                                            \
    default: switch (t->J) { CASE_J6(4, S) }                                                                           \
    }

void spcout_tile_avx512(const spcout_tile *t) {
    if (t->S == 1) CASE_K(1)
    CASE_K(2)
}
