/* One N:M product on two or three ISA paths of the same library, interleaved in one process (issue
 * 54: the AVX-512 micro-kernels against the AVX2 ones that AVX-512 hosts ran before). This host's
 * speed drifts between processes by more than some kernel changes gain, so the paths alternate
 * round by round (the order reversed every round), on the same operands, and the medians compare.
 * The outputs of every path must be bitwise the same (the contracts' promise); a mismatch is fatal.
 *
 *   build/sdgp_nm_isa_ab PRODUCT [models] [reps] [threads] [batch]
 *
 * PRODUCT:
 *   cout   the cout-form sparse-weight forward (sdgp_sparse_fwd_create_cout, its transposes
 *          included): SR-STE weights projected to n:m along output channels; paths avx512, avx2
 *   wgrad  the weight gradient (sdgp_sparse_wgrad_*, the zero-padded copy of X included): dY pruned
 *          by MVUE along rows; paths avx512 (the rows form), avx2 (rows), avx512-permute (the permute
 *          form, what AVX-512 ran before the rows form had an AVX-512 kernel)
 * models: a comma list of w1, w0.25, r18, rx (bench_shapes.h) and r50: ResNet-50's distinct convs
 * at 224x224 (torchvision's v1.5 bottlenecks, the stride on the 3x3), counts = occurrences; default
 * w1,r50. reps (default 7) rounds, threads (default 2), batch (default: each model's, r50 32).
 * Per layer and n:m (2:4, 1:4): median ms per path, the ratio avx2 / avx512 (and permute / avx512),
 * the useful GFLOP/s of avx512 (2 B Ho Wo Cout Cin k^2 n/m) and its fraction of the FMA ceiling
 * measured at start (spconv_fma_ceiling, AVX-512, the same threads). Needs AVX-512 and AVX2. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "core/clock.h"
#include "kernels/spconv_internal.h" /* spconv_fma_ceiling */
#include "kernels/spwgrad_internal.h" /* spwgrad_create_permute_form */
#include "sdgp/nn.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

#define MAXP 3

/* ResNet-50 at 224x224: the distinct conv shapes after the stem, (H, Cin, Cout, k, stride) at the
 * conv's input, with how many times each occurs (blocks per stage 3, 4, 6, 3). */
static int resnet50_layers(bench_layer *out, int B) {
    static const struct { const char *name; int hw, in, out, k, stride, count; } spec[] = {
        {"56:64-64", 56, 64, 64, 1, 1, 1},        {"56:64-64k3", 56, 64, 64, 3, 1, 3},
        {"56:64-256", 56, 64, 256, 1, 1, 4},      {"56:256-64", 56, 256, 64, 1, 1, 2},
        {"56:256-128", 56, 256, 128, 1, 1, 1},    {"56:128-128k3s2", 56, 128, 128, 3, 2, 1},
        {"56:256-512s2", 56, 256, 512, 1, 2, 1},  {"28:128-512", 28, 128, 512, 1, 1, 4},
        {"28:512-128", 28, 512, 128, 1, 1, 3},    {"28:128-128k3", 28, 128, 128, 3, 1, 3},
        {"28:512-256", 28, 512, 256, 1, 1, 1},    {"28:256-256k3s2", 28, 256, 256, 3, 2, 1},
        {"28:512-1024s2", 28, 512, 1024, 1, 2, 1}, {"14:256-1024", 14, 256, 1024, 1, 1, 6},
        {"14:1024-256", 14, 1024, 256, 1, 1, 5},  {"14:256-256k3", 14, 256, 256, 3, 1, 5},
        {"14:1024-512", 14, 1024, 512, 1, 1, 1},  {"14:512-512k3s2", 14, 512, 512, 3, 2, 1},
        {"14:1024-2048s2", 14, 1024, 2048, 1, 2, 1}, {"7:512-2048", 7, 512, 2048, 1, 1, 3},
        {"7:2048-512", 7, 2048, 512, 1, 1, 2},    {"7:512-512k3", 7, 512, 512, 3, 1, 2},
    };
    const int n = (int)(sizeof spec / sizeof spec[0]);
    for (int i = 0; i < n; i++) {
        out[i] = (bench_layer){.B = B, .H = spec[i].hw, .W = spec[i].hw, .Cin = spec[i].in, .Cout = spec[i].out,
                               .k = spec[i].k, .stride = spec[i].stride, .pad = spec[i].k / 2, .count = spec[i].count};
        snprintf(out[i].name, sizeof out[i].name, "r50/%s", spec[i].name);
    }
    return n;
}

typedef struct {
    const char *name;
    sdgp_isa isa;
    int permute;
} path;

static const path COUT_PATHS[] = {{"avx512", SDGP_ISA_AVX512, 0}, {"avx2", SDGP_ISA_AVX2, 0}};
static const path WGRAD_PATHS[] = {{"avx512", SDGP_ISA_AVX512, 0}, {"avx2", SDGP_ISA_AVX2, 0}, {"avx512-perm", SDGP_ISA_AVX512, 1}};
static const int NMS[][2] = {{2, 4}, {1, 4}};

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

typedef struct {
    double ms[MAXP], flop; /* sums weighted by count */
} totals;

int main(int argc, char **argv) {
    bench_prog = "nm_isa_ab";
    if (argc < 2 || (strcmp(argv[1], "cout") && strcmp(argv[1], "wgrad")))
        return fprintf(stderr, "usage: %s cout|wgrad [models] [reps] [threads] [batch]\n", argv[0]), 2;
    const int wgrad = !strcmp(argv[1], "wgrad");
    const char *models = argc > 2 ? argv[2] : "w1,r50";
    const int reps = argc > 3 ? atoi(argv[3]) : 7, threads = argc > 4 ? atoi(argv[4]) : 2, batch = argc > 5 ? atoi(argv[5]) : 0;
    if (reps < 1 || threads < 1 || batch < 0) return fprintf(stderr, "%s: bad reps, threads or batch\n", argv[0]), 2;
    if (!sdgp_isa_supported(SDGP_ISA_AVX512)) return fprintf(stderr, "%s: needs AVX-512\n", argv[0]), 2;
    omp_set_num_threads(threads);
    const path *paths = wgrad ? WGRAD_PATHS : COUT_PATHS;
    const int np = wgrad ? 3 : 2;

    bench_layer layers[128];
    int nl = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", models);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int k = !strcmp(tok, "r50") ? resnet50_layers(layers + nl, batch ? batch : 32) : bench_model_layers(layers + nl, 128 - nl, tok);
        if (!k) return fprintf(stderr, "%s: unknown model '%s'\n", argv[0], tok), 2;
        for (int i = nl; i < nl + k && batch; i++) layers[i].B = batch;
        nl += k;
    }
    const double ceiling = spconv_fma_ceiling(SDGP_ISA_AVX512, threads, 0.3);
    printf("# %s, %d threads, medians of %d interleaved rounds; FMA ceiling (AVX-512) %.0f GFLOP/s at start\n",
           wgrad ? "weight gradient (MVUE rows)" : "cout-form sparse-weight forward", threads, reps, ceiling);
    printf("%-20s %4s %4s", "layer", "B", "n:m");
    for (int p = 0; p < np; p++) printf(" %11s", paths[p].name);
    printf(" %8s", "avx2/512");
    if (np > 2) printf(" %8s", "perm/512");
    printf(" %7s %6s\n", "GF/s", "ceil");

    totals tot[2][8];
    memset(tot, 0, sizeof tot);
    char names[8][32] = {""};
    int mi = -1;
    for (int li = 0; li < nl; li++) {
        const bench_layer *l = &layers[li];
        char model[32];
        snprintf(model, sizeof model, "%.*s", (int)strcspn(l->name, "/"), l->name);
        if (mi < 0 || (mi < 7 && strcmp(model, names[mi]))) mi++, snprintf(names[mi], sizeof names[mi], "%s", model);
        sdgp_conv_geom g;
        sdgp_error e;
        BENCH_CHECK(sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e), l->name,
                    "geometry");
        const int64_t P = (int64_t)g.Ho * g.Wo, rows = (int64_t)g.B * P;
        const size_t nx = (size_t)g.B * g.H * g.W * g.Cin, ny = (size_t)rows * g.Cout, nw = (size_t)g.Cout * g.Cin * g.kh * g.kw;
        float *x = bench_xmalloc(nx * 4), *w0 = bench_xmalloc(nw * 4), *w = bench_xmalloc(nw * 4), *dy = bench_xmalloc(ny * 4);
        float *out[MAXP];
        const size_t nout = wgrad ? nw : ny;
        for (int p = 0; p < np; p++) out[p] = bench_xmalloc(nout * 4);
        bench_fill(x, nx, 1 + li);
        bench_fill(w0, nw, 50 + li);
        bench_fill(dy, ny, 100 + li);
        for (int q = 0; q < (int)(sizeof NMS / sizeof NMS[0]); q++) {
            const int n = NMS[q][0], m = NMS[q][1];
            sdgp_sparse_fwd *fp[MAXP] = {0};
            sdgp_sparse_wgrad *wp[MAXP] = {0};
            sdgp_nm_tensor nm = {0};
            if (wgrad) {
                sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, n, m);
                cfg.axis = SDGP_AXIS_ROW, cfg.threads = threads, cfg.seed = 7, cfg.step = 1, cfg.layer = (uint32_t)li;
                BENCH_CHECK(sdgp_nm_alloc(&nm, SDGP_AXIS_ROW, n, m, rows, g.Cout, &e), l->name, "nm alloc");
                BENCH_CHECK(sdgp_prune(&cfg, dy, g.B, P, g.Cout, NULL, &nm, &e), l->name, "prune");
                for (int p = 0; p < np; p++)
                    BENCH_CHECK((paths[p].permute ? spwgrad_create_permute_form : sdgp_sparse_wgrad_create)(
                                    &wp[p], &g, n, m, paths[p].isa, threads, &e),
                                l->name, paths[p].name);
            } else {
                if (!sdgp_sparse_fwd_cout_supports(&g, n, m)) continue;
                sdgp_weights_project(w, w0, g.Cout, g.Cin, g.kh * g.kw, SDGP_WEIGHTS_SRSTE, SDGP_WGROUP_COUT, n, m, 1.0f);
                for (int p = 0; p < np; p++) {
                    BENCH_CHECK(sdgp_sparse_fwd_create_cout(&fp[p], &g, n, m, paths[p].isa, threads, &e), l->name, paths[p].name);
                    BENCH_CHECK(sdgp_sparse_fwd_pack(fp[p], w, &e), l->name, "pack");
                }
            }
            double t[MAXP][64];
            const int R = reps < 64 ? reps : 64;
            /* round -1: untimed (first touch of the workspaces), then the paths in turn, the order reversed each round */
            for (int r = -1; r < R; r++)
                for (int k = 0; k < np; k++) {
                    const int p = r % 2 ? np - 1 - k : k;
                    const double t0 = sdgp_now_s();
                    if (wgrad) BENCH_CHECK(sdgp_sparse_wgrad_run(wp[p], out[p], x, &nm, &e), l->name, paths[p].name);
                    else BENCH_CHECK(sdgp_sparse_fwd_run(fp[p], out[p], x, &e), l->name, paths[p].name);
                    if (r >= 0) t[p][r] = 1e3 * (sdgp_now_s() - t0);
                }
            for (int p = 1; p < np; p++)
                if (memcmp(out[0], out[p], nout * 4))
                    fprintf(stderr, "%s: %s %d:%d: %s and %s differ\n", argv[0], l->name, n, m, paths[0].name, paths[p].name), exit(1);
            double med[MAXP];
            for (int p = 0; p < np; p++) med[p] = median(t[p], R);
            const double flop = 2.0 * rows * g.Cout * g.Cin * g.kh * g.kw * n / m, gfs = flop / med[0] * 1e-6;
            printf("%-20s %4d %d:%d ", l->name, g.B, n, m);
            for (int p = 0; p < np; p++) printf(" %11.3f", med[p]);
            printf(" %7.2fx", med[1] / med[0]);
            if (np > 2) printf(" %7.2fx", med[2] / med[0]);
            printf(" %7.0f %6.2f\n", gfs, gfs / ceiling);
            fflush(stdout);
            totals *tt = &tot[q][mi];
            for (int p = 0; p < np; p++) tt->ms[p] += med[p] * l->count;
            tt->flop += flop * l->count;
            for (int p = 0; p < np; p++) sdgp_sparse_fwd_destroy(fp[p]), sdgp_sparse_wgrad_destroy(wp[p]);
            sdgp_nm_free(&nm);
        }
        free(x), free(w0), free(w), free(dy);
        for (int p = 0; p < np; p++) free(out[p]);
    }
    printf("# totals over each model's layers (weighted by occurrences), sums of medians:\n");
    for (int mm = 0; mm <= mi && mm < 8; mm++)
        for (int q = 0; q < (int)(sizeof NMS / sizeof NMS[0]); q++) {
            const totals *tt = &tot[q][mm];
            if (tt->flop == 0) continue;
            printf("total %-8s %d:%d ", names[mm], NMS[q][0], NMS[q][1]);
            for (int p = 0; p < np; p++) printf(" %s %.2f ms", paths[p].name, tt->ms[p]);
            printf("  avx2/512 %.2fx", tt->ms[1] / tt->ms[0]);
            if (np > 2) printf("  perm/512 %.2fx", tt->ms[2] / tt->ms[0]);
            printf("  %.0f GF/s %.2f of ceiling\n", tt->flop / tt->ms[0] * 1e-6, tt->flop / tt->ms[0] * 1e-6 / ceiling);
        }
    return 0;
}
