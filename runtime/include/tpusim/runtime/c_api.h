/* The runtime's C API: the objects of runtime.h behind opaque handles, so that other languages can bind to them
 * (docs/architecture.md, "Conventions": shaped like PjRT's C API, openxla/xla xla/pjrt/c/pjrt_c_api.h).
 *
 * Conventions, for every function below:
 * - Each call takes one arguments struct, whose first field `struct_size` the caller sets to the struct's
 *   `<Type>_STRUCT_SIZE` constant. Fields are only ever added at the end of a struct; the library reads a field
 *   only if `struct_size` covers it, so a caller built against an older header keeps working.
 * - Each call returns NULL on success or a TpusimError* that the caller owns and destroys with
 *   tpusim_error_destroy (only the three tpusim_error_* functions return something else).
 * - Fields marked "out" are written by the call (only on success); every other field is read.
 * - Handles (TpusimClient, TpusimBuffer, TpusimExecutable, TpusimExecution, TpusimEvent) made by a call belong
 *   to the caller, who destroys each exactly once with its *_destroy function. Handles are independent: any may
 *   be destroyed in any order (a buffer may outlive its client; calls that need the client then fail with
 *   TPUSIM_FAILED_PRECONDITION). Strings and arrays a call hands out are owned by the handle they came from and
 *   stay valid until that handle is destroyed, unless a field says otherwise.
 * - Any thread may call any function; one handle may be used by several threads at once, except that a handle
 *   must not be destroyed while another thread uses it.
 * - Asynchronous work (copies to the host, executions) returns a TpusimEvent (or a TpusimExecution with one).
 *   Malformed arguments (a NULL handle, a short struct_size, a bad dtype) are reported by the call itself; what
 *   the runtime finds when doing the work (a wrong shape, a deleted buffer, a fault of the simulated chip) is
 *   reported by awaiting the event.
 * - An event is ready when the work is done and its results are in place (as in PjRT): a buffer's bytes are in
 *   device memory, a copy's destination is filled, an execution's outputs exist. Host memory a call reads is
 *   copied before the call returns unless the call says otherwise (zero_copy); memory a call writes
 *   asynchronously (tpusim_buffer_to_host's dst) must stay valid until its event is ready.
 * - One client per process (the simulator elaborates its chips once per process): a second
 *   tpusim_client_create, even after the first client is destroyed, fails with TPUSIM_FAILED_PRECONDITION.
 */
#ifndef TPUSIM_RUNTIME_C_API_H_
#define TPUSIM_RUNTIME_C_API_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TPUSIM_C_API_VERSION 2

#define TPUSIM_STRUCT_SIZE(type, last_field) (offsetof(type, last_field) + sizeof(((type*)0)->last_field))
/* Declares `type` and its constant `type##_STRUCT_SIZE` (the struct's size up to and including last_field). */
#define TPUSIM_DEFINE_STRUCT_TRAITS(type, last_field) \
  enum { type##_STRUCT_SIZE = TPUSIM_STRUCT_SIZE(type, last_field) }

/* ---------------------------------------------------------------------------------------------------------------
 * Handles and enums */

typedef struct TpusimError TpusimError;
typedef struct TpusimClient TpusimClient;
typedef struct TpusimBuffer TpusimBuffer;
typedef struct TpusimExecutable TpusimExecutable;
typedef struct TpusimExecution TpusimExecution;
typedef struct TpusimEvent TpusimEvent;

/* The runtime's StatusCode, value for value. */
typedef enum {
  TPUSIM_OK = 0,
  TPUSIM_INVALID_ARGUMENT = 1,     /* a caller's mistake: wrong shape, dtype, device, name; a deleted buffer */
  TPUSIM_NOT_FOUND = 2,            /* a file, preset or name that does not exist */
  TPUSIM_OUT_OF_MEMORY = 3,        /* a device's HBM cannot hold the request */
  TPUSIM_FAILED_PRECONDITION = 4,  /* the object's state does not allow the call (e.g. its client is gone) */
  TPUSIM_ABORTED = 5,              /* the simulated chip faulted while running */
  TPUSIM_INTERNAL = 6,             /* a bug */
} TpusimErrorCode;

/* isa::DType, value for value. Elements are little-endian; bf16 is the upper half of an IEEE float32; f8e4m3 is
   one byte of OCP FP8 E4M3 ("fn": torch.float8_e4m3fn's bits, docs/isa.md "Numerics"). */
typedef enum {
  TPUSIM_DTYPE_I8 = 0,
  TPUSIM_DTYPE_I32 = 1,
  TPUSIM_DTYPE_BF16 = 2,
  TPUSIM_DTYPE_F32 = 3,
  TPUSIM_DTYPE_F8E4M3 = 4,
} TpusimDType;

/* How an ONNX model is compiled (runtime::CompileOptions::precision). */
typedef enum {
  TPUSIM_PRECISION_BF16 = 0,  /* matmuls and convolutions in bf16, f32 accumulation */
  TPUSIM_PRECISION_INT8 = 1,  /* post-training quantisation, activation scales calibrated on sample inputs */
} TpusimPrecision;

/* A tensor in host memory, read by the call that takes it (and copied if kept). */
typedef struct {
  const char* name;
  TpusimDType dtype;
  const int64_t* dims;
  size_t num_dims;
  const void* data;                /* row-major, product(dims) elements */
} TpusimHostTensor;

/* ---------------------------------------------------------------------------------------------------------------
 * Errors. A NULL error means success: tpusim_error_code(NULL) is TPUSIM_OK. */

TpusimErrorCode tpusim_error_code(const TpusimError* error);
/* One line, e.g. "input 'a': expected i8 [16, 32], got i8 [32, 16]"; owned by the error ("" for NULL). */
const char* tpusim_error_message(const TpusimError* error);
void tpusim_error_destroy(TpusimError* error); /* NULL is allowed */
const char* tpusim_error_code_name(TpusimErrorCode code); /* "INVALID_ARGUMENT", ...; a static string */

/* ---------------------------------------------------------------------------------------------------------------
 * Client: N identical simulated chips (devices 0 .. N-1) and the simulation thread that runs them. */

typedef struct {
  size_t struct_size;
  const char* config;              /* a preset name ("edge", "v4-like", ...) or an INI file's path; NULL: default */
  const char* const* overrides;    /* num_overrides "section.key=value" strings applied after `config` */
  size_t num_overrides;
  int32_t num_devices;             /* 0 means 1 */
  TpusimClient* client;            /* out; destroy with tpusim_client_destroy */
} TpusimClientCreateArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientCreateArgs, client);
/* TPUSIM_NOT_FOUND for an unknown preset or missing file; TPUSIM_INVALID_ARGUMENT for a bad key or value;
 * TPUSIM_FAILED_PRECONDITION if this process already made a client (see the conventions above). Synchronous:
 * the chips are elaborated when it returns. */
TpusimError* tpusim_client_create(TpusimClientCreateArgs* args);

typedef struct {
  size_t struct_size;
  TpusimClient* client;            /* finishes the queued work, stops the simulation thread, frees the handle */
} TpusimClientDestroyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientDestroyArgs, client);
TpusimError* tpusim_client_destroy(TpusimClientDestroyArgs* args);

typedef struct {
  size_t struct_size;
  TpusimClient* client;
  int32_t num_devices;             /* out */
} TpusimClientDeviceCountArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientDeviceCountArgs, num_devices);
TpusimError* tpusim_client_device_count(TpusimClientDeviceCountArgs* args);

typedef struct {
  size_t struct_size;
  TpusimClient* client;
  int32_t device;
  const char* description;         /* out: "tpusim:0 (edge, mxu 32x32, 500 MHz, hbm ...)"; owned by the client */
  const char* chip;                /* out: the config's chip.name; owned by the client */
} TpusimClientDeviceDescriptionArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientDeviceDescriptionArgs, chip);
TpusimError* tpusim_client_device_description(TpusimClientDeviceDescriptionArgs* args);

/* The client's counters: its executable cache, and one device's HBM allocator. */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  int32_t device;                  /* whose memory counters to read */
  uint64_t compilations;           /* out: ONNX models compiled */
  uint64_t cache_hits;             /* out: compiles and loads answered from the cache */
  uint64_t live_buffers;           /* out: device memory allocations not yet freed */
  uint64_t live_bytes;             /* out: their sizes */
  uint64_t peak_bytes;             /* out: the most live_bytes ever was */
  uint64_t total_allocations;      /* out: allocations made so far */
} TpusimClientStatsArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientStatsArgs, total_allocations);
TpusimError* tpusim_client_stats(TpusimClientStatsArgs* args);

/* Memory spaces (as PjRT's): index 0 .. N-1 are the devices' HBM, index N is "host" (zero-copy buffers). */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  size_t index;
  size_t num_memory_spaces;        /* out: N + 1 */
  const char* name;                /* out: "device 0 hbm", ..., "host"; owned by the client */
  int32_t device;                  /* out: the device whose HBM it is; -1 for host */
  uint64_t capacity;               /* out: bytes (0 for host: unbounded) */
  bool is_host;                    /* out */
} TpusimClientMemorySpaceArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimClientMemorySpaceArgs, is_host);
TpusimError* tpusim_client_memory_space(TpusimClientMemorySpaceArgs* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Buffers: device arrays in a device's HBM (or, zero-copy, in the caller's host memory). */

typedef struct {
  size_t struct_size;
  TpusimClient* client;
  const void* data;                /* row-major; copied before the call returns unless zero_copy */
  TpusimDType dtype;
  const int64_t* dims;             /* num_dims dimensions (0 dims: a scalar) */
  size_t num_dims;
  int32_t device;
  TpusimBuffer* buffer;            /* out; destroy with tpusim_buffer_destroy. Ready (for executions and copies)
                                      once the bytes are in HBM; later work on it waits for that by itself */
  /* Version 2: */
  bool zero_copy;                  /* true: not copied; the buffer refers to `data`, which must stay valid and
                                      unchanged until the buffer is deleted or its last handle destroyed (and
                                      every execution using it has finished). It is in host memory, takes no HBM. */
} TpusimBufferFromHostArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferFromHostArgs, zero_copy);
TpusimError* tpusim_buffer_from_host(TpusimBufferFromHostArgs* args);

/* Copies the buffer's bytes to `dst`, asynchronously. With dst == NULL, only sets dst_size to the bytes needed
 * (and no event). Otherwise dst_size must be at least that; `event` becomes ready when dst holds the bytes (or
 * with the error that prevented it). dst must stay valid until the event is ready, even if the event is
 * destroyed unawaited (the copy still happens). */
typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
  void* dst;
  size_t dst_size;                 /* in, and out when dst == NULL */
  TpusimEvent* event;              /* out (dst != NULL); destroy with tpusim_event_destroy */
} TpusimBufferToHostArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferToHostArgs, event);
TpusimError* tpusim_buffer_to_host(TpusimBufferToHostArgs* args);

typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
  const int64_t* dims;             /* out; owned by the buffer */
  size_t num_dims;                 /* out */
} TpusimBufferDimsArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferDimsArgs, num_dims);
TpusimError* tpusim_buffer_dims(TpusimBufferDimsArgs* args);

typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
  TpusimDType dtype;               /* out */
  int32_t device;                  /* out */
  size_t size_in_bytes;            /* out */
  bool is_deleted;                 /* out */
  /* Version 2: */
  bool is_host_memory;             /* out: the buffer is in the host memory space (zero-copy), not in HBM */
} TpusimBufferInfoArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferInfoArgs, is_host_memory);
TpusimError* tpusim_buffer_info(TpusimBufferInfoArgs* args);

/* An event ready when the buffer's bytes are in place (PjRT's ready event): at once for zero-copy buffers, when
 * the host-to-device copy is done for others, when its execution has finished for outputs. Work queued on the
 * buffer waits for it by itself: the event is for callers that want to know. */
typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
  TpusimEvent* event;              /* out; destroy with tpusim_event_destroy */
} TpusimBufferReadyEventArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferReadyEventArgs, event);
TpusimError* tpusim_buffer_ready_event(TpusimBufferReadyEventArgs* args);

/* Releases the buffer's device memory now (or when the last execution using it finishes). The handle stays
 * valid and must still be destroyed; using it for a copy or an execution is then a TPUSIM_INVALID_ARGUMENT
 * error (from the event). Other handles to the same device array (tpusim_execution_output) see it deleted. */
typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
} TpusimBufferDeleteArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferDeleteArgs, buffer);
TpusimError* tpusim_buffer_delete(TpusimBufferDeleteArgs* args);

/* Frees the handle; the device memory goes when no handle or running execution refers to it any more. */
typedef struct {
  size_t struct_size;
  TpusimBuffer* buffer;
} TpusimBufferDestroyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimBufferDestroyArgs, buffer);
TpusimError* tpusim_buffer_destroy(TpusimBufferDestroyArgs* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Executables: immutable programs with named input and output tensors. An executable does not belong to a
 * client (the client argument gives the chip it is built for) and may outlive it. */

/* Compiles an ONNX model for the client's chip, synchronously. Cached by the client: a file by its canonical
 * path, modification time and size; bytes by their content; and the options. */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  const char* path;                /* an .onnx file; with `bytes`, only the model's name (NULL: "model.onnx") */
  /* Values for dynamic input dimensions: input shape_names[i] has shape_num_dims[i] dims shape_dims[i]. */
  const char* const* shape_names;
  const int64_t* const* shape_dims;
  const size_t* shape_num_dims;
  size_t num_shapes;
  TpusimExecutable* executable;    /* out; destroy with tpusim_executable_destroy */
  /* Version 2: */
  const void* bytes;               /* non-NULL: a serialized ONNX ModelProto in memory (read during the call) */
  size_t num_bytes;
  TpusimPrecision precision;       /* 0 (BF16) by default */
  /* INT8: calibration inputs, num_calibration tensors in sets of calibration_set_size consecutive ones, each set
   * giving every model input by name (calibration_set_size 0: one set). The model is run on each set first. */
  const TpusimHostTensor* calibration;
  size_t num_calibration;
  size_t calibration_set_size;
  /* Version 3: */
  bool timing_only;                /* true: a program for timing-only runs only (runtime::CompileOptions::
                                      timing_only): the same instructions and cycles, without reading, converting
                                      or laying out the weights' values, and (INT8) without calibration runs; a
                                      run of it that is not timing_only fails with TPUSIM_INVALID_ARGUMENT */
} TpusimExecutableCompileOnnxArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableCompileOnnxArgs, timing_only);
TpusimError* tpusim_executable_compile_onnx(TpusimExecutableCompileOnnxArgs* args);

/* Assembles a kernel file (kernels/ *.s, or one that .includes them) with the chip's symbols (MXU_ROWS, ...)
 * and the caller's defines (define_names[i] = define_values[i]). */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  const char* path;
  const char* const* define_names;
  const int64_t* define_values;
  size_t num_defines;
  TpusimExecutable* executable;    /* out; destroy with tpusim_executable_destroy */
} TpusimExecutableAssembleArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableAssembleArgs, executable);
TpusimError* tpusim_executable_assemble(TpusimExecutableAssembleArgs* args);

/* Loads a serialized program: from `bytes` (num_bytes of them) if bytes != NULL, else from the .tpub file at
 * `path`. Equal programs come back from the client's cache. */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  const void* bytes;
  size_t num_bytes;
  const char* path;
  TpusimExecutable* executable;    /* out; destroy with tpusim_executable_destroy */
} TpusimExecutableDeserializeArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableDeserializeArgs, executable);
TpusimError* tpusim_executable_deserialize(TpusimExecutableDeserializeArgs* args);

typedef struct {
  size_t struct_size;
  TpusimExecutable* executable;
  uint8_t* bytes;                  /* out: the .tpub bytes, allocated with malloc(); the caller free()s them */
  size_t num_bytes;                /* out */
} TpusimExecutableSerializeArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableSerializeArgs, num_bytes);
TpusimError* tpusim_executable_serialize(TpusimExecutableSerializeArgs* args);

typedef struct {
  size_t struct_size;
  TpusimExecutable* executable;
  uint64_t fingerprint;            /* out: FNV-1a 64 of the serialized program; equal programs, equal values */
  char fingerprint_hex[17];        /* out: the same as 16 lowercase hex digits and a NUL */
  const char* name;                /* out: the program's name; owned by the executable */
} TpusimExecutableFingerprintArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableFingerprintArgs, name);
TpusimError* tpusim_executable_fingerprint(TpusimExecutableFingerprintArgs* args);

typedef struct {
  size_t struct_size;
  TpusimExecutable* executable;
  size_t num_inputs;               /* out */
  size_t num_outputs;              /* out */
} TpusimExecutableIoCountArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableIoCountArgs, num_outputs);
TpusimError* tpusim_executable_io_count(TpusimExecutableIoCountArgs* args);

/* One input or output tensor, in the program's declaration order. */
typedef struct {
  size_t struct_size;
  TpusimExecutable* executable;
  bool is_output;                  /* false: input `index`; true: output `index` */
  size_t index;
  const char* name;                /* out; owned by the executable */
  TpusimDType dtype;               /* out */
  const int64_t* dims;             /* out; owned by the executable */
  size_t num_dims;                 /* out */
} TpusimExecutableIoArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableIoArgs, num_dims);
TpusimError* tpusim_executable_io(TpusimExecutableIoArgs* args);

typedef struct {
  size_t struct_size;
  TpusimExecutable* executable;
} TpusimExecutableDestroyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutableDestroyArgs, executable);
TpusimError* tpusim_executable_destroy(TpusimExecutableDestroyArgs* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Execution: runs an executable on one device, asynchronously. The run happens on the simulation thread in
 * submission order; `done` becomes ready when it has finished, and awaiting it returns the run's error (a wrong
 * input name, dtype or shape, a deleted buffer, a fault). The TpusimExecution holds its results. */

typedef struct {
  size_t struct_size;
  TpusimClient* client;
  TpusimExecutable* executable;
  int32_t device;
  const char* const* input_names;  /* every input of the program, by name: input_names[i] is input_buffers[i] */
  TpusimBuffer* const* input_buffers; /* the buffers may be destroyed once the call returns */
  size_t num_inputs;
  bool timing_only;                /* true: no arithmetic, no outputs (cycles and stats only) */
  uint64_t max_cycles;             /* 0: no limit; a run that exceeds it fails (TPUSIM_ABORTED) */
  TpusimExecution* execution;      /* out; destroy with tpusim_execution_destroy */
  TpusimEvent* done;               /* out; destroy with tpusim_event_destroy */
  /* Version 2: */
  const char* const* donate;       /* inputs (by name) whose buffers are donated: deleted by the call (every
                                      handle sees them deleted), their HBM reused for an output of the same size */
  size_t num_donate;
} TpusimExecuteArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecuteArgs, num_donate);
TpusimError* tpusim_execute(TpusimExecuteArgs* args);

/* One call on several devices (PjRT's execute with one argument list per device): the devices run together in
 * one simulation. Each device gets its own execution and event, ready with that device's outcome (a device
 * whose arguments are wrong fails alone). */
typedef struct {
  size_t struct_size;
  TpusimClient* client;
  TpusimExecutable* executable;
  size_t num_devices;
  const int32_t* devices;          /* num_devices distinct devices */
  const char* const* input_names;  /* num_inputs names, the same for every device */
  size_t num_inputs;
  TpusimBuffer* const* const* argument_lists; /* [num_devices][num_inputs]: device i's buffer for input j */
  const char* const* donate;       /* as TpusimExecuteArgs, on every device */
  size_t num_donate;
  bool timing_only;
  uint64_t max_cycles;
  TpusimExecution** executions;    /* the caller's array of num_devices; out: one execution per device */
  TpusimEvent** done;              /* the caller's array of num_devices; out: one event per device */
} TpusimExecuteDevicesArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecuteDevicesArgs, done);
TpusimError* tpusim_execute_devices(TpusimExecuteDevicesArgs* args);

/* The functions below wait for the run if it has not finished, and return its error if it failed. */

typedef struct {
  size_t struct_size;
  TpusimExecution* execution;
  size_t num_outputs;              /* out: the program's outputs (0 for a timing-only run) */
} TpusimExecutionOutputCountArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutionOutputCountArgs, num_outputs);
TpusimError* tpusim_execution_output_count(TpusimExecutionOutputCountArgs* args);

/* Output `index`, in the order of tpusim_executable_io's outputs. Each call makes a new handle to the same
 * device array (deleting one deletes it for all). */
typedef struct {
  size_t struct_size;
  TpusimExecution* execution;
  size_t index;
  const char* name;                /* out; owned by the execution */
  TpusimBuffer* buffer;            /* out; destroy with tpusim_buffer_destroy */
} TpusimExecutionOutputArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutionOutputArgs, buffer);
TpusimError* tpusim_execution_output(TpusimExecutionOutputArgs* args);

typedef struct {
  size_t struct_size;
  TpusimExecution* execution;
  uint64_t cycles;                 /* out: simulated cycles of the run */
  double seconds;                  /* out: the same at the chip's clock */
  const char* stats_json;          /* out: the stats file (`tpusim run --stats`'s JSON); owned by the execution */
  size_t stats_json_size;          /* out: strlen(stats_json) */
} TpusimExecutionStatsArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutionStatsArgs, stats_json_size);
TpusimError* tpusim_execution_stats(TpusimExecutionStatsArgs* args);

/* Frees the handle; a run still going goes on (its outputs are freed when it ends). */
typedef struct {
  size_t struct_size;
  TpusimExecution* execution;
} TpusimExecutionDestroyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimExecutionDestroyArgs, execution);
TpusimError* tpusim_execution_destroy(TpusimExecutionDestroyArgs* args);

/* ---------------------------------------------------------------------------------------------------------------
 * Events: the completion of asynchronous work. */

/* Blocks until the event is ready; returns the work's error (NULL if it succeeded). May be called any number of
 * times, from any thread; each call returns a new error object. */
typedef struct {
  size_t struct_size;
  TpusimEvent* event;
} TpusimEventAwaitArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimEventAwaitArgs, event);
TpusimError* tpusim_event_await(TpusimEventAwaitArgs* args);

typedef struct {
  size_t struct_size;
  TpusimEvent* event;
  bool is_ready;                   /* out: true once awaiting would not block */
} TpusimEventIsReadyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimEventIsReadyArgs, is_ready);
TpusimError* tpusim_event_is_ready(TpusimEventIsReadyArgs* args);

/* Frees the handle without waiting; the work goes on (see tpusim_buffer_to_host for what happens to dst). */
typedef struct {
  size_t struct_size;
  TpusimEvent* event;
} TpusimEventDestroyArgs;
TPUSIM_DEFINE_STRUCT_TRAITS(TpusimEventDestroyArgs, event);
TpusimError* tpusim_event_destroy(TpusimEventDestroyArgs* args);

#ifdef __cplusplus
}
#endif

#endif /* TPUSIM_RUNTIME_C_API_H_ */
