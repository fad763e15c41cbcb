// The cast-kernel generator (tpusim/kernels/cast.h) against the host's own conversions (bf16 -> f32 exactly, f32 ->
// bf16 rounded to nearest even), against kernels/cast.s run on each tensor alone, and its timing against HBM's
// bandwidth. Each test elaborates one chip.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>

#include "tests/generated_kernel.h"
#include "tpusim/isa/isa.h"
#include "tpusim/kernels/cast.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

using kernels::CastPart;

std::map<std::string, int64_t> symbols(const sim::ChipConfig& cfg) {
  std::map<std::string, int64_t> s;
  for (const auto& [k, v] : sim::kernel_symbols(cfg)) s[k] = v;
  return s;
}

// Random finite values: bf16 bits, or f32 bits of exponent 1..250 (no overflow when rounded to bf16)
uint16_t random_bf16(std::mt19937& rng) {
  const uint32_t sign = rng() & 1, exp = 1 + rng() % 254, man = rng() & 0x7f;
  return static_cast<uint16_t>(sign << 15 | exp << 7 | man);
}
uint32_t random_f32(std::mt19937& rng) {
  const uint32_t sign = rng() & 1, exp = 1 + rng() % 250, man = rng() & 0x7fffff;
  return sign << 31 | exp << 23 | man;
}
uint16_t f32_to_bf16(uint32_t u) { return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16); }

struct Parts {
  std::vector<CastPart> parts;
  uint64_t end = 0;  // HBM bytes used
};

// Sources one after another from 0, destinations after them, each 64-byte aligned
Parts lay_out(const std::vector<int64_t>& sizes, size_t se, size_t de) {
  Parts p;
  uint64_t at = 0;
  for (int64_t n : sizes) p.parts.push_back({at, 0, n}), at += (static_cast<uint64_t>(n) * se + 63) / 64 * 64;
  for (CastPart& c : p.parts) c.dst = at, at += (static_cast<uint64_t>(c.n) * de + 63) / 64 * 64;
  p.end = at;
  return p;
}

// The elements of `got` that are not `convert` of the source's (S in, D out), the first few reported
template <typename S, typename D, typename F>
size_t wrong(const std::vector<uint8_t>& mem, const std::vector<uint8_t>& got, const std::vector<CastPart>& parts,
             F convert) {
  size_t bad = 0;
  for (const CastPart& c : parts)
    for (int64_t i = 0; i < c.n; ++i) {
      S x;
      D y;
      std::memcpy(&x, &mem[c.src + static_cast<uint64_t>(i) * sizeof(S)], sizeof(S));
      std::memcpy(&y, &got[c.dst + static_cast<uint64_t>(i) * sizeof(D)], sizeof(D));
      if (y != convert(x) && bad++ < 5)
        ADD_FAILURE() << "part at " << c.src << ", element " << i << ": " << y << " for bits " << x << ", expected "
                      << convert(x);
    }
  return bad;
}

// Several tensors, one of more than one chunk and more of them than slots, bf16 -> f32: every element as the host
// converts it (exactly), and every byte as cast.s leaves it run on each tensor alone.
TEST(Cast, SeveralTensorsAsTheHostAndCastsAloneConvertThem) {
  const sim::ChipConfig cfg = sim::load_config("v5e", {});
  auto chip = std::make_unique<sim::Chip>(cfg);
  const std::map<std::string, int64_t> syms = symbols(cfg);
  const int64_t ch = kernels::cast_chunk(isa::DType::BF16, isa::DType::F32, syms);
  const Parts p = lay_out({1, 3000, ch + 77, 4096, 5, 2 * ch, 333}, 2, 4);
  ASSERT_EQ(kernels::cast_chunks(p.parts, isa::DType::BF16, isa::DType::F32, syms), 9);
  std::mt19937 rng(7);
  std::vector<uint8_t> mem(p.end);
  for (const CastPart& c : p.parts)
    for (int64_t i = 0; i < c.n; ++i) {
      const uint16_t v = random_bf16(rng);
      std::memcpy(&mem[c.src + static_cast<uint64_t>(i) * 2], &v, 2);
    }
  chip->write_hbm(0, mem.data(), mem.size());
  const isa::Program prog = kernels::cast_kernel(p.parts, isa::DType::BF16, isa::DType::F32, syms);
  chip->run(prog);
  std::vector<uint8_t> merged(p.end);
  chip->read_hbm(0, merged.data(), merged.size());
  EXPECT_EQ((wrong<uint16_t, uint32_t>(mem, merged, p.parts, [](uint16_t x) { return uint32_t{x} << 16; })), 0u);
  // cast.s on each tensor alone, on the same inputs
  chip->write_hbm(0, std::vector<uint8_t>(p.end).data(), p.end);
  chip->write_hbm(0, mem.data(), mem.size());
  for (const CastPart& c : p.parts) {
    std::map<std::string, int64_t> d = syms;
    d["N"] = c.n, d["SDT"] = static_cast<int64_t>(isa::DType::BF16), d["DDT"] = static_cast<int64_t>(isa::DType::F32);
    chip->run(kernels::assemble("cast.s", d, {{"x", c.src}, {"y", c.dst}}));
  }
  std::vector<uint8_t> alone(p.end);
  chip->read_hbm(0, alone.data(), alone.size());
  EXPECT_EQ(alone, merged);
}

// f32 -> bf16, rounded to nearest even, over tensors of sizes that leave the vector unit's last row part full.
TEST(Cast, RoundsToNearestEvenIntoBf16) {
  const sim::ChipConfig cfg = sim::load_config("v4-like", {});
  auto chip = std::make_unique<sim::Chip>(cfg);
  const std::map<std::string, int64_t> syms = symbols(cfg);
  const Parts p = lay_out({129, 1, 70000, 64, 4097}, 4, 2);
  std::mt19937 rng(11);
  std::vector<uint8_t> mem(p.end);
  for (const CastPart& c : p.parts)
    for (int64_t i = 0; i < c.n; ++i) {
      uint32_t v = random_f32(rng);
      if (i % 7 == 0) v = (v & 0xffff0000u) | 0x8000u;  // exactly halfway: to the even neighbour
      std::memcpy(&mem[c.src + static_cast<uint64_t>(i) * 4], &v, 4);
    }
  chip->write_hbm(0, mem.data(), mem.size());
  chip->run(kernels::cast_kernel(p.parts, isa::DType::F32, isa::DType::BF16, syms));
  std::vector<uint8_t> got(p.end);
  chip->read_hbm(0, got.data(), got.size());
  EXPECT_EQ((wrong<uint32_t, uint16_t>(mem, got, p.parts, f32_to_bf16)), 0u);
}

// A decoder's KV cache written out: 24 tensors of 128 x 768 bf16 -> f32 on v6e. Four stores in flight keep HBM
// busy: the kernel takes its bytes (each tensor read once, written once) at HBM's bandwidth plus a load's and a
// store's latency, within 10%; cast.s on each tensor alone pays its load, cast and store latency one after the
// other, each time (timing-only runs, the same cycles as functional ones).
TEST(Cast, TensorsFollowEachOtherAtTheHbmBandwidth) {
  const sim::ChipConfig cfg = sim::load_config("v6e", {});
  auto chip = std::make_unique<sim::Chip>(cfg);
  const std::map<std::string, int64_t> syms = symbols(cfg);
  const Parts p = lay_out(std::vector<int64_t>(24, 128 * 768), 2, 4);
  sim::RunOptions timing;
  timing.functional = false;
  const sim::RunResult r = chip->run(kernels::cast_kernel(p.parts, isa::DType::BF16, isa::DType::F32, syms), timing);
  const double bytes = 24.0 * 128 * 768 * (2 + 4), bw = cfg.hbm_bytes_per_cycle();
  const double expect = bytes / bw + 2.0 * cfg.dma.latency;
  EXPECT_EQ(r.stats.hbm_bytes_read + r.stats.hbm_bytes_written, static_cast<uint64_t>(bytes));
  EXPECT_GE(static_cast<double>(r.stats.cycles), bytes / bw);
  EXPECT_LE(static_cast<double>(r.stats.cycles), 1.10 * expect);
  uint64_t alone = 0;
  for (const CastPart& c : p.parts) {
    std::map<std::string, int64_t> d = syms;
    d["N"] = c.n, d["SDT"] = static_cast<int64_t>(isa::DType::BF16), d["DDT"] = static_cast<int64_t>(isa::DType::F32);
    alone += chip->run(kernels::assemble("cast.s", d, {{"x", c.src}, {"y", c.dst}}), timing).stats.cycles;
  }
  std::printf("24 casts of 128 x 768: %llu cycles in one kernel (expected %.0f), %llu as 24 cast.s runs\n",
              static_cast<unsigned long long>(r.stats.cycles), expect, static_cast<unsigned long long>(alone));
  EXPECT_LT(static_cast<double>(r.stats.cycles), 0.8 * static_cast<double>(alone));
}

// The text assembles back into the kernel; made 100 instructions later, only its branch targets (none) would move.
TEST(Cast, SourceAssemblesBackIntoTheKernel) {
  const std::map<std::string, int64_t> syms = symbols(sim::load_config("v5e", {}));
  const Parts p = lay_out({1000, 70000, 3}, 2, 4);
  const isa::Program k = kernels::cast_kernel(p.parts, isa::DType::BF16, isa::DType::F32, syms);
  testing::expect_source_is(k, kernels::cast_source(p.parts, isa::DType::BF16, isa::DType::F32, syms), 1);
  EXPECT_EQ(testing::expect_moved_by(k, kernels::cast_kernel(p.parts, isa::DType::BF16, isa::DType::F32, syms, 100),
                                     100),
            0u);
}

TEST(Cast, RefusesOverlappingOrEmptyParts) {
  const std::map<std::string, int64_t> syms = symbols(sim::load_config("v5e", {}));
  const isa::DType b = isa::DType::BF16, f = isa::DType::F32;
  EXPECT_THROW(kernels::cast_kernel({}, b, f, syms), std::invalid_argument);
  EXPECT_THROW(kernels::cast_kernel({{0, 4096, 0}}, b, f, syms), std::invalid_argument);
  // part 1 writes what part 0 reads; part 1 writes over part 0's output; a part over its own source
  EXPECT_THROW(kernels::cast_kernel({{0, 8192, 100}, {4096, 0, 100}}, b, f, syms), std::invalid_argument);
  EXPECT_THROW(kernels::cast_kernel({{0, 8192, 100}, {4096, 8192 + 200, 100}}, b, f, syms), std::invalid_argument);
  EXPECT_THROW(kernels::cast_kernel({{0, 100, 100}}, b, f, syms), std::invalid_argument);
  EXPECT_NO_THROW(kernels::cast_kernel({{0, 8192, 100}, {4096, 8192 + 400, 100}}, b, f, syms));
  // more chunks than the limit
  const int64_t ch = kernels::cast_chunk(b, f, syms);
  EXPECT_THROW(kernels::cast_kernel({{0, 1ull << 40, ch * (kernels::kMaxCastChunks + 1)}}, b, f, syms),
               std::invalid_argument);
  std::map<std::string, int64_t> tiny = syms;
  tiny["VMEM_BYTES"] = 4096;
  EXPECT_THROW(kernels::cast_chunk(b, f, tiny), std::invalid_argument);
}

}  // namespace
}  // namespace tpusim
