/* Row masks shared by channels (axis ROW, cfg->mask_block = Q > 1; include/sdgp/prune.h states the
 * rules): Q consecutive channels keep the same n of every m consecutive rows, the form a
 * weight-gradient kernel could skip at speed (one loaded input row then feeds Q FMAs). Portable C,
 * dense output only: it is the estimator to train with before such a kernel exists
 * (docs/sparse-weights.md, "The weight gradient's mask form"). */
#include <math.h>

#include "prune/prune_internal.h"

/* Row groups [t0, t1), every block of Q channels of each. */
static int prune_rows_shared(const prune_job *j, int64_t t0, int64_t t1) {
    const int n = j->n, m = j->m, Q = j->block;
    const int64_t C = j->C;
    for (int64_t g = t0; g < t1; g++) {
        const float *x = j->x + g * m * C;
        float *y = j->out + g * m * C;
        for (int64_t c0 = 0; c0 < C; c0 += Q) {
            const uint64_t group = (uint64_t)g * (uint64_t)C + (uint64_t)c0; /* the block's first channel's group */
            double inv[SDGP_NM_MAX_M];
            uint64_t mask = 0;
            if (j->fn == SDGP_PRUNE_RANDOM) {
                mask = prune_random_mask(j->key, group, n, m);
            } else if (j->fn == SDGP_PRUNE_MVUE) {
                double a[SDGP_NM_MAX_M];
                for (int i = 0; i < m; i++) { /* the block's L2 norm of row i, in double, channel order */
                    double s2 = 0;
                    for (int q = 0; q < Q; q++) s2 += (double)x[i * C + c0 + q] * (double)x[i * C + c0 + q];
                    if (!isfinite(s2)) return 1;
                    a[i] = sqrt(s2);
                }
                mask = prune_mvue_block_mask(inv, a, n, m, prune_group_u(j->key, group, 0));
            } else { /* magnitude: the block's summed |x| per row (float, channel order) */
                float s[SDGP_NM_MAX_M];
                for (int i = 0; i < m; i++) {
                    s[i] = 0;
                    for (int q = 0; q < Q; q++) s[i] += fabsf(x[i * C + c0 + q]);
                }
                mask = prune_magnitude_mask(s, n, m);
            }
            for (int i = 0; i < m; i++) {
                const float *xr = x + i * C + c0;
                float *yr = y + i * C + c0;
                if (!(mask >> i & 1))
                    for (int q = 0; q < Q; q++) yr[q] = 0.0f;
                else if (j->fn == SDGP_PRUNE_MVUE)
                    for (int q = 0; q < Q; q++) yr[q] = (float)((double)xr[q] * inv[i]);
                else
                    for (int q = 0; q < Q; q++) yr[q] = xr[q];
            }
        }
    }
    return 0;
}

const prune_kernels prune_kernels_rowblock = {.prune = prune_rows_shared};
