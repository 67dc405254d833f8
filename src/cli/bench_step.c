/* sdgp bench step / sdgp bench layers: whole training steps, ours (dense and SDGP) against
 * PyTorch's on the same model, batch and threads, in one run.
 *
 * Each measurement runs in its own child process so that its peak RSS is its own: ours by
 * fork() (the parent never starts OpenMP, so the child may), PyTorch through
 * bench/torch_step.py under Debian's python3. */
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sdgp/train.h"

typedef struct {
    char name[64];
    sdgp_model_kind kind;
    float width;
    int h, w, c, batch;
} bench_model;

/* --model w1 / w0.25 (and all = both): the ResNet-9 settings of the README's tables. Any registry
 * name (sdgp_model_zoo) also works: width --width (1), its own input, batch 32. */
static const bench_model presets[] = {
    {"resnet9-w1-32x32x3", SDGP_MODEL_RESNET9, 1.0f, 32, 32, 3, 64},
    {"resnet9-w0.25-28x28x1", SDGP_MODEL_RESNET9, 0.25f, 28, 28, 1, 128},
};
#define MAX_MODELS 8
#define MAX_CONVS 128 /* per-layer results kept (ResNet-50 has 53 convs) */

typedef struct {
    int threads, steps, json, torch;
    int interleave; /* bench step: each variant row alternates its steps with a dense partner's in one process */
    int inference;  /* bench step: a "step" is one inference forward (BatchNorm's running statistics), what eval runs */
    const char *python, *torch_script;
    sdgp_prune_fn fns[SDGP_PRUNE_COUNT];
    int n_fns;
    int nm[8][2];
    int n_nm;
    bench_model models[MAX_MODELS]; /* --model, in order */
    int n_models;
    float width; /* --width for registry names (0: 1) */
    sdgp_conv_algo conv_algo;                         /* the one being measured */
    sdgp_conv_algo conv_algos[SDGP_CONV_MEASURED + 1]; /* --conv-algo list, each measured in the same run */
    int n_algos;
    int conv_ws_mb;
    sdgp_prune_domain domains[SDGP_DOMAIN_AUTO + 1]; /* each measured in the same run */
    int n_domains;
    sdgp_recompute recomputes[SDGP_RECOMPUTE_BLOCKS + 1]; /* --recompute list, each measured in the same run */
    int n_rec;
    long blocks[8]; /* --mask-block list, each measured in the same run */
    int n_blocks;
    int batch; /* 0: each model's own batch */
    /* --sparse-weights, --nm-weights, --weight-groups, --prune-wgrad, --nm-wgrad, --wgrad-block, --prune-wgrad-first,
     * --sparse-kernel: parsed by the training configuration's table (the same names, values and messages as
     * `sdgp train`); the variant rows take their weights, prune_wgrad and sparse: both commands run the
     * step training runs, so bench layers' products add up to bench step's step */
    sdgp_train_config train;
} options;

static const char *const train_flags[] = {"--sparse-weights", "--nm-weights", "--weight-groups", "--prune-wgrad",
                                          "--nm-wgrad", "--wgrad-block", "--sparse-kernel", "--rescale-scope", NULL};

static const char *const train_switches[] = {"--prune-wgrad-first", NULL}; /* training's booleans: no value */

static int in_list(const char *a, const char *const *list) {
    for (int i = 0; list[i]; i++)
        if (!strcmp(a, list[i])) return 1;
    return 0;
}

typedef struct {
    double ms, rss_mb;
    double convs_ms; /* median over the timed steps of each step's conv products (every layer's fwd, bwd-data,
                        prune, bwd-weights): part of that step, so never above ms */
    double layer[MAX_CONVS][5]; /* fwd, bwd-data, prune, bwd-weights, sparse? per conv */
    int n_layers;
    char choice[SDGP_CHOICE_LEN];       /* sdgp_model_choice: each layer's implementations and oneDNN algorithms */
    double create_s;                    /* building the model (with --conv-algo measured: its timing) */
    char kernel_name[MAX_CONVS][24]; /* per layer: sdgp_layer_info.bwd_kernel, "-" when neither pruned nor sparse-weight */
    char err[SDGP_ERROR_MSG_LEN + 64];
} result;

static sdgp_model_config model_config(const bench_model *bm, const options *o) {
    sdgp_model_config c = sdgp_model_config_default();
    c.kind = bm->kind;
    c.width = bm->width;
    c.height = bm->h;
    c.width_px = bm->w;
    c.channels = bm->c;
    c.batch = bm->batch;
    c.threads = o->threads;
    c.conv_algo = o->conv_algo;
    c.conv_workspace_mb = o->conv_ws_mb;
    c.domain = o->domains[0];
    c.recompute = o->recomputes[0];
    return c;
}

#define RUN_TIMING 1    /* the model times each layer */
#define RUN_INFERENCE 2 /* each step is an inference forward only (sdgp_model_forward with train 0) */

/* One model under measurement in the child: built, its random batch, and each timed step's times. */
typedef struct {
    sdgp_model *m;
    const sdgp_model_config *mc;
    int inference;
    float *x, *dl;
    int32_t *y;
    double *t;           /* per timed step, s */
    double *ct;          /* per timed step, its conv products' sum, ms */
    double (*lt)[5];     /* per timed step and conv: fwd, bwd-data, prune, bwd-weights, sparse? */
    int n_conv;
} step_run;

static int run_open(step_run *s, const sdgp_model_config *mc, int steps, int flags, result *r) {
    memset(s, 0, sizeof *s);
    s->mc = mc;
    s->inference = !!(flags & RUN_INFERENCE);
    sdgp_error err;
    double tc = cli_now();
    if (sdgp_model_create(&s->m, mc, &err) != SDGP_OK) {
        snprintf(r->err, sizeof r->err, "%s", err.msg);
        return 0;
    }
    r->create_s = cli_now() - tc;
    sdgp_model_choice(s->m, r->choice, sizeof r->choice);
    size_t B = (size_t)mc->batch, img = (size_t)mc->height * mc->width_px * mc->channels;
    s->x = cli_alloc_floats(B * img), s->dl = cli_alloc_floats(B * mc->num_classes);
    s->y = calloc(B, sizeof *s->y);
    s->t = calloc((size_t)steps, sizeof *s->t);
    s->lt = calloc((size_t)steps * MAX_CONVS, sizeof *s->lt);
    s->ct = calloc((size_t)steps, sizeof *s->ct);
    if (!s->x || !s->dl || !s->y || !s->t || !s->lt || !s->ct) {
        snprintf(r->err, sizeof r->err, "out of memory");
        return 0;
    }
    uint64_t v = 42;
    for (size_t i = 0; i < B * img; i++) {
        v = v * 6364136223846793005ull + 1442695040888963407ull;
        s->x[i] = (float)((int32_t)(v >> 32)) * (1.0f / 2147483648.0f);
    }
    for (size_t i = 0; i < B; i++) s->y[i] = (int32_t)(i % (size_t)mc->num_classes);
    sdgp_model_enable_timing(s->m, flags & RUN_TIMING);
    s->n_conv = sdgp_model_conv_count(s->m);
    return 1;
}

/* Step i (i < 0: warm-up, not recorded). */
static int run_step(step_run *s, int i, result *r) {
    sdgp_error err;
    double t0 = cli_now();
    const float *logits = sdgp_model_forward(s->m, s->x, !s->inference);
    if (!s->inference) {
        sdgp_softmax_xent(s->dl, NULL, logits, s->y, s->mc->batch, s->mc->num_classes, 0.1f);
        if (sdgp_model_backward(s->m, s->dl, (uint64_t)(i + 2), &err) != SDGP_OK) {
            snprintf(r->err, sizeof r->err, "%s", err.msg);
            return 0;
        }
        sdgp_model_sgd(s->m, 0.01f, 0.9f, 5e-4f, 0);
    }
    if (i < 0) return 1;
    s->t[i] = cli_now() - t0;
    s->ct[i] = 0;
    for (int l = 0; l < s->n_conv; l++) {
        const sdgp_layer_times *tm = sdgp_model_conv_times(s->m, l);
        s->ct[i] += tm->fwd_ms + (s->inference ? 0 : tm->bwd_data_ms + tm->prune_ms + tm->bwd_weights_ms);
        if (l >= MAX_CONVS) continue;
        double *row = s->lt[i * MAX_CONVS + l];
        row[0] = tm->fwd_ms, row[1] = tm->bwd_data_ms, row[2] = tm->prune_ms, row[3] = tm->bwd_weights_ms;
        row[4] = sdgp_model_conv_info(s->m, l)->sparse_kernel;
    }
    return 1;
}

/* The medians into r (when no step failed), then everything freed. */
static void run_close(step_run *s, int steps, result *r) {
    if (s->m && !r->err[0]) {
        for (int l = 0; l < s->n_conv && l < MAX_CONVS; l++) {
            const sdgp_layer_info *li = sdgp_model_conv_info(s->m, l);
            snprintf(r->kernel_name[l], sizeof r->kernel_name[l], "%s", li->pruned || li->sparse_data ? li->bwd_kernel : "-");
        }
        r->ms = 1e3 * cli_median(s->t, steps);
        r->convs_ms = cli_median(s->ct, steps);
        r->n_layers = s->n_conv < MAX_CONVS ? s->n_conv : MAX_CONVS;
        double *col = calloc((size_t)steps, sizeof *col);
        for (int l = 0; col && l < r->n_layers; l++)
            for (int k = 0; k < 5; k++) {
                for (int i = 0; i < steps; i++) col[i] = s->lt[i * MAX_CONVS + l][k];
                r->layer[l][k] = cli_median(col, steps);
            }
        free(col);
    }
    free(s->x), free(s->dl), free(s->y), free(s->t), free(s->lt), free(s->ct);
    sdgp_model_destroy(s->m);
}

/* In the child: build the n (1 or 2) models, run 2 warm-up + `steps` timed steps of each on a
 * random batch. Two models alternate step by step, which goes first alternating too, so the host's
 * drift (5-15 % within minutes here) falls on both alike; their peak RSS is then not either's. */
static void measure_ours(const sdgp_model_config *mc, int n, int steps, int flags, result *r) {
    omp_set_num_threads(mc[0].threads);
    step_run s[2];
    int ok = 1, opened = 0;
    for (; opened < n && ok; opened++) ok = run_open(&s[opened], &mc[opened], steps, flags, &r[opened]);
    for (int i = -2; i < steps && ok; i++)
        for (int k = 0; k < n && ok; k++) {
            const int q = n == 2 && (i & 1) ? 1 - k : k;
            ok = run_step(&s[q], i, &r[q]);
        }
    for (int k = 0; k < opened; k++) run_close(&s[k], steps, &r[k]);
    for (int k = 0; k < n && !ok; k++) /* the failure's message on both */
        if (r[k].err[0]) memcpy(r[1 - k].err, r[k].err, sizeof r[k].err);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    for (int k = 0; k < n; k++) r[k].rss_mb = n == 1 ? (double)ru.ru_maxrss / 1024.0 : 0;
}

/* measure_ours in a child process (each measurement's peak RSS is its own); r[0 .. n). */
static int run_child_ours(const sdgp_model_config *mc, int n, int steps, int flags, result *r) {
    memset(r, 0, (size_t)n * sizeof *r);
    int fd[2];
    if (pipe(fd)) return 0;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return 0;
    if (pid == 0) {
        close(fd[0]);
        result cr[2];
        memset(cr, 0, sizeof cr);
        measure_ours(mc, n, steps, flags, cr);
        ssize_t wr = write(fd[1], cr, (size_t)n * sizeof *cr);
        _exit(wr == (ssize_t)(n * sizeof *cr) ? 0 : 1);
    }
    close(fd[1]);
    ssize_t got = 0, want = (ssize_t)(n * sizeof *r);
    while (got < want) {
        ssize_t k = read(fd[0], (char *)r + got, (size_t)(want - got));
        if (k <= 0) break;
        got += k;
    }
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (got != want) snprintf(r->err, sizeof r->err, "measuring child died (status %d)", status);
    for (int k = 0; k < n; k++)
        if (r[k].err[0]) return 0;
    return 1;
}

/* PyTorch: one process per memory format, the faster one counts (its own RSS). */
static int run_torch(const options *o, const bench_model *bm, result *r) {
    memset(r, 0, sizeof *r);
    const char *formats[] = {"channels_last", "contiguous"};
    r->ms = INFINITY;
    for (int f = 0; f < 2; f++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd,
                 "OMP_NUM_THREADS=%d '%s' '%s' --model %s --width %g --hwc %d,%d,%d --batch %d --threads %d "
                 "--steps %d --formats %s",
                 o->threads, o->python, o->torch_script, sdgp_model_zoo((int)bm->kind)->name, (double)bm->width, bm->h, bm->w, bm->c, bm->batch, o->threads,
                 o->steps, formats[f]);
        FILE *p = popen(cmd, "r");
        char line[512] = {0};
        int ok = p && fgets(line, sizeof line, p) != NULL;
        int rc = p ? pclose(p) : -1;
        double ms, rss;
        char *a = strstr(line, "\"ms\": "), *b = strstr(line, "\"rss_mb\": ");
        if (!ok || rc != 0 || !a || !b || sscanf(a + 6, "%lf", &ms) != 1 || sscanf(b + 10, "%lf", &rss) != 1) {
            fprintf(stderr, "sdgp: the PyTorch peer failed: %s\n", cmd);
            snprintf(r->err, sizeof r->err, "PyTorch peer failed (set --python / --torch-script, or --no-torch)");
            return 0;
        }
        if (ms < r->ms) {
            r->ms = ms;
            r->rss_mb = rss;
        }
    }
    return 1;
}

static const char *default_torch_script(void) {
    static char path[4096];
    snprintf(path, sizeof path, "%s/bench/torch_step.py", SDGP_SOURCE_DIR);
    return path;
}

static void usage(FILE *f, const char *cmd) {
    char algos[64] = "", kinds[64] = "", groups[96] = ""; /* "direct | winograd | ...", from the one name tables */
    char scope[32];
    const char *scope_help;
    const sdgp_train_config defaults = sdgp_train_config_default();
    cli_train_config_value(&defaults, "rescale-scope", scope, sizeof scope, &scope_help);
    for (int i = 0; sdgp_conv_algo_names[i]; i++)
        snprintf(algos + strlen(algos), sizeof algos - strlen(algos), "%s%s", i ? " | " : "", sdgp_conv_algo_names[i]);
    for (int i = 0; sdgp_weights_kind_names[i]; i++)
        snprintf(kinds + strlen(kinds), sizeof kinds - strlen(kinds), "%s%s", i ? " | " : "", sdgp_weights_kind_names[i]);
    for (int i = 0; sdgp_weights_group_names[i]; i++)
        snprintf(groups + strlen(groups), sizeof groups - strlen(groups), "%s%s", i ? " | " : "", sdgp_weights_group_names[i]);
    fprintf(f,
            "usage: sdgp bench %s [options]\n\n"
            "%s\n\n"
            "  --model LIST           w1: ResNet-9 w=1 on 32x32x3 at batch 64; w0.25: w=0.25 on 28x28x1 at batch 128;\n"
            "                         all: both [all]; or a registry model (below): its own input, batch 32\n"
            "  --width W              channel multiplier of registry models given by name [1]\n"
            "  --threads N            threads for every measurement [2]\n"
            "  --batch N              batch size instead of the model's (e.g. 512, the training default)\n"
            "  --steps N              timed steps (median; after 2 warm-up steps) [10]\n"
            "  --prune LIST           SDGP functions to compare with dense, e.g. magnitude,rescaled [%s]\n"
            "  --nm LIST              N:M list [2:4,1:4,2:8,4:32]\n"
            "  --conv-algo LIST       our dense convolutions: %s, or a list (a dense row and the\n"
            "                         variant rows per algorithm, all in this run) [%s]\n"
            "  --conv-workspace MB    workspace limit per conv pass (0: none) [%d]\n"
            "  --recompute LIST       none | blocks (residual blocks' forward again in backward, less memory),\n"
            "                         or a list: each a dense row and its variant rows, all in this run [none]\n"
            "  --sdgp-domain LIST     where SDGP prunes 3x3 layers: pixel | winograd | auto, or a list [%s]\n"
            "  --mask-block LIST      rows sharing one N:M mask (1: a mask per row), or a list, e.g. 1,4,8 [%d]\n"
            "  --rescale-scope S      rescaled rows' scale: %s [%s]\n"
            "  --sparse-weights K     variant rows with N:M weights: %s [%s]\n"
            "  --nm-weights N:M       their pattern [2:4]; --weight-groups %s [%s]\n"
            "  --prune-wgrad FN       variant rows with the weight gradient's dL/dO pruned: none | mvue | ... [none]\n"
            "  --nm-wgrad N:M         its pattern [2:4]; --wgrad-block Q: output channels sharing its row mask [1];\n"
            "                         --prune-wgrad-first: the first conv's too (default: dense, as in training)\n"
            "  --sparse-kernel MODE   SDGP rows: auto | on | off | fastest, as in training [auto]; bench layers: on\n"
            "                         times every pruned layer's sparse kernel (the paper's Figure 9), auto the\n"
            "                         kernels the tuner keeps, whose products add up to bench step's step\n"
            "  --no-torch             skip the PyTorch peer\n"
            "  --python PATH          Python with torch [/usr/bin/python3]\n"
            "  --torch-script PATH    [%s]\n"
            "  --json                 one JSON object per line\n"
            "%s"
            "\nregistry models (the PyTorch peer builds the same model, torchvision's for resnet18):\n",
            cmd,
            strcmp(cmd, "step") == 0
                ? "One training step of our engine (dense, and with SDGP when --prune is given) against PyTorch's\n"
                  "dense step: times, the ratio of throughputs and peak RSS, all measured in this run."
                : "Per conv layer (the paper's Figure 9): forward (dense -> the variant's: with --sparse-weights, the\n"
                  "sparse-weight kernel where the layer chose it), dense backward-data, the variant's backward-data (the\n"
                  "kernel the layer keeps, named), pruning, and backward-weights (dense -> the variant's: with\n"
                  "--prune-wgrad, its N:M kernel when it is chosen) times, from timed training steps; then the sums,\n"
                  "each model's step and the part of it its conv products take.",
            strcmp(cmd, "step") == 0 ? "none" : "magnitude", algos, sdgp_conv_algo_name(sdgp_model_config_default().conv_algo),
            sdgp_model_config_default().conv_workspace_mb, sdgp_prune_domain_name(sdgp_model_config_default().domain),
            sdgp_model_config_default().prune.mask_block, scope_help, scope, kinds, sdgp_weights_kind_names[sdgp_model_config_default().weights.kind],
            groups, sdgp_weights_group_names[sdgp_model_config_default().weights.group], default_torch_script(),
            strcmp(cmd, "step") == 0
                ? "  --interleave           each variant row's steps alternate with those of a dense partner in one\n"
                  "                         process: the ratio survives the host's drift; no RSS for the row. With\n"
                  "                         several --conv-algo, also each one's dense step against the first's\n"
                  "  --inference            time inference forwards instead of training steps (BatchNorm's running\n"
                  "                         statistics, the weights as `sdgp eval` uses them); no PyTorch peer\n"
                : "  --interleave           each variant's steps alternate with the dense model's in one process, so\n"
                  "                         the per-layer times and the sums' ratios survive the host's drift\n");
    for (int k = 0; k < sdgp_model_zoo_count(); k++) {
        const sdgp_model_info *mi = sdgp_model_zoo(k);
        fprintf(f, "  %-10s %dx%dx%d  %s\n", mi->name, mi->height, mi->width_px, mi->channels, mi->description);
    }
}

/* Appends the models of one --model item (w1, w0.25, all, or a registry name). */
static int add_models(options *o, const char *item) {
    const int all = !strcmp(item, "all");
    for (int i = 0; i < 2; i++)
        if (all || !strcmp(item, i == 0 ? "w1" : "w0.25")) {
            if (o->n_models == MAX_MODELS) return 0;
            o->models[o->n_models++] = presets[i];
        }
    if (all || !strcmp(item, "w1") || !strcmp(item, "w0.25")) return 1;
    sdgp_model_kind kind;
    sdgp_error err;
    if (sdgp_model_kind_parse(item, &kind, &err) != SDGP_OK) {
        fprintf(stderr, "sdgp: --model: '%s' is not w1, w0.25, all or a registry model: %s\n", item, err.msg);
        return 0;
    }
    if (o->n_models == MAX_MODELS) return 0;
    const sdgp_model_info *mi = sdgp_model_zoo((int)kind);
    bench_model *bm = &o->models[o->n_models++];
    *bm = (bench_model){"", kind, 1.0f, mi->height, mi->width_px, mi->channels, 32};
    return 1;
}

/* The enum names of --sdgp-domain, --conv-algo, --recompute lists (cli_parse_name_list's parse). */
static sdgp_status parse_domain(const char *name, int *out, sdgp_error *err) {
    sdgp_prune_domain d = SDGP_DOMAIN_PIXEL;
    sdgp_status st = sdgp_prune_domain_parse(name, &d, err);
    *out = (int)d;
    return st;
}
static sdgp_status parse_conv_algo(const char *name, int *out, sdgp_error *err) {
    sdgp_conv_algo c = SDGP_CONV_AUTO;
    sdgp_status st = sdgp_conv_algo_parse(name, &c, err);
    *out = (int)c;
    return st;
}
static sdgp_status parse_recompute(const char *name, int *out, sdgp_error *err) {
    for (int i = 0; sdgp_recompute_names[i]; i++)
        if (!strcmp(name, sdgp_recompute_names[i])) {
            *out = i;
            return SDGP_OK;
        }
    char list[64] = "";
    for (int i = 0; sdgp_recompute_names[i]; i++) /* the message from the name table: one place */
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? (sdgp_recompute_names[i + 1] ? ", " : " or ") : "",
                 sdgp_recompute_names[i]);
    return sdgp_fail(err, SDGP_ERR_INVALID, "'%s' is not %s", name, list);
}

static int parse_options(options *o, int argc, char **argv, int layers) {
    memset(o, 0, sizeof *o);
    o->threads = 2;
    o->steps = 10;
    o->torch = !layers;
    o->python = "/usr/bin/python3";
    o->torch_script = default_torch_script();
    const char *model_list = "all";
    o->conv_algo = o->conv_algos[0] = sdgp_model_config_default().conv_algo;
    o->n_algos = 1;
    o->conv_ws_mb = sdgp_model_config_default().conv_workspace_mb;
    o->domains[0] = sdgp_model_config_default().domain;
    o->n_domains = 1;
    o->recomputes[0] = sdgp_model_config_default().recompute;
    o->n_rec = 1;
    o->blocks[0] = sdgp_model_config_default().prune.mask_block;
    o->n_blocks = 1;
    o->train = sdgp_train_config_default();
    if (layers) o->fns[o->n_fns++] = SDGP_PRUNE_MAGNITUDE;
    const char *nm_list = "2:4,1:4,2:8,4:32";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        sdgp_error err;
        if (!strcmp(a, "--json")) o->json = 1;
        else if (!strcmp(a, "--no-torch")) o->torch = 0;
        else if (!strcmp(a, "--interleave")) o->interleave = 1;
        else if (!strcmp(a, "--inference") && !layers) o->inference = 1, o->torch = 0;
        else if (in_list(a, train_switches)) {
            if (sdgp_train_config_set(&o->train, a + 2, "1", &err) != SDGP_OK) {
                fprintf(stderr, "sdgp: %s\n", err.msg);
                return 0;
            }
        } else if (!v) {
            fprintf(stderr, "sdgp: unknown option or missing value: %s (see --help)\n", a);
            return 0;
        } else if (!strcmp(a, "--threads")) {
            if (!cli_parse_int(a, v, 1, 256, &x)) return 0;
            o->threads = (int)x, i++;
        } else if (!strcmp(a, "--batch")) {
            if (!cli_parse_int(a, v, 1, 65536, &x)) return 0;
            o->batch = (int)x, i++;
        } else if (!strcmp(a, "--conv-workspace")) {
            if (!cli_parse_int(a, v, 0, 1 << 20, &x)) return 0;
            o->conv_ws_mb = (int)x, i++;
        } else if (!strcmp(a, "--steps")) {
            if (!cli_parse_int(a, v, 1, 10000, &x)) return 0;
            o->steps = (int)x, i++;
        } else if (!strcmp(a, "--python")) o->python = v, i++;
        else if (!strcmp(a, "--torch-script")) o->torch_script = v, i++;
        else if (!strcmp(a, "--nm")) nm_list = v, i++;
        else if (!strcmp(a, "--mask-block")) {
            o->n_blocks = cli_parse_int_list(a, v, 1, SDGP_MASK_BLOCK_MAX, o->blocks, 8);
            if (!o->n_blocks) return 0;
            i++;
        }
        else if (!strcmp(a, "--sdgp-domain")) {
            int vals[SDGP_DOMAIN_AUTO + 1];
            if (!(o->n_domains = cli_parse_name_list(a, v, parse_domain, SDGP_DOMAIN_AUTO + 1, vals))) return 0;
            for (int k = 0; k < o->n_domains; k++) o->domains[k] = (sdgp_prune_domain)vals[k];
            i++;
        } else if (!strcmp(a, "--recompute")) {
            int vals[SDGP_RECOMPUTE_BLOCKS + 1];
            if (!(o->n_rec = cli_parse_name_list(a, v, parse_recompute, SDGP_RECOMPUTE_BLOCKS + 1, vals))) return 0;
            for (int k = 0; k < o->n_rec; k++) o->recomputes[k] = (sdgp_recompute)vals[k];
            i++;
        } else if (!strcmp(a, "--conv-algo")) {
            int vals[SDGP_CONV_MEASURED + 1];
            if (!(o->n_algos = cli_parse_name_list(a, v, parse_conv_algo, SDGP_CONV_MEASURED + 1, vals))) return 0;
            for (int k = 0; k < o->n_algos; k++) o->conv_algos[k] = (sdgp_conv_algo)vals[k];
            o->conv_algo = o->conv_algos[0];
            i++;
        } else if (!strcmp(a, "--model")) {
            model_list = v, i++;
        } else if (!strcmp(a, "--width")) {
            char *end;
            double w = strtod(v, &end);
            if (*end || !(w > 0 && w <= 16)) {
                fprintf(stderr, "sdgp: --width: '%s' is not a number in (0, 16]\n", v);
                return 0;
            }
            o->width = (float)w, i++;
        } else if (in_list(a, train_flags)) {
            if (sdgp_train_config_set(&o->train, a + 2, v, &err) != SDGP_OK) {
                fprintf(stderr, "sdgp: %s\n", err.msg);
                return 0;
            }
            i++;
        } else if (!strcmp(a, "--prune")) {
            char buf[256];
            snprintf(buf, sizeof buf, "%s", v);
            o->n_fns = 0;
            for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                sdgp_prune_fn fn;
                if (sdgp_prune_fn_parse(t, &fn, &err) != SDGP_OK) {
                    fprintf(stderr, "sdgp: --prune: %s\n", err.msg);
                    return 0;
                }
                if (fn != SDGP_PRUNE_NONE && o->n_fns < SDGP_PRUNE_COUNT) o->fns[o->n_fns++] = fn;
            }
            i++;
        } else {
            fprintf(stderr, "sdgp: unknown option %s (see --help)\n", a);
            return 0;
        }
    }
    char buf[256];
    snprintf(buf, sizeof buf, "%s", model_list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
        if (!add_models(o, t)) {
            if (o->n_models == MAX_MODELS) fprintf(stderr, "sdgp: --model: at most %d models\n", MAX_MODELS);
            return 0;
        }
    for (int k = 0; k < o->n_models; k++) { /* registry names: --width, and a name for the rows */
        bench_model *bm = &o->models[k];
        if (bm->name[0]) continue;
        if (o->width > 0) bm->width = o->width;
        snprintf(bm->name, sizeof bm->name, "%s-w%g-%dx%dx%d", sdgp_model_zoo((int)bm->kind)->name, (double)bm->width, bm->h,
                 bm->w, bm->c);
    }
    snprintf(buf, sizeof buf, "%s", nm_list);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        sdgp_error err;
        if (o->n_nm == 8) {
            fprintf(stderr, "sdgp: --nm: at most 8 entries\n");
            return 0;
        }
        if (sdgp_nm_parse(t, &o->nm[o->n_nm][0], &o->nm[o->n_nm][1], &err) != SDGP_OK) {
            fprintf(stderr, "sdgp: --nm: %s\n", err.msg);
            return 0;
        }
        o->n_nm++;
    }
    return 1;
}

/* ", recompute blocks" in a text row when asked for, nothing for the default */
static const char *rec_note(sdgp_recompute r) { return r == SDGP_RECOMPUTE_BLOCKS ? ", recompute blocks" : ""; }

/* A rescaled row's scope, as a JSON member ("rescale_scope":"...",) and as text; both "" for the
 * other functions, which have none. */
static void scope_note(const options *o, sdgp_prune_fn fn, char *kv, size_t kv_size, char *txt, size_t txt_size) {
    kv[0] = txt[0] = '\0';
    if (fn != SDGP_PRUNE_RESCALED) return;
    char scope[32];
    cli_train_config_value(&o->train, "rescale-scope", scope, sizeof scope, NULL);
    snprintf(kv, kv_size, "\"rescale_scope\":\"%s\",", scope);
    snprintf(txt, txt_size, " %s scope", scope);
}

/* --interleave with several --conv-algo: this algorithm's dense step (mc) alternating with the first
 * algorithm's in one child, the ratio that survives the host's drift. A dense line for the report
 * (ours_ms is this algorithm's step), with the partner's algorithm and time. */
static int interleave_algos(const options *o, const bench_model *bm, const sdgp_model_config *mc, int flags) {
    options first = *o;
    first.conv_algo = o->conv_algos[0];
    sdgp_model_config pair[2] = {model_config(bm, &first), *mc};
    pair[0].recompute = mc->recompute;
    result rs[2];
    if (!run_child_ours(pair, 2, o->steps, flags, rs)) {
        fprintf(stderr, "sdgp: %s: %s against %s: %s\n", bm->name, sdgp_conv_algo_name(o->conv_algo),
                sdgp_conv_algo_name(first.conv_algo), rs[0].err);
        return 0;
    }
    if (o->json)
        printf("{\"model\":\"%s\",\"batch\":%d,\"threads\":%d,\"conv_algo\":\"%s\",\"conv_ws_mb\":%d,\"recompute\":\"%s\","
               "\"prune\":\"none\",%s\"interleaved\":true,\"ours_ms\":%.2f,\"vs_conv_algo\":\"%s\",\"vs_ms\":%.2f,"
               "\"vs_speedup\":%.3f}\n",
               bm->name, bm->batch, o->threads, sdgp_conv_algo_name(o->conv_algo), o->conv_ws_mb,
               sdgp_recompute_names[mc->recompute], o->inference ? "\"inference\":true," : "", rs[1].ms,
               sdgp_conv_algo_name(first.conv_algo), rs[0].ms, rs[0].ms / rs[1].ms);
    else
        printf("%-24s   dense (%s) against dense (%s), interleaved: %8.1f vs %8.1f ms  x%.3f\n", bm->name,
               sdgp_conv_algo_name(o->conv_algo), sdgp_conv_algo_name(first.conv_algo), rs[1].ms, rs[0].ms, rs[0].ms / rs[1].ms);
    return 1;
}

int sdgp_cmd_bench_step(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) {
            usage(stdout, "step");
            return 0;
        }
    options o;
    if (!parse_options(&o, argc, argv, 0)) return 2;
    /* the instruction sets the children run (they inherit SDGP_ISA and DNNL_MAX_CPU_ISA) */
    sdgp_isa isa;
    sdgp_error e;
    if (sdgp_isa_resolve(SDGP_ISA_AUTO, &isa, &e) != SDGP_OK) {
        fprintf(stderr, "sdgp: bench step: %s\n", e.msg);
        return 2;
    }
    if (!o.json) printf("kernel ISA: sdgp %s, oneDNN %s\n", sdgp_isa_name(isa), sdgp_conv_onednn_isa());
    const int per_model = o.n_algos * o.n_rec;
    result torch;
    for (int mi = 0; mi < o.n_models * per_model; mi++) { /* each model, each --conv-algo, each --recompute */
        o.conv_algo = o.conv_algos[mi / o.n_rec % o.n_algos];
        bench_model bmv = o.models[mi / per_model];
        if (o.batch) bmv.batch = o.batch; /* e.g. the training batch, for seconds per epoch */
        const bench_model *bm = &bmv;
        sdgp_model_config mc = model_config(bm, &o);
        mc.recompute = o.recomputes[mi % o.n_rec];
        result ours;
        const int flags = o.inference ? RUN_INFERENCE : 0;
        if (!run_child_ours(&mc, 1, o.steps, flags, &ours)) {
            fprintf(stderr, "sdgp: %s: %s\n", bm->name, ours.err);
            return 1;
        }
        if (mi % per_model == 0) { /* PyTorch once per model: our settings are not its */
            memset(&torch, 0, sizeof torch);
            if (o.torch && !run_torch(&o, bm, &torch)) {
                fprintf(stderr, "sdgp: %s\n", torch.err);
                return 1;
            }
        }
        if (o.json)
            printf("{\"model\":\"%s\",\"batch\":%d,\"threads\":%d,\"conv_algo\":\"%s\",\"conv_ws_mb\":%d,\"recompute\":\"%s\",\"prune\":\"none\","
                   "%s\"ours_ms\":%.2f,\"torch_ms\":%.2f,\"speedup\":%.3f,\"ours_rss_mb\":%.1f,\"torch_rss_mb\":%.1f,"
                   "\"isa\":\"%s\",\"onednn_isa\":\"%s\"}\n",
                   bm->name, bm->batch, o.threads, sdgp_conv_algo_name(o.conv_algo), o.conv_ws_mb, sdgp_recompute_names[mc.recompute],
                   o.inference ? "\"inference\":true," : "", ours.ms, torch.ms, o.torch ? torch.ms / ours.ms : 0, ours.rss_mb, torch.rss_mb,
                   sdgp_isa_name(isa), sdgp_conv_onednn_isa());
        else if (o.torch)
            printf("%-24s batch %3d  %d threads  dense (%s, %d MB%s): ours %8.1f ms  torch %8.1f ms  throughput x%.2f  "
                   "peak RSS ours %6.0f MB  torch %6.0f MB (x%.2f)\n",
                   bm->name, bm->batch, o.threads, sdgp_conv_algo_name(o.conv_algo), o.conv_ws_mb, rec_note(mc.recompute), ours.ms, torch.ms,
                   torch.ms / ours.ms, ours.rss_mb, torch.rss_mb, ours.rss_mb / torch.rss_mb);
        else /* no peer: no ratios */
            printf("%-24s batch %3d  %d threads  dense (%s, %d MB%s)%s: ours %8.1f ms  peak RSS ours %6.0f MB\n",
                   bm->name, bm->batch, o.threads, sdgp_conv_algo_name(o.conv_algo), o.conv_ws_mb, rec_note(mc.recompute),
                   o.inference ? " inference forward" : "", ours.ms, ours.rss_mb);
        if (!o.json && o.conv_algo == SDGP_CONV_MEASURED) /* what was measured, and what it cost */
            printf("%-24s   choice %s, model built in %.1f s\n", bm->name, ours.choice, ours.create_s);
        if (o.interleave && mi / o.n_rec % o.n_algos > 0 && !interleave_algos(&o, bm, &mc, flags)) return 1;
        fflush(stdout);
        /* Variant rows: each SDGP function x n:m x domain x block, all with the --sparse-weights and
         * --prune-wgrad settings; without --prune but with those, one row of them alone. */
        const sdgp_weights_cfg *wc = &o.train.model.weights;
        const sdgp_prune_cfg *wg = &o.train.model.prune_wgrad;
        int other = wc->kind != SDGP_WEIGHTS_DENSE || wg->fn != SDGP_PRUNE_NONE;
        char extras[160];
        snprintf(extras, sizeof extras,
                 "\"sparse_weights\":\"%s %d:%d %s\",\"prune_wgrad\":\"%s %d:%d\",\"wgrad_block\":%d,\"wgrad_first\":%d",
                 sdgp_weights_kind_names[wc->kind], wc->n, wc->m, sdgp_weights_group_names[wc->group],
                 sdgp_prune_fn_name(wg->fn), wg->n, wg->m, wg->mask_block > 1 ? wg->mask_block : 1,
                 o.train.model.prune_wgrad_first_layer);
        if (o.n_fns == 0 && other) o.fns[o.n_fns++] = SDGP_PRUNE_NONE;
        for (int f = 0; f < o.n_fns; f++)
            for (int q = 0; q < (o.fns[f] == SDGP_PRUNE_NONE ? 1 : o.n_nm * o.n_domains * o.n_blocks); q++) {
                /* each n:m, then each domain, block */
                const int k = q / (o.n_domains * o.n_blocks), di = q / o.n_blocks % o.n_domains, bi = q % o.n_blocks;
                sdgp_model_config pc = mc;
                pc.prune = sdgp_prune_cfg_make(o.fns[f], o.nm[k][0], o.nm[k][1]);
                pc.prune.mask_block = (int)o.blocks[bi];
                pc.prune.scope = o.train.model.prune.scope;
                pc.domain = o.domains[di];
                pc.weights = *wc;
                pc.sparse = o.train.model.sparse;
                pc.prune_wgrad = *wg;
                pc.prune_wgrad_first_layer = o.train.model.prune_wgrad_first_layer;
                /* --interleave: the variant and a dense partner alternate in one child (RSS not measured) */
                sdgp_model_config pair[2] = {mc, pc};
                result rs[2];
                if (!run_child_ours(o.interleave ? pair : &pc, o.interleave ? 2 : 1, o.steps, flags, rs)) {
                    fprintf(stderr, "sdgp: %s %s %d:%d: %s\n", bm->name, sdgp_prune_fn_name(o.fns[f]), o.nm[k][0], o.nm[k][1],
                            rs[0].err);
                    return 1;
                }
                const result *sd = &rs[o.interleave ? 1 : 0];
                const double dense_ms = o.interleave ? rs[0].ms : ours.ms;
                char rss[48] = "";
                if (!o.interleave) snprintf(rss, sizeof rss, "\"ours_rss_mb\":%.1f,", sd->rss_mb);
                char scope_kv[64], scope_txt[48];
                scope_note(&o, o.fns[f], scope_kv, sizeof scope_kv, scope_txt, sizeof scope_txt);
                if (o.json)
                    printf("{\"model\":\"%s\",\"batch\":%d,\"threads\":%d,\"conv_algo\":\"%s\",\"conv_ws_mb\":%d,\"prune\":\"%s\",\"nm\":\"%d:%d\","
                           "\"sdgp_domain\":\"%s\",\"mask_block\":%d,%s\"recompute\":\"%s\",\"sparse_kernel\":\"%s\",\"choice\":\"%s\",\"interleaved\":%s,"
                           "%s\"dense_ms\":%.2f,\"sdgp_ms\":%.2f,\"speedup\":%.3f,\"torch_ms\":%.2f,\"vs_torch\":%.3f,%s%s}\n",
                           bm->name, bm->batch, o.threads, sdgp_conv_algo_name(o.conv_algo), o.conv_ws_mb, sdgp_prune_fn_name(o.fns[f]),
                           o.nm[k][0], o.nm[k][1], sdgp_prune_domain_name(pc.domain), pc.prune.mask_block, scope_kv, sdgp_recompute_names[pc.recompute],
                           sdgp_sparse_mode_names[pc.sparse], sd->choice, o.interleave ? "true" : "false",
                           o.inference ? "\"inference\":true," : "", dense_ms, sd->ms,
                           dense_ms / sd->ms, torch.ms, o.torch ? torch.ms / sd->ms : 0, rss, extras);
                else
                    printf("%-24s   SDGP %-9s %2d:%-2d %-8s P=%-2d%s%s%s %8.1f ms  vs our dense%s%s x%.3f  choice %s%s", bm->name,
                           sdgp_prune_fn_name(o.fns[f]), o.nm[k][0], o.nm[k][1], sdgp_prune_domain_name(pc.domain), pc.prune.mask_block,
                           scope_txt, other ? "  with " : "", other ? extras : "", sd->ms, o.inference ? " inference" : "",
                           o.interleave ? " (interleaved)" : "", dense_ms / sd->ms,
                           sd->choice, o.torch ? "" : "\n");
                if (!o.json && o.torch) printf("  vs torch x%.2f\n", torch.ms / sd->ms);
                fflush(stdout);
            }
    }
    return 0;
}

/* Each product summed over the layers it can prune, conv1 .. the last (conv0, on the image, has no
 * data gradient and stays dense in training), dense -> the variant, with the ratio: the figure the
 * per-product goals are stated in. The data gradient's sum includes the pruning. Then the step of each
 * model in the same run and, of it, all its conv products (conv0 too): the rest is BatchNorm, pooling,
 * the loss and SGD, and the products never add up to more than the step they are part of. */
static void print_layer_sums(const options *o, const bench_model *bm, const result *dense, const result *sp,
                             const sdgp_model_config *variant, const int nm[2]) {
    const sdgp_prune_fn fn = variant->prune.fn;
    if (dense->n_layers < 2) return;
    double fd = 0, fv = 0, bd = 0, bv = 0, wd = 0, wv = 0; /* forward, data gradient, weight gradient: dense, variant */
    for (int l = 1; l < dense->n_layers; l++) {
        const double *d = dense->layer[l], *v = sp->layer[l];
        fd += d[0], fv += v[0], bd += d[1], bv += v[1] + v[2], wd += d[3], wv += v[3];
    }
    if (o->json)
        printf("{\"model\":\"%s\",\"sums\":\"conv1-conv%d\",\"threads\":%d,\"prune\":\"%s\",\"nm\":\"%d:%d\",\"interleaved\":%s,"
               "\"fwd_ms\":%.3f,\"fwd_variant_ms\":%.3f,\"fwd_ratio\":%.3f,\"bwd_data_dense_ms\":%.3f,\"bwd_data_sparse_prune_ms\":%.3f,"
               "\"bwd_data_ratio\":%.3f,\"bwd_weights_ms\":%.3f,\"bwd_weights_variant_ms\":%.3f,\"bwd_weights_ratio\":%.3f,"
               "\"step_ms\":%.3f,\"step_variant_ms\":%.3f,\"step_ratio\":%.3f,\"convs_ms\":%.3f,\"convs_variant_ms\":%.3f,"
               "\"sparse_kernel\":\"%s\",\"choice\":\"%s\"}\n",
               bm->name, dense->n_layers - 1, o->threads, sdgp_prune_fn_name(fn), nm[0], nm[1], o->interleave ? "true" : "false",
               fd, fv, fd / fv, bd, bv, bd / bv, wd, wv, wd / wv, dense->ms, sp->ms, dense->ms / sp->ms, dense->convs_ms,
               sp->convs_ms, sdgp_sparse_mode_names[variant->sparse], sp->choice);
    else
        printf("%-24s sums conv1-conv%d%s: fwd %.1f -> %.1f ms (x%.3f)  bwd-data %.1f -> %.1f ms with pruning (x%.3f)  "
               "bwd-weights %.1f -> %.1f ms (x%.3f)\n"
               "%-24s step %.1f -> %.1f ms (x%.3f), of which conv products %.1f -> %.1f ms; --sparse-kernel %s, choice %s\n",
               bm->name, dense->n_layers - 1, o->interleave ? " (interleaved)" : "", fd, fv, fd / fv, bd, bv, bd / bv, wd, wv, wd / wv,
               bm->name, dense->ms, sp->ms, dense->ms / sp->ms, dense->convs_ms, sp->convs_ms,
               sdgp_sparse_mode_names[variant->sparse], sp->choice);
}

int sdgp_cmd_bench_layers(int argc, char **argv) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--help")) {
            usage(stdout, "layers");
            return 0;
        }
    options o;
    if (!parse_options(&o, argc, argv, 1)) return 2;
    if (o.n_rec > 1) {
        fprintf(stderr, "sdgp: --recompute: bench layers takes one value (its rows are per layer, not per step)\n");
        return 2;
    }
    for (int mi = 0; mi < o.n_models * o.n_algos; mi++) { /* each model, each --conv-algo */
        o.conv_algo = o.conv_algos[mi % o.n_algos];
        bench_model bmv = o.models[mi / o.n_algos];
        if (o.batch) bmv.batch = o.batch; /* e.g. the training batch, for seconds per epoch */
        const bench_model *bm = &bmv;
        sdgp_model_config mc = model_config(bm, &o);
        result dense;
        if (!o.interleave && !run_child_ours(&mc, 1, o.steps, RUN_TIMING, &dense)) {
            fprintf(stderr, "sdgp: %s: %s\n", bm->name, dense.err);
            return 1;
        }
        /* as bench step: the variant rows take --sparse-weights and --prune-wgrad; with --prune none
         * and those, one row of them alone */
        const sdgp_weights_cfg *wc = &o.train.model.weights;
        const sdgp_prune_cfg *wg = &o.train.model.prune_wgrad;
        if (o.n_fns == 0 && (wc->kind != SDGP_WEIGHTS_DENSE || wg->fn != SDGP_PRUNE_NONE)) o.fns[o.n_fns++] = SDGP_PRUNE_NONE;
        for (int f = 0; f < o.n_fns; f++)
            for (int q = 0; q < (o.fns[f] == SDGP_PRUNE_NONE ? 1 : o.n_nm * o.n_domains * o.n_blocks); q++) {
                /* each n:m, then each domain, block */
                const int k = q / (o.n_domains * o.n_blocks), di = q / o.n_blocks % o.n_domains, bi = q % o.n_blocks;
                sdgp_model_config pc = mc;
                pc.prune = sdgp_prune_cfg_make(o.fns[f], o.nm[k][0], o.nm[k][1]);
                pc.prune.mask_block = (int)o.blocks[bi];
                pc.prune.scope = o.train.model.prune.scope;
                pc.sparse = o.train.model.sparse; /* as training (and bench step) runs: auto unless told */
                pc.domain = o.domains[di];
                pc.weights = *wc;
                pc.prune_wgrad = *wg;
                pc.prune_wgrad_first_layer = o.train.model.prune_wgrad_first_layer;
                /* --interleave: this variant and a dense partner alternate in one child */
                sdgp_model_config pair[2] = {mc, pc};
                result rs[2], sp;
                if (!run_child_ours(o.interleave ? pair : &pc, o.interleave ? 2 : 1, o.steps, RUN_TIMING, rs)) {
                    fprintf(stderr, "sdgp: %s: %s\n", bm->name, rs[0].err);
                    return 1;
                }
                if (o.interleave) dense = rs[0];
                sp = rs[o.interleave ? 1 : 0];
                char scope_kv[64], scope_txt[48];
                scope_note(&o, o.fns[f], scope_kv, sizeof scope_kv, scope_txt, sizeof scope_txt);
                for (int l = 0; l < dense.n_layers; l++) {
                    const double *d = dense.layer[l], *s = sp.layer[l];
                    if (o.json)
                        printf("{\"model\":\"%s\",\"layer\":\"conv%d\",\"threads\":%d,\"conv_algo\":\"%s\",\"prune\":\"%s\",\"nm\":\"%d:%d\","
                               "\"sdgp_domain\":\"%s\",\"mask_block\":%d,%s\"kernel\":\"%s\",\"fwd_ms\":%.3f,\"fwd_variant_ms\":%.3f,\"bwd_data_dense_ms\":%.3f,"
                               "\"bwd_data_sparse_ms\":%.3f,\"prune_ms\":%.3f,\"bwd_weights_ms\":%.3f,\"bwd_weights_variant_ms\":%.3f}\n",
                               bm->name, l, o.threads, sdgp_conv_algo_name(o.conv_algo), sdgp_prune_fn_name(o.fns[f]), o.nm[k][0], o.nm[k][1],
                               sdgp_prune_domain_name(pc.domain), pc.prune.mask_block, scope_kv, sp.kernel_name[l], d[0], s[0], d[1], l == 0 ? 0.0 : s[1], l == 0 ? 0.0 : s[2], d[3], s[3]);
                    else
                        printf("%-24s conv%d  %s  %s %d:%d%s  fwd %7.2f -> %7.2f  bwd-data dense %7.2f  %-8s %7.2f (+prune %5.2f)  "
                               "bwd-weights %7.2f -> %7.2f ms\n",
                               bm->name, l, sdgp_conv_algo_name(o.conv_algo), sdgp_prune_fn_name(o.fns[f]), o.nm[k][0], o.nm[k][1], scope_txt, d[0], s[0], d[1], sp.kernel_name[l],
                               l == 0 ? 0.0 : s[1], l == 0 ? 0.0 : s[2], d[3], s[3]);
                }
                print_layer_sums(&o, bm, &dense, &sp, &pc, o.nm[k]);
            }
    }
    return 0;
}
