/* Softmax cross-entropy with label smoothing, as torch.nn.CrossEntropyLoss(label_smoothing=s)
 * with mean reduction:  loss_b = (1 - s) (-log p_label) + s * mean_k (-log p_k).
 *
 * Computed in double with the max subtracted (log-sum-exp), one row after another: B x K is
 * tiny (512 x 10), and a serial sum over rows keeps the loss bitwise reproducible. */
#include "sdgp/nn.h"

#include <math.h>

/* A label outside 0..K-1 makes that row's loss NaN (no error path here: labels are checked when
 * a data set is loaded); its gradient then only carries the smoothing part. */
double sdgp_softmax_xent(float *dlogits, int *correct, const float *logits, const int32_t *labels, int B, int K,
                         float smoothing) {
    return sdgp_softmax_xent_part(dlogits, correct, logits, labels, B, K, smoothing, B);
}

double sdgp_softmax_xent_part(float *dlogits, int *correct, const float *logits, const int32_t *labels, int B, int K,
                              float smoothing, int total) {
    double loss_sum = 0.0;
    int ncorrect = 0;
    double s = smoothing, q_off = s / K, q_on = 1.0 - s + s / K;
    for (int b = 0; b < B; b++) {
        const float *z = logits + (size_t)b * K;
        int label = labels[b];
        int valid = label >= 0 && label < K;
        int argmax = 0;
        for (int k = 1; k < K; k++)
            if (z[k] > z[argmax]) argmax = k;
        double zmax = z[argmax], sumexp = 0.0, sumz = 0.0;
        for (int k = 0; k < K; k++) {
            sumexp += exp((double)z[k] - zmax);
            sumz += z[k];
        }
        double lse = zmax + log(sumexp);
        /* -sum_k q_k log p_k = lse - sum_k q_k z_k */
        double loss = valid ? lse - (1.0 - s) * z[label] - s * sumz / K : NAN;
        loss_sum += loss;
        ncorrect += valid && argmax == label;
        if (dlogits) {
            float *g = dlogits + (size_t)b * K;
            for (int k = 0; k < K; k++) {
                double p = exp((double)z[k] - lse);
                g[k] = (float)((p - (k == label ? q_on : q_off)) / total);
            }
        }
    }
    if (correct) *correct = ncorrect;
    return loss_sum / total;
}
