/* grpo-edge ESP32 text kernels: int16 activations, int8 weights (TFLite 16x8 rules where TFLite has them).
 *
 * Self-contained C99 header of static inline functions; the generated <prefix>_text.c includes it.
 * Each function has a NumPy twin in grpo_edge/targets/esp32/text_ref.py and must stay bit-exact with it.
 * No malloc, no libc beyond <stdint.h>; callers own every buffer.
 */
#ifndef GX_TEXT_KERNELS_H
#define GX_TEXT_KERNELS_H

#include <stdint.h>
#include "gx_fixedpoint.h"     /* requantization, saturation, FNV-1a */

/* Fully connected 16x8: y[o] = clamp(MBQM(sum_i w[o][i] x[i] + b[o], m[o], s[o]), lo, hi).
 * Two output rows share each load of x, four inputs per iteration (about 4 rv32 instructions per MAC
 * instead of 7). The int32 sums are exact in any order: the generator proves they cannot overflow. */
static inline int16_t gxt_requant16(int32_t acc, int32_t m, int s, int32_t lo, int32_t hi)
{
    int32_t v = gx_mbqm(acc, m, s);
    return (int16_t)(v < lo ? lo : (v > hi ? hi : v));
}

static inline void gxt_fc16(const int16_t *x, int n_in, const int8_t *w, const int32_t *b, const int32_t *m,
                            const int8_t *s, int n_out, int32_t lo, int32_t hi, int16_t *y)
{
    int o = 0, i;
    for (; o + 1 < n_out; o += 2) {
        const int8_t *w0 = w + (long)o * n_in, *w1 = w0 + n_in;
        int32_t a0 = b ? b[o] : 0, a1 = b ? b[o + 1] : 0;
        for (i = 0; i + 3 < n_in; i += 4) {
            int32_t x0 = x[i], x1 = x[i + 1], x2 = x[i + 2], x3 = x[i + 3];
            a0 += w0[i] * x0 + w0[i + 1] * x1 + w0[i + 2] * x2 + w0[i + 3] * x3;
            a1 += w1[i] * x0 + w1[i + 1] * x1 + w1[i + 2] * x2 + w1[i + 3] * x3;
        }
        for (; i < n_in; ++i) {
            a0 += w0[i] * (int32_t)x[i];
            a1 += w1[i] * (int32_t)x[i];
        }
        y[o] = gxt_requant16(a0, m[o], s[o], lo, hi);
        y[o + 1] = gxt_requant16(a1, m[o + 1], s[o + 1], lo, hi);
    }
    for (; o < n_out; ++o) {
        const int8_t *wr = w + (long)o * n_in;
        int32_t acc = b ? b[o] : 0;
        for (i = 0; i < n_in; ++i) acc += (int32_t)wr[i] * (int32_t)x[i];
        y[o] = gxt_requant16(acc, m[o], s[o], lo, hi);
    }
}

static inline void gxt_lut16_vec(int16_t *x, int n, const int16_t *lut)
{
    int i;
    for (i = 0; i < n; ++i) x[i] = gxt_lut16(x[i], lut);
}

/* Our integer layer norm (TFLite has none; docs/esp32.md): x int16 (D) -> y int16 (D). */
static inline void gxt_layernorm16(const int16_t *x, int d, const int32_t *m, const int8_t *s, const int32_t *beta,
                                   int32_t eps, int16_t *y)
{
    int i;
    int32_t sum = 0, mean, a;
    int64_t var = 0, inv;
    uint32_t sd;
    for (i = 0; i < d; ++i) sum += x[i];
    a = sum < 0 ? -sum : sum;
    mean = (a + d / 2) / d;
    if (sum < 0) mean = -mean;
    for (i = 0; i < d; ++i) {
        int32_t e = (int32_t)x[i] - mean;
        var += (int64_t)e * e;
    }
    var = var / d + eps;
    if (var < 1) var = 1;
    sd = gx_isqrt64((uint64_t)var << 16);
    inv = (((int64_t)1 << 38) + (sd >> 1)) / sd;
    for (i = 0; i < d; ++i) {
        int32_t e = (int32_t)x[i] - mean;
        int32_t n = (int32_t)(((int64_t)e * inv + (1 << 17)) >> 18);
        y[i] = gx_sat16(gx_mbqm(n, m[i], s[i]) + beta[i]);
    }
}

/* y = sat16(y + a), elementwise. */
static inline void gxt_add16(int16_t *y, const int16_t *a, int n)
{
    int i;
    for (i = 0; i < n; ++i) y[i] = gx_sat16((int32_t)y[i] + (int32_t)a[i]);
}

/* One head of attention over n cached positions (cache rows `stride` int16 apart):
 * scores = MBQM64(q . k_t) (int16), masked keys (mask[t] != 0) get -32768, Q0.15 softmax, y = MBQM(sum p_t v_t).
 * scratch holds n int16. */
static inline void gxt_attend16(const int16_t *q, const int16_t *kc, const int16_t *vc, int n, int hd, int stride,
                                int32_t sc_m, int sc_s, int32_t sm_m, int sm_s, int32_t y_m, int y_s,
                                const int16_t *exp_lut, const int16_t *recip_lut, const uint8_t *mask,
                                int16_t *scratch, int16_t *y)
{
    int t, j;
    for (t = 0; t < n; ++t) {
        const int16_t *kr = kc + (long)t * stride;
        int64_t acc = 0;
        int32_t v;
        for (j = 0; j < hd; ++j) acc += (int32_t)q[j] * (int32_t)kr[j];
        v = gx_mbqm64(acc, sc_m, sc_s);
        scratch[t] = (mask && mask[t]) ? (int16_t)-32768 : gx_sat16(v);
    }
    gxt_softmax16(scratch, n, sm_m, sm_s, exp_lut, recip_lut, scratch);
    for (j = 0; j < hd; ++j) {
        int32_t acc = 0;
        for (t = 0; t < n; ++t) acc += (int32_t)scratch[t] * (int32_t)vc[(long)t * stride + j];
        y[j] = gx_sat16(gx_mbqm(acc, y_m, y_s));
    }
}

/* First index of the maximum. */
static inline int gxt_argmax16(const int16_t *x, int n)
{
    int i, best = 0;
    for (i = 1; i < n; ++i) if (x[i] > x[best]) best = i;
    return best;
}

#endif /* GX_TEXT_KERNELS_H */
