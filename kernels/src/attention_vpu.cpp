// The vector unit's attention kernel, for short queries (AttentionChip::vector_unit; attention_chip.h has the
// contract). A decoder's step attends one query row per head to every cached key: on the matrix units each head
// loads its K and its V as weights for that one row, a weight load of as many cycles as keys per head, twice, and
// the products' instructions, drains and row statistics per head. The vector unit instead takes each query row's
// dot products with every key in one vpu.rdot and its weighted sum of the values in one vpu.cdot, reading K and V
// once from VMEM, as a GPU's decode kernels (split-K "flash decoding") compute it on their FP32 lanes.
//
// Items are (batch, kv head) pairs, dealt round-robin over the cores (core c takes items c, c + cores, ...). An
// item's rows are its H / KVH query heads' S queries (row g x S + i: query head kv x H / KVH + g, query i), which
// share its K and V. Per item, on the core's DMA-in queue: Q's rows, K, V (and kb's batch row) into one of the
// buffer sets (the first load waits FREE: a set is free; the last signals FULL); on the vector unit: q to f32, a
// vpu.rdot per row (S = K q, causal: over the keys up to the row's own), S scaled (vpu.cast), + kb, the row
// max, S - max, exp, the row sums and their reciprocals, a vpu.cdot per row (O = p V), O x (1 / l), cast to the
// output (the first waits FULL, the last signals DONE); on the DMA-out queue: O's rows stored (the first waits
// DONE, the last signals FREE). With two sets, an item's loads run while the one before computes and stores.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "attention_internal.h"
#include "attention_vpu.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::kernels::attention_detail {
namespace {

// The layout of one buffer set in VMEM (byte offsets from the set's start) and the plan.
struct VpuLayout {
  int64_t D = 0, S = 0, SK = 0, KVH = 0, G = 0, KG = 0, R = 0, NI = 0, osz = 0;
  int64_t QB = 0, QF = 0, KB = 0, VB = 0, SB = 0, MB = 0, LB = 0, OF = 0, OB = 0, KBR = 0, set = 0;
  int64_t sets = 0;
  AttentionPlan plan;
};

// The keys query row i of a head sees: all of them, or (causal, S = SK) those up to its own.
int64_t keys_of(const AttentionChip& a, const VpuLayout& L, int64_t i) { return a.causal ? i + 1 : L.SK; }

// The layout with KG kv heads per item (sets 0 where one set does not fit VMEM).
VpuLayout vpu_layout(const AttentionChip& a, const Chip& c, int64_t KG) {
  VpuLayout L;
  L.D = a.head_dim, L.S = a.seq, L.SK = a.seq_k ? a.seq_k : a.seq, L.KVH = a.kv_heads ? a.kv_heads : a.heads;
  L.G = a.heads / L.KVH, L.KG = KG, L.R = KG * L.G * L.S, L.NI = a.batch * (L.KVH / KG), L.osz = isa::dtype_size(a.out);
  if (L.SK < 1) throw std::invalid_argument("attention_chip: the vector unit's kernel needs at least one key");
  int64_t at = 0;
  auto take = [&](int64_t bytes) {
    const int64_t here = at;
    at = align64(at + bytes);
    return here;
  };
  L.QB = take(L.R * L.D * 2), L.QF = take(L.R * L.D * 4), L.KB = take(KG * L.SK * L.D * 2),
  L.VB = take(KG * L.SK * L.D * 2);
  L.SB = take(L.R * L.SK * 4), L.MB = take(L.R * 4), L.LB = take(L.R * 4), L.OF = take(L.R * L.D * 4);
  L.OB = a.out == isa::DType::F32 ? L.OF : take(L.R * L.D * L.osz);
  L.KBR = a.key_bias ? take(L.SK * 4) : 0;
  L.set = at;
  // Up to 4 sets, so that loads run up to 3 items ahead, hiding their latency and the stores' (no more than a
  // core has items).
  L.sets = std::min<int64_t>({4, c.VMEM / L.set, cdiv(L.NI, c.P)});
  if (L.sets < 1) return L;

  // The estimate: per item the longer of its vector work and its transfers (with two sets they overlap), the
  // cores' items one after the other, plus a load's and a store's latency.
  double vpu = vop(c, L.R * L.D, 6) + vop(c, L.R * L.SK, 8);  // q to f32; S scaled
  for (int64_t g = 0; g < KG * L.G; ++g)
    for (int64_t i = 0; i < L.S; ++i) {
      const int64_t n = keys_of(a, L, i);
      vpu += vop(c, n * L.D, 6) + vop(c, n * L.D, 2);  // vpu.rdot (K and q's row), vpu.cdot (V)
      if (a.key_bias) vpu += vop(c, n, 12);
      if (a.causal) vpu += vop(c, n, 4) + vop(c, n, 8) + vop(c, n, 8, c.special) + vop(c, n, 4);
    }
  if (!a.causal)
    vpu += vop(c, L.R * L.SK, 4) + vop(c, L.R * L.SK, 8) + vop(c, L.R * L.SK, 8, c.special) + vop(c, L.R * L.SK, 4);
  vpu += vop(c, L.R, 8, c.special) + vop(c, L.R * L.D, 8) + (a.out == isa::DType::F32 ? 0 : vop(c, L.R * L.D, 6));
  const double share = static_cast<double>(c.mem_bpc) / static_cast<double>(std::min<int64_t>(L.NI, c.P));
  const double load = static_cast<double>(L.R * L.D * 2 + 2 * KG * L.SK * L.D * 2 + (a.key_bias ? L.SK * 4 : 0)) / share,
               store = static_cast<double>(L.R * L.D * L.osz) / share;
  const int64_t per_core = cdiv(L.NI, c.P);
  // An item's loads wait for the set the item `sets` before it frees (its output stored): with one set, each
  // item's chain of latencies in turn; with more, the chain spread over them.
  const double chain = vpu + load + store + static_cast<double>(c.latency + c.store_latency);
  const double item = std::max({vpu, load + store, chain / static_cast<double>(L.sets)});
  L.plan.estimate = static_cast<double>(c.latency + c.store_latency) + load + store +
                    static_cast<double>(per_core) * item;
  L.plan.br = L.R, L.plan.bc = L.SK, L.plan.hg = KG * L.G, L.plan.items = L.NI, L.plan.blocks = L.NI;
  L.plan.vector_unit = true, L.plan.sets = L.sets;
  return L;
}

// The plan: KG, the kv heads per item, the divisor of KVH of the least estimate (ties to fewer heads) among those
// that fit VMEM. More heads per item share the vector instructions that take all of its rows at once (the scale,
// the softmax's, the casts); fewer give the cores more items, and the loads of one item run while another
// computes. The bits are the same whatever KG (each row's instructions are the same).
VpuLayout vpu_plan(const AttentionChip& a, const Chip& c) {
  const int64_t KVH = a.kv_heads ? a.kv_heads : a.heads;
  VpuLayout best;
  for (int64_t kg = 1; kg <= KVH; ++kg) {
    if (KVH % kg) continue;
    VpuLayout L = vpu_layout(a, c, kg);
    if (L.sets < 1) break;
    if (best.sets < 1 || L.plan.estimate < best.plan.estimate) best = L;
  }
  if (best.sets < 1) {
    const VpuLayout one = vpu_layout(a, c, 1);
    throw std::invalid_argument("attention_chip: the vector unit's kernel needs " + std::to_string(one.set) +
                                " bytes of VMEM for one (batch, kv head) of " + std::to_string(one.SK) +
                                " keys, the chip has " + std::to_string(c.VMEM));
  }
  return best;
}

std::string vpu_summary(const AttentionChip& a, const Chip& c, const VpuLayout& L) {
  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.D)));
  std::ostringstream o;
  o << "# attention_chip (vector unit): o[" << a.batch << "," << L.S << "," << a.heads << "," << L.D
    << "] = softmax(q k^T * " << scale << (a.causal ? " + causal mask" : "") << ") v, kv heads " << L.KVH << ", "
    << L.SK << " keys, on " << c.P << " cores: " << L.NI << " items of " << L.R << " rows, " << L.sets
    << " buffer set(s) (kernels/attention_chip.h)\n";
  return o.str();
}

isa::Program vpu_generate(const AttentionChip& a, const Chip& c, const VpuLayout& L,
                          const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc, uint64_t hbm_base) {
  using isa::DType;
  using isa::Reg;
  using isa::Sem;
  const int64_t D = L.D, S = L.S, SK = L.SK, KVH = L.KVH, G = L.G, KG = L.KG, R = L.R, osz = L.osz;
  const int64_t QH = KG * G;  // the item's query heads
  auto kv_of = [&](int64_t r) { return r / (G * S); };  // row r's kv head within the item
  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  const Sem FULL{1}, FREE{2}, DONE{3};

  isa::Emitter emitter("attention_chip", "<attention_chip>", base_pc);
  isa::Emitter& e = emitter;
  Code k(emitter);
  e.set_cores(static_cast<uint32_t>(c.P));
  const AttentionTensors tensors = declare_tensors(a, S, SK, KVH, e, tensor_addr, hbm_base);
  const AttentionStrides &qs = tensors.qs, &ks = tensors.ks, &vs = tensors.vs, &os = tensors.os;
  const int64_t q_addr = tensors.q, k_addr = tensors.k, v_addr = tensors.v, o_addr = tensors.o, kb_addr = tensors.kb,
                kbs = tensors.kb_stride;

  // Registers: r1 core id, r2 the item, r3 the set's VMEM offset, r4 batch, r5 kv head group, r6..r10 the item's q, k,
  // v, o and kb addresses, r11..r16 operands, r17..r22 scratch.
  const Reg zero{0}, cid{1}, it{2}, so{3}, b{4}, kv{5}, qa{6}, ka{7}, va{8}, oa{9}, kba{10}, x1{11}, x2{12},
      x3{13}, x4{14}, x5{15}, x6{16}, t0{17}, t1{18};
  e.sem_set(FULL, 0), e.sem_set(FREE, L.sets), e.sem_set(DONE, 0);
  k.core_id(cid);
  k.addi(it, cid, 0);
  k.set(so, 0);
  const isa::Label item = k.label(), done = k.label();
  k.bind(item);
  k.li(t0, L.NI), e.bge(it, t0, done);
  k.li(t0, KVH / KG), k.div(b, it, t0), k.rem(kv, it, t0);
  // base + 2 (bf16) or esz x (b x batch stride + kv x head step)
  auto address = [&](Reg d, int64_t base, int64_t batch_bytes, int64_t kv_bytes) {
    k.li(t0, batch_bytes), k.mul(t1, b, t0), k.li(t0, kv_bytes), k.mul(d, kv, t0), k.add(d, d, t1);
    k.li(t0, base), k.add(d, d, t0);  // (an address may not fit addi's 32 bits: the local window's)
  };
  address(qa, q_addr, qs.batch * 2, QH * qs.head * 2);
  address(ka, k_addr, ks.batch * 2, KG * ks.head * 2);
  address(va, v_addr, vs.batch * 2, KG * vs.head * 2);
  address(oa, o_addr, os.batch * osz, QH * os.head * osz);
  if (a.key_bias) k.li(t0, kbs * 4), k.mul(kba, b, t0), k.li(t0, kb_addr), k.add(kba, kba, t0);
  auto at = [&](Reg d, int64_t off) { k.addi(d, so, off); };  // d = this set's buffer at `off`

  // DMA in: Q's rows (one transfer where S = 1: the item's query heads are rows head-stride apart; else S rows
  // per head), K and V (one transfer each where the kv heads' keys continue one another, else one per kv head),
  // kb's row; the first waits FREE, the last signals FULL.
  const bool k_one = KG == 1 || ks.head == SK * ks.seq, v_one = KG == 1 || vs.head == SK * vs.seq;
  {
    const int64_t loads = (S == 1 ? 1 : QH) + (k_one ? 1 : KG) + (v_one ? 1 : KG) + (a.key_bias ? 1 : 0);
    int64_t n = 0;
    auto opts = [&]() {
      isa::DmaLdOptions o;
      if (n == 0) o.wait = FREE;
      if (++n == loads) o.signal = FULL;
      return o;
    };
    k.li(x4, D * 2);
    if (S == 1) {
      at(x1, L.QB), k.li(x3, QH), k.li(x5, qs.head * 2);
      e.dma_ld(x1, qa, x3, x4, x5, x4, opts());
    } else {
      k.li(x3, S), k.li(x5, qs.seq * 2);
      for (int64_t g = 0; g < QH; ++g) {
        at(x1, L.QB + g * S * D * 2), k.addi(x2, qa, g * qs.head * 2);
        e.dma_ld(x1, x2, x3, x4, x5, x4, opts());
      }
    }
    auto kv_loads = [&](int64_t buf, Reg from, const AttentionStrides& st, bool one) {
      k.li(x3, one ? KG * SK : SK), k.li(x5, st.seq * 2);
      for (int64_t j = 0; j < (one ? 1 : KG); ++j) {
        at(x1, buf + j * SK * D * 2), k.addi(x2, from, j * st.head * 2);
        e.dma_ld(x1, x2, x3, x4, x5, x4, opts());
      }
    };
    kv_loads(L.KB, ka, ks, k_one);
    kv_loads(L.VB, va, vs, v_one);
    if (a.key_bias) at(x1, L.KBR), k.li(x3, 1), k.li(x4, SK * 4), e.dma_ld(x1, kba, x3, x4, zero, zero, opts());
  }

  // The vector unit.
  at(x1, L.QF), at(x2, L.QB), k.li(x3, R * D);
  e.vpu_cast(x1, x2, x3, zero, DType::BF16, DType::F32, {.wait = FULL});
  k.li(x5, D), k.li(x6, D * 2);
  for (int64_t r = 0; r < R; ++r) {  // s_r = K q_r over the row's keys
    at(x1, L.SB + r * SK * 4), at(x2, L.KB + kv_of(r) * SK * D * 2), at(t1, L.QF + r * D * 4);
    k.li(x4, keys_of(a, L, r % S));
    e.vpu_rdot(x1, x2, t1, x4, x5, x6, zero, DType::BF16);
  }
  at(x1, L.SB), k.li(x3, R * SK), k.li(x4, isa::bits_from_f32(scale));
  e.vpu_cast(x1, x1, x3, x4, DType::F32, DType::F32, {.scale_en = true});
  if (a.key_bias)
    for (int64_t r = 0; r < R; ++r) {
      at(x1, L.SB + r * SK * 4), at(x2, L.KBR), k.li(x3, keys_of(a, L, r % S));
      e.vpu_add(x1, x1, x2, x3, DType::F32);
    }
  // The softmax: every row at once, or (causal) each over its own keys.
  k.li(x6, SK * 4);
  for (int64_t r = 0; r < (a.causal ? R : 1); ++r) {
    const int64_t rows = a.causal ? 1 : R, n = a.causal ? keys_of(a, L, r % S) : SK;
    at(x1, L.SB + r * SK * 4), at(x2, L.MB + r * 4), at(x3, L.LB + r * 4), k.li(x4, rows), k.li(x5, n);
    e.vpu_rmax(x2, x1, x4, x5, x6, DType::F32);
    e.vpu_subrow(x1, x1, x2, x4, x5, x6, DType::F32);
    if (a.causal) {
      e.vpu_exp(x1, x1, x5, DType::F32);
    } else {
      k.li(t0, R * SK), e.vpu_exp(x1, x1, t0, DType::F32);
    }
    e.vpu_rsum(x3, x1, x4, x5, x6, DType::F32);
  }
  at(x3, L.LB), k.li(x4, R), e.vpu_recip(x3, x3, x4, DType::F32);
  k.li(x5, D), k.li(x6, D * 2), k.li(t0, 4);
  for (int64_t r = 0; r < R; ++r) {  // o_r = p_r V over the row's keys
    at(x1, L.OF + r * D * 4), at(x2, L.VB + kv_of(r) * SK * D * 2), at(t1, L.SB + r * SK * 4);
    k.li(x4, keys_of(a, L, r % S));
    e.vpu_cdot(x1, x2, t1, x4, x5, x6, t0, DType::BF16);
  }
  at(x1, L.OF), at(x3, L.LB), k.li(x4, R), k.li(x5, D), k.li(x6, D * 4);
  isa::VpuMulrowOptions last;
  if (a.out == DType::F32) last.signal = DONE;
  e.vpu_mulrow(x1, x1, x3, x4, x5, x6, DType::F32, last);
  if (a.out != DType::F32) {
    at(x2, L.OB), k.li(x3, R * D);
    e.vpu_cast(x2, x1, x3, zero, DType::F32, a.out, {.signal = DONE});
  }

  // DMA out: O's rows; the first waits DONE, the last signals FREE.
  {
    const int64_t stores = S == 1 ? 1 : QH;
    k.li(x4, D * osz);
    for (int64_t g = 0; g < stores; ++g) {
      isa::DmaStOptions o;
      if (g == 0) o.wait = DONE;
      if (g == stores - 1) o.signal = FREE;
      if (S == 1) {
        at(x1, L.OB), k.li(x3, QH), k.li(x5, os.head * osz);
        e.dma_st(oa, x1, x3, x4, x5, x4, o);
      } else {
        at(x1, L.OB + g * S * D * osz), k.addi(x2, oa, g * os.head * osz), k.li(x3, S), k.li(x5, os.seq * osz);
        e.dma_st(x2, x1, x3, x4, x5, x4, o);
      }
    }
  }
  k.addi(it, it, c.P);
  if (L.sets > 1) k.addi(so, so, L.set), k.li(t0, L.sets * L.set), k.rem(so, so, t0);  // the next set
  e.jmp(item);
  k.bind(done);
  e.halt();
  return e.finish();
}

}  // namespace

AttentionPlan attention_vpu_plan(const AttentionChip& a, const std::map<std::string, int64_t>& symbols) {
  return vpu_plan(a, chip_of(a, symbols)).plan;
}

isa::Program attention_vpu_kernel(const AttentionChip& a, const std::map<std::string, int64_t>& symbols,
                                  const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                                  uint64_t hbm_base) {
  const Chip c = chip_of(a, symbols);
  return vpu_generate(a, c, vpu_plan(a, c), tensor_addr, base_pc, hbm_base);
}

std::string attention_vpu_source(const AttentionChip& a, const std::map<std::string, int64_t>& symbols) {
  const Chip c = chip_of(a, symbols);
  const VpuLayout L = vpu_plan(a, c);
  return vpu_summary(a, c, L) + isa::disassemble(vpu_generate(a, c, L, {}, 0, 0));
}

}  // namespace tpusim::kernels::attention_detail
