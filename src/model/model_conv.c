/* Each conv layer's oneDNN convolution: its creation under the configuration or with per-pass
 * algorithms (the choice text's, model_tune.c), the workspace all convs share, and the tuner's
 * candidates under --conv-algo measured (model_tune.c times them). */
#include <stdlib.h>
#include <string.h>

#include "core/align.h"
#include "model/model_internal.h"

/* Layer o's conv under the configuration (algos NULL; MEASURED starts DIRECT until measured) or
 * with these per-pass algorithms; errors name the layer. */
static sdgp_status create_for(const sdgp_model *m, const op *o, sdgp_conv **c, const sdgp_conv_algo *algos,
                              sdgp_error *err) {
    sdgp_conv_options opt = {m->cfg.conv_algo, (size_t)m->cfg.conv_workspace_mb << 20};
    if (opt.algo == SDGP_CONV_MEASURED) opt.algo = SDGP_CONV_DIRECT;
    sdgp_error e;
    sdgp_status st = algos ? sdgp_conv_create_passes(c, &o->geom, 0, m->cfg.threads, algos, &opt, &e)
                           : sdgp_conv_create_opts(c, &o->geom, 0, m->cfg.threads, &opt, &e);
    return st == SDGP_OK ? st : sdgp_fail(err, st, "model: %s: %s", o->name, e.msg);
}

/* Whether conv c plans each pass with algos[pass]. */
static int plans_as(const sdgp_conv *c, const sdgp_conv_algo algos[3]) {
    for (int p = 0; p < 3; p++)
        if (sdgp_conv_get_plan(c, (sdgp_conv_pass)p).algo != algos[p]) return 0;
    return 1;
}

static void refresh_info(op *o) {
    o->info.winograd = sdgp_conv_get_algo(o->dnnl) == SDGP_CONV_WINOGRAD;
    for (int p = 0; p < 3; p++) o->info.plan[p] = sdgp_conv_get_plan(o->dnnl, (sdgp_conv_pass)p);
}

sdgp_status model_conv_create(sdgp_model *m, op *o, const sdgp_conv_algo *algos, sdgp_error *err) {
    sdgp_status st = create_for(m, o, &o->dnnl, algos, err);
    if (st == SDGP_OK) refresh_info(o);
    return st;
}

/* Layer o's conv and its implementations' plans on workspace ws (NULL: each its own). */
static sdgp_status attach_workspace(op *o, void *ws, size_t bytes, sdgp_error *err) {
    sdgp_status st = sdgp_conv_set_workspace(o->dnnl, ws, err);
    for (int p = 0; p < MODEL_NPASS && st == SDGP_OK; p++)
        if (o->impl[p] && o->impl[p]->set_workspace && o->plan[p]) st = o->impl[p]->set_workspace(o->plan[p], ws, bytes, err);
    return st;
}

sdgp_status model_conv_share_workspace(sdgp_model *m, sdgp_error *err) {
    /* One workspace for all convs, the sparse weight-gradient plans (the AVX2 path's padded input)
     * and the cout form's forward plans (transposed input and output): the layers and their passes
     * run one after another. */
    size_t ws = 64;
    for (int i = 0; i < m->n_convs; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        const size_t b = sdgp_conv_workspace_bytes(o->dnnl);
        if (b > ws) ws = b;
        for (int p = 0; p < MODEL_NPASS; p++) {
            const model_impl *impl = o->impl[p];
            const size_t w = impl && impl->workspace_bytes ? impl->workspace_bytes(o->plan[p]) : 0;
            if (w > ws) ws = w;
        }
    }
    ws = sdgp_align64(ws);
    if (ws != m->conv_ws_bytes) {
        void *buf = aligned_alloc(64, ws);
        if (!buf) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: conv workspace of %zu bytes", ws);
        for (int i = 0; i < m->n_convs; i++) { /* first give each its own: the old buffer goes */
            sdgp_status st = attach_workspace(&m->ops[m->conv_ops[i]], NULL, 0, err);
            if (st != SDGP_OK) {
                free(buf);
                return st;
            }
        }
        free(m->conv_ws);
        m->conv_ws = buf;
        m->conv_ws_bytes = ws;
    }
    for (int i = 0; i < m->n_convs; i++) {
        sdgp_status st = attach_workspace(&m->ops[m->conv_ops[i]], m->conv_ws, m->conv_ws_bytes, err);
        if (st != SDGP_OK) return st;
    }
    return SDGP_OK;
}

sdgp_status model_conv_apply(sdgp_model *m, const sdgp_conv_algo (*algos)[3], sdgp_error *err) {
    sdgp_conv **made = calloc((size_t)m->n_convs + 1, sizeof *made);
    if (!made) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory re-planning convs");
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        if (!plans_as(o->dnnl, algos[i])) st = create_for(m, o, &made[i], algos[i], err); /* else it keeps its conv */
    }
    if (st != SDGP_OK) {
        for (int i = 0; i < m->n_convs; i++) sdgp_conv_destroy(made[i]);
        free(made);
        return st;
    }
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        if (!made[i]) continue;
        sdgp_conv_destroy(o->dnnl);
        o->dnnl = made[i];
        refresh_info(o);
    }
    free(made);
    return model_conv_share_workspace(m, err);
}

/* ---- measuring: the candidates of model_tune ---- */

sdgp_status model_conv_candidates(sdgp_model *m, op *o, sdgp_conv *conv[2], sdgp_error *err) {
    conv[0] = conv[1] = NULL;
    const size_t limit = (size_t)m->cfg.conv_workspace_mb << 20;
    sdgp_conv_algo algos[3] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT, SDGP_CONV_DIRECT};
    int any = 0;
    for (int p = 0; p < 3; p++) {
        /* Winograd in pass p alone: a kernel (oneDNN's, or sdgp's where oneDNN has none;
         * SDGP_WINOGRAD=onednn can leave a pass without one), a split within the limit (WINOGRAD
         * exceeds it when none fits), and a pass that runs */
        if (p == SDGP_CONV_BACKWARD_DATA && o->in_mode == GRAD_NONE) continue;
        sdgp_conv_algo one[3] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT, SDGP_CONV_DIRECT};
        one[p] = SDGP_CONV_WINOGRAD;
        sdgp_conv *c = NULL;
        sdgp_error e;
        sdgp_status st = create_for(m, o, &c, one, &e);
        if (st == SDGP_OK && (limit == 0 || sdgp_conv_get_plan(c, (sdgp_conv_pass)p).workspace_bytes <= limit))
            algos[p] = SDGP_CONV_WINOGRAD, any = 1;
        sdgp_conv_destroy(c);
        if (st != SDGP_OK && st != SDGP_ERR_UNSUPPORTED) return sdgp_fail(err, st, "%s", e.msg);
    }
    if (!any) return SDGP_OK; /* no Winograd kernel for this layer here */
    static const sdgp_conv_algo direct[3] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT, SDGP_CONV_DIRECT};
    sdgp_status st = create_for(m, o, &conv[0], direct, err);
    if (st == SDGP_OK) st = create_for(m, o, &conv[1], algos, err);
    if (st != SDGP_OK) {
        sdgp_conv_destroy(conv[0]);
        sdgp_conv_destroy(conv[1]);
        conv[0] = conv[1] = NULL;
    }
    return st;
}

sdgp_status model_conv_settle(sdgp_model *m, op *o, sdgp_conv *conv[2], const sdgp_conv_algo chosen[3], sdgp_error *err) {
    sdgp_conv *keep = plans_as(conv[0], chosen) ? conv[0] : plans_as(conv[1], chosen) ? conv[1] : NULL;
    sdgp_status st = keep ? SDGP_OK : create_for(m, o, &keep, chosen, err);
    for (int k = 0; k < 2; k++)
        if (conv[k] != keep) sdgp_conv_destroy(conv[k]);
    conv[0] = conv[1] = NULL;
    if (st != SDGP_OK) return st;
    sdgp_conv_destroy(o->dnnl);
    o->dnnl = keep;
    refresh_info(o);
    return SDGP_OK;
}
