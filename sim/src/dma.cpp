// Timing of a transfer of rows*rowbytes bytes issued at cycle `start` (after its semaphore wait):
//   HBM side: data from start + dma.latency on the channels its addresses touch, each channel serving its share
//     after the transfers booked on it before (HbmChannels, memory.h); data_end = the last channel's end.
//   VMEM side: booked on VMEM's bank ports when the HBM side is done, backdated over the cycles its busiest bank
//     needs (the bytes streamed in while the HBM side ran), not before the data start (VmemPorts, memory.h); it
//     only delays completion when other clients (the vector unit, the other queue) held those ports meanwhile.
//   completion (data in place, signal) = max(data_end, VMEM side, the previous transfer's completion).
// A queue takes its next instruction as soon as fewer than dma.engines transfers are in flight; with one engine
// (and one stream) a transfer therefore takes dma.latency + bytes / bandwidth, one after another. A transfer of
// 0 bytes, and a sync, complete at once when nothing is in flight, else right after the transfers before them.
#include "dma.h"

#include <algorithm>
#include <cmath>

#include "params.h"

namespace tpusim::sim::detail {

void declare_dma_params(std::vector<Param>& out) {
  ParamSection<DmaParams>(out, "dma", &ChipConfig::dma)
      .add(&DmaParams::latency, "latency", 100, "cycles",
           "cycles from the start of a transfer to its first byte, HBM access latency included "
           "(bandwidth: [hbm])",
           0, 1000000000)
      .add(&DmaParams::engines, "engines", 4, "transfers",
           "engines per DMA queue (dma.ld, dma.st): transfers each queue may have in flight, overlapping their "
           "latencies; they complete and signal in order",
           1, 1024);
}

DmaEngine::DmaEngine(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit)
    : UnitModule(name, st, unit), engines_(static_cast<size_t>(st.cfg.dma.engines)) {
  st.events.push_back(&issued_);
  st.events.push_back(&retired_);
  SC_THREAD(retire_thread);
}

void DmaEngine::reset() {
  UnitModule::reset();
  inflight_.clear();
  last_done_ = busy_from_ = 0;
  st_.mem.reset_timing();  // HBM channels and VMEM ports (both queues do it; it is idempotent)
}

void DmaEngine::execute(const Entry& e) {
  const uint64_t start = st_.now();
  Transfer t{e, start, start, start, {}, {}, e.in.op == isa::Op::DMALD};
  if (e.in.op != isa::Op::DMAINSYNC && e.in.op != isa::Op::DMAOUTSYNC) {
    const int64_t vaddr = t.load ? e[0] : e[1], haddr = t.load ? e[1] : e[0];
    const int64_t rows = e[2], rowbytes = e[3], hstride = e[4], vstride = e[5];
    if (rows < 0 || rowbytes < 0)
      st_.fail(e.pc, "negative size: rows " + std::to_string(rows) + ", rowbytes " + std::to_string(rowbytes));
    const ChipConfig& cfg = st_.cfg;
    std::string err = check_rows(t.load ? "HBM read" : "HBM write", cfg.hbm_bytes(),
                                 std::to_string(cfg.hbm.size_mib) + " MiB", haddr, rows, rowbytes, hstride);
    if (err.empty())
      err = check_rows(t.load ? "VMEM write" : "VMEM read", cfg.vmem_bytes(),
                       std::to_string(cfg.vmem_bytes()) + " bytes", vaddr, rows, rowbytes, vstride);
    if (!err.empty()) st_.fail(e.pc, err);
    const unsigned __int128 total = static_cast<unsigned __int128>(rows) * static_cast<unsigned __int128>(rowbytes);
    if (total >> 62) st_.fail(e.pc, "transfer of more than 2^62 bytes");
    const auto r = static_cast<uint64_t>(rows), rb = static_cast<uint64_t>(rowbytes);
    t.hbm = {static_cast<uint64_t>(haddr), r, rb, hstride};
    t.vmem = {static_cast<uint64_t>(vaddr), r, rb, vstride};
  }
  if (t.hbm.bytes() == 0 && inflight_.empty()) {
    last_done_ = std::max(last_done_, start);
    return finish(e, start, start);
  }
  if (t.hbm.bytes()) {
    t.data_start = start + static_cast<uint64_t>(st_.cfg.dma.latency);
    t.data_end = st_.mem.hbm_channels.transfer(t.data_start, t.hbm);
  }
  inflight_.push_back(t);
  issued_.notify();
  while (inflight_.size() >= engines_) st_.wait_event(retired_);
}

void DmaEngine::retire_thread() {
  for (;;) {
    try {
      for (;;) {
        while (inflight_.empty()) sc_core::wait(issued_);  // not abortable: where the thread rests
        st_.wait_until(inflight_.front().data_end);
        const Transfer t = inflight_.front();
        uint64_t done = std::max(st_.now(), last_done_);
        if (t.vmem.bytes()) {
          VmemPorts& ports = st_.mem.vmem_ports;
          VmemPorts::Demand d = ports.demand();
          ports.add(d, t.vmem);
          const uint64_t now = st_.now(), span = ports.cycles(d);
          done = std::max(done, ports.reserve(std::max(t.data_start, now - std::min(now, span)), d));
        }
        st_.wait_until(done);
        last_done_ = done;
        retire(t);
        inflight_.pop_front();
        retired_.notify();
        if (idle()) st_.drained.notify();
      }
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error(std::string(isa::unit_name(unit())) + ": internal error: " + e.what());
    }
  }
}

void DmaEngine::retire(const Transfer& t) {
  if (st_.functional()) {
    uint8_t* vmem = st_.mem.vmem.data();
    for (uint64_t i = 0; i < t.hbm.rows && t.hbm.rowbytes; ++i) {
      const auto h = static_cast<uint64_t>(static_cast<int64_t>(t.hbm.base) + static_cast<int64_t>(i) * t.hbm.stride);
      const auto v =
          static_cast<uint64_t>(static_cast<int64_t>(t.vmem.base) + static_cast<int64_t>(i) * t.vmem.stride);
      if (t.load)
        st_.mem.hbm.read(h, vmem + v, t.hbm.rowbytes);
      else
        st_.mem.hbm.write(h, vmem + v, t.hbm.rowbytes);
    }
  }
  (t.load ? st_.run.stats.hbm_bytes_read : st_.run.stats.hbm_bytes_written) += t.hbm.bytes();
  // Busy while anything is in flight: the slice starts at the issue, or where the previous slice ended.
  const uint64_t from = std::max(t.start, busy_from_);
  finish(t.e, from, last_done_);
  // Past its own latency and its bytes at the full bandwidth, the transfer waited on memory: other streams,
  // channel and bank conflicts, VMEM ports. The stall accounting books those cycles as such.
  if (t.hbm.bytes()) {
    const auto alone = static_cast<uint64_t>(std::ceil(static_cast<double>(t.hbm.bytes()) / st_.cfg.hbm_bytes_per_cycle()));
    note_memory_wait(std::max(from, t.data_start + alone), last_done_);
  }
  busy_from_ = last_done_;
}

}  // namespace tpusim::sim::detail
