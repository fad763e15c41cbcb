// Shape inference and the check that every node is supported (operator, attributes, ranks), with constant folding
// on the way (const_fold.h): shape subgraphs (Shape -> Gather -> Concat -> Reshape) become constants.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph.h"

namespace tpusim::compiler {

// Gives every graph input its full shape (dynamic dimensions from `input_shapes`), then every node output its
// element type and shape, in one sweep in topological order that also evaluates on the host every node whose
// inputs are all constants (and every Shape/Size) — see fold_node — and removes those nodes at the end (so
// Graph::nodes and Value::producer stay consistent). Throws Error, "MODEL: node 'N' (Op): what is wrong", on an
// operator that is not registered, an unsupported attribute value or shape; "MODEL: input 'x' ..." on a dynamic
// input dimension without a given shape, a given shape that contradicts the model, or shapes that do not fit.
//
// The operators: those of the registry (ops.h; each family file ops_<family>.cpp lists its own), with the ONNX
// semantics of opsets 13 to 17 (the older attribute forms of axes/split/starts/pads/min/max are accepted too).
//
// Element types propagate (Shape/Size -> INT64, Cast -> `to`, comparisons -> BOOL, data movement -> the data's).
// Inference records the resolved form of each node in its attributes, for the lowering:
//   Conv/MaxPool/AveragePool: kernel_shape, strides, dilations, pads (all spatial begins, then ends; auto_pad
//     resolved and removed), Conv: group. ConvTranspose: the same and output_padding (pads from auto_pad or
//     output_shape as the ONNX spec derives them; output_shape removed).
//   Resize: scales (Floats, one per axis: the scale the coordinate transformation divides by; 0 when sizes are
//     given, the scale being out / in).
//   Softmax/LogSoftmax/LayerNormalization/Gather/Concat/Flatten/Split/ArgMax/ArgMin: axis (non-negative).
//   CumSum: axis (from its constant input 1, non-negative).
//   ReduceX: axes (non-negative, sorted, all axes when all are reduced), keepdims; a no-op has axes=[] and
//     noop_with_empty_axes=1.
//   Squeeze/Unsqueeze: axes (non-negative, sorted; Unsqueeze's relative to the output rank).
//   Split: split (the sizes). Transpose: perm. Shape: start, end (clamped).
//   Slice: starts, ends, steps, axes for every input axis (starts/ends clamped; ends is -1 for a negative step that
//     runs to the beginning), so element j of axis a is input element starts[a] + j * steps[a].
//   Pad: pads (2 * rank, begins then ends), value (float). Clip: min/max (floats) where given.
void infer_shapes(ir::Graph& g, const std::map<std::string, std::vector<int64_t>>& input_shapes);

// The operators of a model that cannot be compiled, found before any shape is inferred: unknown operators, and
// operators without a lowering (OpDef::lower, rowwise or expand) on nodes whose inputs are not all computable at compile time
// (constants, or values folded from constants). Throws one Error for all of them: "MODEL: node 'N' (Op): what is
// wrong" for one node, "MODEL: K nodes have unsupported operators: node 'A' (Op), node 'B' (Op, on values computed
// at run time), ..." (the first 8, then how many more) for several.
void check_operators(const ir::Graph& g);

// An operator with an expansion (OpDef::expand: Einsum) is replaced by it right after its own inference, and the
// nodes of the expansion are inferred and folded next.
//
// Infers one node (its inputs' shapes known), recording the resolved attributes as above.
void infer_node(ir::Graph& g, int node);

}  // namespace tpusim::compiler
