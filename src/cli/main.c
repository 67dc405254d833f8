/* sdgp: the command line. Dispatches to one subcommand per file in src/cli/. */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "sdgp/isa.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command bench_commands[] = {
    {"prune", sdgp_cmd_bench_prune, "N:M pruning + compression throughput against a plain copy"},
    {"conv", sdgp_cmd_bench_conv, "sparse backward-data convolution against oneDNN dense"},
    {"linear", sdgp_cmd_bench_linear, "a linear layer's three N:M products against oneDNN's matmul and 1x1 conv"},
    {"step", sdgp_cmd_bench_step, "one training step, ours (dense and SDGP) against PyTorch"},
    {"layers", sdgp_cmd_bench_layers, "per-layer conv times: forward, backward-data dense/sparse, backward-weights"},
    {"impls", sdgp_cmd_bench_impls, "every implementation of every conv pass on a model's layers against oneDNN"},
};

static const command top_commands[] = {
    {"train", sdgp_cmd_train, "train a model (default: ResNet-9 w=0.25 on Fashion-MNIST)"},
    {"eval", sdgp_cmd_eval, "evaluate a checkpoint on the test split"},
    {"export", sdgp_cmd_export, "a checkpoint's forward weights as a PyTorch state_dict (sparse weights as W~)"},
    {"sweep", sdgp_cmd_sweep, "run a sweep file's trainings, resumable (sdgp sweep --help)"},
    {"report", sdgp_cmd_report, "tables and figures of a sweep's results folder"},
    {"kernels", sdgp_cmd_kernels, "every conv pass's implementations on this host: ISA paths, blocking"},
    {"bench", NULL, "benchmarks (sdgp bench --help)"},
};

#define COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdgp <command> [options]\n"
            "       sdgp --help | --version\n\n"
            "Trains convolutional networks on CPUs with N:M structured sparse gradients.\n\ncommands:\n");
    for (int i = 0; i < COUNT(top_commands); i++) fprintf(f, "  %-8s %s\n", top_commands[i].name, top_commands[i].summary);
    fprintf(f, "\nbench subcommands:\n");
    for (int i = 0; i < COUNT(bench_commands); i++)
        fprintf(f, "  bench %-7s %s\n", bench_commands[i].name, bench_commands[i].summary);
    fprintf(f,
            "\nenvironment: SDGP_ISA=ref|avx2|avx512 lowers sdgp's kernel path (default: best the CPU has, here %s)\n"
            "             DNNL_MAX_CPU_ISA=AVX2|... lowers oneDNN's (here it runs %s); `sdgp train` and `sdgp bench\n"
            "             step` print both\n"
            "             SDGP_WINOGRAD=sdgp|onednn puts sdgp's Winograd convolutions first, or leaves them out\n"
            "             (default: oneDNN's where it has one, AVX-512 CPUs; sdgp's elsewhere)\n",
            sdgp_isa_name(sdgp_isa_best()), sdgp_conv_onednn_isa());
}

static int run_from(const command *table, int count, const char *group, int argc, char **argv) {
    for (int i = 0; i < count; i++)
        if (strcmp(argv[0], table[i].name) == 0) return table[i].run(argc, argv);
    fprintf(stderr, "sdgp: unknown %scommand '%s' (see sdgp --help)\n", group, argv[0]);
    return 2;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0) {
        printf("sdgp %s\n", SDGP_VERSION_STRING);
        return 0;
    }
    if (strcmp(cmd, "bench") == 0) {
        if (argc < 3 || strcmp(argv[2], "--help") == 0) {
            usage(argc < 3 ? stderr : stdout);
            return argc < 3 ? 2 : 0;
        }
        return run_from(bench_commands, COUNT(bench_commands), "bench sub", argc - 2, argv + 2);
    }
    return run_from(top_commands, COUNT(top_commands) - 1, "", argc - 1, argv + 1);
}
