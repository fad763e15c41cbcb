// An executable: an isa::Program with a tensor interface, shared (copies refer to the same immutable program),
// with a content fingerprint and its serialized form.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tpusim/isa/program.h"
#include "tpusim/runtime/status.h"

namespace tpusim::runtime {

// FNV-1a, 64 bits, over `bytes`: stable across runs, builds and machines.
uint64_t fnv1a64(const uint8_t* bytes, size_t n);

// What one execution costs, from a timing-only run of the program on the client's chip (the matrix unit's MACs
// depend on register values, so they are counted by running, not by reading the code).
struct CostAnalysis {
  uint64_t macs = 0;           // useful multiply-accumulates of the matrix unit
  uint64_t flops = 0;          // 2 * macs (the vector unit's work is not counted)
  uint64_t cycles = 0;         // simulated cycles of one execution
  double seconds = 0;          // the same at the chip's clock
  uint64_t input_bytes = 0;    // the sizes of the declared inputs, outputs and constants
  uint64_t output_bytes = 0;
  uint64_t const_bytes = 0;
  uint64_t hbm_bytes_read = 0;     // moved by the program's DMA
  uint64_t hbm_bytes_written = 0;
};

class Executable {
 public:
  explicit Executable(isa::Program program);
  const isa::Program& program() const { return *program_; }
  std::vector<const isa::TensorDecl*> inputs() const;
  std::vector<const isa::TensorDecl*> outputs() const;

  // fnv1a64 of serialize(): equal programs have equal fingerprints; computed once, at construction.
  uint64_t fingerprint() const { return fingerprint_; }
  std::string fingerprint_hex() const;  // 16 lowercase hex digits
  std::vector<uint8_t> serialize() const { return isa::serialize(*program_); }
  // The inverse of serialize(); kInvalidArgument with isa's one-line reason for bytes that are not a program.
  static StatusOr<Executable> deserialize(const std::vector<uint8_t>& bytes);

 private:
  std::shared_ptr<const isa::Program> program_;
  uint64_t fingerprint_ = 0;
};

}  // namespace tpusim::runtime
