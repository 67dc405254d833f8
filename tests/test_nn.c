/* The layers of include/sdgp/nn.h: forward against naive double-precision loops written here,
 * every backward against central finite differences of its forward (L = sum dyr * y, so
 * dL/dx = backward(dyr)), edge cases, thread-count independence, SGD and the schedules. */
#include <omp.h>

#include "harness.h"
#include "sdgp/nn.h"

/* ---- generic finite-difference check ----
 * fwd(ctx, y) runs a forward pass reading whatever arrays ctx points to; p (np floats) is the
 * array being differentiated (an input or a parameter), g the analytic dL/dp. Checks every
 * `step`-th entry; returns max |fd - g| / max |g|. */
typedef void (*fwd_fn)(void *ctx, float *y);
typedef struct {
    fwd_fn fwd;
    void *ctx;
    float *y;
    const float *dyr;
    size_t ny;
} fd_loss_ctx;

static double fd_loss(void *vctx, const float *unused) {
    fd_loss_ctx *f = vctx;
    (void)unused;
    f->fwd(f->ctx, f->y);
    double L = 0;
    for (size_t k = 0; k < f->ny; k++) L += (double)f->dyr[k] * f->y[k];
    return L;
}

static double fd_check(fwd_fn fwd, void *ctx, float *p, size_t np, const float *g, size_t ny, const float *dyr, float h,
                       size_t step) {
    float *y = test_xmalloc(ny * sizeof(float));
    fd_loss_ctx f = {fwd, ctx, y, dyr, ny};
    double diff = 0, ref = 0;
    for (size_t i = 0; i < np; i++)
        if (fabs(g[i]) > ref) ref = fabs(g[i]);
    for (size_t i = 0; i < np; i += step) {
        double d = fabs(test_fd(fd_loss, &f, p, i, h) - g[i]);
        if (d > diff) diff = d;
    }
    free(y);
    return diff / (ref > 1e-30 ? ref : 1e-30);
}

static float *randn(size_t n, uint64_t seed) {
    float *x = test_xmalloc(n * sizeof(float));
    test_fill_normal(x, n, seed);
    return x;
}

/* Runs f at 1, 2 and 3 OpenMP threads; 1 when the outputs (out_bytes at out) agree bitwise. */
typedef void (*run_fn)(void *ctx);
static int same_for_any_threads(run_fn f, void *ctx, const void *out, size_t out_bytes) {
    int keep = omp_get_max_threads(), same = 1;
    void *first = test_xmalloc(out_bytes);
    for (int t = 1; t <= 3; t++) {
        omp_set_num_threads(t);
        f(ctx);
        if (t == 1) memcpy(first, out, out_bytes);
        else same &= test_bitwise_equal(first, out, out_bytes);
    }
    omp_set_num_threads(keep);
    free(first);
    return same;
}

/* ================= BatchNorm ================= */

typedef struct {
    int64_t rows;
    int C;
    float *x, *gamma, *beta, *mean, *rstd, *rm, *rv;
} bn_ctx;

static void bn_fwd(void *vctx, float *y) {
    bn_ctx *b = vctx;
    sdgp_batchnorm_forward_train(y, b->mean, b->rstd, NULL, NULL, b->x, b->gamma, b->beta, b->rows, b->C, 0.1f, 1e-5f);
}

TEST_CASE(batchnorm_train_matches_naive) {
    /* rows, C, mean offset: odd rows/C, C > one window, a mean 1000x the std (cancellation) */
    const int shapes[][3] = {{37, 5, 3}, {1000, 48, 3}, {3, 300, 3}, {2, 1, 3}, {2000, 20, 1000}};
    for (int t = 0; t < 5; t++) {
        int64_t rows = shapes[t][0];
        int C = shapes[t][1];
        size_t n = (size_t)rows * C;
        float *x = randn(n, 10 + t), *gamma = randn(C, 20), *beta = randn(C, 21), *y = test_xmalloc(n * 4);
        float *mean = test_xmalloc(C * 4), *rstd = test_xmalloc(C * 4), *rm = randn(C, 22), *rv = test_xmalloc(C * 4);
        float *rm0 = test_xmalloc(C * 4), *rv0 = test_xmalloc(C * 4);
        for (int c = 0; c < C; c++) rv[c] = 0.5f + c % 3, rm0[c] = rm[c], rv0[c] = rv[c];
        for (size_t i = 0; i < n; i++) x[i] = (float)shapes[t][2] + 2.0f * x[i];
        sdgp_batchnorm_forward_train(y, mean, rstd, rm, rv, x, gamma, beta, rows, C, 0.1f, 1e-5f);
        double worst_y = 0, worst_stat = 0;
        for (int c = 0; c < C; c++) {
            double s = 0, q = 0;
            for (int64_t r = 0; r < rows; r++) s += x[r * C + c];
            double m = s / rows;
            for (int64_t r = 0; r < rows; r++) q += (x[r * C + c] - m) * (x[r * C + c] - m);
            double var = q / rows, rs = 1.0 / sqrt(var + 1e-5);
            double erm = 0.9 * rm0[c] + 0.1 * m, erv = 0.9 * rv0[c] + 0.1 * q / (rows > 1 ? rows - 1 : 1);
            worst_stat = fmax(worst_stat, fabs(mean[c] - m) / (1 + fabs(m)));
            worst_stat = fmax(worst_stat, fabs(rstd[c] - rs) / rs);
            worst_stat = fmax(worst_stat, fabs(rm[c] - erm) / (1 + fabs(erm)));
            worst_stat = fmax(worst_stat, fabs(rv[c] - erv) / (1 + fabs(erv)));
            for (int64_t r = 0; r < rows; r++) {
                /* normalised by the saved float mean (checked against m above): with |mean| >> std
                 * its rounding alone would exceed the tolerance */
                double ey = (x[r * C + c] - (double)mean[c]) * rs * gamma[c] + beta[c];
                worst_y = fmax(worst_y, fabs(y[r * C + c] - ey) / (1 + fabs(ey)));
            }
        }
        CHECK(worst_y < 1e-5, "rows=%lld C=%d: y err %.2e", (long long)rows, C, worst_y);
        CHECK(worst_stat < 1e-5, "rows=%lld C=%d: stats err %.2e", (long long)rows, C, worst_stat);
        free(x), free(gamma), free(beta), free(y), free(mean), free(rstd), free(rm), free(rv), free(rm0), free(rv0);
    }
}

TEST_CASE(batchnorm_eval_matches_naive) {
    int64_t rows = 50;
    int C = 7;
    size_t n = (size_t)rows * C;
    float *x = randn(n, 1), *g = randn(C, 2), *b = randn(C, 3), *rm = randn(C, 4), *rv = randn(C, 5), *y = test_xmalloc(n * 4);
    for (int c = 0; c < C; c++) rv[c] = fabsf(rv[c]) + 0.1f;
    sdgp_batchnorm_forward_eval(y, x, g, b, rm, rv, rows, C, 1e-3f);
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        int c = (int)(i % C);
        double e = (x[i] - rm[c]) / sqrt(rv[c] + 1e-3) * g[c] + b[c];
        worst = fmax(worst, fabs(y[i] - e) / (1 + fabs(e)));
    }
    CHECK(worst < 1e-5, "eval err %.2e", worst);
    free(x), free(g), free(b), free(rm), free(rv), free(y);
}

/* The fused inference BatchNorm + ReLU is bitwise the two layers, NaN and -0 included, on a tensor
 * large enough to run threaded (rows x C >= 2^15) and on a small one. */
TEST_CASE(batchnorm_relu_eval_equals_unfused) {
    const int shapes[][2] = {{50, 7}, {1500, 40}};
    for (int t = 0; t < 2; t++) {
        int64_t rows = shapes[t][0];
        int C = shapes[t][1];
        size_t n = (size_t)rows * C;
        float *x = randn(n, 40 + t), *g = randn(C, 41), *b = randn(C, 42), *rm = randn(C, 43), *rv = randn(C, 44);
        float *ref = test_xmalloc(n * 4), *fused = test_xmalloc(n * 4);
        for (int c = 0; c < C; c++) rv[c] = fabsf(rv[c]) + 0.1f;
        x[3] = NAN, x[5] = -0.0f, b[5 % C] = 0.0f, rm[5 % C] = 0.0f; /* element 5 normalises to -0 * a + 0 */
        sdgp_batchnorm_forward_eval(ref, x, g, b, rm, rv, rows, C, 1e-5f);
        sdgp_relu_forward(ref, ref, n);
        sdgp_batchnorm_relu_forward_eval(fused, x, g, b, rm, rv, rows, C, 1e-5f);
        CHECK(test_bitwise_equal(fused, ref, n * 4), "rows=%lld C=%d: fused BN + ReLU (eval) differs from the two layers",
              (long long)rows, C);
        free(x), free(g), free(b), free(rm), free(rv), free(ref), free(fused);
    }
}

TEST_CASE(batchnorm_backward_finite_differences) {
    const int shapes[][2] = {{24, 6}, {2, 3}, {45, 17}};
    for (int t = 0; t < 3; t++) {
        bn_ctx b = {shapes[t][0], shapes[t][1], 0, 0, 0, 0, 0, 0, 0};
        size_t n = (size_t)b.rows * b.C;
        b.x = randn(n, 30 + t), b.gamma = randn(b.C, 31), b.beta = randn(b.C, 32);
        b.mean = test_xmalloc(b.C * 4), b.rstd = test_xmalloc(b.C * 4);
        float *dyr = randn(n, 33), *y = test_xmalloc(n * 4), *dx = test_xmalloc(n * 4);
        float *dg = test_xmalloc(b.C * 4), *db = test_xmalloc(b.C * 4);
        bn_fwd(&b, y);
        sdgp_batchnorm_backward(dx, dg, db, dyr, b.x, b.mean, b.rstd, b.gamma, b.rows, b.C);
        double ex = fd_check(bn_fwd, &b, b.x, n, dx, n, dyr, 1e-2f, 1);
        double eg = fd_check(bn_fwd, &b, b.gamma, b.C, dg, n, dyr, 1e-2f, 1);
        double eb = fd_check(bn_fwd, &b, b.beta, b.C, db, n, dyr, 1e-2f, 1);
        CHECK(ex < 1e-2 && eg < 1e-2 && eb < 1e-2, "rows=%lld C=%d: dx %.2e dgamma %.2e dbeta %.2e",
              (long long)b.rows, b.C, ex, eg, eb);
        /* in place: dx == dy gives the same dx */
        float *inplace = test_xmalloc(n * 4);
        memcpy(inplace, dyr, n * 4);
        bn_fwd(&b, y);
        sdgp_batchnorm_backward(inplace, dg, db, inplace, b.x, b.mean, b.rstd, b.gamma, b.rows, b.C);
        CHECK(test_bitwise_equal(inplace, dx, n * 4), "in-place backward differs");
        free(b.x), free(b.gamma), free(b.beta), free(b.mean), free(b.rstd), free(dyr), free(y), free(dx), free(dg);
        free(db), free(inplace);
    }
}

typedef struct {
    bn_ctx b;
    float *y, *dy, *dx, *dg, *db, *out; /* out: everything compared, packed */
} bn_threads_ctx;

static void bn_all(void *vctx) {
    bn_threads_ctx *t = vctx;
    bn_ctx *b = &t->b;
    size_t n = (size_t)b->rows * b->C;
    for (int c = 0; c < b->C; c++) b->rm[c] = 0, b->rv[c] = 1;
    sdgp_batchnorm_forward_train(t->y, b->mean, b->rstd, b->rm, b->rv, b->x, b->gamma, b->beta, b->rows, b->C, 0.1f,
                                 1e-5f);
    sdgp_batchnorm_backward(t->dx, t->dg, t->db, t->dy, b->x, b->mean, b->rstd, b->gamma, b->rows, b->C);
    float *o = t->out;
    memcpy(o, t->y, n * 4), o += n;
    memcpy(o, t->dx, n * 4), o += n;
    const float *vecs[6] = {b->mean, b->rstd, b->rm, b->rv, t->dg, t->db};
    for (int v = 0; v < 6; v++) memcpy(o, vecs[v], b->C * 4), o += b->C;
}

TEST_CASE(batchnorm_bitwise_independent_of_threads) {
    bn_threads_ctx t;
    bn_ctx *b = &t.b;
    b->rows = 4099, b->C = 72; /* above the parallel threshold; C not a multiple of 16 */
    size_t n = (size_t)b->rows * b->C, out = 2 * n + 6 * (size_t)b->C;
    b->x = randn(n, 40), b->gamma = randn(b->C, 41), b->beta = randn(b->C, 42);
    b->mean = test_xmalloc(b->C * 4), b->rstd = test_xmalloc(b->C * 4);
    b->rm = test_xmalloc(b->C * 4), b->rv = test_xmalloc(b->C * 4);
    t.y = test_xmalloc(n * 4), t.dy = randn(n, 43), t.dx = test_xmalloc(n * 4);
    t.dg = test_xmalloc(b->C * 4), t.db = test_xmalloc(b->C * 4), t.out = test_xmalloc(out * 4);
    CHECK(same_for_any_threads(bn_all, &t, t.out, out * 4), "batchnorm results depend on the thread count");
    free(b->x), free(b->gamma), free(b->beta), free(b->mean), free(b->rstd), free(b->rm), free(b->rv);
    free(t.y), free(t.dy), free(t.dx), free(t.dg), free(t.db), free(t.out);
}

/* The same where the order of additions shows: of six row chunks (the reductions' unit, 1024
 * rows), the second holds +3e13 and the fourth -3e13, the others small values, so which of the
 * small chunks' sums lose bits to a large partial sum depends on the order the partial sums are
 * added in. (The data above give sums that double precision adds exactly in any order.) */
TEST_CASE(batchnorm_sum_order_independent_of_threads) {
    bn_threads_ctx t;
    bn_ctx *b = &t.b;
    b->rows = 5 * 1024 + 3, b->C = 8; /* above the parallel threshold, a short last chunk */
    size_t n = (size_t)b->rows * b->C, out = 2 * n + 6 * (size_t)b->C;
    b->x = test_xmalloc(n * 4), t.dy = test_xmalloc(n * 4);
    for (int64_t r = 0; r < b->rows; r++) {
        int64_t chunk = r / 1024;
        float big = chunk == 1 ? 3e13f : chunk == 3 ? -3e13f : 0.0f;
        for (int c = 0; c < b->C; c++) {
            float small = 1e-3f * (float)(1 + (r + c) % 7);
            b->x[r * b->C + c] = big != 0.0f ? big * (1 + 0.01f * c) : small;
            t.dy[r * b->C + c] = big != 0.0f ? big * (1 - 0.01f * c) : small;
        }
    }
    b->gamma = randn(b->C, 44), b->beta = randn(b->C, 45);
    b->mean = test_xmalloc(b->C * 4), b->rstd = test_xmalloc(b->C * 4);
    b->rm = test_xmalloc(b->C * 4), b->rv = test_xmalloc(b->C * 4);
    t.y = test_xmalloc(n * 4), t.dx = test_xmalloc(n * 4);
    t.dg = test_xmalloc(b->C * 4), t.db = test_xmalloc(b->C * 4), t.out = test_xmalloc(out * 4);
    CHECK(same_for_any_threads(bn_all, &t, t.out, out * 4), "batchnorm's sums depend on the thread count");
    free(b->x), free(b->gamma), free(b->beta), free(b->mean), free(b->rstd), free(b->rm), free(b->rv);
    free(t.y), free(t.dy), free(t.dx), free(t.dg), free(t.db), free(t.out);
}

/* ================= ReLU and elementwise ================= */

typedef struct {
    float *x;
    size_t n;
} relu_ctx;
static void relu_fwd(void *vctx, float *y) {
    relu_ctx *r = vctx;
    sdgp_relu_forward(y, r->x, r->n);
}

TEST_CASE(relu_forward_backward) {
    size_t n = 301;
    float *x = randn(n, 50), *y = test_xmalloc(n * 4), *dyr = randn(n, 51), *dx = test_xmalloc(n * 4);
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0.05f) x[i] = 0.1f; /* keep finite differences away from the kink */
    relu_ctx r = {x, n};
    sdgp_relu_forward(y, x, n);
    int ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == (x[i] > 0 ? x[i] : 0.0f);
    CHECK(ok, "forward is not max(x, 0)");
    sdgp_relu_backward(dx, dyr, y, n);
    CHECK(fd_check(relu_fwd, &r, x, n, dx, n, dyr, 1e-2f, 1) < 1e-4, "backward vs finite differences");
    sdgp_relu_backward(dyr, dyr, y, n); /* in place */
    CHECK(test_bitwise_equal(dyr, dx, n * 4), "in-place backward differs");
    float nan_in = NAN, nan_out;
    sdgp_relu_forward(&nan_out, &nan_in, 1);
    CHECK(nan_out != nan_out, "NaN must propagate");
    sdgp_relu_forward(x, x, n); /* in place */
    CHECK(test_bitwise_equal(x, y, n * 4), "in-place forward differs");
    free(x), free(y), free(dyr), free(dx);
}

TEST_CASE(elementwise_ops) {
    size_t n = 70000; /* above the parallel threshold */
    float *a = randn(n, 60), *b = randn(n, 61), *y = test_xmalloc(n * 4), *a0 = test_xmalloc(n * 4);
    memcpy(a0, a, n * 4);
    int ok = 1;
    sdgp_add_forward(y, a, b, n);
    for (size_t i = 0; i < n; i++) ok &= y[i] == a[i] + b[i];
    CHECK(ok, "add");
    sdgp_add_forward(a, a, b, n); /* y aliases a */
    CHECK(test_bitwise_equal(a, y, n * 4), "add aliased");
    memcpy(a, a0, n * 4);
    sdgp_accumulate(a, b, n);
    CHECK(test_bitwise_equal(a, y, n * 4), "accumulate");
    sdgp_scale_forward(y, a0, 0.2f, n);
    ok = 1;
    for (size_t i = 0; i < n; i++) ok &= y[i] == 0.2f * a0[i];
    CHECK(ok, "scale");
    sdgp_scale_forward(a0, a0, 0.2f, n);
    CHECK(test_bitwise_equal(a0, y, n * 4), "scale in place");
    free(a), free(b), free(y), free(a0);
}

/* ================= pooling ================= */

typedef struct {
    float *x;
    uint8_t *arg;
    int B, H, W, C;
} mp_ctx;
static void mp_fwd(void *vctx, float *y) {
    mp_ctx *m = vctx;
    sdgp_maxpool2_forward(y, m->arg, m->x, m->B, m->H, m->W, m->C);
}

TEST_CASE(maxpool2_forward_backward) {
    const int shapes[][4] = {{2, 6, 8, 3}, {1, 5, 7, 4}, {3, 3, 2, 17}, {1, 1, 4, 2}}; /* odd H/W; Ho = 0 */
    for (int t = 0; t < 4; t++) {
        mp_ctx m = {0, 0, shapes[t][0], shapes[t][1], shapes[t][2], shapes[t][3]};
        int Ho = m.H / 2, Wo = m.W / 2;
        size_t nx = (size_t)m.B * m.H * m.W * m.C, ny = (size_t)m.B * Ho * Wo * m.C;
        m.x = randn(nx, 70 + t), m.arg = test_xmalloc(ny + 1);
        float *y = test_xmalloc(ny * 4 + 4), *dyr = randn(ny + 1, 71), *dx = test_xmalloc(nx * 4);
        mp_fwd(&m, y);
        int ok = 1;
        for (int b = 0; b < m.B; b++)
            for (int oh = 0; oh < Ho; oh++)
                for (int ow = 0; ow < Wo; ow++)
                    for (int c = 0; c < m.C; c++) {
                        float best = -INFINITY;
                        int k = -1;
                        for (int j = 0; j < 4; j++) {
                            float v = m.x[(((size_t)b * m.H + 2 * oh + j / 2) * m.W + 2 * ow + j % 2) * m.C + c];
                            if (v > best) best = v, k = j;
                        }
                        size_t o = (((size_t)b * Ho + oh) * Wo + ow) * m.C + c;
                        ok &= y[o] == best && m.arg[o] == k;
                    }
        CHECK(ok, "shape %d: forward differs from the naive max", t);
        for (size_t i = 0; i < nx; i++) dx[i] = NAN; /* backward must overwrite all of dx */
        sdgp_maxpool2_backward(dx, dyr, m.arg, m.B, m.H, m.W, m.C);
        int finite = 1;
        for (size_t i = 0; i < nx; i++) finite &= dx[i] == dx[i];
        CHECK(finite, "shape %d: backward left entries unwritten", t);
        CHECK(fd_check(mp_fwd, &m, m.x, nx, dx, ny, dyr, 1e-3f, 1) < 1e-3, "shape %d: backward vs fd", t);
        free(m.x), free(m.arg), free(y), free(dyr), free(dx);
    }
}

TEST_CASE(maxpool2_ties_first_wins) {
    float x[2 * 2 * 2] = {1, 5, 1, 5, 1, 5, 1, 5}; /* B=1, 2x2, C=2: all four tie per channel */
    float y[2], dy[2] = {3, 4}, dx[8];
    uint8_t arg[2];
    sdgp_maxpool2_forward(y, arg, x, 1, 2, 2, 2);
    CHECK(arg[0] == 0 && arg[1] == 0 && y[0] == 1 && y[1] == 5, "first maximum must win");
    sdgp_maxpool2_backward(dx, dy, arg, 1, 2, 2, 2);
    float expect[8] = {3, 4, 0, 0, 0, 0, 0, 0};
    CHECK(test_bitwise_equal(dx, expect, sizeof dx), "gradient goes to the first maximum only");
}

typedef struct {
    float *x;
    int32_t *arg;
    int B, HW, C;
} gmp_ctx;
static void gmp_fwd(void *vctx, float *y) {
    gmp_ctx *g = vctx;
    sdgp_global_maxpool_forward(y, g->arg, g->x, g->B, g->HW, g->C);
}

TEST_CASE(global_maxpool_forward_backward) {
    const int shapes[][3] = {{3, 16, 5}, {1, 9, 20}, {2, 1, 3}};
    for (int t = 0; t < 3; t++) {
        gmp_ctx g = {0, 0, shapes[t][0], shapes[t][1], shapes[t][2]};
        size_t nx = (size_t)g.B * g.HW * g.C, ny = (size_t)g.B * g.C;
        g.x = randn(nx, 80 + t), g.arg = test_xmalloc(ny * 4);
        float *y = test_xmalloc(ny * 4), *dyr = randn(ny, 81), *dx = test_xmalloc(nx * 4);
        gmp_fwd(&g, y);
        int ok = 1;
        for (int b = 0; b < g.B; b++)
            for (int c = 0; c < g.C; c++) {
                int k = 0;
                for (int p = 1; p < g.HW; p++)
                    if (g.x[((size_t)b * g.HW + p) * g.C + c] > g.x[((size_t)b * g.HW + k) * g.C + c]) k = p;
                ok &= g.arg[b * g.C + c] == k && y[b * g.C + c] == g.x[((size_t)b * g.HW + k) * g.C + c];
            }
        CHECK(ok, "shape %d: forward differs from the naive max", t);
        for (size_t i = 0; i < nx; i++) dx[i] = NAN;
        sdgp_global_maxpool_backward(dx, dyr, g.arg, g.B, g.HW, g.C);
        CHECK(fd_check(gmp_fwd, &g, g.x, nx, dx, ny, dyr, 1e-3f, 1) < 1e-3, "shape %d: backward vs fd", t);
        free(g.x), free(g.arg), free(y), free(dyr), free(dx);
    }
    float x[3] = {2, 2, 1}, y;
    int32_t arg;
    sdgp_global_maxpool_forward(&y, &arg, x, 1, 3, 1);
    CHECK(arg == 0 && y == 2, "ties: the first position wins");
}

/* ================= linear ================= */

typedef struct {
    float *x, *w, *b;
    int B, in, out;
} lin_ctx;
static void lin_fwd(void *vctx, float *y) {
    lin_ctx *l = vctx;
    sdgp_linear_forward(y, l->x, l->w, l->b, l->B, l->in, l->out);
}

TEST_CASE(linear_forward_backward) {
    const int shapes[][3] = {{4, 13, 10}, {1, 7, 3}, {64, 256, 10}};
    for (int t = 0; t < 3; t++)
        for (int bias = 0; bias < 2; bias++) {
            lin_ctx l = {0, 0, 0, shapes[t][0], shapes[t][1], shapes[t][2]};
            size_t nx = (size_t)l.B * l.in, nw = (size_t)l.in * l.out, ny = (size_t)l.B * l.out;
            l.x = randn(nx, 90 + t), l.w = randn(nw, 91), l.b = bias ? randn(l.out, 92) : NULL;
            float *y = test_xmalloc(ny * 4), *dyr = randn(ny, 93), *dx = test_xmalloc(nx * 4);
            float *dw = test_xmalloc(nw * 4), *db = test_xmalloc(l.out * 4);
            lin_fwd(&l, y);
            double worst = 0;
            for (int r = 0; r < l.B; r++)
                for (int o = 0; o < l.out; o++) {
                    double e = bias ? l.b[o] : 0;
                    for (int i = 0; i < l.in; i++) e += (double)l.x[r * l.in + i] * l.w[o * l.in + i];
                    worst = fmax(worst, fabs(y[r * l.out + o] - e) / (1 + fabs(e)));
                }
            CHECK(worst < 1e-4, "shape %d bias %d: forward err %.2e", t, bias, worst); /* float sums of 256 */
            sdgp_linear_backward(dx, dw, bias ? db : NULL, dyr, l.x, l.w, l.B, l.in, l.out);
            /* about 100 entries each: every check runs two full forward passes */
            double ex = fd_check(lin_fwd, &l, l.x, nx, dx, ny, dyr, 1e-2f, nx / 97 + 1);
            double ew = fd_check(lin_fwd, &l, l.w, nw, dw, ny, dyr, 1e-2f, nw / 97 + 1);
            double eb = bias ? fd_check(lin_fwd, &l, l.b, l.out, db, ny, dyr, 1e-2f, 1) : 0;
            CHECK(ex < 1e-3 && ew < 1e-3 && eb < 1e-3, "shape %d bias %d: dx %.2e dw %.2e db %.2e", t, bias, ex, ew, eb);
            float *dw2 = test_xmalloc(nw * 4);
            sdgp_linear_backward(NULL, dw2, NULL, dyr, l.x, l.w, l.B, l.in, l.out); /* dx, db nullable */
            CHECK(test_bitwise_equal(dw, dw2, nw * 4), "dw with dx NULL differs");
            free(l.x), free(l.w), free(l.b), free(y), free(dyr), free(dx), free(dw), free(db), free(dw2);
        }
}

/* ================= softmax cross-entropy ================= */

typedef struct {
    float *z;
    int32_t *labels;
    int B, K;
    float s;
} xent_ctx;
static double xent_loss(void *vctx, const float *unused) {
    xent_ctx *c = vctx;
    (void)unused;
    return sdgp_softmax_xent(NULL, NULL, c->z, c->labels, c->B, c->K, c->s);
}

TEST_CASE(softmax_xent_values_and_gradient) {
    const float smooth[2] = {0.0f, 0.1f};
    const int shapes[][2] = {{5, 10}, {1, 3}, {16, 7}};
    for (int t = 0; t < 3; t++)
        for (int si = 0; si < 2; si++) {
            xent_ctx c = {0, 0, shapes[t][0], shapes[t][1], smooth[si]};
            size_t n = (size_t)c.B * c.K;
            c.z = randn(n, 100 + t), c.labels = test_xmalloc(c.B * 4);
            for (size_t i = 0; i < n; i++) c.z[i] = 3 * c.z[i] + 50; /* a large offset: needs max subtraction */
            uint64_t seed = 7;
            for (int b = 0; b < c.B; b++) c.labels[b] = (int32_t)(test_rand_u64(&seed) % c.K);
            float *dz = test_xmalloc(n * 4);
            int correct = -1;
            double loss = sdgp_softmax_xent(dz, &correct, c.z, c.labels, c.B, c.K, c.s);
            /* the reference, straight from the definition (log-softmax in long double) */
            double eloss = 0;
            int ecorrect = 0;
            for (int b = 0; b < c.B; b++) {
                const float *z = c.z + (size_t)b * c.K;
                long double se = 0;
                int am = 0;
                for (int k = 0; k < c.K; k++) se += expl((long double)z[k] - 50), am = z[k] > z[am] ? k : am;
                for (int k = 0; k < c.K; k++) {
                    double logp = (double)((long double)z[k] - 50 - logl(se));
                    double s = c.s, q = (k == c.labels[b] ? 1 - s : 0) + s / c.K;
                    eloss -= q * logp / c.B;
                }
                ecorrect += am == c.labels[b];
            }
            CHECK(fabs(loss - eloss) < 1e-9 * (1 + fabs(eloss)), "B=%d K=%d s=%g: loss %.10f vs %.10f", c.B, c.K, c.s,
                  loss, eloss);
            CHECK(correct == ecorrect, "correct %d vs %d", correct, ecorrect);
            double diff = 0, ref = 0;
            for (size_t i = 0; i < n; i++) {
                diff = fmax(diff, fabs(test_fd(xent_loss, &c, c.z, i, 1e-2f) - dz[i]));
                ref = fmax(ref, fabs(dz[i]));
            }
            CHECK(diff / ref < 2e-3, "B=%d K=%d s=%g: dlogits vs fd %.2e", c.B, c.K, c.s, diff / ref);
            free(c.z), free(c.labels), free(dz);
        }
    /* a bad label makes the loss NaN instead of reading out of bounds */
    float z[3] = {1, 2, 3};
    int32_t bad = 3;
    double l = sdgp_softmax_xent(NULL, NULL, z, &bad, 1, 3, 0.1f);
    CHECK(l != l, "out-of-range label must give NaN, got %g", l);
}

/* ================= thread-count independence of the other reducing layers ================= */

typedef struct {
    float *x, *w, *dy, *out; /* out: y | dx | dw | db | pooled | dpooled */
    int B, in, outf;
} lin_threads_ctx;

static void lin_and_pool_all(void *vctx) {
    lin_threads_ctx *t = vctx;
    float *o = t->out;
    size_t ny = (size_t)t->B * t->outf, nx = (size_t)t->B * t->in, nw = (size_t)t->outf * t->in;
    sdgp_linear_forward(o, t->x, t->w, t->w, t->B, t->in, t->outf), o += ny;
    sdgp_linear_backward(o, o + nx, o + nx + nw, t->dy, t->x, t->w, t->B, t->in, t->outf), o += nx + nw + t->outf;
    /* x viewed as B x 16 x 16 x (in/256) images: global max pool and its backward */
    int32_t *arg = test_xmalloc(nx / 16 * 4);
    int C = t->in / 16;
    sdgp_global_maxpool_forward(o, arg, t->x, t->B, 16, C);
    sdgp_global_maxpool_backward(o + (size_t)t->B * C, o, arg, t->B, 16, C);
    free(arg);
}

TEST_CASE(linear_and_pool_bitwise_independent_of_threads) {
    lin_threads_ctx t = {0, 0, 0, 0, 128, 256, 10}; /* above the parallel thresholds */
    size_t nx = (size_t)t.B * t.in, nw = (size_t)t.outf * t.in, ny = (size_t)t.B * t.outf;
    size_t out = ny + nx + nw + t.outf + (size_t)t.B * (t.in / 16) + nx;
    t.x = randn(nx, 110), t.w = randn(nw, 111), t.dy = randn(ny, 112), t.out = test_xmalloc(out * 4);
    CHECK(same_for_any_threads(lin_and_pool_all, &t, t.out, out * 4), "linear/pool results depend on the thread count");
    free(t.x), free(t.w), free(t.dy), free(t.out);
}

/* ================= SGD ================= */

TEST_CASE(sgd_two_steps_by_hand) {
    /* one weight, w = 1, g1 = 0.5, g2 = -0.25, lr 0.1, momentum 0.9, wd 0.01 */
    for (int nesterov = 0; nesterov < 2; nesterov++) {
        float w = 1.0f, v = 0.0f, g1 = 0.5f, g2 = -0.25f;
        /* step 1: g' = 0.5 + 0.01 = 0.51; v = 0.51; step = v (0.51) or g' + 0.9 v = 0.969 */
        double ew = 1.0, ev, gp;
        gp = 0.5 + 0.01 * ew, ev = gp, ew -= 0.1 * (nesterov ? gp + 0.9 * ev : ev);
        sdgp_sgd_update(&w, &v, &g1, 1, 0.1f, 0.9f, 0.01f, nesterov);
        CHECK(fabs(w - ew) < 1e-6 && fabs(v - ev) < 1e-6, "nesterov %d step 1: w %.7f (%.7f) v %.7f (%.7f)", nesterov, w,
              ew, v, ev);
        gp = -0.25 + 0.01 * ew, ev = 0.9 * ev + gp, ew -= 0.1 * (nesterov ? gp + 0.9 * ev : ev);
        sdgp_sgd_update(&w, &v, &g2, 1, 0.1f, 0.9f, 0.01f, nesterov);
        CHECK(fabs(w - ew) < 1e-6 && fabs(v - ev) < 1e-6, "nesterov %d step 2: w %.7f (%.7f) v %.7f (%.7f)", nesterov, w,
              ew, v, ev);
    }
    /* the numbers themselves, for the plain momentum case: w1 = 1 - 0.051 = 0.949,
     * g2' = -0.25 + 0.00949 = -0.24051, v2 = 0.459 - 0.24051 = 0.21849, w2 = 0.949 - 0.021849 */
    float w = 1.0f, v = 0.0f, g1 = 0.5f, g2 = -0.25f;
    sdgp_sgd_update(&w, &v, &g1, 1, 0.1f, 0.9f, 0.01f, 0);
    sdgp_sgd_update(&w, &v, &g2, 1, 0.1f, 0.9f, 0.01f, 0);
    CHECK(fabsf(w - 0.927151f) < 1e-6f && fabsf(v - 0.21849f) < 1e-6f, "hand values: w %.7f v %.7f", w, v);
    /* momentum 0: plain SGD with weight decay, v untouched (may be NULL) */
    w = 2.0f;
    sdgp_sgd_update(&w, NULL, &g1, 1, 0.5f, 0.0f, 0.1f, 0);
    CHECK(fabsf(w - (2.0f - 0.5f * (0.5f + 0.2f))) < 1e-7f, "momentum 0: w %.7f", w);
}

/* ================= schedules ================= */

TEST_CASE(schedules_at_known_points) {
    sdgp_schedule r = {SDGP_SCHED_REFERENCE, 0.5f, 1e-4f, 100, 1100, 0, 0};
    CHECK(fabsf(sdgp_schedule_lr(&r, 0) - 0.5f * 1e-4f) < 1e-9f, "reference start %g", sdgp_schedule_lr(&r, 0));
    CHECK(fabsf(sdgp_schedule_lr(&r, 50) - 0.5f * (1e-4f + (1 - 1e-4f) * 0.5f)) < 1e-7f, "reference mid warm-up");
    CHECK(fabsf(sdgp_schedule_lr(&r, 100) - 0.5f) < 1e-7f, "reference peak %g", sdgp_schedule_lr(&r, 100));
    CHECK(fabsf(sdgp_schedule_lr(&r, 600) - 0.25f) < 1e-7f, "reference half-way down %g", sdgp_schedule_lr(&r, 600));
    CHECK(fabsf(sdgp_schedule_lr(&r, 1099) - 0.0005f) < 1e-7f, "reference last step %g", sdgp_schedule_lr(&r, 1099));
    CHECK(sdgp_schedule_lr(&r, 1100) == 0.0f && sdgp_schedule_lr(&r, 5000) == 0.0f, "reference end");
    CHECK(sdgp_schedule_lr(&r, -5) == sdgp_schedule_lr(&r, 0), "negative step counts as 0");

    sdgp_schedule c = {SDGP_SCHED_COSINE, 1.0f, 0.1f, 10, 110, 0, 0};
    CHECK(fabsf(sdgp_schedule_lr(&c, 0) - 0.1f) < 1e-7f, "cosine start");
    CHECK(fabsf(sdgp_schedule_lr(&c, 10) - 1.0f) < 1e-7f, "cosine peak");
    CHECK(fabsf(sdgp_schedule_lr(&c, 60) - 0.5f) < 1e-6f, "cosine middle %g", sdgp_schedule_lr(&c, 60));
    CHECK(fabsf(sdgp_schedule_lr(&c, 35) - (float)((1 + cos(M_PI * 0.25)) / 2)) < 1e-6f, "cosine quarter");
    CHECK(sdgp_schedule_lr(&c, 110) == 0.0f, "cosine end");

    sdgp_schedule s = {SDGP_SCHED_STEP, 0.1f, 0, 0, 1000, 30, 0.5f};
    CHECK(sdgp_schedule_lr(&s, 0) == 0.1f && sdgp_schedule_lr(&s, 29) == 0.1f, "step first period");
    CHECK(fabsf(sdgp_schedule_lr(&s, 30) - 0.05f) < 1e-8f && fabsf(sdgp_schedule_lr(&s, 95) - 0.0125f) < 1e-8f,
          "step decays");
    sdgp_schedule k = {SDGP_SCHED_CONSTANT, 0.3f, 0, 0, 10, 0, 0};
    CHECK(sdgp_schedule_lr(&k, 0) == 0.3f && sdgp_schedule_lr(&k, 1000) == 0.3f, "constant");
    sdgp_schedule nw = {SDGP_SCHED_REFERENCE, 0.4f, 1e-4f, 0, 10, 0, 0}; /* no warm-up */
    CHECK(sdgp_schedule_lr(&nw, 0) == 0.4f && fabsf(sdgp_schedule_lr(&nw, 5) - 0.2f) < 1e-7f, "no warm-up");
}

/* S-STE / SR-STE projections on groups worked out by hand (docs/sparse-weights.md), ties included. */
TEST_CASE(sparse_weights_by_hand) {
    /* TAP, 2:4, one output channel, 4 input channels, 1 tap: |1| = |-1| = |1| tie for the two places;
     * the lower channels win; t = 1 (the third largest), so S-STE shrinks both kept ones to 0. */
    const float w[4] = {1.0f, -1.0f, 1.0f, 0.5f};
    float s[4], r[4];
    sdgp_weights_project(s, w, 1, 4, 1, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_TAP, 2, 4, 1.0f);
    sdgp_weights_project(r, w, 1, 4, 1, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_TAP, 2, 4, 1.0f);
    CHECK(s[0] == 0 && s[1] == 0 && s[2] == 0 && s[3] == 0, "S-STE of a tie: %g %g %g %g", s[0], s[1], s[2], s[3]);
    CHECK(r[0] == 1 && r[1] == -1 && r[2] == 0 && r[3] == 0, "SR-STE keeps the lower of tied channels");
    CHECK(sdgp_weights_sste_beta(w, s, 4) == 1.0, "beta of an all-zero projection is 1");

    /* TAP with 2 taps: each tap has its own group. Tap 0: {4, -3, 2, 1}: keep 4, -3; t = 2 -> {2, -1, 0, 0}.
     * Tap 1: {0.5, -2, 1, 3}: keep 3, -2; t = 1 -> {0, -1, 0, 2}. Scale 2. */
    const float w2[8] = {4, 0.5f, -3, -2, 2, 1, 1, 3}; /* cin x taps */
    const float want2[8] = {4, 0, -2, -2, 0, 0, 0, 4};
    float s2[8];
    sdgp_weights_project(s2, w2, 1, 4, 2, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_TAP, 2, 4, 2.0f);
    CHECK(test_bitwise_equal(s2, want2, sizeof s2), "S-STE per tap, scaled");
    /* COUT is TAP along the other axis: 4 output channels x 1 input channel x 2 taps in the same memory
     * (tap 0 over the output channels {4, -3, 2, 1}, tap 1 {0.5, -2, 1, 3}) gives the same numbers */
    sdgp_weights_project(s2, w2, 4, 1, 2, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_COUT, 2, 4, 2.0f);
    CHECK(test_bitwise_equal(s2, want2, sizeof s2), "S-STE per (input channel, tap) along output channels");

    /* KERNEL, 2 taps: units (3,4) |5|, (0,1) |1|, (1,0) |1|, (0,2) |2|: keep units 0 and 3, t = 1:
     * (3,4)(1 - 1/5) = (2.4, 3.2) and (0,2)(1 - 1/2) = (0, 1). beta = <w,s>/<s,s> = 22/17. */
    const float k[8] = {3, 4, 0, 1, 1, 0, 0, 2};
    float sk[8], rk[8];
    sdgp_weights_project(sk, k, 1, 4, 2, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_KERNEL, 2, 4, 1.0f);
    const float wantk[8] = {2.4f, 3.2f, 0, 0, 0, 0, 0, 1};
    CHECK(test_rel_err(sk, wantk, 8) < 1e-6, "S-STE per kernel: %g %g .. %g", sk[0], sk[1], sk[7]);
    CHECK(fabs(sdgp_weights_sste_beta(k, sk, 8) - 22.0 / 17.0) < 1e-6, "beta %g", sdgp_weights_sste_beta(k, sk, 8));
    sdgp_weights_project(rk, k, 1, 4, 2, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_KERNEL, 2, 4, 1.0f);
    const float wantr[8] = {3, 4, 0, 0, 0, 0, 0, 2};
    CHECK(test_bitwise_equal(rk, wantr, sizeof rk), "SR-STE per kernel keeps whole kernels");
    float g[8] = {0};
    sdgp_weights_srste_grad(g, k, rk, 8, 0.5f);
    const float wantg[8] = {0, 0, 0, 0.5f, 0.5f, 0, 0, 0};
    CHECK(test_bitwise_equal(g, wantg, sizeof g), "SR-STE term: lambda (1 - mask) w");

    /* a NaN weight ranks first and stays NaN in both forms (the trainer's checks then see it) */
    const float wn[4] = {1.0f, NAN, 0.5f, 0.25f};
    float sn[4];
    sdgp_weights_project(sn, wn, 1, 4, 1, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_TAP, 2, 4, 1.0f);
    CHECK(isnan(sn[1]) && sn[0] == 0.5f && sn[2] == 0 && sn[3] == 0, "NaN, tap: %g %g %g %g", sn[0], sn[1], sn[2], sn[3]);
    sdgp_weights_project(sn, wn, 1, 4, 1, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_KERNEL, 2, 4, 1.0f);
    CHECK(isnan(sn[1]), "NaN, kernel");

    /* BLOCK16: 17 output channels = a block of 16 and a block of 1, 4 input channels, 1 tap. Channel 0
     * prefers inputs 0 and 3 ({10, .1, .1, .2}), the other 16 inputs 1 and 2 ({.1, 1, 1.5, .1}). Block 0's
     * sizes: sqrt(100.15), sqrt(15.01), sqrt(33.76), sqrt(0.19): all 16 keep inputs 0 and 2, t = sqrt(15.01),
     * so channel 0 loses its input 3 to the block. Block 1 (channel 16 alone) is the kernel form: inputs 1
     * and 2, t = 0.1. */
    float wb[17 * 4], sb[17 * 4], rb[17 * 4], wantsb[17 * 4], wantrb[17 * 4];
    for (int co = 0; co < 17; co++) {
        const float row0[4] = {10, 0.1f, 0.1f, 0.2f}, row[4] = {0.1f, 1, 1.5f, 0.1f};
        memcpy(wb + 4 * co, co == 0 ? row0 : row, sizeof row);
    }
    sdgp_weights_project(sb, wb, 17, 4, 1, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_BLOCK16, 2, 4, 1.0f);
    sdgp_weights_project(rb, wb, 17, 4, 1, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_BLOCK16, 2, 4, 1.0f);
    double t0 = sqrt(15.0 * 1.0 + 0.1f * 0.1f), s0 = sqrt(100.0 + 15.0 * (0.1f * 0.1f)), s2b = sqrt(15.0 * 2.25 + 0.1f * 0.1f);
    for (int co = 0; co < 17; co++)
        for (int i = 0; i < 4; i++) {
            int kept = co < 16 ? (i == 0 || i == 2) : (i == 1 || i == 2);
            double size = co < 16 ? (i == 0 ? s0 : s2b) : (i == 1 ? 1.0 : 1.5), t = co < 16 ? t0 : 0.1f;
            wantrb[4 * co + i] = kept ? wb[4 * co + i] : 0.0f;
            wantsb[4 * co + i] = kept ? (float)(wb[4 * co + i] * (1.0 - t / size)) : 0.0f;
        }
    CHECK(test_bitwise_equal(rb, wantrb, sizeof rb), "SR-STE per block of 16: one mask for the block");
    CHECK(test_rel_err(sb, wantsb, 17 * 4) < 1e-5, "S-STE per block of 16: %g %g %g %g / %g", sb[0], sb[1], sb[2], sb[3], sb[64 + 1]);
    /* BLOCK32: all 17 channels are one block, sizes sqrt(100.16), sqrt(16.01), sqrt(36.01), sqrt(0.2): inputs 0
     * and 2 for every channel, channel 16 included (it kept 1 and 2 in its own block above) */
    sdgp_weights_project(rb, wb, 17, 4, 1, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_BLOCK32, 2, 4, 1.0f);
    for (int co = 0; co < 17; co++)
        for (int i = 0; i < 4; i++) wantrb[4 * co + i] = i == 0 || i == 2 ? wb[4 * co + i] : 0.0f;
    CHECK(test_bitwise_equal(rb, wantrb, sizeof rb), "SR-STE per block of 32: channel 16 joins block 0's mask");

    /* n == m and DENSE: the weights times the scale */
    float id[8];
    sdgp_weights_project(id, k, 1, 4, 2, SDGP_WEIGHTS_SSTE, SDGP_WGROUP_KERNEL, 4, 4, 1.0f);
    CHECK(test_bitwise_equal(id, k, sizeof id), "4:4 keeps everything");
}

/* Random weights: exactly n of every m are nonzero, S-STE never grows a weight, and any thread
 * count gives the same bits. */
TEST_CASE(sparse_weights_counts_and_threads) {
    const int cout = 64, cin = 96, taps = 9;
    size_t count = (size_t)cout * cin * taps;
    float *w = test_xmalloc(count * sizeof(float)), *a = test_xmalloc(count * sizeof(float)),
          *b = test_xmalloc(count * sizeof(float));
    test_fill_normal(w, count, 11);
    for (int group = SDGP_WGROUP_TAP; group <= SDGP_WGROUP_COUT; group++)
        for (int kind = SDGP_WEIGHTS_SSTE; kind <= SDGP_WEIGHTS_SRSTE; kind++) {
            omp_set_num_threads(1);
            sdgp_weights_project(a, w, cout, cin, taps, kind, group, 4, 32, 1.0f);
            omp_set_num_threads(2);
            sdgp_weights_project(b, w, cout, cin, taps, kind, group, 4, 32, 1.0f);
            CHECK(test_bitwise_equal(a, b, count * sizeof(float)), "%s/%s: 1 vs 2 threads", sdgp_weights_kind_names[kind],
                  sdgp_weights_group_names[group]);
            /* a group: 32 consecutive input channels at (co, t), or for COUT 32 output channels at (ci, t) */
            int along_cout = group == SDGP_WGROUP_COUT, other = along_cout ? cin : cout, along = along_cout ? cout : cin;
            size_t bad = 0, grown = 0;
            for (int o = 0; o < other; o++)
                for (int t = 0; t < taps; t++)
                    for (int g0 = 0; g0 < along; g0 += 32) {
                        int nz = 0;
                        for (int i = g0; i < g0 + 32; i++) {
                            size_t at = (along_cout ? (size_t)i * cin + o : (size_t)o * cin + i) * taps + t;
                            nz += a[at] != 0;
                            grown += fabsf(a[at]) > fabsf(w[at]) || (a[at] != 0 && (a[at] > 0) != (w[at] > 0));
                        }
                        /* S-STE: the n kept are nonzero unless tied with t (not with random normals) */
                        bad += nz != 4;
                    }
            CHECK(bad == 0, "%s/%s: %zu groups without exactly 4 of 32", sdgp_weights_kind_names[kind],
                  sdgp_weights_group_names[group], bad);
            CHECK(grown == 0, "%s/%s: %zu weights grew or flipped sign", sdgp_weights_kind_names[kind],
                  sdgp_weights_group_names[group], grown);
        }
    free(w), free(a), free(b);
}

/* The projection against a plain oracle of its rule, bit for bit: per group the n largest |w| kept
 * (ties: the lower index; NaN the largest, NaNs tied), t = the (n+1)-th largest |w|, S-STE
 * sign(w) max(|w| - t, 0) (NaN kept as it is), SR-STE w, times the scale, 0 elsewhere. Weights drawn
 * from a small set, so groups are full of ties, with +-0, +-inf, NaNs of three payloads and denormals; per-tap (taps 9
 * and 1) and cout groups, whole and partial batches of groups, every n:m below. */
static void project_oracle(float *out, const float *w, size_t stride, int n, int m, int sste, float scale) {
    int keep[64] = {0};
    float t = 0;
    for (int pass = 0; pass <= n; pass++) {
        int best = -1;
        for (int i = 0; i < m; i++) {
            if (keep[i]) continue;
            float a = fabsf(w[i * stride]), b = best < 0 ? 0 : fabsf(w[best * stride]);
            if (best < 0 || (isnan(a) && !isnan(b)) || (!isnan(b) && a > b)) best = i;
        }
        if (pass == n) t = fabsf(w[best * stride]);
        else keep[best] = 1;
    }
    for (int i = 0; i < m; i++) {
        float v = w[i * stride], kept = !keep[i] ? 0.0f : !sste || isnan(v) ? v : copysignf(fmaxf(fabsf(v) - t, 0.0f), v);
        out[i * stride] = scale * kept;
    }
}

TEST_CASE(sparse_weights_match_oracle_bitwise) {
    float pool[] = {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 2.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY, NAN, 3.0f, 0, 0};
    const uint32_t payloads[2] = {0x7fc12345u, 0xffc00001u}; /* NaNs with other payloads and sign: they tie with NAN */
    memcpy(&pool[13], &payloads[0], sizeof(float));
    memcpy(&pool[14], &payloads[1], sizeof(float));
    static const int nm[][2] = {{1, 4}, {2, 4}, {3, 4}, {1, 2}, {2, 8}, {5, 8}};
    static const int shapes[][3] = {{3, 8, 9}, {2, 16, 1}, {8, 3, 3}, {12, 1, 5}}; /* cout, cin, taps */
    uint64_t r = 99;
    size_t bad = 0, checked = 0;
    for (size_t q = 0; q < sizeof nm / sizeof *nm; q++)
        for (size_t sh = 0; sh < sizeof shapes / sizeof *shapes; sh++)
            for (int group = SDGP_WGROUP_TAP; group <= SDGP_WGROUP_COUT; group += SDGP_WGROUP_COUT - SDGP_WGROUP_TAP)
                for (int kind = SDGP_WEIGHTS_SSTE; kind <= SDGP_WEIGHTS_SRSTE; kind++) {
                    const int n = nm[q][0], m = nm[q][1], cout = shapes[sh][0] * (group == SDGP_WGROUP_COUT ? m : 1),
                              cin = shapes[sh][1] * (group == SDGP_WGROUP_TAP ? m : 1), taps = shapes[sh][2];
                    const size_t count = (size_t)cout * cin * taps, per_out = (size_t)cin * taps;
                    float *w = test_xmalloc(count * sizeof(float)), *got = test_xmalloc(count * sizeof(float)),
                          *want = test_xmalloc(count * sizeof(float));
                    for (size_t i = 0; i < count; i++) {
                        r = r * 6364136223846793005ull + 1442695040888963407ull;
                        w[i] = (r >> 60) < 4 ? (float)((int64_t)(r >> 40) - (1 << 23)) / 65536.0f
                                             : pool[(r >> 33) % (sizeof pool / sizeof *pool)];
                    }
                    sdgp_weights_project(got, w, cout, cin, taps, kind, group, n, m, 1.25f);
                    if (group == SDGP_WGROUP_TAP) {
                        for (int co = 0; co < cout; co++)
                            for (int g = 0; g < cin; g += m)
                                for (int t = 0; t < taps; t++) {
                                    size_t at = (size_t)co * per_out + (size_t)g * taps + t;
                                    project_oracle(want + at, w + at, (size_t)taps, n, m, kind == SDGP_WEIGHTS_SSTE, 1.25f);
                                }
                    } else {
                        for (int g = 0; g < cout; g += m)
                            for (size_t at = (size_t)g * per_out; at < (size_t)(g + 1) * per_out; at++)
                                project_oracle(want + at, w + at, per_out, n, m, kind == SDGP_WEIGHTS_SSTE, 1.25f);
                    }
                    bad += !test_bitwise_equal(got, want, count * sizeof(float));
                    checked++;
                    free(w), free(got), free(want);
                }
    CHECK(bad == 0 && checked == 96, "%zu of %zu projections differ from the oracle's bits", bad, checked);
}

int main(void) {
    RUN(batchnorm_train_matches_naive);
    RUN(batchnorm_eval_matches_naive);
    RUN(batchnorm_relu_eval_equals_unfused);
    RUN(batchnorm_backward_finite_differences);
    RUN(batchnorm_bitwise_independent_of_threads);
    RUN(batchnorm_sum_order_independent_of_threads);
    RUN(relu_forward_backward);
    RUN(elementwise_ops);
    RUN(maxpool2_forward_backward);
    RUN(maxpool2_ties_first_wins);
    RUN(global_maxpool_forward_backward);
    RUN(linear_forward_backward);
    RUN(softmax_xent_values_and_gradient);
    RUN(linear_and_pool_bitwise_independent_of_threads);
    RUN(sgd_two_steps_by_hand);
    RUN(schedules_at_known_points);
    RUN(sparse_weights_by_hand);
    RUN(sparse_weights_counts_and_threads);
    RUN(sparse_weights_match_oracle_bitwise);
    return test_finish();
}
