/* Internal pieces shared by the dataset readers, the batch builder and the loader. */
#ifndef SDGP_DATA_INTERNAL_H
#define SDGP_DATA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "core/philox.h"
#include "sdgp/data.h"

/* Largest decompressed file a reader accepts (one IDX or CIFAR file). Fashion-MNIST's largest
 * is 47 MB, a CIFAR-10 batch 31 MB; anything near this cap is a corrupt header, not a dataset.
 * (INT32_MAX also keeps every image dimension within an int.) */
#define SDGP_DATA_MAX_FILE_BYTES ((uint64_t)INT32_MAX)

/* ---- file reading (file.c): raw or gzip, told apart by the 1f 8b magic ---- */
typedef struct {
    const char *path;
    int fd;
    void *gz;          /* gzFile; reads raw files transparently too */
    int gzipped;
    int64_t raw_size;  /* st_size of a raw file; -1 for gzip (size unknown until read) */
} data_file;

sdgp_status data_file_open(data_file *f, const char *path, sdgp_error *err);
/* Reads up to n bytes into dst; *got < n only at end of file. */
sdgp_status data_file_read(data_file *f, void *dst, size_t n, size_t *got, sdgp_error *err);
/* Reads up to `want` bytes into a buffer grown in chunks as data arrives (so a lying header or a
 * gzip bomb costs at most ~2x the bytes really present); *out is malloc'd, *got <= want. */
sdgp_status data_file_read_grow(data_file *f, uint8_t **out, size_t want, size_t *got, sdgp_error *err);
void data_file_close(data_file *f);

/* ---- IDX (idx.c) ---- */
typedef struct {
    uint32_t dims[3];   /* n [, rows, cols] */
    int ndim;           /* 1 for labels, 3 for images */
    size_t header_bytes;
    size_t payload_bytes; /* product of dims, checked against overflow and the cap */
} idx_header;

/* Parses and checks an IDX header from its first bytes (len may be short: reported as truncated).
 * expect_ndim: 1 (labels, magic 0x801) or 3 (images, magic 0x803). `name` is used in messages. */
sdgp_status idx_parse_header(idx_header *h, const uint8_t *bytes, size_t len, int expect_ndim,
                             const char *name, sdgp_error *err);
/* Checks images/labels headers agree and labels are < 10, then fills *ds (takes ownership of
 * images/labels on success; frees nothing on failure). */
sdgp_status idx_assemble(sdgp_dataset *ds, const idx_header *ih, uint8_t *images, const char *images_name,
                         const idx_header *lh, uint8_t *labels, const char *labels_name, sdgp_error *err);

/* ---- random numbers (augment.c) ---- */
/* A stream of 32-bit words for one (key, group): blocks of four Philox words. Pure function of
 * (key, group), so each image slot / permutation position gets its own independent stream. */
typedef struct {
    sdgp_philox_key key;
    uint64_t group;
    uint32_t block;
    int pos;
    sdgp_philox_ctr buf;
} rng_stream;

void rng_init(rng_stream *r, sdgp_philox_key key, uint64_t group);
uint32_t rng_u32(rng_stream *r);
/* Unbiased uniform integer in [0, range), range >= 1 (Lemire's multiply-shift with rejection). */
uint64_t rng_below(rng_stream *r, uint64_t range);

/* Builds images [i0, i1) of a batch on the calling thread (the loader's path; sdgp_batch_build
 * runs the same function over OpenMP threads). x, y and idx hold the batch's images from slot0 on
 * (a data-parallel process holds only its share); image i's random draws are keyed by i, its
 * position in the whole batch, so they do not depend on how the batch is split. */
void batch_build_range(float *x, int32_t *y, const sdgp_dataset *ds, const int64_t *idx, int slot0, int i0, int i1,
                       const sdgp_augment *aug, uint64_t seed, uint64_t step, int mirror);

#endif
