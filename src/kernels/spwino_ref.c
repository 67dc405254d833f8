/* The Winograd-domain data loops compiled for the portable path (no ISA flags) (spwino_loops.h). */
#include "kernels/spwino_loops.h"

const spwino_loops spwino_loops_ref = SPWINO_LOOPS_TABLE;
