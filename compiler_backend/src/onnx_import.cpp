#include "onnx_import.h"

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <string_view>
#include <utility>

#include "ops.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/isa.h"

namespace tpusim::compiler {
namespace {

static_assert(std::endian::native == std::endian::little, "ONNX raw_data is little-endian");

// Bytes per element in raw_data for the element types the importer reads; 0 for the others.
size_t elem_bytes(int t) {
  switch (t) {
    case onnx::TensorProto_DataType_BOOL:
    case onnx::TensorProto_DataType_INT8:
    case onnx::TensorProto_DataType_UINT8: return 1;
    case onnx::TensorProto_DataType_INT16:
    case onnx::TensorProto_DataType_UINT16:
    case onnx::TensorProto_DataType_FLOAT16:
    case onnx::TensorProto_DataType_BFLOAT16: return 2;
    case onnx::TensorProto_DataType_FLOAT:
    case onnx::TensorProto_DataType_INT32:
    case onnx::TensorProto_DataType_UINT32: return 4;
    case onnx::TensorProto_DataType_INT64:
    case onnx::TensorProto_DataType_UINT64:
    case onnx::TensorProto_DataType_DOUBLE: return 8;
    default: return 0;
  }
}

bool is_floating(int t) {
  return t == onnx::TensorProto_DataType_FLOAT || t == onnx::TensorProto_DataType_FLOAT16 ||
         t == onnx::TensorProto_DataType_BFLOAT16 || t == onnx::TensorProto_DataType_DOUBLE;
}

float half_to_float(uint16_t h) {
  uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float f;
  if (exp == 0) f = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31) f = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else f = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -f : f;
}

float bf16_to_float(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Element `i` of raw little-endian data of type `t`, as a double (floats) or int64 (integers and BOOL).
double raw_float(const char* p, int t) {
  switch (t) {
    case onnx::TensorProto_DataType_FLOAT: { float f; std::memcpy(&f, p, 4); return f; }
    case onnx::TensorProto_DataType_DOUBLE: { double d; std::memcpy(&d, p, 8); return d; }
    case onnx::TensorProto_DataType_FLOAT16: { uint16_t h; std::memcpy(&h, p, 2); return half_to_float(h); }
    default: { uint16_t h; std::memcpy(&h, p, 2); return bf16_to_float(h); }
  }
}

int64_t raw_int(const char* p, int t) {
  switch (t) {
    case onnx::TensorProto_DataType_BOOL: return *p != 0;
    case onnx::TensorProto_DataType_INT8: return static_cast<int8_t>(*p);
    case onnx::TensorProto_DataType_UINT8: return static_cast<uint8_t>(*p);
    case onnx::TensorProto_DataType_INT16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto_DataType_UINT16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case onnx::TensorProto_DataType_INT32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case onnx::TensorProto_DataType_UINT32: { uint32_t v; std::memcpy(&v, p, 4); return v; }
    default: { int64_t v; std::memcpy(&v, p, 8); return v; }  // INT64, UINT64
  }
}

// A TensorProto's elements: floating types (FLOAT, FLOAT16, BFLOAT16, DOUBLE) as doubles in `f`, integer types
// and BOOL as int64 in `ints`. `what` names the tensor in errors.
void decode_tensor(const onnx::TensorProto& t, const std::string& what, std::vector<double>& f,
                   std::vector<int64_t>& ints) {
  if (t.data_location() == onnx::TensorProto_DataLocation_EXTERNAL)
    throw Error(what + " keeps its data in an external file, which is not supported");
  const int type = t.data_type();
  const size_t bytes = elem_bytes(type);
  if (bytes == 0)
    throw Error(what + " has element type " + ir::elem_type_name(type) + ", which is not supported");
  const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (std::string why = ir::shape_too_large(dims); !why.empty()) throw Error(what + ": " + why);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;  // cannot overflow: checked above
  const bool fl = is_floating(type);
  f.clear();
  ints.clear();
  if (!t.raw_data().empty()) {
    if (t.raw_data().size() != static_cast<size_t>(n) * bytes)
      throw Error(what + ": " + std::to_string(t.raw_data().size()) + " bytes of data for " + std::to_string(n) +
                  " " + ir::elem_type_name(type) + " elements");
    const char* p = t.raw_data().data();
    for (int64_t i = 0; i < n; ++i, p += bytes) {
      if (fl) f.push_back(raw_float(p, type));
      else ints.push_back(raw_int(p, type));
    }
    return;
  }
  int64_t have = 0;
  switch (type) {
    case onnx::TensorProto_DataType_FLOAT:
      f.assign(t.float_data().begin(), t.float_data().end());
      have = t.float_data_size();
      break;
    case onnx::TensorProto_DataType_DOUBLE:
      f.assign(t.double_data().begin(), t.double_data().end());
      have = t.double_data_size();
      break;
    case onnx::TensorProto_DataType_INT64:
      ints.assign(t.int64_data().begin(), t.int64_data().end());
      have = t.int64_data_size();
      break;
    case onnx::TensorProto_DataType_UINT32:
    case onnx::TensorProto_DataType_UINT64:
      for (uint64_t v : t.uint64_data()) ints.push_back(static_cast<int64_t>(v));
      have = t.uint64_data_size();
      break;
    default:  // int32_data: INT32, INT16, INT8, UINT16, UINT8, BOOL, and FLOAT16/BFLOAT16 as bit patterns
      have = t.int32_data_size();
      for (int32_t v : t.int32_data()) {
        if (type == onnx::TensorProto_DataType_FLOAT16) f.push_back(half_to_float(static_cast<uint16_t>(v)));
        else if (type == onnx::TensorProto_DataType_BFLOAT16) f.push_back(bf16_to_float(static_cast<uint16_t>(v)));
        else if (type == onnx::TensorProto_DataType_BOOL) ints.push_back(v != 0);
        else ints.push_back(v);
      }
      break;
  }
  if (have != n)
    throw Error(what + ": " + std::to_string(have) + " elements of data for " + std::to_string(n) + " " +
                ir::elem_type_name(type) + " elements");
}

// Fills `v` (dims, element type, elements) from a TensorProto. Floating constants become FLOAT (float32) with
// their elements in `data` (FLOAT16, BFLOAT16 and DOUBLE converted); integer and BOOL constants keep their type,
// the elements in `ints`.
void read_tensor(const onnx::TensorProto& t, ir::Value& v) {
  std::vector<double> f;
  decode_tensor(t, "constant '" + v.name + "'", f, v.ints);
  v.is_const = true;
  v.has_shape = true;
  v.elem_type = is_floating(t.data_type()) ? ir::kFloat : t.data_type();
  v.dims.clear();
  for (int64_t d : t.dims()) v.dims.push_back(ir::Dim::sized(d));
  if (t.data_type() == onnx::TensorProto_DataType_FLOAT && !t.raw_data().empty()) {  // the common case, exactly
    v.data.resize(f.size());
    std::memcpy(v.data.data(), t.raw_data().data(), t.raw_data().size());
  } else {
    v.data.assign(f.begin(), f.end());
  }
}

ir::Attr read_attr(const onnx::AttributeProto& a, const std::string& node_name) {
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
    case onnx::AttributeProto_AttributeType_TENSOR: {
      r.kind = ir::Attr::Kind::Other;
      std::vector<int64_t> ints;
      decode_tensor(a.t(), "attribute '" + a.name() + "' of node '" + node_name + "'", r.t, ints);
      if (!is_floating(a.t().data_type())) r.t.assign(ints.begin(), ints.end());
      r.t_type = is_floating(a.t().data_type()) ? ir::kFloat : a.t().data_type();
      r.t_dims.assign(a.t().dims().begin(), a.t().dims().end());
      break;
    }
    default: r.kind = ir::Attr::Kind::Other; break;
  }
  return r;
}

// A Constant node's output becomes a constant value.
void read_constant_node(const onnx::NodeProto& n, const std::string& node_name, ir::Value& out) {
  if (n.attribute_size() != 1)
    throw Error("node '" + node_name + "' (Constant): expected exactly one value attribute");
  const onnx::AttributeProto& a = n.attribute(0);
  out.is_const = out.has_shape = true;
  out.dims.clear();
  if (a.name() == "value") {
    read_tensor(a.t(), out);
  } else if (a.name() == "value_float") {
    out.elem_type = ir::kFloat;
    out.data = {a.f()};
  } else if (a.name() == "value_floats") {
    out.elem_type = ir::kFloat;
    out.data.assign(a.floats().begin(), a.floats().end());
    out.dims = {ir::Dim::sized(static_cast<int64_t>(out.data.size()))};
  } else if (a.name() == "value_int") {
    out.elem_type = ir::kInt64;
    out.ints = {a.i()};
  } else if (a.name() == "value_ints") {
    out.elem_type = ir::kInt64;
    out.ints.assign(a.ints().begin(), a.ints().end());
    out.dims = {ir::Dim::sized(static_cast<int64_t>(out.ints.size()))};
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


// ---- weights left in the file until they are read --------------------------------------------------------------
// The large FLOAT initializers' raw_data are cut out of the serialized model before protobuf parses it (a ResNet-50
// is 100 MB of weights around 30 KB of graph; parsed, each would be a copy), then read from the file's bytes into
// their values once, or not at all in a timing-only compile, which reads no weight values: a walk of
// the protobuf wire format (ModelProto.graph = 7, GraphProto.initializer = 5, TensorProto.data_type = 2,
// .name = 8, .raw_data = 9, .data_location = 14) that copies everything else, with the lengths of the enclosing
// messages recomputed. Where each cut tensor's bytes lie in the source is remembered, and its values are read from
// there (in a timing-only compile only where the lowering needs them: not a weight of a Conv, MatMul or Gemm).
constexpr uint64_t kElideBytes = 16 << 10;  // smaller tensors (biases, norms, shapes) keep their values

struct Wire {
  const char* p;
  const char* end;
  std::string_view model;  // for errors
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) throw Error(std::string(model) + ": not a valid ONNX model (truncated varint)");
      const uint8_t b = static_cast<uint8_t>(*p++);
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw Error(std::string(model) + ": not a valid ONNX model (bad varint)");
  }
  // Skips a field's value of wire type `wt`; returns [begin, end) of a LEN field's payload.
  std::string_view value(uint32_t wt) {
    const char* b = p;
    switch (wt) {
      case 0: varint(); return {};
      case 1: b = p, p += 8; break;
      case 5: b = p, p += 4; break;
      case 2: {
        const uint64_t n = varint();
        if (n > static_cast<uint64_t>(end - p)) throw Error(std::string(model) + ": not a valid ONNX model (truncated field)");
        b = p, p += n;
        return {b, static_cast<size_t>(n)};
      }
      default: throw Error(std::string(model) + ": not a valid ONNX model (wire type " + std::to_string(wt) + ")");
    }
    if (p > end) throw Error(std::string(model) + ": not a valid ONNX model (truncated field)");
    return {};
  }
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) out += static_cast<char>((v & 0x7f) | 0x80), v >>= 7;
  out += static_cast<char>(v);
}

// Copies message [p, end) field by field; `rewrite(field, payload, out)` may replace a LEN field (returns true
// when it wrote the field itself).
template <typename F>
std::string copy_message(std::string_view msg, std::string_view model, F&& rewrite) {
  std::string out;
  out.reserve(msg.size() < (1 << 20) ? msg.size() : 1 << 16);
  Wire w{msg.data(), msg.data() + msg.size(), model};
  while (w.p < w.end) {
    const char* field_begin = w.p;
    const uint64_t key = w.varint();
    const uint32_t wt = key & 7;
    const uint64_t field = key >> 3;
    const std::string_view payload = w.value(wt);
    if (wt == 2 && rewrite(field, payload, out)) continue;
    out.append(field_begin, static_cast<size_t>(w.p - field_begin));
  }
  return out;
}

void put_len_field(std::string& out, uint64_t field, const std::string& payload) {
  put_varint(out, field << 3 | 2);
  put_varint(out, payload.size());
  out += payload;
}

// `bytes` with the large FLOAT initializers' raw_data cut out; `cut` gets name -> the data's place in `bytes`.
std::string strip_weights(std::string_view bytes, const std::string& model,
                          std::map<std::string, std::pair<uint64_t, uint64_t>>& cut) {
  auto tensor = [&](std::string_view t) -> std::string {
    // The tensor's type, name, location and raw data.
    Wire w{t.data(), t.data() + t.size(), model};
    uint64_t type = 0, location = 0;
    std::string name;
    std::string_view raw;
    while (w.p < w.end) {
      const uint64_t key = w.varint();
      if (key == (2 << 3 | 0)) type = w.varint();
      else if (key == (14 << 3 | 0)) location = w.varint();
      else if (key == (8 << 3 | 2)) name.assign(w.value(2));
      else if (key == (9 << 3 | 2)) raw = w.value(2);
      else w.value(key & 7);
    }
    if (type != onnx::TensorProto_DataType_FLOAT || location != 0 || raw.size() < kElideBytes || name.empty() ||
        cut.count(name))
      return std::string(t);
    cut[name] = {static_cast<uint64_t>(raw.data() - bytes.data()), raw.size()};
    return copy_message(t, model, [](uint64_t field, std::string_view, std::string&) { return field == 9; });
  };
  auto graph = [&](std::string_view g) {
    return copy_message(g, model, [&](uint64_t field, std::string_view payload, std::string& out) {
      if (field != 5) return false;
      put_len_field(out, 5, tensor(payload));
      return true;
    });
  };
  return copy_message(bytes, model, [&](uint64_t field, std::string_view payload, std::string& out) {
    if (field != 7) return false;
    put_len_field(out, 7, graph(payload));
    return true;
  });
}

// The values a lowering reads only to lay out weights (a timing-only compile skips that): OpDef::weight_input.
bool weight_use(const ir::Graph& g, const ir::Node& n, size_t input) {
  const OpDef* def = find_op(n.op);
  return def && def->weight_input && def->weight_input(g, n, input);
}

}  // namespace

ir::Graph import_onnx(std::string_view bytes, const std::string& model_name, bool timing_only) {
  std::map<std::string, std::pair<uint64_t, uint64_t>> cut;  // initializer -> where its raw_data is in `bytes`
  std::string stripped;
  try {
    stripped = strip_weights(bytes, model_name, cut);
  } catch (const Error&) {
    cut.clear();  // not a model the walk understands: protobuf's parse below says what is wrong
    stripped.clear();
  }
  const std::string_view parsed = !stripped.empty() ? std::string_view(stripped) : bytes;
  onnx::ModelProto model;
  if (parsed.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !model.ParseFromArray(parsed.data(), static_cast<int>(parsed.size())))
    throw Error(model_name + ": not a valid ONNX model (protobuf parse failed)");
  if (!model.has_graph()) throw Error(model_name + ": not a valid ONNX model (it has no graph)");
  const onnx::GraphProto& g = model.graph();
  int64_t opset = 0;  // of the default (ai.onnx) domain
  for (const onnx::OperatorSetIdProto& o : model.opset_import())
    if (o.domain().empty() || o.domain() == "ai.onnx") opset = o.version();
  if (opset < kMinOpset || opset > kMaxOpset)
    throw Error(model_name + ": opset " + std::to_string(opset) + " of the ONNX operators is not supported (" +
                std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + " are; re-export the model with one)");

  ir::Graph graph;
  graph.model_name = model_name;
  std::vector<int> elided;
  for (int i = 0; i < g.initializer_size(); ++i) {
    const onnx::TensorProto& t = g.initializer(i);
    if (t.name().empty()) throw Error(model_name + ": initializer " + std::to_string(i) + " has an empty name");
    ir::Value& v = graph.values[graph.value(t.name())];
    auto c = cut.find(t.name());
    if (c == cut.end() || !t.raw_data().empty()) {
      read_tensor(t, v);
      continue;
    }
    // Cut out: the shape and type now, the values only if a use other than a weight's needs them (below).
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    if (std::string why = ir::shape_too_large(dims); !why.empty()) throw Error("constant '" + v.name + "': " + why);
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    if (c->second.second != static_cast<uint64_t>(n) * 4)
      throw Error("constant '" + v.name + "': " + std::to_string(c->second.second) + " bytes of data for " +
                  std::to_string(n) + " FLOAT elements");
    v.is_const = v.has_shape = true;
    v.elem_type = ir::kFloat;
    v.dims.clear();
    for (int64_t d : dims) v.dims.push_back(ir::Dim::sized(d));
    elided.push_back(graph.value(t.name()));
  }
  for (int i = 0; i < g.input_size(); ++i) {
    const onnx::ValueInfoProto& in = g.input(i);
    // ONNX names every graph input (an empty name means "absent" only among a node's inputs); a program's tensors
    // are found by name, so a nameless one could be neither given nor written.
    if (in.name().empty()) throw Error(model_name + ": graph input " + std::to_string(i) + " has an empty name");
    int id = graph.value(in.name());
    if (graph.values[id].is_const) continue;  // an initializer listed as an input (older exporters)
    if (std::find(graph.inputs.begin(), graph.inputs.end(), id) != graph.inputs.end())
      throw Error(model_name + ": two inputs are named '" + isa::printable(in.name()) + "'");
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
        throw ir::in_model(graph, ir::NodeError(node, "uses '" + isa::printable(in) +
                                                          "', which no earlier node, input or initializer defines"));
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
        throw ir::in_model(graph, ir::NodeError(node, "expected one output"));
      read_constant_node(n, node.name, graph.values[node.outputs[0]]);
      continue;
    }
    for (const onnx::AttributeProto& a : n.attribute()) node.attrs[a.name()] = read_attr(a, node.name);
    if (opset > 0 && opset < 13 && (node.op == "Softmax" || node.op == "LogSoftmax"))
      throw ir::in_model(graph, ir::NodeError(node, "the opset " + std::to_string(opset) +
                                                        " form (input coerced to 2-D) is not supported; export with "
                                                        "opset 13 or later"));
    for (int out : node.outputs)
      if (out >= 0) graph.values[out].producer = static_cast<int>(graph.nodes.size());
    graph.nodes.push_back(std::move(node));
  }

  for (const onnx::ValueInfoProto& out : g.output()) {
    auto it = graph.value_index.find(out.name());
    if (it == graph.value_index.end())
      throw Error("output '" + isa::printable(out.name()) + "' of model '" + model_name + "' is not computed by any node");
    // A program's tensors have one role each: an output that is an input too is passed through by no node.
    if (std::find(graph.inputs.begin(), graph.inputs.end(), it->second) != graph.inputs.end())
      throw Error("output '" + isa::printable(out.name()) + "' of model '" + model_name +
                  "' is also an input (it is computed by no node; an Identity node makes a copy)");
    if (std::find(graph.outputs.begin(), graph.outputs.end(), it->second) != graph.outputs.end())
      throw Error(model_name + ": two outputs are named '" + isa::printable(out.name()) + "'");
    graph.outputs.push_back(it->second);
  }

  // A cut-out constant's values are read from `bytes` now, once, except in a timing-only compile where every use
  // is a weight's: its data then stays empty, which the lowering takes as "timing-only: lay out, do not fill".
  for (int id : elided) {
    ir::Value& v = graph.values[id];
    if (timing_only) {
      bool weights_only = std::find(graph.outputs.begin(), graph.outputs.end(), id) == graph.outputs.end();
      for (const ir::Node& n : graph.nodes)
        for (size_t i = 0; i < n.inputs.size(); ++i)
          if (n.inputs[i] == id && !weight_use(graph, n, i)) weights_only = false;
      if (weights_only) continue;
    }
    const auto& [offset, size] = cut.at(v.name);
    v.data.resize(size / 4);
    if (size > 0) std::memcpy(v.data.data(), bytes.data() + offset, size);
  }
  return graph;
}

}  // namespace tpusim::compiler
