/* The sparse-weight forward with masks along output channels (sdgp_sparse_fwd_create_cout) against
 * the naive convolution: weights projected to the cout form by sdgp_weights_project (S-STE and
 * SR-STE), every ISA path, 1 and 2 threads, batches that do not fill a pair of image vectors, rows
 * that do not fill a tile, chunks that do not fill 16 input channels, padding 0-2, 1x1 to 5x5, stride
 * 1 and 2, n:m from 1:4 to 4:8; bitwise equality across threads and ISA paths; weights that are not
 * of the form and geometries the kernel does not take are refused with a message. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/sparse.h"

typedef struct {
    int B, H, W, Cin, Cout, k, pad, n, m, stride;
} shape;

/* threads 2 runs in a caller's workspace full of NaNs (as a shared one left by other layers): the
 * plan must write every zero it reads. */
static int run_cout(float *y, const float *x, const float *w, const sdgp_conv_geom *g, const shape *s, sdgp_isa isa, int threads) {
    sdgp_sparse_fwd *p = NULL;
    sdgp_error e;
    int ok = sdgp_sparse_fwd_create_cout(&p, g, s->n, s->m, isa, threads, &e) == SDGP_OK;
    CHECK(ok, "create: %s", e.msg);
    if (!ok) return 0;
    CHECK(sdgp_sparse_fwd_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_fwd_isa(p)), sdgp_isa_name(isa));
    ok = sdgp_sparse_fwd_pack(p, w, &e) == SDGP_OK;
    CHECK(ok, "pack: %s", e.msg);
    const size_t ws_bytes = sdgp_sparse_fwd_workspace_bytes(p);
    float *ws = NULL;
    if (threads == 2) {
        ws = aligned_alloc(64, (ws_bytes + 63) / 64 * 64);
        for (size_t i = 0; ws && i < ws_bytes / sizeof(float); i++) ws[i] = NAN;
        CHECK(ws && sdgp_sparse_fwd_set_workspace(p, ws, ws_bytes, &e) == SDGP_OK, "set_workspace: %s", e.msg);
        CHECK(sdgp_sparse_fwd_set_workspace(p, ws, ws_bytes - 4, &e) == SDGP_ERR_INVALID && strstr(e.msg, "needs"),
              "a workspace too small must be refused: %s", e.msg);
        CHECK(sdgp_sparse_fwd_set_workspace(p, ws, ws_bytes, &e) == SDGP_OK, "set_workspace: %s", e.msg);
    }
    /* twice: the second run must not depend on what the first left in the plan's buffers */
    ok = ok && sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK && sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK;
    CHECK(ok, "run: %s", e.msg);
    sdgp_sparse_fwd_destroy(p); /* never frees the caller's workspace */
    free(ws);
    return ok;
}

TEST_CASE(sparse_fwd_cout_matches_naive_every_isa_and_thread_count) {
    const shape shapes[] = {
        /* B, H, W, Cin, Cout, k, pad, n, m, stride */
        {2, 9, 11, 16, 32, 3, 1, 2, 4, 1},   /* 2 images of a pair of 16: the rest zero; Wo 11 = 3 tiles + 2 */
        {17, 7, 7, 24, 8, 3, 1, 2, 4, 1},    /* 17 images: two pairs; 24 channels: one chunk, not full */
        {2, 6, 7, 72, 8, 3, 1, 2, 4, 1},     /* 72 channels: chunks of 32, 32 and 8 */
        {3, 8, 5, 40, 12, 3, 0, 1, 4, 1},    /* pad 0, 1:4 (one row per loop, two image vectors) */
        {2, 6, 6, 32, 16, 3, 2, 3, 4, 1},    /* pad 2 (output larger than the input), 3:4: one image vector per loop */
        {2, 5, 7, 16, 16, 5, 2, 4, 8, 1},    /* 5x5, 4:8: 70 subsets */
        {4, 4, 4, 8, 24, 1, 0, 2, 8, 1},     /* 1x1, 2:8 */
        {2, 3, 5, 96, 8, 1, 0, 2, 4, 1},     /* 1x1: many channels, 3 chunks */
        {1, 1, 1, 16, 8, 3, 1, 2, 4, 1},     /* 1x1 image: only the centre tap */
        {33, 14, 14, 64, 32, 3, 1, 2, 4, 1}, /* more units than threads, 2 chunks */
        {3, 13, 12, 32, 16, 5, 2, 2, 4, 2},  /* stride 2, 5x5 pad 2 (ResNet-9's second conv): odd H, Wo 6, 4 chunks of 8 */
        {2, 9, 9, 24, 8, 3, 1, 3, 4, 2},     /* stride 2, 3x3, 3:4: a chunk of 16 and one of 8 */
        {18, 8, 10, 16, 24, 1, 0, 1, 4, 2},  /* stride 2, 1x1 (a downsampling shortcut), 1:4 */
    };
    for (int si = 0; si < (int)(sizeof shapes / sizeof *shapes); si++) {
        const shape *s = &shapes[si];
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, s->B, s->H, s->W, s->Cin, s->Cout, s->k, s->k, s->stride, s->pad, &e) != SDGP_OK) {
            CHECK(0, "shape %d: %s", si, e.msg);
            continue;
        }
        CHECK(sdgp_sparse_fwd_cout_supports(&g, s->n, s->m), "shape %d: supported", si);
        size_t nx = (size_t)s->B * s->H * s->W * s->Cin, ny = (size_t)s->B * g.Ho * g.Wo * s->Cout,
               nw = (size_t)s->Cout * s->Cin * s->k * s->k;
        float *x = test_xmalloc(nx * 4), *w0 = test_xmalloc(nw * 4), *w = test_xmalloc(nw * 4), *want = test_xmalloc(ny * 4),
              *y1 = test_xmalloc(ny * 4), *y2 = test_xmalloc(ny * 4), *yref = test_xmalloc(ny * 4);
        test_fill_normal(x, nx, 300 + si);
        test_fill_normal(w0, nw, 400 + si);
        /* S-STE's soft threshold on odd shapes, SR-STE's hard mask on the others */
        sdgp_weights_project(w, w0, s->Cout, s->Cin, s->k * s->k, si % 2 ? SDGP_WEIGHTS_SSTE : SDGP_WEIGHTS_SRSTE,
                             SDGP_WGROUP_COUT, s->n, s->m, 1.0f);
        sdgp_conv_forward_naive(want, x, w, &g);
        int have_ref = run_cout(yref, x, w, &g, s, SDGP_ISA_REF, 1);
        FOR_EACH_ISA(isa) {
            const char *in = sdgp_isa_name(isa);
            if (!run_cout(y1, x, w, &g, s, isa, 1) || !run_cout(y2, x, w, &g, s, isa, 2)) continue;
            double err = test_rel_err(y1, want, ny);
            CHECK(err <= 2e-6, "shape %d isa %s: rel err %.3g against the naive convolution", si, in, err);
            CHECK(test_bitwise_equal(y1, y2, ny * 4), "shape %d isa %s: 1 and 2 threads differ", si, in);
            CHECK(!have_ref || test_bitwise_equal(y1, yref, ny * 4), "shape %d isa %s: differs from the reference path", si, in);
        }
        free(x), free(w0), free(w), free(want), free(y1), free(y2), free(yref);
    }
}

/* A group with fewer than n nonzero weights packs (padded with zero rows); one with more is refused,
 * naming the output channels, input channel and tap; geometries outside the kernel are refused. */
TEST_CASE(sparse_fwd_cout_refuses_what_it_cannot_run) {
    sdgp_conv_geom g;
    sdgp_error e;
    CHECK(sdgp_conv_geom_init(&g, 2, 4, 4, 8, 8, 3, 3, 1, 1, &e) == SDGP_OK, "geom");
    size_t nw = (size_t)8 * 8 * 9, nx = (size_t)2 * 16 * 8, ny = (size_t)2 * 16 * 8;
    float *w = test_xmalloc(nw * 4), *x = test_xmalloc(nx * 4), *y = test_xmalloc(ny * 4), *want = test_xmalloc(ny * 4);
    test_fill_normal(x, nx, 9);
    memset(w, 0, nw * 4);
    /* only output channel 6 (group 4-7) has weights, at input channel 3 */
    for (int t = 0; t < 9; t++) w[((size_t)6 * 8 + 3) * 9 + t] = 0.1f * (float)(t + 1);
    sdgp_conv_forward_naive(want, x, w, &g);
    sdgp_sparse_fwd *p = NULL;
    CHECK(sdgp_sparse_fwd_create_cout(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    if (!p) goto out;
    CHECK(sdgp_sparse_fwd_pack(p, w, &e) == SDGP_OK, "fewer than n kept: %s", e.msg);
    CHECK(sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_OK, "run: %s", e.msg);
    CHECK(test_rel_err(y, want, ny) <= 2e-6, "fewer than n kept: rel err %.3g", test_rel_err(y, want, ny));
    /* output channels 4 and 5 too at input channel 3, tap 7: three of group 4-7 */
    w[((size_t)4 * 8 + 3) * 9 + 7] = 1.0f;
    w[((size_t)5 * 8 + 3) * 9 + 7] = 1.0f;
    CHECK(sdgp_sparse_fwd_pack(p, w, &e) == SDGP_ERR_INVALID, "three of four kept must be refused");
    CHECK(strstr(e.msg, "output channels 4-7") && strstr(e.msg, "input channel 3") && strstr(e.msg, "tap 7"), "message: %s", e.msg);
    CHECK(sdgp_sparse_fwd_run(p, y, x, &e) == SDGP_ERR_INVALID, "a refused pack leaves no weights: %s", e.msg);
    sdgp_sparse_fwd_destroy(p);
    p = NULL;
    CHECK(sdgp_sparse_fwd_create_cout(&p, &g, 5, 8, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "5:8"),
          "5:8 (more than 4 rows): %s", e.msg);
    CHECK(sdgp_sparse_fwd_create_cout(&p, &g, 2, 3, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "Cout=8"),
          "m 3 does not divide Cout 8: %s", e.msg);
    CHECK(sdgp_sparse_fwd_create_cout(&p, &g, 5, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && !p, "5:4: %s", e.msg);
    sdgp_conv_geom s3;
    CHECK(sdgp_conv_geom_init(&s3, 1, 8, 8, 8, 8, 3, 3, 3, 1, &e) == SDGP_OK, "geom");
    CHECK(!sdgp_sparse_fwd_cout_supports(&s3, 2, 4) && sdgp_sparse_fwd_create_cout(&p, &s3, 2, 4, SDGP_ISA_AUTO, 1, &e) ==
                                                          SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "stride 3"),
          "stride 3: %s", e.msg);
out:
    free(w), free(x), free(y), free(want);
}

int main(void) {
    RUN(sparse_fwd_cout_matches_naive_every_isa_and_thread_count);
    RUN(sparse_fwd_cout_refuses_what_it_cannot_run);
    return test_finish();
}
