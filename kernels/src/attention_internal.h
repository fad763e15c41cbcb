// What the two attention generators share (attention_chip.cpp: the matrix units' kernel; attention_vpu.cpp: the
// vector unit's, for short queries): the chip as they see it, a vector instruction's cycles, and the registers and
// typed emitter of their code. Internal to the kernels library.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "tpusim/isa/emitter.h"
#include "tpusim/kernels/attention_chip.h"
#include "tpusim/kernels/gemm_chip.h"

namespace tpusim::kernels::attention_detail {

inline int64_t symbol(const std::map<std::string, int64_t>& s, const char* name) {
  auto it = s.find(name);
  if (it == s.end()) throw std::invalid_argument(std::string("attention_chip: chip symbol ") + name + " missing");
  return it->second;
}
inline int64_t optional(const std::map<std::string, int64_t>& s, const char* name, int64_t otherwise) {
  auto it = s.find(name);
  return it == s.end() ? otherwise : it->second;
}
inline int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

// The chip as the generator sees it.
struct Chip {
  int64_t R, C, ACC, VMEM, P, U, width, special, vbpc, latency, store_latency, mem_bpc;
  int64_t engines;   // transfers a DMA queue has in flight (DMA_ENGINES), and background loads of their own
  int64_t acc_addr;  // the vector unit's address of accumulator row 0 (ACC_ADDR); -1: the chip has none
  double stretch;    // cycles per cycle of a stream at the matrix units' full rate (matrix_stretch)
};

inline Chip chip_of(const AttentionChip& a, const std::map<std::string, int64_t>& s) {
  Chip c;
  c.R = symbol(s, "MXU_ROWS"), c.C = symbol(s, "MXU_COLS"), c.ACC = symbol(s, "ACC_ROWS");
  c.VMEM = symbol(s, "VMEM_BYTES");
  c.P = a.cores ? a.cores : symbol(s, "CORES");
  c.U = a.mxus ? a.mxus : std::min<int64_t>(symbol(s, "MXUS"), 4);
  c.width = std::max<int64_t>(1, optional(s, "VPU_WIDTH", 128));
  c.special = std::max<int64_t>(1, optional(s, "VPU_SPECIAL", c.width));  // exp's results per cycle (<= width)
  c.vbpc = std::max<int64_t>(1, optional(s, "VMEM_BYTES_PER_CYCLE", 1 << 20));
  c.latency = optional(s, "DMA_LATENCY", 100);
  c.store_latency = optional(s, "STORE_LATENCY", c.latency);
  c.engines = std::max<int64_t>(1, optional(s, "DMA_ENGINES", 4));
  c.acc_addr = optional(s, "ACC_ADDR", -1);
  c.stretch = matrix_stretch(s);
  const int64_t cache = optional(s, "CACHE_BYTES_PER_CYCLE", 0);
  c.mem_bpc = std::max<int64_t>(1, cache > 0 ? cache : optional(s, "HBM_BYTES_PER_CYCLE", 64));
  if (a.batch < 1 || a.seq < 1 || a.heads < 1 || a.head_dim < 1 || a.seq_k < 0)
    throw std::invalid_argument("attention_chip: batch, seq, heads and head_dim must be positive");
  if (a.causal && a.seq_k != 0 && a.seq_k != a.seq)
    throw std::invalid_argument("attention_chip: causal attention needs as many keys as queries (seq_k " +
                                std::to_string(a.seq_k) + ", seq " + std::to_string(a.seq) + ")");
  for (const AttentionStrides* st : {&a.q_strides, &a.k_strides, &a.v_strides, &a.o_strides})
    if (st->batch < 0 || st->seq < 0 || st->head < 0)
      throw std::invalid_argument("attention_chip: strides must not be negative");
  if (a.compute_head_dim != 0 && (a.compute_head_dim < a.head_dim || a.compute_head_dim > 65536))
    throw std::invalid_argument("attention_chip: compute_head_dim must be 0 or from head_dim (" +
                                std::to_string(a.head_dim) + ") to 65536, got " + std::to_string(a.compute_head_dim));
  if (a.key_bias_stride < -1) throw std::invalid_argument("attention_chip: key_bias_stride must be -1 or more");
  if (a.heads_per_item < 0 || (a.heads_per_item > 0 && a.heads % a.heads_per_item != 0))
    throw std::invalid_argument("attention_chip: heads_per_item must be 0 or divide heads (" +
                                std::to_string(a.heads) + "), got " + std::to_string(a.heads_per_item));
  const int64_t kvh = a.kv_heads ? a.kv_heads : a.heads;
  if (kvh < 1 || a.heads % kvh != 0)
    throw std::invalid_argument("attention_chip: heads (" + std::to_string(a.heads) +
                                ") must be a multiple of kv_heads (" + std::to_string(kvh) + ")");
  if (a.out != isa::DType::BF16 && a.out != isa::DType::F32)
    throw std::invalid_argument("attention_chip: the output must be bf16 or f32");
  if (c.P < 1 || c.P > symbol(s, "CORES"))
    throw std::invalid_argument("attention_chip: " + std::to_string(c.P) + " cores asked, the chip has " +
                                std::to_string(symbol(s, "CORES")));
  if (c.U < 1 || c.U > symbol(s, "MXUS") || c.U > 4)
    throw std::invalid_argument("attention_chip: " + std::to_string(c.U) + " matrix units per core asked (the chip has " +
                                std::to_string(symbol(s, "MXUS")) + "; the kernel's semaphores allow 4)");
  if (!(a.scale >= 0) || !std::isfinite(a.scale))
    throw std::invalid_argument("attention_chip: the scale must be finite and positive (0: 1/sqrt(head_dim))");
  return c;
}

// One VPU instruction's cycles: its latency and the longer of its lanes' work (at `rate` elements per cycle;
// 0: the lanes' width) and its VMEM bytes at the ports.
inline double vop(const Chip& c, int64_t elems, int64_t bytes_per_elem, int64_t rate = 0) {
  return 8.0 +  // vpu.latency of the presets
         std::max(static_cast<double>(elems) / static_cast<double>(rate ? rate : c.width),
                  static_cast<double>(elems * bytes_per_elem) / c.vbpc);
}

// The kernel's registers (r0 holds 0).
namespace regs {
using isa::Reg;
constexpr Reg zero{0}, cid{1}, t{2}, qb{3}, h{4}, b{5}, mt{6}, nblk{7}, n{8}, g{9}, qv{10}, kh{11}, vh{12}, oh{13},
    qh{14}, bias{15}, scl{16}, one{17}, three{18}, t0{19}, t1{20}, t2{21}, t3{22}, t4{23}, t5{24}, kvn{25}, kvm{26},
    kn{27}, ip{28}, t6{29}, t7{30}, t8{31};
}  // namespace regs

// The typed emitter, keeping track of registers that hold known constants (forgotten at every label and by every
// instruction that writes them), so that li() skips a constant the register already holds.
class Code {
 public:
  explicit Code(isa::Emitter& e) : e(e) {}
  isa::Emitter& e;  // vector, matrix, DMA and branch instructions go straight to it (they write no register)

  // li rd, v unless rd already holds v.
  void li(isa::Reg rd, int64_t v, isa::Where at = {}) {
    auto it = known_.find(rd.index);
    if (it != known_.end() && it->second == v) return;
    e.li(rd, v, at);
    known_[rd.index] = v;
  }
  // li rd, v, leaving rd unknown (a value the code changes before li() could reuse it).
  void set(isa::Reg rd, int64_t v, isa::Where at = {}) { e.li(rd, v, at), forget(rd); }
  void forget(isa::Reg rd) { known_.erase(rd.index); }
  isa::Label label() { return e.label(); }
  void bind(isa::Label l, isa::Where at = {}) { e.bind(l, at), known_.clear(); }
  // The scalar instructions that write their first operand.
  void add(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.add(d, a, b, at), forget(d); }
  void sub(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.sub(d, a, b, at), forget(d); }
  void mul(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.mul(d, a, b, at), forget(d); }
  void div(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.div(d, a, b, at), forget(d); }
  void rem(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.rem(d, a, b, at), forget(d); }
  void and_(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.and_(d, a, b, at), forget(d); }
  void min(isa::Reg d, isa::Reg a, isa::Reg b, isa::Where at = {}) { e.min(d, a, b, at), forget(d); }
  void addi(isa::Reg d, isa::Reg a, int64_t v, isa::Where at = {}) { e.addi(d, a, v, at), forget(d); }
  void muli(isa::Reg d, isa::Reg a, int64_t v, isa::Where at = {}) { e.muli(d, a, v, at), forget(d); }
  void core_id(isa::Reg d, isa::Where at = {}) { e.core_id(d, at), forget(d); }

 private:
  std::map<int, int64_t> known_;
};

// The kernel's tensors: each one's element strides (batch, seq, head; AttentionStrides{} in the attention gives
// the default [B, S(K), H(KVH), D]), and their addresses, declared in the program (q, k, v, o, and kb with
// key_bias) at the addresses given or placed after one another as the assembler places them.
struct AttentionTensors {
  AttentionStrides qs, ks, vs, os;
  int64_t q = 0, k = 0, v = 0, o = 0, kb = 0;
  int64_t kb_stride = 0;  // kb's batch stride (elements)
};
inline AttentionTensors declare_tensors(const AttentionChip& a, int64_t S, int64_t SK, int64_t KVH, isa::Emitter& e,
                                        const std::map<std::string, uint64_t>& tensor_addr, uint64_t hbm_base) {
  const int64_t D = a.head_dim, H = a.heads;
  const bool strided = !(a.q_strides == AttentionStrides{} && a.k_strides == AttentionStrides{} &&
                         a.v_strides == AttentionStrides{} && a.o_strides == AttentionStrides{});
  auto strides = [&](const AttentionStrides& st, int64_t seq, int64_t heads) {
    return st == AttentionStrides{} ? AttentionStrides{seq * heads * D, heads * D, D} : st;
  };
  auto span = [&](const AttentionStrides& st, int64_t seq, int64_t heads) {  // elements a tensor spans
    return (a.batch - 1) * st.batch + (seq - 1) * st.seq + (heads - 1) * st.head + D;
  };
  AttentionTensors t;
  t.qs = strides(a.q_strides, S, H), t.ks = strides(a.k_strides, SK, KVH), t.vs = strides(a.v_strides, SK, KVH),
  t.os = strides(a.o_strides, S, H);
  t.kb_stride = a.key_bias_stride < 0 ? SK : a.key_bias_stride;
  using isa::DType;
  using isa::TensorKind;
  auto declare = [&](const char* name, TensorKind kind, DType dt, std::vector<int64_t> shape) {
    return static_cast<int64_t>(e.declare_placed(isa::TensorDecl{name, kind, dt, std::move(shape)}, tensor_addr, hbm_base));
  };
  if (strided) {
    t.q = declare("q", TensorKind::Input, DType::BF16, {span(t.qs, S, H)});
    t.k = declare("k", TensorKind::Input, DType::BF16, {span(t.ks, SK, KVH)});
    t.v = declare("v", TensorKind::Input, DType::BF16, {span(t.vs, SK, KVH)});
    t.o = declare("o", TensorKind::Output, a.out, {span(t.os, S, H)});
  } else {
    t.q = declare("q", TensorKind::Input, DType::BF16, {a.batch, S, H, D});
    t.k = declare("k", TensorKind::Input, DType::BF16, {a.batch, SK, KVH, D});
    t.v = declare("v", TensorKind::Input, DType::BF16, {a.batch, SK, KVH, D});
    t.o = declare("o", TensorKind::Output, a.out, {a.batch, S, H, D});
  }
  if (a.key_bias) t.kb = declare("kb", TensorKind::Input, DType::F32, {(a.batch - 1) * t.kb_stride + SK});
  return t;
}

}  // namespace tpusim::kernels::attention_detail
