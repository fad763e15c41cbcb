// The typed emitter: kernel generators build programs through it instead of printing assembly text that is then
// parsed again. Its instruction methods are generated from isa.def at build time (isa/src/emitter_gen.cpp writes
// tpusim/isa/emitter_ops.h), so an instruction added to the table is a method here without a line written by hand.
//
//   isa::Emitter e("copy", "<copy>/copy", base_pc);
//   isa::Label done = e.label();
//   e.li(isa::reg(1), 4096);
//   e.bne(isa::reg(31), isa::reg(0), done);
//   e.dma_ld(isa::reg(2), isa::reg(1), isa::reg(3), isa::reg(4), isa::reg(0), isa::reg(0), {.wait = isa::sem(1)});
//   e.bind(done);
//   e.halt();
//   isa::Program p = e.finish();
//
// A method per instruction, named after its mnemonic with '.' as '_' (a C++ keyword gets a trailing '_': and_,
// or_, xor_); positional operands are parameters (Reg, Sem, Label, DType, int64_t for immediates) in the table's
// order; flags, keys (mxu=) and a unit's wait= and signal= are fields of the instruction's options struct
// (DmaLdOptions, ...), all defaulted. The program is what the assembler makes of the same instructions (the test
// Emitter.EveryInstructionEncodesAsTheAssemblerDoes checks that for every instruction of the table).
#pragma once

#include "tpusim/isa/emitter_ops.h"
