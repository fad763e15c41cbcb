// The matrix unit: an mxu.rows x mxu.cols systolic array with a double-buffered tile of b (active + shadow),
// writing into the accumulator memory. Its dataflow (mxu.dataflow: weight-, output- or input-stationary) sets
// the timing only; the results are the same (mxu.cpp, docs/dataflows.md).
#pragma once

#include <memory>
#include <queue>
#include <vector>

#include "unit.h"

namespace tpusim::sim::detail {

enum class Dataflow { WS, OS, IS };

class Mxu : public UnitModule {
 public:
  SC_HAS_PROCESS(Mxu);
  Mxu(const sc_core::sc_module_name& name, ChipState& st, int index);
  bool idle() const override { return UnitModule::idle() && pending_.empty(); }
  void reset() override;

 private:
  struct Tile {
    int k = 0, n = 0;
    isa::DType dtype = isa::DType::I8;
    std::vector<float> w;  // k x n, row-major; filled when its mxu.lw completes (functional runs only)
  };
  // Work that completes after the front-end has moved on: a weight load, or an mxu.mm's results.
  struct Completion {
    uint64_t time, seq;
    Entry e;
    std::shared_ptr<Tile> tile;
    bool operator>(const Completion& o) const { return time != o.time ? time > o.time : seq > o.seq; }
  };

  void execute(const Entry& e) override;
  void load_weights(const Entry& e);
  void matmul(const Entry& e);
  void schedule(uint64_t time, const Entry& e, std::shared_ptr<Tile> tile);
  void retire_in_order(const Entry& e);
  // Books a read of `rows` rows on VMEM's bank ports from cycle `from` (the matrix unit's reads have priority:
  // they are booked, so others wait for them, and never delayed).
  void read_vmem(uint64_t from, int64_t vaddr, int64_t rows, int64_t rowbytes, int64_t stride);  // completes after everything scheduled before it
  void retire_thread();
  void complete(const Completion& c);
  void fill_tile(const Entry& e, Tile& t);
  void compute(const Entry& e, const Tile& t);
  void check_fp8(uint64_t pc, isa::DType dt);  // fails an f8e4m3 instruction on a chip without an fp8 rate
  uint64_t rate_of(isa::DType dt) const;       // input rows per stream cycle (mxu.i8_rate, mxu.fp8_rate or 1)
  // A stream of `cycles` at the array's rate, taken at mxu.efficiency of it: cycles / efficiency, the fraction
  // carried to the next stream so that a run of streams averages exactly that rate (cycles itself at 1).
  uint64_t sustained(uint64_t cycles);

  const uint64_t R_, C_;
  const Dataflow df_;
  const int index_;           // which of the core's matrix units
  const int64_t acc_base_;    // its first row in the core's accumulator memory (index * mxu.acc_rows)
  const uint64_t i8_rate_;    // mxu.i8_rate
  const uint64_t fp8_rate_;   // mxu.fp8_rate (0: no fp8)
  const double efficiency_;   // mxu.efficiency
  double carry_ = 0;          // the fraction of a cycle the streams so far have not yet taken (sustained)
  std::priority_queue<Completion, std::vector<Completion>, std::greater<>> pending_;
  sc_core::sc_event pending_changed_;
  uint64_t seq_ = 0;
  uint64_t stream_free_ = 0;   // first cycle the array can take another stream of input rows
  uint64_t shadow_free_ = 0;   // first cycle the shadow buffer may start loading a tile
  uint64_t shadow_ready_ = 0;  // cycle at which shadow_ is fully loaded
  uint64_t last_completion_ = 0;  // latest completion time scheduled so far
  uint64_t out_free_ = 0;      // os: a fold's stream may end no earlier (its outputs drain after the last fold's)
  uint64_t a_shadow_free_ = 0; // is: first cycle the PEs' shadow registers may load another block of a
  std::shared_ptr<Tile> shadow_;  // a tile loaded (or loading) but not yet swapped in
  std::shared_ptr<Tile> active_;  // the tile in the array
};

}  // namespace tpusim::sim::detail
