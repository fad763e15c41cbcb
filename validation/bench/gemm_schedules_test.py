#!/usr/bin/env python3
"""gemm_chip's choice of schedule on the whole-chip TPU presets (ctest `timing.GemmChipSchedules`).

For each preset (v4, v5e, v6e) and each of nine GEMM shapes (square, long K, short K, skinny M), chip_bench
simulates the kernel timing-only three times: with the schedule the kernel chooses by its estimates (Auto), and
with each schedule forced (strips, tiles). Checks:
  - Auto is never more than 10% slower than the faster of the two. The estimates rank them, each within about
    10% of its simulation; on these 27 cases the worst miss is v4 16384 x 1024 x 4096, 8.1% (the strips and
    tiles estimates are 2% apart; strips' stores go out after each column group and the next group's panels
    wait behind them in HBM, which its estimate spreads over the folds), then v5e 4096^3, 4.0%;
  - Auto runs a 4096^3 bf16 GEMM at >= 85% of the chip's peak on every preset (the issue's target; README table).
usage: gemm_schedules_test.py CHIP_BENCH
"""
import re
import subprocess
import sys

SHAPES = [(4096, 4096, 4096), (8192, 1024, 8192), (1024, 8192, 1024), (2048, 8192, 2048), (16384, 1024, 4096),
          (512, 4096, 8192), (128, 4096, 4096), (4096, 768, 3072), (2048, 3072, 768)]


def run(bench, preset, m, k, n, schedule):
    out = subprocess.run([bench, "--config", preset, "--m", str(m), "--k", str(k), "--n", str(n), "--schedule",
                          schedule], check=True, capture_output=True, text=True,
                         env={"SC_COPYRIGHT_MESSAGE": "DISABLE"}).stdout
    cycles = int(re.search(r"(\d+) cycles", out).group(1))
    peak = float(re.search(r"([\d.]+)% of peak", out).group(1))
    return cycles, peak


def main():
    bench = sys.argv[1]
    failures = []
    for preset in ("v4", "v5e", "v6e"):
        for m, k, n in SHAPES:
            auto, peak = run(bench, preset, m, k, n, "auto")
            strips, _ = run(bench, preset, m, k, n, "strips")
            tiles, _ = run(bench, preset, m, k, n, "tiles")
            best = min(strips, tiles)
            line = f"{preset:4} {m:6} x {k:5} x {n:5}: auto {auto:9,}  strips {strips:9,}  tiles {tiles:9,}" \
                   f"  auto/best {auto / best:.3f}  {peak:.1f}% of peak"
            print(line)
            if auto > 1.10 * best:
                failures.append("auto more than 10% slower than the better schedule: " + line)
            if (m, k, n) == (4096, 4096, 4096) and peak < 85.0:
                failures.append("4096^3 below 85% of peak: " + line)
    if failures:
        sys.exit("\n".join(failures))


if __name__ == "__main__":
    main()
