/* The portable transpose and the table of ISA paths (transpose.h). */
#include "core/transpose.h"

void transpose_ref(float *restrict dst, int64_t ldd, const float *restrict src, int64_t lds, int64_t rows, int64_t cols) {
    /* 8 x 8 blocks: both sides touch whole cache lines per block instead of one strided column */
    for (int64_t r0 = 0; r0 < rows; r0 += 8)
        for (int64_t c0 = 0; c0 < cols; c0 += 8) {
            const int64_t r1 = r0 + 8 < rows ? r0 + 8 : rows, c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (int64_t c = c0; c < c1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = src[r * lds + c];
        }
}

void transpose_rows_ref(float *restrict dst, int64_t ldd, const float *const *rows, int64_t c0, int64_t nrows, int64_t ncols) {
    for (int64_t r0 = 0; r0 < nrows; r0 += 8)
        for (int64_t k0 = 0; k0 < ncols; k0 += 8) {
            const int64_t r1 = r0 + 8 < nrows ? r0 + 8 : nrows, k1 = k0 + 8 < ncols ? k0 + 8 : ncols;
            for (int64_t c = k0; c < k1; c++)
                for (int64_t r = r0; r < r1; r++) dst[c * ldd + r] = rows[r][c0 + c];
        }
}

transpose_rows_fn transpose_rows_for(sdgp_isa isa) {
    switch (isa) {
    case SDGP_ISA_AVX512: return transpose_rows_avx512;
    case SDGP_ISA_AVX2: return transpose_rows_avx2;
    default: return transpose_rows_ref;
    }
}

transpose_fn transpose_for(sdgp_isa isa) {
    switch (isa) {
    case SDGP_ISA_AVX512: return transpose_avx512;
    case SDGP_ISA_AVX2: return transpose_avx2;
    default: return transpose_ref;
    }
}
