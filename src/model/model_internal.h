/* The model's internal representation: ops over activation slots (see include/sdgp/model.h). */
#ifndef SDGP_MODEL_INTERNAL_H
#define SDGP_MODEL_INTERNAL_H

#include "sdgp/conv.h"
#include "sdgp/model.h"
#include "sdgp/sparse.h"

/* Parameter and layer names: torchvision's state_dict names fit ("layer4.0.downsample.1.running_mean"). */
#define MODEL_NAME_LEN 64

typedef struct op op;
typedef struct bwd_impl bwd_impl;

/* One buffer of the activation arena: its size and the interval of the step's timeline in which it
 * is alive (model_memory.c). */
typedef struct {
    size_t bytes, offset;
    int t0, t1;
} model_mem_item;

typedef enum {
    OP_CONV,            /* conv (no bias), then BatchNorm and ReLU when its bn / relu say so */
    OP_MAXPOOL2,
    OP_MAXPOOL,         /* k x k, stride, padding (ResNet's ImageNet stem: 3x3, 2, 1) */
    OP_ADD,             /* a + b, then ReLU when relu says so */
    OP_GLOBAL_MAXPOOL,
    OP_GLOBAL_AVGPOOL,
    OP_LINEAR,
    OP_SCALE
} op_kind;

/* An activation: B x H x W x C floats (W = C = 1 ... for flat tensors). */
typedef struct {
    int H, W, C;
    size_t count;      /* B*H*W*C */
    float *act;        /* forward output (slot 0: the caller's input) */
    int transient;     /* backward never reads act as stored (model_memory.c): it holds y during
                          forward only, from its producer to live_to */
    int live_to;       /* transient: the last op that reads act */
} slot;

/* How backward hands gradients to an op's inputs, decided once at build time. */
typedef enum {
    GRAD_NONE,       /* nobody needs this gradient (the network input) */
    GRAD_WRITE,      /* first writer: overwrite the buffer */
    GRAD_ACCUMULATE  /* someone wrote it already: add */
} grad_mode;

struct op {
    op_kind kind;
    int in, in2, out;               /* slot ids (in2: OP_ADD only) */
    grad_mode in_mode, in2_mode;
    int in_buf, in2_buf;            /* grad-pool buffer for the inputs' gradients (-1: none) */
    int acc_tmp;                    /* in_mode == GRAD_ACCUMULATE (not OP_ADD): the free grad-pool
                                       buffer the op writes into before it is added to in_buf */
    int recompute_from;             /* OP_CONV whose input is a transient conv output: that conv's op
                                       index (its input is recomputed for the weight gradient); -1
                                       otherwise */
    int out_buf;                    /* grad-pool buffer that holds this op's output gradient */
    int block_first;                /* OP_ADD closing a recomputed block (SDGP_RECOMPUTE_BLOCKS): the
                                       block's first op; -1 otherwise */
    int block_add;                  /* OP_CONV inside a recomputed block: the block's add; -1 otherwise */
    int in_inherits;                /* OP_ADD: input `in` takes over the output gradient buffer */

    int relu;                       /* OP_CONV, OP_ADD: a ReLU on the output */

    /* OP_CONV */
    int bn;                         /* BatchNorm after the conv */
    int conv_index;                 /* 0, 1, ... in order */
    sdgp_conv_geom geom;
    sdgp_conv *dnnl;
    int p_w, p_gamma, p_beta, p_rmean, p_rvar; /* parameter indices (BatchNorm's: -1 without bn) */
    float *z;                       /* conv output, pre-BatchNorm (B x Ho x Wo x Cout); without bn,
                                       the output slot itself */
    float *z_fwd;                   /* where forward writes z: z itself, or (block_add >= 0) a buffer
                                       alive during this op's forward only */
    float *y_re, *x_re;             /* block_add >= 0, alive during the block's recompute only: this
                                       op's output when a conv of the block reads it; its input when
                                       that is a transient conv output from before the block */
    float *mean, *rstd;             /* saved BatchNorm statistics (Cout) */
    double bn_total;                /* synchronised BatchNorm: rows of the whole batch (forward's sums) */
    int prune;                      /* prune dL/dO for the data gradient */
    const bwd_impl *bwd;            /* how the pruned data gradient is computed (model_bwd.c) */
    sdgp_sparse_wgrad *wgrad;       /* --prune-wgrad: the N:M weight-gradient kernel's plan when the
                                       layer runs it (model_wgrad.c); NULL: oneDNN */
    void *bwd_plan;                 /* its plan (NULL for dense) */
    sdgp_layer_info info;
    sdgp_layer_times times;
    char name[MODEL_NAME_LEN];      /* the conv layer's name: "conv3", "layer2.0.downsample.0" */

    /* OP_MAXPOOL2, OP_MAXPOOL / OP_GLOBAL_MAXPOOL */
    int pool_k, pool_stride, pool_pad; /* OP_MAXPOOL */
    uint8_t *pool_arg;
    int32_t *gmp_arg;

    /* OP_LINEAR */
    int p_lw, p_lb;                 /* p_lb = -1: no bias */
    /* OP_CONV, OP_LINEAR with N:M sparse weights (model_weights.c) */
    int sparse_w;                   /* the products use w_eff, the projection of the weights */
    int p_sbeta;                    /* S-STE: the "<layer>.sste_beta" parameter (-1: none) */
    float *w_eff;                   /* the projected weights, refreshed by each forward */
    /* block-masked or cout-form weights: the sparse forward (model_fwd.c): whether the layer has
     * one, the plans of the sparse implementations (made on demand, freed when not in use), and
     * which implementation runs */
    int fwd_ok;
    sdgp_sparse_fwd *spfwd[3];      /* MODEL_FWD_DIRECT, _WINO, _COUT */
    int fwd_impl;                   /* MODEL_FWD_DENSE (oneDNN on w_eff) or one of those */
    int fwd_packed;                 /* the running plan holds this step's W~ */
    /* OP_SCALE */
    float scale;
};

/* What initialisation needs to know of a parameter beyond sdgp_param. */
typedef struct {
    char name[MODEL_NAME_LEN];
    int bias_fan_in; /* > 0: a linear layer's bias, uniform in +-1/sqrt(fan_in) as PyTorch's */
} param_meta;

/* Ops, slots, parameters and convs are arrays grown while the builder adds to them (sized by the
 * model, no fixed limit); they do not move after sdgp_model_create. */
struct sdgp_model {
    sdgp_model_config cfg;
    int B;
    op *ops;
    int n_ops, cap_ops;
    slot *slots;
    int n_slots, cap_slots;
    int logits_slot;

    sdgp_param *params;
    param_meta *pmeta;
    int n_params, cap_params;
    float *param_arena;             /* data | grad | momentum, one block */
    size_t param_floats;            /* all floats in the data part (incl. running stats) */
    size_t trainable_floats;

    void *act_arena;                /* everything that depends on the batch */
    size_t act_bytes;
    float **grad_pool;              /* gradient buffers, one per birth (model_memory.c) */
    size_t *grad_pool_count;        /* of each, the floats of the largest slot it serves */
    int n_grad_pool;
    model_mem_item *mem_items;      /* the arena's plan: every buffer's size, interval and offset */
    int n_mem_items;
    size_t max_count;               /* floats of the largest slot */
    float *scratch2;                /* max_count floats: the pruned dense dL/dO (dense path, wgrad MVUE,
                                       grad-stats); NULL when nothing is pruned */
    void *conv_ws;                  /* the workspace all convs share (they run one at a time) */
    size_t conv_ws_bytes;
    sdgp_nm_tensor nm;              /* compressed pruned dL/dO, sized for the largest layer */

    int grad_stats, timing;
    sdgp_dz_hook dz_hook;
    void *dz_hook_ctx;
    sdgp_grad_hook grad_hook;
    void *grad_hook_ctx;
    const sdgp_dist *bn_dist;       /* synchronised BatchNorm over these processes (NULL: per process) */
    double *bn_sums;                /* its sums, then the whole batch's dgamma, dbeta (largest BN's C) */
    sdgp_status bn_st;              /* the first failure of a forward's allreduce, for the next backward */
    sdgp_error bn_err;
    int *conv_ops;                  /* op index of conv i */
    int n_convs, cap_convs;
    float *w_eff_arena;             /* every sparse-weight layer's w_eff */
};

/* Sizes rounded up to 64 (floats or bytes): every arena part starts on a cache line. */
static inline size_t model_align_up(size_t x) { return (x + 63) & ~(size_t)63; }

/* ---- building (model_build.c): the layers a model builder (model_zoo.c) strings together ----
 * Each takes and returns activation slot ids. The first error is kept in st (later calls do
 * nothing), so a builder runs straight through and sdgp_model_create reports it. */
typedef struct {
    sdgp_model *m;
    sdgp_error *err;
    sdgp_status st;
} model_builder;

typedef struct {
    int cout, k, stride, pad;
    int groups;                     /* grouped conv (0 or 1: none) */
    int bn, relu;
    /* the conv's name and its BatchNorm's, prefixes of their parameters' names ("layer1.0.conv1" ->
     * "layer1.0.conv1.weight"); NULL: "conv<i>" and "bn<i>" by conv index (ResNet-9's names) */
    const char *name, *bn_name;
} model_conv_spec;

/* A parameter named prefix + suffix (its index; -1 after an error). Its sdgp_param's name pointer
 * is set once building ends (the arrays may still move). */
int model_add_param(model_builder *b, const char *prefix, const char *suffix, int ndim, const int64_t *shape,
                    int trainable, int decay);
int model_input(model_builder *b);                 /* slot 0: the image */
int model_conv(model_builder *b, int in, const model_conv_spec *spec);
int model_maxpool2(model_builder *b, int in);
int model_maxpool(model_builder *b, int in, int k, int stride, int pad);
int model_add(model_builder *b, int a, int c, int relu); /* a: the shortcut (it inherits the gradient buffer) */
int model_global_maxpool(model_builder *b, int in);
int model_global_avgpool(model_builder *b, int in);
int model_linear(model_builder *b, int in, int out_features, int bias, const char *name);
int model_scale(model_builder *b, int in, float s);
/* Channels: width x base, a multiple of 32, at least 32 (every model's --width rule but RegNet's). */
int model_scaled_channels(float width, int base);
/* Channels of a model with grouped convs: width x base rounded to a multiple of the group width,
 * at least one group. */
int model_group_channels(float width, int base, int group_width);

/* model_zoo.c: the registry's builder of cfg->kind (it sets the logits slot); an error for an
 * unknown kind. */
void model_zoo_build(model_builder *b);

/* One implementation of a pruned conv's data gradient (model_bwd.c: the list, in order of
 * preference). */
struct bwd_impl {
    char code;         /* its character in the kernel-choice text of checkpoints */
    const char *name;  /* "dense", "sparse", "winograd": start-up lines, bench rows */
    int sparse;        /* skips the pruned work (--sparse-kernel on/off select by this) */
    int prunes;        /* prunes dL/dO (0: exact dL/dO; the entries of layers that do not prune) */
    int wsparse;       /* the sparse-weight data-gradient kernel (block-masked W~; sdgp_sparse_wdata_*) */
    sdgp_prune_domain domain; /* where it prunes (--sdgp-domain selects by this) */
    /* whether it can run conv op o at all (geometry, and the model's n:m) */
    int (*supports)(const sdgp_model *m, const op *o);
    /* creates its plan for layer o in *plan (NULL for entries without a plan) */
    sdgp_status (*create)(sdgp_model *m, const op *o, void **plan, sdgp_error *err);
    /* dx = dL/dD from the dense dL/dO dz pruned with pc; *prune_ms: a separate pruning pass's time
     * (0 when the pruning is fused into the kernel) */
    sdgp_status (*run)(sdgp_model *m, op *o, float *dx, const float *dz, const sdgp_prune_cfg *pc, double *prune_ms,
                       sdgp_error *err);
    /* after run: *used = the pixel-domain pruned dL/dO it used (for the dz hook), NULL when its
     * pruning is not in the pixel domain; *used comes in as dL/dO itself (kept by an entry that
     * does not prune) */
    sdgp_status (*pruned_dz)(sdgp_model *m, op *o, const float **used, sdgp_error *err);
    void (*destroy)(void *plan);
};
/* Whether layer o holds an entry: it prunes, or (not off) a sparse entry keeps its exact dL/dO
 * (block-masked weights); other layers run oneDNN's backward-data without one. */
int model_bwd_wanted(const sdgp_model *m, const op *o);
extern const bwd_impl *const model_bwd_impls[]; /* NULL-terminated */
/* Whether the configuration lets layer o use impl: supports(o), --sparse-kernel on (sparse ones)
 * or off (dense ones), --sdgp-domain pixel (pixel ones), winograd (a layer that a Winograd-domain
 * entry supports uses only those), auto (all). */
int model_bwd_allowed(const sdgp_model *m, const op *o, const bwd_impl *impl);
const bwd_impl *model_bwd_find(char code);
/* Makes impl (with its ready plan) the layer's implementation, destroying the previous plan. */
void model_bwd_adopt(op *o, const bwd_impl *impl, void *plan);
/* The same, creating impl's plan first (nothing changes when that fails; impl NULL: none). */
sdgp_status model_bwd_set(sdgp_model *m, op *o, const bwd_impl *impl, sdgp_error *err);
/* The first allowed implementation in list order. */
sdgp_status model_bwd_default(sdgp_model *m, op *o, sdgp_error *err);

/* model_conv_tune.c: conv o's oneDNN convolution under the configuration (algos NULL; MEASURED
 * starts DIRECT) or with these per-pass algorithms, its layer info refreshed; the text of
 * sdgp_model_conv_choice parsed into per-pass algorithms (one row per conv); the one workspace
 * of all convs and weight-gradient plans, (re)sized to the largest they need and shared. */
sdgp_status model_conv_create(sdgp_model *m, op *o, const sdgp_conv_algo *algos, sdgp_error *err);
sdgp_status model_conv_choice_parse(const sdgp_model *m, const char *text, sdgp_conv_algo (*algos)[3], sdgp_error *err);
sdgp_status model_conv_share_workspace(sdgp_model *m, sdgp_error *err);
/* p[0..n) = values in [-1, 1) from an LCG seeded with s: test data for the start-up timings (every tuner's:
 * the kernels' times do not depend on the values). */
void model_fill_random(float *p, size_t n, uint64_t s);

/* model_weights.c: N:M sparse weights (S-STE, SR-STE; sdgp_weights_cfg) */
/* Whether a conv (conv_index >= 0) or the classifier (-1) gets sparse weights. */
int model_weights_sparse_layer(const sdgp_model *m, int conv_index);
/* Marks op o (weights cout x cin x taps) sparse and adds S-STE's beta parameter; an error when m
 * does not divide the channels its groups run along (cin, or cout for --weight-groups cout; per
 * conv group). */
void model_weights_add(model_builder *b, op *o, int cin, int cout, const char *name);
/* After the parameters are initialised: w_eff buffers, and beta from the initial weights. */
sdgp_status model_weights_setup(sdgp_model *m, sdgp_error *err);
/* W~ of every sparse layer from the current weights (each forward). */
void model_weights_refresh(sdgp_model *m);
/* After o's weight gradient: SR-STE's term (nothing for S-STE: straight-through). */
void model_weights_backward(sdgp_model *m, const op *o);
/* The weights the products of op o use: w_eff, or the parameter itself. */
static inline const float *model_op_weights(const sdgp_model *m, const op *o) {
    return o->sparse_w ? o->w_eff : m->params[o->kind == OP_LINEAR ? o->p_lw : o->p_w].data;
}

/* model_fwd.c: the forward of convs with block-masked or cout-form sparse weights, dense or a
 * sparse kernel. Its implementations, in the order of op.spfwd after dense; their letters are the
 * choice text. */
enum { MODEL_FWD_DENSE, MODEL_FWD_DIRECT, MODEL_FWD_WINO, MODEL_FWD_COUT, MODEL_FWD_NIMPL };
int model_fwd_supported(const sdgp_model *m, const op *o);
/* z = conv(x) with o's weights as its forward runs them. */
void model_fwd_product(sdgp_model *m, op *o, float *z, const float *x);
/* After W~ changed: packs it into the sparse plan of a layer that runs it. */
void model_fwd_pack(op *o);
/* Plans for every supported layer and the per-layer choice under --sparse-kernel (auto: timed). */
sdgp_status model_fwd_setup(sdgp_model *m, sdgp_error *err);
/* The choice as text, a character per conv: 's' sparse kernel, 'd' dense, '-' not supported. */
void model_fwd_choice(const sdgp_model *m, char *buf, size_t size);
int model_fwd_any(const sdgp_model *m); /* some layer has a sparse forward plan */
/* Applies such a text of len characters. */
sdgp_status model_fwd_set_choice(sdgp_model *m, const char *choice, size_t len, sdgp_error *err);

/* model_memory.c: gradient buffers, transient activations, the activation arena (after the convs are
 * set up and the first conv's pruning is off). */
sdgp_status model_memory_plan(sdgp_model *m, sdgp_error *err);

/* model_run.c */
/* The pruning of conv op o at a step: base's function and n:m along axis, its randomness keyed by
 * (seed, step, layer) (model_run.c). */
sdgp_prune_cfg model_prune_cfg(const sdgp_model *m, const op *o, sdgp_prune_cfg base, sdgp_axis axis, uint64_t seed,
                               uint64_t step);
/* model_wgrad.c: the weight gradient under --prune-wgrad (dw from x and the dense dL/dO dz), which
 * layers can run the N:M weight-gradient kernel, its tuning and its part of the kernel-choice text
 * (a letter per conv: 'm' the kernel, '-' oneDNN; no text: all '-'). */
sdgp_status model_conv_backward_weights(sdgp_model *m, op *o, float *dw, const float *x, const float *dz, uint64_t step,
                                        sdgp_error *err);
int model_wgrad_pruned(const sdgp_model *m, const op *o);
int model_wgrad_supported(const sdgp_model *m, const op *o);
int model_wgrad_any(const sdgp_model *m);
sdgp_status model_wgrad_tune(sdgp_model *m, sdgp_error *err);
void model_wgrad_choice(const sdgp_model *m, char *buf, size_t size);
sdgp_status model_wgrad_set_choice(sdgp_model *m, const char *choice, size_t len, sdgp_error *err);
sdgp_status model_conv_backward_data(sdgp_model *m, op *o, float *dx, const float *dz, uint64_t step,
                                     sdgp_error *err);

#endif
