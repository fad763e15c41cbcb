// Matrix products: MatMul (N-D, broadcast batch dimensions) and Gemm. With a constant right operand: one gemm.s
// call in bf16 (weights tiled at compile time, B_TILED), a following constant bias Add and Relu fused into its
// epilogue; a matrix-vector product (one row) on the vector unit instead; int8 through lower_quant.cpp. Both
// operands activations (attention): one gemm.s call per batch index, a right operand that is a Transpose of the
// last two axes read transposed (TRANS_B).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>
#include <cstring>
#include <functional>

#include "fold.h"
#include "infer.h"
#include "lowering.h"

namespace tpusim::compiler {
namespace {

// ---- shape inference -----------------------------------------------------------------------------------------

void infer_matmul(InferCtx& c) {
  same_types(c);
  Shape a = c.shape(0), b = c.shape(1);
  if (a.empty() || b.empty()) fail(c.n, "operands must not be scalars");
  bool a1 = a.size() == 1, b1 = b.size() == 1;
  if (a1) a.insert(a.begin(), 1);
  if (b1) b.push_back(1);
  int64_t m = a[a.size() - 2], k = a.back(), k2 = b[b.size() - 2], nn = b.back();
  if (k != k2)
    fail(c.n, "inner dimensions differ: " + ir::shape_str(c.shape(0)) + " x " + ir::shape_str(c.shape(1)));
  Shape batch = broadcast(c.n, Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2));
  if (!a1) batch.push_back(m);
  if (!b1) batch.push_back(nn);
  c.out(0, c.type(0), batch);
}

// Gemm: alpha, beta, transA, transB are recorded as attributes; the lowering decides which it supports.
void infer_gemm(InferCtx& c) {
  same_types(c);
  int64_t ta = c.ai("transA", 0), tb = c.ai("transB", 0);
  if (ta != 0 && ta != 1) fail(c.n, "transA=" + std::to_string(ta) + " is not supported");
  if (tb != 0 && tb != 1) fail(c.n, "transB=" + std::to_string(tb) + " is not supported");
  const Shape a = c.shape(0), b = c.shape(1);
  if (a.size() != 2 || b.size() != 2)
    fail(c.n, "A and B must be 2-D, got " + ir::shape_str(a) + " and " + ir::shape_str(b));
  int64_t m = ta ? a[1] : a[0], k = ta ? a[0] : a[1];
  int64_t k2 = tb ? b[1] : b[0], cols = tb ? b[0] : b[1];
  if (k != k2)
    fail(c.n, "inner dimensions differ: A is " + ir::shape_str(a) + ", B is " + ir::shape_str(b) + " (transA=" +
                  std::to_string(ta) + ", transB=" + std::to_string(tb) + ")");
  Shape out{m, cols};
  if (c.has(2) && broadcast(c.n, out, c.shape(2)) != out)
    fail(c.n, "C of shape " + ir::shape_str(c.shape(2)) + " does not broadcast to " + ir::shape_str(out));
  c.out(0, c.type(0), out);
}

// Einsum: the equation parsed into one letter string per operand and the output ("..." replaced by letters of its
// own, right-aligned as numpy broadcasts them), with the size of each letter. Implicit output (no "->"): the
// letters that appear once, in alphabetical order, after the ellipsis ones.
struct Equation {
  std::vector<std::string> in;
  std::string out;
  std::map<char, int64_t> size;
};

Equation parse_einsum(const ir::Node& n, const std::vector<Shape>& shapes) {
  auto it = n.attrs.find("equation");
  if (it == n.attrs.end()) fail(n, "attribute 'equation' is required");
  std::string eq;
  for (char ch : it->second.s)
    if (ch != ' ') eq += ch;
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t b = 0;;) {
    const size_t e = lhs.find(',', b);
    terms.push_back(lhs.substr(b, e == std::string::npos ? std::string::npos : e - b));
    if (e == std::string::npos) break;
    b = e + 1;
  }
  if (terms.size() != shapes.size())
    fail(n, "equation '" + eq + "' names " + std::to_string(terms.size()) + (terms.size() == 1 ? " operand" : " operands") +
                ", the node has " + std::to_string(shapes.size()) + (shapes.size() == 1 ? " input" : " inputs"));
  std::string used;
  for (char ch : eq)
    if (std::isalpha(static_cast<unsigned char>(ch))) used += ch;
  std::string fresh;  // letters for the ellipsis dimensions, unused by the equation
  for (char ch = 'A'; ch <= 'z'; ++ch)
    if (std::isalpha(static_cast<unsigned char>(ch)) && used.find(ch) == std::string::npos) fresh += ch;
  Equation r;
  size_t ell = 0;  // the most ellipsis dimensions of an operand
  for (size_t k = 0; k < terms.size(); ++k) {
    std::string t = terms[k];
    const size_t dots = t.find("...");
    const int64_t named = static_cast<int64_t>(t.size()) - (dots == std::string::npos ? 0 : 3);
    const int64_t rank = static_cast<int64_t>(shapes[k].size());
    for (size_t i = 0; i < t.size(); ++i)
      if (!std::isalpha(static_cast<unsigned char>(t[i])) && !(dots != std::string::npos && i >= dots && i < dots + 3))
        fail(n, "equation '" + eq + "': operand " + std::to_string(k) + " ('" + terms[k] + "') is not letters and one '...'");
    if (dots != std::string::npos) {
      if (rank < named || t.find("...", dots + 3) != std::string::npos)
        fail(n, "equation '" + eq + "': operand " + std::to_string(k) + " ('" + terms[k] + "') does not fit its shape " +
                    ir::shape_str(shapes[k]));
      const size_t e = static_cast<size_t>(rank - named);
      ell = std::max(ell, e);
      if (ell > fresh.size()) fail(n, "equation '" + eq + "': too many dimensions under '...'");
      t = t.substr(0, dots) + fresh.substr(fresh.size() - e) + t.substr(dots + 3);  // right-aligned
    }
    if (static_cast<int64_t>(t.size()) != rank)
      fail(n, "equation '" + eq + "': operand " + std::to_string(k) + " ('" + terms[k] + "') has " +
                  std::to_string(t.size()) + " indices, its input " + ir::shape_str(shapes[k]) + " rank " +
                  std::to_string(rank));
    for (size_t i = 0; i < t.size(); ++i) {
      if (t.find(t[i]) != i)
        fail(n, "equation '" + eq + "': index '" + std::string(1, t[i]) + "' repeats in operand " + std::to_string(k) +
                    " (a diagonal), which is not supported");
      auto [at, added] = r.size.emplace(t[i], shapes[k][i]);
      if (!added && at->second != shapes[k][i])
        fail(n, "equation '" + eq + "': index '" + std::string(1, t[i]) + "' has sizes " + std::to_string(at->second) +
                    " and " + std::to_string(shapes[k][i]) + " (broadcasting one of size 1 is not supported)");
    }
    r.in.push_back(t);
  }
  const std::string ellipsis = fresh.substr(fresh.size() - ell);
  if (arrow == std::string::npos) {
    r.out = ellipsis;
    std::string once;
    for (const auto& [ch, sz] : r.size) {
      int count = 0;
      for (const std::string& t : r.in) count += static_cast<int>(std::count(t.begin(), t.end(), ch));
      if (count == 1 && ellipsis.find(ch) == std::string::npos) once += ch;
    }
    std::sort(once.begin(), once.end());
    r.out += once;
  } else {
    std::string o = eq.substr(arrow + 2);
    if (const size_t dots = o.find("..."); dots != std::string::npos) o = o.substr(0, dots) + ellipsis + o.substr(dots + 3);
    for (size_t i = 0; i < o.size(); ++i) {
      if (!std::isalpha(static_cast<unsigned char>(o[i])))
        fail(n, "equation '" + eq + "': the output is not letters and one '...'");
      if (!r.size.count(o[i])) fail(n, "equation '" + eq + "': output index '" + std::string(1, o[i]) + "' is in no operand");
      if (o.find(o[i]) != i) fail(n, "equation '" + eq + "': output index '" + std::string(1, o[i]) + "' repeats");
    }
    r.out = o;
  }
  return r;
}

void infer_einsum(InferCtx& c) {
  same_types(c);
  std::vector<Shape> shapes;
  for (size_t k = 0; k < c.ninputs(); ++k) shapes.push_back(c.shape(k));
  const Equation e = parse_einsum(c.n, shapes);
  Shape out;
  for (char ch : e.out) out.push_back(e.size.at(ch));
  c.out(0, c.type(0), out);
}

// Einsum as the operators the lowering has: operands contracted left to right, two at a time. In each pair, an
// index in one operand only that no later operand or the output needs is summed first (ReduceSum); with indices
// to contract, both are transposed and reshaped to [batch..., M, K] and [batch..., K, N] (batch: indices of both
// and of the result; M, N: of one and the result; K: of both only) for one MatMul, reshaped and transposed to the
// result's order after; without, it is a broadcasting Mul of the two transposed to the result's order; with only
// batch and contracted indices (batched dot products), that Mul and a ReduceSum over the contracted ones. A single
// operand is summed over what the output lacks and transposed ("bij->bi", "ij->ji"). So "bhqd,bhkd->bhqk" is a
// Transpose of the last two axes and a MatMul (which reads it transposed), "bij,jk->bik" one MatMul.
std::vector<ir::Node> expand_einsum(ir::Graph& g, const ir::Node& n) {
  std::vector<Shape> shapes;
  for (int v : n.inputs) shapes.push_back(g.values[v].shape());
  const Equation eq = parse_einsum(n, shapes);
  std::vector<ir::Node> nodes;
  const std::string base = n.name;
  auto node = [&](const std::string& op, const std::vector<int>& ins, int out, const std::string& what) {
    ir::Node m;
    m.op = op;
    m.name = base + "/" + what + std::to_string(nodes.size());
    m.inputs = ins;
    m.outputs = {out >= 0 ? out : g.fresh_value(m.name + ":0")};
    nodes.push_back(m);
    return nodes.back().outputs[0];
  };
  auto sizes = [&](const std::string& letters) {
    Shape s;
    for (char ch : letters) s.push_back(eq.size.at(ch));
    return s;
  };
  auto size_of = [&](const std::string& letters) { return prod(sizes(letters)); };
  // v holds indices `have`; returns a value holding `want` (a permutation of them).
  auto transpose = [&](int v, const std::string& have, const std::string& want) {
    if (have == want) return v;
    std::vector<int64_t> perm;
    for (char ch : want) perm.push_back(static_cast<int64_t>(have.find(ch)));
    const int t = node("Transpose", {v}, -1, "transpose");
    ir::Attr a;
    a.kind = ir::Attr::Kind::Ints;
    a.ints = perm;
    nodes.back().attrs["perm"] = a;
    return t;
  };
  auto reshape = [&](int v, const Shape& from, const Shape& to) {
    if (from == to) return v;
    return node("Reshape", {v, g.int_constant(base + "/shape", to)}, -1, "reshape");
  };
  auto sum = [&](int v, std::string& have, const std::string& keep) {
    std::vector<int64_t> axes;
    std::string kept;
    for (size_t i = 0; i < have.size(); ++i) {
      if (keep.find(have[i]) == std::string::npos) axes.push_back(static_cast<int64_t>(i));
      else kept += have[i];
    }
    if (axes.empty()) return v;
    const int r = node("ReduceSum", {v, g.int_constant(base + "/axes", axes)}, -1, "sum");
    ir::Attr k;
    k.kind = ir::Attr::Kind::Int;
    k.i = 0;
    nodes.back().attrs["keepdims"] = k;
    have = kept;
    return r;
  };
  auto in = [](char ch, const std::string& s) { return s.find(ch) != std::string::npos; };
  int cur = n.inputs[0];
  std::string have = eq.in[0];
  for (size_t k = 1; k < eq.in.size(); ++k) {
    std::string later = eq.out;  // what the output and the operands after this pair need
    for (size_t j = k + 1; j < eq.in.size(); ++j) later += eq.in[j];
    std::string la = have, lb = eq.in[k];
    int a = sum(cur, la, later + lb), b = sum(n.inputs[k], lb, later + la);
    std::string batch, m, kk, nn;  // result order: batch, m, n
    for (char ch : la) {
      if (in(ch, lb) && in(ch, later)) batch += ch;
      else if (in(ch, lb)) kk += ch;
      else m += ch;
    }
    for (char ch : lb)
      if (!in(ch, la)) nn += ch;
    // Each group in the order the output (then the later operands) has them, so that no transpose is left where
    // the output's order allows it.
    for (std::string* group : {&batch, &m, &nn})
      std::stable_sort(group->begin(), group->end(), [&](char x, char y) { return later.find(x) < later.find(y); });
    std::string result = batch + m + nn;
    const bool last = k + 1 == eq.in.size();
    // Without indices to contract, a broadcasting product in the result's order; with only batch and contracted
    // indices (batched dot products), the product over batch + contracted, summed over the contracted ones.
    auto spread = [&](int v, const std::string& l, const std::string& to) {
      std::string order;
      Shape s;
      for (char ch : to)
        if (in(ch, l)) order += ch, s.push_back(eq.size.at(ch));
        else s.push_back(1);
      return reshape(transpose(v, l, order), sizes(order), s);
    };
    if (kk.empty()) {
      std::sort(result.begin(), result.end(), [&](char x, char y) { return later.find(x) < later.find(y); });
      cur = node("Mul", {spread(a, la, result), spread(b, lb, result)}, last && result == eq.out ? n.outputs[0] : -1,
                 "mul");
    } else if (m.empty() && nn.empty()) {
      std::string prod_order = batch + kk;
      cur = node("Mul", {spread(a, la, prod_order), spread(b, lb, prod_order)}, -1, "mul");
      cur = sum(cur, prod_order, batch);
    } else {
      const Shape bs = sizes(batch);
      Shape as = bs, bsh = bs, os = bs;
      const int64_t M = size_of(m), K = size_of(kk), N = size_of(nn);
      as.push_back(M), as.push_back(K);
      bsh.push_back(K), bsh.push_back(N);
      if (batch.empty() && !m.empty()) {  // [m..., K]: MatMul takes the leading indices as they are
        as = sizes(m);
        as.push_back(K);
      }
      os = as;
      os.back() = N;
      a = reshape(transpose(a, la, batch + m + kk), sizes(batch + m + kk), as);
      b = reshape(transpose(b, lb, batch + kk + nn), sizes(batch + kk + nn), bsh);
      const bool direct = last && sizes(result) == os && result == eq.out;
      cur = node("MatMul", {a, b}, direct ? n.outputs[0] : -1, "matmul");
      cur = reshape(cur, os, sizes(result));
    }
    have = result;
  }
  if (eq.in.size() == 1) cur = sum(cur, have, eq.out);
  if (nodes.empty() || nodes.back().outputs[0] != n.outputs[0]) {
    const int t = transpose(cur, have, eq.out);
    if (!nodes.empty() && t == nodes.back().outputs[0]) nodes.back().outputs[0] = n.outputs[0];
    else node("Identity", {t}, n.outputs[0], "identity");
  }
  return nodes;
}

// A MatMul whose contracted dimension is 1, [..., M, 1] @ [..., 1, N], is an outer product: a broadcasting Mul (the
// batch dimensions broadcast as MatMul's do), one f32 product per element on the vector unit as torch computes it.
// On the matrix unit both operands would be rounded to bf16: Hugging Face's rotary angles, inv_freq @ positions,
// would move by whole radians at positions in the thousands (bf16 holds integers exactly only up to 256). Returns
// {} (the MatMul stays) otherwise, or when both operands are constants (folded as a MatMul).
std::vector<ir::Node> expand_matmul(ir::Graph& g, const ir::Node& n) {
  const ir::Value &a = g.values[n.inputs[0]], &b = g.values[n.inputs[1]];
  const Shape as = a.shape(), bs = b.shape();
  if (as.size() < 2 || bs.size() < 2 || as.back() != 1 || (a.is_const && b.is_const) || a.elem_type != ir::kFloat ||
      b.elem_type != ir::kFloat)
    return {};
  ir::Node m = n;
  m.op = "Mul";
  m.attrs.clear();
  return {m};
}

// ---- constant folding ----------------------------------------------------------------------------------------

// Float MatMul of constants (N-D, broadcast batch, 1-D operands): float32 products summed in float64 and rounded
// once. Left alone past 2^28 multiply-adds (a matmul that large is not a table computed from shapes).
Tensors fold_matmul(const ir::Graph& g, const ir::Node& n, const Tensors& in) {
  const HostTensor &a = in[0], &b = in[1];
  if (!a.fl() || !b.fl()) return {};
  Shape as = a.shape, bs = b.shape;
  const bool a1 = as.size() == 1, b1 = bs.size() == 1;
  if (a1) as.insert(as.begin(), 1);
  if (b1) bs.push_back(1);
  const int64_t M = as[as.size() - 2], K = as.back(), N = bs.back();
  const Shape out = out_shape(g, n, 0);
  const Shape batch(out.begin(), out.end() - (a1 ? 0 : 1) - (b1 ? 0 : 1));
  if (prod(batch) * M * N * K > (int64_t{1} << 28)) return {};
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  const Shape ast = strides_of(ab), bst = strides_of(bb);
  HostTensor r;
  r.shape = out;
  r.f.reserve(static_cast<size_t>(prod(out)));
  auto batches = [&](const std::function<void(const Shape&)>& f) {
    if (batch.empty()) return f({});
    for_each_index(batch, [&](const Shape& idx, int64_t) { f(idx); });
  };
  batches([&](const Shape& idx) {
    const int64_t ao = bcast_offset(ab, ast, idx) * M * K, bo = bcast_offset(bb, bst, idx) * K * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k)
          acc += static_cast<double>(a.f[ao + i * K + k]) * static_cast<double>(b.f[bo + k * N + j]);
        r.f.push_back(static_cast<float>(acc));
      }
  });
  return {r};
}

// ---- lowering ------------------------------------------------------------------------------------------------

bool bias_shaped(const ir::Value& c, int64_t n) {
  Shape s = c.shape();
  if (s.empty()) return true;
  if (!std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; })) return false;
  return s.back() == n || s.back() == 1;
}

// Follows the single-use chain after a matmul: a constant bias Add, then a Relu. Returns the final value.
int fuse_epilogue(Lowering& L, int out, int64_t ncols, std::vector<float>& bias, std::string& bias_name, bool& relu,
                  std::string& label) {
  for (;;) {
    if (L.users_[out].size() != 1 || L.is_output_[out]) return out;
    const ir::Node& u = L.g_.nodes[L.users_[out][0]];
    if (!relu && bias.empty() && u.op == "Add") {
      int other = u.inputs[0] == out ? u.inputs[1] : u.inputs[0];
      const ir::Value& c = L.val(other);
      if (!c.is_const || c.elem_type != ir::kFloat || !bias_shaped(c, ncols) || L.shape(u.outputs[0]) != L.shape(out))
        return out;
      bias = c.data.size() == 1 ? std::vector<float>(ncols, c.data[0]) : c.data;
      bias_name = c.name;
    } else if (!relu && u.op == "Relu") {
      relu = true;
    } else {
      return out;
    }
    L.done_[L.users_[out][0]] = true;
    label += "+" + u.name;
    out = u.outputs[0];
  }
}

// The part size G when a matmul's result `out` (n columns) is read only by a Split of its last axis into equal
// parts of whole matrix-unit strips (fused sibling projections, GPT-2's c_attn): the GEMM can store the parts one
// after the other (GROUP_N) and the Split's outputs are then views. Else 0.
int64_t grouped_split(const Lowering& L, int out, int64_t n) {
  if (L.is_output_[out] || L.users_[out].size() != 1) return 0;
  const ir::Node& s = L.g_.nodes[L.users_[out][0]];
  if (s.op != "Split" || s.inputs[0] != out) return 0;
  const int64_t rank = static_cast<int64_t>(L.shape(out).size());
  auto cols = L.opts_.target.symbols.find("MXU_COLS");
  auto split = s.attrs.find("split");
  if (s.attr_int("axis", 0) != rank - 1 || cols == L.opts_.target.symbols.end() || split == s.attrs.end() ||
      split->second.ints.size() < 2)
    return 0;
  const int64_t g = split->second.ints[0];
  for (int64_t part : split->second.ints)
    if (part != g) return 0;
  for (int o : s.outputs)
    if (o < 0) return 0;
  return g > 0 && g % cols->second == 0 && n % g == 0 ? g : 0;
}

void lower_matmul(Lowering& L, const ir::Node& n) {
  int a = n.inputs[0], b = n.inputs[1];
  Shape as = L.shape(a), bs = L.shape(b);
  if (n.op == "Gemm") {
    if (n.attr_int("transA", 0) != 0) L.fail(n, "transA=1 is not supported");
    if (float al = n.attr_float("alpha", 1); al != 1.0f) L.fail(n, "alpha=" + num(al) + " is not supported (only 1)");
    if (n.inputs.size() > 2 && n.inputs[2] >= 0 && n.attr_float("beta", 1) != 1.0f)
      L.fail(n, "beta=" + num(n.attr_float("beta", 1)) + " is not supported (only 1)");
  }
  bool trans = n.op == "Gemm" && n.attr_int("transB", 0) != 0;
  if (as.size() < 2) L.fail(n, "a 1-D left operand is not supported");
  if (L.val(b).is_const) {
    if (bs.size() != 2) L.fail(n, "a constant right operand of rank " + std::to_string(bs.size()) + " is not supported");
    const int64_t k = as.back(), nn = trans ? bs[0] : bs[1];
    const int64_t m = prod(as, 0, as.size() - 1);
    std::vector<float> w = L.val(b).data;
    if (trans && !w.empty()) w = permute_data(w, bs, {1, 0});  // (empty: timing-only, no values)
    std::vector<float> bias;
    std::string bias_name;
    if (n.op == "Gemm" && n.inputs.size() > 2 && n.inputs[2] >= 0) {
      const ir::Value& c = L.val(n.inputs[2]);
      if (!c.is_const || !bias_shaped(c, nn)) L.fail(n, "C must be a constant [N] vector");
      bias = c.data.size() == 1 ? std::vector<float>(nn, c.data[0]) : c.data;
      bias_name = c.name;
    }
    bool relu = false;
    std::string label = n.name;
    int out = fuse_epilogue(L, n.outputs[0], nn, bias, bias_name, relu, label);
    Stored C = L.destination(out, L.storage_type(out));
    const bool q8 = L.opts_.precision == Precision::INT8;
    if (m == 1 && gemv_fits(L, k, nn, q8, !bias.empty(), relu, C.dtype)) {  // on the vector unit
      gemv(L, label, L.get_any(a, false), w, k, nn, bias, L.val(b).name, relu, C, q8);
      return;
    }
    const int64_t group = C.nhwc || C.off != 0 ? 0 : grouped_split(L, out, nn);
    if (L.int8(a)) {
      L.int8_gemm(n, label, L.quantized(n, a, false), a, w, m, k, nn, bias, L.val(b).name, relu, C, 2.0 * m * k * nn,
                  group ? -1 : out);  // (grouped: no int8 copy of the whole)
    } else {
      Stored A = L.get(a, DType::BF16, false);
      int B = L.tiled_weights(L.val(b).name, w, k, nn);
      int bias_buf = bias.empty() ? -1 : L.const_f32(bias_name, {nn}, bias);
      L.gemm(label, A, Stored{B, 0, DType::BF16, false}, bias_buf, C, m, k, nn, relu, 1.0f, true, false);
    }
    if (group) {
      L.plan_.calls.back().params["GROUP_N"] = group;
      L.grouped_[out] = group;
    }
    return;
  }
  if (n.op == "Gemm") L.fail(n, "a non-constant B is not supported");
  // Both operands activations: one gemm per batch index (broadcast batch dims).
  if (bs.size() < 2) L.fail(n, "a 1-D right operand is not supported");
  const int64_t m = as[as.size() - 2], k = as.back(), nn = bs.back();
  Shape os = L.shape(n.outputs[0]);
  const size_t batch_rank = os.size() - 2;
  // A right operand that is Transpose(x, perm swapping the last two axes) is read transposed.
  int bsrc = b;
  bool tb = false;
  if (L.trans_b_ && L.val(b).producer >= 0) {
    const ir::Node& t = L.g_.nodes[L.val(b).producer];
    if (t.op == "Transpose" && L.is_last_two_swap(t) && !L.val(t.inputs[0]).is_const) {
      bsrc = t.inputs[0];
      tb = true;
    }
  }
  Stored A = L.get(a, DType::BF16, false);
  Stored B = L.get(bsrc, DType::BF16, false);
  Stored C = L.destination(n.outputs[0], L.storage_type(n.outputs[0]));
  Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  while (ab.size() < batch_rank) ab.insert(ab.begin(), 1);
  while (bb.size() < batch_rank) bb.insert(bb.begin(), 1);
  std::vector<int64_t> ast = strides_of(ab), bst = strides_of(bb);
  const int64_t batches = prod(os, 0, batch_rank);
  // No broadcast (each operand has every batch index): the items lie one after the other in a, b and c, and a
  // gemm.s call takes a run of them (BATCH), each item's work going on while the one before drains, where a call
  // per item waited for the one before to finish (a Swin window attention's 192 products of 49 x 32 x 49 on v5e:
  // 486 cycles each). A run per core, so that chips of several cores still run them side by side.
  const Shape obatch(os.begin(), os.begin() + static_cast<std::ptrdiff_t>(batch_rank));
  if (batches > 1 && ab == obatch && bb == obatch) {
    const auto it = L.sym_.find("CORES");
    const int64_t cores = std::max<int64_t>(1, it != L.sym_.end() ? it->second : 1);
    const int64_t per = (batches + cores - 1) / cores;
    for (int64_t t = 0; t < batches; t += per) {
      const int64_t count = std::min(per, batches - t);
      Stored at = A, bt = B, ct = C;
      at.off += static_cast<uint64_t>(t * m * k * 2);
      bt.off += static_cast<uint64_t>(t * k * nn * 2);
      ct.off += static_cast<uint64_t>(t * m * nn * isa::dtype_size(C.dtype));
      L.gemm(n.name, at, bt, -1, ct, m, k, nn, false, 1.0f, false, tb);
      if (count > 1) {
        KernelCall& call = L.plan_.calls.back();
        call.params["BATCH"] = count;
        call.flops *= static_cast<double>(count);
        call.bytes *= static_cast<double>(count);
      }
    }
    return;
  }
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
    L.gemm(n.name, at, bt, -1, ct, m, k, nn, false, 1.0f, false, tb);
    for (int d = static_cast<int>(batch_rank) - 1; d >= 0; --d) {
      if (++idx[d] < os[d]) break;
      idx[d] = 0;
    }
  }
}

// Input 1 with a computed input 0 (with a constant one the product would be folded at compile time).
bool matmul_weights(const ir::Graph& g, const ir::Node& n, size_t k) {
  return k == 1 && n.inputs[0] >= 0 && !g.values[n.inputs[0]].is_const;
}

bool quantises_matmul(const Lowering& L, const ir::Node& n) {
  return L.val(n.inputs[1]).is_const && L.shape(n.inputs[1]).size() == 2 && L.shape(n.inputs[0]).size() >= 2;
}

}  // namespace

// y[1, N] = act(x[1, K] @ w[K, N] + bias) as a row-wise kernel over w^T [N, K]: each row multiplied by x
// (one vector, loaded once) and summed. A matrix unit would spend R cycles shifting in each weight tile to use
// it for one row; the vector unit streams the weights at HBM bandwidth (decode steps, batch-1 classifiers).
// int8: the weights are int8 with a scale per output channel (max|w| / 127) applied to each row's sum; x stays
// f32 (weight-only quantisation: the vector unit gains nothing from int8 arithmetic, HBM traffic halves).
void gemv(Lowering& L, const std::string& label, Stored x, const std::vector<float>& w, int64_t k, int64_t n,
          const std::vector<float>& bias, const std::string& wname, bool relu, Stored out, bool int8_weights) {
  KernelCall call = L.rowwise_call(label, n, k);
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
    wbuf = L.add_const(wname + ".T.i8", DType::I8, {n, k}, std::move(q));
  } else {
    wbuf = L.const_bf16(wname + ".T", {n, k}, wt);
  }
  int W = L.rw_input(call, Stored{wbuf, 0, int8_weights ? DType::I8 : DType::BF16, false}, false, 0);
  int X = L.rw_input(call, x, false, 1);
  int r = L.rw_node(call, rw::Op::RowSum, {L.rw_node(call, rw::Op::Mul, {W, X})});
  if (int8_weights)
    r = L.rw_node(call, rw::Op::Mul,
                {r, L.rw_input(call, Stored{L.const_f32(wname + ".scale", {n}, scale), 0, DType::F32, false}, true, 0)});
  if (!bias.empty())
    r = L.rw_node(call, rw::Op::Add,
                {r, L.rw_input(call, Stored{L.const_f32(wname + ".bias", {n}, bias), 0, DType::F32, false}, true, 0)});
  if (relu) r = L.rw_node(call, rw::Op::Relu, {r});
  L.rw_output(call, r, out);
  call.flops = 2.0 * static_cast<double>(k) * static_cast<double>(n);
  L.plan_.calls.push_back(std::move(call));
}

// Whether gemv's row-wise kernel fits a row of k weights (their staging slots, x as a loop-invariant row, the
// products) in a core's VMEM: not on h200-like's 228 KB of shared memory for VGG's classifier (rows of 25,088
// weights), whose product then runs as the GEMM on the matrix unit. x taken as f32 (its widest form).
bool gemv_fits(const Lowering& L, int64_t k, int64_t n, bool int8_weights, bool bias, bool relu, DType out) {
  rw::Program p;
  p.rows = n, p.cols = k;
  p.inputs.push_back(rw::Input{0, int8_weights ? DType::I8 : DType::BF16});
  p.inputs.push_back(rw::Input{0, DType::F32, false, 1});
  int r = p.unary(rw::Op::RowSum, p.binary(rw::Op::Mul, p.input(0), p.input(1)));
  auto per_row = [&] {  // a scale or a bias, one per output
    p.inputs.push_back(rw::Input{0, DType::F32, true});
    return p.input(static_cast<int>(p.inputs.size()) - 1);
  };
  if (int8_weights) r = p.binary(rw::Op::Mul, r, per_row());
  if (bias) r = p.binary(rw::Op::Add, r, per_row());
  if (relu) r = p.unary(rw::Op::Relu, r);
  p.outputs.push_back(rw::Output{r, 0, out});
  return L.rowwise_fits(p);
}


void add_matmul_ops(OpTable& t) {
  t.add({.name = "MatMul", .min_inputs = 2, .max_inputs = 2, .infer = infer_matmul, .fold = fold_matmul,
         .lower = lower_matmul, .expand = expand_matmul, .quantises = quantises_matmul,
         .weight_input = matmul_weights});
  t.add({.name = "Einsum", .max_inputs = kManyInputs, .attrs = {{"equation", K::String}}, .infer = infer_einsum,
         .expand = expand_einsum});
  t.add({.name = "Gemm", .min_inputs = 2, .max_inputs = 3,
         .attrs = {{"alpha", K::Float}, {"beta", K::Float}, {"transA", K::Int}, {"transB", K::Int}},
         .infer = infer_gemm, .lower = lower_matmul, .quantises = quantises_matmul, .weight_input = matmul_weights});
}

}  // namespace tpusim::compiler
