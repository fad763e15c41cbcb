// The dispatch core: fetches instructions in order, executes scalar ones itself and pushes the others into the
// units' queues.
#pragma once

#include <array>
#include <string>

#include "chip_state.h"

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
  void dispatch(const isa::Instr& in, isa::Unit u);
  void drain();
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
