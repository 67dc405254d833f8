/* Portable micro-kernel and packing of the sparse weight gradient (contract: spwgrad_internal.h). */
#include <math.h>

#include "kernels/spwgrad_internal.h"

void spwgrad_tile_ref(const spwgrad_tile *t) {
    for (int c = 0; c < t->nc; c++) {
        float *acc = t->acc + c * t->acc_sc;
        const float *x = t->xt + c * t->xt_sc;
        for (int l = 0; l < 16 * t->R; l++) {
            float a = t->fresh ? 0.0f : acc[l];
            for (int s = 0; s < t->ng * t->n; s++) {
                const int64_t e = l / 16 * t->vs + 16 * s + l % 16;
                a = fmaf(t->val[e], x[s / t->n * t->m / 16 * 16 + t->pick[e]], a);
            }
            acc[l] = a;
        }
    }
}
