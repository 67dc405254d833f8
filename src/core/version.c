#include "sdgp/version.h"

#ifndef SDGP_VERSION_STRING
#error "SDGP_VERSION_STRING is defined by CMakeLists.txt (the project version)"
#endif

const char *sdgp_version(void) { return SDGP_VERSION_STRING; }
