#!/usr/bin/python3
"""Regression baselines: cycle counts and output digests of a fixed corpus of kernels and models on every preset.

  baselines.py check  --tpusim PATH --chip-bench PATH --workloads DIR [--models DIR] [--file CSV] [--only REGEX]
  baselines.py record --tpusim PATH --chip-bench PATH --workloads DIR [--models DIR] [--file CSV] [--only REGEX]

`check` runs the corpus (CORPUS below), compares every row with the committed file (validation/baselines/
baselines.csv by default) and prints a table of the differences: changed cycles (with the change in %), changed
outputs ("digest changed"), a case that now fails or now runs, rows that are new or gone. It exits 1 when anything
differs, 0 when every row matches, 2 when it could not run (a program, the exported MLP or the file missing).
`record` runs the same corpus and writes the file (re-recording is meant for
changes of cycles or outputs that are intended: say why in the commit; scripts/record-baselines.sh does it).

Each row of the file is: case, preset, cycles, digest.
  - cycles: the simulated cycle count of the run ("-" when the run failed);
  - digest: SHA-256 over the run's output .npy files (functional runs), "-" for timing-only runs, or
    "error: <the error's first line>" when the run failed (a preset that cannot hold a model is recorded, not
    skipped, so that it starting or stopping to fit shows up as a difference).

--only REGEX restricts both commands to the rows whose "CASE PRESET" matches (re.search): `--only mlp`,
`--only ' v4$'`. `record --only` replaces those rows and keeps the others.

--models DIR: the full-size models (build/workloads-full, exported by the build with TPUSIM_FULL_WORKLOADS=ON).
Their rows (the cases that name {models}) are checked and recorded only when it is given; without it they are
left out of both sides, as --only leaves rows out.

Standard library only. Every run is a separate process (SystemC elaborates one chip per process), run one after
the other: the whole corpus takes a few seconds.
"""
import argparse
import csv
import dataclasses
import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_FILE = os.path.join(ROOT, "validation", "baselines", "baselines.csv")
RECORD_SCRIPT = "bash scripts/record-baselines.sh"
HEADER = ["case", "preset", "cycles", "digest"]
RUN_TIMEOUT_S = 300  # per process; the slowest run, a full-size model on h200-like, takes about 7 s


@dataclasses.dataclass(frozen=True)
class Case:
    """One program of the corpus, run on several presets.

    kind "run":  `tpusim run ARGS --config PRESET --output-dir D --stats S` (functional unless ARGS say otherwise):
                 cycles from the statistics, digest over the outputs written to D.
    kind "chip": `chip_bench --config PRESET ARGS` (the whole-chip GEMM, always timing-only): cycles from its line.
    kind "report": `tpusim compile ARGS --config PRESET --report-json R` (a model compiled and simulated timing-only,
                 as the compile report runs it): cycles from the report.
    ARGS may name {workloads} (the --workloads folder) and {models} (the --models folder: the case is then left
    out without it); relative paths are relative to the repository root.
    presets: None means every preset that `tpusim config --list` prints.
    """
    name: str
    kind: str
    args: tuple
    presets: tuple = None


# The corpus. Inputs are deterministic: kernels get tpusim's --random-inputs with a fixed --seed (a fixed
# mt19937_64 stream per input), the MLP the exporter's input (workloads/mlp.py --seed 0, made by the build).
# Adding a case: append it here, then re-record (the new rows show up as "new case" until then).
CORPUS = [
    # The int8 GEMM under the examples' name, at a shape that is no multiple of any preset's array (edges, tails).
    Case("matmul.s M=200 K=300 N=260", "run",
         ("examples/matmul.s", "-D", "M=200", "-D", "K=300", "-D", "N=260", "--random-inputs", "--seed", "1")),
    # A memory-bound f32 vector add, several double-buffered chunks on the small presets, an odd tail.
    Case("vadd.s N=100003", "run",
         ("kernels/vadd.s", "-D", "N=100003", "--random-inputs", "--seed", "1")),
    # The exported MLP (8x64 -> 128 -> 64 -> 10, bf16) through the compiler, on its own input.
    Case("mlp.onnx", "run",
         ("{workloads}/mlp/mlp.onnx", "--input", "x={workloads}/mlp/x.npy")),
    # A decode step of the exported GPT-2 (small: 2 layers) on its own inputs: matrix-vector products on the vector
    # unit, the KV cache's casts and concatenations, attention on the vector unit (vpu.rdot, vpu.cdot).
    Case("gpt2_small decode", "run",
         ("{workloads}/gpt2_small/decode/gpt2.onnx", "-i", "input_ids={workloads}/gpt2_small/decode/input_ids.npy",
          "-i", "past_k_0={workloads}/gpt2_small/decode/past_k_0.npy",
          "-i", "past_k_1={workloads}/gpt2_small/decode/past_k_1.npy",
          "-i", "past_v_0={workloads}/gpt2_small/decode/past_v_0.npy",
          "-i", "past_v_1={workloads}/gpt2_small/decode/past_v_1.npy")),
    # The whole-chip GEMM kernel (kernels/gemm_chip.h) on the whole-chip presets, timing-only.
    Case("gemm_chip 512x512x512", "chip",
         ("--m", "512", "--n", "512", "--k", "512"), presets=("v4", "v5e", "v6e", "h200-like")),
    # A skinny GEMM with a transposed B whose K is split over cores (at most 16 ways).
    Case("gemm_chip 64x2048x4096 trans-b split-k<=16", "chip",
         ("--m", "64", "--n", "2048", "--k", "4096", "--trans-b", "--max-split-k", "16"), presets=("h200-like",)),
    # The full-size models whose cycles and roofline ratios docs/compiler.md and scripts/run-chip-table.py quote
    # (build/workloads-full, exported by the build with TPUSIM_FULL_WORKLOADS=ON), compiled and simulated
    # timing-only on every preset: a change of any kernel, plan or rule that moves a model's time shows up here.
    Case("resnet50 224x224", "report", ("{models}/resnet50/resnet50.onnx",)),
    Case("bert_base seq 128", "report", ("{models}/bert_base/bert.onnx",)),
    Case("gpt2_124m prefill", "report", ("{models}/gpt2_124m/prefill/gpt2.onnx",)),
    Case("gpt2_124m decode", "report", ("{models}/gpt2_124m/decode/gpt2.onnx",)),
    # int8 (post-training quantisation; a timing-only compile needs no calibration) where the int8 rate is double
    # (v6e) and where it is not (v5e): docs/compiler.md compares them with the bf16 rows above.
    Case("resnet50 224x224 int8", "report", ("{models}/resnet50/resnet50.onnx", "--precision", "int8"),
         presets=("v5e", "v6e")),
    Case("bert_base seq 128 int8", "report", ("{models}/bert_base/bert.onnx", "--precision", "int8"),
         presets=("v5e", "v6e")),
]


class ToolError(Exception):
    """A problem with the tools or the folders given (not a row's result): the script stops with this message."""


def env():
    return dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")


def list_presets(tpusim):
    """The presets that `tpusim config --list` prints ("NAME: ..." or "NAME (default): ..."), in its order."""
    p = subprocess.run([tpusim, "config", "--list"], capture_output=True, text=True, env=env(), cwd=ROOT)
    if p.returncode != 0:
        raise ToolError(f"{tpusim} config --list failed: {(p.stderr or p.stdout).strip()}")
    presets = [re.sub(r"\s*\(default\)$", "", line.split(":", 1)[0].strip())
               for line in p.stdout.splitlines() if ":" in line]
    if not presets:
        raise ToolError(f"{tpusim} config --list printed no presets:\n{p.stdout}")
    return presets


def first_error_line(p, replacements):
    """The first non-empty line of a failed run's stderr (else stdout), without tpusim's "tpusim: error: " prefix
    and with machine-specific paths replaced by placeholders, so that the file is the same on every checkout."""
    for text in (p.stderr, p.stdout):
        for line in text.splitlines():
            line = line.strip()
            if line:
                for path, name in replacements:
                    line = line.replace(path, name)
                return "error: " + re.sub(r"^tpusim: (error: )?", "", line)
    return f"error: exit status {p.returncode}, no message"


def run_one(case, preset, tools):
    """Runs one (case, preset); returns (cycles, digest) as the strings the file holds."""
    args = [a.replace("{workloads}", tools.workloads).replace("{models}", tools.models or "") for a in case.args]
    with tempfile.TemporaryDirectory(prefix="baselines-") as tmp:
        out_dir, stats_path = os.path.join(tmp, "out"), os.path.join(tmp, "stats.json")
        if case.kind == "run":
            cmd = [tools.tpusim, "run", *args, "--config", preset, "--output-dir", out_dir, "--stats", stats_path]
        elif case.kind == "chip":
            cmd = [tools.chip_bench, "--config", preset, *args]
        elif case.kind == "report":
            cmd = [tools.tpusim, "compile", *args, "--config", preset, "--report-json", stats_path]
        else:
            raise ValueError(f"case {case.name!r}: unknown kind {case.kind!r}")
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env(), cwd=ROOT, timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return "-", f"error: no result after {RUN_TIMEOUT_S} s"
        if p.returncode != 0:
            replacements = [(tmp, "<tmp>"), (tools.workloads, "<workloads>"), (ROOT, "<repo>")]
            if tools.models:
                replacements.insert(1, (tools.models, "<models>"))
            return "-", first_error_line(p, replacements)

        if case.kind == "chip":
            # chip_bench prints one line per GEMM: "... 3770 cycles  3.59 us ...".
            m = re.search(r"(\d+) cycles", p.stdout)
            if not m:
                raise ToolError(f"{' '.join(cmd)}: no 'N cycles' in its output:\n{p.stdout}")
            return m.group(1), "-"

        with open(stats_path) as f:
            cycles = json.load(f)["cycles"]
        # The digest covers every output file, in name order, each as its name, a NUL byte and its bytes (the .npy
        # header too, so a changed shape or dtype counts). No output files (a --timing-only case): "-".
        names = sorted(os.listdir(out_dir)) if os.path.isdir(out_dir) else []
        if not names:
            return str(cycles), "-"
        h = hashlib.sha256()
        for name in names:
            h.update(name.encode() + b"\0")
            with open(os.path.join(out_dir, name), "rb") as f:
                h.update(f.read())
        return str(cycles), h.hexdigest()


def needs_models(case):
    return any("{models}" in a for a in case.args)


def selected_row(key, only, models):
    """Whether the row (case, preset) is checked: --only selects it, and --models is given where it needs them."""
    if only and not only.search(f"{key[0]} {key[1]}"):
        return False
    return models or not any(c.name == key[0] and needs_models(c) for c in CORPUS)


def run_corpus(tools, only):
    """Runs every (case, preset) of the corpus that --only and --models select; returns {(case, preset): (cycles,
    digest)}."""
    presets = list_presets(tools.tpusim)
    rows = {}
    for case in CORPUS:
        for preset in case.presets or presets:
            if not selected_row((case.name, preset), only, tools.models):
                continue
            rows[(case.name, preset)] = run_one(case, preset, tools)
    return rows


def read_file(path):
    """{(case, preset): (cycles, digest)} from a baselines file; lines starting with '#' are comments."""
    with open(path, newline="") as f:
        reader = csv.reader(line for line in f if not line.startswith("#"))
        header = next(reader, None)
        if header != HEADER:
            raise ToolError(f"{path}: expected the header {','.join(HEADER)}, got {header}")
        rows = {}
        for n, row in enumerate(reader, 2):
            if len(row) != len(HEADER):
                raise ToolError(f"{path}: row {n} has {len(row)} fields, expected {len(HEADER)}: {row}")
            rows[(row[0], row[1])] = (row[2], row[3])
        return rows


def write_file(path, rows):
    with open(path, "w", newline="") as f:
        f.write("# Regression baselines (validation/baselines/README.md): cycles and output digests per case and "
                "preset.\n# Generated: re-record with `" + RECORD_SCRIPT + "` only when a change is intended.\n")
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        for key in sorted(rows):
            w.writerow([*key, *rows[key]])


def differences(old, new):
    """Table rows [case, preset, old cycles, new cycles, change, note] for every key whose row differs."""
    table = []
    for key in sorted(set(old) | set(new)):
        if key not in old:
            table.append([*key, "", new[key][0], "", "new case" + (f" ({new[key][1]})" if is_error(new[key]) else "")])
            continue
        if key not in new:
            table.append([*key, old[key][0], "", "", "case gone"])
            continue
        (oc, od), (nc, nd) = old[key], new[key]
        if (oc, od) == (nc, nd):
            continue
        numbers = oc.isdigit() and nc.isdigit() and int(oc) > 0 and oc != nc
        change = f"{100.0 * (int(nc) - int(oc)) / int(oc):+.2f}%" if numbers else ""
        if od == nd:
            note = ""
        elif is_error(new[key]):
            note = "fails now: " + nd[len("error: "):] if not is_error(old[key]) else "error changed: " + nd[len("error: "):]
        elif is_error(old[key]):
            note = "runs now (was " + od + ")"
        else:
            note = "digest changed"
        table.append([*key, oc, nc, change, note])
    return table


def is_error(row):
    return row[1].startswith("error:")


def print_table(table):
    head = ["case", "preset", "old cycles", "new cycles", "change", "note"]
    widths = [max(len(str(r[i])) for r in [head, *table]) for i in range(len(head))]
    right = {2, 3, 4}  # numbers right-aligned
    for r in [head, *table]:
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        print("  " + "  ".join(cells).rstrip())


def record_command(args):
    """The command line that re-records what this run checked (the script, or the same arguments to `record`)."""
    cmd = ["python3", os.path.relpath(os.path.abspath(__file__), os.getcwd()),
           "record", "--tpusim", args.tpusim, "--chip-bench", args.chip_bench, "--workloads", args.workloads]
    if args.models:
        cmd += ["--models", args.models]
    if os.path.abspath(args.file) != DEFAULT_FILE:
        cmd += ["--file", args.file]
    if args.only:
        cmd += ["--only", args.only]
    return " ".join(shlex.quote(c) for c in cmd)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", choices=["check", "record"])
    ap.add_argument("--tpusim", required=True, help="the tpusim program (build/tools/tpusim)")
    ap.add_argument("--chip-bench", required=True, help="the whole-chip GEMM benchmark "
                                                        "(build/validation/bench/chip_bench)")
    ap.add_argument("--workloads", required=True, help="the build's exported workloads (build/workloads)")
    ap.add_argument("--models", help="the full-size models (build/workloads-full; the build exports them with "
                                     "TPUSIM_FULL_WORKLOADS=ON): their rows are checked only when given")
    ap.add_argument("--file", default=DEFAULT_FILE, help="the baselines file (default: %(default)s)")
    ap.add_argument("--only", help="only the rows whose 'CASE PRESET' matches this regular expression")
    args = ap.parse_args()
    tools = argparse.Namespace(tpusim=os.path.abspath(args.tpusim), chip_bench=os.path.abspath(args.chip_bench),
                               workloads=os.path.abspath(args.workloads),
                               models=os.path.abspath(args.models) if args.models else None)
    only = re.compile(args.only) if args.only else None
    started = time.monotonic()
    try:
        for what, path in (("--tpusim", tools.tpusim), ("--chip-bench", tools.chip_bench)):
            if not os.access(path, os.X_OK):
                raise ToolError(f"{what} {path}: no such program (build it: cmake --build build)")
        for name, target in ((os.path.join("mlp", "mlp.onnx"), "workload_mlp"),
                             (os.path.join("gpt2_small", "decode", "gpt2.onnx"), "workload_gpt2_small")):
            if not os.path.isfile(os.path.join(tools.workloads, name)):
                raise ToolError(f"--workloads: {os.path.join(tools.workloads, name)} is missing (the build exports "
                                f"it: target {target})")
        for case in [c for c in CORPUS if needs_models(c)] if tools.models else []:
            model = next(a for a in case.args if "{models}" in a).replace("{models}", tools.models)
            if not os.path.isfile(model):
                raise ToolError(f"--models: {model} is missing (the build exports it with -DTPUSIM_FULL_WORKLOADS=ON: "
                                f"target workloads_full)")
        new = run_corpus(tools, only)
        if not new:
            raise ToolError(f"--only {args.only!r} selects no row of the corpus")
        old = read_file(args.file) if (args.command == "check" or os.path.exists(args.file)) else {}
    except ToolError as e:
        print(f"baselines: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the baselines file missing or unreadable, a temporary folder that cannot be made
        print(f"baselines: {e.filename}: {e.strerror}" if e.filename else f"baselines: {e}", file=sys.stderr)
        return 2
    # compare (and replace) only the selected rows
    selected = {k: v for k, v in old.items() if selected_row(k, only, tools.models)}
    table = differences(selected, new)
    wall = time.monotonic() - started

    if args.command == "record":
        merged = {k: v for k, v in old.items() if k not in selected}
        merged.update(new)
        write_file(args.file, merged)
        print(f"baselines: recorded {len(new)} rows in {args.file} ({len(merged)} in all), {wall:.1f} s")
        if table and old:
            print(f"{len(table)} of them differ from what the file held:")
            print_table(table)
        return 0

    if not table:
        print(f"baselines: all {len(new)} rows match {args.file} ({wall:.1f} s)")
        return 0
    print(f"baselines: {len(table)} of {len(set(selected) | set(new))} rows differ from {args.file} ({wall:.1f} s):")
    print_table(table)
    # The last line: how to re-record (the script records the committed file from build/; otherwise the exact
    # command that re-records what was checked here).
    how = record_command(args)
    if os.path.abspath(args.file) == DEFAULT_FILE and not args.only:
        how = f"{RECORD_SCRIPT} (or: {how})"
    print(f"If these changes are intended, re-record and say why in the commit: {how}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
