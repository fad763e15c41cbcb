#!/usr/bin/env bash
# README command 1: installs what is missing, builds the `tpusim` program and the small model the demo runs (only
# those: the tests and the rest build with run-tests.sh or `cmake --build build`), puts `tpusim` on the PATH
# (link-tpusim.sh: /usr/local/bin/tpusim, or TPUSIM_BIN_DIR) and runs the built-in demo.
# Arguments are passed through to `tpusim demo`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
step() { echo "run-demo.sh: [$1/5, $((SECONDS - start)) s] $2"; }

step 1 "packages (scripts/setup.sh)"
bash scripts/setup.sh
step 2 "configuring build/ (CMake, Release, Ninja)"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
step 3 "building tpusim and the demo's model (ninja counts the steps: [done/total])"
cmake --build build --target tpusim
step 4 "putting tpusim on the PATH (scripts/link-tpusim.sh)"
bash scripts/link-tpusim.sh
step 5 "tpusim demo $*"
SC_COPYRIGHT_MESSAGE=DISABLE build/tools/tpusim demo "$@"
echo "run-demo.sh: done in $((SECONDS - start)) s. Next: tpusim --help, the README's examples, scripts/run-tests.sh"
