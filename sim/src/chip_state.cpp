#include "chip_state.h"

#include "unit.h"

namespace tpusim::sim::detail {

ChipState::ChipState(const ChipConfig& c, ChipShared& ch, int i)
    : cfg(c), chip(ch), index(i), mem(c, ch.mem), cycle_value_(sc_core::sc_time(1, sc_core::SC_NS).value()) {
  for (auto& e : sem_changed) events.push_back(&e);
  events.push_back(&drained);
  events.push_back(&abort_ev);
  events.push_back(&ch.barrier_ev);
  events.push_back(&remote_ev);
}

std::string ChipState::core_prefix() const {
  return chip.running > 1 ? "core " + std::to_string(index) + ": " : "";
}

void ChipState::wait_until(uint64_t cycle) {
  uint64_t t = now();
  if (cycle > t) sc_core::wait(span(cycle - t), abort_ev);
  check_abort();
}

void ChipState::wait_event(sc_core::sc_event& e) {
  sc_core::wait(e);
  check_abort();
}

bool ChipState::all_idle() const {
  for (const UnitModule* u : all_units)
    if (!u->idle()) return false;
  return true;
}

bool ChipState::all_idle_but_background(int sem) const {
  for (const UnitModule* u : all_units)
    if (!u->idle_but_background(sem)) return false;
  return true;
}

void ChipState::signal(int s, uint32_t pc) {
  if (s && sem[s] >= isa::kSemMax) fail(pc, sem_overflow(s));
  signal(s);
}

std::string ChipState::sem_overflow(int s) const {
  return "semaphore s" + std::to_string(s) + " would count past " + std::to_string(isa::kSemMax) + " (signalled at " +
         std::to_string(isa::kSemMax) + ")";
}

void ChipState::signal(int s) {
  if (!s) return;
  if (sem[s] >= isa::kSemMax) fail_message(sem_overflow(s) + " by a sem.signal");
  ++sem[s];
  sem_changed[s].notify();
}

void ChipState::trace(int slot, uint64_t start, uint64_t dur, uint32_t pc, const std::string& name,
                      const char* kind) {
  if (slot != static_cast<int>(isa::Unit::Core)) {
    const std::string_view k = kind;
    if (k == "busy") account(slot, start, start + dur, Span::Busy);
    else if (k == "load") account(slot, start, start + dur, Span::Load);
  }
  if (!keeping_trace()) return;
  // The limit holds per core (each core keeps its own events).
  if (run.opts.max_trace_events && run.trace.size() >= run.opts.max_trace_events)
    fail_message("the trace reached its limit of " + std::to_string(run.opts.max_trace_events) +
                 " events (about " + std::to_string(run.opts.max_trace_events * 150 >> 20) + " MiB) at cycle " +
                 std::to_string(now() - run.t0) + ": trace a shorter run, or raise the limit (--trace-limit)");
  run.trace.push_back({unit_of_slot(slot), start - run.t0, dur, pc, name, kind, static_cast<uint16_t>(index),
                       static_cast<uint16_t>(index_of_slot(slot))});
}

void ChipState::trace(int slot, uint64_t start, uint64_t dur, uint32_t pc, const char* kind) {
  static const std::string unnamed;
  trace(slot, start, dur, pc, keeping_trace() ? text(pc) : unnamed, kind);
}

void ChipState::account(int slot, uint64_t start, uint64_t end, Span::Kind kind, int sem, isa::Op op) {
  if (end <= start) return;
  std::vector<Span>& v = run.spans[static_cast<size_t>(slot)];
  const uint64_t s = start - run.t0, e = end - run.t0;
  // Consecutive busy slices (a DMA engine's back-to-back transfers) merge, so that long runs stay small.
  if (kind == Span::Busy && !v.empty() && v.back().kind == Span::Busy && v.back().end == s) {
    v.back().end = e;
    return;
  }
  v.push_back({s, e, kind, static_cast<uint8_t>(sem), op});
}

const std::string& ChipState::text(uint32_t pc) {
  if (pc >= run.code.size()) {
    static const std::string end = "end of program";
    return end;
  }
  std::string& s = (*run.text)[pc];
  if (s.empty()) s = isa::format(run.code[pc]);
  return s;
}

std::string ChipState::where(uint32_t pc) {
  std::string s = "pc " + std::to_string(pc) + " (" + text(pc) + ")";
  if (run.program && pc < run.program->source.size() && !run.program->source[pc].empty())
    s += " at " + run.program->source[pc];
  return s;
}

void ChipState::fail(uint32_t pc, const std::string& what) { fail_message(core_prefix() + where(pc) + ": " + what); }

void ChipState::fail_message(const std::string& message) {
  record_error(message);
  throw Abort{};
}

// The first error stops every core of the chip: each records it (unless it has one) and aborts.
void ChipState::record_error(const std::string& message) {
  for (ChipState* c : chip.cores) {
    if (c->run.error.empty()) c->run.error = message;
    c->abort_run();
  }
}

void ChipState::abort_run() {
  aborting = true;
  remote_signals.clear();
  for (UnitModule* u : all_units) u->reset();
  // Delta notifications work both inside the simulation and between sc_start() calls.
  for (sc_core::sc_event* e : events) e->notify(sc_core::SC_ZERO_TIME);
}

void ChipState::reset_units() {
  sem.fill(0);
  remote_signals.clear();
  aborting = false;
  for (UnitModule* u : all_units) u->reset();
}

}  // namespace tpusim::sim::detail
