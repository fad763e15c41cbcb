// The split-K GEMM generator (tpusim/kernels/gemm_ksplit.h) against kernels/gemm.s on the same inputs: every byte
// of c the same (gemm.s sums each element's folds in order in one accumulator; the split kernel adds the folds it
// keeps apart in that order), over the epilogues, layouts and types it takes, and its time against gemm.s's on one
// matrix unit. Each test elaborates one chip.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>

#include "tpusim/isa/isa.h"
#include "tpusim/kernels/gemm_ksplit.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

using isa::DType;
using kernels::GemmKSplit;
using kernels::RowMap;

std::map<std::string, int64_t> symbols(const sim::ChipConfig& cfg) {
  std::map<std::string, int64_t> s;
  for (const auto& [k, v] : sim::kernel_symbols(cfg)) s[k] = v;
  return s;
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// bf16 bits of a value uniform in [-1, 1), or f32 bits of one
uint16_t bf16_of(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return static_cast<uint16_t>((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}

struct Outcome {
  uint64_t ksplit_cycles = 0, gemm_cycles = 0;
  size_t bytes = 0;  // of the outputs
  // the split kernel's run: bytes read from HBM, the shared memory and within VMEM (the local window); and, with
  // b_preloaded, HBM's bytes read by gemm_ksplit_first_b's program, run before it
  uint64_t hbm_read = 0, shared_read = 0, local_read = 0, first_b_hbm_read = 0;
};

// One chip per process (SystemC elaborates once): each test runs on one preset.
struct OnChip {
  explicit OnChip(const std::string& preset) : name(preset), cfg(sim::load_config(preset, {})),
                                               chip(std::make_unique<sim::Chip>(cfg)), syms(symbols(cfg)) {}
  std::string name;
  sim::ChipConfig cfg;
  std::unique_ptr<sim::Chip> chip;
  std::map<std::string, int64_t> syms;
};

// Runs gemm.s and gemm_ksplit on the same random inputs and expects every byte of c the same (with b_preloaded,
// gemm_ksplit_first_b's program runs just before the kernel, as the compiler places it; with lw_sem, in the same
// run as the kernel, its code first). With a_in_vmem, a
// lies in the upper half of VMEM (as a compiled model's intermediates do on one core), read through the local
// window; with a_in_shared, in the chip's shared memory (as they do on v4), read through the shared window.
// With background_bytes > 0, the kernel also loads that many random bytes from HBM into the top of VMEM
// (GemmKSplit::background, in three loads), which must land there.
Outcome same_bits(OnChip& on, const GemmKSplit& given, uint32_t seed, bool a_in_vmem = false,
                  int64_t background_bytes = 0, bool a_in_shared = false) {
  GemmKSplit g = given;
  const std::string& preset = on.name;
  sim::Chip* chip = on.chip.get();
  const std::map<std::string, int64_t>& syms = on.syms;
  const int64_t R = syms.at("MXU_ROWS"), C = syms.at("MXU_COLS");
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const int64_t a_rows = g.taps.cin > 0 ? g.taps.rows : g.m, a_cols = g.taps.cin > 0 ? g.taps.cin : g.k;
  const int64_t F = cdiv(g.k, R), NS = cdiv(g.n, C);
  const int64_t b_bytes = g.b_tiled ? F * NS * R * C * E : g.k * g.n * E;
  auto up = [](int64_t v) { return static_cast<uint64_t>((v + 4095) / 4096 * 4096); };
  std::map<std::string, uint64_t> addr;
  uint64_t at = 0;
  auto place = [&](const char* name, int64_t bytes) { addr[name] = at, at += up(bytes); };
  place("a", a_rows * a_cols * E);
  place("b", b_bytes);
  const uint64_t a_vmem = static_cast<uint64_t>(syms.at("VMEM_BYTES") / 2);
  if (g.dequant) place("dq", g.n * 8);
  else if (g.bias) place("bias", g.n * 4);
  if (g.residual) place("r", g.m * g.n * O);
  // the outputs, each twice: gemm.s's, then the split kernel's
  std::vector<std::pair<std::string, int64_t>> outs;  // name, bytes
  if (!g.q_only) outs.push_back({"c", g.m * g.n * O});
  if (g.q_scale_bits != 0) outs.push_back({"q", g.m * g.n});
  std::map<std::string, uint64_t> second;
  for (const auto& [name, bytes] : outs) place(name.c_str(), bytes), second[name] = at, at += up(bytes);
  const uint64_t bg = at;
  at += up(background_bytes);
  std::vector<uint8_t> mem(at, 0);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  auto put = [&](uint64_t off, const void* p, size_t n) { std::memcpy(&mem[off], p, n); };
  auto element = [&](uint64_t off, DType dt) {  // a random element of type dt at off
    if (dt == DType::BF16) {
      const uint16_t v = bf16_of(unit(rng));
      put(off, &v, 2);
    } else if (dt == DType::I8) {
      const auto v = static_cast<int8_t>(static_cast<int>(rng() % 256) - 128);
      put(off, &v, 1);
    } else if (dt == DType::F32) {
      const float v = unit(rng);
      put(off, &v, 4);
    } else {
      const auto v = static_cast<int32_t>(rng() % 2001) - 1000;
      put(off, &v, 4);
    }
  };
  for (int64_t i = 0; i < a_rows * a_cols; ++i) element(addr["a"] + static_cast<uint64_t>(i * E), g.in);
  for (int64_t k = 0; k < g.k; ++k)
    for (int64_t n = 0; n < g.n; ++n) {
      const int64_t idx = g.b_tiled ? (((k / R) * NS + n / C) * R + k % R) * C + n % C : k * g.n + n;
      element(addr["b"] + static_cast<uint64_t>(idx * E), g.in);
    }
  const DType acc_dt = g.in == DType::I8 ? DType::I32 : DType::F32;
  if (g.dequant)
    for (int64_t j = 0; j < g.n; ++j) {
      const float pair[2] = {0.002f * (1.0f + unit(rng)), unit(rng)};
      put(addr["dq"] + static_cast<uint64_t>(j * 8), pair, 8);
    }
  else if (g.bias)
    for (int64_t j = 0; j < g.n; ++j) element(addr["bias"] + static_cast<uint64_t>(j * 4), acc_dt);
  if (g.residual)
    for (int64_t i = 0; i < g.m * g.n; ++i) element(addr["r"] + static_cast<uint64_t>(i * O), g.out);
  for (int64_t i = 0; i < background_bytes; ++i) mem[bg + static_cast<uint64_t>(i)] = static_cast<uint8_t>(rng());
  const int64_t bg_vmem = syms.at("VMEM_BYTES") - background_bytes;
  for (int64_t i = 0, part = background_bytes / 3; i < 3; ++i) {
    const int64_t from = i * part, bytes = i == 2 ? background_bytes - from : part;
    if (bytes > 0) g.background.push_back({bg_vmem + from, static_cast<int64_t>(bg) + from, 1, bytes, 0, 0});
  }
  chip->write_hbm(0, mem.data(), mem.size());
  if (a_in_vmem) {
    chip->write_vmem(a_vmem, &mem[addr["a"]], static_cast<size_t>(a_rows * a_cols * E));
    addr["a"] = isa::kLocalWindow + a_vmem;
  }
  if (a_in_shared) {  // copied there through VMEM by a program of two transfers
    isa::Emitter e("to_shared", "<test>", 0);
    const int64_t bytes = a_rows * a_cols * E;
    e.li(isa::reg(1), 0), e.li(isa::reg(2), static_cast<int64_t>(addr["a"])), e.li(isa::reg(3), 1);
    e.li(isa::reg(4), bytes), e.li(isa::reg(5), static_cast<int64_t>(isa::kSharedWindow));
    e.dma_ld(isa::reg(1), isa::reg(2), isa::reg(3), isa::reg(4), isa::reg(4), isa::reg(4), {.signal = isa::sem(1)});
    e.dma_st(isa::reg(5), isa::reg(1), isa::reg(3), isa::reg(4), isa::reg(4), isa::reg(4), {.wait = isa::sem(1)});
    e.halt();
    chip->run(e.finish());
    addr["a"] = isa::kSharedWindow;
  }

  std::map<std::string, int64_t> d = syms;
  d["M"] = g.m, d["K"] = g.k, d["N"] = g.n, d["IN_DT"] = static_cast<int64_t>(g.in),
  d["OUT_DT"] = static_cast<int64_t>(g.out), d["BIAS"] = g.bias, d["RELU"] = g.relu, d["SCALE"] = g.scale_bits,
  d["DEQUANT"] = g.dequant, d["B_TILED"] = g.b_tiled, d["RESIDUAL"] = g.residual, d["RES_RELU"] = g.residual_relu,
  d["Q_SCALE"] = g.q_scale_bits, d["Q_ONLY"] = g.q_only;
  if (g.taps.cin > 0)
    d["TAP_CIN"] = g.taps.cin, d["TAP_ROWS"] = g.taps.rows, d["TAP_KW"] = g.taps.kw, d["TAP_SH"] = g.taps.sh,
    d["TAP_SW"] = g.taps.sw, d["TAP_DH"] = g.taps.dh, d["TAP_DW"] = g.taps.dw, d["TAP_WQ"] = g.taps.wq,
    d["TAP_PHASE_ROWS"] = g.taps.phase_rows, d["TAP_PITCH"] = g.taps.pitch;
  Outcome o;
  o.gemm_cycles = chip->run(kernels::assemble("gemm.s", d, addr)).stats.cycles;
  std::map<std::string, uint64_t> addr2 = addr;
  for (const auto& [name, at2] : second) addr2[name] = at2;
  if (g.b_preloaded > 0 && g.lw_sem == 0)
    o.first_b_hbm_read = chip->run(kernels::gemm_ksplit_first_b(g, syms, addr2)).stats.hbm_bytes_read;
  isa::Program kernel = kernels::gemm_ksplit_kernel(g, syms, addr2);
  if (g.lw_sem > 0) {  // the units' shadow buffers last only within a run: the first program, then the kernel
    const isa::Program first = kernels::gemm_ksplit_first_b(g, syms, addr2);
    isa::Program both = kernels::gemm_ksplit_kernel(g, syms, addr2, first.code.size());
    both.code.insert(both.code.begin(), first.code.begin(), first.code.end());
    both.source.insert(both.source.begin(), first.source.begin(), first.source.end());
    for (isa::Region& r : both.regions) r.begin += first.code.size(), r.end += first.code.size();
    kernel = both;
  }
  const sim::RunStats run = chip->run(kernel).stats;
  o.ksplit_cycles = run.cycles, o.hbm_read = run.hbm_bytes_read, o.shared_read = run.shared_bytes_read,
  o.local_read = run.local_bytes_read;
  for (const auto& [name, bytes] : outs) {
    std::vector<uint8_t> want(static_cast<size_t>(bytes)), got(static_cast<size_t>(bytes));
    chip->read_hbm(addr[name], want.data(), want.size());
    chip->read_hbm(second[name], got.data(), got.size());
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += want[i] != got[i];
    EXPECT_EQ(differ, 0u) << preset << ": " << name << " of " << g.m << " x " << g.k << " x " << g.n;
    // not vacuous: gemm.s wrote it (some byte of it is not zero)
    EXPECT_NE(std::count(want.begin(), want.end(), uint8_t{0}), static_cast<std::ptrdiff_t>(want.size()));
    o.bytes += want.size();
  }
  if (background_bytes > 0) {
    std::vector<uint8_t> loaded(static_cast<size_t>(background_bytes));
    chip->read_vmem(static_cast<uint64_t>(bg_vmem), loaded.data(), loaded.size());
    EXPECT_TRUE(std::equal(loaded.begin(), loaded.end(), mem.begin() + static_cast<std::ptrdiff_t>(bg)));
  }
  return o;
}

// f32 out, the sums themselves: 9 folds of 256 on v6e's 4 units (folds 0-1 accumulated in one unit, 2-8 each in a
// region of its own, added in order), and 18 folds of 128 over 2 strips on v5e; K's last fold partial.
TEST(GemmKSplit, SumsAsGemmSInF32) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 196, g.k = 2304, g.n = 256, g.out = DType::F32;
  same_bits(v6e, g, 1);
}
TEST(GemmKSplit, SumsOfTwoStripsAsGemmSInF32) {
  OnChip v5e("v5e");
  GemmKSplit g;
  g.m = 100, g.k = 2250, g.n = 200, g.out = DType::F32;
  same_bits(v5e, g, 2);
}

// A convolution's epilogue and layouts: 3 x 3 taps of 64 channels over a 16 x 16 padded input (bias, ReLU, bf16
// out, tiled weights) on v6e; a residual with its ReLU over 3 strips, the last partial, with b as [K, N], on v5e.
TEST(GemmKSplit, ConvolutionTapsBiasAndReluAsGemmS) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 14 * 16, g.k = 9 * 64, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true, g.b_tiled = true;
  g.taps = kernels::ConvTaps{64, 16 * 16 + 2, 3, 1, 1, 1, 1, 16, 16 * 16 + 2};
  same_bits(v6e, g, 3);
}
TEST(GemmKSplit, ResidualAndItsReluAsGemmS) {
  OnChip v5e("v5e");
  GemmKSplit r;
  r.m = 150, r.k = 1000, r.n = 300, r.out = DType::BF16, r.bias = true, r.residual = true, r.residual_relu = true;
  same_bits(v5e, r, 4);
}

// int8: i32 accumulators (each unit's run of a strip accumulated whole), dequantised to bf16 with ReLU; and
// requantised to i8 by a scale.
TEST(GemmKSplit, Int8DequantAndRequantAsGemmS) {
  OnChip v5e("v5e");
  GemmKSplit g;
  g.m = 64, g.k = 1280, g.n = 128, g.in = DType::I8, g.out = DType::BF16, g.dequant = true, g.bias = true,
  g.relu = true;
  same_bits(v5e, g, 5);
  GemmKSplit q;
  q.m = 70, q.k = 900, q.n = 130, q.in = DType::I8, q.out = DType::I8, q.bias = true, q.relu = true;
  const float scale = 0.0005f;
  std::memcpy(&q.scale_bits, &scale, 4);
  same_bits(v5e, q, 6);
}

// int8 with its int8 copy for the next layer (gemm.s Q_SCALE): c in bf16 and q; and q alone (Q_ONLY).
TEST(GemmKSplit, Int8CopyForTheNextLayerAsGemmS) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 196, g.k = 2304, g.n = 256, g.in = DType::I8, g.out = DType::BF16, g.dequant = true, g.bias = true,
  g.relu = true, g.b_tiled = true;
  const float qs = 40.0f;
  std::memcpy(&g.q_scale_bits, &qs, 4);
  same_bits(v6e, g, 10);
  g.q_only = true;
  same_bits(v6e, g, 11);
}

// Rows beyond one tile of the accumulators: 2,500 rows of 8 folds on v5e (two regions on three of the units, so row
// tiles of 834), a's block reloaded and the regions reused per tile.
TEST(GemmKSplit, RowTilesAsGemmS) {
  OnChip v5e("v5e");
  GemmKSplit g;
  g.m = 2500, g.k = 1024, g.n = 128, g.out = DType::BF16, g.bias = true;
  const kernels::KSplitPlan p = kernels::gemm_ksplit_plan(g, v5e.syms);
  EXPECT_EQ(p.row_tiles, 3);
  EXPECT_EQ(p.regions, 2);
  same_bits(v5e, g, 7);
}

// Shapes drawn at random on v5e (matrix units of 128): M, K and N of partial tiles, one to five strips, bf16 or
// int8, with or without a bias, ReLU, residual, tiled weights or a 3 x 3 convolution's taps; every byte as gemm.s.
TEST(GemmKSplit, RandomShapesAsGemmS) {
  OnChip v5e("v5e");
  std::mt19937 rng(12);
  auto pick = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(rng() % static_cast<uint32_t>(hi - lo + 1)); };
  int ran = 0;
  for (int i = 0; i < 40 && ran < 24; ++i) {
    GemmKSplit g;
    g.in = rng() % 3 == 0 ? DType::I8 : DType::BF16;
    g.out = g.in == DType::I8 ? (rng() % 2 ? DType::I32 : DType::BF16) : (rng() % 2 ? DType::F32 : DType::BF16);
    g.dequant = g.in == DType::I8 && g.out == DType::BF16;
    g.bias = rng() % 2 == 0, g.relu = rng() % 2 == 0, g.b_tiled = rng() % 2 == 0;
    g.residual = g.in == DType::BF16 && rng() % 3 == 0, g.residual_relu = g.residual && rng() % 2 == 0;
    if (rng() % 3 == 0) {  // a 3 x 3 convolution over an oh x ow image padded by one
      const int64_t cin = std::array<int64_t, 3>{16, 64, 96}[rng() % 3], oh = pick(3, 12), ow = pick(3, 12);
      const int64_t wq = ow + 2;
      g.taps = kernels::ConvTaps{cin, (oh + 2) * wq + 2, 3, 1, 1, 1, 1, wq, (oh + 2) * wq + 2};
      g.m = oh * wq, g.k = 9 * cin;
    } else if (rng() % 2 == 0) {  // of stride 2, as the compiler lays it out: two phases of rows, a pitch of 2
      const int64_t cin = std::array<int64_t, 3>{16, 64, 96}[rng() % 3], oh = pick(3, 8), ow = pick(3, 8);
      const int64_t hq = oh + 1, wv = ow + 1, wp = 2 * wv;
      g.taps = kernels::ConvTaps{cin, 0, 3, 2, 1, 1, 1, wp, hq * wp, 2};
      g.m = oh * wv, g.k = 9 * cin;
      g.taps.rows = std::max(2 * hq * wp, (g.m - 1) * 2 + hq * wp + 3);  // the last row of the odd rows' taps
    } else {
      g.m = pick(1, 300), g.k = pick(129, 1500);
    }
    g.n = pick(1, 5 * 128);
    try {
      if (kernels::gemm_ksplit_plan(g, v5e.syms).units < 2) continue;
    } catch (const std::invalid_argument&) {
      continue;
    }
    SCOPED_TRACE(testing::Message() << "case " << i << ": " << g.m << " x " << g.k << " x " << g.n);
    same_bits(v5e, g, 100 + static_cast<uint32_t>(i));
    ++ran;
  }
  EXPECT_GE(ran, 20);
}

// ResNet-50's 14 x 14 convolution with 256 channels on v6e, 196 x 2304 x 256: gemm.s on one unit loads 9 weight
// tiles of 256 rows (256 cycles each) for streams of 196 rows; split over 4 units the busiest loads 3. The split
// kernel within a fifth of its estimate and under 0.6 x gemm.s's cycles.
TEST(GemmKSplit, FourUnitsShareTheWeightLoadsOfFewRows) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 196, g.k = 2304, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true, g.b_tiled = true;
  g.a_local = true;
  const Outcome o = same_bits(v6e, g, 8, true);
  const kernels::KSplitPlan p = kernels::gemm_ksplit_plan(g, v6e.syms);
  std::printf("196 x 2304 x 256 on v6e: %llu cycles split over %lld units (estimate %.0f), %llu as gemm.s\n",
              static_cast<unsigned long long>(o.ksplit_cycles), static_cast<long long>(p.units), p.estimate,
              static_cast<unsigned long long>(o.gemm_cycles));
  EXPECT_EQ(p.units, 4);
  EXPECT_LT(static_cast<double>(o.ksplit_cycles), 0.8 * static_cast<double>(o.gemm_cycles));
  EXPECT_NEAR(static_cast<double>(o.ksplit_cycles), p.estimate, 0.2 * p.estimate);
}

// Several cores (GemmKSplit::cores), each its run of strips with all of K over its 4 units, on v4 (2 cores): every
// byte as gemm.s on one unit, for a 3 x 3 convolution of ResNet-50's 14 x 14 layers (224 x 2304 x 256: 14 rows of
// the padded width 16, with its taps, bias, ReLU and tiled weights: a strip a core), 3 strips of which the last is partial over 2 cores (1 and 2) with a residual and
// b as [K, N], an int8 layer with its dequantisation and its int8 copy over 4 strips, and more cores asked for than
// there are strips (one strip: one core). The convolution, its input in the shared memory (as a compiled model's
// on v4), on two cores under 0.85 x its cycles on one (measured 2,983 against 3,815): each core's units take half
// the weight tiles, but each core loads the whole of a's taps, which both read from the one shared memory.
TEST(GemmKSplit, CoresShareTheStripsAsGemmS) {
  OnChip v4("v4");
  GemmKSplit g;
  g.m = 14 * 16, g.k = 9 * 256, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true, g.b_tiled = true;
  g.taps = kernels::ConvTaps{256, 16 * 16 + 2, 3, 1, 1, 1, 1, 16, 16 * 16 + 2};
  const uint64_t one = same_bits(v4, g, 20, false, 0, true).ksplit_cycles;
  g.cores = 2;
  EXPECT_EQ(kernels::gemm_ksplit_plan(g, v4.syms).cores, 2);
  const uint64_t two = same_bits(v4, g, 20, false, 0, true).ksplit_cycles;
  std::printf("224 x 2304 x 256 (3 x 3 taps) on v4: %llu cycles on one core, %llu on two\n",
              static_cast<unsigned long long>(one), static_cast<unsigned long long>(two));
  EXPECT_LT(static_cast<double>(two), 0.85 * static_cast<double>(one));
  GemmKSplit r;
  r.m = 150, r.k = 1000, r.n = 300, r.out = DType::BF16, r.bias = true, r.residual = true, r.residual_relu = true;
  r.cores = 2;
  same_bits(v4, r, 21);
  GemmKSplit q;
  q.m = 49, q.k = 1152, q.n = 512, q.in = DType::I8, q.out = DType::BF16, q.dequant = true, q.bias = true,
  q.relu = true, q.b_tiled = true, q.cores = 2;
  const float qs = 40.0f;
  std::memcpy(&q.q_scale_bits, &qs, 4);
  same_bits(v4, q, 22);
  GemmKSplit n;
  n.m = 64, n.k = 1024, n.n = 100, n.out = DType::F32, n.cores = 4;
  EXPECT_EQ(kernels::gemm_ksplit_plan(n, v4.syms).cores, 1);
  same_bits(v4, n, 23);
}

// ResNet-50's 3 x 3 convolution of its 14 x 14 layers as the split kernel takes it on v4's two cores: 14 rows of
// the padded width 16 (224 x 2304 x 256), its taps, bias, ReLU and tiled weights, bf16 out.
GemmKSplit conv_14x14_on_two_cores() {
  GemmKSplit g;
  g.m = 14 * 16, g.k = 9 * 256, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true, g.b_tiled = true;
  g.taps = kernels::ConvTaps{256, 16 * 16 + 2, 3, 1, 1, 1, 1, 16, 16 * 16 + 2};
  g.cores = 2;
  return g;
}

// Staged taps (KSplitPlan::stage_rows): the 3 x 3 convolution above on both cores of v4, its input in the shared
// memory. Each core copies the 258 rows its taps span (all of a: 14 rows of the padded width 16, the taps reaching
// 2 rows and 2 columns further) into VMEM once, and the taps read them there: the shared memory gives each core
// those 258 rows of 256 channels (264,192 bytes in all), where reading every tap from it (the kernel planned as
// if a lay in VMEM, a_local, does) gives each core 9 x 224 rows (2,064,384 bytes); those rows cross VMEM's ports
// instead. The same bits as gemm.s both ways, in fewer cycles staged.
TEST(GemmKSplit, StagedTapsReadTheirSpanOnce) {
  OnChip v4("v4");
  GemmKSplit g = conv_14x14_on_two_cores();
  EXPECT_EQ(kernels::gemm_ksplit_plan(g, v4.syms).stage_rows, 258);
  const Outcome staged = same_bits(v4, g, 24, false, 0, true);
  GemmKSplit direct = g;
  direct.a_local = true;
  EXPECT_EQ(kernels::gemm_ksplit_plan(direct, v4.syms).stage_rows, 0);
  const Outcome read = same_bits(v4, direct, 24, false, 0, true);
  EXPECT_EQ(staged.shared_read, 2u * 258 * 256 * 2);
  EXPECT_EQ(read.shared_read, 2u * 9 * 224 * 256 * 2);
  EXPECT_EQ(staged.local_read, 2u * 9 * 224 * 256 * 2);
  EXPECT_EQ(read.local_read, 0u);
  std::printf("224 x 2304 x 256 (3 x 3 taps) on v4's two cores: %llu cycles staged, %llu reading the taps from the "
              "shared memory\n",
              static_cast<unsigned long long>(staged.ksplit_cycles), static_cast<unsigned long long>(read.ksplit_cycles));
  EXPECT_LT(staged.ksplit_cycles, read.ksplit_cycles);
}

// GemmKSplit::b_preloaded and vmem_base (and lw_sem, below): gemm_ksplit_first_b's program loads the first 6 weight tiles of each
// core's load order (each of its 4 units' first, then the first two units' second) into the slots of a kernel
// whose VMEM starts at 1 MiB, and the kernel loads the others: it reads 6 tiles of 128 x 128 bf16 (32,768 bytes)
// a core fewer from HBM, which the first program reads; the same bits as gemm.s, in fewer cycles. More tiles than
// a core's slice has (18: a strip of 18 folds), or a base not a multiple of 64, are refused.
TEST(GemmKSplit, PreloadedTilesLoadOnce) {
  OnChip v4("v4");
  GemmKSplit g = conv_14x14_on_two_cores();
  const Outcome plain = same_bits(v4, g, 25, false, 0, true);
  EXPECT_EQ(kernels::gemm_ksplit_preload_limit(g, v4.syms).tiles, 18);
  EXPECT_EQ(kernels::gemm_ksplit_preload_limit(g, v4.syms).tile_bytes, 32768);
  g.vmem_base = 1 << 20, g.b_preloaded = 6;
  GemmKSplit at_zero = g;
  at_zero.vmem_base = 0;
  EXPECT_EQ(kernels::gemm_ksplit_plan(g, v4.syms).vmem_end,
            kernels::gemm_ksplit_plan(at_zero, v4.syms).vmem_end + (1 << 20));
  const Outcome pre = same_bits(v4, g, 25, false, 0, true);
  EXPECT_EQ(pre.first_b_hbm_read, 2u * 6 * 32768);
  EXPECT_EQ(pre.hbm_read + pre.first_b_hbm_read, plain.hbm_read);
  std::printf("224 x 2304 x 256 (3 x 3 taps) on v4's two cores: %llu cycles, %llu with 6 tiles a core preloaded\n",
              static_cast<unsigned long long>(plain.ksplit_cycles), static_cast<unsigned long long>(pre.ksplit_cycles));
  EXPECT_LT(pre.ksplit_cycles, plain.ksplit_cycles);
  // GemmKSplit::lw_sem: the first program also pushes each unit's first tile into its shadow buffer, and the
  // kernel issues 4 mxu.lw a core fewer (its first products swap them in): the same bits, the first program and
  // the kernel in one run. (That the units' loads then overlap the kernel before:
  // ConvFused.test_split_k_kernels_load_their_neighbours_weights.) Fewer preloaded tiles than units are refused.
  GemmKSplit ahead = g;
  ahead.lw_sem = 30;
  same_bits(v4, ahead, 25, false, 0, true);
  auto lws = [&](const isa::Program& p) {
    return std::count_if(p.code.begin(), p.code.end(), [](isa::Word w) { return isa::decode(w).op == isa::Op::MXULW; });
  };
  EXPECT_EQ(lws(kernels::gemm_ksplit_kernel(ahead, v4.syms)), lws(kernels::gemm_ksplit_kernel(g, v4.syms)) - 2 * 4);
  EXPECT_EQ(lws(kernels::gemm_ksplit_first_b(ahead, v4.syms)), 2 * 4);
  ahead.b_preloaded = 3;
  EXPECT_THROW(kernels::gemm_ksplit_first_b(ahead, v4.syms), std::invalid_argument);
  GemmKSplit more = g;
  more.b_preloaded = 19;
  EXPECT_THROW(kernels::gemm_ksplit_first_b(more, v4.syms), std::invalid_argument);
  EXPECT_THROW(kernels::gemm_ksplit_kernel(more, v4.syms), std::invalid_argument);
  GemmKSplit odd = g;
  odd.vmem_base = 100;
  EXPECT_THROW(kernels::gemm_ksplit_plan(odd, v4.syms), std::invalid_argument);
}

// The weight stream's loads for later kernels (GemmKSplit::background) land in VMEM, after the kernel's own loads,
// and change nothing of c.
TEST(GemmKSplit, BackgroundLoadsLandAndChangeNothing) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 196, g.k = 1024, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true, g.b_tiled = true;
  same_bits(v6e, g, 9, true, 500000);
}

// GemmKSplit::c_rows: the tile's rows stored through a map (a run of kept rows of a group per store), the plain
// kernel's bytes where kept and c's others as they were: a 3 x 3 convolution's virtual rows (14 of each 16 kept,
// stored densely) on both cores of v4, with bias and ReLU, and into a padded layout (rows of 14 pixels 16 apart,
// images 17 rows apart) on v6e's one core. A map that keeps no row, or past c's rows, is refused.
void expect_rows_through_map(OnChip& on, const GemmKSplit& plain, const RowMap& map, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  const int64_t O = isa::dtype_size(plain.out), row = plain.n * O;
  const int64_t a_rows = plain.taps.cin > 0 ? plain.taps.rows : plain.m, a_cols = plain.taps.cin > 0 ? plain.taps.cin : plain.k;
  std::vector<uint16_t> a(static_cast<size_t>(a_rows * a_cols)), b(static_cast<size_t>(plain.k * plain.n));
  for (uint16_t& x : a) x = bf16_of(unit(rng));
  for (uint16_t& x : b) x = bf16_of(unit(rng));
  std::vector<float> bias(static_cast<size_t>(plain.n));
  for (float& x : bias) x = unit(rng);
  const std::map<std::string, uint64_t> addr = {{"a", 0}, {"b", 16 << 20}, {"bias", 32 << 20}, {"c", 48 << 20}};
  on.chip->write_hbm(0, a.data(), a.size() * 2);
  on.chip->write_hbm(16 << 20, b.data(), b.size() * 2);
  on.chip->write_hbm(32 << 20, bias.data(), bias.size() * 4);
  const size_t span = static_cast<size_t>(std::max(map.rows, plain.m) * row);
  auto run = [&](const GemmKSplit& g) {
    on.chip->write_hbm(48 << 20, std::vector<uint8_t>(span, 0xa5).data(), span);
    on.chip->run(kernels::gemm_ksplit_kernel(g, on.syms, addr));
    std::vector<uint8_t> c(span);
    on.chip->read_hbm(48 << 20, c.data(), span);
    return c;
  };
  const std::vector<uint8_t> want_rows = run(plain);
  GemmKSplit mapped = plain;
  mapped.c_rows = map;
  const std::vector<uint8_t> got = run(mapped);
  std::vector<uint8_t> want(span, 0xa5);
  for (int64_t r = 0; r < plain.m; ++r)
    if (r % map.group < map.keep)
      std::copy_n(want_rows.begin() + r * row, row, want.begin() + map.at(r / map.group) + r % map.group * row);
  EXPECT_TRUE(got == want) << on.name << ": " << plain.m << " x " << plain.k << " x " << plain.n;
}

TEST(GemmKSplit, RowMapStoresTheKeptRows) {
  OnChip v4("v4");
  GemmKSplit g = conv_14x14_on_two_cores();
  ASSERT_EQ(kernels::gemm_ksplit_plan(g, v4.syms).cores, 2);
  const int64_t row = 256 * 2;
  expect_rows_through_map(v4, g, RowMap{16, 14, 14 * row, 0, 0, 14 * 14}, 31);
  GemmKSplit bad = g;
  bad.c_rows = RowMap{16, 0, 14 * row, 0, 0, 14 * 14};
  EXPECT_THROW(kernels::gemm_ksplit_plan(bad, v4.syms), std::invalid_argument);
  bad.c_rows = RowMap{16, 14, 14 * row, 0, 0, 14 * 14 - 1};
  EXPECT_THROW(kernels::gemm_ksplit_plan(bad, v4.syms), std::invalid_argument);
}

TEST(GemmKSplit, RowMapIntoAPaddedLayout) {
  OnChip v6e("v6e");
  GemmKSplit g;
  g.m = 2 * 14 * 14, g.k = 1024, g.n = 256, g.out = DType::BF16, g.bias = true, g.relu = true;
  const int64_t row = 256 * 2;
  expect_rows_through_map(v6e, g, RowMap{14, 14, 16 * row, 14, 17 * 16 * row, 2 * 17 * 16}, 32);
}

TEST(GemmKSplit, RefusesWhatItCannotRun) {
  const std::map<std::string, int64_t> v6e = symbols(sim::load_config("v6e", {}));
  GemmKSplit g;
  g.m = 196, g.k = 256, g.n = 256;  // one fold, one strip: one pair
  EXPECT_THROW(kernels::gemm_ksplit_plan(g, v6e), std::invalid_argument);
  g.k = 2304;
  EXPECT_NO_THROW(kernels::gemm_ksplit_plan(g, v6e));
  EXPECT_THROW(kernels::gemm_ksplit_plan(g, symbols(sim::load_config("v4-like", {}))), std::invalid_argument);  // 1 unit
  GemmKSplit big = g;
  big.k = 65536, big.n = 1024;  // 128 MiB of weights
  EXPECT_THROW(kernels::gemm_ksplit_plan(big, v6e), std::invalid_argument);
  GemmKSplit res = g;
  res.residual = true, res.out = DType::I32;
  EXPECT_THROW(kernels::gemm_ksplit_plan(res, v6e), std::invalid_argument);
  GemmKSplit dq = g;
  dq.dequant = true;  // dequant needs i8
  EXPECT_THROW(kernels::gemm_ksplit_plan(dq, v6e), std::invalid_argument);
  GemmKSplit q = g;  // q needs dequant (i8 in)
  q.q_scale_bits = 0x3f800000u;
  EXPECT_THROW(kernels::gemm_ksplit_plan(q, v6e), std::invalid_argument);
  GemmKSplit bg = g;  // a background load into the kernel's own VMEM
  bg.background = {{0, 1 << 20, 1, 4096, 0, 0}};
  EXPECT_THROW(kernels::gemm_ksplit_kernel(bg, v6e), std::invalid_argument);
  GemmKSplit rows = g;  // more steps of straight-line code than the limit
  rows.m = 1000000;
  EXPECT_THROW(kernels::gemm_ksplit_plan(rows, v6e), std::invalid_argument);
}

}  // namespace
}  // namespace tpusim
