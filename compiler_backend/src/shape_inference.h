// Shape inference and the check that every node is supported (operator, attributes, element types, ranks).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph.h"

namespace tpusim::compiler {

// Gives every graph input its full shape (dynamic dimensions from `input_shapes`), then every node output its
// element type and shape. Throws Error on an unsupported operator or attribute value, a dynamic input dimension
// without a given shape, a given shape that contradicts the model, non-float32 data, or shapes that do not fit.
void infer_shapes(ir::Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes);

}  // namespace tpusim::compiler
