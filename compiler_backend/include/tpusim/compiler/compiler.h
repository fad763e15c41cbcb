// The compiler backend: ONNX model -> isa::Program (kernel fragments from the kernel library, concatenated).
//
// Supported so far: MatMul (2-D), Gemm (alpha = beta = 1, transA = 0), Add (a bias after a matmul), Relu and
// Identity, all float32 in the model. Matmuls run in bf16 with f32 accumulation (weights are rounded to bf16 at
// compile time, round-to-nearest-even); graph inputs and outputs stay float32 in HBM.
//
// The Program declares the model's inputs and outputs (f32) and its constants (bf16 weights [K,N] row-major,
// f32 biases [N], bytes in Program::const_data); intermediates live in HBM after them and are not declared. To run
// it: write every Const tensor's bytes and every input at its addr, run, read the outputs at theirs.
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

struct Options {
  Target target;
  // Shapes of graph inputs, by input name: required for inputs with dynamic dimensions; where given they must
  // agree with the model's static dimensions.
  std::map<std::string, std::vector<int64_t>> input_shapes;
};

// Reads and compiles an ONNX model file. Program::name is the file's stem ("mlp" for "dir/mlp.onnx").
isa::Program compile_onnx_file(const std::string& path, const Options& opts);
// Compiles a serialized ONNX ModelProto; `model_name` names it in errors (a file name), its stem names the Program.
isa::Program compile_onnx(const std::string& bytes, const std::string& model_name, const Options& opts);

}  // namespace tpusim::compiler
