// The disassembler: text that assemble() (with the default AsmOptions, base_pc 0) turns back into an identical
// Program (regions as `.region`/`.endregion` around their instructions, with flops=, bytes= and ideal_bytes= when
// not 0), except `source`, which then names the disassembly's own lines. Instructions come from isa::format;
// branch targets stay absolute instruction indices, so no labels are needed.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <sstream>

#include "tpusim/isa/assembler.h"

namespace tpusim::isa {
namespace {

constexpr size_t kDataBytesPerLine = 64;

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\', out += static_cast<char>(ch);
    } else if (ch >= 0x20 && ch < 0x7f) {
      out += static_cast<char>(ch);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    }
  }
  return out + "\"";
}

// For comments: control characters (a newline would end the comment) become '?'.
std::string printable(std::string s) {
  for (char& ch : s)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return s;
}

bool is_identifier(const std::string& s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (unsigned char ch : s)
    if (!std::isalnum(ch) && ch != '_' && ch != '.') return false;
  return true;
}

// The shortest decimal text that reads back as exactly `v` (for `.region`'s flops= and bytes=).
std::string shortest(double v) {
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return ec == std::errc() ? std::string(buf, end) : std::string("0");
}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

void emit_data(std::ostream& out, const std::vector<uint8_t>& bytes, uint64_t from, uint64_t n) {
  static const char digits[] = "0123456789abcdef";
  for (uint64_t i = 0; i < n; i += kDataBytesPerLine) {
    std::string line;
    for (uint64_t k = i; k < std::min(n, i + kDataBytesPerLine); ++k) {
      line += digits[bytes[from + k] >> 4];
      line += digits[bytes[from + k] & 15];
    }
    out << ".data \"" << line << "\"\n";
  }
}

// True when the const tensors' data lies back to back in declaration order and fills const_data exactly:
// then each .const is followed by its own .data lines. Otherwise the whole constant data is written first and
// each .const points into it with `offset=`.
bool consts_in_order(const Program& p) {
  uint64_t next = 0;
  for (const auto& t : p.tensors) {
    if (t.kind != TensorKind::Const) continue;
    if (t.const_offset != next) return false;
    next += t.bytes();
  }
  return next == p.const_data.size();
}

void emit_tensor(std::ostream& out, const Program& p, const TensorDecl& t, bool in_order) {
  out << "." << tensor_kind_name(t.kind) << " " << (is_identifier(t.name) ? t.name : quote(t.name)) << ", "
      << dtype_name(t.dtype) << ", [";
  for (size_t i = 0; i < t.shape.size(); ++i) out << (i ? ", " : "") << t.shape[i];
  out << "] @ " << (t.space == MemSpace::Vmem ? "vmem " : "") << hex(t.addr);
  if (t.kind == TensorKind::Const && !in_order) out << ", offset=" << t.const_offset;
  out << "\n";
  if (t.kind == TensorKind::Const && in_order) emit_data(out, p.const_data, t.const_offset, t.bytes());
}

}  // namespace

std::string disassemble(const Program& p) {
  std::ostringstream out;
  out << "# tpusim program: " << p.code.size() << " instructions, " << p.tensors.size() << " tensors, "
      << p.const_data.size() << " bytes of constant data\n";
  if (!p.name.empty()) out << ".name " << quote(p.name) << "\n";
  if (p.cores != 1) out << ".cores " << p.cores << "\n";
  if (p.timing_only) out << ".timing_only\n";
  if (p.ideal_bytes != 0) out << ".ideal_bytes " << shortest(p.ideal_bytes) << "\n";
  bool in_order = consts_in_order(p);
  if (!in_order) emit_data(out, p.const_data, 0, p.const_data.size());
  for (const auto& t : p.tensors) emit_tensor(out, p, t, in_order);
  try {
    validate_regions(p);
  } catch (const Error& e) {
    throw Error(std::string("disassemble: ") + e.what());
  }
  size_t next_region = 0;
  std::vector<uint32_t> open_ends;  // ends of the open regions, innermost last
  for (size_t pc = 0; pc < p.code.size(); ++pc) {
    for (; next_region < p.regions.size() && p.regions[next_region].begin == pc; ++next_region) {
      const Region& r = p.regions[next_region];
      out << std::string(2 * open_ends.size(), ' ') << ".region " << r.kind << ", " << quote(r.name);
      if (r.flops != 0) out << ", flops=" << shortest(r.flops);
      if (r.bytes != 0) out << ", bytes=" << shortest(r.bytes);
      if (r.ideal_bytes != 0) out << ", ideal_bytes=" << shortest(r.ideal_bytes);
      out << "\n";
      open_ends.push_back(r.end);
    }
    Instr in;
    try {
      in = decode(p.code[pc]);
    } catch (const Error& e) {
      throw Error("disassemble: pc " + std::to_string(pc) + ": " + e.what());
    }
    std::string line = "    " + format(in);
    line.resize(std::max<size_t>(line.size() + 1, 48), ' ');
    out << line << "# pc " << pc;
    if (pc < p.source.size() && !p.source[pc].empty()) out << " (" << printable(p.source[pc]) << ")";
    out << "\n";
    for (; !open_ends.empty() && open_ends.back() == pc + 1; open_ends.pop_back())
      out << std::string(2 * (open_ends.size() - 1), ' ') << ".endregion\n";
  }
  return out.str();
}

}  // namespace tpusim::isa
