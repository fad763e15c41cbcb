// Profiles: exact attribution of a hand-written trace to nested regions, and a real run on the simulated chip.
#include "tpusim/runtime/profile.h"

#include <gtest/gtest.h>

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <new>
#include <set>
#include <sstream>
#include <streambuf>

#include <nlohmann/json.hpp>

#include "tpusim/isa/assembler.h"
#include "tpusim/runtime/npy.h"

// The heap this program holds, for Profile.TraceIsWrittenEventByEvent: every operator new and delete of the test
// program goes through these, nothrow forms included (they only count; malloc does the work, and AddressSanitizer
// still sees it; the aligned forms stay the library's, which pairs them itself).
namespace {
std::atomic<size_t> heap_live{0}, heap_peak{0};
void* counted_new(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  const size_t live = heap_live += malloc_usable_size(p);
  for (size_t peak = heap_peak; live > peak && !heap_peak.compare_exchange_weak(peak, live);) {
  }
  return p;
}
void counted_delete(void* p) {
  if (!p) return;
  heap_live -= malloc_usable_size(p);
  std::free(p);
}
}  // namespace
void* operator new(size_t n) { return counted_new(n); }
void* operator new[](size_t n) { return counted_new(n); }
void operator delete(void* p) noexcept { counted_delete(p); }
void operator delete[](void* p) noexcept { counted_delete(p); }
void operator delete(void* p, size_t) noexcept { counted_delete(p); }
void operator delete[](void* p, size_t) noexcept { counted_delete(p); }
void* operator new(size_t n, const std::nothrow_t&) noexcept {
  try {
    return counted_new(n);
  } catch (const std::bad_alloc&) {
    return nullptr;
  }
}
void* operator new[](size_t n, const std::nothrow_t& t) noexcept { return operator new(n, t); }
void operator delete(void* p, const std::nothrow_t&) noexcept { counted_delete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { counted_delete(p); }

namespace tpusim::runtime {
namespace {

using isa::Unit;

// pc 0 li (core), 1 dma.ld (dmain), 2 mxu.lw (mxu), 3 nop, 4 dma.st (dmaout), 5 halt.
isa::Program two_nodes() {
  return isa::assemble(
      ".name \"two\"\n"
      ".region node, \"a\"\n"
      "  li r2, 1\n"
      "  dma.ld r1, r1, r2, r3, r4, r5, signal=s1\n"
      "  .region kernel, \"k.s\"\n"
      "    mxu.lw r1, r2, r3, r4, bf16, wait=s1\n"
      "    nop\n"
      "  .endregion\n"
      ".endregion\n"
      ".region node, \"b\"\n"
      "  dma.st r1, r1, r2, r3, r4, r5\n"
      ".endregion\n"
      "halt\n",
      "two.s");
}

sim::ChipConfig config() { return sim::load_config("v4-like"); }

TEST(Profile, CountsTheCoresOfARegionAndTheOneThatFinishesIt) {
  // v4: 2 cores x 4 matrix units. Node a: core 0's load (2..12) and matrix unit 3 (20..24), core 1's matrix unit
  // 0 (12..27: it ends last, so core 1 is a's critical core). Node b: core 0's store only.
  sim::RunResult run;
  run.stats.cycles = 40;
  run.trace = {
      {Unit::DmaIn, 2, 10, 1, "dma.ld", "busy", 0, 0},
      {Unit::Mxu, 20, 4, 2, "mxu.lw", "busy", 0, 3},
      {Unit::Mxu, 12, 15, 2, "mxu.lw", "busy", 1, 0},
      {Unit::DmaOut, 28, 6, 4, "dma.st", "busy", 0, 0},
  };
  Profile p = make_profile(two_nodes(), run, sim::load_config("v4"));
  EXPECT_EQ(p.matrix_units, 8);
  const RegionProfile &a = p.regions[0], &b = p.regions[2];
  EXPECT_EQ(a.cores, 2);
  EXPECT_EQ(a.critical_core, 1);
  EXPECT_EQ(a.cycles(), 25u);  // 2..27
  // 4 + 15 busy cycles of the 8 units' 25 x 8.
  EXPECT_DOUBLE_EQ(a.mxu_utilization, 19.0 / (25 * 8));
  EXPECT_EQ(b.cores, 1);
  EXPECT_EQ(b.critical_core, 0);
  EXPECT_EQ(p.program.cores, 2);
  EXPECT_EQ(p.program.critical_core, 0);  // the store ends the run at 34
  const auto j = nlohmann::json::parse(profile_json(p));
  EXPECT_EQ(j["regions"][0]["cores"], 2);
  EXPECT_EQ(j["regions"][0]["critical_core"], 1);
}

TEST(Profile, AttributesEachEventToItsRegionAndTheRegionsAroundIt) {
  sim::RunResult run;
  run.stats.cycles = 32;
  run.trace = {
      {Unit::DmaIn, 2, 10, 1, "dma.ld", "busy"},   // node a
      {Unit::DmaIn, 5, 3, 1, "memory wait", "memory"},
      {Unit::Mxu, 2, 10, 2, "wait s1", "wait"},    // kernel k.s, so node a too
      {Unit::Mxu, 12, 8, 2, "mxu.lw", "load"},
      {Unit::Mxu, 20, 4, 2, "mxu.lw", "busy"},
      {Unit::Core, 3, 2, 4, "queue full: dmaout", "wait"},  // node b: counted, but a core slice: no widening
      {Unit::DmaOut, 24, 6, 4, "dma.st", "busy"},  // node b
      {Unit::Core, 1, 30, 5, "drain (halt)", "wait"},  // in no region: the program only
  };
  Profile p = make_profile(two_nodes(), run, config());
  ASSERT_EQ(p.regions.size(), 3u);
  const RegionProfile &a = p.regions[0], &k = p.regions[1], &b = p.regions[2];
  EXPECT_EQ(a.name, "a");
  EXPECT_EQ(k.parent, 0);
  EXPECT_EQ(k.depth, 1);
  EXPECT_EQ(b.parent, -1);

  // k.s: only pc 2's slices, from cycle 2 (the wait) to 24 (the busy slice's end): 22 cycles, 4 of them MXU busy.
  EXPECT_EQ(k.first_cycle, 2u);
  EXPECT_EQ(k.cycles(), 22u);
  EXPECT_DOUBLE_EQ(k.mxu_utilization, 4.0 / 22);
  EXPECT_DOUBLE_EQ(k.share, 22.0 / 32);
  const UnitProfile& kmxu = k.units[static_cast<int>(Unit::Mxu)];
  EXPECT_EQ(kmxu.cycles, (std::map<std::string, uint64_t>{{"busy", 4}, {"load", 8}, {"wait", 10}}));
  EXPECT_EQ(kmxu.events, 3u);
  EXPECT_EQ(k.instructions, 2u);  // mxu.lw and nop
  EXPECT_EQ(kmxu.instructions, 1u);
  EXPECT_EQ(k.units[static_cast<int>(Unit::DmaIn)].events, 0u);

  // Node a holds k.s: the same span (the dma.ld runs in 2..12), plus the load engine's busy and memory cycles.
  EXPECT_EQ(a.cycles(), 22u);
  EXPECT_EQ(a.units[static_cast<int>(Unit::DmaIn)].cycles,
            (std::map<std::string, uint64_t>{{"busy", 10}, {"memory", 3}}));
  EXPECT_EQ(a.units[static_cast<int>(Unit::Mxu)].cycles, kmxu.cycles);
  EXPECT_EQ(a.instructions, 4u);
  EXPECT_EQ(a.units[static_cast<int>(Unit::Core)].instructions, 2u);  // li, nop

  // Node b: the store's 24..30; the core's queue-full wait (3..5) is counted but does not widen the span.
  EXPECT_EQ(b.first_cycle, 24u);
  EXPECT_EQ(b.cycles(), 6u);
  EXPECT_EQ(b.units[static_cast<int>(Unit::Core)].cycles.at("wait"), 2u);
  EXPECT_EQ(b.mxu_utilization, 0.0);
  // No region gives its work here: no roofline bound.
  EXPECT_EQ(b.flops, 0.0);
  EXPECT_EQ(b.bound_cycles, 0.0);
  EXPECT_EQ(b.bound, "");
  EXPECT_EQ(b.bound_ratio(), 0.0);
  EXPECT_EQ(p.program.bound, "");

  // The program: every slice; the unit slices run from 2 to 30.
  EXPECT_EQ(p.program.cycles(), 28u);
  EXPECT_EQ(p.program.units[static_cast<int>(Unit::Core)].cycles.at("wait"), 32u);
  EXPECT_EQ(p.program.instructions, 6u);
  EXPECT_EQ(p.top("node"), (std::vector<size_t>{0, 2}));
  EXPECT_EQ(p.top("node", 1), (std::vector<size_t>{0}));
  EXPECT_EQ(p.top("kernel"), (std::vector<size_t>{1}));

  auto j = nlohmann::json::parse(profile_json(p));
  EXPECT_EQ(j["cycles"], 32);
  EXPECT_EQ(j["regions"][1]["name"], "k.s");
  EXPECT_EQ(j["regions"][1]["units"]["mxu"]["cycles"]["load"], 8);
  EXPECT_EQ(j["regions"][0]["cycles"], 22);

  // The trace: the units' slices name their node; one slice per node region on the "nodes" track.
  auto t = nlohmann::json::parse(profile_trace_json(two_nodes(), run, config(), p));
  int node_slices = 0;
  // at() and value(), not operator[]: on a const json, operator[] with a key that is absent (the node and kernel
  // tracks' slices carry no "pc") is undefined behaviour.
  for (const auto& e : t["traceEvents"]) {
    if (e.at("ph") != "X") continue;
    const auto& args = e.at("args");
    if (e.at("tid") == 100) {
      ++node_slices;
      if (e.at("name") == "b") {
        EXPECT_EQ(args.at("dur_cycles"), 6);
      }
    } else if (args.value("pc", -1) == 1) {
      EXPECT_EQ(args.value("node", ""), "a");
    } else if (args.value("pc", -1) == 5) {
      EXPECT_FALSE(args.contains("node"));
    }
  }
  EXPECT_EQ(node_slices, 2);
}

// The roofline bound of regions whose flops and bytes are given, on v4-like (128x128 MXU at 1050 MHz, 1200 GB/s):
//   peak:  2 * 128 * 128 = 32768 flops per cycle (each PE one multiply-add a cycle, a multiply-add is 2 flops)
//   HBM:   1200 GB/s = 1.2e12 bytes/s over 1.05e9 cycles/s = 1200e3 / 1050 = 1142.857... bytes per cycle
TEST(Profile, RooflineBoundPerRegion) {
  const sim::ChipConfig cfg = config();
  const double peak = 2.0 * cfg.mxu.rows * cfg.mxu.cols;
  const double bw = cfg.hbm.bandwidth_gbs * 1e3 / cfg.chip.clock_mhz;
  ASSERT_EQ(peak, 32768.0);
  ASSERT_DOUBLE_EQ(bw, 1200e3 / 1050);

  isa::Program prog = two_nodes();
  ASSERT_EQ(prog.regions.size(), 3u);
  isa::Region &a = prog.regions[0], &k = prog.regions[1], &b = prog.regions[2];
  a.flops = 100 * 32768;              // compute: 100 cycles; no bytes given
  k.flops = 2 * 32768, k.bytes = 24000;  // compute 2 cycles, memory 24000 / 1142.857 = 21 cycles: memory-bound
  b.bytes = 2400;                     // memory: 2.1 cycles
  sim::RunResult run;
  run.stats.cycles = 120;
  run.trace = {
      {Unit::DmaIn, 0, 10, 1, "dma.ld", "busy"},     // node a: cycles 0..110
      {Unit::Mxu, 10, 100, 2, "mxu.lw", "busy"},     // kernel k.s: 10..110
      {Unit::DmaOut, 110, 6, 4, "dma.st", "busy"},   // node b: 110..116
  };
  Profile p = make_profile(prog, run, cfg);
  EXPECT_EQ(p.peak_flops_per_cycle, peak);
  EXPECT_DOUBLE_EQ(p.hbm_bytes_per_cycle, bw);
  const RegionProfile &ra = p.regions[0], &rk = p.regions[1], &rb = p.regions[2];

  EXPECT_EQ(ra.flops, 3276800.0);
  EXPECT_EQ(ra.bytes, 0.0);
  EXPECT_DOUBLE_EQ(ra.bound_cycles, 3276800.0 / peak);  // = 100
  EXPECT_DOUBLE_EQ(ra.bound_cycles, 100.0);
  EXPECT_EQ(ra.bound, "compute");
  EXPECT_DOUBLE_EQ(ra.bound_ratio(), 110.0 / 100.0);  // measured 110 cycles

  EXPECT_DOUBLE_EQ(rk.bound_cycles, std::max(65536.0 / peak, 24000.0 / bw));  // = max(2, 21)
  EXPECT_DOUBLE_EQ(rk.bound_cycles, 21.0);
  EXPECT_EQ(rk.bound, "memory");
  EXPECT_DOUBLE_EQ(rk.bound_ratio(), 100.0 / 21.0);

  EXPECT_DOUBLE_EQ(rb.bound_cycles, 2400.0 / bw);  // = 2.1
  EXPECT_DOUBLE_EQ(rb.bound_cycles, 2.1);
  EXPECT_EQ(rb.bound, "memory");
  EXPECT_DOUBLE_EQ(rb.bound_ratio(), 6.0 / 2.1);

  // The program: flops from a and b (k.s lies inside a, which gives flops: not counted twice); bytes from k.s and b
  // (a gives no bytes, so k.s is the outermost region giving them). Bound: max(3276800 / 32768, 26400 / 1142.857)
  // = max(100, 23.1) = 100, compute; measured: 0..116.
  EXPECT_EQ(p.program.flops, 3276800.0);
  EXPECT_EQ(p.program.bytes, 26400.0);
  EXPECT_DOUBLE_EQ(p.program.bound_cycles, 100.0);
  EXPECT_EQ(p.program.bound, "compute");
  EXPECT_DOUBLE_EQ(p.program.bound_ratio(), 1.16);

  auto j = nlohmann::json::parse(profile_json(p));
  EXPECT_EQ(j["peak_flops_per_cycle"], 32768.0);
  EXPECT_EQ(j["regions"][1]["bound"], "memory");
  EXPECT_DOUBLE_EQ(j["regions"][1]["bound_cycles"].get<double>(), 21.0);
  EXPECT_EQ(j["regions"][1]["bytes"], 24000.0);
  EXPECT_EQ(j["regions"][0]["flops"], 3276800.0);
  EXPECT_DOUBLE_EQ(j["regions"][0]["bound_ratio"].get<double>(), 1.1);
  EXPECT_EQ(j["program"]["bound"], "compute");
  EXPECT_EQ(j["program"]["bytes"], 26400.0);
}

TEST(Profile, NeedsTheTrace) {
  sim::RunResult run;
  run.stats.cycles = 40;
  try {
    make_profile(two_nodes(), run, config());
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "a profile needs the run's trace: run with tracing on (ExecuteOptions::trace)");
  }
}

// On the chip: the numbers add up against the run's own statistics.
TEST(Profile, OfARealRun) {
  sim::ChipConfig cfg = config();
  sim::Chip chip(cfg);
  isa::Program prog = isa::assemble(
      ".region node, \"load\"\n"
      "  li r2, 8\n"
      "  li r3, 256\n"
      "  li r4, 256\n"
      "  li r5, 256\n"
      "  dma.ld r1, r1, r2, r3, r4, r5, signal=s1\n"
      "  .region kernel, \"lw.s\"\n"
      "    li r6, 128\n"
      "    mxu.lw r1, r2, r6, r3, bf16, wait=s1\n"
      "  .endregion\n"
      ".endregion\n"
      ".region node, \"store\"\n"
      "  fence\n"
      "  dma.st r1, r1, r2, r3, r4, r5\n"
      ".endregion\n"
      "halt\n",
      "real.s");
  sim::RunOptions opts;
  opts.trace = true;
  sim::RunResult run = chip.run(prog, opts);
  Profile p = make_profile(prog, run, cfg);
  ASSERT_EQ(p.regions.size(), 3u);
  const RegionProfile &load = p.regions[0], &lw = p.regions[1], &store = p.regions[2];
  const auto unit = [](const RegionProfile& r, Unit u) -> const UnitProfile& { return r.units[static_cast<int>(u)]; };
  // Each unit's busy cycles in the profile are those of the run's statistics.
  EXPECT_EQ(unit(load, Unit::DmaIn).busy(), run.stats.units[static_cast<int>(Unit::DmaIn)].busy_cycles);
  EXPECT_EQ(unit(store, Unit::DmaOut).busy(), run.stats.units[static_cast<int>(Unit::DmaOut)].busy_cycles);
  EXPECT_EQ(unit(lw, Unit::Mxu).cycles.at("load"), unit(load, Unit::Mxu).cycles.at("load"));
  EXPECT_EQ(unit(load, Unit::DmaOut).events, 0u);
  EXPECT_EQ(unit(store, Unit::DmaIn).events, 0u);
  // The fence keeps the nodes apart in time, and both lie inside the run.
  EXPECT_GT(load.cycles(), 0u);
  EXPECT_GT(store.cycles(), 0u);
  EXPECT_LE(load.last_cycle, store.first_cycle);
  EXPECT_LE(store.last_cycle, run.stats.cycles);
  EXPECT_LE(lw.first_cycle, lw.last_cycle);
  EXPECT_GE(lw.first_cycle, load.first_cycle);
  EXPECT_LE(lw.last_cycle, load.last_cycle);
}

// Energy per region (profile.h): dynamic from each instruction's actions, static from the cycles each region holds.
// Node a spans cycles [0, 20), node b [10, 30), in a run of 40: they share [10, 20), so each holds 10 + 5 = 15
// cycles, and 10 cycles ([30, 40)) are held by no node. The kernel k.s has no slices: it holds none.
TEST(Profile, EnergyPerRegionFromActionsAndHeldCycles) {
  const sim::ChipConfig cfg = config();
  sim::RunResult run;
  run.stats.cycles = 40;
  run.trace = {
      {Unit::DmaIn, 0, 20, 1, "dma.ld", "busy"},    // node a
      {Unit::DmaOut, 10, 20, 4, "dma.st", "busy"},  // node b
  };
  run.actions_by_pc.resize(6);
  run.actions_by_pc[1][sim::Action::HbmRead] = 1000;   // node a
  run.actions_by_pc[2][sim::Action::MacBf16] = 4096;   // kernel k.s, in node a
  run.actions_by_pc[4][sim::Action::HbmWrite] = 500;   // node b
  run.actions_by_pc[5][sim::Action::VmemRead] = 64;    // halt: outside every node (made up, to be counted)
  const Profile p = make_profile(two_nodes(), run, cfg);
  const sim::EnergyModel m = sim::energy_model(cfg);
  const double hz = cfg.chip.clock_mhz * 1e6;
  const RegionProfile &a = p.regions[0], &k = p.regions[1], &b = p.regions[2];
  EXPECT_DOUBLE_EQ(a.held_cycles, 15.0);
  EXPECT_DOUBLE_EQ(b.held_cycles, 15.0);
  EXPECT_DOUBLE_EQ(k.held_cycles, 0.0);
  EXPECT_DOUBLE_EQ(p.program.held_cycles, 40.0);
  EXPECT_DOUBLE_EQ(p.static_w, m.static_w);
  EXPECT_DOUBLE_EQ(a.static_j, m.static_w * 15 / hz);
  EXPECT_DOUBLE_EQ(p.outside_nodes_static_j, m.static_w * 10 / hz);
  EXPECT_DOUBLE_EQ(a.dynamic_j, (1000 * m.pj_of(sim::Action::HbmRead) + 4096 * m.pj_of(sim::Action::MacBf16)) * 1e-12);
  EXPECT_DOUBLE_EQ(k.dynamic_j, 4096 * m.pj_of(sim::Action::MacBf16) * 1e-12);
  EXPECT_DOUBLE_EQ(b.dynamic_j, 500 * m.pj_of(sim::Action::HbmWrite) * 1e-12);
  EXPECT_DOUBLE_EQ(p.outside_nodes_dynamic_j, 64 * m.pj_of(sim::Action::VmemRead) * 1e-12);
  EXPECT_NEAR(a.energy_j() + b.energy_j() + p.outside_nodes_j(), p.program.energy_j(), p.program.energy_j() * 1e-12);
  auto j = nlohmann::json::parse(profile_json(p));
  EXPECT_DOUBLE_EQ(j["regions"][0]["energy"]["held_cycles"].get<double>(), 15.0);
  EXPECT_DOUBLE_EQ(j["regions"][1]["energy"]["by_unit_j"]["mxu"].get<double>(), k.dynamic_j);
  EXPECT_DOUBLE_EQ(j["outside_nodes_energy_j"].get<double>(), p.outside_nodes_j());
}

// On the chip: the nodes' energies and the energy outside them add up to the run's (its statistics' energy).
TEST(Profile, EnergyPerNodeAddsUpToTheRun) {
  const sim::ChipConfig cfg = config();
  sim::Chip chip(cfg);
  isa::Program prog = isa::assemble(
      "  li r2, 128\n  li r3, 256\n  li r7, 4096\n"
      "  dma.ld r1, r7, r2, r3, r3, r3\n"      // outside every node: 128 rows of 256 bytes
      ".region node, \"matmul\"\n"
      "  dma.ld r7, r1, r2, r3, r3, r3, signal=s1\n"
      "  mxu.lw r7, r2, r2, r3, bf16, wait=s1\n"
      "  mxu.mm r1, r2, r1, r3, bf16, signal=s2\n"
      ".endregion\n"
      ".region node, \"drain\"\n"
      "  li r4, 512\n"
      "  li r5, 65536\n"
      "  vpu.acc r5, r1, r2, r2, r4, r0, r0, f32, f32, wait=s2, signal=s3\n"
      "  dma.st r5, r5, r2, r4, r4, r4, wait=s3\n"
      ".endregion\n"
      "halt\n",
      "energy.s");
  sim::RunOptions opts;
  opts.trace = true;
  const sim::RunResult run = chip.run(prog, opts);
  const Profile p = make_profile(prog, run, cfg);
  const sim::Energy total = sim::energy_of(run.stats.actions, run.stats.seconds, sim::energy_model(cfg));
  ASSERT_GT(total.dynamic_j, 0.0);
  EXPECT_EQ(p.program.actions, run.stats.actions);
  EXPECT_NEAR(p.program.energy_j(), total.total_j(), total.total_j() * 1e-12);
  double nodes = 0;
  for (const RegionProfile& r : p.regions)
    if (r.kind == isa::kRegionNode) nodes += r.energy_j();
  EXPECT_GT(p.outside_nodes_dynamic_j, 0.0);  // the first load
  EXPECT_NEAR(nodes + p.outside_nodes_j(), total.total_j(), total.total_j() * 1e-12);
  // The matmul node holds the MACs: 128 x 128 x 128.
  EXPECT_EQ(p.regions.at(0).actions[sim::Action::MacBf16], 128u * 128 * 128);
  EXPECT_EQ(p.regions.at(1).actions[sim::Action::MacBf16], 0u);
}

// Two devices running one program together: a process per device in the trace, each with its unit tracks and
// the node slices, and the same numbers on both (identical chips, identical inputs).
TEST(Profile, TraceOfTwoDevicesHasAProcessEach) {
  sim::ChipConfig cfg = config();
  sim::Chip a(cfg), b(cfg);
  isa::Program prog = isa::assemble(
      ".region node, \"load\"\n"
      "  li r2, 8\n  li r3, 256\n  li r4, 256\n  li r5, 256\n"
      "  dma.ld r1, r1, r2, r3, r4, r5\n"
      ".endregion\n",
      "two.s");
  sim::RunOptions opts;
  opts.trace = true;
  a.start(prog, opts);
  b.start(prog, opts);
  sim::Chip::run_started({&a, &b});
  sim::RunResult ra = a.finish(), rb = b.finish();
  Profile pa = make_profile(prog, ra, cfg), pb = make_profile(prog, rb, cfg);
  EXPECT_EQ(pa.regions.at(0).cycles(), pb.regions.at(0).cycles());
  auto j = nlohmann::json::parse(profile_trace_json(prog, {DeviceRun{0, &ra, &pa}, DeviceRun{1, &rb, &pb}}, cfg));
  std::map<int, std::set<std::string>> tracks;      // pid -> thread names
  std::map<int, std::string> processes;              // pid -> process name
  std::map<int, int> node_slices;                    // pid -> node slices
  for (const auto& e : j["traceEvents"]) {
    const int pid = e["pid"].get<int>();
    if (e["name"] == "thread_name") tracks[pid].insert(e["args"]["name"].get<std::string>());
    if (e["name"] == "process_name") processes[pid] = e["args"]["name"].get<std::string>();
    if (e["ph"] == "X" && e["cat"] == "node") ++node_slices[pid];
  }
  ASSERT_EQ(tracks.size(), 2u);
  for (int pid : {1, 2}) {
    EXPECT_TRUE(tracks[pid].count("dmain") && tracks[pid].count("mxu") && tracks[pid].count("nodes")) << pid;
    EXPECT_EQ(node_slices[pid], 1) << pid;
  }
  EXPECT_EQ(processes[1], "tpusim:0 (" + cfg.chip.name + ")");
  EXPECT_EQ(processes[2], "tpusim:1 (" + cfg.chip.name + ")");
}

// A stream that only counts what it is given (the trace goes nowhere, so only the writer's own memory counts).
class CountingBuf : public std::streambuf {
 public:
  size_t bytes = 0;

 protected:
  int_type overflow(int_type c) override {
    if (c != traits_type::eof()) ++bytes;
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char*, std::streamsize n) override {
    bytes += static_cast<size_t>(n);
    return n;
  }
};

// `tpusim profile --trace` writes its file with write_profile_trace: each event is formatted alone and goes to the
// stream, so the heap it needs beyond the run's events stays the same however long the trace (before, the whole
// trace existed as a string, then as a JSON tree, then as a string again: several times the file's size). 4,000
// events make about 800 KB of trace; the writer may hold a few KB at a time (one event's JSON object and text, the
// node table of a two-node program). The text is the same profile_trace_json gives, and valid JSON.
TEST(Profile, TraceIsWrittenEventByEvent) {
  const isa::Program prog = two_nodes();
  sim::RunResult run;
  constexpr uint64_t kEvents = 4000;
  for (uint64_t i = 0; i < kEvents; ++i)
    run.trace.push_back({i % 2 ? Unit::DmaIn : Unit::Mxu, 4 * i, 3, i % 2 ? 1u : 2u,
                         i % 2 ? "dma.ld r1, r1, r2, r3, r4, r5, signal=s1" : "mxu.lw r1, r2, r3, r4, bf16, wait=s1",
                         "busy"});
  run.stats.cycles = 4 * kEvents;
  const sim::ChipConfig cfg = config();
  const Profile p = make_profile(prog, run, cfg);

  CountingBuf sink;
  std::ostream os(&sink);
  const size_t before = heap_live;
  heap_peak = before;
  write_profile_trace(os, prog, run, cfg, p);
  const size_t extra = heap_peak - before;
  EXPECT_GT(sink.bytes, 150 * kEvents);
  EXPECT_LT(extra, 64u << 10) << "the writer held " << extra << " bytes for a trace of " << sink.bytes;

  std::ostringstream text;
  write_profile_trace(text, prog, run, cfg, p);
  EXPECT_EQ(text.str().size(), sink.bytes);
  EXPECT_EQ(text.str(), profile_trace_json(prog, run, cfg, p));
  const auto j = nlohmann::json::parse(text.str());
  uint64_t slices = 0, named = 0;
  for (const auto& e : j.at("traceEvents"))
    if (e.at("ph") == "X" && e.at("args").contains("pc")) {
      ++slices;
      named += e.at("args").value("node", "") == "a";
    }
  EXPECT_EQ(slices, kEvents);
  EXPECT_EQ(named, kEvents);  // pcs 1 and 2 are in node a
}

}  // namespace
}  // namespace tpusim::runtime
