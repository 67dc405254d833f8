/* The N:M sparse weight gradient (sdgp_sparse_wgrad_*, include/sdgp/sparse.h): plan, packed input
 * and micro-kernel contract. README.md, section "Sparse weight gradient", has the design and the
 * measurements. */
#ifndef SDGP_SPWGRAD_INTERNAL_H
#define SDGP_SPWGRAD_INTERNAL_H

#include <stdint.h>

#include "sdgp/sparse.h"

#define SPWGRAD_RUN 256 /* rows (output positions) per run: the packed input's length */
#define SPWGRAD_MAX_NC 12

/* One micro-kernel call: R vectors of 16 output channels x nc input channels of one tap, over one
 * run of rows (ng groups of m rows; m divides the kernel's block of rows, 16 or 8):
 *
 *   acc[c*acc_sc + 16*v + l] = fma chain, from its value (from 0 when fresh: the first run), over
 *                              slots s < ng*n (in order) of
 *                              val[v*vs + 16*s + l] * xt[c*xt_sc + block(s) + pick[v*vs + 16*s + l]]
 *
 * where slot s = g*n + j belongs to group g, block(s) is the first row of g's block of rows and
 * pick the kept row's place in that block (the plan turns dY's indices into it per run).
 * Output channels sit in the vector lanes; each lane (channel) keeps its own n of every m rows. The
 * packed input xt holds, per input channel, the run's rows contiguously, so one vector load brings
 * the block's rows of an input channel and a lane-wise permute (vpermps) picks, in every lane, the
 * row that channel keeps: one permute and one FMA per kept slot, where a dense product needs m/n
 * FMAs per slot.
 * - Reads: xt columns c < nc (64-byte aligned, rows up to the end of the last group's block, zero past
 *   the run), val/pick vectors v < R, slots s < ng*n (64-byte aligned; each vector's slots one
 *   stream, so that the prefetchers follow it; lanes past the channels hold zero values), acc unless
 *   fresh.
 * - Writes: acc[c*acc_sc + i], c < nc, i < 16*R (64-byte aligned).
 * - R in 1 .. the table's r, nc in 1 .. its nc, m | block, pick < block.
 * - Sum order: one fp32 FMA chain per element, slots in order: every path gives the same bits. */
typedef struct {
    const float *xt;
    int64_t xt_sc;
    const float *val;
    const int32_t *pick;
    int64_t vs;
    int ng, n, m;
    int R, nc, fresh;
    float *acc;
    int64_t acc_sc;
} spwgrad_tile;

typedef void (*spwgrad_tile_fn)(const spwgrad_tile *t);

/* Thread t of T's share of count channels (input channels in the permute form, output channels in
 * the rows form): contiguous ranges, so that every dW element has one owner, its sums the same order
 * for any T, and each thread packs only what it reads. */
static inline void spwgrad_range(int count, int T, int t, int *c0, int *c1) {
    *c0 = (int)((int64_t)count * t / T);
    *c1 = (int)((int64_t)count * (t + 1) / T);
}

/* The rows form (a row-wise product, AVX2's and AVX-512's entries in the table): one output channel k, nr kernel rows
 * x nj taps of each, nv vectors of 8 input channels, over the entries of k's kept slots of one run:
 *
 *   acc[r*acc_rs + j*acc_st + 8*v + l] = fma chain, from its value (from 0 when fresh), over entries
 *       e < ne (in order) of  value(ent[e]) * x[roff[r] + (pixel(ent[e]) + j)*ps + 8*v + l]
 *
 * with ps = 8*nv floats per pixel (one block of the zero-padded input, whose pixels are contiguous:
 * the block's width, so the kernel derives it from nv).
 * An entry is a uint64: the value's bits in the low 32, the index of its row's input pixel at tap
 * (0, 0) in the high 32. Each entry is one broadcast and one multiply; each loaded input
 * vector feeds one FMA, but every loaded value feeds nr*nj*nv of them and the output stays in
 * registers for a whole run: the kernel is bound by loads (one per FMA), not by permutes.
 * - Reads: ent[0 .. ne-1]; x at roff[r] + (pixel + j)*ps + 0 .. ps-1 for every entry (32-byte
 *   aligned: x, roff and ps are multiples of 8 floats); acc unless fresh.
 * - Writes: acc[r*acc_rs + j*acc_st + i], r < nr, j < nj, i < ps.
 * - nr, nj in 1..3, nv in 1..4, nr*nj*nv <= the ISA's rows_acc (spwgrad_kernels: what its
 *   accumulator registers hold; AVX2 12 ymm, AVX-512 every shape: at most 18 zmm).
 * - Sum order: one fp32 FMA chain per element, entries in slot order: the permute form's order, so the
 *   two forms give the same bits. */
typedef struct {
    const float *x;
    const uint64_t *ent;
    int ne;
    const int64_t *roff;
    int nr, nj, nv, fresh;
    float *acc;
    int64_t acc_st, acc_rs;
} spwgrad_rows_tile;

typedef void (*spwgrad_rows_fn)(const spwgrad_rows_tile *t);
void spwgrad_rows_avx2(const spwgrad_rows_tile *t);
void spwgrad_rows_avx512(const spwgrad_rows_tile *t);

/* sdgp_sparse_wgrad_create with the permute form even where the ISA's table has a rows form: on
 * AVX2 and AVX-512 the rows form runs whenever its pixel indices fit 32 bits, so only this reaches
 * their permute micro-kernels in the tests. */
sdgp_status spwgrad_create_permute_form(sdgp_sparse_wgrad **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                        int threads, sdgp_error *err);

/* spwgrad_rows.c: the rows form's buffers but the padded input (0: out of memory, or pixel indices
 * past 32 bits with nothing allocated); dW from x and dY into p->xpad's padded copy, the first bad slot as
 * run_slots says (then dW is not written). */
int spwgrad_rows_setup(sdgp_sparse_wgrad *p);
int64_t spwgrad_rows_run(sdgp_sparse_wgrad *p, float *dw, const float *x, const sdgp_nm_tensor *dy);

/* One ISA's micro-kernel and its blocking: rows per permute (the vector width: 16 or 8), r vectors
 * of 16 output channels x nc input channels per call (what fits the accumulators and the input rows
 * in the register file). The packing is the ISA's gathered-rows transpose (core/transpose.h). */
typedef struct {
    sdgp_isa isa;
    spwgrad_tile_fn tile;
    int block, r, nc;
    spwgrad_rows_fn rows; /* the rows form instead of the permute form (NULL: permute) */
    int rows_acc;         /* the rows form's accumulators, in vectors of 8 floats: nr*nj*nv at most */
    /* where the rows form runs: kernels of at least rows_min_taps taps, strides up to rows_max_stride
     * (0: any); elsewhere the permute form (spwgrad.md: AVX-512's measurements) */
    int rows_min_taps, rows_max_stride;
} spwgrad_kernels;

void spwgrad_tile_ref(const spwgrad_tile *t);
void spwgrad_tile_avx2(const spwgrad_tile *t);
void spwgrad_tile_avx512(const spwgrad_tile *t);

struct sdgp_sparse_wgrad {
    sdgp_conv_geom g;
    int n, m, threads;
    spwgrad_kernels k;
    int64_t rows;         /* B * Ho * Wo */
    int taps;             /* kh * kw */
    int64_t cop;          /* Cout rounded up to 16: a dwt row */
    int64_t xt_sc;        /* floats per packed input channel: SPWGRAD_RUN */
    int64_t vs;           /* floats per vector of 16 channels of a run's values (and picks) */
    float *dwt;           /* [taps][Cin][cop]: the sums, 64-byte aligned */
    float *zrow;          /* Cin zeros: the input of positions in the padding */
    unsigned char *tbuf;  /* per thread: the packed input of its channels, the run's values and picks
                           * ([slots][cop], zero past Cout), its row pointers */
    size_t tbytes, o_val, o_pick, o_rows;
    /* the rows form (k.rows): the zero-padded input in blocks of 32 channels,
     * [cinp/32][B][H+2pad][W+2pad][32] (xpad_floats; the last block narrower; the caller's workspace
     * or xpad_own, made at the first run), the sums [Cout][taps][cinp], per
     * thread the entries of its output channels' slots of a run; run_rows rows per run, and with
     * taps_outer each group of taps goes over all of a thread's channels (spwgrad_rows.c, run_order) */
    float *xpad, *xpad_own, *dwr;
    int64_t xpad_floats;
    int Hp, Wp, run_rows, taps_outer;
    int64_t cinp;
    uint64_t *ent;
    int64_t ent_per_thread;
};

#endif
