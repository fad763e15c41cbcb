// The typed emitter (tpusim/isa/emitter.h): what it builds against what the assembler builds from the same
// instructions as text, and its errors, which name the generator's line.
#include "tpusim/isa/emitter.h"

#include <gtest/gtest.h>

#include <random>

#include "tpusim/isa/assembler.h"

namespace tpusim::isa {
namespace {

// A random value for operand `o` that fits its field (a branch target: an instruction index below `code`).
int64_t random_field(const OperandDesc& o, std::mt19937_64& rng, int64_t code) {
  auto below = [&](uint64_t n) { return static_cast<int64_t>(rng() % n); };
  switch (o.kind) {
    case OperandKind::Reg: return below(kNumRegs);
    case OperandKind::Sem: return below(kNumSems);
    case OperandKind::DType: return below(kNumDTypes);
    case OperandKind::Flag: return below(2);
    case OperandKind::Target: return below(uint64_t(code) + 1);
    case OperandKind::Imm: {
      const uint64_t span = o.width >= 64 ? ~uint64_t{0} : (uint64_t{1} << o.width);
      return below(span) - static_cast<int64_t>(span / 2);
    }
    default: return below(o.width >= 63 ? uint64_t{1} << 62 : uint64_t{1} << o.width);
  }
}

// Every instruction of the table, 40 times each with random operands (branches forward and back, to labels bound
// at every index), emitted through its typed method (Emitter::instr calls it) and assembled from format()'s text
// with the same base: the same words. So each generated method passes each operand to its own field.
TEST(Emitter, EveryInstructionEncodesAsTheAssemblerDoes) {
  std::mt19937_64 rng(12);
  std::vector<Instr> instrs;
  for (int round = 0; round < 40; ++round)
    for (const InstrDesc& d : instructions()) instrs.push_back(Instr{d.op, {}});
  const int64_t n = static_cast<int64_t>(instrs.size()), base = 1000;
  Emitter e("all", "<test>/all", base);
  std::vector<Label> at;
  for (int64_t i = 0; i <= n; ++i) at.push_back(e.label());
  std::string text;
  for (int64_t i = 0; i < n; ++i) {
    Instr& in = instrs[size_t(i)];
    const InstrDesc& d = in.desc();
    Instr with_labels = in;
    for (int k = 0; k < d.num_operands; ++k) {
      const OperandDesc& o = d.operands[size_t(k)];
      in.f[size_t(k)] = random_field(o, rng, n);
      with_labels.f[size_t(k)] = in.f[size_t(k)];
      if (o.kind == OperandKind::Target) {
        with_labels.f[size_t(k)] = at[size_t(in.f[size_t(k)])].id;
        in.f[size_t(k)] += base;
      }
    }
    e.bind(at[size_t(i)]);
    e.instr(with_labels);
    text += format(in) + "\n";
  }
  e.bind(at[size_t(n)]);
  const Program emitted = e.finish();
  AsmOptions opts;
  opts.base_pc = base;
  const Program assembled = assemble(text, "all.s", opts);
  ASSERT_EQ(emitted.code.size(), assembled.code.size());
  for (size_t i = 0; i < emitted.code.size(); ++i)
    ASSERT_EQ(emitted.code[i], assembled.code[i]) << i << ": " << format(instrs[i]);
  EXPECT_EQ(emitted.name, "all");
}

// The typed methods as a generator calls them: options by name, labels forward and back, cores; the source lines
// name the emitter's `where` and this file's lines.
TEST(Emitter, BuildsWhatTheAssemblerBuildsFromTheSameText) {
  Emitter e("k", "<test>/k", 7);
  e.set_cores(4);
  const Label top = e.label(), done = e.label();
  e.core_id(reg(31));
  e.bind(top);
  e.li(reg(1), -5);
  e.dma_ld(reg(2), reg(1), reg(3), reg(4), reg(0), reg(0), {.mcast = true, .wait = sem(1)});
  e.mxu_mm(reg(5), reg(6), reg(7), reg(8), DType::BF16, {.accumulate = true, .mxu = 3, .signal = sem(2)});
  e.bne(reg(31), reg(0), done);
  e.jmp(top);
  e.bind(done);
  const int halt_line = __LINE__ + 1;
  e.halt();
  const Program p = e.finish();
  AsmOptions opts;
  opts.base_pc = 7;
  const Program q = assemble(
      ".name \"k\"\n.cores 4\n    core.id r31\ntop:\n    li r1, -5\n"
      "    dma.ld r2, r1, r3, r4, r0, r0, mcast, wait=s1\n"
      "    mxu.mm r5, r6, r7, r8, bf16, accumulate, mxu=3, signal=s2\n"
      "    bne r31, r0, done\n    jmp top\ndone:\n    halt\n",
      "k.s", opts);
  EXPECT_EQ(p.code, q.code);
  EXPECT_EQ(p.cores, 4u);
  EXPECT_EQ(p.name, "k");
  ASSERT_EQ(p.source.size(), p.code.size());
  EXPECT_EQ(p.source.back(), "<test>/k at emitter_test.cpp:" + std::to_string(halt_line));
  EXPECT_EQ(decode(p.code[4]).f[2], 7 + 6);  // bne to `done`, instruction 6 (halt), from base 7
  EXPECT_EQ(decode(p.code[5]).f[0], 7 + 1);  // jmp back to `top`, instruction 1
}

// Tensors are the program's, in declaration order, checked as the assembler checks them.
TEST(Emitter, DeclaresTensorsAndChecksThem) {
  Emitter e("k", "<test>/k");
  e.declare(TensorDecl{"x", TensorKind::Input, DType::BF16, {4, 8}, 4096});
  e.declare(TensorDecl{"y", TensorKind::Output, DType::F32, {4}, 8192});
  e.halt();
  const Program p = e.finish();
  ASSERT_EQ(p.tensors.size(), 2u);
  EXPECT_EQ(p.tensors[0].name, "x");
  EXPECT_EQ(p.tensors[1].bytes(), 16u);
  EXPECT_EQ(assemble(disassemble(p), "k.s").tensors, p.tensors);
  e.declare(TensorDecl{"z", TensorKind::Output, DType::F32, {4}, 8200});  // inside y
  try {
    e.finish();
    ADD_FAILURE() << "no error";
  } catch (const Error& err) {
    EXPECT_EQ(std::string(err.what()).rfind("<test>/k: output 'z'", 0), 0u) << err.what();
    EXPECT_NE(std::string(err.what()).find("overlaps"), std::string::npos) << err.what();
  }
}

// declare_placed puts each tensor where the assembler puts the same declarations with AsmOptions' tensor_addr
// and hbm_base: given addresses kept (below the base, above it, or overlapping what comes after), the others
// after the base and after every tensor before them, aligned.
TEST(Emitter, PlacesTensorsAsTheAssemblerDoes) {
  const std::map<std::string, uint64_t> fixed = {{"b", 100000}, {"d", 70000}};
  for (const uint64_t base : {uint64_t{0}, uint64_t{5000}, uint64_t{1} << 30}) {
    for (const uint64_t align : {uint64_t{4096}, uint64_t{64}, uint64_t{1}}) {
      Emitter e("k", "<test>/k");
      const std::vector<std::pair<std::string, std::vector<int64_t>>> decls = {
          {"a", {3, 5}}, {"b", {1000}}, {"c", {7}}, {"d", {1}}, {"e", {2, 2}}};
      std::string text;
      std::vector<uint64_t> placed;
      for (const auto& [name, shape] : decls) {
        placed.push_back(e.declare_placed(TensorDecl{name, TensorKind::Input, DType::F32, shape}, fixed, base, align));
        text += ".input " + name + ", f32, [" + std::to_string(shape[0]) +
                (shape.size() > 1 ? ", " + std::to_string(shape[1]) : std::string()) + "]\n";
      }
      e.halt();
      AsmOptions o;
      o.tensor_addr = fixed, o.hbm_base = base, o.hbm_align = align;
      const Program want = assemble(text + "halt\n", "k.s", o);
      const Program got = e.finish();
      EXPECT_EQ(got.tensors, want.tensors) << base << " " << align;
      for (size_t i = 0; i < placed.size(); ++i) EXPECT_EQ(placed[i], want.tensors[i].addr) << i;
    }
  }
}

std::string error_of(const Emitter& e) {
  try {
    e.finish();
  } catch (const Error& err) {
    return err.what();
  }
  return "(no error)";
}

TEST(Emitter, ErrorsNameTheGeneratorsLine) {
  {
    Emitter e("k", "<test>/k");
    const int line = __LINE__ + 1;
    e.li(reg(1), int64_t{1} << 50);
    EXPECT_EQ(error_of(e), "<test>/k at emitter_test.cpp:" + std::to_string(line) +
                               ": li: operand imm = 1125899906842624 does not fit in 48 bits");
  }
  {
    Emitter e("k", "<test>/k");
    const int line = __LINE__ + 1;
    e.dma_st(reg(1), reg(2), reg(32), reg(4), reg(0), reg(0));
    EXPECT_EQ(error_of(e), "<test>/k at emitter_test.cpp:" + std::to_string(line) +
                               ": dma.st: operand rows = 32 does not fit in 5 bits");
  }
  {
    Emitter e("k", "<test>/k");
    e.nop();
    const int line = __LINE__ + 1;
    e.jmp(e.label());
    EXPECT_EQ(error_of(e), "<test>/k at emitter_test.cpp:" + std::to_string(line) +
                               ": jmp to a label that is never bound");
  }
  {
    Emitter e("k", "<test>/k");
    e.beq(reg(1), reg(2), Label{});
    EXPECT_NE(error_of(e).find("beq: a label this emitter did not make"), std::string::npos) << error_of(e);
  }
  {
    Emitter e("k", "<test>/k");
    const Label l = e.label();
    e.bind(l);
    const int line = __LINE__ + 1;
    EXPECT_THROW(e.bind(l), Error);
    try {
      e.bind(l);
    } catch (const Error& err) {
      EXPECT_EQ(std::string(err.what()), "<test>/k at emitter_test.cpp:" + std::to_string(line + 2) +
                                             ": bind: the label is already bound");
    }
  }
}

}  // namespace
}  // namespace tpusim::isa
