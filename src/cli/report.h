/* sdgp report: the data read from a results folder, shared by report.c (reading, statistics,
 * report.md), report_plots.c (gnuplot figures), report_steps.c (--step-times), report_stats.c
 * (Welch's t-test) and report_json.c (the JSON line reader). Private to the command line. */
#ifndef SDGP_CLI_REPORT_H
#define SDGP_CLI_REPORT_H

#include <stdio.h>

#define RP_MAX_LAYERS 32
#define RP_MAX_SEEDS 64

typedef struct {
    int epoch;
    long long step;
    double train_loss, test_loss, test_acc; /* accuracy as a fraction */
    double t;                               /* cumulative training wall time at the epoch's end, s */
    double img_per_s;
} rp_epoch;

typedef struct {
    char layer[32];
    double rel_l2, cosine; /* sums over count grad_stats samples */
    int count;
} rp_layer_stat;

typedef struct {
    char name[256], group[256];
    rp_epoch *ep; /* by epoch, increasing */
    int n_ep, cap_ep;
    int has_status, attempts;
    char state[16];
    double seconds; /* status.json: wall time that counts for the result */
    rp_layer_stat layers[RP_MAX_LAYERS];
    int n_layers;
} rp_run;

typedef struct {
    char name[256];
    int run[RP_MAX_SEEDS], n; /* indices into rp_data.runs */
    int incomplete, ep_min, ep_max;
    double acc_mean, acc_min, acc_max, acc_std, best_mean; /* final test accuracy over seeds */
    double wall_mean, ips_mean;
    double tta;       /* time to the target accuracy over seeds (rp_data.tta_median: the statistic); NaN if none */
    double tts;       /* the same in training steps (the log's "step" of that epoch) */
    int tta_reached;  /* seeds that reached it */
} rp_group;

typedef struct {
    rp_run *runs;
    int n_runs;
    rp_group *groups; /* runs with at least one epoch; "dense" first */
    int n_groups;
    int dense;        /* index of the group "dense", or -1 */
    int tta_median;   /* --tta median: time to target is the median over seeds (else the mean, every seed reaching it) */
} rp_data;

/* How the time to target is taken over a group's seeds, in a sentence for report.md. */
const char *rp_tta_rule(const rp_data *d);

/* One line of `sdgp bench layers --json`, times in ms per step. */
typedef struct {
    char model[64], layer[32], prune[32], nm[16];
    int threads;
    double fwd, bwd_dense, bwd_sparse, prune_ms, bwd_w;
} rp_layer_row;

typedef struct {
    rp_layer_row *rows;
    int n, cap;
} rp_layers;

/* One line of `sdgp bench step --json` (--step-times): the keys it shares with a run's `sdgp train`
 * flags, as text ("" when the line lacks the key), and its time per step. */
enum {
    RP_SK_MODEL, RP_SK_BATCH, RP_SK_THREADS, RP_SK_ALGO, RP_SK_WS, RP_SK_PRUNE, RP_SK_NM, RP_SK_DOMAIN, RP_SK_BLOCK,
    RP_SK_SCOPE, RP_SK_N
};

typedef struct {
    char key[RP_SK_N][64];
    double ms;      /* ours_ms of a dense line ("prune":"none"), sdgp_ms of an SDGP line */
    double partner; /* an interleaved SDGP line's dense_ms (its own dense partner's steps), else 0 */
    int row;        /* its place among the file's JSON lines, from 1 */
} rp_step_row;

typedef struct {
    const char *path;
    rp_step_row *rows;
    int n, cap;
} rp_steps;

/* Reads `sdgp bench step --json` output. Returns 0, or prints why (file:line) and returns 2. */
int rp_steps_load(rp_steps *S, const char *path);
/* report.md's section "time to target from quiet step times": for each group, its steps to the
 * target times the ms per step of the line that matches the configuration of its first run
 * (DIR/RUN/command.txt). target NaN: says there is none. */
void rp_steps_markdown(FILE *f, const rp_data *d, const char *dir, const rp_steps *S, double target);

enum { RP_FIG6, RP_FIG7, RP_FIG8, RP_FIG8_LINE, RP_FIG9, RP_FIG10, RP_N_FIGS };
extern const char *const rp_fig_stems[RP_N_FIGS]; /* "fig6_train_loss", ... */

/* Writes each figure's .dat and .gp into out and runs gnuplot on it. have_fig[i] is set for each
 * PNG made; note receives a sentence for report.md when figures were skipped. L may be NULL,
 * target NaN (no target line). Returns 0, or 1 when gnuplot failed on a figure (message printed). */
int rp_plot_all(const rp_data *d, const rp_layers *L, double target, const char *out, int *have_fig, char *note,
                size_t note_size);

/* Welch's t-test (report_stats.c). rp_betai: the regularized incomplete beta function I_x(a, b)
 * for a, b > 0, x in [0, 1] (NaN if its continued fraction does not converge). rp_t_two_sided_p:
 * P(|T| >= |t|) for T Student-t with df > 0 (not necessarily integer) degrees of freedom.
 * rp_welch: the test of mean1 against mean2 from sample means, sample standard deviations (n - 1)
 * and sizes; returns 1 with t, df (Welch-Satterthwaite) and the two-sided p, or 0 when the test
 * is undefined (fewer than 2 values on a side, or both standard deviations 0). */
double rp_betai(double a, double b, double x);
double rp_t_two_sided_p(double t, double df);
int rp_welch(double mean1, double sd1, int n1, double mean2, double sd2, int n2, double *t, double *df, double *p);

/* The JSON reader (report_json.c). rp_j_object parses the object at p into f (up to
 * RP_J_MAX_FIELDS top-level fields; values are raw text) and sets *end past it; -1 if malformed.
 * rp_j_num / rp_j_str: 1 and the value when key holds a number / a string; rp_j_true: 1 when it holds true. */
typedef struct {
    const char *key, *val; /* key without quotes; value text */
    int klen, vlen;
} rp_jfield;

#define RP_J_MAX_FIELDS 32

const char *rp_j_ws(const char *p);
int rp_j_object(const char *p, rp_jfield *f, const char **end);
const rp_jfield *rp_j_get(const rp_jfield *f, int n, const char *key);
int rp_j_num(const rp_jfield *f, int n, const char *key, double *out);
int rp_j_str(const rp_jfield *f, int n, const char *key, char *buf, size_t size);
int rp_j_true(const rp_jfield *f, int n, const char *key);

/* Reads path line by line into fn, which returns 0, or 2 with why set. Returns 0, or prints
 * "path:line: why" and returns 2. A last line without newline that does not parse is a record
 * being written: skipped, with a note. */
typedef int (*rp_line_fn)(void *ctx, const rp_jfield *f, int n, const char *line, char *why, size_t size);
int rp_read_json_lines(const char *path, rp_line_fn fn, void *ctx);

#endif
