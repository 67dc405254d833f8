/* sdgp: datasets (IDX for MNIST/Fashion-MNIST, CIFAR-10 binary), augmentation, batching.
 *
 * Images are kept as uint8 HWC in memory (60000 Fashion-MNIST images: 47 MB) and turned into
 * normalised, augmented fp32 NHWC batches on demand. Every size in a file header is checked
 * against the file's real length and against overflow before anything is allocated. */
#ifndef SDGP_DATA_H
#define SDGP_DATA_H

#include <stdint.h>

#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int64_t count;      /* number of images */
    int h, w, c;        /* image shape (HWC) */
    int num_classes;    /* 10 for all supported sets */
    uint8_t *images;    /* count x h x w x c */
    uint8_t *labels;    /* count, each < num_classes */
} sdgp_dataset;

/* Reads an IDX image file (magic 0x00000803, u8) and an IDX label file (0x00000801), raw or
 * gzip-compressed (detected by content, not by name). Errors name the file and what is wrong:
 * missing, truncated, bad magic, count mismatch, label out of range, absurd sizes. */
sdgp_status sdgp_idx_load(sdgp_dataset *ds, const char *images_path, const char *labels_path, sdgp_error *err);

/* Reads CIFAR-10 binary batch files (each record: 1 label byte + 3072 bytes CHW 32x32x3),
 * converting to HWC. paths: count files concatenated in order. */
sdgp_status sdgp_cifar10_load(sdgp_dataset *ds, const char *const *paths, int count, sdgp_error *err);

/* By name: "fashion-mnist" | "mnist" (dir has {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])
 * or "cifar10" (dir has data_batch_{1..5}.bin / test_batch.bin, or a cifar-10-batches-bin/ subdir).
 * train: 1 for the training split, 0 for the test split. */
sdgp_status sdgp_dataset_load(sdgp_dataset *ds, const char *name, const char *dir, int train, sdgp_error *err);
void sdgp_dataset_free(sdgp_dataset *ds);

/* Per-channel mean and std over all pixels of a dataset, in [0,1] units. */
void sdgp_dataset_stats(const sdgp_dataset *ds, float *mean, float *std);

typedef struct {
    float mean[4], std[4]; /* normalisation per channel: (x/255 - mean) / std */
    int flip;              /* random horizontal flip, p = 0.5 */
    int translate;         /* random translate: pad by this many zero pixels (after normalising: 0), crop back */
    int cutout;            /* cutout square of this side (0 = none), clipped at the borders */
} sdgp_augment;

/* The permutation for one epoch (Fisher-Yates driven by Philox keyed on seed and epoch). */
void sdgp_epoch_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t epoch);

/* Builds one batch: x (B x h x w x c, fp32 NHWC) and y (B labels) from ds images idx[0..B).
 * aug == NULL or all-off: normalisation only. Random choices are keyed on (seed, step, i), so a
 * batch does not depend on threads or on which thread builds it. mirror != 0 flips every image
 * (for flip test-time augmentation). */
void sdgp_batch_build(float *x, int32_t *y, const sdgp_dataset *ds, const int64_t *idx, int B,
                      const sdgp_augment *aug, uint64_t seed, uint64_t step, int mirror);

/* A background loader: builds the next training batch on its own thread while the step runs. */
typedef struct sdgp_loader sdgp_loader;
/* perm_seed and aug as above; batches are consecutive slices of each epoch's permutation
 * (the last incomplete batch of an epoch is dropped). Starts at global step start_step. */
sdgp_status sdgp_loader_create(sdgp_loader **out, const sdgp_dataset *ds, int B, const sdgp_augment *aug,
                               uint64_t seed, int64_t start_step, sdgp_error *err);
/* Blocks until the batch for the next step is ready and returns pointers valid until the next
 * call (x: B x h x w x c, y: B). */
void sdgp_loader_next(sdgp_loader *l, const float **x, const int32_t **y);
int64_t sdgp_loader_steps_per_epoch(const sdgp_loader *l);
void sdgp_loader_destroy(sdgp_loader *l);

#ifdef __cplusplus
}
#endif
#endif
