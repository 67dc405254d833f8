/* IDX files (MNIST, Fashion-MNIST): a big-endian header, then u8 data.
 *
 *   images: magic 0x00000803, u32 n, u32 rows, u32 cols, then n*rows*cols pixels
 *   labels: magic 0x00000801, u32 n, then n labels
 *
 * The header is parsed and checked (magic, zero dims, overflow, size cap) before any payload is
 * allocated; the payload is then read in growing chunks up to the size the header claims, so a
 * lying header costs nothing. The in-memory parser (sdgp_idx_parse) and the file reader share
 * idx_parse_header and idx_assemble. */
#include <stdlib.h>
#include <string.h>

#include "data/data_internal.h"

static uint32_t load_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

sdgp_status idx_parse_header(idx_header *h, const uint8_t *bytes, size_t len, int expect_ndim,
                             const char *name, sdgp_error *err) {
    memset(h, 0, sizeof *h);
    const uint32_t expect_magic = 0x00000800u | (uint32_t)expect_ndim;
    const char *kind = expect_ndim == 3 ? "images" : "labels";
    if (len < 4)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated IDX file (%zu bytes, no room for the magic number)", name, len);
    uint32_t magic = load_be32(bytes);
    if (magic != expect_magic)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: bad magic 0x%08x (expected 0x%08x, IDX u8 %s with %d dims)",
                         name, magic, expect_magic, kind, expect_ndim);
    h->ndim = expect_ndim;
    h->header_bytes = 4 + 4 * (size_t)expect_ndim;
    if (len < h->header_bytes)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated IDX header (%zu of %zu bytes)", name, len, h->header_bytes);
    uint64_t total = 1;
    for (int d = 0; d < expect_ndim; d++) {
        h->dims[d] = load_be32(bytes + 4 + 4 * d);
        if (h->dims[d] == 0) return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: dimension %d of the IDX header is 0", name, d);
        /* Each dim < 2^32, and total stays <= 2^31 after each step, so this never wraps. */
        total *= h->dims[d];
        if (total > SDGP_DATA_MAX_FILE_BYTES)
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: IDX header claims an absurd size (dims %u x %u x %u > %llu bytes)",
                             name, h->dims[0], expect_ndim > 1 ? h->dims[1] : 1, expect_ndim > 2 ? h->dims[2] : 1,
                             (unsigned long long)SDGP_DATA_MAX_FILE_BYTES);
    }
    h->payload_bytes = (size_t)total;
    return SDGP_OK;
}

sdgp_status idx_assemble(sdgp_dataset *ds, const idx_header *ih, uint8_t *images, const char *images_name,
                         const idx_header *lh, uint8_t *labels, const char *labels_name, sdgp_error *err) {
    if (ih->dims[0] != lh->dims[0])
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s has %u images but %s has %u labels", images_name, ih->dims[0],
                         labels_name, lh->dims[0]);
    for (uint32_t i = 0; i < lh->dims[0]; i++)
        if (labels[i] >= 10)
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: label %u of item %u is out of range (must be < 10)", labels_name,
                             labels[i], i);
    ds->count = ih->dims[0];
    ds->h = (int)ih->dims[1];
    ds->w = (int)ih->dims[2];
    ds->c = 1;
    ds->num_classes = 10;
    ds->images = images;
    ds->labels = labels;
    return SDGP_OK;
}

/* Checks one in-memory IDX file and copies its payload. */
static sdgp_status idx_copy_payload(idx_header *h, uint8_t **out, const void *bytes, size_t size, int ndim,
                                    const char *name, sdgp_error *err) {
    *out = NULL;
    if (!bytes && size) return sdgp_fail(err, SDGP_ERR_INVALID, "%s: bytes are NULL", name);
    sdgp_status st = idx_parse_header(h, bytes, size, ndim, name, err);
    if (st != SDGP_OK) return st;
    size_t body = size - h->header_bytes;
    if (body < h->payload_bytes)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated (header claims %zu data bytes, %zu present)", name,
                         h->payload_bytes, body);
    if (body > h->payload_bytes)
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %zu bytes of trailing garbage after the data the header describes",
                         name, body - h->payload_bytes);
    *out = malloc(h->payload_bytes);
    if (!*out) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu bytes)", name, h->payload_bytes);
    memcpy(*out, (const uint8_t *)bytes + h->header_bytes, h->payload_bytes);
    return SDGP_OK;
}

sdgp_status sdgp_idx_parse(sdgp_dataset *ds, const void *images, size_t images_size, const void *labels,
                           size_t labels_size, sdgp_error *err) {
    if (!ds) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_idx_parse: ds is NULL");
    memset(ds, 0, sizeof *ds);
    idx_header ih, lh;
    uint8_t *img = NULL, *lab = NULL;
    sdgp_status st = idx_copy_payload(&ih, &img, images, images_size, 3, "images", err);
    if (st == SDGP_OK) st = idx_copy_payload(&lh, &lab, labels, labels_size, 1, "labels", err);
    if (st == SDGP_OK) st = idx_assemble(ds, &ih, img, "images", &lh, lab, "labels", err);
    if (st != SDGP_OK) {
        free(img);
        free(lab);
        memset(ds, 0, sizeof *ds);
    }
    return st;
}

/* Reads one IDX file: header first, then exactly the payload it claims (and nothing more). */
static sdgp_status idx_read_file(idx_header *h, uint8_t **out, const char *path, int ndim, sdgp_error *err) {
    *out = NULL;
    data_file f;
    sdgp_status st = data_file_open(&f, path, err);
    if (st != SDGP_OK) return st;
    uint8_t hdr[16];
    size_t want = 4 + 4 * (size_t)ndim, got = 0;
    st = data_file_read(&f, hdr, want, &got, err);
    if (st == SDGP_OK) st = idx_parse_header(h, hdr, got, ndim, path, err);
    /* A raw file's size is known: reject truncation before allocating the claimed size. */
    if (st == SDGP_OK && f.raw_size >= 0 && (uint64_t)f.raw_size - h->header_bytes != h->payload_bytes) {
        uint64_t body = (uint64_t)f.raw_size - h->header_bytes;
        st = body < h->payload_bytes
                 ? sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated (header claims %zu data bytes, %llu present)", path,
                             h->payload_bytes, (unsigned long long)body)
                 : sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %llu bytes of trailing garbage after the data the header describes",
                             path, (unsigned long long)(body - h->payload_bytes));
    }
    uint8_t *buf = NULL;
    if (st == SDGP_OK) st = data_file_read_grow(&f, &buf, h->payload_bytes, &got, err);
    if (st == SDGP_OK && got < h->payload_bytes)
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated (header claims %zu data bytes, %zu present)", path,
                       h->payload_bytes, got);
    if (st == SDGP_OK) {
        uint8_t extra;
        st = data_file_read(&f, &extra, 1, &got, err);
        if (st == SDGP_OK && got)
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: trailing garbage after the data the header describes", path);
    }
    data_file_close(&f);
    if (st != SDGP_OK) {
        free(buf);
        return st;
    }
    *out = buf;
    return SDGP_OK;
}

sdgp_status sdgp_idx_load(sdgp_dataset *ds, const char *images_path, const char *labels_path, sdgp_error *err) {
    if (!ds) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_idx_load: ds is NULL");
    memset(ds, 0, sizeof *ds);
    idx_header ih, lh;
    uint8_t *img = NULL, *lab = NULL;
    /* Labels first: small, and a wrong directory is found before reading 47 MB of images. */
    sdgp_status st = idx_read_file(&lh, &lab, labels_path, 1, err);
    if (st == SDGP_OK) st = idx_read_file(&ih, &img, images_path, 3, err);
    if (st == SDGP_OK) st = idx_assemble(ds, &ih, img, images_path, &lh, lab, labels_path, err);
    if (st != SDGP_OK) {
        free(img);
        free(lab);
        memset(ds, 0, sizeof *ds);
    }
    return st;
}
