// gemm_chip: a generator of GEMM kernels that use every core and every matrix unit of a chip:
// c[M,N] = a[M,K] @ b[K,N] (i8 accumulating in i32, or bf16 or f8e4m3 in f32), cast to the output type. f8e4m3
// runs only on a chip with an fp8 rate (mxu.fp8_rate > 0): elsewhere its mxu.lw fails when the program runs.
//
// Work split. The N columns fall into strips of C = MXU_COLS columns and the strips into groups of U (the matrix
// units used per core): group g is columns [g*U*C, (g+1)*U*C), strip j of a group runs on matrix unit j, and core
// c takes groups c, c + cores, c + 2*cores, ... (SPMD: every core runs the same program and finds its groups from
// core.id). Each core keeps row tiles of a (TM rows, all of K) in its own VMEM and streams b past them, as gemm.s
// does on one matrix unit: a is read from HBM once per core, b once per row tile. Its matrix units share the row
// tile (they read the same a rows against their own weight tiles), so a group's U weight tiles of one fold are one
// DMA transfer (a panel of R rows by U*C columns).
//
// Schedule of one core: row tile 0's a is loaded first, whole rows in one transfer; then per row tile m0 and group
// g, per fold k0 (R rows of K):
//   dmain:  in the row tile's first group, fold f loads piece f of the NEXT row tile's a (whole rows of K, so
//           HBM is read sequentially; the first piece waits `a region free`) into the other A region;
//           then the panel b[k0:+kt, n0:+U*C] into panel slot `slot` (after `dmain.sync wait=FREE_j` for every
//           strip j > 0, the load waits FREE_0: every unit has taken its tile out of that slot), followed by
//           `dmain.sync signal=FULL_j` for each strip (loads complete in order: the panel, and the a block before
//           it, are in VMEM then)
//   mxu j:  lw its C columns of the panel (waits FULL_j, frees with FREE_j); mm the row tile's fold k0 into its
//           accumulator region (the first fold waits AFREE_j: the region was drained)
//   then per strip: mxu.sync mxu=j signals AFULL_j; the vector unit drains the region (waits AFULL_j, signals
//   AFREE_j) into one of two C buffers (CFREE/CFULL with dmaout), dmaout stores it into c.
//   After a row tile's groups, `vpu.sync signal=AREG`: every drain, so every mm that read the row tile, is done.
// Panel slots, accumulator regions (two per unit) and C buffers are double-buffered, so the next fold's DMA, the
// drain of one group and the matrix work of the next overlap. Semaphores: 4 per unit used (FREE, FULL, AFREE,
// AFULL) and 3 more, so at most 7 units per core.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/kernels/dma_load.h"
#include "tpusim/kernels/rowwise.h"

namespace tpusim::kernels {

// Two schedules (both give bit-identical results: every output element sums its K folds in the same order):
//  Strips (above): column groups over cores, each core's a row tile of all of K in VMEM; a and b cross HBM few
//    times, but it needs N / (U * C) >= cores to use every core and a row of a (K elements) in VMEM.
//  Tiles: output tiles of TM rows x W = U*S*C columns (S strips per matrix unit) dealt round-robin over the cores,
//    K in chunks of KC: a GPU-style kernel, for chips with many cores and small core memories (h200-like).
//    Per tile, per chunk: dmain loads a[m0:+TM, k0:+KC] and b[k0:+KC, n0:+W] into one of two VMEM slots (waits
//    FREE_j of every unit: the slot is free; signals FULL_j); unit j, per fold of R rows of the chunk and per
//    strip s, loads its weight tile (the first waits FULL_j) and streams the chunk's a rows into accumulator
//    region (slot, s) (the tile's first fold waits AFREE_j; the chunk's last mm signals FREE_j). After the
//    tile's chunks: mxu.sync signals AFULL_j, the vector unit drains each strip into a C buffer (CFREE/CFULL)
//    and dmaout stores it. Slots, accumulator regions and C buffers are double-buffered, so the next chunk's
//    loads, the matrix work and the drains overlap; the core issues a tile's drain after the next tile's loads
//    and matrix work (its in-order issue would otherwise hold them behind a drain longer than the vector unit's
//    queue), the last tile's after the loop. Row blocks, for narrow outputs: a tile is C columns wide and
//    unit j takes its rows j*TM/U.. against the same weight tile (every unit works where N <= C); or, where N
//    is more than C but fewer than U strips, U / RB strips of C columns, each split into RB blocks of rows (unit
//    j: strip j / RB, rows (j % RB)*TM/RB..), so that two strips keep four units busy. U (up to the
//    units asked), TM, S and row blocks are chosen to minimise an estimate of the kernel's time (waves of tiles
//    over the cores, each tile's matrix cycles and its share of memory bandwidth).
// Auto takes Strips where it has at least one column group per core and a row tile fits, unless the tiled
// schedule's estimate is lower on a chip without a cache (gemm_chip.cpp: strips_estimate, choose_tiles); else Tiles
// (and Tiles always for trans_b and the epilogues).
enum class GemmSchedule { Auto, Strips, Tiles };

// An implicit im2col: a convolution's taps read in place, so that the [M, taps * cin] matrix of copied taps is
// never written to HBM. With cin > 0, `a` is not the matrix but rows of cin elements (the convolution's padded
// input, split into sh x sw phases as the compiler lays it out; declared [rows, cin]), and the matrix's element
// (r, t * cin + c) is a[r + offset(t)][c], with, for tap t = (i, j) = (t / kw, t % kw) at input offsets
// (ih, jw) = (i * dh, j * dw):
//   offset(t) = ((ih % sh) * sw + jw % sw) * phase_rows + (ih / sh) * wq + jw / sw
// (the tap's phase, then its row and column inside the phase; wq: a phase's row length, phase_rows: its rows).
// With pitch p > 1 the element is a[r * p + offset(t)][c]: the matrix's consecutive rows are p rows of a apart,
// as where the compiler splits the padded input into sh phases of rows only (sw = 1 in the formula, wq the padded
// row, p the convolution's stride across columns: ops_conv.cpp, window_phases).
// The kernels load each fold's A block tap by tap (one DMA per tap and fold, rows of at most cin elements at
// pitch p * cin) into the same VMEM layout as the copied matrix, so the matrix work and the results are the same.
struct ConvTaps {
  int64_t cin = 0;  // elements per tap (a row of a); 0: a is the [M, K] matrix itself
  int64_t rows = 0, kw = 1, sh = 1, sw = 1, dh = 1, dw = 1, wq = 1, phase_rows = 0;
  int64_t pitch = 1;  // rows of a between the matrix's consecutive rows
  bool operator==(const ConvTaps&) const = default;
};
// offset(t) above.
int64_t tap_row_offset(const ConvTaps& taps, int64_t t);

// A GEMM's output rows stored through a map (group > 0; GemmChip::c_rows, GemmKSplit::c_rows, the compiler's
// gemm.s C_* parameters): the product's rows in groups of `group`, of which the first `keep` are stored, group g's
// at byte (g / per_image) * image_pitch + (g % per_image) * pitch of c (per_image 0: g * pitch), its row w `w`
// rows of N further; c spans `rows` rows of N (at least the last stored row's end). So a convolution writes
// straight into the padded layout the next window reads (rows of W pixels `pitch` apart, the borders another's),
// and the virtual columns of a convolution's own output go as it stores them (groups of Wv rows, OW kept). The
// same bits where stored; c's other bytes as they were.
struct RowMap {
  int64_t group = 0, keep = 0, pitch = 0, per_image = 0, image_pitch = 0, rows = 0;
  // The byte of c where group g's first row goes
  int64_t at(int64_t g) const { return per_image > 0 ? g / per_image * image_pitch + g % per_image * pitch : g * pitch; }
  bool operator==(const RowMap&) const = default;
};
// Throws std::invalid_argument (naming `kernel`) unless `map` keeps rows, its groups' rows do not overlap and c's
// `rows` rows of `row_bytes` hold every row it stores of a product of m rows.
void check_row_map(const RowMap& map, int64_t m, int64_t row_bytes, const std::string& kernel);

struct GemmChip {
  int64_t m = 0, k = 0, n = 0;
  isa::DType in = isa::DType::BF16;   // i8, bf16 or f8e4m3 (the byte size sets the tiles; f8e4m3 is an i8 in size)
  isa::DType out = isa::DType::F32;   // i8, i32, bf16 or f32
  int cores = 0;                      // cores to use; 0: every core of the chip (CORES)
  int mxus = 0;                       // matrix units per core to use at most; 0: every one (MXUS, at most 7).
                                      // The tiled schedule may use fewer where narrower tiles fill more cores.
  GemmSchedule schedule = GemmSchedule::Auto;
  // b given as [N, K] (row-major), c = a @ b^T (a Linear layer's weights, attention's K): the tiled schedule
  // loads W rows of KC elements per chunk and the weight loads transpose them (mxu.lw trans, same timing).
  bool trans_b = false;
  // At most this many splits of K (the tiled schedule): when tiles alone leave cores idle (few, long tiles),
  // each tile's K range is split over several cores, which write f32 partial tiles to an extra output `ws`
  // [SK, M, N]; after a barrier the cores sum them (in split order) into c. Results then depend on the split,
  // as cuBLAS's split-K results do, so the compiler (bit-identical results on every chip shape) leaves it at 1;
  // `tpusim validate` models GPU library kernels with it.
  int max_split_k = 1;
  int split_k = 0;  // > 0: exactly this many splits of K (fewer if K has fewer chunks); 0: chosen, <= max_split_k
  // Split K on a GPU library that reduces in a kernel of its own (cuBLAS's split-K reduction kernel): the cycles
  // of that second launch. The plan's estimate adds them to a split plan, so that a split must gain more than a
  // launch; the program still reduces after its barrier, so the caller adds them to its cycles where
  // gemm_chip_splits > 1 (tpusim validate does, with chip.launch_cycles). 0: none.
  int64_t reduction_launch_cycles = 0;
  int slots = 0;    // tiled schedule: 2..4 operand slots (chunks in flight) exactly; 0: chosen
  // Tiled schedule, K not split: a core's last tile loads the last fold of its last chunk as a chunk of its own,
  // where the matrix work that moves out of the kernel's tail exceeds a transfer's latency (gemm_chip.cpp). The
  // same results either way; false for comparisons.
  bool split_last_fold = true;
  // Tiled schedule: false starts a tile's loads only once the core's previous tile is stored, one tile per core
  // at a time, as a GPU runs a kernel of one thread block per SM: each tile then pays its first load's latency,
  // its drain and its stores' latency. true (the default) lets the next tile's loads and matrix work overlap this
  // one's drain and stores. The same results either way; not with `residual` or `act`, at most 6 units.
  bool overlap_tiles = true;
  // Tiled schedule: true (the default) starts each core's first tile sooner. Its first chunk loads b before a, and
  // each matrix unit's first weights load (mxu.lw, issued ahead of a's loads) while a does, its first product
  // waiting for a (where the array has at least 64 rows: loading a unit's weights then takes longer than the
  // instructions the order adds), not after both. And with K whole, its second chunk's loads are issued right
  // after its first's, before the first's matrix work, so that the load queue does not idle while the core
  // issues that work. false for comparisons; the same results either way.
  bool quick_start = true;
  // Tiled schedule, K whole: the two cores of a pair (2i, 2i+1, a cluster of two) take tiles that share an operand
  // (the same rows of a, or the same columns of b, whichever is larger per chunk) and load it with `dma.ld ...
  // mcast` (isa.def), which the chip reads once for both, as a GPU's thread-block clusters share a tile by TMA
  // multicast; the tiles are then dealt row-major (pairs share a) or column-major (pairs share b). Used where the
  // chip has clusters (CLUSTER >= 2, chip.cluster) and the pairs can match (an even number of cores, of column or
  // of row tiles; no split K, no taps); the same results either way.
  bool multicast = false;
  // Tiled schedule on several cores: the plan may take strips narrower than a matrix unit's C columns (C/2, C/4,
  // ... down to C/8; not with b_tiled, act, group_n or taps), so that a GEMM of few output columns spreads over
  // more cores (each unit's other columns idle): 1 x 768 x 768 on h200-like in 48 tiles of 16 columns rather than
  // 6 of 128, 128 x 3072 x 768 in 96 tiles of 32 x 32 rather than of 8 x 128. The same results either way.
  bool narrow_strips = true;
  // Tiled schedule: the smallest chunk of K the plan considers, in folds of R (MXU_ROWS) rows; 0: 2 folds where a
  // core has at most 4 tiles and a is a matrix (no taps), else 4 (a smaller chunk starts the matrix units sooner,
  // which matters where the pipeline's fill is a large part of a core's time; a larger one costs fewer transfers
  // and instructions). The same results either way. Measured (scripts/run-chip-table.py, 2026-12-06, with 2
  // everywhere): BERT-base on v4 309,995 -> 293,935 cycles, v6e 368,203 -> 359,727 (its FFN output, 128 x 3072 x
  // 768, one tile, in chunks of 512 rather than 1024); but 4096^3 on v5e 10% slower (32 tiles a core, in chunks
  // whose transfers cost more than the estimate counts), and ResNet-18's int8 convolutions on v6e (one transfer
  // per tap and fold) 68,154 -> 71,038 cycles.
  int min_chunk_folds = 0;
  // The epilogue and layouts gemm.s has, for the compiler (tiled schedule only, no split K, at most 6 units):
  bool bias = false;        // input `bias` [N] (i32 for i8 inputs, f32 for bf16 and f8e4m3) added to the accumulators
  bool relu = false;        // max(x, 0) after the bias
  uint32_t scale_bits = 0;  // f32 bits multiplying the accumulator before the cast (0: none)
  // gemm.s's DEQUANT and Q_SCALE (their meaning is described there): i8 inputs, input `dq` f32 [N, 2] of
  // (scale, bias) pairs in place of `bias` (`bias` says whether the pair's bias is added), and with
  // q_scale_bits != 0 a second output `q` i8 [M, N] of the result after the ReLU x that f32 scale.
  bool dequant = false;
  uint32_t q_scale_bits = 0;
  bool q_only = false;      // with q_scale_bits, q is the only output: no `c` (gemm.s's Q_ONLY)
  bool b_tiled = false;     // b stored tile by tile: [cdiv(K,R), cdiv(N,C), R, C], zero-padded (gemm.s's B_TILED)
  int64_t group_n = 0;      // > 0: c stored as [N / group_n, M, group_n] (gemm.s's GROUP_N; tiled schedule, K whole)
  RowMap c_rows{};          // c's rows through a map (RowMap). Tiled schedule, no split K, no q, group_n or act.
  ConvTaps taps{};          // a read as a convolution's taps (tiled schedule, not with trans_b): gemm.s's TAP_*
  // gemm.s's RESIDUAL and RES_RELU: input `r` [M, N] of the output type (bf16 or f32) added to each drained tile
  // after the cast (vpu.add), then max(x, 0) with residual_relu: the GEMM and a following Add (and Relu) in one
  // kernel, bit for bit. With q (q_scale_bits; not q_only), q is i8(c * q_scale) of the sum c as stored (after
  // its ReLU, in its type): the row-wise Add that also writes the sum's int8 copy (an int8 model's residual), bit
  // for bit, which quantises the value it stores (rowwise.h, Output). Not with group_n or split K.
  bool residual = false;
  bool residual_relu = false;
  // An elementwise activation after the bias (and ReLU), on the f32 values, before the cast to `out`: the row-wise
  // program (rowwise::is_elementwise) the compiler would otherwise run on the GEMM's f32 output, as a GELU after a
  // Linear. The drain writes f32 into the C buffer, applies it there (rowwise::epilogue: the same instructions on
  // each element, so the same bits) into the tile of `out`, which is stored. With q (an int8 GEMM's, dequant), q is
  // that tile as stored cast with q_scale (one vpu.cast: the int8 copy a row-wise kernel writes of a value it
  // stores, rowwise.h, Output), and with q_only only q is stored. Tiled schedule, no split K, no group_n or
  // residual; `out` bf16 or f32.
  std::optional<rowwise::Program> act = std::nullopt;
  // > 0: semaphore s<a_wait> is signalled once, by a kernel before this one that is still running, when a's bytes
  // are ready (the compiler's overlap of a row-wise kernel and the GEMM after it, codegen.cpp: the GEMM's weights
  // stream in while the row-wise kernel makes a). The first chunk of each tile then loads b before a, a's load
  // waits for s<a_wait>, and a dmain.sync signals it again for the next tile: only a waits for the kernel before,
  // while the first chunk of b, ahead of it in the load queue, does not. Tiled schedule, one core, a a matrix (no
  // taps), no split K; a_wait above every semaphore the kernel uses (4 x units + 7) and below 32. The same results.
  int a_wait = 0;
  // The kernel's VMEM from this byte (a multiple of 64) on, its plan taking VMEM_BYTES less it: a kernel before it
  // may still use [0, vmem_base) while this one's first chunk of b loads (b_preloaded). The tiled schedule, no
  // split K.
  int64_t vmem_base = 0;
  // > 0: each core's first tile finds its first b_preloaded chunks of b in its slots already (chunk c in slot c):
  // gemm_chip_first_b's instructions, placed before the kernel (the compiler puts them after the kernel before it,
  // so that the weights load while that one runs), loaded them. The kernel's leading sem.set waits for those loads
  // as for every unit (and a barrier before it, on a chip of several cores). At most the kernel's slots, and where a
  // core's first tile has several chunks, fewer than them (gemm_chip_preload_limit). The tiled schedule, no split
  // K. The same results.
  int64_t b_preloaded = 0;
  // > 0 (with b_preloaded and quick_start): gemm_chip_first_b also pushes each unit's first weights of the core's
  // first tile into the unit's shadow buffer (mxu.lw, each waiting for this semaphore, which a dmain.sync after the
  // loads signals once a unit), and the kernel issues no mxu.lw for them (an mxu.sync takes their slot's FULL
  // signal in its place): its first mxu.mm swaps them in. So the units load their first weights while the kernel
  // before ends. The caller keeps the semaphore at 0 from before those instructions and unused by anything else
  // until the kernel starts. The same results.
  int lw_sem = 0;
  // > 0: the core's first tile finds the b of its first b_area_chunks chunks of K in VMEM from byte b_area on,
  // chunk after chunk in the layout a slot holds them (gemm_chip_area: each chunk's bytes there, and the transfers
  // that put each core's there), loaded before the kernel, so that it loads only a for them. The compiler issues
  // those transfers inside the fused attention two kernels before (each core its own, DmaLoad::core), so that the
  // weights stream in while the attention computes (codegen.cpp). The tiled schedule, no split K, no multicast, not with
  // b_preloaded; the area lies outside the kernel's own VMEM. The core's last tile keeps its last chunk whole
  // (split_last_fold is not applied). The same results.
  int64_t b_area = 0;
  int64_t b_area_chunks = 0;
  // Loads for a kernel after this one (a later GEMM's b_area, or the weight stream's share of this kernel's tail:
  // codegen.cpp, stream_weights, sized by gemm_chip_tail), issued by the core right after its last tile's last
  // loads and products, before that tile's drain, so that HBM moves them while the drain runs rather than after the
  // kernel; plain loads (the kernel that uses them loads after them in the same queue), or background ones
  // (DmaLoad::bg, signalling DmaLoad::signal: the weight stream's, which the kernels after it do not wait for). The
  // tiled schedule, one core, no split K; their VMEM outside this kernel's. The same results.
  std::vector<DmaLoad> prefetch = {};
  // Loads for later kernels (the compiler's weight stream, codegen.cpp: stream_weights), each one contiguous run
  // (rows 1), issued in the order given in pieces of equal size: one piece after each chunk's loads (a piece never
  // spans two loads), so that HBM moves them a little at a time while the matrix units work on the chunks rather
  // than all at once (they would hold back the chunks' own loads behind them in the queue); what a short kernel
  // has not issued by its last chunk goes after its last tile. No semaphore (the kernels that read them load after
  // them in the same queue). The tiled schedule, one core, no split K; their VMEM outside this kernel's. The same
  // results.
  std::vector<DmaLoad> background = {};
  bool operator==(const GemmChip&) const = default;  // the same kernel on the same chip
};

// The kernel for the chip described by `symbols` (sim::kernel_symbols: MXU_ROWS, MXU_COLS, ACC_ROWS, VMEM_BYTES,
// MXUS, CORES), built through the typed emitter (tpusim/isa/emitter.h). Tensors: inputs a [M, K], b [K, N] (g.in);
// output c [M, N] (g.out); and those the options add (above), in that order: at `tensor_addr` where given, the
// others placed from `hbm_base` up as the assembler places them (aligned to 4096 bytes). Code from instruction
// `base_pc`; source lines "<gemm_chip> at gemm_chip.cpp:LINE". Throws std::invalid_argument when the shape or
// the chip cannot run it (the message says why), isa::Error where an address does not fit.
isa::Program gemm_chip_kernel(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                              const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0,
                              uint64_t hbm_base = 0);

// The instructions that load the first g.b_preloaded chunks of b of each core's first tile (tile core.id) into its
// VMEM slots, as the kernel itself would (for GemmChip::b_preloaded; its vmem_base and plan the same): a dma.ld
// each, without wait or signal (mcast where the kernel's pairs share b), none on a core without a tile, and the
// instructions that find the tile and set the loads' registers (clobbered: r1 .. r27, as the kernel's); with
// g.lw_sem, then a dmain.sync per unit of the tile signalling it and each such unit's mxu.lw of its first weights,
// waiting for it. The tiled schedule, no split K (with lw_sem, the kernel's quick start: GemmChip::quick_start);
// throws std::invalid_argument otherwise.
isa::Program gemm_chip_first_b(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                               const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0,
                               uint64_t hbm_base = 0);

// The most chunks of b gemm_chip_first_b may preload for g (GemmChip::b_preloaded): the kernel's slots, and where
// a core's first tile has several chunks, fewer than them (its last chunk may be split in two); and the bytes of b
// one preloaded chunk of a core holds. Throws as gemm_chip_first_b.
struct GemmPreload {
  int64_t chunks = 0, chunk_bytes = 0;
};
GemmPreload gemm_chip_preload_limit(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// GemmChip::b_area for g: the VMEM bytes the area takes per chunk, the chunks of K of a core's first tile, the bytes
// of b those chunks hold (every core's first tile's), and the transfers that load the first g.b_area_chunks
// chunks of each core's first tile (tile core.id) into its area at g.b_area (b at tensor_addr["b"], else placed as
// gemm_chip_kernel places it); on a chip of several cores each transfer names its core (DmaLoad::core). The tiled schedule, no split K; throws
// std::invalid_argument otherwise, or where b_area_chunks is more than the first tile's chunks.
struct GemmArea {
  int64_t chunk_bytes = 0, chunks = 0, b_bytes = 0;
  std::vector<DmaLoad> loads;
};
GemmArea gemm_chip_area(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                        const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t hbm_base = 0);

// The tiled schedule's plan for g (the one gemm_chip_kernel follows): its row tile, strips, chunk of K, units, row
// blocks, accumulator regions and slots, for telling whether two requests plan alike (the compiler: a GEMM given
// less VMEM, beside the kernel before it, plans as with all of it). Throws as gemm_chip_preload_limit.
struct GemmTiles {
  int64_t tm = 0, s = 0, kc = 0, u = 0, rb = 0, abuf = 0, nslot = 0, sc = 0;
  bool operator==(const GemmTiles&) const = default;
};
GemmTiles gemm_chip_tiles(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// The VMEM the kernel's tiled schedule uses: [vmem_base, the value returned). Throws std::invalid_argument for the
// strips schedule and for split K (its reduction lays VMEM out anew), or as gemm_chip_kernel.
int64_t gemm_chip_vmem_end(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// The kernel (at base 0) as assembly text that assembles back to it, after a comment line that gives the plan
// (the schedule, tiles, chunks and slots): for reading and for tests.
std::string gemm_chip_source(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// The kernel's estimated cycles (the tiled schedule's plan estimate, gemm_chip.cpp: waves, chunk pipeline,
// bandwidth), for choosing between it and a one-unit kernel. Throws as gemm_chip_kernel.
double gemm_chip_estimate(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// The tiled schedule's estimated cycles from a core's last loads to the kernel's end: its last chunk's matrix work
// and its last tile's drain (with act, the activation's passes), in the estimate's terms; 0 for the strips
// schedule. HBM has nothing of the kernel's to move then (GemmChip::prefetch's loads go there). Throws as
// gemm_chip_kernel.
double gemm_chip_tail(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// Rows of a a matrix unit streams per cycle for input type `in`: the chip's MXU_I8_RATE or MXU_FP8_RATE symbol
// (bf16: 1). Estimates count a stream of m rows as max(ceil(m / rate), MXU_ROWS) cycles.
int64_t matrix_rate(isa::DType in, const std::map<std::string, int64_t>& symbols);

// The cycles a matrix unit takes for each cycle of a stream at its full rate: 1000 / MXU_EFFICIENCY_PERMILLE (the
// rate it sustains, mxu.efficiency; 1 without the symbol). Estimates multiply the streams above by it.
double matrix_stretch(const std::map<std::string, int64_t>& symbols);

// The cores the kernel's plan gives work: its tiles (with split K, times the splits) or its column groups, at most
// the cores. Throws as gemm_chip_kernel.
int64_t gemm_chip_cores_used(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

// The splits of K the kernel makes (its plan's; 1 without split K or with the strips schedule). Throws as
// gemm_chip_kernel.
int64_t gemm_chip_splits(const GemmChip& g, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::kernels
