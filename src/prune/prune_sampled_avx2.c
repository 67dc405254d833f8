/* AVX2 random and MVUE kernels for the shapes prune_mvue_avx2.c (m = 4) does not take, 8 groups at a
 * time, bitwise the reference's; AVX-512 hosts run them too (prune_avx512.c). Lanes are groups: on
 * the channel axis 8 consecutive groups (through 8 x 8 transposes), on the row axis 8 channels.
 *   random n:m, m != 4, m <= 32, both axes: Philox on vectors and the partial Fisher-Yates as
 *     blends. Before, the reference's scalar shuffle (branchy, a Philox call per group): along
 *     channels 1:8 at 0.7-0.8 GB/s there, 3.0-3.1 here; 16:32 0.65 and 1.6-2.3; along rows 4:8 0.49
 *     and 2.4 (2 threads, docs/bench/hosts/amd-zen3-f25m1/prune-random-wide.txt); 1:2 0.15 and 0.86 (1 thread).
 *   MVUE 1:2 along channels: the reference's plan (one threshold) on 8 groups in double: 0.16 GB/s
 *     there, 1.25 here (1 thread; 0.32 and 2.3-2.6 on 2).
 *   MVUE n:m, m = 8, 16, 24, 32, both axes: the water-filling plan of prune_group.c on 4 groups per
 *     double vector, every lane stepping through the reference's passes until all have stopped:
 *     along channels 4:8 0.33-0.35 GB/s there, 0.94-0.99 here, 16:32 0.23 and 0.64-0.73; along rows
 *     4:8 0.32 and 0.91 (2 threads). The passes, not Philox, are the cost (up to n + 1 over the
 *     group, about 11 vector operations per position each).
 * A batch whose draws would need the reference's rejection loop goes to the reference. */
#include <immintrin.h>
#include <string.h>

#include "core/transpose8_avx2.h"
#include "prune/prune_avx2_pack.h"
#include "prune/prune_internal.h"
#include "prune/prune_philox_avx2.h"

/* ---- random n:m, m != 4, m <= 32 ---- */

/* The kept-or-dropped positions of 8 groups (prune_random_mask's partial Fisher-Yates, k draws; bit
 * p of lane l: position p of group l). perm[p] holds position p of every lane's permutation; draw i
 * takes j = i + (word * (m - i)) >> 32 and swaps perm[i] with perm[j], a blend over p >= i since
 * j differs by lane. Draw i reads word i % 4 of block i / 4 (w[i / 4]), the reference's words as
 * long as no draw rejects; returns 0 if one would in some lane (probability below 2^-26 a group). */
static int random_wide_chosen(__m256i *chosen, const __m256i w[][4], int k, int m) {
    __m256i perm[32], c = _mm256_setzero_si256();
    for (int p = 0; p < m; p++) perm[p] = _mm256_set1_epi32(p);
    for (int i = 0; i < k; i++) {
        const uint32_t bound = (uint32_t)(m - i), threshold = (0u - bound) % bound;
        __m256i hi, lo;
        mul_hilo(&hi, &lo, w[i / 4][i % 4], _mm256_set1_epi32((int)bound));
        /* the reference redraws while the low word < threshold (then below bound too); unsigned */
        if (threshold &&
            _mm256_movemask_epi8(_mm256_cmpeq_epi32(_mm256_min_epu32(lo, _mm256_set1_epi32((int)(threshold - 1))), lo)))
            return 0;
        const __m256i jl = _mm256_add_epi32(_mm256_set1_epi32(i), hi), t = perm[i];
        __m256i pick = t;
        for (int p = i + 1; p < m; p++) {
            const __m256i hit = _mm256_cmpeq_epi32(jl, _mm256_set1_epi32(p));
            pick = _mm256_blendv_epi8(pick, perm[p], hit);
            perm[p] = _mm256_blendv_epi8(perm[p], t, hit);
        }
        perm[i] = pick;
        c = _mm256_or_si256(c, _mm256_sllv_epi32(_mm256_set1_epi32(1), pick));
    }
    *chosen = c;
    return 1;
}

/* Group g of the flat run (at x + m g, in row g / G), m = 8V, pruned to y[0..V): its dense output,
 * and its compressed slots as prune_compress_group writes them (the nonzeros, at most n, padded with
 * the lowest-index zeros: a kept zero is not a slot unless it pads). */
static void store_group_8v(const prune_job *j, int64_t g, const __m256 *y) {
    const int n = j->n, m = j->m;
    const int64_t G = j->C / m, slots = G * n;
    uint32_t nz = 0;
    for (int v = 0; v < m / 8; v++) {
        nz |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(y[v], _mm256_setzero_ps(), _CMP_NEQ_UQ)) << 8 * v;
        if (j->out) _mm256_storeu_ps(j->out + g * m + 8 * v, y[v]);
    }
    if (!j->vals) return;
    const uint32_t all = m == 32 ? ~0u : (1u << m) - 1;
    const int have = __builtin_popcount(nz);
    const uint32_t slot = have < n ? nz | _pdep_u32((1u << (n - have)) - 1, all & ~nz) : nz;
    const int64_t row = g / G;
    int64_t pos = g % G * n;
    for (int v = 0; v < m / 8; v++)
        pos += compress8(j->vals + row * slots, j->idx + row * slots, pos, slots, y[v], spread8((int)(slot >> 8 * v & 0xff)),
                         0x0707070707070707ull, 0x0101010101010101ull * (uint64_t)(8 * v));
}

/* Groups gi .. gi+ng-1 of the flat run (group g at x + m g, in row g / G) pruned to the kept
 * positions of mask[]: by vectors where m = 8V or m = 2, else as the reference writes a group. */
static void random_wide_store(const prune_job *j, int64_t gi, int ng, const uint32_t mask[8]) {
    const int n = j->n, m = j->m;
    const int64_t G = j->C / m, slots = G * n;
    if (m == 2 && ng == 8 && j->C % 8 == 0) { /* 4 groups to a vector, which then lies in one row */
        uint32_t kept = 0, nz = 0, slot = 0;
        for (int g = 0; g < 8; g++) kept |= mask[g] << 2 * g;
        __m256 y[2];
        for (int v = 0; v < 2; v++) {
            y[v] = _mm256_and_ps(_mm256_loadu_ps(j->x + gi * 2 + 8 * v), _mm256_castsi256_ps(spread8((int)(kept >> 8 * v & 0xff))));
            nz |= (uint32_t)_mm256_movemask_ps(_mm256_cmp_ps(y[v], _mm256_setzero_ps(), _CMP_NEQ_UQ)) << 8 * v;
            if (j->out) _mm256_storeu_ps(j->out + gi * 2 + 8 * v, y[v]);
        }
        if (!j->vals) return;
        for (int g = 0; g < 8; g++) { /* n = 1: the nonzero, else position 0 */
            const uint32_t f = nz >> 2 * g & 3;
            slot |= (f ? f : 1u) << 2 * g;
        }
        for (int v = 0; v < 2; v++) {
            const int64_t gv = gi + 4 * v, row = gv / G;
            compress8(j->vals + row * slots, j->idx + row * slots, gv % G, slots, y[v], spread8((int)(slot >> 8 * v & 0xff)),
                      0x0101010101010101ull, 0);
        }
        return;
    }
    if (m % 8) {
        for (int g = 0; g < ng; g++) {
            const float *x = j->x + (gi + g) * m;
            float y[32];
            for (int i = 0; i < m; i++) y[i] = mask[g] >> i & 1 ? x[i] : 0.0f;
            if (j->out) memcpy(j->out + (gi + g) * m, y, (size_t)m * sizeof *y);
            if (j->vals) prune_compress_group(j->vals + (gi + g) * n, j->idx + (gi + g) * n, 1, y, n, m);
        }
        return;
    }
    for (int g = 0; g < ng; g++) {
        const float *x = j->x + (gi + g) * m;
        __m256 y[4];
        for (int v = 0; v < m / 8; v++)
            y[v] = _mm256_and_ps(_mm256_loadu_ps(x + 8 * v), _mm256_castsi256_ps(spread8((int)(mask[g] >> 8 * v & 0xff))));
        store_group_8v(j, gi + g, y);
    }
}

/* Random n:m (m != 4, m <= 32) on the channel axis: the Philox blocks a group needs (k draws: k / 4
 * rounded up, 1, 2 or 4) of 8 groups as CHAINS chains, so one call serves CHAINS / blocks batches. */
static int random_wide(const prune_job *j, int64_t t0, int64_t t1) {
    const int n = j->n, m = j->m, k = n <= m - n ? n : m - n;
    const int blocks = k <= 4 ? 1 : k <= 8 ? 2 : 4, batches = CHAINS / blocks;
    const uint32_t all = m == 32 ? ~0u : (1u << m) - 1;
    const __m256i in_order = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t G = j->C / m, end = t1 * G;
    __m256i w[CHAINS][4];
    for (int64_t g0 = t0 * G; g0 < end; g0 += 8 * batches) {
        uint64_t g[CHAINS];
        uint32_t blk[CHAINS];
        for (int b = 0; b < CHAINS; b++) g[b] = j->group0 + (uint64_t)g0 + 8 * (uint64_t)(b / blocks), blk[b] = (uint32_t)(b % blocks);
        philox_chains(w, j->key, g, blk, in_order);
        for (int q = 0; q < batches && g0 + 8 * q < end; q++) {
            const int64_t gi = g0 + 8 * q;
            const int ng = end - gi >= 8 ? 8 : (int)(end - gi);
            __m256i chosen;
            if (!random_wide_chosen(&chosen, (const __m256i(*)[4])w + q * blocks, k, m)) {
                prune_ref_prune(j, gi / G, (gi + ng - 1) / G + 1); /* its bits are ours; random never fails */
                continue;
            }
            uint32_t mask[8];
            _mm256_storeu_si256((__m256i *)mask, chosen);
            if (n > m - n)
                for (int l = 0; l < 8; l++) mask[l] = all & ~mask[l];
            random_wide_store(j, gi, ng, mask);
        }
    }
    return 0;
}

/* ---- MVUE 1:2 ---- */

/* One MVUE group through the reference (batch tails). Returns 1 on a non-finite value. */
static int mvue_group_ref(const prune_job *j, int64_t g) {
    const int n = j->n, m = j->m;
    float y[SDGP_NM_MAX_M];
    const int bad = prune_mvue_group(y, j->x + m * g, n, m, prune_group_u(j->key, j->group0 + (uint64_t)g, 0));
    if (j->out) memcpy(j->out + m * g, y, (size_t)m * sizeof *y);
    if (j->vals) prune_compress_group(j->vals + n * g, j->idx + n * g, 1, y, n, m);
    return bad;
}

/* Groups gi .. gi+7 (16 floats at x + 2 gi), w their Philox words (lane l: group gi + {0 1 4 5 2 3 6
 * 7}[l], the order the deinterleave leaves). The reference's 1:2 plan, in double as it does it:
 * total = |x0| + |x1|; keep x0 as sign(x0) total when u total < |x0|, else x1 as sign(x1) total;
 * at most one nonzero: unchanged; a non-finite value: zeros. Returns 1 on a non-finite value. */
static int mvue12_batch(const prune_job *j, __m256i w, int64_t gi) {
    const __m256 v0 = _mm256_loadu_ps(j->x + 2 * gi), v1 = _mm256_loadu_ps(j->x + 2 * gi + 8);
    const __m256 x0 = _mm256_shuffle_ps(v0, v1, 0x88), x1 = _mm256_shuffle_ps(v0, v1, 0xdd);
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), zero = _mm256_setzero_ps();
    const __m256 a0 = _mm256_andnot_ps(sign, x0), a1 = _mm256_andnot_ps(sign, x1);
    const __m256 big = _mm256_set1_ps(3.40282347e38f);
    const __m256 finite = _mm256_and_ps(_mm256_cmp_ps(a0, big, _CMP_LE_OQ), _mm256_cmp_ps(a1, big, _CMP_LE_OQ));
    const __m256 both = _mm256_and_ps(_mm256_cmp_ps(a0, zero, _CMP_NEQ_OQ), _mm256_cmp_ps(a1, zero, _CMP_NEQ_OQ));
    __m128 tf[2], pk[2];
    for (int h = 0; h < 2; h++) {
        const __m256d d0 = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a0, 1) : _mm256_castps256_ps128(a0));
        const __m256d d1 = _mm256_cvtps_pd(h ? _mm256_extractf128_ps(a1, 1) : _mm256_castps256_ps128(a1));
        const __m256d total = _mm256_add_pd(d0, d1);
        /* outcome 1 (keep x1) where !(u total < |x0|) */
        const __m256d keep1 = _mm256_cmp_pd(_mm256_mul_pd(u01_half(w, h), total), d0, _CMP_NLT_UQ);
        tf[h] = _mm256_cvtpd_ps(total);
        pk[h] = _mm256_castps256_ps128(_mm256_permutevar8x32_ps(_mm256_castpd_ps(keep1), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
    }
    const __m256 t = _mm256_set_m128(tf[1], tf[0]), k1 = _mm256_set_m128(pk[1], pk[0]);
    const __m256 s0 = _mm256_or_ps(_mm256_andnot_ps(sign, t), _mm256_and_ps(sign, x0));
    const __m256 s1 = _mm256_or_ps(_mm256_andnot_ps(sign, t), _mm256_and_ps(sign, x1));
    /* sampled where both are nonzero, else x as is; zeros where not finite */
    const __m256 y0 = _mm256_and_ps(finite, _mm256_blendv_ps(x0, _mm256_andnot_ps(k1, s0), both));
    const __m256 y1 = _mm256_and_ps(finite, _mm256_blendv_ps(x1, _mm256_and_ps(k1, s1), both));
    if (j->out) { /* unpacklo / hi interleave back: groups 0-1 | 2-3 and 4-5 | 6-7 */
        _mm256_storeu_ps(j->out + 2 * gi, _mm256_unpacklo_ps(y0, y1));
        _mm256_storeu_ps(j->out + 2 * gi + 8, _mm256_unpackhi_ps(y0, y1));
    }
    if (j->vals) { /* the slot: the nonzero one, else position 0; back to group order by 64-bit pairs */
        const __m256 nz1 = _mm256_cmp_ps(y1, zero, _CMP_NEQ_UQ);
        const __m256 val = _mm256_blendv_ps(y0, y1, nz1);
        _mm256_storeu_ps(j->vals + gi, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(val), 0xd8)));
        const unsigned bits = (unsigned)_mm256_movemask_ps(nz1); /* lane l: group {0 1 4 5 2 3 6 7}[l] */
        for (int l = 0; l < 8; l++) j->idx[gi + (l & 1) + (l >> 2 << 1) + ((l >> 1 & 1) << 2)] = (uint8_t)(bits >> l & 1);
    }
    return _mm256_movemask_ps(finite) != 0xff;
}

static int mvue12(const prune_job *j, int64_t t0, int64_t t1) {
    const __m256i order = _mm256_setr_epi32(0, 1, 4, 5, 2, 3, 6, 7);
    const int64_t G = j->C / 2, end = t1 * G;
    int bad = 0;
    __m256i w[CHAINS][4];
    int64_t g0 = t0 * G;
    for (; g0 + 8 <= end; g0 += 8 * CHAINS) {
        philox(w, j->key, j->group0 + (uint64_t)g0, order);
        for (int b = 0; b < CHAINS && g0 + 8 * b + 8 <= end; b++) bad |= mvue12_batch(j, w[b][0], g0 + 8 * b);
    }
    for (int64_t g = end - (end - t0 * G) % 8; g < end; g++) bad |= mvue_group_ref(j, g);
    return bad;
}

/* ---- MVUE n:m, m = 8V ---- */

/* 4 all-ones-or-zero doubles as 4 floats' masks. */
static inline __m128 narrow_mask(__m256d m) {
    return _mm256_castps256_ps128(_mm256_permutevar8x32_ps(_mm256_castpd_ps(m), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
}

/* The systematic plan (prune_group.c's plan_systematic) and its sample, for 4 groups (lanes) in
 * double: a[i] = |x_i| as doubles, x[i] the values themselves (floats, for their signs), u the
 * uniforms. Writes y[i] (4 floats); the caller keeps them where a lane has more than n nonzeros,
 * all finite (elsewhere the plan is not the reference's and y is not used). Every lane
 * follows the reference's loop: saturate the first largest unsaturated a while a_top (n - k) >=
 * the unsaturated sum; C[] and that sum are those of the pass that stopped. */
static void mvue_wide_half(__m128 *y, const __m256d *a, const __m128 *x, __m256d u, int n, int m) {
    __m256d C[32], sat[32], rem = _mm256_setzero_pd(), k = _mm256_setzero_pd();
    const __m256d zero = _mm256_setzero_pd(), one = _mm256_set1_pd(1.0), nd = _mm256_set1_pd((double)n);
    __m256d live = _mm256_castsi256_pd(_mm256_set1_epi64x(-1));
    for (int i = 0; i < m; i++) sat[i] = C[i] = zero;
    for (int pass = 0; pass <= n && _mm256_movemask_pd(live); pass++) {
        __m256d run = zero, topv = _mm256_set1_pd(-1.0), topi = zero;
        for (int i = 0; i < m; i++) {
            const __m256d unsat = _mm256_andnot_pd(sat[i], _mm256_castsi256_pd(_mm256_set1_epi64x(-1)));
            run = _mm256_add_pd(run, _mm256_and_pd(a[i], unsat)); /* + 0: run unchanged, as skipping it */
            const __m256d better = _mm256_and_pd(unsat, _mm256_cmp_pd(a[i], topv, _CMP_GT_OQ));
            topv = _mm256_blendv_pd(topv, a[i], better);
            topi = _mm256_blendv_pd(topi, _mm256_set1_pd((double)i), better);
            C[i] = _mm256_blendv_pd(C[i], run, live);
        }
        rem = _mm256_blendv_pd(rem, run, live);
        /* stop where k == n or a_top (n - k) < rem */
        const __m256d stop = _mm256_or_pd(_mm256_cmp_pd(k, nd, _CMP_EQ_OQ),
                                          _mm256_cmp_pd(_mm256_mul_pd(topv, _mm256_sub_pd(nd, k)), rem, _CMP_LT_OQ));
        live = _mm256_andnot_pd(stop, live);
        for (int i = 0; i < m; i++)
            sat[i] = _mm256_or_pd(sat[i], _mm256_and_pd(live, _mm256_cmp_pd(topi, _mm256_set1_pd((double)i), _CMP_EQ_OQ)));
        k = _mm256_add_pd(k, _mm256_and_pd(live, one));
    }
    const __m256d left = _mm256_sub_pd(nd, k), some = _mm256_cmp_pd(left, zero, _CMP_GT_OQ);
    const __m128 T = _mm256_cvtpd_ps(_mm256_and_pd(some, _mm256_div_pd(rem, left)));
    const __m128 sign = _mm_castsi128_ps(_mm_set1_epi32((int)0x80000000u));
    __m256d next = u;
    for (int i = 0; i < m; i++) {
        const __m256d c = _mm256_and_pd(some, _mm256_mul_pd(_mm256_div_pd(C[i], rem), left));
        const __m256d take = _mm256_andnot_pd(sat[i], _mm256_cmp_pd(next, c, _CMP_LT_OQ));
        next = _mm256_add_pd(next, _mm256_and_pd(take, one));
        const __m128 tv = _mm_or_ps(T, _mm_and_ps(sign, x[i]));
        y[i] = _mm_or_ps(_mm_and_ps(narrow_mask(sat[i]), x[i]), _mm_and_ps(narrow_mask(take), tv));
    }
}

/* MVUE of 8 groups, lane l of e[i] element i of group l, w their Philox words: y[0..m). Returns 1
 * if a lane holds a non-finite value (its y are zeros). */
static int mvue_lanes(__m256 *y, const __m256 *e, __m256i w, int n, int m) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u)), zero = _mm256_setzero_ps();
    __m256 finite = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    __m256i nnz = _mm256_setzero_si256();
    for (int i = 0; i < m; i++) {
        const __m256 a = _mm256_andnot_ps(sign, e[i]);
        finite = _mm256_and_ps(finite, _mm256_cmp_ps(a, _mm256_set1_ps(3.40282347e38f), _CMP_LE_OQ));
        nnz = _mm256_sub_epi32(nnz, _mm256_castps_si256(_mm256_cmp_ps(a, zero, _CMP_NEQ_UQ)));
    }
    const __m256 sampled = _mm256_and_ps(finite, _mm256_castsi256_ps(_mm256_cmpgt_epi32(nnz, _mm256_set1_epi32(n))));
    if (_mm256_movemask_ps(sampled)) {
        __m128 yh[2][32];
        for (int h = 0; h < 2; h++) {
            __m256d a[32];
            __m128 xh[32];
            for (int i = 0; i < m; i++) {
                xh[i] = h ? _mm256_extractf128_ps(e[i], 1) : _mm256_castps256_ps128(e[i]);
                a[i] = _mm256_cvtps_pd(_mm_andnot_ps(_mm256_castps256_ps128(sign), xh[i]));
            }
            mvue_wide_half(yh[h], a, xh, u01_half(w, h), n, m);
        }
        for (int i = 0; i < m; i++) y[i] = _mm256_blendv_ps(e[i], _mm256_set_m128(yh[1][i], yh[0][i]), sampled);
    } else {
        for (int i = 0; i < m; i++) y[i] = e[i];
    }
    for (int i = 0; i < m; i++) y[i] = _mm256_and_ps(y[i], finite); /* not finite: zeros */
    return _mm256_movemask_ps(finite) != 0xff;
}

/* Channel axis: groups gi .. gi+7 (m = 8V), w their Philox words (lanes in group order), through
 * 8 x 8 transposes. Returns as mvue_lanes. */
static int mvue_wide_batch(const prune_job *j, __m256i w, int64_t gi) {
    const int m = j->m, V = m / 8;
    __m256 e[32], y[32], r[8], yg[8][4];
    for (int v = 0; v < V; v++) { /* e[i] lane l: element i of group gi + l */
        for (int g = 0; g < 8; g++) r[g] = _mm256_loadu_ps(j->x + (gi + g) * m + 8 * v);
        transpose8x8_ps(r);
        for (int i = 0; i < 8; i++) e[8 * v + i] = r[i];
    }
    const int bad = mvue_lanes(y, e, w, j->n, m);
    for (int v = 0; v < V; v++) {
        for (int i = 0; i < 8; i++) r[i] = y[8 * v + i];
        transpose8x8_ps(r);
        for (int g = 0; g < 8; g++) yg[g][v] = r[g];
    }
    for (int g = 0; g < 8; g++) store_group_8v(j, gi + g, yg[g]);
    return bad;
}

static int mvue_wide(const prune_job *j, int64_t t0, int64_t t1) {
    const __m256i in_order = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t G = j->C / j->m, end = t1 * G;
    int bad = 0;
    __m256i w[CHAINS][4];
    for (int64_t g0 = t0 * G; g0 + 8 <= end; g0 += 8 * CHAINS) {
        philox(w, j->key, j->group0 + (uint64_t)g0, in_order);
        for (int b = 0; b < CHAINS && g0 + 8 * b + 8 <= end; b++) bad |= mvue_wide_batch(j, w[b][0], g0 + 8 * b);
    }
    for (int64_t g = end - (end - t0 * G) % 8; g < end; g++) bad |= mvue_group_ref(j, g);
    return bad;
}

/* ---- the row axis (positions): lanes are 8 channels, y[i] row g m + i ---- */

/* Row group g at channels [c, c+cnt): the dense rows y[0..m), and the compressed slot rows g n + s,
 * per lane (channel) as prune_compress_group orders them: the nonzeros, padded with the
 * lowest-index zeros. Slot s can only come from rows s .. s + m - n. */
static void store_rows_wide(const prune_job *j, int64_t g, int64_t c, int cnt, const __m256 *y) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C;
    if (j->out)
        for (int i = 0; i < m; i++) store_ps(j->out + (g * m + i) * C + c, y[i], cnt);
    if (!j->vals) return;
    __m256i nz[32], nnz = _mm256_setzero_si256(), zeros = _mm256_setzero_si256(), taken = _mm256_setzero_si256();
    __m256 sv[32];
    __m256i si[32];
    for (int i = 0; i < m; i++) {
        nz[i] = _mm256_castps_si256(_mm256_cmp_ps(y[i], _mm256_setzero_ps(), _CMP_NEQ_UQ)); /* NaN counts as nonzero */
        nnz = _mm256_sub_epi32(nnz, nz[i]);
    }
    const __m256i pad = _mm256_sub_epi32(_mm256_set1_epi32(n), nnz);
    for (int s = 0; s < n; s++) sv[s] = _mm256_setzero_ps(), si[s] = _mm256_setzero_si256();
    for (int i = 0; i < m; i++) {
        const __m256i sel = _mm256_or_si256(nz[i], _mm256_cmpgt_epi32(pad, zeros));
        zeros = _mm256_sub_epi32(zeros, _mm256_andnot_si256(nz[i], _mm256_set1_epi32(-1)));
        for (int s = i > m - n ? i - (m - n) : 0; s < n && s <= i; s++) {
            const __m256i hit = _mm256_and_si256(sel, _mm256_cmpeq_epi32(taken, _mm256_set1_epi32(s)));
            sv[s] = _mm256_blendv_ps(sv[s], y[i], _mm256_castsi256_ps(hit));
            si[s] = _mm256_blendv_epi8(si[s], _mm256_set1_epi32(i), hit);
        }
        taken = _mm256_sub_epi32(taken, sel);
    }
    for (int s = 0; s < n; s++) {
        uint8_t t[16];
        __m128i lo, hi;
        low_bytes(&lo, &hi, si[s]);
        store_ps(j->vals + (g * n + s) * C + c, sv[s], cnt);
        _mm_storeu_si128((__m128i *)t, _mm_unpacklo_epi32(lo, hi));
        memcpy(j->idx + (g * n + s) * C + c, t, (size_t)cnt);
    }
}

/* Random or MVUE along rows, row groups [t0, t1): group (g, c) is counter g C + c, so 8 channels
 * are 8 consecutive counters. The Philox blocks of `batches` batches of 8 channels per call, as in
 * random_wide. A batch whose random draw would reject sends its row group to the reference. */
static int sampled_rows(const prune_job *j, int64_t t0, int64_t t1) {
    const int n = j->n, m = j->m, k = n <= m - n ? n : m - n, random = j->fn == SDGP_PRUNE_RANDOM;
    const int blocks = !random || k <= 4 ? 1 : k <= 8 ? 2 : 4, batches = CHAINS / blocks;
    const __m256i in_order = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t C = j->C;
    int bad = 0;
    __m256i w[CHAINS][4];
    for (int64_t g = t0; g < t1; g++) {
        int redone = 0;
        for (int64_t c0 = 0; c0 < C && !redone; c0 += 8 * batches) {
            uint64_t gs[CHAINS];
            uint32_t blk[CHAINS];
            for (int b = 0; b < CHAINS; b++)
                gs[b] = j->group0 + (uint64_t)(g * C + c0) + 8 * (uint64_t)(b / blocks), blk[b] = (uint32_t)(b % blocks);
            philox_chains(w, j->key, gs, blk, in_order);
            for (int q = 0; q < batches && c0 + 8 * q < C && !redone; q++) {
                const int64_t c = c0 + 8 * q;
                const int cnt = C - c >= 8 ? 8 : (int)(C - c);
                __m256 e[32], y[32];
                for (int i = 0; i < m; i++) e[i] = cnt == 8 ? load_ps(j->x + (g * m + i) * C + c, 8) : load_ps(j->x + (g * m + i) * C + c, cnt);
                if (random) {
                    __m256i chosen;
                    if (!random_wide_chosen(&chosen, (const __m256i(*)[4])w + q * blocks, k, m)) {
                        bad |= prune_ref_prune(j, g, g + 1); /* the whole row group; its bits are ours */
                        redone = 1;
                        continue;
                    }
                    if (n > m - n) chosen = _mm256_xor_si256(chosen, _mm256_set1_epi32(-1));
                    for (int i = 0; i < m; i++) { /* bit i of the lane to the sign bit, then to all bits */
                        const __m256i keep = _mm256_srai_epi32(_mm256_slli_epi32(chosen, 31 - i), 31);
                        y[i] = _mm256_and_ps(e[i], _mm256_castsi256_ps(keep));
                    }
                } else {
                    bad |= mvue_lanes(y, e, w[q][0], n, m);
                }
                if (cnt == 8) store_rows_wide(j, g, c, 8, y);
                else store_rows_wide(j, g, c, cnt, y);
            }
        }
    }
    return bad;
}

int prune_avx2_sampled_other_vectorised(const prune_job *j) {
    if (j->m > 32 || j->m == 4) return 0;
    if (j->fn == SDGP_PRUNE_RANDOM) return 1;
    if (j->fn != SDGP_PRUNE_MVUE) return 0;
    return j->m % 8 == 0 || (j->axis == SDGP_AXIS_CHANNEL && j->n == 1 && j->m == 2);
}

int prune_avx2_sampled_other(const prune_job *j, int64_t t0, int64_t t1) {
    if (!prune_avx2_sampled_other_vectorised(j)) return -1;
    if (j->axis == SDGP_AXIS_ROW) return sampled_rows(j, t0, t1);
    if (j->fn == SDGP_PRUNE_RANDOM) return random_wide(j, t0, t1);
    return j->m == 2 ? mvue12(j, t0, t1) : mvue_wide(j, t0, t1);
}
