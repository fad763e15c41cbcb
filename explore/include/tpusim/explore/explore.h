// `tpusim explore` (docs/explore.md): a sweep of design points, each a chip configuration and a workload, compiled
// and simulated (timing-only by default) in worker processes, with results as CSV, JSON, SVG plots and an HTML
// report. Each finished point is appended to a journal and synced, so an interrupted sweep resumes (--resume)
// without recomputing or losing any; under mpirun the points are spread over the ranks and gathered on rank 0.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace tpusim::explore {

// One --sweep: a key and its values, in the order given. A key with a dot is a chip parameter (section.key, as
// `tpusim config --show` lists them); `precision` is bf16 or int8; any other key is a parameter of the workload
// (a built-in layer's shape, or an exporter's option).
struct Sweep {
  std::string key;
  std::vector<std::string> values;
};
// "key=v1,v2,..." -> a Sweep; throws std::invalid_argument with a one-line message.
Sweep parse_sweep(const std::string& spec);

struct Options {
  std::string workload;               // FILE.onnx, an exporter's name[:k=v,...], or a layer: gemm:m=..,n=..,k=..
  std::string config = "v4-like";     // preset or INI file
  std::vector<std::string> sets;      // --set section.key=value, for every point
  std::vector<Sweep> sweeps;          // the cartesian product, the first key varying slowest
  std::string precision = "bf16";     // unless swept
  bool functional = false;            // compute the numbers too (random inputs); default timing-only
  int jobs = 1;                       // worker processes (per MPI rank)
  std::string out;                    // the results folder
  bool resume = false;                // continue the sweep the folder's journal holds
  bool tty = false;                   // progress on a terminal
  uint64_t max_cycles = 4'000'000'000;
  std::string cache;                  // where exported workloads go ("" = the build tree's explore-cache)
};

// The built-in layers with their parameters' defaults, for --help: "gemm:m=512,n=512,k=512; conv:batch=1,...".
std::string layers_help();

// Runs the sweep, writing progress to `log`; returns the exit code (0 when every point ran or failed with an
// error recorded; 1 when none could run; 130 when interrupted by SIGINT or SIGTERM after writing what was done).
// Throws std::invalid_argument for a mistake in the options (unknown key, bad value list, a folder holding another
// sweep), std::runtime_error otherwise.
int run(const Options& opts, std::ostream& log);

}  // namespace tpusim::explore
