// Wall time to compile and to simulate whole models (the exporters' workloads, workloads/README.md), beside the
// host's Eigen f32 GEMM rate measured in the same run (docs/architecture.md: the host GEMM rate is the floor under any
// functional simulation). A plain table, and --json FILE. Run: scripts/run-model-bench.sh [--small], or
//
//   build/validation/bench/model_bench [--config v4-like] [--set k=v]... [--repeat N] [--json FILE] DIR...
//
// Each DIR holds <model>.onnx, its inputs <name>.npy, <output>_ref.npy and meta.json ("model", "inputs",
// "outputs", "flops"), as workloads/{resnet,bert,gpt2}.py write them; with no DIR, the colon-separated list in
// TPUSIM_MODEL_DIRS. Per model:
//   compile s      compiler::compile_onnx_file with the chip's kernel symbols (sim::kernel_symbols)
//   func s         Client::execute with the exporter's inputs, functional (the best of --repeat runs)
//   timing s       the same, timing-only (no arithmetic; the same cycles)
//   cycles, sim us simulated cycles and time of one inference on the chip
//   bound us       roofline lower bound: max(meta FLOPs / the whole chip's peak (2 * mxu.rows * mxu.cols *
//                  core.mxus * chip.cores * clock), bytes / HBM bandwidth)
//                  with bytes = the program's ideal bytes (isa::Program::ideal_bytes: its inputs, weights and
//                  outputs once, without tile padding; the compile report's ideal bound takes the same)
//   sim/bound      simulated time over that bound
//   GMAC           useful matrix-unit MACs of one inference (RunStats::mxu_macs)
//   func GMAC/s    those MACs per wall second of the functional run; x host = that over the host's GEMM MAC rate
//                  (host GFLOP/s / 2)
//   timing Mcyc/s  simulated cycles per wall second of the timing-only run
//   rel L2         worst relative L2 error of the outputs against PyTorch's (<output>_ref.npy); bf16 arithmetic
// One Client (one SystemC simulation) serves every model: one per process.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "host_gemm.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/runtime/npy.h"
#include "tpusim/runtime/runtime.h"
#include "tpusim/sim/config.h"

namespace {
using namespace tpusim;
namespace fs = std::filesystem;
using json = nlohmann::json;
using clock_type = std::chrono::steady_clock;

double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

struct Row {
  std::string name;  // the directory's last components ("gpt2_124m/prefill")
  std::string dir;
  double flops = 0;  // meta.json
  double compile_s = NAN, functional_s = NAN, timing_s = NAN;
  uint64_t cycles = 0, timing_cycles = 0, macs = 0;
  double sim_s = NAN, bound_s = NAN, compute_bound_s = NAN, memory_bound_s = NAN;
  uint64_t const_bytes = 0, io_bytes = 0, instructions = 0;
  double rel_l2 = NAN;
  std::string error;
};

std::string display_name(const fs::path& dir) {
  fs::path d = dir.lexically_normal();
  if (d.filename().empty()) d = d.parent_path();
  std::string leaf = d.filename().string();
  if (leaf == "prefill" || leaf == "decode") return d.parent_path().filename().string() + "/" + leaf;
  return leaf;
}

std::vector<float> as_f32(const runtime::HostTensor& t) {
  std::vector<float> v(static_cast<size_t>(t.elements()));
  if (t.dtype == isa::DType::F32) {
    std::memcpy(v.data(), t.data.data(), v.size() * 4);
  } else if (t.dtype == isa::DType::BF16) {
    for (size_t i = 0; i < v.size(); ++i) {
      uint16_t h;
      std::memcpy(&h, t.data.data() + 2 * i, 2);
      v[i] = isa::f32_from_bf16(h);
    }
  } else {
    return {};
  }
  return v;
}

// ||got - ref|| / ||ref||; NAN when the tensors cannot be compared.
double rel_l2(const runtime::HostTensor& got, const runtime::HostTensor& ref) {
  std::vector<float> g = as_f32(got), r = as_f32(ref);
  if (g.empty() || g.size() != r.size()) return NAN;
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    double d = static_cast<double>(g[i]) - r[i];
    num += d * d;
    den += static_cast<double>(r[i]) * r[i];
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

void bench_model(runtime::Client& client, int repeat, Row& row) {
  const sim::ChipConfig& cfg = client.config();
  json meta;
  {
    std::ifstream f(fs::path(row.dir) / "meta.json");
    if (!f) throw std::runtime_error(row.dir + "/meta.json: cannot be read");
    meta = json::parse(f);
  }
  const std::string model = meta.at("model").get<std::string>();
  row.flops = meta.value("flops", 0.0);

  compiler::Options opts;
  for (const auto& [name, value] : sim::kernel_symbols(cfg)) opts.target.symbols[name] = value;
  auto t0 = clock_type::now();
  isa::Program program = compiler::compile_onnx_file((fs::path(row.dir) / model).string(), opts);
  row.compile_s = since(t0);
  runtime::Executable exe(std::move(program));
  client.check_fits(exe);
  row.instructions = exe.program().code.size();

  for (const auto& t : exe.program().tensors)
    (t.kind == isa::TensorKind::Const ? row.const_bytes : row.io_bytes) += t.bytes();
  // The whole chip's peak: every matrix unit of every core.
  const double peak_flops =
      2.0 * cfg.mxu.rows * cfg.mxu.cols * cfg.core.mxus * cfg.chip.cores * cfg.chip.clock_mhz * 1e6;
  const double hbm_bytes_per_s = cfg.hbm.bandwidth_gbs * 1e9;
  row.compute_bound_s = row.flops / peak_flops;
  const double ideal = exe.program().ideal_bytes > 0 ? exe.program().ideal_bytes
                                                     : static_cast<double>(row.const_bytes + row.io_bytes);
  row.memory_bound_s = ideal / hbm_bytes_per_s;
  row.bound_s = std::max(row.compute_bound_s, row.memory_bound_s);

  std::map<std::string, runtime::HostTensor> inputs;
  for (const auto* d : exe.inputs()) {
    std::string file = d->name + ".npy";
    if (meta.contains("inputs") && meta["inputs"].contains(d->name))
      file = meta["inputs"][d->name].value("file", file);
    inputs[d->name] = runtime::read_npy((fs::path(row.dir) / file).string());
  }

  runtime::ExecuteOptions timing;
  timing.functional = false;
  for (int i = 0; i < repeat; ++i) {
    t0 = clock_type::now();
    runtime::ExecuteResult r = client.execute(exe, inputs, timing);
    double s = since(t0);
    if (!(s >= row.timing_s)) row.timing_s = s;
    row.timing_cycles = r.run.stats.cycles;
  }

  runtime::ExecuteOptions functional;
  functional.functional = true;
  runtime::ExecuteResult last;
  for (int i = 0; i < repeat; ++i) {
    t0 = clock_type::now();
    last = client.execute(exe, inputs, functional);
    double s = since(t0);
    if (!(s >= row.functional_s)) row.functional_s = s;
  }
  row.cycles = last.run.stats.cycles;
  row.sim_s = last.run.stats.seconds;
  row.macs = last.run.stats.mxu_macs;
  if (row.cycles != row.timing_cycles)
    row.error = "timing-only gave " + std::to_string(row.timing_cycles) + " cycles, functional " +
                std::to_string(row.cycles);

  double worst = NAN;
  for (const auto& [name, got] : last.outputs) {
    std::string ref = name + "_ref.npy";
    if (meta.contains("outputs") && meta["outputs"].contains(name)) ref = meta["outputs"][name].value("file", ref);
    fs::path p = fs::path(row.dir) / ref;
    if (!fs::exists(p)) continue;
    double e = rel_l2(got, runtime::read_npy(p.string()));
    if (!std::isnan(e) && !(e <= worst)) worst = e;
  }
  row.rel_l2 = worst;
}

std::string fmt(double v, int precision) {
  if (std::isnan(v)) return "-";
  std::ostringstream o;
  o << std::fixed << std::setprecision(precision) << v;
  return o.str();
}

// About three significant digits (at most four decimals).
std::string sig3(double v) {
  if (std::isnan(v)) return "-";
  double a = std::fabs(v);
  int decimals = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : a >= 0.1 ? 3 : 4;
  return fmt(v, decimals);
}

std::string sci(double v) {
  if (std::isnan(v)) return "-";
  std::ostringstream o;
  o << std::scientific << std::setprecision(1) << v;
  return o.str();
}

json num(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

int usage(const char* argv0, int rc) {
  (rc ? std::cerr : std::cout)
      << "usage: " << argv0
      << " [--config NAME|FILE.ini] [--set section.key=value]... [--repeat N] [--gemm-n N] [--json FILE] DIR...\n"
         "  DIR: a workload directory (meta.json, <model>.onnx, <input>.npy); default: $TPUSIM_MODEL_DIRS "
         "(colon-separated)\n";
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  setenv("SC_COPYRIGHT_MESSAGE", "DISABLE", 0);
  std::string config = "v4-like", json_path;
  std::vector<std::string> sets, dirs;
  int repeat = 1, gemm_n = 1024;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::cerr << a << " needs a value\n";
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--help" || a == "-h") return usage(argv[0], 0);
    if (a == "--config") config = value();
    else if (a == "--set") sets.push_back(value());
    else if (a == "--repeat") repeat = std::max(1, std::atoi(value().c_str()));
    else if (a == "--gemm-n") gemm_n = std::max(16, std::atoi(value().c_str()));
    else if (a == "--json") json_path = value();
    else if (!a.empty() && a[0] == '-') return usage(argv[0], 2);
    else dirs.push_back(a);
  }
  if (dirs.empty()) {
    if (const char* env = std::getenv("TPUSIM_MODEL_DIRS")) {
      std::stringstream ss(env);
      for (std::string d; std::getline(ss, d, ':');)
        if (!d.empty()) dirs.push_back(d);
    }
  }
  if (dirs.empty()) return usage(argv[0], 2);

  sim::ChipConfig cfg = sim::load_config(config, sets);
  // The host's GEMM rate before and after the models (the machine is shared); the better of the two is used.
  const double gemm_before = bench::host_gemm_gflops(gemm_n, 1.0);
  runtime::Client client(cfg);

  std::vector<Row> rows;
  for (const auto& d : dirs) {
    Row row;
    row.dir = d;
    row.name = display_name(d);
    std::cerr << "model_bench: " << row.name << " ..." << std::endl;
    try {
      bench_model(client, repeat, row);
    } catch (const std::exception& e) {
      row.error = e.what();
    }
    rows.push_back(row);
  }
  const double gemm_after = bench::host_gemm_gflops(gemm_n, 1.0);
  const double host_gflops = std::max(gemm_before, gemm_after);
  const double host_gmacs = host_gflops / 2;

  const int units = cfg.core.mxus * cfg.chip.cores;
  std::cout << "chip " << cfg.chip.name << ": " << cfg.chip.cores << " cores x " << cfg.core.mxus << " MXUs of "
            << cfg.mxu.rows << "x" << cfg.mxu.cols << " at " << cfg.chip.clock_mhz << " MHz ("
            << fmt(2.0 * cfg.mxu.rows * cfg.mxu.cols * units * cfg.chip.clock_mhz * 1e-6, 1)
            << " TFLOP/s), HBM " << cfg.hbm.bandwidth_gbs << " GB/s\n";
  std::cout << "host Eigen f32 GEMM " << gemm_n << "^3: " << fmt(host_gflops, 1) << " GFLOP/s = "
            << fmt(host_gmacs, 1) << " GMAC/s (before the models " << fmt(gemm_before, 1) << ", after "
            << fmt(gemm_after, 1) << "); best of " << repeat << " run" << (repeat > 1 ? "s" : "") << " per model\n\n";

  const std::vector<std::pair<std::string, int>> cols = {
      {"model", 18},     {"compile s", 10}, {"func s", 9},      {"timing s", 9},     {"cycles", 12},
      {"sim us", 10},    {"bound us", 10},  {"sim/bound", 10},  {"GMAC", 8},         {"func GMAC/s", 12},
      {"x host", 8},     {"timing Mcyc/s", 14}, {"rel L2", 8}};
  auto line = [&](const std::vector<std::string>& cells) {
    for (size_t i = 0; i < cells.size(); ++i)
      std::cout << (i == 0 ? std::left : std::right) << std::setw(cols[i].second) << cells[i] << (i + 1 < cells.size() ? " " : "");
    std::cout << "\n";
  };
  std::vector<std::string> head;
  for (const auto& c : cols) head.push_back(c.first);
  line(head);
  bool failed = false;
  json jrows = json::array();
  for (const Row& r : rows) {
    const bool ran = r.cycles > 0;
    const double gmac = ran ? r.macs * 1e-9 : NAN;
    const double func_rate = ran ? gmac / r.functional_s : NAN;
    const double timing_rate = r.timing_cycles > 0 ? r.timing_cycles / r.timing_s * 1e-6 : NAN;
    const double ratio = ran ? r.sim_s / r.bound_s : NAN;
    line({r.name, sig3(r.compile_s), sig3(r.functional_s), sig3(r.timing_s),
          ran ? std::to_string(r.cycles) : "-", ran ? sig3(r.sim_s * 1e6) : "-", sig3(r.bound_s * 1e6),
          fmt(ratio, 2), sig3(gmac), sig3(func_rate), sci(func_rate / host_gmacs), sig3(timing_rate),
          sci(r.rel_l2)});
    failed |= !r.error.empty();
    jrows.push_back({{"model", r.name},
                     {"dir", r.dir},
                     {"meta_flops", r.flops},
                     {"instructions", r.instructions},
                     {"const_bytes", r.const_bytes},
                     {"io_bytes", r.io_bytes},
                     {"compile_s", num(r.compile_s)},
                     {"functional_s", num(r.functional_s)},
                     {"timing_only_s", num(r.timing_s)},
                     {"sim_cycles", r.cycles},
                     {"timing_only_cycles", r.timing_cycles},
                     {"sim_us", num(r.sim_s * 1e6)},
                     {"bound_us", num(r.bound_s * 1e6)},
                     {"compute_bound_us", num(r.compute_bound_s * 1e6)},
                     {"memory_bound_us", num(r.memory_bound_s * 1e6)},
                     {"sim_over_bound", num(ratio)},
                     {"mxu_macs", r.macs},
                     {"functional_gmacs_per_s", num(func_rate)},
                     {"functional_over_host_gemm", num(func_rate / host_gmacs)},
                     {"timing_only_mcycles_per_s", num(timing_rate)},
                     {"rel_l2", num(r.rel_l2)},
                     {"error", r.error.empty() ? json(nullptr) : json(r.error)}});
  }
  for (const Row& r : rows)
    if (!r.error.empty()) std::cout << "\n" << r.name << ": " << r.error;
  if (failed) std::cout << "\n";

  if (!json_path.empty()) {
    json j = {{"chip", cfg.chip.name},
              {"mxu_rows", cfg.mxu.rows},
              {"mxu_cols", cfg.mxu.cols},
              {"clock_mhz", cfg.chip.clock_mhz},
              {"hbm_bandwidth_gbs", cfg.hbm.bandwidth_gbs},
              {"repeat", repeat},
              {"host_gemm_n", gemm_n},
              {"host_gemm_gflops", host_gflops},
              {"host_gemm_gflops_before", gemm_before},
              {"host_gemm_gflops_after", gemm_after},
              {"models", jrows}};
    std::ofstream(json_path) << j.dump(2) << "\n";
    std::cout << "wrote " << json_path << "\n";
  }
  return failed ? 1 : 0;
}
