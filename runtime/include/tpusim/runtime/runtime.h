// The runtime (first cut of a PjRT-like API): a client owns simulated chips; executables are programs with a
// tensor interface, made by assembling a kernel, compiling an ONNX model or loading a .tpub file; execute() moves
// host tensors into the chip's HBM, runs, and returns the outputs with the run's statistics and trace.
//
// SystemC allows one elaboration per process (DESIGN.md, pitfalls): a process makes one Client, and execute()
// runs on the calling thread. Errors are runtime::Error (or the isa/sim/compiler library's error) with one line.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/isa/program.h"
#include "tpusim/runtime/npy.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim::runtime {

class Executable {
 public:
  explicit Executable(isa::Program program) : program_(std::move(program)) {}
  const isa::Program& program() const { return program_; }
  std::vector<const isa::TensorDecl*> inputs() const;
  std::vector<const isa::TensorDecl*> outputs() const;

 private:
  isa::Program program_;
};

struct ExecuteOptions {
  bool functional = true;   // false: timing only (no arithmetic; outputs are not produced)
  bool trace = false;
  uint64_t max_cycles = 0;  // 0: no limit
};

struct ExecuteResult {
  std::map<std::string, HostTensor> outputs;  // empty in timing-only mode
  sim::RunResult run;
};

class Client {
 public:
  explicit Client(const sim::ChipConfig& cfg);
  ~Client();
  const sim::ChipConfig& config() const;

  // Assembles a kernel file (kernels/*.s, or any file that includes them) with the chip's symbols and `defines`.
  Executable assemble_file(const std::string& path, const std::map<std::string, int64_t>& defines = {}) const;
  // Compiles an ONNX model for this chip; `input_shapes` gives values for dynamic dimensions.
  Executable compile_onnx_file(const std::string& path,
                               const std::map<std::string, std::vector<int64_t>>& input_shapes = {}) const;
  // .s -> assemble, .onnx -> compile, anything else -> a .tpub binary.
  Executable load_file(const std::string& path, const std::map<std::string, int64_t>& defines = {},
                       const std::map<std::string, std::vector<int64_t>>& input_shapes = {}) const;

  // Throws Error if the program cannot run on this chip (its tensors do not fit in HBM). execute() checks it too.
  void check_fits(const Executable& exe) const;

  // Checks `inputs` against the executable's declarations (every input given, names known, dtype and shape
  // equal; float32 data for a bf16 input is rounded to bf16, to nearest even), then runs it.
  ExecuteResult execute(const Executable& exe, const std::map<std::string, HostTensor>& inputs,
                        const ExecuteOptions& opts = {});

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Deterministic pseudo-random tensor of a declaration's dtype and shape (small integers for i8/i32, uniform in
// [-1, 1) for floats), for timing runs and demos.
HostTensor random_tensor(const isa::TensorDecl& decl, uint64_t seed);
std::string describe(const isa::TensorDecl& decl);  // "a: i8 [384, 256]"

}  // namespace tpusim::runtime
