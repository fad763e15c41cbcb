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

// Instructions of each unit before each instruction index (n + 1 entries per unit), from one decoding of the code.
using UnitCounts = std::array<std::vector<uint32_t>, isa::kNumUnits>;
UnitCounts unit_counts(const isa::Program& p) {
  UnitCounts before;
  for (auto& v : before) v.assign(p.code.size() + 1, 0);
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    const int u = static_cast<int>(isa::decode(p.code[pc]).desc().unit);
    for (int k = 0; k < isa::kNumUnits; ++k) before[k][pc + 1] = before[k][pc] + (k == u);
  }
  return before;
}

void count_static(const UnitCounts& before, RegionProfile& r) {
  r.instructions = r.end - r.begin;
  for (int k = 0; k < isa::kNumUnits; ++k) r.units[k].instructions = before[k][r.end] - before[k][r.begin];
}

// `cores_seen`: per core, whether the region has a unit slice on it yet.
void add_event(RegionProfile& r, const sim::TraceEvent& e, bool& timed, std::vector<bool>& cores_seen) {
  UnitProfile& u = r.units[static_cast<int>(e.unit)];
  ++u.events;
  u.cycles[e.kind] += e.duration;
  if (e.unit == isa::Unit::Core) return;
  const uint64_t end = e.start + e.duration;
  if (!timed || end > r.last_cycle) r.critical_core = e.core;
  r.first_cycle = timed ? std::min(r.first_cycle, e.start) : e.start;
  r.last_cycle = timed ? std::max(r.last_cycle, end) : end;
  timed = true;
  if (e.core >= cores_seen.size()) cores_seen.resize(e.core + 1u, false);
  if (!cores_seen[e.core]) cores_seen[e.core] = true, ++r.cores;
}

void finish(RegionProfile& r, const Profile& p) {
  const uint64_t span = r.cycles();
  r.share = p.cycles ? static_cast<double>(span) / static_cast<double>(p.cycles) : 0.0;
  r.mxu_utilization = span ? static_cast<double>(r.units[static_cast<int>(isa::Unit::Mxu)].busy()) /
                                 (static_cast<double>(span) * p.matrix_units)
                           : 0.0;
  const double compute = p.peak_flops_per_cycle > 0 ? r.flops / p.peak_flops_per_cycle : 0.0;
  const double memory = p.hbm_bytes_per_cycle > 0 ? r.bytes / p.hbm_bytes_per_cycle : 0.0;
  r.bound_cycles = std::max(compute, memory);
  r.bound = r.flops == 0 && r.bytes == 0 ? "" : compute >= memory ? "compute" : "memory";
  if (r.ideal_bytes > 0) {
    const double ideal_memory = p.hbm_bytes_per_cycle > 0 ? r.ideal_bytes / p.hbm_bytes_per_cycle : 0.0;
    r.ideal_bound_cycles = std::max(compute, ideal_memory);
    r.ideal_bound = compute >= ideal_memory ? "compute" : "memory";
  }
}

// Each region's share of the run's cycles for static power (profile.h): per kind, the cycles covered by the spans
// of that kind's regions, shared equally among the spans covering them.
void hold_cycles(Profile& prof) {
  std::map<std::string, std::vector<size_t>> by_kind;
  for (size_t i = 0; i < prof.regions.size(); ++i)
    if (prof.regions[i].cycles() > 0) by_kind[prof.regions[i].kind].push_back(i);
  for (const auto& [kind, idx] : by_kind) {
    std::vector<std::pair<uint64_t, int64_t>> edges;  // (cycle, +(i + 1) opens region i, -(i + 1) closes it)
    for (size_t i : idx) {
      edges.emplace_back(prof.regions[i].first_cycle, static_cast<int64_t>(i) + 1);
      edges.emplace_back(prof.regions[i].last_cycle, -(static_cast<int64_t>(i) + 1));
    }
    std::sort(edges.begin(), edges.end());
    std::vector<size_t> open;
    uint64_t prev = 0;
    for (const auto& [t, e] : edges) {
      if (!open.empty() && t > prev)
        for (size_t i : open) prof.regions[i].held_cycles += static_cast<double>(t - prev) / static_cast<double>(open.size());
      prev = t;
      if (e > 0) open.push_back(static_cast<size_t>(e - 1));
      else std::erase(open, static_cast<size_t>(-e - 1));
    }
  }
}

json energy_json(const RegionProfile& r) {
  json by_unit = json::object();
  for (size_t k = 0; k < r.dynamic_by_unit_j.size(); ++k) by_unit[sim::energy_units()[k]] = r.dynamic_by_unit_j[k];
  return {{"total_j", r.energy_j()},
          {"dynamic_j", r.dynamic_j},
          {"static_j", r.static_j},
          {"held_cycles", r.held_cycles},
          {"by_unit_j", std::move(by_unit)}};
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
          {"cores", r.cores},
          {"critical_core", r.critical_core},
          {"instructions", r.instructions},
          {"flops", r.flops},
          {"bytes", r.bytes},
          {"bound_cycles", r.bound_cycles},
          {"bound", r.bound},
          {"bound_ratio", r.bound_ratio()},
          {"ideal_bytes", r.ideal_bytes},
          {"ideal_bound_cycles", r.ideal_bound_cycles},
          {"ideal_bound", r.ideal_bound},
          {"ideal_ratio", r.ideal_ratio()},
          {"traffic_over_ideal", r.traffic_over_ideal()},
          {"energy", energy_json(r)},
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
  prof.matrix_units = cfg.core.mxus * cfg.chip.cores;
  prof.peak_flops_per_cycle = 2.0 * cfg.mxu.rows * cfg.mxu.cols * prof.matrix_units;
  prof.hbm_bytes_per_cycle = cfg.hbm_bytes_per_cycle();
  prof.cycles = run.stats.cycles;
  prof.program.kind = "program";
  prof.program.name = program.name;
  prof.program.end = static_cast<uint32_t>(program.code.size());
  const UnitCounts before = unit_counts(program);
  count_static(before, prof.program);
  const std::vector<int> parents = isa::region_parents(program.regions);
  for (size_t i = 0; i < program.regions.size(); ++i) {
    const isa::Region& g = program.regions[i];
    RegionProfile r;
    r.kind = g.kind, r.name = g.name, r.begin = g.begin, r.end = g.end, r.parent = parents[i];
    r.depth = r.parent < 0 ? 0 : prof.regions[r.parent].depth + 1;
    r.flops = g.flops, r.bytes = g.bytes, r.ideal_bytes = g.ideal_bytes;
    count_static(before, r);
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
  // The least the whole program must move: as its maker counts it, else its HBM tensors (inputs, outputs,
  // constants), each once.
  prof.program.ideal_bytes = program.ideal_bytes;
  for (const isa::TensorDecl& t : program.tensors)
    if (program.ideal_bytes == 0 && t.space == isa::MemSpace::Hbm)
      prof.program.ideal_bytes += static_cast<double>(t.bytes());

  const std::vector<int> at = innermost(program);
  std::deque<bool> timed(prof.regions.size(), false);  // has a unit slice yet
  std::vector<std::vector<bool>> cores_seen(prof.regions.size());
  std::vector<bool> program_cores;
  bool program_timed = false;
  for (const sim::TraceEvent& e : run.trace) {
    add_event(prof.program, e, program_timed, program_cores);
    for (int r = e.pc < at.size() ? at[e.pc] : -1; r >= 0; r = prof.regions[r].parent)
      add_event(prof.regions[r], e, timed[r], cores_seen[r]);
  }
  // What each region's instructions did (the run's actions by instruction, where it kept them).
  const bool counted = run.actions_by_pc.size() == program.code.size();
  std::vector<bool> in_node(program.code.size(), false);
  for (const isa::Region& g : program.regions)
    if (g.kind == isa::kRegionNode) std::fill(in_node.begin() + g.begin, in_node.begin() + g.end, true);
  sim::ActionCounts outside;
  for (size_t pc = 0; counted && pc < program.code.size(); ++pc) {
    prof.program.actions += run.actions_by_pc[pc];
    if (!in_node[pc]) outside += run.actions_by_pc[pc];
  }
  for (RegionProfile& r : prof.regions)
    for (uint32_t pc = r.begin; counted && pc < r.end; ++pc) r.actions += run.actions_by_pc[pc];
  // With them, bytes are the HBM bytes the region's transfers moved in the run (measured: intermediates kept on
  // chip and a cache's hits are not HBM traffic), not its maker's count.
  if (counted) {
    auto hbm = [](const sim::ActionCounts& a) {
      return static_cast<double>(a[sim::Action::HbmRead] + a[sim::Action::HbmWrite]);
    };
    prof.program.bytes = hbm(prof.program.actions);
    for (RegionProfile& r : prof.regions) r.bytes = hbm(r.actions);
  }
  finish(prof.program, prof);
  for (RegionProfile& r : prof.regions) finish(r, prof);

  // Energy (profile.h): actions by instruction, static power by the cycles each region holds.
  const sim::EnergyModel model = sim::energy_model(cfg);
  prof.static_w = model.static_w;
  const double hz = cfg.chip.clock_mhz * 1e6;
  hold_cycles(prof);
  prof.program.held_cycles = static_cast<double>(prof.cycles);
  double node_cycles = 0;
  auto energy = [&](RegionProfile& r) {
    const sim::Energy e = sim::dynamic_energy(r.actions, model);
    r.dynamic_j = e.dynamic_j;
    r.dynamic_by_unit_j = e.by_unit_j();
    r.static_j = model.static_w * r.held_cycles / hz;
    if (r.kind == isa::kRegionNode) node_cycles += r.held_cycles;
  };
  energy(prof.program);
  for (RegionProfile& r : prof.regions) energy(r);
  prof.outside_nodes_dynamic_j = sim::dynamic_energy(outside, model).dynamic_j;
  prof.outside_nodes_static_j = model.static_w * (static_cast<double>(prof.cycles) - node_cycles) / hz;
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
            {"static_w", p.static_w},
            {"outside_nodes_energy_j", p.outside_nodes_j()},
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
                   {"ideal_bytes", r.ideal_bytes},
                   {"ideal_bound_cycles", r.ideal_bound_cycles},
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
