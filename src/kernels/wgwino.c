/* The dense weight gradient of 3x3 stride-1 convolutions by Winograd F(4x4,3x3): plan, chunks of
 * the batch, threads, and the final G^T (.) G (wgwino_internal.h has the formula and the kernel
 * contracts; wgwino.md the design and measurements).
 *
 * Loops: the batch in chunks of whole images (about CHUNK_BYTES of transformed tiles); per chunk,
 * (1) the 6 rows of B^T X B and of A dY A^T of every image, in parallel over (image, row), into
 * the 36 planes V_e (tiles x Cin) and Y_e (tiles x Cout), rows padded (tile_stride); (2) the 36
 * GEMMs M_e += Y_e^T V_e, in parallel over the elements e (each M_e owned by one thread for the
 * whole chunk, its tiles summed in order; the first chunk stores). Then dW = G^T M G per (k, c). Every element of
 * M sums its tiles in the same order whatever the thread count, so the result is bitwise the same
 * for every thread count, and for every ISA path (the micro-kernels keep one FMA chain per element;
 * the transforms are exact in their products; G^T (.) G is this file's, compiled once). */
#include <omp.h>
#include <stdlib.h>

#include "core/align.h"
#include "kernels/wgwino_internal.h"

/* Transformed tiles of a chunk, V and Y together, unless a workspace limit wants fewer: the GEMMs
 * stream them from L3 and keep M's block in registers, so a long chunk (many tiles per M load and
 * store) matters more than cache fit. */
#define CHUNK_BYTES (16u << 20)
#define CHUNK_TILES_MAX 1024
/* Tiles per micro-kernel call: a 16-column panel of V (8 KB) and the Y rows it meets (128 lines)
 * stay in L1 while the row blocks of M pass over them. */
#define TILE_RUN 128

struct wgwino {
    spfwd_wino_shape s; /* the forward's shapes: F(4x4) tiles of dY, patches of X; zrow: Cin zeros */
    wgwino_kernels k;
    int threads;
    int64_t chunk_img;  /* images per chunk */
    int64_t ldv, ldy;   /* floats from one tile's row of V_e (Y_e) to the next */
    float *zrow_y;      /* Cout zeros: dY beyond Ho, Wo */
    size_t m_bytes, v_bytes, y_bytes;
    float *ws;
};

static const wgwino_kernels kernel_table[SDGP_ISA_COUNT] = {
    [SDGP_ISA_REF] = {.isa = SDGP_ISA_REF, .gemm = wgwino_gemm_ref, .dy_in = wgwino_dy_ref, .x_in = spfwd_wino_in_ref},
    [SDGP_ISA_AVX2] = {.isa = SDGP_ISA_AVX2, .gemm = wgwino_gemm_avx2, .dy_in = wgwino_dy_avx2, .x_in = spfwd_wino_in_avx2},
    /* no AVX-512 kernel: oneDNN has a Winograd backward-weights there, which runs first */
    [SDGP_ISA_AVX512] = {.isa = SDGP_ISA_AVX2, .gemm = wgwino_gemm_avx2, .dy_in = wgwino_dy_avx2, .x_in = spfwd_wino_in_avx2},
};

/* A row stride of whole cache lines, an odd number of them: the GEMMs walk a column panel of V_e
 * and Y_e down the tiles, and at a power-of-two stride (64 or 128 channels) those rows fall into a
 * few L1 sets and evict each other (measured: 1.3x slower GEMMs at 64 -> 128 channels). */
static int64_t tile_stride(int64_t C) {
    int64_t lines = (C + 15) / 16;
    return (lines % 2 ? lines : lines + 1) * 16;
}

sdgp_status wgwino_create(wgwino **out, const sdgp_conv_geom *g, sdgp_isa isa, int threads, size_t ws_limit,
                          sdgp_error *err) {
    if (!out || !g) return sdgp_fail(err, SDGP_ERR_INVALID, "Winograd weight gradient: NULL %s", out ? "geometry" : "output");
    *out = NULL;
    if (!sdgp_sparse_fwd_wino_supports(g)) /* its groups <= 1 too */
        return sdgp_fail(err, SDGP_ERR_UNSUPPORTED,
                         "Winograd weight gradient: needs a 3x3 kernel, stride 1, padding 0-2 and no groups (got %dx%d, "
                         "stride %d, pad %d, %d groups)",
                         g->kh, g->kw, g->stride, g->pad, g->groups);
    if (threads < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "Winograd weight gradient: threads=%d < 0", threads);
    sdgp_isa resolved;
    sdgp_status st = sdgp_isa_resolve(isa, &resolved, err);
    if (st != SDGP_OK) return st;
    wgwino *p = calloc(1, sizeof *p);
    if (!p) return sdgp_fail(err, SDGP_ERR_NOMEM, "Winograd weight gradient: out of memory");
    p->k = kernel_table[resolved];
    p->threads = threads ? threads : omp_get_max_threads();
    float *zrow = spfwd_wino_shape_init(&p->s, g, 4, p->threads);
    p->zrow_y = calloc((size_t)g->Cout, sizeof(float));
    if (!zrow || !p->zrow_y) {
        wgwino_destroy(p);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "Winograd weight gradient: out of memory");
    }
    p->ldv = tile_stride(g->Cin), p->ldy = tile_stride(g->Cout);
    p->m_bytes = sdgp_align64((size_t)36 * g->Cout * g->Cin * 4);
    /* M (36 Cin Cout floats: 38 MB at 512 -> 512) is there whatever the chunk; the chunk takes the rest */
    const size_t per_tile = (size_t)36 * 4 * (size_t)(p->ldv + p->ldy);
    size_t budget = CHUNK_BYTES;
    if (ws_limit && p->m_bytes + budget > ws_limit) budget = ws_limit > p->m_bytes ? ws_limit - p->m_bytes : 0;
    const int64_t T = p->s.T;
    int64_t tiles = (int64_t)(budget / per_tile);
    if (tiles > CHUNK_TILES_MAX) tiles = CHUNK_TILES_MAX;
    p->chunk_img = tiles / T < 1 ? 1 : tiles / T > g->B ? g->B : tiles / T;
    const int64_t K = p->chunk_img * T;
    p->v_bytes = (size_t)36 * K * p->ldv * 4;
    p->y_bytes = (size_t)36 * K * p->ldy * 4;
    *out = p;
    return SDGP_OK;
}

void wgwino_destroy(wgwino *p) {
    if (!p) return;
    free(p->s.zrow);
    free(p->zrow_y);
    free(p);
}

size_t wgwino_ws_bytes(const wgwino *p) { return p->m_bytes + p->v_bytes + p->y_bytes; }

void wgwino_set_ws(wgwino *p, void *ws) { p->ws = ws; }

void wgwino_set_s2d(wgwino *p, int Hs, int Ws) { spfwd_wino_shape_s2d(&p->s, 1, 0, Hs, Ws); }

const sdgp_conv_geom *wgwino_geom(const wgwino *p) { return &p->s.g; }


/* dw[k][c][0..8] = G^T m G for m[e] = M_e[k][c], e = 6a + b, G of F(4x4,3x3) =
 * [[1/4,0,0],[-1/6,-1/6,-1/6],[-1/6,1/6,-1/6],[1/24,1/12,1/6],[1/24,-1/12,1/6],[0,0,1]]: rows of G^T
 * paired by their even and odd parts, as the forward's packing (spfwd_wino.c, g_apply). */
static void gt_apply(float *restrict o, int64_t os, const float *restrict x, int64_t xs) {
    const float s12 = x[xs] + x[2 * xs], d12 = x[xs] - x[2 * xs], s34 = x[3 * xs] + x[4 * xs], d34 = x[3 * xs] - x[4 * xs];
    o[0] = (0.25f * x[0] + (-1.0f / 6) * s12) + (1.0f / 24) * s34;
    o[os] = (-1.0f / 6) * d12 + (1.0f / 12) * d34;
    o[2 * os] = ((-1.0f / 6) * s12 + (1.0f / 6) * s34) + x[5 * xs];
}

static void inverse(float *dw, const float *M, int64_t kc) {
    float m[36], t[18];
    for (int e = 0; e < 36; e++) m[e] = M[e * kc];
    for (int a = 0; a < 6; a++) gt_apply(t + a * 3, 1, m + a * 6, 1); /* t[a][j] = (m G)[a][j] */
    for (int j = 0; j < 3; j++) gt_apply(dw + j, 3, t + j, 3);        /* dw[i][j] = (G^T t)[i][j] */
}

sdgp_status wgwino_run(wgwino *p, float *dw, float *db, const float *x, const float *dy, sdgp_error *err) {
    if (!p || !dw || !x || !dy) return sdgp_fail(err, SDGP_ERR_INVALID, "Winograd weight gradient: NULL argument");
    if (!p->ws) return sdgp_fail(err, SDGP_ERR_INVALID, "Winograd weight gradient: no workspace set");
    const sdgp_conv_geom *g = &p->s.g;
    const int64_t Cin = g->Cin, Cout = g->Cout, T = p->s.T, K = p->chunk_img * T;
    float *M = p->ws, *V = (float *)((char *)p->ws + p->m_bytes), *Y = (float *)((char *)V + p->v_bytes);
    const int64_t ldv = p->ldv, ldy = p->ldy, vs = K * ldv, ys = K * ldy, kc = Cout * Cin;
    const wgwino_kernels k = p->k;
#pragma omp parallel num_threads(p->threads)
    {
        for (int64_t b0 = 0; b0 < g->B; b0 += p->chunk_img) {
            const int64_t nimg = g->B - b0 < p->chunk_img ? g->B - b0 : p->chunk_img, kt = nimg * T;
#pragma omp for schedule(dynamic)
            for (int64_t item = 0; item < nimg * 12; item++) {
                const int64_t b = b0 + item / 12;
                const int a = (int)(item % 12);
                if (a < 6)
                    k.x_in(&p->s, V + a * 6 * vs + (b - b0) * T * ldv, vs, ldv, x, b, a);
                else
                    k.dy_in(&p->s, Y + (a - 6) * 6 * ys + (b - b0) * T * ldy, ys, ldy, dy, p->zrow_y, b, a - 6);
            }
            /* a task is one element's M_e; its tiles in runs of TILE_RUN: a run of V_e and Y_e comes
             * into L2 once and serves every block of M_e (in L2 too: Cout x Cin floats), and each
             * 16-column panel of the run's V_e (TILE_RUN x 16 floats) is reused from L1 by every
             * row block */
#pragma omp for schedule(static)
            for (int64_t e = 0; e < 36; e++)
                for (int64_t t0 = 0; t0 < kt; t0 += TILE_RUN) {
                    const int64_t nt = kt - t0 < TILE_RUN ? kt - t0 : TILE_RUN;
                    const float *v = V + e * vs + t0 * ldv, *y = Y + e * ys + t0 * ldy;
                    for (int64_t c0 = 0; c0 < Cin; c0 += WGWINO_NR) {
                        const int nc = (int)(Cin - c0 < WGWINO_NR ? Cin - c0 : WGWINO_NR);
                        for (int64_t k0 = 0; k0 < Cout; k0 += WGWINO_MR) {
                            const int mr = (int)(Cout - k0 < WGWINO_MR ? Cout - k0 : WGWINO_MR);
                            k.gemm(M + e * kc + k0 * Cin + c0, Cin, y + k0, ldy, v + c0, ldv, nt, mr, nc,
                                   b0 > 0 || t0 > 0);
                        }
                    }
                }
        }
#pragma omp for schedule(static)
        for (int64_t i = 0; i < kc; i++) inverse(dw + i * 9, M + i, kc);
        if (db) {
#pragma omp for schedule(static)
            for (int64_t k0 = 0; k0 < Cout; k0 += 16) {
                const int64_t nk = Cout - k0 < 16 ? Cout - k0 : 16, rows = (int64_t)g->B * g->Ho * g->Wo;
                double acc[16] = {0}; /* in double: a sum over B x Ho x Wo rows (1e5 at batch 512) */
                for (int64_t r = 0; r < rows; r++)
                    for (int64_t j = 0; j < nk; j++) acc[j] += dy[r * Cout + k0 + j];
                for (int64_t j = 0; j < nk; j++) db[k0 + j] = (float)acc[j];
            }
        }
    }
    return SDGP_OK;
}
