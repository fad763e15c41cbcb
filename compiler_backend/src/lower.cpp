#include "lower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <set>

#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"

namespace tpusim::compiler {
namespace {

using isa::DType;
namespace rw = kernels::rowwise;
using Shape = std::vector<int64_t>;

constexpr int64_t dt(DType t) { return static_cast<int64_t>(t); }  // the kernels' DT_* symbols

[[noreturn]] void fail(const ir::Node& n, const std::string& msg) {
  throw Error("node '" + n.name + "' (" + n.op + "): " + msg);
}

std::string num(float f) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", static_cast<double>(f));
  return b;
}

int64_t prod(const Shape& s, size_t from = 0, size_t to = SIZE_MAX) {
  to = std::min(to, s.size());
  if (from >= to) return 1;
  return std::accumulate(s.begin() + static_cast<std::ptrdiff_t>(from), s.begin() + static_cast<std::ptrdiff_t>(to),
                         int64_t{1}, std::multiplies<>());
}

std::vector<uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    uint16_t h = isa::bf16_from_f32(v[i]);
    std::memcpy(&out[2 * i], &h, 2);
  }
  return out;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out(v.size() * 4);
  std::memcpy(out.data(), v.data(), out.size());
  return out;
}

std::vector<int64_t> strides_of(const Shape& s) {
  std::vector<int64_t> st(s.size(), 1);
  for (int i = static_cast<int>(s.size()) - 2; i >= 0; --i) st[i] = st[i + 1] * s[i + 1];
  return st;
}

// out (row-major, of `shape`) [i0, i1, ...] = d[i0 * strides[0] + i1 * strides[1] + ...].
std::vector<float> gather_strided(const std::vector<float>& d, const Shape& shape, const std::vector<int64_t>& strides) {
  std::vector<float> out(static_cast<size_t>(prod(shape)));
  std::vector<int64_t> idx(shape.size(), 0);
  for (size_t o = 0; o < out.size(); ++o) {
    int64_t src = 0;
    for (size_t i = 0; i < shape.size(); ++i) src += idx[i] * strides[i];
    out[o] = d[static_cast<size_t>(src)];
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      if (++idx[i] < shape[i]) break;
      idx[i] = 0;
    }
  }
  return out;
}

// Host broadcast of a constant to `to` (numpy rules), row-major.
std::vector<float> broadcast_data(const std::vector<float>& d, Shape from, const Shape& to) {
  while (from.size() < to.size()) from.insert(from.begin(), 1);
  std::vector<int64_t> fs = strides_of(from);
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] == 1) fs[i] = 0;
  return gather_strided(d, to, fs);
}

// out[i] = in[perm-applied]: out shape = [s[perm[0]], ...].
std::vector<float> permute_data(const std::vector<float>& d, const Shape& s, const std::vector<int>& perm) {
  Shape os(perm.size());
  std::vector<int64_t> is = strides_of(s), ps(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) os[i] = s[perm[i]], ps[i] = is[perm[i]];
  return gather_strided(d, os, ps);
}

const std::vector<int> kToNhwc = {0, 2, 3, 1};  // logical NCHW -> physical NHWC

bool elementwise_unary(const std::string& op) {
  static const std::set<std::string> ops = {"Relu", "Sigmoid", "Tanh", "Erf", "Sqrt", "Exp", "Neg", "Abs",
                                            "Reciprocal", "Gelu", "Clip", "Cast", "LeakyRelu",
                                            "HardSigmoid", "HardSwish",
                                            // the vector unit's log, sin, cos, roundings and what they compose into
                                            "Log", "Sin", "Cos", "Floor", "Ceil", "Round", "Sign", "Softplus", "Mish"};
  return ops.count(op) > 0;
}
bool elementwise_binary(const std::string& op) {
  static const std::set<std::string> ops = {"Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum"};
  return ops.count(op) > 0;
}

// A value as it lives in HBM: a buffer (and byte offset), an element type and a layout. 4-D values are NCHW
// (`nhwc` false) or NHWC; everything else is row-major in its ONNX shape.
struct Stored {
  int buf = -1;
  uint64_t off = 0;
  DType dtype = DType::BF16;
  bool nhwc = false;
};

class Lowering {
 public:
  Lowering(const ir::Graph& g, const Options& opts)
      : g_(g), opts_(opts), sym_(opts.target.symbols), absmax_(opts.activation_absmax), users_(g.values.size()), is_output_(g.values.size()), done_(g.nodes.size()) {
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      for (int in : g_.nodes[i].inputs)
        if (in >= 0) users_[in].push_back(static_cast<int>(i));
    for (int o : g_.outputs) is_output_[o] = true;
    std::string gemm = kernels::source("gemm.s").value_or("");
    trans_b_ = gemm.find("TRANS_B") != std::string::npos;
    have_gather_ = kernels::source("gather.s").has_value();
  }

  KernelPlan run() {
    for (int in : g_.inputs) {
      const ir::Value& v = g_.values[in];
      bool integer = v.elem_type != ir::kFloat;
      int b = add_buffer(v.name, Buffer::Kind::Input, integer ? DType::I32 : DType::F32, v.shape());
      st_[in].push_back(Stored{b, 0, integer ? DType::I32 : DType::F32, false});
    }
    for (int o : g_.outputs) {
      const ir::Value& v = g_.values[o];
      if (v.elem_type != ir::kFloat)
        throw Error("graph output '" + v.name + "' has element type " + ir::elem_type_name(v.elem_type) +
                    ": only float outputs are supported");
      out_buf_[o] = add_buffer(v.name, Buffer::Kind::Output, DType::F32, v.shape());
    }
    find_quantised();
    if (opts_.expose_calibration)
      for (int v : calib_) {
        const ir::Value& value = val(v);
        out_buf_[v] = add_buffer(kCalibrationPrefix + value.name, Buffer::Kind::Output, DType::F32, value.shape());
      }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (done_[i]) continue;
      lower_node(static_cast<int>(i));
    }
    for (int o : g_.outputs) write_output(o);
    if (opts_.expose_calibration)
      for (int v : calib_) write_output(v);
    return std::move(plan_);
  }

 private:
  // ---- int8 quantisation -----------------------------------------------------------------------------------
  // The activations an INT8 compile quantises: inputs of MatMul/Gemm with a constant 2-D B, of Conv with
  // constant weights and group 1 (and of nothing computed at compile time).
  void find_quantised() {
    for (const ir::Node& n : g_.nodes) {
      const bool mm = (n.op == "MatMul" || n.op == "Gemm") && val(n.inputs[1]).is_const &&
                      shape(n.inputs[1]).size() == 2 && shape(n.inputs[0]).size() >= 2;
      const bool conv = n.op == "Conv" && val(n.inputs[1]).is_const && n.attr_int("group", 1) == 1;
      if ((mm || conv) && !val(n.inputs[0]).is_const && val(n.inputs[0]).elem_type == ir::kFloat)
        calib_.insert(n.inputs[0]);
    }
    // Timing-only (Options::timing_only): a range of 1 where none was calibrated; ranges change no instruction.
    if (opts_.timing_only && opts_.precision == Precision::INT8)
      for (int v : calib_) absmax_.emplace(val(v).name, 1.0f);
  }

  bool int8(int v) const { return opts_.precision == Precision::INT8 && calib_.count(v); }

  // The activation scale s_a = absmax / 127 of value v (1 when the calibration saw only zeros).
  float act_scale(const ir::Node& n, int v) const {
    auto it = absmax_.find(val(v).name);
    if (it == absmax_.end())
      fail(n, "int8: no calibration range for activation '" + val(v).name + "' (give calibration inputs)");
    if (!(it->second >= 0) || !std::isfinite(it->second))
      fail(n, "int8: the calibration range of '" + val(v).name + "' is not finite");
    return it->second > 0 ? it->second / 127.0f : 1.0f;
  }

  // v as int8, x / s_a rounded to nearest even and saturated (cast.s with SCALE = 1/s_a), NHWC for 4-D.
  Stored quantized(const ir::Node& n, int v, bool nhwc) {
    if (auto it = quantized_.find(v); it != quantized_.end()) return it->second;
    const float inv = 1.0f / act_scale(n, v);
    Stored x = get_any(v, nhwc);
    Stored q{temp(val(v).name + ".i8", DType::I8, shape(v)), 0, DType::I8, x.nhwc};
    KernelCall call;
    call.label = "quantize(" + val(v).name + ")";
    call.kernel = "cast.s";
    call.tensors = {{"x", x.buf}, {"y", q.buf}};
    call.offsets = {{"x", x.off}, {"y", q.off}};
    call.params = {{"N", val(v).elements()}, {"SDT", dt(x.dtype)}, {"DDT", dt(DType::I8)},
                   {"SCALE", isa::bits_from_f32(inv)}};
    call.bytes = static_cast<double>(val(v).elements() * (isa::dtype_size(x.dtype) + 1));
    plan_.calls.push_back(std::move(call));
    return quantized_[v] = q;
  }

  // Weights [K, N] -> per-column scales (max|w| / 127) and int8 values, tiled like tiled_weights.
  int tiled_weights_i8(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n,
                       std::vector<float>& scales) {
    const int64_t R = sym_.at("MXU_ROWS"), C = sym_.at("MXU_COLS");
    const int64_t kt = (k + R - 1) / R, nt = (n + C - 1) / C;
    scales.assign(static_cast<size_t>(n), w.empty() ? 1.0f : 0.0f);  // timing-only: no values, scales of 1
    if (w.empty()) return add_const(name + ".i8", DType::I8, {kt, nt, R, C}, {});
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j)
        scales[j] = std::max(scales[j], std::fabs(w[static_cast<size_t>(i * n + j)]));
    for (float& s : scales) s = s > 0 ? s / 127.0f : 1.0f;
    std::vector<uint8_t> t(static_cast<size_t>(kt * nt * R * C), 0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float q = std::nearbyint(w[static_cast<size_t>(i * n + j)] / scales[j]);
        const auto v = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
        std::memcpy(&t[static_cast<size_t>((((i / R) * nt + j / C) * R + i % R) * C + j % C)], &v, 1);
      }
    return add_const(name + ".i8", DType::I8, {kt, nt, R, C}, std::move(t));
  }

  // out = act(acc * s_a * s_w[n] + bias[n]) from an int32 [rows, N] accumulator.
  // `value`: the graph value `out` holds (-1 when out is an intermediate form of it, e.g. virtual conv rows).
  void dequantize(const std::string& label, Stored acc, int64_t rows, int64_t n, float s_a, const std::vector<float>& s_w,
                  const std::vector<float>& bias, const std::string& wname, bool relu, Stored out, int value) {
    KernelCall call = rowwise_call(label, rows, n);
    std::vector<float> scale(s_w.size());
    for (size_t j = 0; j < s_w.size(); ++j) scale[j] = s_a * s_w[j];
    int r = rw_node(call, rw::Op::Mul,
                    {rw_input(call, acc, false, 0),
                     rw_input(call, Stored{const_f32(wname + ".scale", {n}, scale), 0, DType::F32, false}, false, 1)});
    if (!bias.empty())
      r = rw_node(call, rw::Op::Add,
                  {r, rw_input(call, Stored{const_f32(wname + ".bias", {n}, bias), 0, DType::F32, false}, false, 1)});
    if (relu) r = rw_node(call, rw::Op::Relu, {r});
    rw_output(call, r, out);
    if (value >= 0) int8_copy(call, r, value, out.nhwc);
    plan_.calls.push_back(std::move(call));
  }

  // When INT8 consumers will quantise value v (calibrated), the row-wise kernel computing it also writes its int8
  // copy (x / s rounded to nearest even, saturated), so that no separate cast pass reads it back.
  void int8_copy(KernelCall& call, int node, int v, bool nhwc) {
    if (opts_.precision != Precision::INT8 || !calib_.count(v) || quantized_.count(v)) return;
    auto it = absmax_.find(val(v).name);
    if (it == absmax_.end() || !(it->second > 0) || !std::isfinite(it->second)) return;
    const float inv = 127.0f / it->second;
    int q = rw_node(call, rw::Op::Mul, {node, rw_node(call, rw::Op::Const, {}, inv)});
    Stored s{temp(val(v).name + ".i8", DType::I8, shape(v)), 0, DType::I8, nhwc && layout_matters(v)};
    rw_output(call, q, s);
    quantized_[v] = s;
  }

  // One quantised matmul: c[m, n] = act(a @ w + bias) with a = value `a` ([m, k] rows of its buffer).
  void int8_gemm(const ir::Node& n, const std::string& label, Stored aq, int a, const std::vector<float>& w, int64_t m,
                 int64_t k, int64_t nn, const std::vector<float>& bias, const std::string& wname, bool relu,
                 Stored out, double flops, int value) {
    std::vector<float> s_w;
    int B = tiled_weights_i8(wname, w, k, nn, s_w);
    Stored acc{temp(label + ".acc", DType::I32, {m, nn}), 0, DType::I32, false};
    gemm(label, aq, Stored{B, 0, DType::I8, false}, -1, acc, m, k, nn, false, 1.0f, true, false);
    plan_.calls.back().params["IN_DT"] = dt(DType::I8);
    plan_.calls.back().params["OUT_DT"] = dt(DType::I32);
    plan_.calls.back().flops = flops;
    plan_.calls.back().bytes = static_cast<double>(m * k + k * nn + 4 * m * nn);
    dequantize(label, acc, m, nn, act_scale(n, a), s_w, bias, wname, relu, out, value);
  }

  // ---- buffers ---------------------------------------------------------------------------------------------
  int add_buffer(const std::string& name, Buffer::Kind kind, DType dtype, Shape shape, uint64_t extra = 0) {
    Buffer b{name, kind, dtype, std::move(shape), {}, 0, extra};
    plan_.buffers.push_back(std::move(b));
    return static_cast<int>(plan_.buffers.size()) - 1;
  }
  int temp(const std::string& name, DType dtype, Shape shape, uint64_t extra = 0) {
    return add_buffer(name, Buffer::Kind::Temp, dtype, std::move(shape), extra);
  }
  // A Const buffer; the same name with the same contents is shared, different contents get a fresh name.
  int add_const(const std::string& name, DType dtype, Shape shape, std::vector<uint8_t> data) {
    std::string unique = name;
    for (int suffix = 1;; ++suffix) {
      auto it = const_names_.find(unique);
      if (it == const_names_.end()) break;
      const Buffer& same = plan_.buffers[it->second];
      if (same.dtype == dtype && same.shape == shape && same.data == data) return it->second;
      unique = name + "." + std::to_string(suffix);
    }
    int b = add_buffer(unique, Buffer::Kind::Const, dtype, std::move(shape));
    plan_.buffers[b].data = std::move(data);
    const_names_[unique] = b;
    return b;
  }
  int const_f32(const std::string& name, Shape shape, const std::vector<float>& v) {
    return add_const(name, DType::F32, std::move(shape), f32_bytes(v));
  }
  int const_bf16(const std::string& name, Shape shape, const std::vector<float>& v) {
    return add_const(name, DType::BF16, std::move(shape), bf16_bytes(v));
  }
  int pattern(float value, DType dtype, uint64_t bytes) {  // a constant row of `value`, at least `bytes` long
    const int64_t n = static_cast<int64_t>(bytes / isa::dtype_size(dtype)) + 1;
    std::vector<float> v(static_cast<size_t>(n), value);
    std::string name = std::string("fill.") + isa::dtype_name(dtype) + "." + std::to_string(n) +
                       (value == 0 ? "" : (value < 0 ? ".neg" : ".pos"));
    if (dtype == DType::I8) return add_const(name, DType::I8, {n}, std::vector<uint8_t>(static_cast<size_t>(n), 0));
    return dtype == DType::BF16 ? const_bf16(name, {n}, v) : const_f32(name, {n}, v);
  }

  const ir::Value& val(int v) const { return g_.values[v]; }
  Shape shape(int v) const { return g_.values[v].shape(); }

  // ---- calls -----------------------------------------------------------------------------------------------
  void gemm(const std::string& label, Stored a, Stored b, int bias, Stored c, int64_t m, int64_t k, int64_t n,
            bool relu, float scale, bool b_tiled, bool trans_b) {
    KernelCall call;
    call.label = label;
    call.kernel = "gemm.s";
    call.tensors = {{"a", a.buf}, {"b", b.buf}, {"c", c.buf}};
    call.offsets = {{"a", a.off}, {"b", b.off}, {"c", c.off}};
    if (bias >= 0) call.tensors["bias"] = bias;
    uint32_t scale_bits = scale == 1.0f ? 0 : isa::bits_from_f32(scale);
    call.params = {{"M", m}, {"K", k}, {"N", n}, {"IN_DT", dt(DType::BF16)}, {"OUT_DT", dt(c.dtype)},
                   {"BIAS", bias >= 0 ? 1 : 0}, {"RELU", relu ? 1 : 0}, {"SCALE", scale_bits},
                   {"B_TILED", b_tiled ? 1 : 0}};
    if (trans_b) call.params["TRANS_B"] = 1;
    call.flops = 2.0 * static_cast<double>(m) * static_cast<double>(k) * static_cast<double>(n);
    call.bytes = static_cast<double>(m * k + k * n) * 2 + static_cast<double>(m * n * isa::dtype_size(c.dtype)) +
                 (bias >= 0 ? 4.0 * static_cast<double>(n) : 0.0);
    plan_.calls.push_back(std::move(call));
  }

  void cast(const std::string& label, Stored x, Stored y, int64_t n) {
    KernelCall call;
    call.label = label;
    call.kernel = "cast.s";
    call.tensors = {{"x", x.buf}, {"y", y.buf}};
    call.offsets = {{"x", x.off}, {"y", y.off}};
    call.params = {{"N", n}, {"SDT", dt(x.dtype)}, {"DDT", dt(y.dtype)}, {"SCALE", 0}};
    call.bytes = static_cast<double>(n * (isa::dtype_size(x.dtype) + isa::dtype_size(y.dtype)));
    plan_.calls.push_back(std::move(call));
  }

  void copy(const std::string& label, std::vector<BufferMove> moves) {
    if (moves.empty()) return;
    KernelCall call;
    call.kind = KernelCall::Kind::Copy;
    call.label = label;
    call.kernel = "copy";
    for (const BufferMove& m : moves) {
      call.tensors["b" + std::to_string(m.src)] = m.src;
      call.tensors["b" + std::to_string(m.dst)] = m.dst;
    }
    call.moves = std::move(moves);
    plan_.calls.push_back(std::move(call));
  }

  // Moves that copy an N-D view: dst[Σ i_d * dstr_d] = src[Σ i_d * sstr_d] over `shape` (element strides; a
  // source stride 0 broadcasts). Dims are coalesced first; a move is rows of contiguous bytes along the largest
  // remaining dimension.
  static void view_moves(std::vector<BufferMove>& out, Stored src, Stored dst, Shape shape, std::vector<int64_t> sstr,
                         std::vector<int64_t> dstr, int es) {
    // drop size-1 dims
    Shape s2;
    std::vector<int64_t> a2, b2;
    for (size_t i = 0; i < shape.size(); ++i) {
      if (shape[i] == 0) return;
      if (shape[i] == 1) continue;
      s2.push_back(shape[i]), a2.push_back(sstr[i]), b2.push_back(dstr[i]);
    }
    // coalesce
    Shape s3;
    std::vector<int64_t> a3, b3;
    for (size_t i = 0; i < s2.size(); ++i) {
      if (!s3.empty() && a3.back() == a2[i] * s2[i] && b3.back() == b2[i] * s2[i]) {
        s3.back() *= s2[i];
        a3.back() = a2[i], b3.back() = b2[i];
        continue;
      }
      s3.push_back(s2[i]), a3.push_back(a2[i]), b3.push_back(b2[i]);
    }
    uint64_t rowbytes = static_cast<uint64_t>(es);
    if (!s3.empty() && a3.back() == 1 && b3.back() == 1) {
      rowbytes = static_cast<uint64_t>(s3.back() * es);
      s3.pop_back(), a3.pop_back(), b3.pop_back();
    }
    if (s3.empty()) {
      out.push_back(BufferMove{src.buf, dst.buf, src.off, dst.off, 1, rowbytes, 0, 0});
      return;
    }
    size_t r = static_cast<size_t>(std::max_element(s3.begin(), s3.end()) - s3.begin());
    const int64_t rows = s3[r], rs = a3[r] * es, rd = b3[r] * es;
    s3.erase(s3.begin() + r), a3.erase(a3.begin() + r), b3.erase(b3.begin() + r);
    std::vector<int64_t> idx(s3.size(), 0);
    const int64_t outer = prod(s3);
    for (int64_t o = 0; o < outer; ++o) {
      int64_t so = 0, d = 0;
      for (size_t i = 0; i < s3.size(); ++i) so += idx[i] * a3[i], d += idx[i] * b3[i];
      out.push_back(BufferMove{src.buf, dst.buf, src.off + static_cast<uint64_t>(so * es),
                               dst.off + static_cast<uint64_t>(d * es), static_cast<uint64_t>(rows), rowbytes, rs,
                               rd});
      for (int i = static_cast<int>(s3.size()) - 1; i >= 0; --i) {
        if (++idx[i] < s3[i]) break;
        idx[i] = 0;
      }
    }
  }

  // ---- stored variants -------------------------------------------------------------------------------------
  // The value as `dtype` (F32 or BF16) in the requested layout, converting (cast.s, copies) as needed.
  // NHWC and NCHW are the same bytes unless the value is 4-D with H*W > 1: such values are always "plain".
  bool layout_matters(int v) const {
    Shape s = val(v).shape();
    return s.size() == 4 && s[2] * s[3] != 1 && s[1] != 1;
  }
  Stored remember(int v, Stored s) {
    if (!layout_matters(v)) s.nhwc = false;
    st_[v].push_back(s);
    return s;
  }

  Stored get(int v, DType dtype, bool nhwc) {
    const ir::Value& value = val(v);
    if (!layout_matters(v)) nhwc = false;
    for (const Stored& s : st_[v])
      if (s.dtype == dtype && s.nhwc == nhwc) return s;
    if (value.is_const) {
      if (value.elem_type != ir::kFloat) throw Error("constant '" + value.name + "' is not float: cannot be used as a tensor operand");
      Shape s = value.shape();
      std::vector<float> d = value.data;
      if (nhwc) {
        d = permute_data(d, s, kToNhwc);
        s = {s[0], s[2], s[3], s[1]};
      }
      int b = dtype == DType::BF16 ? const_bf16(value.name, s, d) : const_f32(value.name, s, d);
      st_[v].push_back(Stored{b, 0, dtype, nhwc});
      return st_[v].back();
    }
    if (st_[v].empty()) throw Error("internal: value '" + value.name + "' was not computed");
    // A variant in the wanted layout needs a cast only; otherwise cast first, then change the layout.
    Stored from = st_[v].front();
    for (const Stored& s : st_[v])
      if (s.nhwc == nhwc) from = s;
    const std::string label = producer_label(v);
    if (from.dtype != dtype) {
      Stored c{temp(value.name + "." + isa::dtype_name(dtype), dtype, value.shape()), 0, dtype, from.nhwc};
      cast(label, from, c, value.elements());
      st_[v].push_back(c);
      if (c.nhwc == nhwc) return c;
      from = c;
    }
    // layout change
    Stored to{temp(value.name + (nhwc ? ".nhwc" : ".nchw"), dtype, value.shape()), 0, dtype, nhwc};
    Shape s = value.shape();  // logical NCHW
    std::vector<BufferMove> moves;
    const int es = isa::dtype_size(dtype);
    if (nhwc) {  // iterate NHWC output order
      Shape os{s[0], s[2], s[3], s[1]};
      std::vector<int64_t> ls = strides_of(s);
      view_moves(moves, from, to, os, {ls[0], ls[2], ls[3], ls[1]}, strides_of(os), es);
    } else {
      Shape ps{s[0], s[2], s[3], s[1]};
      std::vector<int64_t> pst = strides_of(ps);
      view_moves(moves, from, to, s, {pst[0], pst[3], pst[1], pst[2]}, strides_of(s), es);
    }
    copy(label, std::move(moves));
    st_[v].push_back(to);
    return to;
  }

  // Any stored variant with the requested layout (dtype F32 or BF16), converting only the layout if needed.
  Stored get_any(int v, bool nhwc) {
    if (!layout_matters(v)) nhwc = false;
    for (const Stored& s : st_[v])
      if (s.nhwc == nhwc && (s.dtype == DType::F32 || s.dtype == DType::BF16)) return s;
    if (val(v).is_const) return get(v, DType::F32, nhwc);
    for (const Stored& s : st_[v])
      if (s.dtype == DType::F32 || s.dtype == DType::BF16) return get(v, s.dtype, nhwc);
    return get(v, DType::F32, nhwc);  // an integer input: cast
  }

  bool prefers_nhwc(int v) const {
    for (const Stored& s : st_.count(v) ? st_.at(v) : std::vector<Stored>{})
      if (s.nhwc) return true;
    return false;
  }

  std::string producer_label(int v) const {
    const ir::Value& value = val(v);
    return value.producer >= 0 ? g_.nodes[value.producer].name : "cast(" + value.name + ")";
  }

  // The storage type for a value about to be computed: f32 when only row-wise kernels (and graph outputs) read it,
  // or when it is an angle: a value that reaches a Sin or Cos through data movement only (LLaMA's rotary
  // embedding concatenates its angles before cos and sin), where bf16's 2^-9 relative error would be whole
  // radians at positions in the thousands.
  DType storage_type(int v) const {
    if (angle(v)) return DType::F32;
    for (int u : users_[v])
      if (!rowwise_op(g_.nodes[u])) return DType::BF16;
    return DType::F32;
  }
  bool angle(int v, int depth = 0) const {
    static const std::set<std::string> moves = {"Concat", "Slice", "Reshape", "Flatten", "Squeeze", "Unsqueeze",
                                                "Transpose", "Expand", "Identity"};
    for (int u : users_[v]) {
      const ir::Node& n = g_.nodes[u];
      if (n.op == "Sin" || n.op == "Cos") return true;
      if (depth < 8 && moves.count(n.op))
        for (int o : n.outputs)
          if (o >= 0 && angle(o, depth + 1)) return true;
    }
    return false;
  }

  // ---- per node ---------------------------------------------------------------------------------------------
  void lower_node(int i) {
    const ir::Node& n = g_.nodes[i];
    const std::string& op = n.op;
    if (op == "MatMul" || op == "Gemm") return lower_matmul(i);
    if (op == "Conv") return lower_conv(i);
    if (op == "MaxPool" || op == "AveragePool") return lower_pool(i);
    if (op == "GlobalAveragePool") return lower_gap(n, n.inputs[0], n.outputs[0]);
    if (op == "ReduceMean" && spatial_mean(n)) return lower_gap(n, n.inputs[0], n.outputs[0]);
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze" || op == "Identity" ||
        op == "Dropout")
      return alias(n);
    if (op == "Cast") {
      int to = static_cast<int>(n.attr_int("to", 1));
      bool float_to = to == 1 || to == 10 || to == 16 || to == 11;
      if (val(n.inputs[0]).elem_type != ir::kFloat && float_to) {  // integer input -> f32
        Stored x = st_.at(n.inputs[0]).front();
        Stored y{temp(val(n.outputs[0]).name, DType::F32, shape(n.outputs[0])), 0, DType::F32, false};
        cast(n.name, x, y, val(n.outputs[0]).elements());
        st_[n.outputs[0]].push_back(y);
        return;
      }
      if (!float_to) fail(n, "a cast to " + ir::elem_type_name(to) + " of a value computed at run time is not supported");
    }
    if (rowwise_op(n)) return lower_rowwise(i);
    if (op == "Transpose") return lower_transpose(n);
    if (op == "Slice") return lower_slice(n);
    if (op == "Concat") return lower_concat(n);
    if (op == "Split") return lower_split(n);
    if (op == "Gather") return lower_gather(n);
    if (op == "Expand") return lower_expand(n);
    if (op == "Pad") return lower_pad(n);
    if (op == "BatchNormalization") fail(n, "only inference-mode BatchNormalization with constant parameters is supported");
    if (op == "Softmax" || op == "LayerNormalization" || op == "LogSoftmax")
      if (!last_axis(n, n.attr_int("axis", -1)))
        fail(n, "axis " + std::to_string(n.attr_int("axis", -1)) + " of a rank-" +
                    std::to_string(shape(n.inputs[0]).size()) + " input is not supported (only the last axis)");
    if (op.rfind("Reduce", 0) == 0) fail(n, "only a reduction over the last axis is supported");
    if (op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" || op == "GreaterOrEqual" ||
        op == "Not" || op == "And" || op == "Or" || op == "Xor")
      fail(n, "a comparison or logical op on values computed at run time is not supported (only constant "
              "conditions, folded at compile time)");
    if (op == "Where") fail(n, "a condition computed at run time is not supported (only a constant one)");
    fail(n, "no lowering for this operator");
  }

  void alias(const ir::Node& n) {
    int x = n.inputs[0], y = n.outputs[0];
    if (val(x).is_const) throw Error("internal: alias of a constant '" + val(x).name + "' was not folded");
    // A view of row-major bytes: NHWC data is only the same bytes when H = W = 1 or the shape does not change.
    Stored s = val(x).shape().size() == 4 && prod(shape(x), 2) != 1 ? get_any(x, false) : st_.at(x).front();
    if (s.nhwc && shape(x) != shape(y)) s.nhwc = false;  // H = W = 1: same bytes
    if (shape(y).size() != 4) s.nhwc = false;
    st_[y].push_back(s);
  }

  // ---- matmul ----------------------------------------------------------------------------------------------
  // Follows the single-use chain after a matmul: a constant bias Add, then a Relu. Returns the final value.
  int fuse_epilogue(int out, int64_t ncols, std::vector<float>& bias, std::string& bias_name, bool& relu,
                    std::string& label) {
    for (;;) {
      if (users_[out].size() != 1 || is_output_[out]) return out;
      const ir::Node& u = g_.nodes[users_[out][0]];
      if (!relu && bias.empty() && u.op == "Add") {
        int other = u.inputs[0] == out ? u.inputs[1] : u.inputs[0];
        const ir::Value& c = val(other);
        if (!c.is_const || c.elem_type != ir::kFloat || !bias_shaped(c, ncols) || shape(u.outputs[0]) != shape(out))
          return out;
        bias = c.data.size() == 1 ? std::vector<float>(ncols, c.data[0]) : c.data;
        bias_name = c.name;
      } else if (!relu && u.op == "Relu") {
        relu = true;
      } else {
        return out;
      }
      done_[users_[out][0]] = true;
      label += "+" + u.name;
      out = u.outputs[0];
    }
  }

  static bool bias_shaped(const ir::Value& c, int64_t n) {
    Shape s = c.shape();
    if (s.empty()) return true;
    if (!std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; })) return false;
    return s.back() == n || s.back() == 1;
  }

  // Weights [K, N] -> bf16 Const tiled for gemm.s's B_TILED: [cdiv(K,R), cdiv(N,C), R, C], zero-padded.
  int tiled_weights(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n) {
    const int64_t R = sym_.at("MXU_ROWS"), C = sym_.at("MXU_COLS");
    const int64_t kt = (k + R - 1) / R, nt = (n + C - 1) / C;
    if (w.empty()) return const_bf16(name, {kt, nt, R, C}, {});  // timing-only: laid out, not filled
    std::vector<float> t(static_cast<size_t>(kt * nt * R * C), 0.0f);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j)
        t[static_cast<size_t>((((i / R) * nt + j / C) * R + i % R) * C + j % C)] = w[static_cast<size_t>(i * n + j)];
    return const_bf16(name, {kt, nt, R, C}, t);
  }

  // The destination of a computed value: the graph output buffer (f32) when it is an output read by nothing
  // else, a temp of `dtype` otherwise.
  Stored destination(int v, DType dtype) {
    const ir::Value& value = val(v);
    if (is_output_[v] && users_[v].empty() && value.shape().size() != 4) {
      Stored s{out_buf_.at(v), 0, DType::F32, false};
      st_[v].push_back(s);
      return s;
    }
    Stored s{temp(value.name, dtype, value.shape()), 0, dtype, false};
    st_[v].push_back(s);
    return s;
  }

  void lower_matmul(int i) {
    const ir::Node& n = g_.nodes[i];
    int a = n.inputs[0], b = n.inputs[1];
    Shape as = shape(a), bs = shape(b);
    if (n.op == "Gemm") {
      if (n.attr_int("transA", 0) != 0) fail(n, "transA=1 is not supported");
      if (float al = n.attr_float("alpha", 1); al != 1.0f) fail(n, "alpha=" + num(al) + " is not supported (only 1)");
      if (n.inputs.size() > 2 && n.inputs[2] >= 0 && n.attr_float("beta", 1) != 1.0f)
        fail(n, "beta=" + num(n.attr_float("beta", 1)) + " is not supported (only 1)");
    }
    bool trans = n.op == "Gemm" && n.attr_int("transB", 0) != 0;
    if (as.size() < 2) fail(n, "a 1-D left operand is not supported");
    if (val(b).is_const) {
      if (bs.size() != 2) fail(n, "a constant right operand of rank " + std::to_string(bs.size()) + " is not supported");
      const int64_t k = as.back(), nn = trans ? bs[0] : bs[1];
      const int64_t m = prod(as, 0, as.size() - 1);
      std::vector<float> w = val(b).data;
      if (trans && !w.empty()) w = permute_data(w, bs, {1, 0});  // (empty: timing-only, no values)
      std::vector<float> bias;
      std::string bias_name;
      if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
        const ir::Value& c = val(n.inputs[2]);
        if (!c.is_const || !bias_shaped(c, nn)) fail(n, "C must be a constant [N] vector");
        bias = c.data.size() == 1 ? std::vector<float>(nn, c.data[0]) : c.data;
        bias_name = c.name;
      }
      bool relu = false;
      std::string label = n.name;
      int out = fuse_epilogue(n.outputs[0], nn, bias, bias_name, relu, label);
      Stored C = destination(out, storage_type(out));
      if (m == 1) {  // a matrix-vector product: on the vector unit
        gemv(label, get_any(a, false), w, k, nn, bias, val(b).name, relu, C, opts_.precision == Precision::INT8);
        return;
      }
      if (int8(a)) {
        int8_gemm(n, label, quantized(n, a, false), a, w, m, k, nn, bias, val(b).name, relu, C, 2.0 * m * k * nn,
                  out);
        return;
      }
      Stored A = get(a, DType::BF16, false);
      int B = tiled_weights(val(b).name, w, k, nn);
      int bias_buf = bias.empty() ? -1 : const_f32(bias_name, {nn}, bias);
      gemm(label, A, Stored{B, 0, DType::BF16, false}, bias_buf, C, m, k, nn, relu, 1.0f, true, false);
      return;
    }
    if (n.op == "Gemm") fail(n, "a non-constant B is not supported");
    // Both operands activations: one gemm per batch index (broadcast batch dims).
    if (bs.size() < 2) fail(n, "a 1-D right operand is not supported");
    const int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
    Shape os = shape(n.outputs[0]);
    const size_t batch_rank = os.size() - 2;
    // A right operand that is Transpose(x, perm swapping the last two axes) is read transposed.
    int bsrc = b;
    bool tb = false;
    if (trans_b_ && val(b).producer >= 0) {
      const ir::Node& t = g_.nodes[val(b).producer];
      if (t.op == "Transpose" && is_last_two_swap(t) && !val(t.inputs[0]).is_const) {
        bsrc = t.inputs[0];
        tb = true;
      }
    }
    Stored A = get(a, DType::BF16, false);
    Stored B = get(bsrc, DType::BF16, false);
    Stored C = destination(n.outputs[0], storage_type(n.outputs[0]));
    Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
    while (ab.size() < batch_rank) ab.insert(ab.begin(), 1);
    while (bb.size() < batch_rank) bb.insert(bb.begin(), 1);
    std::vector<int64_t> ast = strides_of(ab), bst = strides_of(bb);
    const int64_t batches = prod(os, 0, batch_rank);
    std::vector<int64_t> idx(batch_rank, 0);
    for (int64_t t = 0; t < batches; ++t) {
      int64_t ai = 0, bi = 0;
      for (size_t d = 0; d < batch_rank; ++d) {
        ai += (ab[d] == 1 ? 0 : idx[d]) * ast[d];
        bi += (bb[d] == 1 ? 0 : idx[d]) * bst[d];
      }
      Stored at = A, bt = B, ct = C;
      at.off += static_cast<uint64_t>(ai * m * k * 2);
      bt.off += static_cast<uint64_t>(bi * k * nn * 2);
      ct.off += static_cast<uint64_t>(t * m * nn * isa::dtype_size(C.dtype));
      gemm(n.name, at, bt, -1, ct, m, k, nn, false, 1.0f, false, tb);
      for (int d = static_cast<int>(batch_rank) - 1; d >= 0; --d) {
        if (++idx[d] < os[d]) break;
        idx[d] = 0;
      }
    }
  }

  // y[1, N] = act(x[1, K] @ w[K, N] + bias) as a row-wise kernel over w^T [N, K]: each row multiplied by x
  // (one vector, loaded once) and summed. A matrix unit would spend R cycles shifting in each weight tile to use
  // it for one row; the vector unit streams the weights at HBM bandwidth (decode steps, batch-1 classifiers).
  // int8: the weights are int8 with a scale per output channel (max|w| / 127) applied to each row's sum; x stays
  // f32 (weight-only quantisation: the vector unit gains nothing from int8 arithmetic, HBM traffic halves).
  void gemv(const std::string& label, Stored x, const std::vector<float>& w, int64_t k, int64_t n,
            const std::vector<float>& bias, const std::string& wname, bool relu, Stored out, bool int8_weights) {
    KernelCall call = rowwise_call(label, n, k);
    std::vector<float> wt(w.size());  // empty w (timing-only): no values, nothing to transpose
    for (int64_t i = 0; i < k && !w.empty(); ++i)
      for (int64_t j = 0; j < n; ++j) wt[static_cast<size_t>(j * k + i)] = w[static_cast<size_t>(j + i * n)];
    std::vector<float> scale;
    int wbuf;
    if (int8_weights) {
      scale.assign(static_cast<size_t>(n), wt.empty() ? 1.0f : 0.0f);
      std::vector<uint8_t> q(wt.size());
      for (int64_t j = 0; j < n && !wt.empty(); ++j) {
        for (int64_t i = 0; i < k; ++i) scale[j] = std::max(scale[j], std::fabs(wt[static_cast<size_t>(j * k + i)]));
        scale[j] = scale[j] > 0 ? scale[j] / 127.0f : 1.0f;
        for (int64_t i = 0; i < k; ++i) {
          const auto v = static_cast<int8_t>(
              std::clamp(std::nearbyint(wt[static_cast<size_t>(j * k + i)] / scale[j]), -127.0f, 127.0f));
          std::memcpy(&q[static_cast<size_t>(j * k + i)], &v, 1);
        }
      }
      wbuf = add_const(wname + ".T.i8", DType::I8, {n, k}, std::move(q));
    } else {
      wbuf = const_bf16(wname + ".T", {n, k}, wt);
    }
    int W = rw_input(call, Stored{wbuf, 0, int8_weights ? DType::I8 : DType::BF16, false}, false, 0);
    int X = rw_input(call, x, false, 1);
    int r = rw_node(call, rw::Op::RowSum, {rw_node(call, rw::Op::Mul, {W, X})});
    if (int8_weights)
      r = rw_node(call, rw::Op::Mul,
                  {r, rw_input(call, Stored{const_f32(wname + ".scale", {n}, scale), 0, DType::F32, false}, true, 0)});
    if (!bias.empty())
      r = rw_node(call, rw::Op::Add,
                  {r, rw_input(call, Stored{const_f32(wname + ".bias", {n}, bias), 0, DType::F32, false}, true, 0)});
    if (relu) r = rw_node(call, rw::Op::Relu, {r});
    rw_output(call, r, out);
    call.flops = 2.0 * static_cast<double>(k) * static_cast<double>(n);
    plan_.calls.push_back(std::move(call));
  }

  static bool is_last_two_swap(const ir::Node& t) {
    auto it = t.attrs.find("perm");
    if (it == t.attrs.end()) return false;
    const std::vector<int64_t>& p = it->second.ints;
    const size_t r = p.size();
    if (r < 2) return false;
    for (size_t d = 0; d + 2 < r; ++d)
      if (p[d] != static_cast<int64_t>(d)) return false;
    return p[r - 2] == static_cast<int64_t>(r - 1) && p[r - 1] == static_cast<int64_t>(r - 2);
  }

  // ---- convolution -----------------------------------------------------------------------------------------
  struct Window {
    int64_t kh, kw, sh, sw, dh, dw, pt, pl, pb, pr;
  };

  Window window(const ir::Node& n, int64_t h, int64_t w, int64_t kh, int64_t kw) {
    auto ints = [&](const char* key, std::vector<int64_t> def) {
      auto it = n.attrs.find(key);
      return it == n.attrs.end() || it->second.ints.empty() ? def : it->second.ints;
    };
    std::vector<int64_t> s = ints("strides", {1, 1}), d = ints("dilations", {1, 1}), p = ints("pads", {0, 0, 0, 0});
    if (s.size() != 2 || d.size() != 2 || p.size() != 4) fail(n, "only 2-D windows are supported");
    Window win{kh, kw, s[0], s[1], d[0], d[1], p[0], p[1], p[2], p[3]};
    auto ap = n.attrs.find("auto_pad");
    std::string mode = ap == n.attrs.end() ? "NOTSET" : ap->second.s;
    if (mode == "SAME_UPPER" || mode == "SAME_LOWER") {
      auto same = [&](int64_t in, int64_t k, int64_t st, int64_t dl, int64_t& lo, int64_t& hi) {
        int64_t out = (in + st - 1) / st;
        int64_t total = std::max<int64_t>((out - 1) * st + (k - 1) * dl + 1 - in, 0);
        lo = mode == "SAME_UPPER" ? total / 2 : total - total / 2;
        hi = total - lo;
      };
      same(h, kh, win.sh, win.dh, win.pt, win.pb);
      same(w, kw, win.sw, win.dw, win.pl, win.pr);
    } else if (mode == "VALID") {
      win.pt = win.pl = win.pb = win.pr = 0;
    }
    return win;
  }

  // Taps of a window over an NHWC input, copied by strided moves. The input is first split into sh x sw phases
  // (phase (a, b) holds padded rows a, a+sh, ... and columns b, b+sw, ...; one phase, the padded input itself,
  // for stride 1), each [N, Hq, Wq, C] with the border filled with `pad_value`. Output rows are then "virtual":
  // r = (n, oh, ow') with ow' < Wv = Wq, and tap (kh, kw) of row r is row r + offset of one phase: each tap is
  // a single move of contiguous rows. tap_major: dst is [taps, rows, cg] (for the vector unit), else
  // [rows, taps*cg] (im2col for the MXU). The Wv - OW overhanging columns are garbage, dropped afterwards.
  struct Taps {
    int64_t oh, ow, wv, rows;  // rows = N * OH * Wv
  };
  Taps window_taps(const std::string& label, Stored x, const Shape& s /*NCHW*/, const Window& w, float pad_value,
                   int64_t c0, int64_t cg, bool tap_major, int dst, int64_t out_h = -1, int64_t out_w = -1) {
    const int64_t N = s[0], C = s[1], H = s[2], W = s[3];
    int64_t OH = (H + w.pt + w.pb - w.dh * (w.kh - 1) - 1) / w.sh + 1;
    int64_t OW = (W + w.pl + w.pr - w.dw * (w.kw - 1) - 1) / w.sw + 1;
    if (out_h > 0) OH = out_h;  // pooling's ceil_mode
    if (out_w > 0) OW = out_w;
    const int64_t pb = std::max<int64_t>(w.pb, (OH - 1) * w.sh + (w.kh - 1) * w.dh + 1 - H - w.pt);
    const int64_t pr = std::max<int64_t>(w.pr, (OW - 1) * w.sw + (w.kw - 1) * w.dw + 1 - W - w.pl);
    const int64_t Hq = (H + w.pt + pb + w.sh - 1) / w.sh, Wq = (W + w.pl + pr + w.sw - 1) / w.sw;
    const int64_t phases = w.sh * w.sw;
    const int es = isa::dtype_size(x.dtype);
    // Rows (of C elements) read past the end of the last phase by the overhanging virtual columns.
    const int64_t qh_max = (w.kh - 1) * w.dh / w.sh, qw_max = (w.kw - 1) * w.dw / w.sw;
    const int64_t max_row = (OH - 1 + qh_max) * Wq + Wq - 1 + qw_max;
    const int64_t slack = std::max<int64_t>(0, max_row + 1 - Hq * Wq);
    const uint64_t row = static_cast<uint64_t>(Wq * C * es);
    const uint64_t image = static_cast<uint64_t>(Hq) * row, phase_bytes = static_cast<uint64_t>(N) * image;
    Stored P = x;
    std::vector<BufferMove> moves;
    const bool direct = phases == 1 && Hq == H && Wq == W && slack == 0;
    if (!direct) {
      P = Stored{temp(label + ".padded", x.dtype, {phases, N, Hq, Wq, C}, static_cast<uint64_t>(slack * C * es)),
                 0, x.dtype, true};
      if (x.dtype == DType::I8 && pad_value != 0) throw Error(label + ": internal: int8 padding must be 0");
      int pat = pattern(pad_value, x.dtype, row);
      auto fill = [&](uint64_t off, uint64_t rows, uint64_t rowbytes, int64_t stride) {
        if (rows && rowbytes) moves.push_back(BufferMove{pat, P.buf, 0, off, rows, rowbytes, 0, stride});
      };
      if (phases == 1) {  // the border only, then one move per image
        for (int64_t img = 0; img < N; ++img) {
          const uint64_t base = static_cast<uint64_t>(img) * image;
          fill(base, static_cast<uint64_t>(w.pt), row, static_cast<int64_t>(row));
          fill(base + static_cast<uint64_t>(w.pt + H) * row, static_cast<uint64_t>(Hq - H - w.pt), row,
               static_cast<int64_t>(row));
        }
        fill(0, static_cast<uint64_t>(N * Hq), static_cast<uint64_t>(w.pl * C * es), static_cast<int64_t>(row));
        fill(static_cast<uint64_t>((w.pl + W) * C * es), static_cast<uint64_t>(N * Hq),
             static_cast<uint64_t>((Wq - W - w.pl) * C * es), static_cast<int64_t>(row));
        for (int64_t img = 0; img < N; ++img)
          moves.push_back(BufferMove{x.buf, P.buf, x.off + static_cast<uint64_t>(img * H * W * C * es),
                                     static_cast<uint64_t>(img) * image + static_cast<uint64_t>(w.pt) * row +
                                         static_cast<uint64_t>(w.pl * C * es),
                                     static_cast<uint64_t>(H), static_cast<uint64_t>(W * C * es), W * C * es,
                                     static_cast<int64_t>(row)});
      } else {  // fill everything, then one move per phase row
        fill(0, static_cast<uint64_t>(phases * N * Hq), row, static_cast<int64_t>(row));
        for (int64_t a = 0; a < w.sh; ++a)
          for (int64_t b = 0; b < w.sw; ++b) {
            // phase column q <-> input column q*sw + b - pl
            const int64_t q0 = std::max<int64_t>(0, (w.pl - b + w.sw - 1) / w.sw);
            const int64_t q1 = std::min<int64_t>(Wq, (W + w.pl - b + w.sw - 1) / w.sw);  // exclusive
            if (q1 <= q0) continue;
            for (int64_t img = 0; img < N; ++img)
              for (int64_t q = 0; q < Hq; ++q) {
                const int64_t ih = q * w.sh + a - w.pt;
                if (ih < 0 || ih >= H) continue;
                const int64_t iw = q0 * w.sw + b - w.pl;
                moves.push_back(BufferMove{
                    x.buf, P.buf, x.off + static_cast<uint64_t>(((img * H + ih) * W + iw) * C * es),
                    static_cast<uint64_t>(a * w.sw + b) * phase_bytes + static_cast<uint64_t>(img) * image +
                        static_cast<uint64_t>(q) * row + static_cast<uint64_t>(q0 * C * es),
                    static_cast<uint64_t>(q1 - q0), static_cast<uint64_t>(C * es), w.sw * C * es, C * es});
              }
          }
      }
    }
    const int64_t taps = w.kh * w.kw, rows = N * OH * Wq;
    for (int64_t img = 0; img < N; ++img)
      for (int64_t i = 0; i < w.kh; ++i)
        for (int64_t j = 0; j < w.kw; ++j) {
          const int64_t t = i * w.kw + j;
          const int64_t a = i * w.dh % w.sh, qh = i * w.dh / w.sh, b = j * w.dw % w.sw, qw = j * w.dw / w.sw;
          const uint64_t src = P.off + static_cast<uint64_t>(a * w.sw + b) * phase_bytes +
                               static_cast<uint64_t>(img) * image + static_cast<uint64_t>(qh) * row +
                               static_cast<uint64_t>((qw * C + c0) * es);
          uint64_t d;
          int64_t dstride;
          if (tap_major) {
            d = static_cast<uint64_t>((t * rows + img * OH * Wq) * cg * es);
            dstride = cg * es;
          } else {
            d = static_cast<uint64_t>((img * OH * Wq * taps + t) * cg * es);
            dstride = taps * cg * es;
          }
          moves.push_back(BufferMove{P.buf, dst, src, d, static_cast<uint64_t>(OH * Wq), static_cast<uint64_t>(cg * es),
                                     C * es, dstride});
        }
    copy(label, std::move(moves));
    return Taps{OH, OW, Wq, rows};
  }

  // Drops the overhanging virtual columns: [N*OH*Wv, C] -> [N*OH*OW, C].
  void drop_virtual(const std::string& label, Stored from, Stored to, const Taps& t, int64_t n, int64_t c) {
    const int es = isa::dtype_size(from.dtype);
    copy(label, {BufferMove{from.buf, to.buf, from.off, to.off, static_cast<uint64_t>(n * t.oh),
                            static_cast<uint64_t>(t.ow * c * es), t.wv * c * es, t.ow * c * es}});
  }

  void lower_conv(int i) {
    const ir::Node& n = g_.nodes[i];
    int x = n.inputs[0], wv = n.inputs[1];
    if (!val(wv).is_const) fail(n, "weights computed at run time are not supported");
    Shape xs = shape(x), ws = shape(wv);
    if (xs.size() != 4) fail(n, "only 2-D convolutions (4-D inputs) are supported, got " + ir::shape_str(xs));
    const int64_t N = xs[0], C = xs[1], OC = ws[0], Cg = ws[1], KH = ws[2], KW = ws[3];
    const int64_t groups = n.attr_int("group", 1);
    if (groups < 1 || C != Cg * groups || OC % groups) fail(n, "channels do not match the groups");
    Window win = window(n, xs[2], xs[3], KH, KW);
    std::vector<float> w = val(wv).data;  // [OC, Cg, KH, KW]
    std::vector<float> bias(static_cast<size_t>(OC), 0.0f);
    bool has_bias = false;
    if (n.inputs.size() > 2 && n.inputs[2] >= 0) {
      if (!val(n.inputs[2]).is_const) fail(n, "a bias computed at run time is not supported");
      bias = val(n.inputs[2]).data;
      has_bias = true;
    }
    std::string label = n.name;
    int out = n.outputs[0];
    // BatchNormalization folds into the weights and bias.
    if (users_[out].size() == 1 && !is_output_[out] && g_.nodes[users_[out][0]].op == "BatchNormalization") {
      const ir::Node& bn = g_.nodes[users_[out][0]];
      bool consts = true;
      for (size_t k = 1; k < 5; ++k) consts = consts && val(bn.inputs[k]).is_const;
      if (consts) {
        const float eps = bn.attr_float("epsilon", 1e-5f);
        const auto &gam = val(bn.inputs[1]).data, &beta = val(bn.inputs[2]).data, &mean = val(bn.inputs[3]).data,
                   &var = val(bn.inputs[4]).data;
        const int64_t per = Cg * KH * KW;
        for (int64_t o = 0; o < OC; ++o) {
          const float sc = gam[o] / std::sqrt(var[o] + eps);
          for (int64_t e = 0; e < per && !w.empty(); ++e) w[static_cast<size_t>(o * per + e)] *= sc;
          bias[o] = (bias[o] - mean[o]) * sc + beta[o];
        }
        has_bias = true;
        done_[users_[out][0]] = true;
        label += "+" + bn.name;
        out = bn.outputs[0];
      }
    }
    bool relu = false;
    if (users_[out].size() == 1 && !is_output_[out] && g_.nodes[users_[out][0]].op == "Relu") {
      relu = true;
      done_[users_[out][0]] = true;
      label += "+" + g_.nodes[users_[out][0]].name;
      out = g_.nodes[users_[out][0]].outputs[0];
    }
    const Shape os = shape(out);
    const int64_t OH = os[2], OW = os[3];
    const bool q8 = groups == 1 && int8(x);
    Stored X = q8 ? quantized(n, x, true) : get(x, DType::BF16, true);
    Stored Y = remember(out, Stored{temp(val(out).name, DType::BF16, os), 0, DType::BF16, true});
    const int64_t taps = KH * KW;

    if (groups == 1) {
      // weights [OC, C, KH, KW] -> [(kh, kw, c), OC], the im2col matrix's column order
      std::vector<float> wt(w.empty() ? 0 : static_cast<size_t>(taps * C * OC));  // empty: timing-only
      for (int64_t o = 0; o < OC && !w.empty(); ++o)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t t = 0; t < taps; ++t)
            wt[static_cast<size_t>((t * C + c) * OC + o)] = w[static_cast<size_t>((o * C + c) * taps + t)];
      const double flops = 2.0 * N * OH * OW * taps * C * OC;  // the real output positions only
      // out = act(a[m, taps*C] @ wt + bias) into `dst`; `value`: the graph value dst holds, -1 for virtual rows
      auto matmul = [&](Stored a, int64_t m, Stored dst, int value) {
        if (q8) {
          int8_gemm(n, label, a, x, wt, m, taps * C, OC, has_bias ? bias : std::vector<float>{}, val(wv).name, relu,
                    dst, flops, value);
          return;
        }
        int B = tiled_weights(val(wv).name, wt, taps * C, OC);
        int bias_buf = has_bias ? const_f32(val(wv).name + ".bias", {OC}, bias) : -1;
        gemm(label, a, Stored{B, 0, DType::BF16, false}, bias_buf, dst, m, taps * C, OC, relu, 1.0f, true, false);
        plan_.calls.back().flops = flops;
      };
      const bool direct = KH == 1 && KW == 1 && win.sh == 1 && win.sw == 1 && win.pt == 0 && win.pl == 0 &&
                          win.pb == 0 && win.pr == 0;
      if (direct) return matmul(X, N * OH * OW, Y, out);
      int im = temp(label + ".im2col", X.dtype, {1});
      Taps t = window_taps(label, X, xs, win, 0.0f, 0, C, false, im);
      plan_.buffers[im].shape = {t.rows, taps * C};
      if (t.wv == OW) return matmul(Stored{im, 0, X.dtype, false}, t.rows, Y, out);
      Stored G{temp(label + ".virtual", DType::BF16, {t.rows, OC}), 0, DType::BF16, true};
      matmul(Stored{im, 0, X.dtype, false}, t.rows, G, -1);
      drop_virtual(label, G, Y, t, N, OC);
      return;
    }
    if (Cg == 1 && OC == groups) {  // depthwise: sum over taps of tap * w[tap] on the vector unit
      int im = temp(label + ".taps", DType::BF16, {1});
      Taps t = window_taps(label, X, xs, win, 0.0f, 0, C, true, im);
      plan_.buffers[im].shape = {taps, t.rows, C};
      KernelCall call = rowwise_call(label, t.rows, C);
      int acc = -1;
      for (int64_t k = 0; k < taps; ++k) {
        std::vector<float> wk(w.empty() ? 0 : static_cast<size_t>(C));  // empty: timing-only
        for (int64_t c = 0; c < static_cast<int64_t>(wk.size()); ++c) wk[c] = w[static_cast<size_t>(c * taps + k)];
        int xi = rw_input(call, Stored{im, static_cast<uint64_t>(k * t.rows * C * 2), DType::BF16, false}, false, 0);
        int wi = rw_input(call, Stored{const_f32(val(wv).name + ".tap" + std::to_string(k), {C}, wk), 0, DType::F32, false},
                          false, 1);
        int prodn = rw_node(call, rw::Op::Mul, {xi, wi});
        acc = acc < 0 ? prodn : rw_node(call, rw::Op::Add, {acc, prodn});
      }
      if (has_bias) {
        int bi = rw_input(call, Stored{const_f32(val(wv).name + ".bias", {C}, bias), 0, DType::F32, false}, false, 1);
        acc = rw_node(call, rw::Op::Add, {acc, bi});
      }
      if (relu) acc = rw_node(call, rw::Op::Relu, {acc});
      Stored G = Y;
      if (t.wv != OW) G = Stored{temp(label + ".virtual", DType::BF16, {t.rows, C}), 0, DType::BF16, true};
      rw_output(call, acc, G);
      call.flops = 2.0 * N * OH * OW * taps * C;
      plan_.calls.push_back(std::move(call));
      if (t.wv != OW) drop_virtual(label, G, Y, t, N, C);
      return;
    }
    // Grouped: one im2col and gemm per group, the group's columns copied into place.
    const int64_t OCg = OC / groups;
    for (int64_t gi = 0; gi < groups; ++gi) {
      std::vector<float> wt(w.empty() ? 0 : static_cast<size_t>(taps * Cg * OCg));  // empty: timing-only
      for (int64_t o = 0; o < OCg && !w.empty(); ++o)
        for (int64_t c = 0; c < Cg; ++c)
          for (int64_t t = 0; t < taps; ++t)
            wt[static_cast<size_t>((t * Cg + c) * OCg + o)] =
                w[static_cast<size_t>(((gi * OCg + o) * Cg + c) * taps + t)];
      std::vector<float> bg(bias.begin() + gi * OCg, bias.begin() + (gi + 1) * OCg);
      const std::string gl = val(wv).name + ".g" + std::to_string(gi);
      int B = tiled_weights(gl, wt, taps * Cg, OCg);
      int bias_buf = has_bias ? const_f32(gl + ".bias", {OCg}, bg) : -1;
      int im = temp(label + ".im2col", DType::BF16, {1});
      Taps t = window_taps(label, X, xs, win, 0.0f, gi * Cg, Cg, false, im);
      plan_.buffers[im].shape = {t.rows, taps * Cg};
      Stored G{temp(label + ".group", DType::BF16, {t.rows, OCg}), 0, DType::BF16, false};
      gemm(label, Stored{im, 0, DType::BF16, false}, Stored{B, 0, DType::BF16, false}, bias_buf, G, t.rows, taps * Cg,
           OCg, relu, 1.0f, true, false);
      plan_.calls.back().flops = 2.0 * N * OH * OW * taps * Cg * OCg;
      std::vector<BufferMove> moves;
      for (int64_t r = 0; r < N * OH; ++r)
        moves.push_back(BufferMove{G.buf, Y.buf, static_cast<uint64_t>(r * t.wv * OCg * 2),
                                   static_cast<uint64_t>((r * OW * OC + gi * OCg) * 2), static_cast<uint64_t>(OW),
                                   static_cast<uint64_t>(OCg * 2), OCg * 2, OC * 2});
      copy(label, std::move(moves));
    }
  }

  void lower_pool(int i) {
    const ir::Node& n = g_.nodes[i];
    int x = n.inputs[0], y = n.outputs[0];
    Shape xs = shape(x), ys = shape(y);
    if (xs.size() != 4) fail(n, "only 2-D pooling (4-D inputs) is supported");
    auto ks = n.attrs.find("kernel_shape");
    if (ks == n.attrs.end() || ks->second.ints.size() != 2) fail(n, "kernel_shape must have 2 values");
    Window win = window(n, xs[2], xs[3], ks->second.ints[0], ks->second.ints[1]);
    const bool is_max = n.op == "MaxPool";
    if (n.outputs.size() > 1 && n.outputs[1] >= 0 && !users_[n.outputs[1]].empty()) fail(n, "the Indices output is not supported");
    const int64_t N = xs[0], C = xs[1], OH = ys[2], OW = ys[3], taps = win.kh * win.kw;
    Stored X = get(x, DType::BF16, true);
    int im = temp(n.name + ".taps", DType::BF16, {1});
    const float lowest = -std::numeric_limits<float>::infinity();
    Taps t = window_taps(n.name, X, xs, win, is_max ? lowest : 0.0f, 0, C, true, im, OH, OW);
    plan_.buffers[im].shape = {taps, t.rows, C};
    KernelCall call = rowwise_call(n.name, t.rows, C);
    int acc = -1;
    for (int64_t k = 0; k < taps; ++k) {
      int xi = rw_input(call, Stored{im, static_cast<uint64_t>(k * t.rows * C * 2), DType::BF16, false}, false, 0);
      acc = acc < 0 ? xi : rw_node(call, is_max ? rw::Op::Max : rw::Op::Add, {acc, xi});
    }
    if (!is_max) {
      // divisor per output position: taps inside the input (count_include_pad 0) or inside the padded input
      const bool include_pad = n.attr_int("count_include_pad", 0) != 0;
      std::vector<float> inv(static_cast<size_t>(OH * t.wv), 1.0f);
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < t.wv; ++ow) {
          int64_t cnt = 0;
          for (int64_t a = 0; a < win.kh; ++a)
            for (int64_t b = 0; b < win.kw; ++b) {
              int64_t ih = oh * win.sh + a * win.dh - win.pt, iw = ow * win.sw + b * win.dw - win.pl;
              bool inside = include_pad ? (ih >= -win.pt && ih < xs[2] + win.pb && iw >= -win.pl && iw < xs[3] + win.pr)
                                        : (ih >= 0 && ih < xs[2] && iw >= 0 && iw < xs[3]);
              cnt += inside ? 1 : 0;
            }
          inv[static_cast<size_t>(oh * t.wv + ow)] = cnt ? 1.0f / static_cast<float>(cnt) : 0.0f;
        }
      int di = rw_input(call, Stored{const_f32(n.name + ".inv_count", {OH * t.wv}, inv), 0, DType::F32, false}, true,
                        OH * t.wv);
      acc = rw_node(call, rw::Op::Mul, {acc, di});
    }
    Stored Y = remember(y, Stored{temp(val(y).name, DType::BF16, ys), 0, DType::BF16, true});
    Stored G = Y;
    if (t.wv != OW) G = Stored{temp(n.name + ".virtual", DType::BF16, {t.rows, C}), 0, DType::BF16, true};
    rw_output(call, acc, G);
    plan_.calls.push_back(std::move(call));
    if (t.wv != OW) drop_virtual(n.name, G, Y, t, N, C);
  }

  bool spatial_mean(const ir::Node& n) const {
    Shape xs = shape(n.inputs[0]);
    if (xs.size() != 4) return false;
    std::vector<int64_t> axes;
    if (auto it = n.attrs.find("axes"); it != n.attrs.end()) axes = it->second.ints;
    else if (n.inputs.size() > 1 && n.inputs[1] >= 0 && val(n.inputs[1]).is_const) axes = val(n.inputs[1]).ints;
    for (int64_t& a : axes) a = a < 0 ? a + 4 : a;
    std::sort(axes.begin(), axes.end());
    return axes == std::vector<int64_t>{2, 3};
  }

  // Mean over H and W: per image, a gemm of a row of ones [1, HW] with the image [HW, C], scaled by 1/HW.
  void lower_gap(const ir::Node& n, int x, int y) {
    Shape xs = shape(x);
    if (xs.size() != 4) fail(n, "a 4-D input is required");
    const int64_t N = xs[0], C = xs[1], HW = xs[2] * xs[3];
    Stored X = get(x, DType::BF16, true);
    int ones = const_bf16("ones." + std::to_string(HW), {1, HW}, std::vector<float>(static_cast<size_t>(HW), 1.0f));
    Stored Y = destination(y, storage_type(y));  // [N, C, 1, 1]: NHWC and NCHW are the same bytes
    for (int64_t img = 0; img < N; ++img) {
      Stored xi = X, yi = Y;
      xi.off += static_cast<uint64_t>(img * HW * C * 2);
      yi.off += static_cast<uint64_t>(img * C * isa::dtype_size(Y.dtype));
      gemm(n.name, Stored{ones, 0, DType::BF16, false}, xi, -1, yi, 1, HW, C, false, 1.0f / static_cast<float>(HW),
           false, false);
    }
  }

  // ---- data movement ---------------------------------------------------------------------------------------
  // dst (contiguous, of `out` shape) = src viewed through per-dim element strides and an element offset.
  void view_copy(const std::string& label, Stored src, int64_t src_elem_off, const Shape& out, const std::vector<int64_t>& sstr,
                 Stored dst, int64_t dst_elem_off, const std::vector<int64_t>& dstr) {
    const int es = isa::dtype_size(src.dtype);
    src.off += static_cast<uint64_t>(src_elem_off * es);
    dst.off += static_cast<uint64_t>(dst_elem_off * es);
    std::vector<BufferMove> moves;
    view_moves(moves, src, dst, out, sstr, dstr, es);
    copy(label, std::move(moves));
  }

  Stored plain_input(int v) {  // a value in row-major layout, f32 or bf16 as it is
    return get_any(v, false);
  }

  void lower_transpose(const ir::Node& n) {
    int x = n.inputs[0], y = n.outputs[0];
    Shape xs = shape(x);
    std::vector<int64_t> perm;
    if (auto it = n.attrs.find("perm"); it != n.attrs.end()) perm = it->second.ints;
    if (perm.empty())
      for (int64_t d = static_cast<int64_t>(xs.size()) - 1; d >= 0; --d) perm.push_back(d);
    // Read transposed by its matmuls only? Then nothing to do (lower_matmul reads the input directly).
    bool only_matmuls = trans_b_ && is_last_two_swap(n) && !is_output_[y];
    for (int u : users_[y]) {
      const ir::Node& un = g_.nodes[u];
      only_matmuls = only_matmuls && un.op == "MatMul" && un.inputs[1] == y && un.inputs[0] != y;
    }
    if (only_matmuls && !users_[y].empty()) return;
    Stored X = plain_input(x);
    std::vector<int64_t> xst = strides_of(xs), sstr(perm.size());
    for (size_t d = 0; d < perm.size(); ++d) sstr[d] = xst[static_cast<size_t>(perm[d])];
    Shape ys = shape(y);
    Stored Y{temp(val(y).name, X.dtype, ys), 0, X.dtype, false};
    view_copy(n.name, X, 0, ys, sstr, Y, 0, strides_of(ys));
    st_[y].push_back(Y);
  }

  // Slice, Concat and Split of 4-D values whose inputs are NHWC work on the NHWC bytes (shapes and axes
  // permuted), so that a convolutional network's channel concatenations and splits stay in its layout.
  bool nhwc_view(const std::vector<int>& values) const {
    bool any = false;
    for (int v : values) {
      if (v < 0) continue;
      if (shape(v).size() != 4) return false;
      any = any || (!val(v).is_const && prefers_nhwc(v));
    }
    return any;
  }
  static Shape phys(const Shape& s, bool nhwc) { return nhwc ? Shape{s[0], s[2], s[3], s[1]} : s; }
  static size_t phys_axis(int64_t a, bool nhwc) {
    if (!nhwc) return static_cast<size_t>(a);
    return static_cast<size_t>(std::find(kToNhwc.begin(), kToNhwc.end(), a) - kToNhwc.begin());
  }

  void lower_slice(const ir::Node& n) {
    int x = n.inputs[0], y = n.outputs[0];
    const bool nhwc = nhwc_view({x});
    Shape xs = phys(shape(x), nhwc), ys = phys(shape(y), nhwc);
    // Shape inference resolved starts and steps for every axis (shape_inference.h).
    std::vector<int64_t> starts = n.attrs.at("starts").ints, steps = n.attrs.at("steps").ints;
    std::vector<int64_t> xst = strides_of(xs), sstr = xst;
    int64_t off = 0;
    for (size_t a = 0; a < xs.size(); ++a) {
      const size_t p = phys_axis(static_cast<int64_t>(a), nhwc);
      off += starts[a] * xst[p];
      sstr[p] = xst[p] * steps[a];
    }
    Stored X = get_any(x, nhwc);
    Stored Y = remember(y, Stored{temp(val(y).name, X.dtype, shape(y)), 0, X.dtype, nhwc});
    view_copy(n.name, X, off, ys, sstr, Y, 0, strides_of(ys));
  }

  void lower_concat(const ir::Node& n) {
    int y = n.outputs[0];
    const bool nhwc = nhwc_view(n.inputs);
    Shape ys = phys(shape(y), nhwc);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ys.size());
    const size_t pa = phys_axis(axis, nhwc);
    // One element type for all parts: bf16 unless every part is f32.
    DType dtype = DType::F32;
    for (int in : n.inputs)
      if (!val(in).is_const)
        for (const Stored& st : st_[in])
          if (st.dtype == DType::BF16) dtype = DType::BF16;
    Stored Y = remember(y, Stored{temp(val(y).name, dtype, shape(y)), 0, dtype, nhwc});
    std::vector<int64_t> yst = strides_of(ys);
    int64_t pos = 0;
    std::vector<BufferMove> moves;
    for (int in : n.inputs) {
      Shape s = phys(shape(in), nhwc);
      Stored X = get(in, dtype, nhwc);
      Stored dst = Y;
      dst.off += static_cast<uint64_t>(pos * yst[pa] * isa::dtype_size(dtype));
      view_moves(moves, X, dst, s, strides_of(s), yst, isa::dtype_size(dtype));
      pos += s[pa];
    }
    copy(n.name, std::move(moves));
  }

  void lower_split(const ir::Node& n) {
    int x = n.inputs[0];
    const bool nhwc = nhwc_view({x});
    Shape xs = phys(shape(x), nhwc);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(xs.size());
    const size_t pa = phys_axis(axis, nhwc);
    Stored X = get_any(x, nhwc);
    std::vector<int64_t> xst = strides_of(xs);
    int64_t pos = 0;
    for (int out : n.outputs) {
      if (out < 0) continue;
      Shape s = phys(shape(out), nhwc);
      Stored Y = remember(out, Stored{temp(val(out).name, X.dtype, shape(out)), 0, X.dtype, nhwc});
      view_copy(n.name, X, pos * xst[pa], s, xst, Y, 0, strides_of(s));
      pos += s[pa];
    }
  }

  void lower_gather(const ir::Node& n) {
    int data = n.inputs[0], ids = n.inputs[1], y = n.outputs[0];
    Shape ds = shape(data), ys = shape(y);
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += static_cast<int64_t>(ds.size());
    if (val(ids).is_const) {  // slices of an activation
      Stored X = plain_input(data);
      Stored Y{temp(val(y).name, X.dtype, ys), 0, X.dtype, false};
      const int64_t outer = prod(ds, 0, axis), inner = prod(ds, axis + 1);
      const std::vector<int64_t>& idx = val(ids).ints;
      std::vector<BufferMove> moves;
      const int es = isa::dtype_size(X.dtype);
      for (size_t j = 0; j < idx.size(); ++j) {
        int64_t k = idx[j] < 0 ? idx[j] + ds[axis] : idx[j];
        if (k < 0 || k >= ds[axis]) fail(n, "index " + std::to_string(idx[j]) + " out of range");
        Stored s = X, d = Y;
        s.off += static_cast<uint64_t>(k * inner * es);
        d.off += static_cast<uint64_t>(static_cast<int64_t>(j) * inner * es);
        view_moves(moves, s, d, {outer, inner}, {ds[axis] * inner, 1},
                   {static_cast<int64_t>(idx.size()) * inner, 1}, es);
      }
      copy(n.name, std::move(moves));
      st_[y].push_back(Y);
      return;
    }
    if (!val(data).is_const || axis != 0 || ds.size() != 2)
      fail(n, "only an embedding lookup (a constant 2-D table, axis 0) with indices computed at run time is supported");
    if (!have_gather_) fail(n, "embedding lookups need kernels/gather.s");
    const int64_t V = ds[0], D = ds[1], M = val(ids).elements();
    Stored I = st_.at(ids).front();
    if (I.dtype != DType::I32) fail(n, "indices must be a model input (int32 on the chip)");
    const DType dtype = storage_type(y);
    int table = dtype == DType::BF16 ? const_bf16(val(data).name, ds, val(data).data) : const_f32(val(data).name, ds, val(data).data);
    Stored Y = destination(y, dtype);
    KernelCall call;
    call.label = n.name;
    call.kernel = "gather.s";
    call.tensors = {{"ids", I.buf}, {"table", table}, {"y", Y.buf}};
    call.offsets = {{"ids", I.off}, {"y", Y.off}};
    call.params = {{"M", M}, {"D", D}, {"V", V}, {"DT", dt(Y.dtype)}};
    call.bytes = static_cast<double>(M * D * isa::dtype_size(Y.dtype) * 2 + M * 4);
    plan_.calls.push_back(std::move(call));
  }

  void lower_expand(const ir::Node& n) {
    int x = n.inputs[0], y = n.outputs[0];
    Shape xs = shape(x), ys = shape(y);
    while (xs.size() < ys.size()) xs.insert(xs.begin(), 1);
    std::vector<int64_t> st = strides_of(xs);
    for (size_t d = 0; d < xs.size(); ++d)
      if (xs[d] == 1) st[d] = 0;
    Stored X = plain_input(x);
    Stored Y{temp(val(y).name, X.dtype, ys), 0, X.dtype, false};
    view_copy(n.name, X, 0, ys, st, Y, 0, strides_of(ys));
    st_[y].push_back(Y);
  }

  void lower_pad(const ir::Node& n) {
    int x = n.inputs[0], y = n.outputs[0];
    auto mode = n.attrs.find("mode");
    if (mode != n.attrs.end() && mode->second.s != "constant") fail(n, "only mode 'constant' is supported");
    std::vector<int64_t> pads = n.attrs.at("pads").ints;  // resolved by shape inference
    float value = n.attr_float("value", 0.0f);
    Shape xs = shape(x), ys = shape(y);
    const size_t r = xs.size();
    for (size_t d = 0; d < r; ++d)
      if (pads[d] < 0 || pads[d + r] < 0) fail(n, "negative pads are not supported");
    Stored X = plain_input(x);
    Stored Y{temp(val(y).name, X.dtype, ys), 0, X.dtype, false};
    const int es = isa::dtype_size(X.dtype);
    const uint64_t row = static_cast<uint64_t>(ys.back() * es);
    int pat = pattern(value, X.dtype, row);
    std::vector<BufferMove> moves{BufferMove{pat, Y.buf, 0, 0, static_cast<uint64_t>(prod(ys, 0, r - 1)), row, 0,
                                             static_cast<int64_t>(row)}};
    std::vector<int64_t> yst = strides_of(ys);
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += pads[d] * yst[d];
    Stored dst = Y;
    dst.off += static_cast<uint64_t>(off * es);
    view_moves(moves, X, dst, xs, strides_of(xs), yst, es);
    copy(n.name, std::move(moves));
    st_[y].push_back(Y);
  }

  // ---- row-wise groups -------------------------------------------------------------------------------------
  bool rowwise_op(const ir::Node& n) const {
    const std::string& op = n.op;
    if (elementwise_unary(op) || elementwise_binary(op)) {
      if (op == "Cast") {
        int to = static_cast<int>(n.attr_int("to", 1));
        return (to == 1 || to == 10 || to == 16 || to == 11) && val(n.inputs[0]).elem_type == ir::kFloat;
      }
      return true;
    }
    if (op == "Where") return val(n.inputs[0]).is_const;
    if (op == "BatchNormalization") {
      for (size_t k = 1; k < 5; ++k)
        if (k >= n.inputs.size() || n.inputs[k] < 0 || !val(n.inputs[k]).is_const) return false;
      return shape(n.inputs[0]).size() >= 2;
    }
    if (op == "Softmax" || op == "LayerNormalization" || op == "LogSoftmax") return last_axis(n, n.attr_int("axis", -1));
    if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") return reduce_last(n);
    return false;
  }

  bool last_axis(const ir::Node& n, int64_t axis) const {
    const int64_t r = static_cast<int64_t>(shape(n.inputs[0]).size());
    return axis == r - 1 || axis == -1;
  }

  bool reduce_last(const ir::Node& n) const {
    std::vector<int64_t> axes;
    if (auto it = n.attrs.find("axes"); it != n.attrs.end()) axes = it->second.ints;
    else if (n.inputs.size() > 1 && n.inputs[1] >= 0 && val(n.inputs[1]).is_const) axes = val(n.inputs[1]).ints;
    const int64_t r = static_cast<int64_t>(shape(n.inputs[0]).size());
    if (axes.size() != 1) return r == 1 && axes.empty();
    return axes[0] == r - 1 || axes[0] == -1;
  }

  KernelCall rowwise_call(const std::string& label, int64_t rows, int64_t cols) {
    KernelCall call;
    call.kind = KernelCall::Kind::Rowwise;
    call.label = label;
    call.kernel = "rowwise";
    call.rows.rows = rows;
    call.rows.cols = cols;
    return call;
  }
  int rw_node(KernelCall& call, rw::Op op, std::vector<int> args, float value = 0, float lo = 0, float hi = 0) {
    rw::Node nd;
    nd.op = op;
    nd.args = std::move(args);
    nd.value = value;
    nd.lo = lo;
    nd.hi = hi;
    call.rows.nodes.push_back(nd);
    return static_cast<int>(call.rows.nodes.size()) - 1;
  }
  int rw_input(KernelCall& call, Stored s, bool per_row, int64_t period) {
    for (size_t i = 0; i < call.row_inputs.size(); ++i)
      if (call.row_inputs[i] == s.buf && call.row_input_offs[i] == s.off && call.rows.inputs[i].per_row == per_row &&
          call.rows.inputs[i].period == period)
        for (size_t k = 0; k < call.rows.nodes.size(); ++k)
          if (call.rows.nodes[k].op == rw::Op::Input && call.rows.nodes[k].input == static_cast<int>(i))
            return static_cast<int>(k);
    rw::Input in;
    in.addr = 0;
    in.dtype = s.dtype;
    in.per_row = per_row;
    in.period = period;
    call.rows.inputs.push_back(in);
    call.row_inputs.push_back(s.buf);
    call.row_input_offs.push_back(s.off);
    call.tensors["in" + std::to_string(call.row_inputs.size())] = s.buf;
    rw::Node nd;
    nd.op = rw::Op::Input;
    nd.input = static_cast<int>(call.rows.inputs.size()) - 1;
    call.rows.nodes.push_back(nd);
    return static_cast<int>(call.rows.nodes.size()) - 1;
  }
  void rw_output(KernelCall& call, int node, Stored s) {
    call.rows.outputs.push_back(rw::Output{node, 0, s.dtype});
    call.row_outputs.push_back(s.buf);
    call.row_output_offs.push_back(s.off);
    call.tensors["out" + std::to_string(call.row_outputs.size())] = s.buf;
  }

  struct Group {
    Shape O;         // physical [.., C] shape of the group
    bool nhwc = false;
    int64_t R = 1, C = 1;
    std::map<int, int> node_of;     // value -> rowwise node
    std::map<int, bool> per_row;    // value -> per-row (reduced) value
    std::vector<int> members;       // graph nodes
  };

  // Physical shape of a value broadcast against the group: right-aligned to the group's rank, NHWC-permuted.
  Shape physical(const Group& gr, Shape s) const {
    while (s.size() < gr.O.size()) s.insert(s.begin(), 1);
    if (gr.nhwc && s.size() == 4) s = {s[0], s[2], s[3], s[1]};
    return s;
  }

  // Main shape of a node in a group: its input's for reductions, else its output's.
  Shape main_shape(const ir::Node& n) const {
    if (n.op == "ReduceMean" || n.op == "ReduceSum" || n.op == "ReduceMax") return shape(n.inputs[0]);
    return shape(n.outputs[0]);
  }

  void lower_rowwise(int first) {
    const ir::Node& n0 = g_.nodes[first];
    Group gr;
    Shape m = main_shape(n0);
    bool has_reduce = false;
    // Collect the run: consecutive row-wise nodes of one shape.
    std::vector<int> run;
    for (size_t i = static_cast<size_t>(first); i < g_.nodes.size(); ++i) {
      if (done_[i]) continue;
      const ir::Node& n = g_.nodes[i];
      if (!rowwise_op(n)) break;
      if (!run.empty()) {
        // The run goes on over [R, C] and its per-row values [R, 1] (reductions with keepdims). A value reduced
        // without keepdims starts a new run: over it, the last axis is another one (rows, not columns).
        Shape pm = main_shape(n);
        if (pm != m) {
          Shape red = m;
          if (!red.empty()) red.back() = 1;
          if (pm != red || m.empty()) break;
          const bool reduces = n.op == "Softmax" || n.op == "LogSoftmax" || n.op == "LayerNormalization" ||
                               n.op.rfind("Reduce", 0) == 0;
          if (reduces) break;  // over an axis of one element: as its own group, where that axis is the columns
        }
      }
      run.push_back(static_cast<int>(i));
      has_reduce = has_reduce || n.op == "Softmax" || n.op == "LogSoftmax" || n.op == "LayerNormalization" ||
                   n.op.rfind("Reduce", 0) == 0;
    }
    // NHWC when a 4-D activation input prefers it and nothing reduces over the (logical) last axis.
    bool nhwc = false;
    if (m.size() == 4 && !has_reduce)
      for (int i : run)
        for (int in : g_.nodes[i].inputs)
          if (in >= 0 && !val(in).is_const && shape(in).size() == 4 && prefers_nhwc(in)) nhwc = true;
    gr.nhwc = nhwc;
    gr.O = m;
    if (nhwc) gr.O = {m[0], m[2], m[3], m[1]};
    if (gr.O.empty()) gr.O = {1};
    gr.C = gr.O.back();
    gr.R = prod(gr.O) / std::max<int64_t>(gr.C, 1);
    std::string label;
    for (int i : run) label += (label.empty() ? "" : "+") + g_.nodes[i].name;
    if (label.size() > 120) label = g_.nodes[run.front()].name + "+...+" + g_.nodes[run.back()].name;
    KernelCall call = rowwise_call(label, gr.R, gr.C);
    for (int i : run) {
      try {
        rowwise_node(call, gr, g_.nodes[i]);
      } catch (const Error& e) {
        const std::string what = e.what();
        if (what.rfind("node '", 0) == 0) throw;
        fail(g_.nodes[i], what);
      }
      done_[i] = true;
    }
    // Outputs: values read outside the group or graph outputs.
    std::set<int> members(run.begin(), run.end());
    for (int i : run)
      for (int o : g_.nodes[i].outputs) {
        if (o < 0 || !gr.node_of.count(o)) continue;
        bool outside = is_output_[o];
        bool other_reader = false;
        for (int u : users_[o])
          if (!members.count(u)) outside = true, other_reader = true;
        if (!outside) continue;
        Shape s = shape(o);
        if (is_output_[o] && !(gr.nhwc && s.size() == 4)) {
          Stored so{out_buf_.at(o), 0, DType::F32, false};
          rw_output(call, gr.node_of[o], so);
          remember(o, so);
          if (!other_reader) continue;
        }
        DType dtype = storage_type(o);
        if (st_[o].size() && dtype == DType::F32) continue;  // the graph output serves the readers
        Stored so{temp(val(o).name, dtype, s), 0, dtype, gr.nhwc && s.size() == 4};
        rw_output(call, gr.node_of[o], so);
        remember(o, so);
        if (!gr.per_row[o]) int8_copy(call, gr.node_of[o], o, so.nhwc);
      }
    if (call.rows.outputs.empty()) return;  // nothing read: dead
    plan_.calls.push_back(std::move(call));
  }

  // A constant of logical shape `s` broadcast against the group: an f32 input of its period's rows.
  int const_operand(KernelCall& call, Group& gr, std::vector<float> d, const Shape& s, const std::string& name) {
    if (d.size() == 1) return rw_node(call, rw::Op::Const, {}, d[0]);
    Shape full = s;
    while (full.size() < gr.O.size()) full.insert(full.begin(), 1);
    if (full.size() > gr.O.size()) throw Error("constant '" + name + "' does not broadcast to the group");
    if (gr.nhwc && full.size() == 4) {
      d = permute_data(d, full, kToNhwc);
      full = {full[0], full[2], full[3], full[1]};
    }
    const bool per_row = full.back() == 1 && gr.C != 1;
    if (full.back() != gr.C && full.back() != 1) throw Error("constant '" + name + "' does not broadcast to the group");
    Shape lead_s(full.begin(), full.end() - 1), lead_o(gr.O.begin(), gr.O.end() - 1);
    int64_t period = -1;  // lead_s = [1.., lead_o[k:]]
    for (size_t k = 0; k <= lead_o.size() && period < 0; ++k) {
      bool ok = true;
      for (size_t i = 0; i < lead_o.size(); ++i) ok = ok && (i < k ? lead_s[i] == 1 : lead_s[i] == lead_o[i]);
      if (ok) period = prod(lead_o, k);
    }
    if (period < 0 || (!per_row && full.back() != gr.C)) {  // materialise the broadcast
      Shape target = gr.O;
      if (per_row) target.back() = 1;
      d = broadcast_data(d, full, target);
      period = gr.R;
    }
    const int64_t cols = per_row ? 1 : gr.C;
    int b = const_f32(name, {period, cols}, d);
    return rw_input(call, Stored{b, 0, DType::F32, false}, per_row, period);
  }

  // The rowwise node for value v in group gr: a group value, a scalar constant, or an input.
  int operand(KernelCall& call, Group& gr, int v) {
    if (auto it = gr.node_of.find(v); it != gr.node_of.end()) return it->second;
    const ir::Value& value = val(v);
    if (value.is_const && value.elements() == 1 && value.elem_type == ir::kFloat)
      return rw_node(call, rw::Op::Const, {}, value.data[0]);
    if (value.is_const && value.elem_type != ir::kFloat)
      throw Error("constant '" + value.name + "' is not float");
    Shape ps = physical(gr, shape(v));
    if (ps.size() > gr.O.size()) throw Error("value '" + value.name + "' does not broadcast to the group");
    const bool per_row = ps.back() == 1 && gr.C != 1;
    Shape lead_s(ps.begin(), ps.end() - 1), lead_o(gr.O.begin(), gr.O.end() - 1);
    // period: lead_s = [1.., lead_o[k:]]
    int64_t period = -1;
    for (size_t k = 0; k <= lead_o.size(); ++k) {
      bool ok = true;
      for (size_t d = 0; d < lead_o.size(); ++d) ok = ok && (d < k ? lead_s[d] == 1 : lead_s[d] == lead_o[d]);
      if (ok) {
        period = prod(lead_o, k);
        break;
      }
    }
    if (ps.back() != gr.C && ps.back() != 1) throw Error("value '" + value.name + "' does not broadcast to the group");
    if (value.is_const) return const_operand(call, gr, value.data, shape(v), value.name);
    Stored s = get_any(v, gr.nhwc);
    if (period < 0) {  // broadcast copy into a full-size temp
      Shape target = gr.O;
      if (per_row) target.back() = 1;
      Shape from = ps;
      std::vector<int64_t> st = strides_of(from);
      for (size_t d = 0; d < from.size(); ++d)
        if (from[d] == 1) st[d] = 0;
      Stored full{temp(value.name + ".broadcast", s.dtype, target), 0, s.dtype, false};
      view_copy(producer_label(v), s, 0, target, st, full, 0, strides_of(target));
      s = full;
      period = gr.R;
    }
    return rw_input(call, s, per_row, period == gr.R ? 0 : period);
  }

  void rowwise_node(KernelCall& call, Group& gr, const ir::Node& n) {
    const std::string& op = n.op;
    auto in = [&](size_t k) { return operand(call, gr, n.inputs[k]); };
    auto is_pr = [&](int v) {
      if (auto it = gr.per_row.find(v); it != gr.per_row.end()) return it->second;
      Shape ps = physical(gr, shape(v));
      return ps.back() == 1 && gr.C != 1;
    };
    int out = n.outputs[0];
    int r = -1;
    bool out_pr = false;
    auto binary = [&](rw::Op o) {
      r = rw_node(call, o, {in(0), in(1)});
      out_pr = is_pr(n.inputs[0]) && is_pr(n.inputs[1]);
    };
    if (op == "Add") binary(rw::Op::Add);
    else if (op == "Sub") binary(rw::Op::Sub);
    else if (op == "Mul") binary(rw::Op::Mul);
    else if (op == "Div") binary(rw::Op::Div);
    else if (op == "Max" || op == "Min" || op == "Sum") {
      rw::Op o = op == "Max" ? rw::Op::Max : op == "Min" ? rw::Op::Min : rw::Op::Add;
      r = in(0);
      out_pr = is_pr(n.inputs[0]);
      for (size_t k = 1; k < n.inputs.size(); ++k) {
        r = rw_node(call, o, {r, in(k)});
        out_pr = out_pr && is_pr(n.inputs[k]);
      }
    } else if (op == "Pow") {
      const ir::Value& e = val(n.inputs[1]);
      if (!e.is_const || e.elements() != 1) fail(n, "only a constant scalar exponent is supported");
      float ex = e.elem_type == ir::kFloat ? e.data[0] : static_cast<float>(e.ints[0]);
      if (ex != 2 && ex != 3 && ex != 0.5f && ex != 1 && ex != -1 && ex != -0.5f)
        fail(n, "exponent " + num(ex) + " is not supported (2, 3, 0.5, 1, -1, -0.5 are)");
      r = rw_node(call, rw::Op::Pow, {in(0)}, ex);
      out_pr = is_pr(n.inputs[0]);
    } else if (elementwise_unary(op)) {
      out_pr = is_pr(n.inputs[0]);
      int x = in(0);
      if (op == "Relu") r = rw_node(call, rw::Op::Relu, {x});
      else if (op == "Sigmoid") r = rw_node(call, rw::Op::Sigmoid, {x});
      else if (op == "Tanh") r = rw_node(call, rw::Op::Tanh, {x});
      else if (op == "Erf") r = rw_node(call, rw::Op::Erf, {x});
      else if (op == "Sqrt") r = rw_node(call, rw::Op::Sqrt, {x});
      else if (op == "Exp") r = rw_node(call, rw::Op::Exp, {x});
      else if (op == "Log") r = rw_node(call, rw::Op::Log, {x});
      else if (op == "Sin") r = rw_node(call, rw::Op::Sin, {x});
      else if (op == "Cos") r = rw_node(call, rw::Op::Cos, {x});
      else if (op == "Floor") r = rw_node(call, rw::Op::Floor, {x});
      else if (op == "Ceil") r = rw_node(call, rw::Op::Ceil, {x});
      else if (op == "Round") r = rw_node(call, rw::Op::Round, {x});
      else if (op == "Sign") r = rw_node(call, rw::Op::Sign, {x});
      else if (op == "Softplus") r = rw_node(call, rw::Op::Softplus, {x});
      else if (op == "Mish") r = rw_node(call, rw::Op::Mish, {x});
      else if (op == "Neg") r = rw_node(call, rw::Op::Neg, {x});
      else if (op == "Abs") r = rw_node(call, rw::Op::Abs, {x});
      else if (op == "Reciprocal") r = rw_node(call, rw::Op::Recip, {x});
      else if (op == "Cast") r = x;
      else if (op == "HardSigmoid" || op == "HardSwish") {  // clip(alpha*x + beta, 0, 1) (HardSwish: x * that)
        const float alpha = op == "HardSwish" ? 1.0f / 6.0f : n.attr_float("alpha", 0.2f);
        const float beta = op == "HardSwish" ? 0.5f : n.attr_float("beta", 0.5f);
        int t = rw_node(call, rw::Op::Add, {rw_node(call, rw::Op::Mul, {x, rw_node(call, rw::Op::Const, {}, alpha)}),
                                            rw_node(call, rw::Op::Const, {}, beta)});
        r = rw_node(call, rw::Op::Clip, {t}, 0, 0.0f, 1.0f);
        if (op == "HardSwish") r = rw_node(call, rw::Op::Mul, {x, r});
      }
      else if (op == "LeakyRelu") {
        float alpha = n.attr_float("alpha", 0.01f);
        int neg = rw_node(call, rw::Op::Min, {x, rw_node(call, rw::Op::Const, {}, 0.0f)});
        r = rw_node(call, rw::Op::Add, {rw_node(call, rw::Op::Relu, {x}),
                                        rw_node(call, rw::Op::Mul, {neg, rw_node(call, rw::Op::Const, {}, alpha)})});
      } else if (op == "Gelu") {
        auto a = n.attrs.find("approximate");
        bool tanh = a != n.attrs.end() && a->second.s == "tanh";
        r = rw_node(call, tanh ? rw::Op::GeluTanh : rw::Op::Gelu, {x});
      } else if (op == "Clip") {
        float lo = -std::numeric_limits<float>::infinity(), hi = std::numeric_limits<float>::infinity();
        auto scalar = [&](size_t k, float& dst) {
          if (k < n.inputs.size() && n.inputs[k] >= 0) {
            const ir::Value& c = val(n.inputs[k]);
            if (!c.is_const || c.elements() != 1) fail(n, "min and max must be constant scalars");
            dst = c.data[0];
          }
        };
        scalar(1, lo);
        scalar(2, hi);
        if (auto it = n.attrs.find("min"); it != n.attrs.end()) lo = it->second.f;
        if (auto it = n.attrs.find("max"); it != n.attrs.end()) hi = it->second.f;
        r = rw_node(call, rw::Op::Clip, {x}, 0, lo, hi);
      }
    } else if (op == "Where") {
      // cond is constant: out = x * m + y * (1 - m), a constant side folded into one constant term.
      const ir::Value& c = val(n.inputs[0]);
      Shape os = shape(out);
      std::vector<float> cond(c.ints.begin(), c.ints.end());
      if (cond.empty()) cond.assign(c.data.begin(), c.data.end());
      for (float& f : cond) f = f != 0 ? 1.0f : 0.0f;
      std::vector<float> mfull = broadcast_data(cond, c.shape(), os);
      auto const_input = [&](const std::vector<float>& d, const std::string& name) {
        int b = const_f32(name, os, gr.nhwc && os.size() == 4 ? permute_data(d, os, kToNhwc) : d);
        Shape po = physical(gr, os);
        const bool pr = po.back() == 1 && gr.C != 1;
        return rw_input(call, Stored{b, 0, DType::F32, false}, pr, 0);
      };
      const ir::Value &xv = val(n.inputs[1]), &yv = val(n.inputs[2]);
      if (yv.is_const || xv.is_const) {
        const bool ycst = yv.is_const;
        const ir::Value& cv = ycst ? yv : xv;
        std::vector<float> cf = broadcast_data(cv.data, cv.shape(), os), term(cf.size());
        std::vector<float> keep(mfull.size());
        for (size_t k = 0; k < cf.size(); ++k) {
          const bool take_var = ycst ? mfull[k] != 0 : mfull[k] == 0;
          keep[k] = take_var ? 1.0f : 0.0f;
          term[k] = take_var ? 0.0f : cf[k];
        }
        int var = operand(call, gr, n.inputs[ycst ? 1 : 2]);
        r = rw_node(call, rw::Op::Add, {rw_node(call, rw::Op::Mul, {var, const_input(keep, n.name + ".keep")}),
                                        const_input(term, n.name + ".other")});
      } else {
        std::vector<float> inv(mfull.size());
        for (size_t k = 0; k < inv.size(); ++k) inv[k] = 1.0f - mfull[k];
        r = rw_node(call, rw::Op::Add,
                    {rw_node(call, rw::Op::Mul, {in(1), const_input(mfull, n.name + ".mask")}),
                     rw_node(call, rw::Op::Mul, {in(2), const_input(inv, n.name + ".inv_mask")})});
      }
      out_pr = false;
    } else if (op == "BatchNormalization") {  // inference: x * scale[c] + shift[c], c = axis 1
      const float eps = n.attr_float("epsilon", 1e-5f);
      const auto &gam = val(n.inputs[1]).data, &beta = val(n.inputs[2]).data, &mean = val(n.inputs[3]).data,
                 &var = val(n.inputs[4]).data;
      std::vector<float> scale(gam.size()), shift(gam.size());
      for (size_t c = 0; c < gam.size(); ++c) {
        scale[c] = gam[c] / std::sqrt(var[c] + eps);
        shift[c] = beta[c] - mean[c] * scale[c];
      }
      Shape cs(shape(n.inputs[0]).size(), 1);
      cs[1] = static_cast<int64_t>(gam.size());
      int x = in(0);
      r = rw_node(call, rw::Op::Add, {rw_node(call, rw::Op::Mul, {x, const_operand(call, gr, scale, cs, n.name + ".scale")}),
                                      const_operand(call, gr, shift, cs, n.name + ".shift")});
      out_pr = is_pr(n.inputs[0]);
    } else if (op == "Softmax") {
      int x = in(0);
      int mx = rw_node(call, rw::Op::RowMax, {x});
      int e = rw_node(call, rw::Op::Exp, {rw_node(call, rw::Op::Sub, {x, mx})});
      r = rw_node(call, rw::Op::Mul, {e, rw_node(call, rw::Op::Recip, {rw_node(call, rw::Op::RowSum, {e})})});
    } else if (op == "LogSoftmax") {  // s - log(rowsum(exp(s))), s = x - rowmax(x)
      int s = rw_node(call, rw::Op::Sub, {in(0), rw_node(call, rw::Op::RowMax, {in(0)})});
      int l = rw_node(call, rw::Op::Log, {rw_node(call, rw::Op::RowSum, {rw_node(call, rw::Op::Exp, {s})})});
      r = rw_node(call, rw::Op::Sub, {s, l});
    } else if (op == "LayerNormalization") {
      for (size_t k = 1; k < n.outputs.size(); ++k)
        if (n.outputs[k] >= 0 && !users_[n.outputs[k]].empty()) fail(n, "only the first output may be used");
      const float eps = n.attr_float("epsilon", 1e-5f);
      int x = in(0);
      int d = rw_node(call, rw::Op::Sub, {x, rw_node(call, rw::Op::RowMean, {x})});
      int var = rw_node(call, rw::Op::RowMean, {rw_node(call, rw::Op::Mul, {d, d})});
      int inv = rw_node(call, rw::Op::Rsqrt, {rw_node(call, rw::Op::Add, {var, rw_node(call, rw::Op::Const, {}, eps)})});
      r = rw_node(call, rw::Op::Mul, {d, inv});
      r = rw_node(call, rw::Op::Mul, {r, in(1)});
      if (n.inputs.size() > 2 && n.inputs[2] >= 0) r = rw_node(call, rw::Op::Add, {r, in(2)});
    } else if (op == "ReduceMean" || op == "ReduceSum" || op == "ReduceMax") {
      rw::Op o = op == "ReduceMean" ? rw::Op::RowMean : op == "ReduceSum" ? rw::Op::RowSum : rw::Op::RowMax;
      r = gr.C == 1 ? in(0) : rw_node(call, o, {in(0)});
      out_pr = gr.C != 1;
    } else {
      fail(n, "internal: not a row-wise operator");
    }
    gr.node_of[out] = r;
    gr.per_row[out] = out_pr;
  }

  // ---- graph outputs ---------------------------------------------------------------------------------------
  void write_output(int o) {
    const int ob = out_buf_.at(o);
    for (const Stored& s : st_[o])
      if (s.buf == ob) return;
    const ir::Value& value = val(o);
    const std::string label = value.producer >= 0 ? g_.nodes[value.producer].name : "output(" + value.name + ")";
    Stored y{ob, 0, DType::F32, false};
    if (value.is_const) {
      int b = const_f32(value.name, value.shape(), value.data);
      copy(label, {BufferMove{b, ob, 0, 0, 1, value.elements() * 4ull, 0, 0}});
      return;
    }
    Stored s = get_any(o, false);
    if (s.dtype == DType::F32) copy(label, {BufferMove{s.buf, ob, s.off, 0, 1, value.elements() * 4ull, 0, 0}});
    else if (s.dtype == DType::I32) fail(g_.nodes[0], "integer outputs are not supported");
    else cast(label, s, y, value.elements());
  }

  const ir::Graph& g_;
  const Options& opts_;
  const std::map<std::string, int64_t>& sym_;
  std::set<int> calib_;              // values an INT8 compile quantises (matmul and conv inputs)
  std::map<std::string, float> absmax_;  // their ranges: opts_.activation_absmax (timing-only: 1 where missing)
  std::map<int, Stored> quantized_;  // value -> its int8 copy
  KernelPlan plan_;
  std::vector<std::vector<int>> users_;
  std::vector<bool> is_output_;
  std::vector<bool> done_;
  std::map<int, std::vector<Stored>> st_;
  std::map<int, int> out_buf_;
  std::map<std::string, int> const_names_;
  bool trans_b_ = false;
  bool have_gather_ = false;
};

}  // namespace

uint64_t Buffer::bytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n * isa::dtype_size(dtype) + extra_bytes;
}

KernelPlan lower(const ir::Graph& g, const Options& opts) {
  return Lowering(g, opts).run();
}

}  // namespace tpusim::compiler
