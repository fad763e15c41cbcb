// The energy and area models (docs/energy.md): what a run did, counted by the units as they did it (actions), and
// what each action costs; the chip's area by part; its static power.
//
// Energy of a run = sum over actions a of count(a) * pj(a) + static power * the run's seconds. The counts are the
// simulator's own (each unit counts what it moves or computes, in sim/src/<unit>.cpp), never estimated from
// shapes; the per-action energies and the areas come from the [energy] and [area] parameters, scaled from the
// node their figures were published at to the chip's chip.node_nm (energy_model(), area_of()).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tpusim/sim/config.h"

namespace tpusim::sim {

// What a unit does that costs energy. Every action is counted where the simulator does it:
enum class Action : uint8_t {
  MacI8,        // mxu.mm: one int8 multiply-accumulate (m * k * n per instruction)
  MacBf16,      // mxu.mm: one bf16 multiply-accumulate (f32 accumulation)
  VpuFloatAdd,  // vector unit: one element of an add-like operation (add, sub, max, min, relu, rsum, rmax, the
                // row broadcasts but mulrow, cast, vpu.acc) on f32 or bf16 (computed in f32)
  VpuFloatMul,  // ... of a multiply-like one (mul, mulrow, exp, recip, rsqrt) on f32 or bf16
  VpuIntAdd,    // ... of an add-like operation on i32 or i8
  VpuIntMul,    // ... of vpu.mul / vpu.mulrow on i32
  VmemRead,     // bytes read from VMEM (by DMA stores and gathers' indices, the matrix unit, the vector unit)
  VmemWrite,    // bytes written into VMEM (by DMA loads, the vector unit)
  AccRead,      // bytes read from the accumulators (vpu.acc; mxu.mm with accumulate, which adds to them)
  AccWrite,     // bytes written into the accumulators (mxu.mm: m * n * 4)
  WbufRead,     // bytes of a weight tile read from the matrix unit's weight buffers into the array (weight-
                // stationary: once, when an mm swaps the tile in; output- and input-stationary: once per fold)
  WbufWrite,    // bytes written into the weight buffers (mxu.lw: its k x n tile)
  DmaBytes,     // bytes a DMA transfer carries over the chip's interconnect between HBM or [shared] and VMEM
  HbmRead,      // bytes read from HBM (a cache's hits are read from the shared level instead)
  HbmWrite,     // bytes written to HBM
  SharedRead,   // bytes read from the [shared] level (dma ... shared; a cache's hits)
  SharedWrite,  // bytes written to it (dma.st ... shared; as a cache: the lines it fills on misses, and stores)
  Count
};
inline constexpr int kNumActions = static_cast<int>(Action::Count);

// "mac_i8", "vmem_read", ...: the action's key in the stats file.
const char* action_name(Action a);
// The part of the chip an action's energy is booked to: "mxu", "vpu", "vmem", "accumulators", "weight_buffers",
// "dma", "hbm", "shared".
const char* action_unit(Action a);
// The units of action_unit, in the stats file's order (then "static").
const std::vector<std::string>& energy_units();

struct ActionCounts {
  std::array<uint64_t, kNumActions> n{};
  uint64_t& operator[](Action a) { return n[static_cast<int>(a)]; }
  uint64_t operator[](Action a) const { return n[static_cast<int>(a)]; }
  ActionCounts& operator+=(const ActionCounts& o) {
    for (int i = 0; i < kNumActions; ++i) n[i] += o.n[i];
    return *this;
  }
  bool operator==(const ActionCounts&) const = default;
};

// The cost of each action on this chip, in picojoules, and its static power.
struct EnergyModel {
  std::array<double, kNumActions> pj{};  // by Action, at chip.node_nm
  double static_w = 0;                   // energy.static_w_per_mm2 * the chip's area
  double pj_of(Action a) const { return pj[static_cast<int>(a)]; }
};
EnergyModel energy_model(const ChipConfig& cfg);

// Energy of a run (or of a part of one), in joules.
struct Energy {
  std::array<double, kNumActions> by_action_j{};
  double dynamic_j = 0;  // sum of by_action_j
  double static_j = 0;   // static power * seconds
  double total_j() const { return dynamic_j + static_j; }
  // by_action_j summed per action_unit(), in energy_units() order.
  std::vector<double> by_unit_j() const;
};
Energy dynamic_energy(const ActionCounts& counts, const EnergyModel& model);  // static_j = 0
Energy energy_of(const ActionCounts& counts, double seconds, const EnergyModel& model);

// The chip's area by part, in mm2 (area_of(); docs/energy.md): "mxu" (every PE of every matrix unit), "vmem",
// "accumulators", "shared", "vpu", "cores" (each core's control), "chip_io", "memory_phy", "other" (the share of a
// die outside the parts above: area.other_fraction of the total).
struct AreaPart {
  std::string name;
  double mm2 = 0;
};
struct Area {
  std::vector<AreaPart> parts;
  double total_mm2 = 0;  // the sum of parts
  double of(const std::string& part) const;
};
Area area_of(const ChipConfig& cfg);

// The model's peak power, for comparison with a chip's TDP (docs/energy.md, "Calibration"): every matrix unit
// streaming one input row per cycle at its densest data type (bf16, or int8 at mxu.i8_rate where area.pe_bf16 =
// 0), reading that row from VMEM and adding into its accumulators; the vector unit on every lane (f32 adds); HBM
// read at its full bandwidth into VMEM over DMA; plus static power.
struct PeakPower {
  ActionCounts per_second;  // the actions of one second at peak
  double dynamic_w = 0, static_w = 0;
  double total_w() const { return dynamic_w + static_w; }
};
PeakPower peak_power(const ChipConfig& cfg);

}  // namespace tpusim::sim
