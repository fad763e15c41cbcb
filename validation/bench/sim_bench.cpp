// Simulator speed by the host's own GEMM rate, measured in the same run (docs/architecture.md: the host GEMM rate is
// the floor under any functional simulation). Run: build/validation/bench/sim_bench
//   host_gemm_f32/N        Eigen fp32 GEMM, N^3: counter GFLOPs = 2 N^3 / s
//   sim_gemm/<kernel>/N    the kernel on the simulated v4-like chip, functional or timing-only: counters
//                          sim_cycles_per_s (simulated cycles per wall second) and GMACs (N^3 MACs per wall second)
//   copy_kernel/N/C        a copy kernel (the encoded program the compiler places) for N one-row moves that never
//                          merge (8 and 4 bytes in turn, 16 apart, as a strided MaxPool's taps make), on C cores:
//                          counter moves_per_s; the ratio to the host's GFLOPs says what a pathological model's
//                          compile costs on this machine
//   generate/gemm_chip     the whole-chip GEMM of a BERT-base FFN layer (128 x 768 x 3072, transposed weights, bf16
//                          out) generated for h200-like, as codegen makes each call: counters kernels_per_s and
//                          instructions_per_s (built through the typed emitter; before it, the text and its assembly)
//   generate/attention_chip  BERT-base's fused attention (1 x 128 tokens x 12 heads of 64) for h200-like: the same
// The ratio sim GMAC/s / (host GFLOP/s / 2) says how close the functional model runs to the host's GEMM rate.
#include <benchmark/benchmark.h>

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "host_gemm.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/kernels/copy.h"
#include "tpusim/kernels/gemm_chip.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace {
using namespace tpusim;

runtime::Client& client() {
  // One chip per process (SystemC), shared by every benchmark.
  static runtime::Client c(sim::load_config("v4-like"));
  return c;
}

void host_gemm_f32(benchmark::State& state) {
  bench::HostGemm g(static_cast<int>(state.range(0)));
  for (auto _ : state) {
    g.run();
    benchmark::DoNotOptimize(g.result());
  }
  state.counters["GFLOPs"] = benchmark::Counter(g.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void sim_gemm(benchmark::State& state, const char* kernel, bool functional) {
  const int64_t n = state.range(0);
  std::map<std::string, int64_t> d{{"M", n}, {"K", n}, {"N", n}};
  for (const auto& [k, v] : sim::kernel_symbols(client().config())) d[k] = v;
  runtime::Executable exe(kernels::assemble(kernel, d));
  std::map<std::string, runtime::HostTensor> in;
  for (const auto* t : exe.inputs()) in[t->name] = runtime::random_tensor(*t, 3 + in.size());
  runtime::ExecuteOptions opts;
  opts.functional = functional;
  uint64_t cycles = 0;
  for (auto _ : state) cycles = client().execute(exe, in, opts).run.stats.cycles;
  state.counters["sim_cycles"] = static_cast<double>(cycles);
  state.counters["sim_cycles_per_s"] =
      benchmark::Counter(static_cast<double>(cycles), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMACs"] =
      benchmark::Counter(static_cast<double>(n * n * n) * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void copy_kernel(benchmark::State& state) {
  const auto n = static_cast<uint64_t>(state.range(0));
  std::vector<kernels::Move> moves;
  for (uint64_t i = 0; i < n; ++i) moves.push_back({16 * i, (uint64_t{1} << 30) + 16 * i, 1, 8 - 4 * (i % 2)});
  const std::map<std::string, int64_t> symbols{{"VMEM_BYTES", 1 << 20}};
  for (auto _ : state) benchmark::DoNotOptimize(kernels::copy_kernel(moves, symbols, 0, "copy", state.range(1)));
  state.counters["moves_per_s"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate);
}

const std::map<std::string, int64_t>& h200_symbols() {
  static const std::map<std::string, int64_t> s = [] {
    std::map<std::string, int64_t> m;
    for (const auto& [name, v] : sim::kernel_symbols(sim::load_config("h200-like"))) m[name] = v;
    return m;
  }();
  return s;
}

// A generator's kernel, made again each iteration: kernels and instructions per second.
void generate(benchmark::State& state, const std::function<isa::Program()>& make) {
  size_t words = 0;
  for (auto _ : state) {
    const isa::Program p = make();
    words = p.code.size();
    benchmark::DoNotOptimize(p.code.data());
  }
  state.counters["kernels_per_s"] = benchmark::Counter(1, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["instructions_per_s"] =
      benchmark::Counter(static_cast<double>(words), benchmark::Counter::kIsIterationInvariantRate);
}

void generate_gemm_chip(benchmark::State& state) {
  kernels::GemmChip g;
  g.m = 128, g.k = 768, g.n = 3072, g.trans_b = true, g.out = isa::DType::BF16;
  generate(state, [&] { return kernels::gemm_chip_kernel(g, h200_symbols()); });
}

void generate_attention_chip(benchmark::State& state) {
  kernels::AttentionChip a;
  a.batch = 1, a.seq = 128, a.heads = 12, a.head_dim = 64;
  generate(state, [&] { return kernels::attention_chip_kernel(a, h200_symbols()); });
}

BENCHMARK(host_gemm_f32)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sim_gemm, bf16_functional, "gemm_bf16.s", true)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sim_gemm, int8_functional, "gemm_int8.s", true)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond);
BENCHMARK(copy_kernel)->Args({16384, 1})->Args({131072, 1})->Args({16384, 8})->Unit(benchmark::kMillisecond);
BENCHMARK(generate_gemm_chip)->Name("generate/gemm_chip")->Unit(benchmark::kMicrosecond);
BENCHMARK(generate_attention_chip)->Name("generate/attention_chip")->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(sim_gemm, bf16_timing_only, "gemm_bf16.s", false)->Arg(1024)->Arg(2048)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
