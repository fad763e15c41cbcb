// A cycle-accurate, PE-level model of the matrix unit's systolic array (docs/architecture.md decision 1): R x C
// processing elements, each with its own registers, advanced one clock at a time; values move only between
// neighbouring PEs (or in from the array's edges), as in hardware. It shares no code with the simulator (sim/):
// the conformance suite (conformance_test.cpp) checks the simulator's transaction-level formulas against it.
//
// The three dataflows and the mechanisms simulated here are described in docs/dataflows.md:
//   ws  PE (r, c) holds b[r][c] (double-buffered: active + shadow, the tile shifted down each column with a
//       one-cycle skew per column); rows of a enter from the left skewed by row, partial sums flow down and
//       leave the bottom; a tile generation tag travels with the inputs and swaps the shadow in, PE by PE.
//   os  PE (r, c) accumulates out[r][c] of a fold of R rows (two accumulator registers, alternate folds); a
//       enters from the left, the staged tile of b from the top, both skewed; when the bottom PE of a column has
//       made its last MAC, that column's accumulators shift down and out, one per cycle.
//   is  PE (r, c) holds a[row c of the fold][r] (double-buffered like ws's weights); the staged tile's columns
//       enter from the left skewed by row, partial sums flow down and leave the bottom.
// Hazards (a register overwritten before use, a swap to a tile not fully loaded, two drains on one column
// port, mismatched operands meeting in a PE) throw std::logic_error: the timing rules must never allow them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tpusim::systolic {

enum class Dataflow { WS, OS, IS };
Dataflow parse_dataflow(const std::string& s);  // "ws", "os", "is"; throws std::invalid_argument
const char* name(Dataflow d);

// One matrix-unit instruction as the array sees it.
struct Instr {
  enum Kind { LW, MM, SYNC } kind = LW;
  uint64_t arrive = 0;     // first cycle the unit's front-end may take it (dispatched, semaphore acquired)
  int k = 0, n = 0;        // LW: tile shape, k <= rows, n <= cols
  std::vector<int32_t> b;  // LW: k x n, row-major (may be empty when values are not computed)
  int m = 0;               // MM: rows of a (m >= 1)
  std::vector<int32_t> a;  // MM: m x k, k of the tile in use (may be empty when values are not computed)
};

// LW: [first cycle of the load, cycle from which a stream may use the tile).
// MM: [first cycle its first input enters the array, cycle after its last output left the array).
// SYNC (mxu.sync): [the cycle the front-end takes it, the cycle every earlier instruction has ended): the
// matrix unit signals in order.
struct Timing {
  uint64_t start = 0, end = 0;
};

struct Result {
  std::vector<Timing> timing;               // per instruction
  std::vector<std::vector<int64_t>> out;    // per instruction: MM's m x n products (empty for LW)
  uint64_t total = 0;                       // the latest end
  uint64_t cycles_stepped = 0;              // clocks actually simulated (idle gaps are skipped)
};

// Runs the instructions in order on an R x C array (1..1024 each). With values == false the PEs carry zeros
// (the timing is the same); with true, every instruction must carry its data.
Result run(Dataflow df, int rows, int cols, const std::vector<Instr>& prog, bool values = true);

}  // namespace tpusim::systolic
