/* The model layer tables of `sdgp bench conv` (declared in bench_shapes.h). */
#include <stdio.h>
#include <string.h>

#include "cli/bench_shapes.h"

/* ResNet-9's pruned conv layers at width multiplier 1/div, the input HW x HW. */
static int resnet9_layers(bench_layer *out, const char *model, int B, int HW, int div) {
    static const struct { const char *name; int in, out, k, stride, pad, pool_before; } spec[] = {
        {"L2", 128, 256, 5, 2, 2, 0}, {"L3", 256, 256, 3, 1, 1, 0}, {"L4", 256, 256, 3, 1, 1, 0},
        {"L5", 256, 512, 3, 1, 1, 0}, {"L6", 512, 512, 3, 1, 1, 1}, {"L7", 512, 512, 3, 1, 1, 0},
        {"L8", 512, 256, 3, 1, 0, 0},
    };
    int hw = HW, count = 0;
    for (size_t i = 0; i < sizeof spec / sizeof spec[0]; i++) {
        if (spec[i].pool_before) hw /= 2;
        bench_layer *l = &out[count++];
        *l = (bench_layer){.B = B, .H = hw, .W = hw, .Cin = spec[i].in / div, .Cout = spec[i].out / div,
                           .k = spec[i].k, .stride = spec[i].stride, .pad = spec[i].pad, .count = 1};
        snprintf(l->name, sizeof l->name, "%s/%s", model, spec[i].name);
        hw = (hw + 2 * spec[i].pad - spec[i].k) / spec[i].stride + 1;
    }
    return count;
}

/* ResNet-18 on 32x32: four stages of two basic blocks (two 3x3 convs each); the first conv of
 * stages 2-4 has stride 2. Distinct shapes with their multiplicity: stage 1 has four 64->64
 * convs, every later stage one strided conv and three stride-1 ones. Batch 32. */
static int resnet18_layers(bench_layer *out) {
    static const struct { const char *name; int hw, in, out, stride, count; } spec[] = {
        {"64-64", 32, 64, 64, 1, 4},     {"64-128s2", 32, 64, 128, 2, 1},   {"128-128", 16, 128, 128, 1, 3},
        {"128-256s2", 16, 128, 256, 2, 1}, {"256-256", 8, 256, 256, 1, 3}, {"256-512s2", 8, 256, 512, 2, 1},
        {"512-512", 4, 512, 512, 1, 3},
    };
    int n = (int)(sizeof spec / sizeof spec[0]);
    for (int i = 0; i < n; i++) {
        out[i] = (bench_layer){.B = 32, .H = spec[i].hw, .W = spec[i].hw, .Cin = spec[i].in, .Cout = spec[i].out,
                               .k = 3, .stride = spec[i].stride, .pad = 1, .count = spec[i].count};
        snprintf(out[i].name, sizeof out[i].name, "r18/%s", spec[i].name);
    }
    return n;
}

/* RegNetX-400MF (model_zoo.c): after the 112x112 stem, stages of 1/2/7/12 blocks with 32/64/160/400
 * channels; each block's grouped 3x3 conv keeps its channels (groups = C/16), stride 2 in a stage's
 * first block. Batch 32. */
static int regnetx_layers(bench_layer *out) {
    static const struct { const char *name; int hw, c, stride, count; } spec[] = {
        {"32s2", 112, 32, 2, 1}, {"64s2", 56, 64, 2, 1},   {"64", 28, 64, 1, 1},  {"160s2", 28, 160, 2, 1},
        {"160", 14, 160, 1, 6},  {"400s2", 14, 400, 2, 1}, {"400", 7, 400, 1, 11},
    };
    int n = (int)(sizeof spec / sizeof spec[0]);
    for (int i = 0; i < n; i++) {
        out[i] = (bench_layer){.B = 32, .H = spec[i].hw, .W = spec[i].hw, .Cin = spec[i].c, .Cout = spec[i].c, .k = 3,
                               .stride = spec[i].stride, .pad = 1, .count = spec[i].count, .groups = spec[i].c / 16};
        snprintf(out[i].name, sizeof out[i].name, "rx/g%s", spec[i].name);
    }
    return n;
}

int bench_model_layers(bench_layer *out, int max, const char *model) {
    enum { RESNET9_LAYERS = 7, RESNET18_SHAPES = 7, REGNETX_SHAPES = 7 };
    if (!strcmp(model, "w1")) return max >= RESNET9_LAYERS ? resnet9_layers(out, "w1", 64, 32, 1) : 0;
    if (!strcmp(model, "w0.25")) return max >= RESNET9_LAYERS ? resnet9_layers(out, "w0.25", 128, 28, 4) : 0;
    if (!strcmp(model, "r18")) return max >= RESNET18_SHAPES ? resnet18_layers(out) : 0;
    if (!strcmp(model, "rx")) return max >= REGNETX_SHAPES ? regnetx_layers(out) : 0;
    return 0;
}
