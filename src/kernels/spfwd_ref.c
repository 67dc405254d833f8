/* Portable micro-kernel of the sparse-weight forward (contract: spfwd_internal.h). */
#include <math.h>

#include "kernels/spfwd_internal.h"

void spfwd_tile_ref(const spfwd_tile *t, int bw) {
    float acc[32];
    for (int x = 0; x < t->nx; x++) {
        for (int c = 0; c < bw; c++) acc[c] = 0.0f;
        const float *px = t->x + x * t->x_sx;
        for (int k = 0; k < t->K; k++)
            for (int tap = 0; tap < t->ntaps; tap++) {
                const float v = px[t->tap_off[tap] + t->idx[k]], *w = t->w + k * t->w_sk + t->tap_w[tap];
                for (int c = 0; c < bw; c++) acc[c] = fmaf(v, w[c], acc[c]);
            }
        float *y = t->y + x * t->y_sx;
        for (int c = 0; c < t->ncols; c++) y[c] = acc[c];
    }
}

#define SPFWD_WINO_IN spfwd_wino_in_ref
#define SPFWD_WINO_OUT spfwd_wino_out_ref
#include "kernels/spfwd_wino_loops.h"
