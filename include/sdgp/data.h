/* sdgp: datasets (IDX for MNIST/Fashion-MNIST, CIFAR-10 binary), augmentation, batching.
 *
 * Images are kept as uint8 HWC in memory (60000 Fashion-MNIST images: 47 MB) and turned into
 * normalised, augmented fp32 NHWC batches on demand. Every size in a file header is checked
 * against the file's real length and against overflow before anything is allocated. */
#ifndef SDGP_DATA_H
#define SDGP_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "sdgp/export.h"
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
 * missing (SDGP_ERR_IO), truncated, trailing bytes, bad magic, count mismatch, label out of range,
 * zero or absurd sizes (> 2^31 - 1 bytes per file) (SDGP_ERR_FORMAT). Nothing is allocated for a
 * size the file does not back up. On any error *ds is zeroed and nothing is leaked. */
SDGP_API sdgp_status sdgp_idx_load(sdgp_dataset *ds, const char *images_path, const char *labels_path, sdgp_error *err);

/* The same checks on files already in memory (tests, fuzzing; the file readers share the code).
 * images/labels are the decompressed IDX bytes; the bytes are copied. Errors name "images"/"labels". */
SDGP_API sdgp_status sdgp_idx_parse(sdgp_dataset *ds, const void *images, size_t images_size, const void *labels,
                                    size_t labels_size, sdgp_error *err);

/* Reads CIFAR-10 binary batch files (each record: 1 label byte + 3072 bytes CHW 32x32x3),
 * converting to HWC. paths: count files concatenated in order. */
SDGP_API sdgp_status sdgp_cifar10_load(sdgp_dataset *ds, const char *const *paths, int count, sdgp_error *err);
/* One CIFAR-10 batch file already in memory (size must be a positive multiple of 3073). */
SDGP_API sdgp_status sdgp_cifar10_parse(sdgp_dataset *ds, const void *bytes, size_t size, sdgp_error *err);

/* By name: "fashion-mnist" | "mnist" (dir has {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz])
 * or "cifar10" (dir has data_batch_{1..5}.bin / test_batch.bin, or a cifar-10-batches-bin/ subdir).
 * train: 1 for the training split, 0 for the test split. */
SDGP_API sdgp_status sdgp_dataset_load(sdgp_dataset *ds, const char *name, const char *dir, int train, sdgp_error *err);
SDGP_API void sdgp_dataset_free(sdgp_dataset *ds);

/* Per-channel mean and std (population) over all pixels of a dataset, in [0,1] units, for the
 * first min(c, 4) channels. A constant channel reports std 1 (not 0) so normalising stays finite. */
SDGP_API void sdgp_dataset_stats(const sdgp_dataset *ds, float *mean, float *std);

/* Augmentation, applied per image in this order:
 *  1. translate: pad `translate` pixels on each side and crop back at a uniformly random offset
 *     (torchvision RandomCrop(size, padding) geometry). The padding is 0 AFTER normalisation, i.e.
 *     the dataset mean, not black: padded pixels carry no signal, as with cutout.
 *  2. flip: horizontal mirror with p = 0.5.
 *  3. cutout: a `cutout` x `cutout` square centred at a uniformly random pixel (cy, cx), rows
 *     [cy - cutout/2, cy - cutout/2 + cutout), clipped at the borders, set to 0 after normalising.
 * Images must have at most 4 channels. */
typedef struct {
    float mean[4], std[4]; /* normalisation per channel: (x/255 - mean) / std */
    int flip;              /* random horizontal flip, p = 0.5 */
    int translate;         /* random translate by up to this many pixels (0 = none), see above */
    int cutout;            /* cutout square of this side (0 = none), clipped at the borders */
} sdgp_augment;

/* The permutation for one epoch (Fisher-Yates driven by Philox keyed on seed and epoch; each
 * swap index is drawn without modulo bias). */
SDGP_API void sdgp_epoch_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t epoch);

/* Builds one batch: x (B x h x w x c, fp32 NHWC) and y (B labels) from ds images idx[0..B).
 * aug == NULL: x/255 only (mean 0, std 1); aug with flip/translate/cutout off: normalisation only.
 * Random choices are keyed on (seed, step, i), so a batch does not depend on threads or on which
 * thread builds it. mirror != 0 flips every image after the random flip (for flip test-time
 * augmentation, use aug without flip). Runs over OpenMP threads. */
SDGP_API void sdgp_batch_build(float *x, int32_t *y, const sdgp_dataset *ds, const int64_t *idx, int B,
                               const sdgp_augment *aug, uint64_t seed, uint64_t step, int mirror);

/* A background loader: builds the next training batch on its own thread while the step runs. */
typedef struct sdgp_loader sdgp_loader;
/* seed and aug as above; batches are consecutive slices of each epoch's permutation
 * (the last incomplete batch of an epoch is dropped). Starts at global step start_step.
 * The batch of step s is sdgp_batch_build(perm(epoch = s / spe) + (s % spe) * B, step = s) with
 * spe = count / B, so a loader resumed at s yields what an uninterrupted one yields there.
 * ds must outlive the loader; aug is copied. The worker is one plain thread (no OpenMP). */
SDGP_API sdgp_status sdgp_loader_create(sdgp_loader **out, const sdgp_dataset *ds, int B, const sdgp_augment *aug,
                                        uint64_t seed, int64_t start_step, sdgp_error *err);
/* The same for rows [r0, r1) of each batch of B (0 <= r0 < r1 <= B): a data-parallel process's
 * share, bitwise those rows of the batches sdgp_loader_create yields (the data order and each image's
 * augmentation depend on its position in the whole batch, not on the split). x holds r1 - r0 images. */
SDGP_API sdgp_status sdgp_loader_create_part(sdgp_loader **out, const sdgp_dataset *ds, int B, int r0, int r1,
                                             const sdgp_augment *aug, uint64_t seed, int64_t start_step,
                                             sdgp_error *err);
/* Blocks until the batch for the next step is ready and returns pointers valid until the next
 * call (x: B x h x w x c, y: B; r1 - r0 images for a part). */
SDGP_API void sdgp_loader_next(sdgp_loader *l, const float **x, const int32_t **y);
SDGP_API int64_t sdgp_loader_steps_per_epoch(const sdgp_loader *l);
SDGP_API void sdgp_loader_destroy(sdgp_loader *l);

#ifdef __cplusplus
}
#endif
#endif
