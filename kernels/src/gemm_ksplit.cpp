// The split-K GEMM generator: the contract, why its results are gemm.s's bits, and the schedule are in
// gemm_ksplit.h.
#include "tpusim/kernels/gemm_ksplit.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include "tpusim/isa/emitter.h"

namespace tpusim::kernels {
namespace {

int64_t need(const std::map<std::string, int64_t>& s, const char* name) {
  const auto it = s.find(name);
  if (it == s.end() || it->second <= 0)
    throw std::invalid_argument(std::string("gemm_ksplit: the chip symbol ") + name + " is missing or not positive");
  return it->second;
}
// The residual added in the drain's pass (vpu.acc res: its bits then vpu.add relu's), where nothing comes between
// the drain and the add: no ReLU before it, no scale, a c to add it to
bool residual_in_drain(const GemmKSplit& g) { return g.residual && !g.relu && g.scale_bits == 0 && !g.q_only; }

int64_t optional(const std::map<std::string, int64_t>& s, const char* name, int64_t otherwise) {
  const auto it = s.find(name);
  return it == s.end() ? otherwise : it->second;
}
int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }
int64_t align64(int64_t v) { return (v + 63) / 64 * 64; }

// One accumulator region of a unit: pairs [first, last) of one strip, accumulated in place.
struct Region {
  int64_t unit = 0, strip = 0, first = 0, last = 0, index = 0;  // index: the unit's index-th region (TM rows each)
};

// The regions of every unit, in each unit's pair order: a run of a strip accumulates in place only where it holds
// the strip's fold 0 (bf16) or always (i8: i32 sums do not depend on their order).
std::vector<Region> regions_of(const std::vector<int64_t>& first, const std::vector<int64_t>& last, int64_t F,
                               bool integer) {
  std::vector<Region> out;
  for (size_t j = 0; j < first.size(); ++j) {
    int64_t index = 0;
    for (int64_t p = first[j]; p < last[j];) {
      const int64_t strip = p / F, end_of_strip = std::min(last[j], (strip + 1) * F);
      const int64_t end = integer || p % F == 0 ? end_of_strip : p + 1;
      out.push_back(Region{static_cast<int64_t>(j), strip, p, end, index++});
      p = end;
    }
  }
  return out;
}

struct Layout {
  int64_t table = 0, a = 0, b = 0, c = 0, r = 0, stage = 0, end = 0;  // VMEM offsets
  int64_t b_tile = 0, c_buf = 0;  // bytes of one weight tile, one C (or r) buffer (with q, its q tile after it)
  int64_t q_off = 0;              // the q tile's offset in its C buffer
};

Layout layout(const GemmKSplit& g, int64_t tm, int64_t R, int64_t C, int64_t pairs, int64_t stage_rows = 0) {
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out), NS = cdiv(g.n, C);
  Layout l;
  l.a = g.dequant ? align64(g.n * 8) : g.bias ? align64(g.n * 4) : 0;
  l.b = l.a + align64(tm * g.k * E);
  l.b_tile = align64(R * C * E);
  l.c = l.b + pairs * l.b_tile;
  l.q_off = g.q_only ? 0 : align64(tm * C * O);
  l.c_buf = l.q_off + (g.q_scale_bits != 0 ? align64(tm * C) : 0);
  l.r = l.c + NS * l.c_buf;
  l.stage = l.r + (g.residual ? NS * align64(tm * C * O) : 0);
  l.end = l.stage + align64(stage_rows * std::max<int64_t>(1, g.taps.cin) * E);
  return l;
}

// The rows of a the taps of `rows` consecutive output rows read: from the first row's smallest tap offset to the
// last row's largest (tap_row_offset), less the smallest (`lo` of the first row, relative to row * pitch).
struct TapSpan {
  int64_t lo = 0, hi = 0;  // the smallest and largest tap offsets
  int64_t rows(int64_t mt, int64_t pitch) const { return (mt - 1) * pitch + hi - lo + 1; }
};
TapSpan tap_span(const GemmKSplit& g) {
  TapSpan t{std::numeric_limits<int64_t>::max(), 0};
  for (int64_t tap = 0; tap < g.k / g.taps.cin; ++tap) {
    const int64_t off = tap_row_offset(g.taps, tap);
    t.lo = std::min(t.lo, off), t.hi = std::max(t.hi, off);
  }
  return t;
}

void check(const GemmKSplit& g) {
  using isa::DType;
  if (g.m < 1 || g.k < 1 || g.n < 1) throw std::invalid_argument("gemm_ksplit: M, K and N must be positive");
  if (g.in != DType::BF16 && g.in != DType::I8) throw std::invalid_argument("gemm_ksplit: the input type is i8 or bf16");
  if (g.out != DType::I8 && g.out != DType::I32 && g.out != DType::BF16 && g.out != DType::F32)
    throw std::invalid_argument("gemm_ksplit: the output type is i8, i32, bf16 or f32");
  if (g.dequant && (g.in != DType::I8 || (g.out != DType::BF16 && g.out != DType::F32)))
    throw std::invalid_argument("gemm_ksplit: dequant takes i8 and gives bf16 or f32");
  if (g.residual && g.out != DType::BF16 && g.out != DType::F32)
    throw std::invalid_argument("gemm_ksplit: a residual gives bf16 or f32");
  if (g.residual_relu && !g.residual) throw std::invalid_argument("gemm_ksplit: the residual's ReLU needs a residual");
  if (g.q_scale_bits != 0 && (!g.dequant || g.scale_bits != 0 || g.residual))
    throw std::invalid_argument("gemm_ksplit: q needs dequant, and neither a scale nor a residual");
  if (g.q_only && g.q_scale_bits == 0) throw std::invalid_argument("gemm_ksplit: q_only needs q's scale");
  if (g.cores < 1) throw std::invalid_argument("gemm_ksplit: cores must be positive");
  if (g.c_rows.group > 0) {
    if (g.q_scale_bits != 0) throw std::invalid_argument("gemm_ksplit: a row map is not for q");
    check_row_map(g.c_rows, g.m, g.n * isa::dtype_size(g.out), "gemm_ksplit");
  }
  if (g.cores > 1 && !g.background.empty())
    throw std::invalid_argument("gemm_ksplit: background loads on one core");
  const ConvTaps& t = g.taps;
  if (t.cin < 0 || (t.cin > 0 && (g.k % t.cin != 0 || t.rows < 1 || t.kw < 1 || t.sh < 1 || t.sw < 1 || t.dh < 1 ||
                                  t.dw < 1 || t.wq < 1 || t.phase_rows < 0 || t.pitch < 1)))
    throw std::invalid_argument("gemm_ksplit: the taps need K in whole taps, their rows, strides and widths positive");
}

// The slice of the output's strips core c takes (cores > 1): strips [c * NS / P, (c + 1) * NS / P) of the NS, P the
// cores used (at most the strips); its GEMM is g over those columns.
struct Slice {
  int64_t s0 = 0;  // its first strip
  GemmKSplit g;    // g with n its columns
};
std::vector<Slice> slices_of(const GemmKSplit& g, int64_t C) {
  const int64_t ns = cdiv(g.n, C), P = std::max<int64_t>(1, std::min<int64_t>(g.cores, ns));
  std::vector<Slice> out;
  for (int64_t c = 0; c < P; ++c) {
    Slice sl{c * ns / P, g};
    sl.g.n = std::min(g.n, (c + 1) * ns / P * C) - sl.s0 * C, sl.g.cores = 1;
    out.push_back(sl);
  }
  return out;
}

KSplitPlan plan_one(const GemmKSplit& g, const std::map<std::string, int64_t>& s);

// The symbols the kernel plans with: VMEM_BYTES less vmem_base (its VMEM starts there; the accumulators' address
// stays VMEM's end).
std::map<std::string, int64_t> from_base(const GemmKSplit& g, const std::map<std::string, int64_t>& s) {
  if (g.vmem_base == 0) return s;
  const int64_t vmem = need(s, "VMEM_BYTES");
  if (g.vmem_base < 0 || g.vmem_base % 64 != 0 || g.vmem_base >= vmem)
    throw std::invalid_argument("gemm_ksplit: vmem_base " + std::to_string(g.vmem_base) +
                                " is not a multiple of 64 within VMEM (" + std::to_string(vmem) + " bytes)");
  std::map<std::string, int64_t> t = s;
  t["ACC_ADDR"] = optional(s, "ACC_ADDR", vmem);
  t["VMEM_BYTES"] = vmem - g.vmem_base;
  return t;
}

// The (unit, pair) steps of the kernel's weight loads, in order: each unit's first pair, then each unit's second, ...
std::vector<std::pair<int64_t, int64_t>> load_order(const KSplitPlan& p) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (int64_t i = 0; i < p.longest; ++i)
    for (int64_t j = 0; j < p.units; ++j)
      if (p.first[static_cast<size_t>(j)] + i < p.last[static_cast<size_t>(j)])
        out.emplace_back(j, p.first[static_cast<size_t>(j)] + i);
  return out;
}

}  // namespace

KSplitPlan gemm_ksplit_plan(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols) {
  check(g);
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  if (g.cores <= 1) return plan_one(g, s);
  // Each core its slice, the cores sharing HBM: each slice's plan at HBM's bandwidth over the cores used; the
  // busiest slice's plan, its estimate the longest
  const std::vector<Slice> slices = slices_of(g, need(s, "MXU_COLS"));
  std::map<std::string, int64_t> shared = s;
  shared["HBM_BYTES_PER_CYCLE"] =
      std::max<int64_t>(1, optional(s, "HBM_BYTES_PER_CYCLE", 64) / static_cast<int64_t>(slices.size()));
  KSplitPlan busiest;
  int64_t vmem_end = 0;
  for (const Slice& sl : slices) {
    KSplitPlan p = plan_one(sl.g, shared);
    vmem_end = std::max(vmem_end, p.vmem_end);
    if (p.estimate > busiest.estimate) busiest = std::move(p);
  }
  busiest.cores = static_cast<int64_t>(slices.size());
  busiest.vmem_end = vmem_end;
  return busiest;
}

namespace {

KSplitPlan plan_one(const GemmKSplit& g, const std::map<std::string, int64_t>& s) {
  const int64_t R = need(s, "MXU_ROWS"), C = need(s, "MXU_COLS"), ACC = need(s, "ACC_ROWS"),
                VMEM = need(s, "VMEM_BYTES"), width = need(s, "VPU_WIDTH");
  const int64_t bpc = std::max<int64_t>(1, optional(s, "HBM_BYTES_PER_CYCLE", 64)),
                lat = optional(s, "DMA_LATENCY", 100);
  KSplitPlan p;
  p.strips = cdiv(g.n, C), p.folds = cdiv(g.k, R);
  const int64_t pairs = p.strips * p.folds;
  p.units = std::min({need(s, "MXUS"), g.mxus > 0 ? int64_t{g.mxus} : need(s, "MXUS"), int64_t{kMaxKSplitUnits}, pairs});
  if (p.units < 2)
    throw std::invalid_argument("gemm_ksplit: " + std::to_string(pairs) + " pairs of a strip and a fold on " +
                                std::to_string(need(s, "MXUS")) + " matrix units: nothing to split");
  for (int64_t j = 0; j < p.units; ++j) {
    p.first.push_back(j * pairs / p.units), p.last.push_back((j + 1) * pairs / p.units);
    p.longest = std::max(p.longest, p.last.back() - p.first.back());
  }
  const bool integer = g.in == isa::DType::I8;
  const std::vector<Region> regions = regions_of(p.first, p.last, p.folds, integer);
  std::vector<int64_t> per_unit(static_cast<size_t>(p.units), 0), per_strip(static_cast<size_t>(p.strips), 0);
  for (const Region& r : regions) ++per_unit[static_cast<size_t>(r.unit)], ++per_strip[static_cast<size_t>(r.strip)];
  p.regions = *std::max_element(per_unit.begin(), per_unit.end());
  for (int64_t n : per_strip) p.adds += n - 1;
  // Row tiles: as many rows as the busiest unit's regions leave of its accumulators and VMEM leaves beside the
  // weights, all tiles of the same height
  const Layout none = layout(g, 0, R, C, pairs);
  const int64_t per_row = g.k * isa::dtype_size(g.in) + (g.residual ? 2 : 1) * p.strips * C * isa::dtype_size(g.out) +
                          (g.q_scale_bits != 0 ? p.strips * C : 0);
  const int64_t tm_vmem = (VMEM - none.end - 256) / per_row;
  const int64_t tm_max = std::min({g.m, ACC / p.regions, tm_vmem});
  if (tm_max < 1)
    throw std::invalid_argument("gemm_ksplit: the weights (" + std::to_string(none.c - none.b) +
                                " bytes) and a row of a do not fit VMEM (" + std::to_string(VMEM) + " bytes)");
  p.row_tiles = cdiv(g.m, tm_max), p.tm = cdiv(g.m, p.row_tiles);
  // Staged taps (KSplitPlan::stage_rows): where a lies outside VMEM, a semaphore is free and the span is fewer rows
  // than the taps read, with the same row tiles (the span's bytes beside the rest of VMEM)
  if (g.taps.cin > 0 && !g.a_local && 4 * p.units + 7 < isa::kNumSems - 1) {
    const TapSpan span = tap_span(g);
    const int64_t rows = span.rows(p.tm, g.taps.pitch);
    if (rows < g.k / g.taps.cin * p.tm &&
        layout(g, p.tm, R, C, pairs, rows).end + 256 <= VMEM)
      p.stage_rows = rows;
  }
  if (p.row_tiles * pairs > kMaxKSplitSteps)
    throw std::invalid_argument("gemm_ksplit: " + std::to_string(p.row_tiles) + " row tiles of " +
                                std::to_string(pairs) + " pairs each: more than " + std::to_string(kMaxKSplitSteps) +
                                " steps of straight-line code");
  // Estimate: per row tile, the busiest unit's matrix work (each pair the longer of its weight load, R cycles, and
  // its stream of TM rows; the first load exposed; the results R + C cycles after the last row) after a's block
  // (at HBM's bandwidth and a load's latency, or VMEM's ports where it lies there); the first row tile no sooner
  // than its weights arrive (a's bytes, if from HBM, and b's at HBM's bandwidth after a load's latency) and the
  // last tile's load, stream and results; the vector unit's sums of the last unit's regions and the drains (each a
  // pass of TM x C elements at VPU_WIDTH per cycle, a residual two more); the last stores.
  const int64_t rate = matrix_rate(g.in, s);
  const double stretch = matrix_stretch(s);
  const double stream = static_cast<double>(cdiv(p.tm, rate)) * stretch;
  const double pair = std::max(static_cast<double>(R), stream);
  const double results = static_cast<double>(R + C);
  const double mxu = static_cast<double>(p.longest - 1) * pair + static_cast<double>(R) + stream + results;
  const double E = static_cast<double>(isa::dtype_size(g.in)), hbm = static_cast<double>(bpc);
  const double ports = static_cast<double>(std::max<int64_t>(1, optional(s, "VMEM_BYTES_PER_CYCLE", 1 << 20)));
  const double a_bytes = static_cast<double>(p.tm * g.k) * E, b_bytes = static_cast<double>(g.k * g.n) * E;
  // a's block: from VMEM's ports where it lies there; else at HBM's bandwidth after a load's latency, or, with
  // staged taps, the span so (a_head) and then the taps within VMEM, at its ports, unit by unit (a_cols)
  const double stage_bytes = static_cast<double>(p.stage_rows * std::max<int64_t>(1, g.taps.cin)) * E;
  const double a_head = p.stage_rows > 0 ? static_cast<double>(lat) + stage_bytes / hbm : 0.0;
  const double a_cols = g.a_local || p.stage_rows > 0 ? a_bytes / ports : static_cast<double>(lat) + a_bytes / hbm;
  const double a_time = a_head + a_cols;
  const double pass = std::ceil(static_cast<double>(p.tm * C) / static_cast<double>(width));
  int64_t last_regions = 0;
  for (const Region& r : regions) last_regions += r.unit == p.units - 1 && r.first % p.folds != 0;
  const double vector = static_cast<double>(last_regions) * pass +
                        static_cast<double>(p.strips) * pass *
                            (g.residual && !residual_in_drain(g) ? 3 : g.q_scale_bits && !g.q_only ? 2 : 1);
  const double out_bytes = static_cast<double>(p.tm * g.n) *
                           ((g.q_only ? 0.0 : static_cast<double>(isa::dtype_size(g.out))) + (g.q_scale_bits ? 1.0 : 0.0));
  // (the first row tile's first weight load, R cycles, unless the units' first tiles are pushed ahead: lw_sem)
  const double first_lw = g.lw_sem > 0 ? 0.0 : static_cast<double>(R);
  // a's columns load unit by unit (the kernel's order): unit j starts once the folds it is the first to need are in
  double mxu_path = 0;
  std::vector<bool> needed(static_cast<size_t>(p.folds), false);
  int64_t columns = 0;
  for (int64_t j = 0; j < p.units; ++j) {
    for (int64_t pr = p.first[static_cast<size_t>(j)]; pr < p.last[static_cast<size_t>(j)]; ++pr)
      if (!needed[static_cast<size_t>(pr % p.folds)]) needed[static_cast<size_t>(pr % p.folds)] = true, ++columns;
    const int64_t len = p.last[static_cast<size_t>(j)] - p.first[static_cast<size_t>(j)];
    mxu_path = std::max(mxu_path, a_head + a_cols * static_cast<double>(columns) / static_cast<double>(p.folds) +
                                      static_cast<double>(len - 1) * pair + first_lw + stream + results);
  }
  const double far_a = g.a_local ? 0.0 : p.stage_rows > 0 ? stage_bytes : a_bytes;
  const double far_b = std::max(0.0, b_bytes - static_cast<double>(std::min(g.b_preloaded, pairs) * R * C) * E);
  const double first = std::max(mxu_path, static_cast<double>(lat) + (far_a + far_b) / hbm +
                                              first_lw + stream + results);
  p.estimate = first + static_cast<double>(p.row_tiles - 1) * (a_time + mxu) + static_cast<double>(p.row_tiles) * vector +
               static_cast<double>(lat) + out_bytes / hbm;
  p.tail = stream + results + vector + static_cast<double>(lat) + out_bytes / hbm;
  p.vmem_end = g.vmem_base + layout(g, p.tm, R, C, pairs, p.stage_rows).end;
  return p;
}

// The tensors' addresses
struct Addrs {
  int64_t a = 0, b = 0, table = -1, r = -1, c = -1, q = -1;
};

// The slice's layout in VMEM, from g.vmem_base
Layout placed_layout(const GemmKSplit& sub, const KSplitPlan& p, int64_t R, int64_t C) {
  Layout L = layout(sub, p.tm, R, C, p.strips * p.folds, p.stage_rows);
  for (int64_t* at : {&L.table, &L.a, &L.b, &L.c, &L.r, &L.stage, &L.end}) *at += sub.vmem_base;
  return L;
}

// Whether each pair's weight tile is preloaded (GemmKSplit::b_preloaded: the first of the load order)
std::vector<bool> preloaded_pairs(const GemmKSplit& sub, const KSplitPlan& p) {
  std::vector<bool> out(static_cast<size_t>(p.strips * p.folds), false);
  const std::vector<std::pair<int64_t, int64_t>> order = load_order(p);
  for (size_t i = 0; i < order.size() && static_cast<int64_t>(i) < sub.b_preloaded; ++i)
    out[static_cast<size_t>(order[i].second)] = true;
  return out;
}

// The weight tile of `pair` (strip pair / F, fold pair % F) of the slice `sub` (from strip s0 of g) into its slot,
// signalling `signal`; r1 .. r6
void emit_b_tile(isa::Emitter& e, const GemmKSplit& g, const GemmKSplit& sub, int64_t s0, int64_t b_addr,
                 const Layout& L, int64_t pair, int64_t R, int64_t C, isa::Sem signal) {
  const int64_t E = isa::dtype_size(g.in), F = cdiv(g.k, R), NSG = cdiv(g.n, C);
  const int64_t q = pair / F, f = pair % F, kt = std::min(R, g.k - f * R), nt = std::min(C, sub.n - q * C);
  const isa::Reg r1 = isa::reg(1), r2 = isa::reg(2), r3 = isa::reg(3), r4 = isa::reg(4), r5 = isa::reg(5),
                 r6 = isa::reg(6);
  e.li(r1, L.b + pair * L.b_tile), e.li(r3, kt), e.li(r4, nt * E);
  if (g.b_tiled) {
    e.li(r2, b_addr + (f * NSG + s0 + q) * R * C * E), e.li(r5, C * E);
    e.dma_ld(r1, r2, r3, r4, r5, r5, {.signal = signal});
  } else {
    e.li(r2, b_addr + (f * R * g.n + (s0 + q) * C) * E), e.li(r5, g.n * E), e.li(r6, C * E);
    e.dma_ld(r1, r2, r3, r4, r5, r6, {.signal = signal});
  }
}

// The kernel's code for the slice `sub` of g (its columns from strip s0 on; the whole of g where s0 is 0 and sub
// is g): tensors at g's addresses and pitches (N = g.n), the slice's plan, layout and semaphores.
void emit_slice(isa::Emitter& e, const GemmKSplit& g, const GemmKSplit& sub, int64_t s0, const Addrs& at,
                const std::map<std::string, int64_t>& s) {
  using isa::DType;
  using isa::Sem;
  const KSplitPlan p = plan_one(sub, s);
  const int64_t R = need(s, "MXU_ROWS"), C = need(s, "MXU_COLS"), ACC = need(s, "ACC_ROWS"),
                ACC_ADDR = optional(s, "ACC_ADDR", need(s, "VMEM_BYTES"));
  const int64_t E = isa::dtype_size(g.in), O = isa::dtype_size(g.out), U = p.units, NS = p.strips, F = p.folds,
                TM = p.tm;
  const DType acc_dt = g.in == DType::I8 ? DType::I32 : DType::F32;
  const Layout L = placed_layout(sub, p, R, C);
  background_bytes(g.background, L.table, L.end, "gemm_ksplit");  // checked: none writes the kernel's VMEM
  const std::vector<Region> regions = regions_of(p.first, p.last, F, g.in == DType::I8);
  const int64_t a_addr = at.a, b_addr = at.b, r_addr = at.r, c_addr = at.c, q_addr = at.q;
  const int64_t TB = g.dequant ? 8 : 4;  // a table entry's bytes
  const int64_t table_addr = at.table >= 0 ? at.table + s0 * C * TB : -1;
  // Semaphores: per unit FULL (its weight tiles loaded), AFULL (a's block), DONE (its matrix work), RFREE (its
  // regions drained); then AFREE, CF (C buffers free), CFULL, TABLE, RL (r's tile loaded), RF (r's buffer free).
  auto unit_sem = [&](int64_t kind, int64_t j) { return isa::sem(static_cast<int>(1 + kind * U + j)); };
  const Sem AFREE = isa::sem(static_cast<int>(4 * U + 1)), CF = isa::sem(static_cast<int>(4 * U + 2)),
            CFULL = isa::sem(static_cast<int>(4 * U + 3)), TABLE = isa::sem(static_cast<int>(4 * U + 4)),
            RL = isa::sem(static_cast<int>(4 * U + 5)), RF = isa::sem(static_cast<int>(4 * U + 6));
  const bool staged = p.stage_rows > 0;  // the taps read a's span in VMEM (KSplitPlan::stage_rows): STAGE
  const Sem STAGE = staged ? isa::sem(static_cast<int>(4 * U + 7)) : Sem{};
  for (int64_t kind = 0; kind < 4; ++kind)
    for (int64_t j = 0; j < U; ++j) e.sem_set(unit_sem(kind, j), 0);
  e.sem_set(AFREE, 0), e.sem_set(CF, NS), e.sem_set(CFULL, 0), e.sem_set(TABLE, 0), e.sem_set(RL, 0),
      e.sem_set(RF, NS);
  if (staged) e.sem_set(STAGE, 0);
  const TapSpan span = staged ? tap_span(sub) : TapSpan{};
  const isa::Reg r1 = isa::reg(1), r2 = isa::reg(2), r3 = isa::reg(3), r4 = isa::reg(4), r5 = isa::reg(5),
                 r6 = isa::reg(6), r7 = isa::reg(7), r8 = isa::reg(8);
  auto set = [&](std::initializer_list<std::pair<isa::Reg, int64_t>> values) {
    for (const auto& [r, v] : values) e.li(r, v);
  };
  // A unit's pairs, in order, each with its region
  std::vector<std::vector<const Region*>> of_unit(static_cast<size_t>(U));
  for (const Region& r : regions) of_unit[static_cast<size_t>(r.unit)].push_back(&r);
  auto region_row = [&](const Region& r) { return r.index * TM; };  // the unit's accumulator row
  auto tile_vaddr = [&](int64_t pair) { return L.b + pair * L.b_tile; };
  const std::vector<bool> preloaded = preloaded_pairs(sub, p);

  for (int64_t t = 0; t < p.row_tiles; ++t) {
    const int64_t m0 = t * TM, mt = std::min(TM, g.m - m0);
    // a's block, rows m0 .. m0 + mt at row pitch K*E, loaded unit by unit: the columns of the folds each unit is
    // the first to need (consecutive folds in one transfer; the taps one transfer per tap), then AFULL for it, then
    // (first row tile) its first weight tile, so that the first units start while the others' columns load
    if (t > 0) e.dmain_sync({.wait = AFREE});
    const int64_t lo = m0 * g.taps.pitch + span.lo;  // with staged taps: the first row of a in VMEM
    bool stage_wait = staged;                         // the first tap's transfer waits for the span
    auto load_columns = [&](int64_t k0, int64_t k1) {
      if (g.taps.cin == 0) {
        set({{r1, L.a + k0 * E}, {r2, a_addr + (m0 * g.k + k0) * E}, {r3, mt}, {r4, (k1 - k0) * E}, {r5, g.k * E}});
        e.dma_ld(r1, r2, r3, r4, r5, r5);
        return;
      }
      for (int64_t col = k0; col < k1;) {
        const int64_t tap = col / g.taps.cin, ch = col % g.taps.cin, w = std::min(g.taps.cin - ch, k1 - col);
        const int64_t row = m0 * g.taps.pitch + tap_row_offset(g.taps, tap);
        const int64_t src = staged ? static_cast<int64_t>(isa::kLocalWindow) + L.stage + ((row - lo) * g.taps.cin + ch) * E
                                   : a_addr + (row * g.taps.cin + ch) * E;
        set({{r1, L.a + col * E}, {r2, src}, {r3, mt}, {r4, w * E}, {r5, g.taps.pitch * g.taps.cin * E},
             {r6, g.k * E}});
        e.dma_ld(r1, r2, r3, r4, r5, r6, {.wait = stage_wait ? STAGE : Sem{}});
        stage_wait = false;
        col += w;
      }
    };
    std::vector<bool> loaded(static_cast<size_t>(F), false);
    auto load_a_of = [&](int64_t j) {
      for (int64_t pair = p.first[static_cast<size_t>(j)]; pair < p.last[static_cast<size_t>(j)];) {
        int64_t f = pair % F;
        if (loaded[static_cast<size_t>(f)]) {
          ++pair;
          continue;
        }
        const int64_t f0 = f;
        while (pair < p.last[static_cast<size_t>(j)] && pair % F == f && !loaded[static_cast<size_t>(f)])
          loaded[static_cast<size_t>(f)] = true, ++pair, ++f;
        load_columns(f0 * R, std::min(g.k, f * R));
      }
      e.dmain_sync({.signal = unit_sem(1, j)});
    };
    // unit j's weight tile of `pair` (first row tile), signalling FULL_j, unless preloaded (b_preloaded)
    auto load_b = [&](int64_t j, int64_t pair) {
      if (!preloaded[static_cast<size_t>(pair)]) emit_b_tile(e, g, sub, s0, b_addr, L, pair, R, C, unit_sem(0, j));
    };
    // With staged taps: the span in one transfer, (first row tile) each unit's first weight tile while it moves,
    // then STAGE, which the first tap's copy within VMEM waits for, then the units' columns
    if (staged) {
      set({{r1, L.stage}, {r2, a_addr + lo * g.taps.cin * E}, {r3, span.rows(mt, g.taps.pitch)},
           {r4, g.taps.cin * E}});
      e.dma_ld(r1, r2, r3, r4, r4, r4);
      if (t == 0)
        for (int64_t j = 0; j < U; ++j) load_b(j, p.first[static_cast<size_t>(j)]);
      e.dmain_sync({.signal = STAGE});
      for (int64_t j = 0; j < U; ++j) load_a_of(j);
    }
    // the weights (first row tile) dealt round-robin over the units, and each unit's matrix work after its load
    std::vector<bool> started(static_cast<size_t>(U), false);
    for (int64_t i = 0; i < p.longest; ++i)
      for (int64_t j = 0; j < U; ++j) {
        const int64_t pair = p.first[static_cast<size_t>(j)] + i;
        if (i == 0 && !staged) load_a_of(j);
        if (pair >= p.last[static_cast<size_t>(j)]) continue;
        const int64_t q = pair / F, f = pair % F, kt = std::min(R, g.k - f * R), nt = std::min(C, sub.n - q * C);
        if (t == 0 && !(staged && i == 0)) load_b(j, pair);
        set({{r1, tile_vaddr(pair)}, {r2, kt}, {r3, nt}, {r4, C * E}});
        if (!(t == 0 && i == 0 && g.lw_sem > 0))  // (else in the unit's shadow buffer: gemm_ksplit_first_b)
          e.mxu_lw(r1, r2, r3, r4, g.in,
                   {.mxu = j, .wait = t == 0 && !preloaded[static_cast<size_t>(pair)] ? unit_sem(0, j) : Sem{}});
        const Region* region = nullptr;
        for (const Region* r : of_unit[static_cast<size_t>(j)])
          if (pair >= r->first && pair < r->last) region = r;
        if (!started[static_cast<size_t>(j)] && t > 0) e.mxu_sync({.mxu = j, .wait = unit_sem(3, j)});
        set({{r1, L.a + f * R * E}, {r2, mt}, {r3, region_row(*region)}, {r4, g.k * E}});
        e.mxu_mm(r1, r2, r3, r4, g.in,
                 {.accumulate = pair != region->first, .mxu = j,
                  .wait = started[static_cast<size_t>(j)] ? Sem{} : unit_sem(1, j)});
        started[static_cast<size_t>(j)] = true;
      }
    for (int64_t j = 0; j < U; ++j) e.mxu_sync({.mxu = j, .signal = unit_sem(2, j)});
    // the bias table (first row tile), which only the drains read: after the loads the matrix units wait for, so
    // that its HBM latency holds back none of them (a queue's transfers complete in order)
    if (t == 0 && table_addr >= 0) {
      const int64_t bytes = sub.n * TB;
      set({{r1, L.table}, {r2, table_addr}, {r3, 1}, {r4, bytes}});
      e.dma_ld(r1, r2, r3, r4, r4, r4, {.signal = TABLE});
    }
    // the residual's tiles, once their buffers are free
    if (g.residual)
      for (int64_t q = 0; q < NS; ++q) {
        const int64_t nt = std::min(C, sub.n - q * C);
        set({{r1, L.r + q * align64(TM * C * O)}, {r2, r_addr + (m0 * g.n + (s0 + q) * C) * O}, {r3, mt}, {r4, nt * O},
             {r5, g.n * O}});
        e.dma_ld(r1, r2, r3, r4, r5, r4, {.wait = RF, .signal = RL});
      }
    if (t + 1 == p.row_tiles)
      for (const DmaLoad& l : g.background) {
        set({{r1, l.vaddr}, {r2, l.haddr}, {r3, l.rows}, {r4, l.rowbytes}, {r5, l.hstride}, {r6, l.vstride}});
        // background loads (dma.ld bg): the kernel's own loads after them do not wait for them
        e.dma_ld(r1, r2, r3, r4, r5, r6, {.bg = true, .signal = l.signal > 0 ? isa::sem(l.signal) : isa::Sem{}});
      }
    // the vector unit, per strip: its sums in fold order, each unit's regions once that unit's matrix work is done
    // (the units hold the folds in order, so the first units' sums run while the last ones compute), then its drain
    std::vector<bool> done(static_cast<size_t>(U), false);
    const bool fused = residual_in_drain(g);
    auto wait_done = [&](int64_t j) {
      if (!done[static_cast<size_t>(j)]) e.vpu_sync({.wait = unit_sem(2, j)}), done[static_cast<size_t>(j)] = true;
    };
    for (int64_t q = 0; q < NS; ++q) {
      std::vector<const Region*> of_strip;
      for (const Region& r : regions)
        if (r.strip == q) of_strip.push_back(&r);
      std::sort(of_strip.begin(), of_strip.end(), [](const Region* a, const Region* b) { return a->first < b->first; });
      const Region& base = *of_strip.front();
      auto acc_addr = [&](const Region& r) { return ACC_ADDR + ((r.unit * ACC + region_row(r)) * C) * 4; };
      wait_done(base.unit);
      for (size_t i = 1; i < of_strip.size(); ++i) {
        wait_done(of_strip[i]->unit);
        set({{r1, acc_addr(base)}, {r2, acc_addr(*of_strip[i])}, {r3, mt * C}});
        e.vpu_add(r1, r1, r2, r3, acc_dt);
      }
      const int64_t nt = std::min(C, sub.n - q * C);
      set({{r1, L.c + q * L.c_buf}, {r2, base.unit * ACC + region_row(base)}, {r3, mt}, {r4, nt}, {r5, nt * O},
           {r6, L.table + q * C * TB}, {r7, static_cast<int64_t>(g.scale_bits)}});
      if (t == 0 && q == 0 && table_addr >= 0) e.vpu_sync({.wait = TABLE});  // (the first drain; not the sums)
      e.vpu_sync({.wait = CF});
      if (fused) {  // the residual's tile (packed as the C buffer) added in the drain's pass (vpu.acc res)
        set({{r7, L.r + q * align64(TM * C * O)}});
        e.vpu_sync({.wait = RL});
      }
      if (!g.q_only)
        e.vpu_acc(r1, r2, r3, r4, r5, r6, r7, acc_dt, g.out,
                  {.bias_en = g.bias, .relu = fused ? g.residual_relu : g.relu, .scale_en = g.scale_bits != 0,
                   .dequant = g.dequant, .res = fused});
      if (g.q_scale_bits != 0) {  // q's tile (x * q_scale, i8) from the same accumulators, packed
        set({{r8, L.c + q * L.c_buf + L.q_off}, {r5, nt}, {r7, static_cast<int64_t>(g.q_scale_bits)}});
        e.vpu_acc(r8, r2, r3, r4, r5, r6, r7, acc_dt, DType::I8,
                  {.bias_en = g.bias, .relu = g.relu, .scale_en = true, .dequant = true});
      }
      if (g.residual) {
        if (!fused) {
          set({{r2, L.r + q * align64(TM * C * O)}, {r3, mt * nt}});
          e.vpu_add(r1, r1, r2, r3, g.out, {.relu = g.residual_relu, .wait = RL});
        }
        e.vpu_sync({.signal = RF});
      }
      e.vpu_sync({.signal = CFULL});
      // the stores complete in order: the last frees the buffer
      if (g.q_scale_bits != 0) {
        set({{r8, q_addr + m0 * g.n + (s0 + q) * C}, {r7, L.c + q * L.c_buf + L.q_off}, {r2, mt}, {r4, nt}, {r5, g.n}});
        e.dma_st(r8, r7, r2, r4, r5, r4, {.wait = CFULL, .signal = g.q_only ? CF : Sem{}});
      }
      if (!g.q_only && g.c_rows.group > 0) {  // through the map: a store per group's kept run of the tile's rows
        const RowMap& map = g.c_rows;
        bool first = true;
        for (int64_t r = m0; r < m0 + mt;) {
          const int64_t grp = r / map.group, w = r % map.group, next = std::min(m0 + mt, (grp + 1) * map.group);
          const int64_t kept = std::min(map.keep, next - grp * map.group) - w;
          if (kept > 0) {
            set({{r8, c_addr + map.at(grp) + (w * g.n + (s0 + q) * C) * O}, {r7, L.c + q * L.c_buf + (r - m0) * nt * O},
                 {r2, kept}, {r4, nt * O}, {r5, g.n * O}});
            e.dma_st(r8, r7, r2, r4, r5, r4, {.wait = first ? CFULL : Sem{}});
            first = false;
          }
          r = next;
        }
        e.dmaout_sync({.wait = first ? CFULL : Sem{}, .signal = CF});  // the stores complete in order
      } else if (!g.q_only) {
        set({{r8, c_addr + (m0 * g.n + (s0 + q) * C) * O}, {r2, mt}, {r4, nt * O}, {r5, g.n * O}});
        e.dma_st(r8, r1, r2, r4, r5, r4, {.wait = g.q_scale_bits != 0 ? Sem{} : CFULL, .signal = CF});
      }
    }
    e.vpu_sync({.signal = AFREE});  // every unit's matrix work is done: a's block may be reloaded
    for (int64_t j = 0; j < U; ++j) e.vpu_sync({.signal = unit_sem(3, j)});
  }
}

}  // namespace

namespace {

// The kernel, or with first_b_only gemm_ksplit_first_b's loads: the tensors declared alike (so placed alike), then
// per core its slice's code.
isa::Program kernel_of(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols,
                       const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc, uint64_t hbm_base,
                       bool first_b_only) {
  using isa::DType;
  using isa::TensorKind;
  const KSplitPlan plan = gemm_ksplit_plan(g, symbols);  // (throws where it cannot run)
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const int64_t R = need(s, "MXU_ROWS"), C = need(s, "MXU_COLS"), F = cdiv(g.k, R), NS = cdiv(g.n, C);
  if (g.b_preloaded < 0 || g.b_preloaded > gemm_ksplit_preload_limit(g, symbols).tiles)
    throw std::invalid_argument("gemm_ksplit: b_preloaded " + std::to_string(g.b_preloaded) + " tiles, more than " +
                                std::to_string(gemm_ksplit_preload_limit(g, symbols).tiles) + " or negative");
  const DType acc_dt = g.in == DType::I8 ? DType::I32 : DType::F32;
  isa::Emitter e("gemm_ksplit", "<gemm_ksplit>", base_pc);
  auto declare = [&](const char* name, TensorKind kind, DType dt, std::vector<int64_t> shape) {
    return static_cast<int64_t>(e.declare_placed(isa::TensorDecl{name, kind, dt, std::move(shape)}, tensor_addr, hbm_base));
  };
  Addrs at;
  at.a = g.taps.cin > 0 ? declare("a", TensorKind::Input, g.in, {g.taps.rows, g.taps.cin})
                        : declare("a", TensorKind::Input, g.in, {g.m, g.k});
  at.b = g.b_tiled ? declare("b", TensorKind::Input, g.in, {F, NS, R, C}) : declare("b", TensorKind::Input, g.in, {g.k, g.n});
  if (g.dequant)
    at.table = declare("dq", TensorKind::Input, DType::F32, {g.n, 2});
  else if (g.bias)
    at.table = declare("bias", TensorKind::Input, acc_dt, {g.n});
  if (g.residual) at.r = declare("r", TensorKind::Input, g.out, {g.m, g.n});
  at.c = g.q_only ? -1 : declare("c", TensorKind::Output, g.out, {g.c_rows.group > 0 ? g.c_rows.rows : g.m, g.n});
  at.q = g.q_scale_bits != 0 ? declare("q", TensorKind::Output, DType::I8, {g.m, g.n}) : -1;
  auto slice = [&](const GemmKSplit& sub, int64_t s0) {
    const KSplitPlan p = plan_one(sub, s);
    if (g.lw_sem > 0 && (g.b_preloaded < p.units || g.lw_sem >= isa::kNumSems))
      throw std::invalid_argument("gemm_ksplit: the units' first tiles pushed ahead (lw_sem s" +
                                  std::to_string(g.lw_sem) + ") need them preloaded: " + std::to_string(p.units) +
                                  " units, " + std::to_string(g.b_preloaded) + " tiles");
    if (!first_b_only) return emit_slice(e, g, sub, s0, at, s);
    const Layout L = placed_layout(sub, p, R, C);
    const std::vector<std::pair<int64_t, int64_t>> order = load_order(p);
    for (size_t i = 0; i < order.size() && static_cast<int64_t>(i) < g.b_preloaded; ++i)
      emit_b_tile(e, g, sub, s0, at.b, L, order[i].second, R, C, isa::Sem{});
    if (g.lw_sem <= 0) return;
    const isa::Sem lw = isa::sem(g.lw_sem);
    for (int64_t j = 0; j < p.units; ++j) e.dmain_sync({.signal = lw});
    const int64_t E = isa::dtype_size(g.in);
    for (int64_t j = 0; j < p.units; ++j) {  // unit j's first pair: fold 0 of its run's strip, or a later fold
      const int64_t pair = p.first[static_cast<size_t>(j)], f = pair % p.folds, q = pair / p.folds;
      e.li(isa::reg(1), L.b + pair * L.b_tile), e.li(isa::reg(2), std::min(R, g.k - f * R));
      e.li(isa::reg(3), std::min(C, sub.n - q * C)), e.li(isa::reg(4), C * E);
      e.mxu_lw(isa::reg(1), isa::reg(2), isa::reg(3), isa::reg(4), g.in, {.mxu = j, .wait = lw});
    }
  };
  if (plan.cores <= 1) {
    slice(g, 0);
  } else {  // each core its slice (core.id in r9), the others jumping over it
    e.set_cores(static_cast<uint32_t>(plan.cores));
    const isa::Reg cid = isa::reg(9), t = isa::reg(10);
    const isa::Label end = e.label();
    e.core_id(cid);
    const std::vector<Slice> slices = slices_of(g, C);
    for (size_t c = 0; c < slices.size(); ++c) {
      const isa::Label next = e.label();
      e.li(t, static_cast<int64_t>(c)), e.bne(cid, t, next);
      slice(slices[c].g, slices[c].s0);
      e.jmp(end);
      e.bind(next);
    }
    e.bind(end);
  }
  if (!first_b_only) e.halt();
  return e.finish();
}

}  // namespace

isa::Program gemm_ksplit_kernel(const GemmKSplit& g, const std::map<std::string, int64_t>& s,
                                const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                                uint64_t hbm_base) {
  return kernel_of(g, s, tensor_addr, base_pc, hbm_base, false);
}

isa::Program gemm_ksplit_first_b(const GemmKSplit& g, const std::map<std::string, int64_t>& s,
                                 const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc,
                                 uint64_t hbm_base) {
  return kernel_of(g, s, tensor_addr, base_pc, hbm_base, true);
}

KSplitPreload gemm_ksplit_preload_limit(const GemmKSplit& g, const std::map<std::string, int64_t>& symbols) {
  const std::map<std::string, int64_t> s = from_base(g, symbols);
  const int64_t R = need(s, "MXU_ROWS"), C = need(s, "MXU_COLS");
  KSplitPreload out{std::numeric_limits<int64_t>::max(), align64(R * C * isa::dtype_size(g.in))};
  const std::vector<Slice> slices = g.cores <= 1 ? std::vector<Slice>{Slice{0, g}} : slices_of(g, C);
  for (const Slice& sl : slices) out.tiles = std::min(out.tiles, cdiv(sl.g.n, C) * cdiv(g.k, R));
  return out;
}

}  // namespace tpusim::kernels
