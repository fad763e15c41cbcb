// The chip: declares and connects its modules, and runs programs on them (one sc_start() per run).
#include "tpusim/sim/chip.h"

#include <cstring>

#include <algorithm>

#include "core.h"
#include "dma.h"
#include "mxu.h"
#include "params.h"
#include "vpu.h"

#if defined(__SANITIZE_ADDRESS__)
#define TPUSIM_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TPUSIM_ASAN 1
#endif
#endif
#ifdef TPUSIM_ASAN
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif

// Debian's libsystemc.so refers to sc_main (DESIGN.md, "Known pitfalls"): every program linking the sim library
// gets this definition, which is never called (programs have their own main).
extern "C" int sc_main(int, char**) { return 0; }

namespace tpusim::sim {
namespace detail {

void declare_chip_params(std::vector<Param>& out) {
  ParamSection<ChipParams>(out, "chip", &ChipConfig::chip)
      .add(&ChipParams::name, "name", "custom", "", "the design point's name, for stats and traces")
      .add(&ChipParams::clock_mhz, "clock_mhz", 1050.0, "MHz", "clock of every unit; one cycle is one SystemC ns",
           1e-3, 1e6);
}

namespace {
int next_chip_id = 0;
}  // namespace

// The top module only declares its units; they find each other through the shared state.
struct ChipTop : sc_core::sc_module {
  ChipTop(const sc_core::sc_module_name& name, ChipState& st)
      : sc_core::sc_module(name),
        core("core", st),
        dmain("dmain", st, isa::Unit::DmaIn),
        dmaout("dmaout", st, isa::Unit::DmaOut),
        mxu("mxu", st),
        vpu("vpu", st) {}
  Core core;
  DmaEngine dmain, dmaout;
  Mxu mxu;
  Vpu vpu;
};

}  // namespace detail

struct Chip::Impl {
  explicit Impl(const ChipConfig& cfg)
      : st(cfg), top(("chip" + std::to_string(detail::next_chip_id++)).c_str(), st) {}
  detail::ChipState st;
  detail::ChipTop top;
  enum State { Idle, Started, Ran } state = Idle;  // Ran: run_started() is done, finish() not yet called

  void prepare(const isa::Program& program, const RunOptions& opts);
  std::string stopped_message();
  RunResult collect();
};

Chip::Chip(const ChipConfig& cfg) {
  if (sc_core::sc_get_status() != sc_core::SC_ELABORATION)
    throw Error("a Chip must be constructed before the first Chip::run of the process (SystemC elaborates once)");
  impl_ = std::make_unique<Impl>(cfg);
}

Chip::~Chip() = default;

const ChipConfig& Chip::config() const { return impl_->st.cfg; }

void Chip::write_hbm(uint64_t addr, const void* data, size_t bytes) {
  const ChipConfig& c = impl_->st.cfg;
  std::string err = detail::check_rows("HBM write", c.hbm_bytes(), std::to_string(c.hbm.size_mib) + " MiB",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.hbm_bytes() || !err.empty()) throw Error(err.empty() ? "HBM write outside HBM" : err);
  impl_->st.mem.hbm.write(addr, data, bytes);
}

namespace {
void check_vmem(const ChipConfig& c, const char* what, uint64_t addr, size_t bytes) {
  std::string err = detail::check_rows(what, c.vmem_bytes(), std::to_string(c.vmem_bytes()) + " bytes",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.vmem_bytes() || !err.empty()) throw Error(err.empty() ? std::string(what) + " outside VMEM" : err);
}
}  // namespace

void Chip::write_vmem(uint64_t addr, const void* data, size_t bytes) {
  check_vmem(impl_->st.cfg, "VMEM write", addr, bytes);
  if (bytes) std::memcpy(impl_->st.mem.vmem.data() + addr, data, bytes);
}

void Chip::read_vmem(uint64_t addr, void* data, size_t bytes) const {
  check_vmem(impl_->st.cfg, "VMEM read", addr, bytes);
  if (bytes) std::memcpy(data, impl_->st.mem.vmem.data() + addr, bytes);
}

void Chip::read_hbm(uint64_t addr, void* data, size_t bytes) const {
  const ChipConfig& c = impl_->st.cfg;
  std::string err = detail::check_rows("HBM read", c.hbm_bytes(), std::to_string(c.hbm.size_mib) + " MiB",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.hbm_bytes() || !err.empty()) throw Error(err.empty() ? "HBM read outside HBM" : err);
  impl_->st.mem.hbm.read(addr, data, bytes);
}

void Chip::Impl::prepare(const isa::Program& program, const RunOptions& opts) {
  detail::RunState& r = st.run;
  r = detail::RunState{};
  r.program = &program;
  r.opts = opts;
  r.code.reserve(program.code.size());
  for (size_t pc = 0; pc < program.code.size(); ++pc) {
    try {
      r.code.push_back(isa::decode(program.code[pc]));
    } catch (const isa::Error& e) {
      throw Error("pc " + std::to_string(pc) + ": " + e.what());
    }
    r.unit_of.push_back(r.code.back().desc().unit);
  }
  r.text.resize(r.code.size());
  st.reset_units();
}

// Why a run stopped without finishing or failing: out of cycles, or out of events (a deadlock).
std::string Chip::Impl::stopped_message() {
  detail::RunState& r = st.run;
  // Out of cycles: run_started stopped at the latest limit of the chips it ran with events still pending (with
  // SC_EXIT_ON_STARVATION, time stays at the last event before the limit). With several chips, an unfinished
  // chip with a limit is reported as out of cycles then, even if only another chip's events were pending.
  if (sc_core::sc_pending_activity() && r.opts.max_cycles)
    return "still running after " + std::to_string(r.opts.max_cycles) + " cycles at " + st.where(top.core.pc());
  std::string s = "deadlock at cycle " + std::to_string(st.now() - r.t0) + ": ";
  std::string waits;
  for (const detail::UnitModule* u : st.units) {
    std::string b = u ? u->blocked() : "";
    if (!b.empty()) waits += (waits.empty() ? "" : "; ") + b;
  }
  std::string core = top.core.blocked();
  if (!core.empty()) waits += (waits.empty() ? "" : "; ") + core;
  return s + (waits.empty() ? "no unit can make progress" : waits);
}

RunResult Chip::Impl::collect() {
  detail::RunState& r = st.run;
  RunResult out;
  out.stats = r.stats;
  RunStats& s = out.stats;
  s.cycles = r.cycles;
  s.seconds = st.cfg.seconds(s.cycles);
  for (UnitStats& u : s.units)
    u.utilization = s.cycles ? static_cast<double>(u.busy_cycles) / static_cast<double>(s.cycles) : 0.0;
  const double peak = static_cast<double>(st.cfg.mxu.rows) * st.cfg.mxu.cols * static_cast<double>(s.cycles);
  s.mxu_mac_utilization = peak > 0 ? static_cast<double>(s.mxu_macs) / peak : 0.0;
  detail::account_stalls(st.cfg, r, s);
  out.trace = std::move(r.trace);
  std::stable_sort(out.trace.begin(), out.trace.end(), [](const TraceEvent& a, const TraceEvent& b) {
    return a.start != b.start ? a.start < b.start : a.unit < b.unit;
  });
  return out;
}

namespace {

// Under AddressSanitizer only. Debian's SystemC 2.3.4 announces its coroutine switches to ASan, but its main
// coroutine never records its stack, so every switch back to this thread's own stack announces empty bounds. ASan
// then skips unpoisoning the frames a C++ exception unwinds here ("ASan is ignoring requested
// __asan_handle_no_return") and reports a false stack-buffer-overflow where later frames reuse them
// (validation/fuzz/README.md, "Sanitizers and SystemC's coroutines"). After sc_start() returns, announce this
// thread's stack again and clear what such an unwinding left poisoned below the current frame (dead stack).
void sc_start_returned() {
#ifdef TPUSIM_ASAN
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return;
  void* low = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&attr, &low, &size);
  pthread_attr_destroy(&attr);
  void* fake_stack = nullptr;
  __sanitizer_start_switch_fiber(&fake_stack, low, size);
  __sanitizer_finish_switch_fiber(fake_stack, nullptr, nullptr);
  char* here = static_cast<char*>(__builtin_frame_address(0));
  __asan_unpoison_memory_region(low, static_cast<size_t>(here - static_cast<char*>(low)));
#endif
}

template <typename... Args>
void start_simulation(Args... args) {
  sc_core::sc_start(args...);
  sc_start_returned();
}

}  // namespace

void Chip::start(const isa::Program& program, const RunOptions& opts) {
  Impl& m = *impl_;
  if (m.state != Impl::Idle) throw Error("Chip::start called while the chip is running");
  m.prepare(program, opts);
  if (sc_core::sc_get_status() == sc_core::SC_ELABORATION) start_simulation(sc_core::SC_ZERO_TIME);
  m.st.run.t0 = m.st.now();
  m.top.core.start.notify(sc_core::SC_ZERO_TIME);
  m.state = Impl::Started;
}

void Chip::run_started(const std::vector<Chip*>& chips) {
  std::vector<Impl*> started;
  bool limited = true;
  uint64_t until = 0;  // SystemC cycle past which no started chip may run (with two cycles of slack: the core
                       // itself reports overruns it sees)
  for (Chip* c : chips) {
    if (!c || c->impl_->state != Impl::Started) continue;
    Impl& m = *c->impl_;
    started.push_back(&m);
    if (!m.st.run.opts.max_cycles)
      limited = false;
    else
      until = std::max(until, m.st.run.t0 + m.st.run.opts.max_cycles + 2);
  }
  if (started.empty()) return;
  for (Impl* m : started) m->state = Impl::Ran;
  if (limited) {
    uint64_t now = started.front()->st.now();
    start_simulation(started.front()->st.span(until > now ? until - now : 0), sc_core::SC_EXIT_ON_STARVATION);
  } else {
    start_simulation();
  }
  bool unwind = false;
  for (Impl* m : started) {
    detail::RunState& r = m->st.run;
    if (!r.finished && r.error.empty()) r.error = m->stopped_message();
    if (!r.error.empty()) {
      // Unwind every thread to its idle loop, so that the chip can run again.
      m->st.abort_run();
      unwind = true;
    }
  }
  if (unwind) {
    if (sc_core::sc_pending_activity()) start_simulation();
    for (Impl* m : started)
      if (!m->st.run.error.empty()) m->st.reset_units();
  }
}

RunResult Chip::finish() {
  Impl& m = *impl_;
  if (m.state == Impl::Idle) throw Error("Chip::finish called without Chip::start");
  if (m.state == Impl::Started) throw Error("Chip::finish called before Chip::run_started");
  m.state = Impl::Idle;
  if (!m.st.run.error.empty()) throw Error(m.st.run.error);
  return m.collect();
}

RunResult Chip::run(const isa::Program& program, const RunOptions& opts) {
  start(program, opts);
  try {
    run_started({this});
  } catch (...) {
    impl_->state = Impl::Idle;
    throw;
  }
  return finish();
}

}  // namespace tpusim::sim
