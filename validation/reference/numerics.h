// The ISA's numerics (docs/isa.md, "Numerics"), re-derived for the validation reference from the document's
// words with frexp/ldexp and double arithmetic. Deliberately NOT built on isa/numerics.h or the simulator: a
// bug shared by the simulator and its reference would hide.
//
// Values travel as doubles: every i8, i32, bf16 and f32 value is exactly a double, and so is every product of
// two of them that the ISA needs (bf16 x bf16 has 16 significant bits, i32 x f32 at most 56 - see to_f32).
#pragma once

#include <cstdint>

#include "tpusim/isa/isa.h"

namespace tpusim::reference {

using isa::DType;

// x rounded to an integer, ties to even. x must be finite.
double round_half_even(double x);

// x rounded to nearest-even with `bits` significant bits and f32's exponent range: normal numbers down to
// 2^-126, subnormals below (spacing 2^(-126 - bits + 1)), and +-inf once the rounded magnitude reaches 2^128.
// NaN, +-inf and +-0 pass through.
double round_to_bits(double x, int bits);

// f32 arithmetic: the exact (or double) result rounded once to f32. For +, -, *, / and sqrt of f32 operands the
// double result is then exactly the IEEE f32 result (53 >= 2*24 + 2 bits: rounding twice is harmless).
inline double to_f32(double x) { return round_to_bits(x, 24); }
// bf16 has f32's exponent range and 8 significant bits: x rounded once.
inline double to_bf16(double x) { return round_to_bits(x, 8); }
// The result of an arithmetic operation of type t (f32 or bf16) whose exact (or fp64) result is x: "element-wise
// bf16 operations compute in f32 and round the result to bf16" - so bf16 results are rounded twice.
// f8e4m3 (OCP FP8 E4M3, "fn": 3 fraction bits, bias 7, no infinities, S.1111.111 = NaN, largest 448), from the
// document's words: round to nearest even with 4 significant bits, normal numbers down to 2^-6 and subnormals
// below (spacing 2^-9), as if the exponent had no upper limit; a rounded magnitude above 448, an infinity or
// NaN gives NaN with x's sign ("not saturating, as torch.float8_e4m3fn").
double to_f8e4m3(double x);
inline double float_result(DType t, double x) { return t == DType::BF16 ? to_bf16(to_f32(x)) : to_f32(x); }

// The saturating cast to an integer type: round to nearest even, clamp to [lo, hi]; NaN -> 0, +-inf saturate.
int64_t cast_to_int(double x, int64_t lo, int64_t hi);

// cast(x, to) as the ISA defines it for vpu.cast and vpu.acc: integers round and saturate, floats round to
// nearest even, once. (The value cast is an f32 or an integer. From an f32, rounding to bf16 directly or via f32
// is the same; from an i32 above 2^24 it is not, and the ISA document does not say which: the reference takes
// the single rounding of the exact integer, as the simulator does.)
double cast_to(double x, DType to);

// Integer results wrap modulo 2^bits of their type ("integer arithmetic in the units wraps modulo 2^32"; i8
// element-wise results are taken modulo 2^8 likewise).
int64_t wrap_to(int64_t x, DType t);
inline bool is_int(DType t) { return t == DType::I8 || t == DType::I32; }
// f8e4m3 is only stored, cast and multiplied by the matrix unit: no other vector instruction takes it.
inline bool is_storage_only(DType t) { return t == DType::F8E4M3; }
int size_of(DType t);

// One element in memory (little-endian) <-> its value. store_value expects a value of the type's own set
// (an integer in range, or a double already rounded to the float type); NaN is stored as the quiet NaN.
double load_value(const uint8_t* p, DType t);
void store_value(uint8_t* p, DType t, double v);

// f32 value of the low 32 bits of a register (the `scale` operands).
double f32_from_bits(uint64_t bits);
uint32_t bits_of_f32(double v);  // v must be an f32 value
uint16_t bits_of_bf16(double v); // v must be a bf16 value

}  // namespace tpusim::reference
