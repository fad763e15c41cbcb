// `tpusim compare A B`: how close two tensors (or two folders of tensors) are, e.g. the simulator's outputs against
// a real GPU's (validation/cuda/README.md). The numbers are computed by compare_values, which the unit test checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace tpusim::cli {

// float -> bf16 bits, rounded to nearest, ties to even (NaN stays a quiet NaN).
uint16_t bf16_bits(float x);

// The distance between a and b in representable bf16 steps, after rounding each to bf16 (to nearest even):
// 0 when they round to the same bf16 (+0 and -0 are the same), 1 between neighbours, counted through zero across
// signs (the smallest positive and the smallest negative subnormal are 2 apart), and +-inf one step past the
// largest finite value. Undefined for NaN (returns -1).
int64_t bf16_ulp_distance(float a, float b);

// How B differs from A, the reference, element by element (both the same length; the math is in double).
struct CompareStats {
  size_t elements = 0;
  double cosine = 0;     // <a,b> / (|a| |b|); 1 when both are all zeros, 0 when only one is
  double rel_l2 = 0;     // |a - b| / |a|; 0 when both are all zeros, +inf when only a is
  double max_abs = 0;    // max |a_i - b_i| (NaN positions left out)
  int64_t max_ulp_bf16 = 0;  // max bf16_ulp_distance(a_i, b_i) over positions where neither is NaN
  size_t nan_a = 0, nan_b = 0;  // NaN elements on each side (any NaN makes cosine and rel_l2 NaN)
};
CompareStats compare_values(const std::vector<double>& a, const std::vector<double>& b);

// `tpusim compare A B [--max-rel-l2 X] [--min-cosine X]`: prints one line per tensor; returns 0 when every tensor
// has its counterpart with the same shape and meets the thresholds given, 1 otherwise. Throws UsageError for a
// mistake in the arguments.
int cmd_compare(const std::vector<std::string>& args);

}  // namespace tpusim::cli
