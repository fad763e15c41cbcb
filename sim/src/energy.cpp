// The energy and area models (tpusim/sim/energy.h; the derivations and the calibration are in docs/energy.md).
//
// Sources of the defaults (each figure's own source is beside it below):
//   Horowitz: M. Horowitz, "Computing's Energy Problem (and what we can do about it)", ISSCC 2014, at 45 nm and 0.9 V:
//       8-bit add 0.03 pJ, 32-bit add 0.1, 8-bit multiply 0.2, 32-bit multiply 3.1, 16-bit float add 0.4,
//       16-bit float multiply 1.1, 32-bit float add 0.9, 32-bit float multiply 3.7; a 64-bit SRAM read 10 pJ from
//       8 KB, 20 pJ from 32 KB, 100 pJ from 1 MB; DRAM 1.3-2.6 nJ per 64-bit access. Its areas (same table): 8-bit
//       multiply 282 um2, 32-bit add 137 um2, 16-bit float multiply 1640 um2, 32-bit float add 4184 um2.
//   TPUv1: N. Jouppi et al., "In-Datacenter Performance Analysis of a Tensor Processing Unit", ISCA 2017: TPUv1 at
//       28 nm, die < 331 mm2; its floor plan (Figure 2): Unified Buffer (24 MiB) 29%, Matrix Multiply Unit
//       (65,536 int8 MACs) 24%, accumulators (4 MiB) 6%, activation pipeline (256 lanes) 6%, two DDR3 interfaces
//       3% each, PCIe and other I/O 4%, control 2%: 77% of the die (buffers 37%, compute 30%, I/O 10%, control
//       2% in all); Table 2: idle power 28 W, TDP 75 W.
//   O'Connor: M. O'Connor et al., "Fine-Grained DRAM: Energy-Efficient DRAM for Extreme Bandwidth Systems", MICRO 2017:
//       HBM2 about 3.9 pJ per bit moved.
//   Dennard: R. Dennard et al., "Design of ion-implanted MOSFETs with very small physical dimensions", IEEE JSSC 1974:
//       area scales with the square of the feature size.
// Scaling rules (docs/energy.md): an energy figure given at energy.ref_nm is multiplied by
// (chip.node_nm / energy.ref_nm)^energy.node_exponent; exponent 1: switching energy C V^2 with the capacitance C
// proportional to the feature size and the supply voltage no longer scaling (Horowitz on the end of voltage scaling).
// An area figure at area.ref_nm is multiplied by (chip.node_nm / area.ref_nm)^area.node_exponent; exponent 2 (Dennard).
// DRAM (hbm_pj_per_byte), static power, chip I/O and memory PHYs are not scaled (not logic of the chip's node).
#include "tpusim/sim/energy.h"

#include <cmath>

#include "params.h"

namespace tpusim::sim {
namespace detail {

void declare_energy_params(std::vector<Param>& out) {
  ParamSection<EnergyParams>(out, "energy", &ChipConfig::energy)
      .add(&EnergyParams::ref_nm, "ref_nm", 45.0, "nm",
           "node at which this section's pJ figures are given (Horowitz, ISSCC 2014: 45 nm); scaled to chip.node_nm",
           1.0, 1000.0)
      .add(&EnergyParams::node_exponent, "node_exponent", 1.0, "",
           "an action's energy scales as (chip.node_nm / ref_nm)^node_exponent (1: C V^2 with C proportional to "
           "the feature size and V no longer scaling)",
           0.0, 4.0)
      .add(&EnergyParams::mac_i8_pj, "mac_i8_pj", 0.3, "pJ",
           "one int8 multiply-accumulate of a matrix unit: an 8-bit multiply and a 32-bit add (Horowitz)", 0.0, 1e6)
      .add(&EnergyParams::mac_bf16_pj, "mac_bf16_pj", 2.0, "pJ",
           "one bf16 multiply-accumulate with f32 accumulation: a 16-bit float multiply and a 32-bit float add "
           "(Horowitz)",
           0.0, 1e6)
      .add(&EnergyParams::vpu_float_add_pj, "vpu_float_add_pj", 0.9, "pJ",
           "one element of an add-like vector operation in f32: a 32-bit float add (Horowitz)", 0.0, 1e6)
      .add(&EnergyParams::vpu_float_mul_pj, "vpu_float_mul_pj", 3.7, "pJ",
           "one element of a multiply-like vector operation in f32 (mul, mulrow, exp, recip, rsqrt): a 32-bit "
           "float multiply (Horowitz)",
           0.0, 1e6)
      .add(&EnergyParams::vpu_int_add_pj, "vpu_int_add_pj", 0.1, "pJ",
           "one element of an add-like vector operation on integers: a 32-bit add (Horowitz)", 0.0, 1e6)
      .add(&EnergyParams::vpu_int_mul_pj, "vpu_int_mul_pj", 3.1, "pJ",
           "one element of an integer vector multiply: a 32-bit multiply (Horowitz)", 0.0, 1e6)
      .add(&EnergyParams::sram_pj_per_byte, "sram_pj_per_byte", 12.5, "pJ/byte",
           "the SRAM rule: a byte read or written in a bank of 1 MiB (Horowitz: 100 pJ per 64-bit read of 1 MB); "
           "a bank of S MiB costs this x S^sram_size_exponent",
           0.0, 1e6)
      .add(&EnergyParams::sram_size_exponent, "sram_size_exponent", 0.5, "",
           "the SRAM rule's exponent (Horowitz: 10, 20 and 100 pJ from 8 KB, 32 KB and 1 MB grow as the square "
           "root of the size)",
           0.0, 2.0)
      .add(&EnergyParams::vmem_pj_per_byte, "vmem_pj_per_byte", -1.0, "pJ/byte",
           "a byte read or written in VMEM; < 0: the SRAM rule for a bank of vmem.size_kib / vmem.banks", -1.0, 1e6)
      .add(&EnergyParams::acc_pj_per_byte, "acc_pj_per_byte", -1.0, "pJ/byte",
           "a byte read or written in the accumulators; < 0: the SRAM rule for one column's bank, mxu.acc_rows x "
           "4 bytes",
           -1.0, 1e6)
      .add(&EnergyParams::wbuf_pj_per_byte, "wbuf_pj_per_byte", -1.0, "pJ/byte",
           "a byte written into or read from a matrix unit's weight buffers; < 0: the SRAM rule for one tile, "
           "mxu.rows x mxu.cols x 2 bytes",
           -1.0, 1e6)
      .add(&EnergyParams::shared_pj_per_byte, "shared_pj_per_byte", -1.0, "pJ/byte",
           "a byte read or written in the [shared] level; < 0: the SRAM rule for a bank of shared.size_kib / "
           "shared.banks",
           -1.0, 1e6)
      .add(&EnergyParams::link_pj_per_byte, "link_pj_per_byte", 1.0, "pJ/byte",
           "a byte a DMA transfer carries over the chip's interconnect between HBM or [shared] and VMEM "
           "(assumption: no published figure)",
           0.0, 1e6)
      .add(&EnergyParams::hbm_pj_per_byte, "hbm_pj_per_byte", 31.2, "pJ/byte",
           "a byte read or written in HBM, not scaled with chip.node_nm (HBM2: about 3.9 pJ per bit, O'Connor et "
           "al., MICRO 2017; DDR3: 1.3 nJ per 64-bit access, Horowitz)",
           0.0, 1e6)
      .add(&EnergyParams::static_w_per_mm2, "static_w_per_mm2", 0.0846, "W/mm2",
           "static power (leakage, clocks, idle I/O) per mm2 of the chip's area, not scaled (TPUv1 idles at 28 W "
           "on 331 mm2, ISCA 2017)",
           0.0, 100.0);
}

void declare_area_params(std::vector<Param>& out) {
  ParamSection<AreaParams>(out, "area", &ChipConfig::area)
      .add(&AreaParams::ref_nm, "ref_nm", 28.0, "nm",
           "node at which this section's figures are given (TPUv1's floor plan, ISCA 2017: 28 nm); scaled to "
           "chip.node_nm",
           1.0, 1000.0)
      .add(&AreaParams::node_exponent, "node_exponent", 2.0, "",
           "an area scales as (chip.node_nm / ref_nm)^node_exponent (2: with the square of the feature size, "
           "Dennard et al. 1974)",
           0.0, 4.0)
      .add(&AreaParams::mac_i8_um2, "mac_i8_um2", 1212.0, "um2",
           "one int8 MAC (PE) of a matrix unit, its weight registers included (TPUv1: 24% of 331 mm2 over 65,536)",
           0.0, 1e9)
      .add(&AreaParams::mac_bf16_um2, "mac_bf16_um2", 16850.0, "um2",
           "one bf16 MAC (PE) with f32 accumulation: mac_i8_um2 x 13.9, Horowitz's (ISSCC 2014) area of a 16-bit "
           "float multiply and a 32-bit float add over an 8-bit multiply and a 32-bit add",
           0.0, 1e9)
      .add(&AreaParams::pe_bf16, "pe_bf16", 1, "0/1",
           "1: each PE is a bf16 MAC (int8 runs on it; mxu.i8_rate - 1 more int8 MACs are added); 0: PEs of "
           "mxu.i8_rate int8 MACs only (TPUv1). The simulator runs both types either way",
           0, 1)
      .add(&AreaParams::sram_mm2_per_mib, "sram_mm2_per_mib", 4.0, "mm2/MiB",
           "VMEM and the [shared] level (TPUv1: the 24 MiB Unified Buffer is 29% of 331 mm2)", 0.0, 1e6)
      .add(&AreaParams::acc_mm2_per_mib, "acc_mm2_per_mib", 4.97, "mm2/MiB",
           "the accumulators (TPUv1: 4 MiB are 6% of 331 mm2)", 0.0, 1e6)
      .add(&AreaParams::vpu_mm2_per_lane, "vpu_mm2_per_lane", 0.0776, "mm2",
           "one lane of a vector unit, per vpu.lanes x vpu.sublanes (TPUv1: the 256-lane activation pipeline is "
           "6% of 331 mm2)",
           0.0, 1e6)
      .add(&AreaParams::core_mm2, "core_mm2", 6.62, "mm2", "each core's control and dispatch (TPUv1: 2% of 331 mm2)",
           0.0, 1e6)
      .add(&AreaParams::chip_io_mm2, "chip_io_mm2", 13.2, "mm2",
           "the chip's host and chip-to-chip I/O (PCIe, links), once per chip, not scaled (TPUv1: 4% of 331 mm2)",
           0.0, 1e6)
      .add(&AreaParams::memory_phy_mm2, "memory_phy_mm2", 60.0, "mm2",
           "the memory interfaces (PHYs and controllers), once per chip, not scaled (TPUv1's two DDR3 interfaces: "
           "3% of 331 mm2 each; an HBM stack's: about 15, assumption)",
           0.0, 1e6)
      .add(&AreaParams::other_fraction, "other_fraction", 0.23, "",
           "the share of the die outside the parts above (wiring, unlabelled blocks): the total is their sum / (1 - "
           "other_fraction) (TPUv1: the floor plan's parts above are 77% of the die)",
           0.0, 0.99);
}

}  // namespace detail

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

struct ActionInfo {
  const char* name;
  const char* unit;
};
constexpr std::array<ActionInfo, kNumActions> kActions = {{
    {"mac_i8", "mxu"},
    {"mac_bf16", "mxu"},
    {"vpu_float_add", "vpu"},
    {"vpu_float_mul", "vpu"},
    {"vpu_int_add", "vpu"},
    {"vpu_int_mul", "vpu"},
    {"vmem_read_bytes", "vmem"},
    {"vmem_write_bytes", "vmem"},
    {"acc_read_bytes", "accumulators"},
    {"acc_write_bytes", "accumulators"},
    {"wbuf_read_bytes", "weight_buffers"},
    {"wbuf_write_bytes", "weight_buffers"},
    {"dma_bytes", "dma"},
    {"hbm_read_bytes", "hbm"},
    {"hbm_write_bytes", "hbm"},
    {"shared_read_bytes", "shared"},
    {"shared_write_bytes", "shared"},
}};

double energy_scale(const ChipConfig& c) {
  return std::pow(c.chip.node_nm / c.energy.ref_nm, c.energy.node_exponent);
}
double area_scale(const ChipConfig& c) { return std::pow(c.chip.node_nm / c.area.ref_nm, c.area.node_exponent); }

// pJ per byte of an SRAM whose accesses touch a bank of `bank_bytes`, at energy.ref_nm: `given` when >= 0.
double sram_pj(const ChipConfig& c, double given, double bank_bytes) {
  if (given >= 0) return given;
  return c.energy.sram_pj_per_byte * std::pow(bank_bytes / kMiB, c.energy.sram_size_exponent);
}

}  // namespace

const char* action_name(Action a) { return kActions[static_cast<int>(a)].name; }
const char* action_unit(Action a) { return kActions[static_cast<int>(a)].unit; }

const std::vector<std::string>& energy_units() {
  static const std::vector<std::string> units = [] {
    std::vector<std::string> u;
    for (const ActionInfo& a : kActions)
      if (u.empty() || u.back() != a.unit) u.push_back(a.unit);
    return u;
  }();
  return units;
}

std::vector<double> Energy::by_unit_j() const {
  const auto& units = energy_units();
  std::vector<double> out(units.size(), 0.0);
  size_t u = 0;
  for (int i = 0; i < kNumActions; ++i) {
    while (units[u] != kActions[i].unit) ++u;
    out[u] += by_action_j[i];
  }
  return out;
}

EnergyModel energy_model(const ChipConfig& c) {
  const EnergyParams& e = c.energy;
  const double s = energy_scale(c);
  EnergyModel m;
  auto set = [&](Action a, double pj) { m.pj[static_cast<int>(a)] = pj; };
  set(Action::MacI8, e.mac_i8_pj * s);
  set(Action::MacBf16, e.mac_bf16_pj * s);
  set(Action::VpuFloatAdd, e.vpu_float_add_pj * s);
  set(Action::VpuFloatMul, e.vpu_float_mul_pj * s);
  set(Action::VpuIntAdd, e.vpu_int_add_pj * s);
  set(Action::VpuIntMul, e.vpu_int_mul_pj * s);
  const double vmem = sram_pj(c, e.vmem_pj_per_byte, static_cast<double>(c.vmem_bytes()) / c.vmem.banks) * s;
  set(Action::VmemRead, vmem);
  set(Action::VmemWrite, vmem);
  const double acc = sram_pj(c, e.acc_pj_per_byte, c.mxu.acc_rows * 4.0) * s;
  set(Action::AccRead, acc);
  set(Action::AccWrite, acc);
  const double wbuf = sram_pj(c, e.wbuf_pj_per_byte, c.mxu.rows * c.mxu.cols * 2.0) * s;
  set(Action::WbufRead, wbuf);
  set(Action::WbufWrite, wbuf);
  set(Action::DmaBytes, e.link_pj_per_byte * s);
  set(Action::HbmRead, e.hbm_pj_per_byte);
  set(Action::HbmWrite, e.hbm_pj_per_byte);
  const double shared_bank = static_cast<double>(c.shared.size_kib << 10) / c.shared.banks;
  const double shared = c.shared.size_kib ? sram_pj(c, e.shared_pj_per_byte, shared_bank) * s : 0.0;
  set(Action::SharedRead, shared);
  set(Action::SharedWrite, shared);
  m.static_w = e.static_w_per_mm2 * area_of(c).total_mm2;
  return m;
}

Energy dynamic_energy(const ActionCounts& counts, const EnergyModel& model) {
  Energy out;
  for (int i = 0; i < kNumActions; ++i) {
    out.by_action_j[i] = static_cast<double>(counts.n[i]) * model.pj[i] * 1e-12;
    out.dynamic_j += out.by_action_j[i];
  }
  return out;
}

Energy energy_of(const ActionCounts& counts, double seconds, const EnergyModel& model) {
  Energy out = dynamic_energy(counts, model);
  out.static_j = model.static_w * seconds;
  return out;
}

double Area::of(const std::string& part) const {
  for (const AreaPart& p : parts)
    if (p.name == part) return p.mm2;
  return 0.0;
}

Area area_of(const ChipConfig& c) {
  const AreaParams& a = c.area;
  const double s = area_scale(c);
  const double mxus = c.total_mxus(), cores = c.chip.cores;
  const double pe_um2 = a.pe_bf16 ? a.mac_bf16_um2 + (c.mxu.i8_rate - 1) * a.mac_i8_um2 : c.mxu.i8_rate * a.mac_i8_um2;
  Area out;
  auto add = [&](const char* name, double mm2) {
    out.parts.push_back({name, mm2});
    out.total_mm2 += mm2;
  };
  add("mxu", static_cast<double>(c.mxu.rows) * c.mxu.cols * mxus * pe_um2 * 1e-6 * s);
  add("vmem", static_cast<double>(c.vmem_bytes()) / kMiB * cores * a.sram_mm2_per_mib * s);
  add("accumulators", c.mxu.acc_rows * c.mxu.cols * 4.0 / kMiB * mxus * a.acc_mm2_per_mib * s);
  add("shared", static_cast<double>(c.shared.size_kib << 10) / kMiB * a.sram_mm2_per_mib * s);
  add("vpu", static_cast<double>(c.vpu.lanes) * c.vpu.sublanes * cores * a.vpu_mm2_per_lane * s);
  add("cores", cores * a.core_mm2 * s);
  add("chip_io", a.chip_io_mm2);
  add("memory_phy", a.memory_phy_mm2);
  add("other", out.total_mm2 * a.other_fraction / (1.0 - a.other_fraction));
  return out;
}

PeakPower peak_power(const ChipConfig& c) {
  const double hz = c.chip.clock_mhz * 1e6;
  const double mxus = c.total_mxus(), cores = c.chip.cores;
  const bool i8 = !c.area.pe_bf16;
  // Per matrix unit and cycle (weight-stationary): rows_in input rows of mxu.rows elements from VMEM, each
  // giving mxu.cols sums added into the accumulators (read and written).
  const double rows_in = i8 ? c.mxu.i8_rate : 1;
  const double elem = i8 ? 1 : 2;
  PeakPower p;
  ActionCounts& n = p.per_second;
  auto per_s = [&](double per_cycle) { return static_cast<uint64_t>(std::llround(per_cycle * hz)); };
  n[i8 ? Action::MacI8 : Action::MacBf16] = per_s(rows_in * c.mxu.rows * c.mxu.cols * mxus);
  const double hbm = c.hbm_bytes_per_cycle();
  n[Action::VmemRead] = per_s(rows_in * c.mxu.rows * elem * mxus);
  n[Action::VmemWrite] = per_s(hbm);
  n[Action::AccRead] = n[Action::AccWrite] = per_s(rows_in * c.mxu.cols * 4.0 * mxus);
  n[Action::VpuFloatAdd] = per_s(static_cast<double>(c.vpu.lanes) * c.vpu.sublanes * cores);
  n[Action::HbmRead] = n[Action::DmaBytes] = per_s(hbm);
  const EnergyModel m = energy_model(c);
  p.dynamic_w = dynamic_energy(n, m).dynamic_j;
  p.static_w = m.static_w;
  return p;
}

}  // namespace tpusim::sim
