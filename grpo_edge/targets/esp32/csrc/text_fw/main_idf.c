/* ESP-IDF entry point of the text firmware: console UART via stdio (VFS), esp_timer for microseconds. */
#include <stdio.h>
#include <string.h>
#include <stdint.h>

#include "esp_timer.h"
#include "freertos/FreeRTOS.h"
#include "freertos/task.h"
#include "text_app.h"

void grpo_platform_write(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
}

int grpo_platform_read_line(char *buf, int size)
{
    int n = 0;
    while (n < size - 1) {
        int c = getchar();
        if (c == EOF) { vTaskDelay(pdMS_TO_TICKS(10)); continue; }   /* UART console: no data yet */
        if (c == '\r' || c == '\n') { if (n == 0) continue; break; }
        buf[n++] = (char)c;
    }
    buf[n] = '\0';
    return 1;
}

int64_t grpo_platform_time_us(void)
{
    return esp_timer_get_time();
}

void app_main(void)
{
    (void)grpo_text_app_run();
}
