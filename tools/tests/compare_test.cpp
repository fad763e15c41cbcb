// tpusim compare (tools/compare.h): the metrics on small vectors worked out by hand, bf16 ulp distances on known
// neighbours, and the command's exit codes on files written here.
#include "compare.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <unistd.h>

#include "cli.h"
#include "tpusim/runtime/npy.h"

namespace fs = std::filesystem;
using tpusim::cli::bf16_bits;
using tpusim::cli::bf16_ulp_distance;
using tpusim::cli::compare_values;

namespace {

float from_bits(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

TEST(CompareMath, IdenticalVectors) {
  auto s = compare_values({1, 2, 3}, {1, 2, 3});
  EXPECT_EQ(s.elements, 3u);
  EXPECT_DOUBLE_EQ(s.cosine, 1.0);
  EXPECT_DOUBLE_EQ(s.rel_l2, 0.0);
  EXPECT_DOUBLE_EQ(s.max_abs, 0.0);
  EXPECT_EQ(s.max_ulp_bf16, 0);
}

TEST(CompareMath, HandComputed) {
  // a = (3, 4), b = (3, 5): <a,b> = 29, |a| = 5, |b| = sqrt(34); a - b = (0, -1).
  auto s = compare_values({3, 4}, {3, 5});
  EXPECT_NEAR(s.cosine, 29.0 / (5.0 * 5.830951894845301), 1e-15);  // 0.994692...
  EXPECT_NEAR(s.cosine, 0.9946917938265513, 1e-15);
  EXPECT_DOUBLE_EQ(s.rel_l2, 0.2);  // 1 / 5
  EXPECT_DOUBLE_EQ(s.max_abs, 1.0);
  // 4 and 5 are both bf16 (0x4080, 0x40A0); between 4 and 8 the step is 2^-5, so 1 / 2^-5 = 32 steps.
  EXPECT_EQ(s.max_ulp_bf16, 32);

  // Orthogonal: cosine 0, |a - b| = sqrt(2), |a| = 1.
  s = compare_values({1, 0}, {0, 1});
  EXPECT_DOUBLE_EQ(s.cosine, 0.0);
  EXPECT_NEAR(s.rel_l2, 1.4142135623730951, 1e-15);
  EXPECT_DOUBLE_EQ(s.max_abs, 1.0);

  // Opposite: cosine -1, |a - b| = |(2, -2)| = 2 sqrt(2), |a| = sqrt(2): rel 2; bf16 1.0 is 0x3F80, so 1 and -1
  // are 2 * 0x3F80 = 32512 steps apart through zero.
  s = compare_values({1, -1}, {-1, 1});
  EXPECT_DOUBLE_EQ(s.cosine, -1.0);
  EXPECT_DOUBLE_EQ(s.rel_l2, 2.0);
  EXPECT_DOUBLE_EQ(s.max_abs, 2.0);
  EXPECT_EQ(s.max_ulp_bf16, 32512);

  // A scaled copy: cosine exactly 1, rel L2 = 0.5 (b = 1.5 a), max abs = 0.5 * 4.
  s = compare_values({1, -2, 4}, {1.5, -3, 6});
  EXPECT_NEAR(s.cosine, 1.0, 1e-15);
  EXPECT_NEAR(s.rel_l2, 0.5, 1e-15);
  EXPECT_DOUBLE_EQ(s.max_abs, 2.0);
  // 4 -> 6: 0x4080 -> 0x40C0, 64 steps (the largest of the three: 1 -> 1.5 is 64 too, 2 -> 3 is 64).
  EXPECT_EQ(s.max_ulp_bf16, 64);
}

TEST(CompareMath, ZerosAndNaN) {
  auto s = compare_values({0, 0}, {0, 0});
  EXPECT_DOUBLE_EQ(s.cosine, 1.0);
  EXPECT_DOUBLE_EQ(s.rel_l2, 0.0);
  s = compare_values({0, 0}, {0, 1});
  EXPECT_DOUBLE_EQ(s.cosine, 0.0);
  EXPECT_TRUE(std::isinf(s.rel_l2));
  s = compare_values({1, 0}, {0, 0});
  EXPECT_DOUBLE_EQ(s.cosine, 0.0);
  EXPECT_DOUBLE_EQ(s.rel_l2, 1.0);
  double nan = std::numeric_limits<double>::quiet_NaN();
  s = compare_values({1, 2}, {1, nan});
  EXPECT_EQ(s.nan_a, 0u);
  EXPECT_EQ(s.nan_b, 1u);
  EXPECT_TRUE(std::isnan(s.cosine));
  EXPECT_TRUE(std::isnan(s.rel_l2));
  EXPECT_DOUBLE_EQ(s.max_abs, 0.0);  // NaN positions are left out of max_abs and max_ulp
  EXPECT_THROW(compare_values({1}, {1, 2}), std::invalid_argument);
}

TEST(Bf16, RoundingToNearestEven) {
  EXPECT_EQ(bf16_bits(1.0f), 0x3F80);
  EXPECT_EQ(bf16_bits(-2.0f), 0xC000);
  EXPECT_EQ(bf16_bits(1.00390625f), 0x3F80);    // 1 + 2^-8: halfway between 0x3F80 and 0x3F81, to even
  EXPECT_EQ(bf16_bits(1.01171875f), 0x3F82);    // 1 + 3 * 2^-8: halfway between 0x3F81 and 0x3F82, to even
  EXPECT_EQ(bf16_bits(std::nextafter(1.00390625f, 2.0f)), 0x3F81);  // just above the halfway point: up
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::max()), 0x7F80);  // rounds up past bf16's largest: inf
  EXPECT_EQ(bf16_bits(std::numeric_limits<float>::infinity()), 0x7F80);
  EXPECT_EQ(bf16_bits(std::nanf("")) & 0x7FC0, 0x7FC0);
}

TEST(Bf16, UlpDistanceOnKnownNeighbours) {
  EXPECT_EQ(bf16_ulp_distance(1.0f, 1.0f), 0);
  EXPECT_EQ(bf16_ulp_distance(1.0f, 1.0078125f), 1);   // 0x3F80 -> 0x3F81 (step 2^-7 above 1)
  EXPECT_EQ(bf16_ulp_distance(1.0f, 0.99609375f), 1);  // 0x3F80 -> 0x3F7F (step 2^-8 below 1)
  EXPECT_EQ(bf16_ulp_distance(0.99609375f, 1.0078125f), 2);
  EXPECT_EQ(bf16_ulp_distance(1.0f, 1.00390625f), 0);  // the tie rounds to 1.0 itself
  EXPECT_EQ(bf16_ulp_distance(1.0f, 1.01171875f), 2);  // the tie rounds up to 0x3F82
  EXPECT_EQ(bf16_ulp_distance(-1.0f, -1.0078125f), 1);  // symmetric for negatives
  EXPECT_EQ(bf16_ulp_distance(-1.0f, 1.0f), 2 * 0x3F80);
  // Across zero: +0 and -0 are one value; the smallest subnormals are one step from zero, two from each other.
  float tiny = from_bits(0x0001), neg_tiny = from_bits(0x8001);
  EXPECT_EQ(bf16_ulp_distance(0.0f, -0.0f), 0);
  EXPECT_EQ(bf16_ulp_distance(0.0f, tiny), 1);
  EXPECT_EQ(bf16_ulp_distance(-0.0f, tiny), 1);
  EXPECT_EQ(bf16_ulp_distance(neg_tiny, 0.0f), 1);
  EXPECT_EQ(bf16_ulp_distance(neg_tiny, tiny), 2);
  EXPECT_EQ(bf16_ulp_distance(from_bits(0x8003), from_bits(0x0002)), 5);
  // The top: the largest finite bf16 (0x7F7F) is one step from inf.
  EXPECT_EQ(bf16_ulp_distance(from_bits(0x7F7F), std::numeric_limits<float>::infinity()), 1);
  EXPECT_EQ(bf16_ulp_distance(from_bits(0x7F7E), from_bits(0x7F7F)), 1);
  EXPECT_EQ(bf16_ulp_distance(std::nanf(""), 1.0f), -1);
}

// The command on files: exit 0 when all match, 1 for a missed threshold, a shape difference or a missing file.
class CompareCommand : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tpusim_compare_test_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "a");
    fs::create_directories(dir_ / "b");
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& rel, std::vector<int64_t> shape, std::vector<float> v) {
    tpusim::runtime::HostTensor t;
    t.dtype = tpusim::isa::DType::F32;
    t.shape = shape;
    t.data.resize(v.size() * 4);
    std::memcpy(t.data.data(), v.data(), t.data.size());
    tpusim::runtime::write_npy((dir_ / rel).string(), t);
  }
  int run(std::vector<std::string> args) {
    testing::internal::CaptureStdout();
    try {
      int rc = tpusim::cli::cmd_compare(args);
      out_ = testing::internal::GetCapturedStdout();
      return rc;
    } catch (...) {
      out_ = testing::internal::GetCapturedStdout();
      throw;
    }
  }
  std::string p(const std::string& rel) { return (dir_ / rel).string(); }
  fs::path dir_;
  std::string out_;
};

TEST_F(CompareCommand, FilesAndThresholds) {
  write("a/y.npy", {2}, {3, 4});
  write("b/y.npy", {2}, {3, 5});
  EXPECT_EQ(run({p("a/y.npy"), p("b/y.npy")}), 0) << out_;  // no threshold: report only
  EXPECT_NE(out_.find("0.2"), std::string::npos) << out_;
  EXPECT_EQ(run({p("a/y.npy"), p("b/y.npy"), "--max-rel-l2", "0.25"}), 0) << out_;
  EXPECT_EQ(run({p("a/y.npy"), p("b/y.npy"), "--max-rel-l2", "0.15"}), 1) << out_;
  EXPECT_NE(out_.find("FAIL: rel_l2 > 0.15"), std::string::npos) << out_;
  EXPECT_EQ(run({p("a/y.npy"), p("b/y.npy"), "--min-cosine=0.99"}), 0) << out_;
  EXPECT_EQ(run({p("a/y.npy"), p("b/y.npy"), "--min-cosine=0.999"}), 1) << out_;
  // A file against a folder: the folder's file of the same name.
  EXPECT_EQ(run({p("a/y.npy"), p("b"), "--max-rel-l2", "0.25"}), 0) << out_;
}

TEST_F(CompareCommand, FoldersShapesAndMissingFiles) {
  write("a/x.npy", {2, 2}, {1, 2, 3, 4});
  write("b/x.npy", {2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(run({p("a"), p("b"), "--max-rel-l2", "0"}), 0) << out_;
  write("a/only_a.npy", {1}, {1});
  EXPECT_EQ(run({p("a"), p("b")}), 1) << out_;
  EXPECT_NE(out_.find("only_a.npy  FAIL: missing in B"), std::string::npos) << out_;
  fs::remove(dir_ / "a/only_a.npy");
  write("b/x.npy", {4}, {1, 2, 3, 4});
  EXPECT_EQ(run({p("a"), p("b")}), 1) << out_;
  EXPECT_NE(out_.find("shapes differ: [2,2] in A, [4] in B"), std::string::npos) << out_;
}

TEST_F(CompareCommand, UsageMistakes) {
  write("a/y.npy", {1}, {1});
  EXPECT_THROW(run({p("a/y.npy")}), tpusim::cli::UsageError);
  EXPECT_THROW(run({p("a/y.npy"), p("a/y.npy"), "--max-rel-l2"}), tpusim::cli::UsageError);
  EXPECT_THROW(run({p("a/y.npy"), p("a/y.npy"), "--max-rel-l2", "abc"}), tpusim::cli::UsageError);
  EXPECT_THROW(run({p("a/y.npy"), p("a/y.npy"), "--frob"}), tpusim::cli::UsageError);
  EXPECT_THROW(run({p("a/y.npy"), p("nothing_here.npy")}), std::runtime_error);
}

}  // namespace
