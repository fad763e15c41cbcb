// Data movement and shape computations: views (Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: aliases, no
// kernel), strided copies (Transpose, Slice, Split, Concat, Expand, Pad, Gather with constant indices,
// DepthToSpace and SpaceToDepth: one 6-D strided view), embedding lookups (Gather of a constant table by run-time
// indices: gather.s), Tile (a copy whose repeats read with stride 0), Trilu (a product with a constant 0/1 mask in
// the row-wise kernel), CumSum (a scan of log2(N) row-wise additions of shifted copies), and the operators that
// only ever fold (Shape, Size, ConstantOfShape, Range).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "fold.h"
#include "infer.h"
#include "lowering.h"

namespace tpusim::compiler {
namespace {

using T = HostTensor;

// ---- shape inference -----------------------------------------------------------------------------------------

// Dropout: the identity where it is not training, or drops nothing (a constant ratio of 0: torchvision's Swin
// exports its attention's dropout in training mode, with p = 0).
void infer_dropout(InferCtx& c) {
  if (c.has(2) && !c.in(2).is_const) fail(c.n, "training_mode must be a constant");
  const bool drops_nothing = c.has(1) && c.in(1).is_const && c.const_scalar(1, "ratio") == 0;
  if (c.has(2) && c.const_scalar(2, "training_mode") != 0 && !drops_nothing)
    fail(c.n, "training_mode=1 is not supported (inference only) with a ratio other than a constant 0");
  c.out(0, c.type(0), c.shape(0));
  c.out(1, ir::kBool, c.shape(0));
}

void infer_flatten(InferCtx& c) {
  const Shape x = c.shape(0);
  int64_t axis = c.axis(c.ai("axis", 1), c.rank(0), "axis", true);
  c.set_int("axis", axis);
  c.out(0, c.type(0), {prod(x.begin(), x.begin() + axis), prod(x.begin() + axis, x.end())});
}

void infer_concat(InferCtx& c) {
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
void infer_split(InferCtx& c) {
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
void infer_slice(InferCtx& c) {
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

void infer_gather(InferCtx& c) {
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

void infer_reshape(InferCtx& c) {
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

void infer_transpose(InferCtx& c) {
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

void infer_squeeze(InferCtx& c) {
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

void infer_unsqueeze(InferCtx& c) {
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

void infer_shape(InferCtx& c) {
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

void infer_size(InferCtx& c) { c.out(0, ir::kInt64, {}); }

void infer_constant_of_shape(InferCtx& c) {
  std::vector<int64_t> s = c.const_ints(0, "shape");
  ir::ElemType t = ir::kFloat;
  auto it = c.n.attrs.find("value");
  if (it != c.n.attrs.end()) {
    if (it->second.t_type == 0 || it->second.t.size() != 1) fail(c.n, "attribute 'value' must be a one-element tensor");
    t = it->second.t_type;
  }
  c.out(0, t, s);
}

void infer_range(InferCtx& c) {
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

void infer_expand(InferCtx& c) { c.out(0, c.type(0), broadcast(c.n, c.shape(0), c.const_ints(1, "shape"))); }

void infer_tile(InferCtx& c) {
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
void infer_pad(InferCtx& c) {
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

void infer_trilu(InferCtx& c) {
  if (c.rank(0) < 2) fail(c.n, "input must have rank 2 or more");
  if (c.has(1)) c.const_scalar(1, "k");
  c.out(0, c.type(0), c.shape(0));
}

// DepthToSpace (modes DCR, CRD) and SpaceToDepth of a 4-D [N, C, H, W] input with blocksize b.
void infer_depth_space(InferCtx& c) {
  const Shape x = c.shape(0);
  if (x.size() != 4) fail(c.n, "input " + ir::shape_str(x) + " must be 4-D [N, C, H, W]");
  if (!c.has_attr("blocksize")) fail(c.n, "attribute 'blocksize' is required");
  const int64_t b = c.ai("blocksize", 0);
  if (b < 1) fail(c.n, "blocksize=" + std::to_string(b) + " must be positive");
  if (c.n.op == "DepthToSpace") {
    const std::string mode = c.as("mode", "DCR");
    if (mode != "DCR" && mode != "CRD") fail(c.n, "mode='" + mode + "' is not supported (DCR and CRD are)");
    if (x[1] % (b * b) != 0)
      fail(c.n, "channels " + std::to_string(x[1]) + " are not a multiple of blocksize^2 = " + std::to_string(b * b));
    c.out(0, c.type(0), {x[0], x[1] / (b * b), mul(c.n, x[2], b), mul(c.n, x[3], b)});
    return;
  }
  if (x[2] % b != 0 || x[3] % b != 0)
    fail(c.n, "height and width of " + ir::shape_str(x) + " are not multiples of blocksize=" + std::to_string(b));
  c.out(0, c.type(0), {x[0], mul(c.n, x[1], b * b), x[2] / b, x[3] / b});
}

// CumSum: axis (input 1) a constant scalar; exclusive and reverse 0 or 1. The axis is recorded as attribute "axis".
void infer_cumsum(InferCtx& c) {
  const double a = c.const_scalar(1, "axis");
  c.set_int("axis", c.axis(static_cast<int64_t>(a), c.rank(0)));
  for (const char* k : {"exclusive", "reverse"})
    if (c.ai(k, 0) != 0 && c.ai(k, 0) != 1) fail(c.n, std::string(k) + "=" + std::to_string(c.ai(k, 0)) + " is not supported");
  if (c.rank(0) == 0) fail(c.n, "the input must have at least one axis");
  c.out(0, c.type(0), c.shape(0));
}

// ScatterND (folded only): data, indices [..., k] (k <= data's rank), updates [indices' shape but the last, then
// data's shape from k]; the output is data's shape and type.
void infer_scatter_nd(InferCtx& c) {
  const Shape x = c.shape(0), idx = c.shape(1), up = c.shape(2);
  if (idx.empty() || idx.back() < 1 || idx.back() > static_cast<int64_t>(x.size()))
    fail(c.n, "indices " + ir::shape_str(idx) + " must end in a length of 1 to data's rank " + std::to_string(x.size()));
  Shape want(idx.begin(), idx.end() - 1);
  want.insert(want.end(), x.begin() + idx.back(), x.end());
  if (up != want) fail(c.n, "updates " + ir::shape_str(up) + " must be " + ir::shape_str(want));
  const std::string r = c.as("reduction", "none");
  if (r != "none" && r != "add" && r != "mul" && r != "max" && r != "min")
    fail(c.n, "reduction='" + r + "' is not supported");
  c.out(0, c.type(0), x);
}

// ---- constant folding ----------------------------------------------------------------------------------------

// DepthToSpace/SpaceToDepth as one strided view: the output, row-major, is the 6-D `view` whose element at index i
// is the input's element sum(i[d] * strides[d]).
void depth_space_view(const ir::Node& n, const Shape& x, Shape& view, std::vector<int64_t>& strides) {
  const int64_t N = x[0], C = x[1], H = x[2], W = x[3], b = n.attr_int("blocksize", 1);
  auto mode = n.attrs.find("mode");
  if (n.op == "SpaceToDepth") {  // y[n, (i*b + j)*C + c, h, w] = x[n, c, h*b + i, w*b + j]
    view = {N, b, b, C, H / b, W / b};
    strides = {C * H * W, W, 1, H * W, b * W, b};
  } else if (mode != n.attrs.end() && mode->second.s == "CRD") {  // y[n, c, h*b + i, w*b + j] = x[n, (c*b + i)*b + j, h, w]
    view = {N, C / (b * b), H, b, W, b};
    strides = {C * H * W, b * b * H * W, W, b * H * W, 1, H * W};
  } else {  // DCR: y[n, c, h*b + i, w*b + j] = x[n, (i*b + j)*C' + c, h, w], C' = C / b^2
    const int64_t Cq = C / (b * b);
    view = {N, Cq, H, b, W, b};
    strides = {C * H * W, H * W, W, b * Cq * H * W, 1, Cq * H * W};
  }
}

Tensors fold_depth_space(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  Shape view;
  std::vector<int64_t> st;
  depth_space_view(n, in[0].shape, view, st);
  T r = in[0];
  r.shape = out_shape(g, n, 0);
  for_each_index(view, [&](const Shape& idx, int64_t flat) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * st[d];
    if (r.fl()) r.f[flat] = in[0].f[off];
    else r.i[flat] = in[0].i[off];
  });
  return {r};
}

// CumSum of a constant, in order along the axis (float32 adds, as torch on the CPU).
Tensors fold_cumsum(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const T& x = in[0];
  const size_t axis = static_cast<size_t>(n.attr_int("axis", 0));
  const int64_t len = x.shape[axis], inner = prod(x.shape, axis + 1), outer = prod(x.shape, 0, axis);
  const bool excl = n.attr_int("exclusive", 0) != 0, rev = n.attr_int("reverse", 0) != 0;
  T r = x;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      float fa = 0;
      int64_t ia = 0;
      for (int64_t s = 0; s < len; ++s) {
        const int64_t k = rev ? len - 1 - s : s, at = (o * len + k) * inner + i;
        if (r.fl()) {
          const float v = x.f[at];
          r.f[at] = excl ? fa : fa + v;
          fa += v;
        } else {
          const int64_t v = x.i[at];
          r.i[at] = wrap(excl ? ia : ia + v, x.type);
          ia += v;
        }
      }
    }
  return {r};
}

Tensors fold_view(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r = in[0];
  r.shape = out_shape(g, n, 0);
  return {r};
}

Tensors fold_dropout(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  Tensors r{in[0]};
  if (n.outputs.size() > 1 && n.outputs[1] >= 0) {
    T mask;
    mask.type = ir::kBool;
    mask.shape = in[0].shape;
    mask.i.assign(static_cast<size_t>(in[0].size()), 1);
    r.push_back(mask);
  }
  return r;
}

Tensors fold_shape(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r;
  r.type = ir::kInt64;
  int64_t s = n.attr_int("start", 0), e = n.attr_int("end", 0);
  r.i.assign(in[0].shape.begin() + s, in[0].shape.begin() + e);
  r.shape = {static_cast<int64_t>(r.i.size())};
  return {r};
}

Tensors fold_size(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r;
  r.type = ir::kInt64;
  r.i = {in[0].size()};
  return {r};
}

Tensors fold_expand(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const Shape st = strides_of(in[0].shape);
  return {map_index(in[0], out_shape(g, n, 0), [&](const Shape& idx) { return bcast_offset(in[0].shape, st, idx); })};
}

Tensors fold_transpose(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const Shape perm = attr_ints(n, "perm"), st = strides_of(in[0].shape);
  return {map_index(in[0], out_shape(g, n, 0), [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < perm.size(); ++d) off += idx[d] * st[perm[d]];
    return off;
  })};
}

Tensors fold_tile(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const Shape st = strides_of(in[0].shape);
  return {map_index(in[0], out_shape(g, n, 0), [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (idx[d] % in[0].shape[d]) * st[d];
    return off;
  })};
}

Tensors fold_slice(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const Shape starts = attr_ints(n, "starts"), steps = attr_ints(n, "steps"), st = strides_of(in[0].shape);
  return {map_index(in[0], out_shape(g, n, 0), [&](const Shape& idx) {
    int64_t off = 0;
    for (size_t d = 0; d < idx.size(); ++d) off += (starts[d] + idx[d] * steps[d]) * st[d];
    return off;
  })};
}

Tensors fold_gather(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const int64_t axis = n.attr_int("axis", 0);
  const Shape& x = in[0].shape;
  const Shape st = strides_of(x);
  const size_t irank = in[1].shape.size();
  const Shape ist = strides_of(in[1].shape);
  return {map_index(in[0], out_shape(g, n, 0), [&](const Shape& idx) {
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

// ScatterND: data with each index tuple's slice replaced by (or reduced with) its updates, in the indices' order.
Tensors fold_scatter_nd(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r = in[0];
  const Shape& x = r.shape;
  const Shape st = strides_of(x);
  const auto k = static_cast<size_t>(in[1].shape.back());
  int64_t slice = 1;
  for (size_t d = k; d < x.size(); ++d) slice *= x[d];
  const int64_t tuples = in[1].i.empty() ? 0 : static_cast<int64_t>(in[1].i.size() / k);
  const auto ra = n.attrs.find("reduction");
  const std::string red = ra == n.attrs.end() ? "none" : ra->second.s;
  for (int64_t j = 0; j < tuples; ++j) {
    int64_t off = 0;
    for (size_t d = 0; d < k; ++d) {
      int64_t v = in[1].i[static_cast<size_t>(j) * k + d];
      if (v < 0) v += x[d];
      if (v < 0 || v >= x[d]) fail(n, "index " + std::to_string(in[1].i[static_cast<size_t>(j) * k + d]) +
                                          " is outside axis " + std::to_string(d) + " of " + ir::shape_str(x));
      off += v * st[d];
    }
    for (int64_t e = 0; e < slice; ++e) {
      const auto o = static_cast<size_t>(off + e), u = static_cast<size_t>(j * slice + e);
      auto apply = [&](auto& dst, auto val) {
        if (red == "add") dst += val;
        else if (red == "mul") dst *= val;
        else if (red == "max") dst = std::max(dst, val);
        else if (red == "min") dst = std::min(dst, val);
        else dst = val;
      };
      if (r.fl()) apply(r.f[o], in[2].fl() ? in[2].f[u] : static_cast<float>(in[2].i[u]));
      else apply(r.i[o], in[2].fl() ? static_cast<int64_t>(in[2].f[u]) : in[2].i[u]);
    }
  }
  return {r};
}

Tensors fold_concat_split(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const int64_t axis = n.attr_int("axis", 0);
  if (n.op == "Concat") {
    T r;
    r.type = in[0].type;
    r.shape = out_shape(g, n, 0);
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
  Tensors r;
  const Shape st = strides_of(in[0].shape);
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

Tensors fold_pad(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const Shape pads = attr_ints(n, "pads"), st = strides_of(in[0].shape);
  const int64_t r = static_cast<int64_t>(in[0].shape.size());
  T padded = in[0];  // one extra element: the pad value
  if (padded.fl()) padded.f.push_back(n.attr_float("value", 0));
  else padded.i.push_back(static_cast<int64_t>(n.attr_float("value", 0)));
  const int64_t pad_at = in[0].size();
  T res = map_index(padded, out_shape(g, n, 0), [&](const Shape& idx) {
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

Tensors fold_constant_of_shape(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r;
  r.shape = out_shape(g, n, 0);
  r.type = out_type(g, n, 0);
  double v = 0;
  if (const ir::Attr* a = attr(n, "value")) v = a->t[0];
  if (r.fl()) r.f.assign(static_cast<size_t>(r.size()), static_cast<float>(v));
  else r.i.assign(static_cast<size_t>(r.size()), static_cast<int64_t>(v));
  return {r};
}

Tensors fold_range(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  T r;
  r.type = in[0].type;
  r.shape = out_shape(g, n, 0);
  for (int64_t k = 0; k < r.shape[0]; ++k) {
    if (r.fl()) r.f.push_back(in[0].f[0] + static_cast<float>(k) * in[2].f[0]);
    else r.i.push_back(in[0].i[0] + k * in[2].i[0]);
  }
  return {r};
}

Tensors fold_trilu(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
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

// ---- lowering ------------------------------------------------------------------------------------------------

void lower_alias(Lowering& L, const ir::Node& n) { L.alias(n); }

void lower_transpose(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  Shape xs = L.shape(x);
  std::vector<int64_t> perm;
  if (auto it = n.attrs.find("perm"); it != n.attrs.end()) perm = it->second.ints;
  if (perm.empty())
    for (int64_t d = static_cast<int64_t>(xs.size()) - 1; d >= 0; --d) perm.push_back(d);
  // Read transposed by its matmuls only? Then nothing to do (lower_matmul reads the input directly).
  bool only_matmuls = L.trans_b_ && L.is_last_two_swap(n) && !L.is_output_[y];
  for (int u : L.users_[y]) {
    const ir::Node& un = L.g_.nodes[u];
    only_matmuls = only_matmuls && un.op == "MatMul" && un.inputs[1] == y && un.inputs[0] != y;
  }
  if (only_matmuls && !L.users_[y].empty()) return;
  // Only axes of one element move (the other axes keep their order, as [1, 1, 12, 64] -> [1, 12, 1, 64] for a
  // decoded token's heads): the same bytes in the same order, a view (as Reshape), no copy.
  int64_t last = -1;
  bool same_bytes = true;
  for (int64_t a : perm)
    if (xs[static_cast<size_t>(a)] != 1) same_bytes = same_bytes && a > last, last = std::max(last, a);
  if (same_bytes) return L.alias(n);
  Stored X = L.plain_input(x);
  std::vector<int64_t> xst = strides_of(xs), sstr(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) sstr[d] = xst[static_cast<size_t>(perm[d])];
  Shape ys = L.shape(y);
  Stored Y{L.temp(L.val(y).name, X.dtype, ys), 0, X.dtype, false};
  L.view_copy(n.name, X, 0, ys, sstr, Y, 0, strides_of(ys));
  L.st_[y].push_back(Y);
}

// Slice, Concat and Split of 4-D values whose inputs are NHWC work on the NHWC bytes (shapes and axes
// permuted), so that a convolutional network's channel concatenations and splits stay in its layout.
bool nhwc_view(Lowering& L, const std::vector<int>& values) {
  bool any = false;
  for (int v : values) {
    if (v < 0) continue;
    if (L.shape(v).size() != 4) return false;
    any = any || (!L.val(v).is_const && L.prefers_nhwc(v));
  }
  return any;
}

Shape phys(const Shape& s, bool nhwc) { return nhwc ? Shape{s[0], s[2], s[3], s[1]} : s; }

size_t phys_axis(int64_t a, bool nhwc) {
  if (!nhwc) return static_cast<size_t>(a);
  return static_cast<size_t>(std::find(kToNhwc.begin(), kToNhwc.end(), a) - kToNhwc.begin());
}

void lower_slice(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  const bool nhwc = nhwc_view(L, {x});
  Shape xs = phys(L.shape(x), nhwc), ys = phys(L.shape(y), nhwc);
  // Shape inference resolved starts and steps for every axis (shape_inference.h).
  std::vector<int64_t> starts = n.attrs.at("starts").ints, steps = n.attrs.at("steps").ints;
  std::vector<int64_t> xst = strides_of(xs), sstr = xst;
  int64_t off = 0;
  for (size_t a = 0; a < xs.size(); ++a) {
    const size_t p = phys_axis(static_cast<int64_t>(a), nhwc);
    off += starts[a] * xst[p];
    sstr[p] = xst[p] * steps[a];
  }
  Stored X = L.get_any(x, nhwc);
  Stored Y = L.remember(y, Stored{L.temp(L.val(y).name, X.dtype, L.shape(y)), 0, X.dtype, nhwc});
  L.view_copy(n.name, X, off, ys, sstr, Y, 0, strides_of(ys));
}

void lower_concat(Lowering& L, const ir::Node& n) {
  int y = n.outputs[0];
  const bool nhwc = nhwc_view(L, n.inputs);
  Shape ys = phys(L.shape(y), nhwc);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(ys.size());
  const size_t pa = phys_axis(axis, nhwc);
  // One element type for all parts: bf16 unless every part is f32.
  DType dtype = DType::F32;
  for (int in : n.inputs)
    if (!L.val(in).is_const)
      for (const Stored& st : L.st_[in])
        if (st.dtype == DType::BF16) dtype = DType::BF16;
  Stored Y = L.remember(y, Stored{L.temp(L.val(y).name, dtype, L.shape(y)), 0, dtype, nhwc});
  std::vector<int64_t> yst = strides_of(ys);
  int64_t pos = 0;
  std::vector<BufferMove> moves;
  for (int in : n.inputs) {
    Shape s = phys(L.shape(in), nhwc);
    Stored X = L.get(in, dtype, nhwc);
    Stored dst = Y;
    dst.off += static_cast<uint64_t>(pos * yst[pa] * isa::dtype_size(dtype));
    L.view_moves(moves, X, dst, s, strides_of(s), yst, isa::dtype_size(dtype));
    pos += s[pa];
  }
  L.copy(n.name, std::move(moves));
}

void lower_split(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0];
  if (auto grouped = L.grouped_.find(x); grouped != L.grouped_.end()) {
    // Its GEMM stored the parts one after the other (grouped_split, ops_matmul.cpp): each output is a view.
    const Stored X = L.get_any(x, false);
    const Shape xs = L.shape(x);
    const uint64_t part =
        static_cast<uint64_t>(prod(xs, 0, xs.size() - 1) * grouped->second * isa::dtype_size(X.dtype));
    for (size_t i = 0; i < n.outputs.size(); ++i) {
      Stored Y = X;
      Y.off += i * part;
      L.remember(n.outputs[i], Y);
    }
    return;
  }
  const bool nhwc = nhwc_view(L, {x});
  Shape xs = phys(L.shape(x), nhwc);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(xs.size());
  const size_t pa = phys_axis(axis, nhwc);
  Stored X = L.get_any(x, nhwc);
  std::vector<int64_t> xst = strides_of(xs);
  // Every axis before the split's of one element (a decoded token's fused QKV, [1, 1, 3 x 768]): each part is a
  // contiguous run of the input's bytes, so it is a view of them at its offset, no copy (with N = H = W = 1 the
  // NHWC bytes are the row-major ones too).
  const bool runs = prod(xs, 0, pa) == 1;
  int64_t pos = 0;
  for (int out : n.outputs) {
    if (out < 0) continue;
    Shape s = phys(L.shape(out), nhwc);
    if (runs) {
      Stored Y = X;
      Y.off += static_cast<uint64_t>(pos * xst[pa] * isa::dtype_size(X.dtype));
      L.remember(out, Y);
    } else {
      Stored Y = L.remember(out, Stored{L.temp(L.val(out).name, X.dtype, L.shape(out)), 0, X.dtype, nhwc});
      L.view_copy(n.name, X, pos * xst[pa], s, xst, Y, 0, strides_of(s));
    }
    pos += s[pa];
  }
}

void lower_gather(Lowering& L, const ir::Node& n) {
  int data = n.inputs[0], ids = n.inputs[1], y = n.outputs[0];
  Shape ds = L.shape(data), ys = L.shape(y);
  int64_t axis = n.attr_int("axis", 0);
  if (axis < 0) axis += static_cast<int64_t>(ds.size());
  if (L.val(ids).is_const) {  // slices of an activation
    Stored X = L.plain_input(data);
    Stored Y{L.temp(L.val(y).name, X.dtype, ys), 0, X.dtype, false};
    const int64_t outer = prod(ds, 0, axis), inner = prod(ds, axis + 1);
    const std::vector<int64_t>& idx = L.val(ids).ints;
    std::vector<BufferMove> moves;
    const int es = isa::dtype_size(X.dtype);
    for (size_t j = 0; j < idx.size(); ++j) {
      int64_t k = idx[j] < 0 ? idx[j] + ds[axis] : idx[j];
      if (k < 0 || k >= ds[axis]) L.fail(n, "index " + std::to_string(idx[j]) + " out of range");
      Stored s = X, d = Y;
      s.off += static_cast<uint64_t>(k * inner * es);
      d.off += static_cast<uint64_t>(static_cast<int64_t>(j) * inner * es);
      L.view_moves(moves, s, d, {outer, inner}, {ds[axis] * inner, 1},
                 {static_cast<int64_t>(idx.size()) * inner, 1}, es);
    }
    L.copy(n.name, std::move(moves));
    L.st_[y].push_back(Y);
    return;
  }
  if (!L.val(data).is_const || axis != 0 || ds.size() != 2)
    L.fail(n, "only an embedding lookup (a constant 2-D table, axis 0) with indices computed at run time is supported");
  if (!L.have_gather_) L.fail(n, "embedding lookups need kernels/gather.s");
  const int64_t V = ds[0], D = ds[1], M = L.val(ids).elements();
  Stored I = L.get(ids, DType::I32, false);  // a model input, or computed indices (f32) converted
  const DType dtype = L.storage_type(y);
  int table = dtype == DType::BF16 ? L.const_bf16(L.val(data).name, ds, L.val(data).data) : L.const_f32(L.val(data).name, ds, L.val(data).data);
  // A lookup must read the rows it gathers, not the table: GPT-2's 77 MB token table gives 768 values a token.
  L.plan_.buffers[table].model_bytes = static_cast<uint64_t>(std::min(V, M) * D) * isa::dtype_size(dtype);
  Stored Y = L.destination(y, dtype);
  KernelCall call;
  call.label = n.name;
  call.kernel = "gather.s";
  call.tensors = {{"ids", I.buf}, {"table", table}, {"y", Y.buf}};
  call.offsets = {{"ids", I.off}, {"y", Y.off}};
  call.params = {{"M", M}, {"D", D}, {"V", V}, {"DT", dt(Y.dtype)}};
  call.bytes = static_cast<double>(M * D * isa::dtype_size(Y.dtype) * 2 + M * 4);
  L.plan_.calls.push_back(std::move(call));
}

void lower_expand(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  Shape xs = L.shape(x), ys = L.shape(y);
  while (xs.size() < ys.size()) xs.insert(xs.begin(), 1);
  std::vector<int64_t> st = strides_of(xs);
  for (size_t d = 0; d < xs.size(); ++d)
    if (xs[d] == 1) st[d] = 0;
  Stored X = L.plain_input(x);
  Stored Y{L.temp(L.val(y).name, X.dtype, ys), 0, X.dtype, false};
  L.view_copy(n.name, X, 0, ys, st, Y, 0, strides_of(ys));
  L.st_[y].push_back(Y);
}

// Tile: one strided copy over [r0, s0, r1, s1, ...] (repeat, then the input's axis), the repeats reading with stride 0.
void lower_tile(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  const Shape xs = L.shape(x), ys = L.shape(y);
  const std::vector<int64_t> xst = strides_of(xs);
  Shape view;
  std::vector<int64_t> sst, dst;
  std::vector<int64_t> yst = strides_of(ys);
  for (size_t d = 0; d < xs.size(); ++d) {
    const int64_t rep = xs[d] ? ys[d] / xs[d] : 0;
    view.push_back(rep), sst.push_back(0), dst.push_back(xs[d] * yst[d]);
    view.push_back(xs[d]), sst.push_back(xst[d]), dst.push_back(yst[d]);
  }
  Stored X = L.plain_input(x);
  Stored Y{L.temp(L.val(y).name, X.dtype, ys), 0, X.dtype, false};
  L.view_copy(n.name, X, 0, view, sst, Y, 0, dst);
  L.st_[y].push_back(Y);
}

void lower_depth_space(Lowering& L, const ir::Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  Shape view;
  std::vector<int64_t> st;
  depth_space_view(n, L.shape(x), view, st);
  Stored X = L.plain_input(x);
  Stored Y{L.temp(L.val(y).name, X.dtype, L.shape(y)), 0, X.dtype, false};
  L.view_copy(n.name, X, 0, view, st, Y, 0, strides_of(view));
  L.st_[y].push_back(Y);
}

// Trilu on a computed value: a product with the constant 0/1 mask of the last two axes (k a constant).
int rw_trilu(RowEmit& e) {
  const ir::Node& n = e.n;
  const Shape xs = e.L.shape(n.inputs[0]);
  int64_t k = 0;
  if (n.inputs.size() > 1 && n.inputs[1] >= 0) {
    const ir::Value& kv = e.L.val(n.inputs[1]);
    if (!kv.is_const || kv.elements() != 1) e.L.fail(n, "k must be a constant scalar");
    k = kv.ints.empty() ? static_cast<int64_t>(kv.data[0]) : kv.ints[0];
  }
  const bool upper = n.attr_int("upper", 1) != 0;
  const int64_t H = xs[xs.size() - 2], W = xs.back();
  std::vector<float> mask(static_cast<size_t>(H * W));
  for (int64_t r = 0; r < H; ++r)
    for (int64_t c = 0; c < W; ++c) mask[static_cast<size_t>(r * W + c)] = (upper ? c - r >= k : c - r <= k) ? 1.0f : 0.0f;
  e.out_per_row = e.per_row(n.inputs[0]);
  return e.node(rw::Op::Mul, {e.in(0), e.const_operand(mask, {H, W}, n.name + ".mask")});
}

// CumSum along an axis of N: the input copied with that axis first ([N, M], f32), then ceil(log2 N) row-wise
// additions (Hillis-Steele), each y[i] = x[i] + x[i - s] (reverse: + x[i + s]) for s = 1, 2, 4, ..., the terms
// missing at the ends read from P zero rows (P the largest power of two below N) before the data (after it for
// reverse). A kernel may not read one tensor at two overlapping places, so each value of the scan is kept twice,
// in a plain buffer and in one with the zero rows, both written by the step that makes it. Exclusive reads the
// result one row earlier (later) in the padded copy; it is copied back to the input's layout. f32 throughout, the
// additions in a tree order (torch adds in sequence).
void lower_cumsum(Lowering& L, const ir::Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const Shape xs = L.shape(x);
  const size_t axis = static_cast<size_t>(n.attr_int("axis", 0));
  const bool excl = n.attr_int("exclusive", 0) != 0, rev = n.attr_int("reverse", 0) != 0;
  const int64_t N = xs[axis], M = prod(xs) / std::max<int64_t>(N, 1);
  if (prod(xs) == 0) return (void)L.st_[y].push_back(Stored{L.temp(L.val(y).name, DType::F32, xs), 0, DType::F32, false});
  int64_t P = 1;
  while (P * 2 < N) P *= 2;
  // [N, M]: the axis first, the others in order.
  Shape view{N};
  const std::vector<int64_t> xst = strides_of(xs);
  std::vector<int64_t> sst{xst[axis]}, order{static_cast<int64_t>(axis)};
  for (size_t d = 0; d < xs.size(); ++d)
    if (d != axis) view.push_back(xs[d]), sst.push_back(xst[d]), order.push_back(static_cast<int64_t>(d));
  const uint64_t row = static_cast<uint64_t>(M) * 4;
  const uint64_t data = rev ? 0 : static_cast<uint64_t>(P) * row, pad = rev ? static_cast<uint64_t>(N) * row : 0;
  // plain[k]: [N, M]; padded[k]: [N + P, M], the data at `data`, zeros at `pad`.
  Stored plain[2], padded[2];
  const int zeros = L.pattern(0.0f, DType::F32, row);
  for (int k = 0; k < 2; ++k) {
    plain[k] = Stored{L.temp(n.name + ".scan" + std::to_string(k), DType::F32, {N, M}), 0, DType::F32, false};
    padded[k] = Stored{L.temp(n.name + ".scan" + std::to_string(k) + ".padded", DType::F32, {N + P, M}), 0, DType::F32, false};
  }
  Stored X = L.get(x, DType::F32, false), D = padded[0];
  D.off = data;
  std::vector<BufferMove> moves;
  for (int k = 0; k < 2; ++k)
    moves.push_back(BufferMove{zeros, padded[k].buf, 0, pad, static_cast<uint64_t>(P), row, 0, static_cast<int64_t>(row)});
  L.view_moves(moves, X, plain[0], view, sst, strides_of(view), 4);
  L.view_moves(moves, X, D, view, sst, strides_of(view), 4);
  L.copy(n.name, std::move(moves));
  // Row-wise kernels over the data as flat rows (the additions are elementwise): C columns dividing N * M.
  int64_t cols = std::min<int64_t>(M * N, 2048);
  while ((M * N) % cols != 0) --cols;
  int cur = 0;
  for (int64_t s = 1; s < N; s *= 2, cur ^= 1) {
    KernelCall call = L.rowwise_call(n.name, M * N / cols, cols);
    const uint64_t shifted = rev ? data + static_cast<uint64_t>(s) * row : data - static_cast<uint64_t>(s) * row;
    const int a = L.rw_input(call, plain[cur], false, 0);
    const int b = L.rw_input(call, Stored{padded[cur].buf, shifted, DType::F32, false}, false, 0);
    const int sum = L.rw_node(call, rw::Op::Add, {a, b});
    L.rw_output(call, sum, plain[cur ^ 1]);
    L.rw_output(call, sum, Stored{padded[cur ^ 1].buf, data, DType::F32, false});
    L.plan_.calls.push_back(std::move(call));
  }
  Stored R = excl ? padded[cur] : plain[cur];
  if (excl) R.off = rev ? data + row : data - row;
  // Back to the input's layout: y[idx] = R[idx[axis], the others].
  const std::vector<int64_t> vst = strides_of(view);
  std::vector<int64_t> back(xs.size());
  for (size_t i = 0; i < order.size(); ++i) back[static_cast<size_t>(order[i])] = vst[i];
  const DType want = L.storage_type(y);
  Stored Y = want == DType::F32 ? L.destination(y, DType::F32)
                                : Stored{L.temp(L.val(y).name, DType::F32, xs), 0, DType::F32, false};
  if (want != DType::F32) L.st_[y].push_back(Y);
  L.view_copy(n.name, R, 0, xs, back, Y, 0, strides_of(xs));
}

void lower_pad(Lowering& L, const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  auto mode = n.attrs.find("mode");
  if (mode != n.attrs.end() && mode->second.s != "constant") L.fail(n, "only mode 'constant' is supported");
  std::vector<int64_t> pads = n.attrs.at("pads").ints;  // resolved by shape inference
  float value = n.attr_float("value", 0.0f);
  Shape xs = L.shape(x), ys = L.shape(y);
  const size_t r = xs.size();
  for (size_t d = 0; d < r; ++d)
    if (pads[d] < 0 || pads[d + r] < 0) L.fail(n, "negative pads are not supported");
  Stored X = L.plain_input(x);
  Stored Y{L.temp(L.val(y).name, X.dtype, ys), 0, X.dtype, false};
  const int es = isa::dtype_size(X.dtype);
  const uint64_t row = static_cast<uint64_t>(ys.back() * es);
  int pat = L.pattern(value, X.dtype, row);
  std::vector<BufferMove> moves{BufferMove{pat, Y.buf, 0, 0, static_cast<uint64_t>(prod(ys, 0, r - 1)), row, 0,
                                           static_cast<int64_t>(row)}};
  std::vector<int64_t> yst = strides_of(ys);
  int64_t off = 0;
  for (size_t d = 0; d < r; ++d) off += pads[d] * yst[d];
  Stored dst = Y;
  dst.off += static_cast<uint64_t>(off * es);
  L.view_moves(moves, X, dst, xs, strides_of(xs), yst, es);
  L.copy(n.name, std::move(moves));
  L.st_[y].push_back(Y);
}

}  // namespace

void add_data_ops(OpTable& t) {
  // Views: no kernel.
  t.add({.name = "Identity", .infer = infer_unary, .fold = fold_view, .fusion = Fusion::Alias, .lower = lower_alias,
         .moves_data = true});
  t.add({.name = "Dropout", .max_inputs = 3, .max_outputs = 2, .attrs = {{"seed", K::Int}, {"ratio", K::Float}},
         .infer = infer_dropout, .fold = fold_dropout, .fusion = Fusion::Alias, .lower = lower_alias});
  t.add({.name = "Reshape", .min_inputs = 2, .max_inputs = 2, .attrs = {{"allowzero", K::Int}}, .infer = infer_reshape,
         .fold = fold_view, .fusion = Fusion::Alias, .lower = lower_alias, .moves_data = true});
  t.add({.name = "Flatten", .attrs = {{"axis", K::Int}}, .infer = infer_flatten, .fold = fold_view,
         .fusion = Fusion::Alias, .lower = lower_alias, .moves_data = true});
  t.add({.name = "Squeeze", .max_inputs = 2, .attrs = {{"axes", K::Ints}}, .infer = infer_squeeze, .fold = fold_view,
         .fusion = Fusion::Alias, .lower = lower_alias, .moves_data = true});
  t.add({.name = "Unsqueeze", .max_inputs = 2, .attrs = {{"axes", K::Ints}}, .infer = infer_unsqueeze,
         .fold = fold_view, .fusion = Fusion::Alias, .lower = lower_alias, .moves_data = true});
  // Copies.
  t.add({.name = "Transpose", .attrs = {{"perm", K::Ints}}, .infer = infer_transpose, .fold = fold_transpose,
         .lower = lower_transpose, .moves_data = true});
  t.add({.name = "Slice", .max_inputs = 5,
         .attrs = {{"starts", K::Ints}, {"ends", K::Ints}, {"axes", K::Ints}, {"steps", K::Ints}},
         .infer = infer_slice, .fold = fold_slice, .lower = lower_slice, .moves_data = true});
  t.add({.name = "Concat", .max_inputs = kManyInputs, .attrs = {{"axis", K::Int}}, .infer = infer_concat,
         .fold = fold_concat_split, .lower = lower_concat, .moves_data = true});
  t.add({.name = "Split", .max_inputs = 2, .max_outputs = kManyInputs,
         .attrs = {{"axis", K::Int}, {"split", K::Ints}, {"num_outputs", K::Int}}, .infer = infer_split,
         .fold = fold_concat_split, .lower = lower_split});
  t.add({.name = "Gather", .min_inputs = 2, .max_inputs = 2, .attrs = {{"axis", K::Int}}, .infer = infer_gather,
         .fold = fold_gather, .lower = lower_gather});
  t.add({.name = "Expand", .min_inputs = 2, .max_inputs = 2, .infer = infer_expand, .fold = fold_expand,
         .lower = lower_expand, .moves_data = true});
  t.add({.name = "Pad", .max_inputs = 4, .attrs = {{"mode", K::String}, {"pads", K::Ints}, {"value", K::Float}},
         .infer = infer_pad, .fold = fold_pad, .lower = lower_pad});
  t.add({.name = "Tile", .min_inputs = 2, .max_inputs = 2, .infer = infer_tile, .fold = fold_tile, .lower = lower_tile,
         .moves_data = true});
  t.add({.name = "DepthToSpace", .attrs = {{"blocksize", K::Int}, {"mode", K::String}}, .infer = infer_depth_space,
         .fold = fold_depth_space, .lower = lower_depth_space, .moves_data = true});
  t.add({.name = "SpaceToDepth", .attrs = {{"blocksize", K::Int}}, .infer = infer_depth_space,
         .fold = fold_depth_space, .lower = lower_depth_space, .moves_data = true});
  t.add({.name = "Trilu", .max_inputs = 2, .attrs = {{"upper", K::Int}}, .infer = infer_trilu, .fold = fold_trilu,
         .fusion = Fusion::Elementwise, .rowwise = rw_trilu});
  t.add({.name = "CumSum", .min_inputs = 2, .max_inputs = 2, .attrs = {{"exclusive", K::Int}, {"reverse", K::Int}},
         .infer = infer_cumsum, .fold = fold_cumsum, .lower = lower_cumsum, .reads_f32 = true});
  // Folded only.
  t.add({.name = "Shape", .attrs = {{"start", K::Int}, {"end", K::Int}}, .infer = infer_shape, .fold = fold_shape,
         .fold_shape_only = true});
  t.add({.name = "Size", .infer = infer_size, .fold = fold_size, .fold_shape_only = true});
  t.add({.name = "ConstantOfShape", .attrs = {{"value", K::Other}}, .infer = infer_constant_of_shape,
         .fold = fold_constant_of_shape});
  t.add({.name = "Range", .min_inputs = 3, .max_inputs = 3, .infer = infer_range, .fold = fold_range});
  t.add({.name = "ScatterND", .min_inputs = 3, .max_inputs = 3, .attrs = {{"reduction", K::String}},
         .infer = infer_scatter_nd, .fold = fold_scatter_nd});
}

}  // namespace tpusim::compiler
