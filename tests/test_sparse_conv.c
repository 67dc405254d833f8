/* The N:M sparse backward-data convolution against the naive loop and oneDNN.
 *
 * Each case draws a dense dO, prunes it to n:m with this file's own tiny magnitude rule (so the
 * kernel is tested independently of the pruning library), runs every ISA path the CPU has with
 * 1 and 2 threads, and compares with sdgp_conv_backward_data_naive on the pruned dense dO:
 * relative error <= 1e-5, and bitwise equality between thread counts. dD is filled with NaN
 * first, so a position the kernel forgets to write fails. */
#include <omp.h>

#include "harness.h"
#include "kernels/spconv_internal.h"
#include "sdgp/conv.h"
#include "sdgp/sparse.h"
#include "sdgp/prune.h"

typedef struct {
    int B, H, W, Cin, Cout, kh, kw, s, p, n, m;
    int groups; /* 1: ungrouped */
} shape;

/* Keeps the n largest |x| of every group of m channels (ties: lower index) in `pruned` and
 * writes the compressed form (kept indices ascending). Groups with zeros keep zeros as padding. */
static void prune_nm(float *pruned, float *values, uint8_t *index, const float *x, int64_t rows, int C, int n, int m) {
    const int groups = C / m, slots = groups * n;
    for (int64_t r = 0; r < rows; r++)
        for (int gi = 0; gi < groups; gi++) {
            const float *g = x + r * C + gi * m;
            int keep[SDGP_NM_MAX_M] = {0};
            for (int j = 0; j < n; j++) {
                int best = -1;
                for (int q = 0; q < m; q++)
                    if (!keep[q] && (best < 0 || fabsf(g[q]) > fabsf(g[best]))) best = q;
                keep[best] = 1;
            }
            int s = 0;
            for (int q = 0; q < m; q++) {
                pruned[r * C + gi * m + q] = keep[q] ? g[q] : 0.0f;
                if (keep[q]) {
                    values[r * slots + gi * n + s] = g[q];
                    index[r * slots + gi * n + s] = (uint8_t)q;
                    s++;
                }
            }
        }
}

typedef struct {
    sdgp_conv_geom g;
    int n, m;
    int64_t rows, nO, nD, nW;
    float *dO, *pruned, *w, *ref;
    sdgp_nm_tensor nm;
} problem;

static int problem_make(problem *pb, shape s, uint64_t seed) {
    memset(pb, 0, sizeof *pb);
    if (sdgp_conv_geom_init(&pb->g, s.B, s.H, s.W, s.Cin, s.Cout, s.kh, s.kw, s.s, s.p, NULL) != SDGP_OK ||
        sdgp_conv_geom_set_groups(&pb->g, s.groups > 1 ? s.groups : 1, NULL) != SDGP_OK)
        return 0;
    const sdgp_conv_geom *g = &pb->g;
    pb->n = s.n;
    pb->m = s.m;
    pb->rows = (int64_t)g->B * g->Ho * g->Wo;
    pb->nO = pb->rows * g->Cout;
    pb->nD = (int64_t)g->B * g->H * g->W * g->Cin;
    pb->nW = (int64_t)g->Cout * (g->Cin / g->groups) * g->kh * g->kw;
    pb->dO = test_xmalloc((size_t)pb->nO * 4);
    pb->pruned = test_xmalloc((size_t)pb->nO * 4);
    pb->w = test_xmalloc((size_t)pb->nW * 4);
    pb->ref = test_xmalloc((size_t)pb->nD * 4);
    test_fill_normal(pb->dO, (size_t)pb->nO, seed);
    test_fill_normal(pb->w, (size_t)pb->nW, seed + 1);
    for (int64_t i = 0; i < pb->nO; i += 7) pb->dO[i] = 0.0f; /* some groups with fewer than n nonzeros */
    int64_t slots = pb->rows * g->Cout / s.m * s.n;
    pb->nm = (sdgp_nm_tensor){.axis = SDGP_AXIS_CHANNEL, .n = s.n, .m = s.m, .rows = pb->rows, .C = g->Cout,
                              .values = test_xmalloc((size_t)slots * 4), .index = test_xmalloc((size_t)slots)};
    prune_nm(pb->pruned, pb->nm.values, pb->nm.index, pb->dO, pb->rows, g->Cout, s.n, s.m);
    sdgp_conv_backward_data_naive(pb->ref, pb->pruned, pb->w, g);
    return 1;
}

static void problem_free(problem *pb) {
    free(pb->dO);
    free(pb->pruned);
    free(pb->w);
    free(pb->ref);
    free(pb->nm.values);
    free(pb->nm.index);
}

/* Runs the plan (optionally with a blocking override) into dD; returns 0 on any error. */
static int run_sparse(float *dD, const problem *pb, sdgp_isa isa, int threads, const spconv_blocking *blk) {
    sdgp_sparse_bwd *p = NULL;
    sdgp_error e;
    int ok = sdgp_sparse_bwd_create(&p, &pb->g, pb->n, pb->m, isa, threads, &e) == SDGP_OK;
    CHECK(ok, "create: %s", e.msg);
    if (!ok) return 0;
    if (blk) ok = spconv_set_blocking(p, blk, &e) == SDGP_OK;
    CHECK(ok, "blocking: %s", e.msg);
    CHECK(sdgp_sparse_bwd_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_bwd_isa(p)), sdgp_isa_name(isa));
    for (int64_t i = 0; i < pb->nD; i++) dD[i] = NAN;
    if (ok) ok = sdgp_sparse_bwd_pack(p, pb->w, &e) == SDGP_OK;
    if (ok) ok = sdgp_sparse_bwd_data(p, dD, &pb->nm, &e) == SDGP_OK;
    CHECK(ok, "pack/data: %s", e.msg);
    sdgp_sparse_bwd_destroy(p);
    return ok;
}

static const shape shapes[] = {
    /* B  H   W  Cin Cout kh kw s  p  n  m */
    {1, 5, 7, 3, 8, 3, 3, 1, 1, 2, 4, 1},       /* Cin 3, odd spatial */
    {2, 9, 6, 17, 16, 3, 3, 2, 1, 1, 4, 1},     /* stride 2, odd H, Cin 17 */
    {1, 7, 7, 33, 32, 5, 5, 1, 2, 4, 32, 1},    /* 5x5 pad 2, 4:32, Cin 33 */
    {2, 6, 5, 16, 12, 1, 1, 1, 0, 1, 3, 1},     /* 1x1, m = 3 */
    {1, 8, 8, 64, 64, 3, 3, 1, 0, 2, 8, 1},     /* pad 0 */
    {1, 11, 13, 80, 24, 3, 3, 2, 0, 2, 4, 1},   /* stride 2 pad 0, two column blocks (64 + 16) */
    {2, 4, 4, 130, 64, 3, 3, 1, 1, 64, 64, 1},  /* n = m = 64: dense */
    {1, 10, 10, 20, 48, 5, 5, 3, 2, 3, 6, 1},   /* stride 3 */
    {1, 7, 9, 24, 16, 2, 4, 1, 1, 1, 2, 1},     /* non-square kernel */
    {1, 7, 7, 16, 8, 1, 1, 2, 0, 1, 2, 1},      /* 1x1 stride 2: untouched dD positions must be 0 */
    {3, 3, 3, 5, 4, 3, 3, 1, 2, 1, 1, 1},       /* pad 2 on 3x3 input, 1:1 */
    {1, 16, 16, 128, 128, 3, 3, 1, 1, 2, 4, 1}, /* several units, chunks, blocks */
    {1, 32, 32, 64, 32, 3, 3, 1, 1, 2, 4, 1},   /* 32x32: NCHW planes 4 KiB apart (one L1 set) */
    {1, 15, 15, 128, 64, 5, 5, 2, 2, 1, 4, 1},  /* ResNet-9 L2-like, odd size */
    {1, 6, 6, 10, 12, 3, 3, 1, 1, 1, 4, 1},     /* odd entry count per pixel (3) */
    {2, 5, 5, 9, 40, 3, 3, 1, 1, 3, 8, 1},      /* 15 entries per pixel */
    {1, 4, 6, 50, 5, 3, 3, 1, 1, 1, 1, 1},      /* Cout 5, 1:1 */
    {1, 9, 9, 20, 8, 7, 7, 1, 3, 2, 4, 1},      /* 49 taps: more than one micro-kernel call holds */
    {2, 12, 5, 16, 8, 9, 1, 2, 0, 1, 2, 1},     /* 9x1 kernel, stride 2 */
    /* grouped (last field): a column block never straddles a group, each reads its group's slots */
    {2, 8, 8, 32, 32, 3, 3, 1, 1, 2, 4, 2},      /* 2 groups of 16 (RegNetX's width), 3x3 */
    {1, 10, 10, 128, 128, 3, 3, 2, 1, 2, 8, 8},  /* 8 groups of 16, stride 2 */
    {2, 6, 7, 64, 64, 1, 1, 1, 0, 4, 16, 4},     /* 4 groups of 16, 1x1, 4:16 */
    {1, 9, 7, 32, 32, 3, 3, 2, 1, 2, 4, 4},      /* 4 groups of 8, stride 2 */
    {2, 7, 6, 16, 16, 3, 3, 1, 1, 1, 2, 2},      /* 2 groups of 8 */
    {2, 6, 6, 32, 32, 1, 1, 1, 0, 1, 4, 8},      /* 8 groups of 4, 1x1: one group of m per conv group */
    {1, 7, 9, 16, 16, 3, 3, 1, 1, 2, 4, 4},      /* 4 groups of 4, 3x3 */
    {1, 9, 9, 32, 64, 3, 3, 2, 1, 1, 2, 8},      /* 8 groups of 4 inputs, 8 outputs, stride 2 */
    {1, 6, 7, 48, 16, 3, 3, 1, 1, 2, 4, 2},      /* 24 inputs, 8 outputs per group */
    {1, 5, 5, 160, 32, 3, 3, 1, 1, 1, 4, 2},     /* 80 inputs per group: two column blocks each */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

TEST_CASE(sparse_matches_naive_every_isa_and_thread_count) {
    for (int si = 0; si < NSHAPES; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, shapes[si], 100 + (uint64_t)si), "shape %d: bad geometry", si);
        float *d1 = test_xmalloc((size_t)pb.nD * 4), *d2 = test_xmalloc((size_t)pb.nD * 4);
        FOR_EACH_ISA(isa) {
            if (!run_sparse(d1, &pb, isa, 1, NULL) || !run_sparse(d2, &pb, isa, 2, NULL)) continue;
            double e1 = test_rel_err(d1, pb.ref, (size_t)pb.nD);
            CHECK(e1 <= 1e-5, "shape %d isa %s: rel err %.3g", si, sdgp_isa_name(isa), e1);
            CHECK(test_bitwise_equal(d1, d2, (size_t)pb.nD * 4), "shape %d isa %s: 1 and 2 threads differ", si,
                  sdgp_isa_name(isa));
        }
        free(d1);
        free(d2);
        problem_free(&pb);
    }
}

/* Every blocking the plan may choose gives the same answer: narrow column blocks, one-group
 * chunks, single taps / kernel rows / all taps per register pass, row-band units of a few pixels.
 * Blockings that differ only in the column blocks and the units (same chunks and tap groups)
 * give bitwise the same result. */
/* Shared masks: dO pruned by sdgp_prune with mask blocks of P pixels along its rows; with
 * sdgp_sparse_bwd_set_mask_block(P) stride-1 plans run the shared-mask kernel (others ignore it).
 * Against the naive loop on the decompressed dO, every ISA, 1 and 2 threads (bitwise equal), the
 * default blocking and all taps in one group (tg = 0: calls split by tap column). */
TEST_CASE(sparse_shared_masks_match_naive) {
    const int blocks[] = {2, 3, 5, 16};
    for (int si = 0; si < NSHAPES; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, shapes[si], 3000 + (uint64_t)si), "shape %d", si);
        const sdgp_conv_geom *g = &pb.g;
        float *d1 = test_xmalloc((size_t)pb.nD * 4), *d2 = test_xmalloc((size_t)pb.nD * 4);
        for (int bi = 0; bi < 4; bi++) {
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, pb.n, pb.m);
            cfg.mask_block = blocks[bi];
            cfg.mask_line = g->Wo;
            sdgp_error e;
            REQUIRE(sdgp_prune(&cfg, pb.dO, g->B, (int64_t)g->Ho * g->Wo, g->Cout, pb.pruned, &pb.nm, &e) == SDGP_OK, "%s", e.msg);
            sdgp_conv_backward_data_naive(pb.ref, pb.pruned, pb.w, g);
            FOR_EACH_ISA(isa)
                for (int tgi = 0; tgi < 2; tgi++) {
                    float *out[2] = {d1, d2};
                    int ok = 1;
                    for (int th = 0; th < 2 && ok; th++) {
                        sdgp_sparse_bwd *p = NULL;
                        ok = sdgp_sparse_bwd_create(&p, g, pb.n, pb.m, isa, th + 1, &e) == SDGP_OK &&
                             sdgp_sparse_bwd_set_mask_block(p, blocks[bi], &e) == SDGP_OK;
                        if (ok && tgi) {
                            spconv_blocking b = p->blk;
                            b.tg = 0;
                            ok = spconv_set_blocking(p, &b, &e) == SDGP_OK;
                        }
                        for (int64_t i = 0; i < pb.nD; i++) out[th][i] = NAN;
                        ok = ok && sdgp_sparse_bwd_pack(p, pb.w, &e) == SDGP_OK && sdgp_sparse_bwd_data(p, out[th], &pb.nm, &e) == SDGP_OK;
                        CHECK(ok, "shape %d block %d: %s", si, blocks[bi], e.msg);
                        sdgp_sparse_bwd_destroy(p);
                    }
                    if (!ok) continue;
                    const double err = test_rel_err(d1, pb.ref, (size_t)pb.nD);
                    CHECK(err <= 1e-5, "shape %d block %d isa %s tg %s: rel err %.3g", si, blocks[bi], sdgp_isa_name(isa),
                          tgi ? "all" : "default", err);
                    CHECK(test_bitwise_equal(d1, d2, (size_t)pb.nD * 4), "shape %d block %d isa %s: 1 and 2 threads differ", si,
                          blocks[bi], sdgp_isa_name(isa));
                }
        }
        free(d1), free(d2);
        problem_free(&pb);
    }
    sdgp_sparse_bwd *p = NULL;
    sdgp_error e;
    sdgp_conv_geom g;
    REQUIRE(sdgp_conv_geom_init(&g, 1, 4, 4, 8, 8, 3, 3, 1, 1, NULL) == SDGP_OK && sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "plan");
    CHECK(sdgp_sparse_bwd_set_mask_block(p, 0, &e) == SDGP_ERR_INVALID && strstr(e.msg, "block=0"), "block 0: %s", e.msg);
    CHECK(sdgp_sparse_bwd_set_mask_block(NULL, 2, &e) == SDGP_ERR_INVALID, "NULL plan");
    sdgp_sparse_bwd_destroy(p);
}

/* Output in NCHW (sdgp_sparse_bwd_set_output_layout): bitwise the NHWC result transposed, for every
 * shape (stride 2 and 3, 1x1, odd sizes, untouched positions), ISA, 1 and 2 threads, the default
 * units and both kinds of forced ones (row bands of one image; several whole images), and with the
 * shared-mask kernel. dD starts as NaN, so a position the transpose misses fails. */
TEST_CASE(sparse_nchw_output) {
    const shape many = {9, 5, 6, 12, 8, 3, 3, 1, 1, 2, 4, 1}; /* enough images for units of several */
    long compared = 0, multi = 0;
    for (int si = 0; si <= NSHAPES; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, si < NSHAPES ? shapes[si] : many, 500 + (uint64_t)si), "shape %d", si);
        const sdgp_conv_geom *g = &pb.g;
        float *nhwc = test_xmalloc((size_t)pb.nD * 4), *nchw = test_xmalloc((size_t)pb.nD * 4), *want = test_xmalloc((size_t)pb.nD * 4);
        FOR_EACH_ISA(isa)
            for (int variant = 0; variant < 4; variant++) { /* default, row bands, whole images, shared masks */
                for (int threads = 1; threads <= 2; threads++) {
                    sdgp_sparse_bwd *p = NULL;
                    sdgp_error e;
                    int ok = sdgp_sparse_bwd_create(&p, g, pb.n, pb.m, isa, threads, &e) == SDGP_OK;
                    if (ok && (variant == 1 || variant == 2)) {
                        spconv_blocking b = p->blk;
                        b.tile_px = variant == 1 ? g->W : (int64_t)g->B * g->H * g->W;
                        ok = spconv_set_blocking(p, &b, &e) == SDGP_OK;
                        multi += p->ib > 1;
                    }
                    if (ok && variant == 3) ok = sdgp_sparse_bwd_set_mask_block(p, 2, &e) == SDGP_OK;
                    ok = ok && sdgp_sparse_bwd_pack(p, pb.w, &e) == SDGP_OK;
                    for (int64_t i = 0; i < pb.nD; i++) nhwc[i] = nchw[i] = NAN;
                    ok = ok && sdgp_sparse_bwd_data(p, nhwc, &pb.nm, &e) == SDGP_OK;
                    ok = ok && sdgp_sparse_bwd_set_output_layout(p, SDGP_LAYOUT_NCHW, &e) == SDGP_OK &&
                         sdgp_sparse_bwd_data(p, nchw, &pb.nm, &e) == SDGP_OK;
                    CHECK(ok, "shape %d variant %d: %s", si, variant, e.msg);
                    sdgp_sparse_bwd_destroy(p);
                    if (!ok) continue;
                    for (int64_t b = 0; b < g->B; b++)
                        for (int64_t px = 0; px < (int64_t)g->H * g->W; px++)
                            for (int64_t c = 0; c < g->Cin; c++)
                                want[(b * g->Cin + c) * g->H * g->W + px] = nhwc[(b * g->H * g->W + px) * g->Cin + c];
                    CHECK(test_bitwise_equal(want, nchw, (size_t)pb.nD * 4), "shape %d isa %s variant %d x%d: NCHW is not the NHWC result transposed",
                          si, sdgp_isa_name(isa), variant, threads);
                    compared++;
                }
            }
        free(nhwc), free(nchw), free(want);
        problem_free(&pb);
    }
    fprintf(stderr, "  %ld comparisons\n", compared);
    CHECK(multi > 0, "no plan had units of several images");
    sdgp_sparse_bwd *p = NULL;
    sdgp_error e;
    sdgp_conv_geom g;
    REQUIRE(sdgp_conv_geom_init(&g, 1, 4, 4, 8, 8, 3, 3, 1, 1, NULL) == SDGP_OK && sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "plan");
    CHECK(sdgp_sparse_bwd_set_output_layout(p, (sdgp_layout)2, &e) == SDGP_ERR_INVALID && strstr(e.msg, "layout=2"), "layout 2: %s", e.msg);
    CHECK(sdgp_sparse_bwd_set_output_layout(NULL, SDGP_LAYOUT_NCHW, &e) == SDGP_ERR_INVALID, "NULL plan");
    sdgp_sparse_bwd_destroy(p);
}

TEST_CASE(sparse_blocking_variants) {
    const shape s[] = {{2, 9, 11, 70, 48, 3, 3, 1, 1, 2, 8, 1}, {1, 12, 9, 40, 24, 5, 5, 2, 2, 1, 4, 1},
                       {2, 9, 11, 64, 48, 3, 3, 1, 1, 2, 8, 2}}; /* grouped: 32 inputs, 24 outputs per group */
    for (int si = 0; si < 3; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, s[si], 7 + (uint64_t)si), "bad geometry");
        float *d = test_xmalloc((size_t)pb.nD * 4), *d0 = test_xmalloc((size_t)pb.nD * 4);
        const spconv_blocking blks[] = {{16, 24, 0, 5}, {32, 24, 0, 1}, {48, 24, 0, 40}, {64, 48, 1, 1000},
                                        {64, 8, 3, 13}, {32, 16, 2, 3},  {128, 24, 1, 77}, {112, 40, 5, 9}};
        FOR_EACH_ISA(isa) {
            for (size_t b = 0; b < sizeof blks / sizeof blks[0]; b++) {
                spconv_blocking blk = blks[b];
                if (isa == SDGP_ISA_AVX2 && blk.nr > 32) blk.nr = 32;
                if (isa == SDGP_ISA_REF && blk.nr > 64) blk.nr = 64;
                if (!run_sparse(d, &pb, isa, 2, &blk)) continue;
                double e = test_rel_err(d, pb.ref, (size_t)pb.nD);
                CHECK(e <= 1e-5, "shape %d isa %s blocking %zu: rel err %.3g", si, sdgp_isa_name(isa), b, e);
                if (b == 0) memcpy(d0, d, (size_t)pb.nD * 4);
                if (b == 1 || b == 2)
                    CHECK(test_bitwise_equal(d, d0, (size_t)pb.nD * 4), "shape %d isa %s: blocking %zu differs from 0 in bits", si,
                          sdgp_isa_name(isa), b);
            }
        }
        free(d);
        free(d0);
        problem_free(&pb);
    }
}

/* The whole pipeline as the trainer uses it: the pruning library compresses dO, the sparse
 * kernel consumes it, oneDNN's dense backward-data on the decompressed tensor agrees. */
TEST_CASE(sparse_matches_onednn_on_pruned_tensor) {
    const shape s[] = {{2, 16, 16, 32, 64, 5, 5, 2, 2, 2, 4, 1}, {3, 8, 8, 48, 32, 3, 3, 1, 1, 1, 4, 1}, {2, 6, 6, 64, 32, 3, 3, 1, 0, 4, 32, 1},
                       {1, 9, 7, 17, 16, 3, 3, 2, 1, 2, 8, 1}};
    for (int si = 0; si < 4; si++) {
        sdgp_conv_geom g;
        shape c = s[si];
        REQUIRE(sdgp_conv_geom_init(&g, c.B, c.H, c.W, c.Cin, c.Cout, c.kh, c.kw, c.s, c.p, NULL) == SDGP_OK, "geom");
        int64_t rows = (int64_t)g.B * g.Ho * g.Wo, nO = rows * g.Cout, nD = (int64_t)g.B * g.H * g.W * g.Cin,
                nW = (int64_t)g.Cout * g.Cin * g.kh * g.kw;
        float *dO = test_xmalloc((size_t)nO * 4), *dense = test_xmalloc((size_t)nO * 4), *w = test_xmalloc((size_t)nW * 4);
        float *dd = test_xmalloc((size_t)nD * 4), *ddn = test_xmalloc((size_t)nD * 4), *ref = test_xmalloc((size_t)nD * 4);
        test_fill_normal(dO, (size_t)nO, 31 + (uint64_t)si);
        test_fill_normal(w, (size_t)nW, 41 + (uint64_t)si);
        sdgp_error e;
        sdgp_nm_tensor nm = {0};
        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, c.n, c.m);
        int ok = sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, c.n, c.m, rows, g.Cout, &e) == SDGP_OK &&
                 sdgp_prune(&cfg, dO, g.B, (int64_t)g.Ho * g.Wo, g.Cout, NULL, &nm, &e) == SDGP_OK &&
                 sdgp_nm_decompress(&nm, dense, &e) == SDGP_OK;
        CHECK(ok, "prune: %s", e.msg);
        sdgp_conv *conv = NULL;
        ok = ok && sdgp_conv_create(&conv, &g, 0, 2, &e) == SDGP_OK && sdgp_conv_backward_data(conv, ref, dense, w, &e) == SDGP_OK;
        CHECK(ok, "oneDNN: %s", e.msg);
        if (ok) {
            sdgp_conv_backward_data_naive(ddn, dense, w, &g);
            CHECK(test_rel_err(ref, ddn, (size_t)nD) <= 1e-5, "shape %d: oneDNN vs naive %.3g", si, test_rel_err(ref, ddn, (size_t)nD));
            FOR_EACH_ISA(isa) {
                sdgp_sparse_bwd *p = NULL;
                for (int64_t i = 0; i < nD; i++) dd[i] = NAN;
                int k = sdgp_sparse_bwd_create(&p, &g, c.n, c.m, isa, 2, &e) == SDGP_OK &&
                        sdgp_sparse_bwd_pack(p, w, &e) == SDGP_OK && sdgp_sparse_bwd_data(p, dd, &nm, &e) == SDGP_OK;
                CHECK(k, "sparse: %s", e.msg);
                double err = test_rel_err(dd, ref, (size_t)nD);
                CHECK(k && err <= 1e-5, "shape %d isa %s vs oneDNN: rel err %.3g", si, sdgp_isa_name(isa), err);
                sdgp_sparse_bwd_destroy(p);
            }
        }
        sdgp_conv_destroy(conv);
        sdgp_nm_free(&nm);
        free(dO), free(dense), free(w), free(dd), free(ddn), free(ref);
    }
}

/* Repacking after the weights change must take effect; a second call must not depend on the first. */
TEST_CASE(sparse_repack_and_reuse) {
    problem pb;
    shape s = {2, 6, 6, 24, 16, 3, 3, 1, 1, 2, 4, 1};
    REQUIRE(problem_make(&pb, s, 5), "geom");
    sdgp_sparse_bwd *p = NULL;
    REQUIRE(sdgp_sparse_bwd_create(&p, &pb.g, 2, 4, SDGP_ISA_AUTO, 0, NULL) == SDGP_OK, "create");
    float *d = test_xmalloc((size_t)pb.nD * 4);
    CHECK(sdgp_sparse_bwd_pack(p, pb.w, NULL) == SDGP_OK && sdgp_sparse_bwd_data(p, d, &pb.nm, NULL) == SDGP_OK, "run 1");
    CHECK(test_rel_err(d, pb.ref, (size_t)pb.nD) <= 1e-5, "run 1 error");
    for (int64_t i = 0; i < pb.nW; i++) pb.w[i] *= -2.0f;
    CHECK(sdgp_sparse_bwd_pack(p, pb.w, NULL) == SDGP_OK && sdgp_sparse_bwd_data(p, d, &pb.nm, NULL) == SDGP_OK, "run 2");
    for (int64_t i = 0; i < pb.nD; i++) pb.ref[i] *= -2.0f;
    CHECK(test_rel_err(d, pb.ref, (size_t)pb.nD) <= 1e-5, "after repack: %.3g", test_rel_err(d, pb.ref, (size_t)pb.nD));
    sdgp_sparse_bwd_destroy(p);
    free(d);
    problem_free(&pb);
}

/* Weights of any layout (PyTorch's channels_last OHWI, a padded stride) pack into the same bits as
 * OIHW: the results are bitwise equal; a negative stride is refused. */
TEST_CASE(sparse_pack_strided_weights) {
    const shape cases[] = {{2, 6, 6, 24, 16, 3, 3, 1, 1, 2, 4, 1}, {2, 9, 7, 40, 32, 5, 3, 2, 1, 1, 4, 1}, {2, 5, 5, 16, 8, 1, 1, 1, 0, 2, 4, 1},
                           {2, 6, 6, 64, 32, 3, 3, 1, 1, 2, 4, 4}}; /* grouped: OHWI rows of Cin/groups */
    for (size_t si = 0; si < sizeof cases / sizeof *cases; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, cases[si], 11 + si), "geom");
        const int64_t Co = pb.g.Cout, Ci = pb.g.Cin / pb.g.groups, kh = pb.g.kh, kw = pb.g.kw, pad = 3; /* OHWI rows padded by 3 */
        float *ohwi = test_xmalloc((size_t)(Co * kh * kw * (Ci + pad)) * 4), *a = test_xmalloc((size_t)pb.nD * 4),
              *b = test_xmalloc((size_t)pb.nD * 4);
        for (int64_t o = 0; o < Co; o++)
            for (int64_t i = 0; i < Ci; i++)
                for (int64_t t = 0; t < kh * kw; t++) ohwi[(o * kh * kw + t) * (Ci + pad) + i] = pb.w[(o * Ci + i) * kh * kw + t];
        const int64_t strides[4] = {kh * kw * (Ci + pad), 1, kw * (Ci + pad), Ci + pad};
        sdgp_sparse_bwd *p = NULL;
        sdgp_error e;
        REQUIRE(sdgp_sparse_bwd_create(&p, &pb.g, pb.nm.n, pb.nm.m, SDGP_ISA_AUTO, 0, &e) == SDGP_OK, "create: %s", e.msg);
        CHECK(sdgp_sparse_bwd_pack(p, pb.w, &e) == SDGP_OK && sdgp_sparse_bwd_data(p, a, &pb.nm, &e) == SDGP_OK, "OIHW: %s", e.msg);
        CHECK(sdgp_sparse_bwd_pack_strided(p, ohwi, strides, &e) == SDGP_OK && sdgp_sparse_bwd_data(p, b, &pb.nm, &e) == SDGP_OK,
              "OHWI: %s", e.msg);
        CHECK(memcmp(a, b, (size_t)pb.nD * 4) == 0, "shape %zu: OHWI weights give other bits than OIHW", si);
        const int64_t bad[4] = {strides[0], -1, strides[2], strides[3]};
        CHECK(sdgp_sparse_bwd_pack_strided(p, ohwi, bad, &e) == SDGP_ERR_INVALID && strstr(e.msg, "negative"), "%s", e.msg);
        sdgp_sparse_bwd_destroy(p);
        free(ohwi), free(a), free(b);
        problem_free(&pb);
    }
}

TEST_CASE(geometry_errors) {
    sdgp_conv_geom g;
    sdgp_error e;
    CHECK(sdgp_conv_geom_init(&g, 2, 32, 32, 128, 256, 5, 5, 2, 2, &e) == SDGP_OK && g.Ho == 16 && g.Wo == 16, "L2 geometry");
    CHECK(sdgp_conv_geom_init(&g, 1, 8, 8, 4, 4, 3, 3, 1, 0, &e) == SDGP_OK && g.Ho == 6, "pad 0");
    CHECK(sdgp_conv_geom_init(&g, 1, 9, 9, 4, 4, 3, 3, 2, 1, &e) == SDGP_OK && g.Ho == 5, "stride 2 odd");
    CHECK(sdgp_conv_geom_init(&g, 0, 8, 8, 4, 4, 3, 3, 1, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "B=0"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(&g, 1, 8, 8, 4, 4, 3, 3, 0, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "stride"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(&g, 1, 8, 8, 4, 4, 3, 3, 1, 3, &e) == SDGP_ERR_INVALID && strstr(e.msg, "pad=3"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(&g, 1, 8, 8, 4, 4, 3, 3, 1, -1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "pad"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(&g, 1, 2, 8, 4, 4, 5, 5, 1, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "larger"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(&g, 1 << 30, 1 << 20, 1 << 20, 1 << 20, 4, 1, 1, 1, 0, &e) == SDGP_ERR_INVALID &&
              strstr(e.msg, "too large"), "%s", e.msg);
    CHECK(sdgp_conv_geom_init(NULL, 1, 8, 8, 4, 4, 3, 3, 1, 1, &e) == SDGP_ERR_INVALID, "NULL");
}

TEST_CASE(plan_and_input_errors) {
    sdgp_conv_geom g;
    sdgp_error e;
    sdgp_sparse_bwd *p = NULL;
    REQUIRE(sdgp_conv_geom_init(&g, 2, 8, 8, 16, 32, 3, 3, 1, 1, NULL) == SDGP_OK, "geom");
    CHECK(sdgp_sparse_bwd_create(&p, &g, 3, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "3:2"), "%s", e.msg);
    CHECK(sdgp_sparse_bwd_create(&p, &g, 1, 128, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "m > 64: %s", e.msg);
    CHECK(sdgp_sparse_bwd_create(&p, &g, 2, 6, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "Cout=32"), "%s", e.msg);
    CHECK(sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_AUTO, -1, &e) == SDGP_ERR_INVALID, "threads: %s", e.msg);
    CHECK(sdgp_sparse_bwd_create(&p, NULL, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "NULL geom");
    CHECK(sdgp_sparse_bwd_create(NULL, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "NULL out");
    CHECK(sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_COUNT, 1, &e) != SDGP_OK, "bad ISA");
    sdgp_conv_geom bad = g;
    bad.Ho = 7;
    CHECK(sdgp_sparse_bwd_create(&p, &bad, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "output"), "%s", e.msg);
    bad = g;
    bad.pad = 5;
    CHECK(sdgp_sparse_bwd_create(&p, &bad, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "bad pad: %s", e.msg);
    CHECK(p == NULL, "no plan on failure");
    /* grouped: m must divide each group's output channels, else the message names groups, Cout and m */
    bad = g;
    REQUIRE(sdgp_conv_geom_set_groups(&bad, 4, NULL) == SDGP_OK, "groups");
    CHECK(sdgp_sparse_bwd_create(&p, &bad, 2, 16, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "groups=4") &&
              strstr(e.msg, "Cout=32") && strstr(e.msg, "m=16"),
          "groups of 8 at 2:16: %s", e.msg);
    CHECK(p == NULL, "no plan on failure");
    CHECK(sdgp_sparse_bwd_create(&p, &bad, 2, 8, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "groups of 8 at 2:8: %s", e.msg);
    sdgp_sparse_bwd_destroy(p);
    p = NULL;
    bad.groups = 3; /* not a divisor of the channels */
    CHECK(sdgp_sparse_bwd_create(&p, &bad, 1, 2, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "groups=3"), "%s", e.msg);

    REQUIRE(sdgp_sparse_bwd_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    int64_t rows = 2 * 8 * 8;
    float *vals = calloc((size_t)rows * 16, 4), *dd = calloc(2 * 8 * 8 * 16, 4), *w = calloc(32 * 16 * 9, 4);
    uint8_t *idx = calloc((size_t)rows * 16, 1);
    for (int64_t i = 0; i < rows * 16; i++) idx[i] = (uint8_t)(i % 2);
    sdgp_nm_tensor nm = {SDGP_AXIS_CHANNEL, 2, 4, rows, 32, vals, idx};
    CHECK(sdgp_sparse_bwd_data(p, dd, &nm, &e) == SDGP_ERR_INVALID && strstr(e.msg, "pack"), "unpacked: %s", e.msg);
    CHECK(sdgp_sparse_bwd_pack(p, NULL, &e) == SDGP_ERR_INVALID, "NULL w");
    CHECK(sdgp_sparse_bwd_pack(p, w, &e) == SDGP_OK, "pack");
    CHECK(sdgp_sparse_bwd_data(p, dd, &nm, &e) == SDGP_OK, "good call: %s", e.msg);
    sdgp_nm_tensor t = nm;
    t.n = 1;
    CHECK(sdgp_sparse_bwd_data(p, dd, &t, &e) == SDGP_ERR_INVALID && strstr(e.msg, "1:4"), "n:m mismatch: %s", e.msg);
    t = nm;
    t.rows = rows - 1;
    CHECK(sdgp_sparse_bwd_data(p, dd, &t, &e) == SDGP_ERR_INVALID && strstr(e.msg, "127"), "rows: %s", e.msg);
    t = nm;
    t.C = 16;
    CHECK(sdgp_sparse_bwd_data(p, dd, &t, &e) == SDGP_ERR_INVALID, "C: %s", e.msg);
    t = nm;
    t.axis = SDGP_AXIS_ROW;
    CHECK(sdgp_sparse_bwd_data(p, dd, &t, &e) == SDGP_ERR_INVALID && strstr(e.msg, "axis"), "axis: %s", e.msg);
    t = nm;
    t.index = NULL;
    CHECK(sdgp_sparse_bwd_data(p, dd, &t, &e) == SDGP_ERR_INVALID, "NULL index: %s", e.msg);
    CHECK(sdgp_sparse_bwd_data(p, NULL, &nm, &e) == SDGP_ERR_INVALID && strstr(e.msg, "dD"), "NULL dD: %s", e.msg);
    CHECK(sdgp_sparse_bwd_data(p, dd, NULL, &e) == SDGP_ERR_INVALID, "NULL dO");
    CHECK(sdgp_sparse_bwd_data(NULL, dd, &nm, &e) == SDGP_ERR_INVALID, "NULL plan");
    spconv_blocking b = {16, 6, 100, 0}; /* nr fits every ISA's kernel (AVX2: 32), so kc is what is refused */
    CHECK(spconv_set_blocking(p, &b, &e) == SDGP_ERR_INVALID && strstr(e.msg, "kc=6"), "kc: %s", e.msg);
    sdgp_sparse_bwd_destroy(p);
    sdgp_sparse_bwd_destroy(NULL);
    free(vals), free(dd), free(w), free(idx);
}

int main(void) {
    RUN(sparse_matches_naive_every_isa_and_thread_count);
    RUN(sparse_shared_masks_match_naive);
    RUN(sparse_nchw_output);
    RUN(sparse_blocking_variants);
    RUN(sparse_matches_onednn_on_pruned_tensor);
    RUN(sparse_repack_and_reuse);
    RUN(sparse_pack_strided_weights);
    RUN(geometry_errors);
    RUN(plan_and_input_errors);
    return test_finish();
}
