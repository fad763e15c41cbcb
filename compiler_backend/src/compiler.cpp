// The pipeline: import -> the check that every operator can be compiled -> shape inference (folding constants) -> dead-code removal -> lowering -> memory planning
// -> codegen.
#include "tpusim/compiler/compiler.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "codegen.h"
#include "const_fold.h"
#include "kernel_plan.h"
#include "lower.h"
#include "memory_plan.h"
#include "onnx_import.h"
#include "shape_inference.h"

namespace tpusim::compiler {

isa::Program compile_onnx(const std::string& bytes, const std::string& model_name, const Options& opts) {
  auto hbm = opts.target.symbols.find("HBM_BYTES");
  if (hbm == opts.target.symbols.end() || hbm->second <= 0)
    throw Error("the target has no HBM_BYTES symbol (give the chip's symbols, e.g. from sim::kernel_symbols)");

  ir::Graph g = import_onnx(bytes, model_name);
  check_operators(g);
  infer_shapes(g, opts.input_shapes);
  fold_constants(g);
  KernelPlan plan = lower(g, opts);
  plan_memory(plan, static_cast<uint64_t>(hbm->second), model_name);
  return emit_program(plan, opts.target.symbols, std::filesystem::path(model_name).stem().string());
}

isa::Program compile_onnx_file(const std::string& path, const Options& opts) {
  if (std::filesystem::is_directory(path)) throw Error("cannot read model file '" + path + "': it is a directory");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open model file '" + path + "': " + std::strerror(errno));
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw Error("cannot read model file '" + path + "'");
  return compile_onnx(bytes.str(), path, opts);
}

}  // namespace tpusim::compiler
