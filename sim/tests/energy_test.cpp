// The energy and area models (tpusim/sim/energy.h, docs/energy.md) against references computed here from the
// configuration's parameters and a GEMM's shape: the counts the units make, each action's energy, the area of
// every preset, --set overrides, and the stats file.
#include <cmath>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "test_util.h"
#include "tpusim/sim/energy.h"

namespace tpusim::sim::test {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// Equal up to the rounding of sums taken in another order (a relative 1e-12; the counts themselves are compared
// exactly).
#define EXPECT_SAME(a, b) EXPECT_NEAR((a), (b), std::abs(b) * 1e-12)

// Each action's energy in pJ, from the parameters as docs/energy.md states the rules (not through energy_model):
// a figure at energy.ref_nm times (node_nm / ref_nm)^node_exponent; an SRAM's per byte, when not given, the SRAM
// rule sram_pj_per_byte * (bank bytes / 1 MiB)^sram_size_exponent; HBM's not scaled.
std::array<double, kNumActions> reference_pj(const ChipConfig& c) {
  const EnergyParams& e = c.energy;
  const double s = std::pow(c.chip.node_nm / e.ref_nm, e.node_exponent);
  auto sram = [&](double given, double bank_bytes) {
    return (given >= 0 ? given : e.sram_pj_per_byte * std::pow(bank_bytes / kMiB, e.sram_size_exponent)) * s;
  };
  const double vmem = sram(e.vmem_pj_per_byte, double(c.vmem.size_kib) * 1024 / c.vmem.banks);
  const double acc = sram(e.acc_pj_per_byte, c.mxu.acc_rows * 4.0);
  const double wbuf = sram(e.wbuf_pj_per_byte, c.mxu.rows * c.mxu.cols * 2.0);
  const double shared =
      c.shared.size_kib ? sram(e.shared_pj_per_byte, double(c.shared.size_kib) * 1024 / c.shared.banks) : 0.0;
  return {e.mac_i8_pj * s,        e.mac_bf16_pj * s,      e.vpu_float_add_pj * s, e.vpu_float_mul_pj * s,
          e.vpu_int_add_pj * s,   e.vpu_int_mul_pj * s,   vmem,                   vmem,
          acc,                    acc,                    wbuf,                   wbuf,
          e.link_pj_per_byte * s, e.hbm_pj_per_byte,      e.hbm_pj_per_byte,      shared,
          shared};
}

// The chip's area in mm2 as docs/energy.md sums it: scaled parts times (node_nm / ref_nm)^node_exponent, then
// chip I/O and memory PHYs, then the share outside them.
double reference_area(const ChipConfig& c) {
  const AreaParams& a = c.area;
  const double s = std::pow(c.chip.node_nm / a.ref_nm, a.node_exponent);
  const double mxus = double(c.chip.cores) * c.core.mxus;
  const double pe_um2 = a.pe_bf16 ? a.mac_bf16_um2 + (c.mxu.i8_rate - 1) * a.mac_i8_um2 : c.mxu.i8_rate * a.mac_i8_um2;
  const double pes = double(c.mxu.rows) * c.mxu.cols * mxus * pe_um2 / 1e6;
  const double sram = (double(c.vmem.size_kib) * c.chip.cores + double(c.shared.size_kib)) / 1024 * a.sram_mm2_per_mib;
  const double acc = c.mxu.acc_rows * c.mxu.cols * 4.0 / kMiB * mxus * a.acc_mm2_per_mib;
  const double vpu = double(c.vpu.lanes) * c.vpu.sublanes * c.chip.cores * a.vpu_mm2_per_lane;
  const double parts = (pes + sram + acc + vpu + c.chip.cores * a.core_mm2) * s + a.chip_io_mm2 + a.memory_phy_mm2;
  return parts / (1 - a.other_fraction);
}

// A bf16 GEMM C = A B of M x K x N = 8 x 8 x 8 on a 4 x 4 array, tiled by hand: A (M x K) and B (K x N) loaded
// from HBM into VMEM, each of the 2 x 2 tiles of B loaded into the array and multiplied by A's K-slice (the
// second K-slice adding into the accumulators), each N-tile of C drained by vpu.acc as f32 and C stored to HBM.
constexpr int64_t M = 8, K = 8, N = 8, T = 4;  // T: the array's rows and columns (small_config)
constexpr int64_t kBf16 = static_cast<int64_t>(DType::BF16), kF32 = static_cast<int64_t>(DType::F32);
isa::Program tiled_gemm() {
  ProgramBuilder b;
  // r1 = 0; A at VMEM 0 and HBM 0, B at VMEM 1024 and HBM 4096, C at VMEM 2048 and HBM 8192.
  b.li(2, M).li(3, K * 2).li(4, 4096).li(5, 1024).li(6, N * 2).li(7, 2048).li(8, 8192).li(9, N * 4);
  b.op(Op::DMALD, {1, 1, 2, 3, 3, 3});                   // A: M rows of K bf16
  b.op(Op::DMALD, {5, 4, 2, 6, 6, 6}).signal(1);         // B: K rows of N bf16 (completes after A)
  b.li(10, T);
  bool first = true;
  for (int64_t nt = 0; nt < N / T; ++nt)
    for (int64_t kt = 0; kt < K / T; ++kt) {
      b.li(11, 1024 + kt * T * N * 2 + nt * T * 2);        // B's tile (kt, nt): T rows of T, row stride N * 2
      b.op(Op::MXULW, {11, 10, 10, 6, kBf16});
      if (first) b.wait(1), first = false;
      b.li(12, kt * T * 2).li(13, nt * M);                 // A's K-slice kt: M rows of T; accumulator rows nt*M..
      b.op(Op::MXUMM, {12, 2, 13, 3, kBf16}).with("accumulate", kt > 0);
      if (nt == N / T - 1 && kt == K / T - 1) b.signal(2);
    }
  for (int64_t nt = 0; nt < N / T; ++nt) {  // C's N-tile nt: M rows of T f32 at column nt * T
    b.li(14, 2048 + nt * T * 4).li(13, nt * M);
    b.op(Op::VACC, {14, 13, 2, 10, 9, 0, 0, kF32, kF32});
    if (nt == 0) b.wait(2);
    if (nt == N / T - 1) b.signal(3);
  }
  b.op(Op::DMAST, {8, 7, 2, 9, 9, 9}).wait(3);           // C: M rows of N f32
  return b.build();
}

// What the GEMM's units do, from its shape alone:
ActionCounts gemm_actions() {
  ActionCounts n;
  n[Action::MacBf16] = M * N * K;
  // The matrix unit reads each tile of B once (K x N bf16) and A's rows once per N-tile; the DMA store reads C.
  n[Action::VmemRead] = K * N * 2 + (N / T) * M * K * 2 + M * N * 4;
  // The loads write A and B; vpu.acc writes C.
  n[Action::VmemWrite] = M * K * 2 + K * N * 2 + M * N * 4;
  // Every mm writes M x T sums (K / T passes per N-tile); the second pass reads them first, vpu.acc once more.
  n[Action::AccWrite] = (K / T) * M * N * 4;
  n[Action::AccRead] = (K / T - 1) * M * N * 4 + M * N * 4;
  n[Action::WbufWrite] = n[Action::WbufRead] = K * N * 2;  // each tile loaded and swapped in once
  n[Action::VpuFloatAdd] = M * N;                          // vpu.acc: one element of C each
  n[Action::HbmRead] = M * K * 2 + K * N * 2;
  n[Action::HbmWrite] = M * N * 4;
  n[Action::DmaBytes] = n[Action::HbmRead] + n[Action::HbmWrite];
  return n;
}

TEST(Energy, GemmIsItsActionCountsTimesTheirEnergies) {
  const ChipConfig cfg = small_config();
  Chip chip(cfg);
  const RunResult r = chip.run(tiled_gemm());
  const ActionCounts want = gemm_actions();
  for (int a = 0; a < kNumActions; ++a) EXPECT_EQ(r.stats.actions.n[a], want.n[a]) << action_name(Action(a));
  EXPECT_EQ(r.stats.mxu_macs, uint64_t(M * N * K));

  // Energy: the counts times each action's energy computed here, plus static power over the run's time.
  const auto pj = reference_pj(cfg);
  double dynamic_pj = 0;
  for (int a = 0; a < kNumActions; ++a) dynamic_pj += double(want.n[a]) * pj[a];
  const double static_j = cfg.energy.static_w_per_mm2 * reference_area(cfg) * double(r.stats.cycles) /
                          (cfg.chip.clock_mhz * 1e6);
  const Energy e = energy_of(r.stats.actions, r.stats.seconds, energy_model(cfg));
  EXPECT_SAME(e.dynamic_j, dynamic_pj * 1e-12);
  EXPECT_SAME(e.static_j, static_j);
  EXPECT_SAME(e.total_j(), dynamic_pj * 1e-12 + static_j);
  // The MXU's part alone: 512 bf16 MACs.
  EXPECT_SAME(e.by_unit_j()[0], double(M * N * K) * pj[int(Action::MacBf16)] * 1e-12);

  // The stats file says the same: energy by unit adding up to the total, and each instance's dynamic energy.
  auto j = nlohmann::json::parse(r.stats.to_json(cfg));
  EXPECT_SAME(j["energy"]["total_j"].get<double>(), e.total_j());
  EXPECT_EQ(j["energy"]["actions"]["mac_bf16"], M * N * K);
  EXPECT_EQ(j["energy"]["actions"]["hbm_read_bytes"], M * K * 2 + K * N * 2);
  double units = 0, instances = 0;
  for (const auto& [name, v] : j["energy"]["by_unit_j"].items()) units += v.get<double>();
  for (const auto& [name, v] : j["instances"].items()) instances += v["energy_j"].get<double>();
  EXPECT_NEAR(units, e.total_j(), e.total_j() * 1e-12);
  EXPECT_NEAR(instances, e.dynamic_j, e.dynamic_j * 1e-12);
  EXPECT_SAME(j["energy"]["by_unit_j"]["static"].get<double>(), static_j);
  EXPECT_SAME(j["area"]["total_mm2"].get<double>(), reference_area(cfg));
  // Performance per watt and per mm2: 2 operations per MAC, over the energy and over time x area.
  EXPECT_SAME(j["efficiency"]["tops_per_w"].get<double>(), 2.0 * M * N * K / e.total_j() / 1e12);
  EXPECT_SAME(j["efficiency"]["tops_per_mm2"].get<double>(),
                   2.0 * M * N * K / r.stats.seconds / reference_area(cfg) / 1e12);
}

// The counts do not depend on the data: a timing-only run counts the same; a traced run puts them on the
// instructions that did them (the MACs on the mm instructions), adding up to the run's.
TEST(Energy, TimingOnlyAndPerInstructionCountsAgree) {
  Chip chip(small_config());
  const isa::Program p = tiled_gemm();
  RunOptions timing;
  timing.functional = false;
  RunOptions traced;
  traced.trace = true;
  const RunResult f = chip.run(p), t = chip.run(p, timing), tr = chip.run(p, traced);
  EXPECT_EQ(t.stats.actions, f.stats.actions);
  EXPECT_TRUE(f.actions_by_pc.empty());
  ASSERT_EQ(tr.actions_by_pc.size(), p.code.size());
  ActionCounts sum;
  uint64_t mm_macs = 0;
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    sum += tr.actions_by_pc[pc];
    if (isa::decode(p.code[pc]).op == Op::MXUMM) mm_macs += tr.actions_by_pc[pc][Action::MacBf16];
    else EXPECT_EQ(tr.actions_by_pc[pc][Action::MacBf16], 0u) << pc;
  }
  EXPECT_EQ(sum, f.stats.actions);
  EXPECT_EQ(mm_macs, uint64_t(M * N * K));
}

// int8 MACs are counted as such; an output-stationary array reads its staged tile once per fold of mxu.rows rows.
TEST(Energy, Int8AndOutputStationaryCounts) {
  Chip chip(small_config({"mxu.dataflow=os"}));
  ProgramBuilder b;
  const int64_t m = 10;  // 3 folds of 4 rows
  b.li(2, T).li(3, T).li(4, m);
  b.op(Op::MXULW, {1, 2, 3, 3, static_cast<int64_t>(DType::I8)});
  b.op(Op::MXUMM, {1, 4, 1, 2, static_cast<int64_t>(DType::I8)});
  const RunResult r = chip.run(b.build());
  EXPECT_EQ(r.stats.actions[Action::MacI8], uint64_t(m * T * T));
  EXPECT_EQ(r.stats.actions[Action::MacBf16], 0u);
  EXPECT_EQ(r.stats.actions[Action::WbufWrite], uint64_t(T * T));
  EXPECT_EQ(r.stats.actions[Action::WbufRead], uint64_t(3 * T * T));
  EXPECT_EQ(r.stats.actions[Action::VmemRead], uint64_t(T * T + m * T));
  EXPECT_EQ(r.stats.actions[Action::AccWrite], uint64_t(m * T * 4));
  EXPECT_EQ(r.stats.actions[Action::AccRead], 0u);
}

TEST(Area, EveryPresetIsTheSumOfItsParts) {
  for (const std::string& name : preset_names()) {
    const ChipConfig c = load_config(name);
    const Area a = area_of(c);
    double sum = 0;
    for (const AreaPart& p : a.parts) sum += p.mm2;
    EXPECT_NEAR(a.total_mm2, sum, sum * 1e-12) << name;
    EXPECT_NEAR(a.total_mm2, reference_area(c), reference_area(c) * 1e-12) << name;
    EXPECT_NEAR(a.of("other"), a.total_mm2 * c.area.other_fraction, a.total_mm2 * 1e-12) << name;
  }
  // v4: 2 cores x 4 MXUs of 128 x 128 bf16 PEs at 7 nm: 131,072 x 16,850 um2 x (7 / 28)^2 = 138.04 mm2.
  EXPECT_NEAR(area_of(load_config("v4")).of("mxu"), 131072 * 16850e-6 / 16, 1e-9);
  // The calibration (docs/energy.md): TPUv1's die is 331 mm2 (ISCA 2017), which its figures are taken from.
  EXPECT_NEAR(area_of(load_config("v1")).total_mm2, 331.0, 331.0 * 0.005);
}

// --set changes each figure as its rule says.
TEST(Energy, SetOverridesChangeTheFigures) {
  const ChipConfig base = load_config("v4");
  const EnergyModel m = energy_model(base);
  auto pj = [](const ChipConfig& c, Action a) { return energy_model(c).pj_of(a); };
  EXPECT_SAME(pj(load_config("v4", {"energy.mac_bf16_pj=4"}), Action::MacBf16), 2 * m.pj_of(Action::MacBf16));
  EXPECT_SAME(pj(load_config("v4", {"energy.vmem_pj_per_byte=5"}), Action::VmemRead), 5.0 * 7 / 45);
  // Twice the node: every scaled energy twice (exponent 1), HBM's the same; scaled areas four times (exponent 2).
  const ChipConfig n14 = load_config("v4", {"chip.node_nm=14"});
  EXPECT_SAME(pj(n14, Action::MacI8), 2 * m.pj_of(Action::MacI8));
  EXPECT_SAME(pj(n14, Action::SharedRead), 2 * m.pj_of(Action::SharedRead));
  EXPECT_SAME(pj(n14, Action::HbmRead), m.pj_of(Action::HbmRead));
  EXPECT_SAME(area_of(n14).of("mxu"), 4 * area_of(base).of("mxu"));
  EXPECT_SAME(area_of(n14).of("memory_phy"), area_of(base).of("memory_phy"));
  // Twice the SRAM density figure: VMEM's and the shared level's areas double.
  const ChipConfig sram = load_config("v4", {"area.sram_mm2_per_mib=8"});
  EXPECT_SAME(area_of(sram).of("vmem"), 2 * area_of(base).of("vmem"));
  EXPECT_SAME(area_of(sram).of("shared"), 2 * area_of(base).of("shared"));
  // Static power follows the area and its own figure.
  EXPECT_SAME(energy_model(load_config("v4", {"energy.static_w_per_mm2=0.2"})).static_w,
                   0.2 * area_of(base).total_mm2);
  // A bank four times larger costs twice as much per byte (the square-root rule).
  EXPECT_SAME(pj(load_config("v4", {"vmem.banks=8"}), Action::VmemWrite), 2 * m.pj_of(Action::VmemWrite));
  // A bad value is an error naming the key.
  EXPECT_THROW(load_config("v4", {"area.other_fraction=1"}), Error);
  EXPECT_THROW(load_config("v4", {"energy.mac_i8_pj=-1"}), Error);
}

// The model's peak power: every matrix unit streaming (bf16 on v4), HBM at full bandwidth, static power.
TEST(Energy, PeakPower) {
  const ChipConfig c = load_config("v4");
  const PeakPower p = peak_power(c);
  const auto pj = reference_pj(c);
  const double hz = 1050e6;
  EXPECT_EQ(p.per_second[Action::MacBf16], uint64_t(8 * 128 * 128 * hz));
  EXPECT_EQ(p.per_second[Action::HbmRead], uint64_t(1200e9));
  EXPECT_NEAR(p.dynamic_w,
              (8 * 128 * 128 * hz * pj[int(Action::MacBf16)] + 1200e9 * (pj[int(Action::HbmRead)] +
               pj[int(Action::DmaBytes)] + pj[int(Action::VmemWrite)]) + 8 * 128 * 2 * hz * pj[int(Action::VmemRead)] +
               2 * 8 * 128 * 4 * hz * pj[int(Action::AccRead)] + 2 * 1024 * hz * pj[int(Action::VpuFloatAdd)]) * 1e-12,
              p.dynamic_w * 1e-9);
  EXPECT_SAME(p.static_w, c.energy.static_w_per_mm2 * reference_area(c));
}

}  // namespace
}  // namespace tpusim::sim::test
