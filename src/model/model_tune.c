/* --sparse-kernel auto / --sdgp-domain auto: per layer that holds an implementation of its data
 * gradient (pruned layers, and those with block-masked weights: model_bwd.c), keep the fastest of
 * the allowed ones, and the kernel-choice text of checkpoints.
 *
 * Each is timed as it runs in a step, pruning and weight packing included (dense = prune to a
 * dense tensor + oneDNN backward-data; sparse = prune to the compressed form + pack + sparse
 * kernel; winograd = pack U + the fused Winograd-domain kernel; sparse-weights = pack W~'s U + its
 * kernel). Interleaved repetitions, the
 * best of each, so a noisy neighbour hurts all alike. */
#include <math.h>
#include <string.h>

#include "core/clock.h"
#include "model/model_internal.h"

#define TUNE_REPS 5


static double time_impl(sdgp_model *m, op *o, float *dx, const float *dz, sdgp_status *st, sdgp_error *err) {
    double t0 = sdgp_now_s();
    *st = model_conv_backward_data(m, o, dx, dz, 0, err);
    return sdgp_now_s() - t0;
}

/* One layer: every allowed implementation, interleaved repetitions, the best time of each. */
static sdgp_status tune_layer(sdgp_model *m, op *o, int index, sdgp_error *err) {
    const bwd_impl *cand[8];
    void *plans[8] = {0};
    double best[8];
    int nc = 0;
    for (int k = 0; model_bwd_impls[k] && nc < 8; k++)
        if (model_bwd_allowed(m, o, model_bwd_impls[k])) cand[nc++] = model_bwd_impls[k];
    if (nc < 2) return SDGP_OK;
    /* before the first step the activations are free: the conv's output and input slots (the
     * input is not the image, in_mode says so) hold dL/dO and dL/dD while timing */
    float *dz = m->slots[o->out].act, *dx = m->slots[o->in].act;
    /* any dense gradient will do: the masks' cost is data independent */
    model_fill_random(dz, m->slots[o->out].count, 0x9E3779B97F4A7C15ull * (uint64_t)(index + 1));
    /* every candidate's plan, the layer's current one reused */
    const bwd_impl *held = o->bwd;
    void *held_plan = o->bwd_plan;
    sdgp_status st = SDGP_OK;
    for (int c = 0; c < nc; c++) {
        best[c] = INFINITY;
        if (cand[c] == held) plans[c] = held_plan, held_plan = NULL;
        else if (st == SDGP_OK && cand[c]->create) st = cand[c]->create(m, o, &plans[c], err);
    }
    if (held_plan && held && held->destroy) held->destroy(held_plan); /* the current one is no candidate */
    for (int r = 0; r < TUNE_REPS && st == SDGP_OK; r++)
        for (int c = 0; c < nc && st == SDGP_OK; c++) {
            o->bwd = cand[c]; /* run with candidate c's plan; the plans stay owned here */
            o->bwd_plan = plans[c];
            double t = time_impl(m, o, dx, dz, &st, err);
            if (t < best[c]) best[c] = t;
        }
    int win = 0;
    for (int c = 1; c < nc; c++)
        if (best[c] < best[win]) win = c;
    o->bwd = NULL;
    o->bwd_plan = NULL;
    for (int c = 0; c < nc; c++)
        if ((c != win || st != SDGP_OK) && cand[c]->destroy) cand[c]->destroy(plans[c]);
    if (st != SDGP_OK) return st;
    model_bwd_adopt(o, cand[win], plans[win]);
    o->times.bwd_data_ms = 1e3 * best[win];
    return SDGP_OK;
}

sdgp_status sdgp_model_tune_sparse(sdgp_model *m, sdgp_error *err) {
    if (m->n_grad_pool < 1) return SDGP_OK;
    int stats = m->grad_stats, timing = m->timing;
    m->grad_stats = m->timing = 0;
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (o->bwd && o->in_mode != GRAD_NONE) st = tune_layer(m, o, i, err);
    }
    m->grad_stats = stats;
    m->timing = timing;
    return st;
}

void sdgp_model_sparse_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + 1 < size; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        buf[k++] = o->bwd ? o->bwd->code : '-';
    }
    if (model_fwd_any(m) && k + 1 < size) { /* the forward's part (model_fwd.c) */
        buf[k++] = '/';
        model_fwd_choice(m, buf + k, size - k);
        k += strlen(buf + k);
    }
    if (model_wgrad_any(m) && k + 1 < size) { /* the weight gradient's (model_wgrad.c) */
        buf[k++] = '|';
        model_wgrad_choice(m, buf + k, size - k);
        return;
    }
    if (size) buf[k] = 0;
}

sdgp_status sdgp_model_set_sparse_choice(sdgp_model *m, const char *choice, sdgp_error *err) {
    /* data gradient [ '/' forward ] [ '|' weight gradient ] */
    const char *wg = choice ? strchr(choice, '|') : NULL;
    const size_t head = choice ? (wg ? (size_t)(wg - choice) : strlen(choice)) : 0;
    const char *fwd = choice ? memchr(choice, '/', head) : NULL;
    size_t bwd_len = fwd ? (size_t)(fwd - choice) : head;
    if (!choice || (int)bwd_len != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s' does not fit a model of %d conv layers",
                         choice ? choice : "(null)", m->n_convs);
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        const bwd_impl *impl = model_bwd_find(choice[i]);
        /* '-': no entry, oneDNN's backward-data on the exact dL/dO (what every layer that does not
         * prune ran before sparse-weight data gradients) */
        int ok = impl ? impl->supports(m, o) && impl->prunes <= o->prune : !o->prune && choice[i] == '-';
        if (!ok) return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': layer %d cannot be '%c'", choice, i, choice[i]);
    }
    /* the weight gradient's part: checked whole here, applied last (a text without one: all oneDNN) */
    if (wg && (int)strlen(wg + 1) != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': its weight-gradient part does not fit %d conv layers",
                         choice, m->n_convs);
    for (int i = 0; wg && i < m->n_convs; i++)
        if (wg[1 + i] != '-' && (wg[1 + i] != 'm' || !model_wgrad_supported(m, &m->ops[m->conv_ops[i]])))
            return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': layer %d's weight-gradient kernel cannot be '%c'", choice, i,
                             wg[1 + i]);
    /* the forward's part (checked whole before it changes anything); a text without one: all dense */
    char dense[SDGP_CONV_CHOICE_LEN];
    if (!fwd) {
        model_fwd_choice(m, dense, sizeof dense);
        for (char *c = dense; *c; c++) *c = *c == '-' ? '-' : 'd';
    }
    sdgp_status fst = model_fwd_set_choice(m, fwd ? fwd + 1 : dense, fwd ? head - bwd_len - 1 : strlen(dense), err);
    if (fst != SDGP_OK) return fst;
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (o->in == 0) continue; /* a conv on the image: no data gradient */
        sdgp_status st = model_bwd_set(m, o, model_bwd_find(choice[i]), err);
        if (st != SDGP_OK) return st;
    }
    return model_wgrad_set_choice(m, wg ? wg + 1 : NULL, wg ? strlen(wg + 1) : 0, err);
}
