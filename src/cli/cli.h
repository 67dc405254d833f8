/* The sdgp command line: subcommands and the small helpers they share. */
#ifndef SDGP_CLI_H
#define SDGP_CLI_H

#include <stdint.h>

#include "sdgp/train.h"

/* Subcommands: argv[0] is the subcommand's own name; return the process exit code
 * (0 ok, 1 runtime failure, 2 bad usage or input). Each prints its own --help. */
int sdgp_cmd_train(int argc, char **argv);
int sdgp_cmd_eval(int argc, char **argv);
int sdgp_cmd_export(int argc, char **argv);
int sdgp_cmd_bench_step(int argc, char **argv);
int sdgp_cmd_bench_layers(int argc, char **argv);
int sdgp_cmd_bench_prune(int argc, char **argv);
int sdgp_cmd_bench_conv(int argc, char **argv);
int sdgp_cmd_bench_linear(int argc, char **argv);
int sdgp_cmd_bench_impls(int argc, char **argv);
int sdgp_cmd_sweep(int argc, char **argv);
int sdgp_cmd_report(int argc, char **argv);
int sdgp_cmd_kernels(int argc, char **argv);

/* Applies `sdgp train` flags argv[1..argc) to cfg (argv[0] is the command's name). --resume's
 * argument goes to *resume (when resume is not NULL). Returns 0, or prints why and returns 2. */
int cli_apply_train_flags(sdgp_train_config *cfg, int argc, char **argv, const char **resume);
/* The value of the training configuration's field `name` (its `sdgp train` flag without "--"),
 * as `sdgp train` prints it, into out; "" when this build has no such field. *help (when not NULL):
 * the field's help text, or "". */
void cli_train_config_value(const sdgp_train_config *cfg, const char *name, char *out, size_t size, const char **help);

/* Data parallel train and eval (src/cli/dist_mpi.c): when an MPI launcher started this process, MPI is
 * initialised and the communicator of all its processes returned; otherwise (or without MPI in the
 * build) NULL. cli_dist_end(d, exit code) ends MPI: a failure aborts every rank. */
const sdgp_dist *cli_dist_start(void);
void cli_dist_end(const sdgp_dist *d, int code);

/* Monotonic wall clock in seconds. */
double cli_now(void);
/* Median of n values (sorts a copy in place of v). */
double cli_median(double *v, int n);

/* Strict number parsing for flags: the whole text must be a number in [lo, hi]; on failure
 * prints "sdgp: <flag>: <why>" to stderr and returns 0. */
int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out);
int cli_parse_float(const char *flag, const char *text, double lo, double hi, double *out);

/* A comma list of at most max items (`noun` in the message), each parsed by one(flag, token, index, ctx),
 * which prints its own message and returns 0 on a bad token. Returns the count, or 0 (message printed). */
int cli_parse_list(const char *flag, const char *text, int max, const char *noun,
                   int (*one)(const char *flag, const char *tok, int i, void *ctx), void *ctx);

/* Thread counts from a comma list such as "1,2" (at most 8 entries); returns the count or 0. */
int cli_parse_int_list(const char *flag, const char *text, long lo, long hi, long *out, int max);

/* n:m patterns from a comma list such as "2:4,1:4" (at most max); returns the count, or 0 after
 * printing "sdgp: <flag>: <why>". */
int cli_parse_nm_list(const char *flag, const char *text, int *n, int *m, int max);

/* The host for benchmark records: "AMD EPYC ... (family 26 model 2)" from /proc/cpuinfo, or
 * "unknown CPU". */
void cli_cpu_model(char *out, size_t size);

/* Names from a comma list (e.g. "pixel,auto"), each parsed by parse into vals[i] (at most max);
 * returns the count, or 0 after printing "sdgp: <flag>: <why>". */
typedef sdgp_status (*cli_name_parse_fn)(const char *name, int *out, sdgp_error *err);
int cli_parse_name_list(const char *flag, const char *text, cli_name_parse_fn parse, int max, int *vals);

/* Memory a buffer of n floats, 64-byte aligned, filled with zeros; NULL on failure. */
float *cli_alloc_floats(size_t n);
/* Writes text to path atomically (path.tmp, then rename; the temporary is removed on failure): the file
 * is either the whole text or as it was. Returns 1, or 0 on failure (errno says why). */
int cli_write_file_atomic(const char *path, const char *text);

#endif
