#include "tpusim/runtime/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <sstream>

#include "client_core.h"
#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/assembler.h"
#include "tpusim/isa/numerics.h"
#include "tpusim/kernels/kernels.h"

namespace tpusim::runtime {
namespace {

using detail::BufferState;
using detail::ClientCore;
using detail::Storage;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

Status invalid(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }

// The bytes to place in HBM for input `decl` from host tensor `t` (the convenience layer), or an error saying
// what does not match. Returns t.data itself unless float32 data is rounded for a bf16 or f8e4m3 input.
const std::vector<uint8_t>& input_bytes(const isa::TensorDecl& decl, const HostTensor& t, std::vector<uint8_t>& tmp) {
  const bool f32_for_f8 = decl.dtype == isa::DType::F8E4M3 && t.dtype == isa::DType::F32;
  const bool f32_for_bf16 = (decl.dtype == isa::DType::BF16 && t.dtype == isa::DType::F32) || f32_for_f8;
  if ((t.dtype != decl.dtype && !f32_for_bf16) || t.shape != decl.shape)
    throw Error("input '" + decl.name + "': expected " + isa::dtype_name(decl.dtype) + " " + shape_text(decl.shape) +
                ", got " + isa::dtype_name(t.dtype) + " " + shape_text(t.shape));
  if (t.data.size() != static_cast<uint64_t>(t.elements()) * isa::dtype_size(t.dtype))
    throw Error("input '" + decl.name + "': " + std::to_string(t.data.size()) + " bytes of data for " +
                describe(decl));
  if (!f32_for_bf16) return t.data;
  tmp.resize(decl.bytes());
  for (int64_t i = 0; i < t.elements(); ++i) {
    float f;
    std::memcpy(&f, t.data.data() + 4 * i, 4);
    if (f32_for_f8) {
      tmp[i] = isa::f8e4m3_from_f32(f);  // as vpu.cast: nearest even, NaN beyond 464
      continue;
    }
    uint16_t h = isa::bf16_from_f32(f);
    std::memcpy(tmp.data() + 2 * i, &h, 2);
  }
  return tmp;
}

void write_tensor(sim::Chip& chip, const isa::TensorDecl& d, const uint8_t* bytes) {
  if (d.space == isa::MemSpace::Vmem)
    chip.write_vmem(d.addr, bytes, d.bytes());
  else
    chip.write_hbm(d.addr, bytes, d.bytes());
}

void read_tensor(const sim::Chip& chip, const isa::TensorDecl& d, uint8_t* bytes) {
  if (d.space == isa::MemSpace::Vmem)
    chip.read_vmem(d.addr, bytes, d.bytes());
  else
    chip.read_hbm(d.addr, bytes, d.bytes());
}

Status shutting_down() { return {StatusCode::kFailedPrecondition, "the client is shutting down"}; }

Event ready_event() { return Event::ready_with(Done{}); }

Buffer make_buffer(const std::shared_ptr<ClientCore>& core, int device, isa::DType dtype, std::vector<int64_t> dims,
                   std::shared_ptr<Storage> storage, Event ready) {
  auto s = std::make_shared<BufferState>();
  s->client = core;
  s->device = device;
  s->dtype = dtype;
  s->dims = std::move(dims);
  s->bytes = storage->bytes;
  s->memory = storage->kind;
  s->ready = std::move(ready);
  s->storage = std::move(storage);
  return ClientCore::wrap(std::move(s));
}

// One device's part of an execution, checked, on its way to the simulation thread.
struct Item {
  int device = 0;
  std::vector<std::pair<const isa::TensorDecl*, std::shared_ptr<Storage>>> inputs;
  std::vector<Event> input_ready;
  std::vector<std::shared_ptr<Storage>> donated;
  Promise<ExecuteOutput> promise;
  bool settled = false;  // the promise has its value (a mistake found at submission): set it only once
  void settle(StatusOr<ExecuteOutput> v) {
    if (settled) return;
    settled = true;
    promise.set_value(std::move(v));
  }
  // On the simulation thread:
  Status status;
  bool reserved = false, started = false;
  std::vector<std::pair<const isa::TensorDecl*, std::shared_ptr<Storage>>> outputs;
};

}  // namespace

const char* status_code_name(StatusCode c) {
  switch (c) {
    case StatusCode::kOk: return "OK";
    case StatusCode::kInvalidArgument: return "INVALID_ARGUMENT";
    case StatusCode::kNotFound: return "NOT_FOUND";
    case StatusCode::kOutOfMemory: return "OUT_OF_MEMORY";
    case StatusCode::kFailedPrecondition: return "FAILED_PRECONDITION";
    case StatusCode::kAborted: return "ABORTED";
    case StatusCode::kInternal: return "INTERNAL";
  }
  return "UNKNOWN";
}

std::string Status::to_string() const { return ok() ? "OK" : std::string(status_code_name(code_)) + ": " + message_; }

std::string describe(const isa::TensorDecl& d) {
  return d.name + ": " + isa::dtype_name(d.dtype) + " " + shape_text(d.shape);
}

std::string DeviceDescription::to_string() const {
  auto attr = [&](const char* k) { auto it = attributes.find(k); return it == attributes.end() ? 0.0 : it->second; };
  std::ostringstream s;
  s << kind << ":" << id << " (" << chip << ", mxu " << attr("mxu_rows") << "x" << attr("mxu_cols") << ", "
    << attr("clock_mhz") << " MHz, hbm " << attr("hbm_bytes") / double(1 << 30) << " GiB)";
  return s.str();
}

// ---------------------------------------------------------------------------------------------------------------
// The simulation thread.

void ClientCore::loop() {
  for (;;) {
    std::vector<Work> batch;
    {
      std::unique_lock<std::mutex> lock(queue_mu);
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) break;  // stopping, and everything queued is done
      take_batch(batch);
    }
    run_batch(batch);
  }
  chips.clear();  // SystemC objects die on the thread that made them
}

void ClientCore::take_batch(std::vector<Work>& batch) {
  std::vector<bool> busy(num_devices, false);  // devices of the executions taken
  while (!queue.empty()) {
    Work& w = queue.front();
    if (w.exec) {
      for (int d : w.exec->devices)
        if (busy[d]) return;  // a second execution on a device: after this batch
      for (int d : w.exec->devices) busy[d] = true;
    } else if (w.device < 0) {
      if (!batch.empty()) return;  // runs alone, after everything before it
      batch.push_back(std::move(w));
      queue.pop_front();
      return;
    } else if (busy[w.device]) {
      return;  // waits for the execution on its device
    }
    batch.push_back(std::move(w));
    queue.pop_front();
    if (!batching) return;
  }
}

void ClientCore::run_batch(std::vector<Work>& batch) {
  for (Work& w : batch)
    if (!w.exec) {
      w.task();  // tasks report their own errors through their promises
      w.task = nullptr;  // let go of what it captured before the executions complete
    }
  std::vector<sim::Chip*> started;
  for (Work& w : batch)
    if (w.exec) w.exec->start(started);
  Status sim_error;
  if (!started.empty()) {
    ++simulations;
    chips_simulated += started.size();
    try {
      sim::Chip::run_started(started);
    } catch (const std::exception& e) {
      sim_error = Status(StatusCode::kInternal, e.what());
    }
  }
  for (Work& w : batch)
    if (w.exec) {
      w.exec->finish(sim_error);
      w.exec.reset();
    }
}

bool ClientCore::push(Work w) {
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    if (stopping) return false;
    queue.push_back(std::move(w));
  }
  queue_cv.notify_one();
  return true;
}

bool ClientCore::post(std::function<void()> task, int device) {
  Work w;
  w.task = std::move(task);
  w.device = device >= 0 && device < num_devices ? device : -1;
  return push(std::move(w));
}

bool ClientCore::post(std::shared_ptr<Execution> exec) {
  Work w;
  w.exec = std::move(exec);
  return push(std::move(w));
}

void ClientCore::stop() {
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    stopping = true;
  }
  queue_cv.notify_one();
  if (thread.joinable()) thread.join();
}

// ---------------------------------------------------------------------------------------------------------------
// Buffer

int Buffer::device() const { return s_->device; }
isa::DType Buffer::dtype() const { return s_->dtype; }
const std::vector<int64_t>& Buffer::dims() const { return s_->dims; }
uint64_t Buffer::bytes() const { return s_->bytes; }
MemoryKind Buffer::memory() const { return s_->memory; }
Event Buffer::ready() const { return s_ ? s_->ready : Event::ready_with(invalid("no buffer")); }

bool Buffer::deleted() const {
  std::lock_guard<std::mutex> lock(s_->mu);
  return s_->storage == nullptr;
}

void Buffer::Delete() {
  if (!s_) return;
  std::shared_ptr<Storage> gone;  // released outside the lock
  std::lock_guard<std::mutex> lock(s_->mu);
  gone = std::move(s_->storage);
}

namespace {

// Copies buffer `s`'s bytes into `dst` (bytes() of them): on the simulation thread, after the buffer is ready and in
// its device's order, or at once for a buffer in host memory; `done` gets the outcome, on whichever thread did it.
void copy_out(const std::shared_ptr<detail::BufferState>& s, void* dst, std::function<void(Status)> done) {
  std::shared_ptr<Storage> st;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    st = s->storage;
  }
  if (!st) return done(invalid("to_host of a deleted buffer"));
  if (st->kind == MemoryKind::kHost) {
    const StatusOr<Done>& r = s->ready.await();
    if (r.ok() && st->bytes > 0) std::memcpy(dst, st->host_data(), st->bytes);
    return done(r.status());
  }
  std::shared_ptr<ClientCore> core = s->client.lock();
  if (!core) return done(shutting_down());
  const int device = s->device;
  bool posted = core->post([core_raw = core.get(), st, dst, ready = s->ready, device, done]() mutable {
    const StatusOr<Done>& r = ready.await();  // already done: its copy was queued before this
    Status result = r.status();
    if (r.ok()) {
      try {
        core_raw->chips[device]->read_hbm(st->addr, dst, st->bytes);
      } catch (const std::exception& e) {
        result = Status(StatusCode::kInternal, e.what());
      }
    }
    st.reset();  // let go before the caller wakes, so that a Delete() frees the memory at once
    done(result);
  }, device);
  if (!posted) done(shutting_down());
}

}  // namespace

Event Buffer::to_host(void* dst) const {
  if (!s_) return Event::ready_with(invalid("to_host of no buffer"));
  auto p = std::make_shared<Promise<Done>>();
  Event f(p->get_future().share());
  copy_out(s_, dst, [p](Status st) { st.ok() ? p->set_value(Done{}) : p->set_value(st); });
  return f;
}

Future<HostTensor> Buffer::to_host() const {
  if (!s_) return Future<HostTensor>::ready_with(invalid("to_host of no buffer"));
  auto t = std::make_shared<HostTensor>(HostTensor{s_->dtype, s_->dims, std::vector<uint8_t>(bytes())});
  auto p = std::make_shared<Promise<HostTensor>>();
  Future<HostTensor> f(p->get_future().share());
  copy_out(s_, t->data.data(), [p, t](Status st) { st.ok() ? p->set_value(std::move(*t)) : p->set_value(st); });
  return f;
}

// ---------------------------------------------------------------------------------------------------------------
// Client

namespace {
// Set by the first Client of the process (SystemC elaborates once per process; see Client::Create).
std::atomic<bool> g_client_made{false};
const char* const kSecondClient =
    "a Client was already made in this process, and SystemC elaborates chips once per process: make one Client "
    "and share it (another configuration needs another process)";
}  // namespace

StatusOr<std::unique_ptr<Client>> Client::Create(const sim::ChipConfig& cfg, int num_devices) {
  if (num_devices < 1) return invalid("a client needs at least one device, not " + std::to_string(num_devices));
  if (g_client_made.exchange(true)) return Status(StatusCode::kFailedPrecondition, kSecondClient);
  std::unique_ptr<Client> c(new Client());
  try {
    c->start(cfg, num_devices);
  } catch (const std::exception& e) {
    return Status(StatusCode::kInternal, e.what());
  }
  return c;
}

Client::Client(const sim::ChipConfig& cfg, int num_devices) {
  if (num_devices < 1) throw Error("a client needs at least one device, not " + std::to_string(num_devices));
  if (g_client_made.exchange(true)) throw Error(kSecondClient);
  start(cfg, num_devices);
}

void Client::start(const sim::ChipConfig& cfg, int num_devices) {
  core_ = std::make_shared<ClientCore>(cfg, num_devices);
  ClientCore& c = *core_;
  for (int d = 0; d < num_devices; ++d) {
    DeviceDescription dd;
    dd.id = d;
    dd.chip = cfg.chip.name;
    dd.attributes = {{"mxu_rows", cfg.mxu.rows},        {"mxu_cols", cfg.mxu.cols},
                     {"acc_rows", cfg.mxu.acc_rows},    {"clock_mhz", cfg.chip.clock_mhz},
                     {"hbm_bytes", double(cfg.hbm_bytes())}, {"hbm_bandwidth_gbs", cfg.hbm.bandwidth_gbs},
                     {"vmem_bytes", double(cfg.vmem_bytes())}};
    c.descriptions.push_back(dd);
    c.allocators.push_back(
        std::make_shared<HbmAllocator>("device " + std::to_string(d) + " HBM", cfg.hbm_bytes()));
  }
  std::promise<void> elaborated;
  c.thread = std::thread([&c, &elaborated] {
    try {
      for (int d = 0; d < c.num_devices; ++d) c.chips.push_back(std::make_unique<sim::Chip>(c.cfg));
      elaborated.set_value();
    } catch (...) {
      c.chips.clear();
      elaborated.set_exception(std::current_exception());
      return;
    }
    c.loop();
  });
  try {
    elaborated.get_future().get();
  } catch (...) {
    c.thread.join();
    throw;
  }
}

Client::~Client() {
  if (core_) core_->stop();
}

const sim::ChipConfig& Client::config() const { return core_->cfg; }
int Client::device_count() const { return core_->num_devices; }
const std::vector<DeviceDescription>& Client::devices() const { return core_->descriptions; }

std::vector<MemorySpace> Client::memory_spaces() const {
  std::vector<MemorySpace> out;
  for (int d = 0; d < core_->num_devices; ++d)
    out.push_back({MemoryKind::kHbm, d, core_->cfg.hbm_bytes(), "device " + std::to_string(d) + " hbm"});
  out.push_back({MemoryKind::kHost, -1, 0, "host"});
  return out;
}

AllocatorStats Client::memory_stats(int device) const {
  if (device < 0 || device >= core_->num_devices) return {};
  return core_->allocators[device]->stats();
}

CacheStats Client::cache_stats() const {
  std::lock_guard<std::mutex> lock(core_->cache_mu);
  return core_->cache;
}

StatusOr<Buffer> Client::buffer_from_host(const void* data, isa::DType dtype, const std::vector<int64_t>& dims,
                                          int device, HostSemantics semantics) {
  if (device < 0 || device >= core_->num_devices)
    return invalid("device " + std::to_string(device) + " does not exist (the client has " +
                   std::to_string(core_->num_devices) + ")");
  uint64_t elements = 1;
  for (int64_t d : dims) {
    if (d < 0) return invalid("buffer_from_host: negative dimension in " + shape_text(dims));
    elements *= static_cast<uint64_t>(d);
  }
  const uint64_t bytes = elements * isa::dtype_size(dtype);
  if (bytes && !data) return invalid("buffer_from_host: no data for " + std::to_string(bytes) + " bytes");
  auto st = std::make_shared<Storage>();
  st->bytes = bytes;
  if (semantics == HostSemantics::kZeroCopy) {
    st->kind = MemoryKind::kHost;
    st->external = static_cast<const uint8_t*>(data);
    return make_buffer(core_, device, dtype, dims, std::move(st), ready_event());
  }
  StatusOr<uint64_t> addr = core_->allocators[device]->allocate(
      bytes, std::string(isa::dtype_name(dtype)) + " " + shape_text(dims) + " from host");
  if (!addr.ok()) return addr.status();
  st->alloc = core_->allocators[device];
  st->addr = addr.value();
  auto staging = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(data),
                                                        static_cast<const uint8_t*>(data) + bytes);
  auto p = std::make_shared<Promise<Done>>();
  Event ready(p->get_future().share());
  bool posted = core_->post([core = core_.get(), p, addr = st->addr, staging, device] {
    try {
      core->chips[device]->write_hbm(addr, staging->data(), staging->size());
    } catch (const std::exception& e) {
      return p->set_value(Status(StatusCode::kInternal, e.what()));
    }
    p->set_value(Done{});
  }, device);
  if (!posted) return shutting_down();
  return make_buffer(core_, device, dtype, dims, std::move(st), std::move(ready));
}

StatusOr<Buffer> Client::buffer_from_host(const HostTensor& t, int device) {
  uint64_t want = 1;
  for (int64_t d : t.shape) want *= d < 0 ? 0 : static_cast<uint64_t>(d);
  if (t.data.size() != want * isa::dtype_size(t.dtype))
    return invalid("buffer_from_host: " + std::to_string(t.data.size()) + " bytes of data for " +
                   isa::dtype_name(t.dtype) + " " + shape_text(t.shape));
  return buffer_from_host(t.data.data(), t.dtype, t.shape, device, HostSemantics::kCopy);
}

StatusOr<Executable> ClientCore::load_program(isa::Program program) {
  Executable exe(std::move(program));
  std::lock_guard<std::mutex> lock(cache_mu);
  auto [it, inserted] = programs.emplace(exe.fingerprint(), exe);
  if (!inserted) ++cache.hits;
  return it->second;
}

// `extra`: precision, activation ranges and calibration outputs (its target and input_shapes are ignored).
StatusOr<Executable> ClientCore::compile_onnx(const ModelSource& src,
                                              const std::map<std::string, std::vector<int64_t>>& input_shapes,
                                              const compiler::Options& extra) {
  const std::string& path = src.path;
  std::string key;
  if (src.bytes) {  // by content, and by name (its stem names the program)
    const auto* b = reinterpret_cast<const uint8_t*>(src.bytes->data());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(fnv1a64(b, src.bytes->size())));
    key = std::string("bytes:") + hex + "|" + std::to_string(src.bytes->size()) + "|" +
          std::filesystem::path(path).stem().string();
  } else {  // by the file's canonical path (symlinks and "..", resolved), modification time and size
    std::error_code ec;
    std::filesystem::path canonical = std::filesystem::canonical(path, ec);
    if (ec) return Status(StatusCode::kNotFound, path + ": " + ec.message());
    auto mtime = std::filesystem::last_write_time(canonical, ec);
    uint64_t size = ec ? 0 : std::filesystem::file_size(canonical, ec);
    if (ec) return Status(StatusCode::kNotFound, path + ": " + ec.message());
    key = "file:" + canonical.string() + "|" + std::to_string(mtime.time_since_epoch().count()) + "|" +
          std::to_string(size);
  }
  for (const auto& [name, shape] : input_shapes) key += "|" + name + "=" + shape_text(shape);
  if (extra.precision == compiler::Precision::INT8) key += "|int8";
  if (extra.expose_calibration) key += "|calibration";
  if (extra.timing_only) key += "|timing-only";
  if (!extra.vmem_intermediates) key += "|hbm-intermediates";
  if (!extra.overlap_kernels) key += "|no-overlap";
  if (extra.group_pack > 0) key += "|group-pack=" + std::to_string(extra.group_pack);
  for (const auto& [name, absmax] : extra.activation_absmax) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%a", static_cast<double>(absmax));
    key += "|" + name + ":" + buf;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu);
    auto it = models.find(key);
    if (it != models.end()) {
      ++cache.hits;
      return it->second;
    }
  }
  compiler::Options opts = extra;
  opts.target.symbols.clear();
  for (const auto& [k, v] : sim::kernel_symbols(cfg)) opts.target.symbols[k] = v;
  opts.input_shapes = input_shapes;
  isa::Program program;
  try {
    program = src.bytes ? compiler::compile_onnx(*src.bytes, path, opts) : compiler::compile_onnx_file(path, opts);
  } catch (const std::exception& e) {
    return invalid(e.what());
  }
  StatusOr<Executable> exe = load_program(std::move(program));
  std::lock_guard<std::mutex> lock(cache_mu);
  ++cache.compilations;
  models.emplace(key, exe.value());
  return exe;
}

StatusOr<Executable> Client::load_program(isa::Program program) { return core_->load_program(std::move(program)); }

StatusOr<Executable> Client::deserialize_executable(const std::vector<uint8_t>& bytes) {
  StatusOr<Executable> e = Executable::deserialize(bytes);
  if (!e.ok()) return e.status();
  return load_program(e.value().program());
}

StatusOr<Executable> Client::compile_onnx(const std::string& path,
                                          const std::map<std::string, std::vector<int64_t>>& input_shapes) {
  return core_->compile_onnx(detail::ModelSource{path}, input_shapes);
}

StatusOr<Executable> Client::compile_onnx(const std::string& path, const CompileOptions& opts) {
  return compile(detail::ModelSource{path}, opts);
}

StatusOr<Executable> Client::compile_onnx_bytes(const std::string& bytes, const CompileOptions& opts,
                                                const std::string& name) {
  return compile(detail::ModelSource{name, &bytes}, opts);
}

StatusOr<Executable> Client::compile(const detail::ModelSource& src, const CompileOptions& opts) {
  const std::string& path = src.path;
  compiler::Options base;  // what every compile below shares
  base.vmem_intermediates = opts.vmem_intermediates;
  base.overlap_kernels = opts.overlap_kernels;
  base.group_pack = opts.group_pack;
  if (opts.timing_only) {  // no values, so no calibration run either (compiler::Options::timing_only)
    compiler::Options t = base;
    t.precision = opts.precision;
    t.timing_only = true;
    return core_->compile_onnx(src, opts.input_shapes, t);
  }
  if (opts.precision == compiler::Precision::BF16) return core_->compile_onnx(src, opts.input_shapes, base);
  if (opts.calibration.empty())
    return invalid(path + ": int8 needs calibration inputs (at least one set of model inputs)");
  compiler::Options calib = base;
  calib.expose_calibration = true;
  StatusOr<Executable> probe = core_->compile_onnx(src, opts.input_shapes, calib);
  if (!probe.ok()) return probe.status();
  const std::string prefix = compiler::kCalibrationPrefix;
  compiler::Options q = base;
  q.precision = compiler::Precision::INT8;
  try {
    check_fits(probe.value());
    for (const auto& set : opts.calibration) {
      ExecuteResult r = execute(probe.value(), set);
      for (const auto& [name, t] : r.outputs) {
        if (name.rfind(prefix, 0) != 0) continue;
        float& m = q.activation_absmax[name.substr(prefix.size())];
        const auto* f = reinterpret_cast<const float*>(t.data.data());
        for (int64_t i = 0; i < t.elements(); ++i) m = std::max(m, std::fabs(f[i]));
      }
    }
  } catch (const std::exception& e) {
    return invalid(path + ": calibration run: " + e.what());
  }
  return core_->compile_onnx(src, opts.input_shapes, q);
}

Executable Client::compile_onnx_file(const std::string& path, const CompileOptions& opts) {
  if (opts.precision == compiler::Precision::BF16 && !opts.timing_only && opts.vmem_intermediates &&
      opts.overlap_kernels && opts.group_pack == 0)
    return compile_onnx_file(path, opts.input_shapes);
  StatusOr<Executable> e = compile_onnx(path, opts);
  e.status().throw_if_error();
  return e.value();
}

Status Client::fits(const Executable& exe) const {
  const isa::Program& p = exe.program();
  uint64_t hbm = config().hbm_bytes();
  if (p.hbm_footprint() > hbm)
    return invalid("program '" + p.name + "' needs " + std::to_string(p.hbm_footprint()) +
                   " bytes of HBM, the chip has " + std::to_string(hbm));
  uint64_t vmem = config().vmem_bytes();
  if (p.footprint(isa::MemSpace::Vmem) > vmem)
    return invalid("program '" + p.name + "' keeps tensors in VMEM up to byte " +
                   std::to_string(p.footprint(isa::MemSpace::Vmem)) + ", the chip has " + std::to_string(vmem));
  return Status::Ok();
}

StatusOr<CostAnalysis> Client::cost_analysis(const Executable& exe) {
  {
    std::lock_guard<std::mutex> lock(core_->cache_mu);
    auto it = core_->costs.find(exe.fingerprint());
    if (it != core_->costs.end()) return it->second;
  }
  Status f = fits(exe);
  if (!f.ok()) return f;
  auto p = std::make_shared<Promise<sim::RunResult>>();
  auto fut = p->get_future();
  bool posted = core_->post([core = core_.get(), p, exe] {
    sim::Chip& chip = *core->chips[0];
    try {
      chip.start(exe.program(), sim::RunOptions{false, false, 0});
      sim::Chip::run_started({&chip});
      p->set_value(chip.finish());
    } catch (const std::exception& e) {
      p->set_value(Status(StatusCode::kAborted, e.what()));
    }
  }, 0);  // device 0 only; it runs before (not with) the executions of a batch
  if (!posted) return shutting_down();
  StatusOr<sim::RunResult> r = fut.get();
  if (!r.ok()) return r.status();
  CostAnalysis c;
  const sim::RunStats& s = r.value().stats;
  c.macs = s.mxu_macs;
  c.flops = 2 * s.mxu_macs;
  c.cycles = s.cycles;
  c.seconds = s.seconds;
  c.hbm_bytes_read = s.hbm_bytes_read;
  c.hbm_bytes_written = s.hbm_bytes_written;
  for (const auto& t : exe.program().tensors)
    (t.kind == isa::TensorKind::Input ? c.input_bytes
                                      : t.kind == isa::TensorKind::Output ? c.output_bytes : c.const_bytes) += t.bytes();
  std::lock_guard<std::mutex> lock(core_->cache_mu);
  core_->costs.emplace(exe.fingerprint(), c);
  return c;
}

Future<ExecuteOutput> Client::execute_async(const Executable& exe, const ExecuteArgs& args,
                                            const ExecuteOptions& opts) {
  return execute_async(exe, std::vector<ExecuteArgs>{args}, opts).front();
}

namespace {

// Checks one device's arguments and takes what the execution needs from its buffers (donated ones are deleted).
Status check_args(const ClientCore& core, const Executable& exe, const ExecuteArgs& a, Item& item) {
  const isa::Program& p = exe.program();
  if (a.device < 0 || a.device >= core.num_devices)
    return invalid("device " + std::to_string(a.device) + " does not exist (the client has " +
                   std::to_string(core.num_devices) + ")");
  item.device = a.device;
  for (const auto& [name, b] : a.inputs) {
    const isa::TensorDecl* d = p.find(name);
    if (!d || d->kind != isa::TensorKind::Input) {
      std::string known;
      for (const auto* i : exe.inputs()) known += (known.empty() ? "" : ", ") + i->name;
      return invalid("program '" + p.name + "' has no input '" + name + "' (its inputs: " + known + ")");
    }
  }
  for (const auto& name : a.donate)
    if (!a.inputs.count(name)) return invalid("donated input '" + name + "' is not among the arguments");
  for (const auto* d : exe.inputs()) {
    auto it = a.inputs.find(d->name);
    if (it == a.inputs.end()) return invalid("missing input '" + d->name + "' (" + describe(*d) + ")");
    const Buffer& b = it->second;
    if (!b.valid()) return invalid("input '" + d->name + "': no buffer");
    if (b.device() != a.device)
      return invalid("input '" + d->name + "': the buffer is on device " + std::to_string(b.device()) +
                     ", the execution on device " + std::to_string(a.device));
    if (b.dtype() != d->dtype || b.dims() != d->shape)
      return invalid("input '" + d->name + "': expected " + isa::dtype_name(d->dtype) + " " + shape_text(d->shape) +
                     ", got " + isa::dtype_name(b.dtype()) + " " + shape_text(b.dims()));
  }
  // Everything checked: take the storage (and delete the donated buffers).
  for (const auto* d : exe.inputs()) {
    const Buffer& b = a.inputs.at(d->name);
    BufferState& s = *ClientCore::state_of(b);
    std::shared_ptr<Storage> st;
    {
      std::lock_guard<std::mutex> lock(s.mu);
      st = s.storage;
      if (st && a.donate.count(d->name)) s.storage.reset();
    }
    if (!st) return invalid("input '" + d->name + "': the buffer was deleted");
    item.inputs.emplace_back(d, st);
    item.input_ready.push_back(s.ready);
    if (a.donate.count(d->name)) item.donated.push_back(st);
  }
  return Status::Ok();
}

// One execute_async call on the simulation thread (detail::Execution): its devices' Items.
struct Run : detail::Execution {
  Run(Executable e, ExecuteOptions o) : exe(std::move(e)), opts(o) {}
  ClientCore* core = nullptr;
  std::weak_ptr<ClientCore> weak;  // for the output buffers
  Executable exe;
  ExecuteOptions opts;
  std::vector<Item> items;

  void start(std::vector<sim::Chip*>& started) override {
    const isa::Program& p = exe.program();
    const uint64_t footprint = p.hbm_footprint();
    for (Item& it : items) {
      if (!it.status.ok()) continue;
      sim::Chip& chip = *core->chips[it.device];
      HbmAllocator& alloc = *core->allocators[it.device];
      auto fail = [&](Status s) { it.status = std::move(s); };
      for (size_t i = 0; i < it.inputs.size() && it.status.ok(); ++i) {
        const StatusOr<Done>& r = it.input_ready[i].await();  // done: queued before this execution, same device
        if (!r.ok()) fail(Status(r.status().code(), "input '" + it.inputs[i].first->name + "': " + r.status().message()));
      }
      if (it.status.ok() && footprint) {
        Status s = alloc.reserve(0, footprint, "program '" + p.name + "' (its declared tensors)");
        if (s.ok()) it.reserved = true; else fail(s);
      }
      try {
        if (it.status.ok() && opts.functional) {
          std::vector<uint8_t> tmp;
          for (const auto& [d, st] : it.inputs) {
            const uint8_t* src = nullptr;
            if (st->kind == MemoryKind::kHost) {
              src = st->host_data();
            } else {
              tmp.resize(st->bytes);
              chip.read_hbm(st->addr, tmp.data(), st->bytes);
              src = tmp.data();
            }
            write_tensor(chip, *d, src);
          }
          for (const auto& t : p.tensors)
            if (t.kind == isa::TensorKind::Const) chip.write_hbm(t.addr, p.const_data.data() + t.const_offset, t.bytes());
          for (const auto* d : exe.outputs()) {
            if (!it.status.ok()) break;
            auto st = std::make_shared<Storage>();
            st->bytes = d->bytes();
            if (opts.output_memory == MemoryKind::kHost) {
              st->kind = MemoryKind::kHost;
              st->owned.resize(st->bytes);
            } else {
              auto reuse = std::find_if(it.donated.begin(), it.donated.end(), [&](const auto& s) {
                return s && s->kind == MemoryKind::kHbm && s->bytes == d->bytes();
              });
              if (reuse != it.donated.end()) {
                st = std::move(*reuse);
              } else {
                StatusOr<uint64_t> a = alloc.allocate(d->bytes(), "output '" + d->name + "' of '" + p.name + "'");
                if (!a.ok()) {
                  fail(a.status());
                  break;
                }
                st->alloc = core->allocators[it.device];
                st->addr = a.value();
              }
            }
            it.outputs.emplace_back(d, std::move(st));
          }
        }
        if (it.status.ok()) {
          chip.start(p, sim::RunOptions{opts.functional, opts.trace, opts.max_cycles, opts.max_trace_events});
          it.started = true;
          started.push_back(&chip);
        }
      } catch (const std::exception& e) {
        fail(Status(StatusCode::kAborted, e.what()));
      }
    }
  }

  void finish(const Status& sim_error) override {
    std::shared_ptr<ClientCore> owner = weak.lock();
    std::vector<std::pair<Item*, ExecuteOutput>> done;
    for (Item& it : items) {
      if (it.started) {
        sim::Chip& chip = *core->chips[it.device];
        ExecuteOutput out;
        try {
          out.run = chip.finish();
          if (!sim_error.ok()) it.status = sim_error;
          for (const auto& [d, st] : it.outputs) {
            if (!it.status.ok()) break;
            if (st->kind == MemoryKind::kHost) {
              read_tensor(chip, *d, st->owned.data());
            } else {
              std::vector<uint8_t> tmp(st->bytes);
              read_tensor(chip, *d, tmp.data());
              chip.write_hbm(st->addr, tmp.data(), tmp.size());
            }
            out.outputs.emplace(d->name, make_buffer(owner, it.device, d->dtype, d->shape, st, ready_event()));
          }
        } catch (const std::exception& e) {
          it.status = Status(StatusCode::kAborted, e.what());
        }
        if (it.status.ok()) done.emplace_back(&it, std::move(out));
      }
      // Everything the execution held goes before its caller wakes up.
      if (it.reserved) core->allocators[it.device]->free(0);
      it.reserved = it.started = false;
      it.inputs.clear();
      it.input_ready.clear();
      it.donated.clear();
      it.outputs.clear();
      if (!it.status.ok()) it.settle(it.status);
    }
    for (auto& [it, out] : done) it->settle(std::move(out));
  }
};

}  // namespace

std::vector<Future<ExecuteOutput>> Client::execute_async(const Executable& exe, const std::vector<ExecuteArgs>& args,
                                                         const ExecuteOptions& opts) {
  auto run = std::make_shared<Run>(exe, opts);
  run->items.resize(args.size());
  std::vector<Future<ExecuteOutput>> futures;
  for (Item& it : run->items) futures.emplace_back(it.promise.get_future().share());
  Status common = fits(exe);
  if (common.ok() && opts.functional && exe.program().timing_only)
    common = invalid("program '" + exe.program().name +
                     "' was compiled timing-only (its weights have no values): it runs timing-only only");
  std::set<int> seen;
  for (const ExecuteArgs& a : args)
    if (common.ok() && !seen.insert(a.device).second)
      common = invalid("device " + std::to_string(a.device) + " is given twice in one execution");
  for (size_t i = 0; i < args.size(); ++i) {
    Item& it = run->items[i];
    it.status = common.ok() ? check_args(*core_, exe, args[i], it) : common;
    if (!it.status.ok()) {
      it.settle(it.status);
      it.inputs.clear();
      it.donated.clear();
    } else {
      run->devices.push_back(it.device);
    }
  }
  if (run->devices.empty()) return futures;
  run->core = core_.get();
  run->weak = core_;
  if (!core_->post(run))
    for (Item& it : run->items)
      if (it.status.ok()) {
        it.settle(shutting_down());
        it.inputs.clear();
        it.donated.clear();
      }
  return futures;
}

// ---------------------------------------------------------------------------------------------------------------
// The convenience layer.

Executable Client::assemble_file(const std::string& path, const std::map<std::string, int64_t>& defines) const {
  isa::AsmOptions opts;
  for (const auto& [k, v] : sim::kernel_symbols(config())) opts.defines[k] = v;
  for (const auto& [k, v] : defines) opts.defines[k] = v;
  opts.include = kernels::include_resolver();
  return Executable(isa::assemble_file(path, opts));
}

Executable Client::compile_onnx_file(const std::string& path,
                                     const std::map<std::string, std::vector<int64_t>>& input_shapes) const {
  // Compilation does not touch the chips; the cache is the client core's, shared with compile_onnx.
  if (!std::filesystem::exists(path)) {  // the compiler's own message for a missing file
    compiler::Options opts;
    for (const auto& [k, v] : sim::kernel_symbols(config())) opts.target.symbols[k] = v;
    opts.input_shapes = input_shapes;
    return Executable(compiler::compile_onnx_file(path, opts));
  }
  return core_->compile_onnx(detail::ModelSource{path}, input_shapes).value();
}

Executable Client::load_file(const std::string& path, const std::map<std::string, int64_t>& defines,
                             const std::map<std::string, std::vector<int64_t>>& input_shapes) const {
  std::string ext = std::filesystem::path(path).extension().string();
  if (ext == ".s" || ext == ".asm") return assemble_file(path, defines);
  if (ext == ".onnx") return compile_onnx_file(path, input_shapes);
  return Executable(isa::load_program(path));
}

void Client::check_fits(const Executable& exe) const { fits(exe).throw_if_error(); }

ExecuteResult Client::execute(const Executable& exe, const std::map<std::string, HostTensor>& inputs,
                              const ExecuteOptions& opts) {
  const isa::Program& p = exe.program();
  check_fits(exe);
  for (const auto& [name, t] : inputs) {
    const isa::TensorDecl* d = p.find(name);
    if (!d || d->kind != isa::TensorKind::Input) {
      std::string known;
      for (const auto* i : exe.inputs()) known += (known.empty() ? "" : ", ") + i->name;
      throw Error("program '" + p.name + "' has no input '" + name + "' (its inputs: " + known + ")");
    }
  }
  ExecuteArgs args;
  std::vector<std::vector<uint8_t>> rounded(exe.inputs().size());  // must outlive the zero-copy buffers
  size_t i = 0;
  for (const auto* d : exe.inputs()) {
    auto it = inputs.find(d->name);
    if (it == inputs.end()) throw Error("missing input '" + d->name + "' (" + describe(*d) + ")");
    const std::vector<uint8_t>& bytes = input_bytes(*d, it->second, rounded[i++]);
    args.inputs[d->name] =
        buffer_from_host(bytes.data(), d->dtype, d->shape, 0, HostSemantics::kZeroCopy).value();
  }
  ExecuteOptions o = opts;
  o.output_memory = MemoryKind::kHost;  // no HBM beyond the program's own
  ExecuteOutput out = execute_async(exe, args, o).await().value();
  ExecuteResult r;
  r.run = std::move(out.run);
  for (auto& [name, b] : out.outputs) r.outputs.emplace(name, b.to_host().await().value());
  return r;
}

HostTensor random_tensor(const isa::TensorDecl& d, uint64_t seed) {
  HostTensor t{d.dtype, d.shape, std::vector<uint8_t>(d.bytes())};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> small(-128, 127);
  std::uniform_int_distribution<int32_t> index(0, 15);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (int64_t i = 0; i < t.elements(); ++i) {
    switch (d.dtype) {
      case isa::DType::I8: t.data[i] = static_cast<uint8_t>(static_cast<int8_t>(small(rng))); break;
      case isa::DType::I32: {  // usually indices (token ids): non-negative, valid for any table of 16 rows
        int32_t v = index(rng);
        std::memcpy(t.data.data() + 4 * i, &v, 4);
        break;
      }
      case isa::DType::BF16: {
        uint16_t h = isa::bf16_from_f32(unit(rng));
        std::memcpy(t.data.data() + 2 * i, &h, 2);
        break;
      }
      case isa::DType::F32: {
        float f = unit(rng);
        std::memcpy(t.data.data() + 4 * i, &f, 4);
        break;
      }
      case isa::DType::F8E4M3: t.data[i] = isa::f8e4m3_from_f32(unit(rng)); break;
    }
  }
  return t;
}

}  // namespace tpusim::runtime
