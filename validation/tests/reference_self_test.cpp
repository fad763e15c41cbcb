// The reference machine against cases worked out by hand, and its numerics against the host's IEEE hardware.
// No simulator here: these tests pin the reference down, so that the comparisons in the other files mean something.
#include <cstring>
#include <limits>
#include <tuple>

#include "reference_harness.h"

namespace tpusim::reftest {
namespace {

using ref::cast_to_int;
using ref::round_half_even;
using ref::to_bf16;
using ref::to_f32;

TEST(ReferenceNumerics, RoundHalfEvenWorkedExamples) {
  EXPECT_EQ(round_half_even(0.5), 0);
  EXPECT_EQ(round_half_even(1.5), 2);
  EXPECT_EQ(round_half_even(2.5), 2);
  EXPECT_EQ(round_half_even(-2.5), -2);
  EXPECT_EQ(round_half_even(-3.5), -4);
  EXPECT_EQ(round_half_even(2.4999999), 2);
  EXPECT_EQ(round_half_even(-0.75), -1);
}

TEST(ReferenceNumerics, Bf16RoundingTies) {
  // bf16 keeps 8 significant bits: around 1 the spacing is 2^-7, so 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(to_bf16(1 + 0x1p-8), 1.0);                        // tie: to the even significand, 1.0000000
  EXPECT_EQ(to_bf16(1 + 3 * 0x1p-8), 1 + 0x1p-6);             // tie between 1.0000001 and 1.0000010: even
  EXPECT_EQ(to_bf16(1 + 0x1p-8 + 0x1p-20), 1 + 0x1p-7);       // just above the tie
  EXPECT_EQ(to_bf16(-(1 + 0x1p-8)), -1.0);
  EXPECT_EQ(to_bf16(255.5), 256.0);                           // 255 = 1.1111111 * 2^7 is odd: 255.5 -> 256
  EXPECT_EQ(to_bf16(254.5), 254.0);
  // The largest f32 (0x7f7fffff) is past the largest bf16 (0x7f7f0000) by more than half a bf16 ulp: inf.
  EXPECT_EQ(to_bf16(std::numeric_limits<float>::max()), std::numeric_limits<double>::infinity());
  EXPECT_EQ(ref::bits_of_bf16(to_bf16(3.0)), 0x4040);
  EXPECT_EQ(ref::bits_of_bf16(to_bf16(-0.0)), 0x8000);
  // Subnormals: bf16's smallest is 2^-133; half of it ties to even (zero), three halves to 2^-132.
  EXPECT_EQ(to_bf16(0x1p-133), 0x1p-133);
  EXPECT_EQ(to_bf16(0x1p-134), 0.0);
  EXPECT_EQ(to_bf16(3 * 0x1p-134), 0x1p-132);
  EXPECT_TRUE(std::isnan(to_bf16(std::nan(""))));
}

TEST(ReferenceNumerics, F32RoundingMatchesHostHardware) {
  // round_to_bits(x, 24) is built from frexp/ldexp; the host's double -> float conversion is IEEE RNE.
  Random r(1);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(r.real(-2, 2), static_cast<int>(r.integer(-160, 130)));
    ASSERT_TRUE(same(to_f32(x), static_cast<double>(static_cast<float>(x)))) << std::hexfloat << x;
  }
  // Doubles exactly halfway between two floats, and f32 arithmetic done in double then rounded.
  for (int i = 0; i < 100000; ++i) {
    float a = static_cast<float>(r.value(DType::F32, -30, 30)), b = static_cast<float>(r.value(DType::F32, -30, 30));
    ASSERT_EQ(to_f32(double(a) + double(b)), double(a + b));
    ASSERT_EQ(to_f32(double(a) * double(b)), double(a * b));
    ASSERT_EQ(to_f32(double(a) - double(b)), double(a - b));
    double mid = (double(a) + double(std::nextafter(a, 1e30f))) / 2;
    ASSERT_EQ(to_f32(mid), double(static_cast<float>(mid)));
  }
}

TEST(ReferenceNumerics, Bf16RoundingMatchesTheBitTrick) {
  // The usual integer formulation: add 0x7fff plus the lowest kept bit, drop the low half.
  Random r(2);
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = static_cast<uint32_t>(r.integer(0, 0xffffffffll));
    if ((b & 0x7f800000u) == 0x7f800000u) continue;  // inf/NaN
    float f;
    std::memcpy(&f, &b, 4);
    uint32_t want = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    ASSERT_EQ(ref::bits_of_bf16(to_bf16(f)), want) << std::hex << b;
  }
}

TEST(ReferenceNumerics, SaturatingCastsToIntegers) {
  EXPECT_EQ(cast_to_int(300.5, -128, 127), 127);
  EXPECT_EQ(cast_to_int(-128.5, -128, 127), -128);  // a tie, to even -128, in range
  EXPECT_EQ(cast_to_int(-129.5, -128, 127), -128);
  EXPECT_EQ(cast_to_int(127.5, -128, 127), 127);    // 128 after rounding, saturated
  EXPECT_EQ(cast_to_int(126.5, -128, 127), 126);
  EXPECT_EQ(cast_to_int(-0.5, -128, 127), 0);
  EXPECT_EQ(cast_to_int(1.5, -128, 127), 2);
  EXPECT_EQ(cast_to_int(std::nan(""), -128, 127), 0);
  EXPECT_EQ(cast_to_int(INFINITY, -128, 127), 127);
  EXPECT_EQ(cast_to_int(-INFINITY, -128, 127), -128);
  EXPECT_EQ(cast_to_int(3e9, INT32_MIN, INT32_MAX), INT32_MAX);
  EXPECT_EQ(cast_to_int(-3e9, INT32_MIN, INT32_MAX), INT32_MIN);
  EXPECT_EQ(cast_to_int(2147483520.0, INT32_MIN, INT32_MAX), 2147483520);  // the largest f32 below 2^31
  EXPECT_EQ(cast_to_int(2147483648.0, INT32_MIN, INT32_MAX), INT32_MAX);   // 2^31 (f32(INT32_MAX)) saturates
  EXPECT_EQ(ref::cast_to(1e10, DType::F32), 1e10);                         // 0x2540be400: 24 significant bits
  EXPECT_EQ(ref::cast_to(16777217, DType::F32), 16777216);                 // 2^24 + 1: a tie, to even
  EXPECT_EQ(ref::cast_to(16777219, DType::F32), 16777220);                 // 2^24 + 3: a tie, to even (+4)
  EXPECT_EQ(ref::wrap_to(int64_t{1} << 31, DType::I32), INT32_MIN);
  EXPECT_EQ(ref::wrap_to(200, DType::I8), -56);
}

// ---- the machine, on programs written out by hand ----------------------------------------------------------

ref::Config tiny() { return ref::Config{4, 4, 8, 4096, 1 << 20}; }

TEST(ReferenceMachine, ScalarCore) {
  ref::Reference m(tiny());
  Builder b;
  b.li(1, -7).li(2, 2);
  b.emit(Op::DIV, {{"rd", 3}, {"ra", 1}, {"rb", 2}});  // -3 (toward zero)
  b.emit(Op::REM, {{"rd", 4}, {"ra", 1}, {"rb", 2}});  // -1 (sign of ra)
  b.emit(Op::SHR, {{"rd", 5}, {"ra", 1}, {"rb", 2}});  // -7 >> 2 = -2 (arithmetic)
  b.emit(Op::SHL, {{"rd", 6}, {"ra", 2}, {"rb", 2}});  // 8
  b.emit(Op::MIN, {{"rd", 7}, {"ra", 1}, {"rb", 2}});  // -7
  b.emit(Op::ADDI, {{"rd", 0}, {"ra", 2}, {"imm", 5}});  // r0 stays 0
  // r8 = 1 + 2 + ... + 10 with a loop: r9 counts down from 10.
  b.li(8, 0).li(9, 10);
  int64_t loop = static_cast<int64_t>(b.p.code.size());
  b.emit(Op::ADD, {{"rd", 8}, {"ra", 8}, {"rb", 9}});
  b.emit(Op::ADDI, {{"rd", 9}, {"ra", 9}, {"imm", -1}});
  b.emit(Op::BNE, {{"ra", 9}, {"rb", 0}, {"target", loop}});
  b.li(10, int64_t{1} << 46).emit(Op::MUL, {{"rd", 10}, {"ra", 10}, {"rb", 10}});  // 2^92 wraps to 0
  b.emit(Op::HALT, {}).li(11, 99);  // not executed
  EXPECT_EQ(m.run(b.p), 10u + 3 * 10 + 2 + 1);  // the halt counts, the li after it does not run
  EXPECT_EQ(m.reg(3), -3);
  EXPECT_EQ(m.reg(4), -1);
  EXPECT_EQ(m.reg(5), -2);
  EXPECT_EQ(m.reg(6), 8);
  EXPECT_EQ(m.reg(7), -7);
  EXPECT_EQ(m.reg(0), 0);
  EXPECT_EQ(m.reg(8), 55);
  EXPECT_EQ(m.reg(10), 0);
  EXPECT_EQ(m.reg(11), 0);
}

// Runs C = A @ W on a 4x4 array: A (m x k) and W (k x n) as i8 or bf16 at HBM 0 and 0x100, C (as odt) at 0x200.
template <typename Extra>
void tiny_matmul(ref::Reference& m, DType dt, DType odt, int64_t mm, int64_t k, int64_t n, Extra extra) {
  const int e = ref::size_of(dt), o = ref::size_of(odt);
  Builder b;
  b.load(0, 0, mm * k * e).load(0x100, 0x100, k * n * e);
  b.li(1, 0x100).li(2, k).li(3, n).li(4, n * e).li(5, 0).li(6, mm).li(7, 0).li(8, k * e);
  b.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(dt)}});
  b.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", int64_t(dt)}});
  extra(b);
  b.li(9, 0x200).li(10, n * o);
  b.emit(Op::VACC, {{"vaddr", 9}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 10},
                    {"adt", int64_t(dt == DType::I8 ? DType::I32 : DType::F32)}, {"odt", int64_t(odt)}});
  b.store(0x200, 0x200, mm * n * o);
  m.run(b.p);
}

TEST(ReferenceMachine, Int8MatmulWrittenOut) {
  // [ 1 -2 ]   [  5  6 ]   [ 1*5 + -2*-7   1*6 + -2*8 ]   [  19  -10 ]
  // [ 3  4 ] @ [ -7  8 ] = [ 3*5 +  4*-7   3*6 +  4*8 ] = [ -13   50 ]
  ref::Reference m(tiny());
  m.write_hbm(0, encode({1, -2, 3, 4}, DType::I8).data(), 4);
  m.write_hbm(0x100, encode({5, 6, -7, 8}, DType::I8).data(), 4);
  tiny_matmul(m, DType::I8, DType::I32, 2, 2, 2, [](Builder&) {});
  EXPECT_EQ(Machines::read(m, 0x200, 4, DType::I32), (std::vector<double>{19, -10, -13, 50}));
  // A second mxu.mm with `accumulate` (same tile, still active) doubles every sum.
  tiny_matmul(m, DType::I8, DType::I32, 2, 2, 2, [](Builder& b) {
    b.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", 0}, {"accumulate", 1}});
  });
  EXPECT_EQ(Machines::read(m, 0x200, 4, DType::I32), (std::vector<double>{38, -20, -26, 100}));
}

TEST(ReferenceMachine, Int8Extremes) {
  // Four products of -128 * -128 = 2^14 each: 65536, exact; with -128 * 127 mixed in.
  ref::Reference m(tiny());
  m.write_hbm(0, encode({-128, -128, -128, -128}, DType::I8).data(), 4);
  m.write_hbm(0x100, encode({-128, 127, -128, 127, -128, 127, -128, 127}, DType::I8).data(), 8);
  tiny_matmul(m, DType::I8, DType::I32, 1, 4, 2, [](Builder&) {});
  EXPECT_EQ(Machines::read(m, 0x200, 2, DType::I32), (std::vector<double>{65536, -65024}));
}

TEST(ReferenceMachine, Bf16MatmulFp64AgainstIsaOrder) {
  // One row: 1*1 + 2^-12 * 2^-12 + 2^-12 * 2^-12 = 1 + 2^-23 exactly (representable in f32).
  // The ISA's order in f32: 1 + 2^-24 is a tie and rounds to 1, twice: 1. fp64: 1 + 2^-23.
  for (auto sums : {ref::FloatSums::Fp64, ref::FloatSums::IsaF32}) {
    ref::Reference m(tiny(), {sums});
    m.write_hbm(0, encode({1, 0x1p-12, 0x1p-12}, DType::BF16).data(), 6);
    m.write_hbm(0x100, encode({1, 0x1p-12, 0x1p-12}, DType::BF16).data(), 6);
    tiny_matmul(m, DType::BF16, DType::F32, 1, 3, 1, [](Builder&) {});
    EXPECT_EQ(Machines::read(m, 0x200, 1, DType::F32)[0], sums == ref::FloatSums::Fp64 ? 1 + 0x1p-23 : 1.0);
  }
}

TEST(ReferenceMachine, AccDrainBiasReluScale) {
  // ACC = [1000, -1000] (i32, from 1 x 1 products 100*10, -100*10); bias 24 -> [1024, -976]; relu -> [1024, 0];
  // scale f32(0.1) = 0x3dcccccd = 0.100000001490116...: 102.4000015 -> 102 (i8), and as f32 102.4000015 rounded.
  ref::Reference m(tiny());
  m.write_hbm(0, encode({100, -100}, DType::I8).data(), 2);
  m.write_hbm(0x100, encode({10}, DType::I8).data(), 1);
  m.write_hbm(0x300, encode({24, 24}, DType::I32).data(), 8);
  Builder b;
  b.load(0, 0, 2).load(0x100, 0x100, 1).load(0x300, 0x300, 8);
  b.li(1, 0x100).li(2, 1).li(3, 1).li(5, 0).li(6, 2);
  b.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 2}, {"dtype", 0}});
  b.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 5}, {"stride", 2}, {"dtype", 0}});
  b.li(9, 0x200).li(11, 0x300).li(12, 0x3dcccccd).li(13, 0x208).li(14, 4);
  // i8 results at 0x200 (row stride 1 byte), f32 results at 0x208 (row stride 4 bytes).
  for (auto [vaddr, stride, odt] : {std::tuple{9, 2, DType::I8}, std::tuple{13, 14, DType::F32}})
    b.emit(Op::VACC, {{"vaddr", vaddr}, {"acc", 5}, {"rows", 6}, {"cols", 3}, {"stride", stride}, {"bias", 11},
                      {"scale", 12}, {"adt", int64_t(DType::I32)}, {"odt", int64_t(odt)}, {"bias_en", 1},
                      {"relu", 1}, {"scale_en", 1}});
  b.store(0x200, 0x200, 16);
  m.run(b.p);
  EXPECT_EQ(Machines::read(m, 0x200, 2, DType::I8), (std::vector<double>{102, 0}));
  EXPECT_EQ(Machines::read(m, 0x208, 2, DType::F32), (std::vector<double>{double(1024.0f * 0.1f), 0}));
}

TEST(ReferenceMachine, ErrorsNameThePc) {
  ref::Reference m(tiny());
  Builder b;
  b.li(1, 4000).li(2, 0).li(3, 1).li(4, 200);  // VMEM is 4096 bytes: [4000, 4200) is outside
  b.emit(Op::DMALD, {{"vaddr", 1}, {"haddr", 2}, {"rows", 3}, {"rowbytes", 4}, {"hstride", 4}, {"vstride", 4}});
  try {
    m.run(b.p);
    FAIL() << "no error";
  } catch (const ref::Error& e) {
    EXPECT_NE(std::string(e.what()).find("pc 4 (dma.ld"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("VMEM access [0xfa0, 0x1068)"), std::string::npos) << e.what();
  }
  Builder w;
  w.li(1, 0).li(2, 5).li(3, 4);  // k = 5 > 4 rows
  w.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 3}, {"dtype", 0}});
  EXPECT_THROW(m.run(w.p), ref::Error);
  Builder z;
  z.emit(Op::DIV, {{"rd", 1}, {"ra", 1}, {"rb", 0}});
  EXPECT_THROW(m.run(z.p), ref::Error);
  Builder x;
  x.li(1, 0).li(2, 1).li(3, 8);  // ACC has 8 rows: mm of 1 row into row 8
  x.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 2}, {"stride", 2}, {"dtype", 0}});
  x.emit(Op::MXUMM, {{"vaddr", 1}, {"m", 2}, {"acc", 3}, {"stride", 2}, {"dtype", 0}});
  EXPECT_THROW(m.run(x.p), ref::Error);
}

}  // namespace
}  // namespace tpusim::reftest
