/* The sparse weight gradient's rows form (spwgrad_internal.h, spwgrad_rows_tile; README.md, section
 * "Sparse weight gradient"): dW[k][tap][c] += value * x[row's pixel at tap][c] for every kept slot of
 * output channel k, a row-wise product over a zero-padded copy of the input, blocked by 32 input
 * channels (each block's pixels contiguous: see pad_input for why). Threads own ranges of
 * output channels (each dW row has one owner); per run of rows (run_order) a thread turns its channels'
 * slots into entries, then sweeps blocks of 32 input channels (their run of input rows stays in
 * cache) over its channels and the kernel's taps. The sums are the permute form's chains, in the same
 * order: the same bits. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spwgrad_internal.h"

#define ROWS_NV 4 /* vectors of 8 input channels per call */
#define ROWS_NT 3 /* taps of a kernel row per call, and kernel rows per call */
#define ROWS_RUN 128 /* rows per run: its entries are reused by every block of input channels */
#define ROWS_RUN_STRIDED 64 /* the same for strided layers, whose groups of taps go over the channels */

/* The order of a run's work. Channels outer (each channel's entries stay in L1 over all its taps)
 * while the run's input rows fit in L1 too: 128 rows of a stride-1 3x3 layer span 7-13 input rows,
 * 20-30 KB of a block. A strided layer's run spans stride times as many input rows (86 KB for
 * ResNet-9 w0.25's 5x5 stride-2 layer), which every FMA then read from L2. There each group of taps
 * goes over all the thread's channels instead, so the input rows of those taps stay in L1 (a kernel
 * row of a 64-row run: 18-20 KB), and the entries (one load per 12 FMAs) stream from L2. Measured
 * (build/sdgp_nm_wgrad, 2:4, 2 threads, two runs): ResNet-9 w1's 5x5 stride-2 layer 1.43-1.57x ->
 * 1.79-1.96x over oneDNN, w0.25's at batch 512 0.95-1.14x -> 1.05-1.35x, ResNet-18's 3x3 stride-2
 * layers 1.07-1.47x -> 1.58-2.01x; runs of 96 rows measured about the same, 32 or 48 slower. */
static void run_order(sdgp_sparse_wgrad *p) {
    p->taps_outer = p->g.stride > 1;
    p->run_rows = p->taps_outer ? ROWS_RUN_STRIDED : ROWS_RUN;
}

int spwgrad_rows_setup(sdgp_sparse_wgrad *p) {
    const sdgp_conv_geom *g = &p->g;
    p->Hp = g->H + 2 * g->pad;
    p->Wp = g->W + 2 * g->pad;
    p->cinp = (g->Cin + 7) / 8 * 8;
    run_order(p);
    const int64_t pixels = (int64_t)g->B * p->Hp * p->Wp;
    if (pixels > (int64_t)UINT32_MAX) return 0; /* entries hold 32-bit pixel indices: the permute form runs */
    int k0, k1, kmax = 0;
    for (int t = 0; t < p->threads; t++) {
        spwgrad_range(g->Cout, p->threads, t, &k0, &k1);
        if (k1 - k0 > kmax) kmax = k1 - k0;
    }
    p->ent_per_thread = (int64_t)kmax * (p->run_rows / p->m * p->n);
    p->xpad_floats = pixels * p->cinp; /* (64-byte aligned, made at the first run or the caller's) */
    if (posix_memalign((void **)&p->dwr, 64, (size_t)g->Cout * p->taps * p->cinp * sizeof(float))) p->dwr = NULL;
    p->ent = malloc((size_t)p->ent_per_thread * p->threads * sizeof(uint64_t));
    return p->dwr && p->ent;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* Floats per pixel in the padded copy's block of input channels from c0 (a multiple of 32): 32, or
 * the last block's channels rounded up to 8. */
static int block_width(const sdgp_sparse_wgrad *p, int c0) {
    return imin((int)(p->cinp - c0), 8 * ROWS_NV);
}

/* x into the zero-padded copy, blocked: [Cin/32][B][H+2pad][W+2pad][32] (the last block narrower,
 * its lanes past Cin zero). A block's pixels are contiguous because the kernel sweeps one block at a
 * time: in plain NHWC its 128 bytes per pixel would sit Cin*4 bytes apart, on a quarter of L1's sets
 * for Cin = 128, and the run's input rows would no longer stay in L1 (the micro-kernel fell from 4.8
 * to 3.5 G FMAs/s per core at that stride, to 3.0 at Cin = 512). */
static void pad_input(const sdgp_sparse_wgrad *p, const float *x) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t lines = (int64_t)g->B * p->Hp, pixels = lines * p->Wp;
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int64_t l = 0; l < lines; l++) {
        const int h = (int)(l % p->Hp) - g->pad;
        const float *src = h >= 0 && h < g->H ? x + ((l / p->Hp) * g->H + h) * (int64_t)g->W * g->Cin : NULL;
        for (int c0 = 0; c0 < g->Cin; c0 += 8 * ROWS_NV) {
            const int bw = block_width(p, c0), nc = imin(g->Cin - c0, bw);
            float *dst = p->xpad + c0 * pixels + l * p->Wp * bw;
            for (int w = 0; w < p->Wp; w++, dst += bw) {
                const int wi = w - g->pad;
                if (!src || wi < 0 || wi >= g->W) {
                    memset(dst, 0, (size_t)bw * sizeof(float));
                    continue;
                }
                memcpy(dst, src + (int64_t)wi * g->Cin + c0, (size_t)nc * sizeof(float));
                memset(dst + nc, 0, (size_t)(bw - nc) * sizeof(float));
            }
        }
    }
}

/* The padded input's pixel index of each row's pixel at tap (0, 0), for the nr rows from r0: stepped
 * along the image, so that packing an entry is a table look-up, not three 64-bit divisions. */
static void row_offsets(const sdgp_sparse_wgrad *p, int64_t r0, int nr, uint32_t *off) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t HoWo = (int64_t)g->Ho * g->Wo;
    int64_t b = r0 / HoWo;
    int ho = (int)(r0 % HoWo / g->Wo), wo = (int)(r0 % g->Wo);
    for (int r = 0; r < nr; r++) {
        off[r] = (uint32_t)((b * p->Hp + (int64_t)ho * g->stride) * p->Wp + (int64_t)wo * g->stride);
        if (++wo == g->Wo) {
            wo = 0;
            if (++ho == g->Ho) ho = 0, b++;
        }
    }
}

/* Entries of channels k0..k1 for the ns slots from slot row s0 (a run's, whose rows' offsets are
 * rowoff), channel-major, in slot order. Returns the first slot s * Cout + k with index >= m (it takes
 * the group's first row), or INT64_MAX. */
static int64_t pack_entries(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int64_t s0, int ns, int k0, int k1,
                            const uint32_t *rowoff, uint64_t *ent) {
    const int C = p->g.Cout, n = p->n, m = p->m;
    int64_t bad = INT64_MAX;
    for (int s = 0, base = 0; s < ns; base += m)
        for (int j = 0; j < n; j++, s++) {
            const int64_t slot = s0 + s;
            const float *v = dy->values + slot * C;
            const uint8_t *ix = dy->index + slot * C;
            for (int k = k0; k < k1; k++) {
                int i = ix[k];
                if (i >= m) {
                    if (bad == INT64_MAX) bad = slot * C + k;
                    i = 0;
                }
                uint32_t bits;
                memcpy(&bits, &v[k], sizeof bits);
                ent[(int64_t)(k - k0) * ns + s] = (uint64_t)rowoff[base + i] << 32 | bits;
            }
        }
    return bad;
}

static int64_t run_thread(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int t) {
    const sdgp_conv_geom *g = &p->g;
    int k0, k1;
    spwgrad_range(g->Cout, p->threads, t, &k0, &k1);
    if (k0 == k1) return INT64_MAX;
    uint64_t *ent = p->ent + p->ent_per_thread * t;
    const int64_t pixels = (int64_t)g->B * p->Hp * p->Wp;
    int64_t roff[ROWS_NT], bad = INT64_MAX;
    uint32_t rowoff[ROWS_RUN]; /* run_rows <= ROWS_RUN */
    for (int64_t r0 = 0; r0 < p->rows; r0 += p->run_rows) {
        const int nr = (int)(p->rows - r0 < p->run_rows ? p->rows - r0 : p->run_rows), ns = nr / p->m * p->n;
        row_offsets(p, r0, nr, rowoff);
        const int64_t b = pack_entries(p, dy, r0 / p->m * p->n, ns, k0, k1, rowoff, ent);
        if (b < bad) bad = b;
        for (int c0 = 0; c0 < g->Cin; c0 += 8 * ROWS_NV) {
            const int bw = block_width(p, c0), nv = bw / 8;
            /* kernel rows per call: as many as the ISA's accumulators hold (AVX2's 12 ymm: all 3 of
             * a 3x3 kernel for 8 input channels, 2 for 16, 1 for 32; AVX-512: all 3), so that each
             * entry's broadcast feeds more FMAs */
            const int njmax = imin(g->kw, ROWS_NT), nrmax = imin(imin(g->kh, ROWS_NT), p->k.rows_acc / (njmax * nv));
            /* calls: (channel, group of taps) pairs, in the run_order (each sum has one call per run:
             * the order between calls leaves the bits alone) */
            const int gcols = (g->kw + njmax - 1) / njmax, ngroups = (g->kh + nrmax - 1) / nrmax * gcols, nk = k1 - k0;
            for (int q = 0; q < nk * ngroups; q++) {
                const int k = k0 + (p->taps_outer ? q % nk : q / ngroups), tg = p->taps_outer ? q / nk : q % ngroups;
                const int i0 = tg / gcols * nrmax, j0 = tg % gcols * njmax;
                const int nkr = imin(g->kh - i0, nrmax), nj = imin(g->kw - j0, njmax);
                for (int r = 0; r < nkr; r++) roff[r] = (int64_t)(i0 + r) * p->Wp * bw;
                spwgrad_rows_tile tl = {
                    .x = p->xpad + c0 * pixels + (int64_t)j0 * bw,
                    .ent = ent + (int64_t)(k - k0) * ns,
                    .ne = ns,
                    .roff = roff,
                    .nr = nkr,
                    .nj = nj,
                    .nv = nv,
                    .fresh = r0 == 0,
                    .acc = p->dwr + ((int64_t)k * p->taps + i0 * g->kw + j0) * p->cinp + c0,
                    .acc_st = p->cinp,
                    .acc_rs = (int64_t)g->kw * p->cinp,
                };
                p->k.rows(&tl);
            }
        }
    }
    return bad;
}

int64_t spwgrad_rows_run(sdgp_sparse_wgrad *p, float *dw, const float *x, const sdgp_nm_tensor *dy) {
    const sdgp_conv_geom *g = &p->g;
    pad_input(p, x);
    int64_t bad = INT64_MAX;
#pragma omp parallel num_threads(p->threads) reduction(min : bad)
    for (int t = omp_get_thread_num(); t < p->threads; t += omp_get_num_threads()) {
        const int64_t b = run_thread(p, dy, t);
        if (b < bad) bad = b;
    }
    if (bad != INT64_MAX) return bad; /* an error: dW stays as it was */
    /* [Cout][taps][cinp] -> OIHW */
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int co = 0; co < g->Cout; co++)
        for (int ci = 0; ci < g->Cin; ci++)
            for (int tap = 0; tap < p->taps; tap++)
                dw[((int64_t)co * g->Cin + ci) * p->taps + tap] = p->dwr[((int64_t)co * p->taps + tap) * p->cinp + ci];
    return bad;
}
