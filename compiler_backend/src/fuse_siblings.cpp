// Sibling matmuls: MatMuls that read one activation with constant weights of the same K (a transformer's separate
// query, key and value projections, each a Linear: MatMul + bias Add) become one MatMul on the weights side by side,
// [K, N1 + N2 + ...], its bias Add on the biases side by side, and a Split of the result into the original values.
// One GEMM streams the activation once and fills the chip with N1 + N2 + ... columns where each alone left units
// idle; each output column is the same sum of the same products as before, so the values are the same bits. The
// Split is views where every axis before the last has one element (a decoded token), or where the parts are of
// one size in whole strips of the matrix unit (the GEMM then stores them one after the other: ops_matmul.cpp,
// grouped_split); else one copy. (Gemm nodes, as torch exports a 2-D Linear with a bias, are left alone.)
#include "fuse_siblings.h"

#include <algorithm>
#include <iterator>
#include <map>

namespace tpusim::compiler {
namespace {

// The constant float matrix [K, N] value v, or false.
bool const_matrix(const ir::Graph& g, int v, int64_t& k, int64_t& n) {
  if (v < 0) return false;
  const ir::Value& w = g.values[v];
  if (!w.is_const || w.elem_type != ir::kFloat || !w.has_shape || w.dims.size() != 2) return false;
  k = w.dims[0].size, n = w.dims[1].size;
  return k > 0 && n > 0;
}

// A sibling: the MatMul (node index), the bias Add after it (or -1) and its bias value, the value it ends in.
struct Sibling {
  int matmul = -1, add = -1, bias = -1, out = -1;
  int64_t n = 0;
};

bool is_output(const ir::Graph& g, int v) {
  return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end();
}

}  // namespace

void fuse_sibling_matmuls(ir::Graph& g) {
  std::vector<std::vector<int>> users = ir::users_of(g);
  std::vector<bool> removed(g.nodes.size(), false);
  std::vector<std::pair<size_t, std::vector<ir::Node>>> inserts;  // (at node, nodes in place of it)
  const size_t values = g.values.size();                          // (the pass adds values: those are not visited)
  for (size_t x = 0; x < values; ++x) {
    const ir::Value& xv = g.values[x];
    if (xv.is_const || !xv.has_shape || xv.dims.size() < 2 || xv.elem_type != ir::kFloat ||
        !std::all_of(xv.dims.begin(), xv.dims.end(), [](const ir::Dim& d) { return d.known(); }))
      continue;
    // Group the MatMuls reading x as their activation by K, with the bias Add each may have.
    std::map<int64_t, std::vector<Sibling>> by_k;
    for (int u : users[x]) {
      const ir::Node& mm = g.nodes[static_cast<size_t>(u)];
      int64_t k = 0, n = 0;
      if (removed[static_cast<size_t>(u)] || mm.op != "MatMul" || mm.inputs.size() != 2 ||
          mm.inputs[0] != static_cast<int>(x) || !const_matrix(g, mm.inputs[1], k, n))
        continue;
      Sibling s{u, -1, -1, mm.outputs[0], n};
      const int y = mm.outputs[0];
      if (!is_output(g, y) && users[static_cast<size_t>(y)].size() == 1) {
        const ir::Node& add = g.nodes[static_cast<size_t>(users[static_cast<size_t>(y)][0])];
        if (add.op == "Add" && add.inputs.size() == 2) {
          const int b = add.inputs[0] == y ? add.inputs[1] : add.inputs[0];
          const ir::Value& bv = g.values[static_cast<size_t>(b)];
          if (b >= 0 && bv.is_const && bv.elem_type == ir::kFloat && bv.has_shape && bv.dims.size() == 1 &&
              bv.dims[0].size == n && (add.inputs[0] == y) != (add.inputs[1] == y)) {
            s.add = users[static_cast<size_t>(y)][0], s.bias = b, s.out = add.outputs[0];
          }
        }
      }
      // A Relu after it would have joined its GEMM's epilogue: such a matmul stays alone.
      bool relu = false;
      for (int r : users[static_cast<size_t>(s.out)]) relu = relu || g.nodes[static_cast<size_t>(r)].op == "Relu";
      if (!relu) by_k[k].push_back(s);
    }
    for (auto& group : by_k) {
      const int64_t k = group.first;
      std::vector<Sibling>& sibs = group.second;  // (a reference, not a binding: lambdas below capture it)
      // All with a bias or all without (one epilogue for the whole GEMM).
      const bool bias = std::all_of(sibs.begin(), sibs.end(), [](const Sibling& s) { return s.add >= 0; });
      if (!bias)
        sibs.erase(std::remove_if(sibs.begin(), sibs.end(), [](const Sibling& s) { return s.add >= 0; }), sibs.end());
      if (sibs.size() < 2) continue;
      std::sort(sibs.begin(), sibs.end(), [](const Sibling& a, const Sibling& b) { return a.matmul < b.matmul; });
      int64_t n_all = 0;
      for (const Sibling& s : sibs) n_all += s.n;
      // Named as the first and last of the group, as other fused groups are ("A+...+B"; "A+B" for two)
      auto group_name = [&](auto node_of) {
        const std::string a = g.nodes[static_cast<size_t>(node_of(sibs.front()))].name;
        const std::string b = g.nodes[static_cast<size_t>(node_of(sibs.back()))].name;
        return a + (sibs.size() > 2 ? "+...+" : "+") + b;
      };
      const std::string name = group_name([](const Sibling& s) { return s.matmul; });
      // The weights side by side (timing-only weights have no data: then neither has the result)
      const int w = g.fresh_value(name + ".weights");
      {
        ir::Value& wv = g.values[static_cast<size_t>(w)];
        wv.elem_type = ir::kFloat, wv.has_shape = true, wv.is_const = true;
        wv.dims = {ir::Dim::sized(k), ir::Dim::sized(n_all)};
      }
      bool data = true;
      for (const Sibling& s : sibs)
        data = data && !g.values[static_cast<size_t>(g.nodes[static_cast<size_t>(s.matmul)].inputs[1])].data.empty();
      if (data) {
        std::vector<float> all(static_cast<size_t>(k * n_all));
        int64_t col = 0;
        for (const Sibling& s : sibs) {
          const std::vector<float>& d =
              g.values[static_cast<size_t>(g.nodes[static_cast<size_t>(s.matmul)].inputs[1])].data;
          for (int64_t r = 0; r < k; ++r) std::copy_n(d.begin() + r * s.n, s.n, all.begin() + r * n_all + col);
          col += s.n;
        }
        g.values[static_cast<size_t>(w)].data = std::move(all);
      }
      std::vector<ir::Node> nodes;
      auto fresh_like = [&](const std::string& base) {
        const int v = g.fresh_value(base);
        ir::Value& nv = g.values[static_cast<size_t>(v)];
        nv.elem_type = ir::kFloat, nv.has_shape = true, nv.dims = g.values[x].dims;
        nv.dims.back() = ir::Dim::sized(n_all);
        return v;
      };
      int t = fresh_like(name + ".out");
      nodes.push_back(ir::Node{"MatMul", name, {}, {static_cast<int>(x), w}, {t}});
      if (bias) {
        const int b = g.fresh_value(name + ".bias");
        {
          ir::Value& bv = g.values[static_cast<size_t>(b)];
          bv.elem_type = ir::kFloat, bv.has_shape = true, bv.is_const = true, bv.dims = {ir::Dim::sized(n_all)};
          for (const Sibling& s : sibs) {
            const std::vector<float>& d = g.values[static_cast<size_t>(s.bias)].data;
            if (d.empty()) {
              bv.data.clear();
              break;
            }
            bv.data.insert(bv.data.end(), d.begin(), d.end());
          }
        }
        const std::string add_name = group_name([](const Sibling& s) { return s.add; });
        const int u = fresh_like(add_name + ".out");
        nodes.push_back(ir::Node{"Add", add_name, {}, {t, b}, {u}});
        t = u;
      }
      ir::Node split{"Split", name + ".split", {}, {t}, {}};
      ir::Attr axis, sizes;
      axis.kind = ir::Attr::Kind::Int, axis.i = static_cast<int64_t>(g.values[x].dims.size()) - 1;
      sizes.kind = ir::Attr::Kind::Ints;
      for (const Sibling& s : sibs) {
        split.outputs.push_back(s.out);
        sizes.ints.push_back(s.n);
      }
      split.attrs["axis"] = axis, split.attrs["split"] = sizes;
      nodes.push_back(split);
      for (const Sibling& s : sibs) {
        removed[static_cast<size_t>(s.matmul)] = true;
        if (s.add >= 0) removed[static_cast<size_t>(s.add)] = true;
      }
      inserts.emplace_back(static_cast<size_t>(sibs[0].matmul), std::move(nodes));
    }
  }
  if (inserts.empty()) return;
  std::map<size_t, std::vector<ir::Node>> at(std::make_move_iterator(inserts.begin()),
                                             std::make_move_iterator(inserts.end()));
  std::vector<ir::Node> nodes;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    if (auto it = at.find(i); it != at.end())
      for (ir::Node& n : it->second) nodes.push_back(std::move(n));
    if (!removed[i]) nodes.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(nodes);
  for (ir::Value& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int o : g.nodes[i].outputs)
      if (o >= 0) g.values[static_cast<size_t>(o)].producer = static_cast<int>(i);
}

}  // namespace tpusim::compiler
