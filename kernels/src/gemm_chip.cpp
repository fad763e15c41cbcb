// The whole-chip GEMM generator (gemm_chip.h has the contract and the schedule).
#include "tpusim/kernels/gemm_chip.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "tpusim/isa/assembler.h"

namespace tpusim::kernels {
namespace {

int64_t symbol(const std::map<std::string, int64_t>& s, const char* name) {
  auto it = s.find(name);
  if (it == s.end()) throw std::invalid_argument(std::string("gemm_chip: chip symbol ") + name + " missing");
  return it->second;
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

}  // namespace

static std::string strips_source(const GemmChip& g, const std::map<std::string, int64_t>& s) {
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  const int64_t P = g.cores ? g.cores : symbol(s, "CORES");
  const int64_t U = g.mxus ? g.mxus : symbol(s, "MXUS");
  if (g.m < 1 || g.k < 1 || g.n < 1) throw std::invalid_argument("gemm_chip: M, K and N must be positive");
  if (g.in != isa::DType::I8 && g.in != isa::DType::BF16)
    throw std::invalid_argument("gemm_chip: inputs must be i8 or bf16");
  if (P < 1 || P > symbol(s, "CORES"))
    throw std::invalid_argument("gemm_chip: " + std::to_string(P) + " cores asked, the chip has " +
                                std::to_string(symbol(s, "CORES")));
  if (U < 1 || U > symbol(s, "MXUS") || U > 7)
    throw std::invalid_argument("gemm_chip: " + std::to_string(U) + " matrix units per core asked (the chip has " +
                                std::to_string(symbol(s, "MXUS")) + "; the kernel's semaphores allow 7)");
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const char* in = isa::dtype_name(g.in);
  const char* acc_dt = g.in == isa::DType::I8 ? "i32" : "f32";
  const int64_t NG = cdiv(g.n, U * C);       // strip groups
  const int64_t PANEL = align64(R * U * C * E);
  const int64_t TM_VMEM = (VMEM - 2 * PANEL - 256) / (2 * g.k * E + 2 * C * O);
  const int64_t TM_MAX = std::min(ACC / 2, TM_VMEM);
  if (TM_MAX < 1)
    throw std::invalid_argument("gemm_chip: a row of a (K = " + std::to_string(g.k) +
                                ") and the operand tiles do not fit in VMEM (" + std::to_string(VMEM) + " bytes)");
  const int64_t TM = cdiv(g.m, cdiv(g.m, TM_MAX));
  const int64_t A_BYTES = align64(TM * g.k * E), C_BYTES = align64(TM * C * O);
  const int64_t VA0 = 0, VB0 = VA0 + 2 * A_BYTES, VC0 = VB0 + 2 * PANEL;
  const int64_t KT = cdiv(g.k, R), PR = cdiv(TM, KT);  // folds; rows of a per piece of the next row tile
  // Semaphores: unit j uses FREE 1+4j, FULL 2+4j, AFREE 3+4j, AFULL 4+4j; then CFREE, CFULL, AREG.
  auto FREE = [](int64_t j) { return 1 + 4 * j; };
  auto FULL = [](int64_t j) { return 2 + 4 * j; };
  auto AFREE = [](int64_t j) { return 3 + 4 * j; };
  auto AFULL = [](int64_t j) { return 4 + 4 * j; };
  const int64_t CFREE = 4 * U + 1, CFULL = 4 * U + 2, AREG = 4 * U + 3;

  std::ostringstream o;
  o << "# gemm_chip: c[" << g.m << "," << g.n << "] = a[" << g.m << "," << g.k << "] @ b[" << g.k << "," << g.n
    << "] on " << P << " cores x " << U << " matrix units (kernels/gemm_chip.h)\n";
  o << ".name \"gemm_chip\"\n.cores " << P << "\n";
  o << ".input a, " << in << ", [" << g.m << ", " << g.k << "]\n";
  o << ".input b, " << in << ", [" << g.k << ", " << g.n << "]\n";
  o << ".output c, " << isa::dtype_name(g.out) << ", [" << g.m << ", " << g.n << "]\n";
  o << R"(.reg cid, r1
.reg g, r2
.reg m0, r3
.reg mt, r4
.reg k0, r5
.reg kt, r6
.reg n0, r7
.reg pw, r8
.reg slot, r9
.reg aslot, r10
.reg accslot, r11
.reg cslot, r12
.reg abase, r13
.reg va, r14
.reg vb, r15
.reg t0, r16
.reg t1, r17
.reg t2, r18
.reg t3, r19
.reg nt, r20
.reg vc, r21
.reg first, r22
.reg one, r23
)";
  for (int64_t j = 0; j < U; ++j)
    o << "    sem.set s" << FREE(j) << ", 2\n    sem.set s" << FULL(j) << ", 0\n    sem.set s" << AFREE(j)
      << ", 2\n    sem.set s" << AFULL(j) << ", 0\n";
  o << "    sem.set s" << CFREE << ", 2\n    sem.set s" << CFULL << ", 0\n    sem.set s" << AREG << ", 2\n";
  o << "    core.id cid\n    li one, 1\n    li slot, 0\n    li aslot, 0\n    li accslot, 0\n    li cslot, 0\n"
    << "    li m0, 0\n";
  // Row tile 0's a, whole rows (one contiguous transfer), unless this core has no group.
  o << "    li t0, " << NG << "\n    bge cid, t0, rowtile\n    li t0, " << std::min(TM, g.m) << "\n    li t1, "
    << g.k * E << "\n    li t2, a\n    li va, " << VA0 << "\n    dma.ld va, t2, t0, t1, t1, t1, wait=s" << AREG
    << "\n";
  o << "rowtile:\n    li t0, " << g.m << "\n    sub mt, t0, m0\n    li t0, " << TM << "\n    min mt, mt, t0\n"
    << "    muli abase, aslot, " << A_BYTES << "\n    addi abase, abase, " << VA0 << "\n"
    << "    li first, 1\n    addi g, cid, 0\n";
  o << "group:\n    li t0, " << NG << "\n    bge g, t0, rowdone\n"
    << "    muli n0, g, " << U * C << "\n    li t0, " << g.n << "\n    sub pw, t0, n0\n    li t0, " << U * C
    << "\n    min pw, pw, t0\n    li k0, 0\n";
  // Strip j exists in this group when j*C < pw.
  auto skip_unless_strip = [&](int64_t j, const std::string& label) {
    if (j == 0) return;
    o << "    li t0, " << j * C << "\n    bge t0, pw, " << label << "\n";
  };
  o << "fold:\n    li t0, " << g.k << "\n    sub kt, t0, k0\n    li t0, " << R << "\n    min kt, kt, t0\n"
    << "    muli va, k0, " << E << "\n    add va, va, abase\n    li t3, " << g.k * E << "\n";
  // In the row tile's first group, fold f also loads piece f of the next row tile's a (PR whole rows,
  // contiguous) into the other A region: the next row tile's a streams in while this one computes, and whole
  // rows read HBM sequentially. The first piece waits `a region free` (the row tile before this one is done).
  o << "    beq first, r0, panel\n    addi t0, m0, " << TM << "\n    li t1, " << g.m << "\n    bge t0, t1, panel\n"
    << "    sub t1, t1, t0\n    li t2, " << TM << "\n    min t1, t1, t2\n"      // t1 = rows of the next tile
    << "    li t2, " << R << "\n    div t2, k0, t2\n    muli t2, t2, " << PR << "\n"  // t2 = first row of piece
    << "    bge t2, t1, panel\n    sub t1, t1, t2\n    li vc, " << PR << "\n    min t1, t1, vc\n"  // t1 = its rows
    << "    add t0, t0, t2\n    muli t0, t0, " << g.k * E << "\n    li vc, a\n    add t0, t0, vc\n"
    << "    sub vc, one, aslot\n    muli vc, vc, " << A_BYTES << "\n    addi vc, vc, " << VA0 << "\n"
    << "    muli t2, t2, " << g.k * E << "\n    add vc, vc, t2\n    li t2, " << g.k * E << "\n"
    << "    bne k0, r0, apiece\n    dma.ld vc, t0, t1, t2, t2, t2, wait=s" << AREG << "\n    jmp panel\n"
    << "apiece:\n    dma.ld vc, t0, t1, t2, t2, t2\n";
  o << "panel:\n    muli vb, slot, " << PANEL << "\n    addi vb, vb, " << VB0 << "\n";
  for (int64_t j = 1; j < U; ++j) {
    const std::string l = "free" + std::to_string(j);
    skip_unless_strip(j, l);
    o << "    dmain.sync wait=s" << FREE(j) << "\n" << l << ":\n";
  }
  o << "    muli t0, k0, " << g.n << "\n    add t0, t0, n0\n    muli t0, t0, " << E
    << "\n    li t1, b\n    add t0, t0, t1\n    muli t1, pw, " << E << "\n    li t2, " << g.n * E
    << "\n    li vc, " << U * C * E << "\n    dma.ld vb, t0, kt, t1, t2, vc, wait=s" << FREE(0) << ", signal=s"
    << FULL(0) << "\n";
  for (int64_t j = 1; j < U; ++j) {
    const std::string l = "full" + std::to_string(j);
    skip_unless_strip(j, l);
    o << "    dmain.sync signal=s" << FULL(j) << "\n" << l << ":\n";
  }
  for (int64_t j = 0; j < U; ++j) {
    const std::string l = "mm" + std::to_string(j);
    skip_unless_strip(j, l);
    o << "    li t0, " << j * C << "\n    sub nt, pw, t0\n    li t0, " << C << "\n    min nt, nt, t0\n"
      << "    addi t0, vb, " << j * C * E << "\n    li t2, " << U * C * E << "\n"
      << "    mxu.lw t0, kt, nt, t2, " << in << ", mxu=" << j << ", wait=s" << FULL(j) << ", signal=s" << FREE(j)
      << "\n    muli t1, accslot, " << TM << "\n"
      << "    beq k0, r0, first" << j << "\n"
      << "    mxu.mm va, mt, t1, t3, " << in << ", accumulate, mxu=" << j << "\n    jmp " << l << "\n"
      << "first" << j << ":\n    mxu.mm va, mt, t1, t3, " << in << ", mxu=" << j << ", wait=s" << AFREE(j) << "\n"
      << l << ":\n";
  }
  o << "    sub slot, one, slot\n    addi k0, k0, " << R << "\n    li t0, " << g.k << "\n    blt k0, t0, fold\n"
    << "    li first, 0\n";
  // Drain every strip of the group.
  for (int64_t j = 0; j < U; ++j) {
    const std::string l = "drained" + std::to_string(j);
    skip_unless_strip(j, l);
    o << "    mxu.sync mxu=" << j << ", signal=s" << AFULL(j) << "\n"
      << "    li t0, " << j * C << "\n    sub nt, pw, t0\n    li t0, " << C << "\n    min nt, nt, t0\n"
      << "    muli vc, cslot, " << C_BYTES << "\n    addi vc, vc, " << VC0 << "\n"
      << "    muli t0, accslot, " << TM << "\n    addi t0, t0, " << j * ACC << "\n    muli t1, nt, " << O << "\n"
      << "    vpu.sync wait=s" << CFREE << "\n"
      << "    vpu.acc vc, t0, mt, nt, t1, r0, r0, " << acc_dt << ", " << isa::dtype_name(g.out) << ", wait=s"
      << AFULL(j) << ", signal=s" << AFREE(j) << "\n"
      << "    vpu.sync signal=s" << CFULL << "\n"
      << "    muli t0, m0, " << g.n << "\n    add t0, t0, n0\n    addi t0, t0, " << j * C << "\n    muli t0, t0, " << O
      << "\n    li t2, c\n    add t0, t0, t2\n    li t2, " << g.n * O << "\n"
      << "    dma.st t0, vc, mt, t1, t2, t1, wait=s" << CFULL << ", signal=s" << CFREE << "\n"
      << "    sub cslot, one, cslot\n" << l << ":\n";
  }
  o << "    sub accslot, one, accslot\n    addi g, g, " << P << "\n    jmp group\n";
  o << "rowdone:\n    vpu.sync signal=s" << AREG << "\n    sub aslot, one, aslot\n    addi m0, m0, " << TM
    << "\n    li t0, " << g.m << "\n    blt m0, t0, rowtile\n";
  return o.str();
}

namespace {

// The tiled schedule's shape: TM rows x W = U*S*C columns per tile, K in chunks of KC.
struct TilePlan {
  int64_t tm = 0, s = 0, kc = 0;
  int64_t abuf = 2;     // accumulator regions per unit: 2 = the next tile's matrix work overlaps this one's drain
  double estimate = 0;  // cycles (see choose_tiles)
};

// The strips schedule's row tile bound (0: a row of a does not fit).
int64_t strips_tm_max(const GemmChip& g, int64_t R, int64_t C, int64_t ACC, int64_t VMEM, int64_t U) {
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const int64_t PANEL = align64(R * U * C * E);
  const int64_t TM_VMEM = (VMEM - 2 * PANEL - 256) / (2 * g.k * E + 2 * C * O);
  return std::max<int64_t>(0, std::min(ACC / 2, TM_VMEM));
}

// Chooses TM and S for the tiled schedule by an estimate of its time: waves = ceil(tiles / P); a tile's matrix
// work is KT folds x S strips x max(rows, R) cycles on each unit (a fold streams the tile's rows once per strip;
// a weight load, R cycles, hides behind a stream of at least R rows); its memory share is the bytes it loads
// (its a rows and b columns over all of K) times the cores loading at once, over the HBM's bytes per cycle.
// With a cache in front of HBM (CACHE_BYTES_PER_CYCLE > 0) tiles re-read from it, so both bandwidths count.
// Accumulators are double-buffered (2 regions of S strips x TM rows) or, for twice the rows, single: the tile's
// drain (U*S strips of TM x C at VPU_WIDTH per cycle) then adds to its time instead of overlapping the next.
// KC is the largest multiple of R whose two slots and the two C buffers fit VMEM.
TilePlan choose_tiles(const GemmChip& g, int64_t R, int64_t C, int64_t ACC, int64_t VMEM, int64_t P, int64_t U,
                      int64_t mem_bpc, int64_t vpu_width) {
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const int64_t KT = cdiv(g.k, R);
  TilePlan best;
  for (int64_t abuf = 2; abuf >= 1; --abuf)
  for (int64_t S = 1; S <= 8; S *= 2) {
    if (S > 1 && (S / 2) * U * C >= g.n) break;  // the tile would be wider than the whole of N
    for (int64_t cap = ACC / (abuf * S); cap >= 1; cap /= 2) {
      const int64_t tm = cdiv(g.m, cdiv(g.m, cap)), W = U * S * C;
      const int64_t fixed = 2 * align64(tm * C * O) + 256;
      const int64_t per_k = 2 * (tm + W) * E;  // bytes of both slots per element of K
      if (VMEM <= fixed) continue;
      int64_t kc = std::min((VMEM - fixed) / per_k / R * R, cdiv(g.k, R) * R);
      if (kc < R) continue;
      const double tiles = static_cast<double>(cdiv(g.m, tm) * cdiv(g.n, W));
      const double waves = std::ceil(tiles / static_cast<double>(P));
      const double compute = static_cast<double>(KT * S * std::max(tm, R));
      const double bytes = static_cast<double>((tm + std::min(W, g.n)) * g.k * E);
      const double memory = bytes * std::min(tiles, static_cast<double>(P)) / static_cast<double>(mem_bpc);
      const double drain = static_cast<double>(U * S * tm * C) / static_cast<double>(vpu_width);
      const double est = waves * (std::max(compute, memory) + (abuf == 1 ? drain : 0.0)) + drain;
      if (best.tm == 0 || est < best.estimate) best = TilePlan{tm, S, kc, abuf, est};
      if (tm == 1) break;
    }
  }
  if (best.tm == 0)
    throw std::invalid_argument("gemm_chip: no tile of the tiled schedule fits VMEM (" + std::to_string(VMEM) +
                                " bytes) with " + std::to_string(R) + " rows of K");
  return best;
}

std::string tiles_source(const GemmChip& g, const std::map<std::string, int64_t>& s, int64_t P, int64_t U) {
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  auto optional = [&s](const char* name, int64_t otherwise) {
    auto it = s.find(name);
    return it == s.end() ? otherwise : it->second;
  };
  const int64_t mem_bpc = std::max<int64_t>(1, optional("HBM_BYTES_PER_CYCLE", 64) + optional("CACHE_BYTES_PER_CYCLE", 0));
  const TilePlan plan = choose_tiles(g, R, C, ACC, VMEM, P, U, mem_bpc, std::max<int64_t>(1, optional("VPU_WIDTH", 128)));
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const char* in = isa::dtype_name(g.in);
  const char* acc_dt = g.in == isa::DType::I8 ? "i32" : "f32";
  const int64_t TM = plan.tm, S = plan.s, KC = plan.kc, W = U * S * C, ABUF = plan.abuf;
  const int64_t NC = cdiv(g.n, W), T = cdiv(g.m, TM) * NC;  // column tiles, tiles
  const int64_t NK = cdiv(g.k, KC), KLAST = g.k - (NK - 1) * KC;
  const int64_t A_SLOT = align64(TM * KC * E), SLOT = A_SLOT + align64(KC * W * E);
  const int64_t C_BYTES = align64(TM * C * O);
  const int64_t VA0 = 0, VC0 = 2 * SLOT;
  const bool partial = g.n % W != 0;  // the last column tile lacks some strips
  auto FREE = [](int64_t j) { return 1 + 4 * j; };
  auto FULL = [](int64_t j) { return 2 + 4 * j; };
  auto AFREE = [](int64_t j) { return 3 + 4 * j; };
  auto AFULL = [](int64_t j) { return 4 + 4 * j; };
  const int64_t CFREE = 4 * U + 1, CFULL = 4 * U + 2;
  int label = 0;
  auto fresh = [&label]() { return "l" + std::to_string(label++); };

  std::ostringstream o;
  o << "# gemm_chip (tiles): c[" << g.m << "," << g.n << "] = a[" << g.m << "," << g.k << "] @ b[" << g.k << ","
    << g.n << "] on " << P << " cores x " << U << " matrix units: " << T << " tiles of " << TM << " x " << W
    << " (" << S << " strips per unit, " << ABUF << " accumulator regions), K in chunks of " << KC
    << " (kernels/gemm_chip.h)\n";
  o << ".name \"gemm_chip\"\n.cores " << P << "\n";
  o << ".input a, " << in << ", [" << g.m << ", " << g.k << "]\n";
  if (g.trans_b)
    o << ".input b, " << in << ", [" << g.n << ", " << g.k << "]\n";
  else
    o << ".input b, " << in << ", [" << g.k << ", " << g.n << "]\n";
  o << ".output c, " << isa::dtype_name(g.out) << ", [" << g.m << ", " << g.n << "]\n";
  o << R"(.reg cid, r1
.reg t, r2
.reg m0, r3
.reg mt, r4
.reg k0, r5
.reg kt, r6
.reg n0, r7
.reg pw, r8
.reg slot, r9
.reg accslot, r10
.reg cslot, r11
.reg ah, r12
.reg bh, r13
.reg va, r14
.reg vb, r15
.reg t0, r16
.reg t1, r17
.reg t2, r18
.reg nt, r19
.reg one, r20
.reg ar, r21
.reg astr, r22
.reg wstr, r23
.reg vc, r24
)";
  for (int64_t j = 0; j < U; ++j)
    o << "    sem.set s" << FREE(j) << ", 2\n    sem.set s" << FULL(j) << ", 0\n    sem.set s" << AFREE(j)
      << ", " << ABUF << "\n    sem.set s" << AFULL(j) << ", 0\n";
  o << "    sem.set s" << CFREE << ", 2\n    sem.set s" << CFULL << ", 0\n";
  o << "    core.id cid\n    li one, 1\n    li slot, 0\n    li accslot, 0\n    li cslot, 0\n    li astr, " << KC * E
    << "\n    li wstr, " << W * E << "\n    addi t, cid, 0\n    li nt, " << C << "\n";
  // Strip q (of U*S) of the tile: skipped where the last column tile lacks it; nt = its columns.
  auto strip_guard = [&](int64_t q, const std::string& skip) {
    if (!partial) return;  // nt = C, set once
    o << "    li t0, " << q * C << "\n    bge t0, pw, " << skip << "\n    sub nt, pw, t0\n    li t0, " << C
      << "\n    min nt, nt, t0\n";
  };
  auto unit_guard = [&](int64_t j, const std::string& skip) {  // unit j has at least one strip in this tile
    if (partial && j > 0) o << "    li t0, " << j * S * C << "\n    bge t0, pw, " << skip << "\n";
  };
  // One chunk of kc elements of K at k0 (register), the first of the tile or not.
  auto chunk = [&](int64_t kc, bool first) {
    o << "    muli va, slot, " << SLOT << "\n    addi va, va, " << VA0 << "\n    addi vb, va, " << A_SLOT << "\n";
    for (int64_t j = 1; j < U; ++j) {
      const std::string l = fresh();
      unit_guard(j, l);
      o << "    dmain.sync wait=s" << FREE(j) << "\n" << l << ":\n";
    }
    o << "    muli t0, k0, " << E << "\n    add t0, t0, ah\n    li t1, " << kc * E << "\n    li t2, " << g.k * E
      << "\n    dma.ld va, t0, mt, t1, t2, astr, wait=s" << FREE(0) << "\n";
    if (g.trans_b)  // pw rows of b (output columns), kc elements of K each, KC apart in VMEM
      o << "    muli t0, k0, " << E << "\n    add t0, t0, bh\n    li t1, " << kc * E << "\n    li t2, " << g.k * E
        << "\n    dma.ld vb, t0, pw, t1, t2, astr, signal=s" << FULL(0) << "\n";
    else
      o << "    muli t0, k0, " << g.n * E << "\n    add t0, t0, bh\n    li kt, " << kc << "\n    muli t1, pw, " << E
        << "\n    li t2, " << g.n * E << "\n    dma.ld vb, t0, kt, t1, t2, wstr, signal=s" << FULL(0) << "\n";
    for (int64_t j = 1; j < U; ++j) {
      const std::string l = fresh();
      unit_guard(j, l);
      o << "    dmain.sync signal=s" << FULL(j) << "\n" << l << ":\n";
    }
    const int64_t folds = cdiv(kc, R);
    for (int64_t f = 0; f < folds; ++f) {
      o << "    li kt, " << std::min(R, kc - f * R) << "\n";
      for (int64_t j = 0; j < U; ++j)
        for (int64_t sidx = 0; sidx < S; ++sidx) {
          const int64_t q = j * S + sidx;
          const std::string l = fresh();
          strip_guard(q, l);
          if (g.trans_b)  // the strip's C rows of the panel, from element f*R of each
            o << "    addi t1, vb, " << (q * C * KC + f * R) * E << "\n    mxu.lw t1, kt, nt, astr, " << in
              << ", trans, mxu=" << j;
          else
            o << "    addi t1, vb, " << (f * R * W + q * C) * E << "\n    mxu.lw t1, kt, nt, wstr, " << in
              << ", mxu=" << j;
          if (f == 0 && sidx == 0) o << ", wait=s" << FULL(j);
          o << "\n    addi t1, va, " << f * R * E << "\n    addi t2, ar, " << sidx * TM << "\n    mxu.mm t1, mt, t2, astr, "
            << in << (first && f == 0 ? "" : ", accumulate") << ", mxu=" << j;
          if (first && f == 0 && sidx == 0) o << ", wait=s" << AFREE(j);
          // The unit's last read of the slot frees it. With a partial tile, the unit's last present strip
          // may come before S - 1: the signal then goes on a sync after the strips (below).
          if (f == folds - 1 && sidx == S - 1) o << ", signal=s" << FREE(j);
          o << "\n" << l << ":\n";
        }
      if (partial && f == folds - 1)
        for (int64_t j = 0; j < U; ++j) {  // units whose last strip is missing free the slot here
          const std::string l = fresh();
          if (j > 0) o << "    li t0, " << j * S * C << "\n    bge t0, pw, " << l << "\n";
          o << "    li t0, " << (j * S + S - 1) * C << "\n    blt t0, pw, " << l << "\n    mxu.sync mxu=" << j
            << ", signal=s" << FREE(j) << "\n" << l << ":\n";
        }
    }
    o << "    sub slot, one, slot\n";
  };

  o << "tile:\n    li t0, " << T << "\n    bge t, t0, done\n"
    << "    li t0, " << NC << "\n    div t1, t, t0\n    muli t2, t1, " << NC << "\n    sub t2, t, t2\n"  // row, column tile
    << "    muli m0, t1, " << TM << "\n    li t0, " << g.m << "\n    sub mt, t0, m0\n    li t0, " << TM
    << "\n    min mt, mt, t0\n"
    << "    muli n0, t2, " << W << "\n    li t0, " << g.n << "\n    sub pw, t0, n0\n    li t0, " << W
    << "\n    min pw, pw, t0\n"
    << "    muli ah, m0, " << g.k * E << "\n    li t0, a\n    add ah, ah, t0\n"
    << "    muli bh, n0, " << (g.trans_b ? g.k * E : E) << "\n    li t0, b\n    add bh, bh, t0\n"
    << "    muli ar, accslot, " << S * TM << "\n    li k0, 0\n";
  chunk(NK == 1 ? g.k : KC, true);
  if (NK > 2) {
    o << "    li k0, " << KC << "\nmid:\n";
    chunk(KC, false);
    o << "    addi k0, k0, " << KC << "\n    li t0, " << (NK - 1) * KC << "\n    blt k0, t0, mid\n";
  }
  if (NK > 1) {
    o << "    li k0, " << (NK - 1) * KC << "\n";
    chunk(KLAST, false);
  }
  // Drain: every strip of every unit into a C buffer, stored into c.
  for (int64_t j = 0; j < U; ++j) {
    const std::string lu = fresh();
    unit_guard(j, lu);
    o << "    mxu.sync mxu=" << j << ", signal=s" << AFULL(j) << "\n    vpu.sync wait=s" << AFULL(j) << "\n";
    for (int64_t sidx = 0; sidx < S; ++sidx) {
      const int64_t q = j * S + sidx;
      const std::string l = fresh();
      strip_guard(q, l);
      o << "    muli vc, cslot, " << C_BYTES << "\n    addi vc, vc, " << VC0 << "\n"
        << "    addi t0, ar, " << j * ACC + sidx * TM << "\n    muli t1, nt, " << O << "\n"
        << "    vpu.sync wait=s" << CFREE << "\n"
        << "    vpu.acc vc, t0, mt, nt, t1, r0, r0, " << acc_dt << ", " << isa::dtype_name(g.out) << "\n"
        << "    vpu.sync signal=s" << CFULL << "\n"
        << "    muli t0, m0, " << g.n << "\n    add t0, t0, n0\n    addi t0, t0, " << q * C << "\n    muli t0, t0, "
        << O << "\n    li t2, c\n    add t0, t0, t2\n    li t2, " << g.n * O << "\n"
        << "    dma.st t0, vc, mt, t1, t2, t1, wait=s" << CFULL << ", signal=s" << CFREE << "\n"
        << "    sub cslot, one, cslot\n" << l << ":\n";
    }
    o << "    vpu.sync signal=s" << AFREE(j) << "\n" << lu << ":\n";
  }
  if (ABUF == 2) o << "    sub accslot, one, accslot\n";
  o << "    addi t, t, " << P << "\n    jmp tile\ndone:\n    halt\n";
  return o.str();
}

}  // namespace

std::string gemm_chip_source(const GemmChip& g, const std::map<std::string, int64_t>& s) {
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  const int64_t P = g.cores ? g.cores : symbol(s, "CORES");
  const int64_t U = g.mxus ? g.mxus : symbol(s, "MXUS");
  if (g.m < 1 || g.k < 1 || g.n < 1) throw std::invalid_argument("gemm_chip: M, K and N must be positive");
  if (g.in != isa::DType::I8 && g.in != isa::DType::BF16)
    throw std::invalid_argument("gemm_chip: inputs must be i8 or bf16");
  if (P < 1 || P > symbol(s, "CORES"))
    throw std::invalid_argument("gemm_chip: " + std::to_string(P) + " cores asked, the chip has " +
                                std::to_string(symbol(s, "CORES")));
  if (U < 1 || U > symbol(s, "MXUS") || U > 7)
    throw std::invalid_argument("gemm_chip: " + std::to_string(U) + " matrix units per core asked (the chip has " +
                                std::to_string(symbol(s, "MXUS")) + "; the kernel's semaphores allow 7)");
  GemmSchedule schedule = g.schedule;
  if (g.trans_b && schedule == GemmSchedule::Strips)
    throw std::invalid_argument("gemm_chip: a transposed b (trans_b) needs the tiled schedule");
  if (schedule == GemmSchedule::Auto && g.trans_b) schedule = GemmSchedule::Tiles;
  if (schedule == GemmSchedule::Auto) {
    const bool fits = strips_tm_max(g, R, C, ACC, VMEM, U) >= 1;
    schedule = fits && cdiv(g.n, U * C) >= P ? GemmSchedule::Strips : GemmSchedule::Tiles;
  }
  if (schedule == GemmSchedule::Strips) return strips_source(g, s);
  if (ACC < 2) throw std::invalid_argument("gemm_chip: the tiled schedule needs at least 2 accumulator rows");
  return tiles_source(g, s, P, U);
}

isa::Program gemm_chip_kernel(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  isa::AsmOptions opts;
  return isa::assemble(gemm_chip_source(g, symbols), "gemm_chip.s", opts);
}

}  // namespace tpusim::kernels
