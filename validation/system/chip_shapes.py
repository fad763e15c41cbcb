#!/usr/bin/env python3
"""Results do not depend on the chip's shape: every exported test workload, on each whole-chip preset and on the
same preset cut to 1 core of 1 matrix unit (--set chip.cores=1 --set core.mxus=1), functional, gives the same
output files byte for byte (bf16, and int8 where --int8 lists the model). Prints one line per case with both
cycle counts; exits 1 on the first difference.

    python3 validation/system/chip_shapes.py [--tpusim build/tools/tpusim] [--workloads build/workloads]
        [--presets v4,v5e,v6e,h200-like]
"""
import argparse
import filecmp
import json
import os
import subprocess
import sys
import tempfile

# (model folder, ONNX file, also int8)
MODELS = [("mlp", "mlp.onnx", False), ("tinycnn", "tinycnn.onnx", True), ("resnet18", "resnet18.onnx", True),
          ("bert_small", "bert.onnx", True), ("bert_small_op17", "bert.onnx", False),
          ("gpt2_small/prefill", "gpt2.onnx", False), ("gpt2_small/decode", "gpt2.onnx", False),
          ("gpt2_small_op17/prefill", "gpt2.onnx", False), ("gpt2_small_op17/decode", "gpt2.onnx", False),
          ("zoo_llama", "llama.onnx", False), ("zoo_whisper", "whisper.onnx", False), ("zoo_unet", "unet.onnx", False),
          ("zoo_conformer", "conformer.onnx", False)]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tpusim", default="build/tools/tpusim")
    ap.add_argument("--workloads", default="build/workloads")
    ap.add_argument("--presets", default="v4,v5e,v6e,h200-like")
    args = ap.parse_args()
    cases = 0
    with tempfile.TemporaryDirectory() as tmp:
        for folder, onnx, int8 in MODELS:
            d = os.path.join(args.workloads, folder)
            model = os.path.join(d, onnx)
            if not os.path.exists(model):
                sys.exit(f"chip_shapes.py: {model} is not exported (build the workloads target)")
            inputs = [a for f in sorted(os.listdir(d)) if f.endswith(".npy") and not f.endswith("_ref.npy")
                      for a in ("--input", f[:-4] + "=" + os.path.join(d, f))]
            for precision in ["bf16"] + (["int8"] if int8 else []):
                for preset in args.presets.split(","):
                    runs = []
                    for shape in ([], ["--set", "chip.cores=1", "--set", "core.mxus=1"]):
                        out = os.path.join(tmp, f"{len(runs)}")
                        stats = out + ".json"
                        subprocess.run([args.tpusim, "run", model, *inputs, "--config", preset, *shape,
                                        "--precision", precision, "--output-dir", out, "--stats", stats],
                                       check=True, stdout=subprocess.DEVNULL)
                        s = json.load(open(stats))
                        runs.append((out, s["cycles"], s["cores_running"]))
                    (whole, wc, cores), (one, oc, _) = runs
                    names = sorted(os.listdir(whole))
                    same = names == sorted(os.listdir(one)) and names and all(
                        filecmp.cmp(os.path.join(whole, f), os.path.join(one, f), shallow=False) for f in names)
                    print(f"{folder} {precision} {preset}: {cores} cores {wc} cycles, 1 core x 1 MXU {oc} cycles: "
                          f"{'identical' if same else 'DIFFERENT'}", flush=True)
                    if not same:
                        sys.exit(1)
                    cases += 1
                    for r in runs:
                        subprocess.run(["rm", "-rf", r[0]], check=True)
    print(f"chip_shapes.py: {cases} cases, every output identical")


if __name__ == "__main__":
    main()
