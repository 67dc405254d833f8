/* AVX-512 micro-kernel of the sparse-weight forward (contract: spfwd_internal.h).
 *
 * Output-stationary outer product over the kept input channels: nx pixels x one block of bw
 * output channels (bw/16 zmm per pixel) stay in registers; each kept channel k costs one load of
 * its weight row (bw floats, shared by the block: the block mask is what makes this a dense
 * product over fewer rows) and per pixel one broadcast of the input value feeding bw/16 FMAs. At
 * bw = 32 a broadcast feeds two FMAs and the loop is FMA-bound; at bw = 16, one (load-bound,
 * bench/nm_weight_gemm_micro.c). */
#include <immintrin.h>

#include "kernels/spfwd_internal.h"

static inline __attribute__((always_inline)) void tile_fixed(const spfwd_tile *t, const int NX, const int NV) {
    __m512 acc[SPFWD_MAX_NX][2];
    for (int x = 0; x < NX; x++)
        for (int v = 0; v < NV; v++) acc[x][v] = _mm512_setzero_ps();
    const int64_t sx = t->x_sx;
    /* one (kept channel, tap) step: the weight row, and per pixel a broadcast into NV FMAs */
#define SPFWD_STEP(k, tap)                                                                                             \
    do {                                                                                                               \
        const float *s = t->x + t->tap_off[tap] + t->idx[k], *w = t->w + (k) * t->w_sk + t->tap_w[tap];               \
        const __m512 w0 = _mm512_load_ps(w), w1 = NV > 1 ? _mm512_load_ps(w + 16) : w0;                               \
        for (int x = 0; x < NX; x++) {                                                                                 \
            const __m512 b = _mm512_set1_ps(s[x * sx]);                                                                \
            acc[x][0] = _mm512_fmadd_ps(b, w0, acc[x][0]);                                                             \
            if (NV > 1) acc[x][1] = _mm512_fmadd_ps(b, w1, acc[x][1]);                                                 \
        }                                                                                                              \
    } while (0)
    if (t->ntaps == 1) { /* the Winograd domain's GEMMs: as the AVX2 kernel, no tap loop (spfwd_avx2.c says why) */
        const float *x0 = t->x + t->tap_off[0], *w0p = t->w + t->tap_w[0];
        const int32_t *idx = t->idx;
        const int64_t wsk = t->w_sk;
        for (int k = 0; k < t->K; k++) {
            const float *s = x0 + idx[k], *w = w0p + k * wsk;
            const __m512 w0 = _mm512_load_ps(w), w1 = NV > 1 ? _mm512_load_ps(w + 16) : w0;
            for (int x = 0; x < NX; x++) {
                const __m512 b = _mm512_set1_ps(s[x * sx]);
                acc[x][0] = _mm512_fmadd_ps(b, w0, acc[x][0]);
                if (NV > 1) acc[x][1] = _mm512_fmadd_ps(b, w1, acc[x][1]);
            }
        }
    } else if (t->taps_outer)
        for (int tap = 0; tap < t->ntaps; tap++)
            for (int k = 0; k < t->K; k++) SPFWD_STEP(k, tap);
    else
        for (int k = 0; k < t->K; k++)
            for (int tap = 0; tap < t->ntaps; tap++) SPFWD_STEP(k, tap);
#undef SPFWD_STEP
    const int full = t->ncols / 16, rest = t->ncols % 16;
    const __mmask16 tail = (__mmask16)((1u << rest) - 1);
    for (int x = 0; x < NX; x++) {
        float *y = t->y + x * t->y_sx;
        for (int v = 0; v < NV; v++)
            if (v < full) _mm512_storeu_ps(y + 16 * v, acc[x][v]);
            else if (v == full && rest) _mm512_mask_storeu_ps(y + 16 * v, tail, acc[x][v]);
    }
}

#define CASES(NV)                                                                                                      \
    switch (t->nx) {                                                                                                   \
    case 1: tile_fixed(t, 1, NV); break;                                                                               \
    case 2: tile_fixed(t, 2, NV); break;                                                                               \
    case 3: tile_fixed(t, 3, NV); break;                                                                               \
    case 4: tile_fixed(t, 4, NV); break;                                                                               \
    case 5: tile_fixed(t, 5, NV); break;                                                                               \
    case 6: tile_fixed(t, 6, NV); break;                                                                               \
    case 7: tile_fixed(t, 7, NV); break;                                                                               \
    case 8: tile_fixed(t, 8, NV); break;                                                                               \
    case 9: tile_fixed(t, 9, NV); break;                                                                               \
    case 10: tile_fixed(t, 10, NV); break;                                                                             \
    case 11: tile_fixed(t, 11, NV); break;                                                                             \
    default: tile_fixed(t, 12, NV); break;                                                                             \
    }

void spfwd_tile_avx512(const spfwd_tile *t, int bw) {
    if (bw == 32) {
        CASES(2)
    } else {
        CASES(1)
    }
}

/* The data gradient's GEMM (contract: spdata_tile, spfwd_internal.h): NX rows x NA zmm of columns
 * in registers over all blocks of the call; per block, the compact sums (NC zmm per row: one
 * broadcast of v feeds NC FMAs) go to their columns by one vpermt2ps and a masked add per column
 * vector: NA x NX of each per bw x NC x NX FMAs. */
static inline __attribute__((always_inline)) void data_fixed(const spdata_tile *t, int64_t x0, const int NX, const int NA,
                                                             const int NC) {
    const int w = 16 * NA, cw = 16 * NC, full = t->ncols / 16, rest = t->ncols % 16;
    __mmask16 colmask[4];
    for (int a = 0; a < NA; a++) colmask[a] = a < full ? (__mmask16)0xFFFF : a == full ? (__mmask16)((1u << rest) - 1) : 0;
    __m512 acc[6][4];
    for (int x = 0; x < NX; x++)
        for (int a = 0; a < NA; a++)
            acc[x][a] = t->acc ? _mm512_maskz_loadu_ps(colmask[a], t->m + (x0 + x) * t->m_sx + 16 * a) : _mm512_setzero_ps();
    const int64_t sx = t->v_sx;
    for (int b = 0; b < t->nb; b++) {
        const int kn = b == t->nb - 1 ? t->last_k : t->bw;
        const float *v = t->v + x0 * sx + b * t->bw, *u = t->u + (int64_t)b * t->bw * cw;
        __m512 comp[6][2];
        for (int x = 0; x < NX; x++) comp[x][0] = comp[x][1] = _mm512_setzero_ps();
        for (int k = 0; k < kn; k++) {
            const __m512 u0 = _mm512_load_ps(u + k * cw), u1 = NC > 1 ? _mm512_load_ps(u + k * cw + 16) : u0;
            for (int x = 0; x < NX; x++) {
                const __m512 bc = _mm512_set1_ps(v[x * sx + k]);
                comp[x][0] = _mm512_fmadd_ps(bc, u0, comp[x][0]);
                if (NC > 1) comp[x][1] = _mm512_fmadd_ps(bc, u1, comp[x][1]);
            }
        }
        const int32_t *perm = t->perm + b * w;
        for (int a = 0; a < NA; a++) {
            const __m512i idx = _mm512_loadu_si512(perm + 16 * a);
            const __mmask16 keep = _mm512_cmpge_epi32_mask(idx, _mm512_setzero_si512());
            if (!keep) continue;
            for (int x = 0; x < NX; x++) {
                const __m512 pv = NC > 1 ? _mm512_permutex2var_ps(comp[x][0], idx, comp[x][1]) : _mm512_permutexvar_ps(idx, comp[x][0]);
                acc[x][a] = _mm512_mask_add_ps(acc[x][a], keep, acc[x][a], pv);
            }
        }
    }
    for (int x = 0; x < NX; x++)
        for (int a = 0; a < NA; a++)
            if (colmask[a]) _mm512_mask_storeu_ps(t->m + (x0 + x) * t->m_sx + 16 * a, colmask[a], acc[x][a]);
}

/* rows per register tile: (NA + NC) x NX accumulators in about 26 of the 32 registers */
#define DATA_ROWS(NA, NC) ((NA) + (NC) >= 6 ? 4 : (NA) + (NC) == 5 ? 5 : 6)
#define DATA_CASES(NA, NC)                                                                                             \
    for (int64_t x0 = 0; x0 < t->nx; x0 += DATA_ROWS(NA, NC)) {                                                        \
        const int64_t left = t->nx - x0;                                                                               \
        switch (left < DATA_ROWS(NA, NC) ? left : DATA_ROWS(NA, NC)) {                                                 \
        case 1: data_fixed(t, x0, 1, NA, NC); break;                                                                   \
        case 2: data_fixed(t, x0, 2, NA, NC); break;                                                                   \
        case 3: data_fixed(t, x0, 3, NA, NC); break;                                                                   \
        case 4: data_fixed(t, x0, 4, NA, NC); break;                                                                   \
        case 5: data_fixed(t, x0, 5, NA, NC); break;                                                                   \
        default: data_fixed(t, x0, 6, NA, NC); break;                                                                  \
        }                                                                                                              \
    }

void spdata_tile_avx512(const spdata_tile *t, int w, int cw) {
    if (w == 64 && cw == 32) DATA_CASES(4, 2)
    else if (w == 64) DATA_CASES(4, 1)
    else if (cw == 32) DATA_CASES(2, 2)
    else DATA_CASES(2, 1)
}

#define SPFWD_WINO_IN spfwd_wino_in_avx512
#define SPFWD_WINO_OUT spfwd_wino_out_avx512
#include "kernels/spfwd_wino_loops.h"
