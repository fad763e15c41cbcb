// The two DMA engines between HBM and VMEM: DmaIn runs dma.ld (and dmain.sync), DmaOut dma.st (and dmaout.sync).
#pragma once

#include "unit.h"

namespace tpusim::sim::detail {

class DmaEngine : public UnitModule {
 public:
  DmaEngine(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit);

  // Cycles to move `bytes` at hbm.bandwidth_gbs: ceil(bytes / bytes per cycle), in exact integer arithmetic
  // (25.6 GB/s at 500 MHz is 51.2 bytes per cycle, which a double does not hold exactly).
  static uint64_t transfer_cycles(const ChipConfig& cfg, uint64_t bytes);

 private:
  void execute(const Entry& e) override;
};

}  // namespace tpusim::sim::detail
