// The simulated chip: an in-order dispatch core feeding per-unit queues (DMA in, DMA out, matrix unit, vector
// unit), HBM, VMEM and the accumulator memory, as SystemC modules timed at instruction granularity.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/sim/config.h"

namespace tpusim::sim {

struct RunOptions {
  bool functional = true;     // false: timing only, no arithmetic or data movement; the same cycles
  bool trace = false;         // record one TraceEvent per executed unit instruction
  uint64_t max_cycles = 0;    // 0: unlimited; otherwise a run still going after this many cycles is an error
};

struct UnitStats {
  uint64_t instructions = 0;
  uint64_t busy_cycles = 0;       // cycles with an instruction executing
  uint64_t wait_sem_cycles = 0;   // cycles waiting for a semaphore (`wait=`)
  uint64_t wait_queue_cycles = 0; // core only: cycles stalled because a unit's queue was full
  double utilization = 0;         // busy_cycles / total cycles
};

struct RunStats {
  uint64_t cycles = 0;
  double seconds = 0;
  std::array<UnitStats, isa::kNumUnits> units{};   // indexed by isa::Unit
  uint64_t mxu_macs = 0;          // useful multiply-accumulates (m * k * n per mxu.mm)
  double mxu_mac_utilization = 0; // mxu_macs / (rows * cols * cycles)
  uint64_t hbm_bytes_read = 0;
  uint64_t hbm_bytes_written = 0;

  std::string to_json(const ChipConfig& cfg) const;  // the stats file, with the chip's name and clock
};

struct TraceEvent {
  isa::Unit unit;
  uint64_t start = 0;   // cycle
  uint64_t duration = 0;
  uint32_t pc = 0;
  std::string name;     // the instruction as assembly text
  std::string kind;     // "busy" or "wait" (a semaphore wait, named in `name`)
};

// Chrome trace event JSON (Perfetto opens it): one track per unit, timestamps in microseconds of simulated time.
std::string chrome_trace_json(const std::vector<TraceEvent>& events, const ChipConfig& cfg);

struct RunResult {
  RunStats stats;
  std::vector<TraceEvent> trace;
};

// Timing conventions (the rules of each unit are in its source file, sim/src/<unit>.cpp):
// - One SystemC nanosecond is one cycle of chip.clock_mhz; RunStats::cycles counts from the run's own start.
// - Every core instruction takes 1 cycle. A unit instruction is dispatched in that cycle and may start in the
//   next; a full queue stalls the core (wait_queue_cycles). halt, fence and sem.set wait until every unit is idle
//   with an empty queue, then take their cycle. An empty program takes 1 cycle, one scalar instruction 2, a lone
//   dma.ld of B bytes 1 + dma.latency + ceil(B / HBM bytes per cycle) + 1.
// - A unit waits for its `wait` semaphore before starting an instruction (wait_sem_cycles) and increments its
//   `signal` semaphore when the instruction completes.
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

  // Runs a program to completion from pc 0. Memory contents persist between runs. Throws Error on a run-time
  // fault ("pc 12 (dma.ld r1, ...): VMEM access [0x1000, 0x2000) outside 1048576 bytes"), on a deadlock
  // (naming which unit waits on which semaphore), or past max_cycles.
  RunResult run(const isa::Program& program, const RunOptions& opts = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace tpusim::sim
