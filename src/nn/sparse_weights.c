/* N:M sparse weights: the S-STE soft threshold and the SR-STE hard mask over groups of m input
 * channels (include/sdgp/nn.h; formulas and a worked example in docs/sparse-weights.md). */
#include <math.h>
#include <stdint.h>
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
    if (m < 1 || m > SDGP_NM_MAX_M) return 0; /* never (the caller's n:m is checked); it bounds the memset */
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

#define LANES 8 /* groups projected at once */

static uint32_t bits_of(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}
static float float_of(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* One group of m scalar weights per lane, `lanes` <= LANES groups at once (group L's weight i at
 * w[base[L] + i * stride]): S-STE's soft threshold sign(w) max(|w| - t, 0) or SR-STE's hard mask on
 * the n kept ones, 0 elsewhere, as select_top keeps them; written without branches across the lanes,
 * so that the compiler vectorises it. The scalar form (select_top per group, its data-dependent
 * branches) cost 22-24 ns a weight on one Zen 3 thread, this form 2.3-3.3: ResNet-9 w1's 9 M conv
 * weights took tens of ms per step, and per batch of an evaluation. The selection becomes ranks:
 * weight i goes after every j < i with |w_j| >= |w_i| and every j > i with |w_j| > |w_i| (ties: the
 * lower index first; |w| compared as the bits of a non-negative float, every NaN as one value above
 * infinity, so a NaN is the largest and NaNs tie), kept when its rank is below n; the threshold is
 * the |w| of rank n.
 * max(|w| - t, 0) on the bits: a NaN difference gives 0 as fmaxf does, and copysign then sets the
 * sign, so the zero's sign never shows. */
static inline __attribute__((always_inline)) void lanes_m(float *out, const float *w, const size_t *base, const int lanes,
                                                          size_t stride, int n, const int m, int sste, float scale) {
    uint32_t x[SDGP_NM_MAX_M][LANES], th[LANES]; /* the weights' bits */
    int32_t key[SDGP_NM_MAX_M][LANES];          /* below 2^31: signed compares vectorise on every x86 */
    int32_t rank[SDGP_NM_MAX_M][LANES];
    for (int i = 0; i < m; i++)
        for (int L = 0; L < LANES; L++) x[i][L] = L < lanes ? bits_of(w[base[L] + (size_t)i * stride]) : 0u;
    for (int i = 0; i < m; i++)
        for (int L = 0; L < LANES; L++) {
            const int32_t a = (int32_t)(x[i][L] & 0x7fffffffu);
            key[i][L] = a > 0x7f800000 ? 0x7fc00000 : a;
        }
    for (int i = 0; i < m; i++) {
        for (int L = 0; L < LANES; L++) rank[i][L] = 0;
        for (int j = 0; j < i; j++)
            for (int L = 0; L < LANES; L++) rank[i][L] += key[j][L] >= key[i][L];
        for (int j = i + 1; j < m; j++)
            for (int L = 0; L < LANES; L++) rank[i][L] += key[j][L] > key[i][L];
    }
    for (int L = 0; L < LANES; L++) th[L] = 0;
    for (int i = 0; i < m; i++)
        for (int L = 0; L < LANES; L++) th[L] |= (x[i][L] & 0x7fffffffu) & (0u - (uint32_t)(rank[i][L] == n));
    for (int i = 0; i < m; i++) {
        float o[LANES];
        for (int L = 0; L < LANES; L++) { /* selects as masks: float compares may trap, so they would not vectorise */
            const uint32_t xb = x[i][L], db = bits_of(float_of(xb & 0x7fffffffu) - float_of(th[L]));
            /* d > 0: neither -0, +0, negative nor NaN */
            const uint32_t pos = 0u - (uint32_t)(((int32_t)db > 0) & ((int32_t)db <= 0x7f800000));
            const uint32_t shrunk = (db & pos) | (xb & 0x80000000u);
            const uint32_t as_is = 0u - (uint32_t)(!sste | (key[i][L] == 0x7fc00000)); /* SR-STE, or a NaN */
            const uint32_t kept = (xb & as_is) | (shrunk & ~as_is), keep = 0u - (uint32_t)(rank[i][L] < n);
            o[L] = scale * float_of(kept & keep);
        }
        for (int L = 0; L < lanes; L++) out[base[L] + (size_t)i * stride] = o[L];
    }
}

/* m = 4 (2:4) with the loops over m unrolled, and whole batches with their loads and stores
 * unrolled; the rest through the generic loops. (Written in GCC's 8-lane vector types for AVX2 it
 * was 0-25 % faster: not worth an ISA path.) */
static void project_lanes(float *out, const float *w, const size_t *base, int lanes, size_t stride, int n, int m,
                          int sste, float scale) {
    if (m == 4 && lanes == LANES) lanes_m(out, w, base, LANES, stride, n, 4, sste, scale);
    else lanes_m(out, w, base, lanes, stride, n, m, sste, scale);
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
        const size_t groups = (size_t)(cin / m) * (size_t)taps; /* per output channel: (g, t) */
#pragma omp parallel for schedule(static) if ((size_t)cout * per_out >= (1u << 16))
        for (int co = 0; co < cout; co++)
            for (size_t q0 = 0; q0 < groups; q0 += LANES) {
                size_t base[LANES];
                const int lanes = groups - q0 < LANES ? (int)(groups - q0) : LANES;
                for (int L = 0; L < lanes; L++) {
                    const size_t q = q0 + (size_t)L;
                    base[L] = (size_t)co * per_out + q / (size_t)taps * (size_t)m * taps + q % (size_t)taps;
                }
                project_lanes(out, w, base, lanes, (size_t)taps, n, m, sste, scale);
            }
        return;
    }
    if (group == SDGP_WGROUP_COUT) {
        /* The TAP rule along the other axis: groups of m output channels at each (input channel,
         * tap). Groups of output channels are independent: any split gives the same bits. */
#pragma omp parallel for schedule(static) if ((size_t)cout * per_out >= (1u << 16))
        for (int g = 0; g < cout; g += m)
            for (size_t at = (size_t)g * per_out; at < (size_t)(g + 1) * per_out; at += LANES) {
                size_t base[LANES];
                const int lanes = (size_t)(g + 1) * per_out - at < LANES ? (int)((size_t)(g + 1) * per_out - at) : LANES;
                for (int L = 0; L < lanes; L++) base[L] = at + (size_t)L;
                project_lanes(out, w, base, lanes, per_out, n, m, sste, scale);
            }
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
