/* The sparse-weight forward in the Winograd domain: F(2x2,3x3) or F(4x4,3x3) for 3x3 stride-1
 * convolutions with block-masked N:M weights (sdgp_sparse_fwd_create_wino; README.md, section
 * "Sparse-weight forward in the Winograd domain").
 *
 * Y = A^T [ sum_c V[e][t][c] U[e][c][k] ] A per r x r output tile t, V = B^T d B of the tile's
 * (r+2)^2 patch of the padded X, U = G g G^T. A block mask zeroes the whole 3x3 kernel g[k][c] of
 * every pruned (block, input channel) pair, so U[e][c][k] is zero for the same pairs at every
 * element e: the mask survives the transform exactly (unlike a mask of the data gradient,
 * spwino.c), and each element's product is the direct kernel's over the block's kept channels,
 * one "tap" wide. So the GEMM is spfwd's micro-kernel with a 1-tap list; U is made from the direct
 * plan's packed weights; the transforms are spfwd_wino_loops.h (per ISA, the same bits).
 *
 * Loops (outside in): work unit = whole images, about 128 tiles (the OpenMP item; it owns its Y
 * rows, so every thread count gives the same bits); row a of A^T (order 1, 0, 2, ...: row 1 reaches
 * every output row of a tile and stores, so nothing zeroes Y): the unit's r+2 elements (a, bb) are
 * transformed into the thread's buffer; output block: r+2 GEMMs into M_bb (rows x bw), then the
 * output transform's row a adds them into the block's columns of Y. Only one row of V (r+2
 * elements) is held: at 512 channels and 128 tiles, 6 x 256 KB for r = 4. */
#include <omp.h>
#include <stdlib.h>

#include "kernels/spfwd_internal.h"

/* Tiles a work unit aims at. U (at r = 4, 4x the kept weights: 19 MB at 512 channels) streams
 * through once per unit, so units are large, and as few as one per thread: on w1's 8x8 layers at
 * batch 64, units of 32 tiles and at least 4 per thread took 1.3-1.4x the time (README.md).
 * Splitting the output blocks among threads instead saves no U traffic and repeats the transform
 * (measured slower). */
#define UNIT_TILES 128

/* out[0 .. r+1] = G v for one 3-vector v = (v0, v1, v2) of each of bw columns (x + i * stride),
 * with G of F(2x2,3x3) = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]] or of F(4x4,3x3) =
 * [[1/4,0,0],[-1/6,-1/6,-1/6],[-1/6,1/6,-1/6],[1/24,1/12,1/6],[1/24,-1/12,1/6],[0,0,1]], its rows
 * paired (they share their even part): about a third of the multiplies of the matrix product. */
static void g_apply(float *restrict out, int64_t ostride, const float *restrict x, int64_t stride, int r, int bw) {
    const float *restrict x0 = x, *restrict x1 = x + stride, *restrict x2 = x + 2 * stride;
    float *restrict o0 = out, *restrict o1 = out + ostride, *restrict o2 = out + 2 * ostride, *restrict o3 = out + 3 * ostride;
    if (r == 2) {
        for (int c = 0; c < bw; c++) {
            const float e = 0.5f * (x0[c] + x2[c]), o = 0.5f * x1[c];
            o0[c] = x0[c], o1[c] = e + o, o2[c] = e - o, o3[c] = x2[c];
        }
        return;
    }
    float *restrict o4 = out + 4 * ostride, *restrict o5 = out + 5 * ostride;
    for (int c = 0; c < bw; c++) {
        const float e1 = (x0[c] + x2[c]) * (-1.0f / 6), o1v = x1[c] * (1.0f / 6);
        const float e3 = x0[c] * (1.0f / 24) + x2[c] * (1.0f / 6), o3v = x1[c] * (1.0f / 12);
        o0[c] = 0.25f * x0[c], o1[c] = e1 - o1v, o2[c] = e1 + o1v, o3[c] = e3 + o3v, o4[c] = e3 - o3v, o5[c] = x2[c];
    }
}

static int64_t round64(int64_t bytes) { return (bytes + 63) / 64 * 64; }

void spfwd_wino_free(sdgp_sparse_fwd *p) {
    free(p->zrow);
    free(p->up);
    free(p->tbuf);
}

sdgp_status spfwd_wino_plan(sdgp_sparse_fwd *p, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    const int r = p->wtile, alpha = r + 2;
    p->th = (g->Ho + r - 1) / r;
    p->tw = (g->Wo + r - 1) / r;
    p->T = (int64_t)p->th * p->tw;
    int64_t ib = UNIT_TILES / p->T;
    if (ib < 1) ib = 1;
    if (ib > g->B) ib = g->B;
    while (ib > 1 && (g->B + ib - 1) / ib < p->threads) ib = (ib + 1) / 2;
    p->ib = ib;
    const int64_t rows = ib * p->T;
    p->o_m = (size_t)round64(alpha * rows * g->Cin * 4);
    p->tbytes = p->o_m + (size_t)round64(alpha * rows * p->bw * 4);
    const size_t ubytes = (size_t)alpha * alpha * p->nblk * p->K * p->bw * sizeof(float);
    p->zrow = calloc((size_t)g->Cin, sizeof(float));
    if (posix_memalign((void **)&p->up, 64, ubytes)) p->up = NULL;
    if (posix_memalign((void **)&p->tbuf, 64, (size_t)p->threads * p->tbytes)) p->tbuf = NULL;
    if (!p->zrow || !p->up || !p->tbuf)
        return sdgp_fail(err, SDGP_ERR_NOMEM,
                         "sparse-weight forward (Winograd): out of memory for U (%zu MB) and %d x %zu KB of unit buffers",
                         ubytes >> 20, p->threads, p->tbytes >> 10);
    return SDGP_OK;
}

/* U[e][blk][k] = (G g G^T)[e] of each kept channel k of block blk, from the block's 9 packed tap
 * rows per channel (wc: [K][9][bw], rows i*3 + j; the direct pack's, just made by this thread),
 * whole rows of bw output channels at a time: G along i into t[a][j], then along j, straight into
 * U. Each GEMM's panel (element, block) is contiguous: 3-10 % faster than keeping a kept channel's
 * elements together (which makes the packing's writes one stream, but the GEMM's reads strided).
 * Plain C compiled once (baseline ISA): the same bits on every path. */
void spfwd_wino_pack_block(sdgp_sparse_fwd *p, int blk, const float *wc) {
    const int bw = p->bw, K = p->K, r = p->wtile, alpha = r + 2;
    const int64_t es = (int64_t)p->nblk * K * bw; /* floats between elements */
    for (int k = 0; k < K; k++) {
        const float *gk = wc + (int64_t)k * 9 * bw;
        float t[6][3][32];
        for (int j = 0; j < 3; j++) g_apply(&t[0][j][0], 3 * 32, gk + j * bw, 3 * bw, r, bw);
        for (int a = 0; a < alpha; a++)
            g_apply(p->up + a * alpha * es + ((int64_t)blk * K + k) * bw, es, &t[a][0][0], 32, r, bw);
    }
}

/* One work unit: images [b0, b1). */
static void run_unit(const sdgp_sparse_fwd *p, float *y, const float *x, int64_t b0, int64_t b1) {
    const int r = p->wtile, alpha = r + 2, bw = p->bw, nxmax = bw == 32 ? p->k.nx32 : p->k.nx16;
    const int64_t C = p->g.Cin, T = p->T, nimg = b1 - b0, rows = nimg * T;
    unsigned char *tb = p->tbuf + (size_t)omp_get_thread_num() * p->tbytes;
    float *v = (float *)tb, *M = (float *)(tb + p->o_m);
    static const int64_t tap0 = 0;
    for (int ai = 0; ai < alpha; ai++) {
        const int a = ai == 0 ? 1 : ai == 1 ? 0 : ai; /* 1 first: it stores */
        for (int64_t i = 0; i < nimg; i++) p->k.wino_in(p, v + i * T * C, rows * C, x, b0 + i, a);
        for (int blk = 0; blk < p->nblk; blk++) {
            const int co0 = blk * bw, ncols = p->g.Cout - co0 < bw ? p->g.Cout - co0 : bw;
            for (int bb = 0; bb < alpha; bb++) {
                spfwd_tile t = {.tap_off = &tap0,
                                .w = p->up + (((int64_t)(a * alpha + bb) * p->nblk + blk) * p->K) * bw,
                                .w_sk = bw,
                                .tap_w = &tap0,
                                .ntaps = 1,
                                .idx = p->idx + (int64_t)blk * p->K,
                                .K = p->K,
                                .x_sx = C,
                                .y_sx = bw,
                                .ncols = ncols};
                for (int64_t r0 = 0; r0 < rows; r0 += nxmax) {
                    t.nx = (int)(rows - r0 < nxmax ? rows - r0 : nxmax);
                    t.x = v + (bb * rows + r0) * C;
                    t.y = M + (bb * rows + r0) * bw;
                    p->k.tile(&t, bw);
                }
            }
            p->k.wino_out(p, y, M, rows * bw, b0, nimg, a, co0, ncols, ai == 0);
        }
    }
}

void spfwd_wino_run(const sdgp_sparse_fwd *p, float *y, const float *x) {
    const int64_t units = (p->g.B + p->ib - 1) / p->ib;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t u = 0; u < units; u++) {
        const int64_t b0 = u * p->ib, b1 = b0 + p->ib < p->g.B ? b0 + p->ib : p->g.B;
        run_unit(p, y, x, b0, b1);
    }
}
