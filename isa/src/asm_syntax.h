// Private to the isa library: the assembler's tokens and expressions (syntax in docs/isa.md, "Assembly language").
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tpusim::isa::asm_detail {

// A place in the source: 1-based line and column (in bytes). `file` outlives every Loc that points to it.
struct Loc {
  const std::string* file = nullptr;
  int line = 0;
  int col = 0;
};

// Throws isa::Error("FILE:LINE:COL: msg").
[[noreturn]] void fail(const Loc& at, const std::string& msg);

enum class Tok : uint8_t { Ident, Number, String, Punct, End, Bad };

struct Token {
  Tok kind = Tok::End;
  std::string text;  // String: the decoded value; Bad: the error message
  Loc loc;
};

// Splits one line into tokens; comments (`#` or `;` to the end of the line) are dropped and the last token is
// always End. Never throws: a malformed token becomes a Bad token, reported when a parser reaches it.
// The tokens go into `out`, replacing what it held (a caller reuses one buffer for its lines).
void lex_line(std::string_view line, const std::string* file, int lineno, std::vector<Token>& out);

// How a token reads in a message: 'r32', "end of line", "string \"...\"".
std::string describe(const Token& t);

// A read position in one line's tokens.
class Cursor {
 public:
  explicit Cursor(const std::vector<Token>& toks);
  // The token `ahead` places on (End past the last); reaching a Bad token reports its error.
  const Token& peek(size_t ahead = 0) const;
  const Token& next();
  bool at_end() const { return peek().kind == Tok::End; }
  bool is(std::string_view punct, size_t ahead = 0) const;
  bool accept(std::string_view punct);
  const Token& expect(std::string_view punct);
  const Token& expect_ident(const char* what);
  const Token& expect_string(const char* what);
  void expect_end() const;  // "trailing garbage 'x'"

 private:
  const std::vector<Token>& toks_;
  size_t bad_;  // the first Bad token's index, or toks_.size()
  size_t pos_ = 0;
};

// An integer expression, with every symbol that was known when it was parsed already folded into a number.
struct Expr {
  enum class Kind : uint8_t { Num, Sym, Unary, Binary, Call };
  Kind kind = Kind::Num;
  int64_t value = 0;
  std::string name;  // symbol, operator or function name
  std::vector<Expr> args;
  Loc loc;
};

// Looks a symbol up; nullopt when it is not defined (yet).
using Resolver = std::function<std::optional<int64_t>(const std::string& name)>;

// Parses an expression at the cursor; symbols that `known` resolves become numbers now, others stay symbols.
// `defined(NAME)` is 1 where `defined` says NAME is a symbol (which `known` may leave open); without it, where
// `known` resolves NAME.
Expr parse_expr(Cursor& c, const Resolver& known, const std::function<bool(const std::string&)>& defined = {});
// Evaluates, looking up the symbols left; an undefined one is an error at its token.
int64_t eval(const Expr& e, const Resolver& lookup);

}  // namespace tpusim::isa::asm_detail
