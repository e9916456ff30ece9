/* grpo-edge text firmware app: platform hooks (ESP-IDF in main_idf.c, the host in host_main.c). */
#ifndef GRPO_TEXT_APP_H
#define GRPO_TEXT_APP_H
#include <stdint.h>

void grpo_platform_write(const char *line);              /* one line to the console, newline added */
int grpo_platform_read_line(char *buf, int size);        /* 1 = a line (NUL-terminated, no newline), 0 = end */
int64_t grpo_platform_time_us(void);

int grpo_text_selftest(void);                             /* built-in test vectors: 1 = all answers as expected */
void grpo_text_answer(const char *prompt);                /* prints the answer line (or an error line) */
int grpo_text_app_run(void);                              /* self-test, then prompt mode until end of input */
#endif
