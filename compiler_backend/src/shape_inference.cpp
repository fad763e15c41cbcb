#include "shape_inference.h"

#include <algorithm>
#include <set>
#include <sstream>

#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

using Shape = std::vector<int64_t>;

[[noreturn]] void fail(const ir::Node& n, const std::string& msg) {
  throw Error("node '" + n.name + "' (" + n.op + "): " + msg);
}

std::string num(float f) {
  std::ostringstream s;
  s << f;
  return s.str();
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

Shape infer_matmul(const ir::Node& n, const std::vector<Shape>& in) {
  const Shape &a = in[0], &b = in[1];
  if (a.size() != 2 || b.size() != 2)
    fail(n, "only 2-D operands are supported, got " + ir::shape_str(a) + " and " + ir::shape_str(b));
  if (a[1] != b[0]) fail(n, "inner dimensions differ: " + ir::shape_str(a) + " x " + ir::shape_str(b));
  return {a[0], b[1]};
}

Shape infer_gemm(const ir::Node& n, const std::vector<Shape>& in) {
  if (float alpha = n.attr_float("alpha", 1); alpha != 1) fail(n, "alpha=" + num(alpha) + " is not supported (only 1)");
  if (int64_t t = n.attr_int("transA", 0); t != 0) fail(n, "transA=" + std::to_string(t) + " is not supported");
  int64_t trans_b = n.attr_int("transB", 0);
  if (trans_b != 0 && trans_b != 1) fail(n, "transB=" + std::to_string(trans_b) + " is not supported");
  const Shape &a = in[0], &b = in[1];
  if (a.size() != 2 || b.size() != 2)
    fail(n, "A and B must be 2-D, got " + ir::shape_str(a) + " and " + ir::shape_str(b));
  int64_t k = trans_b ? b[1] : b[0], cols = trans_b ? b[0] : b[1];
  if (a[1] != k)
    fail(n, "inner dimensions differ: A is " + ir::shape_str(a) + ", B is " + ir::shape_str(b) +
                " (transB=" + std::to_string(trans_b) + ")");
  Shape out{a[0], cols};
  if (in.size() == 3) {
    if (float beta = n.attr_float("beta", 1); beta != 1) fail(n, "beta=" + num(beta) + " is not supported (only 1)");
    if (broadcast(n, out, in[2]) != out)
      fail(n, "C of shape " + ir::shape_str(in[2]) + " does not broadcast to " + ir::shape_str(out));
  }
  return out;
}

Shape infer_add(const ir::Node& n, const std::vector<Shape>& in) { return broadcast(n, in[0], in[1]); }
Shape infer_same(const ir::Node&, const std::vector<Shape>& in) { return in[0]; }

// The supported operators: input counts, allowed attributes, and shape function.
struct OpRule {
  size_t min_inputs, max_inputs;
  std::set<std::string> attrs;
  Shape (*infer)(const ir::Node&, const std::vector<Shape>&);
};

const std::map<std::string, OpRule>& op_rules() {
  static const std::map<std::string, OpRule> rules = {
      {"MatMul", {2, 2, {}, infer_matmul}},
      {"Gemm", {2, 3, {"alpha", "beta", "transA", "transB"}, infer_gemm}},
      {"Add", {2, 2, {}, infer_add}},
      {"Relu", {1, 1, {}, infer_same}},
      {"Identity", {1, 1, {}, infer_same}},
  };
  return rules;
}

void check_attrs(const ir::Node& n, const OpRule& rule) {
  for (const auto& [key, attr] : n.attrs) {
    if (!rule.attrs.count(key)) fail(n, "attribute '" + key + "' is not supported");
    bool is_float = key == "alpha" || key == "beta";
    if (attr.kind != (is_float ? ir::Attr::Kind::Float : ir::Attr::Kind::Int))
      fail(n, "attribute '" + key + "' must be " + (is_float ? "a float" : "an int"));
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
}

}  // namespace

void infer_shapes(ir::Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  for (const auto& [name, shape] : input_shapes) {
    auto it = g.value_index.find(name);
    if (it == g.value_index.end() || std::find(g.inputs.begin(), g.inputs.end(), it->second) == g.inputs.end()) {
      std::string names;
      for (int in : g.inputs) names += (names.empty() ? "" : ", ") + g.values[in].name;
      throw Error("a shape is given for '" + name + "', which is not an input of model '" + g.model_name +
                  "' (inputs: " + names + ")");
    }
  }
  for (int in : g.inputs) {
    auto it = input_shapes.find(g.values[in].name);
    resolve_input(g.values[in], it == input_shapes.end() ? nullptr : &it->second);
  }

  for (const ir::Node& n : g.nodes) {
    auto rule_it = op_rules().find(n.op);
    if (rule_it == op_rules().end())
      throw Error("unsupported operator '" + n.op + "' (node '" + n.name + "') in model '" + g.model_name + "'");
    const OpRule& rule = rule_it->second;
    if (n.inputs.size() < rule.min_inputs || n.inputs.size() > rule.max_inputs)
      fail(n, "expected " + std::to_string(rule.min_inputs) +
                  (rule.max_inputs > rule.min_inputs ? " to " + std::to_string(rule.max_inputs) : "") +
                  " inputs, got " + std::to_string(n.inputs.size()));
    if (n.outputs.size() != 1 || n.outputs[0] < 0) fail(n, "expected one output");
    check_attrs(n, rule);
    std::vector<Shape> in;
    for (int id : n.inputs) {
      if (id < 0) fail(n, "an omitted optional input is not supported");
      const ir::Value& v = g.values[id];
      if (v.elem_type != ir::kFloat)
        fail(n, "input '" + v.name + "' has element type " + ir::elem_type_name(v.elem_type) +
                    "; only FLOAT (float32) is supported");
      in.push_back(v.shape());
    }
    ir::Value& out = g.values[n.outputs[0]];
    out.elem_type = ir::kFloat;
    out.has_shape = true;
    out.dims.clear();
    for (int64_t d : rule.infer(n, in)) out.dims.push_back(ir::Dim::sized(d));
  }
}

}  // namespace tpusim::compiler
