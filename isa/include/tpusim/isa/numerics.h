// Numeric conversions the ISA specifies (docs/isa.md, "Numerics"): bf16 <-> f32 and the saturating,
// round-to-nearest-even casts to integers. Shared by the simulator and the runtime; the validation reference
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

}  // namespace tpusim::isa
