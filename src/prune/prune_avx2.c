/* avx2 pruning kernels (the specialised paths are being written; the reference for now). */
#include "prune/prune_internal.h"

const prune_kernels prune_kernels_avx2 = {prune_ref_prune, prune_ref_sums};
