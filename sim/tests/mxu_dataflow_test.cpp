// mxu.dataflow: exact cycles of each dataflow's rules (sim/src/mxu.cpp; derivations in docs/dataflows.md), and
// the same accumulator contents whichever dataflow runs the program. small_config(): a 4x4 array (R = C = 4).
//
// Every program starts with 3 li (cycles 0-2), so mxu.lw is dispatched at 3 (front-end f = 4) and the mm after
// it at 4 (f = 5, or later if the front-end is still busy); the halt waits for the last completion and takes one
// cycle: total = last completion + 1. The tile is 4 x 4 (K = N = 4).
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = 0, kI32 = 1;

// r1 = 4 (k, n, and the row stride of i8 rows of 4), r2 = 64 (input address), r3 = m.
ProgramBuilder mxu_registers(int64_t m) {
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, m);
  return b;
}
isa::Program fold(int64_t m) {  // lw, mm
  ProgramBuilder b = mxu_registers(m);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  return b.build();
}
isa::Program two_folds(int64_t m) {  // lw, mm, lw, mm: the second tile loads while the first streams
  ProgramBuilder b = mxu_registers(m);
  b.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  b.op(Op::MXULW, {0, 1, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 1, kI8});
  return b.build();
}
uint64_t cycles(Chip& chip, const isa::Program& p) { return chip.run(p).stats.cycles; }

TEST(MxuDataflow, DefaultIsWeightStationary) {
  EXPECT_EQ(small_config().mxu.dataflow, "ws");
  EXPECT_THROW(small_config({"mxu.dataflow=rs"}), Error);
}

TEST(MxuDataflow, WeightStationary) {
  Chip chip(small_config({"mxu.dataflow=ws"}));
  // lw shifts the tile in over R = 4 cycles: [4, 8). mm (f = 5) swaps at 8 and streams m rows [8, 8 + m);
  // results at 8 + m + R + C - 2. m = 8: 8 + 8 + 6 = 22, total 23 (= 4 + 2R + C + M - 2 + 1).
  EXPECT_EQ(cycles(chip, fold(8)), 23u);
  // Two folds, m = 8: stream [8, 16); lw 2 loads [8, 12) (the shadow is free since the swap at 8); mm 2 swaps at
  // max(12, 16) = 16, streams [16, 24), results at 24 + 6 = 30: total 31.
  EXPECT_EQ(cycles(chip, two_folds(8)), 31u);
}

TEST(MxuDataflow, OutputStationary) {
  Chip chip(small_config({"mxu.dataflow=os"}));
  // lw stages K = 4 rows, one a cycle: [4, 8). mm m = 4: one fold of R = 4 rows, streams K = 4 cycles from
  // t0 = max(5, 8) = 8; its outputs drain at t0 + K + R - 1 + c for R cycles: results at
  // t0 + K + 2R + C - 2 = 8 + 4 + 8 + 2 = 22, total 23 (from the lw's start: 2K + 2R + C - 2 = 18).
  EXPECT_EQ(cycles(chip, fold(4)), 23u);
  // m = 8: two folds, t1 = t0 + max(K, R) = 12; results at 12 + 4 + 8 + 2 = 26, total 27.
  EXPECT_EQ(cycles(chip, fold(8)), 27u);
  // Two tiles, m = 8: mm 1 folds at 8 and 12 (stream_free 16, out_free 12 + 4 + 4 = 20); the front-end moves on
  // at 12, lw 2 stages [12, 16); mm 2: t0 = max(swap 16, stream_free 16, out_free - K = 16) = 16, t1 = 20;
  // results at 20 + 14 = 34, total 35.
  EXPECT_EQ(cycles(chip, two_folds(8)), 35u);
}

TEST(MxuDataflow, OutputStationaryDrainBoundsShortStreams) {
  Chip chip(small_config({"mxu.dataflow=os"}));
  // K = 2 < R = 4 (r4 = 2 rows in the tile): mm m = 12 is three folds spaced max(K, R) = 4, not K = 2: each
  // fold's R outputs per column hold the column's output port for R cycles.
  ProgramBuilder b;
  b.li(1, 4).li(2, 64).li(3, 12).li(4, 2);
  b.op(Op::MXULW, {0, 4, 1, 1, kI8}).op(Op::MXUMM, {2, 3, 0, 4, kI8});  // f = 5 for the lw, 6 for the mm
  // 4 li; lw f = 5: stage [5, 7); mm f = 6: t = 7, 11, 15; results at 15 + K + 2R + C - 2 = 15 + 12 = 27;
  // total 28.
  EXPECT_EQ(cycles(chip, b.build()), 28u);
}

TEST(MxuDataflow, InputStationary) {
  Chip chip(small_config({"mxu.dataflow=is"}));
  // lw stages the tile: [4, 8). mm m = 4 (f = 5): one fold of C = 4 rows of a, shifted into the PEs in R = 4
  // cycles [5, 9); the tile's N = 4 columns stream from t0 = max(9, 8) = 9; results at t0 + N + R + C - 2 =
  // 9 + 4 + 6 = 19, total 20.
  EXPECT_EQ(cycles(chip, fold(4)), 20u);
  // m = 8: the second block loads [9, 13) while the first streams; t1 = t0 + max(R, N) = 13; results at
  // 13 + 10 = 23, total 24.
  EXPECT_EQ(cycles(chip, fold(8)), 24u);
  // Two tiles, m = 8: mm 1 streams at 9 and 13 (stream_free 17); front-end moves on at 13; lw 2 stages
  // [13, 17); mm 2 loads its first block [13, 17) and streams at max(17, 17, swap 17) = 17, then 21; results at
  // 21 + 10 = 31, total 32.
  EXPECT_EQ(cycles(chip, two_folds(8)), 32u);
}

// ---- the same results, whichever the dataflow ------------------------------------------------------------

constexpr uint64_t kOut = 1 << 20;

// VMEM: W1 at 0 (k x n i8), W2 at 1024, X1 at 2048 (m x k i8), X2 at 4096; ACC[0..m) = X1 W1 + X2 W2 copied out
// (vpu.acc, i32) to 8192. Returns the m x n words.
std::vector<int32_t> gemm(Chip& chip, int m, int k, int n, const std::vector<int8_t>& w1,
                          const std::vector<int8_t>& w2, const std::vector<int8_t>& x1,
                          const std::vector<int8_t>& x2) {
  std::vector<uint8_t> vmem(8192 + m * n * 4);
  std::memcpy(vmem.data(), w1.data(), w1.size());
  std::memcpy(vmem.data() + 1024, w2.data(), w2.size());
  std::memcpy(vmem.data() + 2048, x1.data(), x1.size());
  std::memcpy(vmem.data() + 4096, x2.data(), x2.size());
  chip.write_hbm(0, vmem.data(), vmem.size());
  ProgramBuilder b;
  b.li(1, static_cast<int64_t>(vmem.size())).li(2, 1).li(3, kOut);
  b.op(Op::DMALD, {0, 0, 2, 1, 0, 0}).op(Op::FENCE);
  b.li(10, k).li(11, n).li(14, m).li(15, 1024).li(16, 2048).li(17, 4096).li(18, 8192).li(19, n * 4);
  b.op(Op::MXULW, {0, 10, 11, 11, kI8});
  b.op(Op::MXUMM, {16, 14, 0, 10, kI8});
  b.op(Op::MXULW, {15, 10, 11, 11, kI8});
  b.op(Op::MXUMM, {17, 14, 0, 10, kI8}).with("accumulate", 1).signal(1);
  b.op(Op::VACC, {18, 0, 14, 11, 19, 0, 0, kI32, kI32}).wait(1);
  b.op(Op::FENCE).op(Op::DMAST, {3, 0, 2, 1, 0, 0});
  chip.run(b.build());
  std::vector<int32_t> out(m * n);
  chip.read_hbm(kOut + 8192, out.data(), out.size() * 4);
  return out;
}

TEST(MxuDataflow, SameAccumulatorsInEveryDataflow) {
  // Three chips (constructed before any run: one SystemC elaboration), 8 x 6 arrays, the same program.
  Chip ws(small_config({"mxu.dataflow=ws", "mxu.rows=8", "mxu.cols=6"}));
  Chip os(small_config({"mxu.dataflow=os", "mxu.rows=8", "mxu.cols=6"}));
  Chip is(small_config({"mxu.dataflow=is", "mxu.rows=8", "mxu.cols=6"}));
  const int m = 19, k = 7, n = 5;  // m spans several folds of os (R = 8) and is (C = 6)
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> w1(k * n), w2(k * n), x1(m * k), x2(m * k);
  for (auto* v : {&w1, &w2, &x1, &x2})
    for (auto& e : *v) e = static_cast<int8_t>(d(rng));
  const auto a = gemm(ws, m, k, n, w1, w2, x1, x2);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      int64_t ref = 0;
      for (int l = 0; l < k; ++l) ref += int64_t(x1[i * k + l]) * w1[l * n + j] + int64_t(x2[i * k + l]) * w2[l * n + j];
      ASSERT_EQ(a[i * n + j], ref) << i << "," << j;
    }
  EXPECT_EQ(gemm(os, m, k, n, w1, w2, x1, x2), a);
  EXPECT_EQ(gemm(is, m, k, n, w1, w2, x1, x2), a);
}

}  // namespace
}  // namespace tpusim::sim::test
