/* Shared by the fuzz targets: turning fuzz bytes into files the readers open by path. */
#ifndef SDGP_FUZZ_COMMON_H
#define SDGP_FUZZ_COMMON_H

#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include "sdgp/data.h"

/* An in-memory file (memfd) holding bytes, gzip-compressed when gz != 0; its path is written to
 * path (/proc/self/fd/N). Returns the fd (close it after use) or -1. */
static inline int fuzz_memfile(const uint8_t *bytes, size_t n, int gz, char *path, size_t cap) {
    int fd = memfd_create("sdgp_fuzz", 0);
    if (fd < 0) return -1;
    int ok;
    if (gz) {
        gzFile g = gzdopen(dup(fd), "wb1");
        ok = g && (n == 0 || gzwrite(g, bytes, (unsigned)n) == (int)n);
        if (g && gzclose(g) != Z_OK) ok = 0;
    } else {
        ok = n == 0 || write(fd, bytes, n) == (ssize_t)n;
    }
    if (!ok) {
        close(fd);
        return -1;
    }
    snprintf(path, cap, "/proc/self/fd/%d", fd);
    return fd;
}

static inline uint32_t fuzz_le32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A failed invariant: crash loudly so libFuzzer records the input. */
#define FUZZ_ASSERT(cond)                                                              \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
            abort();                                                                   \
        }                                                                              \
    } while (0)

/* Invariants of a dataset a reader accepted, then the batch builder on it: labels in range, the
 * pixel buffer as large as the shape says (ASan checks every read), outputs finite. */
static inline void fuzz_check_dataset(const sdgp_dataset *ds, const uint8_t *knobs, size_t nknobs) {
    FUZZ_ASSERT(ds->count > 0 && ds->h > 0 && ds->w > 0 && ds->c > 0 && ds->c <= 4 && ds->num_classes == 10);
    FUZZ_ASSERT(ds->images && ds->labels);
    for (int64_t i = 0; i < ds->count; i++) FUZZ_ASSERT(ds->labels[i] < 10);
    float mean[4], std[4];
    sdgp_dataset_stats(ds, mean, std);
    for (int k = 0; k < ds->c; k++) FUZZ_ASSERT(mean[k] >= 0 && mean[k] <= 1 && std[k] > 0 && std[k] <= 1);
    size_t image = (size_t)ds->h * ds->w * ds->c;
    if (image > 4096) return; /* keep executions fast */
    int B = ds->count < 4 ? (int)ds->count : 4;
    int64_t idx[4];
    for (int i = 0; i < B; i++) idx[i] = (int64_t)((i * 7 + (nknobs ? knobs[0] : 0)) % ds->count);
    sdgp_augment a = {{mean[0], mean[1], mean[2], mean[3]}, {std[0], std[1], std[2], std[3]}, 0, 0, 0};
    if (nknobs > 1) a.flip = knobs[1] & 1, a.translate = (knobs[1] >> 1) & 7, a.cutout = knobs[1] >> 4;
    float *x = malloc(sizeof(float) * image * (size_t)B);
    int32_t y[4];
    FUZZ_ASSERT(x);
    sdgp_batch_build(x, y, ds, idx, B, &a, nknobs > 2 ? knobs[2] : 0, 1, nknobs > 3 ? knobs[3] & 1 : 0);
    for (size_t i = 0; i < image * (size_t)B; i++) FUZZ_ASSERT(x[i] == x[i] && x[i] > -1e6f && x[i] < 1e6f);
    for (int i = 0; i < B; i++) FUZZ_ASSERT(y[i] == ds->labels[idx[i]]);
    free(x);
}

#endif
