// Residual connections fused into the GEMM before them (fuse_epilogue.cpp): a pass over the kernel plan, after the
// lowering and before memory planning.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "kernel_plan.h"

namespace tpusim::compiler {

// A row-wise call computing Add(x, r) or Relu(Add(x, r)) over whole tensors, where x is the output of a gemm.s call
// that only it reads, becomes that gemm.s call with RESIDUAL (and RES_RELU): the GEMM adds r to each tile it drains
// and writes the Add's output; x is never written. The gemm.s call must be the later of the two values' producers,
// no call between the two may touch x, r or the Add's output, r may not be one of the GEMM's own operands, and x, r
// and the output must be of the GEMM's output type. The results are the same bits (gemm.s: RESIDUAL adds in f32
// and rounds as the row-wise kernel does). An Add that also writes its sum's int8 copy (an int8 model's residual,
// feeding the next int8 GEMM) fuses into an int8 GEMM (DEQUANT) as RESIDUAL with Q_SCALE, which only gemm_chip
// runs (codegen runs such a call as gemm_chip on any chip): where gemm_chip can run it (`symbols`: the chip's).
// Returns the number of Adds fused.
int fuse_residual_adds(KernelPlan& plan, const std::map<std::string, int64_t>& symbols);

// A row-wise call that is elementwise in its one f32 input (rowwise::is_elementwise: a GELU, SiLU, ...), where that
// input is the whole f32 output of a gemm.s call that only it reads, becomes the GEMM's activation (ACT: the call's
// rows hold the program; kernels::GemmChip::act), which writes the row-wise call's output instead: the activation
// runs in the drain, overlapping the GEMM's loads and matrix work, and the GEMM's f32 output is never written. Only
// gemm_chip has the epilogue (codegen runs a call with one as gemm_chip on any chip, one matrix unit included):
// fused where gemm_chip can run the call (`symbols`: the chip's). The same bits (rowwise::epilogue). Returns the
// number fused.
int fuse_activations(KernelPlan& plan, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::compiler
