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
