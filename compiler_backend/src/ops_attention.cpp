// Fused attention: the node group that torch exports for scaled dot-product attention,
//   MatMul(Q, K^T) -> [Div or Mul by a constant scalar] -> [Add of a mask, or Where(constant mask, fill, .)]
//   -> Softmax(last axis) -> MatMul(., V) -> [Transpose(0, 2, 1, 3)]
// (with any Casts to float of float values between the steps: Hugging Face's softmax(dtype=float32).to(dtype) in a
// float32 model) with Q [B, H, Sq, D], K^T [B, H, D, Sk], V [B, H, Sk, D], becomes one call of the whole-chip
// attention kernel (kernels/attention_chip.h) for every batch and head: online softmax, the scores never leave the
// chip. Q, K and V are read where they are: a Transpose(0, 2, 1, 3) of a [B, S, H, D] projection is read through it
// (strides), as is K^T as a Transpose(0, 2, 3, 1) of [B, Sk, H, D] or a swap of the last two axes of [B, H, Sk, D];
// the output is written as [B, Sq, H, D] when a Transpose(0, 2, 1, 3) follows, else as [B, H, Sq, D]. K and V
// repeated from fewer key/value heads as transformers' repeat_kv does (Unsqueeze, Expand, Reshape: grouped-query
// attention) are read unrepeated, the kernel's kv_heads. 3-D operands, [N, S, D] as nn.MultiheadAttention's
// batched matmuls make them, are one batch of N heads (the Transposes above without their first axis).
// Masks the kernel takes: a constant causal mask (0, or a fill of -1e4 or less, taken as -inf, above the diagonal;
// the fill's exp is 0 in f32 as -inf's is, unless a row's largest unmasked score is below fill + 88), and a mask
// that is one bias per key (and batch), [B or 1, 1, 1, Sk], added to the scaled scores (BERT's padding mask). Any
// other group keeps the per-head lowering (ops_matmul.cpp, lower_rowwise.cpp), and the compile report says why
// (a "note" region on its first kernel).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "lowering.h"
#include "tpusim/kernels/attention_chip.h"

namespace tpusim::compiler {

struct AttentionGroup {
  kernels::AttentionChip a;
  int q = -1, k = -1, v = -1, bias = -1;  // the values read (bias: the key bias, or -1)
  int out = -1;                           // the value written
  std::string label;
  double flops = 0, bytes = 0;
};

namespace {

// The node reading value v, where exactly one does and v is no graph output; else -1.
int single_user(const Lowering& L, int v) {
  if (v < 0 || L.is_output_[v] || L.users_[v].size() != 1) return -1;
  return L.users_[v][0];
}

const ir::Node* producer(const Lowering& L, int v) {
  const int p = L.val(v).producer;
  return p >= 0 ? &L.g_.nodes[p] : nullptr;
}

bool perm_is(const ir::Node& t, const std::vector<int64_t>& perm) {
  auto it = t.attrs.find("perm");
  return t.op == "Transpose" && it != t.attrs.end() && it->second.ints == perm;
}

// The 4-D permutation perm4 on a value of `rank` 4, or on one of rank 3 taken as [1, ...] (perm4 keeps axis 0).
bool perm_is(const ir::Node& t, size_t rank, const std::vector<int64_t>& perm4) {
  if (rank == 4) return perm_is(t, perm4);
  if (rank != 3 || perm4[0] != 0) return false;
  return perm_is(t, {perm4[1] - 1, perm4[2] - 1, perm4[3] - 1});
}

bool scalar_const(const Lowering& L, int v) { return L.val(v).is_const && L.val(v).elements() == 1; }

// A Cast to float of a float value: nothing to compute.
bool identity_cast(const Lowering& L, const ir::Node& n) {
  return n.op == "Cast" && n.inputs.size() == 1 && n.attr_int("to", 0) == ir::kFloat &&
         L.val(n.inputs[0]).elem_type == ir::kFloat;
}

// transformers' repeat_kv of x [B, KV, S, D]: Unsqueeze to [B, KV, 1, S, D], Expand to [B, KV, R, S, D], Reshape
// to [B, KV * R, S, D], so that head h reads x's head h / R (the kernel's kv_heads). The value v is the Reshape's
// output and `reader` the group's node that reads it (-1: one outside the group does too). gone: the chain's
// nodes that nothing else reads, from the Reshape up (the group makes them unneeded); reader_of_x: the Unsqueeze
// when all three go, else -1.
struct Repeat {
  int x = -1, reader_of_x = -1;
  int64_t kv = 0;
  std::vector<int> gone;
};

Repeat repeat_kv_source(const Lowering& L, int v, int reader) {
  Repeat r;
  const ir::Node* rs = producer(L, v);
  if (!rs || rs->op != "Reshape") return r;
  const ir::Node* ex = producer(L, rs->inputs[0]);
  if (!ex || ex->op != "Expand") return r;
  const ir::Node* us = producer(L, ex->inputs[0]);
  if (!us || us->op != "Unsqueeze") return r;
  const int x = us->inputs[0];
  const Shape xs = L.shape(x), es = L.shape(ex->outputs[0]);
  if (xs.size() != 4 || L.val(x).is_const || es.size() != 5) return r;
  const int64_t B = xs[0], KV = xs[1], S = xs[2], D = xs[3], R = es[2];
  // An Unsqueeze to [B, KV, 1, S, D] keeps the elements' order whatever its axis; the Expand repeats that axis only.
  if (L.shape(us->outputs[0]) != Shape{B, KV, 1, S, D} || es != Shape{B, KV, R, S, D} ||
      L.shape(v) != Shape{B, KV * R, S, D})
    return r;
  r.x = x, r.kv = KV;
  int val = v, next = reader;
  for (const ir::Node* n : {rs, ex, us}) {
    if (next < 0 || single_user(L, val) != next) break;
    next = static_cast<int>(n - L.g_.nodes.data());
    r.gone.push_back(next);
    val = n->inputs[0];
  }
  if (r.gone.size() == 3) r.reader_of_x = r.gone.back();
  return r;
}

// A masked entry of an additive mask or a Where's fill: -inf, or finite and -1e4 or less.
bool masks(float x) { return x <= -1e4f; }

// What is known of a group: fused, not an attention group at all, or one that stays per head (and why).
struct Match {
  enum { None, Fused, Kept } kind = None;
  std::string why;
};

Match kept(std::string why) { return Match{Match::Kept, std::move(why)}; }

// The group whose first MatMul is node `i`: fills `g` and the nodes it computes (`members`, the last one where the
// call goes) when fused.
Match match(Lowering& L, int i, AttentionGroup& g, std::vector<int>& members) {
  const ir::Graph& G = L.g_;
  const ir::Node& mm = G.nodes[i];
  if (mm.op != "MatMul" || mm.inputs.size() != 2) return {};
  const int qv = mm.inputs[0], ktv = mm.inputs[1];
  if (L.val(qv).is_const || L.val(ktv).is_const) return {};
  // The chain, each step the single reader of the one before (identity Casts stepped over).
  int cur = mm.outputs[0];
  int at = single_user(L, cur);
  std::vector<int> casts;
  auto skip_casts = [&] {
    while (at >= 0 && identity_cast(L, G.nodes[at])) casts.push_back(at), cur = G.nodes[at].outputs[0], at = single_user(L, cur);
  };
  skip_casts();
  const ir::Node* scale_node = nullptr;
  const ir::Node* mask_node = nullptr;
  int scale_x = -1, mask_x = -1;  // the scores as the scale and the mask read them
  if (at >= 0 && (G.nodes[at].op == "Div" || G.nodes[at].op == "Mul")) {
    const ir::Node& n = G.nodes[at];
    const bool first = n.inputs[0] == cur;
    if (scalar_const(L, n.inputs[first ? 1 : 0]) && (first || n.op == "Mul")) {
      scale_node = &n, scale_x = cur, cur = n.outputs[0], at = single_user(L, cur);
      skip_casts();
    }
  }
  if (at >= 0 && (G.nodes[at].op == "Add" || G.nodes[at].op == "Where")) {
    mask_node = &G.nodes[at], mask_x = cur, cur = G.nodes[at].outputs[0], at = single_user(L, cur);
    skip_casts();
  }
  if (at < 0 || G.nodes[at].op != "Softmax") return {};
  const int sm_at = at;
  const ir::Node& sm = G.nodes[sm_at];
  if (sm.attr_int("axis", -1) != static_cast<int64_t>(L.shape(sm.inputs[0]).size()) - 1) return {};
  cur = sm.outputs[0];
  at = single_user(L, cur);
  skip_casts();
  const int p = cur, at2 = at;
  if (at2 < 0 || G.nodes[at2].op != "MatMul" || G.nodes[at2].inputs[0] != p) return {};
  const ir::Node& mm2 = G.nodes[at2];
  const int vv = mm2.inputs[1];
  if (L.val(vv).is_const) return {};
  // An attention group: from here on, what the kernel cannot take is said.
  const Shape qs0 = L.shape(qv), kts0 = L.shape(ktv), vs0 = L.shape(vv);
  const size_t rank = qs0.size();
  if ((rank != 4 && rank != 3) || kts0.size() != rank || vs0.size() != rank)
    return kept("Q, K^T and V are not 4-D [batch, heads, seq, head_dim] or 3-D [heads, seq, head_dim] (" +
                ir::shape_str(qs0) + ", " + ir::shape_str(kts0) + ", " + ir::shape_str(vs0) + ")");
  auto as4 = [](Shape s) {  // 3-D: one batch
    if (s.size() == 3) s.insert(s.begin(), 1);
    return s;
  };
  const Shape qs = as4(qs0), kts = as4(kts0), vs = as4(vs0);
  const int64_t B = qs[0], H = qs[1], Sq = qs[2], D = qs[3], Sk = kts[3];
  if (kts[0] != B || kts[1] != H || vs[0] != B || vs[1] != H)
    return kept("Q, K^T and V broadcast their batch or head dimensions (" + ir::shape_str(qs0) + ", " +
                ir::shape_str(kts0) + ", " + ir::shape_str(vs0) + ")");
  if (vs[3] != D) return kept("V's head_dim " + std::to_string(vs[3]) + " is not Q's " + std::to_string(D));
  if (L.val(qv).elem_type != ir::kFloat) return kept("the operands are not floating point");
  kernels::AttentionChip& a = g.a;
  a.batch = B, a.seq = Sq, a.seq_k = Sk, a.heads = a.kv_heads = H, a.head_dim = D;
  const kernels::AttentionStrides bhsd_q{H * Sq * D, D, Sq * D}, bhsd_k{H * Sk * D, D, Sk * D};
  // Q and V: read through a Transpose(0, 2, 1, 3) of [B, S, H, D], else as they are ([B, H, S, D]).
  members.clear();
  members.insert(members.end(), casts.begin(), casts.end());
  auto through = [&](int v, const kernels::AttentionStrides& bhsd, kernels::AttentionStrides& st, int reader) {
    const ir::Node* t = producer(L, v);
    if (t && perm_is(*t, L.shape(v).size(), {0, 2, 1, 3}) && !L.val(t->inputs[0]).is_const) {
      st = {};  // the default [B, S, H, D]
      if (reader >= 0 && single_user(L, v) == reader) members.push_back(L.val(v).producer);
      return t->inputs[0];
    }
    st = bhsd;
    return v;
  };
  // K^T: a Transpose of K with head_dim contiguous.
  const ir::Node* kt = producer(L, ktv);
  if (!kt || L.val(kt->inputs[0]).is_const ||
      !(perm_is(*kt, rank, {0, 2, 3, 1}) || perm_is(*kt, rank, {0, 1, 3, 2})))
    return kept("K^T is not a Transpose of K ([B, Sk, H, D] or [B, H, Sk, D]), so its head_dim is not contiguous");
  const bool kt_gone = single_user(L, ktv) == i;
  // K and V repeated from KV heads (repeat_kv): read x, each query head h its head h / (H / KV).
  const Repeat rk = perm_is(*kt, rank, {0, 1, 3, 2}) ? repeat_kv_source(L, kt->inputs[0], kt_gone ? L.val(ktv).producer : -1)
                                                     : Repeat{};
  const Repeat rv = repeat_kv_source(L, vv, at2);
  const bool grouped = rk.x >= 0 && rv.x >= 0 && rk.kv == rv.kv;
  const int64_t KV = grouped ? rk.kv : H;
  a.kv_heads = KV;
  const kernels::AttentionStrides bhsd_kv{KV * Sk * D, D, Sk * D};
  g.q = through(qv, bhsd_q, a.q_strides, i);
  if (grouped) {
    g.v = through(rv.x, bhsd_kv, a.v_strides, rv.reader_of_x);
    g.k = through(rk.x, bhsd_kv, a.k_strides, rk.reader_of_x);
    members.insert(members.end(), rv.gone.begin(), rv.gone.end());
    members.insert(members.end(), rk.gone.begin(), rk.gone.end());
  } else {
    g.v = through(vv, bhsd_k, a.v_strides, at2);
    g.k = kt->inputs[0];
    a.k_strides = perm_is(*kt, rank, {0, 2, 3, 1}) ? kernels::AttentionStrides{} : bhsd_k;
  }
  if (kt_gone) members.push_back(L.val(ktv).producer);
  // The scale.
  a.scale = 1.0f;
  if (scale_node) {
    const ir::Node& n = *scale_node;
    const float c = const_floats(L.val(n.inputs[n.inputs[0] == scale_x ? 1 : 0]))[0];
    a.scale = n.op == "Div" ? static_cast<float>(1.0 / static_cast<double>(c)) : c;
    if (!(a.scale > 0) || !std::isfinite(a.scale))
      return kept("the scale " + num(a.scale) + " is not finite and positive");
  }
  // The mask.
  if (mask_node) {
    const ir::Node& n = *mask_node;
    const int x = mask_x;
    // A constant [.., Sq, Sk] mask whose every [Sq, Sk] slice is causal (leading sizes 1, or the causal matrix
    // expanded over the batch as transformers' _make_causal_mask does): kind(entry) is 1 where masked, 0 where kept.
    auto causal = [&](const std::vector<float>& m, const Shape& s, const std::function<int(float)>& kind) {
      if (s.size() < 2 || s[s.size() - 2] != Sq || s.back() != Sk) return false;
      if (Sq != Sk || m.size() != static_cast<size_t>(prod(s))) return false;
      for (size_t base = 0; base < m.size(); base += static_cast<size_t>(Sq * Sk))
        for (int64_t r = 0; r < Sq; ++r)
          for (int64_t c = 0; c < Sk; ++c)
            if (kind(m[base + static_cast<size_t>(r * Sk + c)]) != (c > r ? 1 : 0)) return false;
      return true;
    };
    if (n.op == "Where") {
      const int cond = n.inputs[0], xi = n.inputs[1] == x ? 1 : 2, fill = n.inputs[3 - xi];
      if (n.inputs[xi] != x) return kept("the Where does not select the scores");
      if (!L.val(cond).is_const)
        return kept("the Where's mask is computed from the model's inputs (data-dependent); the kernel takes a "
                    "constant causal mask or a bias per key");
      if (!scalar_const(L, fill) || !masks(const_floats(L.val(fill))[0]))
        return kept("the Where's fill is not one constant of -1e4 or less");
      // entry selects the fill where the condition is (xi == 2) or is not (xi == 1) true
      if (!causal(const_floats(L.val(cond)), L.shape(cond),
                  [&](float c) { return (c != 0) == (xi == 2) ? 1 : 0; }))
        return kept("the Where's constant mask is not causal (keys after the query masked, all others kept)");
      a.causal = true;
    } else {
      const int m = n.inputs[0] == x ? n.inputs[1] : n.inputs[0];
      Shape ms = L.shape(m);
      while (ms.size() < 4) ms.insert(ms.begin(), 1);
      if (L.val(m).is_const && causal(const_floats(L.val(m)), L.shape(m),
                                      [](float e) { return masks(e) ? 1 : e == 0 ? 0 : -1; })) {
        a.causal = true;
      } else if (ms.size() == 4 && (ms[0] == B || ms[0] == 1) && ms[1] == 1 && ms[2] == 1 && ms[3] == Sk &&
                 L.val(m).elem_type == ir::kFloat) {
        a.key_bias = true, a.key_bias_stride = ms[0] == 1 ? 0 : Sk;
        g.bias = m;
      } else {
        return kept("the mask " + ir::shape_str(L.shape(m)) +
                    " is neither a constant causal mask nor one bias per key [B or 1, 1, 1, " + std::to_string(Sk) +
                    "]");
      }
    }
    members.push_back(static_cast<int>(&n - G.nodes.data()));
  }
  // The output: [B, Sq, H, D] through a following Transpose(0, 2, 1, 3), else [B, H, Sq, D].
  g.out = mm2.outputs[0];
  int last = at2;  // the group's last node
  if (const int after = single_user(L, g.out); after >= 0 && perm_is(G.nodes[after], rank, {0, 2, 1, 3})) {
    g.out = G.nodes[after].outputs[0];
    a.o_strides = {};
    members.push_back(after);
    last = after;
  } else {
    a.o_strides = bhsd_q;
  }
  const DType odt = L.storage_type(g.out) == DType::F32 || L.is_output_[g.out] ? DType::F32 : DType::BF16;
  a.out = odt;
  // Short queries (a decoder's step) on the vector unit: where each kv head's K and V meet at most kVectorRows
  // query rows (its query heads x the queries), a matrix unit would load them as weights for a few rows; the
  // vector unit reads them once (attention_chip.h, vector_unit). A shape rule, not the chip's estimate, so that
  // every chip computes the same bits; the matrix units where the vector kernel does not fit VMEM.
  constexpr int64_t kVectorRows = 8;
  if (Sq * (H / a.kv_heads) <= kVectorRows) {
    a.vector_unit = true;
    try {
      kernels::attention_chip_plan(a, L.sym_);
    } catch (const std::invalid_argument&) {
      a.vector_unit = false;
    }
  }
  try {
    if (!a.vector_unit) {
      // The key block one core of one matrix unit would choose: the results depend on it (attention_chip.h), so
      // that the whole chip computes the same bits as one unit does.
      kernels::AttentionChip one = a;
      one.cores = 1, one.mxus = 1;
      a.block_k = kernels::attention_chip_plan(one, L.sym_).bc;
    }
    const kernels::AttentionPlan plan = kernels::attention_chip_plan(a, L.sym_);
    // K and V: each key block an item visits (the vector unit's items take all keys of their kv heads once)
    const double kv = a.vector_unit ? static_cast<double>(B * a.kv_heads * Sk * D * 2 * 2)
                                    : static_cast<double>(plan.blocks * plan.bc * D * 2 * 2);
    g.bytes = static_cast<double>(B * H * Sq * D * 2) + kv + static_cast<double>(B * H * Sq * D * isa::dtype_size(odt)) +
              (a.key_bias ? static_cast<double>(plan.items * Sk * 4) : 0.0);
  } catch (const std::invalid_argument& e) {
    return kept(e.what());
  }
  g.flops = 4.0 * static_cast<double>(B * H) * static_cast<double>(Sq * Sk) * static_cast<double>(D);
  for (int n : {i, static_cast<int>(scale_node ? scale_node - G.nodes.data() : -1), sm_at})
    if (n >= 0) members.push_back(n);
  // The call goes where the last MatMul was: every input of the group is computed by then. (The output Transpose
  // after it is marked done like the others.)
  members.push_back(at2);
  g.label = mm.name + "+...+" + G.nodes[last].name;
  return Match{Match::Fused, {}};
}

}  // namespace

void Lowering::find_attention() {
  for (size_t i = 0; i < g_.nodes.size(); ++i) {
    if (done_[i]) continue;
    auto group = std::make_shared<AttentionGroup>();
    std::vector<int> members;
    const Match m = match(*this, static_cast<int>(i), *group, members);
    if (m.kind == Match::Kept) attention_notes_[static_cast<int>(i)] = "attention not fused: " + m.why;
    if (m.kind != Match::Fused) continue;
    const int anchor = members.back();
    for (int n : members)
      if (n != anchor) done_[n] = true;
    attention_[anchor] = std::move(group);
  }
}

void lower_attention(Lowering& L, const AttentionGroup& g) {
  KernelCall call;
  call.kind = KernelCall::Kind::Attention;
  call.label = g.label;
  call.kernel = "attention_chip";
  call.attention = g.a;
  const Stored q = L.get(g.q, DType::BF16, false), k = L.get(g.k, DType::BF16, false),
               v = L.get(g.v, DType::BF16, false);
  const Stored o = L.destination(g.out, g.a.out);
  if (o.dtype != g.a.out) throw LoweringIssue("internal: the attention output is " + std::string(isa::dtype_name(o.dtype)));
  call.tensors = {{"q", q.buf}, {"k", k.buf}, {"v", v.buf}, {"o", o.buf}};
  call.offsets = {{"q", q.off}, {"k", k.off}, {"v", v.off}, {"o", o.off}};
  if (g.bias >= 0) {
    const Stored b = L.get(g.bias, DType::F32, false);
    call.tensors["kb"] = b.buf, call.offsets["kb"] = b.off;
  }
  call.flops = g.flops, call.bytes = g.bytes;
  L.plan_.calls.push_back(std::move(call));
}

}  // namespace tpusim::compiler
