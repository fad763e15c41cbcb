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
      busy_(banks_) {}

void VmemPorts::reset() {
  for (auto& b : busy_) b.clear();
}

uint64_t VmemPorts::cycles(const Demand& d) const {
  uint64_t most = 0;
  for (uint64_t b : d) most = std::max(most, b);
  return (most + port_ - 1) / port_;
}

uint64_t VmemPorts::book(uint64_t b, uint64_t earliest, uint64_t cycles) {
  auto& busy = busy_[b];
  // The first interval that ends after `earliest`; the share fills the gaps from there.
  auto it = std::upper_bound(busy.begin(), busy.end(), earliest,
                             [](uint64_t t, const std::pair<uint64_t, uint64_t>& iv) { return t < iv.second; });
  uint64_t t = earliest, left = cycles;
  for (;;) {
    if (it != busy.end() && it->first <= t) {  // busy at t: on from the interval's end
      t = it->second;
      ++it;
      continue;
    }
    const uint64_t take = std::min(left, (it == busy.end() ? UINT64_MAX : it->first) - t);
    // [t, t + take) becomes busy, one interval with a neighbour it touches.
    if (it != busy.begin() && std::prev(it)->second == t)
      std::prev(it)->second = t + take;
    else
      it = std::next(busy.insert(it, {t, t + take}));
    t += take, left -= take;
    if (it != busy.end() && it->first == t) {  // it fills the gap up to the next interval
      std::prev(it)->second = it->second;
      it = busy.erase(it);
      if (left > 0) t = std::prev(it)->second;
    }
    if (left == 0) return t;
  }
}

uint64_t VmemPorts::reserve(uint64_t now, uint64_t earliest, const Demand& d) {
  uint64_t end = earliest;
  for (uint64_t b = 0; b < banks_ && b < d.size(); ++b) {
    auto& busy = busy_[b];
    // Forget what ended by now (no booking starts before it); in batches, so that erasing stays cheap.
    if (busy.size() > 16 && busy[8].second <= now) {
      auto past = std::upper_bound(busy.begin(), busy.end(), now,
                                   [](uint64_t t, const std::pair<uint64_t, uint64_t>& iv) { return t < iv.second; });
      busy.erase(busy.begin(), past);
    }
    if (d[b]) end = std::max(end, book(b, earliest, (d[b] + port_ - 1) / port_));
  }
  return end;
}

}  // namespace tpusim::sim::detail
