/* A convolution geometry for the conv tests: one that sdgp_conv_geom_init must accept (a test that
 * writes a bad one stops with the message). */
#ifndef SDGP_TESTS_CONV_UTIL_H
#define SDGP_TESTS_CONV_UTIL_H
#include <stdlib.h>

#include "harness.h"
#include "sdgp/conv.h"

static inline sdgp_conv_geom test_conv_geom(int B, int H, int W, int Cin, int Cout, int k, int stride, int pad) {
    sdgp_conv_geom g;
    sdgp_error err;
    if (sdgp_conv_geom_init(&g, B, H, W, Cin, Cout, k, k, stride, pad, &err) != SDGP_OK) {
        fprintf(stderr, "test geometry rejected: %s\n", err.msg);
        exit(2);
    }
    return g;
}

/* dw[co][ci][i][j] = sum over rows (b, ho, wo) of dy[row][co] * x[b][ho*s - p + i][wo*s - p + j][ci], in double */
static inline void test_wgrad_naive(float *dw, const float *x, const float *dy, const sdgp_conv_geom *g) {
    const size_t nw = (size_t)g->Cout * g->Cin * g->kh * g->kw;
    double *acc = calloc(nw, sizeof *acc);
    if (!acc) exit(2);
    for (int b = 0; b < g->B; b++)
        for (int ho = 0; ho < g->Ho; ho++)
            for (int wo = 0; wo < g->Wo; wo++) {
                const float *d = dy + (((size_t)b * g->Ho + ho) * g->Wo + wo) * g->Cout;
                for (int i = 0; i < g->kh; i++) {
                    const int h = ho * g->stride - g->pad + i;
                    if (h < 0 || h >= g->H) continue;
                    for (int j = 0; j < g->kw; j++) {
                        const int w = wo * g->stride - g->pad + j;
                        if (w < 0 || w >= g->W) continue;
                        const float *xs = x + (((size_t)b * g->H + h) * g->W + w) * g->Cin;
                        for (int co = 0; co < g->Cout; co++) {
                            if (d[co] == 0.0f) continue;
                            double *a = acc + (size_t)co * g->Cin * g->kh * g->kw + (size_t)i * g->kw + j;
                            for (int ci = 0; ci < g->Cin; ci++) a[(size_t)ci * g->kh * g->kw] += (double)d[co] * xs[ci];
                        }
                    }
                }
            }
    for (size_t k = 0; k < nw; k++) dw[k] = (float)acc[k];
    free(acc);
}

#endif
