// Numeric conversions the ISA specifies (docs/isa.md, "Numerics"): bf16 <-> f32, the saturating,
// round-to-nearest-even casts to integers, and the vector unit's logarithm, sine, cosine and roundings. Shared by the simulator and the runtime; the validation reference
// deliberately re-derives them from the document instead of calling these.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

namespace tpusim::isa {

inline float f32_from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}
inline uint32_t bits_from_f32(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// bf16 is the upper half of an f32. Conversion from f32 rounds to nearest, ties to even; NaN stays a (quiet) NaN.
inline uint16_t bf16_from_f32(float f) {
  uint32_t b = bits_from_f32(f);
  if ((b & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((b >> 16) | 0x40);
  b += 0x7fffu + ((b >> 16) & 1u);
  return static_cast<uint16_t>(b >> 16);
}
inline float f32_from_bf16(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

// f8e4m3 (DType::F8E4M3): OCP FP8 E4M3, "fn" variant (torch.float8_e4m3fn): S.EEEE.MMM, bias 7, subnormals
// m x 2^-9, no infinities, NaN = S.1111.111, largest finite 448. Decoding is exact.
inline float f32_from_f8e4m3(uint8_t b) {
  const uint32_t sign = static_cast<uint32_t>(b & 0x80) << 24, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return f32_from_bits(sign | 0x7fc00000u);  // NaN, its sign kept
  if (e == 0) {  // subnormal (or zero): m x 2^-9, exact in f32
    const float v = static_cast<float>(m) * 0x1p-9f;
    return sign ? -v : v;
  }
  return f32_from_bits(sign | ((e + 120) << 23) | (m << 20));  // 2^(e-7) x 1.m: f32 exponent e - 7 + 127
}
// f32 to f8e4m3: round to nearest, ties to even, as if the exponent had no upper bound; a rounded magnitude above
// 448 (an operand beyond 464), an infinity or NaN gives NaN with the operand's sign (torch's conversion to
// float8_e4m3fn: not saturating). Subnormals round at their fixed spacing 2^-9; tiny values give a signed zero.
inline uint8_t f8e4m3_from_f32(float f) {
  const uint32_t b = bits_from_f32(f);
  const auto sign = static_cast<uint8_t>((b >> 24) & 0x80);
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x43e80000u) return sign | 0x7f;  // beyond 464 (the midpoint of 448 and 480), inf, NaN
  if (a < 0x3c800000u) {                    // below 2^-6: subnormal range, spacing 2^-9
    // a's value x 2^9 rounded to an integer, nearest even: exact in f32 (a < 2^-6, so a x 2^9 < 8)
    const float q = std::nearbyint(f32_from_bits(a) * 0x1p9f);  // default rounding: to nearest, ties to even
    return sign | static_cast<uint8_t>(q);  // q = 8 is 2^-6, the smallest normal: its bits are 0.0001.000
  }
  // Normal: keep 3 of f32's 23 mantissa bits, rounding the other 20 to nearest even; a carry moves the exponent.
  const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
  const uint32_t e = (r >> 23) - 120, m = (r >> 20) & 7;  // f32 exponent - 127 + 7
  return sign | static_cast<uint8_t>((e << 3) | m);  // 464 exactly ties to 448 (even); above it was NaN
}

// Round to nearest even and saturate into [lo, hi]; NaN becomes 0.
inline int64_t round_saturate(double x, int64_t lo, int64_t hi) {
  if (std::isnan(x)) return 0;
  if (x <= static_cast<double>(lo)) return lo;
  if (x >= static_cast<double>(hi)) return hi;
  return static_cast<int64_t>(std::nearbyint(x));  // default rounding mode: to nearest, ties to even
}
inline int8_t saturate_i8(double x) { return static_cast<int8_t>(round_saturate(x, -128, 127)); }
inline int32_t saturate_i32(double x) {
  return static_cast<int32_t>(round_saturate(x, std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()));
}


// The vector unit's vpu.log, vpu.sin and vpu.cos on an f32 operand (isa.def): the function evaluated in f64 and
// rounded once to f32, nearest even. glibc's f64 log, sin and cos are within 1 ulp of f64 (sin and cos with an
// exact range reduction for every argument), 2^-29 ulp of f32, so the result is within 0.5 + 2^-29 ulp of the
// exact value: the correctly rounded f32 except where the exact value lies that close to a midpoint between two
// f32 values. Every special value (0, inf, NaN, negatives for log) is IEEE's. One definition for every model
// (the simulator, the kernels' constant folding); isa_test sweeps them against long double.
inline float vpu_log(float x) { return static_cast<float>(std::log(static_cast<double>(x))); }
inline float vpu_sin(float x) { return static_cast<float>(std::sin(static_cast<double>(x))); }
inline float vpu_cos(float x) { return static_cast<float>(std::cos(static_cast<double>(x))); }
// vpu.erf and vpu.erfc (isa.def) the same way: glibc's f64 erf and erfc are within 1 ulp of f64 (erfc with its
// relative accuracy in the tail, down to its subnormals).
inline float vpu_erf(float x) { return static_cast<float>(std::erf(static_cast<double>(x))); }
inline float vpu_erfc(float x) { return static_cast<float>(std::erfc(static_cast<double>(x))); }

// vpu.floor, vpu.ceil and vpu.round (to nearest, ties to even): exact, whatever the host's rounding mode. Every f32
// of magnitude >= 2^23, +-inf and NaN are returned as they are; results keep the operand's sign (ceil(-0.5) = -0,
// round(-0.5) = -0).
inline float vpu_floor(float x) { return std::floor(x); }
inline float vpu_ceil(float x) { return std::ceil(x); }
inline float vpu_round(float x) {
  if (!(std::fabs(x) < 0x1p23f)) return x;  // already an integer, an infinity or NaN
  const float t = std::trunc(x), frac = std::fabs(x - t);  // x - t is exact
  const float away = t + std::copysign(1.0f, x);
  float r = frac > 0.5f ? away : frac < 0.5f ? t : (std::fmod(t, 2.0f) == 0 ? t : away);
  return std::copysign(r, x);
}

}  // namespace tpusim::isa
