#!/usr/bin/env bash
# The whole-chip GEMM tables of the README: a 4096^3 bf16 GEMM (gemm_chip, timing-only) on each whole-chip TPU
# preset, and on v4 over 1, 2, 4 matrix units of one core and both cores. One process per chip (SystemC).
# Needs a build (build/validation/bench/chip_bench).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export SC_COPYRIGHT_MESSAGE=DISABLE
b=build/validation/bench/chip_bench
for c in v4 v5e v6e; do "$b" --config "$c" "$@"; done
# h200-like as the H200 goldens time it (y = x @ W^T, bf16 out); about 20 s of wall time
"$b" --config h200-like --trans-b --out bf16 "$@"
for cm in "1 1" "1 2" "1 4" "2 4"; do
  set -- $cm
  "$b" --config v4 --cores "$1" --mxus "$2"
done
