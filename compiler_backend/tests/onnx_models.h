// Small ONNX models for the compiler's tests, built with the ONNX protobuf API.
#pragma once

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tpusim::compiler::test {

// A dimension: a size, or a named dynamic one ("batch").
struct D {
  int64_t size = -1;
  std::string param;
  D(int64_t s) : size(s) {}  // NOLINT: implicit on purpose, {8, 64} reads well
  D(const char* p) : param(p) {}
};

class ModelBuilder {
 public:
  ModelBuilder() {
    m_.set_ir_version(7);
    m_.add_opset_import()->set_version(13);
    m_.mutable_graph()->set_name("test");
  }

  ModelBuilder& input(const std::string& name, std::vector<D> dims) {
    add_value_info(m_.mutable_graph()->add_input(), name, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name, std::vector<D> dims = {}) {
    add_value_info(m_.mutable_graph()->add_output(), name, dims);
    return *this;
  }
  // A float initializer; `raw` stores it as raw_data, else as float_data.
  ModelBuilder& constant(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& data,
                         bool raw = true) {
    onnx::TensorProto* t = m_.mutable_graph()->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto_DataType_FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    if (raw) t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), data.size() * 4));
    else for (float f : data) t->add_float_data(f);
    return *this;
  }
  onnx::NodeProto* node(const std::string& op, const std::string& name, std::vector<std::string> inputs,
                        std::vector<std::string> outputs) {
    onnx::NodeProto* n = m_.mutable_graph()->add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (const auto& in : inputs) n->add_input(in);
    for (const auto& out : outputs) n->add_output(out);
    return n;
  }
  std::string bytes() const { return m_.SerializeAsString(); }
  onnx::ModelProto& proto() { return m_; }

 private:
  static void add_value_info(onnx::ValueInfoProto* v, const std::string& name, const std::vector<D>& dims) {
    v->set_name(name);
    onnx::TypeProto_Tensor* t = v->mutable_type()->mutable_tensor_type();
    t->set_elem_type(onnx::TensorProto_DataType_FLOAT);
    onnx::TensorShapeProto* s = t->mutable_shape();
    for (const D& d : dims) {
      auto* dim = s->add_dim();
      if (d.size >= 0) dim->set_dim_value(d.size);
      else if (!d.param.empty()) dim->set_dim_param(d.param);
    }
  }

  onnx::ModelProto m_;
};

inline void set_int(onnx::NodeProto* n, const std::string& name, int64_t v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INT);
  a->set_i(v);
}
inline void set_float(onnx::NodeProto* n, const std::string& name, float v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_FLOAT);
  a->set_f(v);
}

// Deterministic, varied values: 0.01 * (i * 37 % 101 - 50) + offset.
inline std::vector<float> ramp(size_t n, float offset = 0) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.01f * static_cast<float>(static_cast<int>(i * 37 % 101) - 50) + offset;
  return v;
}

// y = Gemm(x[M,K], w[N,K], b[N], transB=1): a torch Linear layer. With `batch`, x's first dimension is that
// dynamic one instead of M.
inline ModelBuilder linear_model(int64_t m, int64_t k, int64_t n, const char* batch = nullptr) {
  ModelBuilder b;
  b.input("x", {batch ? D(batch) : D(m), k}).output("y", {batch ? D(batch) : D(m), n});
  b.constant("w", {n, k}, ramp(n * k)).constant("b", {n}, ramp(n, 0.5f));
  onnx::NodeProto* fc = b.node("Gemm", "fc", {"x", "w", "b"}, {"y"});
  set_float(fc, "alpha", 1);
  set_float(fc, "beta", 1);
  set_int(fc, "transB", 1);
  return b;
}

}  // namespace tpusim::compiler::test

// ---- integer constants, list/string attributes, input element types, opsets (import/shape-inference tests) ----
namespace tpusim::compiler::test {

// An integer or BOOL initializer (INT64 by default); `raw` stores raw_data, else int64_data / int32_data.
inline void int_constant(ModelBuilder& b, const std::string& name, std::vector<int64_t> dims,
                         const std::vector<int64_t>& data, int type = onnx::TensorProto_DataType_INT64,
                         bool raw = true) {
  onnx::TensorProto* t = b.proto().mutable_graph()->add_initializer();
  t->set_name(name);
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  if (raw) {
    std::string bytes;
    for (int64_t v : data) {
      if (type == onnx::TensorProto_DataType_INT64) bytes.append(reinterpret_cast<const char*>(&v), 8);
      else if (type == onnx::TensorProto_DataType_INT32) {
        int32_t w = static_cast<int32_t>(v);
        bytes.append(reinterpret_cast<const char*>(&w), 4);
      } else {
        bytes.push_back(static_cast<char>(v));  // BOOL, INT8, UINT8
      }
    }
    t->set_raw_data(bytes);
  } else if (type == onnx::TensorProto_DataType_INT64) {
    for (int64_t v : data) t->add_int64_data(v);
  } else {
    for (int64_t v : data) t->add_int32_data(static_cast<int32_t>(v));
  }
}
inline void set_ints(onnx::NodeProto* n, const std::string& name, const std::vector<int64_t>& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_INTS);
  for (int64_t x : v) a->add_ints(x);
}
inline void set_string(onnx::NodeProto* n, const std::string& name, const std::string& v) {
  onnx::AttributeProto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto_AttributeType_STRING);
  a->set_s(v);
}
// Sets the element type of graph input `name` (ModelBuilder::input makes FLOAT ones).
inline void set_input_type(ModelBuilder& b, const std::string& name, int type) {
  for (auto& in : *b.proto().mutable_graph()->mutable_input())
    if (in.name() == name) in.mutable_type()->mutable_tensor_type()->set_elem_type(type);
}
inline void set_opset(ModelBuilder& b, int64_t version) { b.proto().mutable_opset_import(0)->set_version(version); }

}  // namespace tpusim::compiler::test
