// The compiler end to end (ONNX bytes -> Program), with the real kernel library; no simulator.
#include <algorithm>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "onnx_models.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {
namespace {

using test::ModelBuilder;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// A chip like sim's default one, as the symbols its kernels read.
Options chip(int64_t hbm_bytes = int64_t{1} << 30) {
  Options o;
  o.target.symbols = {{"MXU_ROWS", 128}, {"MXU_COLS", 128}, {"ACC_ROWS", 2048},
                      {"VMEM_BYTES", 16 << 20}, {"VPU_WIDTH", 1024}, {"HBM_BYTES", hbm_bytes}};
  return o;
}

// The kernel fragments in order, by the label every source line starts with ("fc: gemm.s:12" -> "fc").
std::vector<std::string> fragments(const isa::Program& p) {
  std::vector<std::string> labels;
  for (const std::string& s : p.source) {
    std::string label = s.substr(0, s.find(": "));
    if (labels.empty() || labels.back() != label) labels.push_back(label);
  }
  return labels;
}

std::vector<uint16_t> const_bf16(const isa::Program& p, const isa::TensorDecl& t) {
  std::vector<uint16_t> v(t.elements());
  std::memcpy(v.data(), p.const_data.data() + t.const_offset, v.size() * 2);
  return v;
}
std::vector<float> const_f32(const isa::Program& p, const isa::TensorDecl& t) {
  std::vector<float> v(t.elements());
  std::memcpy(v.data(), p.const_data.data() + t.const_offset, v.size() * 4);
  return v;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Compile, GemmDeclaresTensorsAndStoresTheTransposedWeightsAsBf16) {
  const int64_t M = 4, K = 3, N = 2;
  isa::Program p = compile_onnx(test::linear_model(M, K, N).bytes(), "dir/gemm.onnx", chip());
  EXPECT_EQ(p.name, "gemm");
  // Inputs, outputs, then constants, each at a 4096-aligned HBM address.
  ASSERT_EQ(p.tensors.size(), 4u);
  EXPECT_EQ(p.tensors[0], (isa::TensorDecl{"x", isa::TensorKind::Input, isa::DType::F32, {M, K}, 0, 0}));
  EXPECT_EQ(p.tensors[1], (isa::TensorDecl{"y", isa::TensorKind::Output, isa::DType::F32, {M, N}, 4096, 0}));
  // Weights are tiled for gemm.s's B_TILED: [cdiv(K,128), cdiv(N,128), 128, 128], zero-padded (32 KiB here).
  EXPECT_EQ(p.tensors[2], (isa::TensorDecl{"w", isa::TensorKind::Const, isa::DType::BF16, {1, 1, 128, 128}, 8192, 0}));
  EXPECT_EQ(p.tensors[3], (isa::TensorDecl{"b", isa::TensorKind::Const, isa::DType::F32, {N}, 40960, 32768}));
  EXPECT_EQ(p.const_data.size(), 32768u + 8u);

  // w is [N,K] in the model (transB=1); the program holds b[K,N] = w^T in bf16, in the tile's top-left corner.
  std::vector<float> w = test::ramp(N * K), bias = test::ramp(N, 0.5f);
  std::vector<uint16_t> wt = const_bf16(p, p.tensors[2]);
  for (int64_t k = 0; k < 128; ++k)
    for (int64_t n = 0; n < 128; ++n)
      EXPECT_EQ(wt[k * 128 + n], k < K && n < N ? isa::bf16_from_f32(w[n * K + k]) : 0) << k << "," << n;
  EXPECT_EQ(const_f32(p, p.tensors[3]), bias);

  // The input is cast to bf16 on the chip, then one gemm.s.
  EXPECT_EQ(fragments(p), (std::vector<std::string>{"cast(x)", "fc"}));
  ASSERT_EQ(p.source.size(), p.code.size());
  // Each source line names the node and the kernel line: "fc: <builtin>/gemm.s:42".
  EXPECT_THAT(p.source.front(), AllOf(StartsWith("cast(x): "), HasSubstr("cast.s:")));
  EXPECT_THAT(p.source.back(), AllOf(StartsWith("fc: "), HasSubstr("gemm.s:")));
}

TEST(Compile, MatMulAddReluFuseIntoOneGemmEach) {
  // x[8,16] -> MatMul w1[16,32] -> Add b1[32] -> Relu -> MatMul w2[32,4] -> Add b2[1,4] -> y
  ModelBuilder b;
  b.input("x", {8, 16}).output("y", {8, 4});
  b.constant("w1", {16, 32}, test::ramp(16 * 32)).constant("b1", {32}, test::ramp(32, 0.1f), false);
  b.constant("w2", {32, 4}, test::ramp(32 * 4, -0.2f)).constant("b2", {1, 4}, test::ramp(4));
  b.node("MatMul", "mm1", {"x", "w1"}, {"h"});
  b.node("Add", "add1", {"h", "b1"}, {"hb"});
  b.node("Relu", "relu1", {"hb"}, {"r"});
  b.node("MatMul", "mm2", {"r", "w2"}, {"o"});
  b.node("Add", "add2", {"b2", "o"}, {"y"});
  isa::Program p = compile_onnx(b.bytes(), "mlp2.onnx", chip());

  // One gemm.s each, labelled with the nodes it implements.
  EXPECT_EQ(fragments(p), (std::vector<std::string>{"cast(x)", "mm1+add1+relu1", "mm2+add2"}));
  std::vector<std::string> names;
  for (const auto& t : p.tensors) names.push_back(t.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "y", "w1", "b1", "w2", "b2"}));
  const isa::TensorDecl* w1 = p.find("w1");
  ASSERT_NE(w1, nullptr);
  EXPECT_EQ(w1->shape, (std::vector<int64_t>{1, 1, 128, 128}));  // MatMul's B is already [K,N]; tiled
  std::vector<float> w1_data = test::ramp(16 * 32);
  std::vector<uint16_t> w1_bf16 = const_bf16(p, *w1);
  for (size_t i = 0; i < w1_data.size(); ++i) ASSERT_EQ(w1_bf16[(i / 32) * 128 + i % 32], isa::bf16_from_f32(w1_data[i])) << i;
  EXPECT_EQ(p.find("b2")->shape, (std::vector<int64_t>{4}));  // [1,N] becomes [N]
  EXPECT_EQ(const_f32(p, *p.find("b1")), test::ramp(32, 0.1f));
}

TEST(Compile, RegionsMarkEachNodeAndKernelFragment) {
  ModelBuilder b;
  b.input("x", {8, 16}).output("y", {8, 4});
  b.constant("w1", {16, 32}, test::ramp(16 * 32)).constant("b1", {32}, test::ramp(32, 0.1f), false);
  b.constant("w2", {32, 4}, test::ramp(32 * 4, -0.2f));
  b.node("MatMul", "mm1", {"x", "w1"}, {"h"});
  b.node("Add", "add1", {"h", "b1"}, {"hb"});
  b.node("Relu", "relu1", {"hb"}, {"r"});
  b.node("MatMul", "mm2", {"r", "w2"}, {"y"});
  isa::Program p = compile_onnx(b.bytes(), "mlp2.onnx", chip());
  isa::validate_regions(p);
  // Pre-order: each node region, then the kernel region inside it; the node regions tile the code.
  std::vector<std::string> names;
  uint32_t next = 0;
  for (const isa::Region& r : p.regions) {
    names.push_back(r.kind + " " + r.name);
    if (r.kind == isa::kRegionNode) {
      EXPECT_EQ(r.begin, next);
      next = r.end;
    }
    // Every instruction of a region comes from its node: "mm1: gemm.s:12", or "mm1: fence before gemm.s" (or
    // "drain before": a sem.set in its place, codegen.cpp).
    const std::string node = r.kind == isa::kRegionNode ? r.name : names[names.size() - 2].substr(5);
    for (uint32_t i = r.begin; i < r.end; ++i) {
      EXPECT_THAT(p.source[i], StartsWith(node + ": ")) << i;
      if (r.kind == isa::kRegionKernel) {
        EXPECT_THAT(p.source[i], ::testing::Not(HasSubstr("fence before")));
        EXPECT_THAT(p.source[i], ::testing::Not(HasSubstr("drain before")));
      }
    }
  }
  EXPECT_EQ(next, p.code.size());
  EXPECT_EQ(names, (std::vector<std::string>{"node cast(x)", "kernel cast.s", "node mm1+add1+relu1", "kernel gemm.s",
                                             "node mm2", "kernel gemm.s"}));
  // A fragment that does not begin by synchronising has the fence (or drain) in front inside its node, not its
  // kernel.
  for (size_t i = 2; i < p.regions.size(); i += 2) {
    const isa::Region &node = p.regions[i], &kernel = p.regions[i + 1];
    EXPECT_EQ(kernel.end, node.end);
    const std::string& first = p.source[node.begin];
    const bool before = first.find("fence before") != std::string::npos || first.find("drain before") != std::string::npos;
    EXPECT_EQ(kernel.begin, node.begin + (before ? 1 : 0));
  }
}

TEST(Compile, DynamicBatchNeedsItsShape) {
  ModelBuilder b = test::linear_model(0, 3, 2, "batch");
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }),
            "m.onnx: input 'x' has a dynamic dimension 'batch': give its shape");

  Options o = chip();
  o.input_shapes["x"] = {5, 3};
  isa::Program p = compile_onnx(b.bytes(), "m.onnx", o);
  EXPECT_EQ(p.find("x")->shape, (std::vector<int64_t>{5, 3}));
  EXPECT_EQ(p.find("y")->shape, (std::vector<int64_t>{5, 2}));

  o.input_shapes["x"] = {5, 4};
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", o); }),
            "m.onnx: input 'x': the given shape [5,4] does not match the model's [batch,3]");
  o.input_shapes = {{"z", {1}}};
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", o); }),
            "m.onnx: a shape is given for 'z', which is not an input (inputs: x)");
}

TEST(CompileErrors, UnsupportedOperatorNamesOpNodeAndModel) {
  ModelBuilder b;
  b.input("x", {1, 3, 8, 8}).output("y");
  b.node("LRN", "norm1", {"x"}, {"y"});
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }),
            "m.onnx: node 'norm1' (LRN): unsupported operator");
}

// One error lists every node the compiler cannot compile, in model order: unknown operators, and operators it only
// folds (Range, ConstantOfShape) on values computed at run time; a Range of constants folds and is not listed. Past
// 8 nodes the message counts the rest.
TEST(CompileErrors, EveryUnsupportedNodeIsListedOnce) {
  ModelBuilder b;
  b.input("x", {2, 2}).output("y");
  b.constant("c", {2, 2}, {0, 1, 2, 3});
  b.constant("one", {}, {1});
  b.node("Range", "range_of_constants", {"one", "one", "one"}, {"r"});
  b.node("Range", "range", {"x", "x", "x"}, {"t"});
  b.node("Erfc", "erfc", {"t"}, {"e"});
  b.node("ConstantOfShape", "fill", {"x"}, {"l"});
  b.node("Add", "add", {"x", "c"}, {"y"});
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }),
            "m.onnx: 3 nodes have unsupported operators: node 'range' (Range, on values computed at run time), node "
            "'erfc' (Erfc), node 'fill' (ConstantOfShape, on values computed at run time)");
  for (int i = 0; i < 8; ++i) b.node("Erfc", "more" + std::to_string(i), {"x"}, {"m" + std::to_string(i)});
  EXPECT_THAT(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }),
              AllOf(StartsWith("m.onnx: 11 nodes have unsupported operators: node 'range' (Range, "),
                    HasSubstr("node 'more4' (Erfc) and 3 more"), Not(HasSubstr("more5"))));
}

TEST(CompileErrors, UnsupportedAttributeValues) {
  ModelBuilder b = test::linear_model(3, 3, 2);  // square x, so that x^T still fits
  test::set_int(b.proto().mutable_graph()->mutable_node(0), "transA", 1);
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }), "m.onnx: node 'fc' (Gemm): transA=1 is not supported");

  ModelBuilder c = test::linear_model(4, 3, 2);
  c.proto().mutable_graph()->mutable_node(0)->mutable_attribute(0)->set_f(0.5f);  // alpha
  EXPECT_EQ(error_of([&] { compile_onnx(c.bytes(), "m.onnx", chip()); }),
            "m.onnx: node 'fc' (Gemm): alpha=0.5 is not supported (only 1)");
}

// x -> MatMul(w1)+Relu -> h; y = h + MatMul(h, w2): a residual block. The Add becomes a row-wise kernel reading
// the bf16 intermediates and writing the f32 graph output directly.
ModelBuilder residual_block() {
  ModelBuilder b;
  b.input("x", {4, 16}).output("y", {4, 32});
  b.constant("w1", {16, 32}, test::ramp(16 * 32)).constant("w2", {32, 32}, test::ramp(32 * 32, 0.1f));
  b.node("MatMul", "fc1", {"x", "w1"}, {"h0"});
  b.node("Relu", "relu1", {"h0"}, {"h"});
  b.node("MatMul", "fc2", {"h", "w2"}, {"g"});
  b.node("Add", "residual", {"h", "g"}, {"y"});
  return b;
}

TEST(Compile, ResidualAddOfTwoActivationsIsOneRowwiseKernel) {
  isa::Program p = compile_onnx(residual_block().bytes(), "res.onnx", chip());
  EXPECT_EQ(fragments(p), (std::vector<std::string>{"cast(x)", "fc1+relu1", "fc2", "residual"}));
  std::vector<std::string> kernels;
  for (const isa::Region& r : p.regions)
    if (r.kind == isa::kRegionKernel) kernels.push_back(r.name);
  EXPECT_EQ(kernels, (std::vector<std::string>{"cast.s", "gemm.s", "gemm.s", "rowwise"}));
  EXPECT_EQ(p.find("y")->dtype, isa::DType::F32);
  EXPECT_EQ(p.find("y")->shape, (std::vector<int64_t>{4, 32}));
}

TEST(Compile, ResidualAddOfAGraphInputCastsItFirst) {
  ModelBuilder b;
  b.input("x", {4, 8}).output("y").output("z");
  b.constant("w", {8, 8}, test::ramp(64));
  b.node("MatMul", "mm", {"x", "w"}, {"h"});
  b.node("Add", "residual", {"h", "x"}, {"y"});
  b.node("MatMul", "mm2", {"y", "w"}, {"z"});  // reads the output's bf16 sum, not a cast of the f32 one
  isa::Program p = compile_onnx(b.bytes(), "res.onnx", chip());
  EXPECT_EQ(fragments(p), (std::vector<std::string>{"cast(x)", "mm", "residual", "mm2"}));
}

// ResNet's block end: a convolution's output (bf16, channels last), added to an earlier activation of the same type
// and ReLU'd, read by nothing else: the Add and the Relu become the GEMM's epilogue (gemm.s RESIDUAL, RES_RELU),
// with no kernel of their own; the residual is the earlier activation, whichever operand of the Add it is.
ModelBuilder fusable_residual(bool gemm_output_too, bool swap) {
  ModelBuilder b;
  b.input("x", {1, 16, 6, 6}).output("y", {1, 8, 6, 6});
  if (gemm_output_too) b.output("g", {1, 16, 6, 6});
  b.constant("w1", {16, 16, 1, 1}, test::ramp(16 * 16)).constant("w2", {16, 16, 1, 1}, test::ramp(16 * 16, 0.1f));
  b.constant("w3", {8, 16, 1, 1}, test::ramp(16 * 8, 0.2f));
  b.node("Conv", "conv1", {"x", "w1"}, {"h0"});
  b.node("Relu", "relu1", {"h0"}, {"h"});
  b.node("Conv", "conv2", {"h", "w2"}, {"k0"});
  b.node("Relu", "relu2a", {"k0"}, {"k"});
  b.node("Conv", "conv2b", {"k", "w2"}, {"g"});
  b.node("Add", "residual", swap ? std::vector<std::string>{"h", "g"} : std::vector<std::string>{"g", "h"}, {"s"});
  b.node("Relu", "relu2", {"s"}, {"t"});
  b.node("Conv", "conv3", {"t", "w3"}, {"y"});
  return b;
}

TEST(Compile, ResidualAddAndReluAfterAGemmAreItsEpilogue) {
  auto gemms = [](const isa::Program& p) {
    std::vector<std::string> labels;
    for (const isa::Region& r : p.regions)
      if (r.kind == isa::kRegionKernel && r.name == "gemm.s") labels.push_back(p.source[r.begin].substr(0, p.source[r.begin].find(": ")));
    return labels;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& s) { return std::find(v.begin(), v.end(), s) != v.end(); };
  for (bool swap : {false, true}) {
    isa::Program p = compile_onnx(fusable_residual(false, swap).bytes(), "res.onnx", chip());
    const std::vector<std::string> f = fragments(p);
    EXPECT_TRUE(has(f, "conv2b+residual+relu2")) << ::testing::PrintToString(f);
    EXPECT_FALSE(has(f, "residual+relu2")) << ::testing::PrintToString(f);
    EXPECT_EQ(gemms(p), (std::vector<std::string>{"conv1+relu1", "conv2+relu2a", "conv2b+residual+relu2", "conv3"}));
  }
  // With the GEMM's output also a graph output, it must be written: the Add stays a row-wise kernel.
  isa::Program p = compile_onnx(fusable_residual(true, false).bytes(), "res.onnx", chip());
  EXPECT_TRUE(has(fragments(p), "residual+relu2")) << ::testing::PrintToString(fragments(p));
  EXPECT_EQ(gemms(p), (std::vector<std::string>{"conv1+relu1", "conv2+relu2a", "conv2b", "conv3"}));
}

// A transformer's feed-forward: Linear (MatMul + bias Add), GELU (as torch exports it: Div, Erf, Add, Mul, Mul),
// Linear. The GELU runs in the first GEMM's drain (gemm_chip's act, on a chip of one matrix unit as on one of
// several): no row-wise kernel, and the GEMM writes the GELU's bf16 output; where the GEMM's f32 output is also a
// graph output, the GELU stays a row-wise kernel.
ModelBuilder feed_forward(bool hidden_out) {
  ModelBuilder b;
  b.input("x", {8, 64}).output("y", {8, 64});
  if (hidden_out) b.output("h", {8, 256});
  b.constant("w1", {64, 256}, test::ramp(64 * 256, 0.01f)).constant("b1", {256}, test::ramp(256, 0.1f));
  b.constant("w2", {256, 64}, test::ramp(256 * 64, 0.01f)).constant("sqrt2", {}, {1.4142135f});
  b.constant("one", {}, {1.0f}).constant("half", {}, {0.5f});
  b.node("MatMul", "fc1", {"x", "w1"}, {"h0"});
  b.node("Add", "fc1_bias", {"h0", "b1"}, {"h"});
  b.node("Div", "div", {"h", "sqrt2"}, {"d"});
  b.node("Erf", "erf", {"d"}, {"e"});
  b.node("Add", "add1", {"e", "one"}, {"e1"});
  b.node("Mul", "mul", {"h", "e1"}, {"m"});
  b.node("Mul", "mul_half", {"m", "half"}, {"g"});
  b.node("MatMul", "fc2", {"g", "w2"}, {"y"});
  return b;
}

TEST(Compile, GeluAfterALinearIsTheGemmsEpilogue) {
  Options four = chip(), one = chip();
  four.target.symbols["MXUS"] = 4, four.target.symbols["CORES"] = 1;
  one.target.symbols["MXUS"] = 1, one.target.symbols["CORES"] = 1;
  auto kernels = [](const isa::Program& p) {
    std::vector<std::string> k;
    for (const isa::Region& r : p.regions)
      if (r.kind == isa::kRegionKernel) k.push_back(r.name);
    return k;
  };
  for (const Options& o : {four, one}) {  // four matrix units, and one (gemm.s has no epilogue: gemm_chip runs it)
    const isa::Program fused = compile_onnx(feed_forward(false).bytes(), "ff.onnx", o);
    EXPECT_EQ(fragments(fused),
              (std::vector<std::string>{"cast(x)", "fc1+fc1_bias+div+erf+add1+mul+mul_half", "fc2"}));
    EXPECT_EQ(kernels(fused)[1], "gemm_chip");
    const isa::Program out = compile_onnx(feed_forward(true).bytes(), "ff.onnx", o);
    const std::vector<std::string> f = fragments(out);
    EXPECT_NE(std::find(f.begin(), f.end(), "div+erf+add1+mul+mul_half"), f.end()) << ::testing::PrintToString(f);
  }
}

// Elementwise chains fuse into one row-wise kernel, whatever the broadcasting: a [1,8] activation over [4,8]
// (loaded once, period 1), then a Relu.
TEST(Compile, BroadcastingAddAndReluAreOneRowwiseKernel) {
  ModelBuilder b;
  b.input("x", {4, 8}).input("r", {1, 8}).output("y");
  b.constant("w", {8, 8}, test::ramp(64));
  b.node("MatMul", "mm", {"x", "w"}, {"h"});
  b.node("Add", "residual", {"h", "r"}, {"s"});
  b.node("Relu", "relu", {"s"}, {"y"});
  isa::Program p = compile_onnx(b.bytes(), "res.onnx", chip());
  EXPECT_EQ(fragments(p), (std::vector<std::string>{"cast(x)", "mm", "residual+relu"}));
}

TEST(CompileErrors, UnsupportedExponentNamesTheNode) {
  ModelBuilder b;
  b.input("x", {4, 8}).output("y");
  b.constant("e", {}, {1.5f});
  b.node("Pow", "pow", {"x", "e"}, {"y"});
  EXPECT_EQ(error_of([&] { compile_onnx(b.bytes(), "m.onnx", chip()); }),
            "m.onnx: node 'pow' (Pow): exponent 1.5 is not supported (2, 3, 0.5, 1, -1, -0.5 are)");
}

TEST(CompileErrors, CorruptOrTruncatedBytes) {
  EXPECT_EQ(error_of([] { compile_onnx("\xff\xff\xff\xff", "model.onnx", chip()); }),
            "model.onnx: not a valid ONNX model (protobuf parse failed)");
  std::string bytes = test::linear_model(4, 3, 2).bytes();
  EXPECT_EQ(error_of([&] { compile_onnx(bytes.substr(0, bytes.size() / 2), "model.onnx", chip()); }),
            "model.onnx: not a valid ONNX model (protobuf parse failed)");
  EXPECT_EQ(error_of([] { compile_onnx("", "model.onnx", chip()); }),
            "model.onnx: not a valid ONNX model (it has no graph)");
}

TEST(CompileErrors, HbmTooSmall) {
  // x f32[4,3] at 0 (48 B), y f32[4,2] at 4096, w tiled bf16[1,1,128,128] (32768 B) at 8192, b f32[2] at
  // 40960, then the intermediate x.bf16 [4,3] (24 B) at 45056: the program needs 45056 + 24 = 45080 bytes.
  EXPECT_EQ(error_of([] { compile_onnx(test::linear_model(4, 3, 2).bytes(), "m.onnx", chip(45000)); }),
            "m.onnx: model needs 45080 bytes of HBM, the chip has 45000");
  EXPECT_NO_THROW(compile_onnx(test::linear_model(4, 3, 2).bytes(), "m.onnx", chip(45080)));
}

TEST(CompileFile, ReadsTheFileAndNamesTheProgramAfterItsStem) {
  std::filesystem::path path = std::filesystem::temp_directory_path() / "tpusim_compiler_test_linear.onnx";
  std::ofstream(path, std::ios::binary) << test::linear_model(4, 3, 2).bytes();
  isa::Program p = compile_onnx_file(path.string(), chip());
  std::filesystem::remove(path);
  EXPECT_EQ(p.name, "tpusim_compiler_test_linear");
  EXPECT_EQ(p.tensors.size(), 4u);

  EXPECT_THAT(error_of([] { compile_onnx_file("/nonexistent/dir/model.onnx", chip()); }),
              HasSubstr("'/nonexistent/dir/model.onnx'"));
}

}  // namespace
}  // namespace tpusim::compiler
