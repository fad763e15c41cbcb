#include "merge_casts.h"

#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "codegen.h"
#include "tpusim/kernels/cast.h"

namespace tpusim::compiler {
namespace {

// A cast.s call without a scale: its types, else nothing
std::optional<std::pair<int64_t, int64_t>> plain_cast(const KernelCall& c) {
  if (c.kind != KernelCall::Kind::Library || c.kernel != "cast.s") return std::nullopt;
  auto param = [&](const char* name) {
    const auto it = c.params.find(name);
    return it == c.params.end() ? int64_t{0} : it->second;
  };
  if (param("SCALE") != 0 || param("N") <= 0 || !c.tensors.count("x") || !c.tensors.count("y")) return std::nullopt;
  return std::make_pair(param("SDT"), param("DDT"));
}

uint64_t offset(const KernelCall& c, const char* name) {
  const auto it = c.offsets.find(name);
  return it == c.offsets.end() ? 0 : it->second;
}

}  // namespace

void set_casts(KernelCall& call, std::vector<BufferCast> parts) {
  const size_t bytes = isa::dtype_size(static_cast<isa::DType>(call.params.at("SDT"))) +
                       isa::dtype_size(static_cast<isa::DType>(call.params.at("DDT")));
  call.tensors.clear(), call.offsets.clear(), call.bytes = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string n = std::to_string(i);
    call.tensors["x" + n] = parts[i].src, call.tensors["y" + n] = parts[i].dst;
    call.offsets["x" + n] = parts[i].src_off, call.offsets["y" + n] = parts[i].dst_off;
    call.bytes += static_cast<double>(parts[i].n) * static_cast<double>(bytes);
  }
  call.casts = std::move(parts);
}

int merge_casts(KernelPlan& plan, const std::map<std::string, int64_t>& symbols) {
  if (symbol_or(symbols, "CORES", 1) > 1) return 0;
  std::vector<KernelCall> calls;
  calls.reserve(plan.calls.size());
  int merged = 0;
  for (size_t i = 0; i < plan.calls.size();) {
    const auto types = plain_cast(plan.calls[i]);
    size_t j = i + 1;
    if (types) {
      std::set<int> ins, outs;
      const auto dt = [](int64_t t) { return static_cast<isa::DType>(t); };
      int64_t chunk = 0, chunks = 0;  // the run's chunks (kernels::cast_chunk's size), within kMaxCastChunks
      try {
        chunk = kernels::cast_chunk(dt(types->first), dt(types->second), symbols);
      } catch (const std::invalid_argument&) {
        chunk = 0;  // VMEM too small for its slots: no run
      }
      auto take = [&](const KernelCall& c) {
        const int x = c.tensors.at("x"), y = c.tensors.at("y");
        if (chunk <= 0 || outs.count(x) || outs.count(y) || ins.count(y) || x == y) return false;
        const int64_t more = chunks + (c.params.at("N") + chunk - 1) / chunk;
        if (more > kernels::kMaxCastChunks) return false;
        ins.insert(x), outs.insert(y), chunks = more;
        return true;
      };
      if (take(plan.calls[i]))
        while (j < plan.calls.size() && plain_cast(plan.calls[j]) == types && take(plan.calls[j])) ++j;
    }
    if (!types || j - i < 2) {
      calls.push_back(std::move(plan.calls[i]));
      i += 1;
      continue;
    }
    KernelCall m;
    m.kind = KernelCall::Kind::Cast;
    m.kernel = "cast";
    m.label = plan.calls[i].label + "+...+" + plan.calls[j - 1].label;
    m.params = {{"SDT", types->first}, {"DDT", types->second}};
    std::vector<BufferCast> parts;
    for (size_t k = i; k < j; ++k) {
      const KernelCall& c = plan.calls[k];
      parts.push_back({c.tensors.at("x"), c.tensors.at("y"), offset(c, "x"), offset(c, "y"), c.params.at("N"), c.label});
    }
    set_casts(m, std::move(parts));
    calls.push_back(std::move(m));
    merged += static_cast<int>(j - i) - 1;
    i = j;
  }
  plan.calls = std::move(calls);
  return merged;
}

}  // namespace tpusim::compiler
