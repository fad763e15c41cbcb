// GELU chains recognised as one Gelu node (fuse_gelu.h). The match walks from each Erf or Tanh node: its argument
// back to x, its result forward through the Add of 1 and the product with x and 0.5.
#include "fuse_gelu.h"

#include <algorithm>
#include <cmath>

#include "const_fold.h"

namespace tpusim::compiler {
namespace {

class Matcher {
 public:
  explicit Matcher(ir::Graph& g) : g_(g), users_(ir::users_of(g)) {}

  void run() {
    std::vector<bool> removed(g_.nodes.size(), false);
    bool any = false;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      const std::string& op = g_.nodes[i].op;
      if ((op != "Erf" && op != "Tanh") || removed[i]) continue;
      chain_.clear();
      const bool tanh = op == "Tanh";
      const int x = tanh ? tanh_argument(static_cast<int>(i)) : erf_argument(static_cast<int>(i));
      if (x < 0) continue;
      chain_.push_back(static_cast<int>(i));
      const int last = product(x, one_plus(static_cast<int>(i)));
      if (last < 0 || std::any_of(chain_.begin(), chain_.end(), [&](int n) { return removed[n]; })) continue;
      std::sort(chain_.begin(), chain_.end());
      // Named as the row-wise kernel of the chain would have been labelled (lower_rowwise.cpp).
      std::string name;
      for (int n : chain_) {
        name += (name.empty() ? "" : "+") + g_.nodes[n].name;
        if (n != last) removed[n] = true;
      }
      if (name.size() > 120) name = g_.nodes[chain_.front()].name + "+...+" + g_.nodes[chain_.back()].name;
      ir::Node& gelu = g_.nodes[last];  // the chain's last node, so that every node after it still finds its input
      ir::Attr approximate;
      approximate.kind = ir::Attr::Kind::String, approximate.s = tanh ? "tanh" : "none";
      gelu = ir::Node{"Gelu", name, {{"approximate", approximate}}, {x}, {gelu.outputs[0]}};
      any = true;
    }
    if (any) remove_nodes(g_, removed);
  }

 private:
  // Whether value v is read only by the chain: one user, and no graph output.
  bool read_once(int v) const {
    return v >= 0 && users_[v].size() == 1 && std::find(g_.outputs.begin(), g_.outputs.end(), v) == g_.outputs.end();
  }
  // The producer of v if it is an `op` node of one output that only this chain reads; else -1.
  int inner(int v, const char* op) const {
    if (!read_once(v) || g_.values[v].producer < 0) return -1;
    const int n = g_.values[v].producer;
    return g_.nodes[n].op == op && g_.nodes[n].outputs.size() == 1 ? n : -1;
  }
  // Whether value v is a scalar float constant within 1e-6 (relative) of c.
  bool is_scalar(int v, double c) const {
    if (v < 0) return false;
    const ir::Value& k = g_.values[v];
    return k.is_const && k.elem_type == ir::kFloat && k.data.size() == 1 &&
           std::fabs(static_cast<double>(k.data[0]) - c) <= 1e-6 * std::fabs(c);
  }
  // For a binary node n with a scalar constant c on one side, the other input; else -1.
  int other_than(int n, double c) const {
    const std::vector<int>& in = g_.nodes[n].inputs;
    if (in.size() != 2) return -1;
    if (is_scalar(in[1], c)) return in[0];
    if (is_scalar(in[0], c)) return in[1];
    return -1;
  }
  bool same_shape(int v, int x) const {
    const ir::Value &a = g_.values[v], &b = g_.values[x];
    if (!a.has_shape || !b.has_shape || a.dims.size() != b.dims.size() || a.elem_type != ir::kFloat) return false;
    for (size_t d = 0; d < a.dims.size(); ++d)
      if (!a.dims[d].known() || a.dims[d].size != b.dims[d].size) return false;
    return true;
  }
  // Adds node n to the chain when its output has x's shape; returns n, or -1.
  int take(int n, int x) {
    if (n < 0 || !same_shape(g_.nodes[n].outputs[0], x)) return -1;
    chain_.push_back(n);
    return n;
  }

  // Erf(x / sqrt2): x, or -1.
  int erf_argument(int erf) {
    const int s = g_.nodes[erf].inputs.empty() ? -1 : g_.nodes[erf].inputs[0];
    int n = inner(s, "Div"), x = -1;
    if (n >= 0 && g_.nodes[n].inputs.size() == 2 && is_scalar(g_.nodes[n].inputs[1], std::sqrt(2.0)))
      x = g_.nodes[n].inputs[0];
    if (x < 0 && (n = inner(s, "Mul")) >= 0) x = other_than(n, std::sqrt(0.5));
    return x >= 0 && take(n, x) >= 0 && same_shape(g_.nodes[erf].outputs[0], x) ? x : -1;
  }
  // Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)): x, or -1.
  int tanh_argument(int tanh) {
    const int s = g_.nodes[tanh].inputs.empty() ? -1 : g_.nodes[tanh].inputs[0];
    const int scaled = inner(s, "Mul");
    if (scaled < 0) return -1;
    const int sum = inner(other_than(scaled, 0.79788456080286536), "Add");  // sqrt(2 / pi)
    if (sum < 0 || g_.nodes[sum].inputs.size() != 2) return -1;
    const size_t mark = chain_.size();
    for (int side = 0; side < 2; ++side) {  // x + cube term, in either order
      chain_.resize(mark);
      const int x = g_.nodes[sum].inputs[side], term = inner(g_.nodes[sum].inputs[1 - side], "Mul");
      if (x < 0 || term < 0 || !is_cube(other_than(term, 0.044715), x)) continue;
      for (int n : {scaled, sum, term})
        if (take(n, x) < 0) return -1;
      return same_shape(g_.nodes[tanh].outputs[0], x) ? x : -1;
    }
    return -1;
  }
  // Whether v is x^3: Pow(x, 3), or Mul(Mul(x, x), x) in either order (its nodes join the chain).
  bool is_cube(int v, int x) {
    if (const int pow = inner(v, "Pow"); pow >= 0)
      return g_.nodes[pow].inputs.size() == 2 && g_.nodes[pow].inputs[0] == x &&
             is_scalar(g_.nodes[pow].inputs[1], 3.0) && take(pow, x) >= 0;
    const int outer = inner(v, "Mul");
    if (outer < 0 || g_.nodes[outer].inputs.size() != 2) return false;
    const std::vector<int>& in = g_.nodes[outer].inputs;
    const int sq = inner(in[0] == x ? in[1] : in[0], "Mul");
    return (in[0] == x || in[1] == x) && sq >= 0 && g_.nodes[sq].inputs == std::vector<int>{x, x} &&
           take(outer, x) >= 0 && take(sq, x) >= 0;
  }
  // The value 1 + f (an Add of 1 reading f's output, f's only user), or -1.
  int one_plus(int f) {
    const int v = g_.nodes[f].outputs[0];
    if (!read_once(v)) return -1;
    const int add = users_[v][0];
    if (g_.nodes[add].op != "Add" || other_than(add, 1.0) != v) return -1;
    chain_.push_back(add);
    return g_.nodes[add].outputs[0];
  }
  // The one user of v, when it is a Mul that only this chain reads into; else -1.
  int mul_user(int v) const {
    if (!read_once(v)) return -1;
    const int n = users_[v][0];
    return g_.nodes[n].op == "Mul" && g_.nodes[n].inputs.size() == 2 ? n : -1;
  }
  // The other input of binary node n than v (n reads v once), or -1.
  int other(int n, int v) const {
    const std::vector<int>& in = g_.nodes[n].inputs;
    if (in.size() != 2) return -1;
    if (in[0] == v && in[1] != v) return in[1];
    if (in[1] == v && in[0] != v) return in[0];
    return -1;
  }
  // 0.5 * x * a as one of (x * a) * 0.5, x * (a * 0.5), (x * 0.5) * a, in any operand order: the last node, or -1.
  int product(int x, int a) {
    if (a < 0) return -1;
    const int m = mul_user(a);
    if (m < 0) return -1;
    const int b = other(m, a);
    if (b == x) {  // (x * a) * 0.5
      const int half = mul_user(g_.nodes[m].outputs[0]);
      if (half < 0 || other_than(half, 0.5) != g_.nodes[m].outputs[0]) return -1;
      return take(m, x) >= 0 ? take(half, x) : -1;
    }
    if (is_scalar(b, 0.5)) {  // x * (a * 0.5)
      const int last = mul_user(g_.nodes[m].outputs[0]);
      if (last < 0 || other(last, g_.nodes[m].outputs[0]) != x) return -1;
      return take(m, x) >= 0 ? take(last, x) : -1;
    }
    const int half = inner(b, "Mul");  // (x * 0.5) * a
    if (half < 0 || other_than(half, 0.5) != x) return -1;
    return take(half, x) >= 0 ? take(m, x) : -1;
  }

  ir::Graph& g_;
  std::vector<std::vector<int>> users_;
  std::vector<int> chain_;  // the nodes matched so far
};

}  // namespace

void fuse_gelu(ir::Graph& g) { Matcher(g).run(); }

}  // namespace tpusim::compiler
