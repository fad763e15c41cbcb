#include "graph.h"

#include "shapes.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <functional>
#include <numeric>
#include <stdexcept>

#include "tpusim/isa/program.h"

namespace tpusim::compiler::ir {

std::string elem_type_name(ElemType t) {
  if (onnx::TensorProto_DataType_IsValid(t)) return onnx::TensorProto_DataType_Name(t);
  return "type " + std::to_string(t);
}

std::vector<int64_t> Value::shape() const {
  std::vector<int64_t> s;
  for (const Dim& d : dims) {
    if (!d.known()) throw std::logic_error("value '" + name + "' has a dynamic dimension");
    s.push_back(d.size);
  }
  return s;
}

int64_t Value::elements() const {
  int64_t n = 1;
  for (int64_t d : shape()) n *= d;
  return n;
}

int64_t Node::attr_int(const std::string& key, int64_t def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.i;
}

float Node::attr_float(const std::string& key, float def) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? def : it->second.f;
}

int Graph::value(const std::string& name) {
  auto [it, added] = value_index.try_emplace(name, static_cast<int>(values.size()));
  if (added) {
    values.emplace_back();
    values.back().name = name;
  }
  return it->second;
}

std::vector<std::vector<int>> users_of(const Graph& g) {
  std::vector<std::vector<int>> users(g.values.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int in : g.nodes[i].inputs)
      if (in >= 0) users[static_cast<size_t>(in)].push_back(static_cast<int>(i));
  return users;
}

int Graph::fresh_value(const std::string& base) {
  std::string name = base;
  for (int k = 2; value_index.count(name); ++k) name = base + "." + std::to_string(k);
  return value(name);
}

int Graph::int_constant(const std::string& base, const std::vector<int64_t>& elements) {
  const int v = fresh_value(base);
  Value& c = values[v];
  c.elem_type = kInt64;
  c.has_shape = true;
  c.dims = {Dim::sized(static_cast<int64_t>(elements.size()))};
  c.is_const = true;
  c.ints = elements;
  return v;
}

std::string shape_str(const Value& v) {
  if (!v.has_shape) return "(unknown)";
  std::string s = "[";
  for (size_t i = 0; i < v.dims.size(); ++i) {
    if (i) s += ",";
    const Dim& d = v.dims[i];
    s += d.known() ? std::to_string(d.size) : (d.param.empty() ? "?" : d.param);
  }
  return s + "]";
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string shape_too_large(const std::vector<int64_t>& s) {
  if (s.size() > isa::kMaxRank)
    return "shape " + shape_str(s) + " has rank " + std::to_string(s.size()) + ", more than the limit of " +
           std::to_string(isa::kMaxRank);
  const uint64_t limit = isa::kMaxTensorBytes / 8;
  for (int64_t d : s)
    if (d < 0) return "shape " + shape_str(s) + " has a negative size";
  // The product of the sizes other than 0, so that no partial product of the shape's sizes (a row count, a
  // stride) can overflow either: [2^40, 2^40, 0] holds no element, but its rows would number 2^80.
  uint64_t n = 1;
  for (int64_t d : s)
    if (d != 0 && (__builtin_mul_overflow(n, static_cast<uint64_t>(d), &n) || n > limit))
      return "shape " + shape_str(s) + " has more than " + std::to_string(limit) +
             (std::find(s.begin(), s.end(), 0) == s.end() ? " elements" : " elements in its sizes other than 0") +
             ", the limit (a tensor holds at most 1 TiB)";
  return "";
}

NodeError::NodeError(const Node& n, const std::string& what)
    : Error("node '" + isa::printable(n.name, 120) + "' (" + isa::printable(n.op) + "): " + what),
      node(n.name),
      op(n.op),
      what_wrong(what) {}

void fail(const Node& n, const std::string& what) { throw NodeError(n, what); }

Error in_model(const Graph& g, const NodeError& e) { return Error(isa::printable(g.model_name, 200) + ": " + e.what()); }

}  // namespace tpusim::compiler::ir

namespace tpusim::compiler {

int64_t prod(const Shape& s, size_t from, size_t to) {
  to = std::min(to, s.size());
  if (from >= to) return 1;
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to),
                         int64_t{1}, std::multiplies<>());
}

int64_t prod(Shape::const_iterator b, Shape::const_iterator e) {
  return std::accumulate(b, e, int64_t{1}, std::multiplies<int64_t>());
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

}  // namespace tpusim::compiler
