/* Packing for the sparse backward-data convolution (BLIS's "pack B" and "pack A" steps).
 *
 * Weights: w[k][c][i][j] (Cout x cig x kh x kw, cig = Cin/groups), element (k, c, i, j) at
 * w + k*so + c*si + i*sh + j*sw (OIHW, or PyTorch's channels_last OHWI, or any strides) -> per
 * column block nb of conv group g = nb / nbg (columns lc0 .. lc0+ncols of the group's cig) and tap
 * t = i*kw + j, a panel of the group's cog output channels, rows of ldp floats:
 *   wp[((nb*T + t)*cog + k)*ldp + c] = w[g*cog + k][lc0 + c][i][j],   zero for ncols <= c < ldp.
 * A chunk of kc consecutive output channels of one tap is kc contiguous rows. Ungrouped: g = 0,
 * cog = Cout, cig = Cin.
 *
 * dO: the compressed form stores, per slot, the value and the offset of the kept channel within
 * its group of m. The micro-kernel wants one 64-bit entry per slot: the value's bits and the byte
 * offset of the panel row, ((g*m) % cog + index) * ldp * 4 (spconv_internal.h: the row within its
 * conv group's panels, p->slot_base). Each work unit packs the
 * dO rows it reads into its thread's buffer, reused by every tap and column block, chunk-major
 * (spconv_internal.h: a (chunk, tap) pass then streams its entries contiguously). */
#include <omp.h>
#include <string.h>

#include "kernels/spconv_internal.h"

void spconv_pack_weights(struct sdgp_sparse_bwd *p, const float *w, const int64_t strides[4]) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t cig = p->cig, cog = p->cog, Cout = g->Cout, T = (int64_t)g->kh * g->kw, nr = p->blk.nr, ldp = p->ldp;
    const int64_t so = strides[0], si = strides[1], sh = strides[2], sw = strides[3];
    float *wp = p->wp;
    /* Each k reads its own source weights and writes its own panel rows (whole 64-byte lines):
     * threads never share a cache line. */
#pragma omp parallel for schedule(dynamic, 16) num_threads(p->threads)
    for (int64_t ko = 0; ko < Cout; ko++) {
        const float *src = w + ko * so;
        const int64_t k = ko % cog; /* row within its conv group's panels */
        for (int nb = (int)(ko / cog) * p->nbg; nb < (int)(ko / cog + 1) * p->nbg; nb++) {
            const int64_t c0 = (nb % p->nbg) * nr, ncols = cig - c0 < nr ? cig - c0 : nr;
            /* One destination row at a time, written whole (a row of one tap is ldp floats; rows of
             * different taps are cog*ldp floats apart, a multiple of 4 KiB, so writing them
             * round-robin would thrash one L1 set). The strided reads (OIHW) hit the k-th source
             * weights, cig*T floats that stay in L1; OHWI reads are contiguous. */
            for (int64_t t = 0; t < T; t++) {
                float *dst = wp + (((int64_t)nb * T + t) * cog + k) * ldp;
                const float *s = src + c0 * si + (t / g->kw) * sh + (t % g->kw) * sw;
                if (si == 1) memcpy(dst, s, (size_t)ncols * sizeof(float));
                else
                    for (int64_t c = 0; c < ncols; c++) dst[c] = s[c * si];
                for (int64_t c = ncols; c < ldp; c++) dst[c] = 0.0f;
            }
        }
    }
}

void spconv_pack_entries(spconv_entry *out, const struct sdgp_sparse_bwd *p, const sdgp_nm_tensor *dO, int64_t row0,
                         int64_t nrows, int64_t pix0, int64_t npix) {
    const int64_t slots = p->slots, gslots = p->cog / p->m * p->n, groups = slots / gslots;
    const uint32_t row_bytes = (uint32_t)(p->ldp * sizeof(float));
    for (int64_t grp = 0; grp < groups; grp++)
        for (int64_t k0 = 0; k0 < p->cog; k0 += p->blk.kc) {
            const int64_t kc = p->cog - k0 < p->blk.kc ? p->cog - k0 : p->blk.kc;
            const int64_t s0 = grp * gslots + k0 / p->m * p->n, ns = kc / p->m * p->n;
            p->k.entries(out + npix * s0 + pix0 * ns, dO->values + row0 * slots + s0,
                                      dO->index + row0 * slots + s0, p->slot_base + s0, nrows, ns, slots, row_bytes);
        }
}
