/* The N:M sparse backward-data convolution: plan, blocking (the macro-kernel) and threading.
 *
 * dD[b, h, w, :] = sum over taps (i, j) and kept entries (k, v) of the dO pixel (ho, wo) with
 * h = ho*s - pad + i, w = wo*s - pad + j, of v * W_tap[k, :]   (W_tap[k][c] = w[k][c][i][j]).
 * An implicit GEMM over the taps: the compressed dO rows are packed into entries (value + panel
 * row offset) and reused by every tap and column block; no im2col. Output-stationary: a
 * micro-kernel call covers a block of dD pixels that see the same set of valid taps and keeps each
 * pixel's row segment in registers across those taps and all their entries. Taps whose source
 * pixel falls outside dO are never visited: dD rows (columns) are split into runs with the same
 * valid taps (image borders, stride residues), computed once per plan.
 *
 * Loops (outside in), see README.md for why:
 *   work unit  = (images b0..b1, dD rows h0..h1): the OpenMP work item (dynamic schedule). It
 *                owns dD[b0:b1, h0:h1, :, :], so threads never write the same memory, and packs
 *                the dO entries it reads into its thread's buffer (one pass, reused below).
 *   column block nb = nr columns of Cin: the unit's dD block of these columns (~tile_px pixels)
 *                stays in L2; the first call that reaches a block of pixels stores, later ones
 *                add (no zeroing pass).
 *   chunk      = kc output channels (whole groups): the entries of one chunk;
 *   tap group  = tg consecutive taps: the panels of (chunk, tap group), tg*kc rows of ldp floats,
 *                are the working set reused across all pixels of the unit;
 *   micro-kernel call = the unit's images x one run of rows x one run of columns, with the valid
 *                taps of the group.
 * Every dD element receives its contributions in the same (chunk, tap group, call) order whatever
 * the units and the thread count: the result is bitwise independent of threads and of tile_px/nr. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "core/cache.h"
#include "core/transpose.h"
#include "kernels/spconv_internal.h"
#include "prune/prune_internal.h"

/* shared_acc: AVX-512 32 zmm = 24 accumulators + 4 panel vectors + broadcasts; AVX2 16 ymm = 8 + 4 +
 * broadcasts; the reference has no registers to count. */
static const spconv_kernels kernel_table[SDGP_ISA_COUNT] = {
    [SDGP_ISA_REF] = {.isa = SDGP_ISA_REF, .nr = 64, .tile = spconv_tile_ref, .tile_shared = spconv_tile_shared_ref,
                      .entries = spconv_entries_ref, .vec = 16, .shared_acc = 64},
    [SDGP_ISA_AVX2] = {.isa = SDGP_ISA_AVX2, .nr = 64, .tile = spconv_tile_avx2, .tile_shared = spconv_tile_shared_avx2,
                       .entries = spconv_entries_avx2, .vec = 8, .shared_acc = 8},
    [SDGP_ISA_AVX512] = {.isa = SDGP_ISA_AVX512, .nr = 128, .tile = spconv_tile_avx512, .tile_shared = spconv_tile_shared_avx512,
                         .entries = spconv_entries_avx512, .prune_entries = spconv_prune_entries_avx512, .vec = 16,
                         .shared_acc = 24},
};

/* Default column blocks of 64 floats (README.md has the measurements); the other block sizes
 * follow the detected caches (default_blocking). */
#define SPCONV_NR_DEFAULT 64

const spconv_kernels *spconv_kernels_for(sdgp_isa isa) { return &kernel_table[isa]; }

sdgp_status sparse_check_geometry(const char *who, const sdgp_conv_geom *g, int n, int m, sdgp_error *err) {
    if (!g) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL geometry", who);
    sdgp_conv_geom chk;
    sdgp_status st = sdgp_conv_geom_init(&chk, g->B, g->H, g->W, g->Cin, g->Cout, g->kh, g->kw, g->stride, g->pad, err);
    if (st != SDGP_OK) return st;
    if (chk.Ho != g->Ho || chk.Wo != g->Wo)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: output %dx%d does not match the geometry (%dx%d)", who, g->Ho, g->Wo, chk.Ho,
                         chk.Wo);
    if (m < 1 || m > SDGP_NM_MAX_M || n < 1 || n > m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: %d:%d is not an N:M pattern (1 <= n <= m <= %d)", who, n, m, SDGP_NM_MAX_M);
    return SDGP_OK;
}

sdgp_status spconv_check_plan_args(const char *who, const void *out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                   int threads, sdgp_isa *resolved, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL output", who);
    sdgp_status st = sparse_check_geometry(who, g, n, m, err);
    if (st != SDGP_OK) return st;
    if (g->groups < 1 || g->Cin % g->groups || g->Cout % g->groups)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: groups=%d does not divide Cin=%d and Cout=%d", who, g->groups, g->Cin,
                         g->Cout);
    if (g->groups == 1 && g->Cout % m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: Cout=%d is not a multiple of m=%d", who, g->Cout, m);
    /* a group of m output channels never spans two conv groups: each conv group's kept channels
     * meet only its own input channels */
    if ((g->Cout / g->groups) % m)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "%s: groups=%d split Cout=%d into %d output channels per group, not a multiple of m=%d", who,
                         g->groups, g->Cout, g->Cout / g->groups, m);
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: threads=%d < 0", who, threads);
    return sdgp_isa_resolve(isa, resolved, err);
}

static int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
static int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

/* Runs of output positions 0 .. size-1 (dD rows or columns) with equal valid-tap masks: position
 * x sees tap i when x + pad - i = o*stride with 0 <= o < size_out. Runs follow one stride residue
 * class each. Returns the number of runs (<= size). */
static int make_runs(spconv_run *runs, int size, int size_out, int k, int stride, int pad) {
    int count = 0;
    for (int r = 0; r < stride && r < size; r++) {
        for (int x = r; x < size; x += stride) {
            uint64_t mask = 0;
            for (int i = 0; i < k; i++) {
                int64_t t = (int64_t)x + pad - i;
                if (t >= 0 && t % stride == 0 && t / stride < size_out) mask |= (uint64_t)1 << i;
            }
            if (count > 0 && runs[count - 1].mask == mask && runs[count - 1].start + (int64_t)runs[count - 1].count * stride == x)
                runs[count - 1].count++;
            else
                runs[count++] = (spconv_run){.start = x, .count = 1, .mask = mask};
        }
    }
    return count;
}

static sdgp_status plan_layout(sdgp_sparse_bwd *p, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    p->nbg = (int)((p->cig + p->blk.nr - 1) / p->blk.nr);
    p->nblocks = g->groups * p->nbg;
    p->ldp = sdgp_round_up(p->blk.nr < p->cig ? p->blk.nr : p->cig, SPCONV_LDP_ALIGN);
    if ((uint64_t)p->cog * (uint64_t)p->ldp * sizeof(float) > UINT32_MAX)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "sparse_bwd: Cout=%d panels exceed 32-bit entry offsets", g->Cout);
    free(p->wp);
    p->packed = 0;
    p->wp_floats = (size_t)p->nblocks * g->kh * g->kw * p->cog * (size_t)p->ldp;
    p->wp = sdgp_alloc64(p->wp_floats * sizeof(float));
    if (!p->wp)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd: out of memory for %zu packed weight floats", p->wp_floats);
    memset(p->wp, 0, p->wp_floats * sizeof(float)); /* page faults here, not in the first pack */
    return SDGP_OK;
}

/* Work units (ib images x hr dD rows) and each thread's entry buffer. Whole images when one
 * image's dD block of one column block fits tile_px, else row bands; then halved until the
 * threads have at least 4 units each to balance (the result does not depend on the split). */
static sdgp_status plan_units(sdgp_sparse_bwd *p, sdgp_error *err) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t HW = (int64_t)g->H * g->W;
    int64_t ib = 1, hr = g->H;
    if (HW <= p->blk.tile_px) ib = p->blk.tile_px / HW;
    else hr = p->blk.tile_px / g->W > 0 ? p->blk.tile_px / g->W : 1;
    if (ib > g->B) ib = g->B;
    while (ib > 1 && (g->B + ib - 1) / ib < 4 * p->threads) ib = (ib + 1) / 2;
    while (hr > 1 && (g->B + ib - 1) / ib * ((g->H + hr - 1) / hr) < 4 * p->threads) hr = (hr + 1) / 2;
    p->ib = ib;
    p->hr = hr;
    /* dO rows a band of hr dD rows reads: ho with h = ho*s - pad + i, i < kh */
    int64_t nho = (hr + g->kh - 2) / g->stride + 2;
    if (nho > g->Ho) nho = g->Ho;
    p->tbuf_entries = (size_t)(ib * nho * g->Wo * p->slots);
    p->tbuf_entries = (p->tbuf_entries + 7) / 8 * 8; /* whole cache lines per thread */
    free(p->tbuf);
    p->tbuf = sdgp_alloc64((size_t)p->threads * p->tbuf_entries * sizeof(spconv_entry));
    if (!p->tbuf) return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd: out of memory for %d x %zu entries", p->threads, p->tbuf_entries);
    return SDGP_OK;
}

static sdgp_status check_blocking(const sdgp_sparse_bwd *p, const spconv_blocking *b, sdgp_error *err) {
    if (b->nr < 1 || b->nr > p->k.nr)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: nr=%d outside [1, %d] for the %s kernel", b->nr, p->k.nr,
                         sdgp_isa_name(p->k.isa));
    if (b->kc < p->m || b->kc % p->m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: kc=%d must be a positive multiple of m=%d", b->kc, p->m);
    if (b->tg < 0 || b->tile_px < 1)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: tg=%d / tile_px=%lld invalid", b->tg, (long long)b->tile_px);
    return SDGP_OK;
}

sdgp_status spconv_set_blocking(sdgp_sparse_bwd *p, const spconv_blocking *b, sdgp_error *err) {
    if (!p || !b) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd blocking: NULL argument");
    sdgp_status st = check_blocking(p, b, err);
    if (st != SDGP_OK) return st;
    const int relayout = b->nr != p->blk.nr;
    p->blk = *b;
    if (p->blk.kc > p->cog) p->blk.kc = (int)p->cog;
    if (relayout && (st = plan_layout(p, err)) != SDGP_OK) return st;
    return plan_units(p, err);
}

/* Default blocking (measurements in README.md), from the caches of this machine (core/cache.h):
 * the widest column block up to SPCONV_NR_DEFAULT; one register pass covers `rows` panel rows (tap
 * group x chunk), rows*ldp*4 bytes = 2/3 of the L1d size, so panel loads hit L1 beside the entry
 * stream and the dD rows (all of L1d was 1.0-1.2x slower on Zen 5's 48 KiB); from 1:8 on (n/m <=
 * 1/8), twice L1d: the longer passes (more entries per dD load/store) win over the L2 latency of some
 * panel loads. Taps are grouped only when Cout is smaller than that (single taps keep the entry
 * loops longest). Chunks are equal, whole groups. Work units: a unit's dD block of one column
 * block and all of its entries (packed at the unit's start, read by every chunk, tap and column
 * block) take half of L2, so the entries are still in L2 when the last column block reads them
 * (README.md, "Work units and L2"), but no fewer pixels than one chunk's entries and dD fill a
 * quarter of L2 with; units never change the result's bits, chunks do. */
static spconv_blocking default_blocking(const sdgp_sparse_bwd *p) {
    const sdgp_conv_geom *g = &p->g;
    int64_t nr = sdgp_round_up(p->cig, SPCONV_LDP_ALIGN);
    if (nr > SPCONV_NR_DEFAULT) nr = SPCONV_NR_DEFAULT;
    if (nr > p->k.nr) nr = p->k.nr;
    const int64_t row_bytes = sdgp_round_up(nr, SPCONV_LDP_ALIGN) * 4, groups = p->cog / p->m, T = (int64_t)g->kh * g->kw;
    const sdgp_cache_info *cache = sdgp_caches();
    const int64_t ws = 8 * p->n > p->m ? cache->l1d * 2 / 3 : 2 * cache->l1d, rows = ws / row_bytes;
    int64_t tg = 1, kc;
    if (p->cog >= rows) {
        int64_t per = rows / p->m; /* groups per chunk */
        if (per < 1) per = 1;
        const int64_t nchunks = (groups + per - 1) / per;
        kc = (groups + nchunks - 1) / nchunks * p->m;
    } else {
        kc = p->cog;
        tg = rows / p->cog < T ? rows / p->cog : T;
    }
    /* all the unit's entries with one column block's dD in half of L2; at least what one chunk's sweep
     * streams with that dD in a quarter (wide dL/dO, as a linear layer's 3072 features, would make
     * units of a few dozen pixels, whose calls cost more than the L2 misses they save) */
    const int64_t e = (int64_t)sizeof(spconv_entry), ns = kc / p->m * p->n;
    const int64_t whole = cache->l2 / 2 / (row_bytes + p->slots * e), sweep = cache->l2 / 4 / (row_bytes + ns * e);
    const int64_t unit_px = whole > sweep ? whole : sweep;
    return (spconv_blocking){.nr = (int)nr, .kc = (int)kc, .tg = (int)tg, .tile_px = unit_px > 16 ? unit_px : 16};
}

sdgp_status sdgp_sparse_bwd_create(sdgp_sparse_bwd **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                   int threads, sdgp_error *err) {
    if (out) *out = NULL;
    sdgp_isa resolved;
    sdgp_status st = spconv_check_plan_args("sparse_bwd_create", out, g, n, m, isa, threads, &resolved, err);
    if (st != SDGP_OK) return st;
    if (g->kh > 64 || g->kw > 64)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "sparse_bwd_create: kernel %dx%d larger than 64", g->kh, g->kw);

    sdgp_sparse_bwd *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_create: out of memory");
    p->g = *g;
    p->n = n;
    p->m = m;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = kernel_table[resolved];
    p->slots = (int64_t)g->Cout / m * n;
    p->cig = g->Cin / g->groups;
    p->cog = g->Cout / g->groups;
    p->mask_block = 1;
    p->blk = default_blocking(p);
    p->slot_base = sdgp_alloc64((size_t)p->slots * sizeof(int32_t));
    p->row_runs = malloc((size_t)g->H * sizeof *p->row_runs);
    p->col_runs = malloc((size_t)g->W * sizeof *p->col_runs);
    if (!p->slot_base || !p->row_runs || !p->col_runs) {
        sdgp_sparse_bwd_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_create: out of memory");
    }
    for (int64_t s = 0; s < p->slots; s++) p->slot_base[s] = (int32_t)(s / n * m % p->cog);
    p->nrow_runs = make_runs(p->row_runs, g->H, g->Ho, g->kh, g->stride, g->pad);
    p->ncol_runs = make_runs(p->col_runs, g->W, g->Wo, g->kw, g->stride, g->pad);
    p->written = malloc((size_t)p->threads * p->nrow_runs * p->ncol_runs);
    if (!p->written) {
        sdgp_sparse_bwd_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_create: out of memory for run flags");
    }
    if ((st = plan_layout(p, err)) != SDGP_OK || (st = plan_units(p, err)) != SDGP_OK) {
        sdgp_sparse_bwd_destroy(p);
        return st;
    }
    *out = p;
    return SDGP_OK;
}

void sdgp_sparse_bwd_destroy(sdgp_sparse_bwd *p) {
    if (!p) return;
    free(p->wp);
    free(p->tbuf);
    free(p->slot_base);
    free(p->row_runs);
    free(p->col_runs);
    free(p->written);
    free(p->stage);
    free(p->pvals);
    free(p->pidx);
    free(p);
}

sdgp_isa sdgp_sparse_bwd_isa(const sdgp_sparse_bwd *p) { return p ? p->k.isa : SDGP_ISA_REF; }

void spconv_describe(const sdgp_sparse_bwd *p, char *buf, size_t size) {
    snprintf(buf, size, "nr=%d kc=%d tg=%d unit=%lldx%lld (images x rows)", p->blk.nr, p->blk.kc, p->blk.tg, (long long)p->ib,
             (long long)p->hr);
}

sdgp_status sdgp_sparse_bwd_pack_strided(sdgp_sparse_bwd *p, const float *w, const int64_t strides[4], sdgp_error *err) {
    if (!p || !w || !strides)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_pack: NULL %s", !p ? "plan" : !w ? "weights" : "strides");
    for (int d = 0; d < 4; d++)
        if (strides[d] < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_pack: stride %d of the weights is negative (%lld)", d, (long long)strides[d]);
    spconv_pack_weights(p, w, strides);
    p->packed = 1;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_bwd_pack(sdgp_sparse_bwd *p, const float *w, sdgp_error *err) {
    const int64_t T = p ? (int64_t)p->g.kh * p->g.kw : 0;
    const int64_t oihw[4] = {p ? p->cig * T : 0, T, p ? p->g.kw : 0, 1};
    return sdgp_sparse_bwd_pack_strided(p, w, oihw, err);
}

/* The micro-kernel with the first nt taps of t on the block with origin pixel (b0, hs, ws) of dD (as
 * run_block_column addresses it: from the unit's origin).
 * *written: whether an earlier call reached this block. */
static void run_block(const sdgp_sparse_bwd *p, spconv_tile *t, int nt, uint8_t *written, float *dD, int64_t b0, int64_t hs,
                      int64_t ws, int64_t c0) {
    const sdgp_conv_geom *g = &p->g;
    t->ntaps = nt;
    t->overwrite = !*written;
    t->dd = dD + ((b0 * g->H + hs) * g->W + ws) * g->Cin + c0;
    p->k.tile(t);
    *written = 1;
}

/* Shared masks (stride 1): the taps of t (tap_ent/tap_panel: nt taps, all of one tap column j, so
 * every pixel of the call reads its source pixel at the same column shift) over the column run C,
 * cut where the source pixels (w + pad - j) cross a mask block of their dO row, then into calls of
 * at most spconv_shared_nx pixels. Each call's pixels share their entries' offsets. */
static void run_shared(const sdgp_sparse_bwd *p, spconv_tile *t, int nt, const int64_t *tap_ent, int overwrite, float *dD,
                       int64_t b0, int64_t hs, const spconv_run *C, int64_t src0, int64_t c0) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t P = p->mask_block, nxmax = spconv_shared_nx(&p->k, t->ncols);
    int64_t ent[SPCONV_MAX_TAPS];
    const int64_t *saved = t->tap_ent;
    t->tap_ent = ent;
    t->ntaps = nt;
    t->overwrite = overwrite;
    for (int64_t x0 = 0, x1; x0 < C->count; x0 = x1) {
        const int64_t src = src0 + x0, end = x0 + (src / P + 1) * P - src; /* the block's end */
        x1 = end < C->count ? end : C->count;
        const int64_t parts = (x1 - x0 + nxmax - 1) / nxmax;
        for (int64_t q = 0; q < parts; q++) {
            const int64_t xa = x0 + (x1 - x0) * q / parts, xb = x0 + (x1 - x0) * (q + 1) / parts;
            for (int k = 0; k < nt; k++) ent[k] = tap_ent[k] + xa * t->e_sx;
            t->nx = (int)(xb - xa);
            t->dd = dD + ((b0 * g->H + hs) * g->W + C->start + xa) * g->Cin + c0;
            p->k.tile_shared(t);
        }
    }
    t->tap_ent = saved;
}

/* Column block nb's dD columns [*c0, *c0 + *ncols): columns lc0 .. of conv group grp's cig input
 * channels, which meet only that group's cog output channels. Returns grp. */
static int64_t block_columns(const sdgp_sparse_bwd *p, int nb, int64_t *c0, int64_t *ncols) {
    const int64_t grp = nb / p->nbg, lc0 = (int64_t)(nb % p->nbg) * p->blk.nr;
    *c0 = grp * p->cig + lc0;
    *ncols = p->cig - lc0 < p->blk.nr ? p->cig - lc0 : p->blk.nr;
    return grp;
}

/* One column block nb of a unit: images [b0, b1), dD rows [h0, h1); ent holds the unit's
 * entries, dO rows ho_lo .. ho_lo+nho-1 of each image. dD points at the unit's pixel (b0, h0, 0)
 * with NHWC strides (dD itself, or the unit's stage: units of several images are whole images). */
static void run_block_column(const sdgp_sparse_bwd *p, float *dD, const spconv_entry *ent, int64_t b0, int64_t b1, int64_t h0,
                             int64_t h1, int64_t ho_lo, int64_t nho, int nb, uint8_t *written) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t Cin = g->Cin, cog = p->cog, H = g->H, W = g->W, Wo = g->Wo, s = g->stride, pad = g->pad;
    /* the block's group: its slots and its panels' cog rows */
    int64_t c0, ncols;
    const int64_t grp = block_columns(p, nb, &c0, &ncols);
    const int64_t T = (int64_t)g->kh * g->kw, tg = p->blk.tg ? p->blk.tg : T;
    const int64_t grp_e0 = grp * (cog / p->m * p->n);
    const float *wblock = p->wp + (int64_t)nb * T * cog * p->ldp;
    /* shared masks: stride 1 (a pixel run reads a run of source pixels) and a width the shared
     * kernels take */
    const int shared = p->mask_block > 1 && s == 1 && ncols <= SPCONV_SHARED_MAX_NR;

    /* The first call that reaches a block stores (overwrite); only blocks that no tap reaches
     * (possible when stride > kernel) are zeroed here. */
    memset(written, 0, (size_t)p->nrow_runs * p->ncol_runs);
    for (int ri = 0; ri < p->nrow_runs; ri++)
        for (int ci = 0; ci < p->ncol_runs; ci++) {
            const spconv_run *R = &p->row_runs[ri], *C = &p->col_runs[ci];
            if (R->mask && C->mask) continue;
            for (int64_t b = b0; b < b1; b++)
                for (int64_t y = 0; y < R->count; y++) {
                    const int64_t h = R->start + y * s;
                    if (h < h0 || h >= h1) continue;
                    for (int64_t x = 0; x < C->count; x++)
                        memset(dD + (((b - b0) * H + h - h0) * W + C->start + x * s) * Cin + c0, 0, (size_t)ncols * sizeof(float));
                }
        }
    int64_t tap_ent[SPCONV_MAX_TAPS];
    const float *tap_panel[SPCONV_MAX_TAPS];
    spconv_tile t = {.dd_sx = s * Cin, .dd_sy = s * W * Cin, .dd_sz = H * W * Cin, .tap_ent = tap_ent,
                     .tap_panel = tap_panel, .nz = (int)(b1 - b0), .ncols = (int)ncols};
    const int64_t npix = (b1 - b0) * nho * Wo; /* the unit's source pixels: ent holds a slab of them per chunk */
    for (int64_t k0 = 0; k0 < cog; k0 += p->blk.kc) {
        const int64_t kc = cog - k0 < p->blk.kc ? cog - k0 : p->blk.kc, ns = kc / p->m * p->n;
        t.ne = (int)ns;
        t.ent = ent + npix * (grp_e0 + k0 / p->m * p->n); /* the chunk's slab (spconv_pack_entries) */
        t.e_sx = ns, t.e_sy = Wo * ns, t.e_sz = nho * Wo * ns;
        for (int64_t tap0 = 0; tap0 < T; tap0 += tg) {
            const int64_t tap1 = tap0 + tg < T ? tap0 + tg : T;
            for (int ri = 0; ri < p->nrow_runs; ri++) {
                const spconv_run *R = &p->row_runs[ri];
                /* the part of the run inside [h0, h1) */
                int64_t y0 = ceil_div(h0 - R->start, s), y1 = ceil_div(h1 - R->start, s);
                if (y0 < 0) y0 = 0;
                if (y1 > R->count) y1 = R->count;
                if (y0 >= y1) continue;
                const int64_t hs = R->start + y0 * s;
                for (int ci = 0; ci < p->ncol_runs; ci++) {
                    const spconv_run *C = &p->col_runs[ci];
                    const int64_t ws = C->start;
                    uint8_t *wr = &written[ri * p->ncol_runs + ci];
                    t.nx = C->count;
                    t.ny = (int)(y1 - y0);
                    if (shared) { /* one pass per tap column j: its taps share the column shift */
                        int any = 0;
                        for (int64_t j = 0; j < g->kw; j++) {
                            int nt = 0;
                            for (int64_t tap = tap0; tap < tap1; tap++) {
                                const int64_t i = tap / g->kw;
                                if (tap % g->kw != j || !((R->mask >> i) & 1) || !((C->mask >> j) & 1)) continue;
                                tap_ent[nt] = ((hs + pad - i - ho_lo) * Wo + ws + pad - j) * ns;
                                tap_panel[nt] = wblock + tap * cog * p->ldp;
                                if (++nt == SPCONV_MAX_TAPS) run_shared(p, &t, nt, tap_ent, !*wr && !any, dD, 0, hs - h0, C, ws + pad - j, c0), nt = 0, any = 1;
                            }
                            if (nt) run_shared(p, &t, nt, tap_ent, !*wr && !any, dD, 0, hs - h0, C, ws + pad - j, c0), any = 1;
                        }
                        *wr |= (uint8_t)any;
                        continue;
                    }
                    int nt = 0;
                    for (int64_t tap = tap0; tap < tap1; tap++) {
                        const int64_t i = tap / g->kw, j = tap % g->kw;
                        if (!((R->mask >> i) & 1) || !((C->mask >> j) & 1)) continue;
                        /* source pixel of the block's first pixel: ((hs + pad - i)/s, (ws + pad - j)/s) */
                        tap_ent[nt] = (((hs + pad - i) / s - ho_lo) * Wo + (ws + pad - j) / s) * ns;
                        tap_panel[nt] = wblock + tap * cog * p->ldp;
                        if (++nt == SPCONV_MAX_TAPS) run_block(p, &t, nt, wr, dD, 0, hs - h0, ws, c0), nt = 0;
                    }
                    if (nt) run_block(p, &t, nt, wr, dD, 0, hs - h0, ws, c0);
                }
            }
        }
    }
}

/* Where a unit's entries come from: the compressed dO (nm), or the dense dO pruned piece by piece
 * while it is packed (pr: the pruning fused into the packing). */
typedef struct {
    const sdgp_nm_tensor *nm;
    const prune_rows *pr;
} spconv_source;

/* The unit's dO rows row0 .. row0+nrows-1 (its pixels pix0 ..) into its entries. Fused: pruned
 * prune_piece rows at a time into the thread's small slot buffer, which stays in L1/L2 until
 * spconv_pack_entries reads it back. Returns prune_rows_run's non-finite flag. */
static int pack_source(const sdgp_sparse_bwd *p, spconv_entry *ent, const spconv_source *src, int tid, int64_t row0,
                       int64_t nrows, int64_t pix0, int64_t npix) {
    if (src->nm) {
        spconv_pack_entries(ent, p, src->nm, row0, nrows, pix0, npix);
        return 0;
    }
    /* the unit's dO rows are whole rows of dO, so whole lines of shared masks (line divides Wo) */
    const prune_job *j = &src->pr->job;
    const int64_t block = j->block > 1 ? j->block : 1, line = block > 1 ? j->line : 1;
    if (p->k.prune_entries && prune_rows_ranks_magnitude(src->pr) && 16 % p->m == 0) {
        /* straight into the entries, a sample's rows at a time (they share its rescale factors) */
        for (int64_t r = 0, q; r < nrows; r += q) {
            const int64_t row = row0 + r;
            q = (row / j->P + 1) * j->P - row < nrows - r ? (row / j->P + 1) * j->P - row : nrows - r;
            p->k.prune_entries(ent, p, j->x + row * j->C, j->scale ? j->scale + (row / j->P) * j->scale_bstride : NULL, q,
                               pix0 + r, npix, block, line);
        }
        return 0;
    }
    float *vals = p->pvals + (size_t)tid * p->prune_piece * p->slots;
    uint8_t *idx = p->pidx + (size_t)tid * p->prune_piece * p->slots;
    const int64_t rows = p->prune_piece / line * line; /* whole lines (ensure_prune_buffers: at least one) */
    int bad = 0;
    for (int64_t r = 0; r < nrows; r += rows) {
        const int64_t q = nrows - r < rows ? nrows - r : rows;
        bad |= prune_rows_run(src->pr, row0 + r, row0 + r + q, vals, idx);
        const sdgp_nm_tensor piece = {.axis = SDGP_AXIS_CHANNEL, .n = p->n, .m = p->m, .rows = q, .C = p->g.Cout, .values = vals,
                                      .index = idx};
        spconv_pack_entries(ent, p, &piece, 0, q, pix0 + r, npix);
    }
    return bad;
}

/* One work unit: images [b0, b1), dD rows [h0, h1), all column blocks. NCHW: into the thread's
 * stage, each column block transposed into dD while it is in cache. Returns pack_source's flag. */
static int run_unit(const sdgp_sparse_bwd *p, float *dD, const spconv_source *src, int64_t b0, int64_t b1, int64_t h0,
                    int64_t h1) {
    const sdgp_conv_geom *g = &p->g;
    const int tid = omp_get_thread_num();
    spconv_entry *ent = p->tbuf + (size_t)tid * p->tbuf_entries;
    uint8_t *written = p->written + (size_t)tid * p->nrow_runs * p->ncol_runs;
    /* dO rows the band reads (clipped to the image), packed per image */
    int64_t ho_lo = ceil_div(h0 + g->pad - (g->kh - 1), g->stride), ho_hi = floor_div(h1 - 1 + g->pad, g->stride) + 1;
    if (ho_lo < 0) ho_lo = 0;
    if (ho_hi > g->Ho) ho_hi = g->Ho;
    const int64_t nho = ho_hi > ho_lo ? ho_hi - ho_lo : 0;
    int bad = 0;
    if (nho == g->Ho) /* whole images: their rows are one run of dO (one call, not one per image: a linear
                         layer's images are single pixels, and each call has a set-up) */
        bad = pack_source(p, ent, src, tid, b0 * g->Ho * g->Wo, (b1 - b0) * nho * g->Wo, 0, (b1 - b0) * nho * g->Wo);
    else
        for (int64_t b = b0; b < b1; b++)
            bad |= pack_source(p, ent, src, tid, (b * g->Ho + ho_lo) * g->Wo, nho * g->Wo, (b - b0) * nho * g->Wo,
                               (b1 - b0) * nho * g->Wo);
    const int64_t HW = (int64_t)g->H * g->W, Cin = g->Cin, npx = (h1 - h0) * g->W;
    if (p->out_layout == SDGP_LAYOUT_NHWC) {
        for (int nb = 0; nb < p->nblocks; nb++)
            run_block_column(p, dD + (b0 * HW + h0 * g->W) * Cin, ent, b0, b1, h0, h1, ho_lo, nho, nb, written);
        return bad;
    }
    float *stage = p->stage + (size_t)tid * p->stage_floats;
    const transpose_fn tr = transpose_for(p->k.isa);
    for (int nb = 0; nb < p->nblocks; nb++) {
        run_block_column(p, stage, ent, b0, b1, h0, h1, ho_lo, nho, nb, written);
        int64_t c0, ncols;
        block_columns(p, nb, &c0, &ncols);
        for (int64_t b = b0; b < b1; b++) /* dD[b][c0 + c][h0 * W + x] = stage[b - b0][x][c0 + c] */
            tr(dD + (b * Cin + c0) * HW + h0 * g->W, HW, stage + (b - b0) * npx * Cin + c0, Cin, npx, ncols);
    }
    return bad;
}

/* The per-thread stages of NCHW output, sized for the current units (ib x hr rows). */
static sdgp_status ensure_stage(sdgp_sparse_bwd *p, sdgp_error *err) {
    const size_t need = (size_t)(p->ib * p->hr * p->g.W * p->g.Cin + 15) / 16 * 16; /* whole cache lines */
    if (p->stage && p->stage_floats == need) return SDGP_OK;
    free(p->stage);
    p->stage_floats = 0;
    p->stage = sdgp_alloc64((size_t)p->threads * need * sizeof(float));
    if (!p->stage)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_data: out of memory for %d x %zu floats of NCHW staging", p->threads, need);
    p->stage_floats = need;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_bwd_set_output_layout(sdgp_sparse_bwd *p, sdgp_layout layout, sdgp_error *err) {
    if (!p) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_set_output_layout: NULL plan");
    if (layout != SDGP_LAYOUT_NHWC && layout != SDGP_LAYOUT_NCHW)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_set_output_layout: layout=%d is not NHWC or NCHW", (int)layout);
    p->out_layout = layout;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_bwd_set_mask_block(sdgp_sparse_bwd *p, int block, sdgp_error *err) {
    if (!p) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_set_mask_block: NULL plan");
    if (block < 1 || block > SDGP_MASK_BLOCK_MAX)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_set_mask_block: block=%d is out of range [1, %d]", block, SDGP_MASK_BLOCK_MAX);
    p->mask_block = block;
    return SDGP_OK;
}

/* The checks both data entry points make before running. */
static sdgp_status check_ready(sdgp_sparse_bwd *p, const char *who, sdgp_error *err) {
    if (!p->packed) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: weights not packed (call sdgp_sparse_bwd_pack)", who);
    return p->out_layout == SDGP_LAYOUT_NCHW ? ensure_stage(p, err) : SDGP_OK;
}

/* Every work unit, in parallel; returns whether a fused pruning met a non-finite MVUE group. */
static int run_units(const sdgp_sparse_bwd *p, float *dD, const spconv_source *src) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t ib = p->ib, hr = p->hr, nbt = (g->B + ib - 1) / ib, nht = (g->H + hr - 1) / hr;
    int bad = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads) reduction(| : bad)
    for (int64_t u = 0; u < nbt * nht; u++) {
        const int64_t ht = u % nht, bt = u / nht;
        const int64_t b0 = bt * ib, b1 = b0 + ib < g->B ? b0 + ib : g->B;
        const int64_t h0 = ht * hr, h1 = h0 + hr < g->H ? h0 + hr : g->H;
        bad |= run_unit(p, dD, src, b0, b1, h0, h1);
    }
    return bad;
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
    sdgp_status st = check_ready(p, "sparse_bwd_data", err);
    if (st != SDGP_OK) return st;
    const spconv_source src = {.nm = dO};
    run_units(p, dD, &src);
    return SDGP_OK;
}

/* The per-thread slot buffers of the fused pruning: pieces of rows whose slots take about
 * SPCONV_PRUNE_PIECE_BYTES, read back by the entry packing while they are in L1. */
#define SPCONV_PRUNE_PIECE_BYTES (16 * 1024)
static sdgp_status ensure_prune_buffers(sdgp_sparse_bwd *p, int64_t line, sdgp_error *err) {
    if (p->pvals && p->prune_piece >= line) return SDGP_OK;
    free(p->pvals);
    free(p->pidx);
    const int64_t per_row = p->slots * (int64_t)(sizeof(float) + 1);
    p->prune_piece = SPCONV_PRUNE_PIECE_BYTES / per_row > line ? SPCONV_PRUNE_PIECE_BYTES / per_row : line;
    const size_t n = (size_t)p->threads * (size_t)(p->prune_piece * p->slots);
    p->pvals = sdgp_alloc64(n * sizeof(float));
    p->pidx = sdgp_alloc64(n);
    if (!p->pvals || !p->pidx) {
        free(p->pvals);
        free(p->pidx);
        p->pvals = NULL, p->pidx = NULL;
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_bwd_data_pruned: out of memory for %zu slots of pruning buffers", n);
    }
    return SDGP_OK;
}

sdgp_status sdgp_sparse_bwd_data_pruned(sdgp_sparse_bwd *p, float *dD, const float *dO, const sdgp_prune_cfg *cfg,
                                        sdgp_error *err) {
    if (!p || !dD || !dO || !cfg)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data_pruned: NULL %s", !p ? "plan" : !dD ? "dD" : !dO ? "dO" : "cfg");
    if (cfg->n != p->n || cfg->m != p->m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_bwd_data_pruned: cfg is %d:%d but the plan was made for %d:%d", cfg->n,
                         cfg->m, p->n, p->m);
    const sdgp_conv_geom *g = &p->g;
    /* shared masks: blocks along rows of dO, so that a unit's rows (whole rows of dO) are whole blocks;
     * a plan told of shared masks reads the offsets of a block's first pixel for all of it */
    const int64_t line = cfg->mask_block > 1 ? (cfg->mask_line ? cfg->mask_line : (int64_t)g->Ho * g->Wo) : 1;
    if (p->mask_block > 1 && cfg->mask_block != p->mask_block)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "sparse_bwd_data_pruned: cfg->mask_block is %d but the plan's kernel shares masks in blocks of %d",
                         cfg->mask_block, p->mask_block);
    if (cfg->mask_block > 1 && (g->Wo % line || (p->mask_block > 1 && line != g->Wo)))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "sparse_bwd_data_pruned: shared masks along lines of %lld positions; this takes lines %s the %d "
                         "pixels of a row of dO (cfg->mask_line)",
                         (long long)line, p->mask_block > 1 ? "of" : "that divide", g->Wo);
    sdgp_status st = check_ready(p, "sparse_bwd_data_pruned", err);
    if (st == SDGP_OK) st = ensure_prune_buffers(p, line, err);
    if (st != SDGP_OK) return st;
    prune_rows pr;
    sdgp_prune_cfg c = *cfg;
    if (c.threads <= 0) c.threads = p->threads;
    if ((st = prune_rows_init(&pr, &c, dO, g->B, (int64_t)g->Ho * g->Wo, g->Cout, err)) != SDGP_OK) return st;
    const spconv_source src = {.pr = &pr};
    st = prune_rows_check(&pr, run_units(p, dD, &src), err);
    prune_rows_free(&pr);
    return st;
}
