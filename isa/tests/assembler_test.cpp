// The assembler and disassembler: syntax, expressions, directives, placement, and exact error positions.
#include "tpusim/isa/assembler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "tpusim/isa/numerics.h"

namespace tpusim::isa {
namespace {

Instr only_instr(const Program& p, size_t i = 0) {
  EXPECT_GT(p.code.size(), i);
  return decode(p.code.at(i));
}

// The value `li r1, EXPR` loads.
int64_t value_of(const std::string& expr, const AsmOptions& o = {}) {
  return only_instr(assemble("li r1, " + expr + "\n", "e.s", o)).f[1];
}

AsmOptions defines(std::map<std::string, int64_t> d) {
  AsmOptions o;
  o.defines = std::move(d);
  return o;
}

// The what() of the error that assembling `src` as k.s throws.
std::string error_of(const std::string& src, const AsmOptions& o = {}) {
  try {
    assemble(src, "k.s", o);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// ---- expressions ----------------------------------------------------------------------------------------------

TEST(AsmExpr, LiteralsAndPrecedence) {
  EXPECT_EQ(value_of("42"), 42);
  EXPECT_EQ(value_of("0x2a + 0b10"), 44);
  EXPECT_EQ(value_of("2 + 3 * 4"), 14);
  EXPECT_EQ(value_of("(2 + 3) * 4"), 20);
  EXPECT_EQ(value_of("1 << 2 + 1"), 8);     // + binds tighter than <<
  EXPECT_EQ(value_of("7 & 3 == 3"), 1);     // == binds tighter than &
  EXPECT_EQ(value_of("1 | 6 ^ 3 & 2"), 5);  // 1 | (6 ^ (3 & 2))
  EXPECT_EQ(value_of("-2 * -3"), 6);
  EXPECT_EQ(value_of("~0"), -1);
  EXPECT_EQ(value_of("!5 + !0"), 1);
  EXPECT_EQ(value_of("-7 / 2"), -3);  // toward zero, as in C
  EXPECT_EQ(value_of("-7 % 2"), -1);
  EXPECT_EQ(value_of("10 - 4 - 3"), 3);  // left associative
  EXPECT_EQ(value_of("1 < 2 && 2 <= 2 && 3 > 2 && 3 >= 4 || 5 != 5"), 0);
  EXPECT_EQ(value_of("0 && 1 / 0"), 0);  // short-circuit: the division is never done
  EXPECT_EQ(value_of("-8 >> 1"), -4);    // arithmetic shift
}

// Operators are read longest first with or without spaces around them ("<<" is not "<" "<", "<=" not "<" "="), and
// lines end in \n, \r\n or the end of the text, numbered from 1 either way.
TEST(AsmExpr, OperatorsWithoutSpacesAndLineEnds) {
  EXPECT_EQ(value_of("1<<3|(2>=2)+(3<=2)*8+(1==1&&2!=2||0)*64+(-8>>1<-3)*128"), 8 + 1 + 128);
  EXPECT_EQ(value_of("(2<3)+(3>2)*2+(7%4^1)*4+(~0&6)*16"), 1 + 2 + 2 * 4 + 6 * 16);
  const Program crlf = assemble("li r1, 1\r\n\r\nli r2, 2\r\nli r3, 3", "k.s");
  ASSERT_EQ(crlf.code.size(), 3u);
  EXPECT_EQ(decode(crlf.code[2]).f[1], 3);
  EXPECT_EQ(error_of("li r1, 1\r\nli r2, 2\r\nli r3, 3 3"), "k.s:3:10: trailing garbage '3'");
  EXPECT_EQ(error_of("li r1, 1\nli r2, $"), "k.s:2:8: unexpected character '$'");
}

TEST(AsmExpr, Functions) {
  EXPECT_EQ(value_of("cdiv(10, 4)"), 3);
  EXPECT_EQ(value_of("cdiv(8, 4)"), 2);
  EXPECT_EQ(value_of("align(10, 8)"), 16);
  EXPECT_EQ(value_of("align(16, 8)"), 16);
  EXPECT_EQ(value_of("min(3, -1) + max(3, -1)"), 2);
  EXPECT_EQ(value_of("sizeof(i8) + sizeof(bf16) * 10 + sizeof(float32) * 100"), 421);
  EXPECT_EQ(value_of("sizeof(DT_BF16) + 10 * sizeof(T)", defines({{"T", 3}})), 42);  // by number: kernel parameters
  EXPECT_EQ(value_of("f32(0.5)"), 0x3f000000);
  EXPECT_EQ(value_of("f32(-2)"), 0xc0000000);
  EXPECT_EQ(value_of("f32(1e-3)"), bits_from_f32(1e-3f));
  EXPECT_EQ(value_of("f32(inf)"), 0x7f800000);
  EXPECT_EQ(value_of("f32(K * 2)", defines({{"K", 3}})), 0x40c00000);  // 6.0f
  EXPECT_EQ(value_of("defined(K) * 10 + defined(J)", defines({{"K", 3}})), 10);
}

TEST(AsmExpr, Errors) {
  EXPECT_EQ(error_of("li r1, 4 / (2 - 2)\n"), "k.s:1:10: division by zero");
  EXPECT_EQ(error_of("li r1, 4 % 0\n"), "k.s:1:10: modulo by zero");
  EXPECT_EQ(error_of("li r1, 1 << 64\n"), "k.s:1:10: shift count 64 out of range (0..63)");
  EXPECT_EQ(error_of("li r1, K + 1\n"), "k.s:1:8: undefined symbol 'K'");
  EXPECT_EQ(error_of("li r1, foo(1)\n"), "k.s:1:8: unknown function 'foo'");
  EXPECT_EQ(error_of("li r1, min(1)\n"), "k.s:1:8: 'min' takes 2 arguments, got 1");
  EXPECT_EQ(error_of("li r1, (1 + 2\n"), "k.s:1:14: expected ')', got end of line");
  EXPECT_EQ(error_of("li r1, 12ab\n"), "k.s:1:8: bad number '12ab'");
  EXPECT_EQ(error_of("li r1, sizeof(f16)\n"), "k.s:1:15: unknown data type 'f16'");
}

// ---- symbols --------------------------------------------------------------------------------------------------

TEST(AsmSymbols, DefinesOverrideSet) {
  const std::string src = ".set K, 4\nli r1, K\n";
  EXPECT_EQ(only_instr(assemble(src, "k.s")).f[1], 4);
  EXPECT_EQ(only_instr(assemble(src, "k.s", defines({{"K", 8}}))).f[1], 8);
  // With -D given, the .set is not even evaluated.
  EXPECT_EQ(only_instr(assemble(".set K, UNDEFINED\nli r1, K\n", "k.s", defines({{"K", 8}}))).f[1], 8);
}

TEST(AsmSymbols, SetRedefinitionIsInSourceOrder) {
  Program p = assemble(".set K, 1\nli r1, K\n.equ K, K + 1\nli r2, K\nli r3, LATER\n.set LATER, 9\n", "k.s");
  EXPECT_EQ(only_instr(p, 0).f[1], 1);
  EXPECT_EQ(only_instr(p, 1).f[1], 2);
  EXPECT_EQ(only_instr(p, 2).f[1], 9);  // forward reference: the final value
}

TEST(AsmSymbols, DefaultOnlyDefinesWhatNothingDefined) {
  // A kernel's parameters: `.default` in the kernel, overridden by -D or by an including file's own `.default`.
  const std::string kernel = ".default K, 4\nli r1, K\n";
  EXPECT_EQ(only_instr(assemble(kernel, "k.s")).f[1], 4);
  EXPECT_EQ(only_instr(assemble(kernel, "k.s", defines({{"K", 8}}))).f[1], 8);
  AsmOptions o;
  o.include = [&](const std::string&, const std::string&) -> std::optional<std::string> { return kernel; };
  EXPECT_EQ(only_instr(assemble(".default K, 6\n.include \"k.s\"\n", "w.s", o)).f[1], 6);
  // A .set after a .default still redefines.
  EXPECT_EQ(only_instr(assemble(".default K, 4\n.set K, 5\nli r1, K\n", "k.s")).f[1], 5);
}

TEST(AsmOperands, DataTypesAndFlagsFromExpressions) {
  // DT_* are predefined; a data type operand or declaration takes a name or an expression.
  Program p = assemble(".default IN_DT, DT_BF16\n.default RELU, 1\n.input a, IN_DT, [2]\n"
                       "mxu.lw r1, r2, r3, r4, IN_DT\n"
                       "vpu.acc r1, r2, r3, r4, r5, r6, r7, DT_F32, IN_DT, relu=RELU, bias_en=(RELU == 0)\n",
                       "k.s");
  EXPECT_EQ(p.tensors.at(0).dtype, DType::BF16);
  Instr lw = only_instr(p, 0), acc = only_instr(p, 1);
  EXPECT_EQ(lw.f[lw.desc().operand_index("dtype")], static_cast<int64_t>(DType::BF16));
  EXPECT_EQ(acc.f[acc.desc().operand_index("adt")], static_cast<int64_t>(DType::F32));
  EXPECT_EQ(acc.f[acc.desc().operand_index("relu")], 1);
  EXPECT_EQ(acc.f[acc.desc().operand_index("bias_en")], 0);
  EXPECT_EQ(error_of("mxu.lw r1, r2, r3, r4, 7\n"), "k.s:1:24: data type number 7 is not one of DT_I8..DT_F8E4M3");
  EXPECT_EQ(error_of("mxu.lw r1, r2, r3, r4, bf17\n"), "k.s:1:24: unknown data type 'bf17'");
}

// f8e4m3 by its name, its other names and DT_F8E4M3 (derived from the name), in operands and declarations; the
// disassembler writes the name back, and assembling that gives the same program.
TEST(AsmOperands, F8E4M3NamesAndRoundTrip) {
  Program p = assemble(".input a, fp8, [2, 4]\n.output c, float8_e4m3fn, [4]\n"
                       "mxu.lw r1, r2, r3, r4, f8e4m3, trans\nmxu.mm r1, r2, r3, r4, e4m3\n"
                       "vpu.cast r1, r2, r3, r4, f32, DT_F8E4M3, scale_en\n",
                       "k.s");
  EXPECT_EQ(p.tensors.at(0).dtype, DType::F8E4M3);
  EXPECT_EQ(p.tensors.at(1).dtype, DType::F8E4M3);
  for (int i = 0; i < 2; ++i) {
    const Instr in = only_instr(p, i);
    EXPECT_EQ(in.f[in.desc().operand_index("dtype")], 4) << i;  // the code docs/isa.md's table gives
  }
  const Instr cast = only_instr(p, 2);
  EXPECT_EQ(cast.f[cast.desc().operand_index("ddt")], static_cast<int64_t>(DType::F8E4M3));
  const std::string text = disassemble(p);
  EXPECT_NE(text.find("mxu.lw r1, r2, r3, r4, f8e4m3, trans"), std::string::npos) << text;
  EXPECT_NE(text.find(".input a, f8e4m3, [2, 4]"), std::string::npos) << text;
  Program back = assemble(text, "d.s");
  back.source = p.source;
  EXPECT_EQ(back, p);
  EXPECT_EQ(value_of("sizeof(DT_F8E4M3) + DT_F8E4M3"), 5);
  EXPECT_EQ(error_of("mxu.lw r1, r2, r3, r4, 5\n"), "k.s:1:24: data type number 5 is not one of DT_I8..DT_F8E4M3");
  EXPECT_EQ(error_of("mxu.lw r1, r2, r3, r4, f8e5m2\n"), "k.s:1:24: unknown data type 'f8e5m2'");
}

TEST(AsmSymbols, SetMustUseSymbolsDefinedAbove) {
  EXPECT_EQ(error_of(".set A, B\n.set B, 1\n"), "k.s:1:9: undefined symbol 'B'");
}

TEST(AsmSymbols, RegisterAliasesAndMov) {
  Program p = assemble(".reg acc, r7\n.reg n, r3\nmov acc, n\nadd acc, acc, r0\n", "k.s");
  Instr a = only_instr(p, 0), b = only_instr(p, 1);
  EXPECT_EQ(a.op, Op::ADDI);
  EXPECT_EQ(a.f[0], 7);
  EXPECT_EQ(a.f[1], 3);
  EXPECT_EQ(a.f[2], 0);
  EXPECT_EQ(b.f[0], 7);
  EXPECT_EQ(b.f[1], 7);
}

TEST(AsmSymbols, LabelsForwardAndBackwardWithBasePc) {
  const std::string src =
      "start:  nop\n"
      "        jmp end        # forward\n"
      "loop:   addi r1, r1, -1\n"
      "        bne r1, r0, loop\n"
      "end:    halt\n"
      "        jmp start\n";
  Program p = assemble(src, "k.s", [] {
    AsmOptions o;
    o.base_pc = 100;
    return o;
  }());
  ASSERT_EQ(p.code.size(), 6u);
  EXPECT_EQ(only_instr(p, 1).f[0], 104);
  EXPECT_EQ(only_instr(p, 3).f[2], 102);
  EXPECT_EQ(only_instr(p, 5).f[0], 100);
  EXPECT_EQ(p.source[3], "k.s:4");
}

// ---- operands -------------------------------------------------------------------------------------------------

TEST(AsmOperands, FlagsAndKeywordsInAnyOrder) {
  Program p =
      assemble("mxu.mm r1, r2, r3, r4, bfloat16, signal=s2, accumulate, wait=s1\nmxu.mm r1, r2, r3, r4, i8\n", "k.s");
  Instr a = only_instr(p, 0), b = only_instr(p, 1);
  const InstrDesc& d = a.desc();
  EXPECT_EQ(a.f[d.operand_index("dtype")], static_cast<int64_t>(DType::BF16));
  EXPECT_EQ(a.f[d.operand_index("accumulate")], 1);
  EXPECT_EQ(a.f[d.operand_index("wait")], 1);
  EXPECT_EQ(a.f[d.operand_index("signal")], 2);
  EXPECT_EQ(b.f[d.operand_index("accumulate")], 0);
  EXPECT_EQ(b.f[d.operand_index("wait")], 0);
  EXPECT_EQ(b.f[d.operand_index("signal")], 0);
  const isa::Instr sync = only_instr(assemble("mxu.sync wait=s3, mxu=2\n", "k.s"));
  EXPECT_EQ(sync.f[sync.desc().operand_index("wait")], 3);
  EXPECT_EQ(sync.f[sync.desc().operand_index("mxu")], 2);
  EXPECT_EQ(only_instr(assemble("sem.set s3, 0xffff\n", "k.s")).f[1], 0xffff);
}

TEST(AsmOperands, ErrorsPointAtTheToken) {
  EXPECT_EQ(error_of("nop\nnop\nmxu.foo r1\n"), "k.s:3:1: unknown instruction 'mxu.foo'");
  EXPECT_EQ(error_of("add r1, r2, r32\n"), "k.s:1:13: unknown register 'r32'");
  EXPECT_EQ(error_of("add r1, r2, foo\n"), "k.s:1:13: unknown register 'foo'");
  EXPECT_EQ(error_of("mxu.mm r1, r2, r3, bf16\n"), "k.s:1:20: 'mxu.mm' expects 4 registers, got 3");
  EXPECT_EQ(error_of("add r1, r2\n"), "k.s:1:11: 'add' expects 3 registers, got 2");
  EXPECT_EQ(error_of("add r1, r2, r3, r4\n"), "k.s:1:17: 'add' expects 3 registers, got 4");
  EXPECT_EQ(error_of("vpu.add r1, r2, r3, r4, r5, f32\n"), "k.s:1:25: 'vpu.add' expects 4 registers, got 5");
  EXPECT_EQ(error_of("li r1\n"), "k.s:1:6: 'li' expects 1 immediate, got 0");
  EXPECT_EQ(error_of("jmp\n"), "k.s:1:4: 'jmp' expects 1 branch target, got 0");
  EXPECT_EQ(error_of("mxu.lw r1, r2, r3, r4, f16\n"), "k.s:1:24: unknown data type 'f16'");
  EXPECT_EQ(error_of("mxu.mm r1, r2, r3, r4, bf16, relu\n"), "k.s:1:30: unknown flag 'relu' for 'mxu.mm'");
  EXPECT_EQ(error_of("mxu.mm r1, r2, r3, r4, bf16, accumulate, accumulate\n"),
            "k.s:1:42: duplicate operand 'accumulate'");
  EXPECT_EQ(error_of("add r1, r2, r3, wait=s1\n"), "k.s:1:17: unknown operand 'wait=' for 'add'");
  EXPECT_EQ(error_of("mxu.sync wait=s32\n"), "k.s:1:15: unknown semaphore 's32' (s0..s31)");
  EXPECT_EQ(error_of("add r1, r2, r3 r4\n"), "k.s:1:16: trailing garbage 'r4'");
  EXPECT_EQ(error_of("add r1 r2, r3\n"), "k.s:1:8: expected ',', got 'r2'");
  EXPECT_EQ(error_of("nop r1\n"), "k.s:1:5: unexpected 'r1' (too many operands for 'nop')");
  EXPECT_EQ(error_of("nop\n  sem.set s1, 70000\n"), "k.s:2:15: value 70000 does not fit operand value (u16)");
  EXPECT_EQ(error_of("addi r1, r2, 0x80000000\n"), "k.s:1:14: value 2147483648 does not fit operand imm (i32)");
  EXPECT_EQ(error_of("jmp -1\n"), "k.s:1:5: value -1 does not fit operand target (u32)");
  EXPECT_EQ(error_of("li r1, \"x\n"), "k.s:1:8: unterminated string");
  EXPECT_EQ(error_of("li r1, 1 $\n"), "k.s:1:10: unexpected character '$'");
  EXPECT_EQ(error_of(".bogus 1\n"), "k.s:1:1: unknown directive '.bogus'");
}

TEST(AsmLabels, DuplicatesAndClashes) {
  EXPECT_EQ(error_of("a: nop\n\na: nop\n"), "k.s:3:1: duplicate label 'a' (first at k.s:1)");
  EXPECT_EQ(error_of(".input A, f32, [1]\n.output A, f32, [1]\n"), "k.s:2:9: duplicate tensor 'A' (first at k.s:1)");
  EXPECT_EQ(error_of(".set A, 1\nA: nop\n"), "k.s:2:1: 'A' is already defined as a .set symbol at k.s:1");
}

// ---- conditionals, includes, errors ---------------------------------------------------------------------------

TEST(AsmConditionals, IfElifElseNested) {
  const std::string src =
      ".if MODE == 0\n"
      "  li r1, 10\n"
      ".elif MODE == 1\n"
      "  .if DEEP\n"
      "    li r1, 11\n"
      "  .else\n"
      "    li r1, 12\n"
      "  .endif\n"
      ".else\n"
      "  .error \"bad MODE\"\n"
      "  this line is never parsed $$$\n"
      ".endif\n";
  auto run = [&](int64_t mode, int64_t deep) {
    return only_instr(assemble(src, "k.s", defines({{"MODE", mode}, {"DEEP", deep}}))).f[1];
  };
  EXPECT_EQ(run(0, 0), 10);
  EXPECT_EQ(run(1, 1), 11);
  EXPECT_EQ(run(1, 0), 12);
  EXPECT_EQ(error_of(src, defines({{"MODE", 2}, {"DEEP", 0}})), "k.s:10:3: bad MODE");
}

TEST(AsmConditionals, Errors) {
  EXPECT_EQ(error_of("nop\n.if 1\nnop\n"), "k.s:2:1: '.if' without '.endif'");
  EXPECT_EQ(error_of(".else\n"), "k.s:1:1: '.else' without '.if'");
  EXPECT_EQ(error_of(".endif\n"), "k.s:1:1: '.endif' without '.if'");
  EXPECT_EQ(error_of(".if 1\n.else\n.elif 1\n.endif\n"), "k.s:3:1: '.elif' after '.else'");
  EXPECT_EQ(error_of(".if N\n.endif\n"), "k.s:1:5: undefined symbol 'N'");
  EXPECT_EQ(error_of(".error \"stop here\"\n"), "k.s:1:1: stop here");
}

TEST(AsmRegions, NestedAndAdjacent) {
  AsmOptions o;
  o.base_pc = 100;  // regions count this program's instructions, not pcs
  Program p = assemble(
      "nop\n"
      ".region node, \"fc1\"\n"
      "  nop\n"
      "  .region kernel, \"cast.s\"\n"
      "    nop\n"
      "  .endregion\n"
      "  .region kernel, gemm\n"
      "    nop\n"
      "    nop\n"
      "  .endregion\n"
      ".endregion\n"
      ".region node, \"fc2 + relu\"\n"
      "  halt\n"
      ".endregion\n",
      "k.s", o);
  std::vector<Region> want = {
      {"node", "fc1", 1, 5}, {"kernel", "cast.s", 2, 3}, {"kernel", "gemm", 3, 5}, {"node", "fc2 + relu", 5, 6}};
  EXPECT_EQ(p.regions, want);
  EXPECT_EQ(region_parents(p.regions), (std::vector<int>{-1, 0, 0, -1}));
}

TEST(AsmRegions, FlopsAndBytes) {
  Program p = assemble(
      ".region node, \"fc1\", flops=1024, bytes=2.5e9\n"
      "  .region kernel, gemm, bytes=0.125\n"
      "    nop\n"
      "  .endregion\n"
      ".endregion\n"
      ".region node, fc2, bytes=1e+20, flops=3\n"
      "  halt\n"
      ".endregion\n",
      "k.s");
  std::vector<Region> want = {
      {"node", "fc1", 0, 1, 1024, 2.5e9}, {"kernel", "gemm", 0, 1, 0, 0.125}, {"node", "fc2", 1, 2, 3, 1e20}};
  EXPECT_EQ(p.regions, want);
  // The ideal bytes, a region's and the program's, in any order among the others.
  p = assemble(
      ".ideal_bytes 4.5e6\n"
      ".region node, fc, ideal_bytes=3000, flops=8\n"
      "  halt\n"
      ".endregion\n",
      "k.s");
  EXPECT_EQ(p.ideal_bytes, 4.5e6);
  want = {{"node", "fc", 0, 1, 8, 0, 3000}};
  EXPECT_EQ(p.regions, want);
}

TEST(AsmRegions, Errors) {
  EXPECT_EQ(error_of("nop\n.region node, \"a\"\nnop\n"), "k.s:2:1: '.region' without '.endregion'");
  EXPECT_EQ(error_of(".endregion\n"), "k.s:1:1: '.endregion' without '.region'");
  EXPECT_EQ(error_of(".region node, \"a\"\n.endregion\n"), "k.s:2:1: region 'a' holds no instructions");
  EXPECT_EQ(error_of(".region node\n"), "k.s:1:13: expected ',', got end of line");
  EXPECT_EQ(error_of(".region \"a\", node\n"), "k.s:1:9: expected a region kind (node, kernel, ...), got string \"a\"");
  EXPECT_EQ(error_of(".region node, \"a\" x\n"), "k.s:1:19: trailing garbage 'x'");
  EXPECT_EQ(error_of(".region node, \"a\", flop=1\n"),
            "k.s:1:20: expected 'flops=', 'bytes=' or 'ideal_bytes=', got 'flop'");
  EXPECT_EQ(error_of(".region node, \"a\", ideal_bytes=1, ideal_bytes=2\n"), "k.s:1:35: 'ideal_bytes=' given twice");
  EXPECT_EQ(error_of(".ideal_bytes -5\n"), "k.s:1:14: expected a number for '.ideal_bytes', got '-'");
  EXPECT_EQ(error_of(".ideal_bytes 5 6\n"), "k.s:1:16: trailing garbage '6'");
  EXPECT_EQ(error_of(".region node, \"a\", flops=1, flops=2\n"), "k.s:1:29: 'flops=' given twice");
  EXPECT_EQ(error_of(".region node, \"a\", flops=-1\n"), "k.s:1:26: expected a number for 'flops=', got '-'");
  EXPECT_EQ(error_of(".region node, \"a\", bytes=N\n"), "k.s:1:26: expected a number for 'bytes=', got 'N'");
  EXPECT_EQ(error_of(".region node, \"a\", bytes=0x10\n"),
            "k.s:1:26: expected a number for 'bytes=', got '0x10'");
  EXPECT_EQ(error_of(".region node, \"a\", bytes=1e999\n"),
            "k.s:1:26: expected a number for 'bytes=', got '1e999'");
  // Each file closes its own regions, as it does its .if blocks.
  AsmOptions o;
  o.include = [](const std::string&, const std::string&) { return std::string(".region node, \"in\"\nnop\n"); };
  EXPECT_EQ(error_of(".include \"x.s\"\nnop\n.endregion\n", o), "x.s:1:1: '.region' without '.endregion'");
}

TEST(AsmInclude, CustomResolver) {
  AsmOptions o;
  o.include = [](const std::string& name, const std::string& from) -> std::optional<std::string> {
    if (name == "defs.inc") return ".set N, 7\n.reg ptr, r9\n";
    if (name == "bad.inc") return "nop\nli r1, NOPE\n";
    if (name == "nested.inc") return ".include \"defs.inc\"\n";
    return std::nullopt;
  };
  Program p = assemble(".include \"nested.inc\"\nli ptr, N\n", "main.s", o);
  EXPECT_EQ(only_instr(p).f[0], 9);
  EXPECT_EQ(only_instr(p).f[1], 7);
  EXPECT_EQ(p.source[0], "main.s:2");
  EXPECT_EQ(error_of("nop\n.include \"bad.inc\"\n", o), "bad.inc:2:8: undefined symbol 'NOPE'");
  EXPECT_EQ(error_of("nop\n.include \"missing.inc\"\n", o), "k.s:2:10: cannot include 'missing.inc': file not found");
}

TEST(AsmInclude, DefaultResolverReadsRelativeToTheIncludingFile) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("tpusim_asm_test_" + std::to_string(::getpid()));
  fs::create_directories(dir / "sub");
  std::ofstream(dir / "sub" / "common.inc") << ".set STEP, 3\nli r2, STEP\n";
  std::ofstream(dir / "main.s") << ".include \"sub/common.inc\"\nli r1, STEP * 2\n";
  Program p = assemble_file((dir / "main.s").string());
  EXPECT_EQ(only_instr(p, 0).f[1], 3);
  EXPECT_EQ(only_instr(p, 1).f[1], 6);
  EXPECT_EQ(p.source[0], (dir / "sub" / "common.inc").string() + ":2");
  fs::remove_all(dir);
  try {
    assemble_file((dir / "main.s").string());
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot open '" + (dir / "main.s").string() + "': No such file or directory");
  }
}

TEST(AsmInclude, LoopsAreCaught) {
  AsmOptions o;
  o.include = [](const std::string&, const std::string&) -> std::optional<std::string> {
    return ".include \"self.inc\"\n";
  };
  EXPECT_EQ(error_of(".include \"self.inc\"\n", o),
            "self.inc:1:10: includes nested more than 32 deep (an include loop?)");
}

// ---- tensors and constant data --------------------------------------------------------------------------------

TEST(AsmTensors, AutoPlacementAlignmentAndFixedAddresses) {
  const std::string src =
      ".name \"placement\"\n"
      ".set M, 3\n"
      ".input A, f32, [M, 5]\n"  // 60 bytes
      ".input B, i8, [10]\n"
      ".output C, bf16, [2, 2] @ 0x100000\n"
      ".output D, int32, []\n"  // a scalar
      "li r1, B + 4\n"
      "li r2, E\n"  // tensors may be referred to before their declaration
      ".input E, f32, [1]\n";
  Program p = assemble(src, "k.s", [] {
    AsmOptions o;
    o.hbm_base = 0x1000, o.hbm_align = 256;
    return o;
  }());
  EXPECT_EQ(p.name, "placement");
  ASSERT_EQ(p.tensors.size(), 5u);
  EXPECT_EQ(p.tensors[0].addr, 0x1000u);
  EXPECT_EQ(p.tensors[0].shape, (std::vector<int64_t>{3, 5}));
  EXPECT_EQ(p.tensors[1].addr, 0x1100u);  // 0x1000 + 60, aligned up
  EXPECT_EQ(p.tensors[2].addr, 0x100000u);
  EXPECT_EQ(p.tensors[3].addr, 0x100100u);  // past C
  EXPECT_EQ(p.tensors[3].kind, TensorKind::Output);
  EXPECT_EQ(p.tensors[3].dtype, DType::I32);
  EXPECT_EQ(p.tensors[3].elements(), 1);
  EXPECT_EQ(only_instr(p, 0).f[1], 0x1104);
  EXPECT_EQ(only_instr(p, 1).f[1], 0x100200);
  EXPECT_EQ(p.hbm_footprint(), 0x100204u);
}

TEST(AsmTensors, CallerAddressesComeAfterTheSource) {
  const std::string src = ".input A, f32, [4]\n.input B, f32, [4] @ 64\n.output C, f32, [4]\n";
  Program p = assemble(src, "k.s", [] {
    AsmOptions o;
    o.tensor_addr = {{"A", 0x5000}, {"B", 0x9999}};
    return o;
  }());
  EXPECT_EQ(p.tensors[0].addr, 0x5000u);
  EXPECT_EQ(p.tensors[1].addr, 64u);  // `@` in the source wins
  EXPECT_EQ(p.tensors[2].addr, 0x6000u);
}

TEST(AsmTensors, ConstData) {
  const std::string src =
      ".const W, i8, [2, 3] @ 0x2000\n"
      ".data \"0102 03\"\n"
      ".data \"04aBff\"\n"
      ".const \"b/0\", bf16, [1]\n"
      ".data \"0080\"\n";
  Program p = assemble(src, "k.s");
  EXPECT_EQ(p.const_data, (std::vector<uint8_t>{1, 2, 3, 4, 0xab, 0xff, 0x00, 0x80}));
  ASSERT_NE(p.find("b/0"), nullptr);
  EXPECT_EQ(p.find("b/0")->const_offset, 6u);
  EXPECT_EQ(p.find("W")->kind, TensorKind::Const);
  EXPECT_EQ(p.find("missing"), nullptr);
}

TEST(AsmTensors, Errors) {
  EXPECT_EQ(error_of(".input A, f16, [1]\n"), "k.s:1:11: unknown data type 'f16'");
  EXPECT_EQ(error_of(".input A, f32, [2, -1]\n"), "k.s:1:20: dimension -1 is negative");
  EXPECT_EQ(error_of(".input A, f32, [N]\n"), "k.s:1:17: undefined symbol 'N'");
  EXPECT_EQ(error_of(".input A, f32, [1] @ 0 junk\n"), "k.s:1:24: trailing garbage 'junk'");
  EXPECT_EQ(error_of(".const W, i8, [4]\n.data \"010203\"\nnop\n"), "k.s:1:8: const 'W' needs 4 bytes of .data, got 3");
  EXPECT_EQ(error_of(".const W, i8, [2]\n.data \"010203\"\n"),
            "k.s:2:1: too much data for const 'W': needs 2 bytes, got 3");
  EXPECT_EQ(error_of(".const W, i8, [2]\n.data \"01x2\"\n"), "k.s:2:7: bad hex digit 'x' in .data");
  EXPECT_EQ(error_of(".const W, i8, [2], offset=1\n.data \"01\"\n"),
            "k.s:1:8: const 'W' (2 bytes at offset 1) lies outside the constant data (1 bytes)");
}

TEST(AsmRobustness, HostileExpressionsAreErrors) {
  EXPECT_EQ(error_of("li r1, " + std::string(1000, '(') + "1" + std::string(1000, ')') + "\n"),
            "k.s:1:208: expression nested too deeply");
  EXPECT_EQ(error_of("li r1, " + std::string(1000, '-') + "1\n"), "k.s:1:208: expression nested too deeply");
  std::string chain = "li r1, X";
  for (int i = 0; i < 5000; ++i) chain += "+X";
  EXPECT_EQ(error_of(chain + "\n"), "k.s:1:4009: expression too long");
}

// Random token soup: every input either assembles or ends in isa::Error (run it under ASan too).
TEST(AsmRobustness, RandomInputNeverCrashes) {
  std::vector<std::string> vocab = {
      "r1",    "r31",     "r32",    "s1",       "s40",    "0",      "7",          "0x",       "0b2",    "1e5",
      "-",     "+",       "*",      "/",        "%",      "<<",     ">>",         "(",        ")",      "[",
      "]",     ",",       ":",      "@",        "=",      "\"x\"",  "\"",         "f32",      "sizeof", "cdiv",
      "min",   "defined", "i8",     "bf16",     "wait",   "signal", "accumulate", "relu",     "loop",   "loop:",
      "A",     "K",       ".set",   ".reg",     ".input", ".const", ".data",      "\"0a0b\"", ".if",    ".elif",
      ".else", ".endif",  ".error", ".include", ".name",  "#",      ";",          "$",        "mov",    "inf"};
  for (const auto& d : instructions()) vocab.push_back(d.mnemonic);
  AsmOptions o;
  o.include = [](const std::string& name, const std::string&) -> std::optional<std::string> {
    if (name == "x") return "nop\n";
    return std::nullopt;
  };
  std::mt19937 rng(99);
  int ok = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string src;
    for (int line = 1 + rng() % 6; line > 0; --line) {
      for (int n = rng() % 9; n > 0; --n) src += vocab[rng() % vocab.size()] + (rng() % 3 ? " " : "");
      src += "\n";
    }
    try {
      Program p = assemble(src, "fuzz.s", o);
      ++ok;
      Program back = assemble(disassemble(p), "d.s");
      back.source = p.source;
      EXPECT_EQ(back, p) << src;
    } catch (const Error&) {
    }
  }
  EXPECT_GT(ok, 0);
}

// ---- disassembly ----------------------------------------------------------------------------------------------

TEST(Disassembler, RoundTripsTensorsConstsAndCode) {
  const std::string src =
      ".name \"gemm \\\"small\\\"\"\n"
      ".input A, bf16, [4, 8]\n"
      ".const W, i8, [3]\n"
      ".data \"0a0b0c\"\n"
      ".output C, f32, [4, 4] @ 0x40000\n"
      "loop: dma.ld r1, r2, r3, r4, r5, r6, signal=s1\n"
      "  mxu.lw r1, r2, r3, r4, bf16, wait=s1\n"
      "  li r9, f32(-0.25)\n"
      "  bne r9, r0, loop\n"
      "  halt\n";
  Program p = assemble(src, "k.s");
  std::string text = disassemble(p);
  EXPECT_NE(text.find("# pc 3 (k.s:9)"), std::string::npos) << text;
  Program back = assemble(text, "k.dis.s");
  back.source = p.source;  // the only difference, by design
  EXPECT_EQ(back, p) << text;
}

TEST(Disassembler, RoundTripsTransposedWeightLoadAndGather) {
  const std::string src =
      "mxu.lw r1, r2, r3, r4, bf16, trans, wait=s1\n"
      "mxu.lw r1, r2, r3, r4, i8, trans=0\n"
      "mxu.lw r1, r2, r3, r4, i8\n"
      "dma.gather r1, r2, r3, r4, r5, r6, r7, signal=s2\n";
  Program p = assemble(src, "k.s");
  const InstrDesc& lw = describe(Op::MXULW);
  EXPECT_EQ(decode(p.code[0]).f[lw.operand_index("trans")], 1);
  EXPECT_EQ(decode(p.code[1]).f[lw.operand_index("trans")], 0);
  EXPECT_EQ(p.code[1], p.code[2]);  // the flag defaults to 0: existing programs assemble unchanged
  const Instr g = decode(p.code[3]);
  EXPECT_EQ(g.op, Op::DMAGATHER);
  EXPECT_EQ(g.f[g.desc().operand_index("count")], 7);
  std::string text = disassemble(p);
  EXPECT_NE(text.find("mxu.lw r1, r2, r3, r4, bf16, trans, wait=s1"), std::string::npos) << text;
  EXPECT_NE(text.find("dma.gather r1, r2, r3, r4, r5, r6, r7, signal=s2"), std::string::npos) << text;
  Program back = assemble(text, "k.dis.s");
  back.source = p.source;
  EXPECT_EQ(back, p) << text;
}

TEST(Disassembler, RoundTripsRegions) {
  Program p;
  for (int i = 0; i < 6; ++i) p.code.push_back(encode(Instr{.op = Op::NOP}));
  // Nested with equal bounds, adjacent, ending together, and names that need quoting.
  // flops and bytes: printed when not 0, and exactly (0.1, 1/3 and 2^53 + 2 read back as the same doubles).
  p.regions = {{"node", "a \"quoted\"", 0, 4, 0.1, 1.0 / 3}, {"kernel", "same", 0, 4}, {"kernel", "x.s", 0, 1},
               {"kernel", "y.s", 1, 4, 0, 9007199254740994.0}, {"step", "deep", 2, 4}, {"node", "b", 5, 6, 1e300},
               {"node", "c", 4, 5, 0, 0, 0.1}};
  std::swap(p.regions[5], p.regions[6]);  // in order of begin
  p.ideal_bytes = 1.0 / 3;
  std::string text = disassemble(p);
  EXPECT_NE(text.find(".ideal_bytes 0.3333333333333333\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".region node, \"c\", ideal_bytes=0.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  .region kernel, \"x.s\"\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".region node, \"b\", flops=1e+300\n"), std::string::npos) << text;
  EXPECT_NE(text.find(".region node, \"a \\\"quoted\\\"\", flops=0.1, bytes=0.3333333333333333\n"), std::string::npos)
      << text;
  Program back = assemble(text, "d.s");
  back.source.clear();  // names the disassembly's lines
  EXPECT_EQ(back, p) << text;
  p.regions = {{"node", "a", 0, 4}, {"node", "b", 3, 6}};
  try {
    disassemble(p);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "disassemble: region 1 (node 'b', [3, 6)) overlaps region 0 (node 'a', [0, 4)) without "
                           "nesting in it");
  }
}

TEST(Disassembler, RoundTripsConstsOutOfOrder) {
  Program p;
  p.const_data = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  p.tensors.push_back(TensorDecl{"late", TensorKind::Const, DType::BF16, {2}, 0x100, 4});
  p.tensors.push_back(TensorDecl{"early", TensorKind::Const, DType::I8, {2}, 0x200, 0});
  p.tensors.push_back(TensorDecl{"shared", TensorKind::Const, DType::I8, {2}, 0x300, 0});
  p.tensors.push_back(TensorDecl{"in put", TensorKind::Input, DType::F32, {}, 0x400, 0});
  std::string text = disassemble(p);
  Program back = assemble(text, "d.s");
  EXPECT_EQ(back, p) << text;
}

// A timing-only compile's program declares its consts without their data; `.timing_only` says so in assembly.
// fuzz_tpub found the flag lost in the round trip (validation/fuzz/corpus/tpub/regress-timing-only-flag.tpub).
TEST(Disassembler, RoundTripsTimingOnlyPrograms) {
  Program with_consts;
  with_consts.timing_only = true;
  with_consts.tensors.push_back(TensorDecl{"W", TensorKind::Const, DType::BF16, {64, 32}, 0x1000, 4096});
  with_consts.tensors.push_back(TensorDecl{"b", TensorKind::Const, DType::F32, {32}, 0x3000, 0});
  with_consts.tensors.push_back(TensorDecl{"x", TensorKind::Input, DType::BF16, {8, 64}, 0x4000, 0});
  with_consts.code.push_back(encode(Instr{.op = Op::NOP}));
  Program no_consts = with_consts;
  no_consts.tensors.erase(no_consts.tensors.begin(), no_consts.tensors.begin() + 2);
  for (const Program& p : {with_consts, no_consts}) {
    const std::string text = disassemble(p);
    EXPECT_NE(text.find("\n.timing_only\n"), std::string::npos) << text;
    Program back = assemble(text, "d.s");
    back.source = p.source;
    EXPECT_EQ(back, p) << text;
  }
  // Without the directive, the consts' missing data is an error again.
  std::string text = disassemble(with_consts);
  text.replace(text.find(".timing_only\n"), 13, "");
  EXPECT_THROW(assemble(text, "d.s"), Error);
}

TEST(Disassembler, WrapsDataAt64BytesPerLine) {
  Program p;
  p.const_data.assign(130, 0x5a);
  p.tensors.push_back(TensorDecl{"W", TensorKind::Const, DType::I8, {130}, 0, 0});
  std::string text = disassemble(p);
  std::string full_line;
  for (int i = 0; i < 64; ++i) full_line += "5a";
  EXPECT_NE(text.find(".data \"" + full_line + "\"\n"), std::string::npos) << text;
  size_t lines = 0;
  for (size_t at = text.find(".data"); at != std::string::npos; at = text.find(".data", at + 1)) ++lines;
  EXPECT_EQ(lines, 3u);
  EXPECT_EQ(assemble(text, "d.s"), p);
}

// ---- prepared sources ------------------------------------------------------------------------------------------

// A source that uses its labels (backward and forward) and tensors (placed by the options, auto-placed after
// them, at a fixed HBM address, in VMEM, a constant with data) in operand expressions, with directives that do
// not need them.
const char* kPlacedSource = R"(
.name "placed"
.input a, bf16, [N, 16]
.input b, f32, [3]
.const w, i8, [4]
.data "01020304"
.output c, f32, [N] @ 0x100000
.input v, f32, [8] @ vmem 256
.if defined(a) && N > 2
    li r1, a + 64 * N
.else
    li r1, 7
.endif
.region node, "body"
top:
    li r2, b
    addi r3, r2, w - b
    li r4, c
    li r5, v
    li r6, defined(a) + defined(nothing)
    beq r1, r2, done
    jmp top
.endregion
done:
    li r7, done - top
    halt
)";

TEST(Prepared, PlacesAsAssembleDoes) {
  AsmOptions o = defines({{"N", 4}});
  o.hbm_base = 0x2000;
  o.hbm_align = 256;
  const Prepared prepared = prepare(kPlacedSource, "p.s", o);
  const std::vector<std::map<std::string, uint64_t>> placements = {
      {}, {{"a", 0x40000}}, {{"a", 0x40000}, {"b", 0x1000}, {"w", 0x9000}}, {{"b", 0x80000}}};
  for (const auto& addr : placements)
    for (uint64_t base : {0, 1, 1000}) {
      AsmOptions full = o;
      full.tensor_addr = addr;
      full.base_pc = base;
      const Program want = assemble(kPlacedSource, "p.s", full), got = prepared.place(addr, base);
      EXPECT_EQ(got, want) << "base " << base;
      EXPECT_EQ(serialize(got), serialize(want));
    }
  // The values, worked out: a auto-placed at hbm_base, b after it (aligned), w after b.
  const Program p = prepared.place({}, 10);
  EXPECT_EQ(only_instr(p, 0).f[1], 0x2000 + 64 * 4);    // a + 64 * N
  EXPECT_EQ(only_instr(p, 1).f[1], 0x2000 + 256);       // b: a is 4 x 16 bf16 = 128 bytes
  EXPECT_EQ(only_instr(p, 2).f[2], 0x2000 + 512 - (0x2000 + 256));  // w - b
  EXPECT_EQ(only_instr(p, 6).f[2], 10 + 8);             // beq to done, instruction 8 of code from 10
  EXPECT_EQ(only_instr(p, 7).f[0], 10 + 1);             // jmp to top, instruction 1
  EXPECT_EQ(only_instr(p, 5).f[1], 1);                  // defined(a) + defined(nothing)
}

TEST(Prepared, RefusesSourcesThatNeedAnAddressEarly) {
  // The assembler needs these values in its first pass, so they cannot be left open.
  for (const char* src : {".input a, f32, [4]\n.if a > 0\n    nop\n.endif\n    halt\n",
                          ".input a, f32, [4]\n.set A2, a * 2\n    li r1, A2\n",
                          "top:\n.input a, f32, [top + 4]\n    halt\n"}) {
    EXPECT_NO_THROW(assemble(src, "k.s")) << src;
    EXPECT_THROW(prepare(src, "k.s"), Error) << src;
  }
}

TEST(Prepared, PlacementErrorsAsAssemble) {
  const std::string src = ".input a, f32, [1024]\n.input b, f32, [4]\n    addi r1, r0, a\n    halt\n";
  const Prepared prepared = prepare(src, "k.s");
  AsmOptions o;
  o.tensor_addr = {{"a", 0}, {"b", 64}};  // b lies inside a
  EXPECT_EQ(error_of(src, o), "k.s:2:8: tensor 'b' [64, 80) overlaps tensor 'a' [0, 4096) in hbm");
  EXPECT_THROW(prepared.place(o.tensor_addr, 0), Error);
  o.tensor_addr = {{"a", uint64_t(1) << 40}};  // does not fit addi's immediate (i32)
  const std::string why = error_of(src, o);
  EXPECT_NE(why.find("does not fit"), std::string::npos) << why;
  try {
    prepared.place(o.tensor_addr, 0);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.what(), why);
  }
}

}  // namespace
}  // namespace tpusim::isa
