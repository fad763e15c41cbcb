// The built-in kernels (kernels/*.s) over random shapes that are not multiples of the array, M tiled through a
// small accumulator memory: the simulator against (a) the reference machine running the same program and (b) the
// math done directly on the host (int64 / double loops, the host's own f32 arithmetic). int8 results exactly,
// bf16 within tolerance.h's bound.
#include <algorithm>
#include <cstdio>
#include <functional>
#include <map>

#include "reference_harness.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/config.h"

namespace tpusim::reftest {
namespace {

constexpr int64_t kDtCode[] = {0, 1, 2, 3};  // DT_I8, DT_I32, DT_BF16, DT_F32 = isa::DType values
int64_t code(DType t) { return kDtCode[static_cast<int>(t)]; }


struct Io {
  std::vector<double> values;
  DType dt;
};
struct KernelRun {
  std::vector<double> sim, fp64, isaf32;
};

// Assembles `kernel` for this chip, writes the inputs where the program declares them, fills the output with a
// pattern, runs it on all machines and reads the output `out` back.
KernelRun run_kernel(Machines& m, const std::string& kernel, std::map<std::string, int64_t> defines,
                     const std::map<std::string, Io>& inputs, const std::string& out = "c") {
  for (const auto& [name, v] : sim::kernel_symbols(m.cfg)) defines[name] = v;
  isa::Program p = kernels::assemble(kernel, defines);
  for (const auto& [name, io] : inputs) {
    const isa::TensorDecl* d = p.find(name);
    if (!d) throw std::logic_error(kernel + " has no tensor " + name);
    if (d->dtype != io.dt || static_cast<size_t>(d->elements()) != io.values.size())
      throw std::logic_error(kernel + ": tensor " + name + " of another type or size");
    m.write(d->addr, io.values, io.dt);
  }
  const isa::TensorDecl* o = p.find(out);
  m.write(o->addr, std::vector<uint8_t>(o->bytes(), 0xa5));
  m.run(p);
  const size_t n = static_cast<size_t>(o->elements());
  return {m.read_sim(o->addr, n, o->dtype), Machines::read(*m.fp64, o->addr, n, o->dtype),
          Machines::read(*m.isaf32, o->addr, n, o->dtype)};
}


struct Shape {
  int64_t m, k, n;
};
std::string text(const std::string& kernel, const Shape& s) {
  return kernel + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
}

// A few fixed shapes (one element; exactly one tile; one past the tile), then random ones.
std::vector<Shape> shapes(int count, uint64_t seed, const sim::ChipConfig& cfg) {
  const int64_t R = cfg.mxu.rows, C = cfg.mxu.cols;
  std::vector<Shape> s{{1, 1, 1}, {R, R, C}, {cfg.mxu.acc_rows / 2 + 1, R + 1, C + 1}};
  Random r(seed);
  while (static_cast<int>(s.size()) < count) s.push_back({r.integer(1, 70), r.integer(1, 50), r.integer(1, 45)});
  s.resize(count);
  return s;
}

// The exact GEMM (as doubles) and sum |a*b| per element.
void host_gemm(const std::vector<double>& a, const std::vector<double>& b, const Shape& s, std::vector<double>& exact,
               std::vector<double>& mag) {
  exact.assign(s.m * s.n, 0), mag.assign(s.m * s.n, 0);
  for (int64_t i = 0; i < s.m; ++i)
    for (int64_t l = 0; l < s.k; ++l)
      for (int64_t j = 0; j < s.n; ++j) {
        double p = a[i * s.k + l] * b[l * s.n + j];  // exact: i8 x i8 or bf16 x bf16
        exact[i * s.n + j] += p;                    // exact for i8 (|sum| < 2^53); fp64 for bf16
        mag[i * s.n + j] += std::fabs(p);
      }
}

// ---- int8 ---------------------------------------------------------------------------------------------------

struct Int8Options {
  bool bias = false, relu = false;
  DType out = DType::I32;
  float scale = 0;  // 0: none
};

void gemm_int8_cases(Machines& m, const std::vector<Shape>& cases, const Int8Options& opt, uint64_t seed) {
  Random r(seed);
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(DType::I8, s.m * s.k), b = r.values(DType::I8, s.k * s.n), bias(s.n);
    for (auto& x : bias) x = static_cast<double>(r.integer(-20000, 20000));
    std::map<std::string, int64_t> defs{{"M", s.m}, {"K", s.k}, {"N", s.n}, {"OUT_DT", code(opt.out)},
                                        {"BIAS", opt.bias}, {"RELU", opt.relu},
                                        {"SCALE", opt.scale != 0 ? ref::bits_of_f32(opt.scale) : 0}};
    std::map<std::string, Io> in{{"a", {a, DType::I8}}, {"b", {b, DType::I8}}};
    if (opt.bias) in["bias"] = {bias, DType::I32};
    KernelRun run = run_kernel(m, "gemm_int8.s", defs, in);

    // Host math: int64 sums; then bias, relu, and the scale as the host's own f32 multiply; round and saturate.
    std::vector<double> exact, mag, want(s.m * s.n);
    host_gemm(a, b, s, exact, mag);
    for (size_t i = 0; i < want.size(); ++i) {
      int64_t x = static_cast<int64_t>(exact[i]) + (opt.bias ? static_cast<int64_t>(bias[i % s.n]) : 0);
      if (opt.relu) x = std::max<int64_t>(x, 0);
      double v = opt.scale != 0 ? double(float(x) * opt.scale) : double(x);
      want[i] = opt.out == DType::I8 ? std::clamp(std::nearbyint(v), -128.0, 127.0) : v;
    }
    const std::string what = text("gemm_int8.s", s);
    expect_all(what + ": sim vs reference", want.size(), [&](size_t i) { return run.sim[i] == run.fp64[i]; },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", reference " + num(run.fp64[i]); });
    expect_all(what + ": sim vs host", want.size(), [&](size_t i) { return run.sim[i] == want[i]; },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", host " + num(want[i]); });
    expect_all(what + ": reference vs host", want.size(), [&](size_t i) { return run.fp64[i] == want[i]; },
               [&](size_t i) { return "reference " + num(run.fp64[i]) + ", host " + num(want[i]); });
  }
}

TEST(ReferenceKernels, GemmInt8ToInt32) {
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(8, 101, m->cfg), {}, 1);
}

TEST(ReferenceKernels, GemmInt8BiasRelu) {
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(5, 102, m->cfg), {.bias = true, .relu = true}, 2);
}

TEST(ReferenceKernels, GemmInt8RequantisedToInt8) {
  // SCALE = 1.3/4096: sums of up to 50 products of 2^14 land around +-260 and saturate sometimes.
  TPUSIM_MACHINES(m);
  gemm_int8_cases(*m, shapes(5, 103, m->cfg), {.bias = true, .relu = false, .out = DType::I8, .scale = 1.3f / 4096},
                  3);
}

// ---- bf16 ---------------------------------------------------------------------------------------------------

struct Bf16Options {
  bool bias = false, relu = false;
  DType out = DType::F32;
};

void gemm_bf16_cases(Machines& m, const std::vector<Shape>& cases, const Bf16Options& opt, uint64_t seed) {
  Random r(seed);
  for (const Shape& s : cases) {
    std::vector<double> a = r.values(DType::BF16, s.m * s.k, -3, 3), b = r.values(DType::BF16, s.k * s.n, -3, 3);
    std::vector<double> bias = r.values(DType::F32, s.n, -2, 2);
    std::map<std::string, int64_t> defs{{"M", s.m},           {"K", s.k},          {"N", s.n},
                                        {"OUT_DT", code(opt.out)}, {"BIAS", opt.bias}, {"RELU", opt.relu}};
    std::map<std::string, Io> in{{"a", {a, DType::BF16}}, {"b", {b, DType::BF16}}};
    if (opt.bias) in["bias"] = {bias, DType::F32};
    KernelRun run = run_kernel(m, "gemm_bf16.s", defs, in);
    const std::string what = text("gemm_bf16.s", s);
    std::vector<double> exact, mag, want(s.m * s.n), err(s.m * s.n);
    host_gemm(a, b, s, exact, mag);
    for (size_t i = 0; i < want.size(); ++i) {
      double x = exact[i] + (opt.bias ? bias[i % s.n] : 0);
      want[i] = opt.relu ? std::max(x, 0.0) : x;
      err[i] = ref::sum_error_bound(s.k, mag[i] + (opt.bias ? std::fabs(bias[i % s.n]) : 0));
    }
    expect_all(what + ": sim vs reference", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.sim[i], run.fp64[i], err[i]); },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", reference " + num(run.fp64[i]) + ", bound " + num(err[i]); });
    expect_all(what + ": sim vs host fp64", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.sim[i], want[i], err[i]); },
               [&](size_t i) { return "sim " + num(run.sim[i]) + ", host " + num(want[i]) + ", bound " + num(err[i]); });
    expect_all(what + ": reference vs host fp64", want.size(),
               [&](size_t i) { return ref::within_sum_bound(opt.out, run.fp64[i], want[i], err[i]); },
               [&](size_t i) { return "reference " + num(run.fp64[i]) + ", host " + num(want[i]); });
  }
}

TEST(ReferenceKernels, GemmBf16ToF32) {
  TPUSIM_MACHINES(m);
  gemm_bf16_cases(*m, shapes(7, 201, m->cfg), {}, 4);
}

TEST(ReferenceKernels, GemmBf16ToBf16BiasRelu) {
  TPUSIM_MACHINES(m);
  gemm_bf16_cases(*m, shapes(5, 202, m->cfg), {.bias = true, .relu = true, .out = DType::BF16}, 5);
}

// ---- cast.s -------------------------------------------------------------------------------------------------

TEST(ReferenceKernels, CastF32ToBf16AndToInt8Scaled) {
  TPUSIM_MACHINES(m);
  Random r(301);
  const float scale = 0.37f;
  for (int64_t n : {int64_t{1}, int64_t{33}, r.integer(100, 3000)}) {
    std::vector<double> x = r.values(DType::F32, n, -12, 12);
    for (size_t i = 0; i < x.size() && i < 4; ++i) x[i] = std::vector<double>{1 + 0x1p-8, 300.5, -128.5, 2.5}[i];
    // to bf16: the host's version is the integer bit trick on the f32 bits.
    KernelRun b = run_kernel(*m, "cast.s", {{"N", n}, {"SDT", 3}, {"DDT", 2}}, {{"x", {x, DType::F32}}}, "y");
    std::vector<double> want(n);
    for (int64_t i = 0; i < n; ++i) {
      uint32_t bits = ref::bits_of_f32(x[i]);
      want[i] = ref::f32_from_bits(((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16) << 16);
    }
    expect_all("cast.s f32->bf16 N=" + std::to_string(n), n,
               [&](size_t i) { return same(b.sim[i], want[i]) && same(b.fp64[i], want[i]); },
               [&](size_t i) { return "x " + num(x[i]) + ": sim " + num(b.sim[i]) + ", reference " + num(b.fp64[i]) + ", host " + num(want[i]); });
    // to i8 with SCALE: the host's f32 multiply, nearbyint (ties to even), clamp.
    KernelRun q = run_kernel(*m, "cast.s", {{"N", n}, {"SDT", 3}, {"DDT", 0}, {"SCALE", ref::bits_of_f32(scale)}},
                             {{"x", {x, DType::F32}}}, "y");
    for (int64_t i = 0; i < n; ++i) want[i] = std::clamp(std::nearbyint(double(float(x[i]) * scale)), -128.0, 127.0);
    expect_all("cast.s f32->i8 scale 0.37 N=" + std::to_string(n), n,
               [&](size_t i) { return q.sim[i] == want[i] && q.fp64[i] == want[i]; },
               [&](size_t i) { return "x " + num(x[i]) + ": sim " + num(q.sim[i]) + ", reference " + num(q.fp64[i]) + ", host " + num(want[i]); });
  }
}

// ---- another array shape (its own process under ctest) -----------------------------------------------------

const std::vector<std::string>& array16() {
  static const std::vector<std::string> s{"mxu.rows=16", "mxu.cols=16", "mxu.acc_rows=64"};
  return s;
}

TEST(ReferenceKernels, GemmsOn16x16Array) {
  TPUSIM_MACHINES(m, array16());
  gemm_int8_cases(*m, shapes(3, 401, m->cfg), {.bias = true, .relu = true}, 7);
  gemm_bf16_cases(*m, shapes(3, 402, m->cfg), {}, 8);
}

}  // namespace
}  // namespace tpusim::reftest
