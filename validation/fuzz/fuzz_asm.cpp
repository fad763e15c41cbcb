// Fuzzes the assembler: any text either assembles or ends in one isa::Error (never a crash, hang, other exception
// or undefined behaviour), and what assembles survives both round trips: serialize/deserialize gives back the same
// Program, and assembling its disassembly gives back the same Program (but `source`, which names the
// disassembly's own lines, as disassembler.cpp says).
#include <cstdint>
#include <string>

#include "round_trips.h"
#include "tpusim/sim/config.h"

using namespace tpusim;

namespace {

isa::AsmOptions options() {
  isa::AsmOptions o;
  // The chip's symbols, as `tpusim run` passes them, so the seeds (kernels/*.s) assemble.
  for (const auto& [name, value] : sim::kernel_symbols(sim::load_config(sim::default_preset()))) o.defines[name] = value;
  // `.include` sees one in-memory file and nothing of the disk.
  o.include = [](const std::string& name, const std::string&) -> std::optional<std::string> {
    if (name == "inc.s") return std::string(".set INC, 3\nnop\n");
    return std::nullopt;
  };
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const isa::AsmOptions opts = options();
  const std::string src(reinterpret_cast<const char*>(data), size);
  isa::Program p;
  try {
    p = isa::assemble(src, "fuzz.s", opts);
  } catch (const isa::Error&) {
    return 0;
  }
  fuzz::check_round_trips(p, "an assembled program");
  return 0;
}
