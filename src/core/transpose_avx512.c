/* The AVX-512 transpose (transpose.h): 16 x 16 blocks in zmm registers, the edges by the AVX2 path. */
#include <immintrin.h>

#include "core/transpose.h"

/* One 16 x 16 block. After the unpacks and in-lane shuffles, u[4i + k] holds, in 128-bit lane L,
 * rows 4i..4i+3 of column 4L + k; two rounds of lane shuffles then gather the four row groups of
 * each column. */
static inline void block16(float *dst, int64_t ldd, const float *const *src) {
    __m512 r[16], t[16], u[16];
    for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src[i]);
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    for (int i = 0; i < 4; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    for (int k = 0; k < 4; k++) {
        /* lanes 0, 2 (v) and 1, 3 (v1) of row groups 0, 1 and 2, 3 */
        const __m512 v = _mm512_shuffle_f32x4(u[k], u[4 + k], 0x88), w = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0x88);
        const __m512 v1 = _mm512_shuffle_f32x4(u[k], u[4 + k], 0xDD), w1 = _mm512_shuffle_f32x4(u[8 + k], u[12 + k], 0xDD);
        _mm512_storeu_ps(dst + k * ldd, _mm512_shuffle_f32x4(v, w, 0x88));
        _mm512_storeu_ps(dst + (8 + k) * ldd, _mm512_shuffle_f32x4(v, w, 0xDD));
        _mm512_storeu_ps(dst + (4 + k) * ldd, _mm512_shuffle_f32x4(v1, w1, 0x88));
        _mm512_storeu_ps(dst + (12 + k) * ldd, _mm512_shuffle_f32x4(v1, w1, 0xDD));
    }
}

/* The block at row r, column c of a strided matrix. */
static inline void strided16(float *dst, int64_t ldd, const float *src, int64_t lds, int64_t r, int64_t c) {
    const float *rows[16];
    for (int i = 0; i < 16; i++) rows[i] = src + (r + i) * lds + c;
    block16(dst + c * ldd + r, ldd, rows);
}

void transpose_avx512(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows,
                      int64_t cols) {
    const int64_t R = rows / 16 * 16, C = cols / 16 * 16;
    /* The inner loop walks the longer side (transpose.h): measured 2.6x faster for 32x32 planes */
    if (rows >= cols)
        for (int64_t c = 0; c < C; c += 16)
            for (int64_t r = 0; r < R; r += 16) strided16(dst, ldd, src, lds, r, c);
    else
        for (int64_t r = 0; r < R; r += 16)
            for (int64_t c = 0; c < C; c += 16) strided16(dst, ldd, src, lds, r, c);
    if (C < cols) transpose_avx2(dst + C * ldd, ldd, src + C, lds, R, cols - C);
    if (R < rows) transpose_avx2(dst + R, ldd, src + R * lds, lds, rows - R, cols);
}

void transpose_rows_avx512(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows,
                           int64_t ncols) {
    const int64_t R = nrows / 16 * 16, C = ncols / 16 * 16;
    for (int64_t r = 0; r < R; r += 16)
        for (int64_t c = 0; c < C; c += 16) {
            const float *src[16];
            for (int i = 0; i < 16; i++) src[i] = rows[r + i] + c0 + c;
            block16(dst + c * ldd + r, ldd, src);
        }
    if (C < ncols) transpose_rows_avx2(dst + C * ldd, ldd, rows, c0 + C, R, ncols - C);
    if (R < nrows) transpose_rows_avx2(dst + R, ldd, rows + R, c0, nrows - R, ncols);
}
