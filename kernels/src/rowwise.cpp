// The fused row-wise kernel generator (rowwise.h): lowering of the node graph to vector-unit instructions over
// virtual tile registers, liveness-based buffer allocation, tile sizing, and the double-buffered assembly loop.
#include "tpusim/kernels/rowwise.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <sstream>
#include <stdexcept>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/emitter.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::kernels::rowwise {

const char* op_name(Op op) {
  switch (op) {
    case Op::Input: return "Input";
    case Op::Const: return "Const";
    case Op::Add: return "Add";
    case Op::Sub: return "Sub";
    case Op::Mul: return "Mul";
    case Op::Div: return "Div";
    case Op::Max: return "Max";
    case Op::Min: return "Min";
    case Op::Pow: return "Pow";
    case Op::Neg: return "Neg";
    case Op::Abs: return "Abs";
    case Op::Relu: return "Relu";
    case Op::Exp: return "Exp";
    case Op::Recip: return "Recip";
    case Op::Sqrt: return "Sqrt";
    case Op::Rsqrt: return "Rsqrt";
    case Op::Tanh: return "Tanh";
    case Op::Sigmoid: return "Sigmoid";
    case Op::Erf: return "Erf";
    case Op::Gelu: return "Gelu";
    case Op::GeluTanh: return "GeluTanh";
    case Op::Clip: return "Clip";
    case Op::Log: return "Log";
    case Op::Sin: return "Sin";
    case Op::Cos: return "Cos";
    case Op::Floor: return "Floor";
    case Op::Ceil: return "Ceil";
    case Op::Round: return "Round";
    case Op::Sign: return "Sign";
    case Op::Softplus: return "Softplus";
    case Op::Mish: return "Mish";
    case Op::RowSum: return "RowSum";
    case Op::RowMax: return "RowMax";
    case Op::RowMean: return "RowMean";
  }
  return "?";
}

int Program::input(int index) {
  Node n;
  n.op = Op::Input;
  n.input = index;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}
int Program::constant(float v) {
  Node n;
  n.op = Op::Const;
  n.value = v;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}
int Program::unary(Op op, int a) {
  Node n;
  n.op = op;
  n.args = {a};
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}
int Program::binary(Op op, int a, int b) {
  Node n;
  n.op = op;
  n.args = {a, b};
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}
int Program::pow(int a, float exponent) {
  Node n;
  n.op = Op::Pow;
  n.args = {a};
  n.value = exponent;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}
int Program::clip(int a, float lo, float hi) {
  Node n;
  n.op = Op::Clip;
  n.args = {a};
  n.lo = lo;
  n.hi = hi;
  nodes.push_back(n);
  return static_cast<int>(nodes.size()) - 1;
}

namespace {

using isa::DType;

[[noreturn]] void fail(const std::string& m) { throw std::invalid_argument("rowwise: " + m); }

uint64_t align64(uint64_t x) { return (x + 63) / 64 * 64; }

enum class Kind { Full, Row, Scalar };

// A value during lowering: a virtual tile register (Full or Row) or a host-known scalar.
struct V {
  Kind k = Kind::Scalar;
  int r = -1;
  float s = 0;
};

// Lowered vector-unit instructions over virtual registers.
enum class PK {
  Bin,     // vpu.<mn> d, a, b, n            (same kind)
  RowB,    // vpu.<mn>row d, a, b: a Full, b Row
  Bcast1,  // vpu.<mn>row with rows = 1: d = a op constant c over n elements
  Un,      // vpu.<mn> d, a, n
  Red,     // vpu.rsum/rmax d (Row), a (Full)
  Zero,    // vpu.rsum over zero columns: d = 0
  Cast,    // vpu.cast d (ddt), a (sdt)
  Dot,     // vpu.rdot d (Row), a (Full, sdt), b (Full, f32): rsum(mul(a, b)) in one pass (fold_dots)
  MAdd     // vpu.madd d, a, b, e, n: a * b + e in one pass (same kind; fold_madds)
};
struct POp {
  PK k = PK::Bin;
  std::string mn;
  int d = -1, a = -1, b = -1;
  int e = -1;  // MAdd: the addend
  float c = 0;
  DType sdt = DType::F32, ddt = DType::F32;
  bool scaled = false;  // Cast: x f32(a) * c (vpu.cast's scale_en), then cast to ddt
  int64_t chunk = 0;  // Red rsum or Dot in two steps: sums of `chunk` columns into buffer `scratch`, then their sum
  int scratch = -1;
};

struct Buf {
  enum Space { Pool, SlotIn, SlotOut, Inv, InvStage } space = Pool;
  Kind kind = Kind::Full;
  DType dt = DType::F32;
  bool reusable = false;  // may hold temporaries once its value is dead (f32 pool and f32 input staging)
  uint64_t off = 0;       // absolute (Pool, Inv, InvStage) or within a slot (SlotIn, SlotOut)
  int64_t width = 0;      // elements per row when not C (Full) or 1 (Row): the partial sums' scratch
  uint64_t bytes(int64_t T, int64_t C) const {
    return align64(static_cast<uint64_t>(T) * static_cast<uint64_t>(width ? width : kind == Kind::Full ? C : 1) *
                   static_cast<uint64_t>(isa::dtype_size(dt)));
  }
  bool slot() const { return space == SlotIn || space == SlotOut; }
};

struct VReg {
  Kind k = Kind::Full;
  int buf = -1;
};

struct Lowered {
  std::vector<VReg> vr;
  std::vector<Buf> bufs;
  std::vector<POp> ops;
  std::vector<float> consts;    // the constant table: [0] = 0, [1] = 1, then the rest
  std::vector<int> in_stage;    // per input: its staging buffer (slot, or invariant), -1 when unused
  std::vector<int> in_inv_f32;  // per invariant non-f32 input: its f32 buffer
  std::vector<int> out_buf;     // per output: its slot staging buffer
  int full_temps = 0, row_temps = 0;

  int const_index(float c) const {
    for (size_t i = 0; i < consts.size(); ++i)
      if (isa::bits_from_f32(consts[i]) == isa::bits_from_f32(c)) return static_cast<int>(i);
    return -1;
  }
  // Bytes of VMEM the buffers take with tiles of T rows and `slots` staging slots (constant table included).
  uint64_t bytes(int64_t T, int64_t C, int slots = 2) const {
    uint64_t total = align64(4 * consts.size()), slot = 0;
    for (const Buf& b : bufs) (b.slot() ? slot : total) += b.bytes(T, C);
    return total + static_cast<uint64_t>(slots) * slot;
  }
};

// The vector instruction `vpu.MN` of a lowering, its operands in table order (wait and signal none).
void vector_instr(isa::Emitter& e, const std::string& mn, std::initializer_list<int64_t> fields,
                  isa::Where at = {}) {
  const isa::InstrDesc* d = isa::describe_mnemonic("vpu." + mn);
  if (!d) fail("no vector instruction vpu." + mn);
  isa::Instr in{d->op, {}};
  size_t i = 0;
  for (int64_t f : fields) in.f[i++] = f;
  e.instr(in, at);
}

bool is_periodic(const Program& p, const Input& in) { return in.period > 0 && in.period < p.rows; }

class Lowerer {
 public:
  // madd: fold a product and the add that alone reads it into one vpu.madd (fold_madds); not for an epilogue,
  // whose steps (Epilogue::Step) take two operands
  Lowerer(const Program& p, const std::vector<bool>& inv, bool madd = true) : p_(p), inv_(inv), madd_(madd) {}

  Lowered run() {
    L_.consts = {0.0f, 1.0f};
    L_.in_stage.assign(p_.inputs.size(), -1);
    L_.in_inv_f32.assign(p_.inputs.size(), -1);
    in_val_.assign(p_.inputs.size(), V{});
    in_done_.assign(p_.inputs.size(), false);
    // An int8 copy (an i8 output of x * c, c a constant) of a value an earlier output stores as bf16: cast from
    // that output's staging buffer with the scale, one pass, so that the copy quantises the value as stored (as a
    // whole-chip GEMM's residual with q does: GemmChip::residual). The product itself is then not computed.
    std::vector<int> copy_of(p_.outputs.size(), -1);
    std::vector<float> copy_scale(p_.outputs.size(), 0.0f);
    for (size_t i = 0; i < p_.outputs.size(); ++i) copy_of[i] = int8_copy_of(p_, i, &copy_scale[i], true);
    // Only the nodes the outputs need.
    std::vector<bool> need(p_.nodes.size(), false);
    for (size_t i = 0; i < p_.outputs.size(); ++i)
      if (copy_of[i] < 0) need[static_cast<size_t>(p_.outputs[i].node)] = true;
    for (size_t i = p_.nodes.size(); i-- > 0;)
      if (need[i])
        for (int a : p_.nodes[i].args) need[static_cast<size_t>(a)] = true;
    std::vector<V> val(p_.nodes.size());
    for (size_t i = 0; i < p_.nodes.size(); ++i)
      if (need[i]) val[i] = node(p_.nodes[i], val);
    std::vector<int> direct;  // values computed directly into an output's staging buffer
    std::vector<int> staged(p_.outputs.size(), -1);  // per output: the register of its staging buffer
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const Output& o = p_.outputs[i];
      if (copy_of[i] >= 0) {  // the int8 copy of an earlier output, from its staging buffer
        const int from = staged[static_cast<size_t>(copy_of[i])];
        Buf b;
        b.space = Buf::SlotOut;
        b.kind = L_.vr[static_cast<size_t>(from)].k;
        b.dt = o.dtype;
        const int ob = newbuf(b);
        L_.out_buf.push_back(ob);
        POp c;
        c.k = PK::Cast;
        c.mn = "cast";
        c.a = from;
        c.sdt = DType::BF16;
        c.ddt = o.dtype;
        c.scaled = true;
        c.c = copy_scale[i];
        c.d = staged[i] = newv(b.kind, ob);
        L_.ops.push_back(c);
        continue;
      }
      V v = val[static_cast<size_t>(o.node)];
      if (v.k == Kind::Scalar) v = bcast(v, Kind::Full);
      Buf b;
      b.space = Buf::SlotOut;
      b.kind = v.k;
      b.dt = o.dtype;
      const int ob = newbuf(b);
      L_.out_buf.push_back(ob);
      if (o.dtype == DType::F32 && L_.vr[static_cast<size_t>(v.r)].buf < 0) {
        L_.vr[static_cast<size_t>(v.r)].buf = ob;  // computed directly into its staging buffer
        direct.push_back(v.r);
        staged[i] = v.r;
      } else {
        POp c;
        c.k = PK::Cast;
        c.mn = "cast";
        c.a = v.r;
        c.sdt = DType::F32;
        c.ddt = o.dtype;
        c.d = staged[i] = newv(v.k, ob);
        L_.ops.push_back(c);
      }
    }
    fold_dots(direct);
    fold_selects(direct);
    if (madd_) fold_madds(direct);
    for (const POp& o : L_.ops)
      if (o.k == PK::Bcast1 && L_.const_index(o.c) < 0) L_.consts.push_back(o.c);
    allocate();
    return std::move(L_);
  }

  // Per value: the instructions that read it (an output computed directly into its staging, `direct`, counts as
  // one, so that it is never folded away) and the instruction that defines it (-1: none).
  struct Uses {
    std::vector<int> count, def;
  };
  Uses uses_of(const std::vector<int>& direct) const {
    Uses u{std::vector<int>(L_.vr.size(), 0), std::vector<int>(L_.vr.size(), -1)};
    for (int v : direct) ++u.count[static_cast<size_t>(v)];
    for (size_t k = 0; k < L_.ops.size(); ++k) {
      u.def[static_cast<size_t>(L_.ops[k].d)] = static_cast<int>(k);
      for (int a : {L_.ops[k].a, L_.ops[k].b, L_.ops[k].e})
        if (a >= 0) ++u.count[static_cast<size_t>(a)];
    }
    return u;
  }
  // The instructions without the `dead` ones
  void drop(const std::vector<bool>& dead) {
    std::vector<POp> kept;
    for (size_t k = 0; k < L_.ops.size(); ++k)
      if (!dead[k]) kept.push_back(std::move(L_.ops[k]));
    L_.ops = std::move(kept);
  }

  // A row sum of products, rsum(mul(x, y)), whose product nothing else reads, is one vpu.rdot: one pass of the
  // vector unit where there were two (a matrix-vector product's rows, a variance's squares). So is, with it, the
  // cast to f32 of a loaded operand (bf16 or i8) that only the product reads: three passes to one. vpu.rdot is
  // defined as vpu.cast, vpu.mul and vpu.rsum in turn (isa.def), so the bits are the same.
  void fold_dots(const std::vector<int>& direct) {
    const Uses u = uses_of(direct);
    const std::vector<int>& uses = u.count;
    const std::vector<int>& def = u.def;
    std::vector<bool> dead(L_.ops.size(), false);
    for (POp& r : L_.ops) {
      if (r.k != PK::Red || r.mn != "rsum" || uses[static_cast<size_t>(r.a)] != 1) continue;
      const int m = def[static_cast<size_t>(r.a)];
      if (m < 0 || L_.ops[static_cast<size_t>(m)].k != PK::Bin || L_.ops[static_cast<size_t>(m)].mn != "mul") continue;
      const POp& mul = L_.ops[static_cast<size_t>(m)];
      POp dot = r;
      dot.k = PK::Dot;
      dot.mn = "rdot";
      dot.a = mul.a, dot.b = mul.b, dot.sdt = DType::F32;
      for (int side = 0; side < 2 && dot.a != dot.b; ++side) {  // a cast folded in, on either side
        const int v = side == 0 ? dot.a : dot.b, c = def[static_cast<size_t>(v)];
        if (c < 0 || uses[static_cast<size_t>(v)] != 1) continue;
        const POp& cast = L_.ops[static_cast<size_t>(c)];
        if (cast.k != PK::Cast || cast.ddt != DType::F32 || (cast.sdt != DType::BF16 && cast.sdt != DType::I8))
          continue;
        if (side == 1) std::swap(dot.a, dot.b);
        dot.a = cast.a, dot.sdt = cast.sdt;
        dead[static_cast<size_t>(c)] = true;
        break;
      }
      dead[static_cast<size_t>(m)] = true;
      r = dot;
    }
    drop(dead);
  }

  // A sum of a product and another value of its kind, add(mul(x, y), z), whose product nothing else reads, is one
  // vpu.madd: one pass of the vector unit where there were two (a depthwise convolution's taps accumulated, a layer
  // norm's scale and shift). vpu.madd is defined as vpu.mul and vpu.add in turn (isa.def), so the bits are the same.
  void fold_madds(const std::vector<int>& direct) {
    const Uses u = uses_of(direct);
    const std::vector<int>& uses = u.count;
    const std::vector<int>& def = u.def;
    std::vector<bool> dead(L_.ops.size(), false);
    auto product = [&](int v) {  // the f32 vpu.mul that alone defines v and is not already folded, or -1
      const int m = v >= 0 ? def[static_cast<size_t>(v)] : -1;
      if (m < 0 || dead[static_cast<size_t>(m)] || uses[static_cast<size_t>(v)] != 1) return -1;
      const POp& o = L_.ops[static_cast<size_t>(m)];
      return o.k == PK::Bin && o.mn == "mul" && o.sdt == DType::F32 ? m : -1;
    };
    for (POp& r : L_.ops) {
      if (r.k != PK::Bin || r.mn != "add" || r.sdt != DType::F32) continue;
      int m = product(r.a), addend = r.b;
      if (m < 0) m = product(r.b), addend = r.a;
      if (m < 0) continue;
      const POp& mul = L_.ops[static_cast<size_t>(m)];
      r.k = PK::MAdd, r.mn = "madd", r.a = mul.a, r.b = mul.b, r.e = addend;
      dead[static_cast<size_t>(m)] = true;
    }
    drop(dead);
  }

  // A maximum or minimum of bf16 values is one of them, and bf16 -> f32 is exact: a tree of vpu.max and vpu.min
  // whose leaves are bf16 inputs as loaded, each cast to f32 for it alone, and whose root only a cast to a bf16
  // output reads (a max pool's taps), computes on the bf16 values themselves (vpu.max bf16), its root into the
  // output's staging: the same bits (NaN in, NaN out), with no casts (a 3 x 3 max pool: 18 passes to 8).
  void fold_selects(const std::vector<int>& direct) {
    const Uses u = uses_of(direct);
    const std::vector<int>& uses = u.count;
    const std::vector<int>& def = u.def;
    auto select = [&](int k) {
      return k >= 0 && L_.ops[static_cast<size_t>(k)].k == PK::Bin &&
             (L_.ops[static_cast<size_t>(k)].mn == "max" || L_.ops[static_cast<size_t>(k)].mn == "min");
    };
    auto loaded_bf16 = [&](int k) {  // a cast to f32 of a bf16 input's staging slot
      if (k < 0) return false;
      const POp& c = L_.ops[static_cast<size_t>(k)];
      if (c.k != PK::Cast || c.scaled || c.sdt != DType::BF16 || c.ddt != DType::F32) return false;
      const int b = L_.vr[static_cast<size_t>(c.a)].buf;
      return b >= 0 && L_.bufs[static_cast<size_t>(b)].space == Buf::SlotIn;
    };
    std::vector<bool> dead(L_.ops.size(), false);
    for (POp& out : L_.ops) {
      if (out.k != PK::Cast || out.scaled || out.sdt != DType::F32 || out.ddt != DType::BF16) continue;
      const int root = def[static_cast<size_t>(out.a)];
      if (!select(root) || uses[static_cast<size_t>(out.a)] != 1) continue;
      std::vector<int> tree{root}, leaves;
      bool ok = true;
      for (size_t i = 0; i < tree.size() && ok; ++i) {
        const POp& o = L_.ops[static_cast<size_t>(tree[i])];
        for (int a : {o.a, o.b}) {
          const int k = def[static_cast<size_t>(a)];
          if (uses[static_cast<size_t>(a)] != 1) ok = false;
          else if (loaded_bf16(k)) leaves.push_back(k);
          else if (select(k)) tree.push_back(k);
          else ok = false;
        }
      }
      if (!ok) continue;
      for (int k : leaves) dead[static_cast<size_t>(k)] = true;
      for (int k : tree) {
        POp& o = L_.ops[static_cast<size_t>(k)];
        for (int* a : {&o.a, &o.b}) {
          const int cast = def[static_cast<size_t>(*a)];
          if (loaded_bf16(cast)) *a = L_.ops[static_cast<size_t>(cast)].a;  // the staging the cast read
        }
        o.sdt = DType::BF16;  // a Bin's type (F32 otherwise)
      }
      L_.ops[static_cast<size_t>(root)].d = out.d;  // into the output's staging
      dead[static_cast<size_t>(&out - L_.ops.data())] = true;
    }
    drop(dead);
  }

 private:
  const Program& p_;
  const std::vector<bool>& inv_;
  bool madd_ = true;
  Lowered L_;
  std::vector<V> in_val_;
  std::vector<bool> in_done_;
  int scratch_ = -1;

  // vpu.rsum adds a row in order, so its f32 error grows with the row's length. Long rows (C >= 1024) with a
  // divisor K of C near sqrt(C) are summed in two steps instead: the sums of C/K pieces of K columns, then their
  // sum (about 2 sqrt(C) terms in sequence instead of C; one more instruction, the same element count).
  static int64_t sum_chunk(int64_t C) {
    if (C < 1024) return 0;
    const auto root = static_cast<int64_t>(std::sqrt(static_cast<double>(C)));
    for (int64_t d = 0; d <= root / 2; ++d)
      for (int64_t k : {root - d, root + d})
        if (k >= 16 && C % k == 0 && C / k >= 16) return k;
    return 0;
  }

  int newv(Kind k, int buf = -1) {
    L_.vr.push_back(VReg{k, buf});
    return static_cast<int>(L_.vr.size()) - 1;
  }
  int newbuf(const Buf& b) {
    L_.bufs.push_back(b);
    return static_cast<int>(L_.bufs.size()) - 1;
  }
  V push(POp o, Kind k) {
    o.d = newv(k);
    L_.ops.push_back(o);
    return V{k, o.d, 0};
  }

  static bool sc(V v) { return v.k == Kind::Scalar; }
  static V S(float x) { return V{Kind::Scalar, -1, x}; }
  static Kind join(V a, V b) {
    if (a.k == Kind::Full || b.k == Kind::Full) return Kind::Full;
    if (a.k == Kind::Row || b.k == Kind::Row) return Kind::Row;
    return Kind::Scalar;
  }

  // ---- primitives (each folds all-scalar operands on the host) ----
  V vv(const char* mn, V a, V b) {
    POp o;
    o.k = PK::Bin;
    o.mn = mn;
    o.a = a.r;
    o.b = b.r;
    return push(o, a.k);
  }
  V rowb(const char* mn, V full, V row) {
    POp o;
    o.k = PK::RowB;
    o.mn = mn;
    o.a = full.r;
    o.b = row.r;
    return push(o, Kind::Full);
  }
  V b1(const char* mn, V a, float c) {
    POp o;
    o.k = PK::Bcast1;
    o.mn = mn;
    o.a = a.r;
    o.c = c;
    return push(o, a.k);
  }
  V un(const char* mn, V a) {
    POp o;
    o.k = PK::Un;
    o.mn = mn;
    o.a = a.r;
    return push(o, a.k);
  }
  V zero(Kind k) {
    POp o;
    o.k = PK::Zero;
    o.mn = "rsum";
    return push(o, k);
  }
  // A Full (or Row) copy of a Row or scalar value: 0 + value, broadcast.
  V bcast(V a, Kind k) {
    if (a.k == k) return a;
    V z = zero(k);
    if (sc(a)) return b1("addrow", z, a.s);
    return rowb("addrow", z, a);
  }

  V add(V a, V b) {
    if (sc(a) && sc(b)) return S(a.s + b.s);
    if (sc(a)) std::swap(a, b);
    if (sc(b)) return b.s == 0.0f ? a : b1("addrow", a, b.s);
    if (a.k == b.k) return vv("add", a, b);
    if (a.k == Kind::Row) std::swap(a, b);
    return rowb("addrow", a, b);
  }
  V mul(V a, V b) {
    if (sc(a) && sc(b)) return S(a.s * b.s);
    if (sc(a)) std::swap(a, b);
    if (sc(b)) return b.s == 1.0f ? a : b1("mulrow", a, b.s);
    if (a.k == b.k) return vv("mul", a, b);
    if (a.k == Kind::Row) std::swap(a, b);
    return rowb("mulrow", a, b);
  }
  V neg(V a) { return sc(a) ? S(-a.s) : b1("mulrow", a, -1.0f); }
  V sub(V a, V b) {
    if (sc(a) && sc(b)) return S(a.s - b.s);
    if (sc(b)) return b.s == 0.0f ? a : b1("subrow", a, b.s);
    if (sc(a)) return b1("addrow", neg(b), a.s);  // c - x = (-x) + c
    if (a.k == b.k) return vv("sub", a, b);
    if (a.k == Kind::Full) return rowb("subrow", a, b);
    return rowb("addrow", neg(b), a);  // row - full = (-full) + row
  }
  V maxmin(bool is_max, V a, V b) {
    if (sc(a) && sc(b)) return S(is_max ? std::max(a.s, b.s) : std::min(a.s, b.s));
    const Kind k = join(a, b);
    return vv(is_max ? "max" : "min", bcast(a, k), bcast(b, k));
  }
  V relu(V a) { return sc(a) ? S(std::max(a.s, 0.0f)) : un("relu", a); }
  V exp(V a) { return sc(a) ? S(std::exp(a.s)) : un("exp", a); }
  V recip(V a) { return sc(a) ? S(1.0f / a.s) : un("recip", a); }
  V rsqrt(V a) { return sc(a) ? S(1.0f / std::sqrt(a.s)) : un("rsqrt", a); }
  V sqrt(V a) { return sc(a) ? S(std::sqrt(a.s)) : recip(rsqrt(a)); }  // recip(inf) = 0 at x = 0
  V div(V a, V b) { return sc(a) && sc(b) ? S(a.s / b.s) : mul(a, recip(b)); }
  V abs(V a) { return sc(a) ? S(std::fabs(a.s)) : maxmin(true, a, neg(a)); }
  // vpu.log, sin, cos, floor, ceil, round; a scalar folds with the same function (isa/numerics.h).
  V un_fn(const char* mn, float (*f)(float), V a) { return sc(a) ? S(f(a.s)) : un(mn, a); }
  V sign(V x) {  // clip(x * 2^127 * 2^127, -1, 1): the smallest subnormal times 2^254 is 2^105
    if (sc(x)) return S(x.s > 0 ? 1.0f : x.s < 0 ? -1.0f : x.s);
    return maxmin(false, maxmin(true, mul(mul(x, S(0x1p127f)), S(0x1p127f)), S(-1)), S(1));
  }
  V softplus(V x) {  // max(x, 0) + log(1 + exp(-|x|)), -|x| = min(x, -x)
    if (sc(x)) return S(std::max(x.s, 0.0f) + isa::vpu_log(1.0f + std::exp(-std::fabs(x.s))));
    V e = exp(maxmin(false, x, neg(x)));
    return add(relu(x), un_fn("log", isa::vpu_log, add(e, S(1))));
  }
  V mish(V x) {  // x tanh(log(1 + e)) = x n / (n + 2), n = e (e + 2), e = exp(min(x, 20))
    if (sc(x)) {
      const float e = std::exp(std::min(x.s, 20.0f)), n = e * (e + 2);
      return S(x.s * (n / (n + 2)));
    }
    V e = exp(maxmin(false, x, S(20)));
    V n = mul(e, add(e, S(2)));
    return mul(x, mul(n, recip(add(n, S(2)))));
  }
  V sigmoid(V x) { return sc(x) ? S(1.0f / (1.0f + std::exp(-x.s))) : recip(add(exp(neg(x)), S(1))); }
  V tanh(V x) {
    if (sc(x)) return S(std::tanh(x.s));
    // 1 - 2 / (exp(2x) + 1): exp overflowing to inf gives 1, underflowing to 0 gives -1.
    return add(mul(recip(add(exp(mul(x, S(2))), S(1))), S(-2)), S(1));
  }
  V erf(V x) { return un_fn("erf", isa::vpu_erf, x); }
  // 0.5 x (1 + erf(x / sqrt2)) = 0.5 x erfc(-x / sqrt2): vpu.erfc keeps its relative accuracy where the result is
  // far below x (x << 0: erfc(4.24) = 2.0e-9 at x = -6, where 1 + erf rounds to 0 in f32), and costs 4 vector
  // instructions (x -1/sqrt2, erfc, x 0.5, x x). +inf gives +inf; -inf gives NaN (0 x -inf).
  V gelu(V x) {
    if (sc(x)) return S(0.5f * x.s * isa::vpu_erfc(x.s * static_cast<float>(-1.0 / std::sqrt(2.0))));
    return mul(mul(un("erfc", mul(x, S(static_cast<float>(-1.0 / std::sqrt(2.0))))), S(0.5f)), x);
  }
  V gelu_tanh(V x) {
    // 0.5x(1 + tanh(u)) = x * sigmoid(2u), u = sqrt(2/pi) * (x + 0.044715 x^3): no cancellation for x << 0.
    const float k = 0.79788456080286536f;  // sqrt(2 / pi)
    V inner = add(x, mul(mul(mul(x, x), x), S(0.044715f)));
    return mul(x, recip(add(exp(mul(inner, S(-2.0f * k))), S(1))));
  }
  V pow(V x, float e) {
    if (e == 1.0f) return x;
    if (e == 2.0f) return mul(x, x);
    if (e == 3.0f) return mul(mul(x, x), x);
    if (e == 0.5f) return sqrt(x);
    if (e == -1.0f) return recip(x);
    if (e == -0.5f) return rsqrt(x);
    std::ostringstream s;
    s << "Pow exponent " << e << " is not supported (only 1, 2, 3, 0.5, -1, -0.5)";
    fail(s.str());
  }
  V reduce(const char* mn, V a, bool mean) {
    if (sc(a)) return mean || std::string(mn) == "rmax" ? a : S(a.s * static_cast<float>(p_.cols));
    if (a.k == Kind::Row) return a;  // a reduction over a last axis of one element
    POp o;
    o.k = PK::Red;
    o.mn = mn;
    o.a = a.r;
    if (std::string(mn) == "rsum" && (o.chunk = sum_chunk(p_.cols)) > 0) {
      if (scratch_ < 0) {
        Buf b;
        b.space = Buf::Pool;  // a fixed buffer, used only within this instruction pair
        b.kind = Kind::Row;
        b.width = p_.cols / o.chunk;
        scratch_ = newbuf(b);
      }
      o.scratch = scratch_;
    }
    V r = push(o, Kind::Row);
    return mean ? mul(r, S(static_cast<float>(1.0 / static_cast<double>(p_.cols)))) : r;
  }

  V input(int i) {
    const size_t u = static_cast<size_t>(i);
    if (in_done_[u]) return in_val_[u];
    const Input& in = p_.inputs[u];
    const Kind k = in.per_row ? Kind::Row : Kind::Full;
    Buf stage;
    stage.kind = k;
    stage.dt = in.dtype;
    V v;
    if (inv_[u]) {
      stage.space = in.dtype == DType::F32 ? Buf::Inv : Buf::InvStage;
      const int sb = newbuf(stage);
      L_.in_stage[u] = sb;
      int fb = sb;
      if (in.dtype != DType::F32) {
        Buf f;
        f.space = Buf::Inv;
        f.kind = k;
        fb = newbuf(f);
        L_.in_inv_f32[u] = fb;
      }
      v = V{k, newv(k, fb), 0};
    } else {
      stage.space = Buf::SlotIn;
      stage.reusable = in.dtype == DType::F32;
      const int sb = newbuf(stage);
      L_.in_stage[u] = sb;
      const int sv = newv(k, sb);
      if (in.dtype == DType::F32) {
        v = V{k, sv, 0};
      } else {
        POp c;
        c.k = PK::Cast;
        c.mn = "cast";
        c.a = sv;
        c.sdt = in.dtype;
        c.ddt = DType::F32;
        v = push(c, k);
      }
    }
    in_done_[u] = true;
    return in_val_[u] = v;
  }

  V node(const Node& n, const std::vector<V>& val) {
    auto arg = [&](size_t i) { return val[static_cast<size_t>(n.args[i])]; };
    switch (n.op) {
      case Op::Input: return input(n.input);
      case Op::Const: return S(n.value);
      case Op::Add: return add(arg(0), arg(1));
      case Op::Sub: return sub(arg(0), arg(1));
      case Op::Mul: return mul(arg(0), arg(1));
      case Op::Div: return div(arg(0), arg(1));
      case Op::Max: return maxmin(true, arg(0), arg(1));
      case Op::Min: return maxmin(false, arg(0), arg(1));
      case Op::Pow: return pow(arg(0), n.value);
      case Op::Neg: return neg(arg(0));
      case Op::Abs: return abs(arg(0));
      case Op::Relu: return relu(arg(0));
      case Op::Exp: return exp(arg(0));
      case Op::Recip: return recip(arg(0));
      case Op::Sqrt: return sqrt(arg(0));
      case Op::Rsqrt: return rsqrt(arg(0));
      case Op::Tanh: return tanh(arg(0));
      case Op::Sigmoid: return sigmoid(arg(0));
      case Op::Erf: return erf(arg(0));
      case Op::Gelu: return gelu(arg(0));
      case Op::GeluTanh: return gelu_tanh(arg(0));
      case Op::Clip: return maxmin(false, maxmin(true, arg(0), S(n.lo)), S(n.hi));
      case Op::Log: return un_fn("log", isa::vpu_log, arg(0));
      case Op::Sin: return un_fn("sin", isa::vpu_sin, arg(0));
      case Op::Cos: return un_fn("cos", isa::vpu_cos, arg(0));
      case Op::Floor: return un_fn("floor", isa::vpu_floor, arg(0));
      case Op::Ceil: return un_fn("ceil", isa::vpu_ceil, arg(0));
      case Op::Round: return un_fn("round", isa::vpu_round, arg(0));
      case Op::Sign: return sign(arg(0));
      case Op::Softplus: return softplus(arg(0));
      case Op::Mish: return mish(arg(0));
      case Op::RowSum: return reduce("rsum", arg(0), false);
      case Op::RowMax: return reduce("rmax", arg(0), false);
      case Op::RowMean: return reduce("rsum", arg(0), true);
    }
    fail("unknown op");
  }

  // Linear scan over the lowered instructions: a value's buffer is freed after its last use; a result takes,
  // in place, the buffer of an operand that dies at that instruction, else a free buffer, else a new one.
  void allocate() {
    std::vector<int> last(L_.vr.size(), -1);
    for (size_t k = 0; k < L_.ops.size(); ++k)
      for (int a : {L_.ops[k].a, L_.ops[k].b, L_.ops[k].e})
        if (a >= 0) last[static_cast<size_t>(a)] = static_cast<int>(k);
    std::vector<int> free_full, free_row;
    auto reusable = [&](int v) {
      const int b = L_.vr[static_cast<size_t>(v)].buf;
      return b >= 0 && L_.bufs[static_cast<size_t>(b)].reusable;
    };
    auto release = [&](int v) {
      const VReg& r = L_.vr[static_cast<size_t>(v)];
      (r.k == Kind::Full ? free_full : free_row).push_back(r.buf);
    };
    for (size_t k = 0; k < L_.ops.size(); ++k) {
      const POp& o = L_.ops[k];
      VReg& d = L_.vr[static_cast<size_t>(o.d)];
      if (d.buf < 0) {
        for (int a : {o.a, o.b, o.e})
          if (a >= 0 && last[static_cast<size_t>(a)] == static_cast<int>(k) && reusable(a) &&
              L_.vr[static_cast<size_t>(a)].k == d.k) {
            d.buf = L_.vr[static_cast<size_t>(a)].buf;
            break;
          }
        if (d.buf < 0) {
          auto& fl = d.k == Kind::Full ? free_full : free_row;
          if (!fl.empty()) {
            d.buf = fl.back();
            fl.pop_back();
          } else {
            Buf b;
            b.space = Buf::Pool;
            b.kind = d.k;
            b.reusable = true;
            d.buf = newbuf(b);
            ++(d.k == Kind::Full ? L_.full_temps : L_.row_temps);
          }
        }
      }
      const int dbuf = d.buf;
      for (int a : {o.a, o.b, o.e})
        if (a >= 0 && last[static_cast<size_t>(a)] == static_cast<int>(k) && reusable(a) &&
            L_.vr[static_cast<size_t>(a)].buf != dbuf) {
          last[static_cast<size_t>(a)] = -2;  // released once, even when it is both operands
          release(a);
        }
      if (last[static_cast<size_t>(o.d)] == -1 && reusable(o.d)) release(o.d);  // never read
    }
  }
};

int64_t lcm64(int64_t a, int64_t b) { return a / std::gcd(a, b) * b; }

int64_t symbol(const std::map<std::string, int64_t>& symbols, const char* name) {
  auto it = symbols.find(name);
  if (it == symbols.end()) fail(std::string("symbol ") + name + " is missing (pass sim::kernel_symbols)");
  return it->second;
}

void validate(const Program& p) {
  if (p.rows < 1 || p.cols < 1)
    fail("rows and cols must be positive (got " + std::to_string(p.rows) + " x " + std::to_string(p.cols) + ")");
  if (p.outputs.empty()) fail("the program has no outputs");
  if (p.cores < 1) fail("cores must be positive (got " + std::to_string(p.cores) + ")");
  if (p.slots != 0 && p.slots != 2 && p.slots != 3)
    fail("slots must be 2, 3 or 0 (the generator's choice), not " + std::to_string(p.slots));
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const Input& in = p.inputs[i];
    if (in.period < 0) fail("input " + std::to_string(i) + " has a negative period");
    if (in.stride < 0 || (in.stride > 0 && (in.per_row || is_periodic(p, in) ||
                                            in.stride % static_cast<int64_t>(isa::dtype_size(in.dtype)) != 0)))
      fail("input " + std::to_string(i) + ": a row stride (" + std::to_string(in.stride) +
           " bytes) needs a Full input of whole rows (no period) and whole elements");
  }
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    const Node& n = p.nodes[i];
    size_t arity = 1;
    switch (n.op) {
      case Op::Input:
      case Op::Const: arity = 0; break;
      case Op::Add:
      case Op::Sub:
      case Op::Mul:
      case Op::Div:
      case Op::Max:
      case Op::Min: arity = 2; break;
      default: break;
    }
    const std::string what = "node " + std::to_string(i) + " (" + op_name(n.op) + ")";
    if (n.args.size() != arity)
      fail(what + " takes " + std::to_string(arity) + " arguments, has " + std::to_string(n.args.size()));
    for (int a : n.args)
      if (a < 0 || static_cast<size_t>(a) >= i) fail(what + " refers to node " + std::to_string(a) + ", not an earlier one");
    if (n.op == Op::Input && (n.input < 0 || static_cast<size_t>(n.input) >= p.inputs.size()))
      fail(what + " refers to input " + std::to_string(n.input) + " of " + std::to_string(p.inputs.size()));
  }
  for (size_t i = 0; i < p.outputs.size(); ++i)
    if (p.outputs[i].node < 0 || static_cast<size_t>(p.outputs[i].node) >= p.nodes.size())
      fail("output " + std::to_string(i) + " names node " + std::to_string(p.outputs[i].node) + ", which does not exist (" +
           (p.nodes.empty() ? std::string("the plan has no nodes") : "nodes are 0 to " + std::to_string(p.nodes.size() - 1)) + ")");
}

struct Built {
  Plan plan;
  Lowered low;
  uint64_t base = 0;  // VMEM region start
  uint64_t const_base = 0, slot_base = 0, slot_bytes = 0;
};

Built build(const Program& p, const std::map<std::string, int64_t>& symbols) {
  validate(p);
  const auto vmem_total = static_cast<uint64_t>(symbol(symbols, "VMEM_BYTES"));
  const int64_t width = std::max<int64_t>(1, symbol(symbols, "VPU_WIDTH"));
  if (p.vmem_base % 64 != 0) fail("vmem_base must be a multiple of 64");
  if (p.vmem_base > vmem_total) fail("vmem_base lies past VMEM_BYTES");
  const uint64_t budget = p.vmem_bytes ? p.vmem_bytes : vmem_total - p.vmem_base;
  if (p.vmem_base + budget > vmem_total) fail("the VMEM region [vmem_base, +vmem_bytes) lies past VMEM_BYTES");
  const int64_t R = p.rows, C = p.cols;

  // Worst case over "every periodic input loaded per tile" and "every one loaded once".
  std::vector<bool> none(p.inputs.size(), false), all(p.inputs.size(), false);
  std::vector<int64_t> periods;
  for (size_t i = 0; i < p.inputs.size(); ++i)
    if (is_periodic(p, p.inputs[i])) {
      all[i] = true;
      periods.push_back(p.inputs[i].period);
    }
  const Lowered la = Lowerer(p, none).run(), lb = Lowerer(p, all).run();
  const int min_slots = p.slots ? p.slots : 2;
  auto fits_both = [&](int64_t T) {
    return la.bytes(T, C, min_slots) <= budget && lb.bytes(T, C, min_slots) <= budget;
  };
  if (!fits_both(1)) {
    const uint64_t need = std::max(la.bytes(1, C, min_slots), lb.bytes(1, C, min_slots));
    fail("one row of " + std::to_string(C) + " columns needs " + std::to_string(need) + " bytes of VMEM (" +
         std::to_string(std::max(la.bufs.size(), lb.bufs.size())) +
         " tile buffers, the " + std::to_string(min_slots) + " slots' counted " + std::to_string(min_slots) +
         " times), more than the " + std::to_string(budget) +
         " bytes available");
  }
  // The rows of one core: S (see rowwise.h).
  int64_t S = R;
  if (p.cores > 1) {
    S = (R + p.cores - 1) / p.cores;
    int64_t L = 1;
    for (int64_t P : periods)
      if (lcm64(L, P) <= S) L = lcm64(L, P);
    if (const int64_t up = (S + L - 1) / L * L; up - S <= S / 8) S = up;
  }
  int64_t lo = 1, hi = S;  // largest T with fits_both(T)
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo + 1) / 2;
    if (fits_both(mid)) lo = mid;
    else hi = mid - 1;
  }
  const int64_t t_max = lo;
  const int64_t cap = std::max<int64_t>(1, 128 * width / C);
  int64_t T = std::min({t_max, cap, S});
  // Rows shared by several cores, in far memory (HBM, the shared memory): as one tile, a core would load all of its
  // rows before any vector work and store them after it; two tiles overlap the second's loads with the first's work
  // (v4's LayerNorms, whose rows lie in CMEM: GPT-2 prefill 325,519 -> 322,646 cycles). Not for tiles under 8
  // vector-unit passes. (On one core, for rows in HBM too, a second tile's overhead cost more than it hid: BERT-base
  // on v6e 224,745 -> 231,652 cycles.)
  const bool far = std::any_of(p.inputs.begin(), p.inputs.end(), [&](const Input& in) {
    return !is_periodic(p, in) && isa::far_memory(static_cast<int64_t>(in.addr)) != isa::FarMemory::Local;
  });
  if (p.cores > 1 && far && T >= S && (S + 1) / 2 * C >= 8 * width) T = (S + 1) / 2;
  if (T < S) {
    std::sort(periods.begin(), periods.end());
    int64_t L = 1;
    for (int64_t P : periods)
      if (lcm64(L, P) <= t_max) L = lcm64(L, P);
    if (L > 1) T = T >= L ? T / L * L : L;
    // Whole vector-unit passes per instruction (T * C a multiple of VPU_WIDTH) where that costs little.
    const int64_t M = lcm64(L, width / std::gcd(C, width));
    if (T >= 8 * M) T = T / M * M;
  }
  Built b;
  for (;;) {
    std::vector<bool> inv(p.inputs.size(), false);
    for (size_t i = 0; i < p.inputs.size(); ++i)
      inv[i] = is_periodic(p, p.inputs[i]) && (S >= R || S % p.inputs[i].period == 0) &&
               (T >= S || T % p.inputs[i].period == 0);
    b.low = Lowerer(p, inv).run();
    b.plan.invariant = inv;
    if (b.low.bytes(T, C, min_slots) <= budget) break;
    if (T == 1) fail("one row does not fit in VMEM");  // not reached: fits_both(1) holds
    T = std::max<int64_t>(1, T - std::max<int64_t>(1, T / 16));
  }
  // A third slot where it fits beside tiles of T rows and there are tiles enough to use it: the loads then run two
  // tiles ahead, so a transfer starts while the one before it is still in flight, instead of waiting for the
  // vector unit to free the other slot (decode's matrix-vector products, bound by HBM).
  b.plan.slots = p.slots ? p.slots : (S + T - 1) / T >= 3 && b.low.bytes(T, C, 3) <= budget ? 3 : 2;
  // The vector unit's own values (Program::accumulators): the pool's temporaries and the f32 copies of invariant
  // inputs (transfers reach neither), with the constant table, in the accumulators where they all fit.
  std::vector<bool> own(b.low.bufs.size(), false);
  for (size_t i = 0; i < b.low.bufs.size(); ++i) own[i] = b.low.bufs[i].space == Buf::Pool;
  for (int f : b.low.in_inv_f32)
    if (f >= 0) own[static_cast<size_t>(f)] = true;
  const int64_t acc_addr = symbols.count("ACC_ADDR") ? symbols.at("ACC_ADDR") : -1;
  const int64_t acc_bytes = acc_addr < 0 ? 0
                                         : symbol(symbols, "MXUS") * symbol(symbols, "ACC_ROWS") *
                                               symbol(symbols, "MXU_COLS") * 4;
  uint64_t own_bytes = align64(4 * b.low.consts.size());
  for (size_t i = 0; i < b.low.bufs.size(); ++i)
    if (own[i]) own_bytes += b.low.bufs[i].bytes(T, C);
  b.plan.in_accumulators = p.accumulators && acc_addr >= 0 && own_bytes <= static_cast<uint64_t>(acc_bytes);
  // Layout: constant table, invariant and pool buffers, then the slots (the vector unit's own values in the
  // accumulators, from their row 0, when they go there).
  b.base = p.vmem_base;
  uint64_t at = p.vmem_base, acc_at = static_cast<uint64_t>(std::max<int64_t>(acc_addr, 0));
  uint64_t& table_at = b.plan.in_accumulators ? acc_at : at;
  b.const_base = table_at;
  table_at += align64(4 * b.low.consts.size());
  for (size_t i = 0; i < b.low.bufs.size(); ++i) {
    Buf& buf = b.low.bufs[i];
    if (buf.slot()) continue;
    uint64_t& place = b.plan.in_accumulators && own[i] ? acc_at : at;
    buf.off = place;
    place += buf.bytes(T, C);
  }
  b.slot_base = at;
  uint64_t s = 0;
  for (Buf& buf : b.low.bufs)
    if (buf.slot()) {
      buf.off = s;
      s += buf.bytes(T, C);
    }
  b.slot_bytes = s;
  b.plan.tile_rows = T;
  b.plan.core_rows = S;
  b.plan.cores_used = (R + S - 1) / S;
  b.plan.tiles = (S + T - 1) / T;
  b.plan.full_temps = b.low.full_temps;
  b.plan.row_temps = b.low.row_temps;
  b.plan.vector_ops_per_tile = static_cast<int>(b.low.ops.size());
  for (const POp& o : b.low.ops) b.plan.vector_ops_per_tile += o.chunk > 0;
  b.plan.constants = static_cast<int>(b.low.consts.size());
  b.plan.vmem_used = at + static_cast<uint64_t>(b.plan.slots) * s - p.vmem_base;
  return b;
}

// ---- emission ----------------------------------------------------------------------------------------------
// Through the typed emitter (tpusim/isa/emitter.h). Registers: r0 = 0; r1 tile row start; r2 rows in the tile; r3 =
// r2 * C; r4 slot offset (0 or SLOT); r5 = 1; r6 = C; r7 = C * 4; r9..r11 operand addresses; r12 scale bits; r13
// scratch; r20..r22 the next tile's row start, rows and slot offset (loads); r23..r27 load/store scratch; on
// several cores r8 = core.id, r14 and r15 the core's first row and the end of its rows. Semaphores: s1 input slots
// free, s2 input slots loaded, s3 output slots free, s4 output slots computed, s5 loop-invariant inputs loaded.
constexpr isa::Reg r(int i) { return isa::reg(i); }
constexpr isa::Sem s(int i) { return isa::sem(i); }
constexpr DType kF32 = DType::F32;

class Emitter {
 public:
  Emitter(const Program& p, const Built& b, isa::Emitter& e) : p_(p), b_(b), e_(e) {
    if (p.background.empty()) return;
    if (p.cores > 1) throw std::invalid_argument("rowwise: background loads on one core");
    background_total_ = background_bytes(p.background, static_cast<int64_t>(b.base),
                                         static_cast<int64_t>(b.base + b.plan.vmem_used), "rowwise");
  }

  void emit() {
    const Plan& pl = b_.plan;
    const int64_t R = p_.rows, C = p_.cols, T = pl.tile_rows;
    if (p_.cores > 1) e_.set_cores(static_cast<uint32_t>(p_.cores));
    declare_tensors();
    // The semaphores first, so that the kernel begins with sem.sets as the others do (the compiler puts work of its
    // own after a kernel's leading sem.sets: codegen.cpp, early casts).
    e_.sem_set(s(1), b_.plan.slots);
    e_.sem_set(s(2), 0);
    e_.sem_set(s(3), b_.plan.slots);
    e_.sem_set(s(4), 0);
    e_.sem_set(s(5), 0);
    // Several cores: r14 = this core's first row, r15 = its end; a core past the last row skips the kernel.
    const bool split = p_.cores > 1;
    const isa::Label end = e_.label();
    if (split) {
      e_.core_id(r(8));
      e_.li(r(13), pl.core_rows);
      e_.mul(r(14), r(8), r(13));  // this core's first row
      e_.li(r(13), R);
      e_.bge(r(14), r(13), end);  // no rows for this core
      e_.li(r(13), pl.core_rows);
      e_.add(r(15), r(14), r(13));
      e_.li(r(13), R);
      e_.min(r(15), r(15), r(13));  // the end of its rows
    }
    // The end of the rows into r13: R on one core, r15 on several.
    auto rows_end = [&] {
      if (split) e_.addi(r(13), r(15), 0);
      else e_.li(r(13), R);
    };
    e_.li(r(5), 1);
    if (!p_.background.empty()) e_.li(r(28), 0);  // the background's bytes issued so far
    e_.li(r(6), C);
    e_.li(r(7), C * 4);
    // Constant table: 0 = a sum over no columns, 1 = exp(0), c = cast(1 * c).
    const auto cb = static_cast<int64_t>(b_.const_base);
    e_.li(r(9), cb);
    e_.vpu_rsum(r(9), r(0), r(5), r(0), r(0), kF32);
    e_.li(r(10), cb + 4);
    e_.vpu_exp(r(10), r(9), r(5), kF32);
    for (size_t i = 2; i < b_.low.consts.size(); ++i) {
      e_.li(r(9), cb + 4 * static_cast<int64_t>(i));
      e_.li(r(12), isa::bits_from_f32(b_.low.consts[i]));
      e_.vpu_cast(r(9), r(10), r(5), r(12), kF32, kF32, {.scale_en = true});
    }
    // Loop-invariant (periodic) inputs: rows 0..T-1 of the pattern, once (copies of its P rows, hstride 0). Where
    // none needs an f32 copy, they load after the first tile's inputs and the vector unit waits for them only at
    // its first instruction that reads one (a LayerNorm's scale, after its mean and variance), so that the tile's
    // first passes do not wait for tables from HBM; else first, and the vector unit waits before the loop.
    const bool defer_inv =
        std::none_of(b_.low.in_inv_f32.begin(), b_.low.in_inv_f32.end(), [](int f) { return f >= 0; });
    bool any_inv = false;
    auto invariant_loads = [&] {
      for (size_t i = 0; i < p_.inputs.size(); ++i) {
        const int sb = b_.low.in_stage[i];
        if (sb < 0 || !b_.plan.invariant[i]) continue;
        any_inv = true;
        const Input& in = p_.inputs[i];
        const int64_t P = in.period, rb = width(in) * isa::dtype_size(in.dtype);
        const auto dst = static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(sb)].off);
        const int64_t copies = T / P, rest = T % P;
        e_.li(r(9), dst);
        e_.li(r(23), static_cast<int64_t>(in.addr));
        if (copies > 0) {
          e_.li(r(24), copies);
          e_.li(r(25), P * rb);
          e_.dma_ld(r(9), r(23), r(24), r(25), r(0), r(25));
        }
        if (rest > 0) {
          e_.li(r(9), dst + copies * P * rb);
          e_.li(r(25), rest * rb);
          e_.dma_ld(r(9), r(23), r(5), r(25), r(25), r(25));
        }
      }
      if (any_inv) e_.dmain_sync({.signal = s(5)});
    };
    if (!defer_inv) {
      invariant_loads();
      if (any_inv) e_.vpu_sync({.wait = s(5)});
      for (size_t i = 0; i < p_.inputs.size(); ++i) {
        const int fb = b_.low.in_inv_f32[i];
        if (fb < 0) continue;
        e_.li(r(9), static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(fb)].off));
        e_.li(r(10), static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(b_.low.in_stage[i])].off));
        e_.li(r(13), T * width(p_.inputs[i]));
        e_.vpu_cast(r(9), r(10), r(13), r(0), p_.inputs[i].dtype, kF32);
      }
    }
    // The loop over tiles, software-pipelined: tile 0's loads, then per tile: the next tile's loads, this
    // tile's vector work, this tile's stores.
    if (split) {
      e_.addi(r(1), r(14), 0);
      e_.li(r(4), 0);
      e_.addi(r(20), r(14), 0);
      e_.sub(r(21), r(15), r(14));
      e_.li(r(13), T);
      e_.min(r(21), r(21), r(13));
    } else {
      e_.li(r(1), 0);
      e_.li(r(4), 0);
      e_.li(r(20), 0);
      e_.li(r(21), std::min(T, R));
    }
    e_.li(r(22), 0);
    loads();
    if (defer_inv) invariant_loads();
    background_piece(false);
    // The loads of the tile `ahead` tiles after this one, if it exists, into the slot set_slot puts in r22; then
    // `skip` is bound.
    auto load_ahead = [&](int64_t ahead, isa::Label skip, const std::function<void()>& set_slot) {
      e_.addi(r(20), r(1), ahead * T);
      rows_end();
      e_.bge(r(20), r(13), skip);  // no such tile
      e_.sub(r(21), r(13), r(20));
      e_.li(r(13), T);
      e_.min(r(21), r(21), r(13));
      set_slot();
      loads();
      background_piece(false);
      e_.bind(skip);
    };
    // With more than two slots, the tiles after the first one (those that exist) load ahead too.
    for (int j = 1; j + 1 < b_.plan.slots; ++j)
      load_ahead(j, e_.label(), [&] { e_.li(r(22), static_cast<int64_t>(j * b_.slot_bytes)); });
    const isa::Label tile = e_.label();
    e_.bind(tile);
    rows_end();
    e_.sub(r(2), r(13), r(1));
    e_.li(r(13), T);
    e_.min(r(2), r(2), r(13));  // rows in this tile
    e_.mul(r(3), r(2), r(6));   // elements in this tile
    load_ahead(b_.plan.slots - 1, e_.label(), [&] { slot_after(r(22), r(4), b_.plan.slots - 1); });
    e_.vpu_sync({.wait = s(2)});  // this tile's inputs are in
    e_.vpu_sync({.wait = s(3)});  // its output slot is free
    bool inv_in = !defer_inv || !any_inv;  // the invariants are in VMEM (deferred: from this instruction on)
    for (const POp& op : b_.low.ops) {
      if (!inv_in && reads_invariant(op)) {  // waits for their loads, and signals again for the next tile
        e_.vpu_sync({.wait = s(5)});
        e_.vpu_sync({.signal = s(5)});
        inv_in = true;
      }
      vector_op(op);
    }
    e_.vpu_sync({.signal = s(1)});
    e_.vpu_sync({.signal = s(4)});
    e_.dmaout_sync({.wait = s(4)});
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const Output& out = p_.outputs[i];
      const Buf& ob = b_.low.bufs[static_cast<size_t>(b_.low.out_buf[i])];
      const int64_t rb = (ob.kind == Kind::Full ? C : 1) * isa::dtype_size(out.dtype);
      rows_at(static_cast<int64_t>(out.addr), rb, r(1), r(2));
      e_.addi(r(9), r(4), static_cast<int64_t>(b_.slot_base + ob.off));
      e_.dma_st(r(23), r(9), r(5), r(24), r(24), r(24));  // output i
    }
    e_.dmaout_sync({.signal = s(3)});
    slot_after(r(4), r(4), 1);
    e_.addi(r(1), r(1), T);
    rows_end();
    e_.blt(r(1), r(13), tile);
    background_piece(true);  // what the tiles left of the background loads
    e_.bind(end);
  }

 private:
  // Program::background: a piece of equal size after each tile's loads (r28 counts the bytes issued), or the rest.
  void background_piece(bool all) {
    if (p_.background.empty()) return;
    const int64_t tiles = std::max<int64_t>(1, b_.plan.tiles);
    const int64_t piece = all ? 0 : std::max<int64_t>(4096, (background_total_ + tiles - 1) / tiles);
    emit_background_piece(e_, p_.background, piece, {r(28), r(29), r(16), r(17), r(18), r(19), r(5), r(0)});
  }
  const Program& p_;
  const Built& b_;
  isa::Emitter& e_;
  int64_t background_total_ = 0;  // Program::background's bytes

  int64_t width(const Input& in) const { return in.per_row ? 1 : p_.cols; }

  // The program's tensors. Inputs whose bytes overlap (a window's taps read in place from one padded input,
  // compiler ops_conv.cpp tap_views) are declared as one tensor over their union, named as the first: a program's
  // tensors may not overlap (isa::validate_tensors). Others as themselves.
  void declare_tensors() {
    const int64_t R = p_.rows, C = p_.cols;
    auto in_bytes = [&](const Input& in) {  // a strided input: its first row to the end of its last
      if (in.stride > 0) return static_cast<uint64_t>((R - 1) * in.stride + C * isa::dtype_size(in.dtype));
      return static_cast<uint64_t>((in.period > 0 ? in.period : R) * (in.per_row ? 1 : C) * isa::dtype_size(in.dtype));
    };
    std::vector<size_t> order(p_.inputs.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return p_.inputs[a].addr < p_.inputs[b].addr; });
    for (size_t g = 0; g < order.size();) {
      size_t e = g + 1;
      uint64_t end = p_.inputs[order[g]].addr + in_bytes(p_.inputs[order[g]]);
      bool one_type = true;
      for (; e < order.size() && p_.inputs[order[e]].addr < end; ++e) {
        end = std::max(end, p_.inputs[order[e]].addr + in_bytes(p_.inputs[order[e]]));
        one_type = one_type && p_.inputs[order[e]].dtype == p_.inputs[order[g]].dtype;
      }
      const size_t i =
          *std::min_element(order.begin() + static_cast<int64_t>(g), order.begin() + static_cast<int64_t>(e));
      const Input& in = p_.inputs[i];
      isa::TensorDecl t;
      t.name = in.name.empty() ? "in" + std::to_string(i) : in.name;
      t.kind = isa::TensorKind::Input;
      t.addr = p_.inputs[order[g]].addr;
      if (e == g + 1 && in.stride == 0) {
        t.dtype = in.dtype;
        t.shape = {in.period > 0 ? in.period : R};
        if (!in.per_row) t.shape.push_back(C);
      } else {
        const uint64_t bytes = end - p_.inputs[order[g]].addr;
        t.dtype = one_type && bytes % isa::dtype_size(in.dtype) == 0 ? in.dtype : DType::I8;
        t.shape = {static_cast<int64_t>(bytes / isa::dtype_size(t.dtype))};
      }
      e_.declare(std::move(t));
      g = e;
    }
    for (size_t i = 0; i < p_.outputs.size(); ++i) {
      const Output& out = p_.outputs[i];
      isa::TensorDecl t;
      t.name = out.name.empty() ? "out" + std::to_string(i) : out.name;
      t.kind = isa::TensorKind::Output;
      t.dtype = out.dtype;
      t.shape = {R};
      if (b_.low.bufs[static_cast<size_t>(b_.low.out_buf[i])].kind != Kind::Row) t.shape.push_back(C);
      t.addr = out.addr;
      e_.declare(std::move(t));
    }
  }

  // dst = the offset of the slot k after the one at offset src (slots in a ring; uses r13).
  void slot_after(isa::Reg dst, isa::Reg src, int k) {
    const auto sb = static_cast<int64_t>(b_.slot_bytes);
    if (b_.plan.slots == 2) {  // k = 1: the other slot
      e_.li(r(13), sb);
      e_.sub(dst, r(13), src);
      return;
    }
    const isa::Label wrapped = e_.label();
    e_.addi(dst, src, k * sb);
    e_.li(r(13), b_.plan.slots * sb);
    e_.blt(dst, r(13), wrapped);
    e_.sub(dst, dst, r(13));  // around the ring of slots
    e_.bind(wrapped);
  }

  // r23 = the HBM address of row `row` of a tensor at `addr` with rows of `rb` bytes, r24 = the bytes of `count`
  // such rows (uses r13).
  void rows_at(int64_t addr, int64_t rb, isa::Reg row, isa::Reg count) {
    e_.li(r(13), rb);
    e_.mul(r(23), row, r(13));
    e_.li(r(13), addr);
    e_.add(r(23), r(23), r(13));
    e_.li(r(13), rb);
    e_.mul(r(24), count, r(13));
  }

  // The next tile's loads (rows r20.., r21 of them, into the slot at offset r22).
  // The first load waits for the slot (s1) and the last signals it full (s2; loads complete in order) where they
  // are single transfers, else a dmain.sync does: two instructions fewer per tile in the load queue. (While a
  // sync took one of the queue's DMA engines, the two syncs per tile kept v4-like's 4 engines to one tile's
  // load in flight: a decode step's matrix-vector products at 1.5x their HBM bound.)
  void loads() {
    std::vector<size_t> used;
    for (size_t i = 0; i < p_.inputs.size(); ++i)
      if (b_.low.in_stage[i] >= 0 && !b_.plan.invariant[i]) used.push_back(i);
    const bool wait_on_load = !used.empty() && !is_periodic(p_, p_.inputs[used.front()]),
               signal_on_load = !used.empty() && !is_periodic(p_, p_.inputs[used.back()]);
    if (!wait_on_load) e_.dmain_sync({.wait = s(1)});
    for (size_t i : used) {
      const int sb = b_.low.in_stage[i];
      const Input& in = p_.inputs[i];
      const int64_t rb = width(in) * isa::dtype_size(in.dtype);
      const auto dst = static_cast<int64_t>(b_.slot_base + b_.low.bufs[static_cast<size_t>(sb)].off);
      const auto addr = static_cast<int64_t>(in.addr);
      if (!is_periodic(p_, in)) {
        isa::DmaLdOptions o;
        if (wait_on_load && i == used.front()) o.wait = s(1);
        if (signal_on_load && i == used.back()) o.signal = s(2);
        if (in.stride > 0) {  // r21 rows of rb bytes, `stride` apart, from row r20
          rows_at(addr, in.stride, r(20), r(21));
          e_.addi(r(9), r(22), dst), e_.li(r(24), rb), e_.li(r(25), in.stride);
          e_.dma_ld(r(9), r(23), r(21), r(24), r(25), r(24), o);  // input i
          continue;
        }
        rows_at(addr, rb, r(20), r(21));
        e_.addi(r(9), r(22), dst);
        e_.dma_ld(r(9), r(23), r(5), r(24), r(24), r(24), o);  // input i
        continue;
      }
      // Rows r % P for r in [r20, r20 + r21): contiguous pieces, wrapping around at P.
      const isa::Label piece = e_.label();
      e_.li(r(13), in.period);
      e_.rem(r(25), r(20), r(13));  // the first pattern row
      e_.addi(r(26), r(21), 0);     // rows left
      e_.addi(r(9), r(22), dst);
      e_.bind(piece);
      e_.li(r(13), in.period);
      e_.sub(r(27), r(13), r(25));
      e_.min(r(27), r(27), r(26));  // rows in this piece
      rows_at(addr, rb, r(25), r(27));
      e_.dma_ld(r(9), r(23), r(5), r(24), r(24), r(24));
      e_.add(r(9), r(9), r(24));
      e_.sub(r(26), r(26), r(27));
      e_.li(r(25), 0);
      e_.blt(r(0), r(26), piece);
    }
    if (!signal_on_load) e_.dmain_sync({.signal = s(2)});
  }

  // Whether `op` reads a loop-invariant input (its staging or its f32 copy)
  bool reads_invariant(const POp& op) const {
    const bool two = op.k == PK::Bin || op.k == PK::RowB || op.k == PK::Dot || op.k == PK::MAdd;  // (b an operand)
    for (const int v : {op.a, two ? op.b : -1, op.e}) {
      if (v < 0) continue;
      const Buf& b = b_.low.bufs[static_cast<size_t>(b_.low.vr[static_cast<size_t>(v)].buf)];
      if (b.space == Buf::Inv || b.space == Buf::InvStage) return true;
    }
    return false;
  }

  void addr(int reg, int v) {
    const Buf& b = b_.low.bufs[static_cast<size_t>(b_.low.vr[static_cast<size_t>(v)].buf)];
    if (b.slot())
      e_.addi(r(reg), r(4), static_cast<int64_t>(b_.slot_base + b.off));
    else
      e_.li(r(reg), static_cast<int64_t>(b.off));
  }
  int64_t n_reg(int v) const { return b_.low.vr[static_cast<size_t>(v)].k == Kind::Full ? 3 : 2; }

  void vop(const std::string& mn, std::initializer_list<int64_t> fields) { vector_instr(e_, mn, fields); }
  static int64_t dt(DType t) { return static_cast<int64_t>(t); }

  // A two-step row sum (Red, Dot with a chunk), its first step: r24 = the tile's rows x C / chunk pieces of r25 =
  // `chunk` columns.
  void partial_rows(const POp& op) {
    e_.li(r(13), p_.cols / op.chunk);
    e_.mul(r(24), r(2), r(13));
    e_.li(r(25), op.chunk);
  }
  // Its second step: each row's C / chunk partial sums, in `scratch`, summed into op.d.
  void sum_partials(const POp& op) {
    const int64_t m = p_.cols / op.chunk;
    addr(9, op.d);
    e_.li(r(10), static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(op.scratch)].off));
    e_.li(r(25), m);
    e_.li(r(26), m * 4);
    e_.vpu_rsum(r(9), r(10), r(2), r(25), r(26), kF32);
  }

  void vector_op(const POp& op) {
    const int64_t f32 = dt(kF32);
    switch (op.k) {
      case PK::Bin:  // (bf16: a maximum or minimum of bf16 values, fold_selects)
        addr(9, op.d), addr(10, op.a), addr(11, op.b);
        return vop(op.mn, {9, 10, 11, n_reg(op.d), dt(op.sdt)});
      case PK::RowB:
        addr(9, op.d), addr(10, op.a), addr(11, op.b);
        return vop(op.mn, {9, 10, 11, 2, 6, 7, f32});
      case PK::MAdd:
        addr(9, op.d), addr(10, op.a), addr(11, op.b), addr(12, op.e);
        return vop(op.mn, {9, 10, 11, 12, n_reg(op.d), f32});
      case PK::Bcast1:
        addr(9, op.d), addr(10, op.a);
        e_.li(r(11), static_cast<int64_t>(b_.const_base + 4 * static_cast<uint64_t>(b_.low.const_index(op.c))));
        return vop(op.mn, {9, 10, 11, 5, n_reg(op.d), 7, f32});
      case PK::Un:
        addr(9, op.d), addr(10, op.a);
        return vop(op.mn, {9, 10, n_reg(op.d), f32});
      case PK::Red:
        if (op.chunk > 0) {  // sums of `chunk` columns (rows * C/chunk of them), then a sum of C/chunk per row
          e_.li(r(9), static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(op.scratch)].off));
          addr(10, op.a);
          partial_rows(op);
          e_.li(r(26), op.chunk * 4);
          e_.vpu_rsum(r(9), r(10), r(24), r(25), r(26), kF32);  // partial sums of `chunk` columns
          return sum_partials(op);
        }
        addr(9, op.d), addr(10, op.a);
        return vop(op.mn, {9, 10, 2, 6, 7, f32});
      case PK::Dot: {  // rows of C elements: a's (of sdt) C x its size apart, b's (f32) C x 4 (r7)
        const int64_t asz = isa::dtype_size(op.sdt);
        addr(10, op.a), addr(11, op.b);
        if (op.chunk > 0) {  // as Red's two steps: the partial dot products of `chunk` columns, then their sum
          e_.li(r(9), static_cast<int64_t>(b_.low.bufs[static_cast<size_t>(op.scratch)].off));
          partial_rows(op);
          e_.li(r(26), op.chunk * asz);
          e_.li(r(27), op.chunk * 4);
          e_.vpu_rdot(r(9), r(10), r(11), r(24), r(25), r(26), r(27), op.sdt);
          return sum_partials(op);
        }
        addr(9, op.d);
        e_.li(r(24), p_.cols * asz);
        e_.vpu_rdot(r(9), r(10), r(11), r(2), r(6), r(24), r(7), op.sdt);
        return;
      }
      case PK::Zero:
        addr(9, op.d);
        e_.vpu_rsum(r(9), r(0), r(static_cast<int>(n_reg(op.d))), r(0), r(0), kF32);  // zeros: sums over no columns
        return;
      case PK::Cast:
        addr(9, op.d), addr(10, op.a);
        if (op.scaled) {
          e_.li(r(12), isa::bits_from_f32(op.c));
          e_.vpu_cast(r(9), r(10), r(static_cast<int>(n_reg(op.d))), r(12), op.sdt, op.ddt, {.scale_en = true});
        } else {
          e_.vpu_cast(r(9), r(10), r(static_cast<int>(n_reg(op.d))), r(0), op.sdt, op.ddt);
        }
        return;
    }
  }
};

}  // namespace

int int8_copy_of(const Program& p, size_t i, float* scale, bool bf16_only) {
  if (i >= p.outputs.size() || p.outputs[i].dtype != DType::I8) return -1;
  const auto valid = [&](int v) { return v >= 0 && static_cast<size_t>(v) < p.nodes.size(); };
  if (!valid(p.outputs[i].node)) return -1;
  const Node& n = p.nodes[static_cast<size_t>(p.outputs[i].node)];
  if (n.op != Op::Mul || n.args.size() != 2 || !valid(n.args[0]) || !valid(n.args[1])) return -1;
  for (int side = 0; side < 2; ++side) {
    const Node& k = p.nodes[static_cast<size_t>(n.args[static_cast<size_t>(side)])];
    const int x = n.args[static_cast<size_t>(1 - side)];
    if (k.op != Op::Const) continue;
    for (size_t j = 0; j < i; ++j)
      if (p.outputs[j].node == x && (!bf16_only || p.outputs[j].dtype == DType::BF16)) {
        *scale = k.value;
        return static_cast<int>(j);
      }
  }
  return -1;
}

bool is_elementwise(const Program& p) {
  if (p.inputs.size() != 1 || p.outputs.size() != 1 || p.inputs[0].per_row || p.inputs[0].dtype != DType::F32)
    return false;
  for (const Node& n : p.nodes)
    if (n.op == Op::RowSum || n.op == Op::RowMax || n.op == Op::RowMean) return false;
  return true;
}

// The lowering of an epilogue: the input's staging buffer is the caller's `in`, the output's its `out`, the pool
// buffers (temporaries) lie after the constant table; every value is Full (no reductions), counted in n elements.
Epilogue epilogue(const Program& given, int64_t max_elements, uint64_t base) {
  if (!is_elementwise(given)) fail("an epilogue takes one f32 input, one output and no reductions");
  Program p = given;
  p.rows = std::max<int64_t>(1, max_elements), p.cols = 1, p.cores = 1;
  p.inputs[0].period = 0;
  validate(p);
  const std::vector<bool> inv(1, false);
  Lowered low = Lowerer(p, inv, false).run();
  Epilogue e;
  base = align64(base);
  e.const_base = base;
  e.consts = low.consts;
  uint64_t at = base + align64(4 * low.consts.size());
  for (Buf& b : low.bufs)
    if (b.space == Buf::Pool) {
      if (b.kind != Kind::Full) fail("an epilogue's values are per element");
      b.off = at;
      at += b.bytes(p.rows, 1);
    }
  e.bytes = at - base;
  auto addr = [&](int v) -> int64_t {
    const Buf& b = low.bufs[static_cast<size_t>(low.vr[static_cast<size_t>(v)].buf)];
    if (b.space == Buf::SlotIn) return Epilogue::kIn;
    if (b.space == Buf::SlotOut) return Epilogue::kOut;
    return static_cast<int64_t>(b.off);
  };
  using Step = Epilogue::Step;
  for (const POp& op : low.ops) {
    switch (op.k) {
      case PK::Bin:  // (f32: fold_selects needs a bf16 input)
        e.steps.push_back(Step{Step::Bin, op.mn, addr(op.d), addr(op.a), addr(op.b)});
        break;
      case PK::Bcast1:
        e.steps.push_back(Step{Step::Bcast1, op.mn, addr(op.d), addr(op.a),
                               static_cast<int64_t>(base + 4 * static_cast<uint64_t>(low.const_index(op.c)))});
        break;
      case PK::Un: e.steps.push_back(Step{Step::Un, op.mn, addr(op.d), addr(op.a)}); break;
      case PK::Zero: e.steps.push_back(Step{Step::Zero, "rsum", addr(op.d)}); break;
      case PK::Cast:
        if (op.scaled) fail("an epilogue has one output");
        e.steps.push_back(Step{Step::Cast, "cast", addr(op.d), addr(op.a), 0, op.sdt, op.ddt});
        break;
      case PK::RowB:
      case PK::Dot:
      case PK::Red: fail("an epilogue's values are per element");
      case PK::MAdd: fail("an epilogue folds no products (Lowerer's madd)");
    }
    ++e.vector_ops;
  }
  return e;
}

void Epilogue::init(isa::Emitter& e, isa::Reg one, isa::Reg s0, isa::Reg s1, isa::Reg s2) const {
  const isa::Reg zero = isa::reg(0);
  e.li(s0, static_cast<int64_t>(const_base)), e.vpu_rsum(s0, zero, one, zero, zero, DType::F32);  // 0
  e.li(s1, static_cast<int64_t>(const_base + 4)), e.vpu_exp(s1, s0, one, DType::F32);             // 1 = exp(0)
  for (size_t i = 2; i < consts.size(); ++i) {  // 1 x the constant
    e.li(s0, static_cast<int64_t>(const_base + 4 * i)), e.li(s2, isa::bits_from_f32(consts[i]));
    e.vpu_cast(s0, s1, one, s2, DType::F32, DType::F32, {.scale_en = true});
  }
}

void Epilogue::apply(isa::Emitter& e, isa::Reg in, isa::Reg out, isa::Reg n, isa::Reg one, isa::Reg s0,
                     isa::Reg s1, isa::Reg s2) const {
  const isa::Reg zero = isa::reg(0);
  auto addr = [&](isa::Reg reg, int64_t at) {
    if (at == kIn)
      e.addi(reg, in, 0);
    else if (at == kOut)
      e.addi(reg, out, 0);
    else
      e.li(reg, at);
  };
  for (const Step& st : steps) {
    addr(s0, st.d);
    switch (st.kind) {
      case Step::Bin:
        addr(s1, st.a), addr(s2, st.b);
        vector_instr(e, st.mn, {s0.index, s1.index, s2.index, n.index, static_cast<int64_t>(DType::F32)});
        break;
      case Step::Bcast1:
        addr(s1, st.a), e.li(s2, st.b);
        vector_instr(e, st.mn, {s0.index, s1.index, s2.index, one.index, n.index, one.index,
                                static_cast<int64_t>(DType::F32)});
        break;
      case Step::Un:
        addr(s1, st.a);
        vector_instr(e, st.mn, {s0.index, s1.index, n.index, static_cast<int64_t>(DType::F32)});
        break;
      case Step::Zero: e.vpu_rsum(s0, zero, n, zero, zero, DType::F32); break;
      case Step::Cast: addr(s1, st.a), e.vpu_cast(s0, s1, n, zero, st.sdt, st.ddt); break;
    }
  }
}

Plan plan(const Program& p, const std::map<std::string, int64_t>& symbols) { return build(p, symbols).plan; }

namespace {

// The kernel through the typed emitter, and (when `summary` is given) a line that says how it was planned.
isa::Program emit_kernel(const Program& p, const std::map<std::string, int64_t>& symbols, uint64_t base_pc,
                         const std::string& name, std::string* summary) {
  const Built b = build(p, symbols);
  std::string shown = name;
  for (char& ch : shown)
    if (ch == '"' || ch == '\\' || ch == '\n') ch = '_';
  if (summary) {
    const Plan& pl = b.plan;
    std::ostringstream o;
    o << "# Fused row-wise kernel (kernels/rowwise.h): [" << p.rows << ", " << p.cols << "], ";
    if (p.cores > 1) o << pl.core_rows << " rows on each of " << pl.cores_used << " cores, ";
    o << "tiles of " << pl.tile_rows << " rows (" << pl.tiles << " tiles), " << pl.vector_ops_per_tile
      << " vector instructions per tile, " << pl.full_temps << " full temporaries"
      << (pl.in_accumulators ? " (in the accumulators)" : "") << ", VMEM [" << b.base << ", +" << pl.vmem_used
      << ")\n";
    *summary = o.str();
  }
  isa::Emitter e(shown, "<rowwise>/" + shown, base_pc);
  Emitter(p, b, e).emit();
  return e.finish();
}

}  // namespace

std::string source(const Program& p, const std::map<std::string, int64_t>& symbols, const std::string& name) {
  std::string summary;
  const isa::Program k = emit_kernel(p, symbols, 0, name, &summary);
  return summary + isa::disassemble(k);
}

isa::Program kernel(const Program& p, const std::map<std::string, int64_t>& symbols, uint64_t base_pc,
                    const std::string& name) {
  return emit_kernel(p, symbols, base_pc, name, nullptr);
}

}  // namespace tpusim::kernels::rowwise
