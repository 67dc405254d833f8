/* Data-parallel training over a communicator (include/sdgp/dist.h): gradient buckets that overlap
 * their allreduce with backward, and the agreements between processes (start-up, checkpoints, evaluation). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_internal.h"

/* ---- gradient buckets ---- */

/* A bucket closes once it holds this many floats (1 MB, the first bucket size of PyTorch DDP):
 * small enough that the last layers' sums start early in backward, large enough that per-message
 * latency stays small against the transfer (ResNet-9 w=0.25: 2 buckets, w=1: 7). */
enum { BUCKET_FLOATS = 1 << 18 };

typedef struct {
    int need, ready;        /* parameters in it, and reported so far this step */
    float *buf;             /* from its first parameter's gradient to the end of its last one's */
    size_t count;
    sdgp_dist_request *req; /* in flight */
    double t_start;
} bucket;

struct grad_sync {
    const sdgp_dist *d;
    sdgp_model *m;
    bucket *b;
    int nb;
    int *of_param;          /* parameter -> bucket (-1: not trainable) */
    int started, finished;  /* buckets [0, started) started this step, [0, finished) complete */
    int at_end;             /* --allreduce end: blocking sums after backward, nothing in the hook */
    sdgp_status st;         /* the first failure inside a hook, returned by grad_sync_end */
    sdgp_error err;
    grad_sync_stats stats;
};

/* Lets the buckets in flight progress; records the ones that completed. */
static void progress(grad_sync *g) {
    for (int k = g->finished; k < g->started && g->st == SDGP_OK; k++) {
        if (!g->b[k].req) continue;
        int done = 0;
        g->st = g->d->test(g->d->ctx, g->b[k].req, &done, &g->err);
        if (!done) break; /* in order: later ones are rarely ahead, and the next hook call looks again */
        g->b[k].req = NULL;
        g->stats.inflight_s += sdgp_now_s() - g->b[k].t_start;
        g->finished = k + 1;
    }
}

static void start_ready(grad_sync *g, int all) {
    while (g->started < g->nb && g->st == SDGP_OK && (all || g->b[g->started].ready == g->b[g->started].need)) {
        bucket *b = &g->b[g->started++];
        b->t_start = sdgp_now_s();
        g->st = g->d->iallreduce(g->d->ctx, b->buf, b->count, SDGP_DIST_FLOAT, &b->req, &g->err);
    }
}

static void on_grad(void *ctx, int param) {
    grad_sync *g = ctx;
    int k = param >= 0 && param < sdgp_model_param_count(g->m) ? g->of_param[param] : -1;
    if (k < 0 || g->at_end) return;
    double t0 = sdgp_now_s();
    g->b[k].ready++;
    start_ready(g, 0);
    progress(g);
    g->stats.exposed_s += sdgp_now_s() - t0;
}

void grad_sync_begin(grad_sync *g) {
    for (int k = 0; k < g->nb; k++) g->b[k].ready = 0;
    g->started = g->finished = 0;
}

sdgp_status grad_sync_end(grad_sync *g, sdgp_error *err) {
    double t0 = sdgp_now_s();
    for (int k = 0; g->at_end && k < g->nb && g->st == SDGP_OK; k++) /* the buckets in the same order */
        g->st = g->d->allreduce(g->d->ctx, g->b[k].buf, g->b[k].count, SDGP_DIST_FLOAT, &g->err);
    if (g->at_end) g->started = g->nb;
    start_ready(g, 1); /* parameters the hook never reported (none in our models) */
    for (int k = g->finished; k < g->started && g->st == SDGP_OK; k++) {
        if (!g->b[k].req) continue;
        g->st = g->d->wait(g->d->ctx, g->b[k].req, &g->err);
        g->b[k].req = NULL;
        g->stats.inflight_s += sdgp_now_s() - g->b[k].t_start;
    }
    g->finished = g->started;
    double t = sdgp_now_s() - t0;
    g->stats.exposed_s += t;
    g->stats.wait_s += t;
    g->stats.steps++;
    if (g->st != SDGP_OK) {
        sdgp_status st = g->st;
        g->st = SDGP_OK;
        return sdgp_fail(err, st, "gradient allreduce: %s", g->err.msg);
    }
    return SDGP_OK;
}

grad_sync_stats grad_sync_take_stats(grad_sync *g) {
    grad_sync_stats s = g->stats;
    g->stats.steps = 0;
    g->stats.exposed_s = g->stats.wait_s = g->stats.inflight_s = 0;
    return s;
}

void grad_sync_destroy(grad_sync *g) {
    if (!g) return;
    sdgp_model_set_grad_hook(g->m, NULL, NULL);
    free(g->b);
    free(g->of_param);
    free(g);
}

static double blocking_allreduce_ms(grad_sync *g, sdgp_error *err) {
    double t[3];
    for (int r = 0; r < 3; r++) {
        double sync = 0; /* a tiny allreduce first, so the time leaves out the ranks' arrival skew */
        if (g->d->allreduce(g->d->ctx, &sync, 1, SDGP_DIST_DOUBLE, err) != SDGP_OK) return -1;
        double t0 = sdgp_now_s();
        for (int k = 0; k < g->nb; k++) {
            sdgp_status st = g->d->allreduce(g->d->ctx, g->b[k].buf, g->b[k].count, SDGP_DIST_FLOAT, err);
            if (st != SDGP_OK) return -1;
        }
        t[r] = 1e3 * (sdgp_now_s() - t0);
    }
    double lo = t[0] < t[1] ? t[0] : t[1], hi = t[0] < t[1] ? t[1] : t[0];
    return t[2] < lo ? lo : t[2] > hi ? hi : t[2];
}

sdgp_status grad_sync_create(grad_sync **out, sdgp_model *m, const sdgp_dist *d, int at_end, sdgp_error *err) {
    int np = sdgp_model_param_count(m);
    grad_sync *g = calloc(1, sizeof *g);
    if (g) g->of_param = malloc((size_t)(np + 1) * sizeof(int));
    if (g) g->b = calloc((size_t)np + 1, sizeof(bucket));
    if (!g || !g->of_param || !g->b) {
        if (g) free(g->of_param), free(g->b);
        free(g);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "gradient allreduce: out of memory");
    }
    g->d = d;
    g->m = m;
    g->at_end = at_end;
    /* from the last parameter back: the order in which backward finishes them */
    const float *end = NULL;
    for (int i = np - 1; i >= 0; i--) {
        const sdgp_param *p = sdgp_model_param(m, i);
        g->of_param[i] = -1;
        if (!p->trainable) continue;
        bucket *b = &g->b[g->nb];
        if (b->need > 0 && b->count >= BUCKET_FLOATS) b = &g->b[++g->nb];
        if (b->need == 0) end = p->grad + p->count;
        else if (p->grad + p->count > b->buf) { /* the arena keeps the gradients in parameter order */
            grad_sync_destroy(g);
            return sdgp_fail(err, SDGP_ERR_INTERNAL, "gradient allreduce: gradients out of parameter order");
        }
        b->buf = p->grad;
        b->count = (size_t)(end - p->grad);
        b->need++;
        g->of_param[i] = (int)(b - g->b);
        g->stats.floats += p->count;
    }
    if (g->b[g->nb].need > 0) g->nb++;
    g->stats.buckets = g->nb;
    g->stats.blocking_ms = blocking_allreduce_ms(g, err); /* the gradients are all zero here: sums change nothing */
    if (g->stats.blocking_ms < 0) {
        grad_sync_destroy(g);
        return err ? err->code : SDGP_ERR_INTERNAL;
    }
    sdgp_model_set_grad_hook(m, on_grad, g);
    *out = g;
    return SDGP_OK;
}

/* ---- agreements between processes ---- */

/* 64-bit FNV-1a over 8-byte words (then the tail bytes): a fingerprint, not a defence. */
static uint64_t hash_bytes(uint64_t h, const void *p, size_t n) {
    const unsigned char *c = p;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, c + i, 8);
        h = (h ^ w) * 0x100000001b3ull;
    }
    for (; i < n; i++) h = (h ^ c[i]) * 0x100000001b3ull;
    return h;
}

/* Weights and momentum buffers; with running, the BatchNorm running statistics too (they differ
 * between processes under per-process BatchNorm). */
static uint64_t hash_model(const sdgp_model *m, int running) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (int i = 0; i < sdgp_model_param_count(m); i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (p->trainable || running) h = hash_bytes(h, p->data, p->count * sizeof(float));
        if (p->trainable) h = hash_bytes(h, p->momentum, p->count * sizeof(float));
    }
    return h;
}

/* The images and labels. */
static uint64_t hash_dataset(const sdgp_dataset *ds) {
    uint64_t h = hash_bytes(0xcbf29ce484222325ull, ds->images, (size_t)ds->count * ds->h * ds->w * ds->c);
    return hash_bytes(h, ds->labels, (size_t)ds->count);
}

/* Whether every process agrees with process 0 (mine: this process does); all get the count. */
static sdgp_status count_differing(const sdgp_dist *d, int mine, double *differ, sdgp_error *err) {
    *differ = mine ? 0.0 : 1.0;
    return d->allreduce(d->ctx, differ, 1, SDGP_DIST_DOUBLE, err);
}

/* "name=value" lines of the settings every process must share, then the data, start and weights. */
static char *config_text(const sdgp_train_config *cfg, const sdgp_dataset *train, const sdgp_model *m,
                         int64_t start_step, size_t *len) {
    size_t cap = 4096, n = 0;
    char *t = malloc(cap), val[1100];
    for (int i = 0; t && i <= sdgp_train_config_field_count(); i++) {
        char line[1200];
        if (i < sdgp_train_config_field_count()) {
            const char *name = sdgp_train_config_field(cfg, i, NULL, val, sizeof val);
            if (!strcmp(name, "threads") || !strcmp(name, "data-dir") || !strcmp(name, "recompute"))
                continue; /* may differ by machine (recompute: bitwise the same results) */
            snprintf(line, sizeof line, "%s=%s\n", name, val);
        } else {
            snprintf(line, sizeof line, "training data=%lld images, fingerprint %016llx\nstart step=%lld\n"
                     "weights=fingerprint %016llx\n", (long long)train->count, (unsigned long long)hash_dataset(train),
                     (long long)start_step, (unsigned long long)hash_model(m, 1));
        }
        size_t l = strlen(line);
        if (n + l + 1 > cap) {
            char *q = realloc(t, cap = 2 * (n + l + 1));
            if (!q) free(t);
            t = q;
            if (!t) break;
        }
        memcpy(t + n, line, l + 1);
        n += l;
    }
    *len = n + 1;
    return t;
}

/* Every process's "name=value" lines (len bytes with the final NUL) against process 0's: a
 * difference is an error on every process (what: what differs, for the message); the processes
 * that differ name their first differing line. */
static sdgp_status agree_with_root(const sdgp_dist *d, const char *mine, size_t len, const char *what,
                                   sdgp_error *err) {
    double root_len = (double)len; /* process 0's length, then its text */
    sdgp_status st = d->bcast(d->ctx, &root_len, sizeof root_len, 0, err);
    char *root = st == SDGP_OK ? calloc((size_t)root_len + 1, 1) : NULL;
    if (st == SDGP_OK && !root) st = sdgp_fail(err, SDGP_ERR_NOMEM, "%s check: out of memory", what);
    if (st == SDGP_OK && d->rank == 0) memcpy(root, mine, len);
    if (st == SDGP_OK) st = d->bcast(d->ctx, root, (size_t)root_len, 0, err);
    /* the first line that differs */
    const char *a = mine, *b = root;
    while (st == SDGP_OK && *a && *b) {
        size_t la = strcspn(a, "\n"), lb = strcspn(b, "\n");
        if (la != lb || memcmp(a, b, la)) break;
        a += la + (a[la] == '\n');
        b += lb + (b[lb] == '\n');
    }
    int same = st == SDGP_OK && !*a && !*b;
    double differ = 0;
    if (st == SDGP_OK) st = count_differing(d, same, &differ, err);
    if (st == SDGP_OK && differ > 0) {
        if (same)
            st = sdgp_fail(err, SDGP_ERR_INVALID, "the MPI ranks were started with different %s: %.0f of %d "
                           "ranks differ from rank 0 (each names the first difference)", what, differ, d->size);
        else
            st = sdgp_fail(err, SDGP_ERR_INVALID, "the MPI ranks were started with different %s: rank %d "
                           "has '%.*s' where rank 0 has '%.*s'", what, d->rank, (int)strcspn(a, "\n"), a,
                           (int)strcspn(b, "\n"), b);
    }
    free(root);
    return st;
}

sdgp_status dist_check_config(const sdgp_dist *d, const sdgp_train_config *cfg, const sdgp_dataset *train,
                              const sdgp_model *m, int64_t start_step, sdgp_error *err) {
    size_t len = 0;
    char *mine = config_text(cfg, train, m, start_step, &len);
    if (!mine) return sdgp_fail(err, SDGP_ERR_NOMEM, "configuration check: out of memory");
    sdgp_status st = agree_with_root(d, mine, len, "configurations", err);
    free(mine);
    return st;
}

sdgp_status dist_check_eval(const sdgp_dist *d, const sdgp_model *m, const sdgp_dataset *ds, const sdgp_augment *aug,
                            int tta, float smoothing, sdgp_error *err) {
    char text[1024];
    int n = snprintf(text, sizeof text, "weights=fingerprint %016llx\ntest data=%lld images, fingerprint %016llx\n"
                     "batch-size=%d\ntta=%d\nlabel-smoothing=%.9g\nnormalisation=", (unsigned long long)hash_model(m, 1),
                     (long long)ds->count, (unsigned long long)hash_dataset(ds), sdgp_model_get_config(m)->batch, tta,
                     (double)smoothing);
    for (int c = 0; c < ds->c && c < 4; c++)
        n += snprintf(text + n, sizeof text - (size_t)n, "%s%.9g/%.9g", c ? "," : "", (double)aug->mean[c],
                      (double)aug->std[c]);
    return agree_with_root(d, text, (size_t)n + 1, "evaluation inputs (checkpoint, data or settings)", err);
}

sdgp_status dist_share_kernels(const sdgp_dist *d, sdgp_model *m, sdgp_error *err) {
    /* every rank on rank 0's implementations and algorithms (each measured its own) */
    char choice[SDGP_CHOICE_LEN], mine[SDGP_CHOICE_LEN];
    sdgp_model_choice(m, choice, sizeof choice);
    memcpy(mine, choice, sizeof mine);
    sdgp_status st = d->bcast(d->ctx, choice, sizeof choice, 0, err);
    if (st == SDGP_OK && d->rank != 0 && strcmp(choice, mine)) st = sdgp_model_set_choice(m, choice, err);
    return st;
}

sdgp_status dist_share_bn_stats(const sdgp_dist *d, sdgp_model *m, sdgp_error *err) {
    sdgp_status st = SDGP_OK;
    for (int i = 0; i < sdgp_model_param_count(m) && st == SDGP_OK; i++) {
        const sdgp_param *p = sdgp_model_param(m, i);
        if (!p->trainable) st = d->bcast(d->ctx, p->data, p->count * sizeof(float), 0, err);
    }
    return st;
}

sdgp_status dist_check_weights(const sdgp_dist *d, const sdgp_model *m, int64_t step, sdgp_error *err) {
    uint64_t mine = hash_model(m, 0), root = mine;
    sdgp_status st = d->bcast(d->ctx, &root, sizeof root, 0, err);
    double differ = 0;
    if (st == SDGP_OK) st = count_differing(d, mine == root, &differ, err);
    if (st == SDGP_OK && differ > 0)
        st = sdgp_fail(err, SDGP_ERR_INTERNAL, "step %lld: the weights of %.0f of %d MPI ranks differ from rank 0's "
                       "(they must stay bitwise equal; a non-deterministic allreduce?)", (long long)step, differ, d->size);
    return st;
}
