/* Compares the float tensors of two checkpoints (tests/mpi_test.sh): sdgp_ckpt_diff A B [TOL]
 * prints, per tensor that is not bitwise equal, its relative error max|a - b| / max|b| (0/0 = 0,
 * x/0 = inf), then "max_rel_err E over N tensors, M differ" (momentum buffers included: they carry the
 * gradients). Without TOL: exit 0 when all tensors are bitwise equal. With TOL: exit 0 when every
 * tensor's relative error is at most TOL. Exit 1 otherwise, 2 on unreadable input or a tensor
 * missing from B. The metadata is not compared (it holds the runs' own file names). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdgp/safetensors.h"

static size_t elements(const sdgp_st_tensor *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: sdgp_ckpt_diff A.safetensors B.safetensors [TOL]\n");
        return 2;
    }
    double tol = argc == 4 ? atof(argv[3]) : -1;
    sdgp_st_file *a = NULL, *b = NULL;
    sdgp_error err;
    if (sdgp_safetensors_read(&a, argv[1], &err) != SDGP_OK || sdgp_safetensors_read(&b, argv[2], &err) != SDGP_OK) {
        fprintf(stderr, "ckpt_diff: %s\n", err.msg);
        sdgp_safetensors_free(a);
        return 2;
    }
    int rc = 0, n = 0, differ = 0;
    double worst = 0;
    for (int i = 0; i < sdgp_safetensors_count(a) && rc != 2; i++) {
        const sdgp_st_tensor *ta = sdgp_safetensors_at(a, i), *tb = sdgp_safetensors_get(b, ta->name);
        if (!tb || tb->dtype != ta->dtype || elements(tb) != elements(ta)) {
            fprintf(stderr, "ckpt_diff: %s: missing or of another shape in %s\n", ta->name, argv[2]);
            rc = 2;
            break;
        }
        if (ta->dtype != SDGP_DT_F32) continue;
        n++;
        size_t count = elements(ta);
        if (memcmp(ta->data, tb->data, count * sizeof(float)) == 0) continue;
        const float *x = ta->data, *y = tb->data;
        double diff = 0, scale = 0;
        for (size_t j = 0; j < count; j++) {
            diff = fmax(diff, fabs((double)x[j] - y[j]));
            scale = fmax(scale, fabs((double)y[j]));
        }
        double rel = diff == 0 ? 0 : scale == 0 ? INFINITY : diff / scale;
        printf("%-40s rel_err %.3g\n", ta->name, rel);
        differ++;
        if (rel > worst) worst = rel;
    }
    printf("max_rel_err %.3g over %d tensors, %d differ\n", worst, n, differ);
    if (rc == 0) rc = tol < 0 ? differ > 0 : !(worst <= tol);
    sdgp_safetensors_free(a);
    sdgp_safetensors_free(b);
    return rc;
}
