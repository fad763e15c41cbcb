// tpusim validate: golden cases through the kernels the compiler emits and the simulator (validate.h).
#include "validate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <functional>
#include <cerrno>
#include <cstring>
#include <cstdio>
#include <memory>

#include "tpusim/explore/pool.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/kernels/copy.h"
#include "tpusim/kernels/gemm_chip.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

#ifndef TPUSIM_GOLDENS_DIR
#define TPUSIM_GOLDENS_DIR "validation/goldens/h200"
#endif

namespace tpusim::validate {
namespace {

// The plain roofline's fixed overhead: the smallest measured GEMMs take about 2.5 us (launch and first tile).
constexpr double kFixedUs = 2.5;

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string shape_key(const std::string& cls, const std::vector<std::pair<std::string, int64_t>>& shape) {
  std::string k = cls;
  for (const auto& [name, v] : shape) k += " " + name + "=" + std::to_string(v);
  return k;
}

std::vector<std::string> split(const std::string& line) {
  std::vector<std::string> f;
  std::stringstream ss(line);
  std::string x;
  while (std::getline(ss, x, ',')) f.push_back(x);
  return f;
}

int64_t get(const Case& c, const char* name) {
  for (const auto& [n, v] : c.shape)
    if (n == name) return v;
  throw std::logic_error(std::string("case without ") + name);
}

// The chip's figures for the plain roofline.
struct ChipFigures {
  double peak_bf16 = 0, peak_fp8 = 0, hbm = 0;  // flop/s, flop/s, bytes/s
  double clock_mhz = 0;
};
ChipFigures figures(const sim::ChipConfig& cfg) {
  ChipFigures f;
  const double macs = static_cast<double>(cfg.chip.cores) * cfg.core.mxus * cfg.mxu.rows * cfg.mxu.cols;
  f.clock_mhz = cfg.chip.clock_mhz;
  f.peak_bf16 = 2.0 * macs * cfg.chip.clock_mhz * 1e6;
  // fp8 at the chip's fp8 rate; a chip without one (mxu.fp8_rate = 0) fails the fp8 cases when they run, and
  // their roofline is then bf16's.
  f.peak_fp8 = f.peak_bf16 * std::max(1, cfg.mxu.fp8_rate);
  f.hbm = cfg.hbm.bandwidth_gbs * 1e9;
  return f;
}

// The GEMM kernel the compiler emits for `y = x @ W^T` (W [n, k], a Linear layer) on this chip: gemm_chip's
// tiled schedule with the weights transposed on load, K split where tiles alone leave cores idle; fp8 goldens
// run as f8e4m3 (OCP E4M3, what the goldens' cuBLASLt fp8 GEMMs take) at the chip's mxu.fp8_rate. A core runs its
// tiles one at a time (overlap_tiles = false), as an SM runs one thread block: each tile pays its first load's
// latency and its stores' (docs/validation.md, "GEMM tiles one at a time"). Where it splits K, the reduction is
// a second kernel, as cuBLAS's is: one more launch (Module::reduction_launch_cycles).
kernels::GemmChip gemm_of(const Case& c) {
  kernels::GemmChip g;
  g.m = get(c, "m"), g.n = get(c, "n"), g.k = get(c, "k");
  g.in = c.cls == "gemm_fp8" ? isa::DType::F8E4M3 : isa::DType::BF16;
  g.out = isa::DType::BF16;
  g.trans_b = true;
  g.max_split_k = 16;  // as cuBLAS splits K when the output tiles alone leave SMs idle
  g.overlap_tiles = false;
  g.multicast = true;  // pairs of SMs share a tile's operand by TMA multicast, as cuBLAS's clusters of two do
  // Strips of the matrix unit's 128 columns: cuBLAS's Hopper kernels tile N by 64 to 256 (CUTLASS's sm90 tile
  // shapes) and split K where tiles leave SMs idle. With narrow strips the 1000-case sample's bf16 MAPE went from
  // 7.51% to 9.0% (launch-bound 7.5% -> 9.5%; fp8 5.3% -> 5.0%): not what the GPU runs.
  g.narrow_strips = false;
  // K in chunks of at least 64 elements (4 folds of 16): cuBLAS's Hopper kernels take K in tiles of 64 bf16
  // elements (128-byte rows of shared memory, TMA's widest swizzle); with chunks of 32 allowed, the 1000-case
  // sample's bf16 MAPE went from 7.5% to 7.6% (compute-bound 9.0% -> 9.4%).
  g.min_chunk_folds = 4;
  return g;
}

bool is_attention(const Case& c) { return c.cls.rfind("attention_", 0) == 0; }

// The fused attention kernel for an attention golden (attention_chip.h): bf16 q, k, v and output, causal or
// bidirectional (the encoder's), grouped-query heads as the golden gives them; run as the measured GPU kernel
// runs, with its tiles and its thread blocks:
// - Tiles of at least 64 query rows and 64 keys: the GPU's kernels compute whole tiles. TensorRT-LLM's Hopper
//   context kernels take 64 query rows (a warpgroup's MMA takes 64 rows of A) and 256, 128 or 64 keys per tile
//   by head size (their names: fmha_v2_flash_attention_bf16_64_256_S_q_paged_kv_64_tma_ws_sm90, ..._64_128_S_
//   ..._128_..., ..._64_64_S_..._256_...), so a one-token case computes a 64 x 64 tile per (batch, head) at least,
//   not 1 x 16. (Their exact key tiles need two K/V slots where attention_chip keeps three; tried, that made the
//   compute-bound cases 45% too slow: docs/validation.md.)
// - The head dimension in whole chunks of 64 (compute_head_dim): Hopper kernels lay it out in 128-byte rows of
//   shared memory (64 bf16 elements, TMA's widest swizzle), so head_dim 72 and 80 compute as 128. In the
//   goldens, encoder cases of head_dim 72 and 80 take the same time, 1.51 times head_dim 64's (median over the
//   537 shapes measured with all three and above 40 us); causal head_dim 192 takes 0.83 times 256's, so it is
//   not padded further.
// - One item per core at a time, none prefetched (overlap_items = false): the goldens' time rises by a step at
//   every 132 (batch, head) pairs (one-token causal, head_dim 128: 13.8 us up to 128 pairs, 16.0 from 160 to 256,
//   18.8 from 320), so the GPU runs one thread block per SM at a time, and each pays its own load and store
//   latencies (2.7 to 4.3 us per step for head_dim 64 to 256).
// - One head per item (heads_per_item = 1), as FlashAttention-style GPU kernels launch one thread block per
//   (query tile, batch, head).
// - At least `tile_cycles` per item (min_item_cycles): TensorRT-LLM's kernels take a minimum time per tile
//   (validate.h, kAttentionTileUs).
kernels::AttentionChip attention_of(const Case& c, int64_t tile_cycles = 0) {
  kernels::AttentionChip a;
  a.batch = get(c, "batch_size"), a.seq = get(c, "seq_len"), a.heads = get(c, "heads");
  a.kv_heads = c.cls == "attention_causal" ? get(c, "kv_heads") : a.heads;
  a.head_dim = get(c, "head_dim");
  a.causal = c.cls == "attention_causal";
  a.out = isa::DType::BF16;
  a.min_block_q = a.min_block_k = 64;
  a.compute_head_dim = (a.head_dim + 63) / 64 * 64;
  a.overlap_items = false;
  a.heads_per_item = 1;
  a.min_item_cycles = tile_cycles;
  return a;
}

uint64_t align4k(uint64_t v) { return (v + 4095) / 4096 * 4096; }

// q, k and v of an attention case (bf16, B x S x (H + 2 KVH) x D), as the module's input holds them.
uint64_t qkv_bytes(const kernels::AttentionChip& a) {
  return static_cast<uint64_t>(a.batch * a.seq * (a.heads + 2 * a.kv_heads) * a.head_dim) * 2;
}

// The causal module's QKV preprocessing, before the fused kernel: it reads q, k and v (bf16, B x S x (H + 2 KVH)
// x D) at address 0 and writes them back after them, q with RoPE applied and k and v into the paged KV cache,
// where the fused kernel reads them (attention_program). Its traffic is a copy of those bytes (kernels/copy.h)
// over every core; its arithmetic (a rotation per pair of elements) is negligible.
isa::Program preprocessing_program(const Case& c, const std::map<std::string, int64_t>& symbols) {
  const uint64_t bytes = qkv_bytes(attention_of(c));
  kernels::Move m;
  m.src = 0, m.dst = static_cast<int64_t>(align4k(bytes)), m.rows = 1, m.rowbytes = static_cast<int64_t>(bytes);
  return kernels::copy_kernel({m}, symbols, 0, "qkv_preprocessing", symbols.at("CORES"));
}

// The fused kernel with q, k and v where the preprocessing wrote them (one after the other, after the module's
// input), and o after them: what the preprocessing leaves in the L2 the kernel finds there.
isa::Program attention_program(const Case& c, const std::map<std::string, int64_t>& symbols, int64_t tile_cycles) {
  const kernels::AttentionChip a = attention_of(c, tile_cycles);
  const uint64_t at = align4k(qkv_bytes(a)), q = static_cast<uint64_t>(a.batch * a.seq * a.heads * a.head_dim) * 2,
                 kv = static_cast<uint64_t>(a.batch * a.seq * a.kv_heads * a.head_dim) * 2;
  const uint64_t o = align4k(at + q + 2 * kv);
  return kernels::attention_chip_kernel(a, symbols, {{"q", at}, {"k", at + q}, {"v", at + q + kv}, {"o", o}}, 0,
                                        align4k(o + q));
}

// How a case is timed. By default each kernel on an empty L2, once. With warm_up (--warm-up), as the goldens were
// measured (docs/validation.md, "How the goldens were measured"): the case's kernels run once to warm up, then
// once more, timed, on the L2 that the warm-up left (a GPU's L2 is not flushed between launches); and a GEMM
// golden of NVIDIA's collector runs `copies` Linear layers one after the other, each with its own weights and the
// same x, and reports their time over `copies`: so the weights come from HBM wherever the copies together exceed
// the L2, and x from the L2 wherever it fits.
struct Protocol {
  bool warm_up = false;
  int weight_copies = 1;  // with warm_up: 0, NVIDIA's rule (ceil(L2 bytes / weight bytes), 1 to 5); else that many
  uint64_t l2_bytes = 0;  // the chip's shared cache (0: none)
  int copies(const Case& c) const {
    if (!warm_up) return 1;
    if (weight_copies > 0) return weight_copies;
    const uint64_t w = static_cast<uint64_t>(get(c, "n") * get(c, "k")) * (c.cls == "gemm_fp8" ? 1 : 2);
    return static_cast<int>(std::clamp<uint64_t>((l2_bytes + w - 1) / w, 1, 5));
  }
};

// The GEMM's kernels, one per weight copy: x (`a`) and y (`c`) at the same addresses in each, the copies' weights
// (`b`) one after the other. The tensors are in the order the assembler places them (declared: a, b, c, then split
// K's partials), so that one copy is gemm_chip_kernel's program.
std::vector<isa::Program> gemm_programs(const kernels::GemmChip& g, int copies,
                                        const std::map<std::string, int64_t>& symbols) {
  const uint64_t e = isa::dtype_size(g.in), a = align4k(static_cast<uint64_t>(g.m * g.k) * e),
                 w = align4k(static_cast<uint64_t>(g.n * g.k) * e),
                 y = align4k(static_cast<uint64_t>(g.m * g.n) * isa::dtype_size(g.out)),
                 c = a + static_cast<uint64_t>(copies) * w;
  std::vector<isa::Program> out;
  for (int i = 0; i < copies; ++i)
    out.push_back(kernels::gemm_chip_kernel(g, symbols, {{"a", 0}, {"b", a + static_cast<uint64_t>(i) * w}, {"c", c}},
                                            0, c + y));
  return out;
}

// The measured software's time beyond the simulated kernel: the attention module's other kernels (validate.h; 0
// for one kernel's timings), and split K's reduction kernel.
struct Module {
  double causal_us = 0, encoder_us = 0;
  double fp8_us = 0, fp8_quantise_tbs = 0;  // the fp8 Linear's fixed time and its quantisation of x (0: none)
  // Split K: cuBLAS reduces the splits' partials in a kernel of its own, one more launch (chip.launch_cycles)
  int64_t reduction_launch_cycles = 0;
  int64_t attention_tile_cycles = 0;  // the fused attention kernel's minimum per tile (kAttentionTileUs; 0: none)
  double of(const Case& c) const {
    if (c.cls == "gemm_fp8")
      return fp8_us + (fp8_quantise_tbs > 0 ? 2.0 * static_cast<double>(get(c, "m") * get(c, "k")) /
                                                  (fp8_quantise_tbs * 1e6)
                                            : 0.0);
    return c.cls == "attention_causal" ? causal_us : c.cls == "attention_encoder" ? encoder_us : 0.0;
  }
};

void fill_roofline(Case& c, const ChipFigures& f) {
  const double peak = c.cls == "gemm_fp8" ? f.peak_fp8 : f.peak_bf16;
  const double t = std::max(c.flops / peak, c.bytes / f.hbm) * 1e6;
  c.roofline_us = t + kFixedUs;
  c.regime = t < kFixedUs ? Regime::Launch : (c.bytes / f.hbm >= c.flops / peak ? Regime::Memory : Regime::Compute);
}

// Runs one case timing-only on `chip`, timed as `protocol` says; fills simulated_us (or error) and wall_s.
void simulate(sim::Chip& chip, Case& c, const std::map<std::string, int64_t>& symbols, double clock_mhz,
              const Module& module, const Protocol& protocol) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // The kernels of one measurement, in order (the GEMM's copies; the causal module's QKV preprocessing, one
    // more kernel where the module's time is counted, then the fused kernel), and cycles added (split K's second
    // launch).
    std::vector<isa::Program> kernels;
    double extra = 0;
    if (is_attention(c)) {
      if (c.cls == "attention_causal" && module.causal_us > 0) kernels.push_back(preprocessing_program(c, symbols));
      kernels.push_back(attention_program(c, symbols, module.attention_tile_cycles));
    } else {
      kernels::GemmChip g = gemm_of(c);
      g.reduction_launch_cycles = module.reduction_launch_cycles;
      kernels = gemm_programs(g, protocol.copies(c), symbols);
      if (kernels::gemm_chip_splits(g, symbols) > 1) extra = static_cast<double>(module.reduction_launch_cycles);
    }
    // With warm_up: the kernels once, the first on an empty L2, each after on the L2 the one before left; then
    // timed, on the L2 the warm-up left: attention's kernels together, and one of the GEMM's copies, the first,
    // whose L2 is then as each copy finds it in the timed runs (the copy before it ran last; the others before
    // that). Without: each kernel timed once on an empty L2.
    sim::RunOptions ro;
    ro.functional = false;
    if (protocol.warm_up) {
      for (size_t i = 0; i < kernels.size(); ++i) {
        ro.warm_cache = i > 0;
        chip.run(kernels[i], ro);
      }
      ro.warm_cache = true;
    }
    double cycles = extra;
    for (size_t i = 0; i < (is_attention(c) ? kernels.size() : 1); ++i)
      cycles += static_cast<double>(chip.run(kernels[i], ro).stats.cycles);
    c.simulated_us = cycles / clock_mhz + module.of(c);
  } catch (const std::exception& e) {
    c.error = e.what();
    c.simulated_us = std::nan("");
  }
  c.wall_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// --jobs N: N worker processes (one SystemC kernel each, so a process per worker), worker w taking cases w,
// w + N, ... (explore::run_pool); each reports a line per finished case: "simulated_us<TAB>wall_s<TAB>error" (the
// error on one line). The parent reads them as they come, in any order. A worker that ends before sending all its
// cases leaves them failed, with the reason.
void run_workers(std::vector<Case>& cases, int jobs, const sim::ChipConfig& cfg,
                 const std::map<std::string, int64_t>& symbols, double clock_mhz, const Module& module,
                 const Protocol& protocol, const std::function<void(const Case&)>& finished) {
  explore::Pool pool;
  pool.jobs = jobs;
  pool.start = [&]() -> std::function<std::string(size_t)> {
    auto chip = std::make_shared<sim::Chip>(cfg);
    return [&, chip](size_t i) {
      Case c = cases[i];
      simulate(*chip, c, symbols, clock_mhz, module, protocol);
      std::string error = c.error;
      std::replace(error.begin(), error.end(), '\t', ' ');
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.17g\t%.6g\t", c.simulated_us, c.wall_s);
      return buf + error;
    };
  };
  pool.done = [&](size_t i, const std::string& line) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string x; std::getline(ss, x, '\t');) f.push_back(x);
    cases[i].simulated_us = f.size() > 0 ? std::stod(f[0]) : std::nan("");
    cases[i].wall_s = f.size() > 1 ? std::stod(f[1]) : 0;
    cases[i].error = f.size() > 2 ? f[2] : "";
    finished(cases[i]);
  };
  pool.lost = [&](size_t i, const std::string& why) {
    cases[i].error = why, cases[i].simulated_us = std::nan("");
    finished(cases[i]);
  };
  explore::run_pool(explore::strided_tasks(cases.size(), jobs), pool);
}

}  // namespace

std::string default_goldens() { return TPUSIM_GOLDENS_DIR; }

bool held_out(const std::string& cls, const std::vector<std::pair<std::string, int64_t>>& shape) {
  return fnv1a(shape_key(cls, shape)) % 5 == 0;
}

std::vector<Case> load_gemm(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::string line;
  std::vector<Case> cases;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (lineno == 1) {
      if (line.rfind("dtype,m,n,k,latency_us", 0) != 0)
        throw std::runtime_error(path + ":1: expected the header dtype,m,n,k,latency_us");
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string> f = split(line);
    try {
      if (f.size() != 5) throw std::invalid_argument("5 fields expected");
      Case c;
      if (f[0] == "bfloat16") c.cls = "gemm_bf16";
      else if (f[0] == "fp8") c.cls = "gemm_fp8";
      else throw std::invalid_argument("unknown dtype '" + f[0] + "'");
      const int64_t m = std::stoll(f[1]), n = std::stoll(f[2]), k = std::stoll(f[3]);
      if (m < 1 || n < 1 || k < 1) throw std::invalid_argument("sizes must be positive");
      c.shape = {{"m", m}, {"n", n}, {"k", k}};
      c.measured_us = std::stod(f[4]);
      if (!(c.measured_us > 0)) throw std::invalid_argument("latency must be positive");
      const double e = c.cls == "gemm_fp8" ? 1 : 2;
      c.flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
      c.bytes = (static_cast<double>(m) * k + static_cast<double>(n) * k) * e + static_cast<double>(m) * n * 2;
      c.held_out = held_out(c.cls, c.shape);
      cases.push_back(std::move(c));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + e.what());
    }
  }
  return cases;
}

std::vector<Case> load_attention(const std::string& path, bool causal) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  const std::vector<std::string> cols = causal
      ? std::vector<std::string>{"batch_size", "seq_len", "heads", "kv_heads", "head_dim"}
      : std::vector<std::string>{"batch_size", "seq_len", "heads", "head_dim"};
  std::string header;
  for (const std::string& col : cols) header += col + ",";
  header += "latency_us";
  std::string line;
  std::vector<Case> cases;
  int lineno = 0;
  while (std::getline(in, line)) {
    ++lineno;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (lineno == 1) {
      if (line != header) throw std::runtime_error(path + ":1: expected the header " + header);
      continue;
    }
    if (line.empty()) continue;
    const std::vector<std::string> f = split(line);
    try {
      if (f.size() != cols.size() + 1) throw std::invalid_argument(std::to_string(cols.size() + 1) + " fields expected");
      Case c;
      c.cls = causal ? "attention_causal" : "attention_encoder";
      for (size_t i = 0; i < cols.size(); ++i) {
        const int64_t v = std::stoll(f[i]);
        if (v < 1) throw std::invalid_argument(cols[i] + " must be positive");
        c.shape.emplace_back(cols[i], v);
      }
      c.measured_us = std::stod(f.back());
      if (!(c.measured_us > 0)) throw std::invalid_argument("latency must be positive");
      const double B = static_cast<double>(get(c, "batch_size")), S = static_cast<double>(get(c, "seq_len")),
                   H = static_cast<double>(get(c, "heads")), D = static_cast<double>(get(c, "head_dim"));
      const double KVH = causal ? static_cast<double>(get(c, "kv_heads")) : H;
      if (causal && get(c, "heads") % get(c, "kv_heads") != 0)
        throw std::invalid_argument("heads must be a multiple of kv_heads");
      // Q K^T and P V: 2 x 2 B H S^2 D flops; causal keeps the half at or below the diagonal.
      c.flops = 4.0 * B * H * S * S * D * (causal ? 0.5 : 1.0);
      c.bytes = 2.0 * B * S * D * (2.0 * H + 2.0 * KVH);  // q and o, k and v, bf16
      c.held_out = held_out(c.cls, c.shape);
      cases.push_back(std::move(c));
    } catch (const std::exception& e) {
      throw std::runtime_error(path + ":" + std::to_string(lineno) + ": " + e.what());
    }
  }
  return cases;
}

std::vector<Case> sample(std::vector<Case> cases, size_t n) {
  std::stable_sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) {
    if (a.cls != b.cls) return a.cls < b.cls;
    return fnv1a(shape_key(a.cls, a.shape)) < fnv1a(shape_key(b.cls, b.shape));
  });
  if (n > 0 && n < cases.size()) {
    std::map<std::string, size_t> per;
    for (const Case& c : cases) ++per[c.cls];
    // Equal shares per class, what a small class cannot use going to the others.
    std::map<std::string, size_t> take;
    size_t left = n, classes = per.size();
    std::vector<std::pair<size_t, std::string>> by_size;
    for (const auto& [cls, count] : per) by_size.emplace_back(count, cls);
    std::sort(by_size.begin(), by_size.end());
    for (const auto& [count, cls] : by_size) {
      const size_t share = std::min(count, left / classes);
      take[cls] = share, left -= share, --classes;
    }
    std::vector<Case> kept;
    std::map<std::string, size_t> seen;
    for (Case& c : cases)
      if (seen[c.cls]++ < take[c.cls]) kept.push_back(std::move(c));
    cases = std::move(kept);
  }
  std::stable_sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) {
    if (a.cls != b.cls) return a.cls < b.cls;
    return a.shape < b.shape;
  });
  return cases;
}

int run(const Options& opts, std::ostream& log) {
  if (opts.out.empty()) throw std::invalid_argument("validate needs --out DIR");
  if (opts.suite != "gemm" && opts.suite != "attention" && opts.suite != "all")
    throw std::invalid_argument("unknown suite '" + opts.suite + "' (gemm, attention or all)");
  if (opts.part != "all" && opts.part != "tune" && opts.part != "held-out")
    throw std::invalid_argument("unknown part '" + opts.part + "' (all, tune or held-out)");
  const std::string dir = opts.goldens.empty() ? default_goldens() : opts.goldens;
  std::vector<Case> cases;
  std::vector<std::string> files;
  if (opts.suite != "attention") cases = load_gemm(dir + "/gemm.csv"), files.push_back(dir + "/gemm.csv");
  if (opts.suite != "gemm") {
    for (const bool causal : {true, false}) {
      const std::string f = dir + (causal ? "/causal_attention.csv" : "/encoder_attention.csv");
      std::vector<Case> more = load_attention(f, causal);
      cases.insert(cases.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
      files.push_back(f);
    }
  }
  if (opts.part != "all") {
    const bool want = opts.part == "held-out";
    std::erase_if(cases, [&](const Case& c) { return c.held_out != want; });
  }
  if (opts.max_gflop > 0) std::erase_if(cases, [&](const Case& c) { return c.flops > opts.max_gflop * 1e9; });
  cases = sample(std::move(cases), opts.sample);
  if (cases.empty()) throw std::invalid_argument("no golden case is left to run (see --part and --max-gflop)");

  const sim::ChipConfig cfg = sim::load_config(opts.config, opts.sets);
  std::map<std::string, int64_t> symbols;
  for (const auto& [name, v] : sim::kernel_symbols(cfg)) symbols[name] = v;
  const ChipFigures fig = figures(cfg);
  for (Case& c : cases) fill_roofline(c, fig);
  for (const auto& [name, v] : {std::pair{"--attention-module-us", opts.attention_module_us},
                                {"--attention-tile-us", opts.attention_tile_us},
                                {"--fp8-module-us", opts.fp8_module_us}, {"--fp8-quantise-tbs", opts.fp8_quantise_tbs}})
    if (!std::isfinite(v)) throw std::runtime_error(std::string(name) + " must be a number, got " + std::to_string(v));
  Module module;
  module.reduction_launch_cycles = static_cast<int64_t>(cfg.chip.launch_cycles);
  if (opts.attention_module_us >= 0)
    module.causal_us = module.encoder_us = opts.attention_module_us;
  else if (opts.goldens.empty())
    module.causal_us = kCausalModuleUs, module.encoder_us = kEncoderModuleUs;
  const double tile_us =
      opts.attention_tile_us >= 0 ? opts.attention_tile_us : opts.goldens.empty() ? kAttentionTileUs : 0.0;
  module.attention_tile_cycles = std::llround(tile_us * cfg.chip.clock_mhz);
  module.fp8_us = opts.fp8_module_us >= 0 ? opts.fp8_module_us : opts.goldens.empty() ? kFp8ModuleUs : 0.0;
  module.fp8_quantise_tbs =
      opts.fp8_quantise_tbs >= 0 ? opts.fp8_quantise_tbs : opts.goldens.empty() ? kFp8QuantiseTbs : 0.0;
  if (opts.weight_copies < -1 || opts.weight_copies > 5)  // (-1: the default, Options)
    throw std::invalid_argument("--weight-copies must be 0 to 5, got " + std::to_string(opts.weight_copies));
  Protocol protocol;
  protocol.warm_up = opts.warm_up;
  protocol.weight_copies = opts.weight_copies >= 0 ? opts.weight_copies : opts.goldens.empty() ? 0 : 1;
  protocol.l2_bytes = cfg.cache_bytes();

  std::filesystem::create_directories(opts.out);
  std::ostringstream header;
  header << "tpusim validate --suite " << opts.suite << " --config " << opts.config;
  for (const std::string& s : opts.sets) header << " --set " << s;
  header << " --sample " << opts.sample << " --part " << opts.part;
  if (opts.max_gflop > 0) header << " --max-gflop " << opts.max_gflop;
  if (protocol.warm_up) header << " --warm-up --weight-copies " << protocol.weight_copies;
  header << "\n\ngoldens:";
  for (const std::string& f : files) header << " " << f;
  header << " (" << cases.size() << " cases run). Timing-only, "
         << (protocol.warm_up ? "each case's kernels timed after a warm-up run, on the L2 it left (a GEMM as its "
                                "weight copies: 0, ceil(L2 bytes / weight bytes) from 1 to 5)"
                              : "each kernel on an empty L2")
         << "; the simulated time includes chip.launch_cycles (twice "
            "for a GEMM that splits K: cuBLAS reduces in a second kernel), and for attention "
         << module.causal_us << " us (causal) and " << module.encoder_us
         << " us (encoder) of the measured attention module beyond its simulated kernels"
         << (module.causal_us > 0 ? " (causal: the QKV preprocessing and the fused kernel)" : "")
         << ", and for an fp8 GEMM " << module.fp8_us << " us of the measured fp8 Linear beyond its GEMM plus its "
         << "quantisation of x (2 m k bytes) at " << module.fp8_quantise_tbs << " TB/s (0: none). The "
         << "roofline baseline is max(flops / peak, bytes / HBM bandwidth) + " << kFixedUs << " us with this "
         << "chip's peak (" << fig.peak_bf16 / 1e12 << " TFLOP/s bf16, " << fig.peak_fp8 / 1e12 << " fp8) and HBM ("
         << fig.hbm / 1e12 << " TB/s); attention's flops are 4 B H S^2 D, halved for causal, its bytes q, k, v "
         << "and o once each.\n";

  Progress progress(log, cases.size(), opts.tty);
  std::vector<Case> done;
  done.reserve(cases.size());
  auto last_write = std::chrono::steady_clock::now();
  auto finished = [&](const Case& c) {
    done.push_back(c);
    progress.update(done);
    // cases.csv is kept current (at most once a second), so an interrupted run keeps what it simulated.
    if (std::chrono::steady_clock::now() - last_write > std::chrono::seconds(1)) {
      write_cases(opts.out, done);
      last_write = std::chrono::steady_clock::now();
    }
  };
  if (opts.jobs <= 1) {
    sim::Chip chip(cfg);
    for (Case& c : cases) {
      simulate(chip, c, symbols, fig.clock_mhz, module, protocol);
      finished(c);
    }
  } else {
    run_workers(cases, opts.jobs, cfg, symbols, fig.clock_mhz, module, protocol, finished);
  }
  progress.finish();
  if (opts.jobs > 1) done = cases;  // every case reported: the sample's order, whatever order they finished in
  write_cases(opts.out, done);
  write_summary(opts.out, done, header.str());
  write_scatter(opts.out, done, "tpusim " + opts.config + " against measured H200 kernels");

  // The per-class table on the terminal.
  std::map<std::string, std::vector<const Case*>> by;
  for (const Case& c : done) {
    by[c.cls].push_back(&c);
    by[c.cls + " " + regime_name(c.regime)].push_back(&c);
    by["all"].push_back(&c);
  }
  log << std::left << std::setw(24) << "class" << std::right << std::setw(7) << "n" << std::setw(8) << "failed"
      << std::setw(10) << "MAPE %" << std::setw(10) << "median" << std::setw(10) << "p90" << std::setw(10)
      << "in 10%" << std::setw(14) << "roofline MAPE" << "\n";
  size_t ok = 0;
  for (const auto& [name, group] : by) {
    const ErrorStats s = error_stats(group, true), r = error_stats(group, false);
    if (name == "all") ok = s.n;
    log << std::left << std::setw(24) << name << std::right << std::setw(7) << s.n << std::setw(8) << s.failed
        << std::fixed << std::setprecision(1) << std::setw(10) << s.mape << std::setw(10) << s.median << std::setw(10)
        << s.p90 << std::setw(10) << 100 * s.within10 << std::setw(14) << r.mape << "\n";
    log.unsetf(std::ios::fixed);
  }
  log << "validate: wrote " << opts.out << "/cases.csv, summary.csv, summary.md and scatter.svg\n";
  return ok > 0 ? 0 : 1;
}

}  // namespace tpusim::validate
