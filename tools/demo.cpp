// `tpusim demo`: a GEMM kernel and a small MLP (ONNX, exported by workloads/mlp.py) on one simulated chip,
// each checked against an independent reference: a plain host loop for the GEMMs, torch's output for the MLP.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iomanip>

#include "cli.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/runtime/runtime.h"

namespace tpusim::cli {
namespace {

template <typename T>
T at(const runtime::HostTensor& t, int64_t i) {
  T v;
  std::memcpy(&v, t.data.data() + sizeof(T) * i, sizeof(T));
  return v;
}

double element(const runtime::HostTensor& t, int64_t i) {
  switch (t.dtype) {
    case isa::DType::I8: return at<int8_t>(t, i);
    case isa::DType::I32: return at<int32_t>(t, i);
    case isa::DType::BF16: return isa::f32_from_bf16(at<uint16_t>(t, i));
    case isa::DType::F32: return at<float>(t, i);
    case isa::DType::F8E4M3: return isa::f32_from_f8e4m3(at<uint8_t>(t, i));
  }
  return 0;
}

// c = a @ b computed on the host in double (exact for the int8 case).
std::vector<double> host_gemm(const runtime::HostTensor& a, const runtime::HostTensor& b) {
  int64_t m = a.shape[0], k = a.shape[1], n = b.shape[1];
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t l = 0; l < k; ++l) {
      double av = element(a, i * k + l);
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += av * element(b, l * n + j);
    }
  return c;
}

struct Compare {
  double max_abs_err = 0, rel_l2 = 0, cosine = 0;
  int64_t mismatches = 0;
};

Compare compare(const runtime::HostTensor& got, const std::vector<double>& want) {
  Compare c;
  double dot = 0, gg = 0, ww = 0, dd = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    double g = element(got, static_cast<int64_t>(i)), w = want[i];
    c.max_abs_err = std::max(c.max_abs_err, std::abs(g - w));
    c.mismatches += g != w;
    dot += g * w, gg += g * g, ww += w * w, dd += (g - w) * (g - w);
  }
  c.rel_l2 = ww > 0 ? std::sqrt(dd / ww) : std::sqrt(dd);
  c.cosine = gg > 0 && ww > 0 ? dot / std::sqrt(gg * ww) : (gg == ww ? 1.0 : 0.0);
  return c;
}

void print_run(std::ostream& os, const sim::ChipConfig& cfg, const sim::RunStats& s) {
  os << "    " << s.cycles << " cycles, " << std::setprecision(4) << s.seconds * 1e6 << " us simulated; utilisation:";
  for (int u = 1; u < isa::kNumUnits; ++u)
    os << " " << isa::unit_name(static_cast<isa::Unit>(u)) << " " << std::fixed << std::setprecision(1)
       << 100.0 * s.units[u].utilization << "%";
  os << "; MXU MACs " << 100.0 * s.mxu_mac_utilization << "%\n";
  os.unsetf(std::ios::fixed);
}

bool gemm_case(std::ostream& os, runtime::Client& client, const char* kernel, int64_t m, int64_t k, int64_t n) {
  std::map<std::string, int64_t> defines{{"M", m}, {"K", k}, {"N", n}};
  for (const auto& [name, v] : sim::kernel_symbols(client.config())) defines[name] = v;
  runtime::Executable exe(kernels::assemble(kernel, defines));
  std::map<std::string, runtime::HostTensor> in;
  uint64_t seed = 7;
  for (const auto* d : exe.inputs()) in[d->name] = runtime::random_tensor(*d, seed++);
  runtime::ExecuteResult r = client.execute(exe, in);
  Compare c = compare(r.outputs.at("c"), host_gemm(in.at("a"), in.at("b")));
  bool exact = exe.inputs()[0]->dtype == isa::DType::I8;
  // bf16 products are exact in f32; the sums differ from the double reference by f32 rounding only.
  bool ok = exact ? c.mismatches == 0 : c.rel_l2 <= 1e-5;
  os << "  " << kernel << " " << m << "x" << k << "x" << n << ": ";
  if (exact)
    os << (ok ? "equals" : "DIFFERS FROM") << " the host reference exactly (" << c.mismatches << " mismatches)\n";
  else
    os << "relative L2 error " << std::setprecision(3) << c.rel_l2 << " vs the f64 host reference: "
       << (ok ? "ok" : "TOO LARGE") << "\n";
  print_run(os, client.config(), r.run.stats);
  return ok;
}

bool mlp_case(std::ostream& os, runtime::Client& client) {
  namespace fs = std::filesystem;
  fs::path dir = fs::path(TPUSIM_WORKLOADS_DIR) / "mlp";
  if (!fs::exists(dir / "mlp.onnx")) {
    os << "  mlp: " << (dir / "mlp.onnx").string() << " is missing (the build makes it with workloads/mlp.py)\n";
    return false;
  }
  runtime::Executable exe = client.compile_onnx_file((dir / "mlp.onnx").string());
  runtime::HostTensor x = runtime::read_npy((dir / "x.npy").string());
  runtime::HostTensor ref = runtime::read_npy((dir / "y_ref.npy").string());
  runtime::ExecuteResult r = client.execute(exe, {{exe.inputs().at(0)->name, x}});
  const runtime::HostTensor& y = r.outputs.at(exe.outputs().at(0)->name);
  std::vector<double> want(ref.elements());
  for (int64_t i = 0; i < ref.elements(); ++i) want[i] = element(ref, i);
  Compare c = compare(y, want);
  bool ok = c.cosine >= 0.999 && c.rel_l2 <= 2e-2;
  os << "  mlp.onnx (bf16, " << exe.program().code.size() << " instructions): cosine similarity to torch "
     << std::setprecision(6) << c.cosine << ", relative L2 error " << std::setprecision(3) << c.rel_l2 << ": "
     << (ok ? "ok" : "OUT OF TOLERANCE") << " (needs >= 0.999 and <= 0.02)\n";
  print_run(os, client.config(), r.run.stats);
  return ok;
}

}  // namespace

int run_demo(std::ostream& os, const sim::ChipConfig& cfg) {
  runtime::Client client(cfg);
  os << "tpusim demo on " << cfg.chip.name << ": " << cfg.mxu.rows << "x" << cfg.mxu.cols << " MXU at "
     << cfg.chip.clock_mhz << " MHz, " << cfg.hbm.bandwidth_gbs << " GB/s HBM\n";
  bool ok = gemm_case(os, client, "gemm_int8.s", 384, 256, 640);
  ok = gemm_case(os, client, "gemm_bf16.s", 512, 512, 512) && ok;
  ok = mlp_case(os, client) && ok;
  os << (ok ? "demo passed: every result matches its reference\n" : "demo FAILED\n");
  return ok ? 0 : 1;
}

}  // namespace tpusim::cli
