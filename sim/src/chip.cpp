// The chip: declares and connects its modules, and runs programs on them (one sc_start() per run).
#include "tpusim/sim/chip.h"

#include <cstring>

#include <algorithm>
#include <iterator>
#include <numeric>

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

// libsystemc.so refers to sc_main (docs/architecture.md, "Known pitfalls"): every program linking this library
// gets this definition, which is never called (programs have their own main).
extern "C" int sc_main(int, char**) { return 0; }

namespace tpusim::sim {
namespace detail {

void declare_chip_params(std::vector<Param>& out) {
  ParamSection<ChipParams>(out, "chip", &ChipConfig::chip)
      .add(&ChipParams::name, "name", "custom", "", "the design point's name, for stats and traces")
      .add(&ChipParams::clock_mhz, "clock_mhz", 1050.0, "MHz", "clock of every unit; one cycle is one SystemC ns",
           1e-3, 1e6)
      .add(&ChipParams::cores, "cores", 1, "cores",
           "cores of the chip, each a dispatch core with its own units, semaphores and VMEM; they share HBM and "
           "the [shared] memory, and run a program's SPMD copies (its .cores of them)",
           1, 1024)
      .add(&ChipParams::sync_latency, "sync_latency", 0, "cycles",
           "cycles for a barrier's release or a sem.signal to reach another core", 0, 1000000)
      .add(&ChipParams::cluster, "cluster", 1, "cores",
           "cores per cluster: 2 lets the two cores of a pair (core.id 2i and 2i+1) share a load by multicast "
           "(dma.ld mcast: read once, delivered to both), as a GPU's thread-block clusters share a tile by TMA "
           "multicast; 1: no multicast (dma.ld mcast is an error)",
           1, 2)
      .add(&ChipParams::launch_cycles, "launch_cycles", 0, "cycles",
           "cycles from the start of a run (a kernel launch) to its first instruction: the host's launch overhead",
           0, uint64_t(1) << 40)
      .add(&ChipParams::node_nm, "node_nm", 7.0, "nm",
           "process node (its nominal name): scales the [energy] and [area] figures from the node they were "
           "published at (docs/energy.md)",
           1.0, 1000.0);
}

namespace {
int next_chip_id = 0;
}  // namespace

// One core: its state and its units. Modules are declared in the order of ChipState::all_units (the deadlock
// message lists the units in that order): the DMA queues, the matrix units, the vector unit.
struct CoreTop : sc_core::sc_module {
  CoreTop(const sc_core::sc_module_name& name, const ChipConfig& cfg, ChipShared& chip, int index)
      : sc_core::sc_module(name),
        st(cfg, chip, index),
        core("dispatch", st),
        dmain("dmain", st, isa::Unit::DmaIn),
        dmaout("dmaout", st, isa::Unit::DmaOut),
        mxus(make_mxus(st, cfg.core.mxus)),
        vpu("vpu", st) {}
  static std::vector<std::unique_ptr<Mxu>> make_mxus(ChipState& st, int n) {
    std::vector<std::unique_ptr<Mxu>> v;
    for (int i = 0; i < n; ++i) v.push_back(std::make_unique<Mxu>(("mxu" + std::to_string(i)).c_str(), st, i));
    return v;
  }
  ChipState st;
  Core core;
  DmaEngine dmain, dmaout;
  std::vector<std::unique_ptr<Mxu>> mxus;
  Vpu vpu;
};

// The top module only declares the cores; they find each other through ChipShared.
struct ChipTop : sc_core::sc_module {
  ChipTop(const sc_core::sc_module_name& name, const ChipConfig& cfg, ChipShared& chip) : sc_core::sc_module(name) {
    for (int i = 0; i < cfg.chip.cores; ++i) {
      cores.push_back(std::make_unique<CoreTop>(("core" + std::to_string(i)).c_str(), cfg, chip, i));
      chip.cores.push_back(&cores.back()->st);
    }
  }
  std::vector<std::unique_ptr<CoreTop>> cores;
};

}  // namespace detail

struct Chip::Impl {
  explicit Impl(const ChipConfig& c)
      : cfg(c), shared(c), top(("chip" + std::to_string(detail::next_chip_id++)).c_str(), c, shared) {}
  const ChipConfig cfg;
  detail::ChipShared shared;
  detail::ChipTop top;
  enum State { Idle, Started, Ran } state = Idle;  // Ran: run_started() is done, finish() not yet called

  detail::ChipState& core(size_t i) { return top.cores[i]->st; }
  std::vector<detail::CoreTop*> running_tops() {
    std::vector<detail::CoreTop*> v;
    for (uint32_t i = 0; i < shared.running; ++i) v.push_back(top.cores[i].get());
    return v;
  }
  detail::ChipState& first() { return core(0); }
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

const ChipConfig& Chip::config() const { return impl_->cfg; }

void Chip::write_hbm(uint64_t addr, const void* data, size_t bytes) {
  const ChipConfig& c = impl_->cfg;
  std::string err = detail::check_rows("HBM write", c.hbm_bytes(), std::to_string(c.hbm.size_mib) + " MiB",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.hbm_bytes() || !err.empty()) throw Error(err.empty() ? "HBM write outside HBM" : err);
  impl_->shared.mem.hbm.write(addr, data, bytes);
}

namespace {
void check_vmem(const ChipConfig& c, const char* what, uint64_t addr, size_t bytes) {
  std::string err = detail::check_rows(what, c.vmem_bytes(), std::to_string(c.vmem_bytes()) + " bytes",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.vmem_bytes() || !err.empty()) throw Error(err.empty() ? std::string(what) + " outside VMEM" : err);
}
}  // namespace

void Chip::write_vmem(uint64_t addr, const void* data, size_t bytes) {
  check_vmem(impl_->cfg, "VMEM write", addr, bytes);
  if (bytes) std::memcpy(impl_->first().mem.vmem.data() + addr, data, bytes);
}

void Chip::read_vmem(uint64_t addr, void* data, size_t bytes) const {
  check_vmem(impl_->cfg, "VMEM read", addr, bytes);
  if (bytes) std::memcpy(data, impl_->first().mem.vmem.data() + addr, bytes);
}

void Chip::read_hbm(uint64_t addr, void* data, size_t bytes) const {
  const ChipConfig& c = impl_->cfg;
  std::string err = detail::check_rows("HBM read", c.hbm_bytes(), std::to_string(c.hbm.size_mib) + " MiB",
                                       static_cast<int64_t>(addr), 1, static_cast<int64_t>(bytes), 0);
  if (addr > c.hbm_bytes() || !err.empty()) throw Error(err.empty() ? "HBM read outside HBM" : err);
  impl_->shared.mem.hbm.read(addr, data, bytes);
}

void Chip::Impl::prepare(const isa::Program& program, const RunOptions& opts) {
  if (program.cores < 1 || program.cores > static_cast<uint32_t>(cfg.chip.cores))
    throw Error("the program runs on " + std::to_string(program.cores) + " cores (.cores), the chip has " +
                std::to_string(cfg.chip.cores) + " (chip.cores)");
  shared.code.clear();
  shared.unit_of.clear();
  shared.reg_use.clear();
  shared.code.reserve(program.code.size());
  for (size_t pc = 0; pc < program.code.size(); ++pc) {
    try {
      shared.code.push_back(isa::decode(program.code[pc]));
    } catch (const isa::Error& e) {
      throw Error("pc " + std::to_string(pc) + ": " + e.what());
    }
    shared.unit_of.push_back(shared.code.back().desc().unit);
    shared.reg_use.push_back(detail::reg_use(shared.code.back()));
  }
  shared.text.assign(shared.code.size(), std::string());
  shared.running = program.cores;
  shared.barrier_arrived = 0;
  shared.mcast.assign((program.cores + 1) / 2, {});
  shared.actions_by_pc.assign(opts.trace ? shared.code.size() : 0, ActionCounts{});
  for (detail::ChipState* c : shared.cores) {
    detail::RunState& r = c->run;
    r = detail::RunState{};
    r.program = &program;
    r.opts = opts;
    r.code = shared.code;
    r.unit_of = shared.unit_of;
    r.reg_use = shared.reg_use;
    r.text = &shared.text;
    r.running = c->index < static_cast<int>(program.cores);
    r.spans.resize(static_cast<size_t>(c->slots()));
    r.mxu_stats.resize(static_cast<size_t>(cfg.core.mxus - 1));
    r.slot_actions.assign(static_cast<size_t>(c->slots()), ActionCounts{});
    c->reset_units();
  }
}

// Why a run stopped without finishing or failing: out of cycles, or out of events (a deadlock).
std::string Chip::Impl::stopped_message() {
  detail::ChipState& c0 = first();
  detail::RunState& r = c0.run;
  // Out of cycles: run_started stopped at the latest limit of the chips it ran with events still pending (with
  // SC_EXIT_ON_STARVATION, time stays at the last event before the limit). With several chips, an unfinished
  // chip with a limit is reported as out of cycles then, even if only another chip's events were pending.
  if (sc_core::sc_pending_activity() && r.opts.max_cycles) {
    for (detail::CoreTop* t : running_tops())
      if (!t->st.run.finished)
        return "still running after " + std::to_string(r.opts.max_cycles) + " cycles at " + t->st.core_prefix() +
               t->st.where(t->core.pc());
  }
  std::string s = "deadlock at cycle " + std::to_string(c0.now() - r.t0) + ": ";
  std::string waits, ended;
  for (detail::CoreTop* t : running_tops()) {
    for (const detail::UnitModule* u : t->st.all_units) {
      std::string b = u->blocked();
      if (!b.empty()) waits += (waits.empty() ? "" : "; ") + b;
    }
    std::string core = t->core.blocked();
    if (!core.empty()) waits += (waits.empty() ? "" : "; ") + t->st.core_prefix() + core;
    if (t->st.run.finished) ended += (ended.empty() ? "" : ", ") + std::to_string(t->st.index);
  }
  if (!ended.empty()) waits += (waits.empty() ? "" : "; ") + std::string("ended the program: core ") + ended;
  return s + (waits.empty() ? "no unit can make progress" : waits);
}

RunResult Chip::Impl::collect() {
  RunResult out;
  RunStats& s = out.stats;
  for (detail::ChipState* c : shared.cores) s.cycles = std::max(s.cycles, c->run.cycles);
  s.seconds = cfg.seconds(s.cycles);
  s.cores = cfg.chip.cores;
  s.cores_running = static_cast<int>(shared.running);
  const double cycles = static_cast<double>(s.cycles);
  std::array<int, isa::kNumUnits> count{};
  detail::Tpuv1Cycles v1;
  double mac_slots = 0;
  const detail::Signallers sig = detail::signallers(first().run);  // the program's, the same on every core
  for (detail::ChipState* c : shared.cores) {
    detail::RunState& r = c->run;
    std::vector<StallBreakdown> stalls(static_cast<size_t>(c->slots()));
    detail::account_stalls(r, sig, s.cycles, stalls, v1);
    for (int slot = 0; slot < c->slots(); ++slot) {
      UnitStats u = c->slot_stats(slot);
      if (slot == static_cast<int>(isa::Unit::Core))
        u.stalls.idle_after += s.cycles - r.cycles;  // booked as it ran, up to its own end
      else
        u.stalls = stalls[static_cast<size_t>(slot)];
      u.utilization = s.cycles ? static_cast<double>(u.busy_cycles) / cycles : 0.0;
      const isa::Unit kind = detail::unit_of_slot(slot);
      detail::add_unit_stats(s.units[static_cast<int>(kind)], u);
      ++count[static_cast<int>(kind)];
      const ActionCounts& acts = r.slot_actions[static_cast<size_t>(slot)];
      s.actions += acts;
      s.instances.push_back({c->index, kind, detail::index_of_slot(slot), u, acts});
    }
    s.mxu_macs += r.stats.mxu_macs;
    mac_slots += r.mac_slots;
    s.hbm_bytes_read += r.stats.hbm_bytes_read;
    s.hbm_bytes_written += r.stats.hbm_bytes_written;
    s.shared_bytes_read += r.stats.shared_bytes_read;
    s.shared_bytes_written += r.stats.shared_bytes_written;
    s.local_bytes_read += r.stats.local_bytes_read;
    s.local_bytes_written += r.stats.local_bytes_written;
    std::move(r.trace.begin(), r.trace.end(), std::back_inserter(out.trace));
    r.trace.clear();
  }
  for (int u = 0; u < isa::kNumUnits; ++u)
    s.units[u].utilization =
        s.cycles && count[u] ? static_cast<double>(s.units[u].busy_cycles) / (cycles * count[u]) : 0.0;
  const double peak = static_cast<double>(cfg.mxu.rows) * cfg.mxu.cols * cycles * cfg.total_mxus();
  s.mxu_mac_utilization = peak > 0 ? mac_slots / peak : 0.0;
  detail::tpuv1_counters(v1, cycles * cfg.total_mxus(), s.mxu_mac_utilization, s.tpuv1);
  out.actions_by_pc = std::move(shared.actions_by_pc);
  shared.actions_by_pc.clear();
  // In time order (then core, unit): the events' indices sorted, then each event moved once.
  std::vector<uint32_t> order(out.trace.size());
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t i, uint32_t j) {
    const TraceEvent &a = out.trace[i], &b = out.trace[j];
    if (a.start != b.start) return a.start < b.start;
    if (a.core != b.core) return a.core < b.core;
    return a.unit != b.unit ? a.unit < b.unit : a.index < b.index;
  });
  std::vector<TraceEvent> sorted;
  sorted.reserve(out.trace.size());
  for (uint32_t i : order) sorted.push_back(std::move(out.trace[i]));
  out.trace = std::move(sorted);
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
  for (size_t i = 0; i < m.top.cores.size(); ++i) {
    detail::ChipState& st = m.core(i);
    st.run.t0 = st.now();
    if (st.run.running)
      m.top.cores[i]->core.start.notify(sc_core::SC_ZERO_TIME);
    else
      st.run.finished = true;  // a core the program does not use: done at once, 0 cycles
  }
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
    const detail::RunState& r = m.first().run;
    if (!r.opts.max_cycles)
      limited = false;
    else
      until = std::max(until, r.t0 + r.opts.max_cycles + 2);
  }
  if (started.empty()) return;
  for (Impl* m : started) m->state = Impl::Ran;
  if (limited) {
    uint64_t now = started.front()->first().now();
    start_simulation(started.front()->first().span(until > now ? until - now : 0), sc_core::SC_EXIT_ON_STARVATION);
  } else {
    start_simulation();
  }
  bool unwind = false;
  for (Impl* m : started) {
    bool finished = true;
    for (detail::ChipState* c : m->shared.cores) finished &= c->run.finished;
    std::string& error = m->first().run.error;  // every core holds the chip's first error (record_error)
    if (!finished && error.empty()) {
      const std::string why = m->stopped_message();
      for (detail::ChipState* c : m->shared.cores) c->run.error = why;
    }
    for (const auto& pending : m->shared.mcast)  // a multicast load whose pair never came (isa.def, dma.ld)
      if (finished && error.empty() && !pending.empty()) {
        detail::ChipState& c = *m->shared.cores[static_cast<size_t>(pending.front().core)];
        const std::string why = c.core_prefix() + c.where(pending.front().pc) +
                                ": mcast: the pair's other core (" + std::to_string(c.index ^ 1) +
                                ") ended the program without a matching multicast load";
        for (detail::ChipState* k : m->shared.cores) k->run.error = why;
      }
    if (!error.empty()) {
      // Unwind every thread to its idle loop, so that the chip can run again.
      for (detail::ChipState* c : m->shared.cores) c->abort_run();
      unwind = true;
    }
  }
  if (unwind) {
    if (sc_core::sc_pending_activity()) start_simulation();
    for (Impl* m : started)
      if (!m->first().run.error.empty())
        for (detail::ChipState* c : m->shared.cores) c->reset_units();
  }
}

RunResult Chip::finish() {
  Impl& m = *impl_;
  if (m.state == Impl::Idle) throw Error("Chip::finish called without Chip::start");
  if (m.state == Impl::Started) throw Error("Chip::finish called before Chip::run_started");
  m.state = Impl::Idle;
  if (!m.first().run.error.empty()) throw Error(m.first().run.error);
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
