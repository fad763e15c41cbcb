// Elementwise operators: activations, arithmetic with broadcasting, comparisons and logic, Where, Cast. On the chip
// they are row-wise: consecutive runs of them (with the normalisations and last-axis reductions of
// ops_normalize.cpp) form one generated row-wise kernel computing in f32 (decomposed LayerNorm and GELU chains fuse
// into one kernel this way). Integer and BOOL values computed at run time are f32 in the kernels and in memory
// (exact integers up to 2^24; a BOOL is 0 or 1): a comparison is built from Sign of a difference, logic from
// arithmetic on 0/1, Where from products with the condition, a cast to an integer type truncates (Floor of |x| with
// x's sign). A new function of the vector unit is one entry below: rowwise = unary<rw::Op::X> (and a fold function
// when the host can compute it).
#include <algorithm>
#include <cmath>
#include <limits>

#include "fold.h"
#include "infer.h"
#include "lowering.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {
namespace {

using T = HostTensor;

// ---- shape inference -----------------------------------------------------------------------------------------

void infer_not(InferCtx& c) {
  if (c.type(0) != ir::kBool) fail(c.n, "input must be BOOL, got " + ir::elem_type_name(c.type(0)));
  c.out(0, ir::kBool, c.shape(0));
}

void infer_gelu(InferCtx& c) {
  std::string a = c.as("approximate", "none");
  if (a != "none" && a != "tanh") fail(c.n, "approximate='" + a + "' is not supported");
  c.out(0, c.type(0), c.shape(0));
}

void infer_binary(InferCtx& c) {  // Add Sub Mul Div Max Min (variadic for Max/Min)
  same_types(c);
  c.out(0, c.type(0), broadcast_all(c, 0));
}

void infer_pow(InferCtx& c) { c.out(0, c.type(0), broadcast(c.n, c.shape(0), c.shape(1))); }

void infer_compare(InferCtx& c) {  // Equal Less Greater LessOrEqual GreaterOrEqual
  same_types(c);
  c.out(0, ir::kBool, broadcast(c.n, c.shape(0), c.shape(1)));
}

void infer_logical(InferCtx& c) {  // And Or Xor
  if (c.type(0) != ir::kBool || c.type(1) != ir::kBool) fail(c.n, "inputs must be BOOL");
  c.out(0, ir::kBool, broadcast(c.n, c.shape(0), c.shape(1)));
}

void infer_where(InferCtx& c) {
  if (c.type(0) != ir::kBool) fail(c.n, "condition must be BOOL, got " + ir::elem_type_name(c.type(0)));
  if (c.type(1) != c.type(2))
    fail(c.n, "X and Y have different element types " + ir::elem_type_name(c.type(1)) + " and " +
                  ir::elem_type_name(c.type(2)));
  c.out(0, c.type(1), broadcast_all(c, 0));
}

// Clip: min/max as inputs (opset 11+) or attributes (before); recorded as float attributes "min"/"max".
void infer_clip(InferCtx& c) {
  if (c.has(1)) c.set_float("min", static_cast<float>(c.const_scalar(1, "min")));
  if (c.has(2)) c.set_float("max", static_cast<float>(c.const_scalar(2, "max")));
  c.out(0, c.type(0), c.shape(0));
}

void infer_cast(InferCtx& c) {
  if (!c.has_attr("to")) fail(c.n, "attribute 'to' is required");
  int64_t to = c.ai("to", 0);
  if (to == 8 /* STRING */ || to <= 0 || to > 16)
    fail(c.n, "to=" + ir::elem_type_name(static_cast<ir::ElemType>(to)) + " is not supported");
  c.out(0, static_cast<ir::ElemType>(to), c.shape(0));
}

// ---- constant folding ----------------------------------------------------------------------------------------

// Integers (the shape arithmetic of exported graphs) are checked: a result past the type's range is an error
// naming the operands, not undefined behaviour (a crafted model's 2^62 x 2^62 was one, found by fuzz_onnx).
template <class V>
V arith(const ir::Node& n, const std::string& op, V a, V b) {
  if constexpr (std::is_integral_v<V>) {
    V r{};
    auto overflow = [&]() -> V {
      fail(n, "integer overflow in constant folding: " + std::to_string(a) + " " + op + " " + std::to_string(b) +
                  " is outside the range of int" + std::to_string(8 * sizeof(V)));
    };
    if (op == "Add") return __builtin_add_overflow(a, b, &r) ? overflow() : r;
    if (op == "Sub") return __builtin_sub_overflow(a, b, &r) ? overflow() : r;
    if (op == "Mul") return __builtin_mul_overflow(a, b, &r) ? overflow() : r;
    if (op == "Div") {
      if (b == 0) fail(n, "integer division by zero in constant folding");
      if (std::is_signed_v<V> && a == std::numeric_limits<V>::min() && b == static_cast<V>(-1)) return overflow();
      return a / b;
    }
    if (op == "Max") return std::max(a, b);
    if (op == "Min") return std::min(a, b);
    if (op == "Mod") {  // fmod = 0: the sign of the divisor (Python's %, numpy.mod); 1: of the dividend (C's %)
      if (b == 0) fail(n, "integer modulo by zero in constant folding");
      if (std::is_signed_v<V> && a == std::numeric_limits<V>::min() && b == static_cast<V>(-1)) return 0;
      V m = a % b;
      if (n.attr_int("fmod", 0) == 0 && m != 0 && ((m < 0) != (b < 0))) m += b;
      return m;
    }
    // Pow, in double: a result that is not a finite value in V's range is an overflow
    const double p = std::pow(static_cast<double>(a), static_cast<double>(b));
    if (!(p >= static_cast<double>(std::numeric_limits<V>::min()) &&
          p < -static_cast<double>(std::numeric_limits<V>::min())))
      return overflow();
    return static_cast<V>(p);
  } else {
    if (op == "Add") return a + b;
    if (op == "Sub") return a - b;
    if (op == "Mul") return a * b;
    if (op == "Div") return a / b;
    if (op == "Max") return std::max(a, b);
    if (op == "Min") return std::min(a, b);
    if (op == "Mod") {  // float32 as numpy computes it: fmod = 1 C's fmod; 0 the sign of the divisor
      V m = std::fmod(a, b);
      if (n.attr_int("fmod", 0) == 0 && m != 0 && ((m < 0) != (b < 0))) m += b;
      return m;
    }
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
T host_elementwise(const ir::Node& n, const Tensors& ins, const Shape& out, ir::ElemType out_type) {
  const std::string& op = n.op;
  std::vector<Shape> st;
  for (const T& t : ins) st.push_back(strides_of(t.shape));
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
    // Add Sub Mul Div Pow Mod Max Min (variadic Max/Min fold left)
    if (ins[0].fl()) {
      float acc = ins[0].f[off[0]];
      for (size_t k = 1; k < ins.size(); ++k)
        acc = arith<float>(n, op, acc, static_cast<float>(as_double(ins[k], off[k])));
      r.f.push_back(acc);
    } else {
      int64_t acc = ins[0].i[off[0]];
      for (size_t k = 1; k < ins.size(); ++k)
        acc = wrap(arith<int64_t>(n, op, acc, ins[k].fl() ? static_cast<int64_t>(ins[k].f[off[k]]) : ins[k].i[off[k]]),
                   out_type);
      r.i.push_back(acc);
    }
  });
  return r;
}

T host_unary(const ir::Node& n, const T& x) {
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

T host_cast(const T& x, ir::ElemType to) {
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

Tensors fold_unary(const ir::Graph& g, const ir::Node& n, const Tensors& in) { return {host_unary(n, in[0])}; }

// Add Sub Mul Div Pow Mod Max Min, comparisons, logic, Where.
Tensors fold_elementwise(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  return {host_elementwise(n, in, out_shape(g, n, 0), out_type(g, n, 0))};
}

// Functions of one float value, computed in float32 as torch computes them on the CPU (std:: functions, one
// rounding each).
float host_sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
float host_tanh(float x) { return std::tanh(x); }
float host_erf(float x) { return std::erf(x); }
float host_exp(float x) { return std::exp(x); }
float host_softsign(float x) { return x / (1.0f + std::fabs(x)); }

template <float (*F)(float)>
Tensors fold_float(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  if (!in[0].fl()) return {};  // other types: left to the lowering, which reports them
  T r = in[0];
  for (float& v : r.f) v = F(v);
  return {r};
}

Tensors fold_cast(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const int64_t to = n.attr_int("to", 1);
  if (to == 10 || to == 16) return {};  // half types: not modelled on the host
  return {host_cast(in[0], static_cast<ir::ElemType>(to))};
}

// ---- row-wise ------------------------------------------------------------------------------------------------

template <rw::Op O>
int unary(RowEmit& e) {
  e.out_per_row = e.per_row(e.n.inputs[0]);
  const int x = e.in(0);
  return e.node(O, {x});
}

template <rw::Op O>
int binary(RowEmit& e) {
  const int r = e.node(O, {e.in(0), e.in(1)});
  e.out_per_row = e.per_row(e.n.inputs[0]) && e.per_row(e.n.inputs[1]);
  return r;
}

template <rw::Op O>  // Max, Min: any number of inputs, folded left
int variadic(RowEmit& e) {
  int r = e.in(0);
  e.out_per_row = e.per_row(e.n.inputs[0]);
  for (size_t k = 1; k < e.n.inputs.size(); ++k) {
    r = e.node(O, {r, e.in(k)});
    e.out_per_row = e.out_per_row && e.per_row(e.n.inputs[k]);
  }
  return r;
}

int rw_pow(RowEmit& e) {
  const ir::Node& n = e.n;
  const ir::Value& x = e.L.val(n.inputs[1]);
  if (!x.is_const || x.elements() != 1) e.L.fail(n, "only a constant scalar exponent is supported");
  float ex = x.elem_type == ir::kFloat ? x.data[0] : static_cast<float>(x.ints[0]);
  if (ex != 2 && ex != 3 && ex != 0.5f && ex != 1 && ex != -1 && ex != -0.5f)
    e.L.fail(n, "exponent " + num(ex) + " is not supported (2, 3, 0.5, 1, -1, -0.5 are)");
  const int r = e.node(rw::Op::Pow, {e.in(0)}, ex);
  e.out_per_row = e.per_row(n.inputs[0]);
  return r;
}

// clip(alpha*x + beta, 0, 1); HardSwish: x * that with alpha = 1/6, beta = 1/2.
int rw_hard_sigmoid(RowEmit& e) {
  const ir::Node& n = e.n;
  e.out_per_row = e.per_row(n.inputs[0]);
  const int x = e.in(0);
  const bool swish = n.op == "HardSwish";
  const float alpha = swish ? 1.0f / 6.0f : n.attr_float("alpha", 0.2f);
  const float beta = swish ? 0.5f : n.attr_float("beta", 0.5f);
  int t = e.node(rw::Op::Add, {e.node(rw::Op::Mul, {x, e.konst(alpha)}), e.konst(beta)});
  int r = e.node(rw::Op::Clip, {t}, 0, 0.0f, 1.0f);
  if (swish) r = e.node(rw::Op::Mul, {x, r});
  return r;
}

// x / (1 + |x|)
int rw_softsign(RowEmit& e) {
  e.out_per_row = e.per_row(e.n.inputs[0]);
  const int x = e.in(0);
  return e.node(rw::Op::Div, {x, e.node(rw::Op::Add, {e.konst(1.0f), e.node(rw::Op::Abs, {x})})});
}

int rw_leaky_relu(RowEmit& e) {
  e.out_per_row = e.per_row(e.n.inputs[0]);
  const int x = e.in(0);
  const float alpha = e.n.attr_float("alpha", 0.01f);
  int neg = e.node(rw::Op::Min, {x, e.konst(0.0f)});
  return e.node(rw::Op::Add, {e.node(rw::Op::Relu, {x}), e.node(rw::Op::Mul, {neg, e.konst(alpha)})});
}

int rw_gelu(RowEmit& e) {
  e.out_per_row = e.per_row(e.n.inputs[0]);
  const int x = e.in(0);
  auto a = e.n.attrs.find("approximate");
  const bool tanh = a != e.n.attrs.end() && a->second.s == "tanh";
  return e.node(tanh ? rw::Op::GeluTanh : rw::Op::Gelu, {x});
}

int rw_clip(RowEmit& e) {
  const ir::Node& n = e.n;
  e.out_per_row = e.per_row(n.inputs[0]);
  const int x = e.in(0);
  float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
  auto scalar = [&](size_t k, float& dst) {
    if (k < n.inputs.size() && n.inputs[k] >= 0) {
      const ir::Value& c = e.L.val(n.inputs[k]);
      if (!c.is_const || c.elements() != 1) e.L.fail(n, "min and max must be constant scalars");
      dst = c.data[0];
    }
  };
  scalar(1, lo);
  scalar(2, hi);
  if (auto it = n.attrs.find("min"); it != n.attrs.end()) lo = it->second.f;
  if (auto it = n.attrs.find("max"); it != n.attrs.end()) hi = it->second.f;
  return e.node(rw::Op::Clip, {x}, 0, lo, hi);
}

// The condition is constant: out = x * m + y * (1 - m), a constant side folded into one constant term.
int rw_where(RowEmit& e) {
  Lowering& L = e.L;
  const ir::Node& n = e.n;
  Group& gr = e.gr;
  const ir::Value& c = L.val(n.inputs[0]);
  Shape os = L.shape(n.outputs[0]);
  std::vector<float> cond(c.ints.begin(), c.ints.end());
  if (cond.empty()) cond.assign(c.data.begin(), c.data.end());
  for (float& f : cond) f = f != 0 ? 1.0f : 0.0f;
  std::vector<float> mfull = broadcast_data(cond, c.shape(), os);
  auto const_input = [&](const std::vector<float>& d, const std::string& name) {
    int b = L.const_f32(name, os, gr.nhwc && os.size() == 4 ? permute_data(d, os, kToNhwc) : d);
    Shape po = L.physical(gr, os);
    const bool pr = po.back() == 1 && gr.C != 1;
    return L.rw_input(e.call, Stored{b, 0, DType::F32, false}, pr, 0);
  };
  e.out_per_row = false;
  const ir::Value &xv = L.val(n.inputs[1]), &yv = L.val(n.inputs[2]);
  if (yv.is_const || xv.is_const) {
    const bool ycst = yv.is_const;
    const ir::Value& cv = ycst ? yv : xv;
    std::vector<float> cf = broadcast_data(const_floats(cv), cv.shape(), os), term(cf.size());
    std::vector<float> keep(mfull.size());
    for (size_t k = 0; k < cf.size(); ++k) {
      const bool take_var = ycst ? mfull[k] != 0 : mfull[k] == 0;
      keep[k] = take_var ? 1.0f : 0.0f;
      term[k] = take_var ? 0.0f : cf[k];
    }
    int var = e.in(ycst ? 1 : 2);
    return e.node(rw::Op::Add, {e.node(rw::Op::Mul, {var, const_input(keep, n.name + ".keep")}),
                                const_input(term, n.name + ".other")});
  }
  std::vector<float> inv(mfull.size());
  for (size_t k = 0; k < inv.size(); ++k) inv[k] = 1.0f - mfull[k];
  return e.node(rw::Op::Add, {e.node(rw::Op::Mul, {e.in(1), const_input(mfull, n.name + ".mask")}),
                              e.node(rw::Op::Mul, {e.in(2), const_input(inv, n.name + ".inv_mask")})});
}

// One side of a Where with a computed condition: v * m (m = the condition or 1 - it, 0 or 1). An infinite
// constant side (masked_fill with -inf) would make 0 * inf = NaN where it is not taken: its infinities are written
// as two products with +-FLT_MAX, m * max + m * max, which overflow to +-inf where m = 1 and are 0 where m = 0.
int where_side(RowEmit& e, size_t k, int m) {
  const ir::Value& v = e.L.val(e.n.inputs[k]);
  if (!v.is_const) return e.node(rw::Op::Mul, {e.in(k), m});
  std::vector<float> d = const_floats(v), inf(d.size(), 0.0f);
  bool any_inf = false;
  for (size_t i = 0; i < d.size(); ++i)
    if (std::isinf(d[i])) {
      inf[i] = d[i] = std::copysign(std::numeric_limits<float>::max(), d[i]);
      any_inf = true;
    }
  auto operand = [&](const std::vector<float>& c, const std::string& name) {
    return d.size() == 1 ? e.konst(c[0]) : e.const_operand(c, v.shape(), name);
  };
  int r = e.node(rw::Op::Mul, {m, operand(d, v.name + ".finite")});
  if (any_inf) r = e.node(rw::Op::Add, {r, e.node(rw::Op::Mul, {m, operand(inf, v.name + ".infinite")})});
  return r;
}

// Where: a constant condition folds into constant masks (rw_where above); a computed one (0 or 1) selects by
// products, x * c + y * (1 - c): exact for finite values (a side not taken that is infinite or NaN at run time
// gives NaN).
int rw_select(RowEmit& e) {
  if (e.L.val(e.n.inputs[0]).is_const) return rw_where(e);
  const int c = e.in(0);
  const int nc = e.node(rw::Op::Sub, {e.konst(1.0f), c});
  e.out_per_row = e.per_row(e.n.inputs[0]) && e.per_row(e.n.inputs[1]) && e.per_row(e.n.inputs[2]);
  return e.node(rw::Op::Add, {where_side(e, 1, c), where_side(e, 2, nc)});
}

// Comparisons of values computed at run time: 0 or 1 from the sign of a difference (exact for finite values;
// a difference that overflows still has the right sign).
int rw_compare(RowEmit& e) {
  const std::string& op = e.n.op;
  e.out_per_row = e.per_row(e.n.inputs[0]) && e.per_row(e.n.inputs[1]);
  const int a = e.in(0), b = e.in(1);
  auto greater = [&](int x, int y) { return e.node(rw::Op::Relu, {e.node(rw::Op::Sign, {e.node(rw::Op::Sub, {x, y})})}); };
  auto one_minus = [&](int x) { return e.node(rw::Op::Sub, {e.konst(1.0f), x}); };
  if (op == "Equal") return one_minus(e.node(rw::Op::Abs, {e.node(rw::Op::Sign, {e.node(rw::Op::Sub, {a, b})})}));
  if (op == "Greater") return greater(a, b);
  if (op == "Less") return greater(b, a);
  if (op == "LessOrEqual") return one_minus(greater(a, b));
  return one_minus(greater(b, a));  // GreaterOrEqual
}

// Logic on 0/1: And a*b, Or max(a,b), Xor |a-b|, Not 1-a.
int rw_logic(RowEmit& e) {
  const std::string& op = e.n.op;
  if (op == "Not") {
    e.out_per_row = e.per_row(e.n.inputs[0]);
    return e.node(rw::Op::Sub, {e.konst(1.0f), e.in(0)});
  }
  e.out_per_row = e.per_row(e.n.inputs[0]) && e.per_row(e.n.inputs[1]);
  const int a = e.in(0), b = e.in(1);
  if (op == "And") return e.node(rw::Op::Mul, {a, b});
  if (op == "Or") return e.node(rw::Op::Max, {a, b});
  return e.node(rw::Op::Abs, {e.node(rw::Op::Sub, {a, b})});
}

// ---- Cast ------------------------------------------------------------------------------------------------------

bool float_type(int64_t to) { return to == 1 || to == 10 || to == 16 || to == 11; }

// An integer model input is int32 in memory: to a float type, cast.s (lower_cast); to another integer type, the
// same int32 values (a view). Everything else is f32 in the row-wise kernel (rw_cast).
bool int32_input(const Lowering& L, int v) {
  auto it = L.st_.find(v);
  return it != L.st_.end() && !it->second.empty() && it->second.front().dtype == DType::I32;
}

bool cast_fusable(const Lowering& L, const ir::Node& n) {
  if (L.val(n.inputs[0]).elem_type == ir::kFloat || !int32_input(L, n.inputs[0])) return true;
  return n.attr_int("to", 1) == ir::kBool;
}

// float -> float: the value itself; -> an integer type: truncated toward zero, sign(x) * floor(|x|) (the
// conversion saturates at +-2^31 on the way out; values past 2^24 are not exact in f32); -> BOOL: |sign(x)|;
// an integer or BOOL -> a float or integer type: the value itself.
int rw_cast(RowEmit& e) {
  e.out_per_row = e.per_row(e.n.inputs[0]);
  const int64_t to = e.n.attr_int("to", 1);
  const bool from_float = e.L.val(e.n.inputs[0]).elem_type == ir::kFloat;
  const int x = e.in(0);
  if (to == ir::kBool) return e.node(rw::Op::Abs, {e.node(rw::Op::Sign, {x})});
  if (float_type(to) || !from_float) return x;
  return e.node(rw::Op::Mul, {e.node(rw::Op::Sign, {x}), e.node(rw::Op::Floor, {e.node(rw::Op::Abs, {x})})});
}

// An int32 model input: to f32 (cast.s), or to another integer type (the same int32 values: a view).
void lower_cast(Lowering& L, const ir::Node& n) {
  const int64_t to = n.attr_int("to", 1);
  if (!float_type(to)) return L.alias(n);
  Stored x = L.st_.at(n.inputs[0]).front();
  Stored y{L.temp(L.val(n.outputs[0]).name, DType::F32, L.shape(n.outputs[0])), 0, DType::F32, false};
  L.cast(n.name, x, y, L.val(n.outputs[0]).elements());
  L.st_[n.outputs[0]].push_back(y);
}

}  // namespace

void add_elementwise_ops(OpTable& t) {
  constexpr Fusion E = Fusion::Elementwise;
  // Activations and functions of one value.
  t.add({.name = "Relu", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Relu>});
  t.add({.name = "Sigmoid", .infer = infer_unary, .fold = fold_float<host_sigmoid>, .fusion = E,
         .rowwise = unary<rw::Op::Sigmoid>});
  t.add({.name = "Tanh", .infer = infer_unary, .fold = fold_float<host_tanh>, .fusion = E,
         .rowwise = unary<rw::Op::Tanh>});
  t.add({.name = "Erf", .infer = infer_unary, .fold = fold_float<host_erf>, .fusion = E,
         .rowwise = unary<rw::Op::Erf>});
  t.add({.name = "Sqrt", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Sqrt>});
  t.add({.name = "Exp", .infer = infer_unary, .fold = fold_float<host_exp>, .fusion = E,
         .rowwise = unary<rw::Op::Exp>});
  // The vector unit's logarithm, sine, cosine and roundings, and what composes from them (kernels/rowwise.h).
  t.add({.name = "Log", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Log>});
  t.add({.name = "Sin", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Sin>,
         .angle_input = true});
  t.add({.name = "Cos", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Cos>,
         .angle_input = true});
  t.add({.name = "Floor", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Floor>});
  t.add({.name = "Ceil", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Ceil>});
  t.add({.name = "Round", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Round>});
  t.add({.name = "Sign", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Sign>});
  t.add({.name = "Softplus", .infer = infer_unary, .fold = fold_unary, .fusion = E,
         .rowwise = unary<rw::Op::Softplus>});
  t.add({.name = "Mish", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Mish>});
  t.add({.name = "Neg", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Neg>});
  t.add({.name = "Abs", .infer = infer_unary, .fold = fold_unary, .fusion = E, .rowwise = unary<rw::Op::Abs>});
  t.add({.name = "Reciprocal", .infer = infer_unary, .fold = fold_unary, .fusion = E,
         .rowwise = unary<rw::Op::Recip>});
  t.add({.name = "HardSigmoid", .attrs = {{"alpha", K::Float}, {"beta", K::Float}}, .infer = infer_unary,
         .fusion = E, .rowwise = rw_hard_sigmoid});
  t.add({.name = "HardSwish", .infer = infer_unary, .fusion = E, .rowwise = rw_hard_sigmoid});
  t.add({.name = "LeakyRelu", .attrs = {{"alpha", K::Float}}, .infer = infer_unary, .fusion = E,
         .rowwise = rw_leaky_relu});
  t.add({.name = "Softsign", .infer = infer_unary, .fold = fold_float<host_softsign>, .fusion = E,
         .rowwise = rw_softsign});
  t.add({.name = "Gelu", .attrs = {{"approximate", K::String}}, .infer = infer_gelu, .fusion = E,
         .rowwise = rw_gelu});
  t.add({.name = "Clip", .max_inputs = 3, .attrs = {{"min", K::Float}, {"max", K::Float}}, .infer = infer_clip,
         .fold = fold_unary, .fusion = E, .rowwise = rw_clip});
  // Arithmetic (broadcasting).
  t.add({.name = "Add", .min_inputs = 2, .max_inputs = 2, .infer = infer_binary, .fold = fold_elementwise,
         .fusion = E, .rowwise = binary<rw::Op::Add>});
  t.add({.name = "Sub", .min_inputs = 2, .max_inputs = 2, .infer = infer_binary, .fold = fold_elementwise,
         .fusion = E, .rowwise = binary<rw::Op::Sub>});
  t.add({.name = "Mul", .min_inputs = 2, .max_inputs = 2, .infer = infer_binary, .fold = fold_elementwise,
         .fusion = E, .rowwise = binary<rw::Op::Mul>});
  t.add({.name = "Div", .min_inputs = 2, .max_inputs = 2, .infer = infer_binary, .fold = fold_elementwise,
         .fusion = E, .rowwise = binary<rw::Op::Div>});
  t.add({.name = "Max", .max_inputs = kManyInputs, .infer = infer_binary, .fold = fold_elementwise, .fusion = E,
         .rowwise = variadic<rw::Op::Max>});
  t.add({.name = "Min", .max_inputs = kManyInputs, .infer = infer_binary, .fold = fold_elementwise, .fusion = E,
         .rowwise = variadic<rw::Op::Min>});
  t.add({.name = "Pow", .min_inputs = 2, .max_inputs = 2, .infer = infer_pow, .fold = fold_elementwise, .fusion = E,
         .rowwise = rw_pow});
  // Folded only (Swin's shifted windows: paddings and a mask's boundaries from constant sizes).
  t.add({.name = "Mod", .min_inputs = 2, .max_inputs = 2, .attrs = {{"fmod", K::Int}}, .infer = infer_binary,
         .fold = fold_elementwise});
  // Comparisons and logic (BOOL results: 0 or 1 in f32).
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"})
    t.add({.name = op, .min_inputs = 2, .max_inputs = 2, .infer = infer_compare, .fold = fold_elementwise,
           .fusion = E, .rowwise = rw_compare});
  for (const char* op : {"And", "Or", "Xor"})
    t.add({.name = op, .min_inputs = 2, .max_inputs = 2, .infer = infer_logical, .fold = fold_elementwise,
           .fusion = E, .rowwise = rw_logic});
  t.add({.name = "Not", .infer = infer_not, .fold = fold_unary, .fusion = E, .rowwise = rw_logic});
  t.add({.name = "Where", .min_inputs = 3, .max_inputs = 3, .infer = infer_where, .fold = fold_elementwise,
         .fusion = E, .rowwise = rw_select});
  t.add({.name = "Cast", .attrs = {{"to", K::Int}, {"saturate", K::Int}}, .infer = infer_cast, .fold = fold_cast,
         .fusion = E, .fusable = cast_fusable, .rowwise = rw_cast, .lower = lower_cast});
}

}  // namespace tpusim::compiler
