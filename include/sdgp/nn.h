/* sdgp: the layers of the training engine, as plain forward/backward functions (llm.c style).
 *
 * Outputs come first. Activations are NHWC fp32, viewed as rows x C (rows = B*H*W) where
 * channels matter. Parameter gradients are OVERWRITTEN (every parameter is used once per step).
 * Backward functions may be called with dx == dy where noted ("in place ok").
 * Threads: OpenMP parallel loops with the ambient team size (omp_set_num_threads). Every
 * function here gives bitwise the same results for any thread count (reductions run in an order
 * fixed by the shapes alone).
 * None of these allocate or fail: shapes are validated once, when a model is built. */
#ifndef SDGP_NN_H
#define SDGP_NN_H

#include <stddef.h>
#include <stdint.h>

#include "sdgp/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- BatchNorm2d over rows x C ----
 * Training: batch mean and biased variance per channel normalise x; running stats are updated
 * in PyTorch's way: running = (1 - momentum) running + momentum * stat (unbiased var, rows/(rows-1)).
 * mean, rstd (C each) are saved for backward. */
SDGP_API void sdgp_batchnorm_forward_train(float *y, float *mean, float *rstd, float *running_mean, float *running_var,
                                           const float *x, const float *gamma, const float *beta, int64_t rows, int C,
                                           float momentum, float eps);
SDGP_API void sdgp_batchnorm_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var, int64_t rows, int C,
                                          float eps);
/* dx (in place ok: dx == dy), dgamma, dbeta from dy, x and the saved mean, rstd. */
SDGP_API void sdgp_batchnorm_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                      const float *mean, const float *rstd, const float *gamma, int64_t rows, int C);

/* BatchNorm followed by ReLU, fused (one pass fewer each way); bitwise equal to the two layers.
 * Forward: y = relu(bn(x)). Backward: dy is dL/d(relu output), x the BatchNorm input; the ReLU
 * mask is recomputed from x, mean, rstd, gamma and beta exactly as the forward computed y, so y
 * need not be kept for backward; dx (in place ok: dx == dy), dgamma, dbeta as above. */
SDGP_API void sdgp_batchnorm_relu_forward_train(float *y, float *mean, float *rstd, float *running_mean,
                                                float *running_var, const float *x, const float *gamma,
                                                const float *beta, int64_t rows, int C, float momentum, float eps);
/* Inference: y = relu(bn_eval(x)) from the running statistics in one pass; bitwise
 * sdgp_batchnorm_forward_eval followed by sdgp_relu_forward. */
SDGP_API void sdgp_batchnorm_relu_forward_eval(float *y, const float *x, const float *gamma, const float *beta,
                                               const float *running_mean, const float *running_var, int64_t rows,
                                               int C, float eps);
/* y = relu(bn(x)) again from the statistics the training forward saved (mean, rstd) and the same
 * gamma, beta: bitwise the forward's y, so a model can drop y after forward and recompute it for
 * a weight gradient. */
SDGP_API void sdgp_batchnorm_relu_recompute(float *y, const float *x, const float *mean, const float *rstd,
                                            const float *gamma, const float *beta, int64_t rows, int C);
/* The same without the ReLU: bitwise the y of sdgp_batchnorm_forward_train. */
SDGP_API void sdgp_batchnorm_recompute(float *y, const float *x, const float *mean, const float *rstd, const float *gamma,
                                       const float *beta, int64_t rows, int C);
SDGP_API void sdgp_batchnorm_relu_backward(float *dx, float *dgamma, float *dbeta, const float *dy, const float *x,
                                           const float *mean, const float *rstd, const float *gamma, const float *beta,
                                           int64_t rows, int C);

/* ---- BatchNorm over a batch split between processes (data-parallel training, --sync-bn) ----
 * Each process holds `rows` of the batch. Forward: sdgp_batchnorm_forward_stats writes this
 * process's sums (2C + 1 doubles: sum x per channel, sum x^2 per channel, rows); the caller adds
 * them over processes (an allreduce), and sdgp_batchnorm_forward_train_sums normalises with the
 * statistics of the whole batch (relu: fused ReLU), saving mean and rstd and updating the running
 * statistics as sdgp_batchnorm_forward_train does for the whole batch at once. Backward:
 * sdgp_batchnorm_backward_sums writes this process's dgamma and dbeta (its share: summed over
 * processes they give the whole batch's) and its sums (2C doubles: sum dy, sum dy (x - mean));
 * the caller adds the sums over processes, and sdgp_batchnorm_backward_apply computes dx (in place
 * ok) from them and `total`, the whole batch's rows, writing the whole batch's dgamma and dbeta
 * into dgamma_all, dbeta_all (C floats each). beta != NULL: the ReLU of the fused forward. Results
 * match a single process on the whole batch up to the rounding of the sums' order. */
SDGP_API void sdgp_batchnorm_forward_stats(double *sums, const float *x, int64_t rows, int C);
SDGP_API void sdgp_batchnorm_forward_train_sums(float *y, float *mean, float *rstd, float *running_mean,
                                                float *running_var, const double *sums, const float *x,
                                                const float *gamma, const float *beta, int64_t rows, int C,
                                                float momentum, float eps, int relu);
SDGP_API void sdgp_batchnorm_backward_sums(double *sums, float *dgamma, float *dbeta, const float *dy, const float *x,
                                           const float *mean, const float *rstd, const float *gamma, const float *beta,
                                           int64_t rows, int C);
SDGP_API void sdgp_batchnorm_backward_apply(float *dx, float *dgamma_all, float *dbeta_all, const double *sums,
                                            double total, const float *dy, const float *x, const float *mean,
                                            const float *rstd, const float *gamma, const float *beta, int64_t rows,
                                            int C);

/* ---- ReLU (in place ok) ---- NaN propagates; backward masks by the forward OUTPUT y (y > 0). */
SDGP_API void sdgp_relu_forward(float *y, const float *x, size_t n);
SDGP_API void sdgp_relu_backward(float *dx, const float *dy, const float *y, size_t n);

/* ---- 2x2 max pool, stride 2, floor (odd H/W drop the last row/col, as PyTorch) ----
 * x: B x H x W x C, y: B x H/2 x W/2 x C, arg (same count as y): which of the 4 won (0..3,
 * first maximum wins). backward overwrites all of dx (zeros where nothing flowed). */
SDGP_API void sdgp_maxpool2_forward(float *y, uint8_t *arg, const float *x, int B, int H, int W, int C);
SDGP_API void sdgp_maxpool2_backward(float *dx, const float *dy, const uint8_t *arg, int B, int H, int W, int C);

/* ---- k x k max pool, stride s, padding p (padded positions never win, as PyTorch's -inf), floor ----
 * x: B x H x W x C -> y, arg: B x Ho x Wo x C, Ho = (H + 2p - k) / s + 1 (likewise Wo); arg = kh * k + kw
 * of the winner in its window (first maximum in row-major order; NaN wins). k <= 15, p <= k / 2.
 * backward overwrites all of dx; overlapping windows (s < k) add their gradients, image by image in
 * a fixed order, so results are bitwise independent of the thread count. */
SDGP_API void sdgp_maxpool_forward(float *y, uint8_t *arg, const float *x, int B, int H, int W, int C, int k, int stride,
                                   int pad);
SDGP_API void sdgp_maxpool_backward(float *dx, const float *dy, const uint8_t *arg, int B, int H, int W, int C, int k,
                                    int stride, int pad);

/* ---- global max pool: y[b,c] = max over H*W of x[b,:,:,c]; arg = winning position (first) ---- */
SDGP_API void sdgp_global_maxpool_forward(float *y, int32_t *arg, const float *x, int B, int HW, int C);
SDGP_API void sdgp_global_maxpool_backward(float *dx, const float *dy, const int32_t *arg, int B, int HW, int C);

/* ---- global average pool: y[b,c] = (sum over H*W of x[b,:,:,c]) / HW, summed in position order ----
 * backward overwrites all of dx with dy[b,c] / HW. */
SDGP_API void sdgp_global_avgpool_forward(float *y, const float *x, int B, int HW, int C);
SDGP_API void sdgp_global_avgpool_backward(float *dx, const float *dy, int B, int HW, int C);

/* ---- elementwise ---- */
SDGP_API void sdgp_add_forward(float *y, const float *a, const float *b, size_t n); /* y = a + b (y may alias a or b) */
/* y = relu(a + b) (y may alias a or b): a residual block's output; backward is sdgp_relu_backward on y. */
SDGP_API void sdgp_add_relu_forward(float *y, const float *a, const float *b, size_t n);
SDGP_API void sdgp_accumulate(float *y, const float *x, size_t n);                  /* y += x */
SDGP_API void sdgp_scale_forward(float *y, const float *x, float s, size_t n);      /* y = s x (in place ok) */

/* ---- linear: y[B,out] = x[B,in] W^T (+ b); W is out x in (PyTorch) ---- */
SDGP_API void sdgp_linear_forward(float *y, const float *x, const float *w, const float *b, int B, int in, int out);
/* dx (nullable), dw, db (nullable) overwritten. */
SDGP_API void sdgp_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x, const float *w,
                                   int B, int in, int out);

/* ---- softmax cross-entropy with label smoothing (PyTorch's definition) ----
 * loss_b = -sum_k q_k log softmax(z_b)_k, q = (1 - s) onehot(label) + s / K.
 * Returns the mean loss over B; dlogits (nullable) = (softmax - q) / B; correct (nullable)
 * receives the number of rows whose argmax (first maximum) equals the label. A label outside
 * 0..K-1 makes the loss NaN. Computed in double, with the row maximum subtracted. */
SDGP_API double sdgp_softmax_xent(float *dlogits, int *correct, const float *logits, const int32_t *labels, int B,
                                  int K, float smoothing);
/* The same for B rows of a larger batch of `total` rows (data parallel: this process's share):
 * dlogits = (softmax - q) / total, and the return value is the sum of the B rows' losses / total,
 * so that summed over the processes both are what a single process computes on the whole batch. */
SDGP_API double sdgp_softmax_xent_part(float *dlogits, int *correct, const float *logits, const int32_t *labels, int B,
                                       int K, float smoothing, int total);

/* ---- SGD with momentum, PyTorch semantics ----
 * g' = g + wd w;  v = momentum v + g';  step = nesterov ? g' + momentum v : v;  w -= lr step.
 * (PyTorch's first step sets v = g'; with v initialised to 0 that is the same.)
 * momentum == 0: w -= lr g' and v is not used (may be NULL). */
SDGP_API void sdgp_sgd_update(float *w, float *v, const float *g, size_t n, float lr, float momentum, float wd,
                              int nesterov);

/* ---- learning-rate schedules, per iteration ---- */
typedef enum {
    SDGP_SCHED_REFERENCE = 0, /* linear from peak*start_factor at 0 to peak at warmup, then linear to 0 at total */
    SDGP_SCHED_STEP = 1,      /* peak * gamma^(floor(step / step_size)) */
    SDGP_SCHED_COSINE = 2,    /* linear warm-up as above, then peak * (1 + cos(pi t)) / 2 */
    SDGP_SCHED_CONSTANT = 3
} sdgp_sched_kind;

typedef struct {
    sdgp_sched_kind kind;
    float peak;
    float start_factor;   /* reference/cosine: lr at step 0 = peak * start_factor (1e-4) */
    int64_t warmup_steps; /* reference/cosine */
    int64_t total_steps;
    int64_t step_size;    /* step schedule */
    float gamma;          /* step schedule */
} sdgp_schedule;

/* Steps < 0 count as 0; REFERENCE and COSINE give 0 from total_steps on. */
SDGP_API float sdgp_schedule_lr(const sdgp_schedule *s, int64_t step);

/* ---- N:M sparse weights: S-STE and SR-STE (docs/sparse-weights.md has the formulas) ----
 * A weight tensor is viewed as cout x cin x taps (OIHW conv: taps = kh*kw; linear: taps = 1).
 * Its groups are m consecutive input channels: per (output channel, tap) (TAP: a unit is one
 * weight, its size |w|) or per output channel for all taps together (KERNEL: a unit is the taps
 * of one input channel, its size the L2 norm over the taps; one mask for the whole kernel, the
 * form a Winograd weight transform keeps) or per block of 16 consecutive output channels for all
 * taps together (BLOCK16: a unit is one input channel's taps in all 16 output channels, its size
 * the L2 norm over them; the last block holds what remains of cout; the form a GEMM kernel can
 * skip at speed, bench/nm_weight_gemm_micro.c), or of 32 (BLOCK32: the same over 32 output channels,
 * the form whose GEMM is FMA-bound). COUT turns TAP's groups around: m consecutive output channels
 * at each (input channel, tap), a unit one weight (a direct kernel vectorised over pixels shares
 * each loaded input vector by the n kept output channels of a group). In each group the n largest
 * units are kept (ties: the lower channel), t is the (n+1)-th largest size (0 when n == m), and
 *   S-STE:  out = scale * w * max(0, 1 - t / size)   (TAP, COUT: scale * sign(w) * max(|w| - t, 0))
 *   SR-STE: out = scale * w for the kept units
 * and every other unit is 0. S-STE is continuous in w: a unit that enters or leaves the kept set
 * does so at value 0. */
typedef enum { SDGP_WEIGHTS_DENSE = 0, SDGP_WEIGHTS_SSTE = 1, SDGP_WEIGHTS_SRSTE = 2 } sdgp_weights_kind;
typedef enum {
    SDGP_WGROUP_TAP = 0,
    SDGP_WGROUP_KERNEL = 1,
    SDGP_WGROUP_BLOCK16 = 2,
    SDGP_WGROUP_BLOCK32 = 3,
    SDGP_WGROUP_COUT = 4
} sdgp_weights_group;
/* Names, indexed by the enums and NULL-terminated: "dense", "sste", "srste"; "tap", "kernel", "block16",
 * "block32", "cout". */
extern SDGP_API const char *const sdgp_weights_kind_names[];
extern SDGP_API const char *const sdgp_weights_group_names[];
/* out (cout*cin*taps) from w, as above; 1 <= n <= m, cin % m == 0 (COUT: cout % m == 0; checked by
 * the model).
 * DENSE copies w times scale. Bitwise independent of the thread count. */
/* Output channels sharing one mask: 1 for TAP, KERNEL and COUT, 16 or 32 for the blocks. */
SDGP_API int sdgp_weights_group_block(sdgp_weights_group group);
SDGP_API void sdgp_weights_project(float *out, const float *w, int cout, int cin, int taps, sdgp_weights_kind kind,
                                   sdgp_weights_group group, int n, int m, float scale);
/* S-STE's per-tensor scale beta = <w, s> / <s, s> (s = the projection with scale 1), in double in
 * a fixed order; 1 when s is all zero. */
SDGP_API double sdgp_weights_sste_beta(const float *w, const float *s, size_t count);
/* SR-STE's gradient term on the dense weights: grad += lambda * (w - w_masked), i.e.
 * lambda * (1 - mask) * w, with w_masked the SR-STE projection (scale 1) the forward used. */
SDGP_API void sdgp_weights_srste_grad(float *grad, const float *w, const float *w_masked, size_t count, float lambda);

#ifdef __cplusplus
}
#endif
#endif
