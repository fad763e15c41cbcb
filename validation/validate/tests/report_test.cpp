// Tests of tpusim validate's report side (report.h): the statistics on errors worked out by hand, failed cases
// left out of them, and the files read back: cases.csv and summary.csv with a small CSV parser, summary.md's
// tables, scatter.svg's structure (and, with python3, its well-formedness as XML).
#include "report.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>

#include <gtest/gtest.h>

namespace tpusim::validate {
namespace {

namespace fs = std::filesystem;

Case make(const std::string& cls, double measured, double simulated, Regime r = Regime::Compute, bool held_out = false) {
  Case c;
  c.cls = cls;
  c.shape = {{"m", 4096}, {"n", 1024}, {"k", 512}};
  c.flops = 2.0 * 4096 * 1024 * 512;
  c.bytes = 2.0 * (4096 * 512 + 1024 * 512 + 4096 * 1024);
  c.measured_us = measured;
  c.simulated_us = simulated;
  c.roofline_us = measured;  // a perfect baseline unless a test says otherwise
  c.regime = r;
  c.held_out = held_out;
  c.wall_s = 0.25;
  return c;
}

std::vector<const Case*> ptrs(const std::vector<Case>& v) {
  std::vector<const Case*> p;
  for (const Case& c : v) p.push_back(&c);
  return p;
}

// A fresh folder per test under the system's temporary folder, removed at the end.
class Dir {
 public:
  Dir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = fs::temp_directory_path() / ("tpusim_report_test_" + std::string(info->name()) + "_" +
                                         std::to_string(std::random_device{}()));
    fs::remove_all(path_);
  }
  ~Dir() { fs::remove_all(path_); }
  std::string str() const { return path_.string(); }
  fs::path operator/(const std::string& name) const { return path_ / name; }

 private:
  fs::path path_;
};

std::string read(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// RFC 4180, independent of the writer: quoted fields may hold commas, doubled quotes and line breaks.
std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, at_start = true;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') field += '"', ++i;
      else if (c == '"') quoted = false;
      else field += c;
    } else if (c == '"' && at_start) {
      quoted = true;
      at_start = false;
    } else if (c == ',') {
      row.push_back(field), field.clear(), at_start = true;
    } else if (c == '\n') {
      row.push_back(field), field.clear(), at_start = true;
      rows.push_back(row), row.clear();
    } else {
      EXPECT_NE(c, '"') << "a quote inside an unquoted field";
      field += c, at_start = false;
    }
  }
  EXPECT_FALSE(quoted) << "unterminated quoted field";
  EXPECT_TRUE(field.empty() && row.empty()) << "the last line has no newline";
  return rows;
}

// The rows of a CSV file as maps from the header's column names, checking every row has as many fields.
std::vector<std::map<std::string, std::string>> read_csv(const fs::path& p, std::vector<std::string>* header = nullptr) {
  const auto rows = parse_csv(read(p));
  EXPECT_FALSE(rows.empty());
  if (rows.empty()) return {};
  if (header) *header = rows[0];
  std::vector<std::map<std::string, std::string>> out;
  for (size_t i = 1; i < rows.size(); ++i) {
    EXPECT_EQ(rows[i].size(), rows[0].size()) << "row " << i;
    std::map<std::string, std::string> m;
    for (size_t j = 0; j < rows[0].size() && j < rows[i].size(); ++j) m[rows[0][j]] = rows[i][j];
    out.push_back(m);
  }
  return out;
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}

// ---- statistics ------------------------------------------------------------------------------------------

TEST(ReportStats, HandComputed) {
  // Errors +10%, -20%, +30%, +5% against a measured 100 us.
  const std::vector<Case> v = {make("g", 100, 110), make("g", 100, 80), make("g", 100, 130), make("g", 100, 105)};
  const ErrorStats s = error_stats(ptrs(v), true);
  EXPECT_EQ(s.n, 4u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_NEAR(s.mape, 16.25, 1e-9);        // (10 + 20 + 30 + 5) / 4
  EXPECT_NEAR(s.median, 15.0, 1e-9);       // sorted 5 10 20 30: the mean of the middle two
  EXPECT_NEAR(s.p90, 30.0, 1e-9);          // nearest rank ceil(0.9 * 4) = 4: the largest
  EXPECT_NEAR(s.within10, 0.5, 1e-12);     // 10% (inclusive) and 5%
  EXPECT_NEAR(s.mean_signed, 6.25, 1e-9);  // (10 - 20 + 30 + 5) / 4: tpusim slow on average
}

TEST(ReportStats, NearestRankAndOddMedian) {
  // Errors 1%..n% (the simulated time 100 + i against 100): p90 is the value at rank ceil(0.9 n).
  for (const auto& [n, p90, median] : std::vector<std::tuple<int, double, double>>{
           {10, 9, 5.5}, {11, 10, 6}, {20, 18, 10.5}, {1, 1, 1}, {3, 3, 2}}) {
    std::vector<Case> v;
    for (int i = 1; i <= n; ++i) v.push_back(make("g", 100, 100 + i));
    const ErrorStats s = error_stats(ptrs(v), true);
    EXPECT_NEAR(s.p90, p90, 1e-9) << "n = " << n;
    EXPECT_NEAR(s.median, median, 1e-9) << "n = " << n;
  }
}

TEST(ReportStats, RooflineScoresRooflineTime) {
  std::vector<Case> v = {make("g", 100, 100), make("g", 200, 200)};
  v[0].roofline_us = 50;   // -50%
  v[1].roofline_us = 150;  // -25%
  const ErrorStats sim = error_stats(ptrs(v), true), roof = error_stats(ptrs(v), false);
  EXPECT_NEAR(sim.mape, 0, 1e-12);
  EXPECT_NEAR(sim.within10, 1, 1e-12);
  EXPECT_NEAR(roof.mape, 37.5, 1e-9);
  EXPECT_NEAR(roof.mean_signed, -37.5, 1e-9);
  EXPECT_NEAR(roof.within10, 0, 1e-12);
  EXPECT_NEAR(roof.p90, 50, 1e-9);
}

TEST(ReportStats, FailedCasesCountedNotScored) {
  std::vector<Case> v = {make("g", 100, 110), make("g", 100, 80), make("g", 100, 130), make("g", 100, 105)};
  v.push_back(make("g", 100, 1e9));
  v.back().error = "compile: shape too large";  // an error message fails a case whatever its time says
  v.push_back(make("g", 100, std::nan("")));     // and so does a NaN simulated time
  for (bool simulated : {true, false}) {
    const ErrorStats s = error_stats(ptrs(v), simulated);
    EXPECT_EQ(s.n, 4u);
    EXPECT_EQ(s.failed, 2u);
  }
  const ErrorStats s = error_stats(ptrs(v), true);
  EXPECT_NEAR(s.mape, 16.25, 1e-9);
  EXPECT_NEAR(s.p90, 30.0, 1e-9);
  EXPECT_TRUE(case_failed(v[4]));
  EXPECT_TRUE(case_failed(v[5]));
  EXPECT_FALSE(case_failed(v[0]));

  // Nothing scored: no statistics (NaN), not a perfect zero.
  const ErrorStats none = error_stats({&v[4], &v[5]}, true);
  EXPECT_EQ(none.n, 0u);
  EXPECT_EQ(none.failed, 2u);
  EXPECT_TRUE(std::isnan(none.mape) && std::isnan(none.median) && std::isnan(none.p90) &&
              std::isnan(none.within10) && std::isnan(none.mean_signed));
}

TEST(ReportStats, RegimeNames) {
  EXPECT_STREQ(regime_name(Regime::Launch), "launch");
  EXPECT_STREQ(regime_name(Regime::Memory), "memory");
  EXPECT_STREQ(regime_name(Regime::Compute), "compute");
  EXPECT_NEAR(rel_error(90, 100), -0.1, 1e-15);
}

// ---- cases.csv -------------------------------------------------------------------------------------------

TEST(ReportCases, RoundTrip) {
  std::vector<Case> v = {make("gemm_bf16", 12345.6789, 13580.24679, Regime::Memory, true),
                         make("gemm_bf16", 100, std::nan(""), Regime::Launch),
                         make("attention_causal", 2000, 1900, Regime::Compute)};
  v[0].roofline_us = 10;
  v[1].error = "compile failed: \"gemm\" needs k, n <= 65536\nsecond line";  // a comma, quotes, a line break
  v[2].shape = {{"batch_size", 2}, {"seq_len", 8192}, {"heads", 32}, {"kv_heads", 8}, {"head_dim", 128}};
  Dir dir;
  write_cases(dir.str(), v);  // the folder is created
  std::vector<std::string> header;
  const auto rows = read_csv(dir / "cases.csv", &header);
  EXPECT_EQ(header, (std::vector<std::string>{"class", "regime", "held_out", "shape", "flops", "bytes", "measured_us",
                                              "simulated_us", "error_pct", "roofline_us", "roofline_error_pct",
                                              "wall_s", "error"}));
  ASSERT_EQ(rows.size(), 3u);

  EXPECT_EQ(rows[0].at("class"), "gemm_bf16");
  EXPECT_EQ(rows[0].at("regime"), "memory");
  EXPECT_EQ(rows[0].at("held_out"), "1");
  EXPECT_EQ(rows[0].at("shape"), "m=4096 n=1024 k=512");
  EXPECT_EQ(std::stod(rows[0].at("flops")), v[0].flops);  // exact: a whole number printed with 15 digits
  EXPECT_EQ(std::stod(rows[0].at("bytes")), v[0].bytes);
  EXPECT_EQ(rows[0].at("measured_us"), "12345.6789");  // a golden's 4 decimals survive at tens of milliseconds
  EXPECT_EQ(rows[0].at("simulated_us"), "13580.24679");
  EXPECT_EQ(rows[0].at("error_pct"), "10.000");  // 13580.24679 / 12345.6789 = 1.1000000
  EXPECT_EQ(rows[0].at("roofline_us"), "10");
  EXPECT_NEAR(std::stod(rows[0].at("roofline_error_pct")), (10 / 12345.6789 - 1) * 100, 1e-3);
  EXPECT_EQ(rows[0].at("wall_s"), "0.25");
  EXPECT_EQ(rows[0].at("error"), "");

  // The failed case: its message intact through the quoting, no simulated time or error.
  EXPECT_EQ(rows[1].at("regime"), "launch");
  EXPECT_EQ(rows[1].at("held_out"), "0");
  EXPECT_EQ(rows[1].at("error"), v[1].error);
  EXPECT_EQ(rows[1].at("simulated_us"), "");
  EXPECT_EQ(rows[1].at("error_pct"), "");
  EXPECT_EQ(rows[1].at("roofline_error_pct"), "0.000");

  EXPECT_EQ(rows[2].at("shape"), "batch_size=2 seq_len=8192 heads=32 kv_heads=8 head_dim=128");
  EXPECT_EQ(rows[2].at("error_pct"), "-5.000");

  // Quoting on the wire: the message is quoted with its quotes doubled; plain fields are not quoted.
  const std::string text = read(dir / "cases.csv");
  EXPECT_NE(text.find(",\"compile failed: \"\"gemm\"\" needs k, n <= 65536\nsecond line\"\n"), std::string::npos);
  EXPECT_NE(text.find("\ngemm_bf16,memory,1,m=4096 n=1024 k=512,"), std::string::npos);

  // Rewritten after every case: a second call replaces the file whole, and no temporary file is left behind.
  v.pop_back();
  write_cases(dir.str(), v);
  EXPECT_EQ(read_csv(dir / "cases.csv").size(), 2u);
  size_t files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir.str())) ++files;
  EXPECT_EQ(files, 1u);
}

// ---- summary.csv and summary.md ----------------------------------------------------------------------------

TEST(ReportSummary, RowsPerClassRegimeAndPart) {
  std::vector<Case> v;
  // gemm_bf16: 3 memory-bound (1 held out), 2 compute-bound (both tuning), 1 compute-bound failure (held out).
  v.push_back(make("gemm_bf16", 100, 110, Regime::Memory));
  v.push_back(make("gemm_bf16", 100, 80, Regime::Memory));
  v.push_back(make("gemm_bf16", 100, 130, Regime::Memory, true));
  v.push_back(make("gemm_bf16", 100, 105, Regime::Compute));
  v.push_back(make("gemm_bf16", 100, 100, Regime::Compute));
  v.push_back(make("gemm_bf16", 100, std::nan(""), Regime::Compute, true));
  v.back().error = "timeout";
  // attention_causal: 2 launch-bound, one in each part.
  v.push_back(make("attention_causal", 10, 12, Regime::Launch));
  v.push_back(make("attention_causal", 10, 9, Regime::Launch, true));
  Dir dir;
  write_summary(dir.str(), v, "tpusim validate --preset h200-like --goldens validation/goldens/h200\n");

  const auto rows = read_csv(dir / "summary.csv");
  std::map<std::string, std::map<std::string, std::string>> by;  // "class/regime/part" -> row
  for (const auto& r : rows) by[r.at("class") + "/" + r.at("regime") + "/" + r.at("part")] = r;
  // Expected (n, failed) per row; regimes with no case in a class have no rows (gemm has no launch-bound case).
  const std::map<std::string, std::pair<int, int>> want = {
      {"gemm_bf16/memory/tune", {2, 0}},          {"gemm_bf16/memory/held-out", {1, 0}},
      {"gemm_bf16/memory/all", {3, 0}},           {"gemm_bf16/compute/tune", {2, 0}},
      {"gemm_bf16/compute/held-out", {0, 1}},     {"gemm_bf16/compute/all", {2, 1}},
      {"gemm_bf16/all/tune", {4, 0}},             {"gemm_bf16/all/held-out", {1, 1}},
      {"gemm_bf16/all/all", {5, 1}},              {"attention_causal/launch/tune", {1, 0}},
      {"attention_causal/launch/held-out", {1, 0}}, {"attention_causal/launch/all", {2, 0}},
      {"attention_causal/all/tune", {1, 0}},      {"attention_causal/all/held-out", {1, 0}},
      {"attention_causal/all/all", {2, 0}},       {"all/all/tune", {5, 0}},
      {"all/all/held-out", {2, 1}},               {"all/all/all", {7, 1}},
  };
  EXPECT_EQ(rows.size(), want.size());
  for (const auto& [key, nf] : want) {
    ASSERT_TRUE(by.count(key)) << key;
    EXPECT_EQ(by[key].at("n"), std::to_string(nf.first)) << key;
    EXPECT_EQ(by[key].at("failed"), std::to_string(nf.second)) << key;
  }
  // Values: gemm memory over all parts is errors 10, -20, 30 -> MAPE 20, median 20, p90 30, bias +6.667.
  const auto& mem = by["gemm_bf16/memory/all"];
  EXPECT_EQ(mem.at("tpusim_mape"), "20.000");
  EXPECT_EQ(mem.at("tpusim_median"), "20.000");
  EXPECT_EQ(mem.at("tpusim_p90"), "30.000");
  EXPECT_EQ(mem.at("tpusim_within10"), "0.3333");
  EXPECT_EQ(mem.at("tpusim_mean_signed"), "6.667");
  EXPECT_EQ(mem.at("roofline_mape"), "0.000");  // make() gives a perfect roofline
  EXPECT_EQ(mem.at("roofline_within10"), "1.0000");
  // An empty group has blank statistics, not zeros.
  EXPECT_EQ(by["gemm_bf16/compute/held-out"].at("tpusim_mape"), "");
  EXPECT_EQ(by["gemm_bf16/compute/held-out"].at("roofline_mape"), "");
  EXPECT_EQ(by["attention_causal/launch/all"].at("tpusim_mape"), "15.000");

  // summary.md: a table per class and one over all of them, every row of the CSV as a table line, then the header.
  const std::string md = read(dir / "summary.md");
  EXPECT_NE(md.find("\n## gemm_bf16\n"), std::string::npos);
  EXPECT_NE(md.find("\n## attention_causal\n"), std::string::npos);
  EXPECT_NE(md.find("\n## All classes\n"), std::string::npos);
  EXPECT_LT(md.find("## gemm_bf16"), md.find("## attention_causal"));  // classes in the order of the cases
  EXPECT_NE(md.find("| memory | all | 3 | 0 | 20.0 | 20.0 | 30.0 | 33% | +6.7 | 0.0 | 0.0 | 0.0 | 100% | +0.0 |"),
            std::string::npos);
  EXPECT_NE(md.find("| compute | held-out | 0 | 1 | - | - | - | - | - | - | - | - | - | - |"), std::string::npos);
  size_t data_lines = 0;
  for (std::string regime : {"launch", "memory", "compute", "all"})
    for (std::string part : {"tune", "held-out", "all"}) data_lines += count(md, "\n| " + regime + " | " + part + " | ");
  EXPECT_EQ(data_lines, want.size());
  const std::string tail = "\n## How this run was made\n\ntpusim validate --preset h200-like --goldens validation/goldens/h200\n";
  ASSERT_GE(md.size(), tail.size());
  EXPECT_EQ(md.substr(md.size() - tail.size()), tail);
}

// ---- scatter.svg -------------------------------------------------------------------------------------------

// A minimal well-formedness check that needs no XML library: tags nest and close, attribute values are quoted
// (no '<' inside them), and no '&' starts anything but an entity.
void expect_tags_balanced(const std::string& svg) {
  std::vector<std::string> open;
  for (size_t p = svg.find('<'); p != std::string::npos; p = svg.find('<', p + 1)) {
    const size_t end = svg.find('>', p);
    ASSERT_NE(end, std::string::npos);
    const std::string tag = svg.substr(p + 1, end - p - 1);
    ASSERT_EQ(tag.find('<'), std::string::npos) << tag;
    if (tag[0] == '?' || tag[0] == '!') continue;
    const size_t name_end = tag.find_first_of(" \n/", tag[0] == '/' ? 1 : 0);
    if (tag[0] == '/') {
      ASSERT_FALSE(open.empty()) << "</" << tag << "> closes nothing";
      EXPECT_EQ(open.back(), tag.substr(1)) << "at offset " << p;
      open.pop_back();
    } else if (tag.back() != '/') {
      open.push_back(tag.substr(0, name_end));
    }
  }
  EXPECT_TRUE(open.empty()) << open.size() << " tags left open";
  for (size_t p = svg.find('&'); p != std::string::npos; p = svg.find('&', p + 1)) {
    const std::string ent = svg.substr(p, 6);
    EXPECT_TRUE(ent.rfind("&amp;", 0) == 0 || ent.rfind("&lt;", 0) == 0 || ent.rfind("&gt;", 0) == 0 ||
                ent.rfind("&quot;", 0) == 0)
        << ent;
  }
}

TEST(ReportScatter, OneCirclePerCaseAndWellFormed) {
  std::vector<Case> v = {make("gemm_bf16", 2.5, 3.1, Regime::Launch), make("gemm_bf16", 400, 380, Regime::Memory),
                         make("gemm_fp8", 50, 49, Regime::Memory, true), make("attention_causal", 4000, 5000),
                         make("attention_causal", 10, std::nan(""), Regime::Launch)};  // failed: not drawn
  v[1].roofline_us = 300;
  Dir dir;
  write_scatter(dir.str(), v, "tpusim vs H200 <measured> & \"roofline\"");  // XML specials in the title
  const std::string svg = read(dir / "scatter.svg");
  expect_tags_balanced(svg);
  EXPECT_EQ(count(svg, "<circle"), 4u);  // one per scored case; the legend uses squares, not circles
  EXPECT_EQ(count(svg, "<script"), 0u);
  EXPECT_EQ(count(svg, "href"), 0u);  // nothing external
  EXPECT_NE(svg.find("tpusim vs H200 &lt;measured&gt; &amp; &quot;roofline&quot;"), std::string::npos);
  // Decades from 1 us (below 2.5) to 10000 us (above 5000), each labelled on both axes.
  for (std::string label : {"1", "10", "100", "1000", "10000"}) EXPECT_EQ(count(svg, ">" + label + "</text>"), 2u) << label;
  EXPECT_EQ(count(svg, ">0.1</text>"), 0u);
  EXPECT_EQ(count(svg, ">100000</text>"), 0u);
  EXPECT_NE(svg.find("measured time (µs)"), std::string::npos);
  EXPECT_NE(svg.find("within ±10%"), std::string::npos);
  EXPECT_NE(svg.find(">1 cases, 1 failed, MAPE 25.0%</text>"), std::string::npos);  // the legend counts failures
  EXPECT_EQ(count(svg, "h0"), 4u);  // a faint roofline dot per scored case

  // Where a point lands: the plot is 600 px square at (90, 60) over 4 decades from 1 us, so 400 us measured and
  // 380 us simulated sit at x = 90 + log10(400) * 150 and y = 660 - log10(380) * 150.
  char where[96];
  std::snprintf(where, sizeof where, "<circle cx=\"%.1f\" cy=\"%.1f\"", 90 + std::log10(400.0) * 150, 660 - std::log10(380.0) * 150);
  EXPECT_NE(svg.find(where), std::string::npos) << where;

#ifdef TPUSIM_PYTHON
  const std::string cmd = std::string(TPUSIM_PYTHON) +
                          " -c \"import xml.dom.minidom,sys; d = xml.dom.minidom.parse(sys.argv[1]); "
                          "sys.exit(0 if d.documentElement.tagName == 'svg' else 1)\" " +
                          (dir / "scatter.svg").string();
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
#else
  GTEST_SKIP() << "no python3: the XML parser check was not run (the tag check above was)";
#endif
}

TEST(ReportScatter, TwentyFiveThousandPointsUnderTwoMegabytes) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> decades(0.3, 4.5), err(-0.3, 0.3);
  std::vector<Case> v;
  const char* classes[] = {"gemm_bf16", "gemm_fp8", "attention_causal", "attention_encoder"};
  for (int i = 0; i < 25000; ++i) {
    const double m = std::pow(10.0, decades(rng));
    v.push_back(make(classes[i % 4], m, m * (1 + err(rng))));
    v.back().roofline_us = m * (1 + err(rng));
  }
  Dir dir;
  write_scatter(dir.str(), v, "25,000 cases");
  const auto size = fs::file_size(dir / "scatter.svg");
  EXPECT_LT(size, 2'000'000u);
  const std::string svg = read(dir / "scatter.svg");
  EXPECT_EQ(count(svg, "<circle"), 25000u);
  expect_tags_balanced(svg);
}

TEST(ReportScatter, EmptyRunStillAPlot) {
  Dir dir;
  write_scatter(dir.str(), {}, "nothing");
  const std::string svg = read(dir / "scatter.svg");
  expect_tags_balanced(svg);
  EXPECT_EQ(count(svg, "<circle"), 0u);
}

// ---- progress ----------------------------------------------------------------------------------------------

TEST(ReportProgress, PlainLinesEveryNAndAtTheEnd) {
  std::ostringstream os;
  Progress p(os, 5, /*tty=*/false, /*every=*/2);
  std::vector<Case> done;
  for (int i = 0; i < 5; ++i) {
    done.push_back(make("g", 100, i == 2 ? std::nan("") : 110));
    p.update(done);
  }
  p.finish();
  std::vector<std::string> lines;
  std::istringstream in(os.str());
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u) << os.str();  // after cases 2, 4 and 5
  EXPECT_EQ(lines[0].rfind("2/5 cases, 0 failed, ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("4/5 cases, 1 failed, ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("5/5 cases, 1 failed, ", 0), 0u) << lines[2];
  EXPECT_NE(lines[2].find("MAPE 10.0%"), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find(" left"), std::string::npos) << lines[2];
  EXPECT_EQ(os.str().find('\r'), std::string::npos);
}

TEST(ReportProgress, TerminalRedrawsOneLine) {
  std::ostringstream os;
  Progress p(os, 3, /*tty=*/true);
  std::vector<Case> done;
  for (int i = 0; i < 3; ++i) {
    done.push_back(make("g", 100, 120));
    p.update(done);
  }
  EXPECT_EQ(os.str().find('\n'), std::string::npos);      // one line, redrawn in place
  EXPECT_EQ(os.str().rfind("\r1/3 cases, 0 failed", 0), 0u);  // the first case is drawn at once
  EXPECT_NE(os.str().find("\r3/3 cases, 0 failed"), std::string::npos);  // and the last always
  EXPECT_NE(os.str().find("MAPE 20.0%"), std::string::npos);
  p.finish();
  EXPECT_EQ(os.str().back(), '\n');
}

}  // namespace
}  // namespace tpusim::validate
