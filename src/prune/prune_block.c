/* Shared masks: N:M pruning where the rows of a block (consecutive positions of one line) keep
 * the same channels of every group (include/sdgp/prune.h states the rules). Portable C: the
 * decision is made once per block from per-channel sums over its rows, so its cost is divided by
 * the block size; then each row gathers its kept values (scalar here; src/kernels/shared-masks.md
 * has the costs).
 *
 * Used through the prune_kernels_block table by sdgp_prune (cfg->mask_block > 1) and by the
 * Winograd-domain kernel, whose shared-mask micro-kernel loads each kept weight row once for
 * every row of a block (src/kernels/shared-masks.md). That kernel sets prune_job.emit: the block's
 * decision goes to its per-ISA entry packing instead of block_write (no compressed copy). */
#include <math.h>
#include <string.h>

#include "prune/prune_internal.h"

/* Channels are handled in slices of whole groups (PRUNE_BLOCK_SLICE, prune_internal.h), and
 * blocks in batches of at most BATCH, so the workspace is a few tens of KiB on the stack (no
 * allocation in a kernel that runs per image), and the magnitude ranking runs once per batch: the
 * ISA kernels have a per-call set-up that would dominate if called for every block. */
#define SLICE PRUNE_BLOCK_SLICE
#define BATCH 8

typedef prune_block_slice block_slice;

/* MVUE: per-channel sums of x^2 over the block's rows, in row order, in double (x*x of a float is
 * exact in double); the probabilities follow these L2 norms. */
static void block_squares(const prune_job *j, block_slice *b) {
    const int64_t w = b->c1 - b->c0;
    for (int64_t c = 0; c < w; c++) b->s2[c] = 0;
    for (int64_t r = b->r0; r < b->r0 + b->len; r++) {
        const float *x = j->x + r * j->C + b->c0;
        for (int64_t c = 0; c < w; c++) b->s2[c] += (double)x[c] * (double)x[c];
    }
}

/* Magnitude rules: the batch's rows of sums |x| (float, row order; s: nb x w) pruned as nb rows by
 * the ISA's (vectorised) magnitude kernel, whose kept set is prune_magnitude_mask's: NaN first,
 * ties to the lower index. idx: nb x (w/m*n) kept positions within their groups. */
static void rank_batch(const prune_job *j, float *s, uint8_t *idx, float *vals, const int64_t *r0, const int64_t *len, int nb,
                       int64_t c0, int64_t w) {
    for (int k = 0; k < nb; k++) {
        float *sk = s + k * w;
        for (int64_t c = 0; c < w; c++) sk[c] = 0;
        for (int64_t r = r0[k]; r < r0[k] + len[k]; r++) {
            const float *x = j->x + r * j->C + c0;
            for (int64_t c = 0; c < w; c++) sk[c] += fabsf(x[c]);
        }
    }
    prune_job rj;
    memset(&rj, 0, sizeof rj);
    rj.fn = SDGP_PRUNE_MAGNITUDE;
    rj.axis = SDGP_AXIS_CHANNEL;
    rj.n = j->n;
    rj.m = j->m;
    rj.B = 1;
    rj.P = rj.rows = nb;
    rj.C = w;
    rj.x = s;
    rj.vals = vals;
    rj.idx = idx;
    j->rank->prune(&rj, 0, nb);
}

/* The slots of the slice: kept channels (n per group, increasing) and their factors; for the
 * magnitude rules `ranked` is the block's row of rank_batch and first[slot] the first channel of
 * the slot's group. Returns 1 on a non-finite MVUE norm. */
static int block_masks(const prune_job *j, block_slice *b, const uint8_t *ranked, const int32_t *first) {
    const int n = j->n, m = j->m;
    const int64_t G = j->C / m, g0 = b->c0 / m, ng = (b->c1 - b->c0) / m;
    const float *sc = j->fn == SDGP_PRUNE_RESCALED && j->scale ? j->scale + (b->r0 / j->P) * j->scale_bstride : NULL;
    b->sc = sc;
    if (j->fn == SDGP_PRUNE_MAGNITUDE || j->fn == SDGP_PRUNE_RESCALED) {
        /* the ranking's compressed row is the kept set: n increasing positions per group (flat,
         * vectorised loops instead of a bit mask per group: per block, this cost more than
         * writing the block's rows) */
        const int64_t ns = ng * n;
        memcpy(b->kidx, ranked, (size_t)ns);
        for (int64_t slot = 0; slot < ns; slot++) b->kept[slot] = first[slot] + ranked[slot];
        if (sc)
            for (int64_t slot = 0; slot < ns; slot++) b->f[slot] = sc[b->kept[slot]];
        else
            for (int64_t slot = 0; slot < ns; slot++) b->f[slot] = 1.0f;
        return 0;
    }
    if (j->fn == SDGP_PRUNE_MVUE) block_squares(j, b);
    for (int64_t g = 0; g < ng; g++) {
        const uint64_t group = j->group0 + (uint64_t)(b->r0 * G + g0 + g);
        double inv[SDGP_NM_MAX_M];
        uint64_t mask = 0;
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
        default: /* magnitude, rescaled */
            for (int k = 0; k < n; k++) mask |= 1ull << ranked[g * n + k];
            break;
        }
        for (int k = 0; mask; k++, mask &= mask - 1) {
            const int i = __builtin_ctzll(mask);
            const int64_t c = b->c0 + g * m + i, slot = g * n + k;
            b->kept[slot] = (int32_t)c;
            b->kidx[slot] = (uint8_t)i;
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
            memcpy(j->idx + r * slots + s0, b->kidx, (size_t)ns);
        }
    }
}

/* Rescale pass 1 over the slice of one block: dense and kept sums of |x|, rows in order. */
static void block_add_sums(const prune_job *j, const block_slice *b, double *dense, double *kept) {
    const int64_t ns = (b->c1 - b->c0) / j->m * j->n;
    for (int64_t q = b->r0; q < b->r0 + b->len; q++) {
        const float *x = j->x + q * j->C;
        for (int64_t c = b->c0; c < b->c1; c++) dense[c] += fabs((double)x[c]);
        for (int64_t k = 0; k < ns; k++) kept[b->kept[k]] += fabs((double)x[b->kept[k]]);
    }
}

/* Every block that starts in rows [t0, t1), whole: written (dense == NULL) or added to the rescale
 * sums. Returns 1 on a non-finite MVUE norm. */
static int run_blocks(const prune_job *j, int64_t t0, int64_t t1, double *dense, double *kept) {
    const int64_t sw = SLICE / j->m * j->m;
    const int magnitude = j->fn == SDGP_PRUNE_MAGNITUDE || j->fn == SDGP_PRUNE_RESCALED;
    block_slice b;
    float s[BATCH * SLICE], vals[BATCH * SLICE];
    uint8_t ranked[BATCH * SLICE];
    int32_t first[SLICE];
    int64_t r0[BATCH], len[BATCH];
    int bad = 0;
    for (int64_t r = prune_next_block_start(j, t0); r < t1;) {
        int nb = 0;
        for (; nb < BATCH && r < t1; nb++) {
            r0[nb] = r;
            len[nb] = prune_block_rows(j, r);
            r = prune_next_block_start(j, r + len[nb]);
        }
        for (int64_t c0 = 0, c1; c0 < j->C; c0 = c1) {
            c1 = c0 + sw < j->C ? c0 + sw : j->C;
            const int64_t ns = (c1 - c0) / j->m * j->n;
            if (magnitude) {
                rank_batch(j, s, ranked, vals, r0, len, nb, c0, c1 - c0);
                for (int64_t slot = 0; slot < ns; slot++) first[slot] = (int32_t)(c0 + slot / j->n * j->m);
            }
            for (int k = 0; k < nb; k++) {
                b.r0 = r0[k], b.len = len[k], b.c0 = c0, b.c1 = c1;
                if (block_masks(j, &b, ranked + k * ns, first)) {
                    bad = 1;
                    continue;
                }
                if (dense)
                    block_add_sums(j, &b, dense, kept);
                else if (j->emit)
                    j->emit(j, &b);
                else
                    block_write(j, &b);
            }
        }
    }
    return bad;
}

static int block_prune(const prune_job *j, int64_t t0, int64_t t1) {
    if (!j->emit && j->rank && j->rank->block_prune) { /* the ranking ISA's vectorised form, where it has one */
        const int bad = j->rank->block_prune(j, t0, t1);
        if (bad >= 0) return bad;
    }
    return run_blocks(j, t0, t1, NULL, NULL);
}

static void block_sums(const prune_job *j, int64_t bi, double *dense, double *kept) {
    /* the ranking ISA's vectorised form, where it has one (rescale's first pass reads all of x) */
    if (j->rank && j->rank->block_sums && j->rank->block_sums(j, bi, dense, kept)) return;
    for (int64_t c = 0; c < j->C; c++) dense[c] = kept[c] = 0;
    run_blocks(j, bi * j->P, (bi + 1) * j->P, dense, kept);
}

const prune_kernels prune_kernels_block = {.prune = block_prune, .sums = block_sums};
