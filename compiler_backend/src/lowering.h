// The lowering's state and toolbox (internal): class Lowering walks the graph in order and hands each node to its
// operator's OpDef (ops.h): row-wise operators join a fused row-wise kernel (lower_rowwise.cpp), the others lower
// themselves (OpDef::lower, in their family's ops_<family>.cpp) through the helpers below: buffers, the stored
// variants of a value (element type, layout), library kernel calls, copies, row-wise kernel building, int8
// quantisation (lower_quant.cpp). lower.h says what each operator becomes.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph.h"
#include "kernel_plan.h"
#include "ops.h"
#include "shapes.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/isa.h"
#include "tpusim/kernels/rowwise.h"

namespace tpusim::compiler {

using isa::DType;
namespace rw = kernels::rowwise;

constexpr int64_t dt(DType t) { return static_cast<int64_t>(t); }  // the kernels' DT_* symbols

std::string num(float f);  // "%g"
std::vector<uint8_t> bf16_bytes(const std::vector<float>& v);
std::vector<uint8_t> f32_bytes(const std::vector<float>& v);
// out (row-major, of `shape`) [i0, i1, ...] = d[i0 * strides[0] + i1 * strides[1] + ...].
std::vector<float> gather_strided(const std::vector<float>& d, const Shape& shape, const std::vector<int64_t>& strides);
// Host broadcast of a constant to `to` (numpy rules), row-major.
std::vector<float> broadcast_data(const std::vector<float>& d, Shape from, const Shape& to);
// out[i] = in[perm-applied]: out shape = [s[perm[0]], ...].
// A constant's elements as floats (integers and booleans converted: exact below 2^24).
std::vector<float> const_floats(const ir::Value& v);
std::vector<float> permute_data(const std::vector<float>& d, const Shape& s, const std::vector<int>& perm);

inline const std::vector<int> kToNhwc = {0, 2, 3, 1};  // logical NCHW -> physical NHWC

// A value as it lives in HBM: a buffer (and byte offset), an element type and a layout. 4-D values are NCHW
// (`nhwc` false) or NHWC; everything else is row-major in its ONNX shape.
struct Stored {
  int buf = -1;
  uint64_t off = 0;
  DType dtype = DType::BF16;
  bool nhwc = false;
};

// A problem found while lowering that names no node itself (a helper's): the node being lowered is added.
struct LoweringIssue : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct AttentionGroup;  // ops_attention.cpp: a fused attention node group

// A fused row-wise kernel under construction: consecutive row-wise nodes over one [R, C] (physical) shape.
struct Group {
  Shape O;  // physical [.., C] shape of the group
  bool nhwc = false;
  int64_t R = 1, C = 1;
  std::map<int, int> node_of;   // value -> rowwise node
  std::map<int, bool> per_row;  // value -> per-row (reduced) value
  std::vector<int> members;     // graph nodes
};

class Lowering {
 public:
  Lowering(const ir::Graph& g, const Options& opts);
  KernelPlan run();

  [[noreturn]] void fail(const ir::Node& n, const std::string& what) const { ir::fail(n, what); }
  const ir::Value& val(int v) const;
  Shape shape(int v) const;

  // ---- buffers ---------------------------------------------------------------------------------------------
  int add_buffer(const std::string& name, Buffer::Kind kind, DType dtype, Shape shape, uint64_t extra = 0);
  int temp(const std::string& name, DType dtype, Shape shape, uint64_t extra = 0);
  // A Const buffer; the same name with the same contents is shared, different contents get a fresh name.
  int add_const(const std::string& name, DType dtype, Shape shape, std::vector<uint8_t> data);
  int const_f32(const std::string& name, Shape shape, const std::vector<float>& v);
  int const_bf16(const std::string& name, Shape shape, const std::vector<float>& v);
  int pattern(float value, DType dtype, uint64_t bytes);  // a constant row of `value`, at least `bytes` long
  // The row of `value` to fill a padded window's borders from (window_phases): an intermediate copy of pattern's
  // (where the chip keeps intermediates: VMEM, the shared memory), whose fills wait that memory's latency, not
  // HBM's, loaded once, by an earlier copy that reads far memory itself (its latency shared); where there is none,
  // the constant, with its load to the intermediate added to `moves` (the copy being made, which reads the constant
  // this once). The intermediate holds the row repeated to at least kFillPatternBytes, so that it serves the
  // longer rows of later windows too (a row longer still gets a pattern of its own).
  int fill_pattern(float value, DType dtype, uint64_t bytes, std::vector<BufferMove>& moves);
  static constexpr uint64_t kFillPatternBytes = 16 << 10;
  // Weights [K, N] -> bf16 Const tiled for gemm.s's B_TILED: [cdiv(K,R), cdiv(N,C), R, C], zero-padded.
  // model: the model's weight elements it holds where that is fewer than k * n (block-diagonal weights of
  // grouped convolutions, whose zeros are the compiler's), -1: k * n (Buffer::model_bytes, the ideal bound).
  int tiled_weights(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n, int64_t model = -1);

  // ---- calls -----------------------------------------------------------------------------------------------
  void gemm(const std::string& label, Stored a, Stored b, int bias, Stored c, int64_t m, int64_t k, int64_t n,
            bool relu, float scale, bool b_tiled, bool trans_b);
  void cast(const std::string& label, Stored x, Stored y, int64_t n);
  void copy(const std::string& label, std::vector<BufferMove> moves);
  // Moves that copy an N-D view: dst[Σ i_d * dstr_d] = src[Σ i_d * sstr_d] over `shape` (element strides; a
  // source stride 0 broadcasts). Dims are coalesced first; a move is rows of contiguous bytes along the largest
  // remaining dimension.
  static void view_moves(std::vector<BufferMove>& out, Stored src, Stored dst, Shape shape, std::vector<int64_t> sstr,
                         std::vector<int64_t> dstr, int es);
  // dst (contiguous, of `out` shape) = src viewed through per-dim element strides and an element offset.
  void view_copy(const std::string& label, Stored src, int64_t src_elem_off, const Shape& out,
                 const std::vector<int64_t>& sstr, Stored dst, int64_t dst_elem_off, const std::vector<int64_t>& dstr);

  // ---- stored variants -------------------------------------------------------------------------------------
  // NHWC and NCHW are the same bytes unless the value is 4-D with H*W > 1 (and C > 1): only then does layout matter.
  bool layout_matters(int v) const;
  Stored remember(int v, Stored s);  // records a variant of v (plain when its layout does not matter)
  // The value as `dtype` (F32 or BF16) in the requested layout, converting (cast.s, copies) as needed.
  Stored get(int v, DType dtype, bool nhwc);
  // Any stored variant with the requested layout (dtype F32 or BF16), converting only the layout if needed.
  Stored get_any(int v, bool nhwc);
  Stored plain_input(int v) { return get_any(v, false); }  // row-major, f32 or bf16 as it is
  bool prefers_nhwc(int v) const;
  std::string producer_label(int v) const;
  // The storage type for a value about to be computed: f32 when only row-wise kernels (and graph outputs) read it,
  // or when it is an angle (OpDef::angle_input).
  DType storage_type(int v) const;
  bool angle(int v, int depth = 0) const;  // whether v reaches an angle input through data movement only
  // The destination of a computed value: the graph output buffer (f32) when it is an output read by nothing
  // else, a temp of `dtype` otherwise. `rowwise`: written by a row-wise kernel, which converts to any element type,
  // so that an integer output's int32 buffer serves too.
  Stored destination(int v, DType dtype, bool rowwise = false);
  // Output 0 of n is a view of input 0's bytes (Reshape and the like).
  void alias(const ir::Node& n);
  // Whether Transpose node t swaps the last two axes (and keeps the others).
  static bool is_last_two_swap(const ir::Node& t);

  // ---- row-wise kernels (lower_rowwise.cpp) ----------------------------------------------------------------
  // Whether node n joins a row-wise kernel (its OpDef is Elementwise/RowReduce and fusable).
  bool rowwise_op(const ir::Node& n) const;
  KernelCall rowwise_call(const std::string& label, int64_t rows, int64_t cols);
  // Whether a row-wise kernel of this shape fits a core's VMEM (rowwise::plan does not refuse it): for a probe
  // program made before the lowering commits to one (its inputs' addresses do not matter)
  bool rowwise_fits(const rw::Program& p) const;
  int rw_node(KernelCall& call, rw::Op op, std::vector<int> args, float value = 0, float lo = 0, float hi = 0);
  int rw_input(KernelCall& call, Stored s, bool per_row, int64_t period, int64_t stride = 0);  // stride: rowwise.h
  void rw_output(KernelCall& call, int node, Stored s);
  // Physical shape of a value broadcast against the group: right-aligned to the group's rank, NHWC-permuted.
  Shape physical(const Group& gr, Shape s) const;
  // Main shape of a node in a group: its input's for reductions, else its output's.
  Shape main_shape(const ir::Node& n) const;
  // Lowers the run of row-wise nodes that starts at node `first` as one row-wise kernel.
  void lower_rowwise(int first);
  // A constant of logical shape `s` broadcast against the group: an f32 input of its period's rows.
  int const_operand(KernelCall& call, Group& gr, std::vector<float> d, const Shape& s, const std::string& name);
  // The rowwise node for value v in group gr: a group value, a scalar constant, or an input.
  int operand(KernelCall& call, Group& gr, int v);

  // ---- int8 quantisation (lower_quant.cpp) -----------------------------------------------------------------
  // The activations an INT8 compile quantises: input 0 of the nodes whose OpDef::quantises says so (MatMul/Gemm
  // with a constant 2-D B, Conv with constant weights and group 1), unless computed at compile time.
  void find_quantised();
  bool int8(int v) const;  // whether value v is quantised in this compile
  // The activation scale s_a = absmax / 127 of value v (1 when the calibration saw only zeros).
  float act_scale(const ir::Node& n, int v) const;
  // v as int8, x / s_a rounded to nearest even and saturated (cast.s with SCALE = 1/s_a), NHWC for 4-D.
  Stored quantized(const ir::Node& n, int v, bool nhwc);
  // Weights [K, N] -> per-column scales (max|w| / 127) and int8 values, tiled like tiled_weights.
  int tiled_weights_i8(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n,
                       std::vector<float>& scales);
  // When INT8 consumers will quantise value v (calibrated) and it has no int8 copy yet, 1/s_a (= 127/absmax) for
  // the kernel computing v to write that copy with; 0 otherwise.
  float int8_copy_scale(int v) const;
  // Its int8 buffer, remembered as v's quantised form (quantized_).
  Stored int8_copy_buffer(int v, bool nhwc);
  // When INT8 consumers will quantise value v, the row-wise kernel computing it also writes its int8
  // copy (x / s rounded to nearest even, saturated), so that no separate cast pass reads it back.
  void int8_copy(KernelCall& call, int node, int v, bool nhwc);
  // One quantised matmul: out = act(a @ w + bias) with a = value `a` ([m, k] rows of its buffer): gemm.s (or the
  // whole-chip gemm) on int8 weights with the dequantising epilogue (DEQUANT: acc * s_a * s_w[n] + bias[n], ReLU,
  // out's type), and the int8 copy of `value` (the graph value `out` holds; -1 when out is an intermediate form of
  // it, e.g. virtual conv rows) as its second output q (Q_SCALE) where int8_copy_scale asks for one.
  // When only int8 matmuls read `value` and the call computes all of it, the copy is its only output (Q_ONLY):
  // `out` is not written.
  void int8_gemm(const ir::Node& n, const std::string& label, Stored aq, int a, const std::vector<float>& w, int64_t m,
                 int64_t k, int64_t nn, const std::vector<float>& bias, const std::string& wname, bool relu,
                 Stored out, double flops, int value);
  // Whether value v (quantised, not a graph output, more than one row) is read only as the activations of
  // MatMul/Gemm nodes with constant 2-D weights, which take its int8 copy.
  bool only_int8_matmuls_read(int v) const;

  // ---- fused attention (ops_attention.cpp) ------------------------------------------------------------------
  // Finds the attention node groups (MatMul, scale, mask, Softmax, MatMul) that become one whole-chip attention
  // call each: marks their nodes done but the last MatMul, where the call is made (attention_); notes why a group
  // stays per head (attention_notes_, by its first MatMul: the compile report shows it).
  void find_attention();
  std::map<int, std::shared_ptr<AttentionGroup>> attention_;
  std::map<int, std::string> attention_notes_;

  // ---- state -----------------------------------------------------------------------------------------------
  const ir::Graph& g_;
  const Options& opts_;
  const std::map<std::string, int64_t>& sym_;
  std::set<int> calib_;              // values an INT8 compile quantises (matmul and conv inputs)
  std::map<std::string, float> absmax_;  // their ranges: opts_.activation_absmax (timing-only: 1 where missing)
  std::map<int, Stored> quantized_;  // value -> its int8 copy
  std::map<int, int64_t> grouped_;   // value -> G: stored group by group by its GEMM (GROUP_N), [N / G, rows, G]
  // A padded input's layout and borders (its buffer's shape and slack, the padding's value and the fills' places)
  // -> the buffer that holds them, borders filled by the first window that made it (ops_conv.cpp, window_phases)
  std::map<std::string, int> padded_;
  std::map<std::pair<uint32_t, DType>, int> fill_patterns_;  // (value's bits, type) -> fill_pattern's buffer
  KernelPlan plan_;
  std::vector<std::vector<int>> users_;  // value -> the nodes reading it
  std::vector<bool> is_output_;          // value -> whether it is a graph output
  std::vector<bool> done_;               // node -> lowered already (fused into an earlier node's kernel)
  std::map<int, std::vector<Stored>> st_;  // value -> its stored variants
  std::map<int, int> out_buf_;             // graph output value -> its Output buffer
  std::map<std::string, int> const_names_;
  std::set<std::string> io_names_;  // the inputs' and outputs' names: a constant never takes one
  bool trans_b_ = false;      // gemm.s reads B transposed (TRANS_B)
  bool have_gather_ = false;  // kernels/gather.s exists

 private:
  void lower_node(int i);
  void write_output(int o);
  void rowwise_node(KernelCall& call, Group& gr, const ir::Node& n);
};

// One node being added to a row-wise kernel: what an OpDef::rowwise function works with.
struct RowEmit {
  Lowering& L;
  KernelCall& call;
  Group& gr;
  const ir::Node& n;
  bool out_per_row = false;  // set by the function: its output has one value per row

  int in(size_t k) { return L.operand(call, gr, n.inputs[k]); }  // the row-wise node of input k
  // Whether value v has one value per row in this group.
  bool per_row(int v) const;
  int node(rw::Op op, std::vector<int> args, float value = 0, float lo = 0, float hi = 0) {
    return L.rw_node(call, op, std::move(args), value, lo, hi);
  }
  int konst(float value) { return L.rw_node(call, rw::Op::Const, {}, value); }
  // A constant broadcast against the group (logical shape s).
  int const_operand(std::vector<float> d, const Shape& s, const std::string& name) {
    return L.const_operand(call, gr, std::move(d), s, name);
  }
};

// One fused attention group as one call of the whole-chip attention kernel (ops_attention.cpp).
void lower_attention(Lowering& L, const AttentionGroup& g);

// Helpers one family offers another.
// Mean over H and W of a 4-D value x into y (GlobalAveragePool, ReduceMean over axes 2 and 3): ops_conv.cpp.
void lower_spatial_mean(Lowering& L, const ir::Node& n, int x, int y);
// y[1, N] = act(x[1, K] @ w[K, N] + bias) on the vector unit, a row-wise kernel over w^T (a matrix-vector product,
// where a matrix unit would shift in a weight tile for one row), and whether its kernel fits VMEM: ops_matmul.cpp.
void gemv(Lowering& L, const std::string& label, Stored x, const std::vector<float>& w, int64_t k, int64_t n,
          const std::vector<float>& bias, const std::string& wname, bool relu, Stored out, bool int8_weights);
bool gemv_fits(const Lowering& L, int64_t k, int64_t n, bool int8_weights, bool bias, bool relu, DType out);

}  // namespace tpusim::compiler
