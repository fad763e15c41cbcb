// The simulated chip's architecture, as a run-time value (docs/architecture.md decision 6).
//
// Each unit declares its own parameters (name, default, unit, help) next to the code that reads them; the
// presets in configs/*.ini, `--config FILE.ini` and `--set section.key=value` all go through those declarations,
// so an unknown key is an error and `tpusim config --show` lists every parameter with its help.
#pragma once

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"

namespace boost::program_options {
class error;
}

namespace tpusim::sim {

// Every error the sim library reports (bad configuration, run-time faults, deadlock); what() is one line.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct ChipParams {
  std::string name;     // chip.name
  double clock_mhz;     // chip.clock_mhz
  int cores;            // chip.cores: cores (each a dispatch core with its own units and VMEM), sharing HBM
  int sync_latency;     // chip.sync_latency: cycles for a barrier release or sem.signal to reach another core
  int cluster;          // chip.cluster: 2 = pairs of cores (2i, 2i+1) may share a load by multicast (dma.ld mcast)
  uint64_t launch_cycles;  // chip.launch_cycles: cycles from a run's start to its first instruction (launch)
  double node_nm;       // chip.node_nm: the process node, which scales the [energy] and [area] figures
};
struct CoreParams {
  int queue_depth;      // core.queue_depth: entries in each unit's instruction queue
  int mxus;             // core.mxus: matrix units per core, each its own array, weight buffers, queue, accumulators
  int issue_width;      // core.issue_width: instructions the core issues in one cycle, as a VLIW bundle (core.cpp)
  int scalar_slots;     // core.scalar_slots: of those, scalar instructions at most
};
struct MxuParams {
  int rows;             // mxu.rows: PE rows = the K extent of a weight tile
  int cols;             // mxu.cols: PE columns = the N extent of a weight tile
  int acc_rows;         // mxu.acc_rows: accumulator memory depth, rows of mxu.cols 32-bit words
  std::string dataflow; // mxu.dataflow: ws, os or is (sim/src/mxu.cpp, docs/dataflows.md)
  int i8_rate;          // mxu.i8_rate: input rows an i8 mxu.mm streams per cycle (bf16: 1), ws only
  int fp8_rate;         // mxu.fp8_rate: the same for f8e4m3; 0 = no fp8 on this chip
  double efficiency;    // mxu.efficiency: the array streams at this fraction of its rate (sustained, measured)
};
struct VpuParams {
  int lanes;            // vpu.lanes
  int sublanes;         // vpu.sublanes
  int latency;          // vpu.latency: pipeline cycles added to each instruction
  int special;          // vpu.special: results per cycle of exp, log, sin, cos, recip, rsqrt (0: the lanes' rate)
};
struct DmaParams {
  int latency;          // dma.latency: cycles from issue to first byte (the HBM access latency included)
  int engines;          // dma.engines: transfers each DMA queue (dma.ld, dma.st) may have in flight
  int local_latency;    // dma.local_latency: cycles from issue to first byte of a transfer within the core's VMEM
};
struct HbmParams {
  uint64_t size_mib;    // hbm.size_mib
  double bandwidth_gbs; // hbm.bandwidth_gbs: GB/s (1e9 bytes per second), all channels together
  int channels;         // hbm.channels: independent channels, each with bandwidth_gbs / channels
  int banks;            // hbm.banks: banks per channel
  uint64_t interleave_bytes;  // hbm.interleave_bytes: consecutive bytes on one channel (and bank)
  double t_rc_ns;       // hbm.t_rc_ns: row cycle time, the least time between two chunks served by one bank
  int channel_skew;     // hbm.channel_skew: 1 = rotate the channel order every `channels` chunks (address hash)
  double efficiency;    // hbm.efficiency: reads move at this fraction of bandwidth_gbs (sustained, measured)
  double write_efficiency;  // hbm.write_efficiency: writes move at this fraction of reads' rate
};
struct VmemParams {
  uint64_t size_kib;    // vmem.size_kib
  int banks;            // vmem.banks: banks, one port each
  uint64_t port_bytes_per_cycle;  // vmem.port_bytes_per_cycle: bytes one bank's port moves per cycle
  uint64_t interleave_bytes;      // vmem.interleave_bytes: consecutive bytes in one bank
};

// The shared on-chip memory level (TPU v4's CMEM, a GPU's L2 used as a scratchpad): one per chip, addressed by
// DMA with the `shared` flag, contended by every core. size_kib = 0: none.
struct SharedParams {
  uint64_t size_kib;    // shared.size_kib
  double bandwidth_gbs; // shared.bandwidth_gbs: all banks together
  int latency;          // shared.latency: cycles from a transfer's start to its first byte
  int banks;            // shared.banks: each with bandwidth_gbs / banks
  uint64_t interleave_bytes;  // shared.interleave_bytes: consecutive bytes in one bank
  int cache;            // shared.cache: 1 = a cache in front of HBM (a GPU's L2), not addressable
  int ways;             // shared.ways: its associativity (lines of interleave_bytes)
  int hash;             // shared.hash: 1 = addresses hashed over the banks (as hbm.channel_skew = 2)
  int write_back;       // shared.write_back: 1 = a store completes in the cache; HBM's writes drain behind it
};

// The energy model's figures (sim/src/energy.cpp, docs/energy.md): picojoules at energy.ref_nm, scaled to
// chip.node_nm by (node_nm / ref_nm)^node_exponent; HBM's and the static power are not scaled.
struct EnergyParams {
  double ref_nm, node_exponent;
  double mac_i8_pj, mac_bf16_pj;
  double vpu_float_add_pj, vpu_float_mul_pj, vpu_int_add_pj, vpu_int_mul_pj;
  double sram_pj_per_byte, sram_size_exponent;  // the SRAM rule: pJ per byte of a 1 MiB bank, and its exponent
  double vmem_pj_per_byte, acc_pj_per_byte, wbuf_pj_per_byte, shared_pj_per_byte;  // < 0: by the SRAM rule
  double link_pj_per_byte;
  double hbm_pj_per_byte;
  double static_w_per_mm2;
};
// The area model's figures (sim/src/energy.cpp, docs/energy.md): at area.ref_nm, scaled to chip.node_nm by
// (node_nm / ref_nm)^node_exponent; chip_io_mm2 and memory_phy_mm2 are not scaled.
struct AreaParams {
  double ref_nm, node_exponent;
  double mac_i8_um2, mac_bf16_um2;
  int pe_bf16;                 // 1: PEs do bf16 (and int8 on the same multiplier); 0: int8 only
  double sram_mm2_per_mib, acc_mm2_per_mib;
  double vpu_mm2_per_lane;
  double core_mm2, chip_io_mm2, memory_phy_mm2;
  double other_fraction;
};

struct ChipConfig {
  ChipParams chip;
  CoreParams core;
  MxuParams mxu;
  VpuParams vpu;
  DmaParams dma;
  HbmParams hbm;
  VmemParams vmem;
  SharedParams shared;
  EnergyParams energy;
  AreaParams area;

  // Derived quantities, computed here only.
  double hbm_bytes_per_cycle() const { return hbm.bandwidth_gbs * 1e3 / chip.clock_mhz; }
  uint64_t hbm_bytes() const { return hbm.size_mib << 20; }
  uint64_t vmem_bytes() const { return vmem.size_kib << 10; }
  // Elements per cycle of the vector unit, and of its special functions (exp, log, sin, cos, recip, rsqrt):
  // vpu.special when set and below the lanes' width, else the width.
  int64_t vpu_width() const { return static_cast<int64_t>(vpu.lanes) * vpu.sublanes; }
  int64_t vpu_special_width() const { return vpu.special > 0 ? std::min<int64_t>(vpu.special, vpu_width()) : vpu_width(); }
  // The addressable shared memory (0 when the shared level is a cache) and the cache's capacity (0 when not one).
  uint64_t shared_bytes() const { return shared.cache ? 0 : shared.size_kib << 10; }
  uint64_t cache_bytes() const { return shared.cache ? shared.size_kib << 10 : 0; }
  int total_mxus() const { return chip.cores * core.mxus; }
  // Accumulator rows of one core: every matrix unit's mxu.acc_rows, numbered across them.
  int64_t core_acc_rows() const { return static_cast<int64_t>(core.mxus) * mxu.acc_rows; }
  // The accumulators' bytes (32-bit words), which the vector unit and mxu.mm address right after VMEM's
  // (isa.def: local addresses [vmem_bytes(), local_bytes())).
  uint64_t acc_bytes() const { return static_cast<uint64_t>(core_acc_rows()) * mxu.cols * 4; }
  uint64_t local_bytes() const { return vmem_bytes() + acc_bytes(); }
  // Peak multiply-accumulates per cycle of the whole chip, for inputs of `i8` (else bf16).
  double peak_macs_per_cycle(bool i8 = false) const {
    return static_cast<double>(mxu.rows) * mxu.cols * total_mxus() * (i8 ? mxu.i8_rate : 1);
  }
  // ... for inputs of type `in` (i8, bf16 or f8e4m3; 0 for f8e4m3 on a chip without an fp8 rate).
  double peak_macs_per_cycle(isa::DType in) const {
    const int rate = in == isa::DType::I8 ? mxu.i8_rate : in == isa::DType::F8E4M3 ? mxu.fp8_rate : 1;
    return static_cast<double>(mxu.rows) * mxu.cols * total_mxus() * rate;
  }
  double seconds(uint64_t cycles) const { return static_cast<double>(cycles) / (chip.clock_mhz * 1e6); }
};

// One parameter as `tpusim config --show` prints it.
struct ParamInfo {
  std::string key;            // "mxu.rows"
  std::string value;
  std::string default_value;
  std::string unit;           // "PEs", "cycles", "GB/s", ...
  std::string help;
};

std::vector<std::string> preset_names();            // "v1-like", "v4-like", "edge", ...
const std::string& default_preset();                // the one used when no --config is given
std::string preset_text(const std::string& name);   // the preset's INI text; throws Error if unknown

// `source` is a preset name or the path of an INI file (one [section] per unit); `sets` are "section.key=value"
// overrides applied afterwards. Throws Error on an unknown preset, missing file, unknown key or bad value.
ChipConfig load_config(const std::string& source, const std::vector<std::string>& sets = {});
std::vector<ParamInfo> describe(const ChipConfig& cfg);
// Symbols a kernel may use (MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES, ...), passed to the assembler.
std::vector<std::pair<std::string, int64_t>> kernel_symbols(const ChipConfig& cfg);

// The one-line message of a Boost.Program_options error (a config file's or a command line's), with the user's
// text in it quoted through isa::printable. Never call such an error's what() directly: Boost's placeholder
// substitution loops forever when that text holds the placeholder itself ("%invalid_line%", "%value%").
std::string option_error_text(const boost::program_options::error& e);

}  // namespace tpusim::sim
