/* sdgp: the export macro of the public API.
 *
 * The library is compiled with -fvisibility=hidden, so libsdgp.so exports only what is marked
 * SDGP_API: every function and extern object declared in the headers of include/sdgp/
 * (tests/symbols_test.sh checks both directions). The attribute is harmless where the header is
 * only consumed (it is what the definition already has), and it keeps the API visible when a
 * program or another shared library is built from libsdgp.a with hidden visibility of its own.
 * Static linking does not depend on visibility at all. A build may predefine SDGP_API (e.g.
 * empty) to override. */
#ifndef SDGP_EXPORT_H
#define SDGP_EXPORT_H

#ifndef SDGP_API
#if defined(__GNUC__) || defined(__clang__)
#define SDGP_API __attribute__((visibility("default")))
#else
#define SDGP_API
#endif
#endif

#endif
