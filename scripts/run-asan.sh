#!/usr/bin/env bash
# Runs the tests under AddressSanitizer and UndefinedBehaviorSanitizer: the unit tests, the system tests (which drive
# the instrumented tpusim program) and the Python module's tests. Called by .ci/run. They are built in build-fuzz/,
# the one sanitizer build that scripts/run-fuzz.sh's harnesses share (scripts/sanitizer-build.sh: clang, -O1), and
# only what they need: the test programs, tpusim, the Python module and the two models its tests load (not the
# benchmarks, nor the workloads' tests, which need the whole Release build's exports). Any report fails the run:
# UBSan stops at the first undefined behaviour, ASan at the first memory error.
# Extra ctest arguments: ASAN_CTEST_ARGS (e.g. ASAN_CTEST_ARGS="-R Npy").
#
# SystemC's coroutine stacks: validation/fuzz/README.md, "Sanitizers and SystemC's coroutines", says why
# detect_stack_use_after_return stays off and what the four stack-buffer-overflow reports were.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
bash scripts/sanitizer-build.sh
# The test programs (every executable ctest runs), the tpusim program the system tests drive, the Python module,
# the models the Python tests load, and chip_bench (the baselines and validate tests run it).
targets=$(cd build-fuzz && ninja -t targets all | awk -F: '!/^cmake_/ && /^[^\/]*(_tests|_test|tpusim|tpusim_python): (phony|CXX_EXECUTABLE_LINKER|C_EXECUTABLE_LINKER|CXX_SHARED_MODULE_LINKER)/{print $1}' | sort -u)
# shellcheck disable=SC2086  # one target per word
cmake --build build-fuzz --target $targets chip_bench workload_mlp workload_bert_small
echo "run-asan.sh: built in $(( $(date +%s) - start )) s"

export SC_COPYRIGHT_MESSAGE=DISABLE
export ASAN_OPTIONS="halt_on_error=1 strict_string_checks=1 check_initialization_order=1 ${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1 halt_on_error=1 ${UBSAN_OPTIONS:-}"
# Not here: the workloads' tests and the install/README tests, which need the exports and the whole Release build
# (scripts/run-tests.sh runs them); and the three regression sweeps that run code the other tests run, at sizes
# that take most of the time under ASan (system.ChipShapes 778 s, validate.GemmSample 504 s and
# validate.AttentionSample 70 s of the 2,436 s all tests took here; the Release build runs them), and validate.Derive
# (506 attention cases of the same kernels as validate.AttentionSample's).
# shellcheck disable=SC2086  # ASAN_CTEST_ARGS is split into words on purpose
ctest --test-dir build-fuzz --output-on-failure -j2 \
  -E '^(python[.]|workloads[.]|examples$|readme[.]|system[.]ChipShapes$|validate[.]((Gemm|Attention)Sample|Derive)$|explore[.]MpiTwoRanks$)' \
  ${ASAN_CTEST_ARGS:-}
# Two MPI ranks of the instrumented tpusim: Open MPI's own allocations, made by its plug-ins (which it unloads at
# exit, so LeakSanitizer cannot name them) and by libmpi, are never freed, so leak detection is off for this test;
# every access is still checked.
# shellcheck disable=SC2086
ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0" \
  ctest --test-dir build-fuzz --output-on-failure -R '^explore[.]MpiTwoRanks$' ${ASAN_CTEST_ARGS:-}
# The Python module's tests load the instrumented module into Debian's uninstrumented interpreter, so the ASan
# runtime (clang's shared one) must be loaded first, and libstdc++ with it: the interpreter does not link
# libstdc++, and ASan looks up the real __cxa_throw when it starts; without it, the first C++ exception the
# module throws stops the process with "CHECK failed: ... real___cxa_throw". The interpreter's own allocations at
# exit are not ours to report (detect_leaks=0). python.Memory checks that the resident set stays flat over 1,000
# executions: it runs without ASan's quarantine, which otherwise keeps up to 256 MB of freed memory resident on
# purpose (to catch uses after free; every access is still checked). Not python.pip_install: it tests packaging
# (pip into a virtual environment, then examples/example.py), and the module's calls it makes are the ones the
# suites above make.
export LD_PRELOAD="$(clang -print-file-name=libclang_rt.asan-x86_64.so) $(gcc -print-file-name=libstdc++.so.6)"
# shellcheck disable=SC2086
ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0" \
  ctest --test-dir build-fuzz --output-on-failure -j2 -R '^python[.]' -E '^python[.](Memory|pip_install)$' ${ASAN_CTEST_ARGS:-}
# shellcheck disable=SC2086
ASAN_OPTIONS="$ASAN_OPTIONS detect_leaks=0 quarantine_size_mb=0 thread_local_quarantine_size_kb=0" \
  ctest --test-dir build-fuzz --output-on-failure -R '^python[.]Memory$' ${ASAN_CTEST_ARGS:-}
unset LD_PRELOAD
echo "run-asan.sh: passed in $(( $(date +%s) - start )) s"
