// The private side of the runtime: the simulation thread and its queue, buffer state, caches (runtime.cpp).
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "tpusim/runtime/runtime.h"

namespace tpusim::runtime::detail {

// Where a buffer's bytes are. Freed (its HBM returned to the allocator) when the last owner lets go: the buffer,
// or an execution still using it after the buffer was deleted.
struct Storage {
  MemoryKind kind = MemoryKind::kHbm;
  uint64_t bytes = 0;
  std::shared_ptr<HbmAllocator> alloc;  // kHbm
  uint64_t addr = 0;                    // kHbm
  const uint8_t* external = nullptr;    // kHost, zero-copy: the caller's memory
  std::vector<uint8_t> owned;           // kHost otherwise
  const uint8_t* host_data() const { return external ? external : owned.data(); }
  ~Storage() {
    if (alloc) alloc->free(addr);
  }
};

struct BufferState {
  std::weak_ptr<ClientCore> client;
  int device = 0;
  isa::DType dtype = isa::DType::F32;
  std::vector<int64_t> dims;
  uint64_t bytes = 0;
  MemoryKind memory = MemoryKind::kHbm;
  Event ready;
  mutable std::mutex mu;
  std::shared_ptr<Storage> storage;  // null once deleted (or donated)
};

struct ClientCore {
  explicit ClientCore(const sim::ChipConfig& c, int n) : cfg(c), num_devices(n) {}
  const sim::ChipConfig cfg;
  const int num_devices;
  std::vector<DeviceDescription> descriptions;
  std::vector<std::shared_ptr<HbmAllocator>> allocators;

  // The simulation thread: owns `chips` and every SystemC call; runs `queue` in order.
  std::thread thread;
  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::vector<std::unique_ptr<sim::Chip>> chips;  // touched only on the simulation thread

  std::mutex cache_mu;
  std::map<uint64_t, Executable> programs;   // by fingerprint
  std::map<std::string, Executable> models;  // by path, mtime and input shapes
  std::map<uint64_t, CostAnalysis> costs;    // by fingerprint
  CacheStats cache;

  static BufferState* state_of(const Buffer& b) { return b.s_.get(); }
  static Buffer wrap(std::shared_ptr<BufferState> s) { return Buffer(std::move(s)); }
  void loop();
  bool post(std::function<void()> task);  // false once the client is stopping
  void stop();                            // runs what is queued, then ends the thread
};

}  // namespace tpusim::runtime::detail
