// Fuzzes the .tpub loader: any bytes either load or end in one isa::Error (never a crash, hang, other exception or
// undefined behaviour), and a Program that loads survives both round trips: serialize then deserialize gives back
// the same Program, and so does assembling its disassembly (but `source`, which then names the disassembly's own
// lines, as disassembler.cpp says).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tpusim/isa/assembler.h"

using namespace tpusim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  isa::Program p;
  try {
    p = isa::deserialize(std::vector<uint8_t>(data, data + size));
  } catch (const isa::Error&) {
    return 0;
  }
  isa::Program again;
  try {
    again = isa::deserialize(isa::serialize(p));
  } catch (const isa::Error& e) {
    fuzz::property_failed(std::string("a loaded program does not load again once saved: ") + e.what());
  }
  if (!(again == p)) fuzz::property_failed("deserialize(serialize(p)) != p");
  std::string text;
  isa::Program back;
  try {
    text = isa::disassemble(p);
    back = isa::assemble(text, "disasm.s");
  } catch (const isa::Error& e) {
    fuzz::property_failed(std::string("the disassembly of a loaded program does not assemble: ") + e.what() +
                          "\ndisassembly:\n" + text);
  }
  back.source = p.source;
  if (!(back == p)) fuzz::property_failed("assemble(disassemble(p)) != p; disassembly:\n" + text);
  return 0;
}
