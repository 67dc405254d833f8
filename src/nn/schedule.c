/* Learning-rate schedules (see sdgp_sched_kind in nn.h), evaluated per iteration in double.
 * Steps before 0 count as 0; from total_steps on, the decaying schedules give 0. */
#include "sdgp/nn.h"

#include <math.h>

/* Linear warm-up: peak * start_factor at step 0 up to peak at warmup_steps. */
static double warmup(const sdgp_schedule *s, int64_t step) {
    double f = s->start_factor + (1.0 - s->start_factor) * (double)step / (double)s->warmup_steps;
    return s->peak * f;
}

float sdgp_schedule_lr(const sdgp_schedule *s, int64_t step) {
    if (step < 0) step = 0;
    switch (s->kind) {
    case SDGP_SCHED_CONSTANT: return s->peak;
    case SDGP_SCHED_STEP:
        if (s->step_size <= 0) return s->peak;
        return (float)(s->peak * pow(s->gamma, (double)(step / s->step_size)));
    case SDGP_SCHED_REFERENCE:
    case SDGP_SCHED_COSINE: {
        if (step < s->warmup_steps) return (float)warmup(s, step);
        if (step >= s->total_steps) return 0.0f;
        double t = (double)(step - s->warmup_steps) / (double)(s->total_steps - s->warmup_steps);
        double f = s->kind == SDGP_SCHED_REFERENCE ? 1.0 - t : 0.5 * (1.0 + cos(M_PI * t));
        return (float)(s->peak * f);
    }
    }
    return s->peak;
}
