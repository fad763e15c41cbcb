// Configuration: presets, INI files, --set overrides, errors, describe() and kernel symbols.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>

#include "test_util.h"

namespace tpusim::sim {
namespace {

std::string temp_ini(const std::string& name, const std::string& text) {
  auto path = (std::filesystem::temp_directory_path() / ("tpusim_sim_test_" + name + ".ini")).string();
  std::ofstream(path) << text;
  return path;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, PresetsAreListedAndLoad) {
  EXPECT_EQ(preset_names(),
            (std::vector<std::string>{"v1-like", "v4-like", "edge", "v1", "v4", "v5e", "v6e", "h200-like"}));
  EXPECT_EQ(default_preset(), "v4-like");
  for (const auto& name : preset_names()) {
    ChipConfig c = load_config(name);
    EXPECT_EQ(c.chip.name, name);
    EXPECT_NE(preset_text(name).find("[mxu]"), std::string::npos);
  }
}

TEST(Config, V1LikeFollowsTheIsca2017Paper) {
  ChipConfig c = load_config("v1-like");
  EXPECT_EQ(c.chip.clock_mhz, 700);
  EXPECT_EQ(c.mxu.rows, 256);
  EXPECT_EQ(c.mxu.cols, 256);
  EXPECT_EQ(c.mxu.acc_rows, 4096);            // 4 MiB of 256 x 32-bit words
  EXPECT_EQ(c.vmem_bytes(), 24ull << 20);     // 24 MiB Unified Buffer
  EXPECT_EQ(c.hbm_bytes(), 8ull << 30);       // 8 GiB DDR3
  EXPECT_EQ(c.hbm.bandwidth_gbs, 34);
  EXPECT_EQ(c.vpu.lanes * c.vpu.sublanes, 256);
  EXPECT_EQ(c.dma.latency, 70);
  EXPECT_EQ(c.core.queue_depth, 32);
}

TEST(Config, V4LikeAndEdge) {
  ChipConfig v4 = load_config("v4-like");
  EXPECT_EQ(v4.chip.clock_mhz, 1050);
  EXPECT_EQ(v4.mxu.rows, 128);
  EXPECT_EQ(v4.mxu.acc_rows, 2048);
  EXPECT_EQ(v4.vmem_bytes(), 16ull << 20);
  EXPECT_EQ(v4.hbm_bytes(), 32ull << 30);
  EXPECT_EQ(v4.hbm.bandwidth_gbs, 1200);
  EXPECT_EQ(v4.vpu.lanes, 128);
  EXPECT_EQ(v4.vpu.sublanes, 8);
  ChipConfig edge = load_config("edge");
  EXPECT_EQ(edge.chip.clock_mhz, 500);
  EXPECT_EQ(edge.mxu.rows, 32);
  EXPECT_DOUBLE_EQ(edge.hbm.bandwidth_gbs, 25.6);
  EXPECT_DOUBLE_EQ(edge.hbm_bytes_per_cycle(), 51.2);
  EXPECT_EQ(edge.core.queue_depth, 16);
}

TEST(Config, DeclaredDefaultsAreTheV4LikePreset) {
  for (const ParamInfo& p : describe(load_config("v4-like"))) {
    if (p.key == "chip.name") continue;
    EXPECT_EQ(p.value, p.default_value) << p.key;
  }
}

// The whole-chip presets against the figures their makers publish (FACTS.md): peak matrix throughput from
// cores x matrix units x rows x cols x 2 x clock (and int8 at mxu.i8_rate, fp8 at mxu.fp8_rate: 0 where the maker
// publishes no fp8 rate, as for TPU v1 to v6e), HBM bandwidth, capacities. Within 1%: clocks are rounded to whole
// MHz where only the peak is published.
TEST(Config, WholeChipPresetsMatchPublishedFigures) {
  struct Want {
    const char* name;
    double tflops_bf16, tops_i8, hbm_gbs;
    int cores, mxus;
    double tflops_fp8;
  };
  for (const Want& w : {Want{"v1", 91.75, 91.75, 34, 1, 1, 0}, Want{"v4", 275, 275, 1200, 2, 4, 0},
                        Want{"v5e", 197, 393, 819, 1, 4, 0}, Want{"v6e", 918, 1836, 1640, 1, 4, 0},
                        // h200-like: an SM's four tensor cores as one matrix unit (configs/h200-like.ini says why)
                        Want{"h200-like", 989, 1979, 4800, 132, 1, 1979}}) {
    ChipConfig c = load_config(w.name);
    const double hz = c.chip.clock_mhz * 1e6;
    EXPECT_NEAR(2 * c.peak_macs_per_cycle() * hz / 1e12, w.tflops_bf16, w.tflops_bf16 * 0.01) << w.name;
    EXPECT_NEAR(2 * c.peak_macs_per_cycle(true) * hz / 1e12, w.tops_i8, w.tops_i8 * 0.01) << w.name;
    EXPECT_NEAR(2 * c.peak_macs_per_cycle(isa::DType::F8E4M3) * hz / 1e12, w.tflops_fp8, w.tflops_fp8 * 0.01)
        << w.name;
    EXPECT_EQ(c.peak_macs_per_cycle(isa::DType::BF16), c.peak_macs_per_cycle()) << w.name;
    EXPECT_DOUBLE_EQ(c.hbm.bandwidth_gbs, w.hbm_gbs) << w.name;
    EXPECT_EQ(c.chip.cores, w.cores) << w.name;
    EXPECT_EQ(c.core.mxus, w.mxus) << w.name;
  }
  EXPECT_EQ(load_config("v4").shared_bytes(), uint64_t(128) << 20);   // 128 MiB CMEM
  EXPECT_EQ(load_config("v4").vmem_bytes(), uint64_t(16) << 20);      // 16 MiB per TensorCore
  EXPECT_EQ(load_config("h200-like").vmem_bytes(), uint64_t(228) << 10);  // 228 KB per SM
  // 50 MB L2, a cache in front of HBM (not addressable)
  EXPECT_EQ(load_config("h200-like").cache_bytes(), uint64_t(50) << 20);
  EXPECT_EQ(load_config("h200-like").shared_bytes(), 0u);
  // A TensorCore issues VLIW bundles with 2 scalar slots and 6 for its units (Norrie et al., IEEE Micro 2021)
  for (const char* tpu : {"v4", "v5e", "v6e"}) {
    EXPECT_EQ(load_config(tpu).core.issue_width, 8) << tpu;
    EXPECT_EQ(load_config(tpu).core.scalar_slots, 2) << tpu;
  }
}

TEST(Config, DescribeListsEveryParameterWithHelp) {
  auto params = describe(load_config("edge", {"mxu.rows=8"}));
  // 46 of the chip's units (core.issue_width and core.scalar_slots the newest), 17 of [energy], 12 of [area]
  ASSERT_EQ(params.size(), 76u);
  for (const ParamInfo& p : params) EXPECT_FALSE(p.help.empty()) << p.key;
  auto rows = std::find_if(params.begin(), params.end(), [](const ParamInfo& p) { return p.key == "mxu.rows"; });
  ASSERT_NE(rows, params.end());
  EXPECT_EQ(rows->value, "8");
  EXPECT_EQ(rows->default_value, "128");
  EXPECT_EQ(rows->unit, "PEs");
}

TEST(Config, SetOverridesThePresetAndTheLastSetWins) {
  ChipConfig c = load_config("edge", {"mxu.rows=8", "hbm.bandwidth_gbs=12.5", "mxu.rows=16", "chip.name=mine"});
  EXPECT_EQ(c.mxu.rows, 16);
  EXPECT_EQ(c.mxu.cols, 32);
  EXPECT_DOUBLE_EQ(c.hbm.bandwidth_gbs, 12.5);
  EXPECT_EQ(c.chip.name, "mine");
}

TEST(Config, IniFileWithDefaultsForMissingKeys) {
  std::string path = temp_ini("file", "# a comment\n[mxu]\nrows = 64\ncols = 32\n\n[chip]\nname = x\n");
  ChipConfig c = load_config(path, {"mxu.cols=16"});
  EXPECT_EQ(c.mxu.rows, 64);
  EXPECT_EQ(c.mxu.cols, 16);
  EXPECT_EQ(c.mxu.acc_rows, 2048);  // declared default
  EXPECT_EQ(c.chip.name, "x");
  std::remove(path.c_str());
}

TEST(Config, UnknownKeyNamesKeyAndSource) {
  std::string path = temp_ini("unknown", "[mxu]\nfoo = 1\n");
  EXPECT_EQ(error_of([&] { load_config(path); }), "unknown configuration key 'mxu.foo' (in " + path + ")");
  std::remove(path.c_str());
  EXPECT_EQ(error_of([] { load_config("edge", {"vpu.width=3"}); }),
            "unknown configuration key 'vpu.width' (in --set vpu.width=3)");
}

TEST(Config, BadValuesNameTheKey) {
  EXPECT_EQ(error_of([] { load_config("edge", {"mxu.rows=abc"}); }),
            "bad value 'abc' for mxu.rows (in --set mxu.rows=abc): expected an integer");
  EXPECT_EQ(error_of([] { load_config("edge", {"mxu.rows=0"}); }),
            "mxu.rows = 0 must be in [1, 1024] (in --set mxu.rows=0)");
  EXPECT_EQ(error_of([] { load_config("edge", {"mxu.cols=2048"}); }),
            "mxu.cols = 2048 must be in [1, 1024] (in --set mxu.cols=2048)");
  EXPECT_EQ(error_of([] { load_config("edge", {"chip.clock_mhz=-5"}); }),
            "chip.clock_mhz = -5 must be in [0.001, 1000000] (in --set chip.clock_mhz=-5)");
  EXPECT_EQ(error_of([] { load_config("edge", {"mxu.rows"}); }), "bad --set 'mxu.rows': expected section.key=value");
  std::string path = temp_ini("dup", "[mxu]\nrows = 4\nrows = 8\n");
  EXPECT_EQ(error_of([&] { load_config(path); }), "configuration key 'mxu.rows' given twice (in " + path + ")");
  std::remove(path.c_str());
}

// Found by fuzz_config (validation/fuzz): a value that is not UTF-8 made Boost throw std::logic_error ("character
// conversion failed"), which escaped load_config instead of a sim::Error naming the key.
TEST(Config, ValueNotUtf8IsABadValue) {
  std::string path = temp_ini("utf8", "[mxu]\nrows = 64\ncols = 6\xd6\n");
  EXPECT_EQ(error_of([&] { load_config(path); }),
            "bad value '6\\xd6' for mxu.cols (in " + path + "): expected an integer");
  std::remove(path.c_str());
}

TEST(Config, UnknownPresetListsThePresets) {
  EXPECT_EQ(error_of([] { load_config("v9-like"); }),
            "unknown preset or configuration file 'v9-like' (presets: v1-like, v4-like, edge, v1, v4, v5e, v6e, "
            "h200-like)");
  EXPECT_EQ(error_of([] { preset_text("v9-like"); }), "unknown preset 'v9-like' (presets: v1-like, v4-like, edge, v1, v4, v5e, v6e, h200-like)");
}

TEST(Config, KernelSymbols) {
  auto syms = kernel_symbols(load_config("v4-like"));
  std::map<std::string, int64_t> m(syms.begin(), syms.end());
  EXPECT_EQ(m.at("MXU_ROWS"), 128);
  EXPECT_EQ(m.at("MXU_COLS"), 128);
  EXPECT_EQ(m.at("ACC_ROWS"), 2048);
  EXPECT_EQ(m.at("VMEM_BYTES"), 16 << 20);
  EXPECT_EQ(m.at("VPU_WIDTH"), 1024);
  EXPECT_EQ(m.at("VPU_SPECIAL"), 1024);  // vpu.special unset: the lanes' rate
  EXPECT_EQ(m.at("HBM_BYTES"), int64_t(32) << 30);
  // h200-like: an SM's 16 special function units against its 128 FP32 lanes; a value above the lanes' is theirs.
  auto at = [](const ChipConfig& c, const char* name) {
    for (const auto& [k, v] : kernel_symbols(c))
      if (k == name) return v;
    return int64_t{-1};
  };
  EXPECT_EQ(at(load_config("h200-like"), "VPU_SPECIAL"), 16);
  EXPECT_EQ(at(load_config("h200-like"), "VPU_WIDTH"), 128);
  EXPECT_EQ(at(load_config("v4-like", {"vpu.special=4096"}), "VPU_SPECIAL"), 1024);
}

// Boost's own message for these loops forever ("%invalid_line%" holds its own placeholder): issue 13, finding 2.
TEST(Config, InvalidLineAndLineBreakInSetAreErrorsNotHangs) {
  const std::string path = temp_ini("invalid_line", "%invalid_line%\n");
  EXPECT_EQ(error_of([&] { load_config(path); }),
            "the options configuration file contains an invalid line '%invalid_line%' (in " + path + ")");
  EXPECT_EQ(error_of([] { load_config("v4-like", {"mxu.rows=4\n%invalid_line%"}); }),
            "bad --set 'mxu.rows=4\\n%invalid_line%': a value holds a line break");
  EXPECT_EQ(error_of([] { load_config("v4-like", {"mxu.rows=%value%"}); }),
            "bad value '%value%' for mxu.rows (in --set mxu.rows=%value%): expected an integer");
}

}  // namespace
}  // namespace tpusim::sim
