// The compiler's passes one at a time: import, shape inference, fusion, kernel selection, memory planning.
#include <gtest/gtest.h>

#include "fusion.h"
#include "kernel_plan.h"
#include "memory_plan.h"
#include "onnx_import.h"
#include "onnx_models.h"
#include "shape_inference.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

using test::ModelBuilder;

ir::Graph load(const ModelBuilder& b, const std::map<std::string, std::vector<int64_t>>& shapes = {}) {
  ir::Graph g = import_onnx(b.bytes(), "t.onnx");
  infer_shapes(g, shapes);
  return g;
}

// x[8,16] -> Gemm(w1[32,16] transB, b1) -> Relu -> Identity -> MatMul(w2[32,32]) -> Add(b2) -> Relu
//   -> MatMul(w3[32,4]) -> y
ModelBuilder three_layers() {
  ModelBuilder b;
  b.input("x", {8, 16}).output("y", {8, 4});
  b.constant("w1", {32, 16}, test::ramp(32 * 16)).constant("b1", {32}, test::ramp(32));
  b.constant("w2", {32, 32}, test::ramp(32 * 32), false).constant("b2", {32}, test::ramp(32, 1));
  b.constant("w3", {32, 4}, test::ramp(32 * 4));
  test::set_int(b.node("Gemm", "fc1", {"x", "w1", "b1"}, {"h1"}), "transB", 1);
  b.node("Relu", "relu1", {"h1"}, {"r1"});
  b.node("Identity", "id", {"r1"}, {"r1b"});
  b.node("MatMul", "mm2", {"r1b", "w2"}, {"h2"});
  b.node("Add", "add2", {"h2", "b2"}, {"h2b"});
  b.node("Relu", "relu2", {"h2b"}, {"r2"});
  b.node("MatMul", "mm3", {"r2", "w3"}, {"y"});
  b.node("Relu", "unused", {"x"}, {"dead"});  // needed by no output: dropped
  return b;
}

TEST(Import, RawAndFloatDataAndConstantNodes) {
  ModelBuilder b;
  b.input("x", {2, 2}).output("y");
  b.constant("raw", {2}, {1.5f, -2}, true).constant("floats", {2}, {3, 4}, false);
  onnx::NodeProto* c = b.node("Constant", "c", {}, {"k"});
  onnx::AttributeProto* a = c->add_attribute();
  a->set_name("value_floats");
  a->set_type(onnx::AttributeProto_AttributeType_FLOATS);
  a->add_floats(7);
  b.node("Identity", "", {"x"}, {"y"});
  ir::Graph g = import_onnx(b.bytes(), "t.onnx");
  EXPECT_EQ(g.values[g.value_index.at("raw")].data, (std::vector<float>{1.5f, -2}));
  EXPECT_EQ(g.values[g.value_index.at("floats")].data, (std::vector<float>{3, 4}));
  EXPECT_EQ(g.values[g.value_index.at("k")].data, (std::vector<float>{7}));
  EXPECT_TRUE(g.values[g.value_index.at("k")].is_const);
  ASSERT_EQ(g.nodes.size(), 1u);  // the Constant node became a value
  EXPECT_EQ(g.nodes[0].name, "Identity_1");
  EXPECT_EQ(g.inputs, std::vector<int>{g.value_index.at("x")});
}

TEST(Import, UseBeforeDefinitionIsAnError) {
  ModelBuilder b;
  b.input("x", {2, 2}).output("y");
  b.node("Relu", "r", {"nowhere"}, {"y"});
  EXPECT_THROW(
      {
        try {
          import_onnx(b.bytes(), "t.onnx");
        } catch (const Error& e) {
          EXPECT_STREQ(e.what(), "node 'r' (Relu) uses 'nowhere', which no earlier node, input or initializer defines");
          throw;
        }
      },
      Error);
}

TEST(ShapeInference, GemmTransBAndBroadcasting) {
  ir::Graph g = load(three_layers());
  EXPECT_EQ(ir::shape_str(g.values[g.value_index.at("h1")]), "[8,32]");
  EXPECT_EQ(ir::shape_str(g.values[g.value_index.at("h2b")]), "[8,32]");
  EXPECT_EQ(ir::shape_str(g.values[g.value_index.at("y")]), "[8,4]");
}

TEST(Fusion, OneOpPerMatMulWithBiasAndRelu) {
  ir::Graph g = load(three_layers());
  FusedGraph f = fuse(g);
  ASSERT_EQ(f.ops.size(), 3u);
  EXPECT_EQ(f.ops[0].name, "fc1");
  EXPECT_TRUE(f.ops[0].transpose_b);
  EXPECT_EQ(f.ops[0].bias, test::ramp(32));
  EXPECT_TRUE(f.ops[0].relu);
  EXPECT_EQ(g.values[f.ops[0].out].name, "r1");
  EXPECT_EQ(f.ops[1].a, f.ops[0].out);  // through the Identity
  EXPECT_EQ(f.ops[1].bias_name, "b2");
  EXPECT_TRUE(f.ops[1].relu);
  EXPECT_TRUE(f.ops[2].bias.empty());
  EXPECT_FALSE(f.ops[2].relu);
  EXPECT_EQ((std::vector<int64_t>{f.ops[2].m, f.ops[2].k, f.ops[2].n}), (std::vector<int64_t>{8, 32, 4}));
  ASSERT_EQ(f.outputs.size(), 1u);
  EXPECT_EQ(f.outputs[0].name, "y");
  EXPECT_EQ(f.outputs[0].value, f.ops[2].out);
}

TEST(Fusion, GemmBiasAndAFollowingAddAreSummed) {
  ModelBuilder b = test::linear_model(4, 3, 2);
  b.proto().mutable_graph()->mutable_node(0)->set_output(0, "t");
  b.constant("b_more", {1, 2}, {10, 20});
  b.node("Add", "add", {"t", "b_more"}, {"y"});
  FusedGraph f = fuse(load(b));
  ASSERT_EQ(f.ops.size(), 1u);
  std::vector<float> want = test::ramp(2, 0.5f);
  want[0] += 10;
  want[1] += 20;
  EXPECT_EQ(f.ops[0].bias, want);
}

TEST(Fusion, ReluOfAnInputIsRejected) {
  ModelBuilder b;
  b.input("x", {2, 2}).output("y");
  b.node("Relu", "r", {"x"}, {"y"});
  ir::Graph g = load(b);
  try {
    fuse(g);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "node 'r' (Relu): only a Relu right after MatMul/Gemm is supported, and 'x' is not a "
                           "matmul result");
  }
}

TEST(KernelSelection, CastsInputsOnceAndOutputsF32) {
  ir::Graph g = load(three_layers());
  KernelPlan plan = select_kernels(g, fuse(g));
  ASSERT_EQ(plan.calls.size(), 4u);
  EXPECT_EQ(plan.calls[0].kernel, "cast.s");
  EXPECT_EQ(plan.calls[0].params, (std::map<std::string, int64_t>{{"N", 128}, {"SDT", 3}, {"DDT", 2}, {"SCALE", 0}}));
  EXPECT_EQ(plan.calls[1].params, (std::map<std::string, int64_t>{{"M", 8}, {"K", 16}, {"N", 32}, {"IN_DT", 2},
                                                                   {"OUT_DT", 2}, {"BIAS", 1}, {"RELU", 1},
                                                                   {"SCALE", 0}}));
  EXPECT_EQ(plan.calls[3].params.at("OUT_DT"), 3);  // the graph output stays f32
  EXPECT_EQ(plan.calls[3].params.at("BIAS"), 0);
  EXPECT_EQ(plan.calls[3].tensors.count("bias"), 0u);
  const Buffer& w1 = plan.buffers[plan.calls[1].tensors.at("b")];
  EXPECT_EQ(w1.shape, (std::vector<int64_t>{16, 32}));  // transposed
  EXPECT_EQ(w1.dtype, isa::DType::BF16);
}

TEST(KernelSelection, AGraphOutputReadByALaterMatMulIsCastAgain) {
  ModelBuilder b;
  b.input("x", {2, 4}).output("h", {2, 4}).output("y", {2, 4});
  b.constant("w", {4, 4}, test::ramp(16));
  b.node("MatMul", "mm1", {"x", "w"}, {"h"});
  b.node("MatMul", "mm2", {"h", "w"}, {"y"});
  ir::Graph g = load(b);
  KernelPlan plan = select_kernels(g, fuse(g));
  std::vector<std::string> labels;
  for (const auto& c : plan.calls) labels.push_back(c.label);
  EXPECT_EQ(labels, (std::vector<std::string>{"cast(x)", "mm1", "cast(h)", "mm2"}));
  EXPECT_EQ(plan.calls[1].tensors.at("b"), plan.calls[3].tensors.at("b"));  // one copy of w
}

TEST(KernelSelection, ResidualAddIsAVaddInBf16) {
  ModelBuilder b;
  b.input("x", {4, 16}).output("y", {4, 32});
  b.constant("w1", {16, 32}, test::ramp(16 * 32)).constant("w2", {32, 32}, test::ramp(32 * 32));
  b.node("MatMul", "fc1", {"x", "w1"}, {"h0"});
  b.node("Relu", "relu1", {"h0"}, {"h"});
  b.node("MatMul", "fc2", {"h", "w2"}, {"g"});
  b.node("Add", "residual", {"h", "g"}, {"y"});
  ir::Graph g = load(b);
  FusedGraph f = fuse(g);
  ASSERT_EQ(f.ops.size(), 3u);
  EXPECT_EQ(f.ops[2].kind, FusedMatMul::Kind::Add);
  EXPECT_EQ(f.ops[2].a, f.ops[0].out);
  EXPECT_EQ(f.ops[2].b, f.ops[1].out);
  KernelPlan plan = select_kernels(g, f);
  ASSERT_EQ(plan.calls.size(), 5u);  // cast(x), fc1, fc2, vadd, cast of the sum to the f32 output
  const KernelCall& add = plan.calls[3];
  EXPECT_EQ(add.label, "residual");
  EXPECT_EQ(add.kernel, "vadd.s");
  EXPECT_EQ(add.params, (std::map<std::string, int64_t>{{"N", 128}, {"DT", 2}}));
  EXPECT_EQ(add.tensors.at("a"), plan.calls[1].tensors.at("c"));
  EXPECT_EQ(add.tensors.at("b"), plan.calls[2].tensors.at("c"));
  EXPECT_EQ(plan.buffers[add.tensors.at("y")].dtype, isa::DType::BF16);
  const KernelCall& cast = plan.calls[4];
  EXPECT_EQ(cast.label, "residual");
  EXPECT_EQ(cast.kernel, "cast.s");
  EXPECT_EQ(cast.params, (std::map<std::string, int64_t>{{"N", 128}, {"SDT", 2}, {"DDT", 3}, {"SCALE", 0}}));
  EXPECT_EQ(cast.tensors.at("x"), add.tensors.at("y"));
  EXPECT_EQ(plan.buffers[cast.tensors.at("y")].name, "y");
  EXPECT_EQ(plan.buffers[cast.tensors.at("y")].kind, Buffer::Kind::Output);
}

TEST(MemoryPlan, IntermediatesReuseSpaceAfterTheirLastReader) {
  ir::Graph g = load(three_layers());
  KernelPlan plan = select_kernels(g, fuse(g));
  uint64_t total = plan_memory(plan, uint64_t{1} << 30, "t.onnx");
  auto addr = [&](const std::string& name) {
    for (const Buffer& b : plan.buffers)
      if (b.name == name) return b.addr;
    ADD_FAILURE() << name;
    return uint64_t{0};
  };
  // Declared: x 0, y 4096, w1 8192, b1 12288, w2 16384, b2 20480, w3 24576 (each < 4 KiB); temps from 28672.
  EXPECT_EQ(addr("x"), 0u);
  EXPECT_EQ(addr("y"), 4096u);
  EXPECT_EQ(addr("w3"), 24576u);
  // cast: x.bf16 at 28672; fc1: r1 at 32768, then x.bf16 is free; mm2: r2 takes x.bf16's place.
  EXPECT_EQ(addr("x.bf16"), 28672u);
  EXPECT_EQ(addr("r1"), 32768u);
  EXPECT_EQ(addr("r2"), 28672u);
  EXPECT_EQ(total, 32768u + 8 * 32 * 2);
}

}  // namespace
}  // namespace tpusim::compiler
