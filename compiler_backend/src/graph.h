// The compiler's graph IR: a model as values and nodes, close to ONNX, made by the importer (onnx_import.h),
// completed by shape inference (shape_inference.h) and read by the lowering (lowering.h).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler::ir {

// An ONNX element type (onnx::TensorProto::DataType numbering: 1 = FLOAT, 7 = INT64, ...).
using ElemType = int32_t;
inline constexpr ElemType kFloat = 1;
inline constexpr ElemType kInt32 = 6;
inline constexpr ElemType kInt64 = 7;
inline constexpr ElemType kBool = 9;
std::string elem_type_name(ElemType t);  // "FLOAT", "INT64", ...

// A dimension of a value: a size, or unknown (dynamic) with the model's name for it (dim_param, may be empty).
struct Dim {
  int64_t size = -1;  // -1: unknown
  std::string param;

  static Dim sized(int64_t size) { return Dim{size, {}}; }
  static Dim dynamic(std::string param) { return Dim{-1, std::move(param)}; }
  bool known() const { return size >= 0; }
};

// A tensor-valued edge: a graph input, a constant (initializer or Constant node) or a node's output.
struct Value {
  std::string name;
  ElemType elem_type = 0;  // 0: not known yet (set by shape inference for node outputs)
  bool has_shape = false;  // false: rank unknown too
  std::vector<Dim> dims;
  int producer = -1;       // index of the producing node, -1 for graph inputs and constants
  bool is_const = false;
  std::vector<float> data; // constants of element type FLOAT: the elements, row-major
  std::vector<int64_t> ints; // constants of an integer or BOOL element type: the elements, row-major

  std::vector<int64_t> shape() const;  // sizes; all dims must be known
  int64_t elements() const;            // product of shape()
};

struct Attr {
  enum class Kind { Int, Float, String, Ints, Floats, Other };
  Kind kind = Kind::Other;
  int64_t i = 0;
  float f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<float> floats;
  // A TENSOR attribute (ConstantOfShape's `value`; kind stays Other): its element type (0: not a tensor), dims
  // and elements (integers and floats alike, as doubles).
  ElemType t_type = 0;
  std::vector<int64_t> t_dims;
  std::vector<double> t;
};

struct Node {
  std::string op;    // ONNX op_type
  std::string name;  // unique and non-empty (the importer names unnamed nodes "<op>_<index>")
  std::map<std::string, Attr> attrs;
  std::vector<int> inputs;   // value indices; -1 for an omitted optional input
  std::vector<int> outputs;  // value indices

  // An attribute's value, or `def` when absent (shape inference has checked the kinds).
  int64_t attr_int(const std::string& key, int64_t def) const;
  float attr_float(const std::string& key, float def) const;
};

struct Graph {
  std::string model_name;  // for errors: the file name
  std::vector<Value> values;
  std::vector<Node> nodes;    // in topological order
  std::vector<int> inputs;    // graph inputs (not constants), in model order
  std::vector<int> outputs;   // graph outputs, in model order
  std::map<std::string, int> value_index;

  // Index of the value called `name`, adding an empty one if new.
  int value(const std::string& name);
  // A new empty value named `base`, or `base` with a suffix ".2", ".3", ... that no value has.
  int fresh_value(const std::string& base);
  // A new constant INT64 value (a shape or axes operand of a node made by the compiler).
  int int_constant(const std::string& base, const std::vector<int64_t>& elements);
};

// The nodes reading each value (indices into g.nodes, in node order; a node reading a value twice is listed twice).
std::vector<std::vector<int>> users_of(const Graph& g);

std::string shape_str(const Value& v);              // "[8,64]", "[batch,64]", "[?,64]"; "(unknown)" without shape
std::string shape_str(const std::vector<int64_t>& s);
// Why a tensor of shape `s` is too large to compile ("shape [...] has N elements: ..."), or "" if it is not:
// rank past isa::kMaxRank, or more than isa::kMaxTensorBytes at 8 bytes an element (the widest ONNX type we
// read), counting only the sizes other than 0. Every shape the compiler imports or infers passes this check, so
// no product of any of its sizes overflows, even in a shape with a zero size.
std::string shape_too_large(const std::vector<int64_t>& s);

// The error of one node, "node 'N' (Op): what is wrong". The passes catch it and throw it again as an Error
// naming the model too (in_model), so that every error about a node reads "MODEL: node 'N' (Op): what is wrong".
struct NodeError : Error {
  NodeError(const Node& n, const std::string& what);
  std::string node, op, what_wrong;
};
[[noreturn]] void fail(const Node& n, const std::string& what);
Error in_model(const Graph& g, const NodeError& e);  // "MODEL: node 'N' (Op): what"

}  // namespace tpusim::compiler::ir
