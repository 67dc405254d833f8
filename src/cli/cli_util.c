#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/align.h"
#include "core/clock.h"

double cli_now(void) { return sdgp_now_s(); }

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double cli_median(double *v, int n) {
    if (n <= 0) return NAN;
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int cli_parse_int(const char *flag, const char *text, long lo, long hi, long *out) {
    if (!text || !*text) {
        fprintf(stderr, "sdgp: %s needs a value\n", flag);
        return 0;
    }
    errno = 0;
    char *end;
    long v = strtol(text, &end, 10);
    if (errno || *end) {
        fprintf(stderr, "sdgp: %s: '%s' is not an integer\n", flag, text);
        return 0;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "sdgp: %s: %ld is out of range [%ld, %ld]\n", flag, v, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_float(const char *flag, const char *text, double lo, double hi, double *out) {
    if (!text || !*text) {
        fprintf(stderr, "sdgp: %s needs a value\n", flag);
        return 0;
    }
    errno = 0;
    char *end;
    double v = strtod(text, &end);
    if (errno || *end || !isfinite(v)) {
        fprintf(stderr, "sdgp: %s: '%s' is not a finite number\n", flag, text);
        return 0;
    }
    if (v < lo || v > hi) {
        fprintf(stderr, "sdgp: %s: %g is out of range [%g, %g]\n", flag, v, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}

int cli_parse_list(const char *flag, const char *text, int max, const char *noun,
                   int (*one)(const char *flag, const char *tok, int i, void *ctx), void *ctx) {
    if (!text || !*text) {
        fprintf(stderr, "sdgp: %s needs a value\n", flag);
        return 0;
    }
    char buf[256];
    if (strlen(text) >= sizeof buf) {
        fprintf(stderr, "sdgp: %s: list too long\n", flag);
        return 0;
    }
    strcpy(buf, text);
    int count = 0;
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (count == max) {
            fprintf(stderr, "sdgp: %s: at most %d %s\n", flag, max, noun);
            return 0;
        }
        if (!one(flag, tok, count, ctx)) return 0;
        count++;
    }
    if (count == 0) fprintf(stderr, "sdgp: %s: empty list\n", flag);
    return count;
}

typedef struct {
    long lo, hi, *out;
} int_list;
static int one_int(const char *flag, const char *tok, int i, void *ctx) {
    const int_list *l = ctx;
    return cli_parse_int(flag, tok, l->lo, l->hi, &l->out[i]);
}

int cli_parse_int_list(const char *flag, const char *text, long lo, long hi, long *out, int max) {
    int_list l = {lo, hi, out};
    return cli_parse_list(flag, text, max, "entries", one_int, &l);
}

typedef struct {
    int *n, *m;
} nm_list;
static int one_nm(const char *flag, const char *tok, int i, void *ctx) {
    const nm_list *l = ctx;
    sdgp_error e;
    if (sdgp_nm_parse(tok, &l->n[i], &l->m[i], &e) == SDGP_OK) return 1;
    fprintf(stderr, "sdgp: %s: %s\n", flag, e.msg);
    return 0;
}

int cli_parse_nm_list(const char *flag, const char *text, int *n, int *m, int max) {
    nm_list l = {n, m};
    return cli_parse_list(flag, text, max, "patterns", one_nm, &l);
}

typedef struct {
    cli_name_parse_fn parse;
    int *vals;
} name_list;
static int one_name(const char *flag, const char *tok, int i, void *ctx) {
    const name_list *l = ctx;
    sdgp_error e;
    if (l->parse(tok, &l->vals[i], &e) == SDGP_OK) return 1;
    fprintf(stderr, "sdgp: %s: %s\n", flag, e.msg);
    return 0;
}

int cli_parse_name_list(const char *flag, const char *text, cli_name_parse_fn parse, int max, int *vals) {
    name_list l = {parse, vals};
    return cli_parse_list(flag, text, max, "values", one_name, &l);
}

float *cli_alloc_floats(size_t n) {
    void *p = NULL;
    size_t bytes = sdgp_align64((n ? n : 1) * sizeof(float));
    if (posix_memalign(&p, 64, bytes)) return NULL;
    memset(p, 0, bytes);
    return p;
}

int cli_write_file_atomic(const char *path, const char *text) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s.tmp", path) >= (int)sizeof tmp) return 0;
    FILE *f = fopen(tmp, "w");
    if (!f) return 0;
    int ok = fputs(text, f) >= 0;
    ok = (fclose(f) == 0) && ok;
    if (ok && rename(tmp, path) == 0) return 1;
    remove(tmp); /* nothing half-written stays behind */
    return 0;
}

/* "AMD EPYC ... (family 26 model 2)" from /proc/cpuinfo, or "unknown CPU". */
void cli_cpu_model(char *out, size_t size) {
    char line[256], name[128] = "unknown CPU", fam[16] = "?", model[16] = "?";
    FILE *f = fopen("/proc/cpuinfo", "r");
    int seen = 0;
    while (f && seen < 3 && fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *val = colon + 1 + (colon[1] == ' ');
        val[strcspn(val, "\n")] = 0;
        if (!strncmp(line, "model name", 10)) snprintf(name, sizeof name, "%s", val), seen++;
        else if (!strncmp(line, "cpu family", 10)) snprintf(fam, sizeof fam, "%s", val), seen++;
        else if (!strncmp(line, "model\t", 6)) snprintf(model, sizeof model, "%s", val), seen++;
    }
    if (f) fclose(f);
    snprintf(out, size, "%s (family %s model %s)", name, fam, model);
}
