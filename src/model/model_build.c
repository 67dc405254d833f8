/* Building a model: the layers builders string together (the builders themselves: model_zoo.c), parameters
 * and their arena, initialisation (the activation arena: model_memory.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/philox.h"
#include "model/model_internal.h"


sdgp_model_config sdgp_model_config_default(void) {
    sdgp_model_config c;
    memset(&c, 0, sizeof c);
    c.kind = SDGP_MODEL_RESNET9;
    c.width = 1.0f;
    c.batch = 64;
    c.height = 32;
    c.width_px = 32;
    c.channels = 3;
    c.num_classes = 10;
    c.bn_momentum = 0.1f;
    c.bn_eps = 1e-5f;
    c.out_scale = 0.2f;
    c.seed = 0;
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_NONE, 2, 4);
    c.prune_wgrad = sdgp_prune_cfg_make(SDGP_PRUNE_NONE, 2, 4);
    c.prune_wgrad.axis = SDGP_AXIS_ROW;
    c.sparse = SDGP_SPARSE_AUTO;
    c.domain = SDGP_DOMAIN_PIXEL;
    c.conv_algo = SDGP_CONV_AUTO;
    c.conv_workspace_mb = SDGP_CONV_WORKSPACE_MB_DEFAULT;
    c.weights = (sdgp_weights_cfg){SDGP_WEIGHTS_DENSE, 2, 4, SDGP_WGROUP_TAP, 2e-4f, 0, 0};
    return c;
}

/* ---- building the op list ---- */

/* Room for element n of an array of capacity *cap (doubled when full): the array, moved or not,
 * or NULL (b->st set) when memory runs out. */
static void *grow(model_builder *b, void *arr, int n, int *cap, size_t size, const char *what) {
    if (n < *cap) return arr;
    int nc = *cap ? 2 * *cap : 16;
    char *p = realloc(arr, (size_t)nc * size);
    if (!p) {
        b->st = sdgp_fail(b->err, SDGP_ERR_NOMEM, "model: out of memory for %d %s", nc, what);
        return NULL;
    }
    memset(p + (size_t)*cap * size, 0, (size_t)(nc - *cap) * size);
    *cap = nc;
    return p;
}

static int add_slot(model_builder *b, int H, int W, int C) {
    sdgp_model *m = b->m;
    if (b->st != SDGP_OK) return 0;
    slot *arr = grow(b, m->slots, m->n_slots, &m->cap_slots, sizeof *arr, "activation slots");
    if (!arr) return 0;
    m->slots = arr;
    slot *s = &m->slots[m->n_slots];
    s->H = H;
    s->W = W;
    s->C = C;
    s->count = (size_t)m->B * (size_t)H * (size_t)W * (size_t)C;
    return m->n_slots++;
}

/* The new op (valid until the next add_op), or NULL after an error. */
static op *add_op(model_builder *b, op_kind kind, int in) {
    sdgp_model *m = b->m;
    if (b->st != SDGP_OK) return NULL;
    op *arr = grow(b, m->ops, m->n_ops, &m->cap_ops, sizeof *arr, "ops");
    if (!arr) return NULL;
    m->ops = arr;
    op *o = &m->ops[m->n_ops++];
    memset(o, 0, sizeof *o);
    o->kind = kind;
    o->in = in;
    o->in2 = -1;
    o->p_lb = o->p_sbeta = -1;
    o->p_gamma = o->p_beta = o->p_rmean = o->p_rvar = -1;
    return o;
}

int model_add_param(model_builder *b, const char *prefix, const char *suffix, int ndim, const int64_t *shape,
                     int trainable, int decay) {
    sdgp_model *m = b->m;
    if (b->st != SDGP_OK) return -1;
    int old_cap = m->cap_params;
    sdgp_param *pa = grow(b, m->params, m->n_params, &m->cap_params, sizeof *pa, "parameters");
    if (!pa) return -1;
    m->params = pa;
    if (m->cap_params != old_cap) { /* pmeta follows params' capacity */
        param_meta *pm = realloc(m->pmeta, (size_t)m->cap_params * sizeof *pm);
        if (!pm) {
            b->st = sdgp_fail(b->err, SDGP_ERR_NOMEM, "model: out of memory for %d parameter names", m->cap_params);
            return -1;
        }
        m->pmeta = pm;
    }
    int i = m->n_params++;
    sdgp_param *p = &m->params[i];
    param_meta *meta = &m->pmeta[i];
    memset(p, 0, sizeof *p);
    memset(meta, 0, sizeof *meta);
    int len = snprintf(meta->name, sizeof meta->name, "%s%s", prefix, suffix);
    if (len < 0 || len >= (int)sizeof meta->name) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INVALID, "model: parameter name %s%s longer than %d characters", prefix, suffix,
                          MODEL_NAME_LEN - 1);
        return -1;
    }
    p->ndim = ndim;
    p->count = 1;
    for (int d = 0; d < ndim; d++) {
        p->shape[d] = shape[d];
        p->count *= (size_t)shape[d];
    }
    p->trainable = trainable;
    p->decay = decay;
    return i;
}

int model_input(model_builder *b) {
    const sdgp_model_config *c = &b->m->cfg;
    return add_slot(b, c->height, c->width_px, c->channels);
}

/* conv (no bias), then BatchNorm and ReLU as spec says; returns the output slot. */
int model_conv(model_builder *b, int in, const model_conv_spec *spec) {
    if (b->st != SDGP_OK) return in;
    sdgp_model *m = b->m;
    const int H = m->slots[in].H, W = m->slots[in].W, C = m->slots[in].C; /* add_slot may move slots */
    int *convs = grow(b, m->conv_ops, m->n_convs, &m->cap_convs, sizeof *convs, "convs");
    if (!convs) return in;
    m->conv_ops = convs;
    op *o = add_op(b, OP_CONV, in);
    if (!o) return in;
    o->conv_index = m->n_convs;
    m->conv_ops[m->n_convs++] = m->n_ops - 1;
    o->bn = spec->bn;
    o->relu = spec->relu;
    int k = spec->k, cout = spec->cout;
    b->st = sdgp_conv_geom_init(&o->geom, m->B, H, W, C, cout, k, k, spec->stride, spec->pad, b->err);
    if (b->st == SDGP_OK) b->st = sdgp_conv_geom_set_groups(&o->geom, spec->groups > 1 ? spec->groups : 1, b->err);
    char name[MODEL_NAME_LEN], bn[MODEL_NAME_LEN];
    if (spec->name) snprintf(name, sizeof name, "%s", spec->name);
    else snprintf(name, sizeof name, "conv%d", o->conv_index);
    if (spec->bn_name) snprintf(bn, sizeof bn, "%s", spec->bn_name);
    else snprintf(bn, sizeof bn, "bn%d", o->conv_index);
    if (b->st != SDGP_OK) {
        char msg[SDGP_ERROR_MSG_LEN];
        snprintf(msg, sizeof msg, "%s", b->err ? b->err->msg : "");
        b->st = sdgp_fail(b->err, b->st, "model: %s (conv%d) on a %dx%dx%d input: %s", name, o->conv_index, H, W, C, msg);
        return in;
    }
    snprintf(o->name, sizeof o->name, "%s", name);
    int64_t wshape[4] = {cout, C / o->geom.groups, k, k}, cshape[1] = {cout};
    int conv_index = o->conv_index;
    int p_w = model_add_param(b, name, ".weight", 4, wshape, 1, 1);
    int p_g = -1, p_b = -1, p_rm = -1, p_rv = -1;
    if (spec->bn) {
        p_g = model_add_param(b, bn, ".weight", 1, cshape, 1, 0);
        p_b = model_add_param(b, bn, ".bias", 1, cshape, 1, 0);
        p_rm = model_add_param(b, bn, ".running_mean", 1, cshape, 0, 0);
        p_rv = model_add_param(b, bn, ".running_var", 1, cshape, 0, 0);
    }
    int out = add_slot(b, o->geom.Ho, o->geom.Wo, cout);
    if (b->st != SDGP_OK) return in;
    o = &m->ops[m->conv_ops[conv_index]];
    o->p_w = p_w;
    o->p_gamma = p_g;
    o->p_beta = p_b;
    o->p_rmean = p_rm;
    o->p_rvar = p_rv;
    o->out = out;
    if (model_weights_sparse_layer(m, conv_index)) model_weights_add(b, o, C, cout, name);
    return out;
}

int model_maxpool2(model_builder *b, int in) {
    if (b->st != SDGP_OK) return in;
    const int H = b->m->slots[in].H, W = b->m->slots[in].W, C = b->m->slots[in].C;
    if (H < 2 || W < 2) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INVALID, "model: 2x2 max pool on a %dx%d activation (input image too small)", H, W);
        return in;
    }
    op *o = add_op(b, OP_MAXPOOL2, in);
    if (!o) return in;
    int out = add_slot(b, H / 2, W / 2, C);
    b->m->ops[b->m->n_ops - 1].out = out;
    return out;
}

int model_maxpool(model_builder *b, int in, int k, int stride, int pad) {
    if (b->st != SDGP_OK) return in;
    const int H = b->m->slots[in].H, W = b->m->slots[in].W, C = b->m->slots[in].C;
    if (k < 1 || k > 15 || stride < 1 || pad < 0 || 2 * pad > k || H + 2 * pad < k || W + 2 * pad < k) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INVALID, "model: %dx%d max pool (stride %d, pad %d) on a %dx%d activation", k, k,
                          stride, pad, H, W);
        return in;
    }
    if (!add_op(b, OP_MAXPOOL, in)) return in;
    int out = add_slot(b, (H + 2 * pad - k) / stride + 1, (W + 2 * pad - k) / stride + 1, C);
    op *o = &b->m->ops[b->m->n_ops - 1];
    o->out = out;
    o->pool_k = k;
    o->pool_stride = stride;
    o->pool_pad = pad;
    return out;
}

int model_add(model_builder *b, int a, int c, int relu) {
    if (b->st != SDGP_OK) return a;
    const slot sa = b->m->slots[a], sc = b->m->slots[c];
    if (sa.H != sc.H || sa.W != sc.W || sa.C != sc.C) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INTERNAL, "model: residual add of %dx%dx%d and %dx%dx%d", sa.H, sa.W, sa.C, sc.H,
                          sc.W, sc.C);
        return a;
    }
    op *o = add_op(b, OP_ADD, a);
    if (!o) return a;
    o->in2 = c;
    o->relu = relu;
    int out = add_slot(b, sa.H, sa.W, sa.C);
    b->m->ops[b->m->n_ops - 1].out = out;
    return out;
}

/* An op whose output is B x 1 x 1 x C. */
static int flat_op(model_builder *b, op_kind kind, int in, int C) {
    if (!add_op(b, kind, in)) return in;
    int out = add_slot(b, 1, 1, C);
    b->m->ops[b->m->n_ops - 1].out = out;
    return out;
}

int model_global_maxpool(model_builder *b, int in) {
    return b->st != SDGP_OK ? in : flat_op(b, OP_GLOBAL_MAXPOOL, in, b->m->slots[in].C);
}

int model_global_avgpool(model_builder *b, int in) {
    return b->st != SDGP_OK ? in : flat_op(b, OP_GLOBAL_AVGPOOL, in, b->m->slots[in].C);
}

int model_linear(model_builder *b, int in, int out_features, int bias, const char *name) {
    if (b->st != SDGP_OK) return in;
    int64_t wshape[2] = {out_features, b->m->slots[in].C}, bshape[1] = {out_features};
    int p_w = model_add_param(b, name, ".weight", 2, wshape, 1, 1);
    int p_b = bias ? model_add_param(b, name, ".bias", 1, bshape, 1, 0) : -1;
    if (p_b >= 0) b->m->pmeta[p_b].bias_fan_in = (int)wshape[1];
    int out = flat_op(b, OP_LINEAR, in, out_features);
    if (b->st != SDGP_OK) return in;
    op *o = &b->m->ops[b->m->n_ops - 1];
    o->p_lw = p_w;
    o->p_lb = p_b;
    if (model_weights_sparse_layer(b->m, -1)) model_weights_add(b, o, (int)wshape[1], out_features, name);
    return out;
}

int model_scale(model_builder *b, int in, float s) {
    if (b->st != SDGP_OK) return in;
    int out = flat_op(b, OP_SCALE, in, b->m->slots[in].C);
    if (b->st == SDGP_OK) b->m->ops[b->m->n_ops - 1].scale = s;
    return out;
}

int model_group_channels(float width, int base, int group_width) {
    int c = (int)lrintf(width * (float)base / (float)group_width) * group_width;
    return c < group_width ? group_width : c;
}

int model_scaled_channels(float width, int base) { return model_group_channels(width, base, 32); }

/* ---- initialisation: PyTorch's defaults, from our own generator ---- */
static void init_params(sdgp_model *m) {
    sdgp_philox_key key = sdgp_philox_make_key(m->cfg.seed, 0, 0x1a17u);
    for (int i = 0; i < m->n_params; i++) {
        sdgp_param *p = &m->params[i];
        const char *dot = strrchr(p->name, '.');
        if (p->ndim >= 2) {
            /* kaiming_uniform(a = sqrt(5)): bound = sqrt(6 / ((1 + 5) fan_in)) = 1 / sqrt(fan_in) */
            size_t fan_in = p->count / (size_t)p->shape[0];
            float bound = 1.0f / sqrtf((float)fan_in);
            for (size_t j = 0; j < p->count; j += 4) {
                sdgp_philox_ctr r = sdgp_philox_draw(key, ((uint64_t)i << 40) | (j / 4), 0);
                for (size_t t = 0; t < 4 && j + t < p->count; t++)
                    p->data[j + t] = bound * (2.0f * sdgp_u01f(r.v[t]) - 1.0f);
            }
        } else if (m->pmeta[i].bias_fan_in > 0) {
            float bound = 1.0f / sqrtf((float)m->pmeta[i].bias_fan_in);
            for (size_t j = 0; j < p->count; j++) {
                sdgp_philox_ctr r = sdgp_philox_draw(key, ((uint64_t)i << 40) | j, 0);
                p->data[j] = bound * (2.0f * sdgp_u01f(r.v[0]) - 1.0f);
            }
        } else {
            float v = (strcmp(dot, ".weight") == 0 || strcmp(dot, ".running_var") == 0) ? 1.0f : 0.0f;
            for (size_t j = 0; j < p->count; j++) p->data[j] = v;
        }
    }
}

/* Memory the kernel says can be had without swapping (bytes), or 0 when unknown. Linux overcommits:
 * a too-large malloc succeeds and the process is killed later, so sizes are checked up front. */
static uint64_t available_memory(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* Before anything is created: parameters (3 copies) and, per activation slot, an upper bound of
 * 6 buffers (the slot, the conv output, gradient buffers, scratch), in double so that absurd
 * sizes cannot overflow. */
static sdgp_status check_fits(const sdgp_model *m, sdgp_error *err) {
    double bytes = 0;
    for (int i = 0; i < m->n_params; i++) bytes += 3.0 * (double)m->params[i].count * sizeof(float);
    for (int s = 0; s < m->n_slots; s++) bytes += 6.0 * (double)m->slots[s].count * sizeof(float);
    uint64_t avail = available_memory();
    if (avail && bytes > 0.9 * (double)avail)
        return sdgp_fail(err, SDGP_ERR_NOMEM,
                         "model: batch %d needs %.2f GB for parameters and activations, but only %.2f GB of memory "
                         "is available (lower --batch-size or --width)",
                         m->B, bytes / 1e9, (double)avail / 1e9);
    return SDGP_OK;
}

static sdgp_status alloc_params(sdgp_model *m, sdgp_error *err) {
    /* parameters: data for all, grad + momentum for the trainable ones */
    size_t data = 0, train = 0;
    for (int i = 0; i < m->n_params; i++) {
        data += model_align_up(m->params[i].count);
        if (m->params[i].trainable) train += model_align_up(m->params[i].count);
    }
    m->param_floats = data;
    float *pa = NULL;
    if (posix_memalign((void **)&pa, 64, (data + 2 * train) * sizeof(float)))
        return sdgp_fail(err, SDGP_ERR_NOMEM, "model: cannot allocate %zu parameter floats", data + 2 * train);
    memset(pa, 0, (data + 2 * train) * sizeof(float));
    m->param_arena = pa;
    float *d = pa, *g = pa + data, *v = pa + data + train;
    m->trainable_floats = 0;
    for (int i = 0; i < m->n_params; i++) {
        sdgp_param *p = &m->params[i];
        p->data = d;
        d += model_align_up(p->count);
        if (p->trainable) {
            p->grad = g;
            p->momentum = v;
            g += model_align_up(p->count);
            v += model_align_up(p->count);
            m->trainable_floats += p->count;
        }
    }
    return SDGP_OK;
}

static sdgp_status setup_convs(sdgp_model *m, sdgp_error *err) {
    const sdgp_prune_cfg *pc = &m->cfg.prune;
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) st = model_conv_create(m, &m->ops[m->conv_ops[i]], NULL, err);
    if (st != SDGP_OK) return st;
    int pruning = pc->fn != SDGP_PRUNE_NONE && pc->n < pc->m; /* n = m keeps everything: the dense path, bitwise */
    for (int i = 0; i < m->n_convs; i++) {
        op *o = &m->ops[m->conv_ops[i]];
        o->prune = pruning && (i > 0 || m->cfg.prune_first_layer);
        if (o->prune && o->geom.Cout % pc->m != 0)
            return sdgp_fail(err, SDGP_ERR_INVALID, "model: %s has %d output channels, not a multiple of m=%d (--nm %d:%d)",
                             o->name, o->geom.Cout, pc->m, pc->n, pc->m);
        if (model_wgrad_pruned(m, o)) {
            size_t rows = (size_t)o->geom.B * (size_t)o->geom.Ho * (size_t)o->geom.Wo;
            if (rows % (size_t)m->cfg.prune_wgrad.m != 0)
                return sdgp_fail(err, SDGP_ERR_INVALID, "model: %s has %zu positions, not a multiple of m=%d (--nm-wgrad)",
                                 o->name, rows, m->cfg.prune_wgrad.m);
            const int q = m->cfg.prune_wgrad.mask_block;
            if (q > 1 && o->geom.Cout % q != 0)
                return sdgp_fail(err, SDGP_ERR_INVALID, "model: %s has %d output channels, not a multiple of --wgrad-block %d",
                                 o->name, o->geom.Cout, q);
        }
        o->info.layer = o->name;
        o->info.geom = o->geom;
        o->info.pruned = o->prune;
        o->info.pruned_wgrad = model_wgrad_pruned(m, o);
        o->info.bwd_kernel = o->info.fwd_kernel = o->info.bwd_weights_kernel = "dense";
        if (model_bwd_wanted(m, o) && (st = model_impl_default(m, o, MODEL_BWD_DATA, err)) != SDGP_OK) return st;
        if (model_wgrad_pruned(m, o) && (st = model_impl_default(m, o, MODEL_BWD_WEIGHTS, err)) != SDGP_OK) return st;
    }
    return model_conv_share_workspace(m, err);
}

/* cfg.choice: applied where it differs from what create set up untimed. */
static sdgp_status apply_choice(sdgp_model *m, const char *choice, sdgp_error *err) {
    char mine[SDGP_CHOICE_LEN];
    sdgp_model_choice(m, mine, sizeof mine);
    if (!strcmp(mine, choice)) return SDGP_OK;
    sdgp_error e;
    if (sdgp_model_set_choice(m, choice, &e) != SDGP_OK) return sdgp_fail(err, SDGP_ERR_INVALID, "model: %s", e.msg);
    return SDGP_OK;
}

sdgp_status sdgp_model_create(sdgp_model **out, const sdgp_model_config *cfg, sdgp_error *err) {
    if (!out || !cfg) return sdgp_fail(err, SDGP_ERR_INVALID, "model: NULL argument");
    *out = NULL;
    if (cfg->batch < 1 || cfg->batch > 65536) return sdgp_fail(err, SDGP_ERR_INVALID, "model: batch %d out of range [1, 65536]", cfg->batch);
    if ((unsigned)cfg->conv_algo > SDGP_CONV_MEASURED)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: unknown conv algorithm %d", (int)cfg->conv_algo);
    if (memchr(cfg->choice, 0, sizeof cfg->choice) == NULL)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: choice is not a terminated text");
    if (cfg->conv_workspace_mb < 0 || cfg->conv_workspace_mb > (1 << 20))
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: conv workspace %d MB out of range [0, %d]", cfg->conv_workspace_mb,
                         1 << 20);
    if (cfg->height < 1 || cfg->width_px < 1 || cfg->channels < 1 || cfg->height > 4096 || cfg->width_px > 4096 || cfg->channels > 64)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: input %dx%dx%d out of range", cfg->height, cfg->width_px, cfg->channels);
    if (cfg->num_classes < 2 || cfg->num_classes > 100000)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: %d classes out of range [2, 100000]", cfg->num_classes);
    if (!(cfg->width > 0.0f && cfg->width <= 16.0f)) return sdgp_fail(err, SDGP_ERR_INVALID, "model: width %g out of range (0, 16]", cfg->width);
    if (cfg->prune.mask_block < 0 || cfg->prune.mask_block > SDGP_MASK_BLOCK_MAX)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: mask block %d is out of range [1, %d]", cfg->prune.mask_block, SDGP_MASK_BLOCK_MAX);
    if (cfg->prune.fn != SDGP_PRUNE_NONE) {
        sdgp_status st = sdgp_prune_check(&cfg->prune, 1, 1, cfg->prune.m, err);
        if (st != SDGP_OK) return st;
    }
    const sdgp_weights_cfg *wc = &cfg->weights;
    if ((unsigned)wc->kind > SDGP_WEIGHTS_SRSTE || (unsigned)wc->group > SDGP_WGROUP_COUT)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: unknown sparse-weights kind %d or group %d", (int)wc->kind, (int)wc->group);
    if (wc->kind != SDGP_WEIGHTS_DENSE && (wc->m < 1 || wc->m > SDGP_NM_MAX_M || wc->n < 1 || wc->n > wc->m))
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: sparse weights %d:%d is not an N:M pattern (1 <= n <= m <= %d)", wc->n,
                         wc->m, SDGP_NM_MAX_M);
    if (!(wc->lambda >= 0.0f && wc->lambda <= 1.0f))
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: SR-STE lambda %g out of range [0, 1]", (double)wc->lambda);
    if ((unsigned)cfg->sparse > SDGP_SPARSE_FASTEST)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: unknown sparse-kernel mode %d", (int)cfg->sparse);
    if ((unsigned)cfg->domain > SDGP_DOMAIN_AUTO) return sdgp_fail(err, SDGP_ERR_INVALID, "model: unknown sdgp domain %d", (int)cfg->domain);
    if ((unsigned)cfg->recompute > SDGP_RECOMPUTE_BLOCKS)
        return sdgp_fail(err, SDGP_ERR_INVALID, "model: unknown recompute mode %d", (int)cfg->recompute);
    if (cfg->domain == SDGP_DOMAIN_WINOGRAD && cfg->sparse == SDGP_SPARSE_OFF && cfg->prune.fn != SDGP_PRUNE_NONE)
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "model: --sdgp-domain winograd runs on the sparse kernel; it cannot be combined with --sparse-kernel off");

    sdgp_model *m = calloc(1, sizeof *m);
    if (!m) return sdgp_fail(err, SDGP_ERR_NOMEM, "model: out of memory");
    m->cfg = *cfg;
    m->B = cfg->batch;
    model_builder b = {m, err, SDGP_OK};
    model_zoo_build(&b);
    sdgp_status st = b.st;
    for (int i = 0; i < m->n_params; i++) m->params[i].name = m->pmeta[i].name; /* the arrays stay put now */
    if (st == SDGP_OK) st = check_fits(m, err);
    if (st == SDGP_OK) st = setup_convs(m, err);
    for (int i = 0; i < m->n_convs && st == SDGP_OK; i++) { /* a conv on the image computes no data gradient to prune */
        op *o = &m->ops[m->conv_ops[i]];
        if (o->in != 0) continue;
        o->prune = o->info.pruned = 0;
        st = model_impl_set(m, o, MODEL_BWD_DATA, NULL, err);
    }
    if (st == SDGP_OK) st = model_memory_plan(m, err);
    if (st == SDGP_OK) st = alloc_params(m, err);
    if (st == SDGP_OK) {
        init_params(m);
        st = model_weights_setup(m, err);
    }
    if (st == SDGP_OK) {
        m->nm.n = cfg->prune.n;
        m->nm.m = cfg->prune.m;
        m->nm.axis = SDGP_AXIS_CHANNEL;
        /* implementations as given (a checkpoint's) are not measured, nor oneDNN's algorithms as given */
        const int given = cfg->choice[0] != '\0';
        const int measure = cfg->conv_algo == SDGP_CONV_MEASURED && !(given && strchr(cfg->choice, ':'));
        const int entries[MODEL_NPASS] = {!given, !given, !given};
        st = model_fwd_setup(m, err);
        if (st == SDGP_OK && given) st = apply_choice(m, cfg->choice, err);
        if (st == SDGP_OK && (measure || !given)) st = model_tune(m, entries, measure, err);
    }
    if (st != SDGP_OK) {
        sdgp_model_destroy(m);
        return st;
    }
    *out = m;
    return SDGP_OK;
}

void sdgp_model_destroy(sdgp_model *m) {
    if (!m) return;
    for (int k = 0; k < m->n_ops; k++) {
        sdgp_conv_destroy(m->ops[k].dnnl);
        for (int p = 0; p < MODEL_NPASS; p++)
            if (m->ops[k].impl[p] && m->ops[k].impl[p]->destroy) m->ops[k].impl[p]->destroy(m->ops[k].plan[p]);
    }
    free(m->conv_ws); /* after the convs that used it */
    free(m->param_arena);
    free(m->w_eff_arena);
    free(m->act_arena);
    free(m->grad_pool);
    free(m->grad_pool_count);
    free(m->mem_items);
    free(m->ops);
    free(m->slots);
    free(m->params);
    free(m->pmeta);
    free(m->conv_ops);
    free(m->bn_sums);
    free(m);
}

const sdgp_model_config *sdgp_model_get_config(const sdgp_model *m) { return &m->cfg; }
int sdgp_model_param_count(const sdgp_model *m) { return m->n_params; }
const sdgp_param *sdgp_model_param(const sdgp_model *m, int i) {
    return i >= 0 && i < m->n_params ? &m->params[i] : NULL;
}
size_t sdgp_model_param_floats(const sdgp_model *m) { return m->trainable_floats; }
size_t sdgp_model_activation_bytes(const sdgp_model *m) { return m->act_bytes; }
int sdgp_model_conv_count(const sdgp_model *m) { return m->n_convs; }
const sdgp_layer_info *sdgp_model_conv_info(const sdgp_model *m, int i) {
    return i >= 0 && i < m->n_convs ? &m->ops[m->conv_ops[i]].info : NULL;
}
const sdgp_layer_times *sdgp_model_conv_times(const sdgp_model *m, int i) {
    return i >= 0 && i < m->n_convs ? &m->ops[m->conv_ops[i]].times : NULL;
}
void sdgp_model_enable_grad_stats(sdgp_model *m, int on) { m->grad_stats = on; }
void sdgp_model_enable_timing(sdgp_model *m, int on) { m->timing = on; }
