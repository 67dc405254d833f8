/* The trainer's data-parallel part (dist.c): gradient buckets, the start-up agreement between
 * processes, and the small collectives of evaluation and checkpoints; and what checkpoints ask of
 * the configuration table (config.c). */
#ifndef SDGP_TRAIN_INTERNAL_H
#define SDGP_TRAIN_INTERNAL_H

#include "core/clock.h"
#include "sdgp/train.h"

/* Weight gradients summed over processes in buckets: runs of consecutive trainable parameters
 * (contiguous in the gradient arena), taken from the last parameter backwards, as backward
 * finishes them. A bucket's non-blocking allreduce starts as soon as the model's gradient hook has
 * reported all its parameters, buckets start in a fixed order (the same on every process), and
 * each hook call lets the ones in flight progress. */
typedef struct grad_sync grad_sync;

/* Field i's value in checkpoints written before the setting existed (what those runs ran), or NULL
 * when every checkpoint has it (config.c). */
const char *train_config_field_before(int i);

/* The choice a checkpoint records (sdgp_model_choice's text; "" when it has none) into
 * SDGP_CHOICE_LEN bytes, for building a resumed model without measuring (checkpoint.c). */
sdgp_status checkpoint_read_choice(const char *path, char *choice, sdgp_error *err);

typedef struct {
    int buckets;
    size_t floats;          /* per step, over all buckets */
    double blocking_ms;     /* one blocking allreduce of all gradients, measured at start (median of 3) */
    int64_t steps;          /* since the last grad_sync_take_stats */
    double exposed_s;       /* time the training thread spent in communication calls (starts, tests, the final waits) */
    double wait_s;          /* of which in the final waits before the update */
    double inflight_s;      /* summed over buckets: from start until seen complete */
} grad_sync_stats;

/* at_end: the sums after backward (--allreduce end), else started from the gradient hook. */
sdgp_status grad_sync_create(grad_sync **out, sdgp_model *m, const sdgp_dist *d, int at_end, sdgp_error *err);
void grad_sync_destroy(grad_sync *g);
/* Before a backward: no bucket started. */
void grad_sync_begin(grad_sync *g);
/* After it: starts what is left, waits for every bucket (their sums are then in the gradients). */
sdgp_status grad_sync_end(grad_sync *g, sdgp_error *err);
/* The counters since the last call (then zeroed; blocking_ms and sizes stay). */
grad_sync_stats grad_sync_take_stats(grad_sync *g);

/* Start-up agreement: every process's configuration (all settings but threads and data-dir),
 * training data (a fingerprint of its bytes), start step and weights against process 0's. A
 * difference is an error on every process; the ones that differ name the first setting. */
sdgp_status dist_check_config(const sdgp_dist *d, const sdgp_train_config *cfg, const sdgp_dataset *train,
                              const sdgp_model *m, int64_t start_step, sdgp_error *err);
/* Evaluation's agreement: the weights and BatchNorm statistics (a fingerprint), the data (a
 * fingerprint), the batch size, tta, smoothing and normalisation against process 0's. A
 * difference is an error on every process; the ones that differ name the first input. */
sdgp_status dist_check_eval(const sdgp_dist *d, const sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug,
                            int tta, float smoothing, sdgp_error *err);
/* Process 0's choice (timed at start, so it may differ) for every process. */
sdgp_status dist_share_kernels(const sdgp_dist *d, sdgp_model *m, sdgp_error *err);
/* Process 0's BatchNorm running statistics (per-process BatchNorm lets them differ) for every process. */
sdgp_status dist_share_bn_stats(const sdgp_dist *d, sdgp_model *m, sdgp_error *err);
/* An error when the weights or momentum buffers differ from process 0's (they must stay bitwise equal). */
sdgp_status dist_check_weights(const sdgp_dist *d, const sdgp_model *m, int64_t step, sdgp_error *err);

#endif
