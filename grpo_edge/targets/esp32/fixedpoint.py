"""Fixed-point primitives of TFLite's integer arithmetic (double rounding), shared by the int8, 16x8,
softmax and text references. NumPy only; each works on scalars and arrays, computing in int64 and
checking that what C holds in int32 fits."""
import math

import numpy as np

INT32_MIN = -(1 << 31)
INT32_MAX = (1 << 31) - 1



def round_half_away(x: float) -> int:
    """TfLiteRound / std::round: ties away from zero."""
    return int(math.floor(abs(x) + 0.5)) * (1 if x >= 0 else -1)


def quantize_multiplier(real: float):
    """QuantizeMultiplier (quantization_util.cc): real = q_fixed * 2^(shift - 31), q_fixed in [2^30, 2^31)."""
    if real == 0.0:
        return 0, 0
    q, shift = math.frexp(real)                 # real = q * 2^shift, q in [0.5, 1)
    q_fixed = round_half_away(q * (1 << 31))    # exact: q * 2^31 is a double scaling
    if q_fixed == (1 << 31):
        q_fixed //= 2
        shift += 1
    if shift < -31:
        return 0, 0
    return int(q_fixed), int(shift)


def round_f32(v):
    """std::round on float32 arrays, exactly: no (|v| + 0.5) rounding error near ties."""
    v = np.asarray(v, dtype=np.float32)
    a = np.abs(v)
    fl = np.floor(a)
    r = fl + (a - fl >= np.float32(0.5)).astype(np.float32)   # a - fl is exact in float32
    return np.where(v < 0, -r, r).astype(np.float32)


def f32(x) -> float:
    """Round a Python float to the nearest float32, as the C side stores scales."""
    return float(np.float32(x))


# ----------------------------------------------------------------------------- fixed point (vectorized)

def i64(x):
    return np.asarray(x, dtype=np.int64)


def check_int32(x, what):
    x = i64(x)
    if x.size and (x.min() < INT32_MIN or x.max() > INT32_MAX):
        raise OverflowError("%s overflows int32 (range %d..%d)" % (what, x.min(), x.max()))
    return x


def srdhm(a, b):
    """SaturatingRoundingDoublingHighMul on int32 values (as int64 arrays)."""
    a, b = i64(a), i64(b)
    ab = a * b                                              # |ab| <= 2^62: fits int64
    nudge = np.where(ab >= 0, np.int64(1 << 30), np.int64(1 - (1 << 30)))
    s = ab + nudge
    q = np.where(s >= 0, s >> 31, -((-s) >> 31))            # C division: truncate toward zero
    return np.where((a == INT32_MIN) & (b == INT32_MIN), np.int64(INT32_MAX), q)


def rounding_divide_by_pot(x, e):
    """RoundingDivideByPOT: x / 2^e rounded half away from zero, e in [0, 31]."""
    x, e = i64(x), i64(e)
    mask = (np.int64(1) << e) - 1
    rem = x & mask
    thr = (mask >> 1) + (x < 0).astype(np.int64)
    return (x >> e) + (rem > thr).astype(np.int64)


def wrap_int32(x):
    x = i64(x) & 0xFFFFFFFF
    return np.where(x >= (1 << 31), x - (1 << 32), x)


def mbqm(x, multiplier, shift):
    """MultiplyByQuantizedMultiplier, double rounding. x int32 values; multiplier/shift broadcast."""
    x, shift = i64(x), i64(shift)
    left = np.maximum(shift, 0)
    right = np.maximum(-shift, 0)
    shifted = wrap_int32(x << left)                          # C: (int32_t)((uint32_t)x << left)
    return rounding_divide_by_pot(srdhm(shifted, multiplier), right)


def clamp8(x, lo=-128, hi=127):
    return np.clip(i64(x), lo, hi).astype(np.int8)


def clamp16(x, lo=-32768, hi=32767):
    return np.clip(i64(x), lo, hi).astype(np.int16)


FNV_OFFSET, FNV_PRIME = 2166136261, 16777619


def fnv1a(data: bytes, h: int = FNV_OFFSET) -> int:
    """FNV-1a over bytes (gx_fnv1a in csrc/gx_fixedpoint.h): test-vector checksums, logit hashes."""
    for b in data:
        h = ((h ^ b) * FNV_PRIME) & 0xFFFFFFFF
    return h


def isqrt64(v):
    """floor(sqrt(v)) of non-negative int64 values below 2^62, exact (gx_isqrt64)."""
    v = np.asarray(v, dtype=np.int64)
    r = np.floor(np.sqrt(v.astype(np.float64))).astype(np.int64)
    for _ in range(2):
        r = np.where(r * r > v, r - 1, r)
        r = np.where((r + 1) * (r + 1) <= v, r + 1, r)
    return r
