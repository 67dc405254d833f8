/* The N:M sparse-weight forward convolution (sdgp_sparse_fwd_*, include/sdgp/sparse.h): plan,
 * packed layout and micro-kernel contract. README.md, section "Sparse-weight forward", has the
 * design and the measurements. */
#ifndef SDGP_SPFWD_INTERNAL_H
#define SDGP_SPFWD_INTERNAL_H

#include <stdint.h>

#include "kernels/spconv_internal.h"
#include "sdgp/sparse.h"

#define SPFWD_MAX_TAPS 64 /* kh * kw of one call: the taps valid for a run of pixels */
#define SPFWD_MAX_NX 12   /* pixels per micro-kernel call */

/* One micro-kernel call: nx output pixels of one row, one block of bw output channels.
 *
 *   y[x*y_sx + c] = sum over k < K (in order), taps t (list order) of
 *                   x[x*x_sx + tap_off[t] + idx[k]] * w[k*w_sk + tap_w[t] + c]         for c < ncols
 *
 * k outside, taps inside: the input values of one kept channel at every tap of the call lie on
 * (nx + kw - 1) x kh cache lines that the next 15 channels read again, so they stay in L1 while the
 * weights stream through.
 * - Reads: for every pixel, tap and k one float of x; whole weight rows of bw floats (64-byte
 *   aligned, zero past ncols).
 * - Writes: exactly y[x*y_sx + c], c < ncols (masked), once per pixel; y is overwritten.
 * - nx in 1 .. SPFWD_MAX_NX, ntaps in 0 .. SPFWD_MAX_TAPS (0 writes zeros), bw the plan's block
 *   (16 or 32), ncols in 1 .. bw.
 * - Sum order: one chain per output element, k then taps in order, fp32 FMAs (the vector paths
 *   give the same bits for every pixel count of a call). */
typedef struct {
    const float *x;
    const int64_t *tap_off;
    const float *w;        /* the block's weights, [K][taps][bw] */
    int64_t w_sk;          /* floats per kept channel: taps * bw */
    const int64_t *tap_w;  /* per listed tap: its weight row's offset within a channel's, tap * bw */
    int ntaps;
    const int32_t *idx;
    int K;
    int nx;
    int64_t x_sx;
    float *y;
    int64_t y_sx;
    int ncols;
} spfwd_tile;

typedef void (*spfwd_tile_fn)(const spfwd_tile *t, int bw);

/* One ISA's kernel and how many pixels a call takes at each block width. */
typedef struct {
    sdgp_isa isa;
    spfwd_tile_fn tile;
    int nx16, nx32;
} spfwd_kernels;

void spfwd_tile_ref(const spfwd_tile *t, int bw);
void spfwd_tile_avx2(const spfwd_tile *t, int bw);
void spfwd_tile_avx512(const spfwd_tile *t, int bw);

/* Runs of output rows (columns) with the same valid taps use spconv_run: positions start ..
 * start+count-1 here (stride 1 between them), taps i (j) with bit i set in mask. */

struct sdgp_sparse_fwd {
    sdgp_conv_geom g;
    int n, m, bw, threads;
    spfwd_kernels k;
    int K;              /* kept input channels per block: Cin / m * n */
    int nblk;           /* blocks of output channels: ceil(Cout / bw) */
    int32_t *idx;       /* [nblk][K] kept input channels, ascending within each group of m */
    float *wc;          /* [nblk][K][taps][bw] kept weights, 64-byte aligned, zero past Cout */
    spconv_run *row_runs, *col_runs;
    int nrow_runs, ncol_runs;
    int64_t band;       /* output rows (over B * Ho) per work unit */
    int packed;
};

#endif
