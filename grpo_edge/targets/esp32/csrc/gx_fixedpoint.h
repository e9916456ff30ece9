/* gx_fixedpoint.h: the fixed-point arithmetic every grpo-edge ESP32 kernel uses, vector (gx_kernels.h,
 * gx_kernels16.h) and text (gx_text_kernels.h): TFLite's requantization rules bit for bit (docs/esp32.md),
 * saturation, and the FNV-1a hash of the test vectors. C99, <stdint.h> only; NumPy twins in
 * grpo_edge/targets/esp32/fixedpoint.py.
 */
#ifndef GX_FIXEDPOINT_H
#define GX_FIXEDPOINT_H

#include <stdint.h>

/* Every kernel is inlined at its call site: the generated invoke() passes `static const` params
 * structs, so the compiler sees each op's shapes and offsets as constants (loop bounds, strides)
 * as if the kernel had been written for that op. Define GX_INLINE as `static inline` to keep one
 * out-of-line copy per kernel instead (less code, more instructions per MAC). */
#ifndef GX_INLINE
#if defined(__GNUC__)
#define GX_INLINE static inline __attribute__((always_inline))
#else
#define GX_INLINE static inline
#endif
#endif

/* SaturatingRoundingDoublingHighMul: TFLite's (ab + nudge) / 2^31 with nudge = 2^30 for ab >= 0 and
 * 1 - 2^30 below, truncating toward zero. For ab < 0 that truncation is a ceiling, and
 * ceil((ab + 1 - 2^30) / 2^31) = floor((ab + 2^30) / 2^31), so both signs are one arithmetic shift
 * (>> on a negative int64 is arithmetic in gcc and clang, like the int32 ones below). */
GX_INLINE int32_t gx_srdhm(int32_t a, int32_t b)
{
    if (a == b && a == INT32_MIN) return INT32_MAX;
    return (int32_t)(((int64_t)a * (int64_t)b + ((int64_t)1 << 30)) >> 31);
}

/* RoundingDivideByPOT: x / 2^e rounding half away from zero. */
GX_INLINE int32_t gx_rdbpot(int32_t x, int e)
{
    const int32_t mask = (int32_t)(((int64_t)1 << e) - 1);
    const int32_t rem = x & mask;
    const int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > thr ? 1 : 0);   /* >> on a negative int32 is arithmetic (gcc) */
}

/* gx_rdbpot for 0 <= e <= 31 (every requantization shift): the mask in 32 bits. */
GX_INLINE int32_t gx_rdbpot31(int32_t x, int e)
{
    const int32_t mask = (int32_t)((1u << e) - 1u);
    const int32_t rem = x & mask;
    const int32_t thr = (mask >> 1) + (x < 0 ? 1 : 0);
    return (x >> e) + (rem > thr ? 1 : 0);
}

/* MultiplyByQuantizedMultiplier, double rounding (TFLM default); shift in [-31, 31]. */
GX_INLINE int32_t gx_mbqm(int32_t x, int32_t m, int shift)
{
    const int left = shift > 0 ? shift : 0;
    const int right = shift > 0 ? 0 : -shift;
    return gx_rdbpot31(gx_srdhm((int32_t)((uint32_t)x << left), m), right);
}

/* MultiplyByQuantizedMultiplier for an int64 accumulator (TFLite's 16x8 kernels with an int64 acc):
 * the multiplier reduced to 16 bits, one rounding shift. */
GX_INLINE int32_t gx_mbqm64(int64_t x, int32_t m, int shift)
{
    const int32_t reduced = m < 0x7FFF0000 ? ((m + (1 << 15)) >> 16) : 0x7FFF;
    const int total = 15 - shift;
    const int64_t round = (int64_t)1 << (total - 1);
    return (int32_t)((x * reduced + round) >> total);
}

/* floor(sqrt(v)), exact, bit by bit (the layer norm's standard deviation; fixedpoint.isqrt). */
GX_INLINE uint32_t gx_isqrt64(uint64_t v)
{
    uint64_t r = 0, bit = (uint64_t)1 << 62;
    while (bit > v) bit >>= 2;
    while (bit) {
        if (v >= r + bit) {
            v -= r + bit;
            r = (r >> 1) + bit;
        } else {
            r >>= 1;
        }
        bit >>= 2;
    }
    return (uint32_t)r;
}

GX_INLINE int32_t gx_clamp(int32_t v, int32_t lo, int32_t hi)
{
    return v < lo ? lo : (v > hi ? hi : v);
}

GX_INLINE int16_t gx_sat16(int32_t v)
{
    return (int16_t)(v < -32768 ? -32768 : (v > 32767 ? 32767 : v));
}

/* FNV-1a over bytes (test vectors, logit hashes). */
GX_INLINE uint32_t gx_fnv1a(uint32_t h, const void *data, int n)
{
    const uint8_t *p = (const uint8_t *)data;
    int i;
    for (i = 0; i < n; ++i) {
        h ^= p[i];
        h *= 16777619u;
    }
    return h;
}

/* ---- TFLite's int16 softmax (SoftmaxInt16) and its 513-entry tables, shared by the text kernels
 * (gx_text_kernels.h) and the 16x8 graph kernels (gx_kernels16.h). */

/* TFLite int16 table lookup with linear interpolation (513-entry table). */
static inline int16_t gxt_lut16(int16_t value, const int16_t *lut)
{
    uint16_t index = (uint16_t)(256 + (value >> 7));
    int16_t offset = (int16_t)(value & 0x7f);
    int16_t base = lut[index];
    int16_t slope = (int16_t)(lut[index + 1] - lut[index]);
    int16_t delta = (int16_t)(((int32_t)slope * offset + 64) >> 7);
    return (int16_t)(base + delta);
}

static inline int gxt_clz32(uint32_t x)
{
    int n = 0;
    if (x == 0) return 32;
    while (!(x & 0x80000000u)) {
        x <<= 1;
        ++n;
    }
    return n;
}

/* TFLite SoftmaxInt16 over n scores (int16) -> Q0.15 probabilities; out may alias x. */
static inline void gxt_softmax16(const int16_t *x, int n, int32_t m, int s, const int16_t *exp_lut,
                                 const int16_t *recip_lut, int16_t *out)
{
    int c, hp1, rs;
    int16_t mx = x[0], recip;
    int32_t sum = 0, shifted;
    int64_t round;
    for (c = 1; c < n; ++c) if (x[c] > mx) mx = x[c];
    for (c = 0; c < n; ++c) {
        int32_t scaled = gx_mbqm((int32_t)x[c] - (int32_t)mx, m, s);
        out[c] = gxt_lut16(gx_sat16(scaled + 32767), exp_lut);
        sum += out[c];
    }
    hp1 = gxt_clz32((uint32_t)sum);
    shifted = (int32_t)((((int64_t)sum << (hp1 - 1)) + (1 << 13)) >> 14);
    recip = gxt_lut16(gx_sat16(shifted - ((1 << 15) + (1 << 16))), recip_lut);
    rs = 31 - hp1;
    round = (int64_t)1 << (rs - 1);
    for (c = 0; c < n; ++c) {
        int64_t r = ((int64_t)out[c] * (int64_t)recip + round) >> rs;
        out[c] = (int16_t)(r < 0 ? 0 : (r > 32767 ? 32767 : r));
    }
}

#endif /* GX_FIXEDPOINT_H */
