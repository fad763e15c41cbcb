#include "codegen.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>
#include <unordered_map>

#include "merge_casts.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/kernels/cast.h"
#include "tpusim/kernels/copy.h"
#include "tpusim/kernels/gemm_chip.h"
#include "tpusim/kernels/gemm_ksplit.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/kernels/rowwise.h"

namespace tpusim::compiler {
namespace {

isa::TensorKind kind_of(Buffer::Kind k) {
  switch (k) {
    case Buffer::Kind::Input: return isa::TensorKind::Input;
    case Buffer::Kind::Output: return isa::TensorKind::Output;
    default: return isa::TensorKind::Const;
  }
}

// True if the fragment waits for every unit (sem.set or fence) before it issues any unit instruction.
bool starts_with_sync(const isa::Program& frag) {
  for (isa::Word w : frag.code) {
    isa::Instr in = isa::decode(w);
    if (in.op == isa::Op::SEMSET || in.op == isa::Op::FENCE) return true;
    bool branch = in.op == isa::Op::JMP || in.op == isa::Op::BEQ || in.op == isa::Op::BNE ||
                  in.op == isa::Op::BLT || in.op == isa::Op::BGE;
    if (branch || in.op == isa::Op::HALT || in.desc().unit != isa::Unit::Core) return false;
  }
  return false;
}

// Moves an assembled fragment `delta` instructions later: its branch targets (all inside it, or its end) follow.
void relocate(isa::Program& frag, int64_t delta) {
  for (isa::Word& w : frag.code) {
    isa::Instr in = isa::decode(w);
    const isa::InstrDesc& d = in.desc();
    bool moved = false;
    for (int i = 0; i < d.num_operands; ++i)
      if (d.operands[static_cast<size_t>(i)].kind == isa::OperandKind::Target) in.f[i] += delta, moved = true;
    if (moved) w = isa::encode(in);
  }
}

}  // namespace

int64_t symbol_or(const std::map<std::string, int64_t>& s, const char* name, int64_t otherwise) {
  auto it = s.find(name);
  return it == s.end() ? otherwise : it->second;
}

int64_t param_or(const KernelCall& call, const char* name, int64_t otherwise) {
  auto it = call.params.find(name);
  return it == call.params.end() ? otherwise : it->second;
}

namespace {

// A gemm.s call's cycles on one matrix unit, estimated in the terms of gemm_chip's estimate (kernels/gemm_chip.cpp:
// strips_estimate), so that the two compare like with like: row tiles of up to ACC_ROWS / 2 rows, each streamed
// once per strip of C columns and fold of R rows of K. A fold's B tile (R x C) comes from HBM into one of two
// slots, one load in flight behind the tile in use, so a fold takes the longest of its matrix work (max(TM / the
// input type's rate, R): the weight load hides behind a stream of at least R rows), its transfer at HBM's bandwidth
// (this unit alone loads), and latency + transfer. Each row tile's a (TM x K) is loaded once before its folds, each
// output tile (TM x C) stored once; plus a load's and a store's latency. With a_local, a lies in VMEM: its bytes
// cross VMEM's ports, not HBM.
double one_unit_gemm_cycles(const KernelCall& call, const std::map<std::string, int64_t>& symbols,
                            bool a_local = false) {
  const int64_t m = param_or(call, "M", 0), k = param_or(call, "K", 0), n = param_or(call, "N", 0);
  const int64_t R = symbol_or(symbols, "MXU_ROWS", 1), C = symbol_or(symbols, "MXU_COLS", 1);
  const int64_t tm = std::max<int64_t>(1, std::min(m, symbol_or(symbols, "ACC_ROWS", 2) / 2));
  auto cdiv = [](int64_t a, int64_t b) { return (a + b - 1) / b; };
  const double latency = static_cast<double>(symbol_or(symbols, "DMA_LATENCY", 0));
  const double bpc = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 1)));
  const auto in = static_cast<isa::DType>(param_or(call, "IN_DT", static_cast<int64_t>(isa::DType::BF16)));
  const double E = static_cast<double>(isa::dtype_size(in));
  const double O = param_or(call, "Q_ONLY", 0) != 0  // q alone: c is not written
                       ? 0.0
                       : static_cast<double>(isa::dtype_size(
                             static_cast<isa::DType>(param_or(call, "OUT_DT", static_cast<int64_t>(isa::DType::F32)))));
  const double b_tile = static_cast<double>(std::min(R, k) * std::min(C, n)) * E / bpc;
  const int64_t rate = kernels::matrix_rate(in, symbols);  // the stream of tm rows at the input type's rate
  const double fold = std::max({static_cast<double>(std::max(cdiv(tm, rate), R)) * kernels::matrix_stretch(symbols),
                                b_tile, latency + b_tile});
  const double folds = static_cast<double>(cdiv(m, tm) * cdiv(n, C) * cdiv(k, R));
  const double Q = param_or(call, "Q_SCALE", 0) != 0 ? 1.0 : 0.0;  // the int8 copy of c (gemm.s's q)
  const double Rd = param_or(call, "RESIDUAL", 0) != 0 ? O : 0.0;  // the residual r read (gemm.s's RESIDUAL)
  const double ports = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "VMEM_BYTES_PER_CYCLE", 1 << 20)));
  const double a_and_c = static_cast<double>(m) * static_cast<double>(k) * E / (a_local ? ports : bpc) +
                         static_cast<double>(m) * static_cast<double>(n) * (O + Q + Rd) / bpc;
  return folds * fold + a_and_c + 2.0 * latency;
}

// A gemm.s call's row map (its C_* parameters; none without C_GROUP)
kernels::RowMap row_map_of(const KernelCall& call) {
  auto param = [&](const char* name) { return param_or(call, name, 0); };
  return kernels::RowMap{param("C_GROUP"),     param("C_KEEP"),        param("C_PITCH"),
                         param("C_PER_IMAGE"), param("C_IMAGE_PITCH"), param("C_ROWS")};
}

// A gemm.s call as the whole-chip kernel (kernels/gemm_chip.h), where the chip has more than one core or matrix
// unit and gemm_chip does everything the call asks (not ACT_RESIDENT); gemm_chip gives the same results bit for
// bit. nullopt: the call stays gemm.s on one unit. A call with an activation epilogue (ACT), or a residual with an
// int8 copy after it (RESIDUAL with Q_SCALE), is gemm_chip's on any chip, one unit included: gemm.s has no such
// epilogue, and fuse_activations and fuse_residual_adds fused it knowing gemm_chip can run it.
std::optional<kernels::GemmChip> whole_chip_gemm(const KernelCall& call, const std::map<std::string, int64_t>& symbols,
                                                 std::string& why) {
  const int64_t cores = symbol_or(symbols, "CORES", 1), mxus = symbol_or(symbols, "MXUS", 1);
  if (call.kind != KernelCall::Kind::Library || call.kernel != "gemm.s") return std::nullopt;
  // An activation, a residual with an int8 copy, a row map (C_GROUP: the lowering asks for one only on chips of
  // several cores): what gemm.s does not do (the split kernel, split_k_gemm, may still take a row map's)
  if (param_or(call, "ACT", 0) != 0 || (param_or(call, "RESIDUAL", 0) != 0 && param_or(call, "Q_SCALE", 0) != 0) ||
      param_or(call, "C_GROUP", 0) != 0) {
    why.clear();
    return gemm_chip_of(call, symbols);
  }
  if (cores * mxus <= 1) return std::nullopt;
  auto param = [&](const char* name, int64_t otherwise) { return param_or(call, name, otherwise); };
  if (param("BATCH", 1) > 1) {
    why = "a batch of " + std::to_string(param("BATCH", 1)) + " products, one after the other on one unit";
    return std::nullopt;
  }
  if (param("ACT_RESIDENT", 0) != 0) {
    why = "its activations stay in VMEM between GEMMs, which the whole-chip kernel does not do";
    return std::nullopt;
  }
  kernels::GemmChip g = gemm_chip_of(call, symbols);
  // Worth it only where the estimate beats one unit's by more than the two barriers around it: a small GEMM runs
  // faster on one unit than spread with synchronisation.
  const double one_unit = one_unit_gemm_cycles(call, symbols);
  auto cycles = [](double c) { return std::to_string(static_cast<int64_t>(std::llround(c))); };
  // Units share output tiles (K is not split: results stay bit-identical); a tile narrower than C columns or
  // shorter than R rows (a stream that no longer hides its weight load) is one unit's work.
  const int64_t R = symbol_or(symbols, "MXU_ROWS", 1), C = symbol_or(symbols, "MXU_COLS", 1);
  if ((g.m + R - 1) / R * ((g.n + C - 1) / C) < 2) {
    why = "its output, " + std::to_string(g.m) + " x " + std::to_string(g.n) + ", is one tile of a matrix unit";
    return std::nullopt;
  }
  const double sync = cores > 1 ? 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0)) : 0.0;
  try {
    // On a chip of several cores, with a margin of a quarter: the estimates leave out the per-instruction costs of
    // the larger kernel and what the barriers cost beyond their latency. On one core (no barriers) the lower
    // estimate: there the margin kept GEMMs on one unit that gemm_chip runs faster (BERT-base's Q, K and V
    // projections on v6e, 128 x 768 x 2304: 9,407 cycles on one unit, 5,998 as gemm_chip; estimates 9,691 and
    // 7,862).
    const double margin = cores > 1 ? 0.75 : 1.0;
    if (const double chip = kernels::gemm_chip_estimate(g, symbols); chip + sync >= margin * one_unit) {
      why = "the whole chip's estimate, " + cycles(chip) + " cycles" +
            (sync > 0 ? " and " + cycles(sync) + " of barriers" : std::string()) + ", does not beat one unit's " +
            cycles(one_unit) + (cores > 1 ? " by a quarter" : "");
      return std::nullopt;
    }
  } catch (const std::invalid_argument& e) {
    why = std::string("the whole-chip kernel cannot run it: ") + e.what();  // it stays on gemm.s
    return std::nullopt;
  }
  return g;
}

// A gemm.s call as the split-K kernel (kernels/gemm_ksplit.h): its K shared by a core's matrix units, the same
// bits; on one core, or on a chip of a few cores where the whole-chip GEMM would leave cores idle, on every core,
// each taking its run of the output's strips (below). Where the output is too few tiles to keep the units busy
// (one tile: a 14 x 14 convolution's 196 x 2304 x 256 on v6e), gemm.s on one unit waits on its weight loads, and
// so does the whole-chip GEMM, whose units split the rows and each load every weight; the split kernel's units
// share the loads. Taken where its estimate beats by a tenth that of what the call would otherwise run as: `chip`,
// the whole-chip GEMM (whole_chip_gemm; its estimate and, on several cores, its two barriers), else gemm.s on one
// unit (both count a at VMEM's ports where it lies there; against gemm.s, with `may_stream`, the split kernel's
// estimate with its weights in VMEM, where the weight stream will load them). nullopt otherwise, or where the call
// asks for what the split kernel does not do (GROUP_N, ACT_RESIDENT, TRANS_B, BATCH, an activation, a residual with an
// int8 copy). `why` gains the reason where the estimate decides.
std::optional<kernels::GemmKSplit> split_k_gemm(const KernelPlan& plan, const KernelCall& call,
                                                const std::map<std::string, int64_t>& symbols,
                                                const std::optional<kernels::GemmChip>& chip, bool may_stream,
                                                std::string& why) {
  if (call.kind != KernelCall::Kind::Library || call.kernel != "gemm.s" || symbol_or(symbols, "MXUS", 1) < 2)
    return std::nullopt;
  auto param = [&](const char* name) { return param_or(call, name, 0); };
  if (param("GROUP_N") || param("ACT_RESIDENT") || param("TRANS_B") || param("ACT") || param("BATCH") > 1)
    return std::nullopt;
  kernels::GemmKSplit g;
  g.m = param("M"), g.k = param("K"), g.n = param("N");
  g.in = static_cast<isa::DType>(param_or(call, "IN_DT", static_cast<int64_t>(isa::DType::BF16)));
  g.out = static_cast<isa::DType>(param_or(call, "OUT_DT", static_cast<int64_t>(isa::DType::F32)));
  g.bias = param("BIAS") != 0, g.relu = param("RELU") != 0, g.scale_bits = static_cast<uint32_t>(param("SCALE"));
  g.dequant = param("DEQUANT") != 0, g.b_tiled = param("B_TILED") != 0;
  g.residual = param("RESIDUAL") != 0, g.residual_relu = param("RES_RELU") != 0;
  g.q_scale_bits = static_cast<uint32_t>(param("Q_SCALE")), g.q_only = param("Q_ONLY") != 0;
  g.taps = kernels::ConvTaps{param("TAP_CIN"), param("TAP_ROWS"), param_or(call, "TAP_KW", 1),
                             param_or(call, "TAP_SH", 1), param_or(call, "TAP_SW", 1), param_or(call, "TAP_DH", 1),
                             param_or(call, "TAP_DW", 1), param_or(call, "TAP_WQ", 1), param("TAP_PHASE_ROWS"),
                             param_or(call, "TAP_PITCH", 1)};
  g.c_rows = row_map_of(call);
  const auto a = call.tensors.find("a");
  g.a_local = a != call.tensors.end() &&
              isa::far_memory(static_cast<int64_t>(plan.buffers[static_cast<size_t>(a->second)].addr)) ==
                  isa::FarMemory::Local;
  // On a chip of a few cores (2 to 8: each core's code holds every core's slice) where the whole-chip GEMM leaves
  // cores idle (fewer tiles than cores: ResNet-50's 14 x 14 and 7 x 7 convolutions on v4, one tile of 196 or 49
  // rows), the cores share the strips, each splitting K over its units, and the split kernel is taken wherever
  // every core gets strips and its regions fit the accumulators in one row tile. (Its estimate counts a's block,
  // which each core loads whole, at HBM's bandwidth over the cores, though a compiled model's lies in the shared
  // memory: on v4 it put the 14 x 14 convolution's 3 x 3 GEMM at 3,917 cycles against the whole-chip GEMM's 3,230;
  // they ran in 2,895 and 3,239. With two row tiles, VGG-11's 196 x 4608 x 512 on v4, each core's 36 folds of 2
  // strips are 72 regions of 98 rows, whose 70 in-order additions on the vector unit made it slower: 10,232 ->
  // 11,026 cycles.)
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  try {
    if (cores >= 2 && cores <= 8 && chip && kernels::gemm_chip_cores_used(*chip, symbols) < cores) {
      g.cores = static_cast<int>(cores);
      const kernels::KSplitPlan p = kernels::gemm_ksplit_plan(g, symbols);
      if (p.cores == cores && p.row_tiles == 1) return g;
      g.cores = 1;
    }
  } catch (const std::invalid_argument&) {
    g.cores = 1;
  }
  try {
    const kernels::KSplitPlan p = kernels::gemm_ksplit_plan(g, symbols);
    const double sync =
        symbol_or(symbols, "CORES", 1) > 1 ? 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0)) : 0.0;
    const double rival =
        chip ? kernels::gemm_chip_estimate(*chip, symbols) + sync : one_unit_gemm_cycles(call, symbols, g.a_local);
    std::map<std::string, int64_t> fast = symbols;
    fast["HBM_BYTES_PER_CYCLE"] = 16 * std::max<int64_t>(1, symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 1));
    const double local = kernels::gemm_ksplit_plan(g, fast).estimate;
    // The whole-chip GEMM may stream its weights (stream_weights), load later GEMMs' and overlap the kernel before
    // it (plan_overlap, prefetch_overlap), none of which its estimate counts: the split kernel replaces it only
    // where it also beats it by a quarter with the weights in VMEM (both estimates at 16 times HBM's bandwidth).
    // ResNet-50's 7 x 7 convolutions on v6e, 63 x 4608 x 512 (weights streamed): 5,714 cycles as the whole-chip
    // GEMM, 3,758 split; BERT-base's FFN output on v5e (estimates 5,516 and 6,506 at that bandwidth) stays.
    //
    // Except where the whole-chip GEMM's units split a tile's rows (row blocks) and each streams fewer rows than a
    // weight load takes (R): each of them then loads every weight tile of its strip, and the kernel waits on those
    // loads, where the split kernel's units share them (half or fewer a unit). There, where both stream their
    // weights (may_stream), the split kernel need only beat it at 16 times HBM's bandwidth. ResNet-50's 7 x 7
    // 1 x 1 convolutions of 49 x 2048 x 512 on v6e (two strips of 256, two row blocks of 25 and 24 rows): 2,475
    // cycles as the whole-chip GEMM, each unit loading 8 tiles, 1,530 split, 4 a unit (estimates 2,275 and 1,811).
    bool shared_loads = false;
    if (chip && may_stream) try {
        const kernels::GemmTiles t = kernels::gemm_chip_tiles(*chip, symbols);
        shared_loads = t.rb > 1 && (t.tm + t.rb - 1) / t.rb < symbol_or(symbols, "MXU_ROWS", 1);
      } catch (const std::invalid_argument&) {
      }
    if (chip && local >= (shared_loads ? 1.0 : 0.75) * (kernels::gemm_chip_estimate(*chip, fast) + sync))
      return std::nullopt;
    if (shared_loads) return g;
    // gemm.s's weights never stream; the split kernel's may (may_stream: the weight stream runs and they are
    // constants): then its estimate with them in VMEM is the one to beat gemm.s's with, and it need only beat it
    // (else by a tenth): gemm.s loads every fold's weights from HBM, which its estimate counts below its run where
    // HBM is fast (ResNet-50's 196 x 1024 x 256 convolutions on v6e at 2400 GB/s: gemm.s estimated 1,518 cycles and
    // ran 2,476, the split kernel estimated 1,392 with its weights streamed and runs 1,202; at 1800 GB/s the split
    // kernel won by a tenth and the model took 119,899 cycles, at 2400 128,002, now 123,542)
    const bool streamed = !chip && may_stream;
    if ((streamed ? local : p.estimate) >= (streamed ? 1.0 : 0.9) * rival) {
      if (!chip)
        why += "; split over " + std::to_string(p.units) + " matrix units, its estimate, " +
               std::to_string(static_cast<int64_t>(std::llround(streamed ? local : p.estimate))) +
               " cycles, does not beat one unit's " + std::to_string(static_cast<int64_t>(std::llround(rival))) +
               (streamed ? "" : " by a tenth");
      return std::nullopt;
    }
  } catch (const std::invalid_argument&) {
    return std::nullopt;
  }
  return g;
}

// A purely elementwise row-wise program (no row reduction, no per-row or row-periodic input) of fewer rows than
// the chip has cores, cut into rows of the vector unit's width instead: the same elements in the same order, each
// computed by the same instructions, so the same results, but rows enough for the cores to share ([1, 3072], a
// decoded token's GELU, becomes [24, 128] on a vector unit of 128 lanes). Otherwise the program as it is.
kernels::rowwise::Program rows_for_cores(const kernels::rowwise::Program& p,
                                         const std::map<std::string, int64_t>& symbols) {
  const int64_t cores = symbol_or(symbols, "CORES", 1), width = std::max<int64_t>(1, symbol_or(symbols, "VPU_WIDTH", 1));
  if (p.rows >= cores || p.rows * p.cols % width != 0 || p.rows * p.cols / width <= p.rows) return p;
  for (const kernels::rowwise::Node& n : p.nodes)
    if (n.op == kernels::rowwise::Op::RowSum || n.op == kernels::rowwise::Op::RowMax ||
        n.op == kernels::rowwise::Op::RowMean)
      return p;
  for (const kernels::rowwise::Input& in : p.inputs)
    if (in.per_row || (in.period != 0 && in.period != p.rows)) return p;
  kernels::rowwise::Program q = p;
  q.rows = p.rows * p.cols / width, q.cols = width;
  for (kernels::rowwise::Input& in : q.inputs) in.period = 0;
  return q;
}

// A row-wise kernel's vector work in cycles, estimated: each of its vector instructions per tile over all of its
// elements, at the vector unit's width or VMEM's ports (about 12 bytes of operands per element), whichever is slower.
double rowwise_work(const kernels::rowwise::Program& rows, const kernels::rowwise::Plan& plan,
                    const std::map<std::string, int64_t>& symbols) {
  const int64_t width = std::max<int64_t>(1, symbol_or(symbols, "VPU_WIDTH", 1));
  const double ports = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "VMEM_BYTES_PER_CYCLE", 1 << 20)));
  const double passes = static_cast<double>((rows.rows * rows.cols + width - 1) / width);
  const double operands = 12.0 * static_cast<double>(rows.rows * rows.cols) / ports;
  // (and each instruction's latency, in every tile: without it, folding instructions into fewer (vpu.madd) made
  // the estimate of a layer norm fall further below its run than its work did, and the weight stream it sizes
  // with it loaded less: BERT-base on v5e 350,613 -> 359,527 cycles; with it, 347,789)
  const double latency = static_cast<double>(symbol_or(symbols, "VPU_LATENCY", 0) * plan.tiles);
  return static_cast<double>(plan.vector_ops_per_tile) * (std::max(passes, operands) + latency);
}

// The cores a row-wise call's rows are shared among (kernels/rowwise.h, Program::cores), or 1 where it stays on
// one core. Shared where the time one core would take shrinks by more than the two barriers around the shared
// kernel cost: one core takes the longer of its vector work, W (rowwise_work), and its transfers, the call's
// `bytes` at min(its VMEM ports, HBM) bytes per cycle; n cores (those that get rows) W / n and bytes at
// min(n x ports, HBM); shared where the saving, one - shared or W - W / n if more, exceeds 2 x SYNC_LATENCY.
int64_t rowwise_cores(const KernelCall& call, const kernels::rowwise::Program& program, double bytes,
                      const std::map<std::string, int64_t>& symbols, std::string& why) {
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  if (call.kind != KernelCall::Kind::Rowwise || cores <= 1) return 1;
  kernels::rowwise::Program rows = program;
  rows.cores = cores;
  try {
    const kernels::rowwise::Plan shared = kernels::rowwise::plan(rows, symbols);
    const int64_t n = shared.cores_used;
    if (n < 2) {
      why = "its " + std::to_string(rows.rows) + " rows make one core's share";
      return 1;
    }
    const double ports = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "VMEM_BYTES_PER_CYCLE", 1 << 20)));
    const double work = rowwise_work(rows, shared, symbols);
    const double sync = 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0));
    const double hbm = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 1 << 20)));
    // The saving: of the vector work alone, or of the longer of it and the transfers, whichever is more (a kernel
    // that one core runs below its bandwidth, as its transfers' latencies leave it, gains from the cores' work).
    const double one = std::max(work, bytes / std::min(ports, hbm));
    const double all = std::max(work / static_cast<double>(n), bytes / std::min(static_cast<double>(n) * ports, hbm));
    const double saving = std::max(work - work / static_cast<double>(n), one - all);
    if (saving > sync) return cores;
    why = "sharing its rows would save " + std::to_string(static_cast<int64_t>(saving)) +
          " cycles of vector work and transfers, no more than its two barriers cost (" +
          std::to_string(static_cast<int64_t>(sync)) + ")";
    return 1;
  } catch (const std::invalid_argument&) {
    return 1;  // the one-core plan reports its own error
  }
}

// The cores a copy call's moves are shared among (kernels/copy.h), or 1: shared where its estimate on every core,
// with the two barriers around it, beats one core's by a quarter.
int64_t copy_cores(const std::vector<kernels::Move>& moves, const KernelCall& call,
                   const std::map<std::string, int64_t>& symbols, std::string& why) {
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  if (call.kind != KernelCall::Kind::Copy || cores <= 1) return 1;
  try {
    const double sync = 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0));
    const double one = kernels::copy_estimate(moves, symbols, 1), all = kernels::copy_estimate(moves, symbols, cores);
    if (all + sync < 0.75 * one) return cores;
    why = "every core's estimate, " + std::to_string(static_cast<int64_t>(all)) + " cycles and " +
          std::to_string(static_cast<int64_t>(sync)) + " of barriers, does not beat one core's " +
          std::to_string(static_cast<int64_t>(one)) + " by a quarter";
    return 1;
  } catch (const std::invalid_argument&) {
    return 1;  // the one-core kernel reports its own error
  }
}

// The cores a library kernel that can share its work (cast.s and gather.s, through SHARE_CORES) runs on, or 1:
// shared where
// its estimate on every core, with the two barriers around it, beats one core's by a quarter. A core moves at most
// its VMEM ports' bytes per cycle, the chip at most HBM's: one core takes bytes / min(ports, HBM) and a latency
// each way; n cores, bytes / min(n x ports, HBM), the latencies and the barriers (n: the cores that get a chunk).
// A cast.s or gather.s call's estimated cycles on n cores: its bytes at the lesser of n cores' VMEM ports and
// HBM, and a load's and a store's latency.
double library_cycles(const KernelCall& call, const std::map<std::string, int64_t>& symbols, int64_t n) {
  const double ports = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "VMEM_BYTES_PER_CYCLE", 1 << 20)));
  const double hbm = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 1)));
  return call.bytes / std::min(static_cast<double>(n) * ports, hbm) +
         2.0 * static_cast<double>(symbol_or(symbols, "DMA_LATENCY", 0));
}

int64_t library_cores(const KernelCall& call, const std::map<std::string, int64_t>& symbols, std::string& why) {
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  const bool gather = call.kernel == "gather.s";
  if (call.kind != KernelCall::Kind::Library || (call.kernel != "cast.s" && !gather) || cores <= 1) return 1;
  const double sync = 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0));
  const int64_t width = std::max<int64_t>(1, symbol_or(symbols, "VPU_WIDTH", 1));
  // The cores that get a chunk: cast.s's chunks are whole passes of the vector unit, gather.s's whole rows.
  const int64_t n = std::min(cores, gather ? param_or(call, "M", 1) : (param_or(call, "N", 1) + width - 1) / width);
  const double one = library_cycles(call, symbols, 1);
  const double all = library_cycles(call, symbols, n) + sync;
  if (n > 1 && all < 0.75 * one) return cores;
  why = "every core's estimate, " + std::to_string(static_cast<int64_t>(all)) + " cycles with its barriers, does not "
        "beat one core's " + std::to_string(static_cast<int64_t>(one)) + " by a quarter";
  return 1;
}

// How a call runs on the chip: `gemm`, the call as the whole-chip GEMM (whole_chip_gemm); `row_cores`, the cores
// a row-wise call's rows are shared among (rowwise_cores); `copy_cores`, those a copy's moves are (copy_cores);
// `lib_cores`, those a library kernel's work is (library_cores).
// Each makes it a kernel every core runs.
// `group`, `core`: a call of a group of independent calls that run side by side, this one on core `core`
// (group_independent_calls); -1 and core 0 otherwise.
struct OnChip {
  std::string why;  // a call on one core: why it is not shared (for the compile report)
  std::optional<kernels::GemmChip> gemm;
  std::optional<kernels::GemmKSplit> ksplit;  // a gemm.s call on one core, K split over its units (split_k_gemm)
  int64_t row_cores = 1;   // a row-wise call: the cores sharing its rows
  bool row_cut = false;    // a row-wise call shared as rows_for_cores cut it
  int64_t copy_cores = 1;  // a copy call: the cores sharing its moves
  int64_t lib_cores = 1;   // a library kernel's call: the cores sharing its work (SHARE_CORES)
  int group = -1;
  int64_t core = 0;
  bool attention = false;  // a fused attention call: the whole-chip kernel, on every core
  bool every_core() const {
    return gemm.has_value() || (ksplit && ksplit->cores > 1) || row_cores > 1 || copy_cores > 1 || lib_cores > 1 ||
           attention;
  }
};

// Library kernel texts (kernels/*.s) assembled once per compile up to their addresses (isa::prepare) and placed
// at each call's: a model's library kernels repeat (ResNet-50's bottleneck blocks), and placing a prepared text
// costs a fraction of assembling it. (The generators, copy, row-wise, whole-chip GEMM and attention, emit their
// programs at the call's addresses directly.) The program is the same either way (isa::Prepared::place); a text that
// cannot be prepared, or a placement that fails, is assembled as before (which reports the error).
class Fragments {
 public:
  // A kernel's prepared first pass, by a key that determines its text; nullptr where it cannot be prepared.
  const isa::Prepared* get(const std::string& key, const std::function<isa::Prepared()>& prepare) {
    auto it = library_.find(key);
    if (it == library_.end()) it = library_.emplace(key, attempt(prepare)).first;
    return it->second ? &*it->second : nullptr;
  }

 private:
  static std::optional<isa::Prepared> attempt(const std::function<isa::Prepared()>& prepare) {
    try {
      return prepare();
    } catch (const isa::Error&) {
      return std::nullopt;
    } catch (const std::invalid_argument&) {  // a kernel generator's: reported where the call is assembled
      return std::nullopt;
    }
  }
  std::unordered_map<std::string, std::optional<isa::Prepared>> library_;
};

// `p` placed at `addr` and `base_pc`, or nullopt where there is no prepared text or the placement fails.
std::optional<isa::Program> placed(const isa::Prepared* p, const std::map<std::string, uint64_t>& addr,
                                   uint64_t base_pc) {
  if (!p) return std::nullopt;
  try {
    return p->place(addr, base_pc);
  } catch (const isa::Error&) {
    return std::nullopt;
  }
}

isa::Program assemble_call(const KernelPlan& plan, const KernelCall& call,
                           const std::map<std::string, int64_t>& symbols, uint64_t base_pc, const OnChip& chip,
                           Fragments& fragments);

// A copy call's moves at the buffers' addresses.
std::vector<kernels::Move> moves_of(const KernelPlan& plan, const KernelCall& call) {
  std::vector<kernels::Move> moves;
  moves.reserve(call.moves.size());
  for (const BufferMove& m : call.moves)
    moves.push_back(kernels::Move{plan.buffers[m.src].addr + m.src_off, plan.buffers[m.dst].addr + m.dst_off, m.rows,
                                  m.rowbytes, m.src_stride, m.dst_stride});
  return moves;
}

// The HBM byte ranges [lo, hi) a library call reads and writes, from its kernel's tensor declarations; a copy's,
// from its moves (each the span from its first row to the end of its last).
struct Touches {
  std::vector<std::pair<uint64_t, uint64_t>> reads, writes;
};
Touches touches(const KernelPlan& plan, const KernelCall& call, const std::map<std::string, int64_t>& symbols,
                Fragments& fragments) {
  Touches t;
  if (call.kind == KernelCall::Kind::Copy) {
    auto span = [](uint64_t at, uint64_t rows, uint64_t rowbytes, int64_t stride) {
      const int64_t reach = static_cast<int64_t>(rows > 0 ? rows - 1 : 0) * stride;
      const uint64_t lo = reach < 0 ? at - static_cast<uint64_t>(-reach) : at;
      return std::make_pair(lo, lo + static_cast<uint64_t>(reach < 0 ? -reach : reach) + rowbytes);
    };
    for (const kernels::Move& m : moves_of(plan, call)) {
      t.reads.push_back(span(m.src, m.rows, m.rowbytes, m.src_stride));
      t.writes.push_back(span(m.dst, m.rows, m.rowbytes, m.dst_stride));
    }
    return t;
  }
  for (const isa::TensorDecl& d : assemble_call(plan, call, symbols, 0, {}, fragments).tensors) {
    if (d.space != isa::MemSpace::Hbm) continue;
    (d.kind == isa::TensorKind::Output ? t.writes : t.reads).emplace_back(d.addr, d.addr + d.bytes());
  }
  return t;
}
bool overlap(const std::vector<std::pair<uint64_t, uint64_t>>& a, const std::vector<std::pair<uint64_t, uint64_t>>& b) {
  for (const auto& x : a)
    for (const auto& y : b)
      if (x.first < y.second && y.first < x.second) return true;
  return false;
}

double call_bytes(const KernelPlan& plan, const KernelCall& call, bool hbm_only = false);

// A copy, or a cast.s or gather.s call, left on one core: its estimated cycles there (a copy's copy_estimate; a
// library kernel's library_cycles); nullopt for any other call.
std::optional<double> one_core_cycles(const KernelPlan& plan, const KernelCall& call, const OnChip& on_chip,
                                      const std::map<std::string, int64_t>& symbols) {
  if (on_chip.every_core()) return std::nullopt;
  if (call.kind == KernelCall::Kind::Copy) {
    try {
      return kernels::copy_estimate(moves_of(plan, call), symbols, 1);
    } catch (const std::invalid_argument&) {
      return std::nullopt;  // the kernel reports its own error where it is assembled
    }
  }
  if (call.kind != KernelCall::Kind::Library || (call.kernel != "cast.s" && call.kernel != "gather.s"))
    return std::nullopt;
  return library_cycles(call, symbols, 1);
}

// Whether `b` must come after `a`: one writes bytes the other reads or writes.
bool depends(const Touches& a, const Touches& b) {
  return overlap(a.writes, b.reads) || overlap(a.writes, b.writes) || overlap(a.reads, b.writes);
}

// Independent calls run side by side on the cores, one call per core, call i of a group on core i % CORES
// (alone on it as on one core: a fence between two calls on one core), with no barrier between them; the group
// meets at a barrier before and after.
// - A run of consecutive gemm.s calls with the same label (the per-head or per-batch GEMMs of a batched MatMul)
//   where no call writes bytes another reads or writes, grouped where ceil(G / CORES) x one unit's estimate +
//   2 x SYNC_LATENCY beats running them one after the other, each as decided alone (the whole-chip GEMM or one
//   unit, with its barriers).
// - A window of consecutive copies and cast.s or gather.s calls that each stay on one core (one_core_cycles),
//   each of a node of its own, is scheduled by levels: a call's level is one more than the highest of the calls
//   before it in the window whose bytes it reads or writes, or that read bytes it writes (depends); the window
//   runs level by level (`order`, the program order of the calls: within a level, in their order before), and
//   each level of several calls is a group where the busiest core's sum of estimates (or all their bytes at
//   HBM's rate and a latency each way, if more) + 2 x SYNC_LATENCY beats their sum on one core. A decoder layer's
//   KV-cache casts and concatenations, cast k, concat k, cast v, concat v, run as two groups: the casts, then
//   the concatenations.
void group_independent_calls(const KernelPlan& plan, const std::map<std::string, int64_t>& symbols,
                             std::vector<OnChip>& on_chip, std::vector<size_t>& order, Fragments& fragments) {
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  if (cores <= 1) return;
  const double sync = 2.0 * static_cast<double>(symbol_or(symbols, "SYNC_LATENCY", 0));
  const double hbm = static_cast<double>(std::max<int64_t>(1, symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 1)));
  const double latency = 2.0 * static_cast<double>(symbol_or(symbols, "DMA_LATENCY", 0));
  const size_t n = plan.calls.size();
  auto gemm = [&](size_t c) {
    const KernelCall& k = plan.calls[c];
    return k.kind == KernelCall::Kind::Library && k.kernel == "gemm.s" && param_or(k, "ACT_RESIDENT", 0) == 0 &&
           param_or(k, "ACT", 0) == 0;  // (an activation runs only in gemm_chip)
  };
  auto own_node = [&](size_t c) {  // the only call of its node
    return (c == 0 || plan.calls[c - 1].label != plan.calls[c].label) &&
           (c + 1 == n || plan.calls[c + 1].label != plan.calls[c].label);
  };
  std::vector<std::optional<double>> small(n);
  for (size_t c = 0; c < n; ++c)
    if (own_node(c)) small[c] = one_core_cycles(plan, plan.calls[c], on_chip[c], symbols);
  int groups = 0;
  auto group = [&](const std::vector<size_t>& calls) {
    for (size_t i = 0; i < calls.size(); ++i)
      on_chip[calls[i]] = OnChip{}, on_chip[calls[i]].group = groups,
      on_chip[calls[i]].core = static_cast<int64_t>(i) % cores;
    ++groups;
  };
  for (size_t c = 0; c < n;) {
    if (small[c]) {  // a window of small calls, scheduled by levels
      size_t e = c + 1;
      while (e < n && small[e]) ++e;
      if (e - c >= 2) {
        std::vector<Touches> t;
        std::vector<int> level(e - c, 0);
        for (size_t i = c; i < e; ++i) {
          t.push_back(touches(plan, plan.calls[i], symbols, fragments));
          for (size_t j = c; j < i; ++j)
            if (depends(t[j - c], t[i - c])) level[i - c] = std::max(level[i - c], level[j - c] + 1);
        }
        std::vector<size_t> by_level(e - c);
        std::iota(by_level.begin(), by_level.end(), c);
        std::stable_sort(by_level.begin(), by_level.end(),
                         [&](size_t a, size_t b) { return level[a - c] < level[b - c]; });
        std::copy(by_level.begin(), by_level.end(), order.begin() + static_cast<std::ptrdiff_t>(c));
        for (size_t i = 0; i < by_level.size();) {
          size_t j = i;
          std::vector<size_t> same;
          while (j < by_level.size() && level[by_level[j] - c] == level[by_level[i] - c]) same.push_back(by_level[j++]);
          if (same.size() >= 2) {
            std::vector<double> busy(static_cast<size_t>(cores), 0.0);
            double alone = 0, bytes = 0;
            for (size_t k = 0; k < same.size(); ++k) {
              alone += *small[same[k]];
              busy[k % static_cast<size_t>(cores)] += *small[same[k]];
              bytes += call_bytes(plan, plan.calls[same[k]], true);
            }
            if (std::max(*std::max_element(busy.begin(), busy.end()), bytes / hbm + latency) + sync < alone)
              group(same);
          }
          i = j;
        }
      }
      c = e;
      continue;
    }
    if (!gemm(c)) {
      ++c;
      continue;
    }
    size_t e = c + 1;
    auto joins = [&](size_t k) { return gemm(k) && plan.calls[k].label == plan.calls[c].label; };
    if (e == n || !joins(e)) {
      c = e;  // a run of one call (its byte ranges are not needed)
      continue;
    }
    std::vector<Touches> run{touches(plan, plan.calls[c], symbols, fragments)};
    for (; e < n && joins(e); ++e) {
      Touches t = touches(plan, plan.calls[e], symbols, fragments);
      bool independent = true;
      for (const Touches& u : run) independent = independent && !depends(u, t);
      if (!independent) break;
      run.push_back(std::move(t));
    }
    const auto G = static_cast<int64_t>(e - c);
    if (G >= 2) {
      double alone = 0, slowest = 0;
      for (size_t i = c; i < e; ++i) {
        const double one = one_unit_gemm_cycles(plan.calls[i], symbols);
        slowest = std::max(slowest, one);
        alone += on_chip[i].gemm ? kernels::gemm_chip_estimate(*on_chip[i].gemm, symbols) + sync : one;
      }
      if (static_cast<double>((G + cores - 1) / cores) * slowest + sync < alone) {
        std::vector<size_t> calls(e - c);
        std::iota(calls.begin(), calls.end(), c);
        group(calls);
      }
    }
    c = e;
  }
}

// A library or whole-chip call's tensors' addresses, by the names its kernel declares.
std::map<std::string, uint64_t> tensor_addresses(const KernelPlan& plan, const KernelCall& call) {
  std::map<std::string, uint64_t> addr;
  for (const auto& [tensor, b] : call.tensors) {
    auto off = call.offsets.find(tensor);
    addr[tensor] = plan.buffers[b].addr + (off == call.offsets.end() ? 0 : off->second);
  }
  return addr;
}

isa::Program assemble_call(const KernelPlan& plan, const KernelCall& call,
                           const std::map<std::string, int64_t>& symbols, uint64_t base_pc, const OnChip& chip,
                           Fragments& fragments) {
  const std::optional<kernels::GemmChip>& g = chip.gemm;
  auto at = [&](int buf, uint64_t off) { return plan.buffers[buf].addr + off; };
  const std::map<std::string, uint64_t> addr = tensor_addresses(plan, call);
  try {
    if (g) return kernels::gemm_chip_kernel(*g, symbols, addr, base_pc);
    if (chip.ksplit) return kernels::gemm_ksplit_kernel(*chip.ksplit, symbols, addr, base_pc);
    if (call.kind == KernelCall::Kind::Attention)
      return kernels::attention_chip_kernel(call.attention, symbols, addr, base_pc);
    if (call.kind == KernelCall::Kind::Copy)
      return kernels::copy_kernel(moves_of(plan, call), symbols, base_pc, "copy", chip.copy_cores);
    if (call.kind == KernelCall::Kind::Cast) {
      std::vector<kernels::CastPart> parts;
      for (const BufferCast& c : call.casts) parts.push_back({at(c.src, c.src_off), at(c.dst, c.dst_off), c.n});
      return kernels::cast_kernel(parts, static_cast<isa::DType>(call.params.at("SDT")),
                                  static_cast<isa::DType>(call.params.at("DDT")), symbols, base_pc, "cast");
    }
    if (call.kind == KernelCall::Kind::Rowwise) {
      kernels::rowwise::Program rows = chip.row_cut ? rows_for_cores(call.rows, symbols) : call.rows;
      rows.cores = chip.row_cores;
      for (size_t i = 0; i < rows.inputs.size(); ++i) rows.inputs[i].addr = at(call.row_inputs[i], call.row_input_offs[i]);
      for (size_t i = 0; i < rows.outputs.size(); ++i)
        rows.outputs[i].addr = at(call.row_outputs[i], call.row_output_offs[i]);
      return kernels::rowwise::kernel(rows, symbols, base_pc, "rowwise");
    }
    if (param_or(call, "C_GROUP", 0) != 0)  // (whole_chip_gemm takes every such call)
      throw std::logic_error(call.label + ": internal: a row map (C_GROUP) on " + call.kernel +
                             ", which stores its rows as they are");
    std::map<std::string, int64_t> defines = symbols;
    for (const auto& [key, value] : call.params) defines[key] = value;
    if (chip.lib_cores > 1) defines["SHARE_CORES"] = chip.lib_cores;
    std::string key = '\0' + call.kernel;  // (no generated text starts with a NUL)
    for (const auto& [name, value] : defines) key.append(1, '\0').append(name).append("=").append(std::to_string(value));
    const isa::Prepared* p = fragments.get(key, [&] { return kernels::prepare(call.kernel, defines); });
    std::optional<isa::Program> placed_frag = placed(p, addr, base_pc);
    isa::Program frag = placed_frag ? std::move(*placed_frag) : kernels::assemble(call.kernel, defines, addr, base_pc);
    for (const isa::TensorDecl& t : frag.tensors)
      if (t.kind == isa::TensorKind::Const)
        throw Error(call.label + ": kernel " + call.kernel + " declares constant '" + t.name +
                    "', which the compiler cannot place yet");
    return frag;
  } catch (const isa::Error& e) {
    throw Error(call.label + ": " + call.kernel + ": " + e.what());
  } catch (const std::invalid_argument& e) {
    throw Error(call.label + ": " + call.kernel + ": " + e.what());
  }
}

// Bytes a call reads and writes in memory (HBM, or VMEM or the shared memory for buffers placed there:
// plan_memory); generated calls' from their moves and rows, Library calls' from the lowering. With `hbm_only`,
// only those of buffers in HBM: exact for generated calls; a Library call's count less each on-chip buffer's bytes
// once (it reads or writes each of its intermediates once, or more where it re-reads its inputs: then an upper
// bound).
double call_bytes(const KernelPlan& plan, const KernelCall& call, bool hbm_only) {
  auto counted = [&](int buf) {
    return !hbm_only || isa::far_memory(static_cast<int64_t>(plan.buffers[static_cast<size_t>(buf)].addr)) ==
                            isa::FarMemory::Hbm;
  };
  if (call.kind == KernelCall::Kind::Copy) {
    double b = 0;
    for (const BufferMove& m : call.moves) {
      const double moved = static_cast<double>(m.rows) * static_cast<double>(m.rowbytes);
      if (counted(m.dst)) b += moved;
      if (counted(m.src)) b += m.src_stride == 0 ? static_cast<double>(m.rowbytes) : moved;
    }
    return b;
  }
  if (call.kind == KernelCall::Kind::Rowwise) {
    const auto& r = call.rows;
    double b = 0;
    for (size_t i = 0; i < r.inputs.size(); ++i) {
      const kernels::rowwise::Input& in = r.inputs[i];
      const int64_t rows = in.period > 0 ? std::min(in.period, r.rows) : r.rows;
      if (counted(call.row_inputs[i])) b += static_cast<double>(rows * (in.per_row ? 1 : r.cols) * isa::dtype_size(in.dtype));
    }
    for (size_t i = 0; i < r.outputs.size(); ++i) {
      const Buffer& buf = plan.buffers[call.row_outputs[i]];
      if (counted(call.row_outputs[i]))
        b += static_cast<double>(std::min<uint64_t>(buf.bytes() - buf.extra_bytes,
                                                    static_cast<uint64_t>(r.rows * r.cols) * isa::dtype_size(buf.dtype)));
    }
    return b;
  }
  double b = call.bytes;
  std::set<int> shared;
  for (const auto& [name, buf] : call.tensors)
    if (!counted(buf)) shared.insert(buf);
  for (int buf : shared) b -= std::min(b, static_cast<double>(plan.buffers[static_cast<size_t>(buf)].bytes()));
  return b;
}

// Where each buffer is first and last touched (call indices; -1 for a buffer no call touches).
struct BufferUse {
  std::vector<int64_t> first, last;
};
BufferUse buffer_use(const KernelPlan& plan) {
  BufferUse u{std::vector<int64_t>(plan.buffers.size(), -1), std::vector<int64_t>(plan.buffers.size(), -1)};
  for (size_t c = 0; c < plan.calls.size(); ++c)
    for (const auto& [name, b] : plan.calls[c].tensors) {
      if (u.first[b] < 0) u.first[b] = static_cast<int64_t>(c);
      u.last[b] = static_cast<int64_t>(c);
    }
  return u;
}

// The HBM bytes the calls [c0, c1] (one graph node's) cannot avoid (isa::Region::ideal_bytes): every buffer they
// take from the rest of the program (an input, a weight, or what an earlier call made) read once, and every buffer
// they give to it (an output, or what a later call uses) written once, at the size the model gives it
// (Buffer::ideal_bytes). A buffer that lives only inside the node (a scratch tensor, a partial sum) costs nothing:
// it could stay on chip; nor does one the memory plan keeps on chip.
double node_ideal_bytes(const KernelPlan& plan, const BufferUse& use, size_t c0, size_t c1) {
  std::set<int> touched;
  for (size_t c = c0; c <= c1; ++c)
    for (const auto& [name, b] : plan.calls[c].tensors) touched.insert(b);
  double bytes = 0;
  for (int b : touched) {
    const Buffer& buf = plan.buffers[b];
    const bool taken = buf.kind == Buffer::Kind::Input || buf.kind == Buffer::Kind::Const ||
                       use.first[b] < static_cast<int64_t>(c0);
    const bool given = buf.kind == Buffer::Kind::Output || use.last[b] > static_cast<int64_t>(c1);
    // An intermediate kept on chip (VMEM, the shared memory: plan_memory) costs the node no HBM bytes.
    if ((taken || given) && isa::far_memory(static_cast<int64_t>(buf.addr)) == isa::FarMemory::Hbm)
      bytes += static_cast<double>(buf.ideal_bytes());
  }
  return bytes;
}

// The HBM bytes the whole program cannot avoid (isa::Program::ideal_bytes): each input, output and constant a
// call uses, once, at the size the model gives it.
double program_ideal_bytes(const KernelPlan& plan, const BufferUse& use) {
  double bytes = 0;
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (plan.buffers[b].kind != Buffer::Kind::Temp && use.first[b] >= 0)
      bytes += static_cast<double>(plan.buffers[b].ideal_bytes());
  return bytes;
}

// The semaphores a program names (waits, signals, sem.set, sem.signal).
std::set<int> semaphores_of(const isa::Program& p) {
  std::set<int> sems;
  for (isa::Word w : p.code) {
    const isa::Instr in = isa::decode(w);
    const isa::InstrDesc& d = in.desc();
    // a background load's signal is the weight stream's (stream_weights), not the kernel's
    const bool bg = in.op == isa::Op::DMALD && in.f[static_cast<size_t>(d.operand_index("bg"))] != 0;
    const int skip = bg ? d.operand_index("signal") : -1;
    for (int i = 0; i < d.num_operands; ++i)
      if (d.operands[static_cast<size_t>(i)].kind == isa::OperandKind::Sem && in.f[i] != 0 && i != skip)
        sems.insert(static_cast<int>(in.f[i]));
  }
  return sems;
}

// Renumbers a program's semaphores: s -> to[s] where to[s] != 0.
void renumber_semaphores(isa::Program& p, const std::array<int, isa::kNumSems>& to) {
  for (isa::Word& w : p.code) {
    isa::Instr in = isa::decode(w);
    const isa::InstrDesc& d = in.desc();
    bool changed = false;
    for (int i = 0; i < d.num_operands; ++i)
      if (d.operands[static_cast<size_t>(i)].kind == isa::OperandKind::Sem && in.f[i] != 0 &&
          to[static_cast<size_t>(in.f[i])] != 0)
        in.f[i] = to[static_cast<size_t>(in.f[i])], changed = true;
    if (changed) w = isa::encode(in);
  }
}

// A row-wise kernel and the whole-chip GEMM after it on a program of one core, overlapped: the GEMM's first chunk
// of weights loads while the row-wise kernel (a LayerNorm, say) still runs, where a fence between them left HBM
// idle for all of the row-wise kernel's time. What keeps them apart:
// - VMEM: the row-wise kernel takes a region at the top of the kernels' VMEM (rowwise::Program::vmem_base), the
//   GEMM the rest (its VMEM_BYTES less that region);
// - semaphores: the row-wise kernel's are renumbered to the top (`top`: s31, or s30 where the weight stream takes
//   s31) down, one more below them, `done`, which a
//   dmaout.sync after the row-wise kernel's stores signals; the GEMM's, below, are set before the row-wise kernel
//   starts (a sem.set waits for every unit, so they cannot wait until the GEMM's turn);
// - order: the GEMM's a, which the row-wise kernel may write, loads after `done` (GemmChip::a_wait); its first
//   chunk of b, ahead of that load in the load queue, does not wait. Every other buffer the GEMM reads, the
//   row-wise kernel must not write; what the GEMM writes it writes after its products, so after `done`.
// Where a DMA queue has one engine, the weights' load would hold the row-wise kernel's later loads back: none.
// Where this kind cannot be had (the fused attention's semaphores and the GEMM's are more than 31), the other kind,
// prefetch_overlap, below, loads only the GEMM's first chunk of weights after the first kernel's instructions.
struct Overlap {
  bool on = false;
  bool prefetch = false;                      // prefetch_overlap's kind: no renumbering, no moved sets
  KernelCall rows;                            // the row-wise call, its VMEM region at the top
  OnChip gemm;                                // the GEMM's, with a_wait (prefetch: vmem_base and b_preloaded)
  std::map<std::string, int64_t> symbols;     // the GEMM's: VMEM_BYTES less the first kernel's region, if on top
  std::vector<isa::Word> sets;                // the GEMM's leading sem.set instructions, moved ahead
  std::array<int, isa::kNumSems> renumber{};  // the row-wise kernel's semaphores' new numbers
  int done = 0;
  int skip = 0;  // the prefetch kind: 1 where the GEMM comes after a copy within VMEM that follows the first kernel
};

Overlap plan_overlap(const KernelPlan& plan, const KernelCall& x, const OnChip& xc, const KernelCall& y,
                     const OnChip& yc, const std::map<std::string, int64_t>& symbols, Fragments& fragments,
                     int top) {
  if (x.kind != KernelCall::Kind::Rowwise || xc.row_cores != 1 || xc.row_cut || !yc.gemm || yc.gemm->taps.cin > 0 ||
      symbol_or(symbols, "DMA_ENGINES", 1) < 2 || symbol_or(symbols, "CORES", 1) != 1)
    return {};
  const std::set<int> written(x.row_outputs.begin(), x.row_outputs.end());
  for (const auto& [name, b] : y.tensors)
    if (name != "a" && written.count(b)) return {};
  const int64_t vmem = symbol_or(symbols, "VMEM_BYTES", 0);
  Overlap o;
  try {
    const int64_t region = static_cast<int64_t>((kernels::rowwise::plan(x.rows, symbols).vmem_used + 4095) / 4096 * 4096);
    if (region <= 0 || region > vmem / 2) return {};
    o.rows = x;
    o.rows.rows.vmem_base = static_cast<uint64_t>(vmem - region), o.rows.rows.vmem_bytes = static_cast<uint64_t>(region);
    o.symbols = symbols;
    o.symbols["VMEM_BYTES"] = vmem - region;
    // The GEMM's plan with less VMEM: not slower by its estimate than with all of it (beyond 2%).
    if (kernels::gemm_chip_estimate(*yc.gemm, o.symbols) > 1.02 * kernels::gemm_chip_estimate(*yc.gemm, symbols))
      return {};
    const std::set<int> xs = semaphores_of(assemble_call(plan, o.rows, symbols, 0, xc, fragments));
    int next = top;
    for (auto it = xs.rbegin(); it != xs.rend(); ++it) o.renumber[static_cast<size_t>(*it)] = next--;
    o.done = next;
    o.gemm = yc;
    o.gemm.gemm->a_wait = o.done;
    const isa::Program yp = assemble_call(plan, y, o.symbols, 0, o.gemm, fragments);
    std::set<int> ys = semaphores_of(yp);
    ys.erase(o.done);
    if (!ys.empty() && *ys.rbegin() >= o.done) return {};
    for (isa::Word w : yp.code) {
      if (isa::decode(w).op != isa::Op::SEMSET) break;
      o.sets.push_back(w);
    }
  } catch (const Error&) {
    return {};
  } catch (const std::invalid_argument&) {
    return {};
  }
  o.on = true;
  return o;
}

// The other kind: a kernel whose VMEM use is known (a row-wise kernel, the fused attention, a whole-chip GEMM) and
// the whole-chip GEMM after it (on a chip of several cores, both spread over all of them): the GEMM's VMEM lies
// beside the first kernel's (past it, GemmChip::vmem_base, or below it where the first kernel lies past a base of
// its own), and the instructions that load each core's first tile's first chunk of b (gemm_chip_first_b) follow
// the first kernel's, with no fence between: they take no semaphore, so the two kernels' semaphores may be the
// same. The GEMM then finds that chunk in its slot (GemmChip::b_preloaded); its leading sem.set (and the barrier
// before it, on several cores) waits for the load as for every unit. Only b loads early, so only b must not be
// something the first kernel writes. The first kernel may itself be the second of a pair (xc and x_symbols: its
// call as that pair made it): a chain of GEMMs, or a LayerNorm, a GEMM and a GEMM.
Overlap prefetch_overlap(const KernelCall& x, const OnChip& xc, const std::map<std::string, int64_t>& x_symbols,
                         const KernelCall& y, const OnChip& yc, const std::map<std::string, int64_t>& symbols) {
  // On a chip of several cores, both spread over every core (each core loads its own first tile's weights), none
  // in a group of independent calls.
  const bool cores = symbol_or(symbols, "CORES", 1) > 1;
  if ((!yc.gemm && !yc.ksplit) || (yc.gemm && yc.gemm->b_area_chunks > 0) ||
      symbol_or(symbols, "DMA_ENGINES", 1) < 2 ||
      (cores && (!xc.every_core() || !yc.every_core() || xc.group >= 0 || yc.group >= 0)))
    return {};
  const auto b = y.tensors.find("b");
  if (b == y.tensors.end()) return {};
  const int64_t vmem = symbol_or(symbols, "VMEM_BYTES", 0);
  Overlap o;
  try {
    int64_t from = 0, to = 0;  // the first kernel's VMEM
    double idle = 0;           // the cycles at its end that leave HBM idle (0: one chunk is preloaded)
    if (x.kind == KernelCall::Kind::Rowwise && x.rows.vmem_base == 0) {
      for (int out : x.row_outputs)
        if (out == b->second) return {};
      kernels::rowwise::Program rows = xc.row_cut ? rows_for_cores(x.rows, x_symbols) : x.rows;
      rows.cores = xc.row_cores;
      const kernels::rowwise::Plan rp = kernels::rowwise::plan(rows, x_symbols);
      to = static_cast<int64_t>(rp.vmem_used);
      // its last tile's vector work (the core issues the loads after its last tile's instructions)
      if (x.rows.background.empty())
        idle = rowwise_work(rows, rp, x_symbols) / static_cast<double>(std::max<int64_t>(1, rp.tiles));
    } else if (x.kind == KernelCall::Kind::Attention && !x.attention.vector_unit) {
      for (const auto& [name, buf] : x.tensors)
        if (name == "o" && buf == b->second) return {};
      to = kernels::attention_chip_plan(x.attention, x_symbols).vmem_end;
    } else if (xc.gemm || xc.ksplit) {  // a whole-chip or split-K GEMM: the next one's first weights load during
                                        // its drain
      for (const char* out : {"c", "q", "ws"}) {
        const auto it = x.tensors.find(out);
        if (it != x.tensors.end() && it->second == b->second) return {};
      }
      if (xc.gemm) {
        from = xc.gemm->vmem_base, to = kernels::gemm_chip_vmem_end(*xc.gemm, x_symbols);
        if (xc.gemm->prefetch.empty() && xc.gemm->background.empty())
          idle = kernels::gemm_chip_tail(*xc.gemm, x_symbols);  // its last chunk's products and its drain
      } else {
        const kernels::KSplitPlan xp = kernels::gemm_ksplit_plan(*xc.ksplit, x_symbols);
        from = xc.ksplit->vmem_base, to = xp.vmem_end;
        if (xc.ksplit->background.empty()) idle = xp.tail;  // its last products, sums, drains and stores
      }
    } else {
      return {};
    }
    if (to <= from) return {};
    const int64_t past = (to + 4095) / 4096 * 4096;
    // The GEMM alone, with all of VMEM: a whole-chip GEMM's estimate and (where it plans tiles) its tiles; a split
    // kernel's plan
    std::optional<kernels::GemmTiles> alone_tiles;
    std::optional<kernels::KSplitPlan> alone_plan;
    double alone_estimate = 0;
    if (yc.gemm) {
      alone_estimate = kernels::gemm_chip_estimate(*yc.gemm, symbols);
      try {
        alone_tiles = kernels::gemm_chip_tiles(*yc.gemm, symbols);
      } catch (const std::invalid_argument&) {
      }
    } else {
      alone_plan = kernels::gemm_ksplit_plan(*yc.ksplit, symbols);
    }
    // The GEMM's VMEM past the first kernel's (where that starts at 0), or below it (where it lies past a base of
    // its own), else past it too: the first placement that plans as well as the GEMM alone (the checks below)
    auto place = [&](bool above) {
      o = Overlap{};
      o.gemm = yc;
      o.symbols = symbols;
      if (above)
        (yc.gemm ? o.gemm.gemm->vmem_base : o.gemm.ksplit->vmem_base) = past;
      else
        o.symbols["VMEM_BYTES"] = from;
      // As many chunks (a split-K GEMM: weight tiles) as HBM moves (every core's) in that time, at least one, at
      // most what the slots hold
      const double hbm = static_cast<double>(symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 0));
      const double cores_used = static_cast<double>(
          yc.gemm ? symbol_or(symbols, "CORES", 1) : alone_plan->cores);
      if (yc.gemm) {
        const kernels::GemmPreload most = kernels::gemm_chip_preload_limit(*o.gemm.gemm, o.symbols);
        const double chunk = static_cast<double>(most.chunk_bytes) * cores_used;
        o.gemm.gemm->b_preloaded = std::clamp<int64_t>(static_cast<int64_t>(idle * hbm / chunk), 1, most.chunks);
        if (kernels::gemm_chip_estimate(*o.gemm.gemm, o.symbols) > 1.02 * alone_estimate) return false;
        // and on one core, where it planned tiles with all of VMEM, as many rows of K a chunk and row blocks with
        // less: the estimate misses what fewer cost (ResNet-50's 3 x 3 convolutions of 14 x 14 on v5e, below the
        // kernel before: chunks of 384 rows against 512, no row blocks against 2; estimated 5,195 cycles against
        // 5,429, ran 4,543 against 2,951). (On chips of several cores the estimate's choice stands: asked there too,
        // ConvNeXt-T on v4 took 635,971 -> 637,269 cycles, RegNetY-400MF on h200-like 616,089 -> 619,281.)
        if (alone_tiles && !cores) {
          const kernels::GemmTiles beside = kernels::gemm_chip_tiles(*o.gemm.gemm, o.symbols);
          if (beside.kc < alone_tiles->kc || beside.rb < alone_tiles->rb) return false;
        }
        kernels::gemm_chip_first_b(*o.gemm.gemm, o.symbols);  // it can (throws where it cannot)
      } else {
        const kernels::KSplitPreload most = kernels::gemm_ksplit_preload_limit(*o.gemm.ksplit, o.symbols);
        const double tile = static_cast<double>(most.tile_bytes) * cores_used;
        const int64_t fit = std::clamp<int64_t>(static_cast<int64_t>(idle * hbm / tile), 1, most.tiles);
        o.gemm.ksplit->b_preloaded = fit;
        // At least each unit's first tile, which its unit may then take ahead (GemmKSplit::lw_sem), where what that
        // saves by the estimate beats the time the tiles beyond `fit` hold the first kernel's end
        const int64_t units = alone_plan->units;
        if (units > fit && units <= most.tiles) {
          kernels::GemmKSplit ahead = *o.gemm.ksplit;
          ahead.b_preloaded = units, ahead.lw_sem = 1;
          const double saves = kernels::gemm_ksplit_plan(*o.gemm.ksplit, o.symbols).estimate -
                               kernels::gemm_ksplit_plan(ahead, o.symbols).estimate;
          if (saves > static_cast<double>(units - fit) * tile / hbm) o.gemm.ksplit->b_preloaded = units;
        }
        const kernels::KSplitPlan beside = kernels::gemm_ksplit_plan(*o.gemm.ksplit, o.symbols);
        const kernels::KSplitPlan& alone = *alone_plan;
        if (beside.estimate > 1.02 * alone.estimate || beside.tm != alone.tm || beside.units != alone.units ||
            beside.stage_rows != alone.stage_rows)
          return false;
        kernels::gemm_ksplit_first_b(*o.gemm.ksplit, o.symbols);  // it can (throws where it cannot)
      }
      return true;
    };
    bool placed = false;
    for (const bool above : {false, true}) {
      if (placed || (above ? past > vmem / 2 : from == 0)) continue;
      try {
        placed = place(above);
      } catch (const std::invalid_argument&) {
      }
    }
    if (!placed) return {};
  } catch (const std::invalid_argument&) {
    return {};
  }
  o.on = o.prefetch = true;
  return o;
}

// Whether a GEMM call's weights (its tensor b) are a constant of the program, which a kernel before it may load.
bool constant_weights(const KernelPlan& plan, const KernelCall& call) {
  const auto b = call.tensors.find("b");
  return b != call.tensors.end() && plan.buffers[b->second].kind == Buffer::Kind::Const;
}

// ... and read from HBM (not streamed into VMEM before the call: stream_weights).
bool weights_in_hbm(const KernelPlan& plan, const KernelCall& call) {
  if (!constant_weights(plan, call)) return false;
  const auto off = call.offsets.find("b");
  const uint64_t addr = plan.buffers[call.tensors.at("b")].addr + (off == call.offsets.end() ? 0 : off->second);
  return isa::far_memory(static_cast<int64_t>(addr)) == isa::FarMemory::Hbm;
}

// With plan_weight_areas' attention at `at`: where a whole-chip GEMM comes before it (the QKV projection, or copies
// after that: GPT-2's transposes of k and v) and one after it (the output projection), the first GEMM's last tile, whose products and drain leave HBM idle while the
// attention waits for its output, loads the second's first chunk of weights (GemmChip::prefetch) into an area at
// the middle of VMEM (b_area), where the second finds it; both keep below the middle (`half`). (Its whole first
// tile, both chunks on v5e, was slower: BERT-base 417,102 cycles against 413,914; and its second chunk loaded by
// the attention, 414,530.)
void before_attention(const KernelPlan& plan, const std::vector<size_t>& order, std::vector<OnChip>& on_chip,
                      const std::map<std::string, int64_t>& half, std::vector<std::map<std::string, int64_t>>& call_symbols,
                      size_t at) {
  if (at == 0 || at + 1 >= order.size()) return;
  size_t w = at - 1;  // the GEMM before, past copies (GPT-2's transposes of k and v)
  while (w > 0 && plan.calls[order[w]].kind == KernelCall::Kind::Copy && !on_chip[order[w]].gemm) --w;
  OnChip &xc = on_chip[order[w]], &yc = on_chip[order[at + 1]];
  const KernelCall& y = plan.calls[order[at + 1]];
  if (!xc.gemm || !yc.gemm || xc.gemm->taps.cin > 0 || yc.gemm->taps.cin > 0 || yc.gemm->b_area_chunks > 0 ||
      !weights_in_hbm(plan, y))
    return;
  const int64_t mid = half.at("VMEM_BYTES");
  kernels::GemmChip x = *xc.gemm, g = *yc.gemm;
  if (kernels::gemm_chip_estimate(x, half) > 1.02 * kernels::gemm_chip_estimate(x, call_symbols[w])) return;
  const kernels::GemmArea sized = kernels::gemm_chip_area(g, half);
  if (sized.chunks < 1 || sized.chunk_bytes > mid / 4) return;
  g.b_area = mid, g.b_area_chunks = 1;
  x.prefetch = kernels::gemm_chip_area(g, half, tensor_addresses(plan, y)).loads;
  kernels::gemm_chip_kernel(x, half);  // they can (throw where they cannot)
  kernels::gemm_chip_kernel(g, half);
  xc.gemm = x, yc.gemm = g;
  for (size_t j = w; j < at; ++j) call_symbols[j] = half;
}

// The semaphore each streamed weight's last background load signals and its GEMM waits for (stream_wait); also
// each core's last load of an area (plan_weight_areas, which plans areas only where no weight stream runs)
constexpr int kStreamSem = isa::kNumSems - 1;

// Weights that stream in during the fused attention. The attention leaves HBM idle while it computes (its inputs
// are intermediates, on chip where there is no weight stream but in the shared memory); the GEMMs after it stream
// their weights.
// So the first chunks of b of the GEMM two or three kernels later (after the output projection and a LayerNorm,
// say: the FFN's first Linear), as many as HBM can move in that time by the attention's estimate, load into an
// area at the top of VMEM (GemmChip::b_area), by background loads the attention issues right after its first
// item's (AttentionChip::background: its later items' loads do not wait for them), each core's last signalling
// kStreamSem, which the GEMM waits for (stream_wait); on a chip of several cores each core loads its own first
// tile's into its own VMEM (DmaLoad::core): BERT-base on v4 251,947 -> 242,028 cycles, GPT-2 prefill 356,846 ->
// 353,974 (with one attention item a core, the loads plain, when the areas came; background loads let the
// attention take two items a core, pipelined: 238,358 and 350,680). The kernels from the attention's successor to
// that GEMM's successor take half of VMEM (VMEM_BYTES halved in `call_symbols`), so that none writes the area
// before the GEMM has read it. Not where the GEMM's weights are not a constant, or the kernels between are other
// than GEMMs and row-wise kernels.
// Returns the prefetch loads by position in `order`. (Tried, slower: the area for the GEMM's second tile, so that
// its first tile's first weights still load while a LayerNorm before it runs, BERT-base on v5e 427,496 cycles
// against 418,761 and on v6e 313,883 against 300,087, the next tile's loads waiting for a slot whatever is
// resident; the area for the GEMM after that one, the FFN's second Linear, 441,545 and 306,068; more in
// docs/compiler.md.)
std::map<size_t, std::vector<kernels::DmaLoad>> plan_weight_areas(KernelPlan& plan, const std::vector<size_t>& order,
                                                                  std::vector<OnChip>& on_chip,
                                                                  const std::map<std::string, int64_t>& symbols,
                                                                  std::vector<std::map<std::string, int64_t>>& call_symbols) {
  std::map<size_t, std::vector<kernels::DmaLoad>> prefetch;
  const int64_t vmem = symbol_or(symbols, "VMEM_BYTES", 0), hbm = symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 0);
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  if (vmem <= 0 || hbm <= 0) return prefetch;
  std::map<std::string, int64_t> half = symbols;
  half["VMEM_BYTES"] = vmem / 2 / 4096 * 4096;
  auto fits = [&](const kernels::GemmKSplit& g) {  // a split-K GEMM between, in half of VMEM, as it plans in all
    try {
      return kernels::gemm_ksplit_plan(g, half).row_tiles == kernels::gemm_ksplit_plan(g, symbols).row_tiles;
    } catch (const std::invalid_argument&) {
      return false;
    }
  };
  for (size_t at = 0; at < order.size(); ++at) {
    const KernelCall& x = plan.calls[order[at]];
    if (x.kind != KernelCall::Kind::Attention || x.attention.vector_unit) continue;
    try {
      const kernels::AttentionPlan ap = kernels::attention_chip_plan(x.attention, symbols);
      if (ap.vmem_end > half.at("VMEM_BYTES")) continue;
      // The GEMM: at at + 2 or at + 3, after GEMMs and row-wise kernels, none with an area already
      size_t z = 0;
      for (size_t j = at + 1; j < order.size() && j <= at + 3 && !z; ++j) {
        const KernelCall& c = plan.calls[order[j]];
        const OnChip& oc = on_chip[order[j]];
        if (oc.gemm && j >= at + 2) z = j;
        else if (!oc.gemm && c.kind != KernelCall::Kind::Rowwise && !(oc.ksplit && fits(*oc.ksplit))) break;
      }
      if (!z) continue;
      const KernelCall& zc = plan.calls[order[z]];
      kernels::GemmChip g = *on_chip[order[z]].gemm;
      if (!weights_in_hbm(plan, zc) || g.taps.cin > 0 || g.b_area_chunks > 0) continue;
      if (kernels::gemm_chip_estimate(g, half) > 1.02 * kernels::gemm_chip_estimate(g, symbols)) continue;
      const kernels::GemmArea sized = kernels::gemm_chip_area(g, half);
      // HBM's time while the attention computes: its estimate less its own bytes' time
      const double idle = std::max(0.0, ap.estimate - call_bytes(plan, x, true) / static_cast<double>(hbm));
      const double per_chunk = static_cast<double>(sized.b_bytes) / static_cast<double>(sized.chunks);
      const int64_t f =
          std::min<int64_t>(sized.chunks, std::llround(idle * static_cast<double>(hbm) / per_chunk));
      const int64_t bytes = (f * sized.chunk_bytes + 4095) / 4096 * 4096;
      if (f < 1 || bytes > vmem - half.at("VMEM_BYTES")) continue;
      g.b_area = vmem - bytes, g.b_area_chunks = f;
      std::vector<kernels::DmaLoad> loads = kernels::gemm_chip_area(g, half, tensor_addresses(plan, zc)).loads;
      // Background loads (the attention's later items load after its first's while HBM moves them): each core's
      // last signals kStreamSem (free: there is no weight stream where there are areas), which the GEMM waits for.
      std::vector<size_t> last(static_cast<size_t>(cores), loads.size());
      for (size_t i = 0; i < loads.size(); ++i)
        if (loads[i].core < cores) last[static_cast<size_t>(std::max(loads[i].core, 0))] = i;  // (-1: one core)
      if (loads.empty() || std::count(last.begin(), last.end(), loads.size()) > 0) continue;  // a core without a tile
      for (const size_t i : last) loads[i].signal = kStreamSem;
      plan.calls[order[z]].stream_wait = kStreamSem;
      on_chip[order[z]].gemm = g;
      for (size_t j = at + 1; j <= std::min(z + 1, order.size() - 1); ++j) call_symbols[j] = half;
      prefetch[at] = std::move(loads);
      if (cores == 1) before_attention(plan, order, on_chip, half, call_symbols, at);
    } catch (const std::invalid_argument&) {
      continue;
    }
  }
  return prefetch;
}

}  // namespace

kernels::GemmChip gemm_chip_of(const KernelCall& call, const std::map<std::string, int64_t>& symbols) {
  auto param = [&](const char* name, int64_t otherwise) { return param_or(call, name, otherwise); };
  const int64_t mxus = symbol_or(symbols, "MXUS", 1);
  kernels::GemmChip g;
  g.m = param("M", 0), g.k = param("K", 0), g.n = param("N", 0);
  g.in = static_cast<isa::DType>(param("IN_DT", static_cast<int64_t>(isa::DType::BF16)));
  g.out = static_cast<isa::DType>(param("OUT_DT", static_cast<int64_t>(isa::DType::F32)));
  g.bias = param("BIAS", 0) != 0, g.relu = param("RELU", 0) != 0;
  g.scale_bits = static_cast<uint32_t>(param("SCALE", 0));
  g.dequant = param("DEQUANT", 0) != 0, g.q_scale_bits = static_cast<uint32_t>(param("Q_SCALE", 0));
  g.q_only = param("Q_ONLY", 0) != 0;
  g.b_tiled = param("B_TILED", 0) != 0, g.trans_b = param("TRANS_B", 0) != 0;
  g.group_n = param("GROUP_N", 0);
  g.residual = param("RESIDUAL", 0) != 0, g.residual_relu = param("RES_RELU", 0) != 0;
  g.taps = kernels::ConvTaps{param("TAP_CIN", 0), param("TAP_ROWS", 0), param("TAP_KW", 1), param("TAP_SH", 1),
                             param("TAP_SW", 1), param("TAP_DH", 1), param("TAP_DW", 1), param("TAP_WQ", 1),
                             param("TAP_PHASE_ROWS", 0), param("TAP_PITCH", 1)};
  if (param("ACT", 0) != 0) g.act = call.rows;
  g.c_rows = row_map_of(call);
  g.mxus = static_cast<int>(std::min<int64_t>(mxus, g.bias || g.dequant || g.residual || g.act ? 6 : 7));
  g.schedule = kernels::GemmSchedule::Tiles;
  g.multicast = true;  // pairs of cores share their tiles' operand where the chip multicasts (chip.cluster = 2)
  return g;
}

// A constant weight the lowering stored tile by tile for gemm.s (B_TILED: [cdiv(K, R), cdiv(N, C), R, C],
// zero-padded) that the program holds as [K, N] instead, where its call runs as the whole-chip GEMM.
struct Untiled {
  int64_t k = 0, n = 0;
};

// The whole-chip GEMMs whose tiled weights go as [K, N]: a constant read by its call alone, where the plan for that
// layout beats the tiled one's estimate. The layouts differ in what the plan may take: narrow strips (tiles of
// fewer than C columns, GemmChip::narrow_strips) only with b as rows, so that a GEMM of few output columns spreads
// over more cores (BERT-base's 128 x 3072 x 768 on h200-like in tiles of 32 x 32, not 8 x 128). The call's GEMM
// (on_chip) takes the layout; the results are the same bits.
std::map<int, Untiled> untile_weights(const KernelPlan& plan, const std::map<std::string, int64_t>& symbols,
                                      std::vector<OnChip>& on_chip) {
  std::map<int, Untiled> untiled;
  const BufferUse use = buffer_use(plan);
  for (size_t c = 0; c < plan.calls.size(); ++c) {
    std::optional<kernels::GemmChip>& g = on_chip[c].gemm;
    if (!g || !g->b_tiled) continue;
    const KernelCall& call = plan.calls[c];
    const auto b = call.tensors.find("b");
    if (b == call.tensors.end() || plan.buffers[b->second].kind != Buffer::Kind::Const) continue;
    const auto off = call.offsets.find("b");
    if ((off != call.offsets.end() && off->second != 0) || use.first[b->second] != use.last[b->second]) continue;
    kernels::GemmChip rows = *g;
    rows.b_tiled = false;
    try {
      if (kernels::gemm_chip_estimate(rows, symbols) >= kernels::gemm_chip_estimate(*g, symbols)) continue;
    } catch (const std::invalid_argument&) {
      continue;
    }
    g = rows;
    untiled[b->second] = Untiled{rows.k, rows.n};
  }
  return untiled;
}

// The bytes of tiled weight `b` as [K, N] (none where it has no values: a timing-only compile).
std::vector<uint8_t> untile(const Buffer& b, const Untiled& u, const std::map<std::string, int64_t>& symbols) {
  if (b.data.empty()) return {};
  const int64_t R = symbol_or(symbols, "MXU_ROWS", 1), C = symbol_or(symbols, "MXU_COLS", 1);
  const int64_t nt = (u.n + C - 1) / C;
  const auto es = static_cast<size_t>(isa::dtype_size(b.dtype));
  std::vector<uint8_t> plain(static_cast<size_t>(u.k * u.n) * es);
  for (int64_t i = 0; i < u.k; ++i)
    for (int64_t j = 0; j < u.n; ++j)
      std::memcpy(&plain[static_cast<size_t>(i * u.n + j) * es],
                  &b.data[static_cast<size_t>((((i / R) * nt + j / C) * R + i % R) * C + j % C) * es], es);
  return plain;
}

namespace {

// The weight stream, on a chip of one core whose VMEM keeps the intermediates (Options::vmem_intermediates): the
// part of VMEM they leave (`ring`, VMEM offsets) holds copies of later GEMMs' weights, which earlier kernels load
// from HBM in the background, while their own work leaves HBM idle, so that HBM moves the model's weights without
// waiting for the kernels that use them (a TPU's weights stream ahead into VMEM so). The planner walks the calls in
// program order, each giving the stream the bytes HBM could move in its estimated time beyond its own (a share of
// it, by producer, below), and hands them to the next weights in the order their GEMMs come, each placed whole in
// the ring after the one before (wrapping to its start): a weight is streamed only where the budgets before its
// GEMM can load all of it, and a part of the ring is reused only after the GEMM that read its last weight (the
// later loads follow that GEMM's in the one load queue, which completes and moves data in order). A GEMM whose
// weights are streamed reads them through the local window (isa::kLocalWindow), at VMEM's bandwidth, from after
// the stream's loads in the same queue. The producers: whole-chip GEMMs (GemmChip::background, a piece after each
// chunk's loads), row-wise kernels of one core (rowwise::Program::background, a piece after each tile's loads) and
// fused attentions (after their first item's loads and an area's, `areas`: AttentionChip::background). The same
// bits: each weight's bytes, copied. docs/compiler.md, "The weight stream", has the figures and what was tried.
// The share by producer: a GEMM's (kStreamShare), whose own loads queue with the stream's; a row-wise kernel's,
// all (its inputs are intermediates in VMEM, so HBM moves nothing of its own, and its estimate, its vector work, is
// below its run: BERT-base's LayerNorms on v6e, 720 cycles estimated, about 930 run); a fused attention's, 0.8
// (its estimate near its run: BERT-base's on v6e, 3,831 against 3,737; swept again with its loads in the
// background, docs/compiler.md, "The attention's items, two deep"). docs/compiler.md ("The weight stream") has
// the sweep.
constexpr double kStreamShare = 0.7, kRowwiseStreamShare = 1.0, kAttentionStreamShare = 0.8;

// dmain.sync wait=sem: the loads after it wait for the next streamed weight's background loads
isa::Word stream_wait_sync(int sem) {
  isa::Instr in{.op = isa::Op::DMAINSYNC};
  in.f[static_cast<size_t>(isa::describe(isa::Op::DMAINSYNC).operand_index("wait"))] = sem;
  return isa::encode(in);
}

// A row-wise kernel of one core whose input `i` reads a whole constant of the program in HBM that no other call
// reads, once over the kernel's rows (not a table repeated over them): that input's index, else -1.
int streamed_rows_input(const KernelPlan& plan, const KernelCall& call, const OnChip& oc, const BufferUse& use) {
  if (call.kind != KernelCall::Kind::Rowwise || oc.row_cores != 1 || oc.row_cut) return -1;
  const kernels::rowwise::Program& r = call.rows;
  for (size_t i = 0; i < r.inputs.size(); ++i) {
    const kernels::rowwise::Input& in = r.inputs[i];
    const int b = call.row_inputs[i];
    const Buffer& buf = plan.buffers[static_cast<size_t>(b)];
    if (buf.kind != Buffer::Kind::Const || call.row_input_offs[i] != 0 || in.per_row || in.period > 0 ||
        use.first[b] != use.last[b] || isa::far_memory(static_cast<int64_t>(buf.addr)) != isa::FarMemory::Hbm ||
        std::count(call.row_inputs.begin(), call.row_inputs.end(), b) != 1 ||
        buf.bytes() != static_cast<uint64_t>(r.rows * r.cols) * isa::dtype_size(in.dtype))
      continue;
    return static_cast<int>(i);
  }
  return -1;
}

// Returns the positions (in `order`) of the GEMMs whose GemmChip::prefetch holds the stream's loads (a tail).
std::set<size_t> stream_weights(KernelPlan& plan, const std::vector<size_t>& order, std::vector<OnChip>& on_chip,
                                const std::map<std::string, int64_t>& symbols, const std::map<int, Untiled>& untiled,
                                const std::map<size_t, std::vector<kernels::DmaLoad>>& areas, StreamRing ring,
                                int sem) {
  std::set<size_t> tails;
  const int64_t hbm = symbol_or(symbols, "HBM_BYTES_PER_CYCLE", 0);
  if (symbol_or(symbols, "CORES", 1) != 1 || hbm <= 0 || ring.end - ring.begin < (int64_t{1} << 20)) return tails;
  const BufferUse use = buffer_use(plan);
  std::map<std::string, int64_t> fast = symbols;
  fast["HBM_BYTES_PER_CYCLE"] = hbm * 16;
  // Each call's work, once: its estimated cycles (a whole-chip GEMM's at 16 times HBM's bandwidth, so that a GEMM
  // whose weights stream counts as the kernel it then is; a row-wise kernel's vector work; an attention's), its
  // own HBM bytes (a GEMM's tensors in HBM, each once: a convolution's taps read a in place; an
  // attention's area loads, plan_weight_areas, which come first), of those its b's (not its own where it streams),
  // and a whole-chip GEMM's tail (gemm_chip_tail; not where before_attention's loads take it). 0 cycles where an
  // estimate throws.
  struct Work {
    double cycles = 0, own = 0, b = 0, tail = 0;
  };
  std::vector<Work> work(order.size());
  for (size_t at = 0; at < order.size(); ++at) {
    const KernelCall& call = plan.calls[order[at]];
    const OnChip& oc = on_chip[order[at]];
    Work& w = work[at];
    w.own = call_bytes(plan, call, true);
    auto gemm_bytes = [&]() {  // a GEMM's tensors in HBM, each once, and of those its b's
      w.own = 0;
      for (const auto& [name, b] : call.tensors) {
        const Buffer& buf = plan.buffers[static_cast<size_t>(b)];
        if (isa::far_memory(static_cast<int64_t>(buf.addr)) != isa::FarMemory::Hbm) continue;
        w.own += static_cast<double>(buf.bytes());
        if (name == "b") w.b = static_cast<double>(buf.bytes());
      }
    };
    try {
      if (oc.gemm) {
        w.cycles = kernels::gemm_chip_estimate(*oc.gemm, fast);
        gemm_bytes();
        if (oc.gemm->prefetch.empty()) w.tail = kernels::gemm_chip_tail(*oc.gemm, symbols);
      } else if (oc.ksplit) {  // a producer too: the stream's loads follow its own (GemmKSplit::background)
        w.cycles = kernels::gemm_ksplit_plan(*oc.ksplit, fast).estimate;
        gemm_bytes();
      } else if (call.kind == KernelCall::Kind::Rowwise && oc.row_cores == 1) {
        w.cycles = rowwise_work(call.rows, kernels::rowwise::plan(call.rows, symbols), symbols);
      } else if (call.kind == KernelCall::Kind::Attention && !call.attention.vector_unit) {
        w.cycles = kernels::attention_chip_plan(call.attention, symbols).estimate;
        const auto area = areas.find(at);
        if (area != areas.end())
          for (const kernels::DmaLoad& l : area->second) w.own += static_cast<double>(l.rows * l.rowbytes);
      }
    } catch (const std::invalid_argument&) {
      w.cycles = w.tail = 0;
    }
  }
  // The weights that may stream: a whole-chip GEMM's constant b, read by that call alone, where the GEMM waits for
  // its weights (its estimate with them from HBM above its estimate at 16 times HBM's bandwidth by a twentieth: a
  // GEMM whose matrix work hides its loads gains little from the stream, which costs the kernels before it); the
  // others' (`hidden`) only where the budgets spare them (below)
  struct Weight {
    size_t at = 0;  // its GEMM's position
    int buffer = -1;
    int64_t bytes = 0, loaded = 0, vaddr = -1;
    int input = -1;  // a row-wise kernel's: the input that reads it (else a GEMM's b)
    bool hidden = false;  // a GEMM's whose matrix work hides its loads, by its estimate (below)
  };
  // A split-K GEMM (split_k_gemm) streams its weights too, where its estimate with them from HBM is above that at
  // 16 times HBM's bandwidth by a twentieth (and, as a producer, loads later ones after its own loads).
  std::vector<Weight> weights;
  std::vector<Weight> hidden;  // whole-chip GEMMs' weights that their matrix work hides, by that estimate
  for (size_t at = 0; at < order.size(); ++at) {
    const KernelCall& call = plan.calls[order[at]];
    const std::optional<kernels::GemmChip>& g = on_chip[order[at]].gemm;
    const std::optional<kernels::GemmKSplit>& ks = on_chip[order[at]].ksplit;
    if (ks && constant_weights(plan, call)) {
      const int b = call.tensors.at("b");
      const auto off = call.offsets.find("b");
      const int64_t bytes = static_cast<int64_t>(plan.buffers[static_cast<size_t>(b)].bytes());
      if ((off != call.offsets.end() && off->second != 0) || use.first[b] != use.last[b] || bytes <= 0 ||
          (bytes + 4095) / 4096 * 4096 > ring.end - ring.begin)
        continue;
      try {
        if (kernels::gemm_ksplit_plan(*ks, symbols).estimate >= 1.05 * kernels::gemm_ksplit_plan(*ks, fast).estimate)
          weights.push_back({at, b, bytes, 0, -1, -1});
      } catch (const std::invalid_argument&) {
      }
      continue;
    }
    if (const int in = streamed_rows_input(plan, call, on_chip[order[at]], use); in >= 0) {
      // A row-wise kernel's matrix of constants (a GEMV's weights as rows: "Weights as rows where narrow tiles
      // win"), where their loads take longer than its vector work by a twentieth
      const int b = call.row_inputs[static_cast<size_t>(in)];
      const int64_t bytes = static_cast<int64_t>(plan.buffers[static_cast<size_t>(b)].bytes());
      work[at].b = static_cast<double>(bytes);
      if ((bytes + 4095) / 4096 * 4096 <= ring.end - ring.begin &&
          work[at].own >= 1.05 * work[at].cycles * static_cast<double>(hbm))
        weights.push_back({at, b, bytes, 0, -1, in});
      continue;
    }
    if (!g || !constant_weights(plan, call) || g->b_area_chunks > 0 || g->b_preloaded || work[at].cycles <= 0)
      continue;
    const int b = call.tensors.at("b");
    const auto off = call.offsets.find("b");
    if ((off != call.offsets.end() && off->second != 0) || use.first[b] != use.last[b]) continue;
    const auto u = untiled.find(b);
    const Buffer& buf = plan.buffers[static_cast<size_t>(b)];
    const int64_t bytes = u != untiled.end() ? u->second.k * u->second.n * isa::dtype_size(buf.dtype)
                                             : static_cast<int64_t>(buf.bytes());
    const int64_t placed = (bytes + 4095) / 4096 * 4096;
    if (bytes <= 0 || placed > ring.end - ring.begin) continue;
    try {
      if (kernels::gemm_chip_estimate(*g, symbols) < 1.05 * work[at].cycles) {
        hidden.push_back({at, b, bytes, 0, -1, -1, true});
        continue;
      }
    } catch (const std::invalid_argument&) {
      continue;
    }
    weights.push_back({at, b, bytes, 0, -1, -1});
  }
  if (weights.empty() && hidden.empty()) return tails;
  // The producers' slots, in program order: each call's budget, its share of HBM's bytes in its estimated time less
  // its own bytes (a GEMM whose weights stream, `assumed`, without its b), spread over its work; then a whole-chip
  // GEMM's tail (GemmChip::prefetch: after its last tile's loads, while its last chunk's products and its drain run)
  struct Slot {
    size_t at;
    bool tail;
    int64_t bytes;
  };
  auto budgets = [&](const std::set<size_t>& assumed) {
    std::vector<Slot> slots;
    for (size_t at = 0; at < order.size(); ++at) {
      const Work& w = work[at];
      const OnChip& oc = on_chip[order[at]];
      const KernelCall::Kind kind = plan.calls[order[at]].kind;
      const double share = (oc.gemm || oc.ksplit               ? kStreamShare
                            : kind == KernelCall::Kind::Rowwise ? kRowwiseStreamShare
                                                                : kAttentionStreamShare) *
                           static_cast<double>(hbm);
      const double own = w.own - (assumed.count(at) ? w.b : 0.0);
      slots.push_back({at, false, static_cast<int64_t>(std::max(0.0, share * w.cycles - own)) / 64 * 64});
      if (w.tail > 0) slots.push_back({at, true, static_cast<int64_t>(share * w.tail) / 64 * 64});
    }
    return slots;
  };
  // Hand the budgets out in order
  struct Held {
    int64_t begin, end;
    size_t until;  // the position of the GEMM that reads it
  };
  std::map<std::pair<size_t, bool>, std::vector<kernels::DmaLoad>> loads;  // by slot: (position, tail)
  std::vector<std::vector<std::pair<std::pair<size_t, bool>, size_t>>> runs;  // per weight: its loads (slot, index)
  auto hand_out = [&](const std::vector<Slot>& slots) {
    for (Weight& w : weights) w.loaded = 0, w.vaddr = -1;
    loads.clear();
    runs.assign(weights.size(), {});
    std::vector<Held> held;
    int64_t head = ring.begin;
    size_t next = 0;
    for (size_t i = 0; i < slots.size() && next < weights.size(); ++i) {
      const size_t at = slots[i].at;
      int64_t left = slots[i].bytes;
      while (left > 0 && next < weights.size()) {
        Weight& w = weights[next];
        if (w.at <= at) {  // too late: its GEMM reads it from HBM
          ++next;
          continue;
        }
        // a hidden weight from a GEMM's or an attention's budget only: a row-wise kernel's estimate, its vector
        // work, is below its run, and what it loads beyond it delays the kernels after it (BERT-base on v4-like,
        // its LayerNorms loading the QKV projections' weights: 13,712 -> 19,168 cycles in all)
        if (w.hidden && plan.calls[order[at]].kind == KernelCall::Kind::Rowwise) break;
        if (w.vaddr < 0) {
          int64_t can = left;  // what the calls before its GEMM can load (the first go to it)
          for (size_t j = i + 1; j < slots.size() && slots[j].at < w.at && can < w.bytes; ++j) can += slots[j].bytes;
          if (can < w.bytes) {
            ++next;
            continue;
          }
          const int64_t size = (w.bytes + 4095) / 4096 * 4096;
          const int64_t p = head + size <= ring.end ? head : ring.begin;
          std::erase_if(held, [&](const Held& h) { return h.until < at; });
          const bool free = std::none_of(held.begin(), held.end(),
                                         [&](const Held& h) { return h.begin < p + size && p < h.end; });
          if (!free) break;  // wait for a later call: the GEMMs that read this part of the ring have not run yet
          w.vaddr = p, head = p + size;
          held.push_back({p, p + size, w.at});
        }
        const int64_t n = std::min(left, w.bytes - w.loaded);
        const uint64_t haddr = plan.buffers[static_cast<size_t>(w.buffer)].addr + static_cast<uint64_t>(w.loaded);
        std::vector<kernels::DmaLoad>& l = loads[{at, slots[i].tail}];
        runs[next].push_back({{at, slots[i].tail}, l.size()});
        l.push_back({w.vaddr + w.loaded, static_cast<int64_t>(haddr), 1, n, 0, 0});
        w.loaded += n, left -= n;
        if (w.loaded == w.bytes) ++next;
      }
    }
    std::set<size_t> staged;
    for (const Weight& w : weights)
      if (w.vaddr >= 0 && w.loaded == w.bytes) staged.insert(w.at);
    return staged;
  };
  // From every weight streamed to those the budgets then stream, until the two agree (fewer each time)
  auto settle = [&] {
    std::set<size_t> assumed;
    for (const Weight& w : weights) assumed.insert(w.at);
    for (int i = 0; i < 8; ++i) {
      const std::set<size_t> staged = hand_out(budgets(assumed));
      if (staged == assumed) break;
      assumed = staged;
    }
    return assumed;
  };
  std::set<size_t> assumed = settle();
  // Where the budgets stream every weight that waits, the hidden ones too, in their GEMMs' order, if every weight
  // that waits still streams then: a GEMM reads VMEM sooner than HBM whatever its estimate says (the estimate counts
  // a chunk's load as its bytes at HBM's rate, less than its run where HBM is fast: GPT-2 prefill on v5e at
  // 9600 GB/s, each FFN's first GEMM about 7,300 cycles streamed at 2400 GB/s and 9,600 from HBM at 9600, the
  // model 454,652 cycles against 408,723 at 2400; with this, 414,492)
  if (!hidden.empty() && assumed.size() == weights.size()) {
    const std::set<size_t> waiting = assumed;
    const std::vector<Weight> before = weights;
    weights.insert(weights.end(), hidden.begin(), hidden.end());
    std::sort(weights.begin(), weights.end(), [](const Weight& x, const Weight& y) { return x.at < y.at; });
    assumed = settle();
    if (!std::includes(assumed.begin(), assumed.end(), waiting.begin(), waiting.end())) {
      weights = before;
      assumed = settle();
    }
  }
  if (weights.empty()) return tails;
  hand_out(budgets(assumed));
  // Every load is a background load (dma.ld bg: a whole-chip GEMM's, a split-K GEMM's or a row-wise kernel's
  // pieces, a whole-chip GEMM's tail, an attention's loads): each weight's last signals `sem`, which the GEMM that
  // reads it waits for (stream_wait). The background loads complete in the order they are issued, the weights'
  // order, which is the order of their GEMMs, so the n-th signal is the n-th such GEMM's.
  for (size_t i = 0; i < weights.size(); ++i) {
    const Weight& w = weights[i];
    if (w.vaddr < 0 || w.loaded < w.bytes || runs[i].empty()) continue;
    loads[runs[i].back().first][runs[i].back().second].signal = sem;
    plan.calls[order[w.at]].stream_wait = sem;
  }
  // The producers' loads, the consumers' addresses
  std::map<size_t, int64_t> streamed;  // bytes by producer
  for (auto& [slot, l] : loads) {
    const size_t c = order[slot.first];
    for (const kernels::DmaLoad& d : l) streamed[slot.first] += d.rowbytes;
    if (slot.second) {  // a tail's loads in the background too: the kernels after it do not wait for them
      on_chip[c].gemm->prefetch = l, tails.insert(slot.first);
      for (kernels::DmaLoad& d : on_chip[c].gemm->prefetch) d.bg = true;
    } else if (on_chip[c].gemm)
      on_chip[c].gemm->background = l;
    else if (on_chip[c].ksplit)
      on_chip[c].ksplit->background = l;
    else if (plan.calls[c].kind == KernelCall::Kind::Rowwise)
      plan.calls[c].rows.background = l;
    else
      plan.calls[c].attention.background = l;
  }
  for (const auto& [at, bytes] : streamed) {
    KernelCall& call = plan.calls[order[at]];
    call.note = (call.note.empty() ? "" : call.note + "; ") + "streams " + std::to_string(bytes) +
                " bytes of later GEMMs' weights into VMEM while it computes";
  }
  for (const Weight& w : weights) {
    if (w.vaddr < 0 || w.loaded < w.bytes) continue;
    KernelCall& call = plan.calls[order[w.at]];
    const uint64_t local = isa::kLocalWindow + static_cast<uint64_t>(w.vaddr);
    const uint64_t off = local - plan.buffers[static_cast<size_t>(w.buffer)].addr;  // (modulo 2^64)
    if (w.input >= 0)
      call.row_input_offs[static_cast<size_t>(w.input)] = off;
    else
      call.offsets["b"] = off;
    call.note = (call.note.empty() ? "" : call.note + "; ") + "its weights read from VMEM (streamed in before it)";
  }
  return tails;
}

// Graph outputs written while a later kernel runs (a chip of one core whose VMEM keeps the intermediates). The
// lowering casts each output held as bf16 to its f32 buffer after the last node (merge_casts: one Cast call); each
// such tensor whose value lies in VMEM is instead cast and stored while the first kernel after its producer (the
// last kernel before the cast that may write it: may_write) runs that is not a copy or a cast (`z`): the vector unit casts it from where it lies into a staging area at the end of
// the weight stream's ring (which gives those bytes up) and dmaout stores it to HBM, with no fence between those
// instructions and the kernel's, so that HBM takes the output's bytes while that kernel leaves it idle (a GPT-2's
// present keys and values while the fused attention runs) rather than at the end of the program, one after the
// other. What keeps them apart: the kernel's leading sem.sets (each waits for every unit) come before the cast's
// instructions; the cast's one semaphore is one the kernel does not use; the kernel's VMEM is not the staging area;
// the source stays where it is to the end of the program (its buffer was planned live to the original cast) and
// the output buffer is the cast's alone; the fence or drain before the kernel after `z` waits for the stores. Where `z`
// turns out unable to take them (a kernel of an overlapped pair, one that does not start with sem.set or uses every
// semaphore), the next kernel that can takes them, and where none can, they run as a kernel of their own at the end
// of the program. Only where the staging fits in a quarter of the ring. The same bits: the same vpu.cast per
// element (validation/system/test_ops.py, MatMul.test_outputs_are_written_while_later_kernels_run).
struct EarlyCast {
  kernels::CastPart part;  // src: the VMEM address (not the far one); dst: the output's address
  isa::DType from = isa::DType::BF16, to = isa::DType::F32;
  int64_t stage = 0;       // its own staging bytes' VMEM address
  std::string label;       // the cast call's
  // On a chip of several cores (place_output_moves): the core that casts it, and the transfers that first bring
  // its source into VMEM at part.src (the moves of the copy that made it, from where that copy read); stage_only:
  // those loads alone (the cast and the store come with a later kernel, after a barrier)
  int core = -1;
  std::vector<kernels::DmaLoad> loads;
  bool stage_only = false;
};
// By call index (plan.calls): the casts that run with that kernel, or, where it cannot take them, with a later one
using EarlyCasts = std::map<size_t, std::vector<EarlyCast>>;

// Whether `call` may write buffer `buf`: a copy's destinations, a row-wise kernel's outputs, an attention's o, a
// cast's outputs exactly; any other buffer a library kernel touches, as if it wrote it.
bool may_write(const KernelCall& call, int buf) {
  switch (call.kind) {
    case KernelCall::Kind::Copy:
      return std::any_of(call.moves.begin(), call.moves.end(), [&](const BufferMove& m) { return m.dst == buf; });
    case KernelCall::Kind::Rowwise:
      return std::find(call.row_outputs.begin(), call.row_outputs.end(), buf) != call.row_outputs.end();
    case KernelCall::Kind::Cast:
      return std::any_of(call.casts.begin(), call.casts.end(), [&](const BufferCast& c) { return c.dst == buf; });
    case KernelCall::Kind::Attention: {
      const auto o = call.tensors.find("o");
      return o != call.tensors.end() && o->second == buf;
    }
    case KernelCall::Kind::Library:
      break;
  }
  for (const auto& [name, b] : call.tensors)
    if (b == buf && !(call.kernel == "cast.s" && name == "x")) return true;
  return false;
}

EarlyCasts place_output_casts(KernelPlan& plan, std::vector<size_t>& order, StreamRing& ring) {
  EarlyCasts e;
  if (ring.end - ring.begin < (int64_t{1} << 20)) return e;
  const BufferUse use = buffer_use(plan);
  auto is_cast = [](const KernelCall& c) {
    return c.kind == KernelCall::Kind::Cast ||
           (c.kind == KernelCall::Kind::Library && c.kernel == "cast.s" && param_or(c, "SCALE", 0) == 0);
  };
  std::vector<size_t> keep;
  std::map<size_t, std::vector<EarlyCast>> found;  // by call index of z
  for (size_t at = 0; at < order.size(); ++at) {
    const size_t c = order[at];
    KernelCall& call = plan.calls[c];
    if (!is_cast(call)) {
      keep.push_back(c);
      continue;
    }
    std::vector<BufferCast> parts = call.casts;
    if (call.kind == KernelCall::Kind::Library) {
      auto off = [&](const char* name) { return call.offsets.count(name) ? call.offsets.at(name) : uint64_t{0}; };
      parts = {BufferCast{call.tensors.at("x"), call.tensors.at("y"), off("x"), off("y"), param_or(call, "N", 0),
                          call.label}};
    }
    const auto from = static_cast<isa::DType>(param_or(call, "SDT", 0)), to = static_cast<isa::DType>(param_or(call, "DDT", 0));
    std::vector<BufferCast> stay;
    for (const BufferCast& b : parts) {
      const uint64_t src = plan.buffers[static_cast<size_t>(b.src)].addr + b.src_off;
      const bool alone = use.first[b.dst] == static_cast<int64_t>(c) && use.last[b.dst] == static_cast<int64_t>(c);
      // its producer: the last kernel before the cast that writes the source (readers may run beside the cast)
      size_t z = order.size();
      if (alone && b.n > 0 && isa::far_memory(static_cast<int64_t>(src)) == isa::FarMemory::Local)
        for (size_t q = at; q-- > 0;) {
          if (!may_write(plan.calls[order[q]], b.src)) continue;
          for (size_t r = q + 1; r < at && z == order.size(); ++r)
            if (plan.calls[order[r]].kind != KernelCall::Kind::Copy && !is_cast(plan.calls[order[r]])) z = r;
          break;
        }
      if (z == order.size()) {
        stay.push_back(b);
        continue;
      }
      EarlyCast x;
      x.part = {src - isa::kLocalWindow, plan.buffers[static_cast<size_t>(b.dst)].addr + b.dst_off, b.n};
      x.from = from, x.to = to, x.label = b.label.empty() ? call.label : b.label;
      found[order[z]].push_back(x);
    }
    if (stay.size() == parts.size()) {
      keep.push_back(c);
    } else if (!stay.empty()) {  // a Cast call keeps the rest
      set_casts(call, std::move(stay));
      keep.push_back(c);
    }
  }
  if (found.empty()) return e;
  // Each its own staging bytes at the ring's end, which gives them up
  int64_t staging = 0;
  for (const auto& [z, casts] : found)
    for (const EarlyCast& x : casts) staging += (x.part.n * static_cast<int64_t>(isa::dtype_size(x.to)) + 63) / 64 * 64;
  staging = (staging + 4095) / 4096 * 4096;
  if (staging > (ring.end - ring.begin) / 4) return e;  // order untouched: the casts stay where they were
  order = keep;
  ring.end -= staging;
  int64_t at = ring.end;
  for (auto& [z, casts] : found)
    for (EarlyCast& x : casts) x.stage = at, at += (x.part.n * static_cast<int64_t>(isa::dtype_size(x.to)) + 63) / 64 * 64;
  return found;
}

// Graph outputs written while later kernels run, on a chip of several cores (where the intermediates are in the
// shared memory and no kernel is of one core alone: v4). A graph output cast from a value that a copy made from
// another (GPT-2's present keys and values: a Transpose of the QKV projection's output, then a Cast to f32), the
// value read by nothing else, is written around the first whole-chip fused attention after the copy that reads the
// copy's source too, on one of the cores (each tensor the next core): the copy's moves as background loads from
// where the copy read into VMEM past the kernels' own, issued after the attention's own work (the barrier after it
// waits for them), then a vpu.cast and a dma.st of the output after the leading sem.sets of a whole-chip row-wise
// kernel of the two after the attention (a LayerNorm, which leaves HBM and the store queue idle:
// early_cast_body). HBM took those outputs' bytes at the end of the program, one cast after the other, and the
// copies took a kernel each. Where no such row-wise kernel follows, the loads go in a block of their own before
// the attention and the attention casts and stores (its matrix-unit kernel has one semaphore to spare, for the
// store to wait for the cast: a cast waiting for loads in the same kernel would need a second). The copy and the
// cast leave `order`.
struct OutputMove {
  size_t loads_in = 0, cast_in = 0;  // the attention and the kernel that casts (call indices; the same: see above)
  EarlyCast x;                       // its VMEM addresses (part.src, stage) relative to the staging's start
  int64_t bytes = 0;                 // staging bytes
};
std::vector<OutputMove> place_output_moves(const KernelPlan& plan, std::vector<size_t>& order,
                                           const std::vector<OnChip>& on_chip, const std::map<std::string, int64_t>& symbols) {
  std::vector<OutputMove> out;
  const int64_t cores = symbol_or(symbols, "CORES", 1);
  const BufferUse use = buffer_use(plan);
  auto reads = [](const KernelCall& k, int b) {
    for (const auto& [name, x] : k.tensors)
      if (x == b) return true;
    return false;
  };
  std::map<std::pair<size_t, int>, int64_t> staged;  // by attention (call index) and core: staging bytes used
  std::map<size_t, int64_t> taken;                   // by attention: the tensors given to it so far
  std::set<size_t> gone;                             // positions in `order` that leave it
  for (size_t at = 0; at < order.size(); ++at) {
    const KernelCall& cast = plan.calls[order[at]];
    if (cast.kind != KernelCall::Kind::Library || cast.kernel != "cast.s" || param_or(cast, "SCALE", 0) != 0) continue;
    const int d = cast.tensors.at("x"), o = cast.tensors.at("y");
    const int64_t n = param_or(cast, "N", 0);
    auto off = [&](const char* name) { return cast.offsets.count(name) ? cast.offsets.at(name) : uint64_t{0}; };
    const auto from = static_cast<isa::DType>(param_or(cast, "SDT", 0)), to = static_cast<isa::DType>(param_or(cast, "DDT", 0));
    const uint64_t in_bytes = static_cast<uint64_t>(n) * isa::dtype_size(from);
    if (n <= 0 || use.first[o] != static_cast<int64_t>(order[at]) || use.last[o] != static_cast<int64_t>(order[at]) ||
        use.last[d] != static_cast<int64_t>(order[at]))
      continue;
    // the copy that made d: the last call before the cast that touches it, which writes d alone, from one buffer
    size_t q = at;
    while (q-- > 0 && !reads(plan.calls[order[q]], d)) {}
    if (q >= at || gone.count(q)) continue;
    const KernelCall& copy = plan.calls[order[q]];
    if (copy.kind != KernelCall::Kind::Copy || copy.moves.empty() || use.first[d] != static_cast<int64_t>(order[q]))
      continue;
    const int src = copy.moves.front().src;
    bool ok = plan.buffers[static_cast<size_t>(src)].kind != Buffer::Kind::Const;
    for (const BufferMove& m : copy.moves)
      ok = ok && m.src == src && m.dst == d && m.dst_off >= off("x") && m.rows > 0 &&
           m.dst_off - off("x") + (m.rows - 1) * static_cast<uint64_t>(m.dst_stride) + m.rowbytes <= in_bytes;
    if (!ok) continue;
    // the first whole-chip attention after the copy that reads the copy's source, and a whole-chip GEMM after it
    size_t z = q + 1;
    while (z < order.size() && !(plan.calls[order[z]].kind == KernelCall::Kind::Attention &&
                                 on_chip[order[z]].every_core() && reads(plan.calls[order[z]], src)))
      ++z;
    if (z >= at) continue;
    // the kernel that casts and stores: a whole-chip row-wise kernel (a LayerNorm, which leaves HBM and its store
    // queue idle) of the two after the attention, with no other kind of kernel before it, else the attention
    size_t w = z;
    for (size_t y = z + 1; y <= z + 2 && y < at && w == z; ++y) {
      if (gone.count(y) || !on_chip[order[y]].every_core()) break;
      if (plan.calls[order[y]].kind == KernelCall::Kind::Rowwise) w = y;
    }
    const size_t zc = order[z];
    OutputMove m;
    m.loads_in = zc, m.cast_in = order[w];
    const int core = static_cast<int>(taken[zc] % cores);
    int64_t& used_here = staged[{zc, core}];
    m.bytes = static_cast<int64_t>((in_bytes + 63) / 64 * 64 + (static_cast<uint64_t>(n) * isa::dtype_size(to) + 63) / 64 * 64);
    if (used_here + m.bytes > symbol_or(symbols, "VMEM_BYTES", 0)) continue;  // not even alone (h200-like's 228 KB)
    ++taken[zc];
    EarlyCast& x = m.x;
    x.part = {static_cast<uint64_t>(used_here), plan.buffers[static_cast<size_t>(o)].addr + off("y"), n};
    x.from = from, x.to = to, x.label = cast.label, x.core = core;
    x.stage = used_here + static_cast<int64_t>((in_bytes + 63) / 64 * 64);
    for (const BufferMove& mv : copy.moves)
      x.loads.push_back(kernels::DmaLoad{used_here + static_cast<int64_t>(mv.dst_off - off("x")),
                                         static_cast<int64_t>(plan.buffers[static_cast<size_t>(src)].addr + mv.src_off),
                                         static_cast<int64_t>(mv.rows), static_cast<int64_t>(mv.rowbytes), mv.src_stride,
                                         mv.dst_stride});
    used_here += m.bytes;
    out.push_back(std::move(m));
    gone.insert(q), gone.insert(at);
  }
  std::vector<size_t> keep;
  for (size_t at = 0; at < order.size(); ++at)
    if (!gone.count(at)) keep.push_back(order[at]);
  order = keep;
  return out;
}

// The output moves' staging placed in VMEM past the own of every kernel from the attention to the one that casts,
// below the VMEM each is given (call_symbols: a weight area may take the top half): the loads with the attention
// (`early`), or in a block before it where it casts them too (`before`), the casts with their kernel (`early`).
// Where they do not fit, loads and casts in a block of their own after the attention (`after`: staged from VMEM's
// start, which no kernel uses then).
void stage_output_moves(std::vector<OutputMove>& moves, const KernelPlan& plan, const std::vector<size_t>& order,
                        const std::vector<OnChip>& on_chip,
                        const std::vector<std::map<std::string, int64_t>>& call_symbols, EarlyCasts& early,
                        EarlyCasts& before, EarlyCasts& after) {
  std::map<size_t, int64_t> need;  // by attention: the most staging bytes one core takes
  std::map<std::pair<size_t, int>, int64_t> per_core;
  for (const OutputMove& m : moves) need[m.loads_in] = std::max(need[m.loads_in], per_core[{m.loads_in, m.x.core}] += m.bytes);
  auto pos = [&](size_t call) { return static_cast<size_t>(std::find(order.begin(), order.end(), call) - order.begin()); };
  // the VMEM a whole-chip kernel uses from 0 (an attention, a GEMM, a row-wise kernel), else -1 (not known)
  auto vmem_end = [&](size_t at) -> int64_t {
    const KernelCall& k = plan.calls[order[at]];
    const OnChip& oc = on_chip[order[at]];
    const std::map<std::string, int64_t>& sy = call_symbols[at];
    if (k.kind == KernelCall::Kind::Attention) return kernels::attention_chip_plan(k.attention, sy).vmem_end;
    if (oc.gemm) return kernels::gemm_chip_vmem_end(*oc.gemm, sy);
    if (k.kind == KernelCall::Kind::Rowwise && oc.row_cores > 1) {
      kernels::rowwise::Program rows = oc.row_cut ? rows_for_cores(k.rows, sy) : k.rows;
      rows.cores = oc.row_cores;
      return static_cast<int64_t>(rows.vmem_base + kernels::rowwise::plan(rows, sy).vmem_used);
    }
    return -1;
  };
  for (OutputMove& m : moves) {
    const size_t za = pos(m.loads_in), zb = pos(m.cast_in);
    int64_t base = za <= zb && zb < order.size() ? 0 : -1, room = std::numeric_limits<int64_t>::max();
    for (size_t y = za; base >= 0 && y <= zb; ++y) {
      const int64_t e = vmem_end(y);
      base = e < 0 ? -1 : std::max(base, (e + 4095) / 4096 * 4096);
      room = std::min(room, symbol_or(call_symbols[y], "VMEM_BYTES", 0));
    }
    const bool fits = base >= 0 && base + need[m.loads_in] <= room;
    EarlyCast x = m.x;
    const int64_t shift = fits ? base : 0;
    x.part.src += static_cast<uint64_t>(shift), x.stage += shift;
    for (kernels::DmaLoad& l : x.loads) l.vaddr += shift;
    if (!fits) {
      after[m.loads_in].push_back(std::move(x));
      continue;
    }
    EarlyCast loads = x, cast = x;
    loads.stage_only = true;
    cast.loads.clear();
    (m.cast_in != m.loads_in ? early : before)[m.loads_in].push_back(std::move(loads));
    early[m.cast_in].push_back(std::move(cast));
  }
}

// Every halt of `frag` made a jump to `at` (code appended after the kernel that every path through it runs).
void halts_jump_to(isa::Program& frag, uint64_t at) {
  for (isa::Word& w : frag.code)
    if (isa::decode(w).op == isa::Op::HALT) {
      isa::Instr jump{.op = isa::Op::JMP};
      jump.f[0] = static_cast<int64_t>(at);
      w = isa::encode(jump);
    }
}

// The early casts' nodes, each once, in order, for notes
std::string early_labels(const std::vector<EarlyCast>& casts) {
  std::string labels;
  std::set<std::string> seen;
  for (const EarlyCast& e : casts)
    if (seen.insert(e.label).second) labels += (labels.empty() ? "" : ", ") + e.label;
  return labels;
}

// The early casts' instructions, from `base_pc`: each tensor cast from its VMEM address into its staging bytes,
// then stored, the store waiting for its cast through semaphore `sem` (set to 0 before, by the caller). Casts of a
// core (EarlyCast::core, several cores) run on it alone (core.id), their sources first loaded into VMEM by
// background loads where they have loads (the kernel's own loads do not wait for them): with stage_only, those
// loads alone, else the last signals `loaded` (also set to 0 before), for which the cast waits.
isa::Program early_cast_body(const std::vector<EarlyCast>& casts, int sem, int loaded, uint64_t base_pc) {
  isa::Emitter e("early_casts", "<codegen>/early_casts", base_pc);
  const isa::Reg vy = isa::reg(1), vx = isa::reg(2), n = isa::reg(3), dst = isa::reg(4), bytes = isa::reg(5),
                 one = isa::reg(6), id = isa::reg(7), who = isa::reg(8), zero = isa::reg(0);
  e.li(one, 1);
  std::set<int> cores;
  for (const EarlyCast& c : casts) cores.insert(c.core);
  for (int core : cores) {
    const isa::Label next = e.label();
    if (core >= 0) e.core_id(id), e.li(who, core), e.bne(id, who, next);
    for (const EarlyCast& c : casts) {
      if (c.core != core) continue;
      for (size_t i = 0; i < c.loads.size(); ++i) {
        const kernels::DmaLoad& l = c.loads[i];
        e.li(vy, l.vaddr), e.li(vx, l.haddr), e.li(n, l.rows), e.li(bytes, l.rowbytes), e.li(dst, l.hstride);
        e.li(who, l.vstride);
        isa::DmaLdOptions o{.bg = true};
        if (i + 1 == c.loads.size() && !c.stage_only) o.signal = isa::sem(loaded);
        e.dma_ld(vy, vx, n, bytes, dst, who, o);
      }
      if (c.stage_only) continue;
      const int64_t out = c.part.n * static_cast<int64_t>(isa::dtype_size(c.to));
      e.li(vy, c.stage), e.li(vx, static_cast<int64_t>(c.part.src)), e.li(n, c.part.n);
      isa::VpuCastOptions co{.signal = isa::sem(sem)};
      if (!c.loads.empty()) co.wait = isa::sem(loaded);
      e.vpu_cast(vy, vx, n, zero, c.from, c.to, co);
      e.li(dst, static_cast<int64_t>(c.part.dst)), e.li(bytes, out);
      e.dma_st(dst, vy, one, bytes, bytes, bytes, {.wait = isa::sem(sem)});
    }
    e.bind(next);
  }
  return e.finish();
}

// A block of early casts of their own at the end of `p` (after the kernels before them: a barrier on a chip of
// several cores), semaphores 1 and 2 for the casts and their loads (none for loads alone, stage_only).
void emit_early_block(isa::Program& p, const std::vector<EarlyCast>& casts, bool spmd) {
  const std::string labels = early_labels(casts);
  const auto begin = static_cast<uint32_t>(p.code.size());
  if (spmd) {  // every core's kernels done (the casts' sources among their results)
    p.code.push_back(isa::encode(isa::Instr{.op = isa::Op::BARRIER}));
    p.source.push_back(labels + ": barrier before the graph outputs' casts");
  }
  const bool loads = std::any_of(casts.begin(), casts.end(), [](const EarlyCast& x) { return !x.loads.empty(); });
  const bool any_cast = std::any_of(casts.begin(), casts.end(), [](const EarlyCast& x) { return !x.stage_only; });
  for (int s : {1, 2}) {
    if (!any_cast || (s == 2 && !loads)) continue;
    isa::Instr set{.op = isa::Op::SEMSET};
    set.f[0] = s;
    p.code.push_back(isa::encode(set));
    p.source.push_back(labels + (s == 1 ? ": the graph outputs' semaphore" : ": their loads' semaphore"));
  }
  const isa::Program body = early_cast_body(casts, 1, 2, p.code.size());
  for (size_t i = 0; i < body.code.size(); ++i) {
    p.code.push_back(body.code[i]);
    p.source.push_back(labels + ": " + body.source[i]);
  }
  p.regions.push_back(isa::Region{isa::kRegionNode, labels, begin, static_cast<uint32_t>(p.code.size())});
  p.regions.push_back(isa::Region{isa::kRegionKernel, "early_casts", begin, static_cast<uint32_t>(p.code.size())});
}

}  // namespace

isa::Program emit_program(KernelPlan& plan, const std::map<std::string, int64_t>& symbols,
                          const std::string& program_name, bool overlap_kernels, StreamRing ring) {
  isa::Program p;
  p.name = program_name;

  // On a chip of several cores where some kernel is spread (a whole-chip GEMM, a row-wise kernel whose rows the
  // cores share), the program runs on all of them (SPMD): spread kernels share the work, every other kernel runs
  // on core 0 (the others jump over it: core.id, bne) or, in a group of independent calls, on its own core; a
  // barrier comes before and after each spread kernel and each group (it also waits for this core's units, as the
  // fence between kernels on one core does).
  const int64_t chip_cores = symbol_or(symbols, "CORES", 1);
  std::vector<OnChip> on_chip;
  bool spread = false;
  for (const KernelCall& call : plan.calls) {
    OnChip o;
    o.gemm = whole_chip_gemm(call, symbols, o.why);
    o.ksplit = split_k_gemm(plan, call, symbols, o.gemm,
                            overlap_kernels && chip_cores == 1 && ring.end > ring.begin && constant_weights(plan, call),
                            o.why);
    if (o.ksplit && o.gemm) {
      o.why = "its K split over one core's matrix units beats the whole chip's estimate";
      o.gemm.reset();
    }
    o.row_cores = rowwise_cores(call, call.rows, call_bytes(plan, call), symbols, o.why);
    if (call.kind == KernelCall::Kind::Rowwise && o.row_cores == 1) {  // too few rows: cut into more, if it can be
      const kernels::rowwise::Program cut = rows_for_cores(call.rows, symbols);
      std::string why_cut;
      if (cut.rows != call.rows.rows && rowwise_cores(call, cut, call_bytes(plan, call), symbols, why_cut) > 1)
        o.row_cores = symbol_or(symbols, "CORES", 1), o.row_cut = true, o.why.clear();
    }
    if (call.kind == KernelCall::Kind::Copy) o.copy_cores = copy_cores(moves_of(plan, call), call, symbols, o.why);
    o.lib_cores = library_cores(call, symbols, o.why);
    o.attention = call.kind == KernelCall::Kind::Attention;
    if (o.why.empty()) o.why = "there is no whole-chip version of " + call.kernel;
    on_chip.push_back(std::move(o));
  }
  const std::map<int, Untiled> untiled = untile_weights(plan, symbols, on_chip);
  for (Buffer::Kind kind : {Buffer::Kind::Input, Buffer::Kind::Output, Buffer::Kind::Const})
    for (size_t i = 0; i < plan.buffers.size(); ++i) {
      const Buffer& b = plan.buffers[i];
      if (b.kind != kind) continue;
      isa::TensorDecl t{.name = b.name, .kind = kind_of(kind), .dtype = b.dtype, .shape = b.shape, .addr = b.addr};
      if (kind == Buffer::Kind::Const) {
        t.const_offset = p.const_data.size();
        const auto u = untiled.find(static_cast<int>(i));
        if (u == untiled.end()) {
          p.const_data.insert(p.const_data.end(), b.data.begin(), b.data.end());
        } else {
          t.shape = {u->second.k, u->second.n};
          const std::vector<uint8_t> plain = untile(b, u->second, symbols);
          p.const_data.insert(p.const_data.end(), plain.begin(), plain.end());
        }
      }
      p.tensors.push_back(std::move(t));
    }
  Fragments fragments;
  std::vector<size_t> order(plan.calls.size());  // the calls in program order (group_independent_calls may reorder)
  std::iota(order.begin(), order.end(), size_t{0});
  group_independent_calls(plan, symbols, on_chip, order, fragments);
  for (const OnChip& o : on_chip) spread = spread || o.every_core() || o.group >= 0;
  const bool spmd = spread && chip_cores > 1;
  if (spmd) p.cores = static_cast<uint32_t>(chip_cores);
  constexpr int kGuardReg = 31, kCoreReg = 30;
  bool prev_whole = false;
  int prev_group = -1;

  // A kernel and the whole-chip GEMM after it overlap where they can (one core: plan_overlap, else
  // prefetch_overlap; several: prefetch_overlap); a GEMM that overlaps the kernel before it may be the first of the
  // next pair in prefetch_overlap's way, which leaves it as it is.
  // Graph outputs written while later kernels run (place_output_casts): out of `order`, staged at the ring's end
  EarlyCasts early;
  if (overlap_kernels && !spmd && chip_cores == 1) early = place_output_casts(plan, order, ring);
  std::vector<OutputMove> output_moves;  // several cores: place_output_moves, staged once call_symbols are known
  if (overlap_kernels && spmd) output_moves = place_output_moves(plan, order, on_chip, symbols);
  // Each call's symbols: the chip's, or with half of VMEM where a GEMM's weights wait at its top (plan_weight_areas)
  std::vector<std::map<std::string, int64_t>> call_symbols(order.size(), symbols);
  std::map<size_t, std::vector<kernels::DmaLoad>> prefetch;
  std::set<size_t> stream_tails;  // GEMMs whose prefetch is the weight stream's (noted as such, not below)
  if (overlap_kernels) {
    // The weight areas only where the weight stream does not run (no ring: --intermediates-in-hbm, or a chip of
    // several cores): where it runs, it loads those weights too, and an area takes half of VMEM from the kernels
    // around it and HBM's time from the stream (without the areas, BERT-base on v6e 262,519 -> 257,365 cycles,
    // v5e 383,962 -> 377,687, GPT-2 prefill on v6e 376,759 -> 371,916, v5e 590,219 -> 591,353)
    if (ring.end <= ring.begin) prefetch = plan_weight_areas(plan, order, on_chip, symbols, call_symbols);
    if (!spmd) stream_tails = stream_weights(plan, order, on_chip, symbols, untiled, prefetch, ring, kStreamSem);
  }
  EarlyCasts before_call, after_call;  // output moves' loads in a block before the call, or all after it
  stage_output_moves(output_moves, plan, order, on_chip, call_symbols, early, before_call, after_call);
  // The weight stream's semaphore (kStreamSem) where a GEMM waits for it: no kernel may use it then
  const bool streaming =
      std::any_of(plan.calls.begin(), plan.calls.end(), [](const KernelCall& c) { return c.stream_wait > 0; });
  const int top_sem = streaming ? kStreamSem - 1 : isa::kNumSems - 1;
  std::vector<Overlap> overlap(order.size());
  // The pair whose second kernel is the call at `at`, if any: the call before's, or the one's before a copy it
  // passes (Overlap::skip)
  auto into = [&](size_t at) -> Overlap* {
    if (at >= 1 && overlap[at - 1].on && overlap[at - 1].skip == 0) return &overlap[at - 1];
    if (at >= 2 && overlap[at - 2].on && overlap[at - 2].skip == 1) return &overlap[at - 2];
    return nullptr;
  };
  // A copy a prefetch pair may pass: direct transfers within VMEM on one core (kernels::copy_direct: no VMEM of
  // the kernels' and no semaphore), as a one-core chip's convolutions make around their padded windows
  auto passable = [&](size_t at) {
    const KernelCall& c = plan.calls[order[at]];
    return !spmd && c.kind == KernelCall::Kind::Copy && on_chip[order[at]].copy_cores == 1 &&
           kernels::copy_direct(moves_of(plan, c), call_symbols[at]);
  };
  if (overlap_kernels)
    for (size_t at = 0; at + 1 < order.size(); ++at) {
      const KernelCall& x = plan.calls[order[at]];
      const OnChip& xc = on_chip[order[at]];
      const Overlap* in = into(at);
      // the next call, or past a copy within VMEM to the one after it (the prefetch kind only)
      for (int skip = at + 2 < order.size() && passable(at + 1) ? 1 : 0; skip >= 0 && !overlap[at].on; --skip) {
        const size_t to = at + 1 + static_cast<size_t>(skip);
        // (not where the copy writes any byte of the GEMM's b, which loads before it: a global pool's GEMM, whose b
        // is the activation the copy drops the virtual columns of)
        const auto b = plan.calls[order[to]].tensors.find("b");
        auto writes_b = [&](const BufferMove& m) {
          const Buffer &dst = plan.buffers[static_cast<size_t>(m.dst)], &w = plan.buffers[static_cast<size_t>(b->second)];
          const int64_t first = static_cast<int64_t>(dst.addr + m.dst_off),
                        last = first + (m.rows > 0 ? static_cast<int64_t>(m.rows - 1) * m.dst_stride : 0);
          const int64_t lo = std::min(first, last), hi = std::max(first, last) + static_cast<int64_t>(m.rowbytes);
          return lo < static_cast<int64_t>(w.addr + w.bytes()) && static_cast<int64_t>(w.addr) < hi;
        };
        if (skip == 1 && (b == plan.calls[order[to]].tensors.end() ||
                          std::any_of(plan.calls[order[at + 1]].moves.begin(), plan.calls[order[at + 1]].moves.end(),
                                      writes_b)))
          continue;
        const KernelCall& y = plan.calls[order[to]];
        const OnChip& yc = on_chip[order[to]];
        const std::map<std::string, int64_t>& ys = call_symbols[to];
        if (in) {  // the second of a pair: only the kind that leaves it as it is
          overlap[at] = prefetch_overlap(x, in->gemm, in->symbols, y, yc, ys);
        } else {
          // (the first kind plans both kernels with one VMEM: the smaller, where one of them lies in a weight window)
          const std::map<std::string, int64_t>& both =
              symbol_or(call_symbols[at], "VMEM_BYTES", 0) < symbol_or(ys, "VMEM_BYTES", 0) ? call_symbols[at] : ys;
          if (!spmd && skip == 0) overlap[at] = plan_overlap(plan, x, xc, y, yc, both, fragments, top_sem);
          if (!overlap[at].on) overlap[at] = prefetch_overlap(x, xc, call_symbols[at], y, yc, ys);
        }
        overlap[at].skip = skip;
      }
    }

  int node = -1;  // the "node" region of the previous call, which a call with the same label extends
  std::vector<EarlyCast> pending;  // graph outputs cast with the next kernel that can take them
  const BufferUse use = buffer_use(plan);
  p.ideal_bytes = program_ideal_bytes(plan, use);
  for (size_t at = 0; at < order.size(); ++at) {
    const size_t c = order[at];
    const std::map<std::string, int64_t>& symbols = call_symbols[at];
    // An attention, or a GEMM, that issues a later GEMM's weight loads (plan_weight_areas): noted for the report
    KernelCall with_prefetch;
    const auto pre = prefetch.find(at);
    const std::vector<kernels::DmaLoad>* loads = pre != prefetch.end() ? &pre->second
                                                 : on_chip[c].gemm && !on_chip[c].gemm->prefetch.empty() &&
                                                           !stream_tails.count(at)
                                                     ? &on_chip[c].gemm->prefetch
                                                     : nullptr;
    if (loads) {
      with_prefetch = plan.calls[c];
      if (pre != prefetch.end()) {  // the area's loads, then the weight stream's
        std::vector<kernels::DmaLoad>& to = with_prefetch.attention.background;
        to.insert(to.begin(), pre->second.begin(), pre->second.end());
      }
      int64_t bytes = 0;
      for (const kernels::DmaLoad& l : *loads) bytes += l.rows * l.rowbytes;
      size_t z = at + 1;
      auto target = [&](const OnChip& o) {  // the GEMM whose area the loads fill
        return o.gemm && o.gemm->b_area_chunks > 0 && !loads->empty() && o.gemm->b_area == loads->front().vaddr;
      };
      while (z < order.size() && !target(on_chip[order[z]])) ++z;
      with_prefetch.note = (with_prefetch.note.empty() ? "" : with_prefetch.note + "; ") + "loads " +
                           std::to_string(bytes) + " bytes of the weights of " +
                           (z < order.size() ? plan.calls[order[z]].label : std::string("a later GEMM")) +
                           " after its own loads, while it computes";
    }
    const KernelCall& call = loads ? with_prefetch : plan.calls[c];
    if (const auto b = before_call.find(c); b != before_call.end()) emit_early_block(p, b->second, spmd);
    const auto call_begin = static_cast<uint32_t>(p.code.size());
    const bool whole = on_chip[c].every_core();
    // Cores meet at a barrier around each whole-chip kernel and each group; between two kernels of one core
    // (core 0's, or a group's on one core) that core fences alone.
    const int group = on_chip[c].group;
    const bool meet = spmd && at > 0 && (whole || prev_whole || (group != prev_group && (group >= 0 || prev_group >= 0)));
    if (meet) {
      p.code.push_back(isa::encode(isa::Instr{.op = isa::Op::BARRIER}));
      p.source.push_back(call.label + ": barrier before " + call.kernel);
    }
    prev_whole = whole, prev_group = group;
    const bool guard = spmd && !whole;  // one core only: core 0, or the group's
    const int64_t core = on_chip[c].core;
    const uint64_t guard_len = guard ? (core == 0 ? 2 : 3) : 0;
    const Overlap* first = overlap[at].on ? &overlap[at] : nullptr;  // this call, then a GEMM (or a copy and a GEMM)
    const Overlap* second = into(at);                                 // a call (and maybe a copy), then this GEMM
    const size_t partner = first ? at + 1 + static_cast<size_t>(first->skip) : at + 1;  // the GEMM after this call
    if (first && !first->prefetch) {  // the GEMM's semaphores, and `done`, set before the row-wise kernel
      for (isa::Word w : first->sets) {
        p.code.push_back(w);
        p.source.push_back(call.label + ": " + plan.calls[order[at + 1]].label + "'s semaphores, set before " +
                           call.kernel + " (the two overlap)");
      }
      isa::Instr set{.op = isa::Op::SEMSET};
      set.f[0] = first->done;
      p.code.push_back(isa::encode(set));
      p.source.push_back(call.label + ": the semaphore " + call.kernel + " signals when it is done");
    }
    const uint64_t base = p.code.size() + guard_len;
    isa::Program frag;
    if (second && second->prefetch) {  // its first chunk of b loaded after the kernel before it
      frag = assemble_call(plan, call, second->symbols, base, second->gemm, fragments);
    } else if (second) {  // without its leading sem.sets, which came before the row-wise kernel
      const auto n = static_cast<int64_t>(second->sets.size());
      frag = assemble_call(plan, call, second->symbols, base - static_cast<uint64_t>(n), second->gemm, fragments);
      if (frag.code.size() < second->sets.size() ||
          !std::equal(second->sets.begin(), second->sets.end(), frag.code.begin()))
        throw Error(call.label + ": internal error: the overlapped GEMM's semaphore sets changed");
      frag.code.erase(frag.code.begin(), frag.code.begin() + n);
      if (frag.source.size() >= second->sets.size()) frag.source.erase(frag.source.begin(), frag.source.begin() + n);
      for (isa::Region& r : frag.regions)
        r.begin = r.begin > n ? r.begin - static_cast<uint32_t>(n) : 0, r.end = r.end > n ? r.end - static_cast<uint32_t>(n) : 0;
    } else if (first && !first->prefetch) {  // the row-wise kernel, its semaphores renumbered, and `done`
      frag = assemble_call(plan, first->rows, symbols, base, on_chip[c], fragments);
      renumber_semaphores(frag, first->renumber);
      isa::Instr done{.op = isa::Op::DMAOUTSYNC};
      done.f[static_cast<size_t>(isa::describe(isa::Op::DMAOUTSYNC).operand_index("signal"))] = first->done;
      frag.code.push_back(isa::encode(done));
      frag.source.push_back("its stores done: the GEMM after it may load a");
    } else {
      frag = assemble_call(plan, call, symbols, base, on_chip[c], fragments);
    }
    if (streaming && semaphores_of(frag).count(kStreamSem))
      throw Error(call.label + ": internal error: " + call.kernel + " uses s" + std::to_string(kStreamSem) +
                  ", the weight stream's semaphore");
    // Graph outputs cast while this kernel runs (place_output_casts): its leading sem.sets, the casts, the rest
    if (const auto ec = early.find(c); ec != early.end())
      pending.insert(pending.end(), ec->second.begin(), ec->second.end());
    // The loads of output moves (place_output_moves) at the kernel's end, after its own work is issued: every path
    // through it goes on to them (its halts jump there), and the barrier after it waits for them
    std::vector<EarlyCast> tail_loads;
    for (auto it = pending.begin(); it != pending.end();)
      if (it->stage_only) tail_loads.push_back(std::move(*it)), it = pending.erase(it);
      else ++it;
    if (!tail_loads.empty()) {
      const uint64_t load_at = base + frag.code.size();
      halts_jump_to(frag, load_at);
      const isa::Program body = early_cast_body(tail_loads, 0, 0, load_at);
      const std::string labels = early_labels(tail_loads);
      frag.regions.push_back(isa::Region{isa::kRegionNote,
                                         "loads the sources of the graph outputs of " + labels +
                                             " into VMEM (as the copies that made them read them) after its own work",
                                         0, static_cast<uint32_t>(frag.code.size() + body.code.size() + 1)});
      for (size_t i = 0; i < body.code.size(); ++i) {
        frag.code.push_back(body.code[i]);
        frag.source.push_back("graph output of " + labels + ": " + body.source[i]);
      }
      frag.code.push_back(isa::encode(isa::Instr{.op = isa::Op::HALT}));
      frag.source.push_back("end of " + call.kernel);
    }
    if (!pending.empty() && !(first && !first->prefetch) && !(second && !second->prefetch)) {
      size_t lead = 0;
      while (lead < frag.code.size() && isa::decode(frag.code[lead]).op == isa::Op::SEMSET) ++lead;
      const std::set<int> used = semaphores_of(frag);
      int sem = 0;
      for (int k = top_sem; k >= 1 && sem == 0; --k)
        if (!used.count(k)) sem = k;
      bool into_lead = false;  // a branch to one of the leading sem.sets, which move
      for (isa::Word w : frag.code) {
        const isa::Instr in = isa::decode(w);
        const int t = in.desc().operand_index("target");
        if (t >= 0 && in.f[static_cast<size_t>(t)] >= static_cast<int64_t>(base) &&
            in.f[static_cast<size_t>(t)] < static_cast<int64_t>(base + lead))
          into_lead = true;
      }
      if (lead > 0 && sem > 0 && !into_lead) {
        const isa::Program body = early_cast_body(pending, sem, 0, base + 1 + lead);
        const uint64_t shift = 1 + body.code.size();
        isa::Program z = frag;  // the same kernel made `shift` instructions later, then cut after its sem.sets
        relocate(z, static_cast<int64_t>(shift));
        isa::Instr set{.op = isa::Op::SEMSET};
        set.f[0] = sem;
        const std::string labels = early_labels(pending);
        isa::Program combined;
        combined.code.push_back(isa::encode(set));
        combined.source.push_back("the semaphore of the graph outputs cast while " + call.kernel + " runs");
        for (size_t i = 0; i < lead; ++i) {
          combined.code.push_back(z.code[i]);
          combined.source.push_back(i < z.source.size() ? z.source[i] : call.kernel);
        }
        for (size_t i = 0; i < body.code.size(); ++i) {
          combined.code.push_back(body.code[i]);
          combined.source.push_back("graph output of " + labels + ": " + body.source[i]);
        }
        for (size_t i = lead; i < z.code.size(); ++i) {
          combined.code.push_back(z.code[i]);
          combined.source.push_back(i < z.source.size() ? z.source[i] : call.kernel);
        }
        // the note first (it encloses the kernel's own regions: pre-order), then those, moved
        combined.regions.push_back(isa::Region{isa::kRegionNote,
                                               "writes the graph outputs of " + labels + " (cast from " +
                                                   std::string(isa::dtype_name(pending.front().from)) + " in VMEM) while it runs",
                                               0, static_cast<uint32_t>(combined.code.size())});
        auto moved = [&](uint32_t i) { return i < lead ? i + 1 : i + static_cast<uint32_t>(shift); };
        for (isa::Region r : z.regions) {
          r.begin = moved(r.begin), r.end = r.end == 0 ? 0 : moved(r.end - 1) + 1;
          combined.regions.push_back(std::move(r));
        }
        frag = std::move(combined);
        pending.clear();
      }
    }
    // Output moves (several cores) go with their own kernels or not at all: those this one could not take, in a
    // block of their own after it, and those staged nowhere (stage_output_moves)
    std::vector<EarlyCast> after = after_call.count(c) ? after_call.at(c) : std::vector<EarlyCast>{};
    for (auto it = pending.begin(); it != pending.end();)
      if (it->core >= 0) after.push_back(std::move(*it)), it = pending.erase(it);
      else ++it;
    int lw_sem = 0;  // the next GEMM's lw_sem (GemmChip::lw_sem, GemmKSplit::lw_sem), if its units take their first weights ahead
    if (first && first->prefetch) {  // then the next GEMM's first weights' load
      const KernelCall& y = plan.calls[order[partner]];
      const std::map<std::string, uint64_t> addr = tensor_addresses(plan, y);
      // Every path through the kernel goes on to the load: its halts jump there.
      const uint64_t load_at = base + frag.code.size();
      halts_jump_to(frag, load_at);
      if (y.stream_wait > 0) {  // its weights' background loads done (stream_weights)
        frag.code.push_back(stream_wait_sync(y.stream_wait));
        frag.source.push_back("the weights of " + y.label + " streamed in: their background loads done");
      }
      const uint64_t pre_at = load_at + (y.stream_wait > 0 ? 1 : 0);
      // The GEMM's units take their first weights into their shadow buffers here too (GemmKSplit::lw_sem,
      // GemmChip::lw_sem), while this kernel ends, where a semaphore is free to say the weights are in (set to 0
      // before this kernel, below): not where this kernel's semaphore sets were moved ahead of the kernel before it
      // (a sem.set before it would wait for that kernel), nor where semaphores live across kernels (output moves,
      // several cores). Where its a lies in VMEM: elsewhere a's loads take longer than the units' first weight
      // loads, which the kernel issues beside them (on v4, a split-K GEMM's a from the shared memory:
      // EfficientNet-B0 261,920 -> 262,254 cycles with them ahead, Swin-T 421,014 -> 421,143; the units' loads held
      // the barrier before the kernel)
      const auto ya = y.tensors.find("a");
      const bool a_local = ya != y.tensors.end() &&
                           isa::far_memory(static_cast<int64_t>(plan.buffers[static_cast<size_t>(ya->second)].addr)) ==
                               isa::FarMemory::Local;
      if (a_local && !(second && !second->prefetch) && output_moves.empty()) {
        const std::set<int> used = semaphores_of(frag);
        for (int k = top_sem; k >= 1 && lw_sem == 0; --k)
          if (!used.count(k)) lw_sem = k;
        OnChip ahead = first->gemm;
        (ahead.gemm ? ahead.gemm->lw_sem : ahead.ksplit->lw_sem) = lw_sem;
        try {  // it can (each gemm_chip's first tile, or every unit's first tile of a split-K GEMM, preloaded)
          if (lw_sem > 0 && ahead.gemm) kernels::gemm_chip_first_b(*ahead.gemm, first->symbols, addr, pre_at);
          if (lw_sem > 0 && ahead.ksplit) kernels::gemm_ksplit_first_b(*ahead.ksplit, first->symbols, addr, pre_at);
        } catch (const std::invalid_argument&) {
          lw_sem = 0;
        }
        if (lw_sem > 0) overlap[at].gemm = ahead;
      }
      const isa::Program pre = first->gemm.gemm
                                   ? kernels::gemm_chip_first_b(*first->gemm.gemm, first->symbols, addr, pre_at)
                                   : kernels::gemm_ksplit_first_b(*first->gemm.ksplit, first->symbols, addr, pre_at);
      frag.code.insert(frag.code.end(), pre.code.begin(), pre.code.end());
      for (size_t i = 0; i < pre.code.size(); ++i)
        frag.source.push_back("the first weights of " + y.label + ", loading while " +
                              (on_chip[c].gemm     ? "gemm_chip"
                               : on_chip[c].ksplit ? "gemm_ksplit"
                                                   : call.kernel) +
                              " runs");
    }
    if (!meet && at > 0 && !(second && !second->prefetch) && !starts_with_sync(frag)) {
      // The kernel waits for the one before (its units idle, its stores done), not for the background loads that
      // stream weights to later kernels (one core: stream_weights), which it does not read: a sem.set of a
      // semaphore it does not use (nor the stream's) is that drain, where a fence would wait for the loads too.
      // A fence where no semaphore is free, and on several cores, whose background loads (place_output_moves)
      // signal semaphores that live across kernels.
      const std::set<int> used = semaphores_of(frag);
      int drain = 0;
      for (int k = top_sem; k >= 1 && drain == 0 && !spmd; --k)
        if (!used.count(k)) drain = k;
      isa::Instr in{.op = drain > 0 ? isa::Op::SEMSET : isa::Op::FENCE};
      in.f[0] = drain;
      p.code.push_back(isa::encode(in));
      p.source.push_back(call.label + ": " + (drain > 0 ? "drain" : "fence") + " before " + call.kernel);
      relocate(frag, 1);  // it now starts one instruction later
    }
    if (lw_sem > 0) {  // the semaphore the next kernel's units' first tiles wait for, 0 before this kernel
      isa::Instr set{.op = isa::Op::SEMSET};
      set.f[0] = lw_sem;
      p.code.push_back(isa::encode(set));
      p.source.push_back(call.label + ": the semaphore that says the first weights of " +
                         plan.calls[order[partner]].label + " are in VMEM");
      relocate(frag, 1);
    }
    if (call.stream_wait > 0 && !(second && second->prefetch)) {  // its weights' background loads done
      p.code.push_back(stream_wait_sync(call.stream_wait));
      p.source.push_back(call.label + ": the weights of " + call.kernel + " streamed in: their background loads done");
      relocate(frag, 1);
    }
    const uint64_t end = p.code.size() + guard_len + frag.code.size();
    if (guard) {
      const std::string who = "core " + std::to_string(core);
      isa::Instr id{.op = isa::Op::COREID};
      id.f[0] = kGuardReg;
      p.code.push_back(isa::encode(id));
      p.source.push_back(call.label + ": core.id (" + call.kernel + " runs on " + who + ")");
      isa::Instr skip{.op = isa::Op::BNE};
      skip.f[0] = kGuardReg, skip.f[1] = 0, skip.f[2] = static_cast<int64_t>(end);
      if (core != 0) {
        isa::Instr li{.op = isa::Op::LI};
        li.f[0] = kCoreReg, li.f[1] = core;
        p.code.push_back(isa::encode(li));
        p.source.push_back(call.label + ": " + who);
        skip.f[1] = kCoreReg;
      }
      p.code.push_back(isa::encode(skip));
      p.source.push_back(call.label + ": other cores skip " + call.kernel);
    }
    if (node < 0 || p.regions[node].name != call.label) {
      node = static_cast<int>(p.regions.size());
      p.regions.push_back(isa::Region{isa::kRegionNode, call.label, call_begin, 0});
      size_t last = c;
      while (last + 1 < plan.calls.size() && plan.calls[last + 1].label == call.label) ++last;
      p.regions[node].ideal_bytes = node_ideal_bytes(plan, use, c, last);
    }
    p.regions[node].end = static_cast<uint32_t>(end);
    p.regions[node].flops += call.flops;
    p.regions[node].bytes += call_bytes(plan, call, true);
    const auto frag_begin = static_cast<uint32_t>(p.code.size());
    p.regions.push_back(isa::Region{isa::kRegionKernel,
                                    on_chip[c].gemm     ? "gemm_chip"
                                    : on_chip[c].ksplit ? "gemm_ksplit"
                                                        : call.kernel,
                                    frag_begin,
                                    static_cast<uint32_t>(end)});
    // On a chip of several cores, a kernel left on core 0 says why (the compile report lists them).
    if (guard && core == 0 && on_chip[c].group < 0)
      p.regions.push_back(isa::Region{isa::kRegionSerial, on_chip[c].why, frag_begin, static_cast<uint32_t>(end)});
    // A note for the compile report (e.g. why an attention group was not fused), on the call's kernel.
    if (!call.note.empty())
      p.regions.push_back(isa::Region{isa::kRegionNote, call.note, frag_begin, static_cast<uint32_t>(end)});
    for (isa::Region r : frag.regions) {  // the kernel's own regions, if it marks any
      r.begin += frag_begin, r.end += frag_begin;
      p.regions.push_back(std::move(r));
    }
    for (size_t i = 0; i < frag.code.size(); ++i) {
      isa::Word w = frag.code[i];
      if ((at + 1 < order.size() || guard || !pending.empty()) && isa::decode(w).op == isa::Op::HALT) {
        isa::Instr jump{.op = isa::Op::JMP};
        jump.f[0] = static_cast<int64_t>(end);
        w = isa::encode(jump);
      }
      p.code.push_back(w);
      const std::string& what = i < frag.source.size() ? frag.source[i] : call.kernel;
      std::string& line = p.source.emplace_back();  // LABEL: WHAT, in one allocation
      line.reserve(call.label.size() + 2 + what.size());
      line.append(call.label).append(": ").append(what);
    }
    if (!after.empty()) emit_early_block(p, after, spmd);
  }
  if (!pending.empty()) {  // graph outputs no kernel after their producer could take: a kernel of their own
    emit_early_block(p, pending, spmd);
    p.code.push_back(isa::encode(isa::Instr{.op = isa::Op::HALT}));
    p.source.push_back("end of the program");
    for (size_t i = p.regions.size() - 2; i < p.regions.size(); ++i) p.regions[i].end += 1;  // the halt too
  }
  if (spmd && (p.code.empty() || isa::decode(p.code.back()).op != isa::Op::HALT)) {
    p.code.push_back(isa::encode(isa::Instr{.op = isa::Op::HALT}));  // where core 0's last kernel and the others end
    p.source.push_back("end of the program");
  }
  return p;
}

}  // namespace tpusim::compiler

