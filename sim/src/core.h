// The dispatch core: fetches instructions in order, executes scalar ones itself and pushes the others into the
// units' queues.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "chip_state.h"
#include "unit.h"

namespace tpusim::sim::detail {

class Core : public sc_core::sc_module {
 public:
  Core(const sc_core::sc_module_name& name, ChipState& st);

  sc_core::sc_event start;  // Chip::run notifies it to run st.run's program from pc 0

  // For the deadlock and max_cycles messages.
  std::string blocked() const;  // "core waits for the units to drain at pc 30 (halt)", or ""
  uint32_t pc() const { return pc_; }

 private:
  SC_HAS_PROCESS(Core);
  void thread();
  void remote_thread();  // applies sem.signal increments from other cores when they land
  void barrier();
  void signal_core(int64_t core, int sem);
  void run_program();
  UnitModule* unit_of(const isa::Instr& in, isa::Unit u);  // the queue a unit instruction goes to
  // Dispatches to `unit`'s queue in cycle `at` (before t_: into the open bundle, whose queue has room)
  void dispatch(const isa::Instr& in, isa::Unit u, UnitModule* unit, uint64_t at);
  void push(const isa::Instr& in, UnitQueue& q, uint64_t at);
  // An instruction that takes a cycle of its own (it waits for the units, another core or time) or ends its
  // bundle (a branch)
  static bool alone(isa::Op op) {
    return op == isa::Op::SEMSET || op == isa::Op::FENCE || op == isa::Op::BARRIER || op == isa::Op::SEMSIGNAL ||
           op == isa::Op::DELAY || op == isa::Op::HALT;
  }
  static bool branch(isa::Op op) {
    return op == isa::Op::BEQ || op == isa::Op::BNE || op == isa::Op::BLT || op == isa::Op::BGE || op == isa::Op::JMP;
  }
  // The bundle being issued (core.issue_width, core.scalar_slots): what it holds so far
  struct Bundle {
    bool closed = false;
    int n = 0, scalars = 0, queues = 0;
    uint64_t written = 0;                   // registers its instructions write
    std::array<const UnitModule*, 16> unit{};  // the queues its unit instructions went to
    bool fits(const isa::Instr& in, const RegUse& r, const UnitModule* u, int width, int max_scalars) const {
      if (closed || n == 0 || n >= width) return false;
      if (!u) {
        if (scalars >= max_scalars || alone(in.op)) return false;
      } else if (std::find(unit.begin(), unit.begin() + queues, u) != unit.begin() + queues || u->queue.full() ||
                 queues == static_cast<int>(unit.size())) {
        return false;
      }
      return ((r.reads | r.writes) & written) == 0;
    }
    void add(const isa::Instr& in, const RegUse& r, const UnitModule* u) {
      ++n;
      if (!u) ++scalars;
      else unit[static_cast<size_t>(queues++)] = u;
      written |= r.writes;
      closed = alone(in.op) || branch(in.op);
    }
  };
  // Waits until every unit is idle (sem > 0: as sem.set needs it, background loads that do not signal it aside)
  void drain(int sem = 0);
  void sync();
  uint32_t target(int64_t t) const;

  ChipState& st_;
  std::array<int64_t, isa::kNumRegs> regs_{};
  // The core's own clock: ahead of SystemC time between syncs (temporal decoupling), so that scalar code costs
  // no SystemC events. It syncs before anything that depends on another unit's state at the current cycle.
  uint64_t t_ = 0;
  uint32_t pc_ = 0;
  enum class Block { None, Queue, Drain, Barrier } block_ = Block::None;
  isa::Unit block_unit_ = isa::Unit::Core;
};

}  // namespace tpusim::sim::detail
