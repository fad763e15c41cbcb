// Kernel selection: fused matmuls -> calls of the kernel library's kernels on HBM buffers. The plan is what
// memory planning (memory_plan.h) places and codegen (codegen.h) assembles.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fusion.h"
#include "graph.h"
#include "tpusim/isa/isa.h"

namespace tpusim::compiler {

struct Buffer {
  enum class Kind { Input, Output, Const, Temp };  // Temp: an intermediate, not declared in the Program
  std::string name;
  Kind kind = Kind::Temp;
  isa::DType dtype = isa::DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // Const only: the bytes, row-major
  uint64_t addr = 0;          // set by plan_memory

  uint64_t bytes() const;
};

struct KernelCall {
  std::string label;                     // source prefix: the node name, or "cast(x)" for an input cast
  std::string kernel;                    // "gemm.s", "cast.s", "vadd.s"
  std::map<std::string, int64_t> params; // defines besides the chip symbols
  std::map<std::string, int> tensors;    // kernel tensor name -> buffer index
};

struct KernelPlan {
  std::vector<Buffer> buffers;  // inputs, then outputs (model order), then constants and temps as first used
  std::vector<KernelCall> calls;
};

// One gemm.s call per fused matmul (IN_DT bf16; OUT_DT f32 for graph outputs, bf16 otherwise); one cast.s call
// (f32 -> bf16) before the first use of each graph input, or of a graph output that a later matmul reads.
// Constant operands become bf16 Const buffers ([k,n], transposed at compile time for transB), biases f32 [n].
// An elementwise Add is one vadd.s call in bf16 (DT_BF16) on the bf16 copies of its operands; when its result is
// a graph output, vadd.s writes a bf16 temporary and a cast.s call (bf16 -> f32) fills the output, both calls
// labelled with the Add node's name.
KernelPlan select_kernels(const ir::Graph& g, const FusedGraph& f);

}  // namespace tpusim::compiler
