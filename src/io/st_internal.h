/* Internal pieces shared by the safetensors writer and reader. */
#ifndef SDGP_ST_INTERNAL_H
#define SDGP_ST_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

#include "sdgp/safetensors.h"

/* The safetensors reference implementation refuses headers above this size (MAX_HEADER_SIZE). */
#define ST_MAX_HEADER ((uint64_t)100000000)
#define ST_CRC_KEY "sdgp_crc32"
#define ST_METADATA_KEY "__metadata__"

static const struct {
    const char *name;
    size_t size;
} st_dtypes[] = {{"F32", 4}, {"I64", 8}, {"U8", 1}, {"I32", 4}, {"U32", 4}}; /* indexed by sdgp_dtype */

static inline int st_dtype_valid(int dt) { return dt >= 0 && dt < (int)(sizeof st_dtypes / sizeof st_dtypes[0]); }

/* product(shape) * dtype size in *bytes; 0 when it overflows (or a dim is negative). */
static inline int st_nbytes(const int64_t *shape, int ndim, size_t elem, uint64_t *bytes) {
    uint64_t n = elem;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0 || __builtin_mul_overflow(n, (uint64_t)shape[d], &n)) return 0;
    }
    *bytes = n;
    return 1;
}

/* CRC-32 (zlib) of a buffer of any size (zlib takes uInt lengths). */
static inline uint32_t st_crc32(uint32_t crc, const uint8_t *p, uint64_t n) {
    while (n > 0) {
        uInt chunk = n > (1u << 30) ? (1u << 30) : (uInt)n;
        crc = (uint32_t)crc32(crc, p, chunk);
        p += chunk;
        n -= chunk;
    }
    return crc;
}

/* Length of the valid UTF-8 sequence at s[0..n) (1..4), or 0 when it is invalid: overlong
 * forms, surrogates and code points above U+10FFFF are rejected, as strict JSON readers do. */
static inline int st_utf8_len(const uint8_t *s, size_t n) {
    uint8_t c = s[0];
    if (c < 0x80) return 1;
    int len;
    uint32_t cp;
    if (c >= 0xC2 && c <= 0xDF) len = 2, cp = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) len = 3, cp = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) len = 4, cp = c & 0x07;
    else return 0;
    if ((size_t)len > n) return 0;
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 0x3F);
    }
    if ((len == 3 && cp < 0x800) || (len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

static inline int st_utf8_valid(const char *s) {
    size_t n = 0;
    while (s[n]) n++;
    for (size_t i = 0; i < n;) {
        int l = st_utf8_len((const uint8_t *)s + i, n - i);
        if (!l) return 0;
        i += (size_t)l;
    }
    return 1;
}

#endif
