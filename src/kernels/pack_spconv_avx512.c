/* AVX-512: magnitude (and rescaled) N:M pruning of dense dO rows straight into a work unit's
 * entries, for m dividing 16: one read of dO, no slot buffer, no second pass over the slots.
 *
 * 16 channels at a time (16/m whole groups): keys = |x| as bits, NaN clamped just above +Inf
 * (prune_key); the rank of lane i is the number of lanes j of its group that beat it (a larger key,
 * or an equal one at a lower index), found by m-1 rotations of the keys within each group; lanes
 * ranking below n are kept, exactly n per group, in index order: bitwise the slots of sdgp_prune
 * (whose ties also go to the lower index, and whose padding of groups with fewer than n nonzeros,
 * the lowest-index zeros, is what this ranking keeps). The kept values (times the row's rescale
 * factors) and their panel-row offsets are compressed and joined into 64-bit entries.
 *
 * Shared masks (block > 1): the keys are those of the block's summed |x| (float, row order: what
 * sdgp_prune's block table ranks, with the same rules), and the one keep mask compresses every row
 * of the block; the offsets, compressed once, serve all its rows. */
#include <immintrin.h>

#include "core/avx512_mem.h"

#include "kernels/spconv_internal.h"

typedef struct {
    __m512i rot[15]; /* per rotation r: the lane of the group member r places on */
    __mmask16 tie[15]; /* the lanes whose member sits at a lower index (a wrap-around: ties go to them) */
    __m512i lane_off;
} rank_tables;

/* The keep mask of 16 channels (16/m whole groups) from their keys: lanes ranking below n. */
static inline __attribute__((always_inline)) __mmask16 keep_of(const rank_tables *t, __m512i key, int n, int m, __mmask16 valid) {
    const __m512i one = _mm512_set1_epi32(1);
    __m512i rank = _mm512_setzero_si512();
    for (int q = 0; q < m - 1; q++) {
        const __m512i other = _mm512_permutexvar_epi32(t->rot[q], key);
        const __mmask16 beats = _mm512_cmpgt_epu32_mask(other, key) | (_mm512_cmpeq_epu32_mask(other, key) & t->tie[q]);
        rank = _mm512_mask_add_epi32(rank, beats, rank, one);
    }
    return _mm512_cmplt_epi32_mask(rank, _mm512_set1_epi32(n)) & valid;
}

/* The kept values of v (by keep) joined with their compressed offsets co into cnt entries at o. */
static inline __attribute__((always_inline)) void store_entries(spconv_entry *o, __m512 v, __mmask16 keep, __m512i co, int cnt) {
    const __m512i cv = _mm512_maskz_compress_epi32(keep, _mm512_castps_si512(v));
    const __m512i lo = _mm512_or_si512(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(cv)),
                                       _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_castsi512_si256(co)), 32));
    _mm512_mask_storeu_epi64(o, (__mmask8)(cnt >= 8 ? 0xFF : (1u << cnt) - 1), lo);
    if (cnt > 8) {
        const __m512i hi = _mm512_or_si512(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(cv, 1)),
                                           _mm512_slli_epi64(_mm512_cvtepu32_epi64(_mm512_extracti64x4_epi64(co, 1)), 32));
        _mm512_mask_storeu_epi64(o + 8, (__mmask8)((1u << (cnt - 8)) - 1), hi);
    }
}

/* The bl rows of one block (bl = 1: a row on its own) from x, whose pixels start at pix. */
static inline __attribute__((always_inline)) void block_entries(spconv_entry *out, const struct sdgp_sparse_bwd *p, const rank_tables *t,
                                                                const float *x, const float *scale, const int64_t bl, int64_t pix,
                                                                int64_t npix) {
    const int n = p->n, m = p->m;
    const int64_t cog = p->cog, Cout = p->g.Cout, gslots = cog / m * n, groups = Cout / cog;
    const uint32_t row_bytes = (uint32_t)(p->ldp * sizeof(float));
    const __m512i absmask = _mm512_set1_epi32(0x7fffffff), nan_key = _mm512_set1_epi32(0x7f800001);
    /* rows a few ahead: a unit's rows are one stream, but short per call */
    for (int64_t q = 0; q < bl; q++)
        for (int64_t l = 0; l < Cout; l += 16) _mm_prefetch((const char *)(x + (4 * bl + q) * Cout + l), _MM_HINT_T0);
    for (int64_t grp = 0; grp < groups; grp++)
        for (int64_t k0 = 0; k0 < cog; k0 += p->blk.kc) {
            const int64_t kc = cog - k0 < p->blk.kc ? cog - k0 : p->blk.kc, ns = kc / m * n;
            const int64_t s0 = grp * gslots + k0 / m * n;
            spconv_entry *o = out + npix * s0 + pix * ns; /* row q's at o + q * ns */
            for (int64_t c = 0; c < kc; c += 16) {
                const __mmask16 valid = kc - c >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (kc - c)) - 1);
                const int64_t ch = grp * cog + k0 + c; /* the first lane's channel */
                const __m512 v0 = mem_load_ps(valid, x + ch);
                __m512i bits = _mm512_and_si512(_mm512_castps_si512(v0), absmask);
                if (bl > 1) {
                    __m512 sum = _mm512_castsi512_ps(bits);
                    for (int64_t q = 1; q < bl; q++)
                        sum = _mm512_add_ps(sum, _mm512_abs_ps(mem_load_ps(valid, x + q * Cout + ch)));
                    bits = _mm512_and_si512(_mm512_castps_si512(sum), absmask);
                }
                const __mmask16 keep = keep_of(t, _mm512_min_epu32(bits, nan_key), n, m, valid);
                const __m512 sc = scale ? mem_load_ps(valid, scale + ch) : _mm512_set1_ps(1.0f);
                const __m512i off = _mm512_add_epi32(t->lane_off, _mm512_set1_epi32((int)((uint32_t)(k0 + c) * row_bytes)));
                const __m512i co = _mm512_maskz_compress_epi32(keep, off);
                const int cnt = __builtin_popcount((unsigned)keep);
                for (int64_t q = 0; q < bl; q++) {
                    __m512 v = q ? mem_load_ps(valid, x + q * Cout + ch) : v0;
                    if (scale) v = _mm512_mul_ps(v, sc);
                    store_entries(o + q * ns, v, keep, co, cnt);
                }
                o += cnt;
            }
        }
}

void spconv_prune_entries_avx512(spconv_entry *out, const struct sdgp_sparse_bwd *p, const float *x, const float *scale,
                                 int64_t nrows, int64_t pix0, int64_t npix, int64_t block, int64_t line) {
    const int m = p->m;
    const int64_t Cout = p->g.Cout;
    rank_tables t;
    for (int r = 1; r < m; r++) {
        int32_t idx[16];
        __mmask16 tie = 0;
        for (int l = 0; l < 16; l++) {
            idx[l] = l / m * m + (l % m + r) % m;
            if (l % m + r >= m) tie |= (__mmask16)(1u << l);
        }
        t.rot[r - 1] = _mm512_loadu_si512(idx);
        t.tie[r - 1] = tie;
    }
    t.lane_off = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                    _mm512_set1_epi32((int)(p->ldp * sizeof(float))));
    if (block <= 1) {
        for (int64_t r = 0; r < nrows; r++) block_entries(out, p, &t, x + r * Cout, scale, 1, pix0 + r, npix);
        return;
    }
    for (int64_t r = 0, bl; r < nrows; r += bl) {
        const int64_t rest = line - r % line; /* row 0 starts a line */
        bl = rest < block ? rest : block;
        if (bl > nrows - r) bl = nrows - r;
        block_entries(out, p, &t, x + r * Cout, scale, bl, pix0 + r, npix);
    }
}
