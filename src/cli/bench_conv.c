/* Placeholder until the benchmark lands (being written now). */
#include <stdio.h>
#include "cli/cli.h"
int sdgp_cmd_bench_conv(int argc, char **argv) {
    (void)argc; (void)argv;
    fprintf(stderr, "sdgp: bench conv is not built yet\n");
    return 1;
}
