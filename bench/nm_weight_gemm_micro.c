/* Can a GEMM with N:M sparse weights beat the dense GEMM on this core? The product of issue 16's
 * sparse forward in oneDNN's Winograd domain: per transform element, Y[T x N] = X[T x K] W[K x N],
 * W with n of every m consecutive rows (input channels) kept per column (output channel): the kernel
 * form of S-STE weights, whose zeros survive every Winograd transform. Three micro-kernels, all
 * AVX-512, one element's GEMM (T rows, panels of W kept in L1, X streamed from L2):
 *   dense    BLIS-style: per k, NV vectors of W's row k and MR broadcasts of X[r][k], MR*NV FMAs.
 *   permute  2:4 only, vectorised over output channels: per group of 4 rows of W and column block,
 *            the kept values (2 vectors) and their positions in the group (2 index vectors) stay
 *            in registers; per row r, X[r][4g..4g+3] is broadcast to every 128-bit lane once and
 *            `vpermilps` by each index vector picks, per lane, the X value its column keeps: one
 *            in-lane permute per FMA, no load per FMA.
 *   block    for comparison, masks shared by blocks of 16 output channels (`--weight-groups block16`,
 *            a different estimator): the dense kernel over the kept rows, X addressed through each
 *            block's kept indices (the panel's two vectors are two blocks).
 *   rows     vectorised over rows (X and Y transposed): per output channel, its kept rows of X^T
 *            are loaded and multiplied by its broadcast value; one load per FMA, the form of SDGP's
 *            per-row kernel (spconv_tile).
 * Output is checked bitwise against the dense kernel on the same W with zeros (same k order, and
 * adding an exact zero product changes nothing). Speedup = dense time / sparse time, same shape,
 * interleaved, best of reps; "of peak" = useful dense-equivalent FLOPs against the FMA ceiling.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_weight_gemm_micro && build/sdgp_nm_weight_gemm_micro [reps] [threads]
 */
#include <immintrin.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "kernels/spconv_internal.h"

#define MR 6  /* rows of Y per micro-tile (dense and permute) */
#define NV 2  /* vectors of 16 output channels per micro-tile */
#define NB (NV * 16)
#define RO 8  /* rows kernel: output channels per micro-tile */
#define RV 2  /* rows kernel: vectors of 16 rows per micro-tile */
#ifdef CROSS_LANE
#define PERM(b, i) _mm512_permutexvar_ps(i, b)
#else
#define PERM(b, i) _mm512_permutevar_ps(b, i)
#endif

typedef struct {
    int T, K, N;
    float *X, *Xt;      /* T x K, and K x T */
    float *W;           /* K x N dense, pruned entries 0 */
    float *Wp;          /* dense panels: [N/NB][K][NB] */
    float *Cv;          /* permute panels: [N/NB][K/4][2][NB] kept values */
    int32_t *Ci;        /* permute panels: [N/NB][K/4][2][NB] positions 0..3 in the group */
    int64_t *E;         /* rows kernel: [N][K/2] entries (row offset in floats of X^T, value bits) */
    float *Wbp;         /* block masks (one per 16 output channels): dense panels of those weights */
    float *Bv;          /* block panels: [N/NB][K/2][NB] kept values */
    int32_t *Bi;        /* block panels: [N/16][K/2] kept rows of each block */
    float *Yb;
    float *Y, *Yt;
} gemm;

__attribute__((target("avx512f"))) static void dense_tile(const float *x, int ldx, const float *wp, int K, float *y,
                                                          int ldy, int mr) {
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int k = 0; k < K; k++) {
        __m512 w0 = _mm512_loadu_ps(wp + (size_t)k * NB), w1 = _mm512_loadu_ps(wp + (size_t)k * NB + 16);
        for (int r = 0; r < MR; r++) {
            __m512 b = _mm512_set1_ps(x[(size_t)r * ldx + k]);
            acc[r][0] = _mm512_fmadd_ps(b, w0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(b, w1, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(y + (size_t)r * ldy + 16 * v, acc[r][v]);
}

__attribute__((target("avx512f"))) static void permute_tile(const float *x, int ldx, const float *cv,
                                                            const int32_t *ci, int K, float *y, int ldy, int mr) {
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int g = 0; g < K / 4; g++) {
        const float *cvg = cv + (size_t)g * 2 * NB;
        const int32_t *cig = ci + (size_t)g * 2 * NB;
        __m512 v00 = _mm512_loadu_ps(cvg), v01 = _mm512_loadu_ps(cvg + 16);
        __m512 v10 = _mm512_loadu_ps(cvg + NB), v11 = _mm512_loadu_ps(cvg + NB + 16);
        __m512i i00 = _mm512_loadu_si512(cig), i01 = _mm512_loadu_si512(cig + 16);
        __m512i i10 = _mm512_loadu_si512(cig + NB), i11 = _mm512_loadu_si512(cig + NB + 16);
        for (int r = 0; r < MR; r++) {
            __m512 b = _mm512_broadcast_f32x4(_mm_loadu_ps(x + (size_t)r * ldx + 4 * g));
            acc[r][0] = _mm512_fmadd_ps(PERM(b, i00), v00, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(PERM(b, i01), v01, acc[r][1]);
            acc[r][0] = _mm512_fmadd_ps(PERM(b, i10), v10, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(PERM(b, i11), v11, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(y + (size_t)r * ldy + 16 * v, acc[r][v]);
}

__attribute__((target("avx512f"))) static void block_tile(const float *x, int ldx, const float *bv, const int32_t *bi,
                                                          int nk, float *y, int ldy, int mr) {
    __m512 acc[MR][NV];
    for (int r = 0; r < MR; r++)
        for (int v = 0; v < NV; v++) acc[r][v] = _mm512_setzero_ps();
    for (int j = 0; j < nk; j++) {
        const float *x0 = x + bi[j], *x1 = x + bi[nk + j];
        __m512 w0 = _mm512_loadu_ps(bv + (size_t)j * NB), w1 = _mm512_loadu_ps(bv + (size_t)j * NB + 16);
        for (int r = 0; r < MR; r++) {
            acc[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(x0[(size_t)r * ldx]), w0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(x1[(size_t)r * ldx]), w1, acc[r][1]);
        }
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(y + (size_t)r * ldy + 16 * v, acc[r][v]);
}

/* RO output channels x RV*16 rows: entries of channel o are (offset into X^T, value). */
__attribute__((target("avx512f"))) static void rows_tile(const float *xt, const int64_t *e, int ne, float *yt, int ldy) {
    __m512 acc[RO][RV];
    for (int o = 0; o < RO; o++)
        for (int v = 0; v < RV; v++) acc[o][v] = _mm512_setzero_ps();
    for (int j = 0; j < ne; j++)
        for (int o = 0; o < RO; o++) {
            int64_t en = e[(size_t)o * ne + j];
            const float *row = xt + (int32_t)en;
            int32_t bits = (int32_t)(en >> 32);
            float wv;
            memcpy(&wv, &bits, sizeof wv);
            __m512 w = _mm512_set1_ps(wv);
            acc[o][0] = _mm512_fmadd_ps(_mm512_loadu_ps(row), w, acc[o][0]);
            acc[o][1] = _mm512_fmadd_ps(_mm512_loadu_ps(row + 16), w, acc[o][1]);
        }
    for (int o = 0; o < RO; o++)
        for (int v = 0; v < RV; v++) _mm512_storeu_ps(yt + (size_t)o * ldy + 16 * v, acc[o][v]);
}

/* Panel outer (it stays in L1 while the rows of X stream past it), row tiles inner. */
static void dense_over(const gemm *g, const float *panels, float *y) {
#pragma omp parallel for schedule(static)
    for (int nb = 0; nb < g->N / NB; nb++)
        for (int t = 0; t < g->T; t += MR)
            dense_tile(g->X + (size_t)t * g->K, g->K, panels + (size_t)nb * g->K * NB, g->K, y + (size_t)t * g->N + nb * NB, g->N,
                       g->T - t < MR ? g->T - t : MR);
}

static void run_dense(const gemm *g) { dense_over(g, g->Wp, g->Y); }

static void run_permute(const gemm *g) {
#pragma omp parallel for schedule(static)
    for (int nb = 0; nb < g->N / NB; nb++)
        for (int t = 0; t < g->T; t += MR)
            permute_tile(g->X + (size_t)t * g->K, g->K, g->Cv + (size_t)nb * g->K / 2 * NB, g->Ci + (size_t)nb * g->K / 2 * NB,
                         g->K, g->Y + (size_t)t * g->N + nb * NB, g->N, g->T - t < MR ? g->T - t : MR);
}

static void run_block(const gemm *g) {
#pragma omp parallel for schedule(static)
    for (int nb = 0; nb < g->N / NB; nb++)
        for (int t = 0; t < g->T; t += MR)
            block_tile(g->X + (size_t)t * g->K, g->K, g->Bv + (size_t)nb * g->K / 2 * NB, g->Bi + (size_t)nb * g->K, g->K / 2,
                       g->Yb + (size_t)t * g->N + nb * NB, g->N, g->T - t < MR ? g->T - t : MR);
}

/* the dense kernel on the block-masked weights, into Y */
static void run_block_reference(const gemm *g) { dense_over(g, g->Wbp, g->Y); }

static void run_rows(const gemm *g) {
    int ne = g->K / 2, nob = g->N / RO;
#pragma omp parallel for schedule(static)
    for (int ob = 0; ob < nob; ob++)
        for (int t = 0; t < g->T; t += RV * 16)
            rows_tile(g->Xt + t, g->E + (size_t)ob * RO * ne, ne, g->Yt + (size_t)ob * RO * g->T + t, g->T);
}

static float frand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((*s >> 40) & 0xffffff) / 16777216.0f - 0.5f;
}

static void *xalloc(size_t bytes) {
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "nm_weight_gemm_micro: out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

/* The two kept rows a < b of a 2:4 group, drawn from the generator state *seed. */
static void kept_pair(uint64_t *seed, int *a, int *b) {
    *seed = *seed * 6364136223846793005ull + 1;
    int x = (int)(*seed >> 61) % 4, y = (x + 1 + (int)((*seed >> 33) % 3)) % 4;
    *a = x < y ? x : y, *b = x < y ? y : x;
}

static void build(gemm *g, int T, int K, int N, uint64_t seed) {
    g->T = T, g->K = K, g->N = N;
    g->X = xalloc(sizeof(float) * (T + MR) * K), g->Xt = xalloc(sizeof(float) * T * K);
    g->W = xalloc(sizeof(float) * K * N), g->Wp = xalloc(sizeof(float) * K * N);
    g->Cv = xalloc(sizeof(float) * K / 2 * N), g->Ci = xalloc(sizeof(int32_t) * K / 2 * N);
    g->E = xalloc(sizeof(int64_t) * K / 2 * N);
    g->Wbp = xalloc(sizeof(float) * K * N), g->Bv = xalloc(sizeof(float) * K / 2 * N);
    g->Bi = xalloc(sizeof(int32_t) * K / 2 * (N / 16)), g->Yb = xalloc(sizeof(float) * (T + MR) * N);
    g->Y = xalloc(sizeof(float) * (T + MR) * N), g->Yt = xalloc(sizeof(float) * T * N);
    for (int i = 0; i < T * K; i++) g->X[i] = frand(&seed);
    memset(g->X + (size_t)T * K, 0, sizeof(float) * MR * K); /* the last row tile reads MR rows */
    for (int t = 0; t < T; t++)
        for (int k = 0; k < K; k++) g->Xt[(size_t)k * T + t] = g->X[(size_t)t * K + k];
    for (int o = 0; o < N; o++)
        for (int gi = 0; gi < K / 4; gi++) {
            int a, b;
            kept_pair(&seed, &a, &b);
            for (int j = 0; j < 4; j++) g->W[(size_t)(4 * gi + j) * N + o] = (j == a || j == b) ? frand(&seed) : 0.0f;
            int nb = o / NB, col = o % NB;
            float *cv = g->Cv + ((size_t)nb * K / 4 + gi) * 2 * NB;
            int32_t *ci = g->Ci + ((size_t)nb * K / 4 + gi) * 2 * NB;
            cv[col] = g->W[(size_t)(4 * gi + a) * N + o], ci[col] = a;
            cv[NB + col] = g->W[(size_t)(4 * gi + b) * N + o], ci[NB + col] = b;
            for (int kk = 0; kk < 2; kk++) {
                int row = 4 * gi + (kk ? b : a);
                float wv = g->W[(size_t)row * N + o];
                int32_t bits;
                memcpy(&bits, &wv, sizeof bits);
                g->E[(size_t)o * (K / 2) + 2 * gi + kk] = (int64_t)((uint64_t)(uint32_t)bits << 32 | (uint32_t)(row * T));
            }
        }
    for (int bk = 0; bk < N / 16; bk++) /* block masks: rows 4gi+a, 4gi+b kept by the block's 16 channels */
        for (int gi = 0; gi < K / 4; gi++) {
            int a, b;
            kept_pair(&seed, &a, &b);
            int nb = bk / 2, c0 = 16 * (bk % 2);
            for (int j = 0; j < 4; j++)
                for (int col = c0; col < c0 + 16; col++)
                    g->Wbp[((size_t)nb * K + 4 * gi + j) * NB + col] = (j == a || j == b) ? frand(&seed) : 0.0f;
            for (int kk = 0; kk < 2; kk++) {
                int row = 4 * gi + (kk ? b : a);
                g->Bi[(size_t)bk * K / 2 + 2 * gi + kk] = row;
                memcpy(g->Bv + ((size_t)nb * K / 2 + 2 * gi + kk) * NB + c0, g->Wbp + ((size_t)nb * K + row) * NB + c0,
                       sizeof(float) * 16);
            }
        }
    for (int nb = 0; nb < N / NB; nb++)
        for (int k = 0; k < K; k++) memcpy(g->Wp + ((size_t)nb * K + k) * NB, g->W + (size_t)k * N + nb * NB, sizeof(float) * NB);
}

static void release(gemm *g) {
    free(g->X), free(g->Xt), free(g->W), free(g->Wp), free(g->Cv), free(g->Ci), free(g->E), free(g->Y), free(g->Yt);
    free(g->Wbp), free(g->Bv), free(g->Bi), free(g->Yb);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 15, threads = argc > 2 ? atoi(argv[2]) : 1;
    if (reps < 1 || reps > 1000 || threads < 1 || threads > 256) {
        fprintf(stderr, "usage: %s [reps 1-1000] [threads]\n", argv[0]);
        return 2;
    }
    if (!__builtin_cpu_supports("avx512f")) {
        fprintf(stderr, "nm_weight_gemm_micro: this CPU has no AVX-512F; the micro-kernels here are AVX-512 only\n");
        return 2;
    }
    omp_set_num_threads(threads);
    double peak = spconv_fma_ceiling(SDGP_ISA_AVX512, threads, 0.3);
    printf("# FMA ceiling %.0f GFLOP/s on %d thread(s); T rows x K -> N, 2:4 weights per output channel along K\n", peak,
           threads);
    printf("%-16s %9s %9s %9s %9s %9s %9s %9s %9s %9s\n", "T x K -> N", "dense ms", "of peak", "permute", "speedup",
           "of peak", "rows", "speedup", "block", "speedup");
    static const int shapes[][3] = {{1024, 64, 64}, {1024, 128, 128}, {1024, 256, 256}, {1024, 512, 512}, {576, 512, 512}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        gemm g;
        int T = shapes[s][0], K = shapes[s][1], N = shapes[s][2];
        build(&g, T, K, N, 12345 + s);
        double best[4] = {1e9, 1e9, 1e9, 1e9};
        void (*run[4])(const gemm *) = {run_dense, run_permute, run_rows, run_block};
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < 4; k++) {
                double t0 = sdgp_now_s();
                for (int i = 0; i < 4; i++) run[k](&g);
                double dt = (sdgp_now_s() - t0) / 4;
                if (dt < best[k]) best[k] = dt;
            }
        /* correctness, bitwise: permute and rows against dense, block against dense on its weights */
        float *ref = xalloc(sizeof(float) * T * N);
        run_dense(&g);
        memcpy(ref, g.Y, sizeof(float) * T * N);
        run_permute(&g);
        run_rows(&g);
        long bad_p = 0, bad_r = 0, bad_b = 0;
        for (int t = 0; t < T; t++)
            for (int o = 0; o < N; o++) {
                bad_p += g.Y[(size_t)t * N + o] != ref[(size_t)t * N + o];
                bad_r += g.Yt[(size_t)o * T + t] != ref[(size_t)t * N + o];
            }
        run_block_reference(&g);
        run_block(&g);
        for (size_t i = 0; i < (size_t)T * N; i++) bad_b += g.Yb[i] != g.Y[i];
        double flops = 2.0 * T * K * N;
        char name[32];
        snprintf(name, sizeof name, "%dx%d->%d", T, K, N);
        printf("%-16s %9.3f %9.2f %9.3f %8.2fx %9.2f %9.3f %8.2fx %9.3f %8.2fx%s\n", name, best[0] * 1e3,
               flops / best[0] * 1e-9 / peak, best[1] * 1e3, best[0] / best[1], flops / best[1] * 1e-9 / peak, best[2] * 1e3,
               best[0] / best[2], best[3] * 1e3, best[0] / best[3], bad_p || bad_r || bad_b ? "  MISMATCH" : "");
        if (bad_p || bad_r || bad_b)
            fprintf(stderr, "mismatch: permute %ld, rows %ld, block %ld of %d values\n", bad_p, bad_r, bad_b, T * N);
        free(ref);
        release(&g);
    }
    return 0;
}
