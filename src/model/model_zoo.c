/* The models: one builder per row of the registry (model_zoo.h), each a plain sequence of the
 * layers of model_build.c. Parameter names follow each model's PyTorch twin: ResNet-9 and the small
 * CNN have our own ("conv3.weight", "bn3.running_var", "linear.weight"), the ResNets torchvision's
 * state_dict ("layer2.0.downsample.1.weight", "fc.bias"), so its checkpoints load into torchvision
 * by name. */
#include <stdio.h>
#include <string.h>

#include "model/model_internal.h"
#include "model/model_zoo.h"

/* conv + BatchNorm (+ ReLU) with ResNet-9's names (conv<i>, bn<i>) */
static int conv_bn(model_builder *b, int in, int cout, int k, int stride, int pad, int relu) {
    model_conv_spec s = {.cout = cout, .k = k, .stride = stride, .pad = pad, .bn = 1, .relu = relu};
    return model_conv(b, in, &s);
}

static void build_resnet9(model_builder *b) {
    const sdgp_model_config *c = &b->m->cfg;
    int c1 = model_scaled_channels(c->width, 128), c2 = model_scaled_channels(c->width, 256),
        c3 = model_scaled_channels(c->width, 512);
    int x = model_input(b);
    x = conv_bn(b, x, c1, 3, 1, 1, 1);          /* prep */
    x = conv_bn(b, x, c2, 5, 2, 2, 1);          /* layer1 */
    int r = conv_bn(b, x, c2, 3, 1, 1, 1);      /* res1 */
    r = conv_bn(b, r, c2, 3, 1, 1, 1);
    x = model_add(b, x, r, 0);
    x = conv_bn(b, x, c3, 3, 1, 1, 1);          /* layer2 */
    x = model_maxpool2(b, x);
    r = conv_bn(b, x, c3, 3, 1, 1, 1);          /* res2 */
    r = conv_bn(b, r, c3, 3, 1, 1, 1);
    x = model_add(b, x, r, 0);
    x = conv_bn(b, x, c2, 3, 1, 0, 1);          /* layer3 */
    x = model_global_maxpool(b, x);
    x = model_linear(b, x, c->num_classes, 0, "linear");
    b->m->logits_slot = model_scale(b, x, c->out_scale);
}

static void build_smallcnn(model_builder *b) {
    const sdgp_model_config *c = &b->m->cfg;
    int c1 = model_scaled_channels(c->width, 32), c2 = model_scaled_channels(c->width, 64);
    int x = model_input(b);
    x = conv_bn(b, x, c1, 3, 1, 1, 1);
    x = model_maxpool2(b, x);
    x = conv_bn(b, x, c2, 3, 1, 1, 1);
    x = model_maxpool2(b, x);
    x = model_global_maxpool(b, x);
    b->m->logits_slot = model_linear(b, x, c->num_classes, 1, "linear");
}

/* conv + BatchNorm (+ ReLU) named prefix.conv_name / prefix.bn_name (torchvision's names) */
static int tv_conv(model_builder *b, int in, const char *prefix, const char *conv_name, const char *bn_name, int cout,
                   int k, int stride, int relu) {
    char cn[MODEL_NAME_LEN], bn[MODEL_NAME_LEN];
    snprintf(cn, sizeof cn, "%s%s", prefix, conv_name);
    snprintf(bn, sizeof bn, "%s%s", prefix, bn_name);
    model_conv_spec s = {.cout = cout, .k = k, .stride = stride, .pad = k / 2, .bn = 1, .relu = relu, .name = cn, .bn_name = bn};
    return model_conv(b, in, &s);
}

/* torchvision's BasicBlock: relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut), where the shortcut
 * is x, or a 1x1 conv + BatchNorm ("downsample") when the stride or the channels change. The
 * first conv carries the stride. */
static int basic_block(model_builder *b, int x, const char *prefix, int planes, int stride) {
    int cin = b->st == SDGP_OK ? b->m->slots[x].C : planes;
    int r = tv_conv(b, x, prefix, "conv1", "bn1", planes, 3, stride, 1);
    r = tv_conv(b, r, prefix, "conv2", "bn2", planes, 3, 1, 0);
    int sc = x;
    if (stride != 1 || cin != planes) sc = tv_conv(b, x, prefix, "downsample.0", "downsample.1", planes, 1, stride, 0);
    return model_add(b, sc, r, 1);
}

/* torchvision's Bottleneck (v1.5: the stride in the 3x3 conv): 1x1 to planes, 3x3, 1x1 to 4 planes
 * without ReLU, added to the shortcut (x, or a 1x1 conv + BatchNorm), then ReLU. */
static int bottleneck(model_builder *b, int x, const char *prefix, int planes, int stride) {
    int cin = b->st == SDGP_OK ? b->m->slots[x].C : 4 * planes;
    int r = tv_conv(b, x, prefix, "conv1", "bn1", planes, 1, 1, 1);
    r = tv_conv(b, r, prefix, "conv2", "bn2", planes, 3, stride, 1);
    r = tv_conv(b, r, prefix, "conv3", "bn3", 4 * planes, 1, 1, 0);
    int sc = x;
    if (stride != 1 || cin != 4 * planes) sc = tv_conv(b, x, prefix, "downsample.0", "downsample.1", 4 * planes, 1, stride, 0);
    return model_add(b, sc, r, 1);
}

/* torchvision's ResNet: a stem, four stages of blocks (64/128/256/512 planes x width; stages 2-4
 * start with stride 2), global average pool, fc. imagenet_stem: 7x7 stride-2 conv and 3x3 stride-2
 * max pool (224x224 inputs); otherwise the small-image stem, a 3x3 stride-1 conv and no max pool
 * (the usual CIFAR adaptation: a 32x32 input reaches the last stage at 4x4). */
static void torchvision_resnet(model_builder *b, int (*block)(model_builder *, int, const char *, int, int),
                               const int blocks[4], int imagenet_stem) {
    const sdgp_model_config *c = &b->m->cfg;
    int x = model_input(b);
    x = tv_conv(b, x, "", "conv1", "bn1", model_scaled_channels(c->width, 64), imagenet_stem ? 7 : 3, imagenet_stem ? 2 : 1, 1);
    if (imagenet_stem) x = model_maxpool(b, x, 3, 2, 1);
    static const int base[4] = {64, 128, 256, 512};
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < blocks[l]; k++) {
            char prefix[32];
            snprintf(prefix, sizeof prefix, "layer%d.%d.", l + 1, k);
            x = block(b, x, prefix, model_scaled_channels(c->width, base[l]), l > 0 && k == 0 ? 2 : 1);
        }
    x = model_global_avgpool(b, x);
    b->m->logits_slot = model_linear(b, x, c->num_classes, 1, "fc");
}

/* torchvision's RegNet ResBottleneckBlock (bottleneck multiplier 1, no squeeze-excitation):
 * relu(proj(x) + c(b(a(x)))), a: 1x1 conv+BN+ReLU, b: 3x3 grouped conv (group width 16) with the
 * stride +BN+ReLU, c: 1x1 conv+BN; proj: 1x1 conv+BN when the stride or the channels change, else x. */
static int regnet_block(model_builder *b, int x, const char *prefix, int cout, int stride) {
    int cin = b->st == SDGP_OK ? b->m->slots[x].C : cout;
    char cn[MODEL_NAME_LEN], bn[MODEL_NAME_LEN];
    int r = tv_conv(b, x, prefix, "f.a.0", "f.a.1", cout, 1, 1, 1);
    snprintf(cn, sizeof cn, "%sf.b.0", prefix);
    snprintf(bn, sizeof bn, "%sf.b.1", prefix);
    model_conv_spec s = {.cout = cout, .k = 3, .stride = stride, .pad = 1, .groups = cout / 16, .bn = 1, .relu = 1,
                         .name = cn, .bn_name = bn};
    r = model_conv(b, r, &s);
    r = tv_conv(b, r, prefix, "f.c.0", "f.c.1", cout, 1, 1, 0);
    int sc = x;
    if (stride != 1 || cin != cout) sc = tv_conv(b, x, prefix, "proj.0", "proj.1", cout, 1, stride, 0);
    return model_add(b, sc, r, 1);
}

/* torchvision's regnet_x_400mf: stem (3x3 stride-2 conv+BN+ReLU, 32 channels), four stages of
 * 1/2/7/12 blocks with 32/64/160/400 channels, each stage starting with stride 2, global average
 * pool, fc. --width scales the channels to multiples of the group width 16 (at least 16). */
static void build_regnetx400mf(model_builder *b) {
    const sdgp_model_config *c = &b->m->cfg;
    static const int depth[4] = {1, 2, 7, 12}, base[4] = {32, 64, 160, 400};
    int x = model_input(b);
    x = tv_conv(b, x, "", "stem.0", "stem.1", model_group_channels(c->width, 32, 16), 3, 2, 1);
    for (int l = 0; l < 4; l++)
        for (int k = 0; k < depth[l]; k++) {
            char prefix[48];
            snprintf(prefix, sizeof prefix, "trunk_output.block%d.block%d-%d.", l + 1, l + 1, k);
            x = regnet_block(b, x, prefix, model_group_channels(c->width, base[l], 16), k == 0 ? 2 : 1);
        }
    x = model_global_avgpool(b, x);
    b->m->logits_slot = model_linear(b, x, c->num_classes, 1, "fc");
}

static void build_resnet18(model_builder *b) { torchvision_resnet(b, basic_block, (const int[4]){2, 2, 2, 2}, 0); }
static void build_resnet50(model_builder *b) { torchvision_resnet(b, bottleneck, (const int[4]){3, 4, 6, 3}, 1); }

/* ---- the registry ---- */

#define ZOO_INFO(name, h, w, c, desc) {#name, desc, h, w, c},
#define ZOO_BUILDER(name, h, w, c, desc) build_##name,
#define ZOO_INDEX(name, h, w, c, desc) ZOO_##name,
static const sdgp_model_info zoo[] = {SDGP_MODEL_ZOO(ZOO_INFO)};
static void (*const builders[])(model_builder *) = {SDGP_MODEL_ZOO(ZOO_BUILDER)};
enum { SDGP_MODEL_ZOO(ZOO_INDEX) ZOO_COUNT };
/* the public constants name rows of the registry */
_Static_assert((int)SDGP_MODEL_RESNET9 == (int)ZOO_resnet9 && (int)SDGP_MODEL_SMALLCNN == (int)ZOO_smallcnn &&
                   (int)SDGP_MODEL_RESNET18 == (int)ZOO_resnet18 && (int)SDGP_MODEL_RESNET50 == (int)ZOO_resnet50 &&
                   (int)SDGP_MODEL_REGNETX400MF == (int)ZOO_regnetx400mf,
               "sdgp_model_kind must follow the rows of SDGP_MODEL_ZOO");

int sdgp_model_zoo_count(void) { return ZOO_COUNT; }

const sdgp_model_info *sdgp_model_zoo(int kind) { return kind >= 0 && kind < ZOO_COUNT ? &zoo[kind] : NULL; }

sdgp_status sdgp_model_kind_parse(const char *name, sdgp_model_kind *out, sdgp_error *err) {
    char names[256] = "";
    for (int i = 0; i < ZOO_COUNT; i++) {
        if (name && !strcmp(name, zoo[i].name)) {
            *out = (sdgp_model_kind)i;
            return SDGP_OK;
        }
        size_t len = strlen(names);
        snprintf(names + len, sizeof names - len, "%s%s", i ? ", " : "", zoo[i].name);
    }
    return sdgp_fail(err, SDGP_ERR_INVALID, "unknown model '%s' (models: %s)", name ? name : "(null)", names);
}

void model_zoo_build(model_builder *b) {
    int kind = (int)b->m->cfg.kind;
    if (kind < 0 || kind >= ZOO_COUNT) {
        b->st = sdgp_fail(b->err, SDGP_ERR_INVALID, "model: unknown kind %d (%d models are registered)", kind, ZOO_COUNT);
        return;
    }
    builders[kind](b);
}
