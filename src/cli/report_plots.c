/* sdgp report: the figures. Each figure is a gnuplot script FIG.gp and its data FIG.dat written
 * into the output folder (so `gnuplot FIG.gp` there draws it again), then run by gnuplot with
 * that folder as working directory. pngcairo when this gnuplot has it, else png. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/report.h"

const char *const rp_fig_stems[RP_N_FIGS] = {"fig6_train_loss", "fig7_test_acc", "fig8_nm_heatmap",
                                             "fig8_nm_acc",     "fig9_layers",   "fig10_time_to_acc"};

/* Line colours: dense (the baseline) black, the others a qualitative palette. */
static const char *const colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                                     "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#ad494a"};
static const int points[] = {7, 5, 9, 11, 13, 3, 1, 2};

static FILE *open_in(const char *dir, const char *stem, const char *ext) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.%s", dir, stem, ext);
    FILE *f = fopen(path, "w");
    if (!f) fprintf(stderr, "sdgp: report: cannot write %s: %s\n", path, strerror(errno));
    return f;
}

static void gp_begin(FILE *g, const char *stem, int w, int h, const char *what) {
    fprintf(g, "# %s: %s\n# Draw again with `gnuplot %s.gp` in this folder (data: %s.dat).\n", stem, what, stem, stem);
    fprintf(g, "if (strstrt(GPVAL_TERMINALS, \"pngcairo\") > 0) {\n"
               "    set terminal pngcairo size %d,%d noenhanced font \"DejaVu Sans,11\"\n"
               "} else {\n    set terminal png size %d,%d noenhanced\n}\n", w, h, w, h);
    fprintf(g, "set output \"%s.png\"\nset grid lt 1 lw 1 lc rgb \"#c8c8c8\"\nset border lw 1.2\n", stem);
}

static int close_all(FILE *a, FILE *b) {
    int ok = 1;
    if (a && fclose(a) != 0) ok = 0;
    if (b && fclose(b) != 0) ok = 0;
    return ok && a && b;
}

/* One value of a group per epoch number: the mean over the seeds that have that epoch, and the
 * sample std over them (0 when only one seed has it). */
typedef enum { Y_TRAIN_LOSS, Y_TEST_ACC } y_kind;

static int group_curve(const rp_data *d, const rp_group *G, int epoch, y_kind y, double *x_t, double *val,
                       double *std) {
    double sx = 0, v[RP_MAX_SEEDS];
    int n = 0;
    for (int k = 0; k < G->n; k++) {
        const rp_run *r = &d->runs[G->run[k]];
        for (int e = 0; e < r->n_ep; e++)
            if (r->ep[e].epoch == epoch) {
                double x = y == Y_TRAIN_LOSS ? r->ep[e].train_loss : 100 * r->ep[e].test_acc;
                if (isfinite(x)) sx += r->ep[e].t, v[n++] = x;
            }
    }
    if (!n) return 0;
    double sy = 0, ss = 0;
    for (int i = 0; i < n; i++) sy += v[i];
    for (int i = 0; i < n; i++) ss += (v[i] - sy / n) * (v[i] - sy / n);
    *x_t = sx / n;
    *val = sy / n;
    *std = n > 1 ? sqrt(ss / (n - 1)) : 0;
    return 1;
}

/* Figures 6, 7, 10: one line per group, over epochs (time_axis 0) or cumulative seconds. */
static int plot_curves(const rp_data *d, const char *out, const char *stem, y_kind y, int time_axis, double target) {
    FILE *dat = open_in(out, stem, "dat"), *g = open_in(out, stem, "gp");
    if (!dat || !g) return close_all(dat, g);
    int max_ep = 1;
    for (int i = 0; i < d->n_runs; i++)
        if (d->runs[i].n_ep && d->runs[i].ep[d->runs[i].n_ep - 1].epoch > max_ep) max_ep = d->runs[i].ep[d->runs[i].n_ep - 1].epoch;
    fprintf(dat, "# %s: per group, mean over seeds per epoch; columns: %s, its std over seeds (0: one seed)\n", stem,
            time_axis ? "seconds, test accuracy %" : y == Y_TRAIN_LOSS ? "epoch, training loss" : "epoch, test accuracy %");
    for (int gi = 0; gi < d->n_groups; gi++) {
        fprintf(dat, "%s# group %s (%d seeds)\n", gi ? "\n\n" : "", d->groups[gi].name, d->groups[gi].n);
        for (int e = 1; e <= max_ep; e++) {
            double t, v, sd;
            if (group_curve(d, &d->groups[gi], e, y, &t, &v, &sd)) {
                if (time_axis) fprintf(dat, "%.3f %.6g %.6g\n", t, v, sd);
                else fprintf(dat, "%d %.6g %.6g\n", e, v, sd);
            }
        }
    }
    static const char *const what[3] = {"training loss per epoch (the paper's Figure 6)",
                                        "test accuracy per epoch (Figure 7)",
                                        "test accuracy against cumulative wall-clock time (Figure 10)"};
    int which = time_axis ? 2 : y == Y_TRAIN_LOSS ? 0 : 1;
    gp_begin(g, stem, 900, 600, what[which]);
    static const char *const titles[3] = {"Training loss per epoch (mean over seeds)",
                                          "Test accuracy per epoch (mean over seeds, bars: +/- std)",
                                          "Test accuracy against training wall-clock time (mean over seeds, bars: +/- std)"};
    fprintf(g, "set title \"%s\"\nset key outside right top box opaque\n", titles[which]);
    if (time_axis) {
        fprintf(g, "set xlabel \"cumulative training wall-clock time (s)\"\nset xrange [0:*]\n");
    } else {
        fprintf(g, "set xlabel \"epoch\"\nset xrange [0.5:%g]\n", max_ep + 0.5);
        if (max_ep <= 30) fprintf(g, "set xtics 1\n");
    }
    fprintf(g, "set ylabel \"%s\"\n", y == Y_TRAIN_LOSS ? "training loss (mean cross-entropy over the epoch)"
                                                        : "test accuracy (%)");
    fprintf(g, "plot ");
    for (int gi = 0, c = 0; gi < d->n_groups; gi++) {
        int dense = gi == d->dense;
        const char *col = dense ? "#000000" : colors[c % 12];
        int pt = dense ? 7 : points[c % 8], dt = dense || c < 12 ? 1 : 2;
        if (!dense) c++;
        /* accuracy: mean ± std over seeds where the group has them; a single seed has no spread */
        int bars = y == Y_TEST_ACC && d->groups[gi].n >= 2;
        fprintf(g, "%s\"%s.dat\" index %d using 1:2%s with %s lw %s pt %d ps 1.1 dt %d lc rgb \"%s\" title \"%s\"",
                gi ? ", \\\n     " : "", stem, gi, bars ? ":3" : "", bars ? "yerrorlines" : "linespoints",
                dense ? "3" : "2", pt, dt, col, d->groups[gi].name);
    }
    if (time_axis && !isnan(target))
        fprintf(g, ", \\\n     %.4f with lines lw 2 lc rgb \"#999999\" title \"target %.2f%%\"", 100 * target,
                100 * target);
    fprintf(g, "\n");
    return close_all(dat, g);
}

/* n and m from a name that is "N:M" or contains digits:digits; returns 1 if found. */
static int name_nm(const char *s, int *n, int *m) {
    for (const char *p = s; *p; p++) {
        if (*p < '0' || *p > '9' || (p > s && p[-1] >= '0' && p[-1] <= '9')) continue;
        char *e;
        long a = strtol(p, &e, 10);
        if (*e != ':' || e[1] < '0' || e[1] > '9') continue;
        long b = strtol(e + 1, &e, 10);
        if (a >= 1 && b >= a && b <= 1024) {
            *n = (int)a;
            *m = (int)b;
            return 1;
        }
    }
    return 0;
}

static int exact_nm(const char *s) {
    int n, m;
    char buf[64];
    if (!name_nm(s, &n, &m)) return 0;
    snprintf(buf, sizeof buf, "%d:%d", n, m);
    return !strcmp(buf, s);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The groups of the n:m figures (8 and its line plot), each with its own n:m: the groups named
 * exactly N:M if there are any, else those whose names contain one. Returns their count (at most
 * 256) into cell_g, or -1 when two groups have the same n:m (which the figures cannot show). */
static int nm_cells(const rp_data *d, int *cell_g, double *ms, double *rs) {
    int n_cells = 0, use_exact = 0;
    for (int g = 0; g < d->n_groups; g++) use_exact |= exact_nm(d->groups[g].name);
    for (int g = 0; g < d->n_groups && n_cells < 256; g++) {
        int n, m;
        if (use_exact ? !exact_nm(d->groups[g].name) : !name_nm(d->groups[g].name, &n, &m)) continue;
        name_nm(d->groups[g].name, &n, &m);
        for (int c = 0; c < n_cells; c++) {
            int n2, m2;
            name_nm(d->groups[cell_g[c]].name, &n2, &m2);
            if (n2 == n && m2 == m) {
                fprintf(stderr, "sdgp: report: note: groups %s and %s have the same n:m; no n:m figures\n",
                        d->groups[cell_g[c]].name, d->groups[g].name);
                return -1;
            }
        }
        ms[n_cells] = m;
        rs[n_cells] = (double)m / n;
        cell_g[n_cells++] = g;
    }
    return n_cells;
}

/* Figure 8: final accuracy over group size m (columns) and sparsity ratio m/n (rows), as the
 * paper lays it out; each cell names its n:m. Returns -1 when there is nothing to draw. */
static int plot_heatmap(const rp_data *d, const char *out, const char *stem) {
    int cell_g[256];
    double ms[256], rs[256];
    int n_cells = nm_cells(d, cell_g, ms, rs);
    if (n_cells < 2) return -1;
    double mcol[256], rrow[256];
    int nm_ = 0, nr = 0;
    memcpy(mcol, ms, sizeof(double) * (size_t)n_cells);
    memcpy(rrow, rs, sizeof(double) * (size_t)n_cells);
    qsort(mcol, (size_t)n_cells, sizeof(double), cmp_double);
    qsort(rrow, (size_t)n_cells, sizeof(double), cmp_double);
    for (int i = 0; i < n_cells; i++) {
        if (i == 0 || mcol[i] != mcol[nm_ - 1]) mcol[nm_++] = mcol[i];
        if (i == 0 || rrow[i] != rrow[nr - 1]) rrow[nr++] = rrow[i];
    }
    double lo = INFINITY, hi = -INFINITY;
    for (int c = 0; c < n_cells; c++) {
        lo = fmin(lo, 100 * d->groups[cell_g[c]].acc_mean);
        hi = fmax(hi, 100 * d->groups[cell_g[c]].acc_mean);
    }
    if (hi - lo < 0.1) lo -= 0.5, hi += 0.5;
    FILE *dat = open_in(out, stem, "dat"), *g = open_in(out, stem, "gp");
    if (!dat || !g) return close_all(dat, g);
    fprintf(dat, "# %s: column (m), row (m/n), final test accuracy %% (mean over seeds), n:m, label colour\n", stem);
    char have[64][64] = {{0}};
    for (int c = 0; c < n_cells; c++) {
        int xi = 0, yi = 0, n, m;
        while (mcol[xi] != ms[c]) xi++;
        while (rrow[yi] != rs[c]) yi++;
        if (xi < 64 && yi < 64) have[xi][yi] = 1;
        name_nm(d->groups[cell_g[c]].name, &n, &m);
        double acc = 100 * d->groups[cell_g[c]].acc_mean;
        fprintf(dat, "%d %d %.4f %d:%d %d\n", xi, yi, acc, n, m, (acc - lo) / (hi - lo) > 0.6 ? 0xffffff : 0);
    }
    fprintf(dat, "\n\n# cells without a run (N/A)\n");
    int n_na = 0;
    for (int xi = 0; xi < nm_ && xi < 64; xi++)
        for (int yi = 0; yi < nr && yi < 64; yi++)
            if (!have[xi][yi]) fprintf(dat, "%d %d\n", xi, yi), n_na++;
    gp_begin(g, stem, 900, 600, "final test accuracy over n:m (the paper's Figure 8)");
    fprintf(g, "set title \"Final test accuracy (%%, mean over seeds) for n of every m gradients kept\"\n"
               "unset grid\nset xlabel \"group size m\"\nset ylabel \"sparsity ratio m/n\"\n"
               "set cblabel \"final test accuracy (%%)\"\nset cbrange [%g:%g]\n"
               "set palette defined (0 \"#f7fbff\", 0.5 \"#6baed6\", 1 \"#08306b\")\n"
               "set xrange [-0.5:%g]\nset yrange [-0.5:%g]\nset tics scale 0\nset xtics (",
            lo, hi, nm_ - 0.5, nr - 0.5);
    for (int i = 0; i < nm_; i++) fprintf(g, "%s\"%g\" %d", i ? ", " : "", mcol[i], i);
    fprintf(g, ")\nset ytics (");
    for (int i = 0; i < nr; i++) fprintf(g, "%s\"%g\" %d", i ? ", " : "", rrow[i], i);
    fprintf(g, ")\n");
    fprintf(g, "plot \"%s.dat\" index 0 using 1:2:(0.5):(0.5):3 with boxxyerror fs solid 1.0 noborder lc palette "
               "notitle, \\\n", stem);
    if (n_na)
        fprintf(g, "     \"%s.dat\" index 1 using 1:2:(0.5):(0.5) with boxxyerror fs solid 1.0 noborder "
                   "lc rgb \"#d9d9d9\" notitle, \\\n     \"%s.dat\" index 1 using 1:2:(\"N/A\") with labels "
                   "font \",13\" notitle, \\\n", stem, stem);
    fprintf(g, "     \"%s.dat\" index 0 using 1:2:(sprintf(\"%%s\\n%%.2f%%%%\", strcol(4), $3)):5 with labels "
               "tc rgb variable font \",13\" notitle\n", stem);
    return close_all(dat, g);
}

/* Beside Figure 8: final accuracy (mean +- std over seeds) against the group size m, one line per
 * sparsity ratio m/n, so that "does a larger m help at the same ratio" reads off each line; dense's
 * mean as a reference line. Returns -1 when there is nothing to draw. */
static int plot_nm_lines(const rp_data *d, const char *out, const char *stem) {
    int cell_g[256], order[256];
    double ms[256], rs[256];
    int n_cells = nm_cells(d, cell_g, ms, rs);
    if (n_cells < 2) return -1;
    for (int i = 0; i < n_cells; i++) order[i] = i;
    for (int i = 1; i < n_cells; i++) /* by ratio, then m: each ratio's points in one block */
        for (int j = i; j > 0 && (rs[order[j - 1]] > rs[order[j]] ||
                                  (rs[order[j - 1]] == rs[order[j]] && ms[order[j - 1]] > ms[order[j]]));
             j--) {
            int t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    FILE *dat = open_in(out, stem, "dat"), *g = open_in(out, stem, "gp");
    if (!dat || !g) return close_all(dat, g);
    fprintf(dat, "# %s: per sparsity ratio m/n, one block: m, final test accuracy %% (mean over seeds), its std over "
                 "seeds (0: one seed), n:m, seeds\n", stem);
    int blocks = 0;
    double m_lo = INFINITY, m_hi = 0;
    char titles[256][96];
    for (int i = 0; i < n_cells; i++) {
        const int c = order[i];
        const rp_group *G = &d->groups[cell_g[c]];
        int n, m;
        name_nm(G->name, &n, &m);
        if (i == 0 || rs[c] != rs[order[i - 1]]) {
            fprintf(dat, "%s# m/n = %g\n", blocks ? "\n\n" : "", rs[c]);
            snprintf(titles[blocks++], sizeof titles[0], "m/n = %g:", rs[c]);
        }
        size_t tl = strlen(titles[blocks - 1]); /* the legend names the block's n:m */
        snprintf(titles[blocks - 1] + tl, sizeof titles[0] - tl, "%s %d:%d", titles[blocks - 1][tl - 1] == ':' ? "" : ",",
                 n, m);
        fprintf(dat, "%d %.4f %.4f %d:%d %d\n", m, 100 * G->acc_mean, G->n > 1 ? 100 * G->acc_std : 0, n, m, G->n);
        m_lo = fmin(m_lo, m);
        m_hi = fmax(m_hi, m);
    }
    gp_begin(g, stem, 900, 600, "final test accuracy against n:m, lines per sparsity ratio (beside Figure 8)");
    fprintf(g, "set title \"Final test accuracy over n:m (mean over seeds, bars: +/- std)\"\n"
               "set key outside right top box opaque\nset xlabel \"group size m\"\nset logscale x 2\n"
               "set xrange [%g:%g]\nset xtics 2\nset ylabel \"final test accuracy (%%)\"\nplot ",
            m_lo / 1.5, m_hi * 1.5);
    for (int b = 0; b < blocks; b++)
        fprintf(g, "%s\"%s.dat\" index %d using 1:2:3 with yerrorlines lw 2 pt %d ps 1.2 lc rgb \"%s\" title \"%s\"",
                b ? ", \\\n     " : "", stem, b, points[b % 8], colors[b % 12], titles[b]);
    if (d->dense >= 0)
        fprintf(g, ", \\\n     %.4f with lines lw 2 dt 2 lc rgb \"#000000\" title \"dense (%.2f%%)\"",
                100 * d->groups[d->dense].acc_mean, 100 * d->groups[d->dense].acc_mean);
    fprintf(g, "\n");
    return close_all(dat, g);
}

/* Figure 9: grouped bars per conv layer, one panel per (model, pruning) of the bench output. */
static int plot_layers(const rp_layers *L, const char *out, const char *stem) {
    int start[4], count[4], panels = 0;
    for (int i = 0; i < L->n;) {
        int j = i;
        while (j < L->n && !strcmp(L->rows[j].model, L->rows[i].model) && !strcmp(L->rows[j].prune, L->rows[i].prune) &&
               !strcmp(L->rows[j].nm, L->rows[i].nm))
            j++;
        if (panels < 4) start[panels] = i, count[panels++] = j - i;
        else fprintf(stderr, "sdgp: report: note: Figure 9 shows the first 4 (model, pruning) blocks of the bench output\n");
        i = j;
    }
    FILE *dat = open_in(out, stem, "dat"), *g = open_in(out, stem, "gp");
    if (!dat || !g) return close_all(dat, g);
    fprintf(dat, "# %s: layer index, fwd, bwd-data dense, bwd-data sparse, prune, bwd-weights (ms per step)\n", stem);
    gp_begin(g, stem, 900, 80 + 480 * panels, "per-layer convolution times (the paper's Figure 9)");
    fprintf(g, "set style fill solid 0.9 border lc rgb \"#333333\"\nset ylabel \"time per training step (ms)\"\n"
               "set yrange [0:*]\nset key inside top center horizontal opaque box\nset offsets 0, 0, graph 0.2, 0\nset grid noxtics ytics\n");
    if (panels > 1) fprintf(g, "set multiplot layout %d,1\n", panels);
    for (int p = 0; p < panels; p++) {
        const rp_layer_row *r0 = &L->rows[start[p]];
        fprintf(dat, "%s# %s %s %s, %d threads\n", p ? "\n\n" : "", r0->model, r0->prune, r0->nm, r0->threads);
        for (int i = 0; i < count[p]; i++) {
            const rp_layer_row *w = &L->rows[start[p] + i];
            fprintf(dat, "%d %.4f %.4f %.4f %.4f %.4f\n", i, w->fwd, w->bwd_dense, w->bwd_sparse, w->prune_ms, w->bwd_w);
        }
        fprintf(g, "set title \"Convolution times per layer: %s, SDGP %s %s, %d threads\"\n", r0->model, r0->prune, r0->nm,
                r0->threads);
        fprintf(g, "set xrange [-0.6:%g]\nset xtics (", count[p] - 0.4);
        for (int i = 0; i < count[p]; i++) fprintf(g, "%s\"%s\" %d", i ? ", " : "", L->rows[start[p] + i].layer, i);
        /* more than ~10 names side by side run into each other (ResNet-18 has 20 convs) */
        fprintf(g, ")%s\nset xlabel \"convolution layer\"\n", count[p] > 10 ? " rotate by -45" : "");
        fprintf(g, "plot \"%s.dat\" index %d using ($1-0.3):($2/2):(0.09):($2/2) with boxxyerror lc rgb \"#4c72b0\" "
                   "title \"forward\", \\\n"
                   "     '' index %d using ($1-0.1):($3/2):(0.09):($3/2) with boxxyerror lc rgb \"#dd8452\" "
                   "title \"backward-data, dense\", \\\n"
                   "     '' index %d using ($1+0.1):($4/2):(0.09):($4/2) with boxxyerror lc rgb \"#55a868\" "
                   "title \"backward-data, sparse\", \\\n"
                   "     '' index %d using ($1+0.1):($4+$5/2):(0.09):($5/2) with boxxyerror lc rgb \"#b7e0b9\" "
                   "title \"+ pruning\", \\\n"
                   "     '' index %d using ($1+0.3):($6/2):(0.09):($6/2) with boxxyerror lc rgb \"#c44e52\" "
                   "title \"backward-weights\"\n",
                stem, p, p, p, p, p);
    }
    if (panels > 1) fprintf(g, "unset multiplot\n");
    return close_all(dat, g);
}

/* Whether gnuplot is an executable on PATH. */
static int have_gnuplot(void) {
    const char *path = getenv("PATH");
    if (!path) return 0;
    char dir[4096];
    for (const char *p = path; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(dir, sizeof dir, "%.*s/gnuplot", (int)(n < 4000 ? n : 4000), p);
        if (n && access(dir, X_OK) == 0) return 1;
        p += n + (p[n] == ':');
    }
    return 0;
}

static int is_png(const char *path) {
    unsigned char sig[8];
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(sig, 1, 8, f);
    fclose(f);
    return n == 8 && !memcmp(sig, "\x89PNG\r\n\x1a\n", 8);
}

/* Runs `gnuplot STEM.gp` in out; 1 if it made a PNG. */
static int run_gnuplot(const char *out, const char *stem) {
    char script[512], png[4096];
    snprintf(script, sizeof script, "%s.gp", stem);
    snprintf(png, sizeof png, "%s/%s.png", out, stem);
    remove(png);
    pid_t pid = fork();
    if (pid == 0) {
        if (chdir(out) != 0) _exit(127);
        execlp("gnuplot", "gnuplot", script, (char *)NULL);
        _exit(127);
    }
    int status = 0;
    if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || !is_png(png)) {
        fprintf(stderr, "sdgp: report: gnuplot failed on %s/%s (exit %d)\n", out, script,
                pid > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        return 0;
    }
    return 1;
}

int rp_plot_all(const rp_data *d, const rp_layers *L, double target, const char *out, int *have_fig, char *note,
                size_t note_size) {
    int written[RP_N_FIGS] = {0};
    written[RP_FIG6] = plot_curves(d, out, rp_fig_stems[RP_FIG6], Y_TRAIN_LOSS, 0, NAN);
    written[RP_FIG7] = plot_curves(d, out, rp_fig_stems[RP_FIG7], Y_TEST_ACC, 0, NAN);
    written[RP_FIG8] = plot_heatmap(d, out, rp_fig_stems[RP_FIG8]) == 1;
    written[RP_FIG8_LINE] = written[RP_FIG8] && plot_nm_lines(d, out, rp_fig_stems[RP_FIG8_LINE]) == 1;
    written[RP_FIG9] = L ? plot_layers(L, out, rp_fig_stems[RP_FIG9]) : 0;
    written[RP_FIG10] = plot_curves(d, out, rp_fig_stems[RP_FIG10], Y_TEST_ACC, 1, target);
    int rc = 0;
    if (!have_gnuplot()) {
        fprintf(stderr, "sdgp: report: warning: gnuplot not found on PATH: figures skipped (their .gp scripts and .dat "
                        "files are written; install gnuplot-nox and run `gnuplot FIG.gp` in %s)\n", out);
        snprintf(note, note_size, "Figures skipped: gnuplot was not found (install gnuplot-nox, then run `gnuplot "
                                  "FIG.gp` in this folder for each script).\n");
        return 0;
    }
    for (int i = 0; i < RP_N_FIGS; i++) {
        if (!written[i]) continue;
        have_fig[i] = run_gnuplot(out, rp_fig_stems[i]);
        if (!have_fig[i]) rc = 1;
    }
    if (!written[RP_FIG8]) snprintf(note, note_size, "No n:m heatmap (Figure 8): it needs at least two groups named "
                                                     "N:M (or containing one n:m each).%s\n",
                                    L ? "" : " No Figure 9: give `--layers FILE` (`sdgp bench layers --json` output).");
    else if (!L) snprintf(note, note_size, "No Figure 9: give `--layers FILE` (`sdgp bench layers --json` output).\n");
    return rc;
}
