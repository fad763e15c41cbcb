// GELU as exporters write it, recognised as one Gelu node (fuse_gelu.cpp): a graph pass after constant folding.
#pragma once

#include "graph.h"

namespace tpusim::compiler {

// The elementwise chains that torch and Hugging Face export for GELU below opset 20 (which has no Gelu operator)
// become one Gelu node on their input x, named after the nodes it replaces ("div+erf+add+mul+mul_1", or the first
// and last, "A+...+B", past 120 characters, as row-wise kernels are labelled):
//   erf form:  0.5 * x * (1 + erf(x / sqrt2))                        -> Gelu(x)
//   tanh form: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))  -> Gelu(x, approximate="tanh")
// with x / sqrt2 as Div or as Mul by 1/sqrt2, x^3 as Pow(x, 3) or x * x * x, the product 0.5 * x * (...) in any
// association and order, and the constants scalars within 1e-6 of those values. Each intermediate value must have
// one user, not be a graph output and have x's shape (no broadcasting). The row-wise kernels then evaluate GELU
// in 4 vector instructions (erf form, with vpu.erfc) and 9 (tanh form) instead of the chain's 26 and 14.
void fuse_gelu(ir::Graph& g);

}  // namespace tpusim::compiler
