/* The N:M sparse weight gradient (sdgp_sparse_wgrad_*): dW = X^T x dY for dY pruned along
 * positions (the row-axis compressed form) against a naive double-accumulation loop on the dense
 * pruned dY: MVUE, magnitude and random pruning; n:m 1:1, 1:2, 2:4, 1:4, 3:4, 4:4 (every row
 * kept), 1:8, 2:8, 3:8, 4:8, 5:8, 8:8 (the header's m = 1, 2, 4, 8); 3x3 pad 0/1/2, 5x5 stride 2,
 * 7x7 stride 2, 3x1, 1x1, 3x3 stride 2 and 3; Cin 1, 2, 3, not a multiple of 16 and above 64; Cout
 * 1, 5, odd, above 64; rows from m up to 2048, not multiples of 16, 64 or 256; 1x1 images; every
 * ISA path the CPU has with 1, 2 and 3 threads, and with 1 and 2 in the permute form forced
 * (spwgrad_create_permute_form: AVX2's and AVX-512's permute kernels), all bitwise equal (the header's promise), AUTO
 * too; dw fully overwritten (poisoned with NaN before each run); a plan run twice on other data, and
 * with the caller's workspace.
 * Zero-value slots, groups with fewer than n nonzeros, an all-zero dY and big magnitudes.
 * Refusals: NULL arguments, bad n:m, m not dividing 8 (unsupported), negative threads, unknown
 * ISA, grouped geometries, an inconsistent geometry, B*Ho*Wo not a multiple of m, dY of another
 * form, a stored index >= m (create leaves *out NULL, every message non-empty). And once against
 * oneDNN's dense backward-weights on the same pruned tensor. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conv_util.h"
#include "kernels/spwgrad_internal.h"
#include "sdgp/conv.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

typedef struct {
    int B, H, W, Cin, Cout, kh, kw, stride, pad, n, m;
    sdgp_prune_fn fn;
} shape;

/* NaN everywhere: a position the run does not write shows up in the error */
static void poison(float *a, size_t n) { memset(a, 0xff, n * sizeof *a); }


/* ||a - b|| / ||b|| (||b|| = 0: the absolute norm) */
static double rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return isnan(d) ? INFINITY : sqrt(d / (s > 0 ? s : 1));
}

/* The worst relative L2 error over the output channels (each Cin x kh x kw slice on its own), so a
 * wrong channel cannot hide behind big ones; *worst_co gets that channel. */
static double worst_channel_err(const float *dw, const float *want, const sdgp_conv_geom *g, int *worst_co) {
    const size_t per = (size_t)g->Cin * g->kh * g->kw;
    double worst = 0;
    *worst_co = 0;
    for (int co = 0; co < g->Cout; co++) {
        double e = rel_l2(dw + co * per, want + co * per, per);
        if (!(e <= worst)) worst = e, *worst_co = co;
    }
    return worst;
}

/* Prunes dense dL/dO (B x Ho x Wo x Cout) along rows with fn n:m into the dense pruned tensor and
 * the compressed form (allocated here). */
static int prune_rows(float *pruned, sdgp_nm_tensor *t, const float *dyd, const sdgp_conv_geom *g, sdgp_prune_fn fn, int n,
                      int m, uint64_t seed) {
    sdgp_error e;
    const int64_t rows = (int64_t)g->B * g->Ho * g->Wo;
    memset(t, 0, sizeof *t);
    if (sdgp_nm_alloc(t, SDGP_AXIS_ROW, n, m, rows, g->Cout, &e) != SDGP_OK) {
        CHECK(0, "nm_alloc %d:%d rows %lld C %d: %s", n, m, (long long)rows, g->Cout, e.msg);
        return 0;
    }
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fn, n, m);
    cfg.axis = SDGP_AXIS_ROW;
    cfg.seed = seed;
    const int ok = sdgp_prune(&cfg, dyd, g->B, (int64_t)g->Ho * g->Wo, g->Cout, pruned, t, &e) == SDGP_OK;
    CHECK(ok, "prune %s %d:%d: %s", sdgp_prune_fn_name(fn), n, m, e.msg);
    return ok;
}

/* permute: the permute form even where the ISA has the rows form (AVX2's and AVX-512's permute micro-kernels) */
static int run_wgrad(float *dw, const float *x, const sdgp_nm_tensor *t, const sdgp_conv_geom *g, int n, int m,
                     sdgp_isa isa, int threads, int permute) {
    sdgp_sparse_wgrad *p = NULL;
    sdgp_error e;
    int ok = (permute ? spwgrad_create_permute_form : sdgp_sparse_wgrad_create)(&p, g, n, m, isa, threads, &e) == SDGP_OK;
    CHECK(ok && p, "create (%s, %d threads%s): %s", sdgp_isa_name(isa), threads, permute ? ", permute form" : "", e.msg);
    if (!ok || !p) return 0;
    CHECK(sdgp_sparse_wgrad_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_wgrad_isa(p)), sdgp_isa_name(isa));
    poison(dw, (size_t)g->Cout * g->Cin * g->kh * g->kw);
    ok = sdgp_sparse_wgrad_run(p, dw, x, t, &e) == SDGP_OK;
    CHECK(ok, "run (%s, %d threads): %s", sdgp_isa_name(isa), threads, e.msg);
    sdgp_sparse_wgrad_destroy(p);
    return ok;
}

#define TOL 1e-5

TEST_CASE(sparse_wgrad_matches_naive_every_isa_and_thread_count) {
    const shape shapes[] = {
        /* B   H   W Cin Cout kh kw s  p  n  m  fn */
        {2, 8, 8, 16, 32, 3, 3, 1, 1, 2, 4, SDGP_PRUNE_MVUE},       /* 0: rows 128 */
        {4, 7, 9, 24, 16, 3, 3, 1, 0, 2, 4, SDGP_PRUNE_MVUE},       /* 1: pad 0, Cin 24, rows 140 (not a multiple of 16) */
        {2, 6, 6, 40, 37, 3, 3, 1, 2, 3, 4, SDGP_PRUNE_MVUE},       /* 2: pad 2, Cin 40, Cout 37, 3:4 */
        {2, 11, 9, 3, 5, 5, 5, 2, 2, 1, 4, SDGP_PRUNE_MVUE},        /* 3: 5x5 stride 2 pad 2, Cin 3, Cout 5, 1:4, rows 60 */
        {4, 5, 6, 100, 20, 1, 1, 1, 0, 4, 8, SDGP_PRUNE_MVUE},      /* 4: 1x1, Cin 100, 4:8, rows 120 */
        {4, 9, 9, 96, 32, 3, 3, 2, 1, 2, 4, SDGP_PRUNE_MAGNITUDE},  /* 5: 3x3 stride 2, Cin 96, magnitude, rows 100 */
        {1, 8, 8, 130, 16, 3, 3, 1, 1, 4, 4, SDGP_PRUNE_MVUE},      /* 6: Cin 130, 4:4 (every row), rows 64 */
        {1, 12, 8, 32, 48, 3, 3, 1, 1, 1, 8, SDGP_PRUNE_MVUE},      /* 7: 1:8, Cout 48, rows 96 */
        {2, 6, 10, 64, 24, 3, 3, 1, 1, 2, 8, SDGP_PRUNE_MVUE},      /* 8: 2:8, Cin 64, rows 120 */
        {2, 5, 4, 8, 1, 3, 3, 1, 1, 2, 4, SDGP_PRUNE_MVUE},         /* 9: Cout 1, rows 40 */
        {4, 1, 1, 16, 8, 3, 3, 1, 1, 2, 4, SDGP_PRUNE_MVUE},        /* 10: 1x1 images: only the centre tap, rows 4 */
        {4, 1, 1, 24, 5, 3, 3, 1, 2, 1, 4, SDGP_PRUNE_RANDOM},      /* 11: 1x1 images, pad 2 (3x3 output), random */
        {4, 7, 7, 40, 24, 3, 3, 1, 1, 3, 4, SDGP_PRUNE_RANDOM},     /* 12: 3:4 random, rows 196 */
        {2, 13, 13, 64, 64, 3, 3, 1, 1, 1, 2, SDGP_PRUNE_MVUE},     /* 13: 1:2, rows 338 (> 256, not a multiple of 16) */
        {4, 6, 6, 24, 37, 3, 3, 1, 1, 3, 4, SDGP_PRUNE_MAGNITUDE},  /* 14: 3:4 magnitude, Cout 37 */
        {4, 5, 7, 3, 5, 3, 3, 1, 1, 4, 4, SDGP_PRUNE_MAGNITUDE},    /* 15: 4:4, Cin 3, Cout 5 */
        {1, 2, 2, 8, 16, 1, 1, 1, 0, 2, 4, SDGP_PRUNE_MVUE},        /* 16: rows == m == 4 */
        {4, 8, 8, 64, 32, 5, 5, 2, 2, 2, 4, SDGP_PRUNE_MVUE},       /* 17: 5x5 stride 2, Cin 64, rows 64 */
        {2, 6, 6, 16, 8, 3, 1, 1, 0, 1, 4, SDGP_PRUNE_MVUE},        /* 18: a 3x1 kernel, rows 48 */
        {2, 12, 12, 3, 16, 7, 7, 2, 3, 4, 8, SDGP_PRUNE_MVUE},      /* 19: 7x7 stride 2 pad 3 (a stem), rows 72 */
        {2, 9, 9, 16, 12, 3, 3, 3, 0, 1, 2, SDGP_PRUNE_MVUE},       /* 20: stride 3 (no overlap), rows 18 */
        {8, 16, 16, 16, 16, 3, 3, 1, 1, 2, 4, SDGP_PRUNE_MVUE},     /* 21: rows 2048 */
        {2, 10, 10, 96, 64, 3, 3, 1, 1, 4, 8, SDGP_PRUNE_MVUE},     /* 22: Cin 96, Cout 64, 4:8, rows 200 */
        {1, 8, 8, 130, 40, 3, 3, 1, 1, 5, 8, SDGP_PRUNE_MAGNITUDE}, /* 23: Cin 130, 5:8 magnitude, rows 64 */
        {2, 13, 12, 20, 33, 3, 3, 1, 1, 4, 8, SDGP_PRUNE_MVUE},     /* 24: 4:8, Cout 33, rows 312 (256 + 56) */
        {2, 6, 6, 24, 20, 3, 3, 1, 1, 8, 8, SDGP_PRUNE_MAGNITUDE},  /* 25: 8:8 (every row), rows 72 */
        {2, 5, 5, 8, 8, 3, 3, 1, 1, 1, 1, SDGP_PRUNE_MVUE},         /* 26: 1:1, rows 50 */
        {2, 6, 6, 1, 16, 3, 3, 1, 1, 2, 4, SDGP_PRUNE_MVUE},        /* 27: Cin 1 (threads without input channels) */
        {2, 9, 9, 2, 70, 3, 3, 2, 0, 3, 8, SDGP_PRUNE_MVUE},        /* 28: Cin 2, Cout 70, 3:8, rows 32 */
    };
    const int nshapes = (int)(sizeof shapes / sizeof *shapes);
    for (int si = 0; si < nshapes; si++) {
        const shape s = shapes[si];
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, s.B, s.H, s.W, s.Cin, s.Cout, s.kh, s.kw, s.stride, s.pad, &e) != SDGP_OK) {
            CHECK(0, "shape %d: %s", si, e.msg);
            continue;
        }
        const int64_t rows = (int64_t)g.B * g.Ho * g.Wo;
        if (rows % s.m) {
            CHECK(0, "shape %d: rows %lld not a multiple of m %d (fix the table)", si, (long long)rows, s.m);
            continue;
        }
        const size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)rows * g.Cout, nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *x = test_xmalloc(nx * 4), *dyd = test_xmalloc(ny * 4), *dyp = test_xmalloc(ny * 4), *want = test_xmalloc(nw * 4),
              *first = test_xmalloc(nw * 4), *dw = test_xmalloc(nw * 4);
        sdgp_nm_tensor t;
        test_fill_normal(x, nx, 500 + si);
        test_fill_normal(dyd, ny, 600 + si);
        if (!prune_rows(dyp, &t, dyd, &g, s.fn, s.n, s.m, 70 + si)) {
            free(x), free(dyd), free(dyp), free(want), free(first), free(dw);
            continue;
        }
        test_wgrad_naive(want, x, dyp, &g);
        char what[200];
        snprintf(what, sizeof what, "shape %d (B%d %dx%d Cin %d Cout %d k%dx%d s%d p%d %s %d:%d rows %lld)", si, s.B, s.H, s.W,
                 s.Cin, s.Cout, s.kh, s.kw, s.stride, s.pad, sdgp_prune_fn_name(s.fn), s.n, s.m, (long long)rows);
        int have_first = 0;
        FOR_EACH_ISA(isa) {
            /* threads 1-3 as the plan chooses its form, then 1-2 with the permute form forced */
            for (int run = 0; run < 5; run++) {
                const int threads = run < 3 ? run + 1 : run - 2, permute = run >= 3;
                if (!run_wgrad(dw, x, &t, &g, s.n, s.m, isa, threads, permute)) continue;
                int co;
                const double err = worst_channel_err(dw, want, &g, &co);
                CHECK(err <= TOL, "%s isa %s, %d threads%s: rel L2 err %.3g in output channel %d against the naive loop",
                      what, sdgp_isa_name(isa), threads, permute ? " (permute form)" : "", err, co);
                if (getenv("SDGP_TEST_VERBOSE"))
                    fprintf(stderr, "%s isa %s %d threads: worst channel rel err %.3g\n", what, sdgp_isa_name(isa),
                            threads, err);
                if (!have_first) {
                    memcpy(first, dw, nw * 4), have_first = 1;
                    continue;
                }
                CHECK(test_bitwise_equal(dw, first, nw * 4), "%s isa %s, %d threads%s: differs from ref 1 thread (rel %.3g)",
                      what, sdgp_isa_name(isa), threads, permute ? " (permute form)" : "", rel_l2(dw, first, nw));
            }
        }
        /* AUTO runs what sdgp_isa_resolve picks, with the same bits */
        sdgp_isa want_isa;
        sdgp_sparse_wgrad *p = NULL;
        if (sdgp_isa_resolve(SDGP_ISA_AUTO, &want_isa, &e) == SDGP_OK &&
            sdgp_sparse_wgrad_create(&p, &g, s.n, s.m, SDGP_ISA_AUTO, 0, &e) == SDGP_OK) {
            CHECK(sdgp_sparse_wgrad_isa(p) == want_isa, "%s: AUTO runs %s, resolve says %s", what,
                  sdgp_isa_name(sdgp_sparse_wgrad_isa(p)), sdgp_isa_name(want_isa));
            poison(dw, nw);
            CHECK(sdgp_sparse_wgrad_run(p, dw, x, &t, &e) == SDGP_OK, "%s: AUTO run: %s", what, e.msg);
            CHECK(!have_first || test_bitwise_equal(dw, first, nw * 4), "%s: AUTO, default threads differs", what);
        } else {
            CHECK(0, "%s: AUTO plan: %s", what, e.msg);
        }
        sdgp_sparse_wgrad_destroy(p);
        sdgp_nm_free(&t);
        free(x), free(dyd), free(dyp), free(want), free(first), free(dw);
    }
}

/* One plan, run on two different (x, dy): the second result is that of the second data alone. */
TEST_CASE(sparse_wgrad_plan_reuse) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 4, 9, 7, 40, 24, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    const size_t nx = (size_t)4 * 9 * 7 * 40, ny = (size_t)4 * 9 * 7 * 24, nw = (size_t)24 * 40 * 9;
    float *x1 = test_xmalloc(nx * 4), *x2 = test_xmalloc(nx * 4), *dyd = test_xmalloc(ny * 4), *dyp = test_xmalloc(ny * 4),
          *dwa = test_xmalloc(nw * 4), *dwb = test_xmalloc(nw * 4), *want = test_xmalloc(nw * 4);
    sdgp_nm_tensor t1, t2;
    test_fill_normal(x1, nx, 31), test_fill_normal(x2, nx, 32), test_fill_normal(dyd, ny, 33);
    int ok = prune_rows(dyp, &t1, dyd, &g, SDGP_PRUNE_MVUE, 2, 4, 1);
    test_fill_normal(dyd, ny, 34);
    ok = prune_rows(dyp, &t2, dyd, &g, SDGP_PRUNE_MVUE, 2, 4, 2) && ok;
    test_wgrad_naive(want, x2, dyp, &g);
    for (int threads = 1; ok && threads <= 2; threads++) {
        sdgp_sparse_wgrad *p = NULL;
        CHECK(sdgp_sparse_wgrad_create(&p, &g, 2, 4, SDGP_ISA_AUTO, threads, &e) == SDGP_OK, "create: %s", e.msg);
        if (!p) continue;
        CHECK(sdgp_sparse_wgrad_run(p, dwa, x1, &t1, &e) == SDGP_OK, "run 1: %s", e.msg);
        poison(dwa, nw);
        CHECK(sdgp_sparse_wgrad_run(p, dwa, x2, &t2, &e) == SDGP_OK, "run 2: %s", e.msg);
        int co;
        const double err = worst_channel_err(dwa, want, &g, &co);
        CHECK(err <= TOL, "%d threads: second run: rel err %.3g (channel %d)", threads, err, co);
        CHECK(sdgp_sparse_wgrad_run(p, dwb, x2, &t2, &e) == SDGP_OK, "run 3: %s", e.msg);
        CHECK(test_bitwise_equal(dwa, dwb, nw * 4), "%d threads: running twice gives other bits", threads);
        /* the caller's workspace (garbage in it: the run must not read what it did not write), its
         * refusals, and back to the plan's own: the same bits each time */
        const size_t wsb = sdgp_sparse_wgrad_workspace_bytes(p);
        CHECK(wsb == 0 || wsb >= (size_t)4 * 11 * 9 * 40 * sizeof(float), "workspace %zu bytes: not the padded input", wsb);
        unsigned char *ws = NULL;
        REQUIRE(posix_memalign((void **)&ws, 64, wsb + 64) == 0, "workspace");
        memset(ws, 0xff, wsb + 64);
        if (wsb) {
            CHECK(sdgp_sparse_wgrad_set_workspace(p, ws, wsb - 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "needs"), "small: %s", e.msg);
            CHECK(sdgp_sparse_wgrad_set_workspace(p, ws + 4, wsb, &e) == SDGP_ERR_INVALID && strstr(e.msg, "aligned"), "align: %s", e.msg);
        }
        CHECK(sdgp_sparse_wgrad_set_workspace(p, ws, wsb, &e) == SDGP_OK, "set: %s", e.msg);
        poison(dwb, nw);
        CHECK(sdgp_sparse_wgrad_run(p, dwb, x2, &t2, &e) == SDGP_OK, "run 4: %s", e.msg);
        CHECK(test_bitwise_equal(dwa, dwb, nw * 4), "%d threads: the caller's workspace gives other bits", threads);
        CHECK(sdgp_sparse_wgrad_set_workspace(p, NULL, 0, &e) == SDGP_OK, "unset: %s", e.msg);
        memset(ws, 0xff, wsb + 64); /* no longer the plan's */
        poison(dwb, nw);
        CHECK(sdgp_sparse_wgrad_run(p, dwb, x2, &t2, &e) == SDGP_OK, "run 5: %s", e.msg);
        CHECK(test_bitwise_equal(dwa, dwb, nw * 4), "%d threads: its own workspace again gives other bits", threads);
        free(ws);
        sdgp_sparse_wgrad_destroy(p);
    }
    sdgp_nm_free(&t1), sdgp_nm_free(&t2);
    free(x1), free(x2), free(dyd), free(dyp), free(dwa), free(dwb), free(want);
}

/* Zero-value slots (groups with fewer than n nonzeros pad with zero values; a slot value set to 0
 * by hand), an all-zero dY (dw exactly 0) and a dY with a big magnitude. The oracle is the naive
 * loop on the decompressed tensor. */
TEST_CASE(sparse_wgrad_zero_slots_and_big_values) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 2, 9, 8, 40, 20, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    const int64_t rows = 2 * 9 * 8;
    const size_t nx = (size_t)rows * 40, ny = (size_t)rows * 20, nw = (size_t)20 * 40 * 9;
    float *x = test_xmalloc(nx * 4), *dyd = test_xmalloc(ny * 4), *dyp = test_xmalloc(ny * 4), *want = test_xmalloc(nw * 4),
          *dw = test_xmalloc(nw * 4), *first = test_xmalloc(nw * 4);
    test_fill_normal(x, nx, 41);
    for (int variant = 0; variant < 3; variant++) {
        static const char *const names[] = {"zeros, ties and denormals in dy, a zeroed slot", "all-zero dy", "a big value in dy"};
        sdgp_nm_tensor t;
        if (variant == 0) test_fill_prune_input(dyd, ny, 42);
        if (variant == 1) memset(dyd, 0, ny * 4);
        if (variant == 2) {
            test_fill_normal(dyd, ny, 43);
            dyd[(size_t)77 * 20 + 3] = 3.0e5f, dyd[(size_t)140 * 20 + 19] = -1.0e6f;
        }
        /* 2:4 MVUE keeps groups with <= 2 nonzeros as they are: zeros stored as slot values */
        if (!prune_rows(dyp, &t, dyd, &g, SDGP_PRUNE_MVUE, 2, 4, 9)) continue;
        if (variant == 0) t.values[5 * 20 + 7] = 0.0f, t.values[0] = -0.0f;
        CHECK(sdgp_nm_decompress(&t, dyp, &e) == SDGP_OK, "decompress: %s", e.msg);
        test_wgrad_naive(want, x, dyp, &g);
        int have_first = 0;
        FOR_EACH_ISA(isa) {
            for (int threads = 1; threads <= 2; threads++) {
                if (!run_wgrad(dw, x, &t, &g, 2, 4, isa, threads, 0)) continue;
                int co;
                const double err = worst_channel_err(dw, want, &g, &co);
                CHECK(err <= TOL, "%s, isa %s, %d threads: rel err %.3g in output channel %d", names[variant],
                      sdgp_isa_name(isa), threads, err, co);
                if (variant == 1) {
                    int zero = 1;
                    for (size_t k = 0; k < nw; k++) zero &= dw[k] == 0.0f;
                    CHECK(zero, "all-zero dy, isa %s, %d threads: dw must be exactly 0", sdgp_isa_name(isa), threads);
                }
                if (have_first)
                    CHECK(test_bitwise_equal(dw, first, nw * 4), "%s, isa %s, %d threads: other bits than the first run",
                          names[variant], sdgp_isa_name(isa), threads);
                else
                    memcpy(first, dw, nw * 4), have_first = 1;
            }
        }
        sdgp_nm_free(&t);
    }
    free(x), free(dyd), free(dyp), free(want), free(dw), free(first);
}

/* create refuses with *out = NULL and a message; run refuses dy of another form and stored
 * indices >= m; destroy(NULL) is fine. */
TEST_CASE(sparse_wgrad_refusals) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 2, 6, 6, 8, 16, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    sdgp_sparse_wgrad *const bogus = (sdgp_sparse_wgrad *)&g; /* not NULL: failures must set *out to NULL */
    sdgp_sparse_wgrad *p;
/* expect: the status create must return (SDGP_OK here: any error) */
#define REFUSE(expect, geom, n, m, isa, threads, what)                                                                       \
    do {                                                                                                                     \
        p = bogus;                                                                                                           \
        e.msg[0] = 0;                                                                                                        \
        sdgp_status st_ = sdgp_sparse_wgrad_create(&p, geom, n, m, isa, threads, &e);                                         \
        CHECK((expect) == SDGP_OK ? st_ != SDGP_OK : st_ == (expect), "%s: status %d (%s)", what, (int)st_, e.msg);           \
        CHECK(p == NULL, "%s: *out must be NULL on failure", what);                                                        \
        CHECK(e.msg[0], "%s: empty message", what);                                                                         \
        if (st_ == SDGP_OK && p != bogus) sdgp_sparse_wgrad_destroy(p);                                                      \
    } while (0)
    REFUSE(SDGP_ERR_INVALID, NULL, 2, 4, SDGP_ISA_AUTO, 1, "NULL geometry");
    REFUSE(SDGP_ERR_INVALID, &g, 0, 4, SDGP_ISA_AUTO, 1, "0:4");
    REFUSE(SDGP_ERR_INVALID, &g, 5, 4, SDGP_ISA_AUTO, 1, "5:4");
    REFUSE(SDGP_ERR_INVALID, &g, -1, 4, SDGP_ISA_AUTO, 1, "-1:4");
    REFUSE(SDGP_ERR_INVALID, &g, 0, 0, SDGP_ISA_AUTO, 1, "0:0");
    REFUSE(SDGP_ERR_INVALID, &g, 2, SDGP_NM_MAX_M + 1, SDGP_ISA_AUTO, 1, "m above SDGP_NM_MAX_M");
    REFUSE(SDGP_ERR_INVALID, &g, 2, 4, SDGP_ISA_AUTO, -1, "threads -1");
    REFUSE(SDGP_OK, &g, 2, 4, (sdgp_isa)7, 1, "an ISA outside the enum");
    for (int isa = 0; isa < SDGP_ISA_COUNT; isa++)
        if (!sdgp_isa_supported((sdgp_isa)isa)) REFUSE(SDGP_OK, &g, 2, 4, (sdgp_isa)isa, 1, "an ISA this CPU lacks");
    sdgp_conv_geom gg = g;
    REQUIRE(sdgp_conv_geom_set_groups(&gg, 2, &e) == SDGP_OK, "groups: %s", e.msg);
    REFUSE(SDGP_ERR_UNSUPPORTED, &gg, 2, 4, SDGP_ISA_AUTO, 1, "groups 2");
    sdgp_conv_geom bad = g;
    bad.Ho = 99; /* not what sdgp_conv_geom_init accepts */
    REFUSE(SDGP_ERR_INVALID, &bad, 2, 4, SDGP_ISA_AUTO, 1, "inconsistent Ho");
    CHECK(sdgp_sparse_wgrad_create(NULL, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && e.msg[0], "NULL out: %s", e.msg);
    /* valid N:M patterns the kernel does not run: m must divide 8 (the header), on a geometry of 128 rows */
    sdgp_conv_geom g128;
    REQUIRE(sdgp_conv_geom_init(&g128, 2, 8, 8, 8, 16, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    REFUSE(SDGP_ERR_UNSUPPORTED, &g128, 2, 3, SDGP_ISA_AUTO, 1, "2:3");
    REFUSE(SDGP_ERR_UNSUPPORTED, &g128, 4, 16, SDGP_ISA_AUTO, 1, "4:16");
    REFUSE(SDGP_ERR_UNSUPPORTED, &g128, 4, 32, SDGP_ISA_AUTO, 1, "4:32");
    REFUSE(SDGP_ERR_UNSUPPORTED, &g128, 1, SDGP_NM_MAX_M, SDGP_ISA_AUTO, 1, "1:SDGP_NM_MAX_M");
    /* B*Ho*Wo = 25 is not a multiple of m */
    sdgp_conv_geom g25;
    REQUIRE(sdgp_conv_geom_init(&g25, 1, 5, 5, 8, 16, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    REFUSE(SDGP_ERR_INVALID, &g25, 2, 4, SDGP_ISA_AUTO, 1, "rows 25 at 2:4");
    REFUSE(SDGP_ERR_INVALID, &g25, 1, 2, SDGP_ISA_AUTO, 1, "rows 25 at 1:2");
#undef REFUSE
    /* 1:1 and 8:8 plans are fine; 1:1 even on 25 rows */
    const int ok_nm[][2] = {{1, 1}, {8, 8}, {1, 8}};
    for (int i = 0; i < 3; i++) {
        p = NULL;
        CHECK(sdgp_sparse_wgrad_create(&p, &g128, ok_nm[i][0], ok_nm[i][1], SDGP_ISA_AUTO, 0, &e) == SDGP_OK && p, "%d:%d: %s",
              ok_nm[i][0], ok_nm[i][1], e.msg);
        sdgp_sparse_wgrad_destroy(p);
    }
    p = NULL;
    CHECK(sdgp_sparse_wgrad_create(&p, &g25, 1, 1, SDGP_ISA_AUTO, 0, &e) == SDGP_OK && p, "1:1 on 25 rows: %s", e.msg);
    sdgp_sparse_wgrad_destroy(p);

    /* run: dy of another form */
    const int64_t rows = 2 * 6 * 6;
    const size_t nx = (size_t)rows * 8, ny = (size_t)rows * 16, nw = (size_t)16 * 8 * 9;
    float *x = test_xmalloc(nx * 4), *dyd = test_xmalloc(ny * 4), *dyp = test_xmalloc(ny * 4), *dw = test_xmalloc(nw * 4),
          *want = test_xmalloc(nw * 4);
    test_fill_normal(x, nx, 51), test_fill_normal(dyd, ny, 52);
    sdgp_nm_tensor t, t14, tch;
    const int ok = prune_rows(dyp, &t, dyd, &g, SDGP_PRUNE_MVUE, 2, 4, 3);
    const int ok14 = prune_rows(dyp, &t14, dyd, &g, SDGP_PRUNE_MVUE, 1, 4, 3);
    memset(&tch, 0, sizeof tch);
    const int okch = sdgp_nm_alloc(&tch, SDGP_AXIS_CHANNEL, 2, 4, rows, 16, &e) == SDGP_OK;
    CHECK(okch, "alloc channel form: %s", e.msg);
    p = NULL;
    CHECK(sdgp_sparse_wgrad_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 2, &e) == SDGP_OK, "create: %s", e.msg);
    if (p && ok && ok14 && okch) {
        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4); /* channel axis */
        CHECK(sdgp_prune(&cfg, dyd, 2, 36, 16, NULL, &tch, &e) == SDGP_OK, "channel prune: %s", e.msg);
        sdgp_nm_tensor u;
#define RUN_REFUSED(dwp, xp, tp, what)                                                                                       \
    do {                                                                                                                     \
        e.msg[0] = 0;                                                                                                        \
        sdgp_status st_ = sdgp_sparse_wgrad_run(p, dwp, xp, tp, &e);                                                         \
        CHECK(st_ == SDGP_ERR_INVALID, "%s: status %d (%s)", what, (int)st_, e.msg);                                          \
        CHECK(e.msg[0], "%s: empty message", what);                                                                         \
    } while (0)
        RUN_REFUSED(NULL, x, &t, "NULL dw");
        RUN_REFUSED(dw, NULL, &t, "NULL x");
        RUN_REFUSED(dw, x, NULL, "NULL dy");
        u = t, u.values = NULL;
        RUN_REFUSED(dw, x, &u, "NULL dy values");
        u = t, u.index = NULL;
        RUN_REFUSED(dw, x, &u, "NULL dy index");
        RUN_REFUSED(dw, x, &tch, "axis CHANNEL (same n:m, rows, C)");
        u = t, u.axis = SDGP_AXIS_CHANNEL;
        RUN_REFUSED(dw, x, &u, "row-form buffers labelled axis CHANNEL");
        RUN_REFUSED(dw, x, &t14, "1:4 dy on a 2:4 plan");
        u = t, u.m = 8; /* the buffers of 2:4 are bigger than those of 2:8 */
        RUN_REFUSED(dw, x, &u, "2:8 dy on a 2:4 plan");
        u = t, u.rows = rows - 4;
        RUN_REFUSED(dw, x, &u, "rows - 4");
        u = t, u.rows = rows + 4;
        RUN_REFUSED(dw, x, &u, "rows + 4");
        u = t, u.C = 8;
        RUN_REFUSED(dw, x, &u, "C 8 != Cout 16");
        u = t, u.C = 32;
        RUN_REFUSED(dw, x, &u, "C 32 != Cout 16");
        /* a stored index >= m (the last slot, so a kernel that checks lazily still meets it) */
        const size_t slots = sdgp_nm_slots(&t);
        uint8_t keep = t.index[slots - 1];
        t.index[slots - 1] = 4;
        RUN_REFUSED(dw, x, &t, "a stored index 4 on 2:4");
        t.index[slots - 1] = 255;
        RUN_REFUSED(dw, x, &t, "a stored index 255 on 2:4");
        t.index[slots - 1] = keep;
        keep = t.index[0], t.index[0] = 200;
        RUN_REFUSED(dw, x, &t, "a stored index 200 in the first slot");
        t.index[0] = keep;
        CHECK(sdgp_sparse_wgrad_run(NULL, dw, x, &t, &e) == SDGP_ERR_INVALID, "NULL plan");
        CHECK(sdgp_sparse_wgrad_run(NULL, dw, x, &t, NULL) == SDGP_ERR_INVALID, "NULL plan, NULL err");
        CHECK(sdgp_sparse_wgrad_run(p, dw, x, &t14, NULL) == SDGP_ERR_INVALID, "1:4 dy, NULL err");
#undef RUN_REFUSED
        /* the plan still works after the refusals */
        poison(dw, nw);
        CHECK(sdgp_sparse_wgrad_run(p, dw, x, &t, &e) == SDGP_OK, "good run after refusals: %s", e.msg);
        float *dyp24 = test_xmalloc(ny * 4);
        CHECK(sdgp_nm_decompress(&t, dyp24, &e) == SDGP_OK, "decompress: %s", e.msg);
        test_wgrad_naive(want, x, dyp24, &g);
        int co;
        CHECK(worst_channel_err(dw, want, &g, &co) <= TOL, "after refusals: rel err %.3g", worst_channel_err(dw, want, &g, &co));
        free(dyp24);
    }
    sdgp_sparse_wgrad_destroy(p);
    sdgp_sparse_wgrad_destroy(NULL);
    sdgp_nm_free(&t), sdgp_nm_free(&t14), sdgp_nm_free(&tch);
    free(x), free(dyd), free(dyp), free(dw), free(want);
}

/* The result equals oneDNN's dense backward-weights on the dense pruned tensor. */
TEST_CASE(sparse_wgrad_matches_onednn_on_pruned_tensor) {
    sdgp_conv_geom g;
    sdgp_error e;
    const int B = 4;
    REQUIRE(sdgp_conv_geom_init(&g, B, 8, 8, 64, 64, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    const size_t nx = (size_t)B * 64 * 64, ny = (size_t)B * 64 * 64, nw = (size_t)64 * 64 * 9;
    float *x = test_xmalloc(nx * 4), *dyd = test_xmalloc(ny * 4), *dyp = test_xmalloc(ny * 4), *dw = test_xmalloc(nw * 4),
          *ref = test_xmalloc(nw * 4), *want = test_xmalloc(nw * 4);
    test_fill_normal(x, nx, 61), test_fill_normal(dyd, ny, 62);
    sdgp_nm_tensor t;
    sdgp_conv *c = NULL;
    sdgp_sparse_wgrad *p = NULL;
    if (prune_rows(dyp, &t, dyd, &g, SDGP_PRUNE_MVUE, 2, 4, 5)) {
        sdgp_status st = sdgp_conv_create(&c, &g, 0, 2, &e); /* not inside CHECK's condition twice */
        CHECK(st == SDGP_OK, "oneDNN create: %s", e.msg);
        CHECK(sdgp_sparse_wgrad_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 2, &e) == SDGP_OK, "create: %s", e.msg);
        if (c && p) {
            CHECK(sdgp_conv_backward_weights(c, ref, NULL, x, dyp, &e) == SDGP_OK, "oneDNN backward-weights: %s", e.msg);
            poison(dw, nw);
            CHECK(sdgp_sparse_wgrad_run(p, dw, x, &t, &e) == SDGP_OK, "run: %s", e.msg);
            test_wgrad_naive(want, x, dyp, &g);
            const double err = rel_l2(dw, ref, nw), err_naive = rel_l2(ref, want, nw);
            CHECK(err_naive <= TOL, "oneDNN against the naive loop: rel L2 %.3g (the oracle is off)", err_naive);
            CHECK(err <= TOL, "sparse %s against oneDNN on the pruned tensor: rel L2 %.3g", sdgp_isa_name(sdgp_sparse_wgrad_isa(p)),
                  err);
            if (getenv("SDGP_TEST_VERBOSE")) fprintf(stderr, "against oneDNN: rel L2 %.3g (oneDNN vs naive %.3g)\n", err, err_naive);
        }
        sdgp_nm_free(&t);
    }
    sdgp_conv_destroy(c);
    sdgp_sparse_wgrad_destroy(p);
    free(x), free(dyd), free(dyp), free(dw), free(ref), free(want);
}

int main(void) {
    RUN(sparse_wgrad_matches_naive_every_isa_and_thread_count);
    RUN(sparse_wgrad_plan_reuse);
    RUN(sparse_wgrad_zero_slots_and_big_values);
    RUN(sparse_wgrad_refusals);
    RUN(sparse_wgrad_matches_onednn_on_pruned_tensor);
    return test_finish();
}
