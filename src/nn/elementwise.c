/* Elementwise layers: ReLU, residual add (with or without a ReLU after it), accumulate, scale. Each output element depends only on
 * the same element of the inputs, so results are bitwise independent of the thread count. */
#include "sdgp/nn.h"

/* Parallel regions only pay off for large tensors; below this many floats run on one thread. */
static int worth_threads(size_t n) { return n >= (1u << 15); }

/* y = max(x, 0); NaN propagates (x < 0 is false for NaN), as in PyTorch. */
void sdgp_relu_forward(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) y[i] = x[i] < 0.0f ? 0.0f : x[i];
}

/* dx = dy where the forward output was positive (in place ok: dx == dy). */
void sdgp_relu_backward(float *dx, const float *dy, const float *y, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void sdgp_add_forward(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* v < 0 ? 0 : v as sdgp_relu_forward, so NaN propagates */
void sdgp_add_relu_forward(float *y, const float *a, const float *b, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) {
        float v = a[i] + b[i];
        y[i] = v < 0.0f ? 0.0f : v;
    }
}

void sdgp_accumulate(float *y, const float *x, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) y[i] += x[i];
}

void sdgp_scale_forward(float *y, const float *x, float s, size_t n) {
#pragma omp parallel for simd schedule(static) if (worth_threads(n))
    for (size_t i = 0; i < n; i++) y[i] = s * x[i];
}
