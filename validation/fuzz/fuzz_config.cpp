// Fuzzes the configuration parser (INI through Boost.Program_options and the parameter declarations of
// sim/src/params.h). The input is an INI file; bytes after a first NUL, split at further NULs, are `--set`
// overrides (so values holding newlines are tried too). Any input either gives a config that every parameter's
// check accepts, or ends in one sim::Error (never a crash, hang, other exception or undefined behaviour).
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_common.h"
#include "tpusim/sim/config.h"

using namespace tpusim;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string ini = in.substr(0, nul);
  std::vector<std::string> sets;
  for (size_t at = nul; at != std::string::npos && at < in.size();) {
    size_t next = in.find('\0', at + 1);
    sets.push_back(in.substr(at + 1, next == std::string::npos ? std::string::npos : next - at - 1));
    at = next;
  }
  const std::string& path = fuzz::write_scratch(reinterpret_cast<const uint8_t*>(ini.data()), ini.size(), ".ini");
  sim::ChipConfig cfg;
  try {
    cfg = sim::load_config(path, sets);
  } catch (const sim::Error&) {
    return 0;
  }
  // A config that loads describes itself and gives the kernels their symbols without failing.
  try {
    (void)sim::describe(cfg);
    (void)sim::kernel_symbols(cfg);
  } catch (const std::exception& e) {
    fuzz::property_failed(std::string("a loaded config cannot be described: ") + e.what());
  }
  return 0;
}
