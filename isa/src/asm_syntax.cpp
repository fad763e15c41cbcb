// The assembler's lexer and expression language.
#include "asm_syntax.h"

#include <cctype>
#include <cstdlib>
#include <limits>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/numerics.h"

namespace tpusim::isa::asm_detail {

void fail(const Loc& at, const std::string& msg) {
  throw Error((at.file ? *at.file : std::string("<input>")) + ":" + std::to_string(at.line) + ":" +
              std::to_string(at.col) + ": " + msg);
}

// ---- lexer --------------------------------------------------------------------------------------------------
namespace {

// ASCII classes (as <cctype>'s in the C locale, whatever the process's locale is).
bool is_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }
bool is_space(char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); }  // \t \n \v \f \r
bool ident_start(char ch) { return is_alpha(ch) || ch == '_' || ch == '.'; }
bool ident_char(char ch) { return ident_start(ch) || is_digit(ch); }

// The operators and punctuation, two characters or one.
constexpr std::string_view kPuncts2[] = {"<<", ">>", "<=", ">=", "==", "!=", "&&", "||"};
constexpr std::string_view kPuncts1 = "()[],:@=+-*/%~!<>&|^";

// The length of the punctuation token at s[i] (the longest: "<<" wins over "<"), or 0 if there is none.
size_t punct_length(std::string_view s, size_t i) {
  if (i + 1 < s.size())
    for (std::string_view p : kPuncts2)
      if (s[i] == p[0] && s[i + 1] == p[1]) return 2;
  return kPuncts1.find(s[i]) != std::string_view::npos ? 1 : 0;
}

int hex_value(char ch) {
  if (ch >= '0' && ch <= '9') return ch - '0';
  if (ch >= 'a' && ch <= 'f') return ch - 'a' + 10;
  if (ch >= 'A' && ch <= 'F') return ch - 'A' + 10;
  return -1;
}

// Reads a string literal starting at the opening quote; returns the position after it, or npos on an error
// (message in `out`).
size_t lex_string(std::string_view s, size_t i, std::string& out) {
  out.clear();
  for (++i; i < s.size(); ++i) {
    char ch = s[i];
    if (ch == '"') return i + 1;
    if (ch != '\\') {
      out += ch;
      continue;
    }
    if (++i == s.size()) break;
    switch (s[i]) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '0': out += '\0'; break;
      case '\\': out += '\\'; break;
      case '"': out += '"'; break;
      case 'x': {
        int hi = i + 1 < s.size() ? hex_value(s[i + 1]) : -1, lo = i + 2 < s.size() ? hex_value(s[i + 2]) : -1;
        if (hi < 0 || lo < 0) return out = "bad \\x escape (needs two hex digits)", std::string_view::npos;
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        break;
      }
      default: return out = std::string("unknown escape '\\") + s[i] + "'", std::string_view::npos;
    }
  }
  out = "unterminated string";
  return std::string_view::npos;
}

size_t lex_number(std::string_view s, size_t i) {
  bool hex = s.substr(i, 2) == "0x" || s.substr(i, 2) == "0X";
  size_t j = i;
  while (j < s.size() &&
         (ident_char(s[j]) || (!hex && (s[j] == '+' || s[j] == '-') && (s[j - 1] == 'e' || s[j - 1] == 'E'))))
    ++j;
  return j;
}

}  // namespace

void lex_line(std::string_view s, const std::string* file, int lineno, std::vector<Token>& out) {
  out.clear();
  size_t i = 0;
  auto loc = [&](size_t at) { return Loc{file, lineno, static_cast<int>(at) + 1}; };
  while (i < s.size()) {
    char ch = s[i];
    if (is_space(ch)) {
      ++i;
      continue;
    }
    if (ch == '#' || ch == ';') break;
    Token& t = out.emplace_back(Token{Tok::Punct, "", loc(i)});
    size_t j = i + 1;
    if (ident_start(ch)) {
      for (; j < s.size() && ident_char(s[j]);) ++j;
      t.kind = Tok::Ident, t.text.assign(s.data() + i, j - i);
    } else if (is_digit(ch)) {
      j = lex_number(s, i);
      t.kind = Tok::Number, t.text.assign(s.data() + i, j - i);
    } else if (ch == '"') {
      j = lex_string(s, i, t.text);
      t.kind = Tok::String;
      if (j == std::string_view::npos) t.kind = Tok::Bad, j = s.size();
    } else if (const size_t n = punct_length(s, i)) {
      t.kind = Tok::Punct, t.text.assign(s.data() + i, n), j = i + n;
    } else {
      t.kind = Tok::Bad, t.text = "unexpected character '" + printable(std::string_view(&ch, 1)) + "'";
    }
    i = j;
  }
  out.push_back(Token{Tok::End, "", loc(s.size())});
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case Tok::End: return "end of line";
    case Tok::String: return "string \"" + printable(t.text) + "\"";
    default: return "'" + printable(t.text) + "'";
  }
}

// ---- cursor -------------------------------------------------------------------------------------------------

Cursor::Cursor(const std::vector<Token>& toks) : toks_(toks), bad_(toks.size()) {
  for (size_t k = 0; k < toks.size(); ++k)
    if (toks[k].kind == Tok::Bad) {
      bad_ = k;
      break;
    }
}

const Token& Cursor::peek(size_t ahead) const {
  size_t i = std::min(pos_ + ahead, toks_.size() - 1);
  // The first Bad token at or before i (none lies before pos_: next() never passes one).
  if (bad_ <= i) fail(toks_[bad_].loc, toks_[bad_].text);
  return toks_[i];
}

const Token& Cursor::next() {
  const Token& t = peek();
  if (t.kind != Tok::End) ++pos_;
  return t;
}

bool Cursor::is(std::string_view punct, size_t ahead) const {
  const Token& t = peek(ahead);
  return t.kind == Tok::Punct && t.text == punct;
}

bool Cursor::accept(std::string_view punct) {
  if (!is(punct)) return false;
  next();
  return true;
}

const Token& Cursor::expect(std::string_view punct) {
  if (!is(punct)) fail(peek().loc, "expected '" + std::string(punct) + "', got " + describe(peek()));
  return next();
}

const Token& Cursor::expect_ident(const char* what) {
  if (peek().kind != Tok::Ident) fail(peek().loc, std::string("expected ") + what + ", got " + describe(peek()));
  return next();
}

const Token& Cursor::expect_string(const char* what) {
  if (peek().kind != Tok::String)
    fail(peek().loc, std::string("expected ") + what + " (a quoted string), got " + describe(peek()));
  return next();
}

void Cursor::expect_end() const {
  if (!at_end()) fail(peek().loc, "trailing garbage " + describe(peek()));
}

// ---- expressions --------------------------------------------------------------------------------------------
namespace {

int precedence(const Token& t) {
  if (t.kind != Tok::Punct) return 0;
  static const std::pair<std::string_view, int> table[] = {
      {"||", 1}, {"&&", 2}, {"|", 3},  {"^", 4},  {"&", 5}, {"==", 6}, {"!=", 6}, {"<", 7},  {"<=", 7},
      {">", 7},  {">=", 7}, {"<<", 8}, {">>", 8}, {"+", 9}, {"-", 9},  {"*", 10}, {"/", 10}, {"%", 10}};
  for (const auto& [op, p] : table)
    if (t.text == op) return p;
  return 0;
}

int64_t parse_int(const Token& t) {
  std::string_view s = t.text;
  int base = 10;
  if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X'))
    base = 16, s.remove_prefix(2);
  else if (s.size() > 2 && s[0] == '0' && (s[1] == 'b' || s[1] == 'B'))
    base = 2, s.remove_prefix(2);
  uint64_t v = 0;
  for (char ch : s) {
    int d = hex_value(ch);
    if (d < 0 || d >= base) fail(t.loc, "bad number '" + printable(t.text) + "'");
    if (v > (std::numeric_limits<uint64_t>::max() - d) / base) fail(t.loc, "number '" + printable(t.text) + "' is too large");
    v = v * base + d;
  }
  return static_cast<int64_t>(v);  // 64-bit patterns above INT64_MAX wrap, as in C
}

int64_t wrap(uint64_t v) { return static_cast<int64_t>(v); }

int64_t cdiv(int64_t a, int64_t b, const Loc& at) {
  if (b == 0) fail(at, "division by zero");
  if (b == -1) return wrap(0 - static_cast<uint64_t>(a));
  int64_t q = a / b;
  return q + ((a % b != 0) && ((a < 0) == (b < 0)));
}

int64_t binary(const std::string& op, int64_t a, int64_t b, const Loc& at) {
  uint64_t ua = static_cast<uint64_t>(a), ub = static_cast<uint64_t>(b);
  if (op == "+") return wrap(ua + ub);
  if (op == "-") return wrap(ua - ub);
  if (op == "*") return wrap(ua * ub);
  if (op == "/" || op == "%") {
    if (b == 0) fail(at, op == "/" ? "division by zero" : "modulo by zero");
    if (b == -1) return op == "/" ? wrap(0 - ua) : 0;  // INT64_MIN / -1 wraps
    return op == "/" ? a / b : a % b;
  }
  if (op == "<<" || op == ">>") {
    if (b < 0 || b > 63) fail(at, "shift count " + std::to_string(b) + " out of range (0..63)");
    return op == "<<" ? wrap(ua << b) : a >> b;
  }
  if (op == "&") return a & b;
  if (op == "|") return a | b;
  if (op == "^") return a ^ b;
  if (op == "<") return a < b;
  if (op == "<=") return a <= b;
  if (op == ">") return a > b;
  if (op == ">=") return a >= b;
  if (op == "==") return a == b;
  if (op == "!=") return a != b;
  if (op == "&&") return a && b;
  return a || b;
}

int64_t call(const std::string& fn, const std::vector<int64_t>& v, const Loc& at) {
  if (fn == "f32") return bits_from_f32(static_cast<float>(v[0]));
  if (fn == "min") return std::min(v[0], v[1]);
  if (fn == "max") return std::max(v[0], v[1]);
  if (fn == "cdiv") return cdiv(v[0], v[1], at);
  // align(a, b): a rounded up to a multiple of b.
  return wrap(static_cast<uint64_t>(cdiv(v[0], v[1], at)) * static_cast<uint64_t>(v[1]));
}

Expr num(int64_t v, const Loc& at) { return Expr{Expr::Kind::Num, v, "", {}, at}; }

// An operator node; its operands are moved in (an initializer list would copy whole subtrees).
template <class... Args>
Expr node(Expr::Kind kind, const Token& op, Args&&... args) {
  Expr e{kind, 0, op.text, {}, op.loc};
  e.args.reserve(sizeof...(args));
  (e.args.push_back(std::forward<Args>(args)), ...);
  return e;
}

// Folds a node whose operands are all numbers. One that fails (division by zero, ...) stays as it is, so the
// error appears only if it is evaluated: `X != 0 && N / X > 2` is fine with X = 0.
Expr fold(Expr e) {
  for (const Expr& a : e.args)
    if (a.kind != Expr::Kind::Num) return e;
  try {
    return num(eval(e, [](const std::string&) { return std::nullopt; }), e.loc);
  } catch (const Error&) {
    return e;
  }
}

class Parser {
 public:
  Parser(Cursor& c, const Resolver& known, const std::function<bool(const std::string&)>& defined)
      : c_(c), known_(known), defined_(defined) {}

  Expr expr(int min_prec = 1) {
    Expr lhs = unary();
    for (int p; (p = precedence(c_.peek())) >= min_prec;) {
      const Token& op = c_.next();
      if (++operators_ > kMaxOperators) fail(op.loc, "expression too long");
      Expr rhs = expr(p + 1);
      lhs = fold(node(Expr::Kind::Binary, op, std::move(lhs), std::move(rhs)));
    }
    return lhs;
  }

 private:
  // Every nested operand passes here, so this bounds the recursion (and the stack) on hostile input.
  Expr unary() {
    const Token& t = c_.peek();
    if (++depth_ > kMaxDepth) fail(t.loc, "expression nested too deeply");
    Expr e = c_.is("-") || c_.is("~") || c_.is("!") || c_.is("+")
                 ? (c_.next(), fold(node(Expr::Kind::Unary, t, unary())))
                 : primary();
    --depth_;
    return e;
  }

  Expr primary() {
    const Token& t = c_.next();
    if (t.kind == Tok::Number) return num(parse_int(t), t.loc);
    if (t.kind == Tok::Punct && t.text == "(") {
      Expr e = expr();
      c_.expect(")");
      return e;
    }
    if (t.kind != Tok::Ident) fail(t.loc, "expected an expression, got " + describe(t));
    if (c_.is("(")) return function(t);
    if (auto v = known_(t.text)) return num(*v, t.loc);
    return Expr{Expr::Kind::Sym, 0, t.text, {}, t.loc};
  }

  Expr function(const Token& name) {
    c_.expect("(");
    if (name.text == "sizeof") return sizeof_arg(name);
    if (name.text == "defined") return defined_arg(name);
    if (name.text == "f32")
      if (auto lit = float_literal()) return num(*lit, name.loc);
    int arity = name.text == "f32" ? 1 : 2;
    if (name.text != "f32" && name.text != "min" && name.text != "max" && name.text != "cdiv" && name.text != "align")
      fail(name.loc, "unknown function '" + printable(name.text) + "'");
    Expr e{Expr::Kind::Call, 0, name.text, {}, name.loc};
    while (true) {
      e.args.push_back(expr());
      if (!c_.accept(",")) break;
    }
    if (static_cast<int>(e.args.size()) != arity)
      fail(name.loc, "'" + printable(name.text) + "' takes " + std::to_string(arity) + " argument" + (arity == 1 ? "" : "s") +
                         ", got " + std::to_string(e.args.size()));
    c_.expect(")");
    return fold(std::move(e));
  }

  // sizeof(DTYPE): bytes of a data type, named (bf16) or given by its number (DT_BF16, a kernel's IN_DT).
  Expr sizeof_arg(const Token& name) {
    const Token& t = c_.peek();
    std::optional<DType> dt;
    if (t.kind == Tok::Ident && !c_.is("(", 1)) dt = dtype_from_name(t.text);
    if (dt) {
      c_.next();
    } else {
      Expr e = expr();
      if (e.kind != Expr::Kind::Num) fail(t.loc, "unknown data type '" + printable(e.kind == Expr::Kind::Sym ? e.name : t.text) + "'");
      if (e.value < 0 || e.value >= kNumDTypes)
        fail(t.loc, "data type number " + std::to_string(e.value) + " is not one of DT_I8..DT_F8E4M3");
      dt = static_cast<DType>(e.value);
    }
    c_.expect(")");
    return num(dtype_size(*dt), name.loc);
  }

  // defined(NAME): 1 if NAME is a symbol at this point of the source, else 0.
  Expr defined_arg(const Token& name) {
    const Token& t = c_.expect_ident("a symbol name");
    c_.expect(")");
    return num(defined_ ? defined_(t.text) : known_(t.text).has_value(), name.loc);
  }

  // f32(LITERAL): an optionally negative decimal or float literal, `inf` or `nan`, rounded to the nearest float.
  std::optional<int64_t> float_literal() {
    size_t k = c_.is("-") ? 1 : 0;
    const Token& t = c_.peek(k);
    bool word = t.kind == Tok::Ident && (t.text == "inf" || t.text == "nan");
    bool prefixed = t.text.size() > 1 && t.text[0] == '0' && is_alpha(t.text[1]) &&
                    t.text[1] != 'e' && t.text[1] != 'E';
    bool number = t.kind == Tok::Number && !prefixed;
    if (!(word || number) || !c_.is(")", k + 1)) return std::nullopt;
    std::string text = (k ? "-" : "") + t.text;
    char* end = nullptr;
    float f = std::strtof(text.c_str(), &end);
    if (*end != '\0') fail(t.loc, "bad number '" + printable(t.text) + "'");
    for (size_t i = 0; i <= k + 1; ++i) c_.next();
    return static_cast<int64_t>(bits_from_f32(f));
  }

  static constexpr int kMaxDepth = 200, kMaxOperators = 2000;
  Cursor& c_;
  const Resolver& known_;
  const std::function<bool(const std::string&)>& defined_;
  int depth_ = 0, operators_ = 0;
};

}  // namespace

Expr parse_expr(Cursor& c, const Resolver& known, const std::function<bool(const std::string&)>& defined) {
  return Parser(c, known, defined).expr();
}

int64_t eval(const Expr& e, const Resolver& lookup) {
  switch (e.kind) {
    case Expr::Kind::Num: return e.value;
    case Expr::Kind::Sym: {
      auto v = lookup(e.name);
      if (!v) fail(e.loc, "undefined symbol '" + printable(e.name) + "'");
      return *v;
    }
    case Expr::Kind::Unary: {
      int64_t v = eval(e.args[0], lookup);
      if (e.name == "-") return wrap(0 - static_cast<uint64_t>(v));
      if (e.name == "~") return ~v;
      if (e.name == "!") return !v;
      return v;
    }
    case Expr::Kind::Binary: {
      int64_t a = eval(e.args[0], lookup);
      if (e.name == "&&" && !a) return 0;  // short-circuit, as in C
      if (e.name == "||" && a) return 1;
      return binary(e.name, a, eval(e.args[1], lookup), e.loc);
    }
    case Expr::Kind::Call: {
      std::vector<int64_t> v;
      for (const Expr& a : e.args) v.push_back(eval(a, lookup));
      return call(e.name, v, e.loc);
    }
  }
  return 0;
}

}  // namespace tpusim::isa::asm_detail
