// Shape arithmetic the compiler's passes share.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tpusim::compiler {

using Shape = std::vector<int64_t>;

// The product of s[from..to) (1 when empty). For shapes that have passed shape inference (they cannot overflow).
int64_t prod(const Shape& s, size_t from = 0, size_t to = SIZE_MAX);
int64_t prod(Shape::const_iterator b, Shape::const_iterator e);
// Row-major element strides of s.
std::vector<int64_t> strides_of(const Shape& s);

}  // namespace tpusim::compiler
