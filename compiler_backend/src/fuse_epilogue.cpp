// Residual Adds into the GEMM's epilogue: ResNet's `conv3 -> Add(., shortcut) -> Relu`, wherever the Add (and Relu)
// is a row-wise kernel of its own (in a transformer the Add fuses with the LayerNorm after it instead, and is left
// alone). The row-wise kernel would read the GEMM's whole output back and write the sum; gemm.s's RESIDUAL loads
// r's tile beside each C tile it drains and adds it there (kernels/gemm.s), so the GEMM's output never exists and
// the Add costs no kernel of its own.
#include "fuse_epilogue.h"

#include <algorithm>
#include <stdexcept>

#include "codegen.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/gemm_chip.h"

namespace tpusim::compiler {
namespace {

namespace rw = kernels::rowwise;

// True if the call reads or writes buffer b (names it among its tensors or moves).
bool touches(const KernelCall& call, int b) {
  for (const auto& [name, buf] : call.tensors)
    if (buf == b) return true;
  for (const BufferMove& m : call.moves)
    if (m.src == b || m.dst == b) return true;
  return false;
}

// The scale c where the program's second output is the int8 copy of its first (an i8 output of Mul(the first's
// node, Const c), c != 0: rw::int8_copy_of), else 0.
float int8_copy_of_first(const rw::Program& p) {
  float c = 0;
  return p.outputs.size() == 2 && rw::int8_copy_of(p, 1, &c, false) == 0 && c != 0.0f ? c : 0.0f;
}

// The row-wise call's two inputs (indices into rows.inputs) when it is exactly Add(in_i, in_j) or
// Relu(Add(in_i, in_j)) of two whole [R, C] inputs into one output, or into that output and its int8 copy (a
// second output, i8, of Mul(the first's node, a constant): `q_scale`, else 0); false otherwise.
bool residual_add(const KernelCall& call, int& i, int& j, bool& relu, float& q_scale) {
  const rw::Program& p = call.rows;
  q_scale = 0;
  if (call.kind != KernelCall::Kind::Rowwise || p.outputs.empty() || p.outputs.size() > 2 || p.inputs.size() != 2)
    return false;
  int add = p.outputs[0].node;
  relu = false;
  const auto nodes = static_cast<int>(p.nodes.size());
  if (add < 0 || add >= nodes) return false;
  if (p.outputs.size() == 2 && (q_scale = int8_copy_of_first(p)) == 0) return false;  // else the int8 copy
  if (p.nodes[static_cast<size_t>(add)].op == rw::Op::Relu) relu = true, add = p.nodes[static_cast<size_t>(add)].args[0];
  const rw::Node& a = p.nodes[static_cast<size_t>(add)];
  if (a.op != rw::Op::Add || a.args.size() != 2 || p.nodes.size() != (relu ? 4u : 3u) + (q_scale != 0 ? 2u : 0u))
    return false;
  const rw::Node& x = p.nodes[static_cast<size_t>(a.args[0])];
  const rw::Node& y = p.nodes[static_cast<size_t>(a.args[1])];
  if (x.op != rw::Op::Input || y.op != rw::Op::Input || x.input == y.input) return false;
  for (const rw::Input& in : p.inputs)
    if (in.per_row || (in.period != 0 && in.period != p.rows) || in.stride != 0) return false;
  i = x.input, j = y.input;
  return true;
}

// The calls not marked removed, in order.
void drop(KernelPlan& plan, const std::vector<bool>& removed) {
  std::vector<KernelCall> kept;
  kept.reserve(plan.calls.size());
  for (size_t c = 0; c < plan.calls.size(); ++c)
    if (!removed[c]) kept.push_back(std::move(plan.calls[c]));
  plan.calls = std::move(kept);
}

// A gemm.s call whose output c can take a residual: whole [M, N] at offset 0 of its buffer, in bf16 or f32, with
// an epilogue that RESIDUAL combines with (not RELU: that is max before the add; not q, group_n, act_resident).
bool takes_residual(const KernelCall& call) {
  if (call.kind != KernelCall::Kind::Library || call.kernel != "gemm.s" || !call.tensors.count("c")) return false;
  const auto out = static_cast<isa::DType>(param_or(call, "OUT_DT", static_cast<int64_t>(isa::DType::F32)));
  if (out != isa::DType::BF16 && out != isa::DType::F32) return false;
  for (const char* p : {"RELU", "Q_SCALE", "Q_ONLY", "GROUP_N", "ACT_RESIDENT", "RESIDUAL", "C_GROUP", "BATCH"})
    if (param_or(call, p, 0) != 0) return false;
  auto off = call.offsets.find("c");
  return off == call.offsets.end() || off->second == 0;
}

}  // namespace

int fuse_residual_adds(KernelPlan& plan, const std::map<std::string, int64_t>& symbols) {
  int fused = 0;
  std::vector<bool> removed(plan.calls.size(), false);
  for (size_t a = 0; a < plan.calls.size(); ++a) {
    int in[2] = {-1, -1};
    bool relu = false;
    float q_scale = 0;
    if (!residual_add(plan.calls[a], in[0], in[1], relu, q_scale)) continue;
    const KernelCall& add = plan.calls[a];
    // The gemm.s call: the latest call before the Add that touches one of its inputs must be a gemm.s writing it.
    size_t g = a;
    int x = -1;  // which input the GEMM gives
    for (size_t c = a; c-- > 0;) {
      if (removed[c]) continue;
      for (int s = 0; s < 2 && x < 0; ++s)
        if (touches(plan.calls[c], add.row_inputs[static_cast<size_t>(s)])) g = c, x = s;
      if (x >= 0) break;
    }
    if (x < 0) continue;
    KernelCall& gemm = plan.calls[g];
    const int xb = add.row_inputs[static_cast<size_t>(x)], rb = add.row_inputs[static_cast<size_t>(1 - x)];
    const int ob = add.row_outputs[0], qb = q_scale != 0 ? add.row_outputs[1] : -1;
    if (!takes_residual(gemm) || gemm.tensors.at("c") != xb || xb == rb || ob == xb || ob == rb || qb == xb ||
        qb == rb || qb == ob)
      continue;
    // (a kernel's tensors may not overlap: r must not be one the GEMM already reads, as its a or b)
    if (std::any_of(gemm.tensors.begin(), gemm.tensors.end(),
                    [&](const auto& t) { return t.second == rb || t.second == ob || t.second == qb; }))
      continue;
    // the int8 copy: an int8 GEMM's (DEQUANT) whole q, which gemm_chip writes after the residual (not gemm.s)
    if (q_scale != 0 && (param_or(gemm, "DEQUANT", 0) == 0 || add.row_output_offs[1] != 0)) continue;
    const Buffer& xbuf = plan.buffers[static_cast<size_t>(xb)];
    const auto out = static_cast<isa::DType>(param_or(gemm, "OUT_DT", 0));
    const int64_t mn = param_or(gemm, "M", 0) * param_or(gemm, "N", 0);
    // x: an intermediate the GEMM writes whole and only the Add reads; r and the Add's output of the GEMM's type
    if (xbuf.kind != Buffer::Kind::Temp || xbuf.bytes() != static_cast<uint64_t>(mn) * isa::dtype_size(out) ||
        add.rows.rows * add.rows.cols != mn || add.row_input_offs[static_cast<size_t>(x)] != 0 ||
        add.rows.inputs[static_cast<size_t>(x)].dtype != out || add.rows.inputs[static_cast<size_t>(1 - x)].dtype != out ||
        add.rows.outputs[0].dtype != out)
      continue;
    bool alone = true;
    for (size_t c = 0; c < plan.calls.size() && alone; ++c)
      if (c != g && c != a && !removed[c] && touches(plan.calls[c], xb)) alone = false;  // another reader of x
    for (size_t c = g + 1; c < a && alone; ++c)
      if (!removed[c] && (touches(plan.calls[c], rb) || touches(plan.calls[c], ob) || (qb >= 0 && touches(plan.calls[c], qb))))
        alone = false;
    if (!alone) continue;
    if (q_scale != 0) {  // gemm_chip must be able to run it (it may not fit the chip's VMEM)
      KernelCall with_q = gemm;
      with_q.params["RESIDUAL"] = 1, with_q.params["Q_SCALE"] = isa::bits_from_f32(q_scale);
      try {
        (void)kernels::gemm_chip_estimate(gemm_chip_of(with_q, symbols), symbols);
      } catch (const std::invalid_argument&) {
        continue;
      }
      gemm.params["Q_SCALE"] = isa::bits_from_f32(q_scale);
      gemm.tensors["q"] = qb, gemm.offsets["q"] = 0;
      gemm.bytes += static_cast<double>(mn);  // q, written
    }
    gemm.params["RESIDUAL"] = 1;
    if (relu) gemm.params["RES_RELU"] = 1;
    gemm.tensors["c"] = ob, gemm.offsets["c"] = add.row_output_offs[0];
    gemm.tensors["r"] = rb, gemm.offsets["r"] = add.row_input_offs[static_cast<size_t>(1 - x)];
    // (the calls of the GEMM's node, e.g. a strided convolution's copy before it, take the new label too)
    const std::string label = gemm.label;
    for (size_t c = 0; c <= g; ++c)
      if (plan.calls[c].label == label) plan.calls[c].label = label + "+" + add.label;
    gemm.bytes += static_cast<double>(mn) * static_cast<double>(isa::dtype_size(out));  // r, read
    removed[a] = true;
    ++fused;
  }
  drop(plan, removed);
  return fused;
}

int fuse_activations(KernelPlan& plan, const std::map<std::string, int64_t>& symbols) {
  int fused = 0;
  std::vector<bool> removed(plan.calls.size(), false);
  for (size_t a = 0; a < plan.calls.size(); ++a) {
    const KernelCall& act = plan.calls[a];
    if (act.kind != KernelCall::Kind::Rowwise) continue;
    // The activation, and where the kernel also writes its result's int8 copy (an int8 model's GELU before the next
    // int8 matmul), that copy: the GEMM casts it from the stored result (q_scale, q), as the row-wise kernel does
    rw::Program one = act.rows;
    const float q_scale = int8_copy_of_first(one);
    int qb = -1;
    if (q_scale != 0) {  // the copy's Const and Mul, the program's last two nodes (so read by nothing else)
      const int mul = one.outputs[1].node;
      if (mul != static_cast<int>(one.nodes.size()) - 1 || one.nodes[static_cast<size_t>(mul)].args[1] != mul - 1 ||
          one.outputs[0].node >= mul - 1 || act.row_output_offs[1] != 0)
        continue;
      one.nodes.resize(one.nodes.size() - 2), one.outputs.resize(1);
      qb = act.row_outputs[1];
    }
    if (!kernels::rowwise::is_elementwise(one) || (one.inputs[0].period != 0 && one.inputs[0].period != one.rows) ||
        one.inputs[0].stride != 0 || act.row_input_offs[0] != 0)
      continue;
    const int xb = act.row_inputs[0], ob = act.row_outputs[0];
    size_t g = a;  // the latest call before it that touches x
    while (g-- > 0)
      if (!removed[g] && touches(plan.calls[g], xb)) break;
    if (g >= a) continue;
    KernelCall& gemm = plan.calls[g];
    if (gemm.kind != KernelCall::Kind::Library || gemm.kernel != "gemm.s" || !gemm.tensors.count("c") ||
        gemm.tensors.at("c") != xb || (gemm.offsets.count("c") && gemm.offsets.at("c") != 0) || xb == ob)
      continue;
    if (param_or(gemm, "OUT_DT", 0) != static_cast<int64_t>(isa::DType::F32)) continue;
    if (qb >= 0 && (param_or(gemm, "DEQUANT", 0) == 0 || param_or(gemm, "SCALE", 0) != 0 || qb == xb || qb == ob))
      continue;  // (gemm_chip's q: an int8 GEMM's, dequantised)
    bool plain = true;  // an epilogue act combines with
    for (const char* p : {"Q_SCALE", "Q_ONLY", "GROUP_N", "ACT_RESIDENT", "RESIDUAL", "ACT", "C_GROUP", "BATCH"})
      plain = plain && param_or(gemm, p, 0) == 0;
    const Buffer& xbuf = plan.buffers[static_cast<size_t>(xb)];
    const int64_t mn = param_or(gemm, "M", 0) * param_or(gemm, "N", 0);
    if (!plain || xbuf.kind != Buffer::Kind::Temp || xbuf.bytes() != static_cast<uint64_t>(mn) * 4 ||
        act.rows.rows * act.rows.cols != mn ||
        std::any_of(gemm.tensors.begin(), gemm.tensors.end(),
                    [&](const auto& t) { return t.second == ob || t.second == qb; }))
      continue;
    bool alone = true, value_read = plan.buffers[static_cast<size_t>(ob)].kind != Buffer::Kind::Temp;
    for (size_t c = 0; c < plan.calls.size() && alone; ++c) {
      if (c != g && c != a && !removed[c] && touches(plan.calls[c], xb)) alone = false;  // another reader of x
      if (c != a && !removed[c] && touches(plan.calls[c], ob)) value_read = true;
    }
    for (size_t c = g + 1; c < a && alone; ++c)
      if (!removed[c] && (touches(plan.calls[c], ob) || (qb >= 0 && touches(plan.calls[c], qb)))) alone = false;
    if (!alone) continue;
    const isa::DType out = one.outputs[0].dtype;
    KernelCall fused_call = gemm;
    fused_call.params["ACT"] = 1, fused_call.params["OUT_DT"] = static_cast<int64_t>(out);
    fused_call.rows = one;
    // The int8 copy; alone (Q_ONLY, no c) where only the int8 matmuls after it read the value
    const bool q_only = qb >= 0 && !value_read;
    if (qb >= 0) fused_call.params["Q_SCALE"] = isa::bits_from_f32(q_scale);
    if (q_only) fused_call.params["Q_ONLY"] = 1;
    try {  // gemm_chip must be able to run it (it may not fit the chip's VMEM)
      (void)kernels::gemm_chip_estimate(gemm_chip_of(fused_call, symbols), symbols);
    } catch (const std::invalid_argument&) {
      continue;
    }
    fused_call.tensors["c"] = ob, fused_call.offsets["c"] = act.row_output_offs[0];
    fused_call.bytes -= static_cast<double>(mn) * static_cast<double>(4 - isa::dtype_size(out));  // c in out's type
    if (qb >= 0) fused_call.tensors["q"] = qb, fused_call.offsets["q"] = 0, fused_call.bytes += static_cast<double>(mn);
    if (q_only) {
      fused_call.tensors.erase("c"), fused_call.offsets.erase("c");
      fused_call.bytes -= static_cast<double>(mn) * static_cast<double>(isa::dtype_size(out));
    }
    const std::string label = gemm.label;
    for (size_t c = 0; c <= g; ++c)
      if (plan.calls[c].label == label) plan.calls[c].label = label + "+" + act.label;
    fused_call.label = plan.calls[g].label;
    plan.calls[g] = std::move(fused_call);
    removed[a] = true;
    ++fused;
  }
  drop(plan, removed);
  return fused;
}

}  // namespace tpusim::compiler
