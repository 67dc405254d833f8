/* The sparse weight gradient's rows form (spwgrad_internal.h, spwgrad_rows_tile; README.md, section
 * "Sparse weight gradient"): dW[k][tap][c] += value * x[row's pixel at tap][c] for every kept slot of
 * output channel k, a row-wise product over a zero-padded copy of the input. Threads own ranges of
 * output channels (each dW row has one owner); per run of ROWS_RUN rows a thread turns its channels'
 * slots into entries, then sweeps blocks of 32 input channels (their run of input rows stays in
 * cache) over its channels and the kernel's taps. The sums are the permute form's chains, in the same
 * order: the same bits. */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/spwgrad_internal.h"

#define ROWS_NV 4 /* vectors of 8 input channels per call */
#define ROWS_NT 3 /* taps of a kernel row per call */
#define ROWS_RUN 128 /* rows per run: its entries are reused by every block of input channels */

int spwgrad_rows_setup(sdgp_sparse_wgrad *p) {
    const sdgp_conv_geom *g = &p->g;
    p->Hp = g->H + 2 * g->pad;
    p->Wp = g->W + 2 * g->pad;
    p->cinp = (g->Cin + 7) / 8 * 8;
    const int64_t xcount = (int64_t)g->B * p->Hp * p->Wp * g->Cin;
    if (xcount + 8 > (int64_t)UINT32_MAX) return 0; /* entry offsets are 32 bits: the permute form runs */
    int k0, k1, kmax = 0;
    for (int t = 0; t < p->threads; t++) {
        spwgrad_range(g->Cout, p->threads, t, &k0, &k1);
        if (k1 - k0 > kmax) kmax = k1 - k0;
    }
    p->ent_per_thread = (int64_t)kmax * (ROWS_RUN / p->m * p->n);
    p->xpad_floats = xcount + 8; /* (64-byte aligned, made at the first run or the caller's) */
    if (posix_memalign((void **)&p->dwr, 64, (size_t)g->Cout * p->taps * p->cinp * sizeof(float))) p->dwr = NULL;
    p->ent = malloc((size_t)p->ent_per_thread * p->threads * sizeof(uint64_t));
    return p->dwr && p->ent;
}

/* x into the zero-padded copy (the 8-float tail zeroed too: the last pixel's vectors read into it). */
static void pad_input(const sdgp_sparse_wgrad *p, const float *x) {
    const sdgp_conv_geom *g = &p->g;
    const int64_t line = (int64_t)p->Wp * g->Cin, lines = (int64_t)g->B * p->Hp;
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int64_t l = 0; l < lines; l++) {
        float *dst = p->xpad + l * line;
        const int h = (int)(l % p->Hp) - g->pad;
        if (h < 0 || h >= g->H) {
            memset(dst, 0, (size_t)line * sizeof(float));
            continue;
        }
        const size_t border = (size_t)g->pad * g->Cin;
        memset(dst, 0, border * sizeof(float));
        memcpy(dst + border, x + ((l / p->Hp) * g->H + h) * (int64_t)g->W * g->Cin, (size_t)g->W * g->Cin * sizeof(float));
        memset(dst + border + (size_t)g->W * g->Cin, 0, border * sizeof(float));
    }
    memset(p->xpad + lines * line, 0, 8 * sizeof(float));
}

/* Entries of channels k0..k1 for the ns slots from slot row s0 (a run's), channel-major, in slot
 * order. Returns the first slot s * Cout + k with index >= m (it takes the group's first row), or
 * INT64_MAX. */
static int64_t pack_entries(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int64_t s0, int ns, int k0, int k1,
                            uint64_t *ent) {
    const sdgp_conv_geom *g = &p->g;
    const int C = g->Cout, n = p->n, m = p->m;
    const int64_t HoWo = (int64_t)g->Ho * g->Wo;
    int64_t bad = INT64_MAX;
    for (int s = 0; s < ns; s++) {
        const int64_t slot = s0 + s, row0 = slot / n * m;
        const float *v = dy->values + slot * C;
        const uint8_t *ix = dy->index + slot * C;
        for (int k = k0; k < k1; k++) {
            int i = ix[k];
            if (i >= m) {
                if (bad == INT64_MAX) bad = slot * C + k;
                i = 0;
            }
            const int64_t r = row0 + i, b = r / HoWo, q = r % HoWo;
            const int64_t off = ((b * p->Hp + q / g->Wo * g->stride) * p->Wp + q % g->Wo * g->stride) * g->Cin;
            uint32_t bits;
            memcpy(&bits, &v[k], sizeof bits);
            ent[(int64_t)(k - k0) * ns + s] = (uint64_t)off << 32 | bits;
        }
    }
    return bad;
}

static int64_t run_thread(const sdgp_sparse_wgrad *p, const sdgp_nm_tensor *dy, int t) {
    const sdgp_conv_geom *g = &p->g;
    int k0, k1;
    spwgrad_range(g->Cout, p->threads, t, &k0, &k1);
    if (k0 == k1) return INT64_MAX;
    uint64_t *ent = p->ent + p->ent_per_thread * t;
    int64_t toff[ROWS_NT], bad = INT64_MAX;
    for (int64_t r0 = 0; r0 < p->rows; r0 += ROWS_RUN) {
        const int nr = (int)(p->rows - r0 < ROWS_RUN ? p->rows - r0 : ROWS_RUN), ns = nr / p->m * p->n;
        const int64_t b = pack_entries(p, dy, r0 / p->m * p->n, ns, k0, k1, ent);
        if (b < bad) bad = b;
        for (int c0 = 0; c0 < g->Cin; c0 += 8 * ROWS_NV) {
            const int nv = (g->Cin - c0 + 7) / 8 < ROWS_NV ? (g->Cin - c0 + 7) / 8 : ROWS_NV;
            for (int k = k0; k < k1; k++)
                for (int i = 0; i < g->kh; i++)
                    for (int j0 = 0; j0 < g->kw; j0 += ROWS_NT) {
                        const int nt = g->kw - j0 < ROWS_NT ? g->kw - j0 : ROWS_NT;
                        for (int a = 0; a < nt; a++) toff[a] = ((int64_t)i * p->Wp + j0 + a) * g->Cin;
                        spwgrad_rows_tile tl = {
                            .x = p->xpad + c0,
                            .ent = ent + (int64_t)(k - k0) * ns,
                            .ne = ns,
                            .toff = toff,
                            .nt = nt,
                            .nv = nv,
                            .fresh = r0 == 0,
                            .acc = p->dwr + ((int64_t)k * p->taps + i * g->kw + j0) * p->cinp + c0,
                            .acc_st = p->cinp,
                        };
                        p->k.rows(&tl);
                    }
        }
    }
    return bad;
}

int64_t spwgrad_rows_run(sdgp_sparse_wgrad *p, float *dw, const float *x, const sdgp_nm_tensor *dy) {
    const sdgp_conv_geom *g = &p->g;
    pad_input(p, x);
    int64_t bad = INT64_MAX;
#pragma omp parallel num_threads(p->threads) reduction(min : bad)
    for (int t = omp_get_thread_num(); t < p->threads; t += omp_get_num_threads()) {
        const int64_t b = run_thread(p, dy, t);
        if (b < bad) bad = b;
    }
    if (bad != INT64_MAX) return bad; /* an error: dW stays as it was */
    /* [Cout][taps][cinp] -> OIHW */
#pragma omp parallel for schedule(static) num_threads(p->threads)
    for (int co = 0; co < g->Cout; co++)
        for (int ci = 0; ci < g->Cin; ci++)
            for (int tap = 0; tap < p->taps; tap++)
                dw[((int64_t)co * g->Cin + ci) * p->taps + tap] = p->dwr[((int64_t)co * p->taps + tap) * p->cinp + ci];
    return bad;
}
