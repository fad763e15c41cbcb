// Unit tests of tpusim explore's pieces: the worker pool, the progress line, SVG axes, the Pareto front, sweep and
// workload parsing, and the built-in layers' ONNX models (checked by reading them back with the ONNX library).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <csignal>
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
