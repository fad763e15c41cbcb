#!/usr/bin/env python3
"""The CI sample of `tpusim validate` (ctest label `validate`): a fixed sample of GEMM goldens on h200-like.

Checks, each against something computed here independently:
  - every case ran (a finite simulated time, no error) and the CSV has the sample's size;
  - the held-out flags follow the documented hash (FNV-1a of "class m=.. n=.. k=..", one in five);
  - three bf16 and three fp8 cases' simulated times equal chip_bench's cycles for the same kernel over the preset's
    clock (chip_bench --dtype fp8: the fp8 goldens run as f8e4m3 at mxu.fp8_rate), the fp8 ones plus the fp8
    Linear module's time set from the data (validate.h: 9.63 us and x's 2 m k bytes at 0.925 TB/s); and with
    --warm-up and one weight copy, chip_bench's after a warm-up run (chip_bench --warm-up: timed on the L2 the
    first run left); a --goldens folder of those fp8 cases gets the kernel alone, and --fp8-module-us /
    --fp8-quantise-tbs exactly what they give;
  - --warm-up's weight copies (the default for the project's goldens, --weight-copies 0: NVIDIA's collector runs
    ceil(L2 / weight bytes) Linear layers, 1 to 5, with their own weights): where all five copies, x and y fit the
    L2 with room to spare, the time is exactly one copy's (each finds its weights held, as the one copy does);
    where four copies of 16.8 MB do not fit, it is longer than one copy's (whose weights stay held);
  - summary.csv's MAPE for gemm_bf16 equals the mean of |simulated - measured| / measured over cases.csv;
  - scatter.svg is well-formed XML with one circle per case;
  - --jobs 2 (two worker processes) gives the same rows, simulated times included;
  - the sample's bf16 and fp8 MAPEs have not grown past their recorded levels (regression guards: a modelling
    change that makes one worse must say so by changing RECORDED_BF16_MAPE or RECORDED_FP8_MAPE here).
usage: validate_sample.py TPUSIM CHIP_BENCH OUT_DIR
"""
import csv
import math
import os
import subprocess
import sys
import xml.dom.minidom

from golden_split import fnv1a

SAMPLE, MAX_GFLOP = 16, 20
# 13.0 measured 2026-12-03 on this sample (h200-like L2 at 9370 GB/s); 14.2 after the tiled GEMM's estimate counts
# the pipeline's fill and the stores and tries smaller K chunks (one case of this sample, 2048 x 1024 x 256, went
# from 6.38 to 6.87 us against 4.89 measured; on a 120-case sample, `tpusim validate --sample 120 --max-gflop 20`,
# bf16 MAPE went from 29.0% to 28.2%, fp8 from 53.0% to 53.2%); 13.6 after h200-like's four tensor cores per SM
# became one matrix unit of 16 x 128 and split K's reduction was spread over every core (the 120-case sample:
# bf16 28.2% to 15.6%; docs/validation.md); 13.0 on 2026-12-05 after GEMM tiles ran one at a time per core in the
# validator and the tiled GEMM's estimate counted VMEM's ports (docs/validation.md, "GEMM tiles one at a time");
# 14.7 after split K's reduction became a second launch: of this sample's 8 bf16 cases, m=32 n=32 k=4096 went
# from -30% to +44% (its plan now keeps K whole in 32 tiles of one row, whose estimate is about half their
# simulated cycles), while on 500 bf16 cases (`--sample 1000 --max-gflop 100`) MAPE went from 11.9% to 11.0%; 9.3
# after h200-like's instruction queues became 1024 deep (that case's chunks then load 3 ahead: +44% -> +3.2%);
# 10.2 after h200-like's HBM writes moved at 0.78 of reads' rate (hbm.write_efficiency): this sample's two
# launch-bound cases that write the most became slower (2048 x 1024 x 256 +8.5% -> +13.7%, 1536 x 512 x 256 +0.8%
# -> +3.6%), while on 500 bf16 cases (`--sample 1000 --max-gflop 100`) MAPE went from 10.6% to 10.2%; 9.3 when
# pairs of cores multicast their tiles' shared operand (500 bf16 cases: 10.2% -> 9.7%); 7.5 when h200-like's reads
# moved at hbm.efficiency 0.89 (500 bf16 cases: 9.7% -> 8.7%); still 7.5 with h200-like's L2 writing back and its
# reads at 0.88 (500 bf16 cases: 8.7% -> 8.1%); 7.6 with h200-like's matrix unit at mxu.efficiency 0.85 (500 bf16
# cases: 8.0% -> 7.5%).
RECORDED_BF16_MAPE = 7.6
# 52.9 measured 2026-12-03 (h200-like's 16 x 128 matrix unit) when the fp8 goldens began to run as f8e4m3 at
# mxu.fp8_rate (2 on h200-like); before, as int8 at mxu.i8_rate (also 2): the same simulated times case for case,
# so the same 52.9 (and 55.7% on `tpusim validate --sample 40 --max-gflop 20`, unchanged too). 57.1 on 2026-12-05:
# the estimate's VMEM ports split K more often, which makes fp8 kernels faster where the goldens are already
# slower by TensorRT-LLM's quantisation of the activations (a known gap, docs/validation.md); 49.3 after split K's
# reduction became a second launch; 55.2 after the 1024-deep queues (faster fp8 kernels, same known gap); 3.6
# once the validator added the fp8 Linear module's time beyond its GEMM, set from the data (below; on the 500 fp8
# cases of `--sample 1000 --max-gflop 100`, 56.5% -> 6.9%); 4.9 with multicast and the module's two numbers derived
# again (9.80 us, 0.916 TB/s; the 500 fp8 cases: 6.7%); 2.4 with h200-like's reads at hbm.efficiency 0.89 and the
# two numbers derived again (9.62 us, 0.927 TB/s; the 500 fp8 cases: 6.7% -> 5.7%); 2.1 with the L2 writing back,
# reads at 0.88 and the two numbers derived again (9.64 us, 0.923 TB/s; the 500 fp8 cases: 5.7% -> 5.6%); 2.9
# with the matrix unit at mxu.efficiency 0.85 and the two derived again (9.63 us, 0.925 TB/s): the kernel's
# estimate of slower matrix work chose another plan for one launch-bound case, 13 x 64 x 6144 (15.87 -> 14.91 us
# against 15.88 measured), while the 500 fp8 cases of `--sample 1000 --max-gflop 100` went from 5.7% to 5.3%.
RECORDED_FP8_MAPE = 2.9
# The fp8 Linear module beyond its GEMM (validate.h, kFp8ModuleUs and kFp8QuantiseTbs).
FP8_MODULE_US, FP8_QUANTISE_TBS = 9.63, 0.925


def golden_folder(path, cases):
    """A --goldens folder holding `cases` (rows of cases.csv: class, shape, measured_us) as gemm.csv."""
    os.makedirs(path, exist_ok=True)
    with open(f"{path}/gemm.csv", "w") as f:
        f.write("dtype,m,n,k,latency_us\n")
        for x in cases:
            shape = dict(kv.split("=") for kv in x["shape"].split())
            dtype = "fp8" if x["class"] == "gemm_fp8" else "bfloat16"
            f.write(f"{dtype},{shape['m']},{shape['n']},{shape['k']},{x['measured_us']}\n")
    return path


def main():
    tpusim, chip_bench, out = sys.argv[1:4]
    subprocess.run([tpusim, "validate", "--sample", str(SAMPLE), "--max-gflop", str(MAX_GFLOP), "--out", out],
                   check=True)
    rows = list(csv.DictReader(open(f"{out}/cases.csv")))
    assert len(rows) == SAMPLE, f"{len(rows)} rows, {SAMPLE} expected"
    for r in rows:
        assert r["error"] == "", r
        assert math.isfinite(float(r["simulated_us"])) and float(r["simulated_us"]) > 0, r
        shape = dict(kv.split("=") for kv in r["shape"].split())
        key = f"{r['class']} m={shape['m']} n={shape['n']} k={shape['k']}"
        assert (r["held_out"] in ("1", "true", "yes")) == (fnv1a(key) % 5 == 0), (key, r["held_out"])
        assert float(r["flops"]) == 2 * int(shape["m"]) * int(shape["n"]) * int(shape["k"]), r

    # Three cases of each class against chip_bench (the same kernel, run by another program), as validate runs it:
    # tiles one at a time, and where the plan splits K one more launch for the reduction's kernel; by default on
    # an empty L2, with --warm-up and one weight copy after a warm-up run.
    launch = next(int(x.split()[1]) for x in subprocess.run([tpusim, "config", "--show", "h200-like"], check=True,
                                                            capture_output=True, text=True).stdout.splitlines()
                  if x.startswith("chip.launch_cycles"))
    chosen = [x for cls in ("gemm_bf16", "gemm_fp8") for x in [r for r in rows if r["class"] == cls][:3]]
    one = golden_folder(out + "-one-copy", chosen)
    subprocess.run([tpusim, "validate", "--goldens", one, "--warm-up", "--weight-copies", "1", "--fp8-module-us",
                    str(FP8_MODULE_US), "--fp8-quantise-tbs", str(FP8_QUANTISE_TBS), "--out", one + "-out"],
                   check=True, capture_output=True)
    warm = {x["shape"]: x for x in csv.DictReader(open(f"{one}-out/cases.csv"))}
    splits = 0
    fp8_kernel_us = {}  # fp8 shape -> chip_bench's time for its kernel alone, on an empty L2
    for r in chosen:
        dtype = ["--dtype", "fp8"] if r["class"] == "gemm_fp8" else []  # fp8: f8e4m3 inputs, bf16 out
        for warm_up, row in (([], r), (["--warm-up"], warm[r["shape"]])):
            shape = dict(kv.split("=") for kv in r["shape"].split())
            res = subprocess.run([chip_bench, "--config", "h200-like", "--m", shape["m"], "--n", shape["n"], "--k",
                                  shape["k"], *dtype, "--out", "bf16", "--trans-b", "--max-split-k", "16",
                                  "--tiles-one-at-a-time", "--multicast", "--no-narrow-strips", "--min-chunk-folds", "4",
                                  "--reduction-launch-cycles", str(launch),
                                  *warm_up, "--plan"],
                                 check=True, capture_output=True, text=True).stdout
            plan, line = res.splitlines()[-2:]
            assert (" fp8 " in line) == bool(dtype), line
            cycles = int(line.split(" cycles")[0].split()[-1]) + (launch if "splits of" in plan else 0)
            splits += "splits of" in plan
            us = cycles / 1830.0
            if dtype:
                if not warm_up:
                    fp8_kernel_us[r["shape"]] = us
                us += FP8_MODULE_US + 2 * int(shape["m"]) * int(shape["k"]) / (FP8_QUANTISE_TBS * 1e6)
            assert abs(us - float(row["simulated_us"])) < 1e-6 * us, (us, row["simulated_us"], plan, warm_up)
    assert splits > 0, "no case of the six splits K: the reduction's launch is not checked"
    assert any(float(warm[x["shape"]]["simulated_us"]) < float(x["simulated_us"]) for x in chosen), \
        "no case is faster on the L2 its warm-up left"

    # The fp8 module's options: given explicitly, exactly what they say; a --goldens folder (one kernel's timings,
    # as the CUDA runner writes them) gets none of the module by default.
    fp8 = [x for x in rows if x["class"] == "gemm_fp8" and x["shape"] in fp8_kernel_us]
    folder = golden_folder(out + "-fp8-goldens", fp8)
    for extra, module in ((["--goldens", folder], lambda m, k: 0.0),
                          (["--goldens", folder, "--fp8-module-us", "1.5", "--fp8-quantise-tbs", "2"],
                           lambda m, k: 1.5 + 2 * m * k / 2e6)):
        subprocess.run([tpusim, "validate", *extra, "--out", folder + "-out"], check=True, capture_output=True)
        got = {x["shape"]: float(x["simulated_us"]) for x in csv.DictReader(open(f"{folder}-out/cases.csv"))}
        assert len(got) == len(fp8), (got, extra)
        for shape, us in got.items():
            d = dict(kv.split("=") for kv in shape.split())
            want = fp8_kernel_us[shape] + module(int(d["m"]), int(d["k"]))
            assert abs(us - want) < 1e-6 * want, (shape, us, want, extra)

    # The weight copies: all five with x and y in 20 MB of the 50 MB L2, and four of 16.8 MB that are not.
    fits = {"class": "gemm_bf16", "shape": "m=14 n=2560 k=768", "measured_us": "3.8176"}
    rotated = {"class": "gemm_fp8", "shape": "m=13 n=256 k=65536", "measured_us": "20.9387"}
    copies = golden_folder(out + "-copies", [fits, rotated])
    times = {}
    for n in ("0", "1"):
        subprocess.run([tpusim, "validate", "--goldens", copies, "--warm-up", "--weight-copies", n, "--out",
                        f"{copies}-{n}"], check=True, capture_output=True)
        times[n] = {x["shape"]: float(x["simulated_us"]) for x in csv.DictReader(open(f"{copies}-{n}/cases.csv"))}
    assert times["0"][fits["shape"]] == times["1"][fits["shape"]], times
    assert times["0"][rotated["shape"]] > times["1"][rotated["shape"]], times

    # summary.csv against cases.csv.
    bf16 = [x for x in rows if x["class"] == "gemm_bf16"]
    mape = 100 * sum(abs(float(x["simulated_us"]) - float(x["measured_us"])) / float(x["measured_us"])
                     for x in bf16) / len(bf16)
    summary = list(csv.DictReader(open(f"{out}/summary.csv")))
    keys = summary[0].keys()
    col = next(k for k in keys if "mape" in k.lower())
    part_col = next(k for k in keys if k.lower() == "part")
    regime_col = next(k for k in keys if k.lower() == "regime")
    row = next(x for x in summary if x["class"] == "gemm_bf16" and x[part_col] == "all"
               and x[regime_col] in ("all", ""))
    assert abs(float(row[col]) - mape) < 1e-3 * max(1, mape), (row[col], mape)

    # Two worker processes: the same cases, the same simulated times, in the same order.
    subprocess.run([tpusim, "validate", "--sample", str(SAMPLE), "--max-gflop", str(MAX_GFLOP), "--jobs", "2",
                    "--out", out + "-jobs2"], check=True)
    rows2 = list(csv.DictReader(open(f"{out}-jobs2/cases.csv")))
    assert [(r["shape"], r["class"], r["simulated_us"]) for r in rows2] == \
        [(r["shape"], r["class"], r["simulated_us"]) for r in rows], "--jobs 2 differs from one process"

    doc = xml.dom.minidom.parse(f"{out}/scatter.svg")
    assert len(doc.getElementsByTagName("circle")) == len(rows)

    fp8 = [x for x in rows if x["class"] == "gemm_fp8"]
    mape8 = 100 * sum(abs(float(x["simulated_us"]) - float(x["measured_us"])) / float(x["measured_us"])
                      for x in fp8) / len(fp8)
    print(f"validate sample: {len(rows)} cases, gemm_bf16 MAPE {mape:.1f}% (recorded {RECORDED_BF16_MAPE}), "
          f"gemm_fp8 MAPE {mape8:.1f}% (recorded {RECORDED_FP8_MAPE})")
    if RECORDED_BF16_MAPE is not None:
        assert mape <= RECORDED_BF16_MAPE + 0.5, f"bf16 MAPE {mape:.2f}% grew past {RECORDED_BF16_MAPE}%"
    if RECORDED_FP8_MAPE is not None:
        assert mape8 <= RECORDED_FP8_MAPE + 0.5, f"fp8 MAPE {mape8:.2f}% grew past {RECORDED_FP8_MAPE}%"


if __name__ == "__main__":
    main()
