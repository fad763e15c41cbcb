// The tpusim assembler and disassembler. Syntax: docs/isa.md, "Assembly language".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "tpusim/isa/program.h"

namespace tpusim::isa {

struct AsmOptions {
  // Symbols defined before the first line (`-D NAME=VALUE`). A `.set` in the source does not override them.
  std::map<std::string, int64_t> defines;
  // Resolves `.include "name"` to source text; returns nullopt when not found. The default reads files relative
  // to the including file's directory.
  std::function<std::optional<std::string>(const std::string& name, const std::string& from_file)> include;
  // Fixed HBM addresses for declared tensors (by name). Others are placed from `hbm_base` upward, each aligned
  // to `hbm_align` bytes, in declaration order.
  std::map<std::string, uint64_t> tensor_addr;
  uint64_t hbm_base = 0;
  uint64_t hbm_align = 4096;
  // Instruction index of the first instruction: labels and branch targets are absolute, so code assembled for
  // a base can be appended to a program of that many instructions.
  uint64_t base_pc = 0;
};

// Throws isa::Error with "file:line:col: message" on any error.
Program assemble(const std::string& source, const std::string& filename, const AsmOptions& opts = {});
Program assemble_file(const std::string& path, const AsmOptions& opts = {});

// A source whose first pass is done once, for a program that places one kernel text at many addresses (the
// compiler's codegen): every label and every HBM tensor declared without `@` are left open, and place() finishes
// the assembly for given tensor addresses and code start. place(tensor_addr, base_pc) gives what assemble() gives
// with AsmOptions::tensor_addr = tensor_addr and base_pc = base_pc (the other options as given to prepare()), or
// throws isa::Error where assemble() throws (the message may name another error than assemble()'s first).
// prepare() throws isa::Error where assemble() would fail whatever the addresses, and where the source needs an
// open value in its first pass (a directive's, a condition's or a flag's expression): assemble each time then.
class Prepared {
 public:
  Program place(const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc) const;
  struct State;

 private:
  friend Prepared prepare(const std::string&, const std::string&, const AsmOptions&);
  std::shared_ptr<const State> state_;
};
Prepared prepare(const std::string& source, const std::string& filename, const AsmOptions& opts = {});

// Text that assemble() turns back into an identical program (tensor declarations with their addresses,
// constant data, one instruction per line with its index in a comment).
std::string disassemble(const Program& p);

}  // namespace tpusim::isa
