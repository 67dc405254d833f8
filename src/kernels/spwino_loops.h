/* The data loops of the Winograd-domain kernel, written once in plain C and compiled per ISA:
 * spwino_ref.c, spwino_avx2.c and spwino_avx512.c each include this file, define spwino_block_row
 * (declared below) and export one spwino_loops table (spwino_internal.h). Only this file's loops run with the ISA's flags; their
 * arithmetic is additions and exact multiplications by +-1, so all paths give the same bits
 * (a contracted x + s*y with s = +-1 is the same single rounding as x +- y). */
#ifndef SDGP_SPWINO_LOOPS_H
#define SDGP_SPWINO_LOOPS_H

#include "kernels/spwino_internal.h"

/* B^T of F(2x2,3x3) = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]]: row a combines patch rows
 * (or columns) lo[a] and hi[a] as d[lo] + sgn[a] d[hi]. */
static const int spwino_bt_lo[4] = {0, 1, 2, 1}, spwino_bt_hi[4] = {2, 2, 1, 3};
static const float spwino_bt_sgn[4] = {-1.0f, 1.0f, -1.0f, -1.0f};
/* A^T = [[1,1,1,0],[0,1,-1,-1]]: at[u][a]. */
static const float spwino_at[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};

/* V_e of image b's tiles into v (T x Cout): for e = (a, bb), V = R(lo[a]) + sgn[a] R(hi[a]) with
 * R(y) = X[y][lo[bb]] + sgn[bb] X[y][hi[bb]] over the tile's 4x4 patch. Multiplying by +-1 is
 * exact, so this is the same value as the additions written out, on every path. */
static void spwino_transform(const sdgp_sparse_wino *p, float *restrict v, const float *dO, int64_t b, int e) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t C = g->Cout;
    const int a = e / 4, bb = e % 4;
    const float sa = spwino_bt_sgn[a], sb = spwino_bt_sgn[bb];
    for (int ty = 0; ty < p->th; ty++)
        for (int tx = 0; tx < p->tw; tx++) {
            const float *x[2][2];
            const int ys[2] = {2 * ty - p->q + spwino_bt_lo[a], 2 * ty - p->q + spwino_bt_hi[a]};
            const int xs[2] = {2 * tx - p->q + spwino_bt_lo[bb], 2 * tx - p->q + spwino_bt_hi[bb]};
            for (int r = 0; r < 2; r++)
                for (int s = 0; s < 2; s++)
                    x[r][s] = ys[r] >= 0 && ys[r] < g->Ho && xs[s] >= 0 && xs[s] < g->Wo
                                  ? dO + ((b * g->Ho + ys[r]) * g->Wo + xs[s]) * C
                                  : p->zrow;
            const float *restrict x00 = x[0][0], *restrict x01 = x[0][1], *restrict x10 = x[1][0], *restrict x11 = x[1][1];
            float *restrict out = v + ((int64_t)ty * p->tw + tx) * C;
            for (int64_t k = 0; k < C; k++) out[k] = (x00[k] + sb * x01[k]) + sa * (x10[k] + sb * x11[k]);
        }
}

/* Rows a of A^T (.) A: the four M_{a,bb} (rows x ldp each, columns [c0, c0+ncols) of dD) are
 * first combined along bb, N_v = sum_bb A^T[v][bb] M_{a,bb} (v = 0, 1), then N_v reaches output
 * row u of the tile with the sign A^T[u][a]: 2 or 4 stores per tile instead of 9 per element.
 * store: the first row of the unit (a = 1 reaches both output rows) writes, later ones add. */
static void spwino_scatter_row(const sdgp_sparse_wino *p, float *dD, const float *M, int64_t b0, int64_t nimg, int a, int64_t c0,
                               int64_t ncols, int store) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t mstride = nimg * p->T * p->ldp;
    for (int64_t r = 0; r < nimg * p->T; r++) {
        const int64_t b = b0 + r / p->T, t = r % p->T, ty = t / p->tw, tx = t % p->tw;
        const float *restrict m0 = M + r * p->ldp, *restrict m1 = m0 + mstride, *restrict m2 = m1 + mstride,
                              *restrict m3 = m2 + mstride;
        float n0[SPCONV_MAX_NR], n1[SPCONV_MAX_NR];
        for (int64_t c = 0; c < ncols; c++) {
            n0[c] = (m0[c] + m1[c]) + m2[c];
            n1[c] = (m1[c] - m2[c]) - m3[c];
        }
        for (int u = 0; u < 2; u++) {
            const int64_t h = 2 * ty + u;
            if (spwino_at[u][a] == 0.0f || h >= g->H) continue;
            const float sg = spwino_at[u][a];
            for (int v = 0; v < 2 && 2 * tx + v < g->W; v++) {
                float *restrict dst = dD + ((b * g->H + h) * g->W + 2 * tx + v) * g->Cin + c0;
                const float *restrict src = v ? n1 : n0;
                if (store)
                    for (int64_t c = 0; c < ncols; c++) dst[c] = sg * src[c];
                else
                    for (int64_t c = 0; c < ncols; c++) dst[c] += sg * src[c];
            }
        }
    }
}

/* Slots k0 .. k1 of one row x (Cout floats) of a shared-mask block's slice into their entries
 * out[k0 .. k1): slot k holds v = x[c] * b->f[k] (mvue: (float)((double)x[c] * b->inv[k])) and
 * the offset c * row_bytes of its channel c = b->kept[k]: block_write's value (prune_block.c)
 * and spconv_entries_from_slots' entry of it, bitwise. One scalar load per kept value. */
static inline void spwino_block_slots(spconv_entry *restrict out, const float *restrict x, const prune_block_slice *b,
                                      uint32_t row_bytes, int64_t k0, int64_t k1, int mvue) {
#define SPWINO_SLOTS_LOOP(value)                                                   \
    for (int64_t k = k0; k < k1; k++) {                                            \
        const float xv = x[b->kept[k]], v = (value);                               \
        uint32_t bits;                                                             \
        memcpy(&bits, &v, sizeof bits);                                            \
        out[k] = bits | (uint64_t)((uint32_t)b->kept[k] * row_bytes) << 32;         \
    }
    if (mvue)
        SPWINO_SLOTS_LOOP((float)((double)xv * b->inv[k]))
    else
        SPWINO_SLOTS_LOOP(xv * b->f[k])
#undef SPWINO_SLOTS_LOOP
}

/* spwino_block_slots of the row's ns slots, written per ISA (spwino_{ref,avx2,avx512}.c): the
 * vector paths permute a vector of slots at a time out of the two vectors of channels it spans
 * (reading x[c0 .. c1) only) and fall back to spwino_block_slots where its channels spread wider.
 * Called for n/m >= 1/2 only, where that is the rule: sparser patterns stay scalar (1:4 and 4:32
 * were slower with a vector path, one vector of values per 8 or 16 entries). */
static void spwino_block_row(spconv_entry *out, const float *x, const prune_block_slice *b, uint32_t row_bytes, int64_t ns,
                             int mvue);

/* Shared masks: the entries of a block's rows straight from V (the emit of prune_kernels_block,
 * j->emit_ctx a spwino_sink), no compressed copy: one spwino_block_row per row. */
static void spwino_block_entries(const prune_job *j, const prune_block_slice *b) {
    const spwino_sink *s = (const spwino_sink *)j->emit_ctx;
    const int64_t ns = (b->c1 - b->c0) / j->m * j->n, s0 = b->c0 / j->m * j->n;
    const int mvue = j->fn == SDGP_PRUNE_MVUE, vector = 2 * j->n >= j->m;
    for (int64_t r = b->r0; r < b->r0 + b->len; r++) {
        spconv_entry *out = s->ent + r * s->slots + s0;
        if (vector)
            spwino_block_row(out, j->x + r * j->C, b, s->row_bytes, ns, mvue);
        else
            spwino_block_slots(out, j->x + r * j->C, b, s->row_bytes, 0, ns, mvue);
    }
}

#define SPWINO_LOOPS_TABLE {spwino_transform, spconv_entries_from_slots, spwino_block_entries, spwino_scatter_row}

#endif
