// The tpusim ISA: opcodes, operand layouts, encode and decode. Everything here is derived from isa.def.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace tpusim::isa {

// Base of every error the isa library reports; what() is one line, prefixed with where (file:line:col, byte
// offset of a binary, ...).
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Text from a user's file or command line made safe to quote in a one-line message: bytes outside printable
// ASCII appear as escapes (\n, \t, \\, \xHH), and past `max` bytes of the original the rest is cut off and its
// length given ("abc... (1048576 bytes)"). Every message that echoes user text quotes it through this.
std::string printable(std::string_view text, size_t max = 64);

enum class Op : uint8_t {
#define X(ENUM, OPCODE, MNEMONIC, UNIT, OPERANDS, SEMANTICS, TIMING) ENUM = OPCODE,
#include "tpusim/isa/isa.def"
#undef X
};

// The queue that executes an instruction. Core instructions run in the dispatch core itself.
enum class Unit : uint8_t { Core, DmaIn, DmaOut, Mxu, Vpu };
inline constexpr int kNumUnits = 5;
const char* unit_name(Unit u);  // "core", "dmain", "dmaout", "mxu", "vpu"

// F8E4M3 is OCP FP8 E4M3 in its "fn" variant (torch.float8_e4m3fn, NVIDIA Hopper's e4m3): bias 7, subnormals,
// no infinities, NaN = S.1111.111 only, largest finite 448 (numerics.h; docs/isa.md, "Numerics").
enum class DType : uint8_t { I8 = 0, I32 = 1, BF16 = 2, F32 = 3, F8E4M3 = 4 };
inline constexpr int kNumDTypes = 5;
int dtype_size(DType t);                              // bytes per element
const char* dtype_name(DType t);                      // "i8", "i32", "bf16", "f32", "f8e4m3"
std::optional<DType> dtype_from_name(std::string_view name);  // also accepts "int8", "int32", "float32", "fp8", ...
// The aliases dtype_from_name accepts besides the names, for documentation.
const std::vector<const char*>& dtype_aliases();

// Key: an unsigned immediate written by name after the positional operands (`mxu=2`), 0 when omitted.
enum class OperandKind : uint8_t { Reg, Imm, UImm, Target, DType, Sem, Flag, Key };

struct OperandDesc {
  std::string name;
  OperandKind kind;
  int width;   // bits in the encoding
  int shift;   // bit position of the field's LSB
};

inline constexpr int kMaxOperands = 16;
inline constexpr int kNumRegs = 32;
inline constexpr int kNumSems = 32;  // s1..s31 usable; 0 means "none"
inline constexpr uint64_t kSemMax = 65535;  // a semaphore counts 0..kSemMax (sem.set's u16); a signal past it faults
// The shared memory window: a dma.ld or dma.st far address at or above it names the chip's [shared] memory at
// (address - kSharedWindow), as the `shared` flag does with the address itself. So a kernel reaches a tensor the
// compiler placed in the shared memory (TPU v4's CMEM) through the same instructions as one in HBM. 2^46: above
// any HBM, and within li's 48-bit immediate.
inline constexpr uint64_t kSharedWindow = uint64_t{1} << 46;
// The local window: a far address in [kLocalWindow, kSharedWindow) names the core's own VMEM at (address -
// kLocalWindow): a transfer within VMEM, as a TPU's DMA engines copy within a core's memory. So a compiler can keep
// intermediates in a part of VMEM the kernels leave alone and the kernels reach them unchanged. 2^45: above any HBM.
inline constexpr uint64_t kLocalWindow = uint64_t{1} << 45;

// The memory a DMA far address names (without the `shared` flag), and the address within it.
enum class FarMemory { Hbm, Local, Shared };
inline FarMemory far_memory(int64_t addr) {
  return addr >= static_cast<int64_t>(kSharedWindow)  ? FarMemory::Shared
         : addr >= static_cast<int64_t>(kLocalWindow) ? FarMemory::Local
                                                      : FarMemory::Hbm;
}
inline int64_t far_offset(int64_t addr) {
  switch (far_memory(addr)) {
    case FarMemory::Shared: return addr - static_cast<int64_t>(kSharedWindow);
    case FarMemory::Local: return addr - static_cast<int64_t>(kLocalWindow);
    default: return addr;
  }
}

struct InstrDesc {
  Op op;
  uint8_t opcode;
  std::string mnemonic;
  Unit unit;
  std::array<OperandDesc, kMaxOperands> operands;
  int num_operands;  // for unit instructions the last two are `wait` and `signal`
  std::string semantics;
  std::string timing;

  // Index of the operand called `name`, or -1.
  int operand_index(std::string_view name) const;
};

// The whole table, in table order.
std::span<const InstrDesc> instructions();
// The description of `op`; every Op has one.
const InstrDesc& describe(Op op);
// The description of an opcode byte, or nullptr if no instruction has it.
const InstrDesc* describe_opcode(uint8_t opcode);
const InstrDesc* describe_mnemonic(std::string_view mnemonic);

// A decoded instruction: operand values in table order (registers as their index, flags as 0/1).
struct Instr {
  Op op = Op::NOP;
  std::array<int64_t, kMaxOperands> f{};

  const InstrDesc& desc() const { return describe(op); }
  bool operator==(const Instr&) const = default;
};

using Word = uint64_t;

// Throws isa::Error if a value does not fit its field.
Word encode(const Instr& in);
// Throws isa::Error on an unknown opcode or set bits outside every field.
Instr decode(Word w);

// One line of assembly for one instruction, e.g. "mxu.mm r3, r4, r5, r6, bf16, accumulate, wait=s1".
// Branch targets print as absolute instruction indices; the assembler reads this syntax back.
std::string format(const Instr& in);

}  // namespace tpusim::isa
