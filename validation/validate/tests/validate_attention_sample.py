#!/usr/bin/env python3
"""The CI sample of `tpusim validate --suite attention` (ctest label `validate`): a fixed sample of small causal and
encoder attention goldens on h200-like, through the fused attention kernel (kernels/attention_chip.h).

Checks, each against something computed here independently:
  - every case ran (a finite simulated time, no error), the CSV has the sample's size, half of each class;
  - the shape columns are the golden file's, the held-out flags follow the documented hash (FNV-1a of
    "class col=.. col=..", one in five);
  - flops = 4 B H S^2 D (halved for causal) and bytes = 2 B S D (2 H + 2 KVH) for every row;
  - the roofline baseline = max(flops / 989.4 TFLOP/s, bytes / 4.8 TB/s) + 2.5 us (h200-like's peak and HBM);
  - summary.csv's MAPE per class equals the mean of |simulated - measured| / measured over cases.csv;
  - --jobs 2 (two worker processes) gives the same rows, simulated times included;
  - the module's part (validate.h): against --attention-module-us 0 (the fused kernel alone), an encoder case
    takes exactly 11.02 us more, a causal case 9.49 us more plus its QKV preprocessing, a copy of q, k and v that
    reads and writes 2 B S D (H + 2 KVH) bytes: at least its writes over 4.8 TB/s (HBM must take them; its reads
    may come from the L2, where the warm-up run left q, k and v), and at most both over 4.8 TB/s plus 10 us;
  - the minimum time per tile (validate.h, kAttentionTileUs; --attention-tile-us): on a folder of two one-token
    cases, the fused kernel alone (--attention-module-us 0): one causal case of 64 x 32 heads (2,048 tiles, 16
    waves of 132: some core runs 16 tiles, so 15 floors) takes at least 15 x 3.46 us with the floor, and less
    without (a one-token tile's own work is about 2 us: the floor binds); one encoder case of one wave (16 tiles: one a core) takes exactly as long with
    the floor as without.
usage: validate_attention_sample.py TPUSIM OUT_DIR
"""
import csv
import math
import os
import subprocess
import sys

from golden_split import fnv1a

SAMPLE, MAX_GFLOP = 8, 0.5
CAUSAL_MODULE_US, ENCODER_MODULE_US, TILE_US = 9.49, 11.02, 3.46
PEAK, HBM, FIXED_US = 132 * 4 * 16 * 32 * 2 * 1830e6, 4.8e12, 2.5


def main():
    tpusim, out = sys.argv[1:3]
    args = [tpusim, "validate", "--suite", "attention", "--sample", str(SAMPLE), "--max-gflop", str(MAX_GFLOP)]
    subprocess.run(args + ["--out", out], check=True)
    rows = list(csv.DictReader(open(f"{out}/cases.csv")))
    assert len(rows) == SAMPLE, f"{len(rows)} rows, {SAMPLE} expected"
    cols = {"attention_causal": ["batch_size", "seq_len", "heads", "kv_heads", "head_dim"],
            "attention_encoder": ["batch_size", "seq_len", "heads", "head_dim"]}
    for cls in cols:
        assert sum(r["class"] == cls for r in rows) == SAMPLE // 2, cls
    for r in rows:
        assert r["error"] == "", r
        sim = float(r["simulated_us"])
        assert math.isfinite(sim) and sim > 0, r
        shape = dict(kv.split("=") for kv in r["shape"].split())
        assert list(shape) == cols[r["class"]], r["shape"]
        key = r["class"] + "".join(f" {c}={shape[c]}" for c in cols[r["class"]])
        assert (r["held_out"] in ("1", "true", "yes")) == (fnv1a(key) % 5 == 0), (key, r["held_out"])
        b, s, h, d = (int(shape[c]) for c in ("batch_size", "seq_len", "heads", "head_dim"))
        kvh = int(shape.get("kv_heads", h))
        causal = r["class"] == "attention_causal"
        flops = 4 * b * h * s * s * d * (0.5 if causal else 1)
        nbytes = 2 * b * s * d * (2 * h + 2 * kvh)
        assert abs(float(r["flops"]) - flops) <= 1e-9 * flops, (r["flops"], flops)
        assert abs(float(r["bytes"]) - nbytes) <= 1e-9 * nbytes, (r["bytes"], nbytes)
        roof = max(flops / PEAK, nbytes / HBM) * 1e6 + FIXED_US
        assert abs(float(r["roofline_us"]) - roof) <= 1e-6 * roof, (r["roofline_us"], roof)

    summary = list(csv.DictReader(open(f"{out}/summary.csv")))
    keys = summary[0].keys()
    col = next(k for k in keys if "mape" in k.lower())
    part_col = next(k for k in keys if k.lower() == "part")
    regime_col = next(k for k in keys if k.lower() == "regime")
    for cls in cols:
        c = [r for r in rows if r["class"] == cls]
        mape = 100 * sum(abs(float(x["simulated_us"]) - float(x["measured_us"])) / float(x["measured_us"])
                         for x in c) / len(c)
        row = next(x for x in summary if x["class"] == cls and x[part_col] == "all" and x[regime_col] in ("all", ""))
        assert abs(float(row[col]) - mape) < 1e-3 * max(1, mape), (cls, row[col], mape)
        print(f"validate attention sample: {cls} MAPE {mape:.1f}% over {len(c)} cases")

    subprocess.run(args + ["--jobs", "2", "--out", out + "-jobs2"], check=True)
    rows2 = list(csv.DictReader(open(f"{out}-jobs2/cases.csv")))
    assert [(r["shape"], r["class"], r["simulated_us"]) for r in rows2] == \
        [(r["shape"], r["class"], r["simulated_us"]) for r in rows], "--jobs 2 differs from one process"

    subprocess.run(args + ["--attention-module-us", "0", "--out", out + "-kernel"], check=True)
    kernel = {(r["class"], r["shape"]): float(r["simulated_us"]) for r in csv.DictReader(open(f"{out}-kernel/cases.csv"))}
    for r in rows:
        extra = float(r["simulated_us"]) - kernel[(r["class"], r["shape"])]
        if r["class"] == "attention_encoder":
            assert abs(extra - ENCODER_MODULE_US) < 1e-6, (r["shape"], extra)
            continue
        shape = {k: int(v) for k, v in (kv.split("=") for kv in r["shape"].split())}
        qkv = 2 * shape["batch_size"] * shape["seq_len"] * shape["head_dim"] * (shape["heads"] + 2 * shape["kv_heads"])
        copy_us = extra - CAUSAL_MODULE_US
        assert qkv / HBM * 1e6 <= copy_us <= 2 * qkv / HBM * 1e6 + 10, (r["shape"], copy_us)

    folder = out + "-tiles"
    os.makedirs(folder, exist_ok=True)
    with open(f"{folder}/causal_attention.csv", "w") as f:
        f.write("batch_size,seq_len,heads,kv_heads,head_dim,latency_us\n64,1,32,8,128,60.0\n")
    with open(f"{folder}/encoder_attention.csv", "w") as f:
        f.write("batch_size,seq_len,heads,head_dim,latency_us\n1,16,16,64,10.0\n")
    times = {}
    for tile in (TILE_US, 0):
        subprocess.run([tpusim, "validate", "--suite", "attention", "--goldens", folder, "--attention-module-us", "0",
                        "--attention-tile-us", str(tile), "--out", f"{folder}/out-{tile}"], check=True)
        for r in csv.DictReader(open(f"{folder}/out-{tile}/cases.csv")):
            assert r["error"] == "", r
            times[(r["class"], tile)] = float(r["simulated_us"])
    assert times[("attention_causal", TILE_US)] >= 15 * TILE_US, times
    assert times[("attention_causal", 0)] < 15 * TILE_US, times
    assert times[("attention_encoder", TILE_US)] == times[("attention_encoder", 0)], times
    print(f"validate attention tiles: 16 waves {times[('attention_causal', TILE_US)]:.1f} us with the floor, "
          f"{times[('attention_causal', 0)]:.1f} without")


if __name__ == "__main__":
    main()
