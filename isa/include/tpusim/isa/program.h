// A tpusim program: code, named tensor declarations and constant data, and its versioned binary format (.tpub).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"

namespace tpusim::isa {

enum class TensorKind : uint8_t { Input = 0, Output = 1, Const = 2 };
const char* tensor_kind_name(TensorKind k);  // "input", "output", "const"

// Where a tensor lives: HBM, or VMEM for activations kept on chip (the runtime writes and reads a VMEM tensor
// there directly, as a TPUv1 host fills its Unified Buffer; its kernel never moves it through HBM).
enum class MemSpace : uint8_t { Hbm = 0, Vmem = 1 };
const char* mem_space_name(MemSpace s);  // "hbm", "vmem"

// A tensor the program reads or writes, row-major and densely packed at `addr` of memory `space`.
struct TensorDecl {
  std::string name;
  TensorKind kind = TensorKind::Input;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  uint64_t addr = 0;  // in `space`
  // Const tensors only: where the tensor's bytes start in Program::const_data (its length is bytes()).
  uint64_t const_offset = 0;
  MemSpace space = MemSpace::Hbm;

  int64_t elements() const;
  uint64_t bytes() const { return static_cast<uint64_t>(elements()) * dtype_size(dtype); }
  bool operator==(const TensorDecl&) const = default;
};

struct Program {
  std::string name;                  // informational (kernel or model name)
  std::vector<Word> code;            // executed from index 0; running past the end ends the program
  std::vector<TensorDecl> tensors;   // inputs, outputs and constants
  std::vector<uint8_t> const_data;   // bytes of the Const tensors
  std::vector<std::string> source;   // optional: per instruction, where it came from ("gemm.s:42"), for errors

  const TensorDecl* find(const std::string& name) const;
  // Lowest address past every tensor declared in `space`.
  uint64_t footprint(MemSpace space) const;
  uint64_t hbm_footprint() const { return footprint(MemSpace::Hbm); }
  bool operator==(const Program&) const = default;
};

inline constexpr uint32_t kProgramVersion = 2;  // 2: tensors carry their memory space

// Binary format: "TPUB", u32 version, u32 section count, then sections (u32 id, u64 byte length, payload);
// little-endian throughout. Sections: 1 code (u64 words), 2 tensors, 3 constant data, 4 name, 5 source lines.
// Readers skip sections with unknown ids, so later versions can add some.
std::vector<uint8_t> serialize(const Program& p);
// Throws isa::Error naming the byte offset and what was wrong (bad magic, unsupported version, truncated section,
// undecodable instruction word, tensor outside the constant data, ...).
Program deserialize(const std::vector<uint8_t>& bytes);

void save_program(const Program& p, const std::string& path);
Program load_program(const std::string& path);

}  // namespace tpusim::isa
