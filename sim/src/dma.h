// The two DMA queues between HBM and VMEM: DmaIn runs dma.ld and dma.gather (and dmain.sync), DmaOut dma.st (and
// dmaout.sync).
// Each queue has dma.engines engines: up to that many of its transfers in flight at once, issued in order and
// completing (data in place, semaphore signalled) in order. Background loads (dma.ld bg) have dma.engines engines
// of their own and complete in order among themselves, each after every transfer issued before it; nothing after
// one waits for it but through a semaphore it signals (isa.def).
#pragma once

#include <deque>
#include <optional>
#include <vector>

#include "unit.h"

namespace tpusim::sim::detail {

class DmaEngine : public UnitModule {
 public:
  SC_HAS_PROCESS(DmaEngine);
  DmaEngine(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit);
  bool idle() const override { return UnitModule::idle() && inflight_.empty() && bg_.empty(); }
  bool idle_but_background(int sem) const override;
  void reset() override;

 private:
  struct Transfer {
    Entry e;
    uint64_t start = 0, data_start = 0, data_end = 0;  // data_end: HBM side done
    Rows hbm, vmem;
    bool load = false;
    bool shared = false;           // dma.ld/dma.st with `shared`: the far side is the [shared] memory, not HBM
    bool local = false;            // a far address in the local window: the far side is this core's VMEM
    uint64_t hit_bytes = 0;        // shared.cache = 1: bytes of the HBM side the cache held (read from it)
    uint64_t fill_bytes = 0;       // shared.cache = 1: bytes a load's misses read from HBM (whole lines)
    std::vector<uint64_t> gather;  // dma.gather: each row's HBM address (functional runs); hbm is its timing
    bool mcast_rx = false;         // dma.ld mcast, the pair's second: its data came with the first's read
    bool bg = false;               // dma.ld bg: a background load
    uint64_t before = 0;           // a background load: the plain transfers issued before it (it waits for them)
  };
  // What the HBM side moves: a load with hstride 0 (a broadcast of one row into `rows` VMEM rows) reads its row
  // from HBM once.
  static Rows hbm_side(const Transfer& t) {
    Rows r = t.hbm;
    if (t.load && t.e.in.op == isa::Op::DMALD && r.stride == 0 && r.rows > 1) r.rows = 1;
    return r;
  }
  void start_gather(const Entry& e, Transfer& t);
  // dma.ld mcast (isa.def): checks the pairing; returns the pair's first load where this is the second (and
  // takes it off the pair's queue), else nothing (the caller books this load and queues it).
  std::optional<McastLoad> pair_multicast(const Entry& e, const Transfer& t);
  void queue_multicast(const Entry& e, const Transfer& t);  // the pair's first: for its second to take
  // shared.cache = 1: books the HBM side through the cache (runs of rows it holds on the shared level's banks
  // from `start` + shared.latency, the rest on HBM's channels from `start` + dma.latency: a load's misses fill
  // whole lines, as a cache does); returns data_end.
  uint64_t book_cached(Transfer& t, uint64_t start);
  void execute(const Entry& e) override;
  void retire_thread();
  void bg_thread();  // retires the background loads
  // VMEM's side of t booked from now; returns when its data is in place, at least `after`
  uint64_t vmem_side(const Transfer& t, uint64_t after);
  void retire(const Transfer& t, uint64_t done);
  size_t engines_busy() const;  // transfers in flight that move bytes (a sync or an empty transfer takes no engine)

  const size_t engines_;
  std::deque<Transfer> inflight_;    // issued, not yet signalled; oldest first
  std::deque<Transfer> bg_;          // background loads issued, not yet done; oldest first
  sc_core::sc_event bg_issued_, bg_retired_;
  uint64_t issued_n_ = 0, retired_n_ = 0;        // plain transfers (inflight_) issued and retired
  uint64_t bg_done_ = 0;             // completion of the latest retired background load
  sc_core::sc_event issued_, retired_;
  uint64_t last_done_ = 0;           // completion of the latest retired transfer (completions are in order)
  uint64_t busy_from_ = 0;           // end of the latest busy slice booked
};

}  // namespace tpusim::sim::detail
