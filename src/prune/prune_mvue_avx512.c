/* AVX-512 random and MVUE kernels for m = 4 (random n:4, mvue 1:4 and 2:4, mvue-approx 2:4),
 * 16 groups at a time.
 *
 * Philox4x32-10 runs on 64 counters (group indices) at once, as four independent chains of 16
 * (one chain waits on multiply latency; four keep the multiplier busy). The groups are then held
 * "transposed": vector e_k holds element k of 16 groups (the row axis is laid out that way; the
 * channel axis is transposed in registers), so the per-group arithmetic of prune_group.c runs
 * once per 16 groups. Every operation mirrors the reference in order and precision (double for
 * the MVUE probabilities, no fused multiply-add anywhere a rounding could differ), so outputs are
 * bitwise the reference's. A batch whose random draws would need the reference's rejection loop
 * (probability 2^-32 per group) is handed to the reference whole. */
#include <immintrin.h>
#include <string.h>

#include "core/avx512_mem.h"
#include "prune/prune_internal.h"

/* ---- Philox4x32-10 on 16 counters: groups g0 .. g0+15, draw block 0 ---- */

/* hi and lo 32 bits of a * b (b broadcast) for 16 lanes from two 32x32->64 multiplies: the even
 * lanes' products and the odd lanes' products, their dwords swapped into place by vpshufd. */
static inline void mul_hilo(__m512i *hi, __m512i *lo, __m512i a, __m512i b) {
    __m512i even = _mm512_mul_epu32(a, b), odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), b);
    *hi = _mm512_mask_shuffle_epi32(odd, 0x5555, even, (_MM_PERM_ENUM)0xb1);
    *lo = _mm512_mask_shuffle_epi32(even, 0xaaaa, odd, (_MM_PERM_ENUM)0xb1);
}

/* Words w[b][0..3] of groups g0 + 16 b + lane (b < 4), block 0. Four independent chains, because
 * one alone waits on the multiply latency of each round. */
static inline __attribute__((always_inline)) void philox64(__m512i w[4][4], sdgp_philox_key key, uint64_t g0) {
    const __m512i M0 = _mm512_set1_epi32((int)0xD2511F53u), M1 = _mm512_set1_epi32((int)0xCD9E8D57u);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i c[4][4];
    for (int b = 0; b < 4; b++) {
        uint64_t g = g0 + 16 * (uint64_t)b;
        __m512i lo = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)g), iota), hi = _mm512_set1_epi32((int)(uint32_t)(g >> 32));
        /* the high word carries where the low word wrapped */
        c[b][0] = lo;
        c[b][1] = _mm512_mask_add_epi32(hi, _mm512_cmplt_epu32_mask(lo, _mm512_set1_epi32((int)(uint32_t)g)), hi, _mm512_set1_epi32(1));
        c[b][2] = _mm512_setzero_si512();
        c[b][3] = _mm512_set1_epi32(0x53444750);
    }
    uint32_t k0 = key.v[0], k1 = key.v[1];
    for (int r = 0; r < 10; r++) {
        const __m512i K0 = _mm512_set1_epi32((int)k0), K1 = _mm512_set1_epi32((int)k1);
#pragma GCC unroll 4
        for (int b = 0; b < 4; b++) {
            __m512i hi0, lo0, hi1, lo1;
            mul_hilo(&hi0, &lo0, c[b][0], M0);
            mul_hilo(&hi1, &lo1, c[b][2], M1);
            c[b][0] = _mm512_ternarylogic_epi32(hi1, c[b][1], K0, 0x96); /* xor of three */
            c[b][1] = lo1;
            c[b][2] = _mm512_ternarylogic_epi32(hi0, c[b][3], K1, 0x96);
            c[b][3] = lo0;
        }
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    for (int b = 0; b < 4; b++)
        for (int q = 0; q < 4; q++) w[b][q] = c[b][q];
}

/* ---- transposes between 4 vectors of 4 groups each and 4 vectors of one element each ---- */

/* The 128-bit blocks of 4 vectors as a 4x4 matrix, transposed. */
static inline void blocks4(__m512 out[4], const __m512 t[4]) {
    __m512 x0 = _mm512_shuffle_f32x4(t[0], t[1], 0x44), y0 = _mm512_shuffle_f32x4(t[2], t[3], 0x44);
    __m512 x1 = _mm512_shuffle_f32x4(t[0], t[1], 0xee), y1 = _mm512_shuffle_f32x4(t[2], t[3], 0xee);
    out[0] = _mm512_shuffle_f32x4(x0, y0, 0x88);
    out[1] = _mm512_shuffle_f32x4(x0, y0, 0xdd);
    out[2] = _mm512_shuffle_f32x4(x1, y1, 0x88);
    out[3] = _mm512_shuffle_f32x4(x1, y1, 0xdd);
}

/* a[q] lane 4j+k = element k of group 4q+j  ->  e[k] lane 4q+j: a 4x4 transpose inside each
 * vector, then of the blocks across them. */
static inline void to_elements(__m512 e[4], const __m512 a[4]) {
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 t[4];
    for (int q = 0; q < 4; q++) t[q] = _mm512_permutexvar_ps(p, a[q]);
    blocks4(e, t);
}

/* The inverse: blocks first, then within. */
static inline void to_groups(__m512 a[4], const __m512 e[4]) {
    const __m512i p = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    __m512 t[4];
    blocks4(t, e);
    for (int q = 0; q < 4; q++) a[q] = _mm512_permutexvar_ps(p, t[q]);
}

/* ---- the decisions, 16 groups at a time ---- */

/* Random n:4 (prune_random_mask): k = min(n, 4-n) Fisher-Yates draws from words w0, w1.
 * Returns 0 when some lane would need a rejection redraw (w1 == 0 with two draws). */
static inline __attribute__((always_inline)) int random4(__m512 y[4], const __m512 e[4], const __m512i w[4], int n) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i j0 = _mm512_srli_epi32(w[0], 30); /* uniform below 4: (w * 4) >> 32, never rejects */
    __m512i chosen = _mm512_sllv_epi32(one, j0);
    if (n == 2) {
        if (_mm512_cmpeq_epi32_mask(w[1], _mm512_setzero_si512())) return 0;
        /* 1 + (w * 3) >> 32 */
        __m512i j1 = _mm512_mask_add_epi32(one, _mm512_cmpge_epu32_mask(w[1], _mm512_set1_epi32(0x55555556)), one, one);
        j1 = _mm512_mask_add_epi32(j1, _mm512_cmpge_epu32_mask(w[1], _mm512_set1_epi32((int)0xAAAAAAABu)), j1, one);
        /* after the first swap, position j1 holds 0 if j1 == j0, else j1 */
        __m512i p1 = _mm512_maskz_mov_epi32(_mm512_cmpneq_epi32_mask(j1, j0), j1);
        chosen = _mm512_or_si512(chosen, _mm512_sllv_epi32(one, p1));
    }
    if (n == 3) chosen = _mm512_andnot_si512(chosen, _mm512_set1_epi32(15));
    for (int k = 0; k < 4; k++) y[k] = _mm512_maskz_mov_ps(_mm512_test_epi32_mask(chosen, _mm512_set1_epi32(1 << k)), e[k]);
    return 1;
}

/* 8 doubles from the low or high half of 16 floats. */
static inline __m512d half_pd(__m512 v, int h) {
    return _mm512_cvtps_pd(h ? _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)) : _mm512_castps512_ps256(v));
}

/* Exact MVUE 2:4 (prune_mvue_group with the 2:4 plan). Returns the lanes holding a NaN/Inf. */
static inline __attribute__((always_inline)) __mmask16 mvue24(__m512 y[4], const __m512 e[4], __m512i w0) {
    const __m512i one = _mm512_set1_epi32(1), zero = _mm512_setzero_si512();
    __m512 a[4];
    __mmask16 finite = 0xffff, nz[4];
    __m512i rank[4], nnz = zero;
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_abs_ps(e[k]);
        finite &= _mm512_cmp_ps_mask(a[k], _mm512_set1_ps(3.40282347e38f), _CMP_LE_OQ);
        nz[k] = _mm512_cmp_ps_mask(a[k], _mm512_setzero_ps(), _CMP_NEQ_UQ);
        nnz = _mm512_mask_add_epi32(nnz, nz[k], nnz, one);
        rank[k] = zero;
    }
    /* stable ascending ranks: j goes before i (i < j) only when strictly smaller */
    for (int i = 0; i < 4; i++)
        for (int j = i + 1; j < 4; j++) {
            __mmask16 j_first = _mm512_cmp_ps_mask(a[j], a[i], _CMP_LT_OQ);
            rank[i] = _mm512_mask_add_epi32(rank[i], j_first, rank[i], one);
            rank[j] = _mm512_mask_add_epi32(rank[j], (__mmask16)~j_first, rank[j], one);
        }
    /* sorted values a1 <= a2 <= a3 <= a4 (a network: ties need no order here) */
    __m512 s[4] = {a[0], a[1], a[2], a[3]};
    const int net[5][2] = {{0, 1}, {2, 3}, {0, 2}, {1, 3}, {1, 2}};
    for (int q = 0; q < 5; q++) {
        __m512 lo = _mm512_min_ps(s[net[q][0]], s[net[q][1]]), hi = _mm512_max_ps(s[net[q][0]], s[net[q][1]]);
        s[net[q][0]] = lo;
        s[net[q][1]] = hi;
    }
    /* the plan in double, 8 groups per half, in the reference's order of operations; each half
     * ends as the index of its outcome in the table below (A 0-4, B 5-8, C 10-12) */
    __m256i out_idx[2];
    __m256 hf[2], Rf[2];
    for (int h = 0; h < 2; h++) {
        const __m512d zd = _mm512_setzero_pd(), four = _mm512_set1_pd(4.0);
        __m512d a1 = half_pd(s[0], h), a2 = half_pd(s[1], h), a3 = half_pd(s[2], h), a4 = half_pd(s[3], h);
        __m512d a12 = _mm512_add_pd(a1, a2), S = _mm512_add_pd(a12, _mm512_add_pd(a3, a4)), R = _mm512_add_pd(a12, a3);
        __m512d d34 = _mm512_sub_pd(a3, a4), a1x2 = _mm512_add_pd(a1, a1), tA0 = _mm512_add_pd(a1x2, d34);
        __mmask8 cC = _mm512_cmp_pd_mask(a4, R, _CMP_GE_OQ);
        __mmask8 cA = (__mmask8)(_mm512_cmp_pd_mask(tA0, zd, _CMP_GT_OQ) & ~cC), cB = (__mmask8)~(cA | cC);
        __m512d tA1 = _mm512_mul_pd(four, a1);
        __m512d t[4];
        t[0] = _mm512_mask_blend_pd(cC, _mm512_mask_blend_pd(cA, a1x2, tA0), a1);
        t[1] = _mm512_mask_blend_pd(cC, _mm512_mask_blend_pd(cA, _mm512_add_pd(a1x2, _mm512_sub_pd(R, a4)), tA1), a12);
        t[2] = _mm512_mask_blend_pd(cA, _mm512_add_pd(a12, a12), _mm512_add_pd(tA1, _mm512_add_pd(_mm512_add_pd(a2, a2), d34)));
        t[3] = _mm512_mul_pd(four, a12);
        __m512d total = _mm512_mask_blend_pd(cC, _mm512_mask_blend_pd(cA, S, _mm512_add_pd(S, S)), R);
        __m512d u = _mm512_mul_pd(_mm512_cvtepu32_pd(h ? _mm512_extracti64x4_epi64(w0, 1) : _mm512_castsi512_si256(w0)), _mm512_set1_pd(1.0 / 4294967296.0));
        __m512d ut = _mm512_mul_pd(u, total);
        /* outcome = #{j < count-1 : u*total >= t[j]}: C counts t0, t1; B t0..t2; A t0..t3 */
        const __mmask8 live[4] = {0xff, 0xff, (__mmask8)(cA | cB), cA};
        const __m256i one8 = _mm256_set1_epi32(1);
        __m256i k8 = _mm256_mask_blend_epi32(cA, _mm256_mask_blend_epi32(cC, _mm256_set1_epi32(5), _mm256_set1_epi32(10)), _mm256_setzero_si256());
        for (int q = 0; q < 4; q++) k8 = _mm256_mask_add_epi32(k8, _mm512_mask_cmp_pd_mask(live[q], ut, t[q], _CMP_NLT_UQ), k8, one8);
        out_idx[h] = k8;
        hf[h] = _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_set1_pd(0.5), S));
        Rf[h] = _mm512_cvtpd_ps(R);
    }
    /* kept ranks (bits over sorted positions) of each outcome */
    const __m512i pairs = _mm512_setr_epi32(0x5, 0x9, 0x6, 0xa, 0xc, 0x9, 0x6, 0xa, 0xc, 0, 0x9, 0xa, 0xc, 0, 0, 0);
    __m512i oi = _mm512_inserti64x4(_mm512_castsi256_si512(out_idx[0]), out_idx[1], 1);
    __m512i kept = _mm512_permutexvar_epi32(oi, pairs);
    __mmask16 caseC = _mm512_cmpge_epi32_mask(oi, _mm512_set1_epi32(10));
    __m512 hv = _mm512_insertf32x8(_mm512_castps256_ps512(hf[0]), hf[1], 1), Rv = _mm512_insertf32x8(_mm512_castps256_ps512(Rf[0]), Rf[1], 1);
    __m512 v = _mm512_mask_blend_ps(caseC, hv, Rv);
    __mmask16 ident = _mm512_cmple_epi32_mask(nnz, _mm512_set1_epi32(2));
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    for (int q = 0; q < 4; q++) {
        __mmask16 keep = _mm512_test_epi32_mask(_mm512_srlv_epi32(kept, rank[q]), one);
        __mmask16 top = caseC & _mm512_cmpeq_epi32_mask(rank[q], _mm512_set1_epi32(3)); /* case C: x4 as is */
        __m512 val = _mm512_mask_blend_ps(top, _mm512_or_ps(v, _mm512_and_ps(e[q], sign)), e[q]);
        y[q] = _mm512_mask_blend_ps(ident, _mm512_maskz_mov_ps(keep & finite, val), e[q]);
        y[q] = _mm512_maskz_mov_ps(finite, y[q]);
    }
    return (__mmask16)~finite;
}

/* Exact MVUE 1:4 (prune_group.c: water-filling with n = 1, systematic sampling): keep the first
 * position whose running sum / total exceeds u, written as sign * total; in the rare lanes where
 * one value is >= the rounded total (the others below its last bit), keep it alone, unchanged. */
static inline __attribute__((always_inline)) __mmask16 mvue14(__m512 y[4], const __m512 e[4], __m512i w0) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512 a[4];
    __mmask16 finite = 0xffff, pick[4] = {0, 0, 0, 0}, sat = 0;
    __m512i nnz = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_abs_ps(e[k]);
        finite &= _mm512_cmp_ps_mask(a[k], _mm512_set1_ps(3.40282347e38f), _CMP_LE_OQ);
        nnz = _mm512_mask_add_epi32(nnz, _mm512_cmp_ps_mask(a[k], _mm512_setzero_ps(), _CMP_NEQ_UQ), nnz, one);
    }
    __m256 tf[2];
    for (int h = 0; h < 2; h++) {
        __m512d d[4], run[4];
        for (int k = 0; k < 4; k++) d[k] = half_pd(a[k], h);
        run[0] = d[0];
        for (int k = 1; k < 4; k++) run[k] = _mm512_add_pd(run[k - 1], d[k]); /* in index order */
        __m512d rem = run[3], top = _mm512_max_pd(_mm512_max_pd(d[0], d[1]), _mm512_max_pd(d[2], d[3]));
        sat |= (__mmask16)((unsigned)_mm512_cmp_pd_mask(top, rem, _CMP_GE_OQ) << (8 * h));
        __m512d u = _mm512_mul_pd(_mm512_cvtepu32_pd(h ? _mm512_extracti64x4_epi64(w0, 1) : _mm512_castsi512_si256(w0)), _mm512_set1_pd(1.0 / 4294967296.0));
        __mmask8 before = 0; /* lanes decided at an earlier position */
        for (int k = 0; k < 3; k++) {
            __mmask8 lt = _mm512_cmp_pd_mask(u, _mm512_mul_pd(_mm512_div_pd(run[k], rem), _mm512_set1_pd(1.0)), _CMP_LT_OQ);
            pick[k] |= (__mmask16)((unsigned)(lt & ~before) << (8 * h));
            before |= lt;
        }
        pick[3] |= (__mmask16)((unsigned)(__mmask8)~before << (8 * h));
        tf[h] = _mm512_cvtpd_ps(rem); /* T = total / 1 */
    }
    __m512 T = _mm512_insertf32x8(_mm512_castps256_ps512(tf[0]), tf[1], 1);
    __m512 amax = _mm512_max_ps(_mm512_max_ps(a[0], a[1]), _mm512_max_ps(a[2], a[3]));
    __mmask16 ident = _mm512_cmple_epi32_mask(nnz, one), taken = 0;
    const __m512 sign = _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u));
    for (int k = 0; k < 4; k++) {
        __mmask16 top = _mm512_cmp_ps_mask(a[k], amax, _CMP_EQ_OQ) & (__mmask16)~taken; /* the first largest */
        taken |= top;
        __m512 v = _mm512_mask_blend_ps(sat, _mm512_maskz_mov_ps(pick[k], _mm512_or_ps(T, _mm512_and_ps(e[k], sign))), _mm512_maskz_mov_ps(top, e[k]));
        y[k] = _mm512_maskz_mov_ps(finite, _mm512_mask_blend_ps(ident, v, e[k]));
    }
    return (__mmask16)~finite;
}

/* Approximate 2:4 MVUE (prune_mvue_approx_group): i1 = first nonzero whose running sum exceeds
 * u1 S, i2 likewise among the others with u2 and their sum; kept values x_i / p_i. The sums
 * p += (a_j/S)(a_i/rest_j) use masked adds, which the compiler never fuses into an FMA. */
static inline __attribute__((always_inline)) __mmask16 approx24(__m512 y[4], const __m512 e[4], __m512i w0, __m512i w1) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512 a[4];
    __mmask16 finite = 0xffff, s1[4] = {0, 0, 0, 0}, s2[4] = {0, 0, 0, 0};
    __m512i nnz = _mm512_setzero_si512();
    for (int k = 0; k < 4; k++) {
        a[k] = _mm512_abs_ps(e[k]);
        finite &= _mm512_cmp_ps_mask(a[k], _mm512_set1_ps(3.40282347e38f), _CMP_LE_OQ);
        nnz = _mm512_mask_add_epi32(nnz, _mm512_cmp_ps_mask(a[k], _mm512_setzero_ps(), _CMP_NEQ_UQ), nnz, one);
    }
    __m256 yf[2][2]; /* the two kept values per half */
    for (int h = 0; h < 2; h++) {
        const __m512d zd = _mm512_setzero_pd(), scale = _mm512_set1_pd(1.0 / 4294967296.0);
        __m512d d[4], rest[4];
        __mmask8 nz[4], sel[2][4];
        for (int k = 0; k < 4; k++) {
            d[k] = half_pd(a[k], h);
            nz[k] = _mm512_cmp_pd_mask(d[k], zd, _CMP_NEQ_UQ);
        }
        __m512d S = _mm512_add_pd(_mm512_add_pd(_mm512_add_pd(d[0], d[1]), d[2]), d[3]);
        rest[0] = _mm512_add_pd(_mm512_add_pd(d[1], d[2]), d[3]);
        rest[1] = _mm512_add_pd(_mm512_add_pd(d[0], d[2]), d[3]);
        rest[2] = _mm512_add_pd(_mm512_add_pd(d[0], d[1]), d[3]);
        rest[3] = _mm512_add_pd(_mm512_add_pd(d[0], d[1]), d[2]);
        __m512d u[2] = {_mm512_mul_pd(_mm512_cvtepu32_pd(h ? _mm512_extracti64x4_epi64(w0, 1) : _mm512_castsi512_si256(w0)), scale),
                        _mm512_mul_pd(_mm512_cvtepu32_pd(h ? _mm512_extracti64x4_epi64(w1, 1) : _mm512_castsi512_si256(w1)), scale)};
        /* draw 0 over all positions (total S), draw 1 over all but the first pick (its rest) */
        for (int t = 0; t < 2; t++) {
            __m512d run = zd, tot = S;
            if (t)
                for (int k = 0; k < 4; k++) tot = _mm512_mask_mov_pd(tot, sel[0][k], rest[k]);
            __m512d thr = _mm512_mul_pd(u[t], tot);
            __mmask8 found = 0, last[4];
            for (int k = 0; k < 4; k++) {
                __mmask8 live = nz[k] & (t ? (__mmask8)~sel[0][k] : 0xff);
                run = _mm512_mask_add_pd(run, live, run, d[k]);
                __mmask8 hit = live & _mm512_cmp_pd_mask(thr, run, _CMP_LT_OQ) & (__mmask8)~found;
                sel[t][k] = hit;
                found |= hit;
                last[k] = live;
            }
            /* rounding put the threshold at the very end: the last eligible position */
            __mmask8 later = 0;
            for (int k = 3; k >= 0; k--) {
                sel[t][k] |= (__mmask8)(last[k] & ~later & ~found);
                later |= last[k];
            }
        }
        /* p_i = a_i/S + sum_{j != i, a_j != 0} (a_j/S)(a_i/rest_j), for the two picks */
        __m512d q[4];
        for (int k = 0; k < 4; k++) q[k] = _mm512_div_pd(d[k], S);
        for (int t = 0; t < 2; t++) {
            __m512d ai = zd, xi = zd;
            for (int k = 0; k < 4; k++) {
                ai = _mm512_mask_mov_pd(ai, sel[t][k], d[k]);
                xi = _mm512_mask_mov_pd(xi, sel[t][k], half_pd(e[k], h));
            }
            __m512d p = _mm512_div_pd(ai, S);
            for (int k = 0; k < 4; k++)
                p = _mm512_mask_add_pd(p, (__mmask8)(nz[k] & ~sel[t][k]), p, _mm512_mul_pd(q[k], _mm512_div_pd(ai, rest[k])));
            yf[h][t] = _mm512_cvtpd_ps(_mm512_div_pd(xi, p));
        }
        for (int k = 0; k < 4; k++) {
            s1[k] |= (__mmask16)((unsigned)sel[0][k] << (8 * h));
            s2[k] |= (__mmask16)((unsigned)sel[1][k] << (8 * h));
        }
    }
    __m512 v1 = _mm512_insertf32x8(_mm512_castps256_ps512(yf[0][0]), yf[1][0], 1);
    __m512 v2 = _mm512_insertf32x8(_mm512_castps256_ps512(yf[0][1]), yf[1][1], 1);
    __mmask16 ident = _mm512_cmple_epi32_mask(nnz, _mm512_set1_epi32(2));
    for (int k = 0; k < 4; k++) {
        __m512 v = _mm512_mask_mov_ps(_mm512_maskz_mov_ps(s1[k], v1), s2[k], v2);
        y[k] = _mm512_maskz_mov_ps(finite, _mm512_mask_blend_ps(ident, v, e[k]));
    }
    return (__mmask16)~finite;
}

/* ---- outputs ---- */

/* The canonical compressed slots (prune_compress_group) of 16 transposed groups: nonzeros, padded
 * with the lowest-index zeros. sel[k]: lanes whose element k is stored. */
static inline __attribute__((always_inline)) void canonical4(__mmask16 sel[4], const __m512 y[4], int n) {
    __mmask16 nz[4];
    __m512i nnz = _mm512_setzero_si512(), zeros = _mm512_setzero_si512();
    const __m512i one = _mm512_set1_epi32(1);
    for (int k = 0; k < 4; k++) {
        nz[k] = _mm512_cmp_ps_mask(y[k], _mm512_setzero_ps(), _CMP_NEQ_UQ); /* NaN counts as nonzero */
        nnz = _mm512_mask_add_epi32(nnz, nz[k], nnz, one);
    }
    __m512i pad = _mm512_sub_epi32(_mm512_set1_epi32(n), nnz);
    for (int k = 0; k < 4; k++) {
        sel[k] = nz[k] | (__mmask16)(~nz[k] & _mm512_cmplt_epi32_mask(zeros, pad));
        zeros = _mm512_mask_add_epi32(zeros, (__mmask16)~nz[k], zeros, one);
    }
}

/* The compressed slots of 16 transposed groups: sv[s], si[s] = value and index of the s-th
 * stored element. One and two slots are the lowest / highest stored element (blend chains);
 * three go by counting. */
static inline __attribute__((always_inline)) void slots4(__m512 sv[3], __m512i si[3], const __m512 y[4], int n) {
    __mmask16 sel[4];
    canonical4(sel, y, n);
    if (n <= 2) {
        sv[0] = y[3];
        si[0] = _mm512_set1_epi32(3);
        for (int k = 2; k >= 0; k--) {
            sv[0] = _mm512_mask_mov_ps(sv[0], sel[k], y[k]);
            si[0] = _mm512_mask_mov_epi32(si[0], sel[k], _mm512_set1_epi32(k));
        }
        if (n == 1) return;
        sv[1] = y[0];
        si[1] = _mm512_setzero_si512();
        for (int k = 1; k < 4; k++) {
            sv[1] = _mm512_mask_mov_ps(sv[1], sel[k], y[k]);
            si[1] = _mm512_mask_mov_epi32(si[1], sel[k], _mm512_set1_epi32(k));
        }
        return;
    }
    for (int s = 0; s < n; s++) {
        __m512i cnt = _mm512_setzero_si512();
        sv[s] = _mm512_setzero_ps();
        si[s] = _mm512_setzero_si512();
        for (int k = 0; k < 4; k++) {
            __mmask16 hit = _mm512_mask_cmpeq_epi32_mask(sel[k], cnt, _mm512_set1_epi32(s));
            sv[s] = _mm512_mask_mov_ps(sv[s], hit, y[k]);
            si[s] = _mm512_mask_mov_epi32(si[s], hit, _mm512_set1_epi32(k));
            cnt = _mm512_mask_add_epi32(cnt, sel[k], cnt, _mm512_set1_epi32(1));
        }
    }
}

/* Row axis: y[k] is row 4g+k at channels [c, c+16); slot row g*n+s holds slot s. */
static inline __attribute__((always_inline)) void store_rows(const prune_job *j, int64_t g, int64_t c, __mmask16 valid, const __m512 y[4]) {
    const int64_t C = j->C;
    const int n = j->n;
    if (j->out)
        for (int k = 0; k < 4; k++) _mm512_mask_storeu_ps(j->out + (4 * g + k) * C + c, valid, y[k]);
    if (!j->vals) return;
    __m512 sv[3];
    __m512i si[3];
    slots4(sv, si, y, n);
    for (int s = 0; s < n; s++) {
        _mm512_mask_storeu_ps(j->vals + (g * n + s) * C + c, valid, sv[s]);
        _mm_mask_storeu_epi8(j->idx + (g * n + s) * C + c, valid, _mm512_cvtepi32_epi8(si[s]));
    }
}

/* Channel axis: the tensor is a flat run of groups (group r*G + g starts at x + 4 (r*G + g)), so
 * a batch is groups gi .. gi+ng-1 (ng <= 16) wherever the rows break; the compressed form is flat
 * too: slot s of group gi+g at (gi+g)*n + s. */
static inline __attribute__((always_inline)) void store_flat(const prune_job *j, int64_t gi, int ng, const __m512 y[4]) {
    const int n = j->n;
    if (j->out) {
        __m512 a[4];
        to_groups(a, y);
        for (int q = 0; q < 4 && 4 * q < ng; q++) {
            int left = ng - 4 * q;
            _mm512_mask_storeu_ps(j->out + 4 * (gi + 4 * q), left >= 4 ? (__mmask16)0xffff : (__mmask16)((1u << (4 * left)) - 1), a[q]);
        }
    }
    if (!j->vals) return;
    __m512 sv[3];
    __m512i si[3];
    slots4(sv, si, y, n);
    float *vals = j->vals + gi * n;
    uint8_t *idx = j->idx + gi * n;
    if (n == 1) {
        __mmask16 v = (__mmask16)((1u << ng) - 1);
        _mm512_mask_storeu_ps(vals, v, sv[0]);
        _mm_mask_storeu_epi8(idx, v, _mm512_cvtepi32_epi8(si[0]));
    } else if (n == 2) { /* interleave the two slots */
        const __m512i lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        const __m512i hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        __m128i i0 = _mm512_cvtepi32_epi8(si[0]), i1 = _mm512_cvtepi32_epi8(si[1]);
        __mmask32 v = (__mmask32)((1ull << (2 * ng)) - 1);
        _mm512_mask_storeu_ps(vals, (__mmask16)v, _mm512_permutex2var_ps(sv[0], lo, sv[1]));
        _mm512_mask_storeu_ps(vals + 16, (__mmask16)(v >> 16), _mm512_permutex2var_ps(sv[0], hi, sv[1]));
        _mm256_mask_storeu_epi8(idx, v, _mm256_set_m128i(_mm_unpackhi_epi8(i0, i1), _mm_unpacklo_epi8(i0, i1)));
    } else { /* n == 3: three interleaved slots, through memory */
        float tv[48];
        uint8_t ti[48];
        int32_t tix[3][16];
        float tsv[3][16];
        for (int s = 0; s < 3; s++) {
            _mm512_storeu_ps(tsv[s], sv[s]);
            _mm512_storeu_si512(tix[s], si[s]);
        }
        for (int g = 0; g < ng; g++)
            for (int s = 0; s < 3; s++) {
                tv[3 * g + s] = tsv[s][g];
                ti[3 * g + s] = (uint8_t)tix[s][g];
            }
        memcpy(vals, tv, (size_t)(3 * ng) * sizeof *tv);
        memcpy(idx, ti, (size_t)(3 * ng));
    }
}

/* One batch of 16 groups: -1 if it must go to the reference, else 1 on a non-finite value, else 0. */
static inline __attribute__((always_inline)) int decide(const prune_job *j, const __m512i w[4], __m512 y[4], const __m512 e[4]) {
    if (j->fn == SDGP_PRUNE_RANDOM) return random4(y, e, w, j->n) ? 0 : -1;
    if (j->fn == SDGP_PRUNE_MVUE_APPROX) return approx24(y, e, w[0], w[1]) ? 1 : 0;
    return (j->n == 2 ? mvue24(y, e, w[0]) : mvue14(y, e, w[0])) ? 1 : 0;
}

/* The batches below are called with a constant mask (all lanes) wherever a batch is whole, so the
 * compiler emits plain loads and stores: masked ones cost far more on this CPU (core/avx512_mem.h). */

/* Row axis: rows 4g .. 4g+3 at channels [c, c+16), the lanes in `valid`. Returns as decide. */
static inline __attribute__((always_inline)) int row_batch(const prune_job *j, const __m512i w[4], int64_t g, int64_t c, __mmask16 valid) {
    __m512 e[4], y[4];
    for (int k = 0; k < 4; k++)
        e[k] = mem_load_ps(valid, j->x + (4 * g + k) * j->C + c);
    const int r = decide(j, w, y, e);
    if (r >= 0) store_rows(j, g, c, valid, y);
    return r;
}

/* Channel axis: groups gi .. gi+ng-1 (ng <= 16) of the flat run; lanes past the end hold zero
 * groups: harmless, and not stored. Returns as decide. */
static inline __attribute__((always_inline)) int flat_batch(const prune_job *j, const __m512i w[4], int64_t gi, int ng) {
    __m512 a[4], e[4], y[4];
    for (int q = 0; q < 4; q++) {
        const int left = ng - 4 * q;
        const __mmask16 v = left >= 4 ? (__mmask16)0xffff : left > 0 ? (__mmask16)((1u << (4 * left)) - 1) : 0;
        a[q] = mem_load_ps(v, j->x + 4 * (gi + 4 * q));
    }
    to_elements(e, a);
    const int r = decide(j, w, y, e);
    if (r >= 0) store_flat(j, gi, ng, y);
    return r;
}

int prune_avx512_sampled(const prune_job *j, int64_t t0, int64_t t1) {
    if (!prune_sampled4_vectorised(j)) return -1;
    const int64_t C = j->C;
    int bad = 0;
    __m512i w[4][4];
    if (j->axis == SDGP_AXIS_ROW && C % 16 == 0) {
        /* whole batches of 16 channels in group order (group (g, c) is g*C + c): one Philox call's
         * 64 groups may span row groups, where a call per row group would waste 3/4 of it at C = 16 */
        const int64_t end = t1 * C;
        for (int64_t gi0 = t0 * C; gi0 < end; gi0 += 64) {
            philox64(w, j->key, j->group0 + (uint64_t)gi0);
            for (int b = 0; b < 4 && gi0 + 16 * b < end; b++) {
                const int64_t g = (gi0 + 16 * b) / C;
                const int r = row_batch(j, w[b], g, (gi0 + 16 * b) % C, 0xffff);
                /* the reference redoes row group g (probability ~2^-28); its bits are ours */
                bad |= r < 0 ? prune_ref_prune(j, g, g + 1) : r;
            }
        }
        return bad;
    }
    if (j->axis == SDGP_AXIS_ROW) {
        for (int64_t g = t0; g < t1; g++)
            for (int64_t c0 = 0; c0 < C; c0 += 64) {
                philox64(w, j->key, j->group0 + (uint64_t)(g * C + c0)); /* group (g, c) is g*C + c */
                for (int b = 0; b < 4 && c0 + 16 * b < C; b++) {
                    const int64_t c = c0 + 16 * b;
                    const int r = C - c >= 16 ? row_batch(j, w[b], g, c, 0xffff) : row_batch(j, w[b], g, c, (__mmask16)((1u << (C - c)) - 1));
                    if (r < 0) { /* the reference redoes the whole row group (probability ~2^-28) */
                        bad |= prune_ref_prune(j, g, g + 1);
                        c0 = C;
                        break;
                    }
                    bad |= r;
                }
            }
        return bad;
    }
    const int64_t G = C / 4, end = t1 * G;
    for (int64_t g0 = t0 * G; g0 < end; g0 += 64) {
        philox64(w, j->key, j->group0 + (uint64_t)g0);
        for (int b = 0; b < 4 && g0 + 16 * b < end; b++) {
            const int64_t gi = g0 + 16 * b;
            const int ng = end - gi >= 16 ? 16 : (int)(end - gi);
            const int r = ng == 16 ? flat_batch(j, w[b], gi, 16) : flat_batch(j, w[b], gi, ng);
            /* the reference redoes the rows of this batch (probability ~2^-28) */
            bad |= r < 0 ? prune_ref_prune(j, gi / G, (gi + ng - 1) / G + 1) : r;
        }
    }
    return bad;
}
