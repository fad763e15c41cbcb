// tpusim_cuda_runner: runs a corpus of reference cases on a CUDA GPU and writes their timings (per op, in the NVIDIA
// goldens' CSV format), meta.json, and every case's inputs and output as .npy (README.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <sstream>

#include "gpu.h"
#include "kernels.h"

namespace fs = std::filesystem;

namespace tpusim::cuda_ref {

namespace {

Buf bf16_input(const NpySink& npy, const std::string& tensor, const std::vector<int64_t>& shape, float lo, float hi) {
  size_t n = 1;
  for (auto d : shape) n *= size_t(d);
  auto v = random_bf16(n, lo, hi, tensor_seed(npy.case_name, tensor));
  if (npy.enabled) write_npy_bf16_as_f32(npy.path(tensor), shape, v);
  return upload(v);
}

}  // namespace

PreparedCase prepare_kernel(const Case& c, Gpu& gpu, const NpySink& npy) {
  PreparedCase pc;
  std::vector<int64_t> y_shape;
  Buf y;
  auto output = [&](std::vector<int64_t> shape) {
    y_shape = shape;
    size_t n = 1;
    for (auto d : shape) n *= size_t(d);
    y = std::make_shared<DeviceBuffer>(n * 2);
  };
  if (c.op == "softmax" || c.op == "layernorm") {
    const int64_t rows = c.dim("rows"), cols = c.dim("cols");
    output({rows, cols});
    if (c.op == "softmax") {
      Buf x = bf16_input(npy, "x", {rows, cols}, -4, 4);
      pc.launch = [=](cudaStream_t s) { launch_softmax(x->as<uint16_t>(), y->as<uint16_t>(), rows, cols, s); };
      pc.algorithm = "hand-written: one block per row, fp32 max, sum of exp and division";
    } else {
      Buf x = bf16_input(npy, "x", {rows, cols}, -1.5f, 2.5f);
      Buf g = bf16_input(npy, "gamma", {cols}, 0.5f, 1.5f);
      Buf b = bf16_input(npy, "beta", {cols}, -0.5f, 0.5f);
      pc.launch = [=](cudaStream_t s) {
        launch_layernorm(x->as<uint16_t>(), g->as<uint16_t>(), b->as<uint16_t>(), y->as<uint16_t>(), rows, cols,
                         kLayerNormEps, s);
      };
      pc.algorithm = "hand-written: one block per row, fp32 two-pass mean and variance";
    }
  } else if (c.op == "gelu" || c.op == "add") {
    const int64_t n = c.dim("elements");
    output({n});
    if (c.op == "gelu") {
      Buf x = bf16_input(npy, "x", {n}, -4, 4);
      pc.launch = [=](cudaStream_t s) { launch_gelu(x->as<uint16_t>(), y->as<uint16_t>(), n, s); };
      pc.algorithm = "hand-written: GELU tanh approximation, 8 elements per 16-byte load";
    } else {
      Buf a = bf16_input(npy, "a", {n}, -4, 4);
      Buf b = bf16_input(npy, "b", {n}, -4, 4);
      pc.launch = [=](cudaStream_t s) { launch_add(a->as<uint16_t>(), b->as<uint16_t>(), y->as<uint16_t>(), n, s); };
      pc.algorithm = "hand-written: 8 elements per 16-byte load";
    }
  } else if (c.op == "causal_attention") {
    const int64_t b = c.dim("batch_size"), s = c.dim("seq_len"), h = c.dim("heads"), kv = c.dim("kv_heads"),
                  d = c.dim("head_dim");
    if (s > 0x7FFFFFFF / 16) throw std::runtime_error("causal_attention: seq_len too large");
    output({b, h, s, d});
    Buf q = bf16_input(npy, "q", {b, h, s, d}, -2, 2);
    Buf k = bf16_input(npy, "k", {b, kv, s, d}, -2, 2);
    Buf v = bf16_input(npy, "v", {b, kv, s, d}, -1, 1);
    pc.launch = [=](cudaStream_t st) {
      launch_causal_attention(q->as<uint16_t>(), k->as<uint16_t>(), v->as<uint16_t>(), y->as<uint16_t>(), int(b),
                              int(s), int(h), int(kv), int(d), st);
    };
    pc.algorithm = "hand-written: online softmax, 16 query rows per block, 32-key tiles in shared memory, fp32 CUDA cores";
  } else {
    throw std::runtime_error("no kernel for op " + c.op);
  }
  pc.save_output = [=] {
    size_t n = 1;
    for (auto dd : y_shape) n *= size_t(dd);
    if (npy.enabled) write_npy_bf16_as_f32(npy.path("y"), y_shape, download<uint16_t>(y, n));
  };
  (void)gpu;
  return pc;
}

#ifndef TPUSIM_HAVE_CUDNN
PreparedCase prepare_conv(const Case&, Gpu&, const NpySink&) {
  throw std::runtime_error("conv: this runner was built without cuDNN (none was found at configure time)");
}
std::string cudnn_version() { return ""; }
#endif

}  // namespace tpusim::cuda_ref

namespace {

using namespace tpusim::cuda_ref;

const char* kUsage =
    "usage: tpusim_cuda_runner --corpus FILE.csv --out DIR [--repeats N] [--warmup N] [--device N]\n"
    "                          [--npy-max-mb N | --no-npy]\n"
    "\n"
    "Runs every case of the corpus (validation/cuda/README.md) on a CUDA GPU: fixed-seed inputs, N warm-up launches,\n"
    "then the median of --repeats launches timed with CUDA events. Writes DIR/<op>.csv (the NVIDIA goldens' format),\n"
    "DIR/meta.json, and each case's tensors as DIR/<case>.<tensor>.npy (inputs, and the output as <case>.y.npy).\n"
    "\n"
    "  --repeats N  timed launches per case (default 30)\n"
    "  --warmup N   untimed launches first (default 5)\n"
    "  --device N   the CUDA device (default 0)\n"
    "  --npy-max-mb N  write no tensors for a case whose tensors would pass N MB (default 512; 0: no limit)\n"
    "  --no-npy     write no tensors (timings only)\n"
    "\n"
    "Exit status: 0 all cases ran; 1 a case failed; 2 a mistake in the arguments or the corpus; 3 no CUDA device.\n";

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Options {
  std::string corpus, out;
  int repeats = 30, warmup = 5, device = 0;
  bool npy = true;
  int64_t npy_max_mb = 512;
};

Options parse_args(int argc, char** argv) {
  Options o;
  auto number = [](const std::string& opt, const std::string& v, int min) {
    try {
      size_t used = 0;
      int x = std::stoi(v, &used);
      if (used != v.size() || x < min) throw std::invalid_argument(v);
      return x;
    } catch (const std::logic_error&) {
      throw UsageError(opt + " expects an integer >= " + std::to_string(min) + ", got '" + v + "'");
    }
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw UsageError(a + " needs a value");
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::cout << kUsage;
      std::exit(0);
    } else if (a == "--corpus") {
      o.corpus = value();
    } else if (a == "--out") {
      o.out = value();
    } else if (a == "--repeats") {
      o.repeats = number(a, value(), 1);
    } else if (a == "--warmup") {
      o.warmup = number(a, value(), 0);
    } else if (a == "--device") {
      o.device = number(a, value(), 0);
    } else if (a == "--npy-max-mb") {
      o.npy_max_mb = number(a, value(), 0);
    } else if (a == "--no-npy") {
      o.npy = false;
    } else {
      throw UsageError("unknown argument '" + a + "'");
    }
  }
  if (o.corpus.empty() || o.out.empty()) throw UsageError("--corpus and --out are required");
  return o;
}

std::string version_text(int v) {  // CUDA's 1000 * major + 10 * minor
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The kernel driver's version, from the file the NVIDIA kernel module provides (Linux), or "unknown".
std::string nvidia_driver_version() {
  std::ifstream in("/proc/driver/nvidia/version");
  std::string line;
  if (!in || !std::getline(in, line)) return "unknown";
  std::smatch m;
  if (std::regex_search(line, m, std::regex(R"(Kernel Module\s+([0-9]+(\.[0-9]+)+))"))) return m[1];
  if (std::regex_search(line, m, std::regex(R"(\b([0-9]{3,}\.[0-9]+(\.[0-9]+)?)\b)"))) return m[1];
  return "unknown";
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string num(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

void write_file(const fs::path& p, const std::function<void(std::ostream&)>& f) {
  std::ofstream out(p, std::ios::trunc);
  if (!out) throw std::runtime_error(p.string() + ": cannot open for writing");
  f(out);
  out.close();
  if (!out) throw std::runtime_error(p.string() + ": cannot write");
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  std::vector<Case> cases;
  try {
    opt = parse_args(argc, argv);
    cases = read_corpus(opt.corpus);
  } catch (const UsageError& e) {
    std::cerr << "tpusim_cuda_runner: " << e.what() << "\n\n" << kUsage;
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "tpusim_cuda_runner: " << e.what() << "\n";
    return 2;
  }

  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::cerr << "tpusim_cuda_runner: no CUDA device found (cudaGetDeviceCount: "
              << (e != cudaSuccess ? std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e) : "0 devices")
              << ")\n";
    return 3;
  }
  if (opt.device >= count) {
    std::cerr << "tpusim_cuda_runner: --device " << opt.device << ": there are " << count << " CUDA device(s)\n";
    return 2;
  }

  std::vector<CaseResult> results;
  try {
    fs::create_directories(opt.out);
    cuda_check(cudaSetDevice(opt.device), "cudaSetDevice");
    cudaDeviceProp prop{};
    cuda_check(cudaGetDeviceProperties(&prop, opt.device), "cudaGetDeviceProperties");
    int driver = 0, runtime = 0;
    cuda_check(cudaDriverGetVersion(&driver), "cudaDriverGetVersion");
    cuda_check(cudaRuntimeGetVersion(&runtime), "cudaRuntimeGetVersion");
    Gpu gpu;
    // A blocking stream: it waits for the uploads (plain cudaMemcpy, on the legacy default stream) to land.
    cuda_check(cudaStreamCreate(&gpu.stream), "cudaStreamCreate");
    cudaEvent_t start, stop;
    cuda_check(cudaEventCreate(&start), "cudaEventCreate");
    cuda_check(cudaEventCreate(&stop), "cudaEventCreate");

    std::string cudnn = cudnn_version();
    const std::vector<std::pair<std::string, std::string>> meta = {
        {"tool", json_string("tpusim_cuda_runner")},
        {"gpu_name", json_string(prop.name)},
        {"compute_capability", json_string(std::to_string(prop.major) + "." + std::to_string(prop.minor))},
        {"sm_count", std::to_string(prop.multiProcessorCount)},
        {"memory_bytes", std::to_string(prop.totalGlobalMem)},
        {"driver_version", json_string(nvidia_driver_version())},
        {"cuda_driver_api_version", json_string(version_text(driver))},
        {"cuda_runtime_version", json_string(version_text(runtime))},
        {"cublaslt_version", json_string(cublaslt_version())},
        {"cudnn_version", cudnn.empty() ? "null" : json_string(cudnn)},
        {"repeats", std::to_string(opt.repeats)},
        {"warmup", std::to_string(opt.warmup)},
        {"timing", json_string("one stream; CUDA events recorded around each launch; the median of the repeats after "
                               "the warm-up launches; inputs stay in L2 between launches where they fit")},
        {"inputs", json_string("SplitMix64 seeded with FNV-1a 64 of '<case>.<tensor>'; bf16/fp8 values uniform in a "
                               "range and rounded to nearest even (README.md lists the ranges)")},
        {"gelu", json_string("tanh approximation")},
        {"layernorm_eps", num(kLayerNormEps)},
        {"fp8_scale_x", num(kFp8ScaleX)},
        {"fp8_scale_w", num(kFp8ScaleW)},
        {"corpus", json_string(opt.corpus)},
        {"started_utc", json_string(utc_now())},
        {"npy", opt.npy ? "true" : "false"},
        {"npy_max_mb", std::to_string(opt.npy_max_mb)},
    };
    auto save = [&] {
      write_results(opt.out, results);
      write_file(fs::path(opt.out) / "meta.json", [&](std::ostream& os) { write_meta_json(os, meta, results); });
    };
    std::cout << "tpusim_cuda_runner: " << prop.name << " (sm_" << prop.major << prop.minor << "), driver "
              << nvidia_driver_version() << ", CUDA runtime " << version_text(runtime) << "; " << cases.size()
              << " cases, " << opt.warmup << " warm-up and " << opt.repeats << " timed launches each\n";

    bool broken = false;  // a sticky CUDA error: the context cannot run anything more
    for (size_t i = 0; i < cases.size(); ++i) {
      CaseResult r;
      r.c = cases[i];
      const std::string name = r.c.name();
      std::cout << "[" << i + 1 << "/" << cases.size() << "] " << name << ": " << std::flush;
      if (broken) {
        r.error = "not run: an earlier case left the CUDA context unusable";
        std::cout << r.error << "\n";
        results.push_back(r);
        continue;
      }
      try {
        const int64_t bytes = case_tensor_bytes(r.c);
        NpySink npy{opt.out, name, opt.npy && (opt.npy_max_mb == 0 || bytes <= opt.npy_max_mb * 1000000)};
        r.npy = npy.enabled;
        PreparedCase pc = r.c.op == "gemm"   ? prepare_gemm(r.c, gpu, npy)
                          : r.c.op == "conv" ? prepare_conv(r.c, gpu, npy)
                                             : prepare_kernel(r.c, gpu, npy);
        cuda_check(cudaDeviceSynchronize(), "after the uploads");
        for (int w = 0; w < opt.warmup; ++w) pc.launch(gpu.stream);
        cuda_check(cudaStreamSynchronize(gpu.stream), "warm-up");
        std::vector<double> us;
        for (int rep = 0; rep < opt.repeats; ++rep) {
          cuda_check(cudaEventRecord(start, gpu.stream), "cudaEventRecord");
          pc.launch(gpu.stream);
          cuda_check(cudaEventRecord(stop, gpu.stream), "cudaEventRecord");
          cuda_check(cudaEventSynchronize(stop), "cudaEventSynchronize");
          float ms = 0;
          cuda_check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
          us.push_back(1000.0 * ms);
        }
        pc.save_output();
        r.ok = true;
        r.median_us = median(us);
        r.min_us = *std::min_element(us.begin(), us.end());
        r.max_us = *std::max_element(us.begin(), us.end());
        r.repeats = opt.repeats;
        r.algorithm = pc.algorithm;
        std::cout << r.median_us << " us (min " << r.min_us << ", max " << r.max_us << "); " << r.algorithm
                  << (r.npy || !opt.npy ? "" : "; tensors not written (" + std::to_string(bytes / 1000000) +
                                                     " MB > --npy-max-mb)")
                  << "\n";
      } catch (const std::exception& ex) {
        r.error = ex.what();
        std::cout << "FAILED: " << r.error << "\n";
        cudaGetLastError();  // clear an error that is not sticky
        if (cudaDeviceSynchronize() != cudaSuccess) broken = true;
      }
      results.push_back(r);
      save();  // after every case, so that a crash keeps what was measured
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    size_t failed = std::count_if(results.begin(), results.end(), [](const CaseResult& r) { return !r.ok; });
    std::cout << "tpusim_cuda_runner: " << results.size() - failed << " of " << results.size() << " cases ran; "
              << "results in " << opt.out << "\n";
    if (failed) {
      std::cerr << "tpusim_cuda_runner: " << failed << " case(s) failed (meta.json has the errors)\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& ex) {
    std::cerr << "tpusim_cuda_runner: " << ex.what() << "\n";
    return 1;
  }
}
