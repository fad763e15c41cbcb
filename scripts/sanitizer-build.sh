#!/usr/bin/env bash
# The one sanitizer build, build-fuzz/, that scripts/run-asan.sh (the tests under ASan and UBSan) and
# scripts/run-fuzz.sh (the libFuzzer harnesses) share, so that CI compiles every library once for both:
#   bash scripts/sanitizer-build.sh [TARGET...]
# configures build-fuzz/ with clang (-DTPUSIM_FUZZ=ON: every library with AddressSanitizer, UndefinedBehaviorSanitizer
# and libFuzzer's coverage instrumentation, -O1, asserts on; the top-level CMakeLists.txt) and builds the targets
# named, if any. ccache is used where it is installed. clang comes from `scripts/setup.sh fuzz`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh fuzz > /dev/null
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S . -B build-fuzz -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=Debug \
  -DTPUSIM_FUZZ=ON -DBUILD_TESTING=ON "${launcher[@]}" > /dev/null
[[ $# -eq 0 ]] || cmake --build build-fuzz --target "$@"
