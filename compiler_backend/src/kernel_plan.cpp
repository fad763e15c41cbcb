#include "kernel_plan.h"

#include <cstring>

#include "tpusim/isa/numerics.h"

namespace tpusim::compiler {
namespace {

constexpr int64_t dt(isa::DType t) { return static_cast<int64_t>(t); }  // the kernels' DT_* symbols

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

class Selector {
 public:
  Selector(const ir::Graph& g, const FusedGraph& f) : g_(g), f_(f) {}

  KernelPlan run() {
    for (int in : g_.inputs) f32_[in] = add(g_.values[in].name, Buffer::Kind::Input, isa::DType::F32, in);
    for (const FusedGraph::Output& o : f_.outputs) f32_[o.value] = add(o.name, Buffer::Kind::Output, isa::DType::F32, o.value);
    for (const FusedMatMul& op : f_.ops) {
      if (op.kind == FusedMatMul::Kind::Add) add_vadd(op);
      else add_gemm(op);
    }
    return std::move(plan_);
  }

 private:
  int add(const std::string& name, Buffer::Kind kind, isa::DType dtype, int value) {
    plan_.buffers.push_back(Buffer{name, kind, dtype, g_.values[value].shape(), {}, 0});
    return static_cast<int>(plan_.buffers.size()) - 1;
  }

  // A Const buffer; the same name with the same contents is shared, different contents get a fresh name.
  int add_const(const std::string& name, isa::DType dtype, std::vector<int64_t> shape, std::vector<uint8_t> data) {
    std::string unique = name;
    for (int suffix = 1;; ++suffix) {
      const Buffer* same = nullptr;
      for (const Buffer& b : plan_.buffers)
        if (b.kind != Buffer::Kind::Temp && b.name == unique) same = &b;
      if (!same) break;
      if (same->kind == Buffer::Kind::Const && same->dtype == dtype && same->shape == shape && same->data == data)
        return static_cast<int>(same - plan_.buffers.data());
      unique = name + "." + std::to_string(suffix);
    }
    plan_.buffers.push_back(Buffer{unique, Buffer::Kind::Const, dtype, std::move(shape), std::move(data), 0});
    return static_cast<int>(plan_.buffers.size()) - 1;
  }

  // The bf16 buffer holding value `v` ([rows, cols] after the optional transpose of a constant).
  int bf16_operand(int v, bool transpose) {
    const ir::Value& val = g_.values[v];
    if (val.is_const) {
      std::vector<int64_t> s = val.shape();
      if (!transpose) return add_const(val.name, isa::DType::BF16, s, bf16_bytes(val.data));
      std::vector<float> t(val.data.size());
      for (int64_t i = 0; i < s[0]; ++i)
        for (int64_t j = 0; j < s[1]; ++j) t[j * s[0] + i] = val.data[i * s[1] + j];
      return add_const(val.name, isa::DType::BF16, {s[1], s[0]}, bf16_bytes(t));
    }
    if (auto it = bf16_.find(v); it != bf16_.end()) return it->second;
    int src = f32_.at(v);  // a graph input, or a graph output computed in f32: cast it on the chip
    int dst = add(val.name + ".bf16", Buffer::Kind::Temp, isa::DType::BF16, v);
    plan_.calls.push_back(KernelCall{
        .label = "cast(" + val.name + ")",
        .kernel = "cast.s",
        .params = {{"N", val.elements()}, {"SDT", dt(isa::DType::F32)}, {"DDT", dt(isa::DType::BF16)}, {"SCALE", 0}},
        .tensors = {{"x", src}, {"y", dst}}});
    return bf16_[v] = dst;
  }

  void add_gemm(const FusedMatMul& op) {
    KernelCall call;
    call.label = op.name;  // the fused group: "fc+add+relu"
    for (const std::string& f : op.fused) call.label += "+" + f;
    call.kernel = "gemm.s";
    call.tensors["a"] = bf16_operand(op.a, false);
    call.tensors["b"] = bf16_operand(op.b, op.transpose_b);
    if (!op.bias.empty()) call.tensors["bias"] = add_const(op.bias_name, isa::DType::F32, {op.n}, f32_bytes(op.bias));
    bool is_output = f32_.count(op.out) > 0;
    if (is_output) {
      call.tensors["c"] = f32_.at(op.out);
    } else {
      call.tensors["c"] = bf16_[op.out] = add(g_.values[op.out].name, Buffer::Kind::Temp, isa::DType::BF16, op.out);
    }
    call.params = {{"M", op.m}, {"K", op.k}, {"N", op.n},
                   {"IN_DT", dt(isa::DType::BF16)}, {"OUT_DT", dt(is_output ? isa::DType::F32 : isa::DType::BF16)},
                   {"BIAS", op.bias.empty() ? 0 : 1}, {"RELU", op.relu ? 1 : 0}, {"SCALE", 0}};
    plan_.calls.push_back(std::move(call));
  }

  // out = a + b in bf16 (vadd.s, DT_BF16). A graph output gets the sum in a bf16 temporary, then cast to f32: the
  // temporary also serves any later matmul that reads the output.
  void add_vadd(const FusedMatMul& op) {
    const ir::Value& out = g_.values[op.out];
    int a = bf16_operand(op.a, false), b = bf16_operand(op.b, false);
    bool is_output = f32_.count(op.out) > 0;
    int sum = bf16_[op.out] = add(is_output ? out.name + ".bf16" : out.name, Buffer::Kind::Temp, isa::DType::BF16,
                                  op.out);
    plan_.calls.push_back(KernelCall{
        .label = op.name,
        .kernel = "vadd.s",
        .params = {{"N", out.elements()}, {"DT", dt(isa::DType::BF16)}},
        .tensors = {{"a", a}, {"b", b}, {"y", sum}}});
    if (!is_output) return;
    plan_.calls.push_back(KernelCall{
        .label = op.name,
        .kernel = "cast.s",
        .params = {{"N", out.elements()}, {"SDT", dt(isa::DType::BF16)}, {"DDT", dt(isa::DType::F32)}, {"SCALE", 0}},
        .tensors = {{"x", sum}, {"y", f32_.at(op.out)}}});
  }

  const ir::Graph& g_;
  const FusedGraph& f_;
  KernelPlan plan_;
  std::map<int, int> f32_;   // value -> buffer holding it as f32 (graph inputs and outputs)
  std::map<int, int> bf16_;  // value -> buffer holding it as bf16 (intermediates and casts)
};

}  // namespace

uint64_t Buffer::bytes() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n * isa::dtype_size(dtype);
}

KernelPlan select_kernels(const ir::Graph& g, const FusedGraph& f) { return Selector(g, f).run(); }

}  // namespace tpusim::compiler
