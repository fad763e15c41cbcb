#!/usr/bin/env bash
# The CUDA reference timings, on a machine with an NVIDIA GPU and the CUDA Toolkit (validation/cuda/README.md).
# Configures validation/cuda on its own (Release; only a C++ compiler, CMake and the CUDA Toolkit needed, GoogleTest
# for the checks), builds the runner, runs its GPU checks (each kernel's output against a CPU reference), then runs
# the corpus into OUT_DIR: <op>.csv (the NVIDIA goldens' format), meta.json and the cases' tensors as .npy.
#
#   bash scripts/run-cuda-reference.sh OUT_DIR [runner options...]     e.g. --no-npy, --repeats 50
#
# Environment: TPUSIM_CUDA_CORPUS (default validation/cuda/corpus.csv), TPUSIM_CUDA_BUILD_DIR (default
# build-cuda-ref), SKIP_CHECKS=1 to skip the GPU checks.
set -euo pipefail
if [ $# -lt 1 ] || [ "${1#-}" != "$1" ]; then
  echo "usage: bash scripts/run-cuda-reference.sh OUT_DIR [runner options, e.g. --no-npy --repeats 50]" >&2
  exit 2
fi
out=$1
shift
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
case "$out" in /*) ;; *) out="$PWD/$out" ;; esac
build=${TPUSIM_CUDA_BUILD_DIR:-$root/build-cuda-ref}
corpus=${TPUSIM_CUDA_CORPUS:-$root/validation/cuda/corpus.csv}

generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
echo "run-cuda-reference.sh: configuring $build"
cmake -S "$root/validation/cuda" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release
echo "run-cuda-reference.sh: building"
cmake --build "$build" -j "$(nproc)"
if [ ! -x "$build/tpusim_cuda_runner" ]; then
  echo "run-cuda-reference.sh: no runner was built: no CUDA Toolkit found (install it, or set CUDACXX=/path/to/nvcc)" >&2
  exit 1
fi
if [ "${SKIP_CHECKS:-0}" != 1 ] && [ -x "$build/cuda_reference_tests" ]; then
  echo "run-cuda-reference.sh: the kernels' outputs against CPU references (ctest -L cuda)"
  ctest --test-dir "$build" -L cuda --output-on-failure
fi
echo "run-cuda-reference.sh: $build/tpusim_cuda_runner --corpus $corpus --out $out $*"
"$build/tpusim_cuda_runner" --corpus "$corpus" --out "$out" "$@"
