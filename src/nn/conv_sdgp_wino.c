/* WINOGRAD by sdgp's own kernels, for the CPUs where oneDNN has no Winograd kernel (oneDNN 2.x has
 * one for AVX-512 only): the three passes of 3x3 stride-1 convolutions by F(4x4,3x3), and of 5x5
 * stride-2 ones by space-to-depth into a 3x3 one (below, before conv_sdgp_wino_supports). The forward
 * and the backward-data are the sparse-weight Winograd kernels (src/kernels/spfwd_wino.c) at 1:1,
 * which keep every input channel, so they compute the dense product (src/kernels/spfwd.md has their
 * design); the backward-weights is src/kernels/wgwino.c (wgwino.md). On Zen 3 (AVX2), 2 threads,
 * ResNet-9 w=0.25 at batch 512, against oneDNN's direct kernel, per 3x3 layer with the packing (`build/sdgp_nm_weight_fwd w0.25 3 2 512`,
 * `build/sdgp_nm_weight_data w0.25 3 2 512`, the "W4 4:4" columns): forward 1.16-1.97x on the layers
 * AUTO's rule gives Winograd, backward-data 1.25-1.59x; backward-weights (`build/sdgp_nm_wgrad w0.25 5
 * 2 512`, its "wino" column) 1.6-2.7x, and 3.4-4.4x on w1's layers at batch 64 (wgwino.md).
 *
 * The weights change every step, so every call packs them (U = G g G^T, 0.1-0.7 ms a layer) and
 * then runs. U is the pass's workspace, so the layers of a model share one buffer (38 MB at
 * 512 -> 512 channels); the plan's other buffers (per thread, one work unit's transformed tiles:
 * 1.5 MB at 512 channels) stay its own. The result differs from the direct product by the
 * transforms' rounding (about 1e-6 relative, as oneDNN's Winograd), and it is bitwise the same for
 * every thread count and every ISA path (SDGP_ISA chooses the path, as for the sparse kernels). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "conv_dnnl_internal.h"
#include "kernels/spfwd_internal.h"
#include "kernels/wgwino_internal.h"

/* 1:1 in blocks of 32 output channels: at 4:4 (the same work) the faster block on w1 and w0.25 */
#define DENSE_N 1
#define DENSE_M 1
#define DENSE_BLOCK 32
#define TILE 4

sdgp_status conv_sdgp_wino_order(int *order, sdgp_error *err) {
    const char *env = getenv("SDGP_WINOGRAD");
    *order = 0;
    if (!env || !*env) return SDGP_OK;
    if (!strcmp(env, "sdgp")) *order = 1;
    else if (!strcmp(env, "onednn")) *order = -1;
    else
        return sdgp_fail(err, SDGP_ERR_INVALID,
                         "SDGP_WINOGRAD=%s: unknown Winograd implementation (expected sdgp or onednn, or unset: oneDNN's "
                         "where it has one, else sdgp's)",
                         env);
    return SDGP_OK;
}

/* Space-to-depth. A 5x5 stride-2 convolution with padding 2 is the 3x3 stride-1 one with padding 1
 * on the four phases of its input stacked as channels: with i = 2a + p, j = 2b + q,
 *   y[h][w] = sum W[i][j] x[2h + i - 2][2w + j - 2] = sum over phases (p, q) and a, b < 3 of
 *             W3[(p, q)][a][b] x_pq[h + a - 1][w + b - 1],   x_pq[u][v] = x[2u + p][2v + q],
 * W3[(p, q)][a][b] = W[2a + p][2b + q] (0 where 2a + p or 2b + q is 5). So its three passes run on
 * sdgp's Winograd kernels for the 3x3 one: 36 multiplications per 16 outputs per phase against 25
 * per output direct. The kernels read x (write dx) through the phases in place (spfwd_wino_shape's
 * s2d_in, s2d_out); only the weights are rearranged, per call (Cout x 4 Cin x 9 floats, in the
 * pass's workspace). */
int conv_sdgp_wino_s2d(const sdgp_conv_geom *g) { return g->kh == 5 && g->kw == 5 && g->stride == 2 && g->pad == 2; }

/* phase ph = 2p + q of input channel c: channel ph C + c of the 3x3 conv */
static void s2d_weights(float *w3, const float *w5, int Cout, int C) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < Cout; k++)
        for (int ph = 0; ph < 4; ph++)
            for (int c = 0; c < C; c++)
                for (int a = 0; a < 3; a++)
                    for (int b = 0; b < 3; b++) {
                        const int i = 2 * a + ph / 2, j = 2 * b + ph % 2;
                        w3[(((int64_t)k * 4 + ph) * C + c) * 9 + a * 3 + b] =
                            i < 5 && j < 5 ? w5[((int64_t)k * C + c) * 25 + i * 5 + j] : 0.0f;
                    }
}

/* the gradient of each 5x5 tap is its 3x3 twin's; the twins of the missing taps (i or j = 5) are dropped */
static void s2d_weights_grad(float *dw5, const float *dw3, int Cout, int C) {
#pragma omp parallel for schedule(static)
    for (int k = 0; k < Cout; k++)
        for (int c = 0; c < C; c++)
            for (int i = 0; i < 5; i++)
                for (int j = 0; j < 5; j++)
                    dw5[((int64_t)k * C + c) * 25 + i * 5 + j] =
                        dw3[(((int64_t)k * 4 + (i % 2) * 2 + j % 2) * C + c) * 9 + (i / 2) * 3 + j / 2];
}

/* the plan's working memory (U, or the weight gradient's tiles and M), whole cache lines: the
 * space-to-depth weights follow it in the workspace */
static size_t plan_bytes(const conv_pass *p) {
    return sdgp_align64(p->own_fwd    ? spfwd_wino_u_bytes(p->own_fwd)
                        : p->own_data ? spwdata_u_bytes(p->own_data)
                                      : wgwino_ws_bytes(p->own_wgrad));
}

int conv_sdgp_wino_supports(const conv_ctx *ctx, sdgp_conv_pass pass) {
    (void)pass;
    return ctx->g.groups == 1 && (sdgp_sparse_fwd_wino_supports(&ctx->g) || conv_sdgp_wino_s2d(&ctx->g));
}

sdgp_status conv_sdgp_wino_plan(conv_pass *p, const conv_ctx *ctx, size_t limit, sdgp_error *err) {
    const sdgp_conv_geom *g = &ctx->g;
    sdgp_conv_geom g3 = *g; /* the 3x3 conv the kernels run */
    const int s2d = conv_sdgp_wino_s2d(g);
    sdgp_status st =
        s2d ? sdgp_conv_geom_init(&g3, g->B, (g->H + 1) / 2, (g->W + 1) / 2, 4 * g->Cin, g->Cout, 3, 3, 1, 1, err) : SDGP_OK;
    if (st != SDGP_OK) return st;
    const size_t s2d_bytes = s2d ? sdgp_align64((size_t)g3.Cout * g3.Cin * 9 * sizeof(float)) : 0;
    if (p->pass == SDGP_CONV_FORWARD) {
        st = sdgp_sparse_fwd_create_wino(&p->own_fwd, &g3, DENSE_N, DENSE_M, DENSE_BLOCK, TILE, SDGP_ISA_AUTO, ctx->threads,
                                         err);
        if (st == SDGP_OK && s2d) spfwd_wino_shape_s2d(&p->own_fwd->ws, 1, 0, g->H, g->W);
    } else if (p->pass == SDGP_CONV_BACKWARD_DATA) {
        st = sdgp_sparse_wdata_create(&p->own_data, &g3, DENSE_N, DENSE_M, DENSE_BLOCK, TILE, SDGP_ISA_AUTO, ctx->threads,
                                      err);
        if (st == SDGP_OK && s2d) spfwd_wino_shape_s2d(&p->own_data->ws, 0, 1, g->H, g->W);
    } else {
        /* its chunks of the batch fit what the limit leaves beside the weights (nothing left: a
         * 1-byte limit, the smallest chunks; 0 would mean no limit) */
        const size_t wg_limit = !limit ? 0 : limit > s2d_bytes ? limit - s2d_bytes : 1;
        st = wgwino_create(&p->own_wgrad, &g3, SDGP_ISA_AUTO, ctx->threads, wg_limit, err);
        if (st == SDGP_OK && s2d) wgwino_set_s2d(p->own_wgrad, g->H, g->W);
    }
    if (st != SDGP_OK) {
        conv_sdgp_wino_free(p);
        return st;
    }
    p->own_s2d = s2d;
    p->own_bytes = plan_bytes(p) + s2d_bytes;
    p->algo = SDGP_CONV_WINOGRAD;
    p->chunk = ctx->g.B;
    p->parts = 1; /* slice, name and the oneDNN members serve oneDNN's calls only */
    return SDGP_OK;
}

void conv_sdgp_wino_bind(conv_pass *p, void *ws) {
    if (p->own_fwd) spfwd_wino_borrow_u(p->own_fwd, ws);
    if (p->own_data) spwdata_borrow_u(p->own_data, ws);
    if (p->own_wgrad) wgwino_set_ws(p->own_wgrad, ws);
    if (p->own_s2d) p->own_s2d_w = (float *)((char *)ws + plan_bytes(p));
}

void conv_sdgp_wino_free(conv_pass *p) {
    sdgp_sparse_fwd_destroy(p->own_fwd);
    sdgp_sparse_wdata_destroy(p->own_data);
    wgwino_destroy(p->own_wgrad);
    p->own_fwd = NULL;
    p->own_data = NULL;
    p->own_wgrad = NULL;
    p->own_s2d = 0;
    p->own_s2d_w = NULL;
    p->own_bytes = 0;
}

sdgp_status conv_sdgp_wino_forward(conv_pass *p, float *y, const float *x, const float *w, const float *bias,
                                   sdgp_error *err) {
    if (p->own_s2d) s2d_weights(p->own_s2d_w, w, p->own_fwd->g.Cout, p->own_fwd->g.Cin / 4);
    sdgp_status st = sdgp_sparse_fwd_pack(p->own_fwd, p->own_s2d ? p->own_s2d_w : w, err);
    if (st == SDGP_OK) st = sdgp_sparse_fwd_run(p->own_fwd, y, x, err);
    if (st != SDGP_OK || !bias) return st;
    const sdgp_conv_geom *g = &p->own_fwd->g;
    const int64_t rows = (int64_t)g->B * g->Ho * g->Wo;
    const int C = g->Cout;
#pragma omp parallel for schedule(static) num_threads(p->own_fwd->threads)
    for (int64_t r = 0; r < rows; r++)
        for (int c = 0; c < C; c++) y[r * C + c] += bias[c];
    return SDGP_OK;
}

sdgp_status conv_sdgp_wino_backward_data(conv_pass *p, float *dx, const float *dy, const float *w, sdgp_error *err) {
    if (p->own_s2d) s2d_weights(p->own_s2d_w, w, p->own_data->g.Cout, p->own_data->g.Cin / 4);
    sdgp_status st = sdgp_sparse_wdata_pack(p->own_data, p->own_s2d ? p->own_s2d_w : w, err);
    return st == SDGP_OK ? sdgp_sparse_wdata_run(p->own_data, dx, dy, err) : st;
}

sdgp_status conv_sdgp_wino_backward_weights(conv_pass *p, float *dw, float *dbias, const float *x, const float *dy,
                                            sdgp_error *err) {
    if (!p->own_s2d) return wgwino_run(p->own_wgrad, dw, dbias, x, dy, err);
    sdgp_status st = wgwino_run(p->own_wgrad, p->own_s2d_w, dbias, x, dy, err);
    if (st == SDGP_OK) {
        const sdgp_conv_geom *g3 = wgwino_geom(p->own_wgrad);
        s2d_weights_grad(dw, p->own_s2d_w, g3->Cout, g3->Cin / 4);
    }
    return st;
}
