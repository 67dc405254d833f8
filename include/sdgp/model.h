/* sdgp: models (a registry: ResNet-9, ResNet-18, ResNet-50, a small CNN; each with a width multiplier) and
 * one training step.
 *
 * A model is a fixed list of ops over activation slots (convs with or without BatchNorm and ReLU,
 * residual adds with or without ReLU, pools, linear), built once for a batch size and input
 * shape. Memory: one arena for parameters (weights, their gradients, momentum; running BatchNorm
 * statistics), one for activations, in which every buffer of a step (what backward needs, gradients,
 * scratch) gets bytes that no buffer alive at the same time uses. Nothing is allocated per step.
 *
 * SDGP: each conv layer can prune its output gradient dL/dO (N:M along output channels) before
 * the data-gradient product dL/dD = prune(dL/dO) x W, through the sparse kernel or through
 * oneDNN's dense kernel on the pruned tensor. The weight gradient always uses the dense dL/dO. */
#ifndef SDGP_MODEL_H
#define SDGP_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "sdgp/conv.h"
#include "sdgp/dist.h"
#include "sdgp/export.h"
#include "sdgp/nn.h"
#include "sdgp/prune.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The registry's models, by index (sdgp_model_zoo has their names and descriptions). */
typedef enum {
    SDGP_MODEL_RESNET9 = 0,
    SDGP_MODEL_SMALLCNN = 1,
    SDGP_MODEL_RESNET18 = 2,
    SDGP_MODEL_RESNET50 = 3,
    SDGP_MODEL_REGNETX400MF = 4
} sdgp_model_kind;

typedef struct {
    const char *name;               /* --model value, checkpoint signature: "resnet9", "resnet18", ... */
    const char *description;
    int height, width_px, channels; /* the input it is made for (benchmark default) */
} sdgp_model_info;
/* Number of registered models, and model `kind` of them (NULL outside [0, count)). */
SDGP_API int sdgp_model_zoo_count(void);
SDGP_API const sdgp_model_info *sdgp_model_zoo(int kind);
/* The kind registered under name; the error lists the registered names. */
SDGP_API sdgp_status sdgp_model_kind_parse(const char *name, sdgp_model_kind *out, sdgp_error *err);

typedef enum {
    SDGP_SPARSE_AUTO = 0, /* per layer: the sparse kernel only where a start-up measurement says it is faster */
    SDGP_SPARSE_ON = 1,   /* always the sparse kernel */
    SDGP_SPARSE_OFF = 2,  /* oneDNN dense backward-data on the pruned (decompressed) tensor */
    SDGP_SPARSE_FASTEST = 3 /* per layer: a sparse kernel where a start-up measurement says it beats the plain
                               dense step, else no pruning in that layer (its exact dL/dO, oneDNN): never
                               slower than dense, and no less exact than pruning everywhere */
} sdgp_sparse_mode;
/* The same setting picks the forward of convs with block-masked sparse weights (--weight-groups block16 |
 * block32): ON the sparse-weight kernel, OFF oneDNN on W~, AUTO and FASTEST the faster per layer, timed at
 * create. The names, indexed by the enum and NULL-terminated: "auto", "on", "off", "fastest". */
extern SDGP_API const char *const sdgp_sparse_mode_names[];

/* Where SDGP prunes the data gradient of a 3x3 stride-1 conv (other convs: always the pixel
 * domain). PIXEL: dL/dO itself, N:M along channels at every pixel (the paper). WINOGRAD: the
 * F(2x2,3x3)-transformed dL/dO (include/sdgp/sparse.h, sdgp_sparse_wino_*), a different estimator
 * whose kernel skips the pruned work inside the Winograd algorithm. AUTO: per layer the fastest
 * of the two domains and the dense kernel, measured at start (as SDGP_SPARSE_AUTO). */
typedef enum { SDGP_DOMAIN_PIXEL = 0, SDGP_DOMAIN_WINOGRAD = 1, SDGP_DOMAIN_AUTO = 2 } sdgp_prune_domain;
/* The names, indexed by the enum and NULL-terminated: "pixel", "winograd", "auto". */
extern SDGP_API const char *const sdgp_prune_domain_names[];
/* The name ("?" for other values), and the parse of those names. */
SDGP_API const char *sdgp_prune_domain_name(sdgp_prune_domain d);
SDGP_API sdgp_status sdgp_prune_domain_parse(const char *name, sdgp_prune_domain *out, sdgp_error *err);

/* Sparse weights: the forward (and the data gradient) use W~ = beta S(W) (S-STE) or M W (SR-STE)
 * of each conv's weights W, n:m along input channels; the gradient of W~ goes to W unchanged
 * (straight-through), plus lambda (1 - M) W for SR-STE. beta is a per-tensor constant computed
 * from the initial weights and stored as the parameter "<conv>.sste_beta". */
typedef struct {
    sdgp_weights_kind kind;
    int n, m;                 /* n:m along input channels (kept in this order: config field "nm-weights") */
    sdgp_weights_group group; /* what one mask covers (sdgp_weights_group, include/sdgp/nn.h) */
    float lambda;             /* SR-STE's decay of the pruned weights (2e-4) */
    int first_layer;          /* also the first conv (default 0: dense) */
    int classifier;           /* also the linear classifier (default 0: dense) */
} sdgp_weights_cfg;

/* What backward recomputes rather than keeps from forward. NONE: every conv's pre-BatchNorm output z
 * is kept (its BatchNorm(+ReLU) output never is: backward recomputes that from z). BLOCKS: inside
 * each residual block (the run of convs right before an add whose outputs only the block reads) z
 * is not kept either: just before the block's backward, its convs' forward runs again from the
 * block's input, with the BatchNorm statistics forward saved. Results are bitwise the same; a step
 * costs one more forward conv per conv in a block, and the activation arena keeps little more than
 * the blocks' inputs and outputs (model_memory.c). */
typedef enum { SDGP_RECOMPUTE_NONE = 0, SDGP_RECOMPUTE_BLOCKS = 1 } sdgp_recompute;
/* The names, indexed by the enum and NULL-terminated: "none", "blocks". */
extern SDGP_API const char *const sdgp_recompute_names[];

/* Room for sdgp_model_choice's text: 8 characters per conv layer, up to 127 layers (the registry's
 * largest model, RegNetX-400MF, has 71). */
#define SDGP_CHOICE_LEN 1024

typedef struct {
    sdgp_model_kind kind;
    float width;          /* channel multiplier; channels rounded to multiples of 32 (>= 32) */
    int batch;            /* B */
    int height, width_px, channels; /* input image */
    int num_classes;
    float bn_momentum, bn_eps;
    float out_scale;      /* ResNet-9: logits multiplied by this (0.2) */
    int threads;          /* OpenMP team size (0 = default) */
    sdgp_conv_algo conv_algo; /* dense convolutions: DIRECT, WINOGRAD (error where oneDNN has none), AUTO, MEASURED */
    int conv_workspace_mb;    /* workspace limit of each conv pass, MB (sdgp_conv_options; 0 = none) */
    /* Every conv layer's implementation of each pass and oneDNN's algorithm of each (sdgp_model_choice's
     * text: a checkpoint's, or the one a run printed) that create applies instead of measuring them
     * (SPARSE_AUTO and FASTEST, DOMAIN_AUTO, the weight gradient's kernel, MEASURED's algorithms; a
     * text without the algorithms leaves them to conv_algo); "" = measure. The implementations and
     * algorithms differ in rounding and the measurement in what a loaded machine times, so a run is
     * bitwise reproducible only under the same choice. */
    char choice[SDGP_CHOICE_LEN];
    uint64_t seed;        /* initialisation and pruning randomness */

    /* SDGP (data-gradient pruning); fn = SDGP_PRUNE_NONE turns it off */
    sdgp_prune_cfg prune;      /* fn, n, m, scope, isa; seed/step/layer are set per call */
    int prune_first_layer;     /* the paper does not prune the first conv (default 0) */
    sdgp_sparse_mode sparse;
    sdgp_prune_domain domain;  /* where the data gradient is pruned (default SDGP_DOMAIN_PIXEL) */
    /* MVUE for the weight gradient (groups of m rows per channel); fn NONE = off */
    sdgp_prune_cfg prune_wgrad;
    int prune_wgrad_first_layer; /* also the first conv's (default 0: dense; pruning its dL/dO, on the image's
                                  * 1-3 channels, costs more than its whole weight-gradient product) */
    /* N:M sparse weights (S-STE or SR-STE, include/sdgp/nn.h): kind DENSE = off */
    sdgp_weights_cfg weights;
    sdgp_recompute recompute; /* memory against compute (default NONE) */
} sdgp_model_config;

/* Defaults: ResNet-9, width 1, batch 64, 32x32x3, 10 classes, BN momentum 0.1 eps 1e-5, scale 0.2,
 * no pruning, sparse AUTO, prune isa AUTO, conv algorithm AUTO with a workspace limit of
 * SDGP_CONV_WORKSPACE_MB_DEFAULT. */
#define SDGP_CONV_WORKSPACE_MB_DEFAULT 48
SDGP_API sdgp_model_config sdgp_model_config_default(void);

typedef struct sdgp_model sdgp_model;

/* Builds the model and its arenas, initialises weights as PyTorch does (kaiming-uniform with
 * a = sqrt(5) for conv and linear; BN gamma 1, beta 0, running mean 0, var 1) from cfg->seed.
 * Errors: shapes that do not fit (too small an input for the model, n:m that does not divide a
 * layer's channels), memory. */
SDGP_API sdgp_status sdgp_model_create(sdgp_model **out, const sdgp_model_config *cfg, sdgp_error *err);
SDGP_API void sdgp_model_destroy(sdgp_model *m);
SDGP_API const sdgp_model_config *sdgp_model_get_config(const sdgp_model *m);

/* Parameters, in a fixed order. Each tensor: name (e.g. "conv3.weight", "bn3.running_var"),
 * shape, data, grad (NULL for BN running stats), momentum buffer (NULL likewise), and whether
 * weight decay applies (conv/linear weights only). */
typedef struct {
    const char *name;
    int ndim;
    int64_t shape[4];
    size_t count;
    float *data, *grad, *momentum;
    int decay;     /* weight decay applies */
    int trainable; /* 0 for BN running statistics */
} sdgp_param;

SDGP_API int sdgp_model_param_count(const sdgp_model *m);
SDGP_API const sdgp_param *sdgp_model_param(const sdgp_model *m, int i);
SDGP_API size_t sdgp_model_param_floats(const sdgp_model *m); /* trainable parameter count */
/* The values the forward uses for parameter i: for the weights of a layer with sparse weights,
 * W~ (projected from the current weights by this call), else the parameter's data. NULL for i
 * outside [0, count). For export and for inference elsewhere. */
SDGP_API const float *sdgp_model_param_used(sdgp_model *m, int i);
SDGP_API size_t sdgp_model_activation_bytes(const sdgp_model *m);

/* Forward on a batch x (B x H x W x C NHWC). train != 0: BatchNorm uses batch statistics and
 * updates running ones, and activations are kept for backward. Returns logits (B x classes),
 * valid until the next forward. */
SDGP_API const float *sdgp_model_forward(sdgp_model *m, const float *x, int train);

/* Backward from dlogits (B x classes): fills every trainable parameter's grad. step and the
 * model seed key the pruning randomness. Must follow a forward with train != 0. */
SDGP_API sdgp_status sdgp_model_backward(sdgp_model *m, const float *dlogits, uint64_t step, sdgp_error *err);

/* SGD with momentum on every trainable parameter (weight decay where decay != 0). */
SDGP_API void sdgp_model_sgd(sdgp_model *m, float lr, float momentum, float weight_decay, int nesterov);

/* Data-gradient statistics of the last backward, per conv layer (grad-stats): when enabled,
 * backward also computes the dense dL/dD and compares. */
typedef struct {
    const char *layer;
    int pruned;            /* this layer prunes its dL/dO */
    int sparse_kernel;     /* its data gradient uses a sparse kernel (of dL/dO: pixel or Winograd domain; or of W~) */
    /* Per pass, the name of the implementation that runs it (`sdgp kernels` lists them all):
     * bwd_kernel, the data gradient's: "dense" (oneDNN, on the pruned dL/dO where the layer prunes),
     * "sparse", "sparse-fused" (pixel domain), "winograd" (Winograd domain), "unpruned",
     * "sparse-weights" (exact dL/dO, sparse W~), "pruned+sparse-weights"; fwd_kernel: "dense" (oneDNN)
     * or "sparse-weights", "sparse-weights-winograd", "sparse-weights-cout"; bwd_weights_kernel:
     * "dense" (oneDNN, on the pruned dL/dO under --prune-wgrad) or "sparse" (the N:M kernel). */
    const char *bwd_kernel;
    const char *fwd_kernel;
    const char *bwd_weights_kernel;
    int winograd;          /* some pass of its dense convolution runs oneDNN's Winograd kernel */
    int sparse_weights;    /* its forward uses N:M sparse weights (sdgp_weights_cfg) */
    int sparse_forward;    /* its forward runs a sparse-weight kernel (sdgp_sparse_fwd_*): 1 direct, 2 Winograd (block
                            * masks), 3 the cout form's */
    int sparse_data;       /* its data gradient runs the sparse-weight kernel (block masks; sdgp_sparse_wdata_*) */
    int pruned_wgrad;      /* --prune-wgrad prunes this layer's dL/dO for its weight gradient */
    int sparse_wgrad;      /* --prune-wgrad: its weight gradient runs the N:M kernel (sdgp_sparse_wgrad_*) */
    sdgp_conv_pass_plan plan[3]; /* how each pass runs (indexed by sdgp_conv_pass) */
    double rel_l2, cosine; /* pruned-path dL/dD vs dense dL/dD (valid when stats were enabled) */
    sdgp_conv_geom geom;   /* its shape: batch, input, channels, kernel, stride, padding, groups */
} sdgp_layer_info;
SDGP_API void sdgp_model_enable_grad_stats(sdgp_model *m, int on);
SDGP_API int sdgp_model_conv_count(const sdgp_model *m);
SDGP_API const sdgp_layer_info *sdgp_model_conv_info(const sdgp_model *m, int i);

/* The tuner on the data gradient alone: per layer with more than one allowed implementation of
 * it (SPARSE_AUTO: dense or sparse; DOMAIN_AUTO: also the Winograd domain; block-masked sparse
 * weights: also the sparse-weight kernel), measures each (a few repetitions on random data,
 * pruning and packing included) and keeps the fastest. Create runs the same tuner over every pass
 * (sdgp_model_choice). It uses the activation buffers as its test data: do not call it between a
 * forward and its backward. */
SDGP_API sdgp_status sdgp_model_tune_sparse(sdgp_model *m, sdgp_error *err);

/* The implementation lists the model chooses each conv pass's product from (`sdgp kernels`), pass
 * by pass, each in its order of preference: entry i of sdgp_impl_count(). isa is the path its
 * kernels take on this host under SDGP_ISA / --isa auto ("avx512", "avx2", "ref"), or
 * "onednn:<isa>" for oneDNN's; blocking its block sizes on this host for a probe layer (3x3,
 * 64 -> 64 channels, 8 images of 16x16, n:m 2:4), which it derives from the detected caches
 * (SDGP_L1D_KB, SDGP_L2_KB override them). */
typedef struct {
    const char *pass;    /* "fwd", "bwd_data", "bwd_weights" */
    const char *name;    /* as sdgp_layer_info names it */
    char code;           /* its letter in the choice text (sdgp_model_choice) */
    int sparse;          /* skips pruned work or W~'s zeros */
    char isa[32];
    char blocking[160];
} sdgp_impl_info;
SDGP_API int sdgp_impl_count(void);
/* Fills *out for entry i (threads: the plans' thread count; 0: 1); SDGP_ERR_INVALID for i out of range. */
SDGP_API sdgp_status sdgp_impl_describe(int i, int threads, sdgp_impl_info *out, sdgp_error *err);

/* For benchmarks (`sdgp bench impls`): conv layer i's pass ("fwd", "bwd_data", "bwd_weights") run
 * by every implementation of its list the model could hand that layer under its configuration
 * (whether or not the configuration lets the tuner pick it), and first by oneDNN's product on the
 * exact tensors (name "onednn", code 0: the dense baseline), each implementation that runs
 * oneDNN's product (the baseline too) once with oneDNN's direct algorithm and once with its
 * Winograd where a Winograd kernel runs the pass (algo), each as a step runs it (pruning and
 * packing included) on random tensors in the layer's buffers, reps interleaved rounds, the best
 * of each. chosen marks what the layer runs.
 * The layer keeps its choice. *n results (none for the data gradient of a conv on the image);
 * SDGP_ERR_INVALID when they do not fit max. It overwrites the layer's activation buffers and its
 * weight gradient: call it before a step or between steps, not between a forward and its backward
 * nor between a backward and the update. */
typedef struct {
    const char *name;    /* as sdgp_impl_info names it; "onednn" for the baseline */
    char code;           /* its letter in the choice text; 0 for the baseline */
    const char *algo;    /* "direct" or "winograd": oneDNN's algorithm where it runs oneDNN's product, else "" */
    int sparse, chosen;
    double ms;
} sdgp_impl_time;
SDGP_API sdgp_status sdgp_model_time_impls(sdgp_model *m, int i, const char *pass, int reps, sdgp_impl_time *out, int max,
                                           int *n, sdgp_error *err);

/* Every conv layer's choice for its three passes as text, a token per layer, ',' between:
 * "FBW:abc", F, B and W the letters (sdgp_impl_info.code, `sdgp kernels`) of the implementations of
 * its forward, data gradient and weight gradient, '-' where it holds none (oneDNN's product on the
 * exact tensors; for the weight gradient also the entry that prunes into oneDNN), then a, b, c
 * oneDNN's algorithm of each pass, 'd' direct or 'w' Winograd (what a pass that runs oneDNN's
 * product uses). E.g. "---:ddd,sdm:dwd,cf-:ddw". Checkpoints store it, so a resumed run computes
 * with the same implementations and algorithms (their results differ in rounding) and stays
 * bitwise exact. */
SDGP_API void sdgp_model_choice(const sdgp_model *m, char *buf, size_t size);
/* Applies such a text (from sdgp_model_choice of the same configuration): tokens "FBW" leave the
 * layer's algorithms as they are; the earlier kernel-choice text (data gradient [ '/' forward ]
 * [ '|' weight gradient ], a letter per layer each) is taken too. Every letter is checked before
 * anything changes: SDGP_ERR_FORMAT naming the layer and pass for a malformed text, one of another
 * layer count or an implementation the layer cannot run. */
SDGP_API sdgp_status sdgp_model_set_choice(sdgp_model *m, const char *choice, sdgp_error *err);

/* --conv-algo measured: per conv layer and pass (forward, backward-data, backward-weights), times
 * DIRECT and WINOGRAD for the implementation the pass holds where it runs oneDNN's product (each as
 * the model calls it, oneDNN's reorders included; interleaved repetitions, the best of each, random
 * data of the layer's shapes) and plans each pass with the faster. WINOGRAD is a candidate in the
 * passes a Winograd kernel runs (3x3, stride 1, ungrouped: oneDNN's with AVX-512, else sdgp's) and
 * where its workspace fits the limit; a pass the model never runs (the image conv's backward-data)
 * stays DIRECT. Create runs it with the implementations' tuner unless cfg.choice gives the
 * algorithms. Uses the activation buffers as test data (not between a forward and its backward). */
SDGP_API sdgp_status sdgp_model_tune_conv(sdgp_model *m, sdgp_error *err);

/* Per-layer times of the last forward/backward (ms), for `sdgp bench layers`: forward conv,
 * backward-data (dense or sparse), pruning (of the data gradient's dL/dO), backward-weights (with
 * --prune-wgrad its pruning included), for each conv layer. */
typedef struct {
    double fwd_ms, bwd_data_ms, prune_ms, bwd_weights_ms;
} sdgp_layer_times;
SDGP_API void sdgp_model_enable_timing(sdgp_model *m, int on);
SDGP_API const sdgp_layer_times *sdgp_model_conv_times(const sdgp_model *m, int i);

/* Inspection hook (tests, oracles): called during backward for every conv layer whose data
 * gradient is computed, with its dense dL/dO (dz) and the tensor the data-gradient product used
 * (the pruned dL/dO, or dz itself when the layer does not prune), both rows x C, NHWC.
 * dz_used is NULL for a layer pruned in the Winograd domain (the pruned tensor is the transformed
 * gradient, not dL/dO). */
typedef void (*sdgp_dz_hook)(void *ctx, int conv_index, const float *dz, const float *dz_used, int64_t rows, int C);
SDGP_API void sdgp_model_set_dz_hook(sdgp_model *m, sdgp_dz_hook hook, void *ctx);

/* Data-parallel training (include/sdgp/dist.h): called during backward with the index of each
 * trainable parameter as soon as its gradient is final (the conv weight right after its weight
 * gradient, before the data gradient), so that its sum over processes can start while backward
 * goes on. Each parameter is reported once per backward, in backward order. */
typedef void (*sdgp_grad_hook)(void *ctx, int param);
SDGP_API void sdgp_model_set_grad_hook(sdgp_model *m, sdgp_grad_hook hook, void *ctx);

/* Synchronised BatchNorm: with dist, a training forward normalises with the statistics of the
 * whole batch over dist's processes and backward uses the whole batch's sums (blocking allreduces
 * of 2C + 1 doubles per BatchNorm layer each way), so K processes compute what one process computes
 * on the whole batch; each BatchNorm's dgamma and dbeta then hold this process's share (they add up
 * over processes). NULL (default): statistics of this process's rows only. dist must outlive its
 * use. Errors: memory. */
SDGP_API sdgp_status sdgp_model_set_bn_dist(sdgp_model *m, const sdgp_dist *dist, sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
