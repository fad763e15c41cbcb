// The simulated chip: chip.cores cores, each an in-order dispatch core feeding per-unit queues (DMA in, DMA out,
// core.mxus matrix units, vector unit) with its own VMEM and accumulator memory; all cores share HBM and the
// [shared] on-chip memory. SystemC modules timed at instruction granularity.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/sim/config.h"
#include "tpusim/sim/energy.h"

namespace tpusim::sim {

// The most trace events a run keeps by default: each takes about 150 bytes of host memory, and about 250 bytes
// of Chrome trace JSON. A traced run that would record more stops with an error saying so (a looping kernel
// must not fill the host's memory); RunOptions::max_trace_events raises or lowers the limit.
inline constexpr uint64_t kDefaultMaxTraceEvents = 4'000'000;

struct RunOptions {
  bool functional = true;     // false: timing only, no arithmetic or data movement; the same cycles
  bool trace = false;         // record one TraceEvent per executed unit instruction
  uint64_t max_cycles = 0;    // 0: unlimited; otherwise a run still going after this many cycles is an error
  uint64_t max_trace_events = kDefaultMaxTraceEvents;  // with `trace`: more is an error (0: unlimited)
  // With shared.cache = 1: the cache's tags as this chip's previous run left them, as a kernel finds the L2 that
  // the kernels before it on the same GPU filled (timing only: a cache never changes which bytes a run reads).
  // false: the cache starts empty.
  bool warm_cache = false;
};

// Where each cycle of a run went, for one unit: every cycle in exactly one category, so that they add up to
// RunStats::cycles. Built from the unit's slices (busy, weight load, semaphore wait, memory wait); where slices
// overlap (the matrix unit's front-end waits while its array streams), the first category listed wins.
struct StallBreakdown {
  uint64_t wait_memory = 0;  // an executing instruction stalled on the memory system (UnitModule::note_memory_wait)
  uint64_t busy = 0;         // executing an instruction (the matrix unit: streaming input rows), not stalled on memory
  uint64_t weight_load = 0;  // matrix unit only: not streaming while a weight tile shifts into the array (mxu.lw)
  uint64_t wait_sem = 0;     // waiting for an instruction's `wait=` semaphore; the sum of wait_sem_by
  std::array<uint64_t, isa::kNumSems> wait_sem_by{};  // the same, per semaphore (index = semaphore number)
  uint64_t wait_queue = 0;   // core only: stalled because the queue it dispatches to is full
  uint64_t wait_drain = 0;   // core only: fence, sem.set, sem.signal, barrier or halt waiting until every unit is idle
  uint64_t wait_barrier = 0; // core only: at a barrier, waiting for the other cores (and chip.sync_latency)
  uint64_t launch = 0;       // core only: the launch overhead before the first instruction (chip.launch_cycles)
  uint64_t idle = 0;         // units: nothing to do (queue empty, nothing executing), before the unit's last work
  uint64_t idle_after = 0;   // units: after the unit's last work, to the end of the run
  uint64_t total() const {
    return wait_memory + busy + weight_load + wait_sem + wait_queue + wait_drain + wait_barrier + launch + idle +
           idle_after;
  }
};

struct UnitStats {
  uint64_t instructions = 0;
  uint64_t busy_cycles = 0;       // cycles with an instruction executing
  uint64_t wait_sem_cycles = 0;   // cycles waiting for a semaphore (`wait=`), overlapping work included
  uint64_t wait_queue_cycles = 0; // core only: cycles stalled because a unit's queue was full
  double utilization = 0;         // busy_cycles / total cycles
  StallBreakdown stalls;
};

// The performance counters of TPUv1 (Jouppi et al., ISCA 2017, Table 3), as fractions of the run's cycles,
// defined on our matrix unit. Each cycle is in exactly one of array_active, weight_stall, weight_shift and
// non_matrix (they add up to 1, as the paper's first rows do); raw_stall and input_stall are parts of non_matrix.
//   array_active  the array streams input rows (mxu.mm); = mxu.busy_cycles / cycles
//   useful_macs   mxu_macs / (rows * cols * cycles) (= mxu_mac_utilization); unused_macs = array_active - this
//   weight_shift  not streaming, while a weight tile shifts from VMEM into the array (mxu.lw, mxu.rows cycles)
//   weight_stall  not streaming nor shifting, the matrix unit waiting on the semaphore of an mxu.lw: its weights
//                 are not in VMEM yet (the weight DMA has not signalled)
//   non_matrix    the rest: no matrix work to do (queue empty, the array's skew and drain, after the last mm),
//                 or waiting on a semaphore for something other than weights:
//   input_stall   ... the semaphore of an mxu.mm or mxu.sync that only dmain instructions signal (inputs loading)
//   raw_stall     ... any other semaphore (e.g. accumulators freed by the vector unit, a sem.set by the core)
struct Tpuv1Counters {
  double array_active = 0, useful_macs = 0, unused_macs = 0, weight_stall = 0, weight_shift = 0, non_matrix = 0,
         raw_stall = 0, input_stall = 0;
};

// One unit of one core: "core1.mxu2".
struct UnitInstance {
  int core = 0;
  isa::Unit unit = isa::Unit::Core;
  int index = 0;  // matrix units: which one of the core's; 0 for the others
  UnitStats stats;
  ActionCounts actions;  // what this unit did (energy.h): the chip's RunStats::actions are their sum
  std::string name() const;
};

struct RunStats {
  uint64_t cycles = 0;            // the run's length: until its last core finished
  double seconds = 0;
  // Per kind of unit, over every core of the chip (and every matrix unit of each): counts and cycles are sums,
  // so a kind with n instances has stalls adding up to n * cycles; utilization = busy_cycles / (n * cycles).
  // On a chip of one core with one matrix unit these are that core's units.
  std::array<UnitStats, isa::kNumUnits> units{};   // indexed by isa::Unit
  std::vector<UnitInstance> instances;             // every unit of every core, core by core
  int cores = 1;                  // chip.cores
  int cores_running = 1;          // the program's .cores
  ActionCounts actions;           // what every unit did, for the energy model (tpusim/sim/energy.h)
  // From `actions`: useful multiply-accumulates (m * k * n per mxu.mm, i8, bf16 and f8e4m3), every matrix unit
  uint64_t mxu_macs = 0;
  double mxu_mac_utilization = 0; // mxu_macs / (rows * cols * cycles * every matrix unit of the chip), an i8 MAC
                                  // counting 1 / mxu.i8_rate, an f8e4m3 one 1 / mxu.fp8_rate (at most 1 on every chip)
  uint64_t hbm_bytes_read = 0;
  uint64_t hbm_bytes_written = 0;
  uint64_t shared_bytes_read = 0;    // the [shared] memory level, by DMA with `shared`, and a cache's hits
  uint64_t shared_bytes_written = 0; // by DMA with `shared` (a cache's fills are in actions, SharedWrite)
  uint64_t local_bytes_read = 0;     // the far side of DMA transfers within a core's VMEM (the local window)
  uint64_t local_bytes_written = 0;
  Tpuv1Counters tpuv1;            // over every matrix unit: fractions of cycles * matrix units

  // The stats file, with the chip's name and clock, and its energy, area and efficiency (docs/energy.md).
  std::string to_json(const ChipConfig& cfg) const;
};

struct TraceEvent {
  isa::Unit unit;               // with `core` and `index`: which unit (core 1's matrix unit 2: Mxu, 1, 2)
  uint64_t start = 0;   // cycle
  uint64_t duration = 0;
  uint32_t pc = 0;
  std::string name;     // the instruction as assembly text
  std::string kind;     // "busy", "load" (mxu.lw), "wait" (a semaphore, queue or drain wait, named in `name`:
                        // "wait s3"), "memory" (a memory wait inside a busy slice: "memory wait"), or "sync" (an
                        // instant: an mxu.sync completing, when the matrix unit's earlier work has landed)
  uint16_t core = 0;    // the core
  uint16_t index = 0;   // matrix units: the unit's index in its core
};

// Chrome trace event JSON (Perfetto opens it): one track per unit, timestamps in microseconds of simulated time.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const ChipConfig& cfg);
// The same, written to `os` as it is made (a long trace never exists twice in memory).
void write_chrome_trace(std::ostream& os, const std::vector<TraceEvent>& events, const ChipConfig& cfg);

// One process of a trace that ChromeTraceWriter writes: a chip's unit tracks under `pid`, named `name` (default:
// the chip's name); if `arg_of` is set, each unit slice for which it gives a string gets it as args.<arg_name>
// (the runtime's profiles name each slice's graph node so).
struct TraceProcess {
  int pid = 1;
  std::string name;
  std::string arg_name;
  std::function<const std::string*(const TraceEvent&)> arg_of;
};

// A Chrome trace written as it is made, in parts (write_chrome_trace is one process of it): the opening on
// construction, then processes and events of the caller's own tracks, then finish(). Each event is formatted
// alone, so a trace costs its text on `os`, never a JSON tree or a string of the whole.
class ChromeTraceWriter {
 public:
  explicit ChromeTraceWriter(std::ostream& os);
  // The unit tracks of one chip's run: the process's and tracks' names, then one slice per event.
  void process(const std::vector<TraceEvent>& events, const ChipConfig& cfg, const TraceProcess& p = {});
  // Any other trace event: one JSON object ({"name": ..., "ph": ...}).
  void event(const std::string& json_object);
  // The closing ("displayTimeUnit": "ns"); nothing may be written after it.
  void finish();

 private:
  std::ostream& os_;
  bool first_ = true;
};

struct RunResult {
  RunStats stats;
  std::vector<TraceEvent> trace;
  // With RunOptions::trace: what each instruction did (by pc, every core's executions summed), so that a profile
  // can give each region its energy. Their sum is stats.actions.
  std::vector<ActionCounts> actions_by_pc;
};

// Timing conventions (the rules of each unit are in its source file, sim/src/<unit>.cpp):
// - One SystemC nanosecond is one cycle of chip.clock_mhz; RunStats::cycles counts from the run's own start.
// - Every core instruction takes 1 cycle. A unit instruction is dispatched in that cycle and may start in the
//   next; a full queue stalls the core (wait_queue_cycles). halt, fence and sem.set wait until every unit is idle
//   with an empty queue, then take their cycle. An empty program takes 1 cycle, one scalar instruction 2, a lone
//   dma.ld of B bytes 1 + dma.latency + ceil(B / HBM bytes per cycle) + 1.
// - A unit waits for its `wait` semaphore before starting an instruction (wait_sem_cycles) and increments its
//   `signal` semaphore when the instruction completes.
// - Every cycle of every unit is booked to one stall category (UnitStats::stalls); RunStats::tpuv1 derives
//   TPUv1's counters from the matrix unit's categories.
class Chip {
 public:
  // Elaborates the chip. SystemC allows one elaboration per process: every Chip must be constructed before the
  // first run() of any of them, and none can be rebuilt afterwards.
  explicit Chip(const ChipConfig& cfg);
  ~Chip();
  Chip(const Chip&) = delete;
  Chip& operator=(const Chip&) = delete;

  const ChipConfig& config() const;

  // Host access to the chip's HBM; throws Error on an access outside hbm.size_mib.
  void write_hbm(uint64_t addr, const void* data, size_t bytes);
  void read_hbm(uint64_t addr, void* data, size_t bytes) const;
  // Host access to VMEM (tensors a program keeps on chip, `.input x, ... @ vmem ADDR`); bounds-checked the same way.
  void write_vmem(uint64_t addr, const void* data, size_t bytes);
  void read_vmem(uint64_t addr, void* data, size_t bytes) const;

  // Runs a program to completion from pc 0. Memory contents persist between runs. Throws Error on a run-time
  // fault ("pc 12 (dma.ld r1, ...): VMEM access [0x1000, 0x2000) outside 1048576 bytes"), on a deadlock
  // (naming which unit waits on which semaphore), or past max_cycles.
  RunResult run(const isa::Program& program, const RunOptions& opts = {});

  // The same run in three steps, so that several chips run their programs together, overlapping in simulated
  // time, in one sc_start (run() is start, run_started({this}), finish()):
  // - start() checks and decodes the program and arms the chip's core at the current simulated time; it does not
  //   advance time. `program` must outlive finish(). Throws Error if the chip is already started or on a bad word.
  // - run_started() advances the simulation until every started chip has finished, failed or deadlocked (each
  //   chip's max_cycles applies to it alone), then unwinds the chips that failed so that they can run again.
  // - finish() returns the chip's RunResult, or throws the same Error run() would have; the chip can start again.
  // Like every SystemC call, all three must be called on the one thread that constructed the chips.
  void start(const isa::Program& program, const RunOptions& opts = {});
  static void run_started(const std::vector<Chip*>& chips);
  RunResult finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpusim::sim
