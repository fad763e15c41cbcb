// The whole-chip GEMM (kernels/gemm_chip.h) on a chip of 2 cores x 3 matrix units of 8x8, over random shapes
// that leave partial strips, groups and row tiles: the simulator against the reference machine (which runs the
// cores one after another, reference.h) and the host's math (int8 exactly, bf16 within tolerance.h's bound), and
// against the same kernel on one core with one matrix unit, bit for bit: results do not depend on the chip's
// shape.
#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <set>

#include "reference_harness.h"
#include "tests/generated_kernel.h"
#include "tpusim/kernels/gemm_chip.h"
#include "tpusim/kernels/gemm_ksplit.h"
#include "tpusim/isa/emitter.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/config.h"

namespace tpusim::reftest {
namespace {

// What the source's summary line says of a kernel whose last tile loads its last fold alone, and of one that runs
// its tiles one at a time per core.
constexpr const char* kLastFoldAlone = "the core's last tile loads its last chunk's last fold as a chunk of its own";
constexpr const char* kOneAtATime = "one tile at a time per core (the previous tile is stored before the next loads)";

const std::vector<std::string>& chip_sets() {
  static const std::vector<std::string> s{"mxu.rows=8", "mxu.cols=8", "mxu.acc_rows=32", "chip.cores=2",
                                          "core.mxus=3", "chip.cluster=2"};
  return s;
}

// A preset's kernel symbols (sim::kernel_symbols), as the kernels take them.
std::map<std::string, int64_t> preset_symbols(const sim::ChipConfig& cfg) {
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, v] : sim::kernel_symbols(cfg)) symbols[name] = v;
  return symbols;
}

// y = x @ W^T as tpusim validate runs a GPU's Linear layer: bf16 in and out, W transposed on load, K split where it
// pays (up to 16 ways).
kernels::GemmChip linear(int64_t m, int64_t k, int64_t n) {
  kernels::GemmChip g{m, k, n, DType::BF16, DType::BF16};
  g.trans_b = true;
  g.max_split_k = 16;
  return g;
}

sim::RunOptions timing_only() {
  sim::RunOptions o;
  o.functional = false;
  return o;
}

struct Shape {
  int64_t m, k, n;
};

// The test machines' kernel symbols.
std::map<std::string, int64_t> symbols_of(const Machines& m) { return preset_symbols(m.cfg); }

// Runs a GEMM with a bias on inputs a, b (tiled) and bias, its output c filled with 0xa5 first; returns c.
std::vector<double> run_with_bias(Machines& m, const isa::Program& p, const std::vector<double>& a,
                                  const std::vector<double>& tiled, const std::vector<double>& bias, DType in, DType acc,
                                  DType out) {
  m.write(p.find("a")->addr, a, in);
  m.write(p.find("b")->addr, tiled, in);
  m.write(p.find("bias")->addr, bias, acc);
  const isa::TensorDecl* c = p.find("c");
  m.write(c->addr, std::vector<uint8_t>(c->bytes(), 0xa5));
  m.run(p);
  return m.read_sim(c->addr, static_cast<size_t>(c->elements()), out);
}

// b [K, N] in gemm.s's B_TILED layout, [cdiv(K, R), cdiv(N, C), R, C], zero-padded.
std::vector<double> tiled_b(const std::vector<double>& b, int64_t k, int64_t n, int64_t R, int64_t C) {
  const int64_t nt = (n + C - 1) / C;
  std::vector<double> tiled(static_cast<size_t>((k + R - 1) / R * nt * R * C), 0.0);
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < n; ++j) tiled[(((i / R) * nt + j / C) * R + i % R) * C + j % C] = b[i * n + j];
  return tiled;
}

std::vector<double> run_gemm(Machines& m, const kernels::GemmChip& g, const std::vector<double>& a,
                             const std::vector<double>& b, std::vector<double>* reference = nullptr,
                             std::vector<double>* isa_order = nullptr) {
  const std::map<std::string, int64_t> symbols = symbols_of(m);
  isa::Program p = kernels::gemm_chip_kernel(g, symbols);
  m.write(p.find("a")->addr, a, g.in);
  if (g.trans_b) {  // b given as [N, K]
    std::vector<double> bt(b.size());
    for (int64_t l = 0; l < g.k; ++l)
      for (int64_t j = 0; j < g.n; ++j) bt[j * g.k + l] = b[l * g.n + j];
    m.write(p.find("b")->addr, bt, g.in);
  } else {
    m.write(p.find("b")->addr, b, g.in);
  }
  const isa::TensorDecl* c = p.find("c");
  m.write(c->addr, std::vector<uint8_t>(c->bytes(), 0xa5));
  m.run(p);
  if (reference) *reference = Machines::read(*m.fp64, c->addr, static_cast<size_t>(c->elements()), g.out);
  if (isa_order) *isa_order = Machines::read(*m.isaf32, c->addr, static_cast<size_t>(c->elements()), g.out);
  return m.read_sim(c->addr, static_cast<size_t>(c->elements()), g.out);
}

// `schedule` for the whole chip; the one-unit run uses the strips schedule, so the bit-for-bit check also holds
// the two schedules against each other. `sets` add to chip_sets() (a small VMEM makes the tiled schedule cut K
// into several chunks).
void cases(DType in, uint64_t seed, kernels::GemmSchedule schedule = kernels::GemmSchedule::Strips,
           std::vector<std::string> sets = {}, bool trans_b = false, int split_k = 0, int slots = 0) {
  std::vector<std::string> all = chip_sets();
  all.insert(all.end(), sets.begin(), sets.end());
  TPUSIM_MACHINES(m, all);
  Random r(seed);
  std::vector<Shape> shapes{{1, 1, 1}, {8, 8, 48}, {40, 17, 49}, {70, 50, 24}};
  while (shapes.size() < 10) shapes.push_back({r.integer(1, 70), r.integer(1, 50), r.integer(1, 60)});
  const DType out = in == DType::I8 ? DType::I32 : DType::F32;
  // f8e4m3: values over its whole range, 2^-9 (subnormal) to 2^8, so that f32 sums round and order matters.
  const int elo = in == DType::F8E4M3 ? -9 : -3, ehi = in == DType::F8E4M3 ? 7 : 3;
  for (const Shape& s : shapes) {
    std::vector<double> a = r.values(in, s.m * s.k, elo, ehi), b = r.values(in, s.k * s.n, elo, ehi);
    const std::string what = "gemm_chip M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                             " N=" + std::to_string(s.n);
    std::vector<double> ref_out, isa_out;
    kernels::GemmChip g{s.m, s.k, s.n, in, out, 2, 3, schedule, trans_b};
    g.split_k = split_k, g.slots = slots;
    std::vector<double> whole = run_gemm(*m, g, a, b, &ref_out, &isa_out);
    std::vector<double> one = run_gemm(*m, {s.m, s.k, s.n, in, out, 1, 1, kernels::GemmSchedule::Strips}, a, b);
    std::vector<double> exact(s.m * s.n, 0), mag(s.m * s.n, 0), bound(s.m * s.n);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t l = 0; l < s.k; ++l)
        for (int64_t j = 0; j < s.n; ++j) {
          const double p = a[i * s.k + l] * b[l * s.n + j];
          exact[i * s.n + j] += p, mag[i * s.n + j] += std::fabs(p);
        }
    for (size_t i = 0; i < bound.size(); ++i) bound[i] = ref::sum_error_bound(s.k, mag[i]);
    const size_t n = exact.size();
    // Split K sums f32 partials in another order (int8 stays exact): bit for bit only without it.
    if (split_k == 0 || in == DType::I8)
      expect_all(what + ": 2 cores x 3 units vs 1 x 1, bit for bit", n, [&](size_t i) { return same(whole[i], one[i]); },
                 [&](size_t i) { return "whole chip " + num(whole[i]) + ", one unit " + num(one[i]); });
    if (in == DType::I8) {
      expect_all(what + ": sim vs host", n, [&](size_t i) { return whole[i] == exact[i]; },
                 [&](size_t i) { return "sim " + num(whole[i]) + ", host " + num(exact[i]); });
      expect_all(what + ": sim vs reference", n, [&](size_t i) { return whole[i] == ref_out[i]; },
                 [&](size_t i) { return "sim " + num(whole[i]) + ", reference " + num(ref_out[i]); });
    } else {
      // The reference machine summing in the ISA's order (f64, rounded to f32 after every add: products exact,
      // l = 0..k-1 within a pass, passes accumulated in program order): bit for bit for f8e4m3, as the ISA
      // document says its products sum as bf16's do. (bf16 is held to the bound below only.)
      if (in == DType::F8E4M3 && split_k == 0)
        expect_all(what + ": sim vs the ISA-order reference, bit for bit", n,
                   [&](size_t i) { return same(whole[i], isa_out[i]); },
                   [&](size_t i) { return "sim " + num(whole[i]) + ", reference " + num(isa_out[i]); });
      expect_all(what + ": sim vs host fp64", n,
                 [&](size_t i) { return ref::within_sum_bound(out, whole[i], exact[i], bound[i]); },
                 [&](size_t i) { return "sim " + num(whole[i]) + ", host " + num(exact[i]); });
      expect_all(what + ": reference vs host fp64", n,
                 [&](size_t i) { return ref::within_sum_bound(out, ref_out[i], exact[i], bound[i]); },
                 [&](size_t i) { return "reference " + num(ref_out[i]) + ", host " + num(exact[i]); });
    }
  }
}

TEST(GemmChip, Int8OnTwoCoresOfThreeUnits) { cases(DType::I8, 901); }
TEST(GemmChip, Bf16OnTwoCoresOfThreeUnits) { cases(DType::BF16, 902); }
// The tiled schedule: tiles of up to 16 rows (ACC_ROWS 32, double-buffered) by 3 units x S strips of 8 columns
// over 2 cores; with 4 KiB of VMEM a chunk holds 16 elements of K (2 slots of 16 x (16 + 24) bf16 and two C
// buffers), so K = 50 runs as 4 chunks: the first, two from the loop, and a partial last one.
TEST(GemmChip, Int8TiledOnTwoCoresOfThreeUnits) { cases(DType::I8, 903, kernels::GemmSchedule::Tiles); }
TEST(GemmChip, Bf16TiledOnTwoCoresOfThreeUnits) { cases(DType::BF16, 904, kernels::GemmSchedule::Tiles); }
TEST(GemmChip, Bf16TiledInChunksOfK) {
  cases(DType::BF16, 905, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"});
}
TEST(GemmChip, Int8TiledInChunksOfK) { cases(DType::I8, 906, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}); }
// b given as [N, K] (c = a @ b^T, a Linear layer's weights): the weight loads transpose.
TEST(GemmChip, Bf16TiledWithTransposedB) {
  cases(DType::BF16, 907, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}, true);
}
// K split over the cores: 3 splits asked, in 4 KiB of VMEM chunks hold 16 elements of K and a split is a whole
// number of chunks, so K = 50 runs as 2 splits of 32 + 18 (other K: up to 3); f32 partials in ws, reduced after
// a barrier.
TEST(GemmChip, Bf16TiledWithSplitK) {
  cases(DType::BF16, 909, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}, true, 3);
}
TEST(GemmChip, Int8TiledWithSplitK) { cases(DType::I8, 910, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}, false, 2); }
// Three and four operand slots in flight (the slot index wraps by a compare, not by 1 - slot).
TEST(GemmChip, Bf16TiledWithThreeSlots) {
  cases(DType::BF16, 911, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}, false, 0, 3);
}
TEST(GemmChip, Int8TiledWithFourSlotsAndSplitK) {
  cases(DType::I8, 912, kernels::GemmSchedule::Tiles, {"vmem.size_kib=4"}, true, 2, 4);
}
TEST(GemmChip, Int8TiledWithTransposedB) { cases(DType::I8, 908, kernels::GemmSchedule::Tiles, {}, true); }
// f8e4m3 inputs (f32 out) on a chip with an fp8 rate: both schedules, K in chunks, b transposed, split K.
TEST(GemmChip, Fp8OnTwoCoresOfThreeUnits) { cases(DType::F8E4M3, 916, kernels::GemmSchedule::Strips, {"mxu.fp8_rate=2"}); }
TEST(GemmChip, Fp8TiledInChunksOfKWithTransposedB) {
  cases(DType::F8E4M3, 917, kernels::GemmSchedule::Tiles, {"mxu.fp8_rate=2", "vmem.size_kib=4"}, true);
}
TEST(GemmChip, Fp8TiledWithSplitK) {
  cases(DType::F8E4M3, 918, kernels::GemmSchedule::Tiles, {"mxu.fp8_rate=2", "vmem.size_kib=4"}, false, 2);
}

// The compiler's GEMMs: bias, relu, a scale and weights stored tile by tile (gemm.s's B_TILED layout), on 2 cores
// x 3 units (tiled schedule) against gemm.s on one unit with the same defines, bit for bit (gemm.s is checked
// against the reference machine and the host elsewhere). The weights are written in the tiled layout for both.
void epilogue_cases(DType in, uint64_t seed, bool relu, float scale) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random r(seed);
  const DType acc = in == DType::I8 ? DType::I32 : DType::F32;
  const DType out = in == DType::I8 ? DType::I8 : DType::BF16;
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {33, 64, 65}, {70, 50, 8}, {100, 17, 5}}) {
    std::vector<double> a = r.values(in, s.m * s.k, -3, 3), b = r.values(in, s.k * s.n, -3, 3);
    std::vector<double> bias = in == DType::I8 ? r.values(DType::I8, s.n) : r.values(DType::F32, s.n, -2, 4);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    auto run = [&](const isa::Program& p) { return run_with_bias(*m, p, a, tiled, bias, in, acc, out); };
    kernels::GemmChip g{s.m, s.k, s.n, in, out, 2, 3, kernels::GemmSchedule::Auto};
    g.bias = true, g.relu = relu, g.b_tiled = true, g.scale_bits = scale == 1.0f ? 0 : isa::bits_from_f32(scale);
    std::vector<double> whole = run(kernels::gemm_chip_kernel(g, symbols));
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", static_cast<int64_t>(in)},
                    {"OUT_DT", static_cast<int64_t>(out)}, {"BIAS", 1}, {"RELU", relu}, {"B_TILED", 1},
                    {"SCALE", static_cast<int64_t>(g.scale_bits)}});
    std::vector<double> one = run(kernels::assemble("gemm.s", defines, {}, 0));
    const std::string what = "gemm_chip with bias" + std::string(relu ? ", relu" : "") + " M=" + std::to_string(s.m) +
                             " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
    expect_all(what + ": 2 cores x 3 units vs gemm.s, bit for bit", whole.size(),
               [&](size_t i) { return same(whole[i], one[i]); },
               [&](size_t i) { return "gemm_chip " + num(whole[i]) + ", gemm.s " + num(one[i]); });
  }
}

// The compiler's residual connections (gemm.s's RESIDUAL and RES_RELU): c = [relu](cast(a @ b + bias) + r), r of
// the output type. gemm.s with RESIDUAL and gemm_chip on 2 cores x 3 units against the host's sum of the plain
// GEMM's output (gemm.s without RESIDUAL, run here) and r, in f32 rounded to the output type as the separate Add
// kernel computes it, bit for bit: fusing the Add changes no result.
// `units` per core: 3 (chip_sets), or 4, which the plan may split into 2 strips of 2 row blocks.
std::vector<std::string> sets_of_units(int units) {
  std::vector<std::string> sets = chip_sets();
  if (units != 3) sets.push_back("core.mxus=" + std::to_string(units));
  return sets;
}

void residual_cases(DType out, uint64_t seed, bool relu, int units = 3) {
  TPUSIM_MACHINES(m, sets_of_units(units));
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random rnd(seed);
  const DType in = DType::BF16, acc = DType::F32;
  int paired = 0;  // shapes whose plan pairs the units (2 strips of 2 row blocks: N in (C, 2C] on 4 units)
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {100, 17, 5},
                                           {66, 20, 13}}) {
    std::vector<double> a = rnd.values(in, s.m * s.k, -3, 3), b = rnd.values(in, s.k * s.n, -3, 3);
    std::vector<double> bias = rnd.values(DType::F32, s.n, -2, 4), res = rnd.values(out, s.m * s.n, -40, 40);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    auto run = [&](const isa::Program& p) {
      if (const isa::TensorDecl* r = p.find("r")) m->write(r->addr, res, out);
      return run_with_bias(*m, p, a, tiled, bias, in, acc, out);
    };
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", static_cast<int64_t>(in)},
                    {"OUT_DT", static_cast<int64_t>(out)}, {"BIAS", 1}, {"B_TILED", 1}});
    const std::vector<double> plain = run(kernels::assemble("gemm.s", defines, {}, 0));
    std::vector<double> want(plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      const float sum = static_cast<float>(plain[i] + res[i]);  // both exact in f32's range: one rounding
      double x = out == DType::BF16 ? isa::f32_from_bf16(isa::bf16_from_f32(sum)) : sum;
      want[i] = relu ? std::max(x, 0.0) : x;
    }
    defines["RESIDUAL"] = 1, defines["RES_RELU"] = relu;
    const std::vector<double> one = run(kernels::assemble("gemm.s", defines, {}, 0));
    kernels::GemmChip g{s.m, s.k, s.n, in, out, 2, units, kernels::GemmSchedule::Auto};
    g.bias = true, g.b_tiled = true, g.residual = true, g.residual_relu = relu;
    paired += kernels::gemm_chip_source(g, symbols).find("of strip j / 2") != std::string::npos;
    const std::vector<double> whole = run(kernels::gemm_chip_kernel(g, symbols));
    const std::string what = std::string("residual ") + isa::dtype_name(out) + (relu ? ", relu" : "") +
                             " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
    expect_all(what + ": gemm.s vs the GEMM then the add on the host, bit for bit", want.size(),
               [&](size_t i) { return same(one[i], want[i]); },
               [&](size_t i) { return "gemm.s " + num(one[i]) + ", host " + num(want[i]); });
    expect_all(what + ": 2 cores x " + std::to_string(units) + " units vs the host, bit for bit", want.size(),
               [&](size_t i) { return same(whole[i], want[i]); },
               [&](size_t i) { return "gemm_chip " + num(whole[i]) + ", host " + num(want[i]); });
  }
  if (units == 4) {
    EXPECT_GE(paired, 1);
  }
}

// The compiler's activations after a GEMM (act: an elementwise row-wise program on the f32 result, GELU after a
// Linear's bias): gemm_chip with act on 2 cores x 3 units against the plain GEMM writing f32 (gemm.s) followed by
// the row-wise kernel of the same program on its output, bit for bit: fusing the activation changes no result.
void act_cases(uint64_t seed, kernels::rowwise::Op op, bool relu, int units = 3) {
  TPUSIM_MACHINES(m, sets_of_units(units));
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random rnd(seed);
  const DType in = DType::BF16, acc = DType::F32;
  kernels::rowwise::Program act;
  act.rows = 1, act.cols = 1;
  act.inputs.push_back({});
  const int x = act.input(0);
  const int y = op == kernels::rowwise::Op::Mul ? act.binary(op, x, act.unary(kernels::rowwise::Op::Sigmoid, x))
                                                : act.unary(op, x);  // Mul: x * sigmoid(x) (SiLU)
  act.outputs.push_back({y, 0, DType::BF16});
  int paired = 0;  // shapes whose plan pairs the units (2 strips of 2 row blocks: N in (C, 2C] on 4 units)
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {100, 17, 5},
                                           {66, 20, 13}}) {
    std::vector<double> a = rnd.values(in, s.m * s.k, -3, 3), b = rnd.values(in, s.k * s.n, -3, 3);
    std::vector<double> bias = rnd.values(DType::F32, s.n, -2, 4);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", static_cast<int64_t>(in)},
                    {"OUT_DT", static_cast<int64_t>(DType::F32)}, {"BIAS", 1}, {"RELU", relu}, {"B_TILED", 1}});
    const isa::Program plain = kernels::assemble("gemm.s", defines, {}, 0);
    const std::vector<double> f32 = run_with_bias(*m, plain, a, tiled, bias, in, acc, DType::F32);
    // the row-wise kernel over the f32 result, from where the GEMM left it, into an output after it
    kernels::rowwise::Program rw = act;
    rw.rows = s.m, rw.cols = s.n;
    rw.inputs[0].addr = plain.find("c")->addr;
    rw.outputs[0].addr = (plain.find("c")->addr + plain.find("c")->bytes() + 63) / 64 * 64;
    const isa::Program k = kernels::rowwise::kernel(rw, symbols);
    m->write(rw.outputs[0].addr, std::vector<uint8_t>(static_cast<size_t>(s.m * s.n * 2), 0xa5));
    m->run(k);
    const std::vector<double> want = m->read_sim(rw.outputs[0].addr, static_cast<size_t>(s.m * s.n), DType::BF16);
    // on the whole chip, and on one core of one unit (codegen's choice on a one-unit chip: gemm.s has no epilogue)
    for (const auto& [cores, used] : std::vector<std::pair<int, int>>{{2, units}, {1, 1}}) {
      kernels::GemmChip g{s.m, s.k, s.n, in, DType::BF16, cores, used, kernels::GemmSchedule::Auto};
      g.bias = true, g.relu = relu, g.b_tiled = true, g.act = act;
      paired += kernels::gemm_chip_source(g, symbols).find("of strip j / 2") != std::string::npos;
      const std::vector<double> whole =
          run_with_bias(*m, kernels::gemm_chip_kernel(g, symbols), a, tiled, bias, in, acc, DType::BF16);
      const std::string what = std::string("act ") + kernels::rowwise::op_name(op) + (relu ? " after relu" : "") +
                               " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
      expect_all(what + ": " + std::to_string(cores) + " cores x " + std::to_string(used) +
                     " units vs the GEMM then the row-wise kernel, bit for bit",
                 want.size(), [&](size_t i) { return same(whole[i], want[i]); },
                 [&](size_t i) { return "gemm_chip " + num(whole[i]) + ", row-wise " + num(want[i]); });
    }
  }
  if (units == 4) {
    EXPECT_GE(paired, 1);
  }
}

TEST(GemmChip, GeluAfterTheBiasMatchesTheGemmThenTheRowwiseKernel) { act_cases(951, kernels::rowwise::Op::Gelu, false); }
TEST(GemmChip, TanhGeluAfterReluMatchesTheGemmThenTheRowwiseKernel) {
  act_cases(952, kernels::rowwise::Op::GeluTanh, true);
}
TEST(GemmChip, SiluMatchesTheGemmThenTheRowwiseKernel) { act_cases(953, kernels::rowwise::Op::Mul, false); }

TEST(GemmChip, Bf16ResidualAndReluMatchTheGemmThenTheAdd) { residual_cases(DType::BF16, 941, true); }
TEST(GemmChip, F32ResidualMatchesTheGemmThenTheAdd) { residual_cases(DType::F32, 942, false); }

// g (bf16 or int8 in, f32 or i32 out) on random inputs against the same product on one unit (strips), bit for bit,
// and with int8 against the host's exact sums.
void expect_one_units_bits(Machines& m, const kernels::GemmChip& g, Random& r, const std::string& what) {
  std::vector<double> a = r.values(g.in, g.m * g.k, -3, 3), b = r.values(g.in, g.k * g.n, -3, 3);
  const std::vector<double> whole = run_gemm(m, g, a, b);
  const std::vector<double> one = run_gemm(m, {g.m, g.k, g.n, g.in, g.out, 1, 1, kernels::GemmSchedule::Strips}, a, b);
  expect_all(what + " vs 1 x 1, bit for bit", whole.size(), [&](size_t i) { return same(whole[i], one[i]); },
             [&](size_t i) { return "whole chip " + num(whole[i]) + ", one unit " + num(one[i]); });
  if (g.in != DType::I8) return;
  std::vector<double> exact(static_cast<size_t>(g.m * g.n), 0.0);
  for (int64_t i = 0; i < g.m; ++i)
    for (int64_t l = 0; l < g.k; ++l)
      for (int64_t j = 0; j < g.n; ++j) exact[i * g.n + j] += a[i * g.k + l] * b[l * g.n + j];
  expect_all(what + ": sim vs host", exact.size(), [&](size_t i) { return whole[i] == exact[i]; },
             [&](size_t i) { return "sim " + num(whole[i]) + ", host " + num(exact[i]); });
}

// Outputs no wider than one matrix unit (N <= C): the tiled schedule gives each unit a block of a tile's rows
// instead of a strip of its columns (its source says "row blocks"), so that every unit works; against the same
// product on one unit, bit for bit, and int8 against the host exactly. (The epilogue, dequant and conv taps
// tests include narrow shapes too.)
TEST(GemmChip, NarrowOutputsSplitTheRowsOverTheUnits) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  Random r(941);
  for (DType in : {DType::BF16, DType::I8})
    for (const Shape& s : std::vector<Shape>{{70, 50, 8}, {100, 17, 5}, {64, 24, 3}, {200, 9, 8}}) {
      const DType out = in == DType::I8 ? DType::I32 : DType::F32;
      const std::string what = std::string(isa::dtype_name(in)) + " M=" + std::to_string(s.m) + " K=" +
                               std::to_string(s.k) + " N=" + std::to_string(s.n);
      const kernels::GemmChip g{s.m, s.k, s.n, in, out, 2, 3, kernels::GemmSchedule::Tiles};
      EXPECT_NE(kernels::gemm_chip_source(g, symbols).find("row blocks"), std::string::npos) << what;
      expect_one_units_bits(*m, g, r, what + ": row blocks on 2 cores x 3 units");
    }
}

// Outputs of two strips on four units a core: the plan may pair the units, two strips of C columns each split into
// two blocks of rows, so that every unit works where a tile of 4 strips would leave two idle. On the test chip
// (8 x 8 units) against one unit, bit for bit (int8 also against the host), the last column tile short of its
// second strip in some shapes; and on v5e (4 units of 128 x 128, one core) the GEMM of a 3 x 3 convolution of 256
// channels (512 x 2304 x 256): in 2 strips of 2 row blocks it takes at most 0.8 times the cycles on 2 units (1
// strip each: what 4 units did before row blocks came in pairs, tiles of 4 strips with 2 empty), since each unit
// streams 256 rows rather than 512 past each weight tile (2 units: 18 folds x 512 rows = 9,216 matrix cycles;
// 4 units: 4,608, below the 6,500 cycles of its 3.5 MB at 546 bytes a cycle; measured 8,432 against 11,829).
TEST(GemmChip, TwoStripsOfTwoRowBlocksKeepFourUnitsBusy) {
  {  // (one Chip per process: the v5e run is a test of its own, below)
    TPUSIM_MACHINES(m, sets_of_units(4));
    const std::map<std::string, int64_t> symbols = symbols_of(*m);
    Random r(961);
    int paired = 0;
    for (DType in : {DType::BF16, DType::I8})
      for (const Shape& s : std::vector<Shape>{{70, 50, 16}, {100, 17, 13}, {64, 24, 11}, {33, 40, 16}}) {
        const DType out = in == DType::I8 ? DType::I32 : DType::F32;
        const std::string what = std::string(isa::dtype_name(in)) + " M=" + std::to_string(s.m) + " K=" +
                                 std::to_string(s.k) + " N=" + std::to_string(s.n);
        const kernels::GemmChip g{s.m, s.k, s.n, in, out, 1, 4, kernels::GemmSchedule::Tiles};
        paired += kernels::gemm_chip_source(g, symbols).find("of strip j / 2") != std::string::npos;
        expect_one_units_bits(*m, g, r, what + ": 1 core x 4 units");
      }
    EXPECT_GE(paired, 4) << "shapes planned as 2 strips of 2 row blocks, of 8";
  }
}

TEST(GemmChip, TwoStripsOfTwoRowBlocksOnV5eBeatTwoUnits) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  ASSERT_EQ(symbols.at("MXUS"), 4);
  kernels::GemmChip g{512, 2304, 256, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
  const std::string src = kernels::gemm_chip_source(g, symbols);
  EXPECT_NE(src.find("1 tiles of 512 x 256 (row blocks: unit j takes rows (j % 2)*256.. of strip j / 2"),
            std::string::npos)
      << src.substr(0, 300);
  sim::Chip chip(cfg);
  const uint64_t four = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles;
  g.mxus = 2;
  const uint64_t two = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles;
  EXPECT_LT(static_cast<double>(four), 0.8 * static_cast<double>(two));
  std::printf("512 x 2304 x 256 on v5e: 4 units (2 strips x 2 row blocks) %llu cycles, 2 units %llu\n",
              static_cast<unsigned long long>(four), static_cast<unsigned long long>(two));
}

// v as values of `in` (bf16 or int8), their bytes written to HBM at addr
void put_values(sim::Chip& chip, uint64_t addr, const std::vector<double>& v, DType in) {
  const size_t E = isa::dtype_size(in);
  std::vector<uint8_t> bytes(v.size() * E);
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t bits = in == DType::I8 ? static_cast<uint8_t>(static_cast<int8_t>(v[i]))
                                          : isa::bf16_from_f32(static_cast<float>(v[i]));
    std::memcpy(bytes.data() + i * E, &bits, E);
  }
  chip.write_hbm(addr, bytes.data(), bytes.size());
}

// GEMM kernel p run on a and b (as `in`, b in the kernel's layout): c's bytes and the HBM bytes read
std::pair<std::vector<uint8_t>, uint64_t> run_for_bytes(sim::Chip& chip, const isa::Program& p,
                                                        const std::vector<double>& a, const std::vector<double>& b,
                                                        DType in) {
  put_values(chip, p.find("a")->addr, a, in), put_values(chip, p.find("b")->addr, b, in);
  const isa::TensorDecl* c = p.find("c");
  chip.write_hbm(c->addr, std::vector<uint8_t>(c->bytes(), 0xa5).data(), c->bytes());
  const sim::RunResult res = chip.run(p);
  std::vector<uint8_t> out(c->bytes());
  chip.read_hbm(c->addr, out.data(), out.size());
  return {out, res.stats.hbm_bytes_read};
}

// The weights of a GEMM's first chunks loaded ahead into an area of VMEM (GemmChip::b_area, as the compiler has the
// fused attention load them two kernels ahead): on v5e (one core), 40 x 300 x 200 in bf16 and int8, b as [K, N],
// transposed and tile by tile, the kernel given half of VMEM and its first 2 chunks of K (of 128) in the upper
// half. A program of gemm_chip_area's transfers runs first, then the kernel: its output is the plain kernel's,
// bit for bit, and it reads from HBM exactly the area's bytes fewer (the transfers' rows x row bytes).
TEST(GemmChip, WeightsLoadedAheadIntoAnAreaSameBitsFewerBytes) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  const int64_t vmem = symbols.at("VMEM_BYTES"), R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  symbols["VMEM_BYTES"] = 512 * 1024;  // chunks of K: the kernel's own VMEM is small
  sim::Chip chip(cfg);
  Random r(971);
  for (DType in : {DType::BF16, DType::I8})
    for (int layout = 0; layout < 3; ++layout) {  // b as [K, N], transposed, tile by tile
      if (in == DType::I8 && layout == 1) continue;
      kernels::GemmChip g{40, 300, 200, in, in == DType::I8 ? DType::I32 : DType::F32, 1, 4,
                          kernels::GemmSchedule::Tiles};
      g.trans_b = layout == 1, g.b_tiled = layout == 2;
      const std::string what = std::string(isa::dtype_name(in)) + (layout == 1 ? " b^T" : layout == 2 ? " b tiled" : " b");
      const kernels::GemmArea sized = kernels::gemm_chip_area(g, symbols);
      ASSERT_GE(sized.chunks, 3) << what;
      kernels::GemmChip ahead = g;
      ahead.b_area_chunks = 2;
      ahead.b_area = (vmem - 2 * sized.chunk_bytes) / 64 * 64;
      const isa::Program plain = kernels::gemm_chip_kernel(g, symbols), with = kernels::gemm_chip_kernel(ahead, symbols);
      const kernels::GemmArea area = kernels::gemm_chip_area(ahead, symbols);
      ASSERT_EQ(area.loads.size(), 2u) << what;
      std::vector<double> a = r.values(in, g.m * g.k, -3, 3), b = r.values(in, g.k * g.n, -3, 3);
      std::vector<double> bl = layout == 2 ? tiled_b(b, g.k, g.n, R, C) : b;
      if (layout == 1)
        for (int64_t l = 0; l < g.k; ++l)
          for (int64_t j = 0; j < g.n; ++j) bl[j * g.k + l] = b[l * g.n + j];
      const auto [want, plain_read] = run_for_bytes(chip, plain, a, bl, in);
      isa::Emitter e("loader", "<test>", 0);
      int64_t moved = 0;
      for (const kernels::DmaLoad& l : area.loads) {
        e.li(isa::reg(1), l.vaddr), e.li(isa::reg(2), l.haddr), e.li(isa::reg(3), l.rows);
        e.li(isa::reg(4), l.rowbytes), e.li(isa::reg(5), l.hstride), e.li(isa::reg(6), l.vstride);
        e.dma_ld(isa::reg(1), isa::reg(2), isa::reg(3), isa::reg(4), isa::reg(5), isa::reg(6));
        moved += l.rows * l.rowbytes;
      }
      e.halt();
      put_values(chip, with.find("b")->addr, bl, in);
      chip.run(e.finish());
      const auto [got, with_read] = run_for_bytes(chip, with, a, bl, in);
      EXPECT_EQ(got, want) << what << ": the same bits";
      EXPECT_EQ(static_cast<int64_t>(plain_read) - static_cast<int64_t>(with_read), moved) << what;
      EXPECT_GT(moved, 0) << what;
    }
}

// The same on v4 (two cores), 40 x 300 x 1100 in bf16, b as [K, N]: the area holds each core's first tile's first
// 2 chunks (core 0 columns 0 .. W, core 1 columns W .. 2W: gemm_chip_area's loads name their core), loaded by a
// program of two cores in which each core issues its own; the kernel's output is the plain kernel's, bit for
// bit, and it reads exactly the area's bytes fewer from HBM.
TEST(GemmChip, WeightsLoadedAheadIntoEachCoresAreaSameBitsFewerBytes) {
  const sim::ChipConfig cfg = sim::load_config("v4");
  std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  const int64_t vmem = symbols.at("VMEM_BYTES");
  symbols["VMEM_BYTES"] = 512 * 1024;  // chunks of K: the kernel's own VMEM is small
  sim::Chip chip(cfg);
  Random r(972);
  kernels::GemmChip g{40, 300, 1100, DType::BF16, DType::F32, 2, 4, kernels::GemmSchedule::Tiles};
  const kernels::GemmArea sized = kernels::gemm_chip_area(g, symbols);
  ASSERT_GE(sized.chunks, 3);
  kernels::GemmChip ahead = g;
  ahead.b_area_chunks = 2;
  ahead.b_area = (vmem - 2 * sized.chunk_bytes) / 64 * 64;
  const kernels::GemmArea area = kernels::gemm_chip_area(ahead, symbols);
  ASSERT_EQ(area.loads.size(), 4u);  // 2 chunks x 2 cores
  std::set<int> cores;
  for (const kernels::DmaLoad& l : area.loads) cores.insert(l.core);
  EXPECT_EQ(cores, (std::set<int>{0, 1}));
  // both cores' first tiles, W columns each (the plan's width: rows of W bf16), core 1's W columns after core 0's
  const int64_t W = area.loads[0].rowbytes / 2;
  EXPECT_EQ(area.b_bytes, g.k * 2 * W * 2);
  for (const kernels::DmaLoad& l : area.loads) {
    if (l.core == 1 && l.vaddr == area.loads[0].vaddr) {
      EXPECT_EQ(l.haddr, area.loads[0].haddr + W * 2);
    }
  }
  std::vector<double> a = r.values(DType::BF16, g.m * g.k, -3, 3), b = r.values(DType::BF16, g.k * g.n, -3, 3);
  const isa::Program plain = kernels::gemm_chip_kernel(g, symbols), with = kernels::gemm_chip_kernel(ahead, symbols);
  const auto [want, plain_read] = run_for_bytes(chip, plain, a, b, DType::BF16);
  isa::Emitter e("loader", "<test>", 0);  // each core its own loads (as the fused attention issues them)
  e.set_cores(2);
  e.core_id(isa::reg(7));
  int64_t moved = 0;
  for (const kernels::DmaLoad& l : area.loads) {
    const isa::Label other = e.label();
    e.li(isa::reg(8), l.core), e.bne(isa::reg(7), isa::reg(8), other);
    e.li(isa::reg(1), l.vaddr), e.li(isa::reg(2), l.haddr), e.li(isa::reg(3), l.rows);
    e.li(isa::reg(4), l.rowbytes), e.li(isa::reg(5), l.hstride), e.li(isa::reg(6), l.vstride);
    e.dma_ld(isa::reg(1), isa::reg(2), isa::reg(3), isa::reg(4), isa::reg(5), isa::reg(6));
    e.bind(other);
    moved += l.rows * l.rowbytes;
  }
  e.halt();
  put_values(chip, with.find("b")->addr, b, DType::BF16);
  chip.run(e.finish());
  const auto [got, with_read] = run_for_bytes(chip, with, a, b, DType::BF16);
  EXPECT_EQ(got, want) << "the same bits";
  EXPECT_EQ(static_cast<int64_t>(plain_read) - static_cast<int64_t>(with_read), moved);
  EXPECT_GT(moved, 0);
}

// The first chunks of b of each core's first tile preloaded into the kernel's slots (GemmChip::b_preloaded, as the
// compiler has the kernel before the GEMM load them: one chunk, or as many as HBM moves in that kernel's tail): on
// v4 (two cores), 40 x 300 x 1100 in bf16 with chunks of K, for every count up to gemm_chip_preload_limit's, a
// program of gemm_chip_first_b's loads runs first, then the kernel: its output is the plain kernel's, bit for bit,
// and it reads from HBM exactly the bytes the preloads read fewer, n chunks of each core's first tile. One more
// than the limit is refused. (And the units' first weights ahead, GemmChip::lw_sem, below.)
TEST(GemmChip, FirstChunksPreloadedIntoTheSlotsSameBitsFewerBytes) {
  const sim::ChipConfig cfg = sim::load_config("v4");
  std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  symbols["VMEM_BYTES"] = 512 * 1024;  // chunks of K
  sim::Chip chip(cfg);
  Random r(973);
  kernels::GemmChip g{40, 300, 1100, DType::BF16, DType::F32, 2, 4, kernels::GemmSchedule::Tiles};
  const kernels::GemmPreload most = kernels::gemm_chip_preload_limit(g, symbols);
  ASSERT_GE(most.chunks, 2);
  std::vector<double> a = r.values(DType::BF16, g.m * g.k, -3, 3), b = r.values(DType::BF16, g.k * g.n, -3, 3);
  const isa::Program plain = kernels::gemm_chip_kernel(g, symbols);
  const auto [want, plain_read] = run_for_bytes(chip, plain, a, b, DType::BF16);
  for (int64_t n = 1; n <= most.chunks; ++n) {
    kernels::GemmChip with = g;
    with.b_preloaded = n;
    const isa::Program kernel = kernels::gemm_chip_kernel(with, symbols);
    put_values(chip, kernel.find("b")->addr, b, DType::BF16);
    const uint64_t preloaded = chip.run(kernels::gemm_chip_first_b(with, symbols)).stats.hbm_bytes_read;
    EXPECT_EQ(static_cast<int64_t>(preloaded), n * 2 * most.chunk_bytes) << n << " chunks, both cores' first tiles";
    const auto [got, with_read] = run_for_bytes(chip, kernel, a, b, DType::BF16);
    EXPECT_EQ(got, want) << n << " chunks: the same bits";
    EXPECT_EQ(plain_read - with_read, preloaded) << n << " chunks";
  }
  kernels::GemmChip over = g;
  over.b_preloaded = most.chunks + 1;
  EXPECT_THROW(kernels::gemm_chip_kernel(over, symbols), std::invalid_argument);
  // GemmChip::lw_sem: the preloads' program also pushes each unit's first weights into its shadow buffer (the 3
  // units a core's first tile's strips take), and the kernel issues that many mxu.lw fewer (an mxu.sync takes each
  // one's place): the same bits,
  // the two in one run (a unit's shadow buffer lasts within a run). Without its preloads or its quick start, refused.
  kernels::GemmChip ahead = g;
  ahead.b_preloaded = 1, ahead.lw_sem = 30;
  const isa::Program first = kernels::gemm_chip_first_b(ahead, symbols);
  isa::Program both = kernels::gemm_chip_kernel(ahead, symbols, {}, first.code.size());
  both.code.insert(both.code.begin(), first.code.begin(), first.code.end());
  both.source.insert(both.source.begin(), first.source.begin(), first.source.end());
  put_values(chip, both.find("b")->addr, b, DType::BF16);
  EXPECT_EQ(run_for_bytes(chip, both, a, b, DType::BF16).first, want) << "units' first weights ahead: the same bits";
  auto ops = [](const isa::Program& p, isa::Op op) {
    return std::count_if(p.code.begin(), p.code.end(), [&](isa::Word w) { return isa::decode(w).op == op; });
  };
  kernels::GemmChip one = ahead;
  one.lw_sem = 0;
  // (one core's code, each core running it for its own first tile: a mxu.lw per unit with a strip of it, 3 here)
  EXPECT_EQ(ops(first, isa::Op::MXULW), 3);
  EXPECT_EQ(ops(kernels::gemm_chip_kernel(ahead, symbols), isa::Op::MXULW),
            ops(kernels::gemm_chip_kernel(one, symbols), isa::Op::MXULW) - 3);
  kernels::GemmChip bare = ahead;
  bare.b_preloaded = 0;
  EXPECT_THROW(kernels::gemm_chip_kernel(bare, symbols), std::invalid_argument);
  bare = ahead, bare.quick_start = false;
  EXPECT_THROW(kernels::gemm_chip_first_b(bare, symbols), std::invalid_argument);
}

// A 300 x 300 x 700 bf16 GEMM on v5e (one core, 4 units, tiles of 512 columns) with random a and b, for the tests
// of the loads it issues for other kernels: run(k, haddr, extra) writes `extra` to HBM at haddr and runs kernel k,
// returning c's bytes and the HBM bytes read.
struct V5eGemm {
  sim::ChipConfig cfg = sim::load_config("v5e");
  std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip{cfg};
  kernels::GemmChip g{300, 300, 700, DType::BF16, DType::F32, 1, 4, kernels::GemmSchedule::Tiles};
  std::vector<double> a, b;
  explicit V5eGemm(uint64_t seed) {
    Random r(seed);
    a = r.values(DType::BF16, g.m * g.k, -3, 3), b = r.values(DType::BF16, g.k * g.n, -3, 3);
  }
  // The first 4 KiB boundary past the kernel's own VMEM, and an address 4 KiB inside it
  int64_t past_own() { return (kernels::gemm_chip_vmem_end(g, symbols) + 4095) / 4096 * 4096; }
  int64_t inside_own() { return kernels::gemm_chip_vmem_end(g, symbols) - 4096; }
  // n bytes of a pattern (byte i is i * mul + add)
  static std::vector<uint8_t> pattern(size_t n, size_t mul, size_t add) {
    std::vector<uint8_t> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i * mul + add);
    return v;
  }
  // `with` (g and loads for other kernels) gives g's output bits and reads exactly `more` bytes more from HBM
  void expect_same_bits_reading_more(const kernels::GemmChip& with, int64_t haddr, const std::vector<uint8_t>& extra,
                                     uint64_t more) {
    const auto [plain, plain_read] = run(g, haddr, extra);
    const auto [got, with_read] = run(with, haddr, extra);
    EXPECT_EQ(got, plain);
    EXPECT_EQ(with_read, plain_read + more);
  }
  // VMEM [vaddr, +n) holds `want`'s first n bytes
  void expect_in_vmem(int64_t vaddr, const uint8_t* want, size_t n) {
    std::vector<uint8_t> got(n);
    chip.read_vmem(static_cast<uint64_t>(vaddr), got.data(), n);
    EXPECT_TRUE(std::equal(got.begin(), got.end(), want)) << "VMEM " << vaddr;
  }
  // k refused (std::invalid_argument), and k on two cores of v4 refused
  static void expect_refused(const kernels::GemmChip& k, const std::map<std::string, int64_t>& symbols) {
    EXPECT_THROW(kernels::gemm_chip_kernel(k, symbols), std::invalid_argument);
  }
  static void expect_refused_on_two_cores(kernels::GemmChip k) {
    k.cores = 2;
    expect_refused(k, preset_symbols(sim::load_config("v4")));
  }
  std::pair<std::vector<uint8_t>, uint64_t> run(const kernels::GemmChip& k, int64_t haddr,
                                                const std::vector<uint8_t>& extra) {
    const isa::Program p = kernels::gemm_chip_kernel(k, symbols);
    for (const auto& [name, v] : {std::pair{"a", &a}, std::pair{"b", &b}}) {
      std::vector<uint16_t> bits(v->size());
      for (size_t i = 0; i < v->size(); ++i) bits[i] = isa::bf16_from_f32(static_cast<float>((*v)[i]));
      chip.write_hbm(p.find(name)->addr, bits.data(), bits.size() * 2);
    }
    chip.write_hbm(static_cast<uint64_t>(haddr), extra.data(), extra.size());
    const sim::RunResult res = chip.run(p);
    std::vector<uint8_t> out(p.find("c")->bytes());
    chip.read_hbm(p.find("c")->addr, out.data(), out.size());
    return {out, res.stats.hbm_bytes_read};
  }
};

// Another kernel's loads issued by a GEMM right after its last tile's loads and products (GemmChip::prefetch: the
// compiler's QKV projection loading the output projection's first weights while the attention between waits):
// V5eGemm, 4 rows of 256 bytes into VMEM past the kernel's own (rows 512 bytes apart there). The output is the same
// bits as without, the rows are in VMEM after the run, HBM read exactly their 1,024 bytes more; a load into the
// kernel's own VMEM is refused, and so is prefetch on two cores (v4).
TEST(GemmChip, PrefetchLoadsAfterTheLastTilesOwn) {
  V5eGemm t(981);
  const int64_t vaddr = t.past_own(), haddr = int64_t{1} << 30;
  const std::vector<uint8_t> rows = V5eGemm::pattern(1024, 29, 3);
  kernels::GemmChip with = t.g;
  with.prefetch = {kernels::DmaLoad{vaddr, haddr, 4, 256, 256, 512}};
  t.expect_same_bits_reading_more(with, haddr, rows, 1024);
  for (int i = 0; i < 4; ++i) t.expect_in_vmem(vaddr + i * 512, rows.data() + i * 256, 256);
  with.prefetch = {kernels::DmaLoad{t.inside_own(), haddr, 1, 256, 256, 256}};
  V5eGemm::expect_refused(with, t.symbols);
  with.prefetch = {kernels::DmaLoad{vaddr, haddr, 4, 256, 256, 512}};
  V5eGemm::expect_refused_on_two_cores(with);
}

// GemmChip::c_rows: the product's rows stored through a map, bit for bit the plain kernel's rows where kept, every
// other byte of c as it was. `map` for a product of m rows: c spans map.rows rows of n. bias and ReLU (a
// convolution's), a, b and c in VMEM as a compiled model's intermediates are (v5e: VMEM from 16 MiB the kernel's)
// or in HBM (v4, two cores: each core's tiles store through the map).
// With `whole_groups`, the stores go a whole group (or several) at a time (GemmChip::c_rows: c's whole rows a
// strip, groups g * pitch apart): at most three stores where the plain kernel makes one.
void expect_rows_through_map(sim::Chip& chip, const sim::ChipConfig& cfg, int64_t m, int64_t k, int64_t n,
                             kernels::RowMap map, bool in_vmem, bool whole_groups = false) {
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  const int64_t cores = symbols.at("CORES");
  kernels::GemmChip g{m, k, n, DType::BF16, DType::BF16, static_cast<int>(cores), 4, kernels::GemmSchedule::Tiles};
  g.bias = g.relu = true;
  if (in_vmem) g.vmem_base = 16 << 20;
  const uint64_t base = in_vmem ? isa::kLocalWindow : uint64_t{1} << 30;
  const std::map<std::string, uint64_t> addr = {
      {"a", base}, {"b", base + (4 << 20)}, {"c", base + (8 << 20)}, {"bias", uint64_t{3} << 30}};
  std::mt19937 rng(static_cast<uint32_t>(m * 7 + k));
  std::uniform_real_distribution<float> d(-2, 2);
  std::vector<uint16_t> a(static_cast<size_t>(m * k)), b(static_cast<size_t>(k * n));
  for (uint16_t& x : a) x = isa::bf16_from_f32(d(rng));
  for (uint16_t& x : b) x = isa::bf16_from_f32(d(rng));
  std::vector<float> bias(static_cast<size_t>(n));
  for (float& x : bias) x = d(rng);
  const size_t row = static_cast<size_t>(n) * 2, span = static_cast<size_t>(std::max(map.rows, m)) * row;
  auto write = [&](uint64_t at, const void* data, size_t bytes) {
    if (in_vmem) chip.write_vmem(at - isa::kLocalWindow, data, bytes);
    else chip.write_hbm(at, data, bytes);
  };
  std::vector<uint64_t> stores;  // the dmaout instructions of each run (stores and syncs)
  auto run = [&](const kernels::GemmChip& kg) {
    const isa::Program p = kernels::gemm_chip_kernel(kg, symbols, addr);
    write(addr.at("a"), a.data(), a.size() * 2);
    write(addr.at("b"), b.data(), b.size() * 2);
    chip.write_hbm(addr.at("bias"), bias.data(), bias.size() * 4);
    write(addr.at("c"), std::vector<uint8_t>(span, 0xa5).data(), span);
    stores.push_back(chip.run(p).stats.units[static_cast<size_t>(isa::Unit::DmaOut)].instructions);
    std::vector<uint8_t> c(span);
    if (in_vmem) chip.read_vmem(addr.at("c") - isa::kLocalWindow, c.data(), span);
    else chip.read_hbm(addr.at("c"), c.data(), span);
    return c;
  };
  const std::vector<uint8_t> plain = run(g);
  g.c_rows = map;
  const std::vector<uint8_t> mapped = run(g);
  std::vector<uint8_t> want(span, 0xa5);
  for (int64_t r = 0; r < m; ++r) {
    const int64_t grp = r / map.group, w = r % map.group;
    if (w >= map.keep) continue;
    const int64_t at = (map.per_image > 0 ? grp / map.per_image * map.image_pitch + grp % map.per_image * map.pitch
                                          : grp * map.pitch) +
                       w * n * 2;
    std::copy_n(plain.begin() + r * static_cast<int64_t>(row), row, want.begin() + at);
  }
  EXPECT_TRUE(mapped == want) << cfg.chip.name << " " << m << " x " << k << " x " << n;
  std::printf("%s, %lld rows in groups of %lld (%lld kept): %llu dmaout instructions, %llu without the map\n",
              cfg.chip.name.c_str(), static_cast<long long>(m), static_cast<long long>(map.group),
              static_cast<long long>(map.keep), static_cast<unsigned long long>(stores[1]),
              static_cast<unsigned long long>(stores[0]));
  // (each mapped piece: a sync before its stores and one after, against the plain kernel's one store)
  if (whole_groups) EXPECT_LE(stores[1], 5 * stores[0]);
  else EXPECT_GT(stores[1], 5 * stores[0]);
}

// Into a padded layout (the rows of two images of 30 x 40 pixels, each pixel row 42 pixels apart, each image 33
// pixel rows apart: a border of one row and column, and a slack row), and dropping virtual columns (rows of 34
// with 32 kept, stored densely), on v5e in VMEM and on v4's two cores in HBM; a map that keeps no row, one whose
// groups overlap and one past c's rows are refused.
TEST(GemmChip, CRowsStoreThroughAMap) {
  const int64_t n = 64, row = n * 2;
  const kernels::RowMap padded{40, 40, 42 * row, 30, 33 * 42 * row, 2 * 33 * 42};
  const kernels::RowMap dropped{34, 32, 32 * row, 0, 0, 30 * 32};
  const sim::ChipConfig cfg = sim::load_config("v5e");
  sim::Chip chip(cfg);
  expect_rows_through_map(chip, cfg, 2 * 30 * 40, 96, n, padded, true);
  expect_rows_through_map(chip, cfg, 30 * 34, 288, n, dropped, true, true);
  // one image into its padded layout: the groups g * pitch apart, whole groups at a time
  expect_rows_through_map(chip, cfg, 30 * 40, 96, n, {40, 40, 42 * row, 30, 33 * 42 * row, 33 * 42}, true, true);
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g{1020, 288, n, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
  for (const kernels::RowMap& bad :
       {kernels::RowMap{34, 0, 32 * row, 0, 0, 960}, kernels::RowMap{34, 32, 31 * row, 0, 0, 960},
        kernels::RowMap{34, 32, 32 * row, 0, 0, 959}}) {
    g.c_rows = bad;
    EXPECT_THROW(kernels::gemm_chip_kernel(g, symbols), std::invalid_argument);
  }
}

TEST(GemmChip, CRowsStoreThroughAMapOnTwoCores) {
  const int64_t n = 256, row = n * 2;
  const sim::ChipConfig cfg = sim::load_config("v4");
  sim::Chip chip(cfg);
  expect_rows_through_map(chip, cfg, 2 * 30 * 40, 96, n, {40, 40, 42 * row, 30, 33 * 42 * row, 2 * 33 * 42}, false);
  // 128 columns, a matrix unit's strip: the drop of virtual columns whole groups at a time on both cores
  expect_rows_through_map(chip, cfg, 30 * 34, 288, 128, {34, 32, 32 * 256, 0, 0, 30 * 32}, false, true);
}

// Where the whole-chip GEMM splits a tile's rows over its units (row blocks) and each streams fewer rows than a
// weight load takes, every unit loads every weight tile of its strip and the kernel waits on those loads; the
// split-K kernel's units share them. ResNet-50's 7 x 7 1 x 1 convolution, 49 x 2048 x 512 on v6e, a and b in VMEM
// (the weight stream's and a compiled model's intermediates), bias and ReLU, timing only: the whole-chip GEMM's
// 2 strips of 256 columns in 2 row blocks of 25 and 24 rows, each unit 8 weight loads of 256 cycles (2,048 of
// loads a unit, its 8 streams of 25 rows behind them); the split kernel's units 4 tiles each (its 2 strips x 8
// folds over 4 units). So the compiler (split_k_gemm) takes the split kernel there.
TEST(GemmChip, RowBlocksThatWaitOnWeightLoadsLoseToSplitK) {
  const sim::ChipConfig cfg = sim::load_config("v6e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip(cfg);
  const uint64_t local = isa::kLocalWindow;
  const std::map<std::string, uint64_t> addr = {{"a", local + (64 << 20)}, {"b", local + (80 << 20)},
                                                 {"c", local + (72 << 20)}, {"bias", uint64_t{1} << 30}};
  kernels::GemmChip g{49, 2048, 512, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
  g.bias = g.relu = true;
  const kernels::GemmTiles t = kernels::gemm_chip_tiles(g, symbols);
  EXPECT_EQ(t.rb, 2);
  EXPECT_EQ(t.u, 4);
  EXPECT_LT((t.tm + t.rb - 1) / t.rb, symbols.at("MXU_ROWS"));
  kernels::GemmKSplit k;
  k.m = 49, k.k = 2048, k.n = 512, k.out = DType::BF16, k.bias = k.relu = true, k.a_local = true;
  const kernels::KSplitPlan p = kernels::gemm_ksplit_plan(k, symbols);
  EXPECT_EQ(p.units, 4);
  EXPECT_EQ(p.longest, 4);  // 2 strips x 8 folds over 4 units, where each whole-chip unit loads 8
  const uint64_t whole = chip.run(kernels::gemm_chip_kernel(g, symbols, addr), timing_only()).stats.cycles;
  const uint64_t split = chip.run(kernels::gemm_ksplit_kernel(k, symbols, addr), timing_only()).stats.cycles;
  std::printf("49 x 2048 x 512 on v6e, a and b in VMEM: the whole-chip GEMM %llu cycles, split-K %llu\n",
              static_cast<unsigned long long>(whole), static_cast<unsigned long long>(split));
  // the whole-chip GEMM's units load 8 tiles of 256 rows each, at least 2,048 cycles; the split kernel's 4
  EXPECT_GE(whole, 8u * 256u);
  EXPECT_LT(split, whole);
}

// The weight stream's share of a GEMM's tail as background loads (DmaLoad::bg, signalling DmaLoad::signal): the
// compiler's next kernel, after a sem.set of a semaphore the loads do not signal (codegen.cpp: the drain before a
// kernel that begins with none), starts when the GEMM's own work ends, not when the loads do. V5eGemm's shape with
// a, b and c in VMEM (as a compiled model's intermediates and streamed weights are; its own VMEM from 16 MiB) and
// 2 MiB prefetched past that (3,841 cycles at v5e's 546 bytes a cycle), its halt made a jump to a trailer of
// `sem.set s30, 0` and a delay of 6,000 cycles (the next kernel), timing only: plain loads hold the sem.set until
// they are in, background ones do not, so the trailer starts at the GEMM's end as without the loads (the same
// cycles, 8,597: nothing of the GEMM's own crosses HBM), where plain ones held it past the GEMM's end (about 2,600
// cycles) until they were in: one tile and one chunk of K, the loads go out after its loads, a few hundred cycles
// in, and take dma.latency + 3,841 cycles (10,251: over 1,500 more). Functional, on V5eGemm as it is: the same
// output bits with the loads in the background, their bytes in VMEM, HBM read exactly their bytes more.
TEST(GemmChip, BackgroundTailLoadsLetTheNextKernelStart) {
  V5eGemm t(983);
  const int64_t haddr = int64_t{1} << 30, bytes = int64_t{2} << 20;
  kernels::GemmChip none = t.g;
  none.vmem_base = 16 << 20;
  const int64_t vaddr = (kernels::gemm_chip_vmem_end(none, t.symbols) + 4095) / 4096 * 4096;
  const uint64_t local = isa::kLocalWindow;
  const std::map<std::string, uint64_t> addr = {{"a", local}, {"b", local + (2 << 20)}, {"c", local + (4 << 20)}};
  auto trailed = [&](const kernels::GemmChip& k) {
    isa::Program p = kernels::gemm_chip_kernel(k, t.symbols, addr);
    const auto end = static_cast<int64_t>(p.code.size());
    for (isa::Word& w : p.code)
      if (isa::decode(w).op == isa::Op::HALT) {
        isa::Instr jmp{.op = isa::Op::JMP};
        jmp.f[0] = end;
        w = isa::encode(jmp);
      }
    isa::Instr set{.op = isa::Op::SEMSET}, li{.op = isa::Op::LI}, delay{.op = isa::Op::DELAY};
    set.f[0] = 30, li.f[0] = 1, li.f[1] = 6000, delay.f[0] = 1;
    for (const isa::Instr& in : {set, li, delay}) p.code.push_back(isa::encode(in)), p.source.push_back("trailer");
    return static_cast<int64_t>(t.chip.run(p, timing_only()).stats.cycles);
  };
  kernels::GemmChip plain = none;
  plain.prefetch = {kernels::DmaLoad{vaddr, haddr, 1, bytes, 0, 0}};
  kernels::GemmChip bg = plain;
  bg.prefetch[0].bg = true, bg.prefetch[0].signal = 31;
  const int64_t alone = trailed(none), held = trailed(plain), free = trailed(bg);
  std::printf("300 x 300 x 700 on v5e in VMEM, then a 6,000-cycle kernel: %lld cycles; with 2 MiB of tail loads %lld "
              "plain, %lld in the background\n",
              static_cast<long long>(alone), static_cast<long long>(held), static_cast<long long>(free));
  EXPECT_EQ(free, alone);
  EXPECT_GT(held, free + 1500);
  kernels::GemmChip functional = t.g;
  functional.prefetch = {kernels::DmaLoad{t.past_own(), haddr, 1, bytes, 0, 0, 31, -1, true}};
  const std::vector<uint8_t> data = V5eGemm::pattern(static_cast<size_t>(bytes), 31, 7);
  t.expect_same_bits_reading_more(functional, haddr, data, static_cast<uint64_t>(bytes));
  t.expect_in_vmem(t.past_own(), data.data(), static_cast<size_t>(bytes));
}

// GemmChip::background: runs of bytes issued a piece after each chunk's loads (V5eGemm): the same output bits as
// without them, the runs in VMEM after the kernel, and HBM read exactly their bytes more; a run into the kernel's
// own VMEM, one of several rows, and one on two cores are refused.
TEST(GemmChip, BackgroundLoadsLandWhileTheKernelRuns) {
  V5eGemm t(982);
  const int64_t vaddr = t.past_own(), haddr = int64_t{1} << 30;
  // two runs: 200,000 bytes from haddr to vaddr, 70,000 from haddr + 300,000 to vaddr + 262,144
  const std::vector<uint8_t> bytes = V5eGemm::pattern(370000, 37, 11);
  kernels::GemmChip with = t.g;
  with.background = {kernels::DmaLoad{vaddr, haddr, 1, 200000, 0, 0},
                     kernels::DmaLoad{vaddr + 262144, haddr + 300000, 1, 70000, 0, 0}};
  t.expect_same_bits_reading_more(with, haddr, bytes, 270000);
  t.expect_in_vmem(vaddr, bytes.data(), 200000);
  t.expect_in_vmem(vaddr + 262144, bytes.data() + 300000, 70000);
  with.background = {kernels::DmaLoad{t.inside_own(), haddr, 1, 256, 0, 0}};
  V5eGemm::expect_refused(with, t.symbols);
  with.background = {kernels::DmaLoad{vaddr, haddr, 2, 256, 256, 256}};
  V5eGemm::expect_refused(with, t.symbols);
  with.background = {kernels::DmaLoad{vaddr, haddr, 1, 4096, 0, 0}};
  V5eGemm::expect_refused_on_two_cores(with);
}

// A tile's bias table loads with its last chunk, before that chunk's piece of background loads: a piece's HBM
// transfer ahead of it in the load queue (transfers complete in order) would hold back the table and with it the
// tile's drain and stores until the piece is in. 128 x 256 x 128 on v5e (one tile, one chunk) with 800 KB of
// background loads (about 1,500 cycles at HBM's rate, longer than the GEMM): the kernel ends when the loads do,
// with a bias as without one (timing-only; within 32 cycles), where a table behind the piece added the drain and
// the stores after it.
TEST(GemmChip, TheBiasTableLoadsBeforeTheBackgroundPiece) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip(cfg);
  kernels::GemmChip g{128, 256, 128, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
  const int64_t vaddr = (kernels::gemm_chip_vmem_end(g, symbols) + 8191) / 4096 * 4096;
  g.background = {kernels::DmaLoad{vaddr, int64_t{1} << 30, 1, 800000, 0, 0}};
  sim::RunOptions timing;
  timing.functional = false;
  const uint64_t plain = chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles;
  g.bias = true;
  const uint64_t with_bias = chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles;
  std::printf("128 x 256 x 128 on v5e with 800 KB of background loads: %llu cycles, %llu with a bias\n",
              static_cast<unsigned long long>(plain), static_cast<unsigned long long>(with_bias));
  EXPECT_GE(static_cast<double>(plain), 800000.0 / cfg.hbm_bytes_per_cycle());
  EXPECT_LE(with_bias, plain + 32);
}

// A tile's drain runs while the core's next tile's matrix work does: the kernel issues the core's previous tile's
// drain after this tile's loads and matrix instructions, the last after its loop. A drain issued right after its
// own tile's matrix work (more vector-unit instructions than its queue of 32 holds: with a residual, two syncs,
// vpu.acc and vpu.add a strip) held the next tile's loads back in the core's in-order issue until the vector unit
// had taken most of it, so that the matrix units waited for the drain they were to overlap. ResNet-50's 1 x 1
// convolutions on v5e with bias, residual and ReLU, a, r and c in VMEM as a compiled model's intermediates are, and
// b as its streamed weights are (timing only): 3136 x 256 x 64, whose matrix work is the longer (2,335 cycles;
// 2,501 with each drain after its own tile), within the matrix units' busy time, one tile's drain (the vector
// unit's busy time over the core's tiles) and 600 cycles; 3136 x 64 x 256 with a ReLU before the add as well (so
// that the residual's add is a pass of its own, vpu.add, not the drain's: below), whose drain is the longer (2,840;
// 3,194 so), within the vector unit's busy time, one tile's matrix work and 600 cycles. The 600: the first chunk's loads
// (the DMA latency and the transfer) and the array's latency (R + C - 2 = 254 cycles) before the first drain can
// start. And a functional run against the host's double-precision sums (within two bf16 roundings), and with
// background loads (the weight stream's: a tile's r then loads in its last chunk, ahead of the chunk's piece) the
// same bits as without.
TEST(GemmChip, ATilesDrainOverlapsTheNextTilesMatrixWork) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip(cfg);
  const uint64_t local = isa::kLocalWindow;
  const std::map<std::string, uint64_t> addr = {{"a", local},           {"r", local + (2 << 20)},
                                                 {"c", local + (4 << 20)}, {"b", local + (6 << 20)},
                                                 {"bias", 64 << 20}};
  auto conv = [&](int64_t m, int64_t k, int64_t n) {
    kernels::GemmChip g{m, k, n, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
    g.bias = g.residual = g.residual_relu = true;
    g.vmem_base = 16 << 20;
    return g;
  };
  for (const bool matrix_bound : {true, false}) {
    kernels::GemmChip g = matrix_bound ? conv(3136, 256, 64) : conv(3136, 64, 256);
    g.relu = !matrix_bound;  // a ReLU before the add too: the drain's vpu.acc and the residual's vpu.add, two passes
    const sim::RunResult r = chip.run(kernels::gemm_chip_kernel(g, symbols, addr), timing_only());
    const double vpu = static_cast<double>(r.stats.units[static_cast<size_t>(isa::Unit::Vpu)].busy_cycles);
    const double mxu = static_cast<double>(r.stats.units[static_cast<size_t>(isa::Unit::Mxu)].busy_cycles) / 4;
    const std::string source = kernels::gemm_chip_source(g, symbols);
    const size_t at = source.find(" tiles of ");
    ASSERT_NE(at, std::string::npos) << source.substr(0, 300);
    const double tiles = std::stod(source.substr(source.rfind(' ', at - 1) + 1));
    std::printf("%lld x %lld x %lld with bias,%s residual and ReLU on v5e: %llu cycles; the vector unit busy %.0f, "
                "a matrix unit %.0f, %.0f tiles\n",
                static_cast<long long>(g.m), static_cast<long long>(g.k), static_cast<long long>(g.n), g.relu ? " ReLU," : "",
                static_cast<unsigned long long>(r.stats.cycles), vpu, mxu, tiles);
    EXPECT_GE(tiles, 3);
    if (matrix_bound) {
      EXPECT_GT(mxu, vpu);
      EXPECT_LE(static_cast<double>(r.stats.cycles), mxu + vpu / tiles + 600);
    } else {
      EXPECT_GT(vpu, mxu);
      EXPECT_LE(static_cast<double>(r.stats.cycles), vpu + mxu / tiles + 600);
    }
  }
  // Without the ReLU before the add, the drain's vpu.acc adds the residual in its own pass (res): the vector unit
  // busy exactly half as long (each strip one instruction of rows x columns elements where it had two, vpu.acc and
  // vpu.add, of as many), and the kernel sooner
  {
    kernels::GemmChip two = conv(3136, 64, 256), one = two;
    two.relu = true;
    const sim::RunResult r2 = chip.run(kernels::gemm_chip_kernel(two, symbols, addr), timing_only());
    const sim::RunResult r1 = chip.run(kernels::gemm_chip_kernel(one, symbols, addr), timing_only());
    const uint64_t v2 = r2.stats.units[static_cast<size_t>(isa::Unit::Vpu)].busy_cycles;
    const uint64_t v1 = r1.stats.units[static_cast<size_t>(isa::Unit::Vpu)].busy_cycles;
    std::printf("3136 x 64 x 256, the residual in the drain's pass: %llu cycles, the vector unit busy %llu (a ReLU "
                "before the add: %llu, %llu)\n",
                static_cast<unsigned long long>(r1.stats.cycles), static_cast<unsigned long long>(v1),
                static_cast<unsigned long long>(r2.stats.cycles), static_cast<unsigned long long>(v2));
    EXPECT_EQ(2 * v1, v2);
    EXPECT_LT(r1.stats.cycles, r2.stats.cycles);
    EXPECT_NE(kernels::gemm_chip_source(one, symbols).find(", res"), std::string::npos);
    EXPECT_EQ(kernels::gemm_chip_source(two, symbols).find(", res"), std::string::npos);
  }
  // The same bits with background loads as without
  kernels::GemmChip g = conv(3136, 64, 256);
  std::mt19937 rng(17);
  std::uniform_real_distribution<float> d(-2, 2);
  auto bf16s = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) x = isa::bf16_from_f32(d(rng));
    return v;
  };
  const std::vector<uint16_t> a = bf16s(3136 * 64), res = bf16s(3136 * 256), b = bf16s(64 * 256);
  std::vector<float> bias(256);
  for (float& x : bias) x = d(rng);
  auto run = [&](const kernels::GemmChip& k) {
    const isa::Program p = kernels::gemm_chip_kernel(k, symbols, addr);
    chip.write_vmem(0, a.data(), a.size() * 2);
    chip.write_vmem(2 << 20, res.data(), res.size() * 2);
    chip.write_vmem(6 << 20, b.data(), b.size() * 2);
    chip.write_hbm(p.find("bias")->addr, bias.data(), bias.size() * 4);
    chip.write_vmem(4 << 20, std::vector<uint8_t>(3136 * 256 * 2, 0xa5).data(), 3136 * 256 * 2);
    chip.run(p);
    std::vector<uint16_t> c(3136 * 256);
    chip.read_vmem(4 << 20, c.data(), c.size() * 2);
    return c;
  };
  const std::vector<uint16_t> plain = run(g);
  // against the host: relu(bf16(bf16(a @ b + bias) + r)), within two bf16 roundings of the sum's magnitude
  size_t off = 0;
  for (size_t i = 0; i < 3136; ++i)
    for (size_t j = 0; j < 256; ++j) {
      double y = bias[j];
      for (size_t k = 0; k < 64; ++k)
        y += double(isa::f32_from_bf16(a[i * 64 + k])) * double(isa::f32_from_bf16(b[k * 256 + j]));
      const double rr = isa::f32_from_bf16(res[i * 256 + j]), want = std::max(0.0, y + rr);
      const double got = isa::f32_from_bf16(plain[i * 256 + j]);
      off += std::fabs(got - want) > (std::fabs(y) + std::fabs(rr)) * 0x1p-7 + 1e-6;
    }
  EXPECT_EQ(off, 0u);
  const int64_t bg = (kernels::gemm_chip_vmem_end(g, symbols) + 8191) / 4096 * 4096;
  g.background = {kernels::DmaLoad{bg, int64_t{1} << 30, 1, 1200000, 0, 0}};
  EXPECT_EQ(run(g), plain);
}

// rowwise::Program::background, as GemmChip's: x * 2 + 1 over [300, 256] f32 on v5e with two runs of bytes loaded
// a piece after each tile's loads: the same output, the runs in VMEM, HBM read exactly their bytes more; a run into
// the kernel's own VMEM, and loads on two cores, refused.
// GemmChip::quick_start on v5e (128 x 128 arrays): a core's first tile loads b first, its units' first weights
// load while a does, and its second chunk's loads go out before its first chunk's matrix work. Two kernels as a
// compiled model has them: a 3 x 3 convolution's taps read in place (14 x 14 x 256 -> 256, a and b in VMEM:
// ResNet-50's layer-3 convolution, its weights streamed), where the first product then waits for the longer of a's
// loads and the first weights' (128 cycles), not for both one after the other: fewer cycles by more than a
// quarter of a weight load (32; 46 measured, the two taps' loads less the instructions the order adds); and a
// memory-bound GEMM whose first chunk of b was loaded during the kernel before it (b_preloaded: 128 x 3072 x 768,
// BERT-base's FFN output after its FFN input), whose second chunk's HBM transfer then starts before the core has
// issued the first chunk's matrix work: by more than half a weight load (64; 106 measured). Each the same bits as
// without, and the host's double-precision sums within two bf16 roundings.
TEST(GemmChip, QuickStartSameBitsSooner) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip(cfg);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  const uint64_t local = isa::kLocalWindow;
  std::mt19937 rng(23);
  std::uniform_real_distribution<float> d(-2, 2);
  auto bf16s = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (uint16_t& x : v) x = isa::bf16_from_f32(d(rng));
    return v;
  };
  for (const bool taps : {true, false}) {
    // taps: 14 x 14 outputs over a padded 16 x 16 input (the virtual rows M = 14 x 16), K = 9 x 256
    const int64_t cin = 256, wq = 16, m = taps ? 14 * wq : 128, k = taps ? 9 * cin : 3072, n = taps ? 256 : 768;
    kernels::GemmChip g{m, k, n, DType::BF16, DType::BF16, 1, 4, kernels::GemmSchedule::Tiles};
    g.bias = g.b_tiled = true;
    g.vmem_base = 16 << 20;
    const int64_t a_rows = taps ? 18 * wq : m;  // (the taps read two rows past the last output row's)
    if (taps) g.taps = kernels::ConvTaps{cin, a_rows, 3, 1, 1, 1, 1, wq, a_rows};
    if (!taps) g.b_preloaded = 1;  // (its first chunk of b loaded during the kernel before it: gemm_chip_first_b)
    const std::map<std::string, uint64_t> addr = taps ? std::map<std::string, uint64_t>{{"a", local}, {"b", local + (4 << 20)}, {"c", local + (12 << 20)}, {"bias", 64 << 20}}
                                                      : std::map<std::string, uint64_t>{{"a", local}, {"b", 32 << 20}, {"c", local + (12 << 20)}, {"bias", 64 << 20}};
    const std::vector<uint16_t> a = bf16s(static_cast<size_t>(a_rows * (taps ? cin : k))), b = bf16s(static_cast<size_t>(k * n));
    std::vector<float> bias(static_cast<size_t>(n));
    for (float& x : bias) x = d(rng);
    // b tiled as [cdiv(K, R), cdiv(N, C), R, C]
    const int64_t KT = (k + R - 1) / R, NT = (n + C - 1) / C;
    std::vector<uint16_t> tiled(static_cast<size_t>(KT * NT * R * C), 0);
    for (int64_t i = 0; i < k; ++i)
      for (int64_t j = 0; j < n; ++j)
        tiled[static_cast<size_t>(((i / R * NT + j / C) * R + i % R) * C + j % C)] = b[static_cast<size_t>(i * n + j)];
    uint64_t cycles[2] = {0, 0};
    std::vector<uint16_t> out[2];
    for (const bool quick : {false, true}) {
      g.quick_start = quick;
      const isa::Program p = kernels::gemm_chip_kernel(g, symbols, addr);
      chip.write_vmem(0, a.data(), a.size() * 2);
      if (taps)
        chip.write_vmem(4 << 20, tiled.data(), tiled.size() * 2);
      else
        chip.write_hbm(32 << 20, tiled.data(), tiled.size() * 2);
      chip.write_hbm(64 << 20, bias.data(), bias.size() * 4);
      chip.write_vmem(12 << 20, std::vector<uint8_t>(static_cast<size_t>(m * n * 2), 0xa5).data(), static_cast<size_t>(m * n * 2));
      if (!taps) chip.run(kernels::gemm_chip_first_b(g, symbols, addr));
      cycles[quick] = chip.run(p).stats.cycles;
      out[quick].resize(static_cast<size_t>(m * n));
      chip.read_vmem(12 << 20, out[quick].data(), out[quick].size() * 2);
    }
    std::printf("%s %lld x %lld x %lld on v5e: %llu cycles with quick_start, %llu without\n",
                taps ? "3 x 3 taps" : "GEMM, b in HBM, its first chunk preloaded,", static_cast<long long>(m), static_cast<long long>(k),
                static_cast<long long>(n), static_cast<unsigned long long>(cycles[1]),
                static_cast<unsigned long long>(cycles[0]));
    EXPECT_EQ(out[1], out[0]);
    EXPECT_LT(cycles[1] + (taps ? R / 4 : R / 2), cycles[0]);
    // against the host: bf16(a @ b + bias) (row r's tap t reads input row r + (t / 3) * wq + t % 3)
    size_t off = 0;
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double y = bias[static_cast<size_t>(j)], mag = std::fabs(y);
        for (int64_t kk = 0; kk < k; ++kk) {
          const int64_t ai = taps ? (i + kk / cin / 3 * wq + kk / cin % 3) * cin + kk % cin : i * k + kk;
          const double t = double(isa::f32_from_bf16(a[static_cast<size_t>(ai)])) *
                           double(isa::f32_from_bf16(b[static_cast<size_t>(kk * n + j)]));
          y += t, mag += std::fabs(t);
        }
        off += std::fabs(double(isa::f32_from_bf16(out[1][static_cast<size_t>(i * n + j)])) - y) > mag * 0x1p-7 + 1e-6;
      }
    EXPECT_EQ(off, 0u) << (taps ? "taps" : "GEMM");
  }
}

TEST(Rowwise, BackgroundLoadsLandWhileTheKernelRuns) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  sim::Chip chip(cfg);
  namespace rw = kernels::rowwise;
  rw::Program p;
  p.rows = 300, p.cols = 256;
  const uint64_t x_addr = 0, y_addr = 1 << 20;
  p.inputs.push_back({x_addr, DType::F32});
  const int x = p.input(0);
  p.outputs.push_back({p.binary(rw::Op::Add, p.binary(rw::Op::Mul, x, p.constant(2)), p.constant(1)), y_addr, DType::F32});
  std::vector<float> xs(300 * 256);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 97) * 0.25f - 7;
  const int64_t haddr = int64_t{1} << 30, vaddr = int64_t{64} << 20;
  std::vector<uint8_t> bytes(150000);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 13 + 5);
  auto run = [&](const rw::Program& prog) {
    chip.write_hbm(x_addr, xs.data(), xs.size() * 4);
    chip.write_hbm(static_cast<uint64_t>(haddr), bytes.data(), bytes.size());
    const sim::RunResult res = chip.run(rw::kernel(prog, symbols));
    std::vector<float> y(xs.size());
    chip.read_hbm(y_addr, y.data(), y.size() * 4);
    return std::make_pair(y, res.stats.hbm_bytes_read);
  };
  const auto [plain, plain_read] = run(p);
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(plain[i], xs[i] * 2 + 1) << i;
  rw::Program with = p;
  with.background = {kernels::DmaLoad{vaddr, haddr, 1, 100000, 0, 0},
                     kernels::DmaLoad{vaddr + 131072, haddr + 100000, 1, 50000, 0, 0}};
  const auto [got, with_read] = run(with);
  EXPECT_EQ(got, plain);
  EXPECT_EQ(with_read, plain_read + 150000);
  std::vector<uint8_t> first(100000), second(50000);
  chip.read_vmem(static_cast<uint64_t>(vaddr), first.data(), first.size());
  chip.read_vmem(static_cast<uint64_t>(vaddr + 131072), second.data(), second.size());
  EXPECT_TRUE(std::equal(first.begin(), first.end(), bytes.begin()));
  EXPECT_TRUE(std::equal(second.begin(), second.end(), bytes.begin() + 100000));
  with.background = {kernels::DmaLoad{64, haddr, 1, 256, 0, 0}};
  EXPECT_THROW(rw::kernel(with, symbols), std::invalid_argument);
  const sim::ChipConfig v4 = sim::load_config("v4");
  with.background = {kernels::DmaLoad{vaddr, haddr, 1, 4096, 0, 0}};
  with.cores = 2;
  EXPECT_THROW(rw::kernel(with, preset_symbols(v4)), std::invalid_argument);
}

TEST(GemmChip, ResidualOnFourUnitsMatchesTheGemmThenTheAdd) { residual_cases(DType::BF16, 962, true, 4); }
TEST(GemmChip, GeluOnFourUnitsMatchesTheGemmThenTheRowwiseKernel) {
  act_cases(963, kernels::rowwise::Op::Gelu, false, 4);
}

// Where the estimates of two slot counts tie (it counts the slots only through a transfer's latency over the slots
// but one, which a fast HBM makes small), the plan takes the most slots, so that more chunks load ahead of the
// matrix work. GPT-2's MLP output, 128 x 3072 x 768, on v4 with 4 times its HBM bandwidth (4800 GB/s): the plan
// took 2 slots when the loop went up from 2 and ran in 5,785 cycles, against 4,504 on the same chip at 2400 GB/s
// (more bandwidth, slower); with 4 slots, 4,123 (measured). Asserted: at least 3 slots, and faster than the plan
// held to 2 (GemmChip::slots) by a fifth.
TEST(GemmChip, MoreSlotsWhereTheEstimatesTie) {
  const sim::ChipConfig cfg = sim::load_config("v4", {"hbm.bandwidth_gbs=4800"});
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g{128, 3072, 768, DType::BF16, DType::BF16, 0, 0, kernels::GemmSchedule::Tiles};
  const std::string src = kernels::gemm_chip_source(g, symbols);
  const size_t at = src.find(" slots)");
  ASSERT_NE(at, std::string::npos) << src.substr(0, 300);
  EXPECT_GE(src[at - 1], '3') << src.substr(0, 300);
  sim::Chip chip(cfg);
  const uint64_t chosen = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles;
  g.slots = 2;
  const uint64_t two = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles;
  EXPECT_LT(static_cast<double>(chosen), 0.8 * static_cast<double>(two)) << chosen << " against " << two;
}

// A tile of more strips than the drain's 8 C buffers reuses each buffer only once its store is done, and that
// store waits behind the operand loads queued before it (HBM serves transfers in order): the plan leaves such
// tiles out. GPT-2's vocabulary projection (128 x 768 x 50257, f32 logits) on v5e, 4 units of 128 columns: tiles
// of 2 strips per unit (8 in all), and the run is memory-bound, within 5% of the HBM bytes it moves at HBM's
// bytes per cycle (measured 207,955 cycles, 0.8% over). With tiles of 4 strips per unit it took 271,337 cycles,
// 37% over the bytes it moved then.
TEST(GemmChip, WideTilesHaveNoMoreStripsThanTheDrainsBuffers) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  ASSERT_EQ(symbols.at("MXUS"), 4);
  const kernels::GemmChip g{128, 768, 50257, DType::BF16, DType::F32, 1, 4, kernels::GemmSchedule::Tiles};
  EXPECT_NE(kernels::gemm_chip_source(g, symbols).find("(2 strips per unit"), std::string::npos);
  sim::Chip chip(cfg);
  const sim::RunOptions timing = timing_only();
  const sim::RunStats st = chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats;
  const double moved = static_cast<double>(st.hbm_bytes_read + st.hbm_bytes_written);
  EXPECT_LE(static_cast<double>(st.cycles), 1.05 * moved / cfg.hbm_bytes_per_cycle())
      << st.cycles << " cycles for " << moved << " bytes";
}

// A core's last tile loads the last fold of its last chunk as a chunk of its own (GemmChip::split_last_fold): the
// rest of that chunk arrives sooner and its matrix work overlaps the last fold's load. v6e, 128 x 3072 x 768
// (BERT-base's second MLP layer): one tile, K in chunks of 1536 (6 folds of 256 rows, each 256 cycles of weight
// load for 128 rows of a). Faster with it (8,566 cycles against 9,027 measured).
TEST(GemmChip, LastTilesLastFoldAloneShortensTheTail) {
  const sim::ChipConfig cfg = sim::load_config("v6e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g{128, 3072, 768, DType::BF16, DType::F32, 1, 4, kernels::GemmSchedule::Tiles};
  g.min_chunk_folds = 4;  // (with 2, the plan takes chunks of 512, whose last fold is not alone)
  const std::string src = kernels::gemm_chip_source(g, symbols);
  ASSERT_NE(src.find("K in chunks of 1536"), std::string::npos) << src.substr(0, 300);
  EXPECT_NE(src.find(kLastFoldAlone), std::string::npos);
  sim::Chip chip(cfg);
  const sim::RunOptions timing = timing_only();
  const uint64_t split = chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles;
  g.split_last_fold = false;
  EXPECT_EQ(kernels::gemm_chip_source(g, symbols).find(kLastFoldAlone), std::string::npos);
  const uint64_t whole = chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles;
  EXPECT_LT(split, whole);
  std::printf("last fold alone %llu cycles, whole last chunk %llu\n", static_cast<unsigned long long>(split),
              static_cast<unsigned long long>(whole));
}

// A kernel variant gives the same bits: g, then g as `vary` changes it, then one unit's strips schedule, on random
// bf16 inputs; `what` and `other` name g and the variant in messages.
void same_bits_as_variant(Machines& m, kernels::GemmChip g, const std::function<void(kernels::GemmChip&)>& vary,
                          const std::string& what, const std::string& other, uint64_t seed) {
  Random r(seed);
  std::vector<double> a = r.values(DType::BF16, g.m * g.k, -3, 3), b = r.values(DType::BF16, g.k * g.n, -3, 3);
  const std::vector<double> first = run_gemm(m, g, a, b);
  vary(g);
  const std::vector<double> second = run_gemm(m, g, a, b);
  const std::vector<double> unit =
      run_gemm(m, {g.m, g.k, g.n, DType::BF16, g.out, 1, 1, kernels::GemmSchedule::Strips}, a, b);
  expect_all(what + " vs " + other + ", bit for bit", first.size(), [&](size_t i) { return same(first[i], second[i]); },
             [&](size_t i) { return what + " " + num(first[i]) + ", " + other + " " + num(second[i]); });
  expect_all(what + " vs one unit, bit for bit", first.size(), [&](size_t i) { return same(first[i], unit[i]); },
             [&](size_t i) { return what + " " + num(first[i]) + ", one unit " + num(unit[i]); });
}

// The same split gives the same bits: 2 cores x 3 units of 8 x 8, 160 x 640 x 24 (tiles of 32 x 24, K in chunks
// of 40: a core's last tile loads 32 rows of K, then the last 8), with and without it, against one unit.
TEST(GemmChip, LastTilesLastFoldAloneSameBits) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  kernels::GemmChip g{160, 640, 24, DType::BF16, DType::F32, 2, 3, kernels::GemmSchedule::Tiles};
  g.min_chunk_folds = 4;
  ASSERT_NE(kernels::gemm_chip_source(g, symbols).find(kLastFoldAlone), std::string::npos)
      << kernels::gemm_chip_source(g, symbols).substr(0, 300);
  same_bits_as_variant(*m, g, [](kernels::GemmChip& v) { v.split_last_fold = false; }, "last fold alone",
                       "whole last chunk", 961);
}

// Tiles one at a time (overlap_tiles = false, as tpusim validate runs a GPU's GEMM) give the same bits: 2 cores x
// 3 units of 8 x 8, transposed b, several tiles per core, against the overlapped kernel and one unit.
TEST(GemmChip, TilesOneAtATimeSameBits) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  kernels::GemmChip g{160, 40, 72, DType::BF16, DType::BF16, 2, 3, kernels::GemmSchedule::Tiles};
  g.trans_b = true;
  g.overlap_tiles = false;
  ASSERT_NE(kernels::gemm_chip_source(g, symbols).find(kOneAtATime), std::string::npos)
      << kernels::gemm_chip_source(g, symbols).substr(0, 300);
  kernels::GemmChip overlapped = g;
  overlapped.overlap_tiles = true;
  EXPECT_EQ(kernels::gemm_chip_source(overlapped, symbols).find(kOneAtATime), std::string::npos);
  same_bits_as_variant(*m, g, [](kernels::GemmChip& v) { v.overlap_tiles = true; }, "one at a time", "overlapped",
                       962);
}

// Multicast (pairs of cores load their shared operand with dma.ld mcast) gives the same bits, sharing b's columns
// (160 x 72 x 40: ten tiles of 16 rows in one column, dealt column by column; transposed and plain b) and a's
// rows (96 x 64 x 48: two rows of two tiles, K in two chunks), against the kernel without it and one unit.
TEST(GemmChip, MulticastSameBits) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  struct Shape {
    int64_t m, k, n;
    bool trans_b;
    const char* shares;
  };
  for (const Shape& sh : {Shape{160, 72, 40, true, "b's columns"}, Shape{160, 72, 40, false, "b's columns"},
                          Shape{96, 64, 48, true, "a's rows"}}) {
    kernels::GemmChip g{sh.m, sh.k, sh.n, DType::BF16, DType::BF16, 2, 3, kernels::GemmSchedule::Tiles};
    g.trans_b = sh.trans_b;
    g.overlap_tiles = false;
    g.multicast = true;
    const std::string src = kernels::gemm_chip_source(g, symbols);
    ASSERT_NE(src.find(std::string("pairs of cores multicast ") + sh.shares), std::string::npos) << src.substr(0, 400);
    ASSERT_NE(src.find(", mcast"), std::string::npos);
    same_bits_as_variant(*m, g, [](kernels::GemmChip& v) { v.multicast = false; }, "multicast", "without",
                         963 + static_cast<uint64_t>(sh.m));
  }
}

// On h200-like, 1280 x 6144 x 768 as the validator runs it: 120 tiles of 64 x 128 in 20 rows and 6 columns, pairs
// sharing b's columns. Every tile loads its 64 rows of a and its 128 columns of b, all K of each: 6 x 1280 x 6144
// and 20 x 768 x 6144 elements, but each pair's b once: the far side (HBM fills and L2 hits) reads exactly a's
// bytes and half of b's. The kernel is faster than without multicast (which the plan then shapes otherwise).
TEST(GemmChip, MulticastReadsTheSharedOperandOncePerPair) {
  const sim::ChipConfig cfg = sim::load_config("h200-like");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g = linear(1280, 6144, 768);
  g.overlap_tiles = false;
  g.multicast = true;
  const std::string src = kernels::gemm_chip_source(g, symbols);
  ASSERT_NE(src.find("120 tiles of 64 x 128"), std::string::npos) << src.substr(0, 400);
  ASSERT_NE(src.find("pairs of cores multicast b's columns"), std::string::npos) << src.substr(0, 400);
  sim::Chip chip(cfg);
  const sim::RunStats with = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats;
  const uint64_t a_bytes = 6ull * 1280 * 6144 * 2, b_bytes = 20ull * 768 * 6144 * 2;
  EXPECT_EQ(with.hbm_bytes_read + with.shared_bytes_read, a_bytes + b_bytes / 2);
  g.multicast = false;
  const sim::RunStats without = chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats;
  EXPECT_LT(with.cycles, without.cycles);
  std::printf("multicast %llu cycles, without %llu\n", static_cast<unsigned long long>(with.cycles),
              static_cast<unsigned long long>(without.cycles));
}

// One core of h200-like, 1024 x 64 x 1024 with transposed b: 16 tiles of 256 x 256, one after the other. One at a
// time, each tile after the first waits for the one before it to be stored (at least a store's latency after its
// last store is issued: the L2's, shared.latency, since it writes back) and then for its own first load
// (dma.latency) before its matrix work, where overlapped tiles hide both: at least 15 x (dma.latency +
// shared.latency) more cycles. The plan's estimate counts this (its drain, its stores and their latency,
// STORE_LATENCY): within 5% of the simulated cycles overlapped, 7% one at a time (measured: -5.9%; the posted HBM
// writes that the next tile's loads find on the channels are not in it).
TEST(GemmChip, TilesOneAtATimePayEachTilesLatencies) {
  const sim::ChipConfig cfg = sim::load_config("h200-like");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g{1024, 64, 1024, DType::BF16, DType::BF16, 1, 1, kernels::GemmSchedule::Tiles};
  g.trans_b = true;
  ASSERT_NE(kernels::gemm_chip_source(g, symbols).find("16 tiles of 256 x 256"), std::string::npos)
      << kernels::gemm_chip_source(g, symbols).substr(0, 300);
  sim::Chip chip(cfg);
  const sim::RunOptions timing = timing_only();
  const auto overlapped = static_cast<double>(chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles);
  const double overlapped_estimate = kernels::gemm_chip_estimate(g, symbols);
  g.overlap_tiles = false;
  const auto serial = static_cast<double>(chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles);
  const double serial_estimate = kernels::gemm_chip_estimate(g, symbols);
  ASSERT_EQ(symbols.at("STORE_LATENCY"), cfg.shared.latency);
  EXPECT_GE(serial - overlapped, 15.0 * static_cast<double>(cfg.dma.latency + cfg.shared.latency));
  EXPECT_NEAR(overlapped_estimate / overlapped, 1.0, 0.05);
  EXPECT_NEAR(serial_estimate / serial, 1.0, 0.07);
  std::printf("overlapped %.0f cycles (estimate %.0f), one at a time %.0f (estimate %.0f)\n", overlapped,
              overlapped_estimate, serial, serial_estimate);
}

// A tile's operands cross VMEM's ports twice (the loads write them, the matrix unit reads them), and tiles of few
// rows reuse each weight little: on h200-like (128 bytes per cycle per core) 193 x 3072 x 512 in tiles of 15 or
// 28 rows, K whole, is bound by the ports, not by the L2's bandwidth. The plan counts the ports: it splits K
// (taller tiles, each weight read by more rows) and that kernel is faster than K whole; K whole's estimate is
// within 20% of its simulated cycles (without the ports it was half of them: 10,194 against 19,652).
TEST(GemmChip, PlanCountsTheOperandsThroughVmemPorts) {
  const sim::ChipConfig cfg = sim::load_config("h200-like");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g = linear(193, 3072, 512);
  g.overlap_tiles = false;
  g.narrow_strips = false;  // (strips of C columns: the ports' count is what is checked)
  const std::string src = kernels::gemm_chip_source(g, symbols);
  ASSERT_NE(src.find("splits of"), std::string::npos) << src.substr(0, 300);
  sim::Chip chip(cfg);
  const sim::RunOptions timing = timing_only();
  const auto chosen = static_cast<double>(chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles);
  g.split_k = 1;
  const auto whole = static_cast<double>(chip.run(kernels::gemm_chip_kernel(g, symbols), timing).stats.cycles);
  const double whole_estimate = kernels::gemm_chip_estimate(g, symbols);
  EXPECT_LT(chosen, whole);
  EXPECT_NEAR(whole_estimate / whole, 1.0, 0.2);
  std::printf("split K %.0f cycles, K whole %.0f (estimate %.0f)\n", chosen, whole, whole_estimate);
}

// Split K whose reduction is a kernel of its own (reduction_launch_cycles, as tpusim validate models cuBLAS): on
// h200-like, 13 x 3072 x 32 (one output tile, K long) splits K when the reduction costs no launch; the launch is
// added to every split plan's estimate, so a forced split's estimate grows by exactly those cycles (the same plan
// wins among the split ones), and with a launch longer than the whole kernel the plan keeps K whole.
TEST(GemmChip, ReductionLaunchCountsAgainstSplitK) {
  const sim::ChipConfig cfg = sim::load_config("h200-like");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g = linear(13, 3072, 32);
  g.narrow_strips = false;  // (one tile of 32 columns: K's splits are what is checked)
  EXPECT_GT(kernels::gemm_chip_splits(g, symbols), 1);
  g.split_k = 4;
  const double free_reduction = kernels::gemm_chip_estimate(g, symbols);
  g.reduction_launch_cycles = 2699;
  EXPECT_DOUBLE_EQ(kernels::gemm_chip_estimate(g, symbols) - free_reduction, 2699.0);
  EXPECT_EQ(kernels::gemm_chip_splits(g, symbols), 4);
  g.split_k = 0;
  g.reduction_launch_cycles = 1'000'000;
  EXPECT_EQ(kernels::gemm_chip_splits(g, symbols), 1);
  g.reduction_launch_cycles = -1;
  EXPECT_THROW(kernels::gemm_chip_splits(g, symbols), std::invalid_argument);
}

// Six strips of output (N = 6 C) on 2 cores of 4 units: every unit of a core would make one tile of 4 strips
// and one of 2, or one tile of all 6 (S = 2) on one core; 3 units per core make two tiles of 3 strips, one per
// core. The plan takes 3 (its source says so), gives the bits of one unit, and runs faster than the same
// product on one core, which can only use all 4 units (before the plan chose among unit counts, the 2-core run
// was that 1-core run: one tile on one core).
// Narrow strips (GemmChip::narrow_strips): GEMMs of few rows and output columns on 8 cores of 3 units of 8 x 8
// whose VMEM ports take 4 bytes a cycle (so that one core cannot stream the weights alone) take tiles of 4
// columns, half a unit's: more tiles over more cores than strips of 8 would make. Their plan says so, their
// results are those of the plan of whole strips bit for bit, with b as [K, N] and as [N, K] (for int8, the host's
// exact products too), and each narrow kernel is faster than the whole-strip one.
TEST(GemmChip, NarrowStripsSpreadFewColumnsOverMoreCoresSameBits) {
  std::vector<std::string> sets = chip_sets();
  sets.insert(sets.end(), {"chip.cores=8", "vmem.banks=2", "vmem.port_bytes_per_cycle=2"});
  TPUSIM_MACHINES(m, sets);
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  Random r(919);
  for (const DType in : {DType::I8, DType::BF16})
    for (const Shape& s : std::vector<Shape>{{1, 4000, 24}, {2, 3000, 32}})
      for (const bool trans_b : {false, true}) {
        const DType out = in == DType::I8 ? DType::I32 : DType::F32;
        const std::vector<double> a = r.values(in, s.m * s.k, -3, 3), b = r.values(in, s.k * s.n, -3, 3);
        kernels::GemmChip g{s.m, s.k, s.n, in, out, 8, 3, kernels::GemmSchedule::Tiles, trans_b};
        const std::string what = "M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" +
                                 std::to_string(s.n) + (trans_b ? " b [N, K]" : " b [K, N]");
        const std::string src = kernels::gemm_chip_source(g, symbols);
        EXPECT_NE(src.find("strips of 4 columns"), std::string::npos) << what << ": " << src.substr(0, 300);
        kernels::GemmChip wide = g;
        wide.narrow_strips = false;
        const std::vector<double> narrow = run_gemm(*m, g, a, b), whole = run_gemm(*m, wide, a, b);
        expect_all(what + ": narrow strips vs whole strips, bit for bit", narrow.size(),
                   [&](size_t i) { return same(narrow[i], whole[i]); },
                   [&](size_t i) { return "narrow " + num(narrow[i]) + ", whole " + num(whole[i]); });
        if (in == DType::I8)
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double exact = 0;
              for (int64_t l = 0; l < s.k; ++l) exact += a[i * s.k + l] * b[l * s.n + j];
              EXPECT_EQ(narrow[i * s.n + j], exact) << what << " at (" << i << ", " << j << ")";
            }
        const uint64_t narrow_cycles = m->chip->run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles;
        const uint64_t whole_cycles = m->chip->run(kernels::gemm_chip_kernel(wide, symbols), timing_only()).stats.cycles;
        EXPECT_LT(narrow_cycles, whole_cycles) << what;
        std::printf("%s %s: narrow %llu cycles, whole strips %llu\n", what.c_str(), in == DType::I8 ? "i8" : "bf16",
                    static_cast<unsigned long long>(narrow_cycles), static_cast<unsigned long long>(whole_cycles));
      }
}

TEST(GemmChip, FewerUnitsPerCoreSpreadNarrowTilesOverTheCores) {
  std::vector<std::string> sets = chip_sets();
  sets.push_back("core.mxus=4");
  TPUSIM_MACHINES(m, sets);
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t C = symbols.at("MXU_COLS"), R = symbols.at("MXU_ROWS");
  Random r(951);
  const Shape s{2 * R, 24 * R, 6 * C};
  const kernels::GemmChip g{s.m, s.k, s.n, DType::BF16, DType::F32, 2, 4, kernels::GemmSchedule::Tiles};
  EXPECT_NE(kernels::gemm_chip_source(g, symbols).find("on 2 cores x 3 matrix units: 2 tiles"), std::string::npos)
      << kernels::gemm_chip_source(g, symbols).substr(0, 300);
  std::vector<double> a = r.values(DType::BF16, s.m * s.k, -3, 3), b = r.values(DType::BF16, s.k * s.n, -3, 3);
  const std::vector<double> whole = run_gemm(*m, g, a, b);
  const uint64_t two_cores = m->chip->run(kernels::gemm_chip_kernel(g, symbols)).stats.cycles;
  kernels::GemmChip one_core = g;
  one_core.cores = 1;
  const uint64_t one = m->chip->run(kernels::gemm_chip_kernel(one_core, symbols)).stats.cycles;
  EXPECT_LT(two_cores, one);
  const std::vector<double> unit = run_gemm(*m, {s.m, s.k, s.n, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Strips}, a, b);
  expect_all("2 cores x 3 units vs 1 x 1, bit for bit", whole.size(), [&](size_t i) { return same(whole[i], unit[i]); },
             [&](size_t i) { return "whole chip " + num(whole[i]) + ", one unit " + num(unit[i]); });
}

// The output stored group by group (group_n, gemm.s's GROUP_N): c as [N / G, M, G], each group the columns
// [g*G, (g+1)*G) of the plain [M, N] result, bit for bit, from gemm_chip on 2 cores x 3 units (strips and row
// blocks alike) and from gemm.s on one unit.
TEST(GemmChip, GroupedOutputHoldsTheColumnGroupsOneAfterTheOther) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t C = symbols.at("MXU_COLS");
  Random r(961);
  struct Case {
    int64_t m, k, n, group;
  };
  for (const Case& c : std::vector<Case>{{40, 17, 6 * C, 2 * C}, {70, 50, 3 * C, C}, {9, 20, 4 * C, 2 * C}}) {
    const std::string what = "M=" + std::to_string(c.m) + " K=" + std::to_string(c.k) + " N=" + std::to_string(c.n) +
                             " groups of " + std::to_string(c.group);
    std::vector<double> a = r.values(DType::BF16, c.m * c.k, -3, 3), b = r.values(DType::BF16, c.k * c.n, -3, 3);
    kernels::GemmChip g{c.m, c.k, c.n, DType::BF16, DType::F32, 2, 3, kernels::GemmSchedule::Tiles};
    const std::vector<double> plain = run_gemm(*m, g, a, b);
    g.group_n = c.group;
    const std::vector<double> grouped = run_gemm(*m, g, a, b);
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", c.m}, {"K", c.k}, {"N", c.n}, {"IN_DT", static_cast<int64_t>(DType::BF16)},
                    {"OUT_DT", static_cast<int64_t>(DType::F32)}, {"GROUP_N", c.group}});
    const isa::Program p = kernels::assemble("gemm.s", defines, {}, 0);
    m->write(p.find("a")->addr, a, DType::BF16);
    m->write(p.find("b")->addr, b, DType::BF16);
    const isa::TensorDecl* cd = p.find("c");
    m->write(cd->addr, std::vector<uint8_t>(cd->bytes(), 0xa5));
    m->run(p);
    const std::vector<double> one = m->read_sim(cd->addr, static_cast<size_t>(cd->elements()), DType::F32);
    auto at = [&](size_t i) {  // element i of the grouped layout -> the plain result's element
      const int64_t grp = static_cast<int64_t>(i) / (c.m * c.group), row = static_cast<int64_t>(i) / c.group % c.m;
      return plain[static_cast<size_t>(row * c.n + grp * c.group + static_cast<int64_t>(i) % c.group)];
    };
    ASSERT_EQ(grouped.size(), plain.size()) << what;
    expect_all(what + ": gemm_chip grouped vs plain, bit for bit", grouped.size(), [&](size_t i) { return same(grouped[i], at(i)); },
               [&](size_t i) { return "grouped " + num(grouped[i]) + ", plain " + num(at(i)); });
    expect_all(what + ": gemm.s grouped vs plain, bit for bit", one.size(), [&](size_t i) { return same(one[i], at(i)); },
               [&](size_t i) { return "gemm.s " + num(one[i]) + ", plain " + num(at(i)); });
  }
}

TEST(GemmChip, Bf16EpilogueAndTiledWeightsMatchGemmS) { epilogue_cases(DType::BF16, 913, true, 1.0f); }
TEST(GemmChip, Bf16ScaledMatchesGemmS) { epilogue_cases(DType::BF16, 914, false, 0.375f); }
TEST(GemmChip, Int8EpilogueMatchesGemmS) { epilogue_cases(DType::I8, 915, true, 0.0625f); }

// The implicit im2col (ConvTaps, gemm.s's TAP_*): a convolution's padded input, split into phases on the host as
// the compiler lays it out, read tap by tap by gemm_chip (2 cores x 3 units of 8x8) and by gemm.s on one unit,
// against both kernels on the im2col matrix the host builds from the convolution's definition (output (n, oh,
// ow), tap (i, j), channel c reads padded pixel (oh*sh + i*dh, ow*sw + j*dw)), bit for bit on every output row.
// Channel counts of 4 (two taps per fold of 8) and 12 (taps across folds) and strides, dilations and batches that
// give several phases and images. The same in the compiler's layout (ops_conv.cpp, window_phases): sh phases of
// rows only, each [n, Hq, Wq * sw], read at a pitch of sw rows (ConvTaps::pitch, TAP_PITCH).
struct ConvCase {
  int64_t n, h, w, cin, oc, k, stride, dil, pad;
};

void conv_taps_cases(DType in, uint64_t seed) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random r(seed);
  const DType acc = in == DType::I8 ? DType::I32 : DType::F32;
  const DType out = in == DType::I8 ? DType::I32 : DType::BF16;
  for (const ConvCase& cc : std::vector<ConvCase>{{2, 5, 6, 4, 9, 3, 1, 1, 1},
                                                  {2, 7, 9, 12, 10, 3, 2, 1, 1},
                                                  {1, 9, 8, 4, 17, 3, 1, 2, 2},
                                                  {3, 9, 7, 12, 6, 5, 2, 1, 2},
                                                  {1, 6, 6, 12, 8, 1, 2, 1, 0}}) {
    const int64_t OH = (cc.h + 2 * cc.pad - cc.dil * (cc.k - 1) - 1) / cc.stride + 1;
    const int64_t OW = (cc.w + 2 * cc.pad - cc.dil * (cc.k - 1) - 1) / cc.stride + 1;
    const int64_t s = cc.stride, span = (cc.k - 1) * cc.dil + 1;
    const int64_t Hq = ((OH - 1) * s + span + s - 1) / s, Wq = ((OW - 1) * s + span + s - 1) / s;
    const int64_t phases = s * s, image = Hq * Wq, M = (cc.n - 1) * image + OH * Wq, K = cc.k * cc.k * cc.cin;
    kernels::ConvTaps x{cc.cin, 0, cc.k, s, s, cc.dil, cc.dil, Wq, cc.n * image};
    int64_t reach = phases * cc.n * image;
    for (int64_t t = 0; t < cc.k * cc.k; ++t) reach = std::max(reach, M + kernels::tap_row_offset(x, t));
    x.rows = reach;
    // the input, zero-padded (pad before, whatever the phases need after), then split into phases
    std::vector<double> img = r.values(in, cc.n * cc.h * cc.w * cc.cin, -3, 3);
    auto pixel = [&](int64_t n, int64_t y, int64_t xx, int64_t c) {  // padded coordinates
      y -= cc.pad, xx -= cc.pad;
      return y < 0 || y >= cc.h || xx < 0 || xx >= cc.w ? 0.0 : img[((n * cc.h + y) * cc.w + xx) * cc.cin + c];
    };
    std::vector<double> a(static_cast<size_t>(x.rows * cc.cin), 0.0);
    for (int64_t pa = 0; pa < s; ++pa)
      for (int64_t pb = 0; pb < s; ++pb)
        for (int64_t n = 0; n < cc.n; ++n)
          for (int64_t q = 0; q < Hq; ++q)
            for (int64_t p = 0; p < Wq; ++p)
              for (int64_t c = 0; c < cc.cin; ++c)
                a[((((pa * s + pb) * cc.n + n) * Hq + q) * Wq + p) * cc.cin + c] = pixel(n, q * s + pa, p * s + pb, c);
    std::vector<double> col(static_cast<size_t>(M * K), 0.0);  // rows that are no output stay 0
    for (int64_t n = 0; n < cc.n; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t i = 0; i < cc.k; ++i)
            for (int64_t j = 0; j < cc.k; ++j)
              for (int64_t c = 0; c < cc.cin; ++c)
                col[(n * image + oh * Wq + ow) * K + (i * cc.k + j) * cc.cin + c] =
                    pixel(n, oh * s + i * cc.dil, ow * s + j * cc.dil, c);
    std::vector<double> b = r.values(in, K * cc.oc, -3, 3), bias = r.values(acc, cc.oc, -2, 4);
    const std::vector<double> tiled = tiled_b(b, K, cc.oc, R, C);
    auto run = [&](const isa::Program& p, const std::vector<double>& av) {
      return run_with_bias(*m, p, av, tiled, bias, in, acc, out);
    };
    kernels::GemmChip g{M, K, cc.oc, in, out, 2, 3, kernels::GemmSchedule::Auto};
    g.bias = true, g.relu = true, g.b_tiled = true;
    const std::vector<double> matrix = run(kernels::gemm_chip_kernel(g, symbols), col);
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", M}, {"K", K}, {"N", cc.oc}, {"IN_DT", static_cast<int64_t>(in)},
                    {"OUT_DT", static_cast<int64_t>(out)}, {"BIAS", 1}, {"RELU", 1}, {"B_TILED", 1}});
    const std::vector<double> one_matrix = run(kernels::assemble("gemm.s", defines, {}, 0), col);
    g.taps = x;
    const std::vector<double> whole = run(kernels::gemm_chip_kernel(g, symbols), a);
    defines.insert({{"TAP_CIN", x.cin}, {"TAP_ROWS", x.rows}, {"TAP_KW", x.kw}, {"TAP_SH", s}, {"TAP_SW", s},
                    {"TAP_DH", cc.dil}, {"TAP_DW", cc.dil}, {"TAP_WQ", Wq}, {"TAP_PHASE_ROWS", x.phase_rows}});
    const std::vector<double> one = run(kernels::assemble("gemm.s", defines, {}, 0), a);
    std::vector<size_t> outputs;  // the elements of the rows that are outputs
    for (int64_t n = 0; n < cc.n; ++n)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow)
          for (int64_t j = 0; j < cc.oc; ++j) outputs.push_back(static_cast<size_t>((n * image + oh * Wq + ow) * cc.oc + j));
    const std::string what = std::string(isa::dtype_name(in)) + " conv " + std::to_string(cc.n) + "x" +
                             std::to_string(cc.h) + "x" + std::to_string(cc.w) + "x" + std::to_string(cc.cin) + " k" +
                             std::to_string(cc.k) + " s" + std::to_string(s) + " d" + std::to_string(cc.dil);
    expect_all(what + ": gemm_chip on the taps vs on the im2col matrix, bit for bit", outputs.size(),
               [&](size_t i) { return same(whole[outputs[i]], matrix[outputs[i]]); },
               [&](size_t i) { return "taps " + num(whole[outputs[i]]) + ", matrix " + num(matrix[outputs[i]]); });
    expect_all(what + ": gemm.s on the taps vs on the im2col matrix, bit for bit", outputs.size(),
               [&](size_t i) { return same(one[outputs[i]], one_matrix[outputs[i]]); },
               [&](size_t i) { return "taps " + num(one[outputs[i]]) + ", matrix " + num(one_matrix[outputs[i]]); });
    expect_all(what + ": gemm.s vs gemm_chip on the taps, bit for bit", outputs.size(),
               [&](size_t i) { return same(one[outputs[i]], whole[outputs[i]]); },
               [&](size_t i) { return "gemm.s " + num(one[outputs[i]]) + ", gemm_chip " + num(whole[outputs[i]]); });
    // phases of rows only: phase pa holds padded rows pa, pa + s, ..., each of Wp = Wq * s pixels
    const int64_t Wp = Wq * s;
    kernels::ConvTaps y{cc.cin, 0, cc.k, s, 1, cc.dil, cc.dil, Wp, cc.n * Hq * Wp, s};
    int64_t reach_rows = s * cc.n * Hq * Wp;
    for (int64_t t = 0; t < cc.k * cc.k; ++t)
      reach_rows = std::max(reach_rows, (M - 1) * s + kernels::tap_row_offset(y, t) + 1);
    y.rows = reach_rows;
    std::vector<double> rows(static_cast<size_t>(y.rows * cc.cin), 0.0);
    for (int64_t pa = 0; pa < s; ++pa)
      for (int64_t n = 0; n < cc.n; ++n)
        for (int64_t q = 0; q < Hq; ++q)
          for (int64_t p = 0; p < Wp; ++p)
            for (int64_t c = 0; c < cc.cin; ++c)
              rows[(((pa * cc.n + n) * Hq + q) * Wp + p) * cc.cin + c] = pixel(n, q * s + pa, p, c);
    g.taps = y;
    const std::vector<double> whole_rows = run(kernels::gemm_chip_kernel(g, symbols), rows);
    defines["TAP_ROWS"] = y.rows, defines["TAP_SW"] = 1, defines["TAP_WQ"] = Wp, defines["TAP_PHASE_ROWS"] = y.phase_rows;
    defines["TAP_PITCH"] = s;
    const std::vector<double> one_rows = run(kernels::assemble("gemm.s", defines, {}, 0), rows);
    expect_all(what + ": gemm_chip on phases of rows (pitch " + std::to_string(s) + ") vs the im2col matrix", outputs.size(),
               [&](size_t i) { return same(whole_rows[outputs[i]], matrix[outputs[i]]); },
               [&](size_t i) { return "rows " + num(whole_rows[outputs[i]]) + ", matrix " + num(matrix[outputs[i]]); });
    expect_all(what + ": gemm.s on phases of rows (pitch " + std::to_string(s) + ") vs the im2col matrix", outputs.size(),
               [&](size_t i) { return same(one_rows[outputs[i]], one_matrix[outputs[i]]); },
               [&](size_t i) { return "rows " + num(one_rows[outputs[i]]) + ", matrix " + num(one_matrix[outputs[i]]); });
  }
}

TEST(GemmChip, Bf16ConvTapsReadInPlaceMatchTheIm2colMatrix) { conv_taps_cases(DType::BF16, 931); }
TEST(GemmChip, Int8ConvTapsReadInPlaceMatchTheIm2colMatrix) { conv_taps_cases(DType::I8, 932); }

// The compiler's int8 GEMMs: the dequantising epilogue (dequant: per-column f32 pairs (scale, bias), ReLU, bf16
// or f32 out) and the next layer's int8 copy q (x q_scale, rounded to nearest even, saturated), on 2 cores x 3
// units against gemm.s on one unit with the same defines, bit for bit, against the reference machine (c and q),
// and against the host: the exact int32 sums, then f32(acc) * s[j] + b[j] in IEEE f32 (within 2^-22 relative of
// the float64 value acc * s[j] + b[j]), the output cast, and q.
void dequant_cases(uint64_t seed, DType out, bool bias, bool relu, float q_scale) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random r(seed);
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {33, 64, 65}, {70, 50, 8}, {100, 17, 5}}) {
    std::vector<double> a = r.values(DType::I8, s.m * s.k), b = r.values(DType::I8, s.k * s.n);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    std::vector<double> dq(static_cast<size_t>(2 * s.n));
    for (int64_t j = 0; j < s.n; ++j) {  // scales of the size s_a * s_w has, results of -4..4
      dq[2 * j] = static_cast<float>(r.real(1e-6, 1e-4));
      dq[2 * j + 1] = static_cast<float>(r.real(-2, 2));
    }
    std::vector<double> ref_c, ref_q;
    auto run = [&](const isa::Program& p, std::vector<double>& q) {
      m->write(p.find("a")->addr, a, DType::I8);
      m->write(p.find("b")->addr, tiled, DType::I8);
      m->write(p.find("dq")->addr, dq, DType::F32);
      const isa::TensorDecl* c = p.find("c");
      m->write(c->addr, std::vector<uint8_t>(c->bytes(), 0xa5));
      const isa::TensorDecl* qd = q_scale != 0 ? p.find("q") : nullptr;
      if (qd) m->write(qd->addr, std::vector<uint8_t>(qd->bytes(), 0xa5));
      m->run(p);
      ref_c = Machines::read(*m->isaf32, c->addr, static_cast<size_t>(c->elements()), out);
      if (qd) {
        ref_q = Machines::read(*m->isaf32, qd->addr, static_cast<size_t>(qd->elements()), DType::I8);
        q = m->read_sim(qd->addr, static_cast<size_t>(qd->elements()), DType::I8);
      }
      return m->read_sim(c->addr, static_cast<size_t>(c->elements()), out);
    };
    kernels::GemmChip g{s.m, s.k, s.n, DType::I8, out, 2, 3, kernels::GemmSchedule::Auto};
    g.bias = bias, g.relu = relu, g.b_tiled = true, g.dequant = true;
    g.q_scale_bits = q_scale == 0 ? 0 : isa::bits_from_f32(q_scale);
    std::vector<double> whole_q, one_q;
    std::vector<double> whole = run(kernels::gemm_chip_kernel(g, symbols), whole_q);
    const std::string what = "gemm_chip dequant" + std::string(bias ? ", bias" : "") + (relu ? ", relu" : "") +
                             " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) + " N=" + std::to_string(s.n);
    expect_all(what + ": vs the reference machine", whole.size(), [&](size_t i) { return same(whole[i], ref_c[i]); },
               [&](size_t i) { return "sim " + num(whole[i]) + ", reference " + num(ref_c[i]); });
    if (q_scale != 0)
      expect_all(what + ": q vs the reference machine", whole_q.size(),
                 [&](size_t i) { return whole_q[i] == ref_q[i]; },
                 [&](size_t i) { return "sim " + num(whole_q[i]) + ", reference " + num(ref_q[i]); });
    std::map<std::string, int64_t> defines = symbols;
    defines.insert({{"M", s.m}, {"K", s.k}, {"N", s.n}, {"IN_DT", static_cast<int64_t>(DType::I8)},
                    {"OUT_DT", static_cast<int64_t>(out)}, {"BIAS", bias}, {"RELU", relu}, {"B_TILED", 1},
                    {"DEQUANT", 1}, {"Q_SCALE", static_cast<int64_t>(g.q_scale_bits)}});
    std::vector<double> one = run(kernels::assemble("gemm.s", defines, {}, 0), one_q);
    expect_all(what + ": 2 cores x 3 units vs gemm.s, bit for bit", whole.size(),
               [&](size_t i) { return same(whole[i], one[i]) && (q_scale == 0 || whole_q[i] == one_q[i]); },
               [&](size_t i) { return "gemm_chip " + num(whole[i]) + ", gemm.s " + num(one[i]); });
    // the host
    std::vector<double> want(whole.size()), want_q(whole.size()), exact(whole.size());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        int64_t acc = 0;
        for (int64_t l = 0; l < s.k; ++l)
          acc += static_cast<int64_t>(a[i * s.k + l]) * static_cast<int64_t>(b[l * s.n + j]);
        const auto sj = static_cast<float>(dq[2 * j]), bj = static_cast<float>(dq[2 * j + 1]);
        float x = static_cast<float>(acc) * sj;
        if (bias) x += bj;
        if (relu) x = std::max(x, 0.0f);
        double e = static_cast<double>(acc) * sj + (bias ? bj : 0.0);
        if (relu) e = std::max(e, 0.0);
        const size_t o = static_cast<size_t>(i * s.n + j);
        exact[o] = e;
        want[o] = out == DType::BF16 ? isa::f32_from_bf16(isa::bf16_from_f32(x)) : x;
        want_q[o] = std::clamp(std::nearbyint(static_cast<double>(x * q_scale)), -128.0, 127.0);
        EXPECT_LE(std::fabs(static_cast<double>(x) - e), std::ldexp(std::fabs(e) + 2.0, -22)) << what << " " << o;
      }
    expect_all(what + ": vs the host's f32 epilogue", whole.size(),
               [&](size_t i) { return same(whole[i], want[i]) && (q_scale == 0 || whole_q[i] == want_q[i]); },
               [&](size_t i) {
                 return "gemm_chip " + num(whole[i]) + " q " + num(q_scale ? whole_q[i] : 0) + ", host " +
                        num(want[i]) + " q " + num(want_q[i]) + ", float64 " + num(exact[i]);
               });
    if (q_scale == 0) continue;
    // The int8 copy alone (gemm.s's Q_ONLY, gemm_chip's q_only): no `c` declared, q bit for bit the same, and
    // fewer cycles than writing both (c's bytes are not stored).
    auto run_q = [&](const isa::Program& p, uint64_t& cycles) {
      EXPECT_EQ(p.find("c"), nullptr) << what;
      m->write(p.find("a")->addr, a, DType::I8);
      m->write(p.find("b")->addr, tiled, DType::I8);
      m->write(p.find("dq")->addr, dq, DType::F32);
      const isa::TensorDecl* qd = p.find("q");
      m->write(qd->addr, std::vector<uint8_t>(qd->bytes(), 0xa5));
      cycles = m->chip->run(p).stats.cycles;
      return m->read_sim(qd->addr, static_cast<size_t>(qd->elements()), DType::I8);
    };
    kernels::GemmChip gq = g;
    gq.q_only = true;
    std::map<std::string, int64_t> dq_only = defines;
    dq_only["Q_ONLY"] = 1;
    uint64_t whole_only_cycles = 0, one_only_cycles = 0;
    const std::vector<double> whole_only = run_q(kernels::gemm_chip_kernel(gq, symbols), whole_only_cycles);
    const std::vector<double> one_only = run_q(kernels::assemble("gemm.s", dq_only, {}, 0), one_only_cycles);
    expect_all(what + ": q alone, gemm_chip and gemm.s vs q with c", whole_q.size(),
               [&](size_t i) { return whole_only[i] == whole_q[i] && one_only[i] == whole_q[i]; },
               [&](size_t i) { return "gemm_chip " + num(whole_only[i]) + ", gemm.s " + num(one_only[i]) +
                                      ", with c " + num(whole_q[i]); });
    EXPECT_LT(one_only_cycles, m->chip->run(kernels::assemble("gemm.s", defines, {}, 0)).stats.cycles) << what;
    EXPECT_LE(whole_only_cycles, m->chip->run(kernels::gemm_chip_kernel(g, symbols)).stats.cycles) << what;
  }
}

// An int8 model's activation before the next int8 matmul (the compiler's fuse_activations on an int8 GEMM whose
// GELU writes an int8 copy): the dequantising GEMM with act and q, the copy cast with q_scale from the activation's
// values as stored (bf16), and q alone (q_only: no c declared); on 2 cores x 3 units and on one core of one unit,
// against the dequantising GEMM writing f32 (its epilogue checked against the host above) followed by the row-wise
// kernel that writes the value and its int8 copy (rowwise.h, Output), bit for bit, c and q. q_scale 60 over GELU's
// results of about -0.2..4 saturates some of q at 127.
TEST(GemmChip, Int8GeluWithItsInt8CopyMatchesTheGemmThenTheRowwiseKernel) {
  TPUSIM_MACHINES(m, sets_of_units(3));
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  const float q_scale = 60.0f;
  Random r(971);
  kernels::rowwise::Program act;
  act.rows = 1, act.cols = 1;
  act.inputs.push_back({});
  act.outputs.push_back({act.unary(kernels::rowwise::Op::Gelu, act.input(0)), 0, DType::BF16});
  int64_t saturated = 0;  // copies at 127
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {66, 20, 13}}) {
    std::vector<double> a = r.values(DType::I8, s.m * s.k), b = r.values(DType::I8, s.k * s.n);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    std::vector<double> dq(static_cast<size_t>(2 * s.n));
    for (int64_t j = 0; j < s.n; ++j) {  // results of about -4..4
      dq[2 * j] = static_cast<float>(r.real(1e-6, 1e-4));
      dq[2 * j + 1] = static_cast<float>(r.real(-2, 2));
    }
    // Runs p (a GEMM) on the operands; c (where declared) as `out`, q into *q where declared
    auto run = [&](const isa::Program& p, DType out, std::vector<double>* q) {
      m->write(p.find("a")->addr, a, DType::I8);
      m->write(p.find("b")->addr, tiled, DType::I8);
      m->write(p.find("dq")->addr, dq, DType::F32);
      const isa::TensorDecl* c = p.find("c");
      const isa::TensorDecl* qd = p.find("q");
      for (const isa::TensorDecl* t : {c, qd})
        if (t) m->write(t->addr, std::vector<uint8_t>(t->bytes(), 0xa5));
      m->run(p);
      if (qd && q) *q = m->read_sim(qd->addr, static_cast<size_t>(qd->elements()), DType::I8);
      return c ? m->read_sim(c->addr, static_cast<size_t>(c->elements()), out) : std::vector<double>{};
    };
    const std::string what = "int8 GELU with q M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                             " N=" + std::to_string(s.n);
    // the reference: the GEMM to f32, then the row-wise kernel writing GELU as bf16 and its int8 copy
    kernels::GemmChip f32{s.m, s.k, s.n, DType::I8, DType::F32, 2, 3, kernels::GemmSchedule::Auto};
    f32.bias = true, f32.b_tiled = true, f32.dequant = true;
    const isa::Program plain = kernels::gemm_chip_kernel(f32, symbols);
    run(plain, DType::F32, nullptr);
    kernels::rowwise::Program rw = act;
    rw.rows = s.m, rw.cols = s.n;
    rw.inputs[0].addr = plain.find("c")->addr;
    const uint64_t after = (plain.find("c")->addr + plain.find("c")->bytes() + 63) / 64 * 64;
    rw.outputs[0].addr = after;
    const int copy = rw.binary(kernels::rowwise::Op::Mul, rw.outputs[0].node, rw.constant(q_scale));
    rw.outputs.push_back({copy, after + static_cast<uint64_t>(s.m * s.n * 2 + 64) / 64 * 64, DType::I8});
    for (const kernels::rowwise::Output& o : rw.outputs)
      m->write(o.addr, std::vector<uint8_t>(static_cast<size_t>(s.m * s.n * isa::dtype_size(o.dtype)), 0xa5));
    m->run(kernels::rowwise::kernel(rw, symbols));
    const std::vector<double> want = m->read_sim(rw.outputs[0].addr, static_cast<size_t>(s.m * s.n), DType::BF16);
    const std::vector<double> want_q = m->read_sim(rw.outputs[1].addr, static_cast<size_t>(s.m * s.n), DType::I8);
    saturated += std::count(want_q.begin(), want_q.end(), 127.0);
    for (const auto& [cores, used] : std::vector<std::pair<int, int>>{{2, 3}, {1, 1}})
      for (const bool q_only : {false, true}) {
        kernels::GemmChip g{s.m, s.k, s.n, DType::I8, DType::BF16, cores, used, kernels::GemmSchedule::Auto};
        g.bias = true, g.b_tiled = true, g.dequant = true, g.act = act, g.q_only = q_only;
        g.q_scale_bits = isa::bits_from_f32(q_scale);
        std::vector<double> q;
        const isa::Program k = kernels::gemm_chip_kernel(g, symbols);
        EXPECT_EQ(k.find("c") == nullptr, q_only) << what;
        const std::vector<double> c = run(k, DType::BF16, &q);
        const std::string how = what + ": " + std::to_string(cores) + " cores x " + std::to_string(used) +
                                " units" + (q_only ? ", q alone" : "") + " vs the GEMM then the row-wise kernel";
        expect_all(how + ", q bit for bit", want_q.size(), [&](size_t i) { return q[i] == want_q[i]; },
                   [&](size_t i) { return "gemm_chip " + num(q[i]) + ", row-wise " + num(want_q[i]); });
        if (!q_only)
          expect_all(how + ", c bit for bit", want.size(), [&](size_t i) { return same(c[i], want[i]); },
                     [&](size_t i) { return "gemm_chip " + num(c[i]) + ", row-wise " + num(want[i]); });
      }
  }
  EXPECT_GT(saturated, 0);
}

// An int8 model's residual (the compiler's fuse_residual_adds): the dequantising GEMM with residual and its int8
// copy, gemm_chip's residual with q: c = bf16(f32(bf16(acc * s + b)) + f32(r)) after the ReLU, and q = i8(f32(c) *
// q_scale) of c as stored, as the row-wise Add that writes the int8 copy computes them; against the host and the
// reference machine, bit for bit, on 2 cores x 3 units.
TEST(GemmChip, Int8ResidualWithItsInt8CopyMatchesTheHost) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  const int64_t R = symbols.at("MXU_ROWS"), C = symbols.at("MXU_COLS");
  Random r(923);
  const float q_scale = 30.0f;
  for (const Shape& s : std::vector<Shape>{{1, 1, 1}, {9, 20, 50}, {40, 17, 49}, {70, 50, 24}, {33, 64, 65}}) {
    std::vector<double> a = r.values(DType::I8, s.m * s.k), b = r.values(DType::I8, s.k * s.n);
    std::vector<double> res = r.values(DType::BF16, s.m * s.n, -3, 3);
    const std::vector<double> tiled = tiled_b(b, s.k, s.n, R, C);
    std::vector<double> dq(static_cast<size_t>(2 * s.n));
    for (int64_t j = 0; j < s.n; ++j) {
      dq[2 * j] = static_cast<float>(r.real(1e-6, 1e-4));
      dq[2 * j + 1] = static_cast<float>(r.real(-2, 2));
    }
    kernels::GemmChip g{s.m, s.k, s.n, DType::I8, DType::BF16, 2, 3, kernels::GemmSchedule::Auto};
    g.bias = true, g.b_tiled = true, g.dequant = true, g.residual = true, g.residual_relu = true;
    g.q_scale_bits = isa::bits_from_f32(q_scale);
    const isa::Program p = kernels::gemm_chip_kernel(g, symbols);
    m->write(p.find("a")->addr, a, DType::I8);
    m->write(p.find("b")->addr, tiled, DType::I8);
    m->write(p.find("dq")->addr, dq, DType::F32);
    m->write(p.find("r")->addr, res, DType::BF16);
    const isa::TensorDecl *c = p.find("c"), *q = p.find("q");
    m->run(p);
    const std::vector<double> got = m->read_sim(c->addr, static_cast<size_t>(c->elements()), DType::BF16);
    const std::vector<double> got_q = m->read_sim(q->addr, static_cast<size_t>(q->elements()), DType::I8);
    const std::vector<double> ref = Machines::read(*m->isaf32, c->addr, static_cast<size_t>(c->elements()), DType::BF16);
    const std::vector<double> ref_q = Machines::read(*m->isaf32, q->addr, static_cast<size_t>(q->elements()), DType::I8);
    std::vector<double> want(got.size()), want_q(got.size());
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        int64_t acc = 0;
        for (int64_t l = 0; l < s.k; ++l)
          acc += static_cast<int64_t>(a[i * s.k + l]) * static_cast<int64_t>(b[l * s.n + j]);
        const size_t o = static_cast<size_t>(i * s.n + j);
        const float x = static_cast<float>(acc) * static_cast<float>(dq[2 * j]) + static_cast<float>(dq[2 * j + 1]);
        const float sum = std::max(isa::f32_from_bf16(isa::bf16_from_f32(x)) + static_cast<float>(res[o]), 0.0f);
        const float stored = isa::f32_from_bf16(isa::bf16_from_f32(sum));
        want[o] = stored;
        want_q[o] = std::clamp(std::nearbyint(static_cast<double>(stored * q_scale)), -128.0, 127.0);
      }
    const std::string what = "residual with q M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
                             " N=" + std::to_string(s.n);
    expect_all(what + ": vs the host", got.size(),
               [&](size_t i) { return same(got[i], want[i]) && got_q[i] == want_q[i]; },
               [&](size_t i) { return "sim " + num(got[i]) + " q " + num(got_q[i]) + ", host " + num(want[i]) +
                                      " q " + num(want_q[i]); });
    expect_all(what + ": vs the reference machine", got.size(),
               [&](size_t i) { return same(got[i], ref[i]) && got_q[i] == ref_q[i]; },
               [&](size_t i) { return "sim " + num(got[i]) + ", reference " + num(ref[i]); });
  }
}

TEST(GemmChip, Int8DequantBiasReluAndInt8CopyMatchGemmSAndTheHost) { dequant_cases(919, DType::BF16, true, true, 40.0f); }
TEST(GemmChip, Int8DequantToF32MatchesGemmSAndTheHost) { dequant_cases(920, DType::F32, false, false, 0.0f); }
// Without ReLU, the q copy saturates at both ends (|x| x 90 beyond 127).
TEST(GemmChip, Int8DequantInt8CopySaturatesBothWays) { dequant_cases(921, DType::F32, true, false, 90.0f); }

// a_wait (the compiler's overlap of a row-wise kernel and the GEMM after it): on v5e (one core, 4 units), 128 x 768
// x 1024. It must lie above the kernel's own semaphores (4 x 4 + 7 = 23) and needs one core. Alone, nothing
// signals it: the run stops with a deadlock that names the semaphore the load queue waits for. Signalled before
// the kernel (sem.set s30, 1), it runs; its first chunk's b loads before a, so the first tile's loads and the
// matrix work start as they did: within 1% of the cycles of the kernel without it. (That only a waits for the
// kernel before, and the same bits, end to end: test_cli.py, test_layernorm_and_the_gemm_after_it_overlap.)
TEST(GemmChip, AWaitHoldsBackOnlyTheLoadsOfA) {
  const sim::ChipConfig cfg = sim::load_config("v5e");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::GemmChip g{128, 768, 1024, DType::BF16, DType::BF16, 0, 0, kernels::GemmSchedule::Tiles};
  auto message = [&](const kernels::GemmChip& v, const std::map<std::string, int64_t>& s) {
    try {
      kernels::gemm_chip_source(v, s);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string needs = "gemm_chip: a_wait needs one core, the tiled schedule, a a matrix, no split K, and a "
                            "semaphore from 24 to 31";
  g.a_wait = 23;
  EXPECT_EQ(message(g, symbols), needs);
  g.a_wait = 32;
  EXPECT_EQ(message(g, symbols), needs);
  g.a_wait = 30;
  std::map<std::string, int64_t> two_cores = symbols;
  two_cores["CORES"] = 2;
  EXPECT_EQ(message(g, two_cores), needs);
  ASSERT_EQ(message(g, symbols), "no error");

  sim::Chip chip(cfg);
  try {
    chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only());
    ADD_FAILURE() << "a_wait never signalled, and the run ended";
  } catch (const sim::Error& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("s30"), std::string::npos) << e.what();
  }
  isa::Program signalled = kernels::gemm_chip_kernel(g, symbols, {}, 1);
  isa::Instr set{.op = isa::Op::SEMSET};
  set.f[0] = 30, set.f[1] = 1;
  signalled.code.insert(signalled.code.begin(), isa::encode(set));
  signalled.source.insert(signalled.source.begin(), "sem.set s30, 1");
  const auto with = static_cast<double>(chip.run(signalled, timing_only()).stats.cycles);
  g.a_wait = 0;
  const auto without = static_cast<double>(chip.run(kernels::gemm_chip_kernel(g, symbols), timing_only()).stats.cycles);
  EXPECT_NEAR(with / without, 1.0, 0.01) << with << " against " << without;
  std::printf("a_wait signalled before: %.0f cycles, without a_wait %.0f\n", with, without);
}

TEST(GemmChip, ShapesThatCannotRunSaySo) {
  TPUSIM_MACHINES(m, chip_sets());
  const std::map<std::string, int64_t> symbols = symbols_of(*m);
  auto message = [&](kernels::GemmChip g) {
    try {
      kernels::gemm_chip_source(g, symbols);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message({4, 4, 4, DType::BF16, DType::F32, 3, 1}), "gemm_chip: 3 cores asked, the chip has 2");
  EXPECT_EQ(message({4, 4, 4, DType::BF16, DType::F32, 1, 4}),
            "gemm_chip: 4 matrix units per core asked (the chip has 3; the kernel's semaphores allow 7)");
  EXPECT_EQ(message({4, 1 << 20, 4, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Strips})
                .rfind("gemm_chip: a row of a (K = 1048576)", 0),
            0u);
  // Auto takes the tiled schedule, which cuts K into chunks, when a row of a does not fit.
  EXPECT_EQ(message({4, 1 << 20, 4, DType::BF16, DType::F32, 1, 1}), "no error");
  kernels::GemmChip g{8, 8, 8, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Strips};
  g.bias = true;
  EXPECT_EQ(message(g), "gemm_chip: trans_b, b_tiled, bias, relu and scale need the tiled schedule");
  g.schedule = kernels::GemmSchedule::Auto, g.max_split_k = 4;
  EXPECT_EQ(message(g), "gemm_chip: bias, relu, scale and b_tiled do not combine with split K");
  g.max_split_k = 1, g.b_tiled = true, g.trans_b = true;
  EXPECT_EQ(message(g), "gemm_chip: b is either transposed or tiled, not both");
  g = kernels::GemmChip{8, 8, 8, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Tiles};
  g.slots = 5;
  EXPECT_EQ(message(g), "gemm_chip: 5 operand slots asked (2 to 4)");
  // The epilogues: a residual of the output type (bf16 or f32); an activation giving the output type
  g = kernels::GemmChip{8, 8, 8, DType::I8, DType::I32, 1, 1, kernels::GemmSchedule::Tiles};
  g.residual = true;
  EXPECT_EQ(message(g), "gemm_chip: residual gives bf16 or f32 (q beside it, not alone), without group_n");
  g = kernels::GemmChip{8, 8, 8, DType::I8, DType::BF16, 1, 1, kernels::GemmSchedule::Tiles};
  g.dequant = g.residual = g.q_only = true, g.q_scale_bits = isa::bits_from_f32(2.0f);
  EXPECT_EQ(message(g), "gemm_chip: residual gives bf16 or f32 (q beside it, not alone), without group_n");
  g = kernels::GemmChip{8, 8, 8, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Tiles};
  g.residual_relu = true;
  EXPECT_EQ(message(g), "gemm_chip: residual_relu needs residual");
  kernels::rowwise::Program act;
  act.rows = 1, act.cols = 1;
  act.inputs.push_back({});
  act.outputs.push_back({act.unary(kernels::rowwise::Op::Gelu, act.input(0)), 0, DType::BF16});
  g = kernels::GemmChip{8, 8, 8, DType::BF16, DType::F32, 1, 1, kernels::GemmSchedule::Tiles};
  g.act = act;  // gives bf16, the kernel f32
  EXPECT_EQ(message(g), "gemm_chip: act is an elementwise program of one f32 input, giving the output type (bf16 or "
                        "f32), without group_n or residual");
  g.out = DType::BF16;
  EXPECT_EQ(message(g), "no error");
  g.q_scale_bits = isa::bits_from_f32(2.0f);  // act's int8 copy: an int8 GEMM's (dequant)
  EXPECT_EQ(message(g), "gemm_chip: q_scale needs dequant and no scale");
  g.q_scale_bits = 0;
  g.act->nodes.push_back({kernels::rowwise::Op::RowSum, {1}});  // a reduction is not elementwise
  g.act->outputs[0].node = 2;
  EXPECT_EQ(message(g).rfind("gemm_chip: act is an elementwise program", 0), 0u);
}

// The kernels are built through the typed emitter; the source is the kernel's disassembly after the plan's line,
// and assembles back into it: the strips schedule, and the tiled one with a bias and an activation epilogue (the
// row-wise kernel's instructions, emitted into the GEMM). Placed: b where given, the others from the HBM base on,
// as the assembler places them; at instruction 70 only the branch targets move.
TEST(GemmChip, SourceAssemblesBackIntoTheKernel) {
  const sim::ChipConfig cfg = sim::load_config("v4");
  const std::map<std::string, int64_t> symbols = preset_symbols(cfg);
  kernels::rowwise::Program act;
  act.rows = 1, act.cols = 1;
  act.inputs.push_back({});
  const int x = act.input(0);
  act.outputs.push_back({act.binary(kernels::rowwise::Op::Add, act.unary(kernels::rowwise::Op::Gelu, x),
                                    act.constant(0.5f)), 0, DType::BF16});
  kernels::GemmChip strips{512, 300, 1024, DType::BF16, DType::F32, 0, 0, kernels::GemmSchedule::Strips};
  kernels::GemmChip tiles{200, 300, 260, DType::BF16, DType::BF16, 0, 0, kernels::GemmSchedule::Tiles};
  tiles.bias = true, tiles.act = act;
  for (const kernels::GemmChip& g : {strips, tiles}) {
    const isa::Program k = kernels::gemm_chip_kernel(g, symbols);
    const std::string src = kernels::gemm_chip_source(g, symbols);
    testing::expect_source_is(k, src, 2);
    EXPECT_EQ(src.rfind(g.act ? "# gemm_chip (tiles): c[200,260]" : "# gemm_chip: c[512,1024]", 0), 0u)
        << src.substr(0, 200);
    ASSERT_FALSE(k.source.empty());
    EXPECT_EQ(k.source[0].rfind("<gemm_chip> at gemm_chip.cpp:", 0), 0u) << k.source[0];
    const std::map<std::string, uint64_t> addr = {{"b", 1 << 20}};
    const uint64_t base = 16 << 20;
    const isa::Program placed = kernels::gemm_chip_kernel(g, symbols, addr, 70, base);
    EXPECT_EQ(placed.find("a")->addr, base);
    EXPECT_EQ(placed.find("b")->addr, 1u << 20);
    EXPECT_EQ(placed.find("c")->addr, (base + placed.find("a")->bytes() + (g.act ? 4096 : 0) + 4095) / 4096 * 4096)
        << "c after a (and the bias)";
    EXPECT_NE(placed.code, k.code);  // the addresses the code loads
    EXPECT_GT(testing::expect_moved_by(kernels::gemm_chip_kernel(g, symbols, addr, 0, base), placed, 70), 4u);
  }
}

}  // namespace
}  // namespace tpusim::reftest
