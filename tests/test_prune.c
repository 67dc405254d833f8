/* N:M pruning: API, properties against brute-force oracles, the compressed form, bad input.
 * (MVUE/random distributions: test_prune_mvue.c; ISA paths and threads: test_prune_isa.c.) */
#include "harness.h"
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

int main(void) {
    RUN(names_and_parsing);
    RUN(magnitude_matches_oracle);
    RUN(structure_every_function);
    RUN(rescaled_preserves_l1);
    RUN(bad_input);
    RUN(non_finite_values);
    return test_finish();
}
