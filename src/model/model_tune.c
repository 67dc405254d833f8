/* The one tuner: per conv layer and pass, the implementations the configuration allows (and, under
 * --conv-algo measured, oneDNN's direct and Winograd algorithms for those that run oneDNN's
 * product) timed against each other, the fastest kept; the choice text of checkpoints.
 *
 * Each is timed as it runs in a step, pruning and weight packing included (dense = prune to a
 * dense tensor + oneDNN; sparse = prune to the compressed form + pack + sparse kernel; winograd =
 * pack U + the fused Winograd-domain kernel; sparse-weights = pack W~ + its kernel; oneDNN's
 * Winograd with its reorders). Interleaved repetitions, the best of each, so a noisy neighbour
 * hurts all alike (model_impl.c). Why measure oneDNN's algorithm: Winograd's gain differs per pass
 * (backward-weights reduces transformed tiles over the batch, backward-data transforms the output
 * gradient; the reorders to and from oneDNN's blocked layout are a larger share of a pass on small
 * planes and at large batches) and per shape, where a rule (conv_dnnl.c winograd_pays) gives all
 * three passes of a layer one algorithm. */
#include <stdlib.h>
#include <string.h>

#include "model/model_choice.h"
#include "model/model_internal.h"

/* Whether the tuner chooses among the entries of layer o's pass: the layers that hold an entry of
 * the data or weight gradient; the forward of a layer with sparse weights under auto / fastest
 * (the image's conv keeps dense: its input is the caller's). */
static int entries_tuned(const sdgp_model *m, const op *o, model_pass pass) {
    if (pass != MODEL_FWD) return o->impl[pass] != NULL;
    return o->fwd_ok && o->in != 0 && m->cfg.sparse != SDGP_SPARSE_ON && m->cfg.sparse != SDGP_SPARSE_OFF;
}

sdgp_status model_tune(sdgp_model *m, const int entries[MODEL_NPASS], int algos, sdgp_error *err) {
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        sdgp_conv *conv[2] = {o->dnnl, NULL};
        if (algos && (st = model_conv_candidates(m, o, conv, err)) != SDGP_OK) break;
        const int measure = conv[1] != NULL; /* else no pass has a Winograd kernel: the layer keeps its conv */
        if (!measure) conv[0] = o->dnnl;
        sdgp_conv_algo chosen[MODEL_NPASS] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT, SDGP_CONV_DIRECT};
        for (int p = 0; p < MODEL_NPASS && st == SDGP_OK; p++) {
            if (p == MODEL_BWD_DATA && o->in_mode == GRAD_NONE) continue; /* the pass never runs */
            int algo;
            st = model_tune_pass(m, o, (model_pass)p, entries[p] && entries_tuned(m, o, (model_pass)p), conv, &algo, err);
            if (algo) chosen[p] = SDGP_CONV_WINOGRAD;
        }
        if (measure && st == SDGP_OK) st = model_conv_settle(m, o, conv, chosen, err);
        else if (measure) sdgp_conv_destroy(conv[0]), sdgp_conv_destroy(conv[1]);
    }
    return st == SDGP_OK ? model_conv_share_workspace(m, err) : st;
}

sdgp_status sdgp_model_tune_sparse(sdgp_model *m, sdgp_error *err) {
    if (!m) return sdgp_fail(err, SDGP_ERR_INVALID, "model_tune_sparse: NULL model");
    if (m->n_grad_pool < 1) return SDGP_OK;
    static const int data_gradient[MODEL_NPASS] = {0, 1, 0};
    return model_tune(m, data_gradient, 0, err);
}

sdgp_status sdgp_model_tune_conv(sdgp_model *m, sdgp_error *err) {
    if (!m) return sdgp_fail(err, SDGP_ERR_INVALID, "model_tune_conv: NULL model");
    static const int none[MODEL_NPASS] = {0, 0, 0};
    return model_tune(m, none, 1, err);
}

/* ---- the choice text: per conv layer "FBW:abc" (sdgp_model_choice) ---- */

#define TOKEN 7 /* "FBW:abc" */

/* What '-' stands for in a pass: the oneDNN entry where the layer holds one (forward: a layer with
 * sparse weights runs oneDNN on W~; weight gradient: a pruned layer prunes into oneDNN), else none
 * (oneDNN on the exact tensors). */
static const model_impl *plain_for(const sdgp_model *m, const op *o, model_pass pass) {
    if (pass == MODEL_FWD) return o->fwd_ok ? model_impl_find(pass, 'd') : NULL;
    if (pass == MODEL_BWD_WEIGHTS) return model_wgrad_pruned(m, o) ? model_impl_find(pass, '-') : NULL;
    return NULL;
}

void sdgp_model_choice(const sdgp_model *m, char *buf, size_t size) {
    size_t k = 0;
    for (int i = 0; i < m->n_convs && k + TOKEN + 1 < size; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        if (i) buf[k++] = ',';
        for (int p = 0; p < MODEL_NPASS; p++) buf[k++] = o->impl[p] ? o->impl[p]->code : '-';
        buf[k++] = ':';
        for (int p = 0; p < MODEL_NPASS; p++)
            buf[k++] = sdgp_conv_get_plan(o->dnnl, (sdgp_conv_pass)p).algo == SDGP_CONV_WINOGRAD ? 'w' : 'd';
    }
    if (size) buf[k] = 0;
}

sdgp_status model_choice_from_legacy(const char *kernels, const char *convs, char *out, size_t size, sdgp_error *err) {
    const char *wg = strchr(kernels, '|');
    const size_t head = wg ? (size_t)(wg - kernels) : strlen(kernels);
    const char *fwd = memchr(kernels, '/', head);
    const size_t n = fwd ? (size_t)(fwd - kernels) : head; /* the data-gradient part: a letter per layer */
    const char *part = fwd && head - n - 1 != n ? "forward" : wg && strlen(wg + 1) != n ? "weight-gradient" : NULL;
    if (part)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%.200s': its %s part is not a letter for each of its %zu "
                         "layers", kernels, part, n);
    if ((convs && strlen(convs) != (n ? 4 * n - 1 : 0)) || (n ? n * (TOKEN + 1) : 1) > size)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%.200s' with algorithms '%.200s': not one abc per layer, or "
                         "too long", kernels, convs ? convs : "");
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (i) out[k++] = ',';
        out[k++] = fwd ? fwd[1 + i] : '-';
        out[k++] = kernels[i];
        out[k++] = wg ? wg[1 + i] : '-';
        if (convs) out[k++] = ':', memcpy(out + k, convs + 4 * i, 3), k += 3;
    }
    out[k] = 0;
    return SDGP_OK;
}

/* The entry letter c names for layer o's pass (*out; NULL for oneDNN on the exact tensors), or an
 * error naming the layer. */
static sdgp_status parse_letter(const sdgp_model *m, const op *o, int i, model_pass pass, char c, const model_impl **out,
                                const char *text, sdgp_error *err) {
    const model_impl *impl = model_impl_find(pass, c);
    if (c == '-') impl = plain_for(m, o, pass);
    const char *why = impl ? impl->unsupported(m, o) : NULL;
    if (!impl && c != '-') why = "no such implementation";
    /* the data gradient: '-' only where the layer does not prune; an entry that prunes only where it does */
    if (!why && pass == MODEL_BWD_DATA && impl && impl->prunes > o->prune) why = "the layer does not prune";
    if (!why && pass == MODEL_BWD_DATA && !impl && o->prune) why = "the layer prunes";
    *out = impl;
    if (!why) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_FORMAT, "choice '%.200s': layer %d (%s) cannot be '%c' in its %s pass: %s", text, i,
                     o->name, c, model_pass_name(pass), why);
}

/* Whether text is the earlier kernel-choice text: parts split by '/' or '|', or a letter per layer
 * with no token separators. */
static int legacy_text(const sdgp_model *m, const char *text) {
    return strpbrk(text, "/|") || (!strpbrk(text, ",:") && strlen(text) == (size_t)m->n_convs);
}

sdgp_status sdgp_model_set_choice(sdgp_model *m, const char *choice, sdgp_error *err) {
    if (!m || !choice) return sdgp_fail(err, SDGP_ERR_INVALID, "model_set_choice: NULL argument");
    char converted[SDGP_CHOICE_LEN];
    const char *given = choice; /* what errors quote */
    if (legacy_text(m, choice)) {
        sdgp_status st = model_choice_from_legacy(choice, NULL, converted, sizeof converted, err);
        if (st != SDGP_OK) return st;
        choice = converted;
    }
    const model_impl *(*impls)[MODEL_NPASS] = calloc((size_t)m->n_convs + 1, sizeof *impls);
    sdgp_conv_algo(*algos)[3] = calloc((size_t)m->n_convs + 1, sizeof *algos);
    sdgp_status st = impls && algos ? SDGP_OK : sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory");
    /* every letter checked before anything changes */
    const char *t = choice;
    int with_algos = 0;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        const size_t len = strcspn(t, ",");
        if ((len != 3 && len != TOKEN) || (len == TOKEN && t[3] != ':') || (i + 1 < m->n_convs && t[len] != ',')) {
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "choice '%.200s' does not fit a model of %d conv layers: layer %d is "
                           "not FBW:abc", given, m->n_convs, i);
            break;
        }
        for (int p = 0; p < MODEL_NPASS && st == SDGP_OK; p++) {
            st = parse_letter(m, o, i, (model_pass)p, t[p], &impls[i][p], given, err);
            const int wino = sdgp_conv_get_plan(o->dnnl, (sdgp_conv_pass)p).algo == SDGP_CONV_WINOGRAD;
            const char a = len == TOKEN ? t[4 + p] : wino ? 'w' : 'd';
            algos[i][p] = a == 'w' ? SDGP_CONV_WINOGRAD : SDGP_CONV_DIRECT;
            if (st == SDGP_OK && a != 'd' && a != 'w')
                st = sdgp_fail(err, SDGP_ERR_FORMAT, "choice '%.200s': layer %d (%s) has algorithm '%c' in its %s pass "
                               "(d or w)", given, i, o->name, a, model_pass_name((model_pass)p));
        }
        with_algos |= len == TOKEN;
        t += len + (i + 1 < m->n_convs); /* past the ',' checked above */
    }
    if (st == SDGP_OK && *t)
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "choice '%.200s' has more than the model's %d conv layers", given, m->n_convs);
    if (st == SDGP_OK && with_algos) st = model_conv_apply(m, (const sdgp_conv_algo(*)[3])algos, err);
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++)
        for (int p = 0; p < MODEL_NPASS && st == SDGP_OK; p++) {
            op *o = &m->ops[m->conv_ops[i]];
            if (p == MODEL_BWD_DATA && o->in == 0) continue; /* a conv on the image: no data gradient */
            st = model_impl_set(m, o, (model_pass)p, impls[i][p], err);
            if (st == SDGP_OK && p == MODEL_FWD) model_fwd_pack(m, o);
        }
    free(impls);
    free(algos);
    return st == SDGP_OK ? model_conv_share_workspace(m, err) : st;
}
