/* sdgp report: a small JSON reader for the files it reads (run logs, status.json, the JSON lines of
 * `sdgp bench layers|step --json`). It validates a whole line and returns the top-level fields of
 * an object. Private to the command line; declared in cli/report.h. */
#define _POSIX_C_SOURCE 200809L /* getline */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "cli/report.h"

const char *rp_j_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
    return p;
}

static const char *j_string(const char *p) { /* p at the opening quote; returns past the closing one */
    for (p++; *p != '"'; p++) {
        if ((unsigned char)*p < 0x20) return NULL; /* also the end of the text */
        if (*p == '\\' && !*++p) return NULL;
    }
    return p + 1;
}

static const char *j_number(const char *p) {
    const char *q = *p == '-' ? p + 1 : p;
    if (!strncmp(q, "nan", 3) || !strncmp(q, "inf", 3)) return q + 3; /* printf's non-finite values */
    if (*q < '0' || *q > '9') return NULL;
    char *end;
    strtod(p, &end);
    return end;
}

static const char *j_value(const char *p, int depth) {
    p = rp_j_ws(p);
    if (depth > 16) return NULL;
    if (*p == '"') return j_string(p);
    if (!strncmp(p, "true", 4)) return p + 4;
    if (!strncmp(p, "false", 5)) return p + 5;
    if (!strncmp(p, "null", 4)) return p + 4;
    if (*p != '{' && *p != '[') return j_number(p);
    char close = *p == '{' ? '}' : ']';
    p = rp_j_ws(p + 1);
    if (*p == close) return p + 1;
    for (;;) {
        if (close == '}') {
            if (*p != '"' || !(p = j_string(p))) return NULL;
            p = rp_j_ws(p);
            if (*p++ != ':') return NULL;
        }
        if (!(p = j_value(p, depth + 1))) return NULL;
        p = rp_j_ws(p);
        if (*p != ',') return *p == close ? p + 1 : NULL;
        p = rp_j_ws(p + 1);
    }
}

/* Parses the object at p into f (up to RP_J_MAX_FIELDS fields); *end is set past it. -1 if malformed. */
int rp_j_object(const char *p, rp_jfield *f, const char **end) {
    p = rp_j_ws(p);
    if (*p != '{') return -1;
    const char *e = j_value(p, 0);
    if (!e) return -1;
    *end = e;
    int n = 0;
    p = rp_j_ws(p + 1);
    while (*p == '"') {
        const char *k = p + 1, *ke = j_string(p);
        p = rp_j_ws(ke) + 1; /* past ':' (validated above) */
        const char *v = rp_j_ws(p), *ve = j_value(v, 1);
        if (n < RP_J_MAX_FIELDS) f[n++] = (rp_jfield){k, v, (int)(ke - 1 - k), (int)(ve - v)};
        p = rp_j_ws(ve);
        if (*p == ',') p = rp_j_ws(p + 1);
    }
    return n;
}

const rp_jfield *rp_j_get(const rp_jfield *f, int n, const char *key) {
    for (int i = 0; i < n; i++)
        if (f[i].klen == (int)strlen(key) && !strncmp(f[i].key, key, (size_t)f[i].klen)) return &f[i];
    return NULL;
}

int rp_j_num(const rp_jfield *f, int n, const char *key, double *out) {
    const rp_jfield *x = rp_j_get(f, n, key);
    if (!x || x->val[0] == '"' || x->val[0] == '{' || x->val[0] == '[') return 0;
    const char *q = x->val[0] == '-' ? x->val + 1 : x->val;
    if (!strncmp(q, "nan", 3)) *out = NAN;
    else if (!strncmp(q, "inf", 3)) *out = x->val[0] == '-' ? -INFINITY : INFINITY;
    else *out = strtod(x->val, NULL);
    return 1;
}

int rp_j_true(const rp_jfield *f, int n, const char *key) {
    const rp_jfield *x = rp_j_get(f, n, key);
    return x && x->vlen == 4 && !strncmp(x->val, "true", 4);
}

int rp_j_str(const rp_jfield *f, int n, const char *key, char *buf, size_t size) {
    const rp_jfield *x = rp_j_get(f, n, key);
    if (!x || x->val[0] != '"') return 0;
    snprintf(buf, size, "%.*s", x->vlen - 2, x->val + 1);
    return 1;
}

int rp_read_json_lines(const char *path, rp_line_fn fn, void *ctx) {
    FILE *fp = fopen(path, "r");
    if (!fp) {
        fprintf(stderr, "sdgp: report: %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int lineno = 0, rc = 0;
    while (rc == 0 && (len = getline(&line, &cap, fp)) >= 0) {
        lineno++;
        const char *p = rp_j_ws(line), *end;
        if (!*p) continue;
        rp_jfield f[RP_J_MAX_FIELDS];
        char why[256] = "";
        int n = rp_j_object(p, f, &end);
        if (n < 0 || *rp_j_ws(end)) {
            if (line[len - 1] != '\n') {
                fprintf(stderr, "sdgp: report: note: %s:%d: incomplete last line skipped (still being written?)\n", path,
                        lineno);
                break;
            }
            snprintf(why, sizeof why, "not a JSON object");
        } else if (fn(ctx, f, n, line, why, sizeof why) == 0) continue;
        fprintf(stderr, "sdgp: report: %s:%d: malformed line (%s): %.120s%s", path, lineno, why, line,
                line[len - 1] == '\n' ? "" : "\n");
        rc = 2;
    }
    if (rc == 0 && ferror(fp)) {
        fprintf(stderr, "sdgp: report: %s: read error\n", path);
        rc = 2;
    }
    free(line);
    fclose(fp);
    return rc;
}
