/* gx_kernels16.h: 16x8 kernels of grpo-edge's ESP32 models (int16 activations, zero point 0; int8
 * weights), TFLite Micro's int16 rules bit for bit. Copied unchanged next to a generated 16x8 model.
 * Uses the fixed-point helpers and gx_requant_t of gx_kernels.h.
 */
#ifndef GX_KERNELS16_H
#define GX_KERNELS16_H

#include <stdint.h>
#include "gx_kernels.h"

/* ------------------------------------------------------------------ fully connected, 16x8 */

typedef struct {
    int n_in, n_out;
    const int8_t *weights;      /* [n_out][n_in] */
    gx_requant_t q;             /* int32 bias, out_offset 0, act range within int16 */
} gx_fc16_t;

/* out[o] = requant(bias[o] + sum_k w[o][k] * in[k]): int16 x int8 into an int32 accumulator that
 * the generator proved cannot overflow (TFLM: an int32 bias selects the int32 accumulator). */
GX_INLINE void gx_fc16(const gx_fc16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_FC_BODY(int16_t, 0);
}

/* ------------------------------------------------------------------ tanh, int16 */

typedef struct {
    int n;
    int32_t mult;               /* input rescale to 1/(3*4096) per LSB: v = (x * mult + round) >> left_shift */
    int left_shift;
    int wide;                   /* 1: 32768 * mult may overflow int32: rescale in int64, clamp to +-65535 */
    const uint16_t *table;      /* TFLite's sigmoid_table_uint16 (256 entries) */
} gx_tanh16_t;

/* TFLM's int16 tanh (reference/integer_ops/tanh.h): sigmoid(2y) from the table with linear
 * interpolation, out = 2 s - 1 at scale 2^-15. |v| >= 65280 reads the saturated end either way. */
GX_INLINE void gx_tanh16(const gx_tanh16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    const int32_t rnd = p->left_shift > 0 ? ((int32_t)1 << (p->left_shift - 1)) : 0;
    int k;
    for (k = 0; k < p->n; ++k) {
        int32_t v, a, uh, r;
        if (p->wide) {
            const int64_t v64 = ((int64_t)in[k] * p->mult + rnd) >> p->left_shift;
            v = v64 > 65535 ? 65535 : (v64 < -65535 ? -65535 : (int32_t)v64);
        } else {
            v = ((int32_t)in[k] * p->mult + rnd) >> p->left_shift;
        }
        a = v < 0 ? -v : v;
        uh = a >> 8;
        if (uh >= 255) {
            r = 0xFFFF << 8;
        } else {
            const int32_t ua = p->table[uh], ub = p->table[uh + 1];
            r = (ua << 8) + (a & 0xFF) * (ub - ua);
        }
        r = v >= 0 ? r - (1 << 23) + (1 << 7) : -r + (1 << 23) + (1 << 7) - 1;
        out[k] = (int16_t)(r >> 8);
    }
}

/* ------------------------------------------------------------------ sigmoid, int16 */

/* TFLM's int16 logistic (reference/integer_ops/logistic.h): the same table as tanh, one entry per 512
 * input steps, interpolated; out = sigmoid at scale 2^-15. Shares gx_tanh16_t (wide: rescale in int64). */
GX_INLINE void gx_sigmoid16(const gx_tanh16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    const int32_t rnd = p->left_shift > 0 ? ((int32_t)1 << (p->left_shift - 1)) : 0;
    int k;
    for (k = 0; k < p->n; ++k) {
        int32_t v;
        uint32_t a, uh, r;
        if (p->wide) {
            const int64_t v64 = ((int64_t)in[k] * p->mult + rnd) >> p->left_shift;
            v = v64 > 2147483647 ? 2147483647 : (v64 < -2147483647 ? -2147483647 : (int32_t)v64);
        } else {
            v = ((int32_t)in[k] * p->mult + rnd) >> p->left_shift;
        }
        a = (uint32_t)(v < 0 ? -v : v);
        uh = a >> 9;
        if (uh >= 255) {
            r = (uint32_t)0x7FFF << 10;
        } else {
            const uint32_t ua = p->table[uh], ub = p->table[uh + 1];
            r = (ua << 9) + (a & 0x1FF) * (ub - ua);
        }
        r = v >= 0 ? r + (1u << 9) : (1u << (16 + 9)) - r + (1u << 9) - 1;
        out[k] = (int16_t)(r >> 10);
    }
}

/* ------------------------------------------------------------------ relu / clip / requantize, int16 */

typedef struct {
    int n;
    int32_t mult;               /* s_in / s_out as a quantized multiplier (zero points 0) */
    int shift;
    int32_t act_min, act_max;   /* the clip's bounds on the output grid (or the int16 range) */
} gx_requant16_t;

/* out[k] = clamp(mbqm(in[k])): TFLite's Requantize, then the bounds. out may be in. */
GX_INLINE void gx_requant16(const gx_requant16_t *p, const int16_t *in, int16_t *out)
{
    int k;
    for (k = 0; k < p->n; ++k)
        out[k] = (int16_t)gx_clamp(gx_mbqm(in[k], p->mult, p->shift), p->act_min, p->act_max);
}

/* ------------------------------------------------------------------ add, int16 */

/* ADD 16x8 (TFLM add_common.cc with left_shift 15, zero points 0): out may be a or b. */
GX_INLINE void gx_add16(const gx_add_t *p, const int16_t *a, const int16_t *b, int16_t *out)
{
    int k;
    for (k = 0; k < p->n; ++k) {
        const int32_t x1 = (int32_t)((uint32_t)(int32_t)a[k] << p->left_shift);
        const int32_t x2 = (int32_t)((uint32_t)(int32_t)b[k] << p->left_shift);
        const int32_t s = gx_mbqm(x1, p->in1_mult, p->in1_shift) + gx_mbqm(x2, p->in2_mult, p->in2_shift);
        out[k] = (int16_t)gx_clamp(gx_mbqm(s, p->out_mult, p->out_shift), p->act_min, p->act_max);
    }
}

/* ------------------------------------------------------------------ argmax over int16 */

/* First index of the maximum of n int16 values, stored as int8. */
GX_INLINE void gx_argmax16(int n, const int16_t *restrict in, int8_t *restrict out)
{
    int k, best = 0;
    for (k = 1; k < n; ++k) if (in[k] > in[best]) best = k;
    out[0] = (int8_t)best;
}

#endif /* GX_KERNELS16_H */
