/* sdgp bench conv: the N:M sparse backward-data convolution against oneDNN's dense one.
 *
 * For every pruned conv layer of ResNet-9 (width 1 at batch 64 on 32x32x3, width 0.25 at batch
 * 128 on 28x28x1) or one --shape, for every thread count and n:m:
 *   dense_ms  : sdgp_conv_backward_data (oneDNN, includes its weight reorder), dense dO;
 *   sparse_ms : sdgp_sparse_bwd_pack + sdgp_sparse_bwd_data on the compressed dO;
 *   prune_ms  : sdgp_prune (magnitude, compressed output only), reported beside it.
 * Runs are interleaved (dense, then each n:m, repeated) so machine noise hits all alike; the
 * median of --repeat runs counts. Useful FLOPs count only taps that land inside the image
 * (2 * valid(pixel, tap) pairs * Cin * Cout * n/m), for both dense and sparse rates.
 * The FMA ceiling (a pure register FMA loop on the same threads) is measured in the same run. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kernels/spconv_internal.h"
#include "sdgp/conv.h"
#include "sdgp/prune.h"

typedef struct {
    char name[32];
    int B, H, W, Cin, Cout, k, stride, pad;
} layer;

#define MAX_LAYERS 16
#define MAX_NM 8
#define MAX_THREADS 8

/* ResNet-9's pruned conv layers at width multiplier `div` (channels / div). */
static int model_layers(layer *out, const char *model, int B, int HW, int div) {
    struct { const char *name; int in, out, k, stride, pad, pool_before; } spec[] = {
        {"L2", 128, 256, 5, 2, 2, 0}, {"L3", 256, 256, 3, 1, 1, 0}, {"L4", 256, 256, 3, 1, 1, 0},
        {"L5", 256, 512, 3, 1, 1, 0}, {"L6", 512, 512, 3, 1, 1, 1}, {"L7", 512, 512, 3, 1, 1, 0},
        {"L8", 512, 256, 3, 1, 0, 0},
    };
    int hw = HW, count = 0;
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        if (spec[i].pool_before) hw /= 2;
        layer *l = &out[count++];
        *l = (layer){.B = B, .H = hw, .W = hw, .Cin = spec[i].in / div, .Cout = spec[i].out / div, .k = spec[i].k,
                     .stride = spec[i].stride, .pad = spec[i].pad};
        snprintf(l->name, sizeof l->name, "%s/%s", model, spec[i].name);
        hw = (hw + 2 * spec[i].pad - spec[i].k) / spec[i].stride + 1;
    }
    return count;
}

/* Pairs (output pixel, tap) whose input pixel lies inside the image. */
static double valid_pairs(const sdgp_conv_geom *g) {
    double ph = 0, pw = 0;
    for (int o = 0; o < g->Ho; o++)
        for (int i = 0; i < g->kh; i++) ph += (o * g->stride - g->pad + i >= 0 && o * g->stride - g->pad + i < g->H);
    for (int o = 0; o < g->Wo; o++)
        for (int j = 0; j < g->kw; j++) pw += (o * g->stride - g->pad + j >= 0 && o * g->stride - g->pad + j < g->W);
    return (double)g->B * ph * pw;
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdgp bench conv [options]\n\n"
            "Times the N:M sparse backward-data convolution (weight packing included) against oneDNN's\n"
            "dense backward-data on ResNet-9's pruned conv layers, with pruning time beside it.\n\n"
            "options:\n"
            "  --model w1|w0.25|all   ResNet-9 width 1 (batch 64, 32x32x3) and/or width 0.25 (batch 128,\n"
            "                         28x28x1) (default all)\n"
            "  --shape B,H,W,Cin,Cout,k,stride,pad   one layer instead of a model\n"
            "  --nm LIST              n:m patterns, comma separated (default 2:4,1:4,2:8,4:32)\n"
            "  --threads LIST         thread counts (default 1,2)\n"
            "  --repeat N             timed runs per measurement, median reported (default 5)\n"
            "  --isa auto|ref|avx2|avx512   sparse kernel path (default auto)\n"
            "  --no-check             skip the check of the sparse result against oneDNN\n"
            "  --json                 one JSON object per line instead of the table\n"
            "  --help                 this text\n");
}

typedef struct {
    layer layers[MAX_LAYERS];
    int nlayers;
    int n[MAX_NM], m[MAX_NM], nnm;
    long threads[MAX_THREADS];
    int nthreads, repeat, json, check;
    sdgp_isa isa;
} options;

static int parse_shape(const char *text, layer *l) {
    int v[8];
    char tail;
    if (sscanf(text, "%d,%d,%d,%d,%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &tail) != 8) {
        fprintf(stderr, "sdgp: --shape: '%s' is not B,H,W,Cin,Cout,k,stride,pad\n", text);
        return 0;
    }
    *l = (layer){.B = v[0], .H = v[1], .W = v[2], .Cin = v[3], .Cout = v[4], .k = v[5], .stride = v[6], .pad = v[7]};
    snprintf(l->name, sizeof l->name, "shape");
    return 1;
}

static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->repeat = 5;
    o->check = 1;
    o->isa = SDGP_ISA_AUTO;
    const char *model = "all", *nm = "2:4,1:4,2:8,4:32", *threads = "1,2", *shape = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--no-check")) {
            o->check = 0;
        } else if (!strcmp(a, "--model") || !strcmp(a, "--shape") || !strcmp(a, "--nm") || !strcmp(a, "--threads") ||
                   !strcmp(a, "--repeat") || !strcmp(a, "--isa")) {
            if (!val) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return -1;
            }
            i++;
            if (!strcmp(a, "--model")) model = val;
            else if (!strcmp(a, "--shape")) shape = val;
            else if (!strcmp(a, "--nm")) nm = val;
            else if (!strcmp(a, "--threads")) threads = val;
            else if (!strcmp(a, "--repeat")) {
                if (!cli_parse_int(a, val, 1, 1000, &v)) return -1;
                o->repeat = (int)v;
            } else {
                sdgp_error e;
                if (sdgp_isa_parse(val, &o->isa, &e) != SDGP_OK) {
                    fprintf(stderr, "sdgp: --isa: %s\n", e.msg);
                    return -1;
                }
            }
        } else {
            fprintf(stderr, "sdgp: bench conv: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if (shape) {
        if (!parse_shape(shape, &o->layers[0])) return -1;
        o->nlayers = 1;
    } else if (!strcmp(model, "w1") || !strcmp(model, "all")) {
        o->nlayers = model_layers(o->layers, "w1", 64, 32, 1);
    }
    if (!shape && (!strcmp(model, "w0.25") || !strcmp(model, "all")))
        o->nlayers += model_layers(o->layers + o->nlayers, "w0.25", 128, 28, 4);
    if (!o->nlayers) {
        fprintf(stderr, "sdgp: --model: '%s' is not w1, w0.25 or all\n", model);
        return -1;
    }
    char buf[256];
    if (strlen(nm) >= sizeof buf) {
        fprintf(stderr, "sdgp: --nm: list too long\n");
        return -1;
    }
    strcpy(buf, nm);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        sdgp_error e;
        if (o->nnm == MAX_NM) {
            fprintf(stderr, "sdgp: --nm: at most %d patterns\n", MAX_NM);
            return -1;
        }
        if (sdgp_nm_parse(tok, &o->n[o->nnm], &o->m[o->nnm], &e) != SDGP_OK) {
            fprintf(stderr, "sdgp: --nm: %s\n", e.msg);
            return -1;
        }
        o->nnm++;
    }
    if (!o->nnm) {
        fprintf(stderr, "sdgp: --nm: empty list\n");
        return -1;
    }
    o->nthreads = cli_parse_int_list("--threads", threads, 1, 256, o->threads, MAX_THREADS);
    if (!o->nthreads) return -1;
    /* Every layer must be a valid geometry whose Cout every n:m divides. */
    for (int li = 0; li < o->nlayers; li++) {
        const layer *l = &o->layers[li];
        sdgp_conv_geom g;
        sdgp_error e;
        if (sdgp_conv_geom_init(&g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e) != SDGP_OK) {
            fprintf(stderr, "sdgp: %s: %s\n", l->name, e.msg);
            return -1;
        }
        for (int i = 0; i < o->nnm; i++)
            if (l->Cout % o->m[i]) {
                fprintf(stderr, "sdgp: %s: Cout=%d is not a multiple of m=%d (--nm %d:%d)\n", l->name, l->Cout, o->m[i], o->n[i],
                        o->m[i]);
                return -1;
            }
    }
    return 1;
}

/* Everything one (layer, threads) measurement needs. */
typedef struct {
    sdgp_conv_geom g;
    int64_t rows, nO, nD, nW;
    float *dO, *w, *dD, *dD2, *dense;
    sdgp_conv *conv;
    sdgp_nm_tensor nm[MAX_NM];
    sdgp_sparse_bwd *plan[MAX_NM];
} bench_ctx;

static void ctx_free(bench_ctx *c, int nnm) {
    free(c->dO), free(c->w), free(c->dD), free(c->dD2), free(c->dense);
    sdgp_conv_destroy(c->conv);
    for (int i = 0; i < nnm; i++) {
        sdgp_nm_free(&c->nm[i]);
        sdgp_sparse_bwd_destroy(c->plan[i]);
    }
}

/* Accumulated per (model, nm, threads) for the totals. */
typedef struct {
    char model[16];
    int n, m, threads;
    double dense, sparse, prune;
} total;

static void fill_normal(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i += 2) { /* Box-Muller on a splitmix stream */
        uint64_t z[2];
        for (int q = 0; q < 2; q++) {
            uint64_t s = (seed += 0x9E3779B97F4A7C15ull);
            s = (s ^ (s >> 30)) * 0xBF58476D1CE4E5B9ull;
            s = (s ^ (s >> 27)) * 0x94D049BB133111EBull;
            z[q] = s ^ (s >> 31);
        }
        double u1 = ((double)(z[0] >> 11) + 1.0) / 9007199254740993.0, u2 = (double)(z[1] >> 11) / 9007199254740992.0;
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < n) x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
}

static int run_layer(const options *o, const layer *l, int threads, double ceiling, total *totals, int *ntotals) {
    bench_ctx c;
    memset(&c, 0, sizeof c);
    sdgp_error e;
    int rc = 1;
    if (sdgp_conv_geom_init(&c.g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s: %s\n", l->name, e.msg);
        return 2;
    }
    const sdgp_conv_geom *g = &c.g;
    c.rows = (int64_t)g->B * g->Ho * g->Wo;
    c.nO = c.rows * g->Cout;
    c.nD = (int64_t)g->B * g->H * g->W * g->Cin;
    c.nW = (int64_t)g->Cout * g->Cin * g->kh * g->kw;
    c.dO = cli_alloc_floats((size_t)c.nO);
    c.w = cli_alloc_floats((size_t)c.nW);
    c.dD = cli_alloc_floats((size_t)c.nD);
    c.dD2 = cli_alloc_floats((size_t)c.nD);
    c.dense = cli_alloc_floats((size_t)c.nO);
    if (!c.dO || !c.w || !c.dD || !c.dD2 || !c.dense) {
        fprintf(stderr, "sdgp: %s: out of memory\n", l->name);
        ctx_free(&c, 0);
        return 1;
    }
    fill_normal(c.dO, c.nO, 1);
    fill_normal(c.w, c.nW, 2);
    if (sdgp_conv_create(&c.conv, g, 0, threads, &e) != SDGP_OK) goto fail;
    for (int i = 0; i < o->nnm; i++) {
        if (sdgp_nm_alloc(&c.nm[i], SDGP_AXIS_CHANNEL, o->n[i], o->m[i], c.rows, g->Cout, &e) != SDGP_OK) goto fail;
        if (sdgp_sparse_bwd_create(&c.plan[i], g, o->n[i], o->m[i], o->isa, threads, &e) != SDGP_OK) goto fail;
    }
    /* One untimed warm-up of everything, then interleaved timed rounds. */
    double td[1000], tp[MAX_NM][1000], ts[MAX_NM][1000];
    for (int r = -1; r < o->repeat; r++) {
        double t0 = cli_now();
        if (sdgp_conv_backward_data(c.conv, c.dD, c.dO, c.w, &e) != SDGP_OK) goto fail;
        if (r >= 0) td[r] = cli_now() - t0;
        for (int i = 0; i < o->nnm; i++) {
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, o->n[i], o->m[i]);
            cfg.threads = threads;
            t0 = cli_now();
            if (sdgp_prune(&cfg, c.dO, g->B, (int64_t)g->Ho * g->Wo, g->Cout, NULL, &c.nm[i], &e) != SDGP_OK) goto fail;
            double t1 = cli_now();
            if (sdgp_sparse_bwd_pack(c.plan[i], c.w, &e) != SDGP_OK) goto fail;
            if (sdgp_sparse_bwd_data(c.plan[i], c.dD2, &c.nm[i], &e) != SDGP_OK) goto fail;
            double t2 = cli_now();
            if (r >= 0) tp[i][r] = t1 - t0, ts[i][r] = t2 - t1;
        }
    }
    const double dense_ms = 1e3 * cli_median(td, o->repeat), pairs = valid_pairs(g);
    const double dense_flops = 2.0 * pairs * g->Cin * g->Cout;
    char model[16];
    snprintf(model, sizeof model, "%.*s", (int)strcspn(l->name, "/"), l->name);
    for (int i = 0; i < o->nnm; i++) {
        double sparse_ms = 1e3 * cli_median(ts[i], o->repeat), prune_ms = 1e3 * cli_median(tp[i], o->repeat);
        double useful = dense_flops * o->n[i] / o->m[i], gf = useful / sparse_ms * 1e-6, err = -1;
        if (o->check) { /* the sparse result against oneDNN on the same pruned tensor */
            if (sdgp_nm_decompress(&c.nm[i], c.dense, &e) != SDGP_OK ||
                sdgp_conv_backward_data(c.conv, c.dD, c.dense, c.w, &e) != SDGP_OK || sdgp_sparse_bwd_pack(c.plan[i], c.w, &e) != SDGP_OK ||
                sdgp_sparse_bwd_data(c.plan[i], c.dD2, &c.nm[i], &e) != SDGP_OK)
                goto fail;
            double diff = 0, ref = 0;
            for (int64_t q = 0; q < c.nD; q++) {
                double d = fabs((double)c.dD2[q] - c.dD[q]);
                if (d > diff || d != d) diff = d;
                if (fabs(c.dD[q]) > ref) ref = fabs(c.dD[q]);
            }
            err = diff / (ref > 0 ? ref : 1);
        }
        const char *isa = sdgp_isa_name(sdgp_sparse_bwd_isa(c.plan[i]));
        if (o->json)
            printf("{\"layer\":\"%s\",\"shape\":\"%d,%d,%d,%d,%d,%d,%d,%d\",\"nm\":\"%d:%d\",\"threads\":%d,\"isa\":\"%s\","
                   "\"dense_ms\":%.3f,\"sparse_ms\":%.3f,\"prune_ms\":%.3f,\"speedup\":%.3f,\"gflops_useful\":%.2f,"
                   "\"dense_gflops\":%.2f,\"fma_ceiling_gflops\":%.1f,\"rel_err\":%.3g}\n",
                   l->name, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->stride, l->pad, o->n[i], o->m[i], threads, isa,
                   dense_ms, sparse_ms, prune_ms, dense_ms / sparse_ms, gf, dense_flops / dense_ms * 1e-6, ceiling, err);
        else
            printf("%-10s %5d:%-3d %3d  %9.2f %9.2f %8.2f %7.2fx %7.1f %5.0f%% %7.1f %9.1e\n", l->name, o->n[i], o->m[i], threads,
                   dense_ms, sparse_ms, prune_ms, dense_ms / sparse_ms, gf, 100 * gf / ceiling, dense_flops / dense_ms * 1e-6,
                   err);
        /* totals keyed by (model, n:m, threads) */
        total *tt = NULL;
        for (int q = 0; q < *ntotals; q++)
            if (!strcmp(totals[q].model, model) && totals[q].n == o->n[i] && totals[q].m == o->m[i] && totals[q].threads == threads)
                tt = &totals[q];
        if (!tt) {
            tt = &totals[(*ntotals)++];
            *tt = (total){.n = o->n[i], .m = o->m[i], .threads = threads};
            snprintf(tt->model, sizeof tt->model, "%s", model);
        }
        tt->dense += dense_ms, tt->sparse += sparse_ms, tt->prune += prune_ms;
    }
    fflush(stdout);
    rc = 0;
fail:
    if (rc) fprintf(stderr, "sdgp: %s: %s\n", l->name, e.msg);
    ctx_free(&c, o->nnm);
    return rc;
}

int sdgp_cmd_bench_conv(int argc, char **argv) {
    options o;
    int r = parse_options(argc, argv, &o);
    if (r <= 0) return r == 0 ? 0 : 2;
    sdgp_isa isa;
    sdgp_error e;
    if (sdgp_isa_resolve(o.isa, &isa, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s\n", e.msg);
        return 2;
    }
    static total totals[MAX_NM * MAX_THREADS * 4];
    int ntotals = 0;
    for (int ti = 0; ti < o.nthreads; ti++) {
        int threads = (int)o.threads[ti];
        double ceiling = spconv_fma_ceiling(isa, threads, 0.2);
        if (o.json)
            printf("{\"fma_ceiling_gflops\":%.1f,\"threads\":%d,\"isa\":\"%s\"}\n", ceiling, threads, sdgp_isa_name(isa));
        else
            printf("# threads %d: FMA ceiling %.1f GFLOP/s (%s, pure register loop)\n"
                   "%-10s %9s %3s  %9s %9s %8s %8s %7s %6s %7s %9s\n",
                   threads, ceiling, sdgp_isa_name(isa), "layer", "n:m", "thr", "dense_ms", "sparse_ms", "prune_ms", "speedup",
                   "GF/s", "ceil", "denseGF", "rel_err");
        for (int li = 0; li < o.nlayers; li++) {
            int rc = run_layer(&o, &o.layers[li], threads, ceiling, totals, &ntotals);
            if (rc) return rc;
        }
    }
    for (int t = 0; t < ntotals; t++) {
        const int n = totals[t].n, m = totals[t].m, threads = totals[t].threads;
        double sp = totals[t].dense / totals[t].sparse;
        if (o.json)
            printf("{\"layer\":\"%s/total\",\"nm\":\"%d:%d\",\"threads\":%d,\"isa\":\"%s\",\"dense_ms\":%.3f,\"sparse_ms\":%.3f,"
                   "\"prune_ms\":%.3f,\"speedup\":%.3f}\n",
                   totals[t].model, n, m, threads, sdgp_isa_name(isa), totals[t].dense, totals[t].sparse, totals[t].prune, sp);
        else
            printf("%-10s %5d:%-3d %3d  %9.2f %9.2f %8.2f %7.2fx   (total)\n", totals[t].model, n, m, threads, totals[t].dense,
                   totals[t].sparse, totals[t].prune, sp);
    }
    return 0;
}
