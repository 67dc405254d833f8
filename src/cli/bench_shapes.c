/* The conv layer shapes of `sdgp bench conv --model`: the registry's models themselves (built at
 * batch 1, which no shape but the batch depends on), not tables that re-describe them. */
#include <stdio.h>
#include <string.h>

#include "cli/bench_shapes.h"
#include "sdgp/model.h"

typedef struct {
    const char *name;
    const char *kind; /* registry name */
    float width;
    int batch, h, w, c;
} preset;

/* The benchmark's usual cases: ResNet-9 as the README's tables train it, and models it was not
 * tuned on. Any other registry name: width 1, batch 32, its own input. */
static const preset presets[] = {
    {"w1", "resnet9", 1.0f, 64, 32, 32, 3},        {"w0.25", "resnet9", 0.25f, 128, 28, 28, 1},
    {"r18", "resnet18", 1.0f, 32, 32, 32, 3},      {"r50", "resnet50", 1.0f, 32, 224, 224, 3},
    {"rx", "regnetx400mf", 1.0f, 32, 224, 224, 3},
};

int bench_model_layers(bench_layer *out, int max, const char *model) {
    preset p = {model, model, 1.0f, 32, 0, 0, 0};
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(model, presets[i].name)) p = presets[i];
    sdgp_model_config c = sdgp_model_config_default();
    sdgp_error err;
    if (sdgp_model_kind_parse(p.kind, &c.kind, &err) != SDGP_OK) return 0;
    const sdgp_model_info *zi = sdgp_model_zoo((int)c.kind);
    c.width = p.width;
    c.batch = 1;
    c.height = p.h ? p.h : zi->height;
    c.width_px = p.w ? p.w : zi->width_px;
    c.channels = p.c ? p.c : zi->channels;
    c.threads = 1;
    c.conv_algo = SDGP_CONV_DIRECT; /* nothing to time or plan beyond the shapes */
    c.sparse = SDGP_SPARSE_OFF;
    sdgp_model *m;
    if (sdgp_model_create(&m, &c, &err) != SDGP_OK) {
        fprintf(stderr, "sdgp: --model %s: %s\n", model, err.msg);
        return 0;
    }
    int count = 0;
    for (int i = 0; i < sdgp_model_conv_count(m); i++) {
        const sdgp_conv_geom *g = &sdgp_model_conv_info(m, i)->geom;
        if (i == 0) continue; /* the conv on the image (every model's first) has no data gradient */
        int k = 0;
        while (k < count && !(out[k].H == g->H && out[k].W == g->W && out[k].Cin == g->Cin && out[k].Cout == g->Cout &&
                              out[k].k == g->kh && out[k].stride == g->stride && out[k].pad == g->pad &&
                              out[k].groups == (g->groups > 1 ? g->groups : 0)))
            k++;
        if (k < count) {
            out[k].count++;
            continue;
        }
        if (count == max || g->kh != g->kw) {
            sdgp_model_destroy(m);
            return 0;
        }
        out[count] = (bench_layer){.B = p.batch, .H = g->H, .W = g->W, .Cin = g->Cin, .Cout = g->Cout, .k = g->kh,
                                   .stride = g->stride, .pad = g->pad, .count = 1, .groups = g->groups > 1 ? g->groups : 0};
        snprintf(out[count].name, sizeof out[count].name, "%s/%s", p.name, sdgp_model_conv_info(m, i)->layer);
        count++;
    }
    sdgp_model_destroy(m);
    return count;
}
