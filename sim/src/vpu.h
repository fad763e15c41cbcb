// The vector unit: element-wise, reduction and accumulator-drain instructions over VMEM.
#pragma once

#include <array>

#include "unit.h"

namespace tpusim::sim::detail {

class Vpu : public UnitModule {
 public:
  Vpu(const sc_core::sc_module_name& name, ChipState& st);

 private:
  void execute(const Entry& e) override;
  uint64_t check(const Entry& e);  // checks operands; returns the number of elements processed
  void compute(const Entry& e);

  // Elements per cycle of each opcode: the lanes' width (vpu.lanes * vpu.sublanes), or for the instructions
  // isa.def times at vpu.special's rate (exp, log, sin, cos, recip, rsqrt) ChipConfig::vpu_special_width()
  std::array<uint64_t, 256> rate_{};
};

}  // namespace tpusim::sim::detail
