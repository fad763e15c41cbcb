#include "reference/numerics.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace tpusim::reference {

double round_half_even(double x) {
  double lo = std::floor(x);
  double frac = x - lo;  // exact for doubles
  if (frac > 0.5) return lo + 1;
  if (frac < 0.5) return lo;
  return std::fmod(lo, 2.0) == 0 ? lo : lo + 1;  // a tie: the even neighbour
}

double round_to_bits(double x, int bits) {
  if (x == 0 || !std::isfinite(x)) return x;
  int e;
  std::frexp(x, &e);  // x = m * 2^e, 0.5 <= |m| < 1: the leading bit is worth 2^(e-1)
  // The last kept bit is worth 2^(e - bits) for normal numbers; below 2^-126 the spacing stays that of 2^-126.
  int quantum = std::max(e, -125) - bits;
  double r = std::ldexp(round_half_even(std::ldexp(x, -quantum)), quantum);  // scaling by 2^n is exact
  if (std::fabs(r) >= 0x1p128) return std::copysign(std::numeric_limits<double>::infinity(), x);
  return r == 0 ? std::copysign(0.0, x) : r;
}

double to_f8e4m3(double x) {
  if (!std::isfinite(x)) return std::copysign(std::nan(""), x);
  if (x == 0) return x;
  int e;
  std::frexp(x, &e);                      // the leading bit is worth 2^(e-1); 2^-6 (the least normal) has e = -5
  const int quantum = std::max(e, -5) - 4;  // 4 significant bits; below 2^-6 the spacing stays 2^-9
  const double r = std::ldexp(round_half_even(std::ldexp(x, -quantum)), quantum);
  if (std::fabs(r) > 448) return std::copysign(std::nan(""), x);
  return r == 0 ? std::copysign(0.0, x) : r;
}

int64_t cast_to_int(double x, int64_t lo, int64_t hi) {
  if (std::isnan(x)) return 0;
  if (x <= static_cast<double>(lo)) return lo;  // also -inf
  if (x >= static_cast<double>(hi)) return hi;  // also +inf
  double r = round_half_even(x);
  return r < lo ? lo : r > hi ? hi : static_cast<int64_t>(r);
}

double cast_to(double x, DType to) {
  switch (to) {
    case DType::I8: return static_cast<double>(cast_to_int(x, -128, 127));
    case DType::I32: return static_cast<double>(cast_to_int(x, INT32_MIN, INT32_MAX));
    case DType::BF16: return to_bf16(x);
    case DType::F32: return to_f32(x);
    case DType::F8E4M3: return to_f8e4m3(x);
  }
  throw std::logic_error("cast_to: bad dtype");
}

int64_t wrap_to(int64_t x, DType t) {
  if (t == DType::I8) return static_cast<int8_t>(static_cast<uint8_t>(x & 0xff));
  if (t == DType::I32) return static_cast<int32_t>(static_cast<uint32_t>(x & 0xffffffff));
  throw std::logic_error("wrap_to: not an integer type");
}

int size_of(DType t) { return t == DType::I8 || t == DType::F8E4M3 ? 1 : t == DType::BF16 ? 2 : 4; }

double f32_from_bits(uint64_t bits) {
  uint32_t b = static_cast<uint32_t>(bits);
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

uint32_t bits_of_f32(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xffc00000u : 0x7fc00000u;
  float f = static_cast<float>(v);  // exact: v is an f32 value
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

uint16_t bits_of_bf16(double v) { return static_cast<uint16_t>(bits_of_f32(v) >> 16); }

double load_value(const uint8_t* p, DType t) {
  switch (t) {
    case DType::I8: return static_cast<int8_t>(p[0]);
    case DType::I32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case DType::BF16: return f32_from_bits(static_cast<uint32_t>(p[0] | p[1] << 8) << 16);
    case DType::F32: {
      uint32_t b;
      std::memcpy(&b, p, 4);
      return f32_from_bits(b);
    }
    case DType::F8E4M3: {  // S.EEEE.MMM: (-1)^S x 2^(E-7) x 1.MMM, E = 0: 2^-6 x 0.MMM; S.1111.111: NaN
      const int sgn = p[0] >> 7, ex = (p[0] >> 3) & 15, man = p[0] & 7;
      const double mag = ex == 15 && man == 7 ? std::nan("")
                         : ex == 0          ? std::ldexp(man / 8.0, -6)
                                            : std::ldexp(1 + man / 8.0, ex - 7);
      return sgn ? -mag : mag;
    }
  }
  throw std::logic_error("load_value: bad dtype");
}

void store_value(uint8_t* p, DType t, double v) {
  switch (t) {
    case DType::I8: p[0] = static_cast<uint8_t>(static_cast<int64_t>(v)); return;
    case DType::I32: {
      int32_t i = static_cast<int32_t>(static_cast<int64_t>(v));
      std::memcpy(p, &i, 4);
      return;
    }
    case DType::BF16: {
      uint16_t b = bits_of_bf16(v);
      p[0] = static_cast<uint8_t>(b), p[1] = static_cast<uint8_t>(b >> 8);
      return;
    }
    case DType::F32: {
      uint32_t b = bits_of_f32(v);
      std::memcpy(p, &b, 4);
      return;
    }
    case DType::F8E4M3: {  // v is an f8e4m3 value (or NaN): find its fields
      const int sgn = std::signbit(v) ? 0x80 : 0;
      const double a = std::fabs(v);
      if (std::isnan(v)) { p[0] = static_cast<uint8_t>(sgn | 0x7f); return; }
      if (a < 0x1p-6) { p[0] = static_cast<uint8_t>(sgn | static_cast<int>(a * 512)); return; }
      int e;
      const double m = std::frexp(a, &e);  // a = m 2^e, m in [0.5, 1): biased exponent e - 1 + 7
      p[0] = static_cast<uint8_t>(sgn | (e + 6) << 3 | (static_cast<int>(m * 16) - 8));
      return;
    }
  }
  throw std::logic_error("store_value: bad dtype");
}

}  // namespace tpusim::reference
