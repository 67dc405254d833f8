/* A dense fp32 matrix product through oneDNN's matmul primitive, for the benchmarks' dense baseline of
 * a linear layer (`sdgp bench linear`). Internal: not exported from libsdgp.so (no SDGP_API).
 *
 *   C[M,N] = op(A)[M,K] x op(B)[K,N],  all row-major, C with row stride N;
 *   op(A) = A (stored M x K) or, with trans_a, A^T (A stored K x M); likewise op(B) = B (K x N)
 *   or, with trans_b, B^T (B stored N x K).
 * The transposes are strides of oneDNN's memory descriptors: nothing is copied. A linear layer's
 * three products (X: T x in, W: out x in, dY: T x out) are one call each:
 *   forward  Y  = X W^T   M = T,   N = out, K = in,  trans_b
 *   data     dX = dY W    M = T,   N = in,  K = out
 *   weight   dW = dY^T X  M = out, N = in,  K = T,   trans_a
 * The primitive is created once per shape; run binds the caller's pointers and executes it. */
#ifndef SDGP_NN_MATMUL_DNNL_H
#define SDGP_NN_MATMUL_DNNL_H

#include <stdint.h>

#include "sdgp/status.h"

typedef struct matmul_dnnl matmul_dnnl;

/* M, N, K >= 1; threads: the OpenMP team size oneDNN uses (0 = the caller's omp_get_max_threads()),
 * set for create and each run and restored after, as sdgp_conv does (src/nn/conv_dnnl.c).
 * SDGP_ERR_INVALID for bad sizes, SDGP_ERR_INTERNAL naming the oneDNN call that failed. On failure
 * *out is NULL. */
sdgp_status matmul_dnnl_create(matmul_dnnl **out, int64_t M, int64_t N, int64_t K, int trans_a, int trans_b,
                               int threads, sdgp_error *err);
/* c (overwritten) = op(a) x op(b). Inputs are only read. One matmul_dnnl must not run from two
 * threads at once (its scratchpad is shared by the calls). */
sdgp_status matmul_dnnl_run(matmul_dnnl *mm, float *c, const float *a, const float *b, sdgp_error *err);
/* oneDNN's name of the implementation it chose, e.g. "brg:avx512_core" or "gemm:jit" (static in
 * oneDNN while the primitive lives). */
const char *matmul_dnnl_impl(const matmul_dnnl *mm);
void matmul_dnnl_destroy(matmul_dnnl *mm); /* NULL is fine */

#endif
