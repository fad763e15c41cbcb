#!/usr/bin/env bash
# Builds the runtime's client tests with ThreadSanitizer in build-tsan/ (only that target and the libraries it
# needs) and runs the thread-safety tests under it: the multi-threaded stress test and the client tests.
# Called by .ci/run after the main tests. Extra gtest filter: TSAN_FILTER (default: Stress.*:Client.*).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$(date +%s)
# -O1 with line tables (-g1): what ThreadSanitizer's reports need (file and line of each access). Measured on the
# 2-core machine (2026-12-04, the sum of .ninja_log's compile times): 245 s of compiling against 412 s with
# RelWithDebInfo's default -O2 -g; the whole script 101 s against 155 s.
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1 -DNDEBUG" \
  -DCMAKE_CXX_FLAGS="-fsanitize=thread" -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" > /dev/null
cmake --build build-tsan --target runtime_client_tests
export SC_COPYRIGHT_MESSAGE=DISABLE
# libsystemc is not instrumented: its coroutine stack switches are hidden from TSan, and every SystemC call
# stays on the simulation thread, so reports from inside it are not ours to see.
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
# One process per test: each one elaborates its own chips (SystemC allows one elaboration per process).
bin=build-tsan/runtime/runtime_client_tests
for t in $("$bin" --gtest_list_tests --gtest_filter="${TSAN_FILTER:-Stress.*:Client.*}" |
           awk '/^[^ ]/{s=$1} /^  /{print s $1}'); do
  "$bin" --gtest_filter="$t" --gtest_brief=1
done
echo "run-tsan.sh: passed in $(( $(date +%s) - start )) s"
