/* The sparse-weight data gradient (sdgp_sparse_wdata_*), Winograd F(2x2,3x3) and F(4x4,3x3),
 * against the naive backward-data loop: weights projected to block16 / block32 form by
 * sdgp_weights_project (SR-STE, hard masks), every ISA path, 1 and 2 threads, padding 0-2, partial
 * last blocks, Cin not a multiple of 16 / 64 and larger than 64, n:m up to 4:4, 1x1 and 2x2 images,
 * many images, a wide layer; bitwise equality across threads and ISA paths (the header's promise);
 * dx fully overwritten; weights that are not of the plan's form are refused; bad plans and NULL
 * arguments; repacking replaces the weights. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/sparse.h"

typedef struct {
    int B, H, W, Cin, Cout, pad, n, m, block; /* all 3x3 stride 1 */
} shape;

/* NaN everywhere: a position the run does not write shows up in the error */
static void poison(float *a, size_t n) { memset(a, 0xff, n * sizeof *a); }

static int run_wdata(float *dx, const float *dy, const float *w, const sdgp_conv_geom *g, const shape *s, sdgp_isa isa,
                     int threads, int tile) {
    sdgp_sparse_wdata *p = NULL;
    sdgp_error e;
    int ok = sdgp_sparse_wdata_create(&p, g, s->n, s->m, s->block, tile, isa, threads, &e) == SDGP_OK;
    CHECK(ok && p, "create (%s, tile %d, %d threads): %s", sdgp_isa_name(isa), tile, threads, e.msg);
    if (!ok || !p) return 0;
    CHECK(sdgp_sparse_wdata_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_wdata_isa(p)), sdgp_isa_name(isa));
    ok = sdgp_sparse_wdata_pack(p, w, &e) == SDGP_OK;
    CHECK(ok, "pack (%s, tile %d, %d threads): %s", sdgp_isa_name(isa), tile, threads, e.msg);
    poison(dx, (size_t)g->B * g->H * g->W * g->Cin);
    ok = ok && sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_OK;
    CHECK(ok, "run (%s, tile %d, %d threads): %s", sdgp_isa_name(isa), tile, threads, e.msg);
    sdgp_sparse_wdata_destroy(p);
    return ok;
}

TEST_CASE(sparse_wdata_matches_naive_every_isa_and_thread_count) {
    const shape shapes[] = {
        /* B   H   W  Cin Cout pad n  m  block */
        {2, 9, 11, 16, 32, 1, 2, 4, 32},    /* 0: borders on every side, one block */
        {3, 7, 9, 32, 48, 0, 2, 4, 16},     /* 1: pad 0, odd H/W, several images */
        {2, 5, 6, 16, 32, 2, 2, 4, 32},     /* 2: pad 2 (Ho, Wo larger than H, W) */
        {3, 8, 8, 32, 80, 1, 2, 4, 32},     /* 3: a last block of 16 of 32 */
        {2, 7, 13, 24, 40, 1, 2, 4, 16},    /* 4: Cin 24 (not a multiple of 16), a last block of 8 of 16 */
        {2, 6, 7, 40, 32, 1, 1, 4, 32},     /* 5: Cin 40, 1:4 */
        {2, 8, 8, 96, 48, 1, 4, 8, 16},     /* 6: Cin 96 (two column chunks), 4:8 */
        {2, 6, 6, 128, 64, 1, 2, 4, 32},    /* 7: Cin 128 */
        {2, 4, 4, 64, 32, 1, 4, 32, 32},    /* 8: 4:32, a 4x4 image: every pixel a border */
        {2, 6, 5, 64, 32, 1, 3, 4, 32},     /* 9: 3:4 (n/m > 1/2: the narrower chunk) */
        {1, 6, 6, 128, 48, 2, 3, 4, 16},    /* 10: 3:4 over several chunks, pad 2, last block of 16 */
        {2, 5, 7, 48, 32, 0, 4, 4, 16},     /* 11: 4:4 (dense), pad 0 */
        {1, 7, 6, 96, 40, 1, 4, 4, 32},     /* 12: 4:4, Cin 96, a last block of 8 of 32 */
        {2, 5, 5, 100, 40, 0, 3, 4, 16},    /* 13: Cin 100 (> 64, not a multiple of 16), pad 0 */
        {1, 1, 1, 8, 20, 1, 2, 4, 16},      /* 14: 1x1 image: only the centre tap */
        {2, 1, 1, 16, 32, 2, 2, 4, 32},     /* 15: 1x1 image, pad 2 (a 3x3 output) */
        {3, 2, 2, 16, 32, 1, 1, 4, 32},     /* 16: 2x2 images */
        {2, 2, 2, 24, 16, 2, 2, 4, 16},     /* 17: 2x2 images, pad 2 (a 4x4 dy) */
        {2, 11, 9, 40, 48, 2, 3, 4, 16},    /* 18: odd H/W, pad 2, Cin 40 */
        {2, 5, 5, 8, 8, 1, 2, 4, 32},       /* 19: Cout 8 < block 32: one partial block only */
        {1, 6, 6, 4, 16, 1, 1, 4, 16},      /* 20: Cin 4: one group */
        {9, 16, 16, 64, 64, 1, 2, 4, 32},   /* 21: many images, more work units than threads */
        {2, 8, 8, 256, 256, 1, 2, 4, 32},   /* 22: Cin, Cout 256 on 8x8: many blocks and chunks */
        {1, 8, 8, 264, 272, 1, 4, 8, 16},   /* 23: Cin 264 (not a multiple of 16), Cout 272 */
    };
    const int nshapes = (int)(sizeof shapes / sizeof *shapes);
    for (int si = 0; si < nshapes; si++) {
        const shape *s = &shapes[si];
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, s->B, s->H, s->W, s->Cin, s->Cout, 3, 3, 1, s->pad, &e) != SDGP_OK) {
            CHECK(0, "shape %d: %s", si, e.msg);
            continue;
        }
        CHECK(sdgp_sparse_wdata_supports(&g), "shape %d: 3x3 stride 1 pad %d not supported", si, s->pad);
        size_t nx = (size_t)s->B * s->H * s->W * s->Cin, ny = (size_t)s->B * g.Ho * g.Wo * s->Cout,
               nw = (size_t)s->Cout * s->Cin * 9;
        float *dy = test_xmalloc(ny * 4), *w0 = test_xmalloc(nw * 4), *w = test_xmalloc(nw * 4),
              *want = test_xmalloc(nx * 4), *dx1 = test_xmalloc(nx * 4), *dx2 = test_xmalloc(nx * 4),
              *dxref = test_xmalloc(nx * 4);
        test_fill_normal(dy, ny, 300 + si);
        test_fill_normal(w0, nw, 400 + si);
        sdgp_weights_project(w, w0, s->Cout, s->Cin, 9, SDGP_WEIGHTS_SRSTE,
                             s->block == 32 ? SDGP_WGROUP_BLOCK32 : SDGP_WGROUP_BLOCK16, s->n, s->m, 1.0f);
        sdgp_conv_backward_data_naive(want, dy, w, &g);
        for (int tile = 2; tile <= 4; tile += 2) {
            const char *algo = tile == 4 ? "F(4x4)" : "F(2x2)";
            /* the transforms round: F(2x2) adds only, F(4x4)'s matrices hold 4, 5, 8 and 1/6 */
            const double tol = tile == 4 ? 2e-5 : 4e-6;
            int have_ref = run_wdata(dxref, dy, w, &g, s, SDGP_ISA_REF, 1, tile);
            FOR_EACH_ISA(isa) {
                const char *in = sdgp_isa_name(isa);
                if (!run_wdata(dx1, dy, w, &g, s, isa, 1, tile) || !run_wdata(dx2, dy, w, &g, s, isa, 2, tile))
                    continue;
                double err = test_rel_err(dx1, want, nx);
                CHECK(err <= tol, "shape %d (B%d %dx%d Cin %d Cout %d pad %d %d:%d block %d) %s isa %s: rel err %.3g against the naive backward-data",
                      si, s->B, s->H, s->W, s->Cin, s->Cout, s->pad, s->n, s->m, s->block, algo, in, err);
                if (getenv("SDGP_TEST_VERBOSE")) fprintf(stderr, "shape %d %s isa %s: rel err %.3g\n", si, algo, in, err);
                CHECK(test_bitwise_equal(dx1, dx2, nx * 4), "shape %d %s isa %s: 1 and 2 threads differ (rel %.3g)", si, algo, in,
                      test_rel_err(dx2, dx1, nx));
                CHECK(!have_ref || test_bitwise_equal(dx1, dxref, nx * 4), "shape %d %s isa %s: differs from the reference path (rel %.3g)",
                      si, algo, in, test_rel_err(dx1, dxref, nx));
            }
        }
        free(dy), free(w0), free(w), free(want), free(dx1), free(dx2), free(dxref);
    }
}

/* S-STE may shrink a kept unit to exactly zero: a group with fewer than n nonzero channels packs;
 * a group with more than n is refused, naming where, and the plan then holds no weights. */
TEST_CASE(sparse_wdata_pack_accepts_fewer_refuses_more) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 1, 4, 4, 8, 32, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    size_t nw = (size_t)32 * 8 * 9, nx = (size_t)16 * 8, ny = (size_t)16 * 32;
    float *w = test_xmalloc(nw * 4), *dy = test_xmalloc(ny * 4), *dx = test_xmalloc(nx * 4), *want = test_xmalloc(nx * 4);
    test_fill_normal(dy, ny, 7);
    for (size_t i = 0; i < nw; i++) w[i] = 0.0f;
    /* block 0 keeps only input channel 5 (group 4-7), nothing of group 0-3 */
    for (int co = 0; co < 32; co++)
        for (int t = 0; t < 9; t++) w[((size_t)co * 8 + 5) * 9 + t] = 0.01f * (float)(co + t);
    sdgp_conv_backward_data_naive(want, dy, w, &g);
    for (int tile = 2; tile <= 4; tile += 2) {
        const double tol = tile == 4 ? 2e-5 : 4e-6;
        sdgp_sparse_wdata *p = NULL;
        CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 32, tile, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create tile %d: %s", tile, e.msg);
        if (!p) continue;
        CHECK(sdgp_sparse_wdata_pack(p, w, &e) == SDGP_OK, "tile %d: fewer than n kept: %s", tile, e.msg);
        poison(dx, nx);
        CHECK(sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_OK, "tile %d: run: %s", tile, e.msg);
        CHECK(test_rel_err(dx, want, nx) <= tol, "tile %d: fewer than n kept: rel err %.3g", tile, test_rel_err(dx, want, nx));
        /* input channels 0-3 get no gradient at all */
        int zero = 1;
        for (int px = 0; px < 16; px++)
            for (int c = 0; c < 4; c++) zero &= dx[px * 8 + c] == 0.0f;
        CHECK(zero, "tile %d: input channels with no kept weight must get 0", tile);
        sdgp_sparse_wdata_destroy(p);
    }
    /* channel 31 uses input 1, channel 0 inputs 2 and 3: three of group 0-3 in one block */
    float *wbad = test_xmalloc(nw * 4);
    memcpy(wbad, w, nw * 4);
    wbad[((size_t)31 * 8 + 1) * 9 + 4] = 1.0f;
    wbad[((size_t)0 * 8 + 2) * 9 + 0] = 1.0f;
    wbad[((size_t)0 * 8 + 3) * 9 + 8] = 1.0f;
    for (int tile = 2; tile <= 4; tile += 2) {
        for (int threads = 1; threads <= 2; threads++) {
            sdgp_sparse_wdata *p = NULL;
            CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 32, tile, SDGP_ISA_AUTO, threads, &e) == SDGP_OK, "create: %s", e.msg);
            if (!p) continue;
            /* a good pack first: the refused one must not leave these weights usable */
            CHECK(sdgp_sparse_wdata_pack(p, w, &e) == SDGP_OK, "pack: %s", e.msg);
            e.msg[0] = 0;
            CHECK(sdgp_sparse_wdata_pack(p, wbad, &e) == SDGP_ERR_INVALID, "tile %d, %d threads: three of four kept must be refused",
                  tile, threads);
            CHECK(strstr(e.msg, "output channels 0-31") && strstr(e.msg, "input channels 0-3"), "tile %d: message: %s", tile, e.msg);
            CHECK(sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_ERR_INVALID, "tile %d: a refused pack leaves no weights: %s", tile,
                  e.msg);
            /* and a good pack afterwards works again */
            CHECK(sdgp_sparse_wdata_pack(p, w, &e) == SDGP_OK, "pack after a refused one: %s", e.msg);
            poison(dx, nx);
            CHECK(sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_OK, "run after a refused pack and a good one: %s", e.msg);
            CHECK(test_rel_err(dx, want, nx) <= (tile == 4 ? 2e-5 : 4e-6), "tile %d: after re-pack: rel err %.3g", tile,
                  test_rel_err(dx, want, nx));
            sdgp_sparse_wdata_destroy(p);
        }
    }
    /* the second block (output channels 32-63 of Cout 48, i.e. 32-47) named with its real end */
    sdgp_conv_geom g48;
    REQUIRE(sdgp_conv_geom_init(&g48, 1, 4, 4, 8, 48, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    float *w48 = test_xmalloc((size_t)48 * 8 * 9 * 4);
    for (size_t i = 0; i < (size_t)48 * 8 * 9; i++) w48[i] = 0.0f;
    w48[((size_t)40 * 8 + 4) * 9 + 1] = 1.0f, w48[((size_t)41 * 8 + 5) * 9 + 2] = 1.0f, w48[((size_t)47 * 8 + 7) * 9 + 3] = 1.0f;
    sdgp_sparse_wdata *p = NULL;
    CHECK(sdgp_sparse_wdata_create(&p, &g48, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    if (p) {
        e.msg[0] = 0;
        CHECK(sdgp_sparse_wdata_pack(p, w48, &e) == SDGP_ERR_INVALID, "three of group 4-7 in block 32-47 must be refused");
        CHECK(strstr(e.msg, "output channels 32-47") && strstr(e.msg, "input channels 4-7"), "message: %s", e.msg);
        sdgp_sparse_wdata_destroy(p);
    }
    free(w48);
    free(w), free(wbad), free(dy), free(dx), free(want);
}

TEST_CASE(sparse_wdata_bad_plans) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 1, 4, 4, 8, 32, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    sdgp_sparse_wdata *p = (sdgp_sparse_wdata *)&g; /* not NULL: failures must set it to NULL */
    CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 8, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "block=8"),
          "block 8: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 3, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "Cin=8"),
          "Cin 8, m 3: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 5, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "5:4: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 0, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "0:4: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 32, 3, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "tile 3"),
          "tile 3: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 32, 0, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "tile 0: %s", e.msg);
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, NULL, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "NULL geometry: %s", e.msg);
    CHECK(sdgp_sparse_wdata_create(NULL, &g, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "NULL output: %s", e.msg);

    /* geometries without a kernel */
    sdgp_conv_geom s2, k5, k1;
    REQUIRE(sdgp_conv_geom_init(&s2, 1, 8, 8, 8, 32, 3, 3, 2, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    CHECK(!sdgp_sparse_wdata_supports(&s2), "stride 2 must not be supported");
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &s2, 2, 4, 32, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "stride 2"),
          "stride 2: %s", e.msg);
    REQUIRE(sdgp_conv_geom_init(&k5, 1, 8, 8, 8, 32, 5, 5, 1, 2, &e) == SDGP_OK, "geom: %s", e.msg);
    CHECK(!sdgp_sparse_wdata_supports(&k5), "5x5 must not be supported");
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &k5, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p, "5x5: %s", e.msg);
    REQUIRE(sdgp_conv_geom_init(&k1, 1, 8, 8, 8, 32, 1, 1, 1, 0, &e) == SDGP_OK, "geom: %s", e.msg);
    CHECK(!sdgp_sparse_wdata_supports(&k1), "1x1 must not be supported");
    p = (sdgp_sparse_wdata *)&g;
    CHECK(sdgp_sparse_wdata_create(&p, &k1, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p, "1x1: %s", e.msg);
    for (int pad = 0; pad <= 2; pad++) {
        sdgp_conv_geom gp;
        REQUIRE(sdgp_conv_geom_init(&gp, 1, 8, 8, 8, 32, 3, 3, 1, pad, &e) == SDGP_OK, "geom: %s", e.msg);
        CHECK(sdgp_sparse_wdata_supports(&gp), "3x3 stride 1 pad %d must be supported", pad);
    }

    /* NULL arguments to pack and run; run before any pack */
    float *w0 = test_xmalloc((size_t)32 * 8 * 9 * 4), *w = test_xmalloc((size_t)32 * 8 * 9 * 4),
          *dy = test_xmalloc((size_t)16 * 32 * 4), *dx = test_xmalloc((size_t)16 * 8 * 4);
    test_fill_normal(w0, (size_t)32 * 8 * 9, 11);
    sdgp_weights_project(w, w0, 32, 8, 9, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_BLOCK32, 2, 4, 1.0f);
    test_fill_normal(dy, (size_t)16 * 32, 12);
    p = NULL;
    CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 32, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    if (p) {
        CHECK(sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_ERR_INVALID, "run before pack: %s", e.msg);
        CHECK(sdgp_sparse_wdata_pack(NULL, w, &e) == SDGP_ERR_INVALID, "pack NULL plan: %s", e.msg);
        CHECK(sdgp_sparse_wdata_pack(p, NULL, &e) == SDGP_ERR_INVALID, "pack NULL weights: %s", e.msg);
        CHECK(sdgp_sparse_wdata_pack(p, w, &e) == SDGP_OK, "pack: %s", e.msg);
        CHECK(sdgp_sparse_wdata_run(NULL, dx, dy, &e) == SDGP_ERR_INVALID, "run NULL plan: %s", e.msg);
        CHECK(sdgp_sparse_wdata_run(p, NULL, dy, &e) == SDGP_ERR_INVALID, "run NULL dx: %s", e.msg);
        CHECK(sdgp_sparse_wdata_run(p, dx, NULL, &e) == SDGP_ERR_INVALID, "run NULL dy: %s", e.msg);
        CHECK(sdgp_sparse_wdata_pack(NULL, w, NULL) == SDGP_ERR_INVALID, "pack NULL plan, NULL err");
        CHECK(sdgp_sparse_wdata_run(p, dx, dy, &e) == SDGP_OK, "run after the NULL calls: %s", e.msg);
        sdgp_sparse_wdata_destroy(p);
    }
    sdgp_sparse_wdata_destroy(NULL);
    free(w0), free(w), free(dy), free(dx);
}

/* One plan packed with w1, run, then packed with w2 (another mask: 1:4 kept channels are a subset
 * pattern a 2:4 plan accepts, at other places) must give exactly what a fresh plan packed with w2
 * gives: nothing of w1 may stay. */
TEST_CASE(sparse_wdata_repack_replaces) {
    sdgp_conv_geom g;
    sdgp_error e;
    REQUIRE(sdgp_conv_geom_init(&g, 3, 9, 7, 40, 48, 3, 3, 1, 1, &e) == SDGP_OK, "geom: %s", e.msg);
    size_t nx = (size_t)3 * 9 * 7 * 40, ny = (size_t)3 * 9 * 7 * 48, nw = (size_t)48 * 40 * 9;
    float *w0 = test_xmalloc(nw * 4), *w1 = test_xmalloc(nw * 4), *w2 = test_xmalloc(nw * 4), *dy = test_xmalloc(ny * 4),
          *dxa = test_xmalloc(nx * 4), *dxb = test_xmalloc(nx * 4), *want = test_xmalloc(nx * 4);
    test_fill_normal(w0, nw, 21);
    sdgp_weights_project(w1, w0, 48, 40, 9, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_BLOCK16, 2, 4, 1.0f);
    test_fill_normal(w0, nw, 22);
    sdgp_weights_project(w2, w0, 48, 40, 9, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_BLOCK16, 1, 4, 1.0f);
    test_fill_normal(dy, ny, 23);
    sdgp_conv_backward_data_naive(want, dy, w2, &g);
    for (int tile = 2; tile <= 4; tile += 2) {
        for (int threads = 1; threads <= 2; threads++) {
            sdgp_sparse_wdata *p = NULL, *q = NULL;
            CHECK(sdgp_sparse_wdata_create(&p, &g, 2, 4, 16, tile, SDGP_ISA_AUTO, threads, &e) == SDGP_OK, "create: %s", e.msg);
            CHECK(sdgp_sparse_wdata_create(&q, &g, 2, 4, 16, tile, SDGP_ISA_AUTO, threads, &e) == SDGP_OK, "create: %s", e.msg);
            if (p && q) {
                CHECK(sdgp_sparse_wdata_pack(p, w1, &e) == SDGP_OK, "pack w1: %s", e.msg);
                CHECK(sdgp_sparse_wdata_run(p, dxa, dy, &e) == SDGP_OK, "run w1: %s", e.msg);
                CHECK(sdgp_sparse_wdata_pack(p, w2, &e) == SDGP_OK, "pack w2: %s", e.msg);
                poison(dxa, nx);
                CHECK(sdgp_sparse_wdata_run(p, dxa, dy, &e) == SDGP_OK, "run w2: %s", e.msg);
                CHECK(sdgp_sparse_wdata_pack(q, w2, &e) == SDGP_OK, "fresh pack w2: %s", e.msg);
                poison(dxb, nx);
                CHECK(sdgp_sparse_wdata_run(q, dxb, dy, &e) == SDGP_OK, "fresh run w2: %s", e.msg);
                CHECK(test_bitwise_equal(dxa, dxb, nx * 4), "tile %d, %d threads: re-packed plan differs from a fresh one (rel %.3g)",
                      tile, threads, test_rel_err(dxa, dxb, nx));
                double err = test_rel_err(dxa, want, nx);
                CHECK(err <= (tile == 4 ? 2e-5 : 4e-6), "tile %d, %d threads: re-packed: rel err %.3g against w2's naive", tile,
                      threads, err);
                /* running twice gives the same bits (no state carried between runs) */
                CHECK(sdgp_sparse_wdata_run(p, dxb, dy, &e) == SDGP_OK, "run again: %s", e.msg);
                CHECK(test_bitwise_equal(dxa, dxb, nx * 4), "tile %d, %d threads: a second run differs", tile, threads);
            }
            sdgp_sparse_wdata_destroy(p);
            sdgp_sparse_wdata_destroy(q);
        }
    }
    free(w0), free(w1), free(w2), free(dy), free(dxa), free(dxb), free(want);
}

int main(void) {
    RUN(sparse_wdata_matches_naive_every_isa_and_thread_count);
    RUN(sparse_wdata_pack_accepts_fewer_refuses_more);
    RUN(sparse_wdata_bad_plans);
    RUN(sparse_wdata_repack_replaces);
    return test_finish();
}
