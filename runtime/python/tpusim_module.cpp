// The Python module `tpusim` (issue 5): the runtime's C++ API (runtime.h) bound with Debian's pybind11.
//
//   c = tpusim.client("edge")                         # the process's Client, made on first use (SystemC
//                                                     # elaborates once): a re-run notebook cell gets it again
//   exe = c.assemble("kernels/gemm_int8.s", {"M": 64, "K": 64, "N": 64})
//   r = c.execute(exe, {"a": a, "b": b})              # numpy or Buffers in, numpy out; r.cycles, r.stats
//   buf = c.device_put(a); f = c.execute_async(exe, {"a": buf, "b": b}); np.asarray(f.result().outputs["c"])
//
// Inputs (JAX's habits): execute and execute_async take numpy arrays and Buffers alike. Casting rules, for
// numpy inputs and device_put: float64 -> float32 (round to nearest, as JAX does without x64); int64 -> int32
// (an element outside int32 is a ValueError); float32 -> bf16 where the program declares bf16 (round to nearest
// even); int8, int32 and float32 as they are; any other dtype is a ValueError naming it.
//
// Errors: the runtime's Status codes become Python exceptions with the runtime's one-line message:
// INVALID_ARGUMENT -> ValueError, OUT_OF_MEMORY -> MemoryError, anything else -> RuntimeError (so do the
// exceptions of the convenience layer: assembler, compiler and simulator errors). Waiting calls (execute,
// Future.result, Buffer.to_numpy, compile) release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <pybind11/numpy.h>

#include <cstring>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "tpusim/isa/numerics.h"
#include "tpusim/runtime/profile.h"
#include "tpusim/runtime/runtime.h"
#include "tpusim/sim/config.h"

namespace py = pybind11;
using namespace tpusim;

namespace {

// --- Errors

struct OutOfMemory : std::runtime_error {
  using std::runtime_error::runtime_error;
};

[[noreturn]] void raise(const runtime::Status& s) {
  switch (s.code()) {
    case runtime::StatusCode::kInvalidArgument: throw py::value_error(s.message());
    case runtime::StatusCode::kOutOfMemory: throw OutOfMemory(s.message());
    default: throw std::runtime_error(s.message());
  }
}

template <class T>
T take(runtime::StatusOr<T>&& r) {
  if (!r.ok()) raise(r.status());
  return std::move(r).value();
}

// Awaits a runtime Future without holding the GIL.
template <class T>
runtime::StatusOr<T> await_nogil(const runtime::Future<T>& f) {
  py::gil_scoped_release nogil;
  return f.await();
}

// --- dtypes and shapes

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

py::tuple shape_tuple(const std::vector<int64_t>& shape) {
  py::tuple t(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) t[i] = py::int_(shape[i]);
  return t;
}

std::vector<int64_t> shape_of(const py::array& a) {
  return std::vector<int64_t>(a.shape(), a.shape() + a.ndim());
}

// The isa dtype of a numpy array (int8, int32, float32), or nullopt.
std::optional<isa::DType> dtype_of(const py::array& a) {
  if (py::isinstance<py::array_t<int8_t>>(a)) return isa::DType::I8;
  if (py::isinstance<py::array_t<int32_t>>(a)) return isa::DType::I32;
  if (py::isinstance<py::array_t<float>>(a)) return isa::DType::F32;
  return std::nullopt;
}

std::string numpy_dtype_name(const py::array& a) { return py::str(a.dtype()).cast<std::string>(); }

std::string dtype_text(const py::array& a) {
  auto d = dtype_of(a);
  return d ? isa::dtype_name(*d) : numpy_dtype_name(a);
}

// A numpy array argument, cast by the rules above: int64 arrays (token ids as PyTorch makes them) become int32,
// range-checked; float64 arrays become float32.
py::array as_array(const py::handle& h) {
  if (py::isinstance<py::array_t<double>>(h))
    return py::array_t<float, py::array::c_style | py::array::forcecast>::ensure(h);
  if (py::isinstance<py::array_t<int64_t>>(h)) {
    auto a = py::array_t<int64_t, py::array::c_style | py::array::forcecast>::ensure(h);
    py::array_t<int32_t> out(std::vector<py::ssize_t>(a.shape(), a.shape() + a.ndim()));
    const int64_t* src = a.data();
    int32_t* dst = out.mutable_data();
    for (py::ssize_t i = 0; i < a.size(); ++i) {
      if (src[i] < INT32_MIN || src[i] > INT32_MAX)
        throw py::value_error("int64 element " + std::to_string(i) + " = " + std::to_string(src[i]) +
                              " does not fit the int32 the chip uses for integer inputs");
      dst[i] = static_cast<int32_t>(src[i]);
    }
    return out;
  }
  if (py::isinstance<py::array>(h)) return py::reinterpret_borrow<py::array>(h);
  throw py::value_error("expected a numpy array, got " + py::str(py::type::of(h)).cast<std::string>());
}

// The bytes of `a` (C order) as `want`: `a` must have dtype `want`, or float32 when `want` is bf16 or f8e4m3
// (rounded to nearest even, as the runtime does; numpy has neither type).
bool rounds_from_f32(isa::DType want) { return want == isa::DType::BF16 || want == isa::DType::F8E4M3; }
std::vector<uint8_t> array_bytes(const py::array& a, isa::DType want) {
  auto have = dtype_of(a);
  bool f32_for_bf16 = rounds_from_f32(want) && have == isa::DType::F32;
  if (!have || (*have != want && !f32_for_bf16))
    throw py::value_error(std::string("expected ") + isa::dtype_name(want) + " data, got " + dtype_text(a));
  py::array c = py::array::ensure(a, py::array::c_style);
  const size_t n = static_cast<size_t>(c.size());
  std::vector<uint8_t> out(n * isa::dtype_size(want));
  if (f32_for_bf16) {
    const float* src = static_cast<const float*>(c.data());
    for (size_t i = 0; i < n; ++i) {
      if (want == isa::DType::F8E4M3) {
        out[i] = isa::f8e4m3_from_f32(src[i]);
        continue;
      }
      uint16_t h = isa::bf16_from_f32(src[i]);
      std::memcpy(out.data() + 2 * i, &h, 2);
    }
  } else if (!out.empty()) {
    std::memcpy(out.data(), c.data(), out.size());
  }
  return out;
}

// A host tensor as a numpy array (bf16 and f8e4m3 as float32, exactly).
py::array to_numpy(const runtime::HostTensor& t) {
  std::vector<py::ssize_t> shape(t.shape.begin(), t.shape.end());
  const size_t n = static_cast<size_t>(t.elements());
  switch (t.dtype) {
    case isa::DType::I8: {
      py::array_t<int8_t> a(shape);
      if (n) std::memcpy(a.mutable_data(), t.data.data(), n);
      return a;
    }
    case isa::DType::I32: {
      py::array_t<int32_t> a(shape);
      if (n) std::memcpy(a.mutable_data(), t.data.data(), 4 * n);
      return a;
    }
    case isa::DType::F32: {
      py::array_t<float> a(shape);
      if (n) std::memcpy(a.mutable_data(), t.data.data(), 4 * n);
      return a;
    }
    case isa::DType::BF16: {
      py::array_t<float> a(shape);
      float* dst = a.mutable_data();
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t.data.data() + 2 * i, 2);
        dst[i] = isa::f32_from_bf16(h);
      }
      return a;
    }
    case isa::DType::F8E4M3: {
      py::array_t<float> a(shape);
      float* dst = a.mutable_data();
      for (size_t i = 0; i < n; ++i) dst[i] = isa::f32_from_f8e4m3(t.data[i]);
      return a;
    }
  }
  throw std::runtime_error("unknown dtype");
}

isa::DType parse_dtype(const std::string& s) {
  if (auto d = isa::dtype_from_name(s)) return *d;  // i8, i32, bf16, f32, f8e4m3 and their aliases (isa.h)
  throw py::value_error("unknown dtype '" + s + "' (i8, i32, bf16, f32 or f8e4m3)");
}

py::object json_loads(const std::string& text) { return py::module_::import("json").attr("loads")(text); }

py::list tensor_list(const std::vector<const isa::TensorDecl*>& decls) {
  py::list l;
  for (const auto* d : decls) l.append(py::make_tuple(d->name, isa::dtype_name(d->dtype), shape_tuple(d->shape)));
  return l;
}

// --- Profiles as a table (the CLI's `profile` report, compactly)

std::string profile_table(const runtime::Profile& p, const std::string& program_name) {
  std::vector<const runtime::RegionProfile*> rows;
  for (size_t i : p.top(isa::kRegionNode)) rows.push_back(&p.regions[i]);
  const size_t nodes = rows.size();
  if (rows.empty()) rows.push_back(&p.program);
  std::ostringstream os;
  os << "profile of " << (program_name.empty() ? "(unnamed)" : program_name) << " on " << p.chip << ": " << p.cycles
     << " cycles, " << std::setprecision(4) << static_cast<double>(p.cycles) / p.clock_mhz << " us; " << nodes
     << " nodes\n";
  size_t w = 4;
  for (const auto* r : rows) w = std::max(w, r->name.size());
  os << "  " << std::left << std::setw(w + 2) << "node" << std::right << std::setw(10) << "cycles" << std::setw(8)
     << "share" << std::setw(10) << "MXU util";
  for (const char* u : {"dmain", "mxu", "vpu", "dmaout"}) os << std::setw(9) << u;
  os << "\n" << std::fixed << std::setprecision(1);
  for (const auto* r : rows) {
    os << "  " << std::left << std::setw(w + 2) << r->name << std::right << std::setw(10) << r->cycles()
       << std::setw(7) << 100 * r->share << "%" << std::setw(9) << 100 * r->mxu_utilization << "%";
    for (isa::Unit u : {isa::Unit::DmaIn, isa::Unit::Mxu, isa::Unit::Vpu, isa::Unit::DmaOut})
      os << std::setw(9) << r->units[static_cast<int>(u)].busy();
    os << "\n";
  }
  return os.str();
}

// --- Python-side objects

struct PyBuffer {
  runtime::Buffer b;
  py::object keep;  // zero-copy: the numpy array whose memory the buffer refers to

  void check() const {
    if (!b.valid()) throw py::value_error("no buffer");
  }
  // Waits (without the GIL) until the bytes are in place; raises the error that prevented it.
  void block_until_ready() const {
    check();
    take(await_nogil(b.ready()));
  }
  py::array to_numpy() const {
    check();
    return ::to_numpy(take(await_nogil(b.to_host())));
  }
  std::string repr() const {
    if (!b.valid()) return "<tpusim.Buffer (none)>";
    return "<tpusim.Buffer " + std::string(isa::dtype_name(b.dtype())) + " " + shape_text(b.dims()) + " on device " +
           std::to_string(b.device()) + (b.memory() == runtime::MemoryKind::kHost ? " (host)" : " (hbm)") +
           (b.deleted() ? ", deleted" : "") + ">";
  }
};

// The result of one execution: outputs (numpy arrays from Client.execute, Buffers from Future.result), cycles,
// stats and, for a traced run, the profile.
struct PyResult {
  py::dict outputs;
  sim::RunResult run;
  runtime::Executable exe;
  sim::ChipConfig cfg;
  bool traced = false;
  py::object stats_cache;

  py::object stats() {
    if (!stats_cache) stats_cache = json_loads(run.stats.to_json(cfg));
    return stats_cache;
  }
  runtime::Profile profile_of() const {
    if (!traced) throw std::runtime_error("profile() needs an execution with trace=True");
    return runtime::make_profile(exe.program(), run, cfg);
  }
  py::object profile(const std::string& format) const {
    runtime::Profile p = profile_of();
    if (format == "dict") return json_loads(runtime::profile_json(p));
    if (format == "json") return py::str(runtime::profile_json(p));
    if (format == "table") return py::str(profile_table(p, exe.program().name));
    throw py::value_error("unknown profile format '" + format + "' (dict, json or table)");
  }
  std::string trace_json() const {
    runtime::Profile p = profile_of();
    return runtime::profile_trace_json(exe.program(), run, cfg, p);
  }
};

struct PyFuture {
  runtime::Future<runtime::ExecuteOutput> f;
  runtime::Executable exe;
  sim::ChipConfig cfg;
  bool traced = false;

  PyResult result() const {
    runtime::ExecuteOutput out = take(await_nogil(f));
    PyResult r{py::dict(), std::move(out.run), exe, cfg, traced, py::object()};
    for (auto& [name, b] : out.outputs) r.outputs[py::str(name)] = py::cast(PyBuffer{b, py::object()});
    return r;
  }
  bool done() const { return f.ready(); }
};

// One Client per process: SystemC elaborates once, and a second Client would elaborate chips on another thread.
bool g_client_made = false;
struct PyClient;
PyClient* g_live_client = nullptr;

struct PyClient {
  std::unique_ptr<runtime::Client> c;
  std::string config_name;  // as made: what tpusim.client() compares
  std::vector<std::string> sets;
  int num_devices = 1;

  PyClient(const std::string& config, const std::vector<std::string>& sets, int devices)
      : config_name(config), sets(sets), num_devices(devices) {
    if (g_client_made)
      throw std::runtime_error(
          "tpusim: this process already made a Client, and SystemC allows one per process: reuse it "
          "(tpusim.client() returns it; another configuration needs another process)");
    if (devices < 1) throw py::value_error("a client needs at least one device, not " + std::to_string(devices));
    sim::ChipConfig cfg;
    try {
      cfg = sim::load_config(config, sets);
    } catch (const std::exception& e) {
      throw py::value_error(e.what());
    }
    g_client_made = true;
    {
      py::gil_scoped_release nogil;
      c = std::make_unique<runtime::Client>(cfg, devices);
    }
    g_live_client = this;
  }
  ~PyClient() { close(); }

  void close() {
    if (g_live_client == this) g_live_client = nullptr;
    if (!c) return;
    std::unique_ptr<runtime::Client> gone = std::move(c);
    if (PyGILState_Check()) {
      py::gil_scoped_release nogil;
      gone.reset();
    } else {
      gone.reset();
    }
  }

  runtime::Client& client() const {
    if (!c) throw std::runtime_error("the client is closed");
    return *c;
  }

  py::dict config() const {
    py::dict d;
    for (const auto& p : sim::describe(client().config())) d[py::str(p.key)] = p.value;
    return d;
  }

  // `model`: a path, the bytes of a serialized ONNX model, or an onnx.ModelProto (anything with
  // SerializeToString); `name` names bytes in errors and its stem names the program.
  runtime::Executable compile(const py::object& model,
                              const std::optional<std::map<std::string, std::vector<int64_t>>>& shapes,
                              const std::string& precision, const py::object& calibration, const std::string& name,
                              bool timing_only, bool intermediates_in_hbm, bool overlap_kernels) {
    runtime::Client& cl = client();
    std::optional<std::string> bytes;
    std::string path;
    if (py::isinstance<py::bytes>(model) || py::isinstance<py::bytearray>(model) ||
        py::isinstance<py::memoryview>(model)) {
      bytes = py::module_::import("builtins").attr("bytes")(model).cast<std::string>();
    } else if (py::hasattr(model, "SerializeToString")) {
      bytes = model.attr("SerializeToString")().cast<std::string>();
    } else {
      path = py::str(model).cast<std::string>();  // str or os.PathLike
      if (py::hasattr(model, "__fspath__")) path = model.attr("__fspath__")().cast<std::string>();
    }
    runtime::CompileOptions opts;
    opts.input_shapes = shapes.value_or(std::map<std::string, std::vector<int64_t>>{});
    opts.timing_only = timing_only;
    opts.vmem_intermediates = !intermediates_in_hbm;
    opts.overlap_kernels = overlap_kernels;
    if (precision == "int8") opts.precision = compiler::Precision::INT8;
    else if (precision != "bf16") throw py::value_error("precision must be 'bf16' or 'int8', got '" + precision + "'");
    if (!calibration.is_none()) {
      py::list sets = py::isinstance<py::dict>(calibration) ? py::list(py::make_tuple(calibration))
                                                            : py::list(calibration);
      for (const py::handle& set : sets) {
        std::map<std::string, runtime::HostTensor> tensors;
        for (const auto& [k, v] : py::cast<py::dict>(set)) {
          py::array a = as_array(v);
          auto d = dtype_of(a);
          if (!d) throw py::value_error("calibration input '" + py::str(k).cast<std::string>() + "': dtype " + dtype_text(a));
          tensors[py::str(k).cast<std::string>()] = runtime::HostTensor{*d, shape_of(a), array_bytes(a, *d)};
        }
        opts.calibration.push_back(std::move(tensors));
      }
    }
    runtime::StatusOr<runtime::Executable> r = runtime::Status(runtime::StatusCode::kInternal, "not compiled");
    {
      py::gil_scoped_release nogil;
      r = bytes ? cl.compile_onnx_bytes(*bytes, opts, name) : cl.compile_onnx(path, opts);
    }
    return take(std::move(r));
  }

  py::dict cache_stats() const {
    runtime::CacheStats s = client().cache_stats();
    py::dict d;
    d["compilations"] = s.compilations;
    d["hits"] = s.hits;
    return d;
  }

  py::dict memory_stats(int device) const {
    runtime::Client& cl = client();
    if (device < 0 || device >= cl.device_count())
      throw py::value_error("device " + std::to_string(device) + " does not exist (the client has " +
                            std::to_string(cl.device_count()) + ")");
    runtime::AllocatorStats s = cl.memory_stats(device);
    py::dict d;
    d["live_buffers"] = s.live_count;
    d["live_bytes"] = s.live_bytes;
    d["peak_bytes"] = s.peak_bytes;
    d["total_allocations"] = s.total_allocations;
    return d;
  }

  runtime::Executable load(const std::string& path, const std::map<std::string, int64_t>& defines,
                           const std::optional<std::map<std::string, std::vector<int64_t>>>& shapes) {
    runtime::Client& cl = client();
    py::gil_scoped_release nogil;
    return cl.load_file(path, defines, shapes.value_or(std::map<std::string, std::vector<int64_t>>{}));
  }

  runtime::Executable assemble(const std::string& path, const std::map<std::string, int64_t>& defines) {
    return client().assemble_file(path, defines);
  }

  runtime::Executable deserialize(const py::bytes& b) {
    std::string s = b;
    return take(client().deserialize_executable(std::vector<uint8_t>(s.begin(), s.end())));
  }

  py::dict cost_analysis(const runtime::Executable& exe) {
    runtime::Client& cl = client();
    runtime::StatusOr<runtime::CostAnalysis> r = runtime::Status(runtime::StatusCode::kInternal, "not run");
    {
      py::gil_scoped_release nogil;
      r = cl.cost_analysis(exe);
    }
    runtime::CostAnalysis a = take(std::move(r));
    py::dict d;
    d["macs"] = a.macs;
    d["flops"] = a.flops;
    d["cycles"] = a.cycles;
    d["seconds"] = a.seconds;
    d["input_bytes"] = a.input_bytes;
    d["output_bytes"] = a.output_bytes;
    d["const_bytes"] = a.const_bytes;
    d["hbm_bytes_read"] = a.hbm_bytes_read;
    d["hbm_bytes_written"] = a.hbm_bytes_written;
    return d;
  }

  py::object buffer(const py::object& obj, int device, const std::optional<std::string>& dtype, bool zero_copy) {
    if (py::isinstance<PyBuffer>(obj)) {  // device_put of a Buffer: itself if it is already there
      const PyBuffer& b = obj.cast<const PyBuffer&>();
      b.check();
      if (b.b.device() == device && (!dtype || parse_dtype(*dtype) == b.b.dtype())) return obj;
      return buffer(py::object(b.to_numpy()), device, dtype, zero_copy);
    }
    py::array a = as_array(obj);
    isa::DType d;
    if (dtype) {
      d = parse_dtype(*dtype);
    } else {
      auto have = dtype_of(a);
      if (!have)
        throw py::value_error("unsupported dtype " + numpy_dtype_name(a) +
                              " (tpusim takes int8, int32 and float32 arrays; dtype='bf16' or 'f8e4m3' rounds float32)");
      d = *have;
    }
    if (zero_copy) {
      if (dtype_of(a) != d || !(a.flags() & py::array::c_style))
        throw py::value_error("zero_copy needs a C-contiguous array of the buffer's dtype (int8, int32 or float32), "
                              "got " + numpy_dtype_name(a));
      // The array must stay unchanged while the buffer lives (it is kept alive by the Buffer).
      return py::cast(PyBuffer{take(client().buffer_from_host(a.data(), d, shape_of(a), device,
                                                              runtime::HostSemantics::kZeroCopy)),
                               a});
    }
    std::vector<uint8_t> bytes = array_bytes(a, d);
    return py::cast(PyBuffer{take(client().buffer_from_host(bytes.data(), d, shape_of(a), device)), py::object()});
  }

  // One device's arguments from {name: numpy array or Buffer}. Arrays are checked against the declaration and
  // become zero-copy buffers over `host` (execute: it waits, so the bytes outlive the run) or copies
  // (execute_async). timing_only: missing inputs are zeros.
  runtime::ExecuteArgs device_args(const runtime::Executable& exe, const py::dict& inputs, int device,
                                   bool timing_only, bool zero_copy, std::vector<std::vector<uint8_t>>& host) {
    runtime::Client& cl = client();
    check_names(exe, inputs);
    runtime::ExecuteArgs args;
    args.device = device;
    for (const auto* d : exe.inputs()) {
      py::str key(d->name);
      if (inputs.contains(key) && py::isinstance<PyBuffer>(inputs[key])) {
        const PyBuffer& b = inputs[key].cast<const PyBuffer&>();
        b.check();
        args.inputs[d->name] = b.b;  // the runtime checks its device, dtype and shape
        continue;
      }
      if (!inputs.contains(key)) {
        if (!timing_only) throw py::value_error("missing input '" + d->name + "' (" + runtime::describe(*d) + ")");
        host.emplace_back(d->bytes(), 0);  // timing only: the values do not matter
      } else {
        py::array a = as_array(inputs[key]);
        auto have = dtype_of(a);
        bool ok_dtype = have && (*have == d->dtype || (rounds_from_f32(d->dtype) && *have == isa::DType::F32));
        if (!ok_dtype || shape_of(a) != d->shape)
          throw py::value_error("input '" + d->name + "': expected " + isa::dtype_name(d->dtype) + " " +
                                shape_text(d->shape) + ", got " + dtype_text(a) + " " + shape_text(shape_of(a)));
        host.push_back(array_bytes(a, d->dtype));
      }
      args.inputs[d->name] = take(cl.buffer_from_host(
          host.back().data(), d->dtype, d->shape, device,
          zero_copy ? runtime::HostSemantics::kZeroCopy : runtime::HostSemantics::kCopy));
    }
    return args;
  }

  // Inputs for one device (a dict) or several (a list of dicts, on `devices`, default 0, 1, ...).
  std::vector<runtime::ExecuteArgs> all_args(const runtime::Executable& exe, const py::object& inputs, int device,
                                             const std::optional<std::vector<int>>& devices, bool timing_only,
                                             bool zero_copy, std::vector<std::vector<uint8_t>>& host) {
    std::vector<runtime::ExecuteArgs> all;
    if (py::isinstance<py::dict>(inputs)) {
      if (devices && devices->size() != 1)
        throw py::value_error("one dict of inputs for " + std::to_string(devices->size()) + " devices");
      all.push_back(device_args(exe, inputs.cast<py::dict>(), devices ? devices->front() : device, timing_only,
                                zero_copy, host));
      return all;
    }
    py::list lists(inputs);
    if (devices && devices->size() != lists.size())
      throw py::value_error(std::to_string(lists.size()) + " dicts of inputs for " +
                            std::to_string(devices->size()) + " devices");
    size_t count = 0;
    for (const auto& l : lists) count += 1 + py::len(l);
    host.reserve(count);  // zero-copy buffers point into `host`: it must not reallocate
    for (size_t i = 0; i < lists.size(); ++i) {
      if (!py::isinstance<py::dict>(lists[i])) throw py::value_error("inputs: a dict, or a list of dicts (one per device)");
      all.push_back(device_args(exe, lists[i].cast<py::dict>(), devices ? (*devices)[i] : static_cast<int>(i),
                                timing_only, zero_copy, host));
    }
    return all;
  }

  // Checks the names of `inputs` against the program's inputs (ValueError naming them).
  static void check_names(const runtime::Executable& exe, const py::dict& inputs) {
    for (auto item : inputs) {
      std::string name = py::str(item.first);
      const isa::TensorDecl* d = exe.program().find(name);
      if (!d || d->kind != isa::TensorKind::Input) {
        std::string known;
        for (const auto* i : exe.inputs()) known += (known.empty() ? "" : ", ") + i->name;
        throw py::value_error("program '" + exe.program().name + "' has no input '" + name + "' (its inputs: " +
                              known + ")");
      }
    }
  }

  runtime::ExecuteOptions options(bool timing_only, bool trace, uint64_t max_cycles) const {
    runtime::ExecuteOptions o;
    o.functional = !timing_only;
    o.trace = trace;
    o.max_cycles = max_cycles;
    return o;
  }

  // Runs and waits; outputs as numpy arrays. `inputs` a dict (one device) or a list of dicts (several devices,
  // run together): a Result, or a list of them.
  py::object execute(const runtime::Executable& exe, const py::object& inputs, bool timing_only, bool trace,
                     int device, uint64_t max_cycles, const std::optional<std::vector<int>>& devices) {
    runtime::Client& cl = client();
    std::vector<std::vector<uint8_t>> host;  // the numpy inputs' bytes, alive until the run is done (zero-copy)
    host.reserve(exe.inputs().size());
    std::vector<runtime::ExecuteArgs> all = all_args(exe, inputs, device, devices, timing_only, true, host);
    runtime::ExecuteOptions o = options(timing_only, trace, max_cycles);
    o.output_memory = runtime::MemoryKind::kHost;
    std::vector<runtime::Future<runtime::ExecuteOutput>> futures = cl.execute_async(exe, all, o);
    std::vector<runtime::StatusOr<runtime::ExecuteOutput>> outs;
    {
      py::gil_scoped_release nogil;
      for (const auto& f : futures) outs.push_back(f.await());
    }
    all.clear();
    py::list results;
    for (auto& r : outs) {
      runtime::ExecuteOutput out = take(std::move(r));
      PyResult res{py::dict(), std::move(out.run), exe, cl.config(), trace, py::object()};
      for (auto& [name, b] : out.outputs) res.outputs[py::str(name)] = ::to_numpy(take(await_nogil(b.to_host())));
      results.append(py::cast(std::move(res)));
    }
    if (py::isinstance<py::dict>(inputs)) return results[0];
    return results;
  }

  // Starts the run and returns at once: a Future, or a list of them (one per device) for a list of dicts. numpy
  // inputs are copied to the device first (device_put).
  py::object execute_async(const runtime::Executable& exe, const py::object& inputs, int device, bool timing_only,
                           bool trace, uint64_t max_cycles, const std::vector<std::string>& donate,
                           const std::optional<std::vector<int>>& devices) {
    runtime::Client& cl = client();
    std::vector<std::vector<uint8_t>> host;
    std::vector<runtime::ExecuteArgs> all = all_args(exe, inputs, device, devices, timing_only, false, host);
    for (auto& a : all) a.donate.insert(donate.begin(), donate.end());
    auto futures = cl.execute_async(exe, all, options(timing_only, trace, max_cycles));
    py::list out;
    for (auto& f : futures) {
      // A mistake in the arguments is found at once (the Future is ready with it): raise it here, not at result().
      if (f.ready() && !f.await().ok()) raise(f.await().status());
      out.append(py::cast(PyFuture{f, exe, cl.config(), trace}));
    }
    if (py::isinstance<py::dict>(inputs)) return out[0];
    return out;
  }
};

}  // namespace

PYBIND11_MODULE(tpusim, m) {
  m.doc() = "tpusim: a simulated TPU-like accelerator behind a PjRT-like runtime (Client, Buffer, Executable)";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const OutOfMemory& e) {
      PyErr_SetString(PyExc_MemoryError, e.what());
    }
  });

  m.def("presets", &sim::preset_names, "The names of the shipped chip presets (\"v4-like\", \"edge\", ...).");
  m.def("default_preset", &sim::default_preset);

  py::class_<runtime::DeviceDescription>(m, "Device", "A simulated chip of a Client.")
      .def_readonly("id", &runtime::DeviceDescription::id)
      .def_readonly("kind", &runtime::DeviceDescription::kind)
      .def_readonly("chip", &runtime::DeviceDescription::chip)
      .def_readonly("attributes", &runtime::DeviceDescription::attributes)
      .def("__str__", &runtime::DeviceDescription::to_string)
      .def("__repr__", [](const runtime::DeviceDescription& d) { return "<tpusim.Device " + d.to_string() + ">"; });

  py::class_<runtime::Executable>(m, "Executable", "A program with a tensor interface (immutable, shareable).")
      .def_property_readonly("name", [](const runtime::Executable& e) { return e.program().name; })
      .def_property_readonly("inputs", [](const runtime::Executable& e) { return tensor_list(e.inputs()); },
                             "[(name, dtype, shape)], dtype one of i8, i32, bf16, f32, f8e4m3")
      .def_property_readonly("outputs", [](const runtime::Executable& e) { return tensor_list(e.outputs()); })
      .def_property_readonly("fingerprint", &runtime::Executable::fingerprint, "FNV-1a 64 of serialize()")
      .def_property_readonly("fingerprint_hex", &runtime::Executable::fingerprint_hex)
      .def_property_readonly("instructions", [](const runtime::Executable& e) { return e.program().code.size(); })
      .def("serialize",
           [](const runtime::Executable& e) {
             std::vector<uint8_t> b = e.serialize();
             return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
           })
      .def("__repr__", [](const runtime::Executable& e) {
        return "<tpusim.Executable '" + e.program().name + "' " + e.fingerprint_hex() + ", " +
               std::to_string(e.program().code.size()) + " instructions>";
      });

  py::class_<PyBuffer>(m, "Buffer", "A device array (in a device's HBM, or in host memory).")
      .def_property_readonly("dims", [](const PyBuffer& b) { b.check(); return shape_tuple(b.b.dims()); })
      .def_property_readonly("shape", [](const PyBuffer& b) { b.check(); return shape_tuple(b.b.dims()); })
      .def_property_readonly("dtype", [](const PyBuffer& b) { b.check(); return std::string(isa::dtype_name(b.b.dtype())); })
      .def_property_readonly("device", [](const PyBuffer& b) { b.check(); return b.b.device(); })
      .def_property_readonly("nbytes", [](const PyBuffer& b) { b.check(); return b.b.bytes(); })
      .def_property_readonly("memory", [](const PyBuffer& b) {
        b.check();
        return std::string(b.b.memory() == runtime::MemoryKind::kHost ? "host" : "hbm");
      })
      .def_property_readonly("deleted", [](const PyBuffer& b) { b.check(); return b.b.deleted(); })
      .def("to_numpy", &PyBuffer::to_numpy, "Copies the buffer to a new numpy array (bf16 and f8e4m3 as float32); waits.")
      .def("__array__",
           [](const PyBuffer& b, py::object dtype, py::object copy) {
             py::array a = b.to_numpy();
             return dtype.is_none() ? a : py::array(a.attr("astype")(dtype));
           },
           py::arg("dtype") = py::none(), py::arg("copy") = py::none(),
           "np.asarray(buffer): a new numpy array (bf16 and f8e4m3 as float32); waits")
      .def("block_until_ready", [](py::object self) { self.cast<const PyBuffer&>().block_until_ready(); return self; },
           "Waits until the buffer's bytes are in place (raises the error that prevented it); returns the buffer")
      .def("is_ready", [](const PyBuffer& b) { b.check(); return b.b.ready().ready(); })
      .def("delete", [](PyBuffer& b) { b.check(); b.b.Delete(); }, "Releases the buffer's memory now.")
      .def("__repr__", &PyBuffer::repr);

  py::class_<PyResult>(m, "Result", "One execution's outputs, cycles, stats and (trace=True) profile.")
      .def_readonly("outputs", &PyResult::outputs)
      .def_property_readonly("cycles", [](const PyResult& r) { return r.run.stats.cycles; })
      .def_property_readonly("seconds", [](const PyResult& r) { return r.run.stats.seconds; })
      .def_property_readonly("stats", &PyResult::stats, "The stats JSON (tpusim run --stats) as a dict")
      .def("profile", &PyResult::profile, py::arg("format") = "dict",
           "Per-node profile of a traced run: format 'dict' (profile JSON parsed), 'json' or 'table' (text)")
      .def("trace_json", &PyResult::trace_json, "Chrome trace event JSON (Perfetto) of a traced run")
      .def("__repr__", [](const PyResult& r) {
        return "<tpusim.Result " + std::to_string(r.run.stats.cycles) + " cycles, " +
               std::to_string(py::len(r.outputs)) + " outputs>";
      });

  py::class_<PyFuture>(m, "Future", "An execution in flight (Client.execute_async).")
      .def("result", &PyFuture::result, "Waits (without the GIL) and returns the Result; outputs are Buffers")
      .def("block_until_ready", [](py::object self) { take(await_nogil(self.cast<const PyFuture&>().f)); return self; },
           "Waits until the run is done (raises its error); returns the Future")
      .def("done", &PyFuture::done);

  py::class_<PyClient>(m, "Client",
                       "Simulated chips of one configuration. One Client per process (SystemC elaborates once).")
      .def(py::init<const std::string&, const std::vector<std::string>&, int>(), py::arg("config") = "v4-like",
           py::arg("sets") = std::vector<std::string>{}, py::arg("devices") = 1,
           "config: a preset name or an INI file; sets: ['section.key=value', ...]; devices: identical chips")
      .def_property_readonly("devices", [](const PyClient& c) { return c.client().devices(); })
      .def_property_readonly("memory_spaces",
                             [](const PyClient& c) {
                               py::list l;
                               for (const auto& m : c.client().memory_spaces()) {
                                 py::dict d;
                                 d["name"] = m.name;
                                 d["kind"] = m.kind == runtime::MemoryKind::kHost ? "host" : "hbm";
                                 d["device"] = m.device;
                                 d["capacity"] = m.capacity;
                                 l.append(d);
                               }
                               return l;
                             },
                             "[{'name': 'device 0 hbm', 'kind': 'hbm', 'device': 0, 'capacity': bytes}, ..., host]")
      .def_property_readonly("config", &PyClient::config, "every parameter: {'mxu.rows': '128', ...}")
      .def_property_readonly("chip", [](const PyClient& c) { return c.client().config().chip.name; })
      .def("compile", &PyClient::compile, py::arg("model"), py::arg("shapes") = py::none(),
           py::arg("precision") = "bf16", py::arg("calibration") = py::none(), py::arg("name") = "model.onnx",
           py::arg("timing_only") = false, py::arg("intermediates_in_hbm") = false, py::arg("overlap_kernels") = true,
           "Compiles an ONNX model: a path, bytes, or an onnx.ModelProto (cached by canonical path and mtime, or by "
           "content); shapes: {input: [dims]} for dynamic dimensions; precision 'bf16' or 'int8' (calibration: a "
           "dict of input arrays, or a list of them, the activation scales are measured on); name: for bytes; "
           "timing_only: a program for execute(..., timing_only=True) only, with the same cycles, compiled without "
           "reading the weights' values (and int8 without calibration); intermediates_in_hbm: keep every "
           "intermediate in HBM (by default a one-core chip of at least 16 MiB of VMEM keeps them in half of it); "
           "overlap_kernels=False: a fence between every two kernels (by default a kernel and the whole-chip GEMM "
           "after it overlap, the GEMM's first weights loading while the first kernel runs; the same results)")
      .def("cache_stats", &PyClient::cache_stats, "{'compilations': ONNX models compiled, 'hits': cache hits}")
      .def("memory_stats", &PyClient::memory_stats, py::arg("device") = 0,
           "The device's HBM: {'live_buffers', 'live_bytes', 'peak_bytes', 'total_allocations'}")
      .def("load", &PyClient::load, py::arg("path"), py::arg("defines") = std::map<std::string, int64_t>{},
           py::arg("shapes") = py::none(), ".s: assemble, .onnx: compile, else a .tpub binary")
      .def("assemble", &PyClient::assemble, py::arg("path"), py::arg("defines") = std::map<std::string, int64_t>{})
      .def("deserialize", &PyClient::deserialize, py::arg("data"), "The inverse of Executable.serialize()")
      .def("cost_analysis", &PyClient::cost_analysis, py::arg("executable"))
      .def("device_put", &PyClient::buffer, py::arg("array"), py::arg("device") = 0, py::arg("dtype") = py::none(),
           py::arg("zero_copy") = false,
           "A Buffer on `device` from a numpy array (copied into HBM before it returns; cast by the module's rules; "
           "dtype='bf16' or 'f8e4m3' rounds float32 to it) or a Buffer (itself if already there). zero_copy=True: no copy, "
           "the Buffer refers to the array's memory (in host memory; keep the array unchanged while it lives)")
      .def("buffer", &PyClient::buffer, py::arg("array"), py::arg("device") = 0, py::arg("dtype") = py::none(),
           py::arg("zero_copy") = false, "The same as device_put")
      .def("execute", &PyClient::execute, py::arg("executable"), py::arg("inputs"), py::arg("timing_only") = false,
           py::arg("trace") = false, py::arg("device") = 0, py::arg("max_cycles") = 0, py::arg("devices") = py::none(),
           "Runs and waits; inputs {name: numpy array or Buffer}, or a list of such dicts to run on several devices "
           "together (devices: which, default 0, 1, ...; a list of Results). Outputs are numpy arrays (bf16 as "
           "float32). timing_only: no arithmetic, no outputs, inputs may be left out")
      .def("execute_async", &PyClient::execute_async, py::arg("executable"), py::arg("inputs"), py::arg("device") = 0,
           py::arg("timing_only") = false, py::arg("trace") = false, py::arg("max_cycles") = 0,
           py::arg("donate") = std::vector<std::string>{}, py::arg("devices") = py::none(),
           "Starts the run and returns a Future at once (a list of them for a list of dicts); inputs as execute "
           "(numpy arrays are copied to the device at the call); donate: input names whose Buffers are deleted by "
           "the call, their memory reused for outputs")
      .def("close", &PyClient::close, "Finishes queued work and stops the chips (no new Client can follow)")
      .def("__enter__", [](PyClient& c) -> PyClient& { return c; }, py::return_value_policy::reference)
      .def("__exit__", [](PyClient& c, py::args) { c.close(); })
      .def("__repr__", [](const PyClient& c) {
        if (!c.c) return std::string("<tpusim.Client (closed)>");
        return "<tpusim.Client " + c.c->config().chip.name + ", " + std::to_string(c.c->device_count()) +
               " device(s)>";
      });

  m.def(
      "client",
      [](std::optional<std::string> config, std::optional<std::vector<std::string>> sets, std::optional<int> devices) {
        py::module_ self = py::module_::import("tpusim");
        if (g_live_client) {
          const PyClient& c = *g_live_client;
          if ((config && *config != c.config_name) || (sets && *sets != c.sets) ||
              (devices && *devices != c.num_devices)) {
            std::string have = "'" + c.config_name + "'";
            for (const auto& s : c.sets) have += " " + s;
            throw std::runtime_error("tpusim.client: this process's Client is " + have + " with " +
                                     std::to_string(c.num_devices) +
                                     " device(s), and SystemC allows one per process (another configuration "
                                     "needs another process)");
          }
          return py::cast(g_live_client, py::return_value_policy::reference);
        }
        if (g_client_made) throw std::runtime_error("tpusim.client: this process's Client was closed, and SystemC "
                                                    "allows one per process");
        py::object c = self.attr("Client")(config.value_or("v4-like"), sets.value_or(std::vector<std::string>{}),
                                           devices.value_or(1));
        self.attr("_client") = c;  // kept: the module owns a Client it made
        return c;
      },
      py::arg("config") = py::none(), py::arg("sets") = py::none(), py::arg("devices") = py::none(),
      "The process's Client: the one already made (by tpusim.client or tpusim.Client) if any, else a new one "
      "(config default 'v4-like', 1 device). Arguments given must match the existing Client's (RuntimeError "
      "otherwise). Re-running a notebook cell that calls it gets the same Client.");
  m.def(
      "device_put",
      [](const py::object& x, int device, std::optional<std::string> dtype, bool zero_copy) {
        if (!g_live_client) throw std::runtime_error("tpusim.device_put: no Client yet (tpusim.client(...) makes one)");
        return g_live_client->buffer(x, device, dtype, zero_copy);
      },
      py::arg("x"), py::arg("device") = 0, py::arg("dtype") = py::none(), py::arg("zero_copy") = false,
      "Client.device_put on the process's Client");
  m.def(
      "block_until_ready",
      [](py::object x) {
        if (py::isinstance<PyBuffer>(x)) x.cast<const PyBuffer&>().block_until_ready();
        else if (py::hasattr(x, "block_until_ready")) x.attr("block_until_ready")();
        else if (py::isinstance<py::dict>(x) || py::isinstance<py::list>(x) || py::isinstance<py::tuple>(x)) {
          py::iterable items = py::isinstance<py::dict>(x) ? py::iterable(x.attr("values")()) : py::iterable(x);
          for (const auto& v : items) py::module_::import("tpusim").attr("block_until_ready")(v);
        }
        return x;
      },
      py::arg("x"), "Waits for every Buffer or Future in x (a Buffer, a Future, or a dict/list of them); returns x");

  // Stop the simulation thread before the interpreter (and the process's static objects) go away.
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    if (g_live_client) g_live_client->close();
  }));
  m.attr("__version__") = "0.1.0";
}
