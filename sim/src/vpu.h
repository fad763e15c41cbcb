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

  const uint64_t width_;  // vpu.lanes * vpu.sublanes elements per cycle
};

}  // namespace tpusim::sim::detail
