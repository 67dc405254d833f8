/* The Winograd-domain data loops compiled for the portable path (no ISA flags) (spwino_loops.h). */
#include "kernels/spwino_loops.h"

static void spwino_block_row(spconv_entry *out, const float *x, const prune_block_slice *b, uint32_t row_bytes, int64_t ns,
                             int mvue) {
    spwino_block_slots(out, x, b, row_bytes, 0, ns, mvue);
}

const spwino_loops spwino_loops_ref = SPWINO_LOOPS_TABLE;
