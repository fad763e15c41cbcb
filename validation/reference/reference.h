// The reference machine: an executable definition of the tpusim ISA (isa.def's semantics and docs/isa.md's
// "Numerics"), written plainly from those words. It shares no code with the simulator: from the isa library it
// takes only the decoder and the instruction table (operand names), never isa/numerics.h. Like tinygrad's
// ops_python.py it is the living definition: when the simulator and this disagree, one of the two is wrong
// about the document.
//
// Execution model. The reference executes a program in PROGRAM ORDER: the core dispatches an instruction and a
// unit instruction completes right there, before the next one is dispatched. Semaphores (`wait`/`signal`,
// sem.set) and fences are therefore no-ops. For a race-free program - one whose semaphores order every pair of
// unit instructions that touch the same memory with at least one writing it - this sequential order gives the
// same memory contents as the decoupled hardware, whose units run concurrently; that equality is the contract
// the simulator must meet. (A program with a race may legitimately differ; the reference cannot see races.)
//
// State: per core, 32 registers (r0 reads as zero), VMEM, the accumulator memory ACC (mxus * acc_rows x cols
// 32-bit words: matrix unit u owns rows [u * acc_rows, (u + 1) * acc_rows)), and each matrix unit's active and
// shadow weight tiles; per chip, HBM and the shared memory (sparse: pages appear, zero-filled, when first
// touched). Out-of-range accesses and misuse throw reference::Error naming the pc and the instruction.
//
// Several cores (a program's .cores): each runs the program in program order, one core after another, from the
// start or a barrier to its next barrier or its end; when every core waits at the barrier, all go on. For a
// program whose cores touch one another's data only across barriers this is what the chip computes. sem.signal
// is checked (its core must run the program) and otherwise a no-op, like every semaphore here: a program that
// hands data between cores by signals alone is outside what this reference checks.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <unordered_map>
#include <vector>

#include "reference/numerics.h"
#include "tpusim/isa/program.h"

namespace tpusim::reference {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The architecture, as plain numbers (the caller maps sim::ChipConfig onto this).
struct Config {
  int rows = 8;               // matrix unit: K extent of a weight tile
  int cols = 8;               // matrix unit: N extent of a weight tile; ACC row width
  int acc_rows = 256;         // ACC depth
  uint64_t vmem_bytes = 1 << 20;
  uint64_t hbm_bytes = 1ull << 30;
  int cores = 1;              // chip.cores: the most a program may ask for
  int mxus = 1;               // core.mxus: matrix units per core
  uint64_t shared_bytes = 0;  // the shared memory level (0: none)
  int fp8_rate = 1;           // mxu.fp8_rate: 0 = the matrix unit refuses f8e4m3 (the rate itself is timing only)
};

// How float sums (bf16 matrix products, vpu.rsum) are computed; see tolerance.h.
enum class FloatSums {
  Fp64,    // in fp64 (ACC keeps the unrounded fp64 sum; it is rounded to f32 when read): the fp64 reference
  IsaF32,  // in f32, in index order: what the ISA fixes for vpu.rsum (bit-exact expectations); for mxu.mm, whose
           // order within a pass the ISA leaves to the implementation, one valid order among others
};

struct Options {
  FloatSums sums = FloatSums::Fp64;
  uint64_t max_instructions = uint64_t{1} << 32;  // a guard against endless loops
};

class Reference {
 public:
  explicit Reference(const Config& cfg, const Options& opts = {});

  const Config& config() const { return cfg_; }
  void write_hbm(uint64_t addr, const void* data, size_t bytes);
  void read_hbm(uint64_t addr, void* data, size_t bytes) const;
  // Copies a program's Const tensors into HBM (the runtime does this before a run; run() does not).
  void load_constants(const isa::Program& p);

  // Runs `p` from pc 0 until halt or past its last instruction; memories persist between runs, registers are
  // cleared at the start. Returns the number of instructions executed. Throws Error.
  uint64_t run(const isa::Program& p);

  int64_t reg(int i, int core = 0) const { return cores_.at(static_cast<size_t>(core)).regs[i]; }

 private:
  // One ACC word. Integer passes store an i32; float passes store a value that is read as f32 (rounded to f32
  // on reading with FloatSums::Fp64). Reading a word as the other type reinterprets its 32 bits.
  struct AccWord {
    bool is_float = false;
    int32_t i = 0;
    double f = 0;
  };
  struct Tile {
    DType dtype = DType::I8;
    int k = 0, n = 0;
    std::vector<double> w;  // rows x cols, zero outside k x n
  };

  // One core's state.
  struct CoreState {
    int64_t regs[isa::kNumRegs] = {};
    std::vector<uint8_t> vmem;
    std::vector<AccWord> acc;          // mxus * acc_rows x cols
    std::vector<Tile> active, shadow;  // per matrix unit
    std::vector<char> have_active, have_shadow;
    int64_t pc = 0;
    bool done = false, at_barrier = false;
  };
  static constexpr int64_t kBarrier = -2;  // core()'s return value for a barrier: stop there

  // Runs the current core until the program's end or a barrier.
  void run_core(const isa::Program& p, uint64_t& executed);
  // Returns the next pc, or -1 to end the program, or kBarrier.
  int64_t core(const isa::Instr& in, int64_t pc);
  void dma(const isa::Instr& in);
  void mxu(const isa::Instr& in);
  void vpu(const isa::Instr& in);
  void vpu_elementwise(const isa::Instr& in);
  void vpu_reduce(const isa::Instr& in);
  void vpu_rdot(const isa::Instr& in);
  void vpu_cdot(const isa::Instr& in);
  void vpu_rowwise(const isa::Instr& in);
  void vpu_acc(const isa::Instr& in);
  void vpu_cast(const isa::Instr& in);

  // Operand access by the names of isa.def: a field's raw value, or the value of the register it names.
  int64_t field(const isa::Instr& in, const char* name) const;
  int64_t value(const isa::Instr& in, const char* name) const;
  DType dtype(const isa::Instr& in, const char* name) const;

  [[noreturn]] void fail(const std::string& what) const;
  uint8_t* vmem(int64_t addr, int64_t bytes);
  // An element of the vector unit's or mxu.mm's local address space: VMEM, then (from vmem_bytes) the ACC words'
  // bytes (isa.def), little-endian.
  double vmem_load(int64_t addr, DType t);
  void vmem_store(int64_t addr, DType t, double v);
  void acc_bytes(int64_t addr, int64_t n, uint8_t* bytes, bool write);
  void check_hbm(int64_t addr, int64_t bytes) const;
  uint8_t* hbm_page(uint64_t page);
  using Pages = std::unordered_map<uint64_t, std::vector<uint8_t>>;
  static void write_pages(Pages& mem, uint64_t addr, const void* data, size_t bytes);
  static void read_pages(const Pages& mem, uint64_t addr, void* data, size_t bytes);
  AccWord& acc(int64_t row, int64_t col);
  double acc_read(int64_t row, int64_t col, DType adt);

  Config cfg_;
  Options opts_;
  Pages hbm_;     // page number -> kHbmPage bytes
  Pages shared_;  // the shared memory level, the same way
  std::vector<CoreState> cores_;
  CoreState* c_ = nullptr;  // the core executing
  int core_ = 0;            // its index
  int running_ = 1;         // cores running the program
  // Where we are, for error messages.
  const isa::Program* prog_ = nullptr;
  int64_t pc_ = 0;
  const isa::Instr* instr_ = nullptr;
};

}  // namespace tpusim::reference
