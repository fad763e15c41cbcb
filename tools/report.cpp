#include <algorithm>
#include <cmath>
#include <iomanip>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli.h"

namespace tpusim::cli {

namespace {
// Joules with a prefix: "137.9 uJ", "2.41 mJ".
std::string joules(double j) {
  static const std::pair<double, const char*> prefixes[] = {{1, "J"}, {1e-3, "mJ"}, {1e-6, "uJ"}, {1e-9, "nJ"}};
  for (const auto& [scale, name] : prefixes)
    if (std::abs(j) >= scale || scale == 1e-9) {
      std::ostringstream t;
      t << std::setprecision(4) << j / scale << " " << name;
      return t.str();
    }
  return "";
}
}  // namespace

void print_summary(std::ostream& os, const isa::Program& p, const sim::ChipConfig& cfg, const sim::RunStats& s) {
  os << "program " << (p.name.empty() ? "(unnamed)" : p.name) << " on " << cfg.chip.name << " ("
     << cfg.mxu.rows << "x" << cfg.mxu.cols << " MXU, " << cfg.chip.clock_mhz << " MHz)\n";
  os << "  cycles " << s.cycles << ", simulated time " << std::setprecision(4) << s.seconds * 1e6 << " us\n";
  os << "  " << std::left << std::setw(8) << "unit" << std::right << std::setw(14) << "instructions"
     << std::setw(14) << "busy cycles" << std::setw(13) << "utilisation" << std::setw(16) << "semaphore wait"
     << "\n";
  for (int u = 0; u < isa::kNumUnits; ++u) {
    const sim::UnitStats& us = s.units[u];
    os << "  " << std::left << std::setw(8) << isa::unit_name(static_cast<isa::Unit>(u)) << std::right
       << std::setw(14) << us.instructions << std::setw(14) << us.busy_cycles << std::setw(12) << std::fixed
       << std::setprecision(1) << 100.0 * us.utilization << "%" << std::setw(16) << us.wait_sem_cycles << "\n";
    os.unsetf(std::ios::fixed);
  }
  // Where the cycles went: each unit's categories add up to the run's cycles (sim::StallBreakdown).
  os << "  cycles by state (% of the run; semaphore waits by semaphore)\n  " << std::left << std::setw(8) << "unit"
     << std::right;
  for (const char* h : {"busy", "memory", "w.load", "sem", "queue", "drain", "idle", "after"}) os << std::setw(8) << h;
  os << "  waits on\n";
  auto pct = [&](uint64_t c) {
    std::ostringstream t;
    t << std::fixed << std::setprecision(1) << (s.cycles ? 100.0 * static_cast<double>(c) / s.cycles : 0.0);
    return t.str();
  };
  for (int u = 0; u < isa::kNumUnits; ++u) {
    const sim::StallBreakdown& b = s.units[u].stalls;
    os << "  " << std::left << std::setw(8) << isa::unit_name(static_cast<isa::Unit>(u)) << std::right;
    for (uint64_t c : {b.busy, b.wait_memory, b.weight_load, b.wait_sem, b.wait_queue, b.wait_drain, b.idle,
                       b.idle_after})
      os << std::setw(8) << pct(c);
    os << " ";
    for (int k = 1; k < isa::kNumSems; ++k)
      if (b.wait_sem_by[k]) os << " s" << k << " " << pct(b.wait_sem_by[k]);
    os << "\n";
  }
  const sim::Tpuv1Counters& v = s.tpuv1;
  os << std::fixed << std::setprecision(1) << "  TPUv1 counters (% of cycles): array active " << 100 * v.array_active
     << ", useful MACs " << 100 * v.useful_macs << ", unused MACs " << 100 * v.unused_macs << ", weight stall "
     << 100 * v.weight_stall << ", weight shift " << 100 * v.weight_shift << ", non-matrix " << 100 * v.non_matrix
     << " (RAW stall " << 100 * v.raw_stall << ", input stall " << 100 * v.input_stall << ")\n";
  os.unsetf(std::ios::fixed);
  os << "  MXU MAC utilisation " << std::fixed << std::setprecision(1) << 100.0 * s.mxu_mac_utilization << "% ("
     << s.mxu_macs << " MACs); HBM read " << s.hbm_bytes_read << " B, written " << s.hbm_bytes_written << " B\n";
  os.unsetf(std::ios::fixed);
  // The energy model (docs/energy.md): the same figures as the stats file's "energy" and "area".
  const sim::EnergyModel model = sim::energy_model(cfg);
  const sim::Energy e = sim::energy_of(s.actions, s.seconds, model);
  os << "  energy " << joules(e.total_j()) << ": dynamic " << joules(e.dynamic_j) << " (";
  const std::vector<double> by_unit = e.by_unit_j();
  for (size_t k = 0; k < by_unit.size(); ++k)
    os << (k ? ", " : "") << sim::energy_units()[k] << " " << std::setprecision(3) << 100 * by_unit[k] / (e.dynamic_j > 0 ? e.dynamic_j : 1) << "%";
  os << "), static " << joules(e.static_j) << "; " << std::setprecision(4)
     << (s.seconds > 0 ? e.total_j() / s.seconds : 0.0) << " W average; chip area " << sim::area_of(cfg).total_mm2
     << " mm2 (model: docs/energy.md)\n";
}

namespace {

// 3 significant digits with an SI suffix: 12.8M, 401k, 950; "-" for 0 (not given).
std::string si(double v) {
  if (v == 0) return "-";
  static const char* suffix[] = {"", "k", "M", "G", "T", "P", "E"};
  int i = 0;
  for (; std::abs(v) >= 999.5 && i < 6; ++i) v /= 1000;
  std::ostringstream t;
  t << std::fixed << std::setprecision(i == 0 || std::abs(v) >= 99.95 ? 0 : std::abs(v) >= 9.995 ? 1 : 2) << v
    << suffix[i];
  return t.str();
}

std::string fixed(double v, int decimals) {
  std::ostringstream t;
  t << std::fixed << std::setprecision(decimals) << v;
  return t.str();
}

// A roofline bound in cycles (one decimal: small nodes are bound by a few cycles), its side and measured/bound.
std::string bound_text(const runtime::RegionProfile& r) { return r.bound.empty() ? "-" : fixed(r.bound_cycles, 1); }
std::string bound_kind(const runtime::RegionProfile& r) { return r.bound.empty() ? "-" : r.bound; }
std::string ratio_text(const runtime::RegionProfile& r) { return r.bound.empty() ? "-" : fixed(r.bound_ratio(), 2); }
// The same for the ideal bound (profile.h), "-" where the ideal bytes are not known.
std::string ideal_bound_text(const runtime::RegionProfile& r) {
  return r.ideal_bound.empty() ? "-" : fixed(r.ideal_bound_cycles, 1);
}
std::string ideal_kind(const runtime::RegionProfile& r) { return r.ideal_bound.empty() ? "-" : r.ideal_bound; }
std::string ideal_ratio_text(const runtime::RegionProfile& r) {
  return r.ideal_bound.empty() ? "-" : fixed(r.ideal_ratio(), 2);
}
std::string traffic_text(const runtime::RegionProfile& r) {
  return r.traffic_over_ideal() > 0 ? fixed(r.traffic_over_ideal(), 2) : "-";
}

}  // namespace

void print_profile(std::ostream& os, const runtime::Profile& p, const std::string& program_name, size_t top) {
  std::vector<const runtime::RegionProfile*> rows;
  for (size_t i : p.top(isa::kRegionNode, top)) rows.push_back(&p.regions[i]);
  const size_t nodes = p.top(isa::kRegionNode).size();
  if (nodes == 0) rows.push_back(&p.program);  // a program without node regions: one row for all of it
  os << "profile of " << (program_name.empty() ? "(unnamed)" : program_name) << " on " << p.chip << ": " << p.cycles
     << " cycles, " << std::setprecision(4) << static_cast<double>(p.cycles) / p.clock_mhz << " us; " << nodes
     << " nodes" << (rows.size() < nodes ? ", top " + std::to_string(rows.size()) + " by time" : "") << "\n";
  size_t w = 4;
  for (const auto* r : rows) w = std::max(w, r->name.size());
  os << "  " << std::left << std::setw(w + 2) << "node" << std::right << std::setw(10) << "cycles" << std::setw(8)
     << "share" << std::setw(10) << "MXU util" << std::setw(7) << "cores" << std::setw(6) << "last";
  for (const char* u : {"dmain", "mxu", "vpu", "dmaout"}) os << std::setw(9) << u;
  os << std::setw(9) << "waits" << std::setw(8) << "FLOPs" << std::setw(8) << "bytes" << std::setw(11) << "bound"
     << std::setw(8) << "by" << std::setw(8) << "ratio" << std::setw(8) << "ideal" << std::setw(8) << "traffic"
     << std::setw(11) << "energy uJ" << std::setw(8) << "of E" << "  kernels\n";
  const double total_j = p.program.energy_j();
  os << std::fixed << std::setprecision(1);
  for (const auto* r : rows) {
    os << "  " << std::left << std::setw(w + 2) << r->name << std::right << std::setw(10) << r->cycles()
       << std::setw(7) << 100 * r->share << "%" << std::setw(9) << 100 * r->mxu_utilization << "%" << std::setw(7)
       << r->cores << std::setw(6) << (r->critical_core < 0 ? std::string("-") : std::to_string(r->critical_core));
    uint64_t waits = 0;
    for (isa::Unit u : {isa::Unit::DmaIn, isa::Unit::Mxu, isa::Unit::Vpu, isa::Unit::DmaOut}) {
      const runtime::UnitProfile& up = r->units[static_cast<int>(u)];
      os << std::setw(9) << up.busy();
      if (auto it = up.cycles.find("wait"); it != up.cycles.end()) waits += it->second;
    }
    os << std::setw(9) << waits << std::setw(8) << si(r->flops) << std::setw(8) << si(r->bytes) << std::setw(11)
       << bound_text(*r) << std::setw(8) << bound_kind(*r) << std::setw(8) << ratio_text(*r) << std::setw(8)
       << ideal_ratio_text(*r) << std::setw(8) << traffic_text(*r) << std::setw(11) << fixed(r->energy_j() * 1e6, 2) << std::setw(7) << fixed(total_j > 0 ? 100 * r->energy_j() / total_j : 0.0, 1)
       << "%  ";
    // The node's kernels in order, a run of one kernel as "name xN".
    std::vector<std::pair<std::string, int>> kernels;
    for (const auto& k : p.regions)
      if (k.kind == isa::kRegionKernel && k.begin >= r->begin && k.end <= r->end && &k != r) {
        if (!kernels.empty() && kernels.back().first == k.name) ++kernels.back().second;
        else kernels.emplace_back(k.name, 1);
      }
    std::string list;
    for (const auto& [name, n] : kernels)
      list += (list.empty() ? "" : ", ") + name + (n > 1 ? " x" + std::to_string(n) : "");
    os << (list.empty() ? "-" : list) << "\n";
  }
  os.unsetf(std::ios::fixed);
  os << "  cycles: first to last cycle of the node's unit slices; share: of the run's cycles; MXU util: MXU busy / "
        "(cycles x "
     << p.matrix_units
     << " matrix units)\n  cores: the cores that worked on the node; last: the core that finished it (its critical "
        "path)\n  unit columns: busy cycles, summed over the cores; waits: those units' semaphore wait cycles, summed\n"
        "  FLOPs, bytes: the node's work (multiply-add = 2 FLOPs; HBM bytes read and written; - = not known)\n"
        "  bound: roofline lower bound in cycles, max(FLOPs / "
     << fixed(p.peak_flops_per_cycle, 0) << " per cycle, bytes / " << fixed(p.hbm_bytes_per_cycle, 2)
     << " per cycle)\n  by: the side that sets the bound; ratio: cycles / bound\n"
     << "  ideal: cycles / the ideal bound, which takes the bytes the node cannot avoid (each input and weight read "
        "once, each output\n  written once) instead of those it moves; traffic: bytes moved / those bytes (- = not "
        "known)\n"
     << "  energy: the node's instructions' actions x their energies, plus static power over the cycles it holds "
        "(docs/energy.md); of E: of the run's " << joules(total_j) << " (outside every node: "
     << joules(p.outside_nodes_j()) << ")\n";
}

void print_compile_report(std::ostream& os, const runtime::Profile& p, const isa::Program& program,
                          const std::string& model, const std::string& output, const sim::ChipConfig& cfg,
                          const sim::RunStats& stats) {
  const runtime::RegionProfile& all = p.program;
  os << "tpusim compile report\n"
     << "model    " << model << (output.empty() ? "" : " -> " + output) << "\n"
     << "program  " << (program.name.empty() ? "(unnamed)" : program.name) << ": " << program.code.size()
     << " instructions, " << program.hbm_footprint() << " bytes of HBM\n"
     << "chip     " << cfg.chip.name << ": "
     << (cfg.chip.cores > 1 ? std::to_string(cfg.chip.cores) + " cores x " : std::string())
     << (cfg.core.mxus > 1 ? std::to_string(cfg.core.mxus) + " " : std::string()) << cfg.mxu.rows << "x"
     << cfg.mxu.cols << " MXU" << (cfg.core.mxus > 1 ? "s" : "") << " at " << cfg.chip.clock_mhz
     << " MHz, " << cfg.hbm.bandwidth_gbs << " GB/s HBM; peak " << fixed(p.peak_flops_per_cycle, 0)
     << " FLOP/cycle, " << fixed(p.hbm_bytes_per_cycle, 2) << " HBM bytes/cycle\n"
     << "total    " << p.cycles << " cycles, " << fixed(cfg.seconds(p.cycles) * 1e6, 3)
     << " us (timing-only simulation)\n"
     << "work     " << fixed(all.flops / 1e9, 6) << " GFLOP, " << fixed(all.bytes / 1e6, 4) << " MB of HBM traffic, "
     << fixed(all.ideal_bytes / 1e6, 4) << " MB ideal (traffic / ideal " << traffic_text(all) << ")\n";
  // Intermediates the compiler kept in VMEM or placed in the chip's shared memory (TPU v4's CMEM) move there, not
  // through HBM. (A shared level that is a cache, a GPU's L2, holds no intermediates: its hits are not shown.)
  const uint64_t local = stats.local_bytes_read + stats.local_bytes_written,
                 shared = cfg.shared_bytes() > 0 ? stats.shared_bytes_read + stats.shared_bytes_written : 0;
  if (local + shared > 0)
    os << "memory   measured: " << fixed(static_cast<double>(stats.hbm_bytes_read + stats.hbm_bytes_written) / 1e6, 4)
       << " MB of HBM traffic, " << fixed(static_cast<double>(shared) / 1e6, 4) << " MB of shared memory traffic, "
       << fixed(static_cast<double>(local) / 1e6, 4) << " MB of VMEM traffic (intermediates placed there)\n";
  os << "bound    ";
  if (all.ideal_bound.empty())
    os << "- (the program gives no FLOPs or bytes)\n";
  else
    os << fixed(all.ideal_bound_cycles, 1) << " cycles (" << all.ideal_bound << "), run cycles / bound "
       << fixed(static_cast<double>(p.cycles) / all.ideal_bound_cycles, 2)
       << " (ideal: every input, weight and output moved once)\n";
  os << "traffic  ";
  if (all.bound.empty())
    os << "- (the program gives no FLOPs or bytes)\n";
  else
    os << fixed(all.bound_cycles, 1) << " cycles (" << all.bound << "), run cycles / traffic bound "
       << fixed(static_cast<double>(p.cycles) / all.bound_cycles, 2) << " (the bytes the code moves)\n";

  std::vector<const runtime::RegionProfile*> rows;
  for (const auto& r : p.regions)
    if (r.kind == isa::kRegionNode) rows.push_back(&r);
  os << "nodes    " << rows.size() << ", in program order\n\n";
  size_t w = 4;
  for (const auto* r : rows) w = std::max(w, r->name.size());
  os << "  " << std::left << std::setw(w + 2) << "node" << std::right << std::setw(8) << "instrs" << std::setw(10)
     << "cycles" << std::setw(8) << "share" << std::setw(10) << "MXU util" << std::setw(7) << "cores" << std::setw(12)
     << "GFLOP"
     << std::setw(11) << "MB" << std::setw(11) << "ideal MB" << std::setw(9) << "traffic" << std::setw(12) << "bound"
     << std::setw(9) << "by" << std::setw(8) << "ratio" << std::setw(9) << "t.ratio" << "\n";
  uint64_t sum = 0;
  for (const auto* r : rows) {
    sum += r->cycles();
    os << "  " << std::left << std::setw(w + 2) << r->name << std::right << std::setw(8) << r->instructions
       << std::setw(10) << r->cycles() << std::setw(7) << fixed(100 * r->share, 1) << "%" << std::setw(9)
       << fixed(100 * r->mxu_utilization, 1) << "%" << std::setw(7) << r->cores << std::setw(12)
       << fixed(r->flops / 1e9, 6) << std::setw(11)
       << fixed(r->bytes / 1e6, 4) << std::setw(11) << (r->ideal_bytes > 0 ? fixed(r->ideal_bytes / 1e6, 4) : "-")
       << std::setw(9) << traffic_text(*r) << std::setw(12) << ideal_bound_text(*r) << std::setw(9) << ideal_kind(*r)
       << std::setw(8) << ideal_ratio_text(*r) << std::setw(9) << ratio_text(*r) << "\n";
  }
  os << "\n  node cycles sum " << sum << " = " << fixed(p.cycles ? 100.0 * sum / p.cycles : 0.0, 1)
     << "% of the run (nodes may overlap where no fence parts them; the rest is outside every node)\n"
     << "  cycles: first to last cycle of the node's unit slices; share: of the run; MXU util: MXU busy / (cycles x "
     << p.matrix_units << " matrix units)\n"
     << "  GFLOP: the node's work as the compiler counts it (a multiply-add is 2 FLOPs); MB: 1e6 HBM bytes its\n"
     << "  transfers read and wrote in this run; ideal MB: the HBM bytes the node cannot avoid (each tensor it takes\n"
     << "  from or gives to the rest of the model in HBM, weights included, moved once); traffic: MB / ideal MB;\n"
     << "  bound: roofline lower bound in cycles,\n"
     << "  max(FLOPs / peak, ideal MB / HBM bytes per cycle); by: the side that sets it; ratio: cycles / bound\n"
     << "  (- where the node gives no work); t.ratio: cycles / the bound of the traffic made, max(FLOPs / peak,\n"
     << "  MB / HBM bytes per cycle); cores: the cores that worked on it\n";
  // The compiler's notes (e.g. an attention group left per head, and why), once per node and note.
  std::vector<std::pair<std::string, std::string>> notes;
  for (const auto& r : p.regions) {
    if (r.kind != isa::kRegionNote) continue;
    const runtime::RegionProfile* node = &r;
    while (node && node->kind != isa::kRegionNode)
      node = node->parent >= 0 ? &p.regions[static_cast<size_t>(node->parent)] : nullptr;
    std::pair<std::string, std::string> note{node ? node->name : std::string("-"), r.name};
    if (std::find(notes.begin(), notes.end(), note) == notes.end()) notes.push_back(std::move(note));
  }
  if (!notes.empty()) {
    os << "\nnotes:\n";
    for (const auto& [node, note] : notes) os << "  " << node << ": " << note << "\n";
  }
  // On a chip of several cores: the kernels left on core 0, and why (the compiler's "serial" regions).
  std::vector<const runtime::RegionProfile*> serial;
  for (const auto& r : p.regions)
    if (r.kind == isa::kRegionSerial) serial.push_back(&r);
  if (serial.empty()) return;
  uint64_t serial_cycles = 0;
  for (const auto* r : serial) serial_cycles += r->cycles();
  std::stable_sort(serial.begin(), serial.end(), [](auto* a, auto* b) { return a->cycles() > b->cycles(); });
  os << "\nnot shared: " << serial.size() << " kernels run on core 0 alone, " << serial_cycles << " cycles ("
     << fixed(p.cycles ? 100.0 * static_cast<double>(serial_cycles) / static_cast<double>(p.cycles) : 0.0, 1)
     << "% of the run)" << (serial.size() > 10 ? "; the 10 longest" : "") << ":\n";
  for (size_t i = 0; i < std::min<size_t>(serial.size(), 10); ++i) {
    const auto* r = serial[i];
    const auto* kernel = r->parent >= 0 ? &p.regions[static_cast<size_t>(r->parent)] : nullptr;
    const auto* node = kernel && kernel->parent >= 0 ? &p.regions[static_cast<size_t>(kernel->parent)] : nullptr;
    os << "  " << (node ? node->name : std::string("-")) << " (" << (kernel ? kernel->name : std::string("-")) << ", "
       << r->cycles() << " cycles): " << r->name << "\n";
  }
}

std::string compile_report_json(const runtime::Profile& p, const std::string& model, const std::string& output) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(runtime::profile_json(p));
  nlohmann::ordered_json out = {{"model", model}, {"output", output.empty() ? nullptr : nlohmann::ordered_json(output)},
                                {"seconds", static_cast<double>(p.cycles) / (p.clock_mhz * 1e6)}};
  for (auto it = j.begin(); it != j.end(); ++it) out[it.key()] = *it;
  return out.dump(1);
}

void print_config(std::ostream& os, const sim::ChipConfig& cfg) {
  auto params = sim::describe(cfg);
  size_t kw = 4, vw = 5, uw = 4, dw = 7;
  for (const auto& p : params) {
    kw = std::max(kw, p.key.size());
    vw = std::max(vw, p.value.size());
    uw = std::max(uw, p.unit.size());
    dw = std::max(dw, p.default_value.size());
  }
  os << std::left << std::setw(kw + 2) << "key" << std::setw(vw + 2) << "value" << std::setw(uw + 2) << "unit"
     << std::setw(dw + 2) << "default" << "help\n";
  for (const auto& p : params)
    os << std::setw(kw + 2) << p.key << std::setw(vw + 2) << p.value << std::setw(uw + 2) << p.unit
       << std::setw(dw + 2) << p.default_value << p.help << "\n";
}

}  // namespace tpusim::cli
