/* grpo-edge text firmware app: checks the built-in test vectors at boot, then answers prompts.
 *
 * Lines the host reads (grpo_edge.targets.esp32.textfw parses them):
 *   GRPO_EDGE text model=<prefix> vectors=<n> passed=<k> status=OK|MISMATCH
 *   GRPO_EDGE ready: type a prompt and press enter
 *   GRPO_EDGE answer=<text> tokens=<n> us_per_token=<int> us_per_answer=<int> us_prefill=<int>
 *   GRPO_EDGE error: <what is wrong with the prompt>
 */
#include <stdint.h>

#include "text_app.h"
#include "grpo_text_model.h"   /* generated: maps GRPO_TEXT_* to the prefixed model API and test vectors */

#define LINE_MAX_BYTES 256
#define ANSWER_BYTES 128

static char *put_str(char *d, const char *end, const char *s)
{
    while (*s && d < end) *d++ = *s++;
    return d;
}

static char *put_uint(char *d, const char *end, uint64_t v)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u);
    while (n > 0 && d < end) *d++ = tmp[--n];
    return d;
}

static int str_eq(const char *a, const char *b)
{
    while (*a && *a == *b) { ++a; ++b; }
    return *a == *b;
}

int grpo_text_selftest(void)
{
    char answer[ANSWER_BYTES], line[160];
    const char *end = line + sizeof line - 1;
    char *d;
    int i, passed = 0;
    for (i = 0; i < GRPO_TEXT_N_VECTORS; ++i) {
        int rc = GRPO_TEXT_GENERATE(GRPO_TEXT_VEC_PROMPTS[i], answer, (int)sizeof answer);
        if (rc >= 0 && str_eq(answer, GRPO_TEXT_VEC_ANSWERS[i])) ++passed;
    }
    d = put_str(line, end, "GRPO_EDGE text model=" GRPO_TEXT_NAME " vectors=");
    d = put_uint(d, end, (uint64_t)GRPO_TEXT_N_VECTORS);
    d = put_str(d, end, " passed=");
    d = put_uint(d, end, (uint64_t)passed);
    d = put_str(d, end, passed == GRPO_TEXT_N_VECTORS ? " status=OK" : " status=MISMATCH");
    *d = '\0';
    grpo_platform_write(line);
    return passed == GRPO_TEXT_N_VECTORS;
}

void grpo_text_answer(const char *prompt)
{
    char answer[ANSWER_BYTES], line[LINE_MAX_BYTES + 96];
    const char *end = line + sizeof line - 1;
    char *d;
    int16_t ids[GRPO_TEXT_INPUT_LEN];
    int n, s, tok, used = 0, n_tok = 0;
    int64_t t0, t1, t2;
    n = GRPO_TEXT_ENCODE(prompt, ids);
    if (n < 0) {
        d = put_str(line, end, "GRPO_EDGE error: ");
        d = put_str(d, end, GRPO_TEXT_ERROR(n));
        *d = '\0';
        grpo_platform_write(line);
        return;
    }
    answer[0] = '\0';
    t0 = grpo_platform_time_us();
    tok = GRPO_TEXT_PREFILL(ids);
    t1 = grpo_platform_time_us();
    for (s = 0; s < GRPO_TEXT_MAX_NEW; ++s) {
        const char *t;
        ++n_tok;
        if (tok == 2) break;                          /* EOS */
        for (t = GRPO_TEXT_TOKEN_TEXT(tok); *t && used < ANSWER_BYTES - 1; ++t) answer[used++] = *t;
        answer[used] = '\0';
        if (s == GRPO_TEXT_MAX_NEW - 1) break;
        tok = GRPO_TEXT_DECODE(tok, GRPO_TEXT_FIRST_POS + s);
    }
    t2 = grpo_platform_time_us();
    d = put_str(line, end, "GRPO_EDGE answer=");
    d = put_str(d, end, answer);
    d = put_str(d, end, " tokens=");
    d = put_uint(d, end, (uint64_t)n_tok);
    d = put_str(d, end, " us_per_token=");
    d = put_uint(d, end, (uint64_t)(n_tok > 1 ? (t2 - t1) / (n_tok - 1) : 0));
    d = put_str(d, end, " us_per_answer=");
    d = put_uint(d, end, (uint64_t)(t2 - t0));
    d = put_str(d, end, " us_prefill=");
    d = put_uint(d, end, (uint64_t)(t1 - t0));
    *d = '\0';
    grpo_platform_write(line);
}

int grpo_text_app_run(void)
{
    static char buf[LINE_MAX_BYTES];
    int ok = grpo_text_selftest();
    grpo_platform_write("GRPO_EDGE ready: type a prompt and press enter");
    while (grpo_platform_read_line(buf, (int)sizeof buf)) grpo_text_answer(buf);
    grpo_platform_write("GRPO_EDGE done");
    return ok ? 0 : 1;
}
