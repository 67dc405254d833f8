/* AVX2 random and MVUE kernels for m = 4 (random n:4, mvue 1:4 and 2:4, mvue-approx 2:4),
 * 8 groups at a time: prune_mvue_avx512.c ported lane for lane, for CPUs without AVX-512, which
 * otherwise run the scalar reference (other m: prune_sampled_avx2.c): MVUE 2:4 on the row axis 19
 * ns per float there, 1.8 here, 0.8 with AVX-512; random 2:4 13 / 0.95 / 0.49 (`sdgp bench prune`,
 * one thread, compressed output, 64 x 16 x 16 x 256 floats, on a shared EPYC host: +-30 %).
 *
 * Philox4x32-10 runs on 32 counters (group indices) at once as four independent chains of 8
 * (fewer wait on the multiply latency, more spill: 2, 3, 6, 8 chains measured slower). Vector e_k
 * holds element k of 8 groups (the row axis is laid out that way; the channel axis is transposed
 * in registers, leaving the groups in lane order 0 2 4 6 1 3 5 7, so the counters are made in
 * that order). Every operation mirrors the reference in order and precision (double for the
 * probabilities; a product that an add consumes goes through an AND first, so the compiler can
 * never fuse them into an FMA that rounds once), so outputs are bitwise the reference's. A batch
 * whose draws would need the reference's rejection loop (2^-32 per group) goes to the reference.
 * No mask registers: masks are all-ones lanes; the double halves (4 lanes) end as 64-bit
 * integers, narrowed to 8 x 32 bits once per quantity. Masked loads and stores (slow) only in tails. */
#include <immintrin.h>
#include <string.h>

#include "prune/prune_avx2_pack.h"
#include "prune/prune_internal.h"
#include "prune/prune_philox_avx2.h"

/* ---- small helpers ---- */

/* a macro: clang needs the predicate as a constant where the intrinsic expands */
#define cmp_ps(a, b, pred) _mm256_castps_si256(_mm256_cmp_ps((a), (b), (pred)))
INLINE __m256 sel_ps(__m256 v, __m256i m) { return _mm256_and_ps(v, _mm256_castsi256_ps(m)); }

/* 4 doubles from the low or high half of 8 floats. */
INLINE __m256d half_pd(__m256 v, int h) { return _mm256_cvtps_pd(h ? _mm256_extractf128_ps(v, 1) : _mm256_castps256_ps128(v)); }

/* The low dwords of two 4 x 64-bit vectors (lanes 0-3, 4-7) as 8 x 32 bits. */
INLINE __m256i narrow2(__m256d lo, __m256d hi) {
    __m256 s = _mm256_shuffle_ps(_mm256_castpd_ps(lo), _mm256_castpd_ps(hi), 0x88); /* 0 1 4 5 | 2 3 6 7 */
    return _mm256_permute4x64_epi64(_mm256_castps_si256(s), 0xd8);
}
INLINE __m256 join_ps(__m128 lo, __m128 hi) { return _mm256_set_m128(hi, lo); }

/* abs, all-finite mask and nonzero count (NaN counts as nonzero, as |x| != 0 does). */
INLINE __m256i absolutes(__m256 a[4], __m256i *nnz, const __m256 e[4]) {
    __m256i finite = _mm256_set1_epi32(-1);
    *nnz = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        a[k] = _mm256_and_ps(e[k], _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
        finite = _mm256_and_si256(finite, cmp_ps(a[k], _mm256_set1_ps(3.40282347e38f), _CMP_LE_OQ));
        *nnz = _mm256_sub_epi32(*nnz, cmp_ps(a[k], _mm256_setzero_ps(), _CMP_NEQ_UQ));
    }
    return finite;
}

/* ---- the decisions, 8 groups at a time ---- */

/* Random n:4 (prune_random_mask): k = min(n, 4-n) Fisher-Yates draws from words w0, w1.
 * Returns 0 when some lane would need a rejection redraw (w1 == 0 with two draws). */
INLINE int random4(__m256 y[4], const __m256 e[4], const __m256i w[4], int n) {
    const __m256i one = _mm256_set1_epi32(1);
    __m256i chosen = _mm256_sllv_epi32(one, _mm256_srli_epi32(w[0], 30)); /* (w * 4) >> 32, never rejects */
    if (n == 2) {
        if (_mm256_movemask_epi8(_mm256_cmpeq_epi32(w[1], _mm256_setzero_si256()))) return 0;
        /* 1 + (w * 3) >> 32: 1 + [w >= 0x55555556] + [w >= 0xAAAAAAAB], unsigned via the bias */
        const __m256i wb = _mm256_xor_si256(w[1], _mm256_set1_epi32((int)0x80000000u));
        __m256i j1 = _mm256_sub_epi32(one, _mm256_cmpgt_epi32(wb, _mm256_set1_epi32((int)(0x55555555u ^ 0x80000000u))));
        j1 = _mm256_sub_epi32(j1, _mm256_cmpgt_epi32(wb, _mm256_set1_epi32((int)(0xAAAAAAAAu ^ 0x80000000u))));
        /* after the first swap, position j1 holds 0 if j1 == j0, else j1 */
        __m256i p1 = _mm256_andnot_si256(_mm256_cmpeq_epi32(j1, _mm256_srli_epi32(w[0], 30)), j1);
        chosen = _mm256_or_si256(chosen, _mm256_sllv_epi32(one, p1));
    }
    if (n == 3) chosen = _mm256_andnot_si256(chosen, _mm256_set1_epi32(15));
    for (int k = 0; k < 4; k++) y[k] = sel_ps(e[k], _mm256_srai_epi32(_mm256_slli_epi32(chosen, 31 - k), 31)); /* bit k */
    return 1;
}

/* Exact MVUE 2:4 (prune_mvue_group with the 2:4 plan). Returns the lanes holding a NaN/Inf. */
INLINE __m256i mvue24(__m256 y[4], const __m256 e[4], __m256i w0) {
    const __m256i one = _mm256_set1_epi32(1);
    __m256 a[4];
    __m256i nnz, rank[4];
    const __m256i finite = absolutes(a, &nnz, e);
    for (int k = 0; k < 4; k++) rank[k] = _mm256_setzero_si256();
    /* stable ascending ranks: j goes before i (i < j) only when strictly smaller */
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            __m256i j_first = cmp_ps(a[j], a[i], _CMP_LT_OQ);
            rank[i] = _mm256_sub_epi32(rank[i], j_first);
            rank[j] = _mm256_add_epi32(rank[j], _mm256_add_epi32(one, j_first));
        }
    /* sorted values a1 <= a2 <= a3 <= a4 (a network: ties need no order here) */
    __m256 s[4] = {a[0], a[1], a[2], a[3]};
    static const int net[5][2] = {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {1, 2}};
    for (int q = 0; q < 5; q++) {
        __m256 lo = _mm256_min_ps(s[net[q][0]], s[net[q][1]]), hi = _mm256_max_ps(s[net[q][0]], s[net[q][1]]);
        s[net[q][0]] = lo;
        s[net[q][1]] = hi;
    }
    /* the plan in double, 4 groups per half, in the reference's order of operations; each half
     * ends as the index of its outcome in `pairs` below (A 0-4, B 1-4, C 5-7) */
    __m256d out_idx[2];
    __m128 hf[2], Rf[2];
    for (int h = 0; h < 2; h++) {
        const __m256d zd = _mm256_setzero_pd(), four = _mm256_set1_pd(4.0);
        __m256d a1 = half_pd(s[0], h), a2 = half_pd(s[1], h), a3 = half_pd(s[2], h), a4 = half_pd(s[3], h);
        __m256d a12 = _mm256_add_pd(a1, a2), S = _mm256_add_pd(a12, _mm256_add_pd(a3, a4)), R = _mm256_add_pd(a12, a3);
        __m256d d34 = _mm256_sub_pd(a3, a4), a1x2 = _mm256_add_pd(a1, a1), tA0 = _mm256_add_pd(a1x2, d34);
        __m256d cC = _mm256_cmp_pd(a4, R, _CMP_GE_OQ);
        __m256d cA = _mm256_andnot_pd(cC, _mm256_cmp_pd(tA0, zd, _CMP_GT_OQ));
        __m256d tA1 = _mm256_mul_pd(four, a1); /* exact: a contracted 4 a1 + x rounds as 4 a1 + x */
        __m256d t[4];
        t[0] = _mm256_blendv_pd(_mm256_blendv_pd(a1x2, tA0, cA), a1, cC);
        t[1] = _mm256_blendv_pd(_mm256_blendv_pd(_mm256_add_pd(a1x2, _mm256_sub_pd(R, a4)), tA1, cA), a12, cC);
        t[2] = _mm256_blendv_pd(_mm256_add_pd(a12, a12), _mm256_add_pd(tA1, _mm256_add_pd(_mm256_add_pd(a2, a2), d34)), cA);
        t[3] = _mm256_mul_pd(four, a12);
        __m256d total = _mm256_blendv_pd(_mm256_blendv_pd(S, _mm256_add_pd(S, S), cA), R, cC);
        __m256d ut = _mm256_mul_pd(u01_half(w0, h), total);
        /* outcome = #{j < count-1 : u*total >= t[j]}: C counts t0, t1; B t0..t2; A t0..t3 */
        const __m256d all = _mm256_castsi256_pd(_mm256_set1_epi32(-1));
        const __m256d live[4] = {all, all, _mm256_xor_pd(cC, all), cA};
        const __m256d one64 = _mm256_castsi256_pd(_mm256_set1_epi64x(1)), five64 = _mm256_castsi256_pd(_mm256_set1_epi64x(5));
        __m256i k = _mm256_castpd_si256(_mm256_andnot_pd(cA, _mm256_blendv_pd(one64, five64, cC))); /* A 0, B 1, C 5 */
        for (int q = 0; q < 4; q++)
            k = _mm256_sub_epi64(k, _mm256_castpd_si256(_mm256_and_pd(live[q], _mm256_cmp_pd(ut, t[q], _CMP_NLT_UQ))));
        out_idx[h] = _mm256_castsi256_pd(k);
        hf[h] = _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_set1_pd(0.5), S));
        Rf[h] = _mm256_cvtpd_ps(R);
    }
    /* kept ranks (bits over sorted positions) of each outcome: B's outcomes are A's last four */
    const __m256i pairs = _mm256_setr_epi32(0x5, 0x9, 0x6, 0xa, 0xc, 0x9, 0xa, 0xc);
    const __m256i oi = narrow2(out_idx[0], out_idx[1]);
    const __m256i kept = _mm256_permutevar8x32_epi32(pairs, oi);
    const __m256i caseC = _mm256_cmpgt_epi32(oi, _mm256_set1_epi32(4));
    const __m256 v = _mm256_blendv_ps(join_ps(hf[0], hf[1]), join_ps(Rf[0], Rf[1]), _mm256_castsi256_ps(caseC));
    const __m256 ident = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(3), nnz));
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    for (int q = 0; q < 4; q++) {
        /* bit rank[q] of kept into the sign bit, which is all blendv reads */
        __m256 keep = _mm256_castsi256_ps(_mm256_sllv_epi32(kept, _mm256_sub_epi32(_mm256_set1_epi32(31), rank[q])));
        __m256i top = _mm256_and_si256(caseC, _mm256_cmpeq_epi32(rank[q], _mm256_set1_epi32(3))); /* case C: x4 as is */
        __m256 val = _mm256_blendv_ps(_mm256_or_ps(v, _mm256_and_ps(e[q], sign)), e[q], _mm256_castsi256_ps(top));
        y[q] = sel_ps(_mm256_blendv_ps(_mm256_blendv_ps(_mm256_setzero_ps(), val, keep), e[q], ident), finite);
    }
    return _mm256_xor_si256(finite, _mm256_set1_epi32(-1));
}

/* Exact MVUE 1:4 (prune_group.c: water-filling with n = 1, systematic sampling): keep the first
 * position whose running sum / total exceeds u, written as sign * total; in the rare lanes where
 * one value is >= the rounded total (the others below its last bit), keep it alone, unchanged. */
INLINE __m256i mvue14(__m256 y[4], const __m256 e[4], __m256i w0) {
    __m256 a[4];
    __m256i nnz;
    const __m256i finite = absolutes(a, &nnz, e);
    __m256d pick_h[2], sat_h[2];
    __m128 tf[2];
    for (int h = 0; h < 2; h++) {
        __m256d d[4], run[4];
        for (int k = 0; k < 4; k++) d[k] = half_pd(a[k], h);
        run[0] = d[0];
        for (int k = 1; k < 4; k++) run[k] = _mm256_add_pd(run[k - 1], d[k]); /* in index order */
        __m256d rem = run[3], top = _mm256_max_pd(_mm256_max_pd(d[0], d[1]), _mm256_max_pd(d[2], d[3]));
        sat_h[h] = _mm256_cmp_pd(top, rem, _CMP_GE_OQ);
        /* the reference keeps the first k with u < run[k] / rem * 1 (the * 1 is exact); those
         * thresholds do not decrease with k, so that k is the count of the ones not above u */
        __m256d u = u01_half(w0, h);
        __m256i k = _mm256_setzero_si256();
        for (int q = 0; q < 3; q++)
            k = _mm256_sub_epi64(k, _mm256_castpd_si256(_mm256_cmp_pd(u, _mm256_div_pd(run[q], rem), _CMP_NLT_UQ)));
        pick_h[h] = _mm256_castsi256_pd(k);
        tf[h] = _mm256_cvtpd_ps(rem); /* T = total / 1 */
    }
    const __m256i pick = narrow2(pick_h[0], pick_h[1]);
    const __m256 sat = _mm256_castsi256_ps(narrow2(sat_h[0], sat_h[1])), T = join_ps(tf[0], tf[1]);
    const __m256 amax = _mm256_max_ps(_mm256_max_ps(a[0], a[1]), _mm256_max_ps(a[2], a[3]));
    const __m256 ident = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(2), nnz));
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256i taken = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        __m256i top = _mm256_andnot_si256(taken, cmp_ps(a[k], amax, _CMP_EQ_OQ)); /* the first largest */
        taken = _mm256_or_si256(taken, top);
        __m256 sampled = sel_ps(_mm256_or_ps(T, _mm256_and_ps(e[k], sign)), _mm256_cmpeq_epi32(pick, _mm256_set1_epi32(k)));
        __m256 vk = _mm256_blendv_ps(sampled, sel_ps(e[k], top), sat);
        y[k] = sel_ps(_mm256_blendv_ps(vk, e[k], ident), finite);
    }
    return _mm256_xor_si256(finite, _mm256_set1_epi32(-1));
}

/* Approximate 2:4 MVUE (prune_mvue_approx_group): i1 = first nonzero whose running sum exceeds
 * u1 S, i2 likewise among the others with u2 and their sum; kept values x_i / p_i. */
INLINE __m256i approx24(__m256 y[4], const __m256 e[4], __m256i w0, __m256i w1) {
    __m256 a[4];
    __m256i nnz;
    const __m256i finite = absolutes(a, &nnz, e), w[2] = {w0, w1};
    __m256d pick_h[2][2]; /* [draw][half]: the index of the kept position */
    __m128 yf[2][2];      /* [draw][half]: its value */
    for (int h = 0; h < 2; h++) {
        const __m256d zd = _mm256_setzero_pd();
        __m256d d[4], rest[4], nz[4], sel[2][4];
        for (int k = 0; k < 4; k++) {
            d[k] = half_pd(a[k], h);
            nz[k] = _mm256_cmp_pd(d[k], zd, _CMP_NEQ_UQ);
        }
        __m256d S = _mm256_add_pd(_mm256_add_pd(_mm256_add_pd(d[0], d[1]), d[2]), d[3]);
        static const int others[4][3] = {{1, 2, 3}, {0, 2, 3}, {0, 1, 3}, {0, 1, 2}}; /* rest_k: in index order */
        for (int k = 0; k < 4; k++) rest[k] = _mm256_add_pd(_mm256_add_pd(d[others[k][0]], d[others[k][1]]), d[others[k][2]]);
        /* draw 0 over all positions (total S), draw 1 over all but the first pick (its rest) */
        for (int t = 0; t < 2; t++) {
            __m256d run = zd, tot = S, found = zd, last[4];
            if (t)
                for (int k = 0; k < 4; k++) tot = _mm256_blendv_pd(tot, rest[k], sel[0][k]);
            __m256d thr = _mm256_mul_pd(u01_half(w[t], h), tot);
            for (int k = 0; k < 4; k++) {
                __m256d live = t ? _mm256_andnot_pd(sel[0][k], nz[k]) : nz[k];
                run = _mm256_blendv_pd(run, _mm256_add_pd(run, d[k]), live);
                __m256d hit = _mm256_andnot_pd(found, _mm256_and_pd(live, _mm256_cmp_pd(thr, run, _CMP_LT_OQ)));
                sel[t][k] = hit;
                found = _mm256_or_pd(found, hit);
                last[k] = live;
            }
            /* rounding put the threshold at the very end: the last eligible position */
            __m256d later = zd;
            for (int k = 3; k >= 0; k--) {
                sel[t][k] = _mm256_or_pd(sel[t][k], _mm256_andnot_pd(_mm256_or_pd(later, found), last[k]));
                later = _mm256_or_pd(later, last[k]);
            }
        }
        /* p_i = a_i/S + sum_{j != i, a_j != 0} (a_j/S)(a_i/rest_j), for the two picks; each
         * product is masked by an AND before its add, so it can never become an FMA */
        __m256d q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm256_div_pd(d[k], S);
        for (int t = 0; t < 2; t++) {
            __m256d ai = zd, xi = zd, idx = zd;
            for (int k = 0; k < 4; k++) {
                ai = _mm256_blendv_pd(ai, d[k], sel[t][k]);
                xi = _mm256_blendv_pd(xi, half_pd(e[k], h), sel[t][k]);
                idx = _mm256_or_pd(idx, _mm256_and_pd(sel[t][k], _mm256_castsi256_pd(_mm256_set1_epi64x(k))));
            }
            __m256d p = _mm256_div_pd(ai, S);
            for (int k = 0; k < 4; k++)
                p = _mm256_add_pd(p, _mm256_and_pd(_mm256_andnot_pd(sel[t][k], nz[k]), _mm256_mul_pd(q[k], _mm256_div_pd(ai, rest[k]))));
            yf[t][h] = _mm256_cvtpd_ps(_mm256_div_pd(xi, p));
            pick_h[t][h] = idx;
        }
    }
    const __m256i i1 = narrow2(pick_h[0][0], pick_h[0][1]), i2 = narrow2(pick_h[1][0], pick_h[1][1]);
    const __m256 v1 = join_ps(yf[0][0], yf[0][1]), v2 = join_ps(yf[1][0], yf[1][1]);
    const __m256 ident = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(3), nnz));
    for (int k = 0; k < 4; k++) {
        const __m256i kk = _mm256_set1_epi32(k);
        __m256 v = _mm256_blendv_ps(sel_ps(v1, _mm256_cmpeq_epi32(i1, kk)), v2, _mm256_castsi256_ps(_mm256_cmpeq_epi32(i2, kk)));
        y[k] = sel_ps(_mm256_blendv_ps(v, e[k], ident), finite);
    }
    return _mm256_xor_si256(finite, _mm256_set1_epi32(-1));
}

/* ---- outputs ---- */

/* The compressed slots (prune_compress_group) of 8 transposed groups: nonzeros, padded with the
 * lowest-index zeros; sv[s], si[s] = value and index of the s-th stored element. One and two
 * slots are the lowest / highest stored element (blend chains); three go by counting. */
INLINE void slots4(__m256 sv[3], __m256i si[3], const __m256 y[4], int n) {
    __m256i sel[4], nz[4], nnz = _mm256_setzero_si256(), zeros = _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        nz[k] = cmp_ps(y[k], _mm256_setzero_ps(), _CMP_NEQ_UQ); /* NaN counts as nonzero */
        nnz = _mm256_sub_epi32(nnz, nz[k]);
    }
    const __m256i pad = _mm256_sub_epi32(_mm256_set1_epi32(n), nnz);
    for (int k = 0; k < 4; k++) {
        sel[k] = _mm256_or_si256(nz[k], _mm256_cmpgt_epi32(pad, zeros));
        zeros = _mm256_add_epi32(zeros, _mm256_add_epi32(_mm256_set1_epi32(1), nz[k]));
    }
    if (n <= 2) {
        sv[0] = y[3], si[0] = _mm256_set1_epi32(3);
        sv[1] = y[0], si[1] = _mm256_setzero_si256();
        for (int k = 2; k >= 0; k--) {
            sv[0] = _mm256_blendv_ps(sv[0], y[k], _mm256_castsi256_ps(sel[k]));
            si[0] = _mm256_blendv_epi8(si[0], _mm256_set1_epi32(k), sel[k]);
        }
        for (int k = 1; n == 2 && k < 4; k++) {
            sv[1] = _mm256_blendv_ps(sv[1], y[k], _mm256_castsi256_ps(sel[k]));
            si[1] = _mm256_blendv_epi8(si[1], _mm256_set1_epi32(k), sel[k]);
        }
        return;
    }
    for (int s = 0; s < n; s++) {
        __m256i cnt = _mm256_setzero_si256();
        sv[s] = _mm256_setzero_ps();
        si[s] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            __m256i hit = _mm256_and_si256(sel[k], _mm256_cmpeq_epi32(cnt, _mm256_set1_epi32(s)));
            sv[s] = _mm256_blendv_ps(sv[s], y[k], _mm256_castsi256_ps(hit));
            si[s] = _mm256_blendv_epi8(si[s], _mm256_set1_epi32(k), hit);
            cnt = _mm256_sub_epi32(cnt, sel[k]);
        }
    }
}

/* Row axis: y[k] is row 4g+k at channels [c, c+cnt); slot row g*n+s holds slot s. */
INLINE void store_rows(const prune_job *j, int64_t g, int64_t c, int cnt, const __m256 y[4]) {
    const int64_t C = j->C;
    const int n = j->n;
    if (j->out)
        for (int k = 0; k < 4; k++) store_ps(j->out + (4 * g + k) * C + c, y[k], cnt);
    if (!j->vals) return;
    __m256 sv[3];
    __m256i si[3];
    slots4(sv, si, y, n);
    for (int s = 0; s < n; s++) {
        uint8_t *io = j->idx + (g * n + s) * C + c, t[16];
        __m128i lo, hi;
        low_bytes(&lo, &hi, si[s]);
        store_ps(j->vals + (g * n + s) * C + c, sv[s], cnt);
        _mm_storeu_si128((__m128i *)t, _mm_unpacklo_epi32(lo, hi));
        memcpy(io, t, (size_t)cnt); /* cnt = 8: one plain 8-byte store */
    }
}

/* Channel axis: the tensor is a flat run of groups (group r*G + g starts at x + 4 (r*G + g)), so
 * a batch is groups gi .. gi+ng-1 (ng <= 8) wherever the rows break. In memory vector q holds
 * groups 2q, 2q+1; transposed, lane l holds group {0 2 4 6 1 3 5 7}[l]. The transpose (4x4 in
 * each 128-bit half) is its own inverse. */
INLINE void transpose4(__m256 o[4], const __m256 a[4]) {
    __m256 t0 = _mm256_unpacklo_ps(a[0], a[1]), t1 = _mm256_unpackhi_ps(a[0], a[1]);
    __m256 t2 = _mm256_unpacklo_ps(a[2], a[3]), t3 = _mm256_unpackhi_ps(a[2], a[3]);
    o[0] = _mm256_shuffle_ps(t0, t2, 0x44), o[1] = _mm256_shuffle_ps(t0, t2, 0xee);
    o[2] = _mm256_shuffle_ps(t1, t3, 0x44), o[3] = _mm256_shuffle_ps(t1, t3, 0xee);
}

/* Floats of vector q of a batch of ng groups. */
INLINE int flat_floats(int ng, int q) { return ng - 2 * q >= 2 ? 8 : ng - 2 * q > 0 ? 4 * (ng - 2 * q) : 0; }

/* The compressed form is flat too: slot s of group gi+g at (gi+g)*n + s. */
INLINE void store_flat(const prune_job *j, int64_t gi, int ng, const __m256 y[4]) {
    const int n = j->n;
    if (j->out) {
        __m256 a[4];
        transpose4(a, y);
        for (int q = 0; q < 4 && 2 * q < ng; q++) store_ps(j->out + 4 * (gi + 2 * q), a[q], flat_floats(ng, q));
    }
    if (!j->vals) return;
    __m256 sv[3];
    __m256i si[3];
    slots4(sv, si, y, n);
    float *vals = j->vals + gi * n;
    uint8_t *idx = j->idx + gi * n;
    __m128i lo, hi;
    if (ng == 8 && n == 1) { /* back to group order; the bytes interleave groups 0 2 4 6 with 1 3 5 7 */
        low_bytes(&lo, &hi, si[0]);
        _mm256_storeu_ps(vals, _mm256_permutevar8x32_ps(sv[0], _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
        _mm_storel_epi64((__m128i *)idx, _mm_unpacklo_epi8(lo, hi));
    } else if (ng == 8 && n == 2) { /* interleave the two slots: pairs (64 bits) of groups 0 2 1 3 and 4 6 5 7 */
        const __m256i w16 = _mm256_packs_epi32(_mm256_or_si256(si[0], _mm256_slli_epi32(si[1], 8)), _mm256_setzero_si256());
        _mm256_storeu_pd((double *)vals, _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_unpacklo_ps(sv[0], sv[1])), 0xd8));
        _mm256_storeu_pd((double *)(vals + 8), _mm256_permute4x64_pd(_mm256_castps_pd(_mm256_unpackhi_ps(sv[0], sv[1])), 0xd8));
        _mm_storeu_si128((__m128i *)idx, _mm_unpacklo_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
    } else { /* tails and n = 3: through memory */
        static const int lane_of[8] = {0, 4, 1, 5, 2, 6, 3, 7};
        float tv[3][8];
        int32_t ti[3][8];
        for (int s = 0; s < n; s++) {
            _mm256_storeu_ps(tv[s], sv[s]);
            _mm256_storeu_si256((__m256i *)ti[s], si[s]);
        }
        for (int g = 0; g < ng; g++)
            for (int s = 0; s < n; s++) {
                vals[n * g + s] = tv[s][lane_of[g]];
                idx[n * g + s] = (uint8_t)ti[s][lane_of[g]];
            }
    }
}

/* One batch of 8 groups: -1 if it must go to the reference, else 1 on a non-finite value, else 0. */
INLINE int decide(const prune_job *j, const __m256i w[4], __m256 y[4], const __m256 e[4]) {
    if (j->fn == SDGP_PRUNE_RANDOM) return random4(y, e, w, j->n) ? 0 : -1;
    __m256i bad = j->fn == SDGP_PRUNE_MVUE_APPROX ? approx24(y, e, w[0], w[1]) : j->n == 2 ? mvue24(y, e, w[0]) : mvue14(y, e, w[0]);
    return !_mm256_testz_si256(bad, bad);
}

/* The batches below are called with a constant count (8) wherever a batch is whole, so the
 * compiler emits plain loads and stores: masked ones cost far more. */

/* Row axis: rows 4g .. 4g+3 at channels [c, c+cnt). Returns as decide. */
INLINE int row_batch(const prune_job *j, const __m256i w[4], int64_t g, int64_t c, int cnt) {
    __m256 e[4], y[4];
    for (int k = 0; k < 4; k++) e[k] = load_ps(j->x + (4 * g + k) * j->C + c, cnt);
    const int r = decide(j, w, y, e);
    if (r >= 0) store_rows(j, g, c, cnt, y);
    return r;
}

/* Channel axis: groups gi .. gi+ng-1 (ng <= 8) of the flat run; lanes past the end hold zero
 * groups: harmless, and not stored. Returns as decide. */
INLINE int flat_batch(const prune_job *j, const __m256i w[4], int64_t gi, int ng) {
    __m256 a[4], e[4], y[4];
    for (int q = 0; q < 4; q++) a[q] = load_ps(j->x + 4 * (gi + 2 * q), flat_floats(ng, q)); /* 0: zeros, reads nothing */
    transpose4(e, a);
    const int r = decide(j, w, y, e);
    if (r >= 0) store_flat(j, gi, ng, y);
    return r;
}

int prune_avx2_sampled(const prune_job *j, int64_t t0, int64_t t1) {
    if (j->m != 4) return prune_avx2_sampled_other(j, t0, t1);
    if (!prune_sampled4_vectorised(j)) return -1;
    const int64_t C = j->C;
    const __m256i in_order = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int bad = 0;
    __m256i w[CHAINS][4];
    if (j->axis == SDGP_AXIS_ROW) {
        /* batches in group order (group (g, c) is g*C + c); one Philox call serves the next CHAINS
         * batches while their groups run on, across row groups too when C % 8 == 0 (a call per
         * row group would waste 3/4 of it at C = 8) */
        uint64_t base = 0;
        int b = CHAINS;
        for (int64_t g = t0; g < t1; g++)
            for (int64_t c = 0; c < C; c += 8) {
                const uint64_t gi = j->group0 + (uint64_t)(g * C + c);
                if (b == CHAINS || gi != base + 8 * (uint64_t)b) {
                    philox(w, j->key, base = gi, in_order);
                    b = 0;
                }
                const int r = C - c >= 8 ? row_batch(j, w[b++], g, c, 8) : row_batch(j, w[b++], g, c, (int)(C - c));
                if (r < 0) { /* the reference redoes row group g (probability ~2^-29); its bits are ours */
                    bad |= prune_ref_prune(j, g, g + 1);
                    break;
                }
                bad |= r;
            }
        return bad;
    }
    const __m256i transposed = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7); /* the lane order of transpose4 */
    const int64_t G = C / 4, end = t1 * G;
    for (int64_t g0 = t0 * G; g0 < end; g0 += 8 * CHAINS) {
        philox(w, j->key, j->group0 + (uint64_t)g0, transposed);
        for (int b = 0; b < CHAINS && g0 + 8 * b < end; b++) {
            const int64_t gi = g0 + 8 * b;
            const int ng = end - gi >= 8 ? 8 : (int)(end - gi);
            const int r = ng == 8 ? flat_batch(j, w[b], gi, 8) : flat_batch(j, w[b], gi, ng);
            /* the reference redoes the rows of this batch (probability ~2^-29) */
            bad |= r < 0 ? prune_ref_prune(j, gi / G, (gi + ng - 1) / G + 1) : r;
        }
    }
    return bad;
}
