// The runtime's own costs, beside memcpy of the same sizes measured in the same run. Run:
// build/validation/bench/runtime_bench
//   execute_empty            execute_async + await of a program with no code on device 0: the runtime's overhead
//                            per execution (queue hand-off to the simulation thread, one sc_start, the futures)
//   execute_empty_host_api   the same through the convenience layer (Client::execute)
//   execute_sync/<devices>   one execute_async call on <devices> devices (one ExecuteArgs each) of the empty
//                            program, then await every Future: the per-call overhead, one and several devices
//   execute_pipelined/<devices>  16 such calls submitted back to back, then all awaited (time per call): the
//                            asynchronous path, where submissions overlap the simulation thread's work
//   execute_vadd_sync        one call of vadd (N = 256, two f32 input buffers in HBM): overhead with inputs
//   from_host/<bytes>        buffer_from_host (copy) + ready().await() + Delete: bytes/s
//   to_host/<bytes>          Buffer::to_host().await() of an HBM buffer, into a new host tensor: bytes/s
//   to_host_into/<bytes>     Buffer::to_host(dst).await() into memory the caller allocated once: bytes/s
//   memcpy/<bytes>           std::memcpy of the same size: bytes/s
// Times are wall-clock (UseRealTime): the work happens on the simulation thread.
#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace {
using namespace tpusim;

constexpr int kDevices = 4;

runtime::Client& client() {
  static runtime::Client c(sim::load_config("v4-like"), kDevices);  // one Client per process (SystemC)
  return c;
}

runtime::Executable empty_program() {
  isa::Program p;
  p.name = "empty";
  return client().load_program(p).value();
}

std::vector<runtime::ExecuteArgs> on_devices(int n) {
  std::vector<runtime::ExecuteArgs> args(n);
  for (int d = 0; d < n; ++d) args[d].device = d;
  return args;
}

void execute_sync(benchmark::State& state) {
  runtime::Executable exe = empty_program();
  const auto args = on_devices(static_cast<int>(state.range(0)));
  for (auto _ : state)
    for (const auto& f : client().execute_async(exe, args))
      if (!f.await().ok()) state.SkipWithError(f.await().status().message().c_str());
  state.SetItemsProcessed(state.iterations());
}

void execute_pipelined(benchmark::State& state) {
  constexpr int kInFlight = 16;
  runtime::Executable exe = empty_program();
  const auto args = on_devices(static_cast<int>(state.range(0)));
  std::vector<std::vector<runtime::Future<runtime::ExecuteOutput>>> pending(kInFlight);
  for (auto _ : state) {
    for (auto& p : pending) p = client().execute_async(exe, args);
    for (auto& p : pending)
      for (const auto& f : p)
        if (!f.await().ok()) state.SkipWithError(f.await().status().message().c_str());
  }
  state.SetItemsProcessed(state.iterations() * kInFlight);
}

void execute_vadd_sync(benchmark::State& state) {
  std::map<std::string, int64_t> defines{{"N", 256}};
  for (const auto& [k, v] : sim::kernel_symbols(client().config())) defines[k] = v;
  runtime::Executable exe = client().load_program(kernels::assemble("vadd.s", defines)).value();
  runtime::ExecuteArgs args;
  for (const auto* d : exe.inputs())
    args.inputs[d->name] = client().buffer_from_host(runtime::random_tensor(*d, 1), 0).value();
  for (auto _ : state) {
    const auto& r = client().execute_async(exe, args).await();
    if (!r.ok()) state.SkipWithError(r.status().message().c_str());
  }
  state.SetItemsProcessed(state.iterations());
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
BENCHMARK(execute_sync)->Arg(1)->Arg(kDevices)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(execute_pipelined)->Arg(1)->Arg(kDevices)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(execute_vadd_sync)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(from_host)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(to_host)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(to_host_into)->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(memcpy_bytes)->Name("memcpy")->Arg(4 << 10)->Arg(1 << 20)->Arg(64 << 20)->UseRealTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
