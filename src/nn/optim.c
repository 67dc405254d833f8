/* SGD with momentum, exactly torch.optim.SGD (dampening 0):
 *   g' = g + wd w;  v = momentum v + g';  step = nesterov ? g' + momentum v : v;  w -= lr step.
 * With momentum == 0 PyTorch keeps no buffer and steps by g'; v may then be NULL. Elementwise,
 * so bitwise independent of the thread count. */
#include "sdgp/nn.h"

void sdgp_sgd_update(float *w, float *v, const float *g, size_t n, float lr, float momentum, float wd, int nesterov) {
    int par = n >= (1u << 15);
    if (momentum == 0.0f) {
#pragma omp parallel for simd schedule(static) if (par)
        for (size_t i = 0; i < n; i++) w[i] -= lr * (g[i] + wd * w[i]);
        return;
    }
#pragma omp parallel for simd schedule(static) if (par)
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] + wd * w[i];
        float vi = momentum * v[i] + gi;
        v[i] = vi;
        w[i] -= lr * (nesterov ? gi + momentum * vi : vi);
    }
}
