/* sdgp_prune with cfg->layout NCHW: for every function, scope, n:m, shared-mask block, ISA path and
 * thread count, the NCHW input gives bitwise the result of pruning its NHWC copy (the compressed form,
 * and the dense output in NCHW = the NHWC dense output transposed), including the errors. Shapes
 * cover several tiles per sample with a short last one, C large enough for the smallest tile, and
 * mask lines that do not divide into blocks, and 32x32 planes (4 KiB apart, the transposes' worst
 * case; tiles with more channels than positions and the reverse, the two loop orders of transpose.h). */
#include "harness.h"
#include "sdgp/isa.h"
#include "sdgp/prune.h"

/* y[b][c][p] = x[b][p][c] */
static void to_nchw(float *y, const float *x, int64_t B, int64_t P, int64_t C) {
    for (int64_t b = 0; b < B; b++)
        for (int64_t p = 0; p < P; p++)
            for (int64_t c = 0; c < C; c++) y[(b * C + c) * P + p] = x[(b * P + p) * C + c];
}

typedef struct {
    float *out;
    sdgp_nm_tensor nm;
    sdgp_status st;
} result;

static void run(result *r, const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C, int with_nm) {
    const size_t total = (size_t)(B * P * C);
    r->out = test_xmalloc(total * 4);
    memset(r->out, 0xAB, total * 4);
    memset(&r->nm, 0, sizeof r->nm);
    sdgp_error e;
    r->st = with_nm ? sdgp_nm_alloc(&r->nm, cfg->axis, cfg->n, cfg->m, B * P, C, &e) : SDGP_OK;
    if (r->st == SDGP_OK) {
        if (with_nm) {
            memset(r->nm.values, 0xCD, sdgp_nm_slots(&r->nm) * 4);
            memset(r->nm.index, 0xEF, sdgp_nm_slots(&r->nm));
        }
        r->st = sdgp_prune(cfg, x, B, P, C, r->out, with_nm ? &r->nm : NULL, &e);
    }
}

static void drop(result *r) {
    free(r->out);
    sdgp_nm_free(&r->nm);
}

/* The NCHW result r equals the NHWC one ref (whose dense output is turned to NCHW in tmp). */
static int same(const result *ref, const result *r, float *tmp, int64_t B, int64_t P, int64_t C) {
    if (ref->st != r->st) return 0;
    if (ref->st != SDGP_OK) return 1;
    const size_t slots = r->nm.values ? sdgp_nm_slots(&ref->nm) : 0; /* r without the compressed form */
    to_nchw(tmp, ref->out, B, P, C);
    return test_bitwise_equal(tmp, r->out, (size_t)(B * P * C) * 4) &&
           (!slots || (test_bitwise_equal(ref->nm.values, r->nm.values, slots * 4) && test_bitwise_equal(ref->nm.index, r->nm.index, slots)));
}

TEST_CASE(nchw_equals_nhwc_copy) {
    static const int NM[][2] = {{2, 4}, {1, 4}, {3, 8}, {4, 32}, {2, 3}, {4, 4}};
    const struct {
        int64_t B, P, k, line; /* C = k * m; line: mask_line for blocks */
    } shapes[] = {{2, 300, 4, 25}, {3, 7, 9, 7}, {1, 40, 64, 0}, {2, 33, 1, 11}, {2, 1024, 8, 32}};
    const int blocks[] = {1, 4};
    long compared = 0;
    for (int fn = SDGP_PRUNE_NONE; fn < SDGP_PRUNE_COUNT; fn++)
        for (size_t t = 0; t < sizeof NM / sizeof NM[0]; t++)
            for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
                for (int scope = 0; scope < 2; scope++)
                    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
                        const int n = NM[t][0], m = NM[t][1];
                        if (fn == SDGP_PRUNE_MVUE_APPROX && !(n == 2 && m == 4)) continue;
                        if (fn == SDGP_PRUNE_NONE && n != m) continue;
                        if ((scope && fn != SDGP_PRUNE_RESCALED) || (blocks[bi] > 1 && fn == SDGP_PRUNE_MVUE_APPROX)) continue;
                        const int64_t B = shapes[si].B, P = shapes[si].P, C = shapes[si].k * m;
                        const size_t total = (size_t)(B * P * C);
                        float *x = test_xmalloc(total * 4), *xc = test_xmalloc(total * 4), *tmp = test_xmalloc(total * 4);
                        test_fill_prune_input(x, total, 17 * t + 5 * si + 1000 * fn + bi);
                        to_nchw(xc, x, B, P, C);
                        sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, n, m);
                        cfg.scope = (sdgp_rescale_scope)scope;
                        cfg.seed = 9 + si;
                        cfg.step = 2;
                        cfg.layer = 3;
                        cfg.mask_block = blocks[bi];
                        cfg.mask_line = blocks[bi] > 1 ? shapes[si].line : 0;
                        FOR_EACH_ISA(isa) {
                            cfg.isa = isa;
                            cfg.threads = 1;
                            cfg.layout = SDGP_LAYOUT_NHWC;
                            result ref;
                            run(&ref, &cfg, x, B, P, C, 1);
                            CHECK(ref.st == SDGP_OK, "%s %d:%d shape %zu: NHWC status %d", sdgp_prune_fn_name(cfg.fn), n, m, si, ref.st);
                            cfg.layout = SDGP_LAYOUT_NCHW;
                            for (int threads = 1; threads <= 2; threads++)
                                for (int with_nm = 0; with_nm < 2; with_nm++) {
                                    cfg.threads = threads;
                                    result r;
                                    run(&r, &cfg, xc, B, P, C, with_nm);
                                    CHECK(same(&ref, &r, tmp, B, P, C),
                                          "%s %d:%d scope %d block %d shape %lldx%lldx%lld %s x%d%s: NCHW differs from the NHWC copy (status %d)",
                                          sdgp_prune_fn_name(cfg.fn), n, m, scope, cfg.mask_block, (long long)B, (long long)P, (long long)C,
                                          sdgp_isa_name(cfg.isa), threads, with_nm ? " +nm" : "", r.st);
                                    compared++;
                                    drop(&r);
                                }
                            drop(&ref);
                        }
                        free(x);
                        free(xc);
                        free(tmp);
                    }
    fprintf(stderr, "  %ld comparisons\n", compared);
}

/* Non-finite input: the same status as the NHWC copy, and the message names the element in NCHW. */
TEST_CASE(nchw_errors) {
    const int64_t B = 2, P = 5, C = 8;
    float x[2 * 5 * 8];
    test_fill_prune_input(x, sizeof x / sizeof x[0], 3);
    x[(1 * C + 6) * P + 2] = NAN; /* b=1, c=6, p=2 */
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    cfg.layout = SDGP_LAYOUT_NCHW;
    float out[2 * 5 * 8];
    sdgp_error e;
    CHECK(sdgp_prune(&cfg, x, B, P, C, out, NULL, &e) == SDGP_ERR_NUMERIC, "mvue on NaN: not NUMERIC");
    CHECK(strstr(e.msg, "b=1, p=2, c=6; NCHW") != NULL, "message: %s", e.msg);
    cfg.axis = SDGP_AXIS_ROW;
    CHECK(sdgp_prune(&cfg, x, B, P, C, out, NULL, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "NCHW"), "row axis: %s", e.msg);
    cfg.axis = SDGP_AXIS_CHANNEL;
    cfg.layout = (sdgp_layout)7;
    CHECK(sdgp_prune(&cfg, x, B, P, C, out, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "layout=7"), "layout 7: %s", e.msg);
}

int main(void) {
    RUN(nchw_equals_nhwc_copy);
    RUN(nchw_errors);
    return test_finish();
}
