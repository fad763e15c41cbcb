// The operator registry: every ONNX operator the compiler knows is one OpDef, in the family file that implements it
// (ops_matmul.cpp, ops_conv.cpp, ops_data.cpp, ops_elementwise.cpp, ops_normalize.cpp, ops_resize.cpp). Each entry
// holds, for its operator: the input/output counts and attributes shape inference accepts, its shape function, its
// constant folding (if it has one), how it fuses and lowers, and whether int8 compiles quantise it. The passes read
// only this table: shape inference (shape_inference.cpp), constant folding (const_fold.cpp), the check that lists
// every unsupported operator of a model at once, and the lowering (lower.cpp). docs/compiler.md: "Adding an operator".
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <vector>

#include "graph.h"

namespace tpusim::compiler {

struct InferCtx;    // infer.h: one node under shape inference
struct HostTensor;  // fold.h: a constant evaluated on the host
class Lowering;     // lowering.h: the graph being lowered into a kernel plan
struct RowEmit;     // lowering.h: one node being added to a fused row-wise kernel

// How a node joins the kernels around it.
enum class Fusion {
  None,         // its own kernels (OpDef::lower), or none when it always folds
  Alias,        // a view of its input's bytes: no kernel (OpDef::lower records the alias)
  Elementwise,  // one output element per input element (with broadcasting): part of a fused row-wise kernel
  RowReduce,    // reduces along the last axis (softmax, normalisations, reductions): part of a row-wise kernel, and
                // ends a run of elementwise nodes that a later reduction would need as columns
};

inline constexpr size_t kManyInputs = 1000;  // max_inputs / max_outputs of variadic operators

struct OpDef {
  std::string name;  // the ONNX op_type
  size_t min_inputs = 1, max_inputs = 1, min_outputs = 1, max_outputs = 1;
  std::map<std::string, ir::Attr::Kind> attrs = {};  // the attributes accepted, with their kinds (Other: a tensor)
  // Shape inference: checks the node and sets its outputs' types and shapes (InferCtx::out); records resolved
  // attributes for the later passes (shape_inference.h lists them).
  void (*infer)(InferCtx&) = nullptr;
  // Constant folding: the outputs computed on the host from constant inputs (one per node output), or {} to leave
  // the node alone (e.g. a type the host does not model). Called only when every present input is a constant, or
  // always when fold_shape_only (Shape, Size: their inputs carry only their shapes).
  std::vector<HostTensor> (*fold)(const ir::Graph&, const ir::Node&, const std::vector<HostTensor>&) = nullptr;
  bool fold_shape_only = false;
  Fusion fusion = Fusion::None;
  // Elementwise/RowReduce: whether this node joins a row-wise kernel (null: always); when it does not, `lower`
  // runs instead (or the node is reported as unsupported).
  bool (*fusable)(const Lowering&, const ir::Node&) = nullptr;
  // Elementwise/RowReduce: adds the node to the row-wise kernel being built; returns the row-wise node of its
  // output (and sets RowEmit::out_per_row when the output has one value per row).
  int (*rowwise)(RowEmit&) = nullptr;
  // Lowering into kernels of its own (Alias: recording the view). Throws (Lowering::fail) what it cannot lower.
  void (*lower)(Lowering&, const ir::Node&) = nullptr;
  // Expansion: the node replaced, right after its shape inference, by nodes of other operators (in order; the last
  // writes the node's output; new values named with ir::Graph::fresh_value). Shape inference and folding then run
  // on them as on any node, and the lowering sees only them (Einsum: Transpose, Reshape, MatMul, ReduceSum, Mul).
  // {}: the node stays as it is (MatMul expands only an outer product, into a Mul).
  std::vector<ir::Node> (*expand)(ir::Graph&, const ir::Node&) = nullptr;
  // Why a node of this operator that does not fold cannot be lowered, when neither `rowwise` nor `lower` exists.
  const char* no_lowering = nullptr;
  // int8 compiles: whether the node's input 0 is quantised (a matmul or convolution with constant weights).
  bool (*quantises)(const Lowering&, const ir::Node&) = nullptr;
  // Storage: whether the node's input 0 is an angle (Sin, Cos); a value that reaches one through data movement only
  // (nodes with moves_data) is stored in f32, since bf16's 2^-9 relative error would be whole radians at positions in
  // the thousands (LLaMA's rotary embedding concatenates its angles before cos and sin).
  bool angle_input = false;
  bool moves_data = false;  // the node only moves its input's elements (a view or a copy): angles pass through it
  // Storage: whether the lowering reads input 0 in f32 (CumSum's scan): a value that only such nodes and row-wise
  // kernels read is stored in f32 rather than bf16.
  bool reads_f32 = false;
  // Timing-only compiles (Options::timing_only): whether input k of the node is read only to lay out weights, so
  // that the import may skip its values (onnx_import.h). Called on the imported graph, before shape inference.
  bool (*weight_input)(const ir::Graph&, const ir::Node&, size_t k) = nullptr;

  bool row_wise() const { return fusion == Fusion::Elementwise || fusion == Fusion::RowReduce; }
  bool lowers() const { return lower != nullptr || rowwise != nullptr || expand != nullptr; }
};

class OpTable {
 public:
  void add(OpDef def);  // a second entry for one name is a programming error (std::logic_error at start-up)
  const OpDef* find(const std::string& name) const;
  const std::map<std::string, OpDef>& all() const { return ops_; }

 private:
  std::map<std::string, OpDef> ops_;
};

// The registry, filled once by the families below.
const OpTable& op_registry();
inline const OpDef* find_op(const std::string& name) { return op_registry().find(name); }

// The families (each in ops_<family>.cpp).
void add_matmul_ops(OpTable&);       // MatMul Gemm Einsum
void add_conv_ops(OpTable&);         // Conv, ConvTranspose, pooling
void add_data_ops(OpTable&);         // views, copies, shape computations, constants
void add_elementwise_ops(OpTable&);  // activations, arithmetic, comparisons, Where, Cast
void add_normalize_ops(OpTable&);    // Softmax, LayerNormalization, BatchNormalization, reductions
void add_resize_ops(OpTable&);       // Resize

}  // namespace tpusim::compiler
