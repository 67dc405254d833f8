/* Dataset readers: IDX (raw and gzip), CIFAR-10 binary, loading by name, statistics.
 * Files are generated into a temporary directory; the real Fashion-MNIST is checked when the
 * Debian package dataset-fashion-mnist is installed. */
#include <errno.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "harness.h"
#include "sdgp/data.h"
#include "test_data_util.h"

/* harness REQUIRE evaluates its condition twice: library calls go through rc_ first. */
static sdgp_status rc_;

#define FMNIST_DIR "/usr/share/datasets/fashion-mnist"

/* A dataset full of garbage, to see that failing loads zero it. */
static void poison(sdgp_dataset *ds) { memset(ds, 0xAB, sizeof *ds); }
static int is_zeroed(const sdgp_dataset *ds) {
    return ds->count == 0 && ds->images == NULL && ds->labels == NULL && ds->h == 0 && ds->w == 0 && ds->c == 0;
}

typedef struct {
    uint32_t n, rows, cols;
    uint8_t *pixels, *labels;
    uint8_t *img_file, *lab_file;
    size_t img_size, lab_size;
} idx_fixture;

static idx_fixture make_fixture(uint32_t n, uint32_t rows, uint32_t cols, uint64_t seed) {
    idx_fixture f = {n, rows, cols, NULL, NULL, NULL, NULL, 0, 0};
    f.pixels = test_xmalloc((size_t)n * rows * cols);
    f.labels = test_xmalloc(n);
    for (size_t i = 0; i < (size_t)n * rows * cols; i++) f.pixels[i] = (uint8_t)test_rand_u64(&seed);
    for (uint32_t i = 0; i < n; i++) f.labels[i] = (uint8_t)(test_rand_u64(&seed) % 10);
    f.img_file = idx_images_bytes(f.pixels, n, rows, cols, &f.img_size);
    f.lab_file = idx_labels_bytes(f.labels, n, &f.lab_size);
    return f;
}
static void free_fixture(idx_fixture *f) {
    free(f->pixels); free(f->labels); free(f->img_file); free(f->lab_file);
}

static void check_matches(const sdgp_dataset *ds, const idx_fixture *f, const char *what) {
    CHECK(ds->count == f->n && ds->h == (int)f->rows && ds->w == (int)f->cols && ds->c == 1 && ds->num_classes == 10,
          "%s: shape %lld x %d x %d x %d", what, (long long)ds->count, ds->h, ds->w, ds->c);
    if (ds->count != f->n || !ds->images) return;
    CHECK(memcmp(ds->images, f->pixels, (size_t)f->n * f->rows * f->cols) == 0, "%s: pixels differ", what);
    CHECK(memcmp(ds->labels, f->labels, f->n) == 0, "%s: labels differ", what);
}

TEST_CASE(idx_round_trip_raw_and_gzip) {
    idx_fixture f = make_fixture(7, 5, 3, 1);
    write_bytes(tpath("rt-img"), f.img_file, f.img_size);
    write_bytes(tpath("rt-lab"), f.lab_file, f.lab_size);
    write_gz(tpath("rt-img.gz"), f.img_file, f.img_size);
    write_gz(tpath("rt-lab.gz"), f.lab_file, f.lab_size);
    sdgp_dataset ds;
    sdgp_error e;
    /* raw, gzip, and mixed; gzip detected by content, so a gzip file without .gz works too */
    const char *pairs[4][2] = {{"rt-img", "rt-lab"}, {"rt-img.gz", "rt-lab.gz"}, {"rt-img.gz", "rt-lab"}, {"rt-img", "rt-lab.gz"}};
    for (int p = 0; p < 4; p++) {
        poison(&ds);
        sdgp_status st = sdgp_idx_load(&ds, tpath(pairs[p][0]), tpath(pairs[p][1]), &e);
        REQUIRE(st == SDGP_OK, "%s + %s: %s", pairs[p][0], pairs[p][1], e.msg);
        check_matches(&ds, &f, pairs[p][0]);
        sdgp_dataset_free(&ds);
        CHECK(is_zeroed(&ds), "free zeroes");
    }
    poison(&ds);
    rc_ = sdgp_idx_parse(&ds, f.img_file, f.img_size, f.lab_file, f.lab_size, &e);
    REQUIRE(rc_ == SDGP_OK, "parse: %s", e.msg);
    check_matches(&ds, &f, "in-memory");
    sdgp_dataset_free(&ds);
    /* A larger gzip file exercises the growing read (several 1 MB chunks). */
    idx_fixture big = make_fixture(3000, 28, 28, 2);
    write_gz(tpath("big-img.gz"), big.img_file, big.img_size);
    write_bytes(tpath("big-lab"), big.lab_file, big.lab_size);
    rc_ = sdgp_idx_load(&ds, tpath("big-img.gz"), tpath("big-lab"), &e);
    REQUIRE(rc_ == SDGP_OK, "big: %s", e.msg);
    check_matches(&ds, &big, "big gzip");
    sdgp_dataset_free(&ds);
    free_fixture(&big);
    free_fixture(&f);
}

/* Loads images_name + labels_name from the temp dir; expects `code` and a message naming
 * `blame` (a file name) and containing `needle`. */
static void expect_idx_error(const char *images_name, const char *labels_name, sdgp_status code, const char *blame,
                             const char *needle) {
    sdgp_dataset ds;
    sdgp_error e;
    poison(&ds);
    sdgp_status st = sdgp_idx_load(&ds, tpath(images_name), tpath(labels_name), &e);
    CHECK(st == code, "%s/%s: got %s (%s), expected %s", images_name, labels_name, sdgp_status_name(st),
          st ? e.msg : "", sdgp_status_name(code));
    CHECK(st == SDGP_OK || strstr(e.msg, tpath(blame)) != NULL, "message must name %s: %s", blame, e.msg);
    CHECK(st == SDGP_OK || strstr(e.msg, needle) != NULL, "message must say '%s': %s", needle, e.msg);
    CHECK(st == SDGP_OK || is_zeroed(&ds), "%s: dataset not zeroed on error", images_name);
    if (st == SDGP_OK) sdgp_dataset_free(&ds);
}

TEST_CASE(idx_errors) {
    idx_fixture f = make_fixture(6, 4, 4, 3);
    write_bytes(tpath("img"), f.img_file, f.img_size);
    write_bytes(tpath("lab"), f.lab_file, f.lab_size);
    expect_idx_error("img", "lab", SDGP_OK, "img", "");

    expect_idx_error("nope", "lab", SDGP_ERR_IO, "nope", strerror(ENOENT));
    expect_idx_error("img", "nope", SDGP_ERR_IO, "nope", strerror(ENOENT));
    mkdir(tpath("adir"), 0700);
    expect_idx_error("adir", "lab", SDGP_ERR_IO, "adir", "not a regular file");
    /* swapped files: magic found vs expected */
    expect_idx_error("lab", "lab", SDGP_ERR_FORMAT, "lab", "0x00000801 (expected 0x00000803");
    expect_idx_error("img", "img", SDGP_ERR_FORMAT, "img", "0x00000803 (expected 0x00000801");
    /* truncated payload, raw and gzip; truncated header; empty file */
    write_bytes(tpath("img-short"), f.img_file, f.img_size - 1);
    expect_idx_error("img-short", "lab", SDGP_ERR_FORMAT, "img-short", "truncated");
    write_gz(tpath("img-short.gz"), f.img_file, f.img_size - 1);
    expect_idx_error("img-short.gz", "lab", SDGP_ERR_FORMAT, "img-short.gz", "truncated");
    write_bytes(tpath("lab-short"), f.lab_file, f.lab_size - 2);
    expect_idx_error("img", "lab-short", SDGP_ERR_FORMAT, "lab-short", "truncated");
    write_bytes(tpath("img-hdr"), f.img_file, 10);
    expect_idx_error("img-hdr", "lab", SDGP_ERR_FORMAT, "img-hdr", "truncated");
    write_bytes(tpath("empty"), f.img_file, 0);
    expect_idx_error("empty", "lab", SDGP_ERR_FORMAT, "empty", "truncated");
    /* a gzip stream cut in the middle (the compressed bytes, not the content) */
    {
        write_gz(tpath("tmp.gz"), f.img_file, f.img_size);
        FILE *g = fopen(tpath("tmp.gz"), "rb");
        uint8_t buf[4096];
        size_t n = fread(buf, 1, sizeof buf, g);
        fclose(g);
        write_bytes(tpath("img-cut.gz"), buf, n / 2);
        expect_idx_error("img-cut.gz", "lab", SDGP_ERR_FORMAT, "img-cut.gz", "gzip");
    }
    /* trailing bytes */
    {
        uint8_t *b = test_xmalloc(f.img_size + 3);
        memcpy(b, f.img_file, f.img_size);
        memset(b + f.img_size, 7, 3);
        write_bytes(tpath("img-long"), b, f.img_size + 3);
        expect_idx_error("img-long", "lab", SDGP_ERR_FORMAT, "img-long", "trailing");
        write_gz(tpath("img-long.gz"), b, f.img_size + 3);
        expect_idx_error("img-long.gz", "lab", SDGP_ERR_FORMAT, "img-long.gz", "trailing");
        free(b);
    }
    /* count mismatch, label out of range, zero dims, absurd dims */
    {
        size_t sz;
        uint8_t *lab5 = idx_labels_bytes(f.labels, 5, &sz);
        write_bytes(tpath("lab5"), lab5, sz);
        expect_idx_error("img", "lab5", SDGP_ERR_FORMAT, "lab5", "6 images");
        free(lab5);
        uint8_t bad[6];
        memcpy(bad, f.labels, 6);
        bad[4] = 10;
        uint8_t *labbad = idx_labels_bytes(bad, 6, &sz);
        write_bytes(tpath("lab-range"), labbad, sz);
        expect_idx_error("img", "lab-range", SDGP_ERR_FORMAT, "lab-range", "label 10 of item 4");
        free(labbad);
        uint8_t hdr[16];
        memcpy(hdr, f.img_file, 16);
        put_be32(hdr + 8, 0);
        write_bytes(tpath("img-zero"), hdr, 16);
        expect_idx_error("img-zero", "lab", SDGP_ERR_FORMAT, "img-zero", "is 0");
        put_be32(hdr + 4, 0xffffffffu); put_be32(hdr + 8, 0xffffffffu); put_be32(hdr + 12, 0xffffffffu);
        write_bytes(tpath("img-huge"), hdr, 16);
        expect_idx_error("img-huge", "lab", SDGP_ERR_FORMAT, "img-huge", "absurd");
        write_gz(tpath("img-huge.gz"), hdr, 16);
        expect_idx_error("img-huge.gz", "lab", SDGP_ERR_FORMAT, "img-huge.gz", "absurd");
    }
    /* in-memory parse reports the same errors, naming "images"/"labels" */
    {
        sdgp_dataset ds;
        sdgp_error e;
        poison(&ds);
        CHECK(sdgp_idx_parse(&ds, f.img_file, f.img_size - 1, f.lab_file, f.lab_size, &e) == SDGP_ERR_FORMAT &&
                  strstr(e.msg, "images") && strstr(e.msg, "truncated") && is_zeroed(&ds), "%s", e.msg);
        poison(&ds);
        CHECK(sdgp_idx_parse(&ds, f.img_file, f.img_size, f.lab_file, 3, &e) == SDGP_ERR_FORMAT &&
                  strstr(e.msg, "labels") && is_zeroed(&ds), "%s", e.msg);
        CHECK(sdgp_idx_parse(&ds, NULL, 0, f.lab_file, f.lab_size, &e) == SDGP_ERR_FORMAT, "empty: %s", e.msg);
    }
    free_fixture(&f);
}

/* A gzip file whose header claims ~1.9 GB but holds a few bytes must fail as truncated without
 * allocating the claimed size: with the address space capped below it, allocating it would
 * turn the error into SDGP_ERR_NOMEM (or crash). ASan reserves huge shadow mappings: skipped. */
TEST_CASE(idx_lying_header_allocates_nothing) {
#if defined(__SANITIZE_ADDRESS__)
    fprintf(stderr, "  (skipped under AddressSanitizer: cannot cap the address space)\n");
#else
    uint8_t hdr[16 + 64];
    memset(hdr, 1, sizeof hdr);
    put_be32(hdr, 0x803); put_be32(hdr + 4, 1900); put_be32(hdr + 8, 1000); put_be32(hdr + 12, 1000);
    write_gz(tpath("liar.gz"), hdr, sizeof hdr);
    write_bytes(tpath("liar"), hdr, sizeof hdr);
    size_t sz;
    uint8_t lab[1] = {0};
    uint8_t *lf = idx_labels_bytes(lab, 1, &sz);
    write_bytes(tpath("liar-lab"), lf, sz);
    free(lf);
    /* current address space + 512 MB */
    long vm_kb = 0;
    FILE *st = fopen("/proc/self/status", "r");
    char line[256];
    while (st && fgets(line, sizeof line, st))
        if (sscanf(line, "VmSize: %ld kB", &vm_kb) == 1) break;
    if (st) fclose(st);
    REQUIRE(vm_kb > 0, "cannot read VmSize");
    struct rlimit old, lim;
    getrlimit(RLIMIT_AS, &old);
    lim = old;
    lim.rlim_cur = (rlim_t)(vm_kb + 512 * 1024) * 1024;
    REQUIRE(setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit: %s", strerror(errno));
    sdgp_dataset ds;
    sdgp_error e;
    sdgp_status s1 = sdgp_idx_load(&ds, tpath("liar.gz"), tpath("liar-lab"), &e);
    char m1[SDGP_ERROR_MSG_LEN];
    memcpy(m1, e.msg, sizeof m1);
    sdgp_status s2 = sdgp_idx_load(&ds, tpath("liar"), tpath("liar-lab"), &e);
    setrlimit(RLIMIT_AS, &old);
    CHECK(s1 == SDGP_ERR_FORMAT && strstr(m1, "truncated"), "gzip liar: %s %s", sdgp_status_name(s1), m1);
    CHECK(s2 == SDGP_ERR_FORMAT && strstr(e.msg, "truncated"), "raw liar: %s %s", sdgp_status_name(s2), e.msg);
#endif
}

/* CIFAR-10 records with known CHW content. */
static uint8_t *make_cifar(int n, uint64_t seed, size_t *size) {
    *size = (size_t)n * 3073;
    uint8_t *b = test_xmalloc(*size);
    for (size_t i = 0; i < *size; i++) b[i] = (uint8_t)test_rand_u64(&seed);
    for (int r = 0; r < n; r++) b[(size_t)r * 3073] = (uint8_t)(r % 10);
    return b;
}

static void check_cifar(const sdgp_dataset *ds, int64_t first, const uint8_t *rec, int n, const char *what) {
    int bad = 0;
    for (int r = 0; r < n; r++) {
        const uint8_t *chw = rec + (size_t)r * 3073 + 1;
        const uint8_t *hwc = ds->images + (size_t)(first + r) * 3072;
        bad += ds->labels[first + r] != rec[(size_t)r * 3073];
        for (int y = 0; y < 32; y++)
            for (int x = 0; x < 32; x++)
                for (int c = 0; c < 3; c++) bad += hwc[(y * 32 + x) * 3 + c] != chw[c * 1024 + y * 32 + x];
    }
    CHECK(bad == 0, "%s: %d values differ from CHW->HWC", what, bad);
}

TEST_CASE(cifar_reader) {
    size_t s1, s2;
    uint8_t *a = make_cifar(5, 11, &s1), *b = make_cifar(3, 12, &s2);
    sdgp_dataset ds;
    sdgp_error e;
    rc_ = sdgp_cifar10_parse(&ds, a, s1, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    CHECK(ds.count == 5 && ds.h == 32 && ds.w == 32 && ds.c == 3 && ds.num_classes == 10, "shape");
    check_cifar(&ds, 0, a, 5, "parse");
    sdgp_dataset_free(&ds);

    write_bytes(tpath("c1.bin"), a, s1);
    write_bytes(tpath("c2.bin"), b, s2);
    const char *paths[2] = {tpath("c1.bin"), tpath("c2.bin")};
    rc_ = sdgp_cifar10_load(&ds, paths, 2, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    CHECK(ds.count == 8, "count %lld", (long long)ds.count);
    check_cifar(&ds, 0, a, 5, "file 1");
    check_cifar(&ds, 5, b, 3, "file 2");
    sdgp_dataset_free(&ds);

    /* size errors: not a multiple of 3073, empty; label 10; missing second file */
    write_bytes(tpath("c-odd.bin"), a, s1 - 1);
    const char *odd[2] = {tpath("c1.bin"), tpath("c-odd.bin")};
    poison(&ds);
    CHECK(sdgp_cifar10_load(&ds, odd, 2, &e) == SDGP_ERR_FORMAT && strstr(e.msg, "c-odd.bin") && strstr(e.msg, "3073"),
          "odd size: %s", e.msg);
    CHECK(is_zeroed(&ds), "zeroed after a failure in the second file");
    write_bytes(tpath("c-empty.bin"), a, 0);
    const char *empty[1] = {tpath("c-empty.bin")};
    CHECK(sdgp_cifar10_load(&ds, empty, 1, &e) == SDGP_ERR_FORMAT && strstr(e.msg, "c-empty.bin"), "empty: %s", e.msg);
    CHECK(sdgp_cifar10_parse(&ds, a, 3072, &e) == SDGP_ERR_FORMAT && is_zeroed(&ds), "short parse: %s", e.msg);
    a[3073] = 10;
    CHECK(sdgp_cifar10_parse(&ds, a, s1, &e) == SDGP_ERR_FORMAT && strstr(e.msg, "label 10 of record 1") && is_zeroed(&ds),
          "label: %s", e.msg);
    a[3073] = 1;
    const char *missing[2] = {tpath("c1.bin"), tpath("c-none.bin")};
    CHECK(sdgp_cifar10_load(&ds, missing, 2, &e) == SDGP_ERR_IO && strstr(e.msg, "c-none.bin"), "missing: %s", e.msg);
    free(a);
    free(b);
}

TEST_CASE(dataset_by_name) {
    sdgp_dataset ds;
    sdgp_error e;
    /* cifar10: files directly in the directory, then in cifar-10-batches-bin/ */
    mkdir(tpath("cif"), 0700);
    mkdir(tpath("cif2"), 0700);
    mkdir(tpath("cif2/cifar-10-batches-bin"), 0700);
    size_t sz;
    uint8_t *recs[6];
    for (int i = 0; i < 6; i++) {
        char name[64], name2[128];
        recs[i] = make_cifar(2, 100 + (uint64_t)i, &sz);
        if (i < 5) snprintf(name, sizeof name, "cif/data_batch_%d.bin", i + 1);
        else snprintf(name, sizeof name, "cif/test_batch.bin");
        snprintf(name2, sizeof name2, "cif2/cifar-10-batches-bin/%s", name + 4);
        write_bytes(tpath(name), recs[i], sz);
        write_bytes(tpath(name2), recs[i], sz);
    }
    const char *dirs[2] = {"cif", "cif2"};
    for (int d = 0; d < 2; d++) {
        rc_ = sdgp_dataset_load(&ds, "cifar10", tpath(dirs[d]), 1, &e);
        REQUIRE(rc_ == SDGP_OK, "%s train: %s", dirs[d], e.msg);
        CHECK(ds.count == 10, "train count %lld", (long long)ds.count);
        for (int i = 0; i < 5; i++) check_cifar(&ds, 2 * i, recs[i], 2, dirs[d]);
        sdgp_dataset_free(&ds);
        rc_ = sdgp_dataset_load(&ds, "cifar10", tpath(dirs[d]), 0, &e);
        REQUIRE(rc_ == SDGP_OK, "%s test: %s", dirs[d], e.msg);
        CHECK(ds.count == 2, "test count");
        check_cifar(&ds, 0, recs[5], 2, "test");
        sdgp_dataset_free(&ds);
    }
    for (int i = 0; i < 6; i++) free(recs[i]);
    remove(tpath("cif/data_batch_4.bin"));
    CHECK(sdgp_dataset_load(&ds, "cifar10", tpath("cif"), 1, &e) == SDGP_ERR_IO && strstr(e.msg, "data_batch_4.bin"),
          "missing batch 4: %s", e.msg);
    CHECK(sdgp_dataset_load(&ds, "cifar10", tpath("nodir"), 1, &e) == SDGP_ERR_IO && strstr(e.msg, "data_batch_1.bin"),
          "missing dir: %s", e.msg);

    /* mnist layout: raw names, or .gz */
    mkdir(tpath("mn"), 0700);
    idx_fixture f = make_fixture(4, 28, 28, 5);
    write_bytes(tpath("mn/t10k-images-idx3-ubyte"), f.img_file, f.img_size);
    write_gz(tpath("mn/t10k-labels-idx1-ubyte.gz"), f.lab_file, f.lab_size);
    rc_ = sdgp_dataset_load(&ds, "mnist", tpath("mn"), 0, &e);
    REQUIRE(rc_ == SDGP_OK, "mnist test split: %s", e.msg);
    check_matches(&ds, &f, "mnist");
    sdgp_dataset_free(&ds);
    CHECK(sdgp_dataset_load(&ds, "mnist", tpath("mn"), 1, &e) == SDGP_ERR_IO &&
              strstr(e.msg, "train-images-idx3-ubyte") && strstr(e.msg, "missing"), "train split missing: %s", e.msg);
    CHECK(sdgp_dataset_load(&ds, "imagenet", tpath("mn"), 1, &e) == SDGP_ERR_INVALID && strstr(e.msg, "imagenet"),
          "unknown name: %s", e.msg);
    free_fixture(&f);
}

TEST_CASE(stats_exact) {
    /* 2 images 1x2, 2 channels: channel 0 values {0, 255, 255, 0}, channel 1 all 51. */
    uint8_t img[8] = {0, 51, 255, 51, 255, 51, 0, 51}, lab[2] = {0, 1};
    sdgp_dataset ds = {2, 1, 2, 2, 10, img, lab};
    float mean[2], std[2];
    sdgp_dataset_stats(&ds, mean, std);
    CHECK(fabsf(mean[0] - 0.5f) < 1e-7f && fabsf(std[0] - 0.5f) < 1e-7f, "ch0 %g %g", mean[0], std[0]);
    CHECK(fabsf(mean[1] - 0.2f) < 1e-7f && std[1] == 1.0f, "ch1 (constant -> std 1) %g %g", mean[1], std[1]);
}

TEST_CASE(fashion_mnist_real) {
    struct stat st;
    if (stat(FMNIST_DIR, &st) != 0) {
        fprintf(stderr, "  SKIPPED: %s is absent (install dataset-fashion-mnist)\n", FMNIST_DIR);
        return;
    }
    sdgp_dataset tr, te;
    sdgp_error e;
    rc_ = sdgp_dataset_load(&tr, "fashion-mnist", FMNIST_DIR, 1, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    rc_ = sdgp_dataset_load(&te, "fashion-mnist", FMNIST_DIR, 0, &e);
    REQUIRE(rc_ == SDGP_OK, "%s", e.msg);
    CHECK(tr.count == 60000 && tr.h == 28 && tr.w == 28 && tr.c == 1, "train shape %lld", (long long)tr.count);
    CHECK(te.count == 10000 && te.h == 28 && te.w == 28 && te.c == 1, "test shape %lld", (long long)te.count);
    int64_t ctr[10] = {0}, cte[10] = {0};
    for (int64_t i = 0; i < tr.count; i++) ctr[tr.labels[i] % 10]++;
    for (int64_t i = 0; i < te.count; i++) cte[te.labels[i] % 10]++;
    for (int k = 0; k < 10; k++) CHECK(ctr[k] == 6000 && cte[k] == 1000, "class %d: %lld / %lld", k, (long long)ctr[k], (long long)cte[k]);
    /* The published Fashion-MNIST statistics: mean 0.2860, std 0.3530. */
    float mean, std;
    sdgp_dataset_stats(&tr, &mean, &std);
    CHECK(fabsf(mean - 0.2860f) < 1e-4f && fabsf(std - 0.3530f) < 1e-4f, "stats %.5f %.5f", mean, std);
    sdgp_dataset_free(&tr);
    sdgp_dataset_free(&te);
}

int main(void) {
    RUN(idx_round_trip_raw_and_gzip);
    RUN(idx_errors);
    RUN(idx_lying_header_allocates_nothing);
    RUN(cifar_reader);
    RUN(dataset_by_name);
    RUN(stats_exact);
    RUN(fashion_mnist_real);
    tdir_remove();
    return test_finish();
}
