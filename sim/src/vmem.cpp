// VMEM bank ports (memory.h, VmemPorts).
#include <algorithm>

#include "memory.h"
#include "params.h"

namespace tpusim::sim::detail {

void declare_vmem_params(std::vector<Param>& out) {
  ParamSection<VmemParams>(out, "vmem", &ChipConfig::vmem)
      .add(&VmemParams::size_kib, "size_kib", 16384, "KiB", "on-chip vector memory (VMEM) capacity", 1,
           uint64_t(4) << 20)
      .add(&VmemParams::banks, "banks", 32, "banks",
           "VMEM banks, one port each, shared by the DMA engines, the vector unit and the matrix unit", 1, 65536)
      .add(&VmemParams::port_bytes_per_cycle, "port_bytes_per_cycle", 800, "bytes/cycle",
           "bytes one bank's port reads or writes per cycle", 1, uint64_t(1) << 30)
      .add(&VmemParams::interleave_bytes, "interleave_bytes", 128, "bytes",
           "address interleaving: consecutive chunks of this many bytes go to consecutive banks", 1,
           uint64_t(1) << 30);
}

VmemPorts::VmemPorts(const ChipConfig& cfg)
    : banks_(static_cast<uint64_t>(cfg.vmem.banks)),
      grain_(cfg.vmem.interleave_bytes),
      port_(cfg.vmem.port_bytes_per_cycle),
      free_(banks_, 0) {}

void VmemPorts::reset() { std::fill(free_.begin(), free_.end(), 0); }

uint64_t VmemPorts::cycles(const Demand& d) const {
  uint64_t most = 0;
  for (uint64_t b : d) most = std::max(most, b);
  return (most + port_ - 1) / port_;
}

uint64_t VmemPorts::reserve(uint64_t earliest, const Demand& d) {
  uint64_t end = earliest;
  for (uint64_t b = 0; b < banks_ && b < d.size(); ++b) {
    if (!d[b]) continue;
    free_[b] = std::max(earliest, free_[b]) + (d[b] + port_ - 1) / port_;
    end = std::max(end, free_[b]);
  }
  return end;
}

}  // namespace tpusim::sim::detail
