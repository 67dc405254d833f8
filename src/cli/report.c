/* sdgp report DIR: the results of a sweep as a markdown report (the paper's Table I with Welch's
 * t-test against dense (report_stats.c), time to accuracy, from quiet step times with --step-times
 * (report_steps.c), per-run details) and gnuplot figures (the paper's Figures 6-10, report_plots.c).
 *
 * Reads DIR/NAME/log.jsonl (+ status.json) for every run folder. Runs whose names differ only by
 * a trailing -s<digits> (the seed) form one group. A run's time axis is its trainer's elapsed_s
 * plus the offset_s of the sweep's last {"event":"resume"} line before it (elapsed_s restarts at 0
 * in each attempt); an epoch logged twice (an attempt killed after logging it, before its
 * checkpoint) keeps the later line, which the resumed run continued from. */
#define _GNU_SOURCE /* strverscmp */
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/report.h"

/* ---------------------------------------------------------------------------------------------
 * Runs and groups */

static int add_epoch(rp_run *r, const rp_epoch *e) {
    while (r->n_ep > 0 && r->ep[r->n_ep - 1].epoch >= e->epoch) r->n_ep--; /* rewritten by a resumed attempt */
    if (r->n_ep == r->cap_ep) {
        int c = r->cap_ep ? 2 * r->cap_ep : 16;
        rp_epoch *q = realloc(r->ep, (size_t)c * sizeof *q);
        if (!q) return 0;
        r->ep = q;
        r->cap_ep = c;
    }
    r->ep[r->n_ep++] = *e;
    return 1;
}

typedef struct {
    rp_run *run;
    double offset; /* the current attempt's start on the run's time axis */
} log_ctx;

static int log_line(void *ctx, const rp_jfield *f, int n, const char *line, char *why, size_t size) {
    log_ctx *c = ctx;
    rp_run *r = c->run;
    char event[32];
    if (!rp_j_str(f, n, "event", event, sizeof event)) {
        snprintf(why, size, "no \"event\"");
        return 2;
    }
    if (!strcmp(event, "epoch")) {
        rp_epoch e;
        double ep, step, el;
        const char *miss = !rp_j_num(f, n, "epoch", &ep) ? "epoch" : !rp_j_num(f, n, "step", &step) ? "step"
                         : !rp_j_num(f, n, "train_loss", &e.train_loss) ? "train_loss"
                         : !rp_j_num(f, n, "test_acc", &e.test_acc) ? "test_acc"
                         : !rp_j_num(f, n, "elapsed_s", &el) ? "elapsed_s" : NULL;
        if (miss) {
            snprintf(why, size, "epoch event without a number \"%s\"", miss);
            return 2;
        }
        if (!rp_j_num(f, n, "test_loss", &e.test_loss)) e.test_loss = NAN;
        if (!rp_j_num(f, n, "img_per_s", &e.img_per_s)) e.img_per_s = NAN;
        e.epoch = (int)ep;
        e.step = (long long)step;
        e.t = c->offset + el;
        if (!add_epoch(r, &e)) {
            snprintf(why, size, "out of memory");
            return 2;
        }
    } else if (!strcmp(event, "resume")) {
        if (!rp_j_num(f, n, "offset_s", &c->offset)) {
            snprintf(why, size, "resume event without offset_s");
            return 2;
        }
    } else if (!strcmp(event, "grad_stats")) {
        const rp_jfield *layers = rp_j_get(f, n, "layers");
        if (!layers || layers->val[0] != '[') {
            snprintf(why, size, "grad_stats without a \"layers\" list");
            return 2;
        }
        const char *p = rp_j_ws(layers->val + 1), *end;
        while (*p == '{') {
            rp_jfield lf[RP_J_MAX_FIELDS];
            int ln = rp_j_object(p, lf, &end);
            char name[32];
            double rel, cos;
            if (ln < 0 || !rp_j_str(lf, ln, "layer", name, sizeof name) || !rp_j_num(lf, ln, "rel_l2", &rel) ||
                !rp_j_num(lf, ln, "cosine", &cos)) {
                snprintf(why, size, "grad_stats layer without layer/rel_l2/cosine");
                return 2;
            }
            int k = 0;
            while (k < r->n_layers && strcmp(r->layers[k].layer, name)) k++;
            if (k == r->n_layers && k < RP_MAX_LAYERS) snprintf(r->layers[r->n_layers++].layer, 32, "%s", name);
            if (k < RP_MAX_LAYERS) {
                r->layers[k].rel_l2 += rel;
                r->layers[k].cosine += cos;
                r->layers[k].count++;
            }
            p = rp_j_ws(end);
            if (*p == ',') p = rp_j_ws(p + 1);
        }
    }
    (void)line;
    return 0; /* other events: not ours to judge */
}

static int status_line(void *ctx, const rp_jfield *f, int n, const char *line, char *why, size_t size) {
    rp_run *r = ctx;
    if (!rp_j_str(f, n, "state", r->state, sizeof r->state) || !rp_j_num(f, n, "seconds", &r->seconds)) {
        snprintf(why, size, "status without \"state\" and \"seconds\"");
        return 2;
    }
    double a = 0;
    if (rp_j_num(f, n, "attempts", &a)) r->attempts = (int)a;
    r->has_status = 1;
    (void)line;
    return 0;
}

/* The group of a run: its name without a trailing -s<digits>. */
static void group_name(const char *run, char *out, size_t size) {
    snprintf(out, size, "%s", run);
    char *d = strrchr(out, '-');
    if (!d || d[1] != 's' || !d[2]) return;
    for (const char *p = d + 2; *p; p++)
        if (*p < '0' || *p > '9') return;
    *d = '\0';
}

static int cmp_names(const void *a, const void *b) {
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    char gx[256], gy[256];
    group_name(x, gx, sizeof gx);
    group_name(y, gy, sizeof gy);
    int dx = !strcmp(gx, "dense"), dy = !strcmp(gy, "dense");
    if (dx != dy) return dy - dx; /* the baseline first */
    return strverscmp(x, y);      /* 2:4 before 16:32 */
}

/* Loads every DIR/NAME/log.jsonl. Returns 0 or 2 (message printed). */
static int load_runs(rp_data *d, const char *dir) {
    DIR *dh = opendir(dir);
    if (!dh) {
        fprintf(stderr, "sdgp: report: %s: %s\n", dir, strerror(errno));
        return 2;
    }
    char **names = NULL;
    int n = 0, cap = 0, rc = 0;
    for (struct dirent *de; (de = readdir(dh));) {
        char path[4096];
        struct stat sb;
        if (de->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "%s/%s/log.jsonl", dir, de->d_name);
        if (stat(path, &sb) != 0) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 32;
            char **q = realloc(names, (size_t)cap * sizeof *q);
            if (!q) {
                rc = 2;
                break;
            }
            names = q;
        }
        if (!(names[n] = strdup(de->d_name))) {
            rc = 2;
            break;
        }
        n++;
    }
    closedir(dh);
    if (n == 0 && rc == 0) {
        fprintf(stderr, "sdgp: report: no runs in %s (no %s/*/log.jsonl)\n", dir, dir);
        rc = 2;
    }
    if (rc == 0) {
        qsort(names, (size_t)n, sizeof *names, cmp_names);
        d->runs = calloc((size_t)n, sizeof *d->runs);
        if (!d->runs) rc = 2;
    }
    for (int i = 0; rc == 0 && i < n; i++) {
        rp_run *r = &d->runs[d->n_runs++];
        snprintf(r->name, sizeof r->name, "%s", names[i]);
        group_name(r->name, r->group, sizeof r->group);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s/log.jsonl", dir, names[i]);
        log_ctx ctx = {r, 0};
        rc = rp_read_json_lines(path, log_line, &ctx);
        snprintf(path, sizeof path, "%s/%s/status.json", dir, names[i]);
        if (rc == 0 && access(path, F_OK) == 0) rc = rp_read_json_lines(path, status_line, r);
    }
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
    return rc;
}

static double mean_of(const double *v, int n) {
    double s = 0;
    for (int i = 0; i < n; i++) s += v[i];
    return n ? s / n : NAN;
}

/* Groups the runs (in their sorted order) and computes each group's statistics. */
static int make_groups(rp_data *d) {
    d->groups = calloc((size_t)d->n_runs, sizeof *d->groups);
    if (!d->groups) return 0;
    for (int i = 0; i < d->n_runs; i++) {
        rp_run *r = &d->runs[i];
        if (r->n_ep == 0) continue; /* nothing measured yet */
        int g = 0;
        while (g < d->n_groups && strcmp(d->groups[g].name, r->group)) g++;
        if (g == d->n_groups) snprintf(d->groups[d->n_groups++].name, sizeof d->groups[g].name, "%s", r->group);
        rp_group *G = &d->groups[g];
        if (G->n < RP_MAX_SEEDS) G->run[G->n++] = i;
    }
    d->dense = -1;
    for (int g = 0; g < d->n_groups; g++) {
        rp_group *G = &d->groups[g];
        double fin[RP_MAX_SEEDS], best[RP_MAX_SEEDS], wall[RP_MAX_SEEDS], ips[RP_MAX_SEEDS];
        G->acc_min = INFINITY;
        G->acc_max = -INFINITY;
        G->ep_min = 1 << 30;
        for (int k = 0; k < G->n; k++) {
            const rp_run *r = &d->runs[G->run[k]];
            const rp_epoch *last = &r->ep[r->n_ep - 1];
            fin[k] = last->test_acc;
            best[k] = 0;
            for (int e = 0; e < r->n_ep; e++) best[k] = fmax(best[k], r->ep[e].test_acc);
            wall[k] = r->has_status ? r->seconds : last->t;
            ips[k] = last->img_per_s;
            G->acc_min = fmin(G->acc_min, fin[k]);
            G->acc_max = fmax(G->acc_max, fin[k]);
            G->ep_min = last->epoch < G->ep_min ? last->epoch : G->ep_min;
            G->ep_max = last->epoch > G->ep_max ? last->epoch : G->ep_max;
            if (!r->has_status || strcmp(r->state, "done")) G->incomplete = 1;
        }
        G->acc_mean = mean_of(fin, G->n);
        double ss = 0;
        for (int k = 0; k < G->n; k++) ss += (fin[k] - G->acc_mean) * (fin[k] - G->acc_mean);
        /* equal accuracies: exactly 0, not the rounding noise of the mean (the t-test tells them apart) */
        G->acc_std = G->n < 2 ? NAN : G->acc_min == G->acc_max ? 0 : sqrt(ss / (G->n - 1));
        G->best_mean = mean_of(best, G->n);
        G->wall_mean = mean_of(wall, G->n);
        G->ips_mean = mean_of(ips, G->n);
        if (!strcmp(G->name, "dense")) d->dense = g;
    }
    return 1;
}

/* The index of run r's first epoch at or above target, -1 if none. */
static int first_epoch_at(const rp_run *r, double target) {
    for (int e = 0; e < r->n_ep; e++)
        if (r->ep[e].test_acc >= target) return e;
    return -1;
}

const char *rp_tta_rule(const rp_data *d) {
    return d->tta_median ? "median over seeds (a seed that never reached it counts as slower than every other, so "
                           "a group has a time when more than half its seeds reached it; with an even number of "
                           "seeds, the mean of the middle two)"
                         : "mean over seeds (only when every seed reached it)";
}

/* The median of v[0..n) (sorted in place; INFINITY for a seed that never reached the target), NaN
 * when it is not finite. */
static double median_reached(double *v, int n) {
    const double m = cli_median(v, n);
    return isfinite(m) ? m : NAN;
}

/* Time and steps of the first epoch at or above target on each run of the group, over seeds by
 * rp_tta_rule. */
static void time_to_target(rp_data *d, double target) {
    for (int g = 0; g < d->n_groups; g++) {
        rp_group *G = &d->groups[g];
        double t[RP_MAX_SEEDS], steps[RP_MAX_SEEDS], t_sum = 0, steps_sum = 0;
        G->tta_reached = 0;
        for (int k = 0; k < G->n; k++) {
            const rp_run *r = &d->runs[G->run[k]];
            const int e = first_epoch_at(r, target);
            t[k] = e < 0 ? INFINITY : r->ep[e].t;
            steps[k] = e < 0 ? INFINITY : (double)r->ep[e].step;
            if (e < 0) continue;
            t_sum += t[k];
            steps_sum += steps[k];
            G->tta_reached++;
        }
        if (d->tta_median) {
            G->tta = median_reached(t, G->n);
            G->tts = median_reached(steps, G->n);
        } else {
            G->tta = G->tta_reached == G->n ? t_sum / G->n : NAN;
            G->tts = G->tta_reached == G->n ? steps_sum / G->n : NAN;
        }
    }
}

/* ---------------------------------------------------------------------------------------------
 * sdgp bench layers --json */

static int layers_line(void *ctx, const rp_jfield *f, int n, const char *line, char *why, size_t size) {
    rp_layers *L = ctx;
    if (L->n == L->cap) {
        int c = L->cap ? 2 * L->cap : 32;
        rp_layer_row *q = realloc(L->rows, (size_t)c * sizeof *q);
        if (!q) {
            snprintf(why, size, "out of memory");
            return 2;
        }
        L->rows = q;
        L->cap = c;
    }
    rp_layer_row *w = &L->rows[L->n];
    double threads = 0;
    if (!rp_j_str(f, n, "model", w->model, sizeof w->model) || !rp_j_str(f, n, "layer", w->layer, sizeof w->layer) ||
        !rp_j_str(f, n, "prune", w->prune, sizeof w->prune) || !rp_j_str(f, n, "nm", w->nm, sizeof w->nm) ||
        !rp_j_num(f, n, "threads", &threads) || !rp_j_num(f, n, "fwd_ms", &w->fwd) ||
        !rp_j_num(f, n, "bwd_data_dense_ms", &w->bwd_dense) || !rp_j_num(f, n, "bwd_data_sparse_ms", &w->bwd_sparse) ||
        !rp_j_num(f, n, "prune_ms", &w->prune_ms) || !rp_j_num(f, n, "bwd_weights_ms", &w->bwd_w)) {
        snprintf(why, size, "not a `sdgp bench layers --json` line (model, layer, prune, nm, threads, *_ms)");
        return 2;
    }
    w->threads = (int)threads;
    L->n++;
    (void)line;
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * report.md */

static void fmt_pct(char *buf, size_t size, double frac) {
    if (isnan(frac)) snprintf(buf, size, "—");
    else snprintf(buf, size, "%.2f", 100 * frac);
}

/* The test of a group's final accuracies against dense's, in the table's words: the difference of
 * the means in points and Welch's two-sided p ("—" where the test is undefined). */
static void fmt_vs_dense(const rp_group *G, const rp_group *D, char *diff, char *pv, size_t size) {
    double t, df, p;
    snprintf(diff, size, "—");
    snprintf(pv, size, "—");
    if (!D || G == D) return;
    snprintf(diff, size, "%+.2f", 100 * (G->acc_mean - D->acc_mean));
    if (!rp_welch(G->acc_mean, G->acc_std, G->n, D->acc_mean, D->acc_std, D->n, &t, &df, &p) || isnan(p)) return;
    if (p >= 0.001) snprintf(pv, size, "%.3f", p);
    else snprintf(pv, size, "%.1e", p);
}

/* What "p vs dense" is, for the reader who does not know Welch's test, and what it cannot say. */
static void write_test_note(FILE *f, const rp_data *d) {
    int lo = RP_MAX_SEEDS, hi = 0;
    for (int g = 0; g < d->n_groups; g++) {
        lo = d->groups[g].n < lo ? d->groups[g].n : lo;
        hi = d->groups[g].n > hi ? d->groups[g].n : hi;
    }
    char seeds[32];
    if (lo == hi) snprintf(seeds, sizeof seeds, "%d", lo);
    else snprintf(seeds, sizeof seeds, "%d–%d", lo, hi);
    if (hi < 2) {
        fprintf(f, "\nDiff vs dense: group mean − dense mean, in points. p vs dense (Welch's t-test) needs at least 2 "
                   "seeds per group; with one seed each, as here, a difference cannot be told from seed-to-seed "
                   "noise.\n");
        return;
    }
    fprintf(f, "\nDiff vs dense: group mean − dense mean, in points. **p vs dense**: Welch's two-sided t-test of the "
               "group's final accuracies against dense's: t = (mean_g − mean_d) / sqrt(s_g²/n_g + s_d²/n_d), "
               "degrees of freedom by Welch–Satterthwaite, p = P(|T| ≥ |t|) for Student's t (\"—\": fewer than 2 "
               "seeds on either side, or no spread on both). It assumes the seeds are independent and a group's "
               "final accuracy roughly normal over seeds; it does not assume equal variances. With %s seeds per "
               "group, as here, the test has low power: a large p says the difference is within the seed-to-seed "
               "noise of so few runs, not that there is none (differences of a few tenths of a point need many "
               "more seeds to show), and the std it divides by is itself a rough estimate. No correction for "
               "testing several groups against the same dense runs.\n", seeds);
}

static void write_markdown(FILE *f, const rp_data *d, const char *dir, double target, int target_given,
                           const rp_layers *L, const rp_steps *S, const char *figures_note, const int *have_fig) {
    const rp_group *D = d->dense >= 0 ? &d->groups[d->dense] : NULL;
    int runs_used = 0;
    for (int g = 0; g < d->n_groups; g++) runs_used += d->groups[g].n;
    fprintf(f, "# Results of %s\n\n", dir);
    fprintf(f, "%d runs in %d groups (runs named NAME-s<seed> form group NAME), read from `%s/*/log.jsonl` and "
               "`status.json`.\n\n", runs_used, d->n_groups, dir);
    fprintf(f, "Final test accuracy: the last logged epoch of each run; **mean** over seeds, the **range** (min–max) "
               "and the sample **std** (n−1) over seeds. Best: mean over seeds of each run's best epoch. Wall time: "
               "mean over seeds of the run's training wall time (`status.json` \"seconds\": start-up, training and "
               "evaluation; an interrupted attempt counts up to its last checkpoint). Speedup: dense wall time / "
               "group wall time. img/s: training throughput of the last epoch (mean over seeds).\n\n");
    fprintf(f, "| group | n | epochs | final acc %% (mean) | range %% | std | diff vs dense | p vs dense | best %% | "
               "wall time s | speedup vs dense | img/s |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
    int any_incomplete = 0;
    for (int g = 0; g < d->n_groups; g++) {
        const rp_group *G = &d->groups[g];
        char mean[16], lo[16], hi[16], best[16], sp[32], std[16], ep[32], diff[16], pv[16];
        fmt_pct(mean, sizeof mean, G->acc_mean);
        fmt_pct(lo, sizeof lo, G->acc_min);
        fmt_pct(hi, sizeof hi, G->acc_max);
        fmt_pct(best, sizeof best, G->best_mean);
        fmt_pct(std, sizeof std, G->acc_std);
        fmt_vs_dense(G, D, diff, pv, sizeof diff);
        if (D && G->wall_mean > 0) snprintf(sp, sizeof sp, "%.3fx", D->wall_mean / G->wall_mean);
        else snprintf(sp, sizeof sp, "—");
        if (G->ep_min == G->ep_max) snprintf(ep, sizeof ep, "%d", G->ep_max);
        else snprintf(ep, sizeof ep, "%d–%d", G->ep_min, G->ep_max);
        any_incomplete |= G->incomplete;
        fprintf(f, "| %s%s | %d | %s | %s | %s–%s | %s | %s | %s | %s | %.1f | %s | %.0f |\n", G->name,
                G->incomplete ? " *" : "", G->n, ep, mean, lo, hi, std, diff, pv, best, G->wall_mean, sp, G->ips_mean);
    }
    if (any_incomplete) fprintf(f, "\n\\* not finished (or not run by `sdgp sweep`): numbers so far.\n");
    if (!D) fprintf(f, "\nNo group named `dense`: no speedups and no tests against it.\n");
    else write_test_note(f, d);

    fprintf(f, "\n## Time to accuracy\n\n");
    if (isnan(target)) {
        fprintf(f, "No target: give `--target ACC` (percent), or include a `dense` group.\n");
    } else {
        fprintf(f, "Target: %.2f%% test accuracy (%s). Time: the cumulative training wall time (trainer's elapsed_s "
                   "plus earlier attempts) at the end of the first epoch at or above the target, %s. Speedup: dense "
                   "time / group time.\n\n",
                100 * target, target_given ? "--target" : "0.3 points below dense's final mean accuracy", rp_tta_rule(d));
        fprintf(f, "| group | reached | time to target s | speedup vs dense |\n|---|---:|---:|---:|\n");
        for (int g = 0; g < d->n_groups; g++) {
            const rp_group *G = &d->groups[g];
            char t[32], sp[32];
            if (isnan(G->tta)) snprintf(t, sizeof t, "not reached");
            else snprintf(t, sizeof t, "%.1f", G->tta);
            if (D && !isnan(D->tta) && !isnan(G->tta) && G->tta > 0) snprintf(sp, sizeof sp, "%.3fx", D->tta / G->tta);
            else snprintf(sp, sizeof sp, "—");
            fprintf(f, "| %s | %d/%d | %s | %s |\n", G->name, G->tta_reached, G->n, t, sp);
        }
    }
    if (S) rp_steps_markdown(f, d, dir, S, target);

    int have_stats = 0;
    for (int i = 0; i < d->n_runs; i++) have_stats |= d->runs[i].n_layers > 0;
    if (have_stats) {
        fprintf(f, "\n## Data-gradient error of pruning per layer\n\nFrom the trainer's grad_stats lines: relative L2 "
                   "error and cosine similarity of the pruned layer's dL/dD against the dense one, mean over all "
                   "samples of the group's runs.\n\n| group | layer | rel. L2 error | cosine | samples |\n"
                   "|---|---|---:|---:|---:|\n");
        for (int g = 0; g < d->n_groups; g++) {
            const rp_group *G = &d->groups[g];
            const rp_run *r0 = &d->runs[G->run[0]];
            for (int l = 0; l < r0->n_layers; l++) {
                double rel = 0, cos = 0;
                int cnt = 0;
                for (int k = 0; k < G->n; k++) {
                    const rp_run *r = &d->runs[G->run[k]];
                    for (int m = 0; m < r->n_layers; m++)
                        if (!strcmp(r->layers[m].layer, r0->layers[l].layer)) {
                            rel += r->layers[m].rel_l2;
                            cos += r->layers[m].cosine;
                            cnt += r->layers[m].count;
                        }
                }
                if (cnt) fprintf(f, "| %s | %s | %.4f | %.5f | %d |\n", G->name, r0->layers[l].layer, rel / cnt,
                                 cos / cnt, cnt);
            }
        }
    }

    if (L && L->n) {
        fprintf(f, "\n## Convolution times per layer\n\nFrom `sdgp bench layers --json`, milliseconds per training "
                   "step. Sparse = the sparse backward-data kernel plus the pruning; layers without it (the first) "
                   "count their dense time. Share = dense backward-data / all conv time.\n\n"
                   "| model | pruning | threads | forward | bwd-data dense | bwd-data sparse + prune | bwd-weights | "
                   "share of bwd-data | conv time saved |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
        for (int i = 0; i < L->n;) {
            int j = i;
            double fw = 0, dd = 0, sp = 0, bw = 0;
            for (; j < L->n && !strcmp(L->rows[j].model, L->rows[i].model) && !strcmp(L->rows[j].prune, L->rows[i].prune) &&
                   !strcmp(L->rows[j].nm, L->rows[i].nm);
                 j++) {
                const rp_layer_row *w = &L->rows[j];
                fw += w->fwd, dd += w->bwd_dense, bw += w->bwd_w;
                sp += w->bwd_sparse > 0 ? w->bwd_sparse + w->prune_ms : w->bwd_dense;
            }
            double total = fw + dd + bw;
            fprintf(f, "| %s | %s %s | %d | %.2f | %.2f | %.2f | %.2f | %.1f%% | %.1f%% |\n", L->rows[i].model,
                    L->rows[i].prune, L->rows[i].nm, L->rows[i].threads, fw, dd, sp, bw, total > 0 ? 100 * dd / total : 0,
                    total > 0 ? 100 * (dd - sp) / total : 0);
            i = j;
        }
    }

    /* which seeds reached the target, and when: the groups' time to target is "not reached" when any seed missed it */
    char at_target[48] = "";
    if (!isnan(target)) snprintf(at_target, sizeof at_target, " first epoch >= %.2f %% |", 100 * target);
    fprintf(f, "\n## Runs\n\n| run | state | attempts | epochs | steps | final acc %% | best %% | wall time s |%s\n"
               "|---|---|---:|---:|---:|---:|---:|---:|%s\n", at_target, isnan(target) ? "" : "---:|");
    for (int i = 0; i < d->n_runs; i++) {
        const rp_run *r = &d->runs[i];
        char fin[16] = "—", best[16] = "—";
        double b = 0, wall = r->has_status ? r->seconds : r->n_ep ? r->ep[r->n_ep - 1].t : 0;
        for (int e = 0; e < r->n_ep; e++) b = fmax(b, r->ep[e].test_acc);
        if (r->n_ep) {
            fmt_pct(fin, sizeof fin, r->ep[r->n_ep - 1].test_acc);
            fmt_pct(best, sizeof best, b);
        }
        char reach[16] = "";
        const int e = isnan(target) ? -1 : first_epoch_at(r, target);
        if (e >= 0) snprintf(reach, sizeof reach, " %d |", r->ep[e].epoch);
        else if (!isnan(target)) snprintf(reach, sizeof reach, " — |");
        fprintf(f, "| %s | %s | %d | %d | %lld | %s | %s | %.1f |%s\n", r->name, r->has_status ? r->state : "no status.json",
                r->attempts, r->n_ep ? r->ep[r->n_ep - 1].epoch : 0, r->n_ep ? r->ep[r->n_ep - 1].step : 0LL, fin, best,
                wall, reach);
    }

    fprintf(f, "\n## Figures\n\n");
    if (figures_note) fprintf(f, "%s\n", figures_note);
    static const char *const captions[RP_N_FIGS] = {
        "Training loss per epoch (the paper's Figure 6)",
        "Test accuracy per epoch (Figure 7; mean over seeds, bars ± std where a group has 2 or more seeds)",
        "Final test accuracy over n:m (Figure 8)",
        "Final test accuracy against the group size m, one line per sparsity ratio m/n (mean ± std over seeds)",
        "Convolution times per layer (Figure 9)",
        "Test accuracy against cumulative wall-clock time (Figure 10; mean over seeds, bars ± std of the "
        "accuracy where a group has 2 or more seeds)"};
    for (int i = 0; i < RP_N_FIGS; i++)
        if (have_fig[i]) fprintf(f, "%s:\n\n![%s](%s.png)\n\n", captions[i], rp_fig_stems[i], rp_fig_stems[i]);
}

/* ---------------------------------------------------------------------------------------------
 * The command */

static void report_usage(FILE *f) {
    fprintf(f,
            "usage: sdgp report DIR [--out DIR2] [--target ACC] [--tta mean|median] [--layers FILE] [--step-times FILE]\n\n"
            "Summarises a sweep's results folder (DIR/NAME/log.jsonl + status.json; runs NAME-s<seed> form group\n"
            "NAME): writes DIR2/report.md (accuracy table with mean, range and std over seeds, the difference to\n"
            "the group `dense` and Welch's two-sided t-test p against it, wall time and speedup against dense,\n"
            "time to a target accuracy) and PNG figures drawn by gnuplot, with their .gp scripts and .dat data\n"
            "next to them: fig6_train_loss, fig7_test_acc (+- std over seeds), fig8_nm_heatmap and fig8_nm_acc\n"
            "(runs named N:M or containing n:m), fig9_layers (with --layers), fig10_time_to_acc (+- std).\n\n"
            "  --out DIR2         output folder [DIR]\n"
            "  --target ACC       target test accuracy in percent [dense's final mean - 0.3]\n"
            "  --tta STAT         time to target over a group's seeds: mean (every seed must reach it) or median\n"
            "                     (more than half must; a seed that never does counts as the slowest) [mean]\n"
            "  --layers FILE      output of `sdgp bench layers --json` for Figure 9\n"
            "  --step-times FILE  output of `sdgp bench step --json` (quiet step times): adds the time to target\n"
            "                     as each group's steps to it times the ms per step of the line matching its\n"
            "                     runs' settings (model, batch, threads, conv algorithm and workspace, pruning,\n"
            "                     n:m, domain, mask block, rescale scope; from DIR/NAME/command.txt); of\n"
            "                     repeated lines, the median\n\n"
            "Exit code: 0 ok (also when gnuplot is missing: figures skipped with a warning), 1 a figure failed,\n"
            "2 bad input.\n");
}

int sdgp_cmd_report(int argc, char **argv) {
    const char *dir = NULL, *out = NULL, *layers_path = NULL, *steps_path = NULL;
    double target = NAN;
    int tta_median = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            report_usage(stdout);
            return 0;
        }
        if (!strcmp(a, "--out") || !strcmp(a, "--target") || !strcmp(a, "--layers") || !strcmp(a, "--step-times") ||
            !strcmp(a, "--tta")) {
            if (i + 1 >= argc) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return 2;
            }
            const char *v = argv[++i];
            if (!strcmp(a, "--out")) out = v;
            else if (!strcmp(a, "--layers")) layers_path = v;
            else if (!strcmp(a, "--step-times")) steps_path = v;
            else if (!strcmp(a, "--tta")) {
                if (strcmp(v, "mean") && strcmp(v, "median")) {
                    fprintf(stderr, "sdgp: report: --tta: '%s' is not mean or median\n", v);
                    return 2;
                }
                tta_median = !strcmp(v, "median");
            }
            else if (!cli_parse_float(a, v, 0, 100, &target)) return 2;
            else target /= 100;
        } else if (a[0] == '-') {
            fprintf(stderr, "sdgp: report: unknown option '%s' (see sdgp report --help)\n", a);
            return 2;
        } else if (dir) {
            fprintf(stderr, "sdgp: report: one results folder only ('%s' and '%s')\n", dir, a);
            return 2;
        } else dir = a;
    }
    if (!dir) {
        fprintf(stderr, "sdgp: report needs a results folder (see sdgp report --help)\n");
        return 2;
    }
    if (!out) out = dir;
    rp_data d;
    memset(&d, 0, sizeof d);
    rp_layers L;
    memset(&L, 0, sizeof L);
    rp_steps S;
    memset(&S, 0, sizeof S);
    int rc = load_runs(&d, dir);
    if (rc == 0 && layers_path) {
        rc = rp_read_json_lines(layers_path, layers_line, &L);
        if (rc == 0 && L.n == 0) {
            fprintf(stderr, "sdgp: report: --layers %s: no lines\n", layers_path);
            rc = 2;
        }
    }
    if (rc == 0 && steps_path) rc = rp_steps_load(&S, steps_path);
    if (rc == 0 && !make_groups(&d)) rc = 2;
    if (rc == 0 && d.n_groups == 0) {
        fprintf(stderr, "sdgp: report: no run in %s has a finished epoch yet\n", dir);
        rc = 2;
    }
    if (rc == 0 && mkdir(out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "sdgp: report: cannot create --out %s: %s\n", out, strerror(errno));
        rc = 2;
    }
    if (rc != 0) goto done;
    int target_given = !isnan(target);
    if (!target_given && d.dense >= 0) target = d.groups[d.dense].acc_mean - 0.003;
    d.tta_median = tta_median;
    if (!isnan(target)) time_to_target(&d, target);

    int have_fig[RP_N_FIGS] = {0};
    char note[512] = "";
    rc = rp_plot_all(&d, L.n ? &L : NULL, target, out, have_fig, note, sizeof note);

    char path[4096];
    snprintf(path, sizeof path, "%s/report.md", out);
    FILE *f = fopen(path, "w");
    if (!f) {
        fprintf(stderr, "sdgp: report: cannot write %s: %s\n", path, strerror(errno));
        rc = 2;
        goto done;
    }
    write_markdown(f, &d, dir, target, target_given, L.n ? &L : NULL, steps_path ? &S : NULL, note[0] ? note : NULL,
                   have_fig);
    if (fclose(f) != 0) {
        fprintf(stderr, "sdgp: report: error writing %s\n", path);
        rc = 2;
        goto done;
    }
    int nfig = 0;
    for (int i = 0; i < RP_N_FIGS; i++) nfig += have_fig[i];
    printf("report: %d groups from %d runs -> %s (%d figures)\n", d.n_groups, d.n_runs, path, nfig);
done:
    for (int i = 0; i < d.n_runs; i++) free(d.runs[i].ep);
    free(d.runs);
    free(d.groups);
    free(L.rows);
    free(S.rows);
    return rc;
}
