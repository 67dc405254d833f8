/* The communicator of data-parallel training (include/sdgp/dist.h) over MPI, for `mpirun -np K
 * sdgp train` and `sdgp eval`. Built with MPI when CMake's SDGP_MPI is on (SDGP_HAVE_MPI); without
 * it, every process runs alone.
 *
 * MPI is initialised only when the process was started by an MPI launcher (its environment says
 * so), so `sdgp train` or `eval` on its own never touches MPI and stays the single-process program.
 * MPI calls come from the main thread only (MPI_THREAD_FUNNELED); errors return (MPI_ERRORS_RETURN)
 * with MPI's message. A process that dies ends the whole job through mpirun; a process whose
 * command fails calls MPI_Abort, since the others may wait for it in a collective. */
#include <stdio.h>
#include <stdlib.h>

#include "cli/cli.h"

#ifdef SDGP_HAVE_MPI
#include <mpi.h>

struct sdgp_dist_request {
    MPI_Request r;
};

static sdgp_dist world;

static sdgp_status mpi_status(int rc, const char *what, sdgp_error *err) {
    if (rc == MPI_SUCCESS) return SDGP_OK;
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    return sdgp_fail(err, SDGP_ERR_INTERNAL, "MPI rank %d: %s failed: %.*s", world.rank, what, len, msg);
}

static MPI_Datatype mpi_type(sdgp_dist_type t) { return t == SDGP_DIST_DOUBLE ? MPI_DOUBLE : MPI_FLOAT; }

static sdgp_status mpi_iallreduce(void *ctx, void *buf, size_t count, sdgp_dist_type type, sdgp_dist_request **req,
                                  sdgp_error *err) {
    *req = malloc(sizeof **req);
    if (!*req) return sdgp_fail(err, SDGP_ERR_NOMEM, "MPI: out of memory for a request");
    int rc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(type), MPI_SUM, MPI_COMM_WORLD, &(*req)->r);
    if (rc != MPI_SUCCESS) {
        free(*req);
        *req = NULL;
    }
    return mpi_status(rc, "MPI_Iallreduce", err);
}

static sdgp_status mpi_test(void *ctx, sdgp_dist_request *req, int *done, sdgp_error *err) {
    int rc = MPI_Test(&req->r, done, MPI_STATUS_IGNORE);
    if (*done || rc != MPI_SUCCESS) free(req);
    if (rc != MPI_SUCCESS) *done = 1; /* released */
    return mpi_status(rc, "MPI_Test", err);
}

static sdgp_status mpi_wait(void *ctx, sdgp_dist_request *req, sdgp_error *err) {
    int rc = MPI_Wait(&req->r, MPI_STATUS_IGNORE);
    free(req);
    return mpi_status(rc, "MPI_Wait", err);
}

static sdgp_status mpi_allreduce(void *ctx, void *buf, size_t count, sdgp_dist_type type, sdgp_error *err) {
    return mpi_status(MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, mpi_type(type), MPI_SUM, MPI_COMM_WORLD),
                      "MPI_Allreduce", err);
}

static sdgp_status mpi_bcast(void *ctx, void *buf, size_t bytes, int root, sdgp_error *err) {
    return mpi_status(MPI_Bcast(buf, (int)bytes, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast", err);
}

/* Started by a launcher: Open MPI's mpirun, or a PMI/PMIx one (MPICH's hydra, srun). */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

const sdgp_dist *cli_dist_start(void) {
    if (!launched_by_mpi()) return NULL;
    int provided = 0, size = 1, rank = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "sdgp: started by an MPI launcher, but MPI_Init failed\n");
        exit(1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    world = (sdgp_dist){rank, size, NULL, mpi_iallreduce, mpi_test, mpi_wait, mpi_allreduce, mpi_bcast};
    return &world;
}

void cli_dist_end(const sdgp_dist *d, int code) {
    if (!d) return;
    if (code != 0 && d->size > 1) {
        fflush(stdout);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, code); /* the other ranks may be waiting for this one */
    }
    MPI_Finalize();
}

#else

const sdgp_dist *cli_dist_start(void) { return NULL; }
void cli_dist_end(const sdgp_dist *d, int code) {}

#endif
