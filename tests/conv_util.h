/* A convolution geometry for the conv tests: one that sdgp_conv_geom_init must accept (a test that
 * writes a bad one stops with the message). */
#ifndef SDGP_TESTS_CONV_UTIL_H
#define SDGP_TESTS_CONV_UTIL_H
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

#endif
