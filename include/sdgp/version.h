/* sdgp: the library's version, for programs and bindings that load libsdgp at run time (the Python
 * package's sdgp.__version__ is this string). */
#ifndef SDGP_VERSION_H
#define SDGP_VERSION_H

#include "sdgp/export.h"

#ifdef __cplusplus
extern "C" {
#endif

/* "MAJOR.MINOR.PATCH": CMakeLists.txt's project version, which the shared library's file name
 * (libsdgp.so.MAJOR.MINOR.PATCH) and `sdgp --version` carry too. A static string. */
SDGP_API const char *sdgp_version(void);

#ifdef __cplusplus
}
#endif
#endif
