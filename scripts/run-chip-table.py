#!/usr/bin/env python3
"""The whole-chip benchmark table: full-size models on each whole-chip preset, timing-only.

For each model and preset: `tpusim compile MODEL --config P --report R -o m.tpub` (the report gives the whole
chip's roofline bounds), then `tpusim run m.tpub --timing-only --config P --stats S`. Prints a Markdown table of
cycles, simulated latency, the ratio of cycles to the ideal roofline bound (every weight, input and output moved
once) and to the bound of the traffic the code makes, that traffic over the ideal, the MXU utilisation over every matrix unit
of the chip (the stats' units.mxu.utilization: busy cycles / (cycles x units)), and the wall time of the compile (which includes one
timing simulation for the report) and of the run.

    python3 scripts/run-chip-table.py [--presets v4,v5e,v6e,h200-like] [--models resnet50,bert_base,...]

Models are the exports of scripts/run-model-bench.sh in build/workloads-full (it exports what is missing); with
--small, the build's small workloads (build/workloads). TPUSIM (default build/tools/tpusim) is the program used.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FULL = {"resnet50": "build/workloads-full/resnet50/resnet50.onnx",
        "bert_base": "build/workloads-full/bert_base/bert.onnx",
        "gpt2_prefill": "build/workloads-full/gpt2_124m/prefill/gpt2.onnx",
        "gpt2_decode": "build/workloads-full/gpt2_124m/decode/gpt2.onnx"}
SMALL = {"resnet18": "build/workloads/resnet18/resnet18.onnx", "bert_small": "build/workloads/bert_small/bert.onnx",
         "gpt2_prefill": "build/workloads/gpt2_small/prefill/gpt2.onnx",
         "gpt2_decode": "build/workloads/gpt2_small/decode/gpt2.onnx"}


def timed(cmd):
    t0 = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--presets", default="v4,v5e,v6e,h200-like")
    ap.add_argument("--models", default="")
    ap.add_argument("--small", action="store_true")
    args = ap.parse_args()
    models = SMALL if args.small else FULL
    if args.models:
        models = {k: v for k, v in models.items() if k in args.models.split(",")}
    tpusim = os.environ.get("TPUSIM", os.path.join(ROOT, "build/tools/tpusim"))
    missing = [p for p in models.values() if not os.path.exists(os.path.join(ROOT, p))]
    if missing:
        sys.exit("run-chip-table.py: missing " + ", ".join(missing) +
                 (" (build the project)" if args.small else " (bash scripts/run-model-bench.sh exports them)"))
    print("| model | preset | cycles | latency | ratio to ideal bound | ratio to traffic bound | traffic / ideal | "
          "MXU util | compile wall | run wall |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp:
        for name, path in models.items():
            for preset in args.presets.split(","):
                prog, rep, stats = (os.path.join(tmp, f) for f in ("m.tpub", "r.txt", "s.json"))
                wc = timed([tpusim, "compile", os.path.join(ROOT, path), "--config", preset, "--report", rep,
                            "-o", prog])
                wr = timed([tpusim, "run", prog, "--timing-only", "--config", preset, "--stats", stats])
                report = open(rep).read()
                ratio = float(re.search(r"run cycles / bound ([\d.]+)", report).group(1))
                traffic_ratio = float(re.search(r"run cycles / traffic bound ([\d.]+)", report).group(1))
                traffic = re.search(r"traffic / ideal ([\d.]+|-)", report).group(1)
                s = json.load(open(stats))
                util = s["units"]["mxu"]["utilization"]  # busy cycles / (cycles x every matrix unit of the chip)
                print(f"| {name} | {preset} | {s['cycles']:,} | {s['seconds'] * 1e6:.1f} us | {ratio:.2f} | "
                      f"{traffic_ratio:.2f} | {traffic} | {100 * util:.1f}% | {wc:.2f} s | {wr:.2f} s |", flush=True)


if __name__ == "__main__":
    main()
