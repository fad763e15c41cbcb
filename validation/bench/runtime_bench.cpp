// The runtime's own costs, beside memcpy of the same sizes measured in the same run. Run:
// build/validation/bench/runtime_bench
//   execute_empty            execute_async + await of a program with no code on device 0: the runtime's overhead
//                            per execution (queue hand-off to the simulation thread, one sc_start, the futures)
//   execute_empty_host_api   the same through the convenience layer (Client::execute)
//   from_host/<bytes>        buffer_from_host (copy) + ready().await() + Delete: bytes/s
//   to_host/<bytes>          Buffer::to_host().await() of an HBM buffer, into a new host tensor: bytes/s
//   to_host_into/<bytes>     Buffer::to_host(dst).await() into memory the caller allocated once: bytes/s
//   memcpy/<bytes>           std::memcpy of the same size: bytes/s
// Times are wall-clock (UseRealTime): the work happens on the simulation thread.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "tpusim/runtime/runtime.h"

namespace {
using namespace tpusim;

runtime::Client& client() {
  static runtime::Client c(sim::load_config("v4-like"));  // one Client per process (SystemC)
  return c;
}

void execute_empty(benchmark::State& state) {
  isa::Program p;
  p.name = "empty";
  runtime::Executable exe = client().load_program(p).value();
  for (auto _ : state) {
    auto r = client().execute_async(exe, runtime::ExecuteArgs{}).await();
    if (!r.ok()) state.SkipWithError(r.status().message().c_str());
  }
}

void execute_empty_host_api(benchmark::State& state) {
  isa::Program p;
  p.name = "empty";
  runtime::Executable exe(p);
  for (auto _ : state) benchmark::DoNotOptimize(client().execute(exe, {}).run.stats.cycles);
}

void from_host(benchmark::State& state) {
  std::vector<uint8_t> src(state.range(0), 1);
  for (auto _ : state) {
    runtime::Buffer b =
        client().buffer_from_host(src.data(), isa::DType::I8, {state.range(0)}, 0).value();
    (void)b.ready().await();
    b.Delete();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void to_host(benchmark::State& state) {
  std::vector<uint8_t> src(state.range(0), 1);
  runtime::Buffer b = client().buffer_from_host(src.data(), isa::DType::I8, {state.range(0)}, 0).value();
  for (auto _ : state) benchmark::DoNotOptimize(b.to_host().await().value().data.data());
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

// Into the caller's memory, allocated once: what is left is the copy out of the simulated HBM and the hand-off.
void to_host_into(benchmark::State& state) {
  std::vector<uint8_t> src(state.range(0), 1), dst(state.range(0));
  runtime::Buffer b = client().buffer_from_host(src.data(), isa::DType::I8, {state.range(0)}, 0).value();
  for (auto _ : state) {
    (void)b.to_host(dst.data()).await().value();
    benchmark::DoNotOptimize(dst.data());
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

void memcpy_bytes(benchmark::State& state) {
  std::vector<uint8_t> src(state.range(0), 1), dst(state.range(0));
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), src.size());
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * state.range(0));
}

BENCHMARK(execute_empty)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(execute_empty_host_api)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(from_host)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(to_host)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(to_host_into)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(memcpy_bytes)->Name("memcpy")->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
