/* MVUE and random pruning: exact unbiasedness by enumerating the library's own samplers, their
 * probabilities against the closed forms / water-filling, and the real sdgp_prune's empirical
 * frequencies against those probabilities (chi-square, fixed seeds). */
#include "harness.h"
#include "prune/prune_internal.h"
#include "sdgp/prune.h"

/* ---- oracles written here, independent of the library ---- */

/* Water-filling marginals: P_i = min(1, c a_i), sum P_i = min(n, nnz). */
static void waterfill(double *P, const float *x, int n, int m) {
    double a[SDGP_NM_MAX_M];
    int sat[SDGP_NM_MAX_M] = {0}, nnz = 0;
    for (int i = 0; i < m; i++) nnz += (a[i] = fabs((double)x[i])) > 0;
    if (nnz <= n) {
        for (int i = 0; i < m; i++) P[i] = a[i] > 0;
        return;
    }
    for (int k = 0;; k++) { /* re-solve c until no new saturation */
        double rem = 0;
        for (int i = 0; i < m; i++) rem += sat[i] ? 0 : a[i];
        double c = (n - k) / rem;
        int grew = 0;
        for (int i = 0; i < m; i++)
            if (!sat[i] && c * a[i] >= 1 && !grew) sat[i] = grew = 1;
        if (!grew) {
            for (int i = 0; i < m; i++) P[i] = sat[i] ? 1.0 : c * a[i];
            return;
        }
    }
}

/* The 2:4 closed-form pair probabilities of algorithms.md section 2 (with the corrected cases B
 * and C), indexed by the unordered pair of original positions. Returns the case letter. */
static char closed_24(double pair[4][4], const float *x) {
    int o[4] = {0, 1, 2, 3}; /* ascending |x|; equal values in index order (the pair law under
                                ties depends on the labelling; any one is unbiased, this is sdgp's) */
    for (int i = 1; i < 4; i++)
        for (int k = i; k > 0 && fabsf(x[o[k]]) < fabsf(x[o[k - 1]]); k--) {
            int t = o[k];
            o[k] = o[k - 1];
            o[k - 1] = t;
        }
    double a1 = fabsf(x[o[0]]), a2 = fabsf(x[o[1]]), a3 = fabsf(x[o[2]]), a4 = fabsf(x[o[3]]), S = a1 + a2 + a3 + a4, R = a1 + a2 + a3;
    memset(pair, 0, sizeof(double[4][4]));
#define PAIR(i, j, v) (pair[o[i]][o[j]] = pair[o[j]][o[i]] = (v))
    if (a4 >= R) {
        PAIR(0, 3, a1 / R), PAIR(1, 3, a2 / R), PAIR(2, 3, a3 / R);
        return 'C';
    }
    if (2 * a1 + a3 - a4 > 0) {
        PAIR(0, 2, (2 * a1 + a3 - a4) / (2 * S)), PAIR(0, 3, (2 * a1 - a3 + a4) / (2 * S)), PAIR(1, 2, (2 * a2 + a3 - a4) / (2 * S));
        PAIR(1, 3, (2 * a2 - a3 + a4) / (2 * S)), PAIR(2, 3, (a3 + a4 - a1 - a2) / S);
        return 'A';
    }
    PAIR(0, 3, 2 * a1 / S), PAIR(1, 2, (a1 + a2 + a3 - a4) / S), PAIR(1, 3, (a2 + a4 - a1 - a3) / S), PAIR(2, 3, (a3 + a4 - a1 - a2) / S);
#undef PAIR
    return 'B';
}

/* ---- enumeration of the library's exact sampler ---- */

#define MAX_OUT 80
typedef struct {
    int count;
    uint64_t mask[MAX_OUT];
    double prob[MAX_OUT];
    float y[MAX_OUT][SDGP_NM_MAX_M];
} outcomes;

static uint64_t nz_mask(const float *y, int m) {
    uint64_t k = 0;
    for (int i = 0; i < m && i < SDGP_NM_MAX_M; i++) k |= (uint64_t)(y[i] != 0) << i;
    return k;
}

/* The uniforms the sampler gets are multiples of 2^-32 (sdgp_u01d); the decision at a break
 * may round either way, so the points probed stay 2^-40 inside the intervals. */
static double grid_up(double v) { return ceil(v * 0x1p32) * 0x1p-32; }
#define EDGE 0x1p-40

/* Every outcome of prune_mvue_group on x with its probability (the lengths of the u-intervals
 * between the library's breaks); checks the outcome is constant on each interval (first, middle
 * and last grid point) and that random probes land on the outcome of their interval. An interval
 * holding no grid point (length < 2^-32) never happens to the sampler and is left out.
 * Returns 0 on a structural failure. */
static int enumerate_exact(outcomes *o, const float *x, int n, int m, uint64_t *rng) {
    double br[SDGP_NM_MAX_M + 8];
    int nb = prune_mvue_breaks(br, x, n, m);
    if (nb < 0) return 0;
    o->count = 0;
    double lo = 0;
    for (int k = 0; k <= nb; k++) {
        double hi = k < nb ? br[k] : 1.0;
        if (!(hi > lo)) return 0; /* breaks must be increasing, inside (0, 1) */
        double first = grid_up(lo + (k ? EDGE : 0)), last = grid_up(hi - EDGE) - 0x1p-32;
        if (first > last) {
            lo = hi;
            continue;
        }
        float y0[SDGP_NM_MAX_M], y1[SDGP_NM_MAX_M], y2[SDGP_NM_MAX_M];
        prune_mvue_group(y0, x, n, m, first);
        prune_mvue_group(y1, x, n, m, grid_up(0.5 * (first + last)));
        prune_mvue_group(y2, x, n, m, last);
        if (memcmp(y0, y1, (size_t)m * 4) || memcmp(y0, y2, (size_t)m * 4)) return 0;
        int j = 0;
        while (j < o->count && memcmp(o->y[j], y0, (size_t)m * 4)) j++;
        if (j == o->count) {
            if (o->count == MAX_OUT) return 0;
            memcpy(o->y[j], y0, (size_t)m * 4);
            o->mask[j] = nz_mask(y0, m);
            o->prob[j] = 0;
            o->count++;
        }
        o->prob[j] += hi - lo;
        lo = hi;
    }
    for (int t = 0; t < 40; t++) { /* probes: the breaks list every change */
        double u = (double)(test_rand_u64(rng) >> 32) * 0x1p-32;
        int k = 0;
        while (k < nb && u >= br[k]) k++;
        double l = k ? br[k - 1] : 0, h = k < nb ? br[k] : 1;
        float y[SDGP_NM_MAX_M], yr[SDGP_NM_MAX_M];
        prune_mvue_group(y, x, n, m, u);
        if (u - l < EDGE || h - u < EDGE || grid_up(0.5 * (l + h)) >= h) continue;
        prune_mvue_group(yr, x, n, m, grid_up(0.5 * (l + h)));
        if (memcmp(y, yr, (size_t)m * 4)) return 0;
    }
    return 1;
}

/* E[out] = x, probabilities sum to 1, at most n nonzeros, marginals = water-filling, kept
 * values = x_i / P_i. Returns a description of the first failure or NULL. */
static const char *check_unbiased(const outcomes *o, const float *x, int n, int m, double *worst) {
    double E[SDGP_NM_MAX_M] = {0}, incl[SDGP_NM_MAX_M] = {0}, P[SDGP_NM_MAX_M], total = 0, S = 0;
    waterfill(P, x, n, m);
    for (int i = 0; i < m; i++) S += fabs((double)x[i]);
    for (int k = 0; k < o->count; k++) {
        total += o->prob[k];
        if (__builtin_popcountll(o->mask[k]) > n) return "more than n nonzeros";
        for (int i = 0; i < m; i++) {
            E[i] += o->prob[k] * o->y[k][i];
            if (o->y[k][i] != 0) {
                incl[i] += o->prob[k];
                double want = x[i] / P[i];
                if (fabs(o->y[k][i] - want) > 1e-6 * fabs(want)) return "kept value is not x_i / P_i";
            }
        }
    }
    if (fabs(total - 1) > 1e-8) return "probabilities do not sum to 1";
    for (int i = 0; i < m; i++) {
        double err = fabs(E[i] - x[i]);
        if (err > 1e-6 * fabs(x[i]) + 1e-12 * S) return "biased: E[out] != x";
        if (S > 0 && err / S > *worst) *worst = err / S;
        if (x[i] != 0 && fabs(incl[i] - P[i]) > 1e-9) return "inclusion probability != water-filling";
    }
    return NULL;
}

static void random_group(float *x, int m, uint64_t *rng) {
    int style = (int)(test_rand_u64(rng) % 6);
    for (int i = 0; i < m; i++) {
        double u = test_rand_u01(rng);
        float v = test_rand_normal(rng);
        if (style == 1 && u < 0.4) v = 0;                            /* sparse */
        if (style == 2) v = (float)((int)(u * 3) + 1) * (u < 0.5 ? -1.f : 1.f); /* ties */
        if (style == 3 && i == 0) v *= 1000;                          /* one dominant */
        if (style == 4) v *= (float)pow(10.0, 6 * u - 3);            /* wide range */
        x[i] = v;
    }
}

static const int EXACT_NM[][2] = {{1, 2}, {2, 4}, {1, 4}, {3, 4}, {1, 3}, {2, 3}, {2, 8}, {3, 5}, {4, 32}, {8, 16}, {5, 64}, {31, 64}};

TEST_CASE(exact_mvue_enumerated) {
    uint64_t rng = 11;
    double worst = 0;
    long groups = 0;
    static outcomes o;
    for (size_t t = 0; t < sizeof EXACT_NM / sizeof EXACT_NM[0]; t++) {
        const int n = EXACT_NM[t][0], m = EXACT_NM[t][1];
        int reps = m > 16 ? 400 : 3000;
        for (int r = 0; r < reps; r++) {
            float x[SDGP_NM_MAX_M];
            random_group(x, m, &rng);
            if (!enumerate_exact(&o, x, n, m, &rng)) {
                CHECK(0, "%d:%d group %d: outcome not constant between the breaks", n, m, r);
                continue;
            }
            const char *why = check_unbiased(&o, x, n, m, &worst);
            CHECK(why == NULL, "%d:%d group %d (x0=%g x1=%g): %s", n, m, r, x[0], x[1], why);
            groups++;
        }
    }
    fprintf(stderr, "  %ld random groups, worst |E - x| / sum|x| = %.2e\n", groups, worst);
}

/* The 2:4 closed form: the pair distribution is the one of the notes (cases A, B, C), including
 * the edge cases that broke a public port. */
TEST_CASE(closed_form_24_pairs) {
    const float edge[][4] = {{1, 2, 3, 5},  {1, 1, 1, 10}, {3, 4, 5, 6}, {0, 0, 0, 0}, {2, 2, 2, 2},  {0, 0, 7, 0},   {-1, 2, -3, 5},
                             {5, 3, 2, 1},  {1, 1, 1, 3},  {1, 1, 1, 2}, {0, 1, 1, 1}, {0, 0, 1, -1}, {1e-30f, 1, 1, 1}, {-4, 1, 1, 1}};
    uint64_t rng = 5;
    static outcomes o;
    int seen[3] = {0};
    for (int r = 0; r < 3000 + 14; r++) {
        float x[4];
        if (r < 14) memcpy(x, edge[r], sizeof x);
        else random_group(x, 4, &rng);
        REQUIRE(enumerate_exact(&o, x, 2, 4, &rng), "group %d: outcome not constant between breaks", r);
        double worst = 0;
        const char *why = check_unbiased(&o, x, 2, 4, &worst);
        CHECK(why == NULL, "x = [%g %g %g %g]: %s", x[0], x[1], x[2], x[3], why);
        int nnz = 0;
        for (int i = 0; i < 4; i++) nnz += x[i] != 0;
        if (nnz <= 2) {
            CHECK(o.count == 1 && memcmp(o.y[0], x, sizeof x) == 0, "at most 2 nonzeros: identity");
            continue;
        }
        double want[4][4], got[4][4] = {{0}};
        char c = closed_24(want, x);
        seen[c - 'A']++;
        for (int k = 0; k < o.count; k++) {
            int i = __builtin_ctzll(o.mask[k]), j = 63 - __builtin_clzll(o.mask[k]);
            got[i][j] += o.prob[k];
            if (c == 'C') { /* x4 (unique: three nonzeros and a4 >= a1 + a2 + a3) unchanged */
                int top = 0;
                for (int q = 1; q < 4; q++)
                    if (fabsf(x[q]) > fabsf(x[top])) top = q;
                CHECK(o.y[k][top] == x[top], "case C must keep x4 unchanged");
            }
        }
        for (int i = 0; i < 4; i++)
            for (int j = i + 1; j < 4; j++)
                CHECK(fabs(got[i][j] - want[i][j]) < 1e-9, "x = [%g %g %g %g] case %c pair %d%d: %g, notes say %g", x[0], x[1], x[2], x[3], c, i, j,
                      got[i][j], want[i][j]);
    }
    CHECK(seen[0] > 100 && seen[1] > 100 && seen[2] > 100, "every case exercised: A %d B %d C %d", seen[0], seen[1], seen[2]);
    /* [1, 1, 1, 10]: x4 = 10 always kept as is, the others written as +-3 */
    float x[4] = {1, -1, 1, 10};
    REQUIRE(enumerate_exact(&o, x, 2, 4, &rng), "enumerate");
    for (int k = 0; k < o.count; k++) {
        CHECK(o.y[k][3] == 10.0f, "x4 must stay 10, got %g", o.y[k][3]);
        for (int i = 0; i < 3; i++) CHECK(o.y[k][i] == 0 || fabsf(o.y[k][i]) == 3.0f, "others written as R = 3, got %g", o.y[k][i]);
    }
}

/* ---- approximate 2:4: enumerate ordered pairs (i1, i2) ---- */

TEST_CASE(approx_mvue_enumerated) {
    uint64_t rng = 99;
    int edge_n = 8;
    const float edge[][4] = {{1, 2, 3, 5}, {1, 1, 1, 10}, {0, 0, 0, 0}, {0, 3, 0, -2}, {2, 2, 2, 2}, {-1, 2, -3, 5}, {0, 1, 2, 3}, {1e-20f, 1, 1, 1e20f}};
    for (int r = 0; r < 4000; r++) {
        float x[4];
        if (r < edge_n) memcpy(x, edge[r], sizeof x);
        else random_group(x, 4, &rng);
        double a[4], S = 0, E[4] = {0}, total = 0;
        int nnz = 0;
        for (int i = 0; i < 4; i++) S += a[i] = fabs((double)x[i]), nnz += x[i] != 0;
        float y[4];
        if (nnz <= 2) {
            CHECK(prune_mvue_approx_group(y, x, test_rand_u01(&rng), test_rand_u01(&rng)) == 0 && memcmp(y, x, sizeof y) == 0, "identity");
            continue;
        }
        double cum1 = 0;
        for (int i = 0; i < 4; i++) {
            double lo1 = cum1;
            cum1 += a[i];
            if (a[i] == 0) continue;
            double rest = 0, cum2 = 0; /* the others' sum, added directly (S - a_i can cancel) */
            for (int j = 0; j < 4; j++) rest += j == i ? 0 : a[j];
            for (int j = 0; j < 4; j++) {
                if (j == i) continue;
                double lo2 = cum2;
                cum2 += a[j];
                if (a[j] == 0) continue;
                double p = a[i] / S * (a[j] / rest);
                /* the library's draw rule: first index whose running sum exceeds u * total */
                double u1 = 0.5 * (lo1 + cum1) / S, u2 = 0.5 * (lo2 + cum2) / rest;
                prune_mvue_approx_group(y, x, u1, u2);
                CHECK(nz_mask(y, 4) == ((1ull << i) | (1ull << j)), "x = [%g %g %g %g]: u=(%g, %g) should keep %d, %d", x[0], x[1], x[2], x[3], u1, u2, i, j);
                total += p;
                for (int q = 0; q < 4; q++) E[q] += p * y[q];
            }
        }
        CHECK(fabs(total - 1) < 1e-12, "pair probabilities sum to %g", total);
        for (int q = 0; q < 4; q++)
            CHECK(fabs(E[q] - x[q]) <= 1e-6 * fabs(x[q]) + 1e-12 * S, "x = [%g %g %g %g]: E[%d] = %.9g != %.9g", x[0], x[1], x[2], x[3], q, E[q], x[q]);
    }
}

/* ---- the real sdgp_prune against the enumerated probabilities ---- */

/* Wilson-Hilferty: the chi-square quantile with k degrees of freedom at z standard deviations. */
static double chi2_quantile(int k, double z) {
    double h = 2.0 / (9.0 * k);
    return k * pow(1 - h + z * sqrt(h), 3);
}

/* Prunes G copies of group x (rows of m channels; or one channel of rows on the row axis) with
 * sdgp_prune and compares the frequencies of the outcomes with probs. */
static void frequencies_match(sdgp_prune_fn fn, const float *x, int n, int m, int axis, const outcomes *o) {
    const int64_t G = 40000;
    float *t = test_xmalloc((size_t)(G * m) * 4), *out = test_xmalloc((size_t)(G * m) * 4);
    /* channel axis: rows = G, C = m. row axis: rows = m * 200, C = G / 200 (every column a group) */
    int64_t B = 1, P = axis ? 200 * m : G, C = axis ? G / 200 : m;
    for (int64_t g = 0; g < G; g++)
        for (int k = 0; k < m; k++) {
            int64_t e = axis ? ((g / C) * m + k) * C + g % C : g * m + k;
            t[e] = x[k];
        }
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fn, n, m);
    cfg.axis = (sdgp_axis)axis;
    cfg.seed = 1234;
    cfg.layer = 3;
    sdgp_error e;
    REQUIRE(sdgp_prune(&cfg, t, B, P, C, out, NULL, &e) == SDGP_OK, "%s", e.msg);
    long count[MAX_OUT] = {0}, unknown = 0;
    for (int64_t g = 0; g < G; g++) {
        float y[SDGP_NM_MAX_M];
        for (int k = 0; k < m; k++) y[k] = out[axis ? ((g / C) * m + k) * C + g % C : g * m + k];
        int j = 0;
        while (j < o->count && memcmp(o->y[j], y, (size_t)m * 4)) j++;
        if (j == o->count) unknown++;
        else count[j]++;
    }
    double chi2 = 0;
    int dof = -1;
    for (int j = 0; j < o->count; j++) {
        double want = o->prob[j] * (double)G;
        if (want < 1e-9) {
            CHECK(count[j] == 0, "an outcome of probability 0 happened");
            continue;
        }
        chi2 += (count[j] - want) * (count[j] - want) / want;
        dof++;
    }
    CHECK(unknown == 0, "%s %d:%d: %ld outcomes the enumeration does not list", sdgp_prune_fn_name(fn), n, m, unknown);
    if (dof > 0) CHECK(chi2 < chi2_quantile(dof, 4.75), "%s %d:%d axis %d: chi2 = %.1f with %d dof", sdgp_prune_fn_name(fn), n, m, axis, chi2, dof);
    free(t);
    free(out);
}

TEST_CASE(sampler_frequencies) {
    static outcomes o;
    uint64_t rng = 3;
    struct {
        int n, m;
        float x[8];
    } cases[] = {{2, 4, {1, 2, 3, 5}}, {2, 4, {1, 1, 1, 10}}, {2, 4, {3, 4, 5, 6}}, {2, 4, {-2, 0.5f, 7, -1}},
                 {1, 2, {1, -3}},      {1, 4, {1, 2, 3, 4}},  {3, 4, {1, 2, 3, 9}}, {2, 8, {1, 2, 3, 4, 5, 6, 7, 30}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        for (int axis = 0; axis < 2; axis++) {
            REQUIRE(enumerate_exact(&o, cases[c].x, cases[c].n, cases[c].m, &rng), "enumerate");
            frequencies_match(SDGP_PRUNE_MVUE, cases[c].x, cases[c].n, cases[c].m, axis, &o);
        }
    /* approx 2:4: the outcome table from the ordered-pair probabilities */
    const float xa[4] = {1, 2, 3, 5};
    double a[4] = {1, 2, 3, 5}, S = 11;
    o.count = 0;
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            float y[4];
            double p = a[i] / S * a[j] / (S - a[i]) + a[j] / S * a[i] / (S - a[j]);
            /* u's that pick (i, j): midpoints of the draw intervals */
            double lo = 0;
            for (int q = 0; q < i; q++) lo += a[q];
            double lo2 = 0;
            for (int q = 0; q < j; q++)
                if (q != i) lo2 += a[q];
            prune_mvue_approx_group(y, xa, (lo + 0.5 * a[i]) / S, (lo2 + 0.5 * a[j]) / (S - a[i]));
            memcpy(o.y[o.count], y, sizeof y);
            o.mask[o.count] = nz_mask(y, 4);
            o.prob[o.count++] = p;
        }
    for (int axis = 0; axis < 2; axis++) frequencies_match(SDGP_PRUNE_MVUE_APPROX, xa, 2, 4, axis, &o);
}

/* random: every n-subset equally likely, also for m < 4. */
TEST_CASE(random_subsets_uniform) {
    const int nms[][2] = {{1, 2}, {1, 3}, {2, 3}, {2, 4}, {1, 4}, {3, 4}, {2, 5}, {3, 6}, {4, 8}};
    for (size_t t = 0; t < sizeof nms / sizeof nms[0]; t++)
        for (int axis = 0; axis < 2; axis++) {
            const int n = nms[t][0], m = nms[t][1];
            const int64_t G = 60000;
            int64_t P = axis ? 300 * m : G, C = axis ? G / 300 : m;
            float *x = test_xmalloc((size_t)(G * m) * 4), *out = test_xmalloc((size_t)(G * m) * 4);
            for (int64_t i = 0; i < G * m; i++) x[i] = 1.0f + (float)(i % 7);
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_RANDOM, n, m);
            cfg.axis = (sdgp_axis)axis;
            cfg.seed = 77;
            sdgp_error e;
            REQUIRE(sdgp_prune(&cfg, x, 1, P, C, out, NULL, &e) == SDGP_OK, "%s", e.msg);
            static long count[1 << 8];
            memset(count, 0, sizeof count);
            long slot[8] = {0}, wrong = 0;
            for (int64_t g = 0; g < G; g++) {
                int mask = 0;
                for (int k = 0; k < m; k++) {
                    int64_t el = axis ? ((g / C) * m + k) * C + g % C : g * m + k;
                    if (out[el] != 0) {
                        mask |= 1 << k;
                        slot[k]++;
                        wrong += out[el] != x[el]; /* unscaled */
                    }
                }
                wrong += __builtin_popcount(mask) != n;
                count[mask]++;
            }
            int subsets = 0;
            double chi2 = 0, want = 0;
            for (int s = 0; s < 1 << m; s++)
                if (__builtin_popcount(s) == n) subsets++;
            want = (double)G / subsets;
            for (int s = 0; s < 1 << m; s++)
                if (__builtin_popcount(s) == n) chi2 += (count[s] - want) * (count[s] - want) / want;
            CHECK(wrong == 0, "random %d:%d: %ld groups without exactly n unscaled values", n, m, wrong);
            CHECK(chi2 < chi2_quantile(subsets - 1, 4.75), "random %d:%d axis %d: chi2 = %.1f over %d subsets", n, m, axis, chi2, subsets);
            for (int k = 0; k < m; k++) /* each slot kept with probability n/m (z < 5) */
                CHECK(fabs(slot[k] - (double)G * n / m) < 5 * sqrt((double)G * n / m * (1 - (double)n / m)), "random %d:%d slot %d: %ld", n, m, k, slot[k]);
            free(x);
            free(out);
        }
}

/* Different seeds, steps and layers give different masks; the same key the same mask. */
TEST_CASE(keys_change_masks) {
    const int64_t G = 256;
    float x[G * 4], a[G * 4], b[G * 4];
    for (int i = 0; i < G * 4; i++) x[i] = 1.0f + (float)(i % 5);
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    REQUIRE(sdgp_prune(&cfg, x, 1, G, 4, a, NULL, NULL) == SDGP_OK, "run");
    REQUIRE(sdgp_prune(&cfg, x, 1, G, 4, b, NULL, NULL) == SDGP_OK, "run");
    CHECK(memcmp(a, b, sizeof a) == 0, "same key, same result");
    for (int f = 0; f < 3; f++) {
        sdgp_prune_cfg c2 = cfg;
        if (f == 0) c2.seed = 9;
        if (f == 1) c2.step = 9;
        if (f == 2) c2.layer = 9;
        REQUIRE(sdgp_prune(&c2, x, 1, G, 4, b, NULL, NULL) == SDGP_OK, "run");
        CHECK(memcmp(a, b, sizeof a) != 0, "changing seed/step/layer (%d) must change the masks", f);
    }
}

int main(void) {
    RUN(exact_mvue_enumerated);
    RUN(closed_form_24_pairs);
    RUN(approx_mvue_enumerated);
    RUN(sampler_frequencies);
    RUN(random_subsets_uniform);
    RUN(keys_change_masks);
    return test_finish();
}
