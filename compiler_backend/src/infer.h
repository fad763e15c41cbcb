// Shape inference's view of one node (InferCtx) and the helpers the operators' shape functions share. The shape
// functions themselves live with their operators (ops.h); shape_inference.cpp drives them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph.h"
#include "shapes.h"

namespace tpusim::compiler {

using K = ir::Attr::Kind;

std::string ints_str(const std::vector<int64_t>& v);

// Checked size arithmetic: sizes come from the model, which may be crafted; a result past int64 fails naming
// the node instead of wrapping (undefined behaviour).
int64_t mul(const ir::Node& n, int64_t a, int64_t b);
int64_t add(const ir::Node& n, int64_t a, int64_t b);

// One node under inference: its inputs, attributes and outputs.
struct InferCtx {
  ir::Graph& g;
  ir::Node& n;

  size_t ninputs() const { return n.inputs.size(); }
  bool has(size_t i) const { return i < n.inputs.size() && n.inputs[i] >= 0; }
  const ir::Value& in(size_t i) const {
    if (!has(i)) fail(n, "input " + std::to_string(i) + " is required");
    return g.values[n.inputs[i]];
  }
  Shape shape(size_t i) const { return in(i).shape(); }
  int64_t rank(size_t i) const { return static_cast<int64_t>(in(i).dims.size()); }
  ir::ElemType type(size_t i) const { return in(i).elem_type; }

  // The elements of constant integer input `i` (`what` names it in errors).
  std::vector<int64_t> const_ints(size_t i, const std::string& what) const {
    const ir::Value& v = in(i);
    if (!v.is_const) fail(n, "input '" + v.name + "' (" + what + ") must be a constant (computed from shapes only)");
    if (v.elem_type == ir::kFloat) fail(n, "input '" + v.name + "' (" + what + ") must be an integer tensor");
    return v.ints;
  }
  // The single element of constant input `i`, as a double.
  double const_scalar(size_t i, const std::string& what) const {
    const ir::Value& v = in(i);
    if (!v.is_const) fail(n, "input '" + v.name + "' (" + what + ") must be a constant");
    if (v.elements() != 1) fail(n, "input '" + v.name + "' (" + what + ") must have one element");
    return v.elem_type == ir::kFloat ? static_cast<double>(v.data[0]) : static_cast<double>(v.ints[0]);
  }

  bool has_attr(const std::string& k) const { return n.attrs.count(k) != 0; }
  int64_t ai(const std::string& k, int64_t def) const { return n.attr_int(k, def); }
  float af(const std::string& k, float def) const { return n.attr_float(k, def); }
  std::string as(const std::string& k, const std::string& def) const {
    auto it = n.attrs.find(k);
    return it == n.attrs.end() ? def : it->second.s;
  }
  std::vector<int64_t> ais(const std::string& k) const {
    auto it = n.attrs.find(k);
    return it == n.attrs.end() ? std::vector<int64_t>{} : it->second.ints;
  }
  void set_int(const std::string& k, int64_t v) {
    ir::Attr a;
    a.kind = K::Int;
    a.i = v;
    n.attrs[k] = a;
  }
  void set_ints(const std::string& k, std::vector<int64_t> v) {
    ir::Attr a;
    a.kind = K::Ints;
    a.ints = std::move(v);
    n.attrs[k] = a;
  }
  void set_float(const std::string& k, float v) {
    ir::Attr a;
    a.kind = K::Float;
    a.f = v;
    n.attrs[k] = a;
  }

  // `a` in [-r, r) (or [-r, r] with `inclusive`) made non-negative.
  int64_t axis(int64_t a, int64_t r, const std::string& what = "axis", bool inclusive = false) const {
    int64_t hi = inclusive ? r : r - 1;
    if (a < -r || a > hi)
      fail(n, what + "=" + std::to_string(a) + " is out of range for rank " + std::to_string(r));
    return a < 0 ? a + r : a;
  }
  std::vector<int64_t> axes(const std::vector<int64_t>& as, int64_t r) const {
    std::vector<int64_t> out;
    for (int64_t a : as) {
      int64_t x = axis(a, r, "axes");
      if (std::find(out.begin(), out.end(), x) != out.end()) fail(n, "axes " + ints_str(as) + " repeat an axis");
      out.push_back(x);
    }
    return out;
  }

  void out(size_t k, ir::ElemType t, const Shape& s) {
    if (k >= n.outputs.size() || n.outputs[k] < 0) return;
    for (int64_t d : s)
      if (d < 0) fail(n, "computed output shape " + ints_str(s) + " has a negative size");
    ir::Value& v = g.values[n.outputs[k]];
    std::string why = ir::shape_too_large(s);
    if (!why.empty()) fail(n, "output '" + v.name + "': " + why);
    v.elem_type = t;
    v.has_shape = true;
    v.dims.clear();
    for (int64_t d : s) v.dims.push_back(ir::Dim::sized(d));
  }
  bool out_used(size_t k) const { return k < n.outputs.size() && n.outputs[k] >= 0; }
};

// Multidirectional (numpy) broadcasting.
Shape broadcast(const ir::Node& n, const Shape& a, const Shape& b);
// The product of sizes taken from the model's attributes or constants (checked).
int64_t checked_prod(const ir::Node& n, const Shape& s);

// Shape functions several families use.
void same_types(InferCtx& c);                  // every present input has input 0's element type
Shape broadcast_all(InferCtx& c, size_t from);  // inputs from..end broadcast together
void infer_unary(InferCtx& c);                 // output 0 = input 0's type and shape

}  // namespace tpusim::compiler
