#include "shape_inference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <sstream>

#include "const_fold.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

using Shape = std::vector<int64_t>;
using K = ir::Attr::Kind;

[[noreturn]] void fail(const ir::Node& n, const std::string& msg) {
  throw Error("node '" + n.name + "' (" + n.op + "): " + msg);
}

std::string ints_str(const std::vector<int64_t>& v) { return ir::shape_str(v); }

// Checked size arithmetic: sizes come from the model, which may be crafted; a result past int64 fails naming
// the node instead of wrapping (undefined behaviour).
int64_t mul(const ir::Node& n, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(n, "size arithmetic overflows 64 bits (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return r;
}
int64_t add(const ir::Node& n, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(n, "size arithmetic overflows 64 bits (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return r;
}

// One node under inference: its inputs, attributes and outputs.
struct Ctx {
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
Shape broadcast(const ir::Node& n, const Shape& a, const Shape& b) {
  Shape r(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < r.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(n, "shapes " + ir::shape_str(a) + " and " + ir::shape_str(b) + " do not broadcast");
    r[r.size() - 1 - i] = da == 1 ? db : da;
  }
  return r;
}

// Products of parts of shapes that out() has checked (they cannot overflow).
int64_t prod(Shape::const_iterator b, Shape::const_iterator e) {
  return std::accumulate(b, e, int64_t{1}, std::multiplies<int64_t>());
}
int64_t prod(const Shape& s) { return prod(s.begin(), s.end()); }
// The product of sizes taken from the model's attributes or constants (checked).
int64_t checked_prod(const ir::Node& n, const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p = mul(n, p, d);
  return p;
}

// ---- element-wise ----

void infer_unary(Ctx& c) { c.out(0, c.type(0), c.shape(0)); }

void infer_not(Ctx& c) {
  if (c.type(0) != ir::kBool) fail(c.n, "input must be BOOL, got " + ir::elem_type_name(c.type(0)));
  c.out(0, ir::kBool, c.shape(0));
}

void infer_gelu(Ctx& c) {
  std::string a = c.as("approximate", "none");
  if (a != "none" && a != "tanh") fail(c.n, "approximate='" + a + "' is not supported");
  c.out(0, c.type(0), c.shape(0));
}

void same_types(Ctx& c) {
  for (size_t i = 1; i < c.ninputs(); ++i)
    if (c.has(i) && c.type(i) != c.type(0))
      fail(c.n, "inputs have different element types " + ir::elem_type_name(c.type(0)) + " and " +
                    ir::elem_type_name(c.type(i)));
}

Shape broadcast_all(Ctx& c, size_t from) {
  Shape s = c.shape(from);
  for (size_t i = from + 1; i < c.ninputs(); ++i) s = broadcast(c.n, s, c.shape(i));
  return s;
}

void infer_binary(Ctx& c) {  // Add Sub Mul Div Max Min (variadic for Max/Min)
  same_types(c);
  c.out(0, c.type(0), broadcast_all(c, 0));
}

void infer_pow(Ctx& c) { c.out(0, c.type(0), broadcast(c.n, c.shape(0), c.shape(1))); }

void infer_compare(Ctx& c) {  // Equal Less Greater LessOrEqual GreaterOrEqual
  same_types(c);
  c.out(0, ir::kBool, broadcast(c.n, c.shape(0), c.shape(1)));
}

void infer_logical(Ctx& c) {  // And Or Xor
  if (c.type(0) != ir::kBool || c.type(1) != ir::kBool) fail(c.n, "inputs must be BOOL");
  c.out(0, ir::kBool, broadcast(c.n, c.shape(0), c.shape(1)));
}

void infer_where(Ctx& c) {
  if (c.type(0) != ir::kBool) fail(c.n, "condition must be BOOL, got " + ir::elem_type_name(c.type(0)));
  if (c.type(1) != c.type(2))
    fail(c.n, "X and Y have different element types " + ir::elem_type_name(c.type(1)) + " and " +
                  ir::elem_type_name(c.type(2)));
  c.out(0, c.type(1), broadcast_all(c, 0));
}

// Clip: min/max as inputs (opset 11+) or attributes (before); recorded as float attributes "min"/"max".
void infer_clip(Ctx& c) {
  if (c.has(1)) c.set_float("min", static_cast<float>(c.const_scalar(1, "min")));
  if (c.has(2)) c.set_float("max", static_cast<float>(c.const_scalar(2, "max")));
  c.out(0, c.type(0), c.shape(0));
}

void infer_dropout(Ctx& c) {
  if (c.has(2) && !c.in(2).is_const) fail(c.n, "training_mode must be a constant");
  if (c.has(2) && c.const_scalar(2, "training_mode") != 0)
    fail(c.n, "training_mode=1 is not supported (inference only)");
  c.out(0, c.type(0), c.shape(0));
  c.out(1, ir::kBool, c.shape(0));
}

// ---- matrix products ----

void infer_matmul(Ctx& c) {
  same_types(c);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) fail(c.n, "operands must not be scalars");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], nn = b.back();
  if (k != k2)
    fail(c.n, "inner dimensions differ: " + ir::shape_str(c.shape(0)) + " x " + ir::shape_str(c.shape(1)));
  Shape batch = broadcast(c.n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!a1) batch.push_back(m);
  if (!b1) batch.push_back(nn);
  c.out(0, c.type(0), batch);
}

// Gemm: alpha, beta, transA, transB are recorded as attributes; the lowering decides which it supports.
void infer_gemm(Ctx& c) {
  same_types(c);
  int64_t ta = c.ai("transA", 0), tb = c.ai("transB", 0);
  if (ta != 0 && ta != 1) fail(c.n, "transA=" + std::to_string(ta) + " is not supported");
  if (tb != 0 && tb != 1) fail(c.n, "transB=" + std::to_string(tb) + " is not supported");
  const Shape a = c.shape(0), b = c.shape(1);
  if (a.size() != 2 || b.size() != 2)
    fail(c.n, "A and B must be 2-D, got " + ir::shape_str(a) + " and " + ir::shape_str(b));
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t k2 = tb ? b[1] : b[0], cols = tb ? b[0] : b[1];
  if (k != k2)
    fail(c.n, "inner dimensions differ: A is " + ir::shape_str(a) + ", B is " + ir::shape_str(b) + " (transA=" +
                  std::to_string(ta) + ", transB=" + std::to_string(tb) + ")");
  Shape out{m, cols};
  if (c.has(2) && broadcast(c.n, out, c.shape(2)) != out)
    fail(c.n, "C of shape " + ir::shape_str(c.shape(2)) + " does not broadcast to " + ir::shape_str(out));
  c.out(0, c.type(0), out);
}

// ---- convolution and pooling ----

// Spatial output sizes of Conv/MaxPool/AveragePool; rewrites the node's attributes to the explicit form:
// kernel_shape, strides, pads (begins then ends), dilations, no auto_pad.
Shape conv_spatial(Ctx& c, const Shape& x, const Shape& kernel, bool ceil_mode) {
  const size_t sp = kernel.size();
  if (x.size() != sp + 2) fail(c.n, "input " + ir::shape_str(x) + " does not match the kernel rank");
  Shape strides = c.ais("strides"), dil = c.ais("dilations"), pads = c.ais("pads");
  if (strides.empty()) strides.assign(sp, 1);
  if (dil.empty()) dil.assign(sp, 1);
  if (pads.empty()) pads.assign(2 * sp, 0);
  if (strides.size() != sp || dil.size() != sp || pads.size() != 2 * sp)
    fail(c.n, "strides/dilations/pads do not match " + std::to_string(sp) + " spatial dimensions");
  for (size_t i = 0; i < sp; ++i) {
    if (strides[i] < 1) fail(c.n, "strides=" + ints_str(strides) + " must be positive");
    if (dil[i] < 1) fail(c.n, "dilations=" + ints_str(dil) + " must be positive");
  }
  for (int64_t p : pads)
    if (p < 0) fail(c.n, "pads=" + ints_str(pads) + " must not be negative");
  std::string auto_pad = c.as("auto_pad", "NOTSET");
  if (auto_pad.empty()) auto_pad = "NOTSET";
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    fail(c.n, "auto_pad='" + auto_pad + "' is not supported");
  Shape out(sp);
  for (size_t i = 0; i < sp; ++i) {
    const ir::Node& n = c.n;
    int64_t in = x[2 + i], ext = add(n, mul(n, kernel[i] - 1, dil[i]), 1);
    if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out[i] = add(n, in, strides[i] - 1) / strides[i];
      int64_t total = std::max<int64_t>(0, add(n, mul(n, out[i] - 1, strides[i]), ext - in));
      pads[i] = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pads[sp + i] = total - pads[i];
      continue;
    }
    if (auto_pad == "VALID") pads[i] = pads[sp + i] = 0;
    int64_t span = add(n, add(n, in, pads[i]), pads[sp + i]) - ext;
    if (span < 0)
      fail(c.n, "the kernel (extent " + std::to_string(ext) + ") is larger than the padded input " +
                    ir::shape_str(x));
    out[i] = (ceil_mode ? add(n, span, strides[i] - 1) / strides[i] : span / strides[i]) + 1;
    if (ceil_mode && mul(n, out[i] - 1, strides[i]) >= in + pads[i]) --out[i];  // no window starting in the end pad
  }
  c.n.attrs.erase("auto_pad");
  c.set_ints("kernel_shape", kernel);
  c.set_ints("strides", strides);
  c.set_ints("pads", pads);
  c.set_ints("dilations", dil);
  return out;
}

void infer_conv(Ctx& c) {
  same_types(c);
  const Shape x = c.shape(0), w = c.shape(1);
  if (x.size() < 3 || w.size() != x.size())
    fail(c.n, "input " + ir::shape_str(x) + " and weight " + ir::shape_str(w) + " must be N-D (N >= 3) alike");
  int64_t group = c.ai("group", 1);
  if (group < 1 || x[1] != mul(c.n, w[1], group) || w[0] % group != 0)
    fail(c.n, "input " + ir::shape_str(x) + ", weight " + ir::shape_str(w) + " and group=" + std::to_string(group) +
                  " do not fit");
  Shape kernel(w.begin() + 2, w.end());
  if (c.has_attr("kernel_shape") && c.ais("kernel_shape") != kernel)
    fail(c.n, "kernel_shape=" + ints_str(c.ais("kernel_shape")) + " differs from the weight " + ir::shape_str(w));
  if (c.has(2) && c.shape(2) != Shape{w[0]})
    fail(c.n, "bias " + ir::shape_str(c.shape(2)) + " must be [" + std::to_string(w[0]) + "]");
  Shape sp = conv_spatial(c, x, kernel, false);
  c.set_int("group", group);
  Shape out{x[0], w[0]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.out(0, c.type(0), out);
}

void infer_pool(Ctx& c) {
  const Shape x = c.shape(0);
  if (!c.has_attr("kernel_shape")) fail(c.n, "attribute 'kernel_shape' is required");
  int64_t ceil_mode = c.ai("ceil_mode", 0);
  if (ceil_mode != 0 && ceil_mode != 1) fail(c.n, "ceil_mode=" + std::to_string(ceil_mode) + " is not supported");
  if (c.n.op == "MaxPool" && c.ai("storage_order", 0) != 0) fail(c.n, "storage_order=1 is not supported");
  Shape sp = conv_spatial(c, x, c.ais("kernel_shape"), ceil_mode == 1);
  Shape out{x[0], x[1]};
  out.insert(out.end(), sp.begin(), sp.end());
  c.out(0, c.type(0), out);
  c.out(1, ir::kInt64, out);  // MaxPool's Indices
}

void infer_global_pool(Ctx& c) {
  Shape x = c.shape(0);
  if (x.size() < 3) fail(c.n, "input " + ir::shape_str(x) + " must have spatial dimensions");
  std::fill(x.begin() + 2, x.end(), 1);
  c.out(0, c.type(0), x);
}

void infer_batchnorm(Ctx& c) {
  if (c.ai("training_mode", 0) != 0) fail(c.n, "training_mode=1 is not supported (inference only)");
  for (size_t k = 1; k < c.n.outputs.size(); ++k)
    if (c.out_used(k)) fail(c.n, "the training outputs (running mean/var) are not supported");
  const Shape x = c.shape(0);
  if (x.size() < 2) fail(c.n, "input " + ir::shape_str(x) + " must have a channel dimension");
  for (size_t i = 1; i < 5; ++i)
    if (c.shape(i) != Shape{x[1]})
      fail(c.n, "input '" + c.in(i).name + "' " + ir::shape_str(c.shape(i)) + " must be [" + std::to_string(x[1]) +
                    "]");
  c.out(0, c.type(0), x);
}

// ---- normalisation ----

void infer_softmax(Ctx& c) {
  c.set_int("axis", c.axis(c.ai("axis", -1), c.rank(0)));
  c.out(0, c.type(0), c.shape(0));
}

void infer_layernorm(Ctx& c) {
  const Shape x = c.shape(0);
  int64_t axis = c.axis(c.ai("axis", -1), c.rank(0));
  c.set_int("axis", axis);
  Shape norm(x.begin() + axis, x.end());
  for (size_t i = 1; i < 3; ++i)
    if (c.has(i) && broadcast(c.n, norm, c.shape(i)) != norm)
      fail(c.n, "input '" + c.in(i).name + "' " + ir::shape_str(c.shape(i)) + " does not broadcast to " +
                    ir::shape_str(norm));
  c.out(0, c.type(0), x);
  Shape stat = x;
  std::fill(stat.begin() + axis, stat.end(), 1);
  c.out(1, ir::kFloat, stat);
  c.out(2, ir::kFloat, stat);
}

// ReduceMean/Sum/Max: axes from the attribute (ReduceSum before 13, the others before 18) or input 1. Recorded as
// "axes" (non-negative, sorted; every axis when all are reduced), "keepdims", and noop_with_empty_axes=1 with
// axes=[] for a no-op.
void infer_reduce(Ctx& c) {
  const Shape x = c.shape(0);
  const int64_t r = c.rank(0);
  std::vector<int64_t> axes;
  if (c.has(1)) axes = c.const_ints(1, "axes");
  else axes = c.ais("axes");
  int64_t keep = c.ai("keepdims", 1), noop = c.ai("noop_with_empty_axes", 0);
  if (keep != 0 && keep != 1) fail(c.n, "keepdims=" + std::to_string(keep) + " is not supported");
  std::vector<int64_t> norm = c.axes(axes, r);
  if (norm.empty() && !noop) {
    norm.resize(r);
    std::iota(norm.begin(), norm.end(), 0);
  }
  std::sort(norm.begin(), norm.end());
  c.set_ints("axes", norm);
  c.set_int("keepdims", keep);
  if (norm.empty()) {
    c.set_int("noop_with_empty_axes", 1);
    c.out(0, c.type(0), x);
    return;
  }
  c.n.attrs.erase("noop_with_empty_axes");
  Shape out;
  for (int64_t i = 0; i < r; ++i) {
    bool red = std::binary_search(norm.begin(), norm.end(), i);
    if (!red) out.push_back(x[i]);
    else if (keep) out.push_back(1);
  }
  c.out(0, c.type(0), out);
}

// ---- shape manipulation ----

void infer_flatten(Ctx& c) {
  const Shape x = c.shape(0);
  int64_t axis = c.axis(c.ai("axis", 1), c.rank(0), "axis", true);
  c.set_int("axis", axis);
  c.out(0, c.type(0), {prod(x.begin(), x.begin() + axis), prod(x.begin() + axis, x.end())});
}

void infer_concat(Ctx& c) {
  same_types(c);
  if (!c.has_attr("axis")) fail(c.n, "attribute 'axis' is required");
  Shape out = c.shape(0);
  int64_t axis = c.axis(c.ai("axis", 0), c.rank(0));
  c.set_int("axis", axis);
  for (size_t i = 1; i < c.ninputs(); ++i) {
    Shape s = c.shape(i);
    bool fits = s.size() == out.size();
    for (size_t d = 0; fits && d < s.size(); ++d) fits = static_cast<int64_t>(d) == axis || s[d] == out[d];
    if (!fits) fail(c.n, "inputs " + ir::shape_str(c.shape(0)) + " and " + ir::shape_str(s) + " do not concatenate");
    out[axis] = add(c.n, out[axis], s[axis]);
  }
  c.out(0, c.type(0), out);
}

// Split: sizes from input 1 (opset 13+), the `split` attribute (before), or equal parts (the last one smaller when
// it does not divide, as opset 18); recorded as "split" and a non-negative "axis".
void infer_split(Ctx& c) {
  const Shape x = c.shape(0);
  int64_t axis = c.axis(c.ai("axis", 0), c.rank(0));
  c.set_int("axis", axis);
  const int64_t parts = static_cast<int64_t>(c.n.outputs.size());
  std::vector<int64_t> split = c.has(1) ? c.const_ints(1, "split") : c.ais("split");
  if (split.empty()) {
    int64_t chunk = (x[axis] + parts - 1) / parts;
    for (int64_t i = 0, left = x[axis]; i < parts; ++i, left -= chunk)
      split.push_back(std::max<int64_t>(0, std::min(chunk, left)));
  }
  if (static_cast<int64_t>(split.size()) != parts)
    fail(c.n, "split=" + ints_str(split) + " does not give one size per output (" + std::to_string(parts) + ")");
  int64_t sum = 0;
  for (int64_t s : split) {
    if (s < 0) fail(c.n, "split=" + ints_str(split) + " has a negative size");
    sum = add(c.n, sum, s);
  }
  if (sum != x[axis])
    fail(c.n, "split=" + ints_str(split) + " does not add up to dimension " + std::to_string(axis) + " of " +
                  ir::shape_str(x));
  c.set_ints("split", split);
  c.n.attrs.erase("num_outputs");
  for (int64_t i = 0; i < parts; ++i) {
    Shape s = x;
    s[axis] = split[i];
    c.out(i, c.type(0), s);
  }
}


// Slice: starts/ends/axes/steps from inputs (opset 10+) or attributes (before). Recorded per axis of the input,
// clamped: "starts", "ends" (-1 past the beginning for negative steps), "steps" (every axis listed).
void infer_slice(Ctx& c) {
  const Shape x = c.shape(0);
  const int64_t r = c.rank(0);
  std::vector<int64_t> starts, ends, axes, steps;
  if (c.ninputs() > 1) {
    starts = c.const_ints(1, "starts");
    ends = c.const_ints(2, "ends");
    if (c.has(3)) axes = c.const_ints(3, "axes");
    if (c.has(4)) steps = c.const_ints(4, "steps");
  } else {
    starts = c.ais("starts");
    ends = c.ais("ends");
    axes = c.ais("axes");
    steps = c.ais("steps");
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    fail(c.n, "starts, ends, axes and steps differ in length");
  axes = c.axes(axes, r);
  Shape out = x;
  std::vector<int64_t> st(r, 0), en(x), sp(r, 1);
  for (size_t i = 0; i < axes.size(); ++i) {
    int64_t a = axes[i], d = x[a], step = steps[i];
    if (step == 0) fail(c.n, "steps must not be 0");
    int64_t s = starts[i], e = ends[i];
    if (s < 0) s += d;
    if (e < 0) e += d;
    if (d == 0) {
      s = e = 0;
      out[a] = 0;
    } else if (step > 0) {
      s = std::clamp<int64_t>(s, 0, d);
      e = std::clamp<int64_t>(e, 0, d);
      out[a] = e > s ? (e - s + step - 1) / step : 0;
    } else {
      s = std::clamp<int64_t>(s, 0, d - 1);
      e = std::clamp<int64_t>(e, -1, d - 1);
      out[a] = s > e ? (s - e - step - 1) / -step : 0;
    }
    st[a] = s;
    en[a] = e;
    sp[a] = step;
  }
  c.set_ints("starts", st);
  c.set_ints("ends", en);
  c.set_ints("steps", sp);
  std::vector<int64_t> all(r);
  std::iota(all.begin(), all.end(), 0);
  c.set_ints("axes", all);
  c.out(0, c.type(0), out);
}

void infer_gather(Ctx& c) {
  const Shape x = c.shape(0), idx = c.shape(1);
  if (c.type(1) != ir::kInt64 && c.type(1) != ir::kInt32)
    fail(c.n, "indices must be INT64 or INT32, got " + ir::elem_type_name(c.type(1)));
  int64_t axis = c.axis(c.ai("axis", 0), c.rank(0));
  c.set_int("axis", axis);
  if (c.in(1).is_const)
    for (int64_t i : c.in(1).ints)
      if (i < -x[axis] || i >= x[axis])
        fail(c.n, "index " + std::to_string(i) + " is out of range for dimension " + std::to_string(axis) + " of " +
                      ir::shape_str(x));
  Shape out(x.begin(), x.begin() + axis);
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), x.begin() + axis + 1, x.end());
  c.out(0, c.type(0), out);
}

void infer_reshape(Ctx& c) {
  const Shape x = c.shape(0);
  std::vector<int64_t> want = c.const_ints(1, "shape");
  bool allowzero = c.ai("allowzero", 0) != 0;
  Shape out;
  int infer_at = -1;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t d = want[i];
    if (d == 0 && !allowzero) {
      if (i >= x.size()) fail(c.n, "shape " + ints_str(want) + " copies dimension " + std::to_string(i) + " of " + ir::shape_str(x));
      d = x[i];
    } else if (d == -1) {
      if (infer_at >= 0) fail(c.n, "shape " + ints_str(want) + " has more than one -1");
      infer_at = static_cast<int>(i);
      d = 1;
    } else if (d < 0) {
      fail(c.n, "shape " + ints_str(want) + " has a negative size");
    }
    out.push_back(d);
  }
  int64_t total = prod(x), have = checked_prod(c.n, out);
  if (infer_at >= 0) {
    if (have == 0 || total % have != 0)
      fail(c.n, "cannot reshape " + ir::shape_str(x) + " to " + ints_str(want));
    out[infer_at] = total / have;
  } else if (have != total) {
    fail(c.n, "cannot reshape " + ir::shape_str(x) + " to " + ints_str(want));
  }
  c.out(0, c.type(0), out);
}

void infer_transpose(Ctx& c) {
  const Shape x = c.shape(0);
  std::vector<int64_t> perm = c.ais("perm");
  if (!c.has_attr("perm"))
    for (int64_t i = c.rank(0) - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(x.size());
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota) fail(c.n, "perm=" + ints_str(perm) + " is not a permutation of the " + std::to_string(x.size()) + " axes");
  c.set_ints("perm", perm);
  Shape out;
  for (int64_t p : perm) out.push_back(x[p]);
  c.out(0, c.type(0), out);
}

void infer_squeeze(Ctx& c) {
  const Shape x = c.shape(0);
  std::vector<int64_t> axes = c.has(1) ? c.const_ints(1, "axes") : c.ais("axes");
  axes = c.axes(axes, c.rank(0));
  if (axes.empty())
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i] == 1) axes.push_back(static_cast<int64_t>(i));
  std::sort(axes.begin(), axes.end());
  Shape out;
  for (size_t i = 0; i < x.size(); ++i) {
    bool sq = std::binary_search(axes.begin(), axes.end(), static_cast<int64_t>(i));
    if (sq && x[i] != 1) fail(c.n, "dimension " + std::to_string(i) + " of " + ir::shape_str(x) + " is not 1");
    if (!sq) out.push_back(x[i]);
  }
  c.set_ints("axes", axes);
  c.out(0, c.type(0), out);
}

void infer_unsqueeze(Ctx& c) {
  const Shape x = c.shape(0);
  std::vector<int64_t> axes = c.has(1) ? c.const_ints(1, "axes") : c.ais("axes");
  if (axes.empty()) fail(c.n, "axes are required");
  const int64_t r = c.rank(0) + static_cast<int64_t>(axes.size());
  axes = c.axes(axes, r);
  std::sort(axes.begin(), axes.end());
  Shape out;
  for (int64_t i = 0, j = 0; i < r; ++i) out.push_back(std::binary_search(axes.begin(), axes.end(), i) ? 1 : x[j++]);
  c.set_ints("axes", axes);
  c.out(0, c.type(0), out);
}

void infer_cast(Ctx& c) {
  if (!c.has_attr("to")) fail(c.n, "attribute 'to' is required");
  int64_t to = c.ai("to", 0);
  if (to == 8 /* STRING */ || to <= 0 || to > 16)
    fail(c.n, "to=" + ir::elem_type_name(static_cast<ir::ElemType>(to)) + " is not supported");
  c.out(0, static_cast<ir::ElemType>(to), c.shape(0));
}

void infer_shape(Ctx& c) {
  const int64_t r = c.rank(0);
  int64_t s = c.ai("start", 0), e = c.ai("end", r);
  if (s < 0) s += r;
  if (e < 0) e += r;
  s = std::clamp<int64_t>(s, 0, r);
  e = std::clamp<int64_t>(e, 0, r);
  c.set_int("start", s);
  c.set_int("end", e);
  c.out(0, ir::kInt64, {std::max<int64_t>(0, e - s)});
}

void infer_size(Ctx& c) { c.out(0, ir::kInt64, {}); }

void infer_constant_of_shape(Ctx& c) {
  std::vector<int64_t> s = c.const_ints(0, "shape");
  ir::ElemType t = ir::kFloat;
  auto it = c.n.attrs.find("value");
  if (it != c.n.attrs.end()) {
    if (it->second.t_type == 0 || it->second.t.size() != 1) fail(c.n, "attribute 'value' must be a one-element tensor");
    t = it->second.t_type;
  }
  c.out(0, t, s);
}

void infer_range(Ctx& c) {
  same_types(c);
  double start = c.const_scalar(0, "start"), limit = c.const_scalar(1, "limit"), delta = c.const_scalar(2, "delta");
  if (delta == 0) fail(c.n, "delta must not be 0");
  int64_t len;
  if (c.type(0) == ir::kFloat) {
    double n = std::ceil((limit - start) / delta);
    if (!(n < 0x1p62)) fail(c.n, "start, limit and delta give a length past 2^62 (or not a number)");
    len = static_cast<int64_t>(std::max(n, 0.0));
  } else {  // in 128 bits: limit - start may pass int64
    __int128 s = c.const_ints(0, "start").at(0), l = c.const_ints(1, "limit").at(0), d = c.const_ints(2, "delta").at(0);
    __int128 span = l - s;
    __int128 n = d > 0 ? (span > 0 ? (span + d - 1) / d : 0) : (span < 0 ? (-span - d - 1) / -d : 0);
    if (n >= (__int128{1} << 62)) fail(c.n, "start, limit and delta give a length past 2^62");
    len = static_cast<int64_t>(n);
  }
  c.out(0, c.type(0), {std::max<int64_t>(0, len)});
}

void infer_expand(Ctx& c) { c.out(0, c.type(0), broadcast(c.n, c.shape(0), c.const_ints(1, "shape"))); }

void infer_tile(Ctx& c) {
  Shape x = c.shape(0);
  std::vector<int64_t> rep = c.const_ints(1, "repeats");
  if (rep.size() != x.size()) fail(c.n, "repeats " + ints_str(rep) + " must have one entry per axis of " + ir::shape_str(x));
  for (size_t i = 0; i < x.size(); ++i) {
    if (rep[i] < 0) fail(c.n, "repeats " + ints_str(rep) + " must not be negative");
    x[i] = mul(c.n, x[i], rep[i]);
  }
  c.out(0, c.type(0), x);
}

// Pad (constant mode): pads from input 1 (opset 11+) or the attribute; recorded as "pads" (begins then ends, every
// axis) and the float "value".
void infer_pad(Ctx& c) {
  std::string mode = c.as("mode", "constant");
  if (mode != "constant") fail(c.n, "mode='" + mode + "' is not supported (only 'constant')");
  Shape x = c.shape(0);
  const int64_t r = c.rank(0);
  std::vector<int64_t> pads = c.has(1) ? c.const_ints(1, "pads") : c.ais("pads");
  std::vector<int64_t> axes;
  if (c.has(3)) axes = c.axes(c.const_ints(3, "axes"), r);
  else for (int64_t i = 0; i < r; ++i) axes.push_back(i);
  if (pads.size() != 2 * axes.size())
    fail(c.n, "pads " + ints_str(pads) + " must have two entries per padded axis");
  std::vector<int64_t> full(2 * r, 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    full[axes[i]] = pads[i];
    full[r + axes[i]] = pads[axes.size() + i];
  }
  float value = c.af("value", 0);
  if (c.has(2)) value = static_cast<float>(c.const_scalar(2, "constant_value"));
  for (int64_t i = 0; i < r; ++i) {
    x[i] = add(c.n, x[i], add(c.n, full[i], full[r + i]));
    if (x[i] < 0) fail(c.n, "pads " + ints_str(pads) + " cut more than the input " + ir::shape_str(c.shape(0)));
  }
  c.set_ints("pads", full);
  c.set_float("value", value);
  c.out(0, c.type(0), x);
}

void infer_trilu(Ctx& c) {
  if (c.rank(0) < 2) fail(c.n, "input must have rank 2 or more");
  if (c.has(1)) c.const_scalar(1, "k");
  c.out(0, c.type(0), c.shape(0));
}

// The supported operators: input and output counts, allowed attributes (with their kinds), shape function.
constexpr size_t kMany = 1000;
struct OpRule {
  size_t min_inputs, max_inputs, min_outputs, max_outputs;
  std::map<std::string, K> attrs;
  void (*infer)(Ctx&);
};

const std::map<std::string, OpRule>& op_rules() {
  const std::map<std::string, K> conv_attrs = {{"auto_pad", K::String}, {"dilations", K::Ints},
                                               {"kernel_shape", K::Ints}, {"pads", K::Ints},
                                               {"strides", K::Ints}};
  auto with = [](std::map<std::string, K> m, std::map<std::string, K> more) {
    m.insert(more.begin(), more.end());
    return m;
  };
  const std::map<std::string, K> reduce = {{"axes", K::Ints}, {"keepdims", K::Int}, {"noop_with_empty_axes", K::Int}};
  static const std::map<std::string, OpRule> rules = {
      {"Identity", {1, 1, 1, 1, {}, infer_unary}},
      {"Relu", {1, 1, 1, 1, {}, infer_unary}},
      {"Sigmoid", {1, 1, 1, 1, {}, infer_unary}},
      {"Tanh", {1, 1, 1, 1, {}, infer_unary}},
      {"Erf", {1, 1, 1, 1, {}, infer_unary}},
      {"Sqrt", {1, 1, 1, 1, {}, infer_unary}},
      {"Exp", {1, 1, 1, 1, {}, infer_unary}},
      {"Log", {1, 1, 1, 1, {}, infer_unary}},
      {"Sin", {1, 1, 1, 1, {}, infer_unary}},
      {"Cos", {1, 1, 1, 1, {}, infer_unary}},
      {"Floor", {1, 1, 1, 1, {}, infer_unary}},
      {"Ceil", {1, 1, 1, 1, {}, infer_unary}},
      {"Round", {1, 1, 1, 1, {}, infer_unary}},
      {"Sign", {1, 1, 1, 1, {}, infer_unary}},
      {"Softplus", {1, 1, 1, 1, {}, infer_unary}},
      {"Mish", {1, 1, 1, 1, {}, infer_unary}},
      {"Neg", {1, 1, 1, 1, {}, infer_unary}},
      {"Abs", {1, 1, 1, 1, {}, infer_unary}},
      {"Reciprocal", {1, 1, 1, 1, {}, infer_unary}},
      {"HardSigmoid", {1, 1, 1, 1, {{"alpha", K::Float}, {"beta", K::Float}}, infer_unary}},
      {"HardSwish", {1, 1, 1, 1, {}, infer_unary}},
      {"LeakyRelu", {1, 1, 1, 1, {{"alpha", K::Float}}, infer_unary}},
      {"Not", {1, 1, 1, 1, {}, infer_not}},
      {"Gelu", {1, 1, 1, 1, {{"approximate", K::String}}, infer_gelu}},
      {"Clip", {1, 3, 1, 1, {{"min", K::Float}, {"max", K::Float}}, infer_clip}},
      {"Dropout", {1, 3, 1, 2, {{"seed", K::Int}, {"ratio", K::Float}}, infer_dropout}},
      {"Add", {2, 2, 1, 1, {}, infer_binary}},
      {"Sub", {2, 2, 1, 1, {}, infer_binary}},
      {"Mul", {2, 2, 1, 1, {}, infer_binary}},
      {"Div", {2, 2, 1, 1, {}, infer_binary}},
      {"Max", {1, kMany, 1, 1, {}, infer_binary}},
      {"Min", {1, kMany, 1, 1, {}, infer_binary}},
      {"Pow", {2, 2, 1, 1, {}, infer_pow}},
      {"Equal", {2, 2, 1, 1, {}, infer_compare}},
      {"Less", {2, 2, 1, 1, {}, infer_compare}},
      {"Greater", {2, 2, 1, 1, {}, infer_compare}},
      {"LessOrEqual", {2, 2, 1, 1, {}, infer_compare}},
      {"GreaterOrEqual", {2, 2, 1, 1, {}, infer_compare}},
      {"And", {2, 2, 1, 1, {}, infer_logical}},
      {"Or", {2, 2, 1, 1, {}, infer_logical}},
      {"Xor", {2, 2, 1, 1, {}, infer_logical}},
      {"Where", {3, 3, 1, 1, {}, infer_where}},
      {"MatMul", {2, 2, 1, 1, {}, infer_matmul}},
      {"Gemm", {2, 3, 1, 1, {{"alpha", K::Float}, {"beta", K::Float}, {"transA", K::Int}, {"transB", K::Int}},
                infer_gemm}},
      {"Conv", {2, 3, 1, 1, with(conv_attrs, {{"group", K::Int}}), infer_conv}},
      {"MaxPool", {1, 1, 1, 2, with(conv_attrs, {{"ceil_mode", K::Int}, {"storage_order", K::Int}}), infer_pool}},
      {"AveragePool", {1, 1, 1, 1, with(conv_attrs, {{"ceil_mode", K::Int}, {"count_include_pad", K::Int}}),
                       infer_pool}},
      {"GlobalAveragePool", {1, 1, 1, 1, {}, infer_global_pool}},
      {"GlobalMaxPool", {1, 1, 1, 1, {}, infer_global_pool}},
      {"BatchNormalization", {5, 5, 1, 3, {{"epsilon", K::Float}, {"momentum", K::Float}, {"training_mode", K::Int}},
                              infer_batchnorm}},
      {"Softmax", {1, 1, 1, 1, {{"axis", K::Int}}, infer_softmax}},
      {"LogSoftmax", {1, 1, 1, 1, {{"axis", K::Int}}, infer_softmax}},
      {"LayerNormalization", {2, 3, 1, 3, {{"axis", K::Int}, {"epsilon", K::Float}, {"stash_type", K::Int}},
                              infer_layernorm}},
      {"ReduceMean", {1, 2, 1, 1, reduce, infer_reduce}},
      {"ReduceSum", {1, 2, 1, 1, reduce, infer_reduce}},
      {"ReduceMax", {1, 2, 1, 1, reduce, infer_reduce}},
      {"ReduceMin", {1, 2, 1, 1, reduce, infer_reduce}},
      {"Flatten", {1, 1, 1, 1, {{"axis", K::Int}}, infer_flatten}},
      {"Concat", {1, kMany, 1, 1, {{"axis", K::Int}}, infer_concat}},
      {"Split", {1, 2, 1, kMany, {{"axis", K::Int}, {"split", K::Ints}, {"num_outputs", K::Int}}, infer_split}},
      {"Slice", {1, 5, 1, 1, {{"starts", K::Ints}, {"ends", K::Ints}, {"axes", K::Ints}, {"steps", K::Ints}},
                 infer_slice}},
      {"Gather", {2, 2, 1, 1, {{"axis", K::Int}}, infer_gather}},
      {"Reshape", {2, 2, 1, 1, {{"allowzero", K::Int}}, infer_reshape}},
      {"Transpose", {1, 1, 1, 1, {{"perm", K::Ints}}, infer_transpose}},
      {"Squeeze", {1, 2, 1, 1, {{"axes", K::Ints}}, infer_squeeze}},
      {"Unsqueeze", {1, 2, 1, 1, {{"axes", K::Ints}}, infer_unsqueeze}},
      {"Cast", {1, 1, 1, 1, {{"to", K::Int}, {"saturate", K::Int}}, infer_cast}},
      {"Shape", {1, 1, 1, 1, {{"start", K::Int}, {"end", K::Int}}, infer_shape}},
      {"Size", {1, 1, 1, 1, {}, infer_size}},
      {"ConstantOfShape", {1, 1, 1, 1, {{"value", K::Other}}, infer_constant_of_shape}},
      {"Range", {3, 3, 1, 1, {}, infer_range}},
      {"Expand", {2, 2, 1, 1, {}, infer_expand}},
      {"Tile", {2, 2, 1, 1, {}, infer_tile}},
      {"Pad", {1, 4, 1, 1, {{"mode", K::String}, {"pads", K::Ints}, {"value", K::Float}}, infer_pad}},
      {"Trilu", {1, 2, 1, 1, {{"upper", K::Int}}, infer_trilu}},
  };
  return rules;
}

const char* kind_name(K k) {
  switch (k) {
    case K::Int: return "an int";
    case K::Float: return "a float";
    case K::String: return "a string";
    case K::Ints: return "a list of ints";
    case K::Floats: return "a list of floats";
    default: return "a tensor";
  }
}

void check_attrs(const ir::Node& n, const OpRule& rule) {
  for (const auto& [key, attr] : n.attrs) {
    auto it = rule.attrs.find(key);
    if (it == rule.attrs.end()) fail(n, "attribute '" + key + "' is not supported");
    bool ok = attr.kind == it->second;
    if (it->second == K::Other) ok = attr.t_type != 0;  // a tensor
    if (!ok) fail(n, "attribute '" + key + "' must be " + kind_name(it->second));
  }
}

// Fills in the input's dynamic dimensions from `given`, or checks that `given` agrees with its static ones.
void resolve_input(ir::Value& v, const std::vector<int64_t>* given) {
  if (given) {
    bool agrees = !v.has_shape || v.dims.size() == given->size();
    for (size_t i = 0; agrees && v.has_shape && i < given->size(); ++i)
      agrees = !v.dims[i].known() || v.dims[i].size == (*given)[i];
    if (!agrees)
      throw Error("input '" + v.name + "': the given shape " + ir::shape_str(*given) +
                  " does not match the model's " + ir::shape_str(v));
    if (std::any_of(given->begin(), given->end(), [](int64_t d) { return d <= 0; }))
      throw Error("input '" + v.name + "': the given shape " + ir::shape_str(*given) + " has a size below 1");
    if (std::string why = ir::shape_too_large(*given); !why.empty())
      throw Error("input '" + v.name + "': the given " + why);
    v.has_shape = true;
    v.dims.clear();
    for (int64_t d : *given) v.dims.push_back(ir::Dim::sized(d));
    return;
  }
  if (!v.has_shape) throw Error("input '" + v.name + "' has no shape in the model: give its shape");
  for (size_t i = 0; i < v.dims.size(); ++i)
    if (!v.dims[i].known())
      throw Error("input '" + v.name + "' has a dynamic dimension " +
                  (v.dims[i].param.empty() ? std::to_string(i) + " (unnamed)" : "'" + v.dims[i].param + "'") +
                  ": give its shape");
  std::vector<int64_t> dims;
  for (const ir::Dim& d : v.dims) dims.push_back(d.size);
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; }))
    throw Error("input '" + v.name + "' has a negative size in the model: " + ir::shape_str(dims));
  if (std::string why = ir::shape_too_large(dims); !why.empty()) throw Error("input '" + v.name + "': " + why);
}

}  // namespace

void infer_node(ir::Graph& g, int node) {
  ir::Node& n = g.nodes[node];
  auto rule_it = op_rules().find(n.op);
  if (rule_it == op_rules().end())
    throw Error("unsupported operator '" + n.op + "' (node '" + n.name + "') in model '" + g.model_name + "'");
  const OpRule& rule = rule_it->second;
  if (n.inputs.size() < rule.min_inputs || n.inputs.size() > rule.max_inputs)
    fail(n, "expected " + std::to_string(rule.min_inputs) +
                (rule.max_inputs == kMany ? " or more"
                 : rule.max_inputs > rule.min_inputs ? " to " + std::to_string(rule.max_inputs)
                                                     : "") +
                " inputs, got " + std::to_string(n.inputs.size()));
  if (n.outputs.size() < rule.min_outputs || n.outputs.size() > rule.max_outputs || n.outputs[0] < 0)
    fail(n, "expected " + std::to_string(rule.min_outputs) +
                (rule.max_outputs == kMany ? " or more"
                 : rule.max_outputs > rule.min_outputs ? " to " + std::to_string(rule.max_outputs)
                                                       : "") +
                " outputs, got " + std::to_string(n.outputs.size()));
  check_attrs(n, rule);
  for (int id : n.inputs)
    if (id >= 0 && !g.values[id].has_shape) fail(n, "input '" + g.values[id].name + "' has no known shape");
  Ctx c{g, n};
  rule.infer(c);
}

void infer_shapes(ir::Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  for (const auto& [name, shape] : input_shapes) {
    auto it = g.value_index.find(name);
    if (it == g.value_index.end() || std::find(g.inputs.begin(), g.inputs.end(), it->second) == g.inputs.end()) {
      std::string names;
      for (int in : g.inputs) names += (names.empty() ? "" : ", ") + g.values[in].name;
      throw Error("a shape is given for '" + name + "', which is not an input of model '" + g.model_name +
                  "' (inputs: " + names + ")");
    }
  }
  for (int in : g.inputs) {
    auto it = input_shapes.find(g.values[in].name);
    resolve_input(g.values[in], it == input_shapes.end() ? nullptr : &it->second);
  }

  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    infer_node(g, static_cast<int>(i));
    folded[i] = fold_node(g, static_cast<int>(i));
  }
  remove_nodes(g, folded);
}

}  // namespace tpusim::compiler
