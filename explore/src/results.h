// The results of a sweep (explore.h): the per-point figures, read from each point's record in one place (the
// column table, columns()), and the files written from them: results.csv, results.json, SVG plots, report.html.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace tpusim::explore {

// A finished point as the journal holds it:
//   {"point": i, "params": {"mxu.rows": "64", ...}, "status": "ok" | "error", "error": "...",
//    "stats": <the run's stats JSON (sim::RunStats::to_json) without "instances">,
//    "program": {"flops": F, "bytes": B, "instructions": N},   // the compiler's work figures of the program
//    "chip": {"peak_flops": P, "hbm_bytes_per_s": W, "clock_hz": Hz},  // the point's chip, for the roofline
//    "layers": [{"name": N, "flops": F, "bytes": B, "cycles": C}, ...],  // its graph nodes with work (profile)
//    "compile_s": s, "simulate_s": s, "wall_s": s}
using Record = nlohmann::json;

// One figure per point. value() gets an "ok" record and returns NaN where the record lacks what it needs.
struct Column {
  std::string name;  // the CSV header and JSON key: "latency_us"
  std::string label; // for plots and the HTML table: "latency (µs)"
  std::function<double(const Record&)> value;
  bool optional = false;  // written only when some point has a value (figures newer stats may carry)
};
// The figures of every point, from its stats and program: latency (cycles, us), throughput, achieved FLOP/s, MXU
// utilisation, HBM traffic and bandwidth, arithmetic intensity; compile, simulate and wall times last.
const std::vector<Column>& columns();
// The columns that some record has a value for (every non-optional one).
std::vector<const Column*> present_columns(const std::vector<Record>& records);

// Writes results.csv, results.json, layers.csv, the plots (latency_vs_<key>.svg per swept key, roofline.svg, and
// pareto_<column>.svg for cost columns that are present: area, energy) and report.html into `dir`, replacing each
// file in one step. `keys`: the swept parameters in order; `records` sorted by point; `header`: the sweep as JSON
// (for results.json and the report). Returns the names of the files written.
std::vector<std::string> write_results(const std::string& dir, const std::vector<std::string>& keys,
                                       const std::vector<Record>& records, const nlohmann::json& header);

// The Pareto front of points minimising both x and y: indices into xs/ys of the points that no other point
// matches or beats in both and beats in one (non-finite points are never on it).
std::vector<size_t> pareto_front(const std::vector<double>& xs, const std::vector<double>& ys);

}  // namespace tpusim::explore
