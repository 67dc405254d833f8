/* The C side of the whole-step golden tests (tests/golden_step.py): builds a model from
 * DIR/config.txt (key=value lines: every `sdgp train` setting plus height, width-px, channels,
 * classes), reads the batch DIR/x.bin (B x H x W x C f32) and DIR/y.bin (B int32), and writes
 *   DIR/init/<param>.bin    parameters before the step
 *   DIR/loss.txt            the loss
 *   DIR/grad/<param>.bin    every parameter gradient
 *   DIR/dz/<conv>.bin, DIR/dzp/<conv>.bin   dense and pruned dL/dO per conv (the masks)
 *   DIR/new/<param>.bin     parameters and BatchNorm statistics after one SGD update
 * The oracle replays the step in PyTorch with the same weights, batch and masks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <omp.h>

#include "sdgp/train.h"

static int write_file(const char *dir, const char *sub, const char *name, const void *data, size_t bytes) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, sub);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/%s/%s.bin", dir, sub, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, bytes, f) != bytes) {
        fprintf(stderr, "golden_step: cannot write %s\n", path);
        if (f) fclose(f);
        return 0;
    }
    return fclose(f) == 0;
}

static int read_file(const char *dir, const char *name, void *data, size_t bytes) {
    char path[2048];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    size_t got = f ? fread(data, 1, bytes, f) : 0;
    if (f) fclose(f);
    if (got != bytes) fprintf(stderr, "golden_step: %s: expected %zu bytes, read %zu\n", path, bytes, got);
    return got == bytes;
}

static void save_params(const sdgp_model *m, const char *dir, const char *sub, int grads) {
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (grads && !p->trainable) continue;
        write_file(dir, sub, p->name, grads ? p->grad : p->data, p->count * sizeof(float));
    }
}

typedef struct { const char *dir; } hook_ctx;

static void dz_hook(void *ctx, int conv, const float *dz, const float *dzp, int64_t rows, int C) {
    const hook_ctx *h = ctx;
    char name[32];
    snprintf(name, sizeof name, "conv%d", conv);
    write_file(h->dir, "dz", name, dz, (size_t)rows * C * sizeof(float));
    if (dzp) write_file(h->dir, "dzp", name, dzp, (size_t)rows * C * sizeof(float)); /* NULL: Winograd-domain pruning */
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: golden_step DIR\n");
        return 2;
    }
    const char *dir = argv[1];
    char path[2048], line[1200];
    snprintf(path, sizeof path, "%s/config.txt", dir);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "golden_step: cannot open %s\n", path);
        return 2;
    }
    sdgp_train_config cfg = sdgp_train_config_default();
    sdgp_model_config *mc = &cfg.model;
    sdgp_error err;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = 0;
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        const char *k = line, *v = eq + 1;
        if (!strcmp(k, "height")) mc->height = atoi(v);
        else if (!strcmp(k, "width-px")) mc->width_px = atoi(v);
        else if (!strcmp(k, "channels")) mc->channels = atoi(v);
        else if (!strcmp(k, "classes")) mc->num_classes = atoi(v);
        else if (sdgp_train_config_set(&cfg, k, v, &err) != SDGP_OK) {
            fprintf(stderr, "golden_step: %s\n", err.msg);
            fclose(f);
            return 2;
        }
    }
    fclose(f);
    if (mc->threads > 0) omp_set_num_threads(mc->threads);
    sdgp_model *m;
    if (sdgp_model_create(&m, mc, &err) != SDGP_OK) {
        fprintf(stderr, "golden_step: %s\n", err.msg);
        return 1;
    }
    size_t B = (size_t)mc->batch, img = (size_t)mc->height * mc->width_px * mc->channels;
    float *x = malloc(B * img * sizeof(float)), *dlogits = malloc(B * mc->num_classes * sizeof(float));
    int32_t *y = malloc(B * sizeof(int32_t));
    int ok = x && dlogits && y && read_file(dir, "x.bin", x, B * img * sizeof(float)) &&
             read_file(dir, "y.bin", y, B * sizeof(int32_t));
    if (ok) {
        save_params(m, dir, "init", 0);
        hook_ctx h = {dir};
        sdgp_model_set_dz_hook(m, dz_hook, &h);
        const float *logits = sdgp_model_forward(m, x, 1);
        double loss = sdgp_softmax_xent(dlogits, NULL, logits, y, (int)B, mc->num_classes, cfg.label_smoothing);
        write_file(dir, ".", "logits", logits, B * mc->num_classes * sizeof(float));
        if (sdgp_model_backward(m, dlogits, 0, &err) != SDGP_OK) {
            fprintf(stderr, "golden_step: %s\n", err.msg);
            ok = 0;
        } else {
            save_params(m, dir, "grad", 1);
            sdgp_model_sgd(m, cfg.lr, cfg.momentum, cfg.weight_decay, cfg.nesterov);
            save_params(m, dir, "new", 0);
            snprintf(path, sizeof path, "%s/loss.txt", dir);
            FILE *lf = fopen(path, "w");
            if (lf) {
                fprintf(lf, "%.9g\n", loss);
                fclose(lf);
            }
            for (int i = 0; i < sdgp_model_conv_count(m); i++) {
                const sdgp_layer_info *li = sdgp_model_conv_info(m, i);
                printf("%s pruned=%d sparse=%d\n", li->layer, li->pruned, li->sparse_kernel);
            }
        }
    }
    free(x), free(dlogits), free(y);
    sdgp_model_destroy(m);
    return ok ? 0 : 1;
}
