/* The Winograd weight gradient's portable loops (contracts in wgwino_internal.h). fmaf keeps one
 * rounding per multiply-add, as the vector FMA does, so this path is the others' bitwise oracle. */
#include <math.h>

#include "kernels/wgwino_internal.h"

#define WGWINO_DY wgwino_dy_ref
#include "kernels/wgwino_loops.h"

void wgwino_gemm_ref(float *m, int64_t ldm, const float *y, int64_t ldy, const float *v, int64_t ldv, int64_t K, int mr,
                     int nc, int acc) {
    for (int i = 0; i < mr; i++)
        for (int j = 0; j < nc; j++) {
            float s = acc ? m[i * ldm + j] : 0.0f;
            for (int64_t t = 0; t < K; t++) s = fmaf(y[t * ldy + i], v[t * ldv + j], s);
            m[i * ldm + j] = s;
        }
}
