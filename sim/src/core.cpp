// Timing: the core issues a bundle of instructions a cycle, as a VLIW core issues its bundles (TPUv2/v3: 2 scalar,
// 2 vector, a vector load, a vector store and 2 matrix slots, Norrie et al., IEEE Micro 2021): in program order, at
// most core.issue_width instructions (1 by default: an instruction a cycle), of them at most core.scalar_slots
// scalar ones and one for each unit's queue, none reading or writing a register that an earlier one of the bundle
// writes (as a compiler packs a bundle from independent operations); a branch or jmp ends its bundle, and sem.set,
// fence, barrier, sem.signal, delay and halt take a cycle of their own. A unit instruction is dispatched in its
// bundle's cycle (the unit may start it the cycle after); if the unit's queue is full the core first stalls until
// the unit pops an entry (wait_queue_cycles), and the instruction then starts a bundle. fence and halt first wait
// until all units are idle with empty queues, sem.set until they are but for background loads (dma.ld bg) that do
// not signal its semaphore, then take their cycle. Stall accounting: each cycle of the
// core is busy (a bundle's cycle, the implicit halt's included), wait_queue or wait_drain, so they add up to the
// run's cycles. So an empty program takes 1 cycle (the implicit halt), and one scalar instruction 2.
#include "core.h"

#include <algorithm>
#include <limits>
#include <string_view>

#include "params.h"
#include "unit.h"

namespace tpusim::sim::detail {

void declare_core_params(std::vector<Param>& out) {
  ParamSection<CoreParams>(out, "core", &ChipConfig::core)
      .add(&CoreParams::queue_depth, "queue_depth", 32, "entries",
           "instruction queue entries per unit; the core stalls when the queue it dispatches to is full", 1, 65536)
      .add(&CoreParams::mxus, "mxus", 1, "units",
           "matrix units per core, each its own mxu.rows x mxu.cols array with its own weight buffers, queue and "
           "mxu.acc_rows accumulator rows (instructions select one with mxu=N)",
           1, 16)
      .add(&CoreParams::issue_width, "issue_width", 1, "instructions",
           "instructions the core issues in one cycle, as a VLIW bundle: at most core.scalar_slots scalar ones and one "
           "for each unit's queue, in program order, none reading or writing a register an earlier one of the bundle "
           "writes; a branch ends its bundle, and sem.set, fence, barrier, sem.signal, delay and halt take a cycle "
           "of their own",
           1, 16)
      .add(&CoreParams::scalar_slots, "scalar_slots", 1, "instructions",
           "scalar instructions (li, add, ..., branches) in one bundle at most (core.issue_width)", 1, 16);
}

namespace {
using isa::Op;
int64_t wrap_add(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b)); }
int64_t wrap_sub(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b)); }
int64_t wrap_mul(int64_t a, int64_t b) { return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b)); }
constexpr uint32_t kSyncEvery = 1 << 16;  // scalar instructions between syncs, so units progress alongside
}  // namespace

Core::Core(const sc_core::sc_module_name& name, ChipState& st) : sc_core::sc_module(name), st_(st) {
  SC_THREAD(thread);
  SC_THREAD(remote_thread);
}

void Core::remote_thread() {
  for (;;) {
    try {
      for (;;) {
        auto& pending = st_.remote_signals;
        while (pending.empty()) sc_core::wait(st_.remote_ev);
        auto first = std::min_element(pending.begin(), pending.end());
        const uint64_t now = st_.now();
        if (first->first > now) {
          sc_core::wait(st_.span(first->first - now), st_.remote_ev);
          st_.check_abort();
          continue;
        }
        const int sem = first->second;
        pending.erase(first);
        st_.signal(sem);
      }
    } catch (const Abort&) {
    }
  }
}

// sem.signal: after the fence, semaphore `sem` of core `core` goes up chip.sync_latency cycles later.
void Core::signal_core(int64_t core, int sem) {
  const ChipShared& chip = st_.chip;
  if (core < 0 || core >= static_cast<int64_t>(chip.running))
    st_.fail(pc_, "core " + std::to_string(core) + " does not run this program (cores 0.." +
                      std::to_string(chip.running - 1) + ")");
  if (sem == 0) st_.fail(pc_, "semaphore s0 does not exist (s1..s31)");
  drain();
  ChipState& dst = *chip.cores[static_cast<size_t>(core)];
  dst.remote_signals.push_back({t_ + 1 + static_cast<uint64_t>(st_.cfg.chip.sync_latency), sem});
  dst.remote_ev.notify(sc_core::SC_ZERO_TIME);
}

// barrier: after the fence, wait for every core running the program; all go on together, the instruction's
// cycle ending chip.sync_latency + 1 cycles after the last one arrived.
void Core::barrier() {
  drain();
  ChipShared& chip = st_.chip;
  const uint64_t arrived = t_, generation = chip.barrier_generation;
  if (++chip.barrier_arrived == chip.running) {
    chip.barrier_arrived = 0;
    ++chip.barrier_generation;
    chip.barrier_release = t_ + static_cast<uint64_t>(st_.cfg.chip.sync_latency);
    chip.barrier_ev.notify(sc_core::SC_ZERO_TIME);
  } else {
    block_ = Block::Barrier;
    while (chip.barrier_generation == generation) st_.wait_event(chip.barrier_ev);
    block_ = Block::None;
  }
  st_.wait_until(chip.barrier_release);
  t_ = chip.barrier_release;
  st_.stats(isa::Unit::Core).stalls.wait_barrier += t_ - arrived;
  if (st_.keeping_trace() && t_ > arrived)
    st_.trace(static_cast<int>(isa::Unit::Core), arrived, t_ - arrived, pc_, "barrier", "wait");
}

std::string Core::blocked() const {
  switch (block_) {
    case Block::None: return "";
    case Block::Queue:
      return std::string("core waits for space in the ") + isa::unit_name(block_unit_) + " queue at " + st_.where(pc_);
    case Block::Drain: return "core waits for the units to drain at " + st_.where(pc_);
    case Block::Barrier:
      return "core " + std::to_string(st_.index) + " waits at a barrier at " + st_.where(pc_) + " (" +
             std::to_string(st_.chip.barrier_arrived) + " of " + std::to_string(st_.chip.running) + " cores arrived)";
  }
  return "";
}

void Core::thread() {
  for (;;) {
    sc_core::wait(start);
    try {
      run_program();
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error("core: internal error at " + st_.where(pc_) + ": " + e.what());
    }
    block_ = Block::None;
  }
}

void Core::sync() {
  if (t_ > st_.now()) st_.wait_until(t_);
  st_.check_abort();
}

uint32_t Core::target(int64_t t) const {
  const size_t n = st_.run.code.size();
  if (t < 0 || static_cast<uint64_t>(t) > n)
    st_.fail(pc_, "branch target " + std::to_string(t) + " outside the program (0.." + std::to_string(n) + ")");
  return static_cast<uint32_t>(t);
}

void Core::drain(int sem) {
  sync();
  auto idle = [&] { return sem > 0 ? st_.all_idle_but_background(sem) : st_.all_idle(); };
  if (idle()) return;
  uint64_t t = t_;
  block_ = Block::Drain;
  while (!idle()) st_.wait_event(st_.drained);
  block_ = Block::None;
  t_ = st_.now();
  st_.stats(isa::Unit::Core).stalls.wait_drain += t_ - t;
  if (st_.keeping_trace())
    st_.trace(static_cast<int>(isa::Unit::Core), t, t_ - t, pc_, "drain (" + st_.text(pc_) + ")", "wait");
}

UnitModule* Core::unit_of(const isa::Instr& in, isa::Unit u) {
  if (u != isa::Unit::Mxu) return st_.units[static_cast<int>(u)];
  const int64_t m = in.f[in.desc().operand_index("mxu")];
  if (m >= static_cast<int64_t>(st_.mxus.size()))
    st_.fail(pc_, "matrix unit " + std::to_string(m) + " does not exist: the core has " +
                      std::to_string(st_.mxus.size()) + " (core.mxus; mxu=0.." + std::to_string(st_.mxus.size() - 1) +
                      ")");
  return st_.mxus[static_cast<size_t>(m)];
}

void Core::dispatch(const isa::Instr& in, isa::Unit u, UnitModule* unit, uint64_t at) {
  st_.check_abort();
  UnitQueue& q = unit->queue;
  if (at < t_) {  // in the open bundle (its queue has room: Bundle::fits)
    push(in, q, at);
    return;
  }
  if (q.full()) {
    // The queue only empties as SystemC time advances: look again at the core's own cycle.
    sync();
    if (q.full()) {
      uint64_t t = t_;
      block_ = Block::Queue, block_unit_ = u;
      while (q.full()) st_.wait_event(q.popped);
      block_ = Block::None;
      t_ = st_.now();
      st_.stats(isa::Unit::Core).wait_queue_cycles += t_ - t;
      st_.stats(isa::Unit::Core).stalls.wait_queue += t_ - t;
      if (st_.keeping_trace())
        st_.trace(static_cast<int>(isa::Unit::Core), t, t_ - t, pc_, std::string("queue full: ") + isa::unit_name(u),
                  "wait");
    }
  }
  push(in, q, t_);
}

void Core::push(const isa::Instr& in, UnitQueue& q, uint64_t at) {
  Entry e;
  e.in = in;
  const isa::InstrDesc& d = in.desc();
  for (int i = 0; i < d.num_operands; ++i)
    if (d.operands[i].kind == isa::OperandKind::Reg) e.in.f[i] = regs_[in.f[i]];
  e.pc = pc_;
  e.avail = at + 1;
  q.push(e);
}

RegUse reg_use(const isa::Instr& in) {
  RegUse r;
  const isa::InstrDesc& d = in.desc();
  for (int i = 0; i < d.num_operands; ++i) {
    if (d.operands[i].kind != isa::OperandKind::Reg || in.f[i] == 0) continue;
    const uint64_t bit = uint64_t{1} << in.f[i];
    if (d.unit == isa::Unit::Core && std::string_view(d.operands[i].name) == "rd")
      r.writes |= bit;
    else
      r.reads |= bit;
  }
  return r;
}

void Core::run_program() {
  RunState& r = st_.run;
  regs_.fill(0);
  t_ = st_.now();
  pc_ = 0;
  // The launch: its cycles pass before the first instruction.
  if (st_.cfg.chip.launch_cycles) {
    t_ += st_.cfg.chip.launch_cycles;
    st_.stats(isa::Unit::Core).stalls.launch += st_.cfg.chip.launch_cycles;
  }
  const size_t n = r.code.size();
  const uint64_t limit = r.opts.max_cycles ? r.t0 + r.opts.max_cycles : std::numeric_limits<uint64_t>::max();
  UnitStats& stats = st_.stats(isa::Unit::Core);
  const int width = st_.cfg.core.issue_width, scalars = st_.cfg.core.scalar_slots;
  Bundle bundle;
  bundle.closed = true;
  int64_t* R = regs_.data();
  uint32_t since_sync = 0;
  for (;;) {
    if (t_ >= limit)
      st_.fail_message("still running after " + std::to_string(r.opts.max_cycles) + " cycles at " + st_.where(pc_));
    if (pc_ == n) {  // running off the end is a halt, which takes its cycle too
      ++stats.stalls.busy;
      break;
    }
    const isa::Instr& in = r.code[pc_];
    ++stats.instructions;
    const isa::Unit u = r.unit_of[pc_];
    UnitModule* unit = u != isa::Unit::Core ? unit_of(in, u) : nullptr;
    // Into the open bundle (core.issue_width > 1), issued in its cycle t_ - 1, or a bundle of its own at t_
    const bool joins = bundle.fits(in, r.reg_use[pc_], unit, width, scalars);
    if (!joins) {
      ++stats.busy_cycles;
      ++stats.stalls.busy;
      bundle = Bundle{};
    }
    if (width > 1) bundle.add(in, r.reg_use[pc_], unit);
    if (u != isa::Unit::Core) {
      dispatch(in, u, unit, joins ? t_ - 1 : t_);
      if (!joins) ++t_;
      ++pc_;
      continue;
    }
    const auto& f = in.f;
    auto set = [R](int64_t rd, int64_t v) {
      if (rd) R[rd] = v;  // r0 stays 0
    };
    uint32_t next = pc_ + 1;
    switch (in.op) {
      case Op::NOP: break;
      case Op::HALT: goto halt;
      case Op::LI: set(f[0], f[1]); break;
      case Op::ADD: set(f[0], wrap_add(R[f[1]], R[f[2]])); break;
      case Op::SUB: set(f[0], wrap_sub(R[f[1]], R[f[2]])); break;
      case Op::MUL: set(f[0], wrap_mul(R[f[1]], R[f[2]])); break;
      case Op::DIV:
      case Op::REM: {
        int64_t a = R[f[1]], b = R[f[2]];
        if (b == 0) st_.fail(pc_, "division by zero");
        bool overflow = a == std::numeric_limits<int64_t>::min() && b == -1;  // wraps
        if (in.op == Op::DIV)
          set(f[0], overflow ? a : a / b);
        else
          set(f[0], overflow ? 0 : a % b);
        break;
      }
      case Op::AND: set(f[0], R[f[1]] & R[f[2]]); break;
      case Op::OR: set(f[0], R[f[1]] | R[f[2]]); break;
      case Op::XOR: set(f[0], R[f[1]] ^ R[f[2]]); break;
      case Op::SHL: set(f[0], static_cast<int64_t>(static_cast<uint64_t>(R[f[1]]) << (R[f[2]] & 63))); break;
      case Op::SHR: set(f[0], R[f[1]] >> (R[f[2]] & 63)); break;
      case Op::MIN: set(f[0], std::min(R[f[1]], R[f[2]])); break;
      case Op::MAX: set(f[0], std::max(R[f[1]], R[f[2]])); break;
      case Op::ADDI: set(f[0], wrap_add(R[f[1]], f[2])); break;
      case Op::MULI: set(f[0], wrap_mul(R[f[1]], f[2])); break;
      case Op::BEQ: if (R[f[0]] == R[f[1]]) next = target(f[2]); break;
      case Op::BNE: if (R[f[0]] != R[f[1]]) next = target(f[2]); break;
      case Op::BLT: if (R[f[0]] < R[f[1]]) next = target(f[2]); break;
      case Op::BGE: if (R[f[0]] >= R[f[1]]) next = target(f[2]); break;
      case Op::JMP: next = target(f[0]); break;
      case Op::SEMSET:
        if (f[0] == 0) st_.fail(pc_, "semaphore s0 does not exist (s1..s31)");
        drain(static_cast<int>(f[0]));
        st_.sem[f[0]] = static_cast<uint64_t>(f[1]);
        st_.sem_changed[f[0]].notify();
        break;
      case Op::FENCE: drain(); break;
      case Op::DELAY: {
        const int64_t d = R[f[0]];
        if (d < 0 || d > (int64_t{1} << 32))
          st_.fail(pc_, "delay of " + std::to_string(d) + " cycles (0 to 2^32)");
        if (d > 0 && st_.keeping_trace())
          st_.trace(static_cast<int>(isa::Unit::Core), t_, static_cast<uint64_t>(d), pc_,
                    "delay " + std::to_string(d), "busy");
        t_ += static_cast<uint64_t>(d);  // the core's software: busy
        stats.busy_cycles += static_cast<uint64_t>(d), stats.stalls.busy += static_cast<uint64_t>(d);
        break;
      }
      case Op::COREID: set(f[0], st_.index); break;
      case Op::CORECOUNT: set(f[0], st_.chip.running); break;
      case Op::BARRIER: barrier(); break;
      case Op::SEMSIGNAL: signal_core(R[f[0]], static_cast<int>(f[1])); break;
      default: st_.fail(pc_, "not a core instruction");
    }
    if (!joins) ++t_;
    pc_ = next;
    if (++since_sync == kSyncEvery) {
      since_sync = 0;
      sync();
    }
  }
halt:
  drain();
  if (st_.cfg.shared.cache && st_.cfg.shared.write_back) {  // HBM takes the lines the cache wrote back
    const uint64_t hbm = st_.mem.hbm_channels.busy_until(), t = t_;
    if (hbm > t_) {
      t_ = hbm;
      st_.stats(isa::Unit::Core).stalls.wait_drain += t_ - t;
      if (st_.keeping_trace())
        st_.trace(static_cast<int>(isa::Unit::Core), t, t_ - t, pc_, "drain (HBM takes the written-back lines)",
                  "wait");
    }
  }
  ++t_;
  st_.wait_until(t_);
  if (t_ > limit)
    st_.fail_message("still running after " + std::to_string(r.opts.max_cycles) + " cycles at " + st_.where(pc_));
  r.cycles = t_ - r.t0;
  r.finished = true;
}

}  // namespace tpusim::sim::detail
