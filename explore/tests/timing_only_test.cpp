// The timing-only compile (compiler::Options::timing_only, runtime::CompileOptions::timing_only) against the full
// compile of the same model on the same chip: the same instructions, regions and tensor placement, and the same
// cycles in a timing-only run. Its Const tensors have no data (Program::timing_only), and a functional run of it
// is refused. The models are the build's exported workloads (workloads/CMakeLists.txt), bf16 and int8 (the full
// int8 with the same activation ranges; through the runtime, int8 calibrated on random inputs against the
// timing-only compile's ranges of 1, which change immediates but no timing).
#include <gtest/gtest.h>

#include <map>
#include <ostream>
#include <string>

#include "tpusim/runtime/runtime.h"
#include "tpusim/sim/config.h"

namespace {

using namespace tpusim;

struct Case {
  const char* model;   // under the build's workloads/
  const char* config;
  bool int8;
};

std::string name_of(const testing::TestParamInfo<Case>& i) {
  std::string s = std::string(i.param.model) + "_" + i.param.config + (i.param.int8 ? "_int8" : "_bf16");
  for (char& c : s)
    if (!isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

class TimingOnlyCompile : public testing::TestWithParam<Case> {};

void PrintTo(const Case& c, std::ostream* os) { *os << c.model << " on " << c.config << (c.int8 ? " int8" : " bf16"); }

std::map<std::string, runtime::HostTensor> zeros(const runtime::Executable& e) {
  std::map<std::string, runtime::HostTensor> in;
  for (const isa::TensorDecl* d : e.inputs()) in[d->name] = runtime::HostTensor{d->dtype, d->shape, std::vector<uint8_t>(d->bytes())};
  return in;
}

uint64_t cycles(runtime::Client& client, const runtime::Executable& e) {
  runtime::ExecuteOptions t;
  t.functional = false;
  return client.execute(e, zeros(e), t).run.stats.cycles;
}

TEST_P(TimingOnlyCompile, SameInstructionsAndCycles) {
  const Case& c = GetParam();
  const std::string path = std::string(TPUSIM_WORKLOADS_DIR) + "/" + c.model;
  const sim::ChipConfig cfg = sim::load_config(c.config);
  runtime::Client client(cfg);

  // The compiler, both ways, with the same options: int8 with the same activation ranges (made up here; an int8
  // program carries them as immediates, so only equal ranges give equal instructions).
  compiler::Options full;
  for (const auto& [k, v] : sim::kernel_symbols(cfg)) full.target.symbols[k] = v;
  if (c.int8) {
    full.precision = compiler::Precision::INT8;
    compiler::Options probe = full;
    probe.precision = compiler::Precision::BF16;
    probe.expose_calibration = true;
    const isa::Program p = compiler::compile_onnx_file(path, probe);
    float r = 0.5f;
    for (const isa::TensorDecl& t : p.tensors)
      if (t.name.rfind(compiler::kCalibrationPrefix, 0) == 0)
        full.activation_absmax[t.name.substr(std::string(compiler::kCalibrationPrefix).size())] = r += 0.37f;
    ASSERT_FALSE(full.activation_absmax.empty());
  }
  compiler::Options fast = full;
  fast.timing_only = true;
  const isa::Program pa = compiler::compile_onnx_file(path, full), pb = compiler::compile_onnx_file(path, fast);

  EXPECT_FALSE(pa.timing_only);
  EXPECT_TRUE(pb.timing_only);
  ASSERT_EQ(pa.code.size(), pb.code.size());
  EXPECT_TRUE(pa.code == pb.code) << "the instruction streams differ";
  EXPECT_EQ(pa.source, pb.source);
  EXPECT_EQ(pa.regions, pb.regions);
  EXPECT_EQ(pa.cores, pb.cores);
  ASSERT_EQ(pa.tensors.size(), pb.tensors.size());
  size_t consts = 0;
  for (size_t i = 0; i < pa.tensors.size(); ++i) {
    const isa::TensorDecl &x = pa.tensors[i], &y = pb.tensors[i];
    EXPECT_EQ(x.name, y.name);
    EXPECT_EQ(x.kind, y.kind) << x.name;
    EXPECT_EQ(x.dtype, y.dtype) << x.name;
    EXPECT_EQ(x.shape, y.shape) << x.name;
    EXPECT_EQ(x.addr, y.addr) << x.name;
    consts += x.kind == isa::TensorKind::Const;
  }
  EXPECT_GT(consts, 0u);
  // What it skipped: the weights' bytes (the full program holds every constant's).
  EXPECT_LT(pb.const_data.size(), pa.const_data.size() / 2) << "the timing-only program still carries the weights";

  // The same cycles; through the runtime too, where a timing-only int8 compile has no calibration run (ranges of
  // 1) and the full one is calibrated on random inputs: ranges change immediates, never timing.
  const runtime::Executable a = client.load_program(pa).value(), b = client.load_program(pb).value();
  const uint64_t ca = cycles(client, a);
  EXPECT_GT(ca, 0u);
  EXPECT_EQ(ca, cycles(client, b));
  runtime::CompileOptions rfull, rfast;
  if (c.int8) {
    rfull.precision = rfast.precision = compiler::Precision::INT8;
    std::map<std::string, runtime::HostTensor> in;
    uint64_t seed = 7;
    for (const isa::TensorDecl* d : client.compile_onnx_file(path).inputs())  // token ids 0 (any table has row 0)
      in[d->name] = d->dtype == isa::DType::I32 ? zeros(client.compile_onnx_file(path)).at(d->name)
                                                : runtime::random_tensor(*d, seed++);
    rfull.calibration.push_back(in);
  }
  rfast.timing_only = true;
  const runtime::Executable ra = client.compile_onnx_file(path, rfull), rb = client.compile_onnx_file(path, rfast);
  EXPECT_TRUE(rb.program().timing_only);
  EXPECT_EQ(cycles(client, ra), cycles(client, rb));
  if (!c.int8) {
    EXPECT_EQ(cycles(client, ra), ca);
  }

  // A functional run of the timing-only program is refused, naming why.
  try {
    client.execute(b, zeros(b));
    FAIL() << "a functional run of a timing-only program was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("timing-only"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(Workloads, TimingOnlyCompile,
                         testing::Values(Case{"resnet18/resnet18.onnx", "v4-like", false},
                                         Case{"resnet18/resnet18.onnx", "v4", false},
                                         Case{"resnet18/resnet18.onnx", "v4-like", true},
                                         Case{"tinycnn/tinycnn.onnx", "v4-like", true},
                                         Case{"bert_small/bert.onnx", "v4-like", false},
                                         Case{"bert_small/bert.onnx", "v4-like", true},
                                         Case{"gpt2_small/prefill/gpt2.onnx", "v4-like", false},
                                         Case{"gpt2_small/decode/gpt2.onnx", "v5e", true}),
                         name_of);

}  // namespace
