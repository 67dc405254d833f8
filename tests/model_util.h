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

#endif
