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
#define SPCOUT_TW 3     /* output columns per tile */
#define SPCOUT_VL 8     /* images per vector (the layout's innermost dimension) */
#define SPCOUT_XCOL 16  /* floats from one input column of Xt to the next: a pair of image vectors side by side */

/* One micro-kernel call: one group of m output channels over one chunk of input channels, for a
 * tile of J output columns x 2 vectors of 8 images, at convolution stride S (1 or 2). The chunk's
 * entries are sorted by subset: those of subset s (run[s] .. run[s+1]-1) feed the n = K rows whose
 * bits are set in sub_bits[s]:
 *
 *   y[i*ldr + j*8 + v*yb + l] (+)= sum over the entries q of every subset holding row i (subsets
 *                                  in order, entries in order) of w_q[r(i)] * x[off_q + j*S*16 + v*8 + l]
 *
 * for the group's rows i < m, j < J, v < 2, l < 8, where r(i) is row i's rank in its subset. An
 * entry is 1 + K floats: off_q (an int32's bits: the input vector of an (input channel, tap), floats
 * from x) then the weights of the K rows. Input columns are SPCOUT_XCOL (16) floats apart. With
 * `first`, the tile's y starts from zero (a chunk's first call), else the chains continue from y's
 * values. One fp32 FMA chain per output element
 * (so every path gives the same bits).
 * - Reads: x at off_q + j*S*SPCOUT_XCOL + v*SPCOUT_VL (32-byte aligned vectors); y's tile (unless first).
 * - Writes: exactly y's tile: m rows x J columns x 2 vectors.
 * - K 1 .. SPCOUT_MAX_N, J 1 .. SPCOUT_TW, m <= SPCOUT_MAX_M, S 1 or 2 (the AVX2 kernel has both as
 *   constants: a column step in a register would cost the stride-1 loop its immediate offsets). The
 *   AVX2 kernel keeps K * J * NB <= 12 accumulators in registers per subset: both image vectors at
 *   once (NB 2) for K <= 2, else one after the other. */
typedef struct {
    const float *x;
    const float *e;
    const int32_t *run;
    const uint8_t *sub_bits;
    int nsub;
    float *y;
    int64_t ldr, yb;
    int m, K, J, S, first;
} spcout_tile;

typedef void (*spcout_tile_fn)(const spcout_tile *t);

void spcout_tile_ref(const spcout_tile *t);
void spcout_tile_avx2(const spcout_tile *t);

/* The cout form's part of a sdgp_sparse_fwd plan (spcout.c). Layouts, with B16 = B rounded up to
 * 16 and nbv = B16 / 8 vectors of images:
 *   Xt [nbv/2][Cin][H + 2 pad][W + 2 pad][2][8]  the input, transposed, zero padding (and images >= B);
 *                                           a tile's pair of image vectors side by side, one cache line
 *                                           per pixel; rows ldrow (Wp pixels) and channel planes
 *                                           plane_x floats apart: a line more if the padded image is
 *                                           an even number of lines (L1 sets)
 *   Ytile [threads][2][Cout][SPCOUT_TW][8]  per thread, one tile's output (2 vectors of images x Cout
 *                                           x its columns), transposed to NHWC as soon as it is done
 * Entries per (group of m output channels, chunk of input channels): sorted by the subset of the
 * group that keeps them (subsets of n rows, ascending bit masks), one (input channel, tap) each. */
typedef struct spcout {
    int n, m, groups, chunk, chunks, nsub, es; /* chunk: input channels per chunk; es: floats per entry, 1 + n */
    int nbv, Hp, Wp;
    int64_t ldrow, plane_x;             /* floats per padded row and per channel of Xt */
    int64_t ytile;                      /* floats of one thread's Ytile */
    uint8_t sub_bits[128];              /* subset index -> bit mask (C(8,4) = 70 at most) */
    int16_t sub_index[256];             /* bit mask -> subset index, -1 if it has not n bits */
    int32_t tap_off[SPFWD_MAX_TAPS];    /* tap -> its input vector's offset in a channel plane of Xt */
    float *Xt, *Ytile;                  /* in the workspace: the caller's (set_workspace) or own */
    void *own;                          /* the plan's own workspace, made at its first run */
    size_t xt_bytes, ws_bytes;          /* Xt's share (64-byte multiple), Xt + Ytile */
    float *ent;                         /* [groups][chunks][(chunk's channels) * taps][es] */
    int32_t *run;                       /* [groups][chunks][nsub + 1]: each subset's entries, from the chunk's first */
    uint8_t *scratch;                   /* per thread: a chunk's entries' subset indices */
    spcout_tile_fn tile;
} spcout;

#endif
