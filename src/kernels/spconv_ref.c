/* Portable C micro-kernel of the sparse backward-data convolution (the contract's reference and
 * the fallback on CPUs without AVX2). See spconv_internal.h for what one call computes. */
#include "kernels/spconv_internal.h"

void spconv_tile_ref(const spconv_tile *t) {
    const int ncols = t->ncols, ne = t->ne;
    for (int y = 0; y < t->ny; y++)
        for (int x = 0; x < t->nx; x++) {
            float *d = t->dd + x * t->dd_sx + y * t->dd_sy;
            const spconv_entry *E = t->ent + x * t->e_sx + y * t->e_sy;
            for (int e = 0; e < ne; e++) {
                const float v = spconv_entry_value(E[e]);
                const float *w = (const float *)((const char *)t->panel + spconv_entry_offset(E[e]));
                for (int c = 0; c < ncols; c++) d[c] += v * w[c];
            }
        }
}
