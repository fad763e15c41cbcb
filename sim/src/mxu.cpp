// Timing (cycles; "front-end" is the in-order stage that takes the unit's queue, after the semaphore wait).
// The array has R = mxu.rows by C = mxu.cols PEs. mxu.lw holds a K x N tile of b (K <= R, N <= C); mxu.mm
// streams M rows of a (M x K) against it. Whatever the tile's size, data crosses the whole array (a smaller tile
// is zero-padded): skew and drain are counted in R and C. The derivations, with the PE-level mechanisms that
// validation/systolic/ simulates clock by clock, are in docs/dataflows.md; the rules here are their result.
// Below, Kt = max(K, 1), Nt = max(N, 1) (an empty tile still streams one zero row).
//
// mxu.dataflow = ws (weight-stationary; PE (r, c) holds b[r][c]; rows of a stream in from the left, partial sums
//   flow down and leave the bottom into the accumulators):
//   mxu.lw at front-end cycle f: shifts the tile into the PEs' shadow registers from start = max(f, shadow_free)
//     to ready = start + R (one row per cycle) and completes (signal) then. The front-end moves on at f: the load
//     overlaps whatever the array is doing. Only one tile can wait in the shadow buffer: a second lw before an mm
//     swapped the first in waits for the first load to finish and replaces that tile.
//   mxu.mm at front-end cycle f, streaming m input rows: a pending shadow tile is swapped in at
//     swap = max(ready, stream_free); the stream starts at s = max(f, stream_free, swap) and takes m cycles
//     (stream_free = s + m); results are in the accumulators (signal) at s + m + R + C - 2, after the last row
//     has crossed the skewed array. The front-end moves on at s, so the next lw can refill the shadow buffer
//     while this mm streams (double buffering) and the next mm's stream follows this one back to back.
//   One isolated fold (lw, then mm) from the lw's start: R + m + R + C - 2 = 2R + C + M - 2 cycles, which is
//   SCALE-Sim's weight-stationary fold (preload R, stream M, skew R - 1, drain C - 1).
// mxu.dataflow = os (output-stationary; PE (r, c) accumulates out[row r of the fold][c]; a enters from the
//   left, b from the top, K streamed; each PE has two accumulator registers, used by alternate folds):
//   mxu.lw stages the tile in a double-buffered staging buffer above the array, one row per cycle: ready =
//     start + Kt, start = max(f, shadow_free), as for ws.
//   mxu.mm: ceil(m/R) folds of R rows. Fold i streams Kt cycles from t_i; its outputs drain down each column,
//     R cycles, column c from t_i + Kt + R - 1 + c, one column port per column. So a fold may start when
//     t >= stream_free (= previous t + previous Kt) and t + Kt >= out_free (= previous t + previous Kt + R):
//     t_0 = max(f, swap, stream_free, out_free - Kt); within an mm t_{i+1} = t_i + max(Kt, R).
//     Results at t_last + Kt + 2R + C - 2. The front-end moves on at t_last.
//   One isolated fold from the lw's start: Kt + Kt + 2R + C - 2 = 2K + 2R + C - 2.
// mxu.dataflow = is (input-stationary; PE (r, c) holds a[row c of the fold][r] in double-buffered registers;
//   columns of b stream in from the left, N streamed, partial sums flow down and leave the bottom):
//   mxu.lw stages the tile, ready = start + Kt, as for os.
//   mxu.mm: ceil(m/C) folds of C rows of a. Fold i shifts its block of a into the PEs' shadow registers in R
//     cycles from L_i = max(f, a_shadow_free) (a_shadow_free = the previous fold's stream start: its swap), then
//     streams Nt cycles from t_i = max(L_i + R, stream_free, swap); within an mm t_{i+1} = t_i + max(R, Nt).
//     Results at t_last + Nt + R + C - 2. The front-end moves on at t_last.
//   One isolated fold from the lw's start (K <= R): R + Nt + R + C - 2 = 2R + C + N - 2.
// mxu.lw with `trans` reads the tile's transpose (an n x k block) and has exactly the timing above: only the
// bytes it books on VMEM's ports differ (n rows of k elements instead of k rows of n).
// VMEM: mxu.lw reads its tile and mxu.mm its input rows through VMEM's bank ports (vmem.banks, shared with DMA
// and the vector unit; memory.h). The matrix unit has priority there: its reads are booked on the ports from the
// load's or the stream's start, so DMA and vector traffic waits for them, but they never wait themselves (the
// presets' ports move several times the array's input rate), and the times above hold as they are.
// mxu.sync, and an mxu.mm with m == 0, complete at max(f, the latest completion scheduled so far): the matrix
// unit signals in order, so `mxu.sync signal=sN` after an mm says its results are in the accumulators.
// Busy cycles are streaming cycles (ws: m; os: folds * Kt; is: folds * Nt per mm); useful MACs are m*k*n per mm.
// mxu.i8_rate (ws only): an i8 mm streams rate rows per cycle, so m above becomes ceil(m / rate) (the PEs do rate
// int8 MACs per cycle, as TPU v5e's and v6e's MXUs do twice their bf16 rate). mxu.fp8_rate likewise for f8e4m3
// (ceil(m / fp8_rate); 2 on h200-like, as Hopper's tensor cores do fp8 at twice bf16); 0 = the chip has no fp8
// rate (TPU v1 to v6e): an f8e4m3 mxu.lw or mxu.mm is then a run-time error naming it. Only the stream's length
// depends on the type: loads, skew and drain are the same.
// mxu.efficiency (1 on every preset but h200-like): every stream above, whatever its dataflow and type, takes
// its length / efficiency cycles, the fraction of a cycle carried to the unit's next stream (Mxu::sustained), so
// that a run of streams averages exactly that fraction of the rate; loads, skew and drain are the same.
// A core has core.mxus matrix units, each with all of the above of its own (queue, front-end, weight buffers,
// array, accumulator rows [index * acc_rows, (index + 1) * acc_rows) of the core's accumulator memory); they share
// the core's VMEM ports.
//
// Functional: lw reads VMEM when it completes, mm reads its inputs and writes the accumulators when it completes
// (a program must not overwrite them before the instruction signals). int8: products are exact in f32 and a
// pass of k <= 1024 products sums exactly too (|sum| <= 2^24), so Eigen's f32 GEMM gives exact int32 results,
// which are then added into the int32 accumulators, wrapping. bf16: products are exact in f32 and each output
// element sums its k products in order l = 0, 1, ..., k-1 in f32 (no fused multiply-add: mxu.cpp is built with
// -ffp-contract=off), then is accumulated in f32. The order does not depend on m or on the row's place in the
// pass, so a GEMM gives bit-identical results whatever its tiling over rows, matrix units and cores. (Eigen's
// GEMM, used before, sums in an order that depends on the block a row falls in.) The loop runs over j innermost,
// which the compiler vectorises across output columns without changing any element's order.
#include "mxu.h"

#include <cstring>

#include <Eigen/Core>

#include "params.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::sim::detail {

void declare_mxu_params(std::vector<Param>& out) {
  ParamSection<MxuParams>(out, "mxu", &ChipConfig::mxu)
      .add(&MxuParams::rows, "rows", 128, "PEs", "PE rows of the systolic array: the K extent of a weight tile", 1,
           1024)
      .add(&MxuParams::cols, "cols", 128, "PEs", "PE columns of the systolic array: the N extent of a weight tile",
           1, 1024)
      .add(&MxuParams::acc_rows, "acc_rows", 2048, "rows",
           "accumulator memory depth, in rows of mxu.cols 32-bit words", 1, 1 << 20)
      .add(&MxuParams::dataflow, "dataflow", "ws", "",
           "what stays in the PEs (timing only; results are the same): ws = weight-stationary (the b tile is "
           "shifted into the PEs, rows of a stream through), os = output-stationary (each PE accumulates one "
           "output; a and the staged b tile stream in, outputs drain), is = input-stationary (a block of a is "
           "pinned in the PEs, the staged b tile's columns stream through)");
  out.back().check = [](const ChipConfig& c) -> std::string {
    const std::string& d = c.mxu.dataflow;
    return d == "ws" || d == "os" || d == "is" ? "" : "must be ws, os or is";
  };
  ParamSection<MxuParams>(out, "mxu", &ChipConfig::mxu)
      .add(&MxuParams::i8_rate, "i8_rate", 1, "rows/cycle",
           "input rows an i8 mxu.mm streams per cycle (bf16 streams 1): the int8 rate over the bf16 rate, 2 on "
           "chips whose PEs do two int8 MACs per cycle (TPU v5e, v6e); weight-stationary only",
           1, 4);
  // (keeping the range check: a rate of 0 or above 4 is refused first)
  out.back().check = [range = out.back().check](const ChipConfig& c) -> std::string {
    if (std::string e = range(c); !e.empty()) return e;
    return c.mxu.i8_rate == 1 || c.mxu.dataflow == "ws" ? "" : "must be 1 unless mxu.dataflow = ws";
  };
  ParamSection<MxuParams>(out, "mxu", &ChipConfig::mxu)
      .add(&MxuParams::fp8_rate, "fp8_rate", 0, "rows/cycle",
           "input rows an f8e4m3 (fp8) mxu.mm streams per cycle (bf16 streams 1): the fp8 rate over the bf16 rate, "
           "2 on chips whose PEs do two fp8 MACs per cycle (NVIDIA Hopper); 0: the chip has no fp8 (an f8e4m3 "
           "mxu.lw or mxu.mm is a run-time error); above 1 weight-stationary only",
           0, 4);
  out.back().check = [range = out.back().check](const ChipConfig& c) -> std::string {
    if (std::string e = range(c); !e.empty()) return e;
    return c.mxu.fp8_rate <= 1 || c.mxu.dataflow == "ws" ? "" : "must be 0 or 1 unless mxu.dataflow = ws";
  };
  ParamSection<MxuParams>(out, "mxu", &ChipConfig::mxu)
      .add(&MxuParams::efficiency, "efficiency", 1.0, "fraction",
           "the array streams at this fraction of its rate (a stream of m rows takes m / efficiency cycles, "
           "carried over so that a run of streams averages it): what a chip sustains of its matrix rate under "
           "dense load, measured rather than simulated (a GPU lowers its clock to stay within its power limit)",
           0.01, 1.0);
}

namespace {
Dataflow dataflow_of(const std::string& d) { return d == "os" ? Dataflow::OS : d == "is" ? Dataflow::IS : Dataflow::WS; }
uint64_t sub_sat(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }

using RowMajor = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

float element(isa::DType t, const uint8_t* p) {
  if (t == isa::DType::I8) return static_cast<float>(static_cast<int8_t>(*p));
  if (t == isa::DType::F8E4M3) return isa::f32_from_f8e4m3(*p);
  uint16_t h;
  std::memcpy(&h, p, 2);
  return isa::f32_from_bf16(h);
}
}  // namespace

Mxu::Mxu(const sc_core::sc_module_name& name, ChipState& st, int index)
    : UnitModule(name, st, isa::Unit::Mxu, index), R_(st.cfg.mxu.rows), C_(st.cfg.mxu.cols),
      df_(dataflow_of(st.cfg.mxu.dataflow)), index_(index),
      acc_base_(static_cast<int64_t>(index) * st.cfg.mxu.acc_rows),
      i8_rate_(static_cast<uint64_t>(st.cfg.mxu.i8_rate)), fp8_rate_(static_cast<uint64_t>(st.cfg.mxu.fp8_rate)),
      efficiency_(st.cfg.mxu.efficiency) {
  st.events.push_back(&pending_changed_);
  SC_THREAD(retire_thread);
}

void Mxu::reset() {
  UnitModule::reset();
  pending_ = {};
  stream_free_ = shadow_free_ = shadow_ready_ = last_completion_ = out_free_ = a_shadow_free_ = 0;
  carry_ = 0;
  shadow_.reset();
  active_.reset();
}

void Mxu::execute(const Entry& e) {
  switch (e.in.op) {
    case isa::Op::MXULW: return load_weights(e);
    case isa::Op::MXUMM: return matmul(e);
    default: return retire_in_order(e);  // mxu.sync
  }
}

void Mxu::read_vmem(uint64_t from, int64_t vaddr, int64_t rows, int64_t rowbytes, int64_t stride) {
  if (static_cast<uint64_t>(vaddr) >= st_.cfg.vmem_bytes()) return;  // mxu.mm's rows from the accumulators: no port
  VmemPorts& ports = st_.mem.vmem_ports;
  VmemPorts::Demand d = ports.demand();
  ports.add(d, Rows{static_cast<uint64_t>(vaddr), static_cast<uint64_t>(rows), static_cast<uint64_t>(rowbytes), stride});
  ports.reserve(st_.now(), from, d);
}

void Mxu::load_weights(const Entry& e) {
  const uint64_t f = st_.now();
  const int64_t k = e.arg("k"), n = e.arg("n");
  const isa::DType dt = e.dtype("dtype");
  if (k < 0 || static_cast<uint64_t>(k) > R_ || n < 0 || static_cast<uint64_t>(n) > C_)
    st_.fail(e.pc, "weight tile " + std::to_string(k) + "x" + std::to_string(n) + " does not fit the " +
                       std::to_string(R_) + "x" + std::to_string(C_) + " array");
  if (dt != isa::DType::I8 && dt != isa::DType::BF16 && dt != isa::DType::F8E4M3)
    st_.fail(e.pc, std::string("weights of type ") + isa::dtype_name(dt) +
                       ": the matrix unit takes i8, bf16 or f8e4m3");
  check_fp8(e.pc, dt);
  // The bytes read: k rows of n elements, or with `trans` the n x k block whose transpose is the tile.
  const bool trans = e.arg("trans") != 0;
  const int64_t rows = trans ? n : k, rowbytes = (trans ? k : n) * isa::dtype_size(dt);
  std::string err = check_rows("VMEM read", st_.cfg.vmem_bytes(), std::to_string(st_.cfg.vmem_bytes()) + " bytes",
                               e.arg("vaddr"), rows, rowbytes, e.arg("stride"));
  if (!err.empty()) st_.fail(e.pc, err);

  const uint64_t start = std::max(f, shadow_free_);
  auto tile = std::make_shared<Tile>();
  tile->k = static_cast<int>(k), tile->n = static_cast<int>(n), tile->dtype = dt;
  shadow_ = tile;
  read_vmem(start, e.arg("vaddr"), rows, rowbytes, e.arg("stride"));
  const auto tile_bytes = static_cast<uint64_t>(rows * rowbytes);  // = k * n * the element's size
  act(e.pc, Action::VmemRead, tile_bytes);
  act(e.pc, Action::WbufWrite, tile_bytes);
  shadow_ready_ = start + (df_ == Dataflow::WS ? R_ : std::max<uint64_t>(k, 1));
  shadow_free_ = shadow_ready_;  // until then it is loading; after that, until the swap (which updates this)
  schedule(shadow_ready_, e, std::move(tile));
  if (st_.tracing()) trace(start, shadow_ready_ - start, e.pc, "load");
}

void Mxu::matmul(const Entry& e) {
  const uint64_t f = st_.now();
  const int64_t m = e.arg("m"), acc = e.arg("acc");
  if (m < 0) st_.fail(e.pc, "negative m " + std::to_string(m));
  if (m == 0) return retire_in_order(e);
  const std::shared_ptr<Tile>& tile = shadow_ ? shadow_ : active_;
  if (!tile) st_.fail(e.pc, "no weight tile loaded (no mxu.lw before this mxu.mm)");
  const isa::DType dt = e.dtype("dtype");
  check_fp8(e.pc, dt);
  if (dt != tile->dtype)
    st_.fail(e.pc, std::string("inputs of type ") + isa::dtype_name(dt) + " but the weight tile is " +
                       isa::dtype_name(tile->dtype));
  const auto acc_rows = static_cast<int64_t>(st_.cfg.mxu.acc_rows);
  if (acc < 0 || acc > acc_rows || m > acc_rows - acc)
    st_.fail(e.pc, "accumulator rows [" + std::to_string(acc) + ", " + std::to_string(acc + m) + ") outside " +
                       std::to_string(acc_rows) + " rows" +
                       (st_.cfg.core.mxus > 1 ? " of matrix unit " + std::to_string(index_) : std::string()));
  // The input rows lie in VMEM or in the accumulators after it (isa.def).
  std::string err = check_rows("VMEM read", st_.cfg.local_bytes(),
                               std::to_string(st_.cfg.vmem_bytes()) + " bytes and the accumulators' " +
                                   std::to_string(st_.cfg.acc_bytes()),
                               e.arg("vaddr"), m, int64_t(tile->k) * isa::dtype_size(dt), e.arg("stride"));
  if (!err.empty()) st_.fail(e.pc, err);

  uint64_t swap = 0;
  const bool swapped = shadow_ != nullptr;
  if (shadow_) {
    swap = std::max(shadow_ready_, stream_free_);
    active_ = std::move(shadow_);
    shadow_.reset();
    shadow_free_ = swap;
  }
  const auto um = static_cast<uint64_t>(m);
  std::vector<uint64_t> folds;  // stream start of each fold
  uint64_t len = um, done = 0;   // stream cycles per fold; completion
  if (df_ == Dataflow::WS) {
    // i8 at mxu.i8_rate, f8e4m3 at mxu.fp8_rate rows per cycle: the stream takes ceil(m / rate) cycles.
    const uint64_t rate = rate_of(dt);
    len = sustained((um + rate - 1) / rate);
    const uint64_t s = std::max({f, stream_free_, swap});
    folds.push_back(s);
    stream_free_ = s + len;
    done = s + len + R_ + C_ - 2;
  } else if (df_ == Dataflow::OS) {
    len = sustained(std::max<uint64_t>(active_->k, 1));
    uint64_t t = std::max({f, swap, stream_free_, sub_sat(out_free_, len)});
    for (uint64_t i = 0; i < (um + R_ - 1) / R_; ++i) {
      if (i) t = std::max(stream_free_, sub_sat(out_free_, len));
      folds.push_back(t);
      stream_free_ = t + len;
      out_free_ = t + len + R_;
    }
    done = folds.back() + len + 2 * R_ + C_ - 2;
  } else {
    len = sustained(std::max<uint64_t>(active_->n, 1));
    uint64_t load = std::max(f, a_shadow_free_), t = std::max({load + R_, stream_free_, swap});
    for (uint64_t i = 0; i < (um + C_ - 1) / C_; ++i) {
      if (i) load = std::max(load + R_, a_shadow_free_), t = std::max(load + R_, stream_free_);
      folds.push_back(t);
      a_shadow_free_ = t;
      stream_free_ = t + len;
    }
    done = folds.back() + len + R_ + C_ - 2;
  }
  read_vmem(folds.front(), e.arg("vaddr"), m, int64_t(active_->k) * isa::dtype_size(dt), e.arg("stride"));
  stats().busy_cycles += len * folds.size();
  const uint64_t macs = um * static_cast<uint64_t>(active_->k) * static_cast<uint64_t>(active_->n);
  // Energy's actions (energy.h): the MACs; the input rows read from VMEM; the sums written into the accumulators
  // (read first when they add to them); the weight tile read from the weight buffers into the array: once when
  // it is swapped in (weight-stationary), once per fold (the staged tile streams through: os, is).
  const uint64_t size = static_cast<uint64_t>(isa::dtype_size(dt));
  const uint64_t k = static_cast<uint64_t>(active_->k), n = static_cast<uint64_t>(active_->n);
  // An f8e4m3 MAC is counted as a bf16 one: the same f32 accumulation, which dominates a MAC's energy (no
  // separate fp8 figure: assumption).
  act(e.pc, dt == isa::DType::I8 ? Action::MacI8 : Action::MacBf16, macs);
  act(e.pc, static_cast<uint64_t>(e.arg("vaddr")) >= st_.cfg.vmem_bytes() ? Action::AccRead : Action::VmemRead,
      um * k * size);
  act(e.pc, Action::AccWrite, um * n * 4);
  if (e.arg("accumulate")) act(e.pc, Action::AccRead, um * n * 4);
  const uint64_t tile_reads = df_ == Dataflow::WS ? (swapped ? 1 : 0) : folds.size();
  act(e.pc, Action::WbufRead, tile_reads * k * n * size);
  st_.run.stats.mxu_macs += macs;
  // The array's MAC slots they take: an i8 MAC is 1 / i8_rate of one, an f8e4m3 one 1 / fp8_rate
  // (mxu_mac_utilization).
  st_.run.mac_slots += static_cast<double>(macs) / static_cast<double>(rate_of(dt));
  if (st_.tracing())
    for (uint64_t t : folds) trace(t, len, e.pc, "busy");
  schedule(done, e, active_);
  st_.wait_until(folds.back());
}

void Mxu::check_fp8(uint64_t pc, isa::DType dt) {
  if (dt == isa::DType::F8E4M3 && fp8_rate_ == 0)
    st_.fail(pc, "f8e4m3 (fp8) operands, but this chip (" + st_.cfg.chip.name +
                     ") has no fp8 matrix rate (mxu.fp8_rate = 0)");
}

uint64_t Mxu::sustained(uint64_t cycles) {
  if (efficiency_ >= 1.0) return cycles;
  const double exact = static_cast<double>(cycles) / efficiency_ + carry_;
  const auto taken = static_cast<uint64_t>(exact);
  carry_ = exact - static_cast<double>(taken);
  return taken;
}

uint64_t Mxu::rate_of(isa::DType dt) const {
  if (df_ != Dataflow::WS) return 1;  // (both rates are 1 there: config checks)
  return dt == isa::DType::I8 ? i8_rate_ : dt == isa::DType::F8E4M3 ? fp8_rate_ : 1;
}

void Mxu::retire_in_order(const Entry& e) { schedule(std::max(st_.now(), last_completion_), e, nullptr); }

void Mxu::schedule(uint64_t time, const Entry& e, std::shared_ptr<Tile> tile) {
  last_completion_ = std::max(last_completion_, time);
  const bool earliest = pending_.empty() || time < pending_.top().time;
  pending_.push({time, seq_++, e, std::move(tile)});
  if (earliest) pending_changed_.notify();
}

void Mxu::retire_thread() {
  for (;;) {
    try {
      for (;;) {
        while (pending_.empty()) sc_core::wait(pending_changed_);
        const uint64_t t = pending_.top().time, now = st_.now();
        if (t > now) {
          sc_core::wait(st_.span(t - now), pending_changed_);
          st_.check_abort();
          continue;
        }
        Completion c = pending_.top();
        pending_.pop();
        complete(c);
        if (idle()) st_.drained.notify();
      }
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error(label() + ": internal error: " + e.what());
    }
  }
}

void Mxu::complete(const Completion& c) {
  if (st_.functional() && c.tile) {
    if (c.e.in.op == isa::Op::MXULW)
      fill_tile(c.e, *c.tile);
    else
      compute(c.e, *c.tile);
  }
  // An mxu.sync's completion is when the work before it has landed: an instant in the trace ("sync").
  if (c.e.in.op == isa::Op::MXUSYNC && st_.keeping_trace())
    trace(st_.now(), 0, c.e.pc, "sync");
  st_.signal(c.e.signal_sem(), c.e.pc);
}

void Mxu::fill_tile(const Entry& e, Tile& t) {
  const uint8_t* vmem = st_.mem.vmem.data();
  const int size = isa::dtype_size(t.dtype);
  const int64_t vaddr = e.arg("vaddr"), stride = e.arg("stride");
  t.w.resize(static_cast<size_t>(t.k) * t.n);
  if (e.arg("trans")) {  // W[i][j] = block[j][i]: block row j (n of them) holds column j of the tile
    for (int j = 0; j < t.n; ++j) {
      const uint8_t* row = vmem + vaddr + j * stride;
      for (int i = 0; i < t.k; ++i) t.w[static_cast<size_t>(i) * t.n + j] = element(t.dtype, row + i * size);
    }
    return;
  }
  for (int i = 0; i < t.k; ++i) {
    const uint8_t* row = vmem + vaddr + i * stride;
    for (int j = 0; j < t.n; ++j) t.w[static_cast<size_t>(i) * t.n + j] = element(t.dtype, row + j * size);
  }
}

namespace {

// One bf16 (or f8e4m3) pass, p[m x n] = a[m x k] w[k x n] (row-major, products exact in f32): each element sums its k products
// in order l = 0, 1, ..., k-1, the first as is (-0 too). Blocks of 4 rows x 16 columns are held in registers
// while l runs, so each weight row is read once per 4 rows (about 2.3x the speed of a row at a time); the order
// of every element's sum is unchanged, so the results are too.
void bf16_pass(const float* a, const float* w, float* p, int64_t m, int k, int n) {
  auto rows = [&](int64_t i0, int64_t i1, int j0) {  // rows [i0, i1), columns [j0, n), a row at a time
    for (int64_t i = i0; i < i1; ++i) {
      const float* ai = a + i * k;
      float* out = p + i * n;
      for (int j = j0; j < n; ++j) out[j] = k > 0 ? ai[0] * w[j] : 0.0f;
      for (int l = 1; l < k; ++l) {
        const float x = ai[l];
        const float* wl = w + static_cast<size_t>(l) * n;
        for (int j = j0; j < n; ++j) out[j] += x * wl[j];
      }
    }
  };
  constexpr int J = 16;
  int64_t i = 0;
  if (k > 0)
    for (; i + 4 <= m; i += 4) {
      const float *a0 = a + i * k, *a1 = a0 + k, *a2 = a1 + k, *a3 = a2 + k;
      int j = 0;
      for (; j + J <= n; j += J) {
        float c0[J], c1[J], c2[J], c3[J];
        for (int jj = 0; jj < J; ++jj) {
          const float x = w[j + jj];
          c0[jj] = a0[0] * x, c1[jj] = a1[0] * x, c2[jj] = a2[0] * x, c3[jj] = a3[0] * x;
        }
        for (int l = 1; l < k; ++l) {
          const float* wl = w + static_cast<size_t>(l) * n + j;
          const float x0 = a0[l], x1 = a1[l], x2 = a2[l], x3 = a3[l];
          for (int jj = 0; jj < J; ++jj) {
            const float x = wl[jj];
            c0[jj] += x0 * x, c1[jj] += x1 * x, c2[jj] += x2 * x, c3[jj] += x3 * x;
          }
        }
        for (int jj = 0; jj < J; ++jj) {
          p[i * n + j + jj] = c0[jj], p[(i + 1) * n + j + jj] = c1[jj];
          p[(i + 2) * n + j + jj] = c2[jj], p[(i + 3) * n + j + jj] = c3[jj];
        }
      }
      if (j < n) rows(i, i + 4, j);
    }
  rows(i, m, 0);
}

}  // namespace

void Mxu::compute(const Entry& e, const Tile& t) {
  const uint8_t* vmem = st_.mem.vmem.data();
  const int size = isa::dtype_size(t.dtype);
  const int64_t m = e.arg("m"), vaddr = e.arg("vaddr"), stride = e.arg("stride"), acc = e.arg("acc");
  const bool accumulate = e.arg("accumulate") != 0;
  RowMajor a(m, t.k);
  for (int64_t i = 0; i < m; ++i) {
    const uint8_t* row = vmem + vaddr + i * stride;
    for (int l = 0; l < t.k; ++l) a(i, l) = element(t.dtype, row + l * size);
  }
  RowMajor p(m, t.n);
  if (t.dtype == isa::DType::I8) {
    Eigen::Map<const RowMajor> w(t.w.data(), t.k, t.n);
    p.noalias() = a * w;  // exact in any order
  } else {
    bf16_pass(a.data(), t.w.data(), p.data(), m, t.k, t.n);
  }
  for (int64_t i = 0; i < m; ++i) {
    uint32_t* out = st_.mem.acc.data() + static_cast<size_t>(acc_base_ + acc + i) * st_.mem.acc_cols;
    for (int j = 0; j < t.n; ++j) {
      if (t.dtype == isa::DType::I8) {
        auto v = static_cast<uint32_t>(static_cast<int32_t>(p(i, j)));  // exact: |p| <= 2^24
        out[j] = accumulate ? out[j] + v : v;
      } else {
        float v = p(i, j);
        out[j] = isa::bits_from_f32(accumulate ? isa::f32_from_bits(out[j]) + v : v);
      }
    }
  }
}

}  // namespace tpusim::sim::detail
