/* The fully connected layer, y = x W^T + b (W: out x in, as PyTorch).
 *
 * In ResNet-9 it is 512 x 256 x 10: far too small for a GEMM library to matter, so plain loops,
 * each output a fixed sequence of float operations (bitwise independent of the thread count):
 * forward and dx split the batch rows, dw splits the output units. */
#include "sdgp/nn.h"

#include <string.h>

static int worth_threads(size_t flops) { return flops >= (1u << 18); }

/* y[b,o] = sum_i x[b,i] w[o,i] + b[o] */
void sdgp_linear_forward(float *y, const float *x, const float *w, const float *b, int B, int in, int out) {
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * in * out))
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * in;
        for (int o = 0; o < out; o++) {
            const float *wo = w + (size_t)o * in;
            float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
            for (int i = 0; i < in; i++) acc += xr[i] * wo[i];
            y[(size_t)r * out + o] = acc + (b ? b[o] : 0.0f);
        }
    }
}

/* dx[b,i] = sum_o dy[b,o] w[o,i];  dw[o,i] = sum_b dy[b,o] x[b,i];  db[o] = sum_b dy[b,o]. */
void sdgp_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w, int B,
                          int in, int out) {
    int par = worth_threads((size_t)B * in * out);
    if (dx) {
#pragma omp parallel for schedule(static) if (par)
        for (int r = 0; r < B; r++) {
            float *dxr = dx + (size_t)r * in;
            memset(dxr, 0, (size_t)in * sizeof(float));
            for (int o = 0; o < out; o++) {
                float g = dy[(size_t)r * out + o];
                const float *wo = w + (size_t)o * in;
                for (int i = 0; i < in; i++) dxr[i] += g * wo[i];
            }
        }
    }
#pragma omp parallel for schedule(static) if (par)
    for (int o = 0; o < out; o++) {
        float *dwo = dw + (size_t)o * in;
        memset(dwo, 0, (size_t)in * sizeof(float));
        float gsum = 0.0f;
        for (int r = 0; r < B; r++) {
            float g = dy[(size_t)r * out + o];
            const float *xr = x + (size_t)r * in;
            for (int i = 0; i < in; i++) dwo[i] += g * xr[i];
            gsum += g;
        }
        if (db) db[o] = gsum;
    }
}
