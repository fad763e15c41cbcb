#include "memory.h"

#include <algorithm>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <string>

#include <sys/mman.h>

#include "params.h"

namespace tpusim::sim::detail {

void declare_memory_params(std::vector<Param>& out) {
  declare_hbm_params(out);
  declare_vmem_params(out);
  declare_shared_params(out);
}

Hbm::Hbm(uint64_t bytes) : size_(bytes), pages_((bytes + kPageBytes - 1) / kPageBytes) {}

void Hbm::read(uint64_t addr, void* dst, uint64_t n) const {
  auto* out = static_cast<uint8_t*>(dst);
  while (n) {
    uint64_t page = addr / kPageBytes, off = addr % kPageBytes, len = std::min(n, kPageBytes - off);
    if (pages_[page])
      std::memcpy(out, pages_[page].get() + off, len);
    else
      std::memset(out, 0, len);
    out += len, addr += len, n -= len;
  }
}

void Hbm::write(uint64_t addr, const void* src, uint64_t n) {
  const auto* in = static_cast<const uint8_t*>(src);
  while (n) {
    uint64_t page = addr / kPageBytes, off = addr % kPageBytes, len = std::min(n, kPageBytes - off);
    if (!pages_[page]) pages_[page] = std::make_unique<uint8_t[]>(kPageBytes);  // zero-initialised
    std::memcpy(pages_[page].get() + off, in, len);
    in += len, addr += len, n -= len;
  }
}

LazyBytes::LazyBytes(uint64_t n) : n_(n) {
  if (n == 0) return;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED)
    throw Error("cannot reserve " + std::to_string(n >> 20) + " MiB of host address space for the chip's memory: " +
                std::strerror(errno));
  p_ = static_cast<uint8_t*>(p);
}

LazyBytes::~LazyBytes() {
  if (p_) munmap(p_, n_);
}

ChipMemories::ChipMemories(const ChipConfig& cfg)
    : hbm(cfg.hbm_bytes()),
      hbm_channels(ChannelSpec::hbm(cfg)),
      shared(cfg.shared_bytes()),
      shared_channels(ChannelSpec::shared(cfg)),
      cache(cfg.cache_bytes(), cfg.shared.interleave_bytes, cfg.shared.ways, cfg.shared.hash != 0, cfg.hbm_bytes()) {}

CacheTags::CacheTags(uint64_t bytes, uint64_t line, int ways, bool hash, uint64_t memory)
    : line_(std::max<uint64_t>(line, 1)), ways_(static_cast<uint64_t>(std::max(ways, 1))), hash_(hash) {
  sets_ = bytes / line_ / ways_;
  if (!sets_) return;
  if (memory / line_ / sets_ > UINT32_MAX)
    throw Error("the shared cache's " + std::to_string(sets_) + " sets of " + std::to_string(line_) +
                "-byte lines (shared.size_kib / shared.ways / shared.interleave_bytes) are too few for " +
                std::to_string(memory >> 20) + " MiB of HBM: its tags hold 2^32 lines per set");
  sets_inverse_ = UINT64_MAX / sets_;
  store_.resize(sets_ * ways_ + 16), set_.resize(sets_);
  tags_ = store_.data();
  while (reinterpret_cast<uintptr_t>(tags_) % 64) ++tags_;
}

void CacheTags::reset() {
  if (++generation_ == 0) {  // wrapped (after 2^32 resets): empty every set by hand once
    for (Set& s : set_) s.generation = 0;
    generation_ = 1;
  }
}

namespace {
// n / d and n % d for any 64-bit n, with inverse = UINT64_MAX / d: the high half of n x inverse is n / d or up to
// two less (a division instruction takes several times as long, and access() needs two per line).
std::pair<uint64_t, uint64_t> divide(uint64_t n, uint64_t d, uint64_t inverse) {
  auto q = static_cast<uint64_t>((static_cast<unsigned __int128>(n) * inverse) >> 64);
  uint64_t r = n - q * d;
  while (r >= d) r -= d, ++q;
  return {q, r};
}
}  // namespace

bool CacheTags::access(uint64_t l) {
  // With the hash, each block of `sets` consecutive lines is rotated over the sets by its block number mixed
  // (splitmix64's finalizer): a stream fills every set evenly, as a GPU's hashed L2 spreads it, and rows a power of
  // two apart (a transposed operand's, a tile's), which fall in few sets within a block, land in other sets in
  // every other block.
  auto [block, index] = divide(l, sets_, sets_inverse_);
  if (hash_) {
    uint64_t h = block;
    h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27, h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    index += divide(h, sets_, sets_inverse_).second;
    if (index >= sets_) index -= sets_;
  }
  Set& set = set_[index];
  if (set.generation != generation_) set.generation = generation_, set.valid = 0;
  uint32_t* tags = tags_ + index * ways_;
  const auto tag = static_cast<uint32_t>(block);
  uint64_t w = 0;
  while (w < set.valid && tags[w] != tag) ++w;
  const bool hit = w < set.valid;
  if (!hit) {
    if (set.valid < ways_) ++set.valid;
    w = set.valid - 1;  // the slot the others shift into: the empty one, or the least recently used's
  }
  std::memmove(tags + 1, tags, w * sizeof(uint32_t));
  tags[0] = tag;
  return hit;
}

Memories::Memories(const ChipConfig& cfg, ChipMemories& chip)
    : hbm(chip.hbm),
      hbm_channels(chip.hbm_channels),
      shared(chip.shared),
      shared_channels(chip.shared_channels),
      cache(chip.cache),
      vmem(cfg.local_bytes()),
      acc{reinterpret_cast<uint32_t*>(vmem.data() + cfg.vmem_bytes())},  // page-aligned + a multiple of 1 KiB
      acc_cols(cfg.mxu.cols),
      vmem_ports(cfg) {}

std::string hex(uint64_t v) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string check_rows(const char* what, uint64_t size, const std::string& size_text, int64_t base, int64_t rows,
                       int64_t rowbytes, int64_t stride) {
  if (rows <= 0 || rowbytes <= 0) return "";
  // Row addresses are linear in i, so the first and the last row are the extremes.
  for (int64_t i : {int64_t(0), rows - 1}) {
    __int128 lo = static_cast<__int128>(base) + static_cast<__int128>(i) * stride;
    __int128 hi = lo + rowbytes;
    if (lo >= 0 && hi <= static_cast<__int128>(size)) continue;
    auto clamp = [](__int128 v) -> std::string {
      if (v < 0) return "-" + hex(static_cast<uint64_t>(-v));
      if (v > static_cast<__int128>(UINT64_MAX)) return "beyond 2^64";
      return hex(static_cast<uint64_t>(v));
    };
    std::string s = std::string(what) + " [" + clamp(lo) + ", " + clamp(hi) + ") outside " + size_text;
    if (rows > 1) s += " (row " + std::to_string(i) + " of " + std::to_string(rows) + ")";
    return s;
  }
  return "";
}

}  // namespace tpusim::sim::detail
