/* Portable reference kernels: one group at a time through the decisions of prune_group.c.
 * They are the fallback of the SIMD paths and the oracle the SIMD paths are tested against. */
#include <math.h>
#include <string.h>

#include "prune/prune_internal.h"

/* y[0..m) = the pruned group x[0..m) (gathered), sc[0..m) the rescale factors (RESCALED only).
 * Returns 1 on a non-finite value in an MVUE group. */
static int group_apply(const prune_job *j, uint64_t group, const float *x, const float *sc, float *y) {
    const int n = j->n, m = j->m;
    uint64_t mask;
    switch (j->fn) {
    case SDGP_PRUNE_RANDOM:
        mask = prune_random_mask(j->key, group, n, m);
        for (int i = 0; i < m; i++) y[i] = mask >> i & 1 ? x[i] : 0.0f;
        return 0;
    case SDGP_PRUNE_MAGNITUDE:
        mask = prune_magnitude_mask(x, n, m);
        for (int i = 0; i < m; i++) y[i] = mask >> i & 1 ? x[i] : 0.0f;
        return 0;
    case SDGP_PRUNE_RESCALED:
        mask = prune_magnitude_mask(x, n, m);
        for (int i = 0; i < m; i++) y[i] = mask >> i & 1 ? x[i] * sc[i] : 0.0f;
        return 0;
    case SDGP_PRUNE_MVUE:
        return prune_mvue_group(y, x, n, m, prune_group_u(j->key, group, 0));
    case SDGP_PRUNE_MVUE_APPROX: {
        sdgp_philox_ctr w = sdgp_philox_draw(j->key, group, 0);
        return prune_mvue_approx_group(y, x, sdgp_u01d(w.v[0]), sdgp_u01d(w.v[1]));
    }
    default: /* NONE and n == m never reach the kernels */
        memcpy(y, x, (size_t)m * sizeof *y);
        return 0;
    }
}

/* Channel axis: rows [r0, r1), groups are contiguous. */
static int ref_channel(const prune_job *j, int64_t r0, int64_t r1) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C, G = C / m, slots = G * n;
    float y[SDGP_NM_MAX_M], sc[SDGP_NM_MAX_M];
    int bad = 0;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C;
        const float *scale = j->scale ? j->scale + (r / j->P) * j->scale_bstride : NULL;
        for (int64_t g = 0; g < G; g++) {
            if (scale) memcpy(sc, scale + g * m, (size_t)m * sizeof *sc);
            bad |= group_apply(j, j->group0 + (uint64_t)(r * G + g), xr + g * m, sc, y);
            if (j->out) memcpy(j->out + r * C + g * m, y, (size_t)m * sizeof *y);
            if (j->vals) prune_compress_group(j->vals + r * slots + g * n, j->idx + r * slots + g * n, 1, y, n, m);
        }
    }
    return bad;
}

/* Row axis: row groups [g0, g1); group (g, c) is rows g*m..g*m+m-1 of channel c. */
static int ref_row(const prune_job *j, int64_t g0, int64_t g1) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C;
    float x[SDGP_NM_MAX_M], y[SDGP_NM_MAX_M], sc[SDGP_NM_MAX_M];
    int bad = 0;
    for (int64_t g = g0; g < g1; g++) {
        const int64_t r0 = g * m;
        for (int64_t c = 0; c < C; c++) {
            for (int k = 0; k < m; k++) {
                x[k] = j->x[(r0 + k) * C + c];
                if (j->scale) sc[k] = j->scale[((r0 + k) / j->P) * j->scale_bstride + c];
            }
            bad |= group_apply(j, j->group0 + (uint64_t)(g * C + c), x, sc, y);
            if (j->out)
                for (int k = 0; k < m; k++) j->out[(r0 + k) * C + c] = y[k];
            if (j->vals) prune_compress_group(j->vals + g * n * C + c, j->idx + g * n * C + c, C, y, n, m);
        }
    }
    return bad;
}

int prune_ref_prune(const prune_job *j, int64_t t0, int64_t t1) {
    return j->axis == SDGP_AXIS_CHANNEL ? ref_channel(j, t0, t1) : ref_row(j, t0, t1);
}

void prune_ref_sums(const prune_job *j, int64_t b, double *dense, double *kept) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C, rb = b * j->P, re = rb + j->P;
    for (int64_t c = 0; c < C; c++) dense[c] = kept[c] = 0.0;
    if (j->axis == SDGP_AXIS_CHANNEL) {
        for (int64_t r = rb; r < re; r++) {
            const float *xr = j->x + r * C;
            for (int64_t c0 = 0; c0 < C; c0 += m) {
                uint64_t mask = prune_magnitude_mask(xr + c0, n, m);
                for (int i = 0; i < m; i++) {
                    double a = fabs((double)xr[c0 + i]);
                    dense[c0 + i] += a;
                    kept[c0 + i] += mask >> i & 1 ? a : 0.0;
                }
            }
        }
        return;
    }
    /* Row axis: every group touching the sample's rows, accumulating only those rows (a group
     * may straddle two samples when P % m != 0); per channel the order is still row order. */
    float x[SDGP_NM_MAX_M];
    for (int64_t g = rb / m; g * m < re; g++) {
        for (int64_t c = 0; c < C; c++) {
            for (int k = 0; k < m; k++) x[k] = j->x[(g * m + k) * C + c];
            uint64_t mask = prune_magnitude_mask(x, n, m);
            for (int k = 0; k < m; k++) {
                int64_t r = g * m + k;
                if (r < rb || r >= re) continue;
                double a = fabs((double)x[k]);
                dense[c] += a;
                kept[c] += mask >> k & 1 ? a : 0.0;
            }
        }
    }
}

const prune_kernels prune_kernels_ref = {.prune = prune_ref_prune, .sums = prune_ref_sums};
