#include "tpusim/runtime/allocator.h"

#include <algorithm>
#include <vector>

namespace tpusim::runtime {

HbmAllocator::HbmAllocator(std::string name, uint64_t capacity, uint64_t alignment)
    : name_(std::move(name)), capacity_(capacity), alignment_(alignment ? alignment : 1) {}

std::string HbmAllocator::live_summary() const {
  std::vector<const std::pair<const uint64_t, Block>*> all;
  for (const auto& b : live_) all.push_back(&b);
  std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->second.requested > b->second.requested; });
  std::string s = "live: " + std::to_string(stats_.live_count) + " allocations, " + std::to_string(stats_.live_bytes) +
                  " bytes";
  if (!all.empty()) s += "; largest:";
  for (size_t i = 0; i < all.size() && i < 3; ++i)
    s += std::string(i ? "," : "") + " '" + all[i]->second.label + "' " + std::to_string(all[i]->second.requested) +
         " bytes at " + std::to_string(all[i]->first);
  return s;
}

StatusOr<uint64_t> HbmAllocator::allocate(uint64_t bytes, const std::string& label) {
  const uint64_t want = bytes ? bytes : 1;
  const uint64_t size = (want + alignment_ - 1) / alignment_ * alignment_;
  std::lock_guard<std::mutex> lock(mu_);
  // Walk the gaps from the top down: [end of the block below, start of the block above).
  uint64_t top = capacity_;
  auto place = [&](uint64_t lo) -> std::optional<uint64_t> {
    if (size > top || top - size < lo) return std::nullopt;
    uint64_t addr = (top - size) / alignment_ * alignment_;
    if (addr < lo) return std::nullopt;
    return addr;
  };
  std::optional<uint64_t> at;
  for (auto it = live_.rbegin(); it != live_.rend() && !at; ++it) {
    at = place(it->first + it->second.size);
    top = it->first;
  }
  if (!at) at = place(0);
  if (!at || size < want)
    return Status(StatusCode::kOutOfMemory, name_ + ": out of memory allocating " + std::to_string(bytes) +
                                                " bytes for '" + label + "' (capacity " + std::to_string(capacity_) +
                                                " bytes; " + live_summary() + ")");
  live_[*at] = Block{size, bytes, label};
  ++stats_.live_count;
  stats_.live_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
  ++stats_.total_allocations;
  return *at;
}

Status HbmAllocator::reserve(uint64_t addr, uint64_t bytes, const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t end = addr + (bytes ? bytes : 1);
  if (end > capacity_ || end < addr)
    return Status(StatusCode::kOutOfMemory, name_ + ": cannot reserve [" + std::to_string(addr) + ", " +
                                                std::to_string(end) + ") for '" + label + "': capacity is " +
                                                std::to_string(capacity_) + " bytes");
  std::string in_the_way;
  auto it = live_.upper_bound(addr);
  if (it != live_.begin()) --it;
  for (; it != live_.end() && it->first < end; ++it)
    if (it->first + it->second.size > addr)
      in_the_way += std::string(in_the_way.empty() ? "" : ", ") + "'" + it->second.label + "' [" +
                    std::to_string(it->first) + ", " + std::to_string(it->first + it->second.requested) + ")";
  if (!in_the_way.empty())
    return Status(StatusCode::kOutOfMemory, name_ + ": cannot reserve [" + std::to_string(addr) + ", " +
                                                std::to_string(end) + ") (" + std::to_string(bytes) + " bytes) for '" +
                                                label + "': in use by " + in_the_way + " (" + live_summary() + ")");
  live_[addr] = Block{end - addr, bytes, label};
  ++stats_.live_count;
  stats_.live_bytes += bytes;
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.live_bytes);
  ++stats_.total_allocations;
  return Status::Ok();
}

void HbmAllocator::free(uint64_t addr) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(addr);
  if (it == live_.end()) return;
  --stats_.live_count;
  stats_.live_bytes -= it->second.requested;
  live_.erase(it);
}

AllocatorStats HbmAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace tpusim::runtime
