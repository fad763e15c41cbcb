// gemm_ksplit: a generator of GEMM kernels that split K between one core's matrix units, for a GEMM whose output
// is too few tiles of a matrix unit to keep its units busy (few rows, N of fewer strips than units): on one unit
// such a GEMM waits on its weight loads (each fold's R-row load takes R cycles, its stream of a's rows fewer),
// and a split of the output's rows leaves every unit the same loads. ResNet-50's 14 x 14 convolutions on v6e
// (196 x 2304 x 256: 9 folds of 256 rows for 196 rows each) are such GEMMs.
//
// Contract. gemm_ksplit_kernel(g, ...) computes what kernels/gemm.s computes with the same defines, bit for bit:
// c[M, N] = epilogue(a @ b) for IN_DT bf16 (f32 accumulators) or i8 (i32), with bias (or an int8 GEMM's dequant
// pairs), ReLU, scale, the output's cast, a residual added after the cast (and its ReLU), the int8 copy q of a
// dequantised result (Q_SCALE, Q_ONLY), b as [K, N] or in tiles (B_TILED), and a as the matrix or a convolution's
// taps (ConvTaps). Not: GROUP_N, ACT_RESIDENT, TRANS_B or an activation epilogue (the compiler keeps those on
// gemm.s or gemm_chip). Tensors as gemm.s declares them
// (a, b, bias or dq, r, c unless q_only, q).
//
// Why the same bits. gemm.s sums an output element's folds (passes of R rows of K) in order in its accumulator:
// ((P0 + P1) + P2) + ..., each a rounded f32 addition. Here the pairs (strip of C columns, fold) are dealt in
// strip-major order, a contiguous run to each unit. The run that holds a strip's fold 0 accumulates in its unit
// exactly as gemm.s does; every later fold of a bf16 GEMM is written to an accumulator region of its own
// (mxu.mm without accumulate: the pass's sum alone), and the vector unit adds those regions to the first run's
// one after the other, in fold order (vpu.add, f32): the same additions in the same order. An int8 GEMM's i32
// accumulators wrap, so its sums do not depend on their order: each unit's run of a strip accumulates whole and
// the runs are added.
//
// Schedule of a row tile (TM rows; all of them one tile where they fit the accumulators):
//   dmain:  a's block of TM rows, all of K, unit by unit (the columns of the folds each unit is the first to
//           need, the taps one transfer each; from the second row tile on after AFREE), AFULL_j after unit j's;
//           with staged taps (KSplitPlan::stage_rows), first the rows of a the tile's taps span, in one transfer
//           into VMEM, and (first row tile) each unit's first weight tile, then STAGE; the taps' transfers then
//           copy within VMEM (the local window), the first waiting for STAGE;
//           (first row tile) every unit's weight tiles, dealt round-robin over the units so that each starts early,
//           each signalling FULL_j (loads complete in order), unit j's first right after its part of a; (first row
//           tile) the bias table, which only the drains read; the residual's tiles (wait RF, signal RL); (last row
//           tile) the background loads. The weights stay in VMEM for every row tile.
//   mxu j:  per pair of its run: mxu.lw (first row tile: waits FULL_j), mxu.mm into its region (the first waits
//           AFULL_j, and from the second row tile on RFREE_j first); then mxu.sync signals DONE_j.
//   vpu:    per strip, adds its later regions into its first in fold order, each unit's once it is done (waits
//           DONE_j the first time; the units hold the folds in order, so the first units' sums run while the last
//           ones compute); drains it (vpu.acc: bias or dequant, ReLU, scale, cast; the first waits the table; waits
//           CF, a C buffer free) into the strip's C buffer (with q, q's tile after it); with a residual adds r's
//           tile (waits RL, signals RF) and its ReLU; signals CFULL; after the strips AFREE, then RFREE_j.
//   dmaout: per strip, stores q's tile into q and the C buffer into c (the first waits CFULL; the last, which
//           completes after the first, signals CF).
// The code is straight-line (the plan is static); it uses semaphores s1 .. s(4U+6) (with staged taps s(4U+7)) and
// registers r1 .. r8.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/kernels/dma_load.h"
#include "tpusim/kernels/gemm_chip.h"

namespace tpusim::kernels {

struct GemmKSplit {
  int64_t m = 0, k = 0, n = 0;
  isa::DType in = isa::DType::BF16;  // i8 or bf16
  isa::DType out = isa::DType::F32;  // i8, i32, bf16 or f32
  bool bias = false, relu = false;
  uint32_t scale_bits = 0;  // f32 bits multiplied in after bias and ReLU; 0: none
  bool dequant = false;     // i8 in, bf16 or f32 out: input dq [N, 2] of (scale, bias) pairs (gemm.s DEQUANT)
  bool b_tiled = false;     // b as [cdiv(K, R), cdiv(N, C), R, C] (gemm.s B_TILED)
  bool residual = false, residual_relu = false;  // gemm.s RESIDUAL, RES_RELU (OUT_DT bf16 or f32)
  // With dequant: a second output q, i8 [M, N] = saturate(round(x * q_scale)) of the same x after the ReLU (the
  // next int8 layer's activations: gemm.s Q_SCALE, f32 bits); with q_only, q is the only output (Q_ONLY)
  uint32_t q_scale_bits = 0;
  bool q_only = false;
  ConvTaps taps;            // a as a convolution's taps (gemm.s TAP_*)
  RowMap c_rows;            // c's rows through a map (gemm_chip.h; not with q)
  int mxus = 0;             // matrix units to use at most; 0: every one (MXUS; at most kMaxKSplitUnits)
  // The cores that share the output (at most its strips of C columns; 1: one core): core c takes strips
  // [c * NS / P, (c + 1) * NS / P) of the NS and splits all of K over its own units, as one core does the whole
  // (the same bits: each output element's sums are one core's, in the same order). Each core loads all of a (its
  // block of TM rows) and its strips' weights. The chip's cores, SPMD (core.id picks the slice); no background.
  int cores = 1;
  bool a_local = false;     // for the estimate only: a lies in this core's VMEM (its block crosses VMEM's ports)
  // Loads for later kernels (the compiler's weight stream, as GemmChip::background: each one run of bytes, rows 1,
  // into VMEM outside this kernel's), issued after the last row tile's own loads, so that they hold back none of
  // them (a queue's transfers complete in order) and HBM moves them while the matrix and vector units work. The
  // same results.
  std::vector<DmaLoad> background = {};
  // The kernel's VMEM starts here (a multiple of 64; its plan with VMEM_BYTES less it), so that the kernel before
  // it may still use [0, vmem_base) while this one's first weight tiles load (b_preloaded).
  int64_t vmem_base = 0;
  // > 0: each core finds the first b_preloaded weight tiles of its slice, in the kernel's load order (each unit's
  // first tile, then each unit's second, ...), in their slots already: gemm_ksplit_first_b's instructions, placed
  // before the kernel (the compiler puts them after the kernel before it, so that they load while it ends). The
  // kernel neither loads them nor waits for them (whatever fences the two waits for every unit). At most
  // gemm_ksplit_preload_limit's tiles.
  int64_t b_preloaded = 0;
  // > 0 (b_preloaded at least each unit's first tile): gemm_ksplit_first_b also pushes each unit's first tile into
  // the unit's shadow weight buffer (mxu.lw, each waiting for this semaphore, which a dmain.sync after the loads
  // signals once a unit), and the kernel issues no mxu.lw for them: its first mxu.mm swaps them in. So the units
  // load their first weights while the kernel before ends (on v6e, 256 cycles a unit). The caller keeps the
  // semaphore at 0 from before those instructions and unused by anything else until the kernel starts.
  int lw_sem = 0;
  bool operator==(const GemmKSplit&) const = default;
};

inline constexpr int kMaxKSplitUnits = 6;
// The most (row tile, pair) steps a kernel takes: its code is straight-line, about 20 instructions a step.
inline constexpr int64_t kMaxKSplitSteps = 4096;

// The plan: the units used, the row tile, and per unit its run of (strip, fold) pairs.
struct KSplitPlan {
  int64_t cores = 1;  // the cores used (GemmKSplit::cores, at most the strips); the rest is the busiest core's
  int64_t units = 0, tm = 0, row_tiles = 0, strips = 0, folds = 0;
  int64_t regions = 0;  // accumulator regions (of TM rows) of the busiest unit
  int64_t adds = 0;     // vpu.add passes over a region per row tile
  // > 0: a convolution's taps staged: the rows of a that a row tile's taps read (at most this many) are copied
  // from far memory into VMEM once, and the taps' transfers read them there. A 3 x 3 convolution's taps read each
  // row of a 9 times; where a lies in the shared memory or HBM (not g.a_local), every core reading all of it
  // (ResNet-50's 14 x 14 layers on v4), those reads were the kernel's start. Staged where the span is fewer rows
  // than the taps read, the row tiles stay as many, and a semaphore is free (at most 5 units).
  int64_t stage_rows = 0;
  int64_t vmem_end = 0;  // the kernel's VMEM: [GemmKSplit::vmem_base, vmem_end), the busiest core's
  // Cycles at the kernel's end in which HBM idles: the last pair's stream, the results, the vector unit's last sums
  // and drains, the last stores (for how many tiles of the next kernel's weights may load then)
  double tail = 0;
  std::vector<int64_t> first, last;  // unit j's pairs [first[j], last[j]) in strip-major order
  int64_t longest = 0;                // the most pairs a unit has
  double estimate = 0;  // cycles
};

// The plan for `g` on the chip `symbols` describes (MXU_ROWS, MXU_COLS, ACC_ROWS, MXUS, VMEM_BYTES, VPU_WIDTH,
// HBM_BYTES_PER_CYCLE, DMA_LATENCY). Throws std::invalid_argument where it cannot run: fewer than two units or
// pairs, an epilogue it does not have, a type it does not take, operands that do not fit VMEM, or more than
// kMaxKSplitSteps steps (the message says which).
KSplitPlan gemm_ksplit_plan(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols);

// The kernel: tensors at tensor_addr where given, the others placed from hbm_base up as the assembler places
// them; code from instruction base_pc; source lines "<gemm_ksplit> at gemm_ksplit.cpp:LINE". Throws as the plan.
isa::Program gemm_ksplit_kernel(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols,
                                const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0,
                                uint64_t hbm_base = 0);

// The instructions that load the first g.b_preloaded weight tiles of each core's slice into their slots, as the
// kernel itself would (for GemmKSplit::b_preloaded; its vmem_base and plan the same): a dma.ld each, without wait
// or signal, each core its own (core.id; clobbered: r1 .. r6, r9, r10); with g.lw_sem, then a dmain.sync per unit
// signalling it and each unit's mxu.lw of its first tile, waiting for it. Throws as the plan, or where
// b_preloaded is more than gemm_ksplit_preload_limit's tiles (or, with lw_sem, fewer than a core's units).
isa::Program gemm_ksplit_first_b(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols,
                                 const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0,
                                 uint64_t hbm_base = 0);

// The most weight tiles gemm_ksplit_first_b may preload for g (every tile of the slice with the fewest), and the
// bytes of one (its slot's: R x C elements). Throws as the plan.
struct KSplitPreload {
  int64_t tiles = 0, tile_bytes = 0;
};
KSplitPreload gemm_ksplit_preload_limit(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::kernels
