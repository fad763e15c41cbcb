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
// The table `tpusim profile` prints: the `top` longest graph nodes (0: all) with their share of the run and their
// MXU utilisation (runtime/profile.h defines the numbers).
void print_profile(std::ostream& os, const runtime::Profile& p, const std::string& program_name, size_t top);
// Every parameter with its value, unit, default and help (`tpusim config --show`).
void print_config(std::ostream& os, const sim::ChipConfig& cfg);
// The built-in demo; returns the exit code (0 when every result matches its reference).
int run_demo(std::ostream& os, const sim::ChipConfig& cfg);

}  // namespace tpusim::cli
