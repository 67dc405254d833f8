/* sdgp bench linear: every N:M product of a linear layer against oneDNN's dense matmul (issue 56).
 *
 * A linear layer Y = X W^T (X: T tokens x in, W: out x in, PyTorch's layout) has three products per
 * training step, and each is a 1x1 convolution of B = T images of 1x1 pixels (NHWC activations are
 * tokens x features row-major, OIHW weights out x in), so the library's N:M kernels run them as they
 * are. For every shape, n:m and thread count, one row per (product, sparse form):
 *   fwd    Y  = X W~^T, W~ the S-STE projection of W (sdgp_weights_project, scale 1) in a form the
 *          forward kernels take: cout (masks along output features, sdgp_sparse_fwd_create_cout),
 *          block16 / block32 (16 / 32 output features share one mask over the input features,
 *          sdgp_sparse_fwd_create). prune_ms = the projection, kernel_ms = pack + run.
 *   dgrad  dX = prune(dY along out features) W, SDGP with magnitude pruning as `bench conv`:
 *          sdgp (prune_ms = sdgp_prune into the compressed form, kernel_ms = sdgp_sparse_bwd_pack +
 *          _data) and sdgp-fused (the pruning inside the packing: _pack + _data_pruned, prune_ms 0).
 *   wgrad  dW = prune(dY along tokens, MVUE)^T X: prune_ms = sdgp_prune (row axis, compressed),
 *          kernel_ms = sdgp_sparse_wgrad_run.
 * sparse_ms = prune_ms + kernel_ms. The dense side of each product is timed twice: oneDNN's matmul
 * (one call, src/nn/matmul_dnnl.c, transposes as strides) and oneDNN's 1x1 convolution (sdgp_conv,
 * direct: its Winograd takes 3x3 kernels only) on the same memory in two geometries, the sparse kernels'
 * (conv-i: each sequence of SEQ tokens an image of rows of L tokens, row_tokens) or T pixels of one image (conv-p),
 * the faster of the two as the conv column: oneDNN's 1x1 kernel ran 4-5x faster as pixels on the Zen 5
 * host (4096,768,3072, 2 threads: 50-57 against 240-270 ms a pass). best_dense_ms is the fastest,
 * speedup_vs_best = best_dense_ms / sparse_ms (speedup_kernel_vs_best: over kernel_ms alone, the
 * comparison for fwd, where a dense S-STE step pays the projection too). Useful FLOPs: 2 T in out n/m,
 * GF/s over kernel_ms, and its fraction of the FMA ceiling (a pure register FMA loop on the same
 * threads, measured in the run). --check: each sparse result against oneDNN's matmul on the same
 * sparse operand (W~, or the dense form of the pruned dY), and the two dense products against each
 * other; a relative L2 error above 1e-3 fails the command. The dense and sparse runs alternate within
 * each repetition (drift hits all alike); medians of --repeat runs after one untimed round. --mask-block P:
 * dgrad's masks shared by blocks of P tokens along the rows of that geometry (the plans told so). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/cache.h"
#include "kernels/spconv_internal.h"
#include "nn/matmul_dnnl.h"
#include "sdgp/conv.h"
#include "sdgp/nn.h"
#include "sdgp/prune.h"
#include "sdgp/sparse.h"

#define MAX_SHAPES 8
#define MAX_NM 4
#define MAX_THREADS 8
#define MAX_REPEAT 1000
#define CHECK_LIMIT 1e-3 /* fp32 rounding of these sums is ~1e-6; above this the result is wrong */

enum { P_FWD, P_DGRAD, P_WGRAD, NPROD };
static const char *const prod_names[NPROD] = {"fwd", "dgrad", "wgrad"};

/* The sparse forms, each of one product; group: the weight projection's (fwd only). */
enum { V_COUT, V_B16, V_B32, V_SDGP, V_FUSED, V_MVUE, NVAR };
static const struct {
    int prod;
    const char *form, *kernel;
    sdgp_weights_group group;
} vars[NVAR] = {{P_FWD, "sste-cout", "fwd-cout", SDGP_WGROUP_COUT},
                {P_FWD, "sste-block16", "fwd-block16", SDGP_WGROUP_BLOCK16},
                {P_FWD, "sste-block32", "fwd-block32", SDGP_WGROUP_BLOCK32},
                {P_DGRAD, "sdgp", "bwd", 0},
                {P_DGRAD, "sdgp-fused", "bwd-fused", 0},
                {P_WGRAD, "mvue", "wgrad", 0}};

typedef struct {
    char name[24];
    int T, in, out, seq; /* seq: tokens per sequence (a sample), dividing T */
} shape;

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdgp bench linear [options]\n\n"
            "Times the three products of a linear layer Y = X W^T (T tokens, in -> out features) with N:M\n"
            "sparse operands against oneDNN's dense matmul and its dense 1x1 convolution (the tokens as images\n"
            "or as pixels of one image, the faster): the forward with\n"
            "S-STE weights (forms cout, block16, block32), the data gradient with SDGP (dY pruned along the\n"
            "output features, magnitude; also fused into the packing), the weight gradient with MVUE (dY\n"
            "pruned along the tokens). Pruning is timed within the sparse time and as a column of its own.\n\n"
            "options:\n"
            "  --model vit|gpt2|all  shapes T,in,out (default all): gpt2 = GPT-2-small / ViT-B MLP at 4096 tokens\n"
            "                       (4096,768,3072 and 4096,3072,768); vit = examples/vit_fashion_mnist.py's MLP\n"
            "                       at its default batch 128 (50 tokens an image with the class token: 6400,192,768\n"
            "                       and 6400,768,192)\n"
            "  --shape T,IN,OUT[,SEQ]  a layer instead of (or, with --model, beside) a model's; SEQ tokens a\n"
            "                       sequence (default T; gpt2: 1024, vit: 50); repeatable\n"
            "  --mask-block P       SDGP's masks shared by P consecutive tokens of a sequence (default 1: a\n"
            "                       mask per token; the sparse kernels see a sequence as rows of L tokens,\n"
            "                       L = SEQ up to 256, else its largest divisor up to 256: blocks stay in a row)\n"
            "  --nm LIST            n:m patterns, comma separated (default 2:4,1:4)\n"
            "  --threads LIST       thread counts (default 1,2)\n"
            "  --repeat N           timed runs per measurement, median reported (default 5)\n"
            "  --isa auto|ref|avx2|avx512   sparse kernel and pruning path (default auto)\n"
            "  --check, --no-check  each sparse result against oneDNN's matmul on the same sparse operand, and\n"
            "                       matmul against the 1x1 conv; relative L2 error above 1e-3 fails (default on)\n"
            "  --json               one JSON object per line instead of the table\n"
            "  --help               this text\n");
}

typedef struct {
    shape shapes[MAX_SHAPES];
    int nshapes;
    int n[MAX_NM], m[MAX_NM], nnm;
    long threads[MAX_THREADS];
    int nthreads, repeat, json, check, mask_block;
    sdgp_isa isa;
} options;

static int add_shape(options *o, const char *name, int T, int in, int out, int seq) {
    if (o->nshapes == MAX_SHAPES) {
        fprintf(stderr, "sdgp: --shape: at most %d shapes\n", MAX_SHAPES);
        return 0;
    }
    shape *s = &o->shapes[o->nshapes++];
    *s = (shape){.T = T, .in = in, .out = out, .seq = seq};
    snprintf(s->name, sizeof s->name, "%s", name);
    return 1;
}

static int parse_shape(options *o, const char *text) {
    int v[4];
    char tail;
    const int k = sscanf(text, "%d,%d,%d,%d%c", &v[0], &v[1], &v[2], &v[3], &tail);
    if (k == 3) v[3] = v[0];
    if ((k != 3 && k != 4) || v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1) {
        fprintf(stderr, "sdgp: --shape: '%s' is not T,IN,OUT or T,IN,OUT,SEQ (positive integers)\n", text);
        return 0;
    }
    if (v[0] % v[3]) {
        fprintf(stderr, "sdgp: --shape: '%s': SEQ=%d does not divide the T=%d tokens\n", text, v[3], v[0]);
        return 0;
    }
    return add_shape(o, "shape", v[0], v[1], v[2], v[3]);
}

static int add_model(options *o, const char *model) {
    const int gpt2 = !strcmp(model, "gpt2") || !strcmp(model, "all"), vit = !strcmp(model, "vit") || !strcmp(model, "all");
    if (!gpt2 && !vit) {
        fprintf(stderr, "sdgp: --model: '%s' is not vit, gpt2 or all\n", model);
        return 0;
    }
    /* vit: width 192, MLP ratio 4, (49 patches + the class token) x batch 128 (the example's defaults) */
    return (!gpt2 || (add_shape(o, "gpt2/fc1", 4096, 768, 3072, 1024) && add_shape(o, "gpt2/fc2", 4096, 3072, 768, 1024))) &&
           (!vit || (add_shape(o, "vit/fc1", 6400, 192, 768, 50) && add_shape(o, "vit/fc2", 6400, 768, 192, 50)));
}

/* 1 ok, 0 --help printed, -1 bad usage (message printed). */
static int parse_options(int argc, char **argv, options *o) {
    memset(o, 0, sizeof *o);
    o->repeat = 5;
    o->check = 1;
    o->isa = SDGP_ISA_AUTO;
    o->mask_block = 1;
    const char *model = NULL, *nm = "2:4,1:4", *threads = "1,2";
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
                   !strcmp(a, "--repeat") || !strcmp(a, "--isa") || !strcmp(a, "--mask-block")) {
            if (!val) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return -1;
            }
            i++;
            if (!strcmp(a, "--model")) model = val;
            else if (!strcmp(a, "--shape")) {
                if (!parse_shape(o, val)) return -1;
            } else if (!strcmp(a, "--nm")) nm = val;
            else if (!strcmp(a, "--threads")) threads = val;
            else if (!strcmp(a, "--repeat")) {
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
            fprintf(stderr, "sdgp: bench linear: unknown option '%s' (see --help)\n", a);
            return -1;
        }
    }
    if ((model || !o->nshapes) && !add_model(o, model ? model : "all")) return -1;
    if (!(o->nnm = cli_parse_nm_list("--nm", nm, o->n, o->m, MAX_NM))) return -1;
    o->nthreads = cli_parse_int_list("--threads", threads, 1, 256, o->threads, MAX_THREADS);
    return o->nthreads ? 1 : -1;
}

/* Everything one (shape, threads) measurement needs. A NULL plan: that form does not run (skip says why). */
typedef struct {
    const shape *s;
    sdgp_conv_geom g;
    int threads;
    float *x, *w, *dy, *wt, *dyp, *out, *ref;
    matmul_dnnl *mm[NPROD];
    sdgp_conv *conv[2]; /* the tokens as images (B = T), as pixels (W = T) */
    sdgp_nm_tensor nmc[MAX_NM], nmr[MAX_NM]; /* dY compressed along features (dgrad), along tokens (wgrad) */
    sdgp_sparse_bwd *bwd[MAX_NM];
    sdgp_sparse_wgrad *wg[MAX_NM];
    sdgp_sparse_fwd *fwd[MAX_NM][3];
    char skip[MAX_NM][NVAR][SDGP_ERROR_MSG_LEN];
    double t_mm[NPROD][MAX_REPEAT], t_conv[2][NPROD][MAX_REPEAT];
    double t_prune[MAX_NM][NVAR][MAX_REPEAT], t_kern[MAX_NM][NVAR][MAX_REPEAT];
} bench_ctx;

static void ctx_free(bench_ctx *c) {
    if (!c) return;
    free(c->x), free(c->w), free(c->dy), free(c->wt), free(c->dyp), free(c->out), free(c->ref);
    for (int p = 0; p < NPROD; p++) matmul_dnnl_destroy(c->mm[p]);
    sdgp_conv_destroy(c->conv[0]), sdgp_conv_destroy(c->conv[1]);
    for (int i = 0; i < MAX_NM; i++) {
        sdgp_nm_free(&c->nmc[i]), sdgp_nm_free(&c->nmr[i]);
        sdgp_sparse_bwd_destroy(c->bwd[i]);
        sdgp_sparse_wgrad_destroy(c->wg[i]);
        for (int f = 0; f < 3; f++) sdgp_sparse_fwd_destroy(c->fwd[i][f]);
    }
    free(c);
}

static void fill_normal(float *x, int64_t n, uint64_t seed) {
    for (int64_t i = 0; i < n; i += 2) { /* Box-Muller on a splitmix stream, as bench conv */
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

/* dgrad: magnitude along the features, masks shared in blocks of --mask-block tokens along the rows of
 * the sparse geometry (line = its Wo); wgrad: MVUE along the tokens */
static sdgp_prune_cfg prune_cfg(const options *o, const sdgp_conv_geom *g, int i, int threads, int wgrad) {
    sdgp_prune_cfg cfg = sdgp_prune_cfg_make(wgrad ? SDGP_PRUNE_MVUE : SDGP_PRUNE_MAGNITUDE, o->n[i], o->m[i]);
    cfg.axis = wgrad ? SDGP_AXIS_ROW : SDGP_AXIS_CHANNEL;
    cfg.isa = o->isa, cfg.threads = threads, cfg.seed = 7, cfg.step = 1;
    if (!wgrad) cfg.mask_block = o->mask_block, cfg.mask_line = g->Wo;
    return cfg;
}

/* The row length of a sequence in the sparse geometry: all of it up to 256 tokens, else its largest
 * divisor up to 256 (rows of a few hundred tokens keep the kernel's work units small). */
static int row_tokens(int seq) {
    int L = seq <= 256 ? seq : 256;
    while (seq % L) L--;
    return L;
}

/* A form's plan, or its reason to skip: a shape or n:m the kernel does not take (UNSUPPORTED, or
 * INVALID for a divisibility the kernel requires) is a skipped row, anything else a failure. */
static sdgp_status plan_or_skip(sdgp_status st, char *skip, size_t size, sdgp_error *e) {
    if (st != SDGP_ERR_UNSUPPORTED && st != SDGP_ERR_INVALID) return st;
    snprintf(skip, size, "%s", e->msg);
    for (char *q = skip; *q; q++) /* it goes into a JSON string as it is */
        if (*q == '"' || *q == '\\' || (unsigned char)*q < 0x20) *q = '\'';
    return SDGP_OK;
}

static sdgp_status create_sparse(bench_ctx *c, const options *o, sdgp_error *e) {
    const shape *s = c->s;
    sdgp_status st;
    for (int i = 0; i < o->nnm; i++) {
        const int n = o->n[i], m = o->m[i];
        if (s->out % m == 0) {
            if ((st = sdgp_nm_alloc(&c->nmc[i], SDGP_AXIS_CHANNEL, n, m, s->T, s->out, e)) != SDGP_OK) return st;
            st = sdgp_sparse_bwd_create(&c->bwd[i], &c->g, n, m, o->isa, c->threads, e);
            if (st == SDGP_OK && o->mask_block > 1) st = sdgp_sparse_bwd_set_mask_block(c->bwd[i], o->mask_block, e);
            if ((st = plan_or_skip(st, c->skip[i][V_SDGP], sizeof c->skip[i][V_SDGP], e)) != SDGP_OK) return st;
        } else {
            snprintf(c->skip[i][V_SDGP], sizeof c->skip[i][V_SDGP], "out=%d is not a multiple of m=%d", s->out, m);
        }
        if (!c->bwd[i]) memcpy(c->skip[i][V_FUSED], c->skip[i][V_SDGP], sizeof c->skip[i][V_SDGP]);
        if (s->T % m == 0) {
            if ((st = sdgp_nm_alloc(&c->nmr[i], SDGP_AXIS_ROW, n, m, s->T, s->out, e)) != SDGP_OK) return st;
            st = sdgp_sparse_wgrad_create(&c->wg[i], &c->g, n, m, o->isa, c->threads, e);
            if ((st = plan_or_skip(st, c->skip[i][V_MVUE], sizeof c->skip[i][V_MVUE], e)) != SDGP_OK) return st;
        } else {
            snprintf(c->skip[i][V_MVUE], sizeof c->skip[i][V_MVUE], "T=%d tokens is not a multiple of m=%d", s->T, m);
        }
        st = sdgp_sparse_fwd_create_cout(&c->fwd[i][0], &c->g, n, m, o->isa, c->threads, e);
        if ((st = plan_or_skip(st, c->skip[i][V_COUT], sizeof c->skip[i][V_COUT], e)) != SDGP_OK) return st;
        for (int b = 0; b < 2; b++) {
            char *why = c->skip[i][V_B16 + b];
            if (s->in % m) { /* the block form's groups run along the input features */
                snprintf(why, sizeof c->skip[i][0], "in=%d is not a multiple of m=%d", s->in, m);
                continue;
            }
            st = sdgp_sparse_fwd_create(&c->fwd[i][1 + b], &c->g, n, m, b ? 32 : 16, o->isa, c->threads, e);
            if ((st = plan_or_skip(st, why, sizeof c->skip[i][0], e)) != SDGP_OK) return st;
        }
    }
    return SDGP_OK;
}

static int runs(const bench_ctx *c, int i, int v) {
    return v <= V_B32 ? c->fwd[i][v] != NULL : v == V_MVUE ? c->wg[i] != NULL : c->bwd[i] != NULL;
}

static sdgp_status ctx_setup(bench_ctx *c, const options *o, sdgp_error *e) {
    const shape *s = c->s;
    sdgp_conv_geom gp; /* the tokens as pixels: the dense conv's other geometry */
    const int L = row_tokens(s->seq); /* sequences as images of rows of L tokens */
    sdgp_status st = sdgp_conv_geom_init(&c->g, s->T / s->seq, s->seq / L, L, s->in, s->out, 1, 1, 1, 0, e);
    if (st == SDGP_OK) st = sdgp_conv_geom_init(&gp, 1, 1, s->T, s->in, s->out, 1, 1, 1, 0, e);
    if (st != SDGP_OK) return st;
    const size_t nx = (size_t)s->T * s->in, ny = (size_t)s->T * s->out, nw = (size_t)s->out * s->in;
    size_t most = nx > ny ? nx : ny;
    most = most > nw ? most : nw;
    c->x = cli_alloc_floats(nx), c->w = cli_alloc_floats(nw), c->dy = cli_alloc_floats(ny);
    c->wt = cli_alloc_floats(nw), c->dyp = cli_alloc_floats(ny), c->out = cli_alloc_floats(most);
    c->ref = cli_alloc_floats(most);
    if (!c->x || !c->w || !c->dy || !c->wt || !c->dyp || !c->out || !c->ref)
        return sdgp_fail(e, SDGP_ERR_NOMEM, "out of memory for the layer's tensors");
    fill_normal(c->x, (int64_t)nx, 1);
    fill_normal(c->w, (int64_t)nw, 2);
    fill_normal(c->dy, (int64_t)ny, 3);
    /* forward X W^T; data gradient dY W; weight gradient dY^T X (see matmul_dnnl.h) */
    if ((st = matmul_dnnl_create(&c->mm[P_FWD], s->T, s->out, s->in, 0, 1, c->threads, e)) != SDGP_OK ||
        (st = matmul_dnnl_create(&c->mm[P_DGRAD], s->T, s->in, s->out, 0, 0, c->threads, e)) != SDGP_OK ||
        (st = matmul_dnnl_create(&c->mm[P_WGRAD], s->out, s->in, s->T, 1, 0, c->threads, e)) != SDGP_OK ||
        (st = sdgp_conv_create(&c->conv[0], &c->g, 0, c->threads, e)) != SDGP_OK ||
        (st = sdgp_conv_create(&c->conv[1], &gp, 0, c->threads, e)) != SDGP_OK)
        return st;
    return create_sparse(c, o, e);
}

/* The dense product p: by matmul (how 0) or by the 1x1 convolution, tokens as images (1) or as
 * pixels (2), into out. */
static sdgp_status dense(bench_ctx *c, int p, int how, float *out, const float *dy, const float *w, sdgp_error *e) {
    sdgp_conv *cv = how ? c->conv[how - 1] : NULL;
    if (p == P_FWD) return cv ? sdgp_conv_forward(cv, out, c->x, w, NULL, e) : matmul_dnnl_run(c->mm[p], out, c->x, w, e);
    if (p == P_DGRAD) return cv ? sdgp_conv_backward_data(cv, out, dy, w, e) : matmul_dnnl_run(c->mm[p], out, dy, w, e);
    return cv ? sdgp_conv_backward_weights(cv, out, NULL, c->x, dy, e) : matmul_dnnl_run(c->mm[p], out, dy, c->x, e);
}

/* Form v at n:m i: its pruning or projection (timed into *tp), then its kernel (*tk), result in c->out.
 * dense_out (nullable): the dense form of the pruned dY as well (the check's operand; untimed runs). */
static sdgp_status run_form(bench_ctx *c, const options *o, int i, int v, double *tp, double *tk, float *dense_out,
                            sdgp_error *e) {
    const shape *s = c->s;
    sdgp_status st = SDGP_OK;
    double t0 = cli_now(), t1;
    if (v <= V_B32) {
        sdgp_weights_project(c->wt, c->w, s->out, s->in, 1, SDGP_WEIGHTS_SSTE, vars[v].group, o->n[i], o->m[i], 1.0f);
        t1 = cli_now();
        if ((st = sdgp_sparse_fwd_pack(c->fwd[i][v], c->wt, e)) == SDGP_OK) st = sdgp_sparse_fwd_run(c->fwd[i][v], c->out, c->x, e);
    } else if (v == V_SDGP || v == V_MVUE) {
        const sdgp_prune_cfg cfg = prune_cfg(o, &c->g, i, c->threads, v == V_MVUE);
        sdgp_nm_tensor *nm = v == V_MVUE ? &c->nmr[i] : &c->nmc[i];
        if ((st = sdgp_prune(&cfg, c->dy, s->T / s->seq, s->seq, s->out, dense_out, nm, e)) != SDGP_OK) return st;
        t1 = cli_now();
        if (v == V_MVUE) st = sdgp_sparse_wgrad_run(c->wg[i], c->out, c->x, nm, e);
        else if ((st = sdgp_sparse_bwd_pack(c->bwd[i], c->w, e)) == SDGP_OK) st = sdgp_sparse_bwd_data(c->bwd[i], c->out, nm, e);
    } else { /* fused: the same magnitude masks as V_SDGP's, chosen inside the packing */
        const sdgp_prune_cfg cfg = prune_cfg(o, &c->g, i, c->threads, 0);
        t1 = t0;
        if ((st = sdgp_sparse_bwd_pack(c->bwd[i], c->w, e)) == SDGP_OK)
            st = sdgp_sparse_bwd_data_pruned(c->bwd[i], c->out, c->dy, &cfg, e);
        if (st == SDGP_OK && dense_out) st = sdgp_prune(&cfg, c->dy, s->T / s->seq, s->seq, s->out, dense_out, NULL, e);
    }
    *tp = t1 - t0, *tk = cli_now() - t1;
    return st;
}

/* One untimed warm-up round, then o->repeat rounds; within a round each product's dense runs and then
 * its sparse forms, so that the machine's drift hits them alike. */
static sdgp_status time_rounds(bench_ctx *c, const options *o, sdgp_error *e) {
    sdgp_status st;
    for (int r = -1; r < o->repeat; r++)
        for (int p = 0; p < NPROD; p++) {
            double t[4] = {cli_now()};
            for (int how = 0; how < 3; how++) {
                if ((st = dense(c, p, how, c->out, c->dy, c->w, e)) != SDGP_OK) return st;
                t[how + 1] = cli_now();
            }
            if (r >= 0) c->t_mm[p][r] = t[1] - t[0], c->t_conv[0][p][r] = t[2] - t[1], c->t_conv[1][p][r] = t[3] - t[2];
            for (int i = 0; i < o->nnm; i++)
                for (int v = 0; v < NVAR; v++) {
                    double tp, tk;
                    if (vars[v].prod != p || !runs(c, i, v)) continue;
                    if ((st = run_form(c, o, i, v, &tp, &tk, NULL, e)) != SDGP_OK) return st;
                    if (r >= 0) c->t_prune[i][v][r] = tp, c->t_kern[i][v][r] = tk;
                }
        }
    return SDGP_OK;
}

static double rel_l2(const float *x, const float *ref, size_t n) {
    double d2 = 0, r2 = 0;
    for (size_t q = 0; q < n; q++) {
        const double d = (double)x[q] - ref[q];
        d2 += d * d, r2 += (double)ref[q] * ref[q];
    }
    return sqrt(d2) / (r2 > 0 ? sqrt(r2) : 1);
}

static size_t prod_size(const shape *s, int p) {
    return p == P_FWD ? (size_t)s->T * s->out : p == P_DGRAD ? (size_t)s->T * s->in : (size_t)s->out * s->in;
}

/* Form v's result against oneDNN's matmul on its sparse operand (W~, or the pruned dY made dense). */
static sdgp_status check_form(bench_ctx *c, const options *o, int i, int v, double *err_out, sdgp_error *e) {
    double tp, tk;
    const int p = vars[v].prod;
    sdgp_status st = run_form(c, o, i, v, &tp, &tk, c->dyp, e);
    if (st == SDGP_OK) st = dense(c, p, 0, c->ref, c->dyp, p == P_FWD ? c->wt : c->w, e);
    if (st == SDGP_OK) *err_out = rel_l2(c->out, c->ref, prod_size(c->s, p));
    return st;
}

/* The dense products of p against each other (the larger error of the two convs against the matmul):
 * a wrong stride in one shows here. */
static sdgp_status check_dense(bench_ctx *c, int p, double *err_out, sdgp_error *e) {
    sdgp_status st = dense(c, p, 0, c->ref, c->dy, c->w, e);
    *err_out = 0;
    for (int how = 1; how < 3 && st == SDGP_OK; how++) {
        if ((st = dense(c, p, how, c->out, c->dy, c->w, e)) != SDGP_OK) break;
        const double err = rel_l2(c->out, c->ref, prod_size(c->s, p));
        if (!(err <= *err_out)) *err_out = err; /* NaN sticks */
    }
    return st;
}

static const char *num_or(char *buf, size_t size, const char *fmt, double v, const char *none) {
    if (v < 0) return none;
    snprintf(buf, size, fmt, v);
    return buf;
}

/* One row: form v at n:m i. Returns 1 when its check failed. */
static int print_row(bench_ctx *c, const options *o, int i, int v, double ceiling, double dense_err) {
    const shape *s = c->s;
    const int p = vars[v].prod;
    const double mm = 1e3 * cli_median(c->t_mm[p], o->repeat), ci = 1e3 * cli_median(c->t_conv[0][p], o->repeat);
    const double cp = 1e3 * cli_median(c->t_conv[1][p], o->repeat), cv = ci <= cp ? ci : cp;
    const char *best_name = mm <= cv ? "matmul" : ci <= cp ? "conv-i" : "conv-p";
    const double best = mm <= cv ? mm : cv, prune = 1e3 * cli_median(c->t_prune[i][v], o->repeat);
    const double kern = 1e3 * cli_median(c->t_kern[i][v], o->repeat), sparse = prune + kern;
    const double flops = 2.0 * s->T * s->in * s->out, gf = flops * o->n[i] / o->m[i] / kern * 1e-6;
    double err = -1;
    sdgp_error e;
    if (o->check && check_form(c, o, i, v, &err, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: %s %d:%d %s: %s\n", s->name, o->n[i], o->m[i], vars[v].form, e.msg);
        return 1;
    }
    const sdgp_isa isa = v <= V_B32 ? sdgp_sparse_fwd_isa(c->fwd[i][v]) : v == V_MVUE ? sdgp_sparse_wgrad_isa(c->wg[i])
                                                                                     : sdgp_sparse_bwd_isa(c->bwd[i]);
    char kernel[40], b1[32], b2[32];
    snprintf(kernel, sizeof kernel, "%s/%s", vars[v].kernel, sdgp_isa_name(isa));
    if (o->json) {
        printf("{\"layer\":\"%s\",\"shape\":\"%d,%d,%d\",\"tokens\":%d,\"in\":%d,\"out\":%d,\"seq\":%d,\"mask_block\":%d,"
               "\"nm\":\"%d:%d\",\"threads\":%d,"
               "\"product\":\"%s\",\"form\":\"%s\",\"kernel\":\"%s\",\"isa\":\"%s\",\"matmul_impl\":\"%s\","
               "\"dense_matmul_ms\":%.3f,\"dense_conv_ms\":%.3f,\"dense_conv_images_ms\":%.3f,\"dense_conv_pixels_ms\":%.3f,"
               "\"best_dense\":\"%s\",\"best_dense_ms\":%.3f,"
               "\"sparse_ms\":%.3f,\"prune_ms\":%.3f,\"kernel_ms\":%.3f,\"speedup_vs_best\":%.3f,"
               "\"speedup_kernel_vs_best\":%.3f,\"gflops_useful\":%.2f,\"dense_gflops\":%.2f,\"fma_ceiling_gflops\":%.1f,"
               "\"ceiling_fraction\":%.3f,\"rel_l2_err\":%s,\"dense_rel_l2_err\":%s}\n",
               s->name, s->T, s->in, s->out, s->T, s->in, s->out, s->seq, o->mask_block, o->n[i], o->m[i], c->threads, prod_names[p],
               vars[v].form, kernel, sdgp_isa_name(isa), matmul_dnnl_impl(c->mm[p]), mm, cv, ci, cp, best_name, best, sparse, prune, kern, best / sparse, best / kern, gf, flops / best * 1e-6, ceiling, gf / ceiling,
               num_or(b1, sizeof b1, "%.3g", err, "null"), num_or(b2, sizeof b2, "%.3g", dense_err, "null"));
    } else {
        printf("%-9s %3d:%-3d %3d %-5s %-12s %-18s %8.2f %8.2f %-6s %8.2f %7.2f %8.2f %6.2fx %6.2fx %6.1f %4.0f%% %8s\n",
               s->name, o->n[i], o->m[i], c->threads, prod_names[p], vars[v].form, kernel, mm, cv, best_name,
               sparse, prune, kern, best / sparse, best / kern, gf, 100 * gf / ceiling, num_or(b1, sizeof b1, "%.1e", err, "-"));
    }
    if (o->check && !(err <= CHECK_LIMIT)) { /* NaN fails too */
        fprintf(stderr, "sdgp: %s %d:%d %s: CHECK FAILED: relative L2 error %.3g against oneDNN's matmul on the same "
                "sparse operand (limit %g)\n", s->name, o->n[i], o->m[i], vars[v].form, err, CHECK_LIMIT);
        return 1;
    }
    return 0;
}

/* Times one shape at one thread count and prints its rows. 0 ok, 1 failure (printed). */
static int run_shape(const options *o, const shape *s, int threads, double ceiling) {
    sdgp_error e;
    sdgp_error_clear(&e);
    bench_ctx *c = calloc(1, sizeof *c);
    if (!c) {
        fprintf(stderr, "sdgp: %s: out of memory\n", s->name);
        return 1;
    }
    c->s = s, c->threads = threads;
    double derr[NPROD] = {-1, -1, -1};
    sdgp_status st = ctx_setup(c, o, &e);
    if (st == SDGP_OK) st = time_rounds(c, o, &e);
    for (int p = 0; st == SDGP_OK && o->check && p < NPROD; p++) st = check_dense(c, p, &derr[p], &e);
    if (st != SDGP_OK) {
        fprintf(stderr, "sdgp: %s: %s\n", s->name, e.msg);
        ctx_free(c);
        return 1;
    }
    if (!o->json) {
        char b[3][32];
        printf("# %s: T=%d in=%d out=%d seq=%d mask_block=%d; matmul impl fwd %s, dgrad %s, wgrad %s; conv vs matmul relL2 fwd %s, dgrad %s, "
               "wgrad %s\n", s->name, s->T, s->in, s->out, s->seq, o->mask_block, matmul_dnnl_impl(c->mm[P_FWD]), matmul_dnnl_impl(c->mm[P_DGRAD]),
               matmul_dnnl_impl(c->mm[P_WGRAD]), num_or(b[0], 32, "%.1e", derr[0], "-"), num_or(b[1], 32, "%.1e", derr[1], "-"),
               num_or(b[2], 32, "%.1e", derr[2], "-"));
    }
    for (int i = 0; i < o->nnm; i++) /* the forms whose kernel does not take this shape or n:m, and why */
        for (int v = 0; v < NVAR; v++) {
            if (runs(c, i, v)) continue;
            if (o->json)
                printf("{\"layer\":\"%s\",\"shape\":\"%d,%d,%d\",\"nm\":\"%d:%d\",\"threads\":%d,\"product\":\"%s\","
                       "\"form\":\"%s\",\"skipped\":\"%s\"}\n", s->name, s->T, s->in, s->out, o->n[i], o->m[i], threads,
                       prod_names[vars[v].prod], vars[v].form, c->skip[i][v]);
            else
                printf("# %s %d:%d: no %s row: %s\n", s->name, o->n[i], o->m[i], vars[v].form, c->skip[i][v]);
        }
    int rc = 0;
    for (int p = 0; p < NPROD; p++)
        if (o->check && !(derr[p] <= CHECK_LIMIT)) {
            fprintf(stderr, "sdgp: %s %s: CHECK FAILED: oneDNN's matmul and 1x1 convs differ by relative L2 error %.3g\n",
                    s->name, prod_names[p], derr[p]);
            rc = 1;
        }
    for (int p = 0; p < NPROD; p++) /* rows by product, then n:m, then form */
        for (int i = 0; i < o->nnm; i++)
            for (int v = 0; v < NVAR; v++)
                if (vars[v].prod == p && runs(c, i, v)) rc |= print_row(c, o, i, v, ceiling, derr[p]);
    fflush(stdout);
    ctx_free(c);
    return rc;
}

static void print_header(const options *o, int threads, double ceiling, const char *isa) {
    char cpu[200];
    cli_cpu_model(cpu, sizeof cpu);
    const sdgp_cache_info *ci = sdgp_caches();
    if (o->json) {
        printf("{\"host\":\"%s\",\"isa\":\"%s\",\"onednn_isa\":\"%s\",\"l1d_kib\":%lld,\"l2_kib\":%lld,\"threads\":%d,"
               "\"fma_ceiling_gflops\":%.1f,\"repeat\":%d}\n",
               cpu, isa, sdgp_conv_onednn_isa(), (long long)(ci->l1d >> 10), (long long)(ci->l2 >> 10), threads, ceiling,
               o->repeat);
        return;
    }
    printf("# host %s; sdgp ISA %s, oneDNN %s; L1d %lld KiB, L2 %lld KiB (%s); %d threads; FMA ceiling %.1f GFLOP/s\n"
           "# ms: medians of %d runs, dense and sparse alternating; matmul: oneDNN matmul; conv: oneDNN 1x1 conv (direct), the"
           " faster of tokens as images (conv-i) and as pixels (conv-p); best: the fastest\n"
           "# sparse = prune + kern; prune: the S-STE projection W -> W~ (fwd), sdgp_prune magnitude along out (dgrad),"
           " MVUE along tokens (wgrad); 0 when fused\n"
           "# kern: pack + kernel (fwd, dgrad), kernel (wgrad); vs_best = best / sparse, vs_kern = best / kern;"
           " GF/s: useful (n/m) FLOPs over kern; ceil: its fraction of the FMA ceiling\n"
           "# relL2: the sparse result against oneDNN's matmul on the same sparse operand (fails above %g)\n"
           "%-9s %7s %3s %-5s %-12s %-18s %8s %8s %-6s %8s %7s %8s %7s %7s %6s %5s %8s\n",
           cpu, isa, sdgp_conv_onednn_isa(), (long long)(ci->l1d >> 10), (long long)(ci->l2 >> 10), ci->source, threads,
           ceiling, o->repeat, CHECK_LIMIT, "layer", "n:m  ", "thr", "prod", "form", "kernel", "matmul", "conv", "best",
           "sparse", "prune", "kern", "vs_best", "vs_kern", "GF/s", "ceil", "relL2");
}

int sdgp_cmd_bench_linear(int argc, char **argv) {
    options o;
    int r = parse_options(argc, argv, &o);
    if (r <= 0) return r == 0 ? 0 : 2;
    sdgp_isa isa;
    sdgp_error e;
    if (sdgp_isa_resolve(o.isa, &isa, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: --isa: %s\n", e.msg);
        return 2;
    }
    const int saved = omp_get_max_threads();
    int rc = 0;
    for (int ti = 0; ti < o.nthreads && !rc; ti++) {
        const int threads = (int)o.threads[ti];
        omp_set_num_threads(threads); /* the projection (sdgp_weights_project) runs on the ambient team */
        const double ceiling = spconv_fma_ceiling(isa, threads, 0.2);
        print_header(&o, threads, ceiling, sdgp_isa_name(isa));
        for (int si = 0; si < o.nshapes && !rc; si++) rc = run_shape(&o, &o.shapes[si], threads, ceiling);
    }
    omp_set_num_threads(saved);
    return rc;
}
