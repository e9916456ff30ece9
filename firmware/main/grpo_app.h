/* grpo-edge firmware app: portable C99, no libc needed (prints through grpo_platform_write). */
#ifndef GRPO_APP_H
#define GRPO_APP_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Provided by the platform (main.c on ESP-IDF, host/host_main.c on a PC). */
void grpo_platform_write(const char *line);
int64_t grpo_platform_time_us(void);

/* FNV-1a over the output bytes as they lie in memory (int8, or little-endian int16 for 16x8 models):
   the checksum the firmware prints and `grpo-edge flash` checks. */
uint32_t grpo_fnv1a(uint32_t h, const void *data, int n_bytes);

/* Run the built-in test vectors once (checksum line), then `repeats` timed passes (timing line).
   Returns 0 when the checksum matches the one computed by the NumPy reference at deploy time. */
int grpo_app_run(int repeats);

#ifdef __cplusplus
}
#endif
#endif
