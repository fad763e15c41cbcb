// The exported MLP (workloads/mlp.py: Linear 64->128, ReLU, Linear 128->64, ReLU, Linear 64->10, batch 8)
// compiled by the compiler backend and run on the simulated chip, against PyTorch's float32 output.
//
// The chip computes in bf16 (inputs and weights rounded to nearest even, products exact, sums in f32,
// intermediates stored as bf16), so the bound is loose: cosine similarity >= 0.999, relative L2 <= 2e-2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "tpusim/compiler/compiler.h"
#include "tpusim/runtime/npy.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

std::string mlp_file(const std::string& name) { return std::string(TPUSIM_MLP_DIR) + "/" + name; }

bool have_workload() { return std::filesystem::exists(mlp_file("mlp.onnx")); }
#define SKIP_WITHOUT_WORKLOAD()                                                                           \
  if (!have_workload())                                                                                   \
  GTEST_SKIP() << mlp_file("mlp.onnx") << " is missing: build the workload_mlp target (needs /usr/bin/python3 " \
                                          "with torch and onnx)"

compiler::Options options_for(const sim::ChipConfig& cfg) {
  compiler::Options o;
  for (const auto& [name, value] : sim::kernel_symbols(cfg)) o.target.symbols[name] = value;
  return o;
}

TEST(MlpCompile, DeclaresTheModelsTensorsAndOneKernelPerLayer) {
  SKIP_WITHOUT_WORKLOAD();
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
  // Three weights (bf16 [K,N]) and three biases (f32 [N]): 2 * (64*128 + 128*64 + 64*10) + 4 * (128 + 64 + 10).
  size_t consts = 0;
  for (const auto& t : p.tensors) consts += t.kind == isa::TensorKind::Const;
  EXPECT_EQ(consts, 6u);
  EXPECT_EQ(p.const_data.size(), 2u * (64 * 128 + 128 * 64 + 64 * 10) + 4u * (128 + 64 + 10));
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
  SKIP_WITHOUT_WORKLOAD();
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

  sim::Chip chip(cfg);
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

}  // namespace
}  // namespace tpusim
