/* The sparse backward-data convolution with the pruning fused into its packing
 * (sdgp_sparse_bwd_data_pruned) against the two-pass path it replaces: sdgp_prune into the
 * compressed form, then sdgp_sparse_bwd_data. Bitwise equal for every pruning function (the
 * sampled ones exercise the Philox counters of each piece of rows, rescaled both scopes its
 * factors), n:m patterns with m = 3 .. 32 and n = m, every ISA path, 1 and 2 threads, and work
 * units of whole images and of row bands (the halo rows of a band are pruned twice); and with
 * masks shared by blocks of pixels along rows of dO (mask_block), the kernel's shared-mask path
 * too. Then the errors: non-finite values, shared masks along other lines, mismatched n:m, NCHW. */
#include <math.h>

#include "harness.h"
#include "kernels/spconv_internal.h"
#include "sdgp/conv.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

typedef struct {
    int B, H, W, Cin, Cout, k, s, p, n, m, groups;
} shape;

static const shape shapes[] = {
    /* B  H   W  Cin Cout k  s  p  n  m  groups */
    {3, 7, 6, 24, 32, 1, 1, 0, 2, 4, 1},   /* 1x1: the GEMM form */
    {2, 9, 8, 17, 64, 3, 3, 1, 1, 4, 1},   /* stride 3, Cin 17 */
    {2, 8, 8, 40, 64, 3, 1, 1, 2, 8, 1},   /* 3x3 pad 1 */
    {1, 11, 9, 16, 64, 5, 2, 2, 4, 32, 1}, /* 5x5 stride 2, 4:32 */
    {2, 6, 5, 20, 12, 1, 1, 0, 1, 3, 1},   /* m = 3 (the reference pruning kernels) */
    {2, 6, 6, 16, 16, 3, 1, 1, 4, 4, 1},   /* n = m: the identity */
    {2, 8, 7, 32, 32, 3, 2, 1, 2, 4, 4},   /* grouped */
};
#define NSHAPES ((int)(sizeof shapes / sizeof shapes[0]))

static const sdgp_prune_fn fns[] = {SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RESCALED, SDGP_PRUNE_RANDOM, SDGP_PRUNE_MVUE,
                                    SDGP_PRUNE_MVUE_APPROX};
#define NFNS ((int)(sizeof fns / sizeof fns[0]))

typedef struct {
    sdgp_conv_geom g;
    int n, m;
    int64_t P, nO, nD, nW;
    float *dO, *w;
} problem;

static int problem_make(problem *pb, const shape *s, uint64_t seed) {
    memset(pb, 0, sizeof *pb);
    if (sdgp_conv_geom_init(&pb->g, s->B, s->H, s->W, s->Cin, s->Cout, s->k, s->k, s->s, s->p, NULL) != SDGP_OK ||
        sdgp_conv_geom_set_groups(&pb->g, s->groups, NULL) != SDGP_OK)
        return 0;
    const sdgp_conv_geom *g = &pb->g;
    pb->n = s->n, pb->m = s->m;
    pb->P = (int64_t)g->Ho * g->Wo;
    pb->nO = g->B * pb->P * g->Cout;
    pb->nD = (int64_t)g->B * g->H * g->W * g->Cin;
    pb->nW = (int64_t)g->Cout * (g->Cin / g->groups) * g->kh * g->kw;
    pb->dO = test_xmalloc((size_t)pb->nO * 4);
    pb->w = test_xmalloc((size_t)pb->nW * 4);
    test_fill_normal(pb->dO, (size_t)pb->nO, seed);
    test_fill_normal(pb->w, (size_t)pb->nW, seed + 1);
    for (int64_t i = 0; i < pb->nO; i += 7) pb->dO[i] = 0.0f; /* groups with fewer than n nonzeros */
    /* ties decide: every 5th group all zero, every 3rd equal magnitudes of both signs, -0.0 too */
    for (int64_t gi = 0; gi < pb->nO / s->m; gi++)
        for (int q = 0; q < s->m; q++)
            if (gi % 5 == 0) pb->dO[gi * s->m + q] = q % 2 ? -0.0f : 0.0f;
            else if (gi % 3 == 0) pb->dO[gi * s->m + q] = q % 3 ? 0.5f : -0.5f;
    return 1;
}

static void problem_free(problem *pb) {
    free(pb->dO);
    free(pb->w);
}

/* A packed plan (tile_px > 0: that unit size instead of the default); NULL on error. */
static sdgp_sparse_bwd *plan_make(const problem *pb, sdgp_isa isa, int threads, int64_t tile_px) {
    sdgp_sparse_bwd *p = NULL;
    sdgp_error e;
    int ok = sdgp_sparse_bwd_create(&p, &pb->g, pb->n, pb->m, isa, threads, &e) == SDGP_OK;
    CHECK(ok, "create: %s", e.msg);
    if (ok && tile_px > 0) {
        spconv_blocking b = p->blk;
        b.tile_px = tile_px;
        ok = spconv_set_blocking(p, &b, &e) == SDGP_OK;
        CHECK(ok, "blocking: %s", e.msg);
    }
    if (ok) ok = sdgp_sparse_bwd_pack(p, pb->w, &e) == SDGP_OK;
    CHECK(ok, "pack: %s", e.msg);
    if (!ok) sdgp_sparse_bwd_destroy(p);
    return ok ? p : NULL;
}

/* dD by the two passes: sdgp_prune into the compressed form, then the kernel. */
static int two_pass(float *dD, sdgp_sparse_bwd *p, const problem *pb, const sdgp_prune_cfg *cfg) {
    sdgp_nm_tensor nm = {0};
    sdgp_error e;
    int ok = sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, pb->n, pb->m, pb->g.B * pb->P, pb->g.Cout, &e) == SDGP_OK &&
             sdgp_prune(cfg, pb->dO, pb->g.B, pb->P, pb->g.Cout, NULL, &nm, &e) == SDGP_OK &&
             sdgp_sparse_bwd_data(p, dD, &nm, &e) == SDGP_OK;
    CHECK(ok, "two-pass: %s", e.msg);
    sdgp_nm_free(&nm);
    return ok;
}

TEST_CASE(fused_pruning_is_bitwise_the_two_pass_product) {
    for (int si = 0; si < NSHAPES; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, &shapes[si], 500 + (uint64_t)si), "shape %d: bad geometry", si);
        float *d2 = test_xmalloc((size_t)pb.nD * 4), *df = test_xmalloc((size_t)pb.nD * 4);
        FOR_EACH_ISA(isa) {
            for (int threads = 1; threads <= 2; threads++)
                /* default units, then row bands of one row (the halo rows pruned in two units) */
                for (int64_t tile_px = 0; tile_px <= pb.g.W; tile_px += pb.g.W) {
                    sdgp_sparse_bwd *p = plan_make(&pb, isa, threads, tile_px);
                    if (!p) continue;
                    for (int fi = 0; fi < NFNS; fi++)
                        for (int scope = 0; scope < 2; scope++) {
                            if (scope && fns[fi] != SDGP_PRUNE_RESCALED) continue;
                            if (fns[fi] == SDGP_PRUNE_MVUE_APPROX && !(pb.n == 2 && pb.m == 4)) continue;
                            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fns[fi], pb.n, pb.m);
                            cfg.scope = (sdgp_rescale_scope)scope;
                            cfg.isa = isa;
                            cfg.threads = threads;
                            cfg.seed = 7, cfg.step = 3, cfg.layer = (uint32_t)si;
                            for (int64_t i = 0; i < pb.nD; i++) d2[i] = df[i] = NAN;
                            if (!two_pass(d2, p, &pb, &cfg)) continue;
                            sdgp_error e;
                            const int ok = sdgp_sparse_bwd_data_pruned(p, df, pb.dO, &cfg, &e) == SDGP_OK;
                            CHECK(ok, "shape %d %s: %s", si, sdgp_prune_fn_name(fns[fi]), e.msg);
                            CHECK(!ok || test_bitwise_equal(d2, df, (size_t)pb.nD * 4),
                                  "shape %d isa %s threads %d units %lld: %s (scope %d) fused differs from the two passes", si,
                                  sdgp_isa_name(isa), threads, (long long)tile_px, sdgp_prune_fn_name(fns[fi]), scope);
                        }
                    sdgp_sparse_bwd_destroy(p);
                }
        }
        free(d2);
        free(df);
        problem_free(&pb);
    }
}

/* Shared masks: blocks of P pixels along rows of dO (mask_line = Wo: what the model prunes), the plan
 * told so (its shared-mask kernel on stride-1 layers), and lines of half a row into a plan that is not. */
TEST_CASE(fused_shared_masks_are_bitwise_the_two_pass_product) {
    static const sdgp_prune_fn block_fns[] = {SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RESCALED, SDGP_PRUNE_RANDOM, SDGP_PRUNE_MVUE};
    int runs = 0;
    for (int si = 0; si < NSHAPES; si++) {
        problem pb;
        REQUIRE(problem_make(&pb, &shapes[si], 700 + (uint64_t)si), "shape %d: bad geometry", si);
        float *d2 = test_xmalloc((size_t)pb.nD * 4), *df = test_xmalloc((size_t)pb.nD * 4);
        FOR_EACH_ISA(isa) {
            for (int threads = 1; threads <= 2; threads++)
                for (int64_t tile_px = 0; tile_px <= pb.g.W; tile_px += pb.g.W)
                    for (int P = 2; P <= 4; P += 2)
                        for (int half = 0; half < 2; half++) {
                            if (half && pb.g.Wo % 2) continue;
                            sdgp_sparse_bwd *p = plan_make(&pb, isa, threads, tile_px);
                            if (!p) continue;
                            sdgp_error e;
                            if (!half) CHECK(sdgp_sparse_bwd_set_mask_block(p, P, &e) == SDGP_OK, "set_mask_block: %s", e.msg);
                            for (int fi = 0; fi < (int)(sizeof block_fns / sizeof block_fns[0]); fi++)
                                for (int scope = 0; scope < 2; scope++) {
                                    if (scope && block_fns[fi] != SDGP_PRUNE_RESCALED) continue;
                                    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(block_fns[fi], pb.n, pb.m);
                                    cfg.scope = (sdgp_rescale_scope)scope;
                                    cfg.isa = isa;
                                    cfg.threads = threads;
                                    cfg.seed = 9, cfg.step = 2, cfg.layer = (uint32_t)si;
                                    cfg.mask_block = P;
                                    cfg.mask_line = half ? pb.g.Wo / 2 : pb.g.Wo;
                                    for (int64_t i = 0; i < pb.nD; i++) d2[i] = df[i] = NAN;
                                    if (!two_pass(d2, p, &pb, &cfg)) continue;
                                    const int ok = sdgp_sparse_bwd_data_pruned(p, df, pb.dO, &cfg, &e) == SDGP_OK;
                                    CHECK(ok, "shape %d %s P %d: %s", si, sdgp_prune_fn_name(block_fns[fi]), P, e.msg);
                                    CHECK(!ok || test_bitwise_equal(d2, df, (size_t)pb.nD * 4),
                                          "shape %d isa %s threads %d units %lld P %d line %lld: %s (scope %d) fused differs from "
                                          "the two passes",
                                          si, sdgp_isa_name(isa), threads, (long long)tile_px, P, (long long)cfg.mask_line,
                                          sdgp_prune_fn_name(block_fns[fi]), scope);
                                    runs += ok;
                                }
                            sdgp_sparse_bwd_destroy(p);
                        }
        }
        free(d2);
        free(df);
        problem_free(&pb);
    }
    CHECK(runs > 500, "only %d shared-mask runs", runs);
}

TEST_CASE(fused_pruning_errors) {
    problem pb;
    REQUIRE(problem_make(&pb, &shapes[0], 900), "geometry");
    float *dD = test_xmalloc((size_t)pb.nD * 4);
    sdgp_sparse_bwd *p = plan_make(&pb, SDGP_ISA_AUTO, 2, 0);
    REQUIRE(p, "plan");
    sdgp_error e, e2;
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, pb.n, pb.m);

    /* a NaN under MVUE: sdgp_prune's error, naming the same element */
    pb.dO[5 * pb.g.Cout + 3] = NAN;
    sdgp_nm_tensor nm = {0};
    REQUIRE(sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, pb.n, pb.m, pb.g.B * pb.P, pb.g.Cout, &e) == SDGP_OK, "alloc");
    CHECK(sdgp_prune(&cfg, pb.dO, pb.g.B, pb.P, pb.g.Cout, NULL, &nm, &e2) == SDGP_ERR_NUMERIC, "prune accepts a NaN");
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_NUMERIC, "fused MVUE accepts a NaN");
    CHECK(!strcmp(e.msg, e2.msg), "messages differ: '%s' vs '%s'", e.msg, e2.msg);
    cfg.fn = SDGP_PRUNE_RESCALED;
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_NUMERIC && strstr(e.msg, "NaN"),
          "fused rescaled: %s", e.msg);
    cfg.fn = SDGP_PRUNE_MAGNITUDE; /* magnitude keeps NaNs, as sdgp_prune */
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_OK, "fused magnitude with a NaN: %s", e.msg);
    sdgp_nm_free(&nm);

    cfg.mask_block = 2; /* lines of a whole image (mask_line 0) cross the rows of dO that units take */
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "mask_line"),
          "shared masks along images: %s", e.msg);
    cfg.mask_line = pb.g.Wo;
    REQUIRE(sdgp_sparse_bwd_set_mask_block(p, 3, &e) == SDGP_OK, "set_mask_block: %s", e.msg);
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_INVALID && strstr(e.msg, "blocks of 3"),
          "plan and cfg blocks differ: %s", e.msg);
    cfg.mask_block = 3, cfg.mask_line = pb.g.Wo / 2;
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "lines of 3"),
          "the plan's blocks need lines of a row: %s", e.msg);
    REQUIRE(sdgp_sparse_bwd_set_mask_block(p, 1, &e) == SDGP_OK, "set_mask_block: %s", e.msg);
    cfg.mask_block = 1, cfg.mask_line = 0;
    cfg.layout = SDGP_LAYOUT_NCHW;
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "NCHW"),
          "NCHW: %s", e.msg);
    cfg.layout = SDGP_LAYOUT_NHWC;
    cfg.n = 1;
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, pb.dO, &cfg, &e) == SDGP_ERR_INVALID && strstr(e.msg, "1:4"), "n:m: %s", e.msg);
    cfg.n = pb.n;
    CHECK(sdgp_sparse_bwd_data_pruned(p, dD, NULL, &cfg, &e) == SDGP_ERR_INVALID && strstr(e.msg, "dO"), "NULL dO: %s",
          e.msg);
    sdgp_sparse_bwd_destroy(p);
    free(dD);
    problem_free(&pb);
}

int main(void) {
    RUN(fused_pruning_is_bitwise_the_two_pass_product);
    RUN(fused_shared_masks_are_bitwise_the_two_pass_product);
    RUN(fused_pruning_errors);
    return test_finish();
}
