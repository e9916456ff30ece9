/* gx_kernels.h: int8 kernels of grpo-edge's ESP32 models (C99, no malloc, no libc).
 *
 * Part of grpo-edge (grpo_edge/targets/esp32/csrc); copied unchanged next to every generated
 * <prefix>_model.c, which holds only data (weights, per-channel requantization, one params struct
 * per op), the arena plan and the calls.
 *
 * Arithmetic: TFLite / TFLite Micro int8 rules, bit for bit (docs/esp32.md): per-channel
 * MultiplyByQuantizedMultiplier with DOUBLE rounding (TFLM's default), int32 accumulators,
 * activations NCHW (the ONNX layout), weights int8 in ONNX layout.
 *
 * Every kernel is `GX_INLINE void gx_<op>(const gx_<op>_t *p, inputs..., outputs...)` (static inline,
 * always_inline under GCC); the params structs are plain data that the generator writes as `static
 * const` objects. Inputs and outputs never overlap, except in gx_lut, gx_add and a depthwise 1x1 gx_conv,
 * whose output may be written over a same-sized input (out[k] depends on element k only; planner.py
 * decides when).
 */
#ifndef GX_KERNELS_H
#define GX_KERNELS_H

#include <stdint.h>
#include "gx_fixedpoint.h"     /* GX_INLINE, requantization, saturation */

/* Per-output-channel requantization: out = clamp(mbqm(acc, mult[c], shift[c]) + out_offset). */
typedef struct {
    const int32_t *bias;        /* [channels] int32; for fc/conv: bias + input_offset * sum(w[c]) (folded) */
    const int32_t *mult;        /* [channels] */
    const int8_t *shift;        /* [channels] */
    int32_t out_offset;         /* output zero point */
    int32_t act_min, act_max;   /* fused activation range, within the output type */
} gx_requant_t;

GX_INLINE int32_t gx_requant(int32_t acc, const gx_requant_t *q, int c)
{
    return gx_clamp(gx_mbqm(acc, q->mult[c], q->shift[c]) + q->out_offset, q->act_min, q->act_max);
}

/* The same with TFLite's int64 MultiplyByQuantizedMultiplier (a 16x8 .tflite's int64 bias selects it in TFLM;
 * the int32 accumulator equals TFLM's int64 one: the generator proved it cannot overflow). */
GX_INLINE int32_t gx_requant64(int32_t acc, const gx_requant_t *q, int c)
{
    return gx_clamp(gx_mbqm64(acc, q->mult[c], q->shift[c]) + q->out_offset, q->act_min, q->act_max);
}

/* ------------------------------------------------------------------ fully connected */

typedef struct {
    int n_in, n_out;
    int32_t in_offset;          /* -input zero point when NOT folded into q.bias, else 0 */
    const int8_t *weights;      /* [n_out][n_in] */
    gx_requant_t q;
} gx_fc_t;

/* The fully connected loop of gx_fc (int8) and gx_fc16 (16x8), with p, in and out in scope: out[o] =
 * requant(bias[o] + sum_k w[o][k] * (in[k] + OFF)) as OUT_T. 4 rows at a time (each input loaded once per 4
 * multiply-adds; 2 taps per loop turn, 4 spill on rv32), then the last n_out % 4 rows one by one. OFF is the
 * input offset (0 for 16x8: the compiler drops the add). */
#define GX_FC_TAP(j, OFF)                                                        \
    do {                                                                         \
        const int32_t x_ = (int32_t)in[k + (j)] + (OFF);                         \
        a0 += (int32_t)w0[j] * x_;                                               \
        a1 += (int32_t)w1[j] * x_;                                               \
        a2 += (int32_t)w2[j] * x_;                                               \
        a3 += (int32_t)w3[j] * x_;                                               \
    } while (0)

#define GX_FC_BODY(OUT_T, OFF) GX_FC_BODY_R(OUT_T, OFF, gx_requant)
#define GX_FC_BODY_R(OUT_T, OFF, REQ)                                                                       \
    do {                                                                                                    \
        const int n = p->n_in;                                                                              \
        const int n4 = p->n_out & ~3;                                                                       \
        int o, k;                                                                                           \
        for (o = 0; o < n4; o += 4) {                                                                       \
            const int8_t *w0 = p->weights + o * n, *w1 = w0 + n, *w2 = w1 + n, *w3 = w2 + n;                \
            int32_t a0 = p->q.bias[o], a1 = p->q.bias[o + 1], a2 = p->q.bias[o + 2], a3 = p->q.bias[o + 3]; \
            for (k = 0; k + 2 <= n; k += 2, w0 += 2, w1 += 2, w2 += 2, w3 += 2) {                           \
                GX_FC_TAP(0, OFF); GX_FC_TAP(1, OFF);                                                       \
            }                                                                                               \
            for (; k < n; ++k, ++w0, ++w1, ++w2, ++w3) GX_FC_TAP(0, OFF);                                   \
            out[o] = (OUT_T)REQ(a0, &p->q, o);                                                              \
            out[o + 1] = (OUT_T)REQ(a1, &p->q, o + 1);                                                      \
            out[o + 2] = (OUT_T)REQ(a2, &p->q, o + 2);                                                      \
            out[o + 3] = (OUT_T)REQ(a3, &p->q, o + 3);                                                      \
        }                                                                                                   \
        for (o = n4; o < p->n_out; ++o) {                                                                   \
            const int8_t *w = p->weights + o * n;                                                           \
            int32_t acc = p->q.bias[o];                                                                     \
            for (k = 0; k < n; ++k) acc += (int32_t)w[k] * ((int32_t)in[k] + (OFF));                        \
            out[o] = (OUT_T)REQ(acc, &p->q, o);                                                             \
        }                                                                                                   \
    } while (0)

/* out[o] = requant(bias[o] + sum_k w[o][k] * (in[k] + in_offset)). */
GX_INLINE void gx_fc(const gx_fc_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    const int32_t off = p->in_offset;
    GX_FC_BODY(int8_t, off);
}

/* ------------------------------------------------------------------ convolution */

typedef struct {
    int c, h, w;                /* input channels, height, width */
    int oc, oh, ow;             /* output */
    int kh, kw;                 /* kernel */
    int sh, sw, dh, dw;         /* strides, dilations */
    int pad_t, pad_l;           /* top / left padding (bottom / right follow from oh, ow) */
    int groups;                 /* 1: conv; c: depthwise; any divisor of c and oc */
    int32_t pad_value;          /* input zero point: there x + input_offset == 0, TFLite's skipped tap */
    const int8_t *weights;      /* [oc][c / groups][kh][kw] */
    gx_requant_t q;             /* bias folded: bias + input_offset * sum(w[oc]) */
    int in_nhwc;                /* 1: the input is NHWC (a .tflite's model input, read as it is; groups 1) */
    int plane;                  /* 1: a depthwise conv the planner runs in place: output planes built in scratch */
} gx_conv_t;

/* Bytes of scratch gx_conv needs: two im2col columns of cg * kh * kw taps each. */
#define GX_CONV_SCRATCH(cg, kh, kw) (2 * (cg) * (kh) * (kw))

/* im2col of one output pixel of one group into every other byte of col (col[2 t] = tap t, taps in
 * weight order ic, ky, kx); taps in the padding read pad_value. Pixels whose window lies inside the
 * image (all but the border) copy without bounds checks. */
GX_INLINE void gx_im2col(const gx_conv_t *p, const int8_t *restrict xg, int cg, int pix,
                             int8_t *restrict col)
{
    const int oy = pix / p->ow, ox = pix - oy * p->ow;
    const int y0 = oy * p->sh - p->pad_t, x0 = ox * p->sw - p->pad_l;
    const int hw = p->h * p->w;
    const int8_t pad = (int8_t)p->pad_value;
    int ic, ky, kx;
    if (y0 >= 0 && x0 >= 0 && y0 + (p->kh - 1) * p->dh < p->h && x0 + (p->kw - 1) * p->dw < p->w) {
        const int8_t *src = xg + y0 * p->w + x0;
        if (p->kh == 1 && p->kw == 1) {                      /* 1x1: a strided gather of channels */
            for (ic = 0; ic < cg; ++ic, src += hw, col += 2) col[0] = src[0];
            return;
        }
        for (ic = 0; ic < cg; ++ic, src += hw)
            for (ky = 0; ky < p->kh; ++ky) {
                const int8_t *row = src + ky * p->dh * p->w;
                for (kx = 0; kx < p->kw; ++kx, col += 2) col[0] = row[kx * p->dw];
            }
        return;
    }
    {   /* border pixel: the taps inside the image are kx0 <= kx < kx1, ky0 <= ky < ky1 */
        int kx0 = x0 < 0 ? (p->dw - 1 - x0) / p->dw : 0, ky0 = y0 < 0 ? (p->dh - 1 - y0) / p->dh : 0;
        int kx1 = p->kw, ky1 = p->kh;
        if (x0 + (p->kw - 1) * p->dw >= p->w) kx1 = p->w > x0 ? (p->w - x0 + p->dw - 1) / p->dw : 0;
        if (y0 + (p->kh - 1) * p->dh >= p->h) ky1 = p->h > y0 ? (p->h - y0 + p->dh - 1) / p->dh : 0;
        if (kx0 > p->kw) kx0 = p->kw;
        if (kx1 < kx0) kx1 = kx0;
        for (ic = 0; ic < cg; ++ic)
            for (ky = 0; ky < p->kh; ++ky) {
                int at;                                   /* index of tap kx in the channel */
                if (ky < ky0 || ky >= ky1) {
                    for (kx = 0; kx < p->kw; ++kx, col += 2) col[0] = pad;
                    continue;
                }
                for (kx = 0; kx < kx0; ++kx, col += 2) col[0] = pad;
                at = ic * hw + (y0 + ky * p->dh) * p->w + x0 + kx * p->dw;
                for (; kx < kx1; ++kx, col += 2, at += p->dw) col[0] = xg[at];
                for (; kx < p->kw; ++kx, col += 2) col[0] = pad;
            }
    }
}

/* gx_im2col over an NHWC input (groups 1): the same columns, tap t = (ic, ky, kx) read at (y, x, ic). */
GX_INLINE void gx_im2col_nhwc(const gx_conv_t *p, const int8_t *restrict x, int pix, int8_t *restrict col)
{
    const int oy = pix / p->ow, ox = pix - oy * p->ow;
    const int y0 = oy * p->sh - p->pad_t, x0 = ox * p->sw - p->pad_l;
    const int8_t pad = (int8_t)p->pad_value;
    int ic, ky, kx;
    for (ic = 0; ic < p->c; ++ic)
        for (ky = 0; ky < p->kh; ++ky) {
            const int y = y0 + ky * p->dh;
            for (kx = 0; kx < p->kw; ++kx, col += 2) {
                const int xx = x0 + kx * p->dw;
                col[0] = (y < 0 || y >= p->h || xx < 0 || xx >= p->w) ? pad : x[(y * p->w + xx) * p->c + ic];
            }
        }
}

/* Output channels per register block: 4 (8 accumulators) for 32-register cores (RISC-V: ESP32-C3/C6);
 * 2 where they would spill. */
#ifndef GX_CONV_ROWS
#define GX_CONV_ROWS 4
#endif

/* One tap j of the 4x2 block: 4 weights x 2 pixels, 8 multiply-adds. */
#define GX_TAP4X2(j)                                                             \
    do {                                                                         \
        const int32_t x0_ = xc[2 * (j)], x1_ = xc[2 * (j) + 1];                  \
        int32_t t_;                                                              \
        t_ = w0[j]; a00 += t_ * x0_; a01 += t_ * x1_;                            \
        t_ = w1[j]; a10 += t_ * x0_; a11 += t_ * x1_;                            \
        t_ = w2[j]; a20 += t_ * x0_; a21 += t_ * x1_;                            \
        t_ = w3[j]; a30 += t_ * x0_; a31 += t_ * x1_;                            \
    } while (0)

/* Output channels oc0 .. oc0 + n - 1 at two pixels whose interleaved im2col columns are in col
 * (K taps): blocks of 4 channels x 2 pixels accumulate in 8 registers, 2 taps per loop turn (4 spill
 * registers on rv32); each
 * weight is loaded once per pixel pair. o points at out[oc0][pixel 0]; two == 0 stores pixel 0 only. */
GX_INLINE void gx_conv_cols(const gx_conv_t *p, int oc0, int n, int K, const int8_t *restrict col,
                                int8_t *restrict o, int ohw, int two)
{
    const gx_requant_t *q = &p->q;
    int r = 0, k;
    for (; GX_CONV_ROWS == 4 && r + 4 <= n; r += 4, o += 4 * ohw) {
        const int c = oc0 + r;
        const int8_t *w0 = p->weights + c * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        const int8_t *xc = col;
        int32_t a00 = q->bias[c], a10 = q->bias[c + 1], a20 = q->bias[c + 2], a30 = q->bias[c + 3];
        int32_t a01 = a00, a11 = a10, a21 = a20, a31 = a30;
        for (k = K >> 1; k; --k, w0 += 2, w1 += 2, w2 += 2, w3 += 2, xc += 4) {
            GX_TAP4X2(0); GX_TAP4X2(1);
        }
        if (K & 1) GX_TAP4X2(0);
        o[0] = (int8_t)gx_requant(a00, q, c);
        o[ohw] = (int8_t)gx_requant(a10, q, c + 1);
        o[2 * ohw] = (int8_t)gx_requant(a20, q, c + 2);
        o[3 * ohw] = (int8_t)gx_requant(a30, q, c + 3);
        if (two) {
            o[1] = (int8_t)gx_requant(a01, q, c);
            o[ohw + 1] = (int8_t)gx_requant(a11, q, c + 1);
            o[2 * ohw + 1] = (int8_t)gx_requant(a21, q, c + 2);
            o[3 * ohw + 1] = (int8_t)gx_requant(a31, q, c + 3);
        }
    }
    for (; r + 2 <= n; r += 2, o += 2 * ohw) {                /* 2 channels x 2 pixels */
        const int c = oc0 + r;
        const int8_t *w0 = p->weights + c * K, *w1 = w0 + K, *xc = col;
        int32_t a00 = q->bias[c], a10 = q->bias[c + 1], a01 = a00, a11 = a10;
        for (k = K; k; --k, ++w0, ++w1, xc += 2) {
            const int32_t x0 = xc[0], x1 = xc[1], t0 = *w0, t1 = *w1;
            a00 += t0 * x0; a01 += t0 * x1;
            a10 += t1 * x0; a11 += t1 * x1;
        }
        o[0] = (int8_t)gx_requant(a00, q, c);
        o[ohw] = (int8_t)gx_requant(a10, q, c + 1);
        if (two) {
            o[1] = (int8_t)gx_requant(a01, q, c);
            o[ohw + 1] = (int8_t)gx_requant(a11, q, c + 1);
        }
    }
    if (r < n) {                                              /* the last odd channel */
        const int c = oc0 + r;
        const int8_t *w = p->weights + c * K, *xc = col;
        int32_t a0 = q->bias[c], a1 = a0;
        for (k = K; k; --k, ++w, xc += 2) {
            const int32_t t = *w;
            a0 += t * xc[0];
            a1 += t * xc[1];
        }
        o[0] = (int8_t)gx_requant(a0, q, c);
        if (two) o[1] = (int8_t)gx_requant(a1, q, c);
    }
}
#undef GX_TAP4X2

/* Conv / depthwise / grouped conv, NCHW, as a matrix product: per group and pair of output pixels,
 * im2col both pixels into scratch (GX_CONV_SCRATCH bytes, interleaved), then every output channel of
 * the group from those two columns. acc = folded bias + sum(w * x) over every tap, a tap in the
 * padding reading pad_value (x + input_offset == 0 there, TFLite's skipped tap). A depthwise 1x1 conv
 * of stride 1 without padding may write over its input (each pixel pair is read before it is written). */
GX_INLINE void gx_conv(const gx_conv_t *p, const int8_t *in, int8_t *out, int8_t *restrict scratch)
{
    const int cg = p->c / p->groups, ocg = p->oc / p->groups, K = cg * p->kh * p->kw;
    const int ohw = p->oh * p->ow;
    /* In place (the planner's choice, ops/conv.py in_place): a depthwise conv builds each channel's output plane
     * after the im2col columns, then copies it over its own input plane, which no later channel reads. */
    int8_t *plane = p->plane ? scratch + GX_CONV_SCRATCH(cg, p->kh, p->kw) : 0;
    int g, pix, k;
    for (g = 0; g < p->groups; ++g) {
        const int8_t *xg = in + g * cg * p->h * p->w;
        int8_t *og = out + g * ocg * ohw;
        int8_t *dst = plane ? plane : og;
        for (pix = 0; pix < ohw; pix += 2) {
            const int two = pix + 1 < ohw;
            if (p->in_nhwc) {
                gx_im2col_nhwc(p, in, pix, scratch);
                gx_im2col_nhwc(p, in, two ? pix + 1 : pix, scratch + 1);
            } else {
                gx_im2col(p, xg, cg, pix, scratch);
                gx_im2col(p, xg, cg, two ? pix + 1 : pix, scratch + 1);
            }
            gx_conv_cols(p, g * ocg, ocg, K, scratch, dst + pix, ohw, two);
        }
        if (plane)
            for (k = 0; k < ocg * ohw; ++k) og[k] = plane[k];
    }
}

/* ------------------------------------------------------------------ conv, NHWC */

/* Conv and depthwise conv over NHWC images (the TFLite layout, which ESP-NN's kernels take): TFLite's
 * arithmetic as it is written, acc = bias + sum over the taps inside the image of w * (x + in_offset).
 * Weights: a conv [oc][kh][kw][c] (OHWI), a depthwise [kh][kw][oc] (TFLite's 1HWO), oc = c * depth_mult. */
typedef struct {
    int c, h, w, oc, oh, ow, kh, kw, sh, sw, dh, dw, pad_t, pad_l;
    int depth_mult;             /* 0: a conv; else a depthwise conv with this channel multiplier */
    int32_t in_offset;          /* -input zero point */
    const int8_t *weights;
    gx_requant_t q;             /* q.bias: the plain int32 bias */
} gx_conv_nhwc_t;

/* Bytes of scratch gx_conv_nhwc needs: a depthwise conv's oc int32 accumulators. */
#define GX_CONV_NHWC_SCRATCH(depthwise, oc) ((depthwise) ? 4 * (oc) : 0)

GX_INLINE void gx_conv_nhwc(const gx_conv_nhwc_t *p, const int8_t *in, int8_t *out, int32_t *restrict acc)
{
    const int C = p->c, OC = p->oc, M = p->depth_mult;
    int oy, ox, ky, kx, ic, oc, m;
    for (oy = 0; oy < p->oh; ++oy) {
        const int y0 = oy * p->sh - p->pad_t;
        for (ox = 0; ox < p->ow; ++ox, out += OC) {
            const int x0 = ox * p->sw - p->pad_l;
            if (M) {                                  /* depthwise: every channel of the pixel at once */
                for (oc = 0; oc < OC; ++oc) acc[oc] = p->q.bias[oc];
                for (ky = 0; ky < p->kh; ++ky) {
                    const int y = y0 + ky * p->dh;
                    if (y < 0 || y >= p->h) continue;
                    for (kx = 0; kx < p->kw; ++kx) {
                        const int x = x0 + kx * p->dw;
                        const int8_t *xp = in + (y * p->w + x) * C, *wp = p->weights + (ky * p->kw + kx) * OC;
                        int32_t *a = acc;
                        if (x < 0 || x >= p->w) continue;
                        for (ic = 0; ic < C; ++ic) {
                            const int32_t v = xp[ic] + p->in_offset;
                            for (m = 0; m < M; ++m) *a++ += *wp++ * v;
                        }
                    }
                }
                for (oc = 0; oc < OC; ++oc) out[oc] = (int8_t)gx_requant(acc[oc], &p->q, oc);
                continue;
            }
            for (oc = 0; oc < OC; ++oc) {             /* a conv: one dot product per output channel */
                const int8_t *wo = p->weights + oc * p->kh * p->kw * C;
                int32_t a = p->q.bias[oc];
                for (ky = 0; ky < p->kh; ++ky) {
                    const int y = y0 + ky * p->dh;
                    if (y < 0 || y >= p->h) continue;
                    for (kx = 0; kx < p->kw; ++kx) {
                        const int x = x0 + kx * p->dw;
                        const int8_t *xp = in + (y * p->w + x) * C, *wp = wo + (ky * p->kw + kx) * C;
                        if (x < 0 || x >= p->w) continue;
                        for (ic = 0; ic < C; ++ic) a += wp[ic] * (xp[ic] + p->in_offset);
                    }
                }
                out[oc] = (int8_t)gx_requant(a, &p->q, oc);
            }
        }
    }
}

/* ------------------------------------------------------------------ add */

typedef struct {
    int n;                      /* elements */
    int32_t in1_offset, in2_offset, left_shift;
    int32_t in1_mult, in2_mult, out_mult;
    int in1_shift, in2_shift, out_shift;
    int32_t out_offset, act_min, act_max;
} gx_add_t;

/* ADD int8 (TFLM add_common.cc): both inputs << left_shift, rescaled to a common scale, summed, rescaled. */
GX_INLINE void gx_add(const gx_add_t *p, const int8_t *a, const int8_t *b, int8_t *out)   /* out may be a or b */
{
    int k;
    for (k = 0; k < p->n; ++k) {
        const int32_t x1 = (int32_t)((uint32_t)((int32_t)a[k] + p->in1_offset) << p->left_shift);
        const int32_t x2 = (int32_t)((uint32_t)((int32_t)b[k] + p->in2_offset) << p->left_shift);
        const int32_t s = gx_mbqm(x1, p->in1_mult, p->in1_shift) + gx_mbqm(x2, p->in2_mult, p->in2_shift);
        out[k] = (int8_t)gx_clamp(gx_mbqm(s, p->out_mult, p->out_shift) + p->out_offset, p->act_min, p->act_max);
    }
}

/* ------------------------------------------------------------------ matmul of two activations */

typedef struct {
    int batches, m, k, n;       /* a: [batches][m][k], b: [batches][k][n], out: [batches][m][n] */
    int32_t a_offset, b_offset; /* -zero points */
    int32_t mult;
    int shift;
    int32_t out_offset, act_min, act_max;
} gx_matmul_t;

/* out = requant(sum_k (a + a_offset)(b + b_offset)), one multiplier (ops/matmul.py: attention's q k^T and
 * a v; TFLite BATCH_MATMUL's rule). */
GX_INLINE void gx_matmul(const gx_matmul_t *p, const int8_t *restrict a, const int8_t *restrict b,
                         int8_t *restrict out)
{
    int t, i, j, k;
    for (t = 0; t < p->batches; ++t) {
        const int8_t *at = a + (long)t * p->m * p->k, *bt = b + (long)t * p->k * p->n;
        int8_t *ot = out + (long)t * p->m * p->n;
        for (i = 0; i < p->m; ++i)
            for (j = 0; j < p->n; ++j) {
                int32_t acc = 0;
                for (k = 0; k < p->k; ++k)
                    acc += ((int32_t)at[i * p->k + k] + p->a_offset) * ((int32_t)bt[k * p->n + j] + p->b_offset);
                ot[i * p->n + j] = (int8_t)gx_clamp(gx_mbqm(acc, p->mult, p->shift) + p->out_offset,
                                                    p->act_min, p->act_max);
            }
    }
}

/* ------------------------------------------------------------------ constant pad */

typedef struct {
    int dims[4], out_dims[4], begin[4];     /* rank padded to 4 with leading 1s */
    int32_t value;                           /* the pad value's int8 code */
    const int8_t *table;                     /* 0, or the input's requantization to the output's parameters */
} gx_pad_t;

/* out = value everywhere, then each input row (the last axis) copied to its place through MAP (the element
 * type T; int8 and int16, gx_kernels16.h). */
#define GX_PAD_BODY(T, MAP)                                                                                 \
    do {                                                                                                    \
        const long n = (long)p->out_dims[0] * p->out_dims[1] * p->out_dims[2] * p->out_dims[3];            \
        long k;                                                                                             \
        int a, b, c, d;                                                                                     \
        for (k = 0; k < n; ++k) out[k] = (T)p->value;                                                       \
        for (a = 0; a < p->dims[0]; ++a)                                                                    \
            for (b = 0; b < p->dims[1]; ++b)                                                                \
                for (c = 0; c < p->dims[2]; ++c) {                                                          \
                    const T *src = in + (((long)a * p->dims[1] + b) * p->dims[2] + c) * p->dims[3];         \
                    T *dst = out + ((((long)(a + p->begin[0]) * p->out_dims[1] + b + p->begin[1])           \
                                     * p->out_dims[2] + c + p->begin[2]) * p->out_dims[3] + p->begin[3]);   \
                    for (d = 0; d < p->dims[3]; ++d) dst[d] = MAP(src[d]);                                  \
                }                                                                                           \
    } while (0)

/* The int8 pad: through table when the output's parameters differ from the input's (ops/pad.py). */
GX_INLINE void gx_pad(const gx_pad_t *p, const int8_t *restrict in, int8_t *restrict out)
{
#define GX_PAD8_MAP(v) (p->table ? p->table[(v) + 128] : (v))
    GX_PAD_BODY(int8_t, GX_PAD8_MAP);
#undef GX_PAD8_MAP
}

/* ------------------------------------------------------------------ elementwise multiply */

typedef struct {
    int dims[4];                /* output shape, rank padded to 4 */
    long a_stride[4], b_stride[4];  /* each input's strides over the output axes (0 where it broadcasts) */
    int32_t a_offset, b_offset, mult;
    int shift;
    int32_t out_offset, act_min, act_max;
} gx_mul_t;

/* out = clamp(mbqm((a + a_offset)(b + b_offset)) + out_offset), b or a broadcast, elements of type T
 * (TFLite MUL's rule at int8 and int16; ops/mul.py: a squeeze-excitation gate, a product of two branches). */
#define GX_MUL_BODY(T)                                                                                      \
    do {                                                                                                    \
        int i, j, k, l;                                                                                     \
        long o = 0;                                                                                         \
        for (i = 0; i < p->dims[0]; ++i)                                                                    \
            for (j = 0; j < p->dims[1]; ++j)                                                                \
                for (k = 0; k < p->dims[2]; ++k)                                                            \
                    for (l = 0; l < p->dims[3]; ++l) {                                                      \
                        const int32_t x = (int32_t)a[i * p->a_stride[0] + j * p->a_stride[1]                \
                                                     + k * p->a_stride[2] + l * p->a_stride[3]] + p->a_offset; \
                        const int32_t y = (int32_t)b[i * p->b_stride[0] + j * p->b_stride[1]                \
                                                     + k * p->b_stride[2] + l * p->b_stride[3]] + p->b_offset; \
                        out[o++] = (T)gx_clamp(gx_mbqm(x * y, p->mult, p->shift) + p->out_offset,           \
                                               p->act_min, p->act_max);                                     \
                    }                                                                                       \
    } while (0)

GX_INLINE void gx_mul(const gx_mul_t *p, const int8_t *restrict a, const int8_t *restrict b, int8_t *restrict out)
{
    GX_MUL_BODY(int8_t);
}

/* ------------------------------------------------------------------ transpose */

typedef struct {
    int dims[4];                /* output shape, rank padded to 4 with leading 1s */
    long stride[4];             /* input stride of each output axis */
} gx_transpose_t;

/* out (row-major, dims) [a][b][c][d] = in[a s0 + b s1 + c s2 + d s3] (ops/transpose.py); any element type. */
#define GX_TRANSPOSE_BODY()                                                                                 \
    do {                                                                                                    \
        int a, b, c, d;                                                                                     \
        long k = 0;                                                                                         \
        for (a = 0; a < p->dims[0]; ++a)                                                                    \
            for (b = 0; b < p->dims[1]; ++b)                                                                \
                for (c = 0; c < p->dims[2]; ++c)                                                            \
                    for (d = 0; d < p->dims[3]; ++d)                                                        \
                        out[k++] = in[a * p->stride[0] + b * p->stride[1] + c * p->stride[2] + d * p->stride[3]]; \
    } while (0)

GX_INLINE void gx_transpose(const gx_transpose_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    GX_TRANSPOSE_BODY();
}

/* ------------------------------------------------------------------ concatenation */

/* One input of a concatenation (ops/concat.py): `outer` blocks of `inner` values, block o copied to
 * out + o * out_inner, through `table` (a requantization to the output's parameters) when not 0. */
GX_INLINE void gx_concat_part(const int8_t *table, int outer, int inner, int out_inner,
                              const int8_t *restrict in, int8_t *restrict out)
{
    int o, k;
    for (o = 0; o < outer; ++o)
        for (k = 0; k < inner; ++k) {
            const int8_t v = in[(long)o * inner + k];
            out[(long)o * out_inner + k] = table ? table[v + 128] : v;
        }
}

/* ------------------------------------------------------------------ slice (one output of a Split) */

/* out[o][k] = in[o][k] for `outer` blocks: `inner` values out of every `in_inner` (in already at the slice's
 * start; ops/split.py). */
GX_INLINE void gx_slice(int outer, int inner, int in_inner, const int8_t *restrict in, int8_t *restrict out)
{
    int o, k;
    for (o = 0; o < outer; ++o)
        for (k = 0; k < inner; ++k) out[(long)o * inner + k] = in[(long)o * in_inner + k];
}

GX_INLINE void gx_slice16(int outer, int inner, int in_inner, const int16_t *restrict in, int16_t *restrict out)
{
    int o, k;
    for (o = 0; o < outer; ++o)
        for (k = 0; k < inner; ++k) out[(long)o * inner + k] = in[(long)o * in_inner + k];
}

/* ------------------------------------------------------------------ embedding (token ids -> table rows) */

/* out[t] = table[ids[t]]: n rows of d int8 out of a rows x d table; an id outside 0 .. rows - 1 reads the
 * nearest row (ops/embedding.py). */
GX_INLINE void gx_embedding(const int8_t *table, int rows, int d, int n, const int32_t *restrict ids,
                            int8_t *restrict out)
{
    int t, k;
    for (t = 0; t < n; ++t) {
        const int32_t r = ids[t] < 0 ? 0 : (ids[t] >= rows ? rows - 1 : ids[t]);
        for (k = 0; k < d; ++k) out[(long)t * d + k] = table[(long)r * d + k];
    }
}

/* ------------------------------------------------------------------ layer norm */

typedef struct {
    int rows, d;                /* vectors normalized over their last axis, their length (<= 1024) */
    int64_t eps;                /* d^3 * epsilon / s_in^2, rounded: epsilon in the units of e below */
    const int8_t *gamma;        /* [d] int8 */
    gx_requant_t q;             /* bias: beta in units of gamma x 2^-16; per-channel s_gamma / (s_out 2^16) */
} gx_layernorm_t;

/* Layer norm, int8 in and out (ops/layer_norm.py; TFLite has no such op): e = d x - sum(x) (the zero point
 * cancels), sigma = isqrt(((sum e^2 + eps) << 16) / d) = std(e) 2^8, n = round(e 2^40 / sigma / 2^16)
 * = the normalized value in Q16, then out = requant(n gamma + beta). */
GX_INLINE void gx_layernorm(const gx_layernorm_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    int r, k;
    for (r = 0; r < p->rows; ++r) {
        const int8_t *x = in + (long)r * p->d;
        int8_t *y = out + (long)r * p->d;
        int32_t sum = 0;
        int64_t ss = 0, rec;
        uint32_t sigma;
        for (k = 0; k < p->d; ++k) sum += x[k];
        for (k = 0; k < p->d; ++k) {
            const int64_t e = (int64_t)p->d * x[k] - sum;
            ss += e * e;
        }
        sigma = gx_isqrt64((uint64_t)(ss + p->eps) * 65536u / (uint64_t)p->d);
        rec = sigma ? (int64_t)(((uint64_t)1 << 40) / sigma) : 0;
        for (k = 0; k < p->d; ++k) {
            const int64_t e = (int64_t)p->d * x[k] - sum;
            const int32_t n = (int32_t)((e * rec + 32768) >> 16);
            y[k] = (int8_t)gx_requant(n * (int32_t)p->gamma[k] + p->q.bias[k], &p->q, k);
        }
    }
}

/* ------------------------------------------------------------------ elementwise table */

/* out[k] = table[in[k] + 128]: tanh, sigmoid, relu, clip or a requantization as 256 entries. */
GX_INLINE void gx_lut(const int8_t *table, int n, const int8_t *in, int8_t *out)   /* out may be in */
{
    int k;
    for (k = 0; k < n; ++k) out[k] = table[(int32_t)in[k] + 128];
}

/* ------------------------------------------------------------------ pooling */

enum { GX_POOL_MAX = 0, GX_POOL_AVG_ROUND = 1, GX_POOL_MEAN = 2 };

typedef struct {
    int c, h, w, oh, ow;
    int kh, kw, sh, sw, pad_t, pad_l;
    int mode;                   /* GX_POOL_MAX | GX_POOL_AVG_ROUND (AVERAGE_POOL_2D) | GX_POOL_MEAN (MEAN) */
    int32_t mean_mult;          /* GX_POOL_MEAN: 1/count folded in */
    int mean_shift;
    int32_t mean_sub;           /* GX_POOL_MEAN: input zero point * count */
    int32_t out_offset;         /* GX_POOL_MEAN */
    int32_t act_min, act_max;
} gx_pool_t;

/* Taps in the padding are skipped (max: ignored; average: not counted). Elements of type T, MAX_INIT below
 * T's range (int8 here, int16 in gx_kernels16.h); NHWC 0: images NCHW, 1: NHWC (a literal: the compiler
 * drops the other indexing). */
#define GX_POOL_BODY(T, MAX_INIT, NHWC)                                                                     \
    do {                                                                                                    \
        int c, oy, ox, y, x;                                                                                \
        const int ps_ = (NHWC) ? p->c : 1;            /* distance between two pixels of a channel */        \
        for (c = 0; c < p->c; ++c) {                                                                        \
            const T *xc = (NHWC) ? in + c : in + c * p->h * p->w;                                           \
            for (oy = 0; oy < p->oh; ++oy) {                                                                \
                const int iy0 = oy * p->sh - p->pad_t;                                                      \
                const int y0 = iy0 < 0 ? 0 : iy0;                                                           \
                const int y1 = iy0 + p->kh > p->h ? p->h : iy0 + p->kh;                                     \
                for (ox = 0; ox < p->ow; ++ox) {                                                            \
                    const int ix0 = ox * p->sw - p->pad_l;                                                  \
                    const int x0 = ix0 < 0 ? 0 : ix0;                                                       \
                    const int x1 = ix0 + p->kw > p->w ? p->w : ix0 + p->kw;                                 \
                    int32_t acc = p->mode == GX_POOL_MAX ? (MAX_INIT) : 0, v;                               \
                    for (y = y0; y < y1; ++y)                                                               \
                        for (x = x0; x < x1; ++x) {                                                         \
                            const int32_t q = xc[(y * p->w + x) * ps_];                                     \
                            if (p->mode == GX_POOL_MAX) {                                                   \
                                if (q > acc) acc = q;                                                       \
                            } else {                                                                        \
                                acc += q;                                                                   \
                            }                                                                               \
                        }                                                                                   \
                    if (p->mode == GX_POOL_MAX) {                                                           \
                        v = acc;                                                                            \
                    } else if (p->mode == GX_POOL_AVG_ROUND) {                                              \
                        const int32_t n = (int32_t)((y1 - y0) * (x1 - x0));                                 \
                        v = acc > 0 ? (acc + n / 2) / n : (acc - n / 2) / n;                                \
                    } else {                                                                                \
                        v = gx_mbqm(acc - p->mean_sub, p->mean_mult, p->mean_shift) + p->out_offset;        \
                    }                                                                                       \
                    out[(NHWC) ? (oy * p->ow + ox) * p->c + c : (c * p->oh + oy) * p->ow + ox] =            \
                        (T)gx_clamp(v, p->act_min, p->act_max);                                             \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    } while (0)

GX_INLINE void gx_pool(const gx_pool_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    GX_POOL_BODY(int8_t, -129, 0);
}

/* The same over NHWC images (a .tflite's layout, for ESP-NN on the S3). */
GX_INLINE void gx_pool_nhwc(const gx_pool_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    GX_POOL_BODY(int8_t, -129, 1);
}

/* ------------------------------------------------------------------ argmax */

/* ARG_MAX over n int8 values; ties go to the first index. */
GX_INLINE void gx_argmax(int n, const int8_t *restrict in, int8_t *restrict out)
{
    int k, best = 0;
    for (k = 1; k < n; ++k) if (in[k] > in[best]) best = k;
    out[0] = (int8_t)best;
}

/* ------------------------------------------------------------------ softmax (TFLite int8) */

typedef struct {
    int rows, n;                /* softmax over the last axis of rows x n */
    int32_t diff_min, input_mult;
    int input_left_shift;
    int tflite_output;          /* 1: output scale 1/256, zero point -128; 0: requantize with out_* */
    int32_t out_mult;
    int out_shift;
    int32_t out_offset;
    const uint8_t *mask;        /* NULL, or rows x n: 1 where a score takes part (an attention mask) */
} gx_softmax_t;

/* gemmlowp exp_on_negative_values, Q5.26 -> Q0.31. */
GX_INLINE int32_t gx_sm_exp(int32_t a)
{
    const int32_t a_mod = (a & ((1 << 24) - 1)) - (1 << 24);
    const int32_t x = (int32_t)((uint32_t)a_mod << 5) + (1 << 28);
    const int32_t x2 = gx_srdhm(x, x), x3 = gx_srdhm(x2, x), x4 = gx_srdhm(x2, x2);
    const int32_t poly = gx_rdbpot(gx_srdhm(gx_rdbpot(x4, 2) + x3, 715827883) + x2, 1);
    const int32_t rem = a_mod - a;
    int32_t r = 1895147668 + gx_srdhm(1895147668, x + poly);
    if (rem & (1 << 24)) r = gx_srdhm(r, 1672461947);
    if (rem & (1 << 25)) r = gx_srdhm(r, 1302514674);
    if (rem & (1 << 26)) r = gx_srdhm(r, 790015084);
    if (rem & (1 << 27)) r = gx_srdhm(r, 290630308);
    if (rem & (1 << 28)) r = gx_srdhm(r, 39332535);
    if (rem & (1 << 29)) r = gx_srdhm(r, 720401);
    if (rem & (1 << 30)) r = gx_srdhm(r, 242);
    return a == 0 ? INT32_MAX : r;
}

/* Saturating x * 2^e. */
GX_INLINE int32_t gx_sm_shl(int32_t x, int e)
{
    const int32_t thr = (int32_t)(((int64_t)1 << (31 - e)) - 1);
    if (x > thr) return INT32_MAX;
    if (x < -thr) return INT32_MIN;
    return (int32_t)((uint32_t)x << e);
}

/* Leading zeros of a 32-bit word (32 for 0). */
GX_INLINE int gx_clz32(uint32_t u)
{
    int n = 0;
    if (!u) return 32;
    while (!(u & 0x80000000u)) { u <<= 1; ++n; }
    return n;
}

/* gemmlowp RoundingHalfSum: (a + b +- 1) / 2, truncating. */
GX_INLINE int32_t gx_half_sum(int32_t a, int32_t b)
{
    const int64_t s = (int64_t)a + b;
    return (int32_t)((s + (s >= 0 ? 1 : -1)) / 2);
}

/* gemmlowp one_over_one_plus_x_for_x_in_0_1: Q0.31 a in [0, 1) -> Q0.31 1 / (1 + a) (Newton-Raphson). */
GX_INLINE int32_t gx_sm_one_over(int32_t a)
{
    const int32_t half = gx_half_sum(a, INT32_MAX);
    int32_t x = 1515870810 + gx_srdhm(half, -1010580540);
    int i;
    for (i = 0; i < 3; ++i)
        x = x + gx_sm_shl(gx_srdhm(x, (1 << 29) - gx_srdhm(half, x)), 2);
    return gx_sm_shl(x, 1);
}

/* TFLite GetReciprocal with 12 integer bits. */
GX_INLINE int32_t gx_sm_recip(int32_t sum, int *bits_over_unit)
{
    const int clz = gx_clz32((uint32_t)sum);
    *bits_over_unit = 12 - clz;
    return gx_sm_one_over((int32_t)(((uint32_t)sum << clz) - 0x80000000u));
}

GX_INLINE int32_t gx_sm_e(const gx_softmax_t *p, int32_t d, int attend)
{
    return attend && d >= p->diff_min
        ? gx_sm_exp(gx_srdhm((int32_t)((uint32_t)d << p->input_left_shift), p->input_mult)) : 0;
}

/* SOFTMAX int8 (TFLite reference_integer_ops softmax); exp values are recomputed in the last pass,
 * so no scratch buffer is needed. */
GX_INLINE void gx_softmax(const gx_softmax_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    int r, c, bits;
    for (r = 0; r < p->rows; ++r) {
        const int8_t *x = in + r * p->n;
        const uint8_t *m = p->mask ? p->mask + r * p->n : 0;
        int8_t *o = out + r * p->n;
        int32_t mx = -129, sum = 0, recip, v;
        for (c = 0; c < p->n; ++c) if ((!m || m[c]) && x[c] > mx) mx = x[c];
        for (c = 0; c < p->n; ++c) sum += gx_rdbpot(gx_sm_e(p, (int32_t)x[c] - mx, !m || m[c]), 12);
        if (sum == 0) { for (c = 0; c < p->n; ++c) o[c] = -128; continue; }     /* every score masked */
        recip = gx_sm_recip(sum, &bits);
        for (c = 0; c < p->n; ++c) {
            const int32_t d = (int32_t)x[c] - mx;
            const int32_t e = gx_sm_e(p, d, !m || m[c]);
            if (d < p->diff_min || (m && !m[c])) { o[c] = -128; continue; }
            if (p->tflite_output)
                v = gx_rdbpot(gx_srdhm(recip, e), bits + 23) - 128;
            else
                v = gx_mbqm(gx_rdbpot(gx_srdhm(recip, e), bits + 15), p->out_mult, p->out_shift) + p->out_offset;
            o[c] = (int8_t)gx_clamp(v, -128, 127);
        }
    }
}

/* ------------------------------------------------------------------ log-softmax (TFLite int8) */

typedef struct {
    int rows, n;                /* log-softmax over the last axis of rows x n */
    int32_t diff_min, input_mult;
    int input_left_shift;
    int32_t reverse_mult;       /* Q5.26 back to input steps: the most negative difference that fits */
    int reverse_shift;          /* output: scale 16/256, zero point 127 (TFLite's) */
} gx_log_softmax_t;

GX_INLINE int32_t gx_wadd(int32_t a, int32_t b)
{
    return (int32_t)((uint32_t)a + (uint32_t)b);
}

GX_INLINE int32_t gx_sat_add(int64_t v)
{
    return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : (int32_t)v);
}

/* log(z) of a Q12.19 z >= 1 -> Q5.26 (TFLite log_x_for_x_greater_than_or_equal_to_1<5>: z = 2^k r, the
 * power of two split in two ways and the closer kept, log r by a rational approximation). */
GX_INLINE int32_t gx_lsm_log(int32_t z)
{
    const int32_t quarter = 8388608, sqrt_half = 1518500250, sqrt_sqrt_half = 1805811301;   /* 1/4 in Q6.25 */
    const int hr_a = gx_clz32((uint32_t)z);
    const int32_t r_a = gx_sm_shl(gx_srdhm(gx_sm_shl(z, hr_a - 1), sqrt_half), 1);
    const int32_t pow_a = gx_sat_add((int64_t)gx_sm_shl(12 - hr_a, 25) + quarter);
    const int hr_b = gx_clz32((uint32_t)gx_srdhm(z, sqrt_half)) - 1;
    const int32_t r_b = gx_sm_shl(z, hr_b);
    const int32_t pow_b = gx_sat_add((int64_t)gx_sm_shl(12 - hr_b, 25) - quarter);
    const int32_t r = r_a < r_b ? r_a : r_b, z_pow = pow_a > pow_b ? pow_a : pow_b;
    const int32_t p = gx_half_sum(r, sqrt_sqrt_half);
    const int32_t q = gx_wadd(gx_wadd(r, -sqrt_sqrt_half), gx_wadd(r, -sqrt_sqrt_half));
    const int32_t sq = gx_srdhm(q, q);
    const int32_t num = gx_wadd(gx_srdhm(q, r), gx_srdhm(gx_srdhm(q, sq), 117049297));
    const int32_t den = gx_wadd(gx_srdhm(p, gx_wadd(gx_wadd(1057819769, q), gx_srdhm(127690142, sq))),
                                gx_srdhm(638450708, q));
    return gx_sm_shl(gx_wadd(gx_srdhm(z_pow, 1488522236), gx_srdhm(gx_rdbpot(num, 6), gx_sm_one_over(den))), 1);
}

/* LOG_SOFTMAX int8 (TFLite reference_integer_ops::LogSoftmax); scaled differences recomputed in the last
 * pass, so no scratch buffer. */
GX_INLINE void gx_log_softmax(const gx_log_softmax_t *p, const int8_t *restrict in, int8_t *restrict out)
{
    int r, c;
    for (r = 0; r < p->rows; ++r) {
        const int8_t *x = in + r * p->n;
        int8_t *o = out + r * p->n;
        int32_t mx = -128, sum = 0, log_sum, adjusted, v;
        for (c = 0; c < p->n; ++c) if (x[c] > mx) mx = x[c];
        for (c = 0; c < p->n; ++c) {
            const int32_t d = (int32_t)x[c] - mx;
            if (d >= p->diff_min)
                sum = gx_wadd(sum, gx_rdbpot(gx_sm_exp(gx_mbqm(d, p->input_mult, p->input_left_shift)), 12));
        }
        log_sum = gx_lsm_log(sum);
        adjusted = gx_mbqm(gx_wadd(log_sum, INT32_MIN), p->reverse_mult, p->reverse_shift);
        if (adjusted < p->diff_min - 1) adjusted = p->diff_min - 1;
        for (c = 0; c < p->n; ++c) {
            const int32_t d = (int32_t)x[c] - mx;
            if (d <= adjusted) { o[c] = -128; continue; }
            v = gx_rdbpot(gx_mbqm(d, p->input_mult, p->input_left_shift) - log_sum, 22) + 127;
            o[c] = (int8_t)gx_clamp(v, -128, 127);
        }
    }
}

#endif /* GX_KERNELS_H */
