/* Normalisation, augmentation, epoch permutations and the background loader.
 * Oracles: the definitions (normalised value from double arithmetic, shifted / mirrored pixel
 * positions), checked on random images whose pixels make every image and offset distinguishable. */
#include <omp.h>

#include "harness.h"
#include "sdgp/data.h"

/* harness REQUIRE evaluates its condition twice: library calls go through rc_ first. */
static sdgp_status rc_;

enum { H = 12, W = 10, C = 3, N = 200 };

typedef struct {
    sdgp_dataset ds;
    uint8_t img[N * H * W * C];
    uint8_t lab[N];
} fixture;

static fixture *make_ds(uint64_t seed) {
    fixture *f = test_xmalloc(sizeof *f);
    for (size_t i = 0; i < sizeof f->img; i++) f->img[i] = (uint8_t)test_rand_u64(&seed);
    for (int i = 0; i < N; i++) f->lab[i] = (uint8_t)(test_rand_u64(&seed) % 10);
    sdgp_dataset ds = {N, H, W, C, 10, f->img, f->lab};
    f->ds = ds;
    return f;
}

static const sdgp_augment NORM = {{0.25f, 0.5f, 0.75f, 0}, {0.3f, 0.2f, 0.1f, 1}, 0, 0, 0};

/* The normalised value of pixel v of channel k, by definition. */
static float norm(const sdgp_augment *a, int k, uint8_t v) { return (float)(((double)v / 255.0 - a->mean[k]) / a->std[k]); }

/* Expected value of output pixel (y, x, k) of image `img` shifted by (dy, dx) then flipped. */
static float expect_px(const sdgp_augment *a, const uint8_t *img, int dy, int dx, int flip, int y, int x, int k) {
    int sy = y + dy, sx = (flip ? W - 1 - x : x) + dx;
    if (sy < 0 || sy >= H || sx < 0 || sx >= W) return 0.0f;
    return norm(a, k, img[(sy * W + sx) * C + k]);
}

/* 1 if out (H x W x C) equals image img shifted by (dy, dx) and maybe flipped, bitwise. */
static int matches(const float *out, const sdgp_augment *a, const uint8_t *img, int dy, int dx, int flip) {
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++)
            for (int k = 0; k < C; k++) {
                float e = expect_px(a, img, dy, dx, flip, y, x, k);
                if (memcmp(&e, &out[(y * W + x) * C + k], sizeof e) != 0) return 0;
            }
    return 1;
}

static int64_t *iota_idx(int B, int64_t stride) {
    int64_t *idx = test_xmalloc(sizeof(int64_t) * (size_t)B);
    for (int i = 0; i < B; i++) idx[i] = (i * stride + 3) % N;
    return idx;
}

TEST_CASE(normalisation_exact) {
    fixture *f = make_ds(1);
    enum { B = 16 };
    int64_t *idx = iota_idx(B, 7);
    float *x = test_xmalloc(sizeof(float) * B * H * W * C);
    int32_t y[B];
    sdgp_batch_build(x, y, &f->ds, idx, B, &NORM, 42, 0, 0);
    for (int i = 0; i < B; i++) {
        CHECK(matches(x + (size_t)i * H * W * C, &NORM, f->img + idx[i] * H * W * C, 0, 0, 0), "image %d", i);
        CHECK(y[i] == f->lab[idx[i]], "label %d", i);
    }
    /* aug == NULL: x / 255 */
    sdgp_augment unit = {{0, 0, 0, 0}, {1, 1, 1, 1}, 0, 0, 0};
    sdgp_batch_build(x, y, &f->ds, idx, B, NULL, 42, 0, 0);
    CHECK(matches(x, &unit, f->img + idx[0] * H * W * C, 0, 0, 0), "NULL aug is x/255");
    /* mirror flag: every image exactly mirrored */
    sdgp_batch_build(x, y, &f->ds, idx, B, &NORM, 42, 0, 1);
    for (int i = 0; i < B; i++)
        CHECK(matches(x + (size_t)i * H * W * C, &NORM, f->img + idx[i] * H * W * C, 0, 0, 1), "mirror %d", i);
    free(x);
    free(idx);
    free(f);
}

/* Finds the (dy, dx, flip) that explains an augmented image; returns 0 when none does. */
static int explain(const float *out, const sdgp_augment *a, const uint8_t *img, int t, int *dy, int *dx, int *flip) {
    for (int fl = 0; fl < 2; fl++)
        for (int u = -t; u <= t; u++)
            for (int v = -t; v <= t; v++)
                if (matches(out, a, img, u, v, fl)) {
                    *dy = u, *dx = v, *flip = fl;
                    return 1;
                }
    return 0;
}

TEST_CASE(flip_and_translate) {
    fixture *f = make_ds(2);
    enum { B = 64 };
    int64_t *idx = iota_idx(B, 3);
    float *x = test_xmalloc(sizeof(float) * B * H * W * C);
    int32_t y[B];
    /* flip only: each image is the original or its exact mirror, both occur */
    sdgp_augment a = NORM;
    a.flip = 1;
    sdgp_batch_build(x, y, &f->ds, idx, B, &a, 7, 3, 0);
    int flips = 0, flipped[B];
    for (int i = 0; i < B; i++) {
        int dy, dx;
        flipped[i] = -1;
        CHECK(explain(x + (size_t)i * H * W * C, &a, f->img + idx[i] * H * W * C, 0, &dy, &dx, &flipped[i]), "flip image %d", i);
        flips += flipped[i] == 1;
    }
    CHECK(flips > 10 && flips < B - 10, "flipped %d of %d", flips, B);
    /* translate 2 + flip: content shifted by (dy, dx) in [-2, 2]^2, uncovered pixels exactly 0;
     * the offsets spread over the 25 possibilities */
    a.translate = 2;
    sdgp_batch_build(x, y, &f->ds, idx, B, &a, 7, 3, 0);
    int seen[5][5] = {{0}}, distinct = 0;
    flips = 0;
    for (int i = 0; i < B; i++) {
        int dy = 0, dx = 0, fl = 0;
        int ok = explain(x + (size_t)i * H * W * C, &a, f->img + idx[i] * H * W * C, 2, &dy, &dx, &fl);
        CHECK(ok, "translate image %d is no shift/flip of its source", i);
        if (!ok) continue;
        distinct += !seen[dy + 2][dx + 2]++;
        flips += fl;
        /* turning translate on keeps each image's flip decision (fixed draw order) */
        CHECK(fl == flipped[i], "image %d: flip changed when translate was turned on", i);
    }
    CHECK(distinct >= 15, "only %d of 25 offsets used in %d images", distinct, B);
    CHECK(flips > 10 && flips < B - 10, "flipped %d of %d with translate", flips, B);
    free(x);
    free(idx);
    free(f);
}

TEST_CASE(cutout_square) {
    /* A white dataset with mean 0, std 1: every pixel 1.0 except the cutout, which is 0. */
    fixture *f = make_ds(3);
    memset(f->img, 255, sizeof f->img);
    enum { B = 256, S = 4 };
    int64_t *idx = iota_idx(B, 1);
    float *x = test_xmalloc(sizeof(float) * B * H * W * C);
    int32_t y[B];
    sdgp_augment a = {{0, 0, 0, 0}, {1, 1, 1, 1}, 0, 0, S};
    sdgp_batch_build(x, y, &f->ds, idx, B, &a, 9, 1, 0);
    int interior = 0, clipped = 0, ymin = H, ymax = -H, xmin = W, xmax = -W;
    for (int i = 0; i < B; i++) {
        const float *o = x + (size_t)i * H * W * C;
        int y0 = H, y1 = -1, x0 = W, x1 = -1, zeros = 0, bad = 0;
        for (int yy = 0; yy < H; yy++)
            for (int xx = 0; xx < W; xx++)
                for (int k = 0; k < C; k++) {
                    float v = o[(yy * W + xx) * C + k];
                    if (v == 0.0f) {
                        zeros++;
                        if (yy < y0) y0 = yy;
                        if (yy > y1) y1 = yy;
                        if (xx < x0) x0 = xx;
                        if (xx > x1) x1 = xx;
                    } else bad += v != 1.0f;
                }
        int hh = y1 - y0 + 1, ww = x1 - x0 + 1;
        REQUIRE(bad == 0 && zeros > 0, "image %d: %d stray values, %d zeros", i, bad, zeros);
        CHECK(zeros == hh * ww * C, "image %d: zeros are not a filled rectangle", i);
        /* A side is S unless clipped by a border; a clipped side keeps >= S/2 (centre inside). */
        CHECK(hh == S || (hh >= S / 2 && hh < S && (y0 == 0 || y1 == H - 1)), "image %d: height %d at rows %d..%d", i, hh, y0, y1);
        CHECK(ww == S || (ww >= S / 2 && ww < S && (x0 == 0 || x1 == W - 1)), "image %d: width %d at cols %d..%d", i, ww, x0, x1);
        if (hh == S && ww == S) interior++;
        else clipped++;
        /* The unclipped corner is centre - S/2 with the centre uniform over the image: every
         * corner in [-S/2, dim - 1 - S/2] occurs, and no other. */
        int yu = y0 == 0 && hh < S ? y1 + 1 - S : y0, xu = x0 == 0 && ww < S ? x1 + 1 - S : x0;
        CHECK(yu >= -S / 2 && yu <= H - 1 - S / 2 && xu >= -S / 2 && xu <= W - 1 - S / 2, "image %d: corner (%d, %d)", i, yu, xu);
        ymin = yu < ymin ? yu : ymin, ymax = yu > ymax ? yu : ymax;
        xmin = xu < xmin ? xu : xmin, xmax = xu > xmax ? xu : xmax;
    }
    CHECK(interior > 10 && clipped > 10, "interior %d, clipped %d", interior, clipped);
    CHECK(ymin == -S / 2 && ymax == H - 1 - S / 2 && xmin == -S / 2 && xmax == W - 1 - S / 2,
          "corners seen: rows %d..%d, cols %d..%d", ymin, ymax, xmin, xmax);
    free(x);
    free(idx);
    free(f);
}

TEST_CASE(batches_are_pure_functions) {
    fixture *f = make_ds(4);
    enum { B = 50 };
    int64_t *idx = iota_idx(B, 11);
    size_t n = (size_t)B * H * W * C;
    float *x1 = test_xmalloc(sizeof(float) * n), *x2 = test_xmalloc(sizeof(float) * n);
    int32_t y1[B], y2[B];
    sdgp_augment a = NORM;
    a.flip = 1, a.translate = 2, a.cutout = 4;
    int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    sdgp_batch_build(x1, y1, &f->ds, idx, B, &a, 5, 17, 0);
    omp_set_num_threads(3);
    sdgp_batch_build(x2, y2, &f->ds, idx, B, &a, 5, 17, 0);
    omp_set_num_threads(threads);
    CHECK(test_bitwise_equal(x1, x2, sizeof(float) * n) && !memcmp(y1, y2, sizeof y1), "1 vs 3 threads differ");
    sdgp_batch_build(x2, y2, &f->ds, idx, B, &a, 5, 18, 0);
    CHECK(!test_bitwise_equal(x1, x2, sizeof(float) * n), "step 18 must differ from step 17");
    sdgp_batch_build(x2, y2, &f->ds, idx, B, &a, 6, 17, 0);
    CHECK(!test_bitwise_equal(x1, x2, sizeof(float) * n), "seed 6 must differ from seed 5");
    free(x1);
    free(x2);
    free(idx);
    free(f);
}

TEST_CASE(epoch_permutation) {
    enum { P = 1000 };
    int64_t *p = test_xmalloc(sizeof(int64_t) * P), *q = test_xmalloc(sizeof(int64_t) * P);
    char seen[P];
    sdgp_epoch_permutation(p, P, 1, 0);
    memset(seen, 0, sizeof seen);
    int ok = 1, fixed = 0;
    for (int i = 0; i < P; i++) {
        ok &= p[i] >= 0 && p[i] < P && !seen[p[i]];
        if (p[i] >= 0 && p[i] < P) seen[p[i]] = 1;
        fixed += p[i] == i;
    }
    CHECK(ok, "not a permutation");
    CHECK(fixed < 10, "%d fixed points (expected ~1)", fixed);
    sdgp_epoch_permutation(q, P, 1, 0);
    CHECK(!memcmp(p, q, sizeof(int64_t) * P), "same (seed, epoch) must repeat");
    sdgp_epoch_permutation(q, P, 1, 1);
    CHECK(memcmp(p, q, sizeof(int64_t) * P) != 0, "epoch 1 must differ");
    sdgp_epoch_permutation(q, P, 2, 0);
    CHECK(memcmp(p, q, sizeof(int64_t) * P) != 0, "seed 2 must differ");
    sdgp_epoch_permutation(q, 1, 1, 0);
    CHECK(q[0] == 0, "n = 1");
    /* Uniformity: the 6 orders of 3 elements over 12000 epochs, each ~2000 (sd ~41). A biased
     * Fisher-Yates (e.g. j drawn from [0, n) each step) skews these counts far past 200. */
    int count[3][3][3] = {{{0}}};
    for (int e = 0; e < 12000; e++) {
        int64_t r[3];
        sdgp_epoch_permutation(r, 3, 7, (uint64_t)e);
        count[r[0]][r[1]][r[2]]++;
    }
    int orders = 0;
    for (int a = 0; a < 3; a++)
        for (int b = 0; b < 3; b++)
            for (int c = 0; c < 3; c++)
                if (a != b && b != c && a != c) {
                    orders++;
                    CHECK(abs(count[a][b][c] - 2000) < 200, "order %d%d%d: %d of 12000", a, b, c, count[a][b][c]);
                }
    CHECK(orders == 6, "orders");
    free(p);
    free(q);
}

/* The batch of global step s by definition: slice s mod spe of epoch s / spe's permutation. */
static void reference_batch(float *x, int32_t *y, const sdgp_dataset *ds, int B, const sdgp_augment *a, uint64_t seed,
                            int64_t s) {
    int64_t spe = ds->count / B;
    int64_t *perm = test_xmalloc(sizeof(int64_t) * (size_t)ds->count);
    sdgp_epoch_permutation(perm, ds->count, seed, (uint64_t)(s / spe));
    sdgp_batch_build(x, y, ds, perm + (s % spe) * B, B, a, seed, (uint64_t)s, 0);
    free(perm);
}

TEST_CASE(loader_matches_definition_and_resumes) {
    fixture *f = make_ds(5);
    enum { B = 32, STEPS = 20, RESUME = 13 };
    sdgp_augment a = NORM;
    a.flip = 1, a.translate = 2, a.cutout = 3;
    size_t n = (size_t)B * H * W * C;
    float *xr = test_xmalloc(sizeof(float) * n);
    int32_t yr[B];
    sdgp_loader *l = NULL, *r = NULL;
    sdgp_error e;
    rc_ = sdgp_loader_create(&l, &f->ds, B, &a, 99, 0, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    CHECK(sdgp_loader_steps_per_epoch(l) == N / B, "steps per epoch %lld", (long long)sdgp_loader_steps_per_epoch(l));
    float *keep = test_xmalloc(sizeof(float) * n * (STEPS - RESUME));
    for (int s = 0; s < STEPS; s++) {
        const float *x;
        const int32_t *y;
        sdgp_loader_next(l, &x, &y);
        reference_batch(xr, yr, &f->ds, B, &a, 99, s);
        CHECK(test_bitwise_equal(x, xr, sizeof(float) * n) && !memcmp(y, yr, sizeof yr), "step %d differs from definition", s);
        if (s >= RESUME) memcpy(keep + (size_t)(s - RESUME) * n, x, sizeof(float) * n);
    }
    sdgp_loader_destroy(l);
    rc_ = sdgp_loader_create(&r, &f->ds, B, &a, 99, RESUME, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    for (int s = RESUME; s < STEPS; s++) {
        const float *x;
        const int32_t *y;
        sdgp_loader_next(r, &x, &y);
        CHECK(test_bitwise_equal(x, keep + (size_t)(s - RESUME) * n, sizeof(float) * n), "resumed step %d differs", s);
    }
    sdgp_loader_destroy(r);
    /* every image of an epoch appears once (last partial batch dropped: N % B images missing) */
    rc_ = sdgp_loader_create(&l, &f->ds, B, NULL, 3, 0, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    int64_t spe = sdgp_loader_steps_per_epoch(l);
    CHECK(spe == N / B, "spe");
    int hits[N] = {0};
    for (int64_t s = 0; s < spe; s++) {
        const float *x;
        const int32_t *y;
        sdgp_loader_next(l, &x, &y);
        sdgp_augment unit = {{0, 0, 0, 0}, {1, 1, 1, 1}, 0, 0, 0};
        for (int i = 0; i < B; i++)
            for (int k = 0; k < N; k++)
                if (matches(x + (size_t)i * H * W * C, &unit, f->img + (size_t)k * H * W * C, 0, 0, 0)) {
                    hits[k]++;
                    break;
                }
    }
    int once = 0, more = 0;
    for (int k = 0; k < N; k++) once += hits[k] == 1, more += hits[k] > 1;
    CHECK(once == spe * B && more == 0, "%d images seen once, %d more than once", once, more);
    sdgp_loader_destroy(l);
    /* destroy right after create, with the worker busy or blocked: no hang, no leak */
    for (int i = 0; i < 20; i++) {
        rc_ = sdgp_loader_create(&l, &f->ds, B, &a, 1, i, &e);
        REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
        if (i & 1) {
            const float *x;
            const int32_t *y;
            sdgp_loader_next(l, &x, &y);
        }
        sdgp_loader_destroy(l);
    }
    /* invalid arguments */
    CHECK(sdgp_loader_create(&l, &f->ds, 0, &a, 1, 0, &e) == SDGP_ERR_INVALID && l == NULL, "B = 0: %s", e.msg);
    CHECK(sdgp_loader_create(&l, &f->ds, N + 1, &a, 1, 0, &e) == SDGP_ERR_INVALID && strstr(e.msg, "201"), "B > N: %s", e.msg);
    CHECK(sdgp_loader_create(&l, &f->ds, B, &a, 1, -1, &e) == SDGP_ERR_INVALID, "start < 0: %s", e.msg);
    free(keep);
    free(xr);
    free(f);
}

int main(void) {
    RUN(normalisation_exact);
    RUN(flip_and_translate);
    RUN(cutout_square);
    RUN(batches_are_pure_functions);
    RUN(epoch_permutation);
    RUN(loader_matches_definition_and_resumes);
    return test_finish();
}
