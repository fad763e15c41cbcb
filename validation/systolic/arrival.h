// When each matrix-unit instruction of a whole program reaches the PE-level model's front-end (Instr::arrive),
// derived from the program and from the other units' semaphore signals, with none of the matrix unit's own timing
// rules (those are the PE model's, systolic.cpp, and the simulator's, sim/src/mxu.cpp; this file restates
// neither).
//
// An instruction arrives when both hold:
//   - it has been dispatched: the core issues one instruction a cycle, in program order, so the n-th instruction
//     it executes (from 0) is dispatched at cycle n and its unit may take it at n + 1. The scalar instructions
//     are interpreted here to follow the program's branches and the unit instructions' register operands;
//   - its `wait` semaphore holds a token for it (its operands are in VMEM, its accumulators free): the j-th
//     acquire of semaphore s by the matrix unit (j from 1, in program order) needs init(s) + (signals of s by
//     the other units up to cycle t) >= j, where init(s) is the program's sem.set.
// The other units' signals are given (`signals`: the cycle each executed instruction of the DMA engines and the
// vector unit signalled), so the PE model sees the same non-matrix timing as the simulator did: if the PE
// model's own signals (its lw and sync ends) then agree with the simulator's, that replay is exact.
// Outside what this covers it throws std::invalid_argument: a core wait (fence, a sem.set once a unit
// instruction has been dispatched), a semaphore the matrix unit waits on that another unit also waits on or that
// the matrix unit itself signals, a program that runs past `max_steps` instructions. A full queue would delay
// dispatch: run the simulator with queues deep enough that the core never waits (its wait_queue_cycles = 0).
#pragma once

#include <cstdint>
#include <vector>

#include "systolic.h"
#include "tpusim/isa/program.h"

namespace tpusim::systolic {

struct Signal {
  uint32_t pc;     // the instruction (of a unit other than the matrix unit)
  uint64_t cycle;  // when it signalled its `signal` semaphore
};

struct Replay {
  std::vector<Instr> instrs;  // the matrix unit's instructions in execution order, with shapes and arrivals
  std::vector<uint32_t> pcs;  // the pc of each
  uint64_t core_end = 0;      // the cycle the core reaches the end of the program (halt), before draining
};

Replay derive_arrivals(const isa::Program& program, const std::vector<Signal>& signals,
                       uint64_t max_steps = 100'000'000);

}  // namespace tpusim::systolic
