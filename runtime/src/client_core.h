// The private side of the runtime: the simulation thread and its queue, buffer state, caches (runtime.cpp).
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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

// An ONNX model to compile: a file (`bytes` null) or a serialized model in memory (`name` names it).
struct ModelSource {
  std::string path;
  const std::string* bytes = nullptr;
  const std::string& name() const { return path; }
};

// One execute_async call on the simulation thread (one or several devices), in the steps that let several run
// together in one simulation: start() stages each device's inputs and starts its chip (sim::Chip::start),
// appending the chip to `started`; then one sim::Chip::run_started runs every started chip of the batch; then
// finish() collects the outputs, lets go of everything the execution held and completes its futures.
struct Execution {
  virtual ~Execution() = default;
  std::vector<int> devices;  // the devices it runs on, distinct
  virtual void start(std::vector<sim::Chip*>& started) = 0;
  virtual void finish(const Status& sim_error) = 0;  // sim_error: run_started failed (ok otherwise)
};

// A piece of queued work: an execution, or a task that touches one device's chip (device >= 0: a host-to-device
// copy, a to_host) or anything else (device -1).
struct Work {
  std::shared_ptr<Execution> exec;  // when set, the rest is unused
  std::function<void()> task;
  int device = -1;
};

// The simulation thread batches (loop()): it takes from the head of the queue, in order, every item it can until
// the first that must wait:
// - an execution whose devices are all distinct from those of the executions already taken;
// - a task on one device that no execution already taken runs on (it runs before the batch's simulation: what
//   it touches is independent of the executions taken, all on other devices);
// - a task on no particular device (-1) only as the first item, alone.
// It runs the tasks taken, in order, then starts every execution taken, in order, runs them in one simulation
// (overlapping in simulated time; each chip counts cycles from its own start) and finishes them in order.
// Everything in the runtime depends only on earlier work on the same device (inputs, to_host and copies are on
// their buffer's device; donation and deletion act at the call, on the caller's thread), so each device sees its
// work in exactly the order it was queued, as with one item at a time.
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
  std::deque<Work> queue;
  bool stopping = false;
  std::vector<std::unique_ptr<sim::Chip>> chips;  // touched only on the simulation thread
  // Counters of the simulations that ran executions (for tests): simulations made, chips started in them (more
  // chips than simulations: executions ran together).
  std::atomic<uint64_t> simulations{0}, chips_simulated{0};
  std::atomic<bool> batching{true};  // false: one item at a time (for tests and measurements)

  std::mutex cache_mu;
  std::map<uint64_t, Executable> programs;   // by fingerprint
  std::map<std::string, Executable> models;  // by canonical path, mtime and size, or content; and options
  std::map<uint64_t, CostAnalysis> costs;    // by fingerprint
  CacheStats cache;

  static BufferState* state_of(const Buffer& b) { return b.s_.get(); }
  static Buffer wrap(std::shared_ptr<BufferState> s) { return Buffer(std::move(s)); }
  void loop();
  // Queue work; false once the client is stopping. `device`: the one device the task touches, or -1.
  bool post(std::function<void()> task, int device = -1);
  bool post(std::shared_ptr<Execution> exec);
  void stop();  // runs what is queued, then ends the thread

  // The executable caches, shared by Client's const and non-const methods.
  StatusOr<Executable> load_program(isa::Program program);
  StatusOr<Executable> compile_onnx(const ModelSource& src,
                                    const std::map<std::string, std::vector<int64_t>>& input_shapes,
                                    const compiler::Options& extra = {});

 private:
  bool push(Work w);
  void take_batch(std::vector<Work>& batch);  // with queue_mu held
  void run_batch(std::vector<Work>& batch);
};

}  // namespace tpusim::runtime::detail
