// Canonicalisation and fusion: the shape-inferred graph -> a list of fused matmuls, the unit the kernel
// library's gemm.s computes: out = relu?(a @ b + bias?).
//
// Identity nodes are aliased away and nodes that no graph output needs are dropped. MatMul and Gemm become a
// FusedMatMul (Gemm's C, a constant, becomes the bias); an Add of a constant bias [N] / [1,N] to a matmul's only
// use folds into its bias, and a Relu of a matmul's only use sets `relu`. An Add of two activations of the same
// shape (a residual connection) becomes an op of kind Add: out = a + b, elementwise. A broadcasting Add of two
// activations, and anything else, is an Error naming the node.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "graph.h"

namespace tpusim::compiler {

struct FusedMatMul {
  enum class Kind { MatMul, Add };  // Add: out = a + b elementwise (same shapes); only name, a, b, out are set
  Kind kind = Kind::MatMul;
  std::string name;          // the MatMul/Gemm node (the Add node for kind Add)
  std::vector<std::string> fused;  // the Add and Relu nodes folded into it, in order
  int a = -1, b = -1;        // operand values, [m,k] and [k,n] ([n,k] when transpose_b)
  bool transpose_b = false;  // only for a constant b (transposed at compile time)
  int64_t m = 0, k = 0, n = 0;
  std::vector<float> bias;   // empty, or n elements (constant biases of the fused adds, summed)
  std::string bias_name;     // the (first) bias constant's name
  bool relu = false;
  int out = -1;              // the value the fused op computes
};

struct FusedGraph {
  std::vector<FusedMatMul> ops;  // in execution order
  struct Output {
    std::string name;  // the graph output's name
    int value;         // the op result it is (after Identity aliasing)
  };
  std::vector<Output> outputs;
};

FusedGraph fuse(const ir::Graph& g);

}  // namespace tpusim::compiler
