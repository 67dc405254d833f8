/* Fused BatchNorm+ReLU is bitwise equal to BatchNorm followed by ReLU, both directions. */
#include "harness.h"
#include "sdgp/nn.h"

TEST_CASE(fused_bn_relu_is_bitwise_the_composition) {
    const int shapes[][2] = {{1, 3}, {7, 32}, {300, 64}, {2048, 96}, {4096, 257}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        int64_t rows = shapes[t][0];
        int C = shapes[t][1];
        size_t n = (size_t)rows * C;
        float *x = test_xmalloc(n * 4), *dy = test_xmalloc(n * 4), *y1 = test_xmalloc(n * 4), *y2 = test_xmalloc(n * 4);
        float *dx1 = test_xmalloc(n * 4), *dx2 = test_xmalloc(n * 4);
        float *g = test_xmalloc(C * 4), *b = test_xmalloc(C * 4), *m1 = test_xmalloc(C * 4), *r1 = test_xmalloc(C * 4);
        float *m2 = test_xmalloc(C * 4), *r2 = test_xmalloc(C * 4), *rm1 = test_xmalloc(C * 4), *rv1 = test_xmalloc(C * 4);
        float *rm2 = test_xmalloc(C * 4), *rv2 = test_xmalloc(C * 4), *dg1 = test_xmalloc(C * 4), *db1 = test_xmalloc(C * 4);
        float *dg2 = test_xmalloc(C * 4), *db2 = test_xmalloc(C * 4);
        test_fill_normal(x, n, 1 + t);
        test_fill_normal(dy, n, 100 + t);
        test_fill_normal(g, C, 200 + t);
        test_fill_normal(b, C, 300 + t);
        for (int c = 0; c < C; c++) rm1[c] = rm2[c] = 0.5f, rv1[c] = rv2[c] = 2.0f;

        sdgp_batchnorm_forward_train(y1, m1, r1, rm1, rv1, x, g, b, rows, C, 0.1f, 1e-5f);
        sdgp_relu_forward(y1, y1, n);
        sdgp_batchnorm_relu_forward_train(y2, m2, r2, rm2, rv2, x, g, b, rows, C, 0.1f, 1e-5f);
        CHECK(test_bitwise_equal(y1, y2, n * 4), "forward %lldx%d", (long long)rows, C);
        CHECK(test_bitwise_equal(rm1, rm2, C * 4) && test_bitwise_equal(rv1, rv2, C * 4), "running stats");
        sdgp_batchnorm_relu_recompute(dx1, x, m2, r2, g, b, rows, C);
        CHECK(test_bitwise_equal(dx1, y2, n * 4), "recompute %lldx%d", (long long)rows, C);

        memcpy(dx1, dy, n * 4);
        sdgp_relu_backward(dx1, dx1, y1, n);
        sdgp_batchnorm_backward(dx1, dg1, db1, dx1, x, m1, r1, g, rows, C);
        memcpy(dx2, dy, n * 4);
        sdgp_batchnorm_relu_backward(dx2, dg2, db2, dx2, x, m2, r2, g, b, rows, C); /* in place; mask from x */
        CHECK(test_bitwise_equal(dx1, dx2, n * 4), "backward dx %lldx%d", (long long)rows, C);
        CHECK(test_bitwise_equal(dg1, dg2, C * 4) && test_bitwise_equal(db1, db2, C * 4), "dgamma, dbeta");
        size_t zeros = 0;
        for (size_t i = 0; i < n; i++) zeros += y2[i] == 0.0f;
        CHECK(zeros > 0 || n < 10, "the ReLU must cut something for the test to mean anything");
        free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(g), free(b), free(m1), free(r1), free(m2);
        free(r2), free(rm1), free(rv1), free(rm2), free(rv2), free(dg1), free(db1), free(dg2), free(db2);
    }
}

int main(void) {
    RUN(fused_bn_relu_is_bitwise_the_composition);
    return test_finish();
}
