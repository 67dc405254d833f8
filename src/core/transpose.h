/* Float matrix transposes between the NHWC layout of the library and NCHW (PyTorch's default):
 * the NCHW input of sdgp_prune (cfg->layout) and the NCHW dD of sdgp_sparse_bwd. One function per
 * ISA path behind transpose_for(); all of them only move bits, so every path gives the same result. */
#ifndef SDGP_TRANSPOSE_H
#define SDGP_TRANSPOSE_H

#include <stdint.h>

#include "sdgp/isa.h"

/* dst[c*ldd + r] = src[r*lds + c] for r < rows, c < cols; dst and src do not overlap. No alignment
 * needed. The vector paths move 8x8 (AVX2) or 16x16 (AVX-512) blocks in registers and the edges
 * by the next narrower path. Block order: the inner loop walks the longer side (along src's
 * columns when rows < cols, else along its rows). Measured on Zen 5 (bench/nchw_micro.c's shapes,
 * whole B=32 tensors, one thread): fixed rows-outer order wrote NHWC -> NCHW into 32x32 planes
 * (4 KiB apart, 64 channels) at 7-9 GB/s, the longer-side order at 19-23 GB/s (memcpy 47-58);
 * 16x16 planes x 256 channels 17 -> 33-40, NCHW -> NHWC of 8x8 planes x 512 channels 14 -> 48. */
typedef void (*transpose_fn)(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows,
                             int64_t cols);

void transpose_ref(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows, int64_t cols);
void transpose_avx2(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows, int64_t cols);
void transpose_avx512(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows,
                      int64_t cols);

/* The same from gathered rows: dst[c*ldd + r] = rows[r][c0 + c] for r < nrows, c < ncols (the sparse
 * weight gradient's packing: a run of output positions' input pixels at one tap, each row a pointer
 * into the input or to a zero row in the padding). */
typedef void (*transpose_rows_fn)(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows,
                                  int64_t ncols);

void transpose_rows_ref(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows, int64_t ncols);
void transpose_rows_avx2(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows, int64_t ncols);
void transpose_rows_avx512(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows,
                           int64_t ncols);

/* The transposes of a resolved ISA path (not AUTO). */
transpose_fn transpose_for(sdgp_isa isa);
transpose_rows_fn transpose_rows_for(sdgp_isa isa);

#endif
