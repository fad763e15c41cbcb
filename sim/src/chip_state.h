// What the chip's SystemC modules share: configuration, memories, semaphores, the running program, its stats,
// trace and first error, and the helpers every thread uses to wait.
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
#include <cstdint>
#include <string>
#include <vector>

#include "memory.h"
#include "tpusim/sim/chip.h"

namespace tpusim::sim::detail {

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
  std::vector<isa::Instr> code;         // decoded once per run
  std::vector<isa::Unit> unit_of;       // per instruction: the queue that executes it
  std::vector<std::string> text;        // per instruction: its assembly text, filled on first use
  RunOptions opts;
  uint64_t t0 = 0;                      // SystemC cycle at which the run started
  bool finished = false;
  uint64_t cycles = 0;                  // length of the run, set when it finishes
  std::string error;                    // the first error; the run stops there
  RunStats stats;
  std::vector<TraceEvent> trace;
  std::array<std::vector<Span>, isa::kNumUnits> spans;  // by isa::Unit; the core books its stalls directly
};

class UnitModule;

class ChipState {
 public:
  explicit ChipState(const ChipConfig& cfg);

  const ChipConfig cfg;
  Memories mem;
  RunState run;

  std::array<uint64_t, isa::kNumSems> sem{};              // s1..s31; [0] unused
  std::array<sc_core::sc_event, isa::kNumSems> sem_changed;
  sc_core::sc_event drained;                              // a unit has become idle
  sc_core::sc_event abort_ev;                             // wakes timed waits when a run is aborted
  bool aborting = false;
  std::array<UnitModule*, isa::kNumUnits> units{};        // by isa::Unit; units[Core] stays null
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
  void signal(int s, uint32_t pc);  // increments semaphore s (0: none); past isa::kSemMax fails at pc

  UnitStats& stats(isa::Unit u) { return run.stats.units[static_cast<int>(u)]; }
  bool functional() const { return run.opts.functional; }
  // Units report each slice of their time through trace() (kinds "busy", "load", "wait", "memory"): the stall
  // accounting is built from the "busy" and "load" slices of every run, so tracing() is always true; TraceEvents
  // are kept only when RunOptions::trace asks for them (keeping_trace()).
  bool tracing() const { return true; }
  bool keeping_trace() const { return run.opts.trace; }
  void trace(isa::Unit u, uint64_t start, uint64_t dur, uint32_t pc, const std::string& name, const char* kind);
  // Books [start, end) (SystemC cycles, as now()) of unit u to the stall accounting.
  void account(isa::Unit u, uint64_t start, uint64_t end, Span::Kind kind, int sem = 0, isa::Op op = isa::Op::NOP);

  const std::string& text(uint32_t pc);  // "dma.ld r1, r2, r3, r4, r5, r6"
  std::string where(uint32_t pc);        // "pc 12 (dma.ld r1, ...)", with the source line if the program has one

  // Records `where(pc): what` (or `message`) as the run's error unless one is recorded, aborts, throws Abort.
  [[noreturn]] void fail(uint32_t pc, const std::string& what);
  [[noreturn]] void fail_message(const std::string& message);
  // The same without throwing: for a thread that caught something other than Abort (a bug, or out of memory).
  void record_error(const std::string& message);
  // Drops all queued and in-flight work and wakes every thread so that it unwinds to its idle loop.
  void abort_run();
  // Clears semaphores, HBM booking and every unit's state for a new run.
  void reset_units();

 private:
  uint64_t cycle_value_;  // SystemC time value of one cycle (1 ns)
};

// Fills every unit's stalls (the core's are booked as it runs) and the TPUv1 counters from run.spans, once
// run.cycles is known (stats.cpp).
void account_stalls(const ChipConfig& cfg, const RunState& run, RunStats& out);

}  // namespace tpusim::sim::detail
