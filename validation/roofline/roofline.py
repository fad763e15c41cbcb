#!/usr/bin/python3
"""TPUv1's roofline on the v1-like chip: a sweep of fully connected layers, measured against the published one.

A fully connected layer c[M,N] = a[M,K] @ b[K,N] (gemm_int8.s, K = N = 256*k) does 2*M*K*N operations on K*N
weight bytes: operational intensity I = 2*M ops per weight byte. TPUv1's roofline (Jouppi et al., ISCA 2017,
Figure 5) is attainable = min(peak, I * weight bandwidth), with peak = 256*256 MACs * 2 * 700 MHz = 91.75 TOPS
and 34 GB/s of weight memory: the ridge is at 91.75e12 / 34e9 = 2699 ops per weight byte, that is batch M = 1350
(the paper's "about 1350" counts MAC operations per weight byte, half of ours).
Each point runs `tpusim run KERNEL --timing-only` and reports measured TOPS = 2*M*K*N / simulated seconds.

  roofline.py --tpusim build/tools/tpusim --out DIR [--k 8] [--m 1,4,...] [--check]

writes DIR/roofline.csv (M, K, N, intensity, measured and roofline TOPS, error, TPUv1 counters) and
DIR/roofline.svg (log-log: the roofline as a line, the measured points as dots), prints the table, and with
--check exits 1 if any point is more than --tolerance (0.10) from the roofline.
"""
import argparse
import concurrent.futures
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PEAK_TOPS = 256 * 256 * 2 * 700e6 / 1e12  # ISCA 2017: 256x256 8-bit MACs at 700 MHz
WEIGHT_GBS = 34.0                         # ISCA 2017: DDR3 weight memory
COUNTERS = ["array_active", "weight_stall", "weight_shift", "non_matrix", "raw_stall", "input_stall"]


def roofline_tops(intensity):
    return min(PEAK_TOPS, intensity * WEIGHT_GBS * 1e9 / 1e12)


def run_point(args, m, k, n):
    with tempfile.TemporaryDirectory() as tmp:
        stats_path = os.path.join(tmp, "stats.json")
        cmd = [args.tpusim, "run", args.kernel, "-D", f"M={m}", "-D", f"K={k}", "-D", f"N={n}",
               "--config", args.config, "--random-inputs", "--timing-only", "--stats", stats_path]
        for d in args.define:
            cmd += ["-D", d]
        env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
        p = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if p.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{p.stdout}{p.stderr}")
        with open(stats_path) as f:
            stats = json.load(f)
    ops = 2.0 * m * k * n
    intensity = ops / (k * n)  # ops per weight byte (int8 weights)
    measured = ops / stats["seconds"] / 1e12
    roof = roofline_tops(intensity)
    row = {"M": m, "K": k, "N": n, "intensity": intensity, "cycles": stats["cycles"],
           "measured_tops": measured, "roofline_tops": roof, "error": measured / roof - 1.0,
           "hbm_bytes": stats["hbm"]["bytes_read"] + stats["hbm"]["bytes_written"]}
    for c in COUNTERS:
        row[c] = stats.get("tpuv1_counters", {}).get(c, float("nan"))
    return row


def svg(rows, path, title):
    """A log-log plot written by hand (matplotlib need not be installed)."""
    W, H, L, R, T, B = 720, 480, 70, 20, 40, 55
    xs = [r["intensity"] for r in rows]
    x0 = 10 ** math.floor(math.log10(min(xs + [1.0])))
    x1 = 10 ** math.ceil(math.log10(max(xs + [PEAK_TOPS * 1e3 / WEIGHT_GBS * 4])))
    ys = [r["measured_tops"] for r in rows] + [roofline_tops(x0)]
    y0 = 10 ** math.floor(math.log10(max(min(ys), 1e-6)))
    y1 = 10 ** math.ceil(math.log10(PEAK_TOPS * 1.5))

    def px(x):
        return L + (W - L - R) * (math.log10(x) - math.log10(x0)) / (math.log10(x1) - math.log10(x0))

    def py(y):
        return H - B - (H - T - B) * (math.log10(y) - math.log10(y0)) / (math.log10(y1) - math.log10(y0))

    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
           f'font-size="12">', f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{W / 2}" y="22" text-anchor="middle" font-size="14">{title}</text>']
    for e in range(int(math.log10(x0)), int(math.log10(x1)) + 1):
        x = px(10 ** e)
        out.append(f'<line x1="{x:.1f}" y1="{T}" x2="{x:.1f}" y2="{H - B}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{H - B + 16}" text-anchor="middle">1e{e}</text>')
    for e in range(int(math.log10(y0)), int(math.log10(y1)) + 1):
        y = py(10 ** e)
        out.append(f'<line x1="{L}" y1="{y:.1f}" x2="{W - R}" y2="{y:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{L - 6}" y="{y + 4:.1f}" text-anchor="end">1e{e}</text>')
    out.append(f'<rect x="{L}" y="{T}" width="{W - L - R}" height="{H - T - B}" fill="none" stroke="black"/>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 15}" text-anchor="middle">operational intensity '
               f'(ops per weight byte)</text>')
    out.append(f'<text x="18" y="{(T + H - B) / 2}" text-anchor="middle" '
               f'transform="rotate(-90 18 {(T + H - B) / 2})">TeraOps/s</text>')
    ridge = PEAK_TOPS * 1e3 / WEIGHT_GBS
    pts = [(x0, roofline_tops(x0)), (ridge, PEAK_TOPS), (x1, PEAK_TOPS)]
    out.append('<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="' +
               " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts) + '"/>')
    out.append(f'<text x="{px(ridge):.1f}" y="{py(PEAK_TOPS) - 6:.1f}" fill="#1f77b4">TPUv1 roofline: '
               f'{PEAK_TOPS:.1f} TOPS, {WEIGHT_GBS:g} GB/s (ridge {ridge:.0f})</text>')
    for r in rows:
        out.append(f'<circle cx="{px(r["intensity"]):.1f}" cy="{py(r["measured_tops"]):.1f}" r="4" '
                   f'fill="#d62728"><title>M={r["M"]}: {r["measured_tops"]:.3g} TOPS '
                   f'({100 * r["error"]:+.1f}%)</title></circle>')
    out.append(f'<circle cx="{L + 15}" cy="{T + 15}" r="4" fill="#d62728"/>'
               f'<text x="{L + 25}" y="{T + 19}">tpusim v1-like, measured</text>')
    out.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", required=True, help="the tpusim program")
    ap.add_argument("--out", required=True, help="folder for roofline.csv and roofline.svg")
    ap.add_argument("--kernel", default=os.path.join(ROOT, "kernels", "gemm_int8.s"))
    ap.add_argument("--config", default="v1-like")
    ap.add_argument("--k", type=int, default=8, help="K = N = 256*k")
    ap.add_argument("--m", default="1,2,4,8,16,32,64,128,256,512,1024,1350,2048,2700,4096",
                    help="batch sizes, comma separated")
    # A TPUv1 fully connected layer: its activations stay in the Unified Buffer (ACT_RESIDENT: a and c in VMEM,
    # c as int8) and its weights stream from DDR3 in 64 KiB tiles (B_TILED: each tile one contiguous read).
    ap.add_argument("-D", "--define", action="append", default=None,
                    help="kernel define NAME=VALUE (default: ACT_RESIDENT=1 B_TILED=1 OUT_DT=0)")
    ap.add_argument("--tolerance", type=float, default=0.10)
    ap.add_argument("--check", action="store_true", help="exit 1 if a point is off by more than --tolerance")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args()
    if args.define is None:
        args.define = ["ACT_RESIDENT=1", "B_TILED=1", "OUT_DT=0"]
    os.makedirs(args.out, exist_ok=True)
    k = n = 256 * args.k
    ms = [int(x) for x in args.m.split(",")]
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as ex:
        rows = list(ex.map(lambda m: run_point(args, m, k, n), ms))
    with open(os.path.join(args.out, "roofline.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
        w.writeheader()
        w.writerows(rows)
    svg(rows, os.path.join(args.out, "roofline.svg"),
        f"Fully connected layers, K = N = {k}, on {args.config} ({os.path.basename(args.kernel)})")
    print(f"{'M':>6} {'ops/B':>7} {'measured TOPS':>14} {'roofline TOPS':>14} {'error':>8}  "
          f"{'active':>6} {'w.stall':>7} {'w.shift':>7} {'non-mx':>6}")
    bad = []
    for r in rows:
        print(f"{r['M']:>6} {r['intensity']:>7.0f} {r['measured_tops']:>14.3f} {r['roofline_tops']:>14.3f} "
              f"{100 * r['error']:>7.1f}%  {100 * r['array_active']:>5.1f}% {100 * r['weight_stall']:>6.1f}% "
              f"{100 * r['weight_shift']:>6.1f}% {100 * r['non_matrix']:>5.1f}%")
        if abs(r["error"]) > args.tolerance:
            bad.append(r["M"])
    if bad:
        print(f"off the roofline by more than {100 * args.tolerance:.0f}% at M = {bad}")
    if args.check and bad:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
