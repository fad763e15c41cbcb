// The whole-chip fused attention kernel (kernels/attention_chip.h) against a float64 reference of
// softmax(q k^T * scale + mask) v, on a v4-like chip of 3 or 4 cores and on h200-like (4 matrix units per core):
// causal and bidirectional, grouped-query heads, sequences that are not multiples of the blocks, fewer and more
// (batch x head) pairs than cores; the same results on 1 core as on 3, bit for bit; the matrix work it issues
// (MAC counts, exactly) and its speed-up over cores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <random>

#include "tests/generated_kernel.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim {
namespace {

using kernels::AttentionChip;

std::map<std::string, int64_t> symbols_of(const sim::ChipConfig& cfg) {
  std::map<std::string, int64_t> s;
  for (const auto& [name, v] : sim::kernel_symbols(cfg)) s[name] = v;
  return s;
}

// One process, one chip (SystemC): every test makes its own.
struct Rig {
  sim::ChipConfig cfg;
  std::map<std::string, int64_t> symbols;
  std::unique_ptr<sim::Chip> chip;
  Rig(const std::string& preset, const std::vector<std::string>& sets)
      : cfg(sim::load_config(preset, sets)), symbols(symbols_of(cfg)), chip(std::make_unique<sim::Chip>(cfg)) {}
};

std::vector<uint8_t> bf16_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t x = isa::bf16_from_f32(v[i]);
    b[2 * i] = static_cast<uint8_t>(x), b[2 * i + 1] = static_cast<uint8_t>(x >> 8);
  }
  return b;
}

struct Result {
  std::vector<double> o;
  sim::RunStats stats;
};

// The element strides (batch, seq, head) of a tensor as the kernel reads them (all 0: row-major [B, seq, heads, D]).
kernels::AttentionStrides strides_of(const kernels::AttentionStrides& st, int64_t seq, int64_t heads, int64_t D) {
  return st == kernels::AttentionStrides{} ? kernels::AttentionStrides{seq * heads * D, heads * D, D} : st;
}

// Runs the kernel on random bf16 q, k, v (seeded; laid out by the strides, every element between them NaN, which
// the kernel must never read) and, with key_bias, a kb of a few units with some -10000 (masked) columns; returns
// o as doubles in [B, S, H, D] order and the run's statistics; `ref` gets the float64 reference.
Result run(Rig& rig, const AttentionChip& a, uint64_t seed, std::vector<double>* ref = nullptr,
           std::vector<double>* vmax = nullptr) {
  const int64_t B = a.batch, S = a.seq, SK = a.seq_k ? a.seq_k : a.seq, H = a.heads,
                KVH = a.kv_heads ? a.kv_heads : a.heads, D = a.head_dim;
  const kernels::AttentionStrides qs = strides_of(a.q_strides, S, H, D), ks = strides_of(a.k_strides, SK, KVH, D),
                                  vs = strides_of(a.v_strides, SK, KVH, D), os = strides_of(a.o_strides, S, H, D);
  auto at = [&](const kernels::AttentionStrides& st, int64_t b, int64_t i, int64_t h, int64_t d) {
    return static_cast<size_t>(b * st.batch + i * st.seq + h * st.head + d);
  };
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto rounded = [&](size_t n, float sd) {
    std::vector<float> v(n);
    for (auto& x : v) x = isa::f32_from_bf16(isa::bf16_from_f32(sd * normal(gen)));
    return v;
  };
  // Scores of a few units, so that the softmax is neither flat nor one-hot (logical [B, S(K), H(KVH), D]).
  const std::vector<float> q = rounded(static_cast<size_t>(B * S * H * D), 1.5f),
                           k = rounded(static_cast<size_t>(B * SK * KVH * D), 1.5f),
                           v = rounded(static_cast<size_t>(B * SK * KVH * D), 1.0f);
  const int64_t kbs = a.key_bias_stride < 0 ? SK : a.key_bias_stride;
  std::vector<float> kb(static_cast<size_t>(a.key_bias ? (B - 1) * kbs + SK : 0));
  for (size_t j = 0; j < kb.size(); ++j) kb[j] = j % 5 == 3 ? -10000.0f : normal(gen);
  isa::Program p = kernels::attention_chip_kernel(a, rig.symbols);
  auto place = [&](const char* name, const std::vector<float>& x, const kernels::AttentionStrides& st, int64_t seq,
                   int64_t heads) {
    const isa::TensorDecl* t = p.find(name);
    std::vector<float> laid(static_cast<size_t>(t->elements()), NAN);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < seq; ++i)
        for (int64_t h = 0; h < heads; ++h)
          for (int64_t d = 0; d < D; ++d) laid.at(at(st, b, i, h, d)) = x[static_cast<size_t>(((b * seq + i) * heads + h) * D + d)];
    rig.chip->write_hbm(t->addr, bf16_bytes(laid).data(), laid.size() * 2);
  };
  place("q", q, qs, S, H), place("k", k, ks, SK, KVH), place("v", v, vs, SK, KVH);
  if (a.key_bias) rig.chip->write_hbm(p.find("kb")->addr, kb.data(), kb.size() * 4);
  const isa::TensorDecl* od = p.find("o");
  std::vector<uint8_t> garbage(od->bytes(), 0xa5);
  rig.chip->write_hbm(od->addr, garbage.data(), garbage.size());
  Result r;
  r.stats = rig.chip->run(p).stats;
  std::vector<uint8_t> ob(od->bytes());
  rig.chip->read_hbm(od->addr, ob.data(), ob.size());
  r.o.resize(static_cast<size_t>(B * S * H * D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < S; ++i)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t d = 0; d < D; ++d) {
          const size_t e = at(os, b, i, h, d), o = static_cast<size_t>(((b * S + i) * H + h) * D + d);
          if (a.out == isa::DType::F32) {
            float f;
            std::memcpy(&f, ob.data() + 4 * e, 4);
            r.o[o] = f;
          } else {
            r.o[o] = isa::f32_from_bf16(static_cast<uint16_t>(ob[2 * e] | (ob[2 * e + 1] << 8)));
          }
        }
  if (ref) {
    const double scale = a.scale > 0 ? a.scale : 1.0 / std::sqrt(static_cast<double>(D));
    ref->assign(r.o.size(), 0.0);
    if (vmax) vmax->assign(r.o.size(), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kh = h / (H / KVH);
        for (int64_t i = 0; i < S; ++i) {
          const int64_t last = a.causal ? i : SK - 1;
          std::vector<double> s(static_cast<size_t>(last + 1));
          double m = -INFINITY;
          for (int64_t j = 0; j <= last; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d)
              dot += static_cast<double>(q[((b * S + i) * H + h) * D + d]) * k[((b * SK + j) * KVH + kh) * D + d];
            s[j] = dot * scale + (a.key_bias ? kb[static_cast<size_t>(b * kbs + j)] : 0.0), m = std::max(m, s[j]);
          }
          double l = 0;
          for (auto& x : s) x = std::exp(x - m), l += x;
          for (int64_t d = 0; d < D; ++d) {
            double acc = 0, big = 0;
            for (int64_t j = 0; j <= last; ++j) {
              const double vv = v[((b * SK + j) * KVH + kh) * D + d];
              acc += s[j] * vv, big = std::max(big, std::abs(vv));
            }
            (*ref)[((b * S + i) * H + h) * D + d] = acc / l;
            if (vmax) (*vmax)[((b * S + i) * H + h) * D + d] = big;
          }
        }
      }
  }
  return r;
}

// The kernel against the float64 reference. Tolerance: P is rounded to bf16 (relative error <= 2^-9 per
// element) before P V, so o = sum p_j v_j / l is off by at most 2^-9 max_j |v_j| from that; S, the softmax
// statistics and the accumulation are f32 (errors near 2^-20 relative); a bf16 output adds 2^-9 |o|. Bound:
// 2^-8 max|v| + 2^-8 |o| (twice each, for the f32 terms), for every element.
void check(Rig& rig, const AttentionChip& a, uint64_t seed) {
  std::vector<double> ref, vmax;
  const Result r = run(rig, a, seed, &ref, &vmax);
  ASSERT_EQ(r.o.size(), ref.size());
  size_t bad = 0;
  std::string first;
  for (size_t i = 0; i < ref.size(); ++i) {
    const double tol = std::ldexp(vmax[i], -8) + std::ldexp(std::abs(ref[i]), -8);
    if (!(std::abs(r.o[i] - ref[i]) <= tol) && bad++ < 5)
      first += "\n  [" + std::to_string(i) + "] " + std::to_string(r.o[i]) + " vs " + std::to_string(ref[i]);
  }
  EXPECT_EQ(bad, 0u) << "B=" << a.batch << " S=" << a.seq << " SK=" << a.seq_k << (a.key_bias ? " key bias" : "") << " H=" << a.heads << " KVH=" << a.kv_heads
                     << " D=" << a.head_dim << (a.causal ? " causal" : " bidirectional") << ": " << bad << " of "
                     << ref.size() << " elements off" << first;
}

AttentionChip shape(int64_t B, int64_t S, int64_t H, int64_t KVH, int64_t D, bool causal) {
  AttentionChip a;
  a.batch = B, a.seq = S, a.heads = H, a.kv_heads = KVH, a.head_dim = D, a.causal = causal;
  return a;
}

// v4-like (one 128 x 128 matrix unit per core) with 3 cores.
TEST(AttentionChip, V4LikeThreeCoresAgainstFloat64) {
  Rig rig("v4-like", {"chip.cores=3"});
  check(rig, shape(1, 37, 2, 1, 32, true), 1);     // GQA, B*H = 2 < 3 cores, S not a multiple of a block
  check(rig, shape(1, 37, 2, 1, 32, false), 2);
  check(rig, shape(2, 64, 2, 2, 64, false), 3);    // B*H = 4 > 3 cores
  check(rig, shape(1, 130, 4, 2, 32, true), 4);    // several query blocks per head
  check(rig, shape(1, 1, 1, 1, 16, true), 5);      // one token
  AttentionChip blocks = shape(1, 100, 3, 1, 48, true);  // query blocks of two key blocks: the mask's row offsets
  blocks.block_q = 32, blocks.block_k = 16;
  check(rig, blocks, 6);
  blocks.causal = false;
  check(rig, blocks, 7);
  AttentionChip f32 = shape(1, 50, 2, 2, 40, true);
  f32.out = isa::DType::F32, f32.scale = 0.3f;
  check(rig, f32, 8);
}

// The same results on 1 core as on 3, bit for bit (every item is computed the same way wherever it runs).
TEST(AttentionChip, ResultsDoNotDependOnTheCores) {
  Rig rig("v4-like", {"chip.cores=3"});
  AttentionChip a = shape(2, 70, 2, 1, 32, true);
  const std::vector<double> three = run(rig, a, 11).o;
  a.cores = 1;
  const std::vector<double> one = run(rig, a, 11).o;
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], three[i]) << i;
}

// A row's result depends on the key block only (attention_chip.h): query blocks smaller than, equal to and larger
// than the key block, on 1 or 3 cores, give the same bits, causal (where a query block smaller than the key block
// masks a slice of the diagonal triangle) and bidirectional, and match the float64 reference.
TEST(AttentionChip, ResultsDependOnTheKeyBlockOnly) {
  Rig rig("v4-like", {"chip.cores=3"});
  for (const bool causal : {true, false}) {
    AttentionChip a = shape(2, 100, 2, 1, 32, causal);
    a.block_k = 32;
    std::vector<double> first;
    for (const int64_t bq : {16, 32, 64}) {
      for (const int cores : {3, 1}) {
        a.block_q = bq, a.cores = cores;
        if (bq == 16 && cores == 3) check(rig, a, 41);
        const std::vector<double> o = run(rig, a, 41).o;
        if (first.empty()) first = o;
        ASSERT_EQ(o.size(), first.size());
        for (size_t i = 0; i < o.size(); ++i)
          ASSERT_EQ(o[i], first[i]) << i << (causal ? " causal" : " bidirectional") << " block_q " << bq << ", "
                                    << cores << " cores";
      }
    }
  }
}

// h200-like with 4 matrix units of 16 x 32 per core (the preset has one of 16 x 128) that share each block's
// products (row groups and strips), 228 KB of VMEM; head_dim 80 leaves a partial strip of the output columns.
TEST(AttentionChip, H200LikeAgainstFloat64) {
  Rig rig("h200-like", {"chip.cores=8", "core.mxus=4", "mxu.cols=32"});
  check(rig, shape(1, 70, 4, 2, 64, true), 21);
  check(rig, shape(2, 33, 2, 2, 80, false), 22);
  check(rig, shape(1, 150, 2, 1, 128, true), 23);
  check(rig, shape(3, 45, 5, 5, 64, false), 24);  // 15 heads over 8 cores
}

// S, P and O in the accumulators (ACC_ADDR, isa.def) or in VMEM: the same instructions on other addresses, so the
// same bits; on h200-like (VMEM's ports at 128 bytes per cycle, the lanes 128 f32 per cycle) the accumulators are
// faster by at least a third for a shape whose vector work sets the pace (head_dim 64, 512 keys).
TEST(AttentionChip, AccumulatorsOrVmemSameResultsAndAccumulatorsFaster) {
  Rig rig("h200-like", {"chip.cores=2"});
  const AttentionChip a = shape(1, 512, 2, 2, 64, false);
  std::map<std::string, int64_t> vmem_only = rig.symbols;
  vmem_only.erase("ACC_ADDR");
  ASSERT_TRUE(kernels::attention_chip_plan(a, rig.symbols).in_accumulators);
  ASSERT_FALSE(kernels::attention_chip_plan(a, vmem_only).in_accumulators);
  const Result acc = run(rig, a, 41);
  std::swap(rig.symbols, vmem_only);
  const Result vmem = run(rig, a, 41);
  EXPECT_EQ(acc.o, vmem.o);
  EXPECT_LT(3 * acc.stats.cycles, 2 * vmem.stats.cycles) << acc.stats.cycles << " against " << vmem.stats.cycles;
}

// Layouts other than [B, S, H, D] through strides (here the [B, H, S, D] a framework's graph holds after its
// transposes, and a query tensor inside a wider row, as a fused QKV projection leaves it), fewer queries than keys
// (decoding: one query over a cache of keys), and a key bias (a padding mask, broadcast over the batch or not):
// against the float64 reference; the elements between the strided rows are NaN, so a stray read would show.
TEST(AttentionChip, StridesKeysAndKeyBiasAgainstFloat64) {
  Rig rig("v4-like", {"chip.cores=3"});
  auto bhsd = [](int64_t S, int64_t H, int64_t D) { return kernels::AttentionStrides{H * S * D, D, S * D}; };
  AttentionChip a = shape(2, 37, 2, 2, 32, true);
  a.q_strides = bhsd(37, 2, 32), a.k_strides = bhsd(37, 2, 32), a.v_strides = bhsd(37, 2, 32);
  check(rig, a, 31);  // [B, H, S, D] in, [B, S, H, D] out
  a.o_strides = bhsd(37, 2, 32), a.causal = false;
  check(rig, a, 32);  // [B, H, S, D] out
  AttentionChip wide = shape(1, 20, 2, 2, 16, false);
  wide.q_strides = {20 * 96, 96, 16};  // q of [S, 3 * H * D] rows
  check(rig, wide, 33);
  AttentionChip decode = shape(2, 1, 4, 4, 16, false);
  decode.seq_k = 45, decode.k_strides = bhsd(45, 4, 16), decode.v_strides = bhsd(45, 4, 16);
  check(rig, decode, 34);
  AttentionChip masked = shape(2, 40, 2, 2, 32, false);
  masked.key_bias = true;
  check(rig, masked, 35);  // a row per batch; 40 keys leave a partial last block
  masked.key_bias_stride = 0, masked.causal = true;
  check(rig, masked, 36);  // one row for every batch, with the causal mask
}

// The matrix work the schedule issues, exactly: every key block an item visits costs S = Q K^T and O = P V over
// the whole block, BR x BC x D multiply-adds each (rows of a query block past the sequence are computed too;
// mxu.mm counts m x k x n of its weight tile, and a last, partial key block's tiles are cut to its keys, which
// this shape, S a multiple of BC, does not have).
// Blocks per item: bidirectional, ceil(S / BC); causal, those holding keys up to the item's last query row,
// ceil(min(S, (qb + 1) * BR) / BC). Causal therefore takes (NQ + 1) / (2 NQ) of the bidirectional work with
// BR = BC (about half), here with S = 512 and blocks of 128: 10 blocks of 16 per head.
TEST(AttentionChip, MatrixWorkIsCountedExactly) {
  Rig rig("v4-like", {"chip.cores=2"});
  sim::RunOptions timing;
  timing.functional = false;
  for (const bool causal : {false, true}) {
    AttentionChip a = shape(1, 512, 2, 2, 64, causal);
    a.block_q = a.block_k = 128;
    const kernels::AttentionPlan plan = kernels::attention_chip_plan(a, rig.symbols);
    int64_t blocks = 0;
    const int64_t NQ = (a.seq + plan.br - 1) / plan.br;
    for (int64_t qb = 0; qb < NQ; ++qb) {
      const int64_t keys = causal ? std::min(a.seq, (qb + 1) * plan.br) : a.seq;
      blocks += (keys + plan.bc - 1) / plan.bc;
    }
    blocks *= a.batch * a.heads;
    EXPECT_EQ(plan.blocks, blocks);
    EXPECT_EQ(blocks, causal ? 2 * 10 : 2 * 16);
    const sim::RunStats st = rig.chip->run(kernels::attention_chip_kernel(a, rig.symbols), timing).stats;
    EXPECT_EQ(st.mxu_macs, static_cast<uint64_t>(2 * plan.br * plan.bc * a.head_dim * blocks))
        << (causal ? "causal" : "bidirectional");
  }
}

// A compute-heavy shape (8 heads of 512 x 512 x 128, 32 items) on 4 cores against 1: each core takes a quarter
// of the items and loads its own K/V, so the speed-up is close to 4; at least 3 is asserted (measured 3.56). The
// chip gets 4 x v4-like's HBM bandwidth, one core's share each: an item does 128 FLOPs per byte of K/V it loads
// (4 x 128 x S x d FLOPs, 4 x S x d bytes), about the 115 at which 4 cores of v4-like at 1200 GB/s turn
// memory-bound, so with one HBM the shared bandwidth, not the split, would set the speed-up.
TEST(AttentionChip, FourCoresAreAtLeastThreeTimesFasterThanOne) {
  Rig rig("v4-like", {"chip.cores=4", "hbm.bandwidth_gbs=4800"});
  sim::RunOptions timing;
  timing.functional = false;
  AttentionChip a = shape(1, 512, 8, 8, 128, false);
  a.cores = 1;
  const uint64_t one = rig.chip->run(kernels::attention_chip_kernel(a, rig.symbols), timing).stats.cycles;
  a.cores = 4;
  const uint64_t four = rig.chip->run(kernels::attention_chip_kernel(a, rig.symbols), timing).stats.cycles;
  EXPECT_GE(static_cast<double>(one) / static_cast<double>(four), 3.0) << one << " vs " << four;
}

// Items one after the other (overlap_items = false, as a GPU runs one thread block per SM at a time) or
// overlapped: the same instructions per item, so the same bits. 8 heads of one 16-row block on 2 cores: 4 items
// per core. One after the other, an item's Q load starts after the previous item's output store has completed:
// the load takes at least dma.latency (900 cycles on h200-like) from issue, the store the L2's latency (270: it
// writes back, STORE_LATENCY): at least 4 x (900 + 270) cycles per core. Overlapped, the next item's Q load is issued while the current one computes, so at least one
// latency per item after the first is hidden (an upper bound that leaves the rest of the schedule free).
TEST(AttentionChip, ItemsOneAfterTheOtherPayTheirLatencies) {
  Rig rig("h200-like", {"chip.cores=2"});
  sim::RunOptions timing;
  timing.functional = false;
  AttentionChip a = shape(1, 16, 8, 8, 64, false);
  a.heads_per_item = 1;  // 8 items
  const int64_t latency = rig.symbols.at("DMA_LATENCY"), store_latency = rig.symbols.at("STORE_LATENCY");
  ASSERT_EQ(latency, 900);
  ASSERT_EQ(store_latency, 270);
  const Result overlapped = run(rig, a, 51);
  const double overlapped_estimate = kernels::attention_chip_estimate(a, rig.symbols);
  a.overlap_items = false;
  check(rig, a, 51);
  const Result serial = run(rig, a, 51);
  EXPECT_EQ(serial.o, overlapped.o);
  EXPECT_GE(serial.stats.cycles, static_cast<uint64_t>(4 * (latency + store_latency)));
  EXPECT_LE(overlapped.stats.cycles + 3 * static_cast<uint64_t>(latency), serial.stats.cycles)
      << overlapped.stats.cycles << " overlapped, " << serial.stats.cycles << " one after the other";
  // The estimate counts the store before the next item's loads.
  EXPECT_GE(kernels::attention_chip_estimate(a, rig.symbols), overlapped_estimate + 4 * store_latency);
}

// A minimum time per item (min_item_cycles: a `delay` before the core dispatches each later item), the floor
// tpusim validate gives TensorRT-LLM's tiles. The shape above, items one after the other: 4 items per core, so
// with a floor of 20,000 cycles, far above an item's own time (its loads, products and store: under 5,000), the
// core dispatches its 4th item at least 3 x 20,000 cycles after its first, which then takes its own time, at
// least a load's and a store's latency (900 + 270); and at most that plus the run without the floor (every
// item's own time, and the dispatch of their instructions). With a floor of 100 cycles, below an item's time,
// nothing moves: the core dispatches each item long before the one before has stored its output, which the
// item's loads wait for. The same bits either way.
TEST(AttentionChip, MinItemCyclesIsAFloorUnderEachItem) {
  Rig rig("h200-like", {"chip.cores=2"});
  AttentionChip a = shape(1, 16, 8, 8, 64, false);
  a.heads_per_item = 1, a.overlap_items = false;  // 8 items, 4 per core
  const uint64_t latency = 900, store_latency = 270, floor = 20000;
  ASSERT_EQ(rig.symbols.at("DMA_LATENCY"), static_cast<int64_t>(latency));
  ASSERT_EQ(rig.symbols.at("STORE_LATENCY"), static_cast<int64_t>(store_latency));
  const Result plain = run(rig, a, 52);
  ASSERT_LT(plain.stats.cycles, 4 * 5000u);
  a.min_item_cycles = 100;
  const Result low = run(rig, a, 52);
  EXPECT_EQ(low.o, plain.o);
  EXPECT_EQ(low.stats.cycles, plain.stats.cycles);
  a.min_item_cycles = static_cast<int64_t>(floor);
  check(rig, a, 52);
  const Result high = run(rig, a, 52);
  EXPECT_EQ(high.o, plain.o);
  EXPECT_GE(high.stats.cycles, 3 * floor + latency + store_latency);
  EXPECT_LE(high.stats.cycles, 3 * floor + plain.stats.cycles);
  // The estimate counts the floor per item: each core's 4 items at least 20,000 cycles each.
  EXPECT_GE(kernels::attention_chip_estimate(a, rig.symbols), 4.0 * static_cast<double>(floor));
  std::printf("4 items a core: %llu cycles, with a floor of 100 %llu, of 20,000 %llu\n",
              static_cast<unsigned long long>(plain.stats.cycles), static_cast<unsigned long long>(low.stats.cycles),
              static_cast<unsigned long long>(high.stats.cycles));
}

// Other kernels' loads issued by the attention right after its first item's loads, as plain loads
// (AttentionChip::prefetch) or as background loads (AttentionChip::background: the compiler's weight stream, and
// the areas of GemmChip::b_area for a GEMM two kernels later): on v5e, 4 heads of 64 rows, 4 rows of 256 bytes from
// HBM into VMEM above the kernel's own (rows 512 bytes apart there). Each way the output is the same bits as
// without, the rows are in VMEM after the run, HBM read exactly their 1,024 bytes more, and a load into the
// kernel's own VMEM is refused.
TEST(AttentionChip, LoadsForLaterKernelsLandAboveTheKernel) {
  Rig rig("v5e", {});
  AttentionChip a = shape(1, 64, 4, 4, 64, false);
  const Result none = run(rig, a, 81);
  const kernels::AttentionPlan plan = kernels::attention_chip_plan(a, rig.symbols);
  const int64_t vaddr = (plan.vmem_end + 4095) / 4096 * 4096, haddr = int64_t{1} << 30;
  std::vector<uint8_t> rows(1024);
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<uint8_t>(i * 37 + 11);
  rig.chip->write_hbm(static_cast<uint64_t>(haddr), rows.data(), rows.size());
  for (const bool bg : {false, true}) {
    AttentionChip b = a;
    std::vector<kernels::DmaLoad>& loads = bg ? b.background : b.prefetch;
    loads.push_back(kernels::DmaLoad{vaddr, haddr, 4, 256, 256, 512});
    std::vector<uint8_t> zeros(2048, 0);
    rig.chip->write_vmem(static_cast<uint64_t>(vaddr), zeros.data(), zeros.size());
    check(rig, b, 81);
    const Result with = run(rig, b, 81);
    EXPECT_EQ(with.o, none.o) << bg;
    EXPECT_EQ(with.stats.hbm_bytes_read, none.stats.hbm_bytes_read + 1024) << bg;
    for (int i = 0; i < 4; ++i) {
      std::vector<uint8_t> got(256);
      rig.chip->read_vmem(static_cast<uint64_t>(vaddr + i * 512), got.data(), got.size());
      EXPECT_TRUE(std::equal(got.begin(), got.end(), rows.begin() + i * 256)) << "row " << i << (bg ? " (bg)" : "");
    }
    loads.front() = kernels::DmaLoad{plan.vmem_end - 4096, haddr, 1, 256, 256, 256};
    EXPECT_THROW(kernels::attention_chip_kernel(b, rig.symbols), std::invalid_argument) << bg;
  }
}

// On one core of v4, BERT's attention (12 heads of 128 rows: 3 items of 4 heads, pipelined) and 4,194,304 bytes
// from the shared memory (CMEM: about 1,840 cycles at its 2,400 GB/s), which the kernel's own loads from HBM do not
// contend with. As plain loads after the first item's (AttentionChip::prefetch), the next items' loads complete
// after them (one queue, in order): at least 1,000 cycles more than without (measured 5,255 against 3,824); as
// background loads, at most 100 more (measured 3,824: none).
// BERT's attention (3 items of 4 heads) on one core of the rig's chip, run without loads for later kernels, with
// rows x 2,048 bytes from the shared memory into VMEM above the kernel's own, `n` such loads, as plain loads
// (prefetch) and as background loads: the same bits each way.
struct WithLoads {
  Result none, plain, bg;
};
WithLoads bert_attention_with_loads(Rig& rig, int64_t n, int64_t rows, uint64_t seed) {
  AttentionChip a = shape(1, 128, 12, 12, 64, false);
  a.cores = 1;
  const kernels::AttentionPlan plan = kernels::attention_chip_plan(a, rig.symbols);
  EXPECT_EQ(plan.items, 3);
  const int64_t vaddr = (plan.vmem_end + 4095) / 4096 * 4096, bytes = rows * 2048;
  std::vector<kernels::DmaLoad> loads;
  for (int64_t i = 0; i < n; ++i)
    loads.push_back(kernels::DmaLoad{vaddr + i * bytes, static_cast<int64_t>(isa::kSharedWindow) + i * bytes, rows,
                                     2048, 2048, 2048});
  WithLoads r;
  r.none = run(rig, a, seed);
  a.prefetch = loads;
  r.plain = run(rig, a, seed);
  a.prefetch = {}, a.background = loads;
  r.bg = run(rig, a, seed);
  EXPECT_EQ(r.plain.o, r.none.o);
  EXPECT_EQ(r.bg.o, r.none.o);
  return r;
}

TEST(AttentionChip, BackgroundLoadsDoNotHoldBackLaterItems) {
  Rig rig("v4", {});
  const WithLoads r = bert_attention_with_loads(rig, 1, 2048, 83);
  EXPECT_GE(r.plain.stats.cycles, r.none.stats.cycles + 1000);
  EXPECT_LE(r.bg.stats.cycles, r.none.stats.cycles + 100);
}

// Background loads beyond the queue's engines: on one core of v4 with one DMA engine a queue (dma.engines = 1, as
// v1-like has), BERT's attention (3 items of 4 heads) and three loads of 1,048,576 bytes each from the shared
// memory (about 460 cycles each). A background load waits at issue for the background engine, and the queue issues
// in order, so three background loads right after the first item's would hold the next items' loads behind the
// first two transfers; the kernel issues the first there and the others after the next items' loads (pipe_items):
// at most 200 cycles more than without them (measured 8,309, as without; all three after the first item's loads,
// 9,327). As plain loads after the first item's (AttentionChip::prefetch), at least 900 more (measured 9,836). The
// same bits each way.
TEST(AttentionChip, BackgroundLoadsBeyondTheEnginesAreSpreadOverTheItems) {
  Rig rig("v4", {"dma.engines=1"});
  const WithLoads r = bert_attention_with_loads(rig, 3, 512, 85);
  EXPECT_LE(r.bg.stats.cycles, r.none.stats.cycles + 200);
  EXPECT_GE(r.plain.stats.cycles, r.none.stats.cycles + 900);
}

// Items of one key block each (BERT's attention: 128 keys, a 128-key block), 12 heads on one core of v6e: the
// kernel issues the next item's K/V load and S product before this item's P V product, and the next item's
// softmax before this item's O update and O / l (pipeline_items). The same bits as with it off, against float64
// too. Without it, each item's S product (a K weight load of R = 256 rows into the 256 x 256 array, then the
// query rows' stream) comes after the previous item's P V product on the matrix unit: it overlaps only that
// item's last vector work (the O update, O / l and the cast), and the vector unit then waits for S. With it, the
// product of item t + 1 also overlaps item t's softmax, and item t + 1's softmax item t's P V product. Each of the
// 11 items after the first saves at least its K weight load, R cycles (measured: 288 of R = 256 per item; 238 with
// the softmax after the O / l).
TEST(AttentionChip, NextItemsProductRunsWhileTheVectorUnitFinishesAnItem) {
  Rig rig("v6e", {});
  AttentionChip a = shape(1, 128, 12, 12, 64, false);
  a.heads_per_item = 1;  // 12 items of one head each
  const int64_t R = rig.symbols.at("MXU_ROWS");
  ASSERT_EQ(R, 256);
  ASSERT_EQ(kernels::attention_chip_plan(a, rig.symbols).bc, 128);  // one key block per item
  check(rig, a, 71);
  const Result piped = run(rig, a, 71);
  a.pipeline_items = false;
  const Result serial = run(rig, a, 71);
  EXPECT_EQ(piped.o, serial.o);
  EXPECT_LE(piped.stats.cycles + 11 * static_cast<uint64_t>(R), serial.stats.cycles)
      << piped.stats.cycles << " pipelined, " << serial.stats.cycles << " not";
}

// Several heads per item (heads_per_item): the item's heads' products are dealt over the matrix units, and the
// vector unit takes all their rows at once with the same instructions per row, so the results are the bits of one
// head per item, and match float64: on 2 cores of 4 units (and of 2, for 4 heads per item: more heads than
// units), causal with query blocks smaller and larger than the key block, grouped-query heads (a group of 4 heads
// spans 2 kv heads), a partial last query block, [B, H, S, D] strides, a key bias, and decoding (one query over 45
// keys).
TEST(AttentionChip, SeveralHeadsPerItemSameBits) {
  Rig rig("v4-like", {"chip.cores=2", "core.mxus=4"});
  auto bhsd = [](int64_t S, int64_t H, int64_t D) { return kernels::AttentionStrides{H * S * D, D, S * D}; };
  std::vector<std::pair<std::string, AttentionChip>> cases;
  cases.emplace_back("causal, GQA, query blocks < key blocks", shape(2, 70, 4, 2, 32, true));
  cases.back().second.block_q = 16, cases.back().second.block_k = 32;
  cases.emplace_back("causal, query blocks > key blocks", shape(1, 100, 8, 8, 32, true));
  cases.back().second.block_q = 64, cases.back().second.block_k = 32;
  cases.emplace_back("bidirectional, strides", shape(2, 37, 4, 4, 32, false));
  cases.back().second.q_strides = bhsd(37, 4, 32), cases.back().second.k_strides = bhsd(37, 4, 32);
  cases.back().second.v_strides = bhsd(37, 4, 32);
  cases.emplace_back("key bias", shape(2, 40, 4, 4, 32, false));
  cases.back().second.key_bias = true;
  cases.emplace_back("decoding", shape(2, 1, 4, 4, 16, false));
  cases.back().second.seq_k = 45;
  uint64_t seed = 81;
  for (auto& [what, a] : cases) {
    std::vector<double> one;
    for (const int64_t hg : {1, 2, 4}) {
      a.heads_per_item = hg;
      if (a.block_q == 0) a.block_k = 16;  // the same key blocks for every hg (the results depend on them)
      if (hg == 4) check(rig, a, seed);
      for (const int units : {0, 2}) {  // every unit (4), or 2: more heads than units
        if (units == 2 && hg != 4) continue;
        a.mxus = units;
        const Result r = run(rig, a, seed);
        if (hg == 1) one = r.o;
        ASSERT_EQ(r.o.size(), one.size()) << what;
        for (size_t i = 0; i < one.size(); ++i)
          ASSERT_EQ(r.o[i], one[i]) << what << ": " << hg << " heads per item on " << (units ? units : 4) << " units, "
                                    << i;
      }
      a.mxus = 0;
    }
    ++seed;
  }
  AttentionChip bad = shape(1, 16, 6, 6, 32, false);
  bad.heads_per_item = 4;
  EXPECT_THROW(kernels::attention_chip_plan(bad, rig.symbols), std::invalid_argument);
}

// BERT's attention (12 heads, 128 tokens, head_dim 64) on v6e: one core of four 256 x 256 units. With one head per
// item, each product is one piece (128 rows, one strip), so one unit does all the matrix work while three idle;
// with 4 heads per item each unit takes one head's product, and the vector unit's instructions each cover 4 heads
// (their per-instruction latency shared). The plan chooses 4 heads per item: 3 items, pipelined (the next item's
// S product and softmax before this item's O / l, pipeline_items), where one item of all 12 heads computes its
// phases one after the other (its products' R + C = 512 cycles of latency each, the softmax between them). The
// same bits for 4, 12 and 1; 4 heads per item take at most half of one head's cycles (measured 4,984 against
// 11,350: 0.44) and at most 0.9 of 12 heads' (measured 5,632: 0.88). Causal (GPT-2's), the plan takes 4 heads per
// item as well: the same bits as 12, in at most 0.9 of its cycles (measured 5,143 against 5,841). The estimates
// (which count the causal mask's adds and the pipelined items) rank the plans as the runs do, each 0.7 to 1 of its
// run (measured 3,831 / 4,984, 4,220 / 5,632, 3,959 / 5,143, 4,412 / 5,841: 0.75 to 0.77; the kernel's inputs in
// HBM here, where the compiler's are in VMEM: BERT-base's on v6e 3,831 against 3,737 run).
TEST(AttentionChip, HeadsPerItemFillTheMatrixUnits) {
  Rig rig("v6e", {});
  sim::RunOptions timing;
  timing.functional = false;
  AttentionChip a = shape(1, 128, 12, 12, 64, false);
  EXPECT_EQ(kernels::attention_chip_plan(a, rig.symbols).hg, 4);
  const Result chosen = run(rig, a, 91);
  a.heads_per_item = 12;
  const Result twelve = run(rig, a, 91);
  a.heads_per_item = 1;
  const Result one = run(rig, a, 91);
  EXPECT_EQ(twelve.o, one.o);
  EXPECT_EQ(chosen.o, one.o);
  EXPECT_LE(static_cast<double>(chosen.stats.cycles), 0.5 * static_cast<double>(one.stats.cycles))
      << chosen.stats.cycles << " vs " << one.stats.cycles;
  EXPECT_LE(static_cast<double>(chosen.stats.cycles), 0.9 * static_cast<double>(twelve.stats.cycles))
      << chosen.stats.cycles << " vs " << twelve.stats.cycles;
  a.heads_per_item = 0;
  const double e_chosen = kernels::attention_chip_estimate(a, rig.symbols);
  a.heads_per_item = 12;
  const double e_twelve = kernels::attention_chip_estimate(a, rig.symbols);
  AttentionChip c = shape(1, 128, 12, 12, 64, true);
  const double e_causal = kernels::attention_chip_estimate(c, rig.symbols);
  const Result causal = run(rig, c, 91);
  c.heads_per_item = 12;
  const double e_causal12 = kernels::attention_chip_estimate(c, rig.symbols);
  const Result causal12 = run(rig, c, 91);
  EXPECT_EQ(kernels::attention_chip_plan(shape(1, 128, 12, 12, 64, true), rig.symbols).hg, 4);
  EXPECT_EQ(causal.o.size(), causal12.o.size());
  EXPECT_EQ(causal.o, causal12.o);
  EXPECT_LE(static_cast<double>(causal.stats.cycles), 0.9 * static_cast<double>(causal12.stats.cycles))
      << causal.stats.cycles << " vs " << causal12.stats.cycles;
  // The estimates rank the plans as their runs do, each 0.7 to 1 of its run (inputs in HBM here)
  for (const auto& [est, cycles] : {std::pair{e_chosen, chosen.stats.cycles}, std::pair{e_twelve, twelve.stats.cycles},
                                    std::pair{e_causal, causal.stats.cycles}, std::pair{e_causal12, causal12.stats.cycles}}) {
    EXPECT_GE(est, 0.7 * static_cast<double>(cycles)) << est << " vs " << cycles;
    EXPECT_LE(est, static_cast<double>(cycles)) << est << " vs " << cycles;
  }
  EXPECT_LT(e_chosen, e_twelve);
  EXPECT_LT(e_causal, e_causal12);
}

// The smallest blocks (min_block_q, min_block_k): a one-token sequence computes whole 64 x 64 blocks, as a GPU
// kernel computes whole tiles. mxu.mm counts m x k x n of its weight tile: each item's S product streams all 64
// rows of the query block against the whole K^T tile (D x 64, the key columns past the sequence included), its
// P V product against the last block's tile cut to its one key (1 x D): 64 x 64 x D + 64 x 1 x D multiply-adds
// per item, where the free plan's 16 x 16 block makes 16 x 16 x D + 16 x 1 x D. The results match the float64
// reference. Where 64 x 64 does not fit (head_dim 256: three K/V slots of 64 keys and two Q buffers exceed the
// 228 KB with the rest), the key block is halved first.
TEST(AttentionChip, SmallestBlocksAreComputedWhole) {
  Rig rig("h200-like", {"chip.cores=2"});
  sim::RunOptions timing;
  timing.functional = false;
  AttentionChip a = shape(2, 1, 4, 4, 64, true);
  const kernels::AttentionPlan free_plan = kernels::attention_chip_plan(a, rig.symbols);
  EXPECT_EQ(free_plan.br, 16);
  a.min_block_q = a.min_block_k = 64;
  const kernels::AttentionPlan plan = kernels::attention_chip_plan(a, rig.symbols);
  EXPECT_EQ(plan.br, 64);
  EXPECT_EQ(plan.bc, 64);
  check(rig, a, 61);
  const sim::RunStats st = rig.chip->run(kernels::attention_chip_kernel(a, rig.symbols), timing).stats;
  EXPECT_EQ(st.mxu_macs, static_cast<uint64_t>((64 * 64 + 64 * 1) * a.head_dim * a.batch * a.heads));
  AttentionChip wide = shape(1, 1, 2, 2, 256, true);
  wide.min_block_q = wide.min_block_k = 64;
  const kernels::AttentionPlan halved = kernels::attention_chip_plan(wide, rig.symbols);
  EXPECT_EQ(halved.br, 64);
  EXPECT_LT(halved.bc, 64);
}

// compute_head_dim: head sizes 80 and 72 computed as 128, as a kernel built for 128 runs them. The padded folds
// of the S product load weight tiles of no rows and the padded strips of the P V product (with matrix units of
// 32 columns: 3 strips of head_dim 80, 4 of 128) tiles of no rows, so every padded term is +0: the same bits as
// unpadded, and the float64 reference.
TEST(AttentionChip, PaddedHeadDimSameResults) {
  Rig rig("h200-like", {"chip.cores=4", "core.mxus=4", "mxu.cols=32"});
  for (AttentionChip a : {shape(1, 70, 4, 2, 80, true), shape(2, 33, 2, 2, 72, false)}) {
    const std::vector<double> plain = run(rig, a, 71).o;
    a.compute_head_dim = 128;
    check(rig, a, 71);
    EXPECT_EQ(run(rig, a, 71).o, plain) << "head_dim " << a.head_dim;
  }
}

// On the preset (one unit of 16 x 128 per core), a bidirectional head of 512 x 512: head_dim 80 takes 5 folds of
// 16 rows in the S product, 80 padded to 128 and 128 itself 8. So 80 as 128 takes longer than 80, and at most
// as long as 128, which also moves 128 columns of q, k, v and o where the padded kernel moves 80 (here: 62,887,
// 69,344 and 75,187 cycles).
TEST(AttentionChip, PaddedHeadDimTakesThePaddedMatrixTime) {
  Rig rig("h200-like", {"chip.cores=2"});
  sim::RunOptions timing;
  timing.functional = false;
  auto cycles = [&](int64_t d, int64_t dk) {
    AttentionChip a = shape(1, 512, 2, 2, d, false);
    a.block_q = a.block_k = 64, a.compute_head_dim = dk;
    return rig.chip->run(kernels::attention_chip_kernel(a, rig.symbols), timing).stats.cycles;
  };
  const uint64_t d80 = cycles(80, 0), d80as128 = cycles(80, 128), d128 = cycles(128, 0);
  EXPECT_GT(d80as128, d80);
  EXPECT_LE(d80as128, d128);
}

// The kernel is built through the typed emitter; its source is the kernel's disassembly, which assembles back
// into it. Given addresses and an HBM base, the tensors are placed as the assembler places them (q and o given, k
// at the base, v and kb after it), and a kernel placed at instruction 70 differs only in its branch targets.
TEST(AttentionChip, SourceAssemblesBackIntoTheKernel) {
  const sim::ChipConfig cfg = sim::load_config("v4", {});
  const auto s = symbols_of(cfg);
  AttentionChip a = shape(2, 40, 4, 2, 64, false);
  a.seq_k = 300, a.key_bias = true, a.block_k = 128;  // three key blocks, the last of 44 keys
  const isa::Program k = kernels::attention_chip_kernel(a, s);
  const std::string src = kernels::attention_chip_source(a, s);
  testing::expect_source_is(k, src, 2);
  EXPECT_EQ(k.name, "attention_chip");
  EXPECT_EQ(src.rfind("# attention_chip: o[2,40,4,64]", 0), 0u) << src.substr(0, 200);
  ASSERT_FALSE(k.source.empty());
  EXPECT_EQ(k.source[0].rfind("<attention_chip> at attention_chip.cpp:", 0), 0u) << k.source[0];

  const std::map<std::string, uint64_t> addr = {{"q", 1 << 20}, {"o", 1 << 16}};
  const uint64_t base = 8 << 20, kv = 2 * 300 * 2 * 64 * 2;  // k's and v's bytes
  const isa::Program placed = kernels::attention_chip_kernel(a, s, addr, 70, base);
  ASSERT_EQ(placed.tensors.size(), 5u);
  EXPECT_EQ(placed.find("q")->addr, 1u << 20);
  EXPECT_EQ(placed.find("o")->addr, 1u << 16);
  EXPECT_EQ(placed.find("k")->addr, base);  // (q ends below the base)
  EXPECT_EQ(placed.find("v")->addr, (base + kv + 4095) / 4096 * 4096);
  EXPECT_EQ(placed.find("kb")->addr, (placed.find("v")->addr + kv + 4095) / 4096 * 4096);
  EXPECT_NE(placed.code, k.code);  // the addresses the code loads
  EXPECT_GT(testing::expect_moved_by(kernels::attention_chip_kernel(a, s, addr, 0, base), placed, 70), 4u);
}

TEST(AttentionChip, ShapesThatCannotRunSaySo) {
  const sim::ChipConfig cfg = sim::load_config("v4-like", {});
  const auto s = symbols_of(cfg);
  auto message = [&](const AttentionChip& a) {
    try {
      kernels::attention_chip_source(a, s);
      return std::string("no error");
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
  };
  EXPECT_EQ(message(shape(1, 8, 3, 2, 64, true)),
            "attention_chip: heads (3) must be a multiple of kv_heads (2)");
  EXPECT_EQ(message(shape(1, 0, 1, 1, 64, true)), "attention_chip: batch, seq, heads and head_dim must be positive");
  AttentionChip a = shape(1, 8, 1, 1, 64, true);
  a.block_q = 24, a.block_k = 16;
  EXPECT_EQ(message(a), "attention_chip: block_q must be a positive multiple or divisor of block_k");
  a = shape(1, 8, 1, 1, 64, true);
  a.out = isa::DType::I8;
  EXPECT_EQ(message(a), "attention_chip: the output must be bf16 or f32");
  a = shape(1, 8, 1, 1, 1 << 20, true);
  EXPECT_EQ(message(a).rfind("attention_chip: no block size fits VMEM", 0), 0u) << message(a);
}

// The causal mask's BC x BC triangle is one copy within VMEM (a dma.ld from the local window whose source rows
// step back 4 bytes), not a vector add per row: on v5e, GPT-2's prefill attention (12 heads of 64, 128 tokens,
// one key block of 128) then takes at most 1.1 times the bidirectional kernel's cycles (the same products; the
// mask's adds on the diagonal block), where 128 vector adds of 8 + 1 cycles each made it 1.23 times (6,550
// against 5,304). Against the float64 reference as well.
TEST(AttentionChip, CausalMaskIsOneCopyWithinVmem) {
  Rig rig("v5e", {});
  auto bhsd = [](int64_t S, int64_t H, int64_t D) { return kernels::AttentionStrides{H * S * D, D, S * D}; };
  AttentionChip a = shape(1, 128, 12, 12, 64, true);
  a.q_strides = a.k_strides = a.v_strides = bhsd(128, 12, 64);
  check(rig, a, 81);
  const std::string src = kernels::attention_chip_source(a, rig.symbols);
  EXPECT_EQ(kernels::attention_chip_plan(a, rig.symbols).bc, 128);
  EXPECT_NE(src.find("li r23, -4"), std::string::npos) << src.substr(0, 2000);  // the copy's source stride
  const uint64_t causal = run(rig, a, 81).stats.cycles;
  a.causal = false;
  const uint64_t bidirectional = run(rig, a, 81).stats.cycles;
  EXPECT_LT(static_cast<double>(causal), 1.1 * static_cast<double>(bidirectional)) << causal << " against " << bidirectional;
}

// ---- the vector unit's kernel (AttentionChip::vector_unit) ----

// Decoding shapes on the vector unit against the float64 reference (the same bound as the matrix path's: P stays
// f32 here, which only tightens it): one query over a cache of keys in the [B, H, S, D] layout a framework's graph
// holds, grouped-query heads (4 query heads per kv head: 4 rows per item), a few causal queries (each row over its
// own keys), a key bias (a padding mask), an f32 output and another scale, a query tensor inside a wider row;
// on 3 cores, with fewer items than cores and more.
TEST(AttentionChip, VectorUnitAgainstFloat64) {
  Rig rig("v4-like", {"chip.cores=3"});
  auto bhsd = [](int64_t S, int64_t H, int64_t D) { return kernels::AttentionStrides{H * S * D, D, S * D}; };
  auto vec = [](AttentionChip a) {
    a.vector_unit = true;
    return a;
  };
  AttentionChip decode = vec(shape(2, 1, 4, 4, 64, false));
  decode.seq_k = 45, decode.q_strides = bhsd(1, 4, 64), decode.k_strides = bhsd(45, 4, 64),
  decode.v_strides = bhsd(45, 4, 64), decode.o_strides = bhsd(1, 4, 64);
  check(rig, decode, 51);  // 8 items over 3 cores
  AttentionChip gqa = vec(shape(1, 1, 8, 2, 32, false));
  gqa.seq_k = 70;
  check(rig, gqa, 52);  // 2 items of 4 rows, one core idle
  check(rig, vec(shape(2, 5, 2, 1, 16, true)), 53);  // causal: 2 x 5 rows per item, row i over i + 1 keys
  AttentionChip masked = vec(shape(3, 2, 2, 2, 32, false));
  masked.seq_k = 30, masked.key_bias = true;
  check(rig, masked, 54);
  masked.key_bias_stride = 0, masked.out = isa::DType::F32, masked.scale = 0.3f;
  check(rig, masked, 55);
  AttentionChip wide = vec(shape(1, 1, 2, 2, 16, false));
  wide.seq_k = 20, wide.q_strides = {96, 96, 16};  // q of [1, 3 * H * D] rows (a fused QKV projection)
  check(rig, wide, 56);
}

// Nothing in the vector unit's kernel depends on the chip's shape or the plan: 3 cores and 1, items of one kv
// head and of several (the plan's choice), one buffer set and several, give the same bits. Each row's score is
// the same sum in the same order as the matrix path's S (bf16 products exact in f32, summed over head_dim), so the
// two kernels differ only by P's rounding to bf16 and p V's order.
TEST(AttentionChip, VectorUnitSameBitsWhateverThePlan) {
  Rig rig("v4-like", {"chip.cores=3"});
  AttentionChip a = shape(2, 1, 6, 3, 64, false);
  a.seq_k = 129, a.vector_unit = true;
  std::vector<kernels::AttentionPlan> plans;
  std::vector<std::vector<double>> outs;
  auto one_run = [&]() {
    plans.push_back(kernels::attention_chip_plan(a, rig.symbols));
    outs.push_back(run(rig, a, 61).o);
  };
  one_run();
  a.cores = 1;
  one_run();
  // VMEM for one kv head's set only (2 x 129 x 64 x 2 bytes of K and V, and the rows' buffers), then for two
  rig.symbols["VMEM_BYTES"] = 36000;
  one_run();
  rig.symbols["VMEM_BYTES"] = 72000;
  one_run();
  for (const auto& p : plans) EXPECT_TRUE(p.vector_unit);
  EXPECT_EQ(plans[2].items, 6);  // one kv head per item (2 query heads: 2 rows), one set
  EXPECT_EQ(plans[2].br, 2);
  EXPECT_EQ(plans[2].sets, 1);
  EXPECT_EQ(plans[3].sets, 2);
  EXPECT_EQ(plans[3].items, 6);
  EXPECT_GT(plans[1].br, 2);  // on one core with room, several kv heads per item
  for (size_t i = 1; i < outs.size(); ++i) EXPECT_EQ(outs[i], outs[0]) << i;
  rig.symbols["VMEM_BYTES"] = 30000;
  try {
    kernels::attention_chip_plan(a, rig.symbols);
    ADD_FAILURE() << "no error";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()).rfind("attention_chip: the vector unit's kernel needs", 0), 0u) << e.what();
  }
}

// GPT-2's decode step (12 heads of 64, 129 keys, one query each) on v6e (one core, four 256 x 256 matrix units,
// 8 x 256 lanes): the matrix path loads each head's K and V as weights for one row and spends its instructions on
// them; the vector unit reads each head's K and V once (a vpu.rdot and a vpu.cdot of 129 x 64 per head, 5 cycles
// of lanes each). The vector kernel is at least 2.5 times faster (measured 1,457 cycles against 4,309; more than 3
// times before the matrix path scaled only head_dim's columns of O); both against the float64 reference.
TEST(AttentionChip, VectorUnitFasterForADecodeStep) {
  Rig rig("v6e", {});
  auto bhsd = [](int64_t S, int64_t H, int64_t D) { return kernels::AttentionStrides{H * S * D, D, S * D}; };
  AttentionChip a = shape(1, 1, 12, 12, 64, false);
  a.seq_k = 129, a.k_strides = bhsd(129, 12, 64), a.v_strides = bhsd(129, 12, 64);
  check(rig, a, 71);
  const uint64_t matrix = run(rig, a, 71).stats.cycles;
  a.vector_unit = true;
  check(rig, a, 71);
  const uint64_t vector = run(rig, a, 71).stats.cycles;
  EXPECT_LT(2.5 * static_cast<double>(vector), static_cast<double>(matrix)) << vector << " against " << matrix;
}

}  // namespace
}  // namespace tpusim
