/* AVX-512 pruning kernels: magnitude and rescaled magnitude (both passes) on both axes; random
 * and MVUE go to prune_mvue_avx512.c for the shapes it vectorises, then to prune_sampled_avx2.c's
 * (m != 4), else to the reference.
 *
 * Ranking is on integer keys (prune_key: |x| bits, NaN clamped above Inf) with the tie rule
 * "lower index wins", so every path keeps exactly the reference's positions; values are x or
 * x * scale (one multiply), so results are bitwise the reference's.
 *   channel axis, m | 16:  16 lanes = 16/m groups; lane i is beaten by lane j of its group when
 *                          key_j > key_i, or key_j == key_i and j < i; the m-1 rotations within
 *                          the group count the beaters (m = 4: three in-lane shuffles and mask
 *                          logic); kept = fewer than n beaters. The compressed slots are gathered
 *                          by a permute whose index comes from the mask by scalar pdep/pext
 *                          (vcompressps measured slower; its memory form is microcoded on AMD).
 *   channel axis, other m: one group at a time: repeatedly take every remaining lane with the
 *                          largest key; the last round's ties go to the lowest indices (pdep).
 *   row axis:              vertical: 16 channels per vector, the m rows of a group as m vectors,
 *                          pairwise ranks.
 * Rescale pass 1 keeps its masks (prune_job.keep) so pass 2 only scales and stores. */
#include <immintrin.h>
#include <string.h>

#include "core/avx512_mem.h"
#include "prune/prune_internal.h"

static inline __m512i key16(__m512 x) {
    __m512i k = _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff));
    return _mm512_min_epu32(k, _mm512_set1_epi32(0x7f800001));
}

static inline __mmask16 tail_mask(int64_t left) { return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1); }

/* The first `per` lanes of v and of the bytes b (per <= 16; first = the mask of them): plain stores
 * for the fixed runs of 4, 8 and 16 (masked ones are slow here: core/avx512_mem.h). */
static inline void store_first(float *vals, uint8_t *idx, __m512 v, __m128i b, int per, __mmask16 first) {
    if (per == 8) {
        _mm256_storeu_ps(vals, _mm512_castps512_ps256(v));
        _mm_storel_epi64((__m128i *)idx, b);
    } else if (per == 4) {
        const int word = _mm_cvtsi128_si32(b);
        _mm_storeu_ps(vals, _mm512_castps512_ps128(v));
        memcpy(idx, &word, 4);
    } else if (per == 16) {
        _mm512_storeu_ps(vals, v);
        _mm_storeu_si128((__m128i *)idx, b);
    } else {
        _mm512_mask_storeu_ps(vals, first, v);
        _mm_mask_storeu_epi8(idx, first, b);
    }
}

/* The within-group rotations for m | 16: lane l meets lane rot[s][l] = group base + (l + s) % m,
 * and before[s] marks the lanes whose partner has the lower index (wins ties). */
typedef struct {
    int m, n;
    __m512i rot[15];
    __mmask16 before[15];
    __m512i lane; /* l % m: the index stored in the compressed form */
} rank16;

static void rank16_init(rank16 *p, int n, int m) {
    int32_t idx[16], lane[16];
    p->m = m;
    p->n = n;
    for (int s = 1; s < m; s++) {
        unsigned before = 0;
        for (int l = 0; l < 16; l++) {
            idx[l] = (l & ~(m - 1)) | ((l + s) & (m - 1));
            if (l % m + s >= m) before |= 1u << l;
        }
        p->rot[s - 1] = _mm512_loadu_si512(idx);
        p->before[s - 1] = (__mmask16)before;
    }
    for (int l = 0; l < 16; l++) lane[l] = l % m;
    p->lane = _mm512_loadu_si512(lane);
}

static inline __mmask16 keep16(const rank16 *p, __m512i k) {
    const __m512i one = _mm512_set1_epi32(1);
    /* keys are < 2^31, so signed compares work and "j wins ties" is key_j > key_i - 1 */
    __m512i km1 = _mm512_sub_epi32(k, one), rank = _mm512_setzero_si512();
    if (p->m == 4) { /* the hot case: in-lane shuffles, and the count as mask logic */
        __mmask16 b1 = _mm512_cmpgt_epi32_mask(_mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x39), _mm512_mask_blend_epi32(0x8888, k, km1));
        __mmask16 b2 = _mm512_cmpgt_epi32_mask(_mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x4e), _mm512_mask_blend_epi32(0xcccc, k, km1));
        __mmask16 b3 = _mm512_cmpgt_epi32_mask(_mm512_shuffle_epi32(k, (_MM_PERM_ENUM)0x93), _mm512_mask_blend_epi32(0xeeee, k, km1));
        if (p->n == 1) return (__mmask16)~(b1 | b2 | b3);
        if (p->n == 2) return (__mmask16)~((b1 & b2) | (b1 & b3) | (b2 & b3));
        return (__mmask16)~(b1 & b2 & b3);
    }
    for (int s = 0; s < p->m - 1; s++) {
        __m512i other = _mm512_permutexvar_epi32(p->rot[s], k);
        __mmask16 beaten = _mm512_cmpgt_epi32_mask(other, _mm512_mask_blend_epi32(p->before[s], k, km1));
        rank = _mm512_mask_add_epi32(rank, beaten, rank, one);
    }
    return _mm512_cmplt_epi32_mask(rank, _mm512_set1_epi32(p->n));
}

/* Kept lanes of one group of any m (x = its first value): rounds of "all remaining lanes with the
 * extreme key", from the top when n <= m/2, else dropping from the bottom. */
static uint64_t keep_group(const float *x, int n, int m) {
    __m512i k[4];
    __mmask16 v[4];
    const int nq = (m + 15) / 16;
    uint64_t remaining = 0;
    for (int q = 0; q < nq; q++) {
        v[q] = tail_mask(m - 16 * q);
        k[q] = key16(_mm512_maskz_loadu_ps(v[q], x + 16 * q));
        remaining |= (uint64_t)v[q] << (16 * q);
    }
    const int top = n <= m - n;
    int need = top ? n : m - n;
    uint64_t taken = 0;
    for (;;) {
        __m512i ext = top ? _mm512_setzero_si512() : _mm512_set1_epi32(0x7f800002);
        for (int q = 0; q < nq; q++) {
            __mmask16 r = (__mmask16)(remaining >> (16 * q));
            ext = top ? _mm512_mask_max_epu32(ext, r, ext, k[q]) : _mm512_mask_min_epu32(ext, r, ext, k[q]);
        }
        __m512i e = _mm512_set1_epi32((int)(top ? _mm512_reduce_max_epu32(ext) : _mm512_reduce_min_epu32(ext)));
        uint64_t eq = 0;
        for (int q = 0; q < nq; q++) eq |= (uint64_t)_mm512_mask_cmpeq_epi32_mask((__mmask16)(remaining >> (16 * q)), k[q], e) << (16 * q);
        int cnt = __builtin_popcountll(eq);
        if (cnt >= need) {
            /* ties: the lowest indices are kept first, the highest dropped first */
            uint64_t low = need >= 64 ? ~0ull : (1ull << need) - 1;
            taken |= top ? _pdep_u64(low, eq) : eq & ~_pdep_u64(cnt - need >= 64 ? ~0ull : (1ull << (cnt - need)) - 1, eq);
            break;
        }
        taken |= eq;
        remaining &= ~eq;
        need -= cnt;
    }
    uint64_t all = m == 64 ? ~0ull : (1ull << m) - 1;
    return top ? taken : all & ~taken;
}

/* ---- channel axis, m = 8 or a multiple of 16, C % 16 == 0: keep masks by a threshold ----
 * 16 groups at a time. The keys are transposed in registers so that lane g of every vector holds
 * elements of group g; a sorted list of the n largest (or the m-n smallest) keys per lane, kept by
 * max/min insertion over the m element vectors, gives each group its threshold T = the n-th
 * largest key. Then kept = key > T, plus the lowest-index keys == T until n are kept (the
 * reference's "ties to the lower index"; from the bottom: dropped = key < T, plus the
 * highest-index keys == T). With C % 16 == 0 the groups of consecutive rows are one flat run,
 * and so are their mask words (bit c % 16 of word c / 16). */

/* Depth of the sorted lists, min(n, m-n): 16 takes every n:m with m <= 32. Deeper ones fall to
 * keep_group, whose reduction per distinct key made the step 0.66x of dense at 16:32 with depth 8. */
#define THRESH_MAX_D 16

static inline int thresh_ok(const prune_job *j) {
    const int m = j->m, d = j->n <= m - j->n ? j->n : m - j->n;
    return j->axis == SDGP_AXIS_CHANNEL && j->C % 16 == 0 && (m == 8 || m % 16 == 0) && d <= THRESH_MAX_D;
}

/* 16 rows of 16 keys -> e[i] lane g = r[g] lane i (in place). */
static inline void transpose16(__m512i r[16]) {
    __m512i a[16], b[16];
    for (int i = 0; i < 8; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    /* b[4i+j], 128-bit block k = element 4k+j of rows 4i..4i+3 */
    for (int i = 0; i < 4; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    /* element 4k+j: block k of b[j], b[4+j], b[8+j], b[12+j] */
    for (int j = 0; j < 4; j++) {
        __m512i x0 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x44), y0 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0x44);
        __m512i x1 = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xee), y1 = _mm512_shuffle_i32x4(b[8 + j], b[12 + j], 0xee);
        r[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        r[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        r[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        r[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
}

/* 16 groups of 8 keys (vector v: groups v | v+4 for v < 4, v+4 | v+8 after) -> e[i] lane g =
 * element i of group g (in place): the first two steps of transpose16 inside each half. */
static inline void transpose8(__m512i r[8]) {
    __m512i a[8], b[8];
    for (int i = 0; i < 4; i++) {
        a[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
        a[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        b[4 * i] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
        b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
        b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
    }
    /* b[4i+j] block k: element 4(k%2)+j of the low (k < 2) or high halves of vectors 4i..4i+3 */
    for (int j = 0; j < 4; j++) {
        r[j] = _mm512_shuffle_i32x4(b[j], b[4 + j], 0x88);     /* blocks 0, 2 of each: element j */
        r[4 + j] = _mm512_shuffle_i32x4(b[j], b[4 + j], 0xdd); /* blocks 1, 3: element 4+j */
    }
}

/* Keep bits of one group from its "beyond" (key > T, or < T from the bottom) and tie bits. */
static inline uint64_t thresh_fix(uint64_t beyond, uint64_t tie, int n, int m, int top) {
    int need = (top ? n : m - n) - __builtin_popcountll(beyond), cnt = __builtin_popcountll(tie);
    if (cnt != need) tie = top ? _pdep_u64((1ull << need) - 1, tie) : tie & ~_pdep_u64((1ull << (cnt - need)) - 1, tie);
    uint64_t all = m == 64 ? ~0ull : (1ull << m) - 1;
    return top ? beyond | tie : all & ~(beyond | tie);
}

/* Keep masks of the ng <= 16 groups starting at x (flat) into kw (flat words). */
static void thresh_batch(uint16_t *kw, const float *x, int ng, int n, int m) {
    const int top = n <= m - n, d = top ? n : m - n;
    const __m512i init = top ? _mm512_setzero_si512() : _mm512_set1_epi32(0x7fffffff);
    __m512i t[THRESH_MAX_D], e[16];
    for (int s = 0; s < d; s++) t[s] = init;
    for (int q = 0; q < (m == 8 ? 1 : m / 16); q++) {
        if (m == 8)
            for (int v = 0; v < 8; v++) {
                int lo = v < 4 ? v : v + 4, hi = lo + 4;
                __m256 a = _mm256_maskz_loadu_ps(lo < ng ? 0xff : 0, x + 8 * lo), b = _mm256_maskz_loadu_ps(hi < ng ? 0xff : 0, x + 8 * hi);
                e[v] = key16(_mm512_insertf32x8(_mm512_castps256_ps512(a), b, 1));
            }
        else
            for (int g = 0; g < 16; g++) e[g] = key16(_mm512_maskz_loadu_ps(g < ng ? 0xffff : 0, x + g * m + 16 * q));
        if (m == 8) transpose8(e);
        else transpose16(e);
        for (int i = 0; i < (m == 8 ? 8 : 16); i++) {
            __m512i k = e[i];
            for (int s = 0; s < d; s++) {
                __m512i a = t[s];
                t[s] = top ? _mm512_max_epi32(a, k) : _mm512_min_epi32(a, k);
                k = top ? _mm512_min_epi32(a, k) : _mm512_max_epi32(a, k);
            }
        }
    }
    int32_t T[16];
    _mm512_storeu_si512(T, t[d - 1]);
    if (m == 8) {
        /* word v/2 ... groups 2w, 2w+1 share word w */
        for (int w = 0; 2 * w < ng; w++) {
            __m512 xv = _mm512_maskz_loadu_ps(2 * w + 1 < ng ? 0xffff : 0xff, x + 16 * w);
            __m512i k = key16(xv);
            __m512i tb = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi32(T[2 * w])), _mm256_set1_epi32(T[2 * w + 1]), 1);
            __mmask16 beyond = top ? _mm512_cmpgt_epi32_mask(k, tb) : _mm512_cmplt_epi32_mask(k, tb), tie = _mm512_cmpeq_epi32_mask(k, tb);
            uint16_t word;
            if (__builtin_popcount(top ? beyond | tie : (__mmask16)~(beyond | tie)) == 2 * n) word = top ? beyond | tie : (__mmask16)~(beyond | tie);
            else
                word = (uint16_t)(thresh_fix(beyond & 0xff, tie & 0xff, n, 8, top) | thresh_fix(beyond >> 8, tie >> 8, n, 8, top) << 8);
            kw[w] = 2 * w + 1 < ng ? word : word & 0xff;
        }
        return;
    }
    for (int g = 0; g < ng; g++) {
        const __m512i tb = _mm512_set1_epi32(T[g]);
        uint64_t beyond = 0, tie = 0;
        for (int q = 0; q < m / 16; q++) {
            __m512i k = key16(_mm512_loadu_ps(x + g * m + 16 * q));
            beyond |= (uint64_t)(top ? _mm512_cmpgt_epi32_mask(k, tb) : _mm512_cmplt_epi32_mask(k, tb)) << (16 * q);
            tie |= (uint64_t)_mm512_cmpeq_epi32_mask(k, tb) << (16 * q);
        }
        uint64_t keep = thresh_fix(beyond, tie, n, m, top);
        for (int q = 0; q < m / 16; q++) kw[g * (m / 16) + q] = (uint16_t)(keep >> (16 * q));
    }
}

/* Keep masks of rows [r0, r1) (thresh_ok), W = C/16 words per row from kw. */
static void thresh_rows(const prune_job *j, int64_t r0, int64_t r1, uint16_t *kw) {
    const int m = j->m;
    const int64_t G = j->C / m, g0 = r0 * G, g1 = r1 * G;
    for (int64_t g = g0; g < g1; g += 16) {
        int ng = g1 - g >= 16 ? 16 : (int)(g1 - g);
        thresh_batch(kw + (g - g0) * m / 16, j->x + g * m, ng, j->n, m);
    }
}

/* The kept lanes of a 16-lane mask in increasing order, one byte each (then zeros), by scalar
 * bit tricks that run beside the vector work: a permute by these moves the values (vcompressps
 * is slow on some cores), and lane & (m-1) is the stored index. */
static inline __m128i kept_lanes(__mmask16 kp) {
    uint64_t src = _pext_u64(0xfedcba9876543210ull, _pdep_u64(kp, 0x1111111111111111ull) * 0xf);
    return _mm_set_epi64x((long long)_pdep_u64(src >> 32, 0x0f0f0f0f0f0f0f0full), (long long)_pdep_u64(src, 0x0f0f0f0f0f0f0f0full));
}

/* The output of one 16-lane chunk: dense y (kept lanes of x, times scale) and compressed slots.
 * lanes_mask = m - 1 for m | 16 (the index is lane & (m-1)), else 0 and `lane` holds the index. */
static inline void emit16(float *out, int64_t *pos, float *vals, uint8_t *idx, __m512 x, const float *scale,
                          __mmask16 kp, __mmask16 valid, __m512i lane, int lanes_mask) {
    __m512 y = scale ? _mm512_maskz_mul_ps(kp, x, _mm512_maskz_loadu_ps(valid, scale)) : x;
    if (out) _mm512_mask_storeu_ps(out, valid, scale ? y : _mm512_maskz_mov_ps(kp, x));
    if (vals) {
        int cnt = __builtin_popcount(kp);
        __mmask16 first = (__mmask16)((1u << cnt) - 1);
        if (lanes_mask) {
            __m128i lanes = kept_lanes(kp);
            _mm512_mask_storeu_ps(vals + *pos, first, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(lanes), y));
            _mm_mask_storeu_epi8(idx + *pos, first, _mm_and_si128(lanes, _mm_set1_epi8((char)lanes_mask)));
        } else {
            _mm512_mask_storeu_ps(vals + *pos, first, _mm512_maskz_compress_ps(kp, y));
            _mm_mask_storeu_epi8(idx + *pos, first, _mm512_cvtepi32_epi8(_mm512_maskz_compress_epi32(kp, lane)));
        }
        *pos += cnt;
    }
}

/* dense[0..16) += |x|, kept[0..16) += |x| on kept lanes, in double, valid lanes only. */
static inline void acc16(double *dense, double *kept, __m512 x, __mmask16 kp, __mmask16 valid) {
    __m512 a = _mm512_abs_ps(x);
    __m512d half[2] = {_mm512_cvtps_pd(_mm512_castps512_ps256(a)), _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)))};
    for (int h = 0; h < 2; h++) {
        __mmask8 v = (__mmask8)(valid >> (8 * h)), k = (__mmask8)(kp >> (8 * h));
        __m512d d = _mm512_add_pd(_mm512_maskz_loadu_pd(v, dense + 8 * h), half[h]);
        __m512d s = _mm512_add_pd(_mm512_maskz_loadu_pd(v, kept + 8 * h), _mm512_maskz_mov_pd(k, half[h]));
        _mm512_mask_storeu_pd(dense + 8 * h, v, d);
        _mm512_mask_storeu_pd(kept + 8 * h, v, s);
    }
}

/* Channel axis, m | 16, rows [r0, r1), the keep masks from kw (W words per row from row r0) when
 * `masks`, else ranked here. Inlined once per combination of outputs, so the loop carries no
 * branches on them. */
static inline __attribute__((always_inline)) void vec_rows(const prune_job *j, const rank16 *rp, int64_t r0, int64_t r1, const uint16_t *kw,
                                                           const int has_out, const int has_vals, const int scaled, const int masks) {
    const int64_t C = j->C, slots = C / j->m * j->n, W = (C + 15) / 16;
    const int per = 16 / j->m * j->n;
    const __mmask16 first = (__mmask16)((1u << per) - 1);
    const __m128i lane_mod = _mm_set1_epi8((char)(j->m - 1));
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C, *sr = scaled ? j->scale + (r / j->P) * j->scale_bstride : NULL;
        const uint16_t *keep = masks ? kw + (r - r0) * W : NULL;
        float *outr = has_out ? j->out + r * C : NULL, *vals = has_vals ? j->vals + r * slots : NULL;
        uint8_t *idx = has_vals ? j->idx + r * slots : NULL;
        int64_t pos = 0, c = 0;
        /* full vectors keep exactly `per` lanes: fixed store sizes, no masks on the loads */
        for (; c + 16 <= C; c += 16, pos += per) {
            __m512 x = _mm512_loadu_ps(xr + c);
            __mmask16 kp = masks ? (__mmask16)keep[c / 16] : keep16(rp, key16(x));
            __m512 y = scaled ? _mm512_maskz_mul_ps(kp, x, _mm512_loadu_ps(sr + c)) : x;
            if (has_out) _mm512_storeu_ps(outr + c, scaled ? y : _mm512_maskz_mov_ps(kp, x));
            if (has_vals) {
                __m128i lanes = kept_lanes(kp);
                store_first(vals + pos, idx + pos, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(lanes), y), _mm_and_si128(lanes, lane_mod), per, first);
            }
        }
        if (c < C) {
            __mmask16 valid = tail_mask(C - c);
            __m512 x = _mm512_maskz_loadu_ps(valid, xr + c);
            __mmask16 kp = (masks ? (__mmask16)keep[c / 16] : keep16(rp, key16(x))) & valid;
            emit16(has_out ? outr + c : NULL, &pos, vals, idx, x, scaled ? sr + c : NULL, kp, valid, rp->lane, rp->m - 1);
        }
    }
}

/* Channel axis, m a multiple of 16 (thresh_ok), rows [r0, r1) with the masks kw: a chunk of 16
 * channels keeps a varying count, and its indices start at c % m. */
static void wide_rows(const prune_job *j, int64_t r0, int64_t r1, const uint16_t *kw) {
    const int m = j->m;
    const int64_t C = j->C, slots = C / m * j->n, W = C / 16;
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = j->x + r * C, *sr = j->scale ? j->scale + (r / j->P) * j->scale_bstride : NULL;
        const uint16_t *keep = kw + (r - r0) * W;
        float *outr = j->out ? j->out + r * C : NULL, *vals = j->vals ? j->vals + r * slots : NULL;
        uint8_t *idx = j->idx ? j->idx + r * slots : NULL;
        int64_t pos = 0;
        for (int64_t c = 0, base = 0; c < C; c += 16, base = base + 16 == m ? 0 : base + 16) {
            const __mmask16 kp = (__mmask16)keep[c / 16];
            __m512 x = _mm512_loadu_ps(xr + c);
            __m512 y = sr ? _mm512_maskz_mul_ps(kp, x, _mm512_loadu_ps(sr + c)) : _mm512_maskz_mov_ps(kp, x);
            if (outr) _mm512_storeu_ps(outr + c, y);
            if (vals) {
                const int cnt = __builtin_popcount(kp);
                const __mmask16 first = (__mmask16)((1u << cnt) - 1);
                __m128i lanes = kept_lanes(kp);
                _mm512_mask_storeu_ps(vals + pos, first, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(lanes), y));
                _mm_mask_storeu_epi8(idx + pos, first, _mm_add_epi8(lanes, _mm_set1_epi8((char)base)));
                pos += cnt;
            }
        }
    }
}

static void channel_vec(const prune_job *j, const rank16 *rp, int64_t r0, int64_t r1, const uint16_t *kw) {
    const int o = j->out != NULL, v = j->vals != NULL, s = j->scale != NULL;
    if (j->m > 16) {
        wide_rows(j, r0, r1, kw);
        return;
    }
    if (kw && s) { /* rescale pass 2 */
        if (o && v) vec_rows(j, rp, r0, r1, kw, 1, 1, 1, 1);
        else if (o) vec_rows(j, rp, r0, r1, kw, 1, 0, 1, 1);
        else vec_rows(j, rp, r0, r1, kw, 0, 1, 1, 1);
    } else if (kw) { /* magnitude, threshold ranking */
        if (o && v) vec_rows(j, rp, r0, r1, kw, 1, 1, 0, 1);
        else if (o) vec_rows(j, rp, r0, r1, kw, 1, 0, 0, 1);
        else vec_rows(j, rp, r0, r1, kw, 0, 1, 0, 1);
    } else { /* magnitude, m | 16: ranked in the loop */
        if (o && v) vec_rows(j, rp, r0, r1, NULL, 1, 1, 0, 0);
        else if (o) vec_rows(j, rp, r0, r1, NULL, 1, 0, 0, 0);
        else vec_rows(j, rp, r0, r1, NULL, 0, 1, 0, 0);
    }
}

/* Ranking by threshold (thresh_ok) rather than by rotations (m | 16): worth it from m = 8. */
static inline int use_thresh(const prune_job *j) { return thresh_ok(j) && j->m >= 8; }

/* Whether avx512_sums leaves the keep masks of its rows in j->keep (channel axis, vectorised). */
static inline int masks_cached(const prune_job *j) { return j->axis == SDGP_AXIS_CHANNEL && (16 % j->m == 0 || use_thresh(j)); }

/* One row of the channel axis, one group at a time (m not dividing 16): prune, or (dense != NULL)
 * accumulate the rescale sums. */
static void channel_row(const prune_job *j, int64_t r, double *dense, double *kept) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C, slots = C / m * n;
    const float *xr = j->x + r * C;
    const float *sr = j->scale && !dense ? j->scale + (r / j->P) * j->scale_bstride : NULL;
    float *outr = j->out ? j->out + r * C : NULL, *vals = j->vals ? j->vals + r * slots : NULL;
    uint8_t *idx = j->idx ? j->idx + r * slots : NULL;
    int64_t pos = 0;
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    for (int64_t c0 = 0; c0 < C; c0 += m) {
        uint64_t keep = keep_group(xr + c0, n, m);
        for (int q = 0; 16 * q < m; q++) {
            int64_t c = c0 + 16 * q;
            __mmask16 valid = tail_mask(m - 16 * q), kp = (__mmask16)(keep >> (16 * q)) & valid;
            __m512 x = _mm512_maskz_loadu_ps(valid, xr + c);
            if (dense) acc16(dense + c, kept + c, x, kp, valid);
            else emit16(outr ? outr + c : NULL, &pos, vals, idx, x, sr ? sr + c : NULL, kp, valid, _mm512_add_epi32(iota, _mm512_set1_epi32(16 * q)), 0);
        }
    }
}

/* Row axis: kept masks of the m rows of group g at channels [c, c + 16). */
static inline __attribute__((always_inline)) void row_keep(const prune_job *j, int64_t g, int64_t c, __mmask16 valid, __m512 *x, __mmask16 *kp) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C;
    __m512i key[SDGP_NM_MAX_M], rank[SDGP_NM_MAX_M];
    for (int k = 0; k < m; k++) {
        x[k] = mem_load_ps(valid, j->x + (g * m + k) * C + c);
        key[k] = key16(x[k]);
        rank[k] = _mm512_setzero_si512();
    }
    const __m512i one = _mm512_set1_epi32(1);
    for (int a = 0; a < m; a++)
        for (int b = a + 1; b < m; b++) {
            __mmask16 b_wins = _mm512_cmpgt_epu32_mask(key[b], key[a]); /* else a wins (ties: lower index) */
            rank[a] = _mm512_mask_add_epi32(rank[a], b_wins, rank[a], one);
            rank[b] = _mm512_mask_add_epi32(rank[b], (__mmask16)~b_wins, rank[b], one);
        }
    for (int k = 0; k < m; k++) kp[k] = _mm512_cmplt_epi32_mask(rank[k], _mm512_set1_epi32(n)) & valid;
}

/* Group g's rows at channels [c, c+16), the lanes in `valid`: called with a constant full mask for
 * whole vectors, so their stores are plain (masked ones are slow here: core/avx512_mem.h). */
static inline __attribute__((always_inline)) void row_chunk(const prune_job *j, int64_t g, int64_t c, __mmask16 valid) {
    const int n = j->n, m = j->m;
    const int64_t C = j->C;
    __m512 x[SDGP_NM_MAX_M], sv[SDGP_NM_MAX_M];
    __m512i si[SDGP_NM_MAX_M];
    __mmask16 kp[SDGP_NM_MAX_M];
    row_keep(j, g, c, valid, x, kp);
    __m512i cnt = _mm512_setzero_si512();
    for (int s = 0; s < n; s++) {
        sv[s] = _mm512_setzero_ps();
        si[s] = _mm512_setzero_si512();
    }
    for (int k = 0; k < m; k++) {
        const int64_t r = g * m + k;
        __m512 y = j->scale ? _mm512_maskz_mul_ps(kp[k], x[k], mem_load_ps(valid, j->scale + (r / j->P) * j->scale_bstride + c))
                            : _mm512_maskz_mov_ps(kp[k], x[k]);
        if (j->out) _mm512_mask_storeu_ps(j->out + r * C + c, valid, y);
        /* slot s takes the s-th kept row: only rows s .. m-n+s can be it */
        for (int s = k - (m - n) > 0 ? k - (m - n) : 0; s <= k && s < n; s++) {
            __mmask16 sel = _mm512_mask_cmpeq_epi32_mask(kp[k], cnt, _mm512_set1_epi32(s));
            sv[s] = _mm512_mask_mov_ps(sv[s], sel, y);
            si[s] = _mm512_mask_mov_epi32(si[s], sel, _mm512_set1_epi32(k));
        }
        cnt = _mm512_mask_add_epi32(cnt, kp[k], cnt, _mm512_set1_epi32(1));
    }
    if (j->vals)
        for (int s = 0; s < n; s++) {
            _mm512_mask_storeu_ps(j->vals + (g * n + s) * C + c, valid, sv[s]);
            _mm_mask_storeu_epi8(j->idx + (g * n + s) * C + c, valid, _mm512_cvtepi32_epi8(si[s]));
        }
}

static void row_groups(const prune_job *j, int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; g++)
        for (int64_t c = 0; c < j->C; c += 16)
            if (j->C - c >= 16) row_chunk(j, g, c, 0xffff);
            else row_chunk(j, g, c, tail_mask(j->C - c));
}

/* Magnitude and rescaled: every shape; random and MVUE: prune_mvue_avx512.c's (m = 4) and
 * prune_sampled_avx2.c's (other m, AVX2's batches of 8 groups). */
static int avx512_vectorised(const prune_job *j) {
    if (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED)
        return prune_sampled4_vectorised(j) || prune_avx2_sampled_other_vectorised(j);
    return 1;
}

static int avx512_prune(const prune_job *j, int64_t t0, int64_t t1) {
    if (!avx512_vectorised(j)) return prune_ref_prune(j, t0, t1);
    if (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED) {
        int r = j->m == 4 ? prune_avx512_sampled(j, t0, t1) : prune_avx2_sampled_other(j, t0, t1);
        return r >= 0 ? r : prune_ref_prune(j, t0, t1);
    }
    if (j->axis == SDGP_AXIS_ROW) {
        row_groups(j, t0, t1);
        return 0;
    }
    if (!masks_cached(j) || (j->scale && !j->keep)) { /* (the driver always gives rescale its masks) */
        for (int64_t r = t0; r < t1; r++) channel_row(j, r, NULL, NULL);
        return 0;
    }
    const int64_t W = (j->C + 15) / 16;
    rank16 rp;
    rank16_init(&rp, j->n, 16 % j->m == 0 ? j->m : 16);
    if (j->scale && j->keep) { /* the second rescale pass: the masks of avx512_sums */
        channel_vec(j, &rp, t0, t1, j->keep + (t0 - j->keep_r0) * W);
    } else if (use_thresh(j)) { /* the masks of a few rows at a time, still in L1 when emitted */
        uint16_t kw[1024];
        const int64_t R = 1024 / W > 0 ? 1024 / W : 1;
        for (int64_t r = t0; r < t1; r += R) {
            const int64_t r1 = r + R < t1 ? r + R : t1;
            thresh_rows(j, r, r1, kw);
            channel_vec(j, &rp, r, r1, kw);
        }
    } else {
        channel_vec(j, &rp, t0, t1, NULL);
    }
    return 0;
}

static void avx512_sums(const prune_job *j, int64_t b, double *dense, double *kept) {
    const int m = j->m;
    const int64_t C = j->C, rb = b * j->P, re = rb + j->P;
    for (int64_t c = 0; c < C; c++) dense[c] = kept[c] = 0.0;
    if (masks_cached(j) && (j->keep || !use_thresh(j))) {
        /* 64 channels at a time down the sample's rows, the 16 double sums in registers; the masks
         * ranked here (m | 16) or first for the whole sample (threshold), left in j->keep */
        const int64_t W = (C + 15) / 16;
        uint16_t *kw = j->keep ? j->keep + (rb - j->keep_r0) * W : NULL;
        const int ranked = use_thresh(j);
        if (ranked) thresh_rows(j, rb, re, kw);
        rank16 rp;
        rank16_init(&rp, j->n, 16 % m == 0 ? m : 16);
        for (int64_t c0 = 0; c0 < C; c0 += 64) {
            __m512d d[8], k[8];
            __mmask16 valid[4];
            for (int q = 0; q < 4; q++) valid[q] = c0 + 16 * q < C ? tail_mask(C - c0 - 16 * q) : 0;
            for (int h = 0; h < 8; h++) d[h] = k[h] = _mm512_setzero_pd();
            for (int64_t r = rb; r < re; r++) {
                const float *xr = j->x + r * C + c0;
                uint16_t *keep = kw ? kw + (r - rb) * W + c0 / 16 : NULL;
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    if (!valid[q]) break;
                    __m512 x = mem_load_ps(valid[q], xr + 16 * q);
                    __mmask16 kp;
                    if (ranked) {
                        kp = keep[q];
                    } else {
                        kp = keep16(&rp, key16(x)) & valid[q];
                        if (keep) keep[q] = kp;
                    }
                    __m512 a = _mm512_abs_ps(x);
                    __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
                    __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
                    /* a masked add leaves the sum as is where the reference adds +0.0: same bits */
                    d[2 * q] = _mm512_add_pd(d[2 * q], lo);
                    d[2 * q + 1] = _mm512_add_pd(d[2 * q + 1], hi);
                    k[2 * q] = _mm512_mask_add_pd(k[2 * q], (__mmask8)kp, k[2 * q], lo);
                    k[2 * q + 1] = _mm512_mask_add_pd(k[2 * q + 1], (__mmask8)(kp >> 8), k[2 * q + 1], hi);
                }
            }
            for (int q = 0; q < 4; q++)
                for (int h = 0; h < 2; h++) {
                    __mmask8 v = (__mmask8)(valid[q] >> (8 * h));
                    _mm512_mask_storeu_pd(dense + c0 + 16 * q + 8 * h, v, d[2 * q + h]);
                    _mm512_mask_storeu_pd(kept + c0 + 16 * q + 8 * h, v, k[2 * q + h]);
                }
        }
        return;
    }
    if (j->axis == SDGP_AXIS_CHANNEL) {
        for (int64_t r = rb; r < re; r++) channel_row(j, r, dense, kept);
        return;
    }
    /* row axis: the groups touching the sample, only its rows, in row order per channel */
    __m512 x[SDGP_NM_MAX_M];
    __mmask16 kp[SDGP_NM_MAX_M];
    for (int64_t g = rb / m; g * m < re; g++)
        for (int64_t c = 0; c < C; c += 16) {
            __mmask16 valid = tail_mask(C - c);
    row_keep(j, g, c, valid, x, kp);
            for (int k = 0; k < m; k++)
                if (g * m + k >= rb && g * m + k < re) acc16(dense + c, kept + c, x[k], kp[k], valid);
        }
}

/* The keep mask of 16 channels of a block of len rows (x: its first row's, rows C apart), ranked on the
 * rows' summed |x| (float, in row order): prune_block.c's decision for the magnitude rules. */
static inline __mmask16 block_keep16(const rank16 *rp, const float *x, int64_t C, int64_t len, __mmask16 valid) {
    __m512 sum = _mm512_abs_ps(mem_load_ps(valid, x));
    for (int64_t t = 1; t < len; t++) sum = _mm512_add_ps(sum, _mm512_abs_ps(mem_load_ps(valid, x + t * C)));
    return keep16(rp, key16(sum)) & valid;
}

/* Shared masks (prune_block.c's rules), the magnitude rules, m | 16: per block of the sample, 64
 * channels at a time, the block's summed |x| (float, row order) ranked in registers, then every row
 * of the block added to the double sums (row order per channel, as block_add_sums). */
static int avx512_block_sums(const prune_job *j, int64_t b, double *dense, double *kept) {
    if (j->axis != SDGP_AXIS_CHANNEL || 16 % j->m || (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED))
        return 0;
    const int64_t C = j->C, rb = b * j->P, re = rb + j->P;
    rank16 rp;
    rank16_init(&rp, j->n, j->m);
    for (int64_t c0 = 0; c0 < C; c0 += 64) {
        __m512d d[8], k[8];
        __mmask16 valid[4];
        for (int q = 0; q < 4; q++) valid[q] = c0 + 16 * q < C ? tail_mask(C - c0 - 16 * q) : 0;
        for (int h = 0; h < 8; h++) d[h] = k[h] = _mm512_setzero_pd();
        for (int64_t r0 = rb, len; r0 < re; r0 += len) {
            len = prune_block_rows(j, r0);
            const float *x = j->x + r0 * C + c0;
            __mmask16 kp[4];
            /* whole loops over the 4 vectors (lanes past C load zeros): the sums stay in registers */
#pragma GCC unroll 4
            for (int q = 0; q < 4; q++) kp[q] = block_keep16(&rp, x + 16 * q, C, len, valid[q]);
            for (int64_t t = 0; t < len; t++)
#pragma GCC unroll 4
                for (int q = 0; q < 4; q++) {
                    const __m512 a = _mm512_abs_ps(mem_load_ps(valid[q], x + t * C + 16 * q));
                    const __m512d lo = _mm512_cvtps_pd(_mm512_castps512_ps256(a));
                    const __m512d hi = _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
                    d[2 * q] = _mm512_add_pd(d[2 * q], lo);
                    d[2 * q + 1] = _mm512_add_pd(d[2 * q + 1], hi);
                    k[2 * q] = _mm512_mask_add_pd(k[2 * q], (__mmask8)kp[q], k[2 * q], lo);
                    k[2 * q + 1] = _mm512_mask_add_pd(k[2 * q + 1], (__mmask8)(kp[q] >> 8), k[2 * q + 1], hi);
                }
        }
        for (int q = 0; q < 4; q++)
            for (int h = 0; h < 2; h++) {
                const __mmask8 v = (__mmask8)(valid[q] >> (8 * h));
                _mm512_mask_storeu_pd(dense + c0 + 16 * q + 8 * h, v, d[2 * q + h]);
                _mm512_mask_storeu_pd(kept + c0 + 16 * q + 8 * h, v, k[2 * q + h]);
            }
    }
    return 1;
}

/* Shared masks, the magnitude rules, m | 16: every block starting in rows [t0, t1) (prune_block.c's
 * rule), its keep masks ranked on the rows' summed |x| (as avx512_block_sums), then its rows written
 * by vec_rows with those masks (a kept value times its factor, or itself: block_write's bits). */
static int avx512_block_prune(const prune_job *j, int64_t t0, int64_t t1) {
    if (j->axis != SDGP_AXIS_CHANNEL || 16 % j->m || (j->fn != SDGP_PRUNE_MAGNITUDE && j->fn != SDGP_PRUNE_RESCALED) ||
        (j->fn == SDGP_PRUNE_RESCALED && !j->scale))
        return -1;
    const int64_t C = j->C, W = (C + 15) / 16;
    uint16_t *kw = malloc((size_t)(j->block * W) * sizeof *kw);
    if (!kw) return -1; /* the portable path needs no memory */
    rank16 rp;
    rank16_init(&rp, j->n, j->m);
    for (int64_t r = prune_next_block_start(j, t0), len; r < t1; r += len) {
        len = prune_block_rows(j, r);
        for (int64_t c = 0; c < C; c += 16) {
            const __mmask16 kp = block_keep16(&rp, j->x + r * C + c, C, len, tail_mask(C - c));
            for (int64_t t = 0; t < len; t++) kw[t * W + c / 16] = kp;
        }
        channel_vec(j, &rp, r, r + len, kw);
    }
    free(kw);
    return 0;
}

const prune_kernels prune_kernels_avx512 = {.prune = avx512_prune,
                                            .sums = avx512_sums,
                                            .vectorised = avx512_vectorised,
                                            .block_sums = avx512_block_sums,
                                            .block_prune = avx512_block_prune};
