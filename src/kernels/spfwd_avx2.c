/* AVX2 micro-kernel of the sparse-weight forward (contract: spfwd_internal.h): BLIS's 6 x 16
 * shape. NX <= 6 pixels x 16 output channels (2 ymm each) in 12 accumulators, the 2 weight
 * vectors and a broadcast: 15 of the 16 registers. A block of 32 runs as two such halves over the
 * same pixels (the second reads its input values again, from L1). The AVX-512 kernel's 3 pixels x
 * 32 channels needed 17 registers here, and GCC kept the accumulators on the stack: a store and
 * a load per FMA, 0.3-0.45x of oneDNN's direct kernel. */
#include <immintrin.h>

#include "kernels/spfwd_internal.h"

/* Columns c0 .. c0+15 of the block (ncols: how many of them exist, 1 .. 16). */
static inline __attribute__((always_inline)) void tile_fixed(const spfwd_tile *t, int c0, int ncols, const int NX) {
    __m256 acc[6][2];
    __m256i colmask[2]; /* lanes below ncols */
    for (int v = 0; v < 2; v++)
        colmask[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(ncols - 8 * v), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    for (int x = 0; x < NX; x++) acc[x][0] = acc[x][1] = _mm256_setzero_ps();
    const int64_t sx = t->x_sx;
    const float *wb = t->w + c0;
#define SPFWD_STEP(k, tap)                                                                                             \
    do {                                                                                                               \
        const float *s = t->x + t->tap_off[tap] + t->idx[k], *w = wb + (k) * t->w_sk + t->tap_w[tap];                  \
        const __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);                                               \
        for (int x = 0; x < NX; x++) {                                                                                 \
            const __m256 b = _mm256_broadcast_ss(s + x * sx);                                                          \
            acc[x][0] = _mm256_fmadd_ps(b, w0, acc[x][0]);                                                             \
            acc[x][1] = _mm256_fmadd_ps(b, w1, acc[x][1]);                                                             \
        }                                                                                                              \
    } while (0)
    /* One tap (the Winograd domain's GEMMs): the same steps, in the same order, without the tap loop.
     * Through the loops below GCC made the one-trip tap loop the innermost one, so every k re-entered
     * it, reloading loop bounds from the stack and the tap's offsets, and multiplied k * w_sk: the
     * dense Winograd forward ran 1.3-1.6x slower (bench/kernel_ab.c dense-fwd; spfwd.md). */
    if (t->ntaps == 1) {
        const float *x0 = t->x + t->tap_off[0], *w0p = wb + t->tap_w[0];
        const int32_t *idx = t->idx;
        const int64_t wsk = t->w_sk;
        for (int k = 0; k < t->K; k++) {
            const float *s = x0 + idx[k], *w = w0p + k * wsk;
            const __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
            for (int x = 0; x < NX; x++) {
                const __m256 b = _mm256_broadcast_ss(s + x * sx);
                acc[x][0] = _mm256_fmadd_ps(b, w0, acc[x][0]);
                acc[x][1] = _mm256_fmadd_ps(b, w1, acc[x][1]);
            }
        }
    } else if (t->taps_outer)
        for (int tap = 0; tap < t->ntaps; tap++)
            for (int k = 0; k < t->K; k++) SPFWD_STEP(k, tap);
    else
        for (int k = 0; k < t->K; k++)
            for (int tap = 0; tap < t->ntaps; tap++) SPFWD_STEP(k, tap);
#undef SPFWD_STEP
    for (int x = 0; x < NX; x++) {
        float *y = t->y + x * t->y_sx + c0;
        for (int v = 0; v < 2; v++) {
            if (ncols >= 8 * v + 8) _mm256_storeu_ps(y + 8 * v, acc[x][v]);
            else if (ncols > 8 * v) _mm256_maskstore_ps(y + 8 * v, colmask[v], acc[x][v]);
        }
    }
}

void spfwd_tile_avx2(const spfwd_tile *t, int bw) {
    for (int c0 = 0; c0 < bw && c0 < t->ncols; c0 += 16) {
        const int ncols = t->ncols - c0 < 16 ? t->ncols - c0 : 16;
        switch (t->nx) {
        case 1: tile_fixed(t, c0, ncols, 1); break;
        case 2: tile_fixed(t, c0, ncols, 2); break;
        case 3: tile_fixed(t, c0, ncols, 3); break;
        case 4: tile_fixed(t, c0, ncols, 4); break;
        case 5: tile_fixed(t, c0, ncols, 5); break;
        default: tile_fixed(t, c0, ncols, 6); break;
        }
    }
}

/* The data gradient's GEMM (contract: spdata_tile, spfwd_internal.h). AVX2 has no two-table
 * permute, so a column vector takes its compact sums by two vpermps (slots 0-7, 8-15), a blend on
 * bit 3 of the slot, and a blend for the masked add. Unlike the AVX-512 kernel, the columns are not
 * held in registers across the blocks: with them (NX x NA ymm) live, the product over a block
 * fitted only 2 rows and GCC fed its FMAs from memory, 6 loads per 4 FMAs. Here the block's product
 * has the registers to itself, NX x NC compact sums for up to 6 rows (12 at NC = 1), and each block
 * adds into the rows of m, which stay in L1. The additions are the same, in the same order. */
static inline __attribute__((always_inline)) void data_fixed(const spdata_tile *t, int64_t x0, const int NX, const int NA,
                                                             const int NC) {
    const int w = 8 * NA, cw = 8 * NC;
    const int full = t->ncols / 8, nvec = (t->ncols + 7) / 8; /* whole column vectors; then at most one masked */
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(t->ncols - 8 * full), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    float *m0 = t->m + x0 * t->m_sx;
    if (!t->acc)
        for (int x = 0; x < NX; x++)
            for (int a = 0; a < nvec; a++) {
                if (a < full) _mm256_storeu_ps(m0 + x * t->m_sx + 8 * a, _mm256_setzero_ps());
                else _mm256_maskstore_ps(m0 + x * t->m_sx + 8 * a, tail, _mm256_setzero_ps());
            }
    const int64_t sx = t->v_sx;
    for (int b = 0; b < t->nb; b++) {
        const int kn = b == t->nb - 1 ? t->last_k : t->bw;
        const float *v = t->v + x0 * sx + b * t->bw, *u = t->u + (int64_t)b * t->bw * cw;
        __m256 comp[12][2];
        for (int x = 0; x < NX; x++) comp[x][0] = comp[x][1] = _mm256_setzero_ps();
        for (int k = 0; k < kn; k++) {
            const __m256 u0 = _mm256_load_ps(u + k * cw), u1 = NC > 1 ? _mm256_load_ps(u + k * cw + 8) : u0;
            for (int x = 0; x < NX; x++) {
                const __m256 bc = _mm256_broadcast_ss(v + x * sx + k);
                comp[x][0] = _mm256_fmadd_ps(bc, u0, comp[x][0]);
                if (NC > 1) comp[x][1] = _mm256_fmadd_ps(bc, u1, comp[x][1]);
            }
        }
        const int32_t *perm = t->perm + b * w;
        for (int a = 0; a < nvec; a++) {
            const __m256i idx = _mm256_loadu_si256((const __m256i *)(perm + 8 * a));
            const __m256 keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)));
            if (_mm256_testz_ps(keep, keep)) continue;
            const __m256 hi = _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)); /* bit 3 -> the sign: slot >= 8 */
            for (int x = 0; x < NX; x++) {
                float *mx = m0 + x * t->m_sx + 8 * a;
                __m256 pv = _mm256_permutevar8x32_ps(comp[x][0], idx);
                if (NC > 1) pv = _mm256_blendv_ps(pv, _mm256_permutevar8x32_ps(comp[x][1], idx), hi);
                const __m256 old = a < full ? _mm256_loadu_ps(mx) : _mm256_maskload_ps(mx, tail);
                const __m256 sum = _mm256_blendv_ps(old, _mm256_add_ps(old, pv), keep);
                if (a < full) _mm256_storeu_ps(mx, sum);
                else _mm256_maskstore_ps(mx, tail, sum);
            }
        }
    }
}

/* rows per call: NX x NC compact sums + NC weight vectors + a broadcast in the 16 registers */
#define DATA_ROWS(NC) ((NC) > 1 ? 6 : 12)
#define DATA_CASES(NA, NC)                                                                                             \
    for (int64_t x0 = 0; x0 < t->nx; x0 += DATA_ROWS(NC)) {                                                            \
        const int64_t left = t->nx - x0;                                                                               \
        switch (left < DATA_ROWS(NC) ? left : DATA_ROWS(NC)) {                                                         \
        case 1: data_fixed(t, x0, 1, NA, NC); break;                                                                   \
        case 2: data_fixed(t, x0, 2, NA, NC); break;                                                                   \
        case 3: data_fixed(t, x0, 3, NA, NC); break;                                                                   \
        case 4: data_fixed(t, x0, 4, NA, NC); break;                                                                   \
        case 5: data_fixed(t, x0, 5, NA, NC); break;                                                                   \
        case 6: data_fixed(t, x0, 6, NA, NC); break;                                                                   \
        case 7: data_fixed(t, x0, 7, NA, NC); break;                                                                   \
        case 8: data_fixed(t, x0, 8, NA, NC); break;                                                                   \
        case 9: data_fixed(t, x0, 9, NA, NC); break;                                                                   \
        case 10: data_fixed(t, x0, 10, NA, NC); break;                                                                 \
        case 11: data_fixed(t, x0, 11, NA, NC); break;                                                                 \
        default: data_fixed(t, x0, 12, NA, NC); break;                                                                 \
        }                                                                                                              \
    }

void spdata_tile_avx2(const spdata_tile *t, int w, int cw) {
    if (w == 32 && cw == 16) DATA_CASES(4, 2)
    else if (w == 32) DATA_CASES(4, 1)
    else if (cw == 16) DATA_CASES(2, 2)
    else DATA_CASES(2, 1)
}

#define SPFWD_WINO_IN spfwd_wino_in_avx2
#define SPFWD_WINO_OUT spfwd_wino_out_avx2
#include "kernels/spfwd_wino_loops.h"
