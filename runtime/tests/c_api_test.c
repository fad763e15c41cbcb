/* The C API (c_api.h), used from C as a binding in another language would: a client on the "edge" preset, an
 * int8 GEMM assembled from kernels/gemm_int8.s, input buffers, an asynchronous execution, the output read back
 * and checked against a plain C loop; then the error paths (an unknown preset, a wrong-shape input, a deleted
 * buffer) and the lifetimes (every handle destroyed once; run under -fsanitize=address it reports no leak).
 * One process, one client (SystemC elaborates once per process). */
#include "tpusim/runtime/c_api.h"

#include <inttypes.h>
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

static TpusimBuffer* upload(TpusimClient* client, const void* data, TpusimDType dtype, int64_t d0, int64_t d1) {
  int64_t dims[2] = {d0, d1};
  TpusimBufferFromHostArgs a = {0};
  a.struct_size = TpusimBufferFromHostArgs_STRUCT_SIZE;
  a.client = client;
  a.data = data;
  a.dtype = dtype;
  a.dims = dims;
  a.num_dims = 2;
  a.device = 0;
  OK(tpusim_buffer_from_host(&a));
  return a.buffer;
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
  cc.num_devices = 1;
  OK(tpusim_client_create(&cc));
  TpusimClient* client = cc.client;

  TpusimClientDeviceCountArgs dc = {TpusimClientDeviceCountArgs_STRUCT_SIZE, client, 0};
  OK(tpusim_client_device_count(&dc));
  EXPECT(dc.num_devices == 1);
  TpusimClientDeviceDescriptionArgs dd = {0};
  dd.struct_size = TpusimClientDeviceDescriptionArgs_STRUCT_SIZE;
  dd.client = client;
  dd.device = 0;
  OK(tpusim_client_device_description(&dd));
  EXPECT(strncmp(dd.description, "tpusim:0 (edge, mxu 32x32, 500 MHz", 34) == 0);
  EXPECT(strcmp(dd.chip, "edge") == 0);
  dd.device = 1;
  EXPECT_ERROR(tpusim_client_device_description(&dd), TPUSIM_INVALID_ARGUMENT, "device 1 does not exist");

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
