/* ESP-IDF entry point: platform glue for grpo_app.c (printf to the console UART, esp_timer). */
#include <stdio.h>
#include <stdint.h>

#include "esp_timer.h"
#include "grpo_app.h"

#ifndef GRPO_TIMING_REPEATS
#define GRPO_TIMING_REPEATS 100
#endif

void grpo_platform_write(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
}

int64_t grpo_platform_time_us(void)
{
    return esp_timer_get_time();
}

void app_main(void)
{
    (void)grpo_app_run(GRPO_TIMING_REPEATS);
}
