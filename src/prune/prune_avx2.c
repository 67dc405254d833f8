/* AVX2 pruning kernels: magnitude and rescaled magnitude (both passes); channel axis with m | 8
 * (8 lanes = 8/m groups, ranks by in-group rotations, as in prune_avx512.c), channel axis with
 * m = 8V, V >= 2 (a group is V vectors, ranks by rotations within and across them), and the row
 * axis for any m (8 channels per vector, pairwise ranks). Random and MVUE are in prune_mvue_avx2.c
 * (m = 4) and prune_sampled_avx2.c (other m); shapes none of them takes use the reference.
 *
 * AVX2 has no mask registers and no compress: masks are vectors of all-ones lanes, and the
 * compressed slots are gathered by vpermps with an index built from the 8-bit movemask by
 * pdep/pext (scalar, beside the vector work). Results are bitwise the reference's. The ranking of
 * m = 2 and 4 rotates groups with in-lane shuffles in an unrolled loop: 2:4 of one sample in L2 on
 * one thread (`sdgp bench prune --threads 1 --shape 1,256,256`, best repeat) 0.51 ns per float for
 * magnitude and 0.80 for rescaled, against 0.66 and 0.92 with the generic loop (vpermd, blend).
 * m = 16 and 32 ran the reference's selection loop before (branchy, n passes over the group): rescaled
 * 8:16 at 0.11 GB/s against 2.6-3.2 now, 16:32 at 0.07 against 1.9-2.5 (docs/bench/hosts/amd-zen3-f25m1/prune-wide-m.txt). */
#include <immintrin.h>
#include <string.h>

#include "prune/prune_avx2_pack.h"
#include "prune/prune_internal.h"

static inline __m256i key8(__m256 x) {
    __m256i k = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7fffffff));
    return _mm256_min_epu32(k, _mm256_set1_epi32(0x7f800001));
}

/* In-group rotations for m | 8: lane l meets rot[s][l]; before[s] is -1 where the partner has the
 * lower index (and so wins ties), else 0. */
typedef struct {
    int m, n;
    __m256i rot[7], before[7];
} rank8;

static void rank8_init(rank8 *p, int n, int m) {
    int32_t idx[8], bef[8];
    p->m = m;
    p->n = n;
    for (int s = 1; s < m; s++) {
        for (int l = 0; l < 8; l++) {
            idx[l] = (l & ~(m - 1)) | ((l + s) & (m - 1));
            bef[l] = l % m + s >= m ? -1 : 0;
        }
        p->rot[s - 1] = _mm256_loadu_si256((const __m256i *)idx);
        p->before[s - 1] = _mm256_loadu_si256((const __m256i *)bef);
    }
}

/* All-ones in kept lanes: fewer than n lanes of the group beat the lane. Keys are < 2^31, so the
 * signed compare works, and "the partner wins ties" is key_j > key_i - 1. M is p->m as a
 * constant where the caller knows it (the loop unrolls, the rotations stay in registers). */
static inline __attribute__((always_inline)) __m256i keep8_m(const rank8 *p, __m256i k, const int M) {
    __m256i rank = _mm256_setzero_si256();
    for (int s = 0; s < M - 1; s++) {
        /* groups of 2 or 4 lie within 128-bit halves: an in-lane shuffle (1 cycle) rotates them */
        __m256i other = M == 2   ? _mm256_shuffle_epi32(k, 0xb1)
                        : M == 4 ? (s == 0 ? _mm256_shuffle_epi32(k, 0x39) : s == 1 ? _mm256_shuffle_epi32(k, 0x4e) : _mm256_shuffle_epi32(k, 0x93))
                                 : _mm256_permutevar8x32_epi32(k, p->rot[s]);
        rank = _mm256_sub_epi32(rank, _mm256_cmpgt_epi32(other, _mm256_add_epi32(k, p->before[s])));
    }
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(p->n), rank);
}

/* One group through the reference decision (row tails), written like the reference. */
static void group_scalar(const prune_job *j, const float *x, const float *scale, float *out, float *vals, uint8_t *idx) {
    const int n = j->n, m = j->m;
    float y[SDGP_NM_MAX_M];
    uint64_t mask = prune_magnitude_mask(x, n, m);
    for (int i = 0; i < m; i++) y[i] = mask >> i & 1 ? (scale ? x[i] * scale[i] : x[i]) : 0.0f;
    if (out) memcpy(out, y, (size_t)m * sizeof *y);
    if (vals) prune_compress_group(vals, idx, 1, y, n, m);
}

/* Channel axis, m | 8 (M: m, a constant where the caller knows it), rows [r0, r1); scale rows
 * from j->scale when set (the second rescale pass: the keep masks of the first are reused). */
static inline __attribute__((always_inline)) void channel_vec_m(const prune_job *j, const rank8 *rp, int64_t r0, int64_t r1,
                                                                const int M) {
    const int n = j->n, m = M, per = 8 / m * n;
    const int64_t C = j->C, slots = C / m * n, W = (C + 15) / 16, full = C / 8 * 8;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C, *sr = j->scale ? j->scale + (r / j->P) * j->scale_bstride : NULL;
        /* avx2_sums left the masks only where it vectorised (C % 16 == 0) */
        const uint16_t *keep = j->scale && j->keep && C % 16 == 0 ? j->keep + (r - j->keep_r0) * W : NULL;
        float *outr = j->out ? j->out + r * C : NULL, *vals = j->vals ? j->vals + r * slots : NULL;
        uint8_t *idx = j->idx ? j->idx + r * slots : NULL;
        int64_t pos = 0, c = 0;
        for (; c < full; c += 8, pos += per) {
            __m256 x = _mm256_loadu_ps(xr + c);
            __m256i kp = keep ? spread8(keep[c / 16] >> (c % 16)) : keep8_m(rp, key8(x), M);
            __m256 y = _mm256_and_ps(sr ? _mm256_mul_ps(x, _mm256_loadu_ps(sr + c)) : x, _mm256_castsi256_ps(kp));
            if (outr) _mm256_storeu_ps(outr + c, y);
            if (vals) compress8(vals, idx, pos, slots, y, kp, 0x0101010101010101ull * (uint64_t)(m - 1), 0);
        }
        for (; c < C; c += m, pos += n) /* tail: whole groups */
            group_scalar(j, xr + c, sr ? sr + c : NULL, outr ? outr + c : NULL, vals ? vals + pos : NULL, idx ? idx + pos : NULL);
    }
}

static void channel_vec(const prune_job *j, const rank8 *rp, int64_t r0, int64_t r1) {
    switch (j->m) {
    case 2: channel_vec_m(j, rp, r0, r1, 2); return;
    case 4: channel_vec_m(j, rp, r0, r1, 4); return;
    default: channel_vec_m(j, rp, r0, r1, 8); return;
    }
}

/* Channel axis, m = 8V (V >= 2; V a constant where the caller knows it): a group is the V vectors
 * x[0..V). Lane l of vector a meets lane (l + s) % 8 of every vector b, itself excepted (rp: the
 * rotations of m = 8). The partner beats it with a higher key, or an equal one and a lower index
 * in the group: b < a, or b == a and l + s >= 8 (rp->before). kp[a]: all-ones where kept. Each lane
 * meets all m - 1 others, 8 lanes to a vector: about m / 4 vector operations per value, no branch. */
static inline __attribute__((always_inline)) void keep_wide(const rank8 *rp, const __m256 *x, __m256i *kp, const int V) {
    __m256i k[SDGP_NM_MAX_M / 8], k_minus1[SDGP_NM_MAX_M / 8];
    for (int a = 0; a < V; a++) {
        k[a] = key8(x[a]);
        k_minus1[a] = _mm256_sub_epi32(k[a], _mm256_set1_epi32(1)); /* "the partner wins ties" */
        kp[a] = _mm256_setzero_si256();                            /* the rank, for now */
    }
#pragma GCC unroll 8
    for (int b = 0; b < V; b++)
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) {
            const __m256i other = s ? _mm256_permutevar8x32_epi32(k[b], rp->rot[s - 1]) : k[b];
#pragma GCC unroll 8
            for (int a = 0; a < V; a++) {
                if (a == b && s == 0) continue;
                const __m256i own = a != b ? (b < a ? k_minus1[a] : k[a]) : _mm256_add_epi32(k[a], rp->before[s - 1]);
                kp[a] = _mm256_sub_epi32(kp[a], _mm256_cmpgt_epi32(other, own));
            }
        }
    for (int a = 0; a < V; a++) kp[a] = _mm256_cmpgt_epi32(_mm256_set1_epi32(rp->n), kp[a]);
}

/* Channel axis, m = 8V, rows [r0, r1); as channel_vec_m (scale rows from j->scale, keep masks of
 * the sums pass when set). rp: rank8_init(rp, n, 8). C % m == 0, so C % 16 == 0. */
static inline __attribute__((always_inline)) void channel_wide_m(const prune_job *j, const rank8 *rp, int64_t r0, int64_t r1,
                                                                 const int V) {
    const int m = 8 * V;
    const int64_t C = j->C, slots = C / m * j->n, W = C / 16;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C, *sr = j->scale ? j->scale + (r / j->P) * j->scale_bstride : NULL;
        /* the sums pass leaves masks for m % 16 == 0 only (two vectors to a word) */
        const uint16_t *keep = j->scale && j->keep && m % 16 == 0 ? j->keep + (r - j->keep_r0) * W : NULL;
        float *outr = j->out ? j->out + r * C : NULL, *vals = j->vals ? j->vals + r * slots : NULL;
        uint8_t *idx = j->idx ? j->idx + r * slots : NULL;
        int64_t pos = 0;
        for (int64_t c = 0; c < C; c += m) {
            __m256 x[SDGP_NM_MAX_M / 8];
            __m256i kp[SDGP_NM_MAX_M / 8];
            for (int v = 0; v < V; v++) x[v] = _mm256_loadu_ps(xr + c + 8 * v);
            if (keep)
                for (int v = 0; v < V; v++) kp[v] = spread8(keep[(c + 8 * v) / 16] >> ((c + 8 * v) % 16));
            else
                keep_wide(rp, x, kp, V);
            for (int v = 0; v < V; v++) {
                const __m256 y = _mm256_and_ps(sr ? _mm256_mul_ps(x[v], _mm256_loadu_ps(sr + c + 8 * v)) : x[v], _mm256_castsi256_ps(kp[v]));
                if (outr) _mm256_storeu_ps(outr + c + 8 * v, y);
                if (vals) pos += compress8(vals, idx, pos, slots, y, kp[v], ~0ull, 0x0808080808080808ull * (uint64_t)v);
            }
        }
    }
}

static void channel_wide(const prune_job *j, const rank8 *rp, int64_t r0, int64_t r1) {
    switch (j->m / 8) {
    case 2: channel_wide_m(j, rp, r0, r1, 2); return;
    case 4: channel_wide_m(j, rp, r0, r1, 4); return;
    default: channel_wide_m(j, rp, r0, r1, j->m / 8); return;
    }
}

/* Row axis: rank the m rows of group g at channels [c, c+8) (all-ones = kept). */
static void row_keep(const prune_job *j, int64_t g, int64_t c, __m256 *x, __m256i *kp) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C;
    __m256i key[SDGP_NM_MAX_M];
    for (int k = 0; k < m; k++) {
        x[k] = _mm256_loadu_ps(j->x + (g * m + k) * C + c);
        key[k] = key8(x[k]);
        kp[k] = _mm256_setzero_si256(); /* the rank, for now */
    }
    for (int a = 0; a < m; a++)
        for (int b = a + 1; b < m; b++) {
            __m256i b_wins = _mm256_cmpgt_epi32(key[b], key[a]); /* else a wins (ties: lower index) */
            kp[a] = _mm256_sub_epi32(kp[a], b_wins);
            kp[b] = _mm256_sub_epi32(kp[b], _mm256_xor_si256(b_wins, _mm256_set1_epi32(-1)));
        }
    for (int k = 0; k < m; k++) kp[k] = _mm256_cmpgt_epi32(_mm256_set1_epi32(n), kp[k]);
}

static void row_groups(const prune_job *j, int64_t g0, int64_t g1) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C, full = C / 8 * 8;
    __m256 x[SDGP_NM_MAX_M];
    __m256i kp[SDGP_NM_MAX_M];
    for (int64_t g = g0; g < g1; g++) {
        for (int64_t c = 0; c < full; c += 8) {
            row_keep(j, g, c, x, kp);
            __m256 sv[SDGP_NM_MAX_M];
            __m256i si[SDGP_NM_MAX_M], cnt = _mm256_setzero_si256();
            for (int s = 0; s < n; s++) {
                sv[s] = _mm256_setzero_ps();
                si[s] = _mm256_setzero_si256();
            }
            for (int k = 0; k < m; k++) {
                const int64_t r = g * m + k;
                __m256 v = j->scale ? _mm256_mul_ps(x[k], _mm256_loadu_ps(j->scale + (r / j->P) * j->scale_bstride + c)) : x[k];
                __m256 y = _mm256_and_ps(v, _mm256_castsi256_ps(kp[k]));
                if (j->out) _mm256_storeu_ps(j->out + r * C + c, y);
                /* slot s takes the s-th kept row: only rows s .. m-n+s can be it */
                for (int s = k - (m - n) > 0 ? k - (m - n) : 0; s <= k && s < n; s++) {
                    __m256i hit = _mm256_and_si256(kp[k], _mm256_cmpeq_epi32(cnt, _mm256_set1_epi32(s)));
                    sv[s] = _mm256_blendv_ps(sv[s], y, _mm256_castsi256_ps(hit));
                    si[s] = _mm256_blendv_epi8(si[s], _mm256_set1_epi32(k), hit);
                }
                cnt = _mm256_sub_epi32(cnt, kp[k]);
            }
            if (j->vals)
                for (int s = 0; s < n; s++) {
                    _mm256_storeu_ps(j->vals + (g * n + s) * C + c, sv[s]);
                    /* the 8 indices (< 64) packed to bytes */
                    __m128i b16 = _mm_packus_epi32(_mm256_castsi256_si128(si[s]), _mm256_extracti128_si256(si[s], 1));
                    _mm_storel_epi64((__m128i *)(j->idx + (g * n + s) * C + c), _mm_packus_epi16(b16, b16));
                }
        }
        if (full < C) { /* the last channels: the reference, one group at a time */
            float xg[SDGP_NM_MAX_M], y[SDGP_NM_MAX_M];
            for (int64_t c = full; c < C; c++) {
                for (int k = 0; k < m; k++) xg[k] = j->x[(g * m + k) * C + c];
                uint64_t mask = prune_magnitude_mask(xg, n, m);
                for (int k = 0; k < m; k++) {
                    const int64_t r = g * m + k;
                    y[k] = mask >> k & 1 ? (j->scale ? xg[k] * j->scale[(r / j->P) * j->scale_bstride + c] : xg[k]) : 0.0f;
                    if (j->out) j->out[r * C + c] = y[k];
                }
                if (j->vals) prune_compress_group(j->vals + g * n * C + c, j->idx + g * n * C + c, C, y, n, m);
            }
        }
    }
}

/* Magnitude and rescaled: every shape on the row axis, m | 8 and m = 8V on the channel axis; random
 * and MVUE: prune_mvue_avx2.c's (m = 4) and prune_sampled_avx2.c's (other m). */
static int avx2_vectorised(const prune_job *j) {
    if (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED)
        return prune_sampled4_vectorised(j) || prune_avx2_sampled_other_vectorised(j);
    return j->axis == SDGP_AXIS_ROW || j->m % 8 == 0 || 8 % j->m == 0;
}

static int avx2_prune(const prune_job *j, int64_t t0, int64_t t1) {
    if (!avx2_vectorised(j)) return prune_ref_prune(j, t0, t1);
    if (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED) {
        int r = prune_avx2_sampled(j, t0, t1);
        return r >= 0 ? r : prune_ref_prune(j, t0, t1);
    }
    if (j->axis == SDGP_AXIS_ROW) {
        row_groups(j, t0, t1);
        return 0;
    }
    rank8 rp;
    if (j->m % 8 == 0 && j->m > 8) {
        rank8_init(&rp, j->n, 8);
        channel_wide(j, &rp, t0, t1);
        return 0;
    }
    rank8_init(&rp, j->n, j->m); /* m | 8 (avx2_vectorised) */
    channel_vec(j, &rp, t0, t1);
    return 0;
}

/* The rows of one band of the sums pass: its lines stay in L1 while 16-channel strips go down them. */
#define SUMS_BAND_BYTES (16 * 1024)

/* dense[0..8) += |x|, kept[0..8) += |x| where kp, in double, as the reference adds. */
static inline void acc8(__m256d *d, __m256d *k, __m256 x, __m256i kp) {
    __m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
    __m256 ak = _mm256_and_ps(a, _mm256_castsi256_ps(kp)); /* +0.0 where pruned: adding it changes nothing */
    d[0] = _mm256_add_pd(d[0], _mm256_cvtps_pd(_mm256_castps256_ps128(a)));
    d[1] = _mm256_add_pd(d[1], _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)));
    k[0] = _mm256_add_pd(k[0], _mm256_cvtps_pd(_mm256_castps256_ps128(ak)));
    k[1] = _mm256_add_pd(k[1], _mm256_cvtps_pd(_mm256_extractf128_ps(ak, 1)));
}

static inline __attribute__((always_inline)) void sums_m(const prune_job *j, int64_t b, double *dense, double *kept, const int M) {
    const int m = M;
    const int64_t C = j->C, rb = b * j->P, re = rb + j->P, W = (C + 15) / 16;
    if (!(j->axis == SDGP_AXIS_CHANNEL && 8 % m == 0 && C % 16 == 0)) {
        prune_ref_sums(j, b, dense, kept);
        return;
    }
    /* Bands of rows of about SUMS_BAND_BYTES; in each, 16 channels at a time down the band's rows,
     * the 8 double sums in registers between bands in dense / kept. Walking 16 channels down a
     * whole sample read one line per row at a stride of C floats: at C = 512 the sample (P x C)
     * outgrew Zen 3's 512 KiB L2 and the pass ran at half speed. Each sum still adds its rows in
     * order, so the bits do not depend on the band. The keep masks go to j->keep for the second pass. */
    rank8 rp;
    rank8_init(&rp, j->n, m);
    int64_t band = SUMS_BAND_BYTES / (C * (int64_t)sizeof(float));
    if (band < 1) band = 1;
    memset(dense, 0, (size_t)C * sizeof *dense);
    memset(kept, 0, (size_t)C * sizeof *kept);
    for (int64_t r0 = rb; r0 < re; r0 += band) {
        const int64_t r1 = r0 + band < re ? r0 + band : re;
        for (int64_t c0 = 0; c0 < C; c0 += 16) {
            __m256d d[4], k[4];
            for (int h = 0; h < 4; h++) d[h] = _mm256_loadu_pd(dense + c0 + 4 * h), k[h] = _mm256_loadu_pd(kept + c0 + 4 * h);
            for (int64_t r = r0; r < r1; r++) {
                const float *xr = j->x + r * C + c0;
                __m256 x0 = _mm256_loadu_ps(xr), x1 = _mm256_loadu_ps(xr + 8);
                __m256i k0 = keep8_m(&rp, key8(x0), M), k1 = keep8_m(&rp, key8(x1), M);
                if (j->keep)
                    j->keep[(r - j->keep_r0) * W + c0 / 16] =
                        (uint16_t)(_mm256_movemask_ps(_mm256_castsi256_ps(k0)) | _mm256_movemask_ps(_mm256_castsi256_ps(k1)) << 8);
                acc8(d, k, x0, k0);
                acc8(d + 2, k + 2, x1, k1);
            }
            for (int h = 0; h < 4; h++) {
                _mm256_storeu_pd(dense + c0 + 4 * h, d[h]);
                _mm256_storeu_pd(kept + c0 + 4 * h, k[h]);
            }
        }
    }
}

/* Channel axis, m = 8V: row by row (a group spans V vectors, more than a 16-channel strip), the
 * sums in dense / kept, which stay in L1. Each sum adds its rows in order, as the reference. */
static inline __attribute__((always_inline)) void sums_wide_m(const prune_job *j, int64_t b, double *dense, double *kept, const int V) {
    const int m = 8 * V;
    const int64_t C = j->C, rb = b * j->P, re = rb + j->P, W = C / 16;
    rank8 rp;
    rank8_init(&rp, j->n, 8);
    memset(dense, 0, (size_t)C * sizeof *dense);
    memset(kept, 0, (size_t)C * sizeof *kept);
    for (int64_t r = rb; r < re; r++) {
        const float *xr = j->x + r * C;
        uint16_t *keep = j->keep ? j->keep + (r - j->keep_r0) * W : NULL;
        for (int64_t c = 0; c < C; c += m) {
            __m256 x[SDGP_NM_MAX_M / 8];
            __m256i kp[SDGP_NM_MAX_M / 8];
            for (int v = 0; v < V; v++) x[v] = _mm256_loadu_ps(xr + c + 8 * v);
            keep_wide(&rp, x, kp, V);
            for (int v = 0; v < V; v++) {
                __m256d d[2] = {_mm256_loadu_pd(dense + c + 8 * v), _mm256_loadu_pd(dense + c + 8 * v + 4)};
                __m256d k[2] = {_mm256_loadu_pd(kept + c + 8 * v), _mm256_loadu_pd(kept + c + 8 * v + 4)};
                acc8(d, k, x[v], kp[v]);
                _mm256_storeu_pd(dense + c + 8 * v, d[0]);
                _mm256_storeu_pd(dense + c + 8 * v + 4, d[1]);
                _mm256_storeu_pd(kept + c + 8 * v, k[0]);
                _mm256_storeu_pd(kept + c + 8 * v + 4, k[1]);
            }
            if (keep) /* V is even: two vectors to a 16-bit word */
                for (int v = 0; v < V; v += 2)
                    keep[(c + 8 * v) / 16] = (uint16_t)(_mm256_movemask_ps(_mm256_castsi256_ps(kp[v])) |
                                                        _mm256_movemask_ps(_mm256_castsi256_ps(kp[v + 1])) << 8);
        }
    }
}

static void avx2_sums(const prune_job *j, int64_t b, double *dense, double *kept) {
    if (j->axis == SDGP_AXIS_CHANNEL && j->m % 16 == 0) {
        switch (j->m / 8) {
        case 2: sums_wide_m(j, b, dense, kept, 2); return;
        case 4: sums_wide_m(j, b, dense, kept, 4); return;
        default: sums_wide_m(j, b, dense, kept, j->m / 8); return;
        }
    }
    switch (j->m) {
    case 2: sums_m(j, b, dense, kept, 2); return;
    case 4: sums_m(j, b, dense, kept, 4); return;
    default: sums_m(j, b, dense, kept, j->m); return; /* m = 8, or the reference's */
    }
}

const prune_kernels prune_kernels_avx2 = {.prune = avx2_prune, .sums = avx2_sums, .vectorised = avx2_vectorised};
