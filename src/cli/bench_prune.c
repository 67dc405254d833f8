/* sdgp bench prune: N:M prune + compress throughput against a plain copy of the same tensor.
 *
 * The tensor is a ResNet-9 gradient (64 x 16 x 16 x 256 floats, normal random; --shape for
 * another, e.g. one sample that stays in L2). Throughput is bytes of the dense input / median
 * time; the copy (same threads, separate buffer) is measured in the same run, interleaved with
 * the pruning, so the ratio is robust to a busy machine. ns/float is the fastest repeat per input
 * float (the compute cost when the tensor is cache resident). */
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/philox.h"
#include "sdgp/prune.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: sdgp bench prune [options]\n\n"
            "N:M prune + compress throughput (GB/s of the dense input) next to a plain copy.\n"
            "Tensor: 64 x 16 x 16 x 256 floats (a ResNet-9 gradient), normal random.\n"
            "ns/float: the fastest repeat per input float (try --shape 1,256,256: one sample in L2).\n"
            "kernel: what ran (sdgp_prune_kernel): the ISA's vector kernels, or ref where they do not take the\n"
            "shape (e.g. mvue 3:4, random or mvue with m > 32).\n\n"
            "options:\n"
            "  --threads LIST   thread counts, e.g. 1,2 (default 1,2)\n"
            "  --repeat N       timed repetitions, median reported (default 15)\n"
            "  --fn NAME        only this function: random, magnitude, rescaled, mvue, mvue-approx\n"
            "  --nm N:M         only this N:M (default 2:4, 1:4, 2:8, 4:32)\n"
            "  --shape B,P,C    tensor shape (default 64,256,256)\n"
            "  --axis NAME      channel (default) or row\n"
            "  --scope NAME     rescaled scope: sample-channel (default) or channel\n"
            "  --dense          also write the dense pruned tensor (default: compressed only)\n"
            "  --isa NAME       auto (default), ref, avx2, avx512\n"
            "  --json           one JSON object per line instead of a table\n"
            "  --help           this text\n");
}

/* The copy the pruning is compared with: the same bytes, the same team, a separate buffer. */
static void parallel_copy(float *dst, const float *src, size_t count, int threads) {
#pragma omp parallel num_threads(threads)
    {
        int t = omp_get_thread_num(), T = omp_get_num_threads();
        size_t a = count * (size_t)t / (size_t)T, b = count * (size_t)(t + 1) / (size_t)T;
        memcpy(dst + a, src + a, (b - a) * sizeof *dst);
    }
}

static void fill_normal(float *x, size_t count) {
    sdgp_philox_key key = sdgp_philox_make_key(2024, 0, 0);
    for (size_t i = 0; i < count; i += 2) {
        sdgp_philox_ctr w = sdgp_philox_draw(key, i, 0);
        double u1 = (sdgp_u01d(w.v[0]) + 0x1p-33), u2 = sdgp_u01d(w.v[1]);
        double r = sqrt(-2.0 * log(u1));
        x[i] = (float)(r * cos(6.283185307179586 * u2));
        if (i + 1 < count) x[i + 1] = (float)(r * sin(6.283185307179586 * u2));
    }
}

/* Value of a flag given as "--flag VALUE" or "--flag=VALUE"; NULL when argv[*i] is another flag. */
static const char *flag_value(int argc, char **argv, int *i, const char *flag, int *missing) {
    size_t len = strlen(flag);
    if (strncmp(argv[*i], flag, len) != 0) return NULL;
    if (argv[*i][len] == '=') return argv[*i] + len + 1;
    if (argv[*i][len] != '\0') return NULL;
    if (*i + 1 >= argc) {
        fprintf(stderr, "sdgp: %s needs a value\n", flag);
        *missing = 1;
        return NULL;
    }
    return argv[++*i];
}

int sdgp_cmd_bench_prune(int argc, char **argv) {
    long threads[8] = {1, 2}, repeat = 15, shape[3] = {64, 16 * 16, 256};
    int nthreads = 2, json = 0, dense = 0, only_fn = -1, only_n = 0, only_m = 0;
    sdgp_axis axis = SDGP_AXIS_CHANNEL;
    sdgp_rescale_scope scope = SDGP_SCOPE_SAMPLE_CHANNEL;
    sdgp_isa isa = SDGP_ISA_AUTO;
    sdgp_error err;
    for (int i = 1; i < argc; i++) {
        const char *v;
        int missing = 0;
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--dense") == 0) {
            dense = 1;
        } else if ((v = flag_value(argc, argv, &i, "--threads", &missing))) {
            if (!(nthreads = cli_parse_int_list("--threads", v, 1, 1024, threads, 8))) return 2;
        } else if ((v = flag_value(argc, argv, &i, "--shape", &missing))) {
            if (cli_parse_int_list("--shape", v, 1, 1 << 20, shape, 3) != 3 || shape[0] * shape[1] * shape[2] > (1l << 30)) {
                fprintf(stderr, "sdgp: --shape: expected three sizes B,P,C of at most 2^30 floats in all\n");
                return 2;
            }
        } else if ((v = flag_value(argc, argv, &i, "--repeat", &missing))) {
            if (!cli_parse_int("--repeat", v, 1, 100000, &repeat)) return 2;
        } else if ((v = flag_value(argc, argv, &i, "--fn", &missing))) {
            sdgp_prune_fn fn;
            if (sdgp_prune_fn_parse(v, &fn, &err)) {
                fprintf(stderr, "sdgp: --fn: %s\n", err.msg);
                return 2;
            }
            if (fn == SDGP_PRUNE_NONE) {
                fprintf(stderr, "sdgp: --fn: 'none' is the copy itself; pick a pruning function\n");
                return 2;
            }
            only_fn = fn;
        } else if ((v = flag_value(argc, argv, &i, "--nm", &missing))) {
            if (sdgp_nm_parse(v, &only_n, &only_m, &err)) {
                fprintf(stderr, "sdgp: --nm: %s\n", err.msg);
                return 2;
            }
        } else if ((v = flag_value(argc, argv, &i, "--axis", &missing))) {
            if (strcmp(v, "channel") && strcmp(v, "row")) {
                fprintf(stderr, "sdgp: --axis: '%s' is not channel or row\n", v);
                return 2;
            }
            axis = strcmp(v, "row") == 0 ? SDGP_AXIS_ROW : SDGP_AXIS_CHANNEL;
        } else if ((v = flag_value(argc, argv, &i, "--scope", &missing))) {
            if (strcmp(v, "sample-channel") && strcmp(v, "channel")) {
                fprintf(stderr, "sdgp: --scope: '%s' is not sample-channel or channel\n", v);
                return 2;
            }
            scope = strcmp(v, "channel") == 0 ? SDGP_SCOPE_CHANNEL : SDGP_SCOPE_SAMPLE_CHANNEL;
        } else if ((v = flag_value(argc, argv, &i, "--isa", &missing))) {
            if (sdgp_isa_parse(v, &isa, &err)) {
                fprintf(stderr, "sdgp: --isa: %s\n", err.msg);
                return 2;
            }
        } else {
            if (!missing) fprintf(stderr, "sdgp: bench prune: unknown option '%s' (see sdgp bench prune --help)\n", argv[i]);
            return 2;
        }
        if (missing) return 2;
    }
    sdgp_isa resolved;
    if (sdgp_isa_resolve(isa, &resolved, &err)) {
        fprintf(stderr, "sdgp: --isa: %s\n", err.msg);
        return 2;
    }

    const int64_t B = shape[0], P = shape[1], C = shape[2];
    const size_t count = (size_t)(B * P * C), bytes = count * sizeof(float);
    float *x = cli_alloc_floats(count), *copy = cli_alloc_floats(count), *out = dense ? cli_alloc_floats(count) : NULL;
    double *t_prune = malloc((size_t)repeat * sizeof(double)), *t_copy = malloc((size_t)repeat * sizeof(double));
    if (!x || !copy || (dense && !out) || !t_prune || !t_copy) {
        fprintf(stderr, "sdgp: bench prune: out of memory\n");
        return 1;
    }
    fill_normal(x, count);
    const int nms[][2] = {{2, 4}, {1, 4}, {2, 8}, {4, 32}};
    const sdgp_prune_fn fns[] = {SDGP_PRUNE_RANDOM, SDGP_PRUNE_MAGNITUDE, SDGP_PRUNE_RESCALED, SDGP_PRUNE_MVUE, SDGP_PRUNE_MVUE_APPROX};
    int rc = 0;
    if (!json)
        printf("# %lld x %lld x %lld floats (%.1f MB), axis %s, %s output, isa %s, median of %ld\n"
               "# GB/s = dense input bytes / median time; best = the same with the fastest repeat\n"
               "%-12s %-5s %7s %9s %9s %7s %10s %9s %7s %8s  %s\n",
               (long long)B, (long long)P, (long long)C, bytes / 1e6, axis == SDGP_AXIS_ROW ? "row" : "channel",
               dense ? "compressed + dense" : "compressed", sdgp_isa_name(resolved), repeat, "fn", "nm", "threads", "GB/s", "copy GB/s",
               "ratio", "best GB/s", "best copy", "ratio", "ns/float", "kernel");
    for (int ni = 0; ni < (only_n ? 1 : 4); ni++) {
        int n = only_n ? only_n : nms[ni][0], m = only_n ? only_m : nms[ni][1];
        sdgp_nm_tensor nm;
        if (sdgp_nm_alloc(&nm, axis, n, m, B * P, C, &err)) {
            fprintf(stderr, "sdgp: --nm: %s\n", err.msg);
            rc = 2;
            break;
        }
        for (int fi = 0; fi < 5; fi++) {
            if (only_fn >= 0 && fns[fi] != (sdgp_prune_fn)only_fn) continue;
            sdgp_prune_cfg cfg = sdgp_prune_cfg_make(fns[fi], n, m);
            cfg.axis = axis;
            cfg.scope = scope;
            cfg.isa = resolved;
            cfg.seed = 1;
            if (sdgp_prune_check(&cfg, B, P, C, &err) == SDGP_ERR_UNSUPPORTED) { /* mvue-approx off 2:4 */
                if (only_fn >= 0 && only_n) { /* the only case asked for cannot run */
                    fprintf(stderr, "sdgp: bench prune: %s\n", err.msg);
                    rc = 2;
                }
                continue;
            }
            for (int ti = 0; ti < nthreads; ti++) {
                cfg.threads = (int)threads[ti];
                /* warm up both (page faults, OpenMP team), then interleave the timings */
                parallel_copy(copy, x, count, cfg.threads);
                if (sdgp_prune(&cfg, x, B, P, C, out, &nm, &err)) {
                    fprintf(stderr, "sdgp: bench prune %s %d:%d: %s\n", sdgp_prune_fn_name(cfg.fn), n, m, err.msg);
                    rc = 1;
                    continue;
                }
                for (long r = 0; r < repeat; r++) {
                    cfg.step = (uint64_t)r;
                    double t0 = cli_now();
                    sdgp_prune(&cfg, x, B, P, C, out, &nm, NULL);
                    double t1 = cli_now();
                    parallel_copy(copy, x, count, cfg.threads);
                    double t2 = cli_now();
                    t_prune[r] = t1 - t0;
                    t_copy[r] = t2 - t1;
                }
                /* cli_median sorts, so the minimum is then element 0 */
                double gbps = bytes / cli_median(t_prune, (int)repeat) / 1e9, copy_gbps = bytes / cli_median(t_copy, (int)repeat) / 1e9;
                double best = bytes / t_prune[0] / 1e9, best_copy = bytes / t_copy[0] / 1e9, ns = t_prune[0] * 1e9 / (double)count;
                if (json)
                    printf("{\"fn\":\"%s\",\"nm\":\"%d:%d\",\"axis\":\"%s\",\"threads\":%d,\"isa\":\"%s\",\"kernel\":\"%s\",\"dense\":%s,\"gbps\":%.3f,"
                           "\"copy_gbps\":%.3f,\"ratio\":%.3f,\"best_gbps\":%.3f,\"best_copy_gbps\":%.3f,\"best_ratio\":%.3f,\"ns_per_float\":%.4f}\n",
                           sdgp_prune_fn_name(cfg.fn), n, m, axis == SDGP_AXIS_ROW ? "row" : "channel", cfg.threads, sdgp_isa_name(resolved),
                           sdgp_prune_kernel(&cfg), dense ? "true" : "false", gbps, copy_gbps, gbps / copy_gbps, best, best_copy, best / best_copy, ns);
                else
                    printf("%-12s %2d:%-2d %7d %9.2f %9.2f %7.2f %10.2f %9.2f %7.2f %8.3f  %s\n", sdgp_prune_fn_name(cfg.fn), n, m, cfg.threads,
                           gbps, copy_gbps, gbps / copy_gbps, best, best_copy, best / best_copy, ns, sdgp_prune_kernel(&cfg));
                fflush(stdout);
            }
        }
        sdgp_nm_free(&nm);
    }
    free(x);
    free(copy);
    free(out);
    free(t_prune);
    free(t_copy);
    return rc;
}
