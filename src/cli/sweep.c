/* sdgp sweep FILE: runs each configuration of a sweep file as its own `sdgp train` process, with
 * a results folder per run, and picks up where it stopped when run again.
 *
 * Sweep file: one run per line, `NAME flags...` with `sdgp train` flags; a `defaults` line's flags
 * apply to every later run (several defaults lines add up); `#` starts a comment; blank lines are
 * skipped; a value with spaces may be quoted with '...' or "...".
 *
 * Per run, DIR/NAME/ holds:
 *   command.txt            the exact command of a fresh start (resumes add --resume CHECKPOINT)
 *   log.jsonl              the trainer's log; before each resumed attempt the sweep appends
 *                          {"event":"resume","attempt":K,"offset_s":S} so that `sdgp report` can put
 *                          the attempt's elapsed_s (which restarts at 0) on the run's time axis
 *   checkpoint.safetensors every --checkpoint-every steps and at each epoch end
 *   status.json            {"name","state":"running|done|failed|interrupted","seconds","spent_s","attempts","exit"}
 *   train.out              the trainer's stdout and stderr, appended per attempt
 * "seconds" is the wall time that counts for the result: a finished run's time as if it had never
 * been interrupted, i.e. the time up to the last checkpoint of each interrupted attempt (the sweep
 * watches the checkpoint file) plus the final attempt; work lost after a checkpoint is not
 * counted there, but in "spent_s" (all wall time spent).
 *
 * Why a child process per run rather than sdgp_train in-process: a crash, a NaN stop or a leak
 * in one configuration cannot take the sweep down, each run starts with fresh OpenMP and
 * allocator state (runs are then timed alike), and command.txt is exactly what was executed.
 * The child gets SIGKILL when the sweep dies (PR_SET_PDEATHSIG) so that a killed sweep leaves no
 * orphan writing into the folder, and it inherits the sweep's lock on DIR so that a new sweep
 * waits until the last writer is gone. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/sweep_internal.h"

/* What a run's folder says about it. */
typedef enum { RUN_NEW, RUN_RESTART, RUN_RESUME, RUN_DONE } run_state;

typedef struct {
    int exists;
    char state[16];
    double seconds, spent_s;
    int attempts, exit_code;
} run_status;

static void sweep_usage(FILE *f) {
    fprintf(f,
            "usage: sdgp sweep FILE [--results DIR] [--dry-run] [--only NAME[,NAME...]] [--threads N]\n"
            "                       [--checkpoint-every K] [--mpi K [--mpirun CMD]] [-- TRAIN_FLAGS...]\n\n"
            "Runs every configuration of a sweep file (one run per line: NAME then `sdgp train` flags; a\n"
            "`defaults` line's flags apply to every later run; # comments) as its own `sdgp train` process,\n"
            "each in DIR/NAME/ with log.jsonl, checkpoint.safetensors, status.json, command.txt, train.out.\n"
            "Run it again to continue: finished runs are skipped, interrupted ones resume from their checkpoint.\n\n"
            "  --results DIR          results folder [results]\n"
            "  --dry-run              check the file and print what would run, run nothing\n"
            "  --only LIST            run only these names (comma separated)\n"
            "  --threads N            --threads N for every run (overrides the file)\n"
            "  --checkpoint-every K   checkpoint every K steps unless the file says otherwise [25]\n"
            "  --mpi K                run each training data parallel on K MPI ranks: CMD -np K sdgp train ...\n"
            "  --mpirun CMD           the launcher and its options, e.g. 'mpirun --hostfile hosts' [mpirun]\n"
            "  -- TRAIN_FLAGS         flags applied to every run after its own, e.g. -- --epochs 1 --max-steps 40\n\n"
            "Exit code: 0 all selected runs finished, 1 some failed or the sweep was interrupted, 2 bad input.\n");
}

/* ---------------------------------------------------------------------------------------------
 * Commands, status files */

/* out = dir/name. The results folder is at most PATH_MAX - 200 characters long (checked at start)
 * and names under 64, so this never truncates; an empty out would make the open fail. */
static void path_join(char *out, size_t size, const char *dir, const char *name) {
    if (snprintf(out, size, "%s/%s", dir, name) >= (int)size) out[0] = '\0';
}

/* The train command of run r (argv, NULL-terminated; strings point into sf, o, or paths). */
typedef struct {
    char *argv[4 * MAX_TOKENS + 16];
    int argc;
    int exe_at;                      /* argv[exe_at] is this program (after the launcher's words, if any) */
    char every[32], threads[32], np[32];
    char launcher[1024];             /* --mpirun's words, NUL-separated */
    char log[PATH_MAX], ckpt[PATH_MAX];
} command;

static void command_build(command *c, const sweep_file *sf, const sweep_run *r, const sweep_opts *o, const char *rundir,
                          int resume) {
    c->argc = 0;
    snprintf(c->every, sizeof c->every, "%ld", o->checkpoint_every);
    snprintf(c->threads, sizeof c->threads, "%d", o->threads);
    path_join(c->log, sizeof c->log, rundir, "log.jsonl");
    path_join(c->ckpt, sizeof c->ckpt, rundir, "checkpoint.safetensors");
    if (o->mpi > 0) { /* the launcher's words (at most MAX_TOKENS), -np K, then this program */
        snprintf(c->launcher, sizeof c->launcher, "%s", o->mpirun);
        for (char *save = NULL, *w = strtok_r(c->launcher, " ", &save); w && c->argc < MAX_TOKENS;
             w = strtok_r(NULL, " ", &save))
            c->argv[c->argc++] = w;
        snprintf(c->np, sizeof c->np, "%d", o->mpi);
        c->argv[c->argc++] = "-np";
        c->argv[c->argc++] = c->np;
    }
    c->exe_at = c->argc;
    c->argv[c->argc++] = "sdgp"; /* executed as /proc/self/exe: this very binary, even if rebuilt meanwhile */
    c->argv[c->argc++] = "train";
    if (resume) {
        c->argv[c->argc++] = "--resume";
        c->argv[c->argc++] = c->ckpt;
    }
    c->argv[c->argc++] = "--checkpoint-every"; /* before the file's flags, which may override it */
    c->argv[c->argc++] = c->every;
    for (int i = 0; i < r->n_defaults; i++) c->argv[c->argc++] = sf->defaults[i];
    for (int i = 0; i < r->argc; i++) c->argv[c->argc++] = r->argv[i];
    for (int i = 0; i < o->extra_argc; i++) c->argv[c->argc++] = o->extra[i];
    if (o->threads > 0) {
        c->argv[c->argc++] = "--threads";
        c->argv[c->argc++] = c->threads;
    }
    c->argv[c->argc++] = "--log";
    c->argv[c->argc++] = c->log;
    c->argv[c->argc++] = "--checkpoint";
    c->argv[c->argc++] = c->ckpt;
    c->argv[c->argc] = NULL;
}

/* The command as one shell line, argv[first..] (words quoted where needed). */
static void command_text(const command *c, int first, const char *exe, char *out, size_t size) {
    size_t len = 0;
    out[0] = '\0';
    for (int i = first; i < c->argc && len + 1 < size; i++) {
        const char *w = i == c->exe_at && exe ? exe : c->argv[i];
        int plain = *w != '\0';
        for (const char *p = w; *p; p++)
            if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./:=,+-@%", *p)) plain = 0;
        len += (size_t)snprintf(out + len, size - len, "%s%s", i > first ? " " : "", plain ? "" : "'");
        for (const char *p = w; *p && len + 5 < size; p++) {
            if (*p == '\'') len += (size_t)snprintf(out + len, size - len, "'\\''");
            else out[len++] = *p, out[len] = '\0';
        }
        if (!plain && len + 1 < size) out[len++] = '\'', out[len] = '\0';
    }
}

static int read_small_file(const char *path, char *buf, size_t size) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    size_t n = fread(buf, 1, size - 1, f);
    buf[n] = '\0';
    fclose(f);
    return 1;
}

/* Number after "key": in a flat JSON object of ours; returns 1 if present. */
static int json_number(const char *text, const char *key, double *out) {
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\":", key);
    const char *p = strstr(text, pat);
    if (!p) return 0;
    char *end;
    *out = strtod(p + strlen(pat), &end);
    return end != p + strlen(pat);
}

/* Reads rundir/status.json. Returns 1 (st->exists says whether there was one) or 0 if malformed. */
static int status_read(const char *rundir, run_status *st) {
    char path[PATH_MAX], text[1024];
    memset(st, 0, sizeof *st);
    path_join(path, sizeof path, rundir, "status.json");
    if (!read_small_file(path, text, sizeof text)) return 1;
    st->exists = 1;
    const char *s = strstr(text, "\"state\":\"");
    double a = 0, e = 0;
    if (!s || !json_number(text, "seconds", &st->seconds) || !json_number(text, "spent_s", &st->spent_s) ||
        !json_number(text, "attempts", &a) || !json_number(text, "exit", &e))
        return 0;
    s += 9;
    size_t n = strcspn(s, "\"");
    snprintf(st->state, sizeof st->state, "%.*s", (int)(n < sizeof st->state ? n : sizeof st->state - 1), s);
    st->attempts = (int)a;
    st->exit_code = (int)e;
    return 1;
}

static int status_write(const char *rundir, const char *name, const run_status *st) {
    char path[PATH_MAX], text[512];
    path_join(path, sizeof path, rundir, "status.json");
    snprintf(text, sizeof text,
             "{\"name\":\"%s\",\"state\":\"%s\",\"seconds\":%.3f,\"spent_s\":%.3f,\"attempts\":%d,\"exit\":%d}\n", name,
             st->state, st->seconds, st->spent_s, st->attempts, st->exit_code);
    return cli_write_file_atomic(path, text);
}

static int file_exists(const char *path) {
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Cuts a partial last line off the log (a writer killed mid-line), so that appended lines stay
 * one JSON object per line. */
static void log_trim_partial_line(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return;
    long keep = 0, pos = 0;
    int c;
    while ((c = fgetc(f)) != EOF) {
        pos++;
        if (c == '\n') keep = pos;
    }
    fclose(f);
    if (keep != pos && truncate(path, keep) != 0) fprintf(stderr, "sdgp: warning: cannot trim %s\n", path);
}

/* ---------------------------------------------------------------------------------------------
 * Running one configuration */

typedef struct {
    FILE *log;    /* the run's log, read as it grows, for the progress lines */
    long offset;
} log_tail;

/* Prints a progress line for each complete new epoch line of the log. */
static void log_tail_poll(log_tail *t, const char *path, const char *label, double t_base) {
    if (!t->log && !(t->log = fopen(path, "r"))) return;
    char line[4096];
    for (;;) {
        clearerr(t->log);
        fseek(t->log, t->offset, SEEK_SET);
        if (!fgets(line, sizeof line, t->log)) return;
        size_t n = strlen(line);
        if (n == 0 || line[n - 1] != '\n') return; /* not complete yet */
        t->offset += (long)n;
        double ep, step, loss, acc;
        if (strstr(line, "\"event\":\"epoch\"") && json_number(line, "epoch", &ep) && json_number(line, "step", &step) &&
            json_number(line, "train_loss", &loss) && json_number(line, "test_acc", &acc))
            printf("%s  epoch %.0f  step %.0f  train_loss %.4f  test_acc %.2f%%  (%.0f s)\n", label, ep, step, loss,
                   100 * acc, cli_now() - t_base);
        fflush(stdout);
    }
}

/* Starts the child: stdout+stderr appended to out_path, SIGKILL when the sweep dies. */
static pid_t spawn(const command *c, const char *out_path, const sigset_t *old_mask) {
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127); /* the sweep died before prctl */
    int fd = open(out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    sigprocmask(SIG_SETMASK, old_mask, NULL);
    if (c->exe_at == 0) {
        execv("/proc/self/exe", c->argv);
        fprintf(stderr, "sdgp sweep: cannot run /proc/self/exe: %s\n", strerror(errno));
        _exit(127);
    }
    /* under a launcher: it starts this binary by its path */
    static char exe[PATH_MAX], *argv[sizeof c->argv / sizeof c->argv[0]];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = '\0';
    memcpy(argv, c->argv, sizeof argv);
    argv[c->exe_at] = exe;
    execvp(argv[0], argv);
    fprintf(stderr, "sdgp sweep: cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Runs one attempt of run r and updates its status. Returns 0 finished, 1 failed, 3 interrupted. */
static int run_attempt(const command *c, int resume, const char *rundir, const char *name, const char *label,
                       run_status *st, const sigset_t *wait_set, const sigset_t *old_mask) {
    char out_path[PATH_MAX];
    path_join(out_path, sizeof out_path, rundir, "train.out");
    struct stat sb;
    struct timespec ck_mtime = {0, 0};
    if (stat(c->ckpt, &sb) == 0) ck_mtime = sb.st_mtim;
    double useful0 = st->seconds, spent0 = st->spent_s, t0 = cli_now(), last_write = t0;
    snprintf(st->state, sizeof st->state, "running");
    st->attempts++;
    st->exit_code = 0;
    status_write(rundir, name, st);
    pid_t pid = spawn(c, out_path, old_mask);
    if (pid < 0) {
        fprintf(stderr, "sdgp: sweep: fork: %s\n", strerror(errno));
        return 1;
    }
    log_tail tail = {NULL, 0};
    if (resume && stat(c->log, &sb) == 0) tail.offset = (long)sb.st_size;
    int stopping = 0, wstatus = 0;
    for (;;) {
        pid_t w = waitpid(pid, &wstatus, WNOHANG);
        if (w == pid) break;
        struct timespec poll = {0, 200000000};
        int sig = sigtimedwait(wait_set, NULL, &poll);
        if ((sig == SIGINT || sig == SIGTERM || sig == SIGHUP) && !stopping) {
            stopping = 1;
            kill(pid, SIGTERM); /* checkpoints are written atomically: the last one stays good */
        }
        double now = cli_now();
        int wrote = 0;
        if (stat(c->ckpt, &sb) == 0 &&
            (sb.st_mtim.tv_sec != ck_mtime.tv_sec || sb.st_mtim.tv_nsec != ck_mtime.tv_nsec)) {
            ck_mtime = sb.st_mtim;
            st->seconds = useful0 + (now - t0); /* time that a resume from this checkpoint keeps */
            wrote = 1;
        }
        if (wrote || now - last_write > 10) {
            st->spent_s = spent0 + (now - t0);
            status_write(rundir, name, st);
            last_write = now;
        }
        log_tail_poll(&tail, c->log, label, t0 - useful0);
    }
    double now = cli_now();
    log_tail_poll(&tail, c->log, label, t0 - useful0);
    struct timespec zero = {0, 0}; /* a Ctrl-C may have ended the child before we saw the signal */
    for (int sig; (sig = sigtimedwait(wait_set, NULL, &zero)) > 0;)
        if (sig != SIGCHLD) stopping = 1;
    if (tail.log) fclose(tail.log);
    st->spent_s = spent0 + (now - t0);
    int code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    st->exit_code = code;
    int result;
    if (code == 0) {
        st->seconds = useful0 + (now - t0);
        snprintf(st->state, sizeof st->state, "done");
        result = 0;
    } else {
        snprintf(st->state, sizeof st->state, "%s", stopping ? "interrupted" : "failed");
        result = stopping ? 3 : 1;
    }
    if (!status_write(rundir, name, st)) fprintf(stderr, "sdgp: sweep: cannot write %s/status.json\n", rundir);
    return result;
}

/* Prints the last lines of a file (the trainer's messages of a failed run). */
static void print_tail(const char *path, int lines) {
    char buf[8192];
    FILE *f = fopen(path, "r");
    if (!f) return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0, SEEK_SET);
    size_t end = fread(buf, 1, sizeof buf - 1, f), start;
    fclose(f);
    while (end && buf[end - 1] == '\n') end--;
    buf[end] = '\0';
    int k = 0;
    for (start = end; start > 0 && !(buf[start - 1] == '\n' && ++k == lines);) start--;
    for (char *l = strtok(buf + start, "\n"); l; l = strtok(NULL, "\n")) fprintf(stderr, "    %s\n", l);
}

/* ---------------------------------------------------------------------------------------------
 * The command */

static int parse_sweep_args(sweep_opts *o, const char **file, int argc, char **argv) {
    memset(o, 0, sizeof *o);
    o->results = "results";
    o->checkpoint_every = 25;
    o->mpirun = "mpirun";
    *file = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x;
        if (!strcmp(a, "--")) {
            o->extra = argv + i + 1;
            o->extra_argc = argc - i - 1;
            break;
        } else if (!strcmp(a, "--dry-run")) o->dry_run = 1;
        else if (!strcmp(a, "--results") || !strcmp(a, "--only") || !strcmp(a, "--threads") ||
                 !strcmp(a, "--checkpoint-every") || !strcmp(a, "--mpi") || !strcmp(a, "--mpirun")) {
            if (!v) {
                fprintf(stderr, "sdgp: %s needs a value\n", a);
                return 0;
            }
            i++;
            if (!strcmp(a, "--results")) o->results = v;
            else if (!strcmp(a, "--only")) o->only = v;
            else if (!strcmp(a, "--mpirun")) o->mpirun = v;
            else if (!strcmp(a, "--mpi")) {
                if (!cli_parse_int(a, v, 1, 1 << 20, &x)) return 0;
                o->mpi = (int)x;
            }
            else if (!strcmp(a, "--threads")) {
                if (!cli_parse_int(a, v, 1, 1024, &x)) return 0;
                o->threads = (int)x;
            } else {
                if (!cli_parse_int(a, v, 1, 1000000000, &x)) return 0;
                o->checkpoint_every = x;
            }
        } else if (a[0] == '-') {
            fprintf(stderr, "sdgp: sweep: unknown option '%s' (see sdgp sweep --help)\n", a);
            return 0;
        } else if (*file) {
            fprintf(stderr, "sdgp: sweep: one sweep file only ('%s' and '%s')\n", *file, a);
            return 0;
        } else *file = a;
    }
    if (!*file) {
        fprintf(stderr, "sdgp: sweep needs a sweep file (see sdgp sweep --help)\n");
        return 0;
    }
    return 1;
}

/* Marks the runs named in --only; returns 0 (and says which name is unknown) on error. */
static int select_runs(const sweep_file *sf, const char *only, char *selected) {
    memset(selected, only ? 0 : 1, (size_t)sf->n);
    if (!only) return 1;
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", only);
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int i = 0; i < sf->n; i++)
            if (!strcmp(sf->runs[i].name, t)) selected[i] = found = 1;
        if (!found) {
            fprintf(stderr, "sdgp: sweep: --only: no run named '%s' in %s (runs:", t, sf->path);
            for (int i = 0; i < sf->n; i++) fprintf(stderr, " %s", sf->runs[i].name);
            fprintf(stderr, ")\n");
            return 0;
        }
    }
    return 1;
}

/* Locks DIR against a second sweep. The fd is inherited by the training children on purpose:
 * the lock lasts until the last process that may write into DIR is gone. Waits up to 10 s
 * (the children of a killed sweep take a moment to die). */
static int lock_results(const char *dir) {
    char path[PATH_MAX];
    path_join(path, sizeof path, dir, ".sweep.lock");
    int fd = open(path, O_RDWR | O_CREAT, 0644);
    if (fd < 0) {
        fprintf(stderr, "sdgp: sweep: cannot create %s: %s\n", path, strerror(errno));
        return -1;
    }
    for (int tries = 0; flock(fd, LOCK_EX | LOCK_NB) != 0; tries++) {
        if (tries == 0) fprintf(stderr, "sdgp: sweep: %s is locked by another sweep; waiting up to 10 s\n", dir);
        if (tries == 50) {
            fprintf(stderr, "sdgp: sweep: %s is in use by another sweep (lock %s)\n", dir, path);
            close(fd);
            return -1;
        }
        struct timespec ts = {0, 200000000};
        nanosleep(&ts, NULL);
    }
    return fd;
}

static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) return 0;
            *p = '/';
        }
    return mkdir(buf, 0755) == 0 || errno == EEXIST;
}

/* Decides how run r starts now, and checks that its folder was made by the same command. */
static int plan_run(const sweep_file *sf, const sweep_run *r, const sweep_opts *o, run_state *state, run_status *st) {
    char rundir[PATH_MAX], path[PATH_MAX + 32], want[16384], have[16384];
    path_join(rundir, sizeof rundir, o->dir, r->name);
    if (!status_read(rundir, st)) {
        fprintf(stderr, "sdgp: sweep: %s/status.json is malformed (delete it to start the run again)\n", rundir);
        return 0;
    }
    path_join(path, sizeof path, rundir, "checkpoint.safetensors");
    int ck = file_exists(path);
    *state = st->exists && !strcmp(st->state, "done") ? RUN_DONE : ck ? RUN_RESUME : st->exists ? RUN_RESTART : RUN_NEW;
    command c;
    command_build(&c, sf, r, o, rundir, 0);
    command_text(&c, 1, NULL, want, sizeof want);
    path_join(path, sizeof path, rundir, "command.txt");
    if ((*state != RUN_NEW || file_exists(path)) && read_small_file(path, have, sizeof have)) {
        size_t hl = strlen(have), wl = strlen(want);
        while (hl && have[hl - 1] == '\n') have[--hl] = '\0';
        const char *tail = hl >= wl ? have + hl - wl : "";
        if (strcmp(tail, want) || (hl > wl && have[hl - wl - 1] != ' ')) {
            fprintf(stderr,
                    "sdgp: sweep: %s was made by another command:\n    had: %s\n    now: ... %s\n"
                    "  (use another --results folder, or delete %s to run it again)\n", rundir, have, want, rundir);
            return 0;
        }
    }
    return 1;
}

int sdgp_cmd_sweep(int argc, char **argv) {
    for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            sweep_usage(stdout);
            return 0;
        }
    sweep_opts o;
    const char *file;
    if (!parse_sweep_args(&o, &file, argc, argv)) return 2;
    sweep_file sf;
    int rc = sweep_file_read(&sf, file);
    char *selected = rc == 0 ? calloc((size_t)sf.n, 1) : NULL;
    run_state *states = rc == 0 ? calloc((size_t)sf.n, sizeof *states) : NULL;
    run_status *status = rc == 0 ? calloc((size_t)sf.n, sizeof *status) : NULL;
    if (rc == 0 && (!selected || !states || !status)) rc = 2;
    if (rc == 0) rc = sweep_validate(&sf, &o);
    if (rc == 0 && !select_runs(&sf, o.only, selected)) rc = 2;
    if (rc == 0 && !o.dry_run && !mkdir_p(o.results)) {
        fprintf(stderr, "sdgp: sweep: cannot create --results %s: %s\n", o.results, strerror(errno));
        rc = 2;
    }
    if (rc == 0) { /* an absolute folder: command.txt must not depend on the working directory */
        char cwd[PATH_MAX];
        if (realpath(o.results, o.dir)) {
        } else if (o.results[0] != '/' && getcwd(cwd, sizeof cwd)) {
            snprintf(o.dir, sizeof o.dir, "%.2048s/%.2000s", cwd, o.results);
        } else snprintf(o.dir, sizeof o.dir, "%s", o.results);
        if (strlen(o.dir) > PATH_MAX - 200) {
            fprintf(stderr, "sdgp: sweep: --results path too long: %s\n", o.dir);
            rc = 2;
        }
    }
    int lock = -1;
    if (rc == 0 && !o.dry_run && (lock = lock_results(o.dir)) < 0) rc = 2;
    int total = 0;
    for (int i = 0; rc == 0 && i < sf.n; i++)
        if (selected[i]) {
            total++;
            if (!plan_run(&sf, &sf.runs[i], &o, &states[i], &status[i])) rc = 2;
        }
    if (rc != 0) goto out;

    static const char *const state_names[] = {"new", "restart (no checkpoint)", "resume from checkpoint", "done"};
    if (o.dry_run) {
        int k = 0;
        for (int i = 0; i < sf.n; i++) {
            if (!selected[i]) continue;
            char rundir[PATH_MAX], text[16384];
            path_join(rundir, sizeof rundir, o.dir, sf.runs[i].name);
            command c;
            command_build(&c, &sf, &sf.runs[i], &o, rundir, states[i] == RUN_RESUME);
            command_text(&c, 0, "sdgp", text, sizeof text);
            printf("[%d/%d] %s: %s\n    %s\n", ++k, total, sf.runs[i].name, state_names[states[i]], text);
        }
        printf("sweep %s: %d runs checked, nothing run (--dry-run)\n", file, total);
        goto out;
    }

    /* SIGINT/SIGTERM/SIGHUP/SIGCHLD are blocked and taken with sigtimedwait while a run goes on:
     * a stop request ends the running child, records its time, and stops the sweep. */
    sigset_t wait_set, old_mask;
    sigemptyset(&wait_set);
    sigaddset(&wait_set, SIGINT);
    sigaddset(&wait_set, SIGTERM);
    sigaddset(&wait_set, SIGHUP);
    sigaddset(&wait_set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &wait_set, &old_mask);
    char exe[PATH_MAX];
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0) exe[el] = '\0';
    else snprintf(exe, sizeof exe, "sdgp");
    double t_sweep = cli_now();
    int k = 0, n_done_before = 0, n_done_now = 0, n_failed = 0, interrupted = 0;
    for (int i = 0; i < sf.n && !interrupted; i++) {
        if (!selected[i]) continue;
        const sweep_run *r = &sf.runs[i];
        run_status *st = &status[i];
        char rundir[PATH_MAX], label[128], path[PATH_MAX + 32], text[16384];
        path_join(rundir, sizeof rundir, o.dir, r->name);
        snprintf(label, sizeof label, "[%d/%d] %s", ++k, total, r->name);
        if (states[i] == RUN_DONE) {
            printf("%s: done already (%.0f s), skipped\n", label, st->seconds);
            n_done_before++;
            continue;
        }
        if (!mkdir_p(rundir)) {
            fprintf(stderr, "sdgp: sweep: cannot create %s: %s\n", rundir, strerror(errno));
            n_failed++;
            continue;
        }
        int resume = states[i] == RUN_RESUME;
        command c;
        command_build(&c, &sf, r, &o, rundir, 0);
        command_text(&c, 0, exe, text, sizeof text);
        path_join(path, sizeof path, rundir, "command.txt");
        size_t tl = strlen(text);
        snprintf(text + tl, sizeof text - tl, "\n");
        if (!cli_write_file_atomic(path, text)) fprintf(stderr, "sdgp: sweep: warning: cannot write %s\n", path);
        command_build(&c, &sf, r, &o, rundir, resume);
        if (resume) {
            log_trim_partial_line(c.log);
            FILE *lf = fopen(c.log, "a");
            if (lf) {
                fprintf(lf, "{\"event\":\"resume\",\"attempt\":%d,\"offset_s\":%.3f}\n", st->attempts + 1, st->seconds);
                fclose(lf);
            }
            printf("%s: resuming from its checkpoint (attempt %d, %.0f s counted so far)\n", label, st->attempts + 1,
                   st->seconds);
        } else {
            st->seconds = 0;  /* nothing of an earlier attempt survived */
            unlink(c.log);    /* (the trainer would truncate it; gone now, no stale progress lines) */
            printf("%s: starting%s\n", label, states[i] == RUN_RESTART ? " again (no checkpoint was written)" : "");
        }
        fflush(stdout);
        int res = run_attempt(&c, resume, rundir, r->name, label, st, &wait_set, &old_mask);
        if (res == 0) {
            n_done_now++;
            printf("%s: finished in %.1f s\n", label, st->seconds);
        } else if (res == 3) {
            interrupted = 1;
            printf("%s: interrupted; run the sweep again to resume\n", label);
        } else {
            n_failed++;
            fprintf(stderr, "%s: FAILED (exit %d); last lines of %s/train.out:\n", label, st->exit_code, rundir);
            path_join(path, sizeof path, rundir, "train.out");
            print_tail(path, 6);
        }
        fflush(stdout);
        struct timespec zero = {0, 0};
        int sig;
        while ((sig = sigtimedwait(&wait_set, NULL, &zero)) > 0)
            if (sig != SIGCHLD) interrupted = 1;
    }
    sigprocmask(SIG_SETMASK, &old_mask, NULL);
    int remaining = total - n_done_before - n_done_now - n_failed;
    printf("sweep %s: %d runs: %d done (%d now, %d before), %d failed, %d not run; %.0f s; results in %s\n", file, total,
           n_done_before + n_done_now, n_done_now, n_done_before, n_failed, remaining, cli_now() - t_sweep, o.dir);
    rc = n_failed || interrupted || remaining ? 1 : 0;
out:
    if (lock >= 0) close(lock);
    free(selected);
    free(states);
    free(status);
    sweep_file_free(&sf);
    return rc;
}
