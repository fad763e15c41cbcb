// attention_chip: a generator of fused (FlashAttention-style) attention kernels that use every core and every
// matrix unit of a chip: o = softmax(q k^T * scale + mask) v for every batch b and query head h, in one kernel.
//
// Tensors (row-major, bf16 in): q [B, S, H, D], k and v [B, SK, KVH, D] (grouped-query attention: query head h
// reads kv head h / (H / KVH); SK = seq_k, the keys, = S unless set); out o [B, S, H, D] (bf16 or f32). Any other
// layout whose head_dim elements are contiguous is given by element strides (batch, seq, head) per tensor, e.g.
// [B, H, S, D] as {H*S*D, D, S*D}: the tensors are then declared 1-D, as long as the elements they span. Causal:
// query i sees keys j <= i (S = SK); else every key. key_bias: an f32 input kb [B, SK] (its batch stride
// key_bias_stride, 0: one row for every batch) added to every score of key column j after the scale (a padding
// mask such as BERT's (1 - mask) * -10000). The drain adds a bias before its scale, so the kernel scales the row
// by 1 / scale first: (s + kb / scale) * scale, which is s * scale + kb exactly where the scale is a power of two
// or kb is 0, within a rounding of kb otherwise.
//
// Work split. Work items are (b, a group of HG consecutive heads h, query block of BR rows), dealt round-robin
// over the cores (SPMD: core c takes items c, c + cores, ...; the query blocks of one head are dealt longest first,
// so that under the causal mask the cores' loads even out). Per item, the core loops over key blocks of BC rows
// (causal: only the blocks at or below the diagonal); its matrix units share each block's two products, each
// head's product cut into pieces (a strip of C output columns by a group of rows) dealt over the units
// (attention_chip.cpp chooses the row groups; heads_per_item, HG). The vector unit works on the item's HG x BR rows
// at once (head j's at j x BR), each head with its own K and V.
//
// Per item: the Q blocks of its heads are loaded into VMEM (one of two Q buffers, by item parity, or three:
// pipeline_items; with key_bias, the batch's kb row too, into the bias row of the Q buffer's index, whose columns
// past SK hold -inf); then for each key block n:
//   dmain:   K_n and V_n into one of three K/V slots (waits KVFREE: a slot is free; signals KVFULL_u per unit)
//   mxu u:   S_n = Q K_n^T into one of two S accumulator regions (the K tiles are loaded transposed, mxu.lw trans;
//            first load waits KVFULL_u, first mm waits SFREE_u; mxu.sync signals SFULL_u)
//   vpu:     the online softmax of S_n: drain (scale, and -inf on key columns past the sequence, or the kb row,
//            through vpu.acc's bias), causal mask on blocks that reach the diagonal (whole rows above it: -inf, the diagonal
//            square: a BC x BC triangle of 0 / -inf built once per core), row max m_new = max(m, rowmax),
//            alpha = exp(m - m_new), P = exp(S - m_new) (f32), l = l * alpha + rowsum(P), P cast to bf16 into
//            one of two P slots (signals PFULL_u)
//   mxu u:   O_n = P_n V_n into one of two PV accumulator regions (V's weight tile loads while the vector unit
//            still makes P; the first mm waits PFULL_u, through an mxu.sync, and OFREE_u; signals OFULL_u)
//   vpu:     O = O * alpha + O_n (O f32; the first block's O_n is drained into O directly); signals
//            OFREE_u and KVFREE
// Where S, P and O live: on a chip whose accumulators are local memory (ACC_ADDR, isa.def), S (drained), the P
// slots, O and the row statistics go to the accumulator rows the products leave free (the last unit's, past its
// S and PV regions) when they fit, as FlashAttention keeps them in a GPU's registers: the vector unit then works
// on them at its lanes' rate, not through VMEM's ports, and the P V product reads P from there. Otherwise, and
// on chips without ACC_ADDR, they are in VMEM. Q, K, V, the masks and the output stay in VMEM.
// The products are software-pipelined: the program issues S_{n+1} before PV_n and the softmax of block n+1
// before the O update of block n, so the matrix units compute S_{n+1} while the vector unit works on S_n, and
// the K/V loads of later blocks run ahead in their three slots. Finally O / l is cast to the output type into the
// item's Q buffer (Q is dead by then) and stored (signals QFREE: the buffer may take the Q of item + 2, or + 3).
// Items of one key block have no block loop to pipeline: with pipeline_items the program carries the pipeline
// across items (the next item's K/V load and S product before this item's P V product, its softmax before this
// item's O update and O / l, its l in the other of two l rows), so that the matrix units work while the vector
// unit finishes an item, and the vector unit while an item's P V product passes through the arrays (R + C cycles
// from its last row in to its last result out).
//
// Numerics: S in f32 (bf16 products exact, f32 sums), scaled in f32 (vpu.acc's scale), softmax statistics in f32;
// P is rounded to bf16 before the P V product (as FlashAttention does); l sums the f32 P before that rounding.
// Rows of a query block past the sequence compute on stale VMEM: their results are never stored. Key rows past
// the sequence are zeros (the K/V slots are zeroed at the start) or an earlier block's keys, finite, so the
// columns past the keys are -inf after the mask and give P = 0 exactly. A row's result
// depends on BC (where the running max is taken) and the matrix units' shape, not on BR, the cores or the number
// of matrix units (a key block wholly past a row's diagonal changes nothing: alpha = 1, P = 0); so fixing
// block_k gives bit-identical results on every chip of those units.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/kernels/dma_load.h"

namespace tpusim::kernels {

// Element strides of a tensor's batch, sequence and head dimensions (head_dim's elements are contiguous);
// all 0: the default row-major layout.
struct AttentionStrides {
  int64_t batch = 0, seq = 0, head = 0;
  bool operator==(const AttentionStrides&) const = default;
};

struct AttentionChip {
  int64_t batch = 1, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;  // kv_heads 0: = heads
  int64_t seq_k = 0;                                                  // keys; 0: = seq (causal: must be seq)
  bool causal = false;
  AttentionStrides q_strides, k_strides, v_strides, o_strides;        // all 0: [B, S(K), H(KVH), D]
  bool key_bias = false;                                              // the input kb (above)
  int64_t key_bias_stride = -1;                                       // kb's batch stride; -1: SK
  float scale = 0;                    // 0: 1 / sqrt(head_dim)
  isa::DType out = isa::DType::BF16;  // bf16 or f32
  int cores = 0;                      // cores to use; 0: every core of the chip (CORES)
  int mxus = 0;                       // matrix units per core; 0: every one (MXUS, at most 4)
  // BR and BC exactly (causal: BR a multiple or a divisor of BC); 0: chosen by the estimate; block_k alone: BC, and BR chosen.
  // The results depend on BC (the online softmax's steps), not on BR, the cores or the matrix units.
  int64_t block_q = 0, block_k = 0;
  // The smallest blocks the plan may choose (0: 16; powers of two, halved keys first where they do not fit), as a
  // kernel whose tiles have a fixed minimum computes whole tiles however short the sequence: GPU attention
  // kernels on Hopper take 64 query rows (one warpgroup MMA, m64) and 64 to 256 keys per tile. Ignored where
  // block_q or block_k is given.
  int64_t min_block_q = 0, min_block_k = 0;
  // The head size the products compute over (0: head_dim; else at least head_dim): the S product's contraction
  // and the P V product's output columns past head_dim are computed on zero weights (a weight tile of no rows or
  // no columns, mxu.lw), as a kernel built for a larger head size computes zero-padded columns. Results are those
  // of head_dim (the padded terms add +0); only the time and the accumulators used change.
  int64_t compute_head_dim = 0;
  // false: a core starts an item only when the previous one's output is stored (one Q buffer in use, not two), as
  // a GPU runs its thread blocks when one fits per SM at a time: each pays its own load and store latencies. true:
  // the next item's Q and K/V loads run while the current item computes.
  bool overlap_items = true;
  // With overlap_items, where every item is one key block (no key-block loop to pipeline within it): true issues
  // the next item's K/V load and S product before the current item's P V product, so that the matrix units
  // compute it while the vector unit makes P and finishes the item (O update, O / l, the cast), and the next
  // item's softmax before the current item's O update, so that the vector unit computes it while the P V product
  // passes through the arrays; 3 Q buffers, 2 l rows. The same bits either way.
  bool pipeline_items = true;
  // > 0: a core dispatches each of its items after its first at least this many cycles after the one before (a
  // `delay` instruction, isa.def, before the item's instructions): a minimum time per item, as a GPU kernel's
  // per-tile code (its tile scheduler, address set-up, barriers) takes on an SM however small the tile, while a
  // longer tile's own work hides it. tpusim validate sets it for TensorRT-LLM's kernels (validate.h,
  // kAttentionTileUs); 0 (the default) for the compiler's kernels. The same results.
  int64_t min_item_cycles = 0;
  // Plain loads for a kernel after this one, issued by each core right after its first item's loads (a load with
  // DmaLoad::core >= 0 by that core alone), so that HBM moves them while the item computes rather than after the
  // kernel; they take no semaphore (the kernel that uses them loads after them in the same queue, so finds them
  // done), but the core's later items' loads wait behind them (the compiler gives its loads as `background`).
  // Their VMEM must lie outside this kernel's (AttentionPlan::vmem_end). The matrix units' kernel only (not
  // vector_unit). The same results.
  std::vector<DmaLoad> prefetch = {};
  // Background loads for later kernels (dma.ld bg, each signalling its `signal` where > 0: the compiler's weight
  // stream, and the areas of GemmChip::b_area), issued after prefetch's by each core (a load with DmaLoad::core >= 0
  // by that core alone): the kernel's own later loads do not wait for them, so the items after a core's first load
  // and compute while HBM moves them, and the kernel that reads them waits for their semaphore. With
  // pipeline_items on at most 8 cores, those beyond the queue's DMA_ENGINES (a background load waits at issue for a
  // background engine, holding back what the queue issues after it) are spread over the core's later items, a
  // share after each one's loads, in the same order. Their VMEM must lie outside this kernel's. The matrix units'
  // kernel only. The same results.
  std::vector<DmaLoad> background = {};
  // Heads per work item (consecutive heads of one batch and query block): their products' pieces are dealt over
  // the matrix units, one head's to each where there are as many heads as units, and the vector unit's softmax
  // takes all their rows at once (the same instructions per row: the same bits). 0: chosen by the estimate among
  // the divisors of heads; else it must divide heads.
  int64_t heads_per_item = 0;
  // true: the vector unit computes both products (kernels/src/attention_vpu.cpp), for short queries such as a
  // decoder's one token, where a matrix unit would load each head's K and V as weights for a row or two. One item
  // per (batch, kv head): the rows of its H / KVH query heads x S queries (row g x S + i: head kv x H / KVH + g,
  // query i), all its keys at once (no key blocks, no online softmax), loaded into one of two buffer sets (one
  // where two do not fit VMEM; throws std::invalid_argument where one does not) while the item before computes.
  // Per row: s = vpu.rdot(K, q) (q cast to f32; causal: the keys up to its own), scaled by vpu.cast (+ kb with
  // key_bias), the softmax in f32 (rmax, subrow, exp, rsum, recip), o = vpu.cdot(V, p) x (1 / l), cast to the
  // output. Numerics: S as the matrix units make it (bf16 products exact in f32, f32 sums over head_dim in order,
  // scaled in f32); P stays f32 (the matrix path rounds it to bf16); p V's products are rounded to f32 and summed
  // in key order. The bits are the same on every chip (nothing depends on the chip's shape); they differ from
  // the matrix units' path by those roundings. block_q, block_k, min_block_*, compute_head_dim, overlap_items,
  // pipeline_items, heads_per_item and mxus are ignored.
  bool vector_unit = false;
  bool operator==(const AttentionChip&) const = default;
};

// The plan the generator chose (for tests and reports).
struct AttentionPlan {
  int64_t br = 0, bc = 0;      // query rows per item, key rows per block
  int64_t hg = 1;              // heads per item
  int64_t gs = 0, gp = 0;      // row groups of the S and the P V products (pieces = heads x strips x groups)
  int64_t pv_regions = 0;      // PV accumulator regions per unit (1 or 2)
  bool in_accumulators = false;  // S, P, O and the row statistics in the accumulators (else in VMEM)
  int64_t items = 0;           // work items
  int64_t blocks = 0;          // key blocks over all items
  double estimate = 0;         // cycles
  bool vector_unit = false;    // the vector unit's kernel (AttentionChip::vector_unit): br = rows per item (its
                               // query heads x queries), bc = the keys, hg = its query heads, blocks = items
  int64_t sets = 0;            // with vector_unit: buffer sets (2: the next item loads while one computes)
  int64_t vmem_end = 0;        // the matrix units' kernel: the VMEM it uses, [0, vmem_end) (0 with vector_unit)
};

// The kernel for the chip described by `symbols` (sim::kernel_symbols), built through the typed emitter
// (tpusim/isa/emitter.h): its tensors q, k, v, o (and kb) at `tensor_addr` where given, the others placed from
// `hbm_base` up as the assembler places them (aligned to 4096 bytes, in that order); code from instruction
// `base_pc`; source lines "<attention_chip> at attention_chip.cpp:LINE". Throws std::invalid_argument when the
// shape or the chip cannot run it (the message says why), isa::Error where an address does not fit.
isa::Program attention_chip_kernel(const AttentionChip& a, const std::map<std::string, int64_t>& symbols,
                                   const std::map<std::string, uint64_t>& tensor_addr = {}, uint64_t base_pc = 0,
                                   uint64_t hbm_base = 0);

// The kernel (at base 0) as assembly text that assembles back to it, after a comment line that gives the plan:
// for reading and for tests.
std::string attention_chip_source(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

// The plan and its estimated cycles (attention_chip.cpp: per core, its items' key blocks, each the longest of
// its matrix work, vector work and K/V transfer, plus per item overheads; with pipeline_items, the items after a
// core's first two deep). Throws as attention_chip_kernel.
AttentionPlan attention_chip_plan(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);
double attention_chip_estimate(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::kernels
