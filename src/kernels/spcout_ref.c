/* Portable micro-kernel of the cout-form sparse-weight forward (contract: spcout_internal.h): one
 * fp32 FMA chain per output element, subsets and entries in order, as the vector paths. */
#include <math.h>
#include <string.h>

#include "kernels/spcout_internal.h"

void spcout_tile_ref(const spcout_tile *t) {
    if (t->first)
        for (int i = 0; i < t->m; i++)
            for (int j = 0; j < t->J; j++)
                for (int v = 0; v < 2; v++) memset(t->y + i * t->ldr + j * t->yc + v * t->yb, 0, SPCOUT_VL * sizeof(float));
    for (int s = 0; s < t->nsub; s++)
        for (int i = 0, r = 0; i < t->m; i++) {
            if (!(t->sub_bits[s] >> i & 1)) continue;
            for (int j = 0; j < t->J; j++)
                for (int v = 0; v < 2; v++) {
                    float *y = t->y + i * t->ldr + j * t->yc + v * t->yb, acc[SPCOUT_VL];
                    memcpy(acc, y, sizeof acc);
                    const float *e = t->e + (int64_t)t->run[s] * (1 + t->K);
                    for (int q = t->run[s]; q < t->run[s + 1]; q++, e += 1 + t->K) {
                        int32_t off;
                        memcpy(&off, e, sizeof off);
                        const float *x = t->x + off + j * t->S * SPCOUT_XCOL + v * SPCOUT_VL, w = e[1 + r];
                        for (int l = 0; l < SPCOUT_VL; l++) acc[l] = fmaf(w, x[l], acc[l]);
                    }
                    memcpy(y, acc, sizeof acc);
                }
            r++;
        }
}
