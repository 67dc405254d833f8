/* N:M pruning: API, properties against brute-force oracles, the compressed form, bad input.
 * Shared masks (mask_block): against a brute-force oracle, exact unbiasedness of block MVUE; row
 * masks shared by channels (the row axis's mask_block).
 * (MVUE/random distributions: test_prune_mvue.c; ISA paths and threads: test_prune_isa.c.) */
#include "harness.h"
#include "prune/prune_internal.h"
#include "sdgp/prune.h"

static const int NM[][2] = {{1, 1}, {1, 2}, {2, 4}, {1, 4}, {3, 4}, {2, 3}, {4, 8}, {3, 5}, {2, 16},
                            {4, 32}, {8, 16}, {1, 64}, {17, 64}, {63, 64}, {64, 64}};
#define N_NM ((int)(sizeof NM / sizeof NM[0]))

/* Test data: normal values with a share of exact ties, zeros, -0.0 and tiny values. */
static void fill(float *x, size_t count, uint64_t seed) {
    for (size_t i = 0; i < count; i++) {
        double u = test_rand_u01(&seed);
        float v = test_rand_normal(&seed);
        if (u < 0.10) v = 0.0f;
        else if (u < 0.13) v = -0.0f;
        else if (u < 0.30) v = (float)(int)(v * 2) * 0.5f; /* few levels: many ties, both signs */
        else if (u < 0.32) v *= 1e-40f;                     /* denormal */
        x[i] = v;
    }
}

/* The brute-force ranking: NaN above everything, then |x|; ties to the lower index. */
static int beats(float a, int ia, float b, int ib) {
    int na = a != a, nb = b != b;
    if (na != nb) return na;
    if (!na && fabsf(a) != fabsf(b)) return fabsf(a) > fabsf(b);
    return ia < ib;
}

/* Element e of group (grp, k) in a rows x C tensor. */
static int64_t elem(int axis, int64_t C, int m, int64_t grp, int k) {
    return axis == SDGP_AXIS_CHANNEL ? grp * m + k : (grp / C * m + k) * C + grp % C;
}

typedef struct {
    int64_t B, P, C;
} shape;

/* A few shapes that fit n:m on the axis, including rows = 1, C = m, odd B and P. */
static int shapes_for(int m, int axis, shape *s) {
    int k = 0;
    if (axis == SDGP_AXIS_CHANNEL) {
        s[k++] = (shape){1, 1, m};
        s[k++] = (shape){3, 5, m};
        s[k++] = (shape){2, 7, 3 * m};
        s[k++] = (shape){1, 3, 8 * m};
    } else {
        s[k++] = (shape){1, m, 1};
        s[k++] = (shape){m, 3, 5};
        s[k++] = (shape){3, m, 7};
        s[k++] = (shape){1, 2 * m, 16};
    }
    return k;
}

static sdgp_status prune_both(const sdgp_prune_cfg *cfg, const float *x, shape s, float *out, sdgp_nm_tensor *nm, sdgp_error *e) {
    sdgp_status st = sdgp_nm_alloc(nm, cfg->axis, cfg->n, cfg->m, s.B * s.P, s.C, e);
    if (st) return st;
    return sdgp_prune(cfg, x, s.B, s.P, s.C, out, nm, e);
}

TEST_CASE(names_and_parsing) {
    sdgp_prune_fn fn;
    sdgp_error e;
    for (int i = 0; i < SDGP_PRUNE_COUNT; i++) {
        CHECK(sdgp_prune_fn_parse(sdgp_prune_fn_name((sdgp_prune_fn)i), &fn, NULL) == SDGP_OK && fn == (sdgp_prune_fn)i, "round trip %d", i);
    }
    CHECK(strcmp(sdgp_prune_fn_name(SDGP_PRUNE_MVUE_APPROX), "mvue-approx") == 0, "name");
    CHECK(sdgp_prune_fn_parse("topk", &fn, &e) == SDGP_ERR_INVALID && strstr(e.msg, "'topk'"), "bad fn: %s", e.msg);
    int n, m;
    CHECK(sdgp_nm_parse("2:4", &n, &m, NULL) == SDGP_OK && n == 2 && m == 4, "2:4");
    CHECK(sdgp_nm_parse("64:64", &n, &m, NULL) == SDGP_OK && n == 64 && m == 64, "64:64");
    const char *bad[] = {"", "2", "2:", ":4", "a:4", "2:4x", " 2:4", "-1:4", "0:4", "5:4", "1:65", "2:0", "99999999999:4"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sdgp_error_clear(&e);
        CHECK(sdgp_nm_parse(bad[i], &n, &m, &e) == SDGP_ERR_INVALID, "'%s' accepted", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "'%s'", bad[i]);
        CHECK(strstr(e.msg, want) != NULL, "message names the text %s: %s", want, e.msg);
    }
    CHECK(sdgp_nm_parse("5:4", &n, &m, &e) == SDGP_ERR_INVALID && strstr(e.msg, "n=5"), "n named: %s", e.msg);
    CHECK(sdgp_nm_parse("1:65", &n, &m, &e) == SDGP_ERR_INVALID && strstr(e.msg, "m=65"), "m named: %s", e.msg);
    sdgp_prune_cfg c = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    CHECK(c.fn == SDGP_PRUNE_MVUE && c.n == 2 && c.m == 4 && c.axis == SDGP_AXIS_CHANNEL && c.scope == SDGP_SCOPE_SAMPLE_CHANNEL &&
              c.isa == SDGP_ISA_AUTO && c.threads == 0 && c.seed == 0,
          "cfg_make defaults");
}

/* Magnitude keeps exactly the brute-force top n (tie rule included), values untouched; the
 * compressed form agrees with the dense output and with sdgp_nm_compress of it. */
TEST_CASE(magnitude_matches_oracle) {
    for (int t = 0; t < N_NM; t++)
        for (int axis = 0; axis < 2; axis++) {
            const int n = NM[t][0], m = NM[t][1];
            shape sh[8];
            int ns = shapes_for(m, axis, sh);
            for (int si = 0; si < ns; si++) {
                shape s = sh[si];
                size_t total = (size_t)(s.B * s.P * s.C);
                float *x = test_xmalloc(total * 4), *out = test_xmalloc(total * 4), *dec = test_xmalloc(total * 4);
                fill(x, total, 1000 + t * 10 + si);
                if (si == 1 && total > 3) x[1] = NAN, x[2] = -INFINITY; /* NaN ranks first, kept */
                sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, n, m);
                cfg.axis = (sdgp_axis)axis;
                sdgp_nm_tensor nm, nm2;
                sdgp_error e;
                memset(&nm2, 0, sizeof nm2);
                sdgp_status st = prune_both(&cfg, x, s, out, &nm, &e);
                CHECK(st == SDGP_OK, "%d:%d axis %d: %s", n, m, axis, e.msg);
                int64_t groups = (int64_t)total / m, wrong = 0;
                for (int64_t g = 0; g < groups && st == SDGP_OK; g++)
                    for (int k = 0; k < m; k++) {
                        int rank = 0;
                        float v = x[elem(axis, s.C, m, g, k)];
                        for (int q = 0; q < m; q++)
                            if (q != k) rank += beats(x[elem(axis, s.C, m, g, q)], q, v, k);
                        float o = out[elem(axis, s.C, m, g, k)];
                        int ok = rank < n ? memcmp(&o, &v, 4) == 0 : (o == 0.0f && !signbit(o));
                        wrong += !ok;
                    }
                CHECK(wrong == 0, "%d:%d axis %d shape %lldx%lldx%lld: %lld wrong values", n, m, axis, (long long)s.B, (long long)s.P,
                      (long long)s.C, (long long)wrong);
                CHECK(sdgp_nm_decompress(&nm, dec, &e) == SDGP_OK && test_bitwise_equal(dec, out, total * 4), "%d:%d axis %d: decompress != out", n, m,
                      axis);
                CHECK(sdgp_nm_alloc(&nm2, cfg.axis, n, m, s.B * s.P, s.C, &e) == SDGP_OK && sdgp_nm_compress(out, &nm2, &e) == SDGP_OK,
                      "compress: %s", e.msg);
                size_t slots = sdgp_nm_slots(&nm);
                CHECK(slots == total / m * n, "slots");
                CHECK(test_bitwise_equal(nm.values, nm2.values, slots * 4) && test_bitwise_equal(nm.index, nm2.index, slots),
                      "%d:%d axis %d: prune's compressed form != compress(out)", n, m, axis);
                sdgp_nm_free(&nm);
                sdgp_nm_free(&nm2);
                free(x);
                free(out);
                free(dec);
            }
        }
}

/* Every function: at most n nonzeros per group, kept values drawn from the group's own positions,
 * index slots increasing and < m, compressed == dense. Also without `out` (nm only) and without nm. */
TEST_CASE(structure_every_function) {
    for (int fn = SDGP_PRUNE_RANDOM; fn < SDGP_PRUNE_COUNT; fn++)
        for (int t = 0; t < N_NM; t++)
            for (int axis = 0; axis < 2; axis++) {
                const int n = NM[t][0], m = NM[t][1];
                if (fn == SDGP_PRUNE_MVUE_APPROX && !(n == 2 && m == 4) && n != m) continue;
                shape sh[8];
                int ns = shapes_for(m, axis, sh);
                for (int si = 0; si < ns; si++) {
                    shape s = sh[si];
                    size_t total = (size_t)(s.B * s.P * s.C);
                    float *x = test_xmalloc(total * 4), *out = test_xmalloc(total * 4), *dec = test_xmalloc(total * 4),
                          *out2 = test_xmalloc(total * 4);
                    fill(x, total, 77 + t + si * 100 + fn * 1000);
                    sdgp_prune_cfg cfg = sdgp_prune_cfg_make((sdgp_prune_fn)fn, n, m);
                    cfg.axis = (sdgp_axis)axis;
                    cfg.seed = 5;
                    cfg.scope = si & 1 ? SDGP_SCOPE_CHANNEL : SDGP_SCOPE_SAMPLE_CHANNEL;
                    sdgp_nm_tensor nm, nm2;
                    sdgp_error e;
                    sdgp_status st = prune_both(&cfg, x, s, out, &nm, &e);
                    REQUIRE(st == SDGP_OK, "%s %d:%d axis %d: %s", sdgp_prune_fn_name(cfg.fn), n, m, axis, e.msg);
                    int64_t groups = (int64_t)total / m, over = 0, badidx = 0, moved = 0;
                    for (int64_t g = 0; g < groups; g++) {
                        int nnz = 0;
                        for (int k = 0; k < m; k++) {
                            int64_t i = elem(axis, s.C, m, g, k);
                            nnz += out[i] != 0;
                            if (out[i] != 0 && x[i] == 0) moved++; /* a value appeared where x is 0 */
                            if (out[i] != 0 && signbit(out[i]) != signbit(x[i])) moved++;
                        }
                        over += nnz > n;
                        int64_t s0 = axis == SDGP_AXIS_CHANNEL ? g * n : (g / s.C * n) * s.C + g % s.C;
                        int64_t stride = axis == SDGP_AXIS_CHANNEL ? 1 : s.C;
                        for (int j = 0; j < n; j++) {
                            int idx = nm.index[s0 + j * stride];
                            badidx += idx >= m || (j > 0 && idx <= nm.index[s0 + (j - 1) * stride]);
                        }
                    }
                    CHECK(over == 0 && badidx == 0 && moved == 0, "%s %d:%d axis %d: %lld groups over n, %lld bad indices, %lld misplaced",
                          sdgp_prune_fn_name(cfg.fn), n, m, axis, (long long)over, (long long)badidx, (long long)moved);
                    /* decompress gives the dense output back (a -0.0 the sampler wrote may return as +0.0:
                     * the compressed form pads with the lowest-index zeros), and compress(out) is nm */
                    REQUIRE(sdgp_nm_decompress(&nm, dec, &e) == SDGP_OK, "%s", e.msg);
                    int64_t diff = 0;
                    for (size_t i = 0; i < total; i++) diff += !(dec[i] == out[i] || (isnan(dec[i]) && isnan(out[i])));
                    CHECK(diff == 0, "%s %d:%d axis %d: decompress != out at %lld places", sdgp_prune_fn_name(cfg.fn), n, m, axis, (long long)diff);
                    sdgp_nm_alloc(&nm2, cfg.axis, n, m, s.B * s.P, s.C, NULL);
                    CHECK(sdgp_nm_compress(out, &nm2, &e) == SDGP_OK, "compress: %s", e.msg);
                    CHECK(test_bitwise_equal(nm.values, nm2.values, sdgp_nm_slots(&nm) * 4) && test_bitwise_equal(nm.index, nm2.index, sdgp_nm_slots(&nm)),
                          "%s %d:%d axis %d: nm != compress(out)", sdgp_prune_fn_name(cfg.fn), n, m, axis);
                    sdgp_nm_free(&nm2);
                    /* nm only, then out only: the same results */
                    sdgp_nm_alloc(&nm2, cfg.axis, n, m, s.B * s.P, s.C, NULL);
                    CHECK(sdgp_prune(&cfg, x, s.B, s.P, s.C, NULL, &nm2, &e) == SDGP_OK, "nm only: %s", e.msg);
                    size_t slots = sdgp_nm_slots(&nm);
                    CHECK(test_bitwise_equal(nm.values, nm2.values, slots * 4) && test_bitwise_equal(nm.index, nm2.index, slots), "%s %d:%d: nm-only differs",
                          sdgp_prune_fn_name(cfg.fn), n, m);
                    CHECK(sdgp_prune(&cfg, x, s.B, s.P, s.C, out2, NULL, &e) == SDGP_OK && test_bitwise_equal(out, out2, total * 4),
                          "%s %d:%d: out-only differs", sdgp_prune_fn_name(cfg.fn), n, m);
                    if (n == m) CHECK(test_bitwise_equal(out, x, total * 4), "%s %d:%d: n = m must be a bitwise copy", sdgp_prune_fn_name(cfg.fn), n, m);
                    sdgp_nm_free(&nm);
                    sdgp_nm_free(&nm2);
                    free(x);
                    free(out);
                    free(out2);
                    free(dec);
                }
            }
}

/* Rescaled: magnitude's mask, kept values times one factor per scope, L1 norm of each scope kept. */
TEST_CASE(rescaled_preserves_l1) {
    int64_t total_scaled = 0, total_unscaled = 0;
    const int nms[][2] = {{2, 4}, {1, 4}, {1, 2}, {4, 32}, {3, 5}, {17, 64}};
    for (int t = 0; t < 6; t++)
        for (int axis = 0; axis < 2; axis++)
            for (int scope = 0; scope < 2; scope++) {
                const int n = nms[t][0], m = nms[t][1];
                shape sh[8];
                int ns = shapes_for(m, axis, sh);
                for (int si = 0; si < ns; si++) {
                    shape s = sh[si];
                    size_t total = (size_t)(s.B * s.P * s.C);
                    float *x = test_xmalloc(total * 4), *out = test_xmalloc(total * 4), *mag = test_xmalloc(total * 4);
                    fill(x, total, 4242 + t * 7 + si);
                    if (total > 2 * (size_t)s.C) /* one all-zero (b, c) scope: r stays 1, no NaN */
                        for (int64_t p = 0; p < s.P; p++) x[p * s.C] = 0.0f;
                    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_RESCALED, n, m);
                    cfg.axis = (sdgp_axis)axis;
                    cfg.scope = (sdgp_rescale_scope)scope;
                    sdgp_error e;
                    REQUIRE(sdgp_prune(&cfg, x, s.B, s.P, s.C, out, NULL, &e) == SDGP_OK, "%s", e.msg);
                    cfg.fn = SDGP_PRUNE_MAGNITUDE;
                    REQUIRE(sdgp_prune(&cfg, x, s.B, s.P, s.C, mag, NULL, &e) == SDGP_OK, "%s", e.msg);
                    int64_t nscopes = scope == SDGP_SCOPE_CHANNEL ? s.C : s.B * s.C, bad = 0, unscaled = 0, scaled_n = 0;
                    double worst = 0;
                    for (int64_t q = 0; q < nscopes; q++) {
                        int64_t b0 = scope == SDGP_SCOPE_CHANNEL ? 0 : q / s.C, b1 = scope == SDGP_SCOPE_CHANNEL ? s.B : b0 + 1, c = q % s.C;
                        double dense = 0, kept = 0, got = 0;
                        for (int64_t b = b0; b < b1; b++)
                            for (int64_t p = 0; p < s.P; p++) {
                                int64_t i = (b * s.P + p) * s.C + c;
                                dense += fabs(x[i]);
                                kept += fabs(mag[i]);
                                got += fabs(out[i]);
                            }
                        int scaled = kept > dense * 0x1p-24; /* the documented guard */
                        double r = scaled ? dense / kept : 1.0;
                        for (int64_t b = b0; b < b1; b++)
                            for (int64_t p = 0; p < s.P; p++) {
                                int64_t i = (b * s.P + p) * s.C + c;
                                double want = (double)mag[i] * r;
                                if (fabs(out[i] - want) > 1e-6 * fabs(want) + 1e-44 || isnan(out[i])) bad++;
                            }
                        double rel = scaled ? fabs(got - dense) / dense : 0.0;
                        if (!scaled) unscaled++;
                        else scaled_n++;
                        if (rel > worst) worst = rel;
                    }
                    CHECK(bad == 0 && worst < 1e-6, "%d:%d axis %d scope %d: %lld values off, L1 rel err %g", n, m, axis, scope, (long long)bad, worst);
                    total_scaled += scaled_n;
                    total_unscaled += unscaled;
                    free(x);
                    free(out);
                    free(mag);
                }
            }
    CHECK(total_scaled > total_unscaled, "most scopes must be scaled (else the test is void): %lld scaled, %lld unscaled scopes", (long long)total_scaled,
          (long long)total_unscaled);
}

TEST_CASE(bad_input) {
    sdgp_error e;
    float x[64] = {0}, out[64];
    sdgp_prune_cfg c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 5, 4);
    struct {
        int n, m;
        int64_t B, P, C;
        int axis;
        const char *want;
        sdgp_status code;
    } cases[] = {
        {5, 4, 1, 1, 8, 0, "n=5", SDGP_ERR_INVALID},   {0, 4, 1, 1, 8, 0, "n=0", SDGP_ERR_INVALID},
        {2, 65, 1, 1, 65, 0, "m=65", SDGP_ERR_INVALID}, {2, 0, 1, 1, 8, 0, "m=0", SDGP_ERR_INVALID},
        {2, 4, 1, 1, 6, 0, "C=6", SDGP_ERR_INVALID},   {2, 4, 1, 3, 8, 1, "rows=B*P=3", SDGP_ERR_INVALID},
        {2, 4, 0, 1, 8, 0, "B=0", SDGP_ERR_INVALID},   {2, 4, 1, 0, 8, 0, "P=0", SDGP_ERR_INVALID},
        {2, 4, 1, 1, 0, 0, "C=0", SDGP_ERR_INVALID},   {2, 4, 1 << 30, 1 << 30, 1 << 30, 0, "overflow", SDGP_ERR_NOMEM},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        c.n = cases[i].n;
        c.m = cases[i].m;
        c.axis = (sdgp_axis)cases[i].axis;
        sdgp_error_clear(&e);
        sdgp_status st = sdgp_prune(&c, x, cases[i].B, cases[i].P, cases[i].C, out, NULL, &e);
        CHECK(st == cases[i].code && strstr(e.msg, cases[i].want), "case %zu: status %d, message '%s' should name '%s'", i, st, e.msg, cases[i].want);
        if (cases[i].B == 0 || cases[i].P == 0) continue; /* alloc sees rows only */
        sdgp_nm_tensor nm;
        st = sdgp_nm_alloc(&nm, c.axis, c.n, c.m, cases[i].B * cases[i].P, cases[i].C, &e);
        CHECK(st == cases[i].code && strstr(e.msg, cases[i].want), "alloc case %zu: '%s'", i, e.msg);
        sdgp_nm_free(&nm);
    }
    c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    CHECK(sdgp_prune(NULL, x, 1, 1, 8, out, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "cfg"), "NULL cfg: %s", e.msg);
    CHECK(sdgp_prune(&c, NULL, 1, 1, 8, out, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "x is NULL"), "NULL x: %s", e.msg);
    CHECK(sdgp_prune(&c, x, 1, 1, 8, NULL, NULL, &e) == SDGP_ERR_INVALID, "no outputs");
    CHECK(sdgp_prune(&c, x, 1, 1, 8, x, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "overlaps"), "aliasing: %s", e.msg);
    c.fn = (sdgp_prune_fn)99;
    CHECK(sdgp_prune(&c, x, 1, 1, 8, out, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "fn=99"), "bad fn: %s", e.msg);
    c = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE_APPROX, 2, 8);
    CHECK(sdgp_prune(&c, x, 1, 1, 8, out, NULL, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "2:8"), "approx 2:8: %s", e.msg);
    c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.threads = -1;
    CHECK(sdgp_prune(&c, x, 1, 1, 8, out, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "threads=-1"), "threads: %s", e.msg);
    c.threads = 0;
    c.isa = (sdgp_isa)7;
    CHECK(sdgp_prune(&c, x, 1, 1, 8, out, NULL, &e) != SDGP_OK, "bad isa");
    c.isa = SDGP_ISA_AUTO;
    /* a compressed tensor of another shape, and an unallocated one */
    sdgp_nm_tensor nm;
    CHECK(sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, 1, 4, 1, 8, &e) == SDGP_OK, "alloc");
    CHECK(sdgp_prune(&c, x, 1, 1, 8, NULL, &nm, &e) == SDGP_ERR_INVALID && strstr(e.msg, "1:4"), "nm mismatch: %s", e.msg);
    sdgp_nm_free(&nm);
    sdgp_nm_free(&nm); /* zeroed: safe */
    CHECK(sdgp_prune(&c, x, 1, 1, 8, NULL, &nm, &e) == SDGP_ERR_INVALID, "unallocated nm");
    CHECK(sdgp_nm_decompress(&nm, out, &e) == SDGP_ERR_INVALID && sdgp_nm_decompress(NULL, out, &e) == SDGP_ERR_INVALID, "decompress bad");
    /* none with a compressed output needs n = m */
    c.fn = SDGP_PRUNE_NONE;
    sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, 2, 4, 1, 8, NULL);
    CHECK(sdgp_prune(&c, x, 1, 1, 8, NULL, &nm, &e) == SDGP_ERR_INVALID && strstr(e.msg, "none"), "none + nm: %s", e.msg);
    /* compress of a tensor with too many nonzeros names the group; a bad index is caught */
    for (int i = 0; i < 8; i++) x[i] = (float)(i + 1) * (i < 4 ? 0.0f : 1.0f);
    CHECK(sdgp_nm_compress(x, &nm, &e) == SDGP_ERR_INVALID && strstr(e.msg, "channels 4..7"), "compress: %s", e.msg);
    nm.index[0] = 9;
    CHECK(sdgp_nm_decompress(&nm, out, &e) == SDGP_ERR_INVALID && strstr(e.msg, "index 9"), "bad index: %s", e.msg);
    sdgp_nm_free(&nm);
}

/* NaN/Inf: magnitude keeps NaN (ranked first) and copies values; random copies them; MVUE and
 * rescaled refuse with SDGP_ERR_NUMERIC naming the first bad index. */
TEST_CASE(non_finite_values) {
    float x[2 * 3 * 8], out[2 * 3 * 8];
    sdgp_error e;
    for (int axis = 0; axis < 2; axis++) {
        fill(x, 48, 9);
        for (int i = 0; i < 48; i++) x[i] += 3.0f; /* finite and nonzero */
        x[21] = NAN;
        x[30] = -INFINITY;
        sdgp_prune_cfg c = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 1, 4);
        c.axis = (sdgp_axis)axis;
        CHECK(sdgp_prune(&c, x, 2, 4, 6, out, NULL, &e) == (axis ? SDGP_OK : SDGP_ERR_INVALID), "C=6 for 1:4");
        CHECK(sdgp_prune(&c, x, 2, 3, 8, out, NULL, &e) == (axis ? SDGP_ERR_INVALID : SDGP_OK), "magnitude: %s", e.msg);
        if (axis == 0) CHECK(isnan(out[21]) && out[30] == -INFINITY && out[20] == 0 && out[28] == 0, "NaN/Inf kept");
        c.axis = (sdgp_axis)axis;
        int64_t B = 2, P = axis ? 4 : 3, C = axis ? 6 : 8; /* row axis: rows = 8 */
        c.fn = SDGP_PRUNE_RANDOM;
        CHECK(sdgp_prune(&c, x, B, P, C, out, NULL, &e) == SDGP_OK, "random with NaN: %s", e.msg);
        const sdgp_prune_fn strict[] = {SDGP_PRUNE_MVUE, SDGP_PRUNE_RESCALED};
        for (int f = 0; f < 2; f++)
            for (int scope = 0; scope < 2; scope++) {
                c = sdgp_prune_cfg_make(strict[f], 1, 4);
                c.axis = (sdgp_axis)axis;
                c.scope = (sdgp_rescale_scope)scope;
                sdgp_error_clear(&e);
                CHECK(sdgp_prune(&c, x, B, P, C, out, NULL, &e) == SDGP_ERR_NUMERIC && strstr(e.msg, "x[21]") && strstr(e.msg, "NaN"),
                      "%s axis %d: %s", sdgp_prune_fn_name(c.fn), axis, e.msg);
            }
        c = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE_APPROX, 2, 4);
        c.axis = (sdgp_axis)axis;
        x[21] = 1.0f;
        CHECK(sdgp_prune(&c, x, B, P, C, out, NULL, &e) == SDGP_ERR_NUMERIC && strstr(e.msg, "x[30]") && strstr(e.msg, "Inf"), "approx: %s", e.msg);
    }
}

/* ---- shared masks (cfg->mask_block > 1) ---- */

/* Block of row r (B x P rows, lines of `line` positions, blocks of k): its first row and length. */
static void block_of(int64_t r, int64_t P, int64_t line, int k, int64_t *r0, int64_t *len) {
    const int64_t off = r % P % line, start = off / k * k;
    *r0 = r - (off - start);
    *len = line - start < k ? line - start : k;
}

/* The brute-force shared-mask pruning of magnitude, rescaled and random (dense output):
 * per block and group, the n best summed magnitudes (float sums in row order, ties to the lower
 * index) or the Philox subset of the block's first row; rescaled factors from the block masks. */
static void block_oracle(float *out, const float *x, int64_t B, int64_t P, int64_t C, const sdgp_prune_cfg *cfg) {
    const int n = cfg->n, m = cfg->m, k = cfg->mask_block;
    const int64_t line = cfg->mask_line ? cfg->mask_line : P, G = C / m, rows = B * P;
    uint8_t *keep = test_xmalloc((size_t)(rows * C));
    const sdgp_philox_key key = sdgp_philox_make_key(cfg->seed, cfg->step, cfg->layer);
    for (int64_t r = 0; r < rows; r++) {
        int64_t r0, len;
        block_of(r, P, line, k, &r0, &len);
        for (int64_t g = 0; g < G; g++) {
            float sum[SDGP_NM_MAX_M];
            for (int i = 0; i < m; i++) {
                sum[i] = 0;
                for (int64_t q = r0; q < r0 + len; q++) sum[i] += fabsf(x[q * C + g * m + i]);
            }
            uint64_t mask = 0;
            if (cfg->fn == SDGP_PRUNE_RANDOM) {
                mask = prune_random_mask(key, (uint64_t)(r0 * G + g), n, m);
            } else {
                for (int i = 0; i < m; i++) {
                    int better = 0;
                    for (int j = 0; j < m; j++) better += sum[j] > sum[i] || (sum[j] == sum[i] && j < i);
                    if (better < n) mask |= 1ull << i;
                }
            }
            for (int i = 0; i < m; i++) keep[r * C + g * m + i] = mask >> i & 1;
        }
    }
    for (int64_t e = 0; e < rows * C; e++) out[e] = keep[e] ? x[e] : 0.0f;
    if (cfg->fn == SDGP_PRUNE_RESCALED) {
        const int per_sample = cfg->scope == SDGP_SCOPE_SAMPLE_CHANNEL;
        for (int64_t c = 0; c < C; c++)
            for (int64_t b0 = 0; b0 < B; b0 += per_sample ? 1 : B) {
                const int64_t b1 = per_sample ? b0 + 1 : B;
                double d = 0, kp = 0;
                for (int64_t b = b0; b < b1; b++)
                    for (int64_t p = 0; p < P; p++) {
                        const double a = fabs((double)x[(b * P + p) * C + c]);
                        d += a;
                        if (keep[(b * P + p) * C + c]) kp += a;
                    }
                const float f = kp > d * 0x1p-24 ? (float)(d / kp) : 1.0f;
                for (int64_t b = b0; b < b1; b++)
                    for (int64_t p = 0; p < P; p++) out[(b * P + p) * C + c] *= f;
            }
    }
    free(keep);
}

TEST_CASE(shared_masks_match_oracle) {
    const shape shp[] = {{2, 12, 8}, {3, 35, 16}, {1, 4, 64}};
    const int nm[][2] = {{2, 4}, {1, 4}, {4, 8}, {3, 16}};
    const int blocks[] = {2, 3, 4, 16};
    const struct {
        sdgp_prune_fn fn;
        sdgp_rescale_scope scope;
    } fns[] = {{SDGP_PRUNE_MAGNITUDE, 0}, {SDGP_PRUNE_RANDOM, 0}, {SDGP_PRUNE_RESCALED, SDGP_SCOPE_SAMPLE_CHANNEL},
               {SDGP_PRUNE_RESCALED, SDGP_SCOPE_CHANNEL}};
    for (int si = 0; si < 3; si++)
        for (int q = 0; q < 4; q++) {
            const shape sh = shp[si];
            if (sh.C % nm[q][1]) continue;
            const size_t count = (size_t)(sh.B * sh.P * sh.C);
            float *x = test_xmalloc(count * 4), *ref = test_xmalloc(count * 4), *out = test_xmalloc(count * 4), *dec = test_xmalloc(count * 4);
            fill(x, count, 900 + (uint64_t)(si * 10 + q));
            for (int f = 0; f < 4; f++)
                for (int bi = 0; bi < 4; bi++)
                    for (int li = 0; li < 2; li++) {
                        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fns[f].fn, nm[q][0], nm[q][1]);
                        cfg.scope = fns[f].scope;
                        cfg.seed = 5;
                        cfg.mask_block = blocks[bi];
                        cfg.mask_line = li ? (sh.P % 7 == 0 ? 7 : sh.P / 2) : 0; /* lines shorter than P: blocks cut at their ends */
                        block_oracle(ref, x, sh.B, sh.P, sh.C, &cfg);
                        FOR_EACH_ISA(isa) {
                            cfg.isa = isa;
                            cfg.threads = 1 + isa % 2;
                            sdgp_nm_tensor nmt;
                            sdgp_error e;
                            REQUIRE(sdgp_nm_alloc(&nmt, SDGP_AXIS_CHANNEL, cfg.n, cfg.m, sh.B * sh.P, sh.C, &e) == SDGP_OK, "%s", e.msg);
                            REQUIRE(sdgp_prune(&cfg, x, sh.B, sh.P, sh.C, out, &nmt, &e) == SDGP_OK, "%s", e.msg);
                            CHECK(test_bitwise_equal(out, ref, count * 4), "shape %d %d:%d %s scope %d block %d line %lld isa %d: differs from the oracle",
                                  si, cfg.n, cfg.m, sdgp_prune_fn_name(cfg.fn), cfg.scope, cfg.mask_block, (long long)cfg.mask_line, isa);
                            /* compressed: decompresses to out, and every row of a block has the same indices */
                            REQUIRE(sdgp_nm_decompress(&nmt, dec, &e) == SDGP_OK, "%s", e.msg);
                            int same = 1;
                            const int64_t slots = sh.C / cfg.m * cfg.n, line = cfg.mask_line ? cfg.mask_line : sh.P;
                            for (int64_t r = 0; r < sh.B * sh.P; r++) {
                                int64_t r0, len;
                                block_of(r, sh.P, line, cfg.mask_block, &r0, &len);
                                same &= !memcmp(nmt.index + r * slots, nmt.index + r0 * slots, (size_t)slots);
                            }
                            CHECK(same, "shape %d %s block %d: rows of a block have different indices", si, sdgp_prune_fn_name(cfg.fn),
                                  cfg.mask_block);
                            for (size_t i = 0; i < count; i++)
                                if (dec[i] != out[i]) {
                                    CHECK(0, "shape %d %s block %d: decompress differs at %zu", si, sdgp_prune_fn_name(cfg.fn), cfg.mask_block, i);
                                    break;
                                }
                            sdgp_nm_free(&nmt);
                        }
                    }
            free(x), free(ref), free(out), free(dec);
        }
}

/* Block MVUE: P_i = min(1, c a_i) with a_i the channels' L2 norms over the block, sum P_i = n;
 * the outcome is a step function of the one uniform u, so the expectation is an exact sum over
 * the intervals between its breaks: E[y] = x for every row of the block. */
TEST_CASE(shared_mask_mvue_is_exactly_unbiased) {
    uint64_t seed = 4242;
    const int nm[][2] = {{2, 4}, {1, 4}, {3, 8}, {4, 32}, {1, 2}};
    for (int t = 0; t < 200; t++) {
        const int n = nm[t % 5][0], m = nm[t % 5][1], rows = 1 + t % 4;
        float x[4][SDGP_NM_MAX_M];
        double a[SDGP_NM_MAX_M], inv[SDGP_NM_MAX_M], brk[SDGP_NM_MAX_M + 2];
        for (int i = 0; i < m; i++) {
            double s2 = 0;
            for (int r = 0; r < rows; r++) {
                const double u = test_rand_u01(&seed);
                x[r][i] = u < 0.2 ? 0.0f : u < 0.3 ? 1.0f : test_rand_normal(&seed) * (float)(1 + (t % 3) * i); /* zeros, ties */
                s2 += (double)x[r][i] * x[r][i];
            }
            a[i] = sqrt(s2);
        }
        const int nb = prune_mvue_block_breaks(brk + 1, a, n, m);
        brk[0] = 0, brk[nb + 1] = 1;
        double mean[4][SDGP_NM_MAX_M] = {{0}};
        for (int k = 0; k <= nb; k++) {
            const double w = brk[k + 1] - brk[k], u = 0.5 * (brk[k] + brk[k + 1]);
            const uint64_t mask = prune_mvue_block_mask(inv, a, n, m, u);
            int kept = 0;
            for (int i = 0; i < m; i++) kept += mask >> i & 1;
            CHECK(kept == n, "case %d: %d kept, n = %d", t, kept, n);
            for (int i = 0; i < m; i++)
                if (mask >> i & 1)
                    for (int r = 0; r < rows; r++) mean[r][i] += w * (double)x[r][i] * inv[i];
        }
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < m; i++)
                CHECK(fabs(mean[r][i] - x[r][i]) <= 1e-9 * (1 + fabs(x[r][i])), "case %d %d:%d row %d ch %d: E = %.12g, x = %.9g", t, n, m, r, i,
                      mean[r][i], x[r][i]);
    }
}

/* The shared-mask rules through sdgp_prune: ties go to the lower channel, MVUE keeps n per block
 * and group with one set for all rows, and the limits give clear errors. */
TEST_CASE(shared_masks_ties_and_errors) {
    /* 1 sample, 2 positions, 4 channels: summed magnitudes 3, 3, 3, 1 -> channels 0 and 1 */
    const float x[8] = {1, 2, 3, 1, 2, 1, 0, 0};
    float out[8];
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    cfg.mask_block = 2;
    sdgp_error e;
    REQUIRE(sdgp_prune(&cfg, x, 1, 2, 4, out, NULL, &e) == SDGP_OK, "%s", e.msg);
    const float want[8] = {1, 2, 0, 0, 2, 1, 0, 0};
    CHECK(!memcmp(out, want, sizeof want), "ties: got %g %g %g %g / %g %g %g %g", out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7]);
    cfg.fn = SDGP_PRUNE_MVUE;
    REQUIRE(sdgp_prune(&cfg, x, 1, 2, 4, out, NULL, &e) == SDGP_OK, "%s", e.msg);
    int kept = 0;
    for (int i = 0; i < 4; i++) {
        kept += out[i] != 0 || out[4 + i] != 0;
        CHECK((out[i] != 0) == (out[4 + i] != 0) || x[i] == 0 || x[4 + i] == 0, "mvue: rows of a block keep different channels");
    }
    CHECK(kept == 2, "mvue: %d channels kept", kept);

    float big[64 * 8];
    memset(big, 0, sizeof big);
    cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    cfg.mask_block = SDGP_MASK_BLOCK_MAX + 1;
    CHECK(sdgp_prune(&cfg, big, 2, 8, 4, big + 64, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "mask_block"), "block too big: %s", e.msg);
    cfg.mask_block = 4;
    cfg.mask_line = 3;
    CHECK(sdgp_prune(&cfg, big, 2, 8, 4, big + 64, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "mask_line=3"), "line: %s", e.msg);
    cfg.mask_line = 0;
    cfg.axis = SDGP_AXIS_ROW; /* row masks shared by 4 channels: test row_masks_shared_by_channels */
    CHECK(sdgp_prune(&cfg, big, 2, 8, 4, big + 64, NULL, &e) == SDGP_OK, "row axis, 4 channels per mask: %s", e.msg);
    cfg.axis = SDGP_AXIS_CHANNEL;
    cfg.fn = SDGP_PRUNE_MVUE_APPROX;
    CHECK(sdgp_prune(&cfg, big, 2, 8, 4, big + 64, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "mvue-approx"), "approx: %s", e.msg);
    big[5] = NAN;
    cfg.fn = SDGP_PRUNE_MVUE;
    CHECK(sdgp_prune(&cfg, big, 2, 8, 4, big + 64, NULL, &e) == SDGP_ERR_NUMERIC, "NaN with block mvue: %s", e.msg);
}

/* Row masks shared by channels (axis ROW, mask_block = Q: the weight gradient's form for a kernel):
 * against an oracle built from the group rules (the same Philox uniform, prune_mvue_block_mask,
 * prune_magnitude_mask), every block of Q channels keeping one row set; bitwise the same for 1 and
 * 3 threads and every ISA request; the errors name what is wrong. */
TEST_CASE(row_masks_shared_by_channels) {
    const int B = 3, P = 8, C = 24;
    float x[3 * 8 * 24], y1[3 * 8 * 24], y2[3 * 8 * 24], want[3 * 8 * 24];
    fill(x, sizeof x / sizeof *x, 77);
    const int cases[][3] = {{2, 4, 4}, {2, 4, 8}, {1, 4, 24}, {3, 8, 6}, {1, 2, 2}};
    const sdgp_prune_fn fns[] = {SDGP_PRUNE_MVUE, SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RANDOM};
    for (int ci = 0; ci < 5; ci++)
        for (int fi = 0; fi < 3; fi++) {
            const int n = cases[ci][0], m = cases[ci][1], Q = cases[ci][2];
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fns[fi], n, m);
            cfg.axis = SDGP_AXIS_ROW;
            cfg.mask_block = Q;
            cfg.seed = 5, cfg.step = 9, cfg.layer = 2;
            cfg.threads = 1;
            sdgp_error e;
            REQUIRE(sdgp_prune(&cfg, x, B, P, C, y1, NULL, &e) == SDGP_OK, "%s", e.msg);
            cfg.threads = 3;
            cfg.isa = SDGP_ISA_REF;
            REQUIRE(sdgp_prune(&cfg, x, B, P, C, y2, NULL, &e) == SDGP_OK, "%s", e.msg);
            CHECK(test_bitwise_equal(y1, y2, sizeof y1), "%s %d:%d Q=%d: 1 thread and 3 threads (ref) differ", sdgp_prune_fn_name(fns[fi]), n, m, Q);
            const sdgp_philox_key key = sdgp_philox_make_key(5, 9, 2);
            for (int64_t g = 0; g < B * P / m; g++)
                for (int c0 = 0; c0 < C; c0 += Q) {
                    const float *xg = x + g * m * C + c0;
                    double a[SDGP_NM_MAX_M], inv[SDGP_NM_MAX_M];
                    float s[SDGP_NM_MAX_M];
                    for (int i = 0; i < m; i++) {
                        a[i] = 0, s[i] = 0, inv[i] = 1;
                        for (int q = 0; q < Q; q++) a[i] += (double)xg[i * C + q] * xg[i * C + q], s[i] += fabsf(xg[i * C + q]);
                        a[i] = sqrt(a[i]);
                    }
                    const uint64_t grp = (uint64_t)g * C + (uint64_t)c0;
                    const uint64_t mask = fns[fi] == SDGP_PRUNE_RANDOM ? prune_random_mask(key, grp, n, m)
                                          : fns[fi] == SDGP_PRUNE_MAGNITUDE ? prune_magnitude_mask(s, n, m)
                                                                            : prune_mvue_block_mask(inv, a, n, m, prune_group_u(key, grp, 0));
                    CHECK(__builtin_popcountll(mask) == n, "%d kept rows of %d", __builtin_popcountll(mask), n);
                    for (int i = 0; i < m; i++)
                        for (int q = 0; q < Q; q++)
                            want[(g * m + i) * C + c0 + q] =
                                !(mask >> i & 1) ? 0.0f : fns[fi] == SDGP_PRUNE_MVUE ? (float)((double)xg[i * C + q] * inv[i]) : xg[i * C + q];
                }
            CHECK(test_bitwise_equal(y1, want, sizeof want), "%s %d:%d Q=%d: not the oracle's rows", sdgp_prune_fn_name(fns[fi]), n, m, Q);
        }
    /* the errors */
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    cfg.axis = SDGP_AXIS_ROW;
    cfg.mask_block = 5;
    sdgp_error e;
    CHECK(sdgp_prune(&cfg, x, B, P, C, y1, NULL, &e) == SDGP_ERR_INVALID && strstr(e.msg, "C=24"), "C %% Q: %s", e.msg);
    cfg.mask_block = 4;
    cfg.fn = SDGP_PRUNE_RESCALED;
    CHECK(sdgp_prune(&cfg, x, B, P, C, y1, NULL, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "rescaled"), "rescaled: %s", e.msg);
    cfg.fn = SDGP_PRUNE_MVUE;
    sdgp_nm_tensor nm;
    REQUIRE(sdgp_nm_alloc(&nm, SDGP_AXIS_ROW, 2, 4, B * P, C, &e) == SDGP_OK, "%s", e.msg);
    CHECK(sdgp_prune(&cfg, x, B, P, C, NULL, &nm, &e) == SDGP_ERR_UNSUPPORTED && strstr(e.msg, "dense output"), "compressed: %s", e.msg);
    sdgp_nm_free(&nm);
    x[5] = NAN;
    CHECK(sdgp_prune(&cfg, x, B, P, C, y1, NULL, &e) == SDGP_ERR_NUMERIC, "NaN with shared row masks: %s", e.msg);
}

int main(void) {
    RUN(names_and_parsing);
    RUN(magnitude_matches_oracle);
    RUN(structure_every_function);
    RUN(rescaled_preserves_l1);
    RUN(bad_input);
    RUN(non_finite_values);
    RUN(shared_masks_match_oracle);
    RUN(shared_mask_mvue_is_exactly_unbiased);
    RUN(shared_masks_ties_and_errors);
    RUN(row_masks_shared_by_channels);
    return test_finish();
}
