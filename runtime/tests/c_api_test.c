/* The C API (c_api.h), used from C as a binding in another language would: a client on the "edge" preset, an
 * int8 GEMM assembled from kernels/gemm_int8.s, input buffers, an asynchronous execution, the output read back
 * and checked against a plain C loop; then the error paths (an unknown preset, a wrong-shape input, a deleted
 * buffer) and the lifetimes (every handle destroyed once; run under -fsanitize=address it reports no leak).
 * One process, one client (SystemC elaborates once per process). */
#include "tpusim/runtime/c_api.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                  \
  do {                                                                \
    if (!(cond)) {                                                    \
      fprintf(stderr, "%s:%d: EXPECT(%s) failed\n", __FILE__, __LINE__, #cond); \
      ++failures;                                                     \
    }                                                                 \
  } while (0)

/* A call that must succeed: prints the error and stops the test otherwise. */
#define OK(call)                                                                                 \
  do {                                                                                           \
    TpusimError* err_ = (call);                                                                  \
    if (err_) {                                                                                  \
      fprintf(stderr, "%s:%d: %s failed: %s: %s\n", __FILE__, __LINE__, #call,                   \
              tpusim_error_code_name(tpusim_error_code(err_)), tpusim_error_message(err_));      \
      tpusim_error_destroy(err_);                                                                \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

/* A call that must fail with `code` and a message containing `part`. */
static void expect_error(TpusimError* err, TpusimErrorCode code, const char* part, int line) {
  if (!err) {
    fprintf(stderr, "line %d: expected %s, got success\n", line, tpusim_error_code_name(code));
    ++failures;
    return;
  }
  if (tpusim_error_code(err) != code || !strstr(tpusim_error_message(err), part)) {
    fprintf(stderr, "line %d: expected %s containing \"%s\", got %s: %s\n", line, tpusim_error_code_name(code),
            part, tpusim_error_code_name(tpusim_error_code(err)), tpusim_error_message(err));
    ++failures;
  }
  tpusim_error_destroy(err);
}
#define EXPECT_ERROR(call, code, part) expect_error((call), (code), (part), __LINE__)

enum { M = 24, K = 40, N = 36 }; /* not multiples of the edge chip's 32x32 array: the edges are exercised */

/* A buffer of `data` (d0 x d1 of dtype) on `device`; zero_copy: referring to data instead of copying it. */
static TpusimBuffer* upload_to(TpusimClient* client, const void* data, TpusimDType dtype, int64_t d0, int64_t d1,
                               int32_t device, bool zero_copy) {
  int64_t dims[2] = {d0, d1};
  TpusimBufferFromHostArgs a = {0};
  a.struct_size = TpusimBufferFromHostArgs_STRUCT_SIZE;
  a.client = client;
  a.data = data;
  a.dtype = dtype;
  a.dims = dims;
  a.num_dims = 2;
  a.device = device;
  a.zero_copy = zero_copy;
  OK(tpusim_buffer_from_host(&a));
  return a.buffer;
}
static TpusimBuffer* upload(TpusimClient* client, const void* data, TpusimDType dtype, int64_t d0, int64_t d1) {
  return upload_to(client, data, dtype, d0, d1, 0, false);
}

static void destroy_buffer(TpusimBuffer* b) {
  TpusimBufferDestroyArgs a = {TpusimBufferDestroyArgs_STRUCT_SIZE, b};
  OK(tpusim_buffer_destroy(&a));
}
static void destroy_event(TpusimEvent* e) {
  TpusimEventDestroyArgs a = {TpusimEventDestroyArgs_STRUCT_SIZE, e};
  OK(tpusim_event_destroy(&a));
}
static void destroy_execution(TpusimExecution* x) {
  TpusimExecutionDestroyArgs a = {TpusimExecutionDestroyArgs_STRUCT_SIZE, x};
  OK(tpusim_execution_destroy(&a));
}
static TpusimError* await_event(TpusimEvent* e) {
  TpusimEventAwaitArgs a = {TpusimEventAwaitArgs_STRUCT_SIZE, e};
  return tpusim_event_await(&a);
}

/* Starts the GEMM with inputs a and b; the caller awaits *done and destroys both handles. */
static TpusimExecution* run_gemm(TpusimClient* client, TpusimExecutable* exe, TpusimBuffer* a, TpusimBuffer* b,
                                 TpusimEvent** done) {
  const char* names[2] = {"a", "b"};
  TpusimBuffer* buffers[2] = {a, b};
  TpusimExecuteArgs x = {0};
  x.struct_size = TpusimExecuteArgs_STRUCT_SIZE;
  x.client = client;
  x.executable = exe;
  x.device = 0;
  x.input_names = names;
  x.input_buffers = buffers;
  x.num_inputs = 2;
  OK(tpusim_execute(&x));
  *done = x.done;
  return x.execution;
}

static TpusimClientStatsArgs client_stats(TpusimClient* client, int32_t device) {
  TpusimClientStatsArgs a = {0};
  a.struct_size = TpusimClientStatsArgs_STRUCT_SIZE;
  a.client = client;
  a.device = device;
  OK(tpusim_client_stats(&a));
  return a;
}

/* Issue 14, bug 2: a second client was accepted (and crashed the first later). */
static void test_second_client_is_refused(void) {
  TpusimClientCreateArgs a = {0};
  a.struct_size = TpusimClientCreateArgs_STRUCT_SIZE;
  a.config = "edge";
  TpusimError* err = tpusim_client_create(&a);
  EXPECT(tpusim_error_code(err) == TPUSIM_FAILED_PRECONDITION);
  EXPECT(strstr(tpusim_error_message(err), "already made") != NULL);
  EXPECT(strchr(tpusim_error_message(err), '\n') == NULL); /* one line */
  tpusim_error_destroy(err);
}

/* Issue 14, bug 3: the event of a copy to the host was ready before dst was filled (it was filled in await).
 * Polled without awaiting: once ready, dst must hold the bytes. */
static void test_to_host_event_ready_means_filled(TpusimBuffer* buffer, const int32_t* expected, size_t n) {
  int32_t* dst = malloc(n * sizeof *dst);
  for (size_t i = 0; i < n; ++i) dst[i] = -7;
  TpusimBufferToHostArgs th = {0};
  th.struct_size = TpusimBufferToHostArgs_STRUCT_SIZE;
  th.buffer = buffer;
  th.dst = dst;
  th.dst_size = n * sizeof *dst;
  OK(tpusim_buffer_to_host(&th));
  TpusimEventIsReadyArgs r = {TpusimEventIsReadyArgs_STRUCT_SIZE, th.event, false};
  do OK(tpusim_event_is_ready(&r));
  while (!r.is_ready);
  EXPECT(memcmp(dst, expected, n * sizeof *dst) == 0);
  destroy_event(th.event);
  free(dst);
}

/* Several devices in one call (issue 14: also bug 1's reproducer in C): device 1 gets a wrong-shape input and
 * fails alone; device 0 computes the GEMM. */
static void test_execute_devices(TpusimClient* client, TpusimExecutable* exe, const int8_t* a, const int8_t* b,
                                 const int32_t* expected) {
  TpusimBuffer* a0 = upload(client, a, TPUSIM_DTYPE_I8, M, K);
  TpusimBuffer* b0 = upload(client, b, TPUSIM_DTYPE_I8, K, N);
  TpusimBuffer* b1 = upload_to(client, b, TPUSIM_DTYPE_I8, K, N, 1, false);
  const char* names[2] = {"a", "b"};
  TpusimBuffer* list0[2] = {a0, b0};
  TpusimBuffer* list1[2] = {b1, b1}; /* b where a goes */
  TpusimBuffer* const* lists[2] = {list0, list1};
  int32_t devices[2] = {0, 1};
  TpusimExecution* xs[2] = {NULL, NULL};
  TpusimEvent* done[2] = {NULL, NULL};
  TpusimExecuteDevicesArgs x = {0};
  x.struct_size = TpusimExecuteDevicesArgs_STRUCT_SIZE;
  x.client = client;
  x.executable = exe;
  x.num_devices = 2;
  x.devices = devices;
  x.input_names = names;
  x.num_inputs = 2;
  x.argument_lists = lists;
  x.executions = xs;
  x.done = done;
  OK(tpusim_execute_devices(&x));
  EXPECT_ERROR(await_event(done[1]), TPUSIM_INVALID_ARGUMENT, "input 'a': expected i8 [24, 40], got i8 [40, 36]");
  OK(await_event(done[0]));
  TpusimExecutionOutputArgs out = {0};
  out.struct_size = TpusimExecutionOutputArgs_STRUCT_SIZE;
  out.execution = xs[0];
  OK(tpusim_execution_output(&out));
  test_to_host_event_ready_means_filled(out.buffer, expected, M * N);
  destroy_buffer(out.buffer);
  for (int d = 0; d < 2; ++d) {
    destroy_event(done[d]);
    destroy_execution(xs[d]);
  }
  destroy_buffer(a0);
  destroy_buffer(b0);
  destroy_buffer(b1);
}

/* A zero-copy input (no HBM) and a donated one (deleted by the call): the same GEMM result. */
static void test_zero_copy_and_donation(TpusimClient* client, TpusimExecutable* exe, const int8_t* a, const int8_t* b,
                                        const int32_t* expected) {
  const uint64_t live = client_stats(client, 0).live_buffers;
  TpusimBuffer* za = upload_to(client, a, TPUSIM_DTYPE_I8, M, K, 0, true);
  EXPECT(client_stats(client, 0).live_buffers == live); /* no HBM */
  TpusimBufferInfoArgs bi = {0};
  bi.struct_size = TpusimBufferInfoArgs_STRUCT_SIZE;
  bi.buffer = za;
  OK(tpusim_buffer_info(&bi));
  EXPECT(bi.is_host_memory && !bi.is_deleted);
  TpusimBuffer* db = upload(client, b, TPUSIM_DTYPE_I8, K, N);
  EXPECT(client_stats(client, 0).live_buffers == live + 1);
  const char* names[2] = {"a", "b"};
  TpusimBuffer* buffers[2] = {za, db};
  const char* donate[1] = {"b"};
  TpusimExecuteArgs x = {0};
  x.struct_size = TpusimExecuteArgs_STRUCT_SIZE;
  x.client = client;
  x.executable = exe;
  x.input_names = names;
  x.input_buffers = buffers;
  x.num_inputs = 2;
  x.donate = donate;
  x.num_donate = 1;
  OK(tpusim_execute(&x));
  bi.buffer = db;
  OK(tpusim_buffer_info(&bi));
  EXPECT(bi.is_deleted && !bi.is_host_memory); /* donated: deleted at the call */
  OK(await_event(x.done));
  TpusimExecutionOutputArgs out = {0};
  out.struct_size = TpusimExecutionOutputArgs_STRUCT_SIZE;
  out.execution = x.execution;
  OK(tpusim_execution_output(&out));
  test_to_host_event_ready_means_filled(out.buffer, expected, M * N);
  EXPECT(client_stats(client, 0).live_buffers == live + 1); /* the output; b's memory went with it */
  destroy_buffer(out.buffer);
  destroy_event(x.done);
  destroy_execution(x.execution);
  destroy_buffer(za);
  destroy_buffer(db);
  EXPECT(client_stats(client, 0).live_buffers == live);
}

/* Issue 14, bug 4 (compile from bytes; the cache keyed by canonical path or by content) and the int8 option. */
static char* read_file(const char* path, size_t* n) {
  FILE* f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long size = ftell(f);
  fseek(f, 0, SEEK_SET);
  char* p = malloc(size > 0 ? (size_t)size : 1);
  *n = fread(p, 1, (size_t)size, f);
  fclose(f);
  return p;
}

static TpusimExecutable* compile(TpusimClient* client, const char* path, const void* bytes, size_t num_bytes) {
  TpusimExecutableCompileOnnxArgs c = {0};
  c.struct_size = TpusimExecutableCompileOnnxArgs_STRUCT_SIZE;
  c.client = client;
  c.path = path;
  c.bytes = bytes;
  c.num_bytes = num_bytes;
  OK(tpusim_executable_compile_onnx(&c));
  return c.executable;
}

static uint64_t fingerprint(TpusimExecutable* exe) {
  TpusimExecutableFingerprintArgs fp = {0};
  fp.struct_size = TpusimExecutableFingerprintArgs_STRUCT_SIZE;
  fp.executable = exe;
  OK(tpusim_executable_fingerprint(&fp));
  return fp.fingerprint;
}

static void destroy_executable(TpusimExecutable* e) {
  TpusimExecutableDestroyArgs a = {TpusimExecutableDestroyArgs_STRUCT_SIZE, e};
  OK(tpusim_executable_destroy(&a));
}

static void test_compile_from_bytes_and_cache(TpusimClient* client) {
  const char* path = TPUSIM_WORKLOADS_DIR "/mlp/mlp.onnx";
  const char* other_spelling = TPUSIM_WORKLOADS_DIR "/mlp/../mlp/./mlp.onnx";
  size_t n = 0;
  char* bytes = read_file(path, &n);
  if (!bytes) {
    fprintf(stderr, "cannot read %s (the workloads target exports it)\n", path);
    ++failures;
    return;
  }
  const TpusimClientStatsArgs before = client_stats(client, 0);
  TpusimExecutable* e1 = compile(client, path, NULL, 0);
  TpusimExecutable* e2 = compile(client, other_spelling, NULL, 0);
  EXPECT(client_stats(client, 0).compilations == before.compilations + 1); /* one file, two spellings */
  EXPECT(client_stats(client, 0).cache_hits == before.cache_hits + 1);
  TpusimExecutable* b1 = compile(client, "mlp.onnx", bytes, n);
  TpusimExecutable* b2 = compile(client, NULL, bytes, n); /* the same content, another name: "model" */
  TpusimExecutable* b3 = compile(client, "in/memory/mlp.onnx", bytes, n);
  EXPECT(client_stats(client, 0).compilations == before.compilations + 3);
  EXPECT(fingerprint(e1) == fingerprint(e2) && fingerprint(b1) == fingerprint(e1) && fingerprint(b3) == fingerprint(b1));
  EXPECT(fingerprint(b2) != fingerprint(b1)); /* the program's name differs */
  TpusimExecutableCompileOnnxArgs c = {0};
  c.struct_size = TpusimExecutableCompileOnnxArgs_STRUCT_SIZE;
  c.client = client;
  c.path = "junk.onnx";
  c.bytes = "junk";
  c.num_bytes = 4;
  EXPECT_ERROR(tpusim_executable_compile_onnx(&c), TPUSIM_INVALID_ARGUMENT, "junk.onnx");
  /* int8: without calibration, an error; with one set of inputs (x: f32 [8, 64]), another program. */
  c.bytes = bytes;
  c.num_bytes = n;
  c.path = "mlp.onnx";
  c.precision = TPUSIM_PRECISION_INT8;
  EXPECT_ERROR(tpusim_executable_compile_onnx(&c), TPUSIM_INVALID_ARGUMENT, "int8 needs calibration inputs");
  static float x[8 * 64];
  for (int i = 0; i < 8 * 64; ++i) x[i] = (float)((i * 29) % 97) / 48.0f - 1.0f;
  int64_t xdims[2] = {8, 64};
  TpusimHostTensor calib = {"x", TPUSIM_DTYPE_F32, xdims, 2, x};
  c.calibration = &calib;
  c.num_calibration = 1;
  OK(tpusim_executable_compile_onnx(&c));
  EXPECT(fingerprint(c.executable) != fingerprint(b1));
  destroy_executable(c.executable);
  destroy_executable(e1);
  destroy_executable(e2);
  destroy_executable(b1);
  destroy_executable(b2);
  destroy_executable(b3);
  free(bytes);
}

/* Runs `exe` (the MLP: input x, f32 [8, 64]) on device 0 and returns its cycles; `timing_only` as the run's. A
 * run that fails: its error, with *cycles 0. */
static TpusimError* mlp_cycles(TpusimClient* client, TpusimExecutable* exe, bool timing_only, uint64_t* cycles) {
  static float x[8 * 64];
  for (int i = 0; i < 8 * 64; ++i) x[i] = (float)((i * 31) % 89) / 44.0f - 1.0f;
  TpusimBuffer* in = upload(client, x, TPUSIM_DTYPE_F32, 8, 64);
  const char* names[1] = {"x"};
  TpusimExecuteArgs r = {0};
  r.struct_size = TpusimExecuteArgs_STRUCT_SIZE;
  r.client = client;
  r.executable = exe;
  r.input_names = names;
  r.input_buffers = &in;
  r.num_inputs = 1;
  r.timing_only = timing_only;
  OK(tpusim_execute(&r));
  destroy_buffer(in);
  TpusimError* err = await_event(r.done);
  *cycles = 0;
  if (!err) {
    TpusimExecutionStatsArgs st = {0};
    st.struct_size = TpusimExecutionStatsArgs_STRUCT_SIZE;
    st.execution = r.execution;
    OK(tpusim_execution_stats(&st));
    *cycles = st.cycles;
  }
  destroy_event(r.done);
  destroy_execution(r.execution);
  return err;
}

/* The timing-only compile (timing_only, version 3 of the compile's arguments): a timing-only run of its program
 * takes the cycles a functional run of the full compile's does; the program leaves the large weights out (the
 * MLP's [128, 64] and [64, 128] f32 weights, 64 KiB, are most of the model's 68 KiB; 16 KiB each as bf16), and a
 * functional run of it is refused. A caller of version 2 (a struct_size without the field) gets the full compile. */
static void test_timing_only_compile(TpusimClient* client) {
  const char* path = TPUSIM_WORKLOADS_DIR "/mlp/mlp.onnx";
  size_t model_bytes = 0;
  char* model = read_file(path, &model_bytes);
  EXPECT(model && model_bytes > 65536);
  free(model);
  TpusimExecutableCompileOnnxArgs c = {0};
  c.struct_size = TpusimExecutableCompileOnnxArgs_STRUCT_SIZE;
  c.client = client;
  c.path = path;
  OK(tpusim_executable_compile_onnx(&c));
  TpusimExecutable* full = c.executable;
  c.timing_only = true;
  OK(tpusim_executable_compile_onnx(&c));
  TpusimExecutable* fast = c.executable;
  c.struct_size = offsetof(TpusimExecutableCompileOnnxArgs, timing_only); /* version 2: timing_only unseen */
  OK(tpusim_executable_compile_onnx(&c));
  TpusimExecutable* v2 = c.executable;
  EXPECT(fingerprint(v2) == fingerprint(full) && fingerprint(fast) != fingerprint(full));

  uint64_t functional = 0, timing = 0;
  OK(mlp_cycles(client, full, false, &functional));
  OK(mlp_cycles(client, fast, true, &timing));
  EXPECT(functional > 0 && timing == functional);
  EXPECT_ERROR(mlp_cycles(client, fast, false, &timing), TPUSIM_INVALID_ARGUMENT, "timing-only");

  TpusimExecutableSerializeArgs sf = {TpusimExecutableSerializeArgs_STRUCT_SIZE, full, NULL, 0};
  TpusimExecutableSerializeArgs st = {TpusimExecutableSerializeArgs_STRUCT_SIZE, fast, NULL, 0};
  OK(tpusim_executable_serialize(&sf));
  OK(tpusim_executable_serialize(&st));
  EXPECT(sf.num_bytes > 2 * 128 * 64 * 2);                /* the full program holds the two weights as bf16 */
  EXPECT(st.num_bytes + 2 * 128 * 64 * 2 <= sf.num_bytes + 64); /* the timing-only one does not (a section more) */
  free(sf.bytes);
  free(st.bytes);
  destroy_executable(full);
  destroy_executable(fast);
  destroy_executable(v2);
}

static void test_unknown_preset(void) {
  TpusimClientCreateArgs a = {0};
  a.struct_size = TpusimClientCreateArgs_STRUCT_SIZE;
  a.config = "no-such-chip";
  EXPECT_ERROR(tpusim_client_create(&a), TPUSIM_NOT_FOUND, "unknown preset or configuration file 'no-such-chip'");
  a.struct_size = 4; /* a struct_size that does not cover the version-1 fields */
  EXPECT_ERROR(tpusim_client_create(&a), TPUSIM_INVALID_ARGUMENT, "struct_size 4 is less than");
  EXPECT_ERROR(tpusim_client_create(NULL), TPUSIM_INVALID_ARGUMENT, "args is NULL");
}

int main(void) {
  test_unknown_preset();

  /* --- The client: the edge preset, with an override, one device. */
  const char* overrides[1] = {"dma.latency=60"};
  TpusimClientCreateArgs cc = {0};
  cc.struct_size = TpusimClientCreateArgs_STRUCT_SIZE;
  cc.config = "edge";
  cc.overrides = overrides;
  cc.num_overrides = 1;
  cc.num_devices = 2;
  OK(tpusim_client_create(&cc));
  TpusimClient* client = cc.client;
  test_second_client_is_refused();

  TpusimClientDeviceCountArgs dc = {TpusimClientDeviceCountArgs_STRUCT_SIZE, client, 0};
  OK(tpusim_client_device_count(&dc));
  EXPECT(dc.num_devices == 2);
  TpusimClientDeviceDescriptionArgs dd = {0};
  dd.struct_size = TpusimClientDeviceDescriptionArgs_STRUCT_SIZE;
  dd.client = client;
  dd.device = 0;
  OK(tpusim_client_device_description(&dd));
  EXPECT(strncmp(dd.description, "tpusim:0 (edge, mxu 32x32, 500 MHz", 34) == 0);
  EXPECT(strcmp(dd.chip, "edge") == 0);
  dd.device = 2;
  EXPECT_ERROR(tpusim_client_device_description(&dd), TPUSIM_INVALID_ARGUMENT, "device 2 does not exist");
  TpusimClientMemorySpaceArgs ms = {0};
  ms.struct_size = TpusimClientMemorySpaceArgs_STRUCT_SIZE;
  ms.client = client;
  ms.index = 1;
  OK(tpusim_client_memory_space(&ms));
  EXPECT(ms.num_memory_spaces == 3 && strcmp(ms.name, "device 1 hbm") == 0 && ms.device == 1 && !ms.is_host &&
         ms.capacity > 0);
  ms.index = 2;
  OK(tpusim_client_memory_space(&ms));
  EXPECT(strcmp(ms.name, "host") == 0 && ms.device == -1 && ms.is_host);
  ms.index = 3;
  EXPECT_ERROR(tpusim_client_memory_space(&ms), TPUSIM_INVALID_ARGUMENT, "memory space 3 does not exist");

  /* --- The executable: gemm_int8.s with M, K, N. */
  const char* def_names[3] = {"M", "K", "N"};
  int64_t def_values[3] = {M, K, N};
  TpusimExecutableAssembleArgs as = {0};
  as.struct_size = TpusimExecutableAssembleArgs_STRUCT_SIZE;
  as.client = client;
  as.path = TPUSIM_KERNELS_DIR "/gemm_int8.s";
  as.define_names = def_names;
  as.define_values = def_values;
  as.num_defines = 3;
  OK(tpusim_executable_assemble(&as));
  TpusimExecutable* exe = as.executable;

  TpusimExecutableIoCountArgs ioc = {TpusimExecutableIoCountArgs_STRUCT_SIZE, exe, 0, 0};
  OK(tpusim_executable_io_count(&ioc));
  EXPECT(ioc.num_inputs == 2 && ioc.num_outputs == 1);
  TpusimExecutableIoArgs io = {0};
  io.struct_size = TpusimExecutableIoArgs_STRUCT_SIZE;
  io.executable = exe;
  io.is_output = false;
  io.index = 1;
  OK(tpusim_executable_io(&io));
  EXPECT(strcmp(io.name, "b") == 0 && io.dtype == TPUSIM_DTYPE_I8 && io.num_dims == 2 && io.dims[0] == K &&
         io.dims[1] == N);
  io.is_output = true;
  io.index = 0;
  OK(tpusim_executable_io(&io));
  EXPECT(strcmp(io.name, "c") == 0 && io.dtype == TPUSIM_DTYPE_I32 && io.num_dims == 2 && io.dims[0] == M &&
         io.dims[1] == N);
  io.index = 1;
  EXPECT_ERROR(tpusim_executable_io(&io), TPUSIM_INVALID_ARGUMENT, "output 1 does not exist");

  /* Serialize, load the bytes back: the same program, the same fingerprint. */
  TpusimExecutableFingerprintArgs fp = {0};
  fp.struct_size = TpusimExecutableFingerprintArgs_STRUCT_SIZE;
  fp.executable = exe;
  OK(tpusim_executable_fingerprint(&fp));
  EXPECT(strlen(fp.fingerprint_hex) == 16 && strcmp(fp.name, "gemm_int8") == 0);
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, fp.fingerprint);
  EXPECT(strcmp(hex, fp.fingerprint_hex) == 0);
  TpusimExecutableSerializeArgs ser = {TpusimExecutableSerializeArgs_STRUCT_SIZE, exe, NULL, 0};
  OK(tpusim_executable_serialize(&ser));
  EXPECT(ser.bytes != NULL && ser.num_bytes > 0);
  TpusimExecutableDeserializeArgs de = {0};
  de.struct_size = TpusimExecutableDeserializeArgs_STRUCT_SIZE;
  de.client = client;
  de.bytes = ser.bytes;
  de.num_bytes = ser.num_bytes;
  OK(tpusim_executable_deserialize(&de));
  free(ser.bytes);
  TpusimExecutableFingerprintArgs fp2 = {0};
  fp2.struct_size = TpusimExecutableFingerprintArgs_STRUCT_SIZE;
  fp2.executable = de.executable;
  OK(tpusim_executable_fingerprint(&fp2));
  EXPECT(fp2.fingerprint == fp.fingerprint);
  TpusimExecutableDestroyArgs ed = {TpusimExecutableDestroyArgs_STRUCT_SIZE, de.executable};
  OK(tpusim_executable_destroy(&ed));
  uint8_t junk[3] = {1, 2, 3};
  de.bytes = junk;
  de.num_bytes = sizeof junk;
  EXPECT_ERROR(tpusim_executable_deserialize(&de), TPUSIM_INVALID_ARGUMENT, "");
  de.bytes = NULL;
  de.path = "/nonexistent/model.tpub";
  EXPECT_ERROR(tpusim_executable_deserialize(&de), TPUSIM_NOT_FOUND, "/nonexistent/model.tpub");

  /* --- Inputs, an execution, the output. */
  static int8_t a[M * K], b[K * N];
  static int32_t c[M * N], expected[M * N];
  for (int i = 0; i < M * K; ++i) a[i] = (int8_t)((i * 37 + 11) % 256 - 128);
  for (int i = 0; i < K * N; ++i) b[i] = (int8_t)((i * 91 + 5) % 256 - 128);
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      int32_t s = 0;
      for (int k = 0; k < K; ++k) s += (int32_t)a[m * K + k] * (int32_t)b[k * N + n];
      expected[m * N + n] = s;
    }
  TpusimBuffer* ba = upload(client, a, TPUSIM_DTYPE_I8, M, K);
  TpusimBuffer* bb = upload(client, b, TPUSIM_DTYPE_I8, K, N);
  TpusimBufferReadyEventArgs re = {TpusimBufferReadyEventArgs_STRUCT_SIZE, bb, NULL};
  OK(tpusim_buffer_ready_event(&re));
  OK(await_event(re.event)); /* the host-to-device copy is done */
  destroy_event(re.event);
  TpusimBufferDimsArgs bd = {TpusimBufferDimsArgs_STRUCT_SIZE, bb, NULL, 0};
  OK(tpusim_buffer_dims(&bd));
  EXPECT(bd.num_dims == 2 && bd.dims[0] == K && bd.dims[1] == N);
  TpusimBufferInfoArgs bi = {0};
  bi.struct_size = TpusimBufferInfoArgs_STRUCT_SIZE;
  bi.buffer = bb;
  OK(tpusim_buffer_info(&bi));
  EXPECT(bi.dtype == TPUSIM_DTYPE_I8 && bi.device == 0 && bi.size_in_bytes == K * N && !bi.is_deleted);

  TpusimEvent* done = NULL;
  TpusimExecution* run = run_gemm(client, exe, ba, bb, &done);
  OK(await_event(done));
  TpusimEventIsReadyArgs ready = {TpusimEventIsReadyArgs_STRUCT_SIZE, done, false};
  OK(tpusim_event_is_ready(&ready));
  EXPECT(ready.is_ready);

  TpusimExecutionStatsArgs st = {0};
  st.struct_size = TpusimExecutionStatsArgs_STRUCT_SIZE;
  st.execution = run;
  OK(tpusim_execution_stats(&st));
  EXPECT(st.cycles > 0 && st.seconds > 0);
  EXPECT(st.stats_json_size == strlen(st.stats_json) && strstr(st.stats_json, "\"cycles\"") != NULL);
  printf("gemm_int8 %dx%dx%d on edge: %" PRIu64 " cycles\n", M, K, N, st.cycles);

  TpusimExecutionOutputCountArgs oc = {TpusimExecutionOutputCountArgs_STRUCT_SIZE, run, 0};
  OK(tpusim_execution_output_count(&oc));
  EXPECT(oc.num_outputs == 1);
  TpusimExecutionOutputArgs out = {0};
  out.struct_size = TpusimExecutionOutputArgs_STRUCT_SIZE;
  out.execution = run;
  out.index = 0;
  OK(tpusim_execution_output(&out));
  EXPECT(strcmp(out.name, "c") == 0);
  TpusimBuffer* bc = out.buffer;

  TpusimBufferToHostArgs th = {0};
  th.struct_size = TpusimBufferToHostArgs_STRUCT_SIZE;
  th.buffer = bc;
  OK(tpusim_buffer_to_host(&th)); /* dst NULL: the size */
  EXPECT(th.dst_size == sizeof c);
  th.dst = c;
  th.dst_size = sizeof c - 1;
  EXPECT_ERROR(tpusim_buffer_to_host(&th), TPUSIM_INVALID_ARGUMENT, "is less than the buffer's");
  th.dst_size = sizeof c;
  OK(tpusim_buffer_to_host(&th));
  OK(await_event(th.event));
  destroy_event(th.event);
  int wrong = 0;
  for (int i = 0; i < M * N; ++i) wrong += c[i] != expected[i];
  EXPECT(wrong == 0);
  if (wrong) fprintf(stderr, "%d of %d elements of c differ, e.g. c[0] = %d, expected %d\n", wrong, M * N, c[0],
                     expected[0]);
  destroy_event(done);
  destroy_execution(run);
  test_to_host_event_ready_means_filled(bc, expected, M * N);
  test_execute_devices(client, exe, a, b, expected);
  test_zero_copy_and_donation(client, exe, a, b, expected);
  test_compile_from_bytes_and_cache(client);
  test_timing_only_compile(client);

  /* --- A wrong-shape input: b given where a goes. The error comes from the execution's event. */
  run = run_gemm(client, exe, bb, bb, &done);
  EXPECT_ERROR(await_event(done), TPUSIM_INVALID_ARGUMENT, "input 'a': expected i8 [24, 40], got i8 [40, 36]");
  EXPECT_ERROR(await_event(done), TPUSIM_INVALID_ARGUMENT, "input 'a'"); /* awaited again: the same error */
  st.execution = run;
  EXPECT_ERROR(tpusim_execution_stats(&st), TPUSIM_INVALID_ARGUMENT, "input 'a'");
  destroy_event(done);
  destroy_execution(run);

  /* --- A deleted buffer: its metadata stays readable, copies and executions fail. */
  TpusimBufferDeleteArgs del = {TpusimBufferDeleteArgs_STRUCT_SIZE, ba};
  OK(tpusim_buffer_delete(&del));
  bi.buffer = ba;
  OK(tpusim_buffer_info(&bi));
  EXPECT(bi.is_deleted);
  run = run_gemm(client, exe, ba, bb, &done);
  EXPECT_ERROR(await_event(done), TPUSIM_INVALID_ARGUMENT, "input 'a': the buffer was deleted");
  destroy_event(done);
  destroy_execution(run);
  int8_t back[M * K];
  th.buffer = ba;
  th.dst = back;
  th.dst_size = sizeof back;
  OK(tpusim_buffer_to_host(&th));
  EXPECT_ERROR(await_event(th.event), TPUSIM_INVALID_ARGUMENT, "deleted buffer");
  destroy_event(th.event);

  /* Malformed arguments fail at the call. */
  TpusimBufferFromHostArgs bad = {0};
  bad.struct_size = TpusimBufferFromHostArgs_STRUCT_SIZE;
  bad.client = client;
  bad.data = a;
  bad.dtype = (TpusimDType)9;
  EXPECT_ERROR(tpusim_buffer_from_host(&bad), TPUSIM_INVALID_ARGUMENT, "dtype 9 is not a TpusimDType");
  TpusimEventAwaitArgs no_event = {TpusimEventAwaitArgs_STRUCT_SIZE, NULL};
  EXPECT_ERROR(tpusim_event_await(&no_event), TPUSIM_INVALID_ARGUMENT, "event is NULL");
  EXPECT(tpusim_error_code(NULL) == TPUSIM_OK && strcmp(tpusim_error_message(NULL), "") == 0);

  /* --- Everything destroyed; the output buffer outlives the client (and still answers). */
  destroy_buffer(ba);
  destroy_buffer(bb);
  ed.executable = exe;
  OK(tpusim_executable_destroy(&ed));
  TpusimClientDestroyArgs cd = {TpusimClientDestroyArgs_STRUCT_SIZE, client};
  OK(tpusim_client_destroy(&cd));
  bd.buffer = bc;
  OK(tpusim_buffer_dims(&bd));
  EXPECT(bd.num_dims == 2 && bd.dims[0] == M);
  destroy_buffer(bc);

  if (failures) {
    fprintf(stderr, "%d failure(s)\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
