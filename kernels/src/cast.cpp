// The cast-kernel generator: the contract and the schedule are in cast.h.
#include "tpusim/kernels/cast.h"

#include <algorithm>
#include <stdexcept>

#include "tpusim/isa/assembler.h"
#include "tpusim/isa/emitter.h"

namespace tpusim::kernels {
namespace {

constexpr int64_t kSlots = 4;

int64_t need(const std::map<std::string, int64_t>& symbols, const char* name) {
  const auto it = symbols.find(name);
  if (it == symbols.end() || it->second <= 0)
    throw std::invalid_argument(std::string("cast: the chip symbol ") + name + " is missing or not positive");
  return it->second;
}

int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

}  // namespace

int64_t cast_chunk(isa::DType from, isa::DType to, const std::map<std::string, int64_t>& symbols) {
  const int64_t vmem = need(symbols, "VMEM_BYTES"), width = need(symbols, "VPU_WIDTH");
  const int64_t se = static_cast<int64_t>(isa::dtype_size(from)), de = static_cast<int64_t>(isa::dtype_size(to));
  // Each slot rounded up to a multiple of 64 bytes: up to 64 bytes more per slot
  const int64_t fit = (vmem - 2 * kSlots * 64) / (kSlots * (se + de)) / width * width;
  if (fit < width)
    throw std::invalid_argument("cast: VMEM_BYTES " + std::to_string(vmem) + " cannot hold " +
                                std::to_string(kSlots) + " slots of " + std::to_string(width) + " elements");
  return std::min(fit, 256 * width);
}

int64_t cast_chunks(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                    const std::map<std::string, int64_t>& symbols) {
  const int64_t ch = cast_chunk(from, to, symbols);
  int64_t chunks = 0;
  for (const CastPart& p : parts) chunks += (std::max<int64_t>(p.n, 0) + ch - 1) / ch;
  return chunks;
}

isa::Program cast_kernel(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                         const std::map<std::string, int64_t>& symbols, uint64_t base_pc, const std::string& name) {
  if (parts.empty()) throw std::invalid_argument("cast: no parts");
  const uint64_t se = isa::dtype_size(from), de = isa::dtype_size(to);
  for (size_t i = 0; i < parts.size(); ++i) {
    const CastPart& p = parts[i];
    if (p.n <= 0) throw std::invalid_argument("cast: part " + std::to_string(i) + " has no elements");
    const uint64_t n = static_cast<uint64_t>(p.n);
    for (size_t j = 0; j < parts.size(); ++j) {
      const CastPart& q = parts[j];
      const uint64_t m = static_cast<uint64_t>(q.n);
      auto meet = [](uint64_t a, uint64_t an, uint64_t b, uint64_t bn) { return a < b + bn && b < a + an; };
      if (meet(p.dst, n * de, q.src, m * se) || (j != i && meet(p.dst, n * de, q.dst, m * de)))
        throw std::invalid_argument("cast: part " + std::to_string(i) + "'s destination overlaps part " +
                                    std::to_string(j) + (j == i ? "'s own source" : ""));
    }
  }
  const int64_t ch = cast_chunk(from, to, symbols);
  if (cast_chunks(parts, from, to, symbols) > kMaxCastChunks)
    throw std::invalid_argument("cast: more than " + std::to_string(kMaxCastChunks) + " chunks of " +
                                std::to_string(ch) + " elements");
  const int64_t x_bytes = align_up(ch * static_cast<int64_t>(se), 64),
                y_bytes = align_up(ch * static_cast<int64_t>(de), 64);
  const int64_t y0 = kSlots * x_bytes;

  isa::Emitter e(name, "<cast>/" + name, base_pc);
  const isa::Reg one = isa::reg(1), zero = isa::reg(0);
  const isa::Reg vx = isa::reg(2), src = isa::reg(3), src_bytes = isa::reg(4), vy = isa::reg(5), n = isa::reg(6),
                 dst = isa::reg(7), dst_bytes = isa::reg(8);
  const isa::Sem x_free = isa::sem(1), x_full = isa::sem(2), y_free = isa::sem(3), y_full = isa::sem(4);
  e.sem_set(x_free, kSlots), e.sem_set(x_full, 0), e.sem_set(y_free, kSlots), e.sem_set(y_full, 0);
  e.li(one, 1);
  int64_t slot = 0;
  for (const CastPart& p : parts)
    for (int64_t i = 0; i < p.n; i += ch, slot = (slot + 1) % kSlots) {
      const int64_t k = std::min(ch, p.n - i);
      e.li(vx, slot * x_bytes), e.li(src, static_cast<int64_t>(p.src + static_cast<uint64_t>(i) * se));
      e.li(src_bytes, k * static_cast<int64_t>(se));
      e.dma_ld(vx, src, one, src_bytes, src_bytes, src_bytes, {.wait = x_free, .signal = x_full});
      e.li(vy, y0 + slot * y_bytes), e.li(n, k);
      e.vpu_sync({.wait = y_free});
      e.vpu_cast(vy, vx, n, zero, from, to, {.wait = x_full, .signal = x_free});
      e.vpu_sync({.signal = y_full});
      e.li(dst, static_cast<int64_t>(p.dst + static_cast<uint64_t>(i) * de)), e.li(dst_bytes, k * static_cast<int64_t>(de));
      e.dma_st(dst, vy, one, dst_bytes, dst_bytes, dst_bytes, {.wait = y_full, .signal = y_free});
    }
  e.halt();
  return e.finish();
}

std::string cast_source(const std::vector<CastPart>& parts, isa::DType from, isa::DType to,
                        const std::map<std::string, int64_t>& symbols, const std::string& name) {
  const isa::Program p = cast_kernel(parts, from, to, symbols, 0, name);
  return "# " + name + ": " + std::to_string(parts.size()) + " tensors, " +
         std::to_string(cast_chunks(parts, from, to, symbols)) + " chunks of at most " +
         std::to_string(cast_chunk(from, to, symbols)) + " elements through 4 slots (tpusim/kernels/cast.h)\n" +
         isa::disassemble(p);
}

}  // namespace tpusim::kernels
