// Fuzzes the ONNX import and compile path: any bytes either compile or end in one compiler::Error (never a crash,
// hang, other exception or undefined behaviour), and a program the compiler makes loads: serialize then
// deserialize (what `tpusim run` and `disasm` do with a .tpub file) gives back the same Program.
#include <cstdint>
#include <string>

#include "fuzz_common.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/sim/config.h"

using namespace tpusim;

namespace {

compiler::Options options() {
  compiler::Options o;
  // The default chip, as `tpusim compile` targets it.
  for (const auto& [name, value] : sim::kernel_symbols(sim::load_config(sim::default_preset())))
    o.target.symbols[name] = value;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const compiler::Options opts = options();
  isa::Program p;
  try {
    p = compiler::compile_onnx(std::string(reinterpret_cast<const char*>(data), size), "fuzz.onnx", opts);
  } catch (const compiler::Error&) {
    return 0;
  }
  isa::Program loaded;
  try {
    loaded = isa::deserialize(isa::serialize(p));
  } catch (const isa::Error& e) {
    fuzz::property_failed(std::string("a compiled program does not load: ") + e.what());
  }
  if (!(loaded == p)) fuzz::property_failed("deserialize(serialize(compile(model))) != compile(model)");
  return 0;
}
