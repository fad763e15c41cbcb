// Lowering: the shape-inferred, constant-folded graph -> a kernel plan (kernel_plan.h).
//
// What each operator becomes:
//  - MatMul / Gemm with a constant right operand: one gemm.s call in bf16 (f32 accumulation), weights tiled at
//    compile time (B_TILED); a following Add of a constant [N] vector folds into its bias and a following Relu
//    into RELU. Both operands activations (attention): one gemm.s call per batch index; a right operand that is
//    a Transpose of the last two axes is read transposed (TRANS_B) instead of being copied.
//  - Conv (+ BatchNormalization + Relu folded): activations are NHWC inside the program. 1x1 stride-1 convs are a
//    gemm on the activation itself; others copy the padded input into an im2col matrix (kernels/copy.h, one
//    strided move per image and tap, over a "virtual" output width Wv = Wp/stride so that a tap is one regular
//    stride) and run gemm.s on it, then drop the Wv - OW overhanging columns. Depthwise convs run on the vector
//    unit (a row-wise kernel summing tap x weight); other grouped convs run one gemm per group.
//  - MaxPool / AveragePool: taps copied as for im2col, reduced by a row-wise kernel; GlobalAveragePool (and
//    ReduceMean over H, W): a gemm of a row of ones with each image, scaled by 1/HW.
//  - Elementwise ops with broadcasting, activations, Softmax, LayerNormalization and reductions over the last
//    axis: consecutive runs of them form one generated row-wise kernel (kernels/rowwise.h), computing in f32
//    (decomposed LayerNorm and GELU chains fuse into one kernel this way).
//  - Reshape, Flatten, Squeeze, Unsqueeze, Identity, Dropout: aliases. Transpose, Slice, Split, Concat, Expand,
//    Pad, Gather with constant indices: strided copies. Gather of a constant table by runtime indices: gather.s.
//  - INT8 (Options::precision): a quantised MatMul/Gemm/Conv casts its input to int8 (cast.s, scale 127/absmax),
//    runs gemm.s int8 -> int32 on int8 weights (per output channel scales), and a row-wise kernel dequantises
//    (acc * s_a * s_w[n] + bias, ReLU) into the usual storage type.
// Storage: activations bf16 where a matmul reads them, f32 where only row-wise kernels do; graph inputs and
// outputs f32 (integer inputs int32), NCHW/row-major.
#pragma once

#include <map>
#include <string>

#include "graph.h"
#include "kernel_plan.h"
#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {

// opts.target.symbols: the chip's (MXU_ROWS, MXU_COLS, ...), for weight tiling; opts.precision and
// activation_absmax: int8 quantisation; expose_calibration: extra outputs for calibration runs. Throws Error naming
// the node on anything it cannot lower.
KernelPlan lower(const ir::Graph& g, const Options& opts);

}  // namespace tpusim::compiler
