// Conformance: the simulator's transaction-level matrix unit (sim::Chip, sim/src/mxu.cpp) against the PE-level
// model (systolic.h), for every dataflow. `ctest -L conformance` runs it.
//
// (a) Instruction by instruction. Random straight-line programs of mxu.lw / mxu.mm (random tile shapes, m up to
//     three times the array, random gaps of nops) on random arrays of 4..32 PEs a side, square or not. The
//     fast model gives each instruction's start from its trace (lw: its "load" slice; mm: its first "busy"
//     slice) and its end from a probe: the program cut after the instruction, which signals s1, and a
//     vpu.sync wait=s1 right after it: the vector unit takes the sync at pc + 2 (one cycle to dispatch, one to
//     start), so end = pc + 2 + the vector unit's semaphore-wait cycles. The PE model gets the same instructions
//     arriving when the fast model's front-end could first take them (pc + 1: no semaphores, deep queues) and
//     reports start and end itself; its products are checked against a plain matmul.
// (b) Whole kernels. kernels/gemm.s (45 points: six fixed, 12 random per dataflow, three TRANS_B) runs on the
//     fast model with its DMA, vector unit and semaphores. The PE model runs the same program's matrix-unit
//     instructions with arrivals from arrival.h, which derives them from the program (the core's dispatch) and
//     from the DMA's and vector unit's semaphore signals as the fast model timed them, and from nothing of the
//     matrix unit's own timing. Every start, every lw and mxu.sync end, and the kernel total must be EQUAL.
#include <algorithm>
#include <map>
#include <random>

#include <gtest/gtest.h>

#include "arrival.h"
#include "systolic.h"
#include "tpusim/isa/isa.h"
#include "tpusim/kernels/kernels.h"
#include "tpusim/sim/chip.h"

namespace tpusim {
namespace {

using isa::Op;
using systolic::Dataflow;
constexpr int kKernelsPerDataflow = 12;  // random gemm.s points per dataflow

struct Errors {
  int cases = 0;
  double max_abs = 0, sum_abs = 0;
  void add(uint64_t fast, uint64_t pe) {
    const double e = std::fabs(static_cast<double>(fast) - static_cast<double>(pe));
    ++cases, sum_abs += e, max_abs = std::max(max_abs, e);
  }
  void print(const char* what) const {
    std::printf("[conformance] %s: %d cases, cycle error max %.0f, mean %.3f\n", what, cases, max_abs,
                cases ? sum_abs / cases : 0.0);
  }
};

class Builder {
 public:
  Builder& op(Op o, std::initializer_list<int64_t> operands) {
    isa::Instr in;
    in.op = o;
    int i = 0;
    for (int64_t v : operands) in.f[i++] = v;
    code_.push_back(in);
    return *this;
  }
  Builder& with(const char* name, int64_t v) {
    code_.back().f[code_.back().desc().operand_index(name)] = v;
    return *this;
  }
  size_t pc() const { return code_.size(); }
  isa::Program build(size_t n = ~size_t{0}) const {
    isa::Program p;
    p.name = "conformance";
    for (size_t i = 0; i < std::min(n, code_.size()); ++i) p.code.push_back(isa::encode(code_[i]));
    return p;
  }
  std::vector<isa::Instr> code_;
};

sim::ChipConfig config(Dataflow df, int R, int C, int acc_rows = 4096, int units = 1) {
  return sim::load_config("edge", {"mxu.dataflow=" + std::string(systolic::name(df)), "mxu.rows=" + std::to_string(R),
                                   "mxu.cols=" + std::to_string(C), "core.queue_depth=64",
                                   "mxu.acc_rows=" + std::to_string(acc_rows), "core.mxus=" + std::to_string(units)});
}

// One random program: its instructions for the PE model, and where each sits in the fast model's program.
struct Case {
  Builder b;
  std::vector<systolic::Instr> instrs;
  std::vector<size_t> pcs;
};

Case random_case(std::mt19937& rng, int R, int C) {
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  Case c;
  const int tiles = uni(1, 3);
  for (int t = 0; t < tiles; ++t) {
    const int k = uni(1, R), n = uni(1, C), mms = uni(1, 2);
    if (uni(0, 3) == 0) {  // a tile that is replaced before any mm uses it
      c.b.op(Op::LI, {1, uni(1, R)}).op(Op::LI, {2, uni(1, C)});
      systolic::Instr lw;
      lw.kind = systolic::Instr::LW, lw.k = static_cast<int>(c.b.code_[c.b.pc() - 2].f[1]),
      lw.n = static_cast<int>(c.b.code_[c.b.pc() - 1].f[1]), lw.arrive = c.b.pc() + 1;
      lw.b.assign(static_cast<size_t>(lw.k) * lw.n, 1);
      c.pcs.push_back(c.b.pc());
      c.b.op(Op::MXULW, {0, 1, 2, 2, 0});
      c.instrs.push_back(lw);
    }
    for (int g = uni(0, 3); g > 0; --g) c.b.op(Op::NOP, {});
    c.b.op(Op::LI, {1, k}).op(Op::LI, {2, n});
    systolic::Instr lw;
    lw.kind = systolic::Instr::LW, lw.k = k, lw.n = n, lw.arrive = c.b.pc() + 1;
    for (int i = 0; i < k * n; ++i) lw.b.push_back(uni(-128, 127));
    c.pcs.push_back(c.b.pc());
    c.b.op(Op::MXULW, {0, 1, 2, 2, 0});  // vaddr r0 = 0, k r1, n r2, stride r2 (i8)
    c.b.with("trans", t % 2);            // a transposed load has the same timing
    c.instrs.push_back(lw);
    for (int j = 0; j < mms; ++j) {
      const int m = uni(1, 3 * std::max(R, C));
      for (int g = uni(0, 2); g > 0; --g) c.b.op(Op::NOP, {});
      c.b.op(Op::LI, {3, m}).op(Op::LI, {4, k});
      systolic::Instr mm;
      mm.kind = systolic::Instr::MM, mm.m = m, mm.arrive = c.b.pc() + 1;
      for (int i = 0; i < m * k; ++i) mm.a.push_back(uni(-128, 127));
      c.pcs.push_back(c.b.pc());
      c.b.op(Op::MXUMM, {0, 3, 0, 4, 0});  // vaddr 0, m r3, acc 0, stride r4 = k
      c.instrs.push_back(mm);
    }
  }
  return c;
}

int folds(Dataflow df, int m, int R, int C) { return df == Dataflow::WS ? 1 : df == Dataflow::OS ? (m + R - 1) / R : (m + C - 1) / C; }

void check_products(const Case& c, const systolic::Result& r) {
  const systolic::Instr* lw = nullptr;
  for (size_t j = 0; j < c.instrs.size(); ++j) {
    const auto& in = c.instrs[j];
    if (in.kind == systolic::Instr::LW) {
      lw = &in;
      continue;
    }
    for (int i = 0; i < in.m; ++i)
      for (int col = 0; col < lw->n; ++col) {
        int64_t ref = 0;
        for (int l = 0; l < lw->k; ++l) ref += int64_t(in.a[i * lw->k + l]) * lw->b[l * lw->n + col];
        ASSERT_EQ(r.out[j][i * lw->n + col], ref) << "instruction " << j << " row " << i << " column " << col;
      }
  }
}

// `units` > 1: a core of that many matrix units, each case's matrix instructions all on unit rep % units (mxu=N),
// whose trace slices alone are compared: every unit must be the same PE-level array.
void instruction_sweep(Dataflow df, uint32_t seed, int units = 1, size_t random_sizes = 6, int reps = 15) {
  std::mt19937 rng(seed);
  std::vector<std::pair<int, int>> sizes = {{4, 4}, {32, 32}};
  for (size_t i = 0; i < random_sizes; ++i) sizes.push_back({std::uniform_int_distribution<int>(4, 32)(rng), std::uniform_int_distribution<int>(4, 32)(rng)});
  std::vector<std::unique_ptr<sim::Chip>> chips;  // all elaborated before the first run
  for (auto [R, C] : sizes) chips.push_back(std::make_unique<sim::Chip>(config(df, R, C, 4096, units)));
  Errors err;
  sim::RunOptions timing;
  timing.functional = false;
  for (size_t s = 0; s < sizes.size(); ++s) {
    const auto [R, C] = sizes[s];
    for (int rep = 0; rep < reps; ++rep) {
      Case c = random_case(rng, R, C);
      const int unit = rep % units;
      for (isa::Instr& in : c.b.code_)
        if (in.op == Op::MXULW || in.op == Op::MXUMM) in.f[in.desc().operand_index("mxu")] = unit;
      const systolic::Result pe = systolic::run(df, R, C, c.instrs);
      check_products(c, pe);
      // Starts from the fast model's trace, in execution order.
      sim::RunOptions traced = timing;
      traced.trace = true;
      sim::RunResult full = chips[s]->run(c.b.build(), traced);
      std::vector<sim::TraceEvent> ev;
      for (const auto& e : full.trace)
        if (e.unit == isa::Unit::Mxu && e.index == unit && (e.kind == "load" || e.kind == "busy")) ev.push_back(e);
      size_t next = 0;
      for (size_t j = 0; j < c.instrs.size(); ++j) {
        const auto& in = c.instrs[j];
        ASSERT_LT(next, ev.size());
        const uint64_t start = ev[next].start;
        uint64_t end;
        if (in.kind == systolic::Instr::LW) {
          end = ev[next].start + ev[next].duration;
          next += 1;
        } else {
          next += folds(df, in.m, R, C);
          Builder probe;
          probe.code_.assign(c.b.code_.begin(), c.b.code_.begin() + c.pcs[j] + 1);
          probe.with("signal", 1).op(Op::VSYNC, {}).with("wait", 1);
          const sim::RunResult r = chips[s]->run(probe.build(), timing);
          end = c.pcs[j] + 2 + r.stats.units[static_cast<int>(isa::Unit::Vpu)].wait_sem_cycles;
        }
        std::string seq;
        for (const auto& x : c.instrs)
          seq += x.kind == systolic::Instr::LW ? " lw(k=" + std::to_string(x.k) + ",n=" + std::to_string(x.n) + ")@" + std::to_string(x.arrive)
                                               : " mm(m=" + std::to_string(x.m) + ")@" + std::to_string(x.arrive);
        EXPECT_EQ(start, pe.timing[j].start) << systolic::name(df) << " " << R << "x" << C << " instruction " << j << ":" << seq;
        EXPECT_EQ(end, pe.timing[j].end) << systolic::name(df) << " " << R << "x" << C << " instruction " << j;
        err.add(start, pe.timing[j].start);
        err.add(end, pe.timing[j].end);
      }
      EXPECT_EQ(next, ev.size());
    }
  }
  err.print((std::string(systolic::name(df)) + " instruction start and end cycles" +
             (units > 1 ? " on each of " + std::to_string(units) + " matrix units" : std::string()))
                .c_str());
}

TEST(Conformance, InstructionsWeightStationary) { instruction_sweep(Dataflow::WS, 11); }
TEST(Conformance, InstructionsOutputStationary) { instruction_sweep(Dataflow::OS, 12); }
TEST(Conformance, InstructionsInputStationary) { instruction_sweep(Dataflow::IS, 13); }
// Each of a core's 4 matrix units against the PE model (weight-stationary, as every preset; cases rotate over the
// units): 0 cycles of error on every unit.
TEST(Conformance, InstructionsOnEachMatrixUnit) { instruction_sweep(Dataflow::WS, 14, 4, 2, 12); }

// ---- (b) kernels/gemm.s -------------------------------------------------------------------------------------

struct KernelPoint {
  Dataflow df;
  int R, C;
  int64_t M, K, N;
  int trans_b = 0;  // gemm.s TRANS_B: b^T given, loaded with mxu.lw trans (the same schedule)
};

// The fast model's matrix-unit timing, per instruction in execution order: lw [load start, load end), mm the
// start of its first fold (its end is not traced: the mxu.sync after it shows it), mxu.sync its completion.
struct FastMxu {
  std::vector<uint64_t> start, end;  // end: 0 where not observed (mm)
};
FastMxu fast_mxu(const std::vector<sim::TraceEvent>& trace, const systolic::Replay& rp, Dataflow df, int R, int C) {
  FastMxu f;
  std::vector<sim::TraceEvent> ev;
  for (const auto& e : trace)
    if (e.unit == isa::Unit::Mxu && (e.kind == "load" || e.kind == "busy" || e.kind == "sync")) ev.push_back(e);
  // Slices are recorded when each instruction executes (lw, mm) or completes (sync): match them by pc.
  std::vector<bool> used(ev.size(), false);
  size_t from = 0;
  for (size_t j = 0; j < rp.instrs.size(); ++j) {
    const systolic::Instr& in = rp.instrs[j];
    const int want = in.kind == systolic::Instr::MM ? folds(df, in.m, R, C) : 1;
    const char* kind = in.kind == systolic::Instr::LW ? "load" : in.kind == systolic::Instr::MM ? "busy" : "sync";
    int found = 0;
    for (size_t i = from; i < ev.size() && found < want; ++i) {
      if (used[i] || ev[i].pc != rp.pcs[j] || ev[i].kind != kind) continue;
      used[i] = true;
      if (found++ == 0) {
        f.start.push_back(in.kind == systolic::Instr::SYNC ? 0 : ev[i].start);
        f.end.push_back(in.kind == systolic::Instr::LW ? ev[i].start + ev[i].duration
                        : in.kind == systolic::Instr::SYNC ? ev[i].start : 0);
      }
    }
    EXPECT_EQ(found, want) << "instruction " << j << " (pc " << rp.pcs[j] << ") in the fast model's trace";
    if (found < want) return f;
    while (from < ev.size() && used[from]) ++from;
  }
  EXPECT_EQ(std::count(used.begin(), used.end(), false), 0) << "matrix-unit slices not matched";
  return f;
}

// gemm.s on the fast model (DMA, vector unit, semaphores, the matrix unit) and on the PE-level model. The PE
// model's instructions and their arrivals come from arrival.h: the program itself (shapes from its registers,
// dispatch from the core's one instruction a cycle) and the DMA engines' and vector unit's signals as the fast
// model timed them; the matrix unit's timing is the PE model's alone. The test asserts, with no tolerance:
//   - every mxu instruction's start (lw: its load; mm: its first input entering the array), and the end of
//     every lw (its slot freed, s1) and every mxu.sync (its signal, s4 or s8): so every signal the matrix unit
//     gives the other units comes at the same cycle in both, and the replayed non-matrix timing is the one the
//     PE-level matrix unit would have met;
//   - the kernel total: the core reaches the program's end at rp.core_end and then waits until every unit is
//     idle, and takes one more cycle (sim/include/tpusim/sim/chip.h). PE-level total =
//     max(core_end, last end of any DMA or vector slice, the PE model's last end) + 1, equal to the fast model's.
void kernel_check(const std::vector<KernelPoint>& points) {
  // 64 accumulator rows: row tiles of at most 32 rows, so for M > 32 all three of the kernel's loops run more
  // than once. Queues of 65536 entries: the core never waits for a queue (checked), as arrival.h assumes.
  std::vector<std::unique_ptr<sim::Chip>> chips;
  for (const KernelPoint& k : points) {
    sim::ChipConfig cfg = sim::load_config("edge", {"mxu.dataflow=" + std::string(systolic::name(k.df)),
                                                    "mxu.rows=" + std::to_string(k.R), "mxu.cols=" + std::to_string(k.C),
                                                    "core.queue_depth=65536", "mxu.acc_rows=64"});
    chips.push_back(std::make_unique<sim::Chip>(cfg));
  }
  int instrs = 0, compared = 0;
  for (size_t p = 0; p < points.size(); ++p) {
    const auto [df, R, C, M, K, N, trans_b] = points[p];
    SCOPED_TRACE(std::string("gemm.s ") + std::to_string(M) + "x" + std::to_string(K) + "x" + std::to_string(N) +
                 (trans_b ? " TRANS_B" : "") + " on " + systolic::name(df) + " " + std::to_string(R) + "x" + std::to_string(C));
    const sim::ChipConfig& cfg = chips[p]->config();
    std::map<std::string, int64_t> d{{"M", M}, {"K", K}, {"N", N}, {"TRANS_B", trans_b}};
    for (const auto& [k, v] : sim::kernel_symbols(cfg)) d[k] = v;
    const isa::Program prog = kernels::assemble("gemm.s", d);
    sim::RunOptions o;
    o.functional = false, o.trace = true;
    const sim::RunResult r = chips[p]->run(prog, o);
    ASSERT_EQ(r.stats.units[static_cast<int>(isa::Unit::Core)].wait_queue_cycles, 0u);
    // The other units' signals: each DMA or vector instruction signals at the end of its busy slice.
    std::vector<systolic::Signal> sig;
    uint64_t others_end = 0;
    for (const auto& e : r.trace)
      if (e.unit != isa::Unit::Mxu && e.unit != isa::Unit::Core && e.kind == "busy") {
        sig.push_back({e.pc, e.start + e.duration});
        others_end = std::max(others_end, e.start + e.duration);
      }
    const systolic::Replay rp = systolic::derive_arrivals(prog, sig);
    const systolic::Result pe = systolic::run(df, R, C, rp.instrs, false);
    const FastMxu fast = fast_mxu(r.trace, rp, df, R, C);
    ASSERT_EQ(fast.start.size(), rp.instrs.size());
    int bad = 0;
    for (size_t j = 0; j < rp.instrs.size(); ++j) {
      const bool sync = rp.instrs[j].kind == systolic::Instr::SYNC;
      compared += !sync + (fast.end[j] != 0);
      if (!sync && fast.start[j] != pe.timing[j].start && bad++ < 5)
        ADD_FAILURE() << "instruction " << j << " (pc " << rp.pcs[j] << ") starts at " << fast.start[j]
                      << " in the fast model, " << pe.timing[j].start << " in the PE model";
      if (fast.end[j] && fast.end[j] != pe.timing[j].end && bad++ < 5)
        ADD_FAILURE() << "instruction " << j << " (pc " << rp.pcs[j] << ") ends at " << fast.end[j]
                      << " in the fast model, " << pe.timing[j].end << " in the PE model";
    }
    const uint64_t pe_total = std::max({rp.core_end, others_end, pe.total}) + 1;
    std::printf("[conformance] gemm.s %ldx%ldx%ld%s on %s %dx%d: %zu mxu instructions, fast %lu cycles, PE-level %lu\n",
                long(M), long(K), long(N), trans_b ? " TRANS_B" : "", systolic::name(df), R, C, rp.instrs.size(),
                (unsigned long)r.stats.cycles, (unsigned long)pe_total);
    EXPECT_EQ(pe_total, r.stats.cycles);
    ++compared;
    instrs += static_cast<int>(rp.instrs.size());
  }
  std::printf("[conformance] gemm.s: %zu kernels, %d mxu instructions, %d cycle counts (starts, lw/sync ends, "
              "totals) asserted equal\n", points.size(), instrs, compared);
}

TEST(Conformance, GemmKernelExact) {
  // Six fixed points, then a random sweep: shapes that are not multiples of the array, arrays 4..32 (non-square
  // too), every dataflow.
  std::vector<KernelPoint> points = {{Dataflow::WS, 16, 12, 72, 40, 44}, {Dataflow::OS, 16, 12, 72, 40, 44},
                                     {Dataflow::IS, 16, 12, 72, 40, 44}, {Dataflow::WS, 8, 8, 72, 40, 44},
                                     {Dataflow::OS, 12, 20, 72, 40, 44}, {Dataflow::IS, 20, 8, 72, 40, 44}};
  std::mt19937 rng(29);
  auto uni = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  for (Dataflow df : {Dataflow::WS, Dataflow::OS, Dataflow::IS})
    for (int i = 0; i < kKernelsPerDataflow; ++i) points.push_back({df, uni(4, 32), uni(4, 32), uni(1, 100), uni(1, 80), uni(1, 80)});
  for (Dataflow df : {Dataflow::WS, Dataflow::OS, Dataflow::IS}) points.push_back({df, 16, 12, 72, 40, 44, 1});
  kernel_check(points);
}

}  // namespace
}  // namespace tpusim

