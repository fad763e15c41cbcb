#include "memory_plan.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <map>
#include <optional>

#include "tpusim/compiler/compiler.h"

namespace tpusim::compiler {
namespace {

uint64_t align_up(uint64_t x) { return (x + kHbmAlign - 1) / kHbmAlign * kHbmAlign; }

// First-fit allocation of aligned blocks above `base`; freed blocks merge with their free neighbours.
class Allocator {
 public:
  explicit Allocator(uint64_t base) { free_[base] = std::numeric_limits<uint64_t>::max(); }

  // The first free block's start where `bytes` fit below `limit`; nullopt where none does.
  std::optional<uint64_t> alloc(uint64_t bytes, uint64_t limit = std::numeric_limits<uint64_t>::max()) {
    bytes = align_up(std::max<uint64_t>(bytes, 1));
    auto it = std::find_if(free_.begin(), free_.end(), [&](const auto& b) {
      return std::min(b.second, limit) > b.first && std::min(b.second, limit) - b.first >= bytes;
    });
    if (it == free_.end()) return std::nullopt;
    uint64_t addr = it->first, end = it->second;
    free_.erase(it);
    if (addr + bytes < end) free_[addr + bytes] = end;
    return addr;
  }

  void release(uint64_t addr, uint64_t bytes) {
    uint64_t end = addr + align_up(std::max<uint64_t>(bytes, 1));
    auto next = free_.find(end);
    if (next != free_.end()) {
      end = next->second;
      free_.erase(next);
    }
    auto it = free_.emplace(addr, end).first;
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->second == addr) {
        prev->second = end;
        free_.erase(it);
      }
    }
  }

 private:
  std::map<uint64_t, uint64_t> free_;  // start -> end
};

}  // namespace

uint64_t plan_memory(KernelPlan& plan, uint64_t hbm_bytes, MemoryRegion local, MemoryRegion shared,
                     const std::string& model_name, int reuse_after) {
  uint64_t next = 0;
  for (Buffer::Kind kind : {Buffer::Kind::Input, Buffer::Kind::Output, Buffer::Kind::Const})
    for (Buffer& b : plan.buffers)
      if (b.kind == kind) {
        b.addr = next;
        next = align_up(next + b.bytes());
      }

  // Live range of each intermediate: from the call that first names it to the last.
  std::vector<int> first(plan.buffers.size(), -1), last(plan.buffers.size(), -1);
  for (int c = 0; c < static_cast<int>(plan.calls.size()); ++c)
    for (const auto& [name, b] : plan.calls[c].tensors) {
      if (first[b] < 0) first[b] = c;
      last[b] = c;
    }
  // The places, in order of preference: offsets in each on-chip region, then HBM's addresses.
  struct Place {
    MemoryRegion region;
    Allocator heap;
  };
  std::vector<Place> places;
  for (const MemoryRegion& r : {local, shared})
    if (r.bytes > 0) places.push_back(Place{r, Allocator(0)});
  places.push_back(Place{MemoryRegion{0, std::numeric_limits<uint64_t>::max()}, Allocator(next)});
  std::vector<size_t> where(plan.buffers.size(), places.size() - 1);
  // A buffer whose last call is c is released after call c + reuse_after's buffers are placed (memory_plan.h).
  auto release = [&](int c) {
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      const Buffer& buf = plan.buffers[b];
      if (buf.kind == Buffer::Kind::Temp && last[b] == c)
        places[where[b]].heap.release(buf.addr - places[where[b]].region.base, buf.bytes());
    }
  };
  for (int c = 0; c < static_cast<int>(plan.calls.size()); ++c) {
    for (size_t b = 0; b < plan.buffers.size(); ++b) {
      Buffer& buf = plan.buffers[b];
      if (buf.kind != Buffer::Kind::Temp || first[b] != c) continue;
      for (size_t i = 0; i < places.size(); ++i)
        if (const std::optional<uint64_t> at = places[i].heap.alloc(buf.bytes(), places[i].region.bytes)) {
          buf.addr = places[i].region.base + *at;
          where[b] = i;
          break;
        }
    }
    if (c >= reuse_after) release(c - reuse_after);
  }
  uint64_t total = 0;
  for (size_t b = 0; b < plan.buffers.size(); ++b)
    if (where[b] == places.size() - 1) total = std::max(total, plan.buffers[b].addr + plan.buffers[b].bytes());
  if (total > hbm_bytes)
    throw Error(model_name + ": model needs " + std::to_string(total) + " bytes of HBM, the chip has " +
                std::to_string(hbm_bytes));
  return total;
}

}  // namespace tpusim::compiler
