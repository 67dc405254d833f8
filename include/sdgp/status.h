/* sdgp: status codes and error messages.
 *
 * Every library function that can fail returns an sdgp_status and takes an optional
 * `sdgp_error *err` (may be NULL) that receives a message naming what is wrong and where.
 * The library never prints, never calls exit() or abort(), and keeps no global error state. */
#ifndef SDGP_STATUS_H
#define SDGP_STATUS_H

#include "sdgp/export.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    SDGP_OK = 0,
    SDGP_ERR_INVALID = 1,     /* bad argument: shape, n:m, flag value, NULL pointer */
    SDGP_ERR_NOMEM = 2,       /* allocation failed, or a size that would overflow */
    SDGP_ERR_IO = 3,          /* open/read/write/fsync/rename failed */
    SDGP_ERR_FORMAT = 4,      /* a file is truncated, corrupt, or of another kind/model */
    SDGP_ERR_UNSUPPORTED = 5, /* valid request this build or CPU cannot do */
    SDGP_ERR_NUMERIC = 6,     /* NaN or Inf where finite numbers are required */
    SDGP_ERR_INTERNAL = 7     /* a bug, or a failure inside oneDNN */
} sdgp_status;

#define SDGP_ERROR_MSG_LEN 512
typedef struct {
    sdgp_status code;
    char msg[SDGP_ERROR_MSG_LEN];
} sdgp_error;

/* A short name of the code, e.g. "invalid argument". */
SDGP_API const char *sdgp_status_name(sdgp_status code);

/* Records code and a printf-style message in *err (when err is not NULL); returns code.
 * Typical use: `return sdgp_fail(err, SDGP_ERR_INVALID, "prune: n=%d > m=%d", n, m);` */
SDGP_API sdgp_status sdgp_fail(sdgp_error *err, sdgp_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears *err to SDGP_OK and an empty message (NULL is allowed). */
SDGP_API void sdgp_error_clear(sdgp_error *err);

#ifdef __cplusplus
}
#endif
#endif
