/* The model's internal representation: ops over activation slots (see include/sdgp/model.h). */
#ifndef SDGP_MODEL_INTERNAL_H
#define SDGP_MODEL_INTERNAL_H

#include "sdgp/conv.h"
#include "sdgp/model.h"

#define MODEL_MAX_OPS 32
#define MODEL_MAX_SLOTS 40
#define MODEL_MAX_PARAMS 64

typedef enum { OP_CONV_BN_RELU, OP_MAXPOOL2, OP_ADD, OP_GLOBAL_MAXPOOL, OP_LINEAR, OP_SCALE } op_kind;

/* An activation: B x H x W x C floats (W = C = 1 ... for flat tensors). */
typedef struct {
    int H, W, C;
    size_t count;      /* B*H*W*C */
    float *act;        /* forward output (slot 0: the caller's input); for a transient slot, a
                          gradient-pool buffer lent during forward */
    int lent_buf;      /* >= 0: transient (backward never reads act as stored, see plan_transients):
                          act is this gradient-pool buffer during forward; -1: storage of its own */
    int live_from, live_to; /* transient: the ops that write and last read act */
} slot;

/* How backward hands gradients to an op's inputs, decided once at build time. */
typedef enum {
    GRAD_NONE,       /* nobody needs this gradient (the network input) */
    GRAD_WRITE,      /* first writer: overwrite the buffer */
    GRAD_ACCUMULATE  /* someone wrote it already: add */
} grad_mode;

typedef struct {
    op_kind kind;
    int in, in2, out;               /* slot ids (in2: OP_ADD only) */
    grad_mode in_mode, in2_mode;
    int in_buf, in2_buf;            /* grad-pool buffer for the inputs' gradients (-1: none) */
    int acc_tmp;                    /* in_mode == GRAD_ACCUMULATE (not OP_ADD): the free grad-pool
                                       buffer the op writes into before it is added to in_buf */
    int recompute_from;             /* OP_CONV_BN_RELU whose input is a transient conv output: that
                                       conv's op index (its input is recomputed for the weight
                                       gradient); -1 otherwise */
    int out_buf;                    /* grad-pool buffer that holds this op's output gradient */
    int in_inherits;                /* OP_ADD: input `in` takes over the output gradient buffer */

    /* OP_CONV_BN_RELU */
    int conv_index;                 /* 0, 1, ... in order */
    sdgp_conv_geom geom;
    sdgp_conv *dnnl;
    int p_w, p_gamma, p_beta, p_rmean, p_rvar; /* parameter indices */
    float *z;                       /* conv output, pre-BatchNorm (B x Ho x Wo x Cout) */
    float *mean, *rstd;             /* saved BatchNorm statistics (Cout) */
    int prune;                      /* prune dL/dO for the data gradient */
    sdgp_sparse_bwd *sparse;        /* the sparse kernel's plan (NULL: dense on the pruned tensor) */
    sdgp_layer_info info;
    sdgp_layer_times times;
    char name[24];

    /* OP_MAXPOOL2 / OP_GLOBAL_MAXPOOL */
    uint8_t *pool_arg;
    int32_t *gmp_arg;

    /* OP_LINEAR */
    int p_lw, p_lb;                 /* p_lb = -1: no bias */
    /* OP_SCALE */
    float scale;
} op;

struct sdgp_model {
    sdgp_model_config cfg;
    int B;
    op ops[MODEL_MAX_OPS];
    int n_ops;
    slot slots[MODEL_MAX_SLOTS];
    int n_slots;
    int logits_slot;

    sdgp_param params[MODEL_MAX_PARAMS];
    char param_names[MODEL_MAX_PARAMS][32];
    int n_params;
    float *param_arena;             /* data | grad | momentum, one block */
    size_t param_floats;            /* all floats in the data part (incl. running stats) */
    size_t trainable_floats;

    void *act_arena;                /* everything that depends on the batch */
    size_t act_bytes;
    float **grad_pool;              /* liveness-shared gradient buffers */
    size_t grad_pool_count[MODEL_MAX_SLOTS]; /* floats of each: the largest slot it serves */
    int n_grad_pool;
    size_t max_count;               /* floats of the largest slot */
    float *scratch2;                /* max_count floats: the pruned dense dL/dO (dense path, wgrad MVUE,
                                       grad-stats); NULL when nothing is pruned */
    void *conv_ws;                  /* the workspace all convs share (they run one at a time) */
    sdgp_nm_tensor nm;              /* compressed pruned dL/dO, sized for the largest layer */

    int grad_stats, timing;
    sdgp_dz_hook dz_hook;
    void *dz_hook_ctx;
    int conv_ops[MODEL_MAX_OPS];    /* op index of conv i */
    int n_convs;
};

/* model_run.c */
sdgp_status model_conv_backward_data(sdgp_model *m, op *o, float *dx, const float *dz, uint64_t step,
                                     sdgp_error *err);

#endif
