// Profiles from a run's trace (definitions in profile.h).
#include "tpusim/runtime/profile.h"

#include <algorithm>
#include <deque>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tpusim/runtime/npy.h"  // runtime::Error

namespace tpusim::runtime {
namespace {

using json = nlohmann::ordered_json;

// For each instruction index, the innermost region holding it, or -1.
std::vector<int> innermost(const isa::Program& p) {
  std::vector<int> at(p.code.size(), -1);
  for (size_t i = 0; i < p.regions.size(); ++i)  // pre-order: an inner region comes after, and overwrites, its outer
    std::fill(at.begin() + p.regions[i].begin, at.begin() + p.regions[i].end, static_cast<int>(i));
  return at;
}

void count_static(const isa::Program& p, RegionProfile& r) {
  r.instructions = r.end - r.begin;
  for (uint32_t pc = r.begin; pc < r.end; ++pc)
    ++r.units[static_cast<int>(isa::decode(p.code[pc]).desc().unit)].instructions;
}

void add_event(RegionProfile& r, const sim::TraceEvent& e, bool& timed) {
  UnitProfile& u = r.units[static_cast<int>(e.unit)];
  ++u.events;
  u.cycles[e.kind] += e.duration;
  if (e.unit == isa::Unit::Core) return;
  const uint64_t end = e.start + e.duration;
  r.first_cycle = timed ? std::min(r.first_cycle, e.start) : e.start;
  r.last_cycle = timed ? std::max(r.last_cycle, end) : end;
  timed = true;
}

void finish(RegionProfile& r, const Profile& p) {
  const uint64_t span = r.cycles();
  r.share = p.cycles ? static_cast<double>(span) / static_cast<double>(p.cycles) : 0.0;
  r.mxu_utilization =
      span ? static_cast<double>(r.units[static_cast<int>(isa::Unit::Mxu)].busy()) / static_cast<double>(span) : 0.0;
  const double compute = p.peak_flops_per_cycle > 0 ? r.flops / p.peak_flops_per_cycle : 0.0;
  const double memory = p.hbm_bytes_per_cycle > 0 ? r.bytes / p.hbm_bytes_per_cycle : 0.0;
  r.bound_cycles = std::max(compute, memory);
  r.bound = r.flops == 0 && r.bytes == 0 ? "" : compute >= memory ? "compute" : "memory";
}

json region_json(const RegionProfile& r) {
  json units = json::object();
  for (int u = 0; u < isa::kNumUnits; ++u) {
    const UnitProfile& up = r.units[u];
    json cycles = json::object();
    for (const auto& [kind, c] : up.cycles) cycles[kind] = c;
    units[isa::unit_name(static_cast<isa::Unit>(u))] = {
        {"instructions", up.instructions}, {"events", up.events}, {"cycles", std::move(cycles)}};
  }
  return {{"kind", r.kind},
          {"name", r.name},
          {"begin", r.begin},
          {"end", r.end},
          {"parent", r.parent},
          {"cycles", r.cycles()},
          {"first_cycle", r.first_cycle},
          {"share", r.share},
          {"mxu_utilization", r.mxu_utilization},
          {"instructions", r.instructions},
          {"flops", r.flops},
          {"bytes", r.bytes},
          {"bound_cycles", r.bound_cycles},
          {"bound", r.bound},
          {"bound_ratio", r.bound_ratio()},
          {"units", std::move(units)}};
}

}  // namespace

uint64_t UnitProfile::busy() const {
  auto it = cycles.find("busy");
  return it == cycles.end() ? 0 : it->second;
}

std::vector<size_t> Profile::top(const std::string& kind, size_t n) const {
  std::vector<size_t> idx;
  for (size_t i = 0; i < regions.size(); ++i)
    if (regions[i].kind == kind) idx.push_back(i);
  std::stable_sort(idx.begin(), idx.end(),
                   [&](size_t a, size_t b) { return regions[a].cycles() > regions[b].cycles(); });
  if (n && idx.size() > n) idx.resize(n);
  return idx;
}

Profile make_profile(const isa::Program& program, const sim::RunResult& run, const sim::ChipConfig& cfg) {
  isa::validate_regions(program);
  if (run.trace.empty())
    for (isa::Word w : program.code)
      if (isa::decode(w).desc().unit != isa::Unit::Core)
        throw Error("a profile needs the run's trace: run with tracing on (ExecuteOptions::trace)");

  Profile prof;
  prof.chip = cfg.chip.name;
  prof.clock_mhz = cfg.chip.clock_mhz;
  // The whole chip's bf16 peak: every matrix unit of every core (a program may use fewer; the bound is the chip's).
  prof.peak_flops_per_cycle = 2.0 * cfg.mxu.rows * cfg.mxu.cols * cfg.core.mxus * cfg.chip.cores;
  prof.hbm_bytes_per_cycle = cfg.hbm_bytes_per_cycle();
  prof.cycles = run.stats.cycles;
  prof.program.kind = "program";
  prof.program.name = program.name;
  prof.program.end = static_cast<uint32_t>(program.code.size());
  count_static(program, prof.program);
  const std::vector<int> parents = isa::region_parents(program.regions);
  for (size_t i = 0; i < program.regions.size(); ++i) {
    const isa::Region& g = program.regions[i];
    RegionProfile r;
    r.kind = g.kind, r.name = g.name, r.begin = g.begin, r.end = g.end, r.parent = parents[i];
    r.depth = r.parent < 0 ? 0 : prof.regions[r.parent].depth + 1;
    r.flops = g.flops, r.bytes = g.bytes;
    count_static(program, r);
    prof.regions.push_back(std::move(r));
  }
  // The program's work: each quantity from the outermost regions that give it.
  for (size_t i = 0; i < program.regions.size(); ++i) {
    bool flops_outer = true, bytes_outer = true;
    for (int a = parents[i]; a >= 0; a = parents[a]) {
      flops_outer = flops_outer && program.regions[a].flops == 0;
      bytes_outer = bytes_outer && program.regions[a].bytes == 0;
    }
    if (flops_outer) prof.program.flops += program.regions[i].flops;
    if (bytes_outer) prof.program.bytes += program.regions[i].bytes;
  }

  const std::vector<int> at = innermost(program);
  std::deque<bool> timed(prof.regions.size(), false);  // has a unit slice yet
  bool program_timed = false;
  for (const sim::TraceEvent& e : run.trace) {
    add_event(prof.program, e, program_timed);
    for (int r = e.pc < at.size() ? at[e.pc] : -1; r >= 0; r = prof.regions[r].parent)
      add_event(prof.regions[r], e, timed[r]);
  }
  finish(prof.program, prof);
  for (RegionProfile& r : prof.regions) finish(r, prof);
  return prof;
}

std::string profile_json(const Profile& p) {
  json regions = json::array();
  for (const RegionProfile& r : p.regions) regions.push_back(region_json(r));
  json j = {{"chip", p.chip},
            {"clock_mhz", p.clock_mhz},
            {"peak_flops_per_cycle", p.peak_flops_per_cycle},
            {"hbm_bytes_per_cycle", p.hbm_bytes_per_cycle},
            {"cycles", p.cycles},
            {"program", region_json(p.program)},
            {"regions", std::move(regions)}};
  return j.dump(1);
}

namespace {

// One device's trace: sim's unit tracks (ChromeTraceWriter::process) plus the node and kernel tracks, all as
// process `pid`, written event by event.
void write_device_trace(sim::ChromeTraceWriter& w, const isa::Program& program, const sim::RunResult& run,
                        const sim::ChipConfig& cfg, const Profile& profile, int pid, const std::string& process) {
  // The node of each instruction, named in the unit slices' args.
  std::vector<int> node(program.code.size(), -1);
  for (size_t i = 0; i < program.regions.size(); ++i)
    if (program.regions[i].kind == isa::kRegionNode)
      std::fill(node.begin() + program.regions[i].begin, node.begin() + program.regions[i].end, static_cast<int>(i));
  sim::TraceProcess p;
  p.pid = pid;
  p.name = process;
  p.arg_name = "node";
  p.arg_of = [&](const sim::TraceEvent& e) -> const std::string* {
    return e.pc < node.size() && node[e.pc] >= 0 ? &program.regions[node[e.pc]].name : nullptr;
  };
  w.process(run.trace, cfg, p);
  // Tracks after the units' (sim's trace numbers its tracks from 1, fewer than 100).
  constexpr int kNodes = 100, kKernels = 101;
  for (const auto& [tid, name] : {std::pair{kNodes, "nodes"}, std::pair{kKernels, "kernels"}}) {
    w.event(json{{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"name", name}}}}.dump());
    w.event(json{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}}
                .dump());
  }
  const double us_per_cycle = 1.0 / cfg.chip.clock_mhz;
  for (const RegionProfile& r : profile.regions) {
    const int tid = r.kind == isa::kRegionNode ? kNodes : r.kind == isa::kRegionKernel ? kKernels : 0;
    if (!tid || r.cycles() == 0) continue;
    w.event(json{{"name", r.name},
                 {"cat", r.kind},
                 {"ph", "X"},
                 {"pid", pid},
                 {"tid", tid},
                 {"ts", static_cast<double>(r.first_cycle) * us_per_cycle},
                 {"dur", static_cast<double>(r.cycles()) * us_per_cycle},
                 {"args",
                  {{"cycle", r.first_cycle},
                   {"dur_cycles", r.cycles()},
                   {"share", r.share},
                   {"mxu_utilization", r.mxu_utilization},
                   {"flops", r.flops},
                   {"bytes", r.bytes},
                   {"bound_cycles", r.bound_cycles},
                   {"bound", r.bound},
                   {"pcs", std::to_string(r.begin) + ".." + std::to_string(r.end)}}}}
                .dump());
  }
}

}  // namespace

void write_profile_trace(std::ostream& os, const isa::Program& program, const std::vector<DeviceRun>& runs,
                         const sim::ChipConfig& cfg) {
  sim::ChromeTraceWriter w(os);
  for (const DeviceRun& d : runs)
    write_device_trace(w, program, *d.run, cfg, *d.profile, d.device + 1,
                       "tpusim:" + std::to_string(d.device) + " (" + cfg.chip.name + ")");
  w.finish();
}

void write_profile_trace(std::ostream& os, const isa::Program& program, const sim::RunResult& run,
                         const sim::ChipConfig& cfg, const Profile& profile) {
  write_profile_trace(os, program, {DeviceRun{0, &run, &profile}}, cfg);
}

std::string profile_trace_json(const isa::Program& program, const sim::RunResult& run, const sim::ChipConfig& cfg,
                               const Profile& profile) {
  return profile_trace_json(program, {DeviceRun{0, &run, &profile}}, cfg);
}

std::string profile_trace_json(const isa::Program& program, const std::vector<DeviceRun>& runs,
                               const sim::ChipConfig& cfg) {
  std::ostringstream os;
  write_profile_trace(os, program, runs, cfg);
  return std::move(os).str();
}

}  // namespace tpusim::runtime
