/* The training engine: models train, checkpoints round-trip, resume is exact, SDGP options. */
#include <omp.h>
#include <unistd.h>

#include "harness.h"
#include "sdgp/train.h"

#define FMNIST "/usr/share/datasets/fashion-mnist"

static sdgp_model_config small_config(int batch) {
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
static int train_steps(sdgp_model *m, const sdgp_dataset *ds, int steps, int k, double *first, double *last) {
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

static void tmp_path(char *buf, size_t size, const char *name) {
    snprintf(buf, size, "/tmp/sdgp_test_model_%d_%s", (int)getpid(), name);
}

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
}


static sdgp_train_config run_config(const char *ckpt, int64_t max_steps) {
    sdgp_train_config c = sdgp_train_config_default();
    c.model.kind = SDGP_MODEL_SMALLCNN;
    c.model.width = 1.0f;
    c.model.batch = 64;
    c.model.seed = 11;
    c.model.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MVUE, 2, 4);
    c.model.sparse = SDGP_SPARSE_ON;
    c.model.prune_first_layer = 1;
    c.epochs = 1;
    c.max_steps = max_steps;
    c.checkpoint_every = 10;
    c.quiet = 1;
    c.tta = 0;
    snprintf(c.checkpoint, sizeof c.checkpoint, "%s", ckpt);
    return c;
}

TEST_CASE(checkpoint_resume_is_exact) {
    if (!have_fmnist) return;
    char a[256], b[256];
    tmp_path(a, sizeof a, "a.safetensors");
    tmp_path(b, sizeof b, "b.safetensors");
    sdgp_train_result res;
    sdgp_error err;
    sdgp_train_config ca = run_config(a, 20);
    REQUIRE(sdgp_train(&ca, &res, NULL, &err) == SDGP_OK, "run a: %s", err.msg);
    sdgp_train_config cb = run_config(b, 10);
    REQUIRE(sdgp_train(&cb, &res, NULL, &err) == SDGP_OK, "run b: %s", err.msg);
    cb.max_steps = 20;
    snprintf(cb.resume, sizeof cb.resume, "%s", b);
    REQUIRE(sdgp_train(&cb, &res, NULL, &err) == SDGP_OK, "resume b: %s", err.msg);
    CHECK(res.steps == 10, "resumed run took %lld steps", (long long)res.steps);

    sdgp_train_config rc;
    REQUIRE(sdgp_checkpoint_read_config(a, &rc, &err) == SDGP_OK, "read config: %s", err.msg);
    CHECK(rc.model.prune.fn == SDGP_PRUNE_MVUE && rc.model.prune.n == 2 && rc.model.seed == 11, "config round trip");
    sdgp_model_config mc = rc.model;
    mc.height = mc.width_px = 28;
    mc.channels = 1;
    sdgp_model *ma, *mb;
    REQUIRE(sdgp_model_create(&ma, &mc, &err) == SDGP_OK && sdgp_model_create(&mb, &mc, &err) == SDGP_OK, "%s", err.msg);
    sdgp_checkpoint_state sa, sb;
    REQUIRE(sdgp_checkpoint_load(a, ma, &sa, &err) == SDGP_OK, "load a: %s", err.msg);
    REQUIRE(sdgp_checkpoint_load(b, mb, &sb, &err) == SDGP_OK, "load b: %s", err.msg);
    CHECK(sa.step == 20 && sb.step == 20, "steps %lld %lld", (long long)sa.step, (long long)sb.step);
    int same = 1;
    for (int i = 0; i < sdgp_model_param_count(ma); i++) {
        const sdgp_param *p = sdgp_model_param(ma, i), *q = sdgp_model_param(mb, i);
        if (!test_bitwise_equal(p->data, q->data, p->count * sizeof(float))) {
            fprintf(stderr, "  %s differs\n", p->name);
            same = 0;
        }
        if (p->trainable && !test_bitwise_equal(p->momentum, q->momentum, p->count * sizeof(float))) same = 0;
    }
    CHECK(same, "resumed run must end bitwise equal to the uninterrupted one");

    /* a checkpoint of another model is refused, naming the mismatch */
    sdgp_model_config other = mc;
    other.width = 2.0f;
    sdgp_model *mo;
    REQUIRE(sdgp_model_create(&mo, &other, &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_checkpoint_load(a, mo, NULL, &err) == SDGP_ERR_FORMAT && strstr(err.msg, "another model"), "%s", err.msg);
    sdgp_model_destroy(mo);
    sdgp_model_destroy(ma);
    sdgp_model_destroy(mb);
    unlink(a);
    unlink(b);
}

TEST_CASE(checkpoint_keeps_kernel_choice) {
    sdgp_model_config c = small_config(8);
    c.prune = sdgp_prune_cfg_make(SDGP_PRUNE_MAGNITUDE, 2, 4);
    c.prune_first_layer = 1;
    c.sparse = SDGP_SPARSE_ON;
    sdgp_model *a, *b;
    sdgp_error err;
    REQUIRE(sdgp_model_create(&a, &c, &err) == SDGP_OK && sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    char choice[16];
    sdgp_model_sparse_choice(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-s") == 0, "sparse on: %s", choice);
    CHECK(sdgp_model_set_sparse_choice(a, "-d", &err) == SDGP_OK, "%s", err.msg);
    CHECK(sdgp_model_set_sparse_choice(a, "sd", &err) == SDGP_ERR_FORMAT, "the image conv has no data gradient to prune");
    CHECK(sdgp_model_set_sparse_choice(a, "-dd", &err) == SDGP_ERR_FORMAT, "length");
    char path[256];
    tmp_path(path, sizeof path, "kernels.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    sdgp_model_sparse_choice(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-d") == 0, "restored choice: %s", choice);
    unlink(path);
    sdgp_model_destroy(a);
    sdgp_model_destroy(b);
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
    sdgp_model_sparse_choice(a, choice, sizeof choice);
    CHECK(strcmp(choice, "-w") == 0, "winograd domain: %s", choice);
    c.domain = SDGP_DOMAIN_PIXEL;
    c.sparse = SDGP_SPARSE_ON;
    REQUIRE(sdgp_model_create(&b, &c, &err) == SDGP_OK, "%s", err.msg);
    sdgp_model_sparse_choice(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-s") == 0, "pixel domain: %s", choice);
    char path[256];
    tmp_path(path, sizeof path, "wino.safetensors");
    sdgp_train_config tc = sdgp_train_config_default();
    sdgp_checkpoint_state st = {0};
    REQUIRE(sdgp_checkpoint_save(path, a, &tc, &st, &err) == SDGP_OK, "%s", err.msg);
    REQUIRE(sdgp_checkpoint_load(path, b, NULL, &err) == SDGP_OK, "%s", err.msg);
    sdgp_model_sparse_choice(b, choice, sizeof choice);
    CHECK(strcmp(choice, "-w") == 0, "restored choice: %s", choice);
    CHECK(!strcmp(sdgp_model_conv_info(b, 1)->bwd_kernel, "winograd"), "restored kernel: %s", sdgp_model_conv_info(b, 1)->bwd_kernel);
    CHECK(sdgp_model_set_sparse_choice(b, "-x", &err) == SDGP_ERR_FORMAT, "unknown code");
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

TEST_CASE(config_table_round_trips) {
    sdgp_train_config c = sdgp_train_config_default(), d = sdgp_train_config_default();
    sdgp_error err;
    CHECK(sdgp_train_config_set(&c, "lr", "0.123", &err) == SDGP_OK, "lr");
    CHECK(sdgp_train_config_set(&c, "nm", "4:32", &err) == SDGP_OK && c.model.prune.n == 4 && c.model.prune.m == 32, "nm");
    CHECK(sdgp_train_config_set(&c, "prune", "rescaled", &err) == SDGP_OK, "prune");
    CHECK(sdgp_train_config_set(&c, "lr", "fast", &err) == SDGP_ERR_INVALID && strstr(err.msg, "fast"), "%s", err.msg);
    CHECK(sdgp_train_config_set(&c, "epochs", "0", &err) == SDGP_ERR_INVALID && strstr(err.msg, "range"), "%s", err.msg);
    CHECK(sdgp_train_config_set(&c, "nm", "5:4", &err) == SDGP_ERR_INVALID, "5:4");
    CHECK(sdgp_train_config_set(&c, "bogus", "1", &err) == SDGP_ERR_INVALID && strstr(err.msg, "bogus"), "%s", err.msg);
    char v[1100];
    for (int i = 0; i < sdgp_train_config_field_count(); i++) {
        const char *name = sdgp_train_config_field(&c, i, NULL, v, sizeof v);
        CHECK(sdgp_train_config_set(&d, name, v, &err) == SDGP_OK, "%s=%s: %s", name, v, err.msg);
    }
    CHECK(memcmp(&c, &d, sizeof c) == 0, "fields must round-trip the whole config");
}

int main(void) {
    omp_set_num_threads(2);
    sdgp_error err;
    have_fmnist = sdgp_dataset_load(&fmnist, "fashion-mnist", FMNIST, 1, &err) == SDGP_OK;
    if (!have_fmnist) fprintf(stderr, "note: %s; the data-driven cases are skipped\n", err.msg);
    RUN(config_table_round_trips);
    RUN(bad_model_configs);
    RUN(checkpoint_keeps_kernel_choice);
    RUN(winograd_domain_choice);
    RUN(prune_none_and_m_of_m_are_bitwise_dense);
    RUN(every_pruning_function_trains);
    RUN(checkpoint_resume_is_exact);
    sdgp_dataset_free(&fmnist);
    return test_finish();
}
