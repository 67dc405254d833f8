/* The choice text of checkpoints written before it covered every pass (sdgp_model_choice): for
 * sdgp_model_set_choice and the checkpoint reader. */
#ifndef SDGP_MODEL_CHOICE_H
#define SDGP_MODEL_CHOICE_H

#include <stddef.h>

#include "sdgp/status.h"

/* The kernel-choice text (data gradient [ '/' forward ] [ '|' weight gradient ], a letter per conv
 * layer each; a missing part ran oneDNN) and the per-pass algorithms ("abc,abc,..." with a, b, c
 * 'd' | 'w'; NULL: tokens without them) as today's text, in out (size bytes); SDGP_ERR_FORMAT when
 * the parts differ in length or out is too small. */
sdgp_status model_choice_from_legacy(const char *kernels, const char *convs, char *out, size_t size, sdgp_error *err);

#endif
