// Lowering: the shape-inferred, constant-folded graph -> a kernel plan (kernel_plan.h). Each node goes to its
// operator's entry in the registry (ops.h): the family files ops_<family>.cpp hold the lowerings, lowering.h the
// toolbox they share (docs/compiler.md).
//
// What each operator becomes is written at the top of its family's file: ops_matmul.cpp (gemm.s, GEMV on the vector
// unit; Einsum expanded into these), ops_conv.cpp (im2col + gemm.s, depthwise and pooling on the vector unit; 1-D,
// 3-D and transposed convolutions and pooling on the same 2-D core), ops_data.cpp (aliases, strided copies,
// gather.s, CumSum's scan), ops_elementwise.cpp and ops_normalize.cpp (fused row-wise kernels, kernels/rowwise.h),
// ops_resize.cpp (taps moved, weighted on the vector unit); lower_quant.cpp says what INT8 (Options::precision) does
// to matmuls and convolutions.
//
// Storage: activations bf16 where a matmul reads them, f32 where only row-wise kernels do; integer and BOOL values
// computed at run time f32 (exact integers below 2^24); graph inputs f32 (integer inputs int32), graph outputs f32
// (integer and BOOL outputs int32: the runtime has no 64-bit integers), NCHW/row-major.
#pragma once

#include <map>
#include <string>

#include "graph.h"
#include "kernel_plan.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {

// opts.target.symbols: the chip's (MXU_ROWS, MXU_COLS, ...), for weight tiling; opts.precision and
// activation_absmax: int8 quantisation; expose_calibration: extra outputs for calibration runs. Throws Error
// ("MODEL: node 'N' (Op): what is wrong") on anything it cannot lower.
KernelPlan lower(const ir::Graph& g, const Options& opts);

}  // namespace tpusim::compiler
