// A test helper for kernel generators that take the first instruction's index (base_pc): the same kernel made at
// two bases differs only in its branch targets, which are absolute instruction indices.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"

namespace tpusim::testing {

// Expects `moved` to be `at0` made `by` instructions later: every instruction the same, branch targets `by` more.
// Returns the number of branches compared.
inline size_t expect_moved_by(const isa::Program& at0, const isa::Program& moved, int64_t by) {
  EXPECT_EQ(at0.code.size(), moved.code.size());
  size_t branches = 0;
  for (size_t i = 0; i < at0.code.size() && i < moved.code.size(); ++i) {
    isa::Instr in = isa::decode(at0.code[i]);
    const int t = in.desc().operand_index("target");
    if (t >= 0) in.f[static_cast<size_t>(t)] += by, ++branches;
    EXPECT_EQ(in, isa::decode(moved.code[i])) << "instruction " << i;
  }
  return branches;
}

}  // namespace tpusim::testing
