/* The Winograd-domain data loops compiled for AVX2 (spwino_loops.h). */
#include "kernels/spwino_loops.h"

const spwino_loops spwino_loops_avx2 = SPWINO_LOOPS_TABLE;
