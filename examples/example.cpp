// A C++ client of the installed tpusim runtime (runtime.h): an int8 matmul on two simulated "edge" chips in one
// call, each checked against a plain loop. Build with CMake's find_package(tpusim) and tpusim::tpusim
// (examples/CMakeLists.txt), or c++ -std=c++20 example.cpp $(pkg-config --cflags --libs tpusim-cxx).
// Run: ./example_cpp matmul.s
#include <tpusim/runtime/runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace rt = tpusim::runtime;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s matmul.s\n", argv[0]);
    return 2;
  }
  constexpr int64_t M = 16, K = 32, N = 24;
  // The process's one Client (a second is FAILED_PRECONDITION): two chips of the "edge" preset.
  auto made = rt::Client::Create(tpusim::sim::load_config("edge"), 2);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().to_string().c_str()), 1;
  rt::Client& client = *made.value();
  rt::Executable exe = client.assemble_file(argv[1], {{"M", M}, {"K", K}, {"N", N}});

  std::vector<int8_t> a(M * K), b(K * N);
  std::vector<rt::ExecuteArgs> args(2);
  for (int d = 0; d < 2; ++d) {
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<int8_t>((i + d) % 7 - 3);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<int8_t>(i % 5 - 2);
    args[d].device = d;  // buffer_from_host copies before it returns: a and b are reused
    args[d].inputs["a"] = client.buffer_from_host(a.data(), tpusim::isa::DType::I8, {M, K}, d).value();
    args[d].inputs["b"] = client.buffer_from_host(b.data(), tpusim::isa::DType::I8, {K, N}, d).value();
  }
  auto futures = client.execute_async(exe, args);  // both devices, one simulation; returns at once
  int wrong = 0;
  for (int d = 0; d < 2; ++d) {
    const auto& r = futures[d].await();  // ready when the outputs are in their buffers
    if (!r.ok()) return std::fprintf(stderr, "device %d: %s\n", d, r.status().to_string().c_str()), 1;
    std::vector<int32_t> c(M * N);
    rt::Status copied = r.value().outputs.at("c").to_host(c.data()).await().status();  // c filled when ready
    if (!copied.ok()) return std::fprintf(stderr, "%s\n", copied.to_string().c_str()), 1;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        int32_t s = 0;
        for (int64_t k = 0; k < K; ++k) s += static_cast<int8_t>((m * K + k + d) % 7 - 3) * static_cast<int8_t>((k * N + n) % 5 - 2);
        wrong += c[m * N + n] != s;
      }
    std::printf("example_cpp: device %d: matmul %lldx%lldx%lld in %llu cycles\n", d, (long long)M, (long long)K,
                (long long)N, (unsigned long long)r.value().run.stats.cycles);
  }
  std::printf("example_cpp: %d wrong elements\n", wrong);
  return wrong ? 1 : 0;
}
