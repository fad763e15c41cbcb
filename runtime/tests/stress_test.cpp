// Several host threads submitting to one client with several devices get the results of serial runs. Also the
// test scripts/run-tsan.sh runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "../src/client_core.h"  // the simulation thread's counters and its batching switch

#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace {
using namespace tpusim;

TEST(Stress, ThreadsTimesSubmissionsMatchSerialRuns) {
  constexpr int kDevices = 3, kThreads = 6, kSubmissions = 40, kInputs = 4;
  runtime::Client c(sim::load_config("v4-like"), kDevices);
  std::map<std::string, int64_t> d{{"M", 32}, {"K", 64}, {"N", 48}};
  for (const auto& [k, v] : sim::kernel_symbols(c.config())) d[k] = v;
  runtime::Executable exe = c.load_program(kernels::assemble("gemm_int8.s", d)).value();
  // Serial references: kInputs input sets, run one at a time through the convenience layer.
  std::vector<std::map<std::string, runtime::HostTensor>> in(kInputs);
  std::vector<runtime::ExecuteResult> want;
  for (int i = 0; i < kInputs; ++i) {
    for (const auto* t : exe.inputs()) in[i][t->name] = runtime::random_tensor(*t, 100 * i + in[i].size());
    want.push_back(c.execute(exe, in[i]));
  }
  runtime::Buffer in_use = c.buffer_from_host(in[0].begin()->second, 0).value();  // (to reach the client's core)
  std::atomic<int> mismatches{0}, failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int s = 0; s < kSubmissions; ++s) {
        const int i = (t + s) % kInputs, device = (t * 7 + s) % kDevices;
        runtime::ExecuteArgs a;
        a.device = device;
        for (const auto& [name, h] : in[i]) a.inputs[name] = c.buffer_from_host(h, device).value();
        if (s % 3 == 0) a.donate = {"a"};
        runtime::Future<runtime::ExecuteOutput> f;
        if (s % 5 == 0) {  // sometimes on two devices at once
          runtime::ExecuteArgs b = a;
          b.device = (device + 1) % kDevices;
          b.donate.clear();
          for (const auto& [name, h] : in[i]) b.inputs[name] = c.buffer_from_host(h, b.device).value();
          auto fs = c.execute_async(exe, {a, b});
          f = fs[0];
          if (!fs[1].await().ok()) ++failures;
        } else {
          f = c.execute_async(exe, a);
        }
        const auto& r = f.await();
        if (!r.ok()) {
          ++failures;
          ADD_FAILURE() << r.status().to_string();
          continue;
        }
        if (r.value().run.stats.cycles != want[i].run.stats.cycles) ++mismatches;
        auto host = r.value().outputs.at("c").to_host().await();
        if (!host.ok() || host.value().data != want[i].outputs.at("c").data) ++mismatches;
      }
    });
  }
  for (auto& th : threads) th.join();
  auto core = runtime::detail::ClientCore::state_of(in_use)->client.lock();
  std::printf("stress: %llu chips in %llu simulations\n", (unsigned long long)core->chips_simulated.load(),
              (unsigned long long)core->simulations.load());
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  in_use.Delete();
  for (int dev = 0; dev < kDevices; ++dev) EXPECT_EQ(c.memory_stats(dev).live_count, 0u) << "device " << dev;
}

// One thread per device, each submitting its executions (waiting for each before the next, or all at once): the
// simulation thread runs the devices together, with the results and cycles of serial runs. Prints the wall time
// with batching and without (one item at a time, as before batching).
TEST(Stress, ThreadPerDeviceOverlapsAndMatchesSerialRuns) {
  constexpr int kDevices = 4, kSubmissions = 12;
  runtime::Client c(sim::load_config("v4-like"), kDevices);
  std::map<std::string, int64_t> d{{"M", 64}, {"K", 128}, {"N", 128}};
  for (const auto& [k, v] : sim::kernel_symbols(c.config())) d[k] = v;
  runtime::Executable exe = c.load_program(kernels::assemble("gemm_int8.s", d)).value();
  std::vector<std::map<std::string, runtime::HostTensor>> in(kDevices);
  std::vector<runtime::ExecuteResult> want;
  for (int i = 0; i < kDevices; ++i) {
    for (const auto* t : exe.inputs()) in[i][t->name] = runtime::random_tensor(*t, 7 * i + in[i].size());
    want.push_back(c.execute(exe, in[i]));
  }
  std::vector<runtime::ExecuteArgs> args(kDevices);
  for (int dev = 0; dev < kDevices; ++dev) {
    args[dev].device = dev;
    for (const auto& [name, h] : in[dev]) args[dev].inputs[name] = c.buffer_from_host(h, dev).value();
  }
  auto core = runtime::detail::ClientCore::state_of(args[0].inputs.begin()->second)->client.lock();
  for (bool await_each : {true, false}) {
    for (bool batching : {false, true}) {
      core->batching = batching;
      const uint64_t sims0 = core->simulations, chips0 = core->chips_simulated;
      std::atomic<int> mismatches{0};
      auto t0 = std::chrono::steady_clock::now();
      std::vector<std::thread> threads;
      for (int dev = 0; dev < kDevices; ++dev) {
        threads.emplace_back([&, dev] {
          std::vector<runtime::Future<runtime::ExecuteOutput>> fs;
          for (int s = 0; s < kSubmissions; ++s) {
            fs.push_back(c.execute_async(exe, args[dev]));
            if (await_each) (void)fs.back().await();
          }
          for (const auto& f : fs) {
            const auto& r = f.await();
            if (!r.ok() || r.value().run.stats.cycles != want[dev].run.stats.cycles) ++mismatches;
          }
          auto host = fs.back().await().value().outputs.at("c").to_host().await();
          if (!host.ok() || host.value().data != want[dev].outputs.at("c").data) ++mismatches;
        });
      }
      for (auto& th : threads) th.join();
      const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      const uint64_t sims = core->simulations - sims0, chips = core->chips_simulated - chips0;
      std::printf("%d devices x %d submissions (%s), batching %s: %.1f ms, %llu executions in %llu simulations\n",
                  kDevices, kSubmissions, await_each ? "each awaited" : "all at once", batching ? "on" : "off", ms,
                  (unsigned long long)chips, (unsigned long long)sims);
      EXPECT_EQ(mismatches.load(), 0);
      EXPECT_EQ(chips, uint64_t(kDevices * kSubmissions));
      if (!batching) {
        EXPECT_EQ(sims, chips);
      }
    }
  }
}

}  // namespace
