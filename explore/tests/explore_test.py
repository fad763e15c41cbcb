#!/usr/bin/env python3
"""Tests of `tpusim explore` (docs/explore.md), each against an independent reference:

  matches-run  a tiny sweep over the exported MLP (some of its points sharing one compiled program): each row of
               results.csv equals `tpusim run --timing-only --stats`
               of the same point (cycles, time, MXU utilisation, HBM bytes), results.json holds the same numbers,
               a point with an invalid parameter is recorded with its error and the others still run; a built-in
               GEMM layer's FLOPs are 2 m n k and its roofline figures follow from its own columns.
  resume       a sweep killed with SIGKILL part-way, then --resume: every point once, none of the finished ones
               run again (the journal's lines before the kill are kept as they were), and the same results as an
               uninterrupted sweep.
  mpi          `mpirun -n 2 tpusim explore` gives the same results as one process.
  layers       the roofline (roofline.svg, and the same in report.html) has one mark per layer (graph node with
               FLOPs) of every point, at the node's coordinates from `tpusim profile --json` of that point: FLOPs
               over the node's bytes, and FLOPs over its cycles at the chip's clock; layers.csv holds the same
               nodes with their cycles.
  report       report.html opened in headless Chromium: its DOM holds every plot's SVG (one circle per point in the
               latency plots, one per point and one per layer of each in the roofline),
               and a screenshot shows the points drawn (pixels of the points' colour in the page).
usage: explore_test.py CHECK TPUSIM WORK_DIR [MLP.onnx | CNN.onnx | MPIRUN | CHROMIUM]
"""
import csv
import json
import math
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time
import zlib

TIMES = {"compile_s", "simulate_s", "wall_s"}  # wall-clock figures: differ from run to run


def explore(tpusim, out, *args, check=True, prefix=(), **kw):
    cmd = list(prefix) + [tpusim, "explore", "--out", out] + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def rows(out):
    with open(os.path.join(out, "results.csv")) as f:
        return list(csv.DictReader(f))


def without_times(rs):
    return [{k: v for k, v in r.items() if k not in TIMES} for r in rs]


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-300)


def check_matches_run(tpusim, work, mlp):
    out = os.path.join(work, "sweep")
    shutil.rmtree(work, ignore_errors=True)
    # hbm.channels is not among the kernel symbols the compiler sees: its points share one compiled program.
    keys = ["mxu.rows", "hbm.bandwidth_gbs", "hbm.channels"]
    r = explore(tpusim, out, "--workload", mlp, "--config", "v4-like", "--sweep", "mxu.rows=32,64,4096",
                "--sweep", "hbm.bandwidth_gbs=100,400", "--sweep", "hbm.channels=2,16", "--jobs", "2")
    got = rows(out)
    assert [int(x["point"]) for x in got] == list(range(12)), got
    data = json.load(open(os.path.join(out, "results.json")))
    assert len(data["points"]) == 12
    cached = [json.loads(l).get("program_cached") for l in journal_lines(out)[1:] if l]
    assert any(cached), "no point reused a compiled program"
    assert not os.path.exists(os.path.join(out, ".programs")), "the kept programs were not removed"
    for x, j in zip(got, data["points"]):
        sets = [a for k in keys for a in ("--set", f"{k}={x[k]}")]
        assert j["params"] == {k: x[k] for k in keys}, (x, j)
        assert j["status"] == x["status"] and j["error"] == x["error"], (x, j)
        if x["mxu.rows"] == "4096":  # out of the parameter's range: an error, as `tpusim run` says too
            assert x["status"] == "error" and "mxu.rows" in x["error"], x
            run = subprocess.run([tpusim, "run", mlp, "--timing-only"] + sets, capture_output=True, text=True)
            assert run.returncode != 0 and "mxu.rows" in run.stderr, run.stderr
            continue
        assert x["status"] == "ok", x
        stats_path = os.path.join(work, f"stats{x['point']}.json")
        subprocess.run([tpusim, "run", mlp, "--timing-only", "--config", "v4-like", "--stats", stats_path] + sets,
                       check=True, capture_output=True)
        s = json.load(open(stats_path))
        assert int(x["latency_cycles"]) == s["cycles"], (x, s["cycles"])
        assert close(float(x["latency_us"]), s["seconds"] * 1e6), (x["latency_us"], s["seconds"])
        assert close(float(x["mxu_utilization"]), s["mxu"]["mac_utilization"]), x
        assert int(x["hbm_bytes"]) == s["hbm"]["bytes_read"] + s["hbm"]["bytes_written"], x
        assert close(float(x["throughput_per_s"]), 1 / s["seconds"]), x
        for k, v in x.items():  # the JSON row holds the CSV's numbers
            if k in ["point", "status", "error"] + keys:
                continue
            assert close(float(v), j[k], 1e-9), (k, v, j[k])
    # More HBM bandwidth never makes a point slower; the sweep covers both.
    by = {(x["mxu.rows"], x["hbm.bandwidth_gbs"], x["hbm.channels"]): x for x in got if x["status"] == "ok"}
    for rws in ("32", "64"):
        for ch in ("2", "16"):
            assert int(by[(rws, "400", ch)]["latency_cycles"]) <= int(by[(rws, "100", ch)]["latency_cycles"])

    # A built-in layer: its FLOPs are the GEMM's 2 m n k; intensity and achieved rate follow from the columns.
    out2 = os.path.join(work, "gemm")
    explore(tpusim, out2, "--workload", "gemm:m=128,n=256", "--sweep", "k=64,512")
    for x in rows(out2):
        assert x["status"] == "ok", x
        flops = 2 * 128 * 256 * int(x["k"])
        assert float(x["flops"]) == flops, x
        assert close(float(x["intensity"]), flops / float(x["hbm_bytes"]), 1e-6), x
        assert close(float(x["tflops"]), flops / (float(x["latency_us"]) * 1e-6) / 1e12, 1e-6), x
    # Mistakes are refused before anything runs.
    bad = explore(tpusim, os.path.join(work, "bad"), "--workload", "gemm", "--sweep", "q=1,2", check=False)
    assert bad.returncode == 2 and "not a parameter of the layer gemm" in bad.stderr, bad.stderr
    bad = explore(tpusim, out2, "--workload", "gemm:m=128,n=256", "--sweep", "k=64,512", check=False)
    assert bad.returncode == 2 and "--resume" in bad.stderr, bad.stderr  # the folder holds a sweep already


def journal_lines(out):
    with open(os.path.join(out, "journal.jsonl"), "rb") as f:
        return f.read().split(b"\n")


def check_resume(tpusim, work, _):
    shutil.rmtree(work, ignore_errors=True)
    args = ["--workload", "gemm:m=1024,n=1024,k=1024", "--sweep", "mxu.rows=32,64,128",
            "--sweep", "hbm.bandwidth_gbs=50,100,200,400,800,1600", "--jobs", "1"]
    out = os.path.join(work, "killed")
    p = subprocess.Popen([tpusim, "explore", "--out", out] + args, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    deadline = time.time() + 60
    done_before = 0
    while time.time() < deadline:
        try:
            done_before = len([l for l in journal_lines(out)[1:] if l.endswith(b"}")])
        except FileNotFoundError:
            done_before = 0
        if done_before >= 3 or p.poll() is not None:
            break
        time.sleep(0.005)
    p.send_signal(signal.SIGKILL)
    p.wait()
    assert p.returncode == -signal.SIGKILL, f"the sweep ended before it was killed (exit {p.returncode})"
    before = journal_lines(out)
    kept = [l for l in before[1:] if l.endswith(b"}")]  # whole lines (a last one may be cut short)
    assert 3 <= len(kept) < 18, len(kept)

    r = explore(tpusim, out, *args, "--resume")
    assert f"{len(kept)} points already done" in r.stderr, r.stderr
    assert f"({18 - len(kept)} to run" in r.stderr, r.stderr
    after = journal_lines(out)
    assert after[:1 + len(kept)] == [before[0]] + kept, "the lines written before the kill changed"
    points = [json.loads(l)["point"] for l in after[1:] if l]
    assert sorted(points) == list(range(18)), points  # each point exactly once

    whole = os.path.join(work, "whole")
    explore(tpusim, whole, *args)
    assert without_times(rows(out)) == without_times(rows(whole))
    # A resume of a finished sweep runs nothing and changes nothing.
    r = explore(tpusim, out, *args, "--resume")
    assert "(0 to run" in r.stderr, r.stderr
    assert without_times(rows(out)) == without_times(rows(whole))
    # A different sweep in the same folder is refused.
    bad = explore(tpusim, out, *(args[:-4] + ["--sweep", "hbm.bandwidth_gbs=50", "--jobs", "1"]), "--resume",
                  check=False)
    assert bad.returncode == 2 and "different sweep" in bad.stderr, bad.stderr


def check_mpi(tpusim, work, mpirun):
    shutil.rmtree(work, ignore_errors=True)
    args = ["--workload", "gemm:m=256,n=256,k=256", "--sweep", "mxu.rows=32,64,128", "--sweep", "core.mxus=0,2"]
    one = os.path.join(work, "one")
    explore(tpusim, one, *args)
    two = os.path.join(work, "two")
    r = explore(tpusim, two, *args,
                prefix=[mpirun, "-n", "2", "--oversubscribe", "--allow-run-as-root"])
    assert "on 2 MPI ranks" in r.stderr, r.stderr
    a, b = without_times(rows(one)), without_times(rows(two))
    assert len(a) == 6 and any(x["status"] == "error" for x in a), a  # core.mxus=0 is refused
    assert a == b, (a, b)
    points = [json.loads(l)["point"] for l in journal_lines(two)[1:] if l]
    assert sorted(points) == list(range(6)), points


def marks(svg, cls):
    """The attributes of each <circle class="CLS" ...> of an SVG (or HTML) text, as dicts."""
    found = [dict(re.findall(r'([\w-]+)="([^"]*)"', m)) for m in re.findall(r"<circle([^>]*)>", svg)]
    return [a for a in found if a.get("class") == cls]


def check_layers(tpusim, work, cnn):
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "sweep")
    explore(tpusim, out, "--workload", cnn, "--config", "v4", "--sweep", "mxu.rows=64,128", "--sweep", "core.mxus=1,2",
            "--jobs", "2")
    points = rows(out)
    assert [x["status"] for x in points] == ["ok"] * 4, points
    svg = open(os.path.join(out, "roofline.svg")).read()
    html = open(os.path.join(out, "report.html")).read()
    with open(os.path.join(out, "layers.csv")) as f:
        csv_layers = list(csv.DictReader(f))
    drawn = marks(svg, "layer")
    assert marks(html, "layer") == drawn, "the report's roofline differs from roofline.svg"
    total = 0
    for x in points:
        p = x["point"]
        prof_path = os.path.join(work, f"profile{p}.json")
        subprocess.run([tpusim, "profile", cnn, "--timing-only", "--config", "v4", "--set", f"mxu.rows={x['mxu.rows']}",
                        "--set", f"core.mxus={x['core.mxus']}", "--json", prof_path], check=True, capture_output=True)
        prof = json.load(open(prof_path))
        # (drawn where they have an intensity: a node that moves no HBM byte, a global pool on the vector unit over
        # the shared memory, has none)
        nodes = [r for r in prof["regions"]
                 if r["kind"] == "node" and r["flops"] > 0 and r["cycles"] > 0 and r["bytes"] > 0]
        assert len(nodes) >= 3, nodes  # the CNN's convolutions and its classifier
        mine = {m["data-layer"]: m for m in drawn if m["data-point"] == p}
        assert len(mine) == len([m for m in drawn if m["data-point"] == p]), "a layer drawn twice"
        assert set(mine) == {n["name"] for n in nodes}, (sorted(mine), [n["name"] for n in nodes])
        rows_of = {r["layer"]: r for r in csv_layers if r["point"] == p}
        assert set(rows_of) == set(mine), (sorted(rows_of), sorted(mine))
        for n in nodes:
            m, r = mine[n["name"]], rows_of[n["name"]]
            assert close(float(m["data-intensity"]), n["flops"] / n["bytes"], 1e-8), (m, n)
            assert close(float(m["data-flops-per-s"]), n["flops"] / (n["cycles"] / (prof["clock_mhz"] * 1e6)), 1e-8), (m, n)
            assert int(r["cycles"]) == n["cycles"] and close(float(r["flops"]), n["flops"]), (r, n)
        total += len(nodes)
    assert len(drawn) == total, (len(drawn), total)
    # Drawn where their values say: on the log axes, a larger intensity is further right, more FLOP/s higher up.
    for a in drawn:
        for b in drawn:
            if float(a["data-intensity"]) < float(b["data-intensity"]) * (1 - 1e-6):
                assert float(a["cx"]) <= float(b["cx"]), (a, b)
            if float(a["data-flops-per-s"]) < float(b["data-flops-per-s"]) * (1 - 1e-6):
                assert float(a["cy"]) >= float(b["cy"]), (a, b)


def png_pixels(path):
    """(width, height, rows of RGB tuples) of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes)."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, w = 8, b"", 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and ctype in (2, 6) and interlace == 0, (depth, ctype, interlace)
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    raw = zlib.decompress(idat)
    stride = w * bpp
    prev = bytearray(stride)
    out = []
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1: line[i] = (line[i] + a) & 255
            elif f == 2: line[i] = (line[i] + b) & 255
            elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out.append([tuple(line[x * bpp:x * bpp + 3]) for x in range(w)])
        prev = line
    return w, h, out


def check_report(tpusim, work, chromium):
    shutil.rmtree(work, ignore_errors=True)
    out = os.path.join(work, "sweep")
    explore(tpusim, out, "--workload", "gemm:m=256,n=256,k=256", "--sweep", "mxu.rows=32,64,128",
            "--sweep", "core.mxus=1,2")
    html = os.path.abspath(os.path.join(out, "report.html"))
    text = open(html).read()
    for external in ("<script", "http://", "https://", "<link", "src="):
        assert external not in text.replace('xmlns="http://www.w3.org/2000/svg"', ""), external
    browser = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
               f"--user-data-dir={os.path.join(work, 'profile')}"]
    dom = subprocess.run(browser + ["--dump-dom", "file://" + html], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    svgs = dom.stdout.count("<svg")
    plots = sorted(f for f in os.listdir(out) if f.endswith(".svg"))
    # Latency against each key and the roofline; latency against energy and area where the stats carry them.
    assert {"latency_vs_mxu_rows.svg", "latency_vs_core_mxus.svg", "roofline.svg"} <= set(plots), plots
    assert svgs == len(plots), (svgs, plots)
    circles = {f: open(os.path.join(out, f)).read().count("<circle") for f in plots}
    for f in ("latency_vs_mxu_rows.svg", "latency_vs_core_mxus.svg"):
        assert circles[f] == 6, (f, circles[f])  # one per point (the legends use squares)
    roof = open(os.path.join(out, "roofline.svg")).read()
    # One per point and one per layer of each (the GEMM's one MatMul), and the legend's two marks.
    assert len(marks(roof, "point")) == 6 and len(marks(roof, "layer")) == 6 and circles["roofline.svg"] == 14, circles
    assert dom.stdout.count("<circle") == sum(circles.values()), (dom.stdout.count("<circle"), circles)
    png = os.path.join(work, "report.png")
    shot = subprocess.run(browser + [f"--screenshot={png}", "--window-size=1000,2200", "file://" + html],
                          capture_output=True, text=True, timeout=120)
    assert shot.returncode == 0 and os.path.exists(png), shot.stderr[-2000:]
    w, h, px = png_pixels(png)
    blue = sum(1 for row in px for p in row if abs(p[0] - 0x1f) < 40 and abs(p[1] - 0x77) < 40 and abs(p[2] - 0xb4) < 40)
    dark = sum(1 for row in px for p in row if sum(p) < 200)
    # The points (r = 4 px circles) and lines of the first series are drawn in #1f77b4; axes and text in black.
    assert blue > 200, f"{blue} pixels of the points' colour: the plots were not drawn"
    assert dark > 2000, f"{dark} dark pixels: no axes or text drawn"


def main():
    check, tpusim, work = sys.argv[1:4]
    extra = sys.argv[4] if len(sys.argv) > 4 else None
    {"matches-run": check_matches_run, "resume": check_resume, "mpi": check_mpi, "layers": check_layers,
     "report": check_report}[check](
        tpusim, work, extra)
    print(f"explore_test {check}: ok")


if __name__ == "__main__":
    main()
