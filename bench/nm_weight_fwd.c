/* The sparse-weight forward (sdgp_sparse_fwd_*) against oneDNN's dense forward, direct and
 * Winograd, per conv layer of `sdgp bench conv`'s tables (ResNet-9 w=1 and w=0.25, ResNet-18):
 * issue 16's first product. For each layer and weight form (n:m, output channels per mask):
 *   direct, wino   oneDNN's forward (wino: only where its forward pass runs Winograd)
 *   sparse         the sparse kernel on weights of that form (SR-STE projection of random weights)
 *   pack           packing those weights (once per step in training: W~ changes every step)
 *   ratio          best dense / (sparse + pack): > 1 means the sparse forward is faster
 * plus "ours 4:4", the same kernel keeping every channel: how our direct loop compares with
 * oneDNN's direct one. "W2" / "W4" forms run our Winograd-domain algorithm F(2x2,3x3) / F(4x4,3x3)
 * (sdgp_sparse_fwd_create_wino; direct where the layer is not 3x3 stride 1); "W4 4:4" against
 * oneDNN's Winograd F(4x4) shows our transforms' and GEMM's efficiency. Outputs are checked against oneDNN's direct forward on the same weights.
 * Times are the best of interleaved repetitions, so drift hits every variant alike.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_weight_fwd && build/sdgp_nm_weight_fwd [models] [reps] [threads] [batch]
 * models: a comma list of w1, w0.25, r18 (default w1,w0.25), reps default 9, threads default 2, batch
 * default each model's own (w1 64, w0.25 128; 512 is the training batch).
 * With 2 threads on 2 vCPUs, any other busy process makes the times meaningless: measure quietly. */
#include <math.h>
#include <omp.h>
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
    int n, m, block, wtile; /* wtile: Winograd F(wtile x wtile) where the layer has it (else direct), 0 direct */
} form;

static const form FORMS[] = {{"ours 4:4", 4, 4, 32, 0},   {"2:4 b32", 2, 4, 32, 0},    {"4:32 b32", 4, 32, 32, 0},
                             {"W2 4:4", 4, 4, 32, 2},     {"W2 2:4 b32", 2, 4, 32, 2}, {"W4 4:4", 4, 4, 32, 4},
                             {"W4 2:4 b32", 2, 4, 32, 4}, {"W4 2:4 b16", 2, 4, 16, 4}, {"W4 4:32 b32", 4, 32, 32, 4}};
#define NFORMS (int)(sizeof FORMS / sizeof *FORMS)

static void die(const char *what, const sdgp_error *e) {
    fprintf(stderr, "nm_weight_fwd: %s: %s\n", what, e->msg);
    exit(1);
}

int main(int argc, char **argv) {
    bench_layer layers[64];
    int reps, threads, nl = bench_layers_from_args(argc, argv, "nm_weight_fwd", layers, 64, &reps, &threads);
    if (nl < 0) return 2;
    omp_set_num_threads(threads);
    printf("# forward ms, best of %d, %d threads, isa %s; ratio = best dense / (sparse + pack)\n", reps, threads,
           sdgp_isa_name(sdgp_isa_best()));
    printf("%-14s %8s %8s", "layer", "direct", "wino");
    for (int f = 0; f < NFORMS; f++) printf(" | %-11s %7s %6s %6s", FORMS[f].name, "ms", "pack", "ratio");
    printf("\n");
    double tot_best = 0, tot_sp[NFORMS] = {0};
    char cur_model[32] = "";
    for (int li = 0; li < nl; li++) {
        const bench_layer *l = &layers[li];
        if (l->groups > 1) continue;
        char model[32];
        snprintf(model, sizeof model, "%.*s", (int)strcspn(l->name, "/"), l->name);
        if (strcmp(model, cur_model) && cur_model[0]) {
            printf("%-14s %17.3f", "total", tot_best);
            for (int f = 0; f < NFORMS; f++) printf(" | %-11s %7.3f %6s %5.2fx", "", tot_sp[f], "", tot_best / tot_sp[f]);
            printf("\n");
            tot_best = 0;
            memset(tot_sp, 0, sizeof tot_sp);
        }
        snprintf(cur_model, sizeof cur_model, "%s", model);
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e) != SDGP_OK)
            die(l->name, &e);
        size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)g.B * g.Ho * g.Wo * g.Cout,
               nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *x = malloc(nx * 4), *w0 = malloc(nw * 4), *w[NFORMS], *y = malloc(ny * 4), *ref = malloc(ny * 4);
        bench_fill(x, nx, 1 + li);
        bench_fill(w0, nw, 100 + li);
        sdgp_conv *direct = NULL, *wino = NULL;
        const sdgp_conv_options od = {SDGP_CONV_DIRECT, 0}, ow = {SDGP_CONV_WINOGRAD, 0};
        if (sdgp_conv_create_opts(&direct, &g, 0, threads, &od, &e) != SDGP_OK) die("oneDNN direct", &e);
        if (sdgp_conv_create_opts(&wino, &g, 0, threads, &ow, &e) != SDGP_OK ||
            sdgp_conv_get_plan(wino, SDGP_CONV_FORWARD).algo != SDGP_CONV_WINOGRAD) {
            sdgp_conv_destroy(wino);
            wino = NULL;
        }
        sdgp_sparse_fwd *sp[NFORMS];
        for (int f = 0; f < NFORMS; f++) {
            w[f] = malloc(nw * 4);
            sdgp_weights_project(w[f], w0, g.Cout, g.Cin, g.kh * g.kw, SDGP_WEIGHTS_SRSTE,
                                 FORMS[f].block == 32 ? SDGP_WGROUP_BLOCK32 : SDGP_WGROUP_BLOCK16, FORMS[f].n, FORMS[f].m, 1.0f);
            const int wt = sdgp_sparse_fwd_wino_supports(&g) ? FORMS[f].wtile : 0;
            if ((wt ? sdgp_sparse_fwd_create_wino(&sp[f], &g, FORMS[f].n, FORMS[f].m, FORMS[f].block, wt, SDGP_ISA_AUTO, threads, &e)
                    : sdgp_sparse_fwd_create(&sp[f], &g, FORMS[f].n, FORMS[f].m, FORMS[f].block, SDGP_ISA_AUTO, threads, &e)) !=
                    SDGP_OK ||
                sdgp_sparse_fwd_pack(sp[f], w[f], &e) != SDGP_OK)
                die(FORMS[f].name, &e);
            /* correctness: against oneDNN's direct forward on the same weights */
            sdgp_sparse_fwd_run(sp[f], y, x, &e);
            sdgp_conv_forward(direct, ref, x, w[f], NULL, &e);
            double err = bench_rel_l2(y, ref, ny);
            if (err > 3e-5) fprintf(stderr, "nm_weight_fwd: %s %s: relative L2 error %.3g against oneDNN\n", l->name, FORMS[f].name, err);
        }
        double t_dir = INFINITY, t_win = INFINITY, t_sp[NFORMS], t_pk[NFORMS];
        for (int f = 0; f < NFORMS; f++) t_sp[f] = t_pk[f] = INFINITY;
        for (int r = 0; r < reps; r++) {
            double t0 = sdgp_now_s();
            sdgp_conv_forward(direct, y, x, w0, NULL, &e);
            double t1 = sdgp_now_s();
            t_dir = fmin(t_dir, t1 - t0);
            if (wino) {
                t0 = sdgp_now_s();
                sdgp_conv_forward(wino, y, x, w0, NULL, &e);
                t_win = fmin(t_win, sdgp_now_s() - t0);
            }
            for (int f = 0; f < NFORMS; f++) {
                t0 = sdgp_now_s();
                sdgp_sparse_fwd_pack(sp[f], w[f], &e);
                t1 = sdgp_now_s();
                sdgp_sparse_fwd_run(sp[f], y, x, &e);
                double t2 = sdgp_now_s();
                t_pk[f] = fmin(t_pk[f], t1 - t0);
                t_sp[f] = fmin(t_sp[f], t2 - t1);
            }
        }
        double best = fmin(t_dir, t_win);
        tot_best += 1e3 * best * l->count;
        char wbuf[16] = "-";
        if (wino) snprintf(wbuf, sizeof wbuf, "%.3f", 1e3 * t_win);
        printf("%-14s %8.3f %8s", l->name, 1e3 * t_dir, wbuf);
        for (int f = 0; f < NFORMS; f++) {
            tot_sp[f] += 1e3 * (t_sp[f] + t_pk[f]) * l->count;
            printf(" | %-11s %7.3f %6.3f %5.2fx", "", 1e3 * t_sp[f], 1e3 * t_pk[f], best / (t_sp[f] + t_pk[f]));
        }
        printf("\n");
        fflush(stdout);
        for (int f = 0; f < NFORMS; f++) sdgp_sparse_fwd_destroy(sp[f]), free(w[f]);
        sdgp_conv_destroy(direct);
        sdgp_conv_destroy(wino);
        free(x), free(w0), free(y), free(ref);
    }
    printf("%-14s %17.3f", "total", tot_best);
    for (int f = 0; f < NFORMS; f++) printf(" | %-11s %7.3f %6s %5.2fx", "", tot_sp[f], "", tot_best / tot_sp[f]);
    printf("\n");
    return 0;
}
