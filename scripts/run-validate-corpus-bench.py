#!/usr/bin/env python3
"""The whole GEMM corpus's wall time in timing-only mode, estimated from a stratified sample (a benchmark).

`tpusim validate --suite gemm --out DIR` runs all 50,217 golden GEMMs (12,552 TFLOP of simulated work), hours of one
core; this runs a fixed sample that stands for them and says what the whole would take. The cases fall into strata
by dtype and decade of FLOPs (2 m n k); of each stratum the sample takes K cases evenly spaced in its order of FLOPs
(every case of a stratum of at most K), leaving out cases of more than --max-tflop. They run through `tpusim
validate --goldens` (its cases.csv gives each case's wall seconds: kernel generation and simulation), and each
stratum's wall time is its FLOPs times the sample's wall seconds per FLOP (a ratio estimator: a GEMM's simulation
grows with its work), or, for a stratum whose cases were all left out, the wall seconds per FLOP of the highest
sampled stratum of its dtype. The estimate's spread is the range of the per-stratum estimates over the sample's
jackknife (each case left out in turn).

In the same run it measures the host's own fp32 GEMM rate (build/validation/bench/sim_bench's host_gemm_f32/1024,
Eigen on one thread), so that the simulator's speed is also a
ratio: simulated GEMM FLOPs per wall second over the host's FLOPs per second.

    python3 scripts/run-validate-corpus-bench.py [--per-stratum 4] [--max-tflop 30] [--jobs 1] [--out DIR]

TPUSIM (default build/tools/tpusim) is the program used; the goldens are the build's (build/goldens/h200/gemm.csv).
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def host_gemm_flops():
    """The host's fp32 GEMM rate, FLOPs per second: sim_bench's host_gemm_f32/1024 (Eigen, one thread)."""
    bench = os.path.join(ROOT, "build/validation/bench/sim_bench")
    out = subprocess.run([bench, "--benchmark_filter=host_gemm_f32/1024$", "--benchmark_format=json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)["benchmarks"][0]["GFLOPs"] * 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-stratum", type=int, default=4, help="cases sampled per stratum (dtype, decade of FLOPs)")
    ap.add_argument("--max-tflop", type=float, default=30.0, help="leave cases above this many TFLOP out of the sample")
    ap.add_argument("--jobs", type=int, default=1, help="tpusim validate --jobs (wall_s is per case either way)")
    ap.add_argument("--goldens", default=os.path.join(ROOT, "build/goldens/h200/gemm.csv"))
    ap.add_argument("--out", default=None, help="folder for the sample's goldens and validate's output")
    args = ap.parse_args()
    tpusim = os.environ.get("TPUSIM", os.path.join(ROOT, "build/tools/tpusim"))

    with open(args.goldens) as f:
        rows = list(csv.DictReader(f))
    strata = {}
    for r in rows:
        flops = 2 * int(r["m"]) * int(r["n"]) * int(r["k"])
        strata.setdefault((r["dtype"], int(math.floor(math.log10(flops)))), []).append((flops, r))
    sample = []
    for key in sorted(strata):
        cases = sorted((c for c in strata[key] if c[0] <= args.max_tflop * 1e12), key=lambda c: c[0])
        k = min(args.per_stratum, len(cases))
        sample += [(key, cases[int((i + 0.5) * len(cases) / k)]) for i in range(k)]

    out = args.out or tempfile.mkdtemp(prefix="validate-corpus-bench-")
    gold = os.path.join(out, "goldens")
    os.makedirs(gold, exist_ok=True)
    with open(os.path.join(gold, "gemm.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        for _, (_, r) in sample:
            w.writerow(r)
    host = host_gemm_flops()
    t0 = time.monotonic()
    subprocess.run([tpusim, "validate", "--suite", "gemm", "--goldens", gold, "--jobs", str(args.jobs), "--out",
                    os.path.join(out, "validate")], check=True, stdout=subprocess.DEVNULL)
    sample_wall = time.monotonic() - t0
    with open(os.path.join(out, "validate", "cases.csv")) as f:
        done = list(csv.DictReader(f))
    failed = [c for c in done if c["error"]]
    if failed:
        sys.exit(f"run-validate-corpus-bench.py: {len(failed)} cases failed, the first: {failed[0]['shape']}: "
                 f"{failed[0]['error']}")
    # cases.csv's shape is "m=M n=N k=K" and its class gemm_bf16 / gemm_fp8: the wall seconds of each sampled case
    wall = {}
    for c in done:
        m, n, k = (int(p.split("=")[1]) for p in c["shape"].split())
        wall[(c["class"].removeprefix("gemm_"), m, n, k)] = float(c["wall_s"])
    dtype_name = {"bfloat16": "bf16", "fp8": "fp8"}
    by_stratum = {}
    for key, (flops, r) in sample:
        s = wall[(dtype_name[r["dtype"]], int(r["m"]), int(r["n"]), int(r["k"]))]
        by_stratum.setdefault(key, []).append((flops, s))

    def estimate(samples):
        """Whole-corpus wall seconds per stratum from per-stratum lists of (flops, wall_s)."""
        est, rate_of = {}, {}
        for key in sorted(strata):
            got = samples.get(key)
            if got:
                rate_of[key] = sum(s for _, s in got) / sum(f for f, _ in got)
        for key in sorted(strata):
            total_flops = sum(f for f, _ in strata[key])
            if key in rate_of:
                est[key] = (total_flops * rate_of[key], "sampled")
            else:  # every case above --max-tflop: the highest sampled stratum of the dtype
                below = [k for k in rate_of if k[0] == key[0] and k[1] < key[1]]
                est[key] = (total_flops * rate_of[max(below)], f"at decade {max(below)[1]}'s rate")
        return est

    est = estimate(by_stratum)
    total = sum(e for e, _ in est.values())
    jack = []
    for key, got in by_stratum.items():
        if len(got) < 2:
            continue
        for i in range(len(got)):
            j = dict(by_stratum)
            j[key] = got[:i] + got[i + 1:]
            jack.append(sum(e for e, _ in estimate(j).values()))
    corpus_flops = sum(f for v in strata.values() for f, _ in v)
    sampled_flops = sum(f for v in by_stratum.values() for f, _ in v)
    sampled_wall = sum(s for v in by_stratum.values() for _, s in v)

    print(f"# The whole GEMM corpus in timing-only mode ({tpusim} validate --suite gemm, h200-like), estimated from "
          f"{len(sample)} of its {len(rows)} cases")
    print()
    print("| dtype | decade of FLOPs | cases | TFLOP | sampled | sampled TFLOP | sampled wall s | s per TFLOP | estimated wall s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for key in sorted(strata):
        got = by_stratum.get(key, [])
        tf = sum(f for f, _ in strata[key]) / 1e12
        sf = sum(f for f, _ in got) / 1e12
        sw = sum(s for _, s in got)
        rate = f"{sw / sf:.3g}" if got else est[key][1]
        print(f"| {key[0]} | 1e{key[1]} | {len(strata[key])} | {tf:.4g} | {len(got)} | {sf:.4g} | {sw:.4g} | {rate} | "
              f"{est[key][0]:.4g} |")
    print()
    print(f"corpus: {len(rows)} cases, {corpus_flops / 1e12:.0f} TFLOP; sample: {len(sample)} cases, "
          f"{sampled_flops / 1e12:.1f} TFLOP, {sampled_wall:.0f} s of case wall time ({sample_wall:.0f} s elapsed "
          f"with --jobs {args.jobs})")
    print(f"estimated whole-corpus wall time on one core: {total:.0f} s = {total / 3600:.2f} h"
          + (f" (jackknife range {min(jack) / 3600:.2f} to {max(jack) / 3600:.2f} h)" if jack else ""))
    print(f"simulated GEMM work per wall second: {sampled_flops / sampled_wall / 1e12:.3f} TFLOP/s over the sample, "
          f"{corpus_flops / total / 1e12:.3f} over the corpus; the host's fp32 GEMM (Eigen, 1024^3, one thread): "
          f"{host / 1e9:.1f} GFLOP/s; ratio (corpus) {corpus_flops / total / host:.0f}x")


if __name__ == "__main__":
    main()
