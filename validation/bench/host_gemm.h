// The host f32 GEMM (Eigen), the floor under any functional simulation (docs/architecture.md): shared by sim_bench
// (as a Google Benchmark) and model_bench (measured once per run), so that both report the same thing.
#pragma once

#include <Eigen/Dense>
#include <chrono>

namespace tpusim::bench {

// C = A * B with A, B, C n x n float32 (Eigen::MatrixXf::Random inputs): 2 n^3 floating-point operations a run.
class HostGemm {
 public:
  explicit HostGemm(int n) : n_(n), a_(Eigen::MatrixXf::Random(n, n)), b_(Eigen::MatrixXf::Random(n, n)), c_(n, n) {}
  void run() { c_.noalias() = a_ * b_; }
  const float* result() const { return c_.data(); }  // for benchmark::DoNotOptimize
  double flops() const { return 2.0 * n_ * n_ * n_; }

 private:
  int n_;
  Eigen::MatrixXf a_, b_, c_;
};

// The host's GEMM rate in GFLOP/s (one MAC = 2 FLOPs): the best of repeated n x n products over at least
// `min_seconds` of wall time (after one warm-up product).
inline double host_gemm_gflops(int n = 1024, double min_seconds = 1.0) {
  using clock = std::chrono::steady_clock;
  HostGemm g(n);
  g.run();
  volatile float sink = g.result()[0];
  double best = 0, total = 0;
  while (total < min_seconds) {
    auto t0 = clock::now();
    g.run();
    double s = std::chrono::duration<double>(clock::now() - t0).count();
    sink = g.result()[0];
    total += s;
    if (s > 0 && g.flops() / s > best) best = g.flops() / s;
  }
  (void)sink;
  return best * 1e-9;
}

}  // namespace tpusim::bench
