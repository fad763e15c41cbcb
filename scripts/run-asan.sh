#!/usr/bin/env bash
# Builds the tests with AddressSanitizer and UndefinedBehaviorSanitizer (GCC) in build-asan/ and runs them: the
# unit tests and the system tests, which drive the instrumented tpusim program. Called by .ci/run after the main
# tests. Only the test programs and what they need are built (not the benchmarks). Any report fails the run:
# UBSan stops at the first undefined behaviour (-fno-sanitize-recover), ASan at the first memory error.
# Extra ctest arguments: ASAN_CTEST_ARGS (e.g. ASAN_CTEST_ARGS="-R Npy").
#
# SystemC's coroutine stacks: validation/fuzz/README.md, "Sanitizers and SystemC's coroutines", says why
# detect_stack_use_after_return stays off and what the four stack-buffer-overflow reports were.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
san="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -O1 -g1: fast enough to build and to run, with file:line in every report; asserts on.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS_DEBUG="-O1 -g1" -DCMAKE_C_FLAGS_DEBUG="-O1 -g1" \
  -DCMAKE_CXX_FLAGS="$san" -DCMAKE_C_FLAGS="$san" \
  -DCMAKE_EXE_LINKER_FLAGS="$san" -DCMAKE_SHARED_LINKER_FLAGS="$san" -DCMAKE_MODULE_LINKER_FLAGS="$san" > /dev/null
# The test programs (every executable ctest runs) and the tpusim program the system tests drive.
targets=$(cd build-asan && ninja -t targets all | awk -F: '!/^cmake_/ && /^[^\/]*(_tests|_test|tpusim|tpusim_python): (phony|CXX_EXECUTABLE_LINKER|C_EXECUTABLE_LINKER|CXX_SHARED_MODULE_LINKER)/{print $1}' | sort -u)
# shellcheck disable=SC2086  # one target per word
cmake --build build-asan --target $targets
echo "run-asan.sh: built in $(( $(date +%s) - start )) s"

export SC_COPYRIGHT_MESSAGE=DISABLE
export ASAN_OPTIONS="halt_on_error=1 strict_string_checks=1 check_initialization_order=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}"
# shellcheck disable=SC2086  # ASAN_CTEST_ARGS is split into words on purpose
# Not here: the workloads' tests and the install/README tests need the exports and the whole Release build
# (scripts/run-tests.sh runs them).
ctest --test-dir build-asan --output-on-failure -j2 -E '^(python[.]|workloads[.]|examples$|readme[.])' ${ASAN_CTEST_ARGS:-}
# The Python module's tests load the instrumented module into Debian's uninstrumented interpreter: the ASan
# runtime must be loaded first, and the interpreter's own allocations at exit are not ours to report.
LD_PRELOAD="$(gcc -print-file-name=libasan.so)" ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0" \
  ctest --test-dir build-asan --output-on-failure -j2 -R '^python[.]' ${ASAN_CTEST_ARGS:-}
echo "run-asan.sh: passed in $(( $(date +%s) - start )) s"
