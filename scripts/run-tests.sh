#!/usr/bin/env bash
# README command 2: install dependencies, build (Release, Ninja), put `tpusim` on the PATH (link-tpusim.sh) and run
# every test.
# Extra ctest arguments can be given in CTEST_ARGS, e.g. CTEST_ARGS="-R npy" bash scripts/run-tests.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
echo "run-tests.sh: configuring build/"
# TPUSIM_FULL_WORKLOADS: the build also exports the full-size models (ResNet-50, BERT-base, GPT-2 124M: about
# 55 s once, 1.6 GB), whose timing the regression baselines check (validation/baselines/README.md)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DTPUSIM_FULL_WORKLOADS=ON
echo "run-tests.sh: building"
cmake --build build
bash scripts/link-tpusim.sh
echo "run-tests.sh: ctest --test-dir build --output-on-failure -j2 ${CTEST_ARGS:-}"
export SC_COPYRIGHT_MESSAGE=DISABLE
# shellcheck disable=SC2086  # CTEST_ARGS is split into words on purpose
ctest --test-dir build --output-on-failure -j2 ${CTEST_ARGS:-}
