/* The sparse-weight forward for weights with N:M masks along *output* channels (--weight-groups
 * cout, sdgp_sparse_fwd_create_cout in include/sdgp/sparse.h): plan, layout and micro-kernel
 * contract. README.md, section "The cout form", has the design and the measurements. */
#ifndef SDGP_SPCOUT_INTERNAL_H
#define SDGP_SPCOUT_INTERNAL_H

#include <stdint.h>

#include "kernels/spfwd_internal.h" /* SPFWD_MAX_TAPS */
#include "sdgp/sparse.h"

#define SPCOUT_MAX_N 4  /* kept output channels per group: the rows of one micro-kernel loop */
#define SPCOUT_MAX_M 8  /* a group's output channels: subsets fit a byte */
#define SPCOUT_CHUNK 32 /* input channels per chunk (at most): their rows of a tile stay in L1 across the groups */
#define SPCOUT_TW 3     /* output columns per tile of the AVX2 and ref kernels (and of the chunks' L1 rule) */
#define SPCOUT_TW_MAX 8 /* the most output columns any ISA's tile takes (spcout_kernel.tw) */
#define SPCOUT_VL 8     /* images per vector (the layout's innermost dimension) */
#define SPCOUT_XCOL 16  /* floats from one input column of Xt to the next: a pair of image vectors side by side */

/* One micro-kernel call: one group of m output channels over one chunk of input channels, for a
 * tile of J output columns x 2 vectors of 8 images, at convolution stride S (1 or 2). The chunk's
 * entries are sorted by subset: those of subset s (run[s] .. run[s+1]-1) feed the n = K rows whose
 * bits are set in sub_bits[s]:
 *
 *   y[i*ldr + j*yc + v*yb + l] (+)= sum over the entries q of every subset holding row i (subsets
 *                                   in order, entries in order) of w_q[r(i)] * x[off_q + j*S*16 + v*8 + l]
 *
 * for the group's rows i < m, j < J, v < 2, l < 8, where r(i) is row i's rank in its subset. An
 * entry is 1 + K floats: off_q (an int32's bits: the input vector of an (input channel, tap), floats
 * from x) then the weights of the K rows. Input columns are SPCOUT_XCOL (16) floats apart. With
 * `first`, the tile's y starts from zero (a chunk's first call), else the chains continue from y's
 * values. One fp32 FMA chain per output element (so every path gives the same bits; a kernel may
 * interleave the loops of subsets that share no row, as each chain keeps its order).
 * - Reads: x at off_q + j*S*SPCOUT_XCOL + v*SPCOUT_VL (32-byte aligned vectors); y's tile (unless first).
 * - Writes: exactly y's tile: m rows x J columns x 2 vectors.
 * - K 1 .. SPCOUT_MAX_N, J 1 .. the ISA's tw[K] (spcout_kernel), m <= SPCOUT_MAX_M, S 1 or 2 (the vector
 *   kernels have both as constants: a column step in a register would cost the stride-1 loop its
 *   immediate offsets).
 * - y's layout is the ISA's (spcout_kernel.pair): the AVX2 and ref kernels take any yc and yb (the
 *   plan gives them yc 8, yb = Cout*ldr: the two image vectors in planes of their own); the AVX-512
 *   kernel takes yc 16, yb 8 only (the two vectors side by side: one zmm per row and column, as in x).
 * - The AVX2 kernel keeps K * J * NB <= 12 ymm accumulators per subset: both image vectors at once
 *   (NB 2) for K <= 2, else one after the other. The AVX-512 kernel keeps K * J zmm (spcout_avx512.c). */
typedef struct {
    const float *x;
    const float *e;
    const int32_t *run;
    const uint8_t *sub_bits;
    int nsub;
    float *y;
    int64_t ldr, yc, yb;
    int m, K, J, S, first;
} spcout_tile;

typedef void (*spcout_tile_fn)(const spcout_tile *t);

void spcout_tile_ref(const spcout_tile *t);
void spcout_tile_avx2(const spcout_tile *t);
void spcout_tile_avx512(const spcout_tile *t);

/* One ISA's micro-kernel and its blocking: the output columns of a tile at n kept rows (tw[n] <=
 * SPCOUT_TW_MAX, what its accumulators hold) and Ytile's layout (pair: a tile's two image vectors
 * side by side). Neither changes the bits: the chunks (the sum order) do not depend on them. */
typedef struct {
    sdgp_isa isa;
    spcout_tile_fn tile;
    int tw[SPCOUT_MAX_N + 1];
    int pair;
} spcout_kernel;

/* The cout form's part of a sdgp_sparse_fwd plan (spcout.c). Layouts, with B16 = B rounded up to
 * 16 and nbv = B16 / 8 vectors of images:
 *   Xt [nbv/2][Cin][H + 2 pad][W + 2 pad][2][8]  the input, transposed, zero padding (and images >= B);
 *                                           a tile's pair of image vectors side by side, one cache line
 *                                           per pixel; rows ldrow (Wp pixels) and channel planes
 *                                           plane_x floats apart: a line more if the padded image is
 *                                           an even number of lines (L1 sets)
 *   Ytile [threads][2][Cout][tw][8]         per thread, one tile's output (2 vectors of images x Cout
 *                                           x its columns), transposed to NHWC as soon as it is done;
 *                                           with the kernel's `pair`, [threads][Cout][tw][2][8]
 * Entries per (group of m output channels, chunk of input channels): sorted by the subset of the
 * group that keeps them (subsets of n rows, ascending bit masks), one (input channel, tap) each. */
typedef struct spcout {
    int n, m, groups, chunk, chunks, nsub, es; /* chunk: input channels per chunk; es: floats per entry, 1 + n */
    int nbv, Hp, Wp, tw;                /* tw: output columns per tile (the kernel's tw[n]) */
    int64_t ldrow, plane_x;             /* floats per padded row and per channel of Xt */
    int64_t ytile;                      /* floats of one thread's Ytile */
    int64_t ldr, yc, yb;                /* Ytile's strides: channel, column, image vector (spcout_tile) */
    uint8_t sub_bits[128];              /* subset index -> bit mask (C(8,4) = 70 at most) */
    int16_t sub_index[256];             /* bit mask -> subset index, -1 if it has not n bits */
    int32_t tap_off[SPFWD_MAX_TAPS];    /* tap -> its input vector's offset in a channel plane of Xt */
    float *Xt, *Ytile;                  /* in the workspace: the caller's (set_workspace) or own */
    void *own;                          /* the plan's own workspace, made at its first run */
    size_t xt_bytes, ws_bytes;          /* Xt's share (64-byte multiple), Xt + Ytile */
    float *ent;                         /* [groups][chunks][(chunk's channels) * taps][es] */
    int32_t *run;                       /* [groups][chunks][nsub + 1]: each subset's entries, from the chunk's first */
    uint8_t *scratch;                   /* per thread: a chunk's entries' subset indices */
    spcout_kernel k;
} spcout;

#endif
