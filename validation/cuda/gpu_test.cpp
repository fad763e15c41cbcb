// The CUDA reference runner on small corpora, each output checked against a CPU reference computed here (in double)
// from the inputs the runner wrote. Skipped, with the runner's own message, where no CUDA device answers (the
// runner exits 3). Needs no CUDA headers: it drives the runner as a user would.
//
// Tolerances. Every float output is bf16, so a correct result y of an exact value ref can be off by the final
// rounding, at most 2^-8 |y| (round to nearest even, 8 significant bits), plus what fp32 arithmetic lost before it;
// each check below is |y - ref| <= 2^-8 |ref| + A (with A >= the fp32 error, the (1 + 2^-8) factor of the rounding
// absorbed into A's margin) and A is derived per op. A wrong index, layout, mask or formula changes outputs by
// O(|ref|), far above every bound.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runner_io.h"

namespace fs = std::filesystem;
using namespace tpusim::cuda_ref;

namespace {

const double kBf16Round = std::ldexp(1.0, -8);  // half a bf16 ulp, relative
const double kU32 = std::ldexp(1.0, -24);       // fp32 unit roundoff

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the runner on `corpus` in a fresh folder. rc 3 means no device: the caller skips with `log`.
struct RunnerRun {
  fs::path dir;
  int rc = -1;
  std::string log;
  std::vector<Case> cases;
};

RunnerRun run_runner(const std::string& test, const std::string& corpus) {
  RunnerRun r;
  r.dir = fs::temp_directory_path() / ("tpusim_cuda_ref_" + test + "_" + std::to_string(::getpid()));
  fs::remove_all(r.dir);
  fs::create_directories(r.dir);
  std::ofstream(r.dir / "corpus.csv") << corpus;
  r.cases = parse_corpus(corpus, "corpus.csv");
  std::string cmd = std::string("'") + TPUSIM_CUDA_RUNNER + "' --corpus '" + (r.dir / "corpus.csv").string() +
                    "' --out '" + (r.dir / "out").string() + "' --repeats 3 --warmup 1 > '" +
                    (r.dir / "log.txt").string() + "' 2>&1";
  int status = std::system(cmd.c_str());
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.log = slurp(r.dir / "log.txt");
  return r;
}

// Removes a test's folder at the end unless the test failed (then it stays, for a look at the runner's files).
struct DirCleanup {
  fs::path dir;
  ~DirCleanup() {
    if (!::testing::Test::HasFailure()) fs::remove_all(dir);
  }
};

// Runs the runner; without a device, checks the runner's message and skips the test with it.
#define RUN_OR_SKIP(var, corpus)                                                                               \
  RunnerRun var = run_runner(::testing::UnitTest::GetInstance()->current_test_info()->name(), corpus);               \
  DirCleanup var##_cleanup{var.dir};                                                                           \
  if (var.rc == 3) {                                                                                           \
    EXPECT_EQ(var.log.rfind("tpusim_cuda_runner: no CUDA device found (cudaGetDeviceCount: ", 0), 0u) << var.log; \
    GTEST_SKIP() << "no CUDA device; the runner said: " << var.log;                                          \
  }                                                                                                            \
  ASSERT_EQ(var.rc, 0) << var.log;

std::vector<double> load(const RunnerRun& r, const Case& c, const std::string& tensor, std::vector<int64_t>* shape = nullptr) {
  NpyArray a = read_npy((r.dir / "out" / (c.name() + "." + tensor + ".npy")).string());
  if (shape) *shape = a.shape;
  return a.as_double();
}

// Checks y against ref element by element with |y - ref| <= 2^-8 |ref| + allow[i]; reports the first few misses
// and how many there were. Also checks the relative L2 error against 2^-7 (the bf16 rounding alone gives about
// 2^-10), a summary that catches a small systematic error the per-element bound might let through.
void expect_close(const std::vector<double>& y, const std::vector<double>& ref, const std::vector<double>& allow,
                  const std::string& what) {
  ASSERT_EQ(y.size(), ref.size()) << what;
  size_t bad = 0;
  double dd = 0, rr = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    double err = std::fabs(y[i] - ref[i]), tol = kBf16Round * std::fabs(ref[i]) + allow[i];
    dd += (y[i] - ref[i]) * (y[i] - ref[i]);
    rr += ref[i] * ref[i];
    if (!(err <= tol) && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: " << y[i] << " vs reference " << ref[i] << " (error " << err
                    << ", allowed " << tol << ")";
  }
  EXPECT_EQ(bad, 0u) << what << ": elements out of tolerance";
  if (rr > 0) {
    EXPECT_LE(std::sqrt(dd / rr), std::ldexp(1.0, -7)) << what << ": relative L2 error";
  }
}

// The result CSV of `op` has its header and one line per case, each with a positive latency.
void expect_results_csv(const RunnerRun& r, const std::string& op) {
  size_t expected = 0;
  for (const auto& c : r.cases) expected += c.op == op;
  std::istringstream in(slurp(r.dir / "out" / (op + ".csv")));
  std::string line;
  ASSERT_TRUE(std::getline(in, line)) << op << ".csv is missing or empty";
  EXPECT_EQ(line, results_header(op));
  size_t rows = 0;
  while (std::getline(in, line)) {
    ++rows;
    double us = std::stod(line.substr(line.rfind(',') + 1));
    EXPECT_GT(us, 0.0) << line;
    EXPECT_LT(us, 1e6) << line;
  }
  EXPECT_EQ(rows, expected) << op << ".csv";
}

// ---- GEMM: y[m, n] = x[m, k] W[n, k]^T --------------------------------------------------------------------------
// bf16: products of bf16 values are exact in fp32; an fp32 sum of k terms is off by at most k u sum|x w| (Higham's
// bound for recursive summation; pairwise, split-k or tensor-core orders only do better), u = 2^-24; 2 k u sum|x w|
// leaves room for truncating adders. fp8: the products are exact too, but Hopper's FP8 tensor cores keep only about
// 14 bits in their partial sums (DeepSeek-V3 report, section 3.3.2) before cuBLASLt promotes them to fp32; a worst
// case bound (k 2^-13 sum|x w|) would say nothing, so the allowance is 2^-11 sum|x w| -- about 8 times the
// expected (random-walk) error for the k used here -- backed by the relative L2 check. int8: exact (int32 sums of
// at most 128 * 128 * k < 2^31).
TEST(CudaReference, Gemm) {
  RUN_OR_SKIP(r,
              "gemm,bfloat16,1,64,64\n"
              "gemm,bfloat16,33,40,96\n"
              "gemm,bfloat16,128,256,512\n"
              "gemm,fp8,16,32,64\n"
              "gemm,fp8,64,128,256\n"
              "gemm,int8,1,32,64\n"
              "gemm,int8,32,64,128\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    const int64_t m = c.dim("m"), n = c.dim("n"), k = c.dim("k");
    std::vector<int64_t> shape;
    auto x = load(r, c, "x"), w = load(r, c, "w"), y = load(r, c, "y", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{m, n}));
    double scale = 1;
    if (c.dtype == "fp8") scale = load(r, c, "scale_x").at(0) * load(r, c, "scale_w").at(0);
    std::vector<double> ref(size_t(m * n)), allow(size_t(m * n));
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t t = 0; t < k; ++t) {
          double p = x[size_t(i * k + t)] * w[size_t(j * k + t)];
          s += p;
          sa += std::fabs(p);
        }
        ref[size_t(i * n + j)] = scale * s;
        allow[size_t(i * n + j)] = c.dtype == "bfloat16" ? 2.0 * double(k) * kU32 * sa
                                   : c.dtype == "fp8"    ? std::ldexp(scale * sa, -11)
                                                         : 0.0;
      }
    if (c.dtype == "int8") {
      EXPECT_EQ(y, ref);  // int32 results, exact
    } else {
      expect_close(y, ref, allow, c.name());
    }
  }
  expect_results_csv(r, "gemm");
}

// ---- Convolution (NHWC, KRSC filter): the bf16 GEMM's argument with K = c r s terms per output. cuDNN may pick a
// transform-based algorithm (Winograd, FFT) whose fp32 error is larger than a direct sum's, so the allowance is 8
// times the GEMM's: 16 K u sum|x w|.
TEST(CudaReference, Conv) {
  if (!TPUSIM_CUDA_HAVE_CUDNN) GTEST_SKIP() << "the runner was built without cuDNN";
  RUN_OR_SKIP(r,
              "conv,bfloat16,2,8,8,16,32,3,3,1,1\n"
              "conv,bfloat16,1,9,9,8,16,3,3,2,0\n"
              "conv,bfloat16,1,5,7,32,8,1,1,1,0\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    const int64_t N = c.dim("n"), H = c.dim("h"), W = c.dim("w"), C = c.dim("c"), K = c.dim("k"), R = c.dim("r"),
                  S = c.dim("s"), st = c.dim("stride"), pad = c.dim("pad");
    const int64_t P = (H + 2 * pad - R) / st + 1, Q = (W + 2 * pad - S) / st + 1;
    std::vector<int64_t> shape;
    auto x = load(r, c, "x"), w = load(r, c, "w"), y = load(r, c, "y", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{N, P, Q, K}));
    std::vector<double> ref, allow;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p)
        for (int64_t q = 0; q < Q; ++q)
          for (int64_t k = 0; k < K; ++k) {
            double s = 0, sa = 0;
            for (int64_t rr = 0; rr < R; ++rr)
              for (int64_t ss = 0; ss < S; ++ss) {
                int64_t h = p * st - pad + rr, ww = q * st - pad + ss;
                if (h < 0 || h >= H || ww < 0 || ww >= W) continue;
                for (int64_t ch = 0; ch < C; ++ch) {
                  double prod = x[size_t(((n * H + h) * W + ww) * C + ch)] * w[size_t(((k * R + rr) * S + ss) * C + ch)];
                  s += prod;
                  sa += std::fabs(prod);
                }
              }
            ref.push_back(s);
            allow.push_back(16.0 * double(C * R * S) * kU32 * sa);
          }
    expect_close(y, ref, allow, c.name());
  }
  expect_results_csv(r, "conv");
}

// ---- Softmax: y = e^(x - max) / sum e^(x - max). In fp32, expf is within 2 ulps and the sum of cols terms within
// cols u of its value, so y's relative error before rounding is below (cols + 8) u; allowed twice that.
TEST(CudaReference, Softmax) {
  RUN_OR_SKIP(r, "softmax,bfloat16,7,100\nsoftmax,bfloat16,4,3000\nsoftmax,bfloat16,3,1\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    const int64_t rows = c.dim("rows"), cols = c.dim("cols");
    auto x = load(r, c, "x"), y = load(r, c, "y");
    std::vector<double> ref(x.size()), allow(x.size());
    for (int64_t i = 0; i < rows; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, x[size_t(i * cols + j)]);
      for (int64_t j = 0; j < cols; ++j) sum += std::exp(x[size_t(i * cols + j)] - mx);
      for (int64_t j = 0; j < cols; ++j) {
        size_t at = size_t(i * cols + j);
        ref[at] = std::exp(x[at] - mx) / sum;
        allow[at] = 2.0 * double(cols + 8) * kU32 * ref[at];
      }
    }
    expect_close(y, ref, allow, c.name());
  }
  expect_results_csv(r, "softmax");
}

// ---- LayerNorm: y = (x - mean) / sqrt(var + eps) gamma + beta, eps 1e-5, population variance. With |x| <= 2.5,
// gamma <= 1.5 and rstd <= 1 / 0.5 (the inputs are uniform on [-1.5, 2.5): std 1.15): the fp32 mean is off by at
// most cols u 2.5, the variance by about 2 cols u 16, so rstd relatively by cols u 16; y absolutely by about
// 1.5 (2 cols u 2.5 + 4 cols u 16) < 100 cols u. Allowed: 128 cols u.
TEST(CudaReference, LayerNorm) {
  RUN_OR_SKIP(r, "layernorm,bfloat16,5,768\nlayernorm,bfloat16,3,33\nlayernorm,bfloat16,2,4096\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    const int64_t rows = c.dim("rows"), cols = c.dim("cols");
    auto x = load(r, c, "x"), g = load(r, c, "gamma"), b = load(r, c, "beta"), y = load(r, c, "y");
    std::vector<double> ref(x.size()), allow(x.size(), 128.0 * double(cols) * kU32);
    for (int64_t i = 0; i < rows; ++i) {
      double mean = 0, var = 0;
      for (int64_t j = 0; j < cols; ++j) mean += x[size_t(i * cols + j)];
      mean /= double(cols);
      for (int64_t j = 0; j < cols; ++j) var += std::pow(x[size_t(i * cols + j)] - mean, 2);
      var /= double(cols);
      double rstd = 1.0 / std::sqrt(var + double(kLayerNormEps));
      for (int64_t j = 0; j < cols; ++j)
        ref[size_t(i * cols + j)] = (x[size_t(i * cols + j)] - mean) * rstd * g[size_t(j)] + b[size_t(j)];
    }
    expect_close(y, ref, allow, c.name());
  }
  expect_results_csv(r, "layernorm");
}

// ---- GELU (tanh approximation), x in [-4, 4): the fp32 polynomial is within a few u of its value, tanhf within
// 2 ulps; 1 + tanh cancels for negative x, leaving an absolute error of a few u times 0.5 |x| <= 2: under 2^-20.
TEST(CudaReference, Gelu) {
  RUN_OR_SKIP(r, "gelu,bfloat16,1001\ngelu,bfloat16,4096\ngelu,bfloat16,3\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    auto x = load(r, c, "x"), y = load(r, c, "y");
    std::vector<double> ref(x.size()), allow(x.size(), std::ldexp(1.0, -20));
    for (size_t i = 0; i < x.size(); ++i)
      ref[i] = 0.5 * x[i] * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
    expect_close(y, ref, allow, c.name());
  }
  expect_results_csv(r, "gelu");
}

// ---- Add: bf16 a + b in fp32 (IEEE, exact here or rounded once) and rounded to bf16 to nearest even: computed the
// same way on the CPU, the result must be bit-identical. Sizes cover the 16-byte path and the scalar tail.
TEST(CudaReference, Add) {
  RUN_OR_SKIP(r, "add,bfloat16,1003\nadd,bfloat16,64\nadd,bfloat16,5\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    auto a = load(r, c, "a"), b = load(r, c, "b"), y = load(r, c, "y");
    ASSERT_EQ(y.size(), a.size());
    size_t bad = 0;
    for (size_t i = 0; i < a.size(); ++i) {
      double expect = bf16_to_float(float_to_bf16(static_cast<float>(a[i]) + static_cast<float>(b[i])));
      if (y[i] != expect && bad++ < 5) ADD_FAILURE() << "y[" << i << "] = " << y[i] << ", expected " << expect;
    }
    EXPECT_EQ(bad, 0u);
  }
  expect_results_csv(r, "add");
}

// ---- Causal attention, q and k uniform on [-2, 2), v on [-1, 1). A score is a dot product of head_dim exact
// products scaled by 1/sqrt(head_dim): off in fp32 by at most head_dim u sum|q k| / sqrt(head_dim) <= 4 head_dim^1.5 u
// (< 1e-3 for head_dim 128); exp turns that into a relative error of each weight, and o (a weighted mean of v's with
// |v| <= 1) moves by at most twice it. Allowed: 8 head_dim^1.5 u + 2^-16 for the sums.
TEST(CudaReference, CausalAttention) {
  RUN_OR_SKIP(r,
              "causal_attention,bfloat16,2,37,4,2,64\n"
              "causal_attention,bfloat16,1,70,2,2,128\n"
              "causal_attention,bfloat16,1,1,1,1,64\n"
              "causal_attention,bfloat16,1,33,2,1,32\n"
              "causal_attention,bfloat16,1,20,1,1,256\n");
  for (const auto& c : r.cases) {
    SCOPED_TRACE(c.name());
    const int64_t B = c.dim("batch_size"), S = c.dim("seq_len"), H = c.dim("heads"), KV = c.dim("kv_heads"),
                  D = c.dim("head_dim");
    std::vector<int64_t> shape;
    auto q = load(r, c, "q"), k = load(r, c, "k"), v = load(r, c, "v"), y = load(r, c, "y", &shape);
    ASSERT_EQ(shape, (std::vector<int64_t>{B, H, S, D}));
    std::vector<double> ref(y.size());
    const double scale = 1.0 / std::sqrt(double(D));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        const int64_t kvh = h / (H / KV);
        const double* qb = q.data() + ((b * H + h) * S) * D;
        const double* kb = k.data() + ((b * KV + kvh) * S) * D;
        const double* vb = v.data() + ((b * KV + kvh) * S) * D;
        for (int64_t i = 0; i < S; ++i) {
          std::vector<double> s(size_t(i + 1));
          double mx = -INFINITY, sum = 0;
          for (int64_t j = 0; j <= i; ++j) {
            double dot = 0;
            for (int64_t d = 0; d < D; ++d) dot += qb[i * D + d] * kb[j * D + d];
            s[size_t(j)] = dot * scale;
            mx = std::max(mx, s[size_t(j)]);
          }
          for (auto& e : s) sum += (e = std::exp(e - mx));
          for (int64_t d = 0; d < D; ++d) {
            double o = 0;
            for (int64_t j = 0; j <= i; ++j) o += s[size_t(j)] * vb[j * D + d];
            ref[size_t(((b * H + h) * S + i) * D + d)] = o / sum;
          }
        }
      }
    std::vector<double> allow(y.size(), 8.0 * std::pow(double(D), 1.5) * kU32 + std::ldexp(1.0, -16));
    expect_close(y, ref, allow, c.name());
  }
  expect_results_csv(r, "causal_attention");
}

// ---- meta.json names the GPU, the versions and the settings; a bad corpus is refused before any GPU work.
TEST(CudaReference, MetaJson) {
  RUN_OR_SKIP(r, "add,bfloat16,8\n");
  std::string meta = slurp(r.dir / "out" / "meta.json");
  for (const char* key : {"\"gpu_name\": \"", "\"driver_version\": ", "\"cuda_runtime_version\": \"",
                          "\"cublaslt_version\": \"", "\"cudnn_version\": ", "\"repeats\": 3,", "\"warmup\": 1,",
                          "\"name\": \"add_bfloat16_e8\"", "\"status\": \"ok\"", "\"npy\": true}"})
    EXPECT_NE(meta.find(key), std::string::npos) << key << " missing from meta.json:\n" << meta;
}

// Without a GPU the runner says so and exits 3; with one it runs. Either way a malformed corpus exits 2 first.
TEST(CudaReferenceRunner, RefusesABadCorpusBeforeLookingForAGpu) {
  fs::path dir = fs::temp_directory_path() / ("tpusim_cuda_ref_bad_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "c.csv") << "gemm,bfloat16,1,2\n";
  std::string cmd = std::string("'") + TPUSIM_CUDA_RUNNER + "' --corpus '" + (dir / "c.csv").string() + "' --out '" +
                    (dir / "out").string() + "' > '" + (dir / "log.txt").string() + "' 2>&1";
  int status = std::system(cmd.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 2);
  EXPECT_NE(slurp(dir / "log.txt").find("c.csv:1: gemm expects 3 dims after the dtype (m,n,k), got 2"),
            std::string::npos)
      << slurp(dir / "log.txt");
  fs::remove_all(dir);
}

TEST(CudaReferenceRunner, NoDeviceMessageOrARun) {
  RUN_OR_SKIP(r, "gelu,bfloat16,16\n");  // without a GPU: the runner's message checked (in RUN_OR_SKIP), skipped
  EXPECT_NE(r.log.find("1 of 1 cases ran"), std::string::npos) << r.log;
}

}  // namespace
