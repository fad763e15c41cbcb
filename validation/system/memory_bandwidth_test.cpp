// A memory-bound kernel (kernels/vadd.s, y[N] = a[N] + b[N] in f32) runs at HBM bandwidth on every preset.
#include <gtest/gtest.h>

#include <cstring>

#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace tpusim {
namespace {

runtime::Executable vadd(const runtime::Client& client, int64_t n) {
  std::map<std::string, int64_t> d{{"N", n}};
  for (const auto& [name, v] : sim::kernel_symbols(client.config())) d[name] = v;
  return runtime::Executable(kernels::assemble("vadd.s", d));
}

std::map<std::string, runtime::HostTensor> random_inputs(const runtime::Executable& exe) {
  std::map<std::string, runtime::HostTensor> in;
  for (const auto* d : exe.inputs()) in[d->name] = runtime::random_tensor(*d, 5 + in.size());
  return in;
}

class VaddBandwidth : public testing::TestWithParam<const char*> {};

TEST_P(VaddBandwidth, RunsAtTotalBytesOverBandwidthWithinFivePercent) {
  runtime::Client client(sim::load_config(GetParam()));
  const sim::ChipConfig& cfg = client.config();
  // N = VMEM_BYTES / 3 elements: about 8 of vadd.s's chunks (each VMEM_BYTES / 24 elements: 2 slots x a, b, y
  // of 4 bytes), so the pipeline's fill (the first loads) and drain (the last add and store) are small.
  const auto n = static_cast<int64_t>(cfg.vmem_bytes() / 3);
  runtime::Executable exe = vadd(client, n);
  runtime::ExecuteOptions opts;
  opts.functional = false;
  const runtime::ExecuteResult r = client.execute(exe, random_inputs(exe), opts);

  // HBM moves 3 * 4 * N bytes (read a and b, write y) at bandwidth_gbs * 1e9 / (clock_mhz * 1e6) bytes per
  // cycle; e.g. v4-like: N = 16 MiB / 3 = 5592405, 67108860 bytes at 1200e9 / 1050e6 = 1142.86 bytes per cycle
  // = 58720 cycles. The run may not beat that and should be within 5% of it.
  const double bytes = 12.0 * static_cast<double>(n);
  const double bound = bytes / cfg.hbm_bytes_per_cycle();
  EXPECT_EQ(r.run.stats.hbm_bytes_read + r.run.stats.hbm_bytes_written, static_cast<uint64_t>(bytes));
  const auto cycles = static_cast<double>(r.run.stats.cycles);
  EXPECT_GE(cycles, bound);
  EXPECT_LE(cycles, bound * 1.05) << "achieved " << bytes / cycles << " of " << cfg.hbm_bytes_per_cycle()
                                  << " bytes per cycle";
  RecordProperty("achieved_fraction_of_bandwidth", std::to_string(bound / cycles));
  std::printf("%s: %.0f cycles for %.0f bytes, bound %.0f: %.2f%% of configured bandwidth\n", GetParam(), cycles,
              bytes, bound, 100.0 * bound / cycles);
}

INSTANTIATE_TEST_SUITE_P(Presets, VaddBandwidth, testing::Values("v1-like", "v4-like", "edge"),
                         [](const testing::TestParamInfo<const char*>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(Vadd, AddsOnEveryChunkIncludingAPartialOne) {
  runtime::Client client(sim::load_config("edge"));
  const auto n = static_cast<int64_t>(client.config().vmem_bytes() / 24 * 2 + 77);  // 2 chunks and a bit
  runtime::Executable exe = vadd(client, n);
  auto in = random_inputs(exe);
  const runtime::ExecuteResult r = client.execute(exe, in, {});
  const runtime::HostTensor& y = r.outputs.at("y");
  ASSERT_EQ(y.elements(), n);
  for (int64_t i = 0; i < n; ++i) {
    float a, b, got;
    std::memcpy(&a, in["a"].data.data() + 4 * i, 4);
    std::memcpy(&b, in["b"].data.data() + 4 * i, 4);
    std::memcpy(&got, y.data.data() + 4 * i, 4);
    ASSERT_EQ(got, a + b) << "element " << i;
  }
}

}  // namespace
}  // namespace tpusim
