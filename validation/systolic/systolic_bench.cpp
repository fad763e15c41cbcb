// The PE-level model's speed beside the fast model's on the same GEMM (kernels/gemm.s, bf16, 16x16 array):
// both report simulated cycles per wall second. Built, not run by the tests:
//   build/validation/systolic/systolic_bench
//   fast_gemm/<df>   the simulator (sim::Chip, timing-only and functional) running gemm.s
//   pe_gemm/<df>     the PE-level model running the same mxu instruction stream (with values), arrivals from
//                    the fast model's trace, so its counter covers the matrix unit's cycles only
#include <benchmark/benchmark.h>

#include <map>
#include <memory>

#include "systolic.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/chip.h"

namespace {
using namespace tpusim;
constexpr int kR = 16, kC = 16;
constexpr int64_t kM = 128, kK = 128, kN = 128;

sim::ChipConfig config(const char* df) {
  return sim::load_config("edge", {std::string("mxu.dataflow=") + df, "mxu.rows=16", "mxu.cols=16", "mxu.acc_rows=4096"});
}

// One chip per dataflow, all elaborated before the first run (SystemC).
sim::Chip& chip(const char* df) {
  static std::map<std::string, std::unique_ptr<sim::Chip>> chips = [] {
    std::map<std::string, std::unique_ptr<sim::Chip>> m;
    for (const char* d : {"ws", "os", "is"}) m[d] = std::make_unique<sim::Chip>(config(d));
    return m;
  }();
  return *chips.at(df);
}

isa::Program program(const char* df) {
  std::map<std::string, int64_t> d{{"M", kM}, {"K", kK}, {"N", kN}};
  for (const auto& [k, v] : sim::kernel_symbols(chip(df).config())) d[k] = v;
  return kernels::assemble("gemm.s", d);
}

void fast_gemm(benchmark::State& state, const char* df, bool functional) {
  const isa::Program p = program(df);
  sim::RunOptions o;
  o.functional = functional;
  uint64_t cycles = 0;
  for (auto _ : state) cycles = chip(df).run(p, o).stats.cycles;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  state.counters["sim_cycles_per_s"] = benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kIsIterationInvariantRate);
}

void pe_gemm(benchmark::State& state, const char* df) {
  // The gemm.s stream (lw kt x nt, mm mt per fold), arriving when the fast model started each instruction.
  sim::RunOptions o;
  o.functional = false, o.trace = true;
  const sim::RunResult r = chip(df).run(program(df), o);
  const systolic::Dataflow d = systolic::parse_dataflow(df);
  const auto& cfg = chip(df).config();
  const int64_t tm = std::min<int64_t>(kM, cfg.mxu.acc_rows / 2);
  std::vector<systolic::Instr> v;
  for (int64_t n0 = 0; n0 < kN; n0 += kC)
    for (int64_t m0 = 0; m0 < kM; m0 += tm)
      for (int64_t k0 = 0; k0 < kK; k0 += kR) {
        systolic::Instr lw, mm;
        lw.kind = systolic::Instr::LW, lw.k = static_cast<int>(std::min<int64_t>(kR, kK - k0)), lw.n = static_cast<int>(std::min<int64_t>(kC, kN - n0));
        for (int i = 0; i < lw.k * lw.n; ++i) lw.b.push_back(i % 7 - 3);
        mm.kind = systolic::Instr::MM, mm.m = static_cast<int>(std::min(tm, kM - m0));
        for (int i = 0; i < mm.m * lw.k; ++i) mm.a.push_back(i % 5 - 2);
        v.push_back(lw), v.push_back(mm);
      }
  size_t next = 0;
  std::vector<uint64_t> starts;
  for (const auto& e : r.trace)
    if (e.unit == isa::Unit::Mxu && (e.kind == "load" || e.kind == "busy")) starts.push_back(e.start);
  for (auto& in : v) {
    in.arrive = next < starts.size() ? starts[next] : 0;
    if (d == systolic::Dataflow::IS && in.kind == systolic::Instr::MM) in.arrive -= std::min<uint64_t>(kR, in.arrive);
    next += in.kind == systolic::Instr::LW || d == systolic::Dataflow::WS ? 1
            : d == systolic::Dataflow::OS                                 ? (in.m + kR - 1) / kR
                                                                          : (in.m + kC - 1) / kC;
  }
  uint64_t cycles = 0, stepped = 0;
  for (auto _ : state) {
    const systolic::Result res = systolic::run(d, kR, kC, v, true);
    cycles = res.total, stepped = res.cycles_stepped;
  }
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  state.counters["clocks_stepped"] = static_cast<double>(stepped);
  state.counters["sim_cycles_per_s"] = benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(fast_gemm, ws_timing, "ws", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(fast_gemm, ws_functional, "ws", true)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(fast_gemm, os_timing, "os", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(fast_gemm, is_timing, "is", false)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(pe_gemm, ws, "ws")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(pe_gemm, os, "os")->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(pe_gemm, is, "is")->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
