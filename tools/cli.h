// Pieces of the tpusim command-line program shared between its files.
#pragma once

#include <ostream>
#include <stdexcept>

#include "tpusim/isa/program.h"
#include "tpusim/runtime/profile.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim::cli {

// A mistake in the command line itself (exit code 2; other errors exit with 1).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The table `tpusim run` prints: cycles, simulated time, and each unit's instructions, busy cycles and utilisation.
void print_summary(std::ostream& os, const isa::Program& p, const sim::ChipConfig& cfg, const sim::RunStats& s);
// The table `tpusim profile` prints: the `top` longest graph nodes (0: all) with their share of the run, their
// MXU utilisation, their work (FLOPs, HBM bytes) and roofline bound (runtime/profile.h defines the numbers).
void print_profile(std::ostream& os, const runtime::Profile& p, const std::string& program_name, size_t top);
// The report `tpusim compile --report` writes: the model's totals and roofline bound on the chip, then every graph
// node (node region) in program order with its instructions, cycles, share, MXU utilisation, work and bound.
// `output`: the .tpub written, or "" when none was; `stats`: the run's, for the bytes it measured.
void print_compile_report(std::ostream& os, const runtime::Profile& p, const isa::Program& program,
                          const std::string& model, const std::string& output, const sim::ChipConfig& cfg,
                          const sim::RunStats& stats);
// The same as JSON: runtime::profile_json's object with "model" and "output" added.
std::string compile_report_json(const runtime::Profile& p, const std::string& model, const std::string& output);
// Every parameter with its value, unit, default and help (`tpusim config --show`).
void print_config(std::ostream& os, const sim::ChipConfig& cfg);
// The built-in demo; returns the exit code (0 when every result matches its reference).
int run_demo(std::ostream& os, const sim::ChipConfig& cfg);

}  // namespace tpusim::cli
