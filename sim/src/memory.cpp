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
      cache(cfg.cache_bytes(), cfg.shared.interleave_bytes, cfg.shared.ways, cfg.shared.hash != 0) {}

CacheTags::CacheTags(uint64_t bytes, uint64_t line, int ways, bool hash)
    : line_(std::max<uint64_t>(line, 1)), ways_(static_cast<uint64_t>(std::max(ways, 1))), hash_(hash) {
  sets_ = bytes / line_ / ways_;
  tags_.resize(sets_ * ways_), used_.resize(sets_ * ways_), set_.resize(sets_);
}

bool CacheTags::access(uint64_t l) {
  // With the hash, each block of `sets` consecutive lines is rotated over the sets by its block number mixed
  // (splitmix64's finalizer): a stream fills every set evenly, as a GPU's hashed L2 spreads it, and rows a power of
  // two apart (a transposed operand's, a tile's), which fall in few sets within a block, land in other sets in
  // every other block; the tag is then the whole line number.
  uint64_t index = l % sets_;
  if (hash_) {
    uint64_t h = l / sets_;
    h ^= h >> 30, h *= 0xbf58476d1ce4e5b9ULL;
    h ^= h >> 27, h *= 0x94d049bb133111ebULL;
    h ^= h >> 31;
    index += h % sets_;
    if (index >= sets_) index -= sets_;
  }
  Set& set = set_[index];
  if (set.generation != generation_) set.generation = generation_, set.valid = 0;
  uint64_t* tags = tags_.data() + index * ways_;
  uint64_t* used = used_.data() + index * ways_;
  const uint64_t tag = hash_ ? l : l / sets_;
  ++clock_;
  for (uint64_t w = 0; w < set.valid; ++w)
    if (tags[w] == tag) {
      used[w] = clock_;
      return true;
    }
  uint64_t victim = set.valid;  // the first empty way, else the least recently used
  if (victim < ways_) {
    ++set.valid;
  } else {
    victim = 0;
    for (uint64_t w = 1; w < ways_; ++w)
      if (used[w] < used[victim]) victim = w;
  }
  tags[victim] = tag, used[victim] = clock_;
  return false;
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
