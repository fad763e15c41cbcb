"""System tests of the `tpusim` program, as a user drives it: results against numpy, outputs, and errors.

Run by ctest (validation/system/CMakeLists.txt) with Debian's python3, which has numpy:
    TPUSIM=build/tools/tpusim KERNELS=kernels MLP_DIR=build/workloads/mlp python3 -m unittest test_cli
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

TPUSIM = os.environ.get("TPUSIM", "build/tools/tpusim")
KERNELS = os.environ.get("KERNELS", "kernels")
MLP_DIR = os.environ.get("MLP_DIR", "build/workloads/mlp")
WORKLOADS_DIR = os.environ.get("WORKLOADS_DIR", "build/workloads")


def tpusim(*args, check=True):
    env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
    p = subprocess.run([TPUSIM, *map(str, args)], capture_output=True, text=True, env=env, timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"tpusim {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def without_comments(asm_text):
    return [line.split("#")[0].rstrip() for line in asm_text.splitlines()]


def bf16_round(x):
    """float32 -> bf16 -> float32, round to nearest even (numpy has no bf16)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


class Workdir(unittest.TestCase):
    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name

    def tearDown(self):
        self._tmp.cleanup()

    def path(self, name):
        return os.path.join(self.dir, name)

    def save(self, name, array):
        np.save(self.path(name), array)
        return self.path(name)

    def write(self, name, text):
        with open(self.path(name), "w") as f:
            f.write(text)
        return self.path(name)


class GemmAgainstNumpy(Workdir):
    """The GEMM kernels over shapes that are not multiples of the array, against numpy."""

    def run_gemm(self, kernel, m, k, n, a, b, config="v4-like", sets=()):
        out = self.path(f"out_{m}_{k}_{n}")
        args = ["run", os.path.join(KERNELS, kernel), "-D", f"M={m}", "-D", f"K={k}", "-D", f"N={n}",
                "--config", config, "--input", "a=" + self.save("a.npy", a), "--input", "b=" + self.save("b.npy", b),
                "--output-dir", out, "--stats", self.path("stats.json")]
        for s in sets:
            args += ["--set", s]
        tpusim(*args)
        return np.load(os.path.join(out, "c.npy")), json.loads(read(self.path("stats.json")))

    def test_int8_exact_over_shapes(self):
        rng = np.random.default_rng(2)
        # On the 32x32 edge preset with a small accumulator, every loop of the kernel has a partial last trip.
        for m, k, n in [(1, 1, 1), (33, 31, 65), (70, 100, 3), (129, 64, 40), (5, 200, 97)]:
            a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
            b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
            c, _ = self.run_gemm("gemm_int8.s", m, k, n, a, b, config="edge", sets=["mxu.acc_rows=64"])
            self.assertEqual(c.dtype, np.int32)
            np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32), err_msg=f"{m}x{k}x{n}")

    def test_int8_issue_shape_on_default_chip(self):
        rng = np.random.default_rng(3)
        m, k, n = 384, 256, 640
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        c, stats = self.run_gemm("gemm_int8.s", m, k, n, a, b)
        np.testing.assert_array_equal(c, a.astype(np.int32) @ b.astype(np.int32))
        self.assertEqual(stats["units"]["mxu"]["instructions"] > 0, True)
        self.assertGreater(stats["mxu"]["mac_utilization"], 0.0)

    def test_resident_activations_and_tiled_weights(self):
        # ACT_RESIDENT keeps a and c in VMEM (the runtime writes and reads them there); B_TILED takes b stored
        # tile by tile, [cdiv(K,R), cdiv(N,C), R, C]. Same results either way.
        rng = np.random.default_rng(7)
        m, k, n, r, c = 37, 70, 45, 32, 32
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        kt, nt = -(-k // r), -(-n // c)
        padded = np.zeros((kt * r, nt * c), np.int8)
        padded[:k, :n] = b
        tiled = padded.reshape(kt, r, nt, c).transpose(0, 2, 1, 3).copy()
        want = a.astype(np.int32) @ b.astype(np.int32)
        for resident, tiles in [(1, 0), (0, 1), (1, 1)]:
            out = self.path(f"o{resident}{tiles}")
            tpusim("run", os.path.join(KERNELS, "gemm_int8.s"), "--config", "edge", "-D", f"M={m}", "-D", f"K={k}",
                   "-D", f"N={n}", "-D", f"ACT_RESIDENT={resident}", "-D", f"B_TILED={tiles}",
                   "--input", "a=" + self.save("a.npy", a), "--input", "b=" + self.save("b.npy", tiled if tiles else b),
                   "--output-dir", out)
            np.testing.assert_array_equal(np.load(os.path.join(out, "c.npy")), want)

    def test_bf16_within_tolerance(self):
        # Inputs are float32 files; the runtime rounds them to bf16 (nearest even). Products of bf16 values are
        # exact in f32 and the sums are f32, so against a float64 computation on the same bf16 values the error
        # per element is at most about k * 2^-24 * sum |a_il * b_lj|; we check 4x that bound.
        rng = np.random.default_rng(4)
        for m, k, n in [(17, 45, 33), (64, 300, 70)]:
            a = rng.standard_normal((m, k), dtype=np.float32)
            b = rng.standard_normal((k, n), dtype=np.float32)
            c, _ = self.run_gemm("gemm_bf16.s", m, k, n, a, b, config="edge", sets=["mxu.acc_rows=64"])
            a64, b64 = bf16_round(a).astype(np.float64), bf16_round(b).astype(np.float64)
            want = a64 @ b64
            bound = 4 * k * 2.0**-24 * (np.abs(a64) @ np.abs(b64))
            self.assertTrue(np.all(np.abs(c - want) <= bound), f"{m}x{k}x{n}: max err {np.max(np.abs(c - want))}")

    def run_dequant(self, m, k, n, a, b, dq, bias, relu, q_scale, out_dt):
        """gemm.s with the dequantising epilogue (DEQUANT, Q_SCALE): c, and q (None without Q_SCALE)."""
        out = self.path("dq_out")
        tpusim("run", os.path.join(KERNELS, "gemm.s"), "--config", "edge", "-D", f"M={m}", "-D", f"K={k}",
               "-D", f"N={n}", "-D", "IN_DT=0", "-D", f"OUT_DT={out_dt}", "-D", "DEQUANT=1", "-D", f"BIAS={bias}",
               "-D", f"RELU={relu}", "-D", f"Q_SCALE={int(np.float32(q_scale).view(np.uint32))}",
               "--input", "a=" + self.save("a.npy", a), "--input", "b=" + self.save("b.npy", b),
               "--input", "dq=" + self.save("dq.npy", dq), "--output-dir", out)
        c = np.load(os.path.join(out, "c.npy"))
        return c, (np.load(os.path.join(out, "q.npy")) if q_scale else None)

    def test_dequantising_epilogue_exact(self):
        # int32 sums x per-column scale + bias, ReLU, and the int8 copy x Q_SCALE, rounded to nearest even and
        # saturated. Scales are powers of two and biases multiples of 1/8, so every step is exact in f32 and the
        # float64 reference is the answer: with Q_SCALE = 1 and scales of 2^-1 and 2^-2 many products end in .5
        # (ties: to even) and the sums (|acc| up to 70 x 128^2) saturate both ways.
        rng = np.random.default_rng(11)
        m, k, n = 37, 70, 45
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        acc = a.astype(np.int64) @ b.astype(np.int64)
        scale = 2.0 ** -rng.integers(1, 12, size=n)
        scale[:8] = [0.5, 0.25] * 4
        bias = rng.integers(-64, 64, size=n) / 8.0
        dq = np.stack([scale, bias], axis=1).astype(np.float32)
        for relu in (0, 1):
            x = acc * scale + bias
            if relu:
                x = np.maximum(x, 0)
            c, q = self.run_dequant(m, k, n, a, b, dq, 1, relu, 1.0, 3)
            self.assertEqual(c.dtype, np.float32)
            np.testing.assert_array_equal(c.astype(np.float64), x)
            want_q = np.clip(np.rint(x), -128, 127)  # numpy's rint: half to even
            np.testing.assert_array_equal(q.astype(np.float64), want_q)
            self.assertTrue(np.any(np.abs(x - np.trunc(x)) == 0.5), "no ties exercised")
            self.assertTrue(np.any(x > 127) and (relu or np.any(x < -128)), "no saturation exercised")

    def test_dequantising_epilogue_within_f32_rounding(self):
        # General scales (as s_a * s_w gives them): f32(acc) * s + b in IEEE f32 (numpy float32 arithmetic, bit
        # for bit; within 2^-22 relative of float64), the bf16 output its nearest-even rounding, no bias add
        # without BIAS.
        rng = np.random.default_rng(12)
        m, k, n = 20, 300, 33
        a = rng.integers(-128, 128, size=(m, k), dtype=np.int8)
        b = rng.integers(-128, 128, size=(k, n), dtype=np.int8)
        acc = a.astype(np.int64) @ b.astype(np.int64)
        dq = np.stack([rng.uniform(1e-6, 1e-4, n), rng.uniform(-2, 2, n)], axis=1).astype(np.float32)
        for bias in (0, 1):
            x32 = acc.astype(np.float32) * dq[:, 0]
            if bias:
                x32 = x32 + dq[:, 1]
            x32 = np.maximum(x32, np.float32(0))
            x64 = np.maximum(acc * dq[:, 0].astype(np.float64) + bias * dq[:, 1].astype(np.float64), 0)
            self.assertTrue(np.all(np.abs(x32 - x64) <= 2.0**-22 * (np.abs(x64) + 2)))
            c, q = self.run_dequant(m, k, n, a, b, dq, bias, 1, 0.0, 2)
            self.assertIsNone(q)
            np.testing.assert_array_equal(c.astype(np.float32), bf16_round(x32))


class Outputs(Workdir):
    def gemm_args(self, *extra):
        rng = np.random.default_rng(5)
        a = self.save("a.npy", rng.integers(-128, 128, size=(100, 90), dtype=np.int8))
        b = self.save("b.npy", rng.integers(-128, 128, size=(90, 130), dtype=np.int8))
        return ["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=100", "-D", "K=90", "-D", "N=130",
                "--config", "edge", "--input", "a=" + a, "--input", "b=" + b, *extra]

    def test_stats_and_trace(self):
        tpusim(*self.gemm_args("--stats", self.path("s.json"), "--trace", self.path("t.json")))
        stats = json.loads(read(self.path("s.json")))
        self.assertGreater(stats["cycles"], 0)
        self.assertAlmostEqual(stats["seconds"], stats["cycles"] / (stats["clock_mhz"] * 1e6), delta=1e-12)
        for unit in ["core", "dmain", "dmaout", "mxu", "vpu"]:
            u = stats["units"][unit]
            self.assertLessEqual(u["busy_cycles"], stats["cycles"])
            self.assertAlmostEqual(u["utilization"], u["busy_cycles"] / stats["cycles"], delta=1e-9)
            # Stall accounting: every cycle of every unit in exactly one category.
            st = u["stalls"]
            self.assertEqual(sum(v for k, v in st.items() if k != "wait_sem_by"), stats["cycles"], unit)
            self.assertEqual(sum(st["wait_sem_by"].values()), st["wait_sem"], unit)
        v1 = stats["tpuv1_counters"]
        self.assertAlmostEqual(v1["array_active"] + v1["weight_stall"] + v1["weight_shift"] + v1["non_matrix"], 1.0,
                               delta=1e-9)
        self.assertAlmostEqual(v1["useful_macs"], stats["mxu"]["mac_utilization"], delta=1e-12)
        self.assertGreater(v1["array_active"], 0.0)
        trace = json.loads(read(self.path("t.json")))
        names = {e["args"]["name"] for e in trace["traceEvents"] if e.get("ph") == "M" and e["name"] == "thread_name"}
        self.assertTrue({"dmain", "dmaout", "mxu", "vpu"} <= names)
        slices = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
        self.assertGreater(len(slices), 10)

    def config_value(self, key, *sets):
        """A parameter's value as `tpusim config --show v4-like` prints it."""
        args = ["config", "--show", "v4-like"] + [a for s in sets for a in ("--set", s)]
        row = next(line for line in tpusim(*args).stdout.splitlines() if line.split()[:1] == [key])
        return float(row.split()[1])

    def test_energy_of_the_gemm_kernel(self):
        """The stats' energy of kernels/gemm_bf16.s: its M*K*N MACs at the configured bf16 MAC energy scaled from
        energy.ref_nm to chip.node_nm (docs/energy.md), every action's count times its energy, and --set."""
        m, k, n = 64, 256, 96

        def stats(*sets):
            path = self.path("s.json")
            tpusim("run", os.path.join(KERNELS, "gemm_bf16.s"), "-D", f"M={m}", "-D", f"K={k}", "-D", f"N={n}",
                   "--config", "v4-like", "--timing-only", "--stats", path, *[a for s in sets for a in ("--set", s)])
            return json.loads(read(path))

        s = stats()
        e = s["energy"]
        self.assertEqual(e["actions"]["mac_bf16"], m * k * n)
        self.assertEqual(e["actions"]["hbm_read_bytes"], s["hbm"]["bytes_read"])
        scale = self.config_value("chip.node_nm") / self.config_value("energy.ref_nm")
        mac_pj = self.config_value("energy.mac_bf16_pj") * scale
        self.assertAlmostEqual(e["by_unit_j"]["mxu"], m * k * n * mac_pj * 1e-12, delta=1e-18)
        dynamic = sum(e["actions"][a] * e["pj_per_action"][a] for a in e["actions"]) * 1e-12
        self.assertAlmostEqual(e["dynamic_j"], dynamic, delta=dynamic * 1e-12)
        self.assertAlmostEqual(e["static_j"], e["static_w"] * s["seconds"], delta=e["static_j"] * 1e-12)
        self.assertAlmostEqual(sum(e["by_unit_j"].values()), e["total_j"], delta=e["total_j"] * 1e-12)
        self.assertAlmostEqual(e["static_w"], self.config_value("energy.static_w_per_mm2") * s["area"]["total_mm2"],
                               delta=1e-9)
        # --set: twice the MAC energy doubles the MXU's part and leaves the rest; the same cycles.
        d = stats("energy.mac_bf16_pj=4")
        self.assertEqual(d["cycles"], s["cycles"])
        self.assertAlmostEqual(d["energy"]["by_unit_j"]["mxu"], 2 * e["by_unit_j"]["mxu"], delta=1e-18)
        self.assertEqual(d["energy"]["by_unit_j"]["hbm"], e["by_unit_j"]["hbm"])
        # Twice the node: MAC energy x 2 (energy.node_exponent 1), the MXU's area x 4 (area.node_exponent 2).
        t = stats("chip.node_nm=14")
        self.assertAlmostEqual(t["energy"]["by_unit_j"]["mxu"], 2 * e["by_unit_j"]["mxu"], delta=1e-18)
        self.assertAlmostEqual(t["area"]["by_part_mm2"]["mxu"], 4 * s["area"]["by_part_mm2"]["mxu"], delta=1e-9)

    def test_timing_only_same_cycles_and_runs_repeat(self):
        tpusim(*self.gemm_args("--stats", self.path("a.json")))
        tpusim(*self.gemm_args("--stats", self.path("b.json")))
        tpusim(*self.gemm_args("--stats", self.path("t.json"), "--timing-only"))
        a, b, t = (read(self.path(f)) for f in ("a.json", "b.json", "t.json"))
        self.assertEqual(a, b)
        self.assertEqual(json.loads(a)["cycles"], json.loads(t)["cycles"])

    def test_asm_disasm_round_trip(self):
        src = os.path.join(KERNELS, "gemm_int8.s")
        tpusim("asm", src, "-D", "M=50", "-D", "K=60", "-D", "N=70", "-o", self.path("g.tpub"))
        tpusim("disasm", self.path("g.tpub"), "-o", self.path("g.s"))
        tpusim("asm", self.path("g.s"), "-o", self.path("g2.tpub"))
        # The same program: code, tensors and constants (the source lines it records name the file it came from,
        # which the disassembly shows only in comments).
        again = tpusim("disasm", self.path("g2.tpub")).stdout
        self.assertEqual(without_comments(read(self.path("g.s"))), without_comments(again))
        self.assertGreater(len(again.splitlines()), 80)
        # The binary runs like the source.
        rng = np.random.default_rng(6)
        a = rng.integers(-128, 128, size=(50, 60), dtype=np.int8)
        b = rng.integers(-128, 128, size=(60, 70), dtype=np.int8)
        tpusim("run", self.path("g2.tpub"), "--input", "a=" + self.save("a.npy", a),
               "--input", "b=" + self.save("b.npy", b), "--output-dir", self.path("o"))
        np.testing.assert_array_equal(np.load(self.path("o/c.npy")), a.astype(np.int32) @ b.astype(np.int32))

    def test_config_list_and_show(self):
        listing = tpusim("config", "--list").stdout
        for preset in ["v1-like", "v4-like", "edge"]:
            self.assertIn(preset, listing)
        shown = tpusim("config", "--show", "v1-like", "--set", "mxu.cols=64").stdout
        row = next(line for line in shown.splitlines() if line.startswith("mxu.rows"))
        self.assertIn("256", row)
        self.assertIn("64", next(line for line in shown.splitlines() if line.startswith("mxu.cols")))

    def test_mlp_onnx_against_torch(self):
        onnx_path = os.path.join(MLP_DIR, "mlp.onnx")
        tpusim("run", onnx_path, "--input", "x=" + os.path.join(MLP_DIR, "x.npy"), "--output-dir", self.path("o"))
        y = np.load(self.path("o/y.npy")).astype(np.float64).ravel()
        ref = np.load(os.path.join(MLP_DIR, "y_ref.npy")).astype(np.float64).ravel()
        cos = y @ ref / np.linalg.norm(y) / np.linalg.norm(ref)
        self.assertGreaterEqual(cos, 0.999)
        self.assertLessEqual(np.linalg.norm(y - ref) / np.linalg.norm(ref), 2e-2)

    def test_profile_lists_the_graph_nodes(self):
        out = tpusim("profile", os.path.join(MLP_DIR, "mlp.onnx"), "--config", "v4-like",
                     "--json", self.path("p.json"), "--trace", self.path("t.json")).stdout
        prof = json.loads(read(self.path("p.json")))
        nodes = [r for r in prof["regions"] if r["kind"] == "node"]
        kernels = [r for r in prof["regions"] if r["kind"] == "kernel"]
        self.assertEqual(len(kernels), len(nodes))  # one kernel fragment per node in this MLP
        self.assertGreaterEqual(len(nodes), 3)  # its Gemm nodes, and the cast of its input
        for r in nodes:
            self.assertIn(r["name"], out)
            self.assertGreater(r["cycles"], 0)
            self.assertLessEqual(r["cycles"], prof["cycles"])
            self.assertTrue(0 <= r["mxu_utilization"] <= 1)
        self.assertIn(f"{prof['cycles']} cycles", out)
        trace = json.loads(read(self.path("t.json")))["traceEvents"]
        node_slices = [e for e in trace if e["ph"] == "X" and e.get("cat") == "node"]
        self.assertEqual(sorted(e["name"] for e in node_slices), sorted(r["name"] for r in nodes))
        # --top limits the table to the longest nodes.
        longest = max(nodes, key=lambda r: r["cycles"])["name"]
        top1 = tpusim("profile", os.path.join(MLP_DIR, "mlp.onnx"), "--config", "v4-like", "--top", "1").stdout
        self.assertIn(longest, top1)
        self.assertEqual(sum(r["name"] in top1 for r in nodes), 1)


class CompileReport(Workdir):
    """`tpusim compile --report`: a timing-only run of the compiled model, reported per graph node."""

    def compile_report(self, *extra):
        onnx_path = os.path.join(MLP_DIR, "mlp.onnx")
        out = tpusim("compile", onnx_path, "--config", "v4-like", "--report", self.path("r.txt"),
                     "--report-json", self.path("r.json"), *extra).stdout
        return out, read(self.path("r.txt")), json.loads(read(self.path("r.json")))

    @staticmethod
    def table(text):
        """The node rows of the text report: (name, instrs, cycles, share, util, cores, gflop, mb, ideal mb,
        traffic, bound, by, ratio, traffic ratio)."""
        lines = text.splitlines()
        start = next(i for i, line in enumerate(lines) if line.split()[:2] == ["node", "instrs"]) + 1
        rows = []
        for line in lines[start:]:
            if not line.strip():
                break
            rows.append(line.strip().rsplit(None, 13))  # the name may hold spaces; the 13 columns after it do not
        return rows

    def test_report_says_what_runs_on_one_core_and_why(self):
        # On h200-like (132 cores) the program is SPMD; the kernels left on core 0 are listed after the node table
        # with the compiler's reason, as many as the report's "serial" regions, each inside its node's kernel.
        d = os.path.join(WORKLOADS_DIR, "bert_small")
        if not os.path.exists(os.path.join(d, "bert.onnx")):
            self.skipTest(f"{d}/bert.onnx is not exported")
        tpusim("compile", os.path.join(d, "bert.onnx"), "--config", "h200-like", "--report", self.path("b.txt"),
               "--report-json", self.path("b.json"), "-o", self.path("b.tpub"))
        text, rep = read(self.path("b.txt")), json.loads(read(self.path("b.json")))
        serial = [r for r in rep["regions"] if r["kind"] == "serial"]
        self.assertTrue(serial)
        m = re.search(r"^not shared: (\d+) kernels run on core 0 alone, (\d+) cycles", text, re.M)
        self.assertIsNotNone(m, text[-2000:])
        self.assertEqual(int(m.group(1)), len(serial))
        self.assertEqual(int(m.group(2)), sum(r["cycles"] for r in serial))
        listed = text[m.end():].strip().splitlines()[1:]
        self.assertEqual(len(listed), min(10, len(serial)))
        regions = rep["regions"]
        for r in sorted(serial, key=lambda r: -r["cycles"])[:len(listed)]:
            kernel = regions[r["parent"]]
            node = regions[kernel["parent"]]
            self.assertEqual(kernel["kind"], "kernel")
            self.assertEqual(node["kind"], "node")
            self.assertIn(f"  {node['name']} ({kernel['name']}, {r['cycles']} cycles): {r['name']}", listed)
        # The embedding lookups (16 rows each) stay on core 0: sharing them would not pay for its barriers.
        gathers = [r for r in serial if regions[r["parent"]]["name"] == "gather.s"]
        self.assertTrue(gathers)
        for r in gathers:
            self.assertRegex(r["name"], r"^every core's estimate, \d+ cycles with its barriers, does not beat one "
                                        r"core's \d+ by a quarter$")
        # A program for one core has nothing to say.
        self.assertNotIn("not shared", self.compile_report()[1])

    def test_report_lists_every_node_in_program_order(self):
        out, text, rep = self.compile_report("-o", self.path("m.tpub"))
        self.assertIn("compiled", out)
        self.assertTrue(os.path.getsize(self.path("m.tpub")) > 0)
        nodes = [r for r in rep["regions"] if r["kind"] == "node"]
        self.assertGreaterEqual(len(nodes), 3)
        self.assertEqual(rep["model"], os.path.join(MLP_DIR, "mlp.onnx"))
        self.assertEqual(rep["output"], self.path("m.tpub"))
        self.assertEqual(rep["chip"], "v4-like")
        self.assertEqual(rep["peak_flops_per_cycle"], 2 * 128 * 128)
        self.assertAlmostEqual(rep["hbm_bytes_per_cycle"], 1200e3 / 1050, delta=1e-9)
        # A whole chip's bound uses its whole peak: v4 is 2 cores x 4 MXUs of 128 x 128.
        tpusim("compile", os.path.join(MLP_DIR, "mlp.onnx"), "--config", "v4", "--report", self.path("v4.txt"),
               "--report-json", self.path("v4.json"), "-o", self.path("v4.tpub"))
        self.assertEqual(json.loads(read(self.path("v4.json")))["peak_flops_per_cycle"], 2 * 128 * 128 * 4 * 2)
        rows = self.table(text)
        self.assertEqual([r[0] for r in rows], [n["name"] for n in nodes])  # every node, in program order
        for row, n in zip(rows, nodes):
            self.assertEqual(int(row[1]), n["end"] - n["begin"])
            self.assertEqual(int(row[2]), n["cycles"])
            self.assertGreater(n["cycles"], 0)
            self.assertAlmostEqual(float(row[3].rstrip("%")), 100 * n["share"], delta=0.051)
            self.assertAlmostEqual(float(row[4].rstrip("%")), 100 * n["mxu_utilization"], delta=0.051)
            self.assertEqual(int(row[5]), n["cores"])
            self.assertEqual(n["cores"], 1)  # v4-like: one core
            self.assertAlmostEqual(float(row[6]), n["flops"] / 1e9, delta=1e-6)
            self.assertAlmostEqual(float(row[7]), n["bytes"] / 1e6, delta=1e-4)
            self.assertAlmostEqual(float(row[8]), n["ideal_bytes"] / 1e6, delta=1e-4)
            self.assertAlmostEqual(float(row[9]), n["bytes"] / n["ideal_bytes"], delta=0.005)
            self.assertAlmostEqual(float(row[10]), n["ideal_bound_cycles"], delta=0.05)
            self.assertEqual(row[11], n["ideal_bound"] or "-")
            self.assertAlmostEqual(float(row[12]), n["ideal_ratio"], delta=0.005)
            self.assertAlmostEqual(float(row[13]), n["bound_ratio"], delta=0.005)
            self.assertIn(n["bound"], ("", "compute", "memory"))
        # The header: the run's cycles and time, as the JSON has them, and the same cycles `profile` measures.
        self.assertIn(f"total    {rep['cycles']} cycles, {rep['cycles'] / 1050:.3f} us", text)
        self.assertIn("model    " + os.path.join(MLP_DIR, "mlp.onnx") + " -> " + self.path("m.tpub"), text)
        tpusim("profile", os.path.join(MLP_DIR, "mlp.onnx"), "--config", "v4-like", "--timing-only",
               "--json", self.path("p.json"))
        self.assertEqual(json.loads(read(self.path("p.json")))["cycles"], rep["cycles"])
        # The compiler fences between nodes: their spans do not overlap, so their cycles add up to at most the run's,
        # and the cycles outside every node (the fences' drains, the final halt) are few.
        spans = sorted((n["first_cycle"], n["first_cycle"] + n["cycles"]) for n in nodes)
        for (_, end), (begin, _) in zip(spans, spans[1:]):
            self.assertLessEqual(end, begin)
        total = sum(n["cycles"] for n in nodes)
        self.assertLessEqual(total, rep["cycles"])
        self.assertGreaterEqual(total, 0.5 * rep["cycles"])
        self.assertIn(f"node cycles sum {total} = ", text)
        # The program's work: the nodes' (no other region of this MLP gives any).
        self.assertAlmostEqual(rep["program"]["flops"], sum(n["flops"] for n in nodes), delta=1e-6)
        self.assertAlmostEqual(rep["program"]["bytes"], sum(n["bytes"] for n in nodes), delta=1e-6)

    def test_nodes_run_no_faster_than_their_roofline_bound(self):
        _, text, rep = self.compile_report()
        nodes = [r for r in rep["regions"] if r["kind"] == "node"]
        working = [n for n in nodes if n["flops"] > 0 or n["bytes"] > 0]
        self.assertTrue(working, "the compiler gives no FLOPs or bytes for the MLP's nodes (isa::Region::flops/bytes)")
        peak, bw = rep["peak_flops_per_cycle"], rep["hbm_bytes_per_cycle"]
        for n in working:
            bound = max(n["flops"] / peak, n["bytes"] / bw)
            self.assertAlmostEqual(n["bound_cycles"], bound, delta=1e-9 * bound)
            self.assertEqual(n["bound"], "compute" if n["flops"] / peak >= n["bytes"] / bw else "memory")
            self.assertGreaterEqual(n["bound_ratio"], 1 - 1e-9, f"node {n['name']} beats its roofline bound")
            self.assertAlmostEqual(n["bound_ratio"], n["cycles"] / n["bound_cycles"], delta=1e-9)
        prog = rep["program"]
        self.assertGreater(prog["bound_cycles"], 0)
        self.assertGreaterEqual(rep["cycles"], prog["bound_cycles"] * (1 - 1e-9))
        self.assertIn(f"run cycles / traffic bound {rep['cycles'] / prog['bound_cycles']:.2f}", text)
        # The ideal bound (the headline): the same FLOPs over the bytes the model cannot avoid, each node's (what it
        # takes from and gives to the rest of the model) and the whole program's (inputs, weights, outputs once).
        for n in working:
            ideal = max(n["flops"] / peak, n["ideal_bytes"] / bw)
            self.assertAlmostEqual(n["ideal_bound_cycles"], ideal, delta=1e-9 * ideal)
            self.assertGreaterEqual(n["ideal_ratio"], 1 - 1e-9, f"node {n['name']} beats its ideal bound")
        self.assertAlmostEqual(prog["ideal_bound_cycles"], max(prog["flops"] / peak, prog["ideal_bytes"] / bw),
                               delta=1e-9 * prog["ideal_bound_cycles"])
        self.assertIn(f"run cycles / bound {rep['cycles'] / prog['ideal_bound_cycles']:.2f} (ideal", text)
        self.assertIn(f"traffic / ideal {prog['bytes'] / prog['ideal_bytes']:.2f})", text)
        # The .tpub keeps each node's work: the disassembly shows it on the .region lines.
        tpusim("compile", os.path.join(MLP_DIR, "mlp.onnx"), "-o", self.path("m.tpub"))
        dis = tpusim("disasm", self.path("m.tpub")).stdout
        self.assertTrue(any(line.lstrip().startswith(".region node,") and ("flops=" in line or "bytes=" in line)
                            for line in dis.splitlines()), dis[:2000])

    def test_ideal_bytes_are_the_models_own(self):
        """The ideal bytes counted from the ONNX model itself: the program's are its input and output (float32)
        and its weights, each once, at the sizes a bf16 compile keeps them (Gemm weights in bf16, biases in f32),
        without the padding of the MXU's tiled layout; each Gemm node's hold its own weight and bias."""
        import onnx
        from onnx import numpy_helper
        model = onnx.load(os.path.join(MLP_DIR, "mlp.onnx"))
        inits = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        def numel(v):
            return int(np.prod([d.dim_value for d in v.type.tensor_type.shape.dim]))
        io = 4 * (sum(numel(v) for v in model.graph.input if v.name not in inits) +
                  sum(numel(v) for v in model.graph.output))
        gemms = [n for n in model.graph.node if n.op_type == "Gemm"]
        self.assertEqual(len(gemms), 3)
        weights = {g.name: 2 * inits[g.input[1]].size + 4 * (inits[g.input[2]].size if len(g.input) > 2 else 0)
                   for g in gemms}
        for preset in ("v4-like", "v5e"):  # one matrix unit, and a whole chip with other tile sizes
            with self.subTest(preset=preset):
                # (intermediates in HBM: kept in VMEM, the activations would cost the nodes no HBM bytes)
                tpusim("compile", os.path.join(MLP_DIR, "mlp.onnx"), "--config", preset, "--intermediates-in-hbm",
                       "--report-json", self.path("i.json"))
                rep = json.loads(read(self.path("i.json")))
                self.assertEqual(rep["program"]["ideal_bytes"], io + sum(weights.values()))
                nodes = {r["name"]: r for r in rep["regions"] if r["kind"] == "node"}
                for g in gemms:
                    node = next(v for k, v in nodes.items() if g.name in k.split("+"))
                    # Its weight and bias, plus the activations it reads and writes (at least one byte each).
                    self.assertGreater(node["ideal_bytes"], weights[g.name])
                    self.assertLess(node["ideal_bytes"], weights[g.name] + 8 * (128 + 128) * 4)

    def test_int8_report_needs_no_calibration(self):
        """A report alone compiles timing-only: no int8 calibration run (the scales change values, not cycles), so
        it gives the cycles a calibrated compile gives; with -o a calibration is still required."""
        onnx_path = os.path.join(MLP_DIR, "mlp.onnx")
        tpusim("compile", onnx_path, "--precision", "int8", "--report-json", self.path("a.json"))
        tpusim("compile", onnx_path, "--precision", "int8", "--calibrate", "x=" + os.path.join(MLP_DIR, "x.npy"),
               "--report-json", self.path("b.json"), "-o", self.path("b.tpub"))
        a, b = (json.loads(read(self.path(f))) for f in ("a.json", "b.json"))
        self.assertEqual(a["cycles"], b["cycles"])
        self.assertEqual(a["program"]["ideal_bytes"], b["program"]["ideal_bytes"])
        p = tpusim("compile", onnx_path, "--precision", "int8", "-o", self.path("c.tpub"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("--precision int8 needs calibration inputs", p.stderr)

    def test_conv_reads_its_taps_in_place(self):
        # A 3x3 convolution of 64 channels over 56 x 56 (ResNet's layer1), on one matrix unit (v4-like) and the
        # whole chip (v4): the gemm reads each tap's rows of channels from the padded input itself. An im2col
        # matrix would be 56 x 58 rows (the virtual width Wv = 58) x 9 taps x 64 channels in bf16, 3,741,696
        # bytes, written to HBM: the whole run writes fewer bytes than that matrix alone. (int8 convolutions take
        # the same path: test_ops Conv.test_taps_read_in_place checks their values.)
        from onnx import helper, save, TensorProto, numpy_helper
        w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((64, 64, 3, 3)).astype(np.float32), "w")
        graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"], name="conv", pads=[1, 1, 1, 1])],
                                  "conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64, 56, 56])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 56, 56])], [w])
        model = self.path("conv.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        for config in ("v4-like", "v4"):
            stats = self.path(f"{config}.json")
            tpusim("run", model, "--config", config, "--timing-only", "--stats", stats)
            self.assertLess(json.loads(read(stats))["hbm"]["bytes_written"], 56 * 58 * 9 * 64 * 2, config)

    def test_intermediates_live_on_chip(self):
        # v4's 128 MiB CMEM: the compiler places the intermediates there (a residual block: conv, relu, conv, add,
        # relu), the kernels reach them through the shared window. The same kernels move the same bytes, so
        # without the CMEM (shared.size_kib = 0) HBM carries exactly the bytes the CMEM carried; the outputs are
        # the same bits, and the run is faster, since the activations no longer share HBM with the weights.
        from onnx import helper, save, TensorProto, numpy_helper
        rng = np.random.default_rng(5)
        w1 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w1")
        w2 = numpy_helper.from_array((rng.standard_normal((64, 64, 3, 3)) * 0.05).astype(np.float32), "w2")
        nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
                 helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
                 helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[1, 1, 1, 1]),
                 helper.make_node("Add", ["c2", "x"], ["s"], name="add"),
                 helper.make_node("Relu", ["s"], ["y"], name="relu2")]
        graph = helper.make_graph(nodes, "block", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 64, 28, 28])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64, 28, 28])], [w1, w2])
        model = self.path("block.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        x = self.path("x.npy")
        np.save(x, rng.standard_normal((2, 64, 28, 28)).astype(np.float32))
        runs = {}
        for name, sets in (("cmem", []), ("none", ["--set", "shared.size_kib=0"])):
            out, stats = self.path(name), self.path(f"{name}.json")
            tpusim("run", model, "--input", f"x={x}", "--config", "v4", *sets, "--output-dir", out, "--stats", stats)
            runs[name] = (np.load(os.path.join(out, "y.npy")), json.loads(read(stats)))
        (y_cmem, s_cmem), (y_none, s_none) = runs["cmem"], runs["none"]
        np.testing.assert_array_equal(y_cmem, y_none)
        hbm = lambda s: s["hbm"]["bytes_read"] + s["hbm"]["bytes_written"]
        shared = lambda s: s["shared"]["bytes_read"] + s["shared"]["bytes_written"]
        self.assertEqual(shared(s_none), 0)
        self.assertGreater(shared(s_cmem), 0)
        self.assertEqual(hbm(s_none), hbm(s_cmem) + shared(s_cmem))
        self.assertLess(s_cmem["cycles"], s_none["cycles"])
        # The compile report gives the measured split.
        report = tpusim("compile", model, "--config", "v4", "--report", "-").stdout
        self.assertIn(f"{shared(s_cmem) / 1e6:.4f} MB of shared memory traffic", report)
        # v5e (one core, 128 MiB of VMEM, no CMEM) keeps them in half of its VMEM, through the local window; the
        # kernels get the other half, so their tiles may differ: the same bits (the matrix units sum each pass in
        # one order whatever the tiling), and HBM carries less than with the intermediates in HBM.
        runs = {}
        for name, flags in (("vmem", []), ("hbm", ["--intermediates-in-hbm"])):
            out, stats = self.path("v5e-" + name), self.path(f"v5e-{name}.json")
            tpusim("run", model, "--input", f"x={x}", "--config", "v5e", *flags, "--output-dir", out, "--stats", stats)
            runs[name] = (np.load(os.path.join(out, "y.npy")), json.loads(read(stats)))
        (y_vmem, s_vmem), (y_hbm, s_hbm) = runs["vmem"], runs["hbm"]
        np.testing.assert_array_equal(y_vmem, y_hbm)
        local = lambda s: s["local"]["bytes_read"] + s["local"]["bytes_written"]
        self.assertEqual(local(s_hbm), 0)
        self.assertGreater(local(s_vmem), 0)
        self.assertLess(hbm(s_vmem), hbm(s_hbm))
        self.assertLess(s_vmem["cycles"], s_hbm["cycles"])

    def test_int8_is_faster_than_bf16_where_the_int8_rate_is_double(self):
        """On v5e and v6e (mxu.i8_rate = 2: int8 at twice bf16's rate, as the chips are published), int8 weights
        with the dequantising epilogue make ResNet-18 and a BERT-base-wide encoder (768 wide, 12 heads, 3072 FFN,
        128 tokens; 2 layers, exported here) faster than bf16. (BERT-small is not: its nodes are a few hundred
        cycles of fixed cost each, and int8 adds a quantise per layer.)"""
        bert = self.path("bert")
        subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                          "workloads", "bert.py"),
                        "--layers", "2", "--vocab", "1000", "--seq", "128", "--opset", "13", "--out", bert],
                       check=True, capture_output=True)
        models = [os.path.join(bert, "bert.onnx")]
        resnet = os.path.join(WORKLOADS_DIR, "resnet18", "resnet18.onnx")
        if os.path.exists(resnet):  # not in the sanitizer build, which exports only the MLP and BERT-small
            models.append(resnet)
        for model in models:
            for preset in ("v5e", "v6e"):
                cycles = {}
                for precision in ("bf16", "int8"):
                    tpusim("compile", model, "--config", preset, "--precision", precision,
                           "--report-json", self.path("r.json"))
                    cycles[precision] = json.loads(read(self.path("r.json")))["cycles"]
                self.assertLess(cycles["int8"], cycles["bf16"], f"{os.path.basename(model)} on {preset}: {cycles}")

    def test_tpuv1_int8_mlp_near_its_weight_bandwidth_roof(self):
        """TPUv1's MLPs (batch 200, 2000-wide layers) on v1-like in int8: the weights are nearly all the bytes the
        model must move. Each layer's dequantising epilogue writes the next layer's int8 copy alone (no bf16
        output), and the intermediates stay in VMEM (as TPUv1's activations stay in its Unified Buffer), so HBM
        carries exactly the ideal 19.26 MB: the input, the weights and the output, once. The program runs at
        1.08x its ideal bound (428,380 cycles against 396,612), within issue 12's 1.15x; with the intermediates
        in HBM, 22.46 MB and 1.23x (487,633 cycles; docs/compiler.md)."""
        d = self.path("mlp")
        subprocess.run(["/usr/bin/python3", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                                          "workloads", "mlp.py"),
                        "--out", d, "--batch", "200", "--dims", "2000,2000,2000,2000,2000"],
                       check=True, capture_output=True)
        tpusim("compile", os.path.join(d, "mlp.onnx"), "--config", "v1-like", "--precision", "int8",
               "--report-json", self.path("r.json"))
        prog = json.loads(read(self.path("r.json")))["program"]
        self.assertEqual(prog["ideal_bytes"], 19264000)
        self.assertEqual(prog["bytes"], 19264000)
        self.assertLessEqual(prog["ideal_ratio"], 1.085)
        tpusim("compile", os.path.join(d, "mlp.onnx"), "--config", "v1-like", "--precision", "int8",
               "--intermediates-in-hbm", "--report-json", self.path("h.json"))
        prog = json.loads(read(self.path("h.json")))["program"]
        self.assertLessEqual(prog["bytes"], 22464000)
        self.assertLessEqual(prog["ideal_ratio"], 1.235)

    def test_report_without_output_file_to_stdout(self):
        out = tpusim("compile", os.path.join(MLP_DIR, "mlp.onnx"), "--report", "-").stdout
        self.assertIn("tpusim compile report", out)
        self.assertNotIn("compiled", out)  # no .tpub written
        self.assertIn("model    " + os.path.join(MLP_DIR, "mlp.onnx") + "\n", out)
        self.assertGreaterEqual(len(self.table(out)), 3)
        self.assertEqual(os.listdir(self.dir), [])
        # Nothing to write at all is a usage error.
        p = tpusim("compile", os.path.join(MLP_DIR, "mlp.onnx"), check=False)
        self.assertEqual(p.returncode, 2)
        self.assertIn("nothing to write", p.stderr)

    def test_profile_all_lists_every_node_with_its_bound(self):
        onnx_path = os.path.join(MLP_DIR, "mlp.onnx")
        out = tpusim("profile", onnx_path, "--top", "1", "--all", "--timing-only", "--json", self.path("p.json")).stdout
        prof = json.loads(read(self.path("p.json")))
        nodes = [r for r in prof["regions"] if r["kind"] == "node"]
        self.assertGreaterEqual(len(nodes), 3)
        for n in nodes:
            self.assertIn(n["name"], out)
            for key in ("flops", "bytes", "bound_cycles", "bound", "bound_ratio"):
                self.assertIn(key, n)
        self.assertNotIn("top 1", out)
        for col in ("FLOPs", "bytes", "bound", "ratio"):
            self.assertIn(col, out.splitlines()[1])
        # Energy per node (docs/energy.md): the nodes' and the energy outside them add up to the program's, which
        # is the run's as `tpusim run --stats` gives it.
        self.assertIn("energy uJ", out.splitlines()[1])
        total = prof["program"]["energy"]["total_j"]
        self.assertGreater(total, 0)
        self.assertAlmostEqual(sum(n["energy"]["total_j"] for n in nodes) + prof["outside_nodes_energy_j"], total,
                               delta=total * 1e-12)
        tpusim("run", onnx_path, "--timing-only", "--stats", self.path("s.json"))
        self.assertAlmostEqual(json.loads(read(self.path("s.json")))["energy"]["total_j"], total, delta=total * 1e-12)


class UserFacing(Workdir):
    """What `run`, `asm` and `--help` tell the user: where outputs went, what was made up, what was written."""

    GEMM = ["-D", "M=40", "-D", "K=72", "-D", "N=24", "--config", "edge"]

    def gemm_inputs(self, folder):
        os.makedirs(self.path(folder), exist_ok=True)
        rng = np.random.default_rng(8)
        a = rng.integers(-128, 128, size=(40, 72), dtype=np.int8)
        b = rng.integers(-128, 128, size=(72, 24), dtype=np.int8)
        np.save(os.path.join(self.path(folder), "a.npy"), a)
        np.save(os.path.join(self.path(folder), "b.npy"), b)
        return a, b

    def run_in_dir(self, *args, check=True):
        """tpusim run from inside the work folder, so that any file it writes without being asked shows up there."""
        env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
        p = subprocess.run([os.path.abspath(TPUSIM), "run", *args], capture_output=True, text=True, env=env,
                           cwd=self.dir, timeout=600)
        if check and p.returncode != 0:
            raise AssertionError(f"tpusim run {' '.join(args)} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
        return p

    def test_run_without_output_dir_says_the_outputs_were_not_kept(self):
        self.gemm_inputs("in")
        before = sorted(os.listdir(self.dir))
        out = self.run_in_dir(os.path.abspath(os.path.join(KERNELS, "gemm_int8.s")), *self.GEMM,
                              "--input", "a=in/a.npy", "--input", "b=in/b.npy").stdout
        # c is M x N int32 (gemm_int8.s: c = a @ b, accumulated in int32).
        self.assertIn("outputs not kept (--output-dir DIR writes each as DIR/NAME.npy): c: i32 [40, 24]", out)
        self.assertNotIn("wrote", out)
        self.assertEqual(sorted(os.listdir(self.dir)), before)  # nothing written anywhere in the working folder

    def test_run_with_output_dir_says_where_each_output_went(self):
        a, b = self.gemm_inputs("in")
        out = self.run_in_dir(os.path.abspath(os.path.join(KERNELS, "gemm_int8.s")), *self.GEMM,
                              "--input", "a=in/a.npy", "--input", "b=in/b.npy", "--output-dir", "o").stdout
        self.assertIn("wrote " + os.path.join("o", "c.npy") + "\n", out)
        self.assertNotIn("not kept", out)
        np.testing.assert_array_equal(np.load(self.path("o/c.npy")), a.astype(np.int32) @ b.astype(np.int32))

    def test_timing_only_needs_no_input_files(self):
        # The same cycles as a functional run with real inputs (no instruction's timing depends on data), the
        # inputs it made up named, and no outputs.
        self.gemm_inputs("in")
        kernel = os.path.abspath(os.path.join(KERNELS, "gemm_int8.s"))
        self.run_in_dir(kernel, *self.GEMM, "--inputs", "in", "--stats", "f.json")
        out = self.run_in_dir(kernel, *self.GEMM, "--timing-only", "--stats", "t.json").stdout
        self.assertIn("inputs as zeros (--timing-only: no timing depends on values): a, b\n", out)
        self.assertIn("outputs not computed (--timing-only): c: i32 [40, 24]", out)
        self.assertEqual(json.loads(read(self.path("t.json")))["cycles"],
                         json.loads(read(self.path("f.json")))["cycles"])
        # Inputs given are still used (and checked); only the others are zeros.
        out = self.run_in_dir(kernel, *self.GEMM, "--timing-only", "--input", "a=in/a.npy").stdout
        self.assertIn("inputs as zeros (--timing-only: no timing depends on values): b\n", out)
        bad = self.save("bad.npy", np.zeros((3, 3), np.int8))
        p = self.run_in_dir(kernel, *self.GEMM, "--timing-only", "--input", "a=" + bad, check=False)
        self.assertEqual(p.returncode, 1)
        self.assertIn("input 'a': expected i8 [40, 72], got i8 [3, 3]", p.stderr)
        # An ONNX model too: the MLP's timing-only cycles equal its functional run's on the exporter's input.
        mlp = os.path.join(MLP_DIR, "mlp.onnx")
        tpusim("run", mlp, "--input", "x=" + os.path.join(MLP_DIR, "x.npy"), "--stats", self.path("mf.json"))
        out = tpusim("run", mlp, "--timing-only", "--stats", self.path("mt.json")).stdout
        self.assertIn("inputs as zeros (--timing-only: no timing depends on values): x\n", out)
        self.assertEqual(json.loads(read(self.path("mt.json")))["cycles"],
                         json.loads(read(self.path("mf.json")))["cycles"])

    def test_inputs_folder_matched_by_name(self):
        a, b = self.gemm_inputs("in")
        self.run_in_dir(os.path.abspath(os.path.join(KERNELS, "gemm_int8.s")), *self.GEMM, "--inputs", "in",
                        "--output-dir", "o")
        np.testing.assert_array_equal(np.load(self.path("o/c.npy")), a.astype(np.int32) @ b.astype(np.int32))

    def test_inputs_folder_of_a_model_with_many_inputs(self):
        # GPT-2 decode: input_ids and a KV cache (past_k_<i>, past_v_<i>) of the same shape, so inputs matched to the
        # wrong names would run and give other numbers. The folder gives the same outputs, bit for bit, as naming each
        # file with --input.
        src = os.path.join(WORKLOADS_DIR, "gpt2_small", "decode")
        if not os.path.exists(os.path.join(src, "gpt2.onnx")):
            self.skipTest(f"{src}/gpt2.onnx is not built (target workload_gpt2_small)")
        meta = json.loads(read(os.path.join(src, "meta.json")))
        names = list(meta["inputs"])
        self.assertGreaterEqual(len(names), 5)
        os.makedirs(self.path("in"))
        flags = []
        for n in names:
            shutil.copy(os.path.join(src, n + ".npy"), self.path("in"))
            flags += ["--input", f"{n}={os.path.join(src, n + '.npy')}"]
        model = os.path.join(src, "gpt2.onnx")
        tpusim("run", model, "--inputs", self.path("in"), "--output-dir", self.path("o1"))
        tpusim("run", model, *flags, "--output-dir", self.path("o2"))
        outs = sorted(os.listdir(self.path("o2")))
        self.assertEqual(sorted(os.listdir(self.path("o1"))), outs)
        self.assertIn("logits.npy", outs)
        for f in outs:
            np.testing.assert_array_equal(np.load(self.path("o1/" + f)), np.load(self.path("o2/" + f)), err_msg=f)
        # The exporter's folder also holds PyTorch's outputs (*_ref.npy): they name no input, so it is refused.
        p = tpusim("run", model, "--inputs", src, check=False)
        self.assertEqual(p.returncode, 1)
        m = re.fullmatch(r"tpusim: error: --inputs .*: \w+_ref\.npy names no input of the program \(its inputs: (.*)\)",
                         p.stderr.strip())
        self.assertTrue(m, p.stderr)
        self.assertEqual(sorted(m.group(1).split(", ")), sorted(names))

    def test_inputs_folder_mistakes(self):
        self.gemm_inputs("in")
        kernel = os.path.abspath(os.path.join(KERNELS, "gemm_int8.s"))

        def error(*args, code=1):
            p = self.run_in_dir(kernel, *self.GEMM, *args, check=False)
            self.assertEqual(p.returncode, code, p.stderr)
            self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
            return p.stderr.strip()

        os.remove(self.path("in/b.npy"))
        self.assertEqual(error("--inputs", "in"), "tpusim: error: --inputs in: no file in/b.npy for input b")
        os.remove(self.path("in/a.npy"))
        self.assertEqual(error("--inputs", "in"), "tpusim: error: --inputs in: no files for inputs a, b "
                                                  "(each as in/NAME.npy)")
        self.gemm_inputs("in")
        np.save(self.path("in/bias.npy"), np.zeros(4, np.int8))
        self.assertEqual(error("--inputs", "in"), "tpusim: error: --inputs in: bias.npy names no input of the "
                                                  "program (its inputs: a, b)")
        os.remove(self.path("in/bias.npy"))
        self.assertEqual(error("--inputs", "in", "--input", "a=in/a.npy", code=2),
                         "tpusim: input 'a' given twice: by --input and by in/a.npy")
        self.assertEqual(error("--inputs", "nowhere"), "tpusim: error: --inputs nowhere: no such folder")
        # Files that are not .npy are not inputs (an exporter's meta.json), and are ignored.
        self.write("in/meta.json", "{}")
        self.run_in_dir(kernel, *self.GEMM, "--inputs", "in")
        # With --random-inputs the inputs without a file are made up, and named.
        os.remove(self.path("in/b.npy"))
        out = self.run_in_dir(kernel, *self.GEMM, "--inputs", "in", "--random-inputs").stdout
        self.assertIn("inputs as random data (--seed 1): b\n", out)

    def test_whole_chip_gives_the_one_unit_results(self):
        # The compiler spreads work over the chip: on v4 (2 cores x 4 matrix units) the CNN's larger GEMMs run over
        # both cores; on h200-like (132 cores; with barriers made free and DMA latency short, so that every kernel
        # worth sharing is shared) the CNN's copies (padding, im2col) share their moves among the cores (core.id
        # r31 in the copy kernel) and the cast of its f32 input its chunks (core.id r7 in cast.s), BERT's row-wise kernels share their rows (core.id r8 in the row-wise kernel),
        # its attention is one fused kernel on every core (no core.id guard before it), and the per-head GEMMs
        # of a batched matmul that is no attention run side by side, one head per core ("runs on core N"). Each
        # program runs on every core and is faster, and its outputs are those of the same chip with 1 core of 1
        # unit, bit for bit (the matrix units sum each pass in a fixed order, whatever the tiling; a row is
        # computed by the same instructions on whichever core; copies move the same bytes in the same order of
        # dependent moves).
        shared = ["--set", "chip.sync_latency=0", "--set", "dma.latency=10"]
        cases = (("tinycnn", "tinycnn.onnx", "v4", [], 2),
                 ("tinycnn", "tinycnn.onnx", "h200-like", shared, 132),
                 ("bert_small", "bert.onnx", "h200-like", shared, 132))
        for model, onnx, config, extra, cores in cases:
            d = os.path.join(WORKLOADS_DIR, model)
            if not os.path.exists(os.path.join(d, onnx)):
                self.skipTest(f"{d}/{onnx} is not exported")
            inputs = [a for f in sorted(os.listdir(d)) if f.endswith(".npy") and not f.endswith("_ref.npy")
                      for a in ("--input", f[:-4] + "=" + os.path.join(d, f))]
            runs = {}
            for name, sets in (("whole", []), ("one", ["--set", "chip.cores=1", "--set", "core.mxus=1"])):
                out = self.path(f"{model}.{config}.{name}")
                stats_file = self.path(f"{model}.{config}.{name}.json")
                # intermediates where both keep them (one core of 16 MiB would keep them in VMEM)
                tpusim("run", os.path.join(d, onnx), *inputs, "--config", config, *extra, *sets, "--intermediates-in-hbm",
                       "--output-dir", out, "--stats", stats_file)
                stats = json.loads(read(stats_file))
                outputs = {}
                for f in sorted(os.listdir(out)):
                    with open(os.path.join(out, f), "rb") as fh:
                        outputs[f] = fh.read()
                runs[name] = (stats, outputs)
            self.assertEqual(runs["whole"][0]["cores_running"], cores, model)
            self.assertEqual(runs["one"][0]["cores_running"], 1, model)
            self.assertLess(runs["whole"][0]["cycles"], runs["one"][0]["cycles"], model)
            self.assertTrue(runs["whole"][1], model)
            self.assertEqual(runs["whole"][1], runs["one"][1], model)
            if config == "h200-like":
                tpusim("compile", os.path.join(d, onnx), "--config", config, *extra, "-o", self.path("m.tpub"))
                dis = tpusim("disasm", self.path("m.tpub")).stdout
                if model == "tinycnn":
                    self.assertRegex(dis, r"core.id r31 +# pc \d+ \([^)]*<copy>/copy at copy.cpp:\d+")  # a shared copy
                    self.assertRegex(dis, r"core.id r7 +# pc \d+ \(cast\(input\): <builtin>/cast.s")  # a shared cast
                else:
                    self.assertIn("core.id r8", dis)  # a row-wise kernel whose rows the cores share
                    self.assertIn('.region kernel, "attention_chip"', dis)  # attention, fused
                    self.assertNotRegex(dis, r"core.id \(attention_chip runs on core")  # on every core
        # A batched matmul of two activations (not attention): one GEMM per head, side by side.
        from onnx import helper, save, TensorProto
        value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4, 16, 16])
        graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], "bmm",
                                  [value("a"), value("b")], [value("y")])
        model = self.path("bmm.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        tpusim("compile", model, "--config", "h200-like", *shared, "-o", self.path("bmm.tpub"))
        dis = tpusim("disasm", self.path("bmm.tpub")).stdout
        self.assertRegex(dis, r"mm: core.id \(gemm.s runs on core 3\)")  # heads side by side

    def test_memory_bound_rowwise_kernel_is_shared_by_its_transfers(self):
        # An elementwise Add of two [256, 256] f32 tensors on h200-like: one vector instruction per pass, 512 passes
        # of the 128 lanes, is less vector work than the two barriers (2 x 500 cycles), but one core would move its
        # 786,432 bytes through its VMEM ports at 128 bytes per cycle (6,144 cycles) where 132 cores take them at
        # HBM's 2,623: the rows are shared (core.id r8 in the row-wise kernel). With barriers of 10,000 cycles each
        # they are not, and the program is one core's.
        from onnx import helper, save, TensorProto
        value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [256, 256])
        graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"], name="add")], "add",
                                  [value("a"), value("b")], [value("y")])
        model = self.path("add.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        tpusim("compile", model, "--config", "h200-like", "-o", self.path("add.tpub"))
        dis = tpusim("disasm", self.path("add.tpub")).stdout
        self.assertRegex(dis, r"core.id r8 +# pc \d+ \(add: ")
        tpusim("compile", model, "--config", "h200-like", "--set", "chip.sync_latency=10000", "-o", self.path("one.tpub"))
        dis = tpusim("disasm", self.path("one.tpub")).stdout
        self.assertNotIn("core.id", dis)
        self.assertNotIn(".cores", dis)

    def test_small_kernels_run_level_by_level(self):
        # Two chains of Transposes, a -> ya1 -> ya2 and b -> yb1 -> yb2, the nodes in the order ta1, ta2, tb1, tb2:
        # on v4 the program runs the first of each chain side by side (ta1 on core 0, tb1 on core 1), then the
        # second of each (ta2, tb2), where the order given would have ta2 wait for ta1 first. The outputs are
        # numpy's.
        from onnx import helper, save, TensorProto
        rng = np.random.default_rng(12)
        sq = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [32, 48])
        tr = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [48, 32])
        nodes = [helper.make_node("Transpose", ["a"], ["ya1"], name="ta1", perm=[1, 0]),
                 helper.make_node("Transpose", ["ya1"], ["ya2"], name="ta2", perm=[1, 0]),
                 helper.make_node("Transpose", ["b"], ["yb1"], name="tb1", perm=[1, 0]),
                 helper.make_node("Transpose", ["yb1"], ["yb2"], name="tb2", perm=[1, 0])]
        graph = helper.make_graph(nodes, "chains", [sq("a"), sq("b")], [sq("ya2"), sq("yb2")])
        model = self.path("chains.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        tpusim("compile", model, "--config", "v4", "-o", self.path("chains.tpub"))
        dis = tpusim("disasm", self.path("chains.tpub")).stdout
        at = {}
        for name in ("ta1", "ta2", "tb1", "tb2"):
            m = re.search(r"# pc (\d+) \(" + name + r": core\.id \(copy runs on core (\d)\)", dis)
            self.assertTrue(m, name)
            at[name] = (int(m.group(1)), int(m.group(2)))
        self.assertLess(at["tb1"][0], at["ta2"][0])  # level by level
        self.assertEqual((at["ta1"][1], at["tb1"][1]), (0, 1))
        self.assertEqual((at["ta2"][1], at["tb2"][1]), (0, 1))
        inputs = []
        for n in ("a", "b"):
            np.save(self.path(n + ".npy"), rng.standard_normal((32, 48)).astype(np.float32))
            inputs += ["--input", n + "=" + self.path(n + ".npy")]
        tpusim("run", self.path("chains.tpub"), *inputs, "--config", "v4", "--output-dir", self.path("out"))
        for n in ("a", "b"):
            np.testing.assert_array_equal(np.load(os.path.join(self.path("out"), "y" + n + "2.npy")),
                                          np.load(self.path(n + ".npy")))

    def test_whole_chip_gemm_takes_its_weights_as_rows_for_narrow_tiles(self):
        # A Linear layer of few output columns, x [128, 3072] @ W [3072, 768] + b (BERT-base's second FFN
        # matmul), on h200-like: the whole-chip GEMM's plan with W as [K, N] rows (tiles of 32 x 32, strips
        # narrower than the matrix unit's 128 columns) beats its plan with W tile by tile (8 x 128, the layout the
        # lowering gives weights for gemm.s), so the program holds W as [3072, 768], where the same model on one
        # core of one unit (gemm.s) holds it tile by tile, [192, 6, 16, 128]. The outputs are the same bits, and
        # numpy's product within bf16's rounding.
        from onnx import helper, numpy_helper, save, TensorProto
        rng = np.random.default_rng(17)
        w = rng.standard_normal((3072, 768)).astype(np.float32) / 32
        bias = rng.standard_normal(768).astype(np.float32)
        graph = helper.make_graph(
            [helper.make_node("MatMul", ["x", "w"], ["xw"], name="mm"), helper.make_node("Add", ["xw", "b"], ["y"], name="add")],
            "ffn_out", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 3072])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 768])],
            [numpy_helper.from_array(w, "w"), numpy_helper.from_array(bias, "b")])
        model = self.path("ffn_out.onnx")
        save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
        x = rng.standard_normal((128, 3072)).astype(np.float32)
        np.save(self.path("x.npy"), x)
        outs = {}
        for name, sets in (("whole", []), ("one", ["--set", "chip.cores=1", "--set", "core.mxus=1"])):
            tpusim("compile", model, "--config", "h200-like", *sets, "-o", self.path(name + ".tpub"))
            dis = tpusim("disasm", self.path(name + ".tpub")).stdout
            shape = "[3072, 768]" if name == "whole" else "[192, 6, 16, 128]"
            self.assertRegex(dis, r"\.const w, bf16, " + re.escape(shape))
            tpusim("run", self.path(name + ".tpub"), "--input", "x=" + self.path("x.npy"), "--config", "h200-like",
                   *sets, "--output-dir", self.path(name))
            outs[name] = np.load(os.path.join(self.path(name), "y.npy"))
        np.testing.assert_array_equal(outs["whole"], outs["one"])
        ref = x.astype(np.float64) @ w.astype(np.float64) + bias
        self.assertLess(np.linalg.norm(outs["whole"] - ref) / np.linalg.norm(ref), 1e-2)

    def test_one_row_elementwise_kernel_is_cut_for_the_cores(self):
        # A decoded token's activation, tanh(x) * x over [1, 3072], on h200-like: one row makes one core's share, so
        # the compiler cuts the purely elementwise kernel into 24 rows of the vector unit's 128 lanes and the cores
        # share them (core.id r8 in the row-wise kernel); each element is computed by the same instructions, so the
        # outputs are those of one core, bit for bit, and the run is faster. A row reduction (softmax) is not cut.
        from onnx import helper, save, TensorProto
        value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 3072])
        for name, nodes in (("act", [helper.make_node("Tanh", ["x"], ["t"], name="tanh"),
                                     helper.make_node("Mul", ["t", "x"], ["y"], name="mul")]),
                            ("softmax", [helper.make_node("Softmax", ["x"], ["y"], name="softmax", axis=-1)])):
            graph = helper.make_graph(nodes, name, [value("x")], [value("y")])
            model = self.path(name + ".onnx")
            save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
            np.save(self.path("x.npy"), np.random.default_rng(5).standard_normal((1, 3072)).astype(np.float32))
            runs = {}
            for cores in ("132", "1"):
                out, stats = self.path(f"{name}.{cores}"), self.path(f"{name}.{cores}.json")
                tpusim("run", model, "--input", "x=" + self.path("x.npy"), "--config", "h200-like", "--set",
                       "chip.cores=" + cores, "--output-dir", out, "--stats", stats)
                runs[cores] = (json.loads(read(stats))["cycles"], read(os.path.join(out, "y.npy"), "rb"))
            self.assertEqual(runs["132"][1], runs["1"][1], name)
            tpusim("compile", model, "--config", "h200-like", "-o", self.path(name + ".tpub"))
            dis = tpusim("disasm", self.path(name + ".tpub")).stdout
            if name == "act":
                self.assertRegex(dis, r"core.id r8 +# pc \d+ \(tanh\+mul: ")
                self.assertLess(runs["132"][0], runs["1"][0])
            else:
                self.assertNotRegex(dis, r"core.id r8 ")
    def test_independent_small_kernels_run_side_by_side(self):
        # Four Transposes of four inputs (each a copy too small to share among v4's 2 cores: a load's and a store's
        # latency more than its bytes take) run side by side, calls 0 and 2 on core 0, 1 and 3 on core 1 ("runs on
        # core 1"), between two barriers: faster than the same chip running them one after the other (a third
        # core makes no difference to a chip of one core's kernels, so chip.cores=1 is that), with the same
        # outputs, which are numpy's. A chain of Transposes (each reads the last one's output, the last one's the
        # model's) stays on core 0.
        from onnx import helper, save, TensorProto
        rng = np.random.default_rng(11)
        value = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [16, 48])
        tvalue = lambda n: helper.make_tensor_value_info(n, TensorProto.FLOAT, [48, 16])
        names = ["a", "b", "c", "d"]
        apart = [helper.make_node("Transpose", [n], ["y" + n], name="t" + n, perm=[1, 0]) for n in names]
        chain = [helper.make_node("Transpose", ["a"], ["ya"], name="ta", perm=[1, 0]),
                 helper.make_node("Transpose", ["ya"], ["yb"], name="tb", perm=[1, 0]),
                 helper.make_node("Transpose", ["yb"], ["yc"], name="tc", perm=[1, 0])]
        inputs = []
        for n in names:
            np.save(self.path(n + ".npy"), rng.standard_normal((16, 48)).astype(np.float32))
            inputs += ["--input", n + "=" + self.path(n + ".npy")]
        for case, nodes, outs in (("apart", apart, [tvalue("y" + n) for n in names]),
                                  ("chain", chain, [tvalue("yc")])):
            graph = helper.make_graph(nodes, case, [value(n) for n in names if case == "apart" or n == "a"], outs)
            model = self.path(case + ".onnx")
            save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), model)
            tpusim("compile", model, "--config", "v4", "-o", self.path(case + ".tpub"))
            dis = tpusim("disasm", self.path(case + ".tpub")).stdout
            if case == "chain":
                self.assertNotIn("runs on core 1", dis)
                continue
            self.assertRegex(dis, r"tb: core.id \(copy runs on core 1\)")
            self.assertRegex(dis, r"td: core.id \(copy runs on core 1\)")
            self.assertNotRegex(dis, r"t[ac]: core.id \(copy runs on core 1\)")
            runs = {}
            for cores in ("2", "1"):
                out, stats = self.path(f"{case}.{cores}"), self.path(f"{case}.{cores}.json")
                tpusim("run", model, *inputs, "--config", "v4", "--set", "chip.cores=" + cores, "--output-dir", out,
                       "--stats", stats)
                runs[cores] = json.loads(read(stats))["cycles"]
                for n in names:
                    np.testing.assert_array_equal(np.load(os.path.join(out, "y" + n + ".npy")),
                                                  np.load(self.path(n + ".npy")).T)
            self.assertLess(runs["2"], runs["1"])


    def test_layernorm_and_the_gemm_after_it_overlap(self):
        # On v5e (one core, 8 DMA engines) a LayerNorm and the whole-chip GEMM after it overlap: the GEMM's
        # semaphores are set before the LayerNorm, whose stores signal one more when it is done, and only the
        # GEMM's load of a waits for that, so its first chunk of weights loads while the LayerNorm runs. The
        # outputs are the bits of the same model compiled with a fence between every two kernels
        # (--no-kernel-overlap), and numpy's within bf16's rounding; the run is faster by at least half the
        # LayerNorm's own time (the weights' first chunk, 1.2 MB, takes longer to load than the LayerNorm runs).
        # Where the row-wise kernel writes the GEMM's b (here a second LayerNorm's output), they do not overlap.
        # With a second MatMul after the first, its first weights load while the first drains (the other way:
        # the load follows the first GEMM's instructions, its VMEM past the first's), also on chips of several
        # cores, each core loading its own first tile's (v4: 2 cores; h200-like: 132, pairs of cores multicasting
        # b): the same bits as with fences, fewer cycles.
        from onnx import helper, numpy_helper, save, TensorProto
        rng = np.random.default_rng(5)
        x = rng.standard_normal((128, 768)).astype(np.float32)
        z = rng.standard_normal((768, 512)).astype(np.float32)
        w = (rng.standard_normal((768, 1024)) / 28).astype(np.float32)
        w2 = (rng.standard_normal((1024, 768)) / 32).astype(np.float32)
        gamma = (1 + rng.standard_normal(768) / 4).astype(np.float32)
        beta = (rng.standard_normal(768) / 4).astype(np.float32)
        gamma2 = (1 + rng.standard_normal(512) / 4).astype(np.float32)
        beta2 = np.zeros(512, np.float32)
        np.save(self.path("x.npy"), x)
        np.save(self.path("z.npy"), z)
        consts = [numpy_helper.from_array(gamma, "gamma"), numpy_helper.from_array(beta, "beta"),
                  numpy_helper.from_array(gamma2, "gamma2"), numpy_helper.from_array(beta2, "beta2"),
                  numpy_helper.from_array(w, "w"), numpy_helper.from_array(w2, "w2")]
        f32 = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)

        def layernorm(v, g, b):
            mean = v.mean(-1, keepdims=True)
            return (v - mean) / np.sqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g + b

        cases = {
            "weights": ([helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln", axis=-1),
                         helper.make_node("MatMul", ["h", "w"], ["y"], name="fc")],
                        [f32("x", [128, 768])], ["--input", "x=" + self.path("x.npy")], [128, 1024],
                        layernorm(x, gamma, beta) @ w),
            "two_gemms": ([helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln", axis=-1),
                           helper.make_node("MatMul", ["h", "w"], ["g"], name="fc"),
                           helper.make_node("MatMul", ["g", "w2"], ["y"], name="fc2")],
                          [f32("x", [128, 768])], ["--input", "x=" + self.path("x.npy")], [128, 768],
                          layernorm(x, gamma, beta) @ w @ w2),
            "b_from_rows": ([helper.make_node("LayerNormalization", ["x", "gamma", "beta"], ["h"], name="ln", axis=-1),
                             helper.make_node("LayerNormalization", ["z", "gamma2", "beta2"], ["hz"], name="lnz",
                                              axis=-1),
                             helper.make_node("MatMul", ["h", "hz"], ["y"], name="mm")],
                            [f32("x", [128, 768]), f32("z", [768, 512])],
                            ["--input", "x=" + self.path("x.npy"), "--input", "z=" + self.path("z.npy")], [128, 512],
                            layernorm(x, gamma, beta) @ layernorm(z, gamma2, beta2)),
        }
        for case, (nodes, ins, inputs, shape, want) in cases.items():
            graph = helper.make_graph(nodes, case, ins, [f32("y", shape)], initializer=consts)
            model = self.path(case + ".onnx")
            save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), model)
            tpusim("compile", model, "--config", "v5e", "-o", self.path(case + ".tpub"))
            dis = tpusim("disasm", self.path(case + ".tpub")).stdout
            overlapped = "the semaphore rowwise signals when it is done" in dis
            self.assertEqual(overlapped, case != "b_from_rows", case)
            # The second GEMM's first weights load while the first GEMM drains (its VMEM past the first's).
            self.assertEqual("the first weights of fc2, loading while gemm_chip runs" in dis, case == "two_gemms")
            # (not into its units' shadow buffers there, GemmChip::lw_sem: fc's semaphore sets go before the
            # LayerNorm, and a sem.set before fc, which lw_sem needs, would wait for the LayerNorm)
            self.assertNotIn("the semaphore that says the first weights of", dis)
            runs, outs = {}, {}
            for mode, extra in (("overlap", []), ("fence", ["--no-kernel-overlap"])):
                out, stats = self.path(f"{case}.{mode}"), self.path(f"{case}.{mode}.json")
                tpusim("run", model, *inputs, "--config", "v5e", *extra, "--output-dir", out, "--stats", stats)
                runs[mode] = json.loads(read(stats))["cycles"]
                outs[mode] = np.load(os.path.join(out, "y.npy"))
            np.testing.assert_array_equal(outs["overlap"], outs["fence"])
            self.assertLess(np.linalg.norm(outs["overlap"] - want) / np.linalg.norm(want), 1e-2, case)
            if case == "b_from_rows":
                self.assertEqual(runs["overlap"], runs["fence"], case)
                continue
            if case == "two_gemms":
                self.assertLess(runs["overlap"], runs["fence"], case)
                for config in ("v4", "h200-like"):
                    tpusim("compile", model, "--config", config, "-o", self.path(f"{case}.{config}.tpub"))
                    self.assertIn("the first weights of", tpusim("disasm", self.path(f"{case}.{config}.tpub")).stdout)
                    cycles, ys = [], []
                    for extra in ([], ["--no-kernel-overlap"]):
                        out, stats = self.path(f"{case}.{config}{len(extra)}"), self.path(f"{case}.{config}{len(extra)}.json")
                        tpusim("run", model, *inputs, "--config", config, *extra, "--output-dir", out, "--stats", stats)
                        cycles.append(json.loads(read(stats))["cycles"])
                        ys.append(np.load(os.path.join(out, "y.npy")))
                    np.testing.assert_array_equal(ys[0], ys[1], err_msg=config)
                    self.assertLess(np.linalg.norm(ys[0] - want) / np.linalg.norm(want), 1e-2, config)
                    self.assertLess(cycles[0], cycles[1], config)
                continue
            # The LayerNorm's own cycles, from the profile of the run with the fence.
            prof = tpusim("profile", model, *inputs, "--config", "v5e", "--no-kernel-overlap").stdout
            ln = int(re.search(r"^\s*ln\s+([\d,]+)", prof, re.M).group(1).replace(",", ""))
            self.assertGreater(runs["fence"] - runs["overlap"], ln / 2, (runs, ln, prof))

    def test_random_index_inputs_are_valid_indices(self):
        # i32 inputs are usually indices: --random-inputs makes them 0..15, so an embedding lookup of a 16-row
        # table runs (negative ids used to stop it with a dma.gather error); the rows it gathered are the table's.
        # Row r of the (bf16) table holds r, exact in bf16, so the gathered rows tell which ids were drawn.
        kernel = os.path.join(KERNELS, "gather.s")
        table = np.repeat(np.arange(16, dtype=np.float32)[:, None], 8, axis=1)
        np.save(self.path("table.npy"), table)
        out = self.path("out")
        tpusim("run", kernel, "-D", "M=64", "-D", "D=8", "-D", "V=16", "--random-inputs",
               "--seed", "3", "--input", "table=" + self.path("table.npy"), "--output-dir", out)
        y = np.load(os.path.join(out, "y.npy"))
        ids = y[:, 0].astype(np.int64)
        self.assertTrue(((ids >= 0) & (ids <= 15)).all(), ids)
        self.assertGreater(len(set(ids.tolist())), 4)  # drawn, not constant
        np.testing.assert_array_equal(y, table[ids])

    def test_asm_says_what_it_wrote(self):
        src = os.path.join(KERNELS, "gemm_int8.s")
        out = tpusim("asm", src, "-D", "M=50", "-D", "K=60", "-D", "N=70", "-o", self.path("g.tpub")).stdout
        # The count of instructions is the disassembly's (one "# pc N" line each); the HBM bytes reach the end of
        # the last declared tensor: a 50x60 i8, b 60x70 i8, c 50x70 i32, at the addresses the disassembly shows.
        dis = tpusim("disasm", self.path("g.tpub")).stdout
        count = sum("# pc " in line for line in dis.splitlines())
        self.assertGreater(count, 50)
        size = {"a": 50 * 60, "b": 60 * 70, "c": 50 * 70 * 4}
        decls = re.findall(r"^\.(?:input|output) (\w+), \w+, \[[\d, ]+\] @ (0x[0-9a-f]+)$", dis, re.M)
        self.assertEqual(sorted(n for n, _ in decls), ["a", "b", "c"])
        end = max(int(addr, 16) + size[n] for n, addr in decls)
        self.assertEqual(out, f"assembled {src}: {count} instructions, {end} bytes of HBM -> {self.path('g.tpub')}\n")

    def test_help_groups_options_by_purpose_and_hides_internal_ones(self):
        text = tpusim("run", "--help").stdout
        # The groups in order, each a caption line and its options (up to a blank line); an option's line starts
        # with its name (-x [ --name ] or --name).
        groups = {}
        for block in text.split("\n\n")[1:]:
            lines = block.strip("\n").splitlines()
            if lines and lines[0].endswith(":"):
                groups[lines[0][:-1]] = [re.match(r"  (?:-\w \[ )?(--[\w-]+)", ln).group(1)
                                         for ln in lines[1:] if ln.startswith("  -")]
        self.assertEqual(groups, {
            "program": ["--define", "--shape", "--precision", "--calibrate", "--intermediates-in-hbm",
                        "--no-kernel-overlap", "--group-pack"],
            "inputs": ["--input", "--inputs", "--random-inputs", "--seed"],
            "outputs": ["--output-dir", "--stats", "--trace", "--trace-limit"],
            "the run": ["--timing-only", "--max-cycles"],
            "the simulated chip": ["--config", "--set"],
            "help": ["--help"],
        })
        self.assertEqual(list(groups), ["program", "inputs", "outputs", "the run", "the simulated chip", "help"])
        # The positional FILE is an option inside the parser; --help does not list it.
        self.assertNotIn("--file", text)
        self.assertNotRegex(text, r"\barg\b")  # every value is named (NAME=FILE.npy, DIR, N, ...), not "arg"
        for cmd in ["profile", "compile", "asm", "disasm", "config", "demo"]:
            text = tpusim(cmd, "--help").stdout
            self.assertNotIn("--file", text, cmd)
            self.assertTrue(text.rstrip().endswith("this help"), cmd)
            self.assertNotRegex(text, r"\barg\b", cmd)


class BadInput(Workdir):
    """Each mistake gives one clear line on stderr and a non-zero exit, never a crash."""

    def expect_error(self, args, pattern, code=1):
        p = tpusim(*args, check=False)
        self.assertEqual(p.returncode, code, f"exit code for {args}: {p.stderr}")
        err = p.stderr.strip()
        self.assertEqual(len(err.splitlines()), 1, f"one line expected, got:\n{err}")
        self.assertRegex(err, pattern)
        for crash in ["terminate called", "Segmentation", "Aborted", "core dumped"]:
            self.assertNotIn(crash, p.stderr)
        return err

    def kernel(self, body, name="k.s"):
        return self.write(name, body)

    def test_malformed_assembly_names_file_line_column(self):
        path = self.kernel("    li r1, 5\n    add r1, r2,\n")
        self.expect_error(["run", path], r"k\.s:2:\d+: ")

    def test_unknown_opcode(self):
        path = self.kernel("    li r1, 5\n    mxu.frobnicate r1\n")
        self.expect_error(["run", path], r"k\.s:2:5: .*mxu\.frobnicate")

    def test_unknown_register(self):
        path = self.kernel("    li r32, 5\n")
        self.expect_error(["run", path], r"k\.s:1:8: .*r32")

    def test_out_of_bounds_dma_names_pc_and_instruction(self):
        path = self.kernel("    li r1, 0\n    li r2, 0\n    li r3, 1\n    li r4, 4096\n"
                           "    li r5, 0x7fffffff\n    dma.ld r5, r2, r3, r4, r4, r4\n")
        self.expect_error(["run", path, "--config", "edge"], r"pc 5 \(dma\.ld r5, r2, r3, r4, r4, r4\).*VMEM")

    def test_missing_input_file(self):
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=4", "-D", "K=4", "-D", "N=4",
                           "--input", "a=" + self.path("nope.npy")], r"nope\.npy")

    def test_missing_input(self):
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=4", "-D", "K=4", "-D", "N=4"],
                          r"missing input 'a'")

    def test_input_of_wrong_shape(self):
        a = self.save("a.npy", np.zeros((4, 5), dtype=np.int8))
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=4", "-D", "K=4", "-D", "N=4",
                           "--input", "a=" + a], r"input 'a': expected i8 \[4, 4\], got i8 \[4, 5\]")

    def test_input_of_wrong_dtype(self):
        a = self.save("a.npy", np.zeros((4, 4), dtype=np.float32))
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=4", "-D", "K=4", "-D", "N=4",
                           "--input", "a=" + a], r"input 'a': expected i8 \[4, 4\], got f32 \[4, 4\]")

    def test_program_larger_than_hbm(self):
        # a (int8 [1e6, 1e5]) at 0: 1e11 bytes (under the 1 TiB limit of one tensor); b (int8 [1e5, 4]) at
        # 1e11 rounded up to 4096 = 100000002048, 400000 bytes; c (int32 [1e6, 4]) at the next 4096 boundary,
        # 100000403456, 1.6e7 bytes: the program ends at 100016403456.
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "-D", "M=1000000", "-D", "K=100000",
                           "-D", "N=4", "--random-inputs", "--timing-only"],
                          r"needs 100016403456 bytes of HBM, the chip has 34359738368")

    def test_unknown_config_key(self):
        self.expect_error(["config", "--show", "v4-like", "--set", "mxu.frobs=3"], r"mxu\.frobs")

    def test_unknown_preset(self):
        self.expect_error(["run", os.path.join(KERNELS, "gemm_int8.s"), "--config", "v9-like"], r"v9-like")

    def test_corrupt_program(self):
        path = self.write("bad.tpub", "TPUB but not really a program")
        self.expect_error(["run", path], r"bad\.tpub|program")

    def test_unknown_command_is_a_usage_error(self):
        self.expect_error(["frobnicate"], r"unknown command", code=2)

    def test_deadlock_names_the_waiting_unit(self):
        path = self.kernel("    mxu.sync wait=s3\n")
        self.expect_error(["run", path, "--config", "edge"], r"deadlock.*mxu.*s3")


if __name__ == "__main__":
    unittest.main()
