// Test helpers for the kernel generators built through the typed emitter (copy, row-wise, GEMM, attention): their
// source text assembles back into the kernel, and the same kernel made at two first instructions (base_pc) differs
// only in its branch targets, which are absolute instruction indices.
#pragma once

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "tpusim/isa/assembler.h"
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

// Expects the generator's source text to assemble into `kernel` (its code, tensors and cores), on `cores` cores.
inline void expect_source_is(const isa::Program& kernel, const std::string& source, uint32_t cores) {
  const isa::Program as = isa::assemble(source, "source.s");
  EXPECT_EQ(kernel.code, as.code);
  EXPECT_EQ(kernel.tensors, as.tensors);
  EXPECT_EQ(kernel.cores, cores);
  EXPECT_EQ(as.cores, cores);
}

}  // namespace tpusim::testing
