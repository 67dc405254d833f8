/* One harness over the implementation lists (issue 53; model_impls in src/model/model_impl.c): every
 * entry of every pass (forward, data gradient, weight gradient), on every conv layer of a few models
 * of the registry that it supports, under every ISA path this host has, against the naive oracles of
 * src/kernels/conv_ref.c (and a naive weight gradient below). An entry is run as the model runs it
 * (model_impl_set, model_impl_run) on random tensors of this test's own; the model's configurations
 * are chosen so that every entry supports some layer, and the test fails when one supports none: a
 * new entry cannot go untested. Per-kernel tests (tests/test_sparse_*.c) cover edge shapes, NaNs
 * and bad input; this one covers what the model can hand an entry. */
#include <stdlib.h>

#include "harness.h"
#include "model/model_internal.h"
#include "sdgp/sparse.h"

#define MAX_ENTRIES 16

/* layers checked per (pass, entry, ISA), over all models and configurations */
static int checked[MODEL_NPASS][MAX_ENTRIES][SDGP_ISA_COUNT];

/* The shapes: the registry's models, small enough (batch, input, width) that every pass of every
 * layer runs through the naive oracles in seconds. Batch 4: with the smallest outputs 1x1, the
 * weight gradient's MVUE 2:4 along rows needs rows (B*Ho*Wo) a multiple of 4. */
typedef struct {
    const char *label;
    sdgp_model_kind kind;
    float width;
    int px, channels;
    int sanitized; /* also in sanitizer builds (about 15x slower): two models reach every entry */
} model_shape;
static const model_shape shapes[] = {
    {"smallcnn", SDGP_MODEL_SMALLCNN, 1.0f, 28, 1, 1},
    {"resnet9", SDGP_MODEL_RESNET9, 0.25f, 16, 3, 1},
    {"resnet18", SDGP_MODEL_RESNET18, 0.25f, 16, 3, 0},
    {"resnet50", SDGP_MODEL_RESNET50, 0.25f, 32, 3, 0},       /* 1x1 convs, strided 1x1 downsamples */
    {"regnetx400mf", SDGP_MODEL_REGNETX400MF, 0.5f, 32, 3, 0}, /* grouped convs */
};

/* The configurations: between them every entry supports some layer. Both prune the data gradient
 * 2:4 with --sdgp-domain auto (pixel- and Winograd-domain entries) and the weight gradient MVUE 2:4
 * (its kernel and oneDNN), and have S-STE 2:4 weights: block16 (the forward's direct and Winograd
 * sparse-weight kernels, the data gradient's sparse-weight ones) or cout (the forward's cout kernel).
 * --sparse-kernel on: create times nothing (this test sets every entry itself). */
typedef struct {
    const char *label;
    sdgp_prune_fn fn;
    sdgp_weights_group group;
} model_setup;
static const model_setup setups[] = {
    {"rescaled 2:4, block16 weights", SDGP_PRUNE_RESCALED, SDGP_WGROUP_BLOCK16},
    {"magnitude 2:4, cout weights", SDGP_PRUNE_MAGNITUDE, SDGP_WGROUP_COUT},
};

static sdgp_model_config make_config(const model_shape *s, const model_setup *u) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = s->kind;
    c.width = s->width;
    c.batch = 4;
    c.height = c.width_px = s->px;
    c.channels = s->channels;
    c.seed = 11;
    c.threads = 2;
    c.sparse = SDGP_SPARSE_ON;
    c.domain = SDGP_DOMAIN_AUTO;
    c.prune = sdgp_prune_cfg_make(u->fn, 2, 4);
    c.prune_wgrad = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    c.weights = (sdgp_weights_cfg){SDGP_WEIGHTS_SSTE, 2, 4, u->group, 2e-4f, 0, 0};
    return c;
}

/* dW (OIHW, groups as sdgp_conv_geom) = sum over images and output pixels of dO x the input pixel
 * each tap reads; in double, like the oracles of conv_ref.c (the library has no naive one). */
static void wgrad_naive(float *dw, const float *x, const float *dO, const sdgp_conv_geom *g) {
    const int64_t G = g->groups > 1 ? g->groups : 1, cig = g->Cin / G, cog = g->Cout / G, kk = (int64_t)g->kh * g->kw;
    const size_t n = (size_t)g->Cout * cig * kk;
    double *acc = calloc(n, sizeof *acc);
    if (!acc) abort();
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t ho = 0; ho < g->Ho; ho++)
            for (int64_t wo = 0; wo < g->Wo; wo++) {
                const float *d = dO + ((b * g->Ho + ho) * g->Wo + wo) * g->Cout;
                for (int64_t i = 0; i < g->kh; i++) {
                    const int64_t h = ho * g->stride + i - g->pad;
                    if (h < 0 || h >= g->H) continue;
                    for (int64_t j = 0; j < g->kw; j++) {
                        const int64_t w = wo * g->stride + j - g->pad;
                        if (w < 0 || w >= g->W) continue;
                        const float *src = x + ((b * g->H + h) * g->W + w) * g->Cin;
                        for (int64_t k = 0; k < g->Cout; k++) {
                            if (d[k] == 0.0f) continue; /* pruned */
                            const float *xs = src + k / cog * cig;
                            double *a = acc + k * cig * kk + i * g->kw + j;
                            for (int64_t c = 0; c < cig; c++) a[c * kk] += (double)d[k] * (double)xs[c];
                        }
                    }
                }
            }
    for (size_t i = 0; i < n; i++) dw[i] = (float)acc[i];
    free(acc);
}

/* Tolerances, relative to the reference's largest magnitude (test_rel_err): fp32 sums in another
 * order for direct products; Winograd forms (F(2x2) / F(4x4) transforms, oneDNN's Winograd where it
 * chose one for the layer's dense pass) lose more to the transforms' cancellation. */
#define TOL_DIRECT 1e-4
#define TOL_WINOGRAD 5e-4
static double tolerance(const model_impl *impl, const op *o, model_pass pass) {
    if (strstr(impl->name, "winograd") || impl->wsparse) return TOL_WINOGRAD; /* wsparse: spfwd_wino.c's F(4x4) */
    if (!impl->describe && sdgp_conv_get_plan(o->dnnl, (sdgp_conv_pass)pass).algo == SDGP_CONV_WINOGRAD)
        return TOL_WINOGRAD; /* oneDNN's entries run the layer's dense plan */
    return TOL_DIRECT;
}

/* The tensors of one layer: random inputs, and the references every entry of a pass is held to. */
typedef struct {
    size_t nx, nz, nw;
    float *x, *dz, *out;
    float *y_ref;         /* forward: naive conv on W~ */
    float *dz_pruned;     /* dL/dO pruned as the data gradient's pixel-domain entries must (portable path) */
    float *dx_ref_pruned; /* naive backward-data on it */
    float *dx_ref;        /* on the exact dL/dO (entries that keep it; the Winograd domain's loose check) */
    float *dw_ref;        /* naive dW on dL/dO pruned as --prune-wgrad prunes it */
    sdgp_prune_cfg pc_data, pc_wgrad;
} layer_data;

/* The pruning each pass's entries receive, as model_conv_backward_data and
 * model_conv_backward_weights build it (seed ^ "wgra" for the weight gradient), at step 1. */
static void prune_cfgs(const sdgp_model *m, const op *o, layer_data *d) {
    d->pc_data = model_prune_cfg(m, o, m->cfg.prune, SDGP_AXIS_CHANNEL, m->cfg.seed, 1);
    d->pc_wgrad = model_prune_cfg(m, o, m->cfg.prune_wgrad, SDGP_AXIS_ROW, m->cfg.seed ^ 0x77677261ull, 1);
}

static int layer_setup(sdgp_model *m, const op *o, int index, layer_data *d) {
    const sdgp_conv_geom *g = &o->geom;
    d->nx = (size_t)g->B * g->H * g->W * g->Cin;
    d->nz = (size_t)g->B * g->Ho * g->Wo * g->Cout;
    d->nw = (size_t)g->Cout * (g->Cin / g->groups) * g->kh * g->kw;
    size_t big = d->nx > d->nz ? d->nx : d->nz;
    if (d->nw > big) big = d->nw;
    d->x = test_xmalloc(d->nx * sizeof(float));
    d->dz = test_xmalloc(d->nz * sizeof(float));
    d->out = test_xmalloc(big * sizeof(float));
    d->y_ref = test_xmalloc(d->nz * sizeof(float));
    d->dz_pruned = test_xmalloc(d->nz * sizeof(float));
    d->dx_ref_pruned = test_xmalloc(d->nx * sizeof(float));
    d->dx_ref = test_xmalloc(d->nx * sizeof(float));
    d->dw_ref = test_xmalloc(d->nw * sizeof(float));
    test_fill_normal(d->x, d->nx, 1000 + (uint64_t)index);
    test_fill_normal(d->dz, d->nz, 2000 + (uint64_t)index);
    prune_cfgs(m, o, d);
    const float *w = model_op_weights(m, o);
    sdgp_conv_forward_naive(d->y_ref, d->x, w, g);
    sdgp_conv_backward_data_naive(d->dx_ref, d->dz, w, g);
    sdgp_error err;
    sdgp_prune_cfg pc = d->pc_data;
    pc.isa = SDGP_ISA_REF; /* the oracle's pruning: the portable path (every path is bitwise it) */
    pc.mask_line = g->Wo;
    if (o->prune) {
        if (sdgp_prune(&pc, d->dz, g->B, (int64_t)g->Ho * g->Wo, g->Cout, d->dz_pruned, NULL, &err) != SDGP_OK) {
            fprintf(stderr, "prune: %s\n", err.msg);
            return 0;
        }
        sdgp_conv_backward_data_naive(d->dx_ref_pruned, d->dz_pruned, w, g);
    }
    if (model_wgrad_pruned(m, o)) {
        float *dzw = test_xmalloc(d->nz * sizeof(float));
        pc = d->pc_wgrad;
        pc.isa = SDGP_ISA_REF;
        sdgp_status st = sdgp_prune(&pc, d->dz, g->B, (int64_t)g->Ho * g->Wo, g->Cout, dzw, NULL, &err);
        if (st == SDGP_OK) wgrad_naive(d->dw_ref, d->x, dzw, g);
        else fprintf(stderr, "prune (wgrad): %s\n", err.msg);
        free(dzw);
        if (st != SDGP_OK) return 0;
    }
    return 1;
}

static void layer_free(layer_data *d) {
    free(d->x), free(d->dz), free(d->out), free(d->y_ref), free(d->dz_pruned), free(d->dx_ref_pruned), free(d->dx_ref),
        free(d->dw_ref);
}


static double cosine(const float *a, const float *b, size_t n) {
    double ab = 0, aa = 0, bb = 0;
    for (size_t i = 0; i < n; i++) ab += (double)a[i] * b[i], aa += (double)a[i] * a[i], bb += (double)b[i] * b[i];
    return aa > 0 && bb > 0 ? ab / sqrt(aa * bb) : 0.0;
}

static int all_finite(const float *a, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(a[i])) return 0;
    return 1;
}

/* Runs entry impl of pass on layer o (its own fresh plan under the model's configuration) and
 * checks it: 1 if it ran its checks. */
static int check_entry(sdgp_model *m, op *o, model_pass pass, const model_impl *impl, layer_data *d, const char *where) {
    sdgp_error err;
    const char *isa = sdgp_isa_name(m->cfg.prune.isa);
    /* a fresh plan made under the current ISA (set does nothing when the layer holds impl already) */
    sdgp_status st = model_impl_set(m, o, pass, NULL, &err);
    if (st == SDGP_OK) st = model_impl_set(m, o, pass, impl, &err);
    CHECK(st == SDGP_OK, "%s %s %s %s: create: %s", where, model_pass_name(pass), impl->name, isa, err.msg);
    if (st != SDGP_OK) return 0;
    model_args a = {.out = d->out, .x = d->x, .dz = d->dz, .pc = pass == MODEL_BWD_WEIGHTS ? &d->pc_wgrad : &d->pc_data};
    const size_t n = pass == MODEL_FWD ? d->nz : pass == MODEL_BWD_DATA ? d->nx : d->nw;
    for (size_t i = 0; i < n; i++) d->out[i] = NAN; /* an entry must write all of it */
    st = model_impl_run(m, o, pass, &a, &err);
    CHECK(st == SDGP_OK, "%s %s %s %s: run: %s", where, model_pass_name(pass), impl->name, isa, err.msg);
    if (st != SDGP_OK) return 0;
    const double tol = tolerance(impl, o, pass);
    const float *ref = pass == MODEL_FWD ? d->y_ref : pass == MODEL_BWD_WEIGHTS ? d->dw_ref : NULL;
    if (pass == MODEL_BWD_DATA) {
        const float *used = d->dz;
        st = impl->pruned_dz(m, o, &used, &err);
        CHECK(st == SDGP_OK, "%s bwd_data %s %s: pruned_dz: %s", where, impl->name, isa, err.msg);
        if (st != SDGP_OK) return 0;
        if (!used) {
            /* pruned in the Winograd domain: no pixel-domain tensor to hold it to. Its exact values
             * are tests/test_sparse_wino.c's (against a naive Winograd-domain oracle); here, finite
             * and an estimate of the dense dL/dD (2:4 keeps most of its direction) */
            const double cs = cosine(d->out, d->dx_ref, n);
            CHECK(all_finite(d->out, n) && cs > 0.5, "%s bwd_data %s %s: cosine to the dense dL/dD %.3f", where,
                  impl->name, isa, cs);
            return 1;
        }
        /* the tensor it used: dL/dO pruned as the oracle prunes it, or dL/dO itself */
        const float *want = impl->prunes ? d->dz_pruned : d->dz;
        CHECK(test_bitwise_equal(used, want, d->nz * sizeof(float)), "%s bwd_data %s %s: pruned dL/dO differs from sdgp_prune's",
              where, impl->name, isa);
        ref = impl->prunes ? d->dx_ref_pruned : d->dx_ref;
    }
    const double e = test_rel_err(d->out, ref, n);
    CHECK(e < tol, "%s %s %s %s: rel err %.3g (tolerance %.0e)", where, model_pass_name(pass), impl->name, isa, e, tol);
    return 1;
}

static int entry_index(model_pass pass, const model_impl *impl) {
    int i = 0;
    for (const model_impl *const *l = model_impls[pass]; *l && *l != impl; l++) i++;
    return i;
}

/* Every layer x pass x supported entry x ISA of one model. The ISA is switched in the model's own
 * configuration (every entry reads cfg.prune.isa when it makes its plan; pruning reads it too) and
 * in SDGP_ISA (entries that ask for SDGP_ISA_AUTO get it), so the references are computed once per
 * layer. */
static void check_model(const model_shape *s, const model_setup *u, const sdgp_isa *isas, int n_isa) {
    sdgp_model_config c = make_config(s, u);
    sdgp_model *m;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s (%s): create: %s", s->label, u->label, err.msg);
    model_weights_refresh(m); /* W~ of the current weights, which the oracles read */
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        layer_data d;
        char where[160];
        const sdgp_conv_geom *g = &o->geom;
        snprintf(where, sizeof where, "%s %s (%dx%d s%d g%d, %dx%dx%d -> %d; %s)", s->label, o->name, g->kh, g->kw, g->stride,
                 g->groups, g->H, g->W, g->Cin, g->Cout, u->label);
        int any = 0;
        for (int p = 0; p < MODEL_NPASS; p++)
            for (const model_impl *const *l = model_impls[p]; *l; l++) any |= model_impl_reachable(m, o, *l);
        if (!any) continue;
        if (!layer_setup(m, o, i, &d)) {
            CHECK(0, "%s: references", where);
            layer_free(&d);
            continue;
        }
        for (int k = 0; k < n_isa; k++) {
            m->cfg.prune.isa = m->cfg.prune_wgrad.isa = isas[k];
            setenv("SDGP_ISA", sdgp_isa_name(isas[k]), 1);
            prune_cfgs(m, o, &d); /* the entries prune on this ISA's path */
            for (int p = 0; p < MODEL_NPASS; p++)
                for (const model_impl *const *l = model_impls[p]; *l; l++)
                    if (model_impl_reachable(m, o, *l) && check_entry(m, o, (model_pass)p, *l, &d, where))
                        checked[p][entry_index((model_pass)p, *l)][isas[k]]++;
        }
        unsetenv("SDGP_ISA");
        layer_free(&d);
    }
    sdgp_model_destroy(m);
}

TEST_CASE(every_entry_against_the_naive_oracles) {
    sdgp_isa isas[SDGP_ISA_COUNT];
    int n_isa = 0;
    for (int i = 0; i < SDGP_ISA_COUNT; i++) {
        sdgp_isa got;
        if (sdgp_isa_resolve((sdgp_isa)i, &got, NULL) == SDGP_OK) isas[n_isa++] = got;
    }
    for (int p = 0; p < MODEL_NPASS; p++) {
        int n = 0;
        for (const model_impl *const *l = model_impls[p]; *l; l++) n++;
        REQUIRE(n <= MAX_ENTRIES, "%s has %d entries: raise MAX_ENTRIES", model_pass_name(p), n);
    }
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        if (TEST_SANITIZED && !shapes[s].sanitized) continue;
        for (size_t u = 0; u < sizeof setups / sizeof setups[0]; u++) check_model(&shapes[s], &setups[u], isas, n_isa);
    }
    for (int p = 0; p < MODEL_NPASS; p++) {
        int e = 0;
        for (const model_impl *const *l = model_impls[p]; *l; l++, e++) {
            int total = 0;
            for (int k = 0; k < n_isa; k++) {
                printf("%-11s %-24s %-6s %3d layers checked (summed over the configurations)\n", model_pass_name(p),
                       (*l)->name, sdgp_isa_name(isas[k]), checked[p][e][isas[k]]);
                total += checked[p][e][isas[k]];
            }
            /* a new entry that no model layer under these configurations reaches would go untested */
            CHECK(total > 0, "%s entry '%c' %s: no layer of any model under any configuration reaches it",
                  model_pass_name(p), (*l)->code, (*l)->name);
        }
    }
}

int main(void) {
    RUN(every_entry_against_the_naive_oracles);
    return test_finish();
}
