/* Epoch permutations and batch building (normalise + augment), all driven by Philox so that a
 * batch is a pure function of (dataset, indices, augment settings, seed, step). */
#include <omp.h>
#include <string.h>

#include "data/data_internal.h"

/* Philox "layer" ids of the data pipeline: far above any network layer index used by pruning, so
 * the keys never coincide with a layer's mask keys for the same (seed, step). */
enum { RNG_LAYER_PERMUTATION = 0x0DA7A001, RNG_LAYER_AUGMENT = 0x0DA7A002 };

void rng_init(rng_stream *r, sdgp_philox_key key, uint64_t group) {
    r->key = key;
    r->group = group;
    r->block = 0;
    r->pos = 4; /* empty: the first rng_u32 draws block 0 */
}

uint32_t rng_u32(rng_stream *r) {
    if (r->pos == 4) {
        r->buf = sdgp_philox_draw(r->key, r->group, r->block++);
        r->pos = 0;
    }
    return r->buf.v[r->pos++];
}

static uint64_t rng_u64(rng_stream *r) {
    uint64_t lo = rng_u32(r);
    return (uint64_t)rng_u32(r) << 32 | lo;
}

uint64_t rng_below(rng_stream *r, uint64_t range) {
    /* Lemire, "Fast random integer generation in an interval" (2019): the high word of x*range is
     * uniform once the low words below 2^64 mod range are rejected. */
    unsigned __int128 m = (unsigned __int128)rng_u64(r) * range;
    if ((uint64_t)m < range) {
        uint64_t threshold = (0 - range) % range;
        while ((uint64_t)m < threshold) m = (unsigned __int128)rng_u64(r) * range;
    }
    return (uint64_t)(m >> 64);
}

void sdgp_epoch_permutation(int64_t *perm, int64_t n, uint64_t seed, uint64_t epoch) {
    for (int64_t i = 0; i < n; i++) perm[i] = i;
    sdgp_philox_key key = sdgp_philox_make_key(seed, epoch, RNG_LAYER_PERMUTATION);
    /* Fisher-Yates, position i drawing from its own stream (group i). */
    for (int64_t i = n - 1; i > 0; i--) {
        rng_stream r;
        rng_init(&r, key, (uint64_t)i);
        int64_t j = (int64_t)rng_below(&r, (uint64_t)i + 1);
        int64_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

/* Normalisation table per channel: lut[k][v] = (v/255 - mean[k]) / std[k], rounded once from
 * double, so the result is the correctly rounded value whatever the compiler does. */
typedef struct {
    float lut[4][256];
} norm_table;

static void norm_table_init(norm_table *t, const sdgp_augment *aug, int c) {
    for (int k = 0; k < c && k < 4; k++) {
        double mean = aug ? aug->mean[k] : 0.0, std = aug ? aug->std[k] : 1.0;
        for (int v = 0; v < 256; v++) t->lut[k][v] = (float)(((double)v / 255.0 - mean) / std);
    }
}

/* One image of the batch, slot i: translate (content shifted by (dy, dx), uncovered pixels 0),
 * then horizontal flip, then cutout. The five draws are always made, in this order, whatever is
 * switched on, so turning cutout on does not change which images get flipped. */
static void build_image(float *xo, int32_t *yo, const sdgp_dataset *ds, int64_t index, const norm_table *nt,
                        const sdgp_augment *aug, sdgp_philox_key key, int slot, int mirror) {
    const int h = ds->h, w = ds->w, c = ds->c;
    rng_stream r;
    rng_init(&r, key, (uint64_t)slot);
    int t = aug && aug->translate > 0 ? aug->translate : 0;
    int dy = (int)rng_below(&r, 2 * (uint64_t)t + 1) - t;
    int dx = (int)rng_below(&r, 2 * (uint64_t)t + 1) - t;
    int flip = (int)(rng_u32(&r) >> 31) & (aug && aug->flip);
    int cy = (int)rng_below(&r, (uint64_t)h), cx = (int)rng_below(&r, (uint64_t)w);
    flip ^= mirror != 0;

    const uint8_t *img = ds->images + (size_t)index * h * w * c;
    for (int y = 0; y < h; y++) {
        int sy = y + dy;
        float *row = xo + (size_t)y * w * c;
        for (int x = 0; x < w; x++) {
            int sx = (flip ? w - 1 - x : x) + dx;
            float *px = row + (size_t)x * c;
            if (sy < 0 || sy >= h || sx < 0 || sx >= w) {
                for (int k = 0; k < c; k++) px[k] = 0.0f;
                continue;
            }
            const uint8_t *src = img + ((size_t)sy * w + sx) * c;
            for (int k = 0; k < c; k++) px[k] = nt->lut[k][src[k]];
        }
    }
    int s = aug && aug->cutout > 0 ? aug->cutout : 0;
    if (s > 0) {
        int y0 = cy - s / 2, x0 = cx - s / 2;
        int y1 = y0 + s > h ? h : y0 + s, x1 = x0 + s > w ? w : x0 + s;
        if (y0 < 0) y0 = 0;
        if (x0 < 0) x0 = 0;
        for (int y = y0; y < y1; y++)
            for (int x = x0; x < x1; x++) memset(xo + ((size_t)y * w + x) * c, 0, sizeof(float) * c);
    }
    *yo = ds->labels[index];
}

void batch_build_range(float *x, int32_t *y, const sdgp_dataset *ds, const int64_t *idx, int slot0, int i0, int i1,
                       const sdgp_augment *aug, uint64_t seed, uint64_t step, int mirror) {
    norm_table nt;
    norm_table_init(&nt, aug, ds->c);
    sdgp_philox_key key = sdgp_philox_make_key(seed, step, RNG_LAYER_AUGMENT);
    const size_t image = (size_t)ds->h * ds->w * ds->c;
    for (int i = i0; i < i1; i++)
        build_image(x + (size_t)(i - slot0) * image, y + (i - slot0), ds, idx[i - slot0], &nt, aug, key, i, mirror);
}

void sdgp_batch_build(float *x, int32_t *y, const sdgp_dataset *ds, const int64_t *idx, int B,
                      const sdgp_augment *aug, uint64_t seed, uint64_t step, int mirror) {
    /* Static contiguous slices per thread; each image's draws depend only on its slot. */
#pragma omp parallel
    {
        int nth = omp_get_num_threads(), t = omp_get_thread_num();
        int i0 = (int)((int64_t)B * t / nth), i1 = (int)((int64_t)B * (t + 1) / nth);
        batch_build_range(x, y, ds, idx, 0, i0, i1, aug, seed, step, mirror);
    }
}
