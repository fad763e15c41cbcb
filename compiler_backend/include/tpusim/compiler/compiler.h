// The compiler backend: ONNX model -> isa::Program (kernel fragments from the kernel library and generated
// kernels, concatenated).
//
// Supported: the operators of torchvision classification CNNs and transformer encoders/decoders exported at
// opsets 13 to 17 (shape_inference.h lists them; lower.h says what each becomes), with shape subgraphs folded at
// compile time. Matmuls and convolutions run in bf16 with f32 accumulation by default (weights rounded to bf16 at
// compile time, round-to-nearest-even), or int8 (Options::precision); elementwise work is f32 on the vector
// unit. Graph inputs and outputs are float32 in HBM (integer inputs, e.g. token ids, int32).
//
// The Program declares the model's inputs and outputs and its constants (weights tiled for gemm.s, biases and
// other constants, bytes in Program::const_data); intermediates live in HBM after them and are not declared. To
// run it: write every Const tensor's bytes and every input at its addr, run, read the outputs at theirs.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpusim/isa/program.h"

namespace tpusim::compiler {

// Every error the compiler reports; what() is one line naming the model, node or value concerned.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The chip, as the symbols its kernels are assembled with (MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES, VPU_WIDTH,
// HBM_BYTES; sim::kernel_symbols gives them for a config). HBM_BYTES is required.
struct Target {
  std::map<std::string, int64_t> symbols;
};

enum class Precision { BF16, INT8 };

struct Options {
  Target target;
  // BF16: matmuls and convolutions in bf16 with f32 accumulation. INT8: post-training quantisation of every
  // MatMul/Gemm/Conv with constant weights (groups 1): weights symmetric per output channel (scale
  // max|w| / 127), activations symmetric per tensor (scale absmax / 127, from `activation_absmax`, keyed by the
  // ONNX value name of the matmul's input), int8 x int8 -> int32 on the MXU, dequantised (with bias and ReLU) on
  // the vector unit. Attention's activation x activation matmuls, depthwise/grouped convs and pooling stay bf16.
  Precision precision = Precision::BF16;
  std::map<std::string, float> activation_absmax;
  // Calibration: also declare, as extra f32 outputs named "calib:<value>", every activation an INT8 compile
  // quantises (see calibration_values), so that a run on calibration inputs can measure their ranges.
  bool expose_calibration = false;
  // Shapes of graph inputs, by input name: required for inputs with dynamic dimensions; where given they must
  // agree with the model's static dimensions.
  std::map<std::string, std::vector<int64_t>> input_shapes;
  // A program for timing-only runs (docs/explore.md): the same instructions as a full compile (so the same cycles),
  // without computing what timing never reads. Weights (input 1 of Conv, MatMul, Gemm) of 16 KiB or more are
  // neither read from the model nor converted, transposed, tiled or quantised: their Const tensors are declared
  // but have no data (isa::Program::timing_only). INT8 uses an activation range of 1 for every activation with
  // no calibrated one (the ranges change values, not instructions), so it needs no calibration run.
  bool timing_only = false;
  // On a chip of one core with at least kMinLocalVmem bytes of VMEM, keep intermediates in the top half of VMEM
  // (the kernels get the rest: their VMEM_BYTES symbol is halved) where they fit, reached through the local window
  // (isa::kLocalWindow), as TPU v1 keeps its activations in its Unified Buffer; false: in HBM (or the shared
  // memory) as on other chips. docs/compiler.md, "memory planning". (compile() passes the lowering whether they
  // are: a depthwise convolution's taps read in f32 there, docs/compiler.md, "Depthwise taps in f32".)
  bool vmem_intermediates = true;
  // A kernel (a LayerNorm, the fused attention, a whole-chip GEMM) and the whole-chip GEMM after it overlap: the
  // GEMM's first chunk of weights loads while the first kernel runs (where a full fence kept HBM idle for that
  // time; on a chip of several cores, where both are spread over every core). The same results. false: a fence between every two kernels. docs/compiler.md, "A
  // kernel and the whole-chip GEMM after it, overlapped".
  bool overlap_kernels = true;
  // Grouped convolutions: > 0, P consecutive groups in one GEMM of block-diagonal weights where P divides the
  // groups (else the estimate's choice); 0: the estimate's choice (docs/compiler.md, "Grouped convolutions"). For
  // measuring the estimate (scripts/group-pack-sweep.py).
  int64_t group_pack = 0;
};

// The least VMEM for which a one-core chip keeps intermediates in it (Options::vmem_intermediates): 16 MiB.
inline constexpr int64_t kMinLocalVmem = int64_t{16} << 20;

// Prefix of the outputs expose_calibration adds.
inline constexpr const char* kCalibrationPrefix = "calib:";

// Reads and compiles an ONNX model file. Program::name is the file's stem ("mlp" for "dir/mlp.onnx").
isa::Program compile_onnx_file(const std::string& path, const Options& opts);
// Compiles a serialized ONNX ModelProto; `model_name` names it in errors (a file name), its stem names the Program.
isa::Program compile_onnx(const std::string& bytes, const std::string& model_name, const Options& opts);

}  // namespace tpusim::compiler
