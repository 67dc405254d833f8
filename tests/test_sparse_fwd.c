/* The sparse-weight forward (sdgp_sparse_fwd_*), direct and Winograd, against the naive
 * convolution: weights projected to block16 / block32 form by sdgp_weights_project (SR-STE, hard
 * masks), every ISA path, thread counts, strides, padding, 1x1 and borders; bitwise equality across
 * threads and ISA paths (the header's promise); weights that are not of the plan's form are
 * refused. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>

#include "harness.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/sparse.h"

typedef struct {
    int B, H, W, Cin, Cout, k, stride, pad, n, m, block;
} shape;

static int run_fwd(float *y, const float *x, const float *w, const sdgp_conv_geom *g, const shape *s, sdgp_isa isa,
                   int threads, int wtile) {
    sdgp_sparse_fwd *p = NULL;
    sdgp_error e;
    int ok = (wtile ? sdgp_sparse_fwd_create_wino(&p, g, s->n, s->m, s->block, wtile, isa, threads, &e)
                    : sdgp_sparse_fwd_create(&p, g, s->n, s->m, s->block, isa, threads, &e)) == SDGP_OK;
    CHECK(ok, "create: %s", e.msg);
    if (!ok) return 0;
    CHECK(sdgp_sparse_fwd_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_fwd_isa(p)), sdgp_isa_name(isa));
    ok = sdgp_sparse_fwd_pack(p, w, &e) == SDGP_OK;
    CHECK(ok, "pack: %s", e.msg);
    ok = ok && sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK;
    CHECK(ok, "run: %s", e.msg);
    sdgp_sparse_fwd_destroy(p);
    return ok;
}

TEST_CASE(sparse_fwd_matches_naive_every_isa_and_thread_count) {
    const shape shapes[] = {
        {2, 9, 11, 16, 32, 3, 1, 1, 2, 4, 32},    /* borders on every side, one block */
        {3, 8, 8, 32, 80, 3, 1, 1, 2, 4, 32},     /* a last block of 16 of 32 */
        {2, 7, 13, 24, 40, 3, 1, 1, 2, 4, 16},    /* block 16, a last block of 8 */
        {2, 10, 10, 32, 64, 3, 2, 1, 2, 4, 32},   /* stride 2 */
        {2, 6, 6, 64, 48, 1, 2, 0, 4, 8, 16},     /* 1x1 stride 2 (a downsample), 4:8 */
        {1, 5, 5, 16, 32, 5, 1, 2, 1, 4, 32},     /* 5x5, 1:4 */
        {2, 4, 4, 64, 32, 3, 1, 1, 4, 32, 32},    /* 4:32, a 4x4 image: every pixel a border */
        {1, 1, 1, 8, 20, 3, 1, 1, 2, 4, 16},      /* 1x1 image: only the centre tap */
        {4, 6, 27, 16, 32, 3, 1, 1, 2, 4, 32},    /* rows longer than a call (12 pixels) */
        {5, 7, 9, 32, 48, 3, 1, 0, 2, 4, 16},     /* Winograd: pad 0, odd output, units of several images */
        {2, 5, 6, 16, 32, 3, 1, 2, 2, 4, 32},     /* Winograd: pad 2 (output larger than the input) */
        {9, 16, 16, 64, 64, 3, 1, 1, 2, 4, 32},   /* Winograd: 64 tiles an image, more units than threads */
        {2, 9, 9, 128, 48, 3, 1, 1, 2, 4, 32},    /* K = 64 kept channels: the direct kernel's taps-outer order */
        {2, 10, 10, 128, 40, 5, 2, 2, 2, 4, 16},  /* the same at 5x5 stride 2, block 16 */
    };
    for (int si = 0; si < (int)(sizeof shapes / sizeof *shapes); si++) {
        const shape *s = &shapes[si];
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, s->B, s->H, s->W, s->Cin, s->Cout, s->k, s->k, s->stride, s->pad, &e) != SDGP_OK) {
            CHECK(0, "shape %d: %s", si, e.msg);
            continue;
        }
        size_t nx = (size_t)s->B * s->H * s->W * s->Cin, ny = (size_t)s->B * g.Ho * g.Wo * s->Cout,
               nw = (size_t)s->Cout * s->Cin * s->k * s->k;
        float *x = test_xmalloc(nx * 4), *w0 = test_xmalloc(nw * 4), *w = test_xmalloc(nw * 4),
              *want = test_xmalloc(ny * 4), *y1 = test_xmalloc(ny * 4), *y2 = test_xmalloc(ny * 4),
              *yref = test_xmalloc(ny * 4);
        test_fill_normal(x, nx, 100 + si);
        test_fill_normal(w0, nw, 200 + si);
        sdgp_weights_project(w, w0, s->Cout, s->Cin, s->k * s->k, SDGP_WEIGHTS_SRSTE,
                             s->block == 32 ? SDGP_WGROUP_BLOCK32 : SDGP_WGROUP_BLOCK16, s->n, s->m, 1.0f);
        sdgp_conv_forward_naive(want, x, w, &g);
        for (int wtile = 0; wtile <= 4; wtile += 2) {
            if (wtile && !sdgp_sparse_fwd_wino_supports(&g)) break;
            const char *algo = wtile == 4 ? "F(4x4)" : wtile ? "F(2x2)" : "direct";
            /* the transforms round: F(2x2) adds only, F(4x4)'s matrices hold 4, 5, 8 and 1/6 */
            const double tol = wtile == 4 ? 2e-5 : wtile ? 4e-6 : 2e-6;
            int have_ref = run_fwd(yref, x, w, &g, s, SDGP_ISA_REF, 1, wtile);
            FOR_EACH_ISA(isa) {
                const char *in = sdgp_isa_name(isa);
                if (!run_fwd(y1, x, w, &g, s, isa, 1, wtile) || !run_fwd(y2, x, w, &g, s, isa, 2, wtile)) continue;
                double err = test_rel_err(y1, want, ny);
                CHECK(err <= tol, "shape %d %s isa %s: rel err %.3g against the naive convolution", si, algo, in, err);
                if (getenv("SDGP_TEST_VERBOSE")) fprintf(stderr, "shape %d %s isa %s: rel err %.3g\n", si, algo, in, err);
                CHECK(test_bitwise_equal(y1, y2, ny * 4), "shape %d %s isa %s: 1 and 2 threads differ", si, algo, in);
                CHECK(!have_ref || test_bitwise_equal(y1, yref, ny * 4), "shape %d %s isa %s: differs from the reference path", si,
                      algo, in);
            }
        }
        free(x), free(w0), free(w), free(want), free(y1), free(y2), free(yref);
    }
}

/* S-STE may shrink a kept unit to exactly zero: a group with fewer than n nonzero channels packs
 * (padded with zero channels); a group with more than n is refused, naming where. */
TEST_CASE(sparse_fwd_pack_accepts_fewer_refuses_more) {
    sdgp_conv_geom g;
    sdgp_error e;
    CHECK(sdgp_conv_geom_init(&g, 1, 4, 4, 8, 32, 3, 3, 1, 1, &e) == SDGP_OK, "geom");
    size_t nw = (size_t)32 * 8 * 9, nx = (size_t)16 * 8, ny = (size_t)16 * 32;
    float *w = test_xmalloc(nw * 4), *x = test_xmalloc(nx * 4), *y = test_xmalloc(ny * 4), *want = test_xmalloc(ny * 4);
    test_fill_normal(x, nx, 7);
    for (size_t i = 0; i < nw; i++) w[i] = 0.0f;
    /* block 0 keeps only input channel 5 (group 4-7), nothing of group 0-3 */
    for (int co = 0; co < 32; co++)
        for (int t = 0; t < 9; t++) w[((size_t)co * 8 + 5) * 9 + t] = 0.01f * (float)(co + t);
    sdgp_sparse_fwd *p = NULL;
    sdgp_conv_forward_naive(want, x, w, &g);
    CHECK(sdgp_sparse_fwd_create_wino(&p, &g, 2, 4, 32, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    if (!p) goto out;
    CHECK(sdgp_sparse_fwd_pack(p, w, &e) == SDGP_OK, "fewer than n kept (Winograd): %s", e.msg);
    CHECK(sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK, "run: %s", e.msg);
    CHECK(test_rel_err(y, want, ny) <= 2e-5, "fewer than n kept (Winograd): rel err %.3g", test_rel_err(y, want, ny));
    sdgp_sparse_fwd_destroy(p);
    p = NULL;
    CHECK(sdgp_sparse_fwd_create(&p, &g, 2, 4, 32, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    if (!p) goto out;
    CHECK(sdgp_sparse_fwd_pack(p, w, &e) == SDGP_OK, "fewer than n kept: %s", e.msg);
    CHECK(sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK, "run: %s", e.msg);
    CHECK(test_rel_err(y, want, ny) <= 2e-6, "fewer than n kept: rel err %.3g", test_rel_err(y, want, ny));
    /* channel 31 uses input 1, channel 0 inputs 2 and 3: three of group 0-3 in one block */
    w[((size_t)31 * 8 + 1) * 9 + 4] = 1.0f;
    w[((size_t)0 * 8 + 2) * 9 + 0] = 1.0f;
    w[((size_t)0 * 8 + 3) * 9 + 8] = 1.0f;
    CHECK(sdgp_sparse_fwd_pack(p, w, &e) == SDGP_ERR_INVALID, "three of four kept must be refused");
    CHECK(strstr(e.msg, "output channels 0-31") && strstr(e.msg, "input channels 0-3"), "message: %s", e.msg);
    CHECK(sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_ERR_INVALID, "a refused pack leaves no weights: %s", e.msg);
    sdgp_sparse_fwd_destroy(p);
    /* bad plans */
    p = NULL;
    CHECK(sdgp_sparse_fwd_create(&p, &g, 2, 4, 8, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "block=8"),
          "block 8: %s", e.msg);
    CHECK(sdgp_sparse_fwd_create(&p, &g, 2, 3, 32, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "Cin=8"),
          "Cin 8, m 3: %s", e.msg);
    CHECK(sdgp_sparse_fwd_create(&p, &g, 5, 4, 32, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "5:4: %s", e.msg);
    sdgp_conv_geom s2;
    CHECK(sdgp_conv_geom_init(&s2, 1, 8, 8, 8, 32, 3, 3, 2, 1, &e) == SDGP_OK, "geom");
    CHECK(!sdgp_sparse_fwd_wino_supports(&s2) &&
              sdgp_sparse_fwd_create_wino(&p, &s2, 2, 4, 32, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p &&
              strstr(e.msg, "stride 2"),
          "Winograd, stride 2: %s", e.msg);
    CHECK(sdgp_sparse_fwd_create_wino(&p, &g, 2, 4, 32, 3, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p && strstr(e.msg, "tile 3"),
          "Winograd, tile 3: %s", e.msg);
out:
    free(w), free(x), free(y), free(want);
}

int main(void) {
    RUN(sparse_fwd_matches_naive_every_isa_and_thread_count);
    RUN(sparse_fwd_pack_accepts_fewer_refuses_more);
    return test_finish();
}
