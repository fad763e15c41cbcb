#!/usr/bin/env bash
# Fuzzes tpusim's parsers and the simulator (validation/fuzz/README.md).
#   bash scripts/run-fuzz.sh [SECONDS] [NAME...]
# builds the libFuzzer harnesses with clang in build-fuzz/ (scripts/sanitizer-build.sh: ASan + UBSan, the build
# scripts/run-asan.sh shares; `setup.sh fuzz` installs clang), runs each named one (default: all; asm tpub onnx
# config npy, and cli) for SECONDS (default 60), one after the other, and prints each one's executions. `cli` is the mutation loop over programs run through
# `tpusim run --timing-only` (validation/fuzz/cli_mutate.py); it needs build/tools/tpusim (or TPUSIM=path).
# Environment: FUZZ_RUNS=N also stops each libFuzzer harness after N executions; FUZZ_ARGS adds libFuzzer options.
# The corpus each harness grows is kept in build-fuzz/corpus/NAME (the seeds in validation/fuzz/corpus/NAME are
# read, never written); a finding is written to build-fuzz/findings/NAME/ and ends the script with status 1.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
seconds=${1:-60}
shift || true
names=("$@")
[[ ${#names[@]} -gt 0 ]] || names=(asm tpub onnx config npy cli)
[[ "$seconds" =~ ^[0-9]+$ && "$seconds" -gt 0 ]] || { echo "run-fuzz.sh: SECONDS must be a positive integer, not '$seconds'" >&2; exit 2; }

harnesses=()
for n in "${names[@]}"; do
  case "$n" in
    asm|tpub|onnx|config|npy) harnesses+=("fuzz_$n") ;;
    cli) ;;
    *) echo "run-fuzz.sh: unknown fuzzer '$n' (asm tpub onnx config npy cli)" >&2; exit 2 ;;
  esac
done

export SC_COPYRIGHT_MESSAGE=DISABLE
if [[ ${#harnesses[@]} -gt 0 ]]; then
  start=$(date +%s)
  bash scripts/sanitizer-build.sh "${harnesses[@]}"
  echo "run-fuzz.sh: harnesses built in $(( $(date +%s) - start )) s"
fi

# The assembler's seeds include the built-in kernels, each with defines that make it assemble (made here from
# kernels/*.s rather than kept as copies).
seeds=build-fuzz/seeds/asm
mkdir -p "$seeds"
while read -r kernel defines; do
  { for d in $defines; do echo ".set ${d%%=*}, ${d#*=}"; done; cat "kernels/$kernel.s"; } > "$seeds/$kernel.s"
done <<'EOF_SEEDS'
gemm M=33 K=130 N=20 BIAS=1 RELU=1
gather M=5 D=7 V=11
cast N=300 SDT=DT_F32 DDT=DT_I8 SCALE=0x3f000000
vadd N=300
EOF_SEEDS

# The .npy reader's seeds are made here too (.npy files are not kept in git): a few headers and dtypes. numpy and
# onnx come from Debian (scripts/setup.sh).
mkdir -p build-fuzz/seeds/npy
/usr/bin/python3 -c '
import numpy as np, sys
d = sys.argv[1]
for i, a in enumerate([np.arange(6, dtype=np.float32).reshape(2, 3), np.arange(5, dtype=np.int8),
                       np.zeros((2, 2, 2), np.int32), np.array(3.5, np.float32), np.arange(4, dtype=np.int64)]):
    np.save(f"{d}/seed{i}.npy", a)
' build-fuzz/seeds/npy
# The ONNX import's seeds: small graphs over the operators real exports use (model files are not kept in git).
/usr/bin/python3 validation/fuzz/make_onnx_seeds.py build-fuzz/seeds/onnx
# The loader's (and the cli loop's) valid programs, written by this build's tpusim so that they are of the current
# format version: the asm seeds assembled, the ONNX seeds compiled.
tpusim=${TPUSIM:-$root/build/tools/tpusim}
mkdir -p build-fuzz/seeds/tpub
if [[ -x "$tpusim" ]]; then
  for s in "$seeds"/*.s; do
    "$tpusim" asm "$s" -o "build-fuzz/seeds/tpub/$(basename "${s%.s}").tpub" > /dev/null
  done
  for m in build-fuzz/seeds/onnx/*.onnx; do
    # (the findings' reproducers, regress_*, end in a compiler error, exit code 1: they give no program)
    rc=0
    "$tpusim" compile "$m" -o "build-fuzz/seeds/tpub/compiled_$(basename "${m%.onnx}").tpub" > /dev/null 2>&1 || rc=$?
    if [[ $rc -ne 0 && ( $rc -ne 1 || $(basename "$m") != regress_* ) ]]; then
      echo "run-fuzz.sh: tpusim compile $m failed ($rc)" >&2
      exit 1
    fi
  done
else
  echo "run-fuzz.sh: $tpusim not found: the .tpub seeds are only the reproducers in validation/fuzz/corpus/tpub"
fi

status=0
for h in "${harnesses[@]}"; do
  n=${h#fuzz_}
  corpus=build-fuzz/corpus/$n findings=build-fuzz/findings/$n
  mkdir -p "$corpus" "$findings"
  log=build-fuzz/$h.log
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -dict="validation/fuzz/dict/$n.dict" -artifact_prefix="$findings/")
  [[ -n "${FUZZ_RUNS:-}" ]] && args+=(-runs="$FUZZ_RUNS")
  # shellcheck disable=SC2086  # FUZZ_ARGS is split into words on purpose
  if "build-fuzz/validation/fuzz/$h" "${args[@]}" ${FUZZ_ARGS:-} "$corpus" \
       $([[ -d validation/fuzz/corpus/$n ]] && echo "validation/fuzz/corpus/$n") \
       $([[ -d build-fuzz/seeds/$n ]] && echo "build-fuzz/seeds/$n") > "$log" 2>&1; then
    execs=$(awk '/stat::number_of_executed_units/{print $2}' "$log")
    secs=$(awk '/stat::number_of_executed_units/{e=1} /Done [0-9]+ runs in/{print $(NF-1)}' "$log")
    echo "run-fuzz.sh: $h: ${execs:-?} executions in ${secs:-?} s, $(ls "$corpus" | wc -l) inputs in $corpus, no finding"
  else
    status=1
    echo "run-fuzz.sh: $h FOUND A PROBLEM (log: $log; input: $(ls -t "$findings" | head -1 | sed "s|^|$findings/|")):"
    grep -E "ERROR: |runtime error: |fuzz property failed|deadly signal|uncaught|what\(\)" "$log" | head -5 | sed 's/^/    /'
  fi
done

for n in "${names[@]}"; do
  [[ "$n" == cli ]] || continue
  if [[ ! -x "$tpusim" ]]; then
    echo "run-fuzz.sh: cli: $tpusim not found (build it: cmake --build build --target tpusim, or set TPUSIM)" >&2
    exit 2
  fi
  /usr/bin/python3 validation/fuzz/cli_mutate.py --tpusim "$tpusim" --seconds "$seconds" \
    --seeds validation/fuzz/corpus/tpub --seeds build-fuzz/seeds/tpub --findings build-fuzz/findings/cli || status=1
done
exit $status
