/* The one tuner: per conv layer and pass, the implementations the configuration allows (and, under
 * --conv-algo measured, oneDNN's direct and Winograd algorithms for those that run oneDNN's
 * product) timed against each other, the fastest kept; the kernel-choice text of checkpoints.
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
#include <string.h>

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

/* ---- the kernel-choice text: data gradient [ '/' forward ] [ '|' weight gradient ], a letter per
 * conv layer and pass: its implementation's code, '-' for none ---- */

/* What '-' stands for in a pass's part: the oneDNN entry where the layer holds one (forward: a
 * layer with sparse weights runs oneDNN on W~; weight gradient: a pruned layer prunes into oneDNN),
 * else none (oneDNN on the exact tensors). */
static const model_impl *plain_for(const sdgp_model *m, const op *o, model_pass pass) {
    if (pass == MODEL_FWD) return o->fwd_ok ? model_impl_find(pass, 'd') : NULL;
    if (pass == MODEL_BWD_WEIGHTS) return model_wgrad_pruned(m, o) ? model_impl_find(pass, '-') : NULL;
    return NULL;
}

/* Whether a pass has a part in the text: the data gradient always; the forward where some layer has
 * sparse weights it can run; the weight gradient where some layer can run its kernel. */
static int pass_in_text(const sdgp_model *m, model_pass pass) {
    if (pass == MODEL_BWD_DATA) return 1;
    for (int i = 0; i < m->n_convs; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        if (pass == MODEL_FWD ? o->fwd_ok : !model_impl_find(pass, 'm')->unsupported(m, o)) return 1;
    }
    return 0;
}

static const char pass_mark[MODEL_NPASS] = {'/', 0, '|'}; /* before a part */
static const char *const part_label[MODEL_NPASS] = {"forward", "data-gradient", "weight-gradient"};

void sdgp_model_sparse_choice(const sdgp_model *m, char *buf, size_t size) {
    static const model_pass order[] = {MODEL_BWD_DATA, MODEL_FWD, MODEL_BWD_WEIGHTS};
    size_t k = 0;
    for (int p = 0; p < 3; p++) {
        const model_pass pass = order[p];
        if (!pass_in_text(m, pass)) continue;
        if (pass_mark[pass] && k + 1 < size) buf[k++] = pass_mark[pass];
        for (int i = 0; i < m->n_convs && k + 1 < size; i++) {
            const model_impl *impl = m->ops[m->conv_ops[i]].impl[pass];
            buf[k++] = impl ? impl->code : '-';
        }
    }
    if (size) buf[k] = 0;
}

/* The entry letter c names for layer o in pass's part (*out; NULL for oneDNN on the exact tensors),
 * or an error naming the layer. */
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
    return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': layer %d cannot be '%c' in the %s part (%s: %s)", text, i, c,
                     part_label[pass], o->name, why);
}

sdgp_status sdgp_model_set_sparse_choice(sdgp_model *m, const char *choice, sdgp_error *err) {
    if (!choice) return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice (null) does not fit a model of %d conv layers", m->n_convs);
    /* the parts; a text without the forward's runs every forward dense, without the weight
     * gradient's every weight gradient on oneDNN */
    const char *wg = strchr(choice, '|');
    const size_t head = wg ? (size_t)(wg - choice) : strlen(choice);
    const char *fwd = memchr(choice, '/', head);
    const char *part[MODEL_NPASS] = {fwd ? fwd + 1 : NULL, choice, wg ? wg + 1 : NULL};
    const size_t len[MODEL_NPASS] = {fwd ? head - (size_t)(fwd + 1 - choice) : 0, fwd ? (size_t)(fwd - choice) : head,
                                     wg ? strlen(wg + 1) : 0};
    if ((int)len[MODEL_BWD_DATA] != m->n_convs)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s' does not fit a model of %d conv layers", choice, m->n_convs);
    for (int p = 0; p < MODEL_NPASS; p++)
        if (part[p] && (int)len[p] != m->n_convs)
            return sdgp_fail(err, SDGP_ERR_FORMAT, "kernel choice '%s': its %s part does not fit %d conv layers", choice,
                             part_label[p], m->n_convs);
    /* every letter checked before anything changes */
    for (int i = 0; i < m->n_convs; i++)
        for (int p = 0; p < MODEL_NPASS; p++) {
            const model_impl *impl;
            sdgp_status st = parse_letter(m, &m->ops[m->conv_ops[i]], i, (model_pass)p, part[p] ? part[p][i] : '-', &impl,
                                          choice, err);
            if (st != SDGP_OK) return st;
        }
    for (int i = 0; i < m->n_convs; i++)
        for (int p = 0; p < MODEL_NPASS; p++) {
            op *o = &m->ops[m->conv_ops[i]];
            if (p == MODEL_BWD_DATA && o->in == 0) continue; /* a conv on the image: no data gradient */
            const model_impl *impl;
            sdgp_status st = parse_letter(m, o, i, (model_pass)p, part[p] ? part[p][i] : '-', &impl, choice, err);
            if (st == SDGP_OK) st = model_impl_set(m, o, (model_pass)p, impl, err);
            if (st == SDGP_OK && p == MODEL_FWD) model_fwd_pack(m, o);
            if (st != SDGP_OK) return st;
        }
    return model_conv_share_workspace(m, err);
}
