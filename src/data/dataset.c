/* Datasets by name and directory layout; freeing; per-channel statistics. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "data/data_internal.h"

static int is_file(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* dir/base, or dir/base.gz when only that exists. Fails naming both candidates. */
static sdgp_status find_idx_file(char *out, size_t cap, const char *dir, const char *base, sdgp_error *err) {
    int n = snprintf(out, cap, "%s/%s", dir, base);
    if (n < 0 || (size_t)n + 3 >= cap) return sdgp_fail(err, SDGP_ERR_INVALID, "dataset directory path too long: %s", dir);
    if (is_file(out)) return SDGP_OK;
    strcat(out, ".gz");
    if (is_file(out)) return SDGP_OK;
    return sdgp_fail(err, SDGP_ERR_IO, "dataset file missing: neither %s/%s nor %s exists (%s)", dir, base, out,
                     strerror(ENOENT));
}

static sdgp_status load_idx_dir(sdgp_dataset *ds, const char *dir, int train, sdgp_error *err) {
    const char *split = train ? "train" : "t10k";
    char img[4096], lab[4096], base[64];
    snprintf(base, sizeof base, "%s-images-idx3-ubyte", split);
    sdgp_status st = find_idx_file(img, sizeof img, dir, base, err);
    if (st != SDGP_OK) return st;
    snprintf(base, sizeof base, "%s-labels-idx1-ubyte", split);
    st = find_idx_file(lab, sizeof lab, dir, base, err);
    if (st != SDGP_OK) return st;
    return sdgp_idx_load(ds, img, lab, err);
}

static sdgp_status load_cifar_dir(sdgp_dataset *ds, const char *dir, int train, sdgp_error *err) {
    /* The official archive unpacks to cifar-10-batches-bin/; accept the files directly in dir too. */
    char root[4096], first[4200];
    snprintf(root, sizeof root, "%s", dir);
    snprintf(first, sizeof first, "%s/%s", root, train ? "data_batch_1.bin" : "test_batch.bin");
    if (!is_file(first)) {
        int n = snprintf(root, sizeof root, "%s/cifar-10-batches-bin", dir);
        if (n < 0 || (size_t)n >= sizeof root) return sdgp_fail(err, SDGP_ERR_INVALID, "dataset directory path too long: %s", dir);
        char alt[4200];
        snprintf(alt, sizeof alt, "%s/%s", root, train ? "data_batch_1.bin" : "test_batch.bin");
        if (!is_file(alt))
            return sdgp_fail(err, SDGP_ERR_IO, "dataset file missing: neither %s nor %s exists (%s)", first, alt,
                             strerror(ENOENT));
    }
    char paths[5][4200];
    const char *ptrs[5];
    int count = train ? 5 : 1;
    for (int i = 0; i < count; i++) {
        if (train) snprintf(paths[i], sizeof paths[i], "%s/data_batch_%d.bin", root, i + 1);
        else snprintf(paths[i], sizeof paths[i], "%s/test_batch.bin", root);
        ptrs[i] = paths[i];
    }
    return sdgp_cifar10_load(ds, ptrs, count, err); /* a missing data_batch_k is named by the reader */
}

sdgp_status sdgp_dataset_load(sdgp_dataset *ds, const char *name, const char *dir, int train, sdgp_error *err) {
    if (!ds) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_dataset_load: ds is NULL");
    memset(ds, 0, sizeof *ds);
    if (!name || !dir) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_dataset_load: name or dir is NULL");
    if (strlen(dir) > 3900) return sdgp_fail(err, SDGP_ERR_INVALID, "dataset directory path too long: %.64s...", dir);
    if (!strcmp(name, "fashion-mnist") || !strcmp(name, "mnist")) return load_idx_dir(ds, dir, train, err);
    if (!strcmp(name, "cifar10")) return load_cifar_dir(ds, dir, train, err);
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown dataset '%s' (expected fashion-mnist, mnist or cifar10)", name);
}

void sdgp_dataset_free(sdgp_dataset *ds) {
    if (!ds) return;
    free(ds->images);
    free(ds->labels);
    memset(ds, 0, sizeof *ds);
}

void sdgp_dataset_stats(const sdgp_dataset *ds, float *mean, float *std) {
    /* Exact integer sums via a histogram per channel: no rounding drift over 47 M pixels. */
    const int c = ds->c, nc = c < 4 ? c : 4; /* sdgp_augment holds 4 channels */
    uint64_t hist[4][256];
    memset(hist, 0, sizeof hist);
    const size_t pixels = (size_t)ds->count * (size_t)ds->h * (size_t)ds->w;
    for (size_t p = 0; p < pixels; p++)
        for (int k = 0; k < nc; k++) hist[k][ds->images[p * c + k]]++;
    for (int k = 0; k < nc; k++) {
        uint64_t s1 = 0, s2 = 0;
        for (int v = 0; v < 256; v++) {
            s1 += hist[k][v] * (uint64_t)v;
            s2 += hist[k][v] * (uint64_t)(v * v);
        }
        if (pixels == 0) {
            mean[k] = 0.0f;
            std[k] = 1.0f;
            continue;
        }
        /* N^2 var = N s2 - s1^2, exact in 128-bit integers (so a constant channel gives exactly 0). */
        unsigned __int128 num = (unsigned __int128)pixels * s2 - (unsigned __int128)s1 * s1;
        double m = (double)s1 / (double)pixels / 255.0;
        double var = (double)num / ((double)pixels * (double)pixels) / (255.0 * 255.0);
        mean[k] = (float)m;
        /* A constant channel would divide by zero when normalising: report std 1 instead. */
        std[k] = var > 0 ? (float)sqrt(var) : 1.0f;
    }
}
