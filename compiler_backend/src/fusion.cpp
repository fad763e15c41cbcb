#include "fusion.h"

#include <algorithm>
#include <map>
#include <numeric>

#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

[[noreturn]] void fail(const ir::Node& n, const std::string& msg) {
  throw Error("node '" + n.name + "' (" + n.op + "): " + msg);
}

// A constant that adds one value per output column: shape [n], [1,n], [1], [] (leading 1s allowed).
bool is_bias_shaped(const ir::Value& c, int64_t n) {
  std::vector<int64_t> s = c.shape();
  if (s.empty()) return true;
  if (!std::all_of(s.begin(), s.end() - 1, [](int64_t d) { return d == 1; })) return false;
  return s.back() == n || s.back() == 1;
}

std::vector<float> bias_values(const ir::Value& c, int64_t n) {
  return c.data.size() == 1 ? std::vector<float>(n, c.data[0]) : c.data;
}

class Fuser {
 public:
  explicit Fuser(const ir::Graph& g) : g_(g), alias_(g.values.size()), uses_(g.values.size()),
                                       is_output_(g.values.size()) {}

  FusedGraph run() {
    std::iota(alias_.begin(), alias_.end(), 0);
    std::vector<bool> live = live_nodes();
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (live[i] && g_.nodes[i].op == "Identity") alias_[g_.nodes[i].outputs[0]] = resolve(g_.nodes[i].inputs[0]);
    for (size_t i = 0; i < g_.nodes.size(); ++i)
      if (live[i] && g_.nodes[i].op != "Identity")
        for (int in : g_.nodes[i].inputs) ++uses_[resolve(in)];
    for (int out : g_.outputs) {
      ++uses_[resolve(out)];
      is_output_[resolve(out)] = true;
    }
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const ir::Node& n = g_.nodes[i];
      if (!live[i] || n.op == "Identity") continue;
      if (n.op == "MatMul" || n.op == "Gemm") add_matmul(n);
      else if (n.op == "Add") fuse_add(n);
      else if (n.op == "Relu") fuse_relu(n);
      else fail(n, "no lowering for this operator");
    }
    return {std::move(f_.ops), outputs()};
  }

 private:
  int resolve(int v) const {
    while (alias_[v] != v) v = alias_[v];
    return v;
  }

  std::vector<bool> live_nodes() const {
    std::vector<bool> needed(g_.values.size()), live(g_.nodes.size());
    for (int out : g_.outputs) needed[out] = true;
    for (size_t i = g_.nodes.size(); i-- > 0;) {
      const ir::Node& n = g_.nodes[i];
      live[i] = std::any_of(n.outputs.begin(), n.outputs.end(), [&](int v) { return needed[v]; });
      if (live[i])
        for (int in : n.inputs) needed[in] = true;
    }
    return live;
  }

  void add_matmul(const ir::Node& n) {
    FusedMatMul op;
    op.name = n.name;
    op.a = resolve(n.inputs[0]);
    op.b = resolve(n.inputs[1]);
    op.transpose_b = n.op == "Gemm" && n.attr_int("transB", 0) == 1;
    const ir::Value& b = g_.values[op.b];
    if (op.transpose_b && !b.is_const) fail(n, "transB=1 needs B to be a constant, but '" + b.name + "' is computed");
    std::vector<int64_t> bs = b.shape();
    op.m = g_.values[op.a].shape()[0];
    op.k = op.transpose_b ? bs[1] : bs[0];
    op.n = op.transpose_b ? bs[0] : bs[1];
    if (n.inputs.size() == 3) {
      const ir::Value& c = g_.values[resolve(n.inputs[2])];
      if (!c.is_const || !is_bias_shaped(c, op.n))
        fail(n, "C must be a constant of shape [N] or [1,N] (N = " + std::to_string(op.n) + "), got '" + c.name +
                    "' " + ir::shape_str(c));
      op.bias = bias_values(c, op.n);
      op.bias_name = c.name;
    }
    op.out = n.outputs[0];
    producer_[op.out] = f_.ops.size();
    f_.ops.push_back(std::move(op));
  }

  // The fused op whose result `v` is, if this node may fuse into it (its only use, not a graph output).
  FusedMatMul& fusable_producer(const ir::Node& n, int v, const std::string& what) {
    auto it = producer_.find(v);
    const std::string& name = g_.values[v].name;
    if (it == producer_.end())
      fail(n, "only " + what + " right after MatMul/Gemm is supported, and '" + name + "' is not a matmul result");
    if (f_.ops[it->second].kind != FusedMatMul::Kind::MatMul)
      fail(n, "only " + what + " right after MatMul/Gemm is supported, and '" + name +
                  "' is the result of an elementwise Add");
    if (uses_[v] != 1 || is_output_[v])
      fail(n, "only " + what + " right after MatMul/Gemm is supported, and '" + name +
                  "' is also used elsewhere (" + (is_output_[v] ? "a graph output" : "another node") + ")");
    return f_.ops[it->second];
  }

  void fuse_add(const ir::Node& n) {
    int x = resolve(n.inputs[0]), y = resolve(n.inputs[1]);
    const ir::Value &vx = g_.values[x], &vy = g_.values[y];
    if (vx.is_const && vy.is_const) fail(n, "adding two constants is not supported");
    if (!vx.is_const && !vy.is_const) {
      if (vx.shape() != vy.shape())
        fail(n, "broadcasting Add of two activations " + ir::shape_str(vx) + " + " + ir::shape_str(vy) +
                    " is not supported");
      FusedMatMul op;  // a residual connection: an elementwise add
      op.kind = FusedMatMul::Kind::Add;
      op.name = n.name;
      op.a = x;
      op.b = y;
      op.out = n.outputs[0];
      producer_[op.out] = f_.ops.size();
      f_.ops.push_back(std::move(op));
      return;
    }
    int v = vx.is_const ? y : x;
    const ir::Value& c = vx.is_const ? vx : vy;
    FusedMatMul& op = fusable_producer(n, v, "a bias Add");
    if (op.relu) fail(n, "a bias Add after a Relu is not supported ('" + g_.values[v].name + "' is a Relu result)");
    if (!is_bias_shaped(c, op.n) || g_.values[n.outputs[0]].shape() != std::vector<int64_t>{op.m, op.n})
      fail(n, "the constant '" + c.name + "' " + ir::shape_str(c) + " is not a bias of shape [N] or [1,N] (N = " +
                  std::to_string(op.n) + ")");
    std::vector<float> add = bias_values(c, op.n);
    if (op.bias.empty()) {
      op.bias = std::move(add);
      op.bias_name = c.name;
    } else {
      for (int64_t j = 0; j < op.n; ++j) op.bias[j] += add[j];
    }
    op.fused.push_back(n.name);
    retarget(op, v, n.outputs[0]);
  }

  void fuse_relu(const ir::Node& n) {
    int v = resolve(n.inputs[0]);
    FusedMatMul& op = fusable_producer(n, v, "a Relu");
    op.relu = true;
    op.fused.push_back(n.name);
    retarget(op, v, n.outputs[0]);
  }

  void retarget(FusedMatMul& op, int from, int to) {
    size_t index = producer_.at(from);
    producer_.erase(from);
    producer_[to] = index;
    op.out = to;
  }

  std::vector<FusedGraph::Output> outputs() const {
    std::vector<FusedGraph::Output> outs;
    for (int out : g_.outputs) {
      int v = resolve(out);
      const std::string& name = g_.values[out].name;
      if (!producer_.count(v))
        throw Error("output '" + name + "' of model '" + g_.model_name +
                    "' is not computed on the chip (it is a graph input or a constant)");
      for (const FusedGraph::Output& o : outs)
        if (o.value == v) throw Error("outputs '" + o.name + "' and '" + name + "' are the same value; not supported");
      outs.push_back({name, v});
    }
    return outs;
  }

  const ir::Graph& g_;
  std::vector<int> alias_;
  std::vector<int> uses_;
  std::vector<bool> is_output_;
  std::map<int, size_t> producer_;  // op result value -> index in f_.ops
  FusedGraph f_;
};

}  // namespace

FusedGraph fuse(const ir::Graph& g) { return Fuser(g).run(); }

}  // namespace tpusim::compiler
