/* sdgp sweep: the sweep file and the options, shared by sweep.c (running) and sweep_file.c
 * (parsing and checking the file). */
#ifndef SDGP_CLI_SWEEP_INTERNAL_H
#define SDGP_CLI_SWEEP_INTERNAL_H

#include <limits.h>

#define MAX_TOKENS 256

typedef struct {
    char name[64];
    int line;
    int n_defaults; /* how many of the sweep's default flags were in force at this line */
    int argc;
    char **argv;    /* the run's own flags */
} sweep_run;

typedef struct {
    const char *path;
    sweep_run *runs;
    int n, cap;
    char **defaults; /* all defaults lines' flags in order */
    int n_defaults, cap_defaults;
} sweep_file;

typedef struct {
    const char *results;
    char dir[PATH_MAX]; /* absolute results folder */
    int dry_run, threads;
    int mpi;              /* > 0: each run under `MPIRUN -np mpi` (data parallel) */
    const char *mpirun;   /* the launcher's words, split at spaces */
    long checkpoint_every;
    const char *only;
    int extra_argc;
    char **extra;      /* flags after `--`: applied to every run last */
} sweep_opts;

/* Reads path into sf: runs, defaults, the lines they come from. Prints FILE:LINE: why; returns 0
 * or 2. */
int sweep_file_read(sweep_file *sf, const char *path);
void sweep_file_free(sweep_file *sf);
/* Checks every line's flags before anything runs. Prints FILE:LINE: why; returns 0 or 2. */
int sweep_validate(const sweep_file *sf, const sweep_opts *o);

#endif
