// int8 quantisation (Options::precision INT8). A quantised MatMul/Gemm/Conv (OpDef::quantises) casts its input to
// int8 (cast.s, scale 127/absmax from calibration, or an int8 copy written by the kernel that computed it), and
// runs gemm.s int8 -> int32 on int8 weights (per output channel scales) whose epilogue dequantises the
// accumulators on chip (acc * s_a * s_w[n] + bias, ReLU) into the usual storage type, and writes the next int8
// copy where one is wanted: the int32 accumulators never reach HBM.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "lowering.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {

void Lowering::find_quantised() {
  for (const ir::Node& n : g_.nodes) {
    const OpDef* def = find_op(n.op);
    if (def && def->quantises && def->quantises(*this, n) && !val(n.inputs[0]).is_const &&
        val(n.inputs[0]).elem_type == ir::kFloat)
      calib_.insert(n.inputs[0]);
  }
  // Timing-only (Options::timing_only): a range of 1 where none was calibrated; ranges change no instruction.
  if (opts_.timing_only && opts_.precision == Precision::INT8)
    for (int v : calib_) absmax_.emplace(val(v).name, 1.0f);
}

bool Lowering::int8(int v) const { return opts_.precision == Precision::INT8 && calib_.count(v); }

float Lowering::act_scale(const ir::Node& n, int v) const {
  auto it = absmax_.find(val(v).name);
  if (it == absmax_.end())
    fail(n, "int8: no calibration range for activation '" + val(v).name + "' (give calibration inputs)");
  if (!(it->second >= 0) || !std::isfinite(it->second))
    fail(n, "int8: the calibration range of '" + val(v).name + "' is not finite");
  return it->second > 0 ? it->second / 127.0f : 1.0f;
}

Stored Lowering::quantized(const ir::Node& n, int v, bool nhwc) {
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

int Lowering::tiled_weights_i8(const std::string& name, const std::vector<float>& w, int64_t k, int64_t n,
                     std::vector<float>& scales) {
  const int64_t R = sym_.at("MXU_ROWS"), C = sym_.at("MXU_COLS");
  const int64_t kt = (k + R - 1) / R, nt = (n + C - 1) / C;
  scales.assign(static_cast<size_t>(n), w.empty() ? 1.0f : 0.0f);  // timing-only: no values, scales of 1
  std::vector<uint8_t> t;
  if (!w.empty()) {
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j)
        scales[j] = std::max(scales[j], std::fabs(w[static_cast<size_t>(i * n + j)]));
    for (float& s : scales) s = s > 0 ? s / 127.0f : 1.0f;
    t.assign(static_cast<size_t>(kt * nt * R * C), 0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float q = std::nearbyint(w[static_cast<size_t>(i * n + j)] / scales[j]);
        const auto v = static_cast<int8_t>(std::clamp(q, -127.0f, 127.0f));
        std::memcpy(&t[static_cast<size_t>((((i / R) * nt + j / C) * R + i % R) * C + j % C)], &v, 1);
      }
  }
  const int b = add_const(name + ".i8", DType::I8, {kt, nt, R, C}, std::move(t));
  plan_.buffers[b].model_bytes = static_cast<uint64_t>(k * n);  // one byte a weight, not the padding
  return b;
}

float Lowering::int8_copy_scale(int v) const {
  if (opts_.precision != Precision::INT8 || !calib_.count(v) || quantized_.count(v)) return 0.0f;
  auto it = absmax_.find(val(v).name);
  if (it == absmax_.end() || !(it->second > 0) || !std::isfinite(it->second)) return 0.0f;
  return 127.0f / it->second;
}

Stored Lowering::int8_copy_buffer(int v, bool nhwc) {
  Stored s{temp(val(v).name + ".i8", DType::I8, shape(v)), 0, DType::I8, nhwc && layout_matters(v)};
  return quantized_[v] = s;
}

void Lowering::int8_copy(KernelCall& call, int node, int v, bool nhwc) {
  const float inv = int8_copy_scale(v);
  if (inv == 0.0f) return;
  int q = rw_node(call, rw::Op::Mul, {node, rw_node(call, rw::Op::Const, {}, inv)});
  rw_output(call, q, int8_copy_buffer(v, nhwc));
}

void Lowering::int8_gemm(const ir::Node& n, const std::string& label, Stored aq, int a, const std::vector<float>& w, int64_t m,
               int64_t k, int64_t nn, const std::vector<float>& bias, const std::string& wname, bool relu,
               Stored out, double flops, int value) {
  std::vector<float> s_w;
  int B = tiled_weights_i8(wname, w, k, nn, s_w);
  if (out.dtype != DType::BF16 && out.dtype != DType::F32)
    throw LoweringIssue(std::string("internal: an int8 matmul's output wanted as ") + isa::dtype_name(out.dtype));
  // The epilogue's per-column (scale, bias) pairs: s_a * s_w[n] (one f32 product), bias[n] (0 where none: unused)
  const float s_a = act_scale(n, a);
  std::vector<float> dq(static_cast<size_t>(2 * nn), 0.0f);
  for (int64_t j = 0; j < nn; ++j) {
    dq[static_cast<size_t>(2 * j)] = s_a * s_w[static_cast<size_t>(j)];
    if (!bias.empty()) dq[static_cast<size_t>(2 * j + 1)] = bias[static_cast<size_t>(j)];
  }
  gemm(label, aq, Stored{B, 0, DType::I8, false}, -1, out, m, k, nn, relu, 1.0f, true, false);
  KernelCall& call = plan_.calls.back();
  call.params["IN_DT"] = dt(DType::I8);
  call.params["DEQUANT"] = 1;
  call.params["BIAS"] = bias.empty() ? 0 : 1;
  call.tensors["dq"] = const_f32(wname + ".dq", {nn, 2}, dq);
  const float inv = value >= 0 ? int8_copy_scale(value) : 0.0f;
  // The int8 copy alone (Q_ONLY) when only int8 matmuls read the value and this call computes all of it.
  const bool q_only = inv != 0.0f && out.off == 0 && m * nn == val(value).elements() && only_int8_matmuls_read(value);
  if (inv != 0.0f) {
    call.tensors["q"] = int8_copy_buffer(value, out.nhwc).buf;
    call.params["Q_SCALE"] = isa::bits_from_f32(inv);
  }
  if (q_only) {
    call.params["Q_ONLY"] = 1;
    call.tensors.erase("c");
    call.offsets.erase("c");
  }
  call.flops = flops;
  call.bytes = static_cast<double>(m * k + k * nn + 8 * nn) +
               static_cast<double>(m * nn) * ((q_only ? 0 : isa::dtype_size(out.dtype)) + (inv != 0.0f ? 1 : 0));
}

bool Lowering::only_int8_matmuls_read(int v) const {
  if (is_output_[static_cast<size_t>(v)] || !int8(v)) return false;
  const Shape& s = shape(v);
  if (s.size() < 2 || s.back() == 0 || val(v).elements() / s.back() < 2) return false;  // m = 1 is a GEMV on bf16
  bool read = false;
  for (const ir::Node& n : g_.nodes) {
    const auto uses = std::count(n.inputs.begin(), n.inputs.end(), v);
    if (uses == 0) continue;
    // A MatMul or Gemm with constant 2-D weights, reading v as its activations only (lower_matmul then takes
    // v's int8 copy, L.quantized)
    if ((n.op != "MatMul" && n.op != "Gemm") || uses != 1 || n.inputs[0] != v || n.inputs.size() < 2 ||
        !val(n.inputs[1]).is_const || shape(n.inputs[1]).size() != 2 || n.attr_int("transA", 0) != 0)
      return false;
    read = true;
  }
  return read;
}

}  // namespace tpusim::compiler
