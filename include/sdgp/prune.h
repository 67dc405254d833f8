/* sdgp: N:M structured pruning of gradient tensors.
 *
 * A float32 tensor is viewed as B x P x C (NHWC: B samples, P = H*W positions each, C channels
 * contiguous); rows = B*P. For every group of m consecutive values along the pruning axis, at
 * most n stay nonzero:
 *   SDGP_AXIS_CHANNEL: a group is m consecutive channels of one row (SDGP: for the data-gradient
 *                      GEMM, which reduces over channels). Requires C % m == 0.
 *   SDGP_AXIS_ROW:     a group is m consecutive rows of one channel (MVUE: for the weight-gradient
 *                      GEMM, which reduces over rows). Requires rows % m == 0; a group may span
 *                      two samples when P % m != 0.
 * Limits: 1 <= n <= m <= SDGP_NM_MAX_M. n == m is the identity (a bitwise copy, every function).
 *
 * Functions (a_i = |x_i| of a group):
 *   random      a uniformly random n-subset (partial Fisher-Yates, unbiased integer draws by
 *               rejection), values unscaled.
 *   magnitude   the n largest a_i; ties go to the lower index.
 *   rescaled    magnitude, then kept values times r = sum|x| / sum|magnitude-pruned x| per scope
 *               (cfg->scope; the same scopes on the ROW axis). Sums in double, per sample in row
 *               order, then over samples in sample order (independent of threads and ISA).
 *               r = 1 when the kept sum is <= 2^-24 times the dense sum (zero, or a scope pruned
 *               to almost nothing: no NaN, no huge r). Kept values are x * (float)r.
 *   mvue        unbiased (E[out] = x) with minimum variance: keep i with probability
 *               P_i = min(1, c a_i), sum P_i = n, writing x_i / P_i. 1:2 and 2:4 by the closed
 *               forms (2:4: sorted a1 <= .. <= a4, equal values in index order; case C keeps x4
 *               unchanged), other n:m by water-filling + systematic sampling in index order with
 *               one uniform. Groups with at most n nonzeros are kept as they are (all zero: zeros).
 *   mvue-approx 2:4 only: i1 drawn with probability a_i / S, i2 with a_j / (S - a_i1) among the
 *               rest; kept values x_i / p_i with the true inclusion probability p_i
 *               (Horvitz-Thompson, unbiased). At most 2 nonzeros: kept as they are.
 * MVUE arithmetic is in double, rounded once to float; the sampler's probabilities are exact up
 * to the 2^-32 resolution of its uniform. A value overflows to +-Inf only when |x| is within a
 * factor 2m of FLT_MAX.
 *
 * Randomness (random, mvue, mvue-approx) is Philox4x32-10 keyed by (seed, step, layer) with the
 * group index as counter: the result is bitwise the same for any thread count and every ISA.
 * Group index: axis CHANNEL, group g of row r -> r*(C/m) + g; axis ROW, rows g*m..g*m+m-1 of
 * channel c -> g*C + c. A group uses the words of its draw blocks 0, 1, ... in order.
 * Deterministic functions (magnitude, rescaled) are bitwise equal across ISA paths too.
 *
 * Shared masks (cfg->mask_block = K > 1, channel axis only; README "mask blocks"): the P positions of
 * a sample form lines of cfg->mask_line consecutive positions (0: one line of P; P % mask_line == 0),
 * and each line splits into blocks of K consecutive positions (the last block of a line may be
 * shorter). All rows of a block keep the same n channels of every group, so a kernel can load
 * each kept weight row once for the whole block. With s_i = the block's values of channel i:
 *   random      one random n-subset per block (the Philox group of the block's first row);
 *   magnitude   the n largest sum_r |s_i[r]| (float, row order); ties to the lower index, NaN first;
 *   rescaled    that mask, then the factors of the scope computed from it;
 *   mvue        P_i = min(1, c a_i), sum P_i = n, with a_i = ||s_i||_2 (the probabilities that
 *               minimise the block's summed variance sum_i ||s_i||^2 (1/P_i - 1)), one systematic
 *               sample per block (the uniform of its first row's group), kept x / P_i; a block
 *               with at most n nonzero channels in a group keeps them as they are. Unbiased.
 *   mvue-approx is not defined for blocks (SDGP_ERR_INVALID).
 * The compressed form stores the block's kept set for every row of the block (a kept value may
 * be 0), not the canonical padding of each row: rows of a block have equal indices.
 * On the row axis, mask_block = Q > 1 shares row masks between channels instead: Q consecutive
 * channels (C % Q == 0) keep the same n of every m consecutive rows, for a weight-gradient kernel
 * that loads each kept input row once for Q output channels. random: one n-subset per (row group,
 * block) (the Philox group of the block's first channel); magnitude: the n largest sums over the
 * block of |x| (float, channel order); mvue: as above with a_i = the L2 norm of the block's row i,
 * kept x / P_i, unbiased. Dense output only (a compressed one is SDGP_ERR_UNSUPPORTED), portable C.
 * Kernels: a portable reference, AVX2 and AVX-512 paths chosen by sdgp_isa_resolve(cfg->isa)
 * (so SDGP_ISA=ref|avx2|avx512 lowers AUTO). Vectorised: magnitude and rescaled on both axes
 * (channel axis: m | 8 on AVX2, every m on AVX-512); on AVX-512 also random n:4, mvue 1:4 and
 * 2:4, mvue-approx 2:4. The rest runs the reference per group inside the same threads.
 * Threads: each call runs an OpenMP team of cfg->threads (0 = OpenMP's default).
 * NaN/Inf input: magnitude ranks NaN above every number (it is kept; NaNs tie with each other);
 * values are copied as they are. Random copies whatever it keeps. MVUE, mvue-approx and rescaled
 * magnitude (n < m) with a non-finite value anywhere in x return SDGP_ERR_NUMERIC naming the
 * first such index (flat in x's layout, and as b, p, c), and leave outputs unspecified (but in bounds). */
#ifndef SDGP_PRUNE_H
#define SDGP_PRUNE_H

#include <stddef.h>
#include <stdint.h>

#include "sdgp/export.h"
#include "sdgp/isa.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SDGP_NM_MAX_M 64
/* The largest cfg->mask_block. */
#define SDGP_MASK_BLOCK_MAX 64

typedef enum {
    SDGP_PRUNE_NONE = 0,       /* copy: no pruning */
    SDGP_PRUNE_RANDOM,         /* n uniformly random positions per group, unscaled (paper) */
    SDGP_PRUNE_MAGNITUDE,      /* n largest |x|; ties: lower index wins */
    SDGP_PRUNE_RESCALED,       /* magnitude, then scale kept values to keep the L1 norm per scope */
    SDGP_PRUNE_MVUE,           /* exact minimum-variance unbiased: closed form 1:2 and 2:4,
                                  water-filling + systematic sampling for any other n:m */
    SDGP_PRUNE_MVUE_APPROX,    /* 2:4 only: two draws without replacement, Horvitz-Thompson */
    SDGP_PRUNE_COUNT
} sdgp_prune_fn;

typedef enum { SDGP_AXIS_CHANNEL = 0, SDGP_AXIS_ROW = 1 } sdgp_axis;

typedef enum {
    SDGP_SCOPE_SAMPLE_CHANNEL = 0, /* one scale per (b, c) over the P positions (public code) */
    SDGP_SCOPE_CHANNEL = 1         /* one scale per c over all B*P rows (paper's text) */
} sdgp_rescale_scope;

/* Layout of sdgp_prune's x and dense out (cfg->layout). NHWC: B x P x C as above. NCHW: B x C x P
 * (PyTorch's default memory format), read in place: the result (out in NCHW, nm, factors, Philox
 * counters, shared masks) is bitwise what pruning the NHWC copy of x gives; rows, groups and
 * positions keep their NHWC meaning (row r = b*P + p), and the compressed form is the same. The
 * channel axis only (SDGP_ERR_UNSUPPORTED otherwise). Each thread transposes a tile of positions
 * (whole lines for mask_block > 1, whole samples for rescaled: its scopes need a sample's sums
 * first) into a buffer of its own, prunes it there and transposes the dense result back: about
 * 16 KiB per thread, P x C floats (twice with out) for rescaled. */
typedef enum { SDGP_LAYOUT_NHWC = 0, SDGP_LAYOUT_NCHW = 1 } sdgp_layout;

typedef struct {
    sdgp_prune_fn fn;
    int n, m;
    sdgp_axis axis;
    sdgp_rescale_scope scope; /* rescaled only */
    uint64_t seed;            /* random functions: key = (seed, step, layer) */
    uint64_t step;
    uint32_t layer;
    sdgp_isa isa;             /* SDGP_ISA_AUTO: see sdgp_isa_resolve() */
    int threads;              /* 0: OpenMP default */
    int mask_block;           /* rows sharing one mask (channel axis), channels sharing one row mask (row axis): 0 or 1 = no sharing */
    int64_t mask_line;        /* positions of a line that blocks do not cross; 0 = all P */
    sdgp_layout layout;       /* of x and out: NHWC (the default) or NCHW (above) */
} sdgp_prune_cfg;

/* A default config: fn, n, m as given, channel axis, sample-channel scope, seed 0, AUTO ISA, a
 * mask per row (mask_block 1), NHWC layout. */
SDGP_API sdgp_prune_cfg sdgp_prune_cfg_make(sdgp_prune_fn fn, int n, int m);

/* Names used by the CLI and JSON: "none", "random", "magnitude", "rescaled", "mvue", "mvue-approx". */
SDGP_API const char *sdgp_prune_fn_name(sdgp_prune_fn fn);
SDGP_API sdgp_status sdgp_prune_fn_parse(const char *name, sdgp_prune_fn *out, sdgp_error *err);
/* Parses "N:M" with the limits above; the message names the text. */
SDGP_API sdgp_status sdgp_nm_parse(const char *text, int *n, int *m, sdgp_error *err);

/* The compressed N:M form consumed by the sparse kernels. Every group stores exactly n
 * (value, index) slots, kept positions in increasing index order; a group with fewer than n
 * nonzeros pads with its lowest-index zero positions (value = the dense value there, +-0.0; still
 * increasing, all < m), so strides are fixed. This is a function of the dense pruned group alone
 * (NaN counts as nonzero): sdgp_prune's nm equals sdgp_nm_compress of its dense output, bitwise
 * (with mask_block > 1: see above).
 * For n == m every position is a slot (values = x).
 *   axis CHANNEL: values/index are rows x (C/m*n), row-major; index[r*(C/m*n) + g*n + j] in
 *                 [0, m) is the offset of the kept channel within group g, i.e. channel g*m+index.
 *   axis ROW:     values/index are (rows/m*n) x C, row-major; slot row (g*n + j), column c holds
 *                 row g*m + index of channel c.
 * The buffers are owned by the caller or by sdgp_nm_alloc(). */
typedef struct {
    sdgp_axis axis;
    int n, m;
    int64_t rows, C;     /* the dense shape: rows = B*P */
    float *values;
    uint8_t *index;
} sdgp_nm_tensor;

/* Number of stored slots: rows*C/m*n. */
SDGP_API size_t sdgp_nm_slots(const sdgp_nm_tensor *t);
/* Allocates values and index (64-byte aligned) for the given shape; validates n, m, divisibility
 * and overflow. Free with sdgp_nm_free (a zeroed struct is safe to free). */
SDGP_API sdgp_status sdgp_nm_alloc(sdgp_nm_tensor *t, sdgp_axis axis, int n, int m, int64_t rows, int64_t C,
                                   sdgp_error *err);
SDGP_API void sdgp_nm_free(sdgp_nm_tensor *t);

/* Checks that n, m, B, P, C fit the axis and the limits; the message names what is wrong. */
SDGP_API sdgp_status sdgp_prune_check(const sdgp_prune_cfg *cfg, int64_t B, int64_t P, int64_t C, sdgp_error *err);

/* Prunes x (B x P x C, not modified; B x C x P with cfg->layout NCHW) with cfg.
 *   out   (nullable): dense pruned tensor in x's layout; must not alias x.
 *   nm    (nullable): compressed form; must have been sdgp_nm_alloc'ed (or set up) with the same
 *                     axis, n, m, rows = B*P, C.
 * At least one of out, nm is non-NULL. Writes nothing else; allocates only for rescaled: the
 * scope sums and factors (20 B x C bytes; sample-channel scope on the channel axis: 20 C bytes
 * plus P x C / 8 bytes of keep masks per thread; channel scope on the channel axis: also one keep
 * mask per row, rows x C / 8 bytes, about 1/32 of x), and for the NCHW layout its per-thread tiles.
 * fn NONE (and any fn with n == m) is a bitwise copy; NONE with nm requires n == m.
 * Errors: SDGP_ERR_INVALID (shape, n:m, NULL, overlap, nm of another shape), SDGP_ERR_UNSUPPORTED
 * (mvue-approx other than 2:4 / n == m, an ISA this CPU lacks, NCHW on the row axis), SDGP_ERR_NUMERIC (above),
 * SDGP_ERR_NOMEM. */
SDGP_API sdgp_status sdgp_prune(const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C,
                                float *out, sdgp_nm_tensor *nm, sdgp_error *err);

/* Which kernels sdgp_prune runs for cfg on this CPU (cfg->isa resolved, SDGP_ISA honoured): "avx512"
 * or "avx2" (that ISA's vector kernels), "ref" (the portable reference: cfg->isa ref, or a shape the
 * ISA's kernels do not take, e.g. mvue 3:4 or m > 32 for random and MVUE), "block" / "rowblock"
 * (shared masks, cfg->mask_block > 1: portable C), "copy" (fn none or n == m), or "?" when the ISA
 * does not resolve (sdgp_prune then fails with the reason). A static string. */
SDGP_API const char *sdgp_prune_kernel(const sdgp_prune_cfg *cfg);

/* Compressed -> dense (rows x C), zeros elsewhere. Equals sdgp_prune's dense output (a -0.0 that
 * random/MVUE wrote at a position not stored may come back as +0.0). SDGP_ERR_INVALID names a
 * slot whose index is >= m. Runs on OpenMP's default team. */
SDGP_API sdgp_status sdgp_nm_decompress(const sdgp_nm_tensor *nm, float *out, sdgp_error *err);

/* Dense -> compressed, keeping the nonzeros of a tensor that already has at most n nonzeros per
 * group (SDGP_ERR_INVALID naming the group otherwise). Runs on OpenMP's default team. */
SDGP_API sdgp_status sdgp_nm_compress(const float *x, sdgp_nm_tensor *nm, sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
