/* BatchNorm2d over rows x C (NHWC activations, rows = B*H*W), PyTorch semantics.
 *
 * Per-channel reductions (mean/variance, dgamma/dbeta) sum blocks of 16 rows in float, the block
 * sums of a chunk of 1024 rows in double, and the chunk sums in double in chunk order. Threads take
 * whole chunks (contiguous memory) and add their chunk sums in chunk order (`omp ordered`), so every
 * channel's sum is the same sequence of additions whatever the thread count: all outputs here are
 * bitwise independent of the number of threads. The threads used to split the channels instead,
 * each sweeping every row for a 64-128 byte piece of it: on the Zen 3 host 2 threads were then
 * 2.5-4x slower than one at 32-64 channels. Against that, BatchNorm + ReLU of ResNet-9 w=0.25's
 * layers at batch 512 (`build/sdgp_kernel_ab bn-fwd|bn-bwd OLD.so NEW.so ...`, both orders) take
 * 1.3-1.7x less time forward and 1.1-2.1x backward; at 512 channels (w=1) the two are within noise.
 * The elementwise passes split the rows.
 *
 * Variance is one pass, E[(x - x0)^2] - (E[x] - x0)^2 with x0 the channel's first value (a shift
 * that removes the cancellation a large mean would cause); float block sums of 16 terms cost
 * about 1e-7 relative. */
#include "sdgp/nn.h"

#include <math.h>

/* Channels are swept in windows of at most CWIN so the accumulators fit on the stack; RBLK rows
 * per float block sum, RCHUNK rows (whole blocks) per chunk, the unit a thread takes. */
enum { CWIN = 256, RBLK = 16, RCHUNK = 64 * RBLK };

/* BatchNorm's affine map, one place for forward and backward: the fused backward recomputes the
 * ReLU mask as bn_affine(...) > 0 instead of keeping the forward's output, and the mask must be
 * bitwise the one the forward applied (forward: y = v < 0 ? 0 : v, so y > 0 exactly when v > 0,
 * NaN included). */
static inline float bn_affine(float x, float mean, float a, float b) { return (x - mean) * a + b; }

/* a[j] = rstd gamma for channels c0..c0+n-1: the affine map's scale, in float, the same in forward
 * and in the backward's mask. */
static void bn_scale(float *a, const float *rstd, const float *gamma, int c0, int n) {
    for (int j = 0; j < n; j++) a[j] = rstd[c0 + j] * gamma[c0 + j];
}

/* Parallel regions only pay off for large tensors; below this many floats run on one thread. */
static int worth_threads(int64_t rows, int C) { return rows * C >= (1 << 15); }

/* s[c] = sum_r (a[r,c] - sa[c]),  q[c] = sum_r (a[r,c] - sa[c]) (b[r,c] - sb[c])  for c in
 * [c0, c0+n), n <= CWIN; sa, sb are shifts (NULL: 0), indexed from c0. Blocks of RBLK rows (fixed
 * by row index) are summed in float, which vectorises twice as wide as double, and the block
 * sums in double. With relu_a (and relu_b, both indexed from c0), a is dL/d relu(bn(b)) and is
 * taken as 0 where bn_affine(b, sb, relu_a, relu_b) <= 0 (sa must be NULL). */
static void channel_sums(double *s, double *q, const float *a, const float *sa, const float *b, const float *sb,
                         const float *relu_a, const float *relu_b, int64_t rows, int C, int c0, int n) {
    float bs[CWIN], bq[CWIN], ka[CWIN], kb[CWIN];
    for (int j = 0; j < n; j++) {
        s[j] = q[j] = 0.0;
        ka[j] = sa ? sa[j] : 0.0f;
        kb[j] = sb ? sb[j] : 0.0f;
    }
    for (int64_t r0 = 0; r0 < rows; r0 += RBLK) {
        int64_t r1 = r0 + RBLK < rows ? r0 + RBLK : rows;
        for (int j = 0; j < n; j++) bs[j] = bq[j] = 0.0f;
        /* Two loop nests, not a test per row, and every value loaded before the select: the
         * inner loops compile to vector code without branches (a branch on the ReLU mask is
         * mispredicted half the time). */
        if (relu_a)
            for (int64_t r = r0; r < r1; r++) {
                const float *ar = a + r * C + c0, *br = b + r * C + c0;
                for (int j = 0; j < n; j++) {
                    float av = ar[j], bv = br[j];
                    float d = bn_affine(bv, kb[j], relu_a[j], relu_b[j]) > 0.0f ? av : 0.0f;
                    bs[j] += d;
                    bq[j] += d * (bv - kb[j]);
                }
            }
        else
            for (int64_t r = r0; r < r1; r++) {
                const float *ar = a + r * C + c0, *br = b + r * C + c0;
                for (int j = 0; j < n; j++) {
                    float d = ar[j] - ka[j];
                    bs[j] += d;
                    bq[j] += d * (br[j] - kb[j]);
                }
            }
        for (int j = 0; j < n; j++) {
            s[j] += bs[j];
            q[j] += bq[j];
        }
    }
}

/* channel_sums over all rows into the shared s and q: chunks of RCHUNK rows (fixed by row index)
 * go to the threads, and their sums are added in chunk order. Call from every thread of a parallel
 * region; returns after a barrier. */
static void window_sums(double *s, double *q, const float *a, const float *sa, const float *b, const float *sb,
                        const float *relu_a, const float *relu_b, int64_t rows, int C, int c0, int n) {
    const int64_t nchunks = (rows + RCHUNK - 1) / RCHUNK;
#pragma omp single
    for (int j = 0; j < n; j++) s[j] = q[j] = 0.0;
#pragma omp for ordered schedule(static, 1)
    for (int64_t k = 0; k < nchunks; k++) {
        const int64_t r0 = k * RCHUNK, r1 = r0 + RCHUNK < rows ? r0 + RCHUNK : rows;
        double ps[CWIN], pq[CWIN];
        channel_sums(ps, pq, a + r0 * C, sa, b + r0 * C, sb, relu_a, relu_b, r1 - r0, C, c0, n);
#pragma omp ordered
        for (int j = 0; j < n; j++) {
            s[j] += ps[j];
            q[j] += pq[j];
        }
    }
}

/* y[r, c0:c0+n] = (x - m) a + b for every row; an orphaned `omp for`: call inside a parallel
 * region. Per-channel coefficients are computed once per window (no per-element division or
 * sqrt); subtracting the mean first keeps y accurate when |mean| >> std. */
static void affine_rows(float *y, const float *x, const float *m, const float *a, const float *b, int64_t rows, int C,
                        int c0, int n, int relu) {
#pragma omp for schedule(static) nowait
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = x + r * C + c0;
        float *yr = y + r * C + c0;
        if (relu) /* as sdgp_relu_forward: x < 0 ? 0 : x, so NaN propagates and fused == unfused bitwise */
            for (int j = 0; j < n; j++) {
                float v = bn_affine(xr[j], m[j], a[j], b[j]);
                yr[j] = v < 0.0f ? 0.0f : v;
            }
        else
            for (int j = 0; j < n; j++) yr[j] = bn_affine(xr[j], m[j], a[j], b[j]);
    }
}

/* y = (x - mean) (rstd gamma) + beta, then the ReLU when relu != 0. */
static void apply_stats(float *y, const float *x, const float *mean, const float *rstd, const float *gamma,
                        const float *beta, int64_t rows, int C, int relu) {
#pragma omp parallel if (worth_threads(rows, C))
    for (int w0 = 0; w0 < C; w0 += CWIN) {
        int n = C - w0 < CWIN ? C - w0 : CWIN;
        float a[CWIN];
        bn_scale(a, rstd, gamma, w0, n);
        affine_rows(y, x, mean + w0, a, beta + w0, rows, C, w0, n, relu);
    }
}

/* Channel c's saved statistics and running-statistics update from its batch mean m and biased
 * variance var over `rows` rows (running: the unbiased variance rows/(rows-1); for a single row,
 * where PyTorch refuses to train, the biased one). */
static void finish_stats(float *mean, float *rstd, float *running_mean, float *running_var, int c, double m, double var,
                         double rows, float momentum, float eps) {
    double unbias = rows > 1 ? rows / (rows - 1) : 1.0;
    if (var < 0) var = 0;
    mean[c] = (float)m;
    rstd[c] = (float)(1.0 / sqrt(var + (double)eps));
    if (running_mean) running_mean[c] = (float)((1.0 - momentum) * running_mean[c] + momentum * m);
    if (running_var) running_var[c] = (float)((1.0 - momentum) * running_var[c] + momentum * var * unbias);
}

/* Per channel, the sums shifted by the first row, s = sum (x - x0) and q = sum (x - x0)^2. Without
 * sums: mean, var and the running statistics from them. With sums (2C + 1 doubles): the unshifted
 * sums of x and x^2 into sums[c] and sums[C + c], and rows into sums[2C], to be added over
 * processes (sdgp_batchnorm_forward_stats). */
static void forward_reduce(double *sums, float *mean, float *rstd, float *running_mean, float *running_var,
                           const float *x, int64_t rows, int C, float momentum, float eps) {
    double s[CWIN], q[CWIN];
#pragma omp parallel if (worth_threads(rows, C))
    for (int w0 = 0; w0 < C; w0 += CWIN) {
        int n = C - w0 < CWIN ? C - w0 : CWIN;
        /* shifted by the first row: sums of (x - x0) and (x - x0)^2 */
        window_sums(s, q, x, x + w0, x, x + w0, NULL, NULL, rows, C, w0, n);
#pragma omp single
        for (int j = 0; j < n; j++) {
            int c = w0 + j;
            double x0 = x[c];
            if (sums) {
                sums[c] = s[j] + (double)rows * x0;
                sums[C + c] = q[j] + 2.0 * x0 * s[j] + (double)rows * x0 * x0;
                continue;
            }
            double d = s[j] / (double)rows, var = q[j] / (double)rows - d * d;
            finish_stats(mean, rstd, running_mean, running_var, c, x0 + d, var, (double)rows, momentum, eps);
        }
    }
    if (sums) sums[2 * C] = (double)rows;
}

static void forward_train(float *y, float *mean, float *rstd, float *running_mean, float *running_var, const float *x,
                          const float *gamma, const float *beta, int64_t rows, int C, float momentum, float eps, int relu) {
    forward_reduce(NULL, mean, rstd, running_mean, running_var, x, rows, C, momentum, eps);
    apply_stats(y, x, mean, rstd, gamma, beta, rows, C, relu);
}

void sdgp_batchnorm_forward_stats(double *sums, const float *x, int64_t rows, int C) {
    forward_reduce(sums, NULL, NULL, NULL, NULL, x, rows, C, 0.0f, 0.0f);
}

void sdgp_batchnorm_forward_train_sums(float *y, float *mean, float *rstd, float *running_mean, float *running_var,
                                       const double *sums, const float *x, const float *gamma, const float *beta,
                                       int64_t rows, int C, float momentum, float eps, int relu) {
    /* E[x^2] - E[x]^2 in double: with |mean| / std below 1e3 (BatchNorm inputs) the cancellation
     * costs at most 1e-10 relative, far below the float results. */
    double total = sums[2 * C];
    for (int c = 0; c < C; c++) {
        double m = sums[c] / total, var = sums[C + c] / total - m * m;
        finish_stats(mean, rstd, running_mean, running_var, c, m, var, total, momentum, eps);
    }
    apply_stats(y, x, mean, rstd, gamma, beta, rows, C, relu);
}

void sdgp_batchnorm_forward_train(float *y, float *mean, float *rstd, float *running_mean, float *running_var,
                                  const float *x, const float *gamma, const float *beta, int64_t rows, int C,
                                  float momentum, float eps) {
    forward_train(y, mean, rstd, running_mean, running_var, x, gamma, beta, rows, C, momentum, eps, 0);
}

void sdgp_batchnorm_relu_forward_train(float *y, float *mean, float *rstd, float *running_mean, float *running_var,
                                       const float *x, const float *gamma, const float *beta, int64_t rows, int C,
                                       float momentum, float eps) {
    forward_train(y, mean, rstd, running_mean, running_var, x, gamma, beta, rows, C, momentum, eps, 1);
}

void sdgp_batchnorm_relu_recompute(float *y, const float *x, const float *mean, const float *rstd, const float *gamma,
                                   const float *beta, int64_t rows, int C) {
    apply_stats(y, x, mean, rstd, gamma, beta, rows, C, 1);
}

void sdgp_batchnorm_recompute(float *y, const float *x, const float *mean, const float *rstd, const float *gamma,
                              const float *beta, int64_t rows, int C) {
    apply_stats(y, x, mean, rstd, gamma, beta, rows, C, 0);
}

/* y = (x - running_mean) (gamma / sqrt(running_var + eps)) + beta, then the ReLU when relu != 0. */
static void forward_eval(float *y, const float *x, const float *gamma, const float *beta, const float *running_mean,
                         const float *running_var, int64_t rows, int C, float eps, int relu) {
#pragma omp parallel if (worth_threads(rows, C))
    for (int w0 = 0; w0 < C; w0 += CWIN) {
        int n = C - w0 < CWIN ? C - w0 : CWIN;
        float a[CWIN];
        for (int j = 0; j < n; j++) a[j] = gamma[w0 + j] / sqrtf(running_var[w0 + j] + eps);
        affine_rows(y, x, running_mean + w0, a, beta + w0, rows, C, w0, n, relu);
    }
}

void sdgp_batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                                 const float *running_mean, const float *running_var, int64_t rows, int C, float eps) {
    forward_eval(y, x, gamma, beta, running_mean, running_var, rows, C, eps, 0);
}

void sdgp_batchnorm_relu_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                                      const float *running_mean, const float *running_var, int64_t rows, int C,
                                      float eps) {
    forward_eval(y, x, gamma, beta, running_mean, running_var, rows, C, eps, 1);
}

/* With xhat = (x - mean) rstd:  dbeta = sum dy,  dgamma = sum dy xhat,
 * dx = gamma rstd (dy - dbeta/rows - xhat dgamma/rows) = k dy + m (x - mean) + o per channel,
 * with k = gamma rstd, m = -k rstd dgamma/rows, o = -k dbeta/rows.
 * First the reductions: dgamma, dbeta, and with sums (2C doubles) also sum dy and
 * sum dy (x - mean) unrounded into sums[c] and sums[C + c] (sdgp_batchnorm_backward_sums). */
static void backward_reduce(double *sums, float *dgamma, float *dbeta, const float *dy, const float *x,
                            const float *mean, const float *rstd, const float *gamma, const float *relu_beta,
                            int64_t rows, int C) {
    double s[CWIN], q[CWIN];
#pragma omp parallel if (worth_threads(rows, C))
    for (int w0 = 0; w0 < C; w0 += CWIN) {
        int n = C - w0 < CWIN ? C - w0 : CWIN;
        float a[CWIN]; /* the forward's scale, for the ReLU mask */
        bn_scale(a, rstd, gamma, w0, n);
        window_sums(s, q, dy, NULL, x, mean + w0, relu_beta ? a : NULL, relu_beta ? relu_beta + w0 : NULL, rows, C, w0,
                    n);
#pragma omp single
        for (int j = 0; j < n; j++) {
            dbeta[w0 + j] = (float)s[j];
            dgamma[w0 + j] = (float)(q[j] * rstd[w0 + j]);
            if (sums) {
                sums[w0 + j] = s[j];
                sums[C + w0 + j] = q[j];
            }
        }
    }
}

/* Then dx from the reductions over all `total` rows (dgamma, dbeta of the whole batch). */
static void backward_apply(float *dx, const float *dgamma, const float *dbeta, double total, const float *dy,
                           const float *x, const float *mean, const float *rstd, const float *gamma,
                           const float *relu_beta, int64_t rows, int C) {
    /* dx may alias dy: each element is read before it is written, by the same iteration. */
#pragma omp parallel if (worth_threads(rows, C))
    for (int w0 = 0; w0 < C; w0 += CWIN) {
        int n = C - w0 < CWIN ? C - w0 : CWIN;
        float k[CWIN], m[CWIN], o[CWIN], a[CWIN];
        const float *mu = mean + w0, *rb = relu_beta ? relu_beta + w0 : NULL;
        bn_scale(a, rstd, gamma, w0, n);
        for (int j = 0; j < n; j++) {
            int c = w0 + j;
            double kc = (double)gamma[c] * rstd[c];
            k[j] = (float)kc;
            m[j] = (float)(-kc * rstd[c] * dgamma[c] / total);
            o[j] = (float)(-kc * dbeta[c] / total);
        }
#pragma omp for schedule(static) nowait
        for (int64_t r = 0; r < rows; r++) {
            const float *xr = x + r * C + w0, *dyr = dy + r * C + w0;
            float *dxr = dx + r * C + w0;
            if (rb) {
                for (int j = 0; j < n; j++) {
                    float xv = xr[j], dyv = dyr[j]; /* loaded before the select: no branch */
                    float d = bn_affine(xv, mu[j], a[j], rb[j]) > 0.0f ? dyv : 0.0f;
                    dxr[j] = k[j] * d + m[j] * (xv - mu[j]) + o[j];
                }
            } else {
                for (int j = 0; j < n; j++) dxr[j] = k[j] * dyr[j] + m[j] * (xr[j] - mu[j]) + o[j];
            }
        }
    }
}

static void backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x, const float *mean,
                     const float *rstd, const float *gamma, const float *relu_beta, int64_t rows, int C) {
    backward_reduce(NULL, dgamma, dbeta, dy, x, mean, rstd, gamma, relu_beta, rows, C);
    backward_apply(dx, dgamma, dbeta, (double)rows, dy, x, mean, rstd, gamma, relu_beta, rows, C);
}

void sdgp_batchnorm_backward_sums(double *sums, float *dgamma, float *dbeta, const float *dy, const float *x,
                                  const float *mean, const float *rstd, const float *gamma, const float *beta,
                                  int64_t rows, int C) {
    backward_reduce(sums, dgamma, dbeta, dy, x, mean, rstd, gamma, beta, rows, C);
}

void sdgp_batchnorm_backward_apply(float *dx, float *dgamma_all, float *dbeta_all, const double *sums, double total,
                                   const float *dy, const float *x, const float *mean, const float *rstd,
                                   const float *gamma, const float *beta, int64_t rows, int C) {
    /* the whole batch's dgamma and dbeta, rounded to float as a single process rounds them */
    for (int c = 0; c < C; c++) {
        dbeta_all[c] = (float)sums[c];
        dgamma_all[c] = (float)(sums[C + c] * rstd[c]);
    }
    backward_apply(dx, dgamma_all, dbeta_all, total, dy, x, mean, rstd, gamma, beta, rows, C);
}

void sdgp_batchnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                             const float *mean, const float *rstd, const float *gamma, int64_t rows, int C) {
    backward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, NULL, rows, C);
}

void sdgp_batchnorm_relu_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                  const float *mean, const float *rstd, const float *gamma, const float *beta,
                                  int64_t rows, int C) {
    backward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma, beta, rows, C);
}
