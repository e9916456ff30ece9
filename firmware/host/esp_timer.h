/* Host shim for ESP-IDF's esp_timer.h, so firmware/main compiles and runs on a PC (tests only). */
#ifndef GRPO_HOST_ESP_TIMER_H
#define GRPO_HOST_ESP_TIMER_H
#include <stdint.h>
int64_t esp_timer_get_time(void);
#endif
