/* The AVX2 transpose (transpose.h): 8 x 8 blocks in ymm registers, the edges by transpose_ref. */
#include <immintrin.h>

#include "core/transpose.h"
#include "core/transpose8_avx2.h"

/* One 8 x 8 block. */
static inline void block8(float *dst, int64_t ldd, const float *const *src) {
    __m256 r[8];
    for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_ps(src[i]);
    transpose8x8_ps(r);
    for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + k * ldd, r[k]);
}

/* The block at row r, column c of a strided matrix. */
static inline void strided8(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t r, int64_t c) {
    const float *rows[8];
    for (int i = 0; i < 8; i++) rows[i] = src + (r + i) * lds + c;
    block8(dst + c * ldd + r, ldd, rows);
}

void transpose_avx2(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows, int64_t cols) {
    const int64_t R = rows / 8 * 8, C = cols / 8 * 8;
    if (rows >= cols) /* the inner loop walks the longer side (transpose.h) */
        for (int64_t c = 0; c < C; c += 8)
            for (int64_t r = 0; r < R; r += 8) strided8(dst, ldd, src, lds, r, c);
    else
        for (int64_t r = 0; r < R; r += 8)
            for (int64_t c = 0; c < C; c += 8) strided8(dst, ldd, src, lds, r, c);
    if (C < cols) transpose_ref(dst + C * ldd, ldd, src + C, lds, R, cols - C);
    if (R < rows) transpose_ref(dst + R, ldd, src + R * lds, lds, rows - R, cols);
}

void transpose_rows_avx2(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows, int64_t ncols) {
    const int64_t R = nrows / 8 * 8, C = ncols / 8 * 8;
    for (int64_t r = 0; r < R; r += 8)
        for (int64_t c = 0; c < C; c += 8) {
            const float *src[8];
            for (int i = 0; i < 8; i++) src[i] = rows[r + i] + c0 + c;
            block8(dst + c * ldd + r, ldd, src);
        }
    if (C < ncols) transpose_rows_ref(dst + C * ldd, ldd, rows, c0 + C, R, ncols - C);
    if (R < nrows) transpose_rows_ref(dst + R, ldd, rows + R, c0, nrows - R, ncols);
}
