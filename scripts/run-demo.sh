#!/usr/bin/env bash
# README command 1: install dependencies, build (Release, Ninja) and run the demo.
# Arguments are passed through to `tpusim demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/setup.sh
echo "run-demo.sh: configuring build/"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
echo "run-demo.sh: building"
cmake --build build
echo "run-demo.sh: build/tools/tpusim demo $*"
SC_COPYRIGHT_MESSAGE=DISABLE exec build/tools/tpusim demo "$@"
