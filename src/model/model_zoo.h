/* The model registry: one row per model, in the order of sdgp_model_kind (include/sdgp/model.h).
 * Everything that names models reads it: sdgp_model_create (the builder), sdgp_model_zoo (names,
 * descriptions, inputs: checkpoint signatures, `sdgp bench step --model`, tests) and the training
 * configuration's --model values and help (src/train/config.c).
 *
 * A row: X(name, height, width_px, channels, description). name is the --model value and the
 * builder's suffix (build_<name> in model_zoo.c); the input is the one the model is made for (the
 * benchmarks' default; any input the layers fit works). Adding a model: a row here, its builder,
 * its SDGP_MODEL_* constant, and a PyTorch twin for the golden test (README, "Models"). */
#ifndef SDGP_MODEL_ZOO_H
#define SDGP_MODEL_ZOO_H

#define SDGP_MODEL_ZOO(X)                                                                                           \
    X(resnet9, 32, 32, 3, "ResNet-9 of KakaoBrain/ffcv: 128/256/512 channels x width, max pools, logits x 0.2")    \
    X(smallcnn, 28, 28, 1, "two conv+BN+ReLU layers (32/64 channels x width) with max pools; for tests")          \
    X(resnet18, 32, 32, 3,                                                                                          \
      "torchvision's ResNet-18 (BasicBlock) with a small-image stem: 3x3 stride-1 conv, no max pool; "             \
      "64/128/256/512 channels x width")                                                                         \
    X(resnet50, 224, 224, 3,                                                                                        \
      "torchvision's ResNet-50 (Bottleneck, stride in the 3x3 conv) with the ImageNet stem: 7x7 stride-2 conv, "    \
      "3x3 stride-2 max pool; 64/128/256/512 (x4) channels x width")                                              \
    X(regnetx400mf, 224, 224, 3,                                                                                    \
      "torchvision's RegNetX-400MF: 3x3 stride-2 stem, 1/2/7/12 bottleneck blocks of grouped 3x3 convs (group "     \
      "width 16); 32/64/160/400 channels x width, multiples of 16")

#endif
