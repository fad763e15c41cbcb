// Normalisations and reductions: Softmax, LayerNormalization, BatchNormalization (inference, constant parameters),
// ReduceMean/Sum/Max/Min/L1/L2/SumSquare/LogSumExp and ArgMax/ArgMin over the last axis are row-wise
// (Fusion::RowReduce: the row-wise kernel reduces along its columns); over other axes (LayerNormalization: over
// several) they run the same row-wise function in a kernel of their own on a copy of the input with those axes moved
// last (lower_over_axes); BatchNormalization after a Conv folds into the convolution (ops_conv.cpp); ReduceMean over
// H and W of a 4-D value is a spatial mean (ops_conv.cpp's lower_spatial_mean); InstanceNormalization is a layer
// norm over the rows of [N x C, spatial] with a scale and bias per row.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "fold.h"
#include "infer.h"
#include "lowering.h"

namespace tpusim::compiler {
namespace {

// ---- shape inference -----------------------------------------------------------------------------------------

void infer_batchnorm(InferCtx& c) {
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

void infer_softmax(InferCtx& c) {
  c.set_int("axis", c.axis(c.ai("axis", -1), c.rank(0)));
  c.out(0, c.type(0), c.shape(0));
}

void infer_layernorm(InferCtx& c) {
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
void infer_reduce(InferCtx& c) {
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

// ArgMax/ArgMin: one axis (default 0; recorded non-negative), keepdims, select_last_index; an INT64 output.
void infer_arg(InferCtx& c) {
  const Shape x = c.shape(0);
  if (x.empty()) fail(c.n, "the input must have at least one axis");
  const int64_t axis = c.axis(c.ai("axis", 0), c.rank(0));
  const int64_t keep = c.ai("keepdims", 1), last = c.ai("select_last_index", 0);
  if (keep != 0 && keep != 1) fail(c.n, "keepdims=" + std::to_string(keep) + " is not supported");
  if (last != 0 && last != 1) fail(c.n, "select_last_index=" + std::to_string(last) + " is not supported");
  if (x[axis] == 0) fail(c.n, "axis " + std::to_string(axis) + " has no elements");
  c.set_int("axis", axis);
  Shape out = x;
  if (keep) out[axis] = 1;
  else out.erase(out.begin() + axis);
  c.out(0, ir::kInt64, out);
}

// InstanceNormalization: x [N, C, S...], scale and B [C].
void infer_instance_norm(InferCtx& c) {
  const Shape x = c.shape(0);
  if (x.size() < 3) fail(c.n, "input " + ir::shape_str(x) + " must be [N, C, D1, ...]");
  for (size_t i = 1; i < 3; ++i)
    if (c.shape(i) != Shape{x[1]})
      fail(c.n, "input '" + c.in(i).name + "' " + ir::shape_str(c.shape(i)) + " must be [" + std::to_string(x[1]) + "]");
  c.out(0, c.type(0), x);
}

// ---- constant folding ----------------------------------------------------------------------------------------

// ArgMax/ArgMin of a constant: the first (or last) index of the largest (smallest) element along the axis.
Tensors fold_arg(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const HostTensor& x = in[0];
  const int64_t axis = n.attr_int("axis", 0), len = x.shape[static_cast<size_t>(axis)];
  const int64_t inner = prod(x.shape, static_cast<size_t>(axis) + 1), outer = prod(x.shape, 0, static_cast<size_t>(axis));
  const bool is_min = n.op == "ArgMin", last = n.attr_int("select_last_index", 0) != 0;
  HostTensor r;
  r.type = ir::kInt64;
  r.shape = out_shape(g, n, 0);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      double bv = as_double(x, o * len * inner + i);
      for (int64_t k = 1; k < len; ++k) {
        const double v = as_double(x, (o * len + k) * inner + i);
        if (is_min ? (v < bv || (last && v == bv)) : (v > bv || (last && v == bv))) best = k, bv = v;
      }
      r.i.push_back(best);
    }
  return {r};
}

// ---- lowering ------------------------------------------------------------------------------------------------

bool last_axis(const Lowering& L, const ir::Node& n) {
  const int64_t axis = n.attr_int("axis", -1);
  const int64_t r = static_cast<int64_t>(L.shape(n.inputs[0]).size());
  return axis == r - 1 || axis == -1;
}

bool reduce_last(const Lowering& L, const ir::Node& n) {
  std::vector<int64_t> axes;
  if (auto it = n.attrs.find("axes"); it != n.attrs.end()) axes = it->second.ints;
  else if (n.inputs.size() > 1 && n.inputs[1] >= 0 && L.val(n.inputs[1]).is_const) axes = L.val(n.inputs[1]).ints;
  const int64_t r = static_cast<int64_t>(L.shape(n.inputs[0]).size());
  if (axes.size() != 1) return r == 1 && axes.empty();
  return axes[0] == r - 1 || axes[0] == -1;
}

bool spatial_mean(const Lowering& L, const ir::Node& n) {  // a mean over axes 2 and 3 of a 4-D value
  Shape xs = L.shape(n.inputs[0]);
  if (xs.size() != 4) return false;
  std::vector<int64_t> axes;
  if (auto it = n.attrs.find("axes"); it != n.attrs.end()) axes = it->second.ints;
  else if (n.inputs.size() > 1 && n.inputs[1] >= 0 && L.val(n.inputs[1]).is_const) axes = L.val(n.inputs[1]).ints;
  for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
  std::sort(axes.begin(), axes.end());
  return axes == std::vector<int64_t>{2, 3};
}

int rw_layernorm(RowEmit& e);

// Softmax, LayerNormalization and reductions over other axes than the last: the input copied with those axes moved
// last (none when they are last already, as LayerNormalization's over several axes), the node's row-wise function
// over [other axes, those axes] (one kernel of its own), and for Softmax/LogSoftmax the result moved back.
void lower_over_axes(Lowering& L, const ir::Node& n, std::vector<int64_t> axes) {
  const int x = n.inputs[0], y = n.outputs[0];
  const Shape xs = L.shape(x);
  const int64_t r = static_cast<int64_t>(xs.size());
  std::vector<int64_t> perm;
  for (int64_t d = 0; d < r; ++d)
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) perm.push_back(d);
  const size_t kept = perm.size();
  perm.insert(perm.end(), axes.begin(), axes.end());
  Shape ts;
  std::vector<int64_t> xst = strides_of(xs), sst;
  for (int64_t d : perm) ts.push_back(xs[d]), sst.push_back(xst[d]);
  const int64_t rows = prod(ts, 0, kept), cols = prod(ts, kept);
  bool moved = false;
  for (size_t i = 0; i < perm.size(); ++i) moved = moved || perm[i] != static_cast<int64_t>(i);
  Stored X = L.plain_input(x);
  if (moved) {
    Stored T{L.temp(n.name + ".moved", X.dtype, ts), 0, X.dtype, false};
    L.view_copy(n.name, X, 0, ts, sst, T, 0, strides_of(ts));
    X = T;
  }
  KernelCall call = L.rowwise_call(n.name, rows, cols);
  Group gr;
  gr.O = {rows, cols};
  gr.R = rows, gr.C = cols;
  gr.node_of[x] = L.rw_input(call, X, false, 0);
  gr.per_row[x] = false;
  RowEmit e{L, call, gr, n};
  int out;
  if (n.op == "LayerNormalization") {
    // scale and bias: constants broadcast to the normalised axes, one row of `cols`
    for (size_t k = 1; k < 3; ++k) {
      if (k >= n.inputs.size() || n.inputs[k] < 0) continue;
      const ir::Value& v = L.val(n.inputs[k]);
      if (!v.is_const) L.fail(n, "a scale or bias computed at run time is not supported over several axes");
      const Shape norm(xs.begin() + static_cast<int64_t>(kept), xs.end());
      std::vector<float> d = broadcast_data(v.data, v.shape(), norm);
      gr.node_of[n.inputs[k]] =
          L.rw_input(call, Stored{L.const_f32(v.name + ".row", {cols}, d), 0, DType::F32, false}, false, 1);
    }
    out = rw_layernorm(e);
  } else {
    const OpDef* def = find_op(n.op);
    out = def->rowwise(e);
  }
  // A reduction (one value per row: the output's elements in order) or the axes last already: written as it is.
  if (e.out_per_row || !moved || n.op.rfind("Reduce", 0) == 0 || n.op.rfind("Arg", 0) == 0) {
    Stored Y = L.destination(y, L.storage_type(y), true);
    L.rw_output(call, out, Y);
    L.plan_.calls.push_back(std::move(call));
    return;
  }
  Stored Y = L.destination(y, L.storage_type(y));
  Stored T{L.temp(n.name + ".result", Y.dtype, ts), 0, Y.dtype, false};
  L.rw_output(call, out, T);
  L.plan_.calls.push_back(std::move(call));
  // back: y[i] = T[perm-applied i]
  std::vector<int64_t> tst = strides_of(ts), back(static_cast<size_t>(r));
  for (size_t i = 0; i < perm.size(); ++i) back[static_cast<size_t>(perm[i])] = tst[i];
  L.view_copy(n.name, T, 0, xs, back, Y, 0, strides_of(xs));
}

void lower_axis(Lowering& L, const ir::Node& n) {  // Softmax, LogSoftmax: one axis; LayerNormalization: axis..end
  const int64_t r = static_cast<int64_t>(L.shape(n.inputs[0]).size());
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += r;
  std::vector<int64_t> axes{axis};
  if (n.op == "LayerNormalization")
    for (int64_t d = axis + 1; d < r; ++d) axes.push_back(d);
  lower_over_axes(L, n, axes);
}

void lower_reduce(Lowering& L, const ir::Node& n) {
  if (n.op == "ReduceMean" && spatial_mean(L, n)) return lower_spatial_mean(L, n, n.inputs[0], n.outputs[0]);
  const std::vector<int64_t> axes = n.attrs.at("axes").ints;  // resolved by shape inference (sorted)
  if (axes.empty()) {  // noop_with_empty_axes: the input itself
    L.alias(n);
    return;
  }
  lower_over_axes(L, n, axes);
}

int rw_softmax(RowEmit& e) {
  int x = e.in(0);
  int mx = e.node(rw::Op::RowMax, {x});
  int ex = e.node(rw::Op::Exp, {e.node(rw::Op::Sub, {x, mx})});
  return e.node(rw::Op::Mul, {ex, e.node(rw::Op::Recip, {e.node(rw::Op::RowSum, {ex})})});
}

int rw_log_softmax(RowEmit& e) {  // s - log(rowsum(exp(s))), s = x - rowmax(x)
  int s = e.node(rw::Op::Sub, {e.in(0), e.node(rw::Op::RowMax, {e.in(0)})});
  int l = e.node(rw::Op::Log, {e.node(rw::Op::RowSum, {e.node(rw::Op::Exp, {s})})});
  return e.node(rw::Op::Sub, {s, l});
}

int rw_layernorm(RowEmit& e) {
  const ir::Node& n = e.n;
  for (size_t k = 1; k < n.outputs.size(); ++k)
    if (n.outputs[k] >= 0 && !e.L.users_[n.outputs[k]].empty()) e.L.fail(n, "only the first output may be used");
  const float eps = n.attr_float("epsilon", 1e-5f);
  int x = e.in(0);
  int d = e.node(rw::Op::Sub, {x, e.node(rw::Op::RowMean, {x})});
  int var = e.node(rw::Op::RowMean, {e.node(rw::Op::Mul, {d, d})});
  int inv = e.node(rw::Op::Rsqrt, {e.node(rw::Op::Add, {var, e.konst(eps)})});
  int r = e.node(rw::Op::Mul, {d, inv});
  r = e.node(rw::Op::Mul, {r, e.in(1)});
  if (n.inputs.size() > 2 && n.inputs[2] >= 0) r = e.node(rw::Op::Add, {r, e.in(2)});
  return r;
}

bool batchnorm_fusable(const Lowering& L, const ir::Node& n) {
  for (size_t k = 1; k < 5; ++k)
    if (k >= n.inputs.size() || n.inputs[k] < 0 || !L.val(n.inputs[k]).is_const) return false;
  return L.shape(n.inputs[0]).size() >= 2;
}

int rw_batchnorm(RowEmit& e) {  // inference: x * scale[c] + shift[c], c = axis 1
  const ir::Node& n = e.n;
  const float eps = n.attr_float("epsilon", 1e-5f);
  const auto &gam = e.L.val(n.inputs[1]).data, &beta = e.L.val(n.inputs[2]).data, &mean = e.L.val(n.inputs[3]).data,
             &var = e.L.val(n.inputs[4]).data;
  std::vector<float> scale(gam.size()), shift(gam.size());
  for (size_t c = 0; c < gam.size(); ++c) {
    scale[c] = gam[c] / std::sqrt(var[c] + eps);
    shift[c] = beta[c] - mean[c] * scale[c];
  }
  Shape cs(e.L.shape(n.inputs[0]).size(), 1);
  cs[1] = static_cast<int64_t>(gam.size());
  int x = e.in(0);
  int r = e.node(rw::Op::Add, {e.node(rw::Op::Mul, {x, e.const_operand(scale, cs, n.name + ".scale")}),
                               e.const_operand(shift, cs, n.name + ".shift")});
  e.out_per_row = e.per_row(n.inputs[0]);
  return r;
}

template <rw::Op O>
int reduce(RowEmit& e) {
  const int r = e.gr.C == 1 ? e.in(0) : e.node(O, {e.in(0)});
  e.out_per_row = e.gr.C != 1;
  return r;
}

int reduce_min(RowEmit& e) {  // -max(-x)
  if (e.gr.C == 1) return e.in(0);
  e.out_per_row = true;
  return e.node(rw::Op::Neg, {e.node(rw::Op::RowMax, {e.node(rw::Op::Neg, {e.in(0)})})});
}

// ReduceL1 sum|x|, ReduceL2 sqrt(sum x^2), ReduceSumSquare sum x^2, ReduceLogSumExp m + log(sum exp(x - m)) with
// m = max x (no overflow); over one element they are |x|, |x|, x^2 and x.
int reduce_composite(RowEmit& e) {
  const std::string& op = e.n.op;
  const int x = e.in(0);
  const bool one = e.gr.C == 1;
  e.out_per_row = !one;
  auto sum = [&](int v) { return one ? v : e.node(rw::Op::RowSum, {v}); };
  if (op == "ReduceL1") return sum(e.node(rw::Op::Abs, {x}));
  if (op == "ReduceSumSquare") return sum(e.node(rw::Op::Mul, {x, x}));
  if (op == "ReduceL2") return one ? e.node(rw::Op::Abs, {x}) : e.node(rw::Op::Sqrt, {sum(e.node(rw::Op::Mul, {x, x}))});
  if (one) return x;  // ReduceLogSumExp
  const int m = e.node(rw::Op::RowMax, {x});
  return e.node(rw::Op::Add, {m, e.node(rw::Op::Log, {sum(e.node(rw::Op::Exp, {e.node(rw::Op::Sub, {x, m})}))})});
}

// ArgMax/ArgMin along the columns, exact in f32 (indices below 2^24): with m = max x (ArgMin: of -x), e = 1 where
// x = m else 0 (1 - |sign(x - m)|); the first index is C - max(e * (C - j)), the last max(e * (j + 1)) - 1, j the
// column. A NaN in a row makes its index undefined (ONNX leaves it so; torch picks the NaN).
int rw_arg(RowEmit& e) {
  const int64_t C = e.gr.C;
  e.out_per_row = C != 1;
  if (C == 1) return e.konst(0.0f);
  const bool last = e.n.attr_int("select_last_index", 0) != 0;
  int x = e.in(0);
  if (e.n.op == "ArgMin") x = e.node(rw::Op::Neg, {x});
  const int m = e.node(rw::Op::RowMax, {x});
  const int eq = e.node(rw::Op::Sub, {e.konst(1.0f), e.node(rw::Op::Abs, {e.node(rw::Op::Sign, {e.node(rw::Op::Sub, {x, m})})})});
  std::vector<float> j(static_cast<size_t>(C));
  for (int64_t k = 0; k < C; ++k) j[static_cast<size_t>(k)] = static_cast<float>(last ? k + 1 : C - k);
  const int w = e.node(rw::Op::RowMax, {e.node(rw::Op::Mul, {eq, e.const_operand(j, {C}, last ? "column.plus1." + std::to_string(C) : "column.from_end." + std::to_string(C))})});
  return last ? e.node(rw::Op::Sub, {w, e.konst(1.0f)}) : e.node(rw::Op::Sub, {e.konst(static_cast<float>(C)), w});
}

bool arg_last(const Lowering& L, const ir::Node& n) {
  return n.attr_int("axis", 0) == static_cast<int64_t>(L.shape(n.inputs[0]).size()) - 1;
}

void lower_arg(Lowering& L, const ir::Node& n) { lower_over_axes(L, n, {n.attr_int("axis", 0)}); }

// InstanceNormalization: x [N, C, S...] row-major is N x C rows of prod(S) columns, each normalised as a layer
// norm's row; scale and B are per-row inputs of period C (constants only).
void lower_instance_norm(Lowering& L, const ir::Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const Shape xs = L.shape(x);
  for (size_t k = 1; k < 3; ++k)
    if (!L.val(n.inputs[k]).is_const) L.fail(n, "a scale or bias computed at run time is not supported (only constants)");
  const int64_t C = xs[1], rows = xs[0] * C, cols = prod(xs, 2);
  const float eps = n.attr_float("epsilon", 1e-5f);
  KernelCall call = L.rowwise_call(n.name, rows, cols);
  const int X = L.rw_input(call, L.plain_input(x), false, 0);
  auto per_channel = [&](size_t k) {
    const ir::Value& v = L.val(n.inputs[k]);
    return L.rw_input(call, Stored{L.const_f32(v.name, {C}, v.data), 0, DType::F32, false}, true, C);
  };
  const int d = L.rw_node(call, rw::Op::Sub, {X, L.rw_node(call, rw::Op::RowMean, {X})});
  const int var = L.rw_node(call, rw::Op::RowMean, {L.rw_node(call, rw::Op::Mul, {d, d})});
  const int inv = L.rw_node(call, rw::Op::Rsqrt, {L.rw_node(call, rw::Op::Add, {var, L.rw_node(call, rw::Op::Const, {}, eps)})});
  int r = L.rw_node(call, rw::Op::Mul, {L.rw_node(call, rw::Op::Mul, {d, inv}), per_channel(1)});
  r = L.rw_node(call, rw::Op::Add, {r, per_channel(2)});
  L.rw_output(call, r, L.destination(y, L.storage_type(y)));
  L.plan_.calls.push_back(std::move(call));
}

}  // namespace

void add_normalize_ops(OpTable& t) {
  constexpr Fusion R = Fusion::RowReduce;
  t.add({.name = "Softmax", .attrs = {{"axis", K::Int}}, .infer = infer_softmax, .fusion = R,
         .fusable = last_axis, .rowwise = rw_softmax, .lower = lower_axis});
  t.add({.name = "LogSoftmax", .attrs = {{"axis", K::Int}}, .infer = infer_softmax, .fusion = R,
         .fusable = last_axis, .rowwise = rw_log_softmax, .lower = lower_axis});
  t.add({.name = "LayerNormalization", .min_inputs = 2, .max_inputs = 3, .max_outputs = 3,
         .attrs = {{"axis", K::Int}, {"epsilon", K::Float}, {"stash_type", K::Int}}, .infer = infer_layernorm,
         .fusion = R, .fusable = last_axis, .rowwise = rw_layernorm, .lower = lower_axis});
  t.add({.name = "BatchNormalization", .min_inputs = 5, .max_inputs = 5, .max_outputs = 3,
         .attrs = {{"epsilon", K::Float}, {"momentum", K::Float}, {"training_mode", K::Int}},
         .infer = infer_batchnorm, .fusion = Fusion::Elementwise, .fusable = batchnorm_fusable,
         .rowwise = rw_batchnorm,
         .no_lowering = "only inference-mode BatchNormalization with constant parameters is supported"});
  const std::map<std::string, K> reduce_attrs = {{"axes", K::Ints}, {"keepdims", K::Int},
                                                 {"noop_with_empty_axes", K::Int}};
  t.add({.name = "ReduceMean", .max_inputs = 2, .attrs = reduce_attrs, .infer = infer_reduce, .fusion = R,
         .fusable = reduce_last, .rowwise = reduce<rw::Op::RowMean>, .lower = lower_reduce});
  t.add({.name = "ReduceSum", .max_inputs = 2, .attrs = reduce_attrs, .infer = infer_reduce, .fusion = R,
         .fusable = reduce_last, .rowwise = reduce<rw::Op::RowSum>, .lower = lower_reduce});
  t.add({.name = "ReduceMax", .max_inputs = 2, .attrs = reduce_attrs, .infer = infer_reduce, .fusion = R,
         .fusable = reduce_last, .rowwise = reduce<rw::Op::RowMax>, .lower = lower_reduce});
  t.add({.name = "ReduceMin", .max_inputs = 2, .attrs = reduce_attrs, .infer = infer_reduce, .fusion = R,
         .fusable = reduce_last, .rowwise = reduce_min, .lower = lower_reduce});
  for (const char* op : {"ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp"})
    t.add({.name = op, .max_inputs = 2, .attrs = reduce_attrs, .infer = infer_reduce, .fusion = R,
           .fusable = reduce_last, .rowwise = reduce_composite, .lower = lower_reduce});
  for (const char* op : {"ArgMax", "ArgMin"})
    t.add({.name = op, .attrs = {{"axis", K::Int}, {"keepdims", K::Int}, {"select_last_index", K::Int}},
           .infer = infer_arg, .fold = fold_arg, .fusion = R, .fusable = arg_last, .rowwise = rw_arg,
           .lower = lower_arg});
  t.add({.name = "InstanceNormalization", .min_inputs = 3, .max_inputs = 3, .attrs = {{"epsilon", K::Float}},
         .infer = infer_instance_norm, .lower = lower_instance_norm});
}

}  // namespace tpusim::compiler
