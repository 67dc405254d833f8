/* sdgp pruning internals: the per-group decision functions (shared by every ISA path and used
 * by the tests to enumerate outcomes) and the kernel table behind sdgp_prune().
 *
 * Group indexing (the Philox counter of a group; a fixed function of the group's position):
 *   axis CHANNEL: group g of row r          -> r * (C/m) + g
 *   axis ROW:     rows g*m..g*m+m-1, chan c -> g * C + c
 * A group's m values are gathered into x[0..m) in increasing position order. */
#ifndef SDGP_PRUNE_INTERNAL_H
#define SDGP_PRUNE_INTERNAL_H

#include <stdint.h>

#include "core/philox.h"
#include "sdgp/prune.h"

/* ---- per-group decisions (prune_group.c; plain C, no ISA flags) ---- */

/* Ranking key of a value: |x| as bits, NaN clamped just above +Inf, so unsigned (and, since the
 * top bit is clear, signed) integer order is the magnitude order with every NaN ranked highest
 * and NaNs tied with each other. */
static inline uint32_t prune_key(float v) {
    union { float f; uint32_t u; } b = {v};
    uint32_t k = b.u & 0x7fffffffu;
    return k > 0x7f800001u ? 0x7f800001u : k;
}

/* Bit i set: x[i] is one of the n largest keys, ties to the lower index. Exactly n bits set. */
uint64_t prune_magnitude_mask(const float *x, int n, int m);

/* Bit i set: position i is in a uniformly random n-subset (partial Fisher-Yates driven by the
 * Philox words of `group`, unbiased integer draws by rejection). Exactly n bits set. */
uint64_t prune_random_mask(sdgp_philox_key key, uint64_t group, int n, int m);

/* The exact MVUE sampler of one group, split so a test can enumerate it: the outcome is a
 * deterministic function of one uniform u in [0, 1), piecewise constant with changes only at
 * the points prune_mvue_breaks() lists (up to rounding: the decision compares u * total < cum,
 * so a u within a few ulps of a break may fall either way; the sampler's u is on the 2^-32 grid
 * of sdgp_u01d, so probabilities are exact up to that resolution). 1:2 and 2:4 use the closed
 * forms (algorithms.md section 2, corrected cases B and C); other n:m use water-filling
 * P_i = min(1, c a_i), sum P_i = n, and systematic sampling in index order.
 * n == m or at most n nonzeros: y = x. All zero: y = 0.
 * Returns 0, or 1 when the group holds a NaN/Inf (y is then zeros). */
int prune_mvue_group(float *y, const float *x, int n, int m, double u);
/* Writes the sorted points in (0, 1) at which prune_mvue_group's outcome may change (at most m)
 * and returns their count; -1 on a non-finite value. */
int prune_mvue_breaks(double *breaks, const float *x, int n, int m);

/* MVUE of a block sharing one mask: a[0..m) = the L2 norms of the block's channels (finite,
 * >= 0). Water-filling P_i = min(1, c a_i), sum P_i = n, then systematic sampling in index order
 * with the uniform u. Writes inv[i] = 1 / P_i for kept i (1 for saturated ones) and returns the
 * kept set (exactly n bits; with at most n nonzero a_i: those, padded with the lowest-index
 * zero ones to n, inv = 1). */
uint64_t prune_mvue_block_mask(double *inv, const double *a, int n, int m, double u);
/* The points in (0, 1) where prune_mvue_block_mask's outcome may change; returns their count. */
int prune_mvue_block_breaks(double *breaks, const double *a, int n, int m);

/* Approximate 2:4 MVUE: i1 is the first index whose running sum of a = |x| (index order)
 * exceeds u1 * S; i2 likewise among the other three with u2 and their sum. Kept values are
 * x_i / p_i, p_i the true inclusion probability (Horvitz-Thompson). At most 2 nonzeros: y = x.
 * Returns 0, or 1 on a non-finite value. */
int prune_mvue_approx_group(float *y, const float *x, double u1, double u2);

/* The uniforms a group's sampler uses: word 0 (and 1 for approx) of the group's block 0. */
static inline double prune_group_u(sdgp_philox_key key, uint64_t group, int word) {
    return sdgp_u01d(sdgp_philox_draw(key, group, 0).v[word]);
}

/* Canonical compressed slots of one group's dense output y[0..m): the nonzero positions
 * (NaN counts as nonzero), padded with the lowest-index zero positions, all in increasing order;
 * value = y at that position. Writes vals[j*stride], idx[j*stride] for j < n.
 * Returns the number of nonzeros (> n means y does not fit; nothing is written then). */
int prune_compress_group(float *vals, uint8_t *idx, int64_t stride, const float *y, int n, int m);

/* ---- kernels (prune_ref.c, prune_avx2.c, prune_avx512.c) ---- */

typedef struct prune_kernels prune_kernels;
typedef struct prune_job prune_job;

/* Shared masks: channels are handled in slices of whole groups of at most PRUNE_BLOCK_SLICE
 * channels (prune_block.c). One block's decision over one slice: */
#define PRUNE_BLOCK_SLICE 512
typedef struct {
    int64_t r0, len, c0, c1;           /* the block's rows, the slice's channels */
    double s2[PRUNE_BLOCK_SLICE];      /* MVUE: sum x^2 per channel */
    int32_t kept[PRUNE_BLOCK_SLICE];   /* per slot of the slice (n per group, increasing): the kept channel */
    uint8_t kidx[PRUNE_BLOCK_SLICE];   /* its index within the group */
    float f[PRUNE_BLOCK_SLICE];        /* its factor: 1, or the rescale factor */
    const float *sc;                   /* rescaled: the block's factors per channel (f[k] = sc[kept[k]]), else NULL */
    double inv[PRUNE_BLOCK_SLICE];     /* MVUE: its 1 / P_i */
} prune_block_slice;

struct prune_job {
    sdgp_prune_fn fn;     /* RANDOM, MAGNITUDE, RESCALED, MVUE, MVUE_APPROX (n < m) */
    sdgp_axis axis;
    int n, m;
    int64_t B, P, C, rows; /* rows = B*P */
    const float *x;       /* rows x C */
    float *out;           /* rows x C or NULL */
    float *vals;          /* compressed values / index (layout of sdgp_nm_tensor) or NULL */
    uint8_t *idx;
    sdgp_philox_key key;
    /* Philox counter of x's first group (channel axis: group 0 of row 0; row axis: group (0, 0)):
     * 0 for sdgp_prune. A caller that prunes a block of rows of a larger tensor sets the block's
     * offset, so the block's randomness is that of the whole tensor (spwino.c). */
    uint64_t group0;
    /* RESCALED: the factor of row r, channel c is scale[(r / P) * scale_bstride + c]
     * (scale_bstride = C for the sample-channel scope, 0 for the channel scope). */
    const float *scale;
    int64_t scale_bstride;
    /* RESCALED, or NULL: ceil(C/16) words per row for rows keep_r0 .. (one sample) where sums()
     * may leave the keep masks of its rows (bit c % 16 of word (r - keep_r0) * ceil(C/16) + c/16)
     * for prune() of the same kernel table: the second pass then skips the ranking. */
    uint16_t *keep;
    int64_t keep_r0;
    /* Shared masks (prune_kernels_block only): rows per block, positions per line (divides P),
     * and the ISA kernels that rank a block's row of summed magnitudes. */
    int block;
    int64_t line;
    const prune_kernels *rank;
    /* Shared masks, or NULL: prune() hands every block's decision to emit (with emit_ctx) instead
     * of writing out / vals / idx; row b->r0 + i's kept value of slot k is x[kept[k]] * f[k]
     * (MVUE: (float)((double)x[kept[k]] * inv[k])). The Winograd-domain kernel makes its
     * micro-kernel entries this way, straight from V (spwino_loops.h). */
    void (*emit)(const prune_job *j, const prune_block_slice *b);
    const void *emit_ctx;
    /* x's and out's layout. The kernels only ever see NHWC rows: sdgp_prune hands NCHW jobs to
     * prune_nchw, which runs them on NHWC tiles. */
    sdgp_layout layout;
};

/* Shared masks: the rows of the block that starts at row r (the rest of the line when shorter than
 * a block), and the first block start at or after row r; blocks tile each line from its start. */
static inline int64_t prune_block_rows(const prune_job *j, int64_t r) {
    const int64_t rest = j->line - r % j->P % j->line;
    return rest < j->block ? rest : j->block;
}
static inline int64_t prune_next_block_start(const prune_job *j, int64_t r) {
    const int64_t off = r % j->P % j->line, k = off % j->block;
    if (!k) return r;
    const int64_t to_block = j->block - k, to_line = j->line - off;
    return r + (to_block < to_line ? to_block : to_line);
}

struct prune_kernels {
    /* Prunes tiles [t0, t1): rows for the channel axis, row groups (m rows each) for the row
     * axis. Returns 1 when a MVUE group held a non-finite value (outputs then unspecified). */
    int (*prune)(const prune_job *j, int64_t t0, int64_t t1);
    /* Rescale pass 1 for sample b: dense[c] = sum_p |x|, kept[c] = sum_p |x| over positions the
     * magnitude rule keeps, both over the P rows of sample b in row order (double). */
    void (*sums)(const prune_job *j, int64_t b, double *dense, double *kept);
    /* Whether prune() runs this table's own kernels for j (0: it hands j to the reference); NULL
     * for the portable tables. prune() decides by it, so sdgp_prune_kernel names what runs. */
    int (*vectorised)(const prune_job *j);
    /* Shared masks (j->block > 1, j->line): sums() of sample b with each block's keep mask ranked on
     * its rows' summed |x| (prune_block.c's decision), bitwise block_sums'; returns 0 for a case it
     * does not take (nothing written). NULL: none (prune_block.c's portable loops run). */
    int (*block_sums)(const prune_job *j, int64_t b, double *dense, double *kept);
    /* Shared masks: prune() of prune_kernels_block (every block that starts in rows [t0, t1), whole,
     * into out and vals/idx), bitwise its; -1 for a case it does not take (nothing written). */
    int (*block_prune)(const prune_job *j, int64_t t0, int64_t t1);
};

extern const prune_kernels prune_kernels_ref;
/* Shared masks (prune_block.c, portable C): prune() takes rows [t0, t1) and prunes every block
 * that starts in that range, whole (so a split at any row is disjoint and complete); sums()
 * leaves no keep masks. keep is never read. */
extern const prune_kernels prune_kernels_block;
/* Row masks shared by channels (prune_rowblock.c, portable C; axis ROW, j->block channels per
 * block, dense output): prune() takes row groups [t0, t1). */
extern const prune_kernels prune_kernels_rowblock;
extern const prune_kernels prune_kernels_avx2;
extern const prune_kernels prune_kernels_avx512;

/* n == m (every function) or fn NONE on rows [r0, r1): a bitwise copy into out, and every
 * position a slot of vals/idx (prune.c). */
void prune_identity_rows(const prune_job *j, int64_t r0, int64_t r1);

/* The kernel table of an ISA path (resolved: not AUTO). */
const prune_kernels *prune_kernels_for(sdgp_isa isa);

/* The rescale factor r = dense / kept of one scope; 1 when the kept sum is zero or negligible
 * against the dense one (kept <= 2^-24 dense: r would blow a stray tiny value up by more than
 * 2^24, even to Inf). A relative guard, unlike the public code's absolute +1e-4, which biases
 * small fp32 gradients. */
static inline float prune_rescale_factor(double dense, double kept) {
    return kept > dense * 0x1p-24 ? (float)(dense / kept) : 1.0f;
}

/* The factors of the rescale scope from per-sample sums (dense, kept: B x C; sample-channel:
 * scale is B x C, channel: C, the samples added in sample order). Returns 0 when a dense sum is
 * not finite (the factors are then unspecified). */
int prune_scope_factors(const double *dense, const double *kept, int64_t B, int64_t C, sdgp_rescale_scope scope, float *scale);

/* SDGP_ERR_NUMERIC naming j->x's first non-finite element (flat index in x's layout and as b, p, c). */
sdgp_status prune_numeric_error(const prune_job *j, const char *fn, sdgp_error *err);

/* sdgp_prune of an NCHW job (prune_nchw.c): K the kernels sdgp_prune would run (NULL: n == m or fn
 * NONE, the identity), isa the path whose transpose moves the tiles. */
sdgp_status prune_nchw(const prune_kernels *K, const prune_job *j, int nt, sdgp_isa isa, sdgp_rescale_scope scope,
                       sdgp_error *err);

/* The AVX-512 random / MVUE kernels (prune_mvue_avx512.c): the prune() contract, or -1 (nothing
 * written) for a case they do not vectorise. */
int prune_avx512_sampled(const prune_job *j, int64_t t0, int64_t t1);
/* Random and MVUE with m = 4 that prune_mvue_avx512.c and prune_mvue_avx2.c vectorise. */
static inline int prune_sampled4_vectorised(const prune_job *j) {
    return j->m == 4 && (j->fn == SDGP_PRUNE_RANDOM || ((j->fn == SDGP_PRUNE_MVUE || j->fn == SDGP_PRUNE_MVUE_APPROX) && j->n <= 2));
}
/* The shapes with m != 4 that prune_avx2_sampled_other vectorises. */
int prune_avx2_sampled_other_vectorised(const prune_job *j);
/* Their AVX2 counterparts, 8 groups at a time (prune_mvue_avx2.c; m != 4 goes on to the next): the
 * same contract. */
int prune_avx2_sampled(const prune_job *j, int64_t t0, int64_t t1);
/* Random and MVUE shapes with m != 4 (prune_sampled_avx2.c; AVX-512 hosts call it too): the same
 * contract. */
int prune_avx2_sampled_other(const prune_job *j, int64_t t0, int64_t t1);

/* The reference implementations, also the fallback of the SIMD paths for the cases they do not
 * specialise. */
int prune_ref_prune(const prune_job *j, int64_t t0, int64_t t1);
void prune_ref_sums(const prune_job *j, int64_t b, double *dense, double *kept);

/* ---- pruning on demand (prune_rows.c) ----
 * A kernel whose packing prunes dL/dO itself (the pruning fused into the packing: one read of dL/dO,
 * no compressed tensor in memory) asks for the slots of rows [r0, r1) from any thread, in any
 * order; they are bitwise what sdgp_prune writes into the compressed form for those rows (same
 * kernel table, Philox counters and rescale factors). Channel axis, NHWC; a mask per row, or masks
 * shared by blocks of rows (cfg->mask_block, along lines of cfg->mask_line positions: sdgp_prune's
 * block table), whose pieces then start and end on line boundaries. */
typedef struct {
    prune_job job;            /* the whole tensor's job (vals, idx unset) */
    const prune_kernels *K;   /* sdgp_prune's table for cfg->isa */
    int identity;             /* fn none or n == m: a copy, every position a slot */
    const char *fn_name;
    float *scale;             /* rescaled: the scope's factors */
    uint16_t *keep;           /* rescaled: every row's keep mask from the first pass */
} prune_rows;
/* Checks cfg and the shape as sdgp_prune does (SDGP_ERR_UNSUPPORTED for the row axis or NCHW);
 * rescaled: runs the first pass (sums, factors; per-row masks: the keep masks, 1/32 of x) on
 * cfg->threads threads, SDGP_ERR_NUMERIC on a non-finite value as sdgp_prune. Free with prune_rows_free. */
sdgp_status prune_rows_init(prune_rows *pr, const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C,
                            sdgp_error *err);
/* Rows [r0, r1)'s slots into vals / idx ((r1 - r0) x C/m*n, the layout of sdgp_nm_tensor); with
 * shared masks r0 and r1 are multiples of job.line (whole lines: whole blocks).
 * Returns 1 when an MVUE group held a non-finite value (prune_rows_check reports it). */
int prune_rows_run(const prune_rows *pr, int64_t r0, int64_t r1, float *vals, uint8_t *idx);
/* SDGP_OK, or sdgp_prune's SDGP_ERR_NUMERIC naming x's first non-finite value when any run returned 1. */
sdgp_status prune_rows_check(const prune_rows *pr, int bad, sdgp_error *err);
void prune_rows_free(prune_rows *pr);
/* Whether pr keeps the n largest |x| of each group (magnitude, or rescaled with its factors in
 * pr->job.scale), n < m: a kernel may rank the rows itself (spconv's prune_entries). */
static inline int prune_rows_ranks_magnitude(const prune_rows *pr) {
    return !pr->identity && (pr->job.fn == SDGP_PRUNE_MAGNITUDE || pr->job.fn == SDGP_PRUNE_RESCALED);
}

#endif
