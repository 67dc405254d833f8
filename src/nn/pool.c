/* Pooling over NHWC: the 2x2 stride-2 max pool, the k x k max pool with stride and padding (ResNet's
 * ImageNet stem), the global (whole-image) max pool and the global
 * average pool.
 *
 * Ties go to the first maximum in scan order (row-major within the window); a NaN wins over any
 * number, as in PyTorch's kernels (`v > max || isnan(v)`). Every output depends on a fixed set of
 * inputs, so results are bitwise independent of the thread count. */
#include "sdgp/nn.h"

#include <string.h>

static int worth_threads(size_t n) { return n >= (1u << 15); }

static int beats(float v, float best) { return v > best || v != v; }

/* x: B x H x W x C -> y, arg: B x (H/2) x (W/2) x C; arg = dh * 2 + dw of the winner. */
void sdgp_maxpool2_forward(float *y, uint8_t *arg, const float *x, int B, int H, int W, int C) {
    int Ho = H / 2, Wo = W / 2;
#pragma omp parallel for collapse(2) schedule(static) if (worth_threads((size_t)B * H * W * C))
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < Ho; oh++)
            for (int ow = 0; ow < Wo; ow++) {
                const float *x00 = x + (((size_t)b * H + 2 * oh) * W + 2 * ow) * C;
                const float *win[4] = {x00, x00 + C, x00 + (size_t)W * C, x00 + (size_t)W * C + C};
                size_t o = (((size_t)b * Ho + oh) * Wo + ow) * C;
                for (int c = 0; c < C; c++) {
                    float best = win[0][c];
                    uint8_t k = 0;
                    for (uint8_t j = 1; j < 4; j++)
                        if (beats(win[j][c], best)) best = win[j][c], k = j;
                    y[o + c] = best;
                    arg[o + c] = k;
                }
            }
}

/* dx (all of it overwritten): dy routed to the winners, zeros elsewhere (also in the row/column
 * an odd H/W drops). Each output row owns input rows 2oh, 2oh+1, so the rows split cleanly. */
void sdgp_maxpool2_backward(float *dx, const float *dy, const uint8_t *arg, int B, int H, int W, int C) {
    int Ho = H / 2, Wo = W / 2;
    size_t row = (size_t)W * C;
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * H * W * C))
    for (int b = 0; b < B; b++) {
        float *dxb = dx + (size_t)b * H * row;
        if (H % 2) memset(dxb + (size_t)(H - 1) * row, 0, row * sizeof(float));
        for (int oh = 0; oh < Ho; oh++) {
            float *d0 = dxb + (size_t)2 * oh * row;
            memset(d0, 0, 2 * row * sizeof(float));
            for (int ow = 0; ow < Wo; ow++) {
                float *win[4] = {d0 + (size_t)2 * ow * C, d0 + (size_t)(2 * ow + 1) * C, d0 + row + (size_t)2 * ow * C,
                                 d0 + row + (size_t)(2 * ow + 1) * C};
                size_t o = (((size_t)b * Ho + oh) * Wo + ow) * C;
                for (int c = 0; c < C; c++) win[arg[o + c]][c] = dy[o + c];
            }
        }
    }
}

/* The window of output (oh, ow) clipped to the image: rows [*h0, *h1), columns [*w0, *w1). */
static void pool_window(int oh, int ow, int H, int W, int k, int stride, int pad, int *h0, int *h1, int *w0, int *w1) {
    *h0 = oh * stride - pad, *w0 = ow * stride - pad;
    *h1 = *h0 + k < H ? *h0 + k : H;
    *w1 = *w0 + k < W ? *w0 + k : W;
    if (*h0 < 0) *h0 = 0;
    if (*w0 < 0) *w0 = 0;
}

void sdgp_maxpool_forward(float *y, uint8_t *arg, const float *x, int B, int H, int W, int C, int k, int stride, int pad) {
    int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
#pragma omp parallel for collapse(2) schedule(static) if (worth_threads((size_t)B * H * W * C))
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < Ho; oh++)
            for (int ow = 0; ow < Wo; ow++) {
                int h0, h1, w0, w1;
                pool_window(oh, ow, H, W, k, stride, pad, &h0, &h1, &w0, &w1);
                const int dh = h0 - (oh * stride - pad), dw = w0 - (ow * stride - pad); /* first valid in the window */
                size_t o = (((size_t)b * Ho + oh) * Wo + ow) * C;
                const float *first = x + (((size_t)b * H + h0) * W + w0) * C;
                for (int c = 0; c < C; c++) y[o + c] = first[c], arg[o + c] = (uint8_t)(dh * k + dw);
                for (int h = h0; h < h1; h++)
                    for (int w = w0; w < w1; w++) {
                        if (h == h0 && w == w0) continue;
                        const float *xp = x + (((size_t)b * H + h) * W + w) * C;
                        const uint8_t a = (uint8_t)((h - (oh * stride - pad)) * k + (w - (ow * stride - pad)));
                        for (int c = 0; c < C; c++)
                            if (beats(xp[c], y[o + c])) y[o + c] = xp[c], arg[o + c] = a;
                    }
            }
}

void sdgp_maxpool_backward(float *dx, const float *dy, const uint8_t *arg, int B, int H, int W, int C, int k, int stride,
                           int pad) {
    int Ho = (H + 2 * pad - k) / stride + 1, Wo = (W + 2 * pad - k) / stride + 1;
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * H * W * C))
    for (int b = 0; b < B; b++) {
        float *dxb = dx + (size_t)b * H * W * C;
        memset(dxb, 0, (size_t)H * W * C * sizeof(float));
        for (int oh = 0; oh < Ho; oh++)
            for (int ow = 0; ow < Wo; ow++) {
                size_t o = (((size_t)b * Ho + oh) * Wo + ow) * C;
                for (int c = 0; c < C; c++) {
                    int h = oh * stride - pad + arg[o + c] / k, w = ow * stride - pad + arg[o + c] % k;
                    dxb[((size_t)h * W + w) * C + c] += dy[o + c];
                }
            }
    }
}

/* x: B x HW x C -> y, arg: B x C (arg = the winning position in 0..HW-1). */
void sdgp_global_maxpool_forward(float *y, int32_t *arg, const float *x, int B, int HW, int C) {
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * HW * C))
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * HW * C;
        float *yb = y + (size_t)b * C;
        int32_t *ab = arg + (size_t)b * C;
        for (int c = 0; c < C; c++) yb[c] = xb[c], ab[c] = 0;
        for (int p = 1; p < HW; p++) {
            const float *xp = xb + (size_t)p * C;
            for (int c = 0; c < C; c++)
                if (beats(xp[c], yb[c])) yb[c] = xp[c], ab[c] = p;
        }
    }
}

void sdgp_global_maxpool_backward(float *dx, const float *dy, const int32_t *arg, int B, int HW, int C) {
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * HW * C))
    for (int b = 0; b < B; b++) {
        float *dxb = dx + (size_t)b * HW * C;
        memset(dxb, 0, (size_t)HW * C * sizeof(float));
        for (int c = 0; c < C; c++) dxb[(size_t)arg[(size_t)b * C + c] * C + c] = dy[(size_t)b * C + c];
    }
}

/* Each (b, c) sums its positions in order 0..HW-1 in float and divides (as PyTorch's CPU kernel),
 * whatever the thread count: threads split the images. */
void sdgp_global_avgpool_forward(float *y, const float *x, int B, int HW, int C) {
    const float n = (float)HW;
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * HW * C))
    for (int b = 0; b < B; b++) {
        const float *xb = x + (size_t)b * HW * C;
        float *yb = y + (size_t)b * C;
        for (int c = 0; c < C; c++) yb[c] = 0.0f;
        for (int p = 0; p < HW; p++) {
            const float *xp = xb + (size_t)p * C;
            for (int c = 0; c < C; c++) yb[c] += xp[c];
        }
        for (int c = 0; c < C; c++) yb[c] /= n;
    }
}

void sdgp_global_avgpool_backward(float *dx, const float *dy, int B, int HW, int C) {
    const float n = (float)HW;
#pragma omp parallel for schedule(static) if (worth_threads((size_t)B * HW * C))
    for (int b = 0; b < B; b++) {
        const float *dyb = dy + (size_t)b * C;
        float *dxb = dx + (size_t)b * HW * C;
        for (int p = 0; p < HW; p++)
            for (int c = 0; c < C; c++) dxb[(size_t)p * C + c] = dyb[c] / n;
    }
}
