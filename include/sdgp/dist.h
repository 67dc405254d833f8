/* sdgp: the communicator of data-parallel training and evaluation (several processes, e.g. MPI ranks).
 *
 * The library does not link MPI (or anything else that moves bytes between machines): a program
 * that runs several processes gives sdgp_train (or sdgp_evaluate_dist) a sdgp_dist, a rank, a size
 * and the few collective operations they need, as function pointers over its own communication
 * library. The sdgp command implements it over MPI (src/cli/dist_mpi.c, built when CMake finds MPI).
 *
 * Every operation is collective: all processes call the same operations, in the same order, with
 * the same counts. Sums must give every process bitwise the same result, and the same result for
 * the same inputs on every run (MPI_SUM over two processes does: a + b == b + a in IEEE arithmetic;
 * over more, MPI implementations pick their algorithm from the count and the number of processes,
 * so the order is fixed for a fixed job layout). A failure returns an error status with a message;
 * the trainer then stops, and the program must end every process (MPI: MPI_Abort), since the
 * others may wait in a collective for the one that failed.
 * Calls come from one thread (the one that called sdgp_train or sdgp_evaluate_dist), never from
 * inside OpenMP regions. */
#ifndef SDGP_DIST_H
#define SDGP_DIST_H

#include <stddef.h>

#include "sdgp/status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { SDGP_DIST_FLOAT = 0, SDGP_DIST_DOUBLE = 1 } sdgp_dist_type;

/* An operation in flight, owned by the implementation until test reports it done or wait returns. */
typedef struct sdgp_dist_request sdgp_dist_request;

typedef struct sdgp_dist {
    int rank, size; /* this process, and how many there are (rank in [0, size)) */
    void *ctx;      /* the implementation's state, passed to every function */
    /* Starts the sum over processes of count values of buf, in place; buf must stay untouched until
     * the request completes. */
    sdgp_status (*iallreduce)(void *ctx, void *buf, size_t count, sdgp_dist_type type, sdgp_dist_request **req,
                              sdgp_error *err);
    /* Lets the request progress; *done = 1 once it has completed (the request is then released). */
    sdgp_status (*test)(void *ctx, sdgp_dist_request *req, int *done, sdgp_error *err);
    /* Waits for the request to complete and releases it. */
    sdgp_status (*wait)(void *ctx, sdgp_dist_request *req, sdgp_error *err);
    /* The sum over processes of count values of buf, in place, blocking (small things: BatchNorm
     * sums, losses, evaluation counts). */
    sdgp_status (*allreduce)(void *ctx, void *buf, size_t count, sdgp_dist_type type, sdgp_error *err);
    /* Copies bytes of root's buf into every other process's buf. */
    sdgp_status (*bcast)(void *ctx, void *buf, size_t bytes, int root, sdgp_error *err);
} sdgp_dist;

#ifdef __cplusplus
}
#endif
#endif
