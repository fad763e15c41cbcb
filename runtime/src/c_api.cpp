// The C API (c_api.h) over runtime.h's objects: each handle wraps one C++ object, each call checks its arguments
// struct, runs the C++ call and turns a non-ok Status (or an exception of the convenience layer) into a
// TpusimError. No exception leaves this file.
#include "tpusim/runtime/c_api.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tpusim/runtime/runtime.h"

using tpusim::isa::DType;
using tpusim::isa::TensorDecl;
namespace rt = tpusim::runtime;
using rt::Status;
using rt::StatusCode;

static_assert(int(TPUSIM_INVALID_ARGUMENT) == int(StatusCode::kInvalidArgument) &&
              int(TPUSIM_NOT_FOUND) == int(StatusCode::kNotFound) &&
              int(TPUSIM_OUT_OF_MEMORY) == int(StatusCode::kOutOfMemory) &&
              int(TPUSIM_FAILED_PRECONDITION) == int(StatusCode::kFailedPrecondition) &&
              int(TPUSIM_ABORTED) == int(StatusCode::kAborted) && int(TPUSIM_INTERNAL) == int(StatusCode::kInternal));
static_assert(int(TPUSIM_DTYPE_I8) == int(DType::I8) && int(TPUSIM_DTYPE_I32) == int(DType::I32) &&
              int(TPUSIM_DTYPE_BF16) == int(DType::BF16) && int(TPUSIM_DTYPE_F32) == int(DType::F32) &&
              int(TPUSIM_DTYPE_F8E4M3) == int(DType::F8E4M3) && tpusim::isa::kNumDTypes == 5);

// --- The handles.

struct TpusimError {
  TpusimErrorCode code;
  std::string message;
};

struct TpusimClient {
  std::unique_ptr<rt::Client> client;
  std::vector<std::string> descriptions;  // DeviceDescription::to_string() of each device
  std::vector<rt::MemorySpace> spaces;    // Client::memory_spaces()
};

struct TpusimBuffer {
  rt::Buffer buffer;
};

struct TpusimExecutable {
  explicit TpusimExecutable(rt::Executable e) : exe(std::move(e)), inputs(exe.inputs()), outputs(exe.outputs()) {}
  rt::Executable exe;
  std::vector<const TensorDecl*> inputs, outputs;  // into exe's program, which lives as long as exe
};

// Asynchronous work: `wait` blocks until it is done (and finishes it on the caller's side), once.
struct TpusimEvent {
  TpusimEvent() = default;
  template <class T>
  explicit TpusimEvent(const rt::Future<T>& f)  // ready when f is; its error, if any
      : ready([f] { return f.ready(); }), wait([f]() -> Status { return f.await().status(); }) {}
  std::function<bool()> ready;
  std::function<Status()> wait;
  std::mutex mu;
  bool done = false;
  Status result;
  Status await() {
    std::lock_guard<std::mutex> lock(mu);
    if (!done) {
      result = wait();
      done = true;
    }
    return result;
  }
};

struct TpusimExecution {
  rt::Future<rt::ExecuteOutput> future;
  std::vector<std::string> output_names;  // the executable's outputs, in declaration order
  tpusim::sim::ChipConfig cfg;            // for the stats JSON (the client may be gone by then)
  std::once_flag once;
  Status status;
  std::vector<rt::Buffer> outputs;  // by output_names (empty in timing-only mode)
  uint64_t cycles = 0;
  double seconds = 0;
  std::string stats_json;
  const Status& resolve() {
    std::call_once(once, [&] {
      const auto& r = future.await();
      if (!r.ok()) {
        status = r.status();
        return;
      }
      const rt::ExecuteOutput& out = r.value();
      for (const auto& name : output_names) {
        auto it = out.outputs.find(name);
        if (it != out.outputs.end()) outputs.push_back(it->second);
      }
      if (outputs.size() != out.outputs.size()) outputs.clear();  // timing-only, or a mismatch (never)
      cycles = out.run.stats.cycles;
      seconds = out.run.stats.seconds;
      stats_json = out.run.stats.to_json(cfg);
    });
    return status;
  }
};

// --- Helpers.

namespace {

// When even an error cannot be allocated: a static one, which tpusim_error_destroy leaves alone.
TpusimError no_memory_error{TPUSIM_OUT_OF_MEMORY, "host memory exhausted"};

TpusimError* make_error(TpusimErrorCode code, std::string message) noexcept {
  TpusimError* e = new (std::nothrow) TpusimError{code, std::move(message)};
  return e ? e : &no_memory_error;
}
TpusimError* from_status(const Status& s) {
  return s.ok() ? nullptr : make_error(static_cast<TpusimErrorCode>(s.code()), s.message());
}
TpusimError* invalid(const char* fn, const std::string& what) {
  return make_error(TPUSIM_INVALID_ARGUMENT, std::string(fn) + ": " + what);
}

// Checks the arguments struct: non-NULL, and struct_size covering at least version 1's fields.
template <class Args>
TpusimError* check_args(const char* fn, const Args* args, size_t min_size) {
  if (!args) return invalid(fn, "args is NULL");
  if (args->struct_size < min_size)
    return invalid(fn, "struct_size " + std::to_string(args->struct_size) + " is less than " +
                           std::to_string(min_size) + " (set it to the struct's _STRUCT_SIZE constant)");
  return nullptr;
}
TpusimError* check_handle(const char* fn, const void* handle, const char* field) {
  return handle ? nullptr : invalid(fn, std::string(field) + " is NULL");
}

// Runs `body` (which returns a TpusimError*), turning an exception into an error: `thrown` for the errors the
// convenience layer throws for a caller's mistake, TPUSIM_OUT_OF_MEMORY for host memory exhaustion.
template <class F>
TpusimError* guarded(F&& body, TpusimErrorCode thrown = TPUSIM_INTERNAL) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return make_error(TPUSIM_OUT_OF_MEMORY, "host memory exhausted");
  } catch (const std::exception& e) {
    return make_error(thrown, e.what());
  } catch (...) {
    return make_error(TPUSIM_INTERNAL, "unknown exception");
  }
}

#define TPUSIM_CHECK(expr)                   \
  do {                                       \
    if (TpusimError* e_ = (expr)) return e_; \
  } while (0)
#define TPUSIM_CHECK_ARGS(fn, args, type) TPUSIM_CHECK(check_args(fn, args, type##_STRUCT_SIZE))
// For a struct that grew: callers built against version 1 set a struct_size up to v1_last, read the rest only
// where HAS_FIELD says struct_size covers it.
#define TPUSIM_CHECK_ARGS_V1(fn, args, type, v1_last) TPUSIM_CHECK(check_args(fn, args, TPUSIM_STRUCT_SIZE(type, v1_last)))
#define HAS_FIELD(args, field) \
  ((args)->struct_size >= offsetof(std::remove_pointer_t<decltype(args)>, field) + sizeof((args)->field))

// The dtype field as the int a C caller stored in it: in C++, reading an enum object that holds a value outside
// its enumerators' range is undefined behaviour, so the bytes are read as an int.
int raw_dtype(const TpusimDType& t) {
  static_assert(sizeof(TpusimDType) == sizeof(int));
  int v;
  std::memcpy(&v, &t, sizeof v);
  return v;
}
bool valid_dtype(const TpusimDType& t) { return raw_dtype(t) >= 0 && raw_dtype(t) < tpusim::isa::kNumDTypes; }

std::vector<int64_t> dims_of(const int64_t* dims, size_t n) {
  return n ? std::vector<int64_t>(dims, dims + n) : std::vector<int64_t>{};
}

// The names in `names` (n of them, none NULL), or an error naming `field`.
TpusimError* names_of(const char* fn, const char* field, const char* const* names, size_t n, std::set<std::string>& out) {
  if (n && !names) return invalid(fn, std::string(field) + " is NULL");
  for (size_t i = 0; i < n; ++i) {
    if (!names[i]) return invalid(fn, std::string(field) + "[" + std::to_string(i) + "] is NULL");
    out.insert(names[i]);
  }
  return nullptr;
}

// One device's arguments: input_names[i] is buffers[i].
TpusimError* device_args(const char* fn, int32_t device, const char* const* input_names, TpusimBuffer* const* buffers,
                         size_t num_inputs, const std::set<std::string>& donate, rt::ExecuteArgs& ea) {
  if (num_inputs && (!input_names || !buffers)) return invalid(fn, "input_names or input buffers is NULL");
  ea.device = device;
  for (size_t i = 0; i < num_inputs; ++i) {
    if (!input_names[i] || !buffers[i]) return invalid(fn, "input " + std::to_string(i) + " has a NULL name or buffer");
    if (!ea.inputs.emplace(input_names[i], buffers[i]->buffer).second)
      return invalid(fn, std::string("input '") + input_names[i] + "' given twice");
  }
  ea.donate = donate;
  return nullptr;
}

// The handles of one device's execution (the future of execute_async).
void make_execution(const TpusimExecutable& exe, const rt::Client& client, rt::Future<rt::ExecuteOutput> future,
                    std::unique_ptr<TpusimExecution>& x, std::unique_ptr<TpusimEvent>& e) {
  x = std::make_unique<TpusimExecution>();
  for (const auto* d : exe.outputs) x->output_names.push_back(d->name);
  x->cfg = client.config();
  x->future = std::move(future);
  e = std::make_unique<TpusimEvent>(x->future);
}

}  // namespace

// --- Errors.

extern "C" {

TpusimErrorCode tpusim_error_code(const TpusimError* error) { return error ? error->code : TPUSIM_OK; }
const char* tpusim_error_message(const TpusimError* error) { return error ? error->message.c_str() : ""; }
void tpusim_error_destroy(TpusimError* error) {
  if (error != &no_memory_error) delete error;
}
const char* tpusim_error_code_name(TpusimErrorCode code) {
  return code == TPUSIM_OK ? "OK" : rt::status_code_name(static_cast<StatusCode>(code));
}

// --- Client.

TpusimError* tpusim_client_create(TpusimClientCreateArgs* args) {
  static const char* fn = "tpusim_client_create";
  TPUSIM_CHECK_ARGS(fn, args, TpusimClientCreateArgs);
  if (args->num_devices < 0) return invalid(fn, "num_devices " + std::to_string(args->num_devices) + " < 0");
  if (args->num_overrides && !args->overrides) return invalid(fn, "overrides is NULL");
  return guarded([&]() -> TpusimError* {
    std::string source = args->config ? args->config : tpusim::sim::default_preset();
    std::vector<std::string> sets;
    for (size_t i = 0; i < args->num_overrides; ++i) {
      if (!args->overrides[i]) return invalid(fn, "overrides[" + std::to_string(i) + "] is NULL");
      sets.emplace_back(args->overrides[i]);
    }
    tpusim::sim::ChipConfig cfg;
    try {
      cfg = tpusim::sim::load_config(source, sets);
    } catch (const std::exception& e) {
      bool known = std::filesystem::exists(source);
      for (const auto& p : tpusim::sim::preset_names()) known = known || p == source;
      return make_error(known ? TPUSIM_INVALID_ARGUMENT : TPUSIM_NOT_FOUND, e.what());
    }
    auto h = std::make_unique<TpusimClient>();
    auto made = rt::Client::Create(cfg, args->num_devices ? args->num_devices : 1);
    if (!made.ok()) return from_status(made.status());
    h->client = std::move(made).value();
    for (const auto& d : h->client->devices()) h->descriptions.push_back(d.to_string());
    h->spaces = h->client->memory_spaces();
    args->client = h.release();
    return nullptr;
  }, TPUSIM_INVALID_ARGUMENT);
}

TpusimError* tpusim_client_destroy(TpusimClientDestroyArgs* args) {
  TPUSIM_CHECK_ARGS("tpusim_client_destroy", args, TpusimClientDestroyArgs);
  return guarded([&]() -> TpusimError* {
    delete args->client;
    return nullptr;
  });
}

TpusimError* tpusim_client_device_count(TpusimClientDeviceCountArgs* args) {
  static const char* fn = "tpusim_client_device_count";
  TPUSIM_CHECK_ARGS(fn, args, TpusimClientDeviceCountArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  args->num_devices = args->client->client->device_count();
  return nullptr;
}

TpusimError* tpusim_client_device_description(TpusimClientDeviceDescriptionArgs* args) {
  static const char* fn = "tpusim_client_device_description";
  TPUSIM_CHECK_ARGS(fn, args, TpusimClientDeviceDescriptionArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  const TpusimClient& c = *args->client;
  if (args->device < 0 || size_t(args->device) >= c.descriptions.size())
    return invalid(fn, "device " + std::to_string(args->device) + " does not exist (the client has " +
                           std::to_string(c.descriptions.size()) + ")");
  args->description = c.descriptions[args->device].c_str();
  args->chip = c.client->config().chip.name.c_str();
  return nullptr;
}

TpusimError* tpusim_client_stats(TpusimClientStatsArgs* args) {
  static const char* fn = "tpusim_client_stats";
  TPUSIM_CHECK_ARGS(fn, args, TpusimClientStatsArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  const rt::Client& c = *args->client->client;
  if (args->device < 0 || args->device >= c.device_count())
    return invalid(fn, "device " + std::to_string(args->device) + " does not exist (the client has " +
                           std::to_string(c.device_count()) + ")");
  rt::CacheStats cache = c.cache_stats();
  rt::AllocatorStats mem = c.memory_stats(args->device);
  args->compilations = cache.compilations;
  args->cache_hits = cache.hits;
  args->live_buffers = mem.live_count;
  args->live_bytes = mem.live_bytes;
  args->peak_bytes = mem.peak_bytes;
  args->total_allocations = mem.total_allocations;
  return nullptr;
}

TpusimError* tpusim_client_memory_space(TpusimClientMemorySpaceArgs* args) {
  static const char* fn = "tpusim_client_memory_space";
  TPUSIM_CHECK_ARGS(fn, args, TpusimClientMemorySpaceArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  const auto& spaces = args->client->spaces;
  args->num_memory_spaces = spaces.size();
  if (args->index >= spaces.size())
    return invalid(fn, "memory space " + std::to_string(args->index) + " does not exist (the client has " +
                           std::to_string(spaces.size()) + ")");
  const rt::MemorySpace& m = spaces[args->index];
  args->name = m.name.c_str();
  args->device = m.device;
  args->capacity = m.capacity;
  args->is_host = m.kind == rt::MemoryKind::kHost;
  return nullptr;
}

// --- Buffers.

TpusimError* tpusim_buffer_from_host(TpusimBufferFromHostArgs* args) {
  static const char* fn = "tpusim_buffer_from_host";
  TPUSIM_CHECK_ARGS_V1(fn, args, TpusimBufferFromHostArgs, buffer);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  TPUSIM_CHECK(check_handle(fn, args->data, "data"));
  if (args->num_dims && !args->dims) return invalid(fn, "dims is NULL");
  if (!valid_dtype(args->dtype)) return invalid(fn, "dtype " + std::to_string(raw_dtype(args->dtype)) + " is not a TpusimDType");
  return guarded([&]() -> TpusimError* {
    bool zero_copy = HAS_FIELD(args, zero_copy) && args->zero_copy;
    auto b = args->client->client->buffer_from_host(args->data, static_cast<DType>(raw_dtype(args->dtype)),
                                                    dims_of(args->dims, args->num_dims), args->device,
                                                    zero_copy ? rt::HostSemantics::kZeroCopy : rt::HostSemantics::kCopy);
    if (!b.ok()) return from_status(b.status());
    args->buffer = new TpusimBuffer{std::move(b).value()};
    return nullptr;
  });
}

TpusimError* tpusim_buffer_to_host(TpusimBufferToHostArgs* args) {
  static const char* fn = "tpusim_buffer_to_host";
  TPUSIM_CHECK_ARGS(fn, args, TpusimBufferToHostArgs);
  TPUSIM_CHECK(check_handle(fn, args->buffer, "buffer"));
  const rt::Buffer& b = args->buffer->buffer;
  if (!args->dst) {
    args->dst_size = b.bytes();
    return nullptr;
  }
  if (args->dst_size < b.bytes())
    return invalid(fn, "dst_size " + std::to_string(args->dst_size) + " is less than the buffer's " +
                           std::to_string(b.bytes()) + " bytes");
  return guarded([&]() -> TpusimError* {
    // Ready once dst is filled (issue 14: it used to be filled inside tpusim_event_await).
    args->event = new TpusimEvent(b.to_host(args->dst));
    return nullptr;
  });
}

TpusimError* tpusim_buffer_dims(TpusimBufferDimsArgs* args) {
  static const char* fn = "tpusim_buffer_dims";
  TPUSIM_CHECK_ARGS(fn, args, TpusimBufferDimsArgs);
  TPUSIM_CHECK(check_handle(fn, args->buffer, "buffer"));
  const auto& dims = args->buffer->buffer.dims();
  args->dims = dims.data();
  args->num_dims = dims.size();
  return nullptr;
}

TpusimError* tpusim_buffer_info(TpusimBufferInfoArgs* args) {
  static const char* fn = "tpusim_buffer_info";
  TPUSIM_CHECK_ARGS_V1(fn, args, TpusimBufferInfoArgs, is_deleted);
  TPUSIM_CHECK(check_handle(fn, args->buffer, "buffer"));
  const rt::Buffer& b = args->buffer->buffer;
  args->dtype = static_cast<TpusimDType>(b.dtype());
  args->device = b.device();
  args->size_in_bytes = b.bytes();
  args->is_deleted = b.deleted();
  if (HAS_FIELD(args, is_host_memory)) args->is_host_memory = b.memory() == rt::MemoryKind::kHost;
  return nullptr;
}

TpusimError* tpusim_buffer_ready_event(TpusimBufferReadyEventArgs* args) {
  static const char* fn = "tpusim_buffer_ready_event";
  TPUSIM_CHECK_ARGS(fn, args, TpusimBufferReadyEventArgs);
  TPUSIM_CHECK(check_handle(fn, args->buffer, "buffer"));
  return guarded([&]() -> TpusimError* {
    args->event = new TpusimEvent(args->buffer->buffer.ready());
    return nullptr;
  });
}

TpusimError* tpusim_buffer_delete(TpusimBufferDeleteArgs* args) {
  static const char* fn = "tpusim_buffer_delete";
  TPUSIM_CHECK_ARGS(fn, args, TpusimBufferDeleteArgs);
  TPUSIM_CHECK(check_handle(fn, args->buffer, "buffer"));
  return guarded([&]() -> TpusimError* {
    args->buffer->buffer.Delete();
    return nullptr;
  });
}

TpusimError* tpusim_buffer_destroy(TpusimBufferDestroyArgs* args) {
  TPUSIM_CHECK_ARGS("tpusim_buffer_destroy", args, TpusimBufferDestroyArgs);
  return guarded([&]() -> TpusimError* {
    delete args->buffer;
    return nullptr;
  });
}

// --- Executables.

TpusimError* tpusim_executable_compile_onnx(TpusimExecutableCompileOnnxArgs* args) {
  static const char* fn = "tpusim_executable_compile_onnx";
  TPUSIM_CHECK_ARGS_V1(fn, args, TpusimExecutableCompileOnnxArgs, executable);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  const bool v2 = HAS_FIELD(args, calibration_set_size);
  const void* bytes = v2 ? args->bytes : nullptr;
  if (!bytes) TPUSIM_CHECK(check_handle(fn, args->path, "path"));
  if (args->num_shapes && (!args->shape_names || !args->shape_dims || !args->shape_num_dims))
    return invalid(fn, "shape_names, shape_dims or shape_num_dims is NULL");
  return guarded([&]() -> TpusimError* {
    rt::CompileOptions opts;
    for (size_t i = 0; i < args->num_shapes; ++i) {
      if (!args->shape_names[i] || (args->shape_num_dims[i] && !args->shape_dims[i]))
        return invalid(fn, "shape " + std::to_string(i) + " has a NULL name or dims");
      opts.input_shapes[args->shape_names[i]] = dims_of(args->shape_dims[i], args->shape_num_dims[i]);
    }
    if (v2 && args->precision != TPUSIM_PRECISION_BF16 && args->precision != TPUSIM_PRECISION_INT8)
      return invalid(fn, "precision " + std::to_string(int(args->precision)) + " is not a TpusimPrecision");
    if (v2 && args->precision == TPUSIM_PRECISION_INT8) opts.precision = tpusim::compiler::Precision::INT8;
    opts.timing_only = HAS_FIELD(args, timing_only) && args->timing_only;
    if (v2 && args->num_calibration) {
      if (!args->calibration) return invalid(fn, "calibration is NULL");
      const size_t per_set = args->calibration_set_size ? args->calibration_set_size : args->num_calibration;
      if (args->num_calibration % per_set)
        return invalid(fn, "num_calibration " + std::to_string(args->num_calibration) +
                               " is not a multiple of calibration_set_size " + std::to_string(per_set));
      for (size_t i = 0; i < args->num_calibration; ++i) {
        const TpusimHostTensor& t = args->calibration[i];
        if (!t.name || !valid_dtype(t.dtype) || (t.num_dims && !t.dims))
          return invalid(fn, "calibration[" + std::to_string(i) + "] has a NULL name or dims, or a bad dtype");
        rt::HostTensor h{static_cast<DType>(t.dtype), dims_of(t.dims, t.num_dims), {}};
        h.data.resize(static_cast<size_t>(h.elements()) * tpusim::isa::dtype_size(h.dtype));
        if (!h.data.empty() && !t.data) return invalid(fn, "calibration[" + std::to_string(i) + "] has no data");
        if (!h.data.empty()) std::memcpy(h.data.data(), t.data, h.data.size());
        if (i % per_set == 0) opts.calibration.emplace_back();
        opts.calibration.back()[t.name] = std::move(h);
      }
    }
    auto e = bytes ? args->client->client->compile_onnx_bytes(
                         std::string(static_cast<const char*>(bytes), args->num_bytes), opts,
                         args->path ? args->path : "model.onnx")
                   : args->client->client->compile_onnx(args->path, opts);
    if (!e.ok()) return from_status(e.status());
    args->executable = new TpusimExecutable(std::move(e).value());
    return nullptr;
  });
}

TpusimError* tpusim_executable_assemble(TpusimExecutableAssembleArgs* args) {
  static const char* fn = "tpusim_executable_assemble";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableAssembleArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  TPUSIM_CHECK(check_handle(fn, args->path, "path"));
  if (args->num_defines && (!args->define_names || !args->define_values))
    return invalid(fn, "define_names or define_values is NULL");
  std::map<std::string, int64_t> defines;
  for (size_t i = 0; i < args->num_defines; ++i) {
    if (!args->define_names[i]) return invalid(fn, "define_names[" + std::to_string(i) + "] is NULL");
    defines[args->define_names[i]] = args->define_values[i];
  }
  TpusimErrorCode thrown = std::filesystem::exists(args->path) ? TPUSIM_INVALID_ARGUMENT : TPUSIM_NOT_FOUND;
  return guarded([&]() -> TpusimError* {
    args->executable = new TpusimExecutable(args->client->client->assemble_file(args->path, defines));
    return nullptr;
  }, thrown);
}

TpusimError* tpusim_executable_deserialize(TpusimExecutableDeserializeArgs* args) {
  static const char* fn = "tpusim_executable_deserialize";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableDeserializeArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  if (!args->bytes && !args->path) return invalid(fn, "both bytes and path are NULL");
  return guarded([&]() -> TpusimError* {
    std::vector<uint8_t> bytes;
    if (args->bytes) {
      const auto* p = static_cast<const uint8_t*>(args->bytes);
      bytes.assign(p, p + args->num_bytes);
    } else {
      std::ifstream in(args->path, std::ios::binary);
      if (!in) return make_error(TPUSIM_NOT_FOUND, std::string(args->path) + ": cannot open the file");
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    auto e = args->client->client->deserialize_executable(bytes);
    if (!e.ok()) {
      const Status& s = e.status();
      return make_error(static_cast<TpusimErrorCode>(s.code()),
                        args->bytes ? s.message() : std::string(args->path) + ": " + s.message());
    }
    args->executable = new TpusimExecutable(std::move(e).value());
    return nullptr;
  });
}

TpusimError* tpusim_executable_serialize(TpusimExecutableSerializeArgs* args) {
  static const char* fn = "tpusim_executable_serialize";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableSerializeArgs);
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  return guarded([&]() -> TpusimError* {
    std::vector<uint8_t> bytes = args->executable->exe.serialize();
    auto* p = static_cast<uint8_t*>(std::malloc(bytes.empty() ? 1 : bytes.size()));
    if (!p) return make_error(TPUSIM_OUT_OF_MEMORY, "host memory exhausted");
    if (!bytes.empty()) std::memcpy(p, bytes.data(), bytes.size());
    args->bytes = p;
    args->num_bytes = bytes.size();
    return nullptr;
  });
}

TpusimError* tpusim_executable_fingerprint(TpusimExecutableFingerprintArgs* args) {
  static const char* fn = "tpusim_executable_fingerprint";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableFingerprintArgs);
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  const rt::Executable& e = args->executable->exe;
  args->fingerprint = e.fingerprint();
  std::string hex = e.fingerprint_hex();
  std::memset(args->fingerprint_hex, 0, sizeof args->fingerprint_hex);
  std::memcpy(args->fingerprint_hex, hex.data(), std::min(hex.size(), sizeof args->fingerprint_hex - 1));
  args->name = e.program().name.c_str();
  return nullptr;
}

TpusimError* tpusim_executable_io_count(TpusimExecutableIoCountArgs* args) {
  static const char* fn = "tpusim_executable_io_count";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableIoCountArgs);
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  args->num_inputs = args->executable->inputs.size();
  args->num_outputs = args->executable->outputs.size();
  return nullptr;
}

TpusimError* tpusim_executable_io(TpusimExecutableIoArgs* args) {
  static const char* fn = "tpusim_executable_io";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutableIoArgs);
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  const auto& list = args->is_output ? args->executable->outputs : args->executable->inputs;
  if (args->index >= list.size())
    return invalid(fn, std::string(args->is_output ? "output" : "input") + " " + std::to_string(args->index) +
                           " does not exist (the program has " + std::to_string(list.size()) + ")");
  const TensorDecl& d = *list[args->index];
  args->name = d.name.c_str();
  args->dtype = static_cast<TpusimDType>(d.dtype);
  args->dims = d.shape.data();
  args->num_dims = d.shape.size();
  return nullptr;
}

TpusimError* tpusim_executable_destroy(TpusimExecutableDestroyArgs* args) {
  TPUSIM_CHECK_ARGS("tpusim_executable_destroy", args, TpusimExecutableDestroyArgs);
  delete args->executable;
  return nullptr;
}

// --- Execution.

TpusimError* tpusim_execute(TpusimExecuteArgs* args) {
  static const char* fn = "tpusim_execute";
  TPUSIM_CHECK_ARGS_V1(fn, args, TpusimExecuteArgs, done);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  return guarded([&]() -> TpusimError* {
    std::set<std::string> donate;
    if (HAS_FIELD(args, num_donate)) TPUSIM_CHECK(names_of(fn, "donate", args->donate, args->num_donate, donate));
    rt::ExecuteArgs ea;
    TPUSIM_CHECK(device_args(fn, args->device, args->input_names, args->input_buffers, args->num_inputs, donate, ea));
    rt::ExecuteOptions opts;
    opts.functional = !args->timing_only;
    opts.max_cycles = args->max_cycles;
    const rt::Client& client = *args->client->client;
    std::unique_ptr<TpusimExecution> x;
    std::unique_ptr<TpusimEvent> e;
    make_execution(*args->executable, client, args->client->client->execute_async(args->executable->exe, ea, opts),
                   x, e);
    args->execution = x.release();
    args->done = e.release();
    return nullptr;
  });
}

TpusimError* tpusim_execute_devices(TpusimExecuteDevicesArgs* args) {
  static const char* fn = "tpusim_execute_devices";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecuteDevicesArgs);
  TPUSIM_CHECK(check_handle(fn, args->client, "client"));
  TPUSIM_CHECK(check_handle(fn, args->executable, "executable"));
  if (!args->num_devices) return invalid(fn, "num_devices is 0");
  if (!args->devices || !args->executions || !args->done) return invalid(fn, "devices, executions or done is NULL");
  if (args->num_inputs && !args->argument_lists) return invalid(fn, "argument_lists is NULL");
  return guarded([&]() -> TpusimError* {
    std::set<std::string> donate;
    TPUSIM_CHECK(names_of(fn, "donate", args->donate, args->num_donate, donate));
    std::vector<rt::ExecuteArgs> all(args->num_devices);
    for (size_t d = 0; d < args->num_devices; ++d)
      TPUSIM_CHECK(device_args(fn, args->devices[d], args->input_names,
                               args->num_inputs ? args->argument_lists[d] : nullptr, args->num_inputs, donate, all[d]));
    rt::ExecuteOptions opts;
    opts.functional = !args->timing_only;
    opts.max_cycles = args->max_cycles;
    const rt::Client& client = *args->client->client;
    auto futures = args->client->client->execute_async(args->executable->exe, all, opts);
    std::vector<std::unique_ptr<TpusimExecution>> xs(futures.size());
    std::vector<std::unique_ptr<TpusimEvent>> es(futures.size());
    for (size_t d = 0; d < futures.size(); ++d) make_execution(*args->executable, client, futures[d], xs[d], es[d]);
    for (size_t d = 0; d < futures.size(); ++d) {  // nothing throws from here on
      args->executions[d] = xs[d].release();
      args->done[d] = es[d].release();
    }
    return nullptr;
  });
}

TpusimError* tpusim_execution_output_count(TpusimExecutionOutputCountArgs* args) {
  static const char* fn = "tpusim_execution_output_count";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutionOutputCountArgs);
  TPUSIM_CHECK(check_handle(fn, args->execution, "execution"));
  return guarded([&]() -> TpusimError* {
    TPUSIM_CHECK(from_status(args->execution->resolve()));
    args->num_outputs = args->execution->outputs.size();
    return nullptr;
  });
}

TpusimError* tpusim_execution_output(TpusimExecutionOutputArgs* args) {
  static const char* fn = "tpusim_execution_output";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutionOutputArgs);
  TPUSIM_CHECK(check_handle(fn, args->execution, "execution"));
  return guarded([&]() -> TpusimError* {
    TpusimExecution& x = *args->execution;
    TPUSIM_CHECK(from_status(x.resolve()));
    if (args->index >= x.outputs.size())
      return invalid(fn, "output " + std::to_string(args->index) + " does not exist (the run has " +
                             std::to_string(x.outputs.size()) + ")");
    args->name = x.output_names[args->index].c_str();
    args->buffer = new TpusimBuffer{x.outputs[args->index]};
    return nullptr;
  });
}

TpusimError* tpusim_execution_stats(TpusimExecutionStatsArgs* args) {
  static const char* fn = "tpusim_execution_stats";
  TPUSIM_CHECK_ARGS(fn, args, TpusimExecutionStatsArgs);
  TPUSIM_CHECK(check_handle(fn, args->execution, "execution"));
  return guarded([&]() -> TpusimError* {
    TpusimExecution& x = *args->execution;
    TPUSIM_CHECK(from_status(x.resolve()));
    args->cycles = x.cycles;
    args->seconds = x.seconds;
    args->stats_json = x.stats_json.c_str();
    args->stats_json_size = x.stats_json.size();
    return nullptr;
  });
}

TpusimError* tpusim_execution_destroy(TpusimExecutionDestroyArgs* args) {
  TPUSIM_CHECK_ARGS("tpusim_execution_destroy", args, TpusimExecutionDestroyArgs);
  delete args->execution;
  return nullptr;
}

// --- Events.

TpusimError* tpusim_event_await(TpusimEventAwaitArgs* args) {
  static const char* fn = "tpusim_event_await";
  TPUSIM_CHECK_ARGS(fn, args, TpusimEventAwaitArgs);
  TPUSIM_CHECK(check_handle(fn, args->event, "event"));
  return guarded([&]() -> TpusimError* { return from_status(args->event->await()); });
}

TpusimError* tpusim_event_is_ready(TpusimEventIsReadyArgs* args) {
  static const char* fn = "tpusim_event_is_ready";
  TPUSIM_CHECK_ARGS(fn, args, TpusimEventIsReadyArgs);
  TPUSIM_CHECK(check_handle(fn, args->event, "event"));
  return guarded([&]() -> TpusimError* {
    args->is_ready = args->event->ready();
    return nullptr;
  });
}

TpusimError* tpusim_event_destroy(TpusimEventDestroyArgs* args) {
  TPUSIM_CHECK_ARGS("tpusim_event_destroy", args, TpusimEventDestroyArgs);
  delete args->event;
  return nullptr;
}

}  // extern "C"
