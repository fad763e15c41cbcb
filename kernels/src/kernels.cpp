#include "tpusim/kernels/kernels.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "embedded.h"

namespace tpusim::kernels {
namespace {
const std::string kBuiltinPrefix = "<builtin>/";
}

std::vector<std::string> names() {
  std::vector<std::string> out;
  for (const auto& k : embedded_kernels()) out.push_back(k.name);
  return out;
}

std::optional<std::string> source(const std::string& name) {
  for (const auto& k : embedded_kernels())
    if (k.name == name) return k.text;
  return std::nullopt;
}

decltype(isa::AsmOptions::include) include_resolver() {
  return [](const std::string& name, const std::string& from_file) -> std::optional<std::string> {
    // Built-in kernels include built-in kernels. A kernel file given by path includes the file beside it if there
    // is one (so an edited copy includes its edited siblings), else the built-in one of that name.
    namespace fs = std::filesystem;
    if (from_file.rfind(kBuiltinPrefix, 0) == 0) return source(name);
    fs::path p = fs::path(from_file).parent_path() / name;
    if (std::ifstream in{p}; in) {
      std::ostringstream s;
      s << in.rdbuf();
      return s.str();
    }
    return source(fs::path(name).filename().string());
  };
}

isa::Program assemble(const std::string& name, const std::map<std::string, int64_t>& defines,
                      const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc) {
  auto text = source(name);
  if (!text) throw isa::Error("no built-in kernel named '" + name + "'");
  isa::AsmOptions opts;
  opts.defines = defines;
  opts.include = include_resolver();
  opts.tensor_addr = tensor_addr;
  opts.base_pc = base_pc;
  return isa::assemble(*text, kBuiltinPrefix + name, opts);
}

isa::Prepared prepare(const std::string& name, const std::map<std::string, int64_t>& defines) {
  auto text = source(name);
  if (!text) throw isa::Error("no built-in kernel named '" + name + "'");
  isa::AsmOptions opts;
  opts.defines = defines;
  opts.include = include_resolver();
  return isa::prepare(*text, kBuiltinPrefix + name, opts);
}

}  // namespace tpusim::kernels
