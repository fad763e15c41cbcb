// The report side of `tpusim validate` (docs/validation.md): per-case rows of measured and simulated kernel
// times, the error statistics per operator class and per regime, and the files a validation run writes.
//
// A Case is one row of a golden file (validation/goldens/h200/*.csv): the operator class ("gemm_bf16",
// "gemm_fp8", "attention_causal", "attention_encoder"), its shape as named columns in the golden file's order
// (e.g. {"m", 4096}, {"n", 4096}, {"k", 4096}), the measured latency, and what the validation computed for it.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

namespace tpusim::explore {
class ProgressLine;
}

namespace tpusim::validate {

// Where a case's time goes by the plain roofline of the chip it is held against: launch-bound when the roofline
// time max(flops / peak, bytes / bandwidth) is below the chip's fixed kernel overhead, otherwise memory-bound
// when bytes / bandwidth >= flops / peak, else compute-bound.
enum class Regime { Launch, Memory, Compute };
const char* regime_name(Regime r);  // "launch", "memory", "compute"

struct Case {
  std::string cls;                                     // operator class, e.g. "gemm_bf16"
  std::vector<std::pair<std::string, int64_t>> shape;  // the golden file's shape columns, in order
  double flops = 0, bytes = 0;                         // the operation's own work (each operand read once)
  double measured_us = 0;                              // the golden measurement
  bool held_out = false;                               // in the held-out part (never used to set parameters)
  // Filled in by the validation:
  Regime regime = Regime::Compute;
  double simulated_us = 0;  // tpusim's simulated time (timing-only); NaN when the case failed
  double roofline_us = 0;   // the plain baseline: max(flops / peak, bytes / bandwidth) + fixed overhead
  double wall_s = 0;        // wall time to compile and simulate the case
  std::string error;        // non-empty when the case could not be compiled or simulated
};

// A case failed when it has an error message or no finite simulated time; it is counted, never scored.
bool case_failed(const Case& c);

// Signed relative error of a prediction: (predicted - measured) / measured.
double rel_error(double predicted, double measured);

// Error statistics of one group of cases (absolute percentage errors |rel_error| * 100).
struct ErrorStats {
  size_t n = 0;            // cases with a result (failed cases are not counted here)
  size_t failed = 0;       // cases that failed
  double mape = 0;         // mean absolute percentage error
  double median = 0;       // median absolute percentage error
  double p90 = 0;          // 90th percentile of the absolute percentage error (nearest rank)
  double within10 = 0;     // fraction of cases within +-10%
  double mean_signed = 0;  // mean signed percentage error (bias: > 0 means tpusim is slow)
};
// With no scored case (n == 0) the five statistics are NaN, not 0: an empty group is not a perfect one.
// `simulated` selects which prediction is scored: tpusim's (true) or the roofline baseline's (false).
ErrorStats error_stats(const std::vector<const Case*>& cases, bool simulated);

// Output files of a run, all in `dir` (created if missing):
//   cases.csv   one row per case: class, regime, held_out, the shape as "m=4096 n=4096 k=4096", flops, bytes,
//               measured_us, simulated_us, error_pct, roofline_us, roofline_error_pct, wall_s, error
//   summary.csv one row per (class, regime, part) and per class over all regimes, with part "tune", "held-out"
//               or "all": n, failed, mape, median, p90, within10, mean_signed for tpusim and the roofline;
//               last, class "all" over every case (regime "all"). Empty fields where n == 0.
//   summary.md  the same as a readable table, followed by how the run was made (`header`, verbatim)
//   scatter.svg simulated against measured time, log-log axes, one colour per class, the y = x line and the
//               +-10% band, the roofline baseline optionally as faint points; self-contained SVG, no scripts
// cases.csv is rewritten after every case by the caller (write_cases), so an interrupted run keeps its results.
void write_cases(const std::string& dir, const std::vector<Case>& cases);
void write_summary(const std::string& dir, const std::vector<Case>& cases, const std::string& header);
void write_scatter(const std::string& dir, const std::vector<Case>& cases, const std::string& title);

// A one-line progress report for a terminal ("\r" + text, no newline) or, when `tty` is false, a plain line
// every `every` cases: cases done of total, failures, rate (cases/s), time left, running MAPE.
class Progress {
 public:
  Progress(std::ostream& os, size_t total, bool tty, size_t every = 50);
  ~Progress();
  void update(const std::vector<Case>& done_so_far);  // call after each case
  void finish();                                      // ends the line on a terminal
 private:
  std::unique_ptr<explore::ProgressLine> line_;  // tpusim/explore/pool.h
};

}  // namespace tpusim::validate
