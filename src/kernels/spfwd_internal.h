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
 * k outside, taps inside (taps_outer 0): the input values of one kept channel at every tap of the
 * call lie on (nx + kw - 1) x kh cache lines that the next 15 channels read again, so they stay in
 * L1 while the weights stream through. Taps outside (taps_outer 1, for K >= 64: measured faster
 * there, 1.2x on a 5x5 stride-2 layer): each tap's kept rows of the nx pixels, read in channel
 * order, and the tap's weight rows, contiguous in the plan's tap-major layout.
 * - Reads: for every pixel, tap and k one float of x; whole weight rows of bw floats (64-byte
 *   aligned, zero past ncols).
 * - Writes: exactly y[x*y_sx + c], c < ncols (masked), once per pixel; y is overwritten.
 * - nx in 1 .. SPFWD_MAX_NX, ntaps in 0 .. SPFWD_MAX_TAPS (0 writes zeros), bw the plan's block
 *   (16 or 32), ncols in 1 .. bw.
 * - Sum order: one chain per output element, k then taps in order (taps then k with taps_outer),
 *   fp32 FMAs (the vector paths give the same bits for every pixel count of a call). */
typedef struct {
    const float *x;
    const int64_t *tap_off;
    const float *w;        /* the block's weights, [K][taps][bw] */
    int64_t w_sk;          /* floats per kept channel: taps * bw */
    const int64_t *tap_w;  /* per listed tap: its weight row's offset within a channel's, tap * bw */
    int ntaps;
    const int32_t *idx;
    int K, taps_outer;
    int nx;
    int64_t x_sx;
    float *y;
    int64_t y_sx;
    int ncols;
} spfwd_tile;

typedef void (*spfwd_tile_fn)(const spfwd_tile *t, int bw);

/* What the Winograd transforms and work units need of a 3x3 stride-1 convolution g (input Cin
 * channels -> output Cout; for the data gradient the transposed one, dY -> dX, padding 2 - pad):
 * F(r x r, 3x3) output tiles, th x tw per image (T), ib whole images per work unit, zrow Cin zeros
 * that patch pixels in the padding read. */
typedef struct {
    sdgp_conv_geom g;
    int r, th, tw;
    int64_t T, ib;
    float *zrow;
    /* Space-to-depth (a 5x5 stride-2 convolution run as this 3x3 one, conv_sdgp_wino.c): when s2d_in
     * (s2d_out), g's input (output) is the view of an Hs x Ws x C/4 NHWC tensor in which channel
     * ph * C/4 + c of pixel (u, v) is channel c of its pixel (2u + ph/2, 2v + ph%2), zero past Hs, Ws. */
    int s2d_in, s2d_out, Hs, Ws;
} spfwd_wino_shape;

/* The transforms (spfwd_wino_loops.h, compiled per ISA; every path the same bits): row a of
 * B^T d B for image b's tiles (element bb of tile t at v + bb*vstride + t*tstride, tstride >= Cin), and row a of
 * A^T M A into y (M_bb at M + bb*mstride, rows of ldm floats; columns co0 .. co0+ncols-1 of y,
 * ncols <= 64; store or add). */
typedef void (*spfwd_wino_in_fn)(const spfwd_wino_shape *s, float *v, int64_t vstride, int64_t tstride, const float *x,
                                 int64_t b, int a);
typedef void (*spfwd_wino_out_fn)(const spfwd_wino_shape *s, float *y, const float *M, int64_t mstride, int64_t ldm,
                                  int64_t b0, int64_t nimg, int a, int co0, int ncols, int store);

/* One call of the data gradient's GEMM (sdgp_sparse_wdata, spfwd_wino.c): nx rows (tiles) of one
 * Winograd element, one chunk of w output columns (input channels of the forward), blocks b < nb of
 * bw output channels of the forward (the last one has last_k of them):
 *
 *   comp_b[x][s] = sum over k < bw (in order) of v[x*v_sx + b*bw + k] * u[(b*bw + k)*cw + s]
 *   m[x*m_sx + c] = (acc ? m[x*m_sx + c] : 0) + comp_0[x][perm[c]] + comp_1[x][perm[w + c]] + ...
 *
 * comp is one fp32 FMA chain from 0 per slot; it is added (in block order) only to the columns c
 * whose perm entry is a slot (>= 0): each block keeps n of every m columns, packed into its cw
 * compact slots. So the product skips the pruned (block, column) pairs, and the kernel turns the
 * compact sums back into columns in registers (AVX-512: vpermt2ps and a masked add).
 * - Reads: v[x*v_sx + b*bw + k] for k < bw (last block: < last_k); u rows of cw floats (64-byte
 *   aligned); perm[b*w + c] for c < w; m[x*m_sx + c], c < ncols, when acc.
 * - Writes: exactly m[x*m_sx + c] for c < ncols.
 * - w, cw: the plan's (kernel table below); ncols 1 .. w; any nx >= 0 (the kernel splits it).
 * - Every path gives the same bits (the same chains; masked adds only). */
typedef struct {
    const float *v;
    int64_t v_sx;
    const float *u;
    const int32_t *perm;
    int nb, bw, last_k, nx, ncols, acc;
    float *m;
    int64_t m_sx;
} spdata_tile;

typedef void (*spdata_tile_fn)(const spdata_tile *t, int w, int cw);

/* One ISA's kernel, how many pixels a call takes at each block width, and its transform loops. */
typedef struct {
    sdgp_isa isa;
    spfwd_tile_fn tile;
    int nx16, nx32;
    spfwd_wino_in_fn wino_in;
    spfwd_wino_out_fn wino_out;
    spdata_tile_fn data_tile;
    int vl; /* floats per vector of data_tile: its chunk is 4 vectors wide (2 above n/m = 1/2), its slots 1-2 */
} spfwd_kernels;

void spfwd_tile_ref(const spfwd_tile *t, int bw);
void spfwd_tile_avx2(const spfwd_tile *t, int bw);
void spfwd_tile_avx512(const spfwd_tile *t, int bw);
void spfwd_wino_in_ref(const spfwd_wino_shape *s, float *v, int64_t vstride, int64_t tstride, const float *x, int64_t b,
                       int a);
void spfwd_wino_in_avx2(const spfwd_wino_shape *s, float *v, int64_t vstride, int64_t tstride, const float *x, int64_t b,
                        int a);
void spfwd_wino_in_avx512(const spfwd_wino_shape *s, float *v, int64_t vstride, int64_t tstride, const float *x, int64_t b,
                          int a);
void spfwd_wino_out_ref(const spfwd_wino_shape *s, float *y, const float *M, int64_t mstride, int64_t ldm, int64_t b0,
                        int64_t nimg, int a, int co0, int ncols, int store);
void spfwd_wino_out_avx2(const spfwd_wino_shape *s, float *y, const float *M, int64_t mstride, int64_t ldm, int64_t b0,
                        int64_t nimg, int a, int co0, int ncols, int store);
void spfwd_wino_out_avx512(const spfwd_wino_shape *s, float *y, const float *M, int64_t mstride, int64_t ldm, int64_t b0,
                        int64_t nimg, int a, int co0, int ncols, int store);
void spdata_tile_ref(const spdata_tile *t, int w, int cw);
void spdata_tile_avx2(const spdata_tile *t, int w, int cw);
void spdata_tile_avx512(const spdata_tile *t, int w, int cw);

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
    float *wc;          /* [nblk][K][taps][bw] kept weights ([nblk][taps][K][bw] when taps_outer), 64-byte
                         * aligned, zero past Cout (Winograd: one block per thread, turned into U right away) */
    int taps_outer;     /* the direct kernel's loop order (spfwd_tile): taps outside for K >= 64 */
    spconv_run *row_runs, *col_runs;
    int nrow_runs, ncol_runs;
    int64_t band;       /* output rows (over B * Ho) per work unit */
    int packed;
    /* Winograd F(r x r, 3x3) (sdgp_sparse_fwd_create_wino, spfwd_wino.c); wtile = r (2 or 4), 0 direct */
    int wtile;
    spfwd_wino_shape ws;
    float *up;             /* U: [(r+2)^2 elements][nblk][K][bw], the kept rows of G g G^T */
    int u_borrowed;        /* up is the caller's (spfwd_wino_borrow_u) */
    unsigned char *tbuf;   /* per thread: r+2 V_e (rows x Cin) then r+2 M (rows x bw) */
    size_t tbytes, o_m;
    /* masks along output channels (sdgp_sparse_fwd_create_cout, spcout.c): the other fields above
     * but g, n, m, threads, k.isa and packed are unused */
    struct spcout *cout;
};

/* spfwd.c, shared with the data gradient: the arguments' checks (who names the caller in messages)
 * and the ISA's kernels; */
sdgp_status spfwd_check(const char *who, const sdgp_conv_geom *g, int n, int m, int block, int wtile, sdgp_isa isa,
                        int threads, spfwd_kernels *k, sdgp_error *err);
/* block b's kept input channels (idx, K of them, ascending
 * within each group of m; groups with fewer than n nonzero ones padded with zero channels) from W
 * (OIHW, read one output channel at a time; nz_in: Cin bytes of scratch). Returns 0, or 1 + the
 * first input channel of a group holding more than n. spfwd_pack_failure makes the message. */
int spfwd_block_keep(const sdgp_conv_geom *g, int n, int m, int bw, const float *w, int b, uint8_t *nz_in, int32_t *idx);
sdgp_status spfwd_pack_failure(const char *who, const sdgp_conv_geom *g, int n, int m, int bw, int64_t bad, sdgp_error *err);

/* spfwd_wino.c: a Winograd shape for geometry g (its zrow allocated; NULL when out of memory). */
float *spfwd_wino_shape_init(spfwd_wino_shape *s, const sdgp_conv_geom *g, int r, int threads);
/* Makes s's input (in) or output (out) the space-to-depth view of an Hs x Ws tensor (see the struct). */
void spfwd_wino_shape_s2d(spfwd_wino_shape *s, int in, int out, int Hs, int Ws);

/* The data gradient (sdgp_sparse_wdata_*, spfwd_wino.c). */
struct sdgp_sparse_wdata {
    sdgp_conv_geom g;      /* the forward's */
    int n, m, bw, threads;
    spfwd_kernels k;
    spfwd_wino_shape ws;   /* the transposed convolution dY -> dX: Cout input channels, Cin output */
    int K, nblk;           /* kept input channels per block; blocks of bw output channels */
    int w, cw, nchunk;     /* output columns (of Cin) per GEMM call, compact slots per (chunk, block), chunks */
    int32_t *idx;          /* [nblk][K] kept input channels */
    int32_t *perm;         /* [nchunk][nblk][w]: each column's compact slot, -1 where the block prunes it */
    uint8_t *nz;           /* per thread: Cin bytes for spfwd_block_keep */
    float *up;             /* U: [(r+2)^2 elements][nchunk][nblk][bw][cw], G rot(g) G^T of the kept pairs */
    int u_borrowed;        /* up is the caller's (spwdata_borrow_u) */
    unsigned char *tbuf;   /* per thread: r+2 V_e (rows x Cout) then r+2 M (rows x w) */
    size_t tbytes, o_m;
    int packed;
};

/* spfwd_wino.c: the Winograd plan's buffers (on a plan made by the direct create), one block's U
 * from its packed wc, the product, and freeing what the first allocated. */
sdgp_status spfwd_wino_plan(sdgp_sparse_fwd *p, sdgp_error *err);
void spfwd_wino_pack_block(sdgp_sparse_fwd *p, int blk, const float *wc);
void spfwd_wino_run(const sdgp_sparse_fwd *p, float *y, const float *x);
void spfwd_wino_free(sdgp_sparse_fwd *p);

/* For sdgp_conv's Winograd passes (src/nn/conv_sdgp_wino.c), which pack the weights before every
 * run: U in the caller's buffer (64-byte aligned, at least u_bytes, for the rest of the plan's life)
 * in place of the plan's own, so that the layers of a model share one buffer (U of the dense
 * product is 38 MB at 512 -> 512 channels). The plan holds no weights until its next pack. */
size_t spfwd_wino_u_bytes(const sdgp_sparse_fwd *p);
void spfwd_wino_borrow_u(sdgp_sparse_fwd *p, float *u);
size_t spwdata_u_bytes(const sdgp_sparse_wdata *p);
void spwdata_borrow_u(sdgp_sparse_wdata *p, float *u);

/* spcout.c: the cout form's pack, product (y, x NHWC) and freeing. */
struct spcout;
sdgp_status spcout_pack(sdgp_sparse_fwd *p, const float *w, sdgp_error *err);
sdgp_status spcout_run(const sdgp_sparse_fwd *p, float *y, const float *x, sdgp_error *err);
void spcout_free(struct spcout *c);

#endif
