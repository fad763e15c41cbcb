// Profiles: a traced run's time and unit activity attributed to the program's regions (isa::Region: graph nodes
// and kernel fragments, as the compiler marks them), a Chrome trace with a track of node slices, and JSON.
//
// Attribution: every trace event (sim::TraceEvent) belongs to the innermost region holding its pc, and so to
// every region enclosing that one: a region's numbers include those of the regions inside it. Events outside
// every region count only towards Profile::program.
//
// Roofline: a region whose maker gave its work (isa::Region::flops and ::bytes; the compiler does for graph
// nodes) gets a lower bound on its cycles on this chip, the larger of
//   compute: flops / Profile::peak_flops_per_cycle, with peak_flops_per_cycle = 2 * mxu.rows * mxu.cols *
//            core.mxus * chip.cores (every PE of every matrix unit of the chip doing one multiply-add, 2
//            operations, each cycle), and
//   memory:  bytes / Profile::hbm_bytes_per_cycle, with hbm_bytes_per_cycle = hbm.bandwidth_gbs * 1e3 /
//            chip.clock_mhz (ChipConfig::hbm_bytes_per_cycle: GB/s is 1e3 bytes per microsecond, MHz 1 cycle
//            per microsecond);
// the measured cycles() / bound_cycles says how far from that roof the region ran (1: on it).
// That bound takes the bytes the code chose to move, so it hides waste (a layer's activations sent to HBM and
// read back count as work). The ideal bound takes instead the bytes the work cannot avoid, ideal_bytes
// (isa::Region::ideal_bytes: each input and weight read once, each output written once; for Profile::program
// isa::Program::ideal_bytes, or where that is not given the bytes of the program's HBM tensors, every input,
// output and constant once), with the same FLOPs:
// ideal_bound_cycles = max(flops / peak, ideal_bytes / hbm_bytes_per_cycle), and bytes / ideal_bytes is the traffic
// the code makes over the least it could.
//
// Energy (docs/energy.md): a region's dynamic energy is what its instructions did (sim::RunResult::actions_by_pc
// over [begin, end), every execution on every core) times each action's energy (sim::energy_model). Its static
// energy is the chip's static power over the cycles it holds: the run's cycles are shared among the regions of
// one kind (nodes, kernels, ...) whose spans [first_cycle, last_cycle) cover them, equally where spans overlap.
// So the nodes' energies plus Profile::outside_nodes_j (the instructions outside every node, and the cycles no
// node covers) add up to the program's, which is the run's (RunStats' energy).
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/program.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"
#include "tpusim/sim/energy.h"

namespace tpusim::runtime {

// One unit's part of a region.
struct UnitProfile {
  uint64_t instructions = 0;  // static: instructions of this unit in the region's code (each counted once)
  uint64_t events = 0;        // trace slices (an mxu.mm gives one busy slice per fold of its rows)
  // Cycles by trace event kind: "busy", "load" (mxu.lw), "wait" (semaphore; for the core: queue full, drain),
  // "memory" (a memory stall, which lies inside a busy slice): summed slice durations. Kinds overlap as slices do.
  std::map<std::string, uint64_t> cycles;
  uint64_t busy() const;
};

struct RegionProfile {
  std::string kind, name;      // "program" and the program's name for Profile::program
  uint32_t begin = 0, end = 0; // instruction indices [begin, end)
  int parent = -1;             // index in Profile::regions of the enclosing region, or -1
  int depth = 0;               // 0 for a top-level region
  // Time: from the first start to the last end of the region's slices on the accelerator units (dmain, dmaout,
  // mxu, vpu). Core slices (queue-full and drain waits) are counted in `units` but do not widen it: a fence's
  // drain waits for the work before it.
  uint64_t first_cycle = 0, last_cycle = 0;
  uint64_t cycles() const { return last_cycle - first_cycle; }
  double share = 0;            // cycles() / the run's cycles
  // The matrix units' busy cycles in the region / (cycles() x the chip's matrix units, core.mxus x chip.cores):
  // 1 when every unit of every core is busy throughout (0 when cycles() is 0).
  double mxu_utilization = 0;
  int cores = 0;               // the cores with unit slices in the region
  int critical_core = -1;      // the core whose unit slice ends last (sets last_cycle); -1 without slices
  uint64_t instructions = 0;   // static: end - begin
  std::array<UnitProfile, isa::kNumUnits> units{};  // indexed by isa::Unit
  // Roofline (see the top of this file). flops, bytes: the region's (isa::Region), 0 = unknown; for
  // Profile::program each is summed over the outermost regions that give it (a region whose enclosing regions all
  // give 0), so that nested regions are not counted twice. Where the run kept its actions by instruction
  // (sim::RunResult::actions_by_pc: a traced run), bytes are instead the HBM bytes the region's instructions moved
  // (HbmRead + HbmWrite: measured, so intermediates kept on chip and a cache's hits count nothing).
  double flops = 0, bytes = 0;
  double bound_cycles = 0;     // max(flops / peak_flops_per_cycle, bytes / hbm_bytes_per_cycle); 0 without work
  std::string bound;           // the side that sets bound_cycles: "compute" or "memory" ("" when flops = bytes = 0)
  // cycles() / bound_cycles: 1 on the roof, more when slower (0 when bound_cycles is 0).
  double bound_ratio() const { return bound_cycles > 0 ? static_cast<double>(cycles()) / bound_cycles : 0.0; }
  // The ideal roofline (see the top of this file); 0 and "" where ideal_bytes is not known (0).
  double ideal_bytes = 0;
  double ideal_bound_cycles = 0;
  std::string ideal_bound;     // "compute" or "memory", or ""
  double ideal_ratio() const {
    return ideal_bound_cycles > 0 ? static_cast<double>(cycles()) / ideal_bound_cycles : 0.0;
  }
  // The traffic the code makes over the least it could: bytes / ideal_bytes (0 when either is not known).
  double traffic_over_ideal() const { return bytes > 0 && ideal_bytes > 0 ? bytes / ideal_bytes : 0.0; }
  // Energy (see the top of this file): the actions of its instructions, their energy, and the cycles it holds.
  sim::ActionCounts actions;
  double dynamic_j = 0, static_j = 0;
  std::vector<double> dynamic_by_unit_j;  // dynamic_j by sim::energy_units()
  double held_cycles = 0;
  double energy_j() const { return dynamic_j + static_j; }
};

struct Profile {
  std::string chip;
  double clock_mhz = 0;
  int matrix_units = 1;               // core.mxus * chip.cores
  double peak_flops_per_cycle = 0;    // 2 * mxu.rows * mxu.cols * matrix_units: the whole chip's
  double hbm_bytes_per_cycle = 0;     // hbm.bandwidth_gbs * 1e3 / chip.clock_mhz
  uint64_t cycles = 0;                // the run's cycles
  double static_w = 0;                // the chip's static power (sim::EnergyModel::static_w)
  RegionProfile program;              // the whole program, every event
  std::vector<RegionProfile> regions; // as isa::Program::regions, in the same order
  // Energy outside every node region: its instructions' actions, and the static energy of cycles no node holds.
  double outside_nodes_dynamic_j = 0, outside_nodes_static_j = 0;
  double outside_nodes_j() const { return outside_nodes_dynamic_j + outside_nodes_static_j; }

  // Indices in `regions` of the regions of `kind`, longest first (ties: in program order); at most `n` (0: all).
  std::vector<size_t> top(const std::string& kind, size_t n = 0) const;
};

// Needs the run's trace (RunOptions::trace / ExecuteOptions::trace): throws runtime::Error when the trace is empty
// but the program has unit instructions.
Profile make_profile(const isa::Program& program, const sim::RunResult& run, const sim::ChipConfig& cfg);

// The profile as JSON: {"chip", "clock_mhz", "peak_flops_per_cycle", "hbm_bytes_per_cycle", "cycles", "static_w",
// "outside_nodes_energy_j", "program": {...}, "regions": [{"kind", "name", "begin", "end", "parent", "cycles",
// "first_cycle", "share", "mxu_utilization", "instructions", "flops", "bytes", "bound_cycles", "bound",
// "bound_ratio", "ideal_bytes", "ideal_bound_cycles", "ideal_bound", "ideal_ratio", "traffic_over_ideal",
// "energy": {"total_j", "dynamic_j", "static_j", "held_cycles", "by_unit_j": {"mxu": J, ...}},
// "units": {"mxu": {"instructions", "events", "cycles": {"busy": N, ...}}, ...}}, ...]}.
std::string profile_json(const Profile& profile);

// sim::chrome_trace_json's trace (one track per unit, pid 1) plus a "nodes" track of "node" region slices and a
// "kernels" track of "kernel" region slices, each slice spanning its region's first to last cycle; every unit
// slice gets its node's name in args.node. Overlapping node spans (possible without fences) make Perfetto
// nest or clip slices on the nodes track.
std::string profile_trace_json(const isa::Program& program, const sim::RunResult& run, const sim::ChipConfig& cfg,
                               const Profile& profile);

// The same for one execution on several devices (execute_async with several ExecuteArgs): one process per device
// (pid = device + 1, named "tpusim:N (chip)"), each with its unit, node and kernel tracks. Each device's times
// count from its own start; the devices started together.
struct DeviceRun {
  int device = 0;
  const sim::RunResult* run = nullptr;
  const Profile* profile = nullptr;
};
std::string profile_trace_json(const isa::Program& program, const std::vector<DeviceRun>& runs,
                               const sim::ChipConfig& cfg);

// The same traces written to `os` as they are made, event by event (sim::ChromeTraceWriter): a long trace costs
// its text on `os`, never a JSON tree or a string of the whole. `tpusim profile --trace` writes its file so.
void write_profile_trace(std::ostream& os, const isa::Program& program, const sim::RunResult& run,
                         const sim::ChipConfig& cfg, const Profile& profile);
void write_profile_trace(std::ostream& os, const isa::Program& program, const std::vector<DeviceRun>& runs,
                         const sim::ChipConfig& cfg);

}  // namespace tpusim::runtime
