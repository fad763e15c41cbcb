// The whole-chip GEMM generator (gemm_chip.h has the contract and the schedule).
#include "tpusim/kernels/gemm_chip.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/emitter.h"

namespace tpusim::kernels {
namespace {

int64_t symbol(const std::map<std::string, int64_t>& s, const char* name) {
  auto it = s.find(name);
  if (it == s.end()) throw std::invalid_argument(std::string("gemm_chip: chip symbol ") + name + " missing");
  return it->second;
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

// Where a kernel goes: its tensors at `addr` where given, the others placed from hbm_base up as the assembler
// places them; its code from instruction base_pc.
struct Placing {
  const std::map<std::string, uint64_t>& addr;
  uint64_t base_pc = 0, hbm_base = 0;
  int64_t declare(isa::Emitter& e, const char* name, isa::TensorKind kind, isa::DType dt,
                  std::vector<int64_t> shape) const {
    return static_cast<int64_t>(e.declare_placed(isa::TensorDecl{name, kind, dt, std::move(shape)}, addr, hbm_base));
  }
};

}  // namespace

namespace {

// The strips schedule's registers (r0 holds 0).
namespace strips_regs {
using isa::Reg;
constexpr Reg zero{0}, cid{1}, g{2}, m0{3}, mt{4}, k0{5}, kt{6}, n0{7}, pw{8}, slot{9}, aslot{10}, accslot{11},
    cslot{12}, abase{13}, va{14}, vb{15}, t0{16}, t1{17}, t2{18}, t3{19}, nt{20}, vc{21}, first{22}, one{23};
}  // namespace strips_regs

// The strips schedule (gemm_chip.h); resolve() has checked the shape, the types, P and U.
isa::Program strips_kernel(const GemmChip& gc, const std::map<std::string, int64_t>& s, int64_t P, int64_t U,
                           const Placing& pl, std::string* summary) {
  using namespace strips_regs;
  using isa::DType;
  using isa::Sem;
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  const int64_t E = isa::dtype_size(gc.in), O = isa::dtype_size(gc.out);
  const DType in = gc.in, acc_dt = gc.in == DType::I8 ? DType::I32 : DType::F32;
  const int64_t NG = cdiv(gc.n, U * C);       // strip groups
  const int64_t PANEL = align64(R * U * C * E);
  const int64_t TM_VMEM = (VMEM - 2 * PANEL - 256) / (2 * gc.k * E + 2 * C * O);
  const int64_t TM_MAX = std::min(ACC / 2, TM_VMEM);
  if (TM_MAX < 1)
    throw std::invalid_argument("gemm_chip: a row of a (K = " + std::to_string(gc.k) +
                                ") and the operand tiles do not fit in VMEM (" + std::to_string(VMEM) + " bytes)");
  const int64_t TM = cdiv(gc.m, cdiv(gc.m, TM_MAX));
  const int64_t A_BYTES = align64(TM * gc.k * E), C_BYTES = align64(TM * C * O);
  const int64_t VA0 = 0, VB0 = VA0 + 2 * A_BYTES, VC0 = VB0 + 2 * PANEL;
  const int64_t KT = cdiv(gc.k, R), PR = cdiv(TM, KT);  // folds; rows of a per piece of the next row tile
  // Semaphores: unit j uses FREE 1+4j, FULL 2+4j, AFREE 3+4j, AFULL 4+4j; then CFREE, CFULL, AREG.
  auto FREE = [](int64_t j) { return Sem{static_cast<int>(1 + 4 * j)}; };
  auto FULL = [](int64_t j) { return Sem{static_cast<int>(2 + 4 * j)}; };
  auto AFREE = [](int64_t j) { return Sem{static_cast<int>(3 + 4 * j)}; };
  auto AFULL = [](int64_t j) { return Sem{static_cast<int>(4 + 4 * j)}; };
  const Sem CFREE{static_cast<int>(4 * U + 1)}, CFULL{static_cast<int>(4 * U + 2)}, AREG{static_cast<int>(4 * U + 3)};

  if (summary) {
    std::ostringstream o;
    o << "# gemm_chip: c[" << gc.m << "," << gc.n << "] = a[" << gc.m << "," << gc.k << "] @ b[" << gc.k << ","
      << gc.n << "] on " << P << " cores x " << U << " matrix units (kernels/gemm_chip.h)\n";
    *summary = o.str();
  }
  isa::Emitter e("gemm_chip", "<gemm_chip>", pl.base_pc);
  e.set_cores(static_cast<uint32_t>(P));
  const int64_t a_addr = pl.declare(e, "a", isa::TensorKind::Input, in, {gc.m, gc.k});
  const int64_t b_addr = pl.declare(e, "b", isa::TensorKind::Input, in, {gc.k, gc.n});
  const int64_t c_addr = pl.declare(e, "c", isa::TensorKind::Output, gc.out, {gc.m, gc.n});
  const isa::Label rowtile = e.label(), group = e.label(), fold = e.label(), panel = e.label(), apiece = e.label(),
                   rowdone = e.label();
  for (int64_t j = 0; j < U; ++j)
    e.sem_set(FREE(j), 2), e.sem_set(FULL(j), 0), e.sem_set(AFREE(j), 2), e.sem_set(AFULL(j), 0);
  e.sem_set(CFREE, 2), e.sem_set(CFULL, 0), e.sem_set(AREG, 2);
  e.core_id(cid), e.li(one, 1), e.li(slot, 0), e.li(aslot, 0), e.li(accslot, 0), e.li(cslot, 0);
  e.li(m0, 0);
  // Row tile 0's a, whole rows (one contiguous transfer), unless this core has no group.
  e.li(t0, NG), e.bge(cid, t0, rowtile), e.li(t0, std::min(TM, gc.m)), e.li(t1, gc.k * E), e.li(t2, a_addr);
  e.li(va, VA0), e.dma_ld(va, t2, t0, t1, t1, t1, {.wait = AREG});
  e.bind(rowtile);
  e.li(t0, gc.m), e.sub(mt, t0, m0), e.li(t0, TM), e.min(mt, mt, t0);
  e.muli(abase, aslot, A_BYTES), e.addi(abase, abase, VA0);
  e.li(first, 1), e.addi(g, cid, 0);
  e.bind(group);
  e.li(t0, NG), e.bge(g, t0, rowdone);
  e.muli(n0, g, U * C), e.li(t0, gc.n), e.sub(pw, t0, n0), e.li(t0, U * C), e.min(pw, pw, t0), e.li(k0, 0);
  // Strip j exists in this group when j*C < pw.
  auto skip_unless_strip = [&](int64_t j, isa::Label skip) {
    if (j == 0) return;
    e.li(t0, j * C), e.bge(t0, pw, skip);
  };
  e.bind(fold);
  e.li(t0, gc.k), e.sub(kt, t0, k0), e.li(t0, R), e.min(kt, kt, t0);
  e.muli(va, k0, E), e.add(va, va, abase), e.li(t3, gc.k * E);
  // In the row tile's first group, fold f also loads piece f of the next row tile's a (PR whole rows,
  // contiguous) into the other A region: the next row tile's a streams in while this one computes, and whole
  // rows read HBM sequentially. The first piece waits `a region free` (the row tile before this one is done).
  e.beq(first, zero, panel), e.addi(t0, m0, TM), e.li(t1, gc.m), e.bge(t0, t1, panel);
  e.sub(t1, t1, t0), e.li(t2, TM), e.min(t1, t1, t2);                       // t1 = rows of the next tile
  e.li(t2, R), e.div(t2, k0, t2), e.muli(t2, t2, PR);                       // t2 = first row of piece
  e.bge(t2, t1, panel), e.sub(t1, t1, t2), e.li(vc, PR), e.min(t1, t1, vc);  // t1 = its rows
  e.add(t0, t0, t2), e.muli(t0, t0, gc.k * E), e.li(vc, a_addr), e.add(t0, t0, vc);
  e.sub(vc, one, aslot), e.muli(vc, vc, A_BYTES), e.addi(vc, vc, VA0);
  e.muli(t2, t2, gc.k * E), e.add(vc, vc, t2), e.li(t2, gc.k * E);
  e.bne(k0, zero, apiece), e.dma_ld(vc, t0, t1, t2, t2, t2, {.wait = AREG}), e.jmp(panel);
  e.bind(apiece);
  e.dma_ld(vc, t0, t1, t2, t2, t2);
  e.bind(panel);
  e.muli(vb, slot, PANEL), e.addi(vb, vb, VB0);
  for (int64_t j = 1; j < U; ++j) {
    const isa::Label l = e.label();
    skip_unless_strip(j, l);
    e.dmain_sync({.wait = FREE(j)});
    e.bind(l);
  }
  e.muli(t0, k0, gc.n), e.add(t0, t0, n0), e.muli(t0, t0, E), e.li(t1, b_addr), e.add(t0, t0, t1);
  e.muli(t1, pw, E), e.li(t2, gc.n * E), e.li(vc, U * C * E);
  e.dma_ld(vb, t0, kt, t1, t2, vc, {.wait = FREE(0), .signal = FULL(0)});
  for (int64_t j = 1; j < U; ++j) {
    const isa::Label l = e.label();
    skip_unless_strip(j, l);
    e.dmain_sync({.signal = FULL(j)});
    e.bind(l);
  }
  for (int64_t j = 0; j < U; ++j) {
    const isa::Label l = e.label(), first_fold = e.label();
    skip_unless_strip(j, l);
    e.li(t0, j * C), e.sub(nt, pw, t0), e.li(t0, C), e.min(nt, nt, t0);
    e.addi(t0, vb, j * C * E), e.li(t2, U * C * E);
    e.mxu_lw(t0, kt, nt, t2, in, {.mxu = j, .wait = FULL(j), .signal = FREE(j)});
    e.muli(t1, accslot, TM);
    e.beq(k0, zero, first_fold);
    e.mxu_mm(va, mt, t1, t3, in, {.accumulate = true, .mxu = j}), e.jmp(l);
    e.bind(first_fold);
    e.mxu_mm(va, mt, t1, t3, in, {.mxu = j, .wait = AFREE(j)});
    e.bind(l);
  }
  e.sub(slot, one, slot), e.addi(k0, k0, R), e.li(t0, gc.k), e.blt(k0, t0, fold);
  e.li(first, 0);
  // Drain every strip of the group.
  for (int64_t j = 0; j < U; ++j) {
    const isa::Label l = e.label();
    skip_unless_strip(j, l);
    e.mxu_sync({.mxu = j, .signal = AFULL(j)});
    e.li(t0, j * C), e.sub(nt, pw, t0), e.li(t0, C), e.min(nt, nt, t0);
    e.muli(vc, cslot, C_BYTES), e.addi(vc, vc, VC0);
    e.muli(t0, accslot, TM), e.addi(t0, t0, j * ACC), e.muli(t1, nt, O);
    e.vpu_sync({.wait = CFREE});
    e.vpu_acc(vc, t0, mt, nt, t1, zero, zero, acc_dt, gc.out, {.wait = AFULL(j), .signal = AFREE(j)});
    e.vpu_sync({.signal = CFULL});
    e.muli(t0, m0, gc.n), e.add(t0, t0, n0), e.addi(t0, t0, j * C), e.muli(t0, t0, O);
    e.li(t2, c_addr), e.add(t0, t0, t2), e.li(t2, gc.n * O);
    e.dma_st(t0, vc, mt, t1, t2, t1, {.wait = CFULL, .signal = CFREE});
    e.sub(cslot, one, cslot);
    e.bind(l);
  }
  e.sub(accslot, one, accslot), e.addi(g, g, P), e.jmp(group);
  e.bind(rowdone);
  e.vpu_sync({.signal = AREG}), e.sub(aslot, one, aslot), e.addi(m0, m0, TM);
  e.li(t0, gc.m), e.blt(m0, t0, rowtile);
  return e.finish();
}

}  // namespace

void check_row_map(const RowMap& map, int64_t m, int64_t row_bytes, const std::string& kernel) {
  if (map.keep < 1 || map.keep > map.group || map.per_image < 0 || map.pitch < map.keep * row_bytes ||
      map.image_pitch < 0 || (map.per_image > 0 && map.image_pitch < map.per_image * map.pitch))
    throw std::invalid_argument(kernel + ": a row map of groups of " + std::to_string(map.group) + " keeping " +
                                std::to_string(map.keep) + " rows " + std::to_string(map.pitch) +
                                " bytes apart keeps none or overlaps");
  const int64_t last = cdiv(m, map.group) - 1;  // the last group's end bounds what is written
  const int64_t end = map.at(last) + std::min(map.keep, m - last * map.group) * row_bytes;
  if (map.rows * row_bytes < end)
    throw std::invalid_argument(kernel + ": a row map writes " + std::to_string(end) + " bytes of c, which spans " +
                                std::to_string(map.rows) + " rows of " + std::to_string(row_bytes) + " bytes");
}

namespace {

// The tiled schedule's C buffers: one per strip of a tile, up to this many (tiles_source).
constexpr int64_t kMaxCBuffers = 8;

// The tiled schedule's estimate's terms (choose_tiles, gemm_chip_tail): a chunk of kc elements of K on a unit, its S
// strips of tmu rows each streamed per fold of R at `rate` rows a cycle (at least R cycles: the weight load hides
// behind a stream of R rows); a tile's drain, its units' S strips of tmu x sc on the vector unit, with act's passes.
double chunk_work(int64_t kc, int64_t R, int64_t S, int64_t tmu, int64_t rate, double stretch) {
  return static_cast<double>(cdiv(kc, R) * S * std::max(cdiv(tmu, rate), R)) * stretch;
}
double tile_drain(int64_t U, int64_t S, int64_t tmu, int64_t sc, int64_t act_passes, int64_t vpu_width) {
  return static_cast<double>(U * S * tmu * sc * (1 + act_passes)) / static_cast<double>(vpu_width);
}

// The tiled schedule's shape: TM rows x W = U*S*SC columns per tile (SC = C, or narrower), K in chunks of KC.
struct TilePlan {
  int64_t tm = 0, s = 0, kc = 0;
  int64_t u = 1;        // matrix units per core used (at most the request's: fewer make narrower tiles, more of them)
  int64_t rb = 1;       // row blocks: 1, or a divisor of u (u / rb strips of C columns, each split into rb blocks of
                        // the tile's rows, one unit per block: outputs narrower than u strips)
  int64_t abuf = 2;     // accumulator regions per unit: 2 = the next tile's matrix work overlaps this one's drain
  int64_t sk = 1, ks = 0;  // splits of K and the elements of K per split (a multiple of kc; the last may be short)
  int64_t nslot = 2;       // operand slots (chunks in flight)
  int64_t mcast = 0;       // multicast (GemmChip::multicast): 0 none, 1 pairs share a's rows, 2 b's columns
  double estimate = 0;  // cycles (see choose_tiles)
  int64_t sc = 0;       // a strip's columns: C, or C/2, C/4, ... (narrow strips: more tiles over more cores)
  // A tile's columns W on units of C columns: u / rb strips of C with row blocks, else u x s strips of sc
  int64_t width(int64_t C) const { return rb > 1 ? u / rb * C : u * s * sc; }
};

// The strips schedule's row tile bound (0: a row of a does not fit).
int64_t strips_tm_max(const GemmChip& g, int64_t R, int64_t C, int64_t ACC, int64_t VMEM, int64_t U) {
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const int64_t PANEL = align64(R * U * C * E);
  const int64_t TM_VMEM = (VMEM - 2 * PANEL - 256) / (2 * g.k * E + 2 * C * O);
  return std::max<int64_t>(0, std::min(ACC / 2, TM_VMEM));
}

// The strips schedule's estimated cycles, in the terms of choose_tiles' estimate. Each core runs its folds (row
// tiles x its column groups x K / R) back to back, one panel in flight behind the one in use; a fold takes the
// longest of its matrix work (TM rows at the type's rate, at least R: the weight load hides behind them), its
// transfer at this core's share of HBM's bandwidth (every core streams at once) and latency + transfer. A fold's transfer is its panel
// (R x U*C), its share of the group's stores (TM x U*C outputs, written while the next group computes) and, in a
// row tile's first group, a K/R-th of the next row tile's a. Plus the first row tile's a (before any fold), one
// latency and the last drain.
double strips_estimate(const GemmChip& g, int64_t R, int64_t C, int64_t ACC, int64_t VMEM, int64_t P, int64_t U,
                       int64_t hbm_bpc, int64_t vpu_width, int64_t latency, int64_t rate, double stretch) {
  const double E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const int64_t TM_MAX = strips_tm_max(g, R, C, ACC, VMEM, U);
  const int64_t TM = cdiv(g.m, cdiv(g.m, TM_MAX)), MT = cdiv(g.m, TM), KT = cdiv(g.k, R);
  const int64_t GC = cdiv(cdiv(g.n, U * C), P);  // column groups per core (the busiest)
  const double share = static_cast<double>(hbm_bpc) / static_cast<double>(std::min(P, cdiv(g.n, U * C)));
  const double W = static_cast<double>(std::min(U * C, g.n)), tm = static_cast<double>(TM);
  const double work = static_cast<double>(std::max(cdiv(TM, rate), R)) * stretch;
  auto fold = [&](double bytes) {
    const double transfer = bytes / share;
    return std::max({work, transfer, static_cast<double>(latency) + transfer});
  };
  const double panel_and_stores = static_cast<double>(R) * W * E + tm * W * O / static_cast<double>(KT);
  const double a_piece = tm * static_cast<double>(g.k) * E / static_cast<double>(KT);  // first group's folds only
  const double drain = static_cast<double>(U * TM * C) / static_cast<double>(vpu_width);
  return static_cast<double>(MT * KT) * (fold(panel_and_stores + a_piece) +
                                         static_cast<double>(GC - 1) * fold(panel_and_stores)) +
         tm * static_cast<double>(g.k) * E / share + static_cast<double>(latency) + drain;
}

// The split-K reduction's chunk: EL elements of c (a multiple of 16), at most an even share of M*N per core (so
// that all P cores reduce), and small enough that two buffers of SK rows of EL f32 partials (each row 64-byte
// aligned) and a row of the output fit VMEM. 0: not even 16 elements fit.
int64_t reduce_chunk(int64_t mn, int64_t sk, int64_t out_bytes, int64_t vmem, int64_t cores) {
  const int64_t fit = (vmem - 512 - 2 * sk * 64 - 64) / (2 * sk * 4 + out_bytes) / 16 * 16;
  if (fit < 16) return 0;
  return std::max<int64_t>(16, std::min(fit, cdiv(cdiv(mn, cores), 16) * 16));
}

// GemmChip::multicast's choice for a plan of nr x nc tiles of tm x w on P cores, split sk ways: 2 (pairs share b's
// columns: tiles dealt column-major, pairs in one column) where b's part of a chunk is at least a's and the rows
// pair up, else 1 (pairs share a's rows: row-major, pairs in one row) where the columns pair up, else 0.
int64_t multicast_mode(const GemmChip& g, int64_t P, int64_t sk, int64_t nr, int64_t nc, int64_t tm, int64_t w) {
  if (!g.multicast || P % 2 != 0 || sk > 1 || g.taps.cin > 0) return 0;
  if (nr % 2 == 0 && (w >= tm || nc % 2 != 0)) return 2;
  return nc % 2 == 0 ? 1 : 0;
}

// Chooses the tiled schedule's shape by an estimate of its time. Candidates: U = 1 .. the units asked per core
// where the chip has several cores (fewer units make narrower tiles, so that more of them fill the cores); the
// units' strips side by side (S strips per unit) or, for narrow outputs, row blocks (each unit a block of the
// tile's rows, one strip wide); accumulators double-buffered (2 regions of S strips x TM rows: the next tile's
// matrix work overlaps this one's drain) or single (twice the rows; the drain of U*S strips of TM x C at
// VPU_WIDTH per cycle then adds to each tile);
// tile heights TM that split M evenly; NSLOT = 2..4 operand slots (more slots keep more chunks in flight when a
// chunk's transfer latency exceeds its matrix work, as a GPU kernel's multi-stage pipeline does); KC = the
// largest multiple of R whose NSLOT slots and two C buffers fit VMEM, and its halves down to min_chunk_folds folds
// (GemmChip; a smaller chunk fills the pipeline sooner); and, with max_split_k > 1, SK splits of K.
// Estimate, per work item (a tile, or a split of one): its chunks, each taking the longest of its matrix work (KC/R
// folds x S strips x max(TM / rate, R) cycles: a weight load, R cycles, hides behind a stream of at least R rows;
// matrix_rate; times matrix_stretch, the rate the unit sustains), its transfer (its operands and its share of the
// tile's stores) at this core's share of the bandwidth (the cache's when the chip has one, since tiles re-read their
// operands from it, else HBM's; shared by the cores loading at once, and at most what the core's VMEM ports take),
// its operands' bytes through VMEM's ports (written by the loads, read by the matrix units) and (latency + transfer)
// / (NSLOT - 1) (NSLOT - 1 chunks in flight); plus the item's first load's latency, and with tiles one at a time
// (!overlap_tiles) its drain, its stores and their latency (store_latency: the cache's where it writes back, else
// HBM's); plus, once, the shorter of a chunk's work and transfer: the pipeline's fill and drain. Items run in waves
// over the cores. Split K adds the reduction: every split's f32 partials written (to HBM, whether the cache writes
// them through or back) and read back, the result written, a barrier, and reduction_launch_cycles.
TilePlan choose_tiles(const GemmChip& g, int64_t R, int64_t C, int64_t ACC, int64_t VMEM, int64_t P, int64_t UMAX,
                      int64_t mem_bpc, int64_t hbm_bpc, int64_t vmem_bpc, int64_t vpu_width, int64_t latency,
                      int64_t store_latency, int64_t rate, double stretch) {
  // A core takes its transfers at most at its VMEM ports' rate (vmem_bpc 0: an older caller's map, no limit).
  const int64_t core_bpc = vmem_bpc > 0 ? vmem_bpc : mem_bpc;
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out), QO = g.q_scale_bits != 0 ? 1 : 0;
  const int64_t OW = (g.q_only ? 0 : O) + (g.residual ? O : 0);  // bytes of c written (none with q_only) and r read per element
  const bool may_split = g.max_split_k > 1 || g.split_k > 1;
  // act: the epilogue's VMEM for strips of n elements (its constant table, and temporaries of n f32 each), and
  // its passes over a strip
  std::map<int64_t, int64_t> act_bytes;
  auto act_vmem = [&](int64_t n) {
    auto it = act_bytes.find(n);
    if (it == act_bytes.end())
      it = act_bytes.emplace(n, static_cast<int64_t>(rowwise::epilogue(*g.act, n, 0).bytes)).first;
    return it->second;
  };
  // (with q, one more: the int8 copy cast from the stored out tile)
  const int64_t act_passes = g.act ? rowwise::epilogue(*g.act, 1, 0).vector_ops + QO : 0;
  TilePlan best;
  // Narrow strips (fewer than C columns, the matrix unit's others idle) spread a GEMM of few output columns over
  // more cores: a decoder's weight-streaming GEMV on h200-like, 1 x 768 x 768, is 6 tiles of 128 columns (6 of
  // 132 cores streaming the weights) where strips of 16 make 48 (C/8 the narrowest, 4 at least). A narrow tile
  // is at most half of C wide and divides it. Not with the layouts and epilogues that take whole strips of C
  // (b_tiled's weight tiles, group_n's groups, act's pieces, convolution taps), nor with row blocks. (Loading
  // b_tiled's narrow tiles fold by fold, R rows of a weight tile's columns, was tried: that many transfers fill
  // the load queue's engines, and on h200-like 128 x 3072 x 768 took 16,672 cycles where b as [K, N] takes
  // 12,185.)
  const bool narrow = g.narrow_strips && P > 1 && !g.b_tiled && g.group_n == 0 && !g.act && g.taps.cin == 0;
  for (int64_t sc = C; sc >= (narrow ? std::max<int64_t>(C / 8, 4) : C); sc /= 2)
  for (int64_t U = UMAX; U >= (P > 1 ? 1 : UMAX); --U)  // fewer units only to spread narrower tiles over cores
  for (int64_t rb = 1; rb <= (sc < C ? 1 : U); ++rb)
  for (int64_t abuf = 2; abuf >= 1; --abuf)
    for (int64_t S = 1; S <= (rb > 1 ? 1 : 8); S *= 2) {
      if (sc < C && (U * S * sc * 2 > C || C % (U * S * sc) != 0)) continue;  // narrow: half of C at most
      if (U % rb != 0) break;  // row blocks: the units split evenly into strips of rb blocks
      if (S > 1 && (S / 2) * U * sc >= g.n) break;  // the tile would be wider than the whole of N
      // More strips than C buffers (kMaxCBuffers): the drain reuses a buffer only once its last store is done,
      // and that store waits behind the operand loads queued before it (HBM serves transfers in order); the
      // estimate does not count those waits, so such tiles are left out. GPT-2's vocabulary projection on v5e, 128 x 768 x 50257:
      // 271,337 cycles in tiles of 16 strips (4 per unit), 207,955 in tiles of 8.
      if (!g.act && S > 1 && U * S > kMaxCBuffers) break;
      // cap: a unit's rows (its accumulators); with row blocks the tile is rb units' blocks high, U / rb strips wide
      const int64_t cap = ACC / (abuf * S), W = rb > 1 ? U / rb * C : U * S * sc;
      // Pairs (or more) of units on a strip only for outputs of fewer strips than units, which a tile of U strips
      // would leave partly idle: N in ((U/rb/2)*C, (U/rb)*C] (narrower takes more row blocks). On wider outputs
      // the estimate prefers tiles narrower than the wide ones that run faster: BERT's QKV projection on v6e,
      // 128 x 768 x 2304 (bias, b tiled), in 5 tiles of 128 x 512 took 7,961 cycles against 6,615 in 3 of
      // 128 x 1024 (each unit's 64 rows do not cover its 256-row weight loads).
      if (rb > 1 && rb < U && (g.n > U / rb * C || (U / rb / 2) * C >= g.n)) continue;
      // Tile heights: the even splits of M into row tiles of at most rb x cap, cap/2, ... rows, and of at most
      // each multiple of 16 between cap/8 and cap (x rb), so that the tile count can fill the last wave.
      std::vector<int64_t> heights;
      for (int64_t h = cap; h >= 1; h /= 2) heights.push_back(cdiv(g.m, cdiv(g.m, h * rb)));
      for (int64_t h = cap / 16 * 16; h >= std::max<int64_t>(16, cap / 8); h -= 16)
        heights.push_back(cdiv(g.m, cdiv(g.m, h * rb)));
      std::sort(heights.begin(), heights.end());
      heights.erase(std::unique(heights.begin(), heights.end()), heights.end());
      for (const int64_t tm : heights)
        // Most slots first: a tie (the estimate counts the slots only through a transfer's latency over the slots
        // but one, small where HBM is fast) goes to the deeper pipeline (GemmChip.MoreSlotsWhereTheEstimatesTie)
        for (int64_t nslot = g.slots ? g.slots : 4; nslot >= (g.slots ? g.slots : 2); --nslot) {
          // split = 0: K whole (C buffers of the output type); 1: K split (C buffers of f32 partials)
          for (int split = g.split_k > 1 ? 1 : 0; split <= (may_split ? 1 : 0); ++split) {
          if (rb > 1 && split) continue;  // row blocks keep K whole
          const int64_t od = split ? std::max<int64_t>(O, 4) : O;
          const int64_t tmu = cdiv(tm, rb);  // a unit's rows
          const int64_t fixed = (g.act ? 0 : std::min(U * S, kMaxCBuffers)) *
                                    (align64(tmu * C * od) + QO * align64(tmu * C)) +
                                256 +                                                        // the C buffers
                                (g.residual ? (nslot + 1) * U * S * align64(tmu * C * od) : 0) +  // tiles of r
                                (g.act ? align64(U * S * tmu * C * 4) + 2 * align64(U * S * tmu * C * O) +
                                             2 * QO * align64(U * S * tmu * C) + act_vmem(U * S * tmu * C) +
                                             64  // act: the f32 tile, 2 out tiles (and 2 of q)
                                       : 0) +
                                2 * (g.dequant ? align64(W * 8) : g.bias ? align64(W * 4) : 0);  // two bias tables
          const int64_t per_k = nslot * (tm + W) * E;  // bytes of the slots per element of K
          if (VMEM <= fixed) continue;
          const int64_t kc_max = std::min((VMEM - fixed) / per_k / R * R, cdiv(g.k, R) * R);
          if (kc_max < R) continue;
          // the smallest chunk (GemmChip::min_chunk_folds): 2 folds where a core has at most 4 tiles (its
          // pipeline's fill is a large part of its time) and a is a matrix, else 4
          const bool few_tiles = g.taps.cin == 0 && cdiv(cdiv(g.m, tm) * cdiv(g.n, W), P) <= 4;
          const int64_t min_folds = g.min_chunk_folds > 0 ? g.min_chunk_folds : few_tiles ? 2 : 4;
          for (int64_t kc = kc_max; kc >= std::min(kc_max, min_folds * R); kc = kc / 2 / R * R) {
          const int64_t tiles = cdiv(g.m, tm) * cdiv(g.n, W);
          const int64_t max_split = !split ? 1 : g.split_k > 0 ? g.split_k : g.max_split_k;
          for (int64_t want = !split ? 1 : g.split_k > 0 ? g.split_k : 2; want <= max_split; want *= 2) {
            const int64_t ks = cdiv(cdiv(g.k, want), kc) * kc, sk = cdiv(g.k, ks);
            if (want > 1 && sk < 2 && g.split_k == 0) break;
            if (sk > 1 && reduce_chunk(g.m * g.n, sk, O, VMEM, P) == 0) break;  // its reduction does not fit VMEM
            const double items = static_cast<double>(tiles * sk);
            const double waves = std::ceil(items / static_cast<double>(P));
            const double share = std::min(static_cast<double>(mem_bpc) / std::min(items, static_cast<double>(P)),
                                          static_cast<double>(core_bpc));
            const double chunks = static_cast<double>(cdiv(ks, kc));
            const double work = chunk_work(kc, R, S, tmu, rate, stretch);
            // The tile's stores: a share of every chunk's transfer, or after the tile with !overlap_tiles
            const double stores = static_cast<double>(tm * std::min(W, g.n) * (OW + QO)) / share;
            // Multicast: the pair reads the shared operand once, half of it per core
            const int64_t mcast = multicast_mode(g, P, sk, cdiv(g.m, tm), cdiv(g.n, W), tm, std::min(W, g.n));
            const double a_rows = mcast == 1 ? tm / 2.0 : static_cast<double>(tm);
            const double b_rows = mcast == 2 ? std::min(W, g.n) / 2.0 : static_cast<double>(std::min(W, g.n));
            const double transfer = (a_rows + b_rows) * static_cast<double>(kc * E) / share +
                                    (g.overlap_tiles ? stores / chunks : 0.0);
            // VMEM's ports: the chunk's operands written by the loads and read by the matrix units (each weight
            // once, or by each of its strip's rb units; the row tile's a once per strip)
            const int64_t port_bytes =
                (2 * (tm + std::min(W, g.n)) + (rb > 1 ? (rb - 1) * std::min(W, g.n) : (S - 1) * tm)) * kc * E;
            const double ports =
                vmem_bpc > 0 ? static_cast<double>(port_bytes) / static_cast<double>(vmem_bpc) : 0.0;
            const double chunk =
                std::max({work, transfer, ports, (static_cast<double>(latency) + transfer) / (nslot - 1)});
            const double drain = tile_drain(U, S, tmu, sc, act_passes, vpu_width);
            // per item: its chunks, its first load's latency and, with abuf == 1 or tiles one at a time, its
            // drain; one at a time, also its stores and their latency
            const double item = chunks * chunk + static_cast<double>(latency) +
                                (abuf == 1 || !g.overlap_tiles ? drain : 0.0) +
                                (g.overlap_tiles ? 0.0 : stores + static_cast<double>(store_latency));
            double est = waves * item + drain + std::min(work, transfer);
            if (sk > 1)  // partials and results written to HBM, partials read back (from the cache if any)
              est += static_cast<double>(g.m * g.n) *
                         ((4.0 * static_cast<double>(sk) + O) / static_cast<double>(hbm_bpc) +
                          4.0 * static_cast<double>(sk) / static_cast<double>(mem_bpc)) +
                     4.0 * static_cast<double>(latency) + static_cast<double>(g.reduction_launch_cycles);
            if (best.tm == 0 || est < best.estimate) best = TilePlan{tm, S, kc, U, rb, abuf, sk, ks, nslot, mcast, est, sc};
          }
          }
          }
        }
    }
  if (best.tm == 0)
    throw std::invalid_argument("gemm_chip: no tile of the tiled schedule fits VMEM (" + std::to_string(VMEM) +
                                " bytes) with " + std::to_string(R) + " rows of K" +
                                (g.split_k > 1 ? " and the reduction of " + std::to_string(g.split_k) + " splits of K"
                                               : std::string()));
  return best;
}

// A kernel symbol the chip may leave out (an older caller's map), or `otherwise`.
int64_t optional_symbol(const std::map<std::string, int64_t>& s, const char* name, int64_t otherwise) {
  auto it = s.find(name);
  return it == s.end() ? otherwise : it->second;
}

TilePlan plan_tiles(const GemmChip& g, const std::map<std::string, int64_t>& s, int64_t P, int64_t U) {
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  auto optional = [&s](const char* name, int64_t otherwise) { return optional_symbol(s, name, otherwise); };
  // With a cache, tiles re-read their operands from it (HBM serves each byte's first read, in parallel): its
  // bandwidth is the limit; without one, HBM's.
  const int64_t cache_bpc = optional("CACHE_BYTES_PER_CYCLE", 0);
  const int64_t hbm_bpc = std::max<int64_t>(1, optional("HBM_BYTES_PER_CYCLE", 64));
  const int64_t mem_bpc = std::max<int64_t>(1, cache_bpc > 0 ? cache_bpc : hbm_bpc);
  GemmChip gc = g;
  gc.multicast = g.multicast && optional("CLUSTER", 1) >= 2;  // only where the chip multicasts
  return choose_tiles(gc, R, C, ACC, VMEM, P, U, mem_bpc, hbm_bpc, optional("VMEM_BYTES_PER_CYCLE", 0),
                      std::max<int64_t>(1, optional("VPU_WIDTH", 128)), optional("DMA_LATENCY", 100),
                      optional("STORE_LATENCY", optional("DMA_LATENCY", 100)), matrix_rate(g.in, s),
                      matrix_stretch(s));
}

// True when the chip has a cache in front of HBM (the strips estimate models HBM alone).
bool has_cache(const std::map<std::string, int64_t>& s) { return optional_symbol(s, "CACHE_BYTES_PER_CYCLE", 0) > 0; }

double strips_estimate_of(const GemmChip& g, const std::map<std::string, int64_t>& s, int64_t P, int64_t U) {
  auto optional = [&s](const char* name, int64_t otherwise) { return optional_symbol(s, name, otherwise); };
  return strips_estimate(g, symbol(s, "MXU_ROWS"), symbol(s, "MXU_COLS"), symbol(s, "ACC_ROWS"), symbol(s, "VMEM_BYTES"),
                         P, U, std::max<int64_t>(1, optional("HBM_BYTES_PER_CYCLE", 64)),
                         std::max<int64_t>(1, optional("VPU_WIDTH", 128)), optional("DMA_LATENCY", 100),
                         matrix_rate(g.in, s), matrix_stretch(s));
}

// The tiled schedule's registers (r0 holds 0; r29..r31 are scratch without names).
namespace tile_regs {
using isa::Reg;
constexpr Reg zero{0}, cid{1}, t{2}, m0{3}, mt{4}, k0{5}, kt{6}, n0{7}, pw{8}, slot{9}, accslot{10}, cslot{11},
    ah{12}, bh{13}, va{14}, vb{15}, t0{16}, t1{17}, t2{18}, nt{19}, one{20}, ar{21}, astr{22}, wstr{23}, vc{24},
    split{25}, kb{26}, t3{27}, vq{28}, r29{29}, r30{30}, r31{31};
}  // namespace tile_regs

// The A block of a chunk read as a convolution's taps (ConvTaps): columns [k0, k0 + kc) of rows m0 .. m0 + mt
// into VMEM at va (row pitch astr), one DMA per tap the columns cover (rows of at most cin elements, read at
// pitch pitch * cin from the tap's rows of a, at a_addr); the first waits `wait`. Scratch: t0..t3, kt, vc, r29..r31.
void tap_loads(isa::Emitter& e, const ConvTaps& x, int64_t E, int64_t kc, isa::Sem wait, int64_t a_addr) {
  using namespace tile_regs;
  const isa::Label loop = e.label();
  e.dmain_sync({.wait = wait}), e.addi(r29, k0, 0), e.addi(r30, k0, kc);
  e.bind(loop);
  e.li(t0, x.cin), e.div(t1, r29, t0), e.rem(t2, r29, t0);       // tap t1, channel t2
  e.sub(r31, t0, t2), e.sub(t3, r30, r29), e.min(r31, r31, t3);  // r31 = elements of this tap
  e.li(t0, x.kw), e.div(t3, t1, t0), e.rem(t1, t1, t0);          // (i, j) = (t3, t1)
  e.muli(t3, t3, x.dh), e.muli(t1, t1, x.dw);                    // (ih, jw)
  if (x.sh == 1 && x.sw == 1) {
    e.muli(t3, t3, x.wq), e.add(t3, t3, t1);
  } else {
    e.li(t0, x.sh), e.rem(kt, t3, t0), e.div(t3, t3, t0), e.muli(t3, t3, x.wq);
    e.li(t0, x.sw), e.rem(vc, t1, t0), e.div(t1, t1, t0), e.add(t3, t3, t1);
    e.muli(kt, kt, x.sw), e.add(kt, kt, vc), e.muli(kt, kt, x.phase_rows), e.add(t3, t3, kt);
  }
  if (x.pitch != 1) e.muli(kt, m0, x.pitch), e.add(t3, t3, kt);  // + row m0 of the matrix
  else e.add(t3, t3, m0);
  e.muli(t3, t3, x.cin), e.add(t3, t3, t2), e.muli(t3, t3, E);
  e.li(t0, a_addr), e.add(t3, t3, t0);                           // source address
  e.sub(t1, r29, k0), e.muli(t1, t1, E), e.add(t1, t1, va);      // VMEM address
  e.muli(t2, r31, E), e.li(t0, x.cin * x.pitch * E), e.dma_ld(t1, t3, mt, t2, t0, astr);
  e.add(r29, r29, r31), e.blt(r29, r30, loop);
}

isa::Program tiles_kernel(const GemmChip& g, const std::map<std::string, int64_t>& s, int64_t P, int64_t UMAX,
                          const Placing& pl, std::string* summary, bool first_b_only = false,
                          int64_t* vmem_end = nullptr, GemmArea* area = nullptr) {
  using namespace tile_regs;
  using isa::DType;
  using isa::Label;
  using isa::Sem;
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  const TilePlan plan = plan_tiles(g, s, P, UMAX);
  const int64_t U = plan.u;  // the units the plan uses
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out);
  const DType in = g.in, acc_dt = g.in == DType::I8 ? DType::I32 : DType::F32;
  // RB > 1: row blocks, unit j computes rows [(j % RB)*TMU, +TMU) of strip j / RB of the tile (U / RB strips of C
  // columns, one strip per unit)
  const int64_t RB = plan.rb, TM = plan.tm, TMU = cdiv(TM, RB), S = plan.s, KC = plan.kc, ABUF = plan.abuf;
  const int64_t SC = plan.sc;  // a strip's columns: C, or fewer (narrow strips)
  const int64_t W = plan.width(C);
  // Unit j's strip sidx: its strip of columns in the tile, and its first row in the tile
  auto strip_of = [&](int64_t j, int64_t sidx) { return RB > 1 ? j / RB : j * S + sidx; };
  auto row_of = [&](int64_t j) { return RB > 1 ? j % RB * TMU : 0; };
  const int64_t SK = plan.sk, KS = plan.ks;                 // splits of K, elements per split
  const int64_t NSLOT = plan.nslot;
  const int64_t NC = cdiv(g.n, W), NR = cdiv(g.m, TM), T = NR * NC;  // column tiles, row tiles, tiles
  // Multicast (GemmChip::multicast): 1, pairs of cores share a's chunks (tiles row-major); 2, b's (column-major)
  const int64_t MC = plan.mcast;
  const int64_t NKS = KS / KC;                              // chunks of a split (all full) ...
  const int64_t KL = g.k - (SK - 1) * KS, NKL = cdiv(KL, KC), KLAST = KL - (NKL - 1) * KC;  // ... of the last
  const int64_t A_SLOT = align64(TM * KC * E), SLOT = A_SLOT + align64(KC * W * E);
  const int64_t OD = SK > 1 ? 4 : O;  // the drain's element size: f32 partials when K is split
  const int64_t C_BYTES = align64(TMU * C * OD);
  // With q: each C buffer is followed by the strip's q tile (i8); CQ_BYTES apart.
  const bool Q = g.q_scale_bits != 0;
  const int64_t CQ_BYTES = C_BYTES + (Q ? align64(TMU * C) : 0);
  const bool TABLE = g.bias || g.dequant;       // a per-column table in VMEM: the bias, or dequant's pairs
  const int64_t TB = g.dequant ? 8 : 4;         // its bytes per column
  const bool MAP = g.c_rows.group > 0;          // c's rows through GemmChip::c_rows
  if (MAP) {
    if (SK > 1 || Q || g.q_only || g.group_n > 0 || g.act)
      throw std::invalid_argument("gemm_chip: c_rows is not for split K, q, group_n or act");
    check_row_map(g.c_rows, g.m, g.n * O, "gemm_chip");
  }
  // One C buffer per strip of a tile (up to kMaxCBuffers): every strip's store is in flight at once, so a tile's
  // drain costs one store latency, not one per pair of strips.
  const int64_t NCBUF = std::min(U * S, kMaxCBuffers);
  const int64_t VA0 = g.vmem_base, VC0 = VA0 + NSLOT * SLOT;  // then NCBUF C buffers
  const bool partial = g.n % W != 0;  // the last column tile lacks some strips
  auto sem = [](int64_t i) { return Sem{static_cast<int>(i)}; };
  auto FREE = [&](int64_t j) { return sem(1 + 4 * j); };
  auto FULL = [&](int64_t j) { return sem(2 + 4 * j); };
  auto AFREE = [&](int64_t j) { return sem(3 + 4 * j); };
  auto AFULL = [&](int64_t j) { return sem(4 + 4 * j); };
  const Sem CFREE = sem(4 * U + 1), CFULL = sem(4 * U + 2), BFREE = sem(4 * U + 3), BFULL = sem(4 * U + 4);
  // residual: NSLOT + 1 slots of a tile of r, strip by strip packed as the C buffers are, RP bytes apart;
  // dmain loads a tile's after its operands (waits RFREE, signals RFULL), the drain adds it and frees the slot.
  // dmain runs up to NSLOT tiles ahead of the matrix units and the drain one behind them: with fewer slots the
  // wait for a free one would hold back the operand loads behind it.
  const Sem RFREE = sem(4 * U + 5), RFULL = sem(4 * U + 6);
  const int64_t RP = C_BYTES, RSLOTS = NSLOT + 1;
  const int64_t NTB = cdiv(g.n, C);                   // b_tiled: weight tiles per row of tiles
  const int64_t VBIAS = VC0 + NCBUF * CQ_BYTES;       // bias: the tile's W columns (f32 or i32; dequant: pairs)
  // Two bias tables, by tile parity ((t - cid) / P) % 2, so that the next tile's bias load does not wait for this
  // tile's drain (which would hold back the operand loads queued behind it); BTB bytes apart.
  const int64_t BTB = TABLE ? align64(W * TB) : 0;
  const int64_t VR0 = VBIAS + 2 * BTB;  // then the residual's RSLOTS slots of U*S strips
  // act: the tile's strips drained in f32 one after the other (piece p = j*S + sidx at p*TMU*C elements, packed
  // rows x nt), the activation over the whole tile at once (long vector instructions, few of them) into one of
  // two tiles of out (slot ((t - cid) / P) % 2, the same layout), stored strip by strip; AOFREE: an out tile free.
  const int64_t AE = U * S * TMU * C;  // elements of a tile's pieces
  const int64_t VE0 = VR0 + (g.residual ? RSLOTS * U * S * RP : 0);  // then act's constants and temporaries
  const std::optional<rowwise::Epilogue> act =
      g.act ? std::optional(rowwise::epilogue(*g.act, AE, static_cast<uint64_t>(VE0))) : std::nullopt;
  const int64_t VAF = align64(VE0 + (act ? act->bytes : 0)), VAO = VAF + align64(AE * 4), AOB = align64(AE * O);
  // act with q: the int8 copy of each out tile cast from it as stored (x q_scale), into one of two q tiles after
  // the out tiles (the same slot and layout, one byte an element), as the row-wise kernel's int8 copy of a value it
  // stores as bf16 is cast (rowwise.h, Output)
  const int64_t VAQ = VAO + 2 * AOB, AQB = Q ? align64(AE) : 0;
  const bool RQ = g.residual && Q;  // residual and q: q from the sum as stored in the C buffer
  // RES: the residual added (and its ReLU) in the drain's vpu.acc (res: the bits of vpu.acc, then vpu.add relu,
  // in one pass), where nothing comes between them: no ReLU before the add, no scale, c bf16 or f32, K whole
  const bool RES = g.residual && !g.relu && g.scale_bits == 0 && !g.q_only &&
                   (g.out == DType::BF16 || g.out == DType::F32) && plan.sk == 1;
  const int64_t VEND = act ? VAQ + 2 * AQB : VE0;  // the kernel's VMEM end
  const Sem AOFREE = sem(4 * U + 5);
  if (vmem_end) {  // gemm_chip_vmem_end: the layout's end
    if (SK > 1) throw std::invalid_argument("gemm_chip: the VMEM end of a split K's reduction is not known");
    *vmem_end = VEND;
    return {};
  }
  // Without overlap_tiles: TDONE, the core's previous tile stored (dmaout signals it after the tile's last store;
  // dmain waits for it before the tile's first load).
  const Sem TDONE = sem(4 * U + 7);
  // QUICK (GemmChip::quick_start): the core's first tile's first chunk loads b first and a after it, so that the
  // matrix units load their first weights while a loads (FULL(j) after b; AIN, once per unit, after a, which the
  // unit's first product waits for in place of AFREE(j): its first accumulator region is free, AFREE(j) set one
  // lower). Where a unit's weights take at least 64 rows to load (h200-like's 16: the order's instructions cost
  // more than it saves, 0.2% on its models); not with a_wait (whose first chunk loads b first already, and whose
  // semaphore may be AIN's), nor where AIN would be the weight stream's semaphore (s31) or past the ISA's.
  const Sem AIN = sem(4 * U + 8);
  const bool QUICK = g.quick_start && R >= 64 && g.a_wait == 0 && 4 * U + 8 < isa::kNumSems - 1;
  if (g.lw_sem != 0 && (!QUICK || g.b_preloaded < 1 || g.lw_sem < 0 || g.lw_sem >= isa::kNumSems))
    throw std::invalid_argument("gemm_chip: the units' first weights ahead (lw_sem " + std::to_string(g.lw_sem) +
                                ") need them preloaded (b_preloaded) and the quick start");
  // Worth it where the matrix work it takes out of the tail, the last chunk's folds but one, exceeds what the
  // extra chunks add: about a transfer's latency.
  const int64_t tail_lead = (KLAST - 1) / R * R;  // the last chunk's rows of K before its last fold
  const bool split_tail = g.split_last_fold && SK == 1 && g.b_area_chunks == 0 &&
                          static_cast<double>(tail_lead / R * S * std::max(cdiv(TMU, matrix_rate(g.in, s)), R)) *
                                  matrix_stretch(s) >
                              static_cast<double>(optional_symbol(s, "DMA_LATENCY", 100));

  if (summary) {
    std::ostringstream o;
    o << "# gemm_chip (tiles): c[" << g.m << "," << g.n << "] = a[" << g.m << "," << g.k << "] @ b[" << g.k << ","
      << g.n << "] on " << P << " cores x " << U << " matrix units: " << T << " tiles of " << TM << " x " << W
      << (RB > 1   ? " (row blocks: unit j takes rows (j % " + std::to_string(RB) + ")*" + std::to_string(TMU) +
                           ".. of strip j / " + std::to_string(RB) + " of a tile, "
          : SC < C ? " (" + std::to_string(S) + " strips of " + std::to_string(SC) + " columns per unit, "
                   : " (" + std::to_string(S) + " strips per unit, ")
      << ABUF << " accumulator regions), K in chunks of " << KC << " (" << NSLOT << " slots)";
    if (SK > 1) o << " and " << SK << " splits of " << KS << " (f32 partials in ws, reduced after a barrier)";
    if (MC)
      o << ", pairs of cores multicast "
        << (MC == 1 ? "a's rows (tiles row by row)" : "b's columns (tiles column by column)");
    if (!g.overlap_tiles) o << ", one tile at a time per core (the previous tile is stored before the next loads)";
    if (split_tail) o << ", the core's last tile loads its last chunk's last fold as a chunk of its own";
    o << " (kernels/gemm_chip.h)\n";
    *summary = o.str();
  }
  isa::Emitter e("gemm_chip", "<gemm_chip>", pl.base_pc);
  e.set_cores(static_cast<uint32_t>(P));
  using isa::TensorKind;
  const int64_t a_addr = g.taps.cin > 0 ? pl.declare(e, "a", TensorKind::Input, in, {g.taps.rows, g.taps.cin})
                                        : pl.declare(e, "a", TensorKind::Input, in, {g.m, g.k});
  const int64_t b_addr =
      g.trans_b   ? pl.declare(e, "b", TensorKind::Input, in, {g.n, g.k})
      : g.b_tiled ? pl.declare(e, "b", TensorKind::Input, in, {cdiv(g.k, R), cdiv(g.n, C), R, C})
                  : pl.declare(e, "b", TensorKind::Input, in, {g.k, g.n});
  int64_t table_addr = 0, r_addr = 0, c_addr = 0, q_addr = 0, ws_addr = 0;
  if (g.dequant)
    table_addr = pl.declare(e, "dq", TensorKind::Input, DType::F32, {g.n, 2});
  else if (g.bias)
    table_addr = pl.declare(e, "bias", TensorKind::Input, acc_dt, {g.n});
  if (g.residual) r_addr = pl.declare(e, "r", TensorKind::Input, g.out, {g.m, g.n});
  if (g.group_n > 0)
    c_addr = pl.declare(e, "c", TensorKind::Output, g.out, {g.n / g.group_n, g.m, g.group_n});
  else if (!g.q_only)
    c_addr = pl.declare(e, "c", TensorKind::Output, g.out, {MAP ? g.c_rows.rows : g.m, g.n});
  if (Q) q_addr = pl.declare(e, "q", TensorKind::Output, DType::I8, {g.m, g.n});
  if (SK > 1) ws_addr = pl.declare(e, "ws", TensorKind::Output, DType::F32, {SK, g.m, g.n});

  // b's chunk of kc elements of K at k0 (register) for the tile's columns n0 .. n0 + pw (b's address of n0 in bh)
  // into VMEM at vb. Scratch: t0..t2, kt, vc.
  auto load_b = [&](int64_t kc, Sem wait, Sem signal) {
    const bool bmc = MC == 2;  // b's chunk, read once for the pair
    if (g.trans_b) {  // pw rows of b (output columns), kc elements of K each, KC apart in VMEM
      e.muli(t0, k0, E), e.add(t0, t0, bh), e.li(t1, kc * E), e.li(t2, g.k * E);
      e.dma_ld(vb, t0, pw, t1, t2, astr, {.mcast = bmc, .wait = wait, .signal = signal});
    } else if (g.b_tiled) {  // per fold, the tile's ceil(pw / C) weight tiles are contiguous: one row per fold
      e.muli(t0, k0, NTB * C * E), e.add(t0, t0, bh), e.li(kt, cdiv(kc, R)), e.addi(t1, pw, C - 1), e.li(t2, C);
      e.div(t1, t1, t2), e.muli(t1, t1, R * C * E), e.li(t2, NTB * R * C * E), e.li(vc, W * R * E);
      e.dma_ld(vb, t0, kt, t1, t2, vc, {.mcast = bmc, .wait = wait, .signal = signal});
    } else {
      e.muli(t0, k0, g.n * E), e.add(t0, t0, bh), e.li(kt, kc), e.muli(t1, pw, E), e.li(t2, g.n * E);
      e.dma_ld(vb, t0, kt, t1, t2, wstr, {.mcast = bmc, .wait = wait, .signal = signal});
    }
  };
  // GemmChip::background: BG_PIECE bytes after each chunk's loads, `split` (r25, free without split K) counting
  // the bytes issued so far
  const bool BG = !g.background.empty();
  int64_t BG_PIECE = 0;
  if (BG) {
    if (P != 1 || SK > 1) throw std::invalid_argument("gemm_chip: background loads on one core, without split K");
    const int64_t total = background_bytes(g.background, VA0, VEND, "gemm_chip");
    BG_PIECE = std::max<int64_t>(4096, align64(cdiv(total, T * NKL)));
  }
  auto background_piece = [&](bool all) {
    emit_background_piece(e, g.background, all ? 0 : BG_PIECE, {split, r30, t0, t1, t2, t3, one, zero});
  };
  // b_area (GemmChip): the first tile's chunks of b, each CHUNK_B bytes of VMEM in a slot's layout
  const int64_t CHUNK_B = SLOT - A_SLOT, F = g.b_area_chunks;
  if (area || F > 0) {
    if (SK > 1) throw std::invalid_argument("gemm_chip: b_area is not for split K");
    if (MC) throw std::invalid_argument("gemm_chip: b_area is not for multicast");
    if (g.b_preloaded && F > 0) throw std::invalid_argument("gemm_chip: b_area and b_preloaded together");
    if (F < 0 || F > NKL)
      throw std::invalid_argument("gemm_chip: b_area_chunks " + std::to_string(F) + " of a tile of " +
                                  std::to_string(NKL) + " chunks");
    const int64_t end = VEND;
    if (F > 0 && (g.b_area < 0 || g.b_area % 64 != 0 || (g.b_area < end && g.b_area + F * CHUNK_B > VA0)))
      throw std::invalid_argument("gemm_chip: b_area [" + std::to_string(g.b_area) + ", +" +
                                  std::to_string(F * CHUNK_B) + ") overlaps the kernel's VMEM [" +
                                  std::to_string(VA0) + ", " + std::to_string(end) + ") or is not 64-byte aligned");
  }
  if (area) {  // each core's first tile (tile core.id, row-major: columns n0 .. n0 + pw), chunk c at K offset c * KC
    area->chunk_bytes = CHUNK_B, area->chunks = NKL, area->b_bytes = 0;
    for (int64_t core = 0; core < std::min(P, T); ++core) {
      const int64_t n0 = core % NC * W, pw = std::min(W, g.n - n0);
      const int64_t bh = b_addr + n0 * (g.trans_b ? g.k * E : g.b_tiled ? R * E : E);
      area->b_bytes += g.k * pw * E;
      for (int64_t c = 0; c < F; ++c) {
        const int64_t k0v = c * KC, kc = c == NKL - 1 ? KLAST : KC;
        DmaLoad l;
        l.vaddr = g.b_area + c * CHUNK_B, l.core = P > 1 ? static_cast<int>(core) : -1;
        if (g.trans_b)  // as load_b: pw rows of b, kc elements of K each
          l.haddr = bh + k0v * E, l.rows = pw, l.rowbytes = kc * E, l.hstride = g.k * E, l.vstride = KC * E;
        else if (g.b_tiled)  // per fold, the tile's weight tiles
          l.haddr = bh + k0v * NTB * C * E, l.rows = cdiv(kc, R), l.rowbytes = cdiv(pw, C) * R * C * E,
          l.hstride = NTB * R * C * E, l.vstride = W * R * E;
        else
          l.haddr = bh + k0v * g.n * E, l.rows = kc, l.rowbytes = pw * E, l.hstride = g.n * E, l.vstride = W * E;
        area->loads.push_back(l);
      }
    }
    return {};
  }
  // Tile t (register; with split K, tile t / SK's split t % SK): its rows m0 .. m0 + mt, columns n0 .. n0 + pw, K
  // from kb, a's and b's addresses ah and bh; past the last tile, to `past`.
  auto tile_head = [&](isa::Label past) {
    e.li(t0, T * SK), e.bge(t, t0, past);
    // tile, split (with background loads, whose offset `split` holds, K is whole: the split in t2, 0)
    e.li(t0, SK), e.div(t1, t, t0), e.muli(t2, t1, SK), e.sub(BG ? t2 : split, t, t2);
    e.muli(kb, BG ? t2 : split, KS);
    if (MC == 2)  // column-major: t2 = tile / NR, t1 = tile % NR
      e.li(t0, NR), e.div(t2, t1, t0), e.muli(t0, t2, NR), e.sub(t1, t1, t0);
    else
      e.li(t0, NC), e.div(t2, t1, t0), e.muli(t0, t2, NC), e.sub(t2, t1, t0), e.li(t0, NC), e.div(t1, t1, t0);
    e.muli(m0, t1, TM), e.li(t0, g.m), e.sub(mt, t0, m0), e.li(t0, TM), e.min(mt, mt, t0);
    e.muli(n0, t2, W), e.li(t0, g.n), e.sub(pw, t0, n0), e.li(t0, W), e.min(pw, pw, t0);
    e.muli(ah, m0, g.k * E), e.li(t0, a_addr), e.add(ah, ah, t0);
    e.muli(bh, n0, g.trans_b ? g.k * E : g.b_tiled ? R * E : E), e.li(t0, b_addr), e.add(bh, bh, t0);
  };
  // Strip q (of U*S) of the tile: skipped where the last column tile lacks it; nt = its columns.
  auto strip_guard = [&](int64_t q, Label skip) {
    if (!partial) return;  // nt = SC, set once
    e.li(t0, q * SC), e.bge(t0, pw, skip), e.sub(nt, pw, t0), e.li(t0, SC), e.min(nt, nt, t0);
  };
  auto unit_guard = [&](int64_t j, Label skip) {  // unit j has at least one strip (rows) in this tile
    if (RB > 1) {
      if (row_of(j) > 0) e.li(t0, row_of(j)), e.bge(t0, mt, skip);
      if (partial && strip_of(j, 0) > 0) e.li(t0, strip_of(j, 0) * C), e.bge(t0, pw, skip);
    } else if (partial && j > 0) {
      e.li(t0, j * S * SC), e.bge(t0, pw, skip);
    }
  };
  // Unit j's mxu.lw of fold f of strip sidx of the chunk in slot vb (kt: the fold's rows; nt: the strip's
  // columns), the fold's first waiting for the slot's loads (or for `wait`, given). Scratch: t1, t2.
  auto load_weights = [&](int64_t f, int64_t j, int64_t sidx, Sem wait = Sem{}) {
    const int64_t q = strip_of(j, sidx);
    const Sem wait_full = wait.index > 0 ? wait : f == 0 && sidx == 0 ? FULL(j) : Sem{};
    if (g.trans_b) {  // the strip's SC rows of the panel, from element f*R of each
      e.addi(t1, vb, (q * SC * KC + f * R) * E);
      e.mxu_lw(t1, kt, nt, astr, in, {.trans = true, .mxu = j, .wait = wait_full});
    } else if (g.b_tiled) {  // fold f's tile q: R x C contiguous
      e.addi(t1, vb, (f * W * R + q * R * C) * E), e.li(t2, C * E);
      e.mxu_lw(t1, kt, nt, t2, in, {.mxu = j, .wait = wait_full});
    } else {
      e.addi(t1, vb, (f * R * W + q * SC) * E);
      e.mxu_lw(t1, kt, nt, wstr, in, {.mxu = j, .wait = wait_full});
    }
  };
  if (first_b_only) {  // gemm_chip_first_b: this core's first tile (t = core.id) and its first chunk, as krange takes it
    const Label none = e.label();
    e.core_id(cid), e.addi(t, cid, 0);
    tile_head(none);
    e.addi(k0, kb, 0), e.li(vb, VA0 + A_SLOT), e.li(astr, KC * E), e.li(wstr, W * E);
    // With lw_sem: each unit of the tile then takes its first weights (fold 0 of its first strip of chunk 0, kc
    // elements of K) into its shadow buffer, once a sync after the loads signals lw_sem for it (the kernel's quick
    // start's guards and order)
    auto units_ahead = [&](int64_t kc) {
      if (g.lw_sem <= 0) return;
      const Sem lw = sem(g.lw_sem);
      for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) e.li(vb, VA0 + A_SLOT), e.li(nt, SC), e.li(kt, std::min(R, kc));
        for (int64_t j = 0; j < U; ++j) {
          const Label l = e.label();
          if (RB > 1) unit_guard(j, l);
          strip_guard(strip_of(j, 0), l);
          if (pass == 0)
            e.dmain_sync({.signal = lw});
          else
            load_weights(0, j, 0, lw);
          e.bind(l);
        }
      }
    };
    if (NKL == 1 && split_tail && tail_lead > 0) {  // the core's last tile loads its last fold alone: lead first
      const Label other = e.label();
      e.addi(t0, t, P), e.li(t1, T), e.blt(t0, t1, other);
      load_b(tail_lead, Sem{}, Sem{});
      units_ahead(tail_lead);
      e.jmp(none);
      e.bind(other);
    }
    load_b(NKL > 1 ? KC : KLAST, Sem{}, Sem{});
    for (int64_t c = 1; c < g.b_preloaded; ++c)  // chunk c into slot c, as the first tile's chunks take them
      e.addi(k0, kb, c * KC), e.li(vb, VA0 + c * SLOT + A_SLOT), load_b(KC, Sem{}, Sem{});
    units_ahead(NKL > 1 ? KC : KLAST);
    e.bind(none);
    return e.finish();
  }

  // reg = base + slot * bytes, the slot of tile `tile` (register) among n: this core's ((tile - cid) / P) % n (no
  // register is free to hold a slot: the taps' loads take r29 and r30); clobbers tmp
  auto tile_slot = [&](isa::Reg reg, isa::Reg tmp, isa::Reg tile, int64_t n, int64_t bytes, int64_t base) {
    e.sub(reg, tile, cid), e.li(tmp, P), e.div(reg, reg, tmp), e.li(tmp, n), e.rem(reg, reg, tmp);
    e.muli(reg, reg, bytes), e.addi(reg, reg, base);
  };
  auto bias_slot = [&](isa::Reg reg, isa::Reg tmp) { tile_slot(reg, tmp, t, 2, BTB, VBIAS); };
  for (int64_t j = 0; j < U; ++j)
    e.sem_set(FREE(j), NSLOT), e.sem_set(FULL(j), 0), e.sem_set(AFREE(j), ABUF - (QUICK ? 1 : 0)),
        e.sem_set(AFULL(j), 0);
  if (QUICK) e.sem_set(AIN, 0);
  e.sem_set(CFREE, NCBUF), e.sem_set(CFULL, 0);
  if (TABLE) e.sem_set(BFREE, 2), e.sem_set(BFULL, 0);
  if (g.residual) e.sem_set(RFREE, RSLOTS), e.sem_set(RFULL, 0);
  if (!g.overlap_tiles) e.sem_set(TDONE, 1);
  // With a_wait every semaphore is set here, before any unit instruction: the compiler moves these sets ahead of
  // the kernel running before this one (a sem.set waits for every unit), so that this kernel's loads start while
  // that one runs.
  if (act && g.a_wait) e.sem_set(AOFREE, 2);
  // dst = the VMEM address of piece p of this tile's r slot, clobbering tmp
  auto r_piece = [&](isa::Reg dst, isa::Reg tmp, int64_t p) { tile_slot(dst, tmp, t, RSLOTS, U * S * RP, VR0 + p * RP); };
  e.core_id(cid), e.li(one, 1), e.li(slot, 0), e.li(accslot, 0), e.li(cslot, 0), e.li(astr, KC * E);
  if (BG) e.li(split, 0);
  e.li(wstr, W * E), e.addi(t, cid, 0), e.li(nt, SC);
  if (act) act->init(e, one, t0, t1, t2);
  if (act && !g.a_wait) e.sem_set(AOFREE, 2);
  // The rows unit j streams: mt, or with row blocks its block's (r31)
  auto unit_rows = [&](int64_t j) -> isa::Reg {
    if (RB == 1) return mt;
    e.li(t0, row_of(j)), e.sub(r31, mt, t0), e.li(t0, TMU), e.min(r31, r31, t0);
    return r31;
  };
  // The tile's bias columns into its table, once the drain two tiles back is done with it
  auto load_table = [&] {
    if (!TABLE) return;
    e.muli(t0, n0, TB), e.li(t2, table_addr), e.add(t0, t0, t2);
    bias_slot(vc, t1);
    e.muli(t1, pw, TB);
    e.dma_ld(vc, t0, one, t1, zero, zero, {.wait = BFREE, .signal = BFULL});
  };
  // The tile's r into its slot, strip by strip: r[m0 + r0.., n0 + q*SC..] (row pitch N): after the tile's loads,
  // or (`early_r`: K whole, with background loads) in its last chunk, after its own loads and bias table and before
  // its piece of background loads, as the table: behind the piece's HBM transfer, the drain waited for r. (Without
  // background loads r stays after the tile's matrix work is issued: its transfer there slowed a tile's first
  // weights, 1568 x 64 x 256 on v5e, one chunk a tile: 2,371 cycles against 2,290.)
  const bool early_r = g.residual && SK == 1 && BG;
  auto load_residual = [&] {
    e.dmain_sync({.wait = RFREE});
    for (int64_t j = 0; j < U; ++j)
      for (int64_t sidx = 0; sidx < S; ++sidx) {
        const int64_t q = strip_of(j, sidx), r0 = row_of(j);
        const Label l = e.label();
        if (RB > 1) unit_guard(j, l);
        strip_guard(q, l);
        const isa::Reg rows = unit_rows(j);
        r_piece(t0, t1, j * S + sidx);
        e.muli(t2, m0, g.n), e.add(t2, t2, n0), e.addi(t2, t2, r0 * g.n + q * SC), e.muli(t2, t2, O);
        e.li(t3, r_addr), e.add(t2, t2, t3), e.muli(t1, nt, O), e.li(t3, g.n * O);
        e.dma_ld(t0, t2, rows, t1, t3, t1);
        e.bind(l);
      }
    e.dmain_sync({.signal = RFULL});
  };
  // One chunk of kc elements of K at k0 (register), the first of the tile or not, its last or not. The tile's last
  // chunk loads its bias table after its own loads and before its piece of background loads, whose HBM transfers
  // would otherwise hold the table back (a queue's transfers complete in order), and with it the tile's drain.
  auto next_slot = [&] {
    if (NSLOT == 2) {
      e.sub(slot, one, slot);
    } else {
      const Label l = e.label();
      e.addi(slot, slot, 1), e.li(t0, NSLOT), e.blt(slot, t0, l), e.li(slot, 0);
      e.bind(l);
    }
  };
  // va, vb: the chunk's slot's a and b (b in the area for the core's first tile's first F chunks)
  auto slot_addrs = [&] {
    e.muli(va, slot, SLOT), e.addi(va, va, VA0), e.addi(vb, va, A_SLOT);
    if (F > 0) {
      const Label other = e.label();
      e.bne(t, cid, other), e.li(t0, F * KC), e.bge(k0, t0, other);
      e.li(t0, KC), e.div(t1, k0, t0), e.muli(t1, t1, CHUNK_B), e.addi(vb, t1, g.b_area);
      e.bind(other);
    }
  };
  // The loads of a chunk (its slot's waits, a and b, its signals; the last's table and residual; a piece of the
  // background loads), and its matrix work (the folds; then the next slot).
  auto chunk_loads = [&](int64_t kc, bool first, bool last_of_tile) {
    if (first && !g.overlap_tiles) e.dmain_sync({.wait = TDONE});  // the previous tile is stored
    e.muli(va, slot, SLOT), e.addi(va, va, VA0), e.addi(vb, va, A_SLOT);
    for (int64_t j = 1; j < U; ++j) {
      const Label l = e.label();
      unit_guard(j, l);
      e.dmain_sync({.wait = FREE(j)});
      e.bind(l);
    }
    // a's chunk, then b's (which signals the slot full: transfers complete in order); with a_wait, a tile's
    // first chunk loads b first (it waits for the slot) and a after it (waiting for the kernel before, a_wait).
    // With b_preloaded, the core's first tile finds its first b_preloaded chunks of b in their slots: a's load is
    // such a chunk's last, and a sync signals the slot full.
    const bool b_first = first && g.a_wait > 0, preloaded = g.b_preloaded > 0 && (first || g.b_preloaded > 1);
    const Sem a_wait = b_first ? sem(g.a_wait) : FREE(0), b_wait = b_first ? FREE(0) : Sem{};
    const Sem a_signal = b_first ? FULL(0) : Sem{}, b_signal = b_first ? Sem{} : FULL(0);
    auto load_a = [&](Sem wait, Sem signal) {
      if (g.taps.cin > 0) {
        tap_loads(e, g.taps, E, kc, wait, a_addr);
      } else {
        e.muli(t0, k0, E), e.add(t0, t0, ah), e.li(t1, kc * E), e.li(t2, g.k * E);
        e.dma_ld(va, t0, mt, t1, t2, astr, {.mcast = MC == 1, .wait = wait, .signal = signal});
      }
    };
    // QUICK, the core's first tile (t = core.id): b (or the sync that finds it preloaded, or in the area) waits
    // for the slot and signals it full, then a, then AIN for each unit that computes
    const Label usual = e.label(), loaded = e.label();
    if (first && QUICK) {
      e.bne(t, cid, usual);
      if (preloaded) {
        e.dmain_sync({.wait = FREE(0), .signal = FULL(0)});
      } else if (F > 0) {  // the first tile's first chunk: k0 = kb = 0, b in the area's first chunk
        e.li(vb, g.b_area), e.dmain_sync({.wait = FREE(0), .signal = FULL(0)});
      } else {
        load_b(kc, FREE(0), FULL(0));
      }
      for (int64_t j = 1; j < U; ++j) {
        const Label l = e.label();
        unit_guard(j, l);
        e.dmain_sync({.signal = FULL(j)});
        e.bind(l);
      }
      // each unit's first weights, ahead of a's loads (the core issues in order); with lw_sem already in the
      // unit's shadow buffer (gemm_chip_first_b): an mxu.sync takes the slot's signal in the mxu.lw's place
      e.li(kt, std::min(R, kc));
      for (int64_t j = 0; j < U; ++j) {
        const Label l = e.label();
        if (RB > 1) unit_guard(j, l);
        strip_guard(strip_of(j, 0), l);
        if (g.lw_sem > 0)
          e.mxu_sync({.mxu = j, .wait = FULL(j)});
        else
          load_weights(0, j, 0);
        e.bind(l);
      }
      load_a(Sem{}, Sem{});
      for (int64_t j = 0; j < U; ++j) {
        const Label l = e.label();
        unit_guard(j, l);
        e.dmain_sync({.signal = AIN});
        e.bind(l);
      }
      e.jmp(loaded);
      e.bind(usual);
    }
    if (!b_first) load_a(a_wait, a_signal);
    if (preloaded) {
      const Label other = e.label(), join = e.label();
      e.bne(t, cid, other);
      if (!first) e.li(t0, g.b_preloaded * KC), e.bge(k0, t0, other);  // (the first tile's k0 starts at 0)
      e.dmain_sync({.signal = FULL(0)});
      e.jmp(join);
      e.bind(other);
      load_b(kc, b_wait, b_signal);
      e.bind(join);
    } else if (F > 0) {  // the core's first tile's first F chunks: b in the area (b_area), a alone loads
      const Label other = e.label(), join = e.label();
      e.bne(t, cid, other), e.li(t0, F * KC), e.bge(k0, t0, other);
      e.li(t0, KC), e.div(t1, k0, t0), e.muli(t1, t1, CHUNK_B), e.addi(vb, t1, g.b_area);
      if (b_first)  // (a's load after this waits for the kernel before; the slot must be free as well)
        e.dmain_sync({.wait = FREE(0)});
      else
        e.dmain_sync({.signal = FULL(0)});
      e.jmp(join);
      e.bind(other);
      load_b(kc, b_wait, b_signal);
      e.bind(join);
    } else {
      load_b(kc, b_wait, b_signal);
    }
    if (b_first) {
      load_a(a_wait, a_signal);
      e.dmain_sync({.signal = sem(g.a_wait)});  // for the next tile's first chunk
    }
    for (int64_t j = 1; j < U; ++j) {
      const Label l = e.label();
      unit_guard(j, l);
      e.dmain_sync({.signal = FULL(j)});
      e.bind(l);
    }
    e.bind(loaded);
    if (last_of_tile) load_table();
    if (last_of_tile && early_r) load_residual();
    background_piece(false);
  };
  auto chunk_compute = [&](int64_t kc, bool first) {
    const int64_t folds = cdiv(kc, R);
    for (int64_t f = 0; f < folds; ++f) {
      e.li(kt, std::min(R, kc - f * R));
      for (int64_t j = 0; j < U; ++j)
        for (int64_t sidx = 0; sidx < S; ++sidx) {
          const int64_t q = strip_of(j, sidx);  // the strip of columns
          const Label l = e.label();
          if (RB > 1) unit_guard(j, l);
          strip_guard(q, l);
          const isa::Reg rows = unit_rows(j);
          if (first && f == 0 && sidx == 0 && QUICK) {  // (the core's first tile issued it ahead of a's loads)
            const Label skip = e.label();
            e.beq(t, cid, skip), load_weights(f, j, sidx), e.bind(skip);
          } else {
            load_weights(f, j, sidx);
          }
          e.addi(t1, va, (row_of(j) * KC + f * R) * E), e.addi(t2, ar, sidx * TMU);
          // The unit's last read of the slot frees it. With a partial tile, the unit's last present strip
          // may come before S - 1: the signal then goes on a sync after the strips (below). QUICK: the core's
          // first tile's first product waits for a (AIN), every other tile's first for its accumulator region.
          auto mm = [&](Sem wait) {
            e.mxu_mm(t1, rows, t2, astr, in,
                     {.accumulate = !(first && f == 0), .mxu = j, .wait = wait,
                      .signal = f == folds - 1 && sidx == S - 1 ? FREE(j) : Sem{}});
          };
          if (first && f == 0 && sidx == 0 && QUICK) {
            const Label other = e.label(), join = e.label();
            e.bne(t, cid, other), mm(AIN), e.jmp(join);
            e.bind(other), mm(AFREE(j));
            e.bind(join);
          } else {
            mm(first && f == 0 && sidx == 0 ? AFREE(j) : Sem{});
          }
          e.bind(l);
        }
      if (partial && RB == 1 && f == folds - 1)
        for (int64_t j = 0; j < U; ++j) {  // units whose last strip is missing free the slot here
          const Label l = e.label();
          if (j > 0) e.li(t0, j * S * SC), e.bge(t0, pw, l);
          e.li(t0, (j * S + S - 1) * SC), e.blt(t0, pw, l), e.mxu_sync({.mxu = j, .signal = FREE(j)});
          e.bind(l);
        }
    }
    next_slot();
  };
  // AHEAD: the core's first tile issues its second chunk's loads right after its first's, before the first's
  // matrix work (whose instructions the core issues first otherwise, while the load queue idles); that chunk then
  // skips its loads (the first tile's, t = core.id, at k0 = kb + KC). K whole (one K range a tile).
  const bool AHEAD = g.quick_start && SK == 1;
  auto chunk = [&](int64_t kc, bool first, bool last_of_tile = false) {
    if (AHEAD && !first) {
      const Label load = e.label(), loaded = e.label();
      e.bne(t, cid, load), e.li(t0, KC), e.add(t0, t0, kb), e.bne(k0, t0, load);
      slot_addrs(), e.jmp(loaded);
      e.bind(load);
      chunk_loads(kc, first, last_of_tile);
      e.bind(loaded);
    } else {
      chunk_loads(kc, first, last_of_tile);
    }
    chunk_compute(kc, first);
  };

  const Label tile = e.label(), done = e.label();
  e.bind(tile);
  tile_head(done);
  e.muli(ar, accslot, S * TMU);
  // The K range [kb, kb + (nk - 1) * KC + klast): the first chunk, the middle ones in a loop, the last. With
  // `split`, the last chunk's last fold is a chunk of its own: the rest of the chunk, smaller, arrives sooner and
  // its matrix work runs while that fold loads, where the whole chunk's came after its load. The folds are those
  // of every other schedule (the same sums, the same bits). Only a core's last tile gains from it (the next
  // tile's loads hide the other tiles' last chunks). (A chunk a fold for the whole last chunk leaves one fold
  // after the last load, but small transfers cost more than that saves: v6e 128 x 3072 x 768 9,428 cycles against
  // 8,566.)
  auto krange = [&](int64_t nk, int64_t klast, bool split_last) {
    const int64_t lead = split_last ? tail_lead : 0;  // (split only for the K range that ends in KLAST)
    auto last = [&](int64_t at, bool first) {
      if (lead > 0) {
        chunk(lead, first);
        e.addi(k0, kb, at + lead);
      }
      chunk(klast - lead, first && lead == 0, true);
    };
    e.addi(k0, kb, 0);
    if (nk == 1) return last(0, true);
    chunk_loads(KC, true, false);
    if (AHEAD) {  // the second chunk's loads (slot and k0 after it, then back)
      const Label later = e.label();
      e.bne(t, cid, later);
      next_slot(), e.addi(k0, kb, KC);
      if (nk > 2) chunk_loads(KC, false, false);
      else if (lead > 0) chunk_loads(lead, false, false);
      else chunk_loads(klast, false, true);
      if (NSLOT == 2) {
        e.sub(slot, one, slot);
      } else {
        const Label l = e.label();
        e.addi(slot, slot, -1), e.bge(slot, zero, l), e.li(slot, NSLOT - 1);
        e.bind(l);
      }
      e.addi(k0, kb, 0), slot_addrs();
      e.bind(later);
    }
    chunk_compute(KC, true);
    if (nk > 2) {
      const Label mid = e.label();
      e.addi(k0, kb, KC);
      e.bind(mid);
      chunk(KC, false);
      e.addi(k0, k0, KC), e.addi(t0, kb, (nk - 1) * KC), e.blt(k0, t0, mid);
    }
    e.addi(k0, kb, (nk - 1) * KC);
    last((nk - 1) * KC, false);
  };
  // GemmChip::prefetch: after the core's last tile's last chunk (its loads and products), before its drain
  auto prefetch = [&] {
    if (g.prefetch.empty()) return;
    if (P != 1 || SK > 1) throw std::invalid_argument("gemm_chip: prefetch loads on one core, without split K");
    const int64_t end = VEND;
    for (const DmaLoad& l : g.prefetch)
      if (l.rows > 0 && l.vaddr < end && l.vaddr + (l.rows - 1) * l.vstride + l.rowbytes > VA0)
        throw std::invalid_argument("gemm_chip: a prefetch into VMEM " + std::to_string(l.vaddr) +
                                    " inside the kernel's own [" + std::to_string(VA0) + ", " + std::to_string(end) +
                                    ")");
    const Label skip = e.label();
    e.addi(t0, t, P), e.li(t1, T), e.blt(t0, t1, skip);
    for (const DmaLoad& l : g.prefetch) {
      e.li(t0, l.vaddr), e.li(t1, l.haddr), e.li(t2, l.rows), e.li(t3, l.rowbytes), e.li(r29, l.hstride);
      e.li(r31, l.vstride);
      e.dma_ld(t0, t1, t2, t3, r29, r31, {.bg = l.bg, .signal = l.signal > 0 ? isa::sem(l.signal) : isa::Sem{}});
    }
    e.bind(skip);
  };
  if (SK > 1) {
    const Label last = e.label(), drain = e.label();
    e.li(t0, SK - 1), e.beq(split, t0, last);
    krange(NKS, KC, false);
    e.jmp(drain);
    e.bind(last);
    krange(NKL, KLAST, false);
    e.bind(drain);
  } else if (split_tail) {  // this core's last tile (none follows at t + P) splits its last chunk
    const Label other = e.label(), ranged = e.label();
    e.addi(t0, t, P), e.li(t1, T), e.blt(t0, t1, other);
    krange(NKL, KLAST, true);
    e.jmp(ranged);
    e.bind(other);
    krange(NKL, KLAST, false);
    e.bind(ranged);
  } else {
    krange(NKL, KLAST, false);
  }
  prefetch();
  if (g.residual && !early_r) load_residual();
  // Before the drain (after act's deferred work): the bias is in; r30 = its table.
  auto bias_ready = [&] {
    if (!TABLE) return;
    e.vpu_sync({.wait = BFULL});
    bias_slot(r30, t0);
  };
  // Drain: every strip of every unit into a C buffer, stored into c.
  if (g.residual && act) e.vpu_sync({.wait = RFULL});
  // act, software-pipelined over this core's tiles: the activation and the stores of the previous tile come after
  // this tile's loads and matrix work are issued (so that the vector unit's long activation does not hold them
  // back in the core's in-order issue), then this tile's strips are drained in f32 into the pieces; after the
  // loop, the last tile's activation and stores.
  auto act_coords = [&](isa::Reg tl) {  // m0, mt, n0, pw of tile `tl` (K whole: one split)
    if (MC == 2)  // column-major
      e.li(t0, NR), e.div(t2, tl, t0), e.muli(t1, t2, NR), e.sub(t1, tl, t1);
    else
      e.li(t0, NC), e.div(t1, tl, t0), e.muli(t2, t1, NC), e.sub(t2, tl, t2);
    e.muli(m0, t1, TM), e.li(t0, g.m), e.sub(mt, t0, m0), e.li(t0, TM), e.min(mt, mt, t0);
    e.muli(n0, t2, W), e.li(t0, g.n), e.sub(pw, t0, n0), e.li(t0, W), e.min(pw, pw, t0);
  };
  // The activation over the pieces of tile t - P (this core's previous) into its out slot, and its stores.
  auto act_and_store = [&] {
    e.addi(t3, t, -P);
    act_coords(t3);
    tile_slot(r30, t0, t3, 2, AOB, VAO);
    if (Q) tile_slot(vq, t0, t3, 2, AQB, VAQ);
    e.vpu_sync({.wait = AOFREE}), e.li(vc, VAF), e.li(t3, AE);
    act->apply(e, vc, r30, t3, one, t0, t2, r29);
    if (Q) e.li(t0, g.q_scale_bits), e.vpu_cast(vq, r30, t3, t0, g.out, DType::I8, {.scale_en = true});
    e.vpu_sync({.signal = CFULL});
    for (int64_t j = 0; j < U; ++j)
      for (int64_t sidx = 0; sidx < S; ++sidx) {
        const int64_t q = strip_of(j, sidx), r0 = row_of(j);
        const Label l = e.label();
        unit_guard(j, l);
        strip_guard(q, l);
        const isa::Reg rows = unit_rows(j);
        e.muli(t0, m0, g.n), e.add(t0, t0, n0), e.addi(t0, t0, r0 * g.n + q * SC);
        const Sem first = j == 0 && sidx == 0 ? CFULL : Sem{};
        if (Q) {  // the piece's q rows (row pitch N)
          e.li(t2, q_addr), e.add(t2, t2, t0), e.li(t1, g.n), e.addi(vc, vq, (j * S + sidx) * TMU * C);
          e.dma_st(t2, vc, rows, nt, t1, nt, {.wait = first});
        }
        if (!g.q_only) {
          e.muli(t0, t0, O), e.li(t2, c_addr), e.add(t0, t0, t2), e.li(t2, g.n * O), e.muli(t1, nt, O);
          e.addi(vc, r30, (j * S + sidx) * TMU * C * O);
          e.dma_st(t0, vc, rows, t1, t2, t1, {.wait = Q ? Sem{} : first});
        }
        e.bind(l);
      }
    e.dmaout_sync({.signal = AOFREE});
  };
  if (act) {
    const Label first = e.label();
    e.sub(t0, t, cid), e.beq(t0, zero, first);
    act_and_store();
    act_coords(t);  // back to this tile
    e.bind(first);
    bias_ready();
    for (int64_t j = 0; j < U; ++j) {
      const Label lu = e.label();
      unit_guard(j, lu);
      e.mxu_sync({.mxu = j, .signal = AFULL(j)}), e.vpu_sync({.wait = AFULL(j)});
      for (int64_t sidx = 0; sidx < S; ++sidx) {
        const int64_t q = strip_of(j, sidx);
        const Label l = e.label();
        strip_guard(q, l);
        const isa::Reg rows = unit_rows(j);
        e.li(vc, VAF + (j * S + sidx) * TMU * C * 4), e.addi(t0, ar, j * ACC + sidx * TMU);
        e.muli(t1, nt, 4), e.addi(t2, r30, q * SC * TB), e.li(t3, g.scale_bits);
        e.vpu_acc(vc, t0, rows, nt, t1, t2, t3, acc_dt, DType::F32,
                  {.bias_en = g.bias, .relu = g.relu, .scale_en = g.scale_bits != 0, .dequant = g.dequant});
        e.bind(l);
      }
      e.vpu_sync({.signal = AFREE(j)});
      e.bind(lu);
    }
  }
  // Without act, the drain of tile t (registers t, m0, mt, n0, pw, ar: its own), software-pipelined where the
  // accumulators are double-buffered (`defer`): the core's previous tile is drained after this one's loads and
  // matrix work are issued, the last after the loop. In the core's in-order issue, a drain issued right after its
  // tile's matrix work (more vector-unit instructions than its queue holds: with a residual, its syncs, vpu.acc and
  // vpu.add, 4 a strip) held the next tile's loads back until the vector unit had taken most of it, so the units
  // waited for the drain they were to overlap (ResNet-50's 1 x 1 convolutions of 3136 x 64 x 256 with a residual on
  // v5e: 4,204 cycles, the drain 2,664 of them).
  const bool defer = !act && ABUF == 2 && SK == 1 && g.overlap_tiles;
  // With defer, each unit's AFULL is signalled right after the tile's matrix work (a sync after the next tile's
  // would wait for that one's as well).
  auto signal_full = [&] {
    for (int64_t j = 0; j < U; ++j) {
      const Label lu = e.label();
      unit_guard(j, lu);
      e.mxu_sync({.mxu = j, .signal = AFULL(j)});
      e.bind(lu);
    }
  };
  // GemmChip::c_rows: the piece's `rows` rows (of t1 bytes, t1 apart in VMEM from vc), the product's rows m0 + r0
  // on, columns n0 + col on, stored a run of kept rows of a group at a time; the first store waits for `wait`, a
  // dmaout.sync after the last signals `signal` (stores complete in order). Scratch: t0, t2, t3, r29, k0 (the
  // row), kt (the piece's end), vq (c's address of the piece's columns): free during a drain (no q).
  // Where a strip is c's whole row (N <= SC: its rows are c's rows, packed) and the map's groups lie g * pitch
  // apart (one image, or images a whole number of pitches apart), three stores at most: the first group's kept
  // rows if the piece starts inside it, every whole group's at once (a 2-D transfer: `keep` rows a group, groups
  // `pitch` apart in c and `group` rows apart in VMEM), and the last group's if the piece ends inside it. Else a
  // loop of a store per group.
  const bool MAP_2D = MAP && g.n <= SC &&
                      (g.c_rows.per_image == 0 || g.c_rows.image_pitch == g.c_rows.per_image * g.c_rows.pitch ||
                       g.m <= g.c_rows.per_image * g.c_rows.group);
  auto store_mapped_2d = [&](int64_t r0, isa::Reg rows, Sem wait, Sem signal) {
    const RowMap& map = g.c_rows;
    const int64_t G = map.group, K = map.keep, RBY = g.n * O;
    const Label whole = e.label(), tail = e.label(), done = e.label();
    e.dmaout_sync({.wait = wait});
    e.addi(k0, m0, r0), e.add(kt, k0, rows);  // the piece's product rows [k0, kt)
    e.li(t3, G), e.div(r29, k0, t3), e.mul(vq, r29, t3);  // its first group r29, from row vq
    e.beq(vq, k0, whole);
    // the first group, entered at row k0 - vq: its kept rows from there to the piece's end
    e.addi(t2, vq, G), e.min(t2, t2, kt), e.sub(t2, t2, vq), e.li(t3, K), e.min(t2, t2, t3);  // kept end in the group
    e.sub(t3, k0, vq), e.sub(t2, t2, t3);                                                     // rows kept from k0
    e.addi(vq, vq, G);  // the next group's first row
    e.bge(zero, t2, whole);
    e.muli(t0, r29, map.pitch), e.muli(t3, t3, RBY), e.add(t0, t0, t3), e.li(t3, c_addr), e.add(t0, t0, t3);
    e.muli(t2, t2, RBY), e.dma_st(t0, vc, one, t2, t2, t2);
    e.bind(whole);  // vq: the first whole group's first row (k0, or past the first group)
    e.bge(vq, kt, done);
    e.li(t3, G), e.div(r29, vq, t3), e.div(t2, kt, t3), e.sub(t2, t2, r29);  // whole groups: from r29, t2 of them
    e.bge(zero, t2, tail);
    e.muli(t0, r29, map.pitch), e.li(t3, c_addr), e.add(t0, t0, t3);
    e.sub(t3, vq, k0), e.muli(t3, t3, RBY), e.add(t3, t3, vc), e.li(k0, K * RBY), e.li(r29, map.pitch);
    e.li(vq, G * RBY), e.dma_st(t0, t3, t2, k0, r29, vq);
    e.bind(tail);  // the last group, if the piece ends inside it: its kept rows up to kt
    e.addi(k0, m0, r0);  // (k0 again)
    e.li(t3, G), e.div(r29, kt, t3), e.mul(vq, r29, t3);  // kt's group r29 from row vq
    e.bge(vq, kt, done), e.blt(vq, k0, done);             // none, or the first group's (stored above)
    e.sub(t2, kt, vq), e.li(t3, K), e.min(t2, t2, t3), e.bge(zero, t2, done);
    e.muli(t0, r29, map.pitch), e.li(t3, c_addr), e.add(t0, t0, t3);
    e.sub(t3, vq, k0), e.muli(t3, t3, RBY), e.add(t3, t3, vc), e.muli(t2, t2, RBY);
    e.dma_st(t0, t3, one, t2, t2, t2);
    e.bind(done);
    e.dmaout_sync({.signal = signal});
  };
  auto store_mapped = [&](int64_t r0, int64_t col, isa::Reg rows, Sem wait, Sem signal) {
    if (MAP_2D) return store_mapped_2d(r0, rows, wait, signal);
    const RowMap& map = g.c_rows;
    const Label loop = e.label(), next = e.label();
    e.dmaout_sync({.wait = wait});
    e.addi(k0, m0, r0), e.add(kt, k0, rows), e.muli(vq, n0, O), e.li(t3, c_addr + col * O), e.add(vq, vq, t3);
    e.bind(loop);
    e.li(t3, map.group), e.div(r29, k0, t3), e.mul(t0, r29, t3), e.sub(t0, k0, t0);  // group r29, row t0 in it
    e.li(t3, map.keep), e.sub(t3, t3, t0), e.sub(t2, kt, k0), e.min(t3, t3, t2);    // its rows kept, to the end
    e.bge(zero, t3, next);
    e.muli(t0, t0, g.n * O);
    if (map.per_image > 0 && map.image_pitch != map.per_image * map.pitch)
      e.li(t2, map.per_image), e.div(t2, r29, t2), e.muli(t2, t2, map.image_pitch - map.per_image * map.pitch),
          e.add(t0, t0, t2);
    e.muli(r29, r29, map.pitch), e.add(t0, t0, r29), e.add(t0, t0, vq);
    e.sub(t2, k0, m0), e.addi(t2, t2, -r0), e.mul(t2, t2, t1), e.add(t2, t2, vc), e.li(r29, g.n * O);
    e.dma_st(t0, t2, t3, t1, r29, t1);
    e.bind(next);
    e.li(t3, map.group), e.div(r29, k0, t3), e.addi(r29, r29, 1), e.mul(r29, r29, t3), e.min(k0, r29, kt);
    e.blt(k0, kt, loop);
    e.dmaout_sync({.signal = signal});
  };
  auto drain = [&] {
    if (g.residual) e.vpu_sync({.wait = RFULL});
    bias_ready();
    for (int64_t j = 0; j < U; ++j) {
      const Label lu = e.label();
      unit_guard(j, lu);
      if (!defer) e.mxu_sync({.mxu = j, .signal = AFULL(j)});
      e.vpu_sync({.wait = AFULL(j)});
      for (int64_t sidx = 0; sidx < S; ++sidx) {
        const int64_t q = strip_of(j, sidx);  // the strip of columns
        const Label l = e.label();
        strip_guard(q, l);
        const isa::Reg rows = unit_rows(j);
        const int64_t r0 = row_of(j);  // the block's first row in the tile
        e.muli(vc, cslot, CQ_BYTES), e.addi(vc, vc, VC0), e.addi(t0, ar, j * ACC + sidx * TMU), e.muli(t1, nt, OD);
        e.vpu_sync({.wait = CFREE}), e.addi(t2, r30, q * SC * TB);
        if (RES)  // the residual's address in the scale operand's place
          r_piece(t3, r29, j * S + sidx);
        else
          e.li(t3, g.scale_bits);
        if (!g.q_only)
          e.vpu_acc(vc, t0, rows, nt, t1, t2, t3, acc_dt, SK > 1 ? DType::F32 : g.out,
                    {.bias_en = g.bias, .relu = RES ? g.residual_relu : g.relu, .scale_en = g.scale_bits != 0,
                     .dequant = g.dequant, .res = RES});
        if (Q && !g.residual) {  // the strip's q tile from the same accumulators (x q_scale, i8), after its C tile
          e.addi(vq, vc, C_BYTES), e.li(t3, g.q_scale_bits);
          e.vpu_acc(vq, t0, rows, nt, nt, t2, t3, acc_dt, DType::I8,
                    {.bias_en = g.bias, .relu = g.relu, .scale_en = true, .dequant = g.dequant});
        }
        if (RQ) {  // c = c + r (computed in f32, rounded to c's type), its ReLU, then q = i8(c * q_scale) from c as
                   // stored, after its C tile (as the row-wise Add that writes an int8 copy computes them)
          e.mul(t3, rows, nt);
          if (!RES) r_piece(t2, r29, j * S + sidx), e.vpu_add(vc, vc, t2, t3, g.out, {.relu = g.residual_relu});
          e.addi(vq, vc, C_BYTES), e.li(r29, g.q_scale_bits);
          e.vpu_cast(vq, vc, t3, r29, g.out, DType::I8, {.scale_en = true});
          e.muli(t1, nt, OD);  // (c's row bytes, for its store)
        } else if (g.residual && !RES) {  // c + r over the packed strip (row pitch nt*O both) and its ReLU, one pass
          r_piece(t2, t3, j * S + sidx);
          e.mul(t3, rows, nt), e.vpu_add(vc, vc, t2, t3, g.out, {.relu = g.residual_relu});
        }
        e.vpu_sync({.signal = CFULL});
        if (g.group_n > 0) {  // c's element (m0 + r0, n) in its group: (n / group_n, m0 + r0, n % group_n)
          e.addi(t0, n0, q * SC), e.li(t2, g.group_n), e.div(t3, t0, t2), e.mul(t2, t3, t2), e.sub(t0, t0, t2);
          e.muli(t3, t3, g.m), e.add(t3, t3, m0), e.addi(t3, t3, r0), e.muli(t3, t3, g.group_n), e.add(t0, t0, t3);
        } else {
          e.muli(t0, m0, g.n), e.add(t0, t0, n0), e.addi(t0, t0, r0 * g.n + q * SC);
        }
        if (Q) {  // q's rows first (row pitch N); the stores complete in order, so c's store frees the buffer
          e.li(t2, q_addr), e.add(t2, t2, t0), e.li(t3, g.n);
          e.dma_st(t2, vq, rows, nt, t3, nt, {.wait = CFULL, .signal = g.q_only ? CFREE : Sem{}});
        }
        if (SK > 1) {  // the split's partial tile: ws[split, m0:, n0:] in f32
          e.muli(t2, split, g.m * g.n), e.add(t0, t0, t2), e.muli(t0, t0, 4), e.li(t2, ws_addr);
          e.add(t0, t0, t2), e.li(t2, g.n * 4);
        } else if (!g.q_only) {
          e.muli(t0, t0, O), e.li(t2, c_addr), e.add(t0, t0, t2), e.li(t2, (g.group_n > 0 ? g.group_n : g.n) * O);
        }
        if (MAP)
          store_mapped(r0, q * SC, rows, CFULL, CFREE);
        else if (!g.q_only)  // (with q_only, q's store freed the buffer)
          e.dma_st(t0, vc, rows, t1, t2, t1, {.wait = Q ? Sem{} : CFULL, .signal = CFREE});
        e.addi(cslot, cslot, 1), e.li(t0, NCBUF), e.blt(cslot, t0, l), e.li(cslot, 0);
        e.bind(l);
      }
      e.vpu_sync({.signal = AFREE(j)});
      e.bind(lu);
    }
    if (TABLE) e.vpu_sync({.signal = BFREE});
    if (g.residual) e.vpu_sync({.signal = RFREE});
    if (!g.overlap_tiles) e.dmaout_sync({.signal = TDONE});  // this tile is stored
  };
  // The core's previous tile (t - P, in the other accumulator region), unless t is its first
  auto drain_previous = [&] {
    const Label first = e.label();
    e.sub(t0, t, cid), e.beq(t0, zero, first);
    e.addi(t, t, -P);
    act_coords(t);
    e.sub(ar, one, accslot), e.muli(ar, ar, S * TMU);
    drain();
    e.addi(t, t, P);
    e.bind(first);
  };
  if (defer) {
    signal_full();
    drain_previous();
  } else if (!act) {
    drain();
  }
  if (TABLE && act) e.vpu_sync({.signal = BFREE});
  if (g.residual && act) e.vpu_sync({.signal = RFREE});
  if (ABUF == 2) e.sub(accslot, one, accslot);
  e.addi(t, t, P), e.jmp(tile);
  e.bind(done);
  background_piece(true);  // what the chunks left of the background loads
  if (defer) drain_previous();  // this core's last tile, if it had any (accslot flipped past it)
  if (act) {  // this core's last tile, if it had any
    const Label none = e.label();
    e.sub(t0, t, cid), e.beq(t0, zero, none);
    act_and_store();
    e.bind(none);
  }
  if (SK > 1) {
    // Reduction, after every core's partials are in ws: the M*N results in chunks of EL elements dealt over the
    // cores, EL small enough that every core gets a chunk where M*N allows (reduce_chunk). Per chunk, one transfer
    // reads every split's partials (SK rows of nt f32, M*N apart in ws) into one of two X buffers, so the next
    // chunk's read overlaps this one's adds; x = ws[0] + ws[1] + ... in split order (f32), cast to c's type and
    // stored. Semaphores 1-3 are reused (every unit is idle at the barrier).
    const int64_t MN = g.m * g.n;
    const int64_t EL = reduce_chunk(MN, SK, O, VMEM, P), NCH = cdiv(MN, EL);
    const int64_t RS = align64(EL * 4), XB = SK * RS, VO = 2 * XB;
    const Sem XFULL = sem(1), XFREE = sem(2), OFREE = sem(3);
    const Label reduce = e.label(), end = e.label();
    e.barrier(), e.sem_set(XFULL, 0), e.sem_set(XFREE, 2), e.sem_set(OFREE, 1), e.sem_set(CFULL, 0);
    e.addi(t, cid, 0), e.li(slot, 0), e.li(one, 1), e.li(ar, SK), e.li(t3, RS);
    e.bind(reduce);
    e.li(t0, NCH), e.bge(t, t0, end);
    e.muli(k0, t, EL), e.li(t0, MN), e.sub(nt, t0, k0), e.li(t0, EL), e.min(nt, nt, t0), e.muli(t1, nt, 4);
    e.muli(t0, k0, 4), e.li(t2, ws_addr), e.add(t0, t0, t2), e.li(t2, MN * 4), e.addi(va, slot, 0);
    e.dma_ld(va, t0, ar, t1, t2, t3, {.wait = XFREE, .signal = XFULL});
    e.vpu_sync({.wait = XFULL});
    for (int64_t sp = 1; sp < SK; ++sp) e.addi(vb, va, sp * RS), e.vpu_add(va, va, vb, nt, DType::F32);
    e.li(vc, VO), e.vpu_cast(vc, va, nt, zero, DType::F32, g.out, {.wait = OFREE});
    e.vpu_sync({.signal = XFREE}), e.vpu_sync({.signal = CFULL});
    e.muli(t0, k0, O), e.li(t2, c_addr), e.add(t0, t0, t2), e.muli(t1, nt, O);
    e.dma_st(t0, vc, one, t1, zero, zero, {.wait = CFULL, .signal = OFREE});
    e.li(t0, XB), e.sub(slot, t0, slot);
    e.addi(t, t, P), e.jmp(reduce);
    e.bind(end);
  }
  e.halt();
  return e.finish();
}

}  // namespace

namespace {

// The checked shape of a request: cores and units used, and the schedule Auto resolves to.
struct Resolved {
  int64_t P, U;
  GemmSchedule schedule;
};

// Checks a request against the chip (std::invalid_argument says what is wrong) and resolves its schedule.
Resolved resolve(const GemmChip& g, const std::map<std::string, int64_t>& s) {
  const int64_t R = symbol(s, "MXU_ROWS"), C = symbol(s, "MXU_COLS"), ACC = symbol(s, "ACC_ROWS"),
                VMEM = symbol(s, "VMEM_BYTES");
  const int64_t P = g.cores ? g.cores : symbol(s, "CORES");
  const int64_t U = g.mxus ? g.mxus : symbol(s, "MXUS");
  if (g.m < 1 || g.k < 1 || g.n < 1) throw std::invalid_argument("gemm_chip: M, K and N must be positive");
  if (g.in != isa::DType::I8 && g.in != isa::DType::BF16 && g.in != isa::DType::F8E4M3)
    throw std::invalid_argument("gemm_chip: inputs must be i8, bf16 or f8e4m3");
  if (P < 1 || P > symbol(s, "CORES"))
    throw std::invalid_argument("gemm_chip: " + std::to_string(P) + " cores asked, the chip has " +
                                std::to_string(symbol(s, "CORES")));
  if (U < 1 || U > symbol(s, "MXUS") || U > 7)
    throw std::invalid_argument("gemm_chip: " + std::to_string(U) + " matrix units per core asked (the chip has " +
                                std::to_string(symbol(s, "MXUS")) + "; the kernel's semaphores allow 7)");
  GemmSchedule schedule = g.schedule;
  const bool epilogue = g.bias || g.relu || g.scale_bits != 0 || g.b_tiled || g.dequant || g.residual || g.act;
  if (g.residual && ((g.out != isa::DType::BF16 && g.out != isa::DType::F32) || g.q_only || g.group_n != 0))
    throw std::invalid_argument("gemm_chip: residual gives bf16 or f32 (q beside it, not alone), without group_n");
  if (g.residual_relu && !g.residual) throw std::invalid_argument("gemm_chip: residual_relu needs residual");
  if (g.act && (!rowwise::is_elementwise(*g.act) || g.act->outputs[0].dtype != g.out || g.group_n != 0 ||
                g.residual || (g.out != isa::DType::BF16 && g.out != isa::DType::F32)))
    throw std::invalid_argument("gemm_chip: act is an elementwise program of one f32 input, giving the output "
                                "type (bf16 or f32), without group_n or residual");
  if (g.dequant && (g.in != isa::DType::I8 || (g.out != isa::DType::BF16 && g.out != isa::DType::F32)))
    throw std::invalid_argument("gemm_chip: dequant takes i8 inputs and gives bf16 or f32");
  if (g.q_scale_bits != 0 && (!g.dequant || g.scale_bits != 0))
    throw std::invalid_argument("gemm_chip: q_scale needs dequant and no scale");
  if (g.q_only && (g.q_scale_bits == 0 || g.split_k > 1 || g.max_split_k > 1))
    throw std::invalid_argument("gemm_chip: q_only needs q_scale and no split K");
  if ((g.trans_b || epilogue) && schedule == GemmSchedule::Strips)
    throw std::invalid_argument("gemm_chip: trans_b, b_tiled, bias, relu and scale need the tiled schedule");
  if (g.trans_b && g.b_tiled) throw std::invalid_argument("gemm_chip: b is either transposed or tiled, not both");
  if (epilogue && (g.split_k > 1 || g.max_split_k > 1))
    throw std::invalid_argument("gemm_chip: bias, relu, scale and b_tiled do not combine with split K");
  if ((g.bias || g.dequant || g.residual || g.act) && U > 6)
    throw std::invalid_argument(
        "gemm_chip: with a bias, a residual or an activation the kernel's semaphores allow 6 matrix units per core");
  if (g.reduction_launch_cycles < 0) throw std::invalid_argument("gemm_chip: reduction_launch_cycles is negative");
  if (g.b_preloaded < 0) throw std::invalid_argument("gemm_chip: b_preloaded is negative");
  if ((g.b_preloaded || g.vmem_base != 0) &&
      (g.split_k > 1 || g.max_split_k > 1 || schedule == GemmSchedule::Strips || g.vmem_base % 64 != 0))
    throw std::invalid_argument("gemm_chip: b_preloaded and vmem_base need the tiled schedule and no split K "
                                "(vmem_base a multiple of 64)");
  if (g.a_wait != 0 && (g.a_wait <= 4 * U + 7 || g.a_wait >= isa::kNumSems || P != 1 || g.taps.cin > 0 ||
                        g.split_k > 1 || g.max_split_k > 1 || schedule == GemmSchedule::Strips))
    throw std::invalid_argument("gemm_chip: a_wait needs one core, the tiled schedule, a a matrix, no split K, and a "
                                "semaphore from " + std::to_string(4 * U + 8) + " to " +
                                std::to_string(isa::kNumSems - 1));
  if (!g.overlap_tiles) {
    if (g.residual || g.act || U > 6 || schedule == GemmSchedule::Strips)
      throw std::invalid_argument("gemm_chip: overlap_tiles = false needs the tiled schedule, no residual or act, and "
                                  "at most 6 matrix units per core");
    schedule = GemmSchedule::Tiles;
  }
  if (g.group_n != 0) {
    if (g.group_n < 0 || g.n % g.group_n != 0 || g.group_n % C != 0 || g.q_scale_bits != 0 || g.split_k > 1 ||
        g.max_split_k > 1 || schedule == GemmSchedule::Strips)
      throw std::invalid_argument("gemm_chip: group_n must divide N and be a multiple of " + std::to_string(C) +
                                  " columns, with the tiled schedule, no q and no split K");
    schedule = GemmSchedule::Tiles;
  }
  if (g.c_rows.group > 0) {
    if (g.split_k > 1 || g.max_split_k > 1 || schedule == GemmSchedule::Strips)
      throw std::invalid_argument("gemm_chip: c_rows needs the tiled schedule and no split K");
    schedule = GemmSchedule::Tiles;
  }
  if (g.taps.cin > 0) {
    const ConvTaps& x = g.taps;
    if (g.k % x.cin != 0 || (g.k / x.cin) % std::max<int64_t>(x.kw, 1) != 0)
      throw std::invalid_argument("gemm_chip: K = " + std::to_string(g.k) + " is not whole taps of " +
                                  std::to_string(x.cin) + " elements in rows of " + std::to_string(x.kw));
    if (x.rows < 1 || x.kw < 1 || x.sh < 1 || x.sw < 1 || x.dh < 1 || x.dw < 1 || x.wq < 1 || x.phase_rows < 0 ||
        x.pitch < 1)
      throw std::invalid_argument("gemm_chip: taps need positive rows, kw, strides, dilations, wq and pitch");
    int64_t reach = 0;  // the furthest row of a any tap reads
    for (int64_t t = 0; t < g.k / x.cin; ++t) reach = std::max(reach, (g.m - 1) * x.pitch + tap_row_offset(x, t));
    if (reach >= x.rows)
      throw std::invalid_argument("gemm_chip: the taps read row " + std::to_string(reach) + " of a, which has " +
                                  std::to_string(x.rows) + " rows");
    if (g.trans_b || schedule == GemmSchedule::Strips)
      throw std::invalid_argument("gemm_chip: taps need the tiled schedule and b not transposed");
    schedule = GemmSchedule::Tiles;
  }
  if (schedule == GemmSchedule::Auto && (g.trans_b || epilogue || g.a_wait || g.b_preloaded || g.vmem_base))
    schedule = GemmSchedule::Tiles;
  if (schedule == GemmSchedule::Auto) {
    // Strips where a row of a fits and every core has a column group, unless the tiled schedule's estimate is
    // lower (both estimates count the same things: matrix work, transfers at the cores' share of HBM, the fill).
    const bool fits = strips_tm_max(g, R, C, ACC, VMEM, U) >= 1;
    schedule = fits && cdiv(g.n, U * C) >= P ? GemmSchedule::Strips : GemmSchedule::Tiles;
    if (schedule == GemmSchedule::Strips && !has_cache(s) &&
        plan_tiles(g, s, P, U).estimate < strips_estimate_of(g, s, P, U))
      schedule = GemmSchedule::Tiles;
  }
  if (schedule == GemmSchedule::Tiles) {
    if (ACC < 2) throw std::invalid_argument("gemm_chip: the tiled schedule needs at least 2 accumulator rows");
    if (g.slots != 0 && (g.slots < 2 || g.slots > 4))
      throw std::invalid_argument("gemm_chip: " + std::to_string(g.slots) + " operand slots asked (2 to 4)");
  }
  return {P, U, schedule};
}

}  // namespace

namespace {

// The symbols the kernel plans with: VMEM_BYTES less vmem_base (its VMEM starts there).
std::map<std::string, int64_t> from_base(const GemmChip& g, const std::map<std::string, int64_t>& s) {
  if (g.vmem_base == 0) return s;
  const int64_t vmem = symbol(s, "VMEM_BYTES");
  if (g.vmem_base < 0 || g.vmem_base >= vmem)
    throw std::invalid_argument("gemm_chip: vmem_base " + std::to_string(g.vmem_base) + " outside VMEM (" +
                                std::to_string(vmem) + " bytes)");
  std::map<std::string, int64_t> t = s;
  t["VMEM_BYTES"] = vmem - g.vmem_base;
  return t;
}

isa::Program kernel_of(const GemmChip& g, const std::map<std::string, int64_t>& symbols, const Placing& pl,
                       std::string* summary, bool first_b_only = false, int64_t* vmem_end = nullptr,
                       GemmArea* area = nullptr) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  if (first_b_only && (r.schedule != GemmSchedule::Tiles || gemm_chip_splits(g, symbols) != 1))
    throw std::invalid_argument("gemm_chip: the first chunk of b alone needs the tiled schedule and no split K");
  if (g.b_preloaded > 1)
    if (const int64_t most = gemm_chip_preload_limit(g, symbols).chunks; g.b_preloaded > most)
      throw std::invalid_argument("gemm_chip: b_preloaded " + std::to_string(g.b_preloaded) + " chunks, more than " +
                                  std::to_string(most) + " (the slots, and fewer than the first tile's chunks)");
  if ((vmem_end || area || g.b_area_chunks > 0 || !g.background.empty()) && r.schedule != GemmSchedule::Tiles)
    throw std::invalid_argument("gemm_chip: the VMEM end, b_area and background loads are for the tiled schedule only");
  if (r.schedule == GemmSchedule::Strips) return strips_kernel(g, s, r.P, r.U, pl, summary);
  return tiles_kernel(g, s, r.P, r.U, pl, summary, first_b_only, vmem_end, area);
}

}  // namespace

isa::Program gemm_chip_kernel(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                              const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                              uint64_t hbm_base) {
  return kernel_of(g, symbols, Placing{tensor_addr, base_pc, hbm_base}, nullptr);
}

isa::Program gemm_chip_first_b(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                               const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                               uint64_t hbm_base) {
  return kernel_of(g, symbols, Placing{tensor_addr, base_pc, hbm_base}, nullptr, true);
}

GemmPreload gemm_chip_preload_limit(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  if (r.schedule != GemmSchedule::Tiles || gemm_chip_splits(g, symbols) != 1)
    throw std::invalid_argument("gemm_chip: preloaded chunks of b need the tiled schedule and no split K");
  const TilePlan p = plan_tiles(g, s, r.P, r.U);
  const int64_t nkl = cdiv(g.k, p.kc), w = p.width(symbol(s, "MXU_COLS"));
  return {nkl > 1 ? std::min(p.nslot, nkl - 1) : 1, p.kc * std::min(w, g.n) * isa::dtype_size(g.in)};
}

GemmTiles gemm_chip_tiles(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  if (r.schedule != GemmSchedule::Tiles || gemm_chip_splits(g, symbols) != 1)
    throw std::invalid_argument("gemm_chip: a plan of tiles needs the tiled schedule and no split K");
  const TilePlan p = plan_tiles(g, s, r.P, r.U);
  return {p.tm, p.s, p.kc, p.u, p.rb, p.abuf, p.nslot, p.sc};
}

GemmArea gemm_chip_area(const GemmChip& g, const std::map<std::string, int64_t>& symbols,
                        const std::map<std::string, uint64_t>& tensor_addr, uint64_t hbm_base) {
  GemmArea area;
  kernel_of(g, symbols, Placing{tensor_addr, 0, hbm_base}, nullptr, false, nullptr, &area);
  return area;
}

int64_t gemm_chip_vmem_end(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  int64_t end = 0;
  kernel_of(g, symbols, Placing{{}, 0, 0}, nullptr, false, &end);
  return end;
}

std::string gemm_chip_source(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  std::string summary;
  const isa::Program p = kernel_of(g, symbols, Placing{{}, 0, 0}, &summary);
  return summary + isa::disassemble(p);
}

int64_t tap_row_offset(const ConvTaps& x, int64_t t) {
  const int64_t ih = t / x.kw * x.dh, jw = t % x.kw * x.dw;
  return ((ih % x.sh) * x.sw + jw % x.sw) * x.phase_rows + ih / x.sh * x.wq + jw / x.sw;
}

int64_t matrix_rate(isa::DType in, const std::map<std::string, int64_t>& symbols) {
  const char* name = in == isa::DType::I8 ? "MXU_I8_RATE" : in == isa::DType::F8E4M3 ? "MXU_FP8_RATE" : nullptr;
  auto it = name ? symbols.find(name) : symbols.end();
  return it == symbols.end() ? 1 : std::max<int64_t>(1, it->second);
}

double matrix_stretch(const std::map<std::string, int64_t>& symbols) {
  return 1000.0 / static_cast<double>(std::max<int64_t>(1, optional_symbol(symbols, "MXU_EFFICIENCY_PERMILLE", 1000)));
}

double gemm_chip_estimate(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  return r.schedule == GemmSchedule::Strips ? strips_estimate_of(g, s, r.P, r.U) : plan_tiles(g, s, r.P, r.U).estimate;
}

double gemm_chip_tail(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  if (r.schedule != GemmSchedule::Tiles) return 0;
  const TilePlan p = plan_tiles(g, s, r.P, r.U);
  const int64_t R = symbol(s, "MXU_ROWS"), tmu = cdiv(p.tm, p.rb);
  const int64_t act_passes = g.act ? rowwise::epilogue(*g.act, 1, 0).vector_ops + (g.q_scale_bits != 0) : 0;
  const int64_t width = std::max<int64_t>(1, optional_symbol(s, "VPU_WIDTH", 128));
  return chunk_work(p.kc, R, p.s, tmu, matrix_rate(g.in, s), matrix_stretch(s)) +
         tile_drain(p.u, p.s, tmu, p.sc, act_passes, width);
}

int64_t gemm_chip_cores_used(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  const int64_t C = symbol(s, "MXU_COLS");
  if (r.schedule == GemmSchedule::Strips) return std::min(r.P, cdiv(g.n, r.U * C));
  const TilePlan p = plan_tiles(g, s, r.P, r.U);
  return std::min(r.P, cdiv(g.m, p.tm) * cdiv(g.n, p.width(C)) * p.sk);
}

int64_t gemm_chip_splits(const GemmChip& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const Resolved r = resolve(g, s);
  return r.schedule == GemmSchedule::Strips ? 1 : plan_tiles(g, s, r.P, r.U).sk;
}

}  // namespace tpusim::kernels
