// Helpers for the sim tests: programs built directly with isa::encode (not the assembler), and a small chip.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim::sim::test {

using isa::DType;
using isa::Op;

// Operands in isa.def order; registers by index, data types as their enum, flags 0/1. Missing trailing operands
// (flags, wait, signal) are 0. with() sets a named operand of the last instruction.
class ProgramBuilder {
 public:
  ProgramBuilder& op(Op o, std::initializer_list<int64_t> operands = {}) {
    isa::Instr in;
    in.op = o;
    int i = 0;
    for (int64_t v : operands) in.f[i++] = v;
    code_.push_back(in);
    return *this;
  }
  ProgramBuilder& with(const char* name, int64_t v) {
    int i = code_.back().desc().operand_index(name);
    if (i < 0) throw std::runtime_error(std::string("no operand ") + name);
    code_.back().f[i] = v;
    return *this;
  }
  ProgramBuilder& wait(int s) { return with("wait", s); }
  ProgramBuilder& signal(int s) { return with("signal", s); }
  ProgramBuilder& li(int rd, int64_t v) { return op(Op::LI, {rd, v}); }
  ProgramBuilder& cores(uint32_t n) {  // the program's .cores
    cores_ = n;
    return *this;
  }
  size_t pc() const { return code_.size(); }
  isa::Program build() const {
    isa::Program p;
    p.name = "test";
    p.cores = cores_;
    for (const auto& in : code_) p.code.push_back(isa::encode(in));
    return p;
  }

 private:
  std::vector<isa::Instr> code_;
  uint32_t cores_ = 1;
};

inline int64_t dt(DType t) { return static_cast<int64_t>(t); }

// The `edge` preset shrunk so that exact cycle counts stay small:
//   4x4 array, 64 accumulator rows; dma.latency 10; HBM 16 GB/s at 500 MHz = 32 bytes per cycle;
//   VPU 8 lanes x 1 sublane, latency 2; queues of 4 entries.
inline ChipConfig small_config(std::vector<std::string> extra = {}) {
  std::vector<std::string> sets = {"mxu.rows=4",        "mxu.cols=4",          "mxu.acc_rows=64",
                                   "dma.latency=10",    "hbm.bandwidth_gbs=16", "vpu.lanes=8",
                                   "vpu.sublanes=1",    "vpu.latency=2",       "core.queue_depth=4"};
  sets.insert(sets.end(), extra.begin(), extra.end());
  return load_config("edge", sets);
}

}  // namespace tpusim::sim::test
