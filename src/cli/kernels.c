/* sdgp kernels: the implementation lists the model chooses each conv pass's product from, with
 * the ISA path and the blocking each takes on this host (sdgp_impl_describe). */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "sdgp/model.h"

static void help(FILE *f) {
    fprintf(f, "usage: sdgp kernels [--json] [--threads N]\n\n"
               "Lists every conv pass's implementations in order of preference (the tuner times those a layer\n"
               "allows and keeps the fastest), with the ISA path each takes on this host (SDGP_ISA, and\n"
               "DNNL_MAX_CPU_ISA for oneDNN's, change it) and its blocking for a probe layer (3x3, 64 -> 64\n"
               "channels, 8 images of 16x16, 2:4), derived from the detected caches (SDGP_L1D_KB, SDGP_L2_KB\n"
               "override them).\n"
               "  --json       one JSON object per implementation: pass, name, code, sparse, isa, blocking\n"
               "  --threads N  the plans' thread count (the blocking's work units depend on it) [2]\n");
}

int sdgp_cmd_kernels(int argc, char **argv) {
    int json = 0;
    long threads = 2;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) {
            json = 1;
        } else if (!strcmp(argv[i], "--threads") && i + 1 < argc) {
            if (!cli_parse_int("--threads", argv[++i], 1, 1024, &threads)) return 2;
        } else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            help(stdout);
            return 0;
        } else {
            fprintf(stderr, "sdgp kernels: unknown option '%s'%s\n", argv[i],
                    !strcmp(argv[i], "--threads") ? " (it takes a value)" : "");
            help(stderr);
            return 2;
        }
    }
    if (!json) printf("%-12s %-24s %-4s %-20s %s\n", "pass", "name", "code", "isa", "blocking (probe layer)");
    for (int i = 0; i < sdgp_impl_count(); i++) {
        sdgp_impl_info d;
        sdgp_error err;
        if (sdgp_impl_describe(i, (int)threads, &d, &err) != SDGP_OK) {
            fprintf(stderr, "sdgp kernels: %s\n", err.msg);
            return 1;
        }
        if (json) /* the names and texts are the library's own: no characters to escape */
            printf("{\"pass\": \"%s\", \"name\": \"%s\", \"code\": \"%c\", \"sparse\": %d, \"isa\": \"%s\", \"blocking\": \"%s\"}\n",
                   d.pass, d.name, d.code, d.sparse, d.isa, d.blocking);
        else
            printf("%-12s %-24s %-4c %-20s %s\n", d.pass, d.name, d.code, d.isa, d.blocking);
    }
    return 0;
}
