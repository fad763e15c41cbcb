/* A C client of the installed tpusim runtime (c_api.h): an int8 matmul on a simulated "edge" chip, checked
 * against a plain C loop. Build: cc example.c $(pkg-config --cflags --libs tpusim), or CMake's
 * find_package(tpusim) and tpusim::tpusim_c (examples/CMakeLists.txt). Run: ./example_c matmul.s */
#include <tpusim/runtime/c_api.h>

#include <stdio.h>
#include <stdlib.h>

enum { M = 16, K = 32, N = 24 };

/* Every call returns NULL or an error the caller owns: print it and stop. */
static void check(TpusimError* e, const char* what) {
  if (!e) return;
  fprintf(stderr, "%s: %s: %s\n", what, tpusim_error_code_name(tpusim_error_code(e)), tpusim_error_message(e));
  tpusim_error_destroy(e);
  exit(1);
}

static TpusimBuffer* upload(TpusimClient* client, const int8_t* data, int64_t rows, int64_t cols) {
  int64_t dims[2] = {rows, cols};
  TpusimBufferFromHostArgs a = {0};
  a.struct_size = TpusimBufferFromHostArgs_STRUCT_SIZE;
  a.client = client;
  a.data = data; /* copied before the call returns */
  a.dtype = TPUSIM_DTYPE_I8;
  a.dims = dims;
  a.num_dims = 2;
  check(tpusim_buffer_from_host(&a), "buffer_from_host");
  return a.buffer;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s matmul.s\n", argv[0]);
    return 2;
  }
  TpusimClientCreateArgs cc = {0};
  cc.struct_size = TpusimClientCreateArgs_STRUCT_SIZE;
  cc.config = "edge";
  check(tpusim_client_create(&cc), "client_create");

  const char* names[3] = {"M", "K", "N"};
  int64_t values[3] = {M, K, N};
  TpusimExecutableAssembleArgs as = {0};
  as.struct_size = TpusimExecutableAssembleArgs_STRUCT_SIZE;
  as.client = cc.client;
  as.path = argv[1];
  as.define_names = names;
  as.define_values = values;
  as.num_defines = 3;
  check(tpusim_executable_assemble(&as), "assemble");

  static int8_t a[M * K], b[K * N];
  static int32_t c[M * N];
  for (int i = 0; i < M * K; ++i) a[i] = (int8_t)(i % 7 - 3);
  for (int i = 0; i < K * N; ++i) b[i] = (int8_t)(i % 5 - 2);
  TpusimBuffer* inputs[2] = {upload(cc.client, a, M, K), upload(cc.client, b, K, N)};
  const char* input_names[2] = {"a", "b"};

  TpusimExecuteArgs x = {0};
  x.struct_size = TpusimExecuteArgs_STRUCT_SIZE;
  x.client = cc.client;
  x.executable = as.executable;
  x.input_names = input_names;
  x.input_buffers = inputs;
  x.num_inputs = 2;
  check(tpusim_execute(&x), "execute"); /* returns at once; x.done is ready when the outputs exist */
  TpusimEventAwaitArgs wait = {TpusimEventAwaitArgs_STRUCT_SIZE, x.done};
  check(tpusim_event_await(&wait), "run");

  TpusimExecutionOutputArgs out = {0};
  out.struct_size = TpusimExecutionOutputArgs_STRUCT_SIZE;
  out.execution = x.execution;
  check(tpusim_execution_output(&out), "output");
  TpusimBufferToHostArgs th = {0};
  th.struct_size = TpusimBufferToHostArgs_STRUCT_SIZE;
  th.buffer = out.buffer;
  th.dst = c; /* must stay valid until th.event is ready */
  th.dst_size = sizeof c;
  check(tpusim_buffer_to_host(&th), "to_host");
  TpusimEventAwaitArgs copied = {TpusimEventAwaitArgs_STRUCT_SIZE, th.event};
  check(tpusim_event_await(&copied), "to_host");
  TpusimExecutionStatsArgs st = {0};
  st.struct_size = TpusimExecutionStatsArgs_STRUCT_SIZE;
  st.execution = x.execution;
  check(tpusim_execution_stats(&st), "stats");

  int wrong = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      int32_t s = 0;
      for (int k = 0; k < K; ++k) s += a[m * K + k] * b[k * N + n];
      wrong += c[m * N + n] != s;
    }
  printf("example_c: matmul %dx%dx%d on edge in %llu cycles, %d wrong elements\n", M, K, N,
         (unsigned long long)st.cycles, wrong);

  /* Every handle is the caller's, destroyed once, in any order. */
  TpusimEventDestroyArgs ed1 = {TpusimEventDestroyArgs_STRUCT_SIZE, th.event}, ed2 = {TpusimEventDestroyArgs_STRUCT_SIZE, x.done};
  check(tpusim_event_destroy(&ed1), "destroy");
  check(tpusim_event_destroy(&ed2), "destroy");
  TpusimBufferDestroyArgs bd[3] = {{TpusimBufferDestroyArgs_STRUCT_SIZE, inputs[0]},
                                   {TpusimBufferDestroyArgs_STRUCT_SIZE, inputs[1]},
                                   {TpusimBufferDestroyArgs_STRUCT_SIZE, out.buffer}};
  for (int i = 0; i < 3; ++i) check(tpusim_buffer_destroy(&bd[i]), "destroy");
  TpusimExecutionDestroyArgs xd = {TpusimExecutionDestroyArgs_STRUCT_SIZE, x.execution};
  check(tpusim_execution_destroy(&xd), "destroy");
  TpusimExecutableDestroyArgs exd = {TpusimExecutableDestroyArgs_STRUCT_SIZE, as.executable};
  check(tpusim_executable_destroy(&exd), "destroy");
  TpusimClientDestroyArgs cd = {TpusimClientDestroyArgs_STRUCT_SIZE, cc.client};
  check(tpusim_client_destroy(&cd), "destroy");
  return wrong ? 1 : 0;
}
