/* NCHW against NHWC, per conv layer of ResNet-9 (w=1) and ResNet-18 (CIFAR variant) at batch 32:
 * what the NCHW layout (PyTorch's default) costs in libsdgp's two calls of a converted layer's
 * backward, and the transposes alone.
 *   prune   sdgp_prune of dL/dO (B x Cout x Ho*Wo), compressed form only (as sdgp.torch does),
 *           cfg->layout NHWC vs NCHW
 *   bwd     sdgp_sparse_bwd_data into dL/dD, output layout NHWC vs NCHW
 *   tr      transpose_for(isa) of the whole dL/dO NCHW -> NHWC, and of dL/dD NHWC -> NCHW, in the
 *           tiles the two paths use, against memcpy of the same bytes (2 threads, GB/s of reads)
 * Times are the best of interleaved repetitions (both layouts alternate, so drift hits both).
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nchw_micro && build/sdgp_nchw_micro [fn] [n:m] [reps] [threads]
 * fn: a sdgp_prune_fn name (default rescaled), n:m default 2:4, reps default 15, threads default 2.
 * With 2 threads on 2 vCPUs, any other busy process makes the times meaningless (a descheduled
 * thread stalls every barrier): measure in a quiet window. */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "core/transpose.h"
#include "sdgp/conv.h"
#include "sdgp/isa.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

#define BATCH 32
#define MAX_REPS 64

static int THREADS = 2;

typedef struct {
    const char *name;
    int Cin, Cout, H, k, s, pad, count; /* count: layers of this shape in the model */
} layer;

static const layer LAYERS[] = {
    {"r9.conv1 5x5/2", 128, 256, 32, 5, 2, 2, 1}, {"r9.conv2-3", 256, 256, 16, 3, 1, 1, 2},
    {"r9.conv4", 256, 512, 16, 3, 1, 1, 1},       {"r9.conv5-6", 512, 512, 8, 3, 1, 1, 2},
    {"r9.conv7 pad0", 512, 256, 8, 3, 1, 0, 1},   {"r18.l1 x4", 64, 64, 32, 3, 1, 1, 4},
    {"r18.l2.0.c1 /2", 64, 128, 32, 3, 2, 1, 1},  {"r18.l2.ds 1x1/2", 64, 128, 32, 1, 2, 0, 1},
    {"r18.l2 x3", 128, 128, 16, 3, 1, 1, 3},      {"r18.l3.0.c1 /2", 128, 256, 16, 3, 2, 1, 1},
    {"r18.l3.ds 1x1/2", 128, 256, 16, 1, 2, 0, 1}, {"r18.l3 x3", 256, 256, 8, 3, 1, 1, 3},
    {"r18.l4.0.c1 /2", 256, 512, 8, 3, 2, 1, 1},  {"r18.l4.ds 1x1/2", 256, 512, 8, 1, 2, 0, 1},
    {"r18.l4 x3", 512, 512, 4, 3, 1, 1, 3},
};

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double best(double *t, int n) { /* the minimum: robust to other processes on a 2-vCPU machine */
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[0];
}

static void fill(float *x, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((int)(seed >> 8) - (1 << 23)) / (float)(1 << 23);
    }
}

static void die(const char *what, const sdgp_error *e) {
    fprintf(stderr, "nchw_micro: %s: %s\n", what, e->msg);
    exit(1);
}

/* The whole B x C x P tensor src transposed to B x P x C (to_nhwc) or back, per sample, samples split
 * over the threads; or memcpy (tr NULL). */
static void transpose_all(transpose_fn tr, float *dst, const float *src, int64_t B, int64_t C, int64_t P, int to_nhwc) {
#pragma omp parallel for num_threads(THREADS) schedule(static)
    for (int64_t b = 0; b < B; b++) {
        const float *s = src + b * C * P;
        float *d = dst + b * C * P;
        if (!tr)
            memcpy(d, s, (size_t)(C * P) * sizeof(float));
        else if (to_nhwc)
            tr(d, C, s, P, C, P); /* d[p][c] = s[c][p] */
        else
            tr(d, P, s, C, P, C); /* d[c][p] = s[p][c] */
    }
}

int main(int argc, char **argv) {
    sdgp_prune_fn fn = SDGP_PRUNE_RESCALED;
    int n = 2, m = 4, reps = 15;
    sdgp_error e;
    if (argc > 1 && sdgp_prune_fn_parse(argv[1], &fn, &e) != SDGP_OK) die("fn", &e);
    if (argc > 2 && sdgp_nm_parse(argv[2], &n, &m, &e) != SDGP_OK) die("n:m", &e);
    if (argc > 3) reps = atoi(argv[3]);
    if (reps < 1 || reps > MAX_REPS) reps = 15;
    if (argc > 4) THREADS = atoi(argv[4]);
    if (THREADS < 1) THREADS = 2;
    sdgp_isa isa;
    if (sdgp_isa_resolve(SDGP_ISA_AUTO, &isa, &e) != SDGP_OK) die("isa", &e);
    const transpose_fn tr = transpose_for(isa);
    printf("nchw_micro: %s %d:%d, ISA %s, %d threads, batch %d, best of %d (ms per call; tr: GB/s read)\n",
           sdgp_prune_fn_name(fn), n, m, sdgp_isa_name(isa), THREADS, BATCH, reps);
    printf("%-17s %4s %4s %3s | %7s %7s %5s | %7s %7s %5s | %6s %6s %6s | %6s %6s %6s\n", "layer", "Cin", "Cout", "Ho",
           "prNHWC", "prNCHW", "x", "bwNHWC", "bwNCHW", "x", "dO:tr", "memcp", "tr/cp", "dD:tr", "memcp", "tr/cp");
    double tot[2][4] = {{0}}; /* ResNet-9, ResNet-18 */
    for (size_t li = 0; li < sizeof LAYERS / sizeof LAYERS[0]; li++) {
        const layer *L = &LAYERS[li];
        sdgp_conv_geom g;
        if (sdgp_conv_geom_init(&g, BATCH, L->H, L->H, L->Cin, L->Cout, L->k, L->k, L->s, L->pad, &e) != SDGP_OK) die("geom", &e);
        const int64_t P = (int64_t)g.Ho * g.Wo, HW = (int64_t)L->H * L->H, nO = BATCH * P * L->Cout, nD = BATCH * HW * L->Cin;
        float *dO = aligned_alloc(64, (size_t)nO * 4), *dO2 = aligned_alloc(64, (size_t)nO * 4);
        float *dD = aligned_alloc(64, (size_t)nD * 4), *dD2 = aligned_alloc(64, (size_t)nD * 4);
        float *w = malloc((size_t)L->Cout * L->Cin * L->k * L->k * 4);
        fill(dO, (size_t)nO, 1u + (unsigned)li);
        fill(w, (size_t)L->Cout * L->Cin * L->k * L->k, 7u);
        sdgp_nm_tensor nm;
        memset(&nm, 0, sizeof nm);
        if (sdgp_nm_alloc(&nm, SDGP_AXIS_CHANNEL, n, m, BATCH * P, L->Cout, &e) != SDGP_OK) die("nm", &e);
        sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fn, n, m);
        cfg.threads = THREADS;
        sdgp_sparse_bwd *plan = NULL;
        if (sdgp_sparse_bwd_create(&plan, &g, n, m, SDGP_ISA_AUTO, THREADS, &e) != SDGP_OK || sdgp_sparse_bwd_pack(plan, w, &e) != SDGP_OK)
            die("plan", &e);
        double t[10][MAX_REPS];
        for (int r = -2; r < reps; r++) { /* 2 warm-ups */
            double t0;
            for (int lay = 0; lay < 2; lay++) {
                cfg.layout = lay ? SDGP_LAYOUT_NCHW : SDGP_LAYOUT_NHWC;
                t0 = sdgp_now_s();
                if (sdgp_prune(&cfg, dO, BATCH, P, L->Cout, NULL, &nm, &e) != SDGP_OK) die("prune", &e);
                if (r >= 0) t[lay][r] = sdgp_now_s() - t0;
            }
            for (int lay = 0; lay < 2; lay++) {
                if (sdgp_sparse_bwd_set_output_layout(plan, lay ? SDGP_LAYOUT_NCHW : SDGP_LAYOUT_NHWC, &e) != SDGP_OK) die("layout", &e);
                t0 = sdgp_now_s();
                if (sdgp_sparse_bwd_data(plan, dD, &nm, &e) != SDGP_OK) die("bwd", &e);
                if (r >= 0) t[2 + lay][r] = sdgp_now_s() - t0;
            }
            for (int k = 0; k < 4; k++) {
                const int on_dO = k < 2;
                t0 = sdgp_now_s();
                if (on_dO)
                    transpose_all(k % 2 ? NULL : tr, dO2, dO, BATCH, L->Cout, P, 1);
                else
                    transpose_all(k % 2 ? NULL : tr, dD2, dD, BATCH, L->Cin, HW, 0);
                if (r >= 0) t[4 + k][r] = sdgp_now_s() - t0;
            }
        }
        double med[8];
        for (int k = 0; k < 8; k++) med[k] = best(t[k], reps);
        const double gbO = (double)nO * 4e-9, gbD = (double)nD * 4e-9;
        printf("%-17s %4d %4d %3d | %7.3f %7.3f %5.2f | %7.3f %7.3f %5.2f | %6.1f %6.1f %6.2f | %6.1f %6.1f %6.2f\n", L->name,
               L->Cin, L->Cout, g.Ho, 1e3 * med[0], 1e3 * med[1], med[1] / med[0], 1e3 * med[2], 1e3 * med[3], med[3] / med[2],
               gbO / med[4], gbO / med[5], med[4] / med[5], gbD / med[6], gbD / med[7], med[6] / med[7]);
        for (int k = 0; k < 4; k++) tot[L->name[1] == '1'][k] += L->count * med[k];
        sdgp_sparse_bwd_destroy(plan);
        sdgp_nm_free(&nm);
        free(dO);
        free(dO2);
        free(dD);
        free(dD2);
        free(w);
    }
    for (int mi = 0; mi < 2; mi++)
        printf("%-31s | %7.3f %7.3f %5.2f | %7.3f %7.3f %5.2f   (per step: shapes x count)\n", mi ? "total ResNet-18" : "total ResNet-9",
               1e3 * tot[mi][0], 1e3 * tot[mi][1], tot[mi][1] / tot[mi][0], 1e3 * tot[mi][2], 1e3 * tot[mi][3], tot[mi][3] / tot[mi][2]);
    return 0;
}
