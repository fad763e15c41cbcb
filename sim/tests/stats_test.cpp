// Stats JSON, Chrome traces, determinism, and several chips in one process.
#include <memory>
#include <set>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI32 = 1;

// dma.ld of 256 bytes (complete at 23) signals s1; vpu.add of 4 elements waits for it: [6, 23) waiting, [23, 26)
// busy; 27 cycles (see timing_test.cpp).
isa::Program dma_then_vpu() {
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);
  b.op(Op::VADD, {0, 0, 0, 3, kI32}).wait(1);
  return b.build();
}

TEST(Stats, JsonHasEveryField) {
  Chip chip(small_config());
  RunResult r = chip.run(dma_then_vpu());
  auto j = nlohmann::json::parse(r.stats.to_json(chip.config()));
  EXPECT_EQ(j["chip"], "edge");
  EXPECT_EQ(j["clock_mhz"], 500.0);
  EXPECT_EQ(j["cycles"], 27);
  EXPECT_DOUBLE_EQ(j["seconds"].get<double>(), 27 / 500e6);
  for (const char* u : {"core", "dmain", "dmaout", "mxu", "vpu"})
    for (const char* k : {"instructions", "busy_cycles", "wait_sem_cycles", "wait_queue_cycles", "utilization"})
      EXPECT_TRUE(j["units"][u].contains(k)) << u << "." << k;
  EXPECT_EQ(j["units"]["core"]["instructions"], 6);
  EXPECT_EQ(j["units"]["dmain"]["busy_cycles"], 18);
  EXPECT_DOUBLE_EQ(j["units"]["dmain"]["utilization"].get<double>(), 18.0 / 27);
  EXPECT_EQ(j["units"]["vpu"]["wait_sem_cycles"], 17);
  EXPECT_EQ(j["mxu"]["macs"], 0);
  EXPECT_EQ(j["mxu"]["mac_utilization"], 0.0);
  EXPECT_EQ(j["hbm"]["bytes_read"], 256);
  EXPECT_EQ(j["hbm"]["bytes_written"], 0);
}

TEST(Stats, IdenticalRunsGiveIdenticalStats) {
  Chip a(small_config()), b(small_config());  // both elaborated before the first run
  isa::Program p = dma_then_vpu();
  std::string first = a.run(p).stats.to_json(a.config());
  EXPECT_EQ(a.run(p).stats.to_json(a.config()), first);
  EXPECT_EQ(b.run(p).stats.to_json(b.config()), first);
}

TEST(Stats, ChipsWithDifferentConfigsInOneProcess) {
  Chip a(small_config()), b(small_config({"dma.latency=20"}));
  isa::Program p = dma_then_vpu();
  EXPECT_EQ(a.run(p).stats.cycles, 27u);
  EXPECT_EQ(b.run(p).stats.cycles, 37u);
  EXPECT_EQ(a.run(p).stats.cycles, 27u);
}

TEST(Stats, ChipDestroyedWhileAnotherLives) {
  auto b = std::make_unique<Chip>(small_config());
  isa::Program p = dma_then_vpu();
  {
    Chip a(small_config());
    EXPECT_EQ(a.run(p).stats.cycles, 27u);
  }
  EXPECT_EQ(b->run(p).stats.cycles, 27u);
  EXPECT_EQ(b->run(p).stats.cycles, 27u);
}

TEST(Stats, TraceHasBusyAndWaitSlices) {
  Chip chip(small_config());
  RunOptions o;
  o.trace = true;
  chip.run(dma_then_vpu(), o);  // a first run, so that the traced one does not start at time 0
  RunResult r = chip.run(dma_then_vpu(), o);
  // Sorted by start: the load, the core waiting at the end of the program for the units [6, 26), the vector
  // unit's semaphore wait and its instruction.
  ASSERT_EQ(r.trace.size(), 4u);
  const TraceEvent& drain = r.trace[1];
  EXPECT_EQ(drain.unit, isa::Unit::Core);
  EXPECT_EQ(drain.start, 6u);
  EXPECT_EQ(drain.duration, 20u);
  EXPECT_EQ(drain.name, "drain (end of program)");
  EXPECT_EQ(drain.kind, "wait");
  const TraceEvent& dma = r.trace[0];
  EXPECT_EQ(dma.unit, isa::Unit::DmaIn);
  EXPECT_EQ(dma.start, 5u);
  EXPECT_EQ(dma.duration, 18u);
  EXPECT_EQ(dma.pc, 4u);
  EXPECT_EQ(dma.name, "dma.ld r0, r0, r3, r4, r5, r6, signal=s1");
  EXPECT_EQ(dma.kind, "busy");
  const TraceEvent& wait = r.trace[2];
  EXPECT_EQ(wait.unit, isa::Unit::Vpu);
  EXPECT_EQ(wait.start, 6u);
  EXPECT_EQ(wait.duration, 17u);
  EXPECT_EQ(wait.name, "wait s1");
  EXPECT_EQ(wait.kind, "wait");
  const TraceEvent& add = r.trace[3];
  EXPECT_EQ(add.start, 23u);
  EXPECT_EQ(add.duration, 3u);
  EXPECT_EQ(add.kind, "busy");

  auto j = nlohmann::json::parse(chrome_trace_json(r.trace, chip.config()));
  EXPECT_EQ(j["displayTimeUnit"], "ns");
  std::map<int, std::string> threads;
  std::vector<nlohmann::json> slices;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "X") slices.push_back(e);
  }
  for (const char* u : {"core", "dmain", "dmaout", "mxu", "vpu"}) {
    bool found = false;
    for (const auto& [tid, name] : threads) found |= name == u;
    EXPECT_TRUE(found) << u;
  }
  ASSERT_EQ(slices.size(), 4u);
  EXPECT_EQ(threads[slices[0]["tid"]], "dmain");
  EXPECT_EQ(threads[slices[1]["tid"]], "core");
  EXPECT_DOUBLE_EQ(slices[0]["ts"].get<double>(), 5 / 500.0);  // microseconds at 500 MHz
  EXPECT_DOUBLE_EQ(slices[0]["dur"].get<double>(), 18 / 500.0);
  EXPECT_EQ(slices[0]["pid"], 1);
  EXPECT_EQ(slices[0]["args"]["pc"], 4);
  EXPECT_EQ(slices[0]["args"]["cycle"], 5);
  EXPECT_EQ(slices[0]["args"]["dur_cycles"], 18);
  EXPECT_EQ(threads[slices[3]["tid"]], "vpu");
}

TEST(Stats, MatrixUnitTraceSeparatesLoadsFromStreaming) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8);
  b.op(Op::MXULW, {0, 1, 1, 1, 0}).op(Op::MXUMM, {2, 3, 0, 1, 0});
  RunOptions o;
  o.trace = true;
  RunResult r = chip.run(b.build(), o);
  std::erase_if(r.trace, [](const TraceEvent& e) { return e.unit == isa::Unit::Core; });
  ASSERT_EQ(r.trace.size(), 2u);
  EXPECT_EQ(r.trace[0].kind, "load");  // [4, 8)
  EXPECT_EQ(r.trace[0].start, 4u);
  EXPECT_EQ(r.trace[0].duration, 4u);
  EXPECT_EQ(r.trace[1].kind, "busy");  // streaming [8, 16)
  EXPECT_EQ(r.trace[1].start, 8u);
  EXPECT_EQ(r.trace[1].duration, 8u);
  auto j = nlohmann::json::parse(chrome_trace_json(r.trace, chip.config()));
  std::set<int> tids;
  for (const auto& e : j["traceEvents"])
    if (e["ph"] == "X") tids.insert(e["tid"].get<int>());
  EXPECT_EQ(tids.size(), 2u);
}

}  // namespace
}  // namespace tpusim::sim::test
