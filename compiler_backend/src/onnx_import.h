// ONNX import: a serialized ModelProto -> the graph IR (graph.h), without shape inference.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "graph.h"

namespace tpusim::compiler {

// The versions of the default (ai.onnx) operator set the import reads: 7 (the first with today's broadcasting)
// to 18 (the newest the tests export; later opsets change operators, e.g. Pad and Resize in 19). Others are
// refused, naming the range.
inline constexpr int64_t kMinOpset = 7;
inline constexpr int64_t kMaxOpset = 18;

// Throws Error "<model_name>: not a valid ONNX model (...)" on bytes that are not a model, and Error naming the
// node or value for graphs it cannot represent (a value used before it is defined, external constant data, ...).
// Constant nodes become constant values; initializers listed among the inputs are constants, not inputs.
// `timing_only` (compiler::Options::timing_only): FLOAT initializers of 16 KiB or more that serve only as weights
// (input 1 of Conv, of MatMul and Gemm on a computed input) are imported without their values (data left empty,
// shape and type set); their bytes are never copied out of `bytes`.
ir::Graph import_onnx(std::string_view bytes, const std::string& model_name, bool timing_only = false);

}  // namespace tpusim::compiler
