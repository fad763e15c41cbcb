// A device's HBM allocator: first fit, searching from the top of HBM down, so that buffers gather at the top
// while the fixed ranges that programs declare (today's programs place their tensors at fixed addresses from 0
// up) stay free at the bottom. Thread-safe: any thread may allocate and free.
//
// A request that does not fit fails with kOutOfMemory and a message that names the request's size and what is
// live: the number of live allocations, their bytes, and the largest of them with their labels.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "tpusim/runtime/status.h"

namespace tpusim::runtime {

struct AllocatorStats {
  uint64_t live_count = 0;         // allocations and reservations not yet freed
  uint64_t live_bytes = 0;         // their sizes, as requested (before alignment)
  uint64_t peak_bytes = 0;         // the most live_bytes ever was
  uint64_t total_allocations = 0;  // successful allocate() and reserve() calls so far
};

class HbmAllocator {
 public:
  // Manages [0, capacity) of `name` ("device 0 HBM"); every allocation starts on an `alignment` boundary.
  HbmAllocator(std::string name, uint64_t capacity, uint64_t alignment = 512);

  // The highest free range of `bytes` (at least 1) that fits; `label` names it in out-of-memory messages.
  StatusOr<uint64_t> allocate(uint64_t bytes, const std::string& label);
  // The fixed range [addr, addr + bytes); kOutOfMemory if it is outside capacity or overlaps a live range (the
  // message names the ranges in the way).
  Status reserve(uint64_t addr, uint64_t bytes, const std::string& label);
  // Frees the allocation or reservation that starts at addr (a no-op for an address not live).
  void free(uint64_t addr);

  AllocatorStats stats() const;
  uint64_t capacity() const { return capacity_; }
  const std::string& name() const { return name_; }

 private:
  struct Block {
    uint64_t size = 0;  // aligned
    uint64_t requested = 0;
    std::string label;
  };
  std::string live_summary() const;  // mutex held

  const std::string name_;
  const uint64_t capacity_, alignment_;
  mutable std::mutex mu_;
  std::map<uint64_t, Block> live_;  // by start address
  AllocatorStats stats_;
};

}  // namespace tpusim::runtime
