// Timing of a transfer of rows*rowbytes bytes started at cycle `start` (after its semaphore wait):
//   data phase from max(start + dma.latency, hbm_free) for transfer_cycles(bytes); hbm_free = its end;
//   completion (data in place, signal) at the end of the data phase.
// hbm_free is shared by both engines: they take HBM in the order they start transfers. A transfer of 0 bytes
// completes at `start`, without latency. Each engine runs one transfer at a time, in order.
#include "dma.h"

#include <cmath>

#include "params.h"

namespace tpusim::sim::detail {

void declare_dma_params(std::vector<Param>& out) {
  ParamSection<DmaParams>(out, "dma", &ChipConfig::dma)
      .add(&DmaParams::latency, "latency", 100, "cycles",
           "cycles from the start of a transfer to its first byte (HBM bandwidth: hbm.bandwidth_gbs)", 0, 1000000000);
}

DmaEngine::DmaEngine(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit)
    : UnitModule(name, st, unit) {}

uint64_t DmaEngine::transfer_cycles(const ChipConfig& cfg, uint64_t bytes) {
  // bytes per cycle = bandwidth_gbs * 1e9 / (clock_mhz * 1e6) = (bandwidth in kB/s) / (clock in kHz).
  using u128 = unsigned __int128;
  const u128 per_s = static_cast<u128>(std::llround(cfg.hbm.bandwidth_gbs * 1e6));
  const u128 khz = static_cast<u128>(std::max<long long>(1, std::llround(cfg.chip.clock_mhz * 1e3)));
  return static_cast<uint64_t>((static_cast<u128>(bytes) * khz + per_s - 1) / per_s);
}

void DmaEngine::execute(const Entry& e) {
  const uint64_t start = st_.now();
  if (e.in.op == isa::Op::DMAINSYNC || e.in.op == isa::Op::DMAOUTSYNC) return finish(e, start, start);
  const bool load = e.in.op == isa::Op::DMALD;
  const int64_t vaddr = load ? e[0] : e[1], haddr = load ? e[1] : e[0];
  const int64_t rows = e[2], rowbytes = e[3], hstride = e[4], vstride = e[5];
  if (rows < 0 || rowbytes < 0)
    st_.fail(e.pc, "negative size: rows " + std::to_string(rows) + ", rowbytes " + std::to_string(rowbytes));
  const ChipConfig& cfg = st_.cfg;
  std::string err = check_rows(load ? "HBM read" : "HBM write", cfg.hbm_bytes(),
                               std::to_string(cfg.hbm.size_mib) + " MiB", haddr, rows, rowbytes, hstride);
  if (err.empty())
    err = check_rows(load ? "VMEM write" : "VMEM read", cfg.vmem_bytes(), std::to_string(cfg.vmem_bytes()) + " bytes",
                     vaddr, rows, rowbytes, vstride);
  if (!err.empty()) st_.fail(e.pc, err);
  const unsigned __int128 total = static_cast<unsigned __int128>(rows) * static_cast<unsigned __int128>(rowbytes);
  if (total >> 62) st_.fail(e.pc, "transfer of more than 2^62 bytes");
  const uint64_t bytes = static_cast<uint64_t>(total);

  uint64_t end = start;
  if (bytes) {
    const uint64_t data = std::max(start + static_cast<uint64_t>(cfg.dma.latency), st_.hbm_free);
    end = data + transfer_cycles(cfg, bytes);
    st_.hbm_free = end;
    st_.wait_until(end);
  }
  if (st_.functional()) {
    uint8_t* vmem = st_.mem.vmem.data();
    for (int64_t i = 0; i < rows && rowbytes; ++i) {
      uint64_t h = static_cast<uint64_t>(haddr + i * hstride), v = static_cast<uint64_t>(vaddr + i * vstride);
      if (load)
        st_.mem.hbm.read(h, vmem + v, static_cast<uint64_t>(rowbytes));
      else
        st_.mem.hbm.write(h, vmem + v, static_cast<uint64_t>(rowbytes));
    }
  }
  (load ? st_.run.stats.hbm_bytes_read : st_.run.stats.hbm_bytes_written) += bytes;
  finish(e, start, end);
}

}  // namespace tpusim::sim::detail
