/* The dense convolution's WINOGRAD by sdgp's own kernels (src/nn/conv_sdgp_wino.c), forced on
 * every machine with SDGP_WINOGRAD=sdgp: the three passes against the naive loops (padding 0-2, odd
 * sizes, channel counts off the blocks, bias), bitwise the same for every thread count, every ISA
 * path and a shared, poisoned workspace; the backward passes against finite differences of the
 * forward; which implementation serves WINOGRAD and AUTO, under SDGP_WINOGRAD and a workspace
 * limit, and in a model's measured and given per-pass choices; and the errors. */
#include <stdlib.h>

#include "conv_util.h"
#include "model_util.h"
#include "sdgp/isa.h"

static const sdgp_conv_algo D = SDGP_CONV_DIRECT, W = SDGP_CONV_WINOGRAD, A = SDGP_CONV_AUTO;

typedef struct {
    size_t nx, ny, nw;
    float *x, *w, *b, *dy;
} operands;

/* What run_wino computes: the forward, and the three gradients. */
typedef struct {
    float *y, *dx, *dw, *db;
} results;

static results make_results(const operands *o, int Cout) {
    results r = {test_xmalloc(o->ny * 4), test_xmalloc(o->nx * 4), test_xmalloc(o->nw * 4),
                 test_xmalloc((size_t)Cout * 4)};
    return r;
}

static void free_results(results *r) { free(r->y), free(r->dx), free(r->dw), free(r->db); }

static int results_bitwise_equal(const results *a, const results *b, const operands *o, int Cout, int bias) {
    return test_bitwise_equal(a->y, b->y, o->ny * 4) && test_bitwise_equal(a->dx, b->dx, o->nx * 4) &&
           test_bitwise_equal(a->dw, b->dw, o->nw * 4) && (!bias || test_bitwise_equal(a->db, b->db, (size_t)Cout * 4));
}

static operands make_operands(const sdgp_conv_geom *g, uint64_t seed) {
    operands o = {(size_t)g->B * g->H * g->W * g->Cin, (size_t)g->B * g->Ho * g->Wo * g->Cout,
                  (size_t)g->Cout * g->Cin * g->kh * g->kw, NULL, NULL, NULL, NULL};
    o.x = test_xmalloc(o.nx * 4), o.w = test_xmalloc(o.nw * 4), o.dy = test_xmalloc(o.ny * 4);
    o.b = test_xmalloc((size_t)g->Cout * 4);
    test_fill_normal(o.x, o.nx, seed), test_fill_normal(o.w, o.nw, seed + 1), test_fill_normal(o.dy, o.ny, seed + 2);
    test_fill_normal(o.b, (size_t)g->Cout, seed + 3);
    return o;
}

static void free_operands(operands *o) { free(o->x), free(o->w), free(o->b), free(o->dy); }

static sdgp_status plan_auto(const sdgp_conv_geom *g, sdgp_conv_algo algo, size_t limit, const char *impl[3],
                             sdgp_conv_algo got[3], sdgp_error *err);

/* The three passes of a conv with WINOGRAD everywhere (bias when b) on o. */
static void run_wino(const sdgp_conv_geom *g, int threads, const operands *o, int bias, results *r) {
    const sdgp_conv_algo algos[3] = {W, W, W};
    sdgp_conv *c = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_conv_create_passes(&c, g, bias, threads, algos, NULL, &err);
    REQUIRE(st == SDGP_OK, "create: %s", err.msg);
    for (int p = 0; p < 3; p++) {
        sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)p);
        CHECK(pl.algo == W && !strcmp(pl.impl, "sdgp") && pl.chunk == g->B && pl.parts == 1 &&
                  pl.workspace_bytes >= (size_t)36 * g->Cin * g->Cout * 4,
              "pass %d: %s by %s, %zu bytes", p, sdgp_conv_algo_name(pl.algo), pl.impl, pl.workspace_bytes);
    }
    CHECK(sdgp_conv_forward(c, r->y, o->x, o->w, bias ? o->b : NULL, &err) == SDGP_OK, "forward: %s", err.msg);
    CHECK(sdgp_conv_backward_data(c, r->dx, o->dy, o->w, &err) == SDGP_OK, "backward-data: %s", err.msg);
    CHECK(sdgp_conv_backward_weights(c, r->dw, bias ? r->db : NULL, o->x, o->dy, &err) == SDGP_OK,
          "backward-weights: %s", err.msg);
    sdgp_conv_destroy(c);
}

TEST_CASE(sdgp_wino_matches_naive_and_repeats_bitwise) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    const int shapes[][8] = {
        /* B  H  W Cin Cout pad k stride */
        {2, 9, 7, 16, 16, 1, 3, 1}, {3, 6, 5, 32, 48, 0, 3, 1}, {1, 14, 14, 64, 32, 1, 3, 1}, {2, 4, 4, 24, 40, 2, 3, 1},
        {2, 1, 1, 8, 8, 1, 3, 1},   {1, 2, 3, 12, 20, 1, 3, 1}, {4, 7, 7, 128, 64, 1, 3, 1}, {8, 2, 2, 512, 512, 1, 3, 1},
        {8, 4, 4, 256, 256, 1, 3, 1}, {37, 7, 7, 16, 24, 1, 3, 1}, {19, 14, 14, 16, 16, 1, 3, 1}, {64, 16, 16, 32, 32, 1, 3, 1},
        /* 5x5 stride 2 by space-to-depth: even and odd sizes, channel quarters off the 32-column
         * blocks (12 -> 48 input channels of the 3x3 conv), ResNet-9's layer 1 (w0.25 and w1) */
        {2, 10, 10, 8, 16, 2, 5, 2}, {3, 9, 7, 12, 20, 2, 5, 2}, {2, 28, 28, 32, 64, 2, 5, 2}, {1, 5, 6, 40, 8, 2, 5, 2},
        {2, 32, 32, 128, 256, 2, 5, 2}, {1, 1, 2, 16, 16, 2, 5, 2}, {8, 16, 16, 32, 64, 2, 5, 2},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        sdgp_conv_geom g = test_conv_geom(s[0], s[1], s[2], s[3], s[4], s[6], s[7], s[5]);
        operands o = make_operands(&g, 10 * t + 1);
        float *y_ref = test_xmalloc(o.ny * 4), *dx_ref = test_xmalloc(o.nx * 4), *dw_ref = test_xmalloc(o.nw * 4);
        double *db_ref = calloc((size_t)g.Cout, sizeof(double));
        results r[3];
        for (int k = 0; k < 3; k++) r[k] = make_results(&o, g.Cout);
        const int bias = (int)(t % 2);
        sdgp_conv_forward_naive(y_ref, o.x, o.w, &g);
        for (size_t i = 0; bias && i < o.ny; i++) y_ref[i] += o.b[i % (size_t)g.Cout];
        sdgp_conv_backward_data_naive(dx_ref, o.dy, o.w, &g);
        test_wgrad_naive(dw_ref, o.x, o.dy, &g);
        for (size_t i = 0; i < o.ny; i++) db_ref[i % (size_t)g.Cout] += o.dy[i];
        for (int th = 1; th <= 3; th++) run_wino(&g, th, &o, bias, &r[th - 1]);
        double ey = test_rel_err(r[0].y, y_ref, o.ny), ex = test_rel_err(r[0].dx, dx_ref, o.nx);
        double ew = test_rel_err(r[0].dw, dw_ref, o.nw), eb = 0;
        for (int k = 0; bias && k < g.Cout; k++) eb = fmax(eb, fabs(r[0].db[k] - db_ref[k]) / (1 + fabs(db_ref[k])));
        if (getenv("SDGP_TEST_VERBOSE"))
            printf("  shape %zu: rel err forward %.2e, backward-data %.2e, backward-weights %.2e, bias %.2e\n", t, ey, ex,
                   ew, eb);
        /* the weight gradient sums each element over every tile of the batch (1024 at 64 x 16x16) */
        CHECK(ey < 2e-5 && ex < 2e-5 && ew < 5e-5 && eb < 1e-6,
              "shape %zu (bias %d): rel err forward %.2e, backward-data %.2e, backward-weights %.2e, bias %.2e", t, bias,
              ey, ex, ew, eb);
        for (int th = 2; th <= 3; th++)
            CHECK(results_bitwise_equal(&r[0], &r[th - 1], &o, g.Cout, bias), "shape %zu: %d threads differ from 1", t, th);
        /* every ISA path this CPU runs gives the reference path's bits */
        setenv("SDGP_ISA", "ref", 1);
        run_wino(&g, 2, &o, bias, &r[1]);
        unsetenv("SDGP_ISA");
        CHECK(results_bitwise_equal(&r[0], &r[1], &o, g.Cout, bias), "shape %zu: the ref path differs from the best", t);
        free_operands(&o);
        free(y_ref), free(dx_ref), free(dw_ref), free(db_ref);
        for (int k = 0; k < 3; k++) free_results(&r[k]);
    }
    unsetenv("SDGP_WINOGRAD");
}

/* Each image's result does not depend on the batch around it: a conv over the first images of a
 * batch gives their rows of the whole batch's result, bitwise (data-parallel ranks, which each
 * run a part of the batch, then compute what one process does). */
TEST_CASE(sdgp_wino_images_independent_of_the_batch) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    const int shapes[][3] = {{64, 14, 16}, {64, 7, 32}, {37, 16, 8}, {37, 16, 40}};
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int B = shapes[t][0], H = shapes[t][1], C = shapes[t][2];
        const sdgp_conv_geom g = test_conv_geom(B, H, H, C, C, 3, 1, 1), h = test_conv_geom(B / 2, H, H, C, C, 3, 1, 1);
        operands o = make_operands(&g, 60 + t);
        const size_t part = o.nx / (size_t)B * (size_t)(B / 2); /* floats of B / 2 images (x, y alike here) */
        results r = make_results(&o, C), rh = make_results(&o, C);
        for (int th = 1; th <= 2; th++) {
            run_wino(&g, th, &o, 0, &r);
            run_wino(&h, 3 - th, &o, 0, &rh);
            CHECK(test_bitwise_equal(r.y, rh.y, part * 4) && test_bitwise_equal(r.dx, rh.dx, part * 4),
                  "B=%d %dx%d x%d: the first %d images differ from the whole batch's (rel err %.2g, %.2g)", B, H, H, C,
                  B / 2, test_rel_err(rh.y, r.y, part), test_rel_err(rh.dx, r.dx, part));
        }
        free_operands(&o);
        free_results(&r), free_results(&rh);
    }
    unsetenv("SDGP_WINOGRAD");
}

/* Every call packs the caller's weights: new weights give the new product, and convs sharing a
 * workspace that is poisoned between calls give the bits of convs with their own (the weight
 * gradient's M and tiles live there too, and a space-to-depth conv's rearranged weights). */
TEST_CASE(sdgp_wino_shared_workspace_and_new_weights) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    enum { N = 3 };
    const sdgp_conv_geom g[N] = {test_conv_geom(2, 8, 8, 32, 64, 3, 1, 1), test_conv_geom(3, 5, 6, 64, 16, 3, 1, 0),
                                 test_conv_geom(2, 9, 10, 8, 16, 5, 2, 2)};
    const sdgp_conv_algo algos[3] = {W, W, W};
    sdgp_conv *own[N], *shared[N];
    size_t ws_bytes = 0;
    sdgp_error err;
    for (int i = 0; i < N; i++) {
        sdgp_status st = sdgp_conv_create_passes(&own[i], &g[i], 0, 2, algos, NULL, &err);
        REQUIRE(st == SDGP_OK, "%s", err.msg);
        st = sdgp_conv_create_passes(&shared[i], &g[i], 0, 2, algos, NULL, &err);
        REQUIRE(st == SDGP_OK, "%s", err.msg);
        if (sdgp_conv_workspace_bytes(own[i]) > ws_bytes) ws_bytes = sdgp_conv_workspace_bytes(own[i]);
    }
    unsigned char *ws = aligned_alloc(64, ws_bytes);
    REQUIRE(ws != NULL, "workspace");
    for (int i = 0; i < N; i++) CHECK(sdgp_conv_set_workspace(shared[i], ws, &err) == SDGP_OK, "%s", err.msg);
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < N; i++) {
            operands o = make_operands(&g[i], 100 + 10 * (uint64_t)round + (uint64_t)i);
            results a = make_results(&o, g[i].Cout), b = make_results(&o, g[i].Cout);
            float *ref = test_xmalloc(o.ny * 4), *dw_ref = test_xmalloc(o.nw * 4);
            CHECK(sdgp_conv_forward(own[i], a.y, o.x, o.w, NULL, &err) == SDGP_OK, "%s", err.msg);
            CHECK(sdgp_conv_backward_data(own[i], a.dx, o.dy, o.w, &err) == SDGP_OK, "%s", err.msg);
            CHECK(sdgp_conv_backward_weights(own[i], a.dw, NULL, o.x, o.dy, &err) == SDGP_OK, "%s", err.msg);
            memset(ws, 0xff, ws_bytes); /* NaNs everywhere */
            CHECK(sdgp_conv_forward(shared[i], b.y, o.x, o.w, NULL, &err) == SDGP_OK, "%s", err.msg);
            memset(ws, 0xff, ws_bytes);
            CHECK(sdgp_conv_backward_data(shared[i], b.dx, o.dy, o.w, &err) == SDGP_OK, "%s", err.msg);
            memset(ws, 0xff, ws_bytes);
            CHECK(sdgp_conv_backward_weights(shared[i], b.dw, NULL, o.x, o.dy, &err) == SDGP_OK, "%s", err.msg);
            CHECK(results_bitwise_equal(&a, &b, &o, g[i].Cout, 0),
                  "round %d conv %d: the shared workspace changes the result", round, i);
            sdgp_conv_forward_naive(ref, o.x, o.w, &g[i]);
            test_wgrad_naive(dw_ref, o.x, o.dy, &g[i]);
            CHECK(test_rel_err(a.y, ref, o.ny) < 2e-5 && test_rel_err(a.dw, dw_ref, o.nw) < 2e-5,
                  "round %d conv %d: the operands of this round", round, i);
            free_operands(&o);
            free_results(&a), free_results(&b), free(ref), free(dw_ref);
        }
    for (int i = 0; i < N; i++) sdgp_conv_destroy(own[i]), sdgp_conv_destroy(shared[i]);
    free(ws);
    unsetenv("SDGP_WINOGRAD");
}

/* The weight gradient takes the batch in chunks that fit a workspace limit; each element of its sums
 * continues one FMA chain across chunks, so any chunking gives the bits of one chunk. AUTO's rule
 * is the implementation's: sdgp's kernels run layers with a third of their tile outputs used (7x7 ->
 * 5x5), not fewer (3x3 -> 1x1). */
TEST_CASE(sdgp_wino_wgrad_chunks_and_auto_rule) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    const sdgp_conv_geom g = test_conv_geom(37, 14, 14, 64, 64, 3, 1, 1);
    const sdgp_conv_algo wgrad[3] = {D, D, W};
    const size_t limit = 2u << 20, m_bytes = (size_t)36 * 64 * 64 * 4;
    operands o = make_operands(&g, 77);
    float *dw[2] = {test_xmalloc(o.nw * 4), test_xmalloc(o.nw * 4)}, *ref = test_xmalloc(o.nw * 4);
    sdgp_error err;
    for (int k = 0; k < 2; k++) {
        const sdgp_conv_options opt = {D, k ? limit : 0};
        sdgp_conv *c = NULL;
        REQUIRE(sdgp_conv_create_passes(&c, &g, 0, 2, wgrad, &opt, &err) == SDGP_OK, "%s", err.msg);
        const sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, SDGP_CONV_BACKWARD_WEIGHTS);
        CHECK(!strcmp(pl.impl, "sdgp") && pl.workspace_bytes > m_bytes && (k ? pl.workspace_bytes <= limit : 1),
              "limit %d: %s, %zu bytes", k, pl.impl, pl.workspace_bytes);
        CHECK(sdgp_conv_backward_weights(c, dw[k], NULL, o.x, o.dy, &err) == SDGP_OK, "%s", err.msg);
        sdgp_conv_destroy(c);
    }
    test_wgrad_naive(ref, o.x, o.dy, &g);
    CHECK(test_bitwise_equal(dw[0], dw[1], o.nw * 4), "chunks of the batch change the bits");
    CHECK(test_rel_err(dw[1], ref, o.nw) < 2e-5, "chunked: rel err %.2e", test_rel_err(dw[1], ref, o.nw));
    /* a limit under M alone: AUTO runs the pass direct */
    const char *impl[3];
    sdgp_conv_algo got[3];
    REQUIRE(plan_auto(&g, A, m_bytes / 2, impl, got, &err) == SDGP_OK, "%s", err.msg);
    CHECK(got[2] == D, "auto, limit under M: %s", sdgp_conv_algo_name(got[2]));
    /* a 5x5 stride-2 conv's weight gradient by space-to-depth: its chunks leave room in the limit for
     * the 3x3 conv's weight gradient, which the workspace holds too */
    const sdgp_conv_geom g_s2d = test_conv_geom(9, 14, 14, 32, 64, 5, 2, 2);
    const size_t s2d_w_bytes = (size_t)64 * 4 * 32 * 9 * 4, m_s2d = (size_t)36 * 4 * 32 * 64 * 4;
    for (int k = 0; k < 2; k++) {
        const sdgp_conv_options opt = {D, k ? m_s2d + s2d_w_bytes + (256u << 10) : 0};
        sdgp_conv *c = NULL;
        REQUIRE(sdgp_conv_create_passes(&c, &g_s2d, 0, 2, wgrad, &opt, &err) == SDGP_OK, "%s", err.msg);
        const sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, SDGP_CONV_BACKWARD_WEIGHTS);
        CHECK(pl.algo == W && !strcmp(pl.impl, "sdgp") && pl.workspace_bytes > m_s2d + s2d_w_bytes &&
                  (k ? pl.workspace_bytes <= opt.workspace_limit : 1),
              "5x5 stride 2, limit %d: %s by %s, %zu bytes", k, sdgp_conv_algo_name(pl.algo), pl.impl,
              pl.workspace_bytes);
        sdgp_conv_destroy(c);
    }
    /* AUTO's tile rule for sdgp's kernels */
    const sdgp_conv_geom g5 = test_conv_geom(4, 7, 7, 32, 16, 3, 1, 0), g1 = test_conv_geom(4, 3, 3, 32, 16, 3, 1, 0);
    REQUIRE(plan_auto(&g5, A, 0, impl, got, &err) == SDGP_OK, "%s", err.msg);
    for (int p = 0; p < 3; p++)
        CHECK(got[p] == W && !strcmp(impl[p], "sdgp"), "7x7 -> 5x5, pass %d: %s/%s", p, sdgp_conv_algo_name(got[p]),
              impl[p]);
    REQUIRE(plan_auto(&g1, A, 0, impl, got, &err) == SDGP_OK, "%s", err.msg);
    CHECK(got[0] == D && got[1] == D && got[2] == D, "3x3 -> 1x1: direct");
    free_operands(&o);
    free(dw[0]), free(dw[1]), free(ref);
    unsetenv("SDGP_WINOGRAD");
}

/* L = sum dy * conv(x, w): the backward-data is dL/dx and the backward-weights dL/dw of the forward
 * (all sdgp's Winograd). */
typedef struct {
    sdgp_conv *c;
    const operands *o;
    float *y;
} fd_ctx;

static double fd_loss(void *vctx, const float *unused) {
    fd_ctx *f = vctx;
    (void)unused;
    if (sdgp_conv_forward(f->c, f->y, f->o->x, f->o->w, NULL, NULL) != SDGP_OK) return NAN;
    double L = 0;
    for (size_t k = 0; k < f->o->ny; k++) L += (double)f->o->dy[k] * f->y[k];
    return L;
}

TEST_CASE(sdgp_wino_backward_matches_finite_differences) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    const sdgp_conv_geom g = test_conv_geom(2, 6, 5, 8, 8, 3, 1, 1);
    const sdgp_conv_algo algos[3] = {W, W, W};
    operands o = make_operands(&g, 7);
    float *y = test_xmalloc(o.ny * 4), *dx = test_xmalloc(o.nx * 4), *dw = test_xmalloc(o.nw * 4);
    sdgp_conv *c = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_conv_create_passes(&c, &g, 0, 2, algos, NULL, &err);
    REQUIRE(st == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_conv_backward_data(c, dx, o.dy, o.w, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_conv_backward_weights(c, dw, NULL, o.x, o.dy, &err) == SDGP_OK, "%s", err.msg);
    fd_ctx f = {c, &o, y};
    double worst = 0, worst_w = 0;
    for (size_t i = 0; i < o.nx; i += 5) {
        double d = fabs(test_fd(fd_loss, &f, o.x, i, 1e-2f) - dx[i]);
        if (!(d <= worst)) worst = d;
    }
    for (size_t i = 0; i < o.nw; i += 3) {
        double d = fabs(test_fd(fd_loss, &f, o.w, i, 1e-2f) - dw[i]);
        if (!(d <= worst_w)) worst_w = d;
    }
    CHECK(worst < 2e-2 && worst_w < 2e-2, "vs finite differences: max abs diff dx %.3e, dw %.3e", worst, worst_w);
    sdgp_conv_destroy(c);
    free_operands(&o);
    free(y), free(dx), free(dw);
    unsetenv("SDGP_WINOGRAD");
}

/* The implementation of each pass under {AUTO x 3} (optionally a workspace limit), or the status. */
static sdgp_status plan_auto(const sdgp_conv_geom *g, sdgp_conv_algo algo, size_t limit, const char *impl[3],
                             sdgp_conv_algo got[3], sdgp_error *err) {
    const sdgp_conv_options opt = {algo, limit};
    sdgp_conv *c = NULL;
    sdgp_status st = sdgp_conv_create_opts(&c, g, 0, 2, &opt, err);
    for (int p = 0; st == SDGP_OK && p < 3; p++) {
        sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)p);
        got[p] = pl.algo, impl[p] = pl.impl;
    }
    sdgp_conv_destroy(c);
    return st;
}

TEST_CASE(sdgp_wino_choice_and_errors) {
    const int avx512 = sdgp_isa_supported(SDGP_ISA_AVX512);
    const sdgp_conv_geom g = test_conv_geom(2, 16, 16, 32, 32, 3, 1, 1);
    const char *impl[3];
    sdgp_conv_algo got[3];
    sdgp_error err;
    /* unset: oneDNN's where it has one (AVX-512), else sdgp's, in every pass */
    unsetenv("SDGP_WINOGRAD");
    REQUIRE(plan_auto(&g, A, 0, impl, got, &err) == SDGP_OK, "%s", err.msg);
    for (int p = 0; p < 3; p++)
        CHECK(got[p] == W && !strcmp(impl[p], avx512 ? "onednn" : "sdgp"), "auto, pass %d: %s/%s", p,
              sdgp_conv_algo_name(got[p]), impl[p]);
    /* sdgp first, even where oneDNN has a kernel */
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    REQUIRE(plan_auto(&g, A, 0, impl, got, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(impl[0], "sdgp") && !strcmp(impl[1], "sdgp") && !strcmp(impl[2], "sdgp"), "sdgp first");
    /* a limit under U and M: AUTO runs those passes direct, WINOGRAD exceeds it */
    REQUIRE(plan_auto(&g, A, 1024, impl, got, &err) == SDGP_OK, "%s", err.msg);
    CHECK(got[0] == D && got[1] == D && got[2] == D, "auto over the limit: direct");
    const sdgp_conv_algo fwd_only[3] = {W, D, D};
    const sdgp_conv_options lim = {D, 1024};
    sdgp_conv *c = NULL;
    REQUIRE(sdgp_conv_create_passes(&c, &g, 0, 2, fwd_only, &lim, &err) == SDGP_OK, "%s", err.msg);
    CHECK(!strcmp(sdgp_conv_get_plan(c, SDGP_CONV_FORWARD).impl, "sdgp"), "winograd over the limit: still sdgp's");
    sdgp_conv_destroy(c);
    /* 5x5 stride 2 with padding 2 by space-to-depth: sdgp's in every pass under WINOGRAD; under AUTO
     * the forward and backward-data only from 64 input channels on */
    sdgp_conv_geom g5 = test_conv_geom(2, 11, 10, 16, 32, 5, 2, 2), g5w = test_conv_geom(2, 11, 10, 64, 32, 5, 2, 2);
    for (int k = 0; k < 3; k++) {
        REQUIRE(plan_auto(k == 2 ? &g5w : &g5, k ? A : W, 0, impl, got, &err) == SDGP_OK, "5x5 stride 2: %s", err.msg);
        for (int p = 0; p < 3; p++) {
            const int wino = k != 1 || p == SDGP_CONV_BACKWARD_WEIGHTS;
            CHECK(!strcmp(impl[p], wino ? "sdgp" : "onednn") && got[p] == (wino ? W : D),
                  "5x5 stride 2 (case %d), pass %d: %s by %s", k, p, sdgp_conv_algo_name(got[p]), impl[p]);
        }
    }
    /* geometries neither implementation takes */
    sdgp_conv_geom gg = g;
    REQUIRE(sdgp_conv_geom_init(&g5, 2, 11, 10, 16, 32, 5, 5, 2, 1, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_conv_geom_set_groups(&gg, 2, &err) == SDGP_OK, "%s", err.msg);
    c = NULL;
    CHECK(sdgp_conv_create_passes(&c, &g5, 0, 2, fwd_only, NULL, &err) == SDGP_ERR_UNSUPPORTED && c == NULL &&
              strstr(err.msg, "Winograd") && strstr(err.msg, "forward"),
          "5x5 stride 2, padding 1: %s", err.msg);
    CHECK(sdgp_conv_create_passes(&c, &gg, 0, 2, fwd_only, NULL, &err) == SDGP_ERR_UNSUPPORTED && c == NULL,
          "grouped: %s", err.msg);
    const sdgp_conv_algo wgrad[3] = {D, D, W};
    c = NULL;
    CHECK(sdgp_conv_create_passes(&c, &g5, 0, 2, wgrad, NULL, &err) == SDGP_ERR_UNSUPPORTED && c == NULL &&
              strstr(err.msg, "backward-weights"),
          "5x5 stride 2, padding 1, backward-weights: %s", err.msg);
    /* onednn only: without AVX-512 AUTO is direct everywhere and WINOGRAD is refused */
    setenv("SDGP_WINOGRAD", "onednn", 1);
    REQUIRE(plan_auto(&g, A, 0, impl, got, &err) == SDGP_OK, "%s", err.msg);
    for (int p = 0; p < 3; p++)
        CHECK(!strcmp(impl[p], "onednn") && got[p] == (avx512 ? W : D), "onednn only, pass %d", p);
    for (int p = 0; p < 3; p++) {
        const sdgp_conv_algo one[3] = {p == 0 ? W : D, p == 1 ? W : D, p == 2 ? W : D};
        c = NULL;
        sdgp_status st = sdgp_conv_create_passes(&c, &g, 0, 2, one, NULL, &err);
        CHECK(avx512 ? st == SDGP_OK : st == SDGP_ERR_UNSUPPORTED, "onednn only, winograd pass %d: %s", p, err.msg);
        sdgp_conv_destroy(c);
    }
    /* an unknown value is refused by name, nothing created */
    setenv("SDGP_WINOGRAD", "fast", 1);
    c = NULL;
    CHECK(sdgp_conv_create_passes(&c, &g, 0, 2, fwd_only, NULL, &err) == SDGP_ERR_INVALID && c == NULL &&
              strstr(err.msg, "SDGP_WINOGRAD=fast") && strstr(err.msg, "onednn"),
          "bad SDGP_WINOGRAD: %s", err.msg);
    unsetenv("SDGP_WINOGRAD");
}

/* A model under --conv-algo measured times sdgp's Winograd as a candidate in every pass; a given
 * choice plans it ('w'), and where no kernel runs a 'w' pass (SDGP_WINOGRAD=onednn without
 * AVX-512) the choice is refused and the model keeps its convs. */
TEST_CASE(sdgp_wino_in_a_model) {
    setenv("SDGP_WINOGRAD", "sdgp", 1);
    const int avx512 = sdgp_isa_supported(SDGP_ISA_AVX512);
    sdgp_model_config c = small_config(8);
    c.conv_algo = SDGP_CONV_MEASURED;
    sdgp_model *m = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_model_create(&m, &c, &err);
    REQUIRE(st == SDGP_OK, "%s", err.msg);
    char choice[SDGP_CHOICE_LEN], text[SDGP_CHOICE_LEN];
    algos_text(m, choice, sizeof choice);
    CHECK(strlen(choice) == 7 && strspn(choice, "dw,") == 7, "measured: '%s'", choice);
    REQUIRE(sdgp_model_set_choice(m, with_algos(m, "ddd,wwd", text, sizeof text), &err) == SDGP_OK, "%s", err.msg);
    const sdgp_layer_info *li = sdgp_model_conv_info(m, 1);
    CHECK(li->plan[0].algo == W && !strcmp(li->plan[0].impl, "sdgp") && li->plan[1].algo == W &&
              !strcmp(li->plan[1].impl, "sdgp") && li->plan[2].algo == D,
          "ddd,wwd: %s/%s %s/%s %s", sdgp_conv_algo_name(li->plan[0].algo), li->plan[0].impl,
          sdgp_conv_algo_name(li->plan[1].algo), li->plan[1].impl, sdgp_conv_algo_name(li->plan[2].algo));
    REQUIRE(sdgp_model_set_choice(m, with_algos(m, "ddd,dww", text, sizeof text), &err) == SDGP_OK, "%s", err.msg);
    li = sdgp_model_conv_info(m, 1);
    CHECK(li->plan[0].algo == D && li->plan[2].algo == W && !strcmp(li->plan[2].impl, "sdgp"), "ddd,dww: %s/%s",
          sdgp_conv_algo_name(li->plan[2].algo), li->plan[2].impl);
    setenv("SDGP_WINOGRAD", "onednn", 1);
    st = sdgp_model_set_choice(m, with_algos(m, "ddd,wdw", text, sizeof text), &err);
    algos_text(m, choice, sizeof choice);
    CHECK(avx512 ? st == SDGP_OK : st == SDGP_ERR_UNSUPPORTED && !strcmp(choice, "ddd,dww"),
          "onednn only, ddd,wdw: status %d, '%s': %s", (int)st, choice, err.msg);
    sdgp_model_destroy(m);
    unsetenv("SDGP_WINOGRAD");
}

int main(void) {
    RUN(sdgp_wino_matches_naive_and_repeats_bitwise);
    RUN(sdgp_wino_images_independent_of_the_batch);
    RUN(sdgp_wino_shared_workspace_and_new_weights);
    RUN(sdgp_wino_wgrad_chunks_and_auto_rule);
    RUN(sdgp_wino_backward_matches_finite_differences);
    RUN(sdgp_wino_choice_and_errors);
    RUN(sdgp_wino_in_a_model);
    return test_finish();
}
