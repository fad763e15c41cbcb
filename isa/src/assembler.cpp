// The two-pass assembler (syntax: docs/isa.md, "Assembly language").
//
// Pass 1 reads every line in order: it runs the directives (.set, .if, tensor declarations, ...), defines labels
// and parses each instruction's operands, folding every symbol already known into a number. Pass 2 evaluates what
// is left (forward references: labels, and symbols defined further down, at their final value), checks that each
// value fits its field and encodes. Operands are parsed from the instruction table alone.
#include "tpusim/isa/assembler.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <unordered_map>
#include <utility>

#include "asm_syntax.h"

namespace tpusim::isa {
namespace {

using namespace asm_detail;

// ---- operand classes: how the table's operands group, and what a token looks like ---------------------------

// Immediates and branch targets are both written as expressions, so they form one class.
enum class Cls : uint8_t { Reg, Value, DType, Sem, Flag, Keyword, End, Other };

Cls class_of(OperandKind k) {
  switch (k) {
    case OperandKind::Reg: return Cls::Reg;
    case OperandKind::DType: return Cls::DType;
    case OperandKind::Sem: return Cls::Sem;
    case OperandKind::Flag: return Cls::Flag;
    default: return Cls::Value;
  }
}

// Flags and the wait/signal semaphores of unit instructions are written by name after the positional operands.
bool is_named(const InstrDesc& d, const OperandDesc& o) {
  return o.kind == OperandKind::Flag || o.kind == OperandKind::Key ||
         (o.kind == OperandKind::Sem && d.unit != Unit::Core);
}

// A run of consecutive positional operands of one class, for "'add' expects 3 registers, got 2".
struct Group {
  Cls cls;
  int count = 0;
  bool targets = true;  // every operand of the group is a branch target
};

std::string noun(const Group& g, int n) {
  const char* w = "operand";
  switch (g.cls) {
    case Cls::Reg: w = "register"; break;
    case Cls::DType: w = "data type"; break;
    case Cls::Sem: w = "semaphore"; break;
    case Cls::Value: w = g.targets ? "branch target" : "immediate"; break;
    default: break;
  }
  return std::to_string(n) + " " + w + (n == 1 ? "" : "s");
}

// Number after `prefix` in names like r12 / s3, or -1.
int indexed_name(const std::string& s, char prefix) {
  if (s.size() < 2 || s.size() > 6 || s[0] != prefix) return -1;
  int n = 0;
  for (size_t i = 1; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return -1;
    n = n * 10 + (s[i] - '0');
  }
  return n;
}

// An instruction's positional operands (those not written by name), in order, and their groups.
struct Layout {
  std::vector<int> pos;  // operand indices
  std::vector<Group> groups;
  std::vector<int> group_of, index_in_group;  // by positional operand
};

// Pseudo-instructions: a real instruction with its last operands fixed.
struct Pseudo {
  const char* name;
  const char* base;
  int keep;                    // operands the programmer writes (a prefix of the base's)
  std::vector<int64_t> fixed;  // values of the others
};
const Pseudo kPseudos[] = {{"mov", "addi", 2, {0}}};  // mov rd, ra = addi rd, ra, 0

const InstrDesc* pseudo_desc(const std::string& name, const Pseudo** which) {
  static const std::deque<InstrDesc> descs = [] {
    std::deque<InstrDesc> v;
    for (const Pseudo& p : kPseudos) {
      InstrDesc d = *describe_mnemonic(p.base);
      d.mnemonic = p.name;
      d.num_operands = p.keep;
      v.push_back(d);
    }
    return v;
  }();
  for (size_t i = 0; i < std::size(kPseudos); ++i)
    if (name == kPseudos[i].name) return *which = &kPseudos[i], &descs[i];
  return nullptr;
}

std::string range_text(const OperandDesc& o) {
  switch (o.kind) {
    case OperandKind::Imm: return std::string(1, 'i').append(std::to_string(o.width));
    default: return std::string(1, 'u').append(std::to_string(o.width));
  }
}

bool fits(const OperandDesc& o, int64_t v) {
  if (o.kind == OperandKind::Imm) {
    int64_t lim = int64_t(1) << (o.width - 1);
    return v >= -lim && v < lim;
  }
  return v >= 0 && (o.width >= 63 || v < (int64_t(1) << o.width));
}

std::optional<std::string> read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return std::nullopt;
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The default `.include` resolver: `name` relative to the including file's directory.
std::string include_path(const std::string& name, const std::string& from) {
  size_t slash = from.rfind('/');
  return (name.starts_with("/") || slash == std::string::npos) ? name : from.substr(0, slash + 1) + name;
}

// ---- the assembler --------------------------------------------------------------------------------------------

struct Symbol {
  enum Kind { Define, Set, Label, Tensor } kind;
  int64_t value;
  Loc loc;
  // prepare(): a label (value: its instruction's index from the fragment's start) or a tensor placed by
  // Prepared::place (value: its index in Program::tensors), whose value is known only there.
  bool open = false;
};
const char* kind_name(Symbol::Kind k) {
  switch (k) {
    case Symbol::Define: return "a -D define";
    case Symbol::Set: return "a .set symbol";
    case Symbol::Label: return "a label";
    case Symbol::Tensor: return "a tensor";
  }
  return "?";
}

// Kept for every instruction until pass 2, so small: an expression lives in Assembler::exprs_ (memory per source
// line was about 2 KB with the expression held in each of an instruction's operand slots).
struct Operand {
  int64_t value = 0;
  int32_t expr = -1;  // immediates and targets: index into Assembler::exprs_; -1 for none
  int32_t col = 0;    // where the expression starts (on the instruction's line)
};

struct PendingInstr {
  const InstrDesc* desc;
  std::array<Operand, kMaxOperands> ops;
  Loc loc;
};

struct CondFrame {
  Loc loc;
  bool parent_active, active, taken, seen_else = false;
};

// A .region waiting for its .endregion.
struct OpenRegion {
  size_t index;  // in Program::regions
  Loc loc;
};

// A .const waiting for its .data lines.
struct ConstFill {
  size_t tensor;
  Loc loc;
  uint64_t got = 0;
};

class Assembler {
 public:
  // `open`: prepare() (labels and HBM tensors placed without `@` are left open for place()).
  explicit Assembler(const AsmOptions& o, bool open = false)
      : opts_(o), open_(open), hbm_base_(o.hbm_base), hbm_align_(o.hbm_align) {
    for (const auto& [name, v] : o.defines) symbols_[name] = Symbol{Symbol::Define, v, {}};
    // Data types as numbers (DT_I8, DT_I32, DT_BF16, DT_F32), so kernels can take them as parameters.
    for (int t = 0; t < kNumDTypes; ++t) {
      std::string name = "DT_";
      for (const char* p = dtype_name(static_cast<DType>(t)); *p; ++p) name += static_cast<char>(std::toupper(*p));
      symbols_.emplace(name, Symbol{Symbol::Define, t, {}});
    }
    next_free_ = o.hbm_base;
  }

  Program run(const std::string& text, const std::string& filename) {
    read_file(text, filename);
    check_consts(prog_);
    encode_all(prog_, known());
    return std::move(prog_);
  }

  // prepare(): pass 1 only; place() finishes a copy. Nothing of the AsmOptions is read after this.
  void first_pass(const std::string& text, const std::string& filename) { read_file(text, filename); }
  Program place(const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc) const;

 private:
  // pass 1: lines, conditionals, statements
  void read_file(const std::string& text, const std::string& name);
  void line(const std::vector<Token>& toks, std::vector<CondFrame>& conds);
  void conditional(Cursor& c, const Token& head, std::vector<CondFrame>& conds);
  void statement(Cursor& c);
  void directive(Cursor& c, const Token& head);
  void define_label(const Token& t);
  void define_symbol(const std::string& name, Symbol s);
  // directives
  void dir_set(Cursor& c, bool only_if_undefined);
  DType parse_dtype(Cursor& c);
  void dir_reg(Cursor& c);
  void dir_tensor(Cursor& c, TensorKind kind);
  void dir_data(Cursor& c, const Token& head);
  void dir_include(Cursor& c, const Token& head);
  void dir_region(Cursor& c, const Token& head);
  double plain_number(Cursor& c, const std::string& what);
  void dir_endregion(Cursor& c, const Token& head);
  void close_fill();
  uint64_t place(const std::string& name, uint64_t bytes, const std::optional<Expr>& at);
  std::vector<int64_t> parse_dims(Cursor& c);
  // instructions
  void instruction(Cursor& c, const Token& mnemonic);
  void parse_positional(Cursor& c, const InstrDesc& d, PendingInstr& pi);
  void parse_named(Cursor& c, const InstrDesc& d, PendingInstr& pi, const Group& last);
  void parse_operand(Cursor& c, const OperandDesc& o, Operand& out);
  Cls looks_like(const Cursor& c, const InstrDesc& d) const;
  int parse_register(Cursor& c);
  int parse_semaphore(const Token& t);
  // pass 2
  void check_consts(const Program& p) const;
  void encode_all(Program& p, const Resolver& final_value) const;

  int64_t eval_now(const Expr& e) { return eval(e, known()); }
  Expr expr(Cursor& c) { return parse_expr(c, known(), defined()); }
  // The value of a symbol defined so far; an open one (prepare()) stays a symbol in expressions, and is an
  // undefined symbol where a value is needed at once (prepare() then fails: the caller assembles instead).
  Resolver known() const {
    return [this](const std::string& n) -> std::optional<int64_t> {
      auto it = symbols_.find(n);
      if (it == symbols_.end() || it->second.open) return std::nullopt;
      return it->second.value;
    };
  }
  std::function<bool(const std::string&)> defined() const {
    return [this](const std::string& n) { return symbols_.count(n) > 0; };
  }
  const std::string* intern(const std::string& name) { return &files_.emplace_back(name); }

  const AsmOptions& opts_;  // read in pass 1 only
  const bool open_;
  const uint64_t hbm_base_, hbm_align_;
  Program prog_;
  std::deque<std::string> files_;
  std::unordered_map<std::string, Symbol> symbols_;
  std::unordered_map<std::string, int> regs_;  // .reg aliases
  std::unordered_map<const InstrDesc*, Layout> layouts_;  // parse_positional's, by instruction
  std::vector<PendingInstr> pending_;
  std::vector<Expr> exprs_;  // the operand expressions of pending_ (Operand::expr)
  std::vector<Loc> tensor_locs_;
  std::vector<bool> tensor_open_;  // by tensor: placed by place() (prepare())
  std::optional<ConstFill> fill_;
  std::vector<OpenRegion> regions_;  // open .region directives, innermost last
  uint64_t next_free_ = 0;  // auto-placed tensors start at or above this HBM address
  int include_depth_ = 0;
};

void Assembler::read_file(const std::string& text, const std::string& name) {
  const std::string* file = intern(name);
  std::vector<CondFrame> conds;
  const size_t open_regions = regions_.size();
  std::string_view rest(text);
  std::vector<Token> toks;  // each line's, in one buffer
  for (int lineno = 1; !rest.empty(); ++lineno) {  // the lines std::getline would give, without copying them
    const size_t nl = rest.find('\n');
    std::string_view s = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    lex_line(s, file, lineno, toks);
    line(toks, conds);
  }
  close_fill();
  if (!conds.empty()) fail(conds.back().loc, "'.if' without '.endif'");
  if (regions_.size() > open_regions) fail(regions_.back().loc, "'.region' without '.endregion'");
}

void Assembler::line(const std::vector<Token>& toks, std::vector<CondFrame>& conds) {
  bool active = conds.empty() || conds.back().active;
  bool labelled = toks[0].kind == Tok::Ident && toks[1].kind == Tok::Punct && toks[1].text == ":";
  const Token& head = toks[labelled ? 2 : 0];
  if (head.kind == Tok::End && !labelled) return;
  bool cond = head.kind == Tok::Ident &&
              (head.text == ".if" || head.text == ".elif" || head.text == ".else" || head.text == ".endif");
  if (!cond && !active) return;
  if (!(head.kind == Tok::Ident && head.text == ".data")) close_fill();
  Cursor c(toks);
  if (labelled) {
    const Token& label = c.next();
    if (active) define_label(label);
    c.next();
  }
  if (cond) return conditional(c, head, conds);
  if (!c.at_end()) statement(c);
}

// .if/.elif/.else/.endif. Expressions are evaluated only where the enclosing branch is active.
void Assembler::conditional(Cursor& c, const Token& head, std::vector<CondFrame>& conds) {
  const std::string& d = head.text;
  c.next();
  if (d == ".if") {
    bool parent = conds.empty() || conds.back().active;
    bool v = parent && eval_now(expr(c)) != 0;
    if (parent) c.expect_end();
    conds.push_back(CondFrame{head.loc, parent, v, v});
    return;
  }
  if (conds.empty()) fail(head.loc, "'" + d + "' without '.if'");
  CondFrame& f = conds.back();
  if (d == ".endif") {
    c.expect_end();
    conds.pop_back();
  } else if (f.seen_else) {
    fail(head.loc, "'" + d + "' after '.else'");
  } else if (d == ".else") {
    c.expect_end();
    f.active = f.parent_active && !f.taken;
    f.taken = f.seen_else = true;
  } else {  // .elif
    f.active = f.parent_active && !f.taken && eval_now(expr(c)) != 0;
    if (f.parent_active && !f.taken) c.expect_end();
    f.taken = f.taken || f.active;
  }
}

void Assembler::statement(Cursor& c) {
  const Token& head = c.peek();
  if (head.kind != Tok::Ident) fail(head.loc, "expected an instruction or directive, got " + describe(head));
  if (head.text.starts_with(".")) return directive(c, head);
  instruction(c, head);
}

void Assembler::define_symbol(const std::string& name, Symbol s) {
  auto it = symbols_.find(name);
  if (it == symbols_.end()) {
    symbols_.emplace(name, s);
    return;
  }
  Symbol& old = it->second;
  if (s.kind == Symbol::Set && old.kind == Symbol::Define) return;  // -D wins over .set
  if (s.kind == Symbol::Set && old.kind == Symbol::Set) {
    old.value = s.value;  // re-definition: later lines see the new value
    return;
  }
  std::string where = old.loc.file ? " at " + *old.loc.file + ":" + std::to_string(old.loc.line) : "";
  if (s.kind == old.kind && s.kind == Symbol::Label) fail(s.loc, "duplicate label '" + printable(name) + "' (first" + where + ")");
  if (s.kind == old.kind && s.kind == Symbol::Tensor)
    fail(s.loc, "duplicate tensor '" + printable(name) + "' (first" + where + ")");
  fail(s.loc, "'" + printable(name) + "' is already defined as " + kind_name(old.kind) + where);
}

void Assembler::define_label(const Token& t) {
  if (open_) return define_symbol(t.text, Symbol{Symbol::Label, static_cast<int64_t>(pending_.size()), t.loc, true});
  define_symbol(t.text, Symbol{Symbol::Label, static_cast<int64_t>(opts_.base_pc + pending_.size()), t.loc});
}

// ---- directives -----------------------------------------------------------------------------------------------

void Assembler::directive(Cursor& c, const Token& head) {
  const std::string d = c.next().text;
  if (d == ".set" || d == ".equ") return dir_set(c, false);
  if (d == ".default") return dir_set(c, true);
  if (d == ".reg") return dir_reg(c);
  if (d == ".input") return dir_tensor(c, TensorKind::Input);
  if (d == ".output") return dir_tensor(c, TensorKind::Output);
  if (d == ".const") return dir_tensor(c, TensorKind::Const);
  if (d == ".data") return dir_data(c, head);
  if (d == ".include") return dir_include(c, head);
  if (d == ".region") return dir_region(c, head);
  if (d == ".endregion") return dir_endregion(c, head);
  if (d == ".name") {
    prog_.name = c.expect_string("a program name").text;
    return c.expect_end();
  }
  if (d == ".cores") {  // `.cores N`: the cores that run the program (Program::cores)
    const Loc loc = c.peek().loc;
    const int64_t n = eval_now(expr(c));
    if (n < 1 || n > 1024) fail(loc, ".cores " + std::to_string(n) + " is outside 1..1024");
    prog_.cores = static_cast<uint32_t>(n);
    return c.expect_end();
  }
  if (d == ".ideal_bytes") {  // `.ideal_bytes N`: the HBM bytes the whole program cannot avoid (Program::ideal_bytes)
    const Loc loc = c.peek().loc;
    const double v = plain_number(c, "'.ideal_bytes'");
    if (v < 0) fail(loc, ".ideal_bytes is a count of bytes >= 0");
    prog_.ideal_bytes = v;
    return c.expect_end();
  }
  if (d == ".timing_only") {  // the program of a timing-only compile (Program::timing_only): consts have no data
    prog_.timing_only = true;
    return c.expect_end();
  }
  if (d == ".error") {
    std::string msg = c.at_end() ? "error" : c.expect_string("a message").text;
    c.expect_end();
    fail(head.loc, msg);
  }
  fail(head.loc, "unknown directive '" + d + "'");
}

// `.set NAME, expr` (re)defines NAME unless a -D gave it; `.default NAME, expr` only defines it if nothing has.
void Assembler::dir_set(Cursor& c, bool only_if_undefined) {
  const Token& name = c.expect_ident("a symbol name");
  c.expect(",");
  Expr e = expr(c);
  c.expect_end();
  auto it = symbols_.find(name.text);
  if (it != symbols_.end() && (it->second.kind == Symbol::Define || only_if_undefined)) return;  // not evaluated
  define_symbol(name.text, Symbol{Symbol::Set, eval_now(e), name.loc});
}

void Assembler::dir_reg(Cursor& c) {
  const Token& name = c.expect_ident("an alias name");
  if (indexed_name(name.text, 'r') >= 0) fail(name.loc, "cannot alias register name '" + printable(name.text) + "'");
  c.expect(",");
  int r = parse_register(c);
  c.expect_end();
  regs_[name.text] = r;
}

std::vector<int64_t> Assembler::parse_dims(Cursor& c) {
  std::vector<int64_t> dims;
  c.expect("[");
  if (c.accept("]")) return dims;
  do {
    Loc at = c.peek().loc;
    int64_t v = eval_now(expr(c));
    if (v < 0) fail(at, "dimension " + std::to_string(v) + " is negative");
    dims.push_back(v);
  } while (c.accept(","));
  c.expect("]");
  return dims;
}

// HBM address of a new tensor: `@ expr`, else AsmOptions::tensor_addr, else the next free aligned address.
uint64_t Assembler::place(const std::string& name, uint64_t bytes, const std::optional<Expr>& at) {
  uint64_t addr;
  if (at) {
    int64_t v = eval_now(*at);
    if (v < 0) fail(at->loc, "address " + std::to_string(v) + " is negative");
    addr = static_cast<uint64_t>(v);
  } else if (auto it = opts_.tensor_addr.find(name); it != opts_.tensor_addr.end()) {
    addr = it->second;
  } else {
    uint64_t align = std::max<uint64_t>(hbm_align_, 1);
    addr = (next_free_ + align - 1) / align * align;
  }
  next_free_ = std::max(next_free_, addr + bytes);
  return addr;
}

void Assembler::dir_tensor(Cursor& c, TensorKind kind) {
  TensorDecl t;
  t.kind = kind;
  const Token& name = c.peek().kind == Tok::String ? c.next() : c.expect_ident("a tensor name");
  t.name = name.text;
  c.expect(",");
  t.dtype = parse_dtype(c);
  c.expect(",");
  Loc dims_at = c.peek().loc;
  t.shape = parse_dims(c);
  try {
    check_tensor(t);  // its size (the address comes below)
  } catch (const Error& e) {
    fail(dims_at, e.what());
  }
  std::optional<Expr> at, offset;
  if (c.accept("@")) {
    // `@ vmem ADDR` places the tensor in VMEM (at a fixed address); `@ hbm ADDR` or `@ ADDR` in HBM.
    const Token& space = c.peek();
    bool keyword = space.kind == Tok::Ident && (space.text == "vmem" || space.text == "hbm") &&
                   (c.peek(1).kind == Tok::Number || c.peek(1).kind == Tok::Ident || c.is("(", 1));
    if (keyword && c.next().text == "vmem") {
      if (kind == TensorKind::Const) fail(space.loc, "a const tensor lives in HBM, not VMEM");
      t.space = MemSpace::Vmem;
    }
    at = expr(c);
  }
  if (kind == TensorKind::Const && c.accept(",")) {
    const Token& kw = c.expect_ident("'offset='");
    if (kw.text != "offset") fail(kw.loc, "expected 'offset=', got " + describe(kw));
    c.expect("=");
    offset = expr(c);
  }
  c.expect_end();
  const bool open = open_ && t.space == MemSpace::Hbm && !at;  // placed by place()
  if (t.space == MemSpace::Vmem) {
    int64_t v = eval_now(*at);
    if (v < 0) fail(at->loc, "address " + std::to_string(v) + " is negative");
    t.addr = static_cast<uint64_t>(v);
  } else if (!open) {
    t.addr = place(t.name, t.bytes(), at);
  }
  try {
    check_tensor(t);
  } catch (const Error& e) {
    fail(name.loc, e.what());
  }
  if (open)
    define_symbol(t.name, Symbol{Symbol::Tensor, static_cast<int64_t>(prog_.tensors.size()), name.loc, true});
  else
    define_symbol(t.name, Symbol{Symbol::Tensor, static_cast<int64_t>(t.addr), name.loc});
  if (kind == TensorKind::Const) {
    if (offset) {
      int64_t v = eval_now(*offset);
      if (v < 0) fail(offset->loc, "offset " + std::to_string(v) + " is negative");
      t.const_offset = static_cast<uint64_t>(v);
    } else {
      t.const_offset = prog_.const_data.size();
      fill_ = ConstFill{prog_.tensors.size(), name.loc};
    }
  }
  prog_.tensors.push_back(std::move(t));
  tensor_locs_.push_back(name.loc);
  tensor_open_.push_back(open);
}

// .data "HEX": bytes of the .const just declared, or (with no .const waiting) raw constant data that .const
// declarations with `offset=` point into.
void Assembler::dir_data(Cursor& c, const Token& head) {
  const Token& s = c.expect_string("hex bytes");
  c.expect_end();
  int hi = -1;
  uint64_t n = 0;
  for (size_t i = 0; i < s.text.size(); ++i) {
    char ch = s.text[i];
    if (std::isspace(static_cast<unsigned char>(ch))) continue;
    int v = std::isdigit(static_cast<unsigned char>(ch)) ? ch - '0'
            : (ch >= 'a' && ch <= 'f')                   ? ch - 'a' + 10
            : (ch >= 'A' && ch <= 'F')                   ? ch - 'A' + 10
                                                         : -1;
    if (v < 0) fail(s.loc, std::string("bad hex digit '") + ch + "' in .data");
    if (hi < 0) {
      hi = v;
    } else {
      prog_.const_data.push_back(static_cast<uint8_t>(hi * 16 + v));
      hi = -1, ++n;
    }
  }
  if (hi >= 0) fail(s.loc, ".data needs an even number of hex digits");
  if (!fill_) return;
  const TensorDecl& t = prog_.tensors[fill_->tensor];
  fill_->got += n;
  if (fill_->got > t.bytes())
    fail(head.loc, "too much data for const '" + printable(t.name) + "': needs " + std::to_string(t.bytes()) + " bytes, got " +
                       std::to_string(fill_->got));
}

void Assembler::close_fill() {
  if (!fill_) return;
  const TensorDecl& t = prog_.tensors[fill_->tensor];
  if (fill_->got != t.bytes())
    fail(fill_->loc, "const '" + printable(t.name) + "' needs " + std::to_string(t.bytes()) + " bytes of .data, got " +
                         std::to_string(fill_->got));
  fill_.reset();
}

void Assembler::dir_include(Cursor& c, const Token& head) {
  const Token& s = c.expect_string("a file name");
  c.expect_end();
  constexpr int kMaxDepth = 32;
  if (include_depth_ >= kMaxDepth) fail(s.loc, "includes nested more than 32 deep (an include loop?)");
  // Errors name a file found by the default resolver by its path, one from a custom resolver as written.
  // The included file is named relative to the including one (so a file it includes resolves against it too,
  // with the default resolver and a custom one alike).
  std::string shown = include_path(s.text, *head.loc.file);
  std::optional<std::string> text = opts_.include ? opts_.include(s.text, *head.loc.file) : read_text(shown);
  if (!text) fail(s.loc, "cannot include '" + printable(s.text) + "': file not found");
  ++include_depth_;
  read_file(*text, shown);
  --include_depth_;
}

// `.region KIND, "name"[, flops=N][, bytes=N][, ideal_bytes=N]` ... `.endregion`: a named range of the
// instructions between them (Program::regions). flops=, bytes= and ideal_bytes= (Region's fields of those names;
// 0 when absent) take a plain decimal number, integer or floating point (1024, 2.5e9), not an expression.
void Assembler::dir_region(Cursor& c, const Token& head) {
  const Token& kind = c.expect_ident("a region kind (node, kernel, ...)");
  if (kind.text.find('.') != std::string::npos) fail(kind.loc, "a region kind is letters, digits and '_'");
  c.expect(",");
  const Token& name = c.peek().kind == Tok::String ? c.next() : c.expect_ident("a region name");
  Region r{kind.text, name.text, 0, 0};
  const std::array<std::pair<const char*, double*>, 3> fields{
      {{"flops", &r.flops}, {"bytes", &r.bytes}, {"ideal_bytes", &r.ideal_bytes}}};
  std::array<bool, fields.size()> seen{};
  while (c.accept(",")) {
    const Token& kw = c.expect_ident("'flops=', 'bytes=' or 'ideal_bytes='");
    const auto f = std::find_if(fields.begin(), fields.end(), [&](const auto& e) { return kw.text == e.first; });
    if (f == fields.end()) fail(kw.loc, "expected 'flops=', 'bytes=' or 'ideal_bytes=', got " + describe(kw));
    if (std::exchange(seen[static_cast<size_t>(f - fields.begin())], true))
      fail(kw.loc, "'" + printable(kw.text) + "=' given twice");
    c.expect("=");
    *f->second = plain_number(c, "'" + printable(kw.text) + "='");
  }
  c.expect_end();
  regions_.push_back(OpenRegion{prog_.regions.size(), head.loc});
  r.begin = r.end = static_cast<uint32_t>(pending_.size());
  prog_.regions.push_back(std::move(r));
}

// A plain decimal number, integer or floating point (1024, 2.5e9), finite, not an expression (for `what`).
double Assembler::plain_number(Cursor& c, const std::string& what) {
  const Token& num = c.next();
  double v = 0;
  const char* end = num.text.data() + num.text.size();
  auto [ptr, ec] = std::from_chars(num.text.data(), end, v, std::chars_format::general);
  if (num.kind != Tok::Number || ec != std::errc() || ptr != end || !std::isfinite(v))
    fail(num.loc, "expected a number for " + what + ", got " + describe(num));
  return v;
}

void Assembler::dir_endregion(Cursor& c, const Token& head) {
  c.expect_end();
  if (regions_.empty()) fail(head.loc, "'.endregion' without '.region'");
  Region& r = prog_.regions[regions_.back().index];
  r.end = static_cast<uint32_t>(pending_.size());
  if (r.end == r.begin) fail(head.loc, "region '" + printable(r.name) + "' holds no instructions");
  regions_.pop_back();
}

// ---- instructions ---------------------------------------------------------------------------------------------

void Assembler::instruction(Cursor& c, const Token& mn) {
  c.next();
  const Pseudo* pseudo = nullptr;
  const InstrDesc* d = describe_mnemonic(mn.text);
  const InstrDesc* parse_as = d ? d : pseudo_desc(mn.text, &pseudo);
  if (!parse_as) fail(mn.loc, "unknown instruction '" + printable(mn.text) + "'");
  if (pseudo) d = describe_mnemonic(pseudo->base);
  PendingInstr pi{d, {}, mn.loc};
  parse_positional(c, *parse_as, pi);
  if (pseudo)
    for (size_t i = 0; i < pseudo->fixed.size(); ++i) pi.ops[pseudo->keep + i].value = pseudo->fixed[i];
  pending_.push_back(std::move(pi));
}

Cls Assembler::looks_like(const Cursor& c, const InstrDesc& d) const {
  const Token& t = c.peek();
  if (t.kind == Tok::End) return Cls::End;
  if (t.kind == Tok::Number || (t.kind == Tok::Punct && t.text != ",")) return Cls::Value;
  if (t.kind != Tok::Ident) return Cls::Other;
  if (c.is("=", 1)) return Cls::Keyword;
  if (c.is("(", 1)) return Cls::Value;
  if (regs_.count(t.text) || indexed_name(t.text, 'r') >= 0) return Cls::Reg;
  if (indexed_name(t.text, 's') >= 0) return Cls::Sem;
  if (dtype_from_name(t.text)) return Cls::DType;
  int i = d.operand_index(t.text);
  if (i >= 0 && d.operands[i].kind == OperandKind::Flag) return Cls::Flag;
  return Cls::Other;  // an unknown name: a symbol, or a misspelt register, data type or flag
}

Layout layout_of(const InstrDesc& d) {
  Layout l;
  for (int i = 0; i < d.num_operands; ++i)
    if (!is_named(d, d.operands[i])) l.pos.push_back(i);
  for (int i : l.pos) {
    Cls k = class_of(d.operands[i].kind);
    if (l.groups.empty() || l.groups.back().cls != k) l.groups.push_back(Group{k});
    l.groups.back().targets &= d.operands[i].kind == OperandKind::Target;
    l.group_of.push_back(static_cast<int>(l.groups.size()) - 1);
    l.index_in_group.push_back(l.groups.back().count++);
  }
  return l;
}

void Assembler::parse_positional(Cursor& c, const InstrDesc& d, PendingInstr& pi) {
  auto cached = layouts_.find(&d);
  if (cached == layouts_.end()) cached = layouts_.emplace(&d, layout_of(d)).first;
  const Layout& l = cached->second;
  const std::vector<int>& pos = l.pos;
  const std::vector<Group>& groups = l.groups;
  const std::vector<int>&group_of = l.group_of, &index_in_group = l.index_in_group;
  auto count_error = [&](const Group& g, int got) {
    fail(c.peek().loc, "'" + d.mnemonic + "' expects " + noun(g, g.count) + ", got " + std::to_string(got));
  };
  for (size_t k = 0; k < pos.size(); ++k) {
    if (k > 0 && !c.at_end() && !c.accept(",")) fail(c.peek().loc, "expected ',', got " + describe(c.peek()));
    int g = group_of[k], j = index_in_group[k];
    Cls want = groups[g].cls, got = looks_like(c, d);
    if (got == want || got == Cls::Other) {
      parse_operand(c, d.operands[pos[k]], pi.ops[pos[k]]);
    } else if (got == Cls::End || got == Cls::Flag || got == Cls::Keyword ||
               (g + 1 < static_cast<int>(groups.size()) && got == groups[g + 1].cls)) {
      count_error(groups[g], j);
    } else if (j == 0 && g > 0 && got == groups[g - 1].cls) {
      count_error(groups[g - 1], groups[g - 1].count + 1);
    } else {
      parse_operand(c, d.operands[pos[k]], pi.ops[pos[k]]);  // reports what is wrong with it
    }
  }
  parse_named(c, d, pi, groups.empty() ? Group{Cls::Other} : groups.back());
}

// Flags and wait=/signal= keywords, in any order after the positional operands.
void Assembler::parse_named(Cursor& c, const InstrDesc& d, PendingInstr& pi, const Group& last) {
  std::vector<bool> seen(d.num_operands, false);
  bool first = last.count == 0;
  while (!c.at_end()) {
    if (!first && !c.is(",")) c.expect_end();
    if (!first) c.next();
    first = false;
    const Token& t = c.peek();
    Cls k = looks_like(c, d);
    if (k == Cls::End) fail(t.loc, "expected an operand after ','");
    if (k == last.cls && last.count > 0)
      fail(t.loc, "'" + d.mnemonic + "' expects " + noun(last, last.count) + ", got " + std::to_string(last.count + 1));
    if (k == Cls::Other && t.kind == Tok::Ident) fail(t.loc, "unknown flag '" + printable(t.text) + "' for '" + d.mnemonic + "'");
    if (k != Cls::Flag && k != Cls::Keyword)
      fail(t.loc, "unexpected " + describe(t) + " (too many operands for '" + d.mnemonic + "')");
    int i = d.operand_index(t.text);
    if (k == Cls::Keyword && (i < 0 || !is_named(d, d.operands[i])))
      fail(t.loc, "unknown operand '" + printable(t.text) + "=' for '" + d.mnemonic + "'");
    if (seen[i]) fail(t.loc, "duplicate operand '" + printable(t.text) + "'");
    seen[i] = true;
    c.next();
    if (k == Cls::Flag) {
      pi.ops[i].value = 1;
    } else if (d.operands[i].kind == OperandKind::Flag) {  // flag=EXPR: set when the expression is non-zero
      c.expect("=");
      pi.ops[i].value = eval_now(expr(c)) != 0;
    } else if (d.operands[i].kind == OperandKind::Key) {  // key=EXPR: an unsigned value of the field's width
      c.expect("=");
      const Loc loc = c.peek().loc;
      const int64_t v = eval_now(expr(c));
      const int64_t hi = (int64_t(1) << d.operands[i].width) - 1;
      if (v < 0 || v > hi)
        fail(loc, t.text + "=" + std::to_string(v) + " is outside 0.." + std::to_string(hi));
      pi.ops[i].value = v;
    } else {
      c.expect("=");
      pi.ops[i].value = parse_semaphore(c.next());
    }
  }
}

void Assembler::parse_operand(Cursor& c, const OperandDesc& o, Operand& out) {
  switch (o.kind) {
    case OperandKind::Reg: out.value = parse_register(c); break;
    case OperandKind::Sem: out.value = parse_semaphore(c.next()); break;
    case OperandKind::DType: out.value = static_cast<int64_t>(parse_dtype(c)); break;
    default:
      out.col = c.peek().loc.col;
      out.expr = static_cast<int32_t>(exprs_.size());
      exprs_.push_back(expr(c));
      break;
  }
}

// A data type by name (i8, bf16, ...), or an expression with its number (DT_BF16, IN_DT, ...).
DType Assembler::parse_dtype(Cursor& c) {
  const Token& t = c.peek();
  if (t.kind == Tok::Ident && !c.is("(", 1)) {
    if (auto dt = dtype_from_name(t.text)) {
      c.next();
      return *dt;
    }
    if (!symbols_.count(t.text)) fail(t.loc, "unknown data type '" + printable(t.text) + "'");
  }
  int64_t v = eval_now(expr(c));
  if (v < 0 || v >= kNumDTypes) fail(t.loc, "data type number " + std::to_string(v) + " is not one of DT_I8..DT_F8E4M3");
  return static_cast<DType>(v);
}

int Assembler::parse_register(Cursor& c) {
  const Token& t = c.next();
  if (t.kind != Tok::Ident) fail(t.loc, "expected a register, got " + describe(t));
  if (auto it = regs_.find(t.text); it != regs_.end()) return it->second;
  int r = indexed_name(t.text, 'r');
  if (r < 0 || r >= kNumRegs) fail(t.loc, "unknown register '" + printable(t.text) + "'");
  return r;
}

int Assembler::parse_semaphore(const Token& t) {
  int s = t.kind == Tok::Ident ? indexed_name(t.text, 's') : -1;
  if (s < 0 || s >= kNumSems) fail(t.loc, "unknown semaphore " + describe(t) + " (s0..s31)");
  return s;
}

// ---- pass 2 ---------------------------------------------------------------------------------------------------

void Assembler::check_consts(const Program& prog) const {
  for (size_t i = 0; i < prog.tensors.size(); ++i) {
    const TensorDecl& t = prog.tensors[i];
    uint64_t size = prog.const_data.size();
    if (t.kind == TensorKind::Const && !prog.timing_only &&
        (t.const_offset > size || t.bytes() > size - t.const_offset))
      fail(tensor_locs_[i], "const '" + printable(t.name) + "' (" + std::to_string(t.bytes()) + " bytes at offset " +
                                std::to_string(t.const_offset) + ") lies outside the constant data (" +
                                std::to_string(size) + " bytes)");
  }
  if (auto o = overlapping_tensors(prog)) {
    const TensorDecl &a = prog.tensors[o->first], &b = prog.tensors[o->second];
    fail(tensor_locs_[o->second], "tensor '" + printable(b.name) + "' [" + std::to_string(b.addr) + ", " +
                                      std::to_string(b.addr + b.bytes()) + ") overlaps tensor '" + printable(a.name) +
                                      "' [" + std::to_string(a.addr) + ", " + std::to_string(a.addr + a.bytes()) +
                                      ") in " + mem_space_name(b.space));
  }
}

void Assembler::encode_all(Program& prog, const Resolver& final_value) const {
  prog.code.reserve(prog.code.size() + pending_.size());
  prog.source.reserve(prog.source.size() + pending_.size());
  for (const PendingInstr& pi : pending_) {
    Instr in;
    in.op = pi.desc->op;
    for (int i = 0; i < pi.desc->num_operands; ++i) {
      const OperandDesc& o = pi.desc->operands[i];
      const Operand& op = pi.ops[i];
      in.f[i] = op.expr >= 0 ? eval(exprs_[op.expr], final_value) : op.value;
      if (op.expr >= 0 && !fits(o, in.f[i]))
        fail(Loc{pi.loc.file, pi.loc.line, op.col},
             "value " + std::to_string(in.f[i]) + " does not fit operand " + o.name + " (" + range_text(o) + ")");
    }
    prog.code.push_back(encode(in));
    std::string& where = prog.source.emplace_back();  // FILE:LINE, in one allocation
    const std::string line = std::to_string(pi.loc.line);
    where.reserve(pi.loc.file->size() + 1 + line.size());
    where.append(*pi.loc.file).append(1, ':').append(line);
  }
}

// The open tensors placed as place() in pass 1 would have (in declaration order, after every HBM tensor before
// them), then pass 2 with the open symbols at their values.
Program Assembler::place(const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc) const {
  Program prog = prog_;
  uint64_t next_free = hbm_base_;
  for (size_t i = 0; i < prog.tensors.size(); ++i) {
    TensorDecl& t = prog.tensors[i];
    if (t.space != MemSpace::Hbm) continue;
    if (tensor_open_[i]) {
      if (auto it = tensor_addr.find(t.name); it != tensor_addr.end()) {
        t.addr = it->second;
      } else {
        uint64_t align = std::max<uint64_t>(hbm_align_, 1);
        t.addr = (next_free + align - 1) / align * align;
      }
      try {
        check_tensor(t);
      } catch (const Error& e) {
        fail(tensor_locs_[i], e.what());
      }
    }
    next_free = std::max(next_free, t.addr + t.bytes());
  }
  check_consts(prog);
  encode_all(prog, [&](const std::string& n) -> std::optional<int64_t> {
    auto it = symbols_.find(n);
    if (it == symbols_.end()) return std::nullopt;
    const Symbol& s = it->second;
    if (!s.open) return s.value;
    if (s.kind == Symbol::Label) return static_cast<int64_t>(base_pc) + s.value;
    return static_cast<int64_t>(prog.tensors[static_cast<size_t>(s.value)].addr);
  });
  return prog;
}

}  // namespace

Program assemble(const std::string& source, const std::string& filename, const AsmOptions& opts) {
  return Assembler(opts).run(source, filename);
}

struct Prepared::State {
  explicit State(const AsmOptions& o) : assembler(o, true) {}
  Assembler assembler;
};

Prepared prepare(const std::string& source, const std::string& filename, const AsmOptions& opts) {
  auto state = std::make_shared<Prepared::State>(opts);
  state->assembler.first_pass(source, filename);
  Prepared p;
  p.state_ = std::move(state);
  return p;
}

Program Prepared::place(const std::map<std::string, uint64_t>& tensor_addr, uint64_t base_pc) const {
  if (!state_) throw Error("isa::Prepared::place: nothing prepared");
  return state_->assembler.place(tensor_addr, base_pc);
}

Program assemble_file(const std::string& path, const AsmOptions& opts) {
  std::optional<std::string> text = read_text(path);
  if (!text) throw Error("cannot open '" + path + "': " + std::strerror(errno));
  return assemble(*text, path, opts);
}

}  // namespace tpusim::isa
