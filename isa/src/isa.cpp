#include "tpusim/isa/isa.h"

#include <algorithm>
#include <cctype>
#include <sstream>
#include <unordered_map>
#include <vector>

namespace tpusim::isa {
namespace {

OperandDesc parse_operand(std::string_view spec, const char* mnemonic) {
  auto colon = spec.find(':');
  if (colon == std::string_view::npos) throw Error(std::string("isa.def: operand without kind in ") + mnemonic);
  OperandDesc d{std::string(spec.substr(0, colon)), OperandKind::Reg, 0, 0};
  std::string_view k = spec.substr(colon + 1);
  if (k == "r") {
    d.kind = OperandKind::Reg, d.width = 5;
  } else if (k == "t") {
    d.kind = OperandKind::Target, d.width = 32;
  } else if (k == "d") {
    d.kind = OperandKind::DType, d.width = 3;
  } else if (k == "s") {
    d.kind = OperandKind::Sem, d.width = 5;
  } else if (k == "f") {
    d.kind = OperandKind::Flag, d.width = 1;
  } else if (!k.empty() && k[0] == 'k') {
    d.kind = OperandKind::Key;
    d.width = std::stoi(std::string(k.substr(1)));
  } else if (!k.empty() && (k[0] == 'i' || k[0] == 'u')) {
    d.kind = k[0] == 'i' ? OperandKind::Imm : OperandKind::UImm;
    d.width = std::stoi(std::string(k.substr(1)));
  } else {
    throw Error(std::string("isa.def: unknown operand kind in ") + mnemonic);
  }
  return d;
}

InstrDesc make_desc(Op op, uint8_t opcode, const char* mnemonic, Unit unit, const char* operands,
                    const char* semantics, const char* timing) {
  InstrDesc d{op, opcode, mnemonic, unit, {}, 0, semantics, timing};
  std::string spec = operands;
  if (unit != Unit::Core) spec += " wait:s signal:s";
  std::istringstream in(spec);
  std::string tok;
  int shift = 8;
  while (in >> tok) {
    if (d.num_operands == kMaxOperands) throw Error(std::string("isa.def: too many operands in ") + mnemonic);
    OperandDesc o = parse_operand(tok, mnemonic);
    o.shift = shift;
    shift += o.width;
    d.operands[d.num_operands++] = o;
  }
  if (shift > 64) throw Error(std::string("isa.def: operands of ") + mnemonic + " need more than 64 bits");
  return d;
}

struct Table {
  std::vector<InstrDesc> list;
  std::array<int, 256> by_opcode;
  std::unordered_map<std::string_view, int> by_mnemonic;  // views of list's mnemonics
  Table() {
    by_opcode.fill(-1);
#define X(ENUM, OPCODE, MNEMONIC, UNIT, OPERANDS, SEMANTICS, TIMING) \
  list.push_back(make_desc(Op::ENUM, OPCODE, MNEMONIC, Unit::UNIT, OPERANDS, SEMANTICS, TIMING));
#include "tpusim/isa/isa.def"
#undef X
    for (size_t i = 0; i < list.size(); ++i) {
      if (by_opcode[list[i].opcode] != -1) throw Error("isa.def: opcode used twice: " + list[i].mnemonic);
      by_opcode[list[i].opcode] = static_cast<int>(i);
      by_mnemonic.emplace(list[i].mnemonic, static_cast<int>(i));  // the first of a mnemonic, as a search finds
    }
  }
};

const Table& table() {
  static const Table t;
  return t;
}

uint64_t mask(int width) { return width >= 64 ? ~0ull : ((1ull << width) - 1); }

}  // namespace

std::string printable(std::string_view text, size_t max) {
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < text.size() && i < max; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c == '\\') out += "\\\\";
    else if (c >= 0x20 && c < 0x7f) out += static_cast<char>(c);
    else out += std::string("\\x") + hex[c >> 4] + hex[c & 15];
  }
  if (text.size() > max) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

const char* unit_name(Unit u) {
  switch (u) {
    case Unit::Core: return "core";
    case Unit::DmaIn: return "dmain";
    case Unit::DmaOut: return "dmaout";
    case Unit::Mxu: return "mxu";
    case Unit::Vpu: return "vpu";
  }
  return "?";
}

int dtype_size(DType t) {
  switch (t) {
    case DType::I8:
    case DType::F8E4M3: return 1;
    case DType::BF16: return 2;
    case DType::I32:
    case DType::F32: return 4;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::I8: return "i8";
    case DType::I32: return "i32";
    case DType::BF16: return "bf16";
    case DType::F32: return "f32";
    case DType::F8E4M3: return "f8e4m3";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "i8" || n == "int8") return DType::I8;
  if (n == "i32" || n == "int32") return DType::I32;
  if (n == "bf16" || n == "bfloat16") return DType::BF16;
  if (n == "f32" || n == "fp32" || n == "float32") return DType::F32;
  if (n == "f8e4m3" || n == "fp8" || n == "e4m3" || n == "float8_e4m3fn") return DType::F8E4M3;
  return std::nullopt;
}

const std::vector<const char*>& dtype_aliases() {
  static const std::vector<const char*> a = {"int8", "int32", "bfloat16", "fp32", "float32", "fp8", "e4m3",
                                             "float8_e4m3fn"};
  return a;
}

int InstrDesc::operand_index(std::string_view name) const {
  for (int i = 0; i < num_operands; ++i)
    if (operands[i].name == name) return i;
  return -1;
}

std::span<const InstrDesc> instructions() { return table().list; }

const InstrDesc& describe(Op op) { return *describe_opcode(static_cast<uint8_t>(op)); }

const InstrDesc* describe_opcode(uint8_t opcode) {
  int i = table().by_opcode[opcode];
  return i < 0 ? nullptr : &table().list[i];
}

const InstrDesc* describe_mnemonic(std::string_view m) {
  const Table& t = table();
  auto it = t.by_mnemonic.find(m);
  return it == t.by_mnemonic.end() ? nullptr : &t.list[static_cast<size_t>(it->second)];
}

Word encode(const Instr& in) {
  const InstrDesc& d = in.desc();
  Word w = d.opcode;
  for (int i = 0; i < d.num_operands; ++i) {
    const OperandDesc& o = d.operands[i];
    int64_t v = in.f[i];
    bool fits;
    if (o.kind == OperandKind::Imm) {
      int64_t lo = -(int64_t(1) << (o.width - 1)), hi = (int64_t(1) << (o.width - 1)) - 1;
      fits = v >= lo && v <= hi;
    } else if (o.kind == OperandKind::DType) {
      fits = v >= 0 && v < kNumDTypes;
    } else {
      fits = v >= 0 && static_cast<uint64_t>(v) <= mask(o.width);
    }
    if (!fits)
      throw Error(d.mnemonic + ": operand " + o.name + " = " + std::to_string(v) + " does not fit in " +
                  std::to_string(o.width) + " bits");
    w |= (static_cast<uint64_t>(v) & mask(o.width)) << o.shift;
  }
  return w;
}

Instr decode(Word w) {
  const InstrDesc* d = describe_opcode(static_cast<uint8_t>(w & 0xff));
  if (!d) {
    std::ostringstream s;
    s << "unknown opcode 0x" << std::hex << (w & 0xff) << " in instruction word 0x" << w;
    throw Error(s.str());
  }
  Instr in;
  in.op = d->op;
  uint64_t used = 0xff;
  for (int i = 0; i < d->num_operands; ++i) {
    const OperandDesc& o = d->operands[i];
    uint64_t raw = (w >> o.shift) & mask(o.width);
    used |= mask(o.width) << o.shift;
    if (o.kind == OperandKind::Imm && o.width < 64 && (raw >> (o.width - 1)) & 1)
      in.f[i] = static_cast<int64_t>(raw | ~mask(o.width));
    else
      in.f[i] = static_cast<int64_t>(raw);
    if (o.kind == OperandKind::DType && in.f[i] >= kNumDTypes) {
      std::ostringstream s;
      s << d->mnemonic << ": invalid data type " << raw << " in instruction word 0x" << std::hex << w;
      throw Error(s.str());
    }
  }
  if (w & ~used) {
    std::ostringstream s;
    s << d->mnemonic << ": bits set outside every field in instruction word 0x" << std::hex << w;
    throw Error(s.str());
  }
  return in;
}

std::string format(const Instr& in) {
  const InstrDesc& d = in.desc();
  std::string out = d.mnemonic;
  bool first = true;
  auto sep = [&] {
    out += first ? " " : ", ";
    first = false;
  };
  for (int i = 0; i < d.num_operands; ++i) {
    const OperandDesc& o = d.operands[i];
    int64_t v = in.f[i];
    switch (o.kind) {
      case OperandKind::Reg: sep(), out += 'r', out += std::to_string(v); break;
      case OperandKind::Imm:
      case OperandKind::UImm:
      case OperandKind::Target: sep(), out += std::to_string(v); break;
      case OperandKind::DType: sep(), out += dtype_name(static_cast<DType>(v)); break;
      case OperandKind::Flag:
        if (v) sep(), out += o.name;
        break;
      case OperandKind::Key:
        if (v) sep(), out += o.name + "=" + std::to_string(v);
        break;
      case OperandKind::Sem:
        // The wait/signal operands of unit instructions are keywords; sem.set's semaphore is positional.
        if (d.unit != Unit::Core) {
          if (v) sep(), out += o.name + "=s" + std::to_string(v);
        } else {
          sep(), out += 's', out += std::to_string(v);
        }
        break;
    }
  }
  return out;
}

}  // namespace tpusim::isa
