/* The N:M sparse weight gradient (sdgp_sparse_wgrad_*) against oneDNN's dense backward-weights, direct and
 * Winograd, per conv layer of `sdgp bench conv`'s tables (ResNet-9 w=1 and w=0.25, ResNet-18): dW = X^T x dY
 * with dY = dL/dO pruned along positions by MVUE (--prune-wgrad mvue), n of every m consecutive rows kept per
 * output channel. For each layer:
 *   direct, wino   the dense backward-weights on the dense pruned dY: oneDNN's direct, and the conv layer's
 *                  WINOGRAD (oneDNN's, else sdgp's src/kernels/wgwino.c; SDGP_WINOGRAD chooses; - where
 *                  none runs the layer); best dense = the faster of the two
 *   err            the relative L2 error of the 2:4 result against oneDNN direct on the same pruned tensor
 *                  (above 1e-4 also warned about on stderr)
 * and for each form n:m (MVUE on the row axis; 4:4 keeps every row, so against oneDNN it shows our kernel's
 * efficiency on the same work, and its pruning is a copy):
 *   ms             sdgp_sparse_wgrad_run on the compressed dY
 *   prune          MVUE pruning of dY into the compressed row form (what the sparse path pays each step)
 *   dprune         the same pruning into the dense output only (what the dense path pays each step)
 *   ratio          best dense / ms: > 1 means the sparse weight gradient is faster
 *   +prune         (best dense + dprune) / (ms + prune): what a training step with --prune-wgrad mvue gains
 * Totals per model sum every included layer times count (the layer's occurrences in the model). Grouped
 * layers (the kernel takes groups = 1 only) and layers whose B*Ho*Wo is not a multiple of 8 (every form's m
 * must divide it; only with an odd batch) are skipped and named. Times are the best of interleaved
 * repetitions after one untimed round, so drift hits every variant alike.
 * Build and run (not part of `all`):
 *   cmake --build build --target sdgp_nm_wgrad && build/sdgp_nm_wgrad [models] [reps] [threads] [batch]
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
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

typedef struct {
    const char *name;
    int n, m;
} form;

/* FORMS[0] is the one checked against oneDNN */
static const form FORMS[] = {{"2:4", 2, 4}, {"1:4", 1, 4}, {"4:8", 4, 8}, {"4:4", 4, 4}};
#define NFORMS (int)(sizeof FORMS / sizeof *FORMS)
#define ROWS_MULTIPLE 8 /* the lcm of the forms' m */

/* Per model: best dense over the included layers; per form the sparse run and both prunes. */
typedef struct {
    char model[32];
    double dense, run[NFORMS], prune[NFORMS], dprune[NFORMS];
    int nlayers;
    char skipped[256];
} totals;

static void print_totals(const totals *t) {
    if (!t->model[0]) return;
    printf("%-14s %17.3f %7s", "total", t->dense, "");
    for (int f = 0; f < NFORMS; f++) {
        if (!t->nlayers) {
            printf(" | %7s %6s %6s %6s %6s", "-", "-", "-", "-", "-");
            continue;
        }
        printf(" | %7.3f %6.3f %6.3f %5.2fx %5.2fx", t->run[f], t->prune[f], t->dprune[f], t->dense / t->run[f],
               (t->dense + t->dprune[f]) / (t->run[f] + t->prune[f]));
    }
    printf("\n# %s: %d layer(s); skipped: %s\n", t->model, t->nlayers, t->skipped[0] ? t->skipped : "none");
}

static void add_skipped(totals *t, const char *name, const char *why) {
    const size_t used = strlen(t->skipped);
    snprintf(t->skipped + used, sizeof t->skipped - used, "%s%s (%s)", used ? ", " : "", name, why);
}

int main(int argc, char **argv) {
    bench_prog = "nm_wgrad";
    bench_layer layers[64];
    int reps, threads, nl = bench_layers_from_args(argc, argv, "nm_wgrad", layers, 64, &reps, &threads);
    if (nl < 0) return 2;
    omp_set_num_threads(threads);
    printf("# backward-weights ms, best of %d, %d threads, isa %s; dY pruned by MVUE along rows; ratio = best dense / "
           "sparse run; +prune = (best dense + dprune) / (sparse run + prune); err = rel L2 of 2:4 against oneDNN direct\n",
           reps, threads, sdgp_isa_name(sdgp_isa_best()));
    printf("%-14s %8s %8s %7s", "layer", "direct", "wino", "err");
    for (int f = 0; f < NFORMS; f++) printf(" | %-3s %3s %6s %6s %6s %6s", FORMS[f].name, "ms", "prune", "dprune", "ratio", "+prune");
    printf("\n");
    totals tot;
    memset(&tot, 0, sizeof tot);
    const char *sparse_isa = NULL;
    for (int li = 0; li < nl; li++) {
        const bench_layer *l = &layers[li];
        char model[32];
        snprintf(model, sizeof model, "%.*s", (int)strcspn(l->name, "/"), l->name);
        if (strcmp(model, tot.model)) {
            print_totals(&tot);
            memset(&tot, 0, sizeof tot);
            snprintf(tot.model, sizeof tot.model, "%s", model);
        }
        if (l->groups > 1) {
            add_skipped(&tot, l->name, "grouped");
            continue;
        }
        sdgp_conv_geom g;
        sdgp_error e;
        BENCH_CHECK(sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e), l->name,
              "geometry");
        const int64_t P = (int64_t)g.Ho * g.Wo, rows = (int64_t)g.B * P;
        if (rows % ROWS_MULTIPLE) {
            add_skipped(&tot, l->name, "B*Ho*Wo not a multiple of 8");
            continue;
        }
        const size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)rows * g.Cout, nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *x = bench_xmalloc(nx * 4), *dyd = bench_xmalloc(ny * 4), *dyp = bench_xmalloc(ny * 4), *dyq = bench_xmalloc(ny * 4),
              *dw = bench_xmalloc(nw * 4), *ref = bench_xmalloc(nw * 4);
        bench_fill(x, nx, 1 + li);
        bench_fill(dyd, ny, 100 + li);
        /* oneDNN: every pass direct; and backward-weights by Winograd where oneDNN has it (the other passes direct) */
        sdgp_conv *direct, *wino;
        bench_onednn_baselines(&g, threads, SDGP_CONV_BACKWARD_WEIGHTS, l->name, &direct, &wino);
        /* the forms: their plans, compressed tensors and pruning configs */
        sdgp_sparse_wgrad *sp[NFORMS] = {0};
        sdgp_nm_tensor nm[NFORMS];
        sdgp_prune_cfg cfg[NFORMS];
        memset(nm, 0, sizeof nm);
        for (int f = 0; f < NFORMS; f++) {
            cfg[f] = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, FORMS[f].n, FORMS[f].m);
            cfg[f].axis = SDGP_AXIS_ROW;
            cfg[f].threads = threads;
            cfg[f].seed = 7, cfg[f].step = 1, cfg[f].layer = (uint32_t)li;
            BENCH_CHECK(sdgp_nm_alloc(&nm[f], SDGP_AXIS_ROW, FORMS[f].n, FORMS[f].m, rows, g.Cout, &e), l->name, FORMS[f].name);
            BENCH_CHECK(sdgp_sparse_wgrad_create(&sp[f], &g, FORMS[f].n, FORMS[f].m, SDGP_ISA_AUTO, threads, &e), l->name,
                  FORMS[f].name);
            if (!sparse_isa) sparse_isa = sdgp_isa_name(sdgp_sparse_wgrad_isa(sp[f]));
        }
        /* correctness: 2:4 against oneDNN's direct backward-weights on the same dense pruned tensor, which the
         * dense timings below use as their dY */
        BENCH_CHECK(sdgp_prune(&cfg[0], dyd, g.B, P, g.Cout, dyp, &nm[0], &e), l->name, "prune 2:4");
        BENCH_CHECK(sdgp_sparse_wgrad_run(sp[0], dw, x, &nm[0], &e), l->name, FORMS[0].name);
        BENCH_CHECK(sdgp_conv_backward_weights(direct, ref, NULL, x, dyp, &e), l->name, "oneDNN direct");
        const double err = bench_rel_l2(dw, ref, nw);
        if (!(err <= 1e-4))
            fprintf(stderr, "nm_wgrad: %s %s: relative L2 error %.3g against oneDNN direct\n", l->name, FORMS[0].name, err);
        double t_dir = INFINITY, t_win = INFINITY, t_sp[NFORMS], t_pr[NFORMS], t_dp[NFORMS];
        for (int f = 0; f < NFORMS; f++) t_sp[f] = t_pr[f] = t_dp[f] = INFINITY;
        /* r = -1: an untimed round first (first touch of the output buffers, oneDNN's first calls) */
        for (int r = -1; r < reps; r++) {
            const double keep = r < 0 ? INFINITY : 0; /* min(t, dt + keep): drops the warm-up round */
            double t0 = sdgp_now_s();
            BENCH_CHECK(sdgp_conv_backward_weights(direct, dw, NULL, x, dyp, &e), l->name, "oneDNN direct");
            t_dir = fmin(t_dir, sdgp_now_s() - t0 + keep);
            if (wino) {
                t0 = sdgp_now_s();
                BENCH_CHECK(sdgp_conv_backward_weights(wino, dw, NULL, x, dyp, &e), l->name, "oneDNN Winograd");
                t_win = fmin(t_win, sdgp_now_s() - t0 + keep);
            }
            for (int f = 0; f < NFORMS; f++) {
                t0 = sdgp_now_s();
                BENCH_CHECK(sdgp_prune(&cfg[f], dyd, g.B, P, g.Cout, NULL, &nm[f], &e), l->name, FORMS[f].name);
                const double t1 = sdgp_now_s();
                BENCH_CHECK(sdgp_prune(&cfg[f], dyd, g.B, P, g.Cout, dyq, NULL, &e), l->name, FORMS[f].name);
                const double t2 = sdgp_now_s();
                BENCH_CHECK(sdgp_sparse_wgrad_run(sp[f], dw, x, &nm[f], &e), l->name, FORMS[f].name);
                const double t3 = sdgp_now_s();
                t_pr[f] = fmin(t_pr[f], t1 - t0 + keep);
                t_dp[f] = fmin(t_dp[f], t2 - t1 + keep);
                t_sp[f] = fmin(t_sp[f], t3 - t2 + keep);
            }
        }
        const double best = fmin(t_dir, t_win);
        tot.nlayers++;
        tot.dense += 1e3 * best * l->count;
        char wbuf[16] = "-";
        if (wino) snprintf(wbuf, sizeof wbuf, "%.3f", 1e3 * t_win);
        printf("%-14s %8.3f %8s %7.1e", l->name, 1e3 * t_dir, wbuf, err);
        for (int f = 0; f < NFORMS; f++) {
            tot.run[f] += 1e3 * t_sp[f] * l->count;
            tot.prune[f] += 1e3 * t_pr[f] * l->count;
            tot.dprune[f] += 1e3 * t_dp[f] * l->count;
            printf(" | %7.3f %6.3f %6.3f %5.2fx %5.2fx", 1e3 * t_sp[f], 1e3 * t_pr[f], 1e3 * t_dp[f], best / t_sp[f],
                   (best + t_dp[f]) / (t_sp[f] + t_pr[f]));
        }
        printf("\n");
        fflush(stdout);
        for (int f = 0; f < NFORMS; f++) sdgp_sparse_wgrad_destroy(sp[f]), sdgp_nm_free(&nm[f]);
        sdgp_conv_destroy(direct);
        sdgp_conv_destroy(wino);
        free(x), free(dyd), free(dyp), free(dyq), free(dw), free(ref);
    }
    print_totals(&tot);
    if (sparse_isa) printf("# sparse kernel isa: %s\n", sparse_isa);
    return 0;
}
