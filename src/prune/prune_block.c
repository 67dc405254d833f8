/* Shared masks: N:M pruning where the rows of a block (consecutive positions of one line) keep
 * the same channels of every group (include/sdgp/prune.h states the rules). Portable C: the
 * decision is made once per block from per-channel sums over its rows, so its cost is divided by
 * the block size and the passes over x are plain streaming loops the compiler vectorises.
 *
 * Used through the prune_kernels_block table by sdgp_prune (cfg->mask_block > 1) and by the
 * Winograd-domain kernel, whose shared-mask micro-kernel loads each kept weight row once for
 * every row of a block (src/kernels/README.md). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "prune/prune_internal.h"

/* Rows of the block that starts at row r (the rest of the line when shorter than a block). */
static int64_t block_rows(const prune_job *j, int64_t r) {
    const int64_t rest = j->line - r % j->P % j->line;
    return rest < j->block ? rest : j->block;
}

/* The first block start at or after row r. */
static int64_t next_block_start(const prune_job *j, int64_t r) {
    const int64_t off = r % j->P % j->line, k = off % j->block;
    if (!k) return r;
    const int64_t to_block = j->block - k, to_line = j->line - off;
    return r + (to_block < to_line ? to_block : to_line);
}

/* Channels are handled in slices of whole groups, at most SLICE, so the per-block workspace is a
 * few KiB on the stack (no allocation in a kernel that runs per image). */
#define SLICE 512

typedef struct {
    int64_t r0, len, c0, c1; /* the block's rows, the slice's channels */
    float s[SLICE];          /* magnitude rules: sum |x| per channel */
    double s2[SLICE];        /* MVUE: sum x^2 per channel */
    int32_t kept[SLICE];     /* per slot of the slice (n per group): the kept channel */
    float f[SLICE];          /* its factor: 1, or the rescale factor */
    double inv[SLICE];       /* MVUE: its 1 / P_i */
} block_slice;

/* Per-channel sums over the block's rows, in row order: sum |x| in float for the magnitude rules
 * (ranked by prune_magnitude_mask like single rows: NaN first, ties to the lower index), sum x^2
 * in double for MVUE (x*x of a float is exact in double; its probabilities follow the L2 norms). */
static void block_scores(const prune_job *j, block_slice *b) {
    const int64_t w = b->c1 - b->c0;
    if (j->fn == SDGP_PRUNE_MVUE) {
        for (int64_t c = 0; c < w; c++) b->s2[c] = 0;
        for (int64_t r = b->r0; r < b->r0 + b->len; r++) {
            const float *x = j->x + r * j->C + b->c0;
            for (int64_t c = 0; c < w; c++) b->s2[c] += (double)x[c] * (double)x[c];
        }
    } else {
        for (int64_t c = 0; c < w; c++) b->s[c] = 0;
        for (int64_t r = b->r0; r < b->r0 + b->len; r++) {
            const float *x = j->x + r * j->C + b->c0;
            for (int64_t c = 0; c < w; c++) b->s[c] += fabsf(x[c]);
        }
    }
}

/* The magnitude masks of the slice's groups: the block's row of sums pruned as one row by the
 * ISA's (vectorised) magnitude kernel, whose kept set is that of prune_magnitude_mask. */
static void rank_scores(const prune_job *j, const block_slice *b, uint64_t *masks) {
    const int n = j->n, m = j->m;
    const int64_t w = b->c1 - b->c0, ng = w / m;
    float vals[SLICE];
    uint8_t idx[SLICE];
    prune_job r;
    memset(&r, 0, sizeof r);
    r.fn = SDGP_PRUNE_MAGNITUDE;
    r.axis = SDGP_AXIS_CHANNEL;
    r.n = n;
    r.m = m;
    r.B = r.P = r.rows = 1;
    r.C = w;
    r.x = b->s;
    r.vals = vals;
    r.idx = idx;
    j->rank->prune(&r, 0, 1);
    for (int64_t g = 0; g < ng; g++) {
        masks[g] = 0;
        for (int k = 0; k < n; k++) masks[g] |= 1ull << idx[g * n + k];
    }
}

/* The slots of the slice: kept channels (n per group, increasing) and their factors. Returns 1
 * on a non-finite MVUE norm. */
static int block_masks(const prune_job *j, block_slice *b) {
    const int n = j->n, m = j->m;
    const int64_t G = j->C / m, g0 = b->c0 / m, ng = (b->c1 - b->c0) / m;
    const float *sc = j->fn == SDGP_PRUNE_RESCALED && j->scale ? j->scale + (b->r0 / j->P) * j->scale_bstride : NULL;
    uint64_t ranked[SLICE];
    if (j->fn != SDGP_PRUNE_RANDOM) block_scores(j, b);
    if (j->fn == SDGP_PRUNE_MAGNITUDE || j->fn == SDGP_PRUNE_RESCALED) rank_scores(j, b, ranked);
    for (int64_t g = 0; g < ng; g++) {
        const uint64_t group = j->group0 + (uint64_t)(b->r0 * G + g0 + g);
        double inv[SDGP_NM_MAX_M];
        uint64_t mask;
        switch (j->fn) {
        case SDGP_PRUNE_RANDOM: mask = prune_random_mask(j->key, group, n, m); break;
        case SDGP_PRUNE_MVUE: {
            double a[SDGP_NM_MAX_M];
            for (int i = 0; i < m; i++) {
                if (!isfinite(b->s2[g * m + i])) return 1;
                a[i] = sqrt(b->s2[g * m + i]);
            }
            mask = prune_mvue_block_mask(inv, a, n, m, prune_group_u(j->key, group, 0));
            break;
        }
        default: mask = ranked[g]; break; /* magnitude, rescaled */
        }
        for (int k = 0; mask; k++, mask &= mask - 1) {
            const int i = __builtin_ctzll(mask);
            const int64_t c = b->c0 + g * m + i, slot = g * n + k;
            b->kept[slot] = (int32_t)c;
            b->f[slot] = sc ? sc[c] : 1.0f; /* the rows of a block are in one sample: one factor */
            if (j->fn == SDGP_PRUNE_MVUE) b->inv[slot] = inv[i];
        }
    }
    return 0;
}

/* Writes the slice of the block's rows: out (zeros, then the kept values) and the slots (the
 * block's kept set, every row). x * 1.0f is x, so one loop serves the unscaled rules. */
static void block_write(const prune_job *j, const block_slice *b) {
    const int m = j->m;
    const int64_t C = j->C, slots = C / m * j->n, s0 = b->c0 / m * j->n, ns = (b->c1 - b->c0) / m * j->n;
    const int mvue = j->fn == SDGP_PRUNE_MVUE;
    for (int64_t r = b->r0; r < b->r0 + b->len; r++) {
        const float *x = j->x + r * C;
        float y[SLICE];
        if (mvue)
            for (int64_t k = 0; k < ns; k++) y[k] = (float)((double)x[b->kept[k]] * b->inv[k]);
        else
            for (int64_t k = 0; k < ns; k++) y[k] = x[b->kept[k]] * b->f[k];
        if (j->out) {
            float *o = j->out + r * C;
            memset(o + b->c0, 0, (size_t)(b->c1 - b->c0) * sizeof *o);
            for (int64_t k = 0; k < ns; k++) o[b->kept[k]] = y[k];
        }
        if (j->vals) {
            memcpy(j->vals + r * slots + s0, y, (size_t)ns * sizeof *y);
            for (int64_t k = 0; k < ns; k++) j->idx[r * slots + s0 + k] = (uint8_t)(b->kept[k] % m);
        }
    }
}

/* Channels per slice: whole groups, at most SLICE. */
static int64_t slice_width(const prune_job *j) { return SLICE / j->m * j->m; }

static int block_prune(const prune_job *j, int64_t t0, int64_t t1) {
    block_slice b;
    int bad = 0;
    const int64_t sw = slice_width(j);
    for (int64_t r = next_block_start(j, t0); r < t1; r = next_block_start(j, r + block_rows(j, r))) {
        b.r0 = r;
        b.len = block_rows(j, r);
        for (b.c0 = 0; b.c0 < j->C; b.c0 = b.c1) {
            b.c1 = b.c0 + sw < j->C ? b.c0 + sw : j->C;
            if (block_masks(j, &b))
                bad = 1;
            else
                block_write(j, &b);
        }
    }
    return bad;
}

static void block_sums(const prune_job *j, int64_t bi, double *dense, double *kept) {
    const int64_t C = j->C, P = j->P, sw = slice_width(j), ns = sw / j->m * j->n;
    block_slice b;
    for (int64_t c = 0; c < C; c++) dense[c] = kept[c] = 0;
    for (int64_t r = bi * P; r < (bi + 1) * P; r += block_rows(j, r)) {
        b.r0 = r;
        b.len = block_rows(j, r);
        for (b.c0 = 0; b.c0 < C; b.c0 = b.c1) {
            b.c1 = b.c0 + sw < C ? b.c0 + sw : C;
            block_masks(j, &b);
            const int64_t nk = b.c1 - b.c0 < sw ? (b.c1 - b.c0) / j->m * j->n : ns;
            for (int64_t q = r; q < r + b.len; q++) {
                const float *x = j->x + q * C;
                for (int64_t c = b.c0; c < b.c1; c++) dense[c] += fabs((double)x[c]);
                for (int64_t k = 0; k < nk; k++) kept[b.kept[k]] += fabs((double)x[b.kept[k]]);
            }
        }
    }
}

const prune_kernels prune_kernels_block = {block_prune, block_sums};
