/* Reading safetensors files: a strict parser for the header JSON and the checks that make a file
 * trustworthy before any tensor is handed out.
 *
 * The JSON accepted is exactly what the format needs: one object whose members are
 * "__metadata__" (an object of string values) or tensors (objects with "dtype", "shape",
 * "data_offsets", each once), strings with all JSON escapes (\uXXXX incl. surrogate pairs) in
 * valid UTF-8, non-negative integers. Anything else fails with the byte offset of the problem.
 * Then, as the reference implementation does: tensors must tile the data section exactly (sorted
 * by offset, each begins where the previous ends, the last ends at the end of the file), each
 * byte range must equal product(shape) * dtype size, and names must be unique. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/st_internal.h"

struct sdgp_st_file {
    char *source;           /* path, or "<memory>", for messages */
    uint8_t *buf;           /* the whole file */
    size_t size;
    const uint8_t *data;    /* data section */
    uint64_t data_len;
    char *arena;            /* decoded strings (never longer than their JSON form) */
    size_t arena_used;
    int count, meta_count, cap, meta_cap;
    sdgp_st_tensor *tensors;
    uint64_t (*offsets)[2]; /* data_offsets of tensor i */
    sdgp_st_meta *meta;
};

/* ---- the JSON subset ---- */

typedef struct {
    const char *p, *begin, *end;
    sdgp_st_file *f;
    sdgp_error *err;
} jparser;

static sdgp_status jfail(jparser *j, const char *what) {
    return sdgp_fail(j->err, SDGP_ERR_FORMAT, "%s: bad safetensors header at byte %zu: %s", j->f->source,
                     (size_t)(j->p - j->begin) + 8, what);
}

static void jws(jparser *j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r')) j->p++;
}

/* Skips whitespace, then requires character c. */
static int jexpect(jparser *j, char c) {
    jws(j);
    if (j->p < j->end && *j->p == c) {
        j->p++;
        return 1;
    }
    return 0;
}

static int hex4(const char *p, uint32_t *v) {
    *v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return 0;
        *v = *v << 4 | (uint32_t)d;
    }
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | (cp >> 6 & 0x3F)), o[2] = (char)(0x80 | (cp & 0x3F)), 3;
    o[0] = (char)(0xF0 | cp >> 18), o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F)), o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A string, decoded into the arena as a C string. The decoded form plus its NUL never exceeds
 * the quoted JSON form, so the arena (sized as the header) cannot overflow. */
static sdgp_status jstring(jparser *j, const char **out) {
    if (!jexpect(j, '"')) return jfail(j, "expected a string");
    char *o = j->f->arena + j->f->arena_used, *start = o;
    for (;;) {
        if (j->p >= j->end) return jfail(j, "unterminated string");
        unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            break;
        }
        if (c < 0x20) return jfail(j, "control character inside a string");
        if (c != '\\') {
            int l = st_utf8_len((const uint8_t *)j->p, (size_t)(j->end - j->p));
            if (!l) return jfail(j, "invalid UTF-8 in a string");
            memcpy(o, j->p, (size_t)l);
            o += l;
            j->p += l;
            continue;
        }
        if (j->end - j->p < 2) return jfail(j, "unterminated escape");
        char e = j->p[1];
        j->p += 2;
        const char *simple = strchr("\"\\/bfnrt", e);
        if (e && simple) {
            *o++ = "\"\\/\b\f\n\r\t"[simple - "\"\\/bfnrt"];
            continue;
        }
        if (e != 'u') return jfail(j, "unknown escape");
        uint32_t cp, lo;
        if (j->end - j->p < 4 || !hex4(j->p, &cp)) return jfail(j, "bad \\u escape");
        j->p += 4;
        if (cp >= 0xDC00 && cp <= 0xDFFF) return jfail(j, "lone low surrogate in \\u escape");
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (j->end - j->p < 6 || j->p[0] != '\\' || j->p[1] != 'u' || !hex4(j->p + 2, &lo) || lo < 0xDC00 || lo > 0xDFFF)
                return jfail(j, "high surrogate without a low surrogate in \\u escape");
            j->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        if (cp == 0) return jfail(j, "\\u0000 in a string (names and values are C strings)");
        o += put_utf8(o, cp);
    }
    *o++ = '\0';
    j->f->arena_used += (size_t)(o - start);
    *out = start;
    return SDGP_OK;
}

/* A non-negative integer without sign, fraction, exponent or leading zeros. */
static sdgp_status juint(jparser *j, uint64_t *out) {
    jws(j);
    const char *s = j->p;
    uint64_t v = 0;
    while (j->p < j->end && *j->p >= '0' && *j->p <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, (uint64_t)(*j->p - '0'), &v))
            return jfail(j, "integer too large");
        j->p++;
    }
    if (j->p == s) return jfail(j, "expected a non-negative integer");
    if (j->p - s > 1 && *s == '0') return jfail(j, "integer with a leading zero");
    if (j->p < j->end && (*j->p == '.' || *j->p == 'e' || *j->p == 'E')) return jfail(j, "expected an integer, not a fraction");
    *out = v;
    return SDGP_OK;
}

/* [u, u, ...] with at most max entries. */
static sdgp_status juint_array(jparser *j, uint64_t *v, int max, int *n, const char *what) {
    *n = 0;
    if (!jexpect(j, '[')) return jfail(j, what);
    if (jexpect(j, ']')) return SDGP_OK;
    do {
        if (*n == max) return jfail(j, what);
        sdgp_status st = juint(j, &v[(*n)++]);
        if (st != SDGP_OK) return st;
    } while (jexpect(j, ','));
    return jexpect(j, ']') ? SDGP_OK : jfail(j, "expected ',' or ']' in an array");
}

static sdgp_status jmetadata(jparser *j) {
    sdgp_st_file *f = j->f;
    if (!jexpect(j, '{')) return jfail(j, "__metadata__ must be an object of strings");
    if (jexpect(j, '}')) return SDGP_OK;
    do {
        if (f->meta_count == f->meta_cap) {
            int cap = f->meta_cap ? 2 * f->meta_cap : 8;
            sdgp_st_meta *m = realloc(f->meta, sizeof *m * (size_t)cap);
            if (!m) return sdgp_fail(j->err, SDGP_ERR_NOMEM, "%s: out of memory", f->source);
            f->meta = m, f->meta_cap = cap;
        }
        sdgp_st_meta *m = &f->meta[f->meta_count];
        sdgp_status st = jstring(j, &m->key);
        if (st != SDGP_OK) return st;
        if (!jexpect(j, ':')) return jfail(j, "expected ':'");
        if ((st = jstring(j, &m->value)) != SDGP_OK) return st;
        for (int i = 0; i < f->meta_count; i++)
            if (!strcmp(f->meta[i].key, m->key)) return jfail(j, "duplicate __metadata__ key");
        f->meta_count++;
    } while (jexpect(j, ','));
    return jexpect(j, '}') ? SDGP_OK : jfail(j, "expected ',' or '}' in __metadata__");
}

static const char *const st_other_dtypes[] = {"BOOL", "I8", "I16", "U16", "U64", "F16", "BF16", "F64", "F8_E4M3", "F8_E5M2"};

static sdgp_status jtensor(jparser *j, const char *name) {
    sdgp_st_file *f = j->f;
    if (f->count == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        sdgp_st_tensor *t = realloc(f->tensors, sizeof *t * (size_t)cap);
        if (t) f->tensors = t;
        uint64_t(*o)[2] = realloc(f->offsets, sizeof *o * (size_t)cap);
        if (o) f->offsets = o;
        if (!t || !o) return sdgp_fail(j->err, SDGP_ERR_NOMEM, "%s: out of memory", f->source);
        f->cap = cap;
    }
    sdgp_st_tensor *t = &f->tensors[f->count];
    memset(t, 0, sizeof *t);
    t->name = name;
    int have_dtype = 0, have_shape = 0, have_offsets = 0;
    if (!jexpect(j, '{')) return jfail(j, "a tensor entry must be an object");
    do {
        const char *key;
        sdgp_status st = jstring(j, &key);
        if (st != SDGP_OK) return st;
        if (!jexpect(j, ':')) return jfail(j, "expected ':'");
        if (!strcmp(key, "dtype") && !have_dtype++) {
            const char *dt;
            if ((st = jstring(j, &dt)) != SDGP_OK) return st;
            int k = 0;
            while (st_dtype_valid(k) && strcmp(st_dtypes[k].name, dt)) k++;
            if (!st_dtype_valid(k)) {
                for (size_t o = 0; o < sizeof st_other_dtypes / sizeof *st_other_dtypes; o++)
                    if (!strcmp(dt, st_other_dtypes[o]))
                        return sdgp_fail(j->err, SDGP_ERR_UNSUPPORTED, "%s: tensor '%s' has dtype %s (sdgp reads F32, I64, I32, U32, U8)",
                                         f->source, name, dt);
                return jfail(j, "unknown dtype");
            }
            t->dtype = (sdgp_dtype)k;
        } else if (!strcmp(key, "shape") && !have_shape++) {
            uint64_t dims[8];
            int n;
            if ((st = juint_array(j, dims, 8, &n, "shape must be an array of at most 8 integers")) != SDGP_OK) return st;
            if (n > 4)
                return sdgp_fail(j->err, SDGP_ERR_UNSUPPORTED, "%s: tensor '%s' has %d dimensions (at most 4)", f->source, name, n);
            for (int d = 0; d < n; d++) {
                if (dims[d] > (uint64_t)INT64_MAX) return jfail(j, "shape entry too large");
                t->shape[d] = (int64_t)dims[d];
            }
            t->ndim = n;
        } else if (!strcmp(key, "data_offsets") && !have_offsets++) {
            int n;
            if ((st = juint_array(j, f->offsets[f->count], 2, &n, "data_offsets must be [begin, end]")) != SDGP_OK) return st;
            if (n != 2) return jfail(j, "data_offsets must be [begin, end]");
        } else {
            return jfail(j, "unknown or repeated key in a tensor entry");
        }
    } while (jexpect(j, ','));
    if (!jexpect(j, '}')) return jfail(j, "expected ',' or '}' in a tensor entry");
    if (!have_dtype || !have_shape || !have_offsets)
        return sdgp_fail(j->err, SDGP_ERR_FORMAT, "%s: tensor '%s' lacks %s", f->source, name,
                         !have_dtype ? "\"dtype\"" : !have_shape ? "\"shape\"" : "\"data_offsets\"");
    f->count++;
    return SDGP_OK;
}

static sdgp_status parse_header(sdgp_st_file *f, const char *hdr, size_t len, sdgp_error *err) {
    jparser j = {hdr, hdr, hdr + len, f, err};
    int have_meta = 0;
    if (!jexpect(&j, '{')) return jfail(&j, "the header must be a JSON object");
    if (!jexpect(&j, '}')) {
        do {
            const char *key;
            sdgp_status st = jstring(&j, &key);
            if (st != SDGP_OK) return st;
            if (!jexpect(&j, ':')) return jfail(&j, "expected ':'");
            if (!strcmp(key, ST_METADATA_KEY)) {
                if (have_meta++) return jfail(&j, "duplicate __metadata__");
                st = jmetadata(&j);
            } else {
                st = jtensor(&j, key);
            }
            if (st != SDGP_OK) return st;
        } while (jexpect(&j, ','));
        if (!jexpect(&j, '}')) return jfail(&j, "expected ',' or '}' after a header entry");
    }
    jws(&j);
    if (j.p != j.end) return jfail(&j, "trailing bytes after the header object");
    return SDGP_OK;
}

/* ---- validation ---- */

typedef struct {
    uint64_t b, e;
    const char *name;
} span;

static int cmp_by_offset(const void *x, const void *y) {
    const span *a = x, *b = y;
    if (a->b != b->b) return a->b < b->b ? -1 : 1;
    if (a->e != b->e) return a->e < b->e ? -1 : 1;
    return 0;
}
static int cmp_by_name(const void *x, const void *y) { return strcmp(((const span *)x)->name, ((const span *)y)->name); }

static sdgp_status validate(sdgp_st_file *f, sdgp_error *err) {
    int n = f->count;
    span *sp = malloc(sizeof(span) * (size_t)(n ? n : 1));
    if (!sp) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", f->source);
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < n && st == SDGP_OK; i++) {
        sdgp_st_tensor *t = &f->tensors[i];
        uint64_t b = f->offsets[i][0], e = f->offsets[i][1], bytes;
        if (e < b || e > f->data_len)
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensor '%s': data_offsets [%llu, %llu] outside the %llu-byte data section",
                           f->source, t->name, (unsigned long long)b, (unsigned long long)e, (unsigned long long)f->data_len);
        else if (!st_nbytes(t->shape, t->ndim, st_dtypes[t->dtype].size, &bytes) || bytes != e - b)
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensor '%s': %llu bytes do not match its %s shape of %d dims", f->source,
                           t->name, (unsigned long long)(e - b), st_dtypes[t->dtype].name, t->ndim);
        t->data = f->data + b;
        sp[i] = (span){b, e, t->name};
    }
    if (st == SDGP_OK) {
        qsort(sp, (size_t)n, sizeof *sp, cmp_by_name);
        for (int i = 1; i < n && st == SDGP_OK; i++)
            if (!strcmp(sp[i].name, sp[i - 1].name))
                st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: duplicate tensor name '%s'", f->source, sp[i].name);
    }
    if (st == SDGP_OK) {
        qsort(sp, (size_t)n, sizeof *sp, cmp_by_offset);
        uint64_t at = 0;
        for (int i = 0; i < n && st == SDGP_OK; i++) {
            if (sp[i].b != at)
                st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensor '%s' at byte %llu %s (previous data ends at %llu)", f->source,
                               sp[i].name, (unsigned long long)sp[i].b,
                               sp[i].b < at ? "overlaps another tensor" : "leaves a gap", (unsigned long long)at);
            at = sp[i].e;
        }
        if (st == SDGP_OK && at != f->data_len)
            st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensors cover %llu of the %llu data bytes (truncated or padded file)",
                           f->source, (unsigned long long)at, (unsigned long long)f->data_len);
    }
    free(sp);
    if (st != SDGP_OK) return st;

    const char *crc_text = sdgp_safetensors_meta(f, ST_CRC_KEY);
    if (crc_text) {
        uint32_t want = 0, hi, lo;
        if (strlen(crc_text) != 8 || !hex4(crc_text, &hi) || !hex4(crc_text + 4, &lo))
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: %s is not 8 hex digits", f->source, ST_CRC_KEY);
        want = hi << 16 | lo;
        uint32_t have = st_crc32((uint32_t)crc32(0L, Z_NULL, 0), f->data, f->data_len);
        if (have != want)
            return sdgp_fail(err, SDGP_ERR_FORMAT,
                             "%s: checksum mismatch (header says %08x, data has %08x): file damaged or half-written",
                             f->source, want, have);
    }
    return SDGP_OK;
}

/* Takes ownership of buf (freed on failure too). */
static sdgp_status parse_owned(sdgp_st_file **out, uint8_t *buf, size_t size, const char *source, sdgp_error *err) {
    *out = NULL;
    sdgp_st_file *f = calloc(1, sizeof *f);
    char *src = strdup(source);
    if (!f || !src) {
        free(f), free(src), free(buf);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", source);
    }
    f->source = src;
    f->buf = buf;
    f->size = size;
    sdgp_status st = SDGP_OK;
    uint64_t n = 0;
    for (int i = 0; i < 8 && size >= 8; i++) n |= (uint64_t)buf[i] << (8 * i);
    if (size < 8)
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated: %zu bytes, not even the 8-byte header length", source, size);
    else if (n > ST_MAX_HEADER)
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: header length %llu is absurd (limit 100 MB): not a safetensors file?",
                       source, (unsigned long long)n);
    else if (n > size - 8)
        st = sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated: header length %llu but only %zu bytes follow", source,
                       (unsigned long long)n, size - 8);
    if (st == SDGP_OK) {
        f->data = buf + 8 + n;
        f->data_len = size - 8 - n;
        f->arena = malloc((size_t)n + 1);
        if (!f->arena) st = sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory", source);
    }
    if (st == SDGP_OK) st = parse_header(f, (const char *)buf + 8, (size_t)n, err);
    if (st == SDGP_OK) st = validate(f, err);
    if (st != SDGP_OK) {
        sdgp_safetensors_free(f);
        return st;
    }
    *out = f;
    return SDGP_OK;
}

sdgp_status sdgp_safetensors_parse(sdgp_st_file **out, const void *bytes, size_t size, sdgp_error *err) {
    if (!out) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_safetensors_parse: out is NULL");
    *out = NULL;
    if (!bytes && size) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_safetensors_parse: bytes are NULL");
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) return sdgp_fail(err, SDGP_ERR_NOMEM, "safetensors: out of memory (%zu bytes)", size);
    if (size) memcpy(buf, bytes, size);
    return parse_owned(out, buf, size, "<memory>", err);
}

sdgp_status sdgp_safetensors_read(sdgp_st_file **out, const char *path, sdgp_error *err) {
    if (!out || !path) return sdgp_fail(err, SDGP_ERR_INVALID, "sdgp_safetensors_read: NULL argument");
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sdgp_fail(err, SDGP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return sdgp_fail(err, SDGP_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: not a regular file", path);
    }
    size_t size = (size_t)sb.st_size, have = 0;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu bytes)", path, size);
    }
    while (have < size) {
        ssize_t r = read(fd, buf + have, size - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            int e = errno;
            close(fd);
            free(buf);
            return r == 0 ? sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: file shrank while reading", path)
                          : sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: %s", path, strerror(e));
        }
        have += (size_t)r;
    }
    close(fd);
    return parse_owned(out, buf, size, path, err);
}

void sdgp_safetensors_free(sdgp_st_file *f) {
    if (!f) return;
    free(f->source);
    free(f->buf);
    free(f->arena);
    free(f->tensors);
    free(f->offsets);
    free(f->meta);
    free(f);
}

const sdgp_st_tensor *sdgp_safetensors_get(const sdgp_st_file *f, const char *name) {
    for (int i = 0; i < f->count; i++)
        if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

int sdgp_safetensors_count(const sdgp_st_file *f) { return f->count; }

const sdgp_st_tensor *sdgp_safetensors_at(const sdgp_st_file *f, int i) {
    return i >= 0 && i < f->count ? &f->tensors[i] : NULL;
}

const char *sdgp_safetensors_meta(const sdgp_st_file *f, const char *key) {
    for (int i = 0; i < f->meta_count; i++)
        if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
    return NULL;
}

static void shape_text(char *s, size_t cap, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(s, cap, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(s + k, cap - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < cap) snprintf(s + k, cap - k, "]");
}

sdgp_status sdgp_safetensors_copy(const sdgp_st_file *f, const char *name, sdgp_dtype dtype, int ndim,
                                  const int64_t *shape, void *dst, sdgp_error *err) {
    const sdgp_st_tensor *t = sdgp_safetensors_get(f, name);
    if (!t) return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensor '%s' is missing", f->source, name);
    int same = t->dtype == dtype && t->ndim == ndim;
    for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
    if (!same) {
        char want[128], have[128];
        shape_text(want, sizeof want, ndim < 0 ? 0 : ndim > 4 ? 4 : ndim, shape);
        shape_text(have, sizeof have, t->ndim, t->shape);
        return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: tensor '%s': expected %s %s, found %s %s", f->source, name,
                         st_dtype_valid((int)dtype) ? st_dtypes[dtype].name : "?", want, st_dtypes[t->dtype].name, have);
    }
    uint64_t bytes = 0;
    st_nbytes(t->shape, t->ndim, st_dtypes[t->dtype].size, &bytes);
    if (bytes) memcpy(dst, t->data, (size_t)bytes);
    return SDGP_OK;
}
