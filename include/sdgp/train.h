/* sdgp: training runs (data, schedule, evaluation, logs, checkpoints) and evaluation.
 *
 * A run is a pure function of its configuration and thread count: the data order, augmentation
 * and pruning masks are keyed by (seed, step), so a run resumed from a checkpoint ends bitwise
 * equal to an uninterrupted one on the same number of threads. A data-parallel run (dist) is a
 * pure function of its configuration and number of processes; its checkpoints resume under any
 * number of processes. */
#ifndef SDGP_TRAIN_H
#define SDGP_TRAIN_H

#include <stdint.h>
#include <stdio.h>

#include "sdgp/data.h"
#include "sdgp/dist.h"
#include "sdgp/export.h"
#include "sdgp/model.h"
#include "sdgp/nn.h"
#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SDGP_ON_NAN_STOP = 0, SDGP_ON_NAN_SKIP = 1 } sdgp_on_nan;

typedef struct {
    sdgp_model_config model;      /* batch, kind, width, pruning; input shape comes from the data */
    char data[32];                /* fashion-mnist | mnist | cifar10 */
    char data_dir[1024];
    int epochs;
    int64_t max_steps;            /* stop after this many steps in total (0: no limit) */
    float lr, momentum, weight_decay, label_smoothing;
    int nesterov;
    sdgp_sched_kind schedule;
    float warmup_epochs;          /* reference and cosine schedules */
    float step_gamma;             /* step schedule: x gamma every step_epochs */
    float step_epochs;
    sdgp_augment augment;         /* mean/std are filled from the training set */
    int tta;                      /* evaluate with the mirror image too (average of logits) */
    char checkpoint[1024];        /* written at the end of each epoch (and every checkpoint_every steps) */
    int64_t checkpoint_every;
    char resume[1024];            /* continue this checkpoint's run */
    char log[1024];               /* JSON lines, one per epoch */
    int grad_stats_every;         /* 0 off; else every k steps: per-layer dL/dD error into the log */
    sdgp_on_nan on_nan;
    int progress;                 /* 1: a live progress line on stderr (a terminal); 0: plain lines */
    int quiet;                    /* no per-epoch lines on stderr */
    /* Data-parallel training (include/sdgp/dist.h); NULL or a size of 1: a single process. With K
     * processes, model.batch is the global batch: process r trains on rows [r B/K, (r+1) B/K) of
     * every batch (B must be a multiple of K; the data order and augmentation do not depend on K),
     * the loss is the mean over the global batch and the weight gradients are summed over
     * processes (in buckets, started during backward) before the same SGD update everywhere.
     * Process 0 alone writes the log and checkpoints and prints; evaluation splits the test set.
     * At start the processes compare their configurations, data and weights: a mismatch is an
     * error on every process. Not a setting: it is not saved in checkpoints. */
    const sdgp_dist *dist;
    int sync_bn;                  /* with dist: BatchNorm statistics of the global batch (default: per process) */
    int allreduce_at_end;         /* with dist: one blocking allreduce per bucket after backward instead of
                                     non-blocking ones started during it (same sums, bitwise for 2
                                     processes); cheaper where the transfer is the CPU's own copying (one
                                     machine: docs/scaling.md) */
} sdgp_train_config;

/* The reference recipe scaled to 15 epochs, ResNet-9 width 0.25, Fashion-MNIST from
 * /usr/share/datasets/fashion-mnist, batch 512, lr 0.5, momentum 0.9, wd 5e-4, smoothing 0.1,
 * flip + translate 2 + cutout 4, TTA on. */
SDGP_API sdgp_train_config sdgp_train_config_default(void);

typedef struct {
    int64_t steps;
    int epochs_done;
    double train_loss, test_loss, test_acc; /* of the last epoch */
    double elapsed_s, img_per_s;
    int skipped_steps;                      /* on_nan skip */
} sdgp_train_result;

/* Runs the training; messages (progress, per-epoch lines) go to `out` (stderr if NULL). */
SDGP_API sdgp_status sdgp_train(const sdgp_train_config *cfg, sdgp_train_result *res, FILE *out, sdgp_error *err);

/* Accuracy and mean loss (with the given smoothing) of model m on ds, in evaluation mode.
 * aug supplies the normalisation (augmentation flags are ignored); tta adds the mirror image. */
SDGP_API sdgp_status sdgp_evaluate(sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug, int tta,
                                   float smoothing, double *loss, double *acc, sdgp_error *err);
/* The same over the processes of d (include/sdgp/dist.h; NULL or a size of 1: sdgp_evaluate), a
 * collective call: each process evaluates a contiguous run of ds's batches (of the model's batch
 * size) and all get the totals, bitwise those of sdgp_evaluate at that batch size, for any number
 * of processes. First the processes compare what they evaluate with process 0's: the weights and
 * BatchNorm statistics, ds (fingerprints), the batch size, normalisation, tta and smoothing; a
 * difference is an error (SDGP_ERR_INVALID) on every process, naming it. */
SDGP_API sdgp_status sdgp_evaluate_dist(sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug, int tta,
                                        float smoothing, const sdgp_dist *d, double *loss, double *acc,
                                        sdgp_error *err);

/* Checkpoints (safetensors): every parameter and BatchNorm statistic by name, the momentum
 * buffers as "momentum.<name>", and metadata: format, model configuration, the run's
 * configuration (JSON), epoch, step, normalisation, and the loss sums of the running epoch. */
typedef struct {
    int64_t step;
    int epoch;
    double loss_sum;      /* running epoch's training loss sum and count, for exact resume */
    int64_t loss_count;
    float mean[4], std[4];
} sdgp_checkpoint_state;

SDGP_API sdgp_status sdgp_checkpoint_save(const char *path, const sdgp_model *m, const sdgp_train_config *cfg,
                                          const sdgp_checkpoint_state *state, sdgp_error *err);
/* Loads into a model built with the same configuration (a checkpoint of another model is an
 * error naming the mismatch). */
SDGP_API sdgp_status sdgp_checkpoint_load(const char *path, sdgp_model *m, sdgp_checkpoint_state *state,
                                          sdgp_error *err);
/* Reads only the run configuration of a checkpoint (to rebuild the model for resume or eval). */
SDGP_API sdgp_status sdgp_checkpoint_read_config(const char *path, sdgp_train_config *cfg, sdgp_error *err);

/* The run configuration as named fields. One table serves the command-line flags
 * (`--lr 0.5` sets "lr"), checkpoint metadata ("cfg.lr"), sweep files and logs.
 * sdgp_train_config_set parses and range-checks one field; the message names the key and value. */
SDGP_API sdgp_status sdgp_train_config_set(sdgp_train_config *cfg, const char *key, const char *value, sdgp_error *err);
/* The number of fields, and field i's name, help text and current value (formatted into buf).
 * Returns NULL for i out of range. Values round-trip exactly through sdgp_train_config_set. */
SDGP_API int sdgp_train_config_field_count(void);
SDGP_API const char *sdgp_train_config_field(const sdgp_train_config *cfg, int i, const char **help, char *buf,
                                             size_t size);
/* Whether a field is a flag without value (booleans: "--tta" sets it to 1). */
SDGP_API int sdgp_train_config_field_is_bool(int i);

#ifdef __cplusplus
}
#endif
#endif
