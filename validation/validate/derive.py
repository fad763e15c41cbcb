#!/usr/bin/env python3
"""Derives again every number that `h200-like` and `tpusim validate` take from the H200 goldens, by the procedures
docs/validation.md gives, and prints each from the tuning part beside the held-out part's and the value in use.

  derive.py TPUSIM GOLDENS_DIR OUT_DIR [--jobs N] [--quick] [--only NAME,...] [--warm-up]

GOLDENS_DIR is the goldens as validate reads them (gemm.csv uncompressed: the build's goldens/h200). OUT_DIR gets
a folder of filtered golden CSVs per procedure (what `tpusim validate --goldens` reads) and validate's output for
each part. Each procedure runs on the chip as it is now, so after a change of the preset (a new hbm.efficiency,
say) run it again and the later numbers follow. NAME is one of:
  launch      chip.launch_cycles: bf16 cases with m, n and k all at most 64: median(measured) less the median of
              their simulated kernels at chip.launch_cycles 0, in cycles of the chip's clock (every case)
  write       hbm.write_efficiency: bf16, memory-bound by the plain roofline, above 20 us: the median bandwidth
              (bytes / measured time) of those that write more than 90% of their bytes over that of those that
              read more than 90% (data only)
  efficiency  hbm.efficiency: bf16 above 20 us that read more than 90% of their bytes, at most 150 flops a byte and
              100 GFLOP, simulated at hbm.efficiency 1: 1 / median(measured / simulated) (a fixed sample of 600 of
              the tuning part, 300 of the held-out part)
  mxu         mxu.efficiency: bf16 compute-bound by the plain roofline, above 20 us and at most 100 GFLOP, whose
              output tiles of 128 x 256 fill at least two waves of 132 (neither split K nor a last wave decides):
              the efficiency at which median(simulated / measured) is 1, found from 1 by e <- e x median(simulated
              / measured) until it moves by less than 0.002 (a fixed sample of 150 of the tuning part, 75 of the
              held-out part)
  fp8         kFp8ModuleUs: fp8 cases whose x (2 m k bytes) is at most 256 KiB, without the module: median(measured -
              simulated); kFp8QuantiseTbs: those whose x is at least 64 MiB, at most 100 GFLOP: median(2 m k /
              (measured - simulated - kFp8ModuleUs)) (every case of each part)
  tile        kAttentionTileUs: causal one-token cases (seq_len 1) of at least 3 waves of 132 (batch x heads): the
              least-squares slope of measured time over waves, one intercept per head_dim (data only)
  attention   kCausalModuleUs, kEncoderModuleUs: one-token cases small enough for one wave (seq_len 1, batch x heads
              <= 132), run with --attention-module-us 1 and the tile's minimum (the value `tile` derived, where it
              ran first, else the one in use): median(measured - simulated) + 1 (every case)
--quick takes a few cases of each (a check that the procedures run; attention still takes every case). --warm-up
times every case as `tpusim validate --warm-up` does (the goldens' measurement protocol: warm L2, weight copies).
Took 26 minutes on 2 cores with --jobs 2 beside a fuzzing campaign (fp8's 8,173 cases most of it, mxu 5 of them); it
printed the values now in use.
"""
import argparse
import csv
import functools
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "tests"))
from golden_split import fnv1a  # noqa: E402 (the held-out split, as the sample tests write it)

BF16_PEAK = 989.4e12  # h200-like: 132 x 4096 flops x 1830 MHz
HBM_BYTES_PER_S = 4.8e12
LAUNCH_FLOOR_US = 2.5  # the plain roofline's regimes (docs/validation.md, "Regimes")


def gemm_rows(goldens):
    for r in csv.DictReader(open(os.path.join(goldens, "gemm.csv"))):
        m, n, k = int(r["m"]), int(r["n"]), int(r["k"])
        yield r, m, n, k, float(r["latency_us"]), 2 * (m * k + n * k + m * n), 2 * m * n * k


def held_out(cls, m, n, k):
    return fnv1a(f"{cls} m={m} n={n} k={k}") % 5 == 0


def write_folder(path, name, header, rows):
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, name), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)


def gemm_folder(path, goldens):
    """A --goldens folder of the gemm_rows tuples in `goldens` (the rows as they were); returns their count."""
    rows = [[r["dtype"], m, n, k, r["latency_us"]] for r, m, n, k, *_ in goldens]
    write_folder(path, "gemm.csv", ["dtype", "m", "n", "k", "latency_us"], rows)
    return len(rows)


def validate(args, suite, folder, part, sample, extra):
    out = os.path.join(folder, "out-" + part)
    cmd = [args.tpusim, "validate", "--suite", suite, "--goldens", folder, "--part", part, "--jobs", str(args.jobs),
           "--out", out] + (["--sample", str(sample)] if sample else []) + (["--warm-up"] if args.warm_up else []) + extra
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode:
        sys.exit(f"derive.py: {' '.join(cmd)} failed ({run.returncode}):\n{run.stderr}")
    return list(csv.DictReader(open(os.path.join(out, "cases.csv"))))


def shape(row):
    return {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", row["shape"])}


@functools.lru_cache(maxsize=None)
def preset_text(tpusim):
    return subprocess.run([tpusim, "config", "--show", "h200-like"], check=True, capture_output=True, text=True).stdout


def in_use(args, key):
    return next(line.split()[1] for line in preset_text(args.tpusim).splitlines() if line.startswith(key + " "))


def derive_launch(args, report):
    folder = os.path.join(args.out, "launch")
    gemm_folder(folder, (g for g in gemm_rows(args.goldens) if g[0]["dtype"] == "bfloat16" and max(g[1:4]) <= 64))
    clock_mhz = float(in_use(args, "chip.clock_mhz"))
    for part in ("tune", "held-out"):
        cases = validate(args, "gemm", folder, part, 0, ["--set", "chip.launch_cycles=0"])
        measured = statistics.median(float(c["measured_us"]) for c in cases)
        body = statistics.median(float(c["simulated_us"]) for c in cases)
        report.append(("chip.launch_cycles", part, len(cases), f"{(measured - body) * clock_mhz:.0f}",
                       f"measured {measured:.3f} us, the kernels {body * clock_mhz:.0f} cycles"))
    report.append(("chip.launch_cycles", "in use", "", in_use(args, "chip.launch_cycles"), ""))


def derive_write(args, report):
    rates = {(w, h): [] for w in (True, False) for h in (False, True)}
    for r, m, n, k, t, b, f in gemm_rows(args.goldens):
        if r["dtype"] != "bfloat16" or t <= 20:
            continue
        if max(f / BF16_PEAK, b / HBM_BYTES_PER_S) * 1e6 < LAUNCH_FLOOR_US or f / BF16_PEAK > b / HBM_BYTES_PER_S:
            continue  # launch- or compute-bound
        wfrac = 2 * m * n / b
        if wfrac > 0.9 or wfrac < 0.1:
            rates[(wfrac > 0.9, held_out("gemm_bf16", m, n, k))].append(b / t * 1e-6)
    for h in (False, True):
        w, rd = statistics.median(rates[(True, h)]), statistics.median(rates[(False, h)])
        n = len(rates[(True, h)]) + len(rates[(False, h)])
        report.append(("hbm.write_efficiency", "held-out" if h else "tune", n, f"{w / rd:.3f}",
                       f"writes {w:.2f} TB/s, reads {rd:.2f} TB/s"))
    report.append(("hbm.write_efficiency", "in use", "", in_use(args, "hbm.write_efficiency"), ""))


def derive_efficiency(args, report):
    folder = os.path.join(args.out, "efficiency")
    count = gemm_folder(folder, ((r, m, n, k, t, b, f) for r, m, n, k, t, b, f in gemm_rows(args.goldens)
                                 if r["dtype"] == "bfloat16" and t > 20 and 2 * m * n / b < 0.1 and f / b < 150
                                 and f <= 100e9))
    for part, sample in (("tune", 30 if args.quick else 600), ("held-out", 15 if args.quick else 300)):
        cases = validate(args, "gemm", folder, part, sample, ["--set", "hbm.efficiency=1"])
        ratio = statistics.median(float(c["measured_us"]) / float(c["simulated_us"]) for c in cases)
        report.append(("hbm.efficiency", part, len(cases), f"{1 / ratio:.3f}",
                       f"median measured / simulated {ratio:.4f} at efficiency 1, of {count} such cases"))
    report.append(("hbm.efficiency", "in use", "", in_use(args, "hbm.efficiency"), ""))


def derive_mxu(args, report):
    folder = os.path.join(args.out, "mxu")
    count = gemm_folder(folder, ((r, m, n, k, t, b, f) for r, m, n, k, t, b, f in gemm_rows(args.goldens)
                                 if r["dtype"] == "bfloat16" and t > 20 and f <= 100e9
                                 and f / BF16_PEAK > b / HBM_BYTES_PER_S  # compute-bound by the plain roofline
                                 and -(-m // 128) * -(-n // 256) >= 2 * 132))  # tiles of 128 x 256: two waves
    for part, sample in (("tune", 20 if args.quick else 150), ("held-out", 10 if args.quick else 75)):
        e, steps = 1.0, []
        for _ in range(6):
            cases = validate(args, "gemm", folder, part, sample, ["--set", f"mxu.efficiency={e:.4f}"])
            ratio = statistics.median(float(c["simulated_us"]) / float(c["measured_us"]) for c in cases)
            steps.append(f"{e:.4f}: {ratio:.4f}")
            if abs(e * ratio - e) < 0.002:
                break
            e = min(1.0, e * ratio)
        report.append(("mxu.efficiency", part, len(cases), f"{e:.3f}", "median simulated / measured at each "
                       f"efficiency tried ({'; '.join(steps)}), of {count} such cases"))
    report.append(("mxu.efficiency", "in use", "", in_use(args, "mxu.efficiency"), ""))


def derive_fp8(args, report):
    small, large = os.path.join(args.out, "fp8-module"), os.path.join(args.out, "fp8-quantise")
    fp8 = [g for g in gemm_rows(args.goldens) if g[0]["dtype"] != "bfloat16"]
    gemm_folder(small, (g for g in fp8 if 2 * g[1] * g[3] <= 256 << 10))  # x = 2 m k bytes
    gemm_folder(large, (g for g in fp8 if 2 * g[1] * g[3] >= 64 << 20 and g[6] <= 100e9))
    off = ["--fp8-module-us", "0", "--fp8-quantise-tbs", "0"]
    module = {}
    for part in ("tune", "held-out"):
        cases = validate(args, "gemm", small, part, 40 if args.quick else 0, off)
        module[part] = statistics.median(float(c["measured_us"]) - float(c["simulated_us"]) for c in cases)
        kernels = statistics.median(float(c["simulated_us"]) for c in cases)
        report.append(("kFp8ModuleUs", part, len(cases), f"{module[part]:.2f}", f"the kernels {kernels:.2f} us"))
    for part in ("tune", "held-out"):
        cases = validate(args, "gemm", large, part, 4 if args.quick else 0, off)
        q = sorted(2 * shape(c)["m"] * shape(c)["k"] / (float(c["measured_us"]) - float(c["simulated_us"]) -
                                                        module["tune"]) * 1e-6 for c in cases)
        report.append(("kFp8QuantiseTbs", part, len(cases), f"{statistics.median(q):.3f}",
                       f"10% below {q[len(q) // 10]:.3f}, 10% above {q[9 * len(q) // 10]:.3f}"))


def attention_held_out(cls, row, fields):
    return fnv1a(cls + "".join(f" {f}={int(row[f])}" for f in fields)) % 5 == 0


def derive_tile(args, report):
    reader = csv.DictReader(open(os.path.join(args.goldens, "causal_attention.csv")))
    rows = list(reader)
    for part in ("tune", "held-out"):
        groups = {}
        for r in rows:
            waves = -(-int(r["batch_size"]) * int(r["heads"]) // 132)
            if int(r["seq_len"]) != 1 or waves < 3:
                continue
            if attention_held_out("attention_causal", r, reader.fieldnames[:-1]) != (part == "held-out"):
                continue
            groups.setdefault(int(r["head_dim"]), []).append((waves, float(r["latency_us"])))
        sxy = sxx = 0.0
        slopes = []
        for hd, v in sorted(groups.items()):
            mw, my = statistics.fmean(w for w, _ in v), statistics.fmean(y for _, y in v)
            xy, xx = sum((w - mw) * (y - my) for w, y in v), sum((w - mw) ** 2 for w, _ in v)
            sxy, sxx = sxy + xy, sxx + xx
            slopes.append(f"{hd}: {xy / xx:.2f}")
        args.tile_us = round(sxy / sxx, 2) if part == "tune" else args.tile_us
        report.append(("kAttentionTileUs", part, sum(len(v) for v in groups.values()), f"{sxy / sxx:.2f}",
                       "per head_dim " + ", ".join(slopes)))


def tile_in_use(tpusim):
    text = subprocess.run([tpusim, "validate", "--help"], check=True, capture_output=True, text=True).stdout
    return float(re.search(r"minimum time per tile.*?default:\s+([0-9.]+)", text, re.S).group(1))


def derive_attention(args, report):
    tile = args.tile_us if args.tile_us is not None else tile_in_use(args.tpusim)
    folder = os.path.join(args.out, "attention")
    for name in ("causal_attention", "encoder_attention"):
        reader = csv.DictReader(open(os.path.join(args.goldens, name + ".csv")))
        rows = [[r[h] for h in reader.fieldnames] for r in reader
                if int(r["seq_len"]) == 1 and int(r["batch_size"]) * int(r["heads"]) <= 132]
        write_folder(folder, name + ".csv", reader.fieldnames, rows)
    for part in ("tune", "held-out"):
        cases = validate(args, "attention", folder, part, 0,
                         ["--attention-module-us", "1", "--attention-tile-us", str(tile)])
        for cls, key in (("attention_causal", "kCausalModuleUs"), ("attention_encoder", "kEncoderModuleUs")):
            c = [x for x in cases if x["class"] == cls]
            a = statistics.median(float(x["measured_us"]) - float(x["simulated_us"]) for x in c) + 1
            kernels = statistics.median(float(x["simulated_us"]) for x in c) - 1
            report.append((key, part, len(c), f"{a:.2f}", f"the kernels {kernels:.2f} us"))


PROCEDURES = {"launch": derive_launch, "write": derive_write, "efficiency": derive_efficiency, "mxu": derive_mxu,
              "fp8": derive_fp8, "tile": derive_tile, "attention": derive_attention}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("tpusim")
    p.add_argument("goldens")
    p.add_argument("out")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--only", default=",".join(PROCEDURES))
    p.add_argument("--warm-up", action="store_true")
    args = p.parse_args()
    args.tile_us = None  # set by `tile`, used by `attention`
    names = args.only.split(",")
    unknown = [n for n in names if n not in PROCEDURES]
    if unknown:
        sys.exit(f"derive.py: unknown procedure {', '.join(unknown)} (one of {', '.join(PROCEDURES)})")
    report = []
    for n in names:
        PROCEDURES[n](args, report)
    print("| number | part | cases | value | |")
    print("| --- | --- | ---: | ---: | --- |")
    for row in report:
        print("| " + " | ".join(str(x) for x in row) + " |")


if __name__ == "__main__":
    main()
