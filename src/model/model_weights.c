/* N:M sparse weights in a model (S-STE, SR-STE): which layers, beta, W~ per forward, SR-STE's
 * gradient term. The math is src/nn/sparse_weights.c; the rules are in include/sdgp/model.h. */
#include <stdlib.h>
#include <string.h>

#include "model/model_internal.h"

int model_weights_sparse_layer(const sdgp_model *m, int conv_index) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    if (w->kind == SDGP_WEIGHTS_DENSE) return 0;
    if (conv_index < 0) return w->classifier;
    return conv_index > 0 || w->first_layer;
}

void model_weights_add(model_builder *b, op *o, int cin, int cout, const char *name) {
    if (o->kind == OP_CONV) { /* groups of m within each conv group's channels */
        cin /= o->geom.groups;
        cout /= o->geom.groups;
    }
    const sdgp_weights_cfg *w = &b->m->cfg.weights;
    if (b->st != SDGP_OK) return;
    int along_cout = w->group == SDGP_WGROUP_COUT, channels = along_cout ? cout : cin;
    if (channels % w->m != 0) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INVALID,
                          "model: %s has %d %s channels, not a multiple of m=%d (--nm-weights %d:%d --weight-groups %s)%s", name,
                          channels, along_cout ? "output" : "input", w->m, w->n, w->m, sdgp_weights_group_names[w->group],
                          o->kind == OP_LINEAR ? "; leave the classifier dense" : o->conv_index == 0 ? "; leave the first conv dense" : "");
        return;
    }
    o->sparse_w = 1;
    o->info.sparse_weights = 1;
    if (w->kind == SDGP_WEIGHTS_SSTE) {
        int64_t one[1] = {1};
        o->p_sbeta = model_add_param(b, name, ".sste_beta", 1, one, 0, 0);
    }
}

/* The shape cout x cin x taps of op o's weights. */
static void weight_shape(const sdgp_model *m, const op *o, int *cout, int *cin, int *taps) {
    if (o->kind == OP_LINEAR) {
        const sdgp_param *p = &m->params[o->p_lw];
        *cout = (int)p->shape[0];
        *cin = (int)p->shape[1];
        *taps = 1;
    } else { /* a grouped conv's weights: Cout x Cin/groups x kh x kw */
        *cout = o->geom.Cout;
        *cin = o->geom.Cin / o->geom.groups;
        *taps = o->geom.kh * o->geom.kw;
    }
}

static const sdgp_param *weight_param(const sdgp_model *m, const op *o) {
    return &m->params[o->kind == OP_LINEAR ? o->p_lw : o->p_w];
}

/* W~ of op o with the given scale. */
static void project(const sdgp_model *m, const op *o, float *out, float scale) {
    const sdgp_weights_cfg *w = &m->cfg.weights;
    int cout, cin, taps;
    weight_shape(m, o, &cout, &cin, &taps);
    sdgp_weights_project(out, weight_param(m, o)->data, cout, cin, taps, w->kind, w->group, w->n, w->m, scale);
}

sdgp_status model_weights_setup(sdgp_model *m, sdgp_error *err) {
    size_t total = 0;
    for (int k = 0; k < m->n_ops; k++)
        if (m->ops[k].sparse_w) total += model_align_up(weight_param(m, &m->ops[k])->count);
    if (!total) return SDGP_OK;
    if (posix_memalign((void **)&m->w_eff_arena, 64, total * sizeof(float)))
        return sdgp_fail(err, SDGP_ERR_NOMEM, "model: cannot allocate %zu floats of sparse weights", total);
    float *at = m->w_eff_arena;
    for (int k = 0; k < m->n_ops; k++) {
        op *o = &m->ops[k];
        if (!o->sparse_w) continue;
        const sdgp_param *p = weight_param(m, o);
        o->w_eff = at;
        at += model_align_up(p->count);
        if (o->p_sbeta < 0) continue;
        /* beta once, from the initial weights (a checkpoint brings its own): recomputing it every
         * step lets it grow without bound (S-STE paper) */
        project(m, o, o->w_eff, 1.0f);
        m->params[o->p_sbeta].data[0] = (float)sdgp_weights_sste_beta(p->data, o->w_eff, p->count);
    }
    model_weights_refresh(m);
    return SDGP_OK;
}

/* W~ = scale * projection, with S-STE's frozen beta as the scale. */
static void refresh(const sdgp_model *m, const op *o) {
    project(m, o, o->w_eff, o->p_sbeta >= 0 ? m->params[o->p_sbeta].data[0] : 1.0f);
}

void model_weights_refresh(sdgp_model *m) {
    for (int k = 0; k < m->n_ops; k++)
        if (m->ops[k].sparse_w) refresh(m, &m->ops[k]);
}

void model_weights_backward(sdgp_model *m, const op *o) {
    if (!o->sparse_w || m->cfg.weights.kind != SDGP_WEIGHTS_SRSTE) return;
    const sdgp_param *p = weight_param(m, o);
    sdgp_weights_srste_grad(p->grad, p->data, o->w_eff, p->count, m->cfg.weights.lambda);
}

const float *sdgp_model_param_used(sdgp_model *m, int i) {
    if (i < 0 || i >= m->n_params) return NULL;
    for (int k = 0; k < m->n_ops; k++) {
        const op *o = &m->ops[k];
        if (!o->sparse_w || weight_param(m, o) != &m->params[i]) continue;
        refresh(m, o);
        return o->w_eff;
    }
    return m->params[i].data;
}
