// The runtime: a PjRT-like API over simulated chips (docs/architecture.md, "Conventions"), and a convenience layer.
//
// A Client is made from a chip config with N devices: N identical chips, elaborated once, on a dedicated
// simulation thread that owns every SystemC call (docs/architecture.md, pitfalls: one SystemC kernel a process, so one
// Client per process). Every other thread hands that thread work through a FIFO queue, so work is done in the
// order it was submitted; calls return at once with a Future or Event. Any number of host threads may call one
// Client, its Buffers and Executables at the same time.
//
// Memory (per device): buffers live in the device's HBM, placed by an HbmAllocator from the top of HBM down.
// Today's programs declare their tensors at fixed addresses (from 0 up) and are not relocatable, so an
// execution reserves the executable's declared HBM range [0, hbm_footprint) in the allocator while it runs;
// the simulated chip's host interface copies the input buffers into their declared places before the run and
// the outputs from theirs into new buffers after it, then the range is freed. A buffer that overlaps that range
// makes the execution fail with kOutOfMemory naming it. Tensors a program keeps in VMEM are copied the same way.
// Memory spaces: "hbm" of each device, and "host" (buffers whose bytes stay in host memory: zero-copy buffers,
// and outputs asked for in host memory, which need no HBM of their own).
//
// Errors: the API returns Status / StatusOr / Future values (code + one line); it never throws for a caller's
// mistake. The convenience layer (assemble_file ... execute(exe, host tensors)) throws runtime::Error as before.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "tpusim/compiler/compiler.h"
#include "tpusim/isa/program.h"
#include "tpusim/runtime/allocator.h"
#include "tpusim/runtime/executable.h"
#include "tpusim/runtime/npy.h"
#include "tpusim/runtime/status.h"
#include "tpusim/sim/chip.h"
#include "tpusim/sim/config.h"

namespace tpusim::runtime {

class Client;
namespace detail {
struct ClientCore;
struct BufferState;
struct ModelSource;
}  // namespace detail

enum class MemoryKind { kHbm, kHost };

struct MemorySpace {
  MemoryKind kind = MemoryKind::kHbm;
  int device = -1;         // kHbm: its device; kHost: -1 (every device reaches it)
  uint64_t capacity = 0;   // bytes (kHost: 0, unbounded)
  std::string name;        // "device 0 hbm", "host"
};

struct DeviceDescription {
  int id = 0;
  std::string kind = "tpusim";   // what every device of this runtime is
  std::string chip;              // chip.name of the config ("v4-like")
  // Sizes and clocks from the config: mxu_rows, mxu_cols, clock_mhz, hbm_bytes, vmem_bytes, acc_bytes (if any),
  // hbm_bandwidth_gbs.
  std::map<std::string, double> attributes;
  std::string to_string() const;  // "tpusim:0 (v4-like, mxu 128x128, 1050 MHz, hbm 32 GiB)"
};

// How buffer_from_host treats the caller's bytes.
enum class HostSemantics {
  kCopy,      // copied before the call returns; the caller may reuse its memory at once
  kZeroCopy,  // not copied: the buffer refers to the caller's memory, which must stay alive and unchanged until
              // the buffer is deleted or destroyed (and every execution using it has finished). The buffer is in
              // the host memory space and takes no HBM; executions copy from it directly into the chip.
};

// A device array: dims and dtype, on a device, in a memory space. A handle: copies refer to the same buffer.
// Delete() releases its memory at once (or when the last execution using it finishes); later use of the buffer
// (to_host, execute) is an error status, never a crash.
class Buffer {
 public:
  Buffer() = default;  // no buffer: valid() is false
  bool valid() const { return s_ != nullptr; }
  int device() const;
  isa::DType dtype() const;
  const std::vector<int64_t>& dims() const;
  uint64_t bytes() const;
  MemoryKind memory() const;
  // Ready when the bytes are in place (the host-to-device copy or the execution that made it is done).
  Event ready() const;
  // Copies the buffer's bytes to a new host tensor, asynchronously (after the work queued before it on the
  // buffer's device). The Future is ready when the tensor, owned by the Future's holders, holds the bytes.
  Future<HostTensor> to_host() const;
  // Copies the buffer's bytes() bytes into `dst`, asynchronously, with no allocation (the way to move large
  // buffers): `dst` must stay valid until the returned event is ready, and holds the bytes once it is.
  Event to_host(void* dst) const;
  // Releases the memory now, or when the last execution still using it finishes; every handle sees it deleted.
  void Delete();
  bool deleted() const;

 private:
  friend class Client;
  friend struct detail::ClientCore;
  explicit Buffer(std::shared_ptr<detail::BufferState> s) : s_(std::move(s)) {}
  std::shared_ptr<detail::BufferState> s_;
};

struct ExecuteOptions {
  bool functional = true;   // false: timing only (no arithmetic; no outputs are produced)
  bool trace = false;
  uint64_t max_cycles = 0;  // 0: no limit
  uint64_t max_trace_events = sim::kDefaultMaxTraceEvents;  // with `trace`: more stops the run (0: no limit)
  MemoryKind output_memory = MemoryKind::kHbm;  // where output buffers are made
};

// One device's part of an execution.
struct ExecuteArgs {
  int device = 0;
  std::map<std::string, Buffer> inputs;  // by the program's input names; every input must be given
  // Inputs whose buffers are donated: deleted by the call, their HBM reused for an output of the same size.
  std::set<std::string> donate;
};

struct ExecuteOutput {
  std::map<std::string, Buffer> outputs;  // empty in timing-only mode
  sim::RunResult run;
};

struct ExecuteResult {
  std::map<std::string, HostTensor> outputs;  // empty in timing-only mode
  sim::RunResult run;
};

// How to compile an ONNX model.
struct CompileOptions {
  std::map<std::string, std::vector<int64_t>> input_shapes;  // values for dynamic dimensions
  compiler::Precision precision = compiler::Precision::BF16;
  // INT8: the input sets the activation scales are calibrated on (each set gives every model input by name). The
  // model is first compiled in bf16 with its quantised activations as extra outputs and run (functional, device 0)
  // on each set; each activation's range is the largest |x| seen over all sets.
  std::vector<std::map<std::string, HostTensor>> calibration;
  // A program for timing-only runs only (compiler::Options::timing_only): the same instructions and cycles, without
  // reading, converting or laying out the weights' values, and (INT8) without calibration runs; a functional
  // execution of it fails with kInvalidArgument.
  bool timing_only = false;
  // compiler::Options::vmem_intermediates: on a one-core chip of at least 16 MiB of VMEM, intermediates in half of
  // it (false: in HBM, or the shared memory, as on other chips).
  bool vmem_intermediates = true;
  // compiler::Options::overlap_kernels: a kernel and the whole-chip GEMM after it overlap (docs/compiler.md), its
  // first weights loading while the first kernel runs (false: a fence between every two kernels).
  bool overlap_kernels = true;
  // compiler::Options::group_pack: > 0, grouped convolutions P groups at a time where P divides the groups.
  int64_t group_pack = 0;
};

struct CacheStats {
  uint64_t compilations = 0;  // ONNX models compiled
  uint64_t hits = 0;          // compile_onnx / load_program answered from the cache
};

// Ownership and readiness, for every call below (as PjRT's header states them):
// - Buffers, Executables, Futures and Events are shared handles: copies refer to the same object, which lives
//   as long as its last handle (and, for a buffer's memory, as long as an execution still uses it). A handle may
//   outlive its Client; calls that need the client then fail with kFailedPrecondition.
// - A call that takes host memory says whether it copies it before returning (the caller may reuse it at once)
//   or keeps referring to it (zero-copy: the caller keeps it alive and unchanged until the buffer is gone).
// - An Event or Future is ready when the work is done and its results are in place: a buffer's bytes are in its
//   memory, a copy's destination is filled, an execution's output buffers exist. It is ready with the error that
//   stopped the work otherwise. Nothing blocks except await() (and the convenience layer, which awaits).
class Client {
 public:
  // The process's one Client: elaborates `num_devices` chips of `cfg` on a new simulation thread. The Client is
  // owned by the caller (destroying it finishes the queued work, then stops the thread). kFailedPrecondition if
  // this process already made a Client, even one since destroyed: SystemC elaborates chips once per process, so
  // a second Client cannot work (make one and share it; another configuration needs another process).
  // kInvalidArgument for num_devices < 1; kInternal if elaboration fails.
  static StatusOr<std::unique_ptr<Client>> Create(const sim::ChipConfig& cfg, int num_devices = 1);
  // The same, throwing runtime::Error with Create's message.
  explicit Client(const sim::ChipConfig& cfg, int num_devices = 1);
  ~Client();  // finishes the queued work, then stops the simulation thread
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const sim::ChipConfig& config() const;
  int device_count() const;
  const std::vector<DeviceDescription>& devices() const;
  std::vector<MemorySpace> memory_spaces() const;
  AllocatorStats memory_stats(int device) const;  // of the device's HBM allocator
  CacheStats cache_stats() const;

  // --- Buffers. The buffer is owned by the caller (a shared handle). kCopy: `data` is copied before the call
  // returns; the buffer's ready() event becomes ready when the bytes are in the device's HBM. kZeroCopy: see
  // HostSemantics; the buffer is ready at once.
  StatusOr<Buffer> buffer_from_host(const void* data, isa::DType dtype, const std::vector<int64_t>& dims, int device,
                                    HostSemantics semantics = HostSemantics::kCopy);
  StatusOr<Buffer> buffer_from_host(const HostTensor& t, int device);  // kCopy

  // --- Executables (shared, immutable handles; an executable may outlive the client). Programs are cached by
  // fingerprint (load_program returns the cached executable for an equal program); ONNX models from a file by
  // canonical path, modification time, size and options (so "m.onnx" and "./dir/../m.onnx" compile once), from
  // bytes by their content (FNV-1a 64 and size), name and options: the second compile is free. The calls are
  // synchronous (compiling does not touch the chips; INT8 calibration runs do, and wait for them).
  StatusOr<Executable> compile_onnx(const std::string& path,
                                    const std::map<std::string, std::vector<int64_t>>& input_shapes = {});
  // With a precision (and for INT8 the calibration runs, which make this call wait for the chip).
  StatusOr<Executable> compile_onnx(const std::string& path, const CompileOptions& opts);
  // A serialized ONNX ModelProto made in memory (`bytes`, read during the call only); `name` names it in errors
  // and its stem names the program, as a file's would.
  StatusOr<Executable> compile_onnx_bytes(const std::string& bytes, const CompileOptions& opts = {},
                                          const std::string& name = "model.onnx");
  StatusOr<Executable> load_program(isa::Program program);  // takes the program; the cached one if equal
  StatusOr<Executable> deserialize_executable(const std::vector<uint8_t>& bytes);  // reads bytes during the call
  // kInvalidArgument if the program cannot run on this chip (its tensors do not fit in HBM or VMEM).
  Status fits(const Executable& exe) const;
  // Runs the program once timing-only (on device 0, through the simulation thread, waiting for it); cached by
  // fingerprint.
  StatusOr<CostAnalysis> cost_analysis(const Executable& exe);

  // --- Execution. Checks every argument at once (errors come back in the Future); the run happens on the
  // simulation thread. With several ExecuteArgs (distinct devices), the devices run together in one simulation,
  // overlapping in simulated time; one Future per ExecuteArgs, in order, each ready with its own device's
  // outcome (a device whose arguments are wrong fails alone; the others run). The input buffers are held by the
  // execution until it finishes (a caller may drop or Delete() them at once); donated ones are deleted at the
  // call. A Future is ready when its outputs are in their buffers (owned by the caller through the result).
  Future<ExecuteOutput> execute_async(const Executable& exe, const ExecuteArgs& args, const ExecuteOptions& opts = {});
  std::vector<Future<ExecuteOutput>> execute_async(const Executable& exe, const std::vector<ExecuteArgs>& args,
                                                   const ExecuteOptions& opts = {});

  // --- Convenience layer (throws runtime::Error or the isa/sim/compiler library's error; device 0).
  // Assembles a kernel file (kernels/*.s, or any file that includes them) with the chip's symbols and `defines`.
  Executable assemble_file(const std::string& path, const std::map<std::string, int64_t>& defines = {}) const;
  // Compiles an ONNX model for this chip (cached); `input_shapes` gives values for dynamic dimensions.
  Executable compile_onnx_file(const std::string& path,
                               const std::map<std::string, std::vector<int64_t>>& input_shapes = {}) const;
  Executable compile_onnx_file(const std::string& path, const CompileOptions& opts);
  // .s -> assemble, .onnx -> compile, anything else -> a .tpub binary.
  Executable load_file(const std::string& path, const std::map<std::string, int64_t>& defines = {},
                       const std::map<std::string, std::vector<int64_t>>& input_shapes = {}) const;
  void check_fits(const Executable& exe) const;  // fits(), thrown
  // Checks `inputs` against the executable's declarations (every input given, names known, dtype and shape
  // equal; float32 data for a bf16 or f8e4m3 input is rounded to it, to nearest even, as vpu.cast), then runs it on device 0 with
  // zero-copy inputs and host-memory outputs, and waits.
  ExecuteResult execute(const Executable& exe, const std::map<std::string, HostTensor>& inputs,
                        const ExecuteOptions& opts = {});

 private:
  Client() = default;
  void start(const sim::ChipConfig& cfg, int num_devices);  // elaborates; throws
  StatusOr<Executable> compile(const detail::ModelSource& src, const CompileOptions& opts);
  std::shared_ptr<detail::ClientCore> core_;
};

// Deterministic pseudo-random tensor of a declaration's dtype and shape, for timing runs and demos: i8 uniform in
// [-128, 127]; i32 in [0, 15] (i32 inputs are usually indices such as token ids, and these are valid for any
// table of at least 16 rows); floats uniform in [-1, 1).
HostTensor random_tensor(const isa::TensorDecl& decl, uint64_t seed);
std::string describe(const isa::TensorDecl& decl);  // "a: i8 [384, 256]"

}  // namespace tpusim::runtime
