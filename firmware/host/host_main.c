/* Host shim: esp_timer_get_time() from the C library clock, and a main() calling app_main().
   Build: gcc -std=c99 -I firmware/host -I firmware/main -I <component> firmware/main/grpo_app.c
          firmware/main/main.c firmware/host/host_main.c <component sources> */
#include <stdint.h>
#include <time.h>

#include "esp_timer.h"

void app_main(void);

int64_t esp_timer_get_time(void)
{
    return (int64_t)((double)clock() * 1e6 / (double)CLOCKS_PER_SEC);
}

int main(void)
{
    app_main();
    return 0;
}
