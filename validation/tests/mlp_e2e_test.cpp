// The exported MLP (workloads/mlp.py: Linear 64->128, ReLU, Linear 128->64, ReLU, Linear 64->10, batch 8)
// compiled by the compiler backend and run on the simulated chip, against PyTorch's float32 output.
//
// The chip computes in bf16 (inputs and weights rounded to nearest even, products exact, sums in f32,
// intermediates stored as bf16), so the bound is loose: cosine similarity >= 0.999, relative L2 <= 2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "onnx_models.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/runtime/npy.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

std::string mlp_file(const std::string& name) { return std::string(TPUSIM_MLP_DIR) + "/" + name; }

bool have_workload() { return std::filesystem::exists(mlp_file("mlp.onnx")); }
#define FAIL_WITHOUT_WORKLOAD()                                                                           \
  if (!have_workload())                                                                                   \
  GTEST_FAIL() << mlp_file("mlp.onnx") << " is missing: build the workload_mlp target (needs /usr/bin/python3 " \
                                          "with torch and onnx)"

// The chip both end-to-end tests run on: SystemC elaborates once, so a process cannot construct a Chip after its
// first Chip::run, and the tests share one (each writes every input and constant it reads).
sim::Chip& default_chip() {
  static sim::Chip chip(sim::load_config(sim::default_preset()));
  return chip;
}

compiler::Options options_for(const sim::ChipConfig& cfg) {
  compiler::Options o;
  for (const auto& [name, value] : sim::kernel_symbols(cfg)) o.target.symbols[name] = value;
  return o;
}

TEST(MlpCompile, DeclaresTheModelsTensorsAndOneKernelPerLayer) {
  FAIL_WITHOUT_WORKLOAD();
  sim::ChipConfig cfg = sim::load_config(sim::default_preset());
  isa::Program p = compiler::compile_onnx_file(mlp_file("mlp.onnx"), options_for(cfg));
  EXPECT_EQ(p.name, "mlp");
  const isa::TensorDecl* x = p.find("x");
  const isa::TensorDecl* y = p.find("y");
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->kind, isa::TensorKind::Input);
  EXPECT_EQ(x->shape, (std::vector<int64_t>{8, 64}));
  EXPECT_EQ(y->kind, isa::TensorKind::Output);
  EXPECT_EQ(y->dtype, isa::DType::F32);
  EXPECT_EQ(y->shape, (std::vector<int64_t>{8, 10}));
  // Three weights (bf16, tiled for gemm.s's B_TILED: each fits one 128x128 tile of 32 KiB) and three biases
  // (f32 [N]): 3 * 2 * 128 * 128 + 4 * (128 + 64 + 10).
  size_t consts = 0;
  for (const auto& t : p.tensors) consts += t.kind == isa::TensorKind::Const;
  EXPECT_EQ(consts, 6u);
  EXPECT_EQ(p.const_data.size(), 3u * 2 * 128 * 128 + 4u * (128 + 64 + 10));
  // One cast of x to bf16, then one gemm.s per Linear (bias and ReLU fused).
  std::vector<std::string> labels;
  for (const std::string& s : p.source) {
    std::string label = s.substr(0, s.find(": "));
    if (labels.empty() || labels.back() != label) labels.push_back(label);
  }
  EXPECT_EQ(labels.size(), 4u);
  EXPECT_EQ(labels.front(), "cast(x)");
}

TEST(MlpEndToEnd, MatchesPyTorchAndTimingOnlyGivesTheSameCycles) {
  FAIL_WITHOUT_WORKLOAD();
  sim::ChipConfig cfg = sim::load_config(sim::default_preset());
  isa::Program p = compiler::compile_onnx_file(mlp_file("mlp.onnx"), options_for(cfg));
  runtime::HostTensor x = runtime::read_npy(mlp_file("x.npy"));
  runtime::HostTensor y_ref = runtime::read_npy(mlp_file("y_ref.npy"));
  const isa::TensorDecl* xd = p.find("x");
  const isa::TensorDecl* yd = p.find("y");
  ASSERT_TRUE(xd && yd);
  ASSERT_EQ(x.dtype, isa::DType::F32);
  ASSERT_EQ(x.shape, xd->shape);
  ASSERT_EQ(y_ref.shape, yd->shape);

  sim::Chip& chip = default_chip();
  for (const isa::TensorDecl& t : p.tensors)
    if (t.kind == isa::TensorKind::Const) chip.write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());
  chip.write_hbm(xd->addr, x.data.data(), x.data.size());
  sim::RunResult run = chip.run(p);
  std::vector<float> y(yd->elements());
  chip.read_hbm(yd->addr, y.data(), y.size() * sizeof(float));

  std::vector<float> ref(y.size());
  std::memcpy(ref.data(), y_ref.data.data(), ref.size() * sizeof(float));
  double dot = 0, yy = 0, rr = 0, diff = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    dot += double(y[i]) * ref[i];
    yy += double(y[i]) * y[i];
    rr += double(ref[i]) * ref[i];
    diff += (double(y[i]) - ref[i]) * (double(y[i]) - ref[i]);
  }
  const double cosine = dot / std::sqrt(yy * rr), rel_l2 = std::sqrt(diff / rr);
  EXPECT_GE(cosine, 0.999) << "y[0] = " << y[0] << ", torch " << ref[0];
  EXPECT_LE(rel_l2, 2e-2) << "y[0] = " << y[0] << ", torch " << ref[0];

  // Every multiply-accumulate of the three layers goes through the matrix unit exactly once.
  EXPECT_EQ(run.stats.mxu_macs, 8u * (64 * 128 + 128 * 64 + 64 * 10));
  EXPECT_GT(run.stats.cycles, 0u);

  sim::RunOptions timing_only;
  timing_only.functional = false;
  EXPECT_EQ(chip.run(p, timing_only).stats.cycles, run.stats.cycles);
}

// ---- A residual block, built with the compiler tests' ONNX helpers ---------------------------------------

std::vector<float> ramp(size_t n, int mul, float scale, float offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(static_cast<int>(i * mul % 101) - 50) + offset;
  return v;
}

// x[8,64] -> fc1 (MatMul w1[64,64], Add b1, Relu) -> h; s = x + h (an Add with a graph input: the row-wise
// kernel reads x as f32); g = s @ w2 + b2; y = s + g (an Add producing the f32 graph output).
struct Residual {
  static constexpr int64_t M = 8, D = 64;
  std::vector<float> x = ramp(M * D, 37, 0.02f), w1 = ramp(D * D, 41, 0.003f), b1 = ramp(D, 13, 0.01f, 0.05f),
                     w2 = ramp(D * D, 43, 0.002f), b2 = ramp(D, 17, 0.01f);

  std::string onnx() const {
    compiler::test::ModelBuilder m;
    m.input("x", {M, D}).output("y", {M, D});
    m.constant("w1", {D, D}, w1).constant("b1", {D}, b1).constant("w2", {D, D}, w2).constant("b2", {D}, b2);
    m.node("MatMul", "fc1", {"x", "w1"}, {"h0"});
    m.node("Add", "fc1_bias", {"h0", "b1"}, {"h1"});
    m.node("Relu", "relu1", {"h1"}, {"h"});
    m.node("Add", "residual1", {"x", "h"}, {"s"});
    m.node("MatMul", "fc2", {"s", "w2"}, {"g0"});
    m.node("Add", "fc2_bias", {"g0", "b2"}, {"g"});
    m.node("Add", "residual2", {"s", "g"}, {"y"});
    return m.bytes();
  }

  // The same model in float64 on the host, with the input and weights rounded to bf16 as the chip stores them.
  std::vector<double> reference() const {
    auto bf = [](float f) { return double(isa::f32_from_bf16(isa::bf16_from_f32(f))); };
    auto dense = [&](const std::vector<double>& a, const std::vector<float>& w, const std::vector<float>& b) {
      std::vector<double> out(M * D);
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < D; ++j) {
          double acc = b[j];
          for (int64_t k = 0; k < D; ++k) acc += a[i * D + k] * bf(w[k * D + j]);
          out[i * D + j] = acc;
        }
      return out;
    };
    std::vector<double> xs(M * D);
    for (size_t i = 0; i < xs.size(); ++i) xs[i] = bf(x[i]);
    std::vector<double> h = dense(xs, w1, b1), s(M * D);
    for (size_t i = 0; i < s.size(); ++i) s[i] = xs[i] + std::max(h[i], 0.0);
    std::vector<double> g = dense(s, w2, b2), y(M * D);
    for (size_t i = 0; i < y.size(); ++i) y[i] = s[i] + g[i];
    return y;
  }
};

TEST(ResidualEndToEnd, ElementwiseAddsRunAsRowwiseKernelsAndMatchAFloat64Reference) {
  sim::ChipConfig cfg = sim::load_config(sim::default_preset());
  Residual model;
  isa::Program p = compiler::compile_onnx(model.onnx(), "residual.onnx", options_for(cfg));
  std::map<std::string, int> kernels;
  for (const isa::Region& r : p.regions)
    if (r.kind == isa::kRegionKernel) ++kernels[r.name];
  EXPECT_EQ(kernels, (std::map<std::string, int>{{"cast.s", 1}, {"gemm.s", 2}, {"rowwise", 2}}));
  std::vector<std::string> labels;
  for (const std::string& s : p.source) {
    std::string label = s.substr(0, s.find(": "));
    if (labels.empty() || labels.back() != label) labels.push_back(label);
  }
  EXPECT_EQ(labels, (std::vector<std::string>{"cast(x)", "fc1+fc1_bias+relu1", "residual1", "fc2+fc2_bias",
                                              "residual2"}));

  const isa::TensorDecl* xd = p.find("x");
  const isa::TensorDecl* yd = p.find("y");
  ASSERT_TRUE(xd && yd);
  ASSERT_EQ(yd->dtype, isa::DType::F32);
  sim::Chip& chip = default_chip();
  for (const isa::TensorDecl& t : p.tensors)
    if (t.kind == isa::TensorKind::Const) chip.write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());
  chip.write_hbm(xd->addr, model.x.data(), model.x.size() * sizeof(float));
  sim::RunResult run = chip.run(p);
  std::vector<float> y(yd->elements());
  chip.read_hbm(yd->addr, y.data(), y.size() * sizeof(float));

  std::vector<double> ref = model.reference();
  ASSERT_EQ(ref.size(), y.size());
  double dot = 0, yy = 0, rr = 0, diff = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    dot += y[i] * ref[i];
    yy += double(y[i]) * y[i];
    rr += ref[i] * ref[i];
    diff += (y[i] - ref[i]) * (y[i] - ref[i]);
  }
  const double cosine = dot / std::sqrt(yy * rr), rel_l2 = std::sqrt(diff / rr);
  RecordProperty("cosine", std::to_string(cosine));
  RecordProperty("rel_l2", std::to_string(rel_l2));
  EXPECT_GE(cosine, 0.999) << "y[0] = " << y[0] << ", reference " << ref[0];
  EXPECT_LE(rel_l2, 2e-2) << "y[0] = " << y[0] << ", reference " << ref[0];
  EXPECT_EQ(run.stats.mxu_macs, 2u * Residual::M * Residual::D * Residual::D);
}

// A convolution's output added to an earlier activation and ReLU'd (ResNet's block end) runs as the GEMM's
// epilogue (gemm.s RESIDUAL, RES_RELU): the same model with the convolution's output also a graph output, which
// keeps the Add a row-wise kernel, gives the same y bit for bit; both against a float64 reference.
struct FusedResidual {
  static constexpr int64_t C = 48, H = 6, W = 7, P = H * W;
  std::vector<float> x = ramp(C * P, 37, 0.02f), w1 = ramp(C * C, 41, 0.003f), w2 = ramp(C * C, 43, 0.002f);

  std::string onnx(bool expose_g) const {
    compiler::test::ModelBuilder m;
    m.input("x", {1, C, H, W}).output("y", {1, C, H, W});
    if (expose_g) m.output("g", {1, C, H, W});
    m.constant("w1", {C, C, 1, 1}, w1).constant("w2", {C, C, 1, 1}, w2);
    m.node("Conv", "conv1", {"x", "w1"}, {"h0"});
    m.node("Relu", "relu1", {"h0"}, {"h"});
    m.node("Conv", "conv2", {"h", "w2"}, {"k0"});
    m.node("Relu", "relu2a", {"k0"}, {"k"});
    m.node("Conv", "conv2b", {"k", "w1"}, {"g"});
    m.node("Add", "residual", {"g", "h"}, {"s"});
    m.node("Relu", "relu2", {"s"}, {"t"});
    m.node("Conv", "conv3", {"t", "w1"}, {"y"});
    return m.bytes();
  }
};

TEST(ResidualEndToEnd, AddFusedIntoTheGemmGivesTheSameBits) {
  sim::ChipConfig cfg = sim::load_config(sim::default_preset());
  FusedResidual model;
  std::vector<std::vector<float>> ys;
  for (bool expose : {false, true}) {
    isa::Program p = compiler::compile_onnx(model.onnx(expose), "fused.onnx", options_for(cfg));
    bool fused = false;
    for (const std::string& line : p.source) fused = fused || line.rfind("conv2b+residual+relu2: ", 0) == 0;
    EXPECT_EQ(fused, !expose) << "the Add+Relu is " << (expose ? "a row-wise kernel" : "conv2b's epilogue");
    sim::Chip& chip = default_chip();
    for (const isa::TensorDecl& t : p.tensors)
      if (t.kind == isa::TensorKind::Const) chip.write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());
    chip.write_hbm(p.find("x")->addr, model.x.data(), model.x.size() * sizeof(float));
    chip.run(p);
    const isa::TensorDecl* yd = p.find("y");
    std::vector<float> y(yd->elements());
    chip.read_hbm(yd->addr, y.data(), y.size() * sizeof(float));
    ys.push_back(std::move(y));
  }
  ASSERT_EQ(ys[0].size(), ys[1].size());
  EXPECT_EQ(std::memcmp(ys[0].data(), ys[1].data(), ys[0].size() * sizeof(float)), 0);
  // float64, channels first: h = bf(relu(x * w1)), k = bf(relu(h * w2)), t = relu(bf(k * w1) + h) rounded to
  // bf16, y = t * w1
  auto bf = [](double f) { return double(isa::f32_from_bf16(isa::bf16_from_f32(static_cast<float>(f)))); };
  const int64_t C = FusedResidual::C, P = FusedResidual::P;
  auto conv = [&](const std::vector<double>& a, const std::vector<float>& w) {
    std::vector<double> out(C * P, 0.0);
    for (int64_t o = 0; o < C; ++o)
      for (int64_t i = 0; i < C; ++i)
        for (int64_t p = 0; p < P; ++p) out[o * P + p] += bf(w[o * C + i]) * a[i * P + p];
    return out;
  };
  std::vector<double> xs(C * P);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = bf(model.x[i]);
  std::vector<double> h = conv(xs, model.w1);
  for (double& v : h) v = bf(std::max(v, 0.0));
  std::vector<double> k = conv(h, model.w2);
  for (double& v : k) v = bf(std::max(v, 0.0));
  std::vector<double> t = conv(k, model.w1);
  for (size_t i = 0; i < t.size(); ++i) t[i] = bf(std::max(bf(t[i]) + h[i], 0.0));
  const std::vector<double> ref = conv(t, model.w1);
  double diff = 0, rr = 0;
  for (size_t i = 0; i < ref.size(); ++i) diff += (ys[0][i] - ref[i]) * (ys[0][i] - ref[i]), rr += ref[i] * ref[i];
  EXPECT_LE(std::sqrt(diff / rr), 1e-2);
}

// On a chip of one core, codegen runs a GEMM as gemm_chip wherever gemm_chip's estimate beats one matrix unit's
// (on several cores only by a margin that covers the barriers). BERT-base's fused Q, K and V projection, a Linear
// of 768 -> 2304 over 128 tokens, on v6e (one core of four 256 x 256 units): the margin once kept it on one unit,
// where gemm_chip is the faster by more than a quarter. Against the same model compiled for one unit (MXUS = 1:
// gemm.s), run on the same chip.
TEST(OneCoreGemm, RunsOnEveryUnitWhereTheEstimateSaysItIsFaster) {
  sim::ChipConfig cfg = sim::load_config("v6e");
  ASSERT_EQ(cfg.chip.cores, 1);
  const std::string model = compiler::test::linear_model(128, 768, 2304).bytes();
  compiler::Options whole = options_for(cfg), one = options_for(cfg);
  one.target.symbols["MXUS"] = 1;
  auto kernels = [](const isa::Program& p) {
    std::vector<std::string> k;
    for (const isa::Region& r : p.regions)
      if (r.kind == isa::kRegionKernel) k.push_back(r.name);
    return k;
  };
  const isa::Program pw = compiler::compile_onnx(model, "qkv.onnx", whole);
  const isa::Program p1 = compiler::compile_onnx(model, "qkv.onnx", one);
  EXPECT_EQ(kernels(pw), (std::vector<std::string>{"cast.s", "gemm_chip"}));
  EXPECT_EQ(kernels(p1), (std::vector<std::string>{"cast.s", "gemm.s"}));
  sim::Chip chip(cfg);
  sim::RunOptions timing;
  timing.functional = false;
  const uint64_t on_all = chip.run(pw, timing).stats.cycles, on_one = chip.run(p1, timing).stats.cycles;
  EXPECT_LE(static_cast<double>(on_all), 0.75 * static_cast<double>(on_one)) << on_all << " vs " << on_one;
}

}  // namespace
}  // namespace tpusim
