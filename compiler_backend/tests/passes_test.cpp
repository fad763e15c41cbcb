// The compiler's front passes one at a time: import, shape inference, constant folding and dead-code removal.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "const_fold.h"
#include "fuse_gelu.h"
#include "onnx_import.h"
#include "onnx_models.h"
#include "shape_inference.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"

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

// A program's tensors are found by name: a nameless graph input (found by the ONNX fuzzer: it compiled into a
// program that no loader accepts, "a tensor has an empty name") or initializer is refused at import.
TEST(Import, GraphInputsAndInitializersWithoutANameAreErrors) {
  auto error = [](const ModelBuilder& b) {
    try {
      import_onnx(b.bytes(), "t.onnx");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  ModelBuilder nameless_input;
  nameless_input.input("x", {2, 2}).input("", {2, 2}).output("y");
  nameless_input.node("Relu", "r", {"x"}, {"y"});
  EXPECT_EQ(error(nameless_input), "t.onnx: graph input 1 has an empty name");
  ModelBuilder nameless_constant;
  nameless_constant.input("x", {2, 2}).output("y");
  nameless_constant.constant("w", {2}, {1, 2}).constant("", {2}, {3, 4});
  nameless_constant.node("Relu", "r", {"x"}, {"y"});
  EXPECT_EQ(error(nameless_constant), "t.onnx: initializer 1 has an empty name");
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
          EXPECT_STREQ(e.what(), "t.onnx: node 'r' (Relu): uses 'nowhere', which no earlier node, input or initializer defines");
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

// ---- helpers ----

const ir::Value& val(const ir::Graph& g, const std::string& name) { return g.values[g.value_index.at(name)]; }
std::string shape_of(const ir::Graph& g, const std::string& name) { return ir::shape_str(val(g, name)); }

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<std::string> ops_of(const ir::Graph& g) {
  std::vector<std::string> ops;
  for (const ir::Node& n : g.nodes) ops.push_back(n.op);
  return ops;
}

// Every producer index points at the node that lists the value among its outputs, and nodes only read values
// defined before them.
void expect_consistent(const ir::Graph& g) {
  std::vector<bool> defined(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) {
    defined[v] = g.values[v].is_const || std::find(g.inputs.begin(), g.inputs.end(), static_cast<int>(v)) != g.inputs.end();
    EXPECT_EQ(g.value_index.at(g.values[v].name), static_cast<int>(v));
    if (g.values[v].producer >= 0) {
      const ir::Node& p = g.nodes.at(g.values[v].producer);
      EXPECT_NE(std::find(p.outputs.begin(), p.outputs.end(), static_cast<int>(v)), p.outputs.end()) << g.values[v].name;
    }
  }
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (int in : g.nodes[i].inputs) {
      if (in >= 0) {
        EXPECT_TRUE(defined[in]) << g.nodes[i].name << " reads " << g.values[in].name;
      }
    }
    for (int out : g.nodes[i].outputs)
      if (out >= 0) {
        defined[out] = true;
        EXPECT_EQ(g.values[out].producer, static_cast<int>(i));
      }
  }
}

ir::Graph fold(const ModelBuilder& b, const std::map<std::string, std::vector<int64_t>>& shapes = {}) {
  ir::Graph g = load(b, shapes);
  fold_constants(g);
  expect_consistent(g);
  return g;
}

// One-node model: inputs (FLOAT graph inputs of the given shapes, or already-added constants), output "y".
ModelBuilder single(const std::string& op, const std::vector<std::pair<std::string, std::vector<test::D>>>& inputs,
                    std::vector<std::string> node_inputs = {}, int opset = 13) {
  ModelBuilder b;
  test::set_opset(b, opset);
  for (const auto& [name, dims] : inputs) b.input(name, dims);
  if (node_inputs.empty())
    for (const auto& in : inputs) node_inputs.push_back(in.first);
  b.output("y");
  b.node(op, "n", node_inputs, {"y"});
  return b;
}
onnx::NodeProto* the_node(ModelBuilder& b) { return b.proto().mutable_graph()->mutable_node(0); }

// ---- import ----

TEST(Import, IntegerBoolAndOtherFloatConstants) {
  ModelBuilder b;
  b.input("x", {2}).output("y");
  test::int_constant(b, "i64raw", {3}, {1, -2, 1LL << 40});
  test::int_constant(b, "i64data", {2}, {7, -8}, onnx::TensorProto_DataType_INT64, false);
  test::int_constant(b, "i32", {2}, {-3, 4}, onnx::TensorProto_DataType_INT32, false);
  test::int_constant(b, "i32raw", {1}, {-5}, onnx::TensorProto_DataType_INT32);
  test::int_constant(b, "bools", {2, 2}, {1, 0, 0, 1}, onnx::TensorProto_DataType_BOOL);
  onnx::TensorProto* d = b.proto().mutable_graph()->add_initializer();
  d->set_name("dbl");
  d->set_data_type(onnx::TensorProto_DataType_DOUBLE);
  d->add_dims(2);
  d->add_double_data(0.5);
  d->add_double_data(-1.25);
  onnx::TensorProto* h = b.proto().mutable_graph()->add_initializer();
  h->set_name("half");
  h->set_data_type(onnx::TensorProto_DataType_FLOAT16);
  h->add_dims(2);
  uint16_t halves[2] = {0x3c00, 0xc100};  // 1.0, -2.5
  h->set_raw_data(std::string(reinterpret_cast<const char*>(halves), 4));
  onnx::NodeProto* c = b.node("Constant", "c", {}, {"k"});
  onnx::AttributeProto* a = c->add_attribute();
  a->set_name("value_ints");
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  a->add_ints(3);
  a->add_ints(-1);
  onnx::NodeProto* c2 = b.node("Constant", "c2", {}, {"k2"});
  test::set_int(c2, "value_int", 9);
  c2->mutable_attribute(0)->set_name("value_int");
  onnx::NodeProto* cos = b.node("ConstantOfShape", "cos", {"k"}, {"z"});
  onnx::AttributeProto* v = cos->add_attribute();
  v->set_name("value");
  v->set_type(onnx::AttributeProto_AttributeType_TENSOR);
  v->mutable_t()->set_data_type(onnx::TensorProto_DataType_INT64);
  v->mutable_t()->add_dims(1);
  v->mutable_t()->add_int64_data(-4);
  b.node("Identity", "", {"x"}, {"y"});
  ir::Graph g = import_onnx(b.bytes(), "t.onnx");
  EXPECT_EQ(val(g, "i64raw").ints, (std::vector<int64_t>{1, -2, 1LL << 40}));
  EXPECT_EQ(val(g, "i64raw").elem_type, ir::kInt64);
  EXPECT_EQ(val(g, "i64data").ints, (std::vector<int64_t>{7, -8}));
  EXPECT_EQ(val(g, "i32").ints, (std::vector<int64_t>{-3, 4}));
  EXPECT_EQ(val(g, "i32").elem_type, ir::kInt32);
  EXPECT_EQ(val(g, "i32raw").ints, (std::vector<int64_t>{-5}));
  EXPECT_EQ(val(g, "bools").ints, (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(val(g, "bools").elem_type, ir::kBool);
  EXPECT_EQ(val(g, "dbl").data, (std::vector<float>{0.5f, -1.25f}));
  EXPECT_EQ(val(g, "dbl").elem_type, ir::kFloat);
  EXPECT_EQ(val(g, "half").data, (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(val(g, "k").ints, (std::vector<int64_t>{3, -1}));
  EXPECT_EQ(shape_of(g, "k"), "[2]");
  EXPECT_EQ(val(g, "k2").ints, (std::vector<int64_t>{9}));
  EXPECT_EQ(shape_of(g, "k2"), "[]");
  const ir::Attr& t = g.nodes[0].attrs.at("value");
  EXPECT_EQ(t.t_type, ir::kInt64);
  EXPECT_EQ(t.t, (std::vector<double>{-4}));
  EXPECT_EQ(t.t_dims, (std::vector<int64_t>{1}));
}

TEST(Import, WrongDataSizeAndOldSoftmaxAreErrors) {
  ModelBuilder b;
  b.input("x", {2}).output("y");
  test::int_constant(b, "i", {3}, {1, 2});
  b.node("Identity", "", {"x"}, {"y"});
  EXPECT_EQ(error_of([&] { import_onnx(b.bytes(), "t.onnx"); }),
            "constant 'i': 16 bytes of data for 3 INT64 elements");
  ModelBuilder s = single("Softmax", {{"x", {2, 3}}}, {}, 11);
  EXPECT_EQ(error_of([&] { import_onnx(s.bytes(), "t.onnx"); }),
            "t.onnx: node 'n' (Softmax): the opset 11 form (input coerced to 2-D) is not supported; export with opset 13 or "
            "later");
}

// ---- shape inference ----

TEST(ShapeInference, GemmRecordsAllAttributes) {
  ModelBuilder b = single("Gemm", {{"a", {3, 4}}, {"b", {5, 3}}, {"c", {5}}});
  test::set_int(the_node(b), "transA", 1);
  test::set_int(the_node(b), "transB", 1);
  test::set_float(the_node(b), "alpha", 0.5f);
  test::set_float(the_node(b), "beta", 2);
  ir::Graph g = load(b);
  EXPECT_EQ(shape_of(g, "y"), "[4,5]");
  EXPECT_EQ(g.nodes[0].attr_float("alpha", 1), 0.5f);
  EXPECT_EQ(g.nodes[0].attr_int("transA", 0), 1);
  ModelBuilder bad = single("Gemm", {{"a", {3, 4}}, {"b", {3, 5}}});
  EXPECT_EQ(error_of([&] { load(bad); }),
            "t.onnx: node 'n' (Gemm): inner dimensions differ: A is [3,4], B is [3,5] (transA=0, transB=0)");
}

TEST(ShapeInference, MatMulBatchedBroadcastAndVectors) {
  EXPECT_EQ(shape_of(load(single("MatMul", {{"a", {2, 1, 3, 4}}, {"b", {5, 4, 6}}})), "y"), "[2,5,3,6]");
  EXPECT_EQ(shape_of(load(single("MatMul", {{"a", {4}}, {"b", {3, 4, 6}}})), "y"), "[3,6]");
  EXPECT_EQ(shape_of(load(single("MatMul", {{"a", {2, 3, 4}}, {"b", {4}}})), "y"), "[2,3]");
  EXPECT_EQ(shape_of(load(single("MatMul", {{"a", {4}}, {"b", {4}}})), "y"), "[]");
  EXPECT_EQ(error_of([&] { load(single("MatMul", {{"a", {2, 3, 4}}, {"b", {3, 4, 6}}})); }),
            "t.onnx: node 'n' (MatMul): shapes [2] and [3] do not broadcast");
}

TEST(ShapeInference, ElementwiseBroadcastingAndTypes) {
  EXPECT_EQ(shape_of(load(single("Add", {{"a", {2, 1, 4}}, {"b", {3, 1}}})), "y"), "[2,3,4]");
  ir::Graph g = load(single("Equal", {{"a", {2, 3}}, {"b", {3}}}));
  EXPECT_EQ(val(g, "y").elem_type, ir::kBool);
  ModelBuilder w = single("Where", {{"c", {4, 1}}, {"x", {3}}, {"z", {1}}});
  test::set_input_type(w, "c", onnx::TensorProto_DataType_BOOL);
  EXPECT_EQ(shape_of(load(w), "y"), "[4,3]");
  EXPECT_EQ(shape_of(load(single("Max", {{"a", {2, 1}}, {"b", {3}}, {"c", {1, 1}}})), "y"), "[2,3]");
  for (const char* op : {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Neg", "Abs", "Reciprocal", "Gelu", "Log",
                         "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus", "Mish"})
    EXPECT_EQ(shape_of(load(single(op, {{"a", {2, 5}}})), "y"), "[2,5]") << op;
  ModelBuilder bad = single("Sub", {{"a", {2, 3}}, {"b", {2, 3}}});
  test::set_input_type(bad, "b", onnx::TensorProto_DataType_INT64);
  EXPECT_EQ(error_of([&] { load(bad); }), "t.onnx: node 'n' (Sub): inputs have different element types FLOAT and INT64");
}

TEST(ShapeInference, ConvPadsStridesDilationsGroups) {
  ModelBuilder b;
  b.input("x", {1, 8, 16, 16}).output("y").output("z").output("d");
  b.constant("w", {16, 2, 3, 3}, test::ramp(16 * 2 * 9));
  b.constant("w2", {4, 8, 3, 3}, test::ramp(4 * 8 * 9));
  onnx::NodeProto* up = b.node("Conv", "up", {"x", "w"}, {"y"});
  test::set_int(up, "group", 4);
  test::set_ints(up, "strides", {2, 2});
  test::set_string(up, "auto_pad", "SAME_UPPER");
  onnx::NodeProto* lo = b.node("Conv", "lo", {"x", "w"}, {"z"});
  test::set_int(lo, "group", 4);
  test::set_ints(lo, "strides", {2, 2});
  test::set_string(lo, "auto_pad", "SAME_LOWER");
  onnx::NodeProto* dil = b.node("Conv", "dil", {"x", "w2"}, {"d"});
  test::set_ints(dil, "dilations", {2, 2});
  test::set_ints(dil, "pads", {1, 1, 1, 1});
  test::set_ints(dil, "kernel_shape", {3, 3});
  ir::Graph g = load(b);
  EXPECT_EQ(shape_of(g, "y"), "[1,16,8,8]");
  EXPECT_EQ(g.nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{0, 0, 1, 1}));
  EXPECT_EQ(g.nodes[0].attrs.count("auto_pad"), 0u);
  EXPECT_EQ(g.nodes[1].attrs.at("pads").ints, (std::vector<int64_t>{1, 1, 0, 0}));
  EXPECT_EQ(shape_of(g, "d"), "[1,4,14,14]");  // 16 + 2 - 5 + 1
  EXPECT_EQ(g.nodes[2].attrs.at("dilations").ints, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(g.nodes[2].attrs.at("strides").ints, (std::vector<int64_t>{1, 1}));

  ModelBuilder valid = single("Conv", {{"x", {1, 3, 7, 7}}, {"k", {2, 3, 3, 3}}});
  test::set_string(the_node(valid), "auto_pad", "VALID");
  test::set_ints(the_node(valid), "strides", {2, 2});
  EXPECT_EQ(shape_of(load(valid), "y"), "[1,2,3,3]");
  ModelBuilder bad = single("Conv", {{"x", {1, 3, 7, 7}}, {"k", {2, 3, 3, 3}}});
  test::set_string(the_node(bad), "auto_pad", "SAME_MIDDLE");
  EXPECT_EQ(error_of([&] { load(bad); }), "t.onnx: node 'n' (Conv): auto_pad='SAME_MIDDLE' is not supported");
  ModelBuilder groups = single("Conv", {{"x", {1, 6, 7, 7}}, {"k", {2, 4, 3, 3}}});
  EXPECT_EQ(error_of([&] { load(groups); }),
            "t.onnx: node 'n' (Conv): input [1,6,7,7], weight [2,4,3,3] and group=1 do not fit");
}

TEST(ShapeInference, ConvTranspose) {
  // out = stride*(in-1) + output_padding + dilation*(k-1) + 1 - pads; weights [C, OC/group, k...]
  ModelBuilder b = single("ConvTranspose", {{"x", {1, 4, 5, 6}}, {"w", {4, 3, 3, 3}}});
  test::set_ints(the_node(b), "strides", {2, 2});
  test::set_ints(the_node(b), "pads", {1, 1, 1, 1});
  test::set_ints(the_node(b), "output_padding", {1, 1});
  EXPECT_EQ(shape_of(load(b), "y"), "[1,3,10,12]");  // 2*4 + 1 + 2 + 1 - 2, 2*5 + 1 + 2 + 1 - 2
  test::set_int(the_node(b), "group", 2);
  EXPECT_EQ(shape_of(load(b), "y"), "[1,6,10,12]");
  // SAME_UPPER: out = in * stride; the full 11 x 13 less total padding 1, its smaller half (0) first
  ModelBuilder same = single("ConvTranspose", {{"x", {1, 4, 5, 6}}, {"w", {4, 3, 3, 3}}});
  test::set_ints(the_node(same), "strides", {2, 2});
  test::set_string(the_node(same), "auto_pad", "SAME_UPPER");
  ir::Graph g = load(same);
  EXPECT_EQ(shape_of(g, "y"), "[1,3,10,12]");
  EXPECT_EQ(g.nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{0, 0, 1, 1}));
  // output_shape: totals 11 - 8 = 3 and 13 - 10 = 3, the larger half first
  ModelBuilder os = single("ConvTranspose", {{"x", {1, 4, 5, 6}}, {"w", {4, 3, 3, 3}}});
  test::set_ints(the_node(os), "strides", {2, 2});
  test::set_ints(the_node(os), "output_shape", {8, 10});
  g = load(os);
  EXPECT_EQ(shape_of(g, "y"), "[1,3,8,10]");
  EXPECT_EQ(g.nodes[0].attrs.at("pads").ints, (std::vector<int64_t>{2, 2, 1, 1}));
  test::set_ints(the_node(os), "output_shape", {12, 10});
  EXPECT_EQ(error_of([&] { load(os); }),
            "t.onnx: node 'n' (ConvTranspose): output_shape=[12,10] is larger than the transposed convolution makes "
            "(11 along axis 2)");
  ModelBuilder bad = single("ConvTranspose", {{"x", {1, 4, 5}}, {"w", {3, 2, 3}}});
  EXPECT_EQ(error_of([&] { load(bad); }),
            "t.onnx: node 'n' (ConvTranspose): input [1,4,5], weight [3,2,3] and group=1 do not fit (the weight is "
            "[C, OC/group, kernel...])");
}

TEST(ShapeInference, Resize) {
  auto resize = [](std::vector<float> scales, std::vector<int64_t> sizes, std::vector<int64_t> axes = {}) {
    ModelBuilder b;
    b.input("x", {1, 2, 5, 6}).output("y");
    std::vector<std::string> in = {"x", ""};
    if (!scales.empty()) {
      b.constant("s", {static_cast<int64_t>(scales.size())}, scales);
      in.push_back("s");
    } else {
      in.push_back("");
    }
    if (!sizes.empty()) {
      test::int_constant(b, "z", {static_cast<int64_t>(sizes.size())}, sizes);
      in.push_back("z");
    }
    onnx::NodeProto* n = b.node("Resize", "n", in, {"y"});
    if (!axes.empty()) test::set_ints(n, "axes", axes);
    return b;
  };
  EXPECT_EQ(shape_of(load(resize({1, 1, 1.5f, 0.5f}, {})), "y"), "[1,2,7,3]");  // floor(in * scale)
  EXPECT_EQ(shape_of(load(resize({}, {1, 2, 8, 9})), "y"), "[1,2,8,9]");
  EXPECT_EQ(shape_of(load(resize({}, {3, 4}, {-2, -1})), "y"), "[1,2,3,4]");
  EXPECT_EQ(error_of([&] { load(resize({1, 1, 2, 2}, {1, 2, 8, 9})); }),
            "t.onnx: node 'n' (Resize): exactly one of 'scales' and 'sizes' must be given");
  EXPECT_EQ(error_of([&] { load(resize({1, 2, 2}, {})); }), "t.onnx: node 'n' (Resize): scales has 3 values for 4 axes");
}

TEST(ShapeInference, PoolingBatchNormFlatten) {
  ModelBuilder mp = single("MaxPool", {{"x", {1, 64, 112, 112}}});
  test::set_ints(the_node(mp), "kernel_shape", {3, 3});
  test::set_ints(the_node(mp), "strides", {2, 2});
  test::set_ints(the_node(mp), "pads", {1, 1, 1, 1});
  EXPECT_EQ(shape_of(load(mp), "y"), "[1,64,56,56]");
  for (int ceil : {0, 1}) {
    ModelBuilder ap = single("AveragePool", {{"x", {1, 2, 5, 5}}});
    test::set_ints(the_node(ap), "kernel_shape", {2, 2});
    test::set_ints(the_node(ap), "strides", {2, 2});
    test::set_int(the_node(ap), "ceil_mode", ceil);
    test::set_int(the_node(ap), "count_include_pad", 1);
    EXPECT_EQ(shape_of(load(ap), "y"), ceil ? "[1,2,3,3]" : "[1,2,2,2]");
  }
  // ceil_mode drops a last window that would start inside the end padding: 4 + 1 pad, k2 s2 -> 3, not 4... (5-2)/2
  ModelBuilder ap = single("AveragePool", {{"x", {1, 1, 4, 4}}});
  test::set_ints(the_node(ap), "kernel_shape", {2, 2});
  test::set_ints(the_node(ap), "strides", {2, 2});
  test::set_ints(the_node(ap), "pads", {1, 1, 1, 1});
  test::set_int(the_node(ap), "ceil_mode", 1);
  EXPECT_EQ(shape_of(load(ap), "y"), "[1,1,3,3]");
  EXPECT_EQ(shape_of(load(single("GlobalAveragePool", {{"x", {1, 512, 7, 7}}})), "y"), "[1,512,1,1]");
  ModelBuilder bn = single("BatchNormalization", {{"x", {2, 3, 4, 4}}, {"s", {3}}, {"b", {3}}, {"m", {3}}, {"v", {3}}});
  test::set_float(the_node(bn), "epsilon", 1e-5f);
  EXPECT_EQ(shape_of(load(bn), "y"), "[2,3,4,4]");
  ModelBuilder fl = single("Flatten", {{"x", {2, 3, 4, 5}}});
  test::set_int(the_node(fl), "axis", -2);
  EXPECT_EQ(shape_of(load(fl), "y"), "[6,20]");
  EXPECT_EQ(shape_of(load(single("Flatten", {{"x", {2, 3, 4, 5}}})), "y"), "[2,60]");
}

TEST(ShapeInference, NormalisationAndReductions) {
  ModelBuilder sm = single("Softmax", {{"x", {2, 3, 4}}});
  test::set_int(the_node(sm), "axis", -2);
  ir::Graph g = load(sm);
  EXPECT_EQ(g.nodes[0].attr_int("axis", 0), 1);
  EXPECT_EQ(load(single("Softmax", {{"x", {2, 3, 4}}})).nodes[0].attr_int("axis", 0), 2);

  ModelBuilder ln = single("LayerNormalization", {{"x", {2, 5, 8}}, {"s", {8}}, {"b", {8}}});
  the_node(ln)->add_output("mean");
  test::set_int(the_node(ln), "axis", -1);
  test::set_float(the_node(ln), "epsilon", 1e-5f);
  g = load(ln);
  EXPECT_EQ(shape_of(g, "y"), "[2,5,8]");
  EXPECT_EQ(shape_of(g, "mean"), "[2,5,1]");
  EXPECT_EQ(g.nodes[0].attr_int("axis", 0), 2);

  ModelBuilder rm = single("ReduceMean", {{"x", {2, 3, 4}}});  // opset 13: axes attribute
  test::set_ints(the_node(rm), "axes", {-1});
  g = load(rm);
  EXPECT_EQ(shape_of(g, "y"), "[2,3,1]");
  EXPECT_EQ(g.nodes[0].attrs.at("axes").ints, (std::vector<int64_t>{2}));

  ModelBuilder rs = single("ReduceSum", {{"x", {2, 3, 4}}}, {"x", "ax"});  // opset 13: axes input
  test::int_constant(rs, "ax", {2}, {0, -1});
  test::set_int(the_node(rs), "keepdims", 0);
  g = load(rs);
  EXPECT_EQ(shape_of(g, "y"), "[3]");
  EXPECT_EQ(g.nodes[0].attrs.at("axes").ints, (std::vector<int64_t>{0, 2}));

  ModelBuilder rm18 = single("ReduceMean", {{"x", {2, 3, 4}}}, {"x", "ax"}, 18);  // opset 18: axes input
  test::int_constant(rm18, "ax", {1}, {1});
  EXPECT_EQ(shape_of(load(rm18), "y"), "[2,1,4]");

  ModelBuilder all = single("ReduceMax", {{"x", {2, 3}}});
  test::set_int(the_node(all), "keepdims", 0);
  EXPECT_EQ(shape_of(load(all), "y"), "[]");
  ModelBuilder noop = single("ReduceSum", {{"x", {2, 3}}});
  test::set_int(the_node(noop), "noop_with_empty_axes", 1);
  EXPECT_EQ(shape_of(load(noop), "y"), "[2,3]");

  ModelBuilder bad = single("ReduceMean", {{"x", {2, 3}}});
  test::set_ints(the_node(bad), "axes", {2});
  EXPECT_EQ(error_of([&] { load(bad); }), "t.onnx: node 'n' (ReduceMean): axes=2 is out of range for rank 2");
}

TEST(ShapeInference, SqueezeUnsqueezeBothForms) {
  ModelBuilder sq = single("Squeeze", {{"x", {1, 3, 1, 4}}}, {"x", "ax"});
  test::int_constant(sq, "ax", {1}, {-2});
  EXPECT_EQ(shape_of(load(sq), "y"), "[1,3,4]");
  EXPECT_EQ(shape_of(load(single("Squeeze", {{"x", {1, 3, 1, 4}}})), "y"), "[3,4]");
  ModelBuilder sq11 = single("Squeeze", {{"x", {1, 3, 1, 4}}}, {}, 11);
  test::set_ints(the_node(sq11), "axes", {0});
  EXPECT_EQ(shape_of(load(sq11), "y"), "[3,1,4]");
  ModelBuilder us = single("Unsqueeze", {{"x", {3, 4}}}, {"x", "ax"});
  test::int_constant(us, "ax", {2}, {0, -1});
  ir::Graph g = load(us);
  EXPECT_EQ(shape_of(g, "y"), "[1,3,4,1]");
  EXPECT_EQ(g.nodes[0].attrs.at("axes").ints, (std::vector<int64_t>{0, 3}));
  ModelBuilder bad = single("Squeeze", {{"x", {1, 3}}}, {"x", "ax"});
  test::int_constant(bad, "ax", {1}, {1});
  EXPECT_EQ(error_of([&] { load(bad); }), "t.onnx: node 'n' (Squeeze): dimension 1 of [1,3] is not 1");
}

TEST(ShapeInference, SplitSliceGatherConcat) {
  ModelBuilder sp = single("Split", {{"x", {2, 10}}}, {"x", "s"});
  test::int_constant(sp, "s", {3}, {2, 3, 5});
  the_node(sp)->add_output("y2");
  the_node(sp)->add_output("y3");
  test::set_int(the_node(sp), "axis", -1);
  ir::Graph g = load(sp);
  EXPECT_EQ(shape_of(g, "y") + shape_of(g, "y2") + shape_of(g, "y3"), "[2,2][2,3][2,5]");
  ModelBuilder eq = single("Split", {{"x", {6, 4}}});
  the_node(eq)->add_output("y2");
  the_node(eq)->add_output("y3");
  g = load(eq);
  EXPECT_EQ(shape_of(g, "y") + shape_of(g, "y3"), "[2,4][2,4]");

  ModelBuilder sl = single("Slice", {{"x", {8, 10, 6}}}, {"x", "st", "en", "ax", "stp"});
  test::int_constant(sl, "st", {3}, {-3, 9, 1});
  test::int_constant(sl, "en", {3}, {INT64_MAX, -100, -1});
  test::int_constant(sl, "ax", {3}, {0, 1, -1});
  test::int_constant(sl, "stp", {3}, {1, -2, 2});
  g = load(sl);
  EXPECT_EQ(shape_of(g, "y"), "[3,5,2]");  // 5..7; 9,7,5,3,1; 1,3
  EXPECT_EQ(g.nodes[0].attrs.at("starts").ints, (std::vector<int64_t>{5, 9, 1}));
  EXPECT_EQ(g.nodes[0].attrs.at("ends").ints, (std::vector<int64_t>{8, -1, 5}));

  ModelBuilder ga = single("Gather", {{"x", {5, 6, 7}}}, {"x", "i"});
  test::int_constant(ga, "i", {2, 3}, {0, 1, -1, 2, 3, 4});
  test::set_int(the_node(ga), "axis", -2);
  EXPECT_EQ(shape_of(load(ga), "y"), "[5,2,3,7]");
  ModelBuilder emb;  // an embedding lookup: INT64 ids from a graph input
  emb.input("ids", {2, 4}).output("y");
  emb.constant("table", {10, 3}, test::ramp(30));
  test::set_input_type(emb, "ids", onnx::TensorProto_DataType_INT64);
  emb.node("Gather", "n", {"table", "ids"}, {"y"});
  g = load(emb);
  EXPECT_EQ(shape_of(g, "y"), "[2,4,3]");
  EXPECT_EQ(val(g, "y").elem_type, ir::kFloat);
  ModelBuilder oob = single("Gather", {{"x", {5, 6}}}, {"x", "i"});
  test::int_constant(oob, "i", {1}, {5});
  EXPECT_EQ(error_of([&] { load(oob); }), "t.onnx: node 'n' (Gather): index 5 is out of range for dimension 0 of [5,6]");

  ModelBuilder cc = single("Concat", {{"a", {2, 3}}, {"b", {2, 5}}});
  test::set_int(the_node(cc), "axis", -1);
  EXPECT_EQ(shape_of(load(cc), "y"), "[2,8]");
}

TEST(ShapeInference, ReshapeTransposeCastShapeExpandPadTile) {
  ModelBuilder r = single("Reshape", {{"x", {2, 3, 4}}}, {"x", "s"});
  test::int_constant(r, "s", {3}, {0, -1, 2});
  EXPECT_EQ(shape_of(load(r), "y"), "[2,6,2]");
  ModelBuilder rz = single("Reshape", {{"x", {2, 3, 4}}}, {"x", "s"});
  test::int_constant(rz, "s", {2}, {0, 24});
  test::set_int(the_node(rz), "allowzero", 1);
  EXPECT_EQ(error_of([&] { load(rz); }), "t.onnx: node 'n' (Reshape): cannot reshape [2,3,4] to [0,24]");
  EXPECT_EQ(shape_of(load(single("Transpose", {{"x", {2, 3, 4}}})), "y"), "[4,3,2]");
  ModelBuilder t = single("Transpose", {{"x", {2, 3, 4}}});
  test::set_ints(the_node(t), "perm", {0, 2, 1});
  EXPECT_EQ(shape_of(load(t), "y"), "[2,4,3]");
  ModelBuilder c = single("Cast", {{"x", {2, 3}}});
  test::set_int(the_node(c), "to", onnx::TensorProto_DataType_INT32);
  EXPECT_EQ(load(c).values[load(c).value_index.at("y")].elem_type, ir::kInt32);
  ModelBuilder s = single("Shape", {{"x", {2, 3, 4}}});
  test::set_int(the_node(s), "start", -2);
  ir::Graph g = load(s);  // folded: the shape is static
  EXPECT_TRUE(val(g, "y").is_const);
  EXPECT_EQ(val(g, "y").ints, (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(val(g, "y").elem_type, ir::kInt64);
  ModelBuilder e = single("Expand", {{"x", {3, 1}}}, {"x", "s"});
  test::int_constant(e, "s", {3}, {2, 1, 4});
  EXPECT_EQ(shape_of(load(e), "y"), "[2,3,4]");
  ModelBuilder p = single("Pad", {{"x", {1, 3, 4, 4}}}, {"x", "pads", "v"});
  test::int_constant(p, "pads", {8}, {0, 0, 1, 2, 0, 0, 3, 4});
  p.constant("v", {}, {0.5f});
  g = load(p);
  EXPECT_EQ(shape_of(g, "y"), "[1,3,8,10]");
  EXPECT_EQ(g.nodes[0].attr_float("value", 0), 0.5f);
  ModelBuilder refl = single("Pad", {{"x", {1, 3}}}, {"x", "pads"});
  test::int_constant(refl, "pads", {4}, {0, 1, 0, 1});
  test::set_string(the_node(refl), "mode", "reflect");
  EXPECT_EQ(error_of([&] { load(refl); }), "t.onnx: node 'n' (Pad): mode='reflect' is not supported (only 'constant')");
  ModelBuilder tl = single("Tile", {{"x", {2, 3}}}, {"x", "r"});
  test::int_constant(tl, "r", {2}, {3, 1});
  EXPECT_EQ(shape_of(load(tl), "y"), "[6,3]");
}

TEST(ShapeInference, ReshapeOfAComputedShapeNeedsAConstant) {
  ModelBuilder b;
  b.input("x", {2, 3}).input("s", {2}).output("y");
  test::set_input_type(b, "s", onnx::TensorProto_DataType_INT64);
  b.node("Reshape", "r", {"x", "s"}, {"y"});
  EXPECT_EQ(error_of([&] { load(b, {}); }),
            "t.onnx: node 'r' (Reshape): input 's' (shape) must be a constant (computed from shapes only)");
}

// ---- constant folding ----

// x[B,S,H] -> Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), Unsqueeze(Gather(Shape(x), 1)), [3], [H/3])):
// the multi-head split of a GPT-2/BERT export.
ModelBuilder gpt2_shape_subgraph() {
  ModelBuilder b;
  b.input("x", {"batch", "seq", 12}).output("y");
  test::int_constant(b, "i0", {}, {0});
  test::int_constant(b, "i1", {}, {1});
  test::int_constant(b, "ax0", {1}, {0});
  test::int_constant(b, "heads", {1}, {3});
  test::int_constant(b, "hd", {1}, {4});
  b.node("Shape", "shape", {"x"}, {"sh"});
  b.node("Gather", "g0", {"sh", "i0"}, {"b"});
  b.node("Gather", "g1", {"sh", "i1"}, {"s"});
  b.node("Unsqueeze", "u0", {"b", "ax0"}, {"bu"});
  b.node("Unsqueeze", "u1", {"s", "ax0"}, {"su"});
  test::set_int(b.node("Concat", "cat", {"bu", "su", "heads", "hd"}, {"shape4"}), "axis", 0);
  b.node("Reshape", "reshape", {"x", "shape4"}, {"r"});
  test::set_ints(b.node("Transpose", "tr", {"r"}, {"y"}), "perm", {0, 2, 1, 3});
  return b;
}

TEST(ConstFold, Gpt2ShapeSubgraphLeavesReshapeWithAConstantShape) {
  ir::Graph g = load(gpt2_shape_subgraph(), {{"x", {2, 5, 12}}});
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Reshape", "Transpose"}));
  expect_consistent(g);
  EXPECT_TRUE(val(g, "shape4").is_const);
  EXPECT_EQ(val(g, "shape4").ints, (std::vector<int64_t>{2, 5, 3, 4}));
  EXPECT_EQ(shape_of(g, "y"), "[2,3,5,4]");
  fold_constants(g);
  expect_consistent(g);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Reshape", "Transpose"}));
  EXPECT_EQ(g.value_index.count("sh"), 0u);  // unused values are gone
  EXPECT_EQ(g.values[g.nodes[0].inputs[1]].ints, (std::vector<int64_t>{2, 5, 3, 4}));
  EXPECT_EQ(g.values[g.outputs[0]].name, "y");
  EXPECT_EQ(g.values[g.outputs[0]].producer, 1);
}

// attn[1,2,S,S]; mask = bias[:, :, 0:S, 0:S] with bias a BOOL tril [1,1,8,8] and S from Shape(attn);
// y = Where(mask, attn, -10000): the GPT-2 causal mask.
TEST(ConstFold, CausalMaskFolds) {
  ModelBuilder b;
  b.input("attn", {1, 2, "seq", "seq"}).output("y");
  std::vector<int64_t> tril;
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) tril.push_back(j <= i);
  test::int_constant(b, "bias", {1, 1, 8, 8}, tril, onnx::TensorProto_DataType_UINT8);
  test::int_constant(b, "i3", {}, {3});
  test::int_constant(b, "ax0", {1}, {0});
  test::int_constant(b, "zeros", {2}, {0, 0});
  test::int_constant(b, "axes23", {2}, {2, 3});
  b.constant("neg", {}, {-10000.0f});
  b.node("Shape", "shape", {"attn"}, {"sh"});
  b.node("Gather", "g", {"sh", "i3"}, {"s"});
  b.node("Unsqueeze", "u", {"s", "ax0"}, {"su"});
  test::set_int(b.node("Concat", "cat", {"su", "su"}, {"ends"}), "axis", 0);
  b.node("Slice", "slice", {"bias", "zeros", "ends", "axes23"}, {"m8"});
  test::set_int(b.node("Cast", "cast", {"m8"}, {"mask"}), "to", onnx::TensorProto_DataType_BOOL);
  b.node("Where", "where", {"mask", "attn", "neg"}, {"y"});
  ir::Graph g = fold(b, {{"attn", {1, 2, 4, 4}}});
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Where"}));
  const ir::Value& mask = val(g, "mask");
  EXPECT_TRUE(mask.is_const);
  EXPECT_EQ(mask.elem_type, ir::kBool);
  EXPECT_EQ(ir::shape_str(mask), "[1,1,4,4]");
  EXPECT_EQ(mask.ints, (std::vector<int64_t>{1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1}));
}

// BERT's extended attention mask, constant: (1 - float(mask[:, None, None, :])) * -10000, exactly in float32.
TEST(ConstFold, AttentionMaskArithmeticIsFloat32) {
  ModelBuilder b;
  b.input("scores", {1, 2, 4, 4}).output("y");
  test::int_constant(b, "mask", {1, 4}, {1, 1, 1, 0});
  test::int_constant(b, "ax", {2}, {1, 2});
  b.constant("one", {}, {1.0f}).constant("big", {}, {-10000.0f}).constant("third", {}, {1.0f / 3});
  b.node("Unsqueeze", "u", {"mask", "ax"}, {"m4"});
  test::set_int(b.node("Cast", "c", {"m4"}, {"mf"}), "to", onnx::TensorProto_DataType_FLOAT);
  b.node("Sub", "sub", {"one", "mf"}, {"inv"});
  b.node("Mul", "mul", {"inv", "big"}, {"ext"});
  b.node("Div", "div", {"ext", "third"}, {"ext3"});
  b.node("Add", "add", {"scores", "ext3"}, {"y"});
  ir::Graph g = fold(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Add"}));
  const ir::Value& e = val(g, "ext3");
  EXPECT_EQ(ir::shape_str(e), "[1,1,1,4]");
  float want = (1.0f - 0.0f) * -10000.0f / (1.0f / 3);
  EXPECT_EQ(e.data, (std::vector<float>{0, 0, 0, want}));
  EXPECT_TRUE(std::signbit(e.data[0]));  // (1 - 1) * -10000 = -0
}

TEST(ConstFold, WhereEqualRangeConstantOfShapeExpandTile) {
  ModelBuilder b;
  b.input("x", {2, 3}).output("y");
  test::int_constant(b, "start", {}, {0});
  test::int_constant(b, "limit", {}, {3});
  test::int_constant(b, "delta", {}, {1});
  test::int_constant(b, "two", {1}, {2});
  test::int_constant(b, "shape23", {2}, {2, 3});
  test::int_constant(b, "rep", {1}, {2});
  b.constant("a", {1}, {1.5f}).constant("z", {1}, {-2.0f});
  b.node("Range", "range", {"start", "limit", "delta"}, {"r"});           // [0,1,2]
  b.node("Equal", "eq", {"r", "two"}, {"is2"});                          // [F,F,T]
  b.node("Where", "where", {"is2", "a", "z"}, {"w"});                     // [-2,-2,1.5]
  b.node("Expand", "expand", {"w", "shape23"}, {"we"});                   // [2,3]
  b.node("ConstantOfShape", "cos", {"two"}, {"c2"});                      // [0,0] float
  test::set_int(b.node("Cast", "castc", {"c2"}, {"c2i"}), "to", onnx::TensorProto_DataType_INT64);
  b.node("Tile", "tile", {"c2i", "rep"}, {"tiled"});                      // [0,0,0,0]
  b.node("Add", "add", {"x", "we"}, {"y"});
  b.node("Identity", "keep_tiled", {"tiled"}, {"unused"});
  ir::Graph g = load(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Add"}));
  EXPECT_EQ(val(g, "we").data, (std::vector<float>{-2, -2, 1.5f, -2, -2, 1.5f}));
  EXPECT_EQ(val(g, "is2").ints, (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(val(g, "tiled").ints, (std::vector<int64_t>{0, 0, 0, 0}));
  EXPECT_EQ(shape_of(g, "tiled"), "[4]");
}

// Rotary-embedding tables from constants: angles = Range * inv_freq, cos and sin of them, fold on the host with the
// vector unit's own functions (isa/numerics.h, bit for bit what vpu.cos/vpu.sin give), and so do Log, the roundings,
// Sign, Softplus and Mish (these two in double, rounded once) of constants.
TEST(ConstFold, RotaryTablesAndMathFunctionsFold) {
  ModelBuilder b;
  b.input("x", {4, 2}).output("y").output("z");
  test::int_constant(b, "start", {}, {0});
  test::int_constant(b, "limit", {}, {4});
  test::int_constant(b, "delta", {}, {1});
  b.constant("inv", {1, 2}, {1.0f, 0.01f});
  b.constant("v", {1, 2}, {-2.5f, 0.5f});
  test::int_constant(b, "ax", {1}, {1});
  b.node("Range", "range", {"start", "limit", "delta"}, {"p"});  // [0, 1, 2, 3]
  test::set_int(b.node("Cast", "cast", {"p"}, {"pf"}), "to", onnx::TensorProto_DataType_FLOAT);
  b.node("Unsqueeze", "u", {"pf", "ax"}, {"pc"});
  b.node("Mul", "ang", {"pc", "inv"}, {"a"});  // [4, 2]
  b.node("Cos", "cos", {"a"}, {"c"});
  b.node("Sin", "sin", {"a"}, {"s"});
  b.node("Mul", "xc", {"x", "c"}, {"t"});
  b.node("Mul", "y", {"t", "s"}, {"y"});
  b.node("Round", "round", {"v"}, {"r"});
  b.node("Floor", "floor", {"r"}, {"f"});
  b.node("Ceil", "ceil", {"v"}, {"ce"});
  b.node("Sign", "sign", {"ce"}, {"sg"});
  b.node("Softplus", "sp", {"sg"}, {"spv"});
  b.node("Mish", "mish", {"spv"}, {"mv"});
  b.node("Log", "log", {"mv"}, {"lg"});
  b.node("Add", "z", {"x", "lg"}, {"z"});
  ir::Graph g = fold(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Mul", "Mul", "Add"}));
  ir::Graph g2 = load(b);
  const ir::Value &c = val(g2, "c"), &sn = val(g2, "s");
  ASSERT_TRUE(c.is_const && sn.is_const);
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 2; ++j) {
      const float a = static_cast<float>(i) * (j == 0 ? 1.0f : 0.01f);
      EXPECT_EQ(c.data[i * 2 + j], isa::vpu_cos(a)) << i << "," << j;
      EXPECT_EQ(sn.data[i * 2 + j], isa::vpu_sin(a)) << i << "," << j;
      EXPECT_NEAR(c.data[i * 2 + j], std::cos(static_cast<double>(a)), 6e-8);
    }
  EXPECT_EQ(val(g2, "r").data, (std::vector<float>{-2, 0}));   // ties to even; round(0.5) = +0
  EXPECT_EQ(val(g2, "f").data, (std::vector<float>{-2, 0}));
  EXPECT_EQ(val(g2, "ce").data, (std::vector<float>{-2, 1}));
  EXPECT_EQ(val(g2, "sg").data, (std::vector<float>{-1, 1}));
  const double sp0 = std::log1p(std::exp(-1.0)), sp1 = 1 + std::log1p(std::exp(-1.0));  // softplus(-1), (1)
  EXPECT_EQ(val(g2, "spv").data, (std::vector<float>{static_cast<float>(sp0), static_cast<float>(sp1)}));
  const float m0 = val(g2, "mv").data[0];  // mish of the f32 softplus(-1)
  const double s0 = static_cast<double>(static_cast<float>(sp0));
  EXPECT_EQ(m0, static_cast<float>(s0 * std::tanh(std::log1p(std::exp(s0)))));
  EXPECT_EQ(val(g2, "lg").data[0], isa::vpu_log(m0));
}

TEST(ConstFold, GatherSliceTransposeConcatSplitOnHost) {
  ModelBuilder b;
  b.input("x", {3, 2}).output("y");
  b.constant("m", {2, 3}, {1, 2, 3, 4, 5, 6});
  test::int_constant(b, "idx", {2}, {-1, 0});
  test::int_constant(b, "st", {1}, {-1});
  test::int_constant(b, "en", {1}, {INT64_MIN});
  test::int_constant(b, "ax", {1}, {1});
  test::int_constant(b, "stp", {1}, {-1});
  test::int_constant(b, "sp", {2}, {1, 2});
  test::set_int(b.node("Gather", "ga", {"m", "idx"}, {"g"}), "axis", 1);  // [[3,1],[6,4]]
  b.node("Slice", "sl", {"m", "st", "en", "ax", "stp"}, {"rev"});          // [[3,2,1],[6,5,4]]
  b.node("Transpose", "tr", {"rev"}, {"t"});                               // [[3,6],[2,5],[1,4]]
  onnx::NodeProto* split = b.node("Split", "split", {"t", "sp"}, {"s1", "s2"});  // [[3,6]] / [[2,5],[1,4]]
  (void)split;
  test::set_int(b.node("Concat", "cat", {"s2", "s1"}, {"c"}), "axis", 0);  // [[2,5],[1,4],[3,6]]
  b.node("Mul", "mul", {"x", "c"}, {"y"});
  ir::Graph g = fold(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Mul"}));
  EXPECT_EQ(g.values[g.nodes[0].inputs[1]].data, (std::vector<float>{2, 5, 1, 4, 3, 6}));
  ir::Graph g2 = load(b);
  EXPECT_EQ(val(g2, "g").data, (std::vector<float>{3, 1, 6, 4}));
}

// LLaMA's rotary tables built in the graph, as torch exports them: inv_freq = 1 / base^(Range(0, D, 2) / D),
// positions Range(0, T), freqs = MatMul(inv_freq[:, None], positions[None, :]) transposed, emb = Concat(freqs,
// freqs), then Cos and Sin. Everything is constant, so all of it folds and x * cos + x * sin is what is left; the
// expected tables are computed here in double precision.
TEST(ConstFold, RotaryTablesFoldAway) {
  constexpr int64_t T = 5, D = 8;
  ModelBuilder b;
  b.input("x", {T, D}).output("y");
  test::int_constant(b, "zero", {}, {0});
  test::int_constant(b, "two", {}, {2});
  test::int_constant(b, "one", {}, {1});
  test::int_constant(b, "dim", {}, {D});
  test::int_constant(b, "len", {}, {T});
  test::int_constant(b, "ax0", {1}, {0});
  test::int_constant(b, "ax1", {1}, {1});
  b.constant("base", {}, {10000.0f}).constant("dimf", {}, {static_cast<float>(D)}).constant("onef", {}, {1.0f});
  b.node("Range", "r_even", {"zero", "dim", "two"}, {"even"});                                   // [0,2,4,6]
  test::set_int(b.node("Cast", "c_even", {"even"}, {"evenf"}), "to", onnx::TensorProto_DataType_FLOAT);
  b.node("Div", "div", {"evenf", "dimf"}, {"expo"});
  b.node("Pow", "pow", {"base", "expo"}, {"p"});
  b.node("Div", "inv", {"onef", "p"}, {"inv_freq"});                                             // [D/2]
  b.node("Range", "r_pos", {"zero", "len", "one"}, {"pos"});                                     // [0..T)
  test::set_int(b.node("Cast", "c_pos", {"pos"}, {"posf"}), "to", onnx::TensorProto_DataType_FLOAT);
  b.node("Unsqueeze", "u_inv", {"inv_freq", "ax1"}, {"inv_col"});                                // [D/2, 1]
  b.node("Unsqueeze", "u_pos", {"posf", "ax0"}, {"pos_row"});                                    // [1, T]
  b.node("MatMul", "outer", {"inv_col", "pos_row"}, {"f"});                                      // [D/2, T]
  b.node("Transpose", "tr", {"f"}, {"freqs"});                                                   // [T, D/2]
  test::set_int(b.node("Concat", "cat", {"freqs", "freqs"}, {"emb"}), "axis", 1);                // [T, D]
  b.node("Cos", "cos", {"emb"}, {"cos_t"});
  b.node("Sin", "sin", {"emb"}, {"sin_t"});
  b.node("Mul", "mc", {"x", "cos_t"}, {"xc"});
  b.node("Mul", "ms", {"x", "sin_t"}, {"xs"});
  b.node("Add", "add", {"xc", "xs"}, {"y"});
  ir::Graph g = fold(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Mul", "Mul", "Add"}));
  const ir::Value& c = val(g, "cos_t");
  const ir::Value& s = val(g, "sin_t");
  ASSERT_TRUE(c.is_const && s.is_const);
  EXPECT_EQ(ir::shape_str(c), "[5,8]");
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < D; ++d) {
      const double inv = 1.0 / std::pow(10000.0, static_cast<double>(2 * (d % (D / 2))) / D);
      EXPECT_NEAR(c.data[t * D + d], std::cos(t * inv), 1e-6) << t << "," << d;
      EXPECT_NEAR(s.data[t * D + d], std::sin(t * inv), 1e-6) << t << "," << d;
    }
}

// Functions of constants fold (Log, Exp, Neg, Expand, Tile and a batched MatMul with a broadcast operand and a
// 1-D one), checked against values computed here.
TEST(ConstFold, FunctionsTilesAndBatchedMatMulOfConstants) {
  ModelBuilder b;
  b.input("x", {2, 2, 3}).output("y");
  b.constant("a", {2, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8}).constant("m", {2, 3}, {1, 0, -1, 2, 1, 0});
  b.constant("v", {2}, {0.5f, 4.0f});
  test::int_constant(b, "rep", {2}, {1, 2});
  test::int_constant(b, "shp", {3}, {2, 2, 3});
  b.node("MatMul", "bmm", {"a", "m"}, {"am"});      // [2,2,3]: each [2,2] batch times the shared [2,3]
  b.node("MatMul", "vec", {"v", "m"}, {"vm"});      // [3]: 1-D left operand
  b.node("Log", "log", {"v"}, {"lv"});              // [log 0.5, log 4]
  b.node("Exp", "exp", {"lv"}, {"ev"});             // back to [0.5, 4]
  b.node("Neg", "neg", {"ev"}, {"nv"});
  b.node("Tile", "tile", {"m", "rep"}, {"mt"});     // [2,6]
  b.node("Expand", "exp_vm", {"vm", "shp"}, {"vme"});
  b.node("Add", "s1", {"am", "vme"}, {"c1"});
  b.node("Add", "y", {"x", "c1"}, {"y"});
  ir::Graph g = load(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"Add"}));
  // am[b] = a[b] @ m: a[0] = [[1,2],[3,4]] -> [[5,2,-1],[11,4,-3]]; a[1] = [[5,6],[7,8]] -> [[17,6,-5],[23,8,-7]].
  EXPECT_EQ(val(g, "am").data, (std::vector<float>{5, 2, -1, 11, 4, -3, 17, 6, -5, 23, 8, -7}));
  EXPECT_EQ(shape_of(g, "vm"), "[3]");
  EXPECT_EQ(val(g, "vm").data, (std::vector<float>{8.5f, 4, -0.5f}));  // [0.5, 4] @ m
  EXPECT_NEAR(val(g, "lv").data[0], std::log(0.5), 1e-7);
  EXPECT_NEAR(val(g, "nv").data[1], -4.0, 1e-6);
  EXPECT_EQ(val(g, "mt").data, (std::vector<float>{1, 0, -1, 1, 0, -1, 2, 1, 0, 2, 1, 0}));
}

// ArgMax/ArgMin (select_last_index), CumSum (exclusive, reverse), DepthToSpace (DCR, CRD) and SpaceToDepth of
// constants fold on the host; the expected values are worked out by hand.
// Integer arithmetic of constants past int64 is an error naming the node and the operands, not undefined
// behaviour (fuzz_onnx found 7596446671467184128 * 7596446671467184128 in a shape subgraph; a reproducer is
// make_onnx_seeds.py's regress_int64_mul_overflow_in_folding seed). In range, the results are exact, also
// where a double would round (2^62 + 1).
TEST(ConstFold, IntegerOverflowIsAnErrorNotUndefinedBehaviour) {
  const int64_t big = int64_t{1} << 62, min = std::numeric_limits<int64_t>::min();
  struct Case {
    const char* op;
    int64_t a, b;
    std::string error;  // "" : folds
    int64_t result = 0;
  };
  const std::vector<Case> cases = {
      {"Mul", big, 4, "4611686018427387904 Mul 4 is outside the range of int64"},
      {"Add", big, big, "4611686018427387904 Add 4611686018427387904 is outside the range of int64"},
      {"Sub", min, 1, "-9223372036854775808 Sub 1 is outside the range of int64"},
      {"Div", min, -1, "-9223372036854775808 Div -1 is outside the range of int64"},
      {"Pow", 2, 63, "2 Pow 63 is outside the range of int64"},
      {"Add", big, 1, "", big + 1},
      {"Mul", -big, 2, "", min},
      {"Pow", 2, 62, "", big},
      {"Div", min, 2, "", min / 2},
  };
  for (const Case& c : cases) {
    ModelBuilder b;
    b.input("x", {1}).output("y");
    test::int_constant(b, "a", {1}, {c.a});
    test::int_constant(b, "b", {1}, {c.b});
    b.node(c.op, "fold", {"a", "b"}, {"r"});
    b.node("Identity", "", {"x"}, {"y"});
    if (c.error.empty()) {
      ir::Graph g = load(b);
      EXPECT_EQ(val(g, "r").ints, (std::vector<int64_t>{c.result})) << c.op << " " << c.a << " " << c.b;
    } else {
      EXPECT_EQ(error_of([&] { load(b); }),
                "t.onnx: node 'fold' (" + std::string(c.op) + "): integer overflow in constant folding: " + c.error)
          << c.op;
    }
  }
}

TEST(ConstFold, ArgCumSumAndDepthToSpaceOfConstants) {
  ModelBuilder b;
  b.input("x", {2, 3}).output("y");
  b.constant("c", {2, 3}, {3, 1, 3, 0, 5, 5});
  b.constant("d", {1, 8, 1, 1}, {0, 1, 2, 3, 4, 5, 6, 7});
  test::int_constant(b, "one", {}, {1});
  auto arg = [&](const char* op, const char* out, int64_t axis, int64_t last) {
    onnx::NodeProto* n = b.node(op, out, {"c"}, {out});
    test::set_int(n, "axis", axis);
    test::set_int(n, "keepdims", 0);
    test::set_int(n, "select_last_index", last);
  };
  arg("ArgMax", "amax", 1, 0);       // rows [3,1,3], [0,5,5]: first maxima at 0 and 1
  arg("ArgMax", "amax_last", 1, 1);  // last maxima at 2 and 2
  arg("ArgMin", "amin", 0, 0);       // columns (3,0), (1,5), (3,5): 1, 0, 0
  b.node("CumSum", "cs", {"c", "one"}, {"cs"});
  test::set_int(b.node("CumSum", "cs_excl", {"c", "one"}, {"cs_excl"}), "exclusive", 1);
  test::set_int(b.node("CumSum", "cs_rev", {"c", "one"}, {"cs_rev"}), "reverse", 1);
  test::set_int(b.node("DepthToSpace", "dcr", {"d"}, {"dcr"}), "blocksize", 2);
  onnx::NodeProto* crd = b.node("DepthToSpace", "crd", {"d"}, {"crd"});
  test::set_int(crd, "blocksize", 2);
  test::set_string(crd, "mode", "CRD");
  test::set_int(b.node("SpaceToDepth", "s2d", {"dcr"}, {"s2d"}), "blocksize", 2);
  b.node("Add", "add", {"x", "cs"}, {"y"});
  ir::Graph g = load(b);
  EXPECT_EQ(val(g, "amax").ints, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(val(g, "amax_last").ints, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(val(g, "amin").ints, (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(val(g, "amin").elem_type, ir::kInt64);
  EXPECT_EQ(val(g, "cs").data, (std::vector<float>{3, 4, 7, 0, 5, 10}));
  EXPECT_EQ(val(g, "cs_excl").data, (std::vector<float>{0, 3, 4, 0, 0, 5}));
  EXPECT_EQ(val(g, "cs_rev").data, (std::vector<float>{7, 4, 3, 10, 10, 5}));
  // DCR: y[c, i, j] = x[(i*2 + j)*2 + c]; CRD: x[c*4 + i*2 + j]; SpaceToDepth undoes DCR.
  EXPECT_EQ(shape_of(g, "dcr"), "[1,2,2,2]");
  EXPECT_EQ(val(g, "dcr").data, (std::vector<float>{0, 2, 4, 6, 1, 3, 5, 7}));
  EXPECT_EQ(val(g, "crd").data, (std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(val(g, "s2d").data, val(g, "d").data);
}

// Einsum becomes the operators the lowering has, right after its shape inference: attention's scores a Transpose
// of the last two axes and a MatMul, a batched matmul one MatMul, a sum a ReduceSum, an elementwise product a Mul.
TEST(ShapeInference, EinsumExpands) {
  auto expand = [](const std::string& eq, std::vector<std::vector<int64_t>> shapes) {
    ModelBuilder b;
    std::vector<std::string> ins;
    for (size_t k = 0; k < shapes.size(); ++k) {
      ins.push_back("in" + std::to_string(k));
      std::vector<test::D> dims(shapes[k].begin(), shapes[k].end());
      b.input(ins.back(), dims);
    }
    b.output("y");
    test::set_string(b.node("Einsum", "e", ins, {"y"}), "equation", eq);
    ir::Graph g = fold(b);
    return std::make_pair(ops_of(g), shape_of(g, "y"));
  };
  using Ops = std::vector<std::string>;
  EXPECT_EQ(expand("bhqd,bhkd->bhqk", {{2, 3, 5, 8}, {2, 3, 6, 8}}), std::make_pair(Ops{"Transpose", "MatMul"}, std::string("[2,3,5,6]")));
  EXPECT_EQ(expand("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}), std::make_pair(Ops{"MatMul"}, std::string("[2,3,5]")));
  EXPECT_EQ(expand("bij->bi", {{2, 3, 4}}), std::make_pair(Ops{"ReduceSum"}, std::string("[2,3]")));
  EXPECT_EQ(expand("ij->ji", {{2, 3}}), std::make_pair(Ops{"Transpose"}, std::string("[3,2]")));
  EXPECT_EQ(expand("bij,bij->bi", {{2, 3, 4}, {2, 3, 4}}), std::make_pair(Ops{"Mul", "ReduceSum"}, std::string("[2,3]")));
  EXPECT_EQ(expand("ab,bc,cd->ad", {{2, 3}, {3, 4}, {4, 5}}), std::make_pair(Ops{"MatMul", "MatMul"}, std::string("[2,5]")));
  EXPECT_EQ(expand("...ij,...jk", {{7, 2, 3}, {7, 3, 4}}), std::make_pair(Ops{"MatMul"}, std::string("[7,2,4]")));
  EXPECT_EQ(expand("ij,jk->ki", {{2, 3}, {3, 4}}), std::make_pair(Ops{"MatMul", "Transpose"}, std::string("[4,2]")));
}

TEST(ConstFold, IdentityDropoutAndDeadCodeAreRemoved) {
  ModelBuilder b;
  b.input("x", {2, 3}).output("y").output("z").output("passthrough");
  b.constant("w", {3, 3}, test::ramp(9));
  b.node("Identity", "id1", {"x"}, {"xi"});
  b.node("MatMul", "mm", {"xi", "w"}, {"h"});
  b.node("Dropout", "drop", {"h"}, {"hd"});
  b.node("Relu", "relu", {"hd"}, {"r"});
  b.node("Identity", "id_out", {"r"}, {"y"});           // a graph output: relu writes "y" directly
  b.node("Relu", "relu2", {"y"}, {"z"});                // reads the output through the rename
  b.node("Identity", "id_in_out", {"x"}, {"passthrough"});  // input -> output: kept
  b.node("Sigmoid", "dead1", {"h"}, {"d1"});
  b.node("Tanh", "dead2", {"d1"}, {"d2"});
  ir::Graph g = fold(b);
  EXPECT_EQ(ops_of(g), (std::vector<std::string>{"MatMul", "Relu", "Relu", "Identity"}));
  EXPECT_EQ(g.values[g.nodes[0].inputs[0]].name, "x");
  EXPECT_EQ(g.values[g.nodes[1].inputs[0]].name, "h");
  EXPECT_EQ(g.values[g.nodes[1].outputs[0]].name, "y");
  EXPECT_EQ(g.values[g.nodes[2].inputs[0]].name, "y");
  EXPECT_EQ(g.values[g.outputs[0]].producer, 1);
  EXPECT_EQ(g.value_index.count("d2"), 0u);
  EXPECT_EQ(g.value_index.count("r"), 0u);
}

// ---- GELU chains ----

// 0.5 x (1 + erf(x / sqrt2)) or 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) over x [4, 8], as `form` writes it:
//   "div" x / 1.4142135, then (x * a) * 0.5          "mul" x * 0.70710677, 1 + e, x * (a * 0.5)
//   "half_first" (x * 0.5) * a                     "tanh_pow" Pow(x, 3)        "tanh_cube" (x * x) * x
// with `half` in place of 0.5, and `extra` ("erf_out", "bcast") making it something that must not fuse.
ModelBuilder gelu_chain(const std::string& form, float half = 0.5f, const std::string& extra = "") {
  ModelBuilder b;
  b.input("x", {4, 8}).output("y");
  if (extra == "erf_out") b.output("e");
  b.constant("sqrt2", {}, {1.4142135f}).constant("rsqrt2", {}, {0.70710677f}).constant("one", {}, {1.0f});
  b.constant("half", extra == "bcast" ? std::vector<int64_t>{2, 4, 8} : std::vector<int64_t>{},
             std::vector<float>(extra == "bcast" ? 64 : 1, half));
  b.constant("k", {}, {0.7978846f}).constant("c", {}, {0.044715f}).constant("three", {}, {3.0f});
  std::string a = "a";
  if (form.rfind("tanh", 0) == 0) {
    if (form == "tanh_pow") {
      b.node("Pow", "pow", {"x", "three"}, {"x3"});
    } else {
      b.node("Mul", "sq", {"x", "x"}, {"x2"});
      b.node("Mul", "cube", {"x2", "x"}, {"x3"});
    }
    b.node("Mul", "cx3", {"c", "x3"}, {"t"});
    b.node("Add", "inner", {"t", "x"}, {"u"});
    b.node("Mul", "scale", {"u", "k"}, {"v"});
    b.node("Tanh", "tanh", {"v"}, {"e"});
    b.node("Add", "add1", {"e", "one"}, {"a"});
  } else {
    if (form == "mul") b.node("Mul", "div", {"rsqrt2", "x"}, {"d"});
    else b.node("Div", "div", {"x", "sqrt2"}, {"d"});
    b.node("Erf", "erf", {"d"}, {"e"});
    if (form == "mul") b.node("Add", "add1", {"one", "e"}, {"a"});
    else b.node("Add", "add1", {"e", "one"}, {"a"});
  }
  if (form == "mul") {
    b.node("Mul", "ahalf", {"a", "half"}, {"h"});
    b.node("Mul", "last", {"x", "h"}, {"y"});
  } else if (form == "half_first") {
    b.node("Mul", "xhalf", {"half", "x"}, {"h"});
    b.node("Mul", "last", {"a", "h"}, {"y"});
  } else {
    b.node("Mul", "xa", {"a", "x"}, {"m"});
    b.node("Mul", "last", {"m", "half"}, {"y"});
  }
  return b;
}

ir::Graph fused(const ModelBuilder& b) {
  ir::Graph g = load(b);
  fold_constants(g);
  fuse_gelu(g);
  return g;
}

TEST(FuseGelu, ExportedErfAndTanhChainsBecomeOneGeluNode) {
  const std::map<std::string, std::pair<std::string, std::string>> cases = {
      {"div", {"none", "div+erf+add1+xa+last"}},
      {"mul", {"none", "div+erf+add1+ahalf+last"}},
      {"half_first", {"none", "div+erf+add1+xhalf+last"}},
      {"tanh_pow", {"tanh", "pow+cx3+inner+scale+tanh+add1+xa+last"}},
      {"tanh_cube", {"tanh", "sq+cube+cx3+inner+scale+tanh+add1+xa+last"}}};
  for (const auto& [form, want] : cases) {
    SCOPED_TRACE(form);
    ir::Graph g = fused(gelu_chain(form));
    ASSERT_EQ(ops_of(g), (std::vector<std::string>{"Gelu"}));
    const ir::Node& n = g.nodes[0];
    EXPECT_EQ(n.attrs.at("approximate").s, want.first);
    EXPECT_EQ(n.name, want.second);  // the compile report's node label names the nodes it replaced
    EXPECT_EQ(g.values[n.inputs.at(0)].name, "x");
    EXPECT_EQ(g.values[n.outputs.at(0)].name, "y");
    EXPECT_EQ(g.values[g.outputs[0]].producer, 0);
  }
}

TEST(FuseGelu, ChainsThatAreNotExactlyGeluStayAsTheyAre) {
  // another constant (0.6 x (...)), an intermediate the model also outputs, a constant that broadcasts x
  EXPECT_EQ(ops_of(fused(gelu_chain("div", 0.6f))).size(), 5u);
  EXPECT_EQ(ops_of(fused(gelu_chain("div", 0.5f, "erf_out"))).size(), 5u);
  EXPECT_EQ(ops_of(fused(gelu_chain("half_first", 0.5f, "bcast"))).size(), 5u);
  EXPECT_EQ(ops_of(fused(gelu_chain("tanh_pow", 0.5f, "erf_out"))).size(), 8u);
}

// ---- errors ----

TEST(Errors, UnsupportedOperatorNamesOpNodeAndModel) {
  ModelBuilder b = single("NonMaxSuppression", {{"x", {1, 4}}});
  EXPECT_EQ(error_of([&] { load(b); }), "t.onnx: node 'n' (NonMaxSuppression): unsupported operator");
}

TEST(Errors, UnsupportedAttributesNameTheNode) {
  ModelBuilder b = single("Relu", {{"x", {1, 4}}});
  test::set_int(the_node(b), "bogus", 1);
  EXPECT_EQ(error_of([&] { load(b); }), "t.onnx: node 'n' (Relu): attribute 'bogus' is not supported");
  ModelBuilder k = single("Softmax", {{"x", {1, 4}}});
  test::set_float(the_node(k), "axis", 1);
  EXPECT_EQ(error_of([&] { load(k); }), "t.onnx: node 'n' (Softmax): attribute 'axis' must be an int");
  ModelBuilder bn = single("BatchNormalization", {{"x", {2, 3}}, {"s", {3}}, {"b", {3}}, {"m", {3}}, {"v", {3}}});
  test::set_int(the_node(bn), "training_mode", 1);
  EXPECT_EQ(error_of([&] { load(bn); }), "t.onnx: node 'n' (BatchNormalization): training_mode=1 is not supported (inference only)");
  ModelBuilder ge = single("Gelu", {{"x", {1, 4}}});
  test::set_string(the_node(ge), "approximate", "fast");
  EXPECT_EQ(error_of([&] { load(ge); }), "t.onnx: node 'n' (Gelu): approximate='fast' is not supported");
}

TEST(Errors, DynamicInputDimensionNeedsItsShape) {
  EXPECT_EQ(error_of([&] { load(gpt2_shape_subgraph()); }),
            "t.onnx: input 'x' has a dynamic dimension 'batch': give its shape");
}

}  // namespace
}  // namespace tpusim::compiler
