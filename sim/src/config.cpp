// Loading a ChipConfig: a preset or INI file, then `--set section.key=value` overrides, all through the
// parameter declarations of params.h and Boost.Program_options.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "params.h"
#include "tpusim/isa/isa.h"

namespace po = boost::program_options;

namespace tpusim::sim {
namespace detail {

const std::vector<Param>& all_params() {
  static const std::vector<Param> params = [] {
    std::vector<Param> p;
    declare_chip_params(p);
    declare_core_params(p);
    declare_mxu_params(p);
    declare_vpu_params(p);
    declare_dma_params(p);
    declare_memory_params(p);
    declare_energy_params(p);
    declare_area_params(p);
    return p;
  }();
  return params;
}

namespace {

const Param* find_param(const std::string& key) {
  for (const Param& p : all_params())
    if (p.key == key) return &p;
  return nullptr;
}

// Reads the substitutions (option name, token, value, line) an error's message is made from: protected in Boost.
struct OptionErrorAccess : po::error_with_option_name {
  static std::map<std::string, std::string>& substitutions(po::error_with_option_name& e) {
    return e.*(&OptionErrorAccess::m_substitutions);
  }
};

std::string preset_list() {
  std::string s;
  for (const auto& n : preset_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// Parses one INI text into `vm`. Keys already in `vm` (from an earlier, higher-priority source) keep their
// value: Boost's store() never overwrites a stored value. `origin` says where the text came from, for errors;
// `origins` records which source gave each key its value.
void store_ini(std::istream& in, const std::string& origin, const po::options_description& desc,
               po::variables_map& vm, std::map<std::string, std::string>& origins) {
  po::parsed_options parsed(&desc);
  try {
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw Error(option_error_text(e) + " (in " + origin + ")");
  }
  std::map<std::string, int> seen;
  for (const po::option& o : parsed.options) {
    const Param* p = find_param(o.string_key);
    if (o.unregistered || !p)
      throw Error("unknown configuration key '" + isa::printable(o.string_key) + "' (in " + origin + ")");
    if (++seen[o.string_key] > 1) throw Error("configuration key '" + o.string_key + "' given twice (in " + origin + ")");
    std::string value = o.value.empty() ? "" : o.value.front();
    boost::any parsed_value;
    try {
      desc.find(o.string_key, false).semantic()->parse(parsed_value, o.value, true);
    } catch (const std::exception&) {  // po::error, or std::logic_error for a value that is not UTF-8
      throw Error("bad value '" + isa::printable(value) + "' for " + p->key + " (in " + origin + "): expected " + p->type);
    }
    origins.emplace(o.string_key, origin);  // keeps the first (highest-priority) origin
  }
  try {
    po::store(parsed, vm);
  } catch (const po::error& e) {
    throw Error(option_error_text(e) + " (in " + origin + ")");
  }
}

}  // namespace
}  // namespace detail

std::vector<std::string> preset_names() {
  std::vector<std::string> names;
  for (const auto& [name, text] : detail::embedded_presets()) names.push_back(name);
  return names;
}

const std::string& default_preset() {
  static const std::string name = "v4-like";
  return name;
}

std::string preset_text(const std::string& name) {
  for (const auto& [n, text] : detail::embedded_presets())
    if (n == name) return text;
  throw Error("unknown preset '" + name + "' (presets: " + detail::preset_list() + ")");
}

ChipConfig load_config(const std::string& source, const std::vector<std::string>& sets) {
  using detail::Param;
  // Boost's description of every parameter, made once: parsing only reads it.
  static const po::options_description desc = [] {
    po::options_description d;
    for (const Param& p : detail::all_params()) d.add_options()(p.key.c_str(), p.semantic(), p.help.c_str());
    return d;
  }();

  po::variables_map vm;
  std::map<std::string, std::string> origins;
  // Highest priority first: the last --set, ..., the first --set, then the preset or file.
  for (auto it = sets.rbegin(); it != sets.rend(); ++it) {
    const std::string& s = *it;
    auto eq = s.find('=');
    if (eq == std::string::npos || eq == 0 || s.find('.') > eq)
      throw Error("bad --set '" + isa::printable(s) + "': expected section.key=value");
    // One --set is one line of INI: a line break would smuggle in more keys (or a line Boost cannot parse).
    if (s.find_first_of("\r\n") != std::string::npos)
      throw Error("bad --set '" + isa::printable(s) + "': a value holds a line break");
    std::istringstream in(s);
    detail::store_ini(in, "--set " + isa::printable(s), desc, vm, origins);
  }

  std::string text, origin;
  bool is_preset = false;
  for (const auto& [n, t] : detail::embedded_presets())
    if (n == source) text = t, origin = "preset " + n, is_preset = true;
  if (!is_preset) {
    std::ifstream f(source);
    if (!f || std::filesystem::is_directory(source))
      throw Error("unknown preset or configuration file '" + isa::printable(source) + "' (presets: " + detail::preset_list() + ")");
    std::ostringstream s;
    s << f.rdbuf();
    text = s.str();
    origin = isa::printable(source);
  }
  std::istringstream in(text);
  detail::store_ini(in, origin, desc, vm, origins);
  po::notify(vm);

  ChipConfig cfg{};
  for (const Param& p : detail::all_params()) p.assign(cfg, vm[p.key]);
  for (const Param& p : detail::all_params()) {
    std::string why = p.check(cfg);
    if (why.empty()) continue;
    auto o = origins.find(p.key);
    throw Error(p.key + " = " + p.show(cfg) + " " + why + " (in " + (o == origins.end() ? "defaults" : o->second) + ")");
  }
  return cfg;
}

std::vector<ParamInfo> describe(const ChipConfig& cfg) {
  std::vector<ParamInfo> out;
  for (const detail::Param& p : detail::all_params()) out.push_back({p.key, p.show(cfg), p.default_text, p.unit, p.help});
  return out;
}

// Boost substitutes each value for its placeholder in a loop that also rescans the value: the values are made
// printable and their '%' replaced by a byte that printable() never leaves, which is put back afterwards.
std::string option_error_text(const po::error& e) {
  auto* named = dynamic_cast<const po::error_with_option_name*>(&e);
  if (!named) return isa::printable(e.what(), 200);
  // An exception object caught by const reference is not itself const; this changes only its message's inputs.
  auto& subs = detail::OptionErrorAccess::substitutions(const_cast<po::error_with_option_name&>(*named));
  for (auto& [key, value] : subs) {
    value = isa::printable(value);
    std::replace(value.begin(), value.end(), '%', '\x01');
  }
  std::string msg = e.what();
  std::replace(msg.begin(), msg.end(), '\x01', '%');
  return msg;
}

std::vector<std::pair<std::string, int64_t>> kernel_symbols(const ChipConfig& cfg) {
  return {
      {"MXU_ROWS", cfg.mxu.rows},
      {"MXU_COLS", cfg.mxu.cols},
      {"ACC_ROWS", cfg.mxu.acc_rows},
      {"MXUS", cfg.core.mxus},
      // input rows an i8 / f8e4m3 mxu.mm streams per cycle (bf16: 1): kernel estimates count a stream of m rows
      // as ceil(m / rate) cycles, as the matrix unit takes it
      {"MXU_I8_RATE", cfg.mxu.i8_rate},
      {"MXU_FP8_RATE", cfg.mxu.fp8_rate},
      // the fraction of its rate the matrix unit sustains (mxu.efficiency), in thousandths: estimates count a
      // stream of c cycles at that rate as c x 1000 / MXU_EFFICIENCY_PERMILLE
      {"MXU_EFFICIENCY_PERMILLE", std::max<int64_t>(1, std::llround(cfg.mxu.efficiency * 1000))},
      {"CORES", cfg.chip.cores},
      {"SHARED_BYTES", static_cast<int64_t>(cfg.shared_bytes())},
      {"VMEM_BYTES", static_cast<int64_t>(cfg.vmem_bytes())},
      // the vector unit's and mxu.mm's address of accumulator row 0 (isa.def): the accumulators follow VMEM
      {"ACC_ADDR", static_cast<int64_t>(cfg.vmem_bytes())},
      // bytes per cycle through one core's VMEM ports, all banks together (vmem.banks x vmem.port_bytes_per_cycle)
      {"VMEM_BYTES_PER_CYCLE", static_cast<int64_t>(cfg.vmem.banks) * static_cast<int64_t>(cfg.vmem.port_bytes_per_cycle)},
      {"VPU_WIDTH", cfg.vpu_width()},
      // cycles a vector instruction takes beyond its elements (vpu.latency)
      {"VPU_LATENCY", static_cast<int64_t>(cfg.vpu.latency)},
      // the special functions' (exp, log, sin, cos, recip, rsqrt) results per cycle (at most VPU_WIDTH)
      {"VPU_SPECIAL", cfg.vpu_special_width()},
      {"HBM_BYTES", static_cast<int64_t>(cfg.hbm_bytes())},
      // HBM bandwidth in bytes per cycle (at least 1): kernel generators weigh memory against compute with it
      {"HBM_BYTES_PER_CYCLE", std::max<int64_t>(1, static_cast<int64_t>(cfg.hbm_bytes_per_cycle()))},
      // cores per cluster (chip.cluster): 2, pairs of cores may multicast a load (dma.ld mcast)
      {"CLUSTER", static_cast<int64_t>(cfg.chip.cluster)},
      // cycles a barrier or signal between cores takes (chip.sync_latency)
      {"SYNC_LATENCY", static_cast<int64_t>(cfg.chip.sync_latency)},
      // cycles from a DMA transfer's start to its first byte from HBM (dma.latency)
      {"DMA_LATENCY", static_cast<int64_t>(cfg.dma.latency)},
      // transfers each DMA queue has in flight (dma.engines)
      {"DMA_ENGINES", static_cast<int64_t>(cfg.dma.engines)},
      // cycles from a store's start to its first byte where it completes: the cache's (shared.latency) where it
      // writes back (shared.cache = shared.write_back = 1), else HBM's (dma.latency)
      {"STORE_LATENCY", static_cast<int64_t>(cfg.shared.cache && cfg.shared.write_back ? cfg.shared.latency
                                                                                        : cfg.dma.latency)},
      // the shared level's bandwidth in bytes per cycle when it is a cache (shared.cache = 1), else 0
      {"CACHE_BYTES_PER_CYCLE",
       cfg.shared.cache ? static_cast<int64_t>(cfg.shared.bandwidth_gbs * 1e3 / cfg.chip.clock_mhz) : 0},
  };
}

}  // namespace tpusim::sim
