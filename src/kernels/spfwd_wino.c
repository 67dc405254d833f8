/* The sparse-weight forward in the Winograd domain: F(2x2,3x3) or F(4x4,3x3) for 3x3 stride-1
 * convolutions with block-masked N:M weights (sdgp_sparse_fwd_create_wino; README.md, section
 * "Sparse-weight forward in the Winograd domain"), and the data gradient of the same convolutions
 * (sdgp_sparse_wdata_*, at the end of this file; README.md, "Sparse-weight data gradient").
 *
 * Y = A^T [ sum_c V[e][t][c] U[e][c][k] ] A per r x r output tile t, V = B^T d B of the tile's
 * (r+2)^2 patch of the padded X, U = G g G^T. A block mask zeroes the whole 3x3 kernel g[k][c] of
 * every pruned (block, input channel) pair, so U[e][c][k] is zero for the same pairs at every
 * element e: the mask survives the transform exactly (unlike a mask of the data gradient,
 * spwino.c), and each element's product is the direct kernel's over the block's kept channels,
 * one "tap" wide. So the GEMM is spfwd's micro-kernel with a 1-tap list; U is made from the direct
 * plan's packed weights; the transforms are spfwd_wino_loops.h (per ISA, the same bits).
 *
 * Loops (outside in): work unit = whole images, about 64 or 128 tiles (the OpenMP item; it owns its Y
 * rows, so every thread count gives the same bits); row a of A^T (order 1, 0, 2, ...: row 1 reaches
 * every output row of a tile and stores, so nothing zeroes Y): the unit's r+2 elements (a, bb) are
 * transformed into the thread's buffer; output block: r+2 GEMMs into M_bb (rows x bw), then the
 * output transform's row a adds them into the block's columns of Y. Only one row of V (r+2
 * elements) is held: at 512 channels and 128 tiles, 6 x 256 KB for r = 4. */
#include <omp.h>
#include <stdlib.h>

#include "core/align.h"
#include "core/cache.h"
#include "kernels/spfwd_internal.h"

/* Tiles a work unit aims at. U (at r = 4, 4x the kept weights: 19 MB at 512 channels) streams
 * through once per unit, so units are large, and as few as one per thread: on w1's 8x8 layers at
 * batch 64, units of 32 tiles and at least 4 per thread took 1.3-1.4x the time (README.md).
 * Splitting the output blocks among threads instead saves no U traffic and repeats the transform
 * (measured slower). But the unit's row of V (r+2 elements x tiles x Cin floats) is read once per
 * output block, and its Y rows are read and written r+2 times, so where 3/4 of the L2 (the detected
 * cache, core/cache.h) holds the V of UNIT_TILES_SMALL tiles (on a 512 KB or 1 MB L2: up to 256 input
 * channels at F(4x4), not 512) units are that small. On the Zen 3
 * host (512 KB of L2 per core), dense forward and backward-data, this rule against 128 tiles
 * everywhere (`build/sdgp_kernel_ab dense-fwd|dense-data`, both orders; docs/bench/hosts/amd-zen3-f25m1/
 * wino-unit-tiles.txt): ResNet-9 w0.25's 3x3 layers at batch 512 0.97-1.22x, geometric mean 1.07x;
 * 64 tiles against 128 at w1's 16x16 x 256 layers (batch 64) 1.11-1.28x, at 8x8 x 512 0.86-0.99x
 * (there U's traffic wins: the larger units stay). */
#define UNIT_TILES 128
#define UNIT_TILES_SMALL 64

/* out[0 .. r+1] = G v for one 3-vector v = (v0, v1, v2) of each of bw columns (x + i * stride),
 * with G of F(2x2,3x3) = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]] or of F(4x4,3x3) =
 * [[1/4,0,0],[-1/6,-1/6,-1/6],[-1/6,1/6,-1/6],[1/24,1/12,1/6],[1/24,-1/12,1/6],[0,0,1]], its rows
 * paired (they share their even part): about a third of the multiplies of the matrix product.
 * bw a multiple of 8, in runs of 8 columns: a loop of known length is what GCC's -O2 vectorizes
 * (the variable-length loop ran scalar: 2x the packing time at 512 channels). The same operations
 * either way (no FMA in the baseline ISA), so the same bits. */
static void g_apply(float *restrict out, int64_t ostride, const float *restrict x, int64_t stride, int r, int bw) {
    const float *restrict x0 = x, *restrict x1 = x + stride, *restrict x2 = x + 2 * stride;
    float *restrict o0 = out, *restrict o1 = out + ostride, *restrict o2 = out + 2 * ostride, *restrict o3 = out + 3 * ostride;
    if (r == 2) {
        for (int c0 = 0; c0 < bw; c0 += 8)
            for (int c = c0; c < c0 + 8; c++) {
                const float e = 0.5f * (x0[c] + x2[c]), o = 0.5f * x1[c];
                o0[c] = x0[c], o1[c] = e + o, o2[c] = e - o, o3[c] = x2[c];
            }
        return;
    }
    float *restrict o4 = out + 4 * ostride, *restrict o5 = out + 5 * ostride;
    for (int c0 = 0; c0 < bw; c0 += 8)
        for (int c = c0; c < c0 + 8; c++) {
            const float e1 = (x0[c] + x2[c]) * (-1.0f / 6), o1v = x1[c] * (1.0f / 6);
            const float e3 = x0[c] * (1.0f / 24) + x2[c] * (1.0f / 6), o3v = x1[c] * (1.0f / 12);
            o0[c] = 0.25f * x0[c], o1[c] = e1 - o1v, o2[c] = e1 + o1v, o3[c] = e3 + o3v, o4[c] = e3 - o3v, o5[c] = x2[c];
        }
}

void spfwd_wino_free(sdgp_sparse_fwd *p) {
    free(p->ws.zrow);
    if (!p->u_borrowed) free(p->up);
    free(p->tbuf);
}

size_t spfwd_wino_u_bytes(const sdgp_sparse_fwd *p) {
    const size_t alpha = (size_t)p->wtile + 2;
    return alpha * alpha * p->nblk * p->K * p->bw * sizeof(float);
}

void spfwd_wino_borrow_u(sdgp_sparse_fwd *p, float *u) {
    if (!p->u_borrowed) free(p->up);
    p->up = u;
    p->u_borrowed = 1;
    p->packed = 0;
}

float *spfwd_wino_shape_init(spfwd_wino_shape *s, const sdgp_conv_geom *g, int r, int threads) {
    s->g = *g;
    s->r = r;
    s->th = (g->Ho + r - 1) / r;
    s->tw = (g->Wo + r - 1) / r;
    s->T = (int64_t)s->th * s->tw;
    const int small = (int64_t)(r + 2) * UNIT_TILES_SMALL * g->Cin * (int64_t)sizeof(float) <= sdgp_caches()->l2 / 4 * 3;
    int64_t ib = (small ? UNIT_TILES_SMALL : UNIT_TILES) / s->T;
    if (ib < 1) ib = 1;
    if (ib > g->B) ib = g->B;
    while (ib > 1 && (g->B + ib - 1) / ib < threads) ib = (ib + 1) / 2;
    s->ib = ib;
    s->s2d_in = s->s2d_out = 0;
    s->Hs = s->Ws = 0;
    return s->zrow = calloc((size_t)g->Cin, sizeof(float));
}

void spfwd_wino_shape_s2d(spfwd_wino_shape *s, int in, int out, int Hs, int Ws) {
    s->s2d_in = in;
    s->s2d_out = out;
    s->Hs = Hs;
    s->Ws = Ws;
}

sdgp_status spfwd_wino_plan(sdgp_sparse_fwd *p, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    const int alpha = p->wtile + 2;
    float *zrow = spfwd_wino_shape_init(&p->ws, g, p->wtile, p->threads);
    const int64_t rows = p->ws.ib * p->ws.T;
    p->o_m = sdgp_align64((size_t)(alpha * rows * g->Cin * 4));
    p->tbytes = p->o_m + sdgp_align64((size_t)(alpha * rows * p->bw * 4));
    const size_t ubytes = spfwd_wino_u_bytes(p);
    p->up = sdgp_alloc64(ubytes);
    p->tbuf = sdgp_alloc64((size_t)p->threads * p->tbytes);
    if (!zrow || !p->up || !p->tbuf)
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
    const int64_t C = p->g.Cin, T = p->ws.T, nimg = b1 - b0, rows = nimg * T;
    unsigned char *tb = p->tbuf + (size_t)omp_get_thread_num() * p->tbytes;
    float *v = (float *)tb, *M = (float *)(tb + p->o_m);
    static const int64_t tap0 = 0;
    for (int ai = 0; ai < alpha; ai++) {
        const int a = ai == 0 ? 1 : ai == 1 ? 0 : ai; /* 1 first: it stores */
        for (int64_t i = 0; i < nimg; i++) p->k.wino_in(&p->ws, v + i * T * C, rows * C, C, x, b0 + i, a);
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
            p->k.wino_out(&p->ws, y, M, rows * bw, bw, b0, nimg, a, co0, ncols, ai == 0);
        }
    }
}

void spfwd_wino_run(const sdgp_sparse_fwd *p, float *y, const float *x) {
    const int64_t ib = p->ws.ib, units = (p->g.B + ib - 1) / ib;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t u = 0; u < units; u++) {
        const int64_t b0 = u * ib, b1 = b0 + ib < p->g.B ? b0 + ib : p->g.B;
        run_unit(p, y, x, b0, b1);
    }
}

/* ---- The data gradient (sdgp_sparse_wdata_*): dX = the correlation of dY, padded by 2 - pad,
 * with the rotated, transposed kernels: a 3x3 stride-1 convolution from Cout channels to Cin, run
 * by the same transforms and units as the forward above (spfwd_wino_shape of that transposed
 * geometry). The block mask is now on the GEMM's *reduction* side: block b (bw output channels of
 * the forward, contiguous in V) reaches only its kept input channels. Each element's GEMM is
 * therefore, per chunk of w dX columns, a sum over blocks of a dense bw-long product into the
 * block's compact slots (its kept columns of the chunk, cw of them), which the micro-kernel adds
 * to the chunk's columns in registers (spdata_tile, spfwd_internal.h). ---- */

/* U of the blocks of one GEMM call, [nb][bw][cw]: it stays in L1 while all of the unit's rows pass
 * (4 KB a block at bw = cw = 32). */
#define DATA_PANEL_BYTES (32 << 10)

int sdgp_sparse_wdata_supports(const sdgp_conv_geom *g) { return sdgp_sparse_fwd_wino_supports(g); }

void sdgp_sparse_wdata_destroy(sdgp_sparse_wdata *p) {
    if (!p) return;
    free(p->idx);
    free(p->perm);
    free(p->nz);
    if (!p->u_borrowed) free(p->up);
    free(p->tbuf);
    free(p->ws.zrow);
    free(p);
}

size_t spwdata_u_bytes(const sdgp_sparse_wdata *p) {
    const size_t alpha = (size_t)p->ws.r + 2;
    return alpha * alpha * p->nchunk * p->nblk * p->bw * p->cw * sizeof(float);
}

void spwdata_borrow_u(sdgp_sparse_wdata *p, float *u) {
    if (!p->u_borrowed) free(p->up);
    p->up = u;
    p->u_borrowed = 1;
    p->packed = 0;
}

sdgp_isa sdgp_sparse_wdata_isa(const sdgp_sparse_wdata *p) { return p->k.isa; }

/* The most columns any chunk of w keeps of one block: per group of m overlapping the chunk,
 * at most min(n, overlap). */
static int max_kept_in_chunk(int Cin, int n, int m, int w) {
    int most = 0;
    for (int c0 = 0; c0 < Cin; c0 += w) {
        const int c1 = c0 + w < Cin ? c0 + w : Cin;
        int kept = 0;
        for (int g0 = c0 / m * m; g0 < c1; g0 += m) {
            const int lo = g0 > c0 ? g0 : c0, hi = g0 + m < c1 ? g0 + m : c1;
            kept += hi - lo < n ? hi - lo : n;
        }
        if (kept > most) most = kept;
    }
    return most;
}

sdgp_status sdgp_sparse_wdata_create(sdgp_sparse_wdata **out, const sdgp_conv_geom *g, int n, int m, int block, int tile,
                                     sdgp_isa isa, int threads, sdgp_error *err) {
    const char *who = "sparse-weight data gradient (Winograd)";
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL output", who);
    *out = NULL;
    if (tile != 2 && tile != 4)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: tile %d (Winograd's F(2x2,3x3) or F(4x4,3x3): 2 or 4)", who, tile);
    spfwd_kernels k;
    sdgp_status st = spfwd_check(who, g, n, m, block, tile, isa, threads, &k, err);
    if (st != SDGP_OK) return st;
    sdgp_conv_geom tg; /* dY -> dX: its output is H x W again */
    st = sdgp_conv_geom_init(&tg, g->B, g->Ho, g->Wo, g->Cout, g->Cin, 3, 3, 1, 2 - g->pad, err);
    if (st != SDGP_OK) return st;
    sdgp_sparse_wdata *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", who);
    p->g = *g;
    p->n = n;
    p->m = m;
    p->bw = block;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = k;
    p->K = g->Cin / m * n;
    p->nblk = (g->Cout + block - 1) / block;
    /* chunks of 4 vectors while their kept columns fit 2 vectors of slots (n/m <= 1/2), else 2 */
    p->w = 4 * k.vl;
    int kept = max_kept_in_chunk(g->Cin, n, m, p->w);
    if (kept > 2 * k.vl) kept = max_kept_in_chunk(g->Cin, n, m, p->w = 2 * k.vl);
    p->cw = kept <= k.vl ? k.vl : 2 * k.vl;
    p->nchunk = (g->Cin + p->w - 1) / p->w;
    const int alpha = tile + 2;
    float *zrow = spfwd_wino_shape_init(&p->ws, &tg, tile, p->threads);
    const int64_t rows = p->ws.ib * p->ws.T;
    p->o_m = sdgp_align64((size_t)(alpha * rows * g->Cout * 4));
    p->tbytes = p->o_m + sdgp_align64((size_t)(alpha * rows * p->w * 4));
    const size_t ubytes = spwdata_u_bytes(p);
    p->idx = malloc((size_t)p->nblk * p->K * sizeof *p->idx);
    p->perm = malloc((size_t)p->nchunk * p->nblk * p->w * sizeof *p->perm);
    p->nz = malloc((size_t)p->threads * g->Cin);
    p->up = sdgp_alloc64(ubytes);
    p->tbuf = sdgp_alloc64((size_t)p->threads * p->tbytes);
    if (!zrow || !p->idx || !p->perm || !p->nz || !p->up || !p->tbuf) {
        sdgp_sparse_wdata_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for U (%zu MB) and %d x %zu KB of unit buffers", who,
                         ubytes >> 20, threads ? threads : omp_get_max_threads(), p->tbytes >> 10);
    }
    *out = p;
    return SDGP_OK;
}

/* Block b's U for every chunk: its kept columns of the chunk into slots 0 .. (ascending), perm
 * pointing each column at its slot, and per output channel k of the block the 3x3 kernels of those
 * columns rotated (tap t reads tap 8 - t), G along i, then along j, straight into U. Plain C
 * compiled once: the same bits on every path. */
static void pack_data_block(sdgp_sparse_wdata *p, const float *w, int b) {
    const sdgp_conv_geom *g = &p->g;
    const int bw = p->bw, cw = p->cw, W = p->w, r = p->ws.r, alpha = r + 2;
    const int co0 = b * bw, kn = g->Cout - co0 < bw ? g->Cout - co0 : bw;
    const int64_t es = (int64_t)p->nchunk * p->nblk * bw * cw;
    const int32_t *idx = p->idx + (int64_t)b * p->K;
    for (int ch = 0, j = 0; ch < p->nchunk; ch++) {
        int32_t *perm = p->perm + ((int64_t)ch * p->nblk + b) * W, cols[32];
        int cnt = 0;
        for (int c = 0; c < W; c++) perm[c] = -1;
        for (; j < p->K && idx[j] < (ch + 1) * W; j++) perm[idx[j] - ch * W] = cnt, cols[cnt++] = idx[j];
        for (int k = 0; k < kn; k++) {
            const float *wk = w + (int64_t)(co0 + k) * g->Cin * 9;
            float g9[9][32], t[6][3][32];
            for (int tap = 0; tap < 9; tap++)
                for (int s = 0; s < cw; s++) g9[tap][s] = s < cnt ? wk[(int64_t)cols[s] * 9 + 8 - tap] : 0.0f;
            for (int jj = 0; jj < 3; jj++) g_apply(&t[0][jj][0], 3 * 32, &g9[jj][0], 3 * 32, r, cw);
            for (int a = 0; a < alpha; a++)
                g_apply(p->up + a * alpha * es + (((int64_t)ch * p->nblk + b) * bw + k) * cw, es, &t[a][0][0], 32, r, cw);
        }
    }
}

sdgp_status sdgp_sparse_wdata_pack(sdgp_sparse_wdata *p, const float *w, sdgp_error *err) {
    if (!p || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight data gradient pack: NULL %s", p ? "weights" : "plan");
    int64_t bad = INT64_MAX; /* as sdgp_sparse_fwd_pack */
#pragma omp parallel for schedule(static) num_threads(p->threads) reduction(min : bad)
    for (int b = 0; b < p->nblk; b++) {
        const int th = omp_get_thread_num();
        int r = spfwd_block_keep(&p->g, p->n, p->m, p->bw, w, b, p->nz + (size_t)th * p->g.Cin, p->idx + (int64_t)b * p->K);
        if (r && (int64_t)b * p->g.Cin + r - 1 < bad) bad = (int64_t)b * p->g.Cin + r - 1;
        if (!r) pack_data_block(p, w, b);
    }
    p->packed = bad == INT64_MAX;
    return p->packed ? SDGP_OK : spfwd_pack_failure("sparse-weight data gradient", &p->g, p->n, p->m, p->bw, bad, err);
}

/* One work unit: images [b0, b1) of dX; loops as the forward's run_unit, the output blocks there
 * being chunks of dX columns here, each a sum over all blocks in calls of DATA_PANEL_BYTES of U. */
static void data_unit(const sdgp_sparse_wdata *p, float *dx, const float *dy, int64_t b0, int64_t b1) {
    const spfwd_wino_shape *s = &p->ws;
    const int alpha = s->r + 2, W = p->w, cw = p->cw, bw = p->bw, nblk = p->nblk;
    const int64_t C = s->g.Cin, T = s->T, nimg = b1 - b0, rows = nimg * T;
    const int64_t es = (int64_t)p->nchunk * nblk * bw * cw;
    int gb = DATA_PANEL_BYTES / (bw * cw * 4);
    if (gb < 1) gb = 1;
    unsigned char *tb = p->tbuf + (size_t)omp_get_thread_num() * p->tbytes;
    float *v = (float *)tb, *M = (float *)(tb + p->o_m);
    for (int ai = 0; ai < alpha; ai++) {
        const int a = ai == 0 ? 1 : ai == 1 ? 0 : ai; /* 1 first: it stores */
        for (int64_t i = 0; i < nimg; i++) p->k.wino_in(s, v + i * T * C, rows * C, C, dy, b0 + i, a);
        for (int ch = 0; ch < p->nchunk; ch++) {
            const int ncols = s->g.Cout - ch * W < W ? s->g.Cout - ch * W : W;
            for (int bb = 0; bb < alpha; bb++) {
                const float *ue = p->up + (a * alpha + bb) * es + (int64_t)ch * nblk * bw * cw;
                for (int b = 0; b < nblk; b += gb) {
                    const int nb = nblk - b < gb ? nblk - b : gb;
                    spdata_tile t = {.v = v + bb * rows * C + (int64_t)b * bw,
                                     .v_sx = C,
                                     .u = ue + (int64_t)b * bw * cw,
                                     .perm = p->perm + ((int64_t)ch * nblk + b) * W,
                                     .nb = nb,
                                     .bw = bw,
                                     .last_k = b + nb == nblk ? (int)C - (nblk - 1) * bw : bw,
                                     .nx = (int)rows,
                                     .ncols = ncols,
                                     .acc = b > 0,
                                     .m = M + bb * rows * W,
                                     .m_sx = W};
                    p->k.data_tile(&t, W, cw);
                }
            }
            p->k.wino_out(s, dx, M, rows * W, W, b0, nimg, a, ch * W, ncols, ai == 0);
        }
    }
}

sdgp_status sdgp_sparse_wdata_run(sdgp_sparse_wdata *p, float *dx, const float *dy, sdgp_error *err) {
    if (!p || !dx || !dy)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight data gradient: NULL %s", !p ? "plan" : !dx ? "output" : "input");
    if (!p->packed) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight data gradient: no weights packed");
    const int64_t ib = p->ws.ib, units = (p->g.B + ib - 1) / ib;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t u = 0; u < units; u++) {
        const int64_t b0 = u * ib, b1 = b0 + ib < p->g.B ? b0 + ib : p->g.B;
        data_unit(p, dx, dy, b0, b1);
    }
    return SDGP_OK;
}
