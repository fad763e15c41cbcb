// The vector unit: element-wise, reduction and accumulator-drain instructions over VMEM.
#pragma once

#include "unit.h"

namespace tpusim::sim::detail {

class Vpu : public UnitModule {
 public:
  Vpu(const sc_core::sc_module_name& name, ChipState& st);

 private:
  void execute(const Entry& e) override;
  uint64_t check(const Entry& e);  // checks operands; returns the number of elements processed
  void compute(const Entry& e);

  // exp, log, sin, cos, recip and rsqrt: the special function units' instructions (vpu.special)
  static bool special_function(isa::Op op);

  const uint64_t width_;    // vpu.lanes * vpu.sublanes elements per cycle
  const uint64_t special_;  // the special functions' results per cycle: vpu.special, at most width_ (0: width_)
};

}  // namespace tpusim::sim::detail
