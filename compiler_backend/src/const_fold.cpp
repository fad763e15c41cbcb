// Constant folding driver (each operator's folding function is its OpDef::fold, ops.h) and dead-code removal.
#include "const_fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "fold.h"
#include "ops.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {

bool is_float_type(ir::ElemType t) { return t == ir::kFloat || t == 10 || t == 11 || t == 16; }

int64_t wrap(int64_t v, ir::ElemType t) {
  switch (t) {
    case 9: return v != 0;                         // BOOL
    case 2: return static_cast<uint8_t>(v);        // UINT8
    case 3: return static_cast<int8_t>(v);         // INT8
    case 4: return static_cast<uint16_t>(v);       // UINT16
    case 5: return static_cast<int16_t>(v);        // INT16
    case 6: return static_cast<int32_t>(v);        // INT32
    case 12: return static_cast<uint32_t>(v);      // UINT32
    default: return v;                             // INT64, UINT64
  }
}


void for_each_index(const Shape& s, const std::function<void(const Shape&, int64_t)>& f) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  if (n == 0) return;
  Shape idx(s.size(), 0);
  for (int64_t flat = 0; flat < n; ++flat) {
    f(idx, flat);
    for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
      if (++idx[d] < s[d]) break;
      idx[d] = 0;
    }
  }
}

int64_t bcast_offset(const Shape& in, const Shape& in_strides, const Shape& idx) {
  int64_t off = 0;
  size_t lead = idx.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d)
    if (in[d] != 1) off += idx[lead + d] * in_strides[d];
  return off;
}

namespace {

// out[k] = src[src_index[k]] with the output's shape and src's type.
HostTensor take(const HostTensor& src, Shape out_shape, const std::vector<int64_t>& src_index) {
  HostTensor r;
  r.type = src.type;
  r.shape = std::move(out_shape);
  if (src.fl()) {
    r.f.reserve(src_index.size());
    for (int64_t k : src_index) r.f.push_back(src.f[k]);
  } else {
    r.i.reserve(src_index.size());
    for (int64_t k : src_index) r.i.push_back(src.i[k]);
  }
  return r;
}

}  // namespace

HostTensor map_index(const HostTensor& src, const Shape& out, const std::function<int64_t(const Shape&)>& src_of) {
  std::vector<int64_t> index;
  index.reserve(static_cast<size_t>(std::max<int64_t>(0, [&] {
    int64_t n = 1;
    for (int64_t d : out) n *= d;
    return n;
  }())));
  for_each_index(out, [&](const Shape& idx, int64_t) { index.push_back(src_of(idx)); });
  return take(src, out, index);
}

double as_double(const HostTensor& t, int64_t k) { return t.fl() ? static_cast<double>(t.f[k]) : static_cast<double>(t.i[k]); }

const ir::Attr* attr(const ir::Node& n, const std::string& k) {
  auto it = n.attrs.find(k);
  return it == n.attrs.end() ? nullptr : &it->second;
}
Shape attr_ints(const ir::Node& n, const std::string& k) {
  const ir::Attr* a = attr(n, k);
  return a ? a->ints : Shape{};
}

std::vector<int64_t> out_shape(const ir::Graph& g, const ir::Node& n, size_t k) { return g.values[n.outputs[k]].shape(); }
ir::ElemType out_type(const ir::Graph& g, const ir::Node& n, size_t k) { return g.values[n.outputs[k]].elem_type; }

namespace {

constexpr int64_t kMaxFoldElements = int64_t{1} << 24;

HostTensor get(const ir::Value& v) {
  HostTensor t;
  t.type = v.elem_type;
  t.shape = v.shape();
  if (t.fl()) t.f = v.data;
  else t.i = v.ints;
  return t;
}

void put(ir::Value& v, HostTensor&& t) {
  v.is_const = true;
  v.producer = -1;
  v.has_shape = true;
  v.dims.clear();
  for (int64_t d : t.shape) v.dims.push_back(ir::Dim::sized(d));
  v.elem_type = t.type;
  v.data = std::move(t.f);
  v.ints = std::move(t.i);
}

bool is_used(const ir::Graph& g, int value) {
  if (std::find(g.outputs.begin(), g.outputs.end(), value) != g.outputs.end()) return true;
  for (const ir::Node& n : g.nodes)
    if (std::find(n.inputs.begin(), n.inputs.end(), value) != n.inputs.end()) return true;
  return false;
}

void replace_uses(ir::Graph& g, int from, int to) {
  for (ir::Node& n : g.nodes)
    for (int& in : n.inputs)
      if (in == from) in = to;
}

}  // namespace

bool fold_node(ir::Graph& g, int node) {
  const ir::Node& n = g.nodes[node];
  const OpDef* def = find_op(n.op);
  if (!def || !def->fold) return false;
  std::vector<HostTensor> in;
  for (int id : n.inputs) {
    if (id < 0) {
      in.emplace_back();
      continue;
    }
    const ir::Value& v = g.values[id];
    if (def->fold_shape_only) {
      HostTensor t;
      t.shape = v.shape();
      in.push_back(t);
      continue;
    }
    if (!v.is_const) return false;
    in.push_back(get(v));
  }
  int64_t total = 0;
  for (int out : n.outputs)
    if (out >= 0) total += g.values[out].elements();
  if (total > kMaxFoldElements) return false;
  std::vector<HostTensor> res;
  try {
    res = def->fold(g, n, in);
  } catch (const ir::NodeError& e) {
    throw ir::in_model(g, e);
  }
  if (res.empty()) return false;
  for (size_t k = 0; k < n.outputs.size() && k < res.size(); ++k)
    if (n.outputs[k] >= 0) put(g.values[n.outputs[k]], std::move(res[k]));
  return true;
}

void remove_nodes(ir::Graph& g, const std::vector<bool>& remove) {
  std::vector<ir::Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (i >= remove.size() || !remove[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
  for (ir::Value& v : g.values) v.producer = -1;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (int out : g.nodes[i].outputs)
      if (out >= 0) g.values[out].producer = static_cast<int>(i);
}

void fold_constants(ir::Graph& g) {
  // 1. Anything still foldable.
  std::vector<bool> remove(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) remove[i] = fold_node(g, static_cast<int>(i));
  remove_nodes(g, remove);

  // 2. Identity and Dropout (inference) pass their input through.
  remove.assign(g.nodes.size(), false);
  auto is_output = [&](int v) { return std::find(g.outputs.begin(), g.outputs.end(), v) != g.outputs.end(); };
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    ir::Node& n = g.nodes[i];
    if (n.op != "Identity" && n.op != "Dropout") continue;
    if (n.op == "Dropout" && n.outputs.size() > 1 && n.outputs[1] >= 0 && is_used(g, n.outputs[1])) continue;
    const int in = n.inputs[0], out = n.outputs[0];
    if (!is_output(out)) {
      replace_uses(g, out, in);
      remove[i] = true;
      continue;
    }
    const int p = g.values[in].producer;
    if (p < 0 || g.values[in].is_const || is_output(in)) continue;  // input/constant -> output: keep it
    // The producer writes the graph output directly; the other readers of `in` read `out`.
    for (int& o : g.nodes[p].outputs)
      if (o == in) o = out;
    replace_uses(g, in, out);
    g.values[out].producer = p;
    g.values[in].producer = -1;
    remove[i] = true;
  }
  remove_nodes(g, remove);

  // 3. Nodes no graph output depends on.
  std::vector<bool> live_value(g.values.size(), false);
  for (int o : g.outputs) live_value[o] = true;
  remove.assign(g.nodes.size(), true);
  for (int i = static_cast<int>(g.nodes.size()) - 1; i >= 0; --i) {
    const ir::Node& n = g.nodes[i];
    bool live = std::any_of(n.outputs.begin(), n.outputs.end(), [&](int o) { return o >= 0 && live_value[o]; });
    if (!live) continue;
    remove[i] = false;
    for (int in : n.inputs)
      if (in >= 0) live_value[in] = true;
  }
  remove_nodes(g, remove);

  // 4. Values nothing uses: renumber the rest.
  std::vector<bool> keep(g.values.size(), false);
  for (int v : g.inputs) keep[v] = true;
  for (int v : g.outputs) keep[v] = true;
  for (const ir::Node& n : g.nodes) {
    for (int v : n.inputs)
      if (v >= 0) keep[v] = true;
    for (int v : n.outputs)
      if (v >= 0) keep[v] = true;
  }
  std::vector<int> new_index(g.values.size(), -1);
  std::vector<ir::Value> values;
  for (size_t v = 0; v < g.values.size(); ++v)
    if (keep[v]) {
      new_index[v] = static_cast<int>(values.size());
      values.push_back(std::move(g.values[v]));
    }
  g.values = std::move(values);
  auto remap = [&](int& v) {
    if (v >= 0) v = new_index[v];
  };
  for (int& v : g.inputs) remap(v);
  for (int& v : g.outputs) remap(v);
  for (ir::Node& n : g.nodes) {
    for (int& v : n.inputs) remap(v);
    for (int& v : n.outputs) remap(v);
  }
  g.value_index.clear();
  for (size_t v = 0; v < g.values.size(); ++v) g.value_index[g.values[v].name] = static_cast<int>(v);
  remove_nodes(g, {});
}

}  // namespace tpusim::compiler
