/* The model's internal representation: ops over activation slots (see include/sdgp/model.h). */
#ifndef SDGP_MODEL_INTERNAL_H
#define SDGP_MODEL_INTERNAL_H

#include "sdgp/conv.h"
#include "sdgp/model.h"
#include "sdgp/sparse.h"

/* Parameter and layer names: torchvision's state_dict names fit ("layer4.0.downsample.1.running_mean"). */
#define MODEL_NAME_LEN 64

typedef struct op op;
typedef struct model_impl model_impl;

/* The three products of a conv layer, each with its own implementation list. */
typedef enum { MODEL_FWD, MODEL_BWD_DATA, MODEL_BWD_WEIGHTS, MODEL_NPASS } model_pass;

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
    /* per pass (model_pass), the implementation that runs it and its plan (model_impl.c); NULL:
     * oneDNN's convolution on the layer's weights and exact tensors */
    const model_impl *impl[MODEL_NPASS];
    void *plan[MODEL_NPASS];
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
    int fwd_ok;                     /* block-masked or cout-form weights: a sparse forward applies (model_fwd.c) */
    int fwd_packed;                 /* the forward's plan holds this step's W~ */
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

/* The tensors of one run of a pass. */
typedef struct {
    float *out;               /* z (forward), dL/dD (data gradient) or dL/dW (weight gradient) */
    const float *x;           /* the layer's input (forward, weight gradient) */
    const float *dz;          /* the dense dL/dO (gradients) */
    const sdgp_prune_cfg *pc; /* the step's pruning of dz (gradients; the configuration's when the layer does not prune) */
    double prune_ms;          /* out: a separate pruning pass's time (0 when none or fused into the kernel) */
} model_args;

/* One implementation of one pass of a conv layer, an entry of that pass's ordered list
 * (model_fwd.c, model_bwd.c, model_wgrad.c; oneDNN's implementation lists are the model). The
 * model runs the entry a layer holds; the tuner (model_impl.c) times the allowed entries and keeps
 * the fastest; adding a kernel is one entry. */
struct model_impl {
    model_pass pass;
    char code;          /* its letter in the choice text of checkpoints (sdgp_model_choice) */
    const char *name;   /* "sparse", "winograd", ...: sdgp_layer_info, start-up lines, bench rows, sdgp kernels */
    int sparse;         /* skips pruned work or W~'s zeros (--sparse-kernel on / off select by this) */
    int prunes;         /* gradients: prunes dL/dO (0: the exact dL/dO) */
    int wsparse;        /* data gradient: the sparse-weight kernel (block-masked W~) */
    int onednn;         /* runs oneDNN's product of its pass on the layer's conv (o->dnnl): under
                           --conv-algo measured the tuner times it with each algorithm the pass has */
    sdgp_prune_domain domain; /* data gradient: where it prunes (--sdgp-domain selects by this) */
    /* NULL when it can run conv op o under the model's configuration, else why not */
    const char *(*unsupported)(const sdgp_model *m, const op *o);
    /* creates its plan for layer o in *plan (NULL for entries without one) */
    sdgp_status (*create)(sdgp_model *m, const op *o, void **plan, sdgp_error *err);
    /* forward: loads this step's W~ into the plan (after model_weights_refresh) */
    sdgp_status (*pack)(sdgp_model *m, op *o, sdgp_error *err);
    /* the product with the layer's plan (o->plan[pass]) */
    sdgp_status (*run)(sdgp_model *m, op *o, model_args *a, sdgp_error *err);
    /* data gradient, after run: *used = the pixel-domain pruned dL/dO it used (for the dz hook),
     * NULL when its pruning is not in the pixel domain; *used comes in as dL/dO itself */
    sdgp_status (*pruned_dz)(sdgp_model *m, op *o, const float **used, sdgp_error *err);
    /* the plan's scratch in the model's one shared workspace (model_conv_share_workspace) */
    size_t (*workspace_bytes)(const void *plan);
    sdgp_status (*set_workspace)(void *plan, void *ws, size_t bytes, sdgp_error *err);
    void (*destroy)(void *plan);
    /* sdgp kernels: out->isa and out->blocking for a plan on the probe layer g (NULL: oneDNN's) */
    sdgp_status (*describe)(const sdgp_conv_geom *g, int threads, sdgp_impl_info *out, sdgp_error *err);
};

/* model_impl.c: the lists, and what every pass does with them alike */
extern const model_impl *const *const model_impls[MODEL_NPASS]; /* per pass, NULL-terminated, in order of preference */
const char *model_pass_name(model_pass pass);                      /* "fwd", "bwd_data", "bwd_weights" */
const model_impl *model_impl_find(model_pass pass, char code);
/* Whether the model could hand layer o this entry at all, whatever the configuration's rules: it supports
 * the layer, and (data gradient) the layer has one and prunes if the entry does (the choice text's
 * rule); what sdgp_model_time_impls and tests/test_impls.c run. */
int model_impl_reachable(const sdgp_model *m, const op *o, const model_impl *impl);
/* Whether the configuration lets layer o use impl (the pass's rule: model_fwd_allowed & co.). */
int model_impl_allowed(const sdgp_model *m, const op *o, const model_impl *impl);
/* Makes impl (with its ready plan) the layer's implementation of impl's pass, destroying the
 * previous plan, and refreshes the layer's info. */
void model_impl_adopt(sdgp_model *m, op *o, model_pass pass, const model_impl *impl, void *plan);
/* The same, creating impl's plan first (nothing changes when that fails; impl NULL: none). */
sdgp_status model_impl_set(sdgp_model *m, op *o, model_pass pass, const model_impl *impl, sdgp_error *err);
/* The first allowed implementation of the pass in list order. */
sdgp_status model_impl_default(sdgp_model *m, op *o, model_pass pass, sdgp_error *err);
/* One pass of layer o with its implementation on a: its pack (forward) and run; without one (NULL),
 * oneDNN's product on the layer's weights and the exact tensors. */
sdgp_status model_impl_run(sdgp_model *m, op *o, model_pass pass, model_args *a, sdgp_error *err);
/* The tuner of one layer's pass: the candidates, every allowed implementation of the pass
 * (entries) or the one the layer holds, each that runs oneDNN's product (NULL included) on conv[0]
 * and, where conv[1] is given, on it too; each run as a step runs it on random tensors in the
 * layer's own buffers (before the first step they are free), interleaved for a few repetitions,
 * the fastest adopted (ties to the earlier in the list, and to conv[0]), the others' plans
 * destroyed; its time in the layer's times; *algo = 1 when it runs on conv[1]. Fewer than two
 * candidates: nothing happens. */
sdgp_status model_tune_pass(sdgp_model *m, op *o, model_pass pass, int entries, sdgp_conv *const conv[2], int *algo,
                            sdgp_error *err);
/* model_tune.c: the tuner over all conv layers: each pass's entries where entries[pass] and the
 * layer holds a choice among them (model_tune.c entries_tuned), and under algos oneDNN's algorithm
 * of each pass. */
sdgp_status model_tune(sdgp_model *m, const int entries[MODEL_NPASS], int algos, sdgp_error *err);
/* The interleaved timer under every tuner: reps rounds of run(ctx, c) for each c < n with
 * wanted[c] (NULL: all), best[c] the shortest time of each (seconds; INFINITY where not run). */
typedef sdgp_status (*model_timed_fn)(void *ctx, int c, sdgp_error *err);
sdgp_status model_time_interleaved(model_timed_fn run, void *ctx, int n, const int *wanted, int reps, double *best,
                                   sdgp_error *err);

/* For describe hooks: out->isa = isa's name; out->blocking = "from L1d <k>K, L2 <k>K" (the caches
 * a kernel sizes its blocks from, where it has no finer description). */
void model_describe_caches(sdgp_isa isa, sdgp_impl_info *out);

/* model_bwd.c: the data gradient's list. Whether layer o holds an entry: it prunes, or (not off) a
 * sparse entry keeps its exact dL/dO (block-masked weights); other layers run oneDNN's backward-data
 * without one. */
extern const model_impl *const model_bwd_impls[];
int model_bwd_wanted(const sdgp_model *m, const op *o);
/* --sparse-kernel on (sparse ones) or off (dense ones), --sdgp-domain pixel (pixel ones), winograd
 * (a layer that a Winograd-domain entry supports uses only those), auto (all). */
int model_bwd_allowed(const sdgp_model *m, const op *o, const model_impl *impl);

/* model_conv.c: conv o's oneDNN convolution under the configuration (algos NULL; MEASURED
 * starts DIRECT) or with these per-pass algorithms, its layer info refreshed; every conv re-planned
 * with algos[i] where it differs (all created before any is replaced: on error nothing changes);
 * the one workspace of all convs and implementations' plans, (re)sized to the largest they need
 * and shared. */
sdgp_status model_conv_create(sdgp_model *m, op *o, const sdgp_conv_algo *algos, sdgp_error *err);
sdgp_status model_conv_apply(sdgp_model *m, const sdgp_conv_algo (*algos)[3], sdgp_error *err);
sdgp_status model_conv_share_workspace(sdgp_model *m, sdgp_error *err);
/* The tuner's convs of layer o: conv[0] every pass direct, conv[1] Winograd in each pass that has a
 * Winograd kernel within --conv-workspace and runs; both NULL when no pass has one. */
sdgp_status model_conv_candidates(sdgp_model *m, op *o, sdgp_conv *conv[2], sdgp_error *err);
/* The layer's conv planned as chosen per pass (a candidate that is, or a new one), the candidates
 * gone. */
sdgp_status model_conv_settle(sdgp_model *m, op *o, sdgp_conv *conv[2], const sdgp_conv_algo chosen[3], sdgp_error *err);

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

/* model_fwd.c: the forward's list (convs with block-masked or cout-form sparse weights: oneDNN on W~
 * or a sparse-weight kernel). */
extern const model_impl *const model_fwd_impls[];
int model_fwd_supported(const sdgp_model *m, const op *o);
int model_fwd_allowed(const sdgp_model *m, const op *o, const model_impl *impl);
/* z = conv(x) with o's weights as its forward runs them. */
void model_fwd_product(sdgp_model *m, op *o, float *z, const float *x);
/* After W~ changed: packs it into the sparse plan of a layer that runs it. */
void model_fwd_pack(sdgp_model *m, op *o);
/* Plans for every supported layer: the first allowed entry (model_tune times the others). */
sdgp_status model_fwd_setup(sdgp_model *m, sdgp_error *err);

/* model_memory.c: gradient buffers, transient activations, the activation arena (after the convs are
 * set up and the first conv's pruning is off). */
sdgp_status model_memory_plan(sdgp_model *m, sdgp_error *err);

/* model_run.c */
/* The weight gradient's masks: seed ^ "wgra", independent of the data gradient's. */
#define MODEL_WGRAD_SEED 0x77677261ull
/* The pruning of conv op o at a step: base's function and n:m along axis, its randomness keyed by
 * (seed, step, layer) (model_run.c). */
sdgp_prune_cfg model_prune_cfg(const sdgp_model *m, const op *o, sdgp_prune_cfg base, sdgp_axis axis, uint64_t seed,
                               uint64_t step);
/* model_wgrad.c: the weight gradient's list under --prune-wgrad (dw from x and the dense dL/dO dz):
 * dL/dO pruned along positions into oneDNN, or into the N:M weight-gradient kernel. */
extern const model_impl *const model_wgrad_impls[];
sdgp_status model_conv_backward_weights(sdgp_model *m, op *o, float *dw, const float *x, const float *dz, uint64_t step,
                                        sdgp_error *err);
int model_wgrad_pruned(const sdgp_model *m, const op *o);
int model_wgrad_allowed(const sdgp_model *m, const op *o, const model_impl *impl);
sdgp_status model_conv_backward_data(sdgp_model *m, op *o, float *dx, const float *dz, uint64_t step,
                                     sdgp_error *err);

#endif
