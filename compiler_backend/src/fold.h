// Constant folding's host tensors (HostTensor) and the helpers the operators' folding functions share. The folding
// functions live with their operators (ops.h); const_fold.cpp drives them.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "graph.h"
#include "shapes.h"

namespace tpusim::compiler {

// A host tensor: floats for FLOAT, int64 for the integer types and BOOL.
struct HostTensor {
  ir::ElemType type = ir::kFloat;
  std::vector<int64_t> shape;
  std::vector<float> f;
  std::vector<int64_t> i;
  bool fl() const { return type == ir::kFloat; }
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};
using Tensors = std::vector<HostTensor>;

bool is_float_type(ir::ElemType t);         // FLOAT, FLOAT16, DOUBLE, BFLOAT16
int64_t wrap(int64_t v, ir::ElemType t);    // v as integer type t holds it (BOOL: 0 or 1)
// Calls f(index, flat) for every element of shape `s`, row-major.
void for_each_index(const std::vector<int64_t>& s, const std::function<void(const std::vector<int64_t>&, int64_t)>& f);
// The flat offset into `in` (broadcast to `out`'s rank from the right) of output index `idx`.
int64_t bcast_offset(const std::vector<int64_t>& in, const std::vector<int64_t>& in_strides,
                     const std::vector<int64_t>& idx);
// A tensor of shape `out` and src's type whose element at index idx is src's element src_of(idx).
HostTensor map_index(const HostTensor& src, const std::vector<int64_t>& out,
                     const std::function<int64_t(const std::vector<int64_t>&)>& src_of);
double as_double(const HostTensor& t, int64_t k);
std::vector<int64_t> attr_ints(const ir::Node& n, const std::string& k);  // {} when absent
const ir::Attr* attr(const ir::Node& n, const std::string& k);            // nullptr when absent
std::vector<int64_t> out_shape(const ir::Graph& g, const ir::Node& n, size_t k);  // output k's shape
ir::ElemType out_type(const ir::Graph& g, const ir::Node& n, size_t k);

}  // namespace tpusim::compiler
