// Timing of a transfer of rows*rowbytes bytes issued at cycle `start` (after its semaphore wait):
//   HBM side: data from start + dma.latency on the channels its addresses touch, each channel serving its share
//     after the transfers booked on it before (HbmChannels, memory.h); data_end = the last channel's end.
//   VMEM side: booked on VMEM's bank ports when the HBM side is done, backdated over the cycles its busiest bank
//     needs (the bytes streamed in while the HBM side ran), not before the data start (VmemPorts, memory.h); it
//     only delays completion when other clients (the vector unit, the other queue) held those ports meanwhile.
//   completion (data in place, signal) = max(data_end, VMEM side, the previous transfer's completion).
// dma.gather (isa.def): the indices are read from VMEM at the start (booked on VMEM's ports from then; the HBM
//   side starts at max(start + dma.latency, that read's end)), so every row's address is known when the transfer
//   starts and all rows are requested together. The HBM side is booked as `rows` rows of `rowbytes` bytes from
//   haddr, each row starting its own hbm.interleave_bytes chunk (stride rowbytes rounded up to the chunk): rows
//   never share a chunk, and they spread over consecutive chunks - over the channels and banks as evenly as
//   random rows fall on average. The index values do not enter the timing, so a timing-only run (which moves no
//   data and cannot see the indices) gives the same cycles; the index checks (j < 0, j >= count, row outside
//   HBM) are made in functional runs only, for the same reason. The VMEM side is a dma.ld's.
// With `shared` (dma.ld, dma.st), or a far address in the shared window (isa::kSharedWindow and above, at the
// address less the window's base), the far side is the chip's [shared] memory instead of HBM: the same rules with
// shared.latency for dma.latency and the shared memory's banks (shared.banks, each shared.bandwidth_gbs / banks,
// contended by every core) for HBM's channels. A far address in the local window (isa::kLocalWindow) names this
// core's own VMEM: dma.local_latency, then the far side's bytes on VMEM's bank ports (read for a load, written
// for a store) in place of HBM's channels; the near side is booked as always.
// With shared.cache = 1 (a GPU's L2), every HBM transfer goes through the cache's tags (CacheTags, memory.h), line
// by line in issue order: a load's rows whose lines are all held are read from the shared level (its banks, its
// latency), the others from HBM; a row that is partly held is split into runs of held and missing lines. Runs of
// consecutive rows with the same outcome are booked as one strided pattern. Stores leave their lines held, so a
// later kernel's loads of them hit; they are booked on HBM as always (write-through), or, with shared.write_back,
// on the cache's banks from shared.latency, which is when they are done, while their bytes are booked on HBM's
// channels at once and drain behind them (the core's halt waits for HBM to take them).
// dma.ld with `mcast` (isa.def): the two cores of a pair (2i, 2i + 1) issue the same load; the first to start
// books it as any load and queues it on the chip (ChipShared::mcast), the second takes it off the queue, checks
// that it is the same (HBM address, rows, row bytes, stride; else a run-time error naming both), books nothing on
// the far side and has its data from max(its own start + dma.latency, the first's data start) to the first's data
// end; each books its own VMEM side. A load still queued when the program ends is an error (Chip::run_started).
// A queue takes its next instruction as soon as fewer than dma.engines transfers are in flight; with one engine
// (and one stream) a transfer therefore takes dma.latency + bytes / bandwidth, one after another. A transfer of
// 0 bytes, and a sync, complete at once when nothing is in flight, else right after the transfers before them;
// they move no bytes, so they take no engine (a fence in the queue, not a transfer).
#include "dma.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
           1, 1024)
      .add(&DmaParams::local_latency, "local_latency", 16, "cycles",
           "cycles from the start of a transfer within the core's own VMEM (a far address in the local window, "
           "isa::kLocalWindow) to its first byte: assumption",
           0, 1000000000);
}

DmaEngine::DmaEngine(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit)
    : UnitModule(name, st, unit), engines_(static_cast<size_t>(st.cfg.dma.engines)) {
  st.events.push_back(&issued_);
  st.events.push_back(&retired_);
  st.events.push_back(&bg_issued_);
  st.events.push_back(&bg_retired_);
  SC_THREAD(retire_thread);
  SC_THREAD(bg_thread);
}

void DmaEngine::reset() {
  UnitModule::reset();
  inflight_.clear();
  bg_.clear();
  last_done_ = busy_from_ = bg_done_ = 0;
  issued_n_ = retired_n_ = 0;
  st_.mem.reset_timing(st_.run.opts.warm_cache);  // HBM channels, VMEM ports, the cache (both queues: idempotent)
}

void DmaEngine::execute(const Entry& e) {
  // A background load starts once one of the background loads' own engines is free (the plain transfers after it
  // never wait for those)
  if (e.in.op == isa::Op::DMALD && e.arg("bg") != 0)
    while (static_cast<size_t>(std::count_if(bg_.begin(), bg_.end(), [](const Transfer& b) {
             return b.hbm.bytes() != 0;
           })) >= engines_)
      st_.wait_event(bg_retired_);
  const uint64_t start = st_.now();
  Transfer t{e, start, start, start, {}, {}, e.in.op == isa::Op::DMALD || e.in.op == isa::Op::DMAGATHER, false, false,
             0, 0, {}};
  const bool plain = e.in.op == isa::Op::DMALD || e.in.op == isa::Op::DMAST;
  // The far side: the shared memory with `shared`, or for a far address in the shared window (isa::kSharedWindow,
  // at the address less the window's base); this core's VMEM for one in the local window (isa::kLocalWindow);
  // else HBM.
  const int64_t far = plain ? (t.load ? e[1] : e[0]) : 0;
  const bool flag = plain && e.arg("shared") != 0;
  const isa::FarMemory named = plain && !flag ? isa::far_memory(far) : isa::FarMemory::Hbm;
  t.local = named == isa::FarMemory::Local;
  t.shared = flag || named == isa::FarMemory::Shared;
  uint64_t hbm_earliest = start + static_cast<uint64_t>(t.shared  ? st_.cfg.shared.latency
                                                        : t.local ? st_.cfg.dma.local_latency
                                                                  : st_.cfg.dma.latency);
  if (e.in.op == isa::Op::DMAGATHER) {
    start_gather(e, t);
    if (t.hbm.bytes()) {  // the indices, read through VMEM's ports before the rows are requested
      VmemPorts& ports = st_.mem.vmem_ports;
      VmemPorts::Demand d = ports.demand();
      ports.add(d, Rows{static_cast<uint64_t>(e.arg("idx")), 1, t.hbm.rows * 4, 0});
      hbm_earliest = std::max(hbm_earliest, ports.reserve(start, start, d));
      act(e.pc, Action::VmemRead, t.hbm.rows * 4);
    }
  } else if (e.in.op != isa::Op::DMAINSYNC && e.in.op != isa::Op::DMAOUTSYNC) {
    const int64_t vaddr = t.load ? e[0] : e[1], haddr = flag ? far : isa::far_offset(far);
    const int64_t rows = e[2], rowbytes = e[3], hstride = e[4], vstride = e[5];
    if (rows < 0 || rowbytes < 0)
      st_.fail(e.pc, "negative size: rows " + std::to_string(rows) + ", rowbytes " + std::to_string(rowbytes));
    const ChipConfig& cfg = st_.cfg;
    std::string err;
    if (t.local)
      err = check_rows(t.load ? "VMEM read (local window)" : "VMEM write (local window)", cfg.vmem_bytes(),
                       std::to_string(cfg.vmem_bytes()) + " bytes", haddr, rows, rowbytes, hstride);
    else if (!t.shared)
      err = check_rows(t.load ? "HBM read" : "HBM write", cfg.hbm_bytes(), std::to_string(cfg.hbm.size_mib) + " MiB",
                       haddr, rows, rowbytes, hstride);
    else if (cfg.shared.cache && rows && rowbytes)
      err = "the chip's shared level is a cache (shared.cache = 1), not memory a transfer can name";
    else if (!cfg.shared_bytes() && rows && rowbytes)
      err = "the chip has no shared memory (shared.size_kib = 0)";
    else
      err = check_rows(t.load ? "shared memory read" : "shared memory write", cfg.shared_bytes(),
                       std::to_string(cfg.shared.size_kib) + " KiB of shared memory", haddr, rows, rowbytes, hstride);
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
  const bool mcast = e.in.op == isa::Op::DMALD && e.arg("mcast") != 0;
  t.bg = e.in.op == isa::Op::DMALD && e.arg("bg") != 0;
  if (t.bg && mcast) st_.fail(e.pc, "bg: a background load cannot be a multicast (mcast)");
  const std::optional<McastLoad> first = mcast ? pair_multicast(e, t) : std::nullopt;
  if (first) {  // the pair's read brings this load's bytes: none of its own on the far side
    t.mcast_rx = true;
    t.data_start = std::max(hbm_earliest, first->data_start);
    t.data_end = std::max(first->data_end, t.data_start);
  } else if (t.hbm.bytes() == 0 && inflight_.empty()) {
    if (mcast) queue_multicast(e, t);
    last_done_ = std::max(last_done_, start);
    return finish(e, start, start);
  }
  if (t.hbm.bytes() && !t.mcast_rx) {
    t.data_start = hbm_earliest;
    if (t.local) {  // the far side's bytes on VMEM's ports (read for a load, written for a store)
      VmemPorts& ports = st_.mem.vmem_ports;
      VmemPorts::Demand d = ports.demand();
      ports.add(d, hbm_side(t));
      t.data_end = ports.reserve(start, t.data_start, d);
    } else if (!t.shared && st_.mem.cache.enabled())
      t.data_end = book_cached(t, start);  // sets data_start
    else
      t.data_end =
          (t.shared ? st_.mem.shared_channels : st_.mem.hbm_channels).transfer(t.data_start, hbm_side(t), !t.load);
  }
  if (mcast && !first) queue_multicast(e, t);
  if (t.bg) {  // it waits for the plain transfers before it, none after it waits for it
    t.before = issued_n_;
    bg_.push_back(t);
    bg_issued_.notify();
    return;
  }
  inflight_.push_back(t);
  ++issued_n_;
  issued_.notify();
  while (engines_busy() >= engines_) st_.wait_event(retired_);
}

bool DmaEngine::idle_but_background(int sem) const {
  return UnitModule::idle() && inflight_.empty() &&
         std::none_of(bg_.begin(), bg_.end(), [&](const Transfer& b) { return b.e.arg("signal") == sem; });
}

size_t DmaEngine::engines_busy() const {
  return static_cast<size_t>(std::count_if(inflight_.begin(), inflight_.end(), [](const Transfer& t) {
    return t.hbm.bytes() != 0 || t.vmem.bytes() != 0;
  }));
}

std::optional<McastLoad> DmaEngine::pair_multicast(const Entry& e, const Transfer& t) {
  if (st_.cfg.chip.cluster < 2)
    st_.fail(e.pc, "mcast: the chip has no clusters of cores to multicast in (chip.cluster = 1)");
  if (t.shared || t.local) st_.fail(e.pc, "mcast: a multicast load reads HBM, not the shared memory or VMEM");
  const int me = st_.index, other = me ^ 1;
  if (other >= static_cast<int>(st_.chip.running))
    st_.fail(e.pc, "mcast: core " + std::to_string(me) + " has no pair: the program's .cores is " +
                       std::to_string(st_.chip.running) + ", and a multicast load pairs cores 2i and 2i+1");
  std::deque<McastLoad>& pending = st_.chip.mcast[static_cast<size_t>(me / 2)];
  if (pending.empty() || pending.front().core == me) return std::nullopt;
  const McastLoad first = pending.front();
  pending.pop_front();
  const Rows& a = first.hbm;
  const Rows& b = t.hbm;
  if (a.base != b.base || a.rows != b.rows || a.rowbytes != b.rowbytes || (a.rows > 1 && a.stride != b.stride)) {
    auto shape = [](const Rows& r) {
      return "HBM " + hex(r.base) + ", " + std::to_string(r.rows) + " rows of " + std::to_string(r.rowbytes) +
             " bytes, stride " + std::to_string(r.stride);
    };
    st_.fail(e.pc, "mcast: this load (" + shape(b) + ") is not its pair's, core " + std::to_string(first.core) + "'s " +
                       st_.chip.cores[static_cast<size_t>(first.core)]->where(first.pc) + " (" + shape(a) + ")");
  }
  return first;
}

void DmaEngine::queue_multicast(const Entry& e, const Transfer& t) {
  st_.chip.mcast[static_cast<size_t>(st_.index / 2)].push_back({st_.index, e.pc, t.hbm, t.data_start, t.data_end});
}

uint64_t DmaEngine::book_cached(Transfer& t, uint64_t start) {
  CacheTags& cache = st_.mem.cache;
  const Rows all = hbm_side(t);
  const uint64_t line = cache.line();
  const uint64_t hit_start = start + static_cast<uint64_t>(st_.cfg.shared.latency);
  const uint64_t miss_start = start + static_cast<uint64_t>(st_.cfg.dma.latency);
  uint64_t end = 0, data_start = UINT64_MAX;
  const bool write_back = st_.cfg.shared.write_back != 0;
  auto book = [&](const Rows& r, bool hit) {
    if (!r.bytes()) return;
    if (hit && t.load) t.hit_bytes += r.bytes();
    data_start = std::min(data_start, (t.load ? hit : write_back) ? hit_start : miss_start);
    if (hit && t.load) {
      end = std::max(end, st_.mem.shared_channels.transfer(hit_start, r));
    } else if (t.load) {
      // A miss reads the whole lines its rows touch (a row of 32 bytes brings its 128-byte line, which the next
      // three such rows then find). Rows of one outcome never share a line: a line a row brought is a hit for
      // the next, so the widened rows do not overlap.
      const uint64_t from = r.base / line * line, to = (r.base + r.rowbytes + line - 1) / line * line;
      const Rows lines{from, r.rows, to - from, r.stride};
      t.fill_bytes += lines.bytes();
      end = std::max(end, st_.mem.hbm_channels.transfer(miss_start, lines));
    } else if (write_back) {
      // Written back: the store is done when the cache has its bytes; HBM takes them behind it (booked now, so
      // later transfers wait for the channels; the run's end waits for them: Core's halt).
      st_.mem.hbm_channels.transfer(miss_start, r, true);
      end = std::max(end, st_.mem.shared_channels.transfer(hit_start, r, true));
    } else {
      end = std::max(end, st_.mem.hbm_channels.transfer(miss_start, r, true));  // a store writes its bytes through
    }
  };
  Rows run{};      // consecutive whole rows with one outcome
  bool run_hit = false;
  std::vector<std::pair<uint64_t, bool>> pieces;  // (first byte, hit) where the outcome changes in a row
  for (uint64_t i = 0; i < all.rows; ++i) {
    const uint64_t base = static_cast<uint64_t>(static_cast<int64_t>(all.base) + static_cast<int64_t>(i) * all.stride);
    const uint64_t first = base / line, last = (base + all.rowbytes - 1) / line;
    pieces.clear();
    for (uint64_t l = first; l <= last; ++l) {
      const bool h = cache.access(l);
      if (pieces.empty() || pieces.back().second != h) pieces.emplace_back(std::max(l * line, base), h);
    }
    if (pieces.size() == 1) {  // the whole row one way: extend the run or start a new one
      const bool h = pieces[0].second;
      if (run.rows && run_hit == h) {
        ++run.rows;
        continue;
      }
      book(run, run_hit);
      run = Rows{base, 1, all.rowbytes, all.stride}, run_hit = h;
      continue;
    }
    book(run, run_hit);
    run = Rows{};
    for (size_t p = 0; p < pieces.size(); ++p) {
      const uint64_t to = p + 1 < pieces.size() ? pieces[p + 1].first : base + all.rowbytes;
      book(Rows{pieces[p].first, 1, to - pieces[p].first, 0}, pieces[p].second);
    }
  }
  book(run, run_hit);
  t.data_start = data_start;  // the first byte's arrival (the VMEM side is booked from there)
  return end;
}

void DmaEngine::start_gather(const Entry& e, Transfer& t) {
  const int64_t vaddr = e.arg("vaddr"), haddr = e.arg("haddr"), idx = e.arg("idx"), rows = e.arg("rows"),
                rowbytes = e.arg("rowbytes"), vstride = e.arg("vstride"), count = e.arg("count");
  if (rows < 0 || rowbytes < 0)
    st_.fail(e.pc, "negative size: rows " + std::to_string(rows) + ", rowbytes " + std::to_string(rowbytes));
  if ((static_cast<unsigned __int128>(rows) * static_cast<unsigned __int128>(std::max<int64_t>(rowbytes, 4))) >> 62)
    st_.fail(e.pc, "transfer of more than 2^62 bytes");
  const ChipConfig& cfg = st_.cfg;
  const std::string vmem_size = std::to_string(cfg.vmem_bytes()) + " bytes";
  std::string err = check_rows("VMEM index read", cfg.vmem_bytes(), vmem_size, idx, 1, rows * 4, 0);
  if (err.empty()) err = check_rows("VMEM write", cfg.vmem_bytes(), vmem_size, vaddr, rows, rowbytes, vstride);
  if (!err.empty()) st_.fail(e.pc, err);
  const auto r = static_cast<uint64_t>(rows), rb = static_cast<uint64_t>(rowbytes);
  const uint64_t grain = cfg.hbm.interleave_bytes;
  t.vmem = {static_cast<uint64_t>(vaddr), r, rb, vstride};
  // Timing pattern (see the top): each row its own chunk(s), rows on consecutive chunks from haddr's.
  const uint64_t hstride = rb ? (rb + grain - 1) / grain * grain : 0;
  t.hbm = {static_cast<uint64_t>(std::max<int64_t>(haddr, 0)), r, rb, static_cast<int64_t>(hstride)};
  if (!st_.functional() || !rows || !rowbytes) return;
  const uint8_t* vmem = st_.mem.vmem.data();
  t.gather.resize(r);
  for (uint64_t i = 0; i < r; ++i) {
    int32_t j;
    std::memcpy(&j, vmem + idx + 4 * i, 4);
    const std::string which = "index " + std::to_string(j) + " (row " + std::to_string(i) + " of " +
                              std::to_string(rows) + ", at VMEM " + hex(static_cast<uint64_t>(idx) + 4 * i) + ")";
    if (j < 0) st_.fail(e.pc, which + " is negative");
    if (j >= count) st_.fail(e.pc, which + " is not below the table's count " + std::to_string(count));
    const __int128 h = static_cast<__int128>(haddr) + static_cast<__int128>(j) * rowbytes;
    if (h < 0 || h + rowbytes > static_cast<__int128>(cfg.hbm_bytes())) {
      auto text = [](__int128 v) { return v < 0 ? "-" + hex(static_cast<uint64_t>(-v)) : hex(static_cast<uint64_t>(v)); };
      st_.fail(e.pc, which + ": HBM read [" + text(h) + ", " + text(h + rowbytes) + ") outside " +
                         std::to_string(cfg.hbm.size_mib) + " MiB");
    }
    t.gather[i] = static_cast<uint64_t>(h);
  }
}

uint64_t DmaEngine::vmem_side(const Transfer& t, uint64_t after) {
  uint64_t done = std::max(st_.now(), after);
  if (t.vmem.bytes()) {
    VmemPorts& ports = st_.mem.vmem_ports;
    VmemPorts::Demand d = ports.demand();
    ports.add(d, t.vmem);
    const uint64_t now = st_.now(), span = ports.cycles(d);
    done = std::max(done, ports.reserve(now, std::max(t.data_start, now - std::min(now, span)), d));
  }
  return done;
}

void DmaEngine::retire_thread() {
  for (;;) {
    try {
      for (;;) {
        while (inflight_.empty()) sc_core::wait(issued_);  // not abortable: where the thread rests
        st_.wait_until(inflight_.front().data_end);
        const Transfer t = inflight_.front();
        const uint64_t done = vmem_side(t, last_done_);
        st_.wait_until(done);
        last_done_ = done;
        retire(t, done);
        inflight_.pop_front();
        ++retired_n_;
        retired_.notify();
        if (UnitModule::idle() && inflight_.empty()) st_.drained.notify();  // (idle, or idle but for background loads)
      }
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error(label() + ": internal error: " + e.what());
    }
  }
}

void DmaEngine::bg_thread() {
  for (;;) {
    try {
      for (;;) {
        while (bg_.empty()) sc_core::wait(bg_issued_);  // not abortable: where the thread rests
        st_.wait_until(bg_.front().data_end);
        const Transfer t = bg_.front();
        while (retired_n_ < t.before) st_.wait_event(retired_);  // the plain transfers issued before it
        const uint64_t done = vmem_side(t, std::max(bg_done_, last_done_));
        st_.wait_until(done);
        bg_done_ = done;
        retire(t, done);
        bg_.pop_front();
        bg_retired_.notify();
        if (UnitModule::idle() && inflight_.empty()) st_.drained.notify();  // (idle, or fewer background loads)
      }
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error(label() + ": internal error: " + e.what());
    }
  }
}

void DmaEngine::retire(const Transfer& t, uint64_t done) {
  const bool gather = t.e.in.op == isa::Op::DMAGATHER;  // its rows' addresses, read at the start
  if (st_.functional()) {
    uint8_t* vmem = st_.mem.vmem.data();
    for (uint64_t i = 0; i < t.hbm.rows && t.hbm.rowbytes; ++i) {
      const auto h = gather ? t.gather[i]
                            : static_cast<uint64_t>(static_cast<int64_t>(t.hbm.base) + static_cast<int64_t>(i) * t.hbm.stride);
      const auto v =
          static_cast<uint64_t>(static_cast<int64_t>(t.vmem.base) + static_cast<int64_t>(i) * t.vmem.stride);
      if (t.local)  // within VMEM (the rows may overlap: as memmove)
        std::memmove(t.load ? vmem + v : vmem + h, t.load ? vmem + h : vmem + v, t.hbm.rowbytes);
      else if (t.load)
        (t.shared ? st_.mem.shared : st_.mem.hbm).read(h, vmem + v, t.hbm.rowbytes);
      else
        (t.shared ? st_.mem.shared : st_.mem.hbm).write(h, vmem + v, t.hbm.rowbytes);
    }
  }
  RunStats& rs = st_.run.stats;
  const uint64_t far = hbm_side(t).bytes();
  // HBM's side of a transfer that is not to the shared level: a cached load's whole-line fills, else its bytes
  // the cache did not hold (none for a multicast's second: the pair's read brought them)
  const uint64_t from_hbm = t.mcast_rx                          ? 0
                            : t.load && st_.mem.cache.enabled() ? t.fill_bytes
                                                                : far - t.hit_bytes;
  if (t.local)
    (t.load ? rs.local_bytes_read : rs.local_bytes_written) += far;
  else if (t.shared)
    (t.load ? rs.shared_bytes_read : rs.shared_bytes_written) += far;
  else
    (t.load ? rs.hbm_bytes_read : rs.hbm_bytes_written) += from_hbm;
  rs.shared_bytes_read += t.hit_bytes;
  // Energy's actions (energy.h): the far side's bytes cross the interconnect once; the VMEM side's are written
  // (a load) or read (a store) there; a cache's hits are read from the shared level, its misses and stores fill it.
  act(t.e.pc, Action::DmaBytes, far);
  act(t.e.pc, t.load ? Action::VmemWrite : Action::VmemRead, t.vmem.bytes());
  if (t.local) {  // the far side is VMEM too
    act(t.e.pc, t.load ? Action::VmemRead : Action::VmemWrite, far);
  } else if (t.shared) {
    act(t.e.pc, t.load ? Action::SharedRead : Action::SharedWrite, far);
  } else {
    act(t.e.pc, t.load ? Action::HbmRead : Action::HbmWrite, from_hbm);
    act(t.e.pc, Action::SharedRead, t.hit_bytes);
    if (st_.mem.cache.enabled()) act(t.e.pc, Action::SharedWrite, from_hbm);
  }
  // Busy while anything is in flight: the slice starts at the issue, or where the previous slice ended (a plain
  // transfer that completes before a background load's end adds no busy cycles: they were counted).
  const uint64_t from = std::max(t.start, busy_from_), end = std::max(from, done);
  finish(t.e, from, end);
  // Past its own latency and its bytes at the full bandwidth, the transfer waited on memory: other streams,
  // channel and bank conflicts, VMEM ports. The stall accounting books those cycles as such.
  if (t.hbm.bytes()) {
    const double per_cycle =
        t.local    ? static_cast<double>(st_.cfg.vmem.banks * st_.cfg.vmem.port_bytes_per_cycle)
        : t.shared ? st_.cfg.shared.bandwidth_gbs * 1e3 / st_.cfg.chip.clock_mhz
                   : st_.cfg.hbm_bytes_per_cycle();
    const auto alone = static_cast<uint64_t>(std::ceil(static_cast<double>(t.hbm.bytes()) / per_cycle));
    note_memory_wait(std::max(from, t.data_start + alone), end);
  }
  busy_from_ = end;
}

}  // namespace tpusim::sim::detail
