/* AVX2 micro-kernel of the sparse-weight forward (contract: spfwd_internal.h): the AVX-512
 * kernel's loop in ymm registers, bw/8 of them per pixel (2 or 4), at most 6 pixels (12 or 24
 * accumulators would not fit 16 registers at bw = 32: 3 pixels there). */
#include <immintrin.h>

#include "kernels/spfwd_internal.h"

static inline __attribute__((always_inline)) void tile_fixed(const spfwd_tile *t, const int NX, const int NV) {
    __m256 acc[6][4];
    for (int x = 0; x < NX; x++)
        for (int v = 0; v < NV; v++) acc[x][v] = _mm256_setzero_ps();
    const int64_t sx = t->x_sx;
    for (int k = 0; k < t->K; k++) {
        const float *src = t->x + t->idx[k], *wk = t->w + k * t->w_sk;
        for (int tap = 0; tap < t->ntaps; tap++) {
            const float *s = src + t->tap_off[tap], *w = wk + t->tap_w[tap];
            __m256 wv[4];
            for (int v = 0; v < NV; v++) wv[v] = _mm256_load_ps(w + 8 * v);
            for (int x = 0; x < NX; x++) {
                const __m256 b = _mm256_broadcast_ss(s + x * sx);
                for (int v = 0; v < NV; v++) acc[x][v] = _mm256_fmadd_ps(b, wv[v], acc[x][v]);
            }
        }
    }
    float buf[8];
    for (int x = 0; x < NX; x++) {
        float *y = t->y + x * t->y_sx;
        for (int v = 0; v < NV; v++) {
            int c0 = 8 * v, left = t->ncols - c0;
            if (left >= 8) _mm256_storeu_ps(y + c0, acc[x][v]);
            else if (left > 0) {
                _mm256_storeu_ps(buf, acc[x][v]);
                for (int c = 0; c < left; c++) y[c0 + c] = buf[c];
            }
        }
    }
}

void spfwd_tile_avx2(const spfwd_tile *t, int bw) {
    if (bw == 32) {
        switch (t->nx) {
        case 1: tile_fixed(t, 1, 4); break;
        case 2: tile_fixed(t, 2, 4); break;
        default: tile_fixed(t, 3, 4); break;
        }
    } else {
        switch (t->nx) {
        case 1: tile_fixed(t, 1, 2); break;
        case 2: tile_fixed(t, 2, 2); break;
        case 3: tile_fixed(t, 3, 2); break;
        case 4: tile_fixed(t, 4, 2); break;
        case 5: tile_fixed(t, 5, 2); break;
        default: tile_fixed(t, 6, 2); break;
        }
    }
}

#define SPFWD_WINO_IN spfwd_wino_in_avx2
#define SPFWD_WINO_OUT spfwd_wino_out_avx2
#include "kernels/spfwd_wino_loops.h"
