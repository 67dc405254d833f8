/* libFuzzer target: IDX images + labels, in memory and through the file reader (raw or gzip).
 *
 * Input: byte 0 = mode (bit 0: read through files, bit 1: gzip them first), bytes 1..4 = u32 LE
 * split point k, then the images file (k bytes, clamped) and the labels file (the rest). */
#include "fuzz_common.h"

#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 5) return 0;
    int mode = data[0];
    size_t rest = size - 5, k = fuzz_le32(data + 1) % (rest + 1);
    const uint8_t *img = data + 5, *lab = data + 5 + k;
    size_t nimg = k, nlab = rest - k;
    sdgp_dataset ds;
    sdgp_error err;
    sdgp_status st;
    if (mode & 1) {
        char pi[64], pl[64];
        int fi = fuzz_memfile(img, nimg, mode & 2, pi, sizeof pi), fl = fuzz_memfile(lab, nlab, mode & 2, pl, sizeof pl);
        if (fi < 0 || fl < 0) {
            if (fi >= 0) close(fi);
            if (fl >= 0) close(fl);
            return 0;
        }
        st = sdgp_idx_load(&ds, pi, pl, &err);
        close(fi);
        close(fl);
    } else {
        st = sdgp_idx_parse(&ds, img, nimg, lab, nlab, &err);
    }
    if (st != SDGP_OK) {
        /* failures return a message and a zeroed dataset */
        FUZZ_ASSERT(err.code == st && err.msg[0] != '\0');
        FUZZ_ASSERT(ds.images == NULL && ds.labels == NULL && ds.count == 0);
        return 0;
    }
    FUZZ_ASSERT(ds.c == 1);
    fuzz_check_dataset(&ds, data, 5);
    sdgp_dataset_free(&ds);
    return 0;
}
