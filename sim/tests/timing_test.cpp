// Exact cycle counts, each with its arithmetic. small_config(): 4x4 array, dma.latency 10, HBM 32 bytes per
// cycle, VPU 8 elements per cycle with latency 2, queues of 4.
//
// Fixed overheads of the model: every core instruction takes 1 cycle; a unit instruction is dispatched in its
// cycle and the unit may start it the next cycle; the (implicit or explicit) halt waits for all units to finish
// and then takes 1 cycle. So a program's cycles = last completion + 1.
#include <cstring>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = 0, kI32 = 1;

// r3 = rows 4, r4 = rowbytes 64, r5 = hstride 64, r6 = vstride 64: a 256-byte transfer = 8 data cycles.
ProgramBuilder dma_registers() {
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(5, 64).li(6, 64);
  return b;
}

TEST(Timing, EmptyProgramTakesOneCycle) {
  Chip chip(small_config());
  EXPECT_EQ(chip.run(ProgramBuilder().build()).stats.cycles, 1u);  // the implicit halt
}

TEST(Timing, ScalarInstructionsTakeOneCycleEach) {
  Chip chip(small_config());
  EXPECT_EQ(chip.run(ProgramBuilder().op(Op::NOP).build()).stats.cycles, 2u);  // nop + halt
  // li; 100 x (addi, bne); halt = 1 + 200 + 1
  ProgramBuilder b;
  b.li(1, 100);
  b.op(Op::ADDI, {1, 1, -1}).op(Op::BNE, {1, 0, 1}).op(Op::HALT);
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 202u);
  EXPECT_EQ(r.stats.units[0].instructions, 202u);  // the explicit halt counts
}

// delay rN: 1 + R[N] cycles of the core, while the units go on. li (cycle 0); delay 100 (cycles 1-101); halt at
// 102: 103 cycles. With a load dispatched before it (4 li, the load at 4: data [15, 23), as SingleDmaLoad), a
// delay of 10 ends before the load (li 5, delay 6-16, halt waits for the load: 24 cycles, the delay hidden), and
// one of 30 after it (delay 6-36, halt at 37: 38 cycles).
TEST(Timing, DelayHoldsTheCoreNotTheUnits) {
  Chip chip(small_config());
  ProgramBuilder d;
  d.li(1, 100).op(Op::DELAY, {1});
  RunResult r = chip.run(d.build());
  EXPECT_EQ(r.stats.cycles, 103u);
  EXPECT_EQ(r.stats.units[0].stalls.busy, 103u);  // the core's instructions, the delay and the halt
  for (auto [wait, cycles] : {std::pair{10, 24u}, std::pair{30, 38u}}) {
    ProgramBuilder b = dma_registers();
    b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).li(7, wait).op(Op::DELAY, {7});
    EXPECT_EQ(chip.run(b.build()).stats.cycles, cycles) << "delay " << wait;
  }
}

TEST(Timing, SingleDmaLoad) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  RunResult r = chip.run(b.build());
  // 4 li (cycles 0-3); dma.ld dispatched at 4, starts at 5; data from 5 + 10 = 15 for 256 / 32 = 8 cycles,
  // complete at 23; halt takes cycle 23: 24 cycles = 4 + 1 + 10 + 8 + 1.
  EXPECT_EQ(r.stats.cycles, 24u);
  const UnitStats& dma = r.stats.units[static_cast<int>(isa::Unit::DmaIn)];
  EXPECT_EQ(dma.instructions, 1u);
  EXPECT_EQ(dma.busy_cycles, 18u);  // latency + data
  EXPECT_EQ(r.stats.hbm_bytes_read, 256u);
  EXPECT_EQ(r.stats.hbm_bytes_written, 0u);
}

TEST(Timing, FractionalBandwidthRoundsUpExactly) {
  // 25.6 GB/s at 500 MHz = 51.2 bytes per cycle: 512 bytes take exactly 10 cycles, 513 take 11.
  Chip chip(small_config({"hbm.bandwidth_gbs=25.6"}));
  for (auto [bytes, data] : {std::pair{512, 10}, std::pair{513, 11}}) {
    ProgramBuilder b;
    b.li(3, 1).li(4, bytes);
    b.op(Op::DMALD, {0, 0, 3, 4, 0, 0});
    EXPECT_EQ(chip.run(b.build()).stats.cycles, uint64_t(2 + 1 + 10 + data + 1)) << bytes;
  }
}

TEST(Timing, ZeroLengthDmaCompletesAtOnce) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::DMALD, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 2u);  // dispatch at 0, starts and completes at 1, halt
}

TEST(Timing, ConcurrentLoadAndStoreShareHbm) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});         // dispatched 4, starts 5, data [15, 23)
  b.op(Op::DMAST, {0, 0, 3, 4, 5, 6});         // dispatched 5, starts 6, data [max(16, 23), 31)
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 32u);  // 31 + halt; with HBM not shared it would be 6 + 10 + 8 + 1 = 25
  EXPECT_EQ(r.stats.hbm_bytes_written, 256u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::DmaOut)].busy_cycles, 25u);  // [6, 31)
}

TEST(Timing, WritesMoveAtTheWriteEfficiency) {
  // hbm.write_efficiency 0.5: a store's 256 bytes take 256 / (32 x 0.5) = 16 data cycles, a load's still 8.
  Chip chip(small_config({"hbm.write_efficiency=0.5"}));
  ProgramBuilder st = dma_registers();
  st.op(Op::DMAST, {0, 0, 3, 4, 5, 6});  // dispatched 4, starts 5, data [15, 31), halt at 31
  EXPECT_EQ(chip.run(st.build()).stats.cycles, 32u);
  ProgramBuilder ld = dma_registers();
  ld.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  EXPECT_EQ(chip.run(ld.build()).stats.cycles, 24u);  // as SingleDmaLoad
  // Load then store: the store's data follows the load's on the channels, [23, 39): 40 cycles.
  ProgramBuilder both = dma_registers();
  both.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).op(Op::DMAST, {0, 0, 3, 4, 5, 6});
  EXPECT_EQ(chip.run(both.build()).stats.cycles, 40u);
}

TEST(Timing, ReadsMoveAtTheEfficiencyAndWritesAtBoth) {
  // hbm.efficiency 0.5: a load's 256 bytes take 256 / (32 x 0.5) = 16 data cycles, [15, 31), halt at 31 (8 at
  // efficiency 1: SingleDmaLoad's 24 cycles); with hbm.write_efficiency 0.5 too, a store's take 256 / (32 x 0.5 x
  // 0.5) = 32, [15, 47).
  Chip chip(small_config({"hbm.efficiency=0.5", "hbm.write_efficiency=0.5"}));
  ProgramBuilder ld = dma_registers();
  ld.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  EXPECT_EQ(chip.run(ld.build()).stats.cycles, 32u);
  ProgramBuilder st = dma_registers();
  st.op(Op::DMAST, {0, 0, 3, 4, 5, 6});
  EXPECT_EQ(chip.run(st.build()).stats.cycles, 48u);
}

// r1 = 4 (k, n, and the row stride of i8 rows of 4), r2 = 64 (input address), r3 = m.
ProgramBuilder mxu_registers(int64_t m) {
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, m);
  return b;
}

TEST(Timing, IsolatedFoldIsScaleSims2RPlusCPlusMMinus2) {
  Chip chip(small_config());
  ProgramBuilder b = mxu_registers(8);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});          // dispatched 3, loads [4, 8)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});          // dispatched 4; swap at 8, streams [8, 16), results at 16 + 4 + 4 - 2
  RunResult r = chip.run(b.build());
  // From the lw's start (cycle 4) to the results (cycle 22): 2R + C + M - 2 = 8 + 4 + 8 - 2 = 18.
  // Total: 3 li + 1 dispatch + 18 + 1 halt = 23.
  EXPECT_EQ(r.stats.cycles, 23u);
  const UnitStats& mxu = r.stats.units[static_cast<int>(isa::Unit::Mxu)];
  EXPECT_EQ(mxu.instructions, 2u);
  EXPECT_EQ(mxu.busy_cycles, 8u);  // streaming only
  EXPECT_EQ(r.stats.mxu_macs, 8u * 4 * 4);
  EXPECT_DOUBLE_EQ(r.stats.mxu_mac_utilization, 128.0 / (16.0 * 23));
}

TEST(Timing, DoubleBufferedWeightLoadIsHidden) {
  Chip chip(small_config());
  ProgramBuilder b = mxu_registers(8);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});   // loads [4, 8)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});   // streams [8, 16); the front-end moves on at 8
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});   // the shadow buffer is free since the swap at 8: loads [8, 12)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});   // swap at max(12, 16); streams [16, 24); results at 24 + 6 = 30
  RunResult r = chip.run(b.build());
  // 3 li + 1 + (2R + C + 2M - 2 = 26) + 1 halt = 31: the second load costs nothing.
  EXPECT_EQ(r.stats.cycles, 31u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Mxu)].busy_cycles, 16u);

  // With m = 2 < R the second load shows: streams [8, 10); load [8, 12); swap at 12; stream [12, 14);
  // results at 14 + 6 = 20; 21 cycles.
  ProgramBuilder c = mxu_registers(2);
  c.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  c.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  EXPECT_EQ(chip.run(c.build()).stats.cycles, 21u);
}

TEST(Timing, BackToBackMatmulsOnOneTileStreamWithoutGaps) {
  Chip chip(small_config());
  ProgramBuilder b = mxu_registers(8);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});   // loads [4, 8)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});   // streams [8, 16)
  b.op(Op::MXUMM, {2, 3, 8, 1, kI8});   // streams [16, 24), results at 24 + 6 = 30
  b.op(Op::MXUMM, {2, 3, 16, 1, kI8});  // streams [24, 32), results at 32 + 6 = 38
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 39u);
}

TEST(Timing, SecondLoadBeforeAnyMatmulReplacesTheFirst) {
  Chip chip(small_config());
  ProgramBuilder b = mxu_registers(8);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8});  // loads [4, 8)
  b.op(Op::MXULW, {2, 1, 1, 1, kI8});  // front-end at 5; the shadow buffer is busy until 8: loads [8, 12)
  b.op(Op::MXUMM, {2, 3, 0, 1, kI8});  // swaps at 12, streams [12, 20), results at 26
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 27u);
}

TEST(Timing, EmptyMatmulIsANoOp) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::MXUMM, {0, 0, 0, 0, kI8}).signal(1);  // m = 0 and no weights: nothing to do, signals at 1
  b.op(Op::VSYNC).wait(1);                       // dispatched 1, starts 2
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 3u);
}

TEST(Timing, VectorInstruction) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 20);
  b.op(Op::VADD, {0, 0, 0, 1, kI32});  // dispatched 1, starts 2, latency 2 + ceil(20 / 8) = 5: done at 7
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 8u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 5u);
}

TEST(Timing, VectorOperandsInTheAccumulatorsTakeNoVmemPort) {
  // small_config() with VMEM's ports at 4 banks x 4 bytes = 16 bytes per cycle (the lanes take 8 f32 = 32
  // bytes per cycle of each operand). vpu.add of 64 f32 (256 bytes per operand, 768 in all, 192 per bank):
  // in VMEM the ports set the pace, 192 / 4 = 48 cycles, + latency 2: dispatched 2, starts 3, done at 53, the
  // program 54 cycles. The same in the accumulators (addresses from VMEM's size on, isa.def): the lanes',
  // latency 2 + 64 / 8 = 10 cycles, done at 13, the program 14.
  const ChipConfig cfg = small_config({"vmem.banks=4", "vmem.port_bytes_per_cycle=4", "vmem.interleave_bytes=4"});
  Chip chip(cfg);
  for (const bool acc : {false, true}) {
    ProgramBuilder b;
    b.li(1, 64).li(2, acc ? static_cast<int64_t>(cfg.vmem_bytes()) : 0);
    b.op(Op::VADD, {2, 2, 2, 1, 3});  // f32
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, acc ? 14u : 54u) << (acc ? "accumulators" : "VMEM");
  }
}

TEST(Timing, TranscendentalAndRoundingInstructionsAtTheRateOfAdd) {
  // vpu.log, sin, cos, floor, ceil, round time as vpu.exp and vpu.add (isa.def): latency 2 + ceil(20 / 8) = 5
  // cycles each, whatever the operands (VMEM holds zeros: log(0) = -inf, no faster or slower).
  Chip chip(small_config());  // one chip per process; each run counts from its own start
  for (Op op : {Op::VEXP, Op::VLOG, Op::VSIN, Op::VCOS, Op::VERF, Op::VERFC, Op::VFLOOR, Op::VCEIL, Op::VROUND}) {
    ProgramBuilder b;
    b.li(1, 20).li(2, 256);
    b.op(op, {2, 0, 1, 3});  // vd 256, va 0, n 20, f32; dispatched 2, starts 3, done at 8
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, 9u) << isa::describe(op).mnemonic;
    EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 5u) << isa::describe(op).mnemonic;
  }
}

TEST(Timing, SpecialFunctionsAtTheirOwnRate) {
  // vpu.special = 4 results per cycle, against the lanes' 8 (a GPU's special function units against its FP32
  // lanes): exp, log, sin, cos, recip and rsqrt over 20 elements take 2 + ceil(20 / 4) = 7 cycles (dispatched 2,
  // start 3, done 10: 11 with the halt); floor, ceil, round and add keep 2 + ceil(20 / 8) = 5 (9 in all).
  Chip chip(small_config({"vpu.special=4"}));
  for (Op op : {Op::VEXP, Op::VLOG, Op::VSIN, Op::VCOS, Op::VERF, Op::VERFC, Op::VRECIP, Op::VRSQRT, Op::VFLOOR,
                Op::VCEIL, Op::VROUND}) {
    const bool special = op != Op::VFLOOR && op != Op::VCEIL && op != Op::VROUND;
    ProgramBuilder b;
    b.li(1, 20).li(2, 256);
    b.op(op, {2, 0, 1, 3});
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, special ? 11u : 9u) << isa::describe(op).mnemonic;
    EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, special ? 7u : 5u)
        << isa::describe(op).mnemonic;
  }
  ProgramBuilder b;
  b.li(1, 20).li(2, 256);
  b.op(Op::VADD, {2, 2, 2, 1, 3});
  EXPECT_EQ(chip.run(b.build()).stats.cycles, 9u) << "vpu.add";
}

TEST(Timing, RowBroadcastInstruction) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 256).li(2, 512).li(3, 3).li(4, 7).li(5, 32);  // vd 0, va 256, vb 512, 3 rows x 7 cols, stride 32 bytes
  b.op(Op::VADDROW, {0, 1, 2, 3, 4, 5, kI32});  // dispatched 5, starts 6, latency 2 + ceil(21 / 8) = 5: done at 11
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 12u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 5u);
}

TEST(Timing, RowDotProductInOnePass) {
  // vpu.rdot of 3 rows x 7 columns (a bf16 at 256, b f32 at 512, row strides 32 and 64 bytes, the sums to 0):
  // one pass over the 21 products (isa.def), dispatched 6, starts 7, latency 2 + ceil(21 / 8) = 5: done at 12,
  // the program 13; vpu.cast, vpu.mul and vpu.rsum over the same elements take a pass each.
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 256).li(2, 512).li(3, 3).li(4, 7).li(5, 32).li(6, 64);
  b.op(Op::VRDOT, {0, 1, 2, 3, 4, 5, 6, static_cast<int64_t>(isa::DType::BF16)});
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 13u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 5u);
}

TEST(Timing, AddAndReluInOnePass) {
  // vpu.add of 40 f32 elements (a at 256, b at 512, into 768) with its relu flag: one pass (isa.def), dispatched
  // 4, starts 5, latency 2 + ceil(40 / 8) = 7: done at 12, the program 13; vpu.add and vpu.relu apart take a pass
  // each: the relu, dispatched 5, starts when the add is done at 12, 7 more: 19, the program 20.
  Chip chip(small_config());  // (one chip a process: both programs run on it)
  for (const bool fused : {true, false}) {
    ProgramBuilder b;
    b.li(1, 256).li(2, 512).li(3, 768).li(4, 40);
    b.op(Op::VADD, {3, 1, 2, 4, static_cast<int64_t>(isa::DType::F32), fused ? 1 : 0});
    if (!fused) b.op(Op::VRELU, {3, 3, 4, static_cast<int64_t>(isa::DType::F32)});
    RunResult r = chip.run(b.build());
    EXPECT_EQ(r.stats.cycles, fused ? 13u : 20u) << fused;
    EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, fused ? 7u : 14u) << fused;
  }
}

// core.issue_width 8, core.scalar_slots 2 (v4, v5e, v6e): the core issues a bundle a cycle, in program order, of
// at most 2 scalar instructions and one for each unit's queue, none reading or writing a register an earlier one of
// the bundle writes; a branch ends its bundle. So: li r1, li r2 (cycle 0: two scalars); li r3 (1: the scalar slots
// were full); vpu.add reading r3 (2: r3 written in cycle 1's bundle) with li r4 (2); vpu.relu (3: the vector unit's
// slot was taken) with addi r4 (3: r4 was written in cycle 2's, not 3's) and beq r0, r0 (3, the second scalar,
// taken: it ends the bundle, skipping li r5); li r6 (4). The add of 40 f32 elements dispatched in 2 starts at 3,
// 2 + ceil(40 / 8) = 7 cycles: done at 10; the relu then 10 to 17; the halt waits, takes its cycle: 18 cycles, 5
// bundles and the halt busy. One instruction a cycle (the default), the same program: the add dispatched in 3 is
// done at 11, the relu dispatched in 5 at 18: 19 cycles, 9 instructions and the halt busy.
TEST(Timing, CoreIssuesBundlesOfIndependentInstructions) {
  Chip chip(small_config({"core.issue_width=8", "core.scalar_slots=2"}));
  ProgramBuilder b;
  b.li(1, 256).li(2, 512).li(3, 40);
  b.op(Op::VADD, {2, 1, 1, 3, static_cast<int64_t>(isa::DType::F32)}).li(4, 7);
  b.op(Op::VRELU, {2, 2, 3, static_cast<int64_t>(isa::DType::F32)}).op(Op::ADDI, {4, 4, 1}).op(Op::BEQ, {0, 0, 9});
  b.li(5, 1).li(6, 1);
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 18u);
  const UnitStats& core = r.stats.units[static_cast<int>(isa::Unit::Core)];
  EXPECT_EQ(core.instructions, 9u);  // li r5 skipped
  EXPECT_EQ(core.stalls.busy, 6u);
  EXPECT_EQ(core.stalls.wait_drain, 12u);  // the halt from 5 to 17
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 14u);
}

TEST(Timing, ColumnDotProductInOnePass) {
  // vpu.cdot of 5 rows x 6 columns (a bf16 at 256, row stride 32 bytes; b f32 at 512, one per row 8 bytes apart;
  // the sums to 0): one pass over the 30 products (isa.def), dispatched 6, starts 7, latency 2 + ceil(30 / 8) = 6:
  // done at 13, the program 14.
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 256).li(2, 512).li(3, 5).li(4, 6).li(5, 32).li(6, 8);
  b.op(Op::VCDOT, {0, 1, 2, 3, 4, 5, 6, static_cast<int64_t>(isa::DType::BF16)});
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 14u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].busy_cycles, 6u);
}

TEST(Timing, SemaphoreMakesTheVectorUnitWaitForTheDma) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);  // complete at 23, s1 = 1
  b.op(Op::VADD, {0, 0, 0, 3, kI32}).wait(1);     // dispatched 5, ready at 6, waits to 23, runs 2 + 1 = 3
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 27u);  // 26 + halt
  const UnitStats& vpu = r.stats.units[static_cast<int>(isa::Unit::Vpu)];
  EXPECT_EQ(vpu.wait_sem_cycles, 17u);  // [6, 23)
  EXPECT_EQ(vpu.busy_cycles, 3u);
}

TEST(Timing, FullQueueStallsTheCore) {
  Chip chip(small_config({"core.queue_depth=2"}));
  ProgramBuilder b = dma_registers();
  for (int i = 0; i < 4; ++i) b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  RunResult r = chip.run(b.build());
  // Each load takes 18 cycles. #1 dispatched 4, runs [5, 23). #2 (5) and #3 (6) fill the queue of 2 (#1 left it
  // at 5). #4 at 7 finds it full and waits until the engine takes #2 at 23: a 16-cycle stall.
  // #2 [23, 41), #3 [41, 59), #4 [59, 77); halt: 78.
  EXPECT_EQ(r.stats.cycles, 78u);
  EXPECT_EQ(r.stats.units[0].wait_queue_cycles, 16u);
}

TEST(Timing, SemSetWaitsForTheUnitsLikeAFence) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});  // dispatched 4, complete at 23
  b.op(Op::SEMSET, {1, 1});             // at 5: waits until 23, sets s1 = 1, takes cycle 23
  b.op(Op::VSYNC).wait(1);              // dispatched 24, starts 25 with s1 = 1: no wait
  RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.cycles, 26u);
  EXPECT_EQ(r.stats.units[static_cast<int>(isa::Unit::Vpu)].wait_sem_cycles, 0u);

  ProgramBuilder f = dma_registers();
  f.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).op(Op::FENCE).op(Op::VSYNC);  // the same without the semaphore
  EXPECT_EQ(chip.run(f.build()).stats.cycles, 26u);
}

TEST(Timing, SemaphoreCountsSignals) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::DMAINSYNC).signal(2).op(Op::DMAINSYNC).signal(2);  // s2 = 2 at cycles 1 and 2
  b.op(Op::VSYNC).wait(2).op(Op::VSYNC).wait(2);              // both pass at 3 and 4 without waiting
  b.op(Op::VSYNC).wait(2);                                    // s2 = 0: waits forever
  std::string err;
  try {
    chip.run(b.build());
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_EQ(err,
            "deadlock at cycle 5: vpu waits for s2 (value 0) at pc 4 (vpu.sync wait=s2); core waits for the units "
            "to drain at pc 5 (end of program)");
}

TEST(Timing, RunsCountFromTheirOwnStart) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6});
  for (int i = 0; i < 3; ++i) EXPECT_EQ(chip.run(b.build()).stats.cycles, 24u);
}

TEST(Timing, TimingOnlyGivesTheSameCycles) {
  Chip chip(small_config());
  ProgramBuilder b = dma_registers();
  b.li(1, 4).li(2, 64).li(7, 8).li(8, 512).li(9, 16).li(10, 8192);
  b.op(Op::DMALD, {0, 0, 3, 4, 5, 6}).signal(1);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8}).wait(1);
  b.op(Op::MXUMM, {2, 7, 0, 1, kI8}).signal(2);
  b.op(Op::VACC, {8, 0, 7, 1, 9, 0, 0, kI32, kI32}).wait(2).signal(3);
  b.op(Op::DMAST, {10, 8, 7, 9, 9, 9}).wait(3);
  RunOptions timing_only;
  timing_only.functional = false;
  RunResult a = chip.run(b.build());
  RunResult t = chip.run(b.build(), timing_only);
  EXPECT_EQ(a.stats.cycles, t.stats.cycles);
  EXPECT_EQ(a.stats.to_json(chip.config()), t.stats.to_json(chip.config()));
}

// dma.gather: its timing is that of a dma.ld of its rows, each row starting its own HBM interleave chunk, after
// the indices are read from VMEM; it does not depend on the index values, so timing-only runs agree.
TEST(Timing, GatherTimesLikeALoadOfItsRowsWhateverTheIndices) {
  Chip chip(small_config());
  auto program = [](bool gather) {
    ProgramBuilder b;
    // r1 VMEM dst, r2 table, r3 idx, r4 rows, r5 rowbytes (2 edge interleave chunks), r6 count
    b.li(1, 4096).li(2, 8192).li(3, 0).li(4, 8).li(5, 128).li(6, 1000).li(7, 32).li(8, 1);
    b.op(Op::DMALD, {3, 3, 8, 7, 7, 7});  // the 8 indices (32 bytes) from HBM 0 into VMEM 0
    b.op(Op::FENCE);
    if (gather)
      b.op(Op::DMAGATHER, {1, 2, 3, 4, 5, 5, 6});
    else
      b.op(Op::DMALD, {1, 2, 4, 5, 5, 5});
    return b.build();
  };
  RunOptions timing_only;
  timing_only.functional = false;
  std::vector<uint64_t> cycles;
  for (std::vector<int32_t> ids : {std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7}, std::vector<int32_t>{999, 3, 3, 500, 17, 0, 0, 1}}) {
    std::vector<uint8_t> bytes(32);
    std::memcpy(bytes.data(), ids.data(), 32);
    chip.write_hbm(0, bytes.data(), bytes.size());
    cycles.push_back(chip.run(program(true)).stats.cycles);
    cycles.push_back(chip.run(program(true), timing_only).stats.cycles);
  }
  const uint64_t ld = chip.run(program(false)).stats.cycles;
  for (uint64_t c : cycles) EXPECT_EQ(c, cycles[0]);
  // The gather reads 32 bytes of indices through VMEM's ports (a cycle) before the rows: at least the load's
  // cycles, and not more than a few cycles beyond (8 rows of 2 chunks fall as a contiguous load's do).
  EXPECT_GE(cycles[0], ld);
  EXPECT_LE(cycles[0], ld + 2);
}

}  // namespace
}  // namespace tpusim::sim::test
