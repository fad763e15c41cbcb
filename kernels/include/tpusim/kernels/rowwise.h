// A generator of fused row-wise vector kernels: C++ that emits accelerator assembly for a small expression graph
// over an [R, C] problem (rows x cols, row-major), one kernel per fused group of elementwise ops (with
// broadcasting), activations, row reductions (sum, max, mean over the last axis) and what they compose into:
// softmax, layer norm, GELU, ...
//
// Semantics. Every value is either Full (one element per [r, c]), PerRow (one per row r: the result of a Row*
// reduction, or a per_row input) or a scalar Const. Binary ops broadcast PerRow and Const operands over Full ones
// (and Const over PerRow); Row* reductions of a PerRow value are the value itself (a reduction over a last axis
// of one element); ops whose arguments are all Const are folded on the host (in f32). All arithmetic is f32 in
// VMEM; HBM tensors may be f32, bf16 (or i32/i8), cast on the way in and out with vpu.cast (round to nearest
// even). Composite functions are built from the vector unit's instructions:
//   Neg x*(-1)   Abs max(x,-x)   Div a*recip(b)   Sqrt recip(rsqrt(x)) (0 -> 0)   Sigmoid recip(1+exp(-x))
//   Tanh 1-2*recip(exp(2x)+1) (saturates to +-1; absolute error about 2e-7 near 0)
//   Erf  vpu.erf (the f32 nearest the exact value)
//   Gelu 0.5*x*(1+erf(x/sqrt2)) computed as 0.5*x*erfc(-x/sqrt2) (vpu.erfc: no cancellation for x << 0)
//   GeluTanh 0.5*x*(1+tanh(k*(x+0.044715x^3))) computed as x*sigmoid(2k*(...))
//   Pow  exponents 1, 2, 3, 0.5, -1, -0.5 only (else std::invalid_argument)   RowMean RowSum*(1/C)
//   Clip min(max(x,lo),hi)   Max/Min with a PerRow or Const operand broadcast it to a Full temporary first.
//   RowSum: vpu.rsum, which adds in order; rows of C >= 1024 columns with a divisor K of C near sqrt(C) are
//   summed in two steps (sums of K columns, then their sum) so that the f32 error grows like sqrt(C), not C.
//   Log Sin Cos Floor Ceil Round: vpu.log, vpu.sin, vpu.cos (the f32 nearest the exact value, any argument),
//   vpu.floor, vpu.ceil, vpu.round (ties to even; exact)
//   Sign min(max(x*2^127*2^127, -1), 1): exact (+-1, +-0 kept, NaN stays NaN; the two products take the smallest
//   subnormal past 1)
//   Softplus max(x,0) + log(1 + exp(min(x,-x))) (= log(1+exp(x)) without overflow; absolute error about 1e-7,
//   so for x < -16, where the value is below 1e-7, relative accuracy is lost: 1 + exp(x) rounds to 1)
//   Mish x*tanh(softplus(x)) computed as x*n/(n+2), n = e*(e+2), e = exp(min(x,20)): no cancellation for x << 0
//   (relative error a few f32 ulps everywhere; n/(n+2) is 1 in f32 beyond x = 20)
//
// Constants. The kernel needs no constant tensor and no extra HBM input: at its start it makes 0 with a
// vpu.rsum over zero columns, 1 = exp(0), and every other constant c as vpu.cast(1, scale = bits(c)) (f32 to
// f32, exact) into a small table at the bottom of its VMEM region; ops then broadcast a constant with
// vpu.addrow/subrow/mulrow over one "row" of n elements.
//
// Schedule. The rows are cut into tiles of T rows; the per-tile code is emitted once inside an assembly loop.
// Loads of tile i+1 (dmain), the vector work of tile i and the stores of tile i-1 (dmaout) overlap through two
// slots of input and output staging buffers (semaphores s1..s5, initialised by the kernel); with three tiles or
// more, a third slot where it fits beside tiles of T rows, and the loads then run two tiles ahead (tile i+2 loads
// while tile i+1's transfer may still be in flight). Periodic inputs (period P) whose pattern is the same in every
// tile (T % P == 0, or a single tile) are loaded once at the start (one dma.ld with hstride 0 repeats the P rows):
// after the first tile's inputs, the vector unit waiting for them only before its first instruction that reads one
// (a LayerNorm's scale, after its mean and variance), unless one needs an f32 copy (then first, the copies made
// before the loop); otherwise each tile loads its rows in contiguous pieces with wrap-around. Temporaries live in tile buffers
// allocated by liveness over the lowered instruction list (a dead value's buffer, an f32 input's staging buffer
// included, is reused, in place where possible); an f32 output is computed directly into its staging buffer.
//
// Tile size: T is the largest row count such that every buffer (2 slots of input and output staging, 3 where
// Program::slots asks for them; the loop-invariant inputs, the temporaries, the constant table, each 64-byte
// aligned) fits in the VMEM region, and at most max(1, 128 * VPU_WIDTH / C) rows (tiles of about 128 vector-unit
// passes: long instructions, yet enough tiles for the pipeline's fill and drain to be small), at most S (the rows
// of one core). With several tiles, T is then rounded down to a multiple of the periodic inputs' periods (the lcm
// of those that fit, so that their pattern is loop-invariant), and to whole vector-unit passes (T * C a multiple
// of VPU_WIDTH) when that costs at most 1/8 of the rows. A row that does not fit throws std::invalid_argument.
//
// Several cores (Program::cores > 1). S = ceil(R / cores), rounded up to a multiple of the periodic inputs'
// periods (the lcm of those at most S) when that costs at most 1/8 of S, so that every core's first row starts
// the pattern. A periodic input is loop-invariant when every tile of every core starts at a multiple of its
// period (S and T multiples of it, or one tile per core); otherwise it is loaded per tile like the others. The
// tile loop runs over global row numbers from the core's first row, so addresses are those of one core's code.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "tpusim/isa/isa.h"
#include "tpusim/isa/program.h"
#include "tpusim/kernels/dma_load.h"

namespace tpusim::isa {
class Emitter;  // tpusim/isa/emitter.h
struct Reg;
}  // namespace tpusim::isa

namespace tpusim::kernels::rowwise {

enum class Op {
  Input, Const,                              // leaves
  Add, Sub, Mul, Div, Max, Min, Pow,          // binary (Pow: args[0] ** value, a constant exponent)
  Neg, Abs, Relu, Exp, Recip, Sqrt, Rsqrt, Tanh, Sigmoid, Erf, Gelu, GeluTanh, Clip,  // unary
  Log, Sin, Cos, Floor, Ceil, Round, Sign, Softplus, Mish,                            // unary
  RowSum, RowMax, RowMean                     // reductions over the last axis: Full -> PerRow
};
const char* op_name(Op op);

// An HBM input. Full: [R, C] elements, or a smaller [period, C] tensor repeated: row r reads row r % period
// (period 0 = R; period 1 = one [C] vector for every row, like a bias or layer norm's gamma). per_row: [R] (or
// [period]) values, one per row. stride > 0: row r of a Full input of period 0 is at addr + r * stride (a tap of a
// strided window read in place: the compiler's ops_conv.cpp tap_views), each tile's rows one strided transfer.
struct Input {
  uint64_t addr = 0;
  isa::DType dtype = isa::DType::F32;
  bool per_row = false;
  int64_t period = 0;
  std::string name = {};  // the tensor's name in the program ("in<i>" when empty)
  int64_t stride = 0;     // bytes from one row to the next; 0: contiguous rows (C elements)
  bool operator==(const Input&) const = default;
};

// args: indices of earlier nodes. Input: `input` indexes Program::inputs. Const: the scalar `value`. Pow: the
// exponent in `value`. Clip: bounds lo, hi.
struct Node {
  Op op = Op::Input;
  std::vector<int> args = {};
  int input = -1;
  float value = 0;
  float lo = 0, hi = 0;
  bool operator==(const Node&) const = default;
};

// Writes node `node` to HBM at addr: a Full node as [R, C], a PerRow node as [R] (a Const node as [R, C]). An i8
// output of x * c (c a Const) where an earlier output stores x as bf16 is that output's int8 copy: the kernel
// casts the stored bf16 values with the scale c (vpu.cast scale_en, one pass), so that the copy quantises x as
// stored, not the f32 product.
struct Output {
  int node = -1;
  uint64_t addr = 0;
  isa::DType dtype = isa::DType::F32;
  std::string name = {};  // "out<i>" when empty
  bool operator==(const Output&) const = default;
};

struct Program {
  int64_t rows = 0, cols = 0;
  std::vector<Input> inputs;
  std::vector<Node> nodes;
  std::vector<Output> outputs;
  // The VMEM bytes the kernel may use: [vmem_base, vmem_base + vmem_bytes); vmem_bytes 0 = up to VMEM_BYTES.
  uint64_t vmem_base = 0, vmem_bytes = 0;
  // The cores that share the rows (SPMD: every core runs the same code on its own rows, found with core.id; core i
  // takes rows [i * S, min(R, (i + 1) * S)), S = Plan::core_rows; a core with none skips the kernel). 1: the
  // code of a single core, which reads no core id.
  int64_t cores = 1;
  // Input and output staging slots: 2 or 3 (the loads run one or two tiles ahead), or 0 for the generator's choice
  // (3 where they fit beside the largest tiles that fit with 2, and there are 3 tiles or more).
  int slots = 0;
  // The vector unit's own values (the temporaries, the f32 copies of loop-invariant inputs, the constant table) in
  // the accumulators (isa.def: ACC_ADDR) where they fit, read and written at the lanes' rate without VMEM's ports,
  // as a GPU keeps them in its register file; the staging slots, which transfers reach, stay in VMEM. false: all
  // in VMEM. The same instructions on the same values either way: the same results.
  bool accumulators = true;
  // Loads for later kernels (the compiler's weight stream, codegen.cpp: stream_weights), as GemmChip::background:
  // issued in pieces of equal size, one after each tile's loads, what is left after the last tile; one core, their
  // VMEM outside this kernel's. The same results.
  std::vector<DmaLoad> background = {};

  // Builders: each appends a node and returns its index.
  int input(int index);
  int constant(float v);
  int unary(Op op, int a);
  int binary(Op op, int a, int b);
  int pow(int a, float exponent);
  int clip(int a, float lo, float hi);
  bool operator==(const Program&) const = default;
};

// Where output i is an i8 output of x * c (a Mul of an earlier output's node x and a Const c, in either order), the
// first such earlier output (of type bf16 only, with bf16_only: the int8 copy Output describes), c in *scale;
// else -1.
int int8_copy_of(const Program& p, size_t i, float* scale, bool bf16_only);

// What the generator decided (for tests and reports).
struct Plan {
  int64_t tile_rows = 0;           // T
  int64_t core_rows = 0;           // S: the rows of one core (R on one core)
  int64_t cores_used = 0;          // ceil(R / S): the cores that get rows
  int64_t tiles = 0;               // ceil(S / T), per core
  int full_temps = 0;              // Full temporary tile buffers after liveness-based reuse
  int row_temps = 0;               // PerRow temporary buffers
  int vector_ops_per_tile = 0;     // vector-unit instructions in the loop body
  int constants = 0;               // entries of the constant table
  uint64_t vmem_used = 0;          // bytes of the VMEM region in use
  int slots = 2;                   // input and output staging slots (loads run slots - 1 tiles ahead)
  std::vector<bool> invariant;     // per input: loaded once at the start (periodic pattern equal in every tile)
  bool in_accumulators = false;    // the vector unit's own values in the accumulators (Program::accumulators)
};

// An elementwise program applied by another kernel to f32 values it already holds in VMEM, as an epilogue
// (gemm_chip's drain: a GEMM's activation, GELU after the bias): p has one input, Full and f32, one Full output and
// no reductions or per-row values (is_elementwise); its rows and cols are not used. The code is the row-wise
// kernel's own lowering of p, instruction for instruction on each element, so the results are the same bits as
// the row-wise kernel's on the same f32 values.
bool is_elementwise(const Program& p);
struct Epilogue {
  uint64_t bytes = 0;     // VMEM it takes from its base: the constant table and the temporaries
  int vector_ops = 0;     // vector-unit instructions per apply (each a pass over the n elements)
  // Builds the constant table: run once, before any apply. Scratch registers s0..s2; `one` must hold 1.
  void init(isa::Emitter& e, isa::Reg one, isa::Reg s0, isa::Reg s1, isa::Reg s2) const;
  // out[i] = f(in[i]) for i < n (at most the elements the epilogue was made for): `in` and `out` registers holding
  // VMEM addresses (in: f32, used as scratch; out: the output's type), `n` the element count, `one` holding 1,
  // and three scratch registers.
  void apply(isa::Emitter& e, isa::Reg in, isa::Reg out, isa::Reg n, isa::Reg one, isa::Reg s0, isa::Reg s1,
             isa::Reg s2) const;

  // The code epilogue() made, which init and apply emit: the constant table (values from const_base, 4 bytes
  // apart) and one step per vector instruction, its operands VMEM addresses or kIn / kOut (the registers apply is
  // given).
  static constexpr int64_t kIn = -1, kOut = -2;
  struct Step {
    enum Kind { Bin, Bcast1, Un, Zero, Cast } kind = Bin;
    std::string mn;                // the vector instruction, vpu.<mn> (Bin, Bcast1, Un)
    int64_t d = 0, a = 0, b = 0;   // destination and sources (Bcast1: b is the constant's address)
    isa::DType sdt = isa::DType::F32, ddt = isa::DType::F32;  // Cast's types
  };
  uint64_t const_base = 0;
  std::vector<float> consts;
  std::vector<Step> steps;
};
// Throws std::invalid_argument unless is_elementwise(p). Its VMEM from `base` (rounded up to 64 bytes).
Epilogue epilogue(const Program& p, int64_t max_elements, uint64_t base);

// Kernel symbols needed in `symbols`: VMEM_BYTES and VPU_WIDTH (sim::kernel_symbols gives them). Throws
// std::invalid_argument on a malformed program, an unsupported exponent, or a row that does not fit in VMEM.
Plan plan(const Program& p, const std::map<std::string, int64_t>& symbols);
// The kernel: tensors declared at their given HBM addresses (names from Input/Output::name), code from instruction
// `base_pc`; it ends by falling off its last instruction (no halt). Built through the typed emitter
// (tpusim/isa/emitter.h), without assembly text; its source lines read "<rowwise>/NAME at rowwise.cpp:LINE".
isa::Program kernel(const Program& p, const std::map<std::string, int64_t>& symbols, uint64_t base_pc = 0,
                    const std::string& name = "rowwise");
// kernel()'s program (at base 0) as assembly text that assembles back to it (isa::disassemble), after a comment
// line that gives the plan (tiles, vector instructions per tile, VMEM): for reading and for tests.
std::string source(const Program& p, const std::map<std::string, int64_t>& symbols,
                   const std::string& name = "rowwise");

}  // namespace tpusim::kernels::rowwise
