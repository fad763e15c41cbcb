// Fuzzes the .tpub loader: any bytes either load or end in one isa::Error (never a crash, hang, other exception or
// undefined behaviour), and a Program that loads survives both round trips: serialize then deserialize gives back
// the same Program, and so does assembling its disassembly (but `source`, which then names the disassembly's own
// lines, as disassembler.cpp says).
#include <cstdint>
#include <string>
#include <vector>

#include "round_trips.h"

using namespace tpusim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  isa::Program p;
  try {
    p = isa::deserialize(std::vector<uint8_t>(data, data + size));
  } catch (const isa::Error&) {
    return 0;
  }
  fuzz::check_round_trips(p, "a loaded program");
  return 0;
}
