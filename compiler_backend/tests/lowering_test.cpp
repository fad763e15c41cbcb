// The lowering (lower.h): which kernels each operator becomes, with the numbers that decide their cost (im2col
// moves, virtual widths, gemm sizes), and its errors. Numerical results are checked end to end against PyTorch
// (validation/system/test_ops.py, test_workloads.py); here the plan itself.
#include <gtest/gtest.h>

#include <cstring>

#include "const_fold.h"
#include "lower.h"
#include "merge_casts.h"
#include "onnx_import.h"
#include "onnx_models.h"
#include "shape_inference.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {
namespace {

using test::ModelBuilder;

Options chip() {
  Options o;
  o.target.symbols = {{"MXU_ROWS", 128}, {"MXU_COLS", 128}, {"ACC_ROWS", 2048},
                      {"VMEM_BYTES", 16 << 20}, {"VPU_WIDTH", 1024}, {"HBM_BYTES", int64_t{1} << 30}};
  return o;
}

KernelPlan plan_of(ModelBuilder& b, const Options& o = chip()) {
  ir::Graph g = import_onnx(b.bytes(), "m.onnx");
  infer_shapes(g, o.input_shapes);
  fold_constants(g);
  return lower(g, o);
}

std::string error_of(ModelBuilder& b, const Options& o = chip()) {
  try {
    plan_of(b, o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::vector<const KernelCall*> calls(const KernelPlan& p, const std::string& kernel) {
  std::vector<const KernelCall*> out;
  for (const KernelCall& c : p.calls)
    if (c.kernel == kernel) out.push_back(&c);
  return out;
}

ModelBuilder conv_model(std::vector<int64_t> x, int64_t oc, int64_t k, int64_t stride, int64_t pad, int64_t group = 1) {
  ModelBuilder b;
  b.input("x", {x[0], x[1], x[2], x[3]}).output("y");
  b.constant("w", {oc, x[1] / group, k, k}, test::ramp(static_cast<size_t>(oc * x[1] / group * k * k)));
  onnx::NodeProto* n = b.node("Conv", "conv", {"x", "w"}, {"y"});
  test::set_ints(n, "strides", {stride, stride});
  test::set_ints(n, "pads", {pad, pad, pad, pad});
  test::set_int(n, "group", group);
  return b;
}

// 3x3, stride 1, pad 1 on [1,8,6,6] (rows of 8 bf16 channels, 16 bytes: the taps are copied, ops_conv.cpp
// window_tap_rows): the padded input is [8, 8] (Wv = Wp = 8), so the virtual output rows are OH * Wv = 6 * 8 = 48
// (2 overhanging columns per row); the 3 taps of a kernel row are adjacent in it, so each kernel row is one move of
// 48 rows of 3 x 8 channels (48 bytes), read 16 bytes apart (a stride) and written 9 * 16 bytes apart (a row of the
// im2col matrix, columns (kh, kw, c)).
TEST(LowerConv, Stride1KernelRowsAreOneMoveEachOverVirtualRows) {
  ModelBuilder b = conv_model({1, 8, 6, 6}, 16, 3, 1, 1);
  KernelPlan p = plan_of(b);
  auto gemms = calls(p, "gemm.s");
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0]->params.at("M"), 48);
  EXPECT_EQ(gemms[0]->params.at("K"), 72);
  EXPECT_EQ(gemms[0]->params.at("N"), 16);
  EXPECT_EQ(gemms[0]->flops, 2.0 * 36 * 72 * 16);  // the real output positions only
  int rows = 0;
  for (const KernelCall* c : calls(p, "copy"))
    for (const BufferMove& m : c->moves)
      if (m.rows == 48 && m.rowbytes == 48 && m.dst_stride == 9 * 16) {
        EXPECT_EQ(m.src_stride, 16);
        EXPECT_EQ(m.dst_off % 48, 0u);  // kernel row i at column 3 * i
        ++rows;
      }
  EXPECT_EQ(rows, 3);
  // the overhanging columns are dropped by one move: 6 rows of OW * OC bf16, 8 * OC apart
  bool dropped = false;
  for (const KernelCall* c : calls(p, "copy"))
    for (const BufferMove& m : c->moves)
      dropped = dropped || (m.rows == 6 && m.rowbytes == 6 * 16 * 2 && m.src_stride == 8 * 16 * 2);
  EXPECT_TRUE(dropped);
}

// Stride 2, pad 1 on [1,4,7,7]: the padded 9x9 input split into two phases of rows (even and odd padded rows),
// each 5 rows of Wp = 10 columns (Wv = 5 strides of 2; Hq = 5), each filled by one move of the input's rows
// (input rows 1, 3, 5 into phase 0, rows 0, 2, 4, 6 into phase 1: rows of 7 pixels, two input rows apart); kernel
// row i reads phase i % 2 from row i / 2, its 3 taps one run of 3 x 4 channels (24 bytes) every 2 columns (16
// bytes); OH = 4 and Wv = 5, so 20 virtual rows.
TEST(LowerConv, Stride2SplitsThePaddedInputIntoPhasesOfRows) {
  ModelBuilder b = conv_model({1, 4, 7, 7}, 8, 3, 2, 1);
  KernelPlan p = plan_of(b);
  auto gemms = calls(p, "gemm.s");
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0]->params.at("M"), 20);
  int rows = 0, input_rows = 0;
  for (const KernelCall* c : calls(p, "copy"))
    for (const BufferMove& m : c->moves) {
      if (m.rows == 20 && m.rowbytes == 24 && m.dst_stride == 9 * 8) {
        EXPECT_EQ(m.src_stride, 16);
        ++rows;
      }
      if (m.rowbytes == 7 * 8 && m.src_stride == 2 * 7 * 8 && m.dst_stride == 10 * 8) input_rows += static_cast<int>(m.rows);
    }
  EXPECT_EQ(rows, 3);
  EXPECT_EQ(input_rows, 7);  // every input row once, in two moves
  const Buffer* phases = nullptr;
  for (const Buffer& buf : p.buffers)
    if (buf.name == "conv.padded") phases = &buf;
  ASSERT_NE(phases, nullptr);
  EXPECT_EQ(phases->shape, (std::vector<int64_t>{2, 1, 5, 10, 4}));
}

// Stride 2, pad 1, 32 channels (rows of 64 bytes: the gemm reads the taps in place, implicit_im2col) on
// [1,32,8,8]: the same phases of rows, read at a pitch of 2 rows (TAP_PITCH): one phase across (TAP_SW 1), a phase
// row the padded row of Wp = 10 pixels (TAP_WQ), 2 x 5 x 10 pixels in all, 4 x 5 = 20 virtual rows.
TEST(LowerConv, Stride2TapsReadInPlaceAtAPitchOfTwoRows) {
  ModelBuilder b = conv_model({1, 32, 8, 8}, 16, 3, 2, 1);
  KernelPlan p = plan_of(b);
  auto gemms = calls(p, "gemm.s");
  ASSERT_EQ(gemms.size(), 1u);
  const auto& q = gemms[0]->params;
  EXPECT_EQ(q.at("M"), 20);
  EXPECT_EQ(q.at("TAP_CIN"), 32);
  EXPECT_EQ(q.at("TAP_PITCH"), 2);
  EXPECT_EQ(q.at("TAP_SH"), 2);
  EXPECT_EQ(q.at("TAP_SW"), 1);
  EXPECT_EQ(q.at("TAP_WQ"), 10);
  EXPECT_EQ(q.at("TAP_PHASE_ROWS"), 50);
  EXPECT_GE(q.at("TAP_ROWS"), 100);
}

// A 1x1 stride-1 convolution reads the NHWC activation as its matrix: no im2col.
TEST(LowerConv, Pointwise1x1IsAGemmOnTheActivation) {
  ModelBuilder b = conv_model({2, 16, 5, 5}, 32, 1, 1, 0);
  KernelPlan p = plan_of(b);
  auto gemms = calls(p, "gemm.s");
  ASSERT_EQ(gemms.size(), 1u);
  EXPECT_EQ(gemms[0]->params.at("M"), 50);
  EXPECT_EQ(gemms[0]->params.at("K"), 16);
  for (const Buffer& buf : p.buffers) EXPECT_EQ(buf.name.find("im2col"), std::string::npos) << buf.name;
  EXPECT_EQ(gemms[0]->tensors.at("a"), calls(p, "copy")[0]->moves[0].dst);  // the NHWC copy of x itself
}

// Depthwise: a row-wise kernel summing tap x weight (9 taps: 9 tap inputs and 9 weight vectors), no gemm.
TEST(LowerConv, DepthwiseRunsOnTheVectorUnit) {
  ModelBuilder b = conv_model({1, 8, 6, 6}, 8, 3, 1, 1, 8);
  KernelPlan p = plan_of(b);
  EXPECT_TRUE(calls(p, "gemm.s").empty());
  auto rows = calls(p, "rowwise");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]->rows.inputs.size(), 18u);
  int weights = 0;
  for (const kernels::rowwise::Input& in : rows[0]->rows.inputs) weights += in.period == 1;
  EXPECT_EQ(weights, 9);
}

ModelBuilder matmul_model(int64_t m, int64_t k, int64_t n) {
  ModelBuilder b;
  b.input("x", {m, k}).output("y");
  b.constant("w", {k, n}, test::ramp(static_cast<size_t>(k * n)));
  b.node("MatMul", "mm", {"x", "w"}, {"y"});
  return b;
}

// One row: w^T [N, K] streams through the vector unit (multiply by x, sum each row); two rows: the MXU.
TEST(LowerMatMul, OneRowIsAGemvOnTheVectorUnit) {
  ModelBuilder one = matmul_model(1, 64, 300);
  KernelPlan p = plan_of(one);
  EXPECT_TRUE(calls(p, "gemm.s").empty());
  auto rows = calls(p, "rowwise");
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0]->rows.rows, 300);
  EXPECT_EQ(rows[0]->rows.cols, 64);
  EXPECT_EQ(rows[0]->flops, 2.0 * 64 * 300);
  ModelBuilder two = matmul_model(2, 64, 300);
  EXPECT_EQ(calls(plan_of(two), "gemm.s").size(), 1u);
}

// q @ k^T with k^T a Transpose of the last two axes: no copy, gemm.s reads k transposed; both heads in one call
// (BATCH: no broadcast, the heads one after the other in q, k and s), or, where k is one head for both (a
// broadcast), one call per head, each reading that head of k.
TEST(LowerMatMul, TransposedRightOperandIsReadTransposed) {
  for (const int64_t kheads : {2, 1}) {
    ModelBuilder b;
    b.input("q", {1, 2, 8, 4}).input("k", {1, kheads, 8, 4}).output("s");
    test::set_ints(b.node("Transpose", "kt", {"k"}, {"k_t"}), "perm", {0, 1, 3, 2});
    b.node("MatMul", "qk", {"q", "k_t"}, {"s"});
    KernelPlan p = plan_of(b);
    auto gemms = calls(p, "gemm.s");
    ASSERT_EQ(gemms.size(), kheads == 2 ? 1u : 2u);
    for (const KernelCall* g : gemms) {
      EXPECT_EQ(g->params.at("TRANS_B"), 1);
      EXPECT_EQ(g->params.at("K"), 4);
      EXPECT_EQ(g->params.at("N"), 8);
      EXPECT_EQ(g->offsets.at("b"), 0u);  // k's first head (the batch's, or the one both read)
    }
    if (kheads == 2) {
      EXPECT_EQ(gemms[0]->params.at("BATCH"), 2);
      EXPECT_EQ(gemms[0]->flops, 2.0 * 2 * 8 * 4 * 8);
    } else {
      EXPECT_EQ(gemms[0]->params.count("BATCH"), 0u);
      EXPECT_EQ(gemms[1]->offsets.at("c") - gemms[0]->offsets.at("c"), 8u * 8 * 4);  // the next head of s, f32
    }
    for (const KernelCall& c : p.calls) EXPECT_NE(c.label, "kt");
  }
}

// INT8: x is quantised by cast.s with SCALE = 127 / absmax, gemm.s multiplies int8 x int8 -> int32, and a
// row-wise kernel dequantises with s_a * s_w[n] per column.
TEST(LowerInt8, QuantiseGemmDequantise) {
  ModelBuilder b = matmul_model(4, 64, 32);
  Options o = chip();
  o.precision = Precision::INT8;
  o.activation_absmax["x"] = 2.0f;
  KernelPlan p = plan_of(b, o);
  std::vector<std::string> kernels;
  for (const KernelCall& c : p.calls) kernels.push_back(c.kernel);
  // The gemm dequantises in its epilogue (DEQUANT): no int32 accumulators in HBM, no row-wise pass.
  EXPECT_EQ(kernels, (std::vector<std::string>{"cast.s", "gemm.s"}));
  EXPECT_EQ(p.calls[0].params.at("DDT"), static_cast<int64_t>(isa::DType::I8));
  EXPECT_EQ(p.calls[0].params.at("SCALE"), isa::bits_from_f32(1.0f / (2.0f / 127.0f)));
  EXPECT_EQ(p.calls[1].params.at("IN_DT"), static_cast<int64_t>(isa::DType::I8));
  EXPECT_EQ(p.calls[1].params.at("OUT_DT"), static_cast<int64_t>(isa::DType::F32));  // y, a graph output
  EXPECT_EQ(p.calls[1].params.at("DEQUANT"), 1);
  EXPECT_EQ(p.calls[1].params.at("BIAS"), 0);
  EXPECT_EQ(p.calls[1].params.count("Q_SCALE"), 0u);  // no int8 consumer
  const Buffer& dq = p.buffers[static_cast<size_t>(p.calls[1].tensors.at("dq"))];
  ASSERT_EQ(dq.shape, (std::vector<int64_t>{32, 2}));
  std::vector<float> pairs(64);
  ASSERT_EQ(dq.data.size(), 64u * 4);
  std::memcpy(pairs.data(), dq.data.data(), dq.data.size());
  // Weights: per-column scale max|w[:, n]| / 127; the largest |w| of each column quantises to +-127.
  const Buffer* wq = nullptr;
  for (const Buffer& buf : p.buffers)
    if (buf.name == "w.i8") wq = &buf;
  ASSERT_NE(wq, nullptr);
  std::vector<float> w = test::ramp(64 * 32);
  for (int64_t n = 0; n < 32; ++n) {
    int64_t arg = 0;
    for (int64_t k = 0; k < 64; ++k)
      if (std::fabs(w[k * 32 + n]) > std::fabs(w[arg * 32 + n])) arg = k;
    const auto q = static_cast<int8_t>(wq->data[static_cast<size_t>(arg * 128 + n)]);
    EXPECT_EQ(std::abs(q), 127) << n;
    // the epilogue's pair: s_a * s_w[n] (s_a = 2 / 127, s_w[n] = max|w[:, n]| / 127), and no bias
    EXPECT_EQ(pairs[2 * n], (2.0f / 127.0f) * (std::fabs(w[arg * 32 + n]) / 127.0f)) << n;
    EXPECT_EQ(pairs[2 * n + 1], 0.0f) << n;
  }
}

// The gemm of one matmul also writes, in its dequantising epilogue, the int8 copy its quantised consumer reads
// (gemm.s's second output q, x 127/absmax): one cast.s for the graph input x only, no row-wise pass.
TEST(LowerInt8, ChainedMatmulsQuantiseInTheDequantisingKernel) {
  ModelBuilder b;
  b.input("x", {4, 64}).output("y");
  b.constant("w1", {64, 32}, test::ramp(64 * 32)).constant("w2", {32, 16}, test::ramp(32 * 16, 0.5f));
  b.node("MatMul", "mm1", {"x", "w1"}, {"h"});
  b.node("Relu", "relu", {"h"}, {"r"});
  b.node("MatMul", "mm2", {"r", "w2"}, {"y"});
  Options o = chip();
  o.precision = Precision::INT8;
  o.activation_absmax = {{"x", 2.0f}, {"r", 8.0f}};
  KernelPlan p = plan_of(b, o);
  std::vector<std::string> kernels;
  for (const KernelCall& c : p.calls) kernels.push_back(c.kernel);
  EXPECT_EQ(kernels, (std::vector<std::string>{"cast.s", "gemm.s", "gemm.s"}));
  EXPECT_EQ(p.calls[1].params.at("RELU"), 1);
  EXPECT_EQ(p.calls[1].params.at("Q_SCALE"), isa::bits_from_f32(127.0f / 8.0f));  // r * 127 / 8 as int8
  EXPECT_EQ(p.buffers[static_cast<size_t>(p.calls[1].tensors.at("q"))].dtype, isa::DType::I8);
  EXPECT_EQ(p.calls[2].tensors.at("a"), p.calls[1].tensors.at("q"));
  EXPECT_EQ(p.calls[2].params.count("Q_SCALE"), 0u);
  // Only mm2 reads r, as its int8 activations: the first gemm writes the int8 copy alone (Q_ONLY, no `c`).
  EXPECT_EQ(p.calls[1].params.at("Q_ONLY"), 1);
  EXPECT_EQ(p.calls[1].tensors.count("c"), 0u);
  EXPECT_EQ(p.calls[2].params.count("Q_ONLY"), 0u);
  EXPECT_EQ(p.calls[2].tensors.count("c"), 1u);  // y, the graph output
}

// A value that something else also reads in its storage type keeps it: the int8 copy is a second output.
TEST(LowerInt8, TheInt8CopyIsTheOnlyOutputOnlyWhenOnlyInt8MatmulsReadIt) {
  for (const char* other : {"output", "add", "gemv"}) {
    ModelBuilder b;
    const bool gemv = std::string(other) == "gemv";
    b.input("x", {gemv ? 1 : 4, 64}).output("y");
    b.constant("w1", {64, 32}, test::ramp(64 * 32)).constant("w2", {32, 16}, test::ramp(32 * 16, 0.5f));
    b.node("MatMul", "mm1", {"x", "w1"}, {"h"});
    b.node("Relu", "relu", {"h"}, {"r"});
    b.node("MatMul", "mm2", {"r", "w2"}, {"y"});
    if (std::string(other) == "output") b.output("r");
    if (std::string(other) == "add") b.node("Add", "add", {"r", "r"}, {"z"}), b.output("z");
    Options o = chip();
    o.precision = Precision::INT8;
    o.activation_absmax = {{"x", 2.0f}, {"r", 8.0f}};
    KernelPlan p = plan_of(b, o);
    for (const KernelCall& c : p.calls) {
      EXPECT_EQ(c.params.count("Q_ONLY"), 0u) << other << ": " << c.label;
      if (c.kernel == "gemm.s") {
        EXPECT_EQ(c.tensors.count("c"), 1u) << other << ": " << c.label;
      }
    }
  }
}

TEST(LowerInt8, MissingCalibrationNamesTheActivation) {
  ModelBuilder b = matmul_model(4, 64, 32);
  Options o = chip();
  o.precision = Precision::INT8;
  EXPECT_EQ(error_of(b, o),
            "m.onnx: node 'mm' (MatMul): int8: no calibration range for activation 'x' (give calibration inputs)");
  o.expose_calibration = true;
  o.precision = Precision::BF16;
  KernelPlan p = plan_of(b, o);
  bool exposed = false;
  for (const Buffer& buf : p.buffers) exposed = exposed || (buf.kind == Buffer::Kind::Output && buf.name == "calib:x");
  EXPECT_TRUE(exposed);
}

// Channel concatenation of two conv outputs stays NHWC: one strided move per input (rows of C bytes), not
// an element-wise layout change.
TEST(LowerLayout, ChannelConcatOfNhwcValuesIsOneMovePerInput) {
  ModelBuilder b;
  b.input("x", {1, 4, 5, 5}).output("y");
  b.constant("w1", {6, 4, 1, 1}, test::ramp(24)).constant("w2", {10, 4, 1, 1}, test::ramp(40));
  b.node("Conv", "c1", {"x", "w1"}, {"a"});
  b.node("Conv", "c2", {"x", "w2"}, {"b"});
  test::set_int(b.node("Concat", "cat", {"a", "b"}, {"cat_out"}), "axis", 1);
  b.node("Relu", "relu", {"cat_out"}, {"y"});
  KernelPlan p = plan_of(b);
  int found = 0;
  for (const KernelCall& c : p.calls)
    if (c.label == "cat") {
      ++found;
      ASSERT_EQ(c.moves.size(), 2u);
      EXPECT_EQ(c.moves[0].rows, 25u);
      EXPECT_EQ(c.moves[0].rowbytes, 6u * 2);
      EXPECT_EQ(c.moves[0].dst_stride, 16 * 2);
      EXPECT_EQ(c.moves[1].dst_off - c.moves[0].dst_off, 6u * 2);
    }
  EXPECT_EQ(found, 1);
}

// Decomposed layer norm (opset 13 export) is one row-wise kernel.
TEST(LowerRowwise, DecomposedLayerNormIsOneKernel) {
  ModelBuilder b;
  b.input("x", {4, 16}).output("y");
  b.constant("two", {}, {2.0f}).constant("eps", {}, {1e-5f});
  b.constant("g", {16}, test::ramp(16, 1.0f)).constant("beta", {16}, test::ramp(16));
  test::set_ints(b.node("ReduceMean", "mean", {"x"}, {"m"}), "axes", {-1});
  b.node("Sub", "sub", {"x", "m"}, {"d"});
  b.node("Pow", "pow", {"d", "two"}, {"d2"});
  test::set_ints(b.node("ReduceMean", "var", {"d2"}, {"v"}), "axes", {-1});
  b.node("Add", "add_eps", {"v", "eps"}, {"ve"});
  b.node("Sqrt", "sqrt", {"ve"}, {"sd"});
  b.node("Div", "div", {"d", "sd"}, {"n"});
  b.node("Mul", "mul", {"n", "g"}, {"ng"});
  b.node("Add", "add", {"ng", "beta"}, {"y"});
  KernelPlan p = plan_of(b);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].kernel, "rowwise");
  EXPECT_EQ(p.calls[0].label, "mean+sub+pow+var+add_eps+sqrt+div+mul+add");
}

// Softmax over axis 1: the input moved to [2, 4, 3] (a copy), one row-wise kernel over 8 rows of 3, moved back.
TEST(Lower, SoftmaxOverANonLastAxisMovesItLast) {
  ModelBuilder b;
  b.input("x", {2, 3, 4}).output("y");
  test::set_int(b.node("Softmax", "sm", {"x"}, {"y"}), "axis", 1);
  KernelPlan p = plan_of(b);
  ASSERT_GE(p.calls.size(), 3u);
  EXPECT_EQ(p.calls[0].kernel, "copy");
  EXPECT_EQ(p.calls[1].kernel, "rowwise");
  EXPECT_EQ(p.calls[1].rows.rows, 8);
  EXPECT_EQ(p.calls[1].rows.cols, 3);
  EXPECT_EQ(p.calls[2].kernel, "copy");
}

// A comparison of computed values and a Where on it (0/1 in f32) are one row-wise kernel.
TEST(LowerRowwise, ComparisonAndWhereOnComputedValuesAreOneKernel) {
  ModelBuilder b;
  b.input("x", {2, 3}).input("z", {2, 3}).output("y");
  b.node("Greater", "gt", {"x", "z"}, {"c"});
  b.node("Where", "where", {"c", "x", "z"}, {"y"});
  KernelPlan p = plan_of(b);
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].kernel, "rowwise");
  EXPECT_EQ(p.calls[0].label, "gt+where");
}

// ArgMax over the last axis is part of the row-wise kernel, which writes the INT64 graph output as int32; over
// another axis the input is first moved (a copy).
TEST(Lower, ArgMaxWritesAnInt32Output) {
  for (int64_t axis : {1, 0}) {
    ModelBuilder b;
    b.input("x", {4, 6}).output("y");
    onnx::NodeProto* n = b.node("ArgMax", "am", {"x"}, {"y"});
    test::set_int(n, "axis", axis);
    test::set_int(n, "keepdims", 0);
    KernelPlan p = plan_of(b);
    ASSERT_EQ(p.calls.size(), axis == 1 ? 1u : 2u) << axis;
    const KernelCall& k = p.calls.back();
    EXPECT_EQ(k.kernel, "rowwise");
    EXPECT_EQ(k.rows.rows, axis == 1 ? 4 : 6);
    ASSERT_EQ(k.row_outputs.size(), 1u);
    const Buffer& out = p.buffers[static_cast<size_t>(k.row_outputs[0])];
    EXPECT_EQ(out.kind, Buffer::Kind::Output);
    EXPECT_EQ(out.dtype, isa::DType::I32);
    EXPECT_EQ(out.shape, (std::vector<int64_t>{axis == 1 ? 4 : 6}));
  }
}

// CumSum over 9 elements: the input copied (axis first, next to zero rows), ceil(log2 9) = 4 row-wise additions,
// the result copied back.
TEST(Lower, CumSumIsALogarithmicScan) {
  ModelBuilder b;
  b.input("x", {3, 9}).output("y");
  test::int_constant(b, "axis", {}, {1});
  b.node("CumSum", "cs", {"x", "axis"}, {"y"});
  KernelPlan p = plan_of(b);
  std::vector<std::string> kinds;
  for (const KernelCall& c : p.calls) kinds.push_back(c.kernel);
  EXPECT_EQ(kinds, (std::vector<std::string>{"copy", "rowwise", "rowwise", "rowwise", "rowwise", "copy"}));
}

TEST(LowerErrors, GatherOfAnActivationByRunTimeIndices) {
  ModelBuilder b;
  b.input("x", {5, 3}).input("ids", {2}).output("y");
  test::set_input_type(b, "ids", onnx::TensorProto_DataType_INT64);
  b.node("Gather", "g", {"x", "ids"}, {"y"});
  EXPECT_EQ(error_of(b),
            "m.onnx: node 'g' (Gather): only an embedding lookup (a constant 2-D table, axis 0) with indices computed at run "
            "time is supported");
}

// A result with a size of 0 in its shape (fuzz_onnx: a constant [0, 0, 0, 63] multiplied into a chain) is refused
// at its node, in the shape of every compiler error; it reached the row-wise generator before ("rows and cols must
// be positive"), having copied the empty constant's bytes through a null pointer on the way (UBSan, lower.cpp).
// Empty constants a node only reads for its attributes (Resize's roi) are not results, and still compile.
TEST(LowerErrors, ResultsWithNoElementsAreRefusedAtTheirNode) {
  ModelBuilder b;
  b.input("x", {1}).output("y");
  b.constant("half", {0, 0, 0, 63}, {});
  b.node("Mul", "mul", {"x", "half"}, {"h"});
  b.node("Relu", "relu", {"h"}, {"y"});
  EXPECT_EQ(error_of(b),
            "m.onnx: node 'mul' (Mul): its result 'h' [0,0,0,63] has no elements (tensors with a size of 0 are not "
            "supported)");
  ModelBuilder r;
  r.input("x", {1, 2, 4, 4}).output("y");
  r.constant("roi", {0}, {});
  r.constant("scales", {4}, {1, 1, 2, 2});
  r.node("Resize", "up", {"x", "roi", "scales"}, {"y"});
  test::set_string(r.proto().mutable_graph()->mutable_node(0), "mode", "nearest");
  EXPECT_EQ(error_of(r), "(no error)");
}

}  // namespace
}  // namespace tpusim::compiler

namespace tpusim::compiler {
namespace {

// merge_casts: the graph's outputs cast after the last node (a KV cache's present keys and values) become one
// kernel on a chip of one core; a cast that writes what an earlier one of the run writes (or reads it, or writes
// what it reads), another call, or a cast with a scale ends the run; on two cores the calls stay as they are.
TEST(MergeCasts, ConsecutiveCastsOfOneCoreBecomeOneKernel) {
  KernelPlan p;
  auto buffer = [&](const std::string& name, Buffer::Kind kind, isa::DType dt) {
    p.buffers.push_back(Buffer{name, kind, dt, {4, 8}, {}, 0, 0, std::nullopt});
    return static_cast<int>(p.buffers.size()) - 1;
  };
  auto cast = [&](const std::string& label, int x, int y, int64_t scale = 0) {
    KernelCall c;
    c.label = label, c.kernel = "cast.s";
    c.tensors = {{"x", x}, {"y", y}};
    c.params = {{"N", 32}, {"SDT", static_cast<int64_t>(p.buffers[x].dtype)},
                {"DDT", static_cast<int64_t>(p.buffers[y].dtype)}, {"SCALE", scale}};
    c.bytes = 32 * 6;
    p.calls.push_back(c);
  };
  std::vector<int> x, y;
  for (int i = 0; i < 6; ++i)
    x.push_back(buffer("x" + std::to_string(i), Buffer::Kind::Temp, isa::DType::BF16)),
        y.push_back(buffer("y" + std::to_string(i), Buffer::Kind::Output, isa::DType::F32));
  const int h = buffer("h", Buffer::Kind::Temp, isa::DType::BF16);
  KernelCall other;
  other.kind = KernelCall::Kind::Copy, other.label = "copy", other.kernel = "copy";
  p.calls.push_back(other);
  cast("a", x[0], y[0]);
  cast("b", x[1], y[1]);
  cast("c", x[2], y[2]);
  cast("d", h, y[0]);           // writes what a writes: a run of its own
  cast("e", x[3], y[3], 1234);  // a scale: stays cast.s
  cast("f", x[4], y[4]);
  cast("g", x[5], y[5]);
  KernelPlan two = p;
  Options o = chip();
  EXPECT_EQ(merge_casts(p, o.target.symbols), 3);
  ASSERT_EQ(p.calls.size(), 5u);
  EXPECT_EQ(p.calls[0].kind, KernelCall::Kind::Copy);
  EXPECT_EQ(p.calls[1].kind, KernelCall::Kind::Cast);
  EXPECT_EQ(p.calls[1].label, "a+...+c");
  ASSERT_EQ(p.calls[1].casts.size(), 3u);
  EXPECT_EQ(p.calls[1].casts[2].src, x[2]);
  EXPECT_EQ(p.calls[1].casts[2].dst, y[2]);
  EXPECT_EQ(p.calls[1].casts[2].n, 32);
  EXPECT_EQ(p.calls[1].tensors.at("y1"), y[1]);
  EXPECT_DOUBLE_EQ(p.calls[1].bytes, 3 * 32 * 6);
  // d (alone in its run) and e (scaled) stay as they were; f and g merge
  EXPECT_EQ(p.calls[2].label, "d");
  EXPECT_EQ(p.calls[2].kernel, "cast.s");
  EXPECT_EQ(p.calls[3].label, "e");
  EXPECT_EQ(p.calls[3].kernel, "cast.s");
  EXPECT_EQ(p.calls[4].label, "f+...+g");
  EXPECT_EQ(p.calls[4].kind, KernelCall::Kind::Cast);
  o.target.symbols["CORES"] = 2;
  EXPECT_EQ(merge_casts(two, o.target.symbols), 0);
  EXPECT_EQ(two.calls.size(), 8u);
}

}  // namespace
}  // namespace tpusim::compiler
