// Shows, without tpusim, why ASan reported stack-buffer-overflows in tests that run SystemC (README.md here,
// "Sanitizers and SystemC's coroutines"). Not part of the build:
//   g++ -std=c++17 -O1 -g -fsanitize=address -fno-omit-frame-pointer systemc_asan_stack.cpp -lsystemc -o /tmp/t
//   SC_COPYRIGHT_MESSAGE=DISABLE /tmp/t              # ASan warning, then a false stack-buffer-overflow
//   ANNOUNCE=1 SC_COPYRIGHT_MESSAGE=DISABLE /tmp/t   # the stack announced again after sc_start(): "done"
#include <systemc>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <pthread.h>
#include <sanitizer/common_interface_defs.h>

// Tells ASan the bounds of this thread's own stack again, as a switch from it to itself.
void announce_thread_stack() {
  pthread_attr_t a;
  pthread_getattr_np(pthread_self(), &a);
  void* lo = nullptr;
  size_t size = 0;
  pthread_attr_getstack(&a, &lo, &size);
  pthread_attr_destroy(&a);
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, lo, size);
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
}

SC_MODULE(M) {
  SC_CTOR(M) { SC_THREAD(run); }
  void run() { sc_core::wait(1, sc_core::SC_NS); }
};

__attribute__((noinline)) void deep_throw(int n) {
  volatile char pad[256];  // a frame with redzones, left poisoned if the unwinding is not unpoisoned
  pad[0] = static_cast<char>(n);
  if (n == 0) throw std::runtime_error("x");
  deep_throw(n - 1);
  pad[1] = 0;
}

__attribute__((noinline)) int use_stack(int n) {
  volatile char big[4096];  // lands where deep_throw's frames were
  std::memset(const_cast<char*>(big), n, sizeof big);
  return big[n % 4096] + (n ? use_stack(n - 1) : 0);
}

int sc_main(int, char**) {
  M m("m");
  sc_core::sc_start();  // runs m.run on a coroutine stack and comes back to the main stack
  if (getenv("ANNOUNCE")) announce_thread_stack();
  try { deep_throw(20); } catch (const std::exception&) {}
  std::printf("use_stack: %d\n", use_stack(8));
  std::printf("done\n");
  return 0;
}
