#!/usr/bin/env bash
# Re-records validation/baselines/baselines.csv (validation/baselines/README.md): builds what the corpus runs (the
# tpusim program, chip_bench, the exported MLP: target baselines_inputs; the full-size models: workloads_full) in BUILD_DIR (default build/, configured
# as the README configures it when it is not yet), then runs `baselines.py record` with that build's paths.
# Only for an intended change of cycles or outputs: review `git diff validation/baselines/baselines.csv` and say
# in the commit why the numbers moved. Other arguments go to baselines.py (e.g. --only 'mlp', --file OTHER.csv).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
build=${BUILD_DIR:-build}

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  echo "record-baselines.sh: configuring ${build}/"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
fi
# The full-size models' rows: their exports (1.6 GB, about 140 s once), as the test command makes them.
cmake -S . -B "$build" -DTPUSIM_FULL_WORKLOADS=ON >/dev/null
echo "record-baselines.sh: building tpusim, chip_bench, the MLP workload and the full-size models in ${build}/"
cmake --build "$build" --target baselines_inputs workloads_full
export SC_COPYRIGHT_MESSAGE=DISABLE
exec /usr/bin/python3 validation/baselines/baselines.py record --tpusim "$build/tools/tpusim" \
  --chip-bench "$build/validation/bench/chip_bench" --workloads "$build/workloads" \
  --models "$build/workloads-full" "$@"
