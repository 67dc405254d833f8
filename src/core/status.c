#include "sdgp/status.h"

#include <stdarg.h>
#include <stdio.h>

const char *sdgp_status_name(sdgp_status code) {
    switch (code) {
    case SDGP_OK: return "ok";
    case SDGP_ERR_INVALID: return "invalid argument";
    case SDGP_ERR_NOMEM: return "out of memory";
    case SDGP_ERR_IO: return "I/O error";
    case SDGP_ERR_FORMAT: return "bad file format";
    case SDGP_ERR_UNSUPPORTED: return "unsupported";
    case SDGP_ERR_NUMERIC: return "numerical error";
    case SDGP_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

sdgp_status sdgp_fail(sdgp_error *err, sdgp_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

void sdgp_error_clear(sdgp_error *err) {
    if (err) {
        err->code = SDGP_OK;
        err->msg[0] = '\0';
    }
}
