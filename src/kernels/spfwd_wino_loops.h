/* The data loops of the sparse-weight forward in the Winograd domain (spfwd_wino.c): the input
 * transform V = B^T d B and the output transform Y = A^T M A of F(2x2,3x3) and F(4x4,3x3), one row
 * a of the transform at a time. Written once in plain C and compiled per ISA: spfwd_ref.c,
 * spfwd_avx2.c and spfwd_avx512.c include this file with SPFWD_WINO_IN / SPFWD_WINO_OUT set to
 * the names they export.
 *
 * Why every path gives the same bits: every multiplication here is by a power of two (exact), and
 * the one coefficient that is not, B^T's 5, is written 4x + x. A compiler that contracts
 * "s * x + y" into an FMA then rounds exactly as the separate operations do, so the ISA flags
 * (FMA or not) cannot change a value, and the parentheses fix the order of the additions.
 *
 * Matrices (Lavin and Gray), for the correlation y[i] = sum_j d[i + j] g[j]:
 *   F(2x2): B^T = [[1,0,-1,0],[0,1,1,0],[0,-1,1,0],[0,1,0,-1]],  A^T = [[1,1,1,0],[0,1,-1,-1]]
 *   F(4x4): B^T = [[4,0,-5,0,1,0],[0,-4,-4,1,1,0],[0,4,-4,-1,1,0],[0,-2,-1,2,1,0],[0,2,-1,-2,1,0],
 *                  [0,4,0,-5,0,1]],
 *           A^T = [[1,1,1,1,1,0],[0,1,-1,2,-2,0],[0,1,1,4,4,0],[0,1,-1,8,-8,1]]
 * (G, used once per step by the packing, is in spfwd_wino.c.) */
#include "kernels/spfwd_internal.h"

/* Row a of B^T applied to x0 .. x(alpha-1). */
#define BT2_0(x0, x1, x2, x3) ((x0) - (x2))
#define BT2_1(x0, x1, x2, x3) ((x1) + (x2))
#define BT2_2(x0, x1, x2, x3) ((x2) - (x1))
#define BT2_3(x0, x1, x2, x3) ((x1) - (x3))
#define BT4_0(x0, x1, x2, x3, x4, x5) ((4.0f * (x0) + (x4)) - (4.0f * (x2) + (x2)))
#define BT4_1(x0, x1, x2, x3, x4, x5) (((x3) + (x4)) - 4.0f * ((x1) + (x2)))
#define BT4_2(x0, x1, x2, x3, x4, x5) (((x4) - (x3)) + 4.0f * ((x1) - (x2)))
#define BT4_3(x0, x1, x2, x3, x4, x5) (((x4) - (x2)) + 2.0f * ((x3) - (x1)))
#define BT4_4(x0, x1, x2, x3, x4, x5) (((x4) - (x2)) - 2.0f * ((x3) - (x1)))
#define BT4_5(x0, x1, x2, x3, x4, x5) ((4.0f * (x1) + (x5)) - (4.0f * (x3) + (x3)))

/* One tile's row a, all channels: d are the 4x4 / 6x6 patch's pixel rows (row-major, Cin floats
 * each), out the alpha elements (a, 0 .. alpha-1). The loop over channels is the vector loop; the
 * patch rows are combined along y first (r_j, row a of B^T), then along x. */
#define IN2_ROW(A)                                                                                                     \
    static void in2_row##A(float *const *out, const float *const *d, int64_t C) {                                     \
        _Pragma("GCC ivdep") for (int64_t c = 0; c < C; c++) {                                                         \
            float r[4];                                                                                                \
            for (int j = 0; j < 4; j++) r[j] = BT2_##A(d[j][c], d[4 + j][c], d[8 + j][c], d[12 + j][c]);               \
            out[0][c] = BT2_0(r[0], r[1], r[2], r[3]);                                                                 \
            out[1][c] = BT2_1(r[0], r[1], r[2], r[3]);                                                                 \
            out[2][c] = BT2_2(r[0], r[1], r[2], r[3]);                                                                 \
            out[3][c] = BT2_3(r[0], r[1], r[2], r[3]);                                                                 \
        }                                                                                                              \
    }
#define IN4_ROW(A)                                                                                                     \
    static void in4_row##A(float *const *out, const float *const *d, int64_t C) {                                     \
        _Pragma("GCC ivdep") for (int64_t c = 0; c < C; c++) {                                                         \
            float r[6];                                                                                                \
            for (int j = 0; j < 6; j++)                                                                                \
                r[j] = BT4_##A(d[j][c], d[6 + j][c], d[12 + j][c], d[18 + j][c], d[24 + j][c], d[30 + j][c]);          \
            out[0][c] = BT4_0(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
            out[1][c] = BT4_1(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
            out[2][c] = BT4_2(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
            out[3][c] = BT4_3(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
            out[4][c] = BT4_4(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
            out[5][c] = BT4_5(r[0], r[1], r[2], r[3], r[4], r[5]);                                                     \
        }                                                                                                              \
    }
IN2_ROW(0)
IN2_ROW(1)
IN2_ROW(2)
IN2_ROW(3)
IN4_ROW(0)
IN4_ROW(1)
IN4_ROW(2)
IN4_ROW(3)
IN4_ROW(4)
IN4_ROW(5)

typedef void (*in_row_fn)(float *const *out, const float *const *d, int64_t C);

/* V_(a, bb) of image b's tiles for every bb: element bb of tile t at v + bb * vstride + t * tstride.
 * Patch pixels outside X (the padding) read p->zrow. Under s2d_in each of the four channel quarters
 * (phases) has its own patch of the Hs x Ws tensor x: pixel (yy, xx) of phase ph is (2yy + ph/2,
 * 2xx + ph%2) there. When Ws is even, phases 2p and 2p + 1 are one run of 2 C/4 floats in x as in
 * V, so they go through one call (at 32 channels a quarter, a call per quarter made the transform
 * slower than the direct convolution it replaces). */
void SPFWD_WINO_IN(const spfwd_wino_shape *p, float *v, int64_t vstride, int64_t tstride, const float *x, int64_t b,
                   int a) {
    static const in_row_fn rows2[4] = {in2_row0, in2_row1, in2_row2, in2_row3};
    static const in_row_fn rows4[6] = {in4_row0, in4_row1, in4_row2, in4_row3, in4_row4, in4_row5};
    const sdgp_conv_geom *g = &p->g;
    const int r = p->r, alpha = r + 2, phases = p->s2d_in ? 4 : 1, pair = p->s2d_in && p->Ws % 2 == 0 ? 2 : 1;
    const int64_t C = g->Cin / phases, H = phases > 1 ? p->Hs : g->H, W = phases > 1 ? p->Ws : g->W;
    const in_row_fn fn = r == 2 ? rows2[a] : rows4[a];
    const float *d[36];
    float *out[6];
    for (int ty = 0; ty < p->th; ty++)
        for (int tx = 0; tx < p->tw; tx++) {
            const int64_t t = (int64_t)ty * p->tw + tx;
            for (int ph = 0; ph < phases; ph += pair) {
                const int dy = phases > 1 ? ph / 2 : 0, dx = phases > 1 ? ph % 2 : 0, step = phases > 1 ? 2 : 1;
                for (int i = 0; i < alpha; i++) {
                    const int yy = r * ty - g->pad + i, sy = step * yy + dy;
                    for (int j = 0; j < alpha; j++) {
                        const int xx = r * tx - g->pad + j, sx = step * xx + dx;
                        d[i * alpha + j] = yy >= 0 && yy < g->H && xx >= 0 && xx < g->W && sy < H && sx < W
                                               ? x + ((b * H + sy) * W + sx) * C
                                               : p->zrow;
                    }
                }
                for (int bb = 0; bb < alpha; bb++) out[bb] = v + bb * vstride + t * tstride + ph * C;
                fn(out, d, pair * C);
            }
        }
}

/* Row a of A^T (.) A: M_(a, bb) (rows of ldm floats, at M + bb * mstride) of the unit's images
 * b0 .. into columns [co0, co0 + ncols) of y, ncols <= 64. First the combination along bb, n_v = sum_bb A^T[v][bb] M_bb,
 * then n_v reaches output row u of the tile with the factor A^T[u][a] (a power of two or 0).
 * store: the unit's first row (a = 1, whose column of A^T has no zero) writes, the others add. */
void SPFWD_WINO_OUT(const spfwd_wino_shape *p, float *y, const float *M, int64_t mstride, int64_t ldm, int64_t b0,
                    int64_t nimg, int a, int co0, int ncols, int store) {
    static const float at2[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
    static const float at4[4][6] = {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0}, {0, 1, -1, 8, -8, 1}};
    const sdgp_conv_geom *g = &p->g;
    const int r = p->r;
    for (int64_t row = 0; row < nimg * p->T; row++) {
        const int64_t b = b0 + row / p->T, t = row % p->T, ty = t / p->tw, tx = t % p->tw;
        const float *m[6];
        for (int bb = 0; bb < r + 2; bb++) m[bb] = M + bb * mstride + row * ldm;
        float n[4][64];
        if (r == 2)
            for (int c = 0; c < ncols; c++) {
                n[0][c] = (m[0][c] + m[1][c]) + m[2][c];
                n[1][c] = (m[1][c] - m[2][c]) - m[3][c];
            }
        else
            for (int c = 0; c < ncols; c++) {
                const float s12 = m[1][c] + m[2][c], d12 = m[1][c] - m[2][c], s34 = m[3][c] + m[4][c], d34 = m[3][c] - m[4][c];
                n[0][c] = (m[0][c] + s12) + s34;
                n[1][c] = d12 + 2.0f * d34;
                n[2][c] = s12 + 4.0f * s34;
                n[3][c] = (d12 + 8.0f * d34) + m[5][c];
            }
        for (int u = 0; u < r; u++) {
            const float s = r == 2 ? at2[u][a] : at4[u][a];
            const int64_t h = r * ty + u;
            if (s == 0.0f || h >= g->Ho) continue;
            for (int vv = 0; vv < r && r * tx + vv < g->Wo; vv++) {
                const int64_t w = r * tx + vv;
                /* the columns' runs that share a destination pixel: all of them, or under s2d_out
                 * each phase's (pixel (2h + ph/2, 2w + ph%2) of the Hs x Ws output) */
                for (int c0 = 0; c0 < ncols;) {
                    int c1 = ncols;
                    float *restrict dst;
                    if (!p->s2d_out)
                        dst = y + ((b * g->Ho + h) * g->Wo + w) * (int64_t)g->Cout + co0;
                    else {
                        const int C = g->Cout / 4, ph = (co0 + c0) / C;
                        const int64_t sy = 2 * h + ph / 2, sx = 2 * w + ph % 2;
                        if ((ph + 1) * C - co0 < c1) c1 = (ph + 1) * C - co0;
                        if (sy >= p->Hs || sx >= p->Ws) {
                            c0 = c1;
                            continue;
                        }
                        dst = y + ((b * p->Hs + sy) * p->Ws + sx) * C + (co0 - ph * C);
                    }
                    const float *restrict src = n[vv];
                    if (store)
                        for (int c = c0; c < c1; c++) dst[c] = s * src[c];
                    else
                        for (int c = c0; c < c1; c++) dst[c] += s * src[c];
                    c0 = c1;
                }
            }
        }
    }
}

