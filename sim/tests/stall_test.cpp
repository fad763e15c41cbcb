// Stall accounting: every unit's cycles split into categories that add up to the run, and TPUv1's counters
// (Tpuv1Counters in chip.h), each checked on a small program whose answer is worked out in the comments.
// Waits on a DMA or the vector unit are checked against the end of that unit's busy slice in the trace, so that
// the DMA's and the vector unit's own timing rules (their tests) can change without touching these.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI32 = 1;
const int kUnits[] = {0, 1, 2, 3, 4};

RunResult run(Chip& chip, const isa::Program& p) {
  RunOptions o;
  o.trace = true;
  return chip.run(p, o);
}

// The end (run cycle) of unit u's only busy slice.
uint64_t busy_end(const RunResult& r, isa::Unit u) {
  uint64_t end = 0;
  int n = 0;
  for (const TraceEvent& e : r.trace)
    if (e.unit == u && e.kind == "busy") end = e.start + e.duration, ++n;
  EXPECT_EQ(n, 1);
  return end;
}

const StallBreakdown& stalls(const RunResult& r, isa::Unit u) { return r.stats.units[static_cast<int>(u)].stalls; }

void expect_adds_up(const RunResult& r) {
  for (int u : kUnits) {
    const StallBreakdown& b = r.stats.units[u].stalls;
    EXPECT_EQ(b.total(), r.stats.cycles) << isa::unit_name(static_cast<isa::Unit>(u));
    uint64_t by = 0;
    for (uint64_t c : b.wait_sem_by) by += c;
    EXPECT_EQ(by, b.wait_sem) << isa::unit_name(static_cast<isa::Unit>(u));
  }
  const Tpuv1Counters& t = r.stats.tpuv1;
  EXPECT_NEAR(t.array_active + t.weight_stall + t.weight_shift + t.non_matrix, 1.0, 1e-12);
  EXPECT_LE(t.raw_stall + t.input_stall, t.non_matrix + 1e-12);
  EXPECT_NEAR(t.useful_macs + t.unused_macs, t.array_active, 1e-12);
}

// dma.ld (signal s1), then vpu.add waiting for s1 (stats_test.cpp's program).
TEST(Stalls, DmaThenVectorUnit) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);
  b.op(Op::VADD, {0, 0, 0, 3, kI32}).wait(1);
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const uint64_t cycles = r.stats.cycles, dma_end = busy_end(r, isa::Unit::DmaIn);
  // Core: 6 instructions and the implicit halt, 1 cycle each; the halt drains from cycle 6 to the vpu.add's end.
  const StallBreakdown& core = stalls(r, isa::Unit::Core);
  EXPECT_EQ(core.busy, 7u);
  EXPECT_EQ(core.wait_drain, cycles - 7);
  EXPECT_EQ(core.wait_queue, 0u);
  // dmain: idle until its dma.ld starts at cycle 5 (dispatched at 4), busy to dma_end, then idle after.
  const StallBreakdown& dma = stalls(r, isa::Unit::DmaIn);
  EXPECT_EQ(dma.idle, 5u);
  EXPECT_EQ(dma.busy, dma_end - 5);
  EXPECT_EQ(dma.idle_after, cycles - dma_end);
  // vpu: idle [0, 6), waits for s1 [6, dma_end), busy 3 cycles (4 elements on 8 lanes, latency 2), then 1 cycle
  // (the halt's) after.
  const StallBreakdown& vpu = stalls(r, isa::Unit::Vpu);
  EXPECT_EQ(vpu.idle, 6u);
  EXPECT_EQ(vpu.wait_sem, dma_end - 6);
  EXPECT_EQ(vpu.wait_sem_by[1], dma_end - 6);
  EXPECT_EQ(vpu.busy, 3u);
  EXPECT_EQ(vpu.idle_after, cycles - dma_end - 3);
  // Units with nothing to do are idle after their (no) work for the whole run.
  EXPECT_EQ(stalls(r, isa::Unit::Mxu).idle_after, cycles);
  EXPECT_EQ(stalls(r, isa::Unit::DmaOut).idle_after, cycles);
  EXPECT_EQ(stalls(r, isa::Unit::Mxu).wait_memory, 0u);  // nothing feeds memory waits to the matrix unit
}

// A full queue stalls the core: 6 dma.ld on a queue of 4 entries.
TEST(Stalls, FullQueueStallsTheCore) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 4).li(4, 64);
  for (int i = 0; i < 6; ++i) b.op(Op::DMALD, {0, 0, 3, 4, 4, 4});
  RunResult r = chip.run(b.build());
  expect_adds_up(r);
  const UnitStats& core = r.stats.units[static_cast<int>(isa::Unit::Core)];
  EXPECT_GT(core.stalls.wait_queue, 0u);
  EXPECT_EQ(core.stalls.wait_queue, core.wait_queue_cycles);
  EXPECT_EQ(core.stalls.busy, 9u);  // 8 instructions and the implicit halt
  const StallBreakdown& dma = stalls(r, isa::Unit::DmaIn);
  EXPECT_EQ(dma.idle, 3u);  // the first dma.ld is dispatched at 2 and starts at 3; the rest follow back to back
  EXPECT_EQ(dma.busy, r.stats.units[static_cast<int>(isa::Unit::DmaIn)].busy_cycles);
}

// 4x4 array: mxu.lw (r1 = 4: k = n = stride = 4) then mxu.mm of 8 rows.
//   lw dispatched at 3: shifts [4, 8); mm dispatched at 4, front-end at 5, swap at 8, streams [8, 16);
//   results at 16 + 4 + 4 - 2 = 22; the halt (t = 5) drains to 22 and takes cycle 22: 23 cycles.
// TPUv1: array active 8, weight shift 4 ([4, 8), the mm's front-end waiting [5, 8) included), weight stall 0,
// non-matrix 11 (idle [0, 4), the skew and drain [16, 22), the halt's cycle).
TEST(Stalls, Tpuv1ArrayActiveAndWeightShift) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8);
  b.op(Op::MXULW, {0, 1, 1, 1, 0}).op(Op::MXUMM, {2, 3, 0, 1, 0});
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  ASSERT_EQ(r.stats.cycles, 23u);
  const StallBreakdown& mxu = stalls(r, isa::Unit::Mxu);
  EXPECT_EQ(mxu.idle, 4u);
  EXPECT_EQ(mxu.weight_load, 4u);
  EXPECT_EQ(mxu.busy, 8u);
  EXPECT_EQ(mxu.idle_after, 7u);
  const Tpuv1Counters& t = r.stats.tpuv1;
  EXPECT_DOUBLE_EQ(t.array_active, 8.0 / 23);
  EXPECT_DOUBLE_EQ(t.weight_shift, 4.0 / 23);
  EXPECT_DOUBLE_EQ(t.weight_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.non_matrix, 11.0 / 23);
  EXPECT_DOUBLE_EQ(t.raw_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.input_stall, 0.0);
  // 8 rows x 4 x 4 MACs of 16 per cycle over 23 cycles; all of the array's columns and rows are used.
  EXPECT_DOUBLE_EQ(t.useful_macs, 8.0 * 16 / (16 * 23));
  EXPECT_DOUBLE_EQ(t.unused_macs, 0.0);
}

// A partial tile leaves MACs unused: k = 2, n = 4 uses half the 4x4 array while it streams.
TEST(Stalls, Tpuv1UnusedMacs) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8).li(4, 2);
  b.op(Op::MXULW, {0, 4, 1, 1, 0}).op(Op::MXUMM, {2, 3, 0, 4, 0});
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const Tpuv1Counters& t = r.stats.tpuv1;
  const double c = static_cast<double>(r.stats.cycles);
  EXPECT_DOUBLE_EQ(t.array_active, 8 / c);
  EXPECT_DOUBLE_EQ(t.useful_macs, 4 / c);  // 8 rows x 2 x 4 MACs = 4 cycles' worth of 16
  EXPECT_DOUBLE_EQ(t.unused_macs, 4 / c);
}

// Weight stall: the weights' dma.ld signals s2 and mxu.lw waits for it.
//   dma.ld dispatched at 4; lw dispatched at 5, its front-end waits for s2 [6, dma_end) with the array idle:
//   weight stall; then shifts [dma_end, dma_end + 4) and the mm streams 8 rows.
TEST(Stalls, Tpuv1WeightStall) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8).li(4, 16);
  b.op(Op::DMALD, {0, 0, 1, 1, 1, 1}).signal(2);
  b.op(Op::MXULW, {0, 1, 1, 1, 0}).wait(2);
  b.op(Op::MXUMM, {2, 3, 0, 1, 0});
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const uint64_t dma_end = busy_end(r, isa::Unit::DmaIn);
  const double c = static_cast<double>(r.stats.cycles);
  const Tpuv1Counters& t = r.stats.tpuv1;
  EXPECT_DOUBLE_EQ(t.weight_stall, (dma_end - 6) / c);
  EXPECT_DOUBLE_EQ(t.weight_shift, 4 / c);
  EXPECT_DOUBLE_EQ(t.array_active, 8 / c);
  EXPECT_DOUBLE_EQ(t.input_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.raw_stall, 0.0);
  EXPECT_EQ(stalls(r, isa::Unit::Mxu).wait_sem_by[2], dma_end - 6);
  EXPECT_EQ(r.stats.cycles, dma_end + 4 + 8 + 6 + 1);  // shift, stream, skew and drain (R + C - 2), halt
}

// Input stall: the inputs' dma.ld signals s1, mxu.mm waits for it; the weights (lw, no wait) are in first.
//   dma.ld dispatched at 2; lw dispatched at 3 shifts [4, 8); mm dispatched at 4, front-end waits for s1
//   [5, dma_end): [5, 8) is weight shift, [8, dma_end) input stall (s1 is signalled by dmain only).
TEST(Stalls, Tpuv1InputStall) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64);
  b.op(Op::DMALD, {2, 0, 1, 1, 1, 1}).signal(1);
  b.op(Op::MXULW, {0, 1, 1, 1, 0});
  b.op(Op::MXUMM, {2, 1, 0, 1, 0}).wait(1);
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const uint64_t dma_end = busy_end(r, isa::Unit::DmaIn);
  ASSERT_GT(dma_end, 8u);
  const double c = static_cast<double>(r.stats.cycles);
  const Tpuv1Counters& t = r.stats.tpuv1;
  EXPECT_DOUBLE_EQ(t.weight_shift, 4 / c);
  EXPECT_DOUBLE_EQ(t.input_stall, (dma_end - 8) / c);
  EXPECT_DOUBLE_EQ(t.raw_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.weight_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.array_active, 4 / c);
  // The unit view: the same wait is weight load while the tile shifts, then a wait on s1.
  const StallBreakdown& mxu = stalls(r, isa::Unit::Mxu);
  EXPECT_EQ(mxu.weight_load, 4u);
  EXPECT_EQ(mxu.wait_sem_by[1], dma_end - 8);
}

// RAW stall: mxu.mm waits for s3, which the vector unit signals (not a DMA: a dependency on other work).
//   vpu.add of 64 elements (8 lanes: 8 passes + latency 2 = 10 cycles) dispatched at 3, busy [4, vpu_end);
//   lw dispatched at 4 shifts [5, 9); mm dispatched at 5 waits for s3 [6, vpu_end): [6, 9) weight shift,
//   [9, vpu_end) RAW stall.
TEST(Stalls, Tpuv1RawStall) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 64);
  b.op(Op::VADD, {0, 0, 0, 3, kI32}).signal(3);
  b.op(Op::MXULW, {0, 1, 1, 1, 0});
  b.op(Op::MXUMM, {2, 1, 0, 1, 0}).wait(3);
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const uint64_t vpu_end = busy_end(r, isa::Unit::Vpu);
  ASSERT_GT(vpu_end, 9u);
  const double c = static_cast<double>(r.stats.cycles);
  const Tpuv1Counters& t = r.stats.tpuv1;
  EXPECT_DOUBLE_EQ(t.weight_shift, 4 / c);
  EXPECT_DOUBLE_EQ(t.raw_stall, (vpu_end - 9) / c);
  EXPECT_DOUBLE_EQ(t.input_stall, 0.0);
  EXPECT_DOUBLE_EQ(t.weight_stall, 0.0);
}

// Double buffering: while the array streams, the front-end's semaphore wait for the next tile is not a stall.
// Two folds, each: dma.ld of the weights (signal s2), lw waiting for s2, mm of 32 rows. The second tile's
// DMA and shift overlap the first mm's stream, so the weight stall after the first fold is only the part of the
// second dma.ld that outlasts the first stream. Every cycle is still booked once.
TEST(Stalls, OverlapIsCountedOnce) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 32);
  for (int i = 0; i < 2; ++i) {
    b.op(Op::DMALD, {0, 0, 1, 1, 1, 1}).signal(2);
    b.op(Op::MXULW, {0, 1, 1, 1, 0}).wait(2);
    b.op(Op::MXUMM, {2, 3, 0, 1, 0});
  }
  RunResult r = run(chip, b.build());
  expect_adds_up(r);
  const StallBreakdown& mxu = stalls(r, isa::Unit::Mxu);
  EXPECT_EQ(mxu.busy, 64u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Mxu)].busy_cycles, 64u);
  // The second lw's wait on s2 ends long before the first mm's 32 rows have streamed.
  EXPECT_LT(mxu.wait_sem, r.stats.units[static_cast<int>(isa::Unit::Mxu)].wait_sem_cycles);
  EXPECT_DOUBLE_EQ(r.stats.tpuv1.array_active, 64.0 / static_cast<double>(r.stats.cycles));
}

TEST(Stalls, InTheStatsJson) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 4).li(4, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 4, 4}).signal(5);
  b.op(Op::VADD, {0, 0, 0, 3, kI32}).wait(5);
  RunResult r = chip.run(b.build());
  auto j = nlohmann::json::parse(r.stats.to_json(chip.config()));
  for (const char* u : {"core", "dmain", "dmaout", "mxu", "vpu"}) {
    const auto& s = j["units"][u]["stalls"];
    uint64_t sum = 0;
    for (const char* k :
         {"busy", "wait_memory", "weight_load", "wait_sem", "wait_queue", "wait_drain", "idle", "idle_after"})
      sum += s[k].get<uint64_t>();
    EXPECT_EQ(sum, j["cycles"].get<uint64_t>()) << u;
  }
  EXPECT_EQ(j["units"]["vpu"]["stalls"]["wait_sem_by"]["s5"], j["units"]["vpu"]["stalls"]["wait_sem"]);
  for (const char* k : {"array_active", "useful_macs", "unused_macs", "weight_stall", "weight_shift", "non_matrix",
                        "raw_stall", "input_stall"})
    EXPECT_TRUE(j["tpuv1_counters"].contains(k)) << k;
  EXPECT_EQ(j["tpuv1_counters"]["non_matrix"], 1.0);
}

}  // namespace
}  // namespace tpusim::sim::test
