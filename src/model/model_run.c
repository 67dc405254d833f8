/* Running a model: forward, backward (with SDGP's pruned data gradient), SGD. */
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "core/clock.h"
#include "model/model_internal.h"
#include "sdgp/nn.h"

static double now_ms(void) { return 1e3 * sdgp_now_s(); }

/* ---- forward ---- */

/* ---- BatchNorm over the batches of all processes (sdgp_model_set_bn_dist) ----
 * The sums go through the communicator's blocking allreduce: the next layer needs them. The first
 * failure is kept and returned by the next backward (forward has no status). */
static void bn_dist_forward(sdgp_model *m, op *o, float *y, int64_t rows) {
    const sdgp_param *p = m->params;
    int C = o->geom.Cout;
    sdgp_batchnorm_forward_stats(m->bn_sums, o->z_fwd, rows, C);
    if (m->bn_st == SDGP_OK)
        m->bn_st = m->bn_dist->allreduce(m->bn_dist->ctx, m->bn_sums, 2 * (size_t)C + 1, SDGP_DIST_DOUBLE, &m->bn_err);
    o->bn_total = m->bn_sums[2 * C];
    sdgp_batchnorm_forward_train_sums(y, o->mean, o->rstd, p[o->p_rmean].data, p[o->p_rvar].data, m->bn_sums, o->z_fwd,
                                      p[o->p_gamma].data, p[o->p_beta].data, rows, C, m->cfg.bn_momentum,
                                      m->cfg.bn_eps, o->relu);
}

/* dy becomes dL/dz from the whole batch's sums; this process's share of dgamma and dbeta stays in
 * the parameters' gradients (the gradient allreduce adds the shares). */
static sdgp_status bn_dist_backward(sdgp_model *m, op *o, float *dy, int64_t rows, sdgp_error *err) {
    const sdgp_param *p = m->params;
    int C = o->geom.Cout;
    const float *beta = o->relu ? p[o->p_beta].data : NULL;
    sdgp_batchnorm_backward_sums(m->bn_sums, p[o->p_gamma].grad, p[o->p_beta].grad, dy, o->z, o->mean, o->rstd,
                                 p[o->p_gamma].data, beta, rows, C);
    sdgp_status st = m->bn_dist->allreduce(m->bn_dist->ctx, m->bn_sums, 2 * (size_t)C, SDGP_DIST_DOUBLE, err);
    if (st != SDGP_OK) return st;
    float *dgamma_all = (float *)(m->bn_sums + 2 * C + 1), *dbeta_all = dgamma_all + C;
    sdgp_batchnorm_backward_apply(dy, dgamma_all, dbeta_all, m->bn_sums, o->bn_total, dy, o->z, o->mean, o->rstd,
                                  p[o->p_gamma].data, beta, rows, C);
    return SDGP_OK;
}

sdgp_status sdgp_model_set_bn_dist(sdgp_model *m, const sdgp_dist *dist, sdgp_error *err) {
    free(m->bn_sums);
    m->bn_sums = NULL;
    m->bn_dist = NULL;
    m->bn_st = SDGP_OK;
    if (!dist) return SDGP_OK;
    int cmax = 0;
    for (int i = 0; i < m->n_convs; i++) {
        const op *o = &m->ops[m->conv_ops[i]];
        if (o->bn && o->geom.Cout > cmax) cmax = o->geom.Cout;
    }
    /* sums (2C + 1 doubles), then the whole batch's dgamma and dbeta (2C floats) */
    m->bn_sums = malloc((2 * (size_t)cmax + 1) * sizeof(double) + 2 * (size_t)cmax * sizeof(float));
    if (!m->bn_sums) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory for synchronised BatchNorm");
    m->bn_dist = dist;
    return SDGP_OK;
}

void sdgp_model_set_grad_hook(sdgp_model *m, sdgp_grad_hook hook, void *ctx) {
    m->grad_hook = hook;
    m->grad_hook_ctx = ctx;
}

static void grad_ready(sdgp_model *m, int param) {
    if (m->grad_hook && param >= 0) m->grad_hook(m->grad_hook_ctx, param);
}

/* conv, then (with bn) BatchNorm into the output slot and (with relu) ReLU; without bn the conv
 * writes the output slot itself (o->z is that slot). */
static void conv_forward(sdgp_model *m, op *o, int train) {
    const float *x = m->slots[o->in].act;
    float *y = m->slots[o->out].act, *z = o->z_fwd;
    const sdgp_param *p = m->params;
    int64_t rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    double t0 = m->timing ? now_ms() : 0;
    /* A failure here would be an internal oneDNN error on shapes validated at build time. */
    model_fwd_pack(m, o); /* this forward's W~ (model_weights_refresh), packed where the sparse kernel runs */
    model_fwd_product(m, o, z, x);
    if (m->timing) o->times.fwd_ms = now_ms() - t0;
    if (!o->bn) {
        if (o->relu) sdgp_relu_forward(y, y, m->slots[o->out].count);
    } else if (train && m->bn_dist) {
        bn_dist_forward(m, o, y, rows);
    } else if (train) {
        (o->relu ? sdgp_batchnorm_relu_forward_train : sdgp_batchnorm_forward_train)(
            y, o->mean, o->rstd, p[o->p_rmean].data, p[o->p_rvar].data, z, p[o->p_gamma].data, p[o->p_beta].data, rows,
            o->geom.Cout, m->cfg.bn_momentum, m->cfg.bn_eps);
    } else {
        (o->relu ? sdgp_batchnorm_relu_forward_eval : sdgp_batchnorm_forward_eval)(
            y, z, p[o->p_gamma].data, p[o->p_beta].data, p[o->p_rmean].data, p[o->p_rvar].data, rows, o->geom.Cout,
            m->cfg.bn_eps);
    }
}

const float *sdgp_model_forward(sdgp_model *m, const float *x, int train) {
    m->slots[0].act = (float *)x; /* read only; kept for the first conv's weight gradient */
    model_weights_refresh(m);
    for (int k = 0; k < m->n_ops; k++) {
        op *o = &m->ops[k];
        const slot *in = &m->slots[o->in];
        slot *out = &m->slots[o->out];
        switch (o->kind) {
        case OP_CONV: conv_forward(m, o, train); break;
        case OP_MAXPOOL2: sdgp_maxpool2_forward(out->act, o->pool_arg, in->act, m->B, in->H, in->W, in->C); break;
        case OP_MAXPOOL:
            sdgp_maxpool_forward(out->act, o->pool_arg, in->act, m->B, in->H, in->W, in->C, o->pool_k, o->pool_stride,
                                 o->pool_pad);
            break;
        case OP_ADD:
            (o->relu ? sdgp_add_relu_forward : sdgp_add_forward)(out->act, in->act, m->slots[o->in2].act, out->count);
            break;
        case OP_GLOBAL_MAXPOOL: sdgp_global_maxpool_forward(out->act, o->gmp_arg, in->act, m->B, in->H * in->W, in->C); break;
        case OP_GLOBAL_AVGPOOL: sdgp_global_avgpool_forward(out->act, in->act, m->B, in->H * in->W, in->C); break;
        case OP_LINEAR:
            sdgp_linear_forward(out->act, in->act, model_op_weights(m, o), o->p_lb >= 0 ? m->params[o->p_lb].data : NULL,
                                m->B, in->C, out->C);
            break;
        case OP_SCALE: sdgp_scale_forward(out->act, in->act, o->scale, out->count); break;
        }
    }
    return m->slots[m->logits_slot].act;
}

/* ---- backward ---- */

static float *grad_buffer(sdgp_model *m, int buf, const float *dlogits) {
    return buf == -2 ? (float *)dlogits : buf >= 0 ? m->grad_pool[buf] : NULL;
}

/* Where an op writes its input's gradient: the buffer itself (first writer), or a free buffer
 * that is added afterwards (see finish_input_grad). */
static float *input_target(sdgp_model *m, const op *o) {
    return o->in_mode == GRAD_ACCUMULATE ? m->grad_pool[o->acc_tmp]
           : o->in_mode == GRAD_WRITE    ? m->grad_pool[o->in_buf]
                                         : NULL;
}

static void finish_input_grad(sdgp_model *m, const op *o, size_t count) {
    if (o->in_mode == GRAD_ACCUMULATE) sdgp_accumulate(m->grad_pool[o->in_buf], m->grad_pool[o->acc_tmp], count);
}

/* OP_ADD hands dy to an input: a copy for the first writer, a sum otherwise. */
static void add_input_grad(sdgp_model *m, grad_mode mode, int buf, const float *dy, size_t count) {
    if (mode == GRAD_WRITE) memcpy(m->grad_pool[buf], dy, count * sizeof(float));
    if (mode == GRAD_ACCUMULATE) sdgp_accumulate(m->grad_pool[buf], dy, count);
}

static void grad_stats(sdgp_model *m, op *o, const float *dx_pruned, const float *dz) {
    /* dense reference into scratch2 (free at this point of the step) */
    size_t n = m->slots[o->in].count;
    (void)sdgp_conv_backward_data(o->dnnl, m->scratch2, dz, model_op_weights(m, o), NULL);
    double dd = 0, pp = 0, pd = 0, diff = 0;
#pragma omp parallel for reduction(+ : dd, pp, pd, diff) schedule(static)
    for (size_t i = 0; i < n; i++) {
        double a = dx_pruned[i], b = m->scratch2[i];
        dd += b * b;
        pp += a * a;
        pd += a * b;
        diff += (a - b) * (a - b);
    }
    o->info.rel_l2 = dd > 0 ? sqrt(diff / dd) : 0.0;
    o->info.cosine = dd > 0 && pp > 0 ? pd / sqrt(dd * pp) : 1.0;
}

sdgp_prune_cfg model_prune_cfg(const sdgp_model *m, const op *o, sdgp_prune_cfg base, sdgp_axis axis, uint64_t seed,
                               uint64_t step) {
    base.axis = axis;
    base.seed = seed;
    base.step = step;
    base.layer = (uint32_t)o->conv_index;
    base.threads = m->cfg.threads;
    return base;
}

/* dx = dL/dD for conv op o from its dense dL/dO dz: oneDNN, or the layer's implementation
 * (model_bwd.c): SDGP's pruned product, or the sparse-weight kernel on the exact dL/dO. */
sdgp_status model_conv_backward_data(sdgp_model *m, op *o, float *dx, const float *dz, uint64_t step,
                                     sdgp_error *err) {
    int64_t rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    model_args a = {.out = dx, .dz = dz, .pc = &m->cfg.prune};
    if (!o->prune) {
        if (m->dz_hook) m->dz_hook(m->dz_hook_ctx, o->conv_index, dz, dz, rows, o->geom.Cout);
        return model_impl_run(m, o, MODEL_BWD_DATA, &a, err);
    }
    sdgp_prune_cfg pc = model_prune_cfg(m, o, m->cfg.prune, SDGP_AXIS_CHANNEL, m->cfg.seed, step);
    a.pc = &pc;
    double t0 = m->timing ? now_ms() : 0;
    sdgp_status st = model_impl_run(m, o, MODEL_BWD_DATA, &a, err);
    if (m->timing) {
        o->times.prune_ms = a.prune_ms;
        o->times.bwd_data_ms = now_ms() - t0 - a.prune_ms;
    }
    if (st == SDGP_OK && m->dz_hook) {
        const float *used = dz;
        st = o->impl[MODEL_BWD_DATA]->pruned_dz(m, o, &used, err);
        if (st == SDGP_OK) m->dz_hook(m->dz_hook_ctx, o->conv_index, dz, used, rows, o->geom.Cout);
    }
    if (st == SDGP_OK && m->grad_stats) grad_stats(m, o, dx, dz);
    return st;
}

/* y = relu(bn(z)) (or bn(z)) of conv op src again, from its z and the statistics its forward
 * saved: bitwise what that forward wrote (test_model: batchnorm_recompute_is_bitwise). */
static void bn_output_recompute(const sdgp_model *m, const op *src, float *y) {
    const sdgp_param *p = m->params;
    (src->relu ? sdgp_batchnorm_relu_recompute : sdgp_batchnorm_recompute)(
        y, src->z, src->mean, src->rstd, p[src->p_gamma].data, p[src->p_beta].data,
        (int64_t)m->B * src->geom.Ho * src->geom.Wo, src->geom.Cout);
}

/* SDGP_RECOMPUTE_BLOCKS: the forward convs of the block [first, add) again, right after the add's
 * backward, into the z buffers backward reads from here on (model_memory.c, plan_blocks). Inputs:
 * a kept slot, the output of a conv of the block (its y_re), or a transient output from before the
 * block, recomputed from its producer's kept z. BatchNorm's statistics are forward's: nothing is
 * updated twice, and z comes out bitwise as forward had it (same primitive, same input). */
static void recompute_block(sdgp_model *m, int first, int add) {
    for (int j = first; j < add; j++) {
        op *o = &m->ops[j];
        const float *x = m->slots[o->in].act;
        if (o->recompute_from >= first) {
            x = m->ops[o->recompute_from].y_re;
        } else if (o->recompute_from >= 0) {
            bn_output_recompute(m, &m->ops[o->recompute_from], o->x_re);
            x = o->x_re;
        }
        model_fwd_product(m, o, o->z, x); /* the same kernel as the forward: the same bits */
        if (o->y_re) bn_output_recompute(m, o, o->y_re);
    }
}

static sdgp_status conv_backward(sdgp_model *m, op *o, float *dy, uint64_t step, sdgp_error *err) {
    const sdgp_param *p = m->params;
    int64_t rows = (int64_t)m->B * o->geom.Ho * o->geom.Wo;
    /* ReLU and BatchNorm backward, fused and in place: dy becomes dL/dz, the conv's dense dL/dO
     * (without BatchNorm, the ReLU's mask is the kept output's sign). */
    if (o->bn && m->bn_dist) {
        sdgp_status st = bn_dist_backward(m, o, dy, rows, err);
        if (st != SDGP_OK) return st;
    } else if (o->bn && o->relu)
        sdgp_batchnorm_relu_backward(dy, p[o->p_gamma].grad, p[o->p_beta].grad, dy, o->z, o->mean, o->rstd,
                                     p[o->p_gamma].data, p[o->p_beta].data, rows, o->geom.Cout);
    else if (o->bn)
        sdgp_batchnorm_backward(dy, p[o->p_gamma].grad, p[o->p_beta].grad, dy, o->z, o->mean, o->rstd, p[o->p_gamma].data,
                                rows, o->geom.Cout);
    else if (o->relu)
        sdgp_relu_backward(dy, dy, o->z, m->slots[o->out].count);
    if (o->bn) {
        grad_ready(m, o->p_gamma);
        grad_ready(m, o->p_beta);
    }
    const float *dz = dy;
    float *dx = o->in_mode != GRAD_NONE ? input_target(m, o) : NULL; /* NULL: the input is the image */
    sdgp_status st = SDGP_OK;

    /* Weight gradient first: a transient input is recomputed into dx's buffer, which the data
     * gradient overwrites afterwards. It uses the dense dL/dO, or with --prune-wgrad the pruned one
     * (model_wgrad.c: the pruning is part of bwd_weights_ms, as the recompute is). */
    double t0 = m->timing ? now_ms() : 0;
    const float *x = m->slots[o->in].act;
    if (o->recompute_from >= 0) {
        bn_output_recompute(m, &m->ops[o->recompute_from], dx);
        x = dx;
    }
    st = model_conv_backward_weights(m, o, p[o->p_w].grad, x, dz, step, err);
    if (m->timing) o->times.bwd_weights_ms = now_ms() - t0;
    if (st != SDGP_OK) return st;
    model_weights_backward(m, o); /* the gradient of W~ is W's (straight-through) */
    grad_ready(m, o->p_w);        /* before the data gradient: its allreduce can overlap with it */
    if (!dx) return st;

    t0 = m->timing ? now_ms() : 0;
    st = model_conv_backward_data(m, o, dx, dz, step, err);
    if (st != SDGP_OK) return st;
    if (m->timing && !o->prune) o->times.bwd_data_ms = now_ms() - t0;
    finish_input_grad(m, o, m->slots[o->in].count);
    return SDGP_OK;
}

sdgp_status sdgp_model_backward(sdgp_model *m, const float *dlogits, uint64_t step, sdgp_error *err) {
    if (m->bn_st != SDGP_OK) { /* a failed BatchNorm allreduce of the forward */
        m->bn_st = SDGP_OK;
        return sdgp_fail(err, SDGP_ERR_INTERNAL, "forward: %s", m->bn_err.msg);
    }
    for (int k = m->n_ops - 1; k >= 0; k--) {
        op *o = &m->ops[k];
        slot *in = &m->slots[o->in], *out = &m->slots[o->out];
        float *dy = grad_buffer(m, o->out_buf, dlogits);
        float *dx = input_target(m, o);
        switch (o->kind) {
        case OP_CONV: {
            sdgp_status st = conv_backward(m, o, dy, step, err);
            if (st != SDGP_OK) return st;
            continue; /* finished its own input gradient */
        }
        case OP_MAXPOOL2: sdgp_maxpool2_backward(dx, dy, o->pool_arg, m->B, in->H, in->W, in->C); break;
        case OP_MAXPOOL:
            sdgp_maxpool_backward(dx, dy, o->pool_arg, m->B, in->H, in->W, in->C, o->pool_k, o->pool_stride, o->pool_pad);
            break;
        case OP_ADD: /* d(a + b): both inputs receive dy (a may own dy's buffer: it needs nothing), after
                        the ReLU's mask (from the kept output) when there is one, in place: dy is this
                        op's alone */
            if (o->relu) sdgp_relu_backward(dy, dy, out->act, out->count);
            add_input_grad(m, o->in2_mode, o->in2_buf, dy, out->count);
            if (!o->in_inherits) add_input_grad(m, o->in_mode, o->in_buf, dy, out->count);
            if (o->block_first >= 0) recompute_block(m, o->block_first, k);
            continue;
        case OP_GLOBAL_MAXPOOL: sdgp_global_maxpool_backward(dx, dy, o->gmp_arg, m->B, in->H * in->W, in->C); break;
        case OP_GLOBAL_AVGPOOL: sdgp_global_avgpool_backward(dx, dy, m->B, in->H * in->W, in->C); break;
        case OP_LINEAR:
            sdgp_linear_backward(dx, m->params[o->p_lw].grad, o->p_lb >= 0 ? m->params[o->p_lb].grad : NULL, dy, in->act,
                                 model_op_weights(m, o), m->B, in->C, out->C);
            model_weights_backward(m, o);
            grad_ready(m, o->p_lw);
            grad_ready(m, o->p_lb);
            break;
        case OP_SCALE: sdgp_scale_forward(dx, dy, o->scale, out->count); break;
        }
        finish_input_grad(m, o, in->count);
    }
    return SDGP_OK;
}

void sdgp_model_set_dz_hook(sdgp_model *m, sdgp_dz_hook hook, void *ctx) {
    m->dz_hook = hook;
    m->dz_hook_ctx = ctx;
}

void sdgp_model_sgd(sdgp_model *m, float lr, float momentum, float weight_decay, int nesterov) {
    for (int i = 0; i < m->n_params; i++) {
        sdgp_param *p = &m->params[i];
        if (!p->trainable) continue;
        sdgp_sgd_update(p->data, p->momentum, p->grad, p->count, lr, momentum, p->decay ? weight_decay : 0.0f, nesterov);
    }
}
