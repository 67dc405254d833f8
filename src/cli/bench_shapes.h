/* The conv layer shapes `sdgp bench conv` times: the models' pruned layers as plain tables, kept
 * apart from the benchmark so that its file stays about measuring. */
#ifndef SDGP_CLI_BENCH_SHAPES_H
#define SDGP_CLI_BENCH_SHAPES_H

typedef struct {
    char name[32];                        /* "model/layer" */
    int B, H, W, Cin, Cout, k, stride, pad; /* square kernel k x k, pad on every side */
    int count;                            /* occurrences of this shape in the model: its weight in totals */
    int groups;                           /* grouped conv (0 or 1: ungrouped) */
} bench_layer;

/* Writes the pruned conv layers of `model` to out[0..max) and returns how many:
 *   "w1"    ResNet-9 width 1, batch 64, 32x32x3 (CIFAR-10), layers L2-L8, each once;
 *   "w0.25" ResNet-9 width 0.25, batch 128, 28x28x1 (Fashion-MNIST), layers L2-L8, each once;
 *   "r18"   torchvision's ResNet-18 adapted to 32x32x3 (3x3 stem, no max pool), batch 32: its
 *           distinct 3x3 convs after the stem (the 1x1 shortcut convs are not included), with
 *           count = how many times ResNet-18 has each;
 *   "rx"    torchvision's RegNetX-400MF at 224x224x3, batch 32: its distinct grouped 3x3 convs
 *           (group width 16) with their counts (the 1x1 convs are ungrouped, like r18's).
 * Returns 0 for any other name or when max is too small. */
int bench_model_layers(bench_layer *out, int max, const char *model);

#endif
