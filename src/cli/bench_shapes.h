/* The conv layer shapes `sdgp bench conv` times, from the model registry. */
#ifndef SDGP_CLI_BENCH_SHAPES_H
#define SDGP_CLI_BENCH_SHAPES_H

typedef struct {
    char name[32];                        /* "model/layer" */
    int B, H, W, Cin, Cout, k, stride, pad; /* square kernel k x k, pad on every side */
    int count;                            /* occurrences of this shape in the model: its weight in totals */
    int groups;                           /* grouped conv (0 or 1: ungrouped) */
} bench_layer;

/* Writes the distinct conv layers of `model` that have a data gradient (all but the conv on the
 * image) to out[0..max), count = how many times the model has each, name "model/first layer"; returns
 * how many, 0 (after a message for a model that fails to build) for an unknown name or when max is
 * too small. The layers come from the registry's model (src/model/model_zoo.c):
 *   "w1"    ResNet-9 width 1, batch 64, 32x32x3 (CIFAR-10);
 *   "w0.25" ResNet-9 width 0.25, batch 128, 28x28x1 (Fashion-MNIST);
 *   "r18"   ResNet-18 on 32x32x3 (3x3 stem, no max pool), batch 32;
 *   "r50"   ResNet-50 on 224x224x3, batch 32; "rx" RegNetX-400MF on 224x224x3, batch 32;
 *   any registry name: width 1, batch 32, its own input. */
int bench_model_layers(bench_layer *out, int max, const char *model);

#endif
