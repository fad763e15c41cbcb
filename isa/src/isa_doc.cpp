// tpusim_isa_doc OUT.md: writes the ISA reference (docs/isa.md) from the instruction table (isa.def).
// Everything instruction-specific comes from isa::instructions(); the prose sections explain the rules that
// the table's semantics and numerics.h rely on.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"

namespace {

using namespace tpusim::isa;

constexpr Unit kUnits[] = {Unit::Core, Unit::DmaIn, Unit::DmaOut, Unit::Mxu, Unit::Vpu};

const char* unit_title(Unit u) {
  switch (u) {
    case Unit::Core: return "Scalar core (runs in the dispatcher itself)";
    case Unit::DmaIn: return "DMA load engine (HBM to VMEM)";
    case Unit::DmaOut: return "DMA store engine (VMEM to HBM)";
    case Unit::Mxu: return "Matrix unit (weight-stationary systolic array)";
    case Unit::Vpu: return "Vector unit";
  }
  return "?";
}

// A table cell: '|' would end the cell and a newline the row; in prose (not code), '*' would start emphasis
// ("i*stride + j*size").
std::string cell(const std::string& s, bool code = false) {
  std::string out;
  for (char ch : s) {
    if (ch == '|')
      out += "\\|";
    else if (ch == '*' && !code)
      out += "\\*";
    else if (ch == '\n')
      out += "<br>";
    else
      out += ch;
  }
  return out;
}

std::string kind_text(const OperandDesc& o) {
  switch (o.kind) {
    case OperandKind::Reg: return "register";
    case OperandKind::Imm: return std::string(1, 'i').append(std::to_string(o.width));
    case OperandKind::UImm: return std::string(1, 'u').append(std::to_string(o.width));
    case OperandKind::Target: return "target";
    case OperandKind::DType: return "dtype";
    case OperandKind::Sem: return "semaphore";
    case OperandKind::Flag: return "flag";
    case OperandKind::Key: return std::string("key u").append(std::to_string(o.width));
  }
  return "?";
}

// The assembly form, e.g. "mxu.mm vaddr, m, acc, stride, dtype [, accumulate] [, wait=sN] [, signal=sN]".
std::string syntax(const InstrDesc& d) {
  std::string pos, named;
  for (int i = 0; i < d.num_operands; ++i) {
    const OperandDesc& o = d.operands[i];
    if (o.kind == OperandKind::Flag) {
      named += " [, " + o.name + "]";
    } else if (o.kind == OperandKind::Sem && d.unit != Unit::Core) {
      named += " [, " + o.name + "=sN]";
    } else if (o.kind == OperandKind::Key) {
      named += " [, " + o.name + "=N]";
    } else {
      pos += (pos.empty() ? " " : ", ") + o.name;
    }
  }
  return d.mnemonic + pos + named;
}

std::string operands_cell(const InstrDesc& d) {
  std::string out;
  for (int i = 0; i < d.num_operands; ++i) {
    const OperandDesc& o = d.operands[i];
    char bits[32];
    std::snprintf(bits, sizeof bits, "[%d:%d]", o.shift + o.width - 1, o.shift);
    out += (i ? "<br>" : "") + std::string("`") + o.name + "` " + kind_text(o) + " " + bits;
  }
  return out.empty() ? "(none)" : out;
}

void write_overview(std::ostream& o) {
  o << "## Overview\n\n"
       "A program is a sequence of 64-bit instruction words, executed from index 0 by an in-order **dispatch "
       "core**. The core executes its own (scalar) instructions and hands every other instruction, with the values "
       "of the registers it names, to the queue of the unit that executes it. Units run concurrently, each "
       "strictly in the order of its own queue; they synchronise only through semaphores.\n\n"
       "| unit | name in traces | executes | instructions |\n| --- | --- | --- | --- |\n";
  for (Unit u : kUnits) {
    std::string list;
    for (const auto& d : instructions())
      if (d.unit == u) list += (list.empty() ? "`" : ", `") + d.mnemonic + "`";
    o << "| " << unit_title(u) << " | `" << unit_name(u) << "` | "
      << (u == Unit::Core ? "in order, 1 at a time" : "its queue, in order") << " | " << list << " |\n";
  }
  o << "\n### Registers\n\n"
    << kNumRegs << " scalar registers `r0`..`r" << kNumRegs - 1
    << "`, 64 bits each, hold integers (addresses, sizes, loop counters) and f32 bit patterns (scales). "
       "`r0` always reads as zero; writes to it are discarded. A unit instruction reads its register operands when "
       "the core dispatches it, so the core may change them right after.\n\n"
       "### Semaphores and the wait/signal rule\n\n"
    << "Semaphores `s1`..`s" << kNumSems - 1
    << "` are counters of 0.." << kSemMax
    << " shared by all units (`s0` in an operand means \"none\"; `sem.set s0` is a run-time error); `sem.set` "
       "initialises one. A signal that would take a semaphore past " << kSemMax
    << " is a run-time error naming the instruction (a program that never waits on a semaphore it keeps "
       "signalling has a bug). Every "
       "instruction of a unit other than the core carries two optional operands, `wait` and `signal`: before it "
       "starts, the unit waits until semaphore `wait` is positive and decrements it; when it completes (its "
       "results are written), the unit increments semaphore `signal`. A unit does not start the next instruction "
       "of its queue before the current one has started, so a waiting instruction blocks its queue. The "
       "`*.sync` instructions do nothing but wait and signal, in their unit's order. `fence` and `sem.set` wait "
       "until every unit is idle with an empty queue.\n\n"
       "### Data types\n\n| name | code | bytes | also written |\n| --- | --- | --- | --- |\n";
  for (int t = 0; t < kNumDTypes; ++t) {
    DType dt = static_cast<DType>(t);
    std::string also;
    for (const char* a : dtype_aliases())
      if (dtype_from_name(a) == dt) also += (also.empty() ? "`" : ", `") + std::string(a) + "`";
    o << "| `" << dtype_name(dt) << "` | " << t << " | " << dtype_size(dt) << " | " << also << " |\n";
  }
  o << "\n### Encoding\n\n"
       "Each instruction is one little-endian 64-bit word. Bits [7:0] hold the opcode; the operands follow "
       "LSB-first from bit 8, in the order the tables below list them. Bits outside every field must be zero: "
       "the decoder rejects a word with stray bits or an unknown opcode. Operand kinds:\n\n"
       "| kind | bits | meaning |\n| --- | --- | --- |\n"
       "| register | 5 | `r0`..`r31` |\n"
       "| iN / uN | N | signed (two's complement) / unsigned immediate |\n"
       "| target | 32 | branch target: absolute instruction index |\n"
       "| dtype | 3 | data type code (table above) |\n"
       "| semaphore | 5 | `s0`..`s31` (0 = none) |\n"
       "| flag | 1 | option, written by name in assembly |\n\n";
}

void write_numerics(std::ostream& o) {
  o << "## Numerics\n\n"
       "Results are specified bit for bit where the hardware would be exact, and by a fixed order of operations "
       "where it rounds, so every run of a program gives the same bits.\n\n"
       "- **bf16** is the upper half of an f32. Converting f32 to bf16 rounds to nearest, ties to even; a NaN "
       "stays a (quiet) NaN. bf16 to f32 is exact. Element-wise bf16 operations compute in f32 and round the "
       "result to bf16.\n"
       "- **f8e4m3** (also `fp8`) is OCP FP8 E4M3 in its \"fn\" variant, as `torch.float8_e4m3fn` and NVIDIA "
       "Hopper's e4m3: sign, 4 exponent bits (bias 7), 3 mantissa bits; exponent 0 holds the subnormals "
       "(m x 2^-9), no infinities, one NaN pattern per sign (S.1111.111), largest finite value 448. f8e4m3 to f32 "
       "is exact. f32 to f8e4m3 rounds to nearest, ties to even, as if the exponent had no upper limit; a result "
       "above 448 in magnitude (an operand beyond 464, 448 plus half its ulp), an infinity or a NaN gives NaN "
       "with the operand's sign: not saturating, as `tensor.to(torch.float8_e4m3fn)`. A kernel that quantises "
       "scales its values into range first (`vpu.cast ... scale_en`). f8e4m3 is a storage type: the matrix unit "
       "multiplies it and `vpu.cast` and `vpu.acc` convert to and from it; other vector instructions refuse it.\n"
       "- **The accumulators as local memory**: every `vpu.*` address and `mxu.mm`'s input rows may lie past "
       "VMEM's bytes, in the accumulators: accumulator row r, column j is the 32-bit word at VMEM's size + "
       "(r * mxu.cols + j) * 4 (kernels get the address of row 0 as `ACC_ADDR`). There the vector unit works at "
       "its lanes' rate without VMEM's ports, as a GPU's registers (isa.def). DMA and `mxu.lw` reach VMEM only.\n"
       "- **Casts to integers** (`vpu.acc`, `vpu.cast` with an i8 or i32 destination) round to nearest, ties to "
       "even, and saturate: to [-128, 127] for i8 and [-2^31, 2^31-1] for i32; NaN becomes 0.\n"
       "- **Integer arithmetic** in the units (i32 adds, the matrix unit's i8 mode) wraps modulo 2^32. "
       "int8 x int8 products are exact and summed exactly in i32, so i8 matrix results are bit-exact against "
       "any reference.\n"
       "- **bf16 matrix products**: each bf16 x bf16 product is exact in f32; a pass sums them in f32, in an order "
       "the implementation fixes (so runs repeat bit for bit), and then adds the sum to the f32 accumulator (with "
       "`accumulate`); passes accumulate in the program's order of `mxu.mm` instructions. Any such order is within "
       "gamma(K+5) * sum |a*b| of the exact value (gamma(h) = h*u / (1 - h*u), u = 2^-24; Higham 4.2), the bound "
       "validation holds the simulator to against an fp64 reference.\n"
       "- **f8e4m3 matrix products** are computed as bf16's: an f8e4m3 x f8e4m3 product is exact in f32 (4 x 4 "
       "significant bits, magnitudes from 2^-18 to 448^2), summed in f32 in the same fixed order, accumulated in "
       "f32. NaN operands give NaN. The matrix unit multiplies f8e4m3 only where the chip has an fp8 rate "
       "(`mxu.fp8_rate` > 0); elsewhere an f8e4m3 `mxu.lw` or `mxu.mm` is a run-time error naming the instruction.\n"
       "- **Exactness that the functional model relies on**: an int8 x int8 product is at most 2^14 in magnitude, "
       "so a dot product of up to 1024 of them is exact in f32 (at most 2^24 in magnitude), and so is every "
       "matrix-unit pass: K <= mxu.rows <= 1024 (validation checks the worst case, -128 x -128 with K = 1024, on a "
       "1024 x 1024 array).\n"
       "- **Reductions** (`vpu.rsum`) sum in order j = 0..cols-1, in i32 (wrapping) or in f32 for floats.\n"
       "- **f32 vector arithmetic** is IEEE single precision with round to nearest even. `vpu.exp`, "
       "`vpu.recip` and `vpu.rsqrt` are deterministic but not required to be correctly rounded; validation "
       "compares them with an fp64 reference within a stated tolerance. `vpu.log`, `vpu.sin`, `vpu.cos`, `vpu.erf` and `vpu.erfc` (the "
       "transcendental unit's other functions, at the same rate) are specified to the bit: the function evaluated "
       "in f64 (sin and cos after an exact range reduction, whatever the argument's size) and rounded once to f32, "
       "so within 0.5 + 2^-29 ulp of the exact value; validation checks that bound over a sweep of f32 values "
       "against long double, and the simulator against the reference bit for bit. `vpu.floor`, `vpu.ceil` and "
       "`vpu.round` (ties to even) are exact.\n"
       "- **NaN, infinities, signed zeros, overflow.** No instruction traps or sets flags. Float results follow "
       "IEEE 754 (NaN in gives NaN out; inf - inf and 0 x inf give NaN; a result beyond the "
       "type's range is +-inf); a NaN result is a quiet NaN whose sign and payload are unspecified. `vpu.max`, "
       "`vpu.min`, `vpu.rmax` and every ReLU (`vpu.relu`, `vpu.acc relu`) are IEEE 754-2019 *maximum* and "
       "*minimum*: a NaN operand gives NaN, and -0 < +0 (so relu(-0) = +0). Chosen over the older maxNum (which "
       "returns the number and drops the NaN, common in GPU and DSP min/max instructions) because NaN-propagating "
       "max, min, relu and reductions are what XLA/JAX, PyTorch and ONNX define for these operations: a NaN "
       "in a model stays visible in its output instead of turning into a plausible number. Casts to integers "
       "turn NaN into 0 and saturate infinities (above). Each instruction's entry below says what applies to it.\n"
       "- **Scaling** (`scale_en`): the value is converted to f32 and multiplied by the f32 whose bits are in "
       "the `scale` register, before the final cast.\n\n";
}

void write_program_format(std::ostream& o) {
  o << "## Program files (.tpub)\n\n"
       "Little-endian throughout: the magic `TPUB`, u32 version (this build: "
    << kProgramVersion
    << "), u32 section count, then sections, each a u32 id, a u64 byte length and the payload. Readers skip "
       "sections with unknown ids.\n\n"
       "| id | section | payload |\n| --- | --- | --- |\n"
       "| 1 | code | u64 instruction words |\n"
       "| 2 | tensors | u32 count; per tensor: u32 name length, name, u8 kind (0 input, 1 output, 2 const), u8 "
       "dtype, u8 memory space (0 HBM, 1 VMEM), u32 rank, i64 dims[rank], u64 address, u64 offset in the constant "
       "data |\n"
       "| 3 | constant data | raw bytes of the const tensors |\n"
       "| 4 | name | program name (UTF-8) |\n"
       "| 5 | source | optional: u32 count; per instruction: u32 length, \"file:line\" |\n"
       "| 6 | regions | optional: u32 count; per region: u32 length and kind, u32 length and name, u32 begin, u32 "
       "end, f64 flops, f64 bytes |\n"
       "| 7 | cores | optional (1 when absent): u32 cores |\n"
       "| 8 | timing-only | optional, empty: the const tensors' values were never computed |\n"
       "| 9 | ideal bytes | optional: f64 the program's ideal bytes, u32 count (that of section 6), per region: f64 "
       "ideal bytes |\n\n"
       "Loading checks everything: every instruction word must decode, const tensors must lie inside the "
       "constant data, and errors name the byte offset.\n\n";
}

void write_assembly(std::ostream& o) {
  o << R"(## Assembly language

One statement per line. Comments start with `#` or `;` and run to the end of the line. A line may start with
a label, `name:`; labels are absolute instruction indices, counting from the assembler's base pc (0 unless the
caller sets `AsmOptions::base_pc`). Errors read `FILE:LINE:COL: message`, pointing at the offending token.

### Instructions

The mnemonic, then the operands, comma-separated, in the order of the tables below; this is exactly what the
disassembler prints.

- registers: `r0`..`r31`, or an alias defined by `.reg`;
- immediates and branch targets: expressions (below);
- data types: by name, `i8`, `i32`, `bf16`, `f32` (also `int8`, `int32`, `bfloat16`, `fp32`, `float32`), or an
  expression giving the type's number: the symbols `DT_I8`, `DT_I32`, `DT_BF16`, `DT_F32` are predefined, so a
  kernel can take its types as parameters (`mxu.lw r1, r2, r3, r4, IN_DT`); the same holds in `.input`/`.output`;
- the semaphore of `sem.set`: positional, `s3`;
- flags: by their operand name (e.g. `accumulate`, `relu`), in any order after the positional operands;
  an omitted flag is 0; `NAME=expr` sets the flag when the expression is non-zero (`relu=RELU`);
- the semaphores of unit instructions: optional keywords `wait=s1`, `signal=s2` after the positional
  operands, in any order; omitted means none (`s0`).

```
loop:   mxu.mm  r3, r4, r5, r6, bf16, accumulate, wait=s1, signal=s2
        addi    r7, r7, -1
        bne     r7, r0, loop
```

Pseudo-instruction: `mov rd, ra` assembles as `addi rd, ra, 0`.

### Expressions

64-bit signed integers, wrapping on overflow; division or modulo by zero and shift counts outside 0..63
are errors.

- literals: decimal `42`, hexadecimal `0x2a`, binary `0b101010`;
- symbols: `-D` defines, `.set` symbols, labels, and tensor names (a tensor's HBM address);
- operators, with C's precedence, from loosest: `||`, `&&`, `|`, `^`, `&`, `==` `!=`, `<` `<=` `>` `>=`,
  `<<` `>>`, `+` `-`, `*` `/` `%`; unary `-` `~` `!`; parentheses. `&&` and `||` short-circuit;
- functions: `cdiv(a, b)` (division rounded up), `min(a, b)`, `max(a, b)`, `align(a, b)` (a rounded up to a
  multiple of b), `sizeof(DTYPE)` (bytes of a data type), `defined(NAME)` (1 if NAME is a symbol at this
  point), `f32(x)`: the IEEE float32 bit pattern of x as an integer. x is a decimal or float literal, possibly
  negative (`f32(0.5)`, `f32(-1e-3)`, also `inf` and `nan`), rounded to the nearest float, or any integer
  expression, converted to float: `li r5, f32(0.5)`.

Instruction operands may refer to labels further down (and to symbols defined further down, which then have
their final value). Everything else sees only what is defined above it: `.set`, `.if`, tensor dimensions and
addresses. An instruction sees a `.set` symbol's value at its own line.

### Directives

| directive | meaning |
| --- | --- |
| `.set NAME, expr` (or `.equ`) | defines a symbol, unless `-D` (`AsmOptions::defines`) gave it: `.set` gives defaults that `-D` overrides. A later `.set` of the same name redefines it for the lines below. |
| `.default NAME, expr` | defines a symbol only if nothing (`-D`, `.set`, an including file's `.default`) has: a kernel's parameters with their defaults |
| `.reg NAME, rN` | a register alias, usable wherever a register is expected, from the next line on |
| `.input NAME, DTYPE, [d0, d1, ...] [@ addr]` | declares an input tensor in HBM (dimensions are expressions; `[]` is a scalar) |
| `.output NAME, DTYPE, [dims] [@ addr]` | declares an output tensor |
| `.input NAME, DTYPE, [dims] @ vmem addr` (or `.output`) | a tensor kept in VMEM at a fixed address: the runtime writes (reads) it there directly and the kernel uses it in place, as activations that stay on chip between layers; its name's value is its VMEM address |
| `.const NAME, DTYPE, [dims] [@ addr]` | declares a constant tensor; the `.data` lines right after it give its bytes, exactly as many as it has |
| `.const NAME, DTYPE, [dims] [@ addr], offset=N` | a constant tensor whose bytes are at offset N of the constant data (written by `.data` lines not following a `.const`) |
| `.data "HEX"` | bytes in hexadecimal (whitespace ignored), appended to the constant data |
| `.name "text"` | the program's name |
| `.cores N` | the cores that run the program, 1 to 1024 (`Program::cores`, default 1): each runs all of it with its own `core.id` |
| `.ideal_bytes N` | the HBM bytes the whole program cannot avoid (`Program::ideal_bytes`: for a compiled model, each input and weight read once and each output written once), for the ideal roofline bound in profiles; 0 or absent: not given; N is a plain decimal number |
| `.timing_only` | marks the program of a timing-only compile (`Program::timing_only`): its `.const` tensors are declared without their `.data`, and the runtime runs it timing-only |
| `.include "file"` | assembles another file here (default: relative to the including file's directory) |
| `.if expr` / `.elif expr` / `.else` / `.endif` | conditional assembly; nestable; each file closes its own |
| `.error "message"` | reports an error at this line, if reached in an active branch |
| `.region KIND, "name"` ... `.endregion` | names the instructions between them (`Program::regions`), for profiles: KIND `node` marks a graph node's code, `kernel` a kernel fragment (the compiler writes both; any identifier is allowed). Regions nest; each holds at least one instruction; each file closes its own |
| `.region KIND, "name", flops=N, bytes=N, ideal_bytes=N` | a region with the work it stands for (`Region::flops`: arithmetic operations, a multiply-add is 2; `Region::bytes`: HBM bytes read and written; `Region::ideal_bytes`: the HBM bytes the work cannot avoid, each input and weight read once and each output written once), for roofline bounds in profiles; any may be left out (0: unknown); N is a plain decimal number (`1024`, `2.5e9`) |

A tensor name may be an identifier or a quoted string (for names such as `"conv1/weight"`); an identifier
name is also a symbol whose value is the tensor's HBM address. A tensor's address is, in this order: the
`@ addr` written in the source; the caller's `AsmOptions::tensor_addr` for its name; else the next free address,
aligned to `AsmOptions::hbm_align` (default 4096), at or above `AsmOptions::hbm_base` and past every tensor
declared before it. Two tensors of one memory space may not overlap (an error names both).

Strings take the escapes `\"`, `\\`, `\n`, `\t`, `\r`, `\0` and `\xNN`.

### Disassembly

`isa::disassemble` prints `.name`, `.cores`, `.timing_only` and `.ideal_bytes` (when not the defaults), every tensor with its explicit `@` address, the constant
data (`.data`, 64 bytes a line), then one instruction a line with `# pc N` (and the original source line, if
the program has one), with `.region`/`.endregion` lines around each region's instructions (with `flops=`,
`bytes=` and `ideal_bytes=` when not 0).
Assembling it with the default options gives an identical program, except for
`Program::source`, which then names the disassembly's lines.

)";
}

void write_units(std::ostream& o) {
  o << "## Instructions\n\nTiming names configuration parameters (`section.key`).\n\n";
  for (Unit u : kUnits) {
    o << "### " << unit_title(u) << " (`" << unit_name(u) << "`)\n\n"
      << "| mnemonic | opcode | assembly | operands | semantics | timing |\n"
      << "| --- | --- | --- | --- | --- | --- |\n";
    for (const auto& d : instructions()) {
      if (d.unit != u) continue;
      char opcode[8];
      std::snprintf(opcode, sizeof opcode, "0x%02x", d.opcode);
      o << "| `" << d.mnemonic << "` | " << opcode << " | `" << cell(syntax(d), true) << "` | " << operands_cell(d)
        << " | " << cell(d.semantics) << " | " << cell(d.timing) << " |\n";
    }
    o << "\n";
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: tpusim_isa_doc OUT.md\n";
    return 2;
  }
  std::ostringstream o;
  o << "# The tpusim instruction set\n\n"
       "Generated from `isa/include/tpusim/isa/isa.def` by `tpusim_isa_doc`; edit the table, not this file.\n\n"
       "Contents: [Overview](#overview), [Numerics](#numerics), [Program files](#program-files-tpub), "
       "[Assembly language](#assembly-language), [Instructions](#instructions).\n\n";
  write_overview(o);
  write_numerics(o);
  write_program_format(o);
  write_assembly(o);
  write_units(o);
  std::ofstream f(argv[1], std::ios::binary | std::ios::trunc);
  f << o.str();
  f.close();
  if (!f) {
    std::cerr << "tpusim_isa_doc: cannot write '" << argv[1] << "'\n";
    return 1;
  }
  return 0;
}
