/* AVX-512 micro-kernel of the sparse backward-data convolution.
 *
 * Row-wise (Gustavson) product, output-stationary: the row segment of one dD pixel (ncols <= 128
 * floats, NV <= 8 zmm) is accumulated in registers over every tap of the call and every entry
 * (value v, panel row W[k]) of that tap's source pixel: one 64-bit entry load, a GPR -> zmm
 * broadcast of v, and NV FMAs whose second operand is the panel row read straight from cache.
 * Panel rows are the only vector loads in the loop: on this class of core the vector load ports,
 * not the FMA units, bound the kernel (README.md), so v comes through a general register rather
 * than a vbroadcastss from memory. Two accumulator sets (even / odd entries) keep 2*NV
 * independent FMA chains in flight. dD joins once at the end (load, add, store per vector; only a
 * store for the first call that reaches a pixel), so its latency stays off the FMA chains. The last vector is masked: any ncols works; panel rows
 * are zero padded and read in whole vectors. */
#include <immintrin.h>

#include "kernels/spconv_internal.h"

#define NV_MAX 8

static inline __attribute__((always_inline)) __m512 entry_value(spconv_entry e) {
    return _mm512_castsi512_ps(_mm512_set1_epi32((int)(uint32_t)e));
}

static inline __attribute__((always_inline)) void tile_nv(const spconv_tile *t, const int NV) {
    const __mmask16 tail = (__mmask16)(0xFFFFu >> (16 * NV - t->ncols));
    const int ne = t->ne, ntaps = t->ntaps;
    for (int zy = 0; zy < t->nz * t->ny; zy++)
        for (int x = 0, z = zy / t->ny, y = zy % t->ny; x < t->nx; x++) {
            const spconv_entry *pix = t->ent + x * t->e_sx + y * t->e_sy + z * t->e_sz;
            float *d = t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz;
            /* The next pixel's entries and dD row: they come from L2, and the hardware prefetcher
             * does not follow this pattern (short runs at a large stride). */
            for (int tap = 0; tap < ntaps; tap++)
                for (int l = 0; l < ne * (int)sizeof(spconv_entry); l += 64)
                    _mm_prefetch((const char *)(pix + t->e_sx + t->tap_ent[tap]) + l, _MM_HINT_T0);
            for (int q = 0; q < NV; q++) _mm_prefetch((const char *)(d + t->dd_sx + 16 * q), _MM_HINT_T0);
            __m512 a[NV_MAX], b[NV_MAX];
            for (int q = 0; q < NV; q++) a[q] = b[q] = _mm512_setzero_ps();
            for (int tap = 0; tap < ntaps; tap++) {
                const spconv_entry *E = pix + t->tap_ent[tap];
                const char *panel = (const char *)t->tap_panel[tap];
                int e = 0;
                for (; e + 2 <= ne; e += 2) {
                    const spconv_entry r0 = E[e], r1 = E[e + 1];
                    const float *w0 = (const float *)(panel + spconv_entry_offset(r0));
                    const float *w1 = (const float *)(panel + spconv_entry_offset(r1));
                    const __m512 v0 = entry_value(r0), v1 = entry_value(r1);
                    for (int q = 0; q < NV; q++) a[q] = _mm512_fmadd_ps(v0, _mm512_load_ps(w0 + 16 * q), a[q]);
                    for (int q = 0; q < NV; q++) b[q] = _mm512_fmadd_ps(v1, _mm512_load_ps(w1 + 16 * q), b[q]);
                }
                if (e < ne) {
                    const float *w0 = (const float *)(panel + spconv_entry_offset(E[e]));
                    const __m512 v0 = entry_value(E[e]);
                    for (int q = 0; q < NV; q++) a[q] = _mm512_fmadd_ps(v0, _mm512_load_ps(w0 + 16 * q), a[q]);
                }
            }
            for (int q = 0; q < NV; q++) a[q] = _mm512_add_ps(a[q], b[q]);
            if (!t->overwrite) {
                for (int q = 0; q < NV - 1; q++) a[q] = _mm512_add_ps(_mm512_loadu_ps(d + 16 * q), a[q]);
                a[NV - 1] = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, d + 16 * (NV - 1)), a[NV - 1]);
            }
            for (int q = 0; q < NV - 1; q++) _mm512_storeu_ps(d + 16 * q, a[q]);
            _mm512_mask_storeu_ps(d + 16 * (NV - 1), tail, a[NV - 1]);
        }
}

void spconv_tile_avx512(const spconv_tile *t) {
    switch ((t->ncols + 15) / 16) {
    case 1: tile_nv(t, 1); break;
    case 2: tile_nv(t, 2); break;
    case 3: tile_nv(t, 3); break;
    case 4: tile_nv(t, 4); break;
    case 5: tile_nv(t, 5); break;
    case 6: tile_nv(t, 6); break;
    case 7: tile_nv(t, 7); break;
    default: tile_nv(t, 8); break;
    }
}

/* ---- shared masks (spconv_internal.h): nx pixels share the offsets of pixel x = 0 ----
 * Per entry: NV panel vectors loaded once into registers, then per pixel one broadcast of its
 * value from memory and NV register-only FMAs: NX*NV FMAs for NV + NX loads, where the per-row
 * kernel needs a load per FMA. NX*NV <= 24 accumulators (one chain each; >= 8 chains cover the FMA
 * latency when NX*NV >= 8). */
typedef float float_alias __attribute__((may_alias));

static inline __attribute__((always_inline)) void shared_nx(const spconv_tile *t, const int NX, const int NV) {
    const __mmask16 tail = (__mmask16)(0xFFFFu >> (16 * NV - t->ncols));
    const int ne = t->ne;
    for (int zy = 0; zy < t->nz * t->ny; zy++) {
        const int z = zy / t->ny, y = zy % t->ny;
        const spconv_entry *pix = t->ent + y * t->e_sy + z * t->e_sz;
        __m512 acc[SPCONV_SHARED_MAX_NX][4];
        for (int x = 0; x < NX; x++)
            for (int q = 0; q < NV; q++) acc[x][q] = _mm512_setzero_ps();
        for (int tap = 0; tap < t->ntaps; tap++) {
            const spconv_entry *E = pix + t->tap_ent[tap];
            const char *panel = (const char *)t->tap_panel[tap];
            for (int e = 0; e < ne; e++) {
                const float *w = (const float *)(panel + spconv_entry_offset(E[e]));
                __m512 wv[4];
                for (int q = 0; q < NV; q++) wv[q] = _mm512_load_ps(w + 16 * q);
                for (int x = 0; x < NX; x++) {
                    const __m512 v = _mm512_set1_ps(*(const float_alias *)(E + x * t->e_sx + e));
                    for (int q = 0; q < NV; q++) acc[x][q] = _mm512_fmadd_ps(v, wv[q], acc[x][q]);
                }
            }
        }
        for (int x = 0; x < NX; x++) {
            float *d = t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz;
            if (!t->overwrite) {
                for (int q = 0; q < NV - 1; q++) acc[x][q] = _mm512_add_ps(_mm512_loadu_ps(d + 16 * q), acc[x][q]);
                acc[x][NV - 1] = _mm512_add_ps(_mm512_maskz_loadu_ps(tail, d + 16 * (NV - 1)), acc[x][NV - 1]);
            }
            for (int q = 0; q < NV - 1; q++) _mm512_storeu_ps(d + 16 * q, acc[x][q]);
            _mm512_mask_storeu_ps(d + 16 * (NV - 1), tail, acc[x][NV - 1]);
        }
    }
}

#define SHARED_CASE(NX, NV) \
    case NX: shared_nx(t, NX, NV); return;

void spconv_tile_shared_avx512(const spconv_tile *t) {
    switch ((t->ncols + 15) / 16) {
    case 1:
        switch (t->nx) { SHARED_CASE(1, 1) SHARED_CASE(2, 1) SHARED_CASE(3, 1) SHARED_CASE(4, 1) SHARED_CASE(5, 1) SHARED_CASE(6, 1) SHARED_CASE(7, 1) SHARED_CASE(8, 1) }
        return;
    case 2:
        switch (t->nx) { SHARED_CASE(1, 2) SHARED_CASE(2, 2) SHARED_CASE(3, 2) SHARED_CASE(4, 2) SHARED_CASE(5, 2) SHARED_CASE(6, 2) SHARED_CASE(7, 2) SHARED_CASE(8, 2) }
        return;
    case 3:
        switch (t->nx) { SHARED_CASE(1, 3) SHARED_CASE(2, 3) SHARED_CASE(3, 3) SHARED_CASE(4, 3) SHARED_CASE(5, 3) SHARED_CASE(6, 3) SHARED_CASE(7, 3) SHARED_CASE(8, 3) }
        return;
    default:
        switch (t->nx) { SHARED_CASE(1, 4) SHARED_CASE(2, 4) SHARED_CASE(3, 4) SHARED_CASE(4, 4) SHARED_CASE(5, 4) SHARED_CASE(6, 4) }
        return;
    }
}

void spconv_entries_avx512(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                       const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes) {
    spconv_entries_from_slots(out, vals, idx, base, nrows, ns, src_stride, row_bytes);
}
