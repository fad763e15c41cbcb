// The instruction table itself: encodings never overlap, every opcode round-trips through encode/decode,
// format/assemble and disassemble/assemble, and decode rejects what is not an instruction.
#include "tpusim/isa/isa.h"

#include <gtest/gtest.h>

#include <random>
#include <set>

#include "tpusim/isa/assembler.h"

namespace tpusim::isa {
namespace {

uint64_t field_mask(const OperandDesc& o) { return (o.width >= 64 ? ~0ull : (1ull << o.width) - 1) << o.shift; }

// All bits an instruction's opcode and fields cover.
uint64_t used_bits(const InstrDesc& d) {
  uint64_t m = 0xff;
  for (int i = 0; i < d.num_operands; ++i) m |= field_mask(d.operands[i]);
  return m;
}

// A random valid value for an operand; about one in four is an extreme of its range.
int64_t random_value(const OperandDesc& o, std::mt19937_64& rng) {
  int64_t lo = 0, hi = 0;
  switch (o.kind) {
    case OperandKind::Reg: hi = kNumRegs - 1; break;
    case OperandKind::Sem: hi = kNumSems - 1; break;
    case OperandKind::DType: hi = kNumDTypes - 1; break;
    case OperandKind::Flag: hi = 1; break;
    case OperandKind::Imm: lo = -(int64_t(1) << (o.width - 1)), hi = (int64_t(1) << (o.width - 1)) - 1; break;
    case OperandKind::UImm:
    case OperandKind::Key:
    case OperandKind::Target: hi = static_cast<int64_t>((1ull << o.width) - 1); break;
  }
  switch (rng() % 8) {
    case 0: return lo;
    case 1: return hi;
    default: return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
}

Instr random_instr(const InstrDesc& d, std::mt19937_64& rng) {
  Instr in;
  in.op = d.op;
  for (int i = 0; i < d.num_operands; ++i) in.f[i] = random_value(d.operands[i], rng);
  return in;
}

TEST(IsaTable, OpcodesAndMnemonicsAreUnique) {
  auto all = instructions();
  ASSERT_FALSE(all.empty());
  for (size_t a = 0; a < all.size(); ++a)
    for (size_t b = a + 1; b < all.size(); ++b) {
      EXPECT_NE(all[a].opcode, all[b].opcode) << all[a].mnemonic << " and " << all[b].mnemonic;
      EXPECT_NE(all[a].mnemonic, all[b].mnemonic);
    }
  for (const auto& d : all) {
    EXPECT_EQ(describe_opcode(d.opcode), &d);
    EXPECT_EQ(describe_mnemonic(d.mnemonic), &d);
    EXPECT_EQ(&describe(d.op), &d);
    EXPECT_EQ(static_cast<uint8_t>(d.op), d.opcode);
  }
}

// Like riscv-isa-sim's check-opcode-overlap: no two encodings can match the same word. Every instruction fixes
// the whole low byte, so distinct opcodes suffice between instructions; within one, the fields must be disjoint.
TEST(IsaTable, FieldsDoNotOverlapAndFitInOneWord) {
  for (const auto& d : instructions()) {
    uint64_t seen = 0xff;
    int end = 8;
    for (int i = 0; i < d.num_operands; ++i) {
      const OperandDesc& o = d.operands[i];
      ASSERT_GT(o.width, 0) << d.mnemonic << " " << o.name;
      ASSERT_LE(o.shift + o.width, 64) << d.mnemonic << " " << o.name << " ends past bit 63";
      EXPECT_EQ(seen & field_mask(o), 0u) << d.mnemonic << ": " << o.name << " overlaps an earlier field";
      EXPECT_EQ(o.shift, end) << d.mnemonic << ": fields are packed LSB-first in table order";
      seen |= field_mask(o);
      end = o.shift + o.width;
      EXPECT_EQ(d.operand_index(o.name), i) << d.mnemonic << ": operand name used twice: " << o.name;
    }
  }
}

TEST(IsaTable, UnitInstructionsEndWithWaitAndSignal) {
  for (const auto& d : instructions()) {
    if (d.unit == Unit::Core) continue;
    ASSERT_GE(d.num_operands, 2) << d.mnemonic;
    EXPECT_EQ(d.operands[d.num_operands - 2].name, "wait") << d.mnemonic;
    EXPECT_EQ(d.operands[d.num_operands - 1].name, "signal") << d.mnemonic;
    EXPECT_EQ(d.operands[d.num_operands - 1].kind, OperandKind::Sem) << d.mnemonic;
  }
}

TEST(IsaRoundTrip, EncodeDecodeFormatAssemble) {
  std::mt19937_64 rng(20240611);
  for (const auto& d : instructions()) {
    for (int iter = 0; iter < 300; ++iter) {
      Instr in = random_instr(d, rng);
      Word w = encode(in);
      ASSERT_EQ(w & 0xff, d.opcode);
      ASSERT_EQ(decode(w), in) << d.mnemonic << " word 0x" << std::hex << w;
      std::string text = format(in);
      Program p = assemble(text + "\n", "rt.s");
      ASSERT_EQ(p.code.size(), 1u) << text;
      ASSERT_EQ(p.code[0], w) << text;
    }
  }
}

TEST(IsaRoundTrip, DisassembleAssembleEveryInstruction) {
  std::mt19937_64 rng(7);
  Program p;
  p.name = "every instruction";
  for (int rep = 0; rep < 20; ++rep)
    for (const auto& d : instructions()) p.code.push_back(encode(random_instr(d, rng)));
  std::string text = disassemble(p);
  Program back = assemble(text, "dis.s");
  ASSERT_EQ(back.source.size(), p.code.size());
  back.source.clear();  // the disassembly's own lines; see disassemble()
  EXPECT_EQ(back, p);
}

TEST(IsaDecode, RejectsUnknownOpcodes) {
  std::set<int> known;
  for (const auto& d : instructions()) known.insert(d.opcode);
  for (int op = 0; op < 256; ++op) {
    if (known.count(op)) continue;
    try {
      decode(static_cast<Word>(op));
      ADD_FAILURE() << "opcode " << op << " decoded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("unknown opcode"), std::string::npos) << e.what();
    }
  }
}

TEST(IsaDecode, RejectsStrayBits) {
  for (const auto& d : instructions()) {
    uint64_t used = used_bits(d), valid = used;
    for (int i = 0; i < d.num_operands; ++i)  // a data type field's bit alone is valid where it is a type's code
      if (d.operands[i].kind == OperandKind::DType)
        for (int b = 0; b < d.operands[i].width; ++b)
          if ((1 << b) >= kNumDTypes) valid &= ~(1ull << (d.operands[i].shift + b));
    for (int bit = 8; bit < 64; ++bit) {
      Word w = d.opcode | (1ull << bit);
      if (valid & (1ull << bit)) {
        EXPECT_NO_THROW(decode(w)) << d.mnemonic << " bit " << bit;
      } else {
        EXPECT_THROW(decode(w), Error) << d.mnemonic << " bit " << bit;
      }
    }
  }
}

TEST(IsaDecode, RejectsInvalidDataTypes) {
  const InstrDesc& d = describe(Op::VADD);
  int i = d.operand_index("dtype");
  ASSERT_GE(i, 0);
  Word w = d.opcode | (static_cast<Word>(kNumDTypes) << d.operands[i].shift);
  EXPECT_THROW(decode(w), Error);
}

TEST(IsaEncode, RejectsValuesThatDoNotFit) {
  Instr li;
  li.op = Op::LI;
  li.f[0] = 32;  // no register r32
  EXPECT_THROW(encode(li), Error);
  li.f[0] = 1, li.f[1] = int64_t(1) << 47;  // i48 tops out at 2^47 - 1
  EXPECT_THROW(encode(li), Error);
  li.f[1] = -(int64_t(1) << 47);
  EXPECT_EQ(decode(encode(li)), li);
}

TEST(IsaFormat, PrintsTheAssemblySyntax) {
  Instr mm;
  mm.op = Op::MXUMM;
  const InstrDesc& d = mm.desc();
  mm.f[0] = 3, mm.f[1] = 4, mm.f[2] = 5, mm.f[3] = 6, mm.f[4] = static_cast<int64_t>(DType::BF16);
  mm.f[d.operand_index("accumulate")] = 1;
  mm.f[d.operand_index("wait")] = 1;
  EXPECT_EQ(format(mm), "mxu.mm r3, r4, r5, r6, bf16, accumulate, wait=s1");
  Instr set;
  set.op = Op::SEMSET;
  set.f[0] = 3, set.f[1] = 2;
  EXPECT_EQ(format(set), "sem.set s3, 2");
}

TEST(IsaNames, DataTypesAndUnits) {
  for (int t = 0; t < kNumDTypes; ++t) {
    DType dt = static_cast<DType>(t);
    EXPECT_EQ(dtype_from_name(dtype_name(dt)), dt);
  }
  EXPECT_EQ(dtype_from_name("int8"), DType::I8);
  EXPECT_EQ(dtype_from_name("float32"), DType::F32);
  for (const char* n : {"f8e4m3", "fp8", "e4m3", "float8_e4m3fn"}) EXPECT_EQ(dtype_from_name(n), DType::F8E4M3) << n;
  EXPECT_EQ(dtype_size(DType::F8E4M3), 1);
  EXPECT_FALSE(dtype_from_name("f8e5m2").has_value());  // E5M2 is not an ISA type
  EXPECT_FALSE(dtype_from_name("f16").has_value());
  EXPECT_STREQ(unit_name(Unit::Mxu), "mxu");
}

}  // namespace
}  // namespace tpusim::isa
