/* Helpers for the data tests: a temporary directory, writing raw / gzip files, IDX encoding. */
#ifndef SDGP_TEST_DATA_UTIL_H
#define SDGP_TEST_DATA_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

static char tdir_[256];

/* Creates the test's temporary directory (once) and returns it. */
static inline const char *tdir(void) {
    if (!tdir_[0]) {
        snprintf(tdir_, sizeof tdir_, "/tmp/sdgp_test_XXXXXX");
        if (!mkdtemp(tdir_)) {
            perror("mkdtemp");
            exit(2);
        }
    }
    return tdir_;
}

static inline void remove_tree_(const char *path) {
    DIR *d = opendir(path);
    if (d) {
        struct dirent *de;
        while ((de = readdir(d))) {
            if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..")) continue;
            char sub[1024];
            int n = snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            if (n > 0 && (size_t)n < sizeof sub) remove_tree_(sub);
        }
        closedir(d);
    }
    remove(path);
}
static inline void tdir_remove(void) {
    if (tdir_[0]) remove_tree_(tdir_);
}

/* tdir()/name, in a static rotating buffer (16 live at a time; copy paths kept longer). */
static inline const char *tpath(const char *name) {
    static char buf[16][512];
    static int k;
    k = (k + 1) & 15;
    snprintf(buf[k], sizeof buf[k], "%s/%s", tdir(), name);
    return buf[k];
}

static inline void write_bytes(const char *path, const void *bytes, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(2);
    }
}

static inline void write_gz(const char *path, const void *bytes, size_t n) {
    gzFile g = gzopen(path, "wb");
    if (!g || (n && gzwrite(g, bytes, (unsigned)n) != (int)n) || gzclose(g) != Z_OK) {
        fprintf(stderr, "cannot write %s\n", path);
        exit(2);
    }
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* An IDX images file (n x rows x cols) in a malloc'd buffer; *size set. */
static inline uint8_t *idx_images_bytes(const uint8_t *pixels, uint32_t n, uint32_t rows, uint32_t cols, size_t *size) {
    size_t body = (size_t)n * rows * cols;
    uint8_t *b = malloc(16 + body);
    put_be32(b, 0x803); put_be32(b + 4, n); put_be32(b + 8, rows); put_be32(b + 12, cols);
    if (body) memcpy(b + 16, pixels, body);
    *size = 16 + body;
    return b;
}

static inline uint8_t *idx_labels_bytes(const uint8_t *labels, uint32_t n, size_t *size) {
    uint8_t *b = malloc(8 + (size_t)n);
    put_be32(b, 0x801); put_be32(b + 4, n);
    if (n) memcpy(b + 8, labels, n);
    *size = 8 + (size_t)n;
    return b;
}

#endif
