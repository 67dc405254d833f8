/* N:M sparse weights: the S-STE soft threshold and the SR-STE hard mask over groups of m input
 * channels (include/sdgp/nn.h; formulas and a worked example in docs/sparse-weights.md). */
#include <math.h>
#include <string.h>

#include "sdgp/nn.h"
#include "sdgp/prune.h"

const char *const sdgp_weights_kind_names[] = {"dense", "sste", "srste", NULL};
const char *const sdgp_weights_group_names[] = {"tap", "kernel", "block16", "block32", "cout", NULL};

/* Marks the n largest of size[0..m) in keep (ties: the lower index; a NaN size counts as the
 * largest, as in magnitude pruning, so it is kept and shows up downstream) and returns the
 * (n+1)-th largest size (0 when n == m). Partial selection: n+1 passes, cheap for the small n of
 * N:M patterns. */
static double select_top(const double *size, int n, int m, unsigned char *keep) {
    memset(keep, 0, (size_t)m);
    double next = 0;
    for (int pass = 0; pass <= n && pass < m; pass++) {
        int best = -1;
        for (int i = 0; i < m; i++) {
            if (keep[i]) continue;
            if (best < 0 || isnan(size[i]) > isnan(size[best]) || size[i] > size[best]) best = i;
        }
        if (pass == n) next = size[best];
        else keep[best] = 1;
    }
    return next;
}

/* One group of m scalar weights, w[i * stride] (a unit is one weight, its size |w|): S-STE's soft
 * threshold sign(w) max(|w| - t, 0) or SR-STE's hard mask on the kept ones, 0 elsewhere. */
static void project_scalars(float *out, const float *w, size_t stride, int n, int m, int sste, float scale) {
    double size[SDGP_NM_MAX_M] = {0};
    unsigned char keep[SDGP_NM_MAX_M];
    for (int i = 0; i < m; i++) size[i] = fabs((double)w[i * stride]);
    float th = (float)select_top(size, n, m, keep);
    for (int i = 0; i < m; i++) {
        float v = w[i * stride], kept = 0.0f;
        if (keep[i]) kept = !sste || isnan(v) ? v : copysignf(fmaxf(fabsf(v) - th, 0.0f), v);
        out[i * stride] = scale * kept;
    }
}

void sdgp_weights_project(float *out, const float *w, int cout, int cin, int taps, sdgp_weights_kind kind,
                          sdgp_weights_group group, int n, int m, float scale) {
    size_t per_out = (size_t)cin * (size_t)taps;
    if (kind == SDGP_WEIGHTS_DENSE || n >= m) {
        for (size_t i = 0; i < (size_t)cout * per_out; i++) out[i] = scale * w[i];
        return;
    }
    int sste = kind == SDGP_WEIGHTS_SSTE;
    if (group == SDGP_WGROUP_TAP) {
        /* Output channels are independent: any split over threads gives the same bits. */
#pragma omp parallel for schedule(static) if ((size_t)cout * per_out >= (1u << 16))
        for (int co = 0; co < cout; co++)
            for (int g = 0; g < cin; g += m)
                for (int t = 0; t < taps; t++) {
                    size_t at = (size_t)co * per_out + (size_t)g * taps + t;
                    project_scalars(out + at, w + at, (size_t)taps, n, m, sste, scale);
                }
        return;
    }
    if (group == SDGP_WGROUP_COUT) {
        /* The TAP rule along the other axis: groups of m output channels at each (input channel,
         * tap). Groups of output channels are independent: any split gives the same bits. */
#pragma omp parallel for schedule(static) if ((size_t)cout * per_out >= (1u << 16))
        for (int g = 0; g < cout; g += m)
            for (size_t at = (size_t)g * per_out; at < (size_t)(g + 1) * per_out; at++)
                project_scalars(out + at, w + at, per_out, n, m, sste, scale);
        return;
    }
    /* KERNEL, BLOCK16 and BLOCK32: a unit is one input channel's taps in every output channel of a
     * block (1, 16 or 32 of them; the last block may be smaller). Blocks are independent. */
    int ob = sdgp_weights_group_block(group), blocks = (cout + ob - 1) / ob;
#pragma omp parallel for schedule(static) if ((size_t)cout * per_out >= (1u << 16))
    for (int b = 0; b < blocks; b++) {
        double size[SDGP_NM_MAX_M];
        unsigned char keep[SDGP_NM_MAX_M];
        int co0 = b * ob, co1 = co0 + ob < cout ? co0 + ob : cout;
        for (int g = 0; g < cin; g += m) {
            for (int i = 0; i < m; i++) {
                double s2 = 0;
                for (int co = co0; co < co1; co++)
                    for (int t = 0; t < taps; t++) {
                        double v = w[(size_t)co * per_out + (size_t)(g + i) * taps + t];
                        s2 += v * v;
                    }
                size[i] = sqrt(s2);
            }
            double th = select_top(size, n, m, keep);
            for (int i = 0; i < m; i++) {
                /* the kept unit shrinks towards 0 along its own direction: w (1 - t/||w||) */
                float f = !keep[i] ? 0.0f : !sste ? 1.0f : size[i] > th ? (float)(1.0 - th / size[i]) : 0.0f;
                for (int co = co0; co < co1; co++)
                    for (int t = 0; t < taps; t++) {
                        size_t at = (size_t)co * per_out + (size_t)(g + i) * taps + t;
                        out[at] = scale * (f * w[at]);
                    }
            }
        }
    }
}

int sdgp_weights_group_block(sdgp_weights_group group) {
    return group == SDGP_WGROUP_BLOCK32 ? 32 : group == SDGP_WGROUP_BLOCK16 ? 16 : 1;
}

double sdgp_weights_sste_beta(const float *w, const float *s, size_t count) {
    double ws = 0, ss = 0;
    for (size_t i = 0; i < count; i++) {
        ws += (double)w[i] * s[i];
        ss += (double)s[i] * s[i];
    }
    return ss > 0 ? ws / ss : 1.0;
}

void sdgp_weights_srste_grad(float *grad, const float *w, const float *w_masked, size_t count, float lambda) {
#pragma omp parallel for simd schedule(static) if (count >= (1u << 15))
    for (size_t i = 0; i < count; i++) grad[i] += lambda * (w[i] - w_masked[i]);
}
