#!/usr/bin/env bash
# Wall time to compile and to simulate each full-size workload (functional and timing-only), beside the host's
# Eigen GEMM rate from the same run: validation/bench/model_bench.cpp.
#
#   bash scripts/run-model-bench.sh            # ResNet-50, BERT-base seq 128, GPT-2 124M prefill + decode
#   bash scripts/run-model-bench.sh --small    # the build's small CI workloads (tinycnn, resnet18, bert, gpt2)
#
# The full-size models are exported (opset 13) into build/workloads-full/ when missing: about a minute (OpenBLAS) and
# 3.2 GB of RAM on a 2-core machine, once. Other arguments go to model_bench (--repeat N, --json FILE,
# --config NAME, --set k=v). BUILD_DIR (default build) is the CMake build folder used.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

small=0
args=()
for a in "$@"; do
  if [[ "$a" == "--small" ]]; then small=1; else args+=("$a"); fi
done
build=${BUILD_DIR:-build}
py=/usr/bin/python3

bash scripts/setup.sh
echo "run-model-bench.sh: configuring ${build}/"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null

dirs=()
if ((small)); then
  echo "run-model-bench.sh: building model_bench and the small workloads"
  cmake --build "$build" --target model_bench workloads
  for d in tinycnn resnet18 bert_small gpt2_small/prefill gpt2_small/decode; do
    if [[ -f "$build/workloads/$d/meta.json" ]]; then dirs+=("$build/workloads/$d"); fi
  done
else
  echo "run-model-bench.sh: building model_bench"
  cmake --build "$build" --target model_bench
  full=build/workloads-full
  export_if_missing() {  # DIR(meta.json to look for) COMMAND...
    local probe=$1; shift
    if [[ -f "$probe/meta.json" ]]; then return; fi
    echo "run-model-bench.sh: exporting: $*"
    local t0=$SECONDS
    "$@"
    echo "run-model-bench.sh: exported in $((SECONDS - t0)) s"
  }
  export_if_missing "$full/resnet50" $py workloads/resnet.py --arch resnet50 --size 224 --opset 13 --out "$full/resnet50"
  export_if_missing "$full/bert_base" $py workloads/bert.py --seq 128 --opset 13 --out "$full/bert_base"
  export_if_missing "$full/gpt2_124m/decode" $py workloads/gpt2.py --mode both --opset 13 --out "$full/gpt2_124m"
  dirs=("$full/resnet50" "$full/bert_base" "$full/gpt2_124m/prefill" "$full/gpt2_124m/decode")
fi

echo "run-model-bench.sh: $build/validation/bench/model_bench ${args[*]:-} ${dirs[*]}"
SC_COPYRIGHT_MESSAGE=DISABLE exec "$build/validation/bench/model_bench" "${args[@]}" "${dirs[@]}"
