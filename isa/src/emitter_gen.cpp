// tpusim_isa_emitter_gen OUT.h: writes the typed emitter's instruction methods (tpusim/isa/emitter_ops.h, included
// by emitter.h) from the instruction table (isa.def), as tpusim_isa_doc writes docs/isa.md from it.
//
// Per instruction, one method named after its mnemonic ('.' -> '_'; a C++ keyword gets a trailing '_': `and_`):
// its positional operands are parameters of their kind's type (Reg, Sem, Label for a branch target, DType,
// int64_t for an immediate), in table order; its flags, keys and (for a unit's instruction) wait and signal are
// the fields of an options struct named after the instruction (DmaLdOptions), all defaulted, so a call names only
// those it sets: e.dma_ld(r1, r2, r3, r4, r5, r6, {.mcast = true, .wait = s1}). Every method takes the caller's
// file and line last (isa::Where, defaulted), which the program's source lines and every error name.
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>
#include <string>

#include "tpusim/isa/isa.h"

namespace {

using namespace tpusim::isa;

std::string identifier(const std::string& name) {
  static const std::set<std::string> keywords = {
      "and", "and_eq", "bitand", "bitor", "compl", "not", "not_eq", "or", "or_eq", "xor", "xor_eq", "default",
      "delete", "new", "int", "long", "short", "char", "bool", "float", "double", "signed", "unsigned", "const",
      "case", "switch", "if", "else", "for", "while", "do", "return", "break", "continue", "goto", "class",
      "struct", "union", "enum", "template", "typename", "this", "operator", "friend", "virtual", "static",
      "extern", "register", "auto", "volatile", "inline", "namespace", "using", "public", "private", "protected",
      "try", "catch", "throw", "true", "false", "nullptr", "sizeof", "typedef", "void", "export", "concept",
      "requires", "module", "import"};
  std::string out;
  for (char c : name) out += (c == '.') ? '_' : c;
  if (keywords.count(out)) out += '_';
  return out;
}

// "dma.ld" -> "DmaLdOptions"
std::string options_name(const std::string& mnemonic) {
  std::string out;
  bool up = true;
  for (char c : mnemonic) {
    if (c == '.' || c == '_') {
      up = true;
      continue;
    }
    out += up ? char(std::toupper(static_cast<unsigned char>(c))) : c;
    up = false;
  }
  return out + "Options";
}

bool optional_operand(const OperandDesc& o, const InstrDesc& d, int i) {
  const bool wait_signal = d.unit != Unit::Core && i >= d.num_operands - 2;
  return wait_signal || o.kind == OperandKind::Flag || o.kind == OperandKind::Key;
}

const char* param_type(OperandKind k) {
  switch (k) {
    case OperandKind::Reg: return "Reg";
    case OperandKind::Sem: return "Sem";
    case OperandKind::Target: return "Label";
    case OperandKind::DType: return "DType";
    case OperandKind::Flag: return "bool";
    default: return "int64_t";
  }
}

// The operand's value as the Instr field holds it.
std::string field(const OperandDesc& o, const std::string& expr) {
  switch (o.kind) {
    case OperandKind::Reg:
    case OperandKind::Sem: return "int64_t{" + expr + ".index}";
    case OperandKind::Target: return "int64_t{" + expr + ".id}";
    case OperandKind::DType: return "static_cast<int64_t>(" + expr + ")";
    case OperandKind::Flag: return "int64_t{" + expr + "}";
    default: return expr;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tpusim_isa_emitter_gen OUT.h\n";
    return 2;
  }
  std::ostringstream opts, methods, dispatch;
  // EmitterBase's own members and Emitter::instr, which no instruction's method may hide.
  const std::set<std::string> base = {"label", "bind", "pc", "set_cores", "declare", "finish", "append", "where", "instr"};
  for (const InstrDesc& d : instructions()) {
    const std::string fn = identifier(d.mnemonic);
    if (base.count(fn)) {
      std::cerr << "tpusim_isa_emitter_gen: instruction " << d.mnemonic << " would hide EmitterBase::" << fn << "\n";
      return 1;
    }
    bool has_opts = false;
    for (int i = 0; i < d.num_operands; ++i) has_opts |= optional_operand(d.operands[size_t(i)], d, i);
    const std::string oname = options_name(d.mnemonic);
    std::string spec;
    for (int i = 0; i < d.num_operands; ++i) {
      const OperandDesc& o = d.operands[size_t(i)];
      static const char* kind[] = {"r", "i", "u", "t", "d", "s", "f", "k"};
      spec += " " + o.name + ":" + kind[int(o.kind)] +
              (o.kind == OperandKind::Imm || o.kind == OperandKind::UImm || o.kind == OperandKind::Key
                   ? std::to_string(o.width)
                   : "");
    }
    if (has_opts) {
      opts << "// " << d.mnemonic << ": its optional operands.\nstruct " << oname << " {\n";
      for (int i = 0; i < d.num_operands; ++i) {
        const OperandDesc& o = d.operands[size_t(i)];
        if (!optional_operand(o, d, i)) continue;
        opts << "  " << param_type(o.kind) << " " << identifier(o.name)
             << (o.kind == OperandKind::Flag ? " = false" : o.kind == OperandKind::Sem ? "{}" : " = 0") << ";\n";
      }
      opts << "};\n";
    }
    methods << "  // " << d.mnemonic << spec << "\n  void " << fn << "(";
    // The dispatcher's call of this method: the fields of an Instr as its typed arguments.
    std::string args, fields_opts;
    for (int i = 0; i < d.num_operands; ++i) {
      const OperandDesc& o = d.operands[size_t(i)];
      const std::string f = "in.f[" + std::to_string(i) + "]";
      std::string v;
      switch (o.kind) {
        case OperandKind::Reg: v = "Reg{int(" + f + ")}"; break;
        case OperandKind::Sem: v = "Sem{int(" + f + ")}"; break;
        case OperandKind::Target: v = "Label{" + f + "}"; break;
        case OperandKind::DType: v = "static_cast<DType>(" + f + ")"; break;
        case OperandKind::Flag: v = f + " != 0"; break;
        default: v = f;
      }
      if (optional_operand(o, d, i)) {
        fields_opts += (fields_opts.empty() ? "" : ", ") + std::string(".") + identifier(o.name) + " = " + v;
      } else {
        args += (args.empty() ? "" : ", ") + v;
      }
    }
    if (has_opts) args += (args.empty() ? "" : ", ") + std::string("{") + fields_opts + "}";
    dispatch << "      case " << int(d.opcode) << ": return " << fn << "(" << args << (args.empty() ? "" : ", ")
             << "at);\n";
    std::string values;
    bool first = true;
    for (int i = 0; i < d.num_operands; ++i) {
      const OperandDesc& o = d.operands[size_t(i)];
      if (!values.empty()) values += ", ";
      if (optional_operand(o, d, i)) {
        values += field(o, "o." + identifier(o.name));
        continue;
      }
      methods << (first ? "" : ", ") << param_type(o.kind) << " " << identifier(o.name);
      first = false;
      values += field(o, identifier(o.name));
    }
    if (has_opts) methods << (first ? "" : ", ") << "const " << oname << "& o = {}", first = false;
    methods << (first ? "" : ", ") << "Where at = {}) {\n"
            << "    append(static_cast<Op>(" << int(d.opcode) << "), {" << values << "}, at);\n  }\n";
  }
  std::ofstream out(argv[1]);
  out << "// Generated from isa.def by tpusim_isa_emitter_gen (isa/src/emitter_gen.cpp): do not edit.\n"
         "// The typed emitter's instruction methods; see tpusim/isa/emitter.h.\n"
         "#pragma once\n\n#include <cstdint>\n\n#include \"tpusim/isa/emitter_base.h\"\n\n"
         "namespace tpusim::isa {\n\n"
      << opts.str()
      << "\n// Builds a program instruction by instruction (tpusim/isa/emitter.h).\nclass Emitter : public "
         "EmitterBase {\n public:\n  using EmitterBase::EmitterBase;\n\n"
      << methods.str()
      << "\n  // A decoded instruction, emitted through its typed method above; a branch target's field holds a "
         "Label's id.\n  void instr(const Instr& in, Where at = {}) {\n"
         "    switch (static_cast<int>(in.op)) {\n"
      << dispatch.str() << "    }\n    throw Error(\"Emitter::instr: not an instruction of the table\");\n  }\n"
      << "};\n\n}  // namespace tpusim::isa\n";
  if (!out) {
    std::cerr << "tpusim_isa_emitter_gen: cannot write " << argv[1] << "\n";
    return 1;
  }
  return 0;
}
