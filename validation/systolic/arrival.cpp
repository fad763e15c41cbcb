// Arrivals of the matrix unit's instructions (arrival.h): the core's dispatch, followed through the program, and
// the semaphore tokens the other units give.
#include "arrival.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <string>

namespace tpusim::systolic {

namespace {
using isa::Op;
using isa::Unit;

int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }

struct Sems {
  int wait = 0, signal = 0;
};
Sems sems_of(const isa::Instr& in) {
  const int n = in.desc().num_operands;
  return {static_cast<int>(in.f[n - 2]), static_cast<int>(in.f[n - 1])};
}
}  // namespace

Replay derive_arrivals(const isa::Program& program, const std::vector<Signal>& signals, uint64_t max_steps) {
  std::vector<isa::Instr> code;
  for (isa::Word w : program.code) code.push_back(isa::decode(w));
  auto fail = [](const std::string& why) { throw std::invalid_argument("derive_arrivals: " + why); };

  // Which unit waits on and signals each semaphore (statically), to refuse what the replay cannot follow.
  std::array<bool, isa::kNumSems> mxu_waits{}, mxu_signals{}, others_wait{};
  for (const isa::Instr& in : code) {
    const Unit u = in.desc().unit;
    if (u == Unit::Core) continue;
    const Sems s = sems_of(in);
    (u == Unit::Mxu ? mxu_waits : others_wait)[s.wait] = true;
    if (u == Unit::Mxu) mxu_signals[s.signal] = true;
  }
  for (int s = 1; s < isa::kNumSems; ++s) {
    if (mxu_waits[s] && others_wait[s]) fail("s" + std::to_string(s) + " is waited on by the matrix unit and another unit");
    if (mxu_waits[s] && mxu_signals[s]) fail("the matrix unit both waits on and signals s" + std::to_string(s));
  }

  // The other units' signals of each semaphore, in time order.
  std::array<std::vector<uint64_t>, isa::kNumSems> given;
  for (const Signal& sg : signals) {
    if (sg.pc >= code.size()) fail("signal from pc " + std::to_string(sg.pc) + " outside the program");
    const isa::Instr& in = code[sg.pc];
    if (in.desc().unit == Unit::Core || in.desc().unit == Unit::Mxu)
      fail("pc " + std::to_string(sg.pc) + " is not a DMA or vector instruction");
    if (const int s = sems_of(in).signal) given[s].push_back(sg.cycle);
  }
  for (auto& v : given) std::sort(v.begin(), v.end());

  // The core, one instruction a cycle.
  Replay out;
  std::array<int64_t, isa::kNumRegs> reg{};
  std::array<uint64_t, isa::kNumSems> init{}, acquired{};
  bool dispatched_any = false;
  uint64_t t = 0;
  for (size_t pc = 0; pc < code.size(); ++t) {
    if (t >= max_steps) fail("more than " + std::to_string(max_steps) + " instructions executed");
    const isa::Instr& in = code[pc];
    const isa::InstrDesc& d = in.desc();
    const auto& f = in.f;
    auto R = [&](int i) { return reg[static_cast<size_t>(f[i])]; };
    auto set = [&](int64_t v) {
      if (f[0]) reg[static_cast<size_t>(f[0])] = v;
    };
    size_t next = pc + 1;
    if (d.unit != Unit::Core) {
      dispatched_any = true;
      if (d.unit == Unit::Mxu) {
        Instr x;
        auto arg = [&](const char* name) { return reg[static_cast<size_t>(f[d.operand_index(name)])]; };
        if (in.op == Op::MXULW) x.kind = Instr::LW, x.k = static_cast<int>(arg("k")), x.n = static_cast<int>(arg("n"));
        else if (in.op == Op::MXUMM) x.kind = Instr::MM, x.m = static_cast<int>(arg("m"));
        else x.kind = Instr::SYNC;
        x.arrive = t + 1;
        if (const int s = sems_of(in).wait) {
          const uint64_t j = ++acquired[s];  // this is the matrix unit's j-th acquire of s
          if (j > init[s]) {
            const uint64_t need = j - init[s];  // the need-th signal of s by another unit
            if (need > given[s].size())
              fail("pc " + std::to_string(pc) + " waits on s" + std::to_string(s) + " that no unit signals for it");
            x.arrive = std::max(x.arrive, given[s][need - 1]);
          }
        }
        out.instrs.push_back(x);
        out.pcs.push_back(static_cast<uint32_t>(pc));
      }
      pc = next;
      continue;
    }
    switch (in.op) {
      case Op::NOP: break;
      case Op::HALT: out.core_end = t; return out;  // the core stops here, then drains
      case Op::LI: set(f[1]); break;
      case Op::ADD: set(wrap(uint64_t(R(1)) + uint64_t(R(2)))); break;
      case Op::SUB: set(wrap(uint64_t(R(1)) - uint64_t(R(2)))); break;
      case Op::MUL: set(wrap(uint64_t(R(1)) * uint64_t(R(2)))); break;
      case Op::DIV:
      case Op::REM:
        if (R(2) == 0 || (R(1) == std::numeric_limits<int64_t>::min() && R(2) == -1)) fail("division fault");
        set(in.op == Op::DIV ? R(1) / R(2) : R(1) % R(2));
        break;
      case Op::AND: set(R(1) & R(2)); break;
      case Op::OR: set(R(1) | R(2)); break;
      case Op::XOR: set(R(1) ^ R(2)); break;
      case Op::SHL: set(wrap(uint64_t(R(1)) << (R(2) & 63))); break;
      case Op::SHR: set(R(1) >> (R(2) & 63)); break;
      case Op::MIN: set(std::min(R(1), R(2))); break;
      case Op::MAX: set(std::max(R(1), R(2))); break;
      case Op::ADDI: set(wrap(uint64_t(R(1)) + uint64_t(f[2]))); break;
      case Op::MULI: set(wrap(uint64_t(R(1)) * uint64_t(f[2]))); break;
      case Op::BEQ: if (R(0) == R(1)) next = static_cast<size_t>(f[2]); break;
      case Op::BNE: if (R(0) != R(1)) next = static_cast<size_t>(f[2]); break;
      case Op::BLT: if (R(0) < R(1)) next = static_cast<size_t>(f[2]); break;
      case Op::BGE: if (R(0) >= R(1)) next = static_cast<size_t>(f[2]); break;
      case Op::JMP: next = static_cast<size_t>(f[0]); break;
      case Op::SEMSET:
        // Before any unit instruction the units are idle: the core's drain costs nothing.
        if (dispatched_any) fail("sem.set after a unit instruction (the core would wait for the units)");
        init[static_cast<size_t>(f[0])] = static_cast<uint64_t>(f[1]);
        break;
      default: fail("pc " + std::to_string(pc) + ": " + d.mnemonic + " makes the core wait for the units");
    }
    pc = next;
  }
  out.core_end = t;
  return out;
}

}  // namespace tpusim::systolic
