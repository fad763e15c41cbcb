// Timing of a large GEMM on the v4-like chip against the fold arithmetic of a weight-stationary array.
#include <gtest/gtest.h>

#include <algorithm>

#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace tpusim {
namespace {

runtime::Executable gemm(const runtime::Client& client, const char* kernel, int64_t m, int64_t k, int64_t n) {
  std::map<std::string, int64_t> d{{"M", m}, {"K", k}, {"N", n}};
  for (const auto& [name, v] : sim::kernel_symbols(client.config())) d[name] = v;
  return runtime::Executable(kernels::assemble(kernel, d));
}

std::map<std::string, runtime::HostTensor> random_inputs(const runtime::Executable& exe) {
  std::map<std::string, runtime::HostTensor> in;
  for (const auto* d : exe.inputs()) in[d->name] = runtime::random_tensor(*d, 11 + in.size());
  return in;
}

bool overlaps(const sim::TraceEvent& a, const sim::TraceEvent& b) {
  return a.start < b.start + b.duration && b.start < a.start + a.duration;
}

TEST(GemmTiming, LargeBf16GemmIsWithinTenPercentOfTheFoldBound) {
  runtime::Client client(sim::load_config("v4-like"));
  const auto& cfg = client.config();
  const int64_t M = 1024, K = 1024, N = 1024, R = cfg.mxu.rows, C = cfg.mxu.cols;
  runtime::Executable exe = gemm(client, "gemm_bf16.s", M, K, N);
  runtime::ExecuteOptions opts;
  opts.trace = true;
  runtime::ExecuteResult r = client.execute(exe, random_inputs(exe), opts);

  // Lower bound for a weight-stationary R x C array: every fold (a K-by-N tile of b, ceil(K/R) * ceil(N/C) of
  // them) streams all M rows of a, one row per cycle; before the first row can enter, the first tile's R rows
  // of weights must be shifted in; after the last row enters, its result needs R + C - 2 cycles to leave.
  //   folds = ceil(1024/128) * ceil(1024/128) = 64;  bound = 64 * 1024 + 128 + (128 + 128 - 2) = 65918 cycles.
  const int64_t folds = ((K + R - 1) / R) * ((N + C - 1) / C);
  const uint64_t bound = folds * M + R + (R + C - 2);
  ASSERT_EQ(bound, 65918u);
  EXPECT_GE(r.run.stats.cycles, bound);
  EXPECT_LE(r.run.stats.cycles, bound + bound / 10) << "more than 10% above the fold bound";
  // The array streams a row on (almost) every cycle: its utilisation is reported and high.
  const auto& mxu = r.run.stats.units[static_cast<int>(isa::Unit::Mxu)];
  EXPECT_EQ(mxu.busy_cycles, static_cast<uint64_t>(folds * M));
  EXPECT_GE(mxu.utilization, 0.9);
  EXPECT_EQ(r.run.stats.mxu_macs, static_cast<uint64_t>(M * K * N));

  // Double buffering: loads of later folds run while the array computes earlier ones.
  int overlapping = 0;
  for (const auto& d : r.run.trace)
    if (d.unit == isa::Unit::DmaIn && d.kind == "busy")
      for (const auto& m : r.run.trace)
        if (m.unit == isa::Unit::Mxu && m.kind == "busy" && m.name.rfind("mxu.mm", 0) == 0 && overlaps(d, m)) {
          ++overlapping;
          break;
        }
  EXPECT_GE(overlapping, folds - 2) << "DMA loads should overlap the matrix unit's work";

  // Timing-only gives the same cycles.
  opts.functional = false;
  opts.trace = false;
  EXPECT_EQ(client.execute(exe, random_inputs(exe), opts).run.stats.cycles, r.run.stats.cycles);
}

}  // namespace
}  // namespace tpusim
