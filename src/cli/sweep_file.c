/* sdgp sweep: parsing and checking the sweep file (format: src/cli/sweep.c). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/sweep_internal.h"

static char *dup_range(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int tokenize_fail(char **tok, int n, const char **why, const char *what) {
    for (int i = 0; i < n; i++) free(tok[i]);
    *why = what;
    return -1;
}

/* Splits line into tokens (whitespace; '...' or "..." quote; # outside quotes starts a comment).
 * Returns the count, or -1 with *why set. Tokens are malloc'd. */
static int tokenize(const char *line, char **tok, int max, const char **why) {
    int n = 0;
    const char *p = line;
    for (;;) {
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') p++;
        if (!*p || *p == '#') return n;
        if (n == max) return tokenize_fail(tok, n, why, "too many words on one line");
        char buf[2048];
        size_t len = 0;
        while (*p && *p != ' ' && *p != '\t' && *p != '\r' && *p != '\n') {
            if (*p == '\'' || *p == '"') {
                char q = *p++;
                while (*p && *p != q) {
                    if (len + 1 < sizeof buf) buf[len++] = *p;
                    p++;
                }
                if (*p != q) return tokenize_fail(tok, n, why, "unterminated quote");
                p++;
            } else {
                if (len + 1 < sizeof buf) buf[len++] = *p;
                p++;
            }
        }
        if (len + 1 >= sizeof buf) return tokenize_fail(tok, n, why, "a word longer than 2047 characters");
        if (!(tok[n] = dup_range(buf, len))) return tokenize_fail(tok, n, why, "out of memory");
        n++;
    }
}

static int valid_name(const char *s) {
    if (!*s || *s == '.' || *s == '-' || strlen(s) >= 64) return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') || strchr("._:+-=", *s)))
            return 0;
    return 1;
}

void sweep_file_free(sweep_file *sf) {
    for (int i = 0; i < sf->n; i++) {
        for (int j = 0; j < sf->runs[i].argc; j++) free(sf->runs[i].argv[j]);
        free(sf->runs[i].argv);
    }
    for (int j = 0; j < sf->n_defaults; j++) free(sf->defaults[j]);
    free(sf->runs);
    free(sf->defaults);
}

static int grow(void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return 1;
    int c = *cap ? *cap * 2 : 16;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return 0;
    *p = q;
    *cap = c;
    return 1;
}

/* Reads the file's lines into sf. Returns 0, or prints "FILE:LINE: why" and returns 2. */
int sweep_file_read(sweep_file *sf, const char *path) {
    memset(sf, 0, sizeof *sf);
    sf->path = path;
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "sdgp: sweep file %s: %s\n", path, strerror(errno));
        return 2;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0, rc = 0;
    char *tok[MAX_TOKENS];
    while (rc == 0 && getline(&line, &cap, f) >= 0) {
        lineno++;
        const char *why = NULL;
        int n = tokenize(line, tok, MAX_TOKENS, &why);
        if (n < 0) {
            fprintf(stderr, "%s:%d: %s\n", path, lineno, why);
            rc = 2;
            break;
        }
        if (n == 0) continue;
        if (!strcmp(tok[0], "defaults")) {
            if (!grow((void **)&sf->defaults, &sf->cap_defaults, sf->n_defaults + n - 1, sizeof(char *))) rc = 2;
            for (int j = 1; j < n; j++) {
                if (rc == 0) sf->defaults[sf->n_defaults++] = tok[j];
                else free(tok[j]);
            }
            free(tok[0]);
            continue;
        }
        if (!valid_name(tok[0])) {
            fprintf(stderr, "%s:%d: '%s' is not a run name (letters, digits and ._:+-= only, not starting with . or -,"
                    " under 64 characters)\n", path, lineno, tok[0]);
            rc = 2;
        }
        for (int i = 0; rc == 0 && i < sf->n; i++)
            if (!strcmp(sf->runs[i].name, tok[0])) {
                fprintf(stderr, "%s:%d: run name '%s' already used on line %d\n", path, lineno, tok[0], sf->runs[i].line);
                rc = 2;
            }
        if (rc == 0 && !grow((void **)&sf->runs, &sf->cap, sf->n + 1, sizeof(sweep_run))) rc = 2;
        if (rc != 0) {
            for (int j = 0; j < n; j++) free(tok[j]);
            break;
        }
        sweep_run *r = &sf->runs[sf->n++];
        memset(r, 0, sizeof *r);
        snprintf(r->name, sizeof r->name, "%s", tok[0]);
        free(tok[0]);
        r->line = lineno;
        r->n_defaults = sf->n_defaults;
        r->argc = n - 1;
        r->argv = malloc((size_t)(n > 1 ? n - 1 : 1) * sizeof(char *));
        if (!r->argv) {
            r->argc = 0;
            for (int j = 1; j < n; j++) free(tok[j]);
            rc = 2;
            break;
        }
        for (int j = 1; j < n; j++) r->argv[j - 1] = tok[j];
    }
    free(line);
    if (rc == 0 && ferror(f)) {
        fprintf(stderr, "sdgp: sweep file %s: read error\n", path);
        rc = 2;
    }
    fclose(f);
    if (rc == 0 && sf->n == 0) {
        fprintf(stderr, "%s: no runs (one run per line: NAME then `sdgp train` flags)\n", path);
        rc = 2;
    }
    return rc;
}

/* Applies flags like cli_apply_train_flags but returns its message in msg instead of printing it
 * (so that the caller can put FILE:LINE in front). Returns 0 or 2. */
static int apply_flags(sdgp_train_config *cfg, int argc, char **argv, char *msg, size_t size) {
    msg[0] = '\0';
    char *av[MAX_TOKENS + 1];
    if (argc > MAX_TOKENS) {
        snprintf(msg, size, "too many flags");
        return 2;
    }
    av[0] = "train";
    for (int i = 0; i < argc; i++) {
        av[i + 1] = argv[i];
        if (!strcmp(argv[i], "--log") || !strcmp(argv[i], "--checkpoint") || !strcmp(argv[i], "--resume")) {
            snprintf(msg, size, "%s is set by the sweep (each run writes into its own folder)", argv[i]);
            return 2;
        }
    }
    FILE *tmp = tmpfile();
    int saved = tmp ? dup(2) : -1;
    if (saved >= 0) {
        fflush(stderr);
        dup2(fileno(tmp), 2);
    }
    int rc = cli_apply_train_flags(cfg, argc + 1, av, NULL);
    if (saved >= 0) {
        fflush(stderr);
        dup2(saved, 2);
        close(saved);
        rewind(tmp);
        size_t got = fread(msg, 1, size - 1, tmp);
        msg[got] = '\0';
        while (got && (msg[got - 1] == '\n' || msg[got - 1] == '\r')) msg[--got] = '\0';
        if (!strncmp(msg, "sdgp: ", 6)) memmove(msg, msg + 6, strlen(msg + 6) + 1);
    }
    if (tmp) fclose(tmp);
    if (rc && !msg[0]) snprintf(msg, size, "bad flags");
    return rc;
}

/* Checks every line's flags before anything runs: the defaults, each run on top of them, then the
 * command line's overrides. Prints FILE:LINE: why; returns 0 or 2. */
int sweep_validate(const sweep_file *sf, const sweep_opts *o) {
    char msg[1024];
    int bad = 0;
    for (int i = 0; i < sf->n; i++) {
        const sweep_run *r = &sf->runs[i];
        sdgp_train_config cfg = sdgp_train_config_default();
        if (apply_flags(&cfg, r->n_defaults, sf->defaults, msg, sizeof msg)) {
            fprintf(stderr, "%s: defaults (before line %d): %s\n", sf->path, r->line, msg);
            return 2; /* the same message would follow for every later run */
        }
        if (apply_flags(&cfg, r->argc, r->argv, msg, sizeof msg)) {
            fprintf(stderr, "%s:%d: run '%s': %s\n", sf->path, r->line, r->name, msg);
            bad = 1;
            continue;
        }
        if (apply_flags(&cfg, o->extra_argc, o->extra, msg, sizeof msg)) {
            fprintf(stderr, "sdgp: sweep: flags after --: %s\n", msg);
            return 2;
        }
    }
    return bad ? 2 : 0;
}

