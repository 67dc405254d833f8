/* sdgp report --step-times FILE: time to the target accuracy from quiet step times. The runs' wall
 * times are measured while the machine does whatever else it does (other runs of a sweep, other
 * jobs); `sdgp bench step --json` measures one training step alone. Each group's steps to the
 * target (from its logs) times the ms per step of the bench line with the same settings gives a
 * time to target that such noise does not touch.
 *
 * A group's settings are those of its first run: DIR/RUN/command.txt (the `sdgp train` command
 * `sdgp sweep` ran), read with the train command's own flag parser on top of the defaults. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/report.h"

/* The keys a bench step line shares with a run: their JSON names (enum RP_SK_*). */
static const char *const key_json[RP_SK_N] = {"model", "batch", "threads",     "conv_algo",  "conv_ws_mb",
                                              "prune", "nm",    "sdgp_domain", "mask_block", "rescale_scope"};
static const int key_numeric[RP_SK_N] = {0, 1, 1, 0, 1, 0, 0, 0, 1, 0};

/* ---------------------------------------------------------------------------------------------
 * Reading the bench lines */

typedef struct {
    rp_steps *S;
    int row;
} load_ctx;

static int step_line(void *ctx, const rp_jfield *f, int n, const char *line, char *why, size_t size) {
    load_ctx *c = ctx;
    rp_steps *S = c->S;
    c->row++;
    /* `bench step --inference` lines time inference forwards, not training steps: never a run's step time */
    if (rp_j_true(f, n, "inference")) return 0;
    if (S->n == S->cap) {
        int cap = S->cap ? 2 * S->cap : 32;
        rp_step_row *q = realloc(S->rows, (size_t)cap * sizeof *q);
        if (!q) {
            snprintf(why, size, "out of memory");
            return 2;
        }
        S->rows = q;
        S->cap = cap;
    }
    rp_step_row *r = &S->rows[S->n];
    memset(r, 0, sizeof *r);
    r->row = c->row;
    for (int k = 0; k < RP_SK_N; k++) {
        double v;
        if (key_numeric[k] && rp_j_num(f, n, key_json[k], &v)) snprintf(r->key[k], sizeof r->key[k], "%g", v);
        else if (!key_numeric[k]) rp_j_str(f, n, key_json[k], r->key[k], sizeof r->key[k]);
    }
    /* A dense line times our dense step (ours_ms), an SDGP line its pruned step (sdgp_ms). */
    int dense = !strcmp(r->key[RP_SK_PRUNE], "none");
    const char *ms_key = dense ? "ours_ms" : "sdgp_ms";
    const char *miss = !r->key[RP_SK_MODEL][0] ? "\"model\" (a string)"
                     : !r->key[RP_SK_PRUNE][0] ? "\"prune\" (a string)"
                     : !r->key[RP_SK_BATCH][0] ? "\"batch\" (a number)"
                     : !r->key[RP_SK_THREADS][0] ? "\"threads\" (a number)"
                     : !dense && !r->key[RP_SK_NM][0] ? "\"nm\" (a string)"
                     : !rp_j_num(f, n, ms_key, &r->ms) ? (dense ? "\"ours_ms\" (a number)" : "\"sdgp_ms\" (a number)")
                     : NULL;
    if (miss) {
        snprintf(why, size, "not a `sdgp bench step --json` line: no %s", miss);
        return 2;
    }
    if (!isfinite(r->ms) || r->ms <= 0) {
        snprintf(why, size, "%s is not a positive time", ms_key);
        return 2;
    }
    /* --interleave: the line's steps alternated with a dense partner's, so its ratio to that partner
     * is what survives the host's drift; rp_steps_markdown scales it to the dense line */
    if (!dense && rp_j_true(f, n, "interleaved")) {
        if (!rp_j_num(f, n, "dense_ms", &r->partner) || !isfinite(r->partner) || r->partner <= 0) {
            snprintf(why, size, "an interleaved line needs \"dense_ms\" (a positive number)");
            return 2;
        }
    }
    S->n++;
    (void)line;
    return 0;
}

int rp_steps_load(rp_steps *S, const char *path) {
    load_ctx c = {S, 0};
    S->path = path;
    int rc = rp_read_json_lines(path, step_line, &c);
    if (rc == 0 && S->n == 0) {
        fprintf(stderr, "sdgp: report: --step-times %s: no lines (want the output of `sdgp bench step --json`)\n",
                path);
        rc = 2;
    }
    return rc;
}

/* ---------------------------------------------------------------------------------------------
 * A run's settings */

typedef struct {
    char key[RP_SK_N][64]; /* "" when not known (e.g. --threads 0: as many as the machine had) */
    int applies[RP_SK_N];  /* n:m, domain and mask block do not apply to a dense run */
    char why[256];         /* when the settings could not be read */
} run_keys;

/* Splits command.txt's shell line (words, '...' quotes, \ escapes, as `sdgp sweep` writes it)
 * into argv in place. Returns the word count, -1 on too many words or an open quote. */
static int split_words(char *s, char **argv, int max) {
    int n = 0;
    char *w = s;
    for (char *p = s; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
        if (!*p) break;
        if (n == max) return -1;
        argv[n++] = w;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n' && *p != '\r') {
            if (*p == '\'') {
                for (p++; *p && *p != '\''; p++) *w++ = *p;
                if (!*p) return -1;
                p++;
            } else if (*p == '\\' && p[1]) {
                *w++ = p[1];
                p += 2;
            } else *w++ = *p++;
        }
        if (*p) p++; /* the separator: overwritten by the word's end below at the latest */
        *w++ = '\0';
    }
    return n;
}

/* The input shape of each data set sdgp_dataset_load reads, as `sdgp bench step` names its models
 * ("resnet9-w0.25-28x28x1"). */
static const char *data_shape(const char *data) {
    return !strcmp(data, "fashion-mnist") || !strcmp(data, "mnist") ? "28x28x1" : !strcmp(data, "cifar10") ? "32x32x3" : "";
}

static void read_run_keys(const char *dir, const char *run, run_keys *k) {
    memset(k, 0, sizeof *k);
    char path[4096], text[16384], *argv[256];
    snprintf(path, sizeof path, "%s/%s/command.txt", dir, run);
    FILE *fp = fopen(path, "r");
    if (!fp) {
        snprintf(k->why, sizeof k->why, "no %s/command.txt", run);
        return;
    }
    size_t len = fread(text, 1, sizeof text - 1, fp);
    fclose(fp);
    text[len] = '\0';
    int argc = split_words(text, argv, 256);
    if (argc < 2 || strcmp(argv[1], "train")) {
        snprintf(k->why, sizeof k->why, "%s/command.txt is not an `sdgp train` command", run);
        return;
    }
    sdgp_train_config cfg = sdgp_train_config_default();
    if (cli_apply_train_flags(&cfg, argc - 1, argv + 1, NULL) != 0) { /* prints which flag */
        snprintf(k->why, sizeof k->why, "%s/command.txt: flags not understood", run);
        return;
    }
    static const char *const flag[RP_SK_N] = {NULL,    "batch-size", "threads",     "conv-algo",  "conv-workspace",
                                              "prune", "nm",         "sdgp-domain", "mask-block", "rescale-scope"};
    for (int i = 0; i < RP_SK_N; i++) {
        k->applies[i] = 1;
        if (!flag[i]) continue;
        cli_train_config_value(&cfg, flag[i], k->key[i], sizeof k->key[i], NULL); /* "" for a setting this build lacks */
        if (key_numeric[i] && k->key[i][0]) snprintf(k->key[i], sizeof k->key[i], "%g", strtod(k->key[i], NULL));
    }
    char model[32], width[32], data[64];
    cli_train_config_value(&cfg, "model", model, sizeof model, NULL);
    cli_train_config_value(&cfg, "width", width, sizeof width, NULL);
    cli_train_config_value(&cfg, "data", data, sizeof data, NULL);
    if (data_shape(data)[0])
        snprintf(k->key[RP_SK_MODEL], sizeof k->key[RP_SK_MODEL], "%s-w%g-%s", model, strtod(width, NULL), data_shape(data));
    if (!strcmp(k->key[RP_SK_THREADS], "0")) k->key[RP_SK_THREADS][0] = '\0';
    if (!strcmp(k->key[RP_SK_PRUNE], "none")) k->applies[RP_SK_NM] = k->applies[RP_SK_DOMAIN] = k->applies[RP_SK_BLOCK] = 0;
    if (strcmp(k->key[RP_SK_PRUNE], "rescaled")) k->applies[RP_SK_SCOPE] = 0;
}

/* Whether row and run differ in key i (compared only where both know it). */
static int differs(const rp_step_row *r, const run_keys *k, int i) {
    return k->applies[i] && r->key[i][0] && k->key[i][0] && strcmp(r->key[i], k->key[i]);
}

/* Whether key i applies to the run but the row or the run does not know it (not compared). */
static int not_compared(const rp_step_row *r, const run_keys *k, int i) {
    return k->applies[i] && (!r->key[i][0] || !k->key[i][0]);
}

/* The bench lines a group's time comes from, into idx[] (their count returned; 0: none), and the cell
 * that names them, or says why there are none. They are the lines that match the run and know the most
 * of its keys (older lines lack some, e.g. the rescale scope): repeats of one measurement, whose median
 * the caller takes. Without a match, the cell names the closest line and what differs. */
static int match_rows(const rp_steps *S, const run_keys *k, int *idx, char *cell, size_t size) {
    if (k->why[0]) {
        snprintf(cell, size, "no match (%s)", k->why);
        return 0;
    }
    int best = -1, best_diff = RP_SK_N + 1, n_idx = 0, exact_unknown = RP_SK_N + 1;
    for (int i = 0; i < S->n; i++) {
        int nd = 0, unknown = 0;
        for (int j = 0; j < RP_SK_N; j++) {
            nd += differs(&S->rows[i], k, j);
            unknown += not_compared(&S->rows[i], k, j);
        }
        if (nd == 0 && unknown < exact_unknown) n_idx = 0, exact_unknown = unknown;
        if (nd == 0 && unknown == exact_unknown) idx[n_idx++] = i;
        if (nd < best_diff) best = i, best_diff = nd;
    }
    if (n_idx > 0) {
        const rp_step_row *r = &S->rows[idx[0]];
        size_t len = (size_t)snprintf(cell, size, "row%s %d", n_idx > 1 ? "s" : "", r->row);
        for (int i = 1; i < n_idx && len < size; i++)
            len += (size_t)snprintf(cell + len, size - len, ", %d", S->rows[idx[i]].row);
        if (n_idx > 1 && len < size) len += (size_t)snprintf(cell + len, size - len, " (median of %d)", n_idx);
        if (len < size)
            len += (size_t)snprintf(cell + len, size - len, ": %s, batch %s, %s threads, %s", r->key[RP_SK_MODEL],
                                    r->key[RP_SK_BATCH], r->key[RP_SK_THREADS], r->key[RP_SK_PRUNE]);
        if (k->applies[RP_SK_NM] && len < size) len += (size_t)snprintf(cell + len, size - len, " %s", r->key[RP_SK_NM]);
        if (k->applies[RP_SK_SCOPE] && r->key[RP_SK_SCOPE][0] && len < size)
            len += (size_t)snprintf(cell + len, size - len, " (%s scope)", r->key[RP_SK_SCOPE]);
        const char *sep = "; not compared: ";
        for (int j = 0; j < RP_SK_N && len < size; j++)
            if (not_compared(r, k, j)) {
                len += (size_t)snprintf(cell + len, size - len, "%s%s", sep, key_json[j]);
                sep = ", ";
            }
        return n_idx;
    }
    const rp_step_row *r = &S->rows[best];
    size_t len = (size_t)snprintf(cell, size, "no match (closest: row %d, with", r->row);
    for (int j = 0, first = 1; j < RP_SK_N && len < size; j++)
        if (differs(r, k, j)) {
            len += (size_t)snprintf(cell + len, size - len, "%s %s %s where the run has %s", first ? "" : ",",
                                    key_json[j], r->key[j], k->key[j]);
            first = 0;
        }
    if (len < size) snprintf(cell + len, size - len, ")");
    return 0;
}

/* A group's ms per step: the median over its matched lines of each line's ms, an interleaved line's
 * being the dense ms times its ratio to its partner (dense_ms NaN: its own ms). *interleaved: whether
 * any line was. */
static double group_step_ms(const rp_steps *S, const int *idx, int n_idx, double dense_ms, double *scratch,
                            int *interleaved) {
    *interleaved = 0;
    for (int i = 0; i < n_idx; i++) {
        const rp_step_row *r = &S->rows[idx[i]];
        const int il = r->partner > 0 && !isnan(dense_ms);
        scratch[i] = il ? dense_ms * r->ms / r->partner : r->ms;
        *interleaved |= il;
    }
    return cli_median(scratch, n_idx); /* NaN when n_idx is 0 */
}

/* ---------------------------------------------------------------------------------------------
 * The section of report.md */

void rp_steps_markdown(FILE *f, const rp_data *d, const char *dir, const rp_steps *S, double target) {
    fprintf(f, "\n## Time to target from quiet step times\n\n");
    if (isnan(target)) {
        fprintf(f, "No target: give `--target ACC` (percent), or include a `dense` group.\n");
        return;
    }
    fprintf(f, "From `%s` (`sdgp bench step --json`): each group's training steps to the target (the log's step "
               "count at the end of the first epoch at or above %.2f%%, %s) times the ms per step of the bench line "
               "that matches the settings of the group's first run (its `command.txt`): model and input, batch, "
               "threads, convolution algorithm and workspace, pruning function, n:m, domain, mask block and rescale "
               "scope, each where both the line and the run have it. Of the matching lines, those that know the most "
               "of these count; when there are several (repeats of one measurement), the median of their ms per step. "
               "These step times are quiet measurements (one process alone, the "
               "median of its timed steps); the runs' wall times above are not: they include evaluation, start-up "
               "and whatever else ran on the machine meanwhile (other runs of the sweep, other jobs), so they can "
               "differ by more than the pruning saves. These estimates count training steps only. A setting a line "
               "does not have is not compared (lines written before bench step wrote the rescale scope match "
               "`rescaled` runs of either scope; the row's cell names what was not compared). (i): the line was "
               "measured with `--interleave`, its steps alternating with a dense partner's in one process; its ms "
               "per step is the dense group's ms per step times its ratio to that partner (sdgp_ms / dense_ms), so drift between "
               "the two lines' processes cancels.\n\n",
            S->path, 100 * target, rp_tta_rule(d));
    fprintf(f, "| group | reached | steps to target | ms per step (quiet) | time to target s (quiet) | speedup vs dense "
               "| step-time row |\n|---|---:|---:|---:|---:|---:|---|\n");
    double dense_time = NAN;
    const size_t ng = (size_t)d->n_groups, nl = (size_t)S->n;
    double *times = calloc(ng, sizeof *times), *step_ms = calloc(ng, sizeof *step_ms), *scratch = calloc(nl, sizeof *scratch);
    int *n_idx = calloc(ng, sizeof *n_idx), *idx = calloc(ng * nl, sizeof *idx), *inter = calloc(ng, sizeof *inter);
    char(*cells)[512] = calloc(ng, sizeof *cells);
    if (!times || !step_ms || !scratch || !n_idx || !idx || !inter || !cells) {
        fprintf(f, "(out of memory)\n");
        goto done;
    }
    for (int g = 0; g < d->n_groups; g++) {
        run_keys k;
        read_run_keys(dir, d->runs[d->groups[g].run[0]].name, &k);
        n_idx[g] = match_rows(S, &k, idx + (size_t)g * nl, cells[g], sizeof cells[g]);
    }
    /* the dense group first: an interleaved line's time is the dense time times its own ratio */
    const int dg = d->dense;
    const double dense_ms = dg >= 0 ? group_step_ms(S, idx + (size_t)dg * nl, n_idx[dg], NAN, scratch, &inter[dg]) : NAN;
    for (int g = 0; g < d->n_groups; g++) {
        step_ms[g] = g == dg ? dense_ms : group_step_ms(S, idx + (size_t)g * nl, n_idx[g], dense_ms, scratch, &inter[g]);
        times[g] = !isnan(step_ms[g]) && !isnan(d->groups[g].tts) ? d->groups[g].tts * step_ms[g] / 1000 : NAN;
        if (g == dg) dense_time = times[g];
    }
    for (int g = 0; g < d->n_groups; g++) {
        const rp_group *G = &d->groups[g];
        char steps[32], ms[32] = "—", t[32] = "—", sp[32] = "—";
        if (!isnan(step_ms[g])) snprintf(ms, sizeof ms, "%.2f%s", step_ms[g], inter[g] ? " (i)" : "");
        if (isnan(G->tts)) snprintf(steps, sizeof steps, "not reached");
        else snprintf(steps, sizeof steps, "%.0f", G->tts);
        if (!isnan(times[g])) snprintf(t, sizeof t, "%.1f", times[g]);
        if (!isnan(times[g]) && !isnan(dense_time) && times[g] > 0) snprintf(sp, sizeof sp, "%.3fx", dense_time / times[g]);
        fprintf(f, "| %s | %d/%d | %s | %s | %s | %s | %s |\n", G->name, G->tta_reached, G->n, steps, ms, t, sp, cells[g]);
    }
done:
    free(times);
    free(step_ms);
    free(scratch);
    free(n_idx);
    free(idx);
    free(inter);
    free(cells);
}
