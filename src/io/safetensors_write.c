/* Writing safetensors files, atomically.
 *
 * Header: {"__metadata__":{..., "sdgp_crc32":"xxxxxxxx"},"name":{"dtype":..,"shape":[..],
 * "data_offsets":[b,e]},...} listing tensors in the given order, padded with spaces to a multiple
 * of 8 bytes so the data section starts 8-aligned (as the reference writer does). The data are
 * laid out back to back, tensors of 8-byte elements first, then 4-byte, then 1-byte (each group in
 * the given order), so every tensor starts at a multiple of its element size and a reader can use
 * it in place. The file goes to PATH.tmp.<pid> first and is renamed over PATH only once it is complete
 * and on disk, so a crash leaves either the old file or the new one, never a mix. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "io/st_internal.h"

/* A growing string buffer; `failed` sticks once an allocation fails. */
typedef struct {
    char *p;
    size_t len, cap;
    int failed;
} strbuf;

static void sb_put(strbuf *b, const char *s, size_t n) {
    if (b->failed) return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->failed = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s) { sb_put(b, s, strlen(s)); }

static void sb_printf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...) {
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof tmp) sb_put(b, tmp, (size_t)n);
    else b->failed = 1; /* only used for numbers */
}

/* A JSON string literal: quotes, backslashes and control characters escaped; UTF-8 passed through
 * (the caller has validated it). */
static void sb_json_string(strbuf *b, const char *s) {
    sb_put(b, "\"", 1);
    for (const char *q = s; *q; q++) {
        unsigned char c = (unsigned char)*q;
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default:
            if (c < 0x20) sb_printf(b, "\\u%04x", c);
            else sb_put(b, (const char *)&c, 1);
        }
    }
    sb_put(b, "\"", 1);
}

/* Checks the arguments; fills sizes[i] with tensor i's byte count. */
static sdgp_status check_inputs(const char *path, const sdgp_st_tensor *t, int count, const sdgp_st_meta *meta,
                                int meta_count, uint64_t *sizes, sdgp_error *err) {
    for (int i = 0; i < count; i++) {
        const char *name = t[i].name;
        if (!name || !st_utf8_valid(name) || !strcmp(name, ST_METADATA_KEY))
            return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: tensor %d has a bad name (%s)", path, i,
                             name ? name : "NULL");
        if (!st_dtype_valid((int)t[i].dtype) || t[i].ndim < 0 || t[i].ndim > 4)
            return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: tensor '%s': bad dtype %d or ndim %d", path,
                             name, (int)t[i].dtype, t[i].ndim);
        if (!st_nbytes(t[i].shape, t[i].ndim, st_dtypes[t[i].dtype].size, &sizes[i]))
            return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: tensor '%s': negative or overflowing shape",
                             path, name);
        if (sizes[i] && !t[i].data)
            return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: tensor '%s': data is NULL", path, name);
        for (int j = 0; j < i; j++)
            if (!strcmp(t[j].name, name))
                return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: duplicate tensor name '%s'", path, name);
    }
    for (int i = 0; i < meta_count; i++) {
        const char *k = meta[i].key, *v = meta[i].value;
        if (!k || !v || !st_utf8_valid(k) || !st_utf8_valid(v) || !strcmp(k, ST_CRC_KEY))
            return sdgp_fail(err, SDGP_ERR_INVALID,
                             "safetensors write %s: metadata entry %d: NULL, not UTF-8, or the reserved key %s", path, i,
                             ST_CRC_KEY);
        for (int j = 0; j < i; j++)
            if (!strcmp(meta[j].key, k))
                return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: duplicate metadata key '%s'", path, k);
    }
    return SDGP_OK;
}

/* The data layout (see the top): order[k] is the k-th tensor in the file, offs[i] where tensor i
 * begins in the data section. Returns the CRC-32 of the data section. */
static uint32_t plan_layout(int *order, uint64_t *offs, const sdgp_st_tensor *t, int count, const uint64_t *sizes) {
    uint32_t crc = (uint32_t)crc32(0L, Z_NULL, 0);
    uint64_t off = 0;
    int k = 0;
    for (size_t es = 8; es >= 1; es /= 2)
        for (int i = 0; i < count; i++)
            if (st_dtypes[t[i].dtype].size == es) {
                order[k++] = i;
                offs[i] = off;
                off += sizes[i];
                crc = st_crc32(crc, t[i].data, sizes[i]);
            }
    return crc;
}

static void build_header(strbuf *h, const sdgp_st_tensor *t, int count, const uint64_t *sizes, const uint64_t *offs,
                         const sdgp_st_meta *meta, int meta_count, uint32_t crc) {
    sb_puts(h, "{\"" ST_METADATA_KEY "\":{");
    for (int i = 0; i < meta_count; i++) {
        sb_json_string(h, meta[i].key);
        sb_puts(h, ":");
        sb_json_string(h, meta[i].value);
        sb_puts(h, ",");
    }
    sb_printf(h, "\"" ST_CRC_KEY "\":\"%08x\"}", crc);
    for (int i = 0; i < count; i++) {
        sb_puts(h, ",");
        sb_json_string(h, t[i].name);
        sb_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtypes[t[i].dtype].name);
        for (int d = 0; d < t[i].ndim; d++) sb_printf(h, d ? ",%lld" : "%lld", (long long)t[i].shape[d]);
        sb_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)offs[i], (unsigned long long)(offs[i] + sizes[i]));
    }
    sb_puts(h, "}");
    while (h->len % 8) sb_puts(h, " ");
}

static int write_all(FILE *f, const void *p, uint64_t n) {
    const uint8_t *q = p;
    while (n > 0) {
        size_t chunk = n > (1u << 30) ? (1u << 30) : (size_t)n;
        if (fwrite(q, 1, chunk, f) != chunk) return 0;
        q += chunk;
        n -= chunk;
    }
    return 1;
}

/* fsync of the directory holding path, so the rename itself is durable. */
static int sync_dir(const char *path) {
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == path) snprintf(dir, sizeof dir, "/");
    else if ((size_t)(slash - path) < sizeof dir) snprintf(dir, sizeof dir, "%.*s", (int)(slash - path), path);
    else return 0;
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    errno = e;
    /* Some filesystems cannot fsync a directory (EINVAL): the rename is as durable as they allow. */
    return rc == 0 || e == EINVAL ? 0 : -1;
}

/* Writes the whole file to tmp and renames it over path. Returns NULL on success, else the step
 * that failed (errno set); tmp is removed on failure. */
static const char *write_and_rename(const char *tmp, const char *path, const strbuf *h, const sdgp_st_tensor *t,
                                    const int *order, const uint64_t *sizes, int count) {
    FILE *f = fopen(tmp, "wb");
    if (!f) return "create";
    const char *failed = NULL;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)h->len >> (8 * i));
    int ok = write_all(f, len8, 8) && write_all(f, h->p, h->len);
    for (int k = 0; ok && k < count; k++) ok = write_all(f, t[order[k]].data, sizes[order[k]]);
    if (!ok || fflush(f) != 0) failed = "write";
    else if (fsync(fileno(f)) != 0) failed = "fsync";
    int e = errno;
    if (fclose(f) != 0 && !failed) failed = "close", e = errno;
    if (!failed && rename(tmp, path) != 0) failed = "rename", e = errno;
    if (failed) remove(tmp);
    errno = e;
    return failed;
}

sdgp_status sdgp_safetensors_write(const char *path, const sdgp_st_tensor *tensors, int count,
                                   const sdgp_st_meta *meta, int meta_count, sdgp_error *err) {
    if (!path || count < 0 || meta_count < 0 || (count && !tensors) || (meta_count && !meta))
        return sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write: bad arguments (path %s, %d tensors, %d metadata)",
                         path ? path : "NULL", count, meta_count);
    uint64_t *sizes = calloc(2 * (size_t)count + 1, sizeof *sizes); /* sizes[count], then offsets[count] */
    int *order = calloc((size_t)count + 1, sizeof *order);
    sdgp_status st = sizes && order ? check_inputs(path, tensors, count, meta, meta_count, sizes, err)
                                    : sdgp_fail(err, SDGP_ERR_NOMEM, "safetensors write %s: out of memory", path);
    strbuf h = {NULL, 0, 0, 0};
    if (st == SDGP_OK) {
        uint64_t *offs = sizes + count;
        uint32_t crc = plan_layout(order, offs, tensors, count, sizes);
        build_header(&h, tensors, count, sizes, offs, meta, meta_count, crc);
        if (h.failed) st = sdgp_fail(err, SDGP_ERR_NOMEM, "safetensors write %s: out of memory for the header", path);
        else if (h.len > ST_MAX_HEADER)
            st = sdgp_fail(err, SDGP_ERR_INVALID, "safetensors write %s: header of %zu bytes exceeds the format's 100 MB",
                           path, h.len);
    }
    char *tmp = NULL;
    if (st == SDGP_OK) {
        size_t n = strlen(path) + 32;
        tmp = malloc(n);
        if (!tmp) st = sdgp_fail(err, SDGP_ERR_NOMEM, "safetensors write %s: out of memory", path);
        else snprintf(tmp, n, "%s.tmp.%ld", path, (long)getpid());
    }
    if (st == SDGP_OK) {
        const char *failed = write_and_rename(tmp, path, &h, tensors, order, sizes, count);
        if (failed)
            st = sdgp_fail(err, SDGP_ERR_IO, "cannot write %s (%s of %s failed: %s); the old file, if any, is unchanged",
                           path, failed, tmp, strerror(errno));
        else if (sync_dir(path) != 0)
            st = sdgp_fail(err, SDGP_ERR_IO, "wrote %s but could not fsync its directory: %s", path, strerror(errno));
    }
    free(tmp);
    free(h.p);
    free(order);
    free(sizes);
    return st;
}
