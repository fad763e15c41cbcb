// int8 quantisation (Options::precision INT8). A quantised MatMul/Gemm/Conv (OpDef::quantises) casts its input to
// int8 (cast.s, scale 127/absmax from calibration, or an int8 copy written by the row-wise kernel that computed it),
// runs gemm.s int8 -> int32 on int8 weights (per output channel scales), and a row-wise kernel dequantises
// (acc * s_a * s_w[n] + bias, ReLU) into the usual storage type.
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

void Lowering::dequantize(const std::string& label, Stored acc, int64_t rows, int64_t n, float s_a, const std::vector<float>& s_w,
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

void Lowering::int8_copy(KernelCall& call, int node, int v, bool nhwc) {
  if (opts_.precision != Precision::INT8 || !calib_.count(v) || quantized_.count(v)) return;
  auto it = absmax_.find(val(v).name);
  if (it == absmax_.end() || !(it->second > 0) || !std::isfinite(it->second)) return;
  const float inv = 127.0f / it->second;
  int q = rw_node(call, rw::Op::Mul, {node, rw_node(call, rw::Op::Const, {}, inv)});
  Stored s{temp(val(v).name + ".i8", DType::I8, shape(v)), 0, DType::I8, nhwc && layout_matters(v)};
  rw_output(call, q, s);
  quantized_[v] = s;
}

void Lowering::int8_gemm(const ir::Node& n, const std::string& label, Stored aq, int a, const std::vector<float>& w, int64_t m,
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

}  // namespace tpusim::compiler
