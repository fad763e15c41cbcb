// The PE-level model (systolic.h). One Machine per run: a controller that starts loads and streams when the
// hardware's resources allow (the rules are written next to each, and derived in docs/dataflows.md), and a grid
// of PEs stepped one clock at a time: every PE reads its neighbours' registers as they were at the start of the
// cycle and writes its own at the end.
#include "systolic.h"

#include <algorithm>
#include <stdexcept>

namespace tpusim::systolic {

Dataflow parse_dataflow(const std::string& s) {
  if (s == "ws") return Dataflow::WS;
  if (s == "os") return Dataflow::OS;
  if (s == "is") return Dataflow::IS;
  throw std::invalid_argument("dataflow '" + s + "': must be ws, os or is");
}

const char* name(Dataflow d) { return d == Dataflow::WS ? "ws" : d == Dataflow::OS ? "os" : "is"; }

namespace {

// A value in a register, with the tags that let each PE check it meets the right partner.
struct Tok {
  bool v = false;
  int64_t x = 0;
  int id = -1;    // ws: instruction; os, is: fold
  int idx = 0;    // ws: row of a; os: k (or, in an accumulator, the row in the fold); is: column of b
  int gen = 0;    // ws, is: generation of the pinned block to use; os: accumulator register (fold parity)
  bool last = false;
};

// A block shifting down each column's shift chain (one register per PE), column c delayed by c cycles, then
// latched into the column's shadow registers at once: vals[r*C + c] is the value that lands in PE (r, c) after
// R shifts (fed to column c at its shift R - 1 - r). The latch of column c is at the end of cycle
// start + c + R - 1, so the shadow of PE (r, c) is overwritten no earlier than the swap of the block before it
// (at s + r + c for a stream starting at s <= start).
struct Load {
  uint64_t start;
  int gen;
  std::vector<int64_t> vals;
};

// A stream of inputs (ws: rows of a; is: columns of b; os: one fold) entering the array from cycle `start`.
struct Stream {
  uint64_t start;
  int len, id, gen;
};

struct Fold {  // os and is: which instruction and which block of rows
  int instr, f;
};

class Machine {
 public:
  Machine(Dataflow df, int R, int C, const std::vector<Instr>& prog, bool values)
      : df_(df), R_(R), C_(C), prog_(prog), values_(values), L_(R * C), P_(R * C), act_(R * C, 0), sh_(R * C, 0), tr_(R * C, 0),
        actgen_(R * C, -1), shgen_(R * C, -1), mark_{std::vector<uint64_t>(R * C, ~0ull), std::vector<uint64_t>(R * C, ~0ull)},
        drain_(C) {
    for (int j = 0, last = -1; j < static_cast<int>(prog.size()); ++j) {
      if (prog[j].kind == Instr::LW) last = j;
      tile_.push_back(last);
    }
    acc_[0].resize(R * C);
    acc_[1].resize(R * C);
    res_.timing.resize(prog.size());
    res_.out.resize(prog.size());
    for (size_t j = 0; j < prog.size(); ++j)
      if (prog[j].kind == Instr::MM) res_.out[j].assign(static_cast<size_t>(prog[j].m) * tile_n(j), 0);
  }

  Result run() {
    uint64_t t = 0;
    for (;;) {
      issue(t);
      const bool busy = step(t);
      ++res_.cycles_stepped;
      if (!busy && loads_.empty() && streams_.empty() && !draining()) {
        if (next_ == prog_.size() && !mm_open_ && lw_queue_.empty()) break;
        if (!mm_open_ && lw_queue_.empty()) t = std::max(t + 1, prog_[next_].arrive);  // nothing in flight: skip the idle gap
        else ++t;
      } else {
        ++t;
      }
    }
    uint64_t ended = 0;  // the latest end so far, in program order
    for (size_t j = 0; j < prog_.size(); ++j) {
      Timing& x = res_.timing[j];
      if (prog_[j].kind == Instr::SYNC) x.end = std::max(x.start, ended);
      ended = std::max(ended, x.end);
    }
    res_.total = ended;
    return std::move(res_);
  }

 private:
  // ---- the controller: starts work at cycle t when the resources allow --------------------------------------
  int tile_of(size_t j) const {  // the mxu.lw whose tile instruction j (an mm) uses: the latest before it
    if (tile_[j] < 0) throw std::logic_error("mxu.mm with no tile loaded");
    return tile_[j];
  }
  int tile_n(size_t j) const { return prog_[tile_of(j)].n; }

  void issue(uint64_t t) {
    for (bool progress = true; progress;) {
      progress = false;
      // The load path takes its queue in order: an mxu.lw starts when the shadow (ws: the PEs' second weight
      // register; os, is: the staging buffer's second half) is free: once the tile in it has been swapped in by
      // a stream, or, if no mm used it, once its load is done (a second lw then replaces it).
      while (!lw_queue_.empty() && t >= (pending_ >= 0 ? pend_ready_ : last_swap_)) {
        start_load(lw_queue_.front(), t);
        lw_queue_.erase(lw_queue_.begin());
        progress = true;
      }
      if (mm_open_) {
        if (issue_fold(t)) progress = true;
        continue;
      }
      if (next_ == prog_.size()) continue;
      const Instr& in = prog_[next_];
      if (t < std::max(in.arrive, fe_free_)) continue;
      progress = true;
      if (in.kind == Instr::SYNC) {  // takes the front-end for no time; ends when the work before it has
        res_.timing[next_] = {t, 0};
        fe_free_ = t;
        ++next_;
        continue;
      }
      if (in.kind == Instr::LW) {  // handed to the load path; the front-end moves on
        lw_queue_.push_back(next_);
        fe_free_ = t;
        ++next_;
        continue;
      }
      // An mm opens; its folds issue one by one (ws: a single stream).
      mm_open_ = true;
      fold_ = 0;
      loaded_ = false;
      folds_total_ = df_ == Dataflow::WS   ? 1
                     : df_ == Dataflow::OS ? (in.m + R_ - 1) / R_
                                           : (in.m + C_ - 1) / C_;
    }
  }

  void start_load(size_t j, uint64_t t) {
    const Instr& in = prog_[j];
    const int k = in.k, n = in.n;
    uint64_t len = static_cast<uint64_t>(std::max(k, 1));  // os, is: staged one row a cycle
    if (df_ == Dataflow::WS) {  // shifted down the columns' chains, R cycles, then latched
      len = static_cast<uint64_t>(R_);
      std::vector<int64_t> v(static_cast<size_t>(R_) * C_, 0);
      if (values_)
        for (int r = 0; r < k; ++r)
          for (int c = 0; c < n; ++c) v[r * C_ + c] = in.b[r * n + c];
      loads_.push_back({t, ++gen_, std::move(v)});
      pend_gen_ = gen_;
    }
    pending_ = static_cast<int>(j);
    pend_ready_ = t + len;
    res_.timing[j] = {t, t + len};
  }

  // The next fold of the open mm; true if it (or, for is, its block load) started at t.
  bool issue_fold(uint64_t t) {
    const size_t j = next_;
    const Instr& in = prog_[j];
    const bool first = fold_ == 0;
    if (df_ == Dataflow::IS && !loaded_) {
      const Instr& lw = prog_[tile_of(j)];
      // The fold's block of a shifts into the PEs' shadow registers (column c from t + c, R cycles each), once
      // the previous block there has been swapped in (at its stream's start) and the load path is free.
      if (t < std::max(a_shadow_free_, a_load_free_)) return false;
      std::vector<int64_t> v(static_cast<size_t>(R_) * C_, 0);
      if (values_)
        for (int c = 0; c < C_ && fold_ * C_ + c < in.m; ++c)
          for (int r = 0; r < lw.k; ++r) v[r * C_ + c] = in.a[(fold_ * C_ + c) * lw.k + r];
      loads_.push_back({t, ++gen_, std::move(v)});
      a_gen_ = gen_;
      a_ready_ = a_load_free_ = t + R_;
      loaded_ = true;
      return true;
    }
    if (first && !lw_queue_.empty()) return false;  // its tile has not started loading yet
    const bool swap = first && pending_ >= 0;
    const Instr& lw = prog_[tile_of(j)];
    // Every fold needs the input port: its previous stream has ended.
    if (t < stream_free_) return false;
    if (swap && t < pend_ready_) return false;  // the new tile must be fully loaded
    int len;
    if (df_ == Dataflow::WS) {
      len = in.m;
    } else if (df_ == Dataflow::OS) {
      len = std::max(lw.k, 1);
      // The fold's last column-0 MAC is at t + len - 1 + R - 1; its column-0 drain then takes the column's
      // output port for R cycles from t + len + R - 1: the previous fold's drain must be over by then.
      if (t + len + R_ - 1 < port_free_) return false;
      port_free_ = t + len + 2 * R_ - 1;
    } else {
      len = std::max(lw.n, 1);
      if (t < a_ready_) return false;  // the block of a is in the shadow registers
    }
    if (swap) {
      cur_tile_ = pending_;
      cur_gen_ = pend_gen_;
      pending_ = -1;
      last_swap_ = t;
    }
    if (first) res_.timing[j] = {t, 0};
    stream_free_ = t + len;
    const int id = df_ == Dataflow::WS ? static_cast<int>(j) : static_cast<int>(folds_.size());
    if (df_ != Dataflow::WS) folds_.push_back({static_cast<int>(j), fold_});
    const int gen = df_ == Dataflow::WS ? cur_gen_ : df_ == Dataflow::IS ? a_gen_ : (id & 1);
    streams_.push_back({t, len, id, gen});
    if (df_ == Dataflow::IS) {
      a_shadow_free_ = t;  // the block is swapped in as the stream enters: the shadow may load the next
      loaded_ = false;
    }
    if (++fold_ == folds_total_) {
      mm_open_ = false;
      fe_free_ = t;  // the front-end moves on when the last fold has started
      ++next_;
    }
    return true;
  }

  // ---- the grid: one clock ---------------------------------------------------------------------------------
  bool draining() const {
    for (const auto& d : drain_)
      if (d.active) return true;
    return false;
  }

  // The input entering row r (ws, is: from the left) at cycle t, or column c (os: b from the top).
  Tok feed_left(int r, uint64_t t) const {
    Tok out;
    for (const Stream& s : streams_) {
      if (t < s.start + r || t >= s.start + r + s.len) continue;
      if (out.v) hazard(t, "two streams enter row " + std::to_string(r));
      const int i = static_cast<int>(t - s.start - r);
      out = {true, 0, s.id, i, s.gen, false};
      if (!values_) continue;
      if (df_ == Dataflow::WS) {
        const Instr& in = prog_[s.id];
        const int k = prog_[tile_of(s.id)].k;
        if (r < k) out.x = in.a[i * k + r];
      } else if (df_ == Dataflow::IS) {
        const Instr& lw = prog_[tile_of(folds_[s.id].instr)];
        if (r < lw.k && i < lw.n) out.x = lw.b[r * lw.n + i];
      } else {
        const Fold& f = folds_[s.id];
        const Instr& in = prog_[f.instr];
        const int k = prog_[tile_of(f.instr)].k, row = f.f * R_ + r;
        if (row < in.m && i < k) out.x = in.a[row * k + i];
      }
    }
    return out;
  }
  Tok feed_top(int c, uint64_t t) const {  // os only
    Tok out;
    for (const Stream& s : streams_) {
      if (t < s.start + c || t >= s.start + c + s.len) continue;
      if (out.v) hazard(t, "two streams enter column " + std::to_string(c));
      const int kk = static_cast<int>(t - s.start - c);
      out = {true, 0, s.id, kk, s.gen, kk == s.len - 1};
      const Instr& lw = prog_[tile_of(folds_[s.id].instr)];
      if (values_ && kk < lw.k && c < lw.n) out.x = lw.b[kk * lw.n + c];
    }
    return out;
  }

  [[noreturn]] static void hazard(uint64_t t, const std::string& what) {
    throw std::logic_error("systolic hazard at cycle " + std::to_string(t) + ": " + what);
  }

  // An output leaves the array at cycle t from the bottom of column c.
  void emit(uint64_t t, int c, const Tok& p) {
    int j, row, col;
    if (df_ == Dataflow::WS) {
      j = p.id, row = p.idx, col = c;
    } else if (df_ == Dataflow::OS) {
      j = folds_[p.id].instr, row = folds_[p.id].f * R_ + p.idx, col = c;
    } else {
      j = folds_[p.id].instr, row = folds_[p.id].f * C_ + c, col = p.idx;
    }
    Timing& tm = res_.timing[j];
    tm.end = std::max(tm.end, t + 1);
    const int n = tile_n(j);
    if (row < prog_[j].m && col < n) res_.out[j][static_cast<size_t>(row) * n + col] = p.x;
  }

  bool step(uint64_t t) {
    bool any = false;
    std::vector<Tok> nl(L_.size()), np(P_.size());
    for (int r = 0; r < R_; ++r) {
      for (int c = 0; c < C_; ++c) {
        const int i = r * C_ + c;
        const Tok a = c == 0 ? feed_left(r, t) : L_[i - 1];
        if (df_ == Dataflow::OS) {
          const Tok b = r == 0 ? feed_top(c, t) : P_[i - C_];
          if (a.v != b.v || (a.v && (a.id != b.id || a.idx != b.idx)))
            hazard(t, "a and b out of step in PE (" + std::to_string(r) + ", " + std::to_string(c) + ")");
          nl[i] = a, np[i] = b;
          if (!a.v) continue;
          any = true;
          Tok& acc = acc_[a.gen][i];
          if (a.idx == 0) {
            if (acc.v) hazard(t, "accumulator overwritten before it drained");
            acc = {true, 0, a.id, r, a.gen, false};
          } else if (!acc.v || acc.id != a.id) {
            hazard(t, "accumulator lost");
          }
          acc.x += a.x * b.x;
          mark_[a.gen][i] = t;
          if (b.last) {
            acc.last = true;
            if (r == R_ - 1) {  // the column is done: drain it from the next cycle
              const Drain& d = drain_[c];
              if (d.active && d.start + R_ - 1 > t) hazard(t, "column " + std::to_string(c) + "'s output port is busy");
              new_drains_.push_back({c, a.gen});
            }
          }
          continue;
        }
        // ws, is: pinned value times the input from the left, plus the partial sum from above.
        const Tok p = r == 0 ? Tok{} : P_[i - C_];
        nl[i] = a;
        if (!a.v) {
          if (p.v) hazard(t, "a partial sum without its input");
          continue;
        }
        any = true;
        if (actgen_[i] != a.gen) {  // the first input of a new stream swaps the shadow in
          if (shgen_[i] != a.gen) hazard(t, "swap to a block that is not (or no longer) in the shadow register");
          act_[i] = sh_[i];
          actgen_[i] = a.gen;
        }
        if (r > 0 && !(p.v && p.id == a.id && p.idx == a.idx)) hazard(t, "partial sum out of step");
        np[i] = {true, (r > 0 ? p.x : 0) + a.x * act_[i], a.id, a.idx, a.gen, false};
        if (r == R_ - 1) emit(t, c, np[i]);
      }
    }
    L_.swap(nl);
    P_.swap(np);
    // Shadow loads (ws, is): every loading column shifts down by one.
    for (const Load& ld : loads_) {
      for (int c = 0; c < C_; ++c) {
        if (t < ld.start + c || t >= ld.start + c + R_) continue;
        any = true;
        const int s = static_cast<int>(t - ld.start - c);  // this column's shift number
        for (int r = R_ - 1; r > 0; --r) tr_[r * C_ + c] = tr_[(r - 1) * C_ + c];
        tr_[c] = ld.vals[(R_ - 1 - s) * C_ + c];
        if (s < R_ - 1) continue;
        for (int r = 0; r < R_; ++r) {  // the column is in place: latch it into the shadow registers
          sh_[r * C_ + c] = tr_[r * C_ + c];
          shgen_[r * C_ + c] = ld.gen;
        }
      }
    }
    std::erase_if(loads_, [&](const Load& ld) { return t + 1 >= ld.start + C_ - 1 + R_; });
    // Drains (os): the bottom accumulator of the column leaves, the rest shift down one.
    for (int c = 0; c < C_; ++c) {
      Drain& d = drain_[c];
      if (!d.active || t < d.start) continue;
      any = true;
      const int s = static_cast<int>(t - d.start);
      auto& acc = acc_[d.p];
      Tok& bottom = acc[(R_ - 1) * C_ + c];
      if (!bottom.v || !bottom.last) hazard(t, "draining an unfinished accumulator");
      emit(t, c, bottom);
      for (int r = R_ - 1; r >= s; --r) {
        if (mark_[d.p][r * C_ + c] == t) hazard(t, "a MAC and the drain write one accumulator");
        acc[r * C_ + c] = r > s ? acc[(r - 1) * C_ + c] : Tok{};
      }
      if (s == R_ - 1) d.active = false;
    }
    for (auto [c, p] : new_drains_) drain_[c] = {true, p, t + 1};
    new_drains_.clear();
    std::erase_if(streams_, [&](const Stream& s) { return t + 1 >= s.start + s.len + std::max(R_, C_); });
    return any;
  }

  struct Drain {
    bool active = false;
    int p = 0;
    uint64_t start = 0;
  };

  const Dataflow df_;
  const int R_, C_;
  const std::vector<Instr>& prog_;
  const bool values_;
  std::vector<int> tile_;
  Result res_;
  // Controller.
  size_t next_ = 0;
  uint64_t fe_free_ = 0, stream_free_ = 0, last_swap_ = 0, pend_ready_ = 0, port_free_ = 0;
  uint64_t a_shadow_free_ = 0, a_load_free_ = 0, a_ready_ = 0;
  int pending_ = -1, cur_tile_ = -1, gen_ = 0, pend_gen_ = -1, cur_gen_ = -1, a_gen_ = -1;
  bool mm_open_ = false, loaded_ = false;
  int fold_ = 0, folds_total_ = 0;
  std::vector<Fold> folds_;
  std::vector<size_t> lw_queue_;  // mxu.lw handed to the load path, not started
  std::vector<Load> loads_;
  std::vector<Stream> streams_;
  // Grid: L_ moves right (a, or b for is); P_ moves down (partial sums; b for os).
  std::vector<Tok> L_, P_;
  std::vector<int64_t> act_, sh_, tr_;  // pinned: active, shadow, and the shift chain that loads the shadow
  std::vector<int> actgen_, shgen_;
  std::vector<Tok> acc_[2];
  std::vector<uint64_t> mark_[2];
  std::vector<Drain> drain_;
  std::vector<std::pair<int, int>> new_drains_;  // (column, accumulator) whose drain starts next cycle
};

}  // namespace

Result run(Dataflow df, int rows, int cols, const std::vector<Instr>& prog, bool values) {
  if (rows < 1 || cols < 1 || rows > 1024 || cols > 1024) throw std::invalid_argument("array size out of range");
  for (const Instr& in : prog) {
    if (in.kind == Instr::LW && (in.k < 0 || in.k > rows || in.n < 0 || in.n > cols))
      throw std::invalid_argument("tile does not fit the array");
    if (in.kind == Instr::MM && in.m < 1) throw std::invalid_argument("mxu.mm needs m >= 1");
  }
  return Machine(df, rows, cols, prog, values).run();
}

}  // namespace tpusim::systolic
