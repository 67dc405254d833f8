/* libFuzzer target: the safetensors parser. Input: the file bytes.
 *
 * Beyond "no crash, no leak": an accepted file's tensors are copied out with
 * sdgp_safetensors_copy (ASan checks the byte ranges), then written back with
 * sdgp_safetensors_write to a tmpfs directory and read again; the second file must hold the same
 * tensors and metadata (the writer and reader agree on everything the reader accepts). */
#include "fuzz_common.h"

#include <string.h>

#include "sdgp/safetensors.h"

static size_t dtype_size(sdgp_dtype d) { return d == SDGP_DT_I64 ? 8 : d == SDGP_DT_U8 ? 1 : 4; }

static const char *scratch_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "/dev/shm/sdgp_fuzz_XXXXXX");
        if (!mkdtemp(dir)) snprintf(dir, sizeof dir, "/tmp");
    }
    return dir;
}

static void round_trip(const sdgp_st_file *f) {
    int n = sdgp_safetensors_count(f);
    sdgp_st_tensor *t = calloc((size_t)n + 1, sizeof *t);
    sdgp_st_meta *m = calloc(64, sizeof *m);
    FUZZ_ASSERT(t && m);
    for (int i = 0; i < n; i++) {
        t[i] = *sdgp_safetensors_at(f, i);
        FUZZ_ASSERT(sdgp_safetensors_get(f, t[i].name) == sdgp_safetensors_at(f, i));
        uint64_t bytes = dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) bytes *= (uint64_t)t[i].shape[d];
        void *dst = malloc(bytes ? bytes : 1);
        sdgp_error e;
        FUZZ_ASSERT(dst && sdgp_safetensors_copy(f, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, dst, &e) == SDGP_OK);
        FUZZ_ASSERT(bytes == 0 || !memcmp(dst, t[i].data, bytes));
        free(dst);
    }
    /* Metadata is not enumerable through the API: probe the keys the corpus uses. */
    static const char *keys[] = {"format", "config", "k", "", "note"};
    int nm = 0;
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        const char *v = sdgp_safetensors_meta(f, keys[i]);
        if (v) m[nm].key = keys[i], m[nm++].value = v;
    }
    char path[128];
    snprintf(path, sizeof path, "%s/rt.safetensors", scratch_dir());
    sdgp_error e;
    sdgp_status st = sdgp_safetensors_write(path, t, n, m, nm, &e);
    FUZZ_ASSERT(st == SDGP_OK);
    sdgp_st_file *g = NULL;
    st = sdgp_safetensors_read(&g, path, &e);
    if (st != SDGP_OK) fprintf(stderr, "re-read failed: %s\n", e.msg);
    FUZZ_ASSERT(st == SDGP_OK && sdgp_safetensors_count(g) == n);
    for (int i = 0; i < n; i++) {
        const sdgp_st_tensor *u = sdgp_safetensors_at(g, i);
        FUZZ_ASSERT(!strcmp(u->name, t[i].name) && u->dtype == t[i].dtype && u->ndim == t[i].ndim);
        uint64_t bytes = dtype_size(t[i].dtype);
        for (int d = 0; d < t[i].ndim; d++) {
            FUZZ_ASSERT(u->shape[d] == t[i].shape[d]);
            bytes *= (uint64_t)t[i].shape[d];
        }
        FUZZ_ASSERT(bytes == 0 || !memcmp(u->data, t[i].data, bytes));
        FUZZ_ASSERT((uintptr_t)u->data % dtype_size(u->dtype) == 0);
    }
    for (int i = 0; i < nm; i++) FUZZ_ASSERT(!strcmp(sdgp_safetensors_meta(g, m[i].key), m[i].value));
    FUZZ_ASSERT(sdgp_safetensors_meta(g, "sdgp_crc32") != NULL);
    sdgp_safetensors_free(g);
    free(t);
    free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sdgp_st_file *f = NULL;
    sdgp_error err;
    sdgp_status st = sdgp_safetensors_parse(&f, data, size, &err);
    if (st != SDGP_OK) {
        FUZZ_ASSERT(f == NULL && err.code == st && err.msg[0] != '\0');
        return 0;
    }
    round_trip(f);
    sdgp_safetensors_free(f);
    return 0;
}
