/* Rounding sizes up, in one place: 64 bytes is the alignment of every buffer and of every part carved out of one
 * workspace (a cache line and an AVX-512 vector, so no part's first vector straddles two lines). */
#ifndef SDGP_CORE_ALIGN_H
#define SDGP_CORE_ALIGN_H

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

static inline size_t sdgp_align64(size_t bytes) { return (bytes + 63) & ~(size_t)63; }

/* a rounded up to a multiple of b (a >= 0, b > 0) */
static inline int64_t sdgp_round_up(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

/* 64-byte aligned memory for free(); NULL if out of memory (0 bytes gets one line, so NULL only means failure) */
static inline void *sdgp_alloc64(size_t bytes) {
    void *p = NULL;
    return posix_memalign(&p, 64, bytes ? bytes : 64) ? NULL : p;
}

#endif
