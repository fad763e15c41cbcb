// The whole-chip fused attention generator (attention_chip.h has the contract and the schedule).
#include "tpusim/kernels/attention_chip.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <vector>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/emitter.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/gemm_chip.h"

#include "attention_internal.h"
#include "attention_vpu.h"

namespace tpusim::kernels {
namespace {

using namespace attention_detail;

// A product's split over the units: for each of the item's `heads` heads, `strips` of C output columns by
// `groups` row groups of `rows` rows; piece p is head p / (strips x groups), strip p / groups % strips, row group
// p % groups, on unit p % U, the (p / U)-th of that unit.
struct Split {
  int64_t strips = 0, groups = 0, rows = 0, folds = 0, heads = 1;
  int64_t pieces() const { return heads * strips * groups; }
  int64_t head(int64_t p) const { return p / (strips * groups); }
  int64_t strip(int64_t p) const { return p / groups % strips; }
  int64_t group(int64_t p) const { return p % groups; }
};

// The full layout and plan.
struct Layout {
  AttentionPlan plan;
  int64_t D = 0, Dk = 0, Dp = 0, O = 0, KVH = 0, NQ = 0, NBK = 0, Mx = 0, mul = 0;
  int64_t HG = 1, HR = 0;  // heads per item (a group of consecutive heads), and an item's rows: HG x BR
  Split s, p;
  int64_t sreg = 0, pvreg = 0;  // accumulator rows per unit of one S region, one PV region
  // VMEM
  int64_t SQ = 0, SK = 0, KBB = 0, KB0 = 0;  // queries, keys; with key_bias a kb row per Q buffer (KBB bytes from KB0)
  // Items of one key block each, with overlap_items: the next item's first S product is issued before the last
  // one's P V product (generate), and 3 Q buffers (its Q loads while the one before's output is being stored).
  bool pipe_items = false;
  int64_t NQB = 0;  // Q buffers: 3 where pipe_items, else 2
  int64_t QB = 0, Q0 = 0, KVB = 0, VOFF = 0, KV0 = 0, SB = 0, PB = 0, P0 = 0, OB = 0, Z = 0, MASK = 0, M = 0, L = 0,
          MX = 0, RS = 0, RL = 0, AL0 = 0, ALB = 0, end = 0;
  // l's rows: with pipe_items two, LB bytes apart (by the item's parity: the next item's softmax runs before this
  // item's O / l reads its l); else one (LB 0).
  int64_t LB = 0;
  // S, P, O and the row statistics (SB .. AL0) in the accumulators the products leave free (the last unit's
  // rows past its S and PV regions), as a GPU keeps them in registers: the vector unit works on them at its
  // lanes' rate, and the P V product reads P from there; else in VMEM.
  bool regs = false;
};

int64_t pieces_on(const Split& sp, int64_t U, int64_t u) {  // pieces of unit u
  const int64_t n = sp.pieces();
  return n > u ? cdiv(n - u, U) : 0;
}

// Row groups for a product of `strips` strips over BR rows and `folds` folds, for each of `heads` heads: the
// fewest units' cycles (pieces per unit x folds x max(rows, R): a weight load takes R cycles and hides behind a
// stream of at least R rows), ties to fewer groups (longer streams, fewer instructions).
Split choose_split(int64_t strips, int64_t folds, int64_t BR, int64_t heads, const Chip& c) {
  Split best;
  double best_cost = 0;
  for (int64_t g = 1; g <= c.U && g <= BR; g *= 2) {
    if (BR % g) continue;
    const int64_t rows = BR / g;
    const double cost = static_cast<double>(cdiv(heads * strips * g, c.U) * folds * std::max(rows, c.R));
    if (best.groups == 0 || cost < best_cost) best = Split{strips, g, rows, folds, heads}, best_cost = cost;
  }
  return best;
}

// The layout for (BR, BC) and HG heads per item, or false when it does not fit the accumulators or VMEM. An
// item's HG heads are HG x BR rows (head j's query rows at j x BR) for the vector unit, which treats them as one
// block of rows; each head keeps its own K and V.
bool lay_out(const AttentionChip& a, const Chip& c, int64_t BR, int64_t BC, int64_t HG, Layout& L) {
  L = Layout{};
  L.D = a.head_dim, L.O = isa::dtype_size(a.out), L.KVH = a.kv_heads ? a.kv_heads : a.heads;
  L.HG = HG, L.HR = HG * BR;
  const int64_t HR = L.HR;
  L.mul = BR / BC;
  L.Dk = std::max(L.D, a.compute_head_dim);  // the products' head size (padded past D with zero weights)
  L.s = choose_split(cdiv(BC, c.C), cdiv(L.Dk, c.R), BR, HG, c);
  L.p = choose_split(cdiv(L.Dk, c.C), cdiv(BC, c.R), BR, HG, c);
  L.Dp = L.p.strips * c.C;
  L.sreg = cdiv(L.s.pieces(), c.U) * L.s.rows;
  L.pvreg = cdiv(L.p.pieces(), c.U) * L.p.rows;
  L.SQ = a.seq, L.SK = a.seq_k ? a.seq_k : a.seq;
  L.NQ = cdiv(L.SQ, BR), L.NBK = cdiv(L.SK, BC), L.Mx = std::max(HR, BC);
  L.PB = align64(HR * BC * 2);
  L.ALB = align64(HR * 4);
  L.pipe_items = a.overlap_items && a.pipeline_items && L.NBK == 1;
  L.LB = L.pipe_items ? align64(HR * 4) : 0;
  // The register-resident part's bytes: S (also the P V drain's scratch), two P slots, O, five row vectors (and a
  // second l row with pipe_items) and two alpha rows.
  const int64_t reg_bytes = align64(std::max(HR * BC, L.p.rows * c.C) * 4) + 2 * L.PB + align64(HR * L.Dp * 4) +
                            5 * align64(HR * 4) + L.LB + 2 * L.ALB;
  // Two PV regions if they fit, and the register-resident part in the accumulators if it fits there (else VMEM).
  int64_t npv = 0;
  bool regs = false;
  for (const bool want_regs : {true, false}) {
    for (int64_t k = 2; k >= 1 && !npv; --k) {
      const int64_t used = 2 * L.sreg + k * L.pvreg;
      if (used > c.ACC) continue;
      if (want_regs && (c.acc_addr < 0 || reg_bytes > (c.ACC - used) * c.C * 4)) continue;
      npv = k, regs = want_regs;
    }
    if (npv) break;
  }
  if (!npv) return false;
  L.plan.pv_regions = npv;
  L.regs = L.plan.in_accumulators = regs;
  int64_t at = 0, reg_at = regs ? c.acc_addr + ((c.U - 1) * c.ACC + 2 * L.sreg + npv * L.pvreg) * c.C * 4 : 0;
  auto take = [&at](int64_t bytes) {
    const int64_t here = at;
    at += align64(bytes);
    return here;
  };
  auto take_reg = [&](int64_t bytes) {  // the register-resident part: the accumulators, or VMEM
    if (!regs) return take(bytes);
    const int64_t here = reg_at;
    reg_at += align64(bytes);
    return here;
  };
  L.QB = align64(std::max(HR * L.D * 2, HR * L.Dp * L.O));
  L.NQB = L.pipe_items ? 3 : 2;
  L.Q0 = take(L.NQB * L.QB);
  L.VOFF = align64(HG * BC * L.D * 2);  // head j's keys at j x BC x D elements
  L.KVB = 2 * L.VOFF;
  L.KV0 = take(3 * L.KVB);
  L.SB = take_reg(std::max(HR * BC, L.p.rows * c.C) * 4);
  L.P0 = take_reg(2 * L.PB);
  L.OB = take_reg(HR * L.Dp * 4);
  L.Z = take(2 * L.Mx * 4);
  L.MASK = a.causal ? take(BC * BC * 4) : 0;
  L.M = take_reg(HR * 4), L.L = take_reg(align64(HR * 4) + L.LB), L.MX = take_reg(HR * 4), L.RS = take_reg(HR * 4);
  L.RL = take_reg(HR * 4);
  L.AL0 = take_reg(2 * L.ALB);
  if (a.key_bias) L.KBB = align64(L.NBK * BC * 4), L.KB0 = take(L.NQB * L.KBB);
  L.end = at;
  if (L.end > c.VMEM) return false;
  L.plan.br = BR, L.plan.bc = BC, L.plan.hg = HG, L.plan.gs = L.s.groups, L.plan.gp = L.p.groups;
  L.plan.vmem_end = L.end;
  return true;
}

// The estimate of a layout (attention_chip.h): per key block the longest of the units' matrix cycles (at the rate
// they sustain: matrix_stretch), the vector unit's cycles and the K/V transfer at this core's share of the memory
// bandwidth; per item a fill (the Q and the first K/V load's latency, one block's S product) and the final O / l,
// and under a causal mask its diagonal blocks' mask adds; items dealt round-robin over the cores.
// With pipe_items a core's items after its first overlap two deep: each takes the longest of its matrix work,
// its vector work (the drains of both products, the softmax, the mask, O / l and the cast) and the K/V transfer,
// and at least half of one item's chain through both products (each R + C cycles from its last row in to its
// last result out) and that vector work.
// An item of HG heads counts all their pieces and rows.
void estimate(const AttentionChip& a, const Chip& c, Layout& L) {
  const int64_t BR = L.HR, BC = L.plan.bc;  // (an item's rows: its heads' query rows)
  const double mxu = static_cast<double>(cdiv(L.s.pieces(), c.U) * L.s.folds * std::max(L.s.rows, c.R) +
                                         cdiv(L.p.pieces(), c.U) * L.p.folds * std::max(L.p.rows, c.R)) *
                     c.stretch;
  const int64_t sb = BR * BC;
  const int64_t x = L.regs ? 0 : 1;  // VMEM bytes per byte of S, P, O and the row vectors (0: in the accumulators)
  // The S drains; rmax, subrow, exp (at the special functions' rate), rsum, the cast to P and the row vectors' six.
  const double drains = static_cast<double>(L.s.pieces()) * vop(c, L.s.rows * c.C, 4 * x);
  const double softmax = vop(c, sb, 4 * x) + vop(c, sb, 8 * x) + vop(c, sb, 8 * x, c.special) + vop(c, sb, 4 * x) +
                         vop(c, sb, 6 * x) + 6 * vop(c, BR, 12 * x);
  // The O update of a block after the first: drain, scale by alpha, add (the first block's: the drain alone).
  const double pv_piece = vop(c, L.p.rows * c.C, 4 * x);
  const double vpu =
      drains + softmax + static_cast<double>(L.p.pieces()) * (pv_piece + vop(c, L.p.rows * c.C, 8 * x) +
                                                              vop(c, L.p.rows * c.C, 12 * x));
  // Causal: each head's mask add on each diagonal block (the triangle: min(BR, BC) rows of BC), per item.
  const double mask = a.causal ? static_cast<double>(L.HG * std::max<int64_t>(1, L.mul)) *
                                     vop(c, std::min(L.plan.br, BC) * BC, 8 * x + 4)
                               : 0.0;
  const double finish = static_cast<double>(L.p.strips) * vop(c, BR * c.C, 8 * x) + vop(c, BR * L.Dp, L.regs ? 2 : 6);
  const int64_t items = a.batch * (a.heads / L.HG) * L.NQ;
  const double share = static_cast<double>(c.mem_bpc) / static_cast<double>(std::min<int64_t>(items, c.P));
  const double kv = static_cast<double>(L.HG * 2 * BC * L.D * 2) / share;
  const double block = std::max({mxu, vpu, kv});
  double fill = 2.0 * static_cast<double>(c.latency) + static_cast<double>(BR * L.D * 2) / share + mxu + finish + mask;
  // Items one after the other: the output's store (its latency and bytes) before the next item's loads start.
  if (!a.overlap_items) fill += static_cast<double>(c.store_latency) + static_cast<double>(BR * L.D * L.O) / share;
  // A later item of one block, two deep (pipe_items)
  const double vpu_item = drains + softmax + static_cast<double>(L.p.pieces()) * pv_piece + mask + finish;
  const double chain = mxu + vpu_item + 2.0 * static_cast<double>(c.R + c.C) * c.stretch;
  const double piped = std::max({mxu, vpu_item, kv, chain / 2.0});
  std::vector<double> core(static_cast<size_t>(c.P), 0.0);
  int64_t blocks = 0;
  for (int64_t t = 0; t < items; ++t) {
    const int64_t qb = a.causal ? L.NQ - 1 - t % L.NQ : t % L.NQ;
    const int64_t n = a.causal ? std::min(L.NBK, cdiv((qb + 1) * L.plan.br, BC)) : L.NBK;
    blocks += n;
    double& at = core[static_cast<size_t>(t % c.P)];
    const double item = L.pipe_items && t >= c.P ? piped : fill + static_cast<double>(n) * block;
    at += std::max(item, static_cast<double>(a.min_item_cycles));
  }
  L.plan.items = items, L.plan.blocks = blocks;
  L.plan.estimate = *std::max_element(core.begin(), core.end());
}

Layout plan_of(const AttentionChip& a, const Chip& c) {
  if (a.block_q) {
    if (a.block_q < 1 || a.block_k < 1 || (a.causal && a.block_q % a.block_k && a.block_k % a.block_q))
      throw std::invalid_argument("attention_chip: block_q must be a positive multiple or divisor of block_k");
    Layout L;
    if (!lay_out(a, c, a.block_q, a.block_k, a.heads_per_item ? a.heads_per_item : 1, L))
      throw std::invalid_argument("attention_chip: blocks of " + std::to_string(a.block_q) + " x " +
                                  std::to_string(a.block_k) + " do not fit the accumulators or VMEM");
    estimate(a, c, L);
    return L;
  }
  Layout best;
  bool found = false;
  // Query blocks up to the queries' power of two, key blocks up to the keys'; BR a multiple of BC unless the
  // queries are fewer than a key block (decoding: one query, many keys) or block_k is given (then any BR from 16:
  // more, smaller items for many cores). Heads per item: the divisors of the heads (more heads fill more units
  // where one head's product is too few pieces, and share the vector unit's per-instruction latency), or
  // heads_per_item.
  auto span_of = [](int64_t n) {
    return std::max<int64_t>(16, int64_t{1} << static_cast<int>(std::ceil(std::log2(static_cast<double>(n)))));
  };
  const int64_t span_q = span_of(a.seq), span_k = span_of(a.seq_k ? a.seq_k : a.seq);
  // block_k alone: that key block (the results depend on it, not on BR: fully masked blocks change nothing).
  if (a.block_k < 0) throw std::invalid_argument("attention_chip: block_k must not be negative");
  if (a.min_block_q < 0 || a.min_block_k < 0 || a.min_block_q > 512 || a.min_block_k > 256)
    throw std::invalid_argument("attention_chip: min_block_q must be 0 to 512 and min_block_k 0 to 256");
  // The smallest blocks (powers of two from 16): a shorter sequence still computes whole blocks of these.
  const int64_t min_q = a.min_block_q ? span_of(a.min_block_q) : 16, min_k = a.min_block_k ? span_of(a.min_block_k) : 16;
  const int64_t top_q = std::max(span_q, min_q);
  for (int64_t bc = a.block_k ? a.block_k : min_k;
       bc <= (a.block_k ? a.block_k : std::max(min_k, std::min<int64_t>(256, span_k))); bc *= 2)
    for (int64_t br = a.block_k ? 16 : std::max(min_q, std::min(bc, span_q)); br <= 512 && br <= top_q && br <= 8 * bc;
         br *= 2) {
      for (int64_t hg = a.heads_per_item ? a.heads_per_item : 1; hg <= (a.heads_per_item ? a.heads_per_item : a.heads);
           ++hg) {
        if (a.heads % hg != 0) continue;
        Layout L;
        if (!lay_out(a, c, br, bc, hg, L)) continue;
        estimate(a, c, L);
        if (!found || L.plan.estimate < best.plan.estimate) best = L, found = true;
      }
    }
  if (!found && !a.block_k && (min_q > 16 || min_k > 16)) {  // the smallest blocks do not fit: halve them, keys first
    AttentionChip smaller = a;
    (min_k > 16 ? smaller.min_block_k : smaller.min_block_q) = (min_k > 16 ? min_k : min_q) / 2;
    return plan_of(smaller, c);
  }
  if (!found)
    throw std::invalid_argument("attention_chip: no block size fits VMEM (" + std::to_string(c.VMEM) +
                                " bytes) with head_dim " + std::to_string(a.head_dim));
  return best;
}

// The plan's one-line summary, as the source's first line.
std::string summary(const AttentionChip& a, const Chip& c, const Layout& L) {
  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(L.D)));
  std::ostringstream o;
  o << "# attention_chip: o[" << a.batch << "," << L.SQ << "," << a.heads << "," << L.D << "] = softmax(q k^T * "
    << scale << (a.causal ? " + causal mask" : "") << ") v, kv heads " << L.KVH << ", on " << c.P << " cores x "
    << c.U << " matrix units: " << L.plan.items << " items of " << L.HG << " head(s) x " << L.plan.br
    << " query rows, key blocks of " << L.plan.bc << " (S: " << L.s.groups << " row groups, PV: " << L.p.groups
    << "; " << L.plan.pv_regions << " PV regions) (kernels/attention_chip.h)\n";
  return o.str();
}

isa::Program generate(const AttentionChip& a, const Chip& c, const Layout& L,
                      const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc, uint64_t hbm_base) {
  using namespace regs;
  using isa::DType;
  using isa::Sem;
  const int64_t BR = L.plan.br, BC = L.plan.bc, D = L.D, H = a.heads, KVH = L.KVH, S = L.SQ, SK = L.SK, U = c.U,
                R = c.R, C = c.C, O = L.O;
  const int64_t NPV = L.plan.pv_regions;
  const int64_t HG = L.HG, HR = L.HR;         // heads per item, and its rows (head j's query rows at j x BR)
  const int64_t KTL = SK - (L.NBK - 1) * BC;  // keys of the last block
  const float scale = a.scale > 0 ? a.scale : static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  auto KVFULL = [](int64_t u) { return Sem{static_cast<int>(1 + 6 * u)}; };
  auto SFULL = [](int64_t u) { return Sem{static_cast<int>(2 + 6 * u)}; };
  auto SFREE = [](int64_t u) { return Sem{static_cast<int>(3 + 6 * u)}; };
  auto PFULL = [](int64_t u) { return Sem{static_cast<int>(4 + 6 * u)}; };
  auto OFULL = [](int64_t u) { return Sem{static_cast<int>(5 + 6 * u)}; };
  auto OFREE = [](int64_t u) { return Sem{static_cast<int>(6 + 6 * u)}; };
  const Sem KVFREE{static_cast<int>(6 * U + 1)}, QFREE{static_cast<int>(6 * U + 2)},
      OUTFULL{static_cast<int>(6 * U + 3)}, KBFULL{static_cast<int>(6 * U + 4)}, ZREADY{static_cast<int>(6 * U + 5)},
      MASKFULL{static_cast<int>(6 * U + 6)};
  std::vector<bool> has_s(static_cast<size_t>(U)), has_p(static_cast<size_t>(U));
  for (int64_t u = 0; u < U; ++u) has_s[u] = pieces_on(L.s, U, u) > 0, has_p[u] = pieces_on(L.p, U, u) > 0;

  isa::Emitter emitter("attention_chip", "<attention_chip>", base_pc);
  Code k(emitter);
  isa::Emitter& e = emitter;
  e.set_cores(static_cast<uint32_t>(c.P));
  // The tensors, at the addresses given or placed after one another (as the assembler places them).
  const AttentionTensors tensors = declare_tensors(a, S, SK, KVH, e, tensor_addr, hbm_base);
  const AttentionStrides &qs = tensors.qs, &ks = tensors.ks, &vs = tensors.vs, &os = tensors.os;
  const int64_t q_addr = tensors.q, k_addr = tensors.k, v_addr = tensors.v, o_addr = tensors.o, kb_addr = tensors.kb,
                kbs = tensors.kb_stride;

  for (int64_t u = 0; u < U; ++u) {
    e.sem_set(KVFULL(u), 0), e.sem_set(SFULL(u), 0), e.sem_set(SFREE(u), 2), e.sem_set(PFULL(u), 0);
    e.sem_set(OFULL(u), 0), e.sem_set(OFREE(u), NPV);
  }
  e.sem_set(KVFREE, 0);  // the three slots are free once zeroed (below)
  e.sem_set(QFREE, a.overlap_items ? L.NQB : 1);  // Q buffers items may load into
  e.sem_set(OUTFULL, 0);
  if (a.key_bias) e.sem_set(KBFULL, 0);
  if (a.causal) e.sem_set(ZREADY, 0), e.sem_set(MASKFULL, 0);
  k.core_id(cid);
  k.li(one, 1), k.li(three, 3), k.li(g, 0), k.li(ip, 0);
  k.li(scl, isa::bits_from_f32(scale));
  // Constants: Z = Mx zeros then Mx -infs (a sum over no columns is 0; exp(0) = 1; 1 x -inf = -inf).
  k.li(t0, L.Z), k.li(t1, L.Mx), e.vpu_rsum(t0, zero, t1, zero, zero, DType::F32);
  k.li(t2, L.RL), k.li(t3, 1), e.vpu_exp(t2, t0, t3, DType::F32);
  k.li(t4, L.RS), k.li(t5, isa::bits_from_f32(-INFINITY));
  e.vpu_cast(t4, t2, t3, t5, DType::F32, DType::F32, {.scale_en = true});
  k.li(t2, L.Z + L.Mx * 4), k.li(t5, L.Mx * 4), e.vpu_addrow(t2, t0, t4, t3, t1, t5, DType::F32);
  if (a.causal) {
    // The BC x BC triangle: row i = Z[Mx - 1 - i, +BC), 0 for columns j <= i and -inf after; one copy within VMEM
    // (a dma.ld from the local window, isa::kLocalWindow) whose source rows step back 4 bytes each, once Z is made,
    // where a vector add per row took BC instructions (on v5e about 1,150 cycles before the first softmax).
    e.vpu_sync({.signal = ZREADY});
    k.li(t0, L.MASK), k.li(t1, static_cast<int64_t>(isa::kLocalWindow) + L.Z + (L.Mx - 1) * 4), k.li(t2, BC);
    k.li(t3, BC * 4), k.li(t4, -4);
    e.dma_ld(t0, t1, t2, t3, t4, t3, {.wait = ZREADY, .signal = MASKFULL});
  }
  // The K/V slots zeroed (a sum over no columns), so that no key row a product reads is an earlier kernel's bytes.
  k.li(t0, L.KV0), k.li(t1, 3 * L.KVB / 4), e.vpu_rsum(t0, zero, t1, zero, zero, DType::F32);
  for (int s = 0; s < 3; ++s) e.vpu_sync({.signal = KVFREE});
  if (a.key_bias && L.NBK * BC > SK)  // the kb rows' columns past the keys: -inf (+ 0), never loaded over
    for (int64_t r = 0; r < L.NQB; ++r) {
      k.li(t0, L.KB0 + r * L.KBB + SK * 4), k.li(t1, L.NBK * BC - SK), k.li(t6, L.Z);
      e.vpu_add(t0, t2, t6, t1, DType::F32);
    }
  if (a.causal) e.vpu_sync({.wait = MASKFULL});  // the triangle is in VMEM before the vector unit goes on
  k.addi(t, cid, 0);

  // K_j and V_j (j in register `jr`) of the item's heads into the slot at VMEM address `slot`: head i's keys at
  // i x BC x D elements, its values VOFF bytes after them. kh and vh hold the batch's k and v; head i reads kv head
  // (h + i) / (H / KVH).
  auto load_kv = [&](isa::Reg jr, isa::Reg slot) {
    if (HG == 1) {  // kh and vh hold the head's own k and v (setup)
      k.li(t5, BC * ks.seq * 2), k.mul(t0, jr, t5), k.add(t1, kh, t0);
      k.muli(t2, jr, BC), k.li(t3, SK), k.sub(t2, t3, t2), k.li(t3, BC), k.min(t2, t2, t3);
      k.li(t3, D * 2), k.li(t4, ks.seq * 2);
      e.dma_ld(slot, t1, t2, t3, t4, t3, {.wait = KVFREE});
      k.li(t5, BC * vs.seq * 2), k.mul(t0, jr, t5), k.forget(t5);
      k.add(t1, vh, t0), k.addi(t6, slot, L.VOFF), k.li(t4, vs.seq * 2);
      e.dma_ld(t6, t1, t2, t3, t4, t3);
    } else {
      k.muli(t2, jr, BC), k.li(t3, SK), k.sub(t2, t3, t2), k.li(t3, BC), k.min(t2, t2, t3);
      for (int64_t i = 0; i < HG; ++i) {
        k.addi(t7, h, i), k.li(t3, H / KVH), k.div(t7, t7, t3);  // its kv head
        k.muli(t5, t7, ks.head * 2), k.muli(t0, jr, BC * ks.seq * 2);
        k.add(t0, t0, t5), k.add(t1, kh, t0);
        k.li(t3, D * 2), k.li(t4, ks.seq * 2);
        k.addi(t6, slot, i * BC * D * 2);
        e.dma_ld(t6, t1, t2, t3, t4, t3, {.wait = i == 0 ? KVFREE : Sem{}});
        k.muli(t5, t7, vs.head * 2), k.muli(t0, jr, BC * vs.seq * 2);
        k.add(t0, t0, t5), k.add(t1, vh, t0);
        k.addi(t6, slot, L.VOFF + i * BC * D * 2), k.li(t4, vs.seq * 2);
        e.dma_ld(t6, t1, t2, t3, t4, t3);
      }
    }
    for (int64_t u = 0; u < U; ++u) e.dmain_sync({.signal = KVFULL(u)});
  };
  // The l row of the item of global block index `gr` into `out`: L, or with pipe_items (an item is one block)
  // L + (gr % 2) x LB.
  auto l_row = [&](isa::Reg out, isa::Reg gr) {
    if (L.LB == 0) return k.li(out, L.L);
    k.and_(out, gr, one), k.muli(out, out, L.LB), k.addi(out, out, L.L);
  };
  // The slot of block index in register `gr` into `out`: KV0 + (gr % 3) * KVB.
  auto slot_of = [&](isa::Reg gr, isa::Reg out) {
    k.rem(out, gr, three), k.muli(out, out, L.KVB);
    k.addi(out, out, L.KV0);
  };
  // S = Q K^T of the block in slot `slot`, into the S region of block `gr` (parity). The weight tiles are a whole
  // block wide, also for a last block of fewer keys: a matrix unit writes only its tile's columns, and the drain
  // reads all BC, so a narrower tile would leave an earlier kernel's accumulator bits (an int32 may read as a NaN)
  // under the -inf of the columns past the keys. Their key rows in the slot are finite (zeroed at the start, or
  // an earlier block's keys), so those columns are finite before their -inf.
  auto s_product = [&](isa::Reg slot, isa::Reg gr) {
    k.and_(t0, gr, one), k.muli(t0, t0, L.sreg);
    for (int64_t u = 0; u < U; ++u) {
      if (!has_s[u]) continue;
      bool first_lw = true, first_mm = true;
      for (int64_t p = u; p < L.s.pieces(); p += U) {
        const int64_t j = L.s.head(p), q = L.s.strip(p), r = L.s.group(p), idx = p / U;
        for (int64_t f = 0; f < L.s.folds; ++f) {
          // Folds past D (compute_head_dim) load a tile of no rows (all zero) and stream fold 0's columns.
          const int64_t fr = f * R < D ? f * R : 0;
          k.addi(t1, slot, (j * BC * D + q * C * D + fr) * 2);
          k.li(t2, std::clamp<int64_t>(D - f * R, 0, R)), k.li(t3, std::min(C, BC - q * C)), k.li(t4, D * 2);
          e.mxu_lw(t1, t2, t3, t4, DType::BF16, {.trans = true, .mxu = u, .wait = first_lw ? KVFULL(u) : Sem{}});
          first_lw = false;
          k.addi(t1, qv, ((j * BR + r * L.s.rows) * D + fr) * 2);
          k.addi(t5, t0, idx * L.s.rows);
          k.li(t6, L.s.rows);
          // each piece's last product signals SFULL: the vector unit drains it while the unit computes the next
          e.mxu_mm(t1, t6, t5, t4, DType::BF16,
                   {.accumulate = f > 0, .mxu = u, .wait = first_mm ? SFREE(u) : Sem{},
                    .signal = f == L.s.folds - 1 ? SFULL(u) : Sem{}});
          first_mm = false;
        }
      }
    }
  };
  // O_n = P_n V_n: block `gr`'s P slot and PV region, V in slot `slot`.
  auto pv_product = [&](isa::Reg slot, isa::Reg gr, int64_t kt) {
    k.and_(t7, gr, one), k.muli(t7, t7, L.PB), k.addi(t7, t7, L.P0);
    if (NPV == 2)
      k.and_(t0, gr, one), k.muli(t0, t0, L.pvreg);
    else
      k.set(t0, 0);
    k.addi(t0, t0, 2 * L.sreg);
    for (int64_t u = 0; u < U; ++u) {
      if (!has_p[u]) continue;
      if (!has_s[u]) e.mxu_sync({.mxu = u, .wait = KVFULL(u)});
      bool first_lw = true, first_mm = true;
      for (int64_t p = u; p < L.p.pieces(); p += U) {
        const int64_t j = L.p.head(p), q = L.p.strip(p), r = L.p.group(p), idx = p / U;
        for (int64_t f = 0; f < L.p.folds; ++f) {
          // Strips past D (compute_head_dim) load a tile of no rows (all zero) from strip 0's place: their
          // columns of O are zeros, never stored.
          const bool pad = q * C >= D;
          k.addi(t1, slot, L.VOFF + (j * BC * D + f * R * D + (pad ? 0 : q * C)) * 2);
          k.li(t2, pad ? 0 : std::clamp<int64_t>(kt - f * R, 0, R));
          k.li(t3, pad ? std::min(C, L.Dk - q * C) : std::min(C, D - q * C)), k.li(t4, D * 2);
          // V's tile needs no P: it loads while the vector unit still makes P (the unit's first product waits for it)
          e.mxu_lw(t1, t2, t3, t4, DType::BF16, {.mxu = u});
          if (first_lw) e.mxu_sync({.mxu = u, .wait = PFULL(u)});
          first_lw = false;
          k.addi(t1, t7, ((j * BR + r * L.p.rows) * BC + f * R) * 2);
          k.addi(t5, t0, idx * L.p.rows);
          k.li(t6, L.p.rows), k.li(t8, BC * 2);
          e.mxu_mm(t1, t6, t5, t8, DType::BF16,
                   {.accumulate = f > 0, .mxu = u, .wait = first_mm ? OFREE(u) : Sem{}});
          first_mm = false;
        }
      }
      e.mxu_sync({.mxu = u, .signal = OFULL(u)});
    }
  };
  // The online softmax of key block `kr` (block index; global index `gr`).
  auto soft = [&](isa::Reg kr, isa::Reg gr) {
    k.and_(t0, gr, one), k.muli(t0, t0, L.sreg);
    if (a.key_bias) {  // the item's kb row (its parity is its Q buffer's), block kr's columns
      k.li(t1, L.Q0), k.sub(t1, qv, t1), k.li(t2, L.QB), k.div(t1, t1, t2);
      k.muli(t1, t1, L.KBB);
      k.muli(bias, kr, BC * 4), k.add(bias, bias, t1);
      k.addi(bias, bias, L.KB0);
      k.forget(t2);
    } else if (!a.causal && KTL < BC) {  // the last block's columns past the sequence get -inf through the drain's bias
      const isa::Label l = k.label();
      k.li(bias, L.Z), k.li(t1, L.NBK - 1);
      e.bne(kr, t1, l);
      k.set(bias, L.Z + (L.Mx - KTL) * 4);
      k.bind(l);
    } else {
      k.li(bias, L.Z);
    }
    // Each piece once its product is done (SFULL, s_product), in the order the units finish them: every unit's
    // first piece, then every unit's second, ...; a unit's region is free once its last piece is drained.
    for (int64_t p = 0; p < L.s.pieces(); ++p) {
      const int64_t u = p % U, j = L.s.head(p), q = L.s.strip(p), r = L.s.group(p), idx = p / U;
      e.vpu_sync({.wait = SFULL(u)});
      k.li(t1, L.SB + ((j * BR + r * L.s.rows) * BC + q * C) * 4);
      k.addi(t2, t0, u * c.ACC + idx * L.s.rows);
      k.li(t3, L.s.rows), k.li(t4, std::min(C, BC - q * C)), k.li(t5, BC * 4);
      k.addi(t6, bias, q * C * 4);
      e.vpu_acc(t1, t2, t3, t4, t5, t6, scl, DType::F32, DType::F32, {.bias_en = true, .scale_en = true});
      if (p + U >= L.s.pieces()) e.vpu_sync({.signal = SFREE(u)});
    }
    if (a.causal && BR < BC) {  // only the item's last block, holding its rows' diagonal: triangle rows q0 % BC + [0, BR)
      const isa::Label skip = k.label();
      k.addi(t1, nblk, -1), e.bne(kr, t1, skip);
      k.muli(t2, qb, BR), k.li(t4, BC), k.rem(t2, t2, t4);
      k.muli(t2, t2, BC * 4), k.addi(t2, t2, L.MASK);
      for (int64_t j = 0; j < HG; ++j) {  // each head's rows
        k.li(t3, L.SB + j * BR * BC * 4), k.li(t4, BR * BC);
        e.vpu_add(t3, t3, t2, t4, DType::F32);
      }
      k.bind(skip);
    } else if (a.causal) {  // block e = kb - qb * (BR/BC) >= 0 reaches the diagonal: rows above it -inf, then the triangle
      const isa::Label skip = k.label(), tri = k.label();
      k.muli(t1, qb, L.mul), k.sub(t1, kr, t1);
      e.blt(t1, zero, skip);
      k.muli(t2, t1, BC);
      e.beq(t2, zero, tri);
      for (int64_t j = 0; j < HG; ++j) {  // each head's rows
        k.li(t3, L.SB + j * BR * BC * 4), k.li(t4, L.Z + L.Mx * 4), k.li(t5, BC), k.li(t6, BC * 4);
        e.vpu_addrow(t3, t3, t4, t2, t5, t6, DType::F32);
      }
      k.bind(tri);
      k.muli(t2, t1, BC * BC * 4), k.addi(t2, t2, L.SB);
      k.li(t3, L.MASK), k.li(t4, BC * BC);
      for (int64_t j = 0; j < HG; ++j) {
        if (j > 0) k.addi(t2, t2, BR * BC * 4);
        e.vpu_add(t2, t2, t3, t4, DType::F32);
      }
      k.bind(skip);
    }
    k.li(t1, L.MX), k.li(t2, L.SB), k.li(t3, HR), k.li(t4, BC), k.li(t5, BC * 4), k.li(t6, L.M);
    e.vpu_rmax(t1, t2, t3, t4, t5, DType::F32);
    e.vpu_max(t1, t1, t6, t3, DType::F32);  // m_new
    k.and_(t7, gr, one), k.muli(t7, t7, L.ALB), k.addi(t7, t7, L.AL0);
    e.vpu_sub(t7, t6, t1, t3, DType::F32);  // m - m_new
    e.vpu_exp(t7, t7, t3, DType::F32);      // alpha
    e.vpu_max(t6, t6, t1, t3, DType::F32);  // m = m_new
    e.vpu_subrow(t2, t2, t1, t3, t4, t5, DType::F32);
    k.li(t0, HR * BC);  // (gr may be t8: left alone)
    e.vpu_exp(t2, t2, t0, DType::F32);
    k.li(t0, L.RS), l_row(t1, gr);
    e.vpu_rsum(t0, t2, t3, t4, t5, DType::F32);
    e.vpu_mul(t1, t1, t7, t3, DType::F32);
    e.vpu_add(t1, t1, t0, t3, DType::F32);
    k.and_(t7, gr, one), k.muli(t7, t7, L.PB), k.addi(t7, t7, L.P0);
    k.li(t0, HR * BC);
    e.vpu_cast(t7, t2, t0, zero, DType::F32, DType::BF16);
    for (int64_t u = 0; u < U; ++u)
      if (has_p[u]) e.vpu_sync({.signal = PFULL(u)});
  };
  // O = O * alpha + O_n (block n in register n, global index g); the first block drains O_n into O.
  auto oupd = [&]() {
    k.and_(t7, g, one), k.muli(t7, t7, L.ALB), k.addi(t7, t7, L.AL0);
    if (NPV == 2)
      k.and_(t0, g, one), k.muli(t0, t0, L.pvreg);
    else
      k.set(t0, 0);
    k.addi(t0, t0, 2 * L.sreg);
    const isa::Label first = k.label(), join = k.label();
    e.beq(n, zero, first);
    for (int pass = 0; pass < 2; ++pass) {
      if (pass == 1) k.bind(first);
      for (int64_t u = 0; u < U; ++u) {
        if (!has_p[u]) continue;
        e.vpu_sync({.wait = OFULL(u)});
        for (int64_t p = u; p < L.p.pieces(); p += U) {
          const int64_t j = L.p.head(p), q = L.p.strip(p), r = L.p.group(p), idx = p / U;
          const int64_t row = j * BR + r * L.p.rows;  // the piece's first row among the item's HR
          const int64_t opiece = L.OB + (q * HR * C + row * C) * 4;
          k.addi(t2, t0, u * c.ACC + idx * L.p.rows);
          k.li(t3, L.p.rows), k.li(t4, std::min(C, (q * C < D ? D : L.Dk) - q * C)), k.li(t5, C * 4);
          if (pass == 1) {
            k.li(t1, opiece);
            e.vpu_acc(t1, t2, t3, t4, t5, zero, zero, DType::F32, DType::F32);
          } else {
            k.li(t1, L.SB);
            e.vpu_acc(t1, t2, t3, t4, t5, zero, zero, DType::F32, DType::F32);
            k.li(t6, opiece), k.addi(t8, t7, row * 4);
            k.li(t4, C);
            e.vpu_mulrow(t6, t6, t8, t3, t4, t5, DType::F32);
            k.li(t8, L.p.rows * C);
            e.vpu_add(t6, t6, t1, t8, DType::F32);
          }
        }
        e.vpu_sync({.signal = OFREE(u)});
      }
      if (pass == 0) e.jmp(join);
    }
    k.bind(join);
    e.vpu_sync({.signal = KVFREE});
  };

  // Item t's registers (qb, h, b, mt, nblk, and the addresses qh, oh, kh, vh, qv of its rows), its Q block's load
  // into the Q buffer of its parity (ip), and with key_bias its batch's kb row, scaled.
  auto setup = [&]() {
    k.li(t0, L.NQ), k.rem(t1, t, t0), k.div(t2, t, t0);
    if (a.causal)
      k.li(t3, L.NQ - 1), k.sub(qb, t3, t1);
    else
      k.addi(qb, t1, 0);
    k.li(t0, H / HG), k.rem(h, t2, t0), k.div(b, t2, t0);
    if (HG > 1) k.muli(h, h, HG);  // the item's first head
    k.muli(t0, qb, BR), k.li(t1, S), k.sub(mt, t1, t0), k.li(t1, BR), k.min(mt, mt, t1);
    if (a.causal) {  // the blocks up to the one holding the item's last row: ceil((qb + 1) BR / BC), at most NBK
      k.addi(t1, qb, 1), k.muli(t1, t1, BR);
      k.addi(t1, t1, BC - 1), k.li(t2, BC), k.div(nblk, t1, t2);
      k.li(t1, L.NBK), k.min(nblk, nblk, t1);
      k.forget(t2);
    } else {
      k.set(nblk, L.NBK);
    }
    // The first query row's element offset b * batch + q0 * seq + h * head (q0 = qb * BR in t0), in bytes, for q
    // and o (head h, the item's first); for k and v, the kv head's, b * batch + (h / (H / KVH)) * head, or with
    // several heads the batch's, b * batch (load_kv adds each head's kv head).
    auto offset = [&](isa::Reg to, int64_t base, const AttentionStrides& st, const isa::Reg* row, isa::Reg head,
                      int64_t bytes) {
      k.muli(t1, b, st.batch * bytes);
      if (row) k.muli(t2, *row, st.seq * bytes), k.add(t1, t1, t2);
      k.muli(t2, head, st.head * bytes), k.add(t1, t1, t2);
      k.set(to, base), k.add(to, to, t1);
    };
    offset(qh, q_addr, qs, &t0, h, 2);
    offset(oh, o_addr, os, &t0, h, O);
    if (HG == 1)
      k.li(t1, H / KVH), k.div(t0, h, t1), k.forget(t0);  // the kv head
    else
      k.set(t0, 0);  // (load_kv adds each head's)
    offset(kh, k_addr, ks, nullptr, t0, 2);
    offset(vh, v_addr, vs, nullptr, t0, 2);
    k.muli(qv, ip, L.QB), k.addi(qv, qv, L.Q0);
    if (a.key_bias) k.muli(t5, ip, L.KBB), k.addi(t5, t5, L.KB0);
    if (L.NQB == 2)
      k.sub(ip, one, ip);
    else
      k.addi(ip, ip, 1), k.rem(ip, ip, three);
    k.forget(t0), k.forget(t1), k.forget(t2);
    k.li(t3, D * 2), k.li(t4, qs.seq * 2);
    for (int64_t j = 0; j < HG; ++j) {  // head j's rows at j x BR of the Q buffer
      if (j == 0) {
        e.dma_ld(qv, qh, mt, t3, t4, t3, {.wait = QFREE});
        continue;
      }
      k.addi(t1, qv, j * BR * D * 2);
      k.addi(t2, qh, j * qs.head * 2);
      e.dma_ld(t1, t2, mt, t3, t4, t3);
    }
    if (a.key_bias) {  // the batch's kb row into the item's bias row (its Q buffer's parity: free when that is)
      k.muli(t6, b, kbs * 4), k.set(t7, kb_addr), k.add(t6, t6, t7);
      k.li(t7, SK * 4);
      e.dma_ld(t5, t6, one, t7, t7, t7);
      e.dmain_sync({.signal = KBFULL});
      k.forget(t5), k.forget(t6), k.forget(t7);
      // the kb row / scale: the drain adds it before its scale (vpu.acc), giving S * scale + kb
      k.li(t0, L.Q0), k.sub(t0, qv, t0), k.li(t1, L.QB), k.div(t0, t0, t1);
      k.muli(t0, t0, L.KBB), k.addi(t0, t0, L.KB0);
      k.li(t1, SK), k.li(t2, isa::bits_from_f32(1.0f / scale));
      e.vpu_cast(t0, t0, t1, t2, DType::F32, DType::F32, {.scale_en = true, .wait = KBFULL});
      k.forget(t0), k.forget(t1), k.forget(t2);
    }
  };
  // m = -inf, l = 0, for the item of global block index `gr` (its l row: l_row)
  auto init_stats = [&](isa::Reg gr) {
    k.li(t0, L.M), k.li(t1, L.Z + L.Mx * 4), k.li(t2, L.Z), k.li(t3, HR);
    e.vpu_add(t0, t1, t2, t3, DType::F32);
    l_row(t0, gr), e.vpu_add(t0, t2, t2, t3, DType::F32);
  };
  // Block kr (register) is the last one: its own tiles (keys KTL), else full blocks.
  auto by_block = [&](isa::Reg kr, const std::function<void(int64_t)>& emit) {
    if (KTL == BC) return emit(BC);
    const isa::Label last = k.label(), join = k.label();
    k.li(t8, L.NBK - 1), e.beq(kr, t8, last);
    emit(BC);
    e.jmp(join);
    k.bind(last);
    emit(KTL);
    k.bind(join);
  };
  // O / l, cast into the item's Q buffer (register `qr`), stored strip by strip to `ohr` (its mt rows in `mtr`;
  // its l row block g's).
  auto finish = [&](isa::Reg qr, isa::Reg ohr, isa::Reg mtr) {
    k.li(t0, L.RL), l_row(t1, g), k.li(t2, HR);
    e.vpu_recip(t0, t1, t2, DType::F32);
    k.li(t4, C * 4);
    for (int64_t q = 0; q < L.p.strips && q * C < D; ++q) {  // O / l over D's columns (those stored)
      k.li(t1, L.OB + q * HR * C * 4), k.li(t3, std::min(C, D - q * C));
      e.vpu_mulrow(t1, t1, t0, t2, t3, t4, DType::F32);
    }
    k.li(t1, L.OB), k.li(t2, HR * L.Dp);
    e.vpu_cast(qr, t1, t2, zero, DType::F32, a.out);
    e.vpu_sync({.signal = OUTFULL});
    k.li(t4, os.seq * O), k.li(t5, C * O);
    bool first = true;
    for (int64_t j = 0; j < HG; ++j)                // each head's rows (j x BR of the strip), to its place in o
      for (int64_t q = 0; q < cdiv(D, C); ++q) {  // the strips of D's columns (not compute_head_dim's)
        k.addi(t0, ohr, j * os.head * O + q * C * O), k.addi(t1, qr, (q * HR + j * BR) * C * O);
        k.li(t3, std::min(C, D - q * C) * O);
        e.dma_st(t0, t1, mtr, t3, t4, t5, {.wait = first ? OUTFULL : Sem{}});
        first = false;
      }
    e.dmaout_sync({.signal = QFREE});
  };

  // The items, as one stream of key blocks: block n + 1's K/V load and S product are issued before block n's
  // P V product, and the softmax of block n + 1 before block n's O update (within an item). With pipe_items
  // (items of one key block), the next item's load and S product also come before the item's P V product, so the
  // matrix units compute it while the vector unit finishes the item (its O update, O / l and the cast); the next
  // item's softmax follows (its m and l start once O / l has read the last item's l).
  auto first_block = [&]() {  // the item's block 0: its K/V load and S product
    k.set(n, 0);
    slot_of(g, kvn);
    load_kv(n, kvn);
    s_product(kvn, g);
  };
  auto next_block = [&](isa::Reg jr) {  // block jr (of this item or the next) after block n, global g + 1
    k.addi(t8, g, 1);
    slot_of(t8, kvm);
    load_kv(jr, kvm);
    k.addi(t8, g, 1);
    s_product(kvm, t8);
  };
  auto pv_and_update = [&]() {  // block n's P V product and O update
    by_block(n, [&](int64_t kt) { pv_product(kvn, g, kt); });
    oupd();
  };
  // min_item_cycles: the core waits that long before dispatching each later item (its units go on with this one)
  auto item_delay = [&] {
    if (a.min_item_cycles > 0) k.li(t0, a.min_item_cycles), e.delay(t0);
  };
  const isa::Label item = k.label(), block = k.label(), done = k.label();
  k.li(t0, L.plan.items), e.bge(t, t0, done);
  setup();
  first_block();
  for (const DmaLoad& l : a.prefetch) {  // another kernel's loads, behind this core's first item's (prefetch)
    const isa::Label other = k.label();
    if (l.core >= 0) k.li(t0, l.core), e.bne(cid, t0, other);  // (one core's: cid still holds core.id)
    k.li(t0, l.vaddr), k.li(t1, l.haddr), k.li(t2, l.rows), k.li(t3, l.rowbytes), k.li(t4, l.hstride);
    k.li(t5, l.vstride), e.dma_ld(t0, t1, t2, t3, t4, t5);
    k.bind(other);
  }
  // Later kernels' background loads (dma.ld bg), each by its core. A background load waits at issue for one of the
  // queue's `engines` background engines, and the queue issues in order, so one beyond them would hold the next
  // items' loads behind the transfers before it: with pipe_items (on at most 8 cores), each core issues its first
  // `engines` after its first item's loads and the rest spread over its later items, a share after each one's
  // loads (the same loads in the same order: each still signals where it did).
  std::vector<DmaLoad> first;
  std::map<std::pair<int64_t, int64_t>, std::vector<DmaLoad>> later;  // by (core, the item's index on it)
  if (L.pipe_items && c.P <= 8 && !a.background.empty()) {
    for (int64_t core = 0; core < c.P; ++core) {
      std::vector<DmaLoad> own;
      for (const DmaLoad& l : a.background)
        if (l.core < 0 || l.core == core) own.push_back(l), own.back().core = c.P > 1 ? static_cast<int>(core) : -1;
      const int64_t n = L.plan.items > core ? cdiv(L.plan.items - core, c.P) : 0, rest = std::ssize(own) - c.engines;
      for (int64_t i = 0; i < std::ssize(own); ++i) {
        if (i < c.engines || n <= 1)
          first.push_back(own[static_cast<size_t>(i)]);
        else
          later[{core, 1 + (i - c.engines) * (n - 1) / rest}].push_back(own[static_cast<size_t>(i)]);
      }
    }
  } else {
    first = a.background;
  }
  auto background = [&](const std::vector<DmaLoad>& loads, bool by_core) {
    for (const DmaLoad& l : loads) {
      const isa::Label other = k.label();
      if (by_core && l.core >= 0) k.li(t0, l.core), e.bne(cid, t0, other);
      k.li(t0, l.vaddr), k.li(t1, l.haddr), k.li(t2, l.rows), k.li(t3, l.rowbytes), k.li(t4, l.hstride);
      k.li(t5, l.vstride);
      e.dma_ld(t0, t1, t2, t3, t4, t5, {.bg = true, .signal = l.signal > 0 ? isa::sem(l.signal) : isa::Sem{}});
      k.bind(other);
    }
  };
  background(first, true);
  k.bind(item);
  init_stats(g);
  soft(n, g);
  k.bind(block);
  {
    const isa::Label last = k.label();
    k.addi(kn, n, 1), e.bge(kn, nblk, last);
    next_block(kn);
    by_block(n, [&](int64_t kt) { pv_product(kvn, g, kt); });
    k.addi(kn, n, 1), k.addi(t8, g, 1);
    soft(kn, t8);
    oupd();
    k.addi(n, n, 1), k.addi(g, g, 1), k.addi(kvn, kvm, 0);
    e.jmp(block);
    // The item's last block n.
    k.bind(last);
    if (L.pipe_items) {
      const isa::Label alone = k.label();
      // This item's Q buffer, output row address and rows (kn, cid and bias are free from here to its O / l).
      k.addi(kn, qv, 0), k.addi(cid, oh, 0), k.addi(bias, mt, 0);
      k.addi(t, t, c.P);
      k.li(t0, L.plan.items), e.bge(t, t0, alone);
      item_delay();
      setup();
      next_block(zero);
      if (!later.empty()) {  // the background loads after this item's (t7: its core, t6: its index there)
        k.li(t6, c.P), k.rem(t7, t, t6), k.div(t6, t, t6);
        for (const auto& [at, loads] : later) {
          const isa::Label other = k.label();
          if (c.P > 1) k.li(t0, at.first), e.bne(t7, t0, other);
          k.li(t0, at.second), e.bne(t6, t0, other);
          background(loads, false);
          k.bind(other);
        }
      }
      // This item's P V product, then the next item's softmax (its S product was issued first) while the matrix
      // units compute it, then this item's O update and O / l (the next item's l is the other row).
      k.addi(b, bias, 0);  // (soft takes bias; b is free until the next setup)
      by_block(n, [&](int64_t kt) { pv_product(kvn, g, kt); });
      k.addi(t8, g, 1), init_stats(t8);
      k.addi(t8, g, 1), soft(zero, t8);
      oupd();
      finish(kn, cid, b);
      k.set(n, 0), k.addi(g, g, 1), k.addi(kvn, kvm, 0);
      e.jmp(block);  // (the item's one block is its last)
      k.bind(alone);  // no next item on this core
      pv_and_update();
      finish(qv, oh, mt);
      e.jmp(done);
    } else {  // the next item's loads after this one's P V product
      pv_and_update();
      finish(qv, oh, mt);
      k.addi(g, g, 1);
      k.addi(t, t, c.P);
      k.li(t0, L.plan.items), e.bge(t, t0, done);
      item_delay();
      setup();
      first_block();
      e.jmp(item);
    }
  }
  k.bind(done);
  e.halt();
  return e.finish();
}

}  // namespace

AttentionPlan attention_chip_plan(const AttentionChip& a, const std::map<std::string, int64_t>& symbols) {
  if (a.vector_unit) return attention_vpu_plan(a, symbols);
  const Chip c = chip_of(a, symbols);
  return plan_of(a, c).plan;
}

double attention_chip_estimate(const AttentionChip& a, const std::map<std::string, int64_t>& symbols) {
  return attention_chip_plan(a, symbols).estimate;
}

isa::Program attention_chip_kernel(const AttentionChip& a, const std::map<std::string, int64_t>& symbols,
                                   const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                                   uint64_t hbm_base) {
  if (a.vector_unit) return attention_vpu_kernel(a, symbols, tensor_addr, base_pc, hbm_base);
  const Chip c = chip_of(a, symbols);
  const Layout L = plan_of(a, c);
  for (const auto* loads : {&a.prefetch, &a.background})  // other kernels' loads: into VMEM this one leaves alone
    for (const DmaLoad& l : *loads)
      if (l.rows > 0 && l.vaddr < L.plan.vmem_end)
        throw std::invalid_argument(std::string("attention_chip: a ") +
                                    (loads == &a.prefetch ? "prefetch" : "background load") + " into VMEM " +
                                    std::to_string(l.vaddr) + ", below the kernel's own end " +
                                    std::to_string(L.plan.vmem_end));
  return generate(a, c, L, tensor_addr, base_pc, hbm_base);
}

std::string attention_chip_source(const AttentionChip& a, const std::map<std::string, int64_t>& symbols) {
  if (a.vector_unit) return attention_vpu_source(a, symbols);
  const Chip c = chip_of(a, symbols);
  const Layout L = plan_of(a, c);
  return summary(a, c, L) + isa::disassemble(generate(a, c, L, {}, 0, 0));
}

}  // namespace tpusim::kernels
