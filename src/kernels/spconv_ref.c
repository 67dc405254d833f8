/* Portable C micro-kernel of the sparse backward-data convolution (the contract's reference and
 * the fallback on CPUs without AVX2). See spconv_internal.h for what one call computes.
 * Like the vector kernels it sums a pixel over all taps of the call first and adds to dD once. */
#include "kernels/spconv_internal.h"

#define NR_MAX 64

void spconv_tile_ref(const spconv_tile *t) {
    const int ncols = t->ncols, ne = t->ne;
    float acc[NR_MAX];
    for (int zy = 0; zy < t->nz * t->ny; zy++)
        for (int x = 0, z = zy / t->ny, y = zy % t->ny; x < t->nx; x++) {
            for (int c = 0; c < ncols; c++) acc[c] = 0.0f;
            for (int tap = 0; tap < t->ntaps; tap++) {
                const spconv_entry *E = t->ent + t->tap_ent[tap] + x * t->e_sx + y * t->e_sy + z * t->e_sz;
                const char *panel = (const char *)t->tap_panel[tap];
                for (int e = 0; e < ne; e++) {
                    const float v = spconv_entry_value(E[e]);
                    const float *w = (const float *)(panel + spconv_entry_offset(E[e]));
                    for (int c = 0; c < ncols; c++) acc[c] += v * w[c];
                }
            }
            float *d = t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz;
            for (int c = 0; c < ncols; c++) d[c] = t->overwrite ? acc[c] : d[c] + acc[c];
        }
}

/* Shared masks (spconv_internal.h): the offsets of pixel (0, y, z), each pixel's own values, one
 * sum per pixel in entry order (the vector kernels' order, up to their FMA rounding). */
void spconv_tile_shared_ref(const spconv_tile *t) {
    const int ncols = t->ncols, ne = t->ne;
    float acc[SPCONV_SHARED_MAX_NX][NR_MAX];
    for (int zy = 0; zy < t->nz * t->ny; zy++) {
        const int z = zy / t->ny, y = zy % t->ny;
        for (int x = 0; x < t->nx; x++)
            for (int c = 0; c < ncols; c++) acc[x][c] = 0.0f;
        for (int tap = 0; tap < t->ntaps; tap++) {
            const spconv_entry *E = t->ent + t->tap_ent[tap] + y * t->e_sy + z * t->e_sz;
            const char *panel = (const char *)t->tap_panel[tap];
            for (int e = 0; e < ne; e++) {
                const float *w = (const float *)(panel + spconv_entry_offset(E[e]));
                for (int x = 0; x < t->nx; x++) {
                    const float v = spconv_entry_value(E[x * t->e_sx + e]);
                    for (int c = 0; c < ncols; c++) acc[x][c] += v * w[c];
                }
            }
        }
        for (int x = 0; x < t->nx; x++) {
            float *d = t->dd + x * t->dd_sx + y * t->dd_sy + z * t->dd_sz;
            for (int c = 0; c < ncols; c++) d[c] = t->overwrite ? acc[x][c] : d[c] + acc[x][c];
        }
    }
}

void spconv_entries_ref(spconv_entry *restrict out, const float *restrict vals, const uint8_t *restrict idx,
                       const int32_t *restrict base, int64_t nrows, int64_t ns, int64_t src_stride, uint32_t row_bytes) {
    spconv_entries_from_slots(out, vals, idx, base, nrows, ns, src_stride, row_bytes);
}
