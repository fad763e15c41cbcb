// attention_chip: a generator of fused (FlashAttention-style) attention kernels that use every core and every
// matrix unit of a chip: o = softmax(q k^T * scale + mask) v for every batch b and query head h, in one kernel.
//
// Tensors (row-major, bf16 in): q [B, S, H, D], k and v [B, S, KVH, D] (grouped-query attention: query head h
// reads kv head h / (H / KVH)); out o [B, S, H, D] (bf16 or f32). Causal: query i sees keys j <= i; else every key.
//
// Work split. Work items are (b, h, query block of BR rows), dealt round-robin over the cores (SPMD: core c takes
// items c, c + cores, ...; the query blocks of one head are dealt longest first, so that under the causal mask the
// cores' loads even out). Per item, the core loops over key blocks of BC rows (causal: only the blocks at or below
// the diagonal); its matrix units share each block's two products, each product cut into pieces (a strip of C
// output columns by a group of rows) dealt over the units (attention_chip.cpp chooses the row groups).
//
// Per item: the Q block is loaded into VMEM (one of two Q buffers, by item parity); then for each key block n:
//   dmain:   K_n and V_n into one of three K/V slots (waits KVFREE: a slot is free; signals KVFULL_u per unit)
//   mxu u:   S_n = Q K_n^T into one of two S accumulator regions (the K tiles are loaded transposed, mxu.lw trans;
//            first load waits KVFULL_u, first mm waits SFREE_u; mxu.sync signals SFULL_u)
//   vpu:     the online softmax of S_n: drain (scale, and -inf on key columns past the sequence, through vpu.acc's
//            bias), causal mask on blocks that reach the diagonal (whole rows above it: -inf, the diagonal
//            square: a BC x BC triangle of 0 / -inf built once per core), row max m_new = max(m, rowmax),
//            alpha = exp(m - m_new), P = exp(S - m_new) (f32), l = l * alpha + rowsum(P), P cast to bf16 into
//            one of two P slots (signals PFULL_u)
//   mxu u:   O_n = P_n V_n into one of two PV accumulator regions (waits PFULL_u and OFREE_u; signals OFULL_u)
//   vpu:     O = O * alpha + O_n (O in VMEM, f32; the first block's O_n is drained into O directly); signals
//            OFREE_u and KVFREE
// The products are software-pipelined: the program issues S_{n+1} before PV_n and the softmax of block n+1
// before the O update of block n, so the matrix units compute S_{n+1} while the vector unit works on S_n, and
// the K/V loads of later blocks run ahead in their three slots. Finally O / l is cast to the output type into the
// item's Q buffer (Q is dead by then) and stored (signals QFREE: the buffer may take the Q of item + 2).
//
// Numerics: S in f32 (bf16 products exact, f32 sums), scaled in f32 (vpu.acc's scale), softmax statistics in f32;
// P is rounded to bf16 before the P V product (as FlashAttention does); l sums the f32 P before that rounding.
// Rows of a query block past the sequence, and key rows past it, compute on stale VMEM (finite values loaded
// earlier, or zeros): their results are never stored, and masked key columns give P = 0 exactly.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"

namespace tpusim::kernels {

struct AttentionChip {
  int64_t batch = 1, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;  // kv_heads 0: = heads
  bool causal = false;
  float scale = 0;                    // 0: 1 / sqrt(head_dim)
  isa::DType out = isa::DType::BF16;  // bf16 or f32
  int cores = 0;                      // cores to use; 0: every core of the chip (CORES)
  int mxus = 0;                       // matrix units per core; 0: every one (MXUS, at most 4)
  int64_t block_q = 0, block_k = 0;   // BR and BC exactly (BR a multiple of BC); 0: chosen by the estimate
};

// The plan the generator chose (for tests and reports).
struct AttentionPlan {
  int64_t br = 0, bc = 0;      // query rows per item, key rows per block
  int64_t gs = 0, gp = 0;      // row groups of the S and the P V products (pieces = strips x groups)
  int64_t pv_regions = 0;      // PV accumulator regions per unit (1 or 2)
  int64_t items = 0;           // work items
  int64_t blocks = 0;          // key blocks over all items
  double estimate = 0;         // cycles
};

// Assembly source of the kernel for the chip described by `symbols` (sim::kernel_symbols). Throws
// std::invalid_argument when the shape or the chip cannot run it (the message says why).
std::string attention_chip_source(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

// The plan and its estimated cycles (attention_chip.cpp: per core, its items' key blocks, each the longest of
// its matrix work, vector work and K/V transfer, plus per item overheads). Throws as attention_chip_source.
AttentionPlan attention_chip_plan(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);
double attention_chip_estimate(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

// attention_chip_source assembled (isa::Error on failure).
isa::Program attention_chip_kernel(const AttentionChip& a, const std::map<std::string, int64_t>& symbols);

}  // namespace tpusim::kernels
