/* The N:M sparse backward-data convolution: plan, blocking (the macro-kernel) and threading.
 *
 * dD[b, h, w, :] = sum over taps (i, j) and kept entries (k, v) of the dO pixel (ho, wo) with
 * h = ho*s - pad + i, w = wo*s - pad + j, of v * W_tap[k, :]   (W_tap[k][c] = w[k][c][i][j]).
 * This is an implicit GEMM over the taps: for each tap the compressed dO rows (reused for every
 * tap, no im2col) multiply the packed tap panel and land on shifted dD rows. Taps whose pixel
 * falls outside the image are skipped by clipping the pixel ranges, never by padded buffers.
 *
 * Loops (outside in), see README.md for why:
 *   work unit   = (images b0..b1, dD rows h0..h1, column block nb): owns dD[b, h0:h1, :, nb cols],
 *                 which it zeroes and then accumulates while it stays in L2 (tile_px pixels);
 *                 units are the OpenMP work items, so threads never write the same memory.
 *   chunk       = kc output channels: the panel W_tap[chunk rows][ncols] (~20 KiB) stays in L1;
 *   tap         = (i, j), the only part of the panel address that changes between calls;
 *   micro-kernel= all pixels of the unit that the tap reaches: a 2D block per image.
 * Every dD element receives its contributions in the same (chunk, tap, entry) order whatever the
 * units and the thread count: the result is bitwise independent of threads. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spconv_internal.h"

static const spconv_kernels kernel_table[SDGP_ISA_COUNT] = {
    [SDGP_ISA_REF] = {SDGP_ISA_REF, 64, spconv_tile_ref},
    [SDGP_ISA_AVX2] = {SDGP_ISA_AVX2, 32, spconv_tile_avx2},
    [SDGP_ISA_AVX512] = {SDGP_ISA_AVX512, 128, spconv_tile_avx512},
};

/* Blocking targets (bytes): the panel chunk shares L1 (32-48 KiB) with the streamed dD rows and
 * dO entries; the unit's dD block shares L2 (1-2 MiB) with panels and dO. */
#define SPCONV_PANEL_BYTES (20 * 1024)
#define SPCONV_UNIT_BYTES (256 * 1024)
#define SPCONV_NR_DEFAULT 64

static int64_t round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }
static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

static void *alloc64(size_t bytes) {
    void *p = NULL;
    if (posix_memalign(&p, 64, bytes ? bytes : 64)) return NULL;
    return p;
}

static sdgp_status plan_layout(sdgp_sparse_bwd *p, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    p->nblocks = (int)((g->Cin + p->blk.nr - 1) / p->blk.nr);
    p->ldp = round_up(p->blk.nr < g->Cin ? p->blk.nr : g->Cin, SPCONV_LDP_ALIGN);
    free(p->wp);
    p->packed = 0;
    p->wp_floats = (size_t)p->nblocks * g->kh * g->kw * g->Cout * (size_t)p->ldp;
    p->wp = alloc64(p->wp_floats * sizeof(float));
    if (!p->wp)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd: out of memory for %zu packed weight floats", p->wp_floats);
    memset(p->wp, 0, p->wp_floats * sizeof(float)); /* page faults here, not in the first pack */
    return SDGP_OK;
}

sdgp_status spconv_set_blocking(sdgp_sparse_bwd *p, const spconv_blocking *b, sdgp_error *err) {
    if (!p || !b) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: NULL argument");
    if (b->nr < 1 || b->nr > p->k.nr)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: nr=%d outside [1, %d] for the %s kernel", b->nr, p->k.nr,
                         sdgp_isa_name(p->k.isa));
    if (b->kc < p->m || b->kc % p->m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: kc=%d must be a positive multiple of m=%d", b->kc, p->m);
    if (b->tile_px < 1 || b->order < 0 || b->order > 1)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: tile_px=%lld / order=%d invalid", (long long)b->tile_px,
                         b->order);
    int relayout = b->nr != p->blk.nr;
    p->blk = *b;
    if (p->blk.kc > p->g.Cout) p->blk.kc = p->g.Cout;
    return relayout ? plan_layout(p, err) : SDGP_OK;
}

sdgp_status sdgp_sparse_bwd_create(sdgp_sparse_bwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                   int threads, sdgp_error *err) {
    if (!out || !g) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_create: NULL %s", out ? "geometry" : "output");
    *out = NULL;
    sdgp_conv_geom chk;
    sdgp_status st = sdgp_conv_geom_init(&chk, g->B, g->H, g->W, g->Cin, g->Cout, g->kh, g->kw, g->stride, g->pad, err);
    if (st != SDGP_OK) return st;
    if (chk.Ho != g->Ho || chk.Wo != g->Wo)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_create: output %dx%d does not match the geometry (%dx%d)", g->Ho,
                         g->Wo, chk.Ho, chk.Wo);
    if (m < 1 || m > SDGP_NM_MAX_M || n < 1 || n > m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_create: %d:%d is not an N:M pattern (1 <= n <= m <= %d)", n, m,
                         SDGP_NM_MAX_M);
    if (g->Cout % m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_create: Cout=%d is not a multiple of m=%d", g->Cout, m);
    if (g->Cout > 65535)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "sparse_bwd_create: Cout=%d > 65535 (16-bit channel index)", g->Cout);
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_create: threads=%d < 0", threads);
    sdgp_isa resolved;
    if ((st = sdgp_isa_resolve(isa, &resolved, err)) != SDGP_OK) return st;

    sdgp_sparse_bwd *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_create: out of memory");
    p->g = *g;
    p->n = n;
    p->m = m;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = kernel_table[resolved];
    p->slots = (int64_t)g->Cout / m * n;

    /* Default blocking: widest column block the kernel takes (no wider than Cin rounded to a
     * vector), a panel chunk of ~SPCONV_PANEL_BYTES in whole groups, units of ~SPCONV_UNIT_BYTES. */
    int64_t nr = round_up(g->Cin, SPCONV_LDP_ALIGN);
    if (nr > SPCONV_NR_DEFAULT) nr = SPCONV_NR_DEFAULT;
    if (nr > p->k.nr) nr = p->k.nr;
    /* Equal chunks (whole groups) no larger than the panel budget: a short last chunk would run
     * the micro-kernel with few entries per pixel, where its fixed cost per pixel dominates. */
    const int64_t rows = SPCONV_PANEL_BYTES / (round_up(nr, SPCONV_LDP_ALIGN) * 4), groups = g->Cout / m;
    int64_t per = rows / m < 1 ? 1 : rows / m;             /* groups per chunk at most */
    const int64_t nchunks = (groups + per - 1) / per;
    const int64_t kc = (groups + nchunks - 1) / nchunks * m;
    p->blk = (spconv_blocking){.nr = (int)nr, .kc = (int)kc, .tile_px = SPCONV_UNIT_BYTES / (round_up(nr, SPCONV_LDP_ALIGN) * 4),
                               .order = 0};
    if ((st = plan_layout(p, err)) != SDGP_OK) {
        sdgp_sparse_bwd_destroy(p);
        return st;
    }
    size_t ebytes = (size_t)g->B * g->Ho * g->Wo * (size_t)p->slots * sizeof(spconv_entry);
    p->ent = alloc64(ebytes);
    p->slot_base = alloc64((size_t)p->slots * sizeof(int32_t));
    if (!p->ent || !p->slot_base) {
        sdgp_sparse_bwd_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_create: out of memory for %zu entry bytes", ebytes);
    }
    for (int64_t s = 0; s < p->slots; s++) p->slot_base[s] = (int32_t)(s / n * m);
    *out = p;
    return SDGP_OK;
}

void sdgp_sparse_bwd_destroy(sdgp_sparse_bwd *p) {
    if (!p) return;
    free(p->wp);
    free(p->ent);
    free(p->slot_base);
    free(p);
}

sdgp_isa sdgp_sparse_bwd_isa(const sdgp_sparse_bwd *p) { return p ? p->k.isa : SDGP_ISA_REF; }

sdgp_status sdgp_sparse_bwd_pack(sdgp_sparse_bwd *p, const float *w, sdgp_error *err) {
    if (!p || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_pack: NULL %s", p ? "weights" : "plan");
    spconv_pack_weights(p, w);
    p->packed = 1;
    return SDGP_OK;
}

/* One work unit: images [b0, b1), dD rows [h0, h1), column block nb. */
static void run_unit(const sdgp_sparse_bwd *p, float *dD, int b0, int b1, int h0, int h1, int nb) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t Cin = g->Cin, Cout = g->Cout, H = g->H, W = g->W, Ho = g->Ho, Wo = g->Wo, s = g->stride, pad = g->pad;
    const int64_t c0 = (int64_t)nb * p->blk.nr, ncols = Cin - c0 < p->blk.nr ? Cin - c0 : p->blk.nr;
    const int64_t slots = p->slots, ntaps = (int64_t)g->kh * g->kw;
    const float *wblock = p->wp + (int64_t)nb * ntaps * Cout * p->ldp;

    for (int64_t b = b0; b < b1; b++) {
        if (ncols == Cin) {
            memset(dD + (b * H + h0) * W * Cin, 0, (size_t)((h1 - h0) * W * Cin) * sizeof(float));
        } else {
            for (int64_t px = (b * H + h0) * W; px < (b * H + h1) * W; px++) memset(dD + px * Cin + c0, 0, (size_t)ncols * sizeof(float));
        }
    }
    const int nchunks = (int)((Cout + p->blk.kc - 1) / p->blk.kc);
    /* order 0: chunk outer (the dO entries of a chunk stay hot across the taps);
     * order 1: tap outer. Both keep one panel (tap, chunk) in L1 across all pixels of the unit. */
    const int nouter = p->blk.order == 0 ? nchunks : (int)ntaps, ninner = p->blk.order == 0 ? (int)ntaps : nchunks;
    for (int o = 0; o < nouter; o++)
        for (int in = 0; in < ninner; in++) {
            const int chunk = p->blk.order == 0 ? o : in, tap = p->blk.order == 0 ? in : o;
            const int64_t i = tap / g->kw, j = tap % g->kw;
            const int64_t k0 = (int64_t)chunk * p->blk.kc, kc = Cout - k0 < p->blk.kc ? Cout - k0 : p->blk.kc;
            /* Source pixels whose target h = ho*s - pad + i lies in [h0, h1), w in [0, W). */
            int64_t ho_lo = ceil_div(h0 + pad - i, s), ho_hi = floor_div(h1 - 1 + pad - i, s) + 1;
            int64_t wo_lo = ceil_div(pad - j, s), wo_hi = floor_div(W - 1 + pad - j, s) + 1;
            if (ho_lo < 0) ho_lo = 0;
            if (ho_hi > Ho) ho_hi = Ho;
            if (wo_lo < 0) wo_lo = 0;
            if (wo_hi > Wo) wo_hi = Wo;
            if (ho_lo >= ho_hi || wo_lo >= wo_hi) continue;
            const int64_t e0 = k0 / p->m * p->n; /* first slot of the chunk */
            spconv_tile t = {
                .dd_sx = s * Cin,
                .dd_sy = s * W * Cin,
                .e_sx = slots,
                .e_sy = Wo * slots,
                .panel = wblock + (int64_t)tap * Cout * p->ldp,
                .ne = (int)(kc / p->m * p->n),
                .nx = (int)(wo_hi - wo_lo),
                .ny = (int)(ho_hi - ho_lo),
                .ncols = (int)ncols,
            };
            for (int64_t b = b0; b < b1; b++) {
                const int64_t src = (b * Ho + ho_lo) * Wo + wo_lo;
                t.dd = dD + ((b * H + ho_lo * s - pad + i) * W + wo_lo * s - pad + j) * Cin + c0;
                t.ent = p->ent + src * slots + e0;
                p->k.tile(&t);
            }
        }
}

sdgp_status sdgp_sparse_bwd_data(sdgp_sparse_bwd *p, float *dD, const sdgp_nm_tensor *dO, sdgp_error *err) {
    if (!p || !dD || !dO)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data: NULL %s", !p ? "plan" : !dD ? "dD" : "dO");
    const sdgp_conv_geom *g = &p->g;
    const int64_t rows = (int64_t)g->B * g->Ho * g->Wo;
    if (dO->axis != SDGP_AXIS_CHANNEL)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data: dO must be compressed along channels (axis CHANNEL)");
    if (dO->n != p->n || dO->m != p->m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data: dO is %d:%d but the plan was made for %d:%d", dO->n, dO->m,
                         p->n, p->m);
    if (dO->rows != rows || dO->C != g->Cout)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "sparse_bwd_data: dO is %lld x %lld but the geometry needs B*Ho*Wo x Cout = %lld x %d",
                         (long long)dO->rows, (long long)dO->C, (long long)rows, g->Cout);
    if (!dO->values || !dO->index) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data: dO has NULL values or index");
    if (!p->packed) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data: weights not packed (call sdgp_sparse_bwd_pack)");

    spconv_pack_entries(p, dO);

    /* Work units: whole images when one image's dD block fits the unit budget, else row bands. */
    const int64_t HW = (int64_t)g->H * g->W;
    int64_t ib = 1, hr = g->H;
    if (HW <= p->blk.tile_px) ib = p->blk.tile_px / HW;
    else hr = p->blk.tile_px / g->W > 0 ? p->blk.tile_px / g->W : 1;
    /* Enough units for the threads to balance (the result does not depend on the split). */
    while (ib > 1 && (g->B + ib - 1) / ib * p->nblocks < 4 * p->threads) ib = (ib + 1) / 2;
    if (ib > g->B) ib = g->B;
    const int64_t nbt = (g->B + ib - 1) / ib, nht = (g->H + hr - 1) / hr, nunits = nbt * nht * p->nblocks;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t u = 0; u < nunits; u++) {
        const int nb = (int)(u % p->nblocks);
        const int64_t rest = u / p->nblocks, ht = rest % nht, bt = rest / nht;
        const int64_t b0 = bt * ib, b1 = b0 + ib < g->B ? b0 + ib : g->B;
        const int64_t h0 = ht * hr, h1 = h0 + hr < g->H ? h0 + hr : g->H;
        run_unit(p, dD, (int)b0, (int)b1, (int)h0, (int)h1, nb);
    }
    return SDGP_OK;
}
