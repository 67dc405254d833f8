/* libFuzzer target: CIFAR-10 binary batches, in memory and through the file reader.
 *
 * Input: byte 0 = mode (bit 0: read through a file, bit 1: gzip it first), then the batch file. */
#include "fuzz_common.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0];
    const uint8_t *body = data + 1;
    size_t n = size - 1;
    sdgp_dataset ds;
    sdgp_error err;
    sdgp_status st;
    if (mode & 1) {
        char path[64];
        int fd = fuzz_memfile(body, n, mode & 2, path, sizeof path);
        if (fd < 0) return 0;
        const char *paths[2] = {path, path}; /* the same file twice: exercises appending */
        st = sdgp_cifar10_load(&ds, paths, (mode & 4) ? 2 : 1, &err);
        close(fd);
    } else {
        st = sdgp_cifar10_parse(&ds, body, n, &err);
    }
    if (st != SDGP_OK) {
        FUZZ_ASSERT(err.code == st && err.msg[0] != '\0');
        FUZZ_ASSERT(ds.images == NULL && ds.labels == NULL && ds.count == 0);
        return 0;
    }
    FUZZ_ASSERT(ds.h == 32 && ds.w == 32 && ds.c == 3);
    FUZZ_ASSERT((size_t)ds.count * 3073 == n * ((mode & 5) == 5 ? 2 : 1));
    /* CHW -> HWC: pixel (y, x, c) of record 0 */
    for (int p = 0; p < 1024; p += 97)
        for (int c = 0; c < 3; c++) FUZZ_ASSERT(ds.images[p * 3 + c] == body[1 + c * 1024 + p]);
    fuzz_check_dataset(&ds, data, size < 5 ? size : 5);
    sdgp_dataset_free(&ds);
    return 0;
}
