/* Packing for the sparse backward-data convolution (BLIS's "pack B" and "pack A" steps).
 *
 * Weights: w[k][c][i][j], element (k, c, i, j) at w + k*so + c*si + i*sh + j*sw (OIHW, or PyTorch's
 * channels_last OHWI, or any strides) -> per column block nb (columns c0 .. c0+ncols of Cin) and tap
 * t = i*kw + j, a panel of Cout rows of ldp floats:
 *   wp[((nb*T + t)*Cout + k)*ldp + c] = w[k][c0 + c][i][j],   zero for ncols <= c < ldp.
 * A chunk of kc consecutive output channels of one tap is kc contiguous rows.
 *
 * dO: the compressed form stores, per slot, the value and the offset of the kept channel within
 * its group of m. The micro-kernel wants one 64-bit entry per slot: the value's bits and the byte
 * offset of the panel row, (g*m + index) * ldp * 4 (spconv_internal.h). Each work unit packs the
 * dO rows it reads into its thread's buffer, reused by every tap and column block. */
#include <omp.h>
#include <string.h>

#include "kernels/spconv_internal.h"

void spconv_pack_weights(struct sdgp_sparse_bwd *p, const float *w, const int64_t strides[4]) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t Cin = g->Cin, Cout = g->Cout, T = (int64_t)g->kh * g->kw, nr = p->blk.nr, ldp = p->ldp;
    const int64_t so = strides[0], si = strides[1], sh = strides[2], sw = strides[3];
    const int nblocks = p->nblocks;
    float *wp = p->wp;
    /* Each k reads its own source weights and writes its own panel rows (whole 64-byte lines):
     * threads never share a cache line. */
#pragma omp parallel for schedule(dynamic, 16) num_threads(p->threads)
    for (int64_t k = 0; k < Cout; k++) {
        const float *src = w + k * so;
        for (int nb = 0; nb < nblocks; nb++) {
            const int64_t c0 = nb * nr, ncols = Cin - c0 < nr ? Cin - c0 : nr;
            /* One destination row at a time, written whole (a row of one tap is ldp floats; rows of
             * different taps are Cout*ldp floats apart, a multiple of 4 KiB, so writing them
             * round-robin would thrash one L1 set). The strided reads (OIHW) hit the k-th source
             * weights, Cin*T floats that stay in L1; OHWI reads are contiguous. */
            for (int64_t t = 0; t < T; t++) {
                float *dst = wp + (((int64_t)nb * T + t) * Cout + k) * ldp;
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
                         int64_t nrows) {
    const int64_t slots = p->slots;
    spconv_entries_from_slots(out, dO->values + row0 * slots, dO->index + row0 * slots, p->slot_base, nrows, slots,
                              (uint32_t)(p->ldp * sizeof(float)));
}
