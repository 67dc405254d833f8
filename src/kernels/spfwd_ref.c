/* Portable micro-kernel of the sparse-weight forward (contract: spfwd_internal.h). */
#include <math.h>

#include "kernels/spfwd_internal.h"

void spfwd_tile_ref(const spfwd_tile *t, int bw) {
    float acc[32];
    for (int x = 0; x < t->nx; x++) {
        for (int c = 0; c < bw; c++) acc[c] = 0.0f;
        const float *px = t->x + x * t->x_sx;
        const int outer = t->taps_outer ? t->ntaps : t->K, inner = t->taps_outer ? t->K : t->ntaps;
        for (int o = 0; o < outer; o++)
            for (int i = 0; i < inner; i++) {
                const int k = t->taps_outer ? i : o, tap = t->taps_outer ? o : i;
                const float v = px[t->tap_off[tap] + t->idx[k]], *w = t->w + k * t->w_sk + t->tap_w[tap];
                for (int c = 0; c < bw; c++) acc[c] = fmaf(v, w[c], acc[c]);
            }
        float *y = t->y + x * t->y_sx;
        for (int c = 0; c < t->ncols; c++) y[c] = acc[c];
    }
}

/* The data gradient's GEMM (contract: spdata_tile, spfwd_internal.h), one row at a time. */
void spdata_tile_ref(const spdata_tile *t, int w, int cw) {
    float acc[64], comp[32];
    for (int x = 0; x < t->nx; x++) {
        float *m = t->m + x * t->m_sx;
        for (int c = 0; c < w; c++) acc[c] = t->acc && c < t->ncols ? m[c] : 0.0f;
        for (int b = 0; b < t->nb; b++) {
            const int kn = b == t->nb - 1 ? t->last_k : t->bw;
            const float *v = t->v + x * t->v_sx + b * t->bw, *u = t->u + (int64_t)b * t->bw * cw;
            for (int s = 0; s < cw; s++) comp[s] = 0.0f;
            for (int k = 0; k < kn; k++)
                for (int s = 0; s < cw; s++) comp[s] = fmaf(v[k], u[k * cw + s], comp[s]);
            const int32_t *perm = t->perm + b * w;
            for (int c = 0; c < w; c++)
                if (perm[c] >= 0) acc[c] += comp[perm[c]];
        }
        for (int c = 0; c < t->ncols; c++) m[c] = acc[c];
    }
}

#define SPFWD_WINO_IN spfwd_wino_in_ref
#define SPFWD_WINO_OUT spfwd_wino_out_ref
#include "kernels/spfwd_wino_loops.h"
