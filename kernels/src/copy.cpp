// The copy-kernel generator: the contract and the schedule are in copy.h.
#include "tpusim/kernels/copy.h"

#include <algorithm>
#include <stdexcept>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/emitter.h"

namespace tpusim::kernels {
namespace {

using i128 = __int128;

constexpr int kSlots = 4;                        // slots in the VMEM window
constexpr size_t kMaxPieces = 256;               // pieces per group (bounds hazard checks and group latency)
constexpr int64_t kMaxValue = (int64_t{1} << 47) - 1;  // li takes a 48-bit signed immediate
constexpr uint64_t kExactRows = 4096;            // rows enumerated by an exact overlap test before guessing "yes"
constexpr uint64_t kMinCut = 512;                // a contiguous row is not cut into a slot's last few bytes
constexpr uint64_t kMinDirectRow = 64;           // the shortest rows a move within VMEM moves directly (build)

// Rows base + i*stride, i < rows, each `len` bytes.
struct Pat {
  int64_t base = 0;
  uint64_t rows = 0, len = 0;
  int64_t stride = 0;
  i128 lo() const { return i128(base) + std::min<i128>(0, i128(stride) * i128(rows - 1)); }
  i128 hi() const { return i128(base) + std::max<i128>(0, i128(stride) * i128(rows - 1)) + i128(len); }
};

i128 floor_div(i128 a, i128 b) {  // b > 0
  i128 q = a / b;
  if ((a % b != 0) && (a < 0)) --q;
  return q;
}

// Is there an integer k in [kmin, kmax] with lo < x0 + k*s < hi?
bool hits(i128 x0, i128 s, i128 kmin, i128 kmax, i128 lo, i128 hi) {
  if (kmin > kmax) return false;
  if (s == 0) return lo < x0 && x0 < hi;
  if (s < 0) {
    s = -s;
    const i128 t = kmin;
    kmin = -kmax;
    kmax = -t;
  }
  const i128 klo = floor_div(lo - x0, s) + 1;
  const i128 khi = -floor_div(-(hi - x0), s) - 1;  // ceil((hi - x0) / s) - 1
  return std::max(klo, kmin) <= std::min(khi, kmax);
}

// Does any row of a overlap any row of b? Exact for arithmetic patterns when cheap; otherwise `unknown`.
bool overlaps(const Pat& a, const Pat& b, bool unknown, uint64_t limit = kExactRows) {
  if (!a.rows || !b.rows || !a.len || !b.len) return false;
  if (a.hi() <= b.lo() || b.hi() <= a.lo()) return false;
  // Rows a_i = a.base + i*a.stride and b_j overlap iff -a.len < a_i - b_j < b.len.
  const i128 x0 = i128(a.base) - i128(b.base), lo = -i128(a.len), hi = i128(b.len);
  if (a.rows == 1) return hits(x0, -i128(b.stride), 0, i128(b.rows) - 1, lo, hi);
  if (b.rows == 1) return hits(x0, i128(a.stride), 0, i128(a.rows) - 1, lo, hi);
  if (a.stride == b.stride) return hits(x0, i128(a.stride), -(i128(b.rows) - 1), i128(a.rows) - 1, lo, hi);
  if (std::min(a.rows, b.rows) > limit) return unknown;
  if (a.rows <= b.rows) {
    for (uint64_t i = 0; i < a.rows; ++i)
      if (hits(x0 + i128(a.stride) * i128(i), -i128(b.stride), 0, i128(b.rows) - 1, lo, hi)) return true;
  } else {
    for (uint64_t j = 0; j < b.rows; ++j)
      if (hits(x0 - i128(b.stride) * i128(j), i128(a.stride), 0, i128(a.rows) - 1, lo, hi)) return true;
  }
  return false;
}

// The bytes [lo, hi) that some patterns lie in (empty: lo == hi). A pattern that misses them overlaps none of the
// patterns (overlaps() says no at once to disjoint ranges), which then need no test one by one.
struct Span {
  i128 lo = 0, hi = 0;
  bool meets(const Pat& p) const { return lo < hi && p.rows && p.len && p.lo() < hi && lo < p.hi(); }
  void add(const Pat& p) {
    if (!p.rows || !p.len) return;
    lo = lo < hi ? std::min(lo, p.lo()) : p.lo(), hi = std::max(hi, p.hi());
  }
};

// A move in signed arithmetic, validated.
struct M {
  int64_t src, dst;
  uint64_t rows, rb;
  int64_t ss, ds;
  Pat src_pat() const { return {src, rows, rb, rows > 1 ? ss : 0}; }
  Pat dst_pat() const { return {dst, rows, rb, rows > 1 ? ds : 0}; }
};

[[noreturn]] void bad(size_t i, const std::string& what) {
  throw std::invalid_argument("copy: move " + std::to_string(i) + ": " + what);
}

M validate(const Move& mv, size_t i) {
  if (mv.rows > uint64_t(kMaxValue) || mv.rowbytes > uint64_t(kMaxValue))
    bad(i, "rows " + std::to_string(mv.rows) + " or rowbytes " + std::to_string(mv.rowbytes) +
               " is negative or does not fit in 47 bits");
  if ((i128(mv.rows) * i128(mv.rowbytes)) >> 62) bad(i, "moves 2^62 bytes or more");
  if (mv.src > uint64_t(kMaxValue) || mv.dst > uint64_t(kMaxValue))
    bad(i, "address is negative or does not fit in 47 bits");
  if (mv.src_stride > kMaxValue || mv.src_stride < -kMaxValue || mv.dst_stride > kMaxValue ||
      mv.dst_stride < -kMaxValue)
    bad(i, "stride does not fit in 47 bits");
  M m{int64_t(mv.src), int64_t(mv.dst), mv.rows, mv.rowbytes, mv.src_stride, mv.dst_stride};
  if (!m.rows || !m.rb) return m;
  for (const Pat& p : {m.src_pat(), m.dst_pat()})
    if (p.lo() < 0 || p.hi() > i128(kMaxValue))
      bad(i, "rows reach outside addresses [0, 2^47) (negative or overflowing stride)");
  if (m.rows > 1 && (m.ds < 0 ? -i128(m.ds) : i128(m.ds)) < i128(m.rb))
    bad(i, "destination rows overlap each other (|dst_stride| " + std::to_string(m.ds) + " < rowbytes " +
               std::to_string(m.rb) + ")");
  if (overlaps(m.src_pat(), m.dst_pat(), true, uint64_t{1} << 22))
    bad(i, "source rows overlap the move's own destination rows");
  return m;
}

// Contiguous rows become one row.
void collapse(M& m) {
  if (m.rows > 1 && m.ss == int64_t(m.rb) && m.ds == int64_t(m.rb) && i128(m.rows) * m.rb <= kMaxValue) {
    m.rb *= m.rows;
    m.rows = 1;
  }
  if (m.rows == 1) m.ss = m.ds = 0;
}

// Appends b to a when together they are one regular 2-D move that behaves like the two in order.
bool merge_moves(M& a, const M& b) {
  // A transfer's rows are all in one memory (isa::far_memory: HBM, VMEM or the shared memory through their
  // windows), so moves in different ones never merge.
  if (isa::far_memory(a.src) != isa::far_memory(b.src) || isa::far_memory(a.dst) != isa::far_memory(b.dst))
    return false;
  // Neither reads what the other writes, so the merged move's rows may run in any order (as a move's rows may).
  if (overlaps(b.src_pat(), a.dst_pat(), true) || overlaps(a.src_pat(), b.dst_pat(), true)) return false;
  if (a.rows == 1 && b.rows == 1 && b.src == a.src + int64_t(a.rb) && b.dst == a.dst + int64_t(a.rb) &&
      i128(a.rb) + b.rb <= kMaxValue) {
    a.rb += b.rb;  // one longer contiguous row
    return true;
  }
  if (a.rb != b.rb) return false;
  int64_t ss, ds;
  if (a.rows == 1) {
    ss = b.src - a.src;
    ds = b.dst - a.dst;
  } else {
    ss = a.ss;
    ds = a.ds;
  }
  if (b.rows > 1 && (b.ss != ss || b.ds != ds)) return false;
  if (i128(b.src) != i128(a.src) + i128(ss) * i128(a.rows) || i128(b.dst) != i128(a.dst) + i128(ds) * i128(a.rows))
    return false;
  if (ss > kMaxValue || ss < -kMaxValue || ds > kMaxValue || ds < -kMaxValue) return false;
  if ((ds < 0 ? -i128(ds) : i128(ds)) < i128(a.rb)) return false;  // destination rows stay disjoint
  if (i128(a.rows + b.rows) * i128(a.rb) >= (i128(1) << 62)) return false;
  a.rows += b.rows;
  a.ss = ss;
  a.ds = ds;
  return true;
}

// One DMA transfer: rows of rb bytes, HBM at h + i*hs, VMEM (offset within the slot) at v + i*vs.
struct Xfer {
  int64_t h = 0, hs = 0, v = 0, vs = 0;
  uint64_t rows = 0, rb = 0;
};

void collapse(Xfer& x) {
  if (x.rows > 1 && x.hs == int64_t(x.rb) && x.vs == int64_t(x.rb)) {
    x.rb *= x.rows;
    x.rows = 1;
  }
  if (x.rows == 1) x.hs = x.vs = 0;
}

bool merge_xfers(Xfer& a, const Xfer& b) {
  if (isa::far_memory(a.h) != isa::far_memory(b.h)) return false;  // (as merge_moves)
  if (a.rows == 1 && b.rows == 1 && b.h == a.h + int64_t(a.rb) && b.v == a.v + int64_t(a.rb)) {
    a.rb += b.rb;  // one contiguous row
    return true;
  }
  if (a.rb != b.rb) return false;
  const int64_t hs = a.rows == 1 ? b.h - a.h : a.hs, vs = a.rows == 1 ? b.v - a.v : a.vs;
  if (b.rows > 1 && (b.hs != hs || b.vs != vs)) return false;
  if (b.h != a.h + hs * int64_t(a.rows) || b.v != a.v + vs * int64_t(a.rows)) return false;
  if (hs > kMaxValue || hs < -kMaxValue) return false;
  a.rows += b.rows;
  a.hs = hs;
  a.vs = vs;
  collapse(a);
  return true;
}

struct Piece {
  Pat src, dst;   // HBM sides; both have the piece's rows and width
  int64_t voff;   // offset in the slot; VMEM rows are packed (stride = width)
  bool fill = false;  // source stride 0: one row in VMEM, loaded once, stored `rows` times (VMEM stride 0)
  int wait = -1;  // >= 0: the load first waits for every store of group `wait` (dmain.sync wait=s3)
};

struct Group {
  std::vector<Piece> pieces;
  int64_t used = 0;
  bool signal = false;  // a later load waits for this group's stores (dmaout.sync signal=s3)
  Span stores;  // its stores' destinations
};

// An item of a queue's code: a transfer, or (sync) a dmain.sync wait=s3.
struct Item {
  bool sync = false;
  Xfer x;
};

struct Planner {
  int64_t slot;
  std::vector<Group> groups;
  int known_done = -1;  // every store of groups <= known_done completes before the next load; a load may
                        // overtake the stores of the groups after it (at most kSlots + 1 of them)

  int cur() const { return int(groups.size()) - 1; }
  void learn(int done) { known_done = std::max(known_done, done); }
  void open() {
    groups.emplace_back();
    learn(cur() - kSlots);  // its first load waits for its slot: group cur - kSlots has stored
  }
  // The latest group whose stores a load of `src` may overtake and must not: the newest first, each group's
  // pieces only where the span of its stores meets `src`.
  int conflict(const Pat& src) const {
    for (int g = cur(); g > known_done; --g) {
      const Group& group = groups[size_t(g)];
      if (!group.stores.meets(src)) continue;
      for (const Piece& piece : group.pieces)
        if (overlaps(src, piece.dst, true)) return g;
    }
    return -1;
  }
  int64_t room() const { return slot - groups.back().used; }
  bool full(int64_t need) const { return groups.back().pieces.size() >= kMaxPieces || room() < need; }

  // Places rows [r0, r0+n) of columns [c0, c0+w) of move m into the current group (which has room).
  // Returns false (after opening a new group) when the piece must go to a fresh group instead.
  bool place(const M& m, uint64_t r0, uint64_t n, uint64_t c0, uint64_t w, bool fill = false) {
    Piece p;
    p.fill = fill;
    p.src = {m.src + int64_t(c0) + m.ss * int64_t(r0), fill ? 1 : n, w, fill || n == 1 ? 0 : m.ss};
    p.dst = {m.dst + int64_t(c0) + m.ds * int64_t(r0), n, w, n > 1 ? m.ds : 0};
    int h = conflict(p.src);
    if (h == cur() && !groups.back().pieces.empty()) {  // reads what this group stores: close it
      open();
      return false;
    }
    if (h > known_done) {
      p.wait = h;
      groups[size_t(h)].signal = true;
      learn(h);
    }
    Group& g = groups.back();
    p.voff = g.used;
    g.used += int64_t((fill ? 1 : n) * w);
    g.pieces.push_back(p);
    g.stores.add(p.dst);
    return true;
  }

  void add(const M& m) {
    const uint64_t S = uint64_t(slot);
    if (m.rows == 1) {  // one contiguous row: cut it anywhere
      uint64_t c = 0;
      while (c < m.rb) {
        const uint64_t left = m.rb - c;
        if (full(int64_t(std::min<uint64_t>({left, kMinCut, S})))) open();
        const uint64_t w = std::min<uint64_t>(left, uint64_t(room()));
        if (place(m, 0, 1, c, w)) c += w;
      }
      return;
    }
    const uint64_t strips = (m.rb + S - 1) / S, w0 = (m.rb + strips - 1) / strips;
    if (m.ss == 0) {  // a fill from one pattern row: each strip is one piece, whatever the row count
      for (uint64_t c = 0; c < m.rb;) {
        const uint64_t w = std::min(w0, m.rb - c);
        if (full(int64_t(w))) open();
        if (place(m, 0, m.rows, c, w, true)) c += w;
      }
      return;
    }
    for (uint64_t c = 0; c < m.rb; c += w0) {
      const uint64_t w = std::min(w0, m.rb - c);
      uint64_t r = 0;
      while (r < m.rows) {
        if (full(int64_t(w))) open();
        const uint64_t n = std::min<uint64_t>(m.rows - r, uint64_t(room()) / w);
        if (place(m, r, n, c, w)) r += n;
      }
    }
  }
};

// The load (HBM -> VMEM) and store code of one group, consecutive transfers merged.
std::vector<Item> group_items(const Group& g, bool load) {
  std::vector<Item> out;
  for (const Piece& p : g.pieces) {
    if (load && p.wait >= 0) out.push_back({true, {}});
    const Pat& hp = load ? p.src : p.dst;
    Xfer x{hp.base, hp.stride, p.voff, p.fill ? 0 : int64_t(hp.len), hp.rows, hp.len};
    collapse(x);
    if (!out.empty() && !out.back().sync && merge_xfers(out.back().x, x)) continue;
    out.push_back({false, x});
  }
  return out;
}

// The copy's code, through the typed emitter, with the registers that hold its transfers' operands.
class Code {
 public:
  explicit Code(isa::Emitter& e) : e_(e) {}

  void xfer(bool load, const Xfer& x, int64_t vbase, isa::Sem wait, isa::Sem signal) {
    const int64_t v = vbase + x.v;
    const int64_t vals[6] = {load ? v : x.h, load ? x.h : v, int64_t(x.rows), int64_t(x.rb),
                             x.rows > 1 ? x.hs : 0, x.rows > 1 ? x.vs : 0};
    uint32_t pinned = 0;
    isa::Reg r[6];
    for (int i = 0; i < 6; ++i) r[i] = reg(vals[i], pinned);
    if (load) {
      e_.dma_ld(r[0], r[1], r[2], r[3], r[4], r[5], {.wait = wait, .signal = signal});
    } else {
      e_.dma_st(r[0], r[1], r[2], r[3], r[4], r[5], {.wait = wait, .signal = signal});
    }
  }
 private:
  // A register holding v (r0 for 0), loaded with li into the least recently used one if none does.
  isa::Reg reg(int64_t v, uint32_t& pinned) {
    ++tick_;
    if (v == 0) return isa::reg(0);
    int best = -1;
    for (int r = 1; r < 32; ++r)
      if (valid_[r] && val_[r] == v) {
        last_[r] = tick_;
        pinned |= 1u << r;
        return isa::reg(r);
      }
    for (int r = 1; r < 32; ++r) {
      if (pinned & (1u << r)) continue;
      if (!valid_[r]) {
        best = r;
        break;
      }
      if (best < 0 || last_[r] < last_[best]) best = r;
    }
    valid_[best] = true;
    val_[best] = v;
    last_[best] = tick_;
    pinned |= 1u << best;
    e_.li(isa::reg(best), v);
    return isa::reg(best);
  }

  isa::Emitter& e_;
  bool valid_[32] = {};
  int64_t val_[32] = {};
  uint64_t last_[32] = {};
  uint64_t tick_ = 0;
};

int64_t symbol(const std::map<std::string, int64_t>& s, const std::string& k, int64_t dflt, bool required) {
  auto it = s.find(k);
  if (it != s.end()) return it->second;
  if (required) throw std::invalid_argument("copy: symbol " + k + " is missing");
  return dflt;
}

}  // namespace

namespace {

// The window's slot size and base, from the symbols.
struct Window {
  int64_t base = 0, slot = 0;
};
Window window(const std::map<std::string, int64_t>& symbols) {
  const int64_t vmem = symbol(symbols, "VMEM_BYTES", 0, true);
  const int64_t vbase = symbol(symbols, "COPY_VMEM_BASE", 0, false);
  const int64_t vbytes = symbol(symbols, "COPY_VMEM_BYTES", vmem / 2, false);
  if (vbase < 0 || vbytes <= 0 || vbase + vbytes > vmem)
    throw std::invalid_argument("copy: VMEM window [" + std::to_string(vbase) + ", +" + std::to_string(vbytes) +
                                ") is not inside VMEM_BYTES " + std::to_string(vmem));
  const int64_t slot = vbytes / kSlots / 64 * 64;
  if (slot < 64) throw std::invalid_argument("copy: VMEM window of " + std::to_string(vbytes) + " bytes is too small");
  return {vbase, slot};
}

// Step 1: validated, normalised, merged.
std::vector<M> normalise(const std::vector<Move>& moves) {
  std::vector<M> ms;
  for (size_t i = 0; i < moves.size(); ++i) {
    M m = validate(moves[i], i);
    if (!m.rows || !m.rb) continue;
    collapse(m);
    if (!ms.empty() && merge_moves(ms.back(), m)) {
      collapse(ms.back());
      continue;
    }
    ms.push_back(m);
  }
  // The kernel's code has a few instructions per merged move (it is not a loop): a bound on its size and on the
  // time to plan it, far above what models make (a whole ResNet-50, BERT-base or GPT-2 program has at most about
  // 120,000 instructions).
  if (ms.size() > kMaxMergedMoves)
    throw std::invalid_argument(std::to_string(ms.size()) + " moves after merging, more than the " +
                                std::to_string(kMaxMergedMoves) +
                                " a copy kernel takes (its code has a few instructions per move)");
  return ms;
}

// Steps 2 and 3 for one core's moves: the pipelined transfers, from the semaphores' set-up to the last store (no
// halt). Returns the number of groups.
size_t emit_moves(const std::vector<M>& ms, const Window& w, isa::Emitter& out) {
  Planner pl{w.slot, {}, -1};
  pl.open();
  for (const M& m : ms) pl.add(m);
  if (pl.groups.back().pieces.empty()) pl.groups.pop_back();
  Code e(out);
  const isa::Sem s1 = isa::sem(1), s2 = isa::sem(2), s3 = isa::sem(3);
  out.sem_set(s1, kSlots);
  out.sem_set(s2, 0);
  out.sem_set(s3, 0);
  const int G = int(pl.groups.size());
  std::vector<Item> prev;  // stores of the previous group
  auto vslot = [&](int g) { return w.base + int64_t(g % kSlots) * w.slot; };
  auto emit = [&](bool load, const std::vector<Item>& items, size_t i, int g) {
    const Item& it = items[i];
    if (it.sync) return out.dmain_sync({.wait = s3});
    size_t first = 0, last = items.size() - 1;
    while (items[first].sync) ++first;
    const isa::Sem wt = i == first ? (load ? s1 : s2) : isa::Sem{};
    const isa::Sem sg = i == last ? (load ? s2 : s1) : isa::Sem{};
    e.xfer(load, it.x, vslot(g), wt, sg);
  };
  for (int g = 0; g <= G; ++g) {
    std::vector<Item> loads = g < G ? group_items(pl.groups[size_t(g)], true) : std::vector<Item>{};
    bool after = false;  // must the loads follow all of the previous group's stores?
    if (g > 0 && g < G)
      for (const Piece& p : pl.groups[size_t(g)].pieces) after |= p.wait == g - 1;
    const size_t a = loads.size(), b = prev.size();
    size_t i = 0, j = 0;
    if (after) {
      for (; j < b; ++j) emit(false, prev, j, g - 1);
      if (pl.groups[size_t(g - 1)].signal) out.dmaout_sync({.signal = s3});
    }
    // Interleave in proportion: loads of g with the stores of g - 1.
    while (i < a || j < b) {
      if (j >= b || (i < a && i * b <= j * a)) {
        emit(true, loads, i++, g);
      } else {
        emit(false, prev, j++, g - 1);
      }
    }
    if (!after && g > 0 && pl.groups[size_t(g - 1)].signal) out.dmaout_sync({.signal = s3});
    if (g < G) prev = group_items(pl.groups[size_t(g)], false);
  }
  return pl.groups.size();
}

// Several cores: the moves in phases of mutually independent moves (none reads or writes bytes that another of
// its phase writes, exactly for arithmetic row patterns, else assumed to), in order; a phase holds at most
// kPhaseMoves moves, which bounds the checks.
constexpr size_t kPhaseMoves = 1024;
std::vector<std::vector<M>> phases(const std::vector<M>& ms) {
  std::vector<std::vector<M>> out;
  Span dsts, srcs;  // the current phase's (an im2col's moves follow one another: their spans seldom meet)
  for (const M& m : ms) {
    bool fits = !out.empty() && out.back().size() < kPhaseMoves;
    if (fits && (dsts.meets(m.dst_pat()) || dsts.meets(m.src_pat()) || srcs.meets(m.dst_pat())))
      for (const M& q : out.back())
        if (overlaps(m.dst_pat(), q.dst_pat(), true) || overlaps(m.src_pat(), q.dst_pat(), true) ||
            overlaps(m.dst_pat(), q.src_pat(), true)) {
          fits = false;
          break;
        }
    if (!fits) out.emplace_back(), dsts = srcs = Span{};
    out.back().push_back(m);
    dsts.add(m.dst_pat()), srcs.add(m.src_pat());
  }
  return out;
}

// A phase's bytes in move order, cut into `cores` runs of about equal size: core k takes bytes [k * T / cores,
// (k + 1) * T / cores) of the T, as whole rows of a move of several rows (a row goes to the core its first byte
// falls to) and as byte ranges of a single row. Rows of one move are independent (copy.h's contract), so the
// runs are too.
std::vector<std::vector<M>> share(const std::vector<M>& phase, int64_t cores) {
  i128 total = 0;
  for (const M& m : phase) total += i128(m.rows) * m.rb;
  std::vector<std::vector<M>> per(static_cast<size_t>(cores));
  auto cut = [&](int64_t k, i128 at, i128 bytes) {  // core k's first byte within the move, clamped
    const i128 b = i128(k) * total / cores - at;
    return std::clamp<i128>(b, 0, bytes);
  };
  i128 at = 0;
  for (const M& m : phase) {
    const i128 bytes = i128(m.rows) * m.rb;
    for (int64_t k = 0; k < cores; ++k) {
      i128 lo = cut(k, at, bytes), hi = cut(k + 1, at, bytes);
      if (m.rows > 1) {  // whole rows: row r goes to the core its first byte r * rb falls to
        lo = (lo + m.rb - 1) / m.rb, hi = (hi + m.rb - 1) / m.rb;
        if (hi <= lo) continue;
        M part = m;
        part.rows = uint64_t(hi - lo);
        if (m.ss != 0) part.src = m.src + m.ss * int64_t(lo);
        part.dst = m.dst + m.ds * int64_t(lo);
        collapse(part);
        per[size_t(k)].push_back(part);
      } else {
        if (hi <= lo) continue;
        per[size_t(k)].push_back(M{m.src + int64_t(lo), m.dst + int64_t(lo), 1, uint64_t(hi - lo), 0, 0});
      }
    }
    at += bytes;
  }
  return per;
}

}  // namespace

namespace {

// The kernel, and (when `summary` is given) a line that says how it was cut up.
// Whether the normalised moves go as direct transfers within VMEM (build, below: one core, at most DMA_ENGINES
// moves, both sides in the local window, whole rows of at least kMinDirectRow bytes)
bool direct(const std::vector<M>& ms, const std::map<std::string, int64_t>& symbols, int64_t cores) {
  auto local = [](const Pat& p) {  // every byte of the pattern in the local window
    return isa::far_memory(int64_t(p.lo())) == isa::FarMemory::Local &&
           isa::far_memory(int64_t(p.hi() - 1)) == isa::FarMemory::Local;
  };
  return cores == 1 && ms.size() <= size_t(std::max<int64_t>(1, symbol(symbols, "DMA_ENGINES", 1, false))) &&
         std::all_of(ms.begin(), ms.end(), [&](const M& m) {
           return local(m.src_pat()) && local(m.dst_pat()) && (m.rows == 1 || m.rb >= kMinDirectRow);
         });
}

isa::Program build(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols, uint64_t base_pc,
                   const std::string& name, int64_t cores, std::string* summary) {
  if (cores < 1) throw std::invalid_argument("copy: cores must be positive (got " + std::to_string(cores) + ")");
  const Window w = window(symbols);
  const std::vector<M> ms = normalise(moves);
  isa::Emitter e(name, "<copy>/" + name, base_pc);
  auto say = [&](const std::string& how) {
    if (summary)
      *summary = "# " + name + ": " + std::to_string(moves.size()) + " moves, " + std::to_string(ms.size()) +
                 " after merging, " + how + " slots of " + std::to_string(w.slot) + " bytes at VMEM " +
                 std::to_string(w.base) + " (tpusim/kernels/copy.h)\n";
  };
  // A few moves within the core's own VMEM (both sides in the local window, isa::kLocalWindow: a one-core chip's
  // intermediates kept in VMEM): one dma.ld each from the window into VMEM, nothing staged. The queue completes its
  // transfers in order, each moving its bytes when it completes, so a later move reads what an earlier one wrote
  // and its writes win where they overlap (the contract above); the halt waits for the last. Only as many as a
  // queue keeps in flight (DMA_ENGINES): each direct move is a transfer and its registers' li's in the core's
  // issue, where staging packs rows of many moves into one transfer (a padding's 112 moves of 28 rows: 278 cycles
  // staged, 802 direct); and of whole rows of at least kMinDirectRow bytes, where staging makes one side of short
  // strided rows contiguous (RegNetY-400MF's grouped convolutions, whose columns move in rows of 16 to 48 bytes:
  // 1.2% slower with them direct).
  if (direct(ms, symbols, cores)) {
    for (const M& m : ms) {
      e.li(isa::reg(1), m.dst - int64_t(isa::kLocalWindow)), e.li(isa::reg(2), m.src);
      e.li(isa::reg(3), int64_t(m.rows)), e.li(isa::reg(4), int64_t(m.rb));
      e.li(isa::reg(5), m.rows > 1 ? m.ss : 0), e.li(isa::reg(6), m.rows > 1 ? m.ds : 0);
      e.dma_ld(isa::reg(1), isa::reg(2), isa::reg(3), isa::reg(4), isa::reg(5), isa::reg(6));
    }
    e.halt();
    say("as " + std::to_string(ms.size()) + " direct transfers within VMEM, no");
    return e.finish();
  }
  if (cores == 1) {
    const size_t groups = emit_moves(ms, w, e);
    e.halt();
    say(std::to_string(groups) + " groups in " + std::to_string(kSlots));
    return e.finish();
  }
  const std::vector<std::vector<M>> ph = phases(ms);
  say("in " + std::to_string(ph.size()) + " phases of independent moves shared among " + std::to_string(cores) +
      " cores, each through " + std::to_string(kSlots));
  e.set_cores(static_cast<uint32_t>(cores));
  const isa::Reg id = isa::reg(31), k_reg = isa::reg(30), zero = isa::reg(0);
  for (size_t p = 0; p < ph.size(); ++p) {
    if (p > 0) e.barrier();
    const isa::Label end = e.label();
    e.core_id(id);
    const std::vector<std::vector<M>> per = share(ph[p], cores);
    for (int64_t k = 0; k < cores; ++k) {
      if (per[size_t(k)].empty()) continue;
      const isa::Label next = e.label();
      if (k == 0) {
        e.bne(id, zero, next);
      } else {
        e.li(k_reg, k);
        e.bne(id, k_reg, next);
      }
      emit_moves(per[size_t(k)], w, e);
      e.jmp(end);
      e.bind(next);
    }
    e.bind(end);
  }
  e.halt();
  return e.finish();
}

}  // namespace

std::string copy_source(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols,
                        const std::string& name, int64_t cores) {
  std::string summary;
  const isa::Program p = build(moves, symbols, 0, name, cores, &summary);
  return summary + isa::disassemble(p);
}

double copy_estimate(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols, int64_t cores) {
  const std::vector<M> ms = normalise(moves);
  double bytes = 0;
  for (const M& m : ms) bytes += double(m.rows) * double(m.rb);
  const double hbm = double(std::max<int64_t>(1, symbol(symbols, "HBM_BYTES_PER_CYCLE", 1, false)));
  const double vmem = double(std::max<int64_t>(1, symbol(symbols, "VMEM_BYTES_PER_CYCLE", 1, false)));
  const double latency = double(symbol(symbols, "DMA_LATENCY", 0, false));
  const double n = double(std::max<int64_t>(1, cores));
  const double phase_count = cores > 1 ? double(phases(ms).size()) : 1.0;
  const double sync = cores > 1 ? double(symbol(symbols, "SYNC_LATENCY", 0, false)) : 0.0;
  return std::max(2 * bytes / (n * vmem), 2 * bytes / hbm) + phase_count * 2 * latency + (phase_count - 1) * sync;
}

bool copy_direct(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols, int64_t cores) {
  return direct(normalise(moves), symbols, cores);
}

isa::Program copy_kernel(const std::vector<Move>& moves, const std::map<std::string, int64_t>& symbols,
                         uint64_t base_pc, const std::string& name, int64_t cores) {
  return build(moves, symbols, base_pc, name, cores, nullptr);
}

}  // namespace tpusim::kernels
