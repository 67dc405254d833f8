/* AVX2 + FMA micro-kernel of the sparse backward-data convolution.
 *
 * The AVX-512 kernel's design (spconv_avx512.c) with 8-float vectors: the row segment of one dD
 * pixel (ncols <= 64 floats, NV <= 8 ymm) in registers across all taps and entries, one 64-bit
 * entry load and a GPR broadcast per entry, NV FMAs on panel rows. Up to 32 columns, two
 * accumulator sets for even and odd entries (8 FMA chains at NV 4); 33-64 columns, one set (NV
 * chains: 8 at 64 columns), so each entry's load and broadcast feed 8 FMAs instead of 4 (16 ymm
 * registers: 8 accumulators + a broadcast). The last vector is loaded / stored with vmaskmov. */
#include <immintrin.h>

#include "kernels/spconv_internal.h"

#define NV_MAX 4  /* two accumulator sets */
#define NV_WIDE 8 /* one set: 64 columns */

static inline __attribute__((always_inline)) __m256 entry_value(spconv_entry e) {
    return _mm256_castsi256_ps(_mm256_set1_epi32((int)(uint32_t)e));
}

/* One pixel's row segment (NV vectors, the last masked by tail unless `full`) to d: added to it, or
 * over it. A whole last vector takes plain moves: AMD cores run vmaskmov stores as many uops (the
 * same lesson as the pruning kernels'), once per pixel and pass. */
static inline __attribute__((always_inline)) void store_row(float *d, __m256 *a, const int NV, __m256i tail, int full,
                                                            int overwrite) {
    if (!overwrite) {
        for (int q = 0; q < NV - 1; q++) a[q] = _mm256_add_ps(_mm256_loadu_ps(d + 8 * q), a[q]);
        const __m256 last = full ? _mm256_loadu_ps(d + 8 * (NV - 1)) : _mm256_maskload_ps(d + 8 * (NV - 1), tail);
        a[NV - 1] = _mm256_add_ps(last, a[NV - 1]);
    }
    for (int q = 0; q < NV - 1; q++) _mm256_storeu_ps(d + 8 * q, a[q]);
    if (full) _mm256_storeu_ps(d + 8 * (NV - 1), a[NV - 1]);
    else _mm256_maskstore_ps(d + 8 * (NV - 1), tail, a[NV - 1]);
}

static inline __attribute__((always_inline)) void tile_nv(const spconv_tile *t, const int NV) {
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(t->ncols - 8 * (NV - 1)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const int full = t->ncols == 8 * NV, ne = t->ne, ntaps = t->ntaps;
    for (int zy = 0; zy < t->nz * t->ny; zy++)
        for (int x = 0, z = zy / t->ny, y = zy % t->ny; x < t->nx; x++) {
            const spconv_entry *pix = t->ent + x * t->e_sx + y * t->e_sy + z * t->e_sz;
            __m256 a[NV_MAX], b[NV_MAX];
            for (int q = 0; q < NV; q++) a[q] = b[q] = _mm256_setzero_ps();
            for (int tap = 0; tap < ntaps; tap++) {
                const spconv_entry *E = pix + t->tap_ent[tap];
                const char *panel = (const char *)t->tap_panel[tap];
                int e = 0;
                for (; e + 2 <= ne; e += 2) {
                    const spconv_entry r0 = E[e], r1 = E[e + 1];
                    const float *w0 = (const float *)(panel + spconv_entry_offset(r0));
                    const float *w1 = (const float *)(panel + spconv_entry_offset(r1));
                    const __m256 v0 = entry_value(r0), v1 = entry_value(r1);
                    for (int q = 0; q < NV; q++) a[q] = _mm256_fmadd_ps(v0, _mm256_load_ps(w0 + 8 * q), a[q]);
                    for (int q = 0; q < NV; q++) b[q] = _mm256_fmadd_ps(v1, _mm256_load_ps(w1 + 8 * q), b[q]);
                }
                if (e < ne) {
                    const float *w0 = (const float *)(panel + spconv_entry_offset(E[e]));
                    const __m256 v0 = entry_value(E[e]);
                    for (int q = 0; q < NV; q++) a[q] = _mm256_fmadd_ps(v0, _mm256_load_ps(w0 + 8 * q), a[q]);
                }
            }
            for (int q = 0; q < NV; q++) a[q] = _mm256_add_ps(a[q], b[q]);
            store_row(t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz, a, NV, tail, full, t->overwrite);
        }
}

/* 33-64 columns: one accumulator set of NV (5-8) vectors, NV independent FMA chains; each entry's
 * load and broadcast then feed NV FMAs instead of 4. */
static inline __attribute__((always_inline)) void tile_wide(const spconv_tile *t, const int NV) {
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(t->ncols - 8 * (NV - 1)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const int full = t->ncols == 8 * NV, ne = t->ne, ntaps = t->ntaps;
    for (int zy = 0; zy < t->nz * t->ny; zy++)
        for (int x = 0, z = zy / t->ny, y = zy % t->ny; x < t->nx; x++) {
            const spconv_entry *pix = t->ent + x * t->e_sx + y * t->e_sy + z * t->e_sz;
            __m256 a[NV_WIDE];
            for (int q = 0; q < NV; q++) a[q] = _mm256_setzero_ps();
            for (int tap = 0; tap < ntaps; tap++) {
                const spconv_entry *E = pix + t->tap_ent[tap];
                const char *panel = (const char *)t->tap_panel[tap];
                for (int e = 0; e < ne; e++) {
                    const float *w = (const float *)(panel + spconv_entry_offset(E[e]));
                    const __m256 v = entry_value(E[e]);
                    for (int q = 0; q < NV; q++) a[q] = _mm256_fmadd_ps(v, _mm256_load_ps(w + 8 * q), a[q]);
                }
            }
            store_row(t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz, a, NV, tail, full, t->overwrite);
        }
}

void spconv_tile_avx2(const spconv_tile *t) {
    switch ((t->ncols + 7) / 8) {
    case 1: tile_nv(t, 1); break;
    case 2: tile_nv(t, 2); break;
    case 3: tile_nv(t, 3); break;
    case 4: tile_nv(t, 4); break;
    case 5: tile_wide(t, 5); break;
    case 6: tile_wide(t, 6); break;
    case 7: tile_wide(t, 7); break;
    default: tile_wide(t, 8); break;
    }
}

/* ---- shared masks (spconv_internal.h): the AVX-512 design (spconv_avx512.c) with ymm vectors;
 * NX*NV <= 8 accumulators + NV panel vectors + a broadcast fit the 16 registers. ---- */
typedef float float_alias __attribute__((may_alias));

static inline __attribute__((always_inline)) void shared_nx(const spconv_tile *t, const int NX, const int NV) {
    const __m256i tail = _mm256_cmpgt_epi32(_mm256_set1_epi32(t->ncols - 8 * (NV - 1)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    const int full = t->ncols == 8 * NV, ne = t->ne;
    for (int zy = 0; zy < t->nz * t->ny; zy++) {
        const int z = zy / t->ny, y = zy % t->ny;
        const spconv_entry *pix = t->ent + y * t->e_sy + z * t->e_sz;
        __m256 acc[SPCONV_SHARED_MAX_NX][4];
        for (int x = 0; x < NX; x++)
            for (int q = 0; q < NV; q++) acc[x][q] = _mm256_setzero_ps();
        for (int tap = 0; tap < t->ntaps; tap++) {
            const spconv_entry *E = pix + t->tap_ent[tap];
            const char *panel = (const char *)t->tap_panel[tap];
            for (int e = 0; e < ne; e++) {
                const float *w = (const float *)(panel + spconv_entry_offset(E[e]));
                __m256 wv[4];
                for (int q = 0; q < NV; q++) wv[q] = _mm256_load_ps(w + 8 * q);
                for (int x = 0; x < NX; x++) {
                    const __m256 v = _mm256_broadcast_ss((const float_alias *)(E + x * t->e_sx + e));
                    for (int q = 0; q < NV; q++) acc[x][q] = _mm256_fmadd_ps(v, wv[q], acc[x][q]);
                }
            }
        }
        for (int x = 0; x < NX; x++) store_row(t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz, acc[x], NV, tail, full, t->overwrite);
    }
}

#define SHARED_CASE(NX, NV) \
    case NX: shared_nx(t, NX, NV); return;

void spconv_tile_shared_avx2(const spconv_tile *t) {
    switch ((t->ncols + 7) / 8) {
    case 1:
        switch (t->nx) { SHARED_CASE(1, 1) SHARED_CASE(2, 1) SHARED_CASE(3, 1) SHARED_CASE(4, 1) SHARED_CASE(5, 1) SHARED_CASE(6, 1) SHARED_CASE(7, 1) SHARED_CASE(8, 1) }
        return;
    case 2:
        switch (t->nx) { SHARED_CASE(1, 2) SHARED_CASE(2, 2) SHARED_CASE(3, 2) SHARED_CASE(4, 2) }
        return;
    case 3:
        switch (t->nx) { SHARED_CASE(1, 3) SHARED_CASE(2, 3) }
        return;
    case 4:
        switch (t->nx) { SHARED_CASE(1, 4) SHARED_CASE(2, 4) }
        return;
    /* 33-64 columns: one pixel per call (spconv_shared_nx), whose loop is the per-pixel kernel's
     * one-set loop: the same summation order (one chain per vector) */
    case 5: tile_wide(t, 5); return;
    case 6: tile_wide(t, 6); return;
    case 7: tile_wide(t, 7); return;
    default: tile_wide(t, 8); return;
    }
}

void spconv_entries_avx2(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                       const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes) {
    spconv_entries_from_slots(out, vals, idx, base, nrows, ns, src_stride, row_bytes);
}
