// Chrome trace event JSON (Perfetto opens it): complete ("X") events on one track per unit, in microseconds of
// simulated time. The matrix unit's weight loads and semaphore waits overlap its streaming, so they get tracks
// of their own ("mxu.lw", "mxu.wait"): slices on one track must nest. Waits are slices named after what they
// wait for ("wait s3", "queue full: mxu", "drain (...)"); a unit's memory waits ("memory wait", kind "memory")
// lie inside its busy slice on the same track. Cycles with no slice on a unit's tracks are idle.
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

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

// Written event by event (each through its own small JSON object), so that the text, not a JSON tree of every
// event, is all that a long trace costs: about 170 bytes of output per event.
void write_chrome_trace(std::ostream& os, const std::vector<TraceEvent>& events, const ChipConfig& cfg) {
  using json = nlohmann::ordered_json;
  const std::pair<int, const char*> names[] = {{kCore, "core"}, {kDmaIn, "dmain"},     {kDmaOut, "dmaout"},
                                               {kMxu, "mxu"},   {kVpu, "vpu"},         {kMxuLoad, "mxu.lw"},
                                               {kMxuWait, "mxu.wait"}};
  os << "{\"traceEvents\":[";
  os << json{{"name", "process_name"}, {"ph", "M"}, {"pid", 1}, {"args", {{"name", cfg.chip.name}}}}.dump();
  for (const auto& [tid, name] : names) {
    os << ',' << json{{"name", "thread_name"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"name", name}}}}.dump();
    os << ','
       << json{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", 1}, {"tid", tid}, {"args", {{"sort_index", tid}}}}
              .dump();
  }
  const double us_per_cycle = 1.0 / cfg.chip.clock_mhz;
  for (const TraceEvent& e : events) {
    os << ',' << json{{"name", e.name},
                      {"cat", e.kind},
                      {"ph", "X"},
                      {"pid", 1},
                      {"tid", track(e)},
                      {"ts", static_cast<double>(e.start) * us_per_cycle},
                      {"dur", static_cast<double>(e.duration) * us_per_cycle},
                      {"args", {{"pc", e.pc}, {"cycle", e.start}, {"dur_cycles", e.duration}}}}
                     .dump();
  }
  os << "],\"displayTimeUnit\":\"ns\"}";
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const ChipConfig& cfg) {
  std::ostringstream os;
  write_chrome_trace(os, events, cfg);
  return std::move(os).str();
}

}  // namespace tpusim::sim
