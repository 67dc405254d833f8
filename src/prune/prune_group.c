/* Per-group pruning decisions: magnitude ranking, uniform random subsets and the MVUE samplers.
 *
 * These are the single source of truth for every decision that is not a plain top-n: the SIMD
 * paths call them per group, and the tests enumerate them (see prune_internal.h). Probability
 * arithmetic is in double; every threshold is a running sum normalised by its own total so the
 * last one is exactly 1 (or exactly the sample size), which keeps the samplers exact in
 * distribution up to the 2^-32 resolution of the uniforms. */
#include <math.h>
#include <string.h>

#include "prune/prune_internal.h"

static uint64_t low_bits(int k) { return k >= 64 ? ~0ull : (1ull << k) - 1; }

uint64_t prune_magnitude_mask(const float *x, int n, int m) {
    if (n >= m) return low_bits(m);
    uint32_t key[SDGP_NM_MAX_M];
    for (int i = 0; i < m; i++) key[i] = prune_key(x[i]);
    /* Selection of whichever side is smaller: the n best (highest key, lowest index first) or
     * the m-n worst (lowest key, highest index first); both give the same order's top n. */
    if (n <= m - n) {
        uint64_t kept = 0;
        for (int s = 0; s < n; s++) {
            int best = -1;
            for (int i = 0; i < m; i++)
                if (!(kept >> i & 1) && (best < 0 || key[i] > key[best])) best = i;
            kept |= 1ull << best;
        }
        return kept;
    }
    uint64_t dropped = 0;
    for (int s = 0; s < m - n; s++) {
        int worst = -1;
        for (int i = 0; i < m; i++)
            if (!(dropped >> i & 1) && (worst < 0 || key[i] <= key[worst])) worst = i;
        dropped |= 1ull << worst;
    }
    return low_bits(m) & ~dropped;
}

/* The Philox words of one group, block after block. */
typedef struct {
    sdgp_philox_key key;
    uint64_t group;
    uint32_t block;
    int used;
    sdgp_philox_ctr w;
} word_stream;

static uint32_t next_word(word_stream *s) {
    if (s->used == 4) {
        s->w = sdgp_philox_draw(s->key, s->group, s->block++);
        s->used = 0;
    }
    return s->w.v[s->used++];
}

/* Uniform integer in [0, bound) without bias (Lemire's multiply-shift with rejection). */
static uint32_t uniform_below(word_stream *s, uint32_t bound) {
    uint64_t prod = (uint64_t)next_word(s) * bound;
    uint32_t low = (uint32_t)prod;
    if (low < bound) {
        uint32_t threshold = (uint32_t)(-bound) % bound;
        while (low < threshold) {
            prod = (uint64_t)next_word(s) * bound;
            low = (uint32_t)prod;
        }
    }
    return (uint32_t)(prod >> 32);
}

uint64_t prune_random_mask(sdgp_philox_key key, uint64_t group, int n, int m) {
    if (n >= m) return low_bits(m);
    word_stream s = {key, group, 0, 4, {{0, 0, 0, 0}}};
    /* Partial Fisher-Yates: the first k entries of a uniformly shuffled 0..m-1 are a uniform
     * k-subset. Choosing the smaller of kept / dropped halves the draws for n > m/2. */
    int k = n <= m - n ? n : m - n;
    uint8_t perm[SDGP_NM_MAX_M];
    for (int i = 0; i < m; i++) perm[i] = (uint8_t)i;
    uint64_t chosen = 0;
    for (int i = 0; i < k; i++) {
        int j = i + (int)uniform_below(&s, (uint32_t)(m - i));
        uint8_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
        chosen |= 1ull << perm[i];
    }
    return n <= m - n ? chosen : low_bits(m) & ~chosen;
}

/* ---- exact MVUE ---- */

enum { PLAN_IDENTITY, PLAN_TABLE, PLAN_SYSTEMATIC, PLAN_BAD };

/* The plan of one group: either a table of outcomes chosen by thresholds (the closed forms), or
 * the water-filling quantities for systematic sampling. */
typedef struct {
    int kind;
    /* PLAN_TABLE: outcome k has probability (t[k] - t[k-1]) / total (t[-1] = 0, t[count-1] =
     * total; the t are non-decreasing in exact arithmetic). The sampler takes outcome
     * k = #{j < count-1 : u * total >= t[j]}: no divisions and no order dependence, so the SIMD
     * paths reproduce it bitwise. Outcome k keeps positions i0[k], i1[k] (i1 = -1: one slot)
     * writing sign(x) * v0[k], sign(x) * v1[k]; v < 0 means "x unchanged". */
    int count;
    double t[6], total;
    int i0[6], i1[6];
    double v0[6], v1[6];
    /* PLAN_SYSTEMATIC: saturated positions are kept unchanged; the others are kept at the
     * points u + j falling in [C_{i-1}, C_i), writing sign(x) * T. */
    uint64_t saturated;
    double C[SDGP_NM_MAX_M];
    double T;
} mvue_plan;

static void table_add(mvue_plan *p, double threshold, int i0, double v0, int i1, double v1) {
    int k = p->count++;
    p->t[k] = threshold;
    p->i0[k] = i0;
    p->v0[k] = v0;
    p->i1[k] = i1;
    p->v1[k] = v1;
}

/* 2:4 closed form; a[] holds |x|, at least 3 nonzeros. The thresholds are the running sums of
 * the pair probabilities of algorithms.md (times 2S in case A, S in B, R in C), each written in
 * closed form: A: 2a1+a3-a4, 4a1, 4a1+2a2+a3-a4, 4(a1+a2), 2S; B: 2a1, 2a1+R-a4, 2(a1+a2), S;
 * C: a1, a1+a2, R. */
static void plan_24(mvue_plan *p, const double *a) {
    int o[4] = {0, 1, 2, 3}; /* ascending a, ties by index */
    for (int i = 1; i < 4; i++)
        for (int k = i; k > 0 && a[o[k]] < a[o[k - 1]]; k--) {
            int t = o[k];
            o[k] = o[k - 1];
            o[k - 1] = t;
        }
    double a1 = a[o[0]], a2 = a[o[1]], a3 = a[o[2]], a4 = a[o[3]];
    double a12 = a1 + a2, S = a12 + (a3 + a4), R = a12 + a3, h = 0.5 * S;
    double d34 = a3 - a4, a1x2 = a1 + a1, tA0 = a1x2 + d34;
    p->kind = PLAN_TABLE;
    p->count = 0;
    if (a4 >= R) { /* case C: P4 = 1, x4 unchanged, one of the others with prob a_i / R */
        p->total = R;
        table_add(p, a1, o[0], R, o[3], -1.0);
        table_add(p, a12, o[1], R, o[3], -1.0);
        table_add(p, R, o[2], R, o[3], -1.0);
    } else if (tA0 > 0) { /* case A: 2 a1 + a3 - a4 > 0 */
        double tA1 = 4 * a1;
        p->total = S + S;
        table_add(p, tA0, o[0], h, o[2], h);
        table_add(p, tA1, o[0], h, o[3], h);
        table_add(p, tA1 + ((a2 + a2) + d34), o[1], h, o[2], h);
        table_add(p, 4 * a12, o[1], h, o[3], h);
        table_add(p, p->total, o[2], h, o[3], h);
    } else { /* case B: a4 >= 2 a1 + a3 and a4 < a1 + a2 + a3 */
        p->total = S;
        table_add(p, a1x2, o[0], h, o[3], h);
        table_add(p, a1x2 + (R - a4), o[1], h, o[2], h);
        table_add(p, a12 + a12, o[1], h, o[3], h);
        table_add(p, S, o[2], h, o[3], h);
    }
}

/* Water-filling P_i = min(1, c a_i) with sum P_i = n; a[] holds |x|, more than n nonzeros.
 * Saturates the largest remaining a_i while c a_i >= 1, c = (n - k) / (unsaturated sum); equal
 * values meet the same condition, so the order among ties does not matter. */
static void plan_systematic(mvue_plan *p, const double *a, int n, int m) {
    p->kind = PLAN_SYSTEMATIC;
    p->saturated = 0;
    int k = 0;
    double rem;
    for (;;) {
        /* C[] = running sums of the unsaturated a in index order (the normalised C below and the
         * unsaturated sum rem come from this one sequence) */
        double run = 0;
        int top = -1;
        for (int i = 0; i < m; i++) {
            if (!(p->saturated >> i & 1)) {
                run += a[i];
                if (top < 0 || a[i] > a[top]) top = i;
            }
            p->C[i] = run;
        }
        rem = run;
        /* saturate the largest while c a_i >= 1, c = (n - k) / rem */
        if (k == n || a[top] * (double)(n - k) < rem) break;
        p->saturated |= 1ull << top;
        k++;
    }
    int left = n - k;
    p->T = left > 0 ? rem / (double)left : 0.0;
    /* prefix / rem * left: the last one is exactly `left` */
    for (int i = 0; i < m; i++) p->C[i] = left > 0 ? p->C[i] / rem * (double)left : 0.0;
}

/* Fills a[] = |x| and returns the plan kind for the trivial cases, or -1 to go on. */
static int plan_begin(mvue_plan *p, double *a, const float *x, int n, int m) {
    int nnz = 0;
    for (int i = 0; i < m; i++) {
        if (!isfinite(x[i])) return p->kind = PLAN_BAD;
        a[i] = fabs((double)x[i]);
        nnz += a[i] != 0;
    }
    if (nnz <= n) return p->kind = PLAN_IDENTITY;
    return -1;
}

static void mvue_plan_make(mvue_plan *p, const float *x, int n, int m) {
    double a[SDGP_NM_MAX_M];
    if (plan_begin(p, a, x, n, m) >= 0) return;
    if (n == 1 && m == 2) {
        p->kind = PLAN_TABLE;
        p->count = 0;
        p->total = a[0] + a[1];
        table_add(p, a[0], 0, p->total, -1, 0);
        table_add(p, p->total, 1, p->total, -1, 0);
    } else if (n == 2 && m == 4) {
        plan_24(p, a);
    } else {
        plan_systematic(p, a, n, m);
    }
}

static float signed_value(float x, double v) { return v < 0 ? x : copysignf((float)v, x); }

int prune_mvue_group(float *y, const float *x, int n, int m, double u) {
    mvue_plan p;
    mvue_plan_make(&p, x, n, m);
    switch (p.kind) {
    case PLAN_BAD:
        memset(y, 0, (size_t)m * sizeof *y);
        return 1;
    case PLAN_IDENTITY:
        memcpy(y, x, (size_t)m * sizeof *y);
        return 0;
    case PLAN_TABLE: {
        int k = 0;
        double ut = u * p.total;
        for (int q = 0; q < p.count - 1; q++) k += !(ut < p.t[q]);
        memset(y, 0, (size_t)m * sizeof *y);
        y[p.i0[k]] = signed_value(x[p.i0[k]], p.v0[k]);
        if (p.i1[k] >= 0) y[p.i1[k]] = signed_value(x[p.i1[k]], p.v1[k]);
        return 0;
    }
    default: { /* PLAN_SYSTEMATIC */
        double next = u;
        for (int i = 0; i < m; i++) {
            if (p.saturated >> i & 1) {
                y[i] = x[i];
            } else if (next < p.C[i]) {
                y[i] = copysignf((float)p.T, x[i]);
                next += 1.0;
            } else {
                y[i] = 0.0f;
            }
        }
        return 0;
    }
    }
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts breaks[0..count) and drops repeats (insertion sort: at most m entries); the new count. */
static int sort_unique(double *breaks, int count) {
    for (int i = 1; i < count; i++)
        for (int k = i; k > 0 && cmp_double(&breaks[k - 1], &breaks[k]) > 0; k--) {
            double t = breaks[k];
            breaks[k] = breaks[k - 1];
            breaks[k - 1] = t;
        }
    int w = 0;
    for (int i = 0; i < count; i++)
        if (w == 0 || breaks[i] != breaks[w - 1]) breaks[w++] = breaks[i];
    return w;
}

/* The fractional parts of a systematic plan's unsaturated cumulative sums: where u changes it. */
static int systematic_breaks(double *breaks, const mvue_plan *p, int m) {
    int count = 0;
    for (int i = 0; i < m; i++) {
        double f = p->C[i] - floor(p->C[i]);
        if (!(p->saturated >> i & 1) && f > 0) breaks[count++] = f;
    }
    return count;
}

int prune_mvue_breaks(double *breaks, const float *x, int n, int m) {
    mvue_plan p;
    mvue_plan_make(&p, x, n, m);
    int count = 0;
    if (p.kind == PLAN_BAD) return -1;
    if (p.kind == PLAN_TABLE) {
        for (int k = 0; k < p.count - 1; k++) {
            double b = p.t[k] / p.total;
            if (b > 0 && b < 1) breaks[count++] = b;
        }
    } else if (p.kind == PLAN_SYSTEMATIC) {
        count = systematic_breaks(breaks, &p, m);
    }
    return sort_unique(breaks, count);
}


/* ---- MVUE of a block sharing one mask ---- */

/* The block's plan from its norms: PLAN_IDENTITY (at most n nonzero) or PLAN_SYSTEMATIC. */
static void block_plan_make(mvue_plan *p, const double *a, int n, int m) {
    int nnz = 0;
    for (int i = 0; i < m; i++) nnz += a[i] != 0;
    if (nnz <= n)
        p->kind = PLAN_IDENTITY;
    else
        plan_systematic(p, a, n, m);
}

uint64_t prune_mvue_block_mask(double *inv, const double *a, int n, int m, double u) {
    mvue_plan p;
    block_plan_make(&p, a, n, m);
    uint64_t mask = 0;
    if (p.kind == PLAN_IDENTITY) {
        int kept = 0;
        for (int i = 0; i < m; i++)
            if (a[i] != 0) mask |= 1ull << i, kept++;
        for (int i = 0; i < m && kept < n; i++)
            if (!(mask >> i & 1)) mask |= 1ull << i, kept++;
        for (int i = 0; i < m; i++) inv[i] = 1.0;
        return mask;
    }
    /* kept unsaturated i: P_i = a_i / T (T = 1/c), so 1/P_i = T / a_i */
    double next = u;
    for (int i = 0; i < m; i++) {
        if (p.saturated >> i & 1) {
            mask |= 1ull << i;
            inv[i] = 1.0;
        } else if (next < p.C[i]) {
            mask |= 1ull << i;
            inv[i] = p.T / a[i];
            next += 1.0;
        }
    }
    return mask;
}

int prune_mvue_block_breaks(double *breaks, const double *a, int n, int m) {
    mvue_plan p;
    block_plan_make(&p, a, n, m);
    return sort_unique(breaks, p.kind == PLAN_SYSTEMATIC ? systematic_breaks(breaks, &p, m) : 0);
}

/* ---- approximate 2:4 MVUE (Horvitz-Thompson) ---- */

/* First index (other than skip) whose running sum of a exceeds t; the last eligible nonzero
 * when rounding puts t at the very end. */
static int draw_index(const double *a, int skip, double t) {
    double run = 0;
    int last = -1;
    for (int i = 0; i < 4; i++) {
        if (i == skip || a[i] == 0) continue;
        run += a[i];
        last = i;
        if (t < run) return i;
    }
    return last;
}

int prune_mvue_approx_group(float *y, const float *x, double u1, double u2) {
    double a[4];
    int nnz = 0;
    for (int i = 0; i < 4; i++) {
        if (!isfinite(x[i])) {
            memset(y, 0, 4 * sizeof *y);
            return 1;
        }
        a[i] = fabs((double)x[i]);
        nnz += a[i] != 0;
    }
    if (nnz <= 2) {
        memcpy(y, x, 4 * sizeof *y);
        return 0;
    }
    double S = ((a[0] + a[1]) + a[2]) + a[3];
    double rest[4]; /* S - a_j, summed directly in index order */
    for (int j = 0; j < 4; j++) {
        rest[j] = 0;
        for (int i = 0; i < 4; i++)
            if (i != j) rest[j] += a[i];
    }
    int i1 = draw_index(a, -1, u1 * S);
    int i2 = draw_index(a, i1, u2 * rest[i1]);
    memset(y, 0, 4 * sizeof *y);
    int kept[2] = {i1, i2};
    for (int s = 0; s < 2; s++) {
        int i = kept[s];
        /* p_i = a_i/S + sum_{j != i} (a_j/S) (a_i / (S - a_j)) */
        double p = a[i] / S;
        for (int j = 0; j < 4; j++)
            if (j != i && a[j] != 0) p += (a[j] / S) * (a[i] / rest[j]);
        y[i] = (float)((double)x[i] / p);
    }
    return 0;
}

int prune_compress_group(float *vals, uint8_t *idx, int64_t stride, const float *y, int n, int m) {
    uint64_t nonzero = 0;
    int nnz = 0;
    for (int i = 0; i < m; i++) {
        int nz = y[i] != 0.0f || y[i] != y[i];
        nonzero |= (uint64_t)nz << i;
        nnz += nz;
    }
    if (nnz > n) return nnz;
    uint64_t zeros = low_bits(m) & ~nonzero, stored = nonzero;
    for (int pad = n - nnz; pad > 0; pad--) { /* the lowest-index zeros */
        stored |= zeros & (~zeros + 1);
        zeros &= zeros - 1;
    }
    for (int j = 0; stored; j++, stored &= stored - 1) {
        int i = __builtin_ctzll(stored);
        vals[j * stride] = y[i];
        idx[j * stride] = (uint8_t)i;
    }
    return nnz;
}
