/* SDGP in the Winograd domain: F(2x2,3x3) backward-data with N:M pruning of the transformed
 * gradient V (include/sdgp/sparse.h states what is computed; README.md has the design and the
 * measurements).
 *
 * Backward-data of a 3x3 stride-1 convolution with padding p is the 3x3 correlation of dO, padded
 * by q = 2 - p, with g'[c][k] = rot180(w[k][c]): dD[h][x] = sum_{i,j} X[h+i][x+j] g'[i][j], where
 * X[y][x] = dO[y - q][x - q] (zero outside). F(2x2,3x3) computes one 2x2 tile of dD from the 4x4
 * patch of X at (2ty, 2tx):  V = B^T d B,  U = G g' G^T,  M = V (.) U summed over k,  Y = A^T M A.
 *
 * Loops (outside in; README.md has the measurements behind them):
 *   work unit = ib whole images (the OpenMP item, dynamic schedule): it owns dD[b0:b1], so threads
 *               never share memory and every dD value receives its terms in the same order
 *               whatever the thread count;
 *   element e = each of the 16: the unit's V_e (rows = tiles, along Cout) is transformed into the
 *               thread's buffer, pruned (the unit's images in one call, as sdgp_prune prunes the whole V: same
 *               groups, counters and scopes) and packed into micro-kernel entries, kept for all e
 *               (shared masks: the block pruning writes the entries straight from V);
 *   column block nb (nr columns of Cin), then row a of A^T (order 1, 0, 2, 3), then bb: the sparse
 *               micro-kernel of sdgp_sparse_bwd, one "tap" whose panel is U_e's block, chunks of kc
 *               output channels, over all rows of the unit, into M_bb (rows x nr);
 *   then the row's four M are combined along columns and added into dD with the signs of
 *               A^T (.) A (the data loops of spwino_loops.h, compiled per ISA). Row a = 1 reaches
 *               both output rows of a tile and stores first: nothing zeroes dD.
 * Only V_e, M and the entries of one unit are held (per thread), never the batch's V. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "core/cache.h"
#include "kernels/spwino_internal.h"

static const spwino_loops *const loops_table[SDGP_ISA_COUNT] = {
    [SDGP_ISA_REF] = &spwino_loops_ref, [SDGP_ISA_AVX2] = &spwino_loops_avx2, [SDGP_ISA_AVX512] = &spwino_loops_avx512};

/* G = [[1,0,0],[1/2,1/2,1/2],[1/2,-1/2,1/2],[0,0,1]]. */
static const double gm[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};

/* Default blocking, the rule of sdgp_sparse_bwd's (README.md): column blocks of up to 64 floats,
 * a (chunk) working set of panel rows of the L1d size (twice that for n/m <= 1/8; core/cache.h). */
#define WINO_NR_DEFAULT 64
/* Rows (tiles) a work unit aims at: its dD block (4 pixels a tile x Cin) and V_e stay in L2. */
#define WINO_UNIT_TILES 64

int sdgp_sparse_wino_supports(const sdgp_conv_geom *g) {
    return g && g->kh == 3 && g->kw == 3 && g->stride == 1 && g->pad >= 0 && g->pad <= 2 && g->groups == 1;
}

static void plan_blocking(sdgp_sparse_wino *p) {
    const sdgp_conv_geom *g = &p->g;
    int64_t nr = sdgp_round_up(g->Cin, SPCONV_LDP_ALIGN);
    if (nr > WINO_NR_DEFAULT) nr = WINO_NR_DEFAULT;
    if (nr > p->k.nr) nr = p->k.nr;
    p->nr = (int)nr;
    p->ldp = sdgp_round_up(nr, SPCONV_LDP_ALIGN);
    p->nblocks = (int)((g->Cin + nr - 1) / nr);
    const int64_t l1d = sdgp_caches()->l1d, ws = 8 * p->n > p->m ? l1d : 2 * l1d, rows = ws / (p->ldp * 4);
    const int64_t groups = g->Cout / p->m;
    int64_t per = rows / p->m;
    if (per < 1) per = 1;
    const int64_t nchunks = (groups + per - 1) / per;
    p->kc = (int)((groups + nchunks - 1) / nchunks * p->m);
    /* whole images per unit, about WINO_UNIT_TILES tiles, then at least 4 units per thread */
    int64_t ib = WINO_UNIT_TILES / p->T;
    if (ib < 1) ib = 1;
    if (ib > g->B) ib = g->B;
    while (ib > 1 && (g->B + ib - 1) / ib < 4 * p->threads) ib = (ib + 1) / 2;
    p->ib = ib;
}

/* Per-thread buffers: V_e of the unit (rows x Cout), its compressed form, the entries, M
 * (rows x ldp), and the rescale workspace of one image. */
static sdgp_status plan_buffers(sdgp_sparse_wino *p, sdgp_error *err) {
    const int64_t rows = p->ib * p->T, C = p->g.Cout, W16 = (C + 15) / 16;
    size_t off = sdgp_align64((size_t)(rows * C * 4)); /* V_e at offset 0 */
#define TAKE(field, bytes) (p->field = off, off += sdgp_align64((size_t)(bytes)))
    TAKE(o_vals, rows * p->slots * 4);
    TAKE(o_idx, rows * p->slots);
    TAKE(o_ent, WE * rows * p->slots * 8);
    TAKE(o_mbuf, WROW * rows * p->ldp * 4);
    TAKE(o_dense, C * 8);
    TAKE(o_kept, C * 8);
    TAKE(o_scale, C * 4);
    TAKE(o_keep, p->T * W16 * 2);
#undef TAKE
    p->tbytes = off;
    p->tbuf = sdgp_alloc64((size_t)p->threads * off);
    if (!p->tbuf)
        return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_wino: out of memory for %d x %zu bytes of unit buffers", p->threads, off);
    return SDGP_OK;
}

sdgp_status sdgp_sparse_wino_create(sdgp_sparse_wino **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                    int threads, sdgp_error *err) {
    if (out) *out = NULL;
    sdgp_isa resolved;
    sdgp_status st = spconv_check_plan_args("sparse_wino_create", out, g, n, m, isa, threads, &resolved, err);
    if (st != SDGP_OK) return st;
    if (g->groups != 1) /* the pixel-domain kernel takes them (sdgp_sparse_bwd_create) */
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "sparse_wino_create: groups=%d: the Winograd domain takes ungrouped convolutions only", g->groups);
    if (!sdgp_sparse_wino_supports(g))
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "sparse_wino_create: the Winograd domain needs a 3x3 kernel with stride 1 (got %dx%d, stride %d)", g->kh,
                         g->kw, g->stride);

    sdgp_sparse_wino *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_wino_create: out of memory");
    p->g = *g;
    p->n = n;
    p->m = m;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = *spconv_kernels_for(resolved);
    p->pk = prune_kernels_for(resolved);
    p->loops = loops_table[resolved];
    p->slots = (int64_t)g->Cout / m * n;
    p->q = 2 - g->pad;
    p->th = (g->H + 1) / 2;
    p->tw = (g->W + 1) / 2;
    p->T = (int64_t)p->th * p->tw;
    plan_blocking(p);
    if ((uint64_t)g->Cout * (uint64_t)p->ldp * sizeof(float) > UINT32_MAX) {
        sdgp_sparse_wino_destroy(p);
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "sparse_wino_create: Cout=%d panels exceed 32-bit entry offsets", g->Cout);
    }
    p->up_floats = (size_t)WE * p->nblocks * g->Cout * (size_t)p->ldp;
    p->up = sdgp_alloc64(p->up_floats * sizeof(float));
    p->slot_base = sdgp_alloc64((size_t)p->slots * sizeof(int32_t));
    p->zrow = sdgp_alloc64((size_t)g->Cout * sizeof(float));
    if (!p->up || !p->slot_base || !p->zrow || (st = plan_buffers(p, err)) != SDGP_OK) {
        sdgp_sparse_wino_destroy(p);
        return st != SDGP_OK ? st : sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_wino_create: out of memory for %zu U floats", p->up_floats);
    }
    memset(p->up, 0, p->up_floats * sizeof(float)); /* zero padding columns; page faults here */
    memset(p->zrow, 0, (size_t)g->Cout * sizeof(float));
    for (int64_t s = 0; s < p->slots; s++) p->slot_base[s] = (int32_t)(s / n * m);
    *out = p;
    return SDGP_OK;
}

void sdgp_sparse_wino_destroy(sdgp_sparse_wino *p) {
    if (!p) return;
    free(p->up);
    free(p->slot_base);
    free(p->zrow);
    free(p->tbuf);
    free(p->csums);
    free(p->cscale);
    free(p);
}

sdgp_isa sdgp_sparse_wino_isa(const sdgp_sparse_wino *p) { return p ? p->k.isa : SDGP_ISA_REF; }

void spwino_describe(const sdgp_sparse_wino *p, char *buf, size_t size) {
    snprintf(buf, size, "nr=%d kc=%d unit=%lld images (%lld tiles)", p->nr, p->kc, (long long)p->ib, (long long)(p->ib * p->T));
}

/* U[e][k][c] = (G g' G^T)[e], g' = rot180(w[k][c]), for one output channel k and one column
 * block at a time, vectorised along c: the 9 taps are gathered into rows first (w is OIHW: the
 * taps of one (k, c) are contiguous), then G's rows and columns are applied as whole-row FMAs, and
 * each U row is written contiguously into its panel. */
sdgp_status sdgp_sparse_wino_pack(sdgp_sparse_wino *p, const float *w, sdgp_error *err) {
    if (!p || !w) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_wino_pack: NULL %s", p ? "weights" : "plan");
    const int64_t Cin = p->g.Cin, Cout = p->g.Cout, ldp = p->ldp, nr = p->nr;
#pragma omp parallel for schedule(dynamic, 8) num_threads(p->threads)
    for (int64_t k = 0; k < Cout; k++) {
        float gk[3][3][SPCONV_MAX_NR], t[4][3][SPCONV_MAX_NR];
        for (int nb = 0; nb < p->nblocks; nb++) {
            const int64_t c0 = (int64_t)nb * nr, nc = Cin - c0 < nr ? Cin - c0 : nr;
            const float *src = w + (k * Cin + c0) * 9;
            for (int64_t c = 0; c < nc; c++)
                for (int i = 0; i < 3; i++)
                    for (int j = 0; j < 3; j++) gk[i][j][c] = src[c * 9 + (2 - i) * 3 + (2 - j)];
            for (int a = 0; a < 4; a++)
                for (int j = 0; j < 3; j++) {
                    const float g0 = (float)gm[a][0], g1 = (float)gm[a][1], g2 = (float)gm[a][2];
                    for (int64_t c = 0; c < nc; c++) t[a][j][c] = g0 * gk[0][j][c] + g1 * gk[1][j][c] + g2 * gk[2][j][c];
                }
            for (int a = 0; a < 4; a++)
                for (int b = 0; b < 4; b++) {
                    const float g0 = (float)gm[b][0], g1 = (float)gm[b][1], g2 = (float)gm[b][2];
                    float *restrict dst = p->up + (((int64_t)(a * 4 + b) * p->nblocks + nb) * Cout + k) * ldp;
                    for (int64_t c = 0; c < nc; c++) dst[c] = g0 * t[a][0][c] + g1 * t[a][1][c] + g2 * t[a][2][c];
                }
        }
    }
    p->packed = 1;
    return SDGP_OK;
}

/* The pruning of one call: function, key, and for the channel scope the global factors. */
typedef struct {
    const sdgp_prune_cfg *cfg;
    sdgp_philox_key key;
    int identity; /* n == m: every value kept (fn NONE needs such a plan) */
    int block;    /* tiles of a tile row sharing one mask (1: a mask per row) */
    const prune_kernels *pk; /* the plan's ISA kernels, or the shared-mask ones */
    const float *cscale;
} wino_prune;

/* A prune job over the rows of V_e of images b .. b+nimg-1 (x: nimg x T x Cout, contiguous, as V's
 * rows are for a fixed e) into vals/idx, as sdgp_prune would prune those rows of the whole
 * (16*B) x T x Cout tensor. */
static prune_job images_job(const sdgp_sparse_wino *p, const wino_prune *wp, const float *x, float *vals, uint8_t *idx,
                            int64_t b, int64_t nimg, int e) {
    prune_job j;
    memset(&j, 0, sizeof j);
    j.fn = wp->cfg->fn;
    j.axis = SDGP_AXIS_CHANNEL;
    j.n = p->n;
    j.m = p->m;
    j.B = nimg;
    j.P = p->T;
    j.rows = nimg * p->T;
    j.C = p->g.Cout;
    j.x = x;
    j.vals = vals;
    j.idx = idx;
    j.key = wp->key;
    j.group0 = (uint64_t)(((int64_t)e * p->g.B + b) * p->T) * (uint64_t)(p->g.Cout / p->m);
    j.block = wp->block;
    j.line = p->tw;
    j.rank = p->pk;
    return j;
}

/* Shared masks: the job makes the entries of its rows at ent (spwino_loops.block_entries) instead
 * of compressed rows; s holds where, and must live as long as the job. */
static void entries_job(const sdgp_sparse_wino *p, prune_job *j, spwino_sink *s, spconv_entry *ent) {
    *s = (spwino_sink){.ent = ent, .slots = p->slots, .row_bytes = (uint32_t)(p->ldp * sizeof(float))};
    j->emit = p->loops->block_entries;
    j->emit_ctx = s;
    j->vals = NULL;
    j->idx = NULL;
}

/* Prunes the V_e rows of images b .. b+nimg-1: one call for all of them (fewer per-call set-ups),
 * but image by image for rescaled with the sample-channel scope, whose factors are per image.
 * ent non-NULL (shared masks, n < m): the entries of the rows straight into ent, not vals/idx.
 * Returns 1 on a non-finite value (MVUE, rescaled). */
static int prune_images(const sdgp_sparse_wino *p, const wino_prune *wp, unsigned char *tb, const float *x, float *vals,
                        uint8_t *idx, spconv_entry *ent, int64_t b, int64_t nimg, int e) {
    const int64_t C = p->g.Cout, T = p->T, slots = p->slots;
    prune_job j = images_job(p, wp, x, vals, idx, b, nimg, e);
    spwino_sink sink;
    if (ent) entries_job(p, &j, &sink, ent);
    if (wp->identity) {
        prune_identity_rows(&j, 0, j.rows);
        return 0;
    }
    if (wp->cfg->fn != SDGP_PRUNE_RESCALED) return wp->pk->prune(&j, 0, j.rows);
    j.scale_bstride = 0;
    if (wp->cscale) { /* channel scope: factors of the whole call */
        j.scale = wp->cscale;
        return wp->pk->prune(&j, 0, j.rows);
    }
    /* sample-channel scope, per image: its sums (leaving keep masks), its factors, then its rows */
    double *dense = (double *)(tb + p->o_dense), *kept = (double *)(tb + p->o_kept);
    float *scale = (float *)(tb + p->o_scale);
    int bad = 0;
    for (int64_t i = 0; i < nimg; i++) {
        prune_job ji = images_job(p, wp, x + i * T * C, vals + i * T * slots, idx + i * T * slots, b + i, 1, e);
        if (ent) entries_job(p, &ji, &sink, ent + i * T * slots);
        ji.keep = (uint16_t *)(tb + p->o_keep);
        ji.keep_r0 = 0;
        wp->pk->sums(&ji, 0, dense, kept);
        for (int64_t c = 0; c < C; c++) {
            bad |= !isfinite(dense[c]);
            scale[c] = prune_rescale_factor(dense[c], kept[c]);
        }
        ji.scale = scale;
        bad |= wp->pk->prune(&ji, 0, T);
    }
    return bad;
}

/* Rescaled, channel scope: one factor per output channel over every (e, b, tile), from per-image
 * sums added in (e, b) order, as sdgp_prune adds its per-sample sums. Returns 1 on non-finite. */
static int channel_scope_factors(sdgp_sparse_wino *p, const wino_prune *wp, const float *dO) {
    const int64_t B = p->g.B, C = p->g.Cout;
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads)
    for (int64_t eb = 0; eb < WE * B; eb++) {
        unsigned char *tb = p->tbuf + (size_t)omp_get_thread_num() * p->tbytes;
        float *v = (float *)tb;
        const int e = (int)(eb / B);
        const int64_t b = eb % B;
        p->loops->transform(p, v, dO, b, e);
        prune_job j = images_job(p, wp, v, NULL, NULL, b, 1, e);
        j.keep = (uint16_t *)(tb + p->o_keep);
        wp->pk->sums(&j, 0, p->csums + eb * 2 * C, p->csums + (eb * 2 + 1) * C);
    }
    int bad = 0;
    for (int64_t c = 0; c < C; c++) {
        double d = 0, k = 0;
        for (int64_t eb = 0; eb < WE * B; eb++) {
            d += p->csums[eb * 2 * C + c];
            k += p->csums[(eb * 2 + 1) * C + c];
        }
        bad |= !isfinite(d);
        p->cscale[c] = prune_rescale_factor(d, k);
    }
    return bad;
}

/* The call t (all rows of the unit) with shared masks: blocks of `block` tiles along each tile
 * row, each split evenly into calls of at most spconv_shared_nx pixels; one call covers the same
 * columns of every tile row of the unit (ny = rows / tw lines). */
static void gemm_shared(const sdgp_sparse_wino *p, const spconv_tile *all, int block, int64_t nimg) {
    const int nxmax = spconv_shared_nx(&p->k, all->ncols);
    spconv_tile t = *all;
    t.ny = (int)(nimg * p->th);
    t.dd_sy = p->tw * all->dd_sx;
    t.e_sy = p->tw * all->e_sx;
    for (int x0 = 0; x0 < p->tw; x0 += block) {
        const int len = p->tw - x0 < block ? p->tw - x0 : block, parts = (len + nxmax - 1) / nxmax;
        for (int part = 0; part < parts; part++) {
            const int s0 = x0 + len * part / parts, s1 = x0 + len * (part + 1) / parts;
            t.dd = all->dd + s0 * all->dd_sx;
            t.ent = all->ent + s0 * all->e_sx;
            t.nx = s1 - s0;
            p->k.tile_shared(&t);
        }
    }
}

/* One work unit: images [b0, b1). First every element's V rows are transformed, pruned and
 * packed into entries (all 16 elements: the GEMMs below reread them once per column block); then
 * per column block the four rows a of A^T (.) A accumulate into dD, whose column block stays in
 * cache across them while the U panels stream through. Returns 1 on a non-finite value met by
 * the pruning. */
static int run_unit(const sdgp_sparse_wino *p, const wino_prune *wp, float *dD, const float *dO, int64_t b0, int64_t b1) {
    /* Row a = 1 of A^T reaches both output rows of a tile, so it goes first and stores: no zeroing. */
    static const int row_order[4] = {1, 0, 2, 3};
    const sdgp_conv_geom *g = &p->g;
    const int64_t C = g->Cout, T = p->T, nimg = b1 - b0, rows = nimg * T;
    const int64_t slots = p->slots;
    unsigned char *tb = p->tbuf + (size_t)omp_get_thread_num() * p->tbytes;
    float *v = (float *)tb, *vals = (float *)(tb + p->o_vals), *M = (float *)(tb + p->o_mbuf);
    uint8_t *idx = tb + p->o_idx;
    spconv_entry *ent = (spconv_entry *)(tb + p->o_ent);
    const uint32_t row_bytes = (uint32_t)(p->ldp * sizeof(float));
    int bad = 0;
    /* shared masks: the block pruning makes the entries itself (no compressed copy) */
    const int fused = wp->block > 1 && !wp->identity;
    for (int e = 0; e < WE; e++) {
        spconv_entry *ent_e = ent + e * rows * slots;
        for (int64_t i = 0; i < nimg; i++) p->loops->transform(p, v + i * T * C, dO, b0 + i, e);
        bad |= prune_images(p, wp, tb, v, vals, idx, fused ? ent_e : NULL, b0, nimg, e);
        if (!fused) p->loops->entries(ent_e, vals, idx, p->slot_base, rows, slots, slots, row_bytes);
    }
    for (int nb = 0; nb < p->nblocks; nb++) {
        const int64_t c0 = (int64_t)nb * p->nr, ncols = g->Cin - c0 < p->nr ? g->Cin - c0 : p->nr;
        for (int ai = 0; ai < 4; ai++) {
            const int a = row_order[ai];
            for (int bb = 0; bb < WROW; bb++) {
                const int e = 4 * a + bb;
                const float *panel = p->up + ((int64_t)e * p->nblocks + nb) * C * p->ldp;
                for (int64_t k0 = 0; k0 < C; k0 += p->kc) {
                    const int64_t kc = C - k0 < p->kc ? C - k0 : p->kc;
                    const int64_t tap_ent = k0 / p->m * p->n;
                    const float *tap_panel = panel;
                    spconv_tile t = {.dd = M + bb * rows * p->ldp, .dd_sx = p->ldp, .ent = ent + e * rows * slots, .e_sx = slots,
                                     .ntaps = 1, .tap_ent = &tap_ent, .tap_panel = &tap_panel, .ne = (int)(kc / p->m * p->n),
                                     .nx = (int)rows, .ny = 1, .nz = 1, .ncols = (int)ncols, .overwrite = k0 == 0};
                    if (wp->block > 1)
                        gemm_shared(p, &t, wp->block, nimg);
                    else
                        p->k.tile(&t);
                }
            }
            p->loops->scatter_row(p, dD, M, b0, nimg, a, c0, ncols, ai == 0);
        }
    }
    return bad;
}

sdgp_status sdgp_sparse_wino_data(sdgp_sparse_wino *p, float *dD, const float *dO, const sdgp_prune_cfg *cfg,
                                  sdgp_error *err) {
    if (!p || !dD || !dO || !cfg)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_wino_data: NULL %s", !p ? "plan" : !dD ? "dD" : !dO ? "dO" : "cfg");
    if (!p->packed) return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_wino_data: weights not packed (call sdgp_sparse_wino_pack)");
    if (cfg->n != p->n || cfg->m != p->m || cfg->axis != SDGP_AXIS_CHANNEL)
        return sdgp_fail(err, SDGP_ERR_INVALID, "sparse_wino_data: pruning %d:%d along %s, but the plan was made for %d:%d along channels",
                         cfg->n, cfg->m, cfg->axis == SDGP_AXIS_CHANNEL ? "channels" : "rows", p->n, p->m);
    if (cfg->layout != SDGP_LAYOUT_NHWC)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "sparse_wino_data: dO and dD are NHWC (cfg->layout must be NHWC)");
    /* blocks are tiles of a tile row: the line is tw whatever the caller's (pixel) line */
    sdgp_prune_cfg vcfg = *cfg;
    vcfg.mask_line = p->tw;
    sdgp_status st = sdgp_prune_check(&vcfg, (int64_t)WE * p->g.B, p->T, p->g.Cout, err);
    if (st != SDGP_OK) return st;
    if (cfg->fn == SDGP_PRUNE_NONE && cfg->n != cfg->m)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "sparse_wino_data: fn none keeps every value, so it needs a plan with n = m (this one is %d:%d)", p->n, p->m);
    wino_prune wp = {.cfg = cfg, .key = sdgp_philox_make_key(cfg->seed, cfg->step, cfg->layer), .identity = cfg->n == cfg->m,
                     .block = cfg->mask_block > 1 ? cfg->mask_block : 1};
    wp.pk = wp.block > 1 ? &prune_kernels_block : p->pk;
    int bad = 0;
    if (!wp.identity && cfg->fn == SDGP_PRUNE_RESCALED && cfg->scope == SDGP_SCOPE_CHANNEL) {
        if (!p->csums) {
            p->csums = malloc((size_t)WE * p->g.B * 2 * p->g.Cout * sizeof(double));
            p->cscale = malloc((size_t)p->g.Cout * sizeof(float));
            if (!p->csums || !p->cscale)
                return sdgp_fail(err, SDGP_ERR_NOMEM, "sparse_wino_data: out of memory for the channel-scope sums");
        }
        bad = channel_scope_factors(p, &wp, dO);
        wp.cscale = p->cscale;
    }
    const int64_t nunits = (p->g.B + p->ib - 1) / p->ib;
    if (!bad) {
#pragma omp parallel for schedule(dynamic, 1) num_threads(p->threads) reduction(| : bad)
        for (int64_t u = 0; u < nunits; u++) {
            const int64_t b0 = u * p->ib, b1 = b0 + p->ib < p->g.B ? b0 + p->ib : p->g.B;
            bad |= run_unit(p, &wp, dD, dO, b0, b1);
        }
    }
    if (bad)
        return sdgp_fail(err, SDGP_ERR_NUMERIC, "sparse_wino_data: %s met a NaN or Inf in the transformed dL/dO (layer %u)",
                         sdgp_prune_fn_name(cfg->fn), cfg->layer);
    return SDGP_OK;
}
