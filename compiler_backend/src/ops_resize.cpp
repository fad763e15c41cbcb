// Resampling: Resize (nearest, linear, cubic; the coordinate transformations torch and other exporters emit), as
// torch's Upsample and interpolate export it. One axis at a time (separable): for each output position along the
// axis, its taps (1 nearest, 2 linear, 4 cubic: input positions, clamped to the edge, and weights) are computed on
// the host; the taps are gathered by strided moves (one per output position and tap, all the other axes at once)
// into a [taps, ...] buffer, and a row-wise kernel sums tap x weight in f32. Nearest is moves only (exact). 4-D
// values resized along H and W are resampled NHWC (a tap is then C contiguous elements), the rest row-major.
#include <algorithm>
#include <cmath>

#include "infer.h"
#include "lowering.h"

namespace tpusim::compiler {
namespace {

std::string attr_s(const ir::Node& n, const std::string& k, const std::string& def) {
  auto it = n.attrs.find(k);
  return it == n.attrs.end() || it->second.s.empty() ? def : it->second.s;
}

const std::vector<std::string> kModes = {"nearest", "linear", "cubic"};
const std::vector<std::string> kTransforms = {"half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"};
const std::vector<std::string> kNearest = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

bool one_of(const std::string& s, const std::vector<std::string>& v) {
  return std::find(v.begin(), v.end(), s) != v.end();
}

// Resize (opsets 11-19; opset 10's two inputs X, scales too): the output shape from constant scales (floor(in *
// scale)) or sizes, over all axes or `axes`. Records "scales" (Floats): per axis, the scale the coordinate
// transformation divides by, or 0 when sizes are given (the scale is then out / in, computed exactly).
void infer_resize(InferCtx& c) {
  const Shape x = c.shape(0);
  const int64_t r = c.rank(0);
  const std::string mode = attr_s(c.n, "mode", "nearest"), ctm = attr_s(c.n, "coordinate_transformation_mode", "half_pixel");
  if (!one_of(mode, kModes)) fail(c.n, "mode='" + mode + "' is not supported (nearest, linear, cubic)");
  if (!one_of(ctm, kTransforms))
    fail(c.n, "coordinate_transformation_mode='" + ctm +
                  "' is not supported (half_pixel, pytorch_half_pixel, align_corners, asymmetric)");
  const std::string nm = attr_s(c.n, "nearest_mode", "round_prefer_floor");
  if (mode == "nearest" && !one_of(nm, kNearest)) fail(c.n, "nearest_mode='" + nm + "' is not supported");
  if (c.ai("antialias", 0) != 0) fail(c.n, "antialias=1 is not supported");
  if (c.ai("exclude_outside", 0) != 0) fail(c.n, "exclude_outside=1 is not supported");
  if (attr_s(c.n, "keep_aspect_ratio_policy", "stretch") != "stretch")
    fail(c.n, "keep_aspect_ratio_policy='" + attr_s(c.n, "keep_aspect_ratio_policy", "") + "' is not supported");
  // Inputs: X, roi, scales, sizes (opset 10: X, scales).
  const size_t si = c.ninputs() == 2 ? 1 : 2, zi = 3;
  auto present = [&](size_t i) { return c.has(i) && c.in(i).elements() > 0; };
  std::vector<int64_t> axes = c.ais("axes");
  if (axes.empty())
    for (int64_t a = 0; a < r; ++a) axes.push_back(a);
  axes = c.axes(axes, r);
  std::vector<float> scales(static_cast<size_t>(r), 1.0f);
  Shape out = x;
  if (present(si) == present(zi)) fail(c.n, "exactly one of 'scales' and 'sizes' must be given");
  if (present(si)) {
    const ir::Value& s = c.in(si);
    if (!s.is_const || s.elem_type != ir::kFloat) fail(c.n, "input '" + s.name + "' (scales) must be a float constant");
    if (s.elements() != static_cast<int64_t>(axes.size()))
      fail(c.n, "scales has " + std::to_string(s.elements()) + " values for " + std::to_string(axes.size()) + " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      const float sc = s.data[i];
      if (!(sc > 0) || !std::isfinite(sc)) fail(c.n, "scales must be positive and finite, got " + num(sc));
      scales[axes[i]] = sc;
      const double o = std::floor(static_cast<double>(x[axes[i]]) * static_cast<double>(sc));
      if (o > 1e15) fail(c.n, "scale " + num(sc) + " makes too large an output");
      out[axes[i]] = static_cast<int64_t>(o);
    }
  } else {
    const std::vector<int64_t> sizes = c.const_ints(zi, "sizes");
    if (sizes.size() != axes.size())
      fail(c.n, "sizes has " + std::to_string(sizes.size()) + " values for " + std::to_string(axes.size()) + " axes");
    for (size_t i = 0; i < axes.size(); ++i) {
      if (sizes[i] < 1) fail(c.n, "sizes=" + ints_str(sizes) + " must be positive");
      out[axes[i]] = sizes[i];
      scales[axes[i]] = 0.0f;
    }
  }
  for (int64_t a = 0; a < r; ++a)
    if (out[a] < 1 && x[a] > 0) fail(c.n, "the output " + ir::shape_str(out) + " is empty along axis " + std::to_string(a));
  ir::Attr a;
  a.kind = K::Floats;
  a.floats = scales;
  c.n.attrs["scales"] = a;
  c.out(0, c.type(0), out);
}

// The taps of output position o along an axis of `in` inputs and `out` outputs: (input index, weight) pairs.
struct Tap {
  int64_t index;
  double weight;
};

// scale: the given scale, or 0 for out / in (then x / scale is computed as x * in / out, exact for integers).
std::vector<std::vector<Tap>> axis_taps(const ir::Node& n, int64_t in, int64_t out, double scale) {
  const std::string mode = attr_s(n, "mode", "nearest"), ctm = attr_s(n, "coordinate_transformation_mode", "half_pixel");
  const std::string nm = attr_s(n, "nearest_mode", "round_prefer_floor");
  const double a = n.attr_float("cubic_coeff_a", -0.75f);
  auto clamp = [&](int64_t i) { return std::clamp<int64_t>(i, 0, in - 1); };
  std::vector<std::vector<Tap>> taps(static_cast<size_t>(out));
  auto unscale = [&](double v) {
    return scale > 0 ? v / scale : v * static_cast<double>(in) / static_cast<double>(out);
  };
  for (int64_t o = 0; o < out; ++o) {
    double x;
    if (ctm == "align_corners") x = out == 1 ? 0.0 : static_cast<double>(o) * static_cast<double>(in - 1) / static_cast<double>(out - 1);
    else if (ctm == "asymmetric") x = unscale(static_cast<double>(o));
    else if (ctm == "pytorch_half_pixel" && out == 1) x = 0.0;
    else x = unscale(static_cast<double>(o) + 0.5) - 0.5;
    std::vector<Tap>& t = taps[static_cast<size_t>(o)];
    if (mode == "nearest") {
      double f = std::floor(x);
      int64_t i;
      if (nm == "floor") i = static_cast<int64_t>(f);
      else if (nm == "ceil") i = static_cast<int64_t>(std::ceil(x));
      else if (x - f == 0.5) i = static_cast<int64_t>(nm == "round_prefer_floor" ? f : f + 1);
      else i = static_cast<int64_t>(std::round(x));
      t.push_back({clamp(i), 1.0});
    } else if (mode == "linear") {
      x = std::clamp(x, 0.0, static_cast<double>(in - 1));
      const int64_t i0 = static_cast<int64_t>(std::floor(x));
      const double l = x - static_cast<double>(i0);
      t.push_back({i0, 1.0 - l});
      t.push_back({clamp(i0 + 1), l});
    } else {  // cubic (Keys, coefficient a), taps clamped to the edge
      const int64_t i0 = static_cast<int64_t>(std::floor(x));
      const double f = x - static_cast<double>(i0);
      auto near = [&](double d) { return ((a + 2) * d - (a + 3)) * d * d + 1; };       // |d| <= 1
      auto far = [&](double d) { return ((a * d - 5 * a) * d + 8 * a) * d - 4 * a; };  // 1 < |d| < 2
      const double w[4] = {far(1 + f), near(f), near(1 - f), far(2 - f)};
      for (int k = 0; k < 4; ++k) t.push_back({clamp(i0 - 1 + k), w[k]});
    }
  }
  return taps;
}

void lower_resize(Lowering& L, const ir::Node& n) {
  const int x = n.inputs[0], y = n.outputs[0];
  const Shape xs = L.shape(x), ys = L.shape(y);
  const size_t r = xs.size();
  auto sc = n.attrs.find("scales");
  if (sc == n.attrs.end() || sc->second.floats.size() != r) L.fail(n, "internal: scales were not resolved");
  const std::vector<float>& scales = sc->second.floats;
  std::vector<size_t> axes;  // the axes that change
  for (size_t a = 0; a < r; ++a)
    if (xs[a] != ys[a] || (scales[a] != 1.0f && scales[a] != 0.0f)) axes.push_back(a);
  const bool nearest = attr_s(n, "mode", "nearest") == "nearest";
  // NHWC for 4-D values resized along H and W only.
  const bool nhwc = r == 4 && std::all_of(axes.begin(), axes.end(), [](size_t a) { return a >= 2; });
  const std::vector<size_t> phys_of = nhwc ? std::vector<size_t>{0, 3, 1, 2} : [&] {
    std::vector<size_t> v(r);
    for (size_t i = 0; i < r; ++i) v[i] = i;
    return v;
  }();
  auto physical = [&](const Shape& s) {
    if (!nhwc) return s;
    return Shape{s[0], s[2], s[3], s[1]};
  };
  Stored cur = L.get_any(x, nhwc);
  Shape cs = physical(xs);  // the current physical shape
  if (axes.empty()) {       // the identity: a copy, as the value is its own
    Stored Y = L.remember(y, Stored{L.temp(L.val(y).name, cur.dtype, ys), 0, cur.dtype, nhwc});
    L.copy(n.name, {BufferMove{cur.buf, Y.buf, cur.off, Y.off, 1, static_cast<uint64_t>(prod(xs) * isa::dtype_size(cur.dtype)), 0, 0}});
    return;
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    const size_t a = axes[k], p = phys_of[a];
    const bool last = k + 1 == axes.size();
    const int64_t in = xs[a], out = ys[a];
    const auto taps = axis_taps(n, in, out, static_cast<double>(scales[a]));
    const int64_t outer = prod(cs, 0, p), inner = prod(cs, p + 1);
    Shape ns = cs;
    ns[p] = out;
    const int es = isa::dtype_size(cur.dtype);
    const size_t T = taps[0].size();
    // The taps: [T, outer, out, inner] (nearest: the output itself).
    DType next = nearest ? cur.dtype : (last ? L.storage_type(y) : DType::F32);
    Stored tb{L.temp(n.name + ".taps" + std::to_string(a), cur.dtype, {static_cast<int64_t>(T), outer, out, inner}), 0,
              cur.dtype, false};
    Stored dst;
    if (nearest && last) dst = L.remember(y, Stored{L.temp(L.val(y).name, cur.dtype, ys), 0, cur.dtype, nhwc});
    else if (last) dst = L.remember(y, Stored{L.temp(L.val(y).name, next, ys), 0, next, nhwc});
    else dst = Stored{L.temp(n.name + ".axis" + std::to_string(a), next, ns), 0, next, false};
    if (nearest) tb = dst;
    std::vector<BufferMove> moves;
    const uint64_t rowbytes = static_cast<uint64_t>(inner * es);
    for (int64_t o = 0; o < out; ++o)
      for (size_t t = 0; t < T; ++t) {
        const Tap& tp = taps[static_cast<size_t>(o)][t];
        moves.push_back(BufferMove{cur.buf, tb.buf, cur.off + static_cast<uint64_t>(tp.index) * rowbytes,
                                   tb.off + ((static_cast<uint64_t>(t * outer) * static_cast<uint64_t>(out)) +
                                             static_cast<uint64_t>(o)) * rowbytes,
                                   static_cast<uint64_t>(outer), rowbytes, in * inner * es, out * inner * es});
      }
    L.copy(n.name, std::move(moves));
    if (!nearest) {
      // sum over taps of tap x weight: rows of the last physical axis (or of the resized axis when it is the last),
      // the weights one per row (period out x the axes between) or one per column.
      const bool by_col = inner == 1;
      const int64_t cols = by_col ? out : cs.back(), mid = by_col ? 1 : inner / cs.back();
      const int64_t rows = outer * out * inner / cols;
      KernelCall call = L.rowwise_call(n.name, rows, cols);
      int acc = -1;
      for (size_t t = 0; t < T; ++t) {
        std::vector<float> w(static_cast<size_t>(out * mid));
        for (int64_t o = 0; o < out; ++o)
          for (int64_t m = 0; m < mid; ++m)
            w[static_cast<size_t>(o * mid + m)] = static_cast<float>(taps[static_cast<size_t>(o)][t].weight);
        const std::string wn = n.name + ".w" + std::to_string(a) + "." + std::to_string(t);
        int xi = L.rw_input(call, Stored{tb.buf, tb.off + static_cast<uint64_t>(t) * static_cast<uint64_t>(outer * out) * rowbytes,
                                         cur.dtype, false},
                            false, 0);
        int wi = by_col ? L.rw_input(call, Stored{L.const_f32(wn, {out}, w), 0, DType::F32, false}, false, 1)
                        : L.rw_input(call, Stored{L.const_f32(wn, {out * mid, 1}, w), 0, DType::F32, false}, true,
                                     out * mid);
        int pr = L.rw_node(call, rw::Op::Mul, {xi, wi});
        acc = acc < 0 ? pr : L.rw_node(call, rw::Op::Add, {acc, pr});
      }
      L.rw_output(call, acc, dst);
      call.flops = 2.0 * static_cast<double>(T) * static_cast<double>(rows * cols);
      L.plan_.calls.push_back(std::move(call));
    }
    cur = dst;
    cs = ns;
  }
}

}  // namespace

void add_resize_ops(OpTable& t) {
  t.add({.name = "Resize", .max_inputs = 4,
         .attrs = {{"antialias", K::Int}, {"axes", K::Ints}, {"coordinate_transformation_mode", K::String},
                   {"cubic_coeff_a", K::Float}, {"exclude_outside", K::Int}, {"extrapolation_value", K::Float},
                   {"keep_aspect_ratio_policy", K::String}, {"mode", K::String}, {"nearest_mode", K::String}},
         .infer = infer_resize, .lower = lower_resize});
}

}  // namespace tpusim::compiler
