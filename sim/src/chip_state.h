// What one core's SystemC modules share (ChipState, one per core): configuration, memories, semaphores, the
// running program, its stats, trace and first error, and the helpers every thread uses to wait; and what the
// cores of one chip share (ChipShared): HBM, the shared memory level, the barrier, and the error that stops them
// all.
//
// Time: one SystemC nanosecond is one chip cycle (whatever chip.clock_mhz is); stats and traces convert cycles
// to seconds with the clock. SystemC time keeps increasing from run to run, so every run counts its cycles from
// its own start (RunState::t0).
//
// Errors: a fault inside a thread must not throw through SystemC. fail() records the first error, drops all
// queued and in-flight work, wakes every thread and throws Abort, which each thread catches at the top of its
// loop; the simulation then runs out of events, sc_start() returns and Chip::run throws sim::Error.
#pragma once

#include <systemc>

#include <array>
#include <deque>
#include <span>
#include <cstdint>
#include <string>
#include <vector>

#include "memory.h"
#include "tpusim/sim/chip.h"

namespace tpusim::sim::detail {

class ChipState;

// Unit slots of a core, for per-instance stats and spans: slot u for isa::Unit u (matrix unit 0 in slot
// isa::Unit::Mxu), then matrix units 1.. after isa::kNumUnits.
inline int slot_of(isa::Unit u, int index) {
  return u == isa::Unit::Mxu && index > 0 ? isa::kNumUnits + index - 1 : static_cast<int>(u);
}
inline isa::Unit unit_of_slot(int slot) { return slot < isa::kNumUnits ? static_cast<isa::Unit>(slot) : isa::Unit::Mxu; }
inline int index_of_slot(int slot) { return slot < isa::kNumUnits ? 0 : slot - isa::kNumUnits + 1; }

// A `dma.ld ... mcast` waiting for its pair's load (isa.def): the core and pc that issued it, its HBM side, and
// when its data starts and ends (the read the pair shares).
struct McastLoad {
  int core = 0;
  uint32_t pc = 0;
  Rows hbm;
  uint64_t data_start = 0, data_end = 0;
};

// The registers an instruction reads and writes, as masks (bit i: register i; r0 left out, it stays 0): a scalar
// instruction writes its rd and reads its other register operands, a unit instruction reads all of its own. For
// the core's bundles (core.issue_width), worked out once per program (reg_use, core.cpp).
struct RegUse {
  uint64_t reads = 0, writes = 0;
};
RegUse reg_use(const isa::Instr& in);

// What the cores of one chip share.
struct ChipShared {
  explicit ChipShared(const ChipConfig& cfg) : mem(cfg) {}
  ChipMemories mem;
  std::vector<ChipState*> cores;  // every core of the chip, by index
  uint32_t running = 1;           // cores running the current program (its .cores)
  // The current program, decoded once for every core.
  std::vector<isa::Instr> code;
  std::vector<isa::Unit> unit_of;
  std::vector<RegUse> reg_use;
  std::vector<std::string> text;
  // The barrier: cores arrived in the current generation, the generation, and when the last one released.
  uint32_t barrier_arrived = 0;
  uint64_t barrier_generation = 0, barrier_release = 0;
  sc_core::sc_event barrier_ev;
  // With RunOptions::trace: the actions of each instruction, every core's together (RunResult::actions_by_pc);
  // empty otherwise.
  std::vector<ActionCounts> actions_by_pc;
  // Per pair of cores (2i, 2i + 1): the multicast loads one of them issued that the other has not yet matched,
  // in order (all from one core).
  std::vector<std::deque<McastLoad>> mcast;
};

// Thrown inside a SystemC thread to unwind it to its idle loop after an error; never leaves that thread.
struct Abort {};

// One stretch of a unit's time, for the stall accounting (stats.cpp turns them into UnitStats::stalls and
// RunStats::tpuv1). Cycles count from the run's start.
struct Span {
  enum Kind : uint8_t { Busy, Load, Sem, Memory };
  uint64_t start = 0, end = 0;  // [start, end)
  Kind kind = Busy;
  uint8_t sem = 0;              // Sem: the semaphore waited for
  isa::Op op = isa::Op::NOP;    // Sem: the waiting instruction
};

// Everything about the program being run; reset by Chip::run before each run.
struct RunState {
  const isa::Program* program = nullptr;
  std::span<const isa::Instr> code;     // decoded once per run (ChipShared::code, shared by the cores)
  std::span<const isa::Unit> unit_of;   // per instruction: the queue that executes it
  std::span<const RegUse> reg_use;      // per instruction: the registers it reads and writes
  std::vector<std::string>* text = nullptr;  // per instruction: its assembly text, filled on first use
  RunOptions opts;
  uint64_t t0 = 0;                      // SystemC cycle at which the run started
  bool finished = false;
  uint64_t cycles = 0;                  // length of the run, set when it finishes
  std::string error;                    // the first error; the run stops there
  RunStats stats;
  std::vector<TraceEvent> trace;
  std::vector<std::vector<Span>> spans;   // by unit slot (slot_of); the core books its stalls directly
  std::vector<UnitStats> mxu_stats;       // matrix units 1.. (unit 0's are stats.units[Mxu])
  std::vector<ActionCounts> slot_actions; // by unit slot: what each unit did (ChipState::act)
  bool running = false;                   // this core runs the program (its index < the program's .cores)
  double mac_slots = 0;                   // MACs in units of the array's slots (i8 ones count 1 / mxu.i8_rate, f8e4m3 1 / fp8_rate)
};

class UnitModule;

class ChipState {
 public:
  ChipState(const ChipConfig& cfg, ChipShared& chip, int index);

  const ChipConfig cfg;
  ChipShared& chip;
  const int index;  // the core's number, core.id
  Memories mem;
  RunState run;

  std::array<uint64_t, isa::kNumSems> sem{};              // s1..s31; [0] unused
  std::array<sc_core::sc_event, isa::kNumSems> sem_changed;
  sc_core::sc_event drained;                              // a unit has become idle
  sc_core::sc_event abort_ev;                             // wakes timed waits when a run is aborted
  // sem.signal from other cores (or this one) on the way: (cycle it lands, semaphore); Core::remote_thread
  // applies them.
  std::vector<std::pair<uint64_t, int>> remote_signals;
  sc_core::sc_event remote_ev;
  bool aborting = false;
  std::array<UnitModule*, isa::kNumUnits> units{};        // by isa::Unit; units[Core] stays null; [Mxu] = mxu 0
  std::vector<UnitModule*> mxus;                          // the core's matrix units, by index
  std::vector<UnitModule*> all_units;                     // every unit module of the core
  std::vector<sc_core::sc_event*> events;                 // every event a thread waits on (notified on abort)

  uint64_t now() const { return sc_core::sc_time_stamp().value() / cycle_value_; }
  sc_core::sc_time span(uint64_t cycles) const { return sc_core::sc_time::from_value(cycles * cycle_value_); }
  // Waits until `cycle` (no-op if it has passed) or an event; both throw Abort if the run is being aborted.
  void wait_until(uint64_t cycle);
  void wait_event(sc_core::sc_event& e);
  void check_abort() const {
    if (aborting) throw Abort{};
  }

  bool all_idle() const;
  bool all_idle_but_background(int sem) const;  // UnitModule::idle_but_background of every unit
  void signal(int s, uint32_t pc);  // increments semaphore s (0: none); past isa::kSemMax fails at pc
  void signal(int s);               // the same for a sem.signal arriving from a core (no unit instruction)
  std::string sem_overflow(int s) const;

  UnitStats& stats(isa::Unit u) { return run.stats.units[static_cast<int>(u)]; }
  UnitStats& slot_stats(int slot) {
    return slot < isa::kNumUnits ? run.stats.units[slot] : run.mxu_stats[slot - isa::kNumUnits];
  }
  int slots() const { return isa::kNumUnits + cfg.core.mxus - 1; }
  bool functional() const { return run.opts.functional; }
  // Counts `n` of action `a`, done by the unit in `slot` for the instruction at `pc` (energy.h).
  void act(int slot, uint32_t pc, Action a, uint64_t n) {
    run.slot_actions[static_cast<size_t>(slot)][a] += n;
    if (!chip.actions_by_pc.empty()) chip.actions_by_pc[pc][a] += n;
  }
  // Units report each slice of their time through trace() (kinds "busy", "load", "wait", "memory"): the stall
  // accounting is built from the "busy" and "load" slices of every run, so tracing() is always true; TraceEvents
  // are kept only when RunOptions::trace asks for them (keeping_trace()).
  bool tracing() const { return true; }
  bool keeping_trace() const { return run.opts.trace; }
  // `slot`: the unit's slot (slot_of; isa::Unit values for the core and the units of which there is one).
  void trace(int slot, uint64_t start, uint64_t dur, uint32_t pc, const std::string& name, const char* kind);
  // The same named by the instruction at pc (text(pc), formatted only where the trace is kept).
  void trace(int slot, uint64_t start, uint64_t dur, uint32_t pc, const char* kind);
  // Books [start, end) (SystemC cycles, as now()) of the unit in `slot` to the stall accounting.
  void account(int slot, uint64_t start, uint64_t end, Span::Kind kind, int sem = 0, isa::Op op = isa::Op::NOP);

  const std::string& text(uint32_t pc);  // "dma.ld r1, r2, r3, r4, r5, r6"
  std::string where(uint32_t pc);        // "pc 12 (dma.ld r1, ...)", with the source line if the program has one

  // Records `where(pc): what` (or `message`) as the run's error unless one is recorded, aborts every core of the
  // chip, throws Abort. With several cores running, where() names the core.
  [[noreturn]] void fail(uint32_t pc, const std::string& what);
  [[noreturn]] void fail_message(const std::string& message);
  // The same without throwing: for a thread that caught something other than Abort (a bug, or out of memory).
  void record_error(const std::string& message);
  // Drops all queued and in-flight work of this core and wakes every thread so that it unwinds to its idle loop.
  void abort_run();
  // "core 2: " when the chip runs the program on several cores, else "".
  std::string core_prefix() const;
  // Clears semaphores, HBM booking and every unit's state for a new run.
  void reset_units();

 private:
  uint64_t cycle_value_;  // SystemC time value of one cycle (1 ns)
};

// TPUv1's categories of a matrix unit cycle, in cycles (Tpuv1Counters has the definitions).
struct Tpuv1Cycles {
  uint64_t active = 0, weight_stall = 0, weight_shift = 0, non_matrix = 0, raw = 0, input = 0;
};

// For each semaphore, the units whose instructions signal it (bit per isa::Unit; the core's bit for sem.set), from
// the program run.code holds (stats.cpp).
using Signallers = std::array<uint32_t, isa::kNumSems>;
Signallers signallers(const RunState& run);
// Fills the stalls of every unit slot of one core but the core's own (booked as it runs) from run.spans over
// [0, cycles) (the chip's cycles), and adds its matrix units' TPUv1 categories to v1 (stats.cpp).
void account_stalls(const RunState& run, const Signallers& sig, uint64_t cycles, std::vector<StallBreakdown>& out,
                    Tpuv1Cycles& v1);
// TPUv1's counters from the categories of every matrix unit: fractions of `unit_cycles` (cycles * units).
void tpuv1_counters(const Tpuv1Cycles& v1, double unit_cycles, double mac_utilization, Tpuv1Counters& out);
// Adds u's counts and cycles (stalls included) to `into`; utilization is left to the caller.
void add_unit_stats(UnitStats& into, const UnitStats& u);

}  // namespace tpusim::sim::detail
