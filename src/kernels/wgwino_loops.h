/* The dY transform of the Winograd weight gradient (wgwino.c): row a of A dY A^T for each 4x4 tile
 * of dY, with A the transpose of F(4x4,3x3)'s A^T (spfwd_wino_loops.h). Written once in plain C and
 * compiled per ISA: wgwino_ref.c and wgwino_avx2.c include this file with WGWINO_DY set to the name
 * they export.
 *
 * Why every path gives the same bits: the coefficients are 1, 2, 4 and 8, so every product is
 * exact, and an FMA that a compiler contracts "s * x + y" into rounds as the separate operations
 * do; the parentheses fix the order of the additions.
 *
 *   A = [[1,0,0,0],[1,1,1,1],[1,-1,1,-1],[1,2,4,8],[1,-2,4,-8],[0,0,0,1]]  (6 x 4) */
#include "kernels/wgwino_internal.h"

/* Row e of A applied to z0 .. z3. */
#define AY_0(z0, z1, z2, z3) (z0)
#define AY_1(z0, z1, z2, z3) (((z0) + (z2)) + ((z1) + (z3)))
#define AY_2(z0, z1, z2, z3) (((z0) + (z2)) - ((z1) + (z3)))
#define AY_3(z0, z1, z2, z3) (((z0) + 4.0f * (z2)) + 2.0f * ((z1) + 4.0f * (z3)))
#define AY_4(z0, z1, z2, z3) (((z0) + 4.0f * (z2)) - 2.0f * ((z1) + 4.0f * (z3)))
#define AY_5(z0, z1, z2, z3) (z3)

/* One tile's row a, all channels: d are the tile's 16 pixel rows (row-major, C floats each), out
 * the 6 elements (a, 0 .. 5). Combined along y first (row a of A), then along x. */
#define DY_ROW(A)                                                                                                      \
    static void dy_row##A(float *const *out, const float *const *d, int64_t C) {                                      \
        _Pragma("GCC ivdep") for (int64_t c = 0; c < C; c++) {                                                         \
            float r[4];                                                                                                \
            for (int j = 0; j < 4; j++) r[j] = AY_##A(d[j][c], d[4 + j][c], d[8 + j][c], d[12 + j][c]);               \
            out[0][c] = AY_0(r[0], r[1], r[2], r[3]);                                                                  \
            out[1][c] = AY_1(r[0], r[1], r[2], r[3]);                                                                  \
            out[2][c] = AY_2(r[0], r[1], r[2], r[3]);                                                                  \
            out[3][c] = AY_3(r[0], r[1], r[2], r[3]);                                                                  \
            out[4][c] = AY_4(r[0], r[1], r[2], r[3]);                                                                  \
            out[5][c] = AY_5(r[0], r[1], r[2], r[3]);                                                                  \
        }                                                                                                              \
    }
DY_ROW(0)
DY_ROW(1)
DY_ROW(2)
DY_ROW(3)
DY_ROW(4)
DY_ROW(5)

typedef void (*dy_row_fn)(float *const *out, const float *const *d, int64_t C);

void WGWINO_DY(const spfwd_wino_shape *s, float *out, int64_t ostride, int64_t tstride, const float *dy,
               const float *zrow, int64_t b, int a) {
    static const dy_row_fn rows[6] = {dy_row0, dy_row1, dy_row2, dy_row3, dy_row4, dy_row5};
    const sdgp_conv_geom *g = &s->g;
    const int64_t C = g->Cout;
    const float *d[16];
    float *o[6];
    for (int ty = 0; ty < s->th; ty++)
        for (int tx = 0; tx < s->tw; tx++) {
            for (int u = 0; u < 4; u++)
                for (int v = 0; v < 4; v++) {
                    const int h = 4 * ty + u, w = 4 * tx + v;
                    d[u * 4 + v] = h < g->Ho && w < g->Wo ? dy + ((b * g->Ho + h) * g->Wo + w) * C : zrow;
                }
            const int64_t t = (int64_t)ty * s->tw + tx;
            for (int bb = 0; bb < 6; bb++) o[bb] = out + bb * ostride + t * tstride;
            rows[a](o, d, C);
        }
}
