// Constant folding and dead-code removal on the graph IR. infer_shapes (shape_inference.h) folds as it goes; run
// fold_constants after it to bypass Identity/Dropout and drop what no graph output needs.
#pragma once

#include <vector>

#include "graph.h"

namespace tpusim::compiler {

// Evaluates node `node` on the host when every input present is a constant — or it is Shape/Size, which need only
// the static shape — and its operator is one of: Identity Dropout Shape Size Cast Reshape Flatten Squeeze Unsqueeze
// Transpose Gather Concat Split Slice Expand Tile Pad ConstantOfShape Range Trilu, Neg Abs Sqrt Reciprocal Relu Not
// Clip, Add Sub Mul Div Pow Max Min, Equal Less Greater LessOrEqual GreaterOrEqual And Or Xor, Where. Float
// arithmetic is float32, one operation at a time, as torch does it; integer Div truncates. Its outputs become
// constants (is_const, producer -1, `data` for FLOAT, `ints` for integer and BOOL types; a Cast to DOUBLE gives
// FLOAT). Returns whether it folded; the node is then dead (remove_nodes drops it). infer_node must have run on the
// node (fold_node reads its output shapes and resolved attributes). Outputs over 16M elements are not folded.
bool fold_node(ir::Graph& g, int node);

// Drops the nodes with remove[i] set, keeping the order of the others, and recomputes every Value::producer.
void remove_nodes(ir::Graph& g, const std::vector<bool>& remove);

// After infer_shapes: folds whatever is still foldable, bypasses Identity and Dropout (consumers read the input; a
// graph output keeps its name: its producer then writes it directly, and only an Identity/Dropout from a graph input
// or constant to a graph output stays), removes nodes no graph output depends on, and values nothing uses (value
// indices are renumbered; Graph::inputs stay, all of them). Graph::nodes stays topologically ordered and every
// Value::producer correct.
void fold_constants(ir::Graph& g);

}  // namespace tpusim::compiler
