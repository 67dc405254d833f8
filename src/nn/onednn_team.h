/* The OpenMP team size oneDNN's calls run with (oneDNN reads omp_get_max_threads): set around each
 * call and restored after it, so the library leaves the caller's setting as it found it. Shared by
 * the convolution (conv_dnnl.c) and the matmul (matmul_dnnl.c). */
#ifndef SDGP_NN_ONEDNN_TEAM_H
#define SDGP_NN_ONEDNN_TEAM_H

#include <omp.h>

/* Sets the team size (threads > 0) and returns the value to restore. */
static inline int onednn_team_enter(int threads) {
    int saved = omp_get_max_threads();
    if (threads > 0) omp_set_num_threads(threads);
    return saved;
}

static inline void onednn_team_leave(int threads, int saved) {
    if (threads > 0) omp_set_num_threads(saved);
}

#endif
