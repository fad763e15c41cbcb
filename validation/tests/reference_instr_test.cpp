// Every vector and matrix instruction, each supported data type: the simulator against the reference machine on
// small programs (DMA random data into VMEM, fence, run the instruction, fence, DMA the result out). Integer
// results and every result whose roundings the ISA fixes (log, sin, cos and the roundings included) must match bit
// for bit; float sums and exp/recip/rsqrt within tolerance.h's bounds.
#include <cstdio>
#include <functional>
#include <limits>

#include "reference_harness.h"

namespace tpusim::reftest {
namespace {

constexpr uint64_t kIn[] = {0x0000, 0x4000, 0x8000};  // VMEM and HBM addresses of the inputs
constexpr uint64_t kOut = 0x10000;                     // ... and of the result
constexpr double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::nan("");



struct Io {
  std::vector<double> values;
  DType dt;
};
struct Results {
  std::vector<double> sim, fp64, isaf32;
};

// Loads the inputs, fills the result area with a pattern (so an element the instruction skips is seen), runs
// `body` between two fences and stores `out_n` elements of `out_dt`.
Results run_vector(Machines& m, const std::vector<Io>& ins, const std::function<void(Builder&)>& body, size_t out_n,
                   DType out_dt) {
  Builder b;
  for (size_t i = 0; i < ins.size(); ++i) {
    m.write(kIn[i], ins[i].values, ins[i].dt);
    b.load(kIn[i], kIn[i], static_cast<int64_t>(ins[i].values.size()) * ref::size_of(ins[i].dt));
  }
  const int64_t out_bytes = static_cast<int64_t>(out_n) * ref::size_of(out_dt);
  m.write(kOut, std::vector<uint8_t>(out_bytes, 0xa5));
  b.load(kOut, kOut, out_bytes).fence();
  body(b);
  b.fence().store(kOut, kOut, out_bytes);
  m.run(b.p);
  return {m.read_sim(kOut, out_n, out_dt), Machines::read(*m.fp64, kOut, out_n, out_dt),
          Machines::read(*m.isaf32, kOut, out_n, out_dt)};
}

std::string name(Op op) { return isa::describe(op).mnemonic; }
std::string name(Op op, DType t) { return name(op) + " " + isa::dtype_name(t); }

// ---- element-wise arithmetic --------------------------------------------------------------------------------

// Operand pairs worth having for each type, then random ones.
std::pair<std::vector<double>, std::vector<double>> binary_operands(DType t, size_t n, Random& r) {
  std::vector<double> a, b;
  if (t == DType::I32) {
    a = {INT32_MAX, INT32_MIN, INT32_MIN, 65536, -7, 0};
    b = {1, -1, INT32_MIN, 65536, 7, 0};  // wraps: max+1, min-1, min*min, 2^32
  } else if (t == DType::I8) {
    a = {127, -128, 0, -1}, b = {-128, 127, 0, -1};
  } else {
    // bf16 ties after the f32 result: 1 + 2^-8 -> 1, (1 + 2^-7) + 2^-8 -> 1 + 2^-6, 256 + 1 -> 256 (255 is odd);
    // f32: overflow to inf, a subnormal product, cancellation.
    a = {1, 1 + 0x1p-7, 256, -1, 1e30, 1e-30, 1.5, 3};
    b = {0x1p-8, 0x1p-8, 1, -0x1p-8, 1e30, 1e-15, -1.5, 3};
    for (auto& x : a) x = ref::cast_to(x, t);
    for (auto& x : b) x = ref::cast_to(x, t);
  }
  while (a.size() < n) {
    int e = static_cast<int>(r.integer(-12, 12));
    a.push_back(r.value(t, e - 3, e + 3)), b.push_back(r.value(t, e - 3, e + 3));  // similar magnitudes, mostly
  }
  return {a, b};
}

TEST(ReferenceVpu, BinaryOpsEveryType) {
  TPUSIM_MACHINES(m);
  Random r(11);
  for (Op op : {Op::VADD, Op::VSUB, Op::VMUL, Op::VMAX, Op::VMIN})
    for (DType t : {DType::I8, DType::I32, DType::BF16, DType::F32}) {
      if (t == DType::I8 && op != Op::VMAX && op != Op::VMIN) continue;  // see ReferenceVpuErrors
      const size_t n = 37;
      // Not a structured binding: clang before 16 cannot capture one in the lambdas below.
      const auto operands = binary_operands(t, n, r);
      const auto& a = operands.first;
      const auto& b = operands.second;
      Results res = run_vector(*m, {{a, t}, {b, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, n);
        p.emit(op, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"n", 4}, {"dtype", int64_t(t)}});
      }, n, t);
      expect_all(name(op, t), n, [&](size_t i) { return same(res.sim[i], res.fp64[i]); }, [&](size_t i) {
        return "a " + num(a[i]) + ", b " + num(b[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]);
      });
    }
}

// vpu.add's relu flag (a residual connection's add and ReLU in one pass): the simulator against the reference
// machine, and bit for bit against vpu.add then vpu.relu, for i32, bf16 and f32, with a signed zero sum, NaN and
// infinities among the operands.
TEST(ReferenceVpu, AddWithReluIsTheAddThenTheRelu) {
  TPUSIM_MACHINES(m);
  Random r(14);
  for (DType t : {DType::I32, DType::BF16, DType::F32}) {
    const size_t n = 41;
    auto operands = binary_operands(t, n, r);
    std::vector<double>& a = operands.first;
    std::vector<double>& b = operands.second;
    if (!ref::is_int(t)) {
      a[30] = -0.0, b[30] = -0.0;                                    // -0: +0 after the ReLU
      a[31] = std::numeric_limits<double>::quiet_NaN(), b[31] = 1;  // NaN stays NaN
      a[32] = -kInf, b[32] = 1e30;                                   // -inf: +0
      a[33] = kInf, b[33] = -1;                                      // +inf stays
    }
    a[34] = -5, b[34] = 2, a[35] = 5, b[35] = -2;
    auto add = [&](bool fused) {
      return run_vector(*m, {{a, t}, {b, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, n);
        p.emit(Op::VADD, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"n", 4}, {"dtype", int64_t(t)}, {"relu", fused ? 1 : 0}});
        if (!fused) p.emit(Op::VRELU, {{"vd", 1}, {"va", 1}, {"n", 4}, {"dtype", int64_t(t)}});
      }, n, t);
    };
    const Results fused = add(true), apart = add(false);
    expect_all(name(Op::VADD, t) + " relu", n, [&](size_t i) { return same(fused.sim[i], fused.fp64[i]); },
               [&](size_t i) {
                 return "a " + num(a[i]) + ", b " + num(b[i]) + ": sim " + num(fused.sim[i]) + ", reference " +
                        num(fused.fp64[i]);
               });
    expect_all(name(Op::VADD, t) + " relu against add, relu", n,
               [&](size_t i) { return same(fused.sim[i], apart.sim[i]); },
               [&](size_t i) { return "fused " + num(fused.sim[i]) + ", apart " + num(apart.sim[i]); });
    size_t negative = 0;
    for (size_t i = 0; i < n; ++i) negative += !std::isnan(fused.sim[i]) && std::signbit(fused.sim[i]);
    EXPECT_EQ(negative, 0u) << name(Op::VADD, t);
  }
}

TEST(ReferenceVpu, MultiplyAddIsTheMulThenTheAdd) {
  // vpu.madd d = a * b + c: the simulator against the reference machine, and bit for bit against vpu.mul into a
  // temporary and vpu.add of c, for i32 (wrapping), bf16 and f32, with -0, NaN, infinities and overflow among them
  TPUSIM_MACHINES(m);
  Random r(15);
  for (DType t : {DType::I32, DType::BF16, DType::F32}) {
    const size_t n = 41;
    auto operands = binary_operands(t, n, r);
    std::vector<double>& a = operands.first;
    std::vector<double>& b = operands.second;
    std::vector<double> c = binary_operands(t, n, r).first;
    if (!ref::is_int(t)) {
      a[30] = -0.0, b[30] = 1, c[30] = -0.0;                                    // -0 + -0 = -0
      a[31] = std::numeric_limits<double>::quiet_NaN(), b[31] = 1, c[31] = 1;  // NaN
      a[32] = kInf, b[32] = 0, c[32] = 1;                                       // inf x 0: NaN
      a[33] = kInf, b[33] = 2, c[33] = -kInf;                                   // inf - inf: NaN
      a[34] = 1e30, b[34] = 1e30, c[34] = -1;                                   // the product overflows
    }
    auto madd = [&](bool fused) {
      return run_vector(*m, {{a, t}, {b, t}, {c, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(5, kIn[2]).li(4, n);
        if (fused) {
          p.emit(Op::VMADD, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"vc", 5}, {"n", 4}, {"dtype", int64_t(t)}});
        } else {
          p.emit(Op::VMUL, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"n", 4}, {"dtype", int64_t(t)}});
          p.emit(Op::VADD, {{"vd", 1}, {"va", 1}, {"vb", 5}, {"n", 4}, {"dtype", int64_t(t)}});
        }
      }, n, t);
    };
    const Results fused = madd(true), apart = madd(false);
    expect_all(name(Op::VMADD, t), n, [&](size_t i) { return same(fused.sim[i], fused.fp64[i]); },
               [&](size_t i) {
                 return "a " + num(a[i]) + ", b " + num(b[i]) + ", c " + num(c[i]) + ": sim " + num(fused.sim[i]) +
                        ", reference " + num(fused.fp64[i]);
               });
    expect_all(name(Op::VMADD, t) + " against mul, add", n, [&](size_t i) { return same(fused.sim[i], apart.sim[i]); },
               [&](size_t i) { return "fused " + num(fused.sim[i]) + ", apart " + num(apart.sim[i]); });
  }
}

TEST(ReferenceVpu, ReluEveryType) {
  TPUSIM_MACHINES(m);
  Random r(12);
  for (DType t : {DType::I8, DType::I32, DType::BF16, DType::F32}) {
    std::vector<double> a = r.values(t, 29);
    a[0] = 0, a[1] = ref::is_int(t) ? -1 : -kInf, a[2] = ref::is_int(t) ? 1 : kInf;
    Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
      p.li(1, kOut).li(2, kIn[0]).li(4, a.size());
      p.emit(Op::VRELU, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
    }, a.size(), t);
    expect_all(name(Op::VRELU, t), a.size(), [&](size_t i) { return same(res.sim[i], res.fp64[i]); },
               [&](size_t i) { return "a " + num(a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]); });
  }
}

TEST(ReferenceVpu, ExpRecipRsqrtWithinTolerance) {
  TPUSIM_MACHINES(m);
  Random r(13);
  for (Op op : {Op::VEXP, Op::VRECIP, Op::VRSQRT})
    for (DType t : {DType::BF16, DType::F32}) {
      std::vector<double> a;
      for (int i = 0; i < 64; ++i) {
        double x = op == Op::VEXP ? r.real(-80, 80) : std::ldexp(r.real(1, 2), static_cast<int>(r.integer(-40, 40)));
        if (op == Op::VRECIP && r.integer(0, 1)) x = -x;
        a.push_back(ref::cast_to(x, t));
      }
      Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(4, a.size());
        p.emit(op, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
      }, a.size(), t);
      expect_all(name(op, t), a.size(),
                 [&](size_t i) { return ref::within_transcendental_bound(t, res.sim[i], res.fp64[i]); }, [&](size_t i) {
                   return "a " + num(a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]);
                 });
    }
}

TEST(ReferenceVpu, ExpRecipRsqrtSpecialValues) {
  // IEEE behaviour: exp(+-inf) = inf, 0; overflow to inf; recip(+-0) = +-inf; rsqrt(0) = inf, rsqrt(-1) = NaN.
  TPUSIM_MACHINES(m);
  struct Case {
    Op op;
    std::vector<double> a;
  };
  for (const Case& c : {Case{Op::VEXP, {kInf, -kInf, 100, -200, 0}}, Case{Op::VRECIP, {0.0, -0.0, kInf, -kInf, 2}},
                        Case{Op::VRSQRT, {0.0, kInf, -1, 4, 0x1p-140}}})
    for (DType t : {DType::BF16, DType::F32}) {
      Results res = run_vector(*m, {{c.a, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(4, c.a.size());
        p.emit(c.op, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
      }, c.a.size(), t);
      expect_all(name(c.op, t), c.a.size(),
                 [&](size_t i) { return ref::within_transcendental_bound(t, res.sim[i], res.fp64[i]); }, [&](size_t i) {
                   return "a " + num(c.a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]);
                 });
    }
}

// vpu.log, vpu.sin, vpu.cos, vpu.erf, vpu.erfc (f64-evaluated, rounded once: specified to the bit) and vpu.floor, vpu.ceil, vpu.round
// (exact): the simulator equals the reference bit for bit, signed zeros included, on random operands over a wide
// range (sin and cos up to 2^40, where range reduction matters) and every special value isa.def names.
TEST(ReferenceVpu, LogSinCosRoundingsBitIdentical) {
  TPUSIM_MACHINES(m);
  Random r(15);
  auto bits_same = [](double a, double b) {
    return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
  };
  for (Op op : {Op::VLOG, Op::VSIN, Op::VCOS, Op::VERF, Op::VERFC, Op::VFLOOR, Op::VCEIL, Op::VROUND})
    for (DType t : {DType::BF16, DType::F32}) {
      // (5, 9.5, 10 and -4: erfc's tail, 1.5e-12, 2e-41, a subnormal, and 2 - 1.5e-8)
      std::vector<double> a = {0.0, -0.0, kInf, -kInf, kNaN, 1, -1, 0x1p-149, -0x1p-149, 0x1p-127, 0.5, -0.5,
                               1.5, 2.5, -2.5, 0.3, -0.3, 3.4e38, -3.4e38, 0x1p23 + 1, 3.14159265, 1e22, 5, 9.5,
                               10, -4};
      for (int i = 0; i < 80; ++i) {
        const int e = op == Op::VSIN || op == Op::VCOS ? static_cast<int>(r.integer(-30, 40))
                                                         : static_cast<int>(r.integer(-20, 30));
        a.push_back(std::ldexp(r.real(1, 2), e) * (r.integer(0, 1) ? 1 : -1));
      }
      for (auto& x : a) x = ref::cast_to(x, t);
      Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(4, a.size());
        p.emit(op, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
      }, a.size(), t);
      expect_all(name(op, t), a.size(), [&](size_t i) { return bits_same(res.sim[i], res.fp64[i]); }, [&](size_t i) {
        return "a " + num(a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]);
      });
    }
}

// ---- casts ----------------------------------------------------------------------------------------------------

std::vector<double> cast_inputs(DType t, Random& r) {
  std::vector<double> v;
  if (t == DType::F8E4M3) {  // every pattern (both NaNs, both zeros, the subnormals, +-448)
    for (int b = 0; b < 256; ++b) {
      const uint8_t byte = static_cast<uint8_t>(b);
      v.push_back(ref::load_value(&byte, t));
    }
  } else if (t == DType::I8) {
    for (int x = -128; x < 128; ++x) v.push_back(x);
  } else if (t == DType::I32) {
    // 40 * 1/16 = 2.5 (a tie), 24/16 = 1.5, 8/16 = 0.5; 2^24 + 2^16 + 1 rounds to bf16 differently once (up) and
    // via f32 (down, through the tie 2^24 + 2^16): the reference rounds once (numerics.h, cast_to).
    v = {INT32_MIN, INT32_MAX, -129, -128, 127, 128, 0, 16777217, 16777219, -16777217, 2147483520, 33554435,
         16842753, 40, 24, 8, -8, -24};
    for (int i = 0; i < 40; ++i) v.push_back(static_cast<double>(r.integer(-(1 << 30), 1 << 30)));
  } else {
    v = {0.5, 1.5, 2.5, -0.5, -2.5, 126.5, 127.5, -128.5, -129.5, 300.5, -300.5, 1e10, -1e10, 2147483520.0,
         2147483648.0, -2147483648.0, -2147483904.0, kNaN, kInf, -kInf, 1 + 0x1p-8, 1 + 3 * 0x1p-8, 0x1p-130, 0,
         // f8e4m3: 448 and the tie 464 (to 448), 464 + 2^-4 and 480 (NaN), ties of 3 fraction bits (1 + 2^-4 to 1,
         // 1 + 3 * 2^-4 to 1.25), the subnormal boundary and ties (2^-10 to 0, 3 * 2^-10 to 2^-8)
         448, 464, 464.0625, 480, -464, 1 + 0x1p-4, 1 + 3 * 0x1p-4, 0x1p-6, 0x1p-10, 3 * 0x1p-10, -0x1p-11};
    for (int i = 0; i < 40; ++i) v.push_back(r.value(DType::F32, -10, 34));
    for (auto& x : v) x = ref::cast_to(x, t);
  }
  return v;
}

TEST(ReferenceVpu, CastEveryPairWithAndWithoutScale) {
  TPUSIM_MACHINES(m);
  Random r(14);
  const double scales[] = {0.0625, -3.7};  // 1/16 makes ties out of integers; -3.7 is inexact and negative
  for (DType s : {DType::I8, DType::I32, DType::BF16, DType::F32, DType::F8E4M3})
    for (DType d : {DType::I8, DType::I32, DType::BF16, DType::F32, DType::F8E4M3})
      for (int k = -1; k < 2; ++k) {
        const bool scaled = k >= 0;
        const uint32_t bits = scaled ? ref::bits_of_f32(ref::to_f32(scales[k])) : 0;
        std::vector<double> a = cast_inputs(s, r);
        Results res = run_vector(*m, {{a, s}}, [&](Builder& p) {
          p.li(1, kOut).li(2, kIn[0]).li(4, a.size()).li(5, bits);
          p.emit(Op::VCAST, {{"vd", 1}, {"va", 2}, {"n", 4}, {"scale", 5}, {"sdt", int64_t(s)}, {"ddt", int64_t(d)},
                             {"scale_en", scaled}});
        }, a.size(), d);
        std::string what = std::string("vpu.cast ") + isa::dtype_name(s) + " -> " + isa::dtype_name(d) +
                           (scaled ? " scale " + num(scales[k]) : "");
        expect_all(what, a.size(), [&](size_t i) { return same(res.sim[i], res.fp64[i]); }, [&](size_t i) {
          return "x " + num(a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]);
        });
      }
}

// ---- reductions -----------------------------------------------------------------------------------------------

TEST(ReferenceVpu, RsumRmaxEveryType) {
  TPUSIM_MACHINES(m);
  Random r(15);
  const int64_t rows = 5, cols = 13;
  for (Op op : {Op::VRSUM, Op::VRMAX})
    for (DType t : {DType::I8, DType::I32, DType::BF16, DType::F32}) {
      if (op == Op::VRSUM && t == DType::I8) continue;  // see ReferenceVpuErrors
      const int64_t pitch = cols + 3;                   // row stride in elements: 3 elements of padding
      std::vector<double> a = r.values(t, rows * pitch, -6, 6);
      if (t == DType::I32 && op == Op::VRSUM) a[0] = a[1] = INT32_MAX;  // wraps
      Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, rows).li(4, cols).li(5, pitch * ref::size_of(t));
        p.emit(op, {{"vd", 1}, {"va", 2}, {"rows", 3}, {"cols", 4}, {"stride", 5}, {"dtype", int64_t(t)}});
      }, rows, t);
      auto magnitude = [&](size_t i) {
        double s = 0;
        for (int64_t j = 0; j < cols; ++j) s += std::fabs(a[i * pitch + j]);
        return s;
      };
      bool fp_sum = op == Op::VRSUM && !ref::is_int(t);
      expect_all(name(op, t), rows, [&](size_t i) {
        if (!fp_sum) return same(res.sim[i], res.fp64[i]);
        return ref::within_sum_bound(t, res.sim[i], res.fp64[i], ref::sum_error_bound(cols, magnitude(i)));
      }, [&](size_t i) { return "row: sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]); });
      if (fp_sum)  // the ISA fixes the order (j = 0..cols-1, in f32): bit for bit
        expect_all(name(op, t) + " in the ISA's order", rows, [&](size_t i) { return same(res.sim[i], res.isaf32[i]); },
                   [&](size_t i) { return "row: sim " + num(res.sim[i]) + ", ISA order " + num(res.isaf32[i]); });
    }
}

// vpu.rdot: each row's products with a row of f32, summed in order. a as i8, bf16 and f32 (rows of `cols` and 3
// elements of padding), b f32 with its own row pitch; values that overflow, a NaN, infinities and a signed zero
// among them. The simulator's result is that of vpu.cast, vpu.mul and vpu.rsum in turn (the same machine, bit for
// bit), the reference machine's in the ISA's order (bit for bit), and the fp64 sum's within its bound.
TEST(ReferenceVpu, RdotIsCastMulRsumInOnePass) {
  TPUSIM_MACHINES(m);
  Random r(16);
  const int64_t rows = 6, cols = 11, pitch = cols + 3, bpitch = cols + 1;
  for (DType t : {DType::I8, DType::BF16, DType::F32}) {
    std::vector<double> a = r.values(t, rows * pitch, -6, 6), b = r.values(DType::F32, rows * bpitch, -6, 6);
    if (t != DType::I8) a[0] = kInf, a[pitch] = 1e30;      // row 0: inf * b; row 1: an f32 overflow with b's 1e30
    b[bpitch] = 1e30, b[2 * bpitch] = kNaN, b[3 * bpitch + 1] = -0.0;
    if (t != DType::I8) a[3 * pitch + 1] = -0.0;
    const int asz = ref::size_of(t);
    Results dot = run_vector(*m, {{a, t}, {b, DType::F32}}, [&](Builder& p) {
      p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, rows).li(5, cols).li(6, pitch * asz).li(7, bpitch * 4);
      p.emit(Op::VRDOT, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"rows", 4}, {"cols", 5}, {"astride", 6}, {"bstride", 7},
                         {"adt", int64_t(t)}});
    }, rows, DType::F32);
    // The three instructions, row by row: a's row cast to f32 at kIn[2], times b's row in place, summed to kOut[i].
    Results three = run_vector(*m, {{a, t}, {b, DType::F32}}, [&](Builder& p) {
      for (int64_t i = 0; i < rows; ++i) {
        p.li(1, static_cast<int64_t>(kIn[2])).li(2, static_cast<int64_t>(kIn[0]) + i * pitch * asz).li(3, cols);
        p.emit(Op::VCAST, {{"vd", 1}, {"va", 2}, {"n", 3}, {"scale", 0}, {"sdt", int64_t(t)}, {"ddt", int64_t(DType::F32)}});
        p.li(2, static_cast<int64_t>(kIn[1]) + i * bpitch * 4);
        p.emit(Op::VMUL, {{"vd", 1}, {"va", 1}, {"vb", 2}, {"n", 3}, {"dtype", int64_t(DType::F32)}});
        p.li(4, static_cast<int64_t>(kOut) + i * 4).li(5, 1);
        p.emit(Op::VRSUM, {{"vd", 4}, {"va", 1}, {"rows", 5}, {"cols", 3}, {"stride", 0}, {"dtype", int64_t(DType::F32)}});
      }
    }, rows, DType::F32);
    auto magnitude = [&](size_t i) {
      double s = 0;
      for (int64_t j = 0; j < cols; ++j) s += std::fabs(a[i * pitch + j] * b[i * bpitch + j]);
      return s;
    };
    const std::string what = name(Op::VRDOT, t);
    expect_all(what + " vs vpu.cast, vpu.mul, vpu.rsum", rows, [&](size_t i) { return same(dot.sim[i], three.sim[i]); },
               [&](size_t i) { return "row: rdot " + num(dot.sim[i]) + ", three instructions " + num(three.sim[i]); });
    expect_all(what + " in the ISA's order", rows, [&](size_t i) { return same(dot.sim[i], dot.isaf32[i]); },
               [&](size_t i) { return "row: sim " + num(dot.sim[i]) + ", ISA order " + num(dot.isaf32[i]); });
    expect_all(what + " vs fp64", rows, [&](size_t i) {
      return (std::isnan(dot.sim[i]) && std::isnan(dot.fp64[i])) || dot.sim[i] == dot.fp64[i] ||
             ref::within_sum_bound(DType::F32, dot.sim[i], dot.fp64[i], ref::sum_error_bound(cols, magnitude(i)));
    }, [&](size_t i) { return "row: sim " + num(dot.sim[i]) + ", fp64 " + num(dot.fp64[i]); });
    EXPECT_TRUE(t == DType::I8 || std::isinf(dot.sim[0]));  // inf * b
    EXPECT_TRUE(std::isnan(dot.sim[2]));                     // a NaN in b
  }
}

// vpu.cdot: each column's products with one f32 per row, summed over the rows in order (a vector-matrix
// product). a as i8, bf16 and f32 (rows of `cols` and 3 elements of padding), b every other f32 (bstride 8);
// values that overflow, a NaN, infinities and a signed zero among them. The simulator's result is that of
// vpu.cast, vpu.mulrow and a chain of vpu.add over the rows (the same machine, bit for bit), the reference
// machine's in the ISA's order (bit for bit), and the fp64 sum's within its bound.
TEST(ReferenceVpu, CdotIsCastMulrowAndAddsInOnePass) {
  TPUSIM_MACHINES(m);
  Random r(18);
  const int64_t rows = 7, cols = 10, pitch = cols + 3;
  for (DType t : {DType::I8, DType::BF16, DType::F32}) {
    std::vector<double> a = r.values(t, rows * pitch, -6, 6), b = r.values(DType::F32, 2 * rows, -6, 6);
    // column 0: inf; column 1: an f32 overflow (a's 1e30 times row 1's b, 1e30); column 2: a NaN in a;
    // column 4: a -0 in a, and row 4's b is -0
    if (t != DType::I8) a[0] = kInf, a[pitch + 1] = 1e30, a[5 * pitch + 2] = kNaN, a[3 * pitch + 4] = -0.0;
    b[2] = 1e30, b[2 * 4] = -0.0;
    const int asz = ref::size_of(t);
    Results dot = run_vector(*m, {{a, t}, {b, DType::F32}}, [&](Builder& p) {
      p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, rows).li(5, cols).li(6, pitch * asz).li(7, 8);
      p.emit(Op::VCDOT, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"rows", 4}, {"cols", 5}, {"astride", 6}, {"bstride", 7},
                         {"adt", int64_t(t)}});
    }, cols, DType::F32);
    // Row by row: a's row cast to f32 at kIn[2], times its b (vpu.mulrow of one row), added to the sums at kOut
    // (row 0's products are the sums' start).
    Results chain = run_vector(*m, {{a, t}, {b, DType::F32}}, [&](Builder& p) {
      for (int64_t i = 0; i < rows; ++i) {
        p.li(1, static_cast<int64_t>(kIn[2])).li(2, static_cast<int64_t>(kIn[0]) + i * pitch * asz).li(3, cols);
        p.emit(Op::VCAST, {{"vd", 1}, {"va", 2}, {"n", 3}, {"scale", 0}, {"sdt", int64_t(t)}, {"ddt", int64_t(DType::F32)}});
        p.li(2, static_cast<int64_t>(kIn[1]) + i * 8).li(4, 1).li(5, 0).li(6, static_cast<int64_t>(kOut));
        p.emit(Op::VMULROW, {{"vd", i == 0 ? 6 : 1}, {"va", 1}, {"vb", 2}, {"rows", 4}, {"cols", 3}, {"stride", 5},
                             {"dtype", int64_t(DType::F32)}});
        if (i > 0) p.emit(Op::VADD, {{"vd", 6}, {"va", 6}, {"vb", 1}, {"n", 3}, {"dtype", int64_t(DType::F32)}});
      }
    }, cols, DType::F32);
    auto magnitude = [&](size_t j) {
      double s = 0;
      for (int64_t i = 0; i < rows; ++i) s += std::fabs(a[i * pitch + j] * b[2 * i]);
      return s;
    };
    const std::string what = name(Op::VCDOT, t);
    expect_all(what + " vs vpu.cast, vpu.mulrow, vpu.add", cols, [&](size_t j) { return same(dot.sim[j], chain.sim[j]); },
               [&](size_t j) { return "column: cdot " + num(dot.sim[j]) + ", the chain " + num(chain.sim[j]); });
    expect_all(what + " in the ISA's order", cols, [&](size_t j) { return same(dot.sim[j], dot.isaf32[j]); },
               [&](size_t j) { return "column: sim " + num(dot.sim[j]) + ", ISA order " + num(dot.isaf32[j]); });
    expect_all(what + " vs fp64", cols, [&](size_t j) {
      return (std::isnan(dot.sim[j]) && std::isnan(dot.fp64[j])) || dot.sim[j] == dot.fp64[j] ||
             ref::within_sum_bound(DType::F32, dot.sim[j], dot.fp64[j], ref::sum_error_bound(rows, magnitude(j)));
    }, [&](size_t j) { return "column: sim " + num(dot.sim[j]) + ", fp64 " + num(dot.fp64[j]); });
    if (t != DType::I8) {
      EXPECT_TRUE(std::isinf(dot.sim[0]) || std::isnan(dot.sim[0]));  // inf * b (NaN where another inf meets it)
      EXPECT_TRUE(std::isnan(dot.sim[2]));                             // a NaN in a
    }
  }
}

// ---- row broadcast ---------------------------------------------------------------------------------------------

TEST(ReferenceVpu, RowBroadcastEveryType) {
  // vd[i*stride + j] = va[i*stride + j] op vb[i], stride in bytes; the padding between rows must stay untouched.
  TPUSIM_MACHINES(m);
  Random r(17);
  const int64_t rows = 9, cols = 13, pitch = cols + 3;  // pitch: row stride in elements (3 of padding)
  for (Op op : {Op::VADDROW, Op::VSUBROW, Op::VMULROW})
    for (DType t : {DType::I32, DType::BF16, DType::F32}) {
      std::vector<double> a = r.values(t, rows * pitch, -6, 6), b = r.values(t, rows, -6, 6);
      auto [pa, pb] = binary_operands(t, rows, r);  // wrapping / rounding-tie pairs in each row's first column
      for (int64_t i = 0; i < rows; ++i) a[i * pitch] = pa[i], b[i] = pb[i];
      Results res = run_vector(*m, {{a, t}, {b, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, rows).li(5, cols).li(6, pitch * ref::size_of(t));
        p.emit(op, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"rows", 4}, {"cols", 5}, {"stride", 6}, {"dtype", int64_t(t)}});
      }, rows * pitch, t);
      expect_all(name(op, t), rows * pitch, [&](size_t k) { return same(res.sim[k], res.fp64[k]); }, [&](size_t k) {
        return "row " + std::to_string(k / pitch) + " col " + std::to_string(k % pitch) + ": a " + num(a[k]) + ", b " +
               num(b[k / pitch]) + ": sim " + num(res.sim[k]) + ", reference " + num(res.fp64[k]);
      });
      // Spot-check the semantics themselves (not only sim == reference): wrapping, broadcast of vb[1] over row 1.
      if (t == DType::I32 && op == Op::VADDROW) {
        EXPECT_EQ(res.sim[0], static_cast<double>(INT32_MIN));  // INT32_MAX + 1 wraps
        EXPECT_EQ(res.sim[1 * pitch + 5], static_cast<double>(ref::wrap_to(int64_t(a[1 * pitch + 5]) + int64_t(b[1]),
                                                                            DType::I32)));
      }
    }
}

TEST(ReferenceVpu, RmaxOfInfinities) {
  // max over a row of -inf is -inf (an implementation that starts from the lowest finite value gets -FLT_MAX).
  TPUSIM_MACHINES(m);
  for (DType t : {DType::BF16, DType::F32}) {
    std::vector<double> a = {-kInf, -kInf, -kInf, kInf, -kInf, 1};
    Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
      p.li(1, kOut).li(2, kIn[0]).li(3, 2).li(4, 3).li(5, 3 * ref::size_of(t));
      p.emit(Op::VRMAX, {{"vd", 1}, {"va", 2}, {"rows", 3}, {"cols", 4}, {"stride", 5}, {"dtype", int64_t(t)}});
    }, 2, t);
    EXPECT_EQ(res.fp64, (std::vector<double>{-kInf, kInf}));
    EXPECT_EQ(res.sim, res.fp64) << "vpu.rmax " << isa::dtype_name(t) << " of [-inf, -inf, -inf]: sim " << res.sim[0];
  }
}

// ---- NaN, infinities, signed zeros, overflow (isa.def; docs/isa.md "Numerics") ----------------------------------
// The simulator and the reference must agree on the class and sign of every result (a NaN with a NaN, -0 with
// -0), and both with the ISA's words, which each test spells out again here: float arithmetic is IEEE; max, min,
// rmax and relu are IEEE 754-2019 maximum / minimum (NaN in, NaN out; -0 < +0).

bool same_strict(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || (a == b && std::signbit(a) == std::signbit(b));
}
const std::vector<double> kSpecial = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0, 3e38};

double isa_maximum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == 0 && b == 0) return std::signbit(a) && std::signbit(b) ? -0.0 : 0.0;
  return a > b ? a : b;
}
double isa_minimum(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN;
  if (a == 0 && b == 0) return std::signbit(a) || std::signbit(b) ? -0.0 : 0.0;
  return a < b ? a : b;
}

TEST(ReferenceVpu, NanInfinitySignedZeroElementwise) {
  TPUSIM_MACHINES(m);
  for (DType t : {DType::BF16, DType::F32}) {
    std::vector<double> a, b;  // every ordered pair of special values
    for (double x : kSpecial)
      for (double y : kSpecial) a.push_back(ref::cast_to(x, t)), b.push_back(ref::cast_to(y, t));
    for (Op op : {Op::VADD, Op::VSUB, Op::VMUL, Op::VMAX, Op::VMIN}) {
      Results res = run_vector(*m, {{a, t}, {b, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, kIn[1]).li(4, a.size());
        p.emit(op, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"n", 4}, {"dtype", int64_t(t)}});
      }, a.size(), t);
      // IEEE double arithmetic rounded once to the type is IEEE f32 (bf16: then rounded again): NaN, infinities,
      // overflow (3e38 + 3e38) and the sign of zero come out as the ISA says.
      auto want = [&](size_t i) {
        switch (op) {
          case Op::VADD: return ref::float_result(t, a[i] + b[i]);
          case Op::VSUB: return ref::float_result(t, a[i] - b[i]);
          case Op::VMUL: return ref::float_result(t, a[i] * b[i]);
          case Op::VMAX: return isa_maximum(a[i], b[i]);
          default: return isa_minimum(a[i], b[i]);
        }
      };
      expect_all(name(op, t), a.size(),
                 [&](size_t i) { return same_strict(res.sim[i], res.fp64[i]) && same_strict(res.sim[i], want(i)); },
                 [&](size_t i) {
                   return "a " + num(a[i]) + ", b " + num(b[i]) + ": sim " + num(res.sim[i]) + ", reference " +
                          num(res.fp64[i]) + ", ISA " + num(want(i));
                 });
    }
  }
}

TEST(ReferenceVpu, NanInfinitySignedZeroReluRmaxRsum) {
  TPUSIM_MACHINES(m);
  for (DType t : {DType::BF16, DType::F32}) {
    std::vector<double> a;
    for (double x : kSpecial) a.push_back(ref::cast_to(x, t));
    Results res = run_vector(*m, {{a, t}}, [&](Builder& p) {
      p.li(1, kOut).li(2, kIn[0]).li(4, a.size());
      p.emit(Op::VRELU, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
    }, a.size(), t);
    // relu(x) = maximum(x, +0): NaN -> NaN, -inf -> +0, -0 -> +0, +inf -> +inf.
    expect_all(name(Op::VRELU, t), a.size(), [&](size_t i) {
      const double want = std::isnan(a[i]) ? kNaN : a[i] > 0 ? a[i] : 0.0;
      return same_strict(res.sim[i], res.fp64[i]) && same_strict(res.sim[i], want);
    }, [&](size_t i) { return "a " + num(a[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]); });
    // Rows of 3 for vpu.rmax and vpu.rsum, with what the ISA says each gives.
    struct Row {
      std::array<double, 3> x;
      double max, sum;
    };
    const std::vector<Row> rows = {
        {{1, kNaN, 2}, kNaN, kNaN},             // a NaN anywhere: NaN
        {{kNaN, -kInf, kInf}, kNaN, kNaN},
        {{-0.0, 0.0, -0.0}, 0.0, 0.0},          // -0 < +0
        {{-0.0, -0.0, -1}, -0.0, -1},
        {{-kInf, -kInf, -kInf}, -kInf, -kInf},  // a row of -inf
        {{kInf, -kInf, 1}, kInf, kNaN},         // opposite infinities sum to NaN
        {{3e38, 3e38, -3e38}, 3e38, kInf},      // in order: 3e38 + 3e38 overflows to inf first
    };
    std::vector<double> in;
    for (const Row& r : rows)
      for (double x : r.x) in.push_back(ref::cast_to(x, t));
    for (Op op : {Op::VRMAX, Op::VRSUM}) {
      Results rr = run_vector(*m, {{in, t}}, [&](Builder& p) {
        p.li(1, kOut).li(2, kIn[0]).li(3, rows.size()).li(4, 3).li(5, 3 * ref::size_of(t));
        p.emit(op, {{"vd", 1}, {"va", 2}, {"rows", 3}, {"cols", 4}, {"stride", 5}, {"dtype", int64_t(t)}});
      }, rows.size(), t);
      expect_all(name(op, t), rows.size(), [&](size_t i) {
        const double want = ref::cast_to(op == Op::VRMAX ? rows[i].max : rows[i].sum, t);
        // rsum: the reference that sums in the ISA's order, in f32 (the fp64 one does not overflow).
        const double r = op == Op::VRSUM ? rr.isaf32[i] : rr.fp64[i];
        return same_strict(rr.sim[i], r) && same_strict(rr.sim[i], want);
      }, [&](size_t i) {
        return "row " + std::to_string(i) + ": sim " + num(rr.sim[i]) + ", reference " +
               num(op == Op::VRSUM ? rr.isaf32[i] : rr.fp64[i]);
      });
    }
  }
}

TEST(ReferenceMxu, NanInfinityThroughMatmulAndDrain) {
  // bf16 mxu.mm with k = 2 and 4 columns, then vpu.acc (f32 accumulators) to f32, bf16 and i32, with and without
  // relu and a scale of 2. The products and sums are IEEE f32: the expected accumulators are written out.
  TPUSIM_MACHINES(m);
  const DType bf = DType::BF16;
  const double big = ref::to_bf16(3e38);
  const std::vector<double> w = {1, kInf, 0, 1,    // row 0 of the tile
                                 1, 1, 1, -1};     // row 1
  const std::vector<double> a = {kNaN, 1, 1, 1, 0, 1, -1, 1, big, big, kInf, -kInf};  // 6 rows of k = 2
  const std::vector<double> acc = {
      kNaN, kNaN, kNaN, kNaN,      // NaN x anything
      2, kInf, 1, 0,               // inf + 1 = inf
      1, kNaN, 1, -1,              // 0 x inf = NaN
      0, -kInf, 1, -2,             // -inf + 1 = -inf
      kInf, kInf, big, 0,          // big + big overflows to inf; big - big = 0
      kNaN, kNaN, kNaN, kInf};     // inf - inf = NaN; inf x 0 = NaN; inf + inf = inf
  const uint32_t two = ref::bits_of_f32(2.0);
  for (DType odt : {DType::F32, DType::BF16, DType::I32})
    for (int relu = 0; relu < 2; ++relu)
      for (int scale = 0; scale < 2; ++scale) {
        const int64_t o = ref::size_of(odt);
        Results res = run_vector(*m, {{a, bf}, {w, bf}}, [&](Builder& p) {
          p.li(1, kIn[1]).li(2, 2).li(3, 4).li(4, 4 * 2).li(5, kIn[0]).li(6, 6).li(7, 0).li(8, 2 * 2);
          p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(bf)}});
          p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", int64_t(bf)}});
          p.fence();
          p.li(10, kOut).li(14, 4 * o).li(16, two);
          p.emit(Op::VACC, {{"vaddr", 10}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 14}, {"scale", 16},
                            {"adt", int64_t(DType::F32)}, {"odt", int64_t(odt)}, {"relu", relu}, {"scale_en", scale}});
        }, acc.size(), odt);
        auto want = [&](size_t i) {
          double x = acc[i];
          if (relu) x = std::isnan(x) ? kNaN : x > 0 ? x : 0.0;
          if (scale) x = ref::to_f32(x * 2);  // big * 2 overflows to inf
          if (odt == DType::I32) return std::isnan(x) ? 0.0 : std::clamp(x, double(INT32_MIN), double(INT32_MAX));
          return odt == DType::BF16 ? ref::to_bf16(x) : x;
        };
        expect_all(std::string("mxu.mm bf16 -> vpu.acc odt ") + isa::dtype_name(odt) + (relu ? " relu" : "") +
                       (scale ? " scale" : ""),
                   acc.size(), [&](size_t i) { return same_strict(res.sim[i], res.fp64[i]) && same_strict(res.sim[i], want(i)); },
                   [&](size_t i) {
                     return "accumulator " + num(acc[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]) +
                            ", ISA " + num(want(i));
                   });
      }
}

TEST(ReferenceMxu, ResidualAddedInTheDrain) {
  // vpu.acc res: the accumulators of NanInfinityThroughMatmulAndDrain's product (IEEE f32 sums, written out), cast
  // to odt (bf16 or f32), then a residual of odt added (in f32, rounded to odt) and with relu its maximum with +0:
  // infinities, NaN, a sum to -0, ties and a residual that overflows bf16's range among them. The simulator, the
  // reference and the ISA's rule agree bit for bit.
  TPUSIM_MACHINES(m);
  const DType bf = DType::BF16;
  const double big = ref::to_bf16(3e38);
  const std::vector<double> w = {1, kInf, 0, 1, 1, 1, 1, -1};
  const std::vector<double> a = {kNaN, 1, 1, 1, 0, 1, -1, 1, big, big, kInf, -kInf};
  const std::vector<double> acc = {kNaN, kNaN, kNaN, kNaN, 2, kInf, 1, 0, 1, kNaN, 1, -1,
                                   0, -kInf, 1, -2, kInf, kInf, big, 0, kNaN, kNaN, kNaN, kInf};
  const std::vector<double> r = {1, -1, 0, 2, -2, -kInf, 0.00390625, -0.0, -1, 3, -1, 2,
                                 -0.0, kInf, 0.0078125, 2, 1, -kInf, big, -0.0, 0, 1, -1, 5};
  for (DType odt : {DType::F32, DType::BF16})
    for (int relu = 0; relu < 2; ++relu) {
      const int64_t o = ref::size_of(odt);
      Results res = run_vector(*m, {{a, bf}, {w, bf}, {r, odt}}, [&](Builder& p) {
        p.li(1, kIn[1]).li(2, 2).li(3, 4).li(4, 4 * 2).li(5, kIn[0]).li(6, 6).li(7, 0).li(8, 2 * 2);
        p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(bf)}});
        p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", int64_t(bf)}});
        p.fence();
        p.li(10, kOut).li(14, 4 * o).li(16, kIn[2]);
        p.emit(Op::VACC, {{"vaddr", 10}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 14}, {"scale", 16},
                          {"adt", int64_t(DType::F32)}, {"odt", int64_t(odt)}, {"relu", relu}, {"res", 1}});
      }, acc.size(), odt);
      auto want = [&](size_t i) {
        const auto round = [&](double x) { return odt == DType::BF16 ? ref::to_bf16(ref::to_f32(x)) : ref::to_f32(x); };
        double y = round(round(acc[i]) + r[i]);
        if (relu) y = std::isnan(y) ? kNaN : y > 0 ? y : 0.0;
        return y;
      };
      expect_all(std::string("vpu.acc res odt ") + isa::dtype_name(odt) + (relu ? " relu" : ""), acc.size(),
                 [&](size_t i) { return same_strict(res.sim[i], res.fp64[i]) && same_strict(res.sim[i], want(i)); },
                 [&](size_t i) {
                   return "accumulator " + num(acc[i]) + " + " + num(r[i]) + ": sim " + num(res.sim[i]) +
                          ", reference " + num(res.fp64[i]) + ", ISA " + num(want(i));
                 });
    }
}

// ---- the matrix unit and the accumulator drain -----------------------------------------------------------------

// Two passes into ACC rows [acc0, acc0 + m): a full tile (k = rows, n = cols) without `accumulate`, then a
// partial tile (k2 x n2) with `accumulate` (only columns < n2 change), then a third pass over a partial tile
// without `accumulate` into the first rows (columns >= n3 keep their values). Drained as adt into kOut.
struct MatmulCase {
  DType dt;
  int64_t m, acc0, k2, n2, n3;
  std::vector<double> a1, w1, a2, w2, a3;
};

// Float values of magnitude 2^elo..2^(ehi+1).
MatmulCase make_matmul(DType dt, const sim::ChipConfig& cfg, Random& r, int elo = -3, int ehi = 3) {
  const int64_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  MatmulCase c{dt, 11, 3, R - 3, C - 1, C - 3, {}, {}, {}, {}, {}};
  c.a1 = r.values(dt, c.m * R, elo, ehi), c.w1 = r.values(dt, R * C, elo, ehi);
  c.a2 = r.values(dt, c.m * c.k2, elo, ehi), c.w2 = r.values(dt, c.k2 * c.n2, elo, ehi);
  c.a3 = r.values(dt, 4 * 2, elo, ehi);  // 4 rows of k = 2
  return c;
}

// Host math: the exact values (and magnitudes sum |a*w|) of the ACC words after make_matmul's three passes.
void host_matmul(const MatmulCase& c, int64_t R, int64_t C, std::vector<double>& exact, std::vector<double>& mag) {
  exact.assign(c.m * C, 0), mag.assign(c.m * C, 0);
  // a: rows x k (pitch k); w: k x n with row pitch wp.
  auto pass = [&](const std::vector<double>& a, const std::vector<double>& w, int64_t rows, int64_t k, int64_t n,
                  int64_t wp, bool accumulate) {
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * w[l * wp + j], g += std::fabs(a[i * k + l] * w[l * wp + j]);
        exact[i * C + j] = accumulate ? exact[i * C + j] + s : s;
        mag[i * C + j] = accumulate ? mag[i * C + j] + g : g;
      }
  };
  pass(c.a1, c.w1, c.m, R, C, C, false);
  pass(c.a2, c.w2, c.m, c.k2, c.n2, c.n2, true);
  pass(c.a3, c.w1, 4, 2, c.n3, C, false);
}

// Emits the three passes; inputs are already in VMEM at kIn[0] (a1 | a2 | a3) and kIn[1] (w1 | w2).
void emit_matmul(Builder& p, const MatmulCase& c, int64_t R, int64_t C) {
  const int e = ref::size_of(c.dt);
  const int64_t dt = int64_t(c.dt);
  const uint64_t a2 = kIn[0] + c.a1.size() * e, a3 = a2 + c.a2.size() * e, w2 = kIn[1] + c.w1.size() * e;
  p.li(1, kIn[1]).li(2, R).li(3, C).li(4, C * e).li(5, kIn[0]).li(6, c.m).li(7, c.acc0).li(8, R * e);
  p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", dt}});
  p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", dt}});
  p.li(1, w2).li(2, c.k2).li(3, c.n2).li(4, c.n2 * e).li(5, a2).li(8, c.k2 * e);
  p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", dt}});
  p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", dt}, {"accumulate", 1}});
  // Third pass: the first two rows of w1 (row stride C), only n3 columns; A rows of 2 elements.
  p.li(1, kIn[1]).li(2, 2).li(3, c.n3).li(4, C * e).li(5, a3).li(6, 4).li(8, 2 * e);
  p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", dt}});
  p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", dt}});
}

std::vector<double> concat(std::initializer_list<const std::vector<double>*> parts) {
  std::vector<double> out;
  for (const auto* p : parts) out.insert(out.end(), p->begin(), p->end());
  return out;
}

// Runs make_matmul's passes and one vpu.acc per (odt, bias, relu, scale) option set; `check` gets each drain.
struct Drain {
  DType odt;
  bool bias, relu, scale;
};
std::vector<Drain> all_drains(std::initializer_list<DType> odts = {DType::I8, DType::I32, DType::BF16, DType::F32}) {
  std::vector<Drain> d;
  for (DType odt : odts)
    for (int o = 0; o < 8; ++o) d.push_back({odt, (o & 1) != 0, (o & 2) != 0, (o & 4) != 0});
  return d;
}

void run_matmul_drains(Machines& m, DType dt, double scale, int64_t bias_exp,
                       const std::function<void(const Drain&, const MatmulCase&, const std::vector<double>& bias,
                                                const Results&)>& check,
                       const std::vector<Drain>& drains = all_drains(), int elo = -3, int ehi = 3) {
  const int64_t R = m.cfg.mxu.rows, C = m.cfg.mxu.cols;
  Random r(dt == DType::I8 ? 21 : dt == DType::BF16 ? 22 : 23);
  MatmulCase c = make_matmul(dt, m.cfg, r, elo, ehi);
  const DType adt = dt == DType::I8 ? DType::I32 : DType::F32;
  std::vector<double> bias = r.values(adt, C, bias_exp - 2, bias_exp);
  if (adt == DType::I32)
    for (auto& b : bias) b = static_cast<double>(r.integer(-(int64_t{1} << bias_exp), int64_t{1} << bias_exp));
  const uint32_t scale_bits = ref::bits_of_f32(ref::to_f32(scale));
  for (const Drain& d : drains) {
    const int64_t o = ref::size_of(d.odt);
    Results res = run_vector(m, {{concat({&c.a1, &c.a2, &c.a3}), dt}, {concat({&c.w1, &c.w2}), dt}, {bias, adt}},
                             [&](Builder& p) {
                               emit_matmul(p, c, R, C);
                               p.fence();
                               p.li(10, kOut).li(11, c.acc0).li(12, c.m).li(13, C).li(14, C * o).li(15, kIn[2]);
                               p.li(16, scale_bits);
                               p.emit(Op::VACC, {{"vaddr", 10}, {"acc", 11}, {"rows", 12}, {"cols", 13},
                                                 {"stride", 14}, {"bias", 15}, {"scale", 16}, {"adt", int64_t(adt)},
                                                 {"odt", int64_t(d.odt)}, {"bias_en", d.bias}, {"relu", d.relu},
                                                 {"scale_en", d.scale}});
                             },
                             c.m * C, d.odt);
    check(d, c, bias, res);
  }
}

std::string drain_name(const char* in, const Drain& d) {
  return std::string("mxu ") + in + " -> vpu.acc odt " + isa::dtype_name(d.odt) + (d.bias ? " bias" : "") +
         (d.relu ? " relu" : "") + (d.scale ? " scale" : "");
}

// The accumulators as local memory (isa.def): S = A W into rows 0-3; vpu.add S + S into rows 4-7 and vpu.cast to
// bf16 into row 8 on (addresses from VMEM's size on); mxu.mm with those bf16 rows as its input, P W into rows
// 16-19; drained to VMEM. Small integers keep every step exact, so both models must give the host's P W with
// P = 2 A W, bit for bit.
TEST(ReferenceMxu, AccumulatorsAsVectorAndMatmulOperands) {
  TPUSIM_MACHINES(m);
  const int64_t R = m->cfg.mxu.rows, C = m->cfg.mxu.cols, M = 4, base = static_cast<int64_t>(m->cfg.vmem_bytes());
  Random rnd(7);
  std::vector<double> a(M * R), w(R * C);
  for (double& x : a) x = static_cast<double>(rnd.integer(-3, 3));
  for (double& x : w) x = static_cast<double>(rnd.integer(-3, 3));
  m->write(kIn[0], a, DType::BF16), m->write(kIn[1], w, DType::BF16);
  auto row = [&](int64_t r) { return base + r * C * 4; };  // accumulator row r's address
  Builder b;
  b.load(kIn[0], kIn[0], M * R * 2).load(kIn[1], kIn[1], R * C * 2).fence();
  b.li(1, kIn[1]).li(2, R).li(3, C).li(4, C * 2);
  b.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(DType::BF16)}});
  b.li(1, kIn[0]).li(2, M).li(3, 0).li(4, R * 2);
  b.emit(Op::MXUMM, {{"vaddr", 1}, {"m", 2}, {"acc", 3}, {"stride", 4}, {"dtype", int64_t(DType::BF16)}});
  b.fence();
  b.li(1, row(4)).li(2, row(0)).li(3, M * C);
  b.emit(Op::VADD, {{"vd", 1}, {"va", 2}, {"vb", 2}, {"n", 3}, {"dtype", int64_t(DType::F32)}});
  b.li(2, row(8));
  b.emit(Op::VCAST, {{"vd", 2}, {"va", 1}, {"n", 3}, {"sdt", int64_t(DType::F32)}, {"ddt", int64_t(DType::BF16)}});
  b.fence();
  b.li(1, row(8)).li(2, M).li(3, 16).li(4, C * 2);  // P's rows: C bf16 each, the tile takes the first R
  b.emit(Op::MXUMM, {{"vaddr", 1}, {"m", 2}, {"acc", 3}, {"stride", 4}, {"dtype", int64_t(DType::BF16)}});
  b.fence();
  b.li(1, kOut).li(2, 16).li(3, M).li(4, C).li(5, C * 4);
  b.emit(Op::VACC, {{"vaddr", 1}, {"acc", 2}, {"rows", 3}, {"cols", 4}, {"stride", 5}, {"adt", int64_t(DType::F32)},
                    {"odt", int64_t(DType::F32)}});
  b.fence().store(kOut, kOut, M * C * 4);
  m->run(b.p);
  std::vector<double> want(M * C, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < C; ++j)
      for (int64_t l = 0; l < R; ++l) {
        double s = 0;  // S[i][l] = sum_t A[i][t] W[t][l] (l < C: P's first R columns)
        for (int64_t t = 0; t < R; ++t) s += a[i * R + t] * w[t * C + l];
        want[i * C + j] += 2 * s * w[l * C + j];
      }
  EXPECT_EQ(m->read_sim(kOut, M * C, DType::F32), want);
  EXPECT_EQ(Machines::read(*m->fp64, kOut, M * C, DType::F32), want);
  EXPECT_EQ(Machines::read(*m->isaf32, kOut, M * C, DType::F32), want);
}

TEST(ReferenceMxu, Int8PassesAndEveryDrainBitExact) {
  TPUSIM_MACHINES(m);
  const int64_t R = m->cfg.mxu.rows, C = m->cfg.mxu.cols;
  const double scale = 0.01171875 + 0x1p-20;  // an inexact-looking f32 scale that brings sums into i8 range
  run_matmul_drains(*m, DType::I8, scale, 12, [&](const Drain& d, const MatmulCase& c, const std::vector<double>& bias,
                                                   const Results& res) {
    // Host math for this drain, in plain C++ (int64 sums, the host's own f32 multiply), independent of both models.
    std::vector<double> exact, mag;
    host_matmul(c, R, C, exact, mag);
    std::vector<double> want(exact.size());
    for (size_t i = 0; i < exact.size(); ++i) {
      int64_t x = static_cast<int64_t>(exact[i]) + (d.bias ? static_cast<int64_t>(bias[i % C]) : 0);
      if (d.relu) x = std::max<int64_t>(x, 0);
      double v = d.scale ? double(float(x) * float(scale)) : double(x);
      want[i] = d.odt == DType::I8    ? std::clamp(std::nearbyint(v), -128.0, 127.0)
                : d.odt == DType::I32 ? std::clamp(std::nearbyint(v), double(INT32_MIN), double(INT32_MAX))
                : d.odt == DType::F32 ? double(float(v))
                                      : ref::to_bf16(v);
    }
    expect_all(drain_name("i8", d), want.size(), [&](size_t i) { return same(res.sim[i], res.fp64[i]); },
               [&](size_t i) { return "sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]); });
    expect_all(drain_name("i8", d) + " (reference vs host math)", want.size(),
               [&](size_t i) { return same(res.fp64[i], want[i]); },
               [&](size_t i) { return "reference " + num(res.fp64[i]) + ", host " + num(want[i]); });
  });
}

TEST(ReferenceMxu, Bf16PassesAndEveryDrainWithinTolerance) {
  TPUSIM_MACHINES(m);
  const int64_t R = m->cfg.mxu.rows, C = m->cfg.mxu.cols;
  const double scale = 40.1;
  run_matmul_drains(*m, DType::BF16, scale, 1, [&](const Drain& d, const MatmulCase& c, const std::vector<double>& bias,
                                                    const Results& res) {
    std::vector<double> exact, mag;
    host_matmul(c, R, C, exact, mag);
    const double s = d.scale ? std::fabs(ref::to_f32(scale)) : 1.0;
    expect_all(drain_name("bf16", d), exact.size(), [&](size_t i) {
      double err = ref::sum_error_bound(R + c.k2, mag[i] + (d.bias ? std::fabs(bias[i % C]) : 0), s);
      return ref::within_sum_bound(d.odt, res.sim[i], res.fp64[i], err);
    }, [&](size_t i) { return "exact " + num(exact[i]) + ": sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]); });
    // And the reference against the exact host value, through the same drain steps in double.
    expect_all(drain_name("bf16", d) + " (reference vs host math)", exact.size(), [&](size_t i) {
      double x = exact[i] + (d.bias ? bias[i % C] : 0);
      if (d.relu) x = std::max(x, 0.0);
      x *= s * (scale < 0 ? -1 : 1);
      double err = ref::sum_error_bound(R + c.k2, mag[i] + (d.bias ? std::fabs(bias[i % C]) : 0), s);
      double want = ref::is_int(d.odt) ? std::clamp(std::nearbyint(x), d.odt == DType::I8 ? -128.0 : double(INT32_MIN),
                                                    d.odt == DType::I8 ? 127.0 : double(INT32_MAX))
                                       : x;
      return ref::within_sum_bound(d.odt, res.fp64[i], want, err);
    }, [&](size_t i) { return "reference " + num(res.fp64[i]) + ", exact " + num(exact[i]); });
  });
}

// f8e4m3 x f8e4m3 on a chip with an fp8 rate: values from 2^-9 (f8e4m3's subnormals) to 2^8, so products span
// 2^-18..2^17 and f32 sums round: the order matters. The simulator against the reference machine that sums in the
// ISA's order in f64 rounded to f32 after every add (FloatSums::IsaF32: products exact, l = 0..k-1 within a pass,
// then added to the accumulator; the same reference as bf16's), bit for bit, through drains to f32, bf16 and
// f8e4m3 with every bias, relu and scale; and the fp64 reference against the exact host sums within the bound.
TEST(ReferenceMxu, Fp8PassesAndDrainsBitExactInTheIsaOrder) {
  std::vector<std::string> sets = default_sets();
  sets.push_back("mxu.fp8_rate=2");
  TPUSIM_MACHINES(m, sets);
  const int64_t R = m->cfg.mxu.rows, C = m->cfg.mxu.cols;
  const double scale = 0.3;
  run_matmul_drains(*m, DType::F8E4M3, scale, 1, [&](const Drain& d, const MatmulCase& c,
                                                    const std::vector<double>& bias, const Results& res) {
    expect_all(drain_name("f8e4m3", d) + " (sim vs f32-ordered reference)", res.sim.size(),
               [&](size_t i) { return same(res.sim[i], res.isaf32[i]); },
               [&](size_t i) { return "sim " + num(res.sim[i]) + ", reference " + num(res.isaf32[i]); });
    std::vector<double> exact, mag;
    host_matmul(c, R, C, exact, mag);
    const double s = d.scale ? std::fabs(ref::to_f32(scale)) : 1.0;
    if (d.odt != DType::F8E4M3)  // (f8e4m3's own rounding is far coarser than the sum bound)
      expect_all(drain_name("f8e4m3", d) + " (fp64 reference vs host math)", exact.size(), [&](size_t i) {
        double x = exact[i] + (d.bias ? bias[i % C] : 0);
        if (d.relu) x = std::max(x, 0.0);
        x *= s;
        const double err = ref::sum_error_bound(R + c.k2, mag[i] + (d.bias ? std::fabs(bias[i % C]) : 0), s);
        return ref::within_sum_bound(d.odt, res.fp64[i], x, err);
      }, [&](size_t i) { return "reference " + num(res.fp64[i]) + ", exact " + num(exact[i]); });
  }, all_drains({DType::F32, DType::BF16, DType::F8E4M3}), -9, 7);
}

TEST(ReferenceMxu, Int8WorstCaseExactOnTheLargestArray) {
  // mxu.rows and mxu.cols go up to 1024, so one pass sums K = 1024 int8 products of magnitude up to 2^14: |sum|
  // <= 2^24, which the simulator's f32 GEMM still gets exactly (isa.def, mxu.mm). Row 0 of a is all -128 and
  // column 0 of the tile all -128: that element is 1024 * (-128) * (-128) = 2^24, the worst case. Row 1 / column
  // 1 are 127 (-128 * 127 * 1024 against column 0), row 2 and column 2 alternate, the rest is random. A second
  // pass with `accumulate` doubles every element (row 0, column 0: 2^25, exact in i32).
  TPUSIM_MACHINES(m, {"mxu.rows=1024", "mxu.cols=1024", "mxu.acc_rows=8", "vmem.size_kib=2048"});
  const int64_t K = 1024, N = 1024, M = 4;
  ASSERT_EQ(m->cfg.mxu.rows, K);
  Random r(31);
  auto pattern = [&](int64_t which, int64_t l) -> double {
    if (which == 0) return -128;
    if (which == 1) return 127;
    if (which == 2) return l % 2 ? 127 : -128;
    return static_cast<double>(r.integer(-128, 127));
  };
  std::vector<double> w(K * N), a(M * K);
  for (int64_t l = 0; l < K; ++l)
    for (int64_t j = 0; j < N; ++j) w[l * N + j] = pattern(std::min<int64_t>(j, 3), l);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t l = 0; l < K; ++l) a[i * K + l] = pattern(i, l);
  const uint64_t kW = 0, kA = 0x100000, kC = 0x110000;
  m->write(kW, w, DType::I8);
  m->write(kA, a, DType::I8);
  Builder b;
  b.load(kW, kW, K * N).load(kA, kA, M * K).fence();
  const int64_t i8 = int64_t(DType::I8);
  b.li(1, kW).li(2, K).li(3, N).li(5, kA).li(6, M).li(7, 0).li(10, kC).li(14, N * 4);
  b.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 3}, {"dtype", i8}});
  b.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 2}, {"dtype", i8}});
  b.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 2}, {"dtype", i8}, {"accumulate", 1}});
  b.fence();
  b.emit(Op::VACC, {{"vaddr", 10}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 14},
                    {"adt", int64_t(DType::I32)}, {"odt", int64_t(DType::I32)}});
  b.fence().store(kC, kC, M * N * 4);
  m->run(b.p);
  std::vector<double> host(M * N, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      int64_t sum = 0;
      for (int64_t l = 0; l < K; ++l) sum += static_cast<int64_t>(a[i * K + l]) * static_cast<int64_t>(w[l * N + j]);
      host[i * N + j] = static_cast<double>(2 * sum);
    }
  EXPECT_EQ(host[0], 0x1p25);  // 2 passes x 2^24
  const auto sim = m->read_sim(kC, M * N, DType::I32), ref = Machines::read(*m->fp64, kC, M * N, DType::I32);
  expect_all("i8 1024 x 1024 worst case", host.size(), [&](size_t i) { return sim[i] == host[i] && ref[i] == host[i]; },
             [&](size_t i) { return "sim " + num(sim[i]) + ", reference " + num(ref[i]) + ", host " + num(host[i]); });
}

// A pass of int8 products handed from the matrix unit to the vector unit by semaphore `sem` alone (no fence):
// `emit_pass` emits the mxu.mm (r5 inputs, r6 rows, r7 accumulator row, r8 stride) and whatever signals `sem`;
// vpu.acc waits on it. The drained i32 results must equal the reference's exactly, and the host's products.
void mxu_to_vpu_handover(Machines& m, const std::string& what, const std::function<void(Builder&)>& emit_pass,
                         int64_t sem, uint64_t seed) {
  const int64_t R = m.cfg.mxu.rows, C = m.cfg.mxu.cols, M = std::min<int64_t>(16, m.cfg.mxu.acc_rows);
  Random r(seed);
  std::vector<double> a = r.values(DType::I8, M * R), w = r.values(DType::I8, R * C);
  Results res = run_vector(m, {{a, DType::I8}, {w, DType::I8}}, [&](Builder& p) {
    p.li(1, kIn[1]).li(2, R).li(3, C).li(4, C).li(5, kIn[0]).li(6, M).li(7, 0).li(8, R);
    p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(DType::I8)}});
    emit_pass(p);
    p.li(10, kOut).li(14, C * 4);
    p.emit(Op::VACC, {{"vaddr", 10}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 14},
                      {"adt", int64_t(DType::I32)}, {"odt", int64_t(DType::I32)}, {"wait", sem}});
  }, M * C, DType::I32);
  std::vector<double> host(M * C, 0.0);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t l = 0; l < R; ++l)
      for (int64_t j = 0; j < C; ++j) host[i * C + j] += a[i * R + l] * w[l * C + j];
  expect_all(what, host.size(), [&](size_t i) { return res.sim[i] == res.fp64[i] && res.sim[i] == host[i]; },
             [&](size_t i) { return "sim " + num(res.sim[i]) + ", reference " + num(res.fp64[i]) + ", host " +
                                    num(host[i]); });
}

TEST(ReferenceSync, MxuMmSignalOrdersTheDrain) {
  // mxu.mm signal=s1 ... vpu.acc wait=s1: the drain sees the pass's results.
  TPUSIM_MACHINES(m);
  mxu_to_vpu_handover(*m, "mxu.mm signal=s1; vpu.acc wait=s1", [](Builder& p) {
    p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", 0}, {"signal", 1}});
  }, 1, 41);
}

TEST(ReferenceSync, MxuSyncSignalsAfterEarlierPasses) {
  // isa.def: mxu.sync "only waits and signals, in the matrix unit's order", and a unit signals "when it completes
  // (its results are written)". kernels/gemm.s relies on it: mxu.sync signal=s4 after the last pass of a tile.
  TPUSIM_MACHINES(m);
  mxu_to_vpu_handover(*m, "mxu.mm; mxu.sync signal=s1; vpu.acc wait=s1", [](Builder& p) {
    p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", 0}});
    p.emit(Op::MXUSYNC, {{"signal", 1}});
  }, 1, 42);
}

// mxu.lw with `trans`: the tile is the transpose of an n x k block (row pitch `stride`). Random shapes on the
// array, i8 and bf16: the simulator against the reference bit for bit (integer-valued bf16, so every sum is
// exact), both against host math; and on the simulator, trans over the block equals a plain load of the
// block's transpose bit for bit for random bf16 values (the same products in the same order).
TEST(ReferenceMxu, TransposedWeightLoadBitExact) {
  TPUSIM_MACHINES(m);
  const int64_t R = m->cfg.mxu.rows, C = m->cfg.mxu.cols;
  Random r(61);
  for (DType dt : {DType::I8, DType::BF16})
    for (int rep = 0; rep < 12; ++rep) {
      const int e = ref::size_of(dt);
      const int64_t k = r.integer(1, R), n = r.integer(1, C), rows = r.integer(1, 12);
      const int64_t pitch = k + r.integer(0, 3);  // block row pitch, in elements
      const bool exact = rep % 2 == 0;          // integer-valued (exact sums) or random bf16 values
      auto gen = [&](size_t count) {
        std::vector<double> v = exact || dt == DType::I8 ? std::vector<double>(count) : r.values(dt, count, -3, 3);
        if (exact || dt == DType::I8)
          for (auto& x : v) x = static_cast<double>(dt == DType::I8 ? r.integer(-128, 127) : r.integer(-16, 16));
        return v;
      };
      std::vector<double> a = gen(rows * k), block = gen(n * pitch), wt(k * n);  // wt: the tile, k x n
      for (int64_t i = 0; i < k; ++i)
        for (int64_t j = 0; j < n; ++j) wt[i * n + j] = block[j * pitch + i];
      const DType adt = dt == DType::I8 ? DType::I32 : DType::F32;
      auto run = [&](bool trans) {
        return run_vector(*m, {{a, dt}, {trans ? block : wt, dt}}, [&](Builder& p) {
          p.li(1, kIn[1]).li(2, k).li(3, n).li(4, (trans ? pitch : n) * e).li(5, kIn[0]).li(6, rows).li(7, 0);
          p.li(8, k * e);
          p.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 4}, {"dtype", int64_t(dt)}, {"trans", trans}});
          p.emit(Op::MXUMM, {{"vaddr", 5}, {"m", 6}, {"acc", 7}, {"stride", 8}, {"dtype", int64_t(dt)}});
          p.fence();
          p.li(10, kOut).li(13, C).li(14, C * 4);
          p.emit(Op::VACC, {{"vaddr", 10}, {"acc", 7}, {"rows", 6}, {"cols", 3}, {"stride", 14},
                            {"adt", int64_t(adt)}, {"odt", int64_t(adt)}});
        }, rows * C, adt);  // columns >= n keep the pattern
      };
      const Results t = run(true), plain = run(false);
      const std::string what = std::string("mxu.lw trans ") + isa::dtype_name(dt) + " k=" + std::to_string(k) +
                               " n=" + std::to_string(n) + " m=" + std::to_string(rows);
      expect_all(what + " (sim trans vs sim plain load of the transpose)", t.sim.size(),
                 [&](size_t i) { return same(t.sim[i], plain.sim[i]); },
                 [&](size_t i) { return "trans " + num(t.sim[i]) + ", plain " + num(plain.sim[i]); });
      if (!exact && dt == DType::BF16) continue;
      std::vector<double> host(rows * C, 0.0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j)
          for (int64_t l = 0; l < k; ++l) host[i * C + j] += a[i * k + l] * wt[l * n + j];
      expect_all(what, host.size(), [&](size_t i) {
        if (static_cast<int64_t>(i) % C >= n) return same(t.sim[i], t.fp64[i]);
        return same(t.sim[i], t.isaf32[i]) && same(t.sim[i], t.fp64[i]) && same(t.sim[i], host[i]);
      }, [&](size_t i) {
        return "sim " + num(t.sim[i]) + ", reference " + num(t.isaf32[i]) + ", host " + num(host[i]);
      });
    }
}

// ---- DMA ------------------------------------------------------------------------------------------------------

TEST(ReferenceDma, StridedRowsBothWays) {
  TPUSIM_MACHINES(m);
  Random r(31);
  std::vector<uint8_t> src(512), pattern(512, 0x5a);
  for (auto& b : src) b = static_cast<uint8_t>(r.integer(0, 255));
  m->write(0x1000, src);
  m->write(0x3000, pattern);
  Builder p;
  // 5 rows of 7 bytes, HBM pitch 11 -> VMEM pitch 9; back out with VMEM pitch 9 -> HBM pitch 13.
  p.li(1, 0x100).li(2, 0x1000).li(3, 5).li(4, 7).li(5, 11).li(6, 9).li(7, 0x3000).li(8, 13);
  p.emit(Op::DMALD, {{"vaddr", 1}, {"haddr", 2}, {"rows", 3}, {"rowbytes", 4}, {"hstride", 5}, {"vstride", 6}});
  p.fence();
  p.emit(Op::DMAST, {{"haddr", 7}, {"vaddr", 1}, {"rows", 3}, {"rowbytes", 4}, {"hstride", 8}, {"vstride", 6}});
  m->run(p.p);
  std::vector<uint8_t> sim(512), ref(512), want = pattern;
  m->chip->read_hbm(0x3000, sim.data(), sim.size());
  m->fp64->read_hbm(0x3000, ref.data(), ref.size());
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) want[i * 13 + j] = src[i * 11 + j];
  EXPECT_EQ(ref, want);
  EXPECT_EQ(sim, want);
}

// dma.gather: random rows of a table by int32 indices in VMEM (repeats included), into strided VMEM rows.
TEST(ReferenceDma, GatherRowsByIndex) {
  TPUSIM_MACHINES(m);
  Random r(33);
  for (int rep = 0; rep < 6; ++rep) {
    const int64_t V = r.integer(1, 40), rowbytes = r.integer(1, 70), rows = r.integer(1, 24);
    const int64_t vstride = rowbytes + r.integer(0, 9);
    const uint64_t table = 0x20000 + 8 * static_cast<uint64_t>(r.integer(0, 100)), idx_addr = 0x8000 + 4 * rep;
    std::vector<uint8_t> tab(V * rowbytes), ids(rows * 4), pattern(rows * vstride + 16, 0x5a);
    for (auto& b : tab) b = static_cast<uint8_t>(r.integer(0, 255));
    std::vector<int32_t> id(rows);
    for (int64_t i = 0; i < rows; ++i) id[i] = static_cast<int32_t>(r.integer(0, V - 1));
    std::memcpy(ids.data(), id.data(), ids.size());
    m->write(table, tab);
    m->write(idx_addr, ids);
    m->write(0x3000, pattern);
    Builder p;
    p.load(idx_addr, idx_addr, rows * 4).load(0x100, 0x3000, static_cast<int64_t>(pattern.size())).fence();
    p.li(1, 0x100).li(2, static_cast<int64_t>(table)).li(3, static_cast<int64_t>(idx_addr)).li(4, rows);
    p.li(5, rowbytes).li(6, vstride).li(7, V);
    p.emit(Op::DMAGATHER, {{"vaddr", 1}, {"haddr", 2}, {"idx", 3}, {"rows", 4}, {"rowbytes", 5}, {"vstride", 6},
                           {"count", 7}});
    p.fence().store(0x5000, 0x100, static_cast<int64_t>(pattern.size()));
    m->run(p.p);
    std::vector<uint8_t> sim(pattern.size()), refv(pattern.size()), want = pattern;
    m->chip->read_hbm(0x5000, sim.data(), sim.size());
    m->fp64->read_hbm(0x5000, refv.data(), refv.size());
    for (int64_t i = 0; i < rows; ++i)
      std::memcpy(want.data() + i * vstride, tab.data() + id[i] * rowbytes, static_cast<size_t>(rowbytes));
    EXPECT_EQ(refv, want) << "rep " << rep;
    EXPECT_EQ(sim, want) << "rep " << rep;
  }
}

// ---- errors: both models refuse the same programs -----------------------------------------------------------

void expect_both_refuse(Machines& m, const Builder& p, const std::string& what) {
  bool sim_threw = false, ref_threw = false;
  try {
    m.chip->run(p.p);
  } catch (const sim::Error&) {
    sim_threw = true;
  }
  try {
    m.fp64->run(p.p);
  } catch (const ref::Error&) {
    ref_threw = true;
  }
  EXPECT_TRUE(ref_threw) << what << ": the reference accepted it";
  EXPECT_TRUE(sim_threw) << what << ": the simulator accepted it";
}

TEST(ReferenceVpuErrors, I8ArithmeticIsRefused) {
  TPUSIM_MACHINES(m);
  for (Op op : {Op::VADD, Op::VSUB, Op::VMUL}) {
    Builder p;
    p.li(1, 0).li(2, 64).li(3, 128).li(4, 8);
    p.emit(op, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"n", 4}, {"dtype", int64_t(DType::I8)}});
    expect_both_refuse(*m, p, name(op, DType::I8));
  }
  Builder p;
  p.li(1, 0).li(2, 64).li(3, 2).li(4, 8);
  p.emit(Op::VRSUM, {{"vd", 1}, {"va", 2}, {"rows", 3}, {"cols", 4}, {"stride", 4}, {"dtype", int64_t(DType::I8)}});
  expect_both_refuse(*m, p, "vpu.rsum i8");
}

TEST(ReferenceVpuErrors, FloatFunctionsRefuseIntegers) {
  TPUSIM_MACHINES(m);
  for (Op op : {Op::VLOG, Op::VSIN, Op::VCOS, Op::VFLOOR, Op::VCEIL, Op::VROUND})
    for (DType t : {DType::I8, DType::I32}) {
      Builder p;
      p.li(1, 0).li(2, 64).li(4, 8);
      p.emit(op, {{"vd", 1}, {"va", 2}, {"n", 4}, {"dtype", int64_t(t)}});
      expect_both_refuse(*m, p, name(op, t));
    }
}

TEST(ReferenceVpuErrors, RowBroadcastRefusesI8) {
  TPUSIM_MACHINES(m);
  for (Op op : {Op::VADDROW, Op::VSUBROW, Op::VMULROW}) {
    Builder p;
    p.li(1, 0).li(2, 64).li(3, 128).li(4, 2).li(5, 8);
    p.emit(op, {{"vd", 1}, {"va", 2}, {"vb", 3}, {"rows", 4}, {"cols", 5}, {"stride", 5},
                {"dtype", int64_t(DType::I8)}});
    expect_both_refuse(*m, p, name(op, DType::I8));
  }
}

TEST(ReferenceErrors, OutOfRangeAccesses) {
  TPUSIM_MACHINES(m);
  const int64_t vmem = static_cast<int64_t>(m->cfg.vmem_bytes());
  Builder dma;
  dma.load(static_cast<uint64_t>(vmem - 16), 0, 32);
  expect_both_refuse(*m, dma, "dma.ld past the end of VMEM");
  Builder lw;
  lw.li(1, 0).li(2, m->cfg.mxu.rows + 1).li(3, 1);
  lw.emit(Op::MXULW, {{"vaddr", 1}, {"k", 2}, {"n", 3}, {"stride", 3}, {"dtype", int64_t(DType::I8)}});
  expect_both_refuse(*m, lw, "mxu.lw with k > mxu.rows");
  Builder acc;
  acc.li(1, 0).li(2, m->cfg.mxu.acc_rows).li(3, 1);
  acc.emit(Op::VACC, {{"vaddr", 1}, {"acc", 2}, {"rows", 3}, {"cols", 3}, {"stride", 3}, {"adt", int64_t(DType::I32)},
                      {"odt", int64_t(DType::I32)}});
  expect_both_refuse(*m, acc, "vpu.acc past the last accumulator row");
}

// dma.gather with an index out of the table: both models refuse it, naming the pc, the instruction and the index.
TEST(ReferenceErrors, GatherIndexOutOfTable) {
  TPUSIM_MACHINES(m);
  for (int32_t bad : {-1, 10, 11}) {
    std::vector<int32_t> id = {3, 0, bad, 9};
    std::vector<uint8_t> ids(16);
    std::memcpy(ids.data(), id.data(), 16);
    m->write(0x8000, ids);
    Builder p;
    p.load(0x8000, 0x8000, 16).fence();
    p.li(1, 0x100).li(2, 0x20000).li(3, 0x8000).li(4, 4).li(5, 64).li(6, 64).li(7, 10);
    const size_t pc = p.p.code.size();
    p.emit(Op::DMAGATHER, {{"vaddr", 1}, {"haddr", 2}, {"idx", 3}, {"rows", 4}, {"rowbytes", 5}, {"vstride", 6},
                           {"count", 7}});
    std::string sim_msg, ref_msg;
    try {
      m->chip->run(p.p);
    } catch (const sim::Error& e) {
      sim_msg = e.what();
    }
    try {
      m->fp64->run(p.p);
    } catch (const ref::Error& e) {
      ref_msg = e.what();
    }
    for (const std::string& msg : {sim_msg, ref_msg}) {
      EXPECT_NE(msg.find("pc " + std::to_string(pc) + " (dma.gather r1, r2, r3, r4, r5, r6, r7)"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("index " + std::to_string(bad)), std::string::npos) << msg;
      if (bad >= 10) {
        EXPECT_NE(msg.find("count 10"), std::string::npos) << msg;
      }
    }
  }
}

}  // namespace
}  // namespace tpusim::reftest
