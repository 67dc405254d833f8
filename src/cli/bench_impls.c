/* sdgp bench impls: the implementation lists (`sdgp kernels`) on a registry model's layers, the one
 * benchmark every product of a step is a case of. Per distinct conv layer shape and pass, every
 * implementation the model could hand that layer under the recipe (sdgp_model_time_impls: what the
 * tuner chooses from, and more) against oneDNN's dense product on the same layer, pruning and
 * packing included, interleaved in one process, so a ratio survives the host's drift. The recipe
 * is `sdgp train`'s flags, through the same configuration table; the shapes are the model's own. */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/cache.h"
#include "kernels/spconv_internal.h" /* spconv_fma_ceiling */
#include "sdgp/model.h"

#define MAX_ISAS 4
#define MAX_RESULTS 16 /* sdgp_model_time_impls's rows of a pass */

typedef struct {
    int json, reps;
    int passes[3]; /* fwd, bwd_data, bwd_weights wanted */
    int h, w, c;   /* --input (0: the registry's) */
    sdgp_isa isas[MAX_ISAS];
    int n_isa;
    sdgp_train_config cfg;
} options;

static const char *const pass_names[3] = {"fwd", "bwd_data", "bwd_weights"};

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdgp bench impls [sdgp train flags] [options]\n\n"
            "Every conv pass's implementations (sdgp kernels) on each distinct conv layer of a registry model,\n"
            "each timed against oneDNN's dense product on the same layer and exact tensors (its algorithm as\n"
            "--conv-algo gives it), pruning and packing included, interleaved in one process, the best of\n"
            "--reps rounds. The recipe is sdgp train's flags (--model, --width, --batch-size, --threads,\n"
            "--prune, --nm, --mask-block, --sdgp-domain, --sparse-weights, --weight-groups, --prune-wgrad, ...);\n"
            "the model's choice (--sparse-kernel) is marked '*'. x: oneDNN's time / the implementation's.\n\n"
            "options:\n"
            "  --input HxWxC   the model's input [the registry's]\n"
            "  --pass LIST     fwd,bwd_data,bwd_weights or a part of it [all]\n"
            "  --isa LIST      sparse kernels' ISA paths, each a model of its own: auto,ref,avx2,avx512 [auto]\n"
            "  --reps N        interleaved rounds, the best of each kept [7]\n"
            "  --json          one JSON object per line (a header with the host, then a row per implementation)\n");
}

/* cli_parse_name_list's parse of --pass and --isa */
static sdgp_status parse_pass(const char *name, int *out, sdgp_error *err) {
    for (*out = 0; *out < 3; ++*out)
        if (!strcmp(name, pass_names[*out])) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_INVALID, "'%s' is not fwd, bwd_data or bwd_weights", name);
}
static sdgp_status parse_isa(const char *name, int *out, sdgp_error *err) {
    sdgp_isa isa;
    sdgp_status st = sdgp_isa_parse(name, &isa, err);
    if (st == SDGP_OK) st = sdgp_isa_resolve(isa, &isa, err); /* the path that will run */
    *out = (int)isa;
    return st;
}

/* Returns 1 to run, 0 after --help, -1 after a message. */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->reps = 7;
    o->passes[0] = o->passes[1] = o->passes[2] = 1;
    o->cfg = sdgp_train_config_default();
    (void)sdgp_isa_resolve(SDGP_ISA_AUTO, &o->isas[o->n_isa++], NULL); /* SDGP_ISA's, else the host's best */
    char **rest = calloc((size_t)argc + 1, sizeof *rest); /* the training flags */
    if (!rest) return -1;
    int nrest = 0, ok = 1;
    rest[nrest++] = argv[0];
    for (int i = 1; i < argc && ok; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            free(rest);
            return 0;
        } else if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--reps") || !strcmp(a, "--pass") || !strcmp(a, "--isa") || !strcmp(a, "--input")) {
            if (!v) {
                fprintf(stderr, "sdgp: %s needs a value (see --help)\n", a);
                ok = 0;
            } else if (!strcmp(a, "--reps")) {
                ok = cli_parse_int(a, v, 1, 1000, &x);
                o->reps = (int)x;
            } else if (!strcmp(a, "--pass")) {
                int p[3], n = cli_parse_name_list(a, v, parse_pass, 3, p);
                memset(o->passes, 0, sizeof o->passes);
                for (int k = 0; k < n; k++) o->passes[p[k]] = 1;
                ok = n > 0;
            } else if (!strcmp(a, "--isa")) {
                int isas[MAX_ISAS];
                o->n_isa = cli_parse_name_list(a, v, parse_isa, MAX_ISAS, isas);
                for (int k = 0; k < o->n_isa; k++) o->isas[k] = (sdgp_isa)isas[k];
                ok = o->n_isa > 0;
            } else {
                char tail;
                ok = sscanf(v, "%dx%dx%d%c", &o->h, &o->w, &o->c, &tail) == 3 && o->h > 0 && o->w > 0 && o->c > 0 &&
                     o->h <= 4096 && o->w <= 4096 && o->c <= 64;
                if (!ok) fprintf(stderr, "sdgp: --input: '%s' is not HxWxC (e.g. 32x32x3)\n", v);
            }
            i++;
        } else {
            rest[nrest++] = argv[i];
        }
    }
    if (ok && cli_apply_train_flags(&o->cfg, nrest, rest, NULL)) ok = 0;
    free(rest);
    return ok ? 1 : -1;
}

/* Layers that time alike: the same shape and the same part in the recipe. */
static int same_case(const sdgp_layer_info *a, const sdgp_layer_info *b) {
    return !memcmp(&a->geom, &b->geom, sizeof a->geom) && a->pruned == b->pruned && a->pruned_wgrad == b->pruned_wgrad &&
           a->sparse_weights == b->sparse_weights;
}

/* Dense FLOPs of one pass of layer g: 2 x the multiply-adds of the direct convolution. */
static double dense_flops(const sdgp_conv_geom *g) {
    const double groups = g->groups > 1 ? g->groups : 1;
    return 2.0 * g->B * g->Ho * g->Wo * g->Cout * (g->Cin / groups) * g->kh * g->kw;
}

typedef struct {
    double base, chosen, best; /* ms, weighted by the layers' counts */
} pass_total;

static void print_header(const options *o, const sdgp_model_config *mc, sdgp_isa isa, double ceiling) {
    char cpu[200];
    cli_cpu_model(cpu, sizeof cpu);
    const sdgp_cache_info *ci = sdgp_caches();
    char prune[64];
    snprintf(prune, sizeof prune, "%s %d:%d", sdgp_prune_fn_name(mc->prune.fn), mc->prune.n, mc->prune.m);
    if (o->json) {
        printf("{\"host\":\"%s\",\"isa\":\"%s\",\"onednn_isa\":\"%s\",\"l1d_kib\":%lld,\"l2_kib\":%lld,\"threads\":%d,"
               "\"fma_ceiling_gflops\":%.1f,\"reps\":%d,\"model\":\"%s\",\"width\":%g,\"batch\":%d,\"input\":\"%dx%dx%d\"}\n",
               cpu, sdgp_isa_name(isa), sdgp_conv_onednn_isa(), (long long)(ci->l1d >> 10), (long long)(ci->l2 >> 10),
               mc->threads, ceiling, o->reps, sdgp_model_zoo((int)mc->kind)->name, (double)mc->width, mc->batch, mc->height,
               mc->width_px, mc->channels);
        return;
    }
    printf("# host %s; sdgp ISA %s, oneDNN %s; L1d %lld KiB, L2 %lld KiB (%s); %d threads; FMA ceiling %.1f GFLOP/s\n"
           "# %s w%g, batch %d, input %dx%dx%d; data gradient %s; best of %d interleaved rounds\n"
           "# ms per implementation (:direct / :winograd, oneDNN's algorithm where it runs oneDNN); x = the faster\n"
           "# onednn row / it; GF/s in dense terms (2 x the direct conv's multiply-adds); * = the model's choice\n",
           cpu, sdgp_isa_name(isa), sdgp_conv_onednn_isa(), (long long)(ci->l1d >> 10), (long long)(ci->l2 >> 10),
           ci->source, mc->threads, ceiling, sdgp_model_zoo((int)mc->kind)->name, (double)mc->width, mc->batch, mc->height,
           mc->width_px, mc->channels, prune, o->reps);
}

static void print_row(const options *o, sdgp_isa isa, const sdgp_layer_info *li, int count, int pass, const sdgp_impl_time *t,
                      double base_ms) {
    const sdgp_conv_geom *g = &li->geom;
    char shape[96];
    snprintf(shape, sizeof shape, "%dx%d s%d p%d %dx%d %d->%d", g->kh, g->kw, g->stride, g->pad, g->H, g->W, g->Cin,
             g->Cout);
    if (g->groups > 1) snprintf(shape + strlen(shape), sizeof shape - strlen(shape), " g%d", g->groups);
    const double gfs = dense_flops(g) / (t->ms * 1e-3) * 1e-9;
    if (o->json)
        printf("{\"layer\":\"%s\",\"count\":%d,\"shape\":\"%s\",\"isa\":\"%s\",\"pass\":\"%s\",\"impl\":\"%s\",\"code\":\"%c\","
               "\"algo\":\"%s\",\"sparse\":%d,\"chosen\":%d,\"ms\":%.4f,\"onednn_ms\":%.4f,\"speedup\":%.3f,"
               "\"dense_gflops\":%.1f}\n",
               li->layer, count, shape, sdgp_isa_name(isa), pass_names[pass], t->name, t->code ? t->code : '-', t->algo,
               t->sparse, t->chosen, t->ms, base_ms, base_ms / t->ms, gfs);
    else {
        char name[64];
        snprintf(name, sizeof name, "%s%s%s", t->name, t->algo[0] ? ":" : "", t->algo);
        printf("%-22s x%-2d %-24s %-11s %c %-30s %9.3f ms  x%5.2f  %6.1f GF/s\n", li->layer, count, shape, pass_names[pass],
               t->chosen ? '*' : ' ', name, t->ms, base_ms / t->ms, gfs);
    }
}

/* One model (one ISA path): every distinct layer, every wanted pass. */
static int run_model(const options *o, sdgp_isa isa) { /* isa resolved: the path the sparse kernels take */
    sdgp_model_config mc = o->cfg.model;
    const sdgp_model_info *zi = sdgp_model_zoo((int)mc.kind);
    mc.height = o->h ? o->h : zi->height;
    mc.width_px = o->w ? o->w : zi->width_px;
    mc.channels = o->c ? o->c : zi->channels;
    mc.prune.isa = mc.prune_wgrad.isa = isa;
    sdgp_model *m;
    sdgp_error err;
    if (sdgp_model_create(&m, &mc, &err) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s\n", err.msg);
        return 2;
    }
    if (mc.threads <= 0) mc.threads = omp_get_max_threads(); /* what --threads 0 (all cores) gives */
    print_header(o, &mc, isa, spconv_fma_ceiling(isa, mc.threads, 0.2));
    const int nconv = sdgp_model_conv_count(m);
    pass_total tot[3] = {{0}};
    int rc = 0;
    for (int i = 0; i < nconv && !rc; i++) {
        const sdgp_layer_info *li = sdgp_model_conv_info(m, i);
        int first = 1, count = 0;
        for (int j = 0; j < nconv; j++)
            if (same_case(sdgp_model_conv_info(m, j), li)) {
                if (j < i) first = 0;
                count++;
            }
        if (!first) continue;
        for (int p = 0; p < 3 && !rc; p++) {
            if (!o->passes[p]) continue;
            sdgp_impl_time t[MAX_RESULTS];
            int n;
            if (sdgp_model_time_impls(m, i, pass_names[p], o->reps, t, MAX_RESULTS, &n, &err) != SDGP_OK) {
                fprintf(stderr, "sdgp: %s %s: %s\n", li->layer, pass_names[p], err.msg);
                rc = 1;
                break;
            }
            if (n == 0) continue;
            double base = t[0].ms; /* the faster of oneDNN's rows (code 0: direct, then Winograd) */
            for (int k = 1; k < n && !t[k].code; k++) base = fmin(base, t[k].ms);
            double best = base, chosen = base;
            for (int k = 0; k < n; k++) {
                print_row(o, isa, li, count, p, &t[k], base);
                if (t[k].ms < best) best = t[k].ms;
                if (t[k].chosen) chosen = t[k].ms;
            }
            tot[p].base += count * base, tot[p].chosen += count * chosen, tot[p].best += count * best;
        }
    }
    for (int p = 0; p < 3 && !rc; p++) {
        if (!o->passes[p] || tot[p].base <= 0) continue;
        if (o->json)
            printf("{\"total\":\"%s\",\"isa\":\"%s\",\"onednn_ms\":%.3f,\"chosen_ms\":%.3f,\"best_ms\":%.3f,\"chosen_speedup\":%.3f,"
                   "\"best_speedup\":%.3f}\n",
                   pass_names[p], sdgp_isa_name(isa), tot[p].base, tot[p].chosen, tot[p].best, tot[p].base / tot[p].chosen,
                   tot[p].base / tot[p].best);
        else
            printf("# total %-11s oneDNN (the faster) %9.2f ms, the model's choices %9.2f ms (x%.3f), "
                   "the fastest row of each layer (oneDNN's too) %9.2f ms (x%.3f)\n",
                   pass_names[p], tot[p].base, tot[p].chosen, tot[p].base / tot[p].chosen, tot[p].best,
                   tot[p].base / tot[p].best);
    }
    sdgp_model_destroy(m);
    return rc;
}

int sdgp_cmd_bench_impls(int argc, char **argv) {
    options o;
    const int r = parse_options(argc, argv, &o);
    if (r <= 0) return r == 0 ? 0 : 2;
    int rc = 0;
    for (int k = 0; k < o.n_isa && !rc; k++) rc = run_model(&o, o.isas[k]);
    return rc;
}
