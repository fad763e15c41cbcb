// A tpusim program: code, named tensor declarations and constant data, and its versioned binary format (.tpub).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tpusim/isa/isa.h"

namespace tpusim::isa {

enum class TensorKind : uint8_t { Input = 0, Output = 1, Const = 2 };
const char* tensor_kind_name(TensorKind k);  // "input", "output", "const"

// Where a tensor lives: HBM, or VMEM for activations kept on chip (the runtime writes and reads a VMEM tensor
// there directly, as a TPUv1 host fills its Unified Buffer; its kernel never moves it through HBM).
enum class MemSpace : uint8_t { Hbm = 0, Vmem = 1 };
const char* mem_space_name(MemSpace s);  // "hbm", "vmem"

// Limits every program obeys (the loader, the assembler and the compiler check them, naming the limit): a
// tensor holds at most kMaxTensorBytes, and lies, like every constant offset, below kMaxAddress (far past any
// chip's memory, and within what an assembly expression, a signed 64-bit value, can write).
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 40;  // 1 TiB
inline constexpr uint64_t kMaxAddress = uint64_t{1} << 48;      // 256 TiB
inline constexpr size_t kMaxRank = 16;                          // dimensions of a tensor

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

// The most elements one tensor may have: 2^56, so that its bytes (at most 8 per element) and its end address stay
// far from 64-bit overflow. The assembler and the loader refuse more, with the same rule.

// A named range [begin, end) of instruction indices, for profiles: kind "node" marks the code of a graph node,
// "kernel" one kernel fragment (any other kind is allowed). Regions nest properly: two regions are disjoint or
// one contains the other; Program::regions lists them in pre-order (by begin; an enclosing region before the
// regions inside it, as their `.region` lines come), and each holds at least one instruction.
struct Region {
  std::string kind;
  std::string name;
  uint32_t begin = 0, end = 0;
  // The work the region stands for, where its maker knows it (the compiler, for graph nodes); 0 = unknown.
  // flops: arithmetic operations (a multiply-add is 2); bytes: HBM bytes its kernels read and write. Both finite
  // and >= 0 (validate_regions); the .tpub regions section and `.region ..., flops=N, bytes=N` carry them.
  double flops = 0, bytes = 0;
  // The HBM bytes the work cannot avoid, whatever the code: each input and weight read once, each output written
  // once, nothing kept in HBM in between (for a graph node: the tensors it takes from, and gives to, the rest of
  // the model). `bytes` over it is the traffic the code chose to make. 0 = unknown; finite and >= 0. The .tpub
  // format carries it in section 9 (with Program::ideal_bytes), `.region ..., ideal_bytes=N` in assembly.
  double ideal_bytes = 0;
  bool operator==(const Region&) const = default;
};
inline constexpr const char* kRegionNode = "node";
inline constexpr const char* kRegionKernel = "kernel";
// A kernel that one core runs alone in a program of several cores; the name says why it is not shared.
inline constexpr const char* kRegionSerial = "serial";
// A remark of the compiler about the kernel it covers (the name says it: "attention not fused: ...").
inline constexpr const char* kRegionNote = "note";

struct Program {
  std::string name;                  // informational (kernel or model name)
  std::vector<Word> code;            // executed from index 0; running past the end ends the program
  std::vector<TensorDecl> tensors;   // inputs, outputs and constants
  std::vector<uint8_t> const_data;   // bytes of the Const tensors
  std::vector<std::string> source;   // optional: per instruction, where it came from ("gemm.s:42"), for errors
  std::vector<Region> regions;       // optional: named ranges of `code`, in pre-order (see Region)
  // The cores that run the program (SPMD: each runs all of `code` with its own core.id), 1..; a chip with fewer
  // cores refuses it. Assembly: `.cores N`; a program for one core leaves the chip's other cores idle.
  uint32_t cores = 1;
  // A timing-only compile (compiler::Options::timing_only): the Const tensors are declared (names, shapes,
  // addresses) but their values were never computed, so const_data does not hold them; such a program runs
  // timing-only (the runtime refuses a functional run). Section 8 of the .tpub format marks it.
  bool timing_only = false;
  // The HBM bytes the whole program cannot avoid, as its maker counts them (the compiler: each graph input and
  // weight read once and each output written once, at the sizes the model gives them, without the padding of
  // tiled layouts); 0 = not given, and a profile then counts every declared HBM tensor once. Finite and >= 0.
  // Section 9 of the .tpub format and `.ideal_bytes N` carry it.
  double ideal_bytes = 0;

  const TensorDecl* find(const std::string& name) const;
  // Lowest address past every tensor declared in `space`.
  uint64_t footprint(MemSpace space) const;
  uint64_t hbm_footprint() const { return footprint(MemSpace::Hbm); }
  bool operator==(const Program&) const = default;
};

// Throws isa::Error naming the tensor if `p.tensors` break a rule every program keeps, so that what the compiler
// or the assembler makes loads, and what loads can be written back as assembly: names unique and not empty;
// rank at most kMaxRank; sizes >= 0; at most kMaxTensorBytes each; every byte below kMaxAddress; a const tensor
// inside the constant data (unless p.timing_only), others with const_offset 0; no two tensors of one memory space overlapping.
void validate_tensors(const Program& p);
// Two tensors of one memory space that overlap (indices into p.tensors, the later-declared second), if any.
std::optional<std::pair<size_t, size_t>> overlapping_tensors(const Program& p);
// The rules of one tensor alone (all of validate_tensors' but uniqueness, constant data and overlaps).
void check_tensor(const TensorDecl& t);
// Throws isa::Error if `p.regions` break the rules of Region (empty, past the code, not nested, not in pre-order,
// flops, bytes or ideal_bytes negative or not finite), or Program::ideal_bytes is negative or not finite.
void validate_regions(const Program& p);
// For each region, the index of the region directly enclosing it, or -1 (regions must be valid).
std::vector<int> region_parents(const std::vector<Region>& regions);

inline constexpr uint32_t kProgramVersion = 4;  // 2: tensors carry their memory space; 3: mxu.lw trans (its
                                                // wait/signal fields moved up a bit), dma.gather, regions
                                                // carry flops and bytes; 4: whole chips (mxu=N on matrix
                                                // instructions, dma `shared`, core.id, barrier, sem.signal,
                                                // section 7: the program's cores)

// Binary format: "TPUB", u32 version, u32 section count, then sections (u32 id, u64 byte length, payload);
// little-endian throughout. Sections: 1 code (u64 words), 2 tensors, 3 constant data, 4 name, 5 source lines,
// 6 regions (written only when there are some), 7 cores (u32; written only when not 1), 8 timing-only (empty;
// written only for a timing-only program). Readers skip sections with unknown ids, so later versions can
// add some (a reader that predates section 6 loads such a file without its regions).
std::vector<uint8_t> serialize(const Program& p);
// Throws isa::Error naming the byte offset and what was wrong (bad magic, unsupported version, truncated section,
// undecodable instruction word, tensor outside the constant data, region outside the code or overlapping another
// without nesting, ...).
Program deserialize(const std::vector<uint8_t>& bytes);

void save_program(const Program& p, const std::string& path);
Program load_program(const std::string& path);

}  // namespace tpusim::isa
