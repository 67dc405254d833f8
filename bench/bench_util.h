/* What the C benchmarks in bench/ share: deterministic fill, the relative L2 error of a result
 * against a reference, the per-layer benchmarks' command line, and their way out on a failed call
 * or allocation (header-only: each benchmark is one translation unit). */
#ifndef SDGP_BENCH_UTIL_H
#define SDGP_BENCH_UTIL_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/bench_shapes.h"
#include "sdgp/conv.h"
#include "sdgp/status.h"

/* The program's name in the messages below (main sets it). */
static const char *bench_prog __attribute__((unused)) = "bench";

/* A benchmark has nothing to recover: name the layer, the call and the library's message, and exit. */
static inline __attribute__((noreturn)) void bench_die(const char *layer, const char *what, const sdgp_error *e) {
    fprintf(stderr, "%s: %s: %s: %s\n", bench_prog, layer, what, e->msg);
    exit(1);
}

static inline void *bench_xmalloc(size_t bytes) {
    void *p = malloc(bytes);
    if (!p) fprintf(stderr, "%s: out of memory (%zu bytes)\n", bench_prog, bytes), exit(1);
    return p;
}

/* call returns an sdgp_status; a sdgp_error e is in scope */
#define BENCH_CHECK(call, layer, what)                                                                                 \
    do {                                                                                                               \
        if ((call) != SDGP_OK) bench_die(layer, what, &e);                                                             \
    } while (0)

/* x[i] uniform in [-1, 1), from a 64-bit LCG seeded by seed */
static inline void bench_fill(float *x, size_t n, uint64_t seed) {
    for (size_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((int32_t)(seed >> 32)) * (1.0f / 2147483648.0f);
    }
}

/* ||a - b|| / ||b|| (||b|| = 0: the absolute norm) */
static inline double bench_rel_l2(const float *a, const float *b, size_t n) {
    double d = 0, s = 0;
    for (size_t i = 0; i < n; i++) d += ((double)a[i] - b[i]) * ((double)a[i] - b[i]), s += (double)b[i] * b[i];
    return sqrt(d / (s > 0 ? s : 1));
}

/* `prog [models] [reps] [threads] [batch]`: models a comma list of bench_model_layers' names
 * (default w1,w0.25), reps (default 9) and threads (default 2) at least 1, batch (default: each
 * model's own, 0 too) e.g. the training batch. The layers of every model into layers[0 .. cap);
 * returns their count, or -1 after a message on stderr. */
static inline int bench_layers_from_args(int argc, char **argv, const char *prog, bench_layer *layers, int cap, int *reps,
                                         int *threads) {
    const char *models = argc > 1 ? argv[1] : "w1,w0.25";
    *reps = argc > 2 ? atoi(argv[2]) : 9, *threads = argc > 3 ? atoi(argv[3]) : 2;
    const int batch = argc > 4 ? atoi(argv[4]) : 0;
    if (*reps < 1 || *threads < 1 || batch < 0)
        return fprintf(stderr, "usage: %s [models] [reps >= 1] [threads >= 1] [batch >= 0]\n", argv[0]), -1;
    int nl = 0;
    char list[256];
    snprintf(list, sizeof list, "%s", models);
    for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
        int k = bench_model_layers(layers + nl, cap - nl, tok);
        if (!k) return fprintf(stderr, "%s: unknown model '%s' (w1, w0.25, r18)\n", prog, tok), -1;
        nl += k;
    }
    for (int i = 0; i < nl && batch; i++) layers[i].B = batch;
    return nl;
}

/* The dense baselines of one pass of layer g: oneDNN with every pass direct (*direct), and with
 * `pass` by WINOGRAD, the others direct (*wino: oneDNN's kernel, else sdgp's, as SDGP_WINOGRAD
 * orders them), or NULL where no Winograd kernel runs it. */
static inline void bench_onednn_baselines(const sdgp_conv_geom *g, int threads, sdgp_conv_pass pass, const char *layer,
                                          sdgp_conv **direct, sdgp_conv **wino) {
    sdgp_error e;
    sdgp_conv_algo pd[3] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT, SDGP_CONV_DIRECT}, pw[3] = {SDGP_CONV_DIRECT, SDGP_CONV_DIRECT,
                                                                                           SDGP_CONV_DIRECT};
    pw[pass] = SDGP_CONV_WINOGRAD;
    *direct = *wino = NULL;
    BENCH_CHECK(sdgp_conv_create_passes(direct, g, 0, threads, pd, NULL, &e), layer, "oneDNN direct");
    const sdgp_status st = sdgp_conv_create_passes(wino, g, 0, threads, pw, NULL, &e);
    if (st == SDGP_ERR_UNSUPPORTED) {
        *wino = NULL;
    } else if (st != SDGP_OK) {
        bench_die(layer, "oneDNN Winograd", &e);
    } else if (sdgp_conv_get_plan(*wino, pass).algo != SDGP_CONV_WINOGRAD) {
        sdgp_conv_destroy(*wino);
        *wino = NULL;
    }
}

#endif
