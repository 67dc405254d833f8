/* sdgp bench conv: the N:M sparse backward-data convolution against the best dense one.
 *
 * For every distinct conv layer with a data gradient of the --model list (bench_shapes.c: the
 * registry's models, e.g. ResNet-9 width 1 at batch 64 on 32x32x3, width 0.25 at batch 128 on
 * 28x28x1, ResNet-18, ResNet-50, RegNetX-400MF) or one --shape, for every thread count and n:m:
 *   dense_direct_ms   : oneDNN's direct backward-data on the dense dO (includes its weight reorder);
 *   dense_winograd_ms : the Winograd backward-data under training's default 48 MB workspace limit:
 *                       oneDNN's, or sdgp's where oneDNN has none (AVX2: the header says
 *                       which); null where no Winograd kernel runs the layer;
 *   best_dense_ms     : the faster of the two. Training runs Winograd where it pays, so a sparse
 *                       kernel only helps if it beats this, not just the direct kernel.
 * and for every domain of the sparse product (--sdgp-domain):
 *   pixel    : sparse_ms = sdgp_sparse_bwd_pack + _data on the compressed dO; prune_ms =
 *              sdgp_prune (magnitude, compressed output only), timed apart; fused_ms =
 *              sdgp_sparse_bwd_pack + _data_pruned on the dense dO (the same product with the
 *              pruning inside the kernel's packing; null with --mask-block > 1), and
 *              speedup_fused_vs_best = best_dense_ms / fused_ms;
 *   winograd : sparse_ms = sdgp_sparse_wino_pack + _data on the dense dO, which prunes the
 *              transformed dO inside (fused), so prune_ms = 0; 3x3 stride-1 layers only;
 *   auto     : per layer the domain with the smaller sparse_ms + prune_ms (auto_pick says which).
 * speedup_vs_best = best_dense_ms / (sparse_ms + prune_ms). dense_ms (= dense_direct_ms) and
 * speedup (= dense_ms / sparse_ms, pruning excluded) keep their old meaning for old readers.
 * --check: pixel against oneDNN direct on the same pruned tensor; winograd: its unpruned product
 * (fn NONE) against oneDNN direct on the dense dO (pruning V has no dense oracle); rel_err is the
 * max-norm relative error as before, rel_l2_err the L2 one; winograd above 1e-3 fails the run.
 * Runs are interleaved (dense, then each n:m and domain, repeated) so machine noise hits all
 * alike; the median of --repeat runs counts. Useful FLOPs count only taps that land inside the
 * image (2 * valid(pixel, tap) pairs * Cin * Cout * n/m), in the direct algorithm's terms for every
 * domain. The FMA ceiling (a pure register FMA loop on the same threads) is measured in the same
 * run. Model totals weight each layer by its count (occurrences in the model: ResNet-18 repeats
 * shapes); a winograd total covers only the layers that have a winograd row. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_shapes.h"
#include "cli/cli.h"
#include "kernels/spconv_internal.h"
#include "sdgp/conv.h"
#include "sdgp/sparse.h"
#include "sdgp/prune.h"

#define MAX_LAYERS 64
#define MAX_NM 8
#define MAX_THREADS 8
#define MAX_REPEAT 1000
#define MAX_MODELS 8 /* models in --model (their totals) */
/* Training's default --conv-workspace: the dense Winograd baseline runs as training would. */
#define WINO_WORKSPACE ((size_t)48 << 20)
/* The unpruned Winograd-domain product differs from oneDNN by fp32 rounding (~1e-6); an error
 * this large means a wrong result, not rounding. */
#define WINO_CHECK_LIMIT 1e-3

enum { DOM_PIXEL = 1, DOM_WINO = 2, DOM_AUTO = 4, DOM_ALL = 7 };
static const int domain_bits[3] = {DOM_PIXEL, DOM_WINO, DOM_AUTO};
static const char *domain_name(int bit) { return bit == DOM_PIXEL ? "pixel" : bit == DOM_WINO ? "winograd" : "auto"; }

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
            "Times the N:M sparse backward-data convolution (weight packing included) against the best of\n"
            "oneDNN's dense backward-data (direct, or Winograd within training's 48 MB workspace limit) on\n"
            "a model's pruned conv layers, with pruning time beside it.\n\n"
            "options:\n"
            "  --model LIST         the distinct conv layers of registry models (src/cli/bench_shapes.c), each\n"
            "                       shape once with its count in the model (column cnt, its weight in the\n"
            "                       totals): w1 ResNet-9 width 1 (batch 64, 32x32x3), w0.25 width 0.25 (batch\n"
            "                       128, 28x28x1), all = both (default); r18 ResNet-18 (batch 32, 32x32x3, 3x3\n"
            "                       stem), r50 ResNet-50 and rx RegNetX-400MF (batch 32, 224x224x3); any other\n"
            "                       registry name: width 1, batch 32, its own input\n"
            "  --shape B,H,W,Cin,Cout,k,stride,pad   one layer instead of a model\n"
            "  --sdgp-domain pixel|winograd|auto|all   where dO is pruned: per pixel (pixel), in the Winograd\n"
            "                       domain with pruning fused (winograd: 3x3 stride-1 layers only), per layer\n"
            "                       the faster of the two (auto), or a row for each (all; default)\n"
            "  --nm LIST            n:m patterns, comma separated (default 2:4,1:4,2:8,4:32)\n"
            "  --mask-block P       rows sharing one mask (1 = a mask per row, default): P pixels of a row\n"
            "                       of dO (pixel), P tiles of a tile row (winograd); magnitude pruning\n"
            "  --threads LIST       thread counts (default 1,2)\n"
            "  --repeat N           timed runs per measurement, median reported (default 5)\n"
            "  --isa auto|ref|avx2|avx512   sparse kernel path (default auto)\n"
            "  --check, --no-check  check the sparse results against oneDNN direct (default on): pixel on the\n"
            "                       pruned dO; winograd its unpruned product, failing above 1e-3 (L2)\n"
            "  --json               one JSON object per line instead of the table\n"
            "  --help               this text\n");
}

typedef struct {
    bench_layer layers[MAX_LAYERS];
    int nlayers;
    int n[MAX_NM], m[MAX_NM], nnm;
    long threads[MAX_THREADS];
    int nthreads, repeat, json, check, domains, mask_block;
    sdgp_isa isa;
} options;

static int parse_shape(const char *text, bench_layer *l) {
    int v[8];
    char tail;
    if (sscanf(text, "%d,%d,%d,%d,%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &tail) != 8) {
        fprintf(stderr, "sdgp: --shape: '%s' is not B,H,W,Cin,Cout,k,stride,pad\n", text);
        return 0;
    }
    *l = (bench_layer){.B = v[0], .H = v[1], .W = v[2], .Cin = v[3], .Cout = v[4], .k = v[5], .stride = v[6],
                       .pad = v[7], .count = 1};
    snprintf(l->name, sizeof l->name, "shape");
    return 1;
}

static int parse_domain(const char *text, int *out) {
    static const struct { const char *name; int bits; } names[] = {
        {"pixel", DOM_PIXEL}, {"winograd", DOM_WINO}, {"auto", DOM_AUTO}, {"all", DOM_ALL}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(text, names[i].name)) {
            *out = names[i].bits;
            return 1;
        }
    fprintf(stderr, "sdgp: --sdgp-domain: '%s' is not pixel, winograd, auto or all\n", text);
    return 0;
}

/* cli_parse_list's item of --model: a model's layers appended to o->layers */
static int one_model(const char *flag, const char *name, int i, void *ctx) {
    (void)i;
    options *o = ctx;
    int k = bench_model_layers(o->layers + o->nlayers, MAX_LAYERS - o->nlayers, name);
    if (!k) {
        fprintf(stderr, "sdgp: %s: '%s' is not w1, w0.25, all, r18, r50, rx or a registry model (or has more than %d"
                        " distinct layers in all)\n", flag, name, MAX_LAYERS);
        return 0;
    }
    o->nlayers += k;
    return 1;
}

static int add_models(options *o, const char *model) { /* all = w1,w0.25; the others: asked for by name */
    return cli_parse_list("--model", !strcmp(model, "all") ? "w1,w0.25" : model, MAX_MODELS, "models", one_model, o) > 0;
}

static sdgp_status layer_geom(sdgp_conv_geom *g, const bench_layer *l, sdgp_error *e) {
    sdgp_status st = sdgp_conv_geom_init(g, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->k, l->stride, l->pad, e);
    return st != SDGP_OK ? st : sdgp_conv_geom_set_groups(g, l->groups > 1 ? l->groups : 1, e);
}

/* Every layer must be a valid geometry whose Cout per group every n:m divides. */
static int check_layers(const options *o) {
    for (int li = 0; li < o->nlayers; li++) {
        const bench_layer *l = &o->layers[li];
        sdgp_conv_geom g;
        sdgp_error e;
        if (layer_geom(&g, l, &e) != SDGP_OK) {
            fprintf(stderr, "sdgp: %s: %s\n", l->name, e.msg);
            return 0;
        }
        for (int i = 0; i < o->nnm; i++)
            if ((l->Cout / g.groups) % o->m[i]) {
                fprintf(stderr, "sdgp: %s: Cout=%d (groups=%d) is not a multiple of m=%d per group (--nm %d:%d)\n", l->name,
                        l->Cout, g.groups, o->m[i], o->n[i], o->m[i]);
                return 0;
            }
    }
    return 1;
}

/* 1 ok, 0 --help printed, -1 bad usage (message printed). */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->repeat = 5;
    o->check = 1;
    o->mask_block = 1;
    o->domains = DOM_ALL;
    o->isa = SDGP_ISA_AUTO;
    const char *model = "all", *nm = "2:4,1:4,2:8,4:32", *threads = "1,2", *shape = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--json") || !strcmp(a, "--check") || !strcmp(a, "--no-check")) {
            if (!strcmp(a, "--json")) o->json = 1;
            else o->check = !strcmp(a, "--check");
        } else if (!strcmp(a, "--model") || !strcmp(a, "--shape") || !strcmp(a, "--nm") || !strcmp(a, "--threads") ||
                   !strcmp(a, "--repeat") || !strcmp(a, "--isa") || !strcmp(a, "--sdgp-domain") || !strcmp(a, "--mask-block")) {
            if (!val) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return -1;
            }
            i++;
            if (!strcmp(a, "--model")) model = val;
            else if (!strcmp(a, "--shape")) shape = val;
            else if (!strcmp(a, "--nm")) nm = val;
            else if (!strcmp(a, "--threads")) threads = val;
            else if (!strcmp(a, "--sdgp-domain")) {
                if (!parse_domain(val, &o->domains)) return -1;
            } else if (!strcmp(a, "--repeat")) {
                if (!cli_parse_int(a, val, 1, MAX_REPEAT, &v)) return -1;
                o->repeat = (int)v;
            } else if (!strcmp(a, "--mask-block")) {
                if (!cli_parse_int(a, val, 1, SDGP_MASK_BLOCK_MAX, &v)) return -1;
                o->mask_block = (int)v;
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
    } else if (!add_models(o, model)) {
        return -1;
    }
    if (!(o->nnm = cli_parse_nm_list("--nm", nm, o->n, o->m, MAX_NM))) return -1;
    o->nthreads = cli_parse_int_list("--threads", threads, 1, 256, o->threads, MAX_THREADS);
    if (!o->nthreads) return -1;
    return check_layers(o) ? 1 : -1;
}

/* Everything one (layer, threads) measurement needs. NULL plans: that path does not run. */
typedef struct {
    sdgp_conv_geom g;
    int threads;
    int64_t rows, nO, nD, nW;
    float *dO, *w;
    float *ref;                   /* oneDNN direct on the dense dO: the winograd check's reference */
    float *out;                   /* every other timed result lands here */
    float *dO_pruned, *ref_pruned; /* pixel check: the pruned dO and oneDNN direct on it */
    sdgp_conv *direct, *wino;     /* wino NULL: oneDNN has no Winograd kernel for this layer */
    sdgp_nm_tensor nm[MAX_NM];
    sdgp_sparse_bwd *plan[MAX_NM];   /* pixel domain */
    sdgp_sparse_wino *wplan[MAX_NM]; /* winograd domain */
    double t_direct[MAX_REPEAT], t_wino[MAX_REPEAT];
    double t_prune[MAX_NM][MAX_REPEAT], t_pixel[MAX_NM][MAX_REPEAT], t_wsparse[MAX_NM][MAX_REPEAT];
    double t_fused[MAX_NM][MAX_REPEAT];
} bench_ctx;

static void ctx_free(bench_ctx *c) {
    if (!c) return;
    free(c->dO), free(c->w), free(c->ref), free(c->out), free(c->dO_pruned), free(c->ref_pruned);
    sdgp_conv_destroy(c->direct);
    sdgp_conv_destroy(c->wino);
    for (int i = 0; i < MAX_NM; i++) {
        sdgp_nm_free(&c->nm[i]);
        sdgp_sparse_bwd_destroy(c->plan[i]);
        sdgp_sparse_wino_destroy(c->wplan[i]);
    }
    free(c);
}

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

/* The Winograd backward-data as training would run it (oneDNN's or sdgp's), or NULL where it does not
 * apply. The other passes are direct: only this one is timed. */
static sdgp_status create_dense_wino(bench_ctx *c, int threads, sdgp_error *e) {
    const sdgp_conv_options opt = {SDGP_CONV_DIRECT, WINO_WORKSPACE};
    const sdgp_conv_algo algos[3] = {SDGP_CONV_DIRECT, SDGP_CONV_WINOGRAD, SDGP_CONV_DIRECT};
    sdgp_status st = sdgp_conv_create_passes(&c->wino, &c->g, 0, threads, algos, &opt, e);
    if (st == SDGP_ERR_UNSUPPORTED) c->wino = NULL;
    else if (st != SDGP_OK) return st;
    if (c->wino && sdgp_conv_get_plan(c->wino, SDGP_CONV_BACKWARD_DATA).algo != SDGP_CONV_WINOGRAD) {
        sdgp_conv_destroy(c->wino); /* a direct pass under another name is not a Winograd baseline */
        c->wino = NULL;
    }
    return SDGP_OK;
}

/* The sparse plans of the domains the requested rows need (auto needs both). */
static sdgp_status create_sparse(bench_ctx *c, const options *o, const bench_layer *l, int threads, sdgp_error *e) {
    const int pixel = o->domains & (DOM_PIXEL | DOM_AUTO), wino = o->domains & (DOM_WINO | DOM_AUTO);
    sdgp_status st;
    for (int i = 0; i < o->nnm; i++) {
        if (pixel) {
            if ((st = sdgp_nm_alloc(&c->nm[i], SDGP_AXIS_CHANNEL, o->n[i], o->m[i], c->rows, c->g.Cout, e)) != SDGP_OK ||
                (st = sdgp_sparse_bwd_create(&c->plan[i], &c->g, o->n[i], o->m[i], o->isa, threads, e)) != SDGP_OK ||
                (st = sdgp_sparse_bwd_set_mask_block(c->plan[i], o->mask_block, e)) != SDGP_OK)
                return st;
        }
        if (!wino || !sdgp_sparse_wino_supports(&c->g)) continue;
        st = sdgp_sparse_wino_create(&c->wplan[i], &c->g, o->n[i], o->m[i], o->isa, threads, e);
        if (st == SDGP_ERR_UNSUPPORTED) { /* e.g. an ISA path without it: no winograd row, said why */
            c->wplan[i] = NULL;
            fprintf(stderr, "sdgp: %s %d:%d: no winograd-domain row: %s\n", l->name, o->n[i], o->m[i], e->msg);
        } else if (st != SDGP_OK) {
            return st;
        }
    }
    return SDGP_OK;
}

static sdgp_status ctx_setup(bench_ctx *c, const options *o, const bench_layer *l, int threads, sdgp_error *e) {
    sdgp_status st = layer_geom(&c->g, l, e);
    if (st != SDGP_OK) return st;
    c->threads = threads;
    const sdgp_conv_geom *g = &c->g;
    c->rows = (int64_t)g->B * g->Ho * g->Wo;
    c->nO = c->rows * g->Cout;
    c->nD = (int64_t)g->B * g->H * g->W * g->Cin;
    c->nW = (int64_t)g->Cout * (g->Cin / g->groups) * g->kh * g->kw;
    c->dO = cli_alloc_floats((size_t)c->nO);
    c->w = cli_alloc_floats((size_t)c->nW);
    c->ref = cli_alloc_floats((size_t)c->nD);
    c->out = cli_alloc_floats((size_t)c->nD);
    c->dO_pruned = cli_alloc_floats((size_t)c->nO);
    c->ref_pruned = cli_alloc_floats((size_t)c->nD);
    if (!c->dO || !c->w || !c->ref || !c->out || !c->dO_pruned || !c->ref_pruned)
        return sdgp_fail(e, SDGP_ERR_NOMEM, "out of memory for the layer's tensors");
    fill_normal(c->dO, c->nO, 1);
    fill_normal(c->w, c->nW, 2);
    if ((st = sdgp_conv_create(&c->direct, g, 0, threads, e)) != SDGP_OK || (st = create_dense_wino(c, threads, e)) != SDGP_OK)
        return st;
    return create_sparse(c, o, l, threads, e);
}

/* One untimed warm-up round of everything, then o->repeat interleaved timed rounds. */
static sdgp_status time_rounds(bench_ctx *c, const options *o, int threads, sdgp_error *e) {
    const sdgp_conv_geom *g = &c->g;
    sdgp_status st;
    for (int r = -1; r < o->repeat; r++) {
        double t0 = cli_now();
        if ((st = sdgp_conv_backward_data(c->direct, c->ref, c->dO, c->w, e)) != SDGP_OK) return st;
        double t1 = cli_now();
        if (c->wino && (st = sdgp_conv_backward_data(c->wino, c->out, c->dO, c->w, e)) != SDGP_OK) return st;
        double t2 = cli_now();
        if (r >= 0) c->t_direct[r] = t1 - t0, c->t_wino[r] = t2 - t1;
        for (int i = 0; i < o->nnm; i++) {
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, o->n[i], o->m[i]);
            cfg.threads = threads;
            cfg.mask_block = o->mask_block;
            cfg.mask_line = g->Wo; /* pixel domain: blocks along a row of dO */
            if (c->plan[i]) {
                t0 = cli_now();
                if ((st = sdgp_prune(&cfg, c->dO, g->B, (int64_t)g->Ho * g->Wo, g->Cout, NULL, &c->nm[i], e)) != SDGP_OK)
                    return st;
                t1 = cli_now();
                if ((st = sdgp_sparse_bwd_pack(c->plan[i], c->w, e)) != SDGP_OK ||
                    (st = sdgp_sparse_bwd_data(c->plan[i], c->out, &c->nm[i], e)) != SDGP_OK)
                    return st;
                t2 = cli_now();
                if (r >= 0) c->t_prune[i][r] = t1 - t0, c->t_pixel[i][r] = t2 - t1;
                /* the pruning fused into the packing */
                if ((st = sdgp_sparse_bwd_pack(c->plan[i], c->w, e)) != SDGP_OK ||
                    (st = sdgp_sparse_bwd_data_pruned(c->plan[i], c->out, c->dO, &cfg, e)) != SDGP_OK)
                    return st;
                if (r >= 0) c->t_fused[i][r] = cli_now() - t2;
            }
            if (c->wplan[i]) {
                t0 = cli_now();
                if ((st = sdgp_sparse_wino_pack(c->wplan[i], c->w, e)) != SDGP_OK ||
                    (st = sdgp_sparse_wino_data(c->wplan[i], c->out, c->dO, &cfg, e)) != SDGP_OK)
                    return st;
                if (r >= 0) c->t_wsparse[i][r] = cli_now() - t0;
            }
        }
    }
    return SDGP_OK;
}

/* Max-norm relative error (the historical rel_err) and relative L2 error of x against ref. */
static void rel_errors(const float *x, const float *ref, int64_t n, double *max_rel, double *l2_rel) {
    double diff = 0, mag = 0, d2 = 0, r2 = 0;
    for (int64_t q = 0; q < n; q++) {
        double d = (double)x[q] - ref[q], ad = fabs(d);
        if (ad > diff || ad != ad) diff = ad;
        if (fabs(ref[q]) > mag) mag = fabs(ref[q]);
        d2 += d * d, r2 += (double)ref[q] * ref[q];
    }
    *max_rel = diff / (mag > 0 ? mag : 1);
    *l2_rel = sqrt(d2) / (r2 > 0 ? sqrt(r2) : 1);
}

/* One n:m in one domain: medians and check errors (< 0: not checked). */
typedef struct {
    int ok; /* ran */
    double sparse_ms, prune_ms, rel_err, rel_l2;
    double fused_ms; /* pixel: pack + data with the pruning fused; < 0: not run */
    const char *isa;
} dom_result;

static sdgp_status result_pixel(bench_ctx *c, const options *o, int i, dom_result *d, sdgp_error *e) {
    *d = (dom_result){.ok = 1, .sparse_ms = 1e3 * cli_median(c->t_pixel[i], o->repeat),
                      .prune_ms = 1e3 * cli_median(c->t_prune[i], o->repeat), .rel_err = -1, .rel_l2 = -1,
                      .fused_ms = 1e3 * cli_median(c->t_fused[i], o->repeat),
                      .isa = sdgp_isa_name(sdgp_sparse_bwd_isa(c->plan[i]))};
    if (!o->check) return SDGP_OK;
    sdgp_status st; /* the sparse result against oneDNN on the same pruned tensor */
    if ((st = sdgp_nm_decompress(&c->nm[i], c->dO_pruned, e)) != SDGP_OK ||
        (st = sdgp_conv_backward_data(c->direct, c->ref_pruned, c->dO_pruned, c->w, e)) != SDGP_OK ||
        (st = sdgp_sparse_bwd_pack(c->plan[i], c->w, e)) != SDGP_OK ||
        (st = sdgp_sparse_bwd_data(c->plan[i], c->out, &c->nm[i], e)) != SDGP_OK)
        return st;
    rel_errors(c->out, c->ref_pruned, c->nD, &d->rel_err, &d->rel_l2);
    return SDGP_OK;
}

static sdgp_status result_wino(bench_ctx *c, const options *o, int i, dom_result *d, sdgp_error *e) {
    *d = (dom_result){.ok = 1, .sparse_ms = 1e3 * cli_median(c->t_wsparse[i], o->repeat), .prune_ms = 0, .fused_ms = -1,
                      .rel_err = -1, .rel_l2 = -1, .isa = sdgp_isa_name(sdgp_sparse_wino_isa(c->wplan[i]))};
    if (!o->check) return SDGP_OK;
    /* Pruning V has no dense oracle; the unpruned product (fn NONE, on a plan of the same m with
     * n = m) checks the transforms and the product against c->ref. */
    const sdgp_prune_cfg none = sdgp_prune_cfg_make(SDGP_PRUNE_NONE, o->m[i], o->m[i]);
    sdgp_sparse_wino *full = NULL;
    sdgp_status st = sdgp_sparse_wino_create(&full, &c->g, o->m[i], o->m[i], sdgp_sparse_wino_isa(c->wplan[i]), c->threads, e);
    if (st == SDGP_OK) st = sdgp_sparse_wino_pack(full, c->w, e);
    if (st == SDGP_OK) st = sdgp_sparse_wino_data(full, c->out, c->dO, &none, e);
    sdgp_sparse_wino_destroy(full);
    if (st != SDGP_OK) return st;
    rel_errors(c->out, c->ref, c->nD, &d->rel_err, &d->rel_l2);
    return SDGP_OK;
}

/* Auto: the domain with the smaller sparse + prune time; pixel where winograd did not run. */
static const dom_result *auto_pick(const dom_result *px, const dom_result *wi) {
    if (!wi->ok) return px;
    if (!px->ok) return wi;
    return wi->sparse_ms + wi->prune_ms < px->sparse_ms + px->prune_ms ? wi : px;
}

/* The dense side of a layer, shared by its rows. wino_ms < 0: no Winograd kernel (null). */
typedef struct {
    const bench_layer *l;
    int threads;
    double direct_ms, wino_ms, best_ms, dense_flops, ceiling;
} layer_times;

/* v formatted with fmt, or `none` when v < 0 (not measured / not applicable). */
static const char *num_or(char *buf, size_t size, const char *fmt, double v, const char *none) {
    if (v < 0) return none;
    snprintf(buf, size, fmt, v);
    return buf;
}

static void print_row(const options *o, const layer_times *t, int i, int domain, const dom_result *d, int pick_wino) {
    const bench_layer *l = t->l;
    const double useful = t->dense_flops * o->n[i] / o->m[i], gf = useful / d->sparse_ms * 1e-6;
    const double vs_best = t->best_ms / (d->sparse_ms + d->prune_ms), vs_direct = t->direct_ms / d->sparse_ms;
    char b1[32], b2[32], b3[32], b4[32], b5[32], b6[32];
    num_or(b5, sizeof b5, "%.3f", d->fused_ms, "null");
    num_or(b6, sizeof b6, "%.3f", d->fused_ms > 0 ? t->best_ms / d->fused_ms : -1, "null");
    if (o->json) {
        printf("{\"layer\":\"%s\",\"shape\":\"%d,%d,%d,%d,%d,%d,%d,%d\",\"count\":%d,\"nm\":\"%d:%d\",\"threads\":%d,"
               "\"isa\":\"%s\",\"domain\":\"%s\",\"mask_block\":%d,",
               l->name, l->B, l->H, l->W, l->Cin, l->Cout, l->k, l->stride, l->pad, l->count, o->n[i], o->m[i],
               t->threads, d->isa, domain_name(domain), o->mask_block);
        if (domain == DOM_AUTO) printf("\"auto_pick\":\"%s\",", pick_wino ? "winograd" : "pixel");
        printf("\"dense_ms\":%.3f,\"dense_direct_ms\":%.3f,\"dense_winograd_ms\":%s,\"best_dense_ms\":%.3f,"
               "\"sparse_ms\":%.3f,\"prune_ms\":%.3f,\"speedup\":%.3f,\"speedup_vs_best\":%.3f,\"gflops_useful\":%.2f,"
               "\"dense_gflops\":%.2f,\"fma_ceiling_gflops\":%.1f,\"rel_err\":%s,\"rel_l2_err\":%s,\"fused_ms\":%s,"
               "\"speedup_fused_vs_best\":%s}\n",
               t->direct_ms, t->direct_ms, num_or(b1, sizeof b1, "%.3f", t->wino_ms, "null"), t->best_ms, d->sparse_ms,
               d->prune_ms, vs_direct, vs_best, gf, t->dense_flops / t->direct_ms * 1e-6, t->ceiling,
               num_or(b2, sizeof b2, "%.3g", d->rel_err, "null"), num_or(b3, sizeof b3, "%.3g", d->rel_l2, "null"), b5, b6);
        return;
    }
    /* The ceiling bounds FMAs actually done; Winograd does fewer than the direct-terms count. */
    const char *label = domain != DOM_AUTO ? domain_name(domain) : pick_wino ? "auto>wino" : "auto>pixel";
    printf("%-26s %3d %5d:%-3d %3d %-10s %8.2f %8s %8.2f %8.2f %7.2f %7.2fx %6.2fx %6.1f %4s %8s %8s %8s\n", l->name,
           l->count, o->n[i], o->m[i], t->threads, label, t->direct_ms, num_or(b1, sizeof b1, "%.2f", t->wino_ms, "-"),
           t->best_ms, d->sparse_ms, d->prune_ms, vs_best, vs_direct, gf,
           pick_wino || domain == DOM_WINO ? "-" : num_or(b2, sizeof b2, "%.0f%%", 100 * gf / t->ceiling, "-"),
           num_or(b4, sizeof b4, "%.1e", d->rel_l2, "-"), num_or(b5, sizeof b5, "%.2f", d->fused_ms, "-"),
           num_or(b6, sizeof b6, "%.2fx", d->fused_ms > 0 ? t->best_ms / d->fused_ms : -1, "-"));
}

/* Sums per (model, n:m, threads, domain), each layer weighted by its count. */
typedef struct {
    char model[16];
    int n, m, threads, domain;
    double direct, wino, best, sparse, prune;
    int layers, wino_missing, picked_wino; /* counts: covered, without dense Winograd, auto ran winograd */
} total;

#define MAX_TOTALS (MAX_MODELS * MAX_NM * MAX_THREADS * 3)

/* Index of the total of (model, n:m, threads, domain), or -1. */
static int find_total(const total *totals, int ntotals, const char *model, int n, int m, int threads, int domain) {
    for (int q = 0; q < ntotals; q++)
        if (!strcmp(totals[q].model, model) && totals[q].n == n && totals[q].m == m && totals[q].threads == threads &&
            totals[q].domain == domain)
            return q;
    return -1;
}

static void model_of(char *out, size_t size, const char *layer_name) {
    snprintf(out, size, "%.*s", (int)strcspn(layer_name, "/"), layer_name);
}

static void add_total(total *totals, int *ntotals, const layer_times *t, int n, int m, int domain, const dom_result *d,
                      int pick_wino) {
    char model[16];
    model_of(model, sizeof model, t->l->name);
    const int q = find_total(totals, *ntotals, model, n, m, t->threads, domain);
    total *tt = q >= 0 ? &totals[q] : &totals[*ntotals];
    if (q < 0) {
        (*ntotals)++;
        *tt = (total){.n = n, .m = m, .threads = t->threads, .domain = domain};
        snprintf(tt->model, sizeof tt->model, "%s", model);
    }
    const int k = t->l->count;
    tt->direct += k * t->direct_ms, tt->best += k * t->best_ms, tt->sparse += k * d->sparse_ms, tt->prune += k * d->prune_ms;
    if (t->wino_ms >= 0) tt->wino += k * t->wino_ms;
    else tt->wino_missing += k;
    tt->layers += k, tt->picked_wino += pick_wino ? k : 0;
}

/* Builds, times and (with --check) checks every path of one layer at one thread count. */
static sdgp_status measure(bench_ctx *c, const options *o, const bench_layer *l, int threads, dom_result *px,
                           dom_result *wi, sdgp_error *e) {
    sdgp_status st;
    if ((st = ctx_setup(c, o, l, threads, e)) != SDGP_OK || (st = time_rounds(c, o, threads, e)) != SDGP_OK) return st;
    for (int i = 0; i < o->nnm; i++)
        if ((c->plan[i] && (st = result_pixel(c, o, i, &px[i], e)) != SDGP_OK) ||
            (c->wplan[i] && (st = result_wino(c, o, i, &wi[i], e)) != SDGP_OK))
            return st;
    return SDGP_OK;
}

/* The rows of one layer, one per n:m and requested domain that ran, added to the totals. */
static void emit_rows(const options *o, const layer_times *t, const dom_result *px, const dom_result *wi, total *totals,
                      int *ntotals) {
    for (int i = 0; i < o->nnm; i++)
        for (int b = 0; b < 3; b++) {
            const int dom = domain_bits[b];
            const dom_result *d = dom == DOM_PIXEL ? &px[i] : dom == DOM_WINO ? &wi[i] : auto_pick(&px[i], &wi[i]);
            if (!(o->domains & dom) || !d->ok) continue;
            print_row(o, t, i, dom, d, d == &wi[i]);
            add_total(totals, ntotals, t, o->n[i], o->m[i], dom, d, d == &wi[i]);
        }
    fflush(stdout);
}

/* Times one layer at one thread count and prints its rows. 0 ok, 1 failure (printed). */
static int run_layer(const options *o, const bench_layer *l, int threads, double ceiling, total *totals, int *ntotals) {
    sdgp_error e;
    sdgp_error_clear(&e);
    dom_result px[MAX_NM] = {{0}}, wi[MAX_NM] = {{0}};
    bench_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "sdgp: %s: out of memory\n", l->name);
        return 1;
    }
    if (measure(c, o, l, threads, px, wi, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s: %s\n", l->name, e.msg);
        ctx_free(c);
        return 1;
    }
    layer_times t = {.l = l, .threads = threads, .direct_ms = 1e3 * cli_median(c->t_direct, o->repeat), .wino_ms = -1,
                     .dense_flops = 2.0 * valid_pairs(&c->g) * c->g.Cin * c->g.Cout / c->g.groups,
                     .ceiling = ceiling};
    if (c->wino) t.wino_ms = 1e3 * cli_median(c->t_wino, o->repeat);
    t.best_ms = t.wino_ms >= 0 && t.wino_ms < t.direct_ms ? t.wino_ms : t.direct_ms;
    if (!o->json && (o->domains & DOM_WINO) && !c->wplan[0])
        printf("# %s: no winograd-domain row (3x3 stride 1 only)\n", l->name);
    ctx_free(c);
    emit_rows(o, &t, px, wi, totals, ntotals);
    int rc = 0;
    for (int i = 0; i < o->nnm; i++)
        if (wi[i].ok && o->check && !(wi[i].rel_l2 <= WINO_CHECK_LIMIT)) { /* NaN fails too */
            fprintf(stderr, "sdgp: %s %d:%d: CHECK FAILED: the unpruned winograd-domain product is off oneDNN direct by "
                    "relative L2 error %.3g (limit %g)\n", l->name, o->n[i], o->m[i], wi[i].rel_l2, WINO_CHECK_LIMIT);
            rc = 1;
        }
    return rc;
}

/* Sum of counts of the layers of `model`: what a total covering every layer covers. */
static int model_count(const options *o, const char *model) {
    int k = 0;
    char name[16];
    for (int li = 0; li < o->nlayers; li++) {
        model_of(name, sizeof name, o->layers[li].name);
        k += strcmp(name, model) ? 0 : o->layers[li].count;
    }
    return k;
}

static void print_total(const options *o, const total *t, const char *isa) {
    const int all = model_count(o, t->model);
    const double vs_best = t->best / (t->sparse + t->prune), vs_direct = t->direct / t->sparse;
    char b1[32], note[64] = "";
    const double wino = t->wino_missing ? -1 : t->wino; /* a partial sum would compare unlike sets */
    if (o->json) {
        printf("{\"layer\":\"%s/total\",\"nm\":\"%d:%d\",\"threads\":%d,\"isa\":\"%s\",\"domain\":\"%s\",\"mask_block\":%d,\"dense_ms\":%.3f,"
               "\"dense_direct_ms\":%.3f,\"dense_winograd_ms\":%s,\"best_dense_ms\":%.3f,\"sparse_ms\":%.3f,"
               "\"prune_ms\":%.3f,\"speedup\":%.3f,\"speedup_vs_best\":%.3f,\"layers\":%d,\"model_layers\":%d",
               t->model, t->n, t->m, t->threads, isa, domain_name(t->domain), o->mask_block, t->direct, t->direct,
               num_or(b1, sizeof b1, "%.3f", wino, "null"), t->best, t->sparse, t->prune, vs_direct, vs_best, t->layers, all);
        if (t->domain == DOM_AUTO) printf(",\"auto_winograd_layers\":%d", t->picked_wino);
        printf("}\n");
        return;
    }
    if (t->domain == DOM_AUTO) snprintf(note, sizeof note, "(winograd in %d of %d)", t->picked_wino, t->layers);
    else if (t->layers < all) snprintf(note, sizeof note, "(%d of %d layers)", t->layers, all);
    char name[24];
    snprintf(name, sizeof name, "%s/total", t->model);
    printf("%-26s %3d %5d:%-3d %3d %-10s %8.2f %8s %8.2f %8.2f %7.2f %7.2fx %6.2fx%s%s\n", name, t->layers, t->n, t->m,
           t->threads, domain_name(t->domain), t->direct, num_or(b1, sizeof b1, "%.2f", wino, "-"), t->best, t->sparse,
           t->prune, vs_best, vs_direct, note[0] ? "  " : "", note);
}

/* Totals grouped by threads, model, n:m, domain, in the order they were asked for. */
static void print_totals(const options *o, const total *totals, int ntotals, const char *isa) {
    for (int ti = 0; ti < o->nthreads; ti++)
        for (int li = 0; li < o->nlayers; li++) {
            char model[16], prev[16] = "";
            model_of(model, sizeof model, o->layers[li].name);
            if (li) model_of(prev, sizeof prev, o->layers[li - 1].name);
            if (li && !strcmp(model, prev)) continue; /* a model's layers are adjacent */
            for (int i = 0; i < o->nnm; i++)
                for (int b = 0; b < 3; b++) {
                    const int q = find_total(totals, ntotals, model, o->n[i], o->m[i], (int)o->threads[ti], domain_bits[b]);
                    if (q >= 0) print_total(o, &totals[q], isa);
                }
        }
}

static void print_header(const options *o, int threads, double ceiling, const char *isa) {
    if (o->json) {
        printf("{\"fma_ceiling_gflops\":%.1f,\"threads\":%d,\"isa\":\"%s\",\"dense_winograd_workspace_mb\":%d}\n", ceiling,
               threads, isa, (int)(WINO_WORKSPACE >> 20));
        return;
    }
    printf("# threads %d: FMA ceiling %.1f GFLOP/s (%s, pure register loop); ms: medians of %d runs\n"
           "# direct, wino: dense backward-data, oneDNN's direct and the Winograd (%d MB workspace; oneDNN's, else"
           " sdgp's: SDGP_WINOGRAD; - where it does not apply); best: the faster\n"
           "# sparse: pack + data (winograd: pruning fused); prune: sdgp_prune (pixel); vs_best = best / (sparse + prune);"
           " vs_dir = direct / sparse\n"
           "# fused: pack + data with the pruning inside the packing (pixel; no separate prune); vs_best_f = best / fused\n"
           "# GF/s: useful FLOPs in direct terms; ceil: of the FMA ceiling (pixel); relL2: vs oneDNN direct (pixel: pruned"
           " dO; winograd: unpruned)\n"
           "# cnt: occurrences in the model, the layer's weight in the totals\n"
           "%-26s %3s %9s %3s %-10s %8s %8s %8s %8s %7s %8s %7s %6s %4s %8s %8s %8s\n",
           threads, ceiling, isa, o->repeat, (int)(WINO_WORKSPACE >> 20), "layer", "cnt", "n:m  ", "thr", "domain", "direct",
           "wino", "best", "sparse", "prune", "vs_best", "vs_dir", "GF/s", "ceil", "relL2", "fused", "vs_best_f");
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
    static total totals[MAX_TOTALS];
    int ntotals = 0;
    for (int ti = 0; ti < o.nthreads; ti++) {
        int threads = (int)o.threads[ti];
        double ceiling = spconv_fma_ceiling(isa, threads, 0.2);
        print_header(&o, threads, ceiling, sdgp_isa_name(isa));
        for (int li = 0; li < o.nlayers; li++) {
            int rc = run_layer(&o, &o.layers[li], threads, ceiling, totals, &ntotals);
            if (rc) return rc;
        }
    }
    print_totals(&o, totals, ntotals, sdgp_isa_name(isa));
    return 0;
}
