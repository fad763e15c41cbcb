// The fused row-wise kernel generator (tpusim/kernels/rowwise.h) on the simulated chip (v4-like), against a host
// reference that evaluates the same node graph in double (std::exp, std::erf, std::tanh, exact GELU forms) on
// the very inputs written to HBM (bf16 inputs already rounded). Each test elaborates one chip, in its own process.
//
// Tolerances (|got - ref| <= atol + rtol * |ref|), and why:
// - f32 in and out: rtol 1e-5. Each vector instruction rounds once (2^-24 relative) and exp/recip/rsqrt are
//   correctly rounded f32 library calls on the host; the longest chains here (softmax: exp of an f32 difference,
//   a 77-term f32 sum, a reciprocal; layer norm: two 768-term sums) accumulate at most some tens of ulps.
// - Erf and GELU (erf form): rtol 1e-5 alone: vpu.erf and vpu.erfc are the f32 nearest the exact value, and GELU,
//   0.5 x erfc(-x / sqrt2), has no cancellation.
// - Tanh: plus atol 5e-7: 1 - 2/(exp(2x)+1) loses relative accuracy near 0 (a difference of numbers near 1), so
//   its error is absolute, a few ulps of 1.
// - Log, Sin, Cos: rtol 1e-7: the f32 nearest the exact value (vpu.log/sin/cos), of the very f32 input; Floor, Ceil,
//   Round, Sign: exact. Softplus: plus atol 2e-7: log(1 + exp(-|x|)) rounds 1 + exp(-|x|) first (a few ulps of 1,
//   absolute). Mish, computed as x n/(n+2): a few f32 roundings, relative (atol only for subnormal exp(x) at x < -87).
// - bf16 out: rtol 2^-8: the f32 result is rounded once to bf16 (half an ulp = 2^-9 relative), plus the f32
//   error above; atol covers results near 0 that are differences of O(1) values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>

#include "tests/generated_kernel.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/rowwise.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

namespace rw = kernels::rowwise;
using isa::DType;
using rw::Op;

struct Tol {
  double rtol = 1e-5, atol = 0, atol_x = 0;  // atol_x: absolute, times max(1, |x|) of input 0 at that element
};

// A host evaluation of a rowwise::Program in double.
struct RefVal {
  int kind = 2;  // 0 Full [R*C], 1 Row [R], 2 scalar
  std::vector<double> v;
  double at(int64_t r, int64_t c, int64_t C) const { return kind == 0 ? v[r * C + c] : kind == 1 ? v[r] : v[0]; }
};

double gelu(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / 3.14159265358979323846) * (x + 0.044715 * x * x * x)));
}
double softplus(double x) { return x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x)); }
double unary(Op op, const rw::Node& n, double x) {
  switch (op) {
    case Op::Neg: return -x;
    case Op::Abs: return std::fabs(x);
    case Op::Relu: return x > 0 ? x : 0;
    case Op::Exp: return std::exp(x);
    case Op::Recip: return 1 / x;
    case Op::Sqrt: return std::sqrt(x);
    case Op::Rsqrt: return 1 / std::sqrt(x);
    case Op::Tanh: return std::tanh(x);
    case Op::Sigmoid: return 1 / (1 + std::exp(-x));
    case Op::Erf: return std::erf(x);
    case Op::Gelu: return gelu(x);
    case Op::GeluTanh: return gelu_tanh(x);
    case Op::Clip: return std::min<double>(std::max<double>(x, n.lo), n.hi);
    case Op::Pow: return std::pow(x, static_cast<double>(n.value));
    case Op::Log: return std::log(x);
    case Op::Sin: return std::sin(x);
    case Op::Cos: return std::cos(x);
    case Op::Floor: return std::floor(x);
    case Op::Ceil: return std::ceil(x);
    case Op::Round: return std::nearbyint(x);  // the default rounding mode: to nearest, ties to even
    case Op::Sign: return x > 0 ? 1 : x < 0 ? -1 : 0;
    case Op::Softplus: return softplus(x);
    case Op::Mish: return x * std::tanh(softplus(x));
    default: throw std::logic_error("not unary");
  }
}
double binary(Op op, double a, double b) {
  switch (op) {
    case Op::Add: return a + b;
    case Op::Sub: return a - b;
    case Op::Mul: return a * b;
    case Op::Div: return a / b;
    case Op::Max: return std::max(a, b);
    case Op::Min: return std::min(a, b);
    default: throw std::logic_error("not binary");
  }
}

std::vector<RefVal> evaluate(const rw::Program& p, const std::vector<std::vector<double>>& inputs) {
  const int64_t R = p.rows, C = p.cols;
  std::vector<RefVal> val;
  for (const rw::Node& n : p.nodes) {
    RefVal out;
    if (n.op == Op::Input) {
      const rw::Input& in = p.inputs[static_cast<size_t>(n.input)];
      const auto& d = inputs[static_cast<size_t>(n.input)];
      const int64_t P = in.period > 0 ? in.period : R, w = in.per_row ? 1 : C;
      out.kind = in.per_row ? 1 : 0;
      out.v.resize(static_cast<size_t>(R * w));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < w; ++c) out.v[r * w + c] = d[(r % P) * w + c];
    } else if (n.op == Op::Const) {
      out.v = {n.value};
    } else if (n.op == Op::RowSum || n.op == Op::RowMax || n.op == Op::RowMean) {
      const RefVal& a = val[static_cast<size_t>(n.args[0])];
      if (a.kind != 0) {
        out = a;
        if (a.kind == 2 && n.op == Op::RowSum) out.v[0] *= static_cast<double>(C);
      } else {
        out.kind = 1;
        out.v.resize(static_cast<size_t>(R));
        for (int64_t r = 0; r < R; ++r) {
          double s = 0, m = -INFINITY;
          for (int64_t c = 0; c < C; ++c) s += a.v[r * C + c], m = std::max(m, a.v[r * C + c]);
          out.v[r] = n.op == Op::RowMax ? m : n.op == Op::RowSum ? s : s / static_cast<double>(C);
        }
      }
    } else if (n.args.size() == 2) {
      const RefVal& a = val[static_cast<size_t>(n.args[0])];
      const RefVal& b = val[static_cast<size_t>(n.args[1])];
      out.kind = std::min(a.kind, b.kind);
      const int64_t rows = out.kind == 2 ? 1 : R, cols = out.kind == 0 ? C : 1;
      out.v.resize(static_cast<size_t>(rows * cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out.v[r * cols + c] = binary(n.op, a.at(r, c, C), b.at(r, c, C));
    } else {
      out = val[static_cast<size_t>(n.args[0])];
      for (double& x : out.v) x = unary(n.op, n, x);
    }
    val.push_back(std::move(out));
  }
  return val;
}

// Values as they are after being stored in `dt` (bf16: rounded to nearest even).
std::vector<uint8_t> encode(const std::vector<double>& v, DType dt, std::vector<double>* stored) {
  std::vector<uint8_t> bytes(v.size() * static_cast<size_t>(isa::dtype_size(dt)));
  stored->resize(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const auto f = static_cast<float>(v[i]);
    if (dt == DType::BF16) {
      const uint16_t h = isa::bf16_from_f32(f);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
      (*stored)[i] = isa::f32_from_bf16(h);
    } else if (dt == DType::I8) {  // rounded to the nearest integer in range
      const auto q = static_cast<int8_t>(std::clamp(std::nearbyint(v[i]), -128.0, 127.0));
      std::memcpy(bytes.data() + i, &q, 1);
      (*stored)[i] = q;
    } else {
      std::memcpy(bytes.data() + 4 * i, &f, 4);
      (*stored)[i] = f;
    }
  }
  return bytes;
}

std::vector<double> decode(const std::vector<uint8_t>& bytes, DType dt) {
  const size_t n = bytes.size() / static_cast<size_t>(isa::dtype_size(dt));
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) {
    if (dt == DType::BF16) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + 2 * i, 2);
      v[i] = isa::f32_from_bf16(h);
    } else {
      float f;
      std::memcpy(&f, bytes.data() + 4 * i, 4);
      v[i] = f;
    }
  }
  return v;
}

struct Harness {
  explicit Harness(const std::vector<std::string>& sets = {}, const std::string& preset = "v4-like")
      : cfg(sim::load_config(preset, sets)), chip(std::make_unique<sim::Chip>(cfg)) {
    for (const auto& [k, v] : sim::kernel_symbols(cfg)) syms[k] = v;
  }

  uint64_t alloc(uint64_t bytes) {
    const uint64_t a = next;
    next += (bytes + 4095) / 4096 * 4096;
    return a;
  }

  // Adds an input of `count` elements with the given values; returns its index.
  int add_input(rw::Program& p, const std::vector<double>& values, DType dt, bool per_row = false,
                int64_t period = 0) {
    rw::Input in;
    in.dtype = dt;
    in.per_row = per_row;
    in.period = period;
    std::vector<double> stored;
    const std::vector<uint8_t> bytes = encode(values, dt, &stored);
    in.addr = alloc(bytes.size());
    chip->write_hbm(in.addr, bytes.data(), bytes.size());
    p.inputs.push_back(in);
    host.push_back(stored);
    return static_cast<int>(p.inputs.size()) - 1;
  }
  void add_output(rw::Program& p, int node, DType dt, bool per_row = false) {
    rw::Output o;
    o.node = node;
    o.dtype = dt;
    const uint64_t n = static_cast<uint64_t>(p.rows) * (per_row ? 1 : static_cast<uint64_t>(p.cols));
    o.addr = alloc(n * static_cast<uint64_t>(isa::dtype_size(dt)));
    p.outputs.push_back(o);
    out_rows.push_back(per_row);
  }

  // Runs the kernel and compares every output with the reference; returns the max error over tolerance.
  void run_and_check(const rw::Program& p, const std::vector<Tol>& tols, bool functional = true) {
    plan = rw::plan(p, syms);
    prog = rw::kernel(p, syms);
    sim::RunOptions opts;
    opts.functional = functional;
    result = chip->run(prog, opts);
    std::printf("rows %lld cols %lld: T = %lld (%lld tiles), %d vector ops per tile, %d full temporaries, "
                "%zu instructions, %llu cycles\n",
                static_cast<long long>(p.rows), static_cast<long long>(p.cols),
                static_cast<long long>(plan.tile_rows), static_cast<long long>(plan.tiles), plan.vector_ops_per_tile,
                plan.full_temps, prog.code.size(), static_cast<unsigned long long>(result.stats.cycles));
    if (!functional) return;
    const std::vector<RefVal> ref = evaluate(p, host);
    for (size_t o = 0; o < p.outputs.size(); ++o) {
      const rw::Output& out = p.outputs[o];
      const RefVal& r = ref[static_cast<size_t>(out.node)];
      const int64_t w = out_rows[o] ? 1 : p.cols;
      const size_t n = static_cast<size_t>(p.rows * w);
      std::vector<uint8_t> bytes(n * static_cast<size_t>(isa::dtype_size(out.dtype)));
      chip->read_hbm(out.addr, bytes.data(), bytes.size());
      const std::vector<double> got = decode(bytes, out.dtype);
      const Tol& t = tols[std::min(o, tols.size() - 1)];
      double worst = 0;
      size_t bad = 0, first = 0;
      for (int64_t i = 0; i < p.rows; ++i)
        for (int64_t j = 0; j < w; ++j) {
          const size_t k = static_cast<size_t>(i * w + j);
          const double want = r.at(i, j, p.cols);
          const double x = host.empty() || w != p.cols || host[0].size() != n ? 0.0 : std::fabs(host[0][k]);
          const double lim = t.atol + t.atol_x * std::max(1.0, x) + t.rtol * std::fabs(want);
          const double err = std::fabs(got[k] - want);
          const bool ok = err <= lim || (std::isinf(want) && got[k] == want);
          if (!ok && bad++ == 0) first = k;
          if (std::isfinite(err)) worst = std::max(worst, lim > 0 ? err / lim : err);
        }
      std::printf("  output %zu: worst error / tolerance %.3f\n", o, worst);
      EXPECT_EQ(bad, 0u) << "output " << o << ": " << bad << " of " << n << " elements off; first at row "
                         << first / static_cast<size_t>(w) << " col " << first % static_cast<size_t>(w) << ": got "
                         << got[first] << ", expected " << r.at(static_cast<int64_t>(first) / w,
                                                                static_cast<int64_t>(first) % w, p.cols);
    }
  }

  sim::ChipConfig cfg;
  std::unique_ptr<sim::Chip> chip;
  std::map<std::string, int64_t> syms;
  uint64_t next = 1 << 20;
  std::vector<std::vector<double>> host;
  std::vector<bool> out_rows;
  rw::Plan plan;
  isa::Program prog;
  sim::RunResult result;
};

std::vector<double> uniform(size_t n, double lo, double hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<double> v(n);
  for (double& x : v) x = d(rng);
  return v;
}

// softmax(x) = exp(x - rowmax(x)) * recip(rowsum(exp(...))).
int softmax(rw::Program& p, int x) {
  const int e = p.unary(Op::Exp, p.binary(Op::Sub, x, p.unary(Op::RowMax, x)));
  return p.binary(Op::Mul, e, p.unary(Op::Recip, p.unary(Op::RowSum, e)));
}

TEST(Rowwise, SoftmaxF32) {
  Harness h;
  rw::Program p;
  p.rows = 300, p.cols = 77;
  const int x = p.input(h.add_input(p, uniform(300 * 77, -8, 8, 1), DType::F32));
  h.add_output(p, softmax(p, x), DType::F32);
  h.run_and_check(p, {Tol{1e-5, 1e-12}});
  // x, e (in x's buffer, in place) and the output slot: no more than one Full temporary.
  EXPECT_LE(h.plan.full_temps, 1);
  EXPECT_EQ(h.plan.vector_ops_per_tile, 6);
}

TEST(Rowwise, LayerNormBf16WithGammaBetaVectors) {
  Harness h;
  rw::Program p;
  p.rows = 257, p.cols = 768;
  const float eps = 1e-5f;
  std::vector<double> xv = uniform(257 * 768, -3, 5, 2);
  const int x = p.input(h.add_input(p, xv, DType::BF16));
  const int gamma = p.input(h.add_input(p, uniform(768, 0.5, 1.5, 3), DType::F32, false, 1));
  const int beta = p.input(h.add_input(p, uniform(768, -1, 1, 4), DType::BF16, false, 1));
  const int d = p.binary(Op::Sub, x, p.unary(Op::RowMean, x));
  const int var = p.unary(Op::RowMean, p.pow(d, 2));
  const int rs = p.unary(Op::Rsqrt, p.binary(Op::Add, var, p.constant(eps)));
  const int y = p.binary(Op::Add, p.binary(Op::Mul, p.binary(Op::Mul, d, rs), gamma), beta);
  h.add_output(p, y, DType::BF16);
  h.run_and_check(p, {Tol{1.0 / 256 + 1e-5, 1e-4}});
  EXPECT_TRUE(h.plan.invariant[1]);
  EXPECT_TRUE(h.plan.invariant[2]);
  EXPECT_GT(h.plan.tiles, 1);
  // x is cast once, gamma and beta are loop-invariant (cast once at the start): no cast of them per tile.
  // (The constant table's casts carry scale_en.)
  const std::string src = rw::source(p, h.syms);
  int casts = 0;
  for (size_t at = 0; (at = src.find("vpu.cast", at)) != std::string::npos; ++at)
    if (src.substr(at, src.find('\n', at) - at).find("scale_en") == std::string::npos) ++casts;
  EXPECT_EQ(casts, 3);  // x in, y out, beta once at the start
}

// A LayerNorm's scale and shift (f32 [768], loop-invariant: loaded once, a row per tile row, hstride 0) load after
// the first tile's input, and the vector unit waits for them only at the scale's multiply: on v4 with one DMA engine
// a queue (its loads one after the other), one tile of 64 x 768 in bf16, the whole LayerNorm takes at most its two
// extra passes (the multiply and the add, each 64 x 768 / the vector unit's 1024 lanes = 48 cycles and its latency
// of 8) and 16 cycles more than the same program without them (measured 890 against 795): the tables' transfers
// hide behind the mean and variance. (Loaded before the tile's input, the vector unit waiting for them before the
// tile: 1,098.) The values: as the reference.
TEST(Rowwise, LayerNormScaleAndShiftLoadBehindTheFirstPasses) {
  Harness h({"dma.engines=1"}, "v4");  // (one chip a process: both programs run on it)
  auto layernorm = [&h](bool affine) {
    h.host.clear(), h.out_rows.clear();
    rw::Program p;
    p.rows = 64, p.cols = 768;
    const int x = p.input(h.add_input(p, uniform(64 * 768, -3, 5, 7), DType::BF16));
    const int d = p.binary(Op::Sub, x, p.unary(Op::RowMean, x));
    const int rs = p.unary(Op::Rsqrt, p.binary(Op::Add, p.unary(Op::RowMean, p.pow(d, 2)), p.constant(1e-5f)));
    int y = p.binary(Op::Mul, d, rs);
    if (affine) {
      const int gamma = p.input(h.add_input(p, uniform(768, 0.5, 1.5, 8), DType::F32, false, 1));
      const int beta = p.input(h.add_input(p, uniform(768, -1, 1, 9), DType::F32, false, 1));
      y = p.binary(Op::Add, p.binary(Op::Mul, y, gamma), beta);
    }
    h.add_output(p, y, DType::BF16);
    h.run_and_check(p, {Tol{1.0 / 256 + 1e-5, 1e-4}});
    EXPECT_EQ(h.plan.tiles, 1);
    return h.result.stats.cycles;
  };
  const uint64_t with = layernorm(true), without = layernorm(false);
  const uint64_t pass = 64 * 768 / 1024 + 8;
  std::printf("LayerNorm 64 x 768 on v4: %llu cycles with its scale and shift, %llu without (passes of %llu)\n",
              static_cast<unsigned long long>(with), static_cast<unsigned long long>(without),
              static_cast<unsigned long long>(pass));
  EXPECT_LE(with, without + 2 * pass + 16);
}

// A max pool's taps: a maximum (or minimum) of bf16 inputs into a bf16 output is one of the inputs, so the kernel
// computes it on the bf16 values as loaded (vpu.max bf16), without a cast to f32 per input and one back
// (fold_selects): a 3 x 3 pool's 9 taps in 8 vector instructions a tile (18 with the casts), against the double
// reference exactly, with infinities and signed zeros; and with NaNs, the same values as the f32 lowering the same
// program takes when its output is f32 (NaN wherever a tap is NaN).
TEST(Rowwise, MaxAndMinOfBf16InputsComputeInBf16) {
  Harness h;
  constexpr int64_t R = 112, C = 512;
  const double inf = std::numeric_limits<double>::infinity(), nan = std::numeric_limits<double>::quiet_NaN();
  auto taps = [&](bool with_nan) {
    std::vector<std::vector<double>> t;
    for (uint32_t i = 0; i < 9; ++i) {
      std::vector<double> v = uniform(R * C, -4, 4, 20 + i);
      if (i > 0)  // (not tap 0: the harness scales its tolerance by input 0)
        v[static_cast<size_t>(i)] = inf, v[static_cast<size_t>(i + 9)] = -inf;
      v[18] = i % 2 ? -0.0 : 0.0;  // max(-0, +0) = +0, min = -0
      for (size_t k = 19; k < 40; ++k) v[k] = -1.0 - static_cast<double>(i);
      if (with_nan) v[static_cast<size_t>(40 + i)] = nan;
      t.push_back(v);
    }
    return t;
  };
  auto pool = [&](const std::vector<std::vector<double>>& t, DType out) {
    h.host.clear(), h.out_rows.clear();
    rw::Program p;
    p.rows = R, p.cols = C;
    int m = -1;
    for (const std::vector<double>& v : t) {
      const int x = p.input(h.add_input(p, v, DType::BF16));
      m = m < 0 ? x : p.binary(Op::Max, m, x);
    }
    h.add_output(p, m, out);
    // the minimum of the first two taps, loaded again (an input read by one operation only is loaded as bf16)
    const int a = p.input(h.add_input(p, t[0], DType::BF16)), b = p.input(h.add_input(p, t[1], DType::BF16));
    h.add_output(p, p.binary(Op::Min, a, b), out);
    return p;
  };
  const rw::Program exact = pool(taps(false), DType::BF16);
  h.run_and_check(exact, {Tol{0}});
  EXPECT_EQ(h.plan.vector_ops_per_tile, 9);  // 8 maxima and a minimum, no casts
  // With NaNs: the bf16 program's values against the f32 program's (11 casts, the 9 operations, no cast out)
  auto values = [&](const rw::Program& p) {
    h.plan = rw::plan(p, h.syms);
    h.prog = rw::kernel(p, h.syms);
    h.result = h.chip->run(h.prog, sim::RunOptions{});
    std::vector<std::vector<double>> out;
    for (const rw::Output& o : p.outputs) {
      std::vector<uint8_t> bytes(static_cast<size_t>(R * C) * static_cast<size_t>(isa::dtype_size(o.dtype)));
      h.chip->read_hbm(o.addr, bytes.data(), bytes.size());
      out.push_back(decode(bytes, o.dtype));
    }
    return out;
  };
  const std::vector<std::vector<double>> bf = values(pool(taps(true), DType::BF16));
  EXPECT_EQ(h.plan.vector_ops_per_tile, 9);
  const std::vector<std::vector<double>> f = values(pool(taps(true), DType::F32));
  EXPECT_EQ(h.plan.vector_ops_per_tile, 20);
  for (size_t o = 0; o < 2; ++o) {
    size_t nans = 0, off = 0;
    for (size_t k = 0; k < bf[o].size(); ++k) {
      if (std::isnan(f[o][k])) {
        ++nans;
        off += !std::isnan(bf[o][k]);
      } else {
        off += !(bf[o][k] == f[o][k] && std::signbit(bf[o][k]) == std::signbit(f[o][k]));
      }
    }
    EXPECT_EQ(off, 0u) << "output " << o;
    EXPECT_EQ(nans, o == 0 ? 9u : 2u) << "output " << o;  // the max: each tap's NaN; the min of taps 0 and 1: theirs
  }
}

TEST(Rowwise, GeluErfAndTanhForms) {
  Harness h;
  rw::Program p;
  p.rows = 64, p.cols = 3072;
  std::vector<double> xv = uniform(64 * 3072, -6, 6, 5);
  xv[0] = 0, xv[1] = -0.0, xv[2] = 1e-6, xv[3] = -1e-6, xv[4] = 20, xv[5] = -20;
  const int x = p.input(h.add_input(p, xv, DType::F32));
  h.add_output(p, p.unary(Op::Gelu, x), DType::F32);
  h.add_output(p, p.unary(Op::GeluTanh, x), DType::F32);
  h.add_output(p, p.unary(Op::Erf, x), DType::F32);
  h.run_and_check(p, {Tol{1e-5}, Tol{1e-5, 0, 5e-7}, Tol{1e-5}});
}

// GELU's negative tail, where the result is far below x: within 1e-5 relative of 0.5 x (1 + erf(x / sqrt2)) down
// to x = -6 (the kernel's 0.5 x erfc(-x / sqrt2), vpu.erfc rounded once, subtracts nothing there; x (0.5 erf(x /
// sqrt2) + 0.5) is 4% off at -5 and 0 at -6), in 4 vector instructions (21 with an erf polynomial before vpu.erfc).
TEST(Rowwise, GeluKeepsItsRelativeAccuracyForNegativeInputs) {
  Harness h;
  rw::Program p;
  p.rows = 8, p.cols = 1024;
  std::vector<double> xv = uniform(8 * 1024, -6, -0.01, 9);
  const int x = p.input(h.add_input(p, xv, DType::F32));
  h.add_output(p, p.unary(Op::Gelu, x), DType::F32);
  h.run_and_check(p, {Tol{1e-5}});
  EXPECT_EQ(h.plan.vector_ops_per_tile, 4);  // f32 in and out: GELU's own instructions, no cast
  // The tanh form, x sigmoid(2k (x + 0.044715 x^3)): 9 (x x, x^2 x, x 0.044715, + x, x -2k, exp, + 1, recip, x x).
  rw::Program t;
  t.rows = 8, t.cols = 1024;
  t.outputs.push_back({t.unary(Op::GeluTanh, t.input(0)), 0, DType::F32});
  t.inputs.push_back(p.inputs[0]);
  EXPECT_EQ(rw::plan(t, h.syms).vector_ops_per_tile, 9);
}

// scores [B*H*S, S] + mask [S, S]: row r adds mask row r % S.
void periodic_mask(bool small_vmem) {
  const int64_t B = 2, H = 3, S = 40;
  Harness h;
  rw::Program p;
  p.rows = B * H * S, p.cols = S;
  // 30000 bytes: about 30 rows of 2 slots x (scores + mask + out) x 160 bytes, so T < S and T does not divide S.
  if (small_vmem) p.vmem_bytes = 30000;
  const int s = p.input(h.add_input(p, uniform(static_cast<size_t>(B * H * S * S), -4, 4, 6), DType::F32));
  std::vector<double> mask(static_cast<size_t>(S * S));
  for (int64_t i = 0; i < S; ++i)
    for (int64_t j = 0; j < S; ++j) mask[static_cast<size_t>(i * S + j)] = j <= i ? 0.0 : -1e4;
  const int m = p.input(h.add_input(p, mask, DType::F32, false, S));
  h.add_output(p, p.binary(Op::Add, s, m), DType::F32);
  h.run_and_check(p, {Tol{1e-7}});  // one f32 rounding
  if (small_vmem) {
    EXPECT_FALSE(h.plan.invariant[1]);
    EXPECT_LT(h.plan.tile_rows, S);
    EXPECT_NE(S % h.plan.tile_rows, 0);
  } else {
    EXPECT_TRUE(h.plan.invariant[1]);
  }
}

TEST(Rowwise, PeriodicMaskLoadedOnceWhenTilesAlign) { periodic_mask(false); }

// Several cores share the rows (Program::cores): each output must match the reference and, bit for bit, the
// same program on one core; `sets` describe the chip.
struct Split {
  rw::Plan plan;
  uint64_t cycles = 0, one_core_cycles = 0;
};
Split split_rows(rw::Program p, int64_t cores, const std::vector<std::string>& sets,
                 const std::function<void(Harness&, rw::Program&)>& build, const std::vector<Tol>& tols) {
  Split out;
  std::vector<std::vector<uint8_t>> results[2];
  Harness h(sets);  // one chip per process (SystemC elaborates once): both runs use it, on fresh buffers
  for (int pass = 0; pass < 2; ++pass) {
    h.host.clear();
    h.out_rows.clear();
    rw::Program q = p;
    q.cores = pass == 0 ? 1 : cores;
    build(h, q);
    h.run_and_check(q, tols);
    (pass == 0 ? out.one_core_cycles : out.cycles) = h.result.stats.cycles;
    if (pass == 1) {
      out.plan = h.plan;
      EXPECT_EQ(h.prog.cores, static_cast<uint32_t>(cores));
      EXPECT_EQ(h.result.stats.cores_running, cores);
    }
    for (const rw::Output& o : q.outputs) {
      const bool per_row = h.out_rows[results[pass].size()];
      std::vector<uint8_t> bytes(static_cast<size_t>(q.rows * (per_row ? 1 : q.cols) * isa::dtype_size(o.dtype)));
      h.chip->read_hbm(o.addr, bytes.data(), bytes.size());
      results[pass].push_back(std::move(bytes));
    }
  }
  EXPECT_EQ(results[0], results[1]) << "the outputs on " << cores << " cores differ from one core's";
  return out;
}

// Strided inputs (Input::stride): three taps of a window of stride 2 read in place from one buffer of 2R + 2 rows
// (tap k: rows 2r + k, 2 x C elements apart), as the compiler's pooling and depthwise kernels read a padded input
// split into phases of rows (ops_conv.cpp, tap_views): their maximum (exact) and the sum of the outer two (f32,
// within its rounding), against the host's rows, on one core and on three (the same bytes). A stride on a periodic or per-row input
// is refused.
TEST(Rowwise, StridedRowsReadInPlace) {
  constexpr int64_t R = 1200, C = 512;
  const std::vector<double> base = uniform(static_cast<size_t>((2 * R + 2) * C), -4, 4, 41);
  rw::Program p;
  p.rows = R, p.cols = C;
  auto build = [&](Harness& h, rw::Program& q) {
    std::vector<double> stored;
    const std::vector<uint8_t> bytes = encode(base, DType::BF16, &stored);
    const uint64_t at = h.alloc(bytes.size());
    h.chip->write_hbm(at, bytes.data(), bytes.size());
    std::vector<int> x;
    for (int64_t k = 0; k < 3; ++k) {
      rw::Input in;
      in.addr = at + static_cast<uint64_t>(k * C * 2), in.dtype = DType::BF16, in.stride = 2 * C * 2;
      q.inputs.push_back(in);
      std::vector<double> rows(static_cast<size_t>(R * C));
      for (int64_t r = 0; r < R; ++r)
        for (int64_t c = 0; c < C; ++c) rows[static_cast<size_t>(r * C + c)] = stored[static_cast<size_t>((2 * r + k) * C + c)];
      h.host.push_back(rows);
      x.push_back(q.input(static_cast<int>(q.inputs.size()) - 1));
    }
    h.add_output(q, q.binary(Op::Max, q.binary(Op::Max, x[0], x[1]), x[2]), DType::BF16);
    h.add_output(q, q.binary(Op::Add, x[0], x[2]), DType::F32);
  };
  const Split s = split_rows(p, 3, {"chip.cores=3"}, build, {Tol{0}, Tol{0, 0, 0x1p-24}});
  EXPECT_EQ(s.plan.cores_used, 3);
  EXPECT_GT(s.plan.tiles, 1);  // on each core: rows offset by tile
  rw::Program bad = p;
  bad.inputs.push_back(rw::Input{1 << 20, DType::BF16, false, 4, "periodic", 2 * C * 2});
  bad.outputs.push_back(rw::Output{bad.input(0), 1 << 24, DType::BF16});
  try {
    std::map<std::string, int64_t> syms;
    for (const auto& [k, v] : sim::kernel_symbols(sim::load_config("v4-like", {}))) syms[k] = v;
    rw::source(bad, syms);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("row stride"), std::string::npos) << e.what();
  }
}

TEST(Rowwise, RowsSharedAmongCoresGiveTheOneCoreResults) {
  // Layer norm of [257, 768] on 5 cores: S = ceil(257 / 5) = 52 rows each (the last core 49); gamma and beta
  // (period 1) stay loop-invariant on every core.
  rw::Program p;
  p.rows = 257, p.cols = 768;
  auto build = [](Harness& h, rw::Program& q) {
    const int x = q.input(h.add_input(q, uniform(257 * 768, -3, 5, 2), DType::BF16));
    const int gamma = q.input(h.add_input(q, uniform(768, 0.5, 1.5, 3), DType::F32, false, 1));
    const int beta = q.input(h.add_input(q, uniform(768, -1, 1, 4), DType::BF16, false, 1));
    const int d = q.binary(Op::Sub, x, q.unary(Op::RowMean, x));
    const int rs = q.unary(Op::Rsqrt, q.binary(Op::Add, q.unary(Op::RowMean, q.pow(d, 2)), q.constant(1e-5f)));
    h.add_output(q, q.binary(Op::Add, q.binary(Op::Mul, q.binary(Op::Mul, d, rs), gamma), beta), DType::BF16);
    h.add_output(q, rs, DType::F32, true);
  };
  const Split s = split_rows(p, 5, {"chip.cores=5"}, build, {Tol{1.0 / 256 + 1e-5, 1e-4}, Tol{0, 0, 1e-5}});
  EXPECT_EQ(s.plan.core_rows, 52);
  EXPECT_EQ(s.plan.cores_used, 5);
  EXPECT_TRUE(s.plan.invariant[1]);
  EXPECT_TRUE(s.plan.invariant[2]);
  // The vector work is shared five ways; the largest share is 52 of 257 rows, so the run takes well under half
  // of one core's cycles (the constant table and the pipeline's fill are paid once per core).
  std::printf("one core %llu cycles, five cores %llu\n", static_cast<unsigned long long>(s.one_core_cycles),
              static_cast<unsigned long long>(s.cycles));
  EXPECT_LT(s.cycles * 2, s.one_core_cycles);
}

// scores [240, 40] + mask [40, 40] (period 40), rows shared among cores.
Split periodic_split(int64_t cores) {
  rw::Program p;
  p.rows = 240, p.cols = 40;
  auto build = [](Harness& h, rw::Program& q) {
    const int s = q.input(h.add_input(q, uniform(240 * 40, -4, 4, 6), DType::F32));
    std::vector<double> mask(40 * 40);
    for (int i = 0; i < 40; ++i)
      for (int j = 0; j < 40; ++j) mask[static_cast<size_t>(i * 40 + j)] = j <= i ? 0.0 : -1e4;
    const int m = q.input(h.add_input(q, mask, DType::F32, false, 40));
    h.add_output(q, q.binary(Op::Add, s, m), DType::F32);
  };
  return split_rows(p, cores, {"chip.cores=8"}, build, {Tol{1e-7}});
}

TEST(Rowwise, RowsSharedAmongCoresStartAPeriodicPatternOnEachCore) {
  // On 3 cores S = 80, a multiple of 40: each core's first row starts the mask, which is loaded once per core.
  const Split s = periodic_split(3);
  EXPECT_EQ(s.plan.core_rows, 80);
  EXPECT_TRUE(s.plan.invariant[1]);
}

TEST(Rowwise, RowsSharedAmongCoresWrapAPeriodicPatternPerTile) {
  // On 7 cores S = ceil(240 / 7) = 35; rounding up to 40 would cost 5 > 35 / 8 rows, so S stays 35 and the mask
  // is loaded per tile, wrapping at row 40 from each core's first row (core 1 starts at mask row 35).
  const Split s = periodic_split(7);
  EXPECT_EQ(s.plan.core_rows, 35);
  EXPECT_EQ(s.plan.cores_used, 7);
  EXPECT_FALSE(s.plan.invariant[1]);
}

TEST(Rowwise, MoreCoresThanRowsLeavesTheRestIdle) {
  // 3 rows on 8 cores: one row each on cores 0-2; cores 3-7 find no rows and skip the kernel.
  rw::Program p;
  p.rows = 3, p.cols = 1000;
  auto build = [](Harness& h, rw::Program& q) {
    const int x = q.input(h.add_input(q, uniform(3 * 1000, -8, 8, 9), DType::F32));
    h.add_output(q, softmax(q, x), DType::F32);
  };
  const Split s = split_rows(p, 8, {"chip.cores=8"}, build, {Tol{1e-5, 1e-12}});
  EXPECT_EQ(s.plan.core_rows, 1);
  EXPECT_EQ(s.plan.cores_used, 3);
}
TEST(Rowwise, PeriodicMaskLoadedInWrappingPiecesPerTile) { periodic_mask(true); }

TEST(Rowwise, PerRowInputsAndRowReductionsWrittenOut) {
  Harness h;
  rw::Program p;
  p.rows = 333, p.cols = 100;
  const int x = p.input(h.add_input(p, uniform(333 * 100, -2, 2, 7), DType::F32));
  const int scale = p.input(h.add_input(p, uniform(333, 0.5, 2, 8), DType::BF16, true));
  const int shift = p.input(h.add_input(p, uniform(333, -1, 1, 9), DType::F32, true));
  // Full = shift - x * scale (PerRow minus Full: not commutative), and per-row results.
  h.add_output(p, p.binary(Op::Sub, shift, p.binary(Op::Mul, x, scale)), DType::F32);
  h.add_output(p, p.unary(Op::RowSum, x), DType::F32, true);
  h.add_output(p, p.unary(Op::RowMax, x), DType::F32, true);
  h.add_output(p, p.unary(Op::RowMean, x), DType::BF16, true);
  h.add_output(p, p.binary(Op::Add, p.unary(Op::RowSum, x), shift), DType::F32, true);
  h.add_output(p, p.binary(Op::Max, x, shift), DType::F32);  // max with a PerRow operand
  // A per-row input repeating every 7 rows (333 = 47 * 7 + 4: its pattern loaded once, a partial copy last).
  const int cyc = p.input(h.add_input(p, uniform(7, 1, 2, 17), DType::F32, true, 7));
  h.add_output(p, p.binary(Op::Mul, x, cyc), DType::BF16);
  // Row sums of 100 f32 values of |x| <= 2 summed in order: |error| <= 99 * 2^-24 * sum|x| (about 6e-4 at worst,
  // 1e-5 typically), hence atol 1e-4 on the sums rather than a relative bound (a sum may be near 0).
  h.run_and_check(p, {Tol{1e-5, 1e-6}, Tol{1e-5, 1e-4}, Tol{0}, Tol{1.0 / 256 + 1e-5, 1e-6}, Tol{1e-5, 1e-4}, Tol{0}, Tol{1.0 / 256 + 1e-5}});
  EXPECT_TRUE(h.plan.invariant[3]);
}

TEST(Rowwise, SigmoidAndTanhSaturate) {
  Harness h;
  rw::Program p;
  p.rows = 20, p.cols = 50;
  p.vmem_base = 1 << 20;  // the kernel confined to VMEM from 1 MiB up
  std::vector<double> xv = uniform(1000, -10, 10, 10);
  const double special[] = {100, -100, 20, -20, 0, 1e-3, -1e-3, 88, -88, 89, -89, 1e-30};
  for (size_t i = 0; i < std::size(special); ++i) xv[i] = special[i];
  const int x = p.input(h.add_input(p, xv, DType::F32));
  h.add_output(p, p.unary(Op::Sigmoid, x), DType::F32);
  h.add_output(p, p.unary(Op::Tanh, x), DType::F32);
  h.run_and_check(p, {Tol{1e-5, 1e-30}, Tol{1e-5, 5e-7}});
  float got[2];
  h.chip->read_hbm(h.prog.find("out1")->addr, got, 8);
  EXPECT_EQ(got[0], 1.0f);   // tanh(100)
  EXPECT_EQ(got[1], -1.0f);  // tanh(-100)
  h.chip->read_hbm(h.prog.find("out0")->addr, got, 8);
  EXPECT_EQ(got[0], 1.0f);  // sigmoid(100)
  EXPECT_EQ(got[1], 0.0f);  // sigmoid(-100): exp(100) overflows to inf, 1/inf = 0
}

TEST(Rowwise, LogSinCosAndRoundings) {
  Harness h;
  rw::Program p;
  p.rows = 30, p.cols = 70;
  std::vector<double> xv = uniform(30 * 70, -50, 50, 21), pos(30 * 70);
  // Ties for Round (to even), signs for Floor/Ceil, subnormals and zeros for Sign, large arguments for Sin/Cos.
  const double special[] = {0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0, -0.0, 1e-40, -1e-45, 3, -3, 1e4, -1e6, 3e7,
                            8388607.5, 1.5707963267948966, 3.141592653589793, 7.5, -7.5};
  for (size_t i = 0; i < std::size(special); ++i) xv[i] = special[i];
  std::mt19937 rng(22);
  for (double& v : pos) v = std::exp(std::uniform_real_distribution<double>(-20, 20)(rng));  // log-uniform
  pos[0] = 1, pos[1] = 0, pos[2] = 1e-40, pos[3] = 3e38;  // ln 1 = 0, ln 0 = -inf, a subnormal, near the top
  const int x = p.input(h.add_input(p, xv, DType::F32));
  const int y = p.input(h.add_input(p, pos, DType::F32));
  h.add_output(p, p.unary(Op::Sin, x), DType::F32);
  h.add_output(p, p.unary(Op::Cos, x), DType::F32);
  h.add_output(p, p.unary(Op::Log, y), DType::F32);
  h.add_output(p, p.unary(Op::Floor, x), DType::F32);
  h.add_output(p, p.unary(Op::Ceil, x), DType::F32);
  h.add_output(p, p.unary(Op::Round, x), DType::F32);
  h.add_output(p, p.unary(Op::Sign, x), DType::F32);
  // A constant argument folds on the host with the same functions: x * sin(0.5) + log(2)
  h.add_output(p, p.binary(Op::Add, p.binary(Op::Mul, x, p.unary(Op::Sin, p.constant(0.5f))),
                           p.unary(Op::Log, p.constant(2))), DType::F32);
  h.add_output(p, p.unary(Op::Cos, x), DType::BF16);
  h.run_and_check(p, {Tol{1e-7}, Tol{1e-7}, Tol{1e-7}, Tol{0}, Tol{0}, Tol{0}, Tol{0}, Tol{1e-6, 1e-6},
                      Tol{1.0 / 256 + 1e-7}});
  float got[4];
  h.chip->read_hbm(h.prog.find("out5")->addr, got, 16);  // Round of 0.5, 1.5, 2.5, -0.5: ties to even
  EXPECT_EQ(got[0], 0.0f);
  EXPECT_EQ(got[1], 2.0f);
  EXPECT_EQ(got[2], 2.0f);
  EXPECT_TRUE(got[3] == 0.0f && std::signbit(got[3]));
  h.chip->read_hbm(h.prog.find("out6")->addr + 24, got, 16);  // Sign of 0, -0, 1e-40, -1e-45 (subnormals)
  EXPECT_TRUE(got[0] == 0.0f && !std::signbit(got[0]));
  EXPECT_TRUE(got[1] == 0.0f && std::signbit(got[1]));
  EXPECT_EQ(got[2], 1.0f);
  EXPECT_EQ(got[3], -1.0f);
}

TEST(Rowwise, SoftplusMishAndLogSoftmax) {
  Harness h;
  rw::Program p;
  p.rows = 25, p.cols = 77;
  std::vector<double> xv = uniform(25 * 77, -30, 30, 23);
  const double special[] = {0, 100, -100, 20, -20, 19.9, 20.1, 88, 89, -87, -89, 1e-3, -1e-3, 16, -16};
  for (size_t i = 0; i < std::size(special); ++i) xv[i] = special[i];
  const int x = p.input(h.add_input(p, xv, DType::F32));
  h.add_output(p, p.unary(Op::Softplus, x), DType::F32);
  h.add_output(p, p.unary(Op::Mish, x), DType::F32);
  // log_softmax(x) = s - log(rowsum(exp(s))), s = x - rowmax(x)
  const int sh = p.binary(Op::Sub, x, p.unary(Op::RowMax, x));
  h.add_output(p, p.binary(Op::Sub, sh, p.unary(Op::Log, p.unary(Op::RowSum, p.unary(Op::Exp, sh)))), DType::F32);
  // folded on the host in f32: x + softplus(-1) cancels near x = -0.31, so an absolute 1e-7 (ulps of 0.31)
  h.add_output(p, p.binary(Op::Add, x, p.unary(Op::Softplus, p.constant(-1))), DType::F32);
  h.add_output(p, p.unary(Op::Mish, x), DType::BF16);
  // log_softmax: |s| up to 60 and the log of a 77-term sum: rtol 1e-6 plus an absolute 1e-5 (ulps of 60).
  h.run_and_check(p, {Tol{1e-6, 2e-7}, Tol{1e-6, 1e-40}, Tol{1e-6, 1e-5}, Tol{1e-6, 1e-7}, Tol{1.0 / 256 + 1e-6, 1e-40}});
  float got[3];
  h.chip->read_hbm(h.prog.find("out0")->addr, got, 12);
  EXPECT_EQ(got[0], static_cast<float>(std::log(2.0)));  // softplus(0) = ln 2
  EXPECT_EQ(got[1], 100.0f);                             // softplus(100): no overflow
  EXPECT_EQ(got[2], 0.0f);                               // softplus(-100) = 3.7e-44: lost below 1 + 2^-24
  h.chip->read_hbm(h.prog.find("out1")->addr, got, 12);
  EXPECT_EQ(got[1], 100.0f);  // mish(100) = 100: exp(min(x, 20)) does not overflow
}

TEST(Rowwise, DivPowAndMiscellaneousOps) {
  Harness h;
  rw::Program p;
  p.rows = 70, p.cols = 130;
  std::vector<double> xv = uniform(70 * 130, -3, 3, 11);
  xv[0] = 0;
  const int x = p.input(h.add_input(p, xv, DType::F32));
  const int b = p.input(h.add_input(p, uniform(70 * 130, 0.5, 4, 12), DType::F32));
  const int two = p.constant(2);
  h.add_output(p, p.binary(Op::Div, x, b), DType::F32);
  h.add_output(p, p.pow(x, 2), DType::F32);
  h.add_output(p, p.pow(p.unary(Op::Abs, x), 0.5f), DType::F32);  // sqrt, 0 -> 0
  h.add_output(p, p.pow(b, -0.5f), DType::F32);
  h.add_output(p, p.pow(x, 3), DType::F32);
  h.add_output(p, p.clip(x, -1, 2), DType::F32);
  h.add_output(p, p.binary(Op::Sub, two, x), DType::F32);  // c - x
  h.add_output(p, p.binary(Op::Div, two, b), DType::F32);  // c / x
  h.add_output(p, p.binary(Op::Min, p.unary(Op::Relu, x), p.unary(Op::Neg, b)), DType::F32);
  h.add_output(p, p.binary(Op::Max, x, p.binary(Op::Mul, two, p.constant(0.25f))), DType::F32);  // folded const
  h.add_output(p, p.unary(Op::Sqrt, b), DType::BF16);
  h.run_and_check(p, {Tol{1e-6}, Tol{1e-6}, Tol{1e-6}, Tol{1e-6}, Tol{1e-6}, Tol{0}, Tol{1e-6}, Tol{1e-6},
                      Tol{0}, Tol{0}, Tol{1.0 / 256 + 1e-5}});
}

// The kernel is built through the typed emitter; source() is its text, which the assembler turns back into the same
// program (code, tensors, cores, name): a softmax times a periodic input over 4 cores (branches, a tensor per input
// and output). Placed at base 50, only the branch targets move, by 50. Source lines name the generator's lines.
TEST(Rowwise, SourceAssemblesBackIntoTheKernel) {
  std::map<std::string, int64_t> syms;
  for (const auto& [k, v] : sim::kernel_symbols(sim::load_config("v4"))) syms[k] = v;
  rw::Program p;
  p.rows = 300, p.cols = 96, p.cores = 4;
  p.inputs.push_back(rw::Input{1 << 20, DType::BF16, false, 0, "x"});
  p.inputs.push_back(rw::Input{8 << 20, DType::F32, false, 7, "g"});
  const int x = p.input(0), e = p.unary(Op::Exp, p.binary(Op::Sub, x, p.unary(Op::RowMax, x)));
  p.outputs.push_back(rw::Output{p.binary(Op::Mul, p.binary(Op::Div, e, p.unary(Op::RowSum, e)), p.input(1)),
                                 16 << 20, DType::BF16, "y"});
  const isa::Program k = rw::kernel(p, syms, 0, "k");
  const isa::Program a = isa::assemble(rw::source(p, syms, "k"), "k.s");
  EXPECT_EQ(k.code, a.code);
  EXPECT_EQ(k.tensors, a.tensors);
  ASSERT_EQ(k.tensors.size(), 3u);
  EXPECT_EQ(k.tensors[2].name, "y");
  EXPECT_EQ(k.cores, 4u);
  EXPECT_EQ(a.cores, 4u);
  EXPECT_EQ(k.name, "k");
  EXPECT_EQ(a.name, "k");
  ASSERT_FALSE(k.source.empty());
  EXPECT_EQ(k.source[0].rfind("<rowwise>/k at rowwise.cpp:", 0), 0u) << k.source[0];
  EXPECT_GT(testing::expect_moved_by(k, rw::kernel(p, syms, 50, "k"), 50), 2u);
}

TEST(Rowwise, UnsupportedPowExponentAndOversizedRowsThrow) {
  Harness h;
  rw::Program p;
  p.rows = 4, p.cols = 8;
  p.inputs.push_back(rw::Input{1 << 20, DType::F32});
  h.add_output(p, p.pow(p.input(0), 7), DType::F32);
  try {
    rw::source(p, h.syms);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("exponent 7"), std::string::npos) << e.what();
  }
  rw::Program q;
  q.rows = 2, q.cols = int64_t(1) << 22;  // 2 slots x (in + out) x 16 MiB per row
  q.inputs.push_back(rw::Input{1 << 20, DType::F32});
  q.nodes.push_back(rw::Node{Op::Input, {}, 0});
  q.outputs.push_back(rw::Output{q.unary(Op::Exp, 0), 1 << 20, DType::F32});
  try {
    rw::source(q, h.syms);
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("one row"), std::string::npos) << e.what();
  }
}

TEST(Rowwise, WideRowsForceSmallTiles) {
  Harness h;
  rw::Program p;
  p.rows = 11, p.cols = 40000;
  const int x = p.input(h.add_input(p, uniform(11 * 40000, -5, 5, 13), DType::F32));
  h.add_output(p, softmax(p, x), DType::F32);
  h.add_output(p, p.unary(Op::RowMean, x), DType::F32, true);
  // The row sums of 40000 terms go in two steps (200 sums of 200 columns, then their sum): in one in-order
  // vpu.rsum the denominator's error grew with C (about 3e-5 relative measured), in two it stays within 1e-5.
  h.run_and_check(p, {Tol{1e-5, 1e-12}, Tol{1e-5, 1e-6}});
  EXPECT_LE(h.plan.tile_rows, 4);
  EXPECT_GT(h.plan.tiles, 2);
  EXPECT_NE(p.rows % h.plan.tile_rows, 0) << "the last tile should be partial here";
}

TEST(Rowwise, SingleColumn) {
  Harness h;
  rw::Program p;
  p.rows = 50, p.cols = 1;
  const int x = p.input(h.add_input(p, uniform(50, -3, 3, 14), DType::F32));
  h.add_output(p, softmax(p, x), DType::F32);  // all ones
  h.add_output(p, p.binary(Op::Add, p.binary(Op::Mul, p.unary(Op::Relu, x), p.constant(2)), p.constant(1)),
               DType::F32);
  h.add_output(p, p.unary(Op::RowSum, x), DType::F32, true);
  h.add_output(p, p.constant(3.5f), DType::F32);  // a constant written out as [R, C]
  h.add_output(p, x, DType::F32);                  // an input passed through (a copy)
  h.add_output(p, p.unary(Op::RowSum, x), DType::BF16, true);
  h.run_and_check(p, {Tol{0}, Tol{1e-7}, Tol{0}, Tol{0}, Tol{0}, Tol{1.0 / 256 + 1e-5}});
}

TEST(Rowwise, ElementwiseAddIsMemoryBound) {
  Harness h;
  rw::Program p;
  p.rows = 4096, p.cols = 1024;
  const size_t n = 4096 * 1024;
  const int a = p.input(h.add_input(p, uniform(n, -1, 1, 15), DType::F32));
  const int b = p.input(h.add_input(p, uniform(n, -1, 1, 16), DType::F32));
  h.add_output(p, p.binary(Op::Add, a, b), DType::F32);
  h.run_and_check(p, {Tol{1e-7}});  // one f32 rounding (2^-24 relative)
  // HBM moves 3 * 4 * 4096 * 1024 = 50331648 bytes (read a and b, write y); v4-like's HBM gives
  // bandwidth_gbs / clock_mhz * 1000 = 1200 / 1050 * 1000 = 1142.86 bytes per cycle, so the bound is 44040
  // cycles. The double-buffered loop overlaps everything but the first tile's loads and the last tile's store
  // (tiles of 128 rows = 512 KiB per tensor: about 1400 cycles, 3%), so the run should be within 15% of it.
  const double bytes = 3.0 * 4 * static_cast<double>(n);
  const double bound = bytes / h.cfg.hbm_bytes_per_cycle();
  const auto cycles = static_cast<double>(h.result.stats.cycles);
  std::printf("add [4096, 1024] f32: %.0f cycles, bound %.0f (%.1f%% of HBM bandwidth)\n", cycles, bound,
              100 * bound / cycles);
  EXPECT_EQ(h.result.stats.hbm_bytes_read + h.result.stats.hbm_bytes_written, static_cast<uint64_t>(bytes));
  EXPECT_GE(cycles, bound);
  EXPECT_LE(cycles, 1.15 * bound);
}

TEST(Rowwise, SoftmaxOverlapsVectorWorkWithTransfers) {
  // softmax over [4096, 1024] f32 (timing only): HBM moves 2 * 16 MiB = 29360 cycles on v4-like; the vector
  // unit's five full passes per tile (rmax, subrow, exp, rsum, mulrow) take about 5 * 4096 + latencies = 20.6k
  // cycles: with loads, vector work and stores overlapped the kernel stays memory bound.
  Harness h;
  rw::Program p;
  p.rows = 4096, p.cols = 1024;
  rw::Input in;
  in.addr = h.alloc(4096 * 1024 * 4);
  p.inputs.push_back(in);
  rw::Output out;
  out.node = softmax(p, p.input(0));
  out.addr = h.alloc(4096 * 1024 * 4);
  p.outputs.push_back(out);
  h.run_and_check(p, {}, /*functional=*/false);
  const double bound = 2.0 * 4 * 4096 * 1024 / h.cfg.hbm_bytes_per_cycle();
  const auto cycles = static_cast<double>(h.result.stats.cycles);
  std::printf("softmax [4096, 1024] f32: %.0f cycles, HBM bound %.0f\n", cycles, bound);
  EXPECT_LE(cycles, 1.15 * bound);
}

TEST(Rowwise, ThirdSlotKeepsTwoLoadsInFlight) {
  // y[3072] = rowsum(W + x), W bf16 [3072, 768] (the shape of GPT-2's c_fc, transposed), x f32 [768] loaded once:
  // three passes of the vector unit an element (the cast, the add, the sum; a matrix-vector product, rowsum(W x),
  // is one since vpu.rdot). On v5e they take less time than HBM's 819 GB/s at 1.5 GHz (546 bytes a cycle) brings
  // W, so HBM should set the time: 4.72 MB of W is 8,640 cycles. With two slots a tile's load starts only when the
  // vector unit frees the slot of the tile before: one transfer at a time, whose share of HBM's channels leaves it
  // below the rate. A third slot lets the next load start while one is in flight. The same values (checked) in
  // fewer cycles.
  Harness h({}, "v5e");
  rw::Program p;
  p.rows = 3072, p.cols = 768;
  const int w = p.input(h.add_input(p, uniform(3072 * 768, -1, 1, 21), DType::BF16));
  const int x = p.input(h.add_input(p, uniform(768, -1, 1, 22), DType::F32, false, 1));
  h.add_output(p, p.unary(Op::RowSum, p.binary(Op::Add, w, x)), DType::F32, true);
  const double bound = 3072.0 * 768 * 2 / h.cfg.hbm_bytes_per_cycle();
  auto run = [&](int slots) {
    p.slots = slots;
    h.run_and_check(p, {Tol{1e-5, 2e-4}});
    std::printf("slots %d: %llu cycles, %.1f%% of the HBM bound (%.0f cycles)\n", h.plan.slots,
                static_cast<unsigned long long>(h.result.stats.cycles), 100 * bound / h.result.stats.cycles, bound);
    return h.result.stats.cycles;
  };
  const uint64_t three = run(0);
  EXPECT_EQ(h.plan.slots, 3);  // the generator's choice: 19 tiles of 168 rows (measured 9,413 cycles, 91.8%)
  const uint64_t two = run(2);
  EXPECT_EQ(h.plan.slots, 2);  // measured 10,528 cycles, 82.1%
  EXPECT_LT(static_cast<double>(three), 0.93 * static_cast<double>(two));
  EXPECT_GE(static_cast<double>(three), bound);
  EXPECT_LE(static_cast<double>(three), 1.12 * bound);
}

TEST(Rowwise, FewDmaEnginesKeepTheLoadsInFlight) {
  // y[3072] = rowsum(W x), W bf16 [3072, 768] (GPT-2's c_fc as a decode step's matrix-vector product), x f32 [768]
  // loaded once, on v4-like: 4 DMA engines per queue, 100 cycles of latency, HBM at 1,143 bytes a cycle, so W's
  // 4.72 MB take 4,128 cycles at HBM's rate, and a tile's load of 168 rows (258 KB) 100 + 226 cycles. The loads
  // must overlap to come within 12% of that bound. (When a sync took an engine and each tile's loads had a sync
  // before and after them, a tile's two loads and two syncs took all 4 engines, so the next tile's load started
  // only when this one's ended: 6,293 cycles, 1.52x. The tile's first load now waits and its last signals.)
  Harness h({}, "v4-like");
  rw::Program p;
  p.rows = 3072, p.cols = 768;
  const int w = p.input(h.add_input(p, uniform(3072 * 768, -1, 1, 23), DType::BF16));
  const int x = p.input(h.add_input(p, uniform(768, -1, 1, 24), DType::F32, false, 1));
  h.add_output(p, p.unary(Op::RowSum, p.binary(Op::Mul, w, x)), DType::F32, true);
  h.run_and_check(p, {Tol{1e-5, 2e-4}});
  const double bound = 3072.0 * 768 * 2 / h.cfg.hbm_bytes_per_cycle();
  const std::string src = rw::source(p, h.syms, "gemv");
  EXPECT_EQ(src.find("dmain.sync signal=s2"), std::string::npos);  // the tiles' loads signal themselves
  EXPECT_NE(src.find("signal=s2"), std::string::npos);
  EXPECT_GE(static_cast<double>(h.result.stats.cycles), bound);
  EXPECT_LE(static_cast<double>(h.result.stats.cycles), 1.12 * bound) << h.result.stats.cycles << " cycles, bound " << bound;
}

TEST(Rowwise, RowSumsOfProductsAreOnePass) {
  // rowsum(W x) with W loaded as bf16 or i8 (the cast to f32 folded in) or f32, and a variance's rowsum(d d) of a
  // computed d: one vpu.rdot each (isa.def: vpu.cast, vpu.mul and vpu.rsum in one pass, the same bits), where the
  // kernel had three or two vector instructions; over 3072 columns the sum takes two steps (partial dot products
  // of 48 columns, then their sum: two instructions). The values within the host's tolerance.
  Harness h;
  for (const DType wt : {DType::BF16, DType::I8, DType::F32})
    for (const int64_t cols : {768, 3072}) {
      rw::Program p;
      p.rows = 64, p.cols = cols;
      h.host.clear(), h.out_rows.clear();  // a program of its own
      const double range = wt == DType::I8 ? 100 : 1;
      const int w = p.input(h.add_input(p, uniform(static_cast<size_t>(64 * cols), -range, range, 41), wt));
      const int x = p.input(h.add_input(p, uniform(static_cast<size_t>(cols), -1, 1, 42), DType::F32, false, 1));
      h.add_output(p, p.unary(Op::RowSum, p.binary(Op::Mul, w, x)), DType::F32, true);
      h.run_and_check(p, {Tol{1e-5, 1e-4}});
      EXPECT_EQ(h.plan.vector_ops_per_tile, cols >= 1024 ? 2 : 1) << isa::dtype_name(wt) << " x " << cols;
      EXPECT_NE(rw::source(p, h.syms, "gemv").find("vpu.rdot"), std::string::npos);
    }
  rw::Program p;
  p.rows = 64, p.cols = 768;
  h.host.clear(), h.out_rows.clear();
  const int a = p.input(h.add_input(p, uniform(64 * 768, -2, 2, 43), DType::F32));
  const int d = p.binary(Op::Sub, a, p.unary(Op::RowMean, a));
  h.add_output(p, p.unary(Op::RowMean, p.binary(Op::Mul, d, d)), DType::F32, true);  // the variance
  h.run_and_check(p, {Tol{1e-5, 1e-6}});
  // rmean (rsum and the scale), subrow, rdot, the scale
  EXPECT_EQ(h.plan.vector_ops_per_tile, 5);
}

TEST(Rowwise, ProductsAddedInOnePass) {
  // A depthwise convolution's three taps, y = x0 w0 + x1 w1 + x2 w2 + bias (x bf16 tiles, w and the bias one f32
  // vector for every row, loop-invariant), to bf16: each product that only an add reads goes into it as one
  // vpu.madd (isa.def: vpu.mul and vpu.add in turn, in one pass, the same bits). Per tile: the three casts of x, the
  // first product, two multiply-adds, the bias's add and the output's cast: 8 vector instructions where the
  // products and sums apart took 10. A layer norm's scale and shift, d * g + b: one vpu.madd. The values within the
  // host's tolerance.
  Harness h;
  rw::Program p;
  p.rows = 96, p.cols = 384;
  int acc = -1;
  for (int t = 0; t < 3; ++t) {
    const int x = p.input(h.add_input(p, uniform(96 * 384, -2, 2, 50 + t), DType::BF16));
    const int w = p.input(h.add_input(p, uniform(384, -1, 1, 60 + t), DType::F32, false, 1));
    const int prod = p.binary(Op::Mul, x, w);
    acc = acc < 0 ? prod : p.binary(Op::Add, acc, prod);
  }
  const int bias = p.input(h.add_input(p, uniform(384, -1, 1, 70), DType::F32, false, 1));
  h.add_output(p, p.binary(Op::Add, acc, bias), DType::BF16);
  h.run_and_check(p, {Tol{1.0 / 256 + 1e-5, 1e-4}});
  EXPECT_EQ(h.plan.vector_ops_per_tile, 8);
  const std::string src = rw::source(p, h.syms);
  int madds = 0;
  for (size_t at = 0; (at = src.find("vpu.madd", at)) != std::string::npos; ++at) ++madds;
  EXPECT_EQ(madds, 2);
  rw::Program q;
  q.rows = 64, q.cols = 256;
  h.host.clear(), h.out_rows.clear();
  const int d = q.input(h.add_input(q, uniform(64 * 256, -3, 3, 71), DType::F32));
  const int g = q.input(h.add_input(q, uniform(256, 0.5, 1.5, 72), DType::F32, false, 1));
  const int b = q.input(h.add_input(q, uniform(256, -1, 1, 73), DType::F32, false, 1));
  h.add_output(q, q.binary(Op::Add, q.binary(Op::Mul, d, g), b), DType::F32);
  h.run_and_check(q, {Tol{1e-5, 1e-6}});
  EXPECT_EQ(h.plan.vector_ops_per_tile, 1);  // the multiply-add, straight into the output's staging
}

TEST(Rowwise, OwnValuesInTheAccumulatorsSpareVmemPorts) {
  // Softmax over a bf16 [256, 768] to bf16 on one core of h200-like, whose shared memory (VMEM) takes 128 bytes a
  // cycle: the cast to f32, the row max, the difference, its exp, the row sum and the scaling each read and most
  // write f32 tiles, some 40 bytes of VMEM traffic an element where the values are in VMEM, and the vector unit
  // waits for the ports. With its own values (the f32 tiles, the row vectors) in the accumulators
  // (Program::accumulators), only the loaded bf16 and the stored bf16 cross the ports. The same values both ways,
  // in less than half the cycles (measured 30,606 against 78,946).
  Harness h({"chip.cores=1"}, "h200-like");
  rw::Program p;
  p.rows = 256, p.cols = 768;
  const int w = p.input(h.add_input(p, uniform(256 * 768, -4, 4, 31), DType::BF16));
  h.add_output(p, softmax(p, w), DType::BF16);
  std::vector<std::vector<uint8_t>> outs;
  std::vector<uint64_t> cycles;
  for (const bool acc : {true, false}) {
    p.accumulators = acc;
    h.run_and_check(p, {Tol{1.0 / 256 + 1e-5, 1e-12}});
    EXPECT_EQ(h.plan.in_accumulators, acc);
    EXPECT_GE(h.plan.full_temps, 1);
    cycles.push_back(h.result.stats.cycles);
    std::vector<uint8_t>& y = outs.emplace_back(256 * 768 * 2);
    h.chip->read_hbm(p.outputs[0].addr, y.data(), y.size());
  }
  EXPECT_EQ(outs[0], outs[1]);  // bit for bit
  EXPECT_LT(2 * cycles[0], cycles[1]);
  std::printf("accumulators: %llu cycles, VMEM: %llu\n", static_cast<unsigned long long>(cycles[0]),
              static_cast<unsigned long long>(cycles[1]));
}

TEST(Rowwise, OwnValuesStayInVmemWhereTheAccumulatorsAreTooSmall) {
  // GELU (erf form) over [64, 1024] f32 on v4-like with accumulators of 8 rows: its full temporaries (tiles of
  // rows x 1024 f32) do not fit the MXUS x 8 x 128 x 4 bytes, so they stay in VMEM, with the right values.
  Harness h({"mxu.acc_rows=8"});
  rw::Program p;
  p.rows = 64, p.cols = 1024;
  const int a = p.input(h.add_input(p, uniform(64 * 1024, -4, 4, 34), DType::F32));
  h.add_output(p, p.unary(Op::Gelu, a), DType::F32);
  h.run_and_check(p, {Tol{1e-5, 0, 5e-7}});
  EXPECT_GE(h.plan.full_temps, 1);
  EXPECT_GT(static_cast<int64_t>(h.plan.tile_rows) * 1024 * 4, h.syms.at("MXUS") * 8 * h.syms.at("MXU_COLS") * 4);
  EXPECT_FALSE(h.plan.in_accumulators);
}

}  // namespace
}  // namespace tpusim
