#include "onnx_import.h"

#include <onnx/onnx_pb.h>

#include <bit>
#include <cstring>

#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

// Fills `v` (dims, element type, data for FLOAT) from a TensorProto.
void read_tensor(const onnx::TensorProto& t, ir::Value& v) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    throw Error("constant '" + v.name + "' keeps its data in an external file, which is not supported");
  v.is_const = true;
  v.has_shape = true;
  v.elem_type = t.data_type();
  v.dims.clear();
  for (int64_t d : t.dims()) v.dims.push_back(ir::Dim::sized(d));
  if (v.elem_type != ir::kFloat) return;  // kept without data; an error only if an op uses it
  const int64_t n = v.elements();
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * 4)
      throw Error("constant '" + v.name + "': " + std::to_string(t.raw_data().size()) + " bytes of data for " +
                  std::to_string(n) + " float32 elements");
    v.data.resize(n);
    std::memcpy(v.data.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    if (t.float_data_size() != n)
      throw Error("constant '" + v.name + "': " + std::to_string(t.float_data_size()) + " elements of data for " +
                  std::to_string(n) + " float32 elements");
    v.data.assign(t.float_data().begin(), t.float_data().end());
  }
}

ir::Attr read_attr(const onnx::AttributeProto& a) {
  ir::Attr r;
  switch (a.type()) {
    case onnx::AttributeProto_AttributeType_INT: r.kind = ir::Attr::Kind::Int; r.i = a.i(); break;
    case onnx::AttributeProto_AttributeType_FLOAT: r.kind = ir::Attr::Kind::Float; r.f = a.f(); break;
    case onnx::AttributeProto_AttributeType_STRING: r.kind = ir::Attr::Kind::String; r.s = a.s(); break;
    case onnx::AttributeProto_AttributeType_INTS:
      r.kind = ir::Attr::Kind::Ints;
      r.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case onnx::AttributeProto_AttributeType_FLOATS:
      r.kind = ir::Attr::Kind::Floats;
      r.floats.assign(a.floats().begin(), a.floats().end());
      break;
    default: r.kind = ir::Attr::Kind::Other; break;
  }
  return r;
}

// A Constant node's output becomes a constant value.
void read_constant_node(const onnx::NodeProto& n, const std::string& node_name, ir::Value& out) {
  if (n.attribute_size() != 1)
    throw Error("node '" + node_name + "' (Constant): expected exactly one value attribute");
  const onnx::AttributeProto& a = n.attribute(0);
  if (a.name() == "value") {
    read_tensor(a.t(), out);
  } else if (a.name() == "value_float" || a.name() == "value_floats") {
    out.is_const = out.has_shape = true;
    out.elem_type = ir::kFloat;
    if (a.name() == "value_float") {
      out.data = {a.f()};
    } else {
      out.data.assign(a.floats().begin(), a.floats().end());
      out.dims = {ir::Dim::sized(static_cast<int64_t>(out.data.size()))};
    }
  } else {
    throw Error("node '" + node_name + "' (Constant): attribute '" + a.name() + "' is not supported");
  }
}

void read_graph_input(const onnx::ValueInfoProto& in, ir::Value& v) {
  if (!in.type().has_tensor_type()) throw Error("input '" + in.name() + "' is not a tensor");
  const onnx::TypeProto_Tensor& t = in.type().tensor_type();
  v.elem_type = t.elem_type();
  v.has_shape = t.has_shape();
  for (const onnx::TensorShapeProto_Dimension& d : t.shape().dim())
    v.dims.push_back(d.has_dim_value() ? ir::Dim::sized(d.dim_value()) : ir::Dim::dynamic(d.dim_param()));
}

}  // namespace

ir::Graph import_onnx(const std::string& bytes, const std::string& model_name) {
  onnx::ModelProto model;
  if (!model.ParseFromString(bytes))
    throw Error(model_name + ": not a valid ONNX model (protobuf parse failed)");
  if (!model.has_graph()) throw Error(model_name + ": not a valid ONNX model (it has no graph)");
  const onnx::GraphProto& g = model.graph();

  ir::Graph graph;
  graph.model_name = model_name;
  for (const onnx::TensorProto& t : g.initializer()) read_tensor(t, graph.values[graph.value(t.name())]);
  for (const onnx::ValueInfoProto& in : g.input()) {
    int id = graph.value(in.name());
    if (graph.values[id].is_const) continue;  // an initializer listed as an input (older exporters)
    read_graph_input(in, graph.values[id]);
    graph.inputs.push_back(id);
  }

  for (int i = 0; i < g.node_size(); ++i) {
    const onnx::NodeProto& n = g.node(i);
    ir::Node node;
    node.op = n.op_type();
    node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
    for (const std::string& in : n.input()) {
      if (in.empty()) {
        node.inputs.push_back(-1);
        continue;
      }
      auto it = graph.value_index.find(in);
      if (it == graph.value_index.end())
        throw Error("node '" + node.name + "' (" + node.op + ") uses '" + in +
                    "', which no earlier node, input or initializer defines");
      node.inputs.push_back(it->second);
    }
    for (const std::string& out : n.output()) {
      if (out.empty()) {
        node.outputs.push_back(-1);
        continue;
      }
      if (graph.value_index.count(out)) throw Error("value '" + out + "' is defined twice");
      node.outputs.push_back(graph.value(out));
    }
    if (node.op == "Constant") {
      if (node.outputs.size() != 1 || node.outputs[0] < 0)
        throw Error("node '" + node.name + "' (Constant): expected one output");
      read_constant_node(n, node.name, graph.values[node.outputs[0]]);
      continue;
    }
    for (const onnx::AttributeProto& a : n.attribute()) node.attrs[a.name()] = read_attr(a);
    for (int out : node.outputs)
      if (out >= 0) graph.values[out].producer = static_cast<int>(graph.nodes.size());
    graph.nodes.push_back(std::move(node));
  }

  for (const onnx::ValueInfoProto& out : g.output()) {
    auto it = graph.value_index.find(out.name());
    if (it == graph.value_index.end())
      throw Error("output '" + out.name() + "' of model '" + model_name + "' is not computed by any node");
    graph.outputs.push_back(it->second);
  }
  return graph;
}

}  // namespace tpusim::compiler
