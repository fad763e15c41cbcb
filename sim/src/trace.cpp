// Chrome trace event JSON (Perfetto opens it): complete ("X") events on one track per unit, in microseconds of
// simulated time. The matrix unit's weight loads and semaphore waits overlap its streaming, so they get tracks
// of their own ("mxu.lw", "mxu.wait"): slices on one track must nest. Waits are slices named after what they
// wait for ("wait s3", "queue full: mxu", "drain (...)"); a unit's memory waits ("memory wait", kind "memory")
// lie inside its busy slice on the same track. Cycles with no slice on a unit's tracks are idle.
#include <nlohmann/json.hpp>

#include "tpusim/sim/chip.h"

namespace tpusim::sim {
namespace {

enum Track { kCore = 1, kDmaIn, kDmaOut, kMxu, kVpu, kMxuLoad, kMxuWait };

int track(const TraceEvent& e) {
  if (e.unit == isa::Unit::Mxu && e.kind == "load") return kMxuLoad;
  if (e.unit == isa::Unit::Mxu && (e.kind == "wait" || e.kind == "memory")) return kMxuWait;
  return static_cast<int>(e.unit) + 1;
}

}  // namespace

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const ChipConfig& cfg) {
  using json = nlohmann::ordered_json;
  json list = json::array();
  const std::pair<int, const char*> names[] = {{kCore, "core"}, {kDmaIn, "dmain"},     {kDmaOut, "dmaout"},
                                               {kMxu, "mxu"},   {kVpu, "vpu"},         {kMxuLoad, "mxu.lw"},
                                               {kMxuWait, "mxu.wait"}};
  list.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", cfg.chip.name}}}});
  for (const auto& [tid, name] : names) {
    list.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}});
    list.push_back(
        {{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}});
  }
  const double us_per_cycle = 1.0 / cfg.chip.clock_mhz;
  for (const TraceEvent& e : events) {
    list.push_back({{"name", e.name},
                    {"cat", e.kind},
                    {"ph", "X"},
                    {"pid", 1},
                    {"tid", track(e)},
                    {"ts", static_cast<double>(e.start) * us_per_cycle},
                    {"dur", static_cast<double>(e.duration) * us_per_cycle},
                    {"args", {{"pc", e.pc}, {"cycle", e.start}, {"dur_cycles", e.duration}}}});
  }
  json j;
  j["traceEvents"] = std::move(list);
  j["displayTimeUnit"] = "ns";
  return j.dump();
}

}  // namespace tpusim::sim
