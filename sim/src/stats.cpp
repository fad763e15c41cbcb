// The stall accounting (where each unit's cycles went, and TPUv1's counters) and the stats file: RunStats as
// JSON, keys in a fixed order.
#include <algorithm>

#include <nlohmann/json.hpp>

#include "chip_state.h"
#include "tpusim/sim/chip.h"

namespace tpusim::sim {
namespace detail {
namespace {

// Sweeps one unit's spans over [0, cycles): each stretch goes to the first of memory, busy, weight load,
// semaphore wait that covers it, else to idle (before the unit's last span ends) or idle_after.
void sweep(const std::vector<Span>& spans, uint64_t cycles, const std::array<uint32_t, isa::kNumSems>& sig,
           StallBreakdown& b, Tpuv1Cycles* v1) {
  struct Edge {
    uint64_t t;
    int delta;
    size_t i;
  };
  std::vector<Edge> edges;
  edges.reserve(2 * spans.size());
  uint64_t last = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    const uint64_t s = std::min(spans[i].start, cycles), e = std::min(spans[i].end, cycles);
    if (e <= s) continue;
    edges.push_back({s, +1, i});
    edges.push_back({e, -1, i});
    last = std::max(last, e);
  }
  std::sort(edges.begin(), edges.end(), [](const Edge& x, const Edge& y) { return x.t < y.t; });
  std::array<int, 4> count{};
  std::vector<size_t> sems;  // the semaphore spans open now (one, unless the spans overlap)
  uint64_t prev = 0;
  auto book = [&](uint64_t len) {
    if (!len) return;
    if (count[Span::Memory]) b.wait_memory += len;
    else if (count[Span::Busy]) b.busy += len;
    else if (count[Span::Load]) b.weight_load += len;
    else if (!sems.empty()) {
      b.wait_sem += len;
      b.wait_sem_by[spans[sems.back()].sem] += len;
    } else if (prev < last) b.idle += len;
    else b.idle_after += len;
    if (!v1) return;
    if (count[Span::Busy]) v1->active += len;
    else if (count[Span::Load]) v1->weight_shift += len;
    else if (!sems.empty() && spans[sems.back()].op == isa::Op::MXULW) v1->weight_stall += len;
    else {
      v1->non_matrix += len;
      if (!sems.empty())
        (sig[spans[sems.back()].sem] == 1u << static_cast<int>(isa::Unit::DmaIn) ? v1->input : v1->raw) += len;
    }
  };
  for (const Edge& e : edges) {
    book(e.t - prev);
    prev = e.t;
    const Span& sp = spans[e.i];
    count[sp.kind] += e.delta;
    if (sp.kind == Span::Sem) {
      if (e.delta > 0) sems.push_back(e.i);
      else std::erase(sems, e.i);
    }
  }
  book(cycles - prev);
}

}  // namespace

Signallers signallers(const RunState& run) {
  Signallers out{};
  for (size_t pc = 0; pc < run.code.size(); ++pc) {
    const isa::Instr& in = run.code[pc];
    const isa::Unit u = run.unit_of[pc];
    int64_t s = 0;
    if (u != isa::Unit::Core) s = in.f[in.desc().num_operands - 1];
    else if (in.op == isa::Op::SEMSET) s = in.f[0];
    if (s > 0 && s < isa::kNumSems) out[static_cast<size_t>(s)] |= 1u << static_cast<int>(u);
  }
  return out;
}

void account_stalls(const RunState& run, const Signallers& sig, uint64_t cycles, std::vector<StallBreakdown>& out,
                    Tpuv1Cycles& v1) {
  for (size_t slot = 0; slot < out.size(); ++slot) {
    const isa::Unit u = unit_of_slot(static_cast<int>(slot));
    if (u == isa::Unit::Core) continue;  // booked as it ran (core.cpp)
    out[slot] = StallBreakdown{};
    sweep(run.spans[slot], cycles, sig, out[slot], u == isa::Unit::Mxu ? &v1 : nullptr);
  }
}

void tpuv1_counters(const Tpuv1Cycles& v1, double unit_cycles, double mac_utilization, Tpuv1Counters& t) {
  const double c = unit_cycles > 0 ? unit_cycles : 1.0;
  t.array_active = static_cast<double>(v1.active) / c;
  t.useful_macs = mac_utilization;
  t.unused_macs = std::max(0.0, t.array_active - t.useful_macs);
  t.weight_stall = static_cast<double>(v1.weight_stall) / c;
  t.weight_shift = static_cast<double>(v1.weight_shift) / c;
  t.non_matrix = static_cast<double>(v1.non_matrix) / c;
  t.raw_stall = static_cast<double>(v1.raw) / c;
  t.input_stall = static_cast<double>(v1.input) / c;
}

void add_unit_stats(UnitStats& into, const UnitStats& u) {
  into.instructions += u.instructions;
  into.busy_cycles += u.busy_cycles;
  into.wait_sem_cycles += u.wait_sem_cycles;
  into.wait_queue_cycles += u.wait_queue_cycles;
  StallBreakdown& b = into.stalls;
  const StallBreakdown& x = u.stalls;
  b.wait_memory += x.wait_memory, b.busy += x.busy, b.weight_load += x.weight_load, b.wait_sem += x.wait_sem;
  for (size_t k = 0; k < b.wait_sem_by.size(); ++k) b.wait_sem_by[k] += x.wait_sem_by[k];
  b.wait_queue += x.wait_queue, b.wait_drain += x.wait_drain, b.wait_barrier += x.wait_barrier;
  b.launch += x.launch, b.idle += x.idle, b.idle_after += x.idle_after;
}

}  // namespace detail

std::string UnitInstance::name() const {
  std::string s = "core" + std::to_string(core) + "." + isa::unit_name(unit);
  if (unit == isa::Unit::Mxu) s += std::to_string(index);
  return s;
}

std::string RunStats::to_json(const ChipConfig& cfg) const {
  nlohmann::ordered_json j;
  j["chip"] = cfg.chip.name;
  j["clock_mhz"] = cfg.chip.clock_mhz;
  j["cycles"] = cycles;
  j["seconds"] = seconds;
  nlohmann::ordered_json u = nlohmann::ordered_json::object();
  for (int i = 0; i < isa::kNumUnits; ++i) {
    const UnitStats& s = units[i];
    const StallBreakdown& b = s.stalls;
    nlohmann::ordered_json by = nlohmann::ordered_json::object();
    for (int k = 1; k < isa::kNumSems; ++k)
      if (b.wait_sem_by[k]) by["s" + std::to_string(k)] = b.wait_sem_by[k];
    u[isa::unit_name(static_cast<isa::Unit>(i))] = {
        {"instructions", s.instructions},         {"busy_cycles", s.busy_cycles},
        {"wait_sem_cycles", s.wait_sem_cycles},   {"wait_queue_cycles", s.wait_queue_cycles},
        {"utilization", s.utilization},
        // Every cycle of the run in one category: they add up to "cycles" (StallBreakdown in chip.h).
        {"stalls",
         {{"busy", b.busy},
          {"wait_memory", b.wait_memory},
          {"weight_load", b.weight_load},
          {"wait_sem", b.wait_sem},
          {"wait_sem_by", std::move(by)},
          {"wait_queue", b.wait_queue},
          {"wait_drain", b.wait_drain},
          {"wait_barrier", b.wait_barrier},
          {"launch", b.launch},
          {"idle", b.idle},
          {"idle_after", b.idle_after}}},
    };
  }
  j["units"] = std::move(u);
  j["cores"] = cores;
  j["cores_running"] = cores_running;
  j["mxus_per_core"] = cfg.core.mxus;
  // Every unit of every core: its own counts and utilization (the "units" above add these up per kind).
  const EnergyModel model = energy_model(cfg);
  nlohmann::ordered_json inst = nlohmann::ordered_json::object();
  for (const UnitInstance& i : instances)
    inst[i.name()] = {{"instructions", i.stats.instructions},
                      {"busy_cycles", i.stats.busy_cycles},
                      {"utilization", i.stats.utilization},
                      {"energy_j", dynamic_energy(i.actions, model).dynamic_j}};
  j["instances"] = std::move(inst);
  j["mxu"] = {{"macs", mxu_macs}, {"mac_utilization", mxu_mac_utilization}};
  j["hbm"] = {{"bytes_read", hbm_bytes_read}, {"bytes_written", hbm_bytes_written}};
  j["shared"] = {{"bytes_read", shared_bytes_read}, {"bytes_written", shared_bytes_written}};
  j["local"] = {{"bytes_read", local_bytes_read}, {"bytes_written", local_bytes_written}};
  // Fractions of "cycles" (Tpuv1Counters in chip.h defines each on our matrix unit).
  j["tpuv1_counters"] = {{"array_active", tpuv1.array_active}, {"useful_macs", tpuv1.useful_macs},
                         {"unused_macs", tpuv1.unused_macs},   {"weight_stall", tpuv1.weight_stall},
                         {"weight_shift", tpuv1.weight_shift}, {"non_matrix", tpuv1.non_matrix},
                         {"raw_stall", tpuv1.raw_stall},       {"input_stall", tpuv1.input_stall}};
  // Energy (docs/energy.md): each action's count (the units counted them as they ran) times its energy on this
  // chip, summed per unit; static power times the run's time. Instances above: their dynamic energy.
  const Energy en = energy_of(actions, seconds, model);
  nlohmann::ordered_json by_unit = nlohmann::ordered_json::object();
  const std::vector<double> unit_j = en.by_unit_j();
  for (size_t k = 0; k < unit_j.size(); ++k) by_unit[energy_units()[k]] = unit_j[k];
  by_unit["static"] = en.static_j;
  nlohmann::ordered_json counts = nlohmann::ordered_json::object(), pj = nlohmann::ordered_json::object();
  for (int a = 0; a < kNumActions; ++a) {
    counts[action_name(static_cast<Action>(a))] = actions.n[a];
    pj[action_name(static_cast<Action>(a))] = model.pj[a];
  }
  j["energy"] = {{"total_j", en.total_j()},
                 {"dynamic_j", en.dynamic_j},
                 {"static_j", en.static_j},
                 {"average_power_w", seconds > 0 ? en.total_j() / seconds : 0.0},
                 {"static_w", model.static_w},
                 {"by_unit_j", std::move(by_unit)},
                 {"actions", std::move(counts)},
                 {"pj_per_action", std::move(pj)}};
  const Area area = area_of(cfg);
  nlohmann::ordered_json parts = nlohmann::ordered_json::object();
  for (const AreaPart& p : area.parts) parts[p.name] = p.mm2;
  j["area"] = {{"total_mm2", area.total_mm2}, {"node_nm", cfg.chip.node_nm}, {"by_part_mm2", std::move(parts)}};
  // Performance per watt and per mm2: the matrix units' operations (2 per multiply-accumulate, i8 and bf16).
  const double ops = 2.0 * static_cast<double>(mxu_macs);
  const PeakPower peak = peak_power(cfg);
  j["efficiency"] = {
      {"mxu_ops", ops},
      {"tops_per_w", en.total_j() > 0 ? ops / en.total_j() / 1e12 : 0.0},
      {"tops_per_mm2", seconds > 0 && area.total_mm2 > 0 ? ops / seconds / area.total_mm2 / 1e12 : 0.0},
      {"peak_power_w", peak.total_w()}};
  return j.dump(2);
}

}  // namespace tpusim::sim
