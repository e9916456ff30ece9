/* grpo-edge firmware app: runs the generated model on its built-in test vectors.
 *
 * Prints three lines the host monitor (grpo_edge.targets.esp32.flash) parses:
 *   GRPO_EDGE model=<prefix> vectors=<n> checksum=0x<8 hex> expected=0x<8 hex> status=OK|MISMATCH
 *   GRPO_EDGE us_per_inference=<int>.<3 digits> runs=<n>
 *   GRPO_EDGE done
 */
#include <stdint.h>

#include "grpo_app.h"
#include "grpo_model.h"   /* generated: maps GRPO_MODEL_* to the prefixed model API */

uint32_t grpo_fnv1a(uint32_t h, const void *data, int n_bytes)
{
    const uint8_t *p = (const uint8_t *)data;
    int i;
    for (i = 0; i < n_bytes; ++i) {
        h ^= (uint32_t)p[i];
        h *= 16777619u;
    }
    return h;
}

static char *put_str(char *d, const char *s)
{
    while (*s) *d++ = *s++;
    return d;
}

static char *put_uint(char *d, uint64_t v, int min_digits)
{
    char tmp[24];
    int n = 0;
    do {
        tmp[n++] = (char)('0' + (int)(v % 10u));
        v /= 10u;
    } while (v != 0u || n < min_digits);
    while (n > 0) *d++ = tmp[--n];
    return d;
}

static char *put_hex32(char *d, uint32_t v)
{
    int i;
    d = put_str(d, "0x");
    for (i = 7; i >= 0; --i) *d++ = "0123456789abcdef"[(v >> (4 * i)) & 0xFu];
    return d;
}

int grpo_app_run(int repeats)
{
    static grpo_model_output_t out[GRPO_MODEL_OUTPUT_SIZE];   /* int8_t or int16_t (16x8 models) */
    char line[160];
    char *d;
    uint32_t h = 2166136261u;
    int64_t t0, t1;
    uint64_t ns;
    int i, r, ok;

    for (i = 0; i < GRPO_TESTVEC_COUNT; ++i) {
        GRPO_MODEL_INVOKE(GRPO_TESTVEC_IN + (long)i * GRPO_MODEL_INPUT_SIZE, out);
        h = grpo_fnv1a(h, out, (int)sizeof out);
    }
    ok = h == GRPO_TESTVEC_CHECKSUM;
    d = put_str(line, "GRPO_EDGE model=" GRPO_MODEL_NAME " vectors=");
    d = put_uint(d, (uint64_t)GRPO_TESTVEC_COUNT, 1);
    d = put_str(d, " checksum=");
    d = put_hex32(d, h);
    d = put_str(d, " expected=");
    d = put_hex32(d, GRPO_TESTVEC_CHECKSUM);
    d = put_str(d, ok ? " status=OK" : " status=MISMATCH");
    *d = '\0';
    grpo_platform_write(line);

    if (repeats < 1) repeats = 1;
    t0 = grpo_platform_time_us();
    for (r = 0; r < repeats; ++r)
        for (i = 0; i < GRPO_TESTVEC_COUNT; ++i)
            GRPO_MODEL_INVOKE(GRPO_TESTVEC_IN + (long)i * GRPO_MODEL_INPUT_SIZE, out);
    t1 = grpo_platform_time_us();
    ns = (uint64_t)(t1 - t0) * 1000u / ((uint64_t)repeats * GRPO_TESTVEC_COUNT);
    d = put_str(line, "GRPO_EDGE us_per_inference=");
    d = put_uint(d, ns / 1000u, 1);
    *d++ = '.';
    d = put_uint(d, ns % 1000u, 3);
    d = put_str(d, " runs=");
    d = put_uint(d, (uint64_t)repeats * GRPO_TESTVEC_COUNT, 1);
    *d = '\0';
    grpo_platform_write(line);
    grpo_platform_write("GRPO_EDGE done");
    return ok ? 0 : 1;
}
