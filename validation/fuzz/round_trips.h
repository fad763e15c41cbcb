// The two round trips every Program must survive (fuzz_asm, fuzz_tpub): serialize then deserialize gives back
// the same Program, and so does assembling its disassembly (but `source`, which then names the disassembly's own
// lines, as disassembler.cpp says). `what` names where the Program came from, for the message.
#pragma once

#include <string>

#include "fuzz_common.h"
#include "tpusim/isa/assembler.h"

namespace tpusim::fuzz {

inline void check_round_trips(const isa::Program& p, const std::string& what) {
  isa::Program loaded;
  try {
    loaded = isa::deserialize(isa::serialize(p));
  } catch (const isa::Error& e) {
    property_failed(what + " does not load once saved: " + e.what());
  }
  if (!(loaded == p)) property_failed("deserialize(serialize(p)) != p for " + what);
  std::string text;
  isa::Program back;
  try {
    text = isa::disassemble(p);
    back = isa::assemble(text, "disasm.s");
  } catch (const isa::Error& e) {
    property_failed("the disassembly of " + what + " does not assemble: " + e.what() + "\ndisassembly:\n" + text);
  }
  back.source = p.source;
  if (!(back == p)) property_failed("assemble(disassemble(p)) != p for " + what + "; disassembly:\n" + text);
}

}  // namespace tpusim::fuzz
