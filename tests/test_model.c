/* The training engine: models train and build, activation plans, SDGP options (checkpoints: test_checkpoint.c). */
#include <omp.h>

#include "model/model_internal.h" /* the plan of transient activations */
#include "model_util.h"

static sdgp_dataset fmnist;
static int have_fmnist;

TEST_CASE(every_pruning_function_trains) {
    if (!have_fmnist) return;
    struct { sdgp_prune_fn fn; int n, m; sdgp_sparse_mode sparse; sdgp_prune_domain domain; } cases[] = {
        {SDGP_PRUNE_NONE, 2, 4, SDGP_SPARSE_OFF, 0},       {SDGP_PRUNE_RANDOM, 2, 4, SDGP_SPARSE_ON, 0},
        {SDGP_PRUNE_MAGNITUDE, 2, 4, SDGP_SPARSE_ON, 0},   {SDGP_PRUNE_RESCALED, 1, 4, SDGP_SPARSE_ON, 0},
        {SDGP_PRUNE_MVUE, 2, 4, SDGP_SPARSE_ON, 0},        {SDGP_PRUNE_MVUE_APPROX, 2, 4, SDGP_SPARSE_OFF, 0},
        {SDGP_PRUNE_MAGNITUDE, 4, 32, SDGP_SPARSE_AUTO, 0},
        /* the Winograd domain (smallcnn's convs are 3x3 stride 1) */
        {SDGP_PRUNE_MAGNITUDE, 2, 4, SDGP_SPARSE_ON, SDGP_DOMAIN_WINOGRAD},
        {SDGP_PRUNE_RESCALED, 2, 4, SDGP_SPARSE_AUTO, SDGP_DOMAIN_WINOGRAD},
        {SDGP_PRUNE_MVUE, 2, 4, SDGP_SPARSE_ON, SDGP_DOMAIN_WINOGRAD},
        {SDGP_PRUNE_MAGNITUDE, 4, 32, SDGP_SPARSE_AUTO, SDGP_DOMAIN_AUTO},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sdgp_model_config c = small_config(32);
        c.prune = sdgp_prune_cfg_make(cases[i].fn, cases[i].n, cases[i].m);
        c.prune_first_layer = 1;
        c.sparse = cases[i].sparse;
        c.domain = cases[i].domain;
        sdgp_model *m;
        sdgp_error err;
        REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "create: %s", err.msg);
        if (c.domain == SDGP_DOMAIN_WINOGRAD)
            for (int l = 1; l < sdgp_model_conv_count(m); l++) /* conv 0 reads the image: no data gradient */
                CHECK(!strcmp(sdgp_model_conv_info(m, l)->bwd_kernel, "winograd"), "layer %d runs %s", l,
                      sdgp_model_conv_info(m, l)->bwd_kernel);
        double first, last;
        /* sanitizer builds: a few steps for the memory checks; convergence is the normal build's job */
        CHECK(train_steps(m, &fmnist, TEST_SANITIZED ? 4 : 60, TEST_SANITIZED ? 1 : 10, &first, &last), "steps");
        CHECK(TEST_SANITIZED || last < 0.8 * first, "%s %d:%d: loss %.4f -> %.4f did not fall", sdgp_prune_fn_name(cases[i].fn), cases[i].n,
              cases[i].m, first, last);
        sdgp_model_destroy(m);
    }
}

static void one_step_grads(const sdgp_model_config *c, float **out, size_t *n) {
    sdgp_model *m;
    sdgp_error err;
    *out = NULL;
    if (sdgp_model_create(&m, c, &err) != SDGP_OK) {
        fprintf(stderr, "create: %s\n", err.msg);
        return;
    }
    double a, b;
    train_steps(m, &fmnist, 2, 1, &a, &b);
    *n = 0;
    for (int i = 0; i < sdgp_model_param_count(m); i++) *n += sdgp_model_param(m, i)->count;
    *out = test_xmalloc(*n * sizeof(float));
    size_t off = 0;
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        memcpy(*out + off, p->data, p->count * sizeof(float));
        off += p->count;
    }
    sdgp_model_destroy(m);
}

TEST_CASE(prune_none_and_m_of_m_are_bitwise_dense) {
    if (!have_fmnist) return;
    sdgp_model_config c = small_config(16);
    float *dense, *full;
    size_t n1, n2;
    one_step_grads(&c, &dense, &n1);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 4, 4);
    c.sparse = SDGP_SPARSE_ON;
    one_step_grads(&c, &full, &n2);
    REQUIRE(dense && full && n1 == n2, "models");
    CHECK(test_bitwise_equal(dense, full, n1 * sizeof(float)), "4:4 differs from dense");
    free(full);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    one_step_grads(&c, &full, &n2);
    CHECK(full && !test_bitwise_equal(dense, full, n1 * sizeof(float)), "2:4 must differ from dense (test can fail)");
    free(dense), free(full);
}

TEST_CASE(bad_model_configs) {
    sdgp_model_config c = small_config(8);
    sdgp_model *m;
    sdgp_error err;
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 64); /* 32 channels in the first conv... */
    c.prune_first_layer = 1;
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "conv0"), "m > channels: %s", err.msg);
    c = small_config(8);
    c.height = c.width_px = 2;
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID, "too small an input");
    c = small_config(0);
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "batch"), "batch 0: %s", err.msg);
    c = small_config(8);
    c.width = -1;
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "width"), "width: %s", err.msg);
    c = small_config(8);
    c.kind = (sdgp_model_kind)sdgp_model_zoo_count();
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "unknown kind"), "kind: %s", err.msg);
    c = small_config(8); /* ResNet-18's layer4 needs at least 8x8 (three stride-2 convs) */
    c.kind = SDGP_MODEL_RESNET18;
    c.height = c.width_px = 0;
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID, "resnet18 on no input");
}

/* The registry: names are unique and parse back, the training configuration offers each (value
 * and help), and a bad name is refused with the list. */
TEST_CASE(model_registry) {
    int n = sdgp_model_zoo_count();
    CHECK(n >= 3 && sdgp_model_zoo(-1) == NULL && sdgp_model_zoo(n) == NULL, "count %d", n);
    CHECK(!strcmp(sdgp_model_zoo(SDGP_MODEL_RESNET9)->name, "resnet9") && !strcmp(sdgp_model_zoo(SDGP_MODEL_SMALLCNN)->name, "smallcnn") &&
              !strcmp(sdgp_model_zoo(SDGP_MODEL_RESNET18)->name, "resnet18"),
          "the enum constants name their rows");
    sdgp_error err;
    const char *help = NULL;
    char v[64];
    int model_field = -1;
    for (int i = 0; i < sdgp_train_config_field_count(); i++) {
        sdgp_train_config d = sdgp_train_config_default();
        if (!strcmp(sdgp_train_config_field(&d, i, &help, v, sizeof v), "model")) {
            model_field = i;
            break;
        }
    }
    REQUIRE(model_field >= 0 && help, "no model field");
    for (int k = 0; k < n; k++) {
        const sdgp_model_info *mi = sdgp_model_zoo(k);
        sdgp_model_kind kind;
        CHECK(sdgp_model_kind_parse(mi->name, &kind, &err) == SDGP_OK && (int)kind == k, "parse %s", mi->name);
        CHECK(mi->description && mi->description[0] && mi->height > 0 && mi->channels > 0, "%s: info", mi->name);
        for (int j = 0; j < k; j++) CHECK(strcmp(sdgp_model_zoo(j)->name, mi->name) != 0, "duplicate %s", mi->name);
        sdgp_train_config c = sdgp_train_config_default();
        CHECK(sdgp_train_config_set(&c, "model", mi->name, &err) == SDGP_OK && (int)c.model.kind == k, "--model %s", mi->name);
        CHECK(strstr(help, mi->name) != NULL, "--model help '%s' lacks %s", help, mi->name);
        sdgp_train_config_field(&c, model_field, NULL, v, sizeof v);
        CHECK(!strcmp(v, mi->name), "field value %s", v);
    }
    sdgp_model_kind kind;
    CHECK(sdgp_model_kind_parse("resnet1000", &kind, &err) == SDGP_ERR_INVALID && strstr(err.msg, "resnet18"), "%s", err.msg);
}

/* The global average pool against a plain loop, and bitwise the same on 1 and 2 threads. */
TEST_CASE(global_avgpool) {
    enum { B = 3, HW = 37, C = 40 };
    float *x = test_xmalloc(sizeof(float) * B * HW * C), y[B * C], y1[B * C], dy[B * C];
    float *dx = test_xmalloc(sizeof(float) * B * HW * C);
    test_fill_normal(x, (size_t)B * HW * C, 5);
    test_fill_normal(dy, (size_t)B * C, 6);
    sdgp_global_avgpool_forward(y, x, B, HW, C);
    omp_set_num_threads(1);
    sdgp_global_avgpool_forward(y1, x, B, HW, C);
    omp_set_num_threads(2);
    CHECK(test_bitwise_equal(y, y1, sizeof y), "thread count changed the result");
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int c = 0; c < C; c++) {
            double s = 0;
            for (int p = 0; p < HW; p++) s += x[((size_t)b * HW + p) * C + c];
            worst = fmax(worst, fabs(y[b * C + c] - s / HW));
        }
    CHECK(worst < 1e-5, "forward error %g", worst);
    sdgp_global_avgpool_backward(dx, dy, B, HW, C);
    int ok = 1;
    for (int b = 0; b < B; b++)
        for (int p = 0; p < HW; p++)
            for (int c = 0; c < C; c++) ok &= dx[((size_t)b * HW + p) * C + c] == dy[b * C + c] / (float)HW;
    CHECK(ok, "backward: dy / HW everywhere");
    free(x), free(dx);
}

/* The k x k max pool with stride and padding (ResNet-50's 3x3/2/1 stem pool, overlapping windows)
 * against a plain loop, backward summing where windows overlap, bitwise the same on 1 and 2 threads. */
TEST_CASE(maxpool_strided_padded) {
    enum { B = 2, H = 9, W = 8, C = 5, K = 3, S = 2, P = 1 };
    enum { HO = (H + 2 * P - K) / S + 1, WO = (W + 2 * P - K) / S + 1 };
    float x[B * H * W * C], y[B * HO * WO * C], dy[B * HO * WO * C], dx[B * H * W * C], dx1[B * H * W * C];
    float ref_dx[B * H * W * C] = {0};
    uint8_t arg[B * HO * WO * C];
    test_fill_normal(x, sizeof x / sizeof x[0], 11);
    test_fill_normal(dy, sizeof dy / sizeof dy[0], 12);
    x[((0 * H + 1) * W + 1) * C + 0] = 50.0f; /* in the overlap of four windows: it wins them all */
    sdgp_maxpool_forward(y, arg, x, B, H, W, C, K, S, P);
    int fwd_ok = 1;
    for (int b = 0; b < B; b++)
        for (int oh = 0; oh < HO; oh++)
            for (int ow = 0; ow < WO; ow++)
                for (int c = 0; c < C; c++) {
                    float best = -INFINITY;
                    int bh = -1, bw = -1;
                    for (int i = 0; i < K; i++)
                        for (int j = 0; j < K; j++) {
                            int h = oh * S - P + i, w = ow * S - P + j;
                            if (h < 0 || h >= H || w < 0 || w >= W) continue;
                            if (x[((b * H + h) * W + w) * C + c] > best) best = x[((b * H + h) * W + w) * C + c], bh = h, bw = w;
                        }
                    const int o = ((b * HO + oh) * WO + ow) * C + c;
                    fwd_ok &= y[o] == best;
                    ref_dx[((b * H + bh) * W + bw) * C + c] += dy[o];
                }
    CHECK(fwd_ok, "forward");
    sdgp_maxpool_backward(dx, dy, arg, B, H, W, C, K, S, P);
    CHECK(test_bitwise_equal(dx, ref_dx, sizeof dx), "backward (overlapping windows add)");
    CHECK(dx[(1 * W + 1) * C] == ((dy[0] + dy[C]) + dy[WO * C]) + dy[(WO + 1) * C], "the maximum collects four windows' gradients");
    omp_set_num_threads(1);
    sdgp_maxpool_backward(dx1, dy, arg, B, H, W, C, K, S, P);
    omp_set_num_threads(2);
    CHECK(test_bitwise_equal(dx, dx1, sizeof dx), "thread count changed the result");
}

/* A conv output without ReLU (ResNet's conv2, shortcut) can be dropped after forward: BatchNorm's
 * recompute must give bitwise the training forward's y (and differ from the ReLU one: the test can fail). */
TEST_CASE(batchnorm_recompute_is_bitwise) {
    enum { R = 300, C = 48 };
    float *x = test_xmalloc(sizeof(float) * R * C), *y = test_xmalloc(sizeof(float) * R * C), *y2 = test_xmalloc(sizeof(float) * R * C);
    float mean[C], rstd[C], rm[C] = {0}, rv[C], g[C], b[C];
    test_fill_normal(x, (size_t)R * C, 7);
    test_fill_normal(g, C, 8);
    test_fill_normal(b, C, 9);
    for (int c = 0; c < C; c++) rv[c] = 1.0f;
    sdgp_batchnorm_forward_train(y, mean, rstd, rm, rv, x, g, b, R, C, 0.1f, 1e-5f);
    sdgp_batchnorm_recompute(y2, x, mean, rstd, g, b, R, C);
    CHECK(test_bitwise_equal(y, y2, sizeof(float) * R * C), "recompute differs from forward");
    sdgp_batchnorm_relu_recompute(y2, x, mean, rstd, g, b, R, C);
    CHECK(!test_bitwise_equal(y, y2, sizeof(float) * R * C), "the ReLU recompute must differ");
    free(x), free(y), free(y2);
}

/* ResNet-18 (convs without ReLU, 1x1 stride-2 shortcuts, adds with ReLU, average pool): trains on
 * Fashion-MNIST, SDGP included, names its parameters as torchvision, round-trips a checkpoint, and
 * its transient activations (recomputed from z) save memory. */
TEST_CASE(resnet18_trains) {
    if (!have_fmnist) return;
    sdgp_model_config c = small_config(32);
    c.kind = SDGP_MODEL_RESNET18;
    c.width = 0.25f;
    sdgp_error err;
    for (int pruned = 0; pruned < 2; pruned++) {
        c.prune = sdgp_prune_cfg_make(pruned ? SDGP_PRUNE_MAGNITUDE : SDGP_PRUNE_NONE, 2, 4);
        c.sparse = SDGP_SPARSE_ON;
        sdgp_model *m;
        REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "create: %s", err.msg);
        CHECK(sdgp_model_conv_count(m) == 20, "convs: %d", sdgp_model_conv_count(m));
        CHECK(!strcmp(sdgp_model_conv_info(m, 7)->layer, "layer2.0.downsample.0"), "conv 7: %s", sdgp_model_conv_info(m, 7)->layer);
        CHECK(sdgp_model_conv_info(m, 7)->pruned == pruned, "the 1x1 shortcut is pruned with the rest");
        const sdgp_param *last = sdgp_model_param(m, sdgp_model_param_count(m) - 1);
        CHECK(!strcmp(last->name, "fc.bias") && !strcmp(sdgp_model_param(m, 0)->name, "conv1.weight"), "names: %s", last->name);
        /* every conv output (BatchNorm with or without ReLU) lives during forward only */
        int transient = 0;
        for (int k = 0; k < m->n_ops; k++)
            transient += m->ops[k].kind == OP_CONV && m->slots[m->ops[k].out].transient;
        CHECK(transient == 20, "%d of 20 conv outputs are transient", transient);
        double first, last_loss;
        CHECK(train_steps(m, &fmnist, TEST_SANITIZED ? 3 : 30, TEST_SANITIZED ? 1 : 6, &first, &last_loss), "steps");
        fprintf(stderr, "  resnet18 w0.25 %s: loss %.3f -> %.3f over 30 steps\n", pruned ? "magnitude 2:4" : "dense", first, last_loss);
        CHECK(TEST_SANITIZED || last_loss < 0.8 * first, "pruned=%d: loss %.4f -> %.4f did not fall", pruned, first, last_loss);
        /* evaluation mode (running statistics; BatchNorm without ReLU, add+ReLU, average pool) on
         * images the 30 steps saw (the first 960): far above chance (0.1). After 30 steps the running
         * statistics still lag, and the figure moves with the ISA's rounding (AVX2 host: 0.36 dense, 0.56
         * at 2:4; above 0.4 on the AVX-512 host the test was written on), so the bound is 2.5x chance,
         * not a training target. */
        sdgp_dataset seen = fmnist;
        seen.count = 960;
        sdgp_augment norm = {{0.286f}, {0.353f}, 0, 0, 0};
        double eval_loss, acc;
        CHECK(sdgp_evaluate(m, &seen, &norm, 0, 0.0f, &eval_loss, &acc, &err) == SDGP_OK, "%s", err.msg);
        CHECK(TEST_SANITIZED || acc > 0.25, "pruned=%d: accuracy %.3f in evaluation mode", pruned, acc);
        fprintf(stderr, "  evaluation mode: accuracy %.3f on the images it trained on\n", acc);
        if (!pruned) {
            char path[256];
            tmp_path(path, sizeof path, "r18.safetensors");
            sdgp_train_config tc = sdgp_train_config_default();
            tc.model = c;
            sdgp_checkpoint_state st = {0};
            sdgp_model *b;
            REQUIRE(sdgp_checkpoint_save(path, m, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
            REQUIRE(sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
            CHECK(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
            int same = 1;
            for (int i = 0; i < sdgp_model_param_count(m); i++) {
                const sdgp_param *p = sdgp_model_param(m, i), *q = sdgp_model_param(b, i);
                same &= test_bitwise_equal(p->data, q->data, p->count * sizeof(float));
            }
            CHECK(same, "checkpoint round trip");
            sdgp_model_destroy(b);
            unlink(path);
        }
        sdgp_model_destroy(m);
    }
}


/* RegNetX's grouped 3x3 convs (group width 16): at 2:4 the sparse kernel takes them (--sparse-kernel
 * on), and every pruned layer runs one; at 4:32 (width 2: every Cout a multiple of 32, each group's 16
 * output channels not) they prune into the dense kernel, the others stay sparse, and a step trains. */
TEST_CASE(regnetx_grouped_layers) {
    sdgp_model_config c = small_config(2);
    c.kind = SDGP_MODEL_REGNETX400MF;
    c.height = c.width_px = 32;
    c.channels = 3;
    c.sparse = SDGP_SPARSE_ON;
    for (int v = 0; v < 2; v++) {
        c.width = v ? 2.0f : 0.5f;
        c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, v ? 4 : 2, v ? 32 : 4);
        sdgp_model *m;
        sdgp_error err;
        REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "width %g: %s", (double)c.width, err.msg);
        int grouped = 0, bad = 0;
        for (int i = 1; i < sdgp_model_conv_count(m); i++) {
            const sdgp_layer_info *li = sdgp_model_conv_info(m, i);
            const int is_grouped = strstr(li->layer, "f.b.0") != NULL;
            grouped += is_grouped;
            const char *want = is_grouped && v ? "dense" : "sparse";
            /* the sparse kernel, with its pruning apart or fused into its packing (the same bits) */
            const int fused_ok = !strcmp(want, "sparse") && !strcmp(li->bwd_kernel, "sparse-fused");
            if (!li->pruned || (strcmp(li->bwd_kernel, want) && !fused_ok)) {
                bad++;
                CHECK(0, "%d:%d layer %s: pruned %d, kernel %s, want %s", c.prune.n, c.prune.m, li->layer, li->pruned,
                      li->bwd_kernel, want);
            }
        }
        CHECK(grouped == 22 && !bad, "%d grouped layers of 22, %d on the wrong kernel", grouped, bad);
        size_t n = (size_t)c.batch * c.height * c.width_px * c.channels;
        float *x = test_xmalloc(n * sizeof(float)), *dl = test_xmalloc((size_t)c.batch * c.num_classes * sizeof(float));
        test_fill_normal(x, n, 7);
        test_fill_normal(dl, (size_t)c.batch * c.num_classes, 8);
        sdgp_model_forward(m, x, 1);
        CHECK(sdgp_model_backward(m, dl, 0, &err) == SDGP_OK, "backward: %s", err.msg);
        free(x), free(dl);
        sdgp_model_destroy(m);
    }
}

/* --sparse-kernel fastest: every pruned layer ends on a sparse kernel or unpruned ('u', its exact
 * dL/dO: the dz hook sees dz itself and the layer reports pruned = 0), never pruned into the dense
 * kernel; a 'u' choice survives a checkpoint; a step trains. */
static int hook_same; /* 1 while every unpruned layer's dz_used == dz */
static void same_hook(void *ctx, int conv, const float *dz, const float *used, int64_t rows, int C) {
    const sdgp_model *m = ctx;
    (void)rows, (void)C;
    if (!sdgp_model_conv_info(m, conv)->pruned && used != dz) hook_same = 0;
}

TEST_CASE(sparse_fastest_prunes_only_where_sparse) {
    sdgp_model_config c = small_config(8);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.sparse = SDGP_SPARSE_FASTEST;
    sdgp_model *a;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&a, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[16];
    kernel_text(a, choice, sizeof choice);
    CHECK(choice[0] == '-' && strchr("swfu", choice[1]) && !strchr(choice, 'd'), "fastest: %s", choice);
    REQUIRE(sdgp_model_set_choice(a, "-u", &err) == SDGP_OK, "%s", err.msg);
    CHECK(!sdgp_model_conv_info(a, 1)->pruned && !strcmp(sdgp_model_conv_info(a, 1)->bwd_kernel, "unpruned"), "u: not pruned");
    size_t n = (size_t)c.batch * c.height * c.width_px * c.channels;
    float *x = test_xmalloc(n * sizeof(float)), *dl = test_xmalloc((size_t)c.batch * c.num_classes * sizeof(float));
    test_fill_normal(x, n, 5);
    test_fill_normal(dl, (size_t)c.batch * c.num_classes, 6);
    hook_same = 1;
    sdgp_model_set_dz_hook(a, same_hook, a);
    sdgp_model_forward(a, x, 1);
    CHECK(sdgp_model_backward(a, dl, 0, &err) == SDGP_OK, "%s", err.msg);
    CHECK(hook_same, "an unpruned layer's data gradient uses dL/dO itself");
    char path[256];
    tmp_path(path, sizeof path, "fastest.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    sdgp_model *b;
    REQUIRE(sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-u") == 0, "restored choice: %s", choice);
    unlink(path);
    free(x), free(dl);
    sdgp_model_destroy(a);
    sdgp_model_destroy(b);
    c.sparse = (sdgp_sparse_mode)7;
    CHECK(sdgp_model_create(&a, &c, &err) == SDGP_ERR_INVALID, "unknown mode refused");
}

/* --sdgp-domain: the choice text names the Winograd domain, survives a checkpoint, is refused
 * where the geometry has no Winograd-domain kernel, and winograd + --sparse-kernel off is refused. */
TEST_CASE(winograd_domain_choice) {
    sdgp_model_config c = small_config(8);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.prune_first_layer = 1;
    c.domain = SDGP_DOMAIN_WINOGRAD;
    sdgp_model *a, *b;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&a, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[16];
    kernel_text(a, choice, sizeof choice);
    CHECK(strcmp(choice, "-w") == 0, "winograd domain: %s", choice);
    c.domain = SDGP_DOMAIN_PIXEL;
    c.sparse = SDGP_SPARSE_ON;
    REQUIRE(sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-s") == 0 || strcmp(choice, "-f") == 0, "pixel domain: %s", choice);
    char path[256];
    tmp_path(path, sizeof path, "wino.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    kernel_text(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-w") == 0, "restored choice: %s", choice);
    CHECK(!strcmp(sdgp_model_conv_info(b, 1)->bwd_kernel, "winograd"), "restored kernel: %s", sdgp_model_conv_info(b, 1)->bwd_kernel);
    CHECK(sdgp_model_set_choice(b, "-x", &err) == SDGP_ERR_FORMAT, "unknown code");
    unlink(path);
    sdgp_model_destroy(a);
    sdgp_model_destroy(b);
    c.domain = SDGP_DOMAIN_WINOGRAD;
    c.sparse = SDGP_SPARSE_OFF;
    CHECK(sdgp_model_create(&a, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "sparse-kernel off"), "winograd + off: %s", err.msg);
    sdgp_prune_domain d;
    CHECK(sdgp_prune_domain_parse("winograd", &d, &err) == SDGP_OK && d == SDGP_DOMAIN_WINOGRAD, "parse");
    CHECK(sdgp_prune_domain_parse("fourier", &d, &err) == SDGP_ERR_INVALID && strstr(err.msg, "fourier"), "bad name: %s", err.msg);
    for (int i = 0; sdgp_prune_domain_names[i]; i++)
        CHECK(!strcmp(sdgp_prune_domain_name((sdgp_prune_domain)i), sdgp_prune_domain_names[i]), "name %d", i);
}

/* cfg.choice: create takes the kernels as given under every mode (no timing), the same bits as a
 * model that chose them itself, and refuses a text that does not fit the model. */
TEST_CASE(given_kernel_choice) {
    sdgp_model_config c = small_config(8);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    sdgp_model *m;
    sdgp_error err;
    char choice[16];
    const char *const texts[] = {"-d", "-s"};
    for (int t = 0; t < 2; t++) {
        snprintf(c.choice, sizeof c.choice, "%s", texts[t]);
        REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s: %s", texts[t], err.msg);
        kernel_text(m, choice, sizeof choice);
        CHECK(!strcmp(choice, texts[t]), "given %s, has %s", texts[t], choice);
        sdgp_model_destroy(m);
    }
    /* "-s" under auto trains as --sparse-kernel on does; "-d" (the pruned tensor through oneDNN) rounds otherwise */
    sdgp_model_config on = c;
    on.sparse = SDGP_SPARSE_ON;
    on.choice[0] = '\0';
    float *want, *got, *other;
    size_t n_want = 0, n_got = 0, n_other = 0;
    one_step_grads(&on, &want, &n_want);
    one_step_grads(&c, &got, &n_got);
    snprintf(c.choice, sizeof c.choice, "-d");
    one_step_grads(&c, &other, &n_other);
    REQUIRE(want && got && other && n_want == n_got && n_want == n_other, "three models trained");
    CHECK(test_bitwise_equal(want, got, n_want * sizeof *want), "--kernels -s differs from --sparse-kernel on");
    CHECK(!test_bitwise_equal(want, other, n_want * sizeof *want), "-d gave the sparse kernel's bits: not applied?");
    free(want);
    free(got);
    free(other);
    /* "-f", the pruning fused into the sparse kernel's packing, trains bitwise as "-s" for every function,
     * with a mask per row and with masks shared by 2 pixels */
    const sdgp_prune_fn fns[] = {SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RESCALED, SDGP_PRUNE_MVUE, SDGP_PRUNE_RANDOM};
    for (int f = 0; f < 8; f++) {
        sdgp_model_config cf = c;
        cf.prune.fn = fns[f % 4];
        cf.prune.mask_block = f < 4 ? 1 : 2;
        snprintf(cf.choice, sizeof cf.choice, "-s");
        one_step_grads(&cf, &want, &n_want);
        snprintf(cf.choice, sizeof cf.choice, "-f");
        one_step_grads(&cf, &got, &n_got);
        REQUIRE(want && got && n_want == n_got, "%s: both trained", sdgp_prune_fn_name(fns[f % 4]));
        CHECK(test_bitwise_equal(want, got, n_want * sizeof *want), "%s mask block %d: -f differs from -s",
              sdgp_prune_fn_name(fns[f % 4]), cf.prune.mask_block);
        free(want);
        free(got);
    }
    snprintf(c.choice, sizeof c.choice, "-ss");
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "does not fit a model of 2 conv layers"),
          "wrong length: %s", err.msg);
    snprintf(c.choice, sizeof c.choice, "s-");
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "layer 0 (conv0) cannot be 's'"), "image conv: %s", err.msg);
    memset(c.choice, 'd', sizeof c.choice);
    CHECK(sdgp_model_create(&m, &c, &err) == SDGP_ERR_INVALID && strstr(err.msg, "not a terminated text"), "unterminated: %s",
          err.msg);
}

TEST_CASE(config_table_round_trips) {
    sdgp_train_config c = sdgp_train_config_default(), d = sdgp_train_config_default();
    sdgp_error err;
    CHECK(sdgp_train_config_set(&c, "lr", "0.123", &err) == SDGP_OK, "lr");
    CHECK(sdgp_train_config_set(&c, "nm", "4:32", &err) == SDGP_OK && c.model.prune.n == 4 && c.model.prune.m == 32, "nm");
    CHECK(sdgp_train_config_set(&c, "prune", "rescaled", &err) == SDGP_OK, "prune");
    CHECK(sdgp_train_config_set(&c, "lr", "fast", &err) == SDGP_ERR_INVALID && strstr(err.msg, "fast"), "%s", err.msg);
    CHECK(sdgp_train_config_set(&c, "epochs", "0", &err) == SDGP_ERR_INVALID && strstr(err.msg, "range"), "%s", err.msg);
    CHECK(sdgp_train_config_set(&c, "nm", "5:4", &err) == SDGP_ERR_INVALID && strstr(err.msg, "nm: N:M '5:4': n=5"),
          "names the field and the text: %s", err.msg);
    CHECK(sdgp_train_config_set(&c, "bogus", "1", &err) == SDGP_ERR_INVALID && strstr(err.msg, "bogus"), "%s", err.msg);
    /* data-dir follows data while nobody set it, and only then */
    sdgp_train_config e = sdgp_train_config_default();
    CHECK(sdgp_train_config_set(&e, "data", "mnist", &err) == SDGP_OK && !strcmp(e.data_dir, "/usr/share/datasets/mnist"),
          "--data mnist reads %s", e.data_dir);
    CHECK(sdgp_train_config_set(&e, "data-dir", "/tmp/x", &err) == SDGP_OK &&
              sdgp_train_config_set(&e, "data", "fashion-mnist", &err) == SDGP_OK && !strcmp(e.data_dir, "/tmp/x"),
          "a given data-dir stays: %s", e.data_dir);
    char v[1100];
    for (int i = 0; i < sdgp_train_config_field_count(); i++) {
        const char *name = sdgp_train_config_field(&c, i, NULL, v, sizeof v);
        CHECK(sdgp_train_config_set(&d, name, v, &err) == SDGP_OK, "%s=%s: %s", name, v, err.msg);
    }
    CHECK(memcmp(&c, &d, sizeof c) == 0, "fields must round-trip the whole config");
}

/* ResNet-50 (53 convs, 161 trainable tensors: beyond any fixed-size table) builds, keeps every
 * conv output transient, and takes a finite step; its numerics are tests/golden_zoo.py's. */
TEST_CASE(resnet50_builds) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = SDGP_MODEL_RESNET50;
    c.width = 0.25f;
    c.batch = 2;
    c.height = c.width_px = 64;
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.sparse = SDGP_SPARSE_ON;
    sdgp_model *m;
    sdgp_error err = {0};
    REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "create: %s", err.msg);
    int trainable = 0, transient = 0;
    for (int i = 0; i < sdgp_model_param_count(m); i++) trainable += sdgp_model_param(m, i)->trainable;
    for (int k = 0; k < m->n_ops; k++) transient += m->ops[k].kind == OP_CONV && m->slots[m->ops[k].out].transient;
    CHECK(sdgp_model_conv_count(m) == 53 && trainable == 161, "%d convs, %d trainable tensors", sdgp_model_conv_count(m), trainable);
    CHECK(transient == 53, "%d of 53 conv outputs are transient", transient);
    CHECK(!strcmp(sdgp_model_conv_info(m, 52)->layer, "layer4.2.conv3"), "last conv: %s", sdgp_model_conv_info(m, 52)->layer);
    float *x = test_xmalloc(sizeof(float) * 2 * 64 * 64 * 3), dl[20];
    int32_t y[2] = {1, 7};
    test_fill_normal(x, (size_t)2 * 64 * 64 * 3, 13);
    const float *logits = sdgp_model_forward(m, x, 1);
    double loss = sdgp_softmax_xent(dl, NULL, logits, y, 2, 10, 0.0f);
    CHECK(isfinite(loss) && sdgp_model_backward(m, dl, 0, &err) == SDGP_OK, "step: loss %g %s", loss, err.msg);
    free(x);
    sdgp_model_destroy(m);
}

/* The activation arena's plan, for every registered model with and without SDGP: buffers alive at the
 * same time of the step never share a byte, all lie inside the arena, and the arena is smaller than
 * the sum of its buffers (gradients reuse what backward has consumed). Whether the intervals
 * themselves are right is what every golden and training test checks: a buffer reused too early
 * corrupts a gradient. */
TEST_CASE(activation_plan_never_overlaps_live_buffers) {
    for (int k = 0; k < sdgp_model_zoo_count(); k++)
        for (int variant = 0; variant < 4; variant++) {
            const int pruned = variant & 1;
            const sdgp_model_info *mi = sdgp_model_zoo(k);
            sdgp_model_config c = sdgp_model_config_default();
            c.kind = (sdgp_model_kind)k;
            c.recompute = variant & 2 ? SDGP_RECOMPUTE_BLOCKS : SDGP_RECOMPUTE_NONE;
            c.width = 0.25f;
            c.batch = 2;
            c.height = c.width_px = 32;
            c.channels = mi->channels;
            c.prune = sdgp_prune_cfg_make(pruned ? SDGP_PRUNE_MAGNITUDE : SDGP_PRUNE_NONE, 2, 4);
            c.sparse = SDGP_SPARSE_OFF; /* no kernel timing: the plan is what is tested */
            sdgp_model *m;
            sdgp_error err = {0};
            REQUIRE(sdgp_model_create(&m, &c, &err) == SDGP_OK, "%s: %s", mi->name, err.msg);
            size_t sum = 0;
            int bad = 0;
            for (int i = 0; i < m->n_mem_items; i++) {
                const model_mem_item *a = &m->mem_items[i];
                sum += a->bytes;
                bad += a->t0 > a->t1 || a->offset + a->bytes > m->act_bytes;
                for (int j = 0; j < i && a->bytes; j++) {
                    const model_mem_item *b = &m->mem_items[j];
                    int live_together = !(a->t1 < b->t0 || b->t1 < a->t0);
                    int share = b->bytes && a->offset < b->offset + b->bytes && b->offset < a->offset + a->bytes;
                    bad += live_together && share;
                }
            }
            CHECK(bad == 0, "%s pruned=%d recompute=%d: %d buffers overlap a live one or leave the arena", mi->name, pruned,
                  (int)c.recompute, bad);
            CHECK(m->act_bytes < sum, "%s: arena %zu bytes, buffers %zu: nothing shared", mi->name, m->act_bytes, sum);
            CHECK(m->n_grad_pool > 0 && m->grad_pool[0] >= (float *)m->act_arena, "%s: gradient buffers", mi->name);
            sdgp_model_destroy(m);
        }
}

/* Three SGD steps of a model on a fixed random batch: its parameters afterwards (caller frees),
 * and its activation arena's size. */
static float *steps_params(const sdgp_model_config *c, size_t *n, size_t *arena) {
    sdgp_model *m;
    sdgp_error err = {0};
    if (sdgp_model_create(&m, c, &err) != SDGP_OK) {
        CHECK(0, "create: %s", err.msg);
        return NULL;
    }
    size_t img = (size_t)c->height * c->width_px * c->channels, B = (size_t)c->batch;
    float *x = test_xmalloc(B * img * sizeof(float)), *dl = test_xmalloc(B * (size_t)c->num_classes * sizeof(float));
    int32_t *y = test_xmalloc(B * sizeof(int32_t));
    test_fill_normal(x, B * img, 11);
    for (size_t i = 0; i < B; i++) y[i] = (int32_t)(i * 3 % (size_t)c->num_classes);
    for (int step = 0; step < 3; step++) {
        sdgp_softmax_xent(dl, NULL, sdgp_model_forward(m, x, 1), y, (int)B, c->num_classes, 0.0f);
        CHECK(sdgp_model_backward(m, dl, (uint64_t)step, &err) == SDGP_OK, "backward: %s", err.msg);
        sdgp_model_sgd(m, 0.05f, 0.9f, 5e-4f, 0);
    }
    *n = 0;
    for (int i = 0; i < m->n_params; i++) *n += m->params[i].count;
    float *out = test_xmalloc(*n * sizeof(float)), *o = out;
    for (int i = 0; i < m->n_params; i++) {
        memcpy(o, m->params[i].data, m->params[i].count * sizeof(float));
        o += m->params[i].count;
    }
    *arena = m->act_bytes;
    free(x), free(dl), free(y);
    sdgp_model_destroy(m);
    return out;
}

/* --recompute blocks: every registered model, dense and SDGP, trains bitwise as without it (weights,
 * BatchNorm's running statistics), and the models with residual blocks need a smaller arena. */
TEST_CASE(recompute_blocks_is_bitwise_and_smaller) {
    for (int k = 0; k < sdgp_model_zoo_count(); k++)
        for (int pruned = 0; pruned < 2; pruned++) {
            const sdgp_model_info *mi = sdgp_model_zoo(k);
            sdgp_model_config c = sdgp_model_config_default();
            c.kind = (sdgp_model_kind)k;
            c.width = 0.25f;
            c.batch = 4;
            c.height = c.width_px = 32;
            c.channels = mi->channels;
            c.seed = 5;
            c.prune = sdgp_prune_cfg_make(pruned ? SDGP_PRUNE_RESCALED : SDGP_PRUNE_NONE, 2, 4);
            c.sparse = SDGP_SPARSE_ON;
            size_t n1, n2, a1, a2;
            float *kept = steps_params(&c, &n1, &a1);
            c.recompute = SDGP_RECOMPUTE_BLOCKS;
            float *again = steps_params(&c, &n2, &a2);
            if (kept && again && n1 == n2) {
                CHECK(test_bitwise_equal(kept, again, n1 * sizeof(float)), "%s pruned=%d: recompute changed training",
                      mi->name, pruned);
                if (k != SDGP_MODEL_SMALLCNN)
                    CHECK(a2 < a1, "%s: arena %zu bytes with recompute, %zu without", mi->name, a2, a1);
            } else {
                CHECK(0, "%s: the two models differ", mi->name);
            }
            free(kept), free(again);
        }
}

int main(void) {
    omp_set_num_threads(2);
    have_fmnist = load_fmnist(&fmnist);
    RUN(config_table_round_trips);
    RUN(bad_model_configs);
    RUN(model_registry);
    RUN(global_avgpool);
    RUN(batchnorm_recompute_is_bitwise);
    RUN(maxpool_strided_padded);
    RUN(resnet50_builds);
    RUN(activation_plan_never_overlaps_live_buffers);
    RUN(recompute_blocks_is_bitwise_and_smaller);
    RUN(regnetx_grouped_layers);
    RUN(sparse_fastest_prunes_only_where_sparse);
    RUN(winograd_domain_choice);
    RUN(given_kernel_choice);
    RUN(prune_none_and_m_of_m_are_bitwise_dense);
    RUN(every_pruning_function_trains);
    RUN(resnet18_trains);
    sdgp_dataset_free(&fmnist);
    return test_finish();
}
