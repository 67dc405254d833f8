/* The sparse-weight backward-data product (sdgp_sparse_wdata_*) against oneDNN's dense backward-data,
 * direct and Winograd, per conv layer of `sdgp bench conv`'s tables (ResNet-9 w=1 and w=0.25,
 * ResNet-18): issue 16's second product, dL/dX for block-masked weights. For each layer and weight form
 * (n:m, output channels per mask, Winograd tile):
 *   direct, wino   oneDNN's backward-data (wino: only where its backward-data pass runs Winograd)
 *   err            the worst relative L2 error of the forms' dx against oneDNN's direct backward-data on
 *                  the same weights (each above 1e-4 is also warned about on stderr)
 *   ms             the sparse kernel on weights of that form (SR-STE projection of random weights)
 *   pack           packing those weights (once per step in training: W~ changes every step)
 *   ratio          best dense / (sparse + pack): > 1 means the sparse backward-data is faster
 * "W2" / "W4" forms run F(2x2,3x3) / F(4x4,3x3); "W4 4:4" keeps every channel, so against oneDNN's
 * Winograd F(4x4) it shows our transforms' and GEMM's efficiency. The kernel has only the Winograd
 * algorithm: layers that are not 3x3 stride 1 (sdgp_sparse_wdata_supports) print "-" in the sparse
 * columns and stay out of the totals, which sum best dense and sparse + pack over the supported
 * layers only (times count, the layer's occurrences in the model); "(run x.xx)" there is the ratio
 * without packing. Times are the best of interleaved repetitions, so drift hits every variant alike.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_weight_data && build/sdgp_nm_weight_data [models] [reps] [threads] [batch]
 * models: a comma list of w1, w0.25, r18 (default w1,w0.25), reps default 9, threads default 2, batch
 * default each model's own (w1 64, w0.25 128; 512 is the training batch).
 * With 2 threads on 2 vCPUs, any other busy process makes the times meaningless: measure quietly. */
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "cli/bench_shapes.h"
#include "core/clock.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/sparse.h"

typedef struct {
    const char *name;
    int n, m, block, wtile; /* wtile: Winograd F(wtile x wtile) */
} form;

static const form FORMS[] = {{"W2 2:4 b32", 2, 4, 32, 2}, {"W4 4:4 b32", 4, 4, 32, 4}, {"W4 2:4 b32", 2, 4, 32, 4},
                             {"W4 2:4 b16", 2, 4, 16, 4}, {"W4 1:4 b32", 1, 4, 32, 4}, {"W4 4:32 b32", 4, 32, 32, 4}};
#define NFORMS (int)(sizeof FORMS / sizeof *FORMS)

/* Per model: best dense (all layers and the supported ones), sparse run and pack over the supported ones. */
typedef struct {
    char model[32];
    double dense_all, dense_sup, run[NFORMS], pack[NFORMS];
    int nsup;
    char skipped[256];
} totals;

static void print_totals(const totals *t) {
    if (!t->model[0]) return;
    printf("%-14s %17.3f %7s", "total", t->dense_sup, "");
    for (int f = 0; f < NFORMS; f++) {
        if (!t->nsup) {
            printf(" | %-12s %7s %6s %6s", "", "-", "-", "-");
            continue;
        }
        const double sp = t->run[f] + t->pack[f];
        char label[32];
        snprintf(label, sizeof label, "(run %5.2fx)", t->dense_sup / t->run[f]);
        printf(" | %-12s %7.3f %6.3f %5.2fx", label, t->run[f], t->pack[f], t->dense_sup / sp);
    }
    printf("\n# %s: %d supported layer(s); best dense over all layers %.3f ms; skipped (not 3x3 stride 1): %s\n",
           t->model, t->nsup, t->dense_all, t->skipped[0] ? t->skipped : "none");
}

int main(int argc, char **argv) {
    bench_prog = "nm_weight_data";
    bench_layer layers[64];
    int reps, threads, nl = bench_layers_from_args(argc, argv, "nm_weight_data", layers, 64, &reps, &threads);
    if (nl < 0) return 2;
    omp_set_num_threads(threads);
    printf("# backward-data ms, best of %d, %d threads, isa %s; ratio = best dense / (sparse + pack); err = worst rel L2 "
           "of the forms against oneDNN direct\n",
           reps, threads, sdgp_isa_name(sdgp_isa_best()));
    printf("%-14s %8s %8s %7s", "layer", "direct", "wino", "err");
    for (int f = 0; f < NFORMS; f++) printf(" | %-12s %7s %6s %6s", FORMS[f].name, "ms", "pack", "ratio");
    printf("\n");
    totals tot;
    memset(&tot, 0, sizeof tot);
    const char *sparse_isa = NULL;
    for (int li = 0; li < nl; li++) {
        const bench_layer *l = &layers[li];
        if (l->groups > 1) continue;
        char model[32];
        snprintf(model, sizeof model, "%.*s", (int)strcspn(l->name, "/"), l->name);
        if (strcmp(model, tot.model)) {
            print_totals(&tot);
            memset(&tot, 0, sizeof tot);
            snprintf(tot.model, sizeof tot.model, "%s", model);
        }
        sdgp_conv_geom g;
        sdgp_error e;
        BENCH_CHECK(sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e), l->name,
              "geometry");
        const int sup = sdgp_sparse_wdata_supports(&g);
        size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)g.B * g.Ho * g.Wo * g.Cout,
               nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *dy = bench_xmalloc(ny * 4), *w0 = bench_xmalloc(nw * 4), *dx = bench_xmalloc(nx * 4), *ref = bench_xmalloc(nx * 4);
        float *w[NFORMS] = {0};
        bench_fill(dy, ny, 1 + li);
        bench_fill(w0, nw, 100 + li);
        /* oneDNN: every pass direct; and backward-data by Winograd where oneDNN has it (the other passes direct) */
        sdgp_conv *direct, *wino;
        bench_onednn_baselines(&g, threads, SDGP_CONV_BACKWARD_DATA, l->name, &direct, &wino);
        sdgp_sparse_wdata *sp[NFORMS] = {0};
        double worst = 0;
        for (int f = 0; sup && f < NFORMS; f++) {
            w[f] = bench_xmalloc(nw * 4);
            sdgp_weights_project(w[f], w0, g.Cout, g.Cin, g.kh * g.kw, SDGP_WEIGHTS_SRSTE,
                                 FORMS[f].block == 32 ? SDGP_WGROUP_BLOCK32 : SDGP_WGROUP_BLOCK16, FORMS[f].n, FORMS[f].m,
                                 1.0f);
            BENCH_CHECK(sdgp_sparse_wdata_create(&sp[f], &g, FORMS[f].n, FORMS[f].m, FORMS[f].block, FORMS[f].wtile,
                                           SDGP_ISA_AUTO, threads, &e),
                  l->name, FORMS[f].name);
            if (!sparse_isa) sparse_isa = sdgp_isa_name(sdgp_sparse_wdata_isa(sp[f]));
            BENCH_CHECK(sdgp_sparse_wdata_pack(sp[f], w[f], &e), l->name, FORMS[f].name);
            /* correctness: against oneDNN's direct backward-data on the same weights */
            BENCH_CHECK(sdgp_sparse_wdata_run(sp[f], dx, dy, &e), l->name, FORMS[f].name);
            BENCH_CHECK(sdgp_conv_backward_data(direct, ref, dy, w[f], &e), l->name, "oneDNN direct");
            const double err = bench_rel_l2(dx, ref, nx);
            if (!(err <= 1e-4))
                fprintf(stderr, "nm_weight_data: %s %s: relative L2 error %.3g against oneDNN direct\n", l->name,
                        FORMS[f].name, err);
            if (isnan(err) || err > worst) worst = err;
        }
        double t_dir = INFINITY, t_win = INFINITY, t_sp[NFORMS], t_pk[NFORMS];
        for (int f = 0; f < NFORMS; f++) t_sp[f] = t_pk[f] = INFINITY;
        for (int r = 0; r < reps; r++) {
            double t0 = sdgp_now_s();
            BENCH_CHECK(sdgp_conv_backward_data(direct, dx, dy, w0, &e), l->name, "oneDNN direct");
            double t1 = sdgp_now_s();
            t_dir = fmin(t_dir, t1 - t0);
            if (wino) {
                t0 = sdgp_now_s();
                BENCH_CHECK(sdgp_conv_backward_data(wino, dx, dy, w0, &e), l->name, "oneDNN Winograd");
                t_win = fmin(t_win, sdgp_now_s() - t0);
            }
            for (int f = 0; sup && f < NFORMS; f++) {
                t0 = sdgp_now_s();
                BENCH_CHECK(sdgp_sparse_wdata_pack(sp[f], w[f], &e), l->name, FORMS[f].name);
                t1 = sdgp_now_s();
                BENCH_CHECK(sdgp_sparse_wdata_run(sp[f], dx, dy, &e), l->name, FORMS[f].name);
                double t2 = sdgp_now_s();
                t_pk[f] = fmin(t_pk[f], t1 - t0);
                t_sp[f] = fmin(t_sp[f], t2 - t1);
            }
        }
        const double best = fmin(t_dir, t_win);
        tot.dense_all += 1e3 * best * l->count;
        char wbuf[16] = "-", ebuf[16] = "-";
        if (wino) snprintf(wbuf, sizeof wbuf, "%.3f", 1e3 * t_win);
        if (sup) snprintf(ebuf, sizeof ebuf, "%.1e", worst);
        printf("%-14s %8.3f %8s %7s", l->name, 1e3 * t_dir, wbuf, ebuf);
        if (sup) {
            tot.nsup++;
            tot.dense_sup += 1e3 * best * l->count;
        } else {
            const size_t used = strlen(tot.skipped);
            snprintf(tot.skipped + used, sizeof tot.skipped - used, "%s%s", used ? ", " : "", l->name);
        }
        for (int f = 0; f < NFORMS; f++) {
            if (!sup) {
                printf(" | %-12s %7s %6s %6s", "", "-", "-", "-");
                continue;
            }
            tot.run[f] += 1e3 * t_sp[f] * l->count;
            tot.pack[f] += 1e3 * t_pk[f] * l->count;
            printf(" | %-12s %7.3f %6.3f %5.2fx", "", 1e3 * t_sp[f], 1e3 * t_pk[f], best / (t_sp[f] + t_pk[f]));
        }
        printf("\n");
        fflush(stdout);
        for (int f = 0; f < NFORMS; f++) sdgp_sparse_wdata_destroy(sp[f]), free(w[f]);
        sdgp_conv_destroy(direct);
        sdgp_conv_destroy(wino);
        free(dy), free(w0), free(dx), free(ref);
    }
    print_totals(&tot);
    if (sparse_isa) printf("# sparse kernel isa: %s\n", sparse_isa);
    return 0;
}
