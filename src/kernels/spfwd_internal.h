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

/* The Winograd algorithm's transforms (spfwd_wino_loops.h, compiled per ISA; every path the same
 * bits): row a of B^T d B for image b's tiles (element bb of tile t at v + bb*vstride + t*Cin),
 * and row a of A^T M A into y (M_bb at M + bb*mstride, rows x bw; store or add). */
typedef void (*spfwd_wino_in_fn)(const sdgp_sparse_fwd *p, float *v, int64_t vstride, const float *x, int64_t b, int a);
typedef void (*spfwd_wino_out_fn)(const sdgp_sparse_fwd *p, float *y, const float *M, int64_t mstride, int64_t b0,
                                  int64_t nimg, int a, int co0, int ncols, int store);

/* One ISA's kernel, how many pixels a call takes at each block width, and its transform loops. */
typedef struct {
    sdgp_isa isa;
    spfwd_tile_fn tile;
    int nx16, nx32;
    spfwd_wino_in_fn wino_in;
    spfwd_wino_out_fn wino_out;
} spfwd_kernels;

void spfwd_tile_ref(const spfwd_tile *t, int bw);
void spfwd_tile_avx2(const spfwd_tile *t, int bw);
void spfwd_tile_avx512(const spfwd_tile *t, int bw);
void spfwd_wino_in_ref(const sdgp_sparse_fwd *p, float *v, int64_t vstride, const float *x, int64_t b, int a);
void spfwd_wino_in_avx2(const sdgp_sparse_fwd *p, float *v, int64_t vstride, const float *x, int64_t b, int a);
void spfwd_wino_in_avx512(const sdgp_sparse_fwd *p, float *v, int64_t vstride, const float *x, int64_t b, int a);
void spfwd_wino_out_ref(const sdgp_sparse_fwd *p, float *y, const float *M, int64_t mstride, int64_t b0, int64_t nimg, int a,
                        int co0, int ncols, int store);
void spfwd_wino_out_avx2(const sdgp_sparse_fwd *p, float *y, const float *M, int64_t mstride, int64_t b0, int64_t nimg, int a,
                         int co0, int ncols, int store);
void spfwd_wino_out_avx512(const sdgp_sparse_fwd *p, float *y, const float *M, int64_t mstride, int64_t b0, int64_t nimg,
                           int a, int co0, int ncols, int store);

/* Runs of output rows (columns) with the same valid taps use spconv_run: positions start ..
 * start+count-1 here (stride 1 between them), taps i (j) with bit i set in mask. */

struct sdgp_sparse_fwd {
    sdgp_conv_geom g;
    int n, m, bw, threads;
    spfwd_kernels k;
    int K;              /* kept input channels per block: Cin / m * n */
    int nblk;           /* blocks of output channels: ceil(Cout / bw) */
    int32_t *idx;       /* [nblk][K] kept input channels, ascending within each group of m */
    uint8_t *nz;        /* per thread, Cin bytes: the packing's marks of the inputs a block uses */
    float *wc;          /* [nblk][K][taps][bw] kept weights, 64-byte aligned, zero past Cout (Winograd: one
                         * block per thread, turned into U right away) */
    spconv_run *row_runs, *col_runs;
    int nrow_runs, ncol_runs;
    int64_t band;       /* output rows (over B * Ho) per work unit */
    int packed;
    /* Winograd F(r x r, 3x3) (sdgp_sparse_fwd_create_wino, spfwd_wino.c); wtile = r (2 or 4), 0 direct */
    int wtile;
    int th, tw;            /* output tiles per image along y and x */
    int64_t T;             /* th * tw */
    float *zrow;           /* Cin zeros: patch pixels in the padding */
    float *up;             /* U: [(r+2)^2 elements][nblk][K][bw], the kept rows of G g G^T */
    int64_t ib;            /* images per work unit */
    unsigned char *tbuf;   /* per thread: r+2 V_e (rows x Cin) then r+2 M (rows x bw) */
    size_t tbytes, o_m;
};

/* spfwd_wino.c: the Winograd plan's buffers (on a plan made by the direct create), one block's U
 * from its packed wc, the product, and freeing what the first allocated. */
sdgp_status spfwd_wino_plan(sdgp_sparse_fwd *p, sdgp_error *err);
void spfwd_wino_pack_block(sdgp_sparse_fwd *p, int blk, const float *wc);
void spfwd_wino_run(const sdgp_sparse_fwd *p, float *y, const float *x);
void spfwd_wino_free(sdgp_sparse_fwd *p);

#endif
