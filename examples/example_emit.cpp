// A kernel written in C++ through the typed emitter (tpusim/isa/emitter.h) instead of assembly text, run on a
// simulated "edge" chip through the installed runtime: z = x + y over N f32 elements, checked against a plain loop.
// Build as example.cpp (examples/CMakeLists.txt: example_emit). Run: ./example_emit
#include <tpusim/isa/emitter.h>
#include <tpusim/runtime/runtime.h>

#include <cstdio>
#include <cstring>
#include <vector>

namespace isa = tpusim::isa;
namespace rt = tpusim::runtime;

int main() {
  constexpr int64_t N = 1000, X = 0, Y = 65536, Z = 131072;  // elements; HBM addresses of x, y and z
  isa::Emitter e("vadd", "<example>/vadd");
  e.declare({"x", isa::TensorKind::Input, isa::DType::F32, {N}, X});
  e.declare({"y", isa::TensorKind::Input, isa::DType::F32, {N}, Y});
  e.declare({"z", isa::TensorKind::Output, isa::DType::F32, {N}, Z});
  const isa::Reg vx = isa::reg(1), vy = isa::reg(2), hx = isa::reg(3), hy = isa::reg(4), hz = isa::reg(5),
                 one = isa::reg(6), bytes = isa::reg(7), n = isa::reg(8), zero = isa::reg(0);
  const isa::Sem loaded = isa::sem(1), added = isa::sem(2);
  e.li(vx, 0), e.li(vy, 4096), e.li(hx, X), e.li(hy, Y), e.li(hz, Z), e.li(one, 1), e.li(bytes, N * 4), e.li(n, N);
  e.dma_ld(vx, hx, one, bytes, zero, zero);                     // x into VMEM
  e.dma_ld(vy, hy, one, bytes, zero, zero, {.signal = loaded});  // y; loads complete in order: both are in
  e.vpu_add(vx, vx, vy, n, isa::DType::F32, {.wait = loaded, .signal = added});
  e.dma_st(hz, vx, one, bytes, zero, zero, {.wait = added});
  e.halt();

  auto made = rt::Client::Create(tpusim::sim::load_config("edge"), 1);
  if (!made.ok()) return std::fprintf(stderr, "%s\n", made.status().to_string().c_str()), 1;
  rt::Client& client = *made.value();
  std::map<std::string, rt::HostTensor> in;
  std::vector<float> x(N), y(N);
  for (int64_t i = 0; i < N; ++i) x[i] = 0.5f * static_cast<float>(i), y[i] = 3.0f - static_cast<float>(i % 7);
  for (const auto& [name, v] : {std::pair{"x", &x}, std::pair{"y", &y}}) {
    rt::HostTensor t{isa::DType::F32, {N}, std::vector<uint8_t>(N * 4)};
    std::memcpy(t.data.data(), v->data(), N * 4);
    in[name] = t;
  }
  const rt::ExecuteResult r = client.execute(rt::Executable(e.finish()), in);
  std::vector<float> z(N);
  std::memcpy(z.data(), r.outputs.at("z").data.data(), N * 4);
  int wrong = 0;
  for (int64_t i = 0; i < N; ++i) wrong += z[i] != x[i] + y[i];
  std::printf("example_emit: vadd of %lld elements in %llu cycles, %d wrong\n", static_cast<long long>(N),
              static_cast<unsigned long long>(r.run.stats.cycles), wrong);
  return wrong ? 1 : 0;
}
