// Unit tests of tpusim explore's pieces: the worker pool, the progress line, SVG axes, the Pareto front, sweep and
// workload parsing, the built-in layers' ONNX models (checked by reading them back with the ONNX library), and the
// results files made from records (with and without the energy model's figures).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <unistd.h>

#include "results.h"
#include "tpusim/explore/explore.h"
#include "tpusim/explore/pool.h"
#include "tpusim/explore/svg.h"
#include "workloads.h"

namespace {

using namespace tpusim::explore;

TEST(Pool, EveryItemOnceInItsOwnProcess) {
  std::map<size_t, std::string> got;
  Pool pool;
  pool.jobs = 3;
  pool.start = [] { return [](size_t i) { return std::to_string(i * i) + " " + std::to_string(getpid()); }; };
  pool.done = [&](size_t i, const std::string& line) { EXPECT_TRUE(got.emplace(i, line).second) << i; };
  pool.lost = [](size_t i, const std::string& why) { ADD_FAILURE() << i << ": " << why; };
  EXPECT_TRUE(run_pool(strided_tasks(10, 3), pool));
  ASSERT_EQ(got.size(), 10u);
  std::set<std::string> pids;
  for (const auto& [i, line] : got) {
    EXPECT_EQ(line.substr(0, line.find(' ')), std::to_string(i * i));
    pids.insert(line.substr(line.find(' ') + 1));
  }
  EXPECT_EQ(pids.size(), 3u);  // three tasks, three processes
  EXPECT_EQ(pids.count(std::to_string(getpid())), 0u);
}

TEST(Pool, ItemsOfAProcessThatDiesAreLostWithTheReason) {
  std::map<size_t, std::string> done, lost;
  Pool pool;
  pool.jobs = 2;
  pool.start = [] {
    return [](size_t i) -> std::string {
      if (i == 4) raise(SIGKILL);  // a crash in the middle of task {1, 4, 7}... here task {0..9 by 3}
      return "ok\nsecond line";    // a newline inside a result becomes a space
    };
  };
  pool.done = [&](size_t i, const std::string& l) { done[i] = l; };
  pool.lost = [&](size_t i, const std::string& why) { lost[i] = why; };
  EXPECT_TRUE(run_pool(strided_tasks(9, 3), pool));  // tasks {0,3,6} {1,4,7} {2,5,8}
  EXPECT_EQ(done.size(), 7u);
  EXPECT_EQ(done[1], "ok second line");
  ASSERT_EQ(lost.size(), 2u);  // 4 and the 7 after it
  EXPECT_EQ(lost[4], "worker process killed by signal 9");
  EXPECT_TRUE(lost.count(7));
}

TEST(Pool, TickFalseStopsTheBatch) {
  size_t done = 0;
  Pool pool;
  pool.jobs = 1;
  pool.start = [] { return [](size_t) { sleep(10); return std::string("late"); }; };
  pool.done = [&](size_t, const std::string&) { ++done; };
  pool.lost = [&](size_t, const std::string&) { ++done; };
  int ticks = 0;
  pool.tick = [&] { return ++ticks < 3; };
  EXPECT_FALSE(run_pool(strided_tasks(2, 1), pool));
  EXPECT_EQ(done, 0u);  // killed before reporting: neither done nor lost
}

TEST(ProgressLine, PlainLinesCountRateAndTimeLeft) {
  std::ostringstream os;
  ProgressLine p(os, 4, false, "points", 2);
  for (size_t n = 1; n <= 4; ++n) p.update(n, [&] { return ProgressLine::Extra{n > 2 ? "1 failed" : "", ""}; });
  p.finish();
  EXPECT_EQ(os.str().rfind("2/4 points, ", 0), 0u) << os.str();
  EXPECT_NE(os.str().find("\n4/4 points, 1 failed, "), std::string::npos) << os.str();
  EXPECT_NE(os.str().find(" points/s, "), std::string::npos);
  EXPECT_EQ(ProgressLine::hms(3723), "1:02:03");
  EXPECT_EQ(ProgressLine::hms(NAN), "--:--");
}

TEST(Svg, AxesSpanTheDataWithNiceTicks) {
  svg::Axis log = svg::Axis::fit({3, 250, -1, 0}, true, 0, 100);  // <= 0 has no place on a log axis
  EXPECT_EQ(log.lo, 1);
  EXPECT_EQ(log.hi, 1000);
  EXPECT_DOUBLE_EQ(log.map(10), 100.0 / 3);
  ASSERT_EQ(log.ticks().size(), 4u);
  EXPECT_EQ(log.ticks()[3].second, "1000");
  EXPECT_EQ(log.minor_ticks().size(), 24u);
  svg::Axis lin = svg::Axis::fit({1.2, 7.9}, false, 100, 0);  // a y axis: pixels downwards
  EXPECT_EQ(lin.lo, 0);
  EXPECT_EQ(lin.hi, 8);
  EXPECT_DOUBLE_EQ(lin.map(0), 100);
  EXPECT_DOUBLE_EQ(lin.map(8), 0);
  std::vector<std::string> labels;
  for (const auto& t : lin.ticks()) labels.push_back(t.second);
  EXPECT_EQ(labels, (std::vector<std::string>{"0", "2", "4", "6", "8"}));
  EXPECT_EQ(svg::csv_row({"a,b", "c\"d", "e"}), "\"a,b\",\"c\"\"d\",e\n");
  EXPECT_EQ(svg::escape("<a & \"b\">"), "&lt;a &amp; &quot;b&quot;&gt;");
}

TEST(Pareto, FrontIsThePointsNoOtherBeats) {
  // Brute force over the definition, on a grid with ties and a NaN.
  const std::vector<double> x = {1, 2, 2, 3, 4, 4, 5, NAN, 1};
  const std::vector<double> y = {9, 5, 6, 5, 1, 1, 0.5, 0, 9};
  const std::vector<size_t> f = pareto_front(x, y);
  // (1,9) twice: neither beats the other; (2,5) beats (2,6) and (3,5); (4,1) twice; (5,0.5); NaN never.
  EXPECT_EQ(f, (std::vector<size_t>{0, 1, 4, 5, 6, 8}));
}

TEST(Sweep, Parsing) {
  Sweep s = parse_sweep("mxu.rows=64,128,256");
  EXPECT_EQ(s.key, "mxu.rows");
  EXPECT_EQ(s.values, (std::vector<std::string>{"64", "128", "256"}));
  EXPECT_THROW(parse_sweep("mxu.rows"), std::invalid_argument);
  EXPECT_THROW(parse_sweep("mxu.rows=64,,128"), std::invalid_argument);
  EXPECT_THROW(parse_sweep("mxu.rows=64,64"), std::invalid_argument);
}

TEST(Workloads, LayersBuildTheGraphTheyName) {
  WorkloadSpec g = parse_workload("gemm:m=8,k=32");
  EXPECT_EQ(g.kind, WorkloadSpec::Kind::Layer);
  auto [bytes, name] = layer_model(with_params(g, {{"n", "16"}}));
  EXPECT_EQ(name, "gemm_m8_n16_k32.onnx");
  onnx::ModelProto m;
  ASSERT_TRUE(m.ParseFromString(bytes));
  ASSERT_EQ(m.graph().node_size(), 1);
  EXPECT_EQ(m.graph().node(0).op_type(), "MatMul");
  EXPECT_EQ(m.graph().initializer(0).dims(0), 32);
  EXPECT_EQ(m.graph().initializer(0).dims(1), 16);
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(1).dim_value(), 16);

  auto conv = layer_model(parse_workload("conv:cin=8,cout=16,h=9,w=9,kernel=3,stride=2"));
  ASSERT_TRUE(m.ParseFromString(conv.first));
  EXPECT_EQ(m.graph().node(0).op_type(), "Conv");
  // (9 + 2*1 - 3) / 2 + 1 = 5 (pad -1: kernel / 2 = 1)
  EXPECT_EQ(m.graph().output(0).type().tensor_type().shape().dim(2).dim_value(), 5);

  auto att = layer_model(parse_workload("attention:seq=16,dim=8,heads=2"));
  ASSERT_TRUE(m.ParseFromString(att.first));
  EXPECT_EQ(m.graph().input_size(), 3);
  EXPECT_EQ(m.graph().node_size(), 5);  // Transpose, MatMul, Mul, Softmax, MatMul

  EXPECT_THROW(parse_workload("gemm:q=1"), std::invalid_argument);
  EXPECT_THROW(layer_model(parse_workload("gemm:m=0")), std::invalid_argument);
  EXPECT_THROW(layer_model(parse_workload("conv:cin=6,groups=4")), std::invalid_argument);
  EXPECT_THROW(parse_workload("nosuchthing"), std::invalid_argument);
  EXPECT_THROW(parse_workload("missing.onnx"), std::invalid_argument);
  WorkloadSpec r = parse_workload("resnet50");
  EXPECT_EQ(r.kind, WorkloadSpec::Kind::Exporter);
  EXPECT_EQ(r.name, "resnet");
  ASSERT_EQ(r.params.size(), 1u);
  EXPECT_EQ(r.params[0], (std::pair<std::string, std::string>{"arch", "resnet50"}));
}

}  // namespace

namespace {

// A record as a worker makes it, with made-up figures (and, with `energy`, the energy model's stats fields).
Record record(size_t i, const std::string& rows, double seconds, double energy_j, double area) {
  Record r;
  r["point"] = i;
  r["params"] = {{"mxu.rows", rows}};
  r["status"] = "ok";
  r["error"] = "";
  r["stats"] = {{"cycles", static_cast<uint64_t>(seconds * 1e9)}, {"seconds", seconds},
                {"mxu", {{"mac_utilization", 0.5}}}, {"hbm", {{"bytes_read", 1000}, {"bytes_written", 24}}}};
  if (energy_j > 0) {
    r["stats"]["energy"] = {{"total_j", energy_j}, {"average_power_w", energy_j / seconds}};
    r["stats"]["area"] = {{"total_mm2", area}};
    r["stats"]["efficiency"] = {{"tops_per_w", 1.5}, {"tops_per_mm2", 0.25}};
  }
  r["program"] = {{"flops", 4096.0}, {"bytes", 1024.0}, {"instructions", 10}};
  r["chip"] = {{"peak_flops", 1e12}, {"hbm_bytes_per_s", 1e11}};
  return r;
}

std::string read_file(const std::string& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST(Results, ColumnsFromTheStatsAndEnergyWhenPresent) {
  const std::string dir = testing::TempDir() + "explore-results-" + std::to_string(getpid());
  // Without energy in the stats: no energy or area columns, no Pareto plots.
  std::vector<Record> plain = {record(0, "64", 2e-6, 0, 0), record(1, "128", 1e-6, 0, 0)};
  write_results(dir + "/plain", {"mxu.rows"}, plain, nlohmann::json{{"workload", "w"}});
  const std::string csv = read_file(dir + "/plain/results.csv");
  EXPECT_EQ(csv.find("energy_j"), std::string::npos);
  EXPECT_NE(csv.find("\n1,128,ok,,1000,1,1000000,"), std::string::npos) << csv;  // cycles, us, runs/s
  EXPECT_FALSE(std::filesystem::exists(dir + "/plain/pareto_energy_j.svg"));

  // With it: the columns, and latency against energy and area with the front marked. Point 2 is beaten by point
  // 1 (slower and more energy); 0 and 1 trade latency for energy.
  std::vector<Record> e = {record(0, "64", 2e-6, 1.0, 10), record(1, "128", 1e-6, 2.0, 20),
                           record(2, "256", 3e-6, 3.0, 30)};
  Record failed;
  failed["point"] = 3;
  failed["params"] = {{"mxu.rows", "9999"}};
  failed["status"] = "error";
  failed["error"] = "mxu.rows = 9999 must be in [1, 1024]";
  e.push_back(failed);
  const auto files = write_results(dir + "/energy", {"mxu.rows"}, e, nlohmann::json{{"workload", "w"}});
  const std::string csv2 = read_file(dir + "/energy/results.csv");
  EXPECT_NE(csv2.find("energy_j,power_w,area_mm2,tops_per_w,tops_per_mm2"), std::string::npos) << csv2;
  EXPECT_NE(csv2.find("\n3,9999,error,\"mxu.rows = 9999 must be in [1, 1024]\","), std::string::npos) << csv2;
  for (const char* f : {"pareto_energy_j.svg", "pareto_area_mm2.svg"}) {
    ASSERT_NE(std::find(files.begin(), files.end(), f), files.end()) << f;
    const std::string svg = read_file(dir + "/energy/" + f);
    size_t rings = 0;
    for (size_t p = svg.find("class=\"pareto\""); p != std::string::npos; p = svg.find("class=\"pareto\"", p + 1)) ++rings;
    EXPECT_EQ(rings, 2u) << f;  // points 0 and 1
  }
  const nlohmann::json j = nlohmann::json::parse(read_file(dir + "/energy/results.json"));
  EXPECT_DOUBLE_EQ(j["points"][1]["energy_j"].get<double>(), 2.0);
  EXPECT_TRUE(j["points"][3]["energy_j"].is_null());
  std::filesystem::remove_all(dir);
}
