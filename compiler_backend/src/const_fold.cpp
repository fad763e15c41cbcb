#include "const_fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {
namespace {

using Shape = std::vector<int64_t>;
constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

[[noreturn]] void fail(const ir::Node& n, const std::string& msg) {
  throw Error("node '" + n.name + "' (" + n.op + "): " + msg);
}

bool is_float_type(ir::ElemType t) { return t == ir::kFloat || t == 10 || t == 11 || t == 16; }

// A host tensor: floats for FLOAT, int64 for the integer types and BOOL.
struct T {
  ir::ElemType type = ir::kFloat;
  Shape shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  bool fl() const { return type == ir::kFloat; }
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

T get(const ir::Value& v) {
  T t;
  t.type = v.elem_type;
  t.shape = v.shape();
  if (t.fl()) t.f = v.data;
  else t.i = v.ints;
  return t;
}

int64_t wrap(int64_t v, ir::ElemType t) {
  switch (t) {
    case 9: return v != 0;                         // BOOL
    case 2: return static_cast<uint8_t>(v);        // UINT8
    case 3: return static_cast<int8_t>(v);         // INT8
    case 4: return static_cast<uint16_t>(v);       // UINT16
    case 5: return static_cast<int16_t>(v);        // INT16
    case 6: return static_cast<int32_t>(v);        // INT32
    case 12: return static_cast<uint32_t>(v);      // UINT32
    default: return v;                             // INT64, UINT64
  }
}

Shape strides(const Shape& s) {
  Shape st(s.size(), 1);
  for (int64_t d = static_cast<int64_t>(s.size()) - 2; d >= 0; --d) st[d] = st[d + 1] * s[d + 1];
  return st;
}

// Calls f(index, flat) for every element of shape `s`, row-major.
void for_each_index(const Shape& s, const std::function<void(const Shape&, int64_t)>& f) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  if (n == 0) return;
  Shape idx(s.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    f(idx, flat);
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

// The flat offset into `in` (broadcast to `out`'s rank from the right) of output index `idx`.
int64_t bcast_offset(const Shape& in, const Shape& in_strides, const Shape& idx) {
  int64_t off = 0;
  size_t lead = idx.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) off += idx[lead + d] * in_strides[d];
  return off;
}

// out[k] = src[src_index[k]] with the output's shape and src's type.
T take(const T& src, Shape out_shape, const std::vector<int64_t>& src_index) {
  T r;
  r.type = src.type;
  r.shape = std::move(out_shape);
  if (src.fl()) {
    r.f.reserve(src_index.size());
    for (int64_t k : src_index) r.f.push_back(src.f[k]);
  } else {
    r.i.reserve(src_index.size());
    for (int64_t k : src_index) r.i.push_back(src.i[k]);
  }
  return r;
}

T map_index(const T& src, const Shape& out, const std::function<int64_t(const Shape&)>& src_of) {
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(std::max<int64_t>(0, [&] {
    int64_t n = 1;
    for (int64_t d : out) n *= d;
    return n;
  }())));
  for_each_index(out, [&](const Shape& idx, int64_t) { index.push_back(src_of(idx)); });
  return take(src, out, index);
}

double as_double(const T& t, int64_t k) { return t.fl() ? static_cast<double>(t.f[k]) : static_cast<double>(t.i[k]); }

const ir::Attr* attr(const ir::Node& n, const std::string& k) {
  auto it = n.attrs.find(k);
  return it == n.attrs.end() ? nullptr : &it->second;
}
Shape attr_ints(const ir::Node& n, const std::string& k) {
  const ir::Attr* a = attr(n, k);
  return a ? a->ints : Shape{};
}

template <class V>
V arith(const ir::Node& n, const std::string& op, V a, V b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") {
    if constexpr (std::is_integral_v<V>) {
      if (b == 0) fail(n, "integer division by zero in constant folding");
    }
    return a / b;
  }
  if (op == "Max") return std::max(a, b);
  if (op == "Min") return std::min(a, b);
  // Pow
  if constexpr (std::is_integral_v<V>) {
    return static_cast<V>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  } else {
    return std::pow(a, b);
  }
}

template <class V>
bool compare(const std::string& op, V a, V b) {
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "And") return a && b;
  if (op == "Or") return a || b;
  return (a != 0) != (b != 0);  // Xor
}

// Element-wise op of `ins` (broadcast) to a tensor of shape `out` and type `out_type`.
T elementwise(const ir::Node& n, const std::vector<T>& ins, const Shape& out, ir::ElemType out_type) {
  const std::string& op = n.op;
  std::vector<Shape> st;
  for (const T& t : ins) st.push_back(strides(t.shape));
  T r;
  r.type = out_type;
  r.shape = out;
  for_each_index(out, [&](const Shape& idx, int64_t) {
    std::vector<int64_t> off;
    for (size_t k = 0; k < ins.size(); ++k) off.push_back(bcast_offset(ins[k].shape, st[k], idx));
    if (op == "Where") {
      const T& pick = ins[0].i[off[0]] ? ins[1] : ins[2];
      int64_t o = ins[0].i[off[0]] ? off[1] : off[2];
      if (pick.fl()) r.f.push_back(pick.f[o]);
      else r.i.push_back(pick.i[o]);
      return;
    }
    if (op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual" ||
        op == "And" || op == "Or" || op == "Xor") {
      bool v = ins[0].fl() ? compare<float>(op, ins[0].f[off[0]], ins[1].f[off[1]])
                           : compare<int64_t>(op, ins[0].i[off[0]], ins[1].i[off[1]]);
      r.i.push_back(v);
      return;
    }
    // Add Sub Mul Div Pow Max Min (variadic Max/Min fold left)
    if (ins[0].fl()) {
      float acc = ins[0].f[off[0]];
      for (size_t k = 1; k < ins.size(); ++k)
        acc = arith<float>(n, op, acc, static_cast<float>(as_double(ins[k], off[k])));
      r.f.push_back(acc);
    } else {
      int64_t acc = ins[0].i[off[0]];
      for (size_t k = 1; k < ins.size(); ++k)
        acc = wrap(arith<int64_t>(n, op, acc, static_cast<int64_t>(as_double(ins[k], off[k]))), out_type);
      r.i.push_back(acc);
    }
  });
  return r;
}

T unary(const ir::Node& n, const T& x) {
  T r = x;
  const std::string& op = n.op;
  if (op == "Not") {
    for (int64_t& v : r.i) v = !v;
    return r;
  }
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  if (const ir::Attr* a = attr(n, "min")) lo = a->f;
  if (const ir::Attr* a = attr(n, "max")) hi = a->f;
  for (float& v : r.f) {
    if (op == "Neg") v = -v;
    else if (op == "Abs") v = std::fabs(v);
    else if (op == "Sqrt") v = std::sqrt(v);
    else if (op == "Reciprocal") v = 1.0f / v;
    else if (op == "Relu") v = v > 0 ? v : 0.0f;
    else if (op == "Clip") v = std::min(std::max(v, lo), hi);
    // As the vector unit computes them (isa/numerics.h), so that a folded table (RoPE's cos and sin) has the bits
    // the chip would give; Softplus and Mish in double, rounded once.
    else if (op == "Log") v = isa::vpu_log(v);
    else if (op == "Sin") v = isa::vpu_sin(v);
    else if (op == "Cos") v = isa::vpu_cos(v);
    else if (op == "Floor") v = isa::vpu_floor(v);
    else if (op == "Ceil") v = isa::vpu_ceil(v);
    else if (op == "Round") v = isa::vpu_round(v);
    else if (op == "Sign") v = v > 0 ? 1.0f : v < 0 ? -1.0f : v;
    else if (op == "Softplus" || op == "Mish") {
      const double x = v, sp = x > 0 ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
      v = static_cast<float>(op == "Softplus" ? sp : x * std::tanh(sp));
    }
  }
  for (int64_t& v : r.i) {
    if (op == "Neg") v = -v;
    else if (op == "Abs") v = v < 0 ? -v : v;
    else if (op == "Relu") v = std::max<int64_t>(v, 0);
    else if (op == "Sign") v = v > 0 ? 1 : v < 0 ? -1 : 0;
    else if (op == "Clip") v = std::min<int64_t>(std::max<int64_t>(v, static_cast<int64_t>(std::ceil(lo))), static_cast<int64_t>(std::floor(hi)));
  }
  return r;
}

T cast(const T& x, ir::ElemType to) {
  T r;
  r.shape = x.shape;
  if (is_float_type(to)) {
    r.type = ir::kFloat;
    if (x.fl()) r.f = x.f;
    else for (int64_t v : x.i) r.f.push_back(static_cast<float>(v));
    return r;
  }
  r.type = to;
  if (x.fl()) {
    for (float v : x.f) {
      if (to == ir::kBool) r.i.push_back(v != 0);
      else if (std::isnan(v)) r.i.push_back(0);
      else r.i.push_back(wrap(static_cast<int64_t>(std::clamp<double>(std::trunc(v), -9.2e18, 9.2e18)), to));
    }
  } else {
    for (int64_t v : x.i) r.i.push_back(wrap(v, to));
  }
  return r;
}

// Evaluates the node; outputs in order (one per node output).
std::vector<T> evaluate(const ir::Graph& g, const ir::Node& n, const std::vector<T>& in) {
  const std::string& op = n.op;
  auto out_shape = [&](size_t k) { return g.values[n.outputs[k]].shape(); };
  auto out_type = [&](size_t k) { return g.values[n.outputs[k]].elem_type; };
  if (op == "Identity" || op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
    T r = in[0];
    r.shape = out_shape(0);
    return {r};
  }
  if (op == "Dropout") {
    std::vector<T> r{in[0]};
    if (n.outputs.size() > 1 && n.outputs[1] >= 0) {
      T mask;
      mask.type = ir::kBool;
      mask.shape = in[0].shape;
      mask.i.assign(static_cast<size_t>(in[0].size()), 1);
      r.push_back(mask);
    }
    return r;
  }
  if (op == "Shape") {
    T r;
    r.type = ir::kInt64;
    int64_t s = n.attr_int("start", 0), e = n.attr_int("end", 0);
    r.i.assign(in[0].shape.begin() + s, in[0].shape.begin() + e);
    r.shape = {static_cast<int64_t>(r.i.size())};
    return {r};
  }
  if (op == "Size") {
    T r;
    r.type = ir::kInt64;
    r.i = {in[0].size()};
    return {r};
  }
  if (op == "Cast") return {cast(in[0], static_cast<ir::ElemType>(n.attr_int("to", 1)))};
  if (op == "Neg" || op == "Abs" || op == "Sqrt" || op == "Reciprocal" || op == "Relu" || op == "Not" ||
      op == "Clip" || op == "Log" || op == "Sin" || op == "Cos" || op == "Floor" || op == "Ceil" || op == "Round" ||
      op == "Sign" || op == "Softplus" || op == "Mish")
    return {unary(n, in[0])};
  if (op == "Add" || op == "Sub" || op == "Mul" || op == "Div" || op == "Pow" || op == "Max" || op == "Min" ||
      op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual" ||
      op == "And" || op == "Or" || op == "Xor" || op == "Where")
    return {elementwise(n, in, out_shape(0), out_type(0))};
  if (op == "Expand") {
    const Shape st = strides(in[0].shape);
    return {map_index(in[0], out_shape(0), [&](const Shape& idx) { return bcast_offset(in[0].shape, st, idx); })};
  }
  if (op == "Transpose") {
    const Shape perm = attr_ints(n, "perm"), st = strides(in[0].shape);
    return {map_index(in[0], out_shape(0), [&](const Shape& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < perm.size(); ++d) off += idx[d] * st[perm[d]];
      return off;
    })};
  }
  if (op == "Tile") {
    const Shape st = strides(in[0].shape);
    return {map_index(in[0], out_shape(0), [&](const Shape& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] % in[0].shape[d]) * st[d];
      return off;
    })};
  }
  if (op == "Slice") {
    const Shape starts = attr_ints(n, "starts"), steps = attr_ints(n, "steps"), st = strides(in[0].shape);
    return {map_index(in[0], out_shape(0), [&](const Shape& idx) {
      int64_t off = 0;
      for (size_t d = 0; d < idx.size(); ++d) off += (starts[d] + idx[d] * steps[d]) * st[d];
      return off;
    })};
  }
  if (op == "Gather") {
    const int64_t axis = n.attr_int("axis", 0);
    const Shape& x = in[0].shape;
    const Shape st = strides(x);
    const size_t irank = in[1].shape.size();
    const Shape ist = strides(in[1].shape);
    return {map_index(in[0], out_shape(0), [&](const Shape& idx) {
      int64_t off = 0;
      for (int64_t d = 0; d < axis; ++d) off += idx[d] * st[d];
      int64_t ioff = 0;
      for (size_t d = 0; d < irank; ++d) ioff += idx[axis + d] * ist[d];
      int64_t k = in[1].i[ioff];
      if (k < 0) k += x[axis];
      off += k * st[axis];
      for (size_t d = axis + 1; d < x.size(); ++d) off += idx[d - 1 + irank] * st[d];
      return off;
    })};
  }
  if (op == "Concat" || op == "Split") {
    const int64_t axis = n.attr_int("axis", 0);
    if (op == "Concat") {
      T r;
      r.type = in[0].type;
      r.shape = out_shape(0);
      int64_t outer = 1;
      for (int64_t d = 0; d < axis; ++d) outer *= r.shape[d];
      for (int64_t o = 0; o < outer; ++o)
        for (const T& t : in) {
          int64_t chunk = 1;
          for (size_t d = axis; d < t.shape.size(); ++d) chunk *= t.shape[d];
          if (t.fl()) r.f.insert(r.f.end(), t.f.begin() + o * chunk, t.f.begin() + (o + 1) * chunk);
          else r.i.insert(r.i.end(), t.i.begin() + o * chunk, t.i.begin() + (o + 1) * chunk);
        }
      return {r};
    }
    std::vector<T> r;
    const Shape st = strides(in[0].shape);
    int64_t begin = 0;
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      Shape s = in[0].shape;
      s[axis] = attr_ints(n, "split")[k];
      r.push_back(map_index(in[0], s, [&](const Shape& idx) {
        int64_t off = 0;
        for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] + (static_cast<int64_t>(d) == axis ? begin : 0)) * st[d];
        return off;
      }));
      begin += s[axis];
    }
    return r;
  }
  if (op == "Pad") {
    const Shape pads = attr_ints(n, "pads"), st = strides(in[0].shape);
    const int64_t r = static_cast<int64_t>(in[0].shape.size());
    T padded = in[0];  // one extra element: the pad value
    if (padded.fl()) padded.f.push_back(n.attr_float("value", 0));
    else padded.i.push_back(static_cast<int64_t>(n.attr_float("value", 0)));
    const int64_t pad_at = in[0].size();
    T res = map_index(padded, out_shape(0), [&](const Shape& idx) {
      int64_t off = 0;
      for (int64_t d = 0; d < r; ++d) {
        int64_t s = idx[d] - pads[d];
        if (s < 0 || s >= in[0].shape[d]) return pad_at;
        off += s * st[d];
      }
      return off;
    });
    return {res};
  }
  if (op == "ConstantOfShape") {
    T r;
    r.shape = out_shape(0);
    r.type = out_type(0);
    double v = 0;
    if (const ir::Attr* a = attr(n, "value")) v = a->t[0];
    if (r.fl()) r.f.assign(static_cast<size_t>(r.size()), static_cast<float>(v));
    else r.i.assign(static_cast<size_t>(r.size()), static_cast<int64_t>(v));
    return {r};
  }
  if (op == "Range") {
    T r;
    r.type = in[0].type;
    r.shape = out_shape(0);
    for (int64_t k = 0; k < r.shape[0]; ++k) {
      if (r.fl()) r.f.push_back(in[0].f[0] + static_cast<float>(k) * in[2].f[0]);
      else r.i.push_back(in[0].i[0] + k * in[2].i[0]);
    }
    return {r};
  }
  if (op == "Trilu") {
    const bool upper = n.attr_int("upper", 1) != 0;
    const int64_t k = in.size() > 1 && !in[1].i.empty() ? in[1].i[0] : 0;
    T r = in[0];
    const Shape& s = r.shape;
    for_each_index(s, [&](const Shape& idx, int64_t flat) {
      int64_t row = idx[idx.size() - 2], col = idx.back();
      bool keep = upper ? col - row >= k : col - row <= k;
      if (!keep) {
        if (r.fl()) r.f[flat] = 0;
        else r.i[flat] = 0;
      }
    });
    return {r};
  }
  return {};
}

const std::set<std::string>& foldable_ops() {
  static const std::set<std::string> ops = {
      "Identity", "Dropout", "Shape", "Size", "Cast", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose",
      "Gather", "Concat", "Split", "Slice", "Expand", "Tile", "Pad", "ConstantOfShape", "Range", "Trilu", "Neg",
      "Abs", "Sqrt", "Reciprocal", "Relu", "Not", "Clip", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Equal",
      "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where",
      "Log", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus", "Mish"};
  return ops;
}

void put(ir::Value& v, T&& t) {
  v.is_const = true;
  v.producer = -1;
  v.has_shape = true;
  v.dims.clear();
  for (int64_t d : t.shape) v.dims.push_back(ir::Dim::sized(d));
  v.elem_type = t.type;
  v.data = std::move(t.f);
  v.ints = std::move(t.i);
}

bool is_used(const ir::Graph& g, int value) {
  if (std::find(g.outputs.begin(), g.outputs.end(), value) != g.outputs.end()) return true;
  for (const ir::Node& n : g.nodes)
    if (std::find(n.inputs.begin(), n.inputs.end(), value) != n.inputs.end()) return true;
  return false;
}

void replace_uses(ir::Graph& g, int from, int to) {
  for (ir::Node& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
}

}  // namespace

bool fold_node(ir::Graph& g, int node) {
  const ir::Node& n = g.nodes[node];
  if (!foldable_ops().count(n.op)) return false;
  const bool shape_only = n.op == "Shape" || n.op == "Size";
  std::vector<T> in;
  for (int id : n.inputs) {
    if (id < 0) {
      in.emplace_back();
      continue;
    }
    const ir::Value& v = g.values[id];
    if (shape_only) {
      T t;
      t.shape = v.shape();
      in.push_back(t);
      continue;
    }
    if (!v.is_const) return false;
    in.push_back(get(v));
  }
  int64_t total = 0;
  for (int out : n.outputs)
    if (out >= 0) total += g.values[out].elements();
  if (total > kMaxFoldElements) return false;
  if (n.op == "Cast" && (n.attr_int("to", 1) == 10 || n.attr_int("to", 1) == 16)) return false;  // half types
  std::vector<T> res = evaluate(g, n, in);
  if (res.empty()) return false;
  for (size_t k = 0; k < n.outputs.size() && k < res.size(); ++k)
    if (n.outputs[k] >= 0) put(g.values[n.outputs[k]], std::move(res[k]));
  return true;
}

void remove_nodes(ir::Graph& g, const std::vector<bool>& remove) {
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (i >= remove.size() || !remove[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  for (ir::Value& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int out : g.nodes[i].outputs)
      if (out >= 0) g.values[out].producer = static_cast<int>(i);
}

void fold_constants(ir::Graph& g) {
  // 1. Anything still foldable.
  std::vector<bool> remove(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) remove[i] = fold_node(g, static_cast<int>(i));
  remove_nodes(g, remove);

  // 2. Identity and Dropout (inference) pass their input through.
  remove.assign(g.nodes.size(), false);
  auto is_output = [&](int v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node& n = g.nodes[i];
    if (n.op != "Identity" && n.op != "Dropout") continue;
    if (n.op == "Dropout" && n.outputs.size() > 1 && n.outputs[1] >= 0 && is_used(g, n.outputs[1])) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (!is_output(out)) {
      replace_uses(g, out, in);
      remove[i] = true;
      continue;
    }
    const int p = g.values[in].producer;
    if (p < 0 || g.values[in].is_const || is_output(in)) continue;  // input/constant -> output: keep it
    // The producer writes the graph output directly; the other readers of `in` read `out`.
    for (int& o : g.nodes[p].outputs)
      if (o == in) o = out;
    replace_uses(g, in, out);
    g.values[out].producer = p;
    g.values[in].producer = -1;
    remove[i] = true;
  }
  remove_nodes(g, remove);

  // 3. Nodes no graph output depends on.
  std::vector<bool> live_value(g.values.size(), false);
  for (int o : g.outputs) live_value[o] = true;
  remove.assign(g.nodes.size(), true);
  for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
    const ir::Node& n = g.nodes[i];
    bool live = std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && live_value[o]; });
    if (!live) continue;
    remove[i] = false;
    for (int in : n.inputs)
      if (in >= 0) live_value[in] = true;
  }
  remove_nodes(g, remove);

  // 4. Values nothing uses: renumber the rest.
  std::vector<bool> keep(g.values.size(), false);
  for (int v : g.inputs) keep[v] = true;
  for (int v : g.outputs) keep[v] = true;
  for (const ir::Node& n : g.nodes) {
    for (int v : n.inputs)
      if (v >= 0) keep[v] = true;
    for (int v : n.outputs)
      if (v >= 0) keep[v] = true;
  }
  std::vector<int> new_index(g.values.size(), -1);
  std::vector<ir::Value> values;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (keep[v]) {
      new_index[v] = static_cast<int>(values.size());
      values.push_back(std::move(g.values[v]));
    }
  g.values = std::move(values);
  auto remap = [&](int& v) {
    if (v >= 0) v = new_index[v];
  };
  for (int& v : g.inputs) remap(v);
  for (int& v : g.outputs) remap(v);
  for (ir::Node& n : g.nodes) {
    for (int& v : n.inputs) remap(v);
    for (int& v : n.outputs) remap(v);
  }
  g.value_index.clear();
  for (size_t v = 0; v < g.values.size(); ++v) g.value_index[g.values[v].name] = static_cast<int>(v);
  remove_nodes(g, {});
}

}  // namespace tpusim::compiler
