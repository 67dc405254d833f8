/* Helpers shared by the model and checkpoint tests: a small model, a few SGD steps, temp paths. */
#ifndef SDGP_TESTS_MODEL_UTIL_H
#define SDGP_TESTS_MODEL_UTIL_H
#include <unistd.h>

#include "harness.h"
#include "sdgp/train.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static inline sdgp_model_config small_config(int batch) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = SDGP_MODEL_SMALLCNN;
    c.width = 1.0f;
    c.batch = batch;
    c.height = c.width_px = 28;
    c.channels = 1;
    c.seed = 3;
    return c;
}

/* Mean loss of the first and last k of `steps` SGD steps on Fashion-MNIST batches. */
static inline int train_steps(sdgp_model *m, const sdgp_dataset *ds, int steps, int k, double *first, double *last) {
    const sdgp_model_config *c = sdgp_model_get_config(m);
    int B = c->batch;
    float *x = test_xmalloc((size_t)B * 28 * 28 * sizeof(float)), *dl = test_xmalloc((size_t)B * 10 * sizeof(float));
    int32_t *y = test_xmalloc((size_t)B * sizeof(int32_t));
    int64_t *idx = test_xmalloc((size_t)B * sizeof(int64_t));
    sdgp_augment aug = {{0.286f}, {0.353f}, 0, 0, 0};
    *first = *last = 0;
    int ok = 1;
    for (int s = 0; s < steps && ok; s++) {
        for (int i = 0; i < B; i++) idx[i] = ((int64_t)s * B + i) % ds->count;
        sdgp_batch_build(x, y, ds, idx, B, &aug, 1, (uint64_t)s, 0);
        const float *logits = sdgp_model_forward(m, x, 1);
        double loss = sdgp_softmax_xent(dl, NULL, logits, y, B, 10, 0.0f);
        sdgp_error err;
        if (sdgp_model_backward(m, dl, (uint64_t)s, &err) != SDGP_OK) {
            fprintf(stderr, "backward: %s\n", err.msg);
            ok = 0;
        }
        sdgp_model_sgd(m, 0.05f, 0.9f, 5e-4f, 0);
        if (s < k) *first += loss / k;
        if (s >= steps - k) *last += loss / k;
    }
    free(x), free(dl), free(y), free(idx);
    return ok;
}

/* Fashion-MNIST's training set into ds: 1 if loaded, else 0 with a note that the data-driven cases are skipped. */
static inline int load_fmnist(sdgp_dataset *ds) {
    sdgp_error err;
    if (sdgp_dataset_load(ds, "fashion-mnist", FMNIST, 1, &err) == SDGP_OK) return 1;
    fprintf(stderr, "note: %s; the data-driven cases are skipped\n", err.msg);
    return 0;
}

static inline void tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "/tmp/sdgp_test_model_%d_%s", (int)getpid(), name);
}

/* One column of m's choice text (sdgp_model_choice: "FBW:abc" per conv layer), a letter per layer:
 * col 0 forward, 1 data gradient, 2 weight gradient; 4, 5, 6 oneDNN's algorithm of each. */
static inline const char *choice_column(const sdgp_model *m, int col, char *buf, size_t size) {
    char text[SDGP_CHOICE_LEN];
    sdgp_model_choice(m, text, sizeof text);
    size_t k = 0;
    for (const char *t = text; *t && k + 1 < size;) {
        buf[k++] = t[col];
        t += strcspn(t, ",");
        t += *t == ',';
    }
    buf[k] = 0;
    return buf;
}

/* m's implementations as the earlier kernel-choice text that sdgp_model_set_choice still takes:
 * the data gradient's letters, then '/' and the forward's, '|' and the weight gradient's where a
 * layer holds one of those (e.g. "-sdwwsss/-ccccccc|--mm---m"). */
static inline const char *kernel_text(const sdgp_model *m, char *buf, size_t size) {
    char col[3][256];
    for (int p = 0; p < 3; p++) choice_column(m, p, col[p], sizeof col[p]);
    const int fwd = strspn(col[0], "-") < strlen(col[0]), wg = strspn(col[2], "-") < strlen(col[2]);
    char text[800];
    snprintf(text, sizeof text, "%s%s%s%s%s", col[1], fwd ? "/" : "", fwd ? col[0] : "", wg ? "|" : "", wg ? col[2] : "");
    const size_t n = strlen(text) < size ? strlen(text) : size - 1; /* truncated as snprintf would */
    memcpy(buf, text, n);
    buf[n] = 0;
    return buf;
}

/* m's oneDNN algorithms per conv layer as "abc,abc,..." (a, b, c: forward, data gradient, weight
 * gradient, 'd' direct or 'w' Winograd), the part after ':' of each token of its choice text. */
static inline const char *algos_text(const sdgp_model *m, char *buf, size_t size) {
    char text[SDGP_CHOICE_LEN];
    sdgp_model_choice(m, text, sizeof text);
    size_t k = 0;
    for (const char *t = strchr(text, ':'); t && k + 4 < size; t = strchr(t + 1, ':')) {
        if (k) buf[k++] = ',';
        memcpy(buf + k, t + 1, 3), k += 3;
    }
    buf[k] = 0;
    return buf;
}

/* m's choice text with its algorithms replaced by algos ("abc,abc,...", as algos_text gives them). */
static inline const char *with_algos(const sdgp_model *m, const char *algos, char *buf, size_t size) {
    sdgp_model_choice(m, buf, size);
    size_t a = 0;
    for (char *t = strchr(buf, ':'); t && a + 3 <= strlen(algos); t = strchr(t + 1, ':'), a += 4) memcpy(t + 1, algos + a, 3);
    return buf;
}

#endif
