// The base of the four unit modules (DMA in, DMA out, matrix unit, vector unit): an instruction queue filled by
// the core, and one SystemC thread that executes it strictly in order, with the semaphore wait before each
// instruction and the signal at its completion.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "chip_state.h"

namespace tpusim::sim::detail {

// A unit instruction as the core dispatched it.
struct Entry {
  isa::Instr in;       // operands resolved: a register operand holds the register's value at dispatch
  uint32_t pc = 0;
  uint64_t avail = 0;  // first cycle the unit may start it: the cycle after its dispatch

  int64_t operator[](int i) const { return in.f[i]; }
  // The operand called `name` in isa.def ("vaddr", "rows", ...).
  int64_t arg(std::string_view name) const { return in.f[in.desc().operand_index(name)]; }
  isa::DType dtype(std::string_view name) const { return static_cast<isa::DType>(arg(name)); }
  // Every unit instruction ends with the operands `wait` and `signal` (isa.def).
  int wait_sem() const { return static_cast<int>(in.f[in.desc().num_operands - 2]); }
  int signal_sem() const { return static_cast<int>(in.f[in.desc().num_operands - 1]); }
};

// A unit's instruction queue: a ring of core.queue_depth entries. Events tell the unit about pushes and the core
// about pops.
class UnitQueue {
 public:
  explicit UnitQueue(size_t capacity) : ring_(capacity) {}
  bool empty() const { return size_ == 0; }
  bool full() const { return size_ == ring_.size(); }
  const Entry& front() const { return ring_[head_]; }
  void push(const Entry& e) {
    ring_[(head_ + size_) % ring_.size()] = e;
    ++size_;
    pushed.notify();
  }
  void pop() {
    head_ = (head_ + 1) % ring_.size();
    --size_;
    popped.notify();
  }
  void clear() { head_ = size_ = 0; }

  sc_core::sc_event pushed, popped;

 private:
  std::vector<Entry> ring_;
  size_t head_ = 0, size_ = 0;
};

class UnitModule : public sc_core::sc_module {
 public:
  SC_HAS_PROCESS(UnitModule);
  // `index`: which of the core's matrix units (0 for every other unit).
  UnitModule(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit, int index = 0);

  isa::Unit unit() const { return unit_; }
  int slot() const { return slot_; }
  std::string label() const;  // "mxu", "mxu2", "dmain"; with the core ("core 1 mxu2") on several cores
  // Idle: nothing queued, nothing executing, nothing in flight.
  virtual bool idle() const { return queue.empty() && !busy_; }
  // Idle as sem.set needs it: as idle(), but background loads (dma.ld bg) that do not signal semaphore `sem` may
  // still be in flight (isa.def, sem.set).
  virtual bool idle_but_background(int sem) const {
    (void)sem;
    return idle();
  }
  // Drops queued and in-flight work and timing state (before a run, and after an error).
  virtual void reset();
  // For the deadlock message: "mxu waits for s3 (value 0) at pc 17 (mxu.mm ...)", or "" if not waiting.
  std::string blocked() const;

  UnitQueue queue;

 protected:
  // Called at the cycle the unit starts `e`, after its semaphore wait; returns when the unit may take the next
  // instruction. Checks operands first (st_.fail on a fault).
  virtual void execute(const Entry& e) = 0;
  // Books busy cycles [start, end) and their trace slice, and signals e's semaphore (the caller is at `end`).
  void finish(const Entry& e, uint64_t start, uint64_t end);
  // For the memory system: the instruction executing now was stalled on memory during [start, end) (cycles as
  // st_.now(); within its busy slice, e.g. a DMA's latency or HBM contention). Those cycles move from busy to
  // wait_memory in the stall accounting and get a "memory wait" trace slice. Call it before finish().
  void note_memory_wait(uint64_t start, uint64_t end);
  // The same for the `cycles` cycles just before now (after a wait_until on memory).
  void note_memory_wait(uint64_t cycles) { note_memory_wait(st_.now() - cycles, st_.now()); }
  UnitStats& stats() { return st_.slot_stats(slot_); }
  // Counts what this unit does for the instruction at `pc` (ChipState::act).
  void act(uint32_t pc, Action a, uint64_t n) { st_.act(slot_, pc, a, n); }
  // This unit's trace slice (and stall accounting, ChipState::trace).
  void trace(uint64_t start, uint64_t dur, uint32_t pc, const std::string& name, const char* kind) {
    st_.trace(slot_, start, dur, pc, name, kind);
  }
  // Named by the instruction at pc.
  void trace(uint64_t start, uint64_t dur, uint32_t pc, const char* kind) { st_.trace(slot_, start, dur, pc, kind); }

  ChipState& st_;

 private:
  void thread();
  void serve();
  void acquire(const Entry& e);

  isa::Unit unit_;
  int index_, slot_;
  bool busy_ = false;
  int blocked_sem_ = 0;
  uint32_t pc_ = 0;
};

}  // namespace tpusim::sim::detail
