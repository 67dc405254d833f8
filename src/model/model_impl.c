/* What every pass does with its implementation list alike (model_internal.h, struct model_impl):
 * find an entry, adopt it with its plan, run it, and the one tuner that times the allowed entries
 * of a layer's pass against each other and keeps the fastest. The lists themselves live with their
 * pass: model_fwd.c, model_bwd.c, model_wgrad.c. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/cache.h"
#include "core/clock.h"
#include "model/model_internal.h"

#define TUNE_REPS 5

const model_impl *const *const model_impls[MODEL_NPASS] = {model_fwd_impls, model_bwd_impls, model_wgrad_impls};

const char *model_pass_name(model_pass pass) {
    static const char *const names[MODEL_NPASS] = {"fwd", "bwd_data", "bwd_weights"};
    return (unsigned)pass < MODEL_NPASS ? names[pass] : "?";
}

const model_impl *model_impl_find(model_pass pass, char code) {
    for (const model_impl *const *l = model_impls[pass]; *l; l++)
        if ((*l)->code == code) return *l;
    return NULL;
}

int model_impl_allowed(const sdgp_model *m, const op *o, const model_impl *impl) {
    switch (impl->pass) {
    case MODEL_FWD: return model_fwd_allowed(m, o, impl);
    case MODEL_BWD_DATA: return model_bwd_allowed(m, o, impl);
    default: return model_wgrad_allowed(m, o, impl);
    }
}

/* The layer info's view of a pass's implementation: its name, and the flags sdgp_layer_info has
 * always had. */
static void refresh_info(op *o, model_pass pass) {
    const model_impl *impl = o->impl[pass];
    const char *name = impl ? impl->name : "dense";
    sdgp_layer_info *li = &o->info;
    if (pass == MODEL_FWD) {
        static const char forms[] = "swc"; /* sparse_forward: 1 direct, 2 Winograd, 3 cout */
        const char *f = impl && impl->sparse ? strchr(forms, impl->code) : NULL;
        li->sparse_forward = f ? (int)(f - forms) + 1 : 0;
        li->fwd_kernel = name;
    } else if (pass == MODEL_BWD_DATA) {
        li->sparse_kernel = impl && impl->sparse;
        li->sparse_data = impl && impl->wsparse;
        li->pruned = o->prune && (!impl || impl->prunes); /* fastest may leave a layer's dL/dO exact */
        li->bwd_kernel = name;
    } else {
        li->sparse_wgrad = impl && impl->sparse;
        li->bwd_weights_kernel = name;
    }
}

void model_impl_adopt(sdgp_model *m, op *o, model_pass pass, const model_impl *impl, void *plan) {
    (void)m;
    const model_impl *old = o->impl[pass];
    if (old && old->destroy && o->plan[pass] != plan) old->destroy(o->plan[pass]);
    o->impl[pass] = impl;
    o->plan[pass] = plan;
    if (pass == MODEL_FWD) o->fwd_packed = 0; /* the new plan holds no W~ yet */
    refresh_info(o, pass);
}

sdgp_status model_impl_set(sdgp_model *m, op *o, model_pass pass, const model_impl *impl, sdgp_error *err) {
    if (o->impl[pass] == impl && (!impl || !impl->create || o->plan[pass])) return SDGP_OK;
    void *plan = NULL;
    if (impl && impl->create) {
        sdgp_status st = impl->create(m, o, &plan, err);
        if (st != SDGP_OK) return st;
    }
    model_impl_adopt(m, o, pass, impl, plan);
    return SDGP_OK;
}

sdgp_status model_impl_default(sdgp_model *m, op *o, model_pass pass, sdgp_error *err) {
    for (const model_impl *const *l = model_impls[pass]; *l; l++)
        if (model_impl_allowed(m, o, *l)) return model_impl_set(m, o, pass, *l, err);
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "model: no %s implementation for %s", model_pass_name(pass), o->name);
}

/* oneDNN on the layer's weights and the exact tensors, the algorithm --conv-algo gave this pass */
static sdgp_status run_onednn(sdgp_model *m, op *o, model_pass pass, const model_args *a, sdgp_error *err) {
    const float *w = model_op_weights(m, o);
    if (pass == MODEL_FWD) return sdgp_conv_forward(o->dnnl, a->out, a->x, w, NULL, err);
    if (pass == MODEL_BWD_DATA) return sdgp_conv_backward_data(o->dnnl, a->out, a->dz, w, err);
    return sdgp_conv_backward_weights(o->dnnl, a->out, NULL, a->x, a->dz, err);
}

sdgp_status model_impl_run(sdgp_model *m, op *o, model_pass pass, model_args *a, sdgp_error *err) {
    const model_impl *impl = o->impl[pass];
    a->prune_ms = 0;
    if (!impl) return run_onednn(m, o, pass, a, err);
    if (impl->pack) {
        sdgp_status st = impl->pack(m, o, err);
        if (st != SDGP_OK) return st;
    }
    return impl->run(m, o, a, err);
}

sdgp_status model_time_interleaved(model_timed_fn run, void *ctx, int n, const int *wanted, int reps, double *best,
                                   sdgp_error *err) {
    for (int c = 0; c < n; c++) best[c] = INFINITY;
    for (int r = 0; r < reps; r++)
        for (int c = 0; c < n; c++) {
            if (wanted && !wanted[c]) continue;
            const double t0 = sdgp_now_s();
            sdgp_status st = run(ctx, c, err);
            const double t = sdgp_now_s() - t0;
            if (st != SDGP_OK) return st;
            if (t < best[c]) best[c] = t;
        }
    return SDGP_OK;
}

/* ---- timing a layer's pass: the tuner and sdgp_model_time_impls ---- */

/* p[0..n) = values in [-1, 1) from an LCG seeded with s: the kernels' times do not depend on them. */
static void fill_random(float *p, size_t n, uint64_t s) {
    for (size_t j = 0; j < n; j++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        p[j] = (float)((int32_t)(s >> 32)) * (1.0f / 2147483648.0f);
    }
}

/* Random tensors in layer o's own buffers (free before the first step; the image gets a buffer of
 * its own) for timing one of its passes as a step runs it: the arguments and the step's pruning
 * (step 0). */
typedef struct {
    model_args a;
    sdgp_prune_cfg pc;
    float *image;
} timing_data;

static sdgp_status timing_make(sdgp_model *m, op *o, model_pass pass, timing_data *t, sdgp_error *err) {
    memset(t, 0, sizeof *t);
    const uint64_t seed = 0x9E3779B97F4A7C15ull * (uint64_t)(o->conv_index + 1) + (uint64_t)pass;
    float *x = m->slots[o->in].act;
    if (pass != MODEL_BWD_DATA && !x) { /* the image: no buffer of the model's before a forward */
        x = t->image = calloc(m->slots[o->in].count, sizeof(float));
        if (!x) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory timing %s", o->name);
    }
    /* any values will do: the kernels' times and the masks' cost do not depend on them */
    if (pass == MODEL_FWD) fill_random(x, m->slots[o->in].count, seed);
    else fill_random(m->slots[o->out].act, m->slots[o->out].count, seed);
    if (pass == MODEL_BWD_DATA)
        t->pc = o->prune ? model_prune_cfg(m, o, m->cfg.prune, SDGP_AXIS_CHANNEL, m->cfg.seed, 0) : m->cfg.prune;
    else if (pass == MODEL_BWD_WEIGHTS)
        t->pc = model_prune_cfg(m, o, m->cfg.prune_wgrad, SDGP_AXIS_ROW, m->cfg.seed ^ MODEL_WGRAD_SEED, 0);
    float *out = pass == MODEL_FWD ? o->z_fwd : pass == MODEL_BWD_DATA ? m->slots[o->in].act : m->params[o->p_w].grad;
    t->a = (model_args){.out = out, .x = x, .dz = m->slots[o->out].act, .pc = &t->pc};
    return SDGP_OK;
}

static void timing_free(timing_data *t) { free(t->image); }

#define MAX_CANDIDATES 16

/* The candidates of one layer's pass, each with its own plan, and for those that run oneDNN's
 * product the convolution they run it on: the layer's with this pass direct (conv[0]) or Winograd
 * (conv[1], NULL when not a candidate). An entry NULL: oneDNN's product on the exact tensors. */
typedef struct {
    sdgp_model *m;
    op *o;
    model_pass pass;
    model_args *a;
    sdgp_conv *conv[2];
    int n;
    const model_impl *cand[MAX_CANDIDATES];
    int algo[MAX_CANDIDATES]; /* 1: on conv[1] */
    void *plans[MAX_CANDIDATES];
    int made;                 /* the plans were made (the layer's entry and plan are the timer's) */
} tune_ctx;

/* conv[1] as the Winograd candidate of the context's pass: only where it plans that pass so. */
static void keep_winograd(tune_ctx *t) {
    if (t->conv[1] && sdgp_conv_get_plan(t->conv[1], (sdgp_conv_pass)t->pass).algo != SDGP_CONV_WINOGRAD) t->conv[1] = NULL;
}

/* impl as a candidate, twice (direct, then Winograd: ties go to direct, NHWC in place) where it
 * runs oneDNN's product and conv[1] is there. */
static void add_candidate(tune_ctx *t, const model_impl *impl) {
    const int algos = 1 + (t->conv[1] && (!impl || impl->onednn));
    for (int a = 0; a < algos && t->n < MAX_CANDIDATES; a++) t->cand[t->n] = impl, t->algo[t->n++] = a;
}

/* Candidate c with its own plan and convolution (the plans stay the timer's while it times). */
static sdgp_status run_candidate(void *ctx, int c, sdgp_error *err) {
    tune_ctx *t = ctx;
    t->o->impl[t->pass] = t->cand[c];
    t->o->plan[t->pass] = t->plans[c];
    t->o->dnnl = t->conv[t->algo[c]];
    return model_impl_run(t->m, t->o, t->pass, t->a, err);
}

/* Every candidate's plan, the layer's current one taken over by its entry (*held: the layer's
 * entry, which is among the candidates or had its plan destroyed); the layer holds none after. */
static sdgp_status plans_make(tune_ctx *t, const model_impl **held, sdgp_error *err) {
    *held = t->o->impl[t->pass];
    void *held_plan = t->o->plan[t->pass];
    sdgp_status st = SDGP_OK;
    for (int c = 0; c < t->n; c++) {
        if (t->cand[c] && t->cand[c] == *held && held_plan) t->plans[c] = held_plan, held_plan = NULL;
        else if (st == SDGP_OK && t->cand[c] && t->cand[c]->create) st = t->cand[c]->create(t->m, t->o, &t->plans[c], err);
    }
    if (held_plan && *held && (*held)->destroy) (*held)->destroy(held_plan); /* the current one is no candidate */
    t->o->impl[t->pass] = NULL;
    t->o->plan[t->pass] = NULL;
    return st;
}

/* Every candidate's plan destroyed but keep's (-1: all); the layer holds none (the timer left it
 * the last candidate's). */
static void plans_release(tune_ctx *t, int keep) {
    t->o->impl[t->pass] = NULL;
    t->o->plan[t->pass] = NULL;
    for (int c = 0; c < t->n; c++)
        if (c != keep && t->cand[c] && t->cand[c]->destroy) t->cand[c]->destroy(t->plans[c]);
}

/* The candidates timed interleaved, reps rounds, best[c] each one's shortest time; the layer's
 * entry and plan are taken for the time and given back to the caller in *held / t->plans. */
static sdgp_status time_candidates(tune_ctx *t, const model_impl **held, int reps, double *best, sdgp_error *err) {
    timing_data td;
    sdgp_status st = timing_make(t->m, t->o, t->pass, &td, err);
    if (st != SDGP_OK) return st;
    t->a = &td.a;
    const int timing = t->m->timing, stats = t->m->grad_stats;
    sdgp_conv *own = t->o->dnnl;
    t->m->timing = t->m->grad_stats = 0;
    st = plans_make(t, held, err);
    t->made = 1;
    if (st == SDGP_OK) st = model_time_interleaved(run_candidate, t, t->n, NULL, reps, best, err);
    t->m->timing = timing;
    t->m->grad_stats = stats;
    t->o->dnnl = own;
    timing_free(&td);
    return st;
}

sdgp_status model_tune_pass(sdgp_model *m, op *o, model_pass pass, int entries, sdgp_conv *const conv[2], int *algo,
                            sdgp_error *err) {
    tune_ctx t = {.m = m, .o = o, .pass = pass, .conv = {conv[0], conv[1]}};
    keep_winograd(&t);
    *algo = 0;
    if (entries) {
        for (const model_impl *const *l = model_impls[pass]; *l; l++)
            if (model_impl_allowed(m, o, *l)) add_candidate(&t, *l);
    } else {
        add_candidate(&t, o->impl[pass]);
    }
    if (t.n < 2) return SDGP_OK;
    const model_impl *held;
    double best[MAX_CANDIDATES];
    sdgp_status st = time_candidates(&t, &held, TUNE_REPS, best, err);
    int win = 0;
    for (int c = 1; c < t.n; c++)
        if (best[c] < best[win]) win = c;
    if (t.made) plans_release(&t, st == SDGP_OK ? win : -1); /* else the layer still holds its own */
    if (st != SDGP_OK) return st;
    model_impl_adopt(m, o, pass, t.cand[win], t.plans[win]);
    if (pass == MODEL_FWD) model_fwd_pack(m, o);
    *algo = t.algo[win];
    double *ms[MODEL_NPASS] = {&o->times.fwd_ms, &o->times.bwd_data_ms, &o->times.bwd_weights_ms};
    *ms[pass] = 1e3 * best[win];
    return SDGP_OK;
}

int model_impl_reachable(const sdgp_model *m, const op *o, const model_impl *impl) {
    if (impl->unsupported(m, o)) return 0;
    return impl->pass != MODEL_BWD_DATA || (o->in != 0 && impl->prunes <= o->prune);
}

sdgp_status sdgp_model_time_impls(sdgp_model *m, int conv, const char *pass_name, int reps, sdgp_impl_time *out, int max,
                                  int *n, sdgp_error *err) {
    if (!m || !pass_name || !out || !n) return sdgp_fail(err, SDGP_ERR_INVALID, "model_time_impls: NULL argument");
    *n = 0;
    if (conv < 0 || conv >= m->n_convs)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model_time_impls: conv layer %d out of range [0, %d)", conv, m->n_convs);
    if (reps < 1) return sdgp_fail(err, SDGP_ERR_INVALID, "model_time_impls: %d repetitions (at least 1)", reps);
    int pass = 0;
    while (pass < MODEL_NPASS && strcmp(pass_name, model_pass_name((model_pass)pass))) pass++;
    if (pass == MODEL_NPASS)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model_time_impls: pass '%s' is not fwd, bwd_data or bwd_weights", pass_name);
    op *o = &m->ops[m->conv_ops[conv]];
    if (pass == MODEL_BWD_DATA && o->in == 0) return SDGP_OK; /* a conv on the image has no data gradient */
    /* oneDNN's product with each algorithm the pass has: the layer's convs with this pass direct and Winograd */
    tune_ctx t = {.m = m, .o = o, .pass = (model_pass)pass, .conv = {o->dnnl, NULL}};
    sdgp_conv *cands[2];
    sdgp_status st = model_conv_candidates(m, o, cands, err);
    if (st != SDGP_OK) return st;
    if (cands[0]) t.conv[0] = cands[0], t.conv[1] = cands[1];
    keep_winograd(&t);
    add_candidate(&t, NULL);
    for (const model_impl *const *l = model_impls[pass]; *l; l++)
        if (model_impl_reachable(m, o, *l)) add_candidate(&t, *l);
    const model_impl *held = o->impl[pass];
    double best[MAX_CANDIDATES];
    st = t.n > max ? sdgp_fail(err, SDGP_ERR_INVALID, "model_time_impls: %d results do not fit %d", t.n, max)
                   : time_candidates(&t, &held, reps, best, err);
    const int wino = sdgp_conv_get_plan(o->dnnl, (sdgp_conv_pass)pass).algo == SDGP_CONV_WINOGRAD; /* the layer's */
    int keep = -1, chosen = -1; /* the layer gets its entry back, with its plan; what it runs */
    for (int c = 0; c < t.n; c++) {
        if (held && t.cand[c] == held && keep < 0) keep = c;
        const int onednn = !t.cand[c] || t.cand[c]->onednn;
        if (t.cand[c] == held && (!onednn || !t.conv[1] || t.algo[c] == wino)) chosen = c;
    }
    if (t.made) {
        plans_release(&t, keep);
        if (keep >= 0) {
            model_impl_adopt(m, o, (model_pass)pass, held, t.plans[keep]);
            if (pass == MODEL_FWD) model_fwd_pack(m, o);
        }
    }
    if (cands[0]) sdgp_conv_destroy(cands[0]), sdgp_conv_destroy(cands[1]);
    if (st != SDGP_OK) return st;
    for (int c = 0; c < t.n; c++) {
        const int onednn = !t.cand[c] || t.cand[c]->onednn;
        out[c] = (sdgp_impl_time){.name = t.cand[c] ? t.cand[c]->name : "onednn", .code = t.cand[c] ? t.cand[c]->code : 0,
                                  .algo = !onednn ? "" : t.algo[c] ? "winograd" : "direct",
                                  .sparse = t.cand[c] && t.cand[c]->sparse, .chosen = c == chosen, .ms = 1e3 * best[c]};
    }
    *n = t.n;
    return SDGP_OK;
}

/* ---- sdgp kernels ---- */

void model_describe_caches(sdgp_isa isa, sdgp_impl_info *out) {
    const sdgp_cache_info *c = sdgp_caches();
    snprintf(out->isa, sizeof out->isa, "%s", sdgp_isa_name(isa));
    snprintf(out->blocking, sizeof out->blocking, "from L1d %lldK, L2 %lldK (%s)", (long long)(c->l1d >> 10),
             (long long)(c->l2 >> 10), c->source);
}

int sdgp_impl_count(void) {
    int n = 0;
    for (int p = 0; p < MODEL_NPASS; p++)
        for (const model_impl *const *l = model_impls[p]; *l; l++) n++;
    return n;
}

sdgp_status sdgp_impl_describe(int i, int threads, sdgp_impl_info *out, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "impl_describe: NULL output");
    const model_impl *impl = NULL;
    for (int p = 0, k = 0; p < MODEL_NPASS && !impl; p++)
        for (const model_impl *const *l = model_impls[p]; *l && !impl; l++, k++)
            if (k == i) impl = *l;
    if (!impl) return sdgp_fail(err, SDGP_ERR_INVALID, "impl_describe: entry %d out of range [0, %d)", i, sdgp_impl_count());
    memset(out, 0, sizeof *out);
    out->pass = model_pass_name(impl->pass);
    out->name = impl->name;
    out->code = impl->code;
    out->sparse = impl->sparse;
    if (!impl->describe) { /* oneDNN's convolution */
        snprintf(out->isa, sizeof out->isa, "onednn:%s", sdgp_conv_onednn_isa());
        snprintf(out->blocking, sizeof out->blocking, "oneDNN's");
        return SDGP_OK;
    }
    sdgp_conv_geom g;
    sdgp_status st = sdgp_conv_geom_init(&g, 8, 16, 16, 64, 64, 3, 3, 1, 1, err);
    return st != SDGP_OK ? st : impl->describe(&g, threads > 0 ? threads : 1, out, err);
}
