// Sibling matmuls fused into one GEMM (fuse_siblings.cpp): a graph pass after constant folding.
#pragma once

#include "graph.h"

namespace tpusim::compiler {

// MatMuls reading one activation with constant [K, N_i] weights of the same K, each alone or each followed by a
// constant bias Add of [N_i] (and none followed by a Relu, which its GEMM's epilogue would take), become one MatMul
// on [K, sum N_i] (+ one Add) and a Split of the last axis into the original values: the same bits, one GEMM.
void fuse_sibling_matmuls(ir::Graph& g);

}  // namespace tpusim::compiler
