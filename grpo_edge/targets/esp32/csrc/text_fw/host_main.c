/* Host build of the text firmware: stdin/stdout instead of the UART, the C library clock.
   Build: gcc -std=c99 -I main main/text_app.c main/<prefix>_text.c main/<prefix>_testvec.c host/host_main.c */
#include <stdio.h>
#include <string.h>
#include <stdint.h>
#include <time.h>

#include "text_app.h"

void grpo_platform_write(const char *line)
{
    printf("%s\n", line);
    fflush(stdout);
}

int grpo_platform_read_line(char *buf, int size)
{
    size_t n;
    if (!fgets(buf, size, stdin)) return 0;
    n = strlen(buf);
    if (n && buf[n - 1] != '\n' && !feof(stdin)) {            /* longer than the buffer: drop the rest */
        int c;
        while ((c = getchar()) != EOF && c != '\n') {}
    }
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r')) buf[--n] = '\0';
    return 1;
}

int64_t grpo_platform_time_us(void)
{
    return (int64_t)((double)clock() * 1e6 / (double)CLOCKS_PER_SEC);
}

int main(void)
{
    return grpo_text_app_run();
}
