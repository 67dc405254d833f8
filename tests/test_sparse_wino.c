/* SDGP in the Winograd domain (sdgp_sparse_wino_*) against an independent oracle.
 *
 * The oracle builds the whole transformed gradient V = B^T d B of every (element, image, tile)
 * with the full 4x4 matrix B^T (float, so V has the kernel's bits: B's entries are 0 and +-1),
 * prunes it with sdgp_prune as one (16*B) x T x Cout tensor, multiplies by U = G g' G^T and
 * applies A^T (.) A in double. The kernel fuses all of this per work unit and prunes an image at
 * a time; the header promises the same result as this unfused pipeline for every pruning
 * function (same groups, same random counters, same rescale scopes), every ISA path and every
 * thread count (bitwise for the last). With no pruning it must equal the naive convolution.
 * With shared masks the kernel makes its micro-kernel entries straight from V (the block
 * pruning's emit); a test below checks them bitwise against the entries of the compressed rows. */
#include <omp.h>

#include "harness.h"
#include "kernels/spwino_internal.h"
#include "sdgp/conv.h"
#include "sdgp/sparse.h"
#include "sdgp/prune.h"

static const float BT[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
static const double G[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
static const double AT[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

typedef struct {
    int B, H, W, Cin, Cout, pad, n, m;
} shape;

/* dD of the unfused Winograd-domain pipeline with cfg's pruning (oracle). */
static int oracle(float *dD, const float *dO, const float *w, const sdgp_conv_geom *g, const sdgp_prune_cfg *cfg) {
    const int th = (g->H + 1) / 2, tw = (g->W + 1) / 2, T = th * tw, q = 2 - g->pad, C = g->Cout, Cin = g->Cin;
    const size_t nV = (size_t)16 * g->B * T * C;
    float *V = test_xmalloc(nV * 4), *Vp = test_xmalloc(nV * 4);
    for (int e = 0; e < 16; e++)
        for (int b = 0; b < g->B; b++)
            for (int t = 0; t < T; t++)
                for (int k = 0; k < C; k++) {
                    float d[4][4];
                    for (int y = 0; y < 4; y++)
                        for (int x = 0; x < 4; x++) {
                            int hy = 2 * (t / tw) - q + y, wx = 2 * (t % tw) - q + x;
                            d[y][x] = hy >= 0 && hy < g->Ho && wx >= 0 && wx < g->Wo ? dO[(((size_t)b * g->Ho + hy) * g->Wo + wx) * C + k] : 0.0f;
                        }
                    float r[4];
                    for (int y = 0; y < 4; y++) r[y] = BT[e % 4][0] * d[y][0] + BT[e % 4][1] * d[y][1] + BT[e % 4][2] * d[y][2] + BT[e % 4][3] * d[y][3];
                    V[(((size_t)e * g->B + b) * T + t) * C + k] = BT[e / 4][0] * r[0] + BT[e / 4][1] * r[1] + BT[e / 4][2] * r[2] + BT[e / 4][3] * r[3];
                }
    sdgp_error err;
    sdgp_prune_cfg vcfg = *cfg;
    vcfg.mask_line = tw; /* shared masks: blocks of tiles along a tile row */
    if (sdgp_prune(&vcfg, V, (int64_t)16 * g->B, T, C, Vp, NULL, &err) != SDGP_OK) {
        CHECK(0, "oracle prune: %s", err.msg);
        free(V), free(Vp);
        return 0;
    }
    double *U = test_xmalloc((size_t)16 * C * Cin * 8); /* U[e][k][c] */
    for (int k = 0; k < C; k++)
        for (int c = 0; c < Cin; c++) {
            double gr[3][3], tt[4][3];
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++) gr[i][j] = w[(((size_t)k * Cin + c) * 3 + 2 - i) * 3 + 2 - j];
            for (int a = 0; a < 4; a++)
                for (int j = 0; j < 3; j++) tt[a][j] = G[a][0] * gr[0][j] + G[a][1] * gr[1][j] + G[a][2] * gr[2][j];
            for (int a = 0; a < 4; a++)
                for (int bb = 0; bb < 4; bb++)
                    U[(((size_t)(a * 4 + bb)) * C + k) * Cin + c] = tt[a][0] * G[bb][0] + tt[a][1] * G[bb][1] + tt[a][2] * G[bb][2];
        }
    double *M = test_xmalloc((size_t)16 * Cin * 8);
    for (int b = 0; b < g->B; b++)
        for (int t = 0; t < T; t++) {
            for (int e = 0; e < 16; e++)
                for (int c = 0; c < Cin; c++) {
                    double s = 0;
                    for (int k = 0; k < C; k++) s += (double)Vp[(((size_t)e * g->B + b) * T + t) * C + k] * U[((size_t)e * C + k) * Cin + c];
                    M[e * Cin + c] = s;
                }
            for (int u = 0; u < 2; u++)
                for (int v = 0; v < 2; v++) {
                    int h = 2 * (t / tw) + u, x = 2 * (t % tw) + v;
                    if (h >= g->H || x >= g->W) continue;
                    for (int c = 0; c < Cin; c++) {
                        double s = 0;
                        for (int e = 0; e < 16; e++) s += AT[u][e / 4] * AT[v][e % 4] * M[e * Cin + c];
                        dD[(((size_t)b * g->H + h) * g->W + x) * Cin + c] = (float)s;
                    }
                }
        }
    free(V), free(Vp), free(U), free(M);
    return 1;
}

/* Runs the kernel; dD filled with NaN first so a position it forgets fails. */
static int run_wino(float *dD, size_t nD, const float *dO, const float *w, const sdgp_conv_geom *g, const sdgp_prune_cfg *cfg,
                    sdgp_isa isa, int threads) {
    sdgp_sparse_wino *p = NULL;
    sdgp_error e;
    int ok = sdgp_sparse_wino_create(&p, g, cfg->n, cfg->m, isa, threads, &e) == SDGP_OK;
    CHECK(ok, "create: %s", e.msg);
    if (!ok) return 0;
    CHECK(sdgp_sparse_wino_isa(p) == isa, "plan runs %s, asked %s", sdgp_isa_name(sdgp_sparse_wino_isa(p)), sdgp_isa_name(isa));
    for (size_t i = 0; i < nD; i++) dD[i] = NAN;
    ok = sdgp_sparse_wino_pack(p, w, &e) == SDGP_OK && sdgp_sparse_wino_data(p, dD, dO, cfg, &e) == SDGP_OK;
    CHECK(ok, "pack/data: %s", e.msg);
    sdgp_sparse_wino_destroy(p);
    return ok;
}

static const shape shapes[] = {
    /* B  H   W  Cin Cout pad n  m */
    {2, 8, 8, 16, 16, 1, 2, 4},     /* even tiles */
    {1, 7, 5, 17, 32, 1, 4, 32},    /* odd sizes (clipped tiles), Cin 17, 4:32 */
    {3, 6, 6, 70, 24, 0, 1, 4},     /* pad 0 (dD larger than dO), two column blocks */
    {1, 5, 9, 8, 12, 2, 1, 3},      /* pad 2, m = 3 */
    {2, 16, 16, 64, 128, 1, 2, 8},  /* several units and chunks */
    {5, 3, 3, 5, 8, 1, 2, 4},       /* 3x3 images: 4 tiles, one half out of the image */
    {9, 4, 4, 16, 8, 1, 2, 4},      /* many small images: several images per unit */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

typedef struct {
    sdgp_prune_fn fn;
    sdgp_rescale_scope scope;
} pruning;

TEST_CASE(wino_matches_unfused_oracle_every_function_isa_and_thread_count) {
    const pruning fns[] = {{SDGP_PRUNE_MAGNITUDE, 0}, {SDGP_PRUNE_RESCALED, SDGP_SCOPE_SAMPLE_CHANNEL}, {SDGP_PRUNE_RESCALED, SDGP_SCOPE_CHANNEL},
                           {SDGP_PRUNE_RANDOM, 0},    {SDGP_PRUNE_MVUE, 0},                         {SDGP_PRUNE_MVUE_APPROX, 0}};
    for (int si = 0; si < NSHAPES; si++) {
        const shape s = shapes[si];
        sdgp_conv_geom g;
        REQUIRE(sdgp_conv_geom_init(&g, s.B, s.H, s.W, s.Cin, s.Cout, 3, 3, 1, s.pad, NULL) == SDGP_OK, "shape %d", si);
        const size_t nO = (size_t)g.B * g.Ho * g.Wo * g.Cout, nD = (size_t)g.B * g.H * g.W * g.Cin, nW = (size_t)g.Cout * g.Cin * 9;
        float *dO = test_xmalloc(nO * 4), *w = test_xmalloc(nW * 4), *ref = test_xmalloc(nD * 4);
        float *d1 = test_xmalloc(nD * 4), *d2 = test_xmalloc(nD * 4);
        test_fill_normal(dO, nO, 500 + (uint64_t)si);
        test_fill_normal(w, nW, 600 + (uint64_t)si);
        for (size_t i = 0; i < nO; i += 5) dO[i] = 0.0f; /* zeros: groups with fewer than n nonzeros */
        /* mask blocks: per row; 3 (uneven splits of a tile row); 4; 8 (split into calls of <= nx) */
        const int blocks[] = {1, 3, 4, 8};
        for (size_t f = 0; f < sizeof fns / sizeof fns[0] * 4; f++) {
            const int mb = blocks[f % 4];
            if (fns[f / 4].fn == SDGP_PRUNE_MVUE_APPROX && (!(s.n == 2 && s.m == 4) || mb > 1)) continue;
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fns[f / 4].fn, s.n, s.m);
            cfg.scope = fns[f / 4].scope;
            cfg.mask_block = mb;
            cfg.seed = 77;
            cfg.step = 3 + (uint64_t)si;
            cfg.layer = 2;
            if (!oracle(ref, dO, w, &g, &cfg)) continue;
            FOR_EACH_ISA(isa) {
                if (!run_wino(d1, nD, dO, w, &g, &cfg, isa, 1) || !run_wino(d2, nD, dO, w, &g, &cfg, isa, 2)) continue;
                double e = test_rel_err(d1, ref, nD);
                CHECK(e <= 2e-5, "shape %d %s scope %d block %d isa %s: rel err %.3g", si, sdgp_prune_fn_name(cfg.fn), cfg.scope, mb,
                      sdgp_isa_name(isa), e);
                CHECK(test_bitwise_equal(d1, d2, nD * 4), "shape %d %s block %d isa %s: 1 and 2 threads differ", si,
                      sdgp_prune_fn_name(cfg.fn), mb, sdgp_isa_name(isa));
            }
        }
        free(dO), free(w), free(ref), free(d1), free(d2);
    }
}

/* No pruning (fn NONE, and n == m) is the plain convolution's data gradient; pruning is not. */
TEST_CASE(wino_unpruned_equals_naive_convolution) {
    for (int si = 0; si < NSHAPES; si++) {
        const shape s = shapes[si];
        sdgp_conv_geom g;
        REQUIRE(sdgp_conv_geom_init(&g, s.B, s.H, s.W, s.Cin, s.Cout, 3, 3, 1, s.pad, NULL) == SDGP_OK, "shape %d", si);
        const size_t nO = (size_t)g.B * g.Ho * g.Wo * g.Cout, nD = (size_t)g.B * g.H * g.W * g.Cin, nW = (size_t)g.Cout * g.Cin * 9;
        float *dO = test_xmalloc(nO * 4), *w = test_xmalloc(nW * 4), *ref = test_xmalloc(nD * 4), *d = test_xmalloc(nD * 4);
        test_fill_normal(dO, nO, 700 + (uint64_t)si);
        test_fill_normal(w, nW, 800 + (uint64_t)si);
        sdgp_conv_backward_data_naive(ref, dO, w, &g);
        sdgp_prune_cfg none = sdgp_prune_cfg_make(SDGP_PRUNE_NONE, s.m, s.m), full = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, s.m, s.m);
        if (run_wino(d, nD, dO, w, &g, &none, sdgp_isa_best(), 2))
            CHECK(test_rel_err(d, ref, nD) <= 1e-5, "shape %d fn none: rel err %.3g", si, test_rel_err(d, ref, nD));
        if (run_wino(d, nD, dO, w, &g, &full, sdgp_isa_best(), 2))
            CHECK(test_rel_err(d, ref, nD) <= 1e-5, "shape %d %d:%d: rel err %.3g", si, s.m, s.m, test_rel_err(d, ref, nD));
        if (s.n < s.m) {
            sdgp_prune_cfg mag = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, s.n, s.m);
            if (run_wino(d, nD, dO, w, &g, &mag, sdgp_isa_best(), 2))
                CHECK(test_rel_err(d, ref, nD) > 1e-3, "shape %d: pruned result equals the dense one", si);
        }
        free(dO), free(w), free(ref), free(d);
    }
}

/* MVUE in the Winograd domain is unbiased for dL/dD: the mean of many steps' results approaches
 * the dense data gradient (the error of the mean falls like 1/sqrt(steps)). */
TEST_CASE(wino_mvue_mean_approaches_dense) {
    sdgp_conv_geom g;
    REQUIRE(sdgp_conv_geom_init(&g, 1, 6, 6, 8, 16, 3, 3, 1, 1, NULL) == SDGP_OK, "geom");
    const size_t nO = (size_t)36 * 16, nD = (size_t)36 * 8, nW = (size_t)16 * 8 * 9;
    float *dO = test_xmalloc(nO * 4), *w = test_xmalloc(nW * 4), *ref = test_xmalloc(nD * 4), *d = test_xmalloc(nD * 4);
    double *mean = calloc(nD, sizeof *mean);
    test_fill_normal(dO, nO, 11);
    test_fill_normal(w, nW, 12);
    sdgp_conv_backward_data_naive(ref, dO, w, &g);
    sdgp_sparse_wino *p = NULL;
    sdgp_error e;
    REQUIRE(sdgp_sparse_wino_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK && sdgp_sparse_wino_pack(p, w, &e) == SDGP_OK, "%s", e.msg);
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    const int steps = 4000;
    double err_one = 0;
    for (int s = 0; s < steps; s++) {
        cfg.step = (uint64_t)s;
        REQUIRE(sdgp_sparse_wino_data(p, d, dO, &cfg, &e) == SDGP_OK, "%s", e.msg);
        if (s == 0) err_one = test_rel_err(d, ref, nD);
        for (size_t i = 0; i < nD; i++) mean[i] += d[i] / (double)steps;
    }
    double num = 0, den = 0;
    for (size_t i = 0; i < nD; i++) num += (mean[i] - ref[i]) * (mean[i] - ref[i]), den += (double)ref[i] * ref[i];
    double err_mean = sqrt(num / den);
    /* a biased estimator would keep err_mean near err_one; unbiased: about err_one / sqrt(steps) */
    CHECK(err_mean < 3.0 * err_one / sqrt((double)steps) + 1e-6, "mean of %d MVUE steps: rel err %.3g (one step %.3g)", steps,
          err_mean, err_one);
    CHECK(err_one > 0.05, "one MVUE step is not random? rel err %.3g", err_one);
    sdgp_sparse_wino_destroy(p);
    free(dO), free(w), free(ref), free(d), free(mean);
}

TEST_CASE(wino_errors) {
    sdgp_conv_geom g5, gs2, g;
    sdgp_error e;
    sdgp_sparse_wino *p = (sdgp_sparse_wino *)&e;
    REQUIRE(sdgp_conv_geom_init(&g5, 1, 8, 8, 16, 16, 5, 5, 1, 2, NULL) == SDGP_OK, "geom");
    REQUIRE(sdgp_conv_geom_init(&gs2, 1, 8, 8, 16, 16, 3, 3, 2, 1, NULL) == SDGP_OK, "geom");
    REQUIRE(sdgp_conv_geom_init(&g, 2, 6, 6, 16, 32, 3, 3, 1, 1, NULL) == SDGP_OK, "geom");
    CHECK(!sdgp_sparse_wino_supports(&g5) && !sdgp_sparse_wino_supports(&gs2) && sdgp_sparse_wino_supports(&g), "supports");
    CHECK(sdgp_sparse_wino_create(&p, &g5, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "5x5"), "5x5: %s", e.msg);
    CHECK(sdgp_sparse_wino_create(&p, &gs2, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "stride 2"), "stride: %s", e.msg);
    CHECK(sdgp_sparse_wino_create(&p, &g, 2, 3, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "m=3"), "Cout %% m: %s", e.msg);
    sdgp_conv_geom gg = g; /* grouped: the pixel-domain kernel takes it, this one does not */
    REQUIRE(sdgp_conv_geom_set_groups(&gg, 2, NULL) == SDGP_OK, "groups");
    CHECK(!sdgp_sparse_wino_supports(&gg), "supports a grouped conv");
    CHECK(sdgp_sparse_wino_create(&p, &gg, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_UNSUPPORTED && !p && strstr(e.msg, "groups=2"),
          "grouped: %s", e.msg);
    CHECK(sdgp_sparse_wino_create(&p, &g, 5, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_ERR_INVALID, "5:4: %s", e.msg);
    REQUIRE(sdgp_sparse_wino_create(&p, &g, 2, 4, SDGP_ISA_AUTO, 1, &e) == SDGP_OK, "create: %s", e.msg);
    const size_t nO = (size_t)2 * 36 * 32, nD = (size_t)2 * 36 * 16;
    float *dO = calloc(nO, 4), *dD = calloc(nD, 4), *w = calloc((size_t)32 * 16 * 9, 4);
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_ERR_INVALID && strstr(e.msg, "pack"), "unpacked: %s", e.msg);
    CHECK(sdgp_sparse_wino_pack(p, w, &e) == SDGP_OK, "pack");
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_OK, "good call: %s", e.msg);
    sdgp_prune_cfg bad = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 1, 4);
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &bad, &e) == SDGP_ERR_INVALID && strstr(e.msg, "1:4"), "n:m mismatch: %s", e.msg);
    bad.fn = SDGP_PRUNE_NONE;
    bad.n = 2;
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &bad, &e) == SDGP_ERR_INVALID && strstr(e.msg, "n = m"), "none on 2:4: %s", e.msg);
    CHECK(sdgp_sparse_wino_data(p, NULL, dO, &cfg, &e) == SDGP_ERR_INVALID && strstr(e.msg, "dD"), "NULL dD: %s", e.msg);
    CHECK(sdgp_sparse_wino_data(p, dD, dO, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "cfg"), "NULL cfg: %s", e.msg);
    dO[100] = NAN;
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_ERR_NUMERIC && strstr(e.msg, "NaN"), "NaN with mvue: %s", e.msg);
    cfg.fn = SDGP_PRUNE_RESCALED;
    cfg.scope = SDGP_SCOPE_CHANNEL;
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_ERR_NUMERIC, "NaN with rescaled (channel): %s", e.msg);
    cfg.scope = SDGP_SCOPE_SAMPLE_CHANNEL;
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_ERR_NUMERIC, "NaN with rescaled (sample-channel): %s", e.msg);
    cfg.fn = SDGP_PRUNE_MAGNITUDE;
    CHECK(sdgp_sparse_wino_data(p, dD, dO, &cfg, &e) == SDGP_OK, "NaN with magnitude is kept: %s", e.msg);
    sdgp_sparse_wino_destroy(p);
    sdgp_sparse_wino_destroy(NULL);
    free(dO), free(dD), free(w);
}

/* Shared masks: the entries spwino_loops.block_entries makes straight from x (every ISA) are
 * bitwise those of the block pruning's compressed rows, for every function that has blocks:
 * vector paths (n/m >= 1/2) and scalar ones, slices that are not whole vectors (C 36, 12, 24, 40),
 * vectors of slots whose channels spread too wide to permute (3:6, 5:8), several slices
 * (C 1040) and uneven blocks. */
TEST_CASE(wino_block_entries_equal_compressed_rows_bitwise) {
    static const struct { int n, m, C; } nms[] = {{2, 4, 36}, {1, 3, 12}, {4, 32, 64}, {2, 4, 1040}, {3, 8, 24}, {3, 6, 48}, {5, 8, 40}};
    const sdgp_prune_fn fns[] = {SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RESCALED, SDGP_PRUNE_RANDOM, SDGP_PRUNE_MVUE};
    const spwino_loops *loops[SDGP_ISA_COUNT] = {[SDGP_ISA_REF] = &spwino_loops_ref, [SDGP_ISA_AVX2] = &spwino_loops_avx2,
                                                 [SDGP_ISA_AVX512] = &spwino_loops_avx512};
    const int64_t B = 2, line = 5, P = 2 * line, rows = B * P;
    const uint32_t row_bytes = 64 * 4;
    for (size_t t = 0; t < sizeof nms / sizeof nms[0]; t++) {
        const int n = nms[t].n, m = nms[t].m;
        const int64_t C = nms[t].C, slots = C / m * n;
        float *x = test_xmalloc((size_t)(rows * C) * 4), *vals = test_xmalloc((size_t)(rows * slots) * 4);
        float *scale = test_xmalloc((size_t)(B * C) * 4);
        uint8_t *idx = test_xmalloc((size_t)(rows * slots));
        int32_t *base = test_xmalloc((size_t)slots * 4);
        spconv_entry *want = test_xmalloc((size_t)(rows * slots) * 8), *got = test_xmalloc((size_t)(rows * slots) * 8);
        test_fill_normal(x, (size_t)(rows * C), 900 + t);
        test_fill_normal(scale, (size_t)(B * C), 950 + t);
        for (int64_t i = 0; i < rows * C; i += 7) x[i] = 0.0f; /* ties and groups with few nonzeros */
        for (int64_t s = 0; s < slots; s++) base[s] = (int32_t)(s / n * m);
        for (size_t f = 0; f < sizeof fns / sizeof fns[0]; f++)
            for (int block = 2; block <= 4; block++)
                FOR_EACH_ISA(isa) {
                    prune_job j;
                    memset(&j, 0, sizeof j);
                    j.fn = fns[f];
                    j.axis = SDGP_AXIS_CHANNEL;
                    j.n = n, j.m = m, j.B = B, j.P = P, j.rows = rows, j.C = C;
                    j.x = x;
                    j.key = sdgp_philox_make_key(5, 6, 7);
                    j.group0 = 11;
                    j.scale = fns[f] == SDGP_PRUNE_RESCALED ? scale : NULL;
                    j.scale_bstride = C;
                    j.block = block, j.line = line;
                    j.rank = prune_kernels_for(isa);
                    j.vals = vals, j.idx = idx;
                    int bad = prune_kernels_block.prune(&j, 0, rows);
                    spconv_entries_from_slots(want, vals, idx, base, rows, slots, slots, row_bytes);
                    const spwino_sink sink = {.ent = got, .slots = slots, .row_bytes = row_bytes};
                    j.vals = NULL, j.idx = NULL;
                    j.emit = loops[isa]->block_entries;
                    j.emit_ctx = &sink;
                    memset(got, 0xff, (size_t)(rows * slots) * 8);
                    bad |= prune_kernels_block.prune(&j, 0, rows);
                    CHECK(!bad, "%d:%d C %d %s block %d: non-finite", n, m, (int)C, sdgp_prune_fn_name(fns[f]), block);
                    CHECK(test_bitwise_equal(want, got, (size_t)(rows * slots) * 8), "%d:%d C %d %s block %d isa %s: entries differ", n, m,
                          (int)C, sdgp_prune_fn_name(fns[f]), block, sdgp_isa_name(isa));
                }
        free(x), free(vals), free(scale), free(idx), free(base), free(want), free(got);
    }
}

int main(void) {
    RUN(wino_matches_unfused_oracle_every_function_isa_and_thread_count);
    RUN(wino_unpruned_equals_naive_convolution);
    RUN(wino_mvue_mean_approaches_dense);
    RUN(wino_errors);
    RUN(wino_block_entries_equal_compressed_rows_bitwise);
    return test_finish();
}
