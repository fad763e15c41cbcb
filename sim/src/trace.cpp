// Chrome trace event JSON (Perfetto opens it): complete ("X") events on one track per unit, in microseconds of
// simulated time. The matrix unit's weight loads and semaphore waits overlap its streaming, so they get tracks
// of their own ("mxu.lw", "mxu.wait"): slices on one track must nest. Waits are slices named after what they
// wait for ("wait s3", "queue full: mxu", "drain (...)"); a unit's memory waits ("memory wait", kind "memory")
// lie inside its busy slice on the same track. Cycles with no slice on a unit's tracks are idle. A chip of several
// cores or matrix units gets a set of tracks per core ("core1 dmain") and per matrix unit ("mxu2.lw").
#include <set>

#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "tpusim/sim/chip.h"

namespace tpusim::sim {
namespace {

// Tracks: core 0's units keep the numbers of a one-core chip (core 1, dmain 2, dmaout 3, mxu 4, vpu 5, mxu.lw 6,
// mxu.wait 7); matrix unit i > 0 of a core adds 10 * i to the matrix unit's three; core c adds 1000 * c. (The
// runtime's profiles put their node and kernel tracks at 100 and 101.)
enum Track { kCore = 1, kDmaIn, kDmaOut, kMxu, kVpu, kMxuLoad, kMxuWait };

int track(const TraceEvent& e) {
  int t = static_cast<int>(e.unit) + 1;
  if (e.unit == isa::Unit::Mxu && e.kind == "load") t = kMxuLoad;
  if (e.unit == isa::Unit::Mxu && (e.kind == "wait" || e.kind == "memory")) t = kMxuWait;
  if (e.unit == isa::Unit::Mxu) t += 10 * e.index;
  return 1000 * e.core + t;
}

std::string track_name(int tid, bool cores, bool mxus) {
  const int core = tid / 1000, t = tid % 1000;
  std::string s = cores ? "core" + std::to_string(core) + " " : "";
  static const char* base[] = {"", "core", "dmain", "dmaout", "mxu", "vpu", "mxu", "mxu"};
  const int b = t < 10 ? t : t % 10;
  s += base[b];
  if (b == kMxu || b == kMxuLoad || b == kMxuWait) {
    if (mxus) s += std::to_string(t / 10);
    if (b == kMxuLoad) s += ".lw";
    if (b == kMxuWait) s += ".wait";
  }
  return s;
}

}  // namespace

ChromeTraceWriter::ChromeTraceWriter(std::ostream& os) : os_(os) { os_ << "{\"traceEvents\":["; }

void ChromeTraceWriter::event(const std::string& json_object) {
  if (!first_) os_ << ',';
  first_ = false;
  os_ << json_object;
}

void ChromeTraceWriter::finish() { os_ << "],\"displayTimeUnit\":\"ns\"}"; }

// Written event by event (each through its own small JSON object), so that the text, not a JSON tree of every
// event, is all that a long trace costs: about 170 bytes of output per event.
void ChromeTraceWriter::process(const std::vector<TraceEvent>& events, const ChipConfig& cfg, const TraceProcess& p) {
  using json = nlohmann::ordered_json;
  const bool cores = cfg.chip.cores > 1, mxus = cfg.core.mxus > 1;
  std::set<int> tids = {kCore, kDmaIn, kDmaOut, kMxu, kVpu, kMxuLoad, kMxuWait};
  for (const TraceEvent& e : events) tids.insert(track(e));
  const int pid = p.pid;
  event(json{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", p.name.empty() ? cfg.chip.name : p.name}}}}
            .dump());
  for (int tid : tids) {
    event(json{{"name", "thread_name"}, {"ph", "M"}, {"pid", pid}, {"tid", tid},
               {"args", {{"name", track_name(tid, cores, mxus)}}}}
              .dump());
    event(json{{"name", "thread_sort_index"}, {"ph", "M"}, {"pid", pid}, {"tid", tid}, {"args", {{"sort_index", tid}}}}
              .dump());
  }
  const double us_per_cycle = 1.0 / cfg.chip.clock_mhz;
  for (const TraceEvent& e : events) {
    json args = {{"pc", e.pc}, {"cycle", e.start}, {"dur_cycles", e.duration}};
    if (p.arg_of)
      if (const std::string* a = p.arg_of(e)) args[p.arg_name] = *a;
    event(json{{"name", e.name},
               {"cat", e.kind},
               {"ph", "X"},
               {"pid", pid},
               {"tid", track(e)},
               {"ts", static_cast<double>(e.start) * us_per_cycle},
               {"dur", static_cast<double>(e.duration) * us_per_cycle},
               {"args", std::move(args)}}
              .dump());
  }
}

void write_chrome_trace(std::ostream& os, const std::vector<TraceEvent>& events, const ChipConfig& cfg) {
  ChromeTraceWriter w(os);
  w.process(events, cfg);
  w.finish();
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const ChipConfig& cfg) {
  std::ostringstream os;
  write_chrome_trace(os, events, cfg);
  return std::move(os).str();
}

}  // namespace tpusim::sim
