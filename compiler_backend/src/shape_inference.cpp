// Shape inference driver: the check that every operator of a model is supported (all problems listed at once),
// then one sweep in topological order that infers each node with its operator's shape function (ops.h) and folds
// what is constant (const_fold.h).
#include "shape_inference.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <set>
#include <sstream>

#include "const_fold.h"
#include "infer.h"
#include "ops.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/isa.h"

namespace tpusim::compiler {

std::string ints_str(const std::vector<int64_t>& v) { return ir::shape_str(v); }
// Checked size arithmetic: sizes come from the model, which may be crafted; a result past int64 fails naming
// the node instead of wrapping (undefined behaviour).
int64_t mul(const ir::Node& n, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_mul_overflow(a, b, &r))
    fail(n, "size arithmetic overflows 64 bits (" + std::to_string(a) + " * " + std::to_string(b) + ")");
  return r;
}

int64_t add(const ir::Node& n, int64_t a, int64_t b) {
  int64_t r;
  if (__builtin_add_overflow(a, b, &r))
    fail(n, "size arithmetic overflows 64 bits (" + std::to_string(a) + " + " + std::to_string(b) + ")");
  return r;
}

// Multidirectional (numpy) broadcasting.
Shape broadcast(const ir::Node& n, const Shape& a, const Shape& b) {
  Shape r(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < r.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (da != db && da != 1 && db != 1)
      fail(n, "shapes " + ir::shape_str(a) + " and " + ir::shape_str(b) + " do not broadcast");
    r[r.size() - 1 - i] = da == 1 ? db : da;
  }
  return r;
}

// The product of sizes taken from the model's attributes or constants (checked).
int64_t checked_prod(const ir::Node& n, const Shape& s) {
  int64_t p = 1;
  for (int64_t d : s) p = mul(n, p, d);
  return p;
}

void infer_unary(InferCtx& c) { c.out(0, c.type(0), c.shape(0)); }
void same_types(InferCtx& c) {
  for (size_t i = 1; i < c.ninputs(); ++i)
    if (c.has(i) && c.type(i) != c.type(0))
      fail(c.n, "inputs have different element types " + ir::elem_type_name(c.type(0)) + " and " +
                    ir::elem_type_name(c.type(i)));
}

Shape broadcast_all(InferCtx& c, size_t from) {
  Shape s = c.shape(from);
  for (size_t i = from + 1; i < c.ninputs(); ++i) s = broadcast(c.n, s, c.shape(i));
  return s;
}

namespace {

const char* kind_name(K k) {
  switch (k) {
    case K::Int: return "an int";
    case K::Float: return "a float";
    case K::String: return "a string";
    case K::Ints: return "a list of ints";
    case K::Floats: return "a list of floats";
    default: return "a tensor";
  }
}

void check_attrs(const ir::Node& n, const OpDef& rule) {
  for (const auto& [key, attr] : n.attrs) {
    auto it = rule.attrs.find(key);
    if (it == rule.attrs.end()) fail(n, "attribute '" + key + "' is not supported");
    bool ok = attr.kind == it->second;
    if (it->second == K::Other) ok = attr.t_type != 0;  // a tensor
    if (!ok) fail(n, "attribute '" + key + "' must be " + kind_name(it->second));
  }
}

// Fills in the input's dynamic dimensions from `given`, or checks that `given` agrees with its static ones.
void resolve_input(ir::Value& v, const std::vector<int64_t>* given) {
  if (given) {
    bool agrees = !v.has_shape || v.dims.size() == given->size();
    for (size_t i = 0; agrees && v.has_shape && i < given->size(); ++i)
      agrees = !v.dims[i].known() || v.dims[i].size == (*given)[i];
    if (!agrees)
      throw Error("input '" + v.name + "': the given shape " + ir::shape_str(*given) +
                  " does not match the model's " + ir::shape_str(v));
    if (std::any_of(given->begin(), given->end(), [](int64_t d) { return d <= 0; }))
      throw Error("input '" + v.name + "': the given shape " + ir::shape_str(*given) + " has a size below 1");
    if (std::string why = ir::shape_too_large(*given); !why.empty())
      throw Error("input '" + v.name + "': the given " + why);
    v.has_shape = true;
    v.dims.clear();
    for (int64_t d : *given) v.dims.push_back(ir::Dim::sized(d));
    return;
  }
  if (!v.has_shape) throw Error("input '" + v.name + "' has no shape in the model: give its shape");
  for (size_t i = 0; i < v.dims.size(); ++i)
    if (!v.dims[i].known())
      throw Error("input '" + v.name + "' has a dynamic dimension " +
                  (v.dims[i].param.empty() ? std::to_string(i) + " (unnamed)" : "'" + v.dims[i].param + "'") +
                  ": give its shape");
  std::vector<int64_t> dims;
  for (const ir::Dim& d : v.dims) dims.push_back(d.size);
  if (std::any_of(dims.begin(), dims.end(), [](int64_t d) { return d < 0; }))
    throw Error("input '" + v.name + "' has a negative size in the model: " + ir::shape_str(dims));
  if (std::string why = ir::shape_too_large(dims); !why.empty()) throw Error("input '" + v.name + "': " + why);
}

}  // namespace

void check_operators(const ir::Graph& g) {
  std::vector<bool> constant(g.values.size());
  for (size_t v = 0; v < g.values.size(); ++v) constant[v] = g.values[v].is_const;
  std::vector<std::pair<const ir::Node*, std::string>> bad;  // node, what is wrong
  for (const ir::Node& n : g.nodes) {
    const OpDef* def = find_op(n.op);
    const bool inputs_const = std::all_of(n.inputs.begin(), n.inputs.end(), [&](int v) { return v < 0 || constant[v]; });
    const bool folds = def && def->fold && (def->fold_shape_only || inputs_const);
    if (folds)
      for (int o : n.outputs)
        if (o >= 0) constant[o] = true;
    if (!def) bad.emplace_back(&n, "unsupported operator");
    else if (!folds && !def->lowers())
      bad.emplace_back(&n, def->no_lowering ? def->no_lowering
                           : def->fold ? "no lowering for values computed at run time (it folds when its inputs are "
                                         "constants)"
                                       : "no lowering for this operator");
  }
  if (bad.empty()) return;
  if (bad.size() == 1) throw ir::in_model(g, ir::NodeError(*bad[0].first, bad[0].second));
  constexpr size_t kListed = 8;
  std::string list;
  for (size_t i = 0; i < bad.size() && i < kListed; ++i) {
    const ir::Node& n = *bad[i].first;
    const bool unknown = find_op(n.op) == nullptr;
    list += (i ? ", " : "") + std::string("node '") + isa::printable(n.name, 120) + "' (" + isa::printable(n.op) +
            (unknown ? "" : ", on values computed at run time") + ")";
  }
  if (bad.size() > kListed) list += " and " + std::to_string(bad.size() - kListed) + " more";
  throw Error(isa::printable(g.model_name, 200) + ": " + std::to_string(bad.size()) +
              " nodes have unsupported operators: " + list);
}

void infer_node(ir::Graph& g, int node) {
  ir::Node& n = g.nodes[node];
  try {
    const OpDef* def = find_op(n.op);
    if (!def) ir::fail(n, "unsupported operator");
    const OpDef& rule = *def;
    if (n.inputs.size() < rule.min_inputs || n.inputs.size() > rule.max_inputs)
      ir::fail(n, "expected " + std::to_string(rule.min_inputs) +
                      (rule.max_inputs == kManyInputs ? " or more"
                       : rule.max_inputs > rule.min_inputs ? " to " + std::to_string(rule.max_inputs)
                                                           : "") +
                      " inputs, got " + std::to_string(n.inputs.size()));
    if (n.outputs.size() < rule.min_outputs || n.outputs.size() > rule.max_outputs || n.outputs[0] < 0)
      ir::fail(n, "expected " + std::to_string(rule.min_outputs) +
                      (rule.max_outputs == kManyInputs ? " or more"
                       : rule.max_outputs > rule.min_outputs ? " to " + std::to_string(rule.max_outputs)
                                                             : "") +
                      " outputs, got " + std::to_string(n.outputs.size()));
    check_attrs(n, rule);
    for (int id : n.inputs)
      if (id >= 0 && !g.values[id].has_shape) ir::fail(n, "input '" + g.values[id].name + "' has no known shape");
    InferCtx c{g, n};
    rule.infer(c);
  } catch (const ir::NodeError& e) {
    throw ir::in_model(g, e);
  }
}

void infer_shapes(ir::Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  for (const auto& [name, shape] : input_shapes) {
    auto it = g.value_index.find(name);
    if (it == g.value_index.end() || std::find(g.inputs.begin(), g.inputs.end(), it->second) == g.inputs.end()) {
      std::string names;
      for (int in : g.inputs) names += (names.empty() ? "" : ", ") + g.values[in].name;
      throw Error(isa::printable(g.model_name, 200) + ": a shape is given for '" + name +
                  "', which is not an input (inputs: " + names + ")");
    }
  }
  for (int in : g.inputs) {
    auto it = input_shapes.find(g.values[in].name);
    try {
      resolve_input(g.values[in], it == input_shapes.end() ? nullptr : &it->second);
    } catch (const Error& e) {
      throw Error(isa::printable(g.model_name, 200) + ": " + e.what());
    }
  }

  std::vector<bool> folded(g.nodes.size(), false);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    infer_node(g, static_cast<int>(i));
    if (const OpDef* def = find_op(g.nodes[i].op); def && def->expand) {  // replaced by its expansion, inferred next
      std::vector<ir::Node> nodes;
      try {
        nodes = def->expand(g, g.nodes[i]);
      } catch (const ir::NodeError& e) {
        throw ir::in_model(g, e);
      }
      if (nodes.empty()) {  // the node stays as it is
        folded[i] = fold_node(g, static_cast<int>(i));
        continue;
      }
      g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
      g.nodes.insert(g.nodes.begin() + static_cast<std::ptrdiff_t>(i), nodes.begin(), nodes.end());
      folded.resize(g.nodes.size(), false);
      for (ir::Value& v : g.values) v.producer = -1;
      for (size_t k = 0; k < g.nodes.size(); ++k)
        for (int out : g.nodes[k].outputs)
          if (out >= 0) g.values[out].producer = static_cast<int>(k);
      --i;
      continue;
    }
    folded[i] = fold_node(g, static_cast<int>(i));
  }
  remove_nodes(g, folded);
}

}  // namespace tpusim::compiler
