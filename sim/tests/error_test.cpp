// Run-time errors: their messages, and the chip running correctly again after each.
#include <cstring>
#include <functional>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = 0;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Loads 256 bytes from HBM 0 into VMEM 0, then stores them to HBM 4096.
ProgramBuilder copy_builder() {
  ProgramBuilder b;
  b.li(1, 1).li(4, 256).li(2, 4096);  // rows 1, rowbytes 256
  b.op(Op::DMALD, {0, 0, 1, 4, 0, 0}).signal(1);
  b.op(Op::DMAST, {2, 0, 1, 4, 0, 0}).wait(1);
  return b;
}

// Runs copy_builder()'s program and checks its cycles and data: the chip is as good as new.
void expect_chip_works(Chip& chip) {
  std::vector<uint8_t> data(256), out(256);
  for (int i = 0; i < 256; ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  chip.write_hbm(0, data.data(), data.size());
  RunResult r = chip.run(copy_builder().build());
  // 3 li; load dispatched 3, [4, 4 + 10 + 8 = 22); store starts when s1 is set at 22: [22, 40); 41 cycles.
  EXPECT_EQ(r.stats.cycles, 41u);
  chip.read_hbm(4096, out.data(), out.size());
  EXPECT_EQ(out, data);
}

TEST(Errors, DmaOutOfBoundsNamesPcAndInstruction) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(2, int64_t(1) << 30).li(3, 1).li(4, 64);
  b.op(Op::DMALD, {0, 2, 3, 4, 5, 6});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 3 (dma.ld r0, r2, r3, r4, r5, r6): HBM read [0x40000000, 0x40000040) outside 1024 MiB");
  expect_chip_works(chip);
}

TEST(Errors, NegativeDelayNamesPcAndInstruction) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, -5).op(Op::DELAY, {1});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }), "pc 1 (delay r1): delay of -5 cycles (0 to 2^32)");
  expect_chip_works(chip);
  ProgramBuilder big;  // more than 2^32: a corrupt program, not a time the core could wait
  big.li(1, (int64_t{1} << 32) + 1).op(Op::DELAY, {1});
  EXPECT_EQ(error_of([&] { chip.run(big.build()); }), "pc 1 (delay r1): delay of 4294967297 cycles (0 to 2^32)");
  expect_chip_works(chip);
}

TEST(Errors, VmemOutOfBoundsNamesTheRow) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 4).li(4, 64).li(6, 350000);
  b.op(Op::DMALD, {0, 0, 3, 4, 0, 6});  // rows at VMEM 0, 350000, 700000, 1050000: the last one is past 1 MiB
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 3 (dma.ld r0, r0, r3, r4, r0, r6): VMEM write [0x100590, 0x1005d0) outside 1048576 bytes (row 3 of 4)");
  expect_chip_works(chip);
}

TEST(Errors, ErrorWhileOtherUnitsAreBusy) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 64).li(4, 1024);
  b.op(Op::DMALD, {0, 0, 3, 4, 0, 0});        // a long load in flight
  b.op(Op::MXUMM, {0, 3, 0, 0, kI8});         // no weights loaded
  b.op(Op::VADD, {0, 0, 0, 3, 1});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 3 (mxu.mm r0, r3, r0, r0, i8): no weight tile loaded (no mxu.lw before this mxu.mm)");
  expect_chip_works(chip);
}

TEST(Errors, WeightTileTooLarge) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 5).li(2, 4);
  b.op(Op::MXULW, {0, 1, 2, 2, kI8});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 2 (mxu.lw r0, r1, r2, r2, i8): weight tile 5x4 does not fit the 4x4 array");
}

TEST(Errors, WeightsOfI32OrF32) {
  Chip chip(small_config());
  for (isa::DType t : {isa::DType::I32, isa::DType::F32}) {
    ProgramBuilder b;
    b.li(1, 4).li(2, 4);
    b.op(Op::MXULW, {0, 1, 2, 2, int64_t(t)});
    const std::string n = isa::dtype_name(t);
    EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
              "pc 2 (mxu.lw r0, r1, r2, r2, " + n + "): weights of type " + n + ": the matrix unit takes i8, bf16 or f8e4m3");
  }
  expect_chip_works(chip);
}

// A chip without an fp8 rate (mxu.fp8_rate = 0: the default, and TPU v1 to v6e) refuses f8e4m3 matrix work,
// naming the instruction, in a timing-only run too; vector instructions other than vpu.cast refuse f8e4m3 anywhere.
TEST(Errors, Fp8OnAChipWithoutAnFp8Rate) {
  Chip chip(small_config({"mxu.fp8_rate=0", "chip.name=v5e"}));
  const int64_t f8 = dt(isa::DType::F8E4M3);
  for (bool functional : {true, false}) {
    RunOptions o;
    o.functional = functional;
    ProgramBuilder b;
    b.li(1, 4).li(2, 4);
    b.op(Op::MXULW, {0, 1, 2, 2, f8});
    EXPECT_EQ(error_of([&] { chip.run(b.build(), o); }),
              "pc 2 (mxu.lw r0, r1, r2, r2, f8e4m3): f8e4m3 (fp8) operands, but this chip (v5e) has no fp8 matrix "
              "rate (mxu.fp8_rate = 0)");
    ProgramBuilder mm;  // an mm of f8e4m3 after a bf16 tile: the missing rate is what it says first
    mm.li(1, 4).li(2, 4);
    mm.op(Op::MXULW, {0, 1, 2, 2, dt(isa::DType::BF16)}).op(Op::MXUMM, {0, 1, 0, 2, f8});
    EXPECT_EQ(error_of([&] { chip.run(mm.build(), o); }),
              "pc 3 (mxu.mm r0, r1, r0, r2, f8e4m3): f8e4m3 (fp8) operands, but this chip (v5e) has no fp8 matrix "
              "rate (mxu.fp8_rate = 0)");
  }
  ProgramBuilder add;
  add.li(1, 4);
  add.op(Op::VADD, {0, 0, 0, 1, f8});
  EXPECT_EQ(error_of([&] { chip.run(add.build()); }),
            "pc 1 (vpu.add r0, r0, r0, r1, f8e4m3): data type f8e4m3 not supported here");
  expect_chip_works(chip);
}

TEST(Errors, MatmulOfAnotherTypeThanItsTile) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 4).li(2, 4);
  b.op(Op::MXULW, {0, 1, 2, 2, kI8});
  b.op(Op::MXUMM, {0, 1, 0, 2, int64_t(isa::DType::BF16)});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 3 (mxu.mm r0, r1, r0, r2, bf16): inputs of type bf16 but the weight tile is i8");
  expect_chip_works(chip);
}

TEST(Errors, MatmulPastTheAccumulators) {
  Chip chip(small_config());  // mxu.acc_rows = 64
  auto program = [](int m_reg) {
    ProgramBuilder b;
    b.li(1, 4).li(2, 4).li(3, 8).li(4, 60);
    b.op(Op::MXULW, {0, 1, 2, 2, kI8});
    b.op(Op::MXUMM, {0, m_reg, 4, 2, kI8});
    return b.build();
  };
  EXPECT_EQ(error_of([&] { chip.run(program(3)); }),  // 8 rows from 60: [60, 68)
            "pc 5 (mxu.mm r0, r3, r4, r2, i8): accumulator rows [60, 68) outside 64 rows");
  chip.run(program(1));  // 4 rows from 60: [60, 64) fit
  expect_chip_works(chip);
}

TEST(Errors, AccumulatorDrainOfABadType) {
  Chip chip(small_config());
  for (isa::DType t : {isa::DType::I8, isa::DType::BF16}) {
    ProgramBuilder b;
    b.li(1, 1).li(2, 4);
    b.op(Op::VACC, {0, 0, 1, 2, 2, 0, 0, int64_t(t), int64_t(isa::DType::F32)});
    const std::string n = isa::dtype_name(t);
    EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
              "pc 2 (vpu.acc r0, r0, r1, r2, r2, r0, r0, " + n + ", f32): accumulators read as " + n +
                  ": adt must be i32 or f32");
  }
  expect_chip_works(chip);
}

// vpu.acc res adds a residual of the output's type in place of the scale: an integer output, or a scale beside it,
// is refused at the instruction
TEST(Errors, AccumulatorDrainWithAResidualOfABadKind) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 1).li(2, 4);
  b.op(Op::VACC, {0, 0, 1, 2, 2, 0, 0, int64_t(isa::DType::F32), int64_t(isa::DType::I32)}).with("res", 1);
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 2 (vpu.acc r0, r0, r1, r2, r2, r0, r0, f32, i32, res): res adds a residual of the output's type: odt "
            "must be bf16 or f32, not i32");
  ProgramBuilder c;
  c.li(1, 1).li(2, 4);
  c.op(Op::VACC, {0, 0, 1, 2, 2, 0, 0, int64_t(isa::DType::F32), int64_t(isa::DType::BF16)})
      .with("res", 1).with("scale_en", 1);
  EXPECT_EQ(error_of([&] { chip.run(c.build()); }),
            "pc 2 (vpu.acc r0, r0, r1, r2, r2, r0, r0, f32, bf16, scale_en, res): res takes the scale operand as the "
            "residual's address: no scale_en");
  expect_chip_works(chip);
}

TEST(Errors, SemSetS0) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::SEMSET, {0, 1});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }), "pc 0 (sem.set s0, 1): semaphore s0 does not exist (s1..s31)");
  expect_chip_works(chip);
}

TEST(Errors, SemaphoreCountsUpTo65535) {
  // A semaphore is a counter of 0..65535 (isa::kSemMax, sem.set's u16): a signal past it is an error at the
  // signalling instruction, not a silent wrap or an unbounded count.
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::SEMSET, {1, 65534});
  b.op(Op::VSYNC).signal(1);  // 65535: fine
  ProgramBuilder ok = b;
  b.op(Op::VSYNC).signal(1);  // past it
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "pc 2 (vpu.sync signal=s1): semaphore s1 would count past 65535 (signalled at 65535)");
  ok.op(Op::VSYNC).wait(1).signal(1);  // takes one first: 65534 -> 65535 again
  chip.run(ok.build());
  expect_chip_works(chip);
}

TEST(Errors, DeadlockNamesEveryBlockedUnit) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::MXUSYNC).wait(3);  // dispatched 0, waits from 1
  b.op(Op::VSYNC).wait(4);    // dispatched 1, waits from 2
  b.op(Op::HALT);             // at 2: waits for the units
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "deadlock at cycle 2: mxu waits for s3 (value 0) at pc 0 (mxu.sync wait=s3); vpu waits for s4 (value 0) "
            "at pc 1 (vpu.sync wait=s4); core waits for the units to drain at pc 2 (halt)");
  expect_chip_works(chip);
}

TEST(Errors, DeadlockWithAFullQueue) {
  Chip chip(small_config({"core.queue_depth=1"}));
  ProgramBuilder b;
  for (int i = 0; i < 3; ++i) b.op(Op::DMAINSYNC).wait(7);
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }),
            "deadlock at cycle 2: dmain waits for s7 (value 0) at pc 0 (dmain.sync wait=s7); core waits for space "
            "in the dmain queue at pc 2 (dmain.sync wait=s7)");
  expect_chip_works(chip);
}

TEST(Errors, DivisionByZero) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 5).op(Op::DIV, {2, 1, 0});
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }), "pc 1 (div r2, r1, r0): division by zero");
  ProgramBuilder c;
  c.li(1, 5).op(Op::REM, {2, 1, 0});
  EXPECT_EQ(error_of([&] { chip.run(c.build()); }), "pc 1 (rem r2, r1, r0): division by zero");
  expect_chip_works(chip);
}

TEST(Errors, BranchOutsideTheProgram) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::JMP, {3}).op(Op::NOP);
  EXPECT_EQ(error_of([&] { chip.run(b.build()); }), "pc 0 (jmp 3): branch target 3 outside the program (0..2)");
  ProgramBuilder c;
  c.op(Op::JMP, {2}).op(Op::NOP);  // exactly the end is allowed: a halt
  EXPECT_EQ(chip.run(c.build()).stats.cycles, 2u);
}

TEST(Errors, MaxCyclesInAScalarLoop) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.op(Op::NOP).op(Op::JMP, {0});
  RunOptions o;
  o.max_cycles = 1000;
  EXPECT_EQ(error_of([&] { chip.run(b.build(), o); }), "still running after 1000 cycles at pc 0 (nop)");
  expect_chip_works(chip);
}

TEST(Errors, MaxCyclesWhileUnitsAreBusy) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(3, 64).li(4, 1024);
  b.op(Op::DMALD, {0, 0, 3, 4, 4, 0});  // 64 KiB of HBM (rows 1024 apart) into one VMEM row: 10 + 2048 cycles
  RunOptions o;
  o.max_cycles = 100;
  EXPECT_EQ(error_of([&] { chip.run(b.build(), o); }), "still running after 100 cycles at pc 3 (end of program)");
  expect_chip_works(chip);
  // Enough cycles: exactly the run's length is allowed. 2 li + 1 + 10 + 2048 + 1 = 2062.
  o.max_cycles = 2062;
  EXPECT_EQ(chip.run(b.build(), o).stats.cycles, 2062u);
  o.max_cycles = 2061;
  EXPECT_EQ(error_of([&] { chip.run(b.build(), o); }), "still running after 2061 cycles at pc 3 (end of program)");
}

TEST(Errors, UndecodableWord) {
  Chip chip(small_config());
  isa::Program p;
  p.code = {0xff};
  std::string err = error_of([&] { chip.run(p); });
  EXPECT_EQ(err.rfind("pc 0: ", 0), 0u) << err;
}

TEST(Errors, SourceLineInMessages) {
  Chip chip(small_config());
  ProgramBuilder b;
  b.li(1, 5).op(Op::DIV, {2, 1, 0});
  isa::Program p = b.build();
  p.source = {"k.s:1", "k.s:2"};
  EXPECT_EQ(error_of([&] { chip.run(p); }), "pc 1 (div r2, r1, r0) at k.s:2: division by zero");
}

TEST(Errors, HostAccessOutsideHbm) {
  Chip chip(small_config());
  uint8_t x[16] = {};
  EXPECT_EQ(error_of([&] { chip.write_hbm((uint64_t(1) << 30) - 8, x, 16); }),
            "HBM write [0x3ffffff8, 0x40000008) outside 1024 MiB");
  EXPECT_EQ(error_of([&] { chip.read_hbm(uint64_t(1) << 40, x, 1); }), "HBM read [0x10000000000, 0x10000000001) outside 1024 MiB");
}

TEST(Errors, GatherIndexOutsideTheTableNamesPcInstructionAndIndex) {
  Chip chip(small_config());
  for (int32_t bad : {-1, 10}) {
    const std::vector<int32_t> ids = {3, bad, 0, 9};
    std::vector<uint8_t> bytes(16);
    std::memcpy(bytes.data(), ids.data(), 16);
    chip.write_hbm(0, bytes.data(), bytes.size());
    ProgramBuilder b;
    b.li(1, 256).li(2, 4096).li(3, 0).li(4, 4).li(5, 16).li(6, 10).li(7, 1);
    b.op(Op::DMALD, {3, 3, 7, 5, 5, 5});  // the 4 indices (16 bytes) from HBM 0 into VMEM 0
    b.op(Op::FENCE);
    b.op(Op::DMAGATHER, {1, 2, 3, 4, 5, 5, 6});
    const std::string what = bad < 0 ? "index -1 (row 1 of 4, at VMEM 0x4) is negative"
                                     : "index 10 (row 1 of 4, at VMEM 0x4) is not below the table's count 10";
    EXPECT_EQ(error_of([&] { chip.run(b.build()); }), "pc 9 (dma.gather r1, r2, r3, r4, r5, r5, r6): " + what);
  }
  expect_chip_works(chip);
}

}  // namespace
}  // namespace tpusim::sim::test
