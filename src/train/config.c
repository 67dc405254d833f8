/* The training configuration as one table of named fields: CLI flags, checkpoint metadata,
 * sweep files and logs all go through sdgp_train_config_set / sdgp_train_config_field. */
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model_zoo.h"
#include "sdgp/train.h"
#include "train/train_internal.h"

/* Where each dataset is when no data-dir is given: Debian's package for Fashion-MNIST,
 * scripts/get-mnist.sh's directory for MNIST (no Debian package carries it). */
static const struct {
    const char *data, *dir;
} default_dirs[] = {
    {"fashion-mnist", "/usr/share/datasets/fashion-mnist"},
    {"mnist", "/usr/share/datasets/mnist"},
    {"cifar10", "/usr/share/datasets/cifar10"},
};

static const char *default_data_dir(const char *data) {
    for (size_t i = 0; i < sizeof default_dirs / sizeof *default_dirs; i++)
        if (!strcmp(data, default_dirs[i].data)) return default_dirs[i].dir;
    return NULL;
}

sdgp_train_config sdgp_train_config_default(void) {
    sdgp_train_config c;
    memset(&c, 0, sizeof c);
    c.model = sdgp_model_config_default();
    c.model.width = 0.25f;
    c.model.batch = 512;
    snprintf(c.data, sizeof c.data, "fashion-mnist");
    snprintf(c.data_dir, sizeof c.data_dir, "%s", default_data_dir(c.data));
    c.epochs = 15;
    c.lr = 0.5f;
    c.momentum = 0.9f;
    c.weight_decay = 5e-4f;
    c.label_smoothing = 0.1f;
    c.schedule = SDGP_SCHED_REFERENCE;
    c.warmup_epochs = 1.0f; /* the reference's 5 of 150 epochs, scaled and rounded up to one */
    c.step_gamma = 0.1f;
    c.step_epochs = 5.0f;
    c.augment.flip = 1;
    c.augment.translate = 2;
    c.augment.cutout = 4;
    c.tta = 1;
    c.on_nan = SDGP_ON_NAN_STOP;
    return c;
}

typedef enum { F_INT, F_INT64, F_U64, F_FLOAT, F_BOOL, F_STRING, F_ENUM, F_NM, F_PRUNE_FN, F_ISA } field_kind;

typedef struct {
    const char *name;
    field_kind kind;
    size_t offset, size;     /* size: strings' capacity, ints' width via kind */
    double lo, hi;           /* numeric range */
    const char *const *names; /* F_ENUM: value i is names[i] */
    const char *help;
} field;

/* --model: the registry's names, in the order of sdgp_model_kind, and "a | b | c" for the help
 * (each name adds " | name"; the help skips the first separator). */
#define ZOO_NAME(name, h, w, c, desc) #name,
#define ZOO_HELP(name, h, w, c, desc) " | " #name
static const char *const model_names[] = {SDGP_MODEL_ZOO(ZOO_NAME) NULL};
static const char *const sched_names[] = {"reference", "step", "cosine", "constant", NULL};
static const char *const scope_names[] = {"sample-channel", "channel", NULL};
static const char *const nan_names[] = {"stop", "skip", NULL};
static const char *const allreduce_names[] = {"overlap", "end", NULL}; /* indexed by allreduce_at_end */

#define OFF(member) offsetof(sdgp_train_config, member)
#define SZ(member) sizeof(((sdgp_train_config *)0)->member)
static const field fields[] = {
    {"model", F_ENUM, OFF(model.kind), 0, 0, 0, model_names, &(SDGP_MODEL_ZOO(ZOO_HELP))[3]},
    {"width", F_FLOAT, OFF(model.width), 0, 0.03125, 16, NULL, "channel multiplier (channels stay multiples of 32)"},
    {"batch-size", F_INT, OFF(model.batch), 0, 1, 65536, NULL, "images per step (over all MPI ranks: each takes its share)"},
    {"seed", F_U64, OFF(model.seed), 0, 0, 0, NULL, "seed of initialisation, data order, augmentation, masks"},
    {"threads", F_INT, OFF(model.threads), 0, 0, 1024, NULL, "OpenMP threads (0: all cores)"},
    {"conv-algo", F_ENUM, OFF(model.conv_algo), 0, 0, 0, sdgp_conv_algo_names,
     &(SDGP_CONV_ALGO_LIST(SDGP_CONV_ALGO_HELP) /* [3]: skip the first " | " */
     ": dense convolutions (auto: Winograd by a rule, oneDNN's or, where it has none, sdgp's (forward, backward-data; "
     "SDGP_WINOGRAD=sdgp|onednn orders them); measured: per layer and pass the faster of direct and Winograd, timed "
     "at start)")[3]},
    {"conv-workspace", F_INT, OFF(model.conv_workspace_mb), 0, 0, 1 << 20, NULL,
     "MB per conv pass; Winograd splits its calls to fit, auto falls back to direct (0: no limit)"},
    {"recompute", F_ENUM, OFF(model.recompute), 0, 0, 0, sdgp_recompute_names,
     "none | blocks: keep every conv's output for backward, or recompute each residual block's forward in backward (less memory, bitwise the same)"},
    {"data", F_STRING, OFF(data), SZ(data), 0, 0, NULL, "fashion-mnist | mnist | cifar10"},
    {"data-dir", F_STRING, OFF(data_dir), SZ(data_dir), 0, 0, NULL,
     "directory of the data files (default: /usr/share/datasets/<data>; MNIST: bash scripts/get-mnist.sh)"},
    {"epochs", F_INT, OFF(epochs), 0, 1, 100000, NULL, "epochs"},
    {"max-steps", F_INT64, OFF(max_steps), 0, 0, 1e15, NULL, "stop after this many steps (0: no limit)"},
    {"lr", F_FLOAT, OFF(lr), 0, 0, 1000, NULL, "peak learning rate"},
    {"momentum", F_FLOAT, OFF(momentum), 0, 0, 0.9999, NULL, "SGD momentum"},
    {"nesterov", F_BOOL, OFF(nesterov), 0, 0, 1, NULL, "Nesterov momentum"},
    {"weight-decay", F_FLOAT, OFF(weight_decay), 0, 0, 1, NULL, "weight decay (not on BatchNorm parameters)"},
    {"label-smoothing", F_FLOAT, OFF(label_smoothing), 0, 0, 0.999, NULL, "label smoothing"},
    {"schedule", F_ENUM, OFF(schedule), 0, 0, 0, sched_names, "reference | step | cosine | constant"},
    {"warmup-epochs", F_FLOAT, OFF(warmup_epochs), 0, 0, 100000, NULL, "linear warm-up (reference, cosine)"},
    {"step-gamma", F_FLOAT, OFF(step_gamma), 0, 0, 1, NULL, "step schedule: factor"},
    {"step-epochs", F_FLOAT, OFF(step_epochs), 0, 0.001, 100000, NULL, "step schedule: epochs per step"},
    {"flip", F_BOOL, OFF(augment.flip), 0, 0, 1, NULL, "random horizontal flip"},
    {"translate", F_INT, OFF(augment.translate), 0, 0, 64, NULL, "random translate: padding in pixels"},
    {"cutout", F_INT, OFF(augment.cutout), 0, 0, 1024, NULL, "cutout square side (0: off)"},
    {"tta", F_BOOL, OFF(tta), 0, 0, 1, NULL, "test-time augmentation: average with the mirror image"},
    {"checkpoint", F_STRING, OFF(checkpoint), SZ(checkpoint), 0, 0, NULL, "write a checkpoint here each epoch"},
    {"checkpoint-every", F_INT64, OFF(checkpoint_every), 0, 0, 1e15, NULL, "also every this many steps (0: off)"},
    {"log", F_STRING, OFF(log), SZ(log), 0, 0, NULL, "JSON lines log, one object per epoch"},
    {"grad-stats", F_INT, OFF(grad_stats_every), 0, 0, 1000000000, NULL, "every k steps: per-layer dL/dD error vs dense (0: off)"},
    {"sync-bn", F_BOOL, OFF(sync_bn), 0, 0, 1, NULL, "MPI ranks: BatchNorm statistics of the global batch (off: per rank)"},
    {"allreduce", F_ENUM, OFF(allreduce_at_end), 0, 0, 0, allreduce_names,
     "overlap | end: MPI gradient sums started during backward, or all after it (cheaper on one machine)"},
    {"on-nan", F_ENUM, OFF(on_nan), 0, 0, 0, nan_names, "stop | skip: NaN/Inf in the loss or a gradient"},
    {"prune", F_PRUNE_FN, OFF(model.prune.fn), 0, 0, 0, NULL, "none | random | magnitude | rescaled | mvue | mvue-approx"},
    {"nm", F_NM, OFF(model.prune.n), 0, 0, 0, NULL, "N:M of the data-gradient pruning"},
    {"rescale-scope", F_ENUM, OFF(model.prune.scope), 0, 0, 0, scope_names, "sample-channel | channel"},
    {"prune-first-layer", F_BOOL, OFF(model.prune_first_layer), 0, 0, 1, NULL, "also prune the first conv"},
    {"sparse-kernel", F_ENUM, OFF(model.sparse), 0, 0, 0, sdgp_sparse_mode_names,
     "auto | on | off | fastest (per layer the sparse kernel where it beats dense, else that layer unpruned); "
     "also the forward of block16/block32 sparse weights: dense, direct or Winograd F(4x4) per layer (on: a sparse one, "
     "Winograd where the layer is 3x3 stride 1; fastest as auto)"},
    {"kernels", F_STRING, OFF(model.choice), SZ(model.choice), 0, 0, NULL,
     "each conv layer's implementations and oneDNN algorithms as a run printed them (`choice ---:ddd,sfm:dwd,...`): "
     "used instead of timed at start, so a run repeats another's bits whatever the machine's load"},
    {"sdgp-domain", F_ENUM, OFF(model.domain), 0, 0, 0, sdgp_prune_domain_names,
     "pixel | winograd | auto: prune dL/dO itself, or its F(2x2,3x3) transform in 3x3 layers (auto: per layer the faster)"},
    {"mask-block", F_INT, OFF(model.prune.mask_block), 0, 1, SDGP_MASK_BLOCK_MAX, NULL,
     "rows sharing one N:M mask: P pixels along a row of dL/dO (pixel), P tiles along a tile row (winograd); 1: a mask per row"},
    {"prune-wgrad", F_PRUNE_FN, OFF(model.prune_wgrad.fn), 0, 0, 0, NULL, "none | mvue | ...: weight-gradient pruning along positions"},
    {"nm-wgrad", F_NM, OFF(model.prune_wgrad.n), 0, 0, 0, NULL, "N:M of the weight-gradient pruning"},
    {"wgrad-block", F_INT, OFF(model.prune_wgrad.mask_block), 0, 1, SDGP_MASK_BLOCK_MAX, NULL,
     "output channels sharing one weight-gradient row mask (random, magnitude, mvue; 1: a mask per channel)"},
    {"prune-wgrad-first", F_BOOL, OFF(model.prune_wgrad_first_layer), 0, 0, 1, NULL,
     "also prune the first conv's weight gradient (off: dense; its pruning costs more than its product)"},
    {"sparse-weights", F_ENUM, OFF(model.weights.kind), 0, 0, 0, sdgp_weights_kind_names,
     "dense | sste | srste: N:M weights in the forward (S-STE soft threshold, SR-STE hard mask)"},
    {"nm-weights", F_NM, OFF(model.weights.n), 0, 0, 0, NULL, "N:M of the sparse weights, along input channels"},
    {"weight-groups", F_ENUM, OFF(model.weights.group), 0, 0, 0, sdgp_weights_group_names,
     "tap | kernel | block16 | block32 | cout: a mask per (output channel, tap), per output channel for all taps, per block of 16 or 32 output channels for all taps, or per (input channel, tap) along output channels"},
    {"srste-lambda", F_FLOAT, OFF(model.weights.lambda), 0, 0, 1, NULL, "SR-STE: decay of the pruned weights"},
    {"sparse-weights-first", F_BOOL, OFF(model.weights.first_layer), 0, 0, 1, NULL, "also the first conv's weights"},
    {"sparse-weights-classifier", F_BOOL, OFF(model.weights.classifier), 0, 0, 1, NULL, "also the classifier's weights"},
    {"isa", F_ISA, OFF(model.prune.isa), 0, 0, 0, NULL, "auto | ref | avx2 | avx512: kernels of pruning and sparse conv"},
};
#define N_FIELDS ((int)(sizeof fields / sizeof fields[0]))

int sdgp_train_config_field_count(void) { return N_FIELDS; }
int sdgp_train_config_field_is_bool(int i) { return i >= 0 && i < N_FIELDS && fields[i].kind == F_BOOL; }

/* Settings added after checkpoints were first written, with what the runs before them ran: such a
 * checkpoint still loads (and resumes) as the run it was. */
static const struct {
    const char *name, *before;
} added_later[] = {
    {"conv-algo", "direct"}, {"conv-workspace", "0"}, {"sdgp-domain", "pixel"}, {"mask-block", "1"},
    {"sync-bn", "0"}, {"allreduce", "overlap"}, {"sparse-weights", "dense"}, {"nm-weights", "2:4"},
    {"weight-groups", "tap"}, {"srste-lambda", "0.0002"}, {"sparse-weights-first", "0"},
    {"sparse-weights-classifier", "0"}, {"recompute", "none"}, {"wgrad-block", "1"},
    {"prune-wgrad-first", "1"}, /* until 2026-11-28 --prune-wgrad pruned every conv's weight gradient */
    {"kernels", ""},
};

const char *train_config_field_before(int i) {
    for (size_t k = 0; i >= 0 && i < N_FIELDS && k < sizeof added_later / sizeof *added_later; k++)
        if (!strcmp(fields[i].name, added_later[k].name)) return added_later[k].before;
    return NULL;
}

static int parse_double(const char *text, double *out) {
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !isfinite(v)) return 0;
    *out = v;
    return 1;
}

static sdgp_status set_field(const field *f, sdgp_train_config *cfg, const char *value, sdgp_error *err) {
    char *base = (char *)cfg + f->offset;
    double d;
    switch (f->kind) {
    case F_INT:
    case F_INT64:
    case F_FLOAT:
        if (!parse_double(value, &d)) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: '%s' is not a number", f->name, value);
        if (d < f->lo || d > f->hi)
            return sdgp_fail(err, SDGP_ERR_INVALID, "%s: %s is out of range [%g, %g]", f->name, value, f->lo, f->hi);
        if (f->kind != F_FLOAT && d != floor(d))
            return sdgp_fail(err, SDGP_ERR_INVALID, "%s: '%s' is not an integer", f->name, value);
        if (f->kind == F_INT) *(int *)(void *)base = (int)d;
        else if (f->kind == F_INT64) *(int64_t *)(void *)base = (int64_t)d;
        else *(float *)(void *)base = (float)d;
        return SDGP_OK;
    case F_U64: {
        errno = 0;
        char *end;
        unsigned long long v = strtoull(value, &end, 10);
        if (errno || end == value || *end || value[0] == '-')
            return sdgp_fail(err, SDGP_ERR_INVALID, "%s: '%s' is not a non-negative integer", f->name, value);
        *(uint64_t *)(void *)base = v;
        return SDGP_OK;
    }
    case F_BOOL:
        if (!strcmp(value, "1") || !strcmp(value, "true") || !strcmp(value, "on")) *(int *)(void *)base = 1;
        else if (!strcmp(value, "0") || !strcmp(value, "false") || !strcmp(value, "off")) *(int *)(void *)base = 0;
        else return sdgp_fail(err, SDGP_ERR_INVALID, "%s: '%s' is not a boolean (1/0, true/false, on/off)", f->name, value);
        return SDGP_OK;
    case F_STRING:
        if (strlen(value) >= f->size)
            return sdgp_fail(err, SDGP_ERR_INVALID, "%s: value longer than %zu characters", f->name, f->size - 1);
        memset(base, 0, f->size); /* canonical bytes: equal configs compare equal with memcmp */
        memcpy(base, value, strlen(value));
        return SDGP_OK;
    case F_ENUM:
        for (int i = 0; f->names[i]; i++)
            if (!strcmp(value, f->names[i])) {
                *(int *)(void *)base = i;
                return SDGP_OK;
            }
        return sdgp_fail(err, SDGP_ERR_INVALID, "%s: unknown value '%s' (%s)", f->name, value, f->help);
    case F_NM: {
        int n, m;
        sdgp_status st = sdgp_nm_parse(value, &n, &m, err);
        if (st != SDGP_OK) { /* the message is err's own: copy it before sdgp_fail writes err */
            char why[SDGP_ERROR_MSG_LEN];
            snprintf(why, sizeof why, "%s", err ? err->msg : value);
            return sdgp_fail(err, st, "%s: %s", f->name, why);
        }
        int *nm = (int *)(void *)base; /* sdgp_prune_cfg's `int n, m;` */
        nm[0] = n;
        nm[1] = m;
        return SDGP_OK;
    }
    case F_PRUNE_FN: {
        sdgp_prune_fn fn;
        sdgp_status st = sdgp_prune_fn_parse(value, &fn, err);
        if (st != SDGP_OK) return sdgp_fail(err, st, "%s: unknown pruning function '%s' (%s)", f->name, value, f->help);
        *(sdgp_prune_fn *)(void *)base = fn;
        return SDGP_OK;
    }
    case F_ISA: {
        sdgp_isa isa;
        sdgp_status st = sdgp_isa_parse(value, &isa, err);
        if (st != SDGP_OK) return st;
        *(sdgp_isa *)(void *)base = isa;
        cfg->model.prune_wgrad.isa = isa;
        return SDGP_OK;
    }
    }
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "%s: unknown field kind", f->name);
}

sdgp_status sdgp_train_config_set(sdgp_train_config *cfg, const char *key, const char *value, sdgp_error *err) {
    if (!cfg || !key || !value) return sdgp_fail(err, SDGP_ERR_INVALID, "config: NULL argument");
    /* data-dir follows data while it is the previous dataset's default: --data mnist alone must not
     * read Fashion-MNIST's files (a checkpoint stores data before data-dir, which then sets its own) */
    const char *dir_was = !strcmp(key, "data") ? default_data_dir(cfg->data) : NULL;
    const int follow = dir_was && !strcmp(cfg->data_dir, dir_was);
    for (int i = 0; i < N_FIELDS; i++)
        if (!strcmp(key, fields[i].name)) {
            sdgp_status st = set_field(&fields[i], cfg, value, err);
            const char *dir = st == SDGP_OK && follow ? default_data_dir(cfg->data) : NULL;
            if (dir) snprintf(cfg->data_dir, sizeof cfg->data_dir, "%s", dir);
            return st;
        }
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown setting '%s'", key);
}

const char *sdgp_train_config_field(const sdgp_train_config *cfg, int i, const char **help, char *buf, size_t size) {
    if (i < 0 || i >= N_FIELDS) return NULL;
    const field *f = &fields[i];
    const char *base = (const char *)cfg + f->offset;
    if (help) *help = f->help;
    switch (f->kind) {
    case F_INT:
    case F_BOOL: snprintf(buf, size, "%d", *(const int *)(const void *)base); break;
    case F_INT64: snprintf(buf, size, "%lld", (long long)*(const int64_t *)(const void *)base); break;
    case F_U64: snprintf(buf, size, "%llu", (unsigned long long)*(const uint64_t *)(const void *)base); break;
    case F_FLOAT: snprintf(buf, size, "%.9g", (double)*(const float *)(const void *)base); break;
    case F_STRING: snprintf(buf, size, "%s", base); break;
    case F_ENUM: {
        int v = *(const int *)(const void *)base, count = 0;
        while (f->names[count]) count++;
        snprintf(buf, size, "%s", v >= 0 && v < count ? f->names[v] : "?");
        break;
    }
    case F_NM: {
        const int *n = (const int *)(const void *)base;
        snprintf(buf, size, "%d:%d", n[0], n[1]); /* sdgp_prune_cfg: n then m */
        break;
    }
    case F_PRUNE_FN: snprintf(buf, size, "%s", sdgp_prune_fn_name(*(const sdgp_prune_fn *)(const void *)base)); break;
    case F_ISA: snprintf(buf, size, "%s", sdgp_isa_name(*(const sdgp_isa *)(const void *)base)); break;
    }
    return f->name;
}
