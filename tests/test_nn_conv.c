/* The dense oneDNN convolution (src/nn/conv_dnnl.c) against naive loops (forward and
 * backward-weights written here, backward-data the library's oracle), and its backward passes
 * against finite differences of the forward. */
#include "conv_util.h"
#include "sdgp/isa.h"

/* ---- naive oracles, NHWC activations, OIHW weights, double accumulation ---- */

/* Grouped convs: output channel o meets the input channels of its group only, weights
 * Cout x Cin/G x kh x kw. */
static int cin_g(const sdgp_conv_geom *g) { return g->Cin / g->groups; }
static int first_in(const sdgp_conv_geom *g, int o) { return o / (g->Cout / g->groups) * cin_g(g); }

static float w_at(const float *w, const sdgp_conv_geom *g, int o, int i, int r, int s) {
    return w[(((size_t)o * cin_g(g) + (i - first_in(g, o))) * g->kh + r) * g->kw + s];
}

/* y[b,oh,ow,o] = bias[o] + sum_{r,s,i} x[b, oh*st - pad + r, ow*st - pad + s, i] w[o,i,r,s] */
static void naive_forward(float *y, const float *x, const float *w, const float *bias, const sdgp_conv_geom *g) {
    for (int b = 0; b < g->B; b++)
        for (int oh = 0; oh < g->Ho; oh++)
            for (int ow = 0; ow < g->Wo; ow++)
                for (int o = 0; o < g->Cout; o++) {
                    double acc = bias ? bias[o] : 0.0;
                    for (int r = 0; r < g->kh; r++)
                        for (int s = 0; s < g->kw; s++) {
                            int ih = oh * g->stride - g->pad + r, iw = ow * g->stride - g->pad + s;
                            if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                            const float *xp = x + (((size_t)b * g->H + ih) * g->W + iw) * g->Cin;
                            for (int i = first_in(g, o); i < first_in(g, o) + cin_g(g); i++)
                                acc += (double)xp[i] * w_at(w, g, o, i, r, s);
                        }
                    y[(((size_t)b * g->Ho + oh) * g->Wo + ow) * g->Cout + o] = (float)acc;
                }
}

/* dw[o,i,r,s] = sum_{b,oh,ow} dy[b,oh,ow,o] x[b, oh*st-pad+r, ow*st-pad+s, i]; dbias[o] = sum dy */
static void naive_backward_weights(float *dw, float *dbias, const float *x, const float *dy, const sdgp_conv_geom *g) {
    for (int o = 0; o < g->Cout; o++) {
        for (int i = first_in(g, o); i < first_in(g, o) + cin_g(g); i++)
            for (int r = 0; r < g->kh; r++)
                for (int s = 0; s < g->kw; s++) {
                    double acc = 0;
                    for (int b = 0; b < g->B; b++)
                        for (int oh = 0; oh < g->Ho; oh++)
                            for (int ow = 0; ow < g->Wo; ow++) {
                                int ih = oh * g->stride - g->pad + r, iw = ow * g->stride - g->pad + s;
                                if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) continue;
                                acc += (double)dy[(((size_t)b * g->Ho + oh) * g->Wo + ow) * g->Cout + o] *
                                       x[(((size_t)b * g->H + ih) * g->W + iw) * g->Cin + i];
                            }
                    dw[(((size_t)o * cin_g(g) + (i - first_in(g, o))) * g->kh + r) * g->kw + s] = (float)acc;
                }
        if (dbias) {
            double acc = 0;
            for (size_t p = 0; p < (size_t)g->B * g->Ho * g->Wo; p++) acc += dy[p * g->Cout + o];
            dbias[o] = (float)acc;
        }
    }
}

/* Runs all three directions for one geometry and compares with the naive loops. */
static void check_geom_vs_naive(const sdgp_conv_geom *g, int with_bias, int threads, sdgp_conv_options opt,
                                double tol) {
    size_t nx = (size_t)g->B * g->H * g->W * g->Cin, ny = (size_t)g->B * g->Ho * g->Wo * g->Cout;
    size_t nw = (size_t)g->Cout * cin_g(g) * g->kh * g->kw;
    float *x = test_xmalloc(nx * 4), *w = test_xmalloc(nw * 4), *b = test_xmalloc((size_t)g->Cout * 4);
    float *y = test_xmalloc(ny * 4), *y_ref = test_xmalloc(ny * 4), *dy = test_xmalloc(ny * 4);
    float *dx = test_xmalloc(nx * 4), *dx_ref = test_xmalloc(nx * 4);
    float *dw = test_xmalloc(nw * 4), *dw_ref = test_xmalloc(nw * 4);
    float *db = test_xmalloc((size_t)g->Cout * 4), *db_ref = test_xmalloc((size_t)g->Cout * 4);
    test_fill_normal(x, nx, 1);
    test_fill_normal(w, nw, 2);
    test_fill_normal(b, (size_t)g->Cout, 3);
    test_fill_normal(dy, ny, 4);

    sdgp_conv *c = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_conv_create_opts(&c, g, with_bias, threads, &opt, &err);
    CHECK(st == SDGP_OK, "create: %s", err.msg);
    CHECK(st != SDGP_OK || sdgp_conv_get_algo(c) == opt.algo, "algorithm");
    if (st == SDGP_OK) {
        /* twice each, so a stale reorder buffer or scratchpad would show */
        for (int rep = 0; rep < 2; rep++) {
            if (rep) test_fill_normal(w, nw, 20);
            naive_forward(y_ref, x, w, with_bias ? b : NULL, g);
            sdgp_conv_backward_data_naive(dx_ref, dy, w, g); /* src/kernels/conv_ref.c */
            naive_backward_weights(dw_ref, with_bias ? db_ref : NULL, x, dy, g);
            CHECK(sdgp_conv_forward(c, y, x, w, b, &err) == SDGP_OK, "forward: %s", err.msg);
            CHECK(sdgp_conv_backward_data(c, dx, dy, w, &err) == SDGP_OK, "bwd data: %s", err.msg);
            CHECK(sdgp_conv_backward_weights(c, dw, with_bias ? db : NULL, x, dy, &err) == SDGP_OK, "bwd w: %s",
                  err.msg);
            double ey = test_rel_err(y, y_ref, ny), ex = test_rel_err(dx, dx_ref, nx), ew = test_rel_err(dw, dw_ref, nw);
            char what[160];
            snprintf(what, sizeof what, "B=%d %dx%d %d->%d k%d s%d p%d groups=%d bias=%d threads=%d algo=%d limit=%zu", g->B,
                     g->H, g->W, g->Cin, g->Cout, g->kh, g->stride, g->pad, g->groups, with_bias, threads, (int)opt.algo,
                     opt.workspace_limit);
            CHECK(ey < tol, "%s: forward rel err %.2e", what, ey);
            CHECK(ex < tol, "%s: bwd data rel err %.2e", what, ex);
            CHECK(ew < tol, "%s: bwd weights rel err %.2e", what, ew);
            if (with_bias) {
                double eb = test_rel_err(db, db_ref, (size_t)g->Cout);
                CHECK(eb < tol, "%s: dbias rel err %.2e", what, eb);
            }
            if (getenv("SDGP_TEST_VERBOSE")) printf("  %s: rel err %.1e %.1e %.1e\n", what, ey, ex, ew);
        }
        /* dbias may be NULL even with bias */
        CHECK(sdgp_conv_backward_weights(c, dw, NULL, x, dy, &err) == SDGP_OK, "dbias NULL: %s", err.msg);
        CHECK(test_rel_err(dw, dw_ref, nw) < tol, "dw with dbias NULL");
    }
    sdgp_conv_destroy(c);
    free(x), free(w), free(b), free(y), free(y_ref), free(dy), free(dx), free(dx_ref), free(dw), free(dw_ref);
    free(db), free(db_ref);
}

TEST_CASE(conv_matches_naive) {
    /* the ResNet-9 kinds (1x1, 3x3 p1, 5x5 s2 p2, 3x3 p0), odd sizes, B = 1, Cin = 3 */
    const int shapes[][8] = {
        /* B  H  W Cin Cout k s p */
        {2, 8, 8, 16, 32, 1, 1, 0}, {2, 9, 7, 16, 16, 3, 1, 1}, {1, 11, 10, 8, 24, 5, 2, 2},
        {3, 6, 5, 32, 16, 3, 1, 0}, {2, 8, 8, 3, 16, 3, 1, 1},  {1, 1, 1, 5, 7, 1, 1, 0},
        {2, 7, 7, 16, 16, 3, 2, 1},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        sdgp_conv_geom g = test_conv_geom(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
        const sdgp_conv_options direct = {SDGP_CONV_DIRECT, 0};
        for (int bias = 0; bias < 2; bias++) check_geom_vs_naive(&g, bias, t % 2 ? 1 : 0, direct, 1e-5);
    }
}

/* Grouped convolutions (RegNet's 3x3 with group width 16, depthwise, a 1x1): every pass against the
 * grouped naive loops, direct; AUTO runs them direct, an explicit Winograd request is UNSUPPORTED. */
TEST_CASE(conv_grouped_matches_naive) {
    const int shapes[][9] = {
        /* B  H  W Cin Cout k s p groups */
        {2, 8, 8, 32, 32, 3, 1, 1, 2}, {2, 9, 7, 48, 48, 3, 2, 1, 3}, {1, 6, 6, 16, 16, 3, 1, 1, 16},
        {2, 5, 5, 32, 64, 1, 1, 0, 4},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        sdgp_conv_geom g = test_conv_geom(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
        sdgp_error err;
        REQUIRE(sdgp_conv_geom_set_groups(&g, s[8], &err) == SDGP_OK, "groups: %s", err.msg);
        for (int bias = 0; bias < 2; bias++) check_geom_vs_naive(&g, bias, t % 2 ? 1 : 0, (sdgp_conv_options){SDGP_CONV_DIRECT, 0}, 1e-5);
        sdgp_conv *c = NULL;
        const sdgp_conv_options any = {SDGP_CONV_AUTO, 0}, wino = {SDGP_CONV_WINOGRAD, 0};
        CHECK(sdgp_conv_create_opts(&c, &g, 0, 0, &any, &err) == SDGP_OK && sdgp_conv_get_algo(c) == SDGP_CONV_DIRECT,
              "auto runs a grouped conv direct");
        sdgp_conv_destroy(c);
        c = NULL;
        CHECK(sdgp_conv_create_opts(&c, &g, 0, 0, &wino, &err) == SDGP_ERR_UNSUPPORTED && strstr(err.msg, "group"),
              "Winograd for groups: %s", err.msg);
        sdgp_conv_destroy(c);
    }
    sdgp_conv_geom g = test_conv_geom(1, 4, 4, 6, 8, 3, 1, 1);
    sdgp_error err;
    CHECK(sdgp_conv_geom_set_groups(&g, 4, &err) == SDGP_ERR_INVALID && strstr(err.msg, "groups=4"), "4 does not divide 6");
    CHECK(sdgp_conv_geom_set_groups(&g, 0, &err) == SDGP_ERR_INVALID, "groups 0");
}

/* Winograd: 3x3 stride 1 (pad 1 and 0, odd sizes, tiles cut by the border, one image, 16..64
 * channels) against the naive loops with its looser rounding. On a CPU with AVX-512 oneDNN must
 * have the kernel; elsewhere the request must fail as UNSUPPORTED, never crash. Other geometries
 * are UNSUPPORTED with a message naming the kernel. */
TEST_CASE(conv_winograd_matches_naive) {
    const int shapes[][8] = {
        /* B  H  W Cin Cout k s p */
        {2, 9, 7, 16, 16, 3, 1, 1}, {3, 6, 5, 32, 16, 3, 1, 0}, {1, 14, 14, 64, 32, 3, 1, 1}, {4, 4, 4, 32, 64, 3, 1, 1},
    };
    for (size_t t = 0; t < sizeof shapes / sizeof shapes[0]; t++) {
        const int *s = shapes[t];
        sdgp_conv_geom g = test_conv_geom(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]);
        sdgp_conv *c = NULL;
        sdgp_error err;
        sdgp_status st = sdgp_conv_create_algo(&c, &g, 0, 0, SDGP_CONV_WINOGRAD, &err);
        sdgp_conv_destroy(c);
        if (!sdgp_isa_supported(SDGP_ISA_AVX512)) {
            CHECK(st == SDGP_OK || st == SDGP_ERR_UNSUPPORTED, "without AVX-512: %s", err.msg);
            if (st != SDGP_OK) continue;
        }
        CHECK(st == SDGP_OK, "Winograd on an AVX-512 CPU: %s", err.msg);
        const sdgp_conv_options wino = {SDGP_CONV_WINOGRAD, 0};
        for (int bias = 0; bias < 2; bias++) check_geom_vs_naive(&g, bias, t % 2 ? 1 : 2, wino, 2e-5);
    }
    /* 5x5 stride 2 runs Winograd with padding 2 only (by space-to-depth, tests/test_conv_sdgp_wino.c) */
    sdgp_conv_geom g = test_conv_geom(2, 11, 10, 16, 32, 5, 2, 1);
    sdgp_conv *c = NULL;
    sdgp_error err;
    CHECK(sdgp_conv_create_algo(&c, &g, 0, 0, SDGP_CONV_WINOGRAD, &err) == SDGP_ERR_UNSUPPORTED && c == NULL &&
              strstr(err.msg, "Winograd"),
          "5x5 stride 2 padding 1 must be unsupported: %s", err.msg);
    CHECK(sdgp_conv_create_algo(&c, &g, 0, 0, (sdgp_conv_algo)7, &err) == SDGP_ERR_INVALID && c == NULL,
          "unknown algorithm");
    sdgp_conv_algo algo;
    for (int i = SDGP_CONV_DIRECT; i <= SDGP_CONV_AUTO; i++)
        CHECK(sdgp_conv_algo_parse(sdgp_conv_algo_name((sdgp_conv_algo)i), &algo, &err) == SDGP_OK && (int)algo == i,
              "name round trip %d", i);
    CHECK(sdgp_conv_algo_parse("wino", &algo, &err) == SDGP_ERR_INVALID && strstr(err.msg, "wino"), "bad name");
}

/* Runs the three passes of c on (x, w, dy) into y, dx, dw. */
static void run_passes(sdgp_conv *c, float *y, float *dx, float *dw, const float *x, const float *w, const float *dy) {
    sdgp_error err;
    REQUIRE(sdgp_conv_forward(c, y, x, w, NULL, &err) == SDGP_OK, "forward: %s", err.msg);
    REQUIRE(sdgp_conv_backward_data(c, dx, dy, w, &err) == SDGP_OK, "backward-data: %s", err.msg);
    REQUIRE(sdgp_conv_backward_weights(c, dw, NULL, x, dy, &err) == SDGP_OK, "backward-weights: %s", err.msg);
}

/* A per-pass mix (sdgp_conv_create_passes, the model's measured choice): every one of the 8 mixes
 * of direct and Winograd plans each pass as asked and gives, per pass, bitwise the result of the
 * conv that runs all passes with that pass's algorithm (same plan, same threads: oneDNN repeats
 * bitwise), under a workspace limit too (the Winograd passes split as they do alone). Per-pass
 * AUTO follows AUTO's rule. Bad requests: Winograd where oneDNN has none names the pass,
 * 'measured' and unknown values are refused, nothing is created. */
TEST_CASE(conv_per_pass_mix) {
    sdgp_error err;
    sdgp_conv *c = NULL;
    const sdgp_conv_algo D = SDGP_CONV_DIRECT, W = SDGP_CONV_WINOGRAD;
    if (sdgp_isa_supported(SDGP_ISA_AVX512)) {
        sdgp_conv_geom g = test_conv_geom(3, 9, 7, 32, 48, 3, 1, 1);
        const size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)g.B * g.Ho * g.Wo * g.Cout;
        const size_t nw = (size_t)g.Cout * g.Cin * 9;
        float *x = test_xmalloc(nx * 4), *w = test_xmalloc(nw * 4), *dy = test_xmalloc(ny * 4);
        float *out[3][3]; /* [direct, winograd, mix][y, dx, dw] */
        for (int k = 0; k < 3; k++) {
            out[k][0] = test_xmalloc(ny * 4), out[k][1] = test_xmalloc(nx * 4), out[k][2] = test_xmalloc(nw * 4);
        }
        const size_t n[3] = {ny, nx, nw};
        test_fill_normal(x, nx, 1), test_fill_normal(w, nw, 2), test_fill_normal(dy, ny, 3);
        for (int lim = 0; lim < 2; lim++) {
            /* the second round: a limit under the whole-batch Winograd workspace of every pass */
            sdgp_conv_options opt = {W, 0};
            if (lim) {
                REQUIRE(sdgp_conv_create_opts(&c, &g, 0, 2, &opt, &err) == SDGP_OK, "%s", err.msg);
                size_t least = SIZE_MAX;
                for (int p = 0; p < 3; p++)
                    if (sdgp_conv_get_plan(c, (sdgp_conv_pass)p).workspace_bytes < least)
                        least = sdgp_conv_get_plan(c, (sdgp_conv_pass)p).workspace_bytes;
                sdgp_conv_destroy(c);
                opt.workspace_limit = least - 1;
            }
            sdgp_conv_pass_plan alone[2][3];
            for (int a = 0; a < 2; a++) {
                const sdgp_conv_options o1 = {a ? W : D, opt.workspace_limit};
                REQUIRE(sdgp_conv_create_opts(&c, &g, 0, 2, &o1, &err) == SDGP_OK, "%s", err.msg);
                for (int p = 0; p < 3; p++) alone[a][p] = sdgp_conv_get_plan(c, (sdgp_conv_pass)p);
                run_passes(c, out[a][0], out[a][1], out[a][2], x, w, dy);
                sdgp_conv_destroy(c);
            }
            for (int mask = 0; mask < 8; mask++) {
                const sdgp_conv_algo algos[3] = {mask & 1 ? W : D, mask & 2 ? W : D, mask & 4 ? W : D};
                REQUIRE(sdgp_conv_create_passes(&c, &g, 0, 2, algos, &opt, &err) == SDGP_OK, "mix %d: %s", mask, err.msg);
                for (int p = 0; p < 3; p++) {
                    sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)p), al = alone[algos[p] == W][p];
                    CHECK(pl.algo == algos[p] && pl.chunk == al.chunk && pl.parts == al.parts &&
                              pl.workspace_bytes == al.workspace_bytes,
                          "limit %zu mix %d pass %d: planned %s %dx%d, alone %s %dx%d", opt.workspace_limit, mask, p,
                          sdgp_conv_algo_name(pl.algo), pl.chunk, pl.parts, sdgp_conv_algo_name(al.algo), al.chunk, al.parts);
                    if (lim) CHECK(algos[p] == D || pl.chunk < g.B || pl.parts > 1, "limit: pass %d must split", p);
                }
                CHECK(sdgp_conv_get_algo(c) == (mask ? W : D), "mix %d: get_algo", mask);
                run_passes(c, out[2][0], out[2][1], out[2][2], x, w, dy);
                for (int p = 0; p < 3; p++)
                    CHECK(test_bitwise_equal(out[2][p], out[algos[p] == W][p], n[p] * 4),
                          "limit %zu mix %d pass %d differs from the %s conv (rel err %.2g)", opt.workspace_limit, mask, p,
                          sdgp_conv_algo_name(algos[p]), test_rel_err(out[2][p], out[algos[p] == W][p], n[p]));
                sdgp_conv_destroy(c);
            }
        }
        /* per-pass AUTO: this shape pays (>= 16 channels, 9x7 uses 63/96 tiles < 75 %: direct);
         * a 16x16 plane pays */
        const sdgp_conv_algo autos[3] = {SDGP_CONV_AUTO, W, SDGP_CONV_AUTO};
        REQUIRE(sdgp_conv_create_passes(&c, &g, 0, 2, autos, NULL, &err) == SDGP_OK, "%s", err.msg);
        CHECK(sdgp_conv_get_plan(c, SDGP_CONV_FORWARD).algo == D && sdgp_conv_get_plan(c, SDGP_CONV_BACKWARD_DATA).algo == W &&
                  sdgp_conv_get_plan(c, SDGP_CONV_BACKWARD_WEIGHTS).algo == D,
              "auto, winograd, auto at 9x7");
        sdgp_conv_destroy(c);
        sdgp_conv_geom g16 = test_conv_geom(2, 16, 16, 32, 32, 3, 1, 1);
        REQUIRE(sdgp_conv_create_passes(&c, &g16, 0, 2, autos, NULL, &err) == SDGP_OK, "%s", err.msg);
        CHECK(sdgp_conv_get_plan(c, SDGP_CONV_FORWARD).algo == W && sdgp_conv_get_plan(c, SDGP_CONV_BACKWARD_WEIGHTS).algo == W,
              "auto at 16x16: winograd");
        sdgp_conv_destroy(c);
        free(x), free(w), free(dy);
        for (int k = 0; k < 3; k++) free(out[k][0]), free(out[k][1]), free(out[k][2]);
    }
    /* a 1x1 conv has no Winograd kernel: the error names the pass asked for */
    sdgp_conv_geom g1 = test_conv_geom(2, 8, 8, 32, 32, 1, 1, 0);
    const char *pass_word[3] = {"forward", "backward-data", "backward-weights"};
    for (int p = 0; p < 3; p++) {
        sdgp_conv_algo algos[3] = {D, D, D};
        algos[p] = W;
        c = NULL;
        sdgp_status st = sdgp_conv_create_passes(&c, &g1, 0, 2, algos, NULL, &err);
        CHECK(st == SDGP_ERR_UNSUPPORTED && c == NULL && strstr(err.msg, "Winograd") && strstr(err.msg, pass_word[p]),
              "Winograd %s on a 1x1 conv: %s", pass_word[p], err.msg);
    }
    const sdgp_conv_algo measured[3] = {D, SDGP_CONV_MEASURED, D}, unknown[3] = {D, D, (sdgp_conv_algo)9};
    CHECK(sdgp_conv_create_passes(&c, &g1, 0, 2, measured, NULL, &err) == SDGP_ERR_INVALID && c == NULL &&
              strstr(err.msg, "measured") && strstr(err.msg, "backward-data"),
          "measured per pass: %s", err.msg);
    CHECK(sdgp_conv_create_passes(&c, &g1, 0, 2, unknown, NULL, &err) == SDGP_ERR_INVALID && c == NULL && strstr(err.msg, "9"),
          "unknown per pass: %s", err.msg);
    CHECK(sdgp_conv_create_passes(&c, &g1, 0, 2, NULL, NULL, &err) == SDGP_ERR_INVALID && c == NULL, "NULL algorithms");
    CHECK(sdgp_conv_create_algo(&c, &g1, 0, 2, SDGP_CONV_MEASURED, &err) == SDGP_ERR_INVALID && c == NULL &&
              strstr(err.msg, "measured"),
          "measured for one conv: %s", err.msg);
    sdgp_conv_algo algo;
    for (int i = 0; sdgp_conv_algo_names[i]; i++)
        CHECK(sdgp_conv_algo_parse(sdgp_conv_algo_names[i], &algo, &err) == SDGP_OK && (int)algo == i &&
                  !strcmp(sdgp_conv_algo_name(algo), sdgp_conv_algo_names[i]),
              "name round trip %d", i);
    CHECK(sdgp_conv_algo_parse("measurd", &algo, &err) == SDGP_ERR_INVALID && strstr(err.msg, "measurd") &&
              strstr(err.msg, "measured"),
          "a misspelt name lists the names: %s", err.msg);
}

/* Winograd under shrinking workspace limits: the passes split into batch chunks and channel
 * slices (backward-weights adding the chunks' dw and dbias), every plan still matches the naive
 * loops, and each pass went through both kinds of split. A limit nothing fits: AUTO runs every
 * pass DIRECT. */
TEST_CASE(conv_winograd_splits) {
    if (!sdgp_isa_supported(SDGP_ISA_AVX512)) return;
    sdgp_conv_geom g = test_conv_geom(4, 8, 7, 32, 64, 3, 1, 1);
    sdgp_conv *c = NULL;
    sdgp_error err;
    int chunked[3] = {0}, sliced[3] = {0};
    /* for each pass, each round's limit is one byte below its workspace of the round before,
     * until it shrinks no more (then it takes its smallest split, over the limit) */
    for (int q = 0; q < 3; q++) {
        size_t limit = 0, before = SIZE_MAX;
        for (int round = 0; round < 16; round++) {
            const sdgp_conv_options opt = {SDGP_CONV_WINOGRAD, limit};
            REQUIRE(sdgp_conv_create_opts(&c, &g, 1, 2, &opt, &err) == SDGP_OK, "limit %zu: %s", limit, err.msg);
            for (int p = 0; p < 3; p++) {
                sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)p);
                CHECK(pl.algo == SDGP_CONV_WINOGRAD && g.B % pl.chunk == 0 && pl.parts >= 1, "pass %d plan", p);
                chunked[p] |= pl.chunk < g.B;
                sliced[p] |= pl.parts > 1;
            }
            sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)q);
            if (getenv("SDGP_TEST_VERBOSE"))
                printf("  limit %zu pass %d: %d x %d, %zu bytes\n", limit, q, pl.chunk, pl.parts, pl.workspace_bytes);
            sdgp_conv_destroy(c);
            for (int bias = 0; bias < 2; bias++) check_geom_vs_naive(&g, bias, 2, opt, 2e-5);
            if (pl.workspace_bytes >= before) break;
            before = pl.workspace_bytes;
            limit = pl.workspace_bytes - 1;
        }
    }
    for (int p = 0; p < 3; p++) CHECK(chunked[p] && sliced[p], "pass %d: chunked %d sliced %d", p, chunked[p], sliced[p]);
    const sdgp_conv_options tiny = {SDGP_CONV_AUTO, 1};
    REQUIRE(sdgp_conv_create_opts(&c, &g, 0, 2, &tiny, &err) == SDGP_OK, "%s", err.msg);
    for (int p = 0; p < 3; p++) {
        sdgp_conv_pass_plan pl = sdgp_conv_get_plan(c, (sdgp_conv_pass)p);
        CHECK(pl.algo == SDGP_CONV_DIRECT && pl.chunk == g.B && pl.parts == 1, "auto, nothing fits: pass %d direct", p);
    }
    CHECK(sdgp_conv_get_algo(c) == SDGP_CONV_DIRECT, "auto, nothing fits: direct");
    sdgp_conv_destroy(c);
}

/* Backward passes against finite differences of the forward: L = sum dyr * conv(x, w). */
typedef struct {
    sdgp_conv *c;
    const sdgp_conv_geom *g;
    float *x, *w, *y;
    const float *dyr;
    int wrt_w;
} fd_ctx;

static double fd_loss(void *vctx, const float *unused) {
    fd_ctx *f = vctx;
    (void)unused;
    sdgp_conv_forward(f->c, f->y, f->x, f->w, NULL, NULL);
    size_t ny = (size_t)f->g->B * f->g->Ho * f->g->Wo * f->g->Cout;
    double L = 0;
    for (size_t k = 0; k < ny; k++) L += (double)f->dyr[k] * f->y[k];
    return L;
}

TEST_CASE(conv_backward_matches_finite_differences) {
    sdgp_conv_geom g = test_conv_geom(2, 7, 6, 4, 5, 3, 2, 1);
    size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)g.B * g.Ho * g.Wo * g.Cout;
    size_t nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
    float *x = test_xmalloc(nx * 4), *w = test_xmalloc(nw * 4), *y = test_xmalloc(ny * 4), *dy = test_xmalloc(ny * 4);
    float *dx = test_xmalloc(nx * 4), *dw = test_xmalloc(nw * 4);
    test_fill_normal(x, nx, 11);
    test_fill_normal(w, nw, 12);
    test_fill_normal(dy, ny, 13);
    sdgp_conv *c = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_conv_create(&c, &g, 0, 0, &err); /* not inside REQUIRE: it evaluates twice */
    REQUIRE(st == SDGP_OK, "create: %s", err.msg);
    CHECK(sdgp_conv_backward_data(c, dx, dy, w, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_conv_backward_weights(c, dw, NULL, x, dy, &err) == SDGP_OK, "%s", err.msg);
    fd_ctx f = {c, &g, x, w, y, dy, 0};
    double worst = 0;
    for (size_t i = 0; i < nx; i += 7) {
        double d = fabs(test_fd(fd_loss, &f, x, i, 1e-2f) - dx[i]);
        if (d > worst) worst = d;
    }
    CHECK(worst < 2e-2, "dx vs finite differences: max abs diff %.3e", worst);
    worst = 0;
    for (size_t i = 0; i < nw; i += 3) {
        double d = fabs(test_fd(fd_loss, &f, w, i, 1e-2f) - dw[i]);
        if (d > worst) worst = d;
    }
    CHECK(worst < 2e-2, "dw vs finite differences: max abs diff %.3e", worst);
    sdgp_conv_destroy(c);
    free(x), free(w), free(y), free(dy), free(dx), free(dw);
}

TEST_CASE(conv_rejects_bad_arguments) {
    sdgp_error err;
    sdgp_conv *c = (sdgp_conv *)&err; /* must be reset to NULL on failure */
    sdgp_conv_geom g = test_conv_geom(1, 4, 4, 2, 2, 3, 1, 1);
    g.Ho = 9;
    CHECK(sdgp_conv_create(&c, &g, 0, 0, &err) == SDGP_ERR_INVALID && c == NULL, "inconsistent Ho: %s", err.msg);
    g = test_conv_geom(1, 4, 4, 2, 2, 3, 1, 1);
    CHECK(sdgp_conv_create(&c, &g, 0, -1, &err) == SDGP_ERR_INVALID, "threads < 0");
    CHECK(sdgp_conv_create(&c, NULL, 0, 0, &err) == SDGP_ERR_INVALID, "NULL geometry");
    sdgp_status st = sdgp_conv_create(&c, &g, 1, 0, &err);
    REQUIRE(st == SDGP_OK, "%s", err.msg);
    float buf[64] = {0};
    CHECK(sdgp_conv_forward(c, buf, buf, buf, NULL, &err) == SDGP_ERR_INVALID, "missing bias must be refused");
    CHECK(sdgp_conv_forward(c, buf, NULL, buf, buf, &err) == SDGP_ERR_INVALID, "NULL x");
    sdgp_conv_destroy(c);
    sdgp_conv_destroy(NULL);
}

TEST_CASE(conv_repeats_bitwise) {
    sdgp_conv_geom g = test_conv_geom(8, 12, 12, 64, 64, 3, 1, 1);
    size_t nx = (size_t)g.B * g.H * g.W * g.Cin, nw = (size_t)g.Cout * g.Cin * 9;
    float *x = test_xmalloc(nx * 4), *dy = test_xmalloc(nx * 4), *w = test_xmalloc(nw * 4);
    float *out[2][3];
    test_fill_normal(x, nx, 31), test_fill_normal(dy, nx, 32), test_fill_normal(w, nw, 33);
    sdgp_conv *c = NULL;
    sdgp_status st = sdgp_conv_create(&c, &g, 0, 2, NULL);
    REQUIRE(st == SDGP_OK, "create");
    for (int r = 0; r < 2; r++) {
        out[r][0] = test_xmalloc(nx * 4), out[r][1] = test_xmalloc(nx * 4), out[r][2] = test_xmalloc(nw * 4);
        CHECK(sdgp_conv_forward(c, out[r][0], x, w, NULL, NULL) == SDGP_OK, "forward");
        CHECK(sdgp_conv_backward_data(c, out[r][1], dy, w, NULL) == SDGP_OK, "bwd data");
        CHECK(sdgp_conv_backward_weights(c, out[r][2], NULL, x, dy, NULL) == SDGP_OK, "bwd weights");
    }
    CHECK(test_bitwise_equal(out[0][0], out[1][0], nx * 4), "forward repeats");
    CHECK(test_bitwise_equal(out[0][1], out[1][1], nx * 4), "backward-data repeats");
    CHECK(test_bitwise_equal(out[0][2], out[1][2], nw * 4), "backward-weights repeats");
    sdgp_conv_destroy(c);
    for (int r = 0; r < 2; r++) free(out[r][0]), free(out[r][1]), free(out[r][2]);
    free(x), free(dy), free(w);
}

/* Two convs share one workspace, poisoned between calls (sharing is only safe if no call leaves
 * state in it for the next): every result equals, bitwise, the same call on a conv with its own
 * workspace. Then NULL gives a conv its own again. */
static void check_shared_workspace(sdgp_conv_algo algo0) {
    sdgp_conv_geom g[2] = {test_conv_geom(4, 12, 12, 64, 64, 3, 1, 1), test_conv_geom(2, 9, 9, 32, 128, 3, 2, 1)};
    sdgp_conv_algo algo[2] = {algo0, SDGP_CONV_DIRECT};
    sdgp_conv *own[2] = {NULL, NULL}, *shared[2] = {NULL, NULL};
    size_t ws_bytes = 0;
    for (int i = 0; i < 2; i++) {
        sdgp_status st = sdgp_conv_create_algo(&own[i], &g[i], 0, 2, algo[i], NULL);
        REQUIRE(st == SDGP_OK, "create own %d", i);
        st = sdgp_conv_create_algo(&shared[i], &g[i], 0, 2, algo[i], NULL);
        REQUIRE(st == SDGP_OK, "create shared %d", i);
        size_t b = sdgp_conv_workspace_bytes(shared[i]);
        CHECK(b >= 64 && b % 64 == 0, "workspace bytes %zu", b);
        if (b > ws_bytes) ws_bytes = b;
    }
    unsigned char *ws = aligned_alloc(64, ws_bytes);
    REQUIRE(ws != NULL, "workspace");
    sdgp_error err;
    CHECK(sdgp_conv_set_workspace(shared[0], ws + 4, &err) == SDGP_ERR_INVALID && strstr(err.msg, "aligned"),
          "a misaligned workspace must be refused: %s", err.msg);
    for (int i = 0; i < 2; i++) CHECK(sdgp_conv_set_workspace(shared[i], ws, &err) == SDGP_OK, "%s", err.msg);
    for (int phase = 0; phase < 2; phase++) { /* phase 1: shared[0] back on its own workspace */
        if (phase) CHECK(sdgp_conv_set_workspace(shared[0], NULL, &err) == SDGP_OK, "%s", err.msg);
        for (int i = 0; i < 2; i++) {
            const sdgp_conv_geom *q = &g[i];
            size_t nx = (size_t)q->B * q->H * q->W * q->Cin, ny = (size_t)q->B * q->Ho * q->Wo * q->Cout;
            size_t nw = (size_t)q->Cout * q->Cin * q->kh * q->kw;
            float *x = test_xmalloc(nx * 4), *w = test_xmalloc(nw * 4), *dy = test_xmalloc(ny * 4);
            float *a[3] = {test_xmalloc(ny * 4), test_xmalloc(nx * 4), test_xmalloc(nw * 4)};
            float *b[3] = {test_xmalloc(ny * 4), test_xmalloc(nx * 4), test_xmalloc(nw * 4)};
            test_fill_normal(x, nx, 41 + (uint64_t)i), test_fill_normal(w, nw, 43), test_fill_normal(dy, ny, 44);
            CHECK(sdgp_conv_forward(own[i], a[0], x, w, NULL, NULL) == SDGP_OK, "own forward");
            CHECK(sdgp_conv_backward_data(own[i], a[1], dy, w, NULL) == SDGP_OK, "own bwd data");
            CHECK(sdgp_conv_backward_weights(own[i], a[2], NULL, x, dy, NULL) == SDGP_OK, "own bwd weights");
            memset(ws, 0xff, ws_bytes); /* NaNs everywhere */
            CHECK(sdgp_conv_forward(shared[i], b[0], x, w, NULL, NULL) == SDGP_OK, "shared forward");
            memset(ws, 0xff, ws_bytes);
            CHECK(sdgp_conv_backward_data(shared[i], b[1], dy, w, NULL) == SDGP_OK, "shared bwd data");
            memset(ws, 0xff, ws_bytes);
            CHECK(sdgp_conv_backward_weights(shared[i], b[2], NULL, x, dy, NULL) == SDGP_OK, "shared bwd weights");
            CHECK(test_bitwise_equal(a[0], b[0], ny * 4), "phase %d conv %d: forward differs", phase, i);
            CHECK(test_bitwise_equal(a[1], b[1], nx * 4), "phase %d conv %d: backward-data differs", phase, i);
            CHECK(test_bitwise_equal(a[2], b[2], nw * 4), "phase %d conv %d: backward-weights differs", phase, i);
            for (int k = 0; k < 3; k++) free(a[k]), free(b[k]);
            free(x), free(w), free(dy);
        }
    }
    for (int i = 0; i < 2; i++) sdgp_conv_destroy(own[i]), sdgp_conv_destroy(shared[i]);
    free(ws);
    CHECK(sdgp_conv_set_workspace(NULL, NULL, &err) == SDGP_ERR_INVALID, "NULL conv");
}

/* A Winograd conv (blocked copies of the activations in the workspace) shares with a direct one. */
TEST_CASE(conv_shared_workspace) {
    check_shared_workspace(SDGP_CONV_DIRECT);
    if (sdgp_isa_supported(SDGP_ISA_AVX512)) check_shared_workspace(SDGP_CONV_WINOGRAD);
}

int main(void) {
    RUN(conv_matches_naive);
    RUN(conv_grouped_matches_naive);
    RUN(conv_winograd_matches_naive);
    RUN(conv_winograd_splits);
    RUN(conv_per_pass_mix);
    RUN(conv_backward_matches_finite_differences);
    RUN(conv_rejects_bad_arguments);
    RUN(conv_repeats_bitwise);
    RUN(conv_shared_workspace);
    return test_finish();
}
