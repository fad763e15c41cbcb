// How far a float result of the simulator may be from the reference's, and why.
//
// Where the ISA fixes every rounding (element-wise f32/bf16 arithmetic, casts, vpu.acc's bias/relu/scale steps,
// all integer work) the reference performs exactly those roundings and results must match bit for bit. Two
// places are compared within a bound instead:
//
// 1. Float sums: bf16 matrix products (mxu.mm) and vpu.rsum. The reference (FloatSums::Fp64) sums in fp64,
//    which is the exact value E = sum_l p_l up to 2^-53 relative; the simulator sums the same exact products
//    (bf16 x bf16 has 16 significant bits, exact in f32) in f32. Any f32 summation in which each term passes
//    through at most h roundings satisfies (Higham, Accuracy and Stability of Numerical Algorithms, 4.2)
//        |S - E| <= gamma(h) * M,   M = sum_l |p_l|,   gamma(h) = h*u / (1 - h*u),  u = 2^-24.
//    A term of a GEMM of depth K passes through at most additions inside its mxu.mm (R = rows of a pass)
//    plus one per later pass (accumulate): h <= K - 1 for any split of K into passes. vpu.acc then adds the
//    bias (M grows by |bias|, h by 1) and multiplies by the scale (M is multiplied by |scale|, h grows by 1):
//    relu is 1-Lipschitz and adds nothing. The reference's own result carries at most 4 roundings (fp64 sum,
//    f32 on leaving ACC, bias, scale), so simulator and reference differ by at most
//        err = gamma(K - 1 + 2 + 4) * M * |scale| = gamma(K + 5) * M * |scale|      (f32 results).
//    The final cast adds its own rounding on each side: bf16 results may differ by err + 2^-8 (|got| + |ref|)
//    (the unit roundoff of an 8-bit significand is 2^-8; 2^-133 more covers bf16 subnormals), integer results
//    by err + 1 (each side within 1/2 of its pre-rounding value; saturation only shrinks the gap).
//    vpu.rsum's order is fixed by the ISA (j = 0..cols-1): with FloatSums::IsaF32 the reference sums in that order
//    and the simulator must match bit for bit. mxu.mm's order within a pass is the implementation's (the
//    simulator's is deterministic), so matrix products are held to the bound only.
//
// 2. vpu.exp / vpu.recip / vpu.rsqrt, "deterministic but not required to be correctly rounded" (vpu.log, vpu.sin
//    and vpu.cos are specified to the bit, "evaluated in f64 and rounded once", and compared bit for bit). The reference
//    computes them in fp64 and rounds once to f32; the simulator may be up to 2 ulp of f32 away (so 2^-22 |ref|
//    relative: an ulp is at most 2^-23 of the value), and after rounding to bf16 one bf16 ulp (2^-7 |ref|).
#pragma once

#include <cmath>
#include <cstdint>

#include "reference/numerics.h"

namespace tpusim::reference {

inline constexpr double kUnitRoundoffF32 = 0x1p-24;
inline constexpr double kUnitRoundoffBF16 = 0x1p-8;

inline double gamma(int h) { return h * kUnitRoundoffF32 / (1 - h * kUnitRoundoffF32); }

// The bound `err` of case 1 for one element: depth K, magnitude M = sum |products| + |bias|, |scale|.
inline double sum_error_bound(int64_t depth, double magnitude, double abs_scale = 1.0) {
  return gamma(static_cast<int>(depth) + 5) * magnitude * abs_scale;
}

// Whether `got` and `ref`, results of type `t`, are within `err` (the bound before the final cast), per case 1.
inline bool within_sum_bound(DType t, double got, double ref, double err) {
  if (std::isnan(got) || std::isnan(ref)) return std::isnan(got) && std::isnan(ref);
  if (std::isinf(got) || std::isinf(ref)) return got == ref;
  double d = std::fabs(got - ref);
  switch (t) {
    case DType::F32: return d <= err;
    case DType::BF16: return d <= err + kUnitRoundoffBF16 * (std::fabs(got) + std::fabs(ref)) + 0x1p-133;
    // f8e4m3: 3 fraction bits (unit roundoff 2^-4), subnormal spacing 2^-9 (half of it absolute)
    case DType::F8E4M3: return d <= err + 0x1p-4 * (std::fabs(got) + std::fabs(ref)) + 0x1p-10;
    case DType::I8:
    case DType::I32: return d <= std::floor(err + 1);
  }
  return false;
}

// Case 2: transcendental results of type `t`.
inline bool within_transcendental_bound(DType t, double got, double ref) {
  if (std::isnan(got) || std::isnan(ref)) return std::isnan(got) && std::isnan(ref);
  if (std::isinf(got) || std::isinf(ref)) return got == ref;
  double rel = t == DType::BF16 ? 0x1p-7 : 0x1p-22;
  return std::fabs(got - ref) <= rel * std::fabs(ref) + 0x1p-149;
}

}  // namespace tpusim::reference
