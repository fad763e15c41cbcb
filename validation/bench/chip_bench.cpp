// Whole-chip GEMM benchmark: the gemm_chip kernel (kernels/gemm_chip.h) on one chip configuration, timing-only
// by default, printing one line: the chip, the shape, the units used, simulated time, the fraction of the chip's
// peak (every core and matrix unit of the chip, whether the kernel uses them or not), MXU utilisation, and the
// wall time to simulate. One process per chip (SystemC elaborates once): scripts/run-chip-bench.sh runs the
// tables of the issue (presets, and the scaling over matrix units and cores).
//
//   chip_bench --config v4 [--set k=v]... [--m 4096 --k 4096 --n 4096] [--dtype bf16|i8|fp8] [--cores N] [--mxus N]
//              [--out f32|bf16|i32|i8] [--schedule auto|strips|tiles] [--split-k N] [--max-split-k N] [--plan]
//              [--trans-b] [--b-tiled] [--tiles-one-at-a-time] [--multicast] [--no-narrow-strips]
//              [--min-chunk-folds N]
//              [--reduction-launch-cycles N] [--functional]
//              [--warm-up] [--stats FILE.json]
//
// --warm-up: run the kernel once first and time a second run on the L2 the first left (RunOptions::warm_cache),
// as a GPU benchmark times a kernel after warm-up launches on the same inputs (shared.cache = 1 presets).
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "tpusim/kernels/gemm_chip.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

using namespace tpusim;

int main(int argc, char** argv) {
  std::string config = "v4";
  std::vector<std::string> sets;
  kernels::GemmChip g{4096, 4096, 4096, isa::DType::BF16, isa::DType::F32, 0, 0};
  bool functional = false, plan = false, warm_up = false;  // --plan: print the kernel's plan (its first source line)
  std::string stats, out_name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(a + " needs a value");
      return argv[++i];
    };
    if (a == "--config") config = next();
    else if (a == "--set") sets.push_back(next());
    else if (a == "--m") g.m = std::stoll(next());
    else if (a == "--k") g.k = std::stoll(next());
    else if (a == "--n") g.n = std::stoll(next());
    else if (a == "--cores") g.cores = std::stoi(next());
    else if (a == "--mxus") g.mxus = std::stoi(next());
    else if (a == "--dtype") {
      const std::string v = next();
      const auto t = isa::dtype_from_name(v);  // bf16, i8, fp8 (f8e4m3) and their other names
      if (!t || (*t != isa::DType::BF16 && *t != isa::DType::I8 && *t != isa::DType::F8E4M3)) {
        std::cerr << "chip_bench: --dtype must be bf16, i8 or fp8, got " << v << "\n";
        return 2;
      }
      g.in = *t;
    }
    else if (a == "--functional") functional = true;
    else if (a == "--warm-up") warm_up = true;
    else if (a == "--split-k") g.split_k = std::stoi(next());
    else if (a == "--max-split-k") g.max_split_k = std::stoi(next());
    else if (a == "--plan") plan = true;
    else if (a == "--trans-b") g.trans_b = true;
    else if (a == "--tiles-one-at-a-time") g.overlap_tiles = false;  // as tpusim validate runs GEMMs
    else if (a == "--multicast") g.multicast = true;                 // (so does this)
    else if (a == "--no-narrow-strips") g.narrow_strips = false;     // strips of C columns only
    else if (a == "--min-chunk-folds") g.min_chunk_folds = std::stoi(next());  // chunks of K of at least N folds
    else if (a == "--b-tiled") g.b_tiled = true;                      // b as the compiler stores weights
    else if (a == "--reduction-launch-cycles") g.reduction_launch_cycles = std::stoll(next());  // (in the plan only)
    else if (a == "--schedule") {
      const std::string v = next();
      g.schedule = v == "strips" ? kernels::GemmSchedule::Strips
                   : v == "tiles" ? kernels::GemmSchedule::Tiles
                                  : kernels::GemmSchedule::Auto;
    }
    else if (a == "--out") out_name = next();
    else if (a == "--stats") stats = next();
    else {
      std::cerr << "chip_bench: unknown argument " << a << "\n";
      return 2;
    }
  }
  if (g.in == isa::DType::I8) g.out = isa::DType::I32;
  if (!out_name.empty()) {
    auto t = isa::dtype_from_name(out_name);
    if (!t) {
      std::cerr << "chip_bench: unknown data type " << out_name << "\n";
      return 2;
    }
    g.out = *t;
  }
  try {
    sim::ChipConfig cfg = sim::load_config(config, sets);
    std::map<std::string, int64_t> symbols;
    for (const auto& [name, v] : sim::kernel_symbols(cfg)) symbols[name] = v;
    isa::Program p = kernels::gemm_chip_kernel(g, symbols);
    if (plan) {
      const std::string src = kernels::gemm_chip_source(g, symbols);
      std::cout << src.substr(0, src.find('\n')) << "; plan estimate "
                << static_cast<int64_t>(kernels::gemm_chip_estimate(g, symbols)) << " cycles\n";
    }
    sim::Chip chip(cfg);
    sim::RunOptions opts;
    opts.functional = functional;
    if (warm_up) {
      chip.run(p, opts);
      opts.warm_cache = true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    sim::RunResult r = chip.run(p, opts);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!stats.empty()) {
      FILE* f = std::fopen(stats.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + stats);
      std::fputs(r.stats.to_json(cfg).c_str(), f);
      std::fclose(f);
    }
    const bool i8 = g.in == isa::DType::I8, fp8 = g.in == isa::DType::F8E4M3;
    const double macs = static_cast<double>(g.m) * g.k * g.n;
    const double peak_cycles = macs / cfg.peak_macs_per_cycle(g.in);  // the input type's rate (fp8: ran, so > 0)
    std::printf("%-10s %-5s %5lld x %5lld x %5lld  cores %3d of %3d  mxus %d of %d  %12llu cycles  %9.2f us  "
                "%6.1f %s  %5.1f%% of peak  mxu util %5.1f%%  wall %.2f s\n",
                cfg.chip.name.c_str(), i8 ? "i8" : fp8 ? "fp8" : "bf16", static_cast<long long>(g.m), static_cast<long long>(g.k),
                static_cast<long long>(g.n), static_cast<int>(p.cores), cfg.chip.cores,
                g.mxus ? g.mxus : cfg.core.mxus, cfg.core.mxus, static_cast<unsigned long long>(r.stats.cycles),
                r.stats.seconds * 1e6, 2 * macs / r.stats.seconds / 1e12, i8 ? "TOP/s" : "TFLOP/s",
                100.0 * peak_cycles / static_cast<double>(r.stats.cycles), 100.0 * r.stats.mxu_mac_utilization, wall);
  } catch (const std::exception& e) {
    std::cerr << "chip_bench: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
