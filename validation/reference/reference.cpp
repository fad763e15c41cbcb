// The reference machine: the core, the DMA engines and the matrix unit. The vector unit is in reference_vpu.cpp.
#include "reference/reference.h"

#include <cstring>
#include <limits>

namespace tpusim::reference {

using isa::Op;

namespace {
constexpr uint64_t kHbmPage = 1 << 16;

std::string hex(int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, v < 0 ? "-0x%llx" : "0x%llx", static_cast<unsigned long long>(v < 0 ? -v : v));
  return buf;
}
}  // namespace

Reference::Reference(const Config& cfg, const Options& opts) : cfg_(cfg), opts_(opts) {
  cores_.resize(static_cast<size_t>(cfg.cores));
  for (CoreState& c : cores_) {
    c.vmem.assign(cfg.vmem_bytes, 0);
    c.acc.resize(static_cast<size_t>(cfg.mxus) * cfg.acc_rows * cfg.cols);
    Tile empty;
    empty.w.assign(static_cast<size_t>(cfg.rows) * cfg.cols, 0.0);
    c.active.assign(static_cast<size_t>(cfg.mxus), empty);
    c.shadow = c.active;
    c.have_active.assign(static_cast<size_t>(cfg.mxus), 0);
    c.have_shadow = c.have_active;
  }
  c_ = &cores_[0];
}

// ---- host access ------------------------------------------------------------------------------------------

uint8_t* Reference::hbm_page(uint64_t page) {
  auto& p = hbm_[page];
  if (p.empty()) p.assign(kHbmPage, 0);
  return p.data();
}

void Reference::write_pages(Pages& mem, uint64_t addr, const void* data, size_t bytes) {
  const auto* src = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes;) {
    uint64_t a = addr + i, off = a % kHbmPage;
    size_t n = std::min<size_t>(bytes - i, kHbmPage - off);
    auto& page = mem[a / kHbmPage];
    if (page.empty()) page.assign(kHbmPage, 0);
    std::memcpy(page.data() + off, src + i, n);
    i += n;
  }
}

void Reference::read_pages(const Pages& mem, uint64_t addr, void* data, size_t bytes) {
  auto* dst = static_cast<uint8_t*>(data);
  for (size_t i = 0; i < bytes;) {
    uint64_t a = addr + i, off = a % kHbmPage;
    size_t n = std::min<size_t>(bytes - i, kHbmPage - off);
    auto it = mem.find(a / kHbmPage);
    if (it == mem.end())
      std::memset(dst + i, 0, n);
    else
      std::memcpy(dst + i, it->second.data() + off, n);
    i += n;
  }
}

void Reference::write_hbm(uint64_t addr, const void* data, size_t bytes) {
  if (addr > cfg_.hbm_bytes || bytes > cfg_.hbm_bytes - addr) throw Error("write_hbm outside HBM");
  write_pages(hbm_, addr, data, bytes);
}

void Reference::read_hbm(uint64_t addr, void* data, size_t bytes) const {
  if (addr > cfg_.hbm_bytes || bytes > cfg_.hbm_bytes - addr) throw Error("read_hbm outside HBM");
  read_pages(hbm_, addr, data, bytes);
}

void Reference::load_constants(const isa::Program& p) {
  for (const auto& t : p.tensors)
    if (t.kind == isa::TensorKind::Const) write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());
}

// ---- the fetch loop -----------------------------------------------------------------------------------------

uint64_t Reference::run(const isa::Program& p) {
  if (p.cores < 1 || p.cores > static_cast<uint32_t>(cfg_.cores))
    throw Error("the program runs on " + std::to_string(p.cores) + " cores, the machine has " +
                std::to_string(cfg_.cores));
  prog_ = &p;
  instr_ = nullptr;
  running_ = static_cast<int>(p.cores);
  for (int i = 0; i < running_; ++i) {
    CoreState& c = cores_[static_cast<size_t>(i)];
    std::fill(std::begin(c.regs), std::end(c.regs), 0);
    c.pc = 0, c.done = false, c.at_barrier = false;
  }
  uint64_t executed = 0;
  for (;;) {
    // Each core from where it stands to its next barrier or its end, in core order.
    for (int i = 0; i < running_; ++i) {
      core_ = i, c_ = &cores_[static_cast<size_t>(i)];
      if (!c_->done && !c_->at_barrier) run_core(p, executed);
    }
    std::string ended, waiting;
    for (int i = 0; i < running_; ++i)
      (cores_[static_cast<size_t>(i)].done ? ended : waiting) += (i ? " " : "") + std::to_string(i);
    if (waiting.empty()) break;
    if (!ended.empty())
      throw Error("deadlock: cores [" + waiting + "] wait at a barrier that cores [" + ended +
                  "] never reach (they ended the program)");
    for (int i = 0; i < running_; ++i) {  // every core is at the barrier: all go on past it
      CoreState& c = cores_[static_cast<size_t>(i)];
      c.at_barrier = false, ++c.pc;
    }
  }
  core_ = 0, c_ = &cores_[0];
  instr_ = nullptr;
  return executed;
}

void Reference::run_core(const isa::Program& p, uint64_t& executed) {
  const int64_t end = static_cast<int64_t>(p.code.size());
  int64_t pc = c_->pc;
  while (pc >= 0 && pc < end) {
    pc_ = pc;
    isa::Instr in;
    try {
      in = isa::decode(p.code[pc]);
    } catch (const isa::Error& e) {
      throw Error("pc " + std::to_string(pc) + ": " + e.what());
    }
    instr_ = &in;
    if (++executed > opts_.max_instructions) fail("more than max_instructions executed");
    switch (in.desc().unit) {
      case isa::Unit::Core: {
        const int64_t next = core(in, pc);
        if (next == kBarrier) {
          c_->pc = pc, c_->at_barrier = true;
          return;
        }
        pc = next;
        continue;
      }
      case isa::Unit::DmaIn:
      case isa::Unit::DmaOut: dma(in); break;
      case isa::Unit::Mxu: mxu(in); break;
      case isa::Unit::Vpu: vpu(in); break;
    }
    ++pc;  // a unit instruction has completed: the next one is dispatched (program order, see reference.h)
  }
  c_->pc = pc;
  c_->done = true;
}

// ---- operands, errors, memories -----------------------------------------------------------------------------

int64_t Reference::field(const isa::Instr& in, const char* name) const {
  int i = in.desc().operand_index(name);
  if (i < 0) throw std::logic_error(in.desc().mnemonic + " has no operand " + name);
  return in.f[i];
}

int64_t Reference::value(const isa::Instr& in, const char* name) const { return c_->regs[field(in, name)]; }

DType Reference::dtype(const isa::Instr& in, const char* name) const {
  return static_cast<DType>(field(in, name));
}

void Reference::fail(const std::string& what) const {
  std::string where = (running_ > 1 ? "core " + std::to_string(core_) + ": " : "") + "pc " + std::to_string(pc_);
  if (instr_) where += " (" + isa::format(*instr_) + ")";
  if (prog_ && pc_ < static_cast<int64_t>(prog_->source.size()) && !prog_->source[pc_].empty())
    where += " [" + prog_->source[pc_] + "]";
  throw Error(where + ": " + what);
}

uint8_t* Reference::vmem(int64_t addr, int64_t bytes) {
  if (addr < 0 || bytes < 0 || static_cast<uint64_t>(addr) + bytes > cfg_.vmem_bytes)
    fail("VMEM access [" + hex(addr) + ", " + hex(addr + bytes) + ") outside " + std::to_string(cfg_.vmem_bytes) +
         " bytes");
  return c_->vmem.data() + addr;
}

void Reference::acc_bytes(int64_t addr, int64_t n, uint8_t* bytes, bool write) {
  const auto base = static_cast<int64_t>(cfg_.vmem_bytes), words = static_cast<int64_t>(cfg_.mxus) * cfg_.acc_rows * cfg_.cols;
  if (addr < base || addr + n > base + 4 * words)
    fail("VMEM access [" + hex(addr) + ", " + hex(addr + n) + ") outside " + std::to_string(cfg_.vmem_bytes) +
         " bytes and the accumulators' " + std::to_string(4 * words));
  for (int64_t k = 0; k < n; ++k) {
    const int64_t w = (addr + k - base) / 4, o = (addr + k - base) % 4;
    AccWord& a = acc(w / cfg_.cols, w % cfg_.cols);
    uint32_t bits = a.is_float ? bits_of_f32(to_f32(a.f)) : static_cast<uint32_t>(a.i);
    if (!write) {
      bytes[k] = static_cast<uint8_t>(bits >> (8 * o));
      continue;
    }
    bits = (bits & ~(0xffu << (8 * o))) | (static_cast<uint32_t>(bytes[k]) << (8 * o));
    a.is_float = false, a.i = static_cast<int32_t>(bits);  // raw bits: read as f32 they are the f32 of these bits
  }
}

double Reference::vmem_load(int64_t addr, DType t) {
  if (addr < static_cast<int64_t>(cfg_.vmem_bytes) || addr < 0) return load_value(vmem(addr, size_of(t)), t);
  uint8_t b[8];
  acc_bytes(addr, size_of(t), b, false);
  return load_value(b, t);
}

void Reference::vmem_store(int64_t addr, DType t, double v) {
  if (addr < static_cast<int64_t>(cfg_.vmem_bytes) || addr < 0) return store_value(vmem(addr, size_of(t)), t, v);
  uint8_t b[8];
  store_value(b, t, v);
  acc_bytes(addr, size_of(t), b, true);
}

void Reference::check_hbm(int64_t addr, int64_t bytes) const {
  if (addr < 0 || bytes < 0 || static_cast<uint64_t>(addr) + bytes > cfg_.hbm_bytes)
    fail("HBM access [" + hex(addr) + ", " + hex(addr + bytes) + ") outside " + std::to_string(cfg_.hbm_bytes) +
         " bytes");
}

Reference::AccWord& Reference::acc(int64_t row, int64_t col) {
  const int64_t rows = static_cast<int64_t>(cfg_.mxus) * cfg_.acc_rows;  // every matrix unit's, numbered across
  if (row < 0 || row >= rows || col < 0 || col >= cfg_.cols)
    fail("ACC word [" + std::to_string(row) + "][" + std::to_string(col) + "] outside " + std::to_string(rows) +
         " x " + std::to_string(cfg_.cols));
  return c_->acc[static_cast<size_t>(row) * cfg_.cols + col];
}

// An ACC word read as `adt` (i32 or f32), as a double.
double Reference::acc_read(int64_t row, int64_t col, DType adt) {
  const AccWord& a = acc(row, col);
  if (adt == DType::I32) return a.is_float ? static_cast<int32_t>(bits_of_f32(to_f32(a.f))) : a.i;
  if (adt == DType::F32) return a.is_float ? to_f32(a.f) : f32_from_bits(static_cast<uint32_t>(a.i));
  fail("accumulators are read as i32 or f32");
}

// ---- the scalar core ----------------------------------------------------------------------------------------

int64_t Reference::core(const isa::Instr& in, int64_t pc) {
  auto set = [&](int64_t v) {
    if (int rd = static_cast<int>(field(in, "rd")); rd != 0) c_->regs[rd] = v;  // r0 stays zero
  };
  auto wrap = [](uint64_t v) { return static_cast<int64_t>(v); };  // 64-bit wrapping arithmetic
  auto a = [&] { return value(in, "ra"); };
  auto b = [&] { return value(in, "rb"); };
  auto branch = [&](bool taken) {
    int64_t target = field(in, "target");
    if (!taken) return pc + 1;
    if (target > static_cast<int64_t>(prog_->code.size())) fail("branch target outside the program");
    return target;
  };
  switch (in.op) {
    case Op::NOP: break;
    case Op::HALT: return -1;
    case Op::LI: set(field(in, "imm")); break;
    case Op::ADD: set(wrap(uint64_t(a()) + uint64_t(b()))); break;
    case Op::SUB: set(wrap(uint64_t(a()) - uint64_t(b()))); break;
    case Op::MUL: set(wrap(uint64_t(a()) * uint64_t(b()))); break;
    case Op::DIV:
    case Op::REM: {
      int64_t x = a(), y = b();
      if (y == 0) fail("division by zero");
      bool overflow = x == std::numeric_limits<int64_t>::min() && y == -1;  // the quotient wraps to x
      if (in.op == Op::DIV) set(overflow ? x : x / y);
      else set(overflow ? 0 : x % y);
      break;
    }
    case Op::AND: set(a() & b()); break;
    case Op::OR: set(a() | b()); break;
    case Op::XOR: set(a() ^ b()); break;
    case Op::SHL: set(wrap(uint64_t(a()) << (b() & 63))); break;
    case Op::SHR: set(a() >> (b() & 63)); break;  // arithmetic
    case Op::MIN: set(std::min(a(), b())); break;
    case Op::MAX: set(std::max(a(), b())); break;
    case Op::ADDI: set(wrap(uint64_t(a()) + uint64_t(field(in, "imm")))); break;
    case Op::MULI: set(wrap(uint64_t(a()) * uint64_t(field(in, "imm")))); break;
    case Op::BEQ: return branch(a() == b());
    case Op::BNE: return branch(a() != b());
    case Op::BLT: return branch(a() < b());
    case Op::BGE: return branch(a() >= b());
    case Op::JMP: return branch(true);
    case Op::SEMSET:
    case Op::FENCE: break;  // every earlier instruction has completed already
    case Op::DELAY:
      if (a() < 0 || a() > (int64_t{1} << 32)) fail("delay of " + std::to_string(a()) + " cycles (0 to 2^32)");
      break;  // time only
    case Op::COREID: set(core_); break;
    case Op::CORECOUNT: set(running_); break;
    case Op::BARRIER: return kBarrier;
    case Op::SEMSIGNAL: {
      const int64_t to = value(in, "rcore");
      if (to < 0 || to >= running_)
        fail("core " + std::to_string(to) + " does not run this program (cores 0.." + std::to_string(running_ - 1) +
             ")");
      if (field(in, "sem") == 0) fail("semaphore s0 does not exist (s1..s31)");
      break;  // semaphores are no-ops here (reference.h)
    }
    default: fail("not a core instruction");
  }
  return pc + 1;
}

// ---- DMA ------------------------------------------------------------------------------------------------------

void Reference::dma(const isa::Instr& in) {
  if (in.op == Op::DMAINSYNC || in.op == Op::DMAOUTSYNC) return;
  if (in.op == Op::DMAGATHER) {  // for i < rows: j = int32 VMEM[idx + 4i]; VMEM row i = HBM[haddr + j*rowbytes]
    int64_t vaddr = value(in, "vaddr"), haddr = value(in, "haddr"), idx = value(in, "idx"), rows = value(in, "rows"),
            rowbytes = value(in, "rowbytes"), vstride = value(in, "vstride"), count = value(in, "count");
    if (rows < 0 || rowbytes < 0) fail("negative rows or rowbytes");
    if (rows > 0) vmem(idx, std::min<int64_t>(rows, int64_t{1} << 40) * 4);  // the indices lie in VMEM
    std::vector<int32_t> ids(static_cast<size_t>(rows));     // all read when the transfer starts
    for (int64_t i = 0; i < rows; ++i) std::memcpy(&ids[i], vmem(idx + 4 * i, 4), 4);
    for (int64_t i = 0; i < rows; ++i) {
      const int32_t j = ids[i];
      const std::string which = "index " + std::to_string(j) + " (row " + std::to_string(i) + ")";
      if (j < 0) fail(which + " is negative");
      if (j >= count) fail(which + " is not below the table's count " + std::to_string(count));
      const int64_t h = haddr + int64_t{j} * rowbytes;
      if (h < 0 || static_cast<uint64_t>(h) + rowbytes > cfg_.hbm_bytes)
        fail(which + ": HBM access [" + hex(h) + ", " + hex(h + rowbytes) + ") outside " +
             std::to_string(cfg_.hbm_bytes) + " bytes");
      read_hbm(static_cast<uint64_t>(h), vmem(vaddr + i * vstride, rowbytes), static_cast<size_t>(rowbytes));
    }
    return;
  }
  bool load = in.op == Op::DMALD, shared = field(in, "shared") != 0;
  int64_t vaddr = value(in, "vaddr"), haddr = value(in, "haddr"), rows = value(in, "rows"),
          rowbytes = value(in, "rowbytes"), hstride = value(in, "hstride"), vstride = value(in, "vstride");
  if (rows < 0 || rowbytes < 0) fail("negative rows or rowbytes");
  for (int64_t i = 0; i < rows; ++i) {
    int64_t h = haddr + i * hstride, v = vaddr + i * vstride;
    if (!shared) {
      check_hbm(h, rowbytes);
    } else if (h < 0 || rowbytes < 0 || static_cast<uint64_t>(h) + rowbytes > cfg_.shared_bytes) {
      fail("shared memory access [" + hex(h) + ", " + hex(h + rowbytes) + ") outside " +
           std::to_string(cfg_.shared_bytes) + " bytes");
    }
    uint8_t* p = vmem(v, rowbytes);
    Pages& far = shared ? shared_ : hbm_;
    if (load) read_pages(far, static_cast<uint64_t>(h), p, static_cast<size_t>(rowbytes));
    else write_pages(far, static_cast<uint64_t>(h), p, static_cast<size_t>(rowbytes));
  }
}

// ---- the matrix unit ----------------------------------------------------------------------------------------

void Reference::mxu(const isa::Instr& in) {
  const int64_t unit = field(in, "mxu");
  if (unit >= cfg_.mxus)
    fail("matrix unit " + std::to_string(unit) + " does not exist (" + std::to_string(cfg_.mxus) + " per core)");
  if (in.op == Op::MXUSYNC) return;
  const auto u = static_cast<size_t>(unit);
  Tile &active_ = c_->active[u], &shadow_ = c_->shadow[u];
  char &have_active_ = c_->have_active[u], &have_shadow_ = c_->have_shadow[u];
  const int64_t acc_base = unit * cfg_.acc_rows;  // this unit's first row of the core's ACC
  DType dt = dtype(in, "dtype");
  if (dt != DType::I8 && dt != DType::BF16 && dt != DType::F8E4M3)
    fail("the matrix unit multiplies i8, bf16 or f8e4m3");
  if (dt == DType::F8E4M3 && cfg_.fp8_rate == 0) fail("this chip has no fp8 matrix rate (mxu.fp8_rate = 0)");
  int64_t vaddr = value(in, "vaddr"), stride = value(in, "stride");
  const int size = size_of(dt);

  // W[l][j] = elem(vaddr + l*stride + j*size) for l < k, j < n, zero elsewhere; with `trans` the tile is the
  // transpose of an n x k block: W[l][j] = elem(vaddr + j*stride + l*size).
  if (in.op == Op::MXULW) {
    int64_t k = value(in, "k"), n = value(in, "n");
    const bool trans = field(in, "trans") != 0;
    if (k < 0 || k > cfg_.rows || n < 0 || n > cfg_.cols)
      fail("weight tile " + std::to_string(k) + " x " + std::to_string(n) + " larger than the array (" +
           std::to_string(cfg_.rows) + " x " + std::to_string(cfg_.cols) + ")");
    if (k > 0 && n > 0) {  // weights come from VMEM only (isa.def): its first and last rows
      vmem(vaddr, size), vmem(trans ? vaddr + (n - 1) * stride : vaddr + (k - 1) * stride, (trans ? k : n) * size);
    }
    shadow_.dtype = dt, shadow_.k = static_cast<int>(k), shadow_.n = static_cast<int>(n);
    std::fill(shadow_.w.begin(), shadow_.w.end(), 0.0);
    for (int64_t l = 0; l < k; ++l)
      for (int64_t j = 0; j < n; ++j) shadow_.w[l * cfg_.cols + j] =
            vmem_load(trans ? vaddr + j * stride + l * size : vaddr + l * stride + j * size, dt);
    have_shadow_ = true;
    return;
  }

  // mxu.mm: swap in the tile loaded since the last mxu.mm, then for i < m, j < n:
  // P = sum_l A[i][l] * W[l][j];  ACC[acc+i][j] = P, or += P with `accumulate`.
  if (have_shadow_) std::swap(active_, shadow_), have_shadow_ = false, have_active_ = true;
  if (!have_active_) fail("mxu.mm before any mxu.lw");
  if (dt != active_.dtype) fail("mxu.mm dtype differs from the weight tile's");
  int64_t m = value(in, "m"), acc0 = value(in, "acc");
  bool accumulate = field(in, "accumulate") != 0;
  if (m < 0) fail("negative m");
  if (m > 0 && (acc0 < 0 || acc0 + m > cfg_.acc_rows))
    fail("accumulator rows [" + std::to_string(acc0) + ", " + std::to_string(acc0 + m) + ") outside the unit's " +
         std::to_string(cfg_.acc_rows));
  acc0 += acc_base;
  std::vector<double> a(active_.k);
  for (int64_t i = 0; i < m; ++i) {
    for (int l = 0; l < active_.k; ++l) a[l] = vmem_load(vaddr + i * stride + l * size, dt);
    for (int j = 0; j < active_.n; ++j) {
      AccWord& word = acc(acc0 + i, j);
      if (dt == DType::I8) {  // exact in int64, then wrapped to i32 (wrapping is associative)
        int64_t p = 0;
        for (int l = 0; l < active_.k; ++l)
          p += static_cast<int64_t>(a[l]) * static_cast<int64_t>(active_.w[l * cfg_.cols + j]);
        int64_t prev = accumulate ? static_cast<int64_t>(acc_read(acc0 + i, j, DType::I32)) : 0;
        word.i = static_cast<int32_t>(wrap_to(prev + p, DType::I32));
        word.is_float = false;
        continue;
      }
      // bf16 and f8e4m3: each product is exact (in f32, and here in double)
      double p = 0;
      if (opts_.sums == FloatSums::Fp64) {
        for (int l = 0; l < active_.k; ++l) p += a[l] * active_.w[l * cfg_.cols + j];
        double prev = !accumulate ? 0 : word.is_float ? word.f : acc_read(acc0 + i, j, DType::F32);
        word.f = prev + p;  // not rounded: the fp64 reference
      } else {
        for (int l = 0; l < active_.k; ++l) p = to_f32(p + a[l] * active_.w[l * cfg_.cols + j]);
        word.f = accumulate ? to_f32(acc_read(acc0 + i, j, DType::F32) + p) : p;
      }
      word.is_float = true;
    }
  }
}

}  // namespace tpusim::reference
