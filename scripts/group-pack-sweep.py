#!/usr/bin/env python3
"""The measurement behind the grouped convolutions' estimate (docs/compiler.md, "Grouped convolutions").

Nine grouped 3 x 3 convolutions (RegNetY's and ResNeXt's shapes, groups of 4 to 256 channels), each exported by
torch and compiled on each preset at every number of groups per GEMM that divides its groups (`tpusim compile M
--config C --group-pack P --report-json R`), and as the compiler's estimate chooses (`--group-pack 0`). Prints, per convolution and preset, the cycles at each P, the chosen P and the best P, then the
chosen P's cycles over the best's and over one GEMM per group's (P = 1), as geometric means and extremes.

    python3 scripts/group-pack-sweep.py [--presets v5e,v6e,...] [--out DIR]

TPUSIM (default build/tools/tpusim) is the program used; /usr/bin/python3 (Debian's python3-torch) exports.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# (channels in and out, groups, image side)
SHAPES = [(440, 55, 7), (208, 26, 14), (128, 32, 28), (256, 32, 14), (512, 32, 7), (512, 2, 7), (64, 8, 56),
          (1024, 32, 7), (96, 4, 28)]
PRESETS = ["v1-like", "v4-like", "v4", "v5e", "v6e", "h200-like", "edge"]

EXPORT = """
import sys, torch
c, g, hw, path = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.manual_seed(0)
m = torch.nn.Conv2d(c, c, 3, padding=1, groups=g).eval()
torch.onnx.export(m, (torch.randn(1, c, hw, hw),), path, opset_version=13)
"""


def cycles(tpusim, model, preset, pack, out):
    r = os.path.join(out, f"r-{preset}-{pack}.json")
    subprocess.run([tpusim, "compile", model, "--config", preset, "--group-pack", str(pack), "--report-json", r],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(r) as f:
        return json.load(f)["cycles"]


def chosen_pack(tpusim, model, preset, packs, out):
    """The P the estimate chooses: the one whose program the default compile matches (its GEMM notes)."""
    r = os.path.join(out, f"r-{preset}-default.json")
    subprocess.run([tpusim, "compile", model, "--config", preset, "--report-json", r], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with open(r) as f:
        report = json.load(f)
    for x in report["regions"]:
        if x["kind"] == "note" and "groups as one convolution" in x["name"]:
            return max(packs), report["cycles"]
        if x["kind"] == "note" and "groups at a time" in x["name"]:
            return int(x["name"].split()[0]), report["cycles"]
    return 1, report["cycles"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", default=",".join(PRESETS))
    ap.add_argument("--out", default=None, help="where the models and reports go (default: a temporary folder)")
    args = ap.parse_args()
    tpusim = os.environ.get("TPUSIM", os.path.join(ROOT, "build/tools/tpusim"))
    presets = args.presets.split(",")
    tmp = None if args.out else tempfile.TemporaryDirectory()
    out = args.out or tmp.name
    os.makedirs(out, exist_ok=True)
    regret, speedup, best_speedup, worst = [], [], [], (1.0, "")
    print("| convolution | preset | cycles at P | chosen P | best P | chosen / best |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    for c, g, hw in SHAPES:
        name = f"{c} ch, {g} groups, {hw}x{hw}"
        d = os.path.join(out, f"c{c}g{g}s{hw}")
        os.makedirs(d, exist_ok=True)
        model = os.path.join(d, "conv.onnx")
        if not os.path.exists(model):
            subprocess.run(["/usr/bin/python3", "-c", EXPORT, str(c), str(g), str(hw), model], check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        packs = [p for p in range(1, g + 1) if g % p == 0]
        for preset in presets:
            at = {p: cycles(tpusim, model, preset, p, d) for p in packs}
            pick, default_cycles = chosen_pack(tpusim, model, preset, packs, d)
            best = min(at, key=at.get)
            ratio = default_cycles / at[best]
            regret.append(ratio)
            speedup.append(at[1] / default_cycles)
            best_speedup.append(at[1] / at[best])
            if ratio > worst[0]:
                worst = (ratio, f"{name} on {preset}")
            shown = ", ".join(f"{p}: {at[p]:,}" for p in packs)
            print(f"| {name} | `{preset}` | {shown} | {pick} ({default_cycles:,}) | {best} | {ratio:.2f} |")
    gm = lambda xs: math.exp(sum(math.log(x) for x in xs) / len(xs))
    print()
    print(f"{len(regret)} cases: the chosen P's cycles are {gm(regret):.3f}x the best P's (geometric mean; worst "
          f"{worst[0]:.2f}x, {worst[1]}); against one GEMM per group the chosen P is {gm(speedup):.2f}x faster "
          f"(the best P: {gm(best_speedup):.2f}x), and slower in {sum(1 for s in speedup if s < 1)} cases")
    return 0


if __name__ == "__main__":
    sys.exit(main())
