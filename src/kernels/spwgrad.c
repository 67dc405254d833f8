/* The N:M sparse weight gradient: plan, slots of a run, packing of the input block, work split
 * (the micro-kernels: spwgrad_<isa>.c; contract: spwgrad_internal.h; design: README.md). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "core/transpose.h"
#include "kernels/spconv_internal.h"
#include "kernels/spwgrad_internal.h"

static const spwgrad_kernels kernel_table[SDGP_ISA_COUNT] = {
    /* The permute form's blocking: AVX-512: 2 x 8 zmm accumulators + 8 input rows + index, value,
     * permute of 32 registers; AVX2: 2 x 4 ymm (one vector of 16 is two) + 4 input rows + 3 of 16.
     * The rows form (spwgrad_rows.c) runs instead where the table has one: on AVX2 everywhere, on
     * AVX-512 on stride-1 layers of 3x3 kernels or larger only. AVX-512's permute form is faster on
     * 1x1 layers (the rows form's call then has 2 zmm accumulators: 2 FMAs per entry, 2 chains)
     * and measured no slower on strided ones (spwgrad.md has the figures). */
    [SDGP_ISA_REF] = {.isa = SDGP_ISA_REF, .tile = spwgrad_tile_ref, .block = 16, .r = 2, .nc = 8},
    [SDGP_ISA_AVX2] = {.isa = SDGP_ISA_AVX2, .tile = spwgrad_tile_avx2, .block = 8, .r = 1, .nc = 4,
                       .rows = spwgrad_rows_avx2, .rows_acc = 12},
    [SDGP_ISA_AVX512] = {.isa = SDGP_ISA_AVX512, .tile = spwgrad_tile_avx512, .block = 16, .r = 2, .nc = 8,
                         .rows = spwgrad_rows_avx512, .rows_acc = 36, .rows_min_taps = 9, .rows_max_stride = 1},
};

static const char WHO[] = "sparse weight gradient";

void sdgp_sparse_wgrad_destroy(sdgp_sparse_wgrad *p) {
    if (!p) return;
    free(p->dwt);
    free(p->zrow);
    free(p->tbuf);
    free(p->xpad_own);
    free(p->dwr);
    free(p->ent);
    free(p);
}

sdgp_isa sdgp_sparse_wgrad_isa(const sdgp_sparse_wgrad *p) { return p ? p->k.isa : SDGP_ISA_REF; }

/* allow_rows 0: the permute form even where the ISA has the rows form (spwgrad_create_permute_form) */
static sdgp_status create_plan(sdgp_sparse_wgrad **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa, int threads,
                               int allow_rows, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL output", WHO);
    *out = NULL;
    sdgp_status st = sparse_check_geometry(WHO, g, n, m, err);
    if (st != SDGP_OK) return st;
    if (g->groups > 1) return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s: grouped convolutions (groups=%d)", WHO, g->groups);
    if (8 % m)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED, "%s: m=%d (the kernel permutes within blocks of 8 rows: m = 1, 2, 4 or 8)",
                         WHO, m);
    const int64_t rows = (int64_t)g->B * g->Ho * g->Wo;
    if (rows % m)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: %lld positions (B*Ho*Wo) are not a multiple of m=%d", WHO,
                         (long long)rows, m);
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: threads=%d < 0", WHO, threads);
    sdgp_isa resolved;
    if ((st = sdgp_isa_resolve(isa, &resolved, err)) != SDGP_OK) return st;

    sdgp_sparse_wgrad *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", WHO);
    p->g = *g;
    p->n = n;
    p->m = m;
    p->threads = threads ? threads : omp_get_max_threads();
    p->k = kernel_table[resolved];
    p->rows = rows;
    p->taps = g->kh * g->kw;
    p->cop = (g->Cout + 15) / 16 * 16;
    p->xt_sc = SPWGRAD_RUN;
    if (!allow_rows || p->taps < p->k.rows_min_taps || (p->k.rows_max_stride && g->stride > p->k.rows_max_stride))
        p->k.rows = NULL;
    if (p->k.rows) { /* the rows form, unless its pixel indices do not fit 32 bits */
        if (spwgrad_rows_setup(p)) {
            *out = p;
            return SDGP_OK;
        }
        if (p->xpad_floats > 0) { /* the indices fit: the sums' allocation failed */
            sdgp_sparse_wgrad_destroy(p);
            return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for the sums", WHO);
        }
        p->k.rows = NULL;
    }
    int c0, c1, cmax = 0;
    for (int t = 0; t < p->threads; t++) {
        spwgrad_range(g->Cin, p->threads, t, &c0, &c1); /* input channels */
        if (c1 - c0 > cmax) cmax = c1 - c0;
    }
    p->vs = (int64_t)SPWGRAD_RUN / m * n * 16;
    const size_t slots = (size_t)p->vs * (p->cop / 16);
    p->o_val = sdgp_align64((size_t)cmax * p->xt_sc * sizeof(float));
    p->o_pick = p->o_val + sdgp_align64(slots * sizeof(float));
    p->o_rows = p->o_pick + sdgp_align64(slots * sizeof(int32_t));
    p->tbytes = p->o_rows + sdgp_align64(SPWGRAD_RUN * sizeof(float *));
    const size_t dwt_bytes = (size_t)p->taps * g->Cin * p->cop * sizeof(float);
    if (posix_memalign((void **)&p->dwt, 64, dwt_bytes)) p->dwt = NULL;
    if (posix_memalign((void **)&p->tbuf, 64, p->tbytes * p->threads)) p->tbuf = NULL;
    p->zrow = calloc((size_t)g->Cin, sizeof(float));
    if (!p->dwt || !p->tbuf || !p->zrow) {
        sdgp_sparse_wgrad_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for the sums (%zu MB)", WHO, dwt_bytes >> 20);
    }
    *out = p;
    return SDGP_OK;
}

sdgp_status sdgp_sparse_wgrad_create(sdgp_sparse_wgrad **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                     int threads, sdgp_error *err) {
    return create_plan(out, g, n, m, isa, threads, 1, err);
}

sdgp_status spwgrad_create_permute_form(sdgp_sparse_wgrad **out, const sdgp_conv_geom *g, int n, int m, sdgp_isa isa,
                                        int threads, sdgp_error *err) {
    return create_plan(out, g, n, m, isa, threads, 0, err);
}

/* The run's slots (from slot row s0, ns of them) as the kernel reads them: values and picks (the
 * kept row's place in the kernel's block of rows), per vector of 16 channels its slots in order
 * (vs floats apart), zero past Cout. Returns the first slot (s0 + s) * Cout + c whose index is
 * >= m, or INT64_MAX; such a slot picks the group's first row. */
static int64_t run_slots(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int64_t s0, int ns, float *val,
                         int32_t *pick) {
    const int C = p->g.Cout, n = p->n, m = p->m, block = p->k.block;
    int64_t bad = INT64_MAX;
    for (int s = 0; s < ns; s++) {
        const float *v = dy->values + (s0 + s) * C;
        const uint8_t *ix = dy->index + (s0 + s) * C;
        const int at = s / n * m % block; /* s0 starts a run: a multiple of every block */
        for (int c = 0; c < p->cop; c++) {
            const int64_t e = c / 16 * p->vs + 16 * s + c % 16;
            const int i = c < C ? ix[c] : 0;
            if (i >= m && bad == INT64_MAX) bad = (s0 + s) * C + c;
            val[e] = c < C ? v[c] : 0.0f;
            pick[e] = at + (i < m ? i : 0);
        }
    }
    return bad;
}

/* Thread t's input channels over every run and tap; returns the first bad slot (run_slots). */
static int64_t run_thread(const sdgp_sparse_wgrad *p, const float *x, const sdgp_nm_tensor *dy, int t) {
    const sdgp_conv_geom *g = &p->g;
    int c0, c1;
    spwgrad_range(g->Cin, p->threads, t, &c0, &c1); /* input channels */
    if (c0 == c1) return INT64_MAX;
    unsigned char *buf = p->tbuf + p->tbytes * t;
    float *xt = (float *)buf, *val = (float *)(buf + p->o_val);
    int32_t *pick = (int32_t *)(buf + p->o_pick);
    const float **rows = (const float **)(buf + p->o_rows);
    const int64_t HoWo = (int64_t)g->Ho * g->Wo, per_tap = (int64_t)g->Cin * p->cop;
    const transpose_rows_fn pack = transpose_rows_for(p->k.isa);
    const int nvec = (int)(p->cop / 16), rmax = p->k.r, ncmax = p->k.nc;
    int64_t bad = INT64_MAX;
    for (int64_t r0 = 0; r0 < p->rows; r0 += SPWGRAD_RUN) {
        const int nr = (int)(p->rows - r0 < SPWGRAD_RUN ? p->rows - r0 : SPWGRAD_RUN);
        const int64_t first_bad = run_slots(p, dy, r0 / p->m * p->n, nr / p->m * p->n, val, pick);
        if (first_bad < bad) bad = first_bad;
        for (int tap = 0; tap < p->taps; tap++) {
            const int i = tap / g->kw, j = tap % g->kw;
            /* the input pixel of row r0 + r at this tap; zeros in the padding and past the run up to
             * the vector of rows the kernel loads */
            const int nr16 = (nr + 15) / 16 * 16;
            for (int r = 0; r < nr16; r++) {
                const int64_t b = (r0 + r) / HoWo, q = (r0 + r) % HoWo;
                const int hi = (int)(q / g->Wo) * g->stride - g->pad + i, wi = (int)(q % g->Wo) * g->stride - g->pad + j;
                rows[r] = r < nr && hi >= 0 && hi < g->H && wi >= 0 && wi < g->W ? x + ((b * g->H + hi) * g->W + wi) * g->Cin
                                                                                 : p->zrow;
            }
            pack(xt, p->xt_sc, rows, c0, nr16, c1 - c0);
            for (int cb = c0; cb < c1; cb += ncmax)
                for (int v = 0; v < nvec; v += rmax) {
                    const int R = nvec - v < rmax ? nvec - v : rmax;
                    spwgrad_tile tl = {
                        .xt = xt + (cb - c0) * p->xt_sc,
                        .xt_sc = p->xt_sc,
                        .val = val + v * p->vs,
                        .pick = pick + v * p->vs,
                        .vs = p->vs,
                        .ng = nr / p->m,
                        .n = p->n,
                        .m = p->m,
                        .R = R,
                        .nc = c1 - cb < ncmax ? c1 - cb : ncmax,
                        .fresh = r0 == 0,
                        .acc = p->dwt + tap * per_tap + cb * p->cop + 16 * v,
                        .acc_sc = p->cop,
                    };
                    p->k.tile(&tl);
                }
        }
    }
    return bad;
}

size_t sdgp_sparse_wgrad_workspace_bytes(const sdgp_sparse_wgrad *p) {
    return p && p->k.rows ? (size_t)p->xpad_floats * sizeof(float) : 0;
}

sdgp_status sdgp_sparse_wgrad_set_workspace(sdgp_sparse_wgrad *p, void *ws, size_t bytes, sdgp_error *err) {
    if (!p) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL plan", WHO);
    if (ws && (bytes < sdgp_sparse_wgrad_workspace_bytes(p) || (uintptr_t)ws % 64))
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: workspace of %zu bytes at %p: needs %zu, 64-byte aligned", WHO, bytes, ws,
                         sdgp_sparse_wgrad_workspace_bytes(p));
    if (!p->k.rows) return SDGP_OK;
    free(p->xpad_own);
    p->xpad_own = NULL;
    p->xpad = ws; /* NULL: the plan's own, made at the next run */
    return SDGP_OK;
}

static sdgp_status bad_slot(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int64_t bad, sdgp_error *err) {
    return sdgp_fail(err, SDGP_ERR_INVALID, "%s: dL/dO slot (row %lld, channel %lld) has index %d >= m=%d", WHO,
                     (long long)(bad / p->g.Cout), (long long)(bad % p->g.Cout), dy->index[bad], p->m);
}

sdgp_status sdgp_sparse_wgrad_run(sdgp_sparse_wgrad *p, float *dw, const float *x, const sdgp_nm_tensor *dy,
                                  sdgp_error *err) {
    if (!p || !dw || !x || !dy)
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: NULL %s", WHO, !p ? "plan" : !dw ? "output" : !x ? "input" : "dL/dO");
    const sdgp_conv_geom *g = &p->g;
    if (dy->axis != SDGP_AXIS_ROW || dy->n != p->n || dy->m != p->m || dy->rows != p->rows || dy->C != g->Cout)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "%s: dL/dO is %s-axis %d:%d of %lld rows x %lld channels; the plan needs row-axis %d:%d of "
                         "%lld x %d (B*Ho*Wo x Cout)",
                         WHO, dy->axis == SDGP_AXIS_ROW ? "row" : "channel", dy->n, dy->m, (long long)dy->rows,
                         (long long)dy->C, p->n, p->m, (long long)p->rows, g->Cout);
    if (!dy->values || !dy->index) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: dL/dO has no buffers", WHO);
    if (p->k.rows) {
        if (!p->xpad) {
            if (posix_memalign((void **)&p->xpad_own, 64, (size_t)p->xpad_floats * sizeof(float))) p->xpad_own = NULL;
            if (!(p->xpad = p->xpad_own))
                return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory for the padded input (%lld MB)", WHO,
                                 (long long)(p->xpad_floats >> 18));
        }
        const int64_t bad = spwgrad_rows_run(p, dw, x, dy);
        return bad == INT64_MAX ? SDGP_OK : bad_slot(p, dy, bad, err);
    }
    int64_t bad = INT64_MAX;
#pragma omp parallel num_threads(p->threads) reduction(min : bad)
    /* a team smaller than asked (nested parallelism) runs the missing threads' ranges too */
    for (int t = omp_get_thread_num(); t < p->threads; t += omp_get_num_threads()) {
        const int64_t b = run_thread(p, x, dy, t);
        if (b < bad) bad = b;
    }
    if (bad != INT64_MAX) return bad_slot(p, dy, bad, err); /* every thread read every slot: any thread count names the same one */
    /* [taps][Cin][cop] -> OIHW */
    const int64_t per_tap = (int64_t)g->Cin * p->cop;
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int co = 0; co < g->Cout; co++)
        for (int ci = 0; ci < g->Cin; ci++)
            for (int tap = 0; tap < p->taps; tap++)
                dw[((int64_t)co * g->Cin + ci) * p->taps + tap] = p->dwt[tap * per_tap + (int64_t)ci * p->cop + co];
    return SDGP_OK;
}
