// ONNX import: a serialized ModelProto -> the graph IR (graph.h), without shape inference.
#pragma once

#include <string>

#include "graph.h"

namespace tpusim::compiler {

// Throws Error "<model_name>: not a valid ONNX model (...)" on bytes that are not a model, and Error naming the
// node or value for graphs it cannot represent (a value used before it is defined, external constant data, ...).
// Constant nodes become constant values; initializers listed among the inputs are constants, not inputs.
ir::Graph import_onnx(const std::string& bytes, const std::string& model_name);

}  // namespace tpusim::compiler
