/* The N:M sparse-weight forward convolution: plan, packing of the block-masked weights, work
 * units and threading (the micro-kernels: spfwd_<isa>.c; design: README.md). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "kernels/spfwd_internal.h"

static const spfwd_kernels kernel_table[SDGP_ISA_COUNT] = {
    /* pixels per call: AVX-512 12 x 2 zmm accumulators at bw 32 (+ 2 weight vectors and a
     * broadcast in 32 registers); AVX2 6 x 2 ymm of 16 (a block of 32 in two halves) */
    [SDGP_ISA_REF] = {.isa = SDGP_ISA_REF, .tile = spfwd_tile_ref, .nx16 = 12, .nx32 = 12, .wino_in = spfwd_wino_in_ref,
                      .wino_out = spfwd_wino_out_ref, .data_tile = spdata_tile_ref, .vl = 16},
    [SDGP_ISA_AVX2] = {.isa = SDGP_ISA_AVX2, .tile = spfwd_tile_avx2, .nx16 = 6, .nx32 = 6, .wino_in = spfwd_wino_in_avx2,
                       .wino_out = spfwd_wino_out_avx2, .data_tile = spdata_tile_avx2, .vl = 8},
    [SDGP_ISA_AVX512] = {.isa = SDGP_ISA_AVX512, .tile = spfwd_tile_avx512, .nx16 = 12, .nx32 = 12, .wino_in = spfwd_wino_in_avx512,
                         .wino_out = spfwd_wino_out_avx512, .data_tile = spdata_tile_avx512, .vl = 16},
};

/* Output pixels per work unit: the unit's input rows and outputs stay in L2 next to one block's
 * weights (at most 9 x 256 x 32 floats = 288 KiB at Cin 512). */
#define SPFWD_UNIT_PX 256

/* Runs of output positions o < out with the same valid taps: tap i is valid when the source
 * position o*stride + i - pad lies in [0, in). */
static int make_runs(spconv_run *runs, int out, int in, int k, int stride, int pad) {
    int nr = 0;
    for (int o = 0; o < out; o++) {
        uint64_t mask = 0;
        for (int i = 0; i < k; i++) {
            int src = o * stride + i - pad;
            if (src >= 0 && src < in) mask |= 1ull << i;
        }
        if (nr && runs[nr - 1].mask == mask) runs[nr - 1].count++;
        else runs[nr++] = (spconv_run){o, 1, mask};
    }
    return nr;
}

void sdgp_sparse_fwd_destroy(sdgp_sparse_fwd *p) {
    if (!p) return;
    free(p->idx);
    free(p->wc);
    free(p->nz);
    free(p->row_runs);
    free(p->col_runs);
    spfwd_wino_free(p);
    spcout_free(p->cout);
    free(p);
}

sdgp_isa sdgp_sparse_fwd_isa(const sdgp_sparse_fwd *p) { return p->k.isa; }

sdgp_status spfwd_check(const char *who, const sdgp_conv_geom *g, int n, int m, int block, int wtile, sdgp_isa isa,
                        int threads, spfwd_kernels *k, sdgp_error *err) {
    sdgp_status st = sparse_check_geometry(who, g, n, m, err);
    if (st != SDGP_OK) return st;
    if (g->groups > 1) return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s: grouped convolutions (groups=%d)", who, g->groups);
    if (g->Cin % m) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: Cin=%d is not a multiple of m=%d", who, g->Cin, m);
    if (block != 16 && block != 32)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: block=%d output channels per mask (16 or 32)", who, block);
    if (g->kh > 64 || g->kw > 64 || g->kh * g->kw > SPFWD_MAX_TAPS)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s: %dx%d kernel (at most %d taps)", who, g->kh, g->kw, SPFWD_MAX_TAPS);
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: threads=%d < 0", who, threads);
    if (wtile && wtile != 2 && wtile != 4)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: tile %d (Winograd's F(2x2,3x3) or F(4x4,3x3): 2 or 4)", who, wtile);
    if (wtile && !sdgp_sparse_fwd_wino_supports(g))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s: needs a 3x3 kernel, stride 1 and padding 0-2 (got %dx%d, stride %d, pad %d)",
                         who, g->kh, g->kw, g->stride, g->pad);
    sdgp_isa resolved;
    st = sdgp_isa_resolve(isa, &resolved, err);
    if (st == SDGP_OK) *k = kernel_table[resolved];
    return st;
}

/* wtile: 0 the direct algorithm, 2 or 4 Winograd's F(wtile x wtile, 3x3) */
static sdgp_status create_plan(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, int block, int wtile, sdgp_isa isa,
                               int threads, sdgp_error *err) {
    const char *who = wtile ? "sparse-weight forward (Winograd)" : "sparse-weight forward";
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL output", who);
    *out = NULL;
    spfwd_kernels k;
    sdgp_status st = spfwd_check(who, g, n, m, block, wtile, isa, threads, &k, err);
    if (st != SDGP_OK) return st;

    sdgp_sparse_fwd *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", who);
    p->g = *g;
    p->n = n;
    p->m = m;
    p->bw = block;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = k;
    p->K = g->Cin / m * n;
    p->nblk = (g->Cout + block - 1) / block;
    size_t taps = (size_t)g->kh * g->kw;
    p->idx = malloc((size_t)p->nblk * p->K * sizeof *p->idx);
    p->row_runs = malloc((size_t)g->Ho * sizeof *p->row_runs);
    p->col_runs = malloc((size_t)g->Wo * sizeof *p->col_runs);
    /* the Winograd plan turns each block's wc into U at once: one block per thread is enough */
    const size_t wc_blocks = wtile ? (size_t)p->threads : (size_t)p->nblk;
    p->wc = sdgp_alloc64(wc_blocks * taps * p->K * block * sizeof(float));
    p->nz = malloc((size_t)p->threads * g->Cin);
    if (!p->idx || !p->wc || !p->nz || !p->row_runs || !p->col_runs) {
        sdgp_sparse_fwd_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for the packed weights (%zu MB)", who,
                         (size_t)p->nblk * taps * p->K * block * sizeof(float) >> 20);
    }
    p->nrow_runs = make_runs(p->row_runs, g->Ho, g->H, g->kh, g->stride, g->pad);
    p->ncol_runs = make_runs(p->col_runs, g->Wo, g->W, g->kw, g->stride, g->pad);
    p->band = SPFWD_UNIT_PX / g->Wo > 0 ? SPFWD_UNIT_PX / g->Wo : 1;
    p->wtile = wtile;
    p->taps_outer = !wtile && p->K >= 64; /* the Winograd packing reads wc channel-major */
    if (wtile && (st = spfwd_wino_plan(p, err)) != SDGP_OK) {
        sdgp_sparse_fwd_destroy(p);
        return st;
    }
    *out = p;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_fwd_create(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, int block, sdgp_isa isa,
                                   int threads, sdgp_error *err) {
    return create_plan(out, g, n, m, block, 0, isa, threads, err);
}

int sdgp_sparse_fwd_wino_supports(const sdgp_conv_geom *g) {
    return g && g->kh == 3 && g->kw == 3 && g->stride == 1 && g->pad >= 0 && g->pad <= 2 && g->groups <= 1;
}

sdgp_status sdgp_sparse_fwd_create_wino(sdgp_sparse_fwd **out, const sdgp_conv_geom *g, int n, int m, int block, int tile,
                                        sdgp_isa isa, int threads, sdgp_error *err) {
    return create_plan(out, g, n, m, block, tile, isa, threads, err);
}

int spfwd_block_keep(const sdgp_conv_geom *g, int n, int m, int bw, const float *w, int b, uint8_t *nz_in, int32_t *idx) {
    const int taps = g->kh * g->kw, co0 = b * bw, co1 = co0 + bw < g->Cout ? co0 + bw : g->Cout;
    const int64_t row = (int64_t)g->Cin * taps;
    memset(nz_in, 0, (size_t)g->Cin);
    for (int co = co0; co < co1; co++) {
        const float *wr = w + co * row;
        for (int c = 0; c < g->Cin; c++) {
            int any = 0;
            for (int t = 0; t < taps; t++) any |= wr[c * taps + t] != 0.0f;
            nz_in[c] |= (uint8_t)any;
        }
    }
    for (int g0 = 0, k = 0; g0 < g->Cin; g0 += m) {
        int nz[SDGP_NM_MAX_M], z[SDGP_NM_MAX_M], nnz = 0, nzero = 0;
        for (int i = 0; i < m; i++) {
            if (nz_in[g0 + i]) nz[nnz++] = g0 + i;
            else z[nzero++] = g0 + i;
        }
        if (nnz > n) return g0 + 1;
        /* ascending channel order inside the group: the kept ones and the padding merged */
        for (int a = 0, c = 0; a + c < n;) {
            int take_nz = a < nnz && (c >= n - nnz || nz[a] < z[c]);
            idx[k++] = take_nz ? nz[a++] : z[c++];
        }
    }
    return 0;
}

sdgp_status spfwd_pack_failure(const char *who, const sdgp_conv_geom *g, int n, int m, int bw, int64_t bad, sdgp_error *err) {
    int bad_block = (int)(bad / g->Cin), bad_group = (int)(bad % g->Cin);
    int co1 = (bad_block + 1) * bw < g->Cout ? (bad_block + 1) * bw : g->Cout;
    return sdgp_fail(err, SDGP_ERR_INVALID,
                     "%s pack: output channels %d-%d keep more than %d of input channels %d-%d "
                     "(the weights are not %d:%d per block of %d output channels)",
                     who, bad_block * bw, co1 - 1, n, bad_group, bad_group + m - 1, n, m, bw);
}

/* Block b's kept channels and weights (into wc, K x taps x bw, zero past Cout). */
static int pack_block(sdgp_sparse_fwd *p, const float *w, int b, uint8_t *nz_in, float *wc) {
    const sdgp_conv_geom *g = &p->g;
    const int taps = g->kh * g->kw, bw = p->bw, co0 = b * bw;
    const int co1 = co0 + bw < g->Cout ? co0 + bw : g->Cout;
    const int64_t row = (int64_t)g->Cin * taps;
    int32_t *idx = p->idx + (size_t)b * p->K;
    const int bad = spfwd_block_keep(g, p->n, p->m, bw, w, b, nz_in, idx);
    if (bad) return bad;
    if (co1 - co0 < bw) memset(wc, 0, (size_t)taps * p->K * bw * sizeof(float));
    for (int co = co0; co < co1; co++) {
        const float *wr = w + co * row;
        for (int k = 0; k < p->K; k++)
            for (int t = 0; t < taps; t++) {
                const size_t at = p->taps_outer ? (size_t)t * p->K + k : (size_t)k * taps + t;
                wc[at * bw + (co - co0)] = wr[(int64_t)idx[k] * taps + t];
            }
    }
    return 0;
}

sdgp_status sdgp_sparse_fwd_pack(sdgp_sparse_fwd *p, const float *w, sdgp_error *err) {
    if (!p || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight forward pack: NULL %s", p ? "weights" : "plan");
    if (p->cout) return spcout_pack(p, w, err);
    /* the first bad (block, group), as block * Cin + group: the same message for any thread count */
    int64_t bad = INT64_MAX;
#pragma omp parallel for schedule(static) num_threads(p->threads) reduction(min : bad)
    for (int b = 0; b < p->nblk; b++) {
        const int th = omp_get_thread_num();
        const size_t bsize = (size_t)p->g.kh * p->g.kw * p->K * p->bw;
        float *wc = p->wc + (p->wtile ? (size_t)th : (size_t)b) * bsize;
        int r = pack_block(p, w, b, p->nz + (size_t)th * p->g.Cin, wc);
        if (r && (int64_t)b * p->g.Cin + r - 1 < bad) bad = (int64_t)b * p->g.Cin + r - 1;
        if (!r && p->wtile) spfwd_wino_pack_block(p, b, wc);
    }
    p->packed = bad == INT64_MAX;
    return p->packed ? SDGP_OK : spfwd_pack_failure("sparse-weight forward", &p->g, p->n, p->m, p->bw, bad, err);
}

/* One work unit: output rows r0 .. r1-1 (of B*Ho) for block b. */
static void run_unit(const sdgp_sparse_fwd *p, float *y, const float *x, int b, int64_t r0, int64_t r1) {
    const sdgp_conv_geom *g = &p->g;
    const int bw = p->bw, taps = g->kh * g->kw, nxmax = bw == 32 ? p->k.nx32 : p->k.nx16;
    const int co0 = b * bw, ncols = g->Cout - co0 < bw ? g->Cout - co0 : bw;
    const float *wc = p->wc + (size_t)b * taps * p->K * bw;
    const int32_t *idx = p->idx + (size_t)b * p->K;
    int64_t tap_off[SPFWD_MAX_TAPS];
    int64_t tap_w[SPFWD_MAX_TAPS];
    int rr = 0; /* the row run of the current row: rows ascend within a unit, runs restart per image */
    for (int64_t r = r0; r < r1; r++) {
        const int64_t img = r / g->Ho;
        const int ho = (int)(r % g->Ho);
        if (r == r0 || ho == 0) rr = 0;
        while (ho >= p->row_runs[rr].start + p->row_runs[rr].count) rr++;
        const uint64_t rmask = p->row_runs[rr].mask;
        for (int cr = 0; cr < p->ncol_runs; cr++) {
            const spconv_run *run = &p->col_runs[cr];
            int nt = 0;
            for (int i = 0; i < g->kh; i++) {
                if (!(rmask >> i & 1)) continue;
                for (int j = 0; j < g->kw; j++) {
                    if (!(run->mask >> j & 1)) continue;
                    tap_off[nt] = ((int64_t)(i - g->pad) * g->W + (j - g->pad)) * g->Cin;
                    tap_w[nt++] = (int64_t)(i * g->kw + j) * (p->taps_outer ? p->K : 1) * bw;
                }
            }
            for (int wo = run->start; wo < run->start + run->count; wo += nxmax) {
                int nx = run->start + run->count - wo < nxmax ? run->start + run->count - wo : nxmax;
                spfwd_tile t = {
                    .x = x + ((img * g->H + (int64_t)ho * g->stride) * g->W + (int64_t)wo * g->stride) * g->Cin,
                    .tap_off = tap_off,
                    .w = wc,
                    .w_sk = p->taps_outer ? bw : (int64_t)taps * bw,
                    .tap_w = tap_w,
                    .ntaps = nt,
                    .idx = idx,
                    .K = p->K,
                    .taps_outer = p->taps_outer,
                    .nx = nx,
                    .x_sx = (int64_t)g->stride * g->Cin,
                    .y = y + ((img * g->Ho + ho) * g->Wo + wo) * (int64_t)g->Cout + co0,
                    .y_sx = g->Cout,
                    .ncols = ncols,
                };
                p->k.tile(&t, bw);
            }
        }
    }
}

sdgp_status sdgp_sparse_fwd_run(sdgp_sparse_fwd *p, float *y, const float *x, sdgp_error *err) {
    if (!p || !y || !x) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight forward: NULL %s", !p ? "plan" : !y ? "output" : "input");
    if (!p->packed) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse-weight forward: no weights packed");
    if (p->cout) return spcout_run(p, y, x, err);
    if (p->wtile) {
        spfwd_wino_run(p, y, x);
        return SDGP_OK;
    }
    const int64_t rows = (int64_t)p->g.B * p->g.Ho, bands = (rows + p->band - 1) / p->band;
    const int64_t units = bands * p->nblk;
    /* block-major: consecutive units of a thread share a block's weights in L2 */
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t u = 0; u < units; u++) {
        int b = (int)(u / bands);
        int64_t r0 = u % bands * p->band, r1 = r0 + p->band < rows ? r0 + p->band : rows;
        run_unit(p, y, x, b, r0, r1);
    }
    return SDGP_OK;
}
