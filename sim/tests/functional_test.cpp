// Functional results: the matrix unit against naive loops, the vector unit's operations and numerics, DMA.
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "test_util.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::sim::test {
namespace {

constexpr int64_t kI8 = 0, kI32 = 1, kBF16 = 2, kF32 = 3;
constexpr uint64_t kOut = 1 << 20;  // HBM address where results are stored

template <class T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(T));
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}
template <class T>
std::vector<T> read_as(const std::vector<uint8_t>& b, size_t offset, size_t n) {
  std::vector<T> v(n);
  std::memcpy(v.data(), b.data() + offset, n * sizeof(T));
  return v;
}
void put(std::vector<uint8_t>& dst, size_t offset, const std::vector<uint8_t>& src) {
  if (dst.size() < offset + src.size()) dst.resize(offset + src.size());
  std::memcpy(dst.data() + offset, src.data(), src.size());
}

// Copies `vmem` into VMEM [0, size) through HBM, runs `ops` (which may use r10..r31) between fences, and returns
// VMEM [0, size) as it is afterwards (through HBM again). Uses r1..r3.
std::vector<uint8_t> run_on_vmem(Chip& chip, const std::vector<uint8_t>& vmem,
                                 const std::function<void(ProgramBuilder&)>& ops) {
  chip.write_hbm(0, vmem.data(), vmem.size());
  ProgramBuilder b;
  b.li(1, static_cast<int64_t>(vmem.size())).li(2, 1).li(3, kOut);
  b.op(Op::DMALD, {0, 0, 2, 1, 0, 0}).op(Op::FENCE);
  ops(b);
  b.op(Op::FENCE).op(Op::DMAST, {3, 0, 2, 1, 0, 0});
  chip.run(b.build());
  std::vector<uint8_t> out(vmem.size());
  chip.read_hbm(kOut, out.data(), out.size());
  return out;
}

float bf16_round(float x) { return isa::f32_from_bf16(isa::bf16_from_f32(x)); }

// ---- matrix unit ------------------------------------------------------------------------------------------

// VMEM layout for the GEMM tests: W1 at 0, W2 at 4096, X1 at 8192, X2 at 16384 (rows of k elements, dense),
// results (m x n 32-bit words, rows of `cols` words) at 32768.
struct Gemm {
  int m, k, n;
  DType dtype;
};

// ACC[0..m) = X1 W1, then += X2 W2 (accumulate flag); returns the m x n accumulator words via vpu.acc.
std::vector<uint32_t> run_gemm(Chip& chip, const Gemm& g, const std::vector<uint8_t>& w1,
                               const std::vector<uint8_t>& x1, const std::vector<uint8_t>& w2,
                               const std::vector<uint8_t>& x2) {
  std::vector<uint8_t> vmem(32768 + size_t(g.m) * g.n * 4);
  put(vmem, 0, w1), put(vmem, 4096, w1.empty() ? w1 : w2), put(vmem, 8192, x1), put(vmem, 16384, x2);
  const int64_t es = isa::dtype_size(g.dtype), dtype = static_cast<int64_t>(g.dtype);
  const int64_t adt = g.dtype == DType::I8 ? kI32 : kF32;
  auto out = run_on_vmem(chip, vmem, [&](ProgramBuilder& b) {
    b.li(10, g.k).li(11, g.n).li(12, g.n * es).li(13, g.k * es).li(14, g.m);
    b.li(15, 4096).li(16, 8192).li(17, 16384).li(18, 32768).li(19, g.n * 4);
    b.op(Op::MXULW, {0, 10, 11, 12, dtype});                 // W1: k rows of n
    b.op(Op::MXUMM, {16, 14, 0, 13, dtype});                 // X1: m rows of k
    b.op(Op::MXULW, {15, 10, 11, 12, dtype});                // W2
    b.op(Op::MXUMM, {17, 14, 0, 13, dtype}).with("accumulate", 1).signal(1);
    b.op(Op::VACC, {18, 0, 14, 11, 19, 0, 0, adt, adt}).wait(1);  // copy the accumulators out
  });
  return read_as<uint32_t>(out, 32768, size_t(g.m) * g.n);
}

TEST(Functional, MatmulInt8IsExact) {
  Chip chip(small_config({"mxu.rows=32", "mxu.cols=32"}));
  const Gemm g{40, 32, 24, DType::I8};
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> d(-128, 127);
  std::vector<int8_t> w1(g.k * g.n), w2(g.k * g.n), x1(g.m * g.k), x2(g.m * g.k);
  for (auto* v : {&w1, &w2, &x1, &x2})
    for (auto& e : *v) e = static_cast<int8_t>(d(rng));
  // Worst case in one row: every product is (-128) * (-128) = 2^14.
  for (int l = 0; l < g.k; ++l) x1[l] = -128, w1[l * g.n] = -128;
  auto acc = run_gemm(chip, g, bytes_of(w1), bytes_of(x1), bytes_of(w2), bytes_of(x2));
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      int64_t ref = 0;
      for (int l = 0; l < g.k; ++l)
        ref += int64_t(x1[i * g.k + l]) * w1[l * g.n + j] + int64_t(x2[i * g.k + l]) * w2[l * g.n + j];
      ASSERT_EQ(static_cast<int32_t>(acc[i * g.n + j]), ref) << i << "," << j;
    }
  EXPECT_EQ(static_cast<int32_t>(acc[0]), 32 * 16384 + [&] {
    int64_t s = 0;
    for (int l = 0; l < g.k; ++l) s += int64_t(x2[l]) * w2[l * g.n];
    return static_cast<int32_t>(s);
  }());
}

TEST(Functional, MatmulBf16WithinTolerance) {
  Chip chip(small_config({"mxu.rows=32", "mxu.cols=32"}));
  const Gemm g{20, 32, 32, DType::BF16};
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> d(-4, 4);
  std::vector<uint16_t> w1(g.k * g.n), w2(g.k * g.n), x1(g.m * g.k), x2(g.m * g.k);
  for (auto* v : {&w1, &w2, &x1, &x2})
    for (auto& e : *v) e = isa::bf16_from_f32(d(rng));
  auto f = [](uint16_t h) { return static_cast<double>(isa::f32_from_bf16(h)); };
  auto acc = run_gemm(chip, g, bytes_of(w1), bytes_of(x1), bytes_of(w2), bytes_of(x2));
  for (int i = 0; i < g.m; ++i)
    for (int j = 0; j < g.n; ++j) {
      double ref = 0, mag = 0;
      for (int l = 0; l < g.k; ++l) {
        double p1 = f(x1[i * g.k + l]) * f(w1[l * g.n + j]), p2 = f(x2[i * g.k + l]) * f(w2[l * g.n + j]);
        ref += p1 + p2, mag += std::fabs(p1) + std::fabs(p2);
      }
      // f32 sums of 2k exact products: error at most about 2k ulps of the magnitude.
      EXPECT_NEAR(isa::f32_from_bits(acc[i * g.n + j]), ref, mag * 2 * g.k * 6e-8 + 1e-30) << i << "," << j;
    }
}

TEST(Functional, MatmulLeavesColumnsBeyondNAndOtherRowsAlone) {
  Chip chip(small_config());
  // ACC rows 0..3 = 7 via a first pass with n = 4; then a 2-column tile writes only columns 0, 1 of rows 1, 2.
  std::vector<uint8_t> vmem(4096);
  for (int i = 0; i < 16; ++i) vmem[i] = 1;          // W: 4x4 ones (i8)
  for (int i = 0; i < 16; ++i) vmem[64 + i] = 0;     // X1: zeros
  vmem[64] = 7, vmem[68] = 7, vmem[72] = 7, vmem[76] = 7;  // X1[i][0] = 7: every ACC[i][j] = 7
  for (int i = 0; i < 8; ++i) vmem[128 + i] = 2;     // X2: 2 rows of 4 twos
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& b) {
    b.li(10, 4).li(11, 64).li(12, 2).li(13, 128).li(14, 1).li(15, 256).li(16, 16);
    b.op(Op::MXULW, {0, 10, 10, 10, kI8});
    b.op(Op::MXUMM, {11, 10, 0, 10, kI8});
    b.op(Op::MXULW, {0, 10, 12, 10, kI8});           // k = 4, n = 2
    b.op(Op::MXUMM, {13, 12, 14, 10, kI8}).signal(1);  // rows 1, 2 of ACC: 4 * 2 = 8
    b.op(Op::VACC, {15, 0, 10, 10, 16, 0, 0, kI32, kI32}).wait(1);
  });
  auto acc = read_as<int32_t>(out, 256, 16);
  EXPECT_EQ(acc, (std::vector<int32_t>{7, 7, 7, 7, 8, 8, 7, 7, 8, 8, 7, 7, 7, 7, 7, 7}));
}

// ---- vector unit ------------------------------------------------------------------------------------------

TEST(Functional, VectorI32WrapsAround) {
  Chip chip(small_config());
  const int32_t mx = std::numeric_limits<int32_t>::max(), mn = std::numeric_limits<int32_t>::min();
  std::vector<int32_t> a = {5, -7, mx, mn, 100000}, b = {3, 9, 1, -1, 100000};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(a)), put(vmem, 64, bytes_of(b));
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 64).li(12, 5).li(20, 128).li(21, 192).li(22, 256).li(23, 320).li(24, 384);
    p.op(Op::VADD, {20, 10, 11, 12, kI32});
    p.op(Op::VSUB, {21, 10, 11, 12, kI32});
    p.op(Op::VMUL, {22, 10, 11, 12, kI32});
    p.op(Op::VMAX, {23, 10, 11, 12, kI32});
    p.op(Op::VMIN, {24, 10, 11, 12, kI32});
  });
  EXPECT_EQ(read_as<int32_t>(out, 128, 5), (std::vector<int32_t>{8, 2, mn, mx, 200000}));
  EXPECT_EQ(read_as<int32_t>(out, 192, 5), (std::vector<int32_t>{2, -16, mx - 1, mn + 1, 0}));
  EXPECT_EQ(read_as<int32_t>(out, 256, 5), (std::vector<int32_t>{15, -63, mx, mn, 1410065408}));  // 1e10 mod 2^32
  EXPECT_EQ(read_as<int32_t>(out, 320, 5), (std::vector<int32_t>{5, 9, mx, -1, 100000}));
  EXPECT_EQ(read_as<int32_t>(out, 384, 5), (std::vector<int32_t>{3, -7, 1, mn, 100000}));
}

TEST(Functional, VectorBf16RoundsToNearestEven) {
  Chip chip(small_config());
  auto h = [](float x) { return isa::bf16_from_f32(x); };
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even gives 1. 1 + 1.5 * 2^-8 rounds up.
  std::vector<uint16_t> a = {h(1), h(1), h(-3), h(0.5f)}, b = {h(0x1p-8f), h(0x1.8p-8f), h(2), h(0.25f)};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(a)), put(vmem, 64, bytes_of(b));
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 64).li(12, 4).li(20, 128).li(21, 192);
    p.op(Op::VADD, {20, 10, 11, 12, kBF16});
    p.op(Op::VMUL, {21, 10, 11, 12, kBF16});
  });
  auto sum = read_as<uint16_t>(out, 128, 4), prod = read_as<uint16_t>(out, 192, 4);
  EXPECT_EQ(isa::f32_from_bf16(sum[0]), 1.0f);
  EXPECT_EQ(isa::f32_from_bf16(sum[1]), 1.0078125f);
  EXPECT_EQ(isa::f32_from_bf16(sum[2]), -1.0f);
  EXPECT_EQ(isa::f32_from_bf16(sum[3]), 0.75f);
  EXPECT_EQ(isa::f32_from_bf16(prod[2]), -6.0f);
  EXPECT_EQ(isa::f32_from_bf16(prod[1]), bf16_round(1.0f * 0x1.8p-8f));
}

// vpu.madd: a * b + c, the product rounded to the type as vpu.mul gives it, then the sum as vpu.add: the bits of
// the two instructions in turn. bf16: (1 + 2^-7)^2 = 1 + 2^-6 + 2^-14 rounds to 1 + 2^-6 (a fused multiply-add
// would keep the 2^-14 and, with c = -(1 + 2^-6), give 2^-14 instead of 0); i32 wraps in both steps.
TEST(Functional, VectorMultiplyAddRoundsTheProductFirst) {
  Chip chip(small_config());
  auto h = [](float x) { return isa::bf16_from_f32(x); };
  std::vector<uint16_t> a = {h(1.0078125f), h(3), h(-2)}, b = {h(1.0078125f), h(0.5f), h(4)},
                        c = {h(-1.015625f), h(1), h(0.25f)};
  const int32_t mx = std::numeric_limits<int32_t>::max();
  std::vector<int32_t> ia = {mx, 7, -3}, ib = {2, 6, 5}, ic = {3, -2, 1};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(a)), put(vmem, 64, bytes_of(b)), put(vmem, 128, bytes_of(c));
  put(vmem, 512, bytes_of(ia)), put(vmem, 576, bytes_of(ib)), put(vmem, 640, bytes_of(ic));
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 64).li(12, 128).li(13, 3).li(20, 192).li(21, 256).li(22, 320);
    p.li(14, 512).li(15, 576).li(16, 640).li(23, 704);
    p.op(Op::VMADD, {20, 10, 11, 12, 13, kBF16});
    p.op(Op::VMUL, {21, 10, 11, 13, kBF16});
    p.op(Op::VADD, {22, 21, 12, 13, kBF16});
    p.op(Op::VMADD, {23, 14, 15, 16, 13, kI32});
  });
  auto fused = read_as<uint16_t>(out, 192, 3), two = read_as<uint16_t>(out, 320, 3);
  EXPECT_EQ(fused, two);
  EXPECT_EQ(isa::f32_from_bf16(fused[0]), 0.0f);  // not 2^-14
  EXPECT_EQ(isa::f32_from_bf16(fused[1]), 2.5f);
  EXPECT_EQ(isa::f32_from_bf16(fused[2]), -7.75f);
  EXPECT_EQ(read_as<int32_t>(out, 704, 3), (std::vector<int32_t>{1, 40, -14}));  // 2 * max wraps to -2, + 3 = 1
}

TEST(Functional, VectorUnaryOps) {
  Chip chip(small_config());
  std::vector<float> x = {0.5f, -1.25f, 4.0f, 2.0f, -0.0f, 9.0f, 0.1f, 3.0f};
  std::vector<int8_t> xi = {-5, 0, 7, -128, 127, 1, -1, 3};
  std::vector<uint8_t> vmem(2048);
  put(vmem, 0, bytes_of(x)), put(vmem, 64, bytes_of(xi));
  for (int i = 0; i < 8; ++i) put(vmem, 96 + 2 * i, bytes_of(std::vector<uint16_t>{isa::bf16_from_f32(x[i])}));
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 64).li(12, 8).li(13, 96);
    p.li(20, 256).li(21, 320).li(22, 384).li(23, 448).li(24, 512).li(25, 576);
    p.op(Op::VRELU, {20, 10, 12, kF32});
    p.op(Op::VRELU, {21, 11, 12, kI8});
    p.op(Op::VEXP, {22, 10, 12, kF32});
    p.op(Op::VRECIP, {23, 10, 12, kF32});
    p.op(Op::VRSQRT, {24, 10, 12, kF32});
    p.op(Op::VEXP, {25, 13, 12, kBF16});
  });
  auto relu = read_as<float>(out, 256, 8);
  auto relu_i8 = read_as<int8_t>(out, 320, 8);
  auto ex = read_as<float>(out, 384, 8), rc = read_as<float>(out, 448, 8), rs = read_as<float>(out, 512, 8);
  auto exb = read_as<uint16_t>(out, 576, 8);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(relu[i], x[i] < 0 ? 0.0f : x[i]);
    EXPECT_EQ(relu_i8[i], std::max<int8_t>(xi[i], 0));
    EXPECT_EQ(ex[i], std::exp(x[i]));
    EXPECT_EQ(rc[i], 1.0f / x[i]);
    if (x[i] >= 0) {
      EXPECT_EQ(rs[i], 1.0f / std::sqrt(x[i]));
    }
    EXPECT_EQ(exb[i], isa::bf16_from_f32(std::exp(bf16_round(x[i]))));
  }
  EXPECT_TRUE(std::isnan(rs[1]));
}

TEST(Functional, CastsRoundToNearestEvenAndSaturate) {
  Chip chip(small_config());
  std::vector<float> x = {2.5f, 3.5f, -2.5f, 300.0f, -300.0f, std::nanf(""), 1.49f, -0.5f};
  // 2^24 + 2^16 + 1 is just above halfway between two bf16 values: a single rounding goes up; rounding through
  // f32 first (to 2^24 + 2^16, a tie) would go down to 2^24.
  std::vector<int32_t> xi = {(1 << 24) + (1 << 16) + 1, 1000, -129, 77};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(x)), put(vmem, 64, bytes_of(xi));
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 64).li(12, 8).li(13, 4).li(14, isa::bits_from_f32(0.5f));
    p.li(20, 128).li(21, 160).li(22, 192).li(23, 224);
    p.op(Op::VCAST, {20, 10, 12, 0, kF32, kI8});
    p.op(Op::VCAST, {21, 10, 12, 14, kF32, kI8}).with("scale_en", 1);  // x * 0.5
    p.op(Op::VCAST, {22, 11, 13, 0, kI32, kBF16});
    p.op(Op::VCAST, {23, 11, 13, 0, kI32, kI8});
  });
  EXPECT_EQ(read_as<int8_t>(out, 128, 8), (std::vector<int8_t>{2, 4, -2, 127, -128, 0, 1, 0}));
  EXPECT_EQ(read_as<int8_t>(out, 160, 8), (std::vector<int8_t>{1, 2, -1, 127, -128, 0, 1, 0}));  // 1.25 1.75 ...
  auto b = read_as<uint16_t>(out, 192, 4);
  EXPECT_EQ(isa::f32_from_bf16(b[0]), 16777216.0f + 131072.0f);
  EXPECT_EQ(isa::f32_from_bf16(b[1]), 1000.0f);
  EXPECT_EQ(isa::f32_from_bf16(b[2]), -129.0f);
  EXPECT_EQ(read_as<int8_t>(out, 224, 4), (std::vector<int8_t>{127, 127, -128, 77}));
}

TEST(Functional, RowReductions) {
  Chip chip(small_config());
  // 3 rows of 5, row stride 32 bytes.
  std::vector<uint8_t> vmem(1024);
  std::vector<int32_t> rows_i = {1, 2, 3, 4, 5, -10, 0, 10, 7, -3, 2147483647, 1, 0, 0, 0};
  std::vector<float> rows_f = {0.5f, 0.25f, -1, 8, 2, -3, -2, -1, -4, -5, 1e30f, 1e30f, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    put(vmem, i * 32, bytes_of(std::vector<int32_t>(rows_i.begin() + 5 * i, rows_i.begin() + 5 * i + 5)));
    put(vmem, 128 + i * 32, bytes_of(std::vector<float>(rows_f.begin() + 5 * i, rows_f.begin() + 5 * i + 5)));
  }
  auto out = run_on_vmem(chip, vmem, [](ProgramBuilder& p) {
    p.li(10, 0).li(11, 128).li(12, 3).li(13, 5).li(14, 32).li(20, 512).li(21, 544).li(22, 576).li(23, 608);
    p.op(Op::VRSUM, {20, 10, 12, 13, 14, kI32});
    p.op(Op::VRMAX, {21, 10, 12, 13, 14, kI32});
    p.op(Op::VRSUM, {22, 11, 12, 13, 14, kF32});
    p.op(Op::VRMAX, {23, 11, 12, 13, 14, kF32});
  });
  EXPECT_EQ(read_as<int32_t>(out, 512, 3), (std::vector<int32_t>{15, 4, std::numeric_limits<int32_t>::min()}));
  EXPECT_EQ(read_as<int32_t>(out, 544, 3), (std::vector<int32_t>{5, 10, 2147483647}));
  EXPECT_EQ(read_as<float>(out, 576, 3), (std::vector<float>{9.75f, -15.0f, 2e30f}));
  EXPECT_EQ(read_as<float>(out, 608, 3), (std::vector<float>{8.0f, -1.0f, 1e30f}));
}

TEST(Functional, AccumulatorDrainWithBiasReluScaleAndInt8Requant) {
  Chip chip(small_config());
  // W = identity (i8), so ACC = X: 4 rows of 4 i32 values.
  std::vector<int8_t> w = {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1};
  std::vector<int8_t> x = {10, -20, 100, 127, -128, 5, 0, 60, 1, 3, 3, 3, 90, -90, 45, -45};
  std::vector<int32_t> bias = {5, 20, 100, -27};
  const float scale = 0.75f;
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(w)), put(vmem, 64, bytes_of(x)), put(vmem, 128, bytes_of(bias));
  auto out = run_on_vmem(chip, vmem, [&](ProgramBuilder& p) {
    p.li(10, 4).li(11, 64).li(12, 128).li(13, isa::bits_from_f32(scale)).li(20, 256).li(21, 512).li(22, 16);
    p.op(Op::MXULW, {0, 10, 10, 10, kI8});
    p.op(Op::MXUMM, {11, 10, 0, 10, kI8}).signal(1);
    p.op(Op::VACC, {20, 0, 10, 10, 10, 12, 13, kI32, kI8}).wait(1)
        .with("bias_en", 1).with("relu", 1).with("scale_en", 1);
    p.op(Op::VACC, {21, 0, 10, 10, 22, 12, 0, kI32, kI32}).with("bias_en", 1);  // bias only, i32 out
  });
  auto q = read_as<int8_t>(out, 256, 16);
  auto plain = read_as<int32_t>(out, 512, 16);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) {
      int32_t v = x[i * 4 + j] + bias[j];
      EXPECT_EQ(plain[i * 4 + j], v);
      float y = static_cast<float>(std::max(v, 0)) * scale;
      double r = std::nearbyint(static_cast<double>(y));
      EXPECT_EQ(q[i * 4 + j], static_cast<int8_t>(std::clamp(r, -128.0, 127.0))) << i << "," << j;
    }
  // Spot checks: (10 + 5) * 0.75 = 11.25 -> 11; (100 + 100) * 0.75 = 150 -> 127; (1 + 5) * 0.75 = 4.5 -> 4 (even).
  EXPECT_EQ(q[0], 11);
  EXPECT_EQ(q[2], 127);
  EXPECT_EQ(q[8], 4);
  EXPECT_EQ(q[1], 0);  // -20 + 20 = 0
}

TEST(Functional, AccumulatorDrainF32ToBf16WithBias) {
  Chip chip(small_config());
  auto h = [](float v) { return isa::bf16_from_f32(v); };
  std::vector<uint16_t> w = {h(1), 0, 0, 0, 0, h(2), 0, 0, 0, 0, h(1), 0, 0, 0, 0, h(1)};  // diag(1, 2, 1, 1)
  std::vector<uint16_t> x = {h(1.5f), h(-2), h(3), h(0.5f)};  // one row
  std::vector<float> bias = {0.25f, 1, -10, 0};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(w)), put(vmem, 64, bytes_of(x)), put(vmem, 128, bytes_of(bias));
  auto out = run_on_vmem(chip, vmem, [&](ProgramBuilder& p) {
    p.li(10, 4).li(11, 64).li(12, 128).li(13, 1).li(14, 8).li(20, 256);
    p.op(Op::MXULW, {0, 10, 10, 14, kBF16});
    p.op(Op::MXUMM, {11, 13, 0, 14, kBF16}).signal(1);
    p.op(Op::VACC, {20, 0, 13, 10, 14, 12, 0, kF32, kBF16}).wait(1).with("bias_en", 1).with("relu", 1);
  });
  auto y = read_as<uint16_t>(out, 256, 4);
  EXPECT_EQ(isa::f32_from_bf16(y[0]), 1.75f);
  EXPECT_EQ(isa::f32_from_bf16(y[1]), 0.0f);  // -4 + 1 -> relu
  EXPECT_EQ(isa::f32_from_bf16(y[2]), 0.0f);  // 3 - 10 -> relu
  EXPECT_EQ(isa::f32_from_bf16(y[3]), 0.5f);
}

// vpu.acc res: the residual added in the drain's pass, relu after the add, the bits of vpu.acc (no relu) then
// vpu.add relu; in bf16 (the sum computed in f32, rounded to nearest even once) and in f32
TEST(Functional, AccumulatorDrainAddsAResidualInTheSamePass) {
  Chip chip(small_config());
  auto h = [](float v) { return isa::bf16_from_f32(v); };
  std::vector<uint16_t> w = {h(1), 0, 0, 0, 0, h(2), 0, 0, 0, 0, h(1), 0, 0, 0, 0, h(1)};  // diag(1, 2, 1, 1)
  // two rows of x; the accumulators hold x W: (1.5, -4, 3, 0.5) and (1, 0.5, -0, 256)
  std::vector<uint16_t> x = {h(1.5f), h(-2), h(3), h(0.5f), h(1), h(0.25f), h(-0.0f), h(256)};
  std::vector<float> bias = {0.25f, 1, -10, 0};
  // with the bias, (1.75, -3, -7, 0.5) and (1.25, 1.5, -10, 256). The residual, as the output's rows (row pitch
  // 8 bytes): 1.75 - 2 < 0 -> +0 after relu; -3 + 3 -> +0; -7 + 7.5 = 0.5; 0.5 + 0.5 = 1; 1.25 + 2^-8 = 1.25390625,
  // half a bf16 ulp above 1.25, rounds to 1.25 (even); 1.5 + 2^-8 to 1.5 (even); -10 - 0 -> +0; 256 + 1 = 257, a
  // tie between 256 and 258, to 256
  std::vector<uint16_t> r = {h(-2), h(3), h(7.5f), h(0.5f), h(0.00390625f), h(0.00390625f), h(-0.0f), h(1)};
  // f32, no relu: 1.75 + 1e-8 rounds to 1.75 in f32; -3 + 3; -7 + 7; 0.5 - 0.5; 1.25 + 2^-30 to 1.25; 1.5 + 0.5;
  // -10 + 10; 256 + 1 = 257 (exact in f32)
  std::vector<float> r32 = {1e-8f, 3, 7, -0.5f, 0x1p-30f, 0.5f, 10, 1};
  std::vector<uint8_t> vmem(1024);
  put(vmem, 0, bytes_of(w)), put(vmem, 64, bytes_of(x)), put(vmem, 128, bytes_of(bias)), put(vmem, 192, bytes_of(r));
  put(vmem, 512, bytes_of(r32));
  auto out = run_on_vmem(chip, vmem, [&](ProgramBuilder& p) {
    // r10 = 4, r11 = x, r12 = bias, r13 = 2 rows, r14 = 8 (a row of 4 bf16), r15 = r, r16 = 16 (a row of 4 f32)
    p.li(10, 4).li(11, 64).li(12, 128).li(13, 2).li(14, 8).li(15, 192).li(16, 16);
    p.li(20, 256).li(21, 320).li(22, 384).li(23, 2 * 4).li(24, 512);
    p.op(Op::MXULW, {0, 10, 10, 14, kBF16});
    p.op(Op::MXUMM, {11, 13, 0, 14, kBF16}).signal(1);
    // fused, bf16: 256
    p.op(Op::VACC, {20, 0, 13, 10, 14, 12, 15, kF32, kBF16}).wait(1).with("bias_en", 1).with("relu", 1)
        .with("res", 1);
    // the same in two instructions: vpu.acc (no relu) into 320, vpu.add relu of r into 320
    p.op(Op::VACC, {21, 0, 13, 10, 14, 12, 0, kF32, kBF16}).with("bias_en", 1);
    p.op(Op::VADD, {21, 21, 15, 14, kBF16}).with("relu", 1);
    // fused, f32 without relu: the f32 residual at 512 (rows 16 bytes apart), out at 384
    p.op(Op::VACC, {22, 0, 13, 10, 16, 12, 24, kF32, kF32}).with("bias_en", 1).with("res", 1);
  });
  auto fused = read_as<uint16_t>(out, 256, 8);
  auto two = read_as<uint16_t>(out, 320, 8);
  EXPECT_EQ(fused, two);
  const std::vector<float> expect = {0.0f, 0.0f, 0.5f, 1.0f, 1.25f, 1.5f, 0.0f, 256.0f};
  for (int i = 0; i < 8; ++i) EXPECT_EQ(isa::f32_from_bf16(fused[static_cast<size_t>(i)]), expect[static_cast<size_t>(i)]) << i;
  EXPECT_EQ(fused[6], 0) << "+0, not -0";
  EXPECT_EQ(read_as<float>(out, 384, 8), (std::vector<float>{1.75f, 0, 0, 0, 1.25f, 2, 0, 257}));
}

// ---- DMA --------------------------------------------------------------------------------------------------

TEST(Functional, StridedDmaGathersAndScatters) {
  Chip chip(small_config());
  std::vector<uint8_t> src(64);
  for (int i = 0; i < 64; ++i) src[i] = static_cast<uint8_t>(i);
  chip.write_hbm(0, src.data(), src.size());
  ProgramBuilder b;
  // Gather 4 rows of 3 bytes from HBM every 16 bytes into VMEM every 4 bytes, then store them densely.
  b.li(1, 4).li(2, 3).li(3, 16).li(4, 4).li(5, 4096);
  b.op(Op::DMALD, {0, 0, 1, 2, 3, 4}).signal(1);
  b.op(Op::DMAST, {5, 0, 1, 2, 2, 4}).wait(1);
  chip.run(b.build());
  std::vector<uint8_t> out(12);
  chip.read_hbm(4096, out.data(), out.size());
  EXPECT_EQ(out, (std::vector<uint8_t>{0, 1, 2, 16, 17, 18, 32, 33, 34, 48, 49, 50}));
}

TEST(Functional, HbmIsLazyAndZeroInitialised) {
  Chip chip(load_config("v4-like"));  // 32 GiB of HBM, touched at both ends
  const uint64_t top = (uint64_t(32) << 30) - 8;
  uint64_t v = 0x1122334455667788, r = 1, z = 1;
  chip.write_hbm(top, &v, 8);
  chip.read_hbm(top, &r, 8);
  chip.read_hbm(uint64_t(5) << 30, &z, 8);
  EXPECT_EQ(r, v);
  EXPECT_EQ(z, 0u);
}

TEST(Functional, TimingOnlyMovesNoData) {
  Chip chip(small_config());
  uint32_t v = 0xdeadbeef, r = 0;
  chip.write_hbm(0, &v, 4);
  ProgramBuilder b;
  b.li(1, 1).li(2, 4).li(3, 64);
  b.op(Op::DMALD, {0, 0, 1, 2, 0, 0}).signal(1).op(Op::DMAST, {3, 0, 1, 2, 0, 0}).wait(1);
  RunOptions o;
  o.functional = false;
  chip.run(b.build(), o);
  chip.read_hbm(64, &r, 4);
  EXPECT_EQ(r, 0u);
  chip.run(b.build());
  chip.read_hbm(64, &r, 4);
  EXPECT_EQ(r, v);
}

}  // namespace
}  // namespace tpusim::sim::test
