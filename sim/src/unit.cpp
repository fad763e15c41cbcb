#include "unit.h"

namespace tpusim::sim::detail {

UnitModule::UnitModule(const sc_core::sc_module_name& name, ChipState& st, isa::Unit unit, int index)
    : sc_core::sc_module(name), queue(static_cast<size_t>(st.cfg.core.queue_depth)), st_(st), unit_(unit),
      index_(index), slot_(slot_of(unit, index)) {
  if (index == 0) st.units[static_cast<int>(unit)] = this;
  if (unit == isa::Unit::Mxu) st.mxus.push_back(this);
  st.all_units.push_back(this);
  st.events.push_back(&queue.pushed);
  st.events.push_back(&queue.popped);
  SC_THREAD(thread);
}

void UnitModule::reset() {
  queue.clear();
  busy_ = false;
  blocked_sem_ = 0;
}

std::string UnitModule::label() const {
  std::string s = st_.chip.running > 1 ? "core " + std::to_string(st_.index) + " " : "";
  s += isa::unit_name(unit_);
  if (st_.cfg.core.mxus > 1 && unit_ == isa::Unit::Mxu) s += std::to_string(index_);
  return s;
}

std::string UnitModule::blocked() const {
  if (!blocked_sem_) return "";
  return label() + " waits for s" + std::to_string(blocked_sem_) + " (value " +
         std::to_string(st_.sem[blocked_sem_]) + ") at " + st_.where(pc_);
}

void UnitModule::thread() {
  for (;;) {
    try {
      serve();
    } catch (const Abort&) {
    } catch (const std::exception& e) {
      st_.record_error(label() + ": internal error: " + e.what());
    }
    busy_ = false;
    blocked_sem_ = 0;
  }
}

void UnitModule::serve() {
  for (;;) {
    busy_ = false;
    // (idle, or idle but for transfers in flight: a drain that lets background loads go on looks again)
    if (UnitModule::idle()) st_.drained.notify();
    // Not abortable: after an abort the queue is empty and this is where the thread rests.
    while (queue.empty() || st_.aborting) sc_core::wait(queue.pushed);
    busy_ = true;
    // The entry leaves the queue when the unit takes it, before its semaphore wait.
    Entry e = queue.front();
    st_.wait_until(e.avail);
    queue.pop();
    pc_ = e.pc;
    ++stats().instructions;
    acquire(e);
    execute(e);
  }
}

void UnitModule::acquire(const Entry& e) {
  int s = e.wait_sem();
  if (!s) return;
  uint64_t t = st_.now();
  if (st_.sem[s] == 0) {
    blocked_sem_ = s;
    do st_.wait_event(st_.sem_changed[s]);
    while (st_.sem[s] == 0);
    blocked_sem_ = 0;
  }
  --st_.sem[s];
  uint64_t waited = st_.now() - t;
  if (!waited) return;
  stats().wait_sem_cycles += waited;
  st_.account(slot_, t, t + waited, Span::Sem, s, e.in.op);
  if (st_.keeping_trace()) trace(t, waited, e.pc, "wait s" + std::to_string(s), "wait");
}

void UnitModule::finish(const Entry& e, uint64_t start, uint64_t end) {
  stats().busy_cycles += end - start;
  trace(start, end - start, e.pc, "busy");
  st_.signal(e.signal_sem(), e.pc);
}

void UnitModule::note_memory_wait(uint64_t start, uint64_t end) {
  if (end <= start) return;
  st_.account(slot_, start, end, Span::Memory);
  if (st_.keeping_trace()) trace(start, end - start, pc_, "memory wait", "memory");
}

}  // namespace tpusim::sim::detail
