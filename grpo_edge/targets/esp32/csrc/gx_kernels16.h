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

/* The same for a 16x8 .tflite's int64 bias: TFLite's int64 requantization of the (proved) int32 sum. */
GX_INLINE void gx_fc16_r64(const gx_fc16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_FC_BODY_R(int16_t, 0, gx_requant64);
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

/* ------------------------------------------------------------------ any function as a table, int16 */

typedef struct {
    int n;
    int log2_step;              /* codes per entry: 2^log2_step (4..7) */
    const int16_t *table;       /* f at the codes -32768 + j 2^log2_step, j = 0 .. 2^(16 - log2_step) */
    int n_exact;                /* segments stored code by code (a kink, a saturation) */
    const int16_t *exact_segment;   /* their indices j */
    const int16_t *exact;           /* [n_exact][2^log2_step] */
} gx_lut16_t;

/* ops/lut.py lut16 (ours; TFLM has no int16 kernel for these functions): the entry below and above the
 * code, linearly interpolated with rounding, unless the segment is one stored code by code. out may be in. */
GX_INLINE void gx_lut16(const gx_lut16_t *p, const int16_t *in, int16_t *out)
{
    const int32_t ks = p->log2_step, mask = ((int32_t)1 << ks) - 1, half = (int32_t)1 << (ks - 1);
    int i;
    for (i = 0; i < p->n; ++i) {
        const int32_t u = (int32_t)in[i] + 32768, j = u >> ks, r = u & mask;
        int e = 0;
        while (e < p->n_exact && p->exact_segment[e] != j) ++e;
        if (e < p->n_exact) {
            out[i] = p->exact[(e << ks) + r];
        } else {
            const int32_t a = p->table[j], b = p->table[j + 1];
            out[i] = (int16_t)(a + (((b - a) * r + half) >> ks));
        }
    }
}

/* ------------------------------------------------------------------ leaky relu, int16 */

typedef struct {
    int n;
    int32_t mult_identity, mult_alpha;  /* s_in / s_out and alpha s_in / s_out (zero points 0) */
    int shift_identity, shift_alpha;
} gx_leakyrelu16_t;

/* TFLM's LEAKY_RELU at int16: x >= 0 rescaled by the identity multiplier, x < 0 by alpha's. out may be in. */
GX_INLINE void gx_leakyrelu16(const gx_leakyrelu16_t *p, const int16_t *in, int16_t *out)
{
    int i;
    for (i = 0; i < p->n; ++i) {
        const int32_t x = in[i];
        out[i] = (int16_t)gx_clamp(x >= 0 ? gx_mbqm(x, p->mult_identity, p->shift_identity)
                                          : gx_mbqm(x, p->mult_alpha, p->shift_alpha), -32768, 32767);
    }
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

/* ------------------------------------------------------------------ multiply, int16 */

/* TFLM's MUL at int16 (zero points 0): the product of two int16 values fits int32. */
GX_INLINE void gx_mul16(const gx_mul_t *p, const int16_t *restrict a, const int16_t *restrict b,
                        int16_t *restrict out)
{
    GX_MUL_BODY(int16_t);
}

/* ------------------------------------------------------------------ constant pad, int16 */

typedef struct {
    int dims[4], out_dims[4], begin[4];     /* rank padded to 4 with leading 1s */
    int32_t value;                           /* the pad value's int16 code */
    int32_t mult;                            /* 0: copy; else the input's rescale to the output (TFLite's Requantize) */
    int shift;
} gx_pad16_t;

GX_INLINE void gx_pad16(const gx_pad16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
#define GX_PAD16_MAP(v) (p->mult ? (int16_t)gx_clamp(gx_mbqm((v), p->mult, p->shift), -32768, 32767) : (v))
    GX_PAD_BODY(int16_t, GX_PAD16_MAP);
#undef GX_PAD16_MAP
}

/* ------------------------------------------------------------------ pooling, int16 */

/* MAX_POOL_2D, AVERAGE_POOL_2D and MEAN at int16 (TFLM's int8 rules with zero points 0; the sum of a window
 * of int16 fits int32 for the windows ops/pool.py accepts). */
GX_INLINE void gx_pool16(const gx_pool_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_POOL_BODY(int16_t, -32769, 0);
}

/* ------------------------------------------------------------------ layer norm, int16 */

/* Layer norm, int16 in and out (ops/layer_norm.py, ours): e = d x - sum(x), v = (sum e^2 + eps) / d, scaled
 * by 4^t so that sigma = isqrt(v 4^t) = std(e) 2^t lies in [2^30, 2^31); n = round(e floor(2^62 / sigma)
 * / 2^(46 - t)) = the normalized value in Q16, then out = requant(n gamma + beta). */
GX_INLINE void gx_layernorm16(const gx_layernorm_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    int r, k;
    for (r = 0; r < p->rows; ++r) {
        const int16_t *x = in + (long)r * p->d;
        int16_t *y = out + (long)r * p->d;
        int64_t sum = 0, rec;
        uint64_t ss = 0, v;
        uint32_t sigma;
        int t = 31, bits = 0, sh;
        for (k = 0; k < p->d; ++k) sum += x[k];
        for (k = 0; k < p->d; ++k) {
            const int64_t e = (int64_t)p->d * x[k] - sum;
            ss += (uint64_t)(e * e);
        }
        v = (ss + (uint64_t)p->eps) / (uint64_t)p->d;
        while (bits < 64 && (v >> bits) != 0) ++bits;
        if (bits) t = (62 - bits) / 2;
        sigma = gx_isqrt64(v << (2 * t));
        rec = sigma ? (int64_t)(((uint64_t)1 << 62) / sigma) : 0;
        sh = 46 - t;
        for (k = 0; k < p->d; ++k) {
            const int64_t e = (int64_t)p->d * x[k] - sum;
            const int32_t n = (int32_t)((e * rec + ((int64_t)1 << (sh - 1))) >> sh);
            y[k] = (int16_t)gx_requant(n * (int32_t)p->gamma[k] + p->q.bias[k], &p->q, k);
        }
    }
}

/* ------------------------------------------------------------------ transpose, int16 */

GX_INLINE void gx_transpose16(const gx_transpose_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_TRANSPOSE_BODY();
}

/* ------------------------------------------------------------------ concatenation, int16 */

/* One input of a 16x8 concatenation (ops/concat.py): `outer` blocks of `inner` values, block o copied to
 * out + o * out_inner, rescaled to the output's scale when mult is not 0 (TFLite's Requantize). */
GX_INLINE void gx_concat_part16(int32_t mult, int shift, int outer, int inner, int out_inner,
                                const int16_t *restrict in, int16_t *restrict out)
{
    int o, k;
    for (o = 0; o < outer; ++o)
        for (k = 0; k < inner; ++k) {
            const int16_t v = in[(long)o * inner + k];
            out[(long)o * out_inner + k] = mult ? (int16_t)gx_clamp(gx_mbqm(v, mult, shift), -32768, 32767) : v;
        }
}

/* ------------------------------------------------------------------ log-softmax, int16 */

/* TFLite's int8 LOG_SOFTMAX arithmetic over int16 inputs (zero point 0), the Q5.26 result at 2^-10 (ours:
 * TFLM has no int16 log-softmax; ops/softmax.py). */
typedef gx_log_softmax_t gx_log_softmax16_t;

/* The differences scaled in 64 bits: round(d mult / 2^(31 - shift)), saturated (log_softmax_ref.scale16). */
GX_INLINE int32_t gx_lsm_scale16(const gx_log_softmax16_t *p, int32_t d)
{
    const int rs = 31 - p->input_left_shift;
    const int64_t v = ((int64_t)d * p->input_mult + ((int64_t)1 << (rs - 1))) >> rs;
    return v < INT32_MIN ? INT32_MIN : (v > INT32_MAX ? INT32_MAX : (int32_t)v);
}

/* The sum of exponentials and its log as the int8 kernel computes them; d - log(sum) in int64, rounded to
 * 10 fractional bits and clamped (log_softmax_ref.log_softmax_int16). */
GX_INLINE void gx_log_softmax16(const gx_log_softmax16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    int r, c;
    for (r = 0; r < p->rows; ++r) {
        const int16_t *x = in + r * p->n;
        int16_t *o = out + r * p->n;
        int32_t mx = -32768, sum = 0, log_sum;
        for (c = 0; c < p->n; ++c) if (x[c] > mx) mx = x[c];
        for (c = 0; c < p->n; ++c) {
            const int32_t d = (int32_t)x[c] - mx;
            if (d >= p->diff_min) sum = gx_wadd(sum, gx_rdbpot(gx_sm_exp(gx_lsm_scale16(p, d)), 12));
        }
        log_sum = gx_lsm_log(sum);
        for (c = 0; c < p->n; ++c) {
            const int32_t d = (int32_t)x[c] - mx;
            int64_t v, rem;
            if (d < p->diff_min) { o[c] = -32768; continue; }
            v = (int64_t)gx_lsm_scale16(p, d) - log_sum;
            rem = v & 0xFFFF;
            v = (v >> 16) + (rem > 0x7FFF + (v < 0 ? 1 : 0) ? 1 : 0);
            o[c] = (int16_t)(v < -32768 ? -32768 : (v > 32767 ? 32767 : v));
        }
    }
}

/* ------------------------------------------------------------------ convolution, 16x8 */

/* One output pixel of output channels o .. o + n - 1 (n = 1 or 4, one group) over the kernel rows ky0..ky1 and
 * columns kx0..kx1 inside the image: acc[j] += sum w x. Four channels share each input load. */
GX_INLINE void gx_conv16_pixel(const gx_conv_t *p, const int16_t *restrict xg, int o, int n, int iy0, int ix0,
                               int ky0, int ky1, int kx0, int kx1, int32_t *acc)
{
    const int cg = p->c / p->groups, taps = p->kh * p->kw;
    const int8_t *w0 = p->weights + (long)o * cg * taps;
    int c, ky, kx;
    for (c = 0; c < cg; ++c, w0 += taps, xg += (long)p->h * p->w) {
        for (ky = ky0; ky < ky1; ++ky) {
            const long r = (long)(iy0 + ky * p->dh) * p->w + ix0;
            const int8_t *wr = w0 + ky * p->kw;
            if (n == 4) {
                const long stride = (long)cg * taps;
                for (kx = kx0; kx < kx1; ++kx) {
                    const int32_t x = xg[r + kx * p->dw];
                    acc[0] += (int32_t)wr[kx] * x;
                    acc[1] += (int32_t)wr[kx + stride] * x;
                    acc[2] += (int32_t)wr[kx + 2 * stride] * x;
                    acc[3] += (int32_t)wr[kx + 3 * stride] * x;
                }
            } else {
                for (kx = kx0; kx < kx1; ++kx) acc[0] += (int32_t)wr[kx] * xg[r + kx * p->dw];
            }
        }
    }
}

/* Conv / depthwise / grouped conv over int16 NCHW (zero point 0) with int8 weights: taps in the padding are
 * skipped (the kernel rows and columns inside the image are found once per output row and pixel, so the inner
 * loops have no bounds checks), acc = bias + sum(w x) in an int32 accumulator the generator proved cannot
 * overflow (as gx_fc16; TFLM: an int32 bias selects the int32 accumulator), then the per-channel
 * requantization REQ; four output channels at a time where a group has a multiple of four. No scratch. */
#define GX_CONV16_BODY(REQ)                                                                                     \
    do {                                                                                                        \
        const int cg = p->c / p->groups, ocg = p->oc / p->groups, step = ocg % 4 == 0 ? 4 : 1;                  \
        int o, oy, ox, j;                                                                                       \
        for (o = 0; o < p->oc; o += step) {                                                                     \
            const int16_t *xg = in + (long)(o / ocg) * cg * p->h * p->w;                                        \
            for (oy = 0; oy < p->oh; ++oy) {                                                                    \
                const int iy0 = oy * p->sh - p->pad_t;                                                          \
                int ky0 = 0, ky1 = p->kh;                                                                       \
                while (ky0 < ky1 && iy0 + ky0 * p->dh < 0) ++ky0;                                               \
                while (ky1 > ky0 && iy0 + (ky1 - 1) * p->dh >= p->h) --ky1;                                     \
                for (ox = 0; ox < p->ow; ++ox) {                                                                \
                    const int ix0 = ox * p->sw - p->pad_l;                                                      \
                    int kx0 = 0, kx1 = p->kw;                                                                   \
                    int32_t acc[4];                                                                             \
                    while (kx0 < kx1 && ix0 + kx0 * p->dw < 0) ++kx0;                                           \
                    while (kx1 > kx0 && ix0 + (kx1 - 1) * p->dw >= p->w) --kx1;                                 \
                    for (j = 0; j < step; ++j) acc[j] = p->q.bias[o + j];                                       \
                    gx_conv16_pixel(p, xg, o, step, iy0, ix0, ky0, ky1, kx0, kx1, acc);                         \
                    for (j = 0; j < step; ++j)                                                                  \
                        out[((long)(o + j) * p->oh + oy) * p->ow + ox] = (int16_t)REQ(acc[j], &p->q, o + j);    \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    } while (0)

GX_INLINE void gx_conv16(const gx_conv_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_CONV16_BODY(gx_requant);
}

/* The same for a 16x8 .tflite's int64 bias: TFLite's int64 requantization of the (proved) int32 sum. */
GX_INLINE void gx_conv16_r64(const gx_conv_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    GX_CONV16_BODY(gx_requant64);
}

/* ------------------------------------------------------------------ softmax and matmul, int16 */

typedef struct {
    int rows, n;                /* softmax over the last axis of rows x n */
    int32_t mult;               /* input scale * beta / (10 / 65535) (TFLite SoftmaxPrepare, int16) */
    int shift;
    const int16_t *exp_lut, *recip_lut;     /* TFLite's 513-entry exp and 1 / (1 + x) tables */
} gx_softmax16_t;

/* TFLite's SoftmaxInt16 row by row (gxt_softmax16 in gx_fixedpoint.h): Q0.15 probabilities. */
GX_INLINE void gx_softmax16(const gx_softmax16_t *p, const int16_t *restrict in, int16_t *restrict out)
{
    int r;
    for (r = 0; r < p->rows; ++r)
        gxt_softmax16(in + (long)r * p->n, p->n, p->mult, p->shift, p->exp_lut, p->recip_lut, out + (long)r * p->n);
}

/* MatMul of two int16 activations (zero points 0): the products summed in int64, requantized with TFLite's
 * int64 MultiplyByQuantizedMultiplier (gx_mbqm64: the multiplier reduced to 16 bits, one rounding shift),
 * TFLite's rule for its 16x8 kernels with int64 accumulators. */
GX_INLINE void gx_matmul16(const gx_matmul_t *p, const int16_t *restrict a, const int16_t *restrict b,
                           int16_t *restrict out)
{
    int t, i, j, k;
    for (t = 0; t < p->batches; ++t) {
        const int16_t *at = a + (long)t * p->m * p->k, *bt = b + (long)t * p->k * p->n;
        int16_t *ot = out + (long)t * p->m * p->n;
        for (i = 0; i < p->m; ++i)
            for (j = 0; j < p->n; ++j) {
                int64_t acc = 0;
                for (k = 0; k < p->k; ++k) acc += (int32_t)at[i * p->k + k] * (int32_t)bt[k * p->n + j];
                ot[i * p->n + j] = (int16_t)gx_clamp(gx_mbqm64(acc, p->mult, p->shift), p->act_min, p->act_max);
            }
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
