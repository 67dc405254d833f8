/* CIFAR-10 binary batches: records of 1 label byte + 3072 pixel bytes in CHW order
 * (1024 red, 1024 green, 1024 blue, each 32 rows of 32), turned into HWC images. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

enum { CIFAR_HW = 32 * 32, CIFAR_PIXELS = 3 * CIFAR_HW, SDGP_CIFAR_RECORD = 1 + CIFAR_PIXELS };

/* Converts `count` records (already size-checked) to HWC images and labels. */
static sdgp_status cifar_convert(uint8_t *images, uint8_t *labels, const uint8_t *records, size_t count,
                          const char *name, sdgp_error *err) {
    for (size_t r = 0; r < count; r++) {
        const uint8_t *rec = records + r * SDGP_CIFAR_RECORD;
        if (rec[0] >= 10)
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: label %u of record %zu is out of range (must be < 10)", name,
                             rec[0], r);
        labels[r] = rec[0];
        const uint8_t *chw = rec + 1;
        uint8_t *hwc = images + r * CIFAR_PIXELS;
        for (int p = 0; p < CIFAR_HW; p++)
            for (int c = 0; c < 3; c++) hwc[p * 3 + c] = chw[c * CIFAR_HW + p];
    }
    return SDGP_OK;
}

static sdgp_status cifar_check_size(uint64_t size, const char *name, sdgp_error *err) {
    if (size == 0 || size % SDGP_CIFAR_RECORD != 0)
        return sdgp_fail(err, SDGP_ERR_FORMAT,
                         "%s: %llu bytes is not a positive multiple of the CIFAR-10 record size %d "
                         "(truncated, or not a CIFAR-10 binary batch)",
                         name, (unsigned long long)size, SDGP_CIFAR_RECORD);
    if (size > SDGP_DATA_MAX_FILE_BYTES)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %llu bytes is too large for a CIFAR-10 batch", name,
                         (unsigned long long)size);
    return SDGP_OK;
}

/* Grows ds by `count` records converted from `records`. On failure ds keeps its old contents. */
static sdgp_status cifar_append(sdgp_dataset *ds, const uint8_t *records, size_t count, const char *name,
                                sdgp_error *err) {
    size_t old = (size_t)ds->count, total = old + count;
    uint8_t *img = realloc(ds->images, total * CIFAR_PIXELS);
    if (!img) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu images)", name, total);
    ds->images = img;
    uint8_t *lab = realloc(ds->labels, total);
    if (!lab) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu labels)", name, total);
    ds->labels = lab;
    sdgp_status st = cifar_convert(img + old * CIFAR_PIXELS, lab + old, records, count, name, err);
    if (st != SDGP_OK) return st;
    ds->count = (int64_t)total;
    ds->h = ds->w = 32;
    ds->c = 3;
    ds->num_classes = 10;
    return SDGP_OK;
}

sdgp_status sdgp_cifar10_parse(sdgp_dataset *ds, const void *bytes, size_t size, sdgp_error *err) {
    if (!ds) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_cifar10_parse: ds is NULL");
    memset(ds, 0, sizeof *ds);
    if (!bytes && size) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_cifar10_parse: bytes are NULL");
    sdgp_status st = cifar_check_size(size, "cifar10 batch", err);
    if (st == SDGP_OK) st = cifar_append(ds, bytes, size / SDGP_CIFAR_RECORD, "cifar10 batch", err);
    if (st != SDGP_OK) sdgp_dataset_free(ds);
    return st;
}

static sdgp_status cifar_read_file(uint8_t **out, size_t *size, const char *path, sdgp_error *err) {
    *out = NULL;
    data_file f;
    sdgp_status st = data_file_open(&f, path, err);
    if (st != SDGP_OK) return st;
    /* Raw: the size is known, check it before reading. Gzip: read up to one byte past the cap. */
    if (f.raw_size >= 0) st = cifar_check_size((uint64_t)f.raw_size, path, err);
    size_t want = f.raw_size >= 0 ? (size_t)f.raw_size : (size_t)SDGP_DATA_MAX_FILE_BYTES + 1;
    uint8_t *buf = NULL;
    size_t got = 0;
    if (st == SDGP_OK) st = data_file_read_grow(&f, &buf, want, &got, err);
    if (st == SDGP_OK) st = cifar_check_size(got, path, err);
    data_file_close(&f);
    if (st != SDGP_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    *size = got;
    return SDGP_OK;
}

sdgp_status sdgp_cifar10_load(sdgp_dataset *ds, const char *const *paths, int count, sdgp_error *err) {
    if (!ds) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_cifar10_load: ds is NULL");
    memset(ds, 0, sizeof *ds);
    if (count <= 0 || !paths) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_cifar10_load: no files given (count=%d)", count);
    for (int i = 0; i < count; i++) {
        uint8_t *raw = NULL;
        size_t size = 0;
        sdgp_status st = cifar_read_file(&raw, &size, paths[i], err);
        if (st == SDGP_OK) st = cifar_append(ds, raw, size / SDGP_CIFAR_RECORD, paths[i], err);
        free(raw);
        if (st != SDGP_OK) {
            sdgp_dataset_free(ds);
            return st;
        }
    }
    return SDGP_OK;
}
