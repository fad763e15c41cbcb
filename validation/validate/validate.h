// `tpusim validate` (docs/validation.md): measured kernel timings (validation/goldens) against the simulator's.
//
// Each golden row becomes a Case (report.h); the kernel tpusim's compiler emits for that operator on the chip is
// generated and run timing-only, and the simulated time is compared with the measurement and with a plain
// roofline (max(flops / peak, bytes / HBM bandwidth) + 2.5 us). The GEMM suite runs gemm_chip (gemm_chip.h),
// the attention suite the fused attention kernel (attention_chip.h) on the causal and encoder goldens.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "report.h"

namespace tpusim::validate {

// An attention golden times TensorRT-LLM's whole attention module (its `forward`, one CUDA graph replay per
// measurement), of which the fused kernel is one part: the module also runs its other kernels, each launched
// after the last (for the causal goldens the QKV preprocessing, which applies RoPE and writes K and V into the
// paged KV cache, and the build of the sequence offsets the fused kernel reads; the encoder's, a different
// plugin, has neither RoPE nor a KV cache). The causal preprocessing's traffic is simulated (validate.cpp,
// preprocessing_program); the rest is one time per module, added to every case of its class, since the goldens
// cannot tell those kernels apart. Set from the data, the only numbers set so for attention: the median, over the
// tuning part's one-token cases small enough for one wave (seq_len 1, batch_size x heads <= 132), of the measured
// time less the simulated kernels (h200-like, chip.launch_cycles included; run with --attention-module-us 1 on a
// folder of those cases, less the 1):
// - causal: 315 cases, 9.49 us (the kernels 6.73 us: the preprocessing and the fused kernel); the held-out
//   part's 77, 9.47 us;
// - encoder: 92 cases, 11.02 us (the fused kernel 3.82 us); the held-out part's 22, 10.94 us.
// (11.01 us, held-out 10.92, before the fused kernel drained each piece of S as it came and scaled only head_dim's
// columns of O: docs/compiler.md, "The attention's softmax starts on each piece of S".)
// (Re-derived on 2026-12-05 after h200-like's queues and HBM writes changed the kernels, 9.41 and 11.08 before,
// again after its reads moved at hbm.efficiency: 9.57 and 11.09 before, and again after its matrix unit ran at
// mxu.efficiency 0.85: 9.56 and 11.08 before.)
// The data show that it adds rather than overlaps (one head, causal, seq_len 2048 to 16384: 14.5 us, this and
// the kernel's own fixed part, plus a part proportional to seq_len). docs/validation.md ("Attention").
inline constexpr double kCausalModuleUs = 9.49;
inline constexpr double kEncoderModuleUs = 11.02;

// TensorRT-LLM's fused attention kernels take a minimum time per tile, however small the tile: at one token (each
// (batch, head) one tile of 64 query rows) the goldens' time grows by about 3.5 us per wave of 132 tiles, where
// a tile's loads, products and store take about 2 us in the model; longer tiles' own work hides it (a cost added
// to every tile instead made the compute-bound cases 9 points worse: docs/validation.md, "Attention", E). The
// fused kernel runs each item at least this long (AttentionChip::min_item_cycles, at the chip's clock). Set from
// the data (derive.py, `tile`): the least-squares slope of measured time over waves of 132 (batch x heads), one
// intercept per head_dim, over the tuning part's one-token causal cases of at least 3 waves: 404 cases, 3.46 us
// (per head_dim: 64, 3.23; 128, 2.67; 192, 3.64; 256, 4.34); the held-out part's 105, 3.70 us. Data only, so it
// does not move with the model; A above was derived again with it in place.
inline constexpr double kAttentionTileUs = 3.46;

// An fp8 GEMM golden times TensorRT-LLM's fp8 Linear, which before its GEMM quantises the bf16 activations x [m, k]
// to fp8 with their per-tensor scale, in a kernel of its own, and has a fixed time of its own beyond the GEMM's
// launch (the fp8 goldens' floor is about 12 us, the bf16 ones' 2.5 us). Neither is simulated: the time added to
// an fp8 case is kFp8ModuleUs plus x's bf16 bytes (2 m k) at kFp8QuantiseTbs. Both set from the data's tuning
// part (h200-like, run with --fp8-module-us 0 --fp8-quantise-tbs 0, docs/validation.md "The fp8 Linear module"):
// - kFp8ModuleUs: the median of measured - simulated over the fp8 cases whose x is at most 256 KiB (its pass then
//   takes under 0.3 us): 6,537 cases, 9.63 us (the simulated kernels 4.78 us at the median); the held-out part's
//   1,636, 9.64 us;
// - kFp8QuantiseTbs: the median of 2 m k / (measured - simulated - kFp8ModuleUs) over the fp8 cases whose x is at
//   least 64 MiB, of at most 100 GFLOP (the pass then takes most of the time): 419 cases, 0.925 TB/s (10% of
//   them below 0.897, 10% above 0.949); the held-out part's 98, 0.930 TB/s. About a fifth of HBM's bandwidth:
//   the measured pass does not run at the memory's rate, for reasons the goldens do not show.
// (Derived with h200-like's L2 writing back, its reads at hbm.efficiency 0.88 and its matrix unit at
// mxu.efficiency 0.85; before the last, 9.64 us and 0.923 TB/s; with the L2 writing through
// and reads at 0.89, 9.62 us and 0.927 TB/s; before that, 9.80 us and 0.916 TB/s, and before the GEMM kernels of
// pairs multicast, 9.82 us and 0.924 TB/s.)
inline constexpr double kFp8ModuleUs = 9.63;
inline constexpr double kFp8QuantiseTbs = 0.925;

struct Options {
  std::string suite = "gemm";       // gemm | attention | all
  std::string config = "h200-like";
  std::vector<std::string> sets;    // --set k=v
  std::string goldens;              // folder of golden CSVs ("" = the project's goldens, decompressed into the build tree)
  std::string out;                  // output folder (required)
  size_t sample = 0;                // 0 = every case; else at most this many, spread evenly over the classes
  std::string part = "all";         // all | tune | held-out
  double max_gflop = 0;             // > 0: leave out cases of more GFLOP (they take long to simulate)
  bool tty = false;                 // progress on a terminal
  int jobs = 1;                     // worker processes (one SystemC kernel each)
  // Time added to each attention case for the measured software's work beyond the fused kernel; > 0 also
  // simulates the causal module's QKV preprocessing. < 0: the project's goldens (NVIDIA's, timing TensorRT-LLM's
  // whole attention modules) get the values set from their data (kCausalModuleUs, kEncoderModuleUs), another
  // `goldens` folder (one kernel's timings, as the CUDA runner writes them) gets 0.
  double attention_module_us = -1;
  // The fused attention kernel's minimum time per tile (AttentionChip::min_item_cycles). < 0: kAttentionTileUs
  // for the project's goldens (TensorRT-LLM's kernels), 0 for another `goldens` folder (the CUDA runner's kernel).
  double attention_tile_us = -1;
  // The fp8 Linear module's fixed time and its quantisation pass's rate over x's bf16 bytes (TB/s; 0: no pass).
  // < 0: kFp8ModuleUs and kFp8QuantiseTbs for the project's goldens, 0 for another `goldens` folder.
  double fp8_module_us = -1, fp8_quantise_tbs = -1;
  // Time each case as it was measured (validate.cpp, Protocol): its kernels once to warm up, then timed on the L2
  // they left; false: each kernel once on an empty L2.
  bool warm_up = false;
  // With warm_up, how many GEMM layers, each with its own weights and the same x, one measurement runs: 0, NVIDIA's
  // collector's rule (ceil(L2 bytes / weight bytes), 1 to 5); N, that many. < 0: 0 for the project's goldens, 1
  // for another `goldens` folder (the CUDA runner times one kernel on the same inputs).
  int weight_copies = -1;
};

// The project's own golden folder: validation/goldens/h200 as the build tree holds it (gemm.csv decompressed).
std::string default_goldens();

// Reads gemm.csv ("dtype,m,n,k,latency_us"): classes gemm_bf16 and gemm_fp8. Throws std::runtime_error naming
// file:line for a malformed row.
std::vector<Case> load_gemm(const std::string& path);

// Reads causal_attention.csv ("batch_size,seq_len,heads,kv_heads,head_dim,latency_us", class attention_causal)
// or encoder_attention.csv ("batch_size,seq_len,heads,head_dim,latency_us", class attention_encoder). flops =
// 4 B H S^2 D (halved for causal), bytes = q, k, v and o in bf16 once each. Throws as load_gemm.
std::vector<Case> load_attention(const std::string& path, bool causal);

// Whether a case is in the held-out part: a hash (FNV-1a, 64-bit) of its class and shape, one case in five.
// Parameters of a preset may be set looking at the tuning part only.
bool held_out(const std::string& cls, const std::vector<std::pair<std::string, int64_t>>& shape);

// At most n cases (n = 0: all), in a fixed pseudo-random order (by the same hash), the same share from each
// class; the result is sorted by class and shape.
std::vector<Case> sample(std::vector<Case> cases, size_t n);

// Runs the validation; writes the report files (report.h) to opts.out and a summary table to `log`. Returns
// the process exit code: 0, or 1 when no case could be simulated.
int run(const Options& opts, std::ostream& log);

}  // namespace tpusim::validate
