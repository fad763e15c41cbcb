// Several host threads submitting to one client with several devices get the results of serial runs. Also the
// test scripts/run-tsan.sh runs under ThreadSanitizer.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>

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
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(mismatches.load(), 0);
  for (int dev = 0; dev < kDevices; ++dev) EXPECT_EQ(c.memory_stats(dev).live_count, 0u) << "device " << dev;
}

}  // namespace
