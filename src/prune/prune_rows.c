/* Pruning on demand, a piece of rows at a time (prune_internal.h, prune_rows): a kernel's packing
 * prunes the dL/dO rows it is about to pack, from any thread and in any order, so dL/dO is read once
 * and no compressed tensor is written to memory and read back. Each piece is pruned by the same
 * kernel table as sdgp_prune, with the piece's Philox counter (group0) and rescale factors, so its
 * slots are bitwise those of sdgp_prune for the same rows. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "prune/prune_internal.h"

sdgp_status prune_rows_init(prune_rows *pr, const sdgp_prune_cfg *cfg, const float *x, int64_t B, int64_t P, int64_t C,
                            sdgp_error *err) {
    memset(pr, 0, sizeof *pr);
    sdgp_status st = sdgp_prune_check(cfg, B, P, C, err);
    if (st != SDGP_OK) return st;
    if (!x) return sdgp_fail(err, SDGP_ERR_INVALID, "prune rows: x is NULL");
    if (cfg->axis != SDGP_AXIS_CHANNEL || cfg->layout != SDGP_LAYOUT_NHWC)
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "pruning inside a kernel's packing takes masks along channels of NHWC rows (got the %s axis, %s layout)",
                         cfg->axis == SDGP_AXIS_ROW ? "row" : "channel", cfg->layout == SDGP_LAYOUT_NCHW ? "NCHW" : "NHWC");
    sdgp_isa isa;
    if ((st = sdgp_isa_resolve(cfg->isa, &isa, err)) != SDGP_OK) return st;
    prune_job *j = &pr->job;
    j->fn = cfg->fn;
    j->axis = SDGP_AXIS_CHANNEL;
    j->n = cfg->n;
    j->m = cfg->m;
    j->B = B, j->P = P, j->C = C, j->rows = B * P;
    j->x = x;
    j->key = sdgp_philox_make_key(cfg->seed, cfg->step, cfg->layer);
    j->layout = SDGP_LAYOUT_NHWC;
    pr->identity = cfg->fn == SDGP_PRUNE_NONE || cfg->n == cfg->m;
    pr->K = prune_kernels_for(isa);
    if (cfg->mask_block > 1) { /* sdgp_prune's shared masks: its block table, ranking with this ISA's kernels */
        j->rank = pr->K;
        pr->K = &prune_kernels_block;
        j->block = cfg->mask_block;
        j->line = cfg->mask_line ? cfg->mask_line : P;
    }
    pr->fn_name = sdgp_prune_fn_name(cfg->fn);
    if (pr->identity || cfg->fn != SDGP_PRUNE_RESCALED) return SDGP_OK;

    /* Rescaled: the factors need every row of a scope before any kept value, so the first pass
     * (sums, factors, and the keep masks the second pass would otherwise rank again) runs here,
     * on the whole tensor, as sdgp_prune's channel-scope path runs it. */
    const int nt = cfg->threads > 0 ? cfg->threads : omp_get_max_threads();
    const int64_t W = (C + 15) / 16, nscale = cfg->scope == SDGP_SCOPE_CHANNEL ? C : B * C;
    double *dense = malloc((size_t)(B * C) * sizeof *dense), *kept = malloc((size_t)(B * C) * sizeof *kept);
    pr->scale = malloc((size_t)nscale * sizeof *pr->scale);
    if (cfg->mask_block <= 1) pr->keep = malloc((size_t)(B * P * W) * sizeof *pr->keep); /* blocks decide again, per block */
    if (!dense || !kept || !pr->scale || (cfg->mask_block <= 1 && !pr->keep)) {
        free(dense);
        free(kept);
        prune_rows_free(pr);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "prune rows: rescale sums of %lld x %lld and keep masks of %lld rows", (long long)B,
                         (long long)C, (long long)(B * P));
    }
    j->keep = pr->keep;
    j->keep_r0 = 0;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t b = 0; b < B; b++) pr->K->sums(j, b, dense + b * C, kept + b * C);
    const int finite = prune_scope_factors(dense, kept, B, C, cfg->scope, pr->scale);
    free(dense);
    free(kept);
    j->scale = pr->scale;
    j->scale_bstride = cfg->scope == SDGP_SCOPE_CHANNEL ? 0 : C;
    if (!finite) {
        st = prune_numeric_error(j, "rescaled", err);
        prune_rows_free(pr);
    }
    return st;
}

int prune_rows_run(const prune_rows *pr, int64_t r0, int64_t r1, float *vals, uint8_t *idx) {
    const prune_job *whole = &pr->job;
    const int64_t C = whole->C, P = whole->P, G = C / whole->m, slots = G * whole->n, W = (C + 15) / 16;
    int bad = 0;
    /* pieces within one sample: the rows of a piece share the sample's rescale factors */
    for (int64_t r = r0, e; r < r1; r = e) {
        e = (r / P + 1) * P < r1 ? (r / P + 1) * P : r1;
        prune_job j = *whole;
        j.x = whole->x + r * C;
        j.rows = e - r;
        j.B = 1;
        j.group0 = whole->group0 + (uint64_t)(r * G);
        j.vals = vals + (r - r0) * slots;
        j.idx = idx + (r - r0) * slots;
        if (whole->scale) j.scale = whole->scale + (r / P) * whole->scale_bstride;
        if (whole->keep) j.keep = whole->keep + r * W; /* the piece's row 0 is keep row r */
        if (pr->identity) prune_identity_rows(&j, 0, e - r);
        else bad |= pr->K->prune(&j, 0, e - r);
    }
    return bad;
}

sdgp_status prune_rows_check(const prune_rows *pr, int bad, sdgp_error *err) {
    return bad ? prune_numeric_error(&pr->job, pr->fn_name, err) : SDGP_OK;
}

void prune_rows_free(prune_rows *pr) {
    free(pr->scale);
    free(pr->keep);
    pr->scale = NULL;
    pr->keep = NULL;
}
