/* sdgp report: the data read from a results folder, shared by report.c (reading, statistics,
 * report.md) and report_plots.c (gnuplot figures). Private to the command line. */
#ifndef SDGP_CLI_REPORT_H
#define SDGP_CLI_REPORT_H

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
    double tta;       /* mean time to the target accuracy over seeds; NaN unless every seed reached it */
    int tta_reached;  /* seeds that reached it */
} rp_group;

typedef struct {
    rp_run *runs;
    int n_runs;
    rp_group *groups; /* runs with at least one epoch; "dense" first */
    int n_groups;
    int dense;        /* index of the group "dense", or -1 */
} rp_data;

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

enum { RP_FIG6, RP_FIG7, RP_FIG8, RP_FIG9, RP_FIG10, RP_N_FIGS };
extern const char *const rp_fig_stems[RP_N_FIGS]; /* "fig6_train_loss", ... */

/* Writes each figure's .dat and .gp into out and runs gnuplot on it. have_fig[i] is set for each
 * PNG made; note receives a sentence for report.md when figures were skipped. L may be NULL,
 * target NaN (no target line). Returns 0, or 1 when gnuplot failed on a figure (message printed). */
int rp_plot_all(const rp_data *d, const rp_layers *L, double target, const char *out, int *have_fig, char *note,
                size_t note_size);

#endif
