// Whole chips: several cores sharing HBM, barriers and signals between cores, several matrix units per core, the
// int8 rate, the shared memory level and the launch overhead. Exact cycle counts, each with its arithmetic, on
// small_config() (test_util.h: 4x4 arrays, dma.latency 10, HBM 32 bytes per cycle over 4 channels of 64-byte
// chunks, queues of 4) with the chip's shape set per test.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = 0, kI32 = 1;
const UnitStats& unit(const RunStats& s, isa::Unit u) { return s.units[static_cast<int>(u)]; }

uint64_t stall_sum(const StallBreakdown& b) { return b.total(); }

TEST(WholeChip, TwoCoresContendForHbm) {
  Chip chip(small_config({"chip.cores=2"}));
  ProgramBuilder b;
  b.op(Op::COREID, {7});           // 0
  b.op(Op::MULI, {8, 7, 256});     // 1: haddr = 256 * core
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);  // 2-5: 4 rows of 64 bytes = 256 bytes = 8 cycles of HBM
  b.op(Op::DMALD, {0, 8, 3, 4, 5, 6});       // dispatched 6, starts 7, data from 17
  RunResult r = chip.run(b.cores(2).build());
  // Both transfers want every channel from cycle 17: the first booked gets [17, 25), the second [25, 33);
  // the later core halts at cycle 33: 34 cycles. Alone (or with HBM per core) each would take 7 + 10 + 8 + 1 = 26.
  EXPECT_EQ(r.stats.cycles, 34u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 512u);
  EXPECT_EQ(unit(r.stats, isa::Unit::DmaIn).instructions, 2u);
  EXPECT_EQ(unit(r.stats, isa::Unit::DmaIn).busy_cycles, 18u + 26u);  // [7, 25) and [7, 33)
  // Per kind, the stalls of the two cores' queues add up to 2 x cycles.
  EXPECT_EQ(stall_sum(unit(r.stats, isa::Unit::DmaIn).stalls), 2 * r.stats.cycles);
  EXPECT_EQ(stall_sum(unit(r.stats, isa::Unit::Core).stalls), 2 * r.stats.cycles);
  ASSERT_EQ(r.stats.instances.size(), 2u * 5);
  EXPECT_EQ(r.stats.instances[5].name(), "core1.core");

  // One core alone: 26 cycles.
  EXPECT_EQ(chip.run(b.cores(1).build()).stats.cycles, 26u);
}

// Both cores load the same 256 bytes (4 rows of 64 at HBM 0), with `mcast` when asked (operand 7 of dma.ld).
ProgramBuilder same_load(bool mcast, int64_t haddr_step = 0) {
  ProgramBuilder b;
  b.op(Op::COREID, {7});                        // 0
  b.op(Op::MULI, {8, 7, haddr_step});           // 1: haddr
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);     // 2-5
  b.op(Op::DMALD, {0, 8, 3, 4, 5, 6, 0, mcast ? 1 : 0});  // dispatched 6, starts 7, data from 17
  return b;
}

TEST(WholeChip, MulticastPairReadsOnce) {
  Chip chip(small_config({"chip.cores=2", "chip.cluster=2"}));
  // Without mcast the two reads take every channel one after the other, [17, 25) and [25, 33): 34 cycles (as
  // TwoCoresContendForHbm). With it the first to start books [17, 25) and the second's data comes with it:
  // both complete at 25, halt at 25: 26 cycles, as one core alone; HBM reads the 256 bytes once.
  RunResult plain = chip.run(same_load(false).cores(2).build());
  EXPECT_EQ(plain.stats.cycles, 34u);
  EXPECT_EQ(plain.stats.hbm_bytes_read, 512u);
  RunResult mc = chip.run(same_load(true).cores(2).build());
  EXPECT_EQ(mc.stats.cycles, 26u);
  EXPECT_EQ(mc.stats.hbm_bytes_read, 256u);
  EXPECT_EQ(unit(mc.stats, isa::Unit::DmaIn).busy_cycles, 18u + 18u);  // each [7, 25)
}

TEST(WholeChip, MulticastDeliversToBothCores) {
  Chip chip(small_config({"chip.cores=2", "chip.cluster=2"}));
  std::vector<uint8_t> data(256);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  chip.write_hbm(0, data.data(), data.size());
  ProgramBuilder b = same_load(true);
  b.op(Op::MULI, {9, 7, 256}).li(10, 1024).op(Op::ADD, {9, 9, 10});  // core c stores to 1024 + 256 c
  b.op(Op::DMAST, {9, 0, 3, 4, 5, 6, 0});
  chip.run(b.cores(2).build());
  for (uint64_t c = 0; c < 2; ++c) {
    std::vector<uint8_t> back(256);
    chip.read_hbm(1024 + 256 * c, back.data(), back.size());
    EXPECT_EQ(back, data) << "core " << c;
  }
}

// The error a run of `p` on `chip` stops with ("" if none).
std::string run_error(Chip& chip, const isa::Program& p) {
  try {
    chip.run(p);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(WholeChip, MulticastErrorsNameTheLoads) {
  Chip chip(small_config({"chip.cores=3", "chip.cluster=2"}));
  Chip plain(small_config({"chip.cores=2"}));  // (every chip of a process is made before the first run)
  // The pair's loads differ (core 1 reads 256 bytes further on).
  EXPECT_THAT(run_error(chip, same_load(true, 256).cores(2).build()),
              testing::HasSubstr("mcast: this load (HBM 0x100, 4 rows of 64 bytes, stride 64) is not its pair's, "
                                 "core 0's pc 6"));
  // Core 2 of three has no pair.
  EXPECT_THAT(run_error(chip, same_load(true).cores(3).build()),
              testing::HasSubstr("mcast: core 2 has no pair: the program's .cores is 3"));
  // Only core 0 loads with mcast; core 1 skips it (bne on core.id) and ends.
  ProgramBuilder b;
  b.op(Op::COREID, {7});                               // 0
  b.op(Op::BNE, {7, 0, 7});                            // 1: core 1 jumps past the load
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);            // 2-5
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6, 0, 1});           // 6
  EXPECT_THAT(run_error(chip, b.cores(2).build()),
              testing::HasSubstr("pc 6 (dma.ld r0, r0, r3, r4, r5, r6, mcast): mcast: the pair's other core (1) "
                                 "ended the program without a matching multicast load"));
  // A chip without clusters (chip.cluster = 1) has no multicast.
  EXPECT_THAT(run_error(plain, same_load(true).cores(2).build()),
              testing::HasSubstr("pc 6 (dma.ld r0, r8, r3, r4, r5, r6, mcast): mcast: the chip has no clusters of "
                                 "cores to multicast in (chip.cluster = 1)"));
}

// Core 0 reaches the barrier at once, core 1 after a loop; both go on sync_latency cycles after the last arrives.
ProgramBuilder barrier_program() {
  ProgramBuilder b;
  b.op(Op::COREID, {1});           // 0
  b.op(Op::BEQ, {1, 0, 5});        // 1: core 0 jumps to the barrier
  b.li(2, 10);                     // 2 (core 1)
  b.op(Op::ADDI, {2, 2, -1});      // 3..: 10 x (addi, bne) = cycles 3-22
  b.op(Op::BNE, {2, 0, 3});
  b.op(Op::BARRIER);               // pc 5: core 0 arrives at 2, core 1 at 23
  return b;
}

TEST(WholeChip, BarrierReleasesEveryCoreAfterTheLast) {
  Chip chip(small_config({"chip.cores=2", "chip.sync_latency=5"}));
  RunResult r = chip.run(barrier_program().cores(2).build());
  // The last core arrives at 23; release at 23 + 5; the barrier's cycle ends at 29 and the halt takes cycle 29:
  // 30 cycles, both cores ending together.
  EXPECT_EQ(r.stats.cycles, 30u);
  // Core 0 waited 28 - 2 = 26 cycles, core 1 the latency, 5.
  EXPECT_EQ(unit(r.stats, isa::Unit::Core).stalls.wait_barrier, 26u + 5u);
  EXPECT_EQ(r.stats.instances[0].stats.stalls.wait_barrier, 26u);
  EXPECT_EQ(stall_sum(unit(r.stats, isa::Unit::Core).stalls), 2 * r.stats.cycles);
}

TEST(WholeChip, BarrierThatACoreNeverReachesIsADeadlockNamingTheCores) {
  Chip chip(small_config({"chip.cores=2"}));
  ProgramBuilder b;
  b.op(Op::COREID, {1});
  b.op(Op::BEQ, {1, 0, 3});        // core 0 jumps past the barrier to the end
  b.op(Op::BARRIER);               // pc 2: core 1 only
  try {
    chip.run(b.cores(2).build());
    FAIL() << "expected a deadlock";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("deadlock"), std::string::npos) << m;
    EXPECT_NE(m.find("core 1 waits at a barrier at pc 2 (barrier) (1 of 2 cores arrived)"), std::string::npos) << m;
    EXPECT_NE(m.find("ended the program: core 0"), std::string::npos) << m;
  }
  // The chip runs again afterwards.
  EXPECT_EQ(chip.run(ProgramBuilder().build()).stats.cycles, 1u);
}

TEST(WholeChip, SemSignalReachesAnotherCoreAfterTheLatency) {
  Chip chip(small_config({"chip.cores=2", "chip.sync_latency=5"}));
  ProgramBuilder b;
  b.op(Op::COREID, {1});           // 0
  b.op(Op::BNE, {1, 0, 5});        // 1: core 1 to pc 5
  b.li(2, 1);                      // 2 (core 0)
  b.op(Op::SEMSIGNAL, {2, 1});     // 3: core 0 signals s1 of core 1 at 3 + 1 + 5 = 9
  b.op(Op::JMP, {6});              // 4
  b.op(Op::VSYNC).wait(1);         // 5 (core 1): dispatched 2, starts 3, waits for s1 until 9
  RunResult r = chip.run(b.cores(2).build());
  // Core 1: the vpu.sync completes at 9, its halt drains then takes cycle 9: 10 cycles. Core 0 ends at 6.
  EXPECT_EQ(r.stats.cycles, 10u);
  EXPECT_EQ(unit(r.stats, isa::Unit::Vpu).wait_sem_cycles, 6u);  // [3, 9)

  ProgramBuilder bad;
  bad.li(2, 2).op(Op::SEMSIGNAL, {2, 1});
  EXPECT_THROW(
      {
        try {
          chip.run(bad.cores(2).build());
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("core 2 does not run this program (cores 0..1)"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

// r1 = 4 (k, n, stride of i8 rows of 4), r2 = 64 (inputs), r3 = m = 8, r4 = 32 (MXU 1's weights).
ProgramBuilder two_mxu_program() {
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8).li(4, 32);   // 0-3
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});        // 4: mxu 0 loads [5, 9)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});        // 5: mxu 0 streams [9, 17), results at 17 + 4 + 4 - 2 = 23
  b.op(Op::MXULW, {4, 1, 1, 1, kI8}).with("mxu", 1);  // 6: mxu 1 loads [7, 11)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8}).with("mxu", 1);  // 7: mxu 1 streams [11, 19), results at 25
  return b;
}

TEST(WholeChip, TwoMatrixUnitsOfACoreRunInParallel) {
  Chip chip(small_config({"core.mxus=2"}));
  RunResult r = chip.run(two_mxu_program().build());
  // MXU 1's results land at 25, the halt takes cycle 25: 26 cycles. On one matrix unit the second fold would
  // wait for the first: its load [9, 13), stream [17, 25), results at 31, 32 cycles (checked below).
  EXPECT_EQ(r.stats.cycles, 26u);
  EXPECT_EQ(unit(r.stats, isa::Unit::Mxu).busy_cycles, 16u);
  EXPECT_EQ(r.stats.instances[3].name(), "core0.mxu0");
  EXPECT_EQ(r.stats.instances[3].stats.busy_cycles, 8u);
  EXPECT_EQ(r.stats.instances[5].name(), "core0.mxu1");
  EXPECT_EQ(r.stats.instances[5].stats.busy_cycles, 8u);
  EXPECT_DOUBLE_EQ(r.stats.mxu_mac_utilization, 2 * 8 * 16.0 / (16.0 * 26 * 2));
  EXPECT_EQ(stall_sum(unit(r.stats, isa::Unit::Mxu).stalls), 2 * r.stats.cycles);

  // The same program with mxu=0 throughout, on the same chip.
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 8).li(4, 32);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  b.op(Op::MXULW, {4, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 32u);
}

TEST(WholeChip, EachMatrixUnitWritesItsOwnAccumulatorRows) {
  Chip chip(small_config({"core.mxus=2"}));
  // Weights: ones for mxu 0 at VMEM 0, twos for mxu 1 at 32; inputs ones at 64 (8 rows of 4 i8).
  std::vector<int8_t> ones(16, 1), twos(16, 2), in(32, 1);
  chip.write_vmem(0, ones.data(), 16);
  chip.write_vmem(32, twos.data(), 16);
  chip.write_vmem(64, in.data(), 32);
  ProgramBuilder b = two_mxu_program();
  b.op(Op::MXUSYNC).signal(1);
  b.op(Op::MXUSYNC).with("mxu", 1).signal(2);
  // Drain accumulator rows [0, 8) (mxu 0) and [64, 72) (mxu 1's first rows: acc_rows = 64) as i32.
  b.li(5, 512).li(6, 0).li(7, 16).li(8, 1024).li(9, 64);
  b.op(Op::VACC, {5, 6, 3, 1, 7, 0, 0, kI32, kI32}).wait(1);
  b.op(Op::VACC, {8, 9, 3, 1, 7, 0, 0, kI32, kI32}).wait(2);
  chip.run(b.build());
  std::vector<int32_t> a(32), c(32);
  chip.read_vmem(512, a.data(), 128);
  chip.read_vmem(1024, c.data(), 128);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(a[i], 4) << i;  // a row of four 1s times a column of four 1s
    EXPECT_EQ(c[i], 8) << i;  // ... times a column of four 2s
  }
}

TEST(WholeChip, MatrixUnitOrCoreTheChipLacksIsAnError) {
  Chip chip(small_config({"core.mxus=2", "chip.cores=2"}));
  ProgramBuilder b;
  b.op(Op::MXUSYNC).with("mxu", 2);
  try {
    chip.run(b.build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pc 0 (mxu.sync mxu=2): matrix unit 2 does not exist: the core has 2"),
              std::string::npos)
        << e.what();
  }
  try {
    chip.run(ProgramBuilder().cores(3).build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "the program runs on 3 cores (.cores), the chip has 2 (chip.cores)");
  }
}

TEST(WholeChip, Int8StreamsAtTheI8Rate) {
  // The isolated fold of Timing.IsolatedFoldIsScaleSims2RPlusCPlusMMinus2 (23 cycles with m = 8): at two rows
  // per cycle the stream takes 4 cycles, results at 8 + 4 + 6 = 18, 19 cycles; bf16 is unchanged.
  Chip chip(small_config({"mxu.i8_rate=2"}));
  for (auto [dtype, cycles, busy] : {std::tuple{kI8, 19u, 4u}, std::tuple{int64_t(2), 23u, 8u}}) {
    ProgramBuilder b;
    b.li(1, 4).li(2, 64).li(3, 8);
    b.op(Op::MXULW, {0, 1, 1, 1, dtype}).op(Op::MXUMM, {2, 3, 0, 1, dtype});
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, cycles) << dtype;
    EXPECT_EQ(unit(r.stats, isa::Unit::Mxu).busy_cycles, busy) << dtype;
    // 8 x 4 x 4 MACs; at two per slot for i8 they fill 64 or 128 of 16 x cycles slots.
    EXPECT_DOUBLE_EQ(r.stats.mxu_mac_utilization, (dtype == kI8 ? 64.0 : 128.0) / (16.0 * cycles)) << dtype;
  }
}

// mxu.efficiency: a stream of m rows takes m / efficiency cycles, the fraction carried to the next stream. The
// isolated fold of Timing.IsolatedFoldIsScaleSims2RPlusCPlusMMinus2 (m = 8: the stream [8, 16), results at 16 + 6,
// 23 cycles) at 0.8 streams 10 cycles, [8, 18): 25 cycles; at 0.5, 16: 31. Two back-to-back streams of m = 3 at
// 0.8: 3.75 cycles -> 3 (0.75 carried), then 3.75 + 0.75 = 4.5 -> 4 (0.5 carried): 7 busy cycles where 1 gives 6,
// and the second's results at 8 + 7 + 6 = 21, 22 cycles (21 at 1); the MACs are the same.
TEST(WholeChip, MatrixUnitStreamsAtItsEfficiency) {
  struct Case {
    int chip, mms, m;
    uint64_t cycles, busy;
  };
  // (every Chip is made before the first run: SystemC elaborates once per process)
  Chip at1(small_config()), at08(small_config({"mxu.efficiency=0.8"})), at05(small_config({"mxu.efficiency=0.5"}));
  Chip* chips[] = {&at1, &at08, &at05};
  const char* names[] = {"1", "0.8", "0.5"};
  for (const Case& k : {Case{0, 1, 8, 23, 8}, Case{1, 1, 8, 25, 10}, Case{2, 1, 8, 31, 16}, Case{0, 2, 3, 21, 6},
                        Case{1, 2, 3, 22, 7}}) {
    ProgramBuilder b;
    b.li(1, 4).li(2, 64).li(3, k.m);
    b.op(Op::MXULW, {0, 1, 1, 1, kI8});
    for (int i = 0; i < k.mms; ++i) b.op(Op::MXUMM, {2, 3, 0, 1, kI8});
    const std::string what = std::string("efficiency ") + names[k.chip] + ", " + std::to_string(k.mms) +
                             " x m=" + std::to_string(k.m);
    RunResult r = chips[k.chip]->run(b.build());
    EXPECT_EQ(r.stats.cycles, k.cycles) << what;
    EXPECT_EQ(unit(r.stats, isa::Unit::Mxu).busy_cycles, k.busy) << what;
    EXPECT_EQ(r.stats.mxu_macs, uint64_t(k.mms) * k.m * 4 * 4) << what;
    // A second run of the same chip starts with nothing carried (the same cycles again).
    EXPECT_EQ(chips[k.chip]->run(b.build()).stats.cycles, k.cycles) << what;
  }
}

// h200-like's matrix unit (an SM's tensor cores as one unit of 16 x 128, mxu.fp8_rate = 2: Hopper's fp8 at twice
// bf16) on one core, no launch: one isolated fold of m = 64 input rows. 4 li (cycles 0-3), the lw dispatched at 4
// loads the tile in [5, 21) (R = 16 rows, one per cycle); the mm swaps it in at 21 and streams m rows: bf16 one per
// cycle, [21, 85); f8e4m3 two per cycle, ceil(64 / 2) = 32 cycles, [21, 53). Results R + C - 2 = 142 cycles after
// the stream: 227 and 195; halt one cycle later: 228 and 196 cycles. The matrix cycles (busy, streaming) halve,
// 64 -> 32, and everything else (load, skew, drain) is the same. m = 7 (odd): 7 and ceil(7 / 2) = 4 stream
// cycles, 171 and 168 in all.
TEST(WholeChip, Fp8StreamsAtTwiceTheBf16RateOnH200Like) {
  // (at the array's full rate: mxu.efficiency is WholeChip.MatrixUnitStreamsAtItsEfficiency's)
  Chip chip(load_config("h200-like", {"chip.cores=1", "chip.launch_cycles=0", "mxu.efficiency=1"}));
  const ChipConfig& c = chip.config();
  ASSERT_EQ(c.mxu.fp8_rate, 2);
  ASSERT_EQ(c.mxu.rows, 16);  // the arithmetic above is for this shape
  ASSERT_EQ(c.mxu.cols, 128);
  ASSERT_EQ(c.core.mxus, 1);
  const int64_t bf16 = dt(isa::DType::BF16), f8 = dt(isa::DType::F8E4M3);
  struct Case {
    int64_t dtype, m;
    uint64_t cycles, busy;
  };
  for (const Case& k : {Case{bf16, 64, 228, 64}, Case{f8, 64, 196, 32}, Case{bf16, 7, 171, 7}, Case{f8, 7, 168, 4}}) {
    ProgramBuilder b;
    b.li(1, 16).li(2, 4096).li(3, k.m).li(4, 128);
    b.op(Op::MXULW, {0, 1, 4, 4, k.dtype}).op(Op::MXUMM, {2, 3, 0, 4, k.dtype});
    for (bool functional : {true, false}) {
      RunOptions o;
      o.functional = functional;
      RunResult r = chip.run(b.build(), o);
      EXPECT_EQ(r.stats.cycles, k.cycles) << k.dtype << " m=" << k.m;
      EXPECT_EQ(unit(r.stats, isa::Unit::Mxu).busy_cycles, k.busy) << k.dtype << " m=" << k.m;
      // m x 16 x 128 MACs; an f8e4m3 one takes half a slot; one unit of 2048 PEs over the run.
      const double slots = static_cast<double>(k.m * 16 * 128) / (k.dtype == f8 ? 2.0 : 1.0);
      EXPECT_DOUBLE_EQ(r.stats.mxu_mac_utilization, slots / (2048.0 * static_cast<double>(k.cycles)));
    }
  }
}

// 32 GB/s at 500 MHz over 4 banks = 64 bytes per cycle; latency 4.
std::vector<std::string> shared_memory_config() {
  return {"shared.size_kib=64", "shared.bandwidth_gbs=32", "shared.latency=4", "shared.banks=4",
          "shared.interleave_bytes=64"};
}

// 256 bytes stored into the shared memory at 1024 and loaded back into VMEM at 1024, the shared memory named by the
// `shared` flag or by an address in its window (isa::kSharedWindow + 1024): the same data, bytes and timing. With
// the flag: the store starts at 6, its data [10, 14), complete at 14 = 6 + 4 + 256 / 64; the load waits until 14,
// completes at 14 + 4 + 4 = 22; halt at 23. Through the window one more li (the window's address) makes it 24.
TEST(WholeChip, SharedMemoryIsReachedByDma) {
  Chip chip(small_config(shared_memory_config()));
  for (const bool window : {false, true}) {
    std::vector<uint8_t> data(256);
    for (int i = 0; i < 256; ++i) data[i] = static_cast<uint8_t>(window ? 255 - i : i);
    chip.write_vmem(0, data.data(), 256);
    ProgramBuilder b;
    b.li(3, 4).li(4, 64).li(5, 64).li(6, 64).li(7, 1024);
    const int h = window ? 8 : 7;  // the register of the far address
    if (window) b.li(8, static_cast<int64_t>(isa::kSharedWindow) + 1024);
    b.op(Op::DMAST, {h, 0, 3, 4, 5, 6}).with("shared", window ? 0 : 1).signal(1);
    b.op(Op::DMALD, {7, h, 3, 4, 5, 6}).with("shared", window ? 0 : 1).wait(1);
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, window ? 24u : 23u);
    EXPECT_EQ(r.stats.shared_bytes_written, 256u);
    EXPECT_EQ(r.stats.shared_bytes_read, 256u);
    EXPECT_EQ(r.stats.hbm_bytes_read + r.stats.hbm_bytes_written, 0u);
    std::vector<uint8_t> back(256);
    chip.read_vmem(1024, back.data(), 256);
    EXPECT_EQ(back, data) << "window " << window;
  }
  // A window address past the shared memory's 64 KiB is refused, naming the shared memory.
  ProgramBuilder far;
  far.li(3, 1).li(4, 64).li(8, static_cast<int64_t>(isa::kSharedWindow) + 65536);
  far.op(Op::DMALD, {0, 8, 3, 4, 0, 0});
  try {
    chip.run(far.build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shared memory read"), std::string::npos) << e.what();
  }
}

// A load through the local window (isa::kLocalWindow): VMEM [0, 256) copied to VMEM [1024, 1280) by the DMA. VMEM:
// 4 banks of 16 bytes per cycle, interleaved every 64 bytes, so each row's 256 bytes are 64 on each bank, 4 cycles.
// The dma.ld (instruction 4) starts at 5; dma.local_latency 4: the far side's bytes from 9, read on the banks in
// [9, 13); the near side's writes fall on the same four banks, free at 13: written in [13, 17), complete at 17;
// halt at 18. No HBM or shared memory traffic; the far side's bytes are counted as local.
TEST(WholeChip, LocalWindowCopiesWithinVmem) {
  Chip chip(small_config({"vmem.banks=4", "vmem.port_bytes_per_cycle=16", "vmem.interleave_bytes=64",
                          "dma.local_latency=4"}));
  std::vector<uint8_t> data(256);
  for (int i = 0; i < 256; ++i) data[i] = static_cast<uint8_t>(i * 7 + 3);
  chip.write_vmem(0, data.data(), 256);
  ProgramBuilder b;
  b.li(3, 1).li(4, 256).li(5, static_cast<int64_t>(isa::kLocalWindow)).li(6, 1024);
  b.op(Op::DMALD, {6, 5, 3, 4, 0, 0});
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 18u);
  EXPECT_EQ(r.stats.local_bytes_read, 256u);
  EXPECT_EQ(r.stats.hbm_bytes_read + r.stats.hbm_bytes_written + r.stats.shared_bytes_read, 0u);
  std::vector<uint8_t> back(256);
  chip.read_vmem(1024, back.data(), 256);
  EXPECT_EQ(back, data);
  // A window address past VMEM is refused, naming VMEM.
  ProgramBuilder far;
  far.li(3, 1).li(4, 64).li(5, static_cast<int64_t>(isa::kLocalWindow + chip.config().vmem_bytes()));
  far.op(Op::DMALD, {0, 5, 3, 4, 0, 0});
  try {
    chip.run(far.build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("VMEM read (local window)"), std::string::npos) << e.what();
  }
}

// A background load (dma.ld bg) holds back no later load: HBM [0, 2048) into VMEM [0, 2048) (8 rows of 256 bytes),
// then a copy within VMEM of 256 bytes (VMEM [4096, +256) to [8192, +256)) that signals s2, for which vpu.sync
// waits. Plain, the copy completes behind the first load (a queue completes in order); background, on its own,
// while the first load's data still crosses HBM. A dmain.sync that waits for the background load's signal (s1)
// orders the copy of its first row after it (VMEM [0, 256) to [12288, +256)): the bytes that load brought.
TEST(WholeChip, BackgroundLoadHoldsBackNoLaterLoad) {
  const ChipConfig cfg = small_config({"vmem.banks=4", "vmem.port_bytes_per_cycle=16", "vmem.interleave_bytes=64",
                                       "dma.local_latency=4"});
  Chip plain(cfg), background(cfg);
  std::vector<uint8_t> hbm(2048), vmem(256);
  for (int i = 0; i < 2048; ++i) hbm[i] = static_cast<uint8_t>(i * 13 + 5);
  for (int i = 0; i < 256; ++i) vmem[i] = static_cast<uint8_t>(i * 7 + 3);
  const auto window = static_cast<int64_t>(isa::kLocalWindow);
  uint64_t plain_cycles = 0, bg_cycles = 0;
  for (bool bg : {false, true}) {
    Chip& chip = bg ? background : plain;
    chip.write_hbm(0, hbm.data(), hbm.size());
    chip.write_vmem(4096, vmem.data(), vmem.size());
    ProgramBuilder b;
    b.li(3, 8).li(4, 256).li(5, window + 4096).li(6, 8192).li(7, 1).li(8, window).li(9, 12288);  // cycles 0-6
    b.op(Op::DMALD, {0, 0, 3, 4, 4, 4}).with("bg", bg ? 1 : 0).signal(1);
    b.op(Op::DMALD, {6, 5, 7, 4, 0, 0}).signal(2);
    b.op(Op::VSYNC).wait(2);
    b.op(Op::DMAINSYNC).wait(1);
    b.op(Op::DMALD, {9, 8, 7, 4, 0, 0});
    const RunResult r = chip.run(b.build());
    const UnitStats& vpu = r.stats.units[static_cast<int>(isa::Unit::Vpu)];
    // The big load: dispatched at 7, starts at 8, its data from 18 for 2048 / 32 = 64 cycles, to 82. The copy:
    // dispatched at 8, starts at 9, reads from 13 and writes on the four banks in [13, 17) and [17, 21) (as in
    // LocalWindowCopiesWithinVmem): done at 21 on its own. vpu.sync (dispatched at 9, ready at 10) waits for s2:
    // background, from 10 to 21, 11 cycles; plain, until the copy completes behind the big load, past 82.
    if (bg)
      EXPECT_EQ(vpu.wait_sem_cycles, 11u);
    else
      EXPECT_GT(vpu.wait_sem_cycles, 72u);
    (bg ? bg_cycles : plain_cycles) = r.stats.cycles;
    std::vector<uint8_t> copy(256), first_row(256), landed(2048);
    chip.read_vmem(8192, copy.data(), 256);
    chip.read_vmem(12288, first_row.data(), 256);
    chip.read_vmem(0, landed.data(), 2048);
    EXPECT_EQ(copy, vmem) << bg;
    EXPECT_EQ(landed, hbm) << bg;
    EXPECT_EQ(first_row, std::vector<uint8_t>(hbm.begin(), hbm.begin() + 256)) << bg;
    EXPECT_EQ(r.stats.hbm_bytes_read, 2048u);
    EXPECT_EQ(r.stats.local_bytes_read, 512u);
  }
  // Both end with the last copy, behind the big load; background, the first copy no longer follows it
  EXPECT_LT(bg_cycles, plain_cycles);
}

// sem.set waits for the units to drain but for background loads that do not signal its semaphore (isa.def): data
// that streams in for later kernels goes on past the next kernel's leading sem.set. A background load of 2048
// bytes (8 rows of 256) that signals s1, then sem.set of s2 or of s1 (or a fence), a delay of 100 cycles and the
// implicit halt, which waits for every load. The li instructions take cycles 0-2; the load, dispatched at 3,
// starts at 4 and its data crosses HBM from 14 (dma.latency 10) for 2048 / 32 = 64 cycles, to 78. sem.set s2 takes
// cycle 4 (the queue has handed the load on), the delay 1 + 100 cycles from 5, and the halt cycle 106: 107
// cycles. sem.set s1 waits for the load, to 78, then 1 + 101 + 1: 181 cycles; a fence waits as it does.
TEST(WholeChip, SemSetLetsOtherBackgroundLoadsGoOn) {
  Chip chip(small_config());
  std::vector<uint8_t> hbm(2048);
  for (int i = 0; i < 2048; ++i) hbm[static_cast<size_t>(i)] = static_cast<uint8_t>(i * 11 + 1);
  auto run = [&](Op op, int sem) {
    chip.write_hbm(0, hbm.data(), hbm.size());
    ProgramBuilder b;
    b.li(3, 8).li(4, 256).li(5, 100);
    b.op(Op::DMALD, {0, 0, 3, 4, 4, 4}).with("bg", 1).signal(1);
    if (op == Op::SEMSET) b.op(Op::SEMSET, {sem, 0});
    else b.op(Op::FENCE);
    b.op(Op::DELAY, {5});
    const RunResult r = chip.run(b.build());
    std::vector<uint8_t> landed(2048);
    chip.read_vmem(0, landed.data(), landed.size());
    EXPECT_EQ(landed, hbm) << "s" << sem;  // the halt waited for it
    return r.stats.cycles;
  };
  EXPECT_EQ(run(Op::SEMSET, 2), 107u);
  EXPECT_EQ(run(Op::SEMSET, 1), 181u);
  EXPECT_EQ(run(Op::FENCE, 0), 181u);
}

TEST(WholeChip, SharedMemoryDmaWithoutOneIsAnError) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 1).li(4, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 0, 0}).with("shared", 1);
  try {
    chip.run(b.build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pc 2 (dma.ld r0, r0, r3, r4, r0, r0, shared): the chip has no shared "
                                         "memory (shared.size_kib = 0)"),
              std::string::npos)
        << e.what();
  }
}

// The shared level as a cache (a GPU's L2): 64 KiB, 4 ways of 64-byte lines, 64 bytes per cycle over 4 banks,
// latency 4; HBM is small_config's 32 bytes per cycle, dma.latency 10.
std::vector<std::string> cache_config() {
  return {"shared.size_kib=64", "shared.cache=1", "shared.ways=4", "shared.bandwidth_gbs=32", "shared.latency=4",
          "shared.banks=4", "shared.interleave_bytes=64"};
}

// small_config with cache_config() and one setting more.
ChipConfig cache_config_and(const std::string& set) {
  std::vector<std::string> sets = cache_config();
  sets.push_back(set);
  return small_config(sets);
}

TEST(WholeChip, CacheServesRepeatedReadsAtItsOwnRate) {
  Chip chip(small_config(cache_config()));
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64).li(7, 1024);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);  // 5: misses: starts 6, HBM data [16, 24)
  b.op(Op::DMALD, {7, 0, 3, 4, 5, 6}).wait(1);    // 6: the same 256 bytes, held: starts 24, data [28, 32)
  RunResult r = chip.run(b.build());
  // 24 + shared.latency 4 + 256 bytes / 64 per cycle = 32; halt at 32: 33 cycles. Uncached, the second load
  // would take 10 + 8 cycles like the first (43 cycles: WholeChip.CacheSplitsATransferIntoHeldAndMissingRows's
  // HBM part).
  EXPECT_EQ(r.stats.cycles, 33u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 256u);
  EXPECT_EQ(r.stats.shared_bytes_read, 256u);
}

// RunOptions::warm_cache: a run finds the lines the chip's previous run left in the cache (as a kernel finds the L2
// the kernels before it filled); without it the cache starts empty. One load of 256 bytes (pc 4), starting at 5:
// from HBM, data [15, 23), halt at 23: 24 cycles; held, data [9, 13) (shared.latency 4, 64 bytes a cycle), halt at
// 13: 14 cycles.
TEST(WholeChip, WarmCacheKeepsThePreviousRunsLines) {
  Chip chip(small_config(cache_config()));
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  const isa::Program p = b.build();
  RunOptions warm;
  warm.warm_cache = true;
  RunResult r = chip.run(p);  // the first run: an empty cache either way
  EXPECT_EQ(r.stats.cycles, 24u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 256u);
  r = chip.run(p, warm);
  EXPECT_EQ(r.stats.cycles, 14u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 0u);
  EXPECT_EQ(r.stats.shared_bytes_read, 256u);
  r = chip.run(p);  // emptied again
  EXPECT_EQ(r.stats.cycles, 24u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 256u);
}

TEST(WholeChip, CacheSplitsATransferIntoHeldAndMissingRows) {
  Chip chip(small_config(cache_config()));
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64).li(7, 8);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);  // 5: bytes [0, 256) miss: HBM [16, 24), done 24
  b.op(Op::DMALD, {0, 0, 7, 4, 5, 6}).wait(1);    // 6: bytes [0, 512) from 24: [0, 256) held, [256, 512) not
  RunResult r = chip.run(b.build());
  // The second load: the held rows on the shared level [28, 32), the missing ones from HBM [34, 42); done at
  // 42, halt: 43 cycles. The loads read 256 + 256 bytes from HBM and 256 from the cache.
  EXPECT_EQ(r.stats.cycles, 43u);
  EXPECT_EQ(r.stats.hbm_bytes_read, 512u);
  EXPECT_EQ(r.stats.shared_bytes_read, 256u);
}

// A load's miss reads the whole lines it touches from HBM (64 bytes here), which later loads of their other
// bytes find: 4 rows of 16 bytes, 64 apart, read 4 lines = 256 bytes from HBM; the same rows' next 16 bytes are
// then held (64 bytes read from the cache, none from HBM).
TEST(WholeChip, CacheMissReadsWholeLines) {
  Chip chip(small_config(cache_config()));
  ProgramBuilder b;
  b.li(3, 4).li(4, 16).li(5, 64).li(6, 16).li(7, 16).li(8, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);  // rows at 0, 64, 128, 192: 4 lines from HBM
  b.op(Op::DMALD, {8, 7, 3, 4, 5, 6}).wait(1);    // rows at 16, 80, 144, 208: in those lines
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.hbm_bytes_read, 256u);
  EXPECT_EQ(r.stats.shared_bytes_read, 64u);
}

// 8 lines 16 KiB apart: 256 sets of 64 bytes x 4 ways put them all in one set (line % sets) unless the set is a
// hash of the address (shared.hash = 1). Read twice: without the hash, LRU over 4 ways evicts each line before
// its second read (8 + 8 misses, 1024 bytes from HBM); with it, the 8 lines fall in different sets and the second
// read finds them all (512 bytes from HBM, 512 from the cache).
TEST(WholeChip, CacheSetHashSpreadsPowerOfTwoStrides) {
  Chip plain(cache_config_and("shared.hash=0")), hashed(cache_config_and("shared.hash=1"));  // both before the first run (SystemC elaborates once)
  ProgramBuilder b;
  b.li(3, 8).li(4, 64).li(5, 16384).li(6, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).wait(1);
  const isa::Program p = b.build();
  RunResult r = plain.run(p);
  EXPECT_EQ(r.stats.hbm_bytes_read, 1024u);
  EXPECT_EQ(r.stats.shared_bytes_read, 0u);
  r = hashed.run(p);
  EXPECT_EQ(r.stats.hbm_bytes_read, 512u);
  EXPECT_EQ(r.stats.shared_bytes_read, 512u);
}

// The cache writing back (shared.write_back = 1): a store is done when the cache has its lines, HBM takes them behind
// it, and the run ends when HBM has. 4 rows of 64 bytes stored (pc 4, starts 5), then loaded again once the store
// has signalled (pc 5, the lines held either way):
//  - writing through (0): the store's bytes on HBM [15, 23), done 23; the load from the cache [27, 31), done 31;
//    halt: 32 cycles.
//  - writing back (1): the store on the cache's banks [9, 13) (latency 4, 256 bytes at 64 a cycle), done 13, its
//    HBM write booked [15, 23) behind it; the load [17, 21), done 21; halt waits for HBM until 23: 24 cycles.
// Then a load of other bytes issued right after a store (pc 5, HBM [16, 24)), without waiting for it (pc 6, starts
// 7): its data, from 17, waits for the channels the posted write holds: [24, 32), as when writing through; halt: 33
// cycles either way. A posted write still takes HBM's time from the transfers after it.
TEST(WholeChip, CacheWritingBackCompletesStoresInTheCache) {
  Chip through(cache_config_and("shared.write_back=0")), back(cache_config_and("shared.write_back=1"));  // both before the first run (SystemC elaborates once)
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);
  b.op(Op::DMAST, {0, 0, 3, 4, 5, 6}).signal(1);  // 4
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).wait(1);    // 5
  const isa::Program dependent = b.build();
  RunResult r = through.run(dependent);
  EXPECT_EQ(r.stats.cycles, 32u);
  EXPECT_EQ(r.stats.hbm_bytes_written, 256u);
  EXPECT_EQ(r.stats.shared_bytes_read, 256u);
  r = back.run(dependent);
  EXPECT_EQ(r.stats.cycles, 24u);
  EXPECT_EQ(r.stats.hbm_bytes_written, 256u);
  EXPECT_EQ(r.stats.shared_bytes_read, 256u);
  EXPECT_EQ(unit(r.stats, isa::Unit::Core).stalls.wait_drain, 15u + 2u);  // halt (dispatched 6): units, then HBM
  ProgramBuilder c;
  c.li(3, 4).li(4, 64).li(5, 64).li(6, 64).li(7, 4096);
  c.op(Op::DMAST, {0, 0, 3, 4, 5, 6});  // 5: starts 6, HBM [16, 24) posted
  c.op(Op::DMALD, {0, 7, 3, 4, 5, 6});  // 6: starts 7, misses: HBM from 17, after the write: [24, 32)
  EXPECT_EQ(through.run(c.build()).stats.cycles, 33u);
  EXPECT_EQ(back.run(c.build()).stats.cycles, 33u);
}

TEST(WholeChip, CacheIsNotAddressable) {
  Chip chip(small_config(cache_config()));
  ProgramBuilder b;
  b.li(3, 1).li(4, 64);
  b.op(Op::DMALD, {0, 0, 3, 4, 0, 0}).with("shared", 1);
  try {
    chip.run(b.build());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the chip's shared level is a cache (shared.cache = 1), not memory a "
                                         "transfer can name"),
              std::string::npos)
        << e.what();
  }
}

TEST(WholeChip, LaunchCyclesComeBeforeTheFirstInstruction) {
  Chip chip(small_config({"chip.launch_cycles=100"}));
  RunResult r = chip.run(ProgramBuilder().op(Op::NOP).build());
  EXPECT_EQ(r.stats.cycles, 102u);  // 100 + nop + halt
  EXPECT_EQ(unit(r.stats, isa::Unit::Core).stalls.launch, 100u);
  EXPECT_EQ(stall_sum(unit(r.stats, isa::Unit::Core).stalls), r.stats.cycles);
}

TEST(WholeChip, InvalidChipShapesAreRefused) {
  auto error = [](std::vector<std::string> sets) {
    try {
      load_config("edge", sets);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error({"chip.cores=0"}), "chip.cores = 0 must be in [1, 1024] (in --set chip.cores=0)");
  EXPECT_EQ(error({"core.mxus=17"}), "core.mxus = 17 must be in [1, 16] (in --set core.mxus=17)");
  EXPECT_EQ(error({"mxu.i8_rate=2", "mxu.dataflow=os"}),
            "mxu.i8_rate = 2 must be 1 unless mxu.dataflow = ws (in --set mxu.i8_rate=2)");
  // The rates' ranges hold as well (a rate of 0 would divide by zero; fp8's 0 means "no fp8").
  EXPECT_EQ(error({"mxu.i8_rate=0"}), "mxu.i8_rate = 0 must be in [1, 4] (in --set mxu.i8_rate=0)");
  EXPECT_EQ(error({"mxu.fp8_rate=5"}), "mxu.fp8_rate = 5 must be in [0, 4] (in --set mxu.fp8_rate=5)");
  EXPECT_EQ(error({"mxu.fp8_rate=2", "mxu.dataflow=is"}),
            "mxu.fp8_rate = 2 must be 0 or 1 unless mxu.dataflow = ws (in --set mxu.fp8_rate=2)");
  EXPECT_EQ(error({"mxu.efficiency=0"}), "mxu.efficiency = 0 must be in [0.01, 1] (in --set mxu.efficiency=0)");
}

}  // namespace
}  // namespace tpusim::sim::test
