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
    for (int k = 0; k < t->K; k++) {
        const float *src = t->x + t->idx[k], *wk = t->w + k * t->w_sk;
        for (int tap = 0; tap < t->ntaps; tap++) {
            const float *s = src + t->tap_off[tap], *w = wk + t->tap_w[tap];
            const __m512 w0 = _mm512_load_ps(w), w1 = NV > 1 ? _mm512_load_ps(w + 16) : w0;
            for (int x = 0; x < NX; x++) {
                const __m512 b = _mm512_set1_ps(s[x * sx]);
                acc[x][0] = _mm512_fmadd_ps(b, w0, acc[x][0]);
                if (NV > 1) acc[x][1] = _mm512_fmadd_ps(b, w1, acc[x][1]);
            }
        }
    }
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

#define SPFWD_WINO_IN spfwd_wino_in_avx512
#define SPFWD_WINO_OUT spfwd_wino_out_avx512
#include "kernels/spfwd_wino_loops.h"
