/* Convolution geometry and the naive backward-data loop (the test oracle of every kernel).
 *
 * Index convention (PyTorch's): output pixel (ho, wo) reads input pixel
 *   h = ho*stride - pad + i,  w = wo*stride - pad + j   for tap (i, j) of the kh x kw kernel,
 * and taps that fall outside the image read zero padding. Backward-data sends the gradient back
 * along the same arrows: dD[h, w, c] += dO[ho, wo, k] * w[k, c, i, j]. */
#include <stdint.h>
#include <string.h>

#include "sdgp/conv.h"

/* a*b*c*d <= limit without overflow (all factors >= 1). */
static int product_fits(int64_t limit, int64_t a, int64_t b, int64_t c, int64_t d) {
    int64_t p = a;
    if (b > limit / p) return 0;
    p *= b;
    if (c > limit / p) return 0;
    p *= c;
    return d <= limit / p;
}

sdgp_status sdgp_conv_geom_init(sdgp_conv_geom *g, int B, int H, int W, int Cin, int Cout, int kh, int kw,
                                int stride, int pad, sdgp_error *err) {
    if (!g) return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: output struct is NULL");
    const struct { const char *name; int v; } pos[] = {{"B", B},     {"H", H},   {"W", W},   {"Cin", Cin},
                                                       {"Cout", Cout}, {"kh", kh}, {"kw", kw}, {"stride", stride}};
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1) return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: %s=%d must be >= 1", pos[i].name, pos[i].v);
    if (pad < 0) return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: pad=%d must be >= 0", pad);
    if (pad >= kh || pad >= kw)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: pad=%d must be smaller than the kernel %dx%d", pad, kh, kw);
    /* int64 arithmetic: H + 2 pad cannot overflow there. */
    int64_t hp = (int64_t)H + 2 * (int64_t)pad, wp = (int64_t)W + 2 * (int64_t)pad;
    if (hp < kh || wp < kw)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: kernel %dx%d is larger than the padded input %lldx%lld", kh,
                         kw, (long long)hp, (long long)wp);
    int64_t ho = (hp - kh) / stride + 1, wo = (wp - kw) / stride + 1;
    /* Every tensor's byte size must fit (ptrdiff_t/int64 indexing everywhere). */
    const int64_t limit = INT64_MAX / 4;
    if (!product_fits(limit, B, H, W, Cin))
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: input %dx%dx%dx%d is too large", B, H, W, Cin);
    if (!product_fits(limit, B, ho, wo, Cout))
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: output %dx%lldx%lldx%d is too large", B, (long long)ho,
                         (long long)wo, Cout);
    if (!product_fits(limit, Cout, Cin, kh, kw))
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: weights %dx%dx%dx%d are too large", Cout, Cin, kh, kw);
    *g = (sdgp_conv_geom){.B = B, .H = H, .W = W, .Cin = Cin, .Cout = Cout, .kh = kh, .kw = kw, .stride = stride,
                          .pad = pad, .Ho = (int)ho, .Wo = (int)wo, .groups = 1};
    return SDGP_OK;
}

sdgp_status sdgp_conv_geom_set_groups(sdgp_conv_geom *g, int groups, sdgp_error *err) {
    if (!g) return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: NULL");
    if (groups < 1 || g->Cin % groups || g->Cout % groups)
        return sdgp_fail(err, SDGP_ERR_INVALID, "conv geometry: groups=%d must be >= 1 and divide Cin=%d and Cout=%d", groups,
                         g->Cin, g->Cout);
    g->groups = groups;
    return SDGP_OK;
}

/* dD (B x H x W x Cin) from dense dO (B x Ho x Wo x Cout) and w (Cout x Cin x kh x kw).
 * Seven loops, accumulation in double so the oracle is more exact than any kernel it checks. */
void sdgp_conv_backward_data_naive(float *dD, const float *dO, const float *w, const sdgp_conv_geom *g) {
    const int64_t G = g->groups > 1 ? g->groups : 1;
    const int64_t Cin = g->Cin, Cout = g->Cout, kh = g->kh, kw = g->kw, cig = Cin / G, cog = Cout / G;
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t h = 0; h < g->H; h++)
            for (int64_t x = 0; x < g->W; x++)
                for (int64_t c = 0; c < Cin; c++) {
                    double acc = 0.0;
                    for (int64_t i = 0; i < kh; i++) {
                        int64_t th = h + g->pad - i; /* = ho * stride */
                        if (th < 0 || th % g->stride) continue;
                        int64_t ho = th / g->stride;
                        if (ho >= g->Ho) continue;
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t tw = x + g->pad - j;
                            if (tw < 0 || tw % g->stride) continue;
                            int64_t wo = tw / g->stride;
                            if (wo >= g->Wo) continue;
                            const float *o = dO + ((b * g->Ho + ho) * g->Wo + wo) * Cout;
                            /* input channel c meets the output channels of its group, through its
                             * index within the group (weights Cout x Cin/G x kh x kw) */
                            for (int64_t k = c / cig * cog; k < (c / cig + 1) * cog; k++)
                                acc += (double)o[k] * (double)w[((k * cig + c % cig) * kh + i) * kw + j];
                        }
                    }
                    dD[((b * g->H + h) * g->W + x) * Cin + c] = (float)acc;
                }
}

void sdgp_conv_forward_naive(float *y, const float *x, const float *w, const sdgp_conv_geom *g) {
    const int64_t G = g->groups > 1 ? g->groups : 1;
    const int64_t Cin = g->Cin, Cout = g->Cout, kh = g->kh, kw = g->kw, cig = Cin / G, cog = Cout / G;
    for (int64_t b = 0; b < g->B; b++)
        for (int64_t ho = 0; ho < g->Ho; ho++)
            for (int64_t wo = 0; wo < g->Wo; wo++)
                for (int64_t k = 0; k < Cout; k++) {
                    double acc = 0.0;
                    for (int64_t i = 0; i < kh; i++) {
                        int64_t h = ho * g->stride + i - g->pad;
                        if (h < 0 || h >= g->H) continue;
                        for (int64_t j = 0; j < kw; j++) {
                            int64_t xw = wo * g->stride + j - g->pad;
                            if (xw < 0 || xw >= g->W) continue;
                            const float *src = x + ((b * g->H + h) * g->W + xw) * Cin + k / cog * cig;
                            for (int64_t c = 0; c < cig; c++)
                                acc += (double)src[c] * (double)w[((k * cig + c) * kh + i) * kw + j];
                        }
                    }
                    y[((b * g->Ho + ho) * g->Wo + wo) * Cout + k] = (float)acc;
                }
}
