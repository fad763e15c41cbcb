// The typed emitter's base: operand types, labels, and the program it builds. The instruction methods are
// generated from isa.def (tpusim/isa/emitter_ops.h); include tpusim/isa/emitter.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"

namespace tpusim::isa {

// A scalar register, r0..r31 (reads of r0 give what was written to it, as any register: the kernels keep it 0).
struct Reg {
  int index = 0;
};
constexpr Reg reg(int i) { return Reg{i}; }

// A semaphore, s1..s31; s0 (the default) means none, as an omitted wait= or signal= does in assembly.
struct Sem {
  int index = 0;
};
constexpr Sem sem(int i) { return Sem{i}; }

// Where an instruction was emitted: the generator's file and line, taken at the call as a defaulted argument
// (`Where at = {}`). (Not std::source_location: Debian 12's clang 14 cannot build libstdc++ 12's.)
struct Where {
  constexpr Where(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE()) : file(file), line(line) {}
  const char* file;
  unsigned line;
};

// A branch target: made by EmitterBase::label(), placed by bind().
struct Label {
  int64_t id = -1;
};

// Builds a Program one instruction at a time, without text: each method of Emitter (emitter_ops.h) is one
// instruction of isa.def, its operands typed. Values are checked against their fields when the program is
// finished (finish()), and every error names the line of the generator that emitted the instruction
// ("<copy>/copy at copy.cpp:322: dma.ld: operand rows = 33 does not fit in 5 bits"); the program's source lines
// name it too, so a run-time error of the simulator points back at it. Labels are absolute instruction indices,
// counted from base_pc, as the assembler's are (AsmOptions::base_pc).
class EmitterBase {
 public:
  // `name` is the program's name; `where` starts every source line ("<copy>/copy"), followed by " at FILE:LINE"
  // of the generator's line (the file's name without its directories).
  explicit EmitterBase(std::string name, std::string where, uint64_t base_pc = 0);

  // A new label, bound to no instruction yet.
  Label label();
  // Binds `l` to the next instruction emitted (or to the end of the code). Binding a label twice throws.
  void bind(Label l, Where at = {});
  // The absolute index of the next instruction.
  uint64_t pc() const { return base_pc_ + code_.size(); }
  // The cores that run the program (Program::cores; `.cores N` in assembly).
  void set_cores(uint32_t cores) { cores_ = cores; }
  // A tensor of the program (Program::tensors, in declaration order; `.input`, `.output`, ... in assembly).
  void declare(TensorDecl t) { tensors_.push_back(std::move(t)); }
  // Declares `t` in HBM where the assembler would place it (AsmOptions): at fixed[t.name] where given, else at
  // the next free address from `hbm_base`, aligned to `align`, past every HBM tensor declared before it. Returns
  // the address, for the code that reads the tensor.
  uint64_t declare_placed(TensorDecl t, const std::map<std::string, uint64_t>& fixed, uint64_t hbm_base = 0,
                          uint64_t align = 4096);

  // The program: labels resolved, every instruction encoded, the tensors checked as the assembler checks them
  // (validate_tensors). Throws isa::Error naming the generator's line for a value that does not fit its field, a
  // branch to a label never bound or made by another emitter; naming `where` for tensors that break a rule.
  Program finish() const;

 protected:
  // One instruction: its operands' values in table order (a Label's id for a branch target).
  void append(Op op, std::initializer_list<int64_t> fields, const Where& at);

 private:
  struct Emitted {
    Instr in;
    const char* file;
    uint32_t line;
  };
  std::string where(const Emitted& e) const;

  std::string name_, where_;
  uint64_t base_pc_;
  uint32_t cores_ = 1;
  std::vector<Emitted> code_;
  std::vector<TensorDecl> tensors_;
  std::vector<int64_t> labels_;  // per label: the instruction index it is bound to (relative), or -1
};

}  // namespace tpusim::isa
