// The lowering's core: the walk over the graph (each node to its OpDef, ops.h), buffers, stored variants, library
// kernel calls, copies and graph outputs. The operators' lowerings are in ops_<family>.cpp, row-wise kernels in
// lower_rowwise.cpp, int8 quantisation in lower_quant.cpp.
#include "lower.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>

#include "lowering.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"

namespace tpusim::compiler {

std::string num(float f) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", static_cast<double>(f));
  return b;
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
  if (!v.empty()) std::memcpy(out.data(), v.data(), out.size());  // (no null pointers, even for 0 bytes)
  return out;
}

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

std::vector<float> broadcast_data(const std::vector<float>& d, Shape from, const Shape& to) {
  while (from.size() < to.size()) from.insert(from.begin(), 1);
  std::vector<int64_t> fs = strides_of(from);
  for (size_t i = 0; i < from.size(); ++i)
    if (from[i] == 1) fs[i] = 0;
  return gather_strided(d, to, fs);
}

std::vector<float> permute_data(const std::vector<float>& d, const Shape& s, const std::vector<int>& perm) {
  Shape os(perm.size());
  std::vector<int64_t> is = strides_of(s), ps(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) os[i] = s[perm[i]], ps[i] = is[perm[i]];
  return gather_strided(d, os, ps);
}

Lowering::Lowering(const ir::Graph& g, const Options& opts)
    : g_(g),
      opts_(opts),
      sym_(opts.target.symbols),
      absmax_(opts.activation_absmax),
      users_(ir::users_of(g)), is_output_(g.values.size()), done_(g.nodes.size()) {
  for (int o : g_.outputs) is_output_[o] = true;
  std::string gemm = kernels::source("gemm.s").value_or("");
  trans_b_ = gemm.find("TRANS_B") != std::string::npos;
  have_gather_ = kernels::source("gather.s").has_value();
}

KernelPlan Lowering::run() {
  for (int in : g_.inputs) {
    const ir::Value& v = g_.values[in];
    bool integer = v.elem_type != ir::kFloat;
    int b = add_buffer(v.name, Buffer::Kind::Input, integer ? DType::I32 : DType::F32, v.shape());
    st_[in].push_back(Stored{b, 0, integer ? DType::I32 : DType::F32, false});
  }
  // Integer and BOOL outputs are int32 (the runtime has no 64-bit integers; int64 inputs are read as int32 too).
  for (int o : g_.outputs) {
    const ir::Value& v = g_.values[o];
    out_buf_[o] = add_buffer(v.name, Buffer::Kind::Output, v.elem_type == ir::kFloat ? DType::F32 : DType::I32,
                             v.shape());
  }
  find_quantised();
  find_attention();
  if (opts_.expose_calibration)
    for (int v : calib_) {
      const ir::Value& value = val(v);
      out_buf_[v] = add_buffer(kCalibrationPrefix + value.name, Buffer::Kind::Output, DType::F32, value.shape());
    }
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    if (done_[i]) continue;
    const size_t calls = plan_.calls.size();
    lower_node(static_cast<int>(i));
    if (auto note = attention_notes_.find(static_cast<int>(i)); note != attention_notes_.end())
      for (size_t c = calls; c < plan_.calls.size(); ++c) plan_.calls[c].note = note->second;
  }
  for (int o : g_.outputs) write_output(o);
  if (opts_.expose_calibration)
    for (int v : calib_) write_output(v);
  return std::move(plan_);
}

// Each node to its operator's lowering: a row-wise kernel when it fuses, else its own (OpDef::lower).
void Lowering::lower_node(int i) {
  const ir::Node& n = g_.nodes[i];
  const OpDef* def = find_op(n.op);
  try {
    if (!def) fail(n, "unsupported operator");  // shape inference admits registered operators only
    // A result of no elements (a size 0 in its shape, from a constant or an input of such a shape): no kernel
    // computes over nothing; refused here, at the node, rather than by the kernel generator it would reach.
    for (int o : n.outputs)
      if (o >= 0 && val(o).has_shape)
        for (const ir::Dim& d : val(o).dims)
          if (d.size == 0)
            fail(n, "its result '" + val(o).name + "' " + ir::shape_str(val(o)) +
                        " has no elements (tensors with a size of 0 are not supported)");
    if (auto it = attention_.find(i); it != attention_.end()) return lower_attention(*this, *it->second);
    if (rowwise_op(n)) return lower_rowwise(i);
    if (def->lower) return def->lower(*this, n);
    fail(n, def->no_lowering ? def->no_lowering : "no lowering for this operator");
  } catch (const LoweringIssue& e) {
    fail(n, e.what());
  }
}

int Lowering::add_buffer(const std::string& name, Buffer::Kind kind, DType dtype, Shape shape, uint64_t extra) {
  if (kind == Buffer::Kind::Input || kind == Buffer::Kind::Output) io_names_.insert(name);
  Buffer b{name, kind, dtype, std::move(shape), {}, 0, extra, std::nullopt};
  plan_.buffers.push_back(std::move(b));
  return static_cast<int>(plan_.buffers.size()) - 1;
}

int Lowering::temp(const std::string& name, DType dtype, Shape shape, uint64_t extra) {
  return add_buffer(name, Buffer::Kind::Temp, dtype, std::move(shape), extra);
}

int Lowering::add_const(const std::string& name, DType dtype, Shape shape, std::vector<uint8_t> data) {
  std::string unique = name;
  for (int suffix = 1;; ++suffix) {
    auto it = const_names_.find(unique);
    if (it == const_names_.end() && !io_names_.count(unique)) break;
    if (it != const_names_.end()) {
      const Buffer& same = plan_.buffers[it->second];
      if (same.dtype == dtype && same.shape == shape && same.data == data) return it->second;
    }
    unique = name + "." + std::to_string(suffix);
  }
  int b = add_buffer(unique, Buffer::Kind::Const, dtype, std::move(shape));
  plan_.buffers[b].data = std::move(data);
  const_names_[unique] = b;
  return b;
}

int Lowering::const_f32(const std::string& name, Shape shape, const std::vector<float>& v) {
  return add_const(name, DType::F32, std::move(shape), f32_bytes(v));
}

int Lowering::const_bf16(const std::string& name, Shape shape, const std::vector<float>& v) {
  return add_const(name, DType::BF16, std::move(shape), bf16_bytes(v));
}

int Lowering::pattern(float value, DType dtype, uint64_t bytes) {  // a constant row of `value`, at least `bytes` long
  const int64_t n = static_cast<int64_t>(bytes / isa::dtype_size(dtype)) + 1;
  std::vector<float> v(static_cast<size_t>(n), value);
  std::string name = std::string("fill.") + isa::dtype_name(dtype) + "." + std::to_string(n) +
                     (value == 0 ? "" : (value < 0 ? ".neg" : ".pos"));
  const int b = dtype == DType::I8 ? add_const(name, DType::I8, {n}, std::vector<uint8_t>(static_cast<size_t>(n), 0))
                : dtype == DType::BF16 ? const_bf16(name, {n}, v)
                                       : const_f32(name, {n}, v);
  plan_.buffers[b].model_bytes = 0;  // made up by the compiler (padding values), not the model's
  return b;
}

int Lowering::fill_pattern(float value, DType dtype, uint64_t bytes, std::vector<BufferMove>& moves) {
  const auto key = std::make_pair(isa::bits_from_f32(value), dtype);
  const auto held = fill_patterns_.find(key);
  if (held != fill_patterns_.end() && plan_.buffers[static_cast<size_t>(held->second)].bytes() > bytes)
    return held->second;
  // the constant as long as this row asks; its intermediate copy that row repeated to at least kFillPatternBytes
  // (one broadcast move), so that the longer rows of later windows find it long enough too
  const int from = pattern(value, dtype, bytes);
  const uint64_t row = plan_.buffers[static_cast<size_t>(from)].bytes();  // (temp below may move the buffers)
  const int64_t n = plan_.buffers[static_cast<size_t>(from)].shape[0];
  const uint64_t reps = std::max<uint64_t>(1, (kFillPatternBytes + row - 1) / row);
  const int to = temp(plan_.buffers[static_cast<size_t>(from)].name + ".on_chip", dtype, {static_cast<int64_t>(reps) * n});
  const BufferMove load{from, to, 0, 0, reps, row, 0, static_cast<int64_t>(row)};
  fill_patterns_[key] = to;
  // Loaded beside an earlier copy's own reads of far memory (the latest copy that reads a constant or an input and
  // writes intermediates only: none a graph output, which codegen may move elsewhere, place_output_moves), whose
  // latency it then shares; else by the copy being made, whose fills read the constant itself this once
  auto reads_far = [&](const KernelCall& call) {
    return call.kind == KernelCall::Kind::Copy &&
           std::any_of(call.moves.begin(), call.moves.end(), [&](const BufferMove& m) {
             return plan_.buffers[static_cast<size_t>(m.src)].kind != Buffer::Kind::Temp;
           }) &&
           std::all_of(call.moves.begin(), call.moves.end(), [&](const BufferMove& m) {
             return plan_.buffers[static_cast<size_t>(m.dst)].kind == Buffer::Kind::Temp;
           });
  };
  const auto earlier = std::find_if(plan_.calls.rbegin(), plan_.calls.rend(), reads_far);
  if (earlier == plan_.calls.rend()) {
    moves.push_back(load);
    return from;
  }
  earlier->moves.push_back(load);
  earlier->tensors["b" + std::to_string(from)] = from, earlier->tensors["b" + std::to_string(to)] = to;
  return to;
}

int Lowering::tiled_weights(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n,
                            int64_t model) {
  const int64_t R = sym_.at("MXU_ROWS"), C = sym_.at("MXU_COLS");
  const int64_t kt = (k + R - 1) / R, nt = (n + C - 1) / C;
  std::vector<float> t;
  if (!w.empty()) {  // timing-only (no values): laid out, not filled
    t.assign(static_cast<size_t>(kt * nt * R * C), 0.0f);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j)
        t[static_cast<size_t>((((i / R) * nt + j / C) * R + i % R) * C + j % C)] = w[static_cast<size_t>(i * n + j)];
  }
  const int b = const_bf16(name, {kt, nt, R, C}, t);
  plan_.buffers[b].model_bytes =
      static_cast<uint64_t>(model >= 0 ? model : k * n) * isa::dtype_size(DType::BF16);  // not the padding
  return b;
}

const ir::Value& Lowering::val(int v) const { return g_.values[v]; }

Shape Lowering::shape(int v) const { return g_.values[v].shape(); }

void Lowering::gemm(const std::string& label, Stored a, Stored b, int bias, Stored c, int64_t m, int64_t k, int64_t n,
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

void Lowering::cast(const std::string& label, Stored x, Stored y, int64_t n) {
  KernelCall call;
  call.label = label;
  call.kernel = "cast.s";
  call.tensors = {{"x", x.buf}, {"y", y.buf}};
  call.offsets = {{"x", x.off}, {"y", y.off}};
  call.params = {{"N", n}, {"SDT", dt(x.dtype)}, {"DDT", dt(y.dtype)}, {"SCALE", 0}};
  call.bytes = static_cast<double>(n * (isa::dtype_size(x.dtype) + isa::dtype_size(y.dtype)));
  plan_.calls.push_back(std::move(call));
}

void Lowering::copy(const std::string& label, std::vector<BufferMove> moves) {
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

void Lowering::view_moves(std::vector<BufferMove>& out, Stored src, Stored dst, Shape shape, std::vector<int64_t> sstr,
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

void Lowering::view_copy(const std::string& label, Stored src, int64_t src_elem_off, const Shape& out, const std::vector<int64_t>& sstr,
               Stored dst, int64_t dst_elem_off, const std::vector<int64_t>& dstr) {
  const int es = isa::dtype_size(src.dtype);
  src.off += static_cast<uint64_t>(src_elem_off * es);
  dst.off += static_cast<uint64_t>(dst_elem_off * es);
  std::vector<BufferMove> moves;
  view_moves(moves, src, dst, out, sstr, dstr, es);
  copy(label, std::move(moves));
}

bool Lowering::layout_matters(int v) const {
  Shape s = val(v).shape();
  return s.size() == 4 && s[2] * s[3] != 1 && s[1] != 1;
}

Stored Lowering::remember(int v, Stored s) {
  if (!layout_matters(v)) s.nhwc = false;
  st_[v].push_back(s);
  return s;
}

Stored Lowering::get(int v, DType dtype, bool nhwc) {
  const ir::Value& value = val(v);
  if (!layout_matters(v)) nhwc = false;
  for (const Stored& s : st_[v])
    if (s.dtype == dtype && s.nhwc == nhwc) return s;
  if (value.is_const) {
    if (value.elem_type != ir::kFloat && dtype == DType::I32) {
      std::vector<uint8_t> bytes(value.ints.size() * 4);
      for (size_t k = 0; k < value.ints.size(); ++k) {
        const auto i = static_cast<int32_t>(std::clamp<int64_t>(value.ints[k], INT32_MIN, INT32_MAX));
        std::memcpy(&bytes[4 * k], &i, 4);
      }
      st_[v].push_back(Stored{add_const(value.name, DType::I32, value.shape(), std::move(bytes)), 0, dtype, false});
      return st_[v].back();
    }
    if (dtype != DType::F32 && dtype != DType::BF16)
      throw LoweringIssue("internal: constant '" + value.name + "' wanted as " + isa::dtype_name(dtype));
    Shape s = value.shape();
    std::vector<float> d = const_floats(value);
    if (nhwc) {
      d = permute_data(d, s, kToNhwc);
      s = {s[0], s[2], s[3], s[1]};
    }
    int b = dtype == DType::BF16 ? const_bf16(value.name, s, d) : const_f32(value.name, s, d);
    st_[v].push_back(Stored{b, 0, dtype, nhwc});
    return st_[v].back();
  }
  if (st_[v].empty()) throw LoweringIssue("internal: value '" + value.name + "' was not computed");
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

Stored Lowering::get_any(int v, bool nhwc) {
  if (!layout_matters(v)) nhwc = false;
  for (const Stored& s : st_[v])
    if (s.nhwc == nhwc && (s.dtype == DType::F32 || s.dtype == DType::BF16)) return s;
  if (val(v).is_const) return get(v, DType::F32, nhwc);
  for (const Stored& s : st_[v])
    if (s.dtype == DType::F32 || s.dtype == DType::BF16) return get(v, s.dtype, nhwc);
  return get(v, DType::F32, nhwc);  // an integer input: cast
}

bool Lowering::prefers_nhwc(int v) const {
  for (const Stored& s : st_.count(v) ? st_.at(v) : std::vector<Stored>{})
    if (s.nhwc) return true;
  return false;
}

std::string Lowering::producer_label(int v) const {
  const ir::Value& value = val(v);
  return value.producer >= 0 ? g_.nodes[value.producer].name : "cast(" + value.name + ")";
}

std::vector<float> const_floats(const ir::Value& v) {
  if (v.elem_type == ir::kFloat) return v.data;
  return std::vector<float>(v.ints.begin(), v.ints.end());
}

DType Lowering::storage_type(int v) const {
  if (angle(v) || val(v).elem_type != ir::kFloat) return DType::F32;  // integers and booleans: exact in f32
  for (int u : users_[v]) {
    const ir::Node& n = g_.nodes[u];
    const OpDef* def = find_op(n.op);
    const bool f32_reader = def && def->reads_f32 && n.inputs[0] == v;
    if (!rowwise_op(n) && !f32_reader) return DType::BF16;
  }
  return DType::F32;
}

bool Lowering::angle(int v, int depth) const {
  for (int u : users_[v]) {
    const ir::Node& n = g_.nodes[u];
    const OpDef* def = find_op(n.op);
    if (!def) continue;
    if (def->angle_input) return true;
    if (depth < 8 && def->moves_data)
      for (int o : n.outputs)
        if (o >= 0 && angle(o, depth + 1)) return true;
  }
  return false;
}

Stored Lowering::destination(int v, DType dtype, bool rowwise) {
  const ir::Value& value = val(v);
  if (is_output_[v] && users_[v].empty() && value.shape().size() != 4 && (value.elem_type == ir::kFloat || rowwise)) {
    Stored s{out_buf_.at(v), 0, plan_.buffers[out_buf_.at(v)].dtype, false};
    st_[v].push_back(s);
    return s;
  }
  Stored s{temp(value.name, dtype, value.shape()), 0, dtype, false};
  st_[v].push_back(s);
  return s;
}

void Lowering::alias(const ir::Node& n) {
  int x = n.inputs[0], y = n.outputs[0];
  if (val(x).is_const) throw LoweringIssue("internal: alias of a constant '" + val(x).name + "' was not folded");
  // A view of row-major bytes: NHWC data is only the same bytes when H = W = 1 or the shape does not change.
  Stored s = val(x).shape().size() == 4 && prod(shape(x), 2) != 1 ? get_any(x, false) : st_.at(x).front();
  if (s.nhwc && shape(x) != shape(y)) s.nhwc = false;  // H = W = 1: same bytes
  if (shape(y).size() != 4) s.nhwc = false;
  st_[y].push_back(s);
}

bool Lowering::is_last_two_swap(const ir::Node& t) {
  auto it = t.attrs.find("perm");
  if (it == t.attrs.end()) return false;
  const std::vector<int64_t>& p = it->second.ints;
  const size_t r = p.size();
  if (r < 2) return false;
  for (size_t d = 0; d + 2 < r; ++d)
    if (p[d] != static_cast<int64_t>(d)) return false;
  return p[r - 2] == static_cast<int64_t>(r - 1) && p[r - 1] == static_cast<int64_t>(r - 2);
}

void Lowering::write_output(int o) {
  const int ob = out_buf_.at(o);
  for (const Stored& s : st_[o])
    if (s.buf == ob) return;
  const ir::Value& value = val(o);
  const std::string label = value.producer >= 0 ? g_.nodes[value.producer].name : "output(" + value.name + ")";
  const DType odt = plan_.buffers[ob].dtype;  // F32, or I32 for integer and BOOL outputs
  Stored y{ob, 0, odt, false};
  if (value.is_const) {
    Stored c = get(o, odt, false);
    copy(label, {BufferMove{c.buf, ob, 0, 0, 1, value.elements() * 4ull, 0, 0}});
    return;
  }
  // Integer values are computed in f32 (exact integers) and converted on the way out; an integer graph input
  // passed through is int32 already.
  if (odt == DType::I32)
    for (const Stored& v : st_[o])
      if (v.dtype == DType::I32 && !v.nhwc) return copy(label, {BufferMove{v.buf, ob, v.off, 0, 1, value.elements() * 4ull, 0, 0}});
  Stored s = get_any(o, false);
  if (s.dtype == odt) copy(label, {BufferMove{s.buf, ob, s.off, 0, 1, value.elements() * 4ull, 0, 0}});
  else cast(label, s, y, value.elements());
}

uint64_t Buffer::bytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n * isa::dtype_size(dtype) + extra_bytes;
}

KernelPlan lower(const ir::Graph& g, const Options& opts) {
  try {
    return Lowering(g, opts).run();
  } catch (const ir::NodeError& e) {
    throw ir::in_model(g, e);
  } catch (const LoweringIssue& e) {
    throw Error(isa::printable(g.model_name, 200) + ": " + e.what());
  }
}

}  // namespace tpusim::compiler
