/* What every pass does with its implementation list alike (model_internal.h, struct model_impl):
 * find an entry, adopt it with its plan, run it, and the one tuner that times the allowed entries
 * of a layer's pass against each other and keeps the fastest. The lists themselves live with their
 * pass: model_fwd.c, model_bwd.c, model_wgrad.c. */
#include <math.h>
#include <stdio.h>
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

sdgp_status model_impl_run(sdgp_model *m, op *o, model_pass pass, model_args *a, sdgp_error *err) {
    const model_impl *impl = o->impl[pass];
    a->prune_ms = 0;
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

/* ---- the tuner ---- */
#define MAX_CANDIDATES 8

typedef struct {
    sdgp_model *m;
    op *o;
    model_pass pass;
    model_args *a;
    const model_impl *cand[MAX_CANDIDATES];
    void *plans[MAX_CANDIDATES];
} tune_ctx;

/* Candidate c with its own plan (the plans stay owned by the tuner while it times). */
static sdgp_status run_candidate(void *ctx, int c, sdgp_error *err) {
    tune_ctx *t = ctx;
    t->o->impl[t->pass] = t->cand[c];
    t->o->plan[t->pass] = t->plans[c];
    return model_impl_run(t->m, t->o, t->pass, t->a, err);
}

sdgp_status model_tune_pass(sdgp_model *m, op *o, model_pass pass, model_args *a, double *best_ms, sdgp_error *err) {
    tune_ctx t = {.m = m, .o = o, .pass = pass, .a = a};
    int nc = 0;
    for (const model_impl *const *l = model_impls[pass]; *l && nc < MAX_CANDIDATES; l++)
        if (model_impl_allowed(m, o, *l)) t.cand[nc++] = *l;
    if (nc < 2) return SDGP_OK;
    /* every candidate's plan, the layer's current one reused */
    const model_impl *held = o->impl[pass];
    void *held_plan = o->plan[pass];
    sdgp_status st = SDGP_OK;
    for (int c = 0; c < nc; c++) {
        if (t.cand[c] == held) t.plans[c] = held_plan, held_plan = NULL;
        else if (st == SDGP_OK && t.cand[c]->create) st = t.cand[c]->create(m, o, &t.plans[c], err);
    }
    if (held_plan && held && held->destroy) held->destroy(held_plan); /* the current one is no candidate */
    double best[MAX_CANDIDATES];
    if (st == SDGP_OK) st = model_time_interleaved(run_candidate, &t, nc, NULL, TUNE_REPS, best, err);
    int win = 0;
    for (int c = 1; c < nc; c++)
        if (best[c] < best[win]) win = c;
    o->impl[pass] = NULL; /* the plans are the tuner's until one is adopted */
    o->plan[pass] = NULL;
    for (int c = 0; c < nc; c++)
        if ((c != win || st != SDGP_OK) && t.cand[c]->destroy) t.cand[c]->destroy(t.plans[c]);
    if (st != SDGP_OK) return st;
    model_impl_adopt(m, o, pass, t.cand[win], t.plans[win]);
    if (best_ms) *best_ms = 1e3 * best[win];
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
