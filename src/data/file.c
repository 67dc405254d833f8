/* Reading dataset files, raw or gzip-compressed, with sizes bounded by what is really present.
 *
 * The file is opened with open() (so a missing file reports the real errno) and handed to zlib,
 * whose gzread passes raw files through unchanged. Whether it is gzip is decided by the 1f 8b
 * magic; for a raw file the size is known up front, which lets the readers reject a truncated
 * file before allocating anything. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "data/data_internal.h"

sdgp_status data_file_open(data_file *f, const char *path, sdgp_error *err) {
    memset(f, 0, sizeof *f);
    f->fd = -1;
    f->path = path;
    if (!path) return sdgp_fail(err, SDGP_ERR_INVALID, "dataset file: path is NULL");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sdgp_fail(err, SDGP_ERR_IO, "cannot open %s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return sdgp_fail(err, SDGP_ERR_IO, "cannot stat %s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: not a regular file", path);
    }
    unsigned char magic[2] = {0, 0};
    ssize_t m = pread(fd, magic, 2, 0);
    if (m < 0) {
        int e = errno;
        close(fd);
        return sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: %s", path, strerror(e));
    }
    f->gzipped = (m == 2 && magic[0] == 0x1f && magic[1] == 0x8b);
    f->raw_size = f->gzipped ? -1 : (int64_t)st.st_size;
    gzFile gz = gzdopen(fd, "rb"); /* takes ownership of fd */
    if (!gz) {
        close(fd);
        return sdgp_fail(err, SDGP_ERR_NOMEM, "cannot read %s: zlib could not allocate its state", path);
    }
    gzbuffer(gz, 1 << 17);
    f->gz = gz;
    return SDGP_OK;
}

sdgp_status data_file_read(data_file *f, void *dst, size_t n, size_t *got, sdgp_error *err) {
    size_t have = 0;
    while (have < n) {
        size_t chunk = n - have;
        if (chunk > (1u << 30)) chunk = 1u << 30; /* gzread takes an unsigned int */
        int r = gzread((gzFile)f->gz, (unsigned char *)dst + have, (unsigned)chunk);
        if (r < 0) {
            int zerr = 0;
            const char *zmsg = gzerror((gzFile)f->gz, &zerr);
            if (zerr == Z_ERRNO) return sdgp_fail(err, SDGP_ERR_IO, "cannot read %s: %s", f->path, strerror(errno));
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: corrupt gzip data (%s)", f->path, zmsg ? zmsg : "?");
        }
        if (r == 0) break;
        have += (size_t)r;
    }
    /* zlib reports a gzip stream cut short as end of file plus an error state. */
    if (have < n && f->gzipped) {
        int zerr = 0;
        const char *zmsg = gzerror((gzFile)f->gz, &zerr);
        if (zerr != Z_OK && zerr != Z_STREAM_END)
            return sdgp_fail(err, SDGP_ERR_FORMAT, "%s: truncated or corrupt gzip data (%s)", f->path, zmsg ? zmsg : "?");
    }
    *got = have;
    return SDGP_OK;
}

sdgp_status data_file_read_grow(data_file *f, uint8_t **out, size_t want, size_t *got, sdgp_error *err) {
    *out = NULL;
    *got = 0;
    size_t cap = want < ((size_t)1 << 20) ? want : ((size_t)1 << 20);
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf) return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu bytes)", f->path, cap);
    size_t have = 0;
    for (;;) {
        size_t r = 0;
        sdgp_status st = data_file_read(f, buf + have, cap - have, &r, err);
        if (st != SDGP_OK) {
            free(buf);
            return st;
        }
        have += r;
        if (have < cap || cap == want) break; /* end of file, or all that was asked for */
        size_t ncap = cap > want / 2 ? want : cap * 2;
        uint8_t *nb = realloc(buf, ncap);
        if (!nb) {
            free(buf);
            return sdgp_fail(err, SDGP_ERR_NOMEM, "%s: out of memory (%zu bytes)", f->path, ncap);
        }
        buf = nb;
        cap = ncap;
    }
    *out = buf;
    *got = have;
    return SDGP_OK;
}

void data_file_close(data_file *f) {
    if (f->gz) gzclose((gzFile)f->gz);
    f->gz = NULL;
}
