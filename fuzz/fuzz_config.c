/* Fuzz target: the run configuration as the command line, checkpoints and sweep files give it.
 * Input: lines "key=value"; each goes through sdgp_train_config_set (the parser behind every
 * `sdgp train` flag). Checks: no crash; a rejected value leaves the config unchanged; and after
 * any sequence, every field's printed value parses back to the same config (what checkpoints
 * rely on). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdgp/train.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 4096) return 0;
    char *text = malloc(size + 1);
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = 0;
    sdgp_train_config cfg = sdgp_train_config_default();
    sdgp_error err;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = 0;
        sdgp_train_config before = cfg;
        if (sdgp_train_config_set(&cfg, line, eq + 1, &err) != SDGP_OK) {
            if (memcmp(&before, &cfg, sizeof cfg) != 0) {
                fprintf(stderr, "rejected %s=%s but the config changed\n", line, eq + 1);
                abort();
            }
            if (!err.msg[0]) abort(); /* every rejection says why */
        }
    }
    sdgp_train_config copy = sdgp_train_config_default();
    char value[1100];
    for (int i = 0; i < sdgp_train_config_field_count(); i++) {
        const char *name = sdgp_train_config_field(&cfg, i, NULL, value, sizeof value);
        if (sdgp_train_config_set(&copy, name, value, &err) != SDGP_OK) {
            fprintf(stderr, "field %s=%s does not parse back: %s\n", name, value, err.msg);
            abort();
        }
    }
    if (memcmp(&copy, &cfg, sizeof cfg) != 0) {
        fprintf(stderr, "printed config does not parse back to itself\n");
        abort();
    }
    free(text);
    return 0;
}
