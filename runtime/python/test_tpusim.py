"""Tests of the Python module `tpusim` (runtime/python). One Client per process (SystemC elaborates once), so
each TestCase class makes its client in setUpClass and ctest runs each class in a process of its own:

    PYTHONPATH=build/runtime/python /usr/bin/python3 -m unittest -v test_tpusim.GemmTest
"""
import json
import os
import threading
import unittest

import numpy as np

import tpusim

SOURCE = os.environ.get("TPUSIM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
WORKLOADS = os.environ.get("TPUSIM_WORKLOADS_DIR", os.path.join(SOURCE, "build", "workloads"))
KERNELS = os.path.join(SOURCE, "kernels")


def int8(rng, shape):
    return rng.integers(-128, 128, shape, dtype=np.int8)


def bf16(x):
    """float32 rounded to bf16 (nearest even), as float32."""
    b = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


class GemmTest(unittest.TestCase):
    """gemm_int8.s on "edge" against numpy, exactly; stats, timing-only, profiles, serialization."""

    @classmethod
    def setUpClass(cls):
        cls.client = tpusim.Client("edge")
        cls.exe = cls.client.assemble(os.path.join(KERNELS, "gemm_int8.s"), {"M": 70, "K": 100, "N": 45})

    def test_gemm_exact(self):
        c, exe = self.client, self.exe
        self.assertEqual(c.chip, "edge")
        self.assertEqual(len(c.devices), 1)
        self.assertEqual(c.devices[0].attributes["mxu_rows"], 32)
        self.assertEqual(c.config["mxu.rows"], "32")
        self.assertEqual(exe.name, "gemm_int8")
        self.assertEqual(exe.inputs, [("a", "i8", (70, 100)), ("b", "i8", (100, 45))])
        self.assertEqual(exe.outputs, [("c", "i32", (70, 45))])
        rng = np.random.default_rng(1)
        a, b = int8(rng, (70, 100)), int8(rng, (100, 45))
        r = c.execute(exe, {"a": a, "b": b})
        out = r.outputs["c"]
        self.assertEqual(out.dtype, np.int32)
        self.assertEqual(out.shape, (70, 45))
        np.testing.assert_array_equal(out, a.astype(np.int32) @ b.astype(np.int32))
        # Non-contiguous views are accepted (copied in C order).
        at = np.ascontiguousarray(a.T).T
        self.assertFalse(at.flags.c_contiguous)
        np.testing.assert_array_equal(c.execute(exe, {"a": at, "b": b}).outputs["c"], out)

    def test_stats_and_timing_only(self):
        c, exe = self.client, self.exe
        rng = np.random.default_rng(2)
        r = c.execute(exe, {"a": int8(rng, (70, 100)), "b": int8(rng, (100, 45))})
        self.assertGreater(r.cycles, 0)
        self.assertAlmostEqual(r.seconds, r.cycles / 500e6, delta=1e-12)
        s = r.stats
        for key in ("chip", "clock_mhz", "cycles", "seconds", "units", "mxu", "hbm", "tpuv1_counters"):
            self.assertIn(key, s)
        self.assertEqual(s["chip"], "edge")
        self.assertEqual(s["cycles"], r.cycles)
        self.assertEqual(s["mxu"]["macs"], 70 * 100 * 45)
        # Timing only: the same cycles, no outputs, and inputs may be left out.
        t = c.execute(exe, {}, timing_only=True)
        self.assertEqual(t.cycles, r.cycles)
        self.assertEqual(t.outputs, {})
        cost = c.cost_analysis(exe)
        self.assertEqual(cost["cycles"], r.cycles)
        self.assertEqual(cost["macs"], 70 * 100 * 45)

    def test_profile_and_trace(self):
        c, exe = self.client, self.exe
        rng = np.random.default_rng(3)
        inputs = {"a": int8(rng, (70, 100)), "b": int8(rng, (100, 45))}
        with self.assertRaisesRegex(RuntimeError, "trace=True"):
            c.execute(exe, inputs).profile()
        r = c.execute(exe, inputs, trace=True)
        p = r.profile()
        self.assertEqual(p["cycles"], r.cycles)
        self.assertEqual(p["chip"], "edge")
        self.assertIn("gemm_int8", r.profile("table"))
        self.assertEqual(json.loads(r.profile("json"))["cycles"], r.cycles)
        self.assertIn("traceEvents", json.loads(r.trace_json()))

    def test_serialize_and_one_client(self):
        c, exe = self.client, self.exe
        data = exe.serialize()
        self.assertIsInstance(data, bytes)
        back = c.deserialize(data)
        self.assertEqual(back.fingerprint, exe.fingerprint)
        self.assertEqual(len(exe.fingerprint_hex), 16)
        # SystemC allows one Client per process: a second one is refused with a clear error.
        with self.assertRaisesRegex(RuntimeError, "one per process"):
            tpusim.Client("edge")


class MlpTest(unittest.TestCase):
    """The MLP workload (ONNX exported by PyTorch) against PyTorch's output."""

    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(WORKLOADS, "mlp")
        if not os.path.exists(os.path.join(cls.dir, "mlp.onnx")):
            raise AssertionError(f"{cls.dir}/mlp.onnx is missing (built by the workload_mlp target)")
        cls.client = tpusim.Client()  # v4-like

    def test_mlp_matches_torch(self):
        c = self.client
        self.assertEqual(c.chip, "v4-like")
        exe = c.compile(os.path.join(self.dir, "mlp.onnx"))
        self.assertEqual(c.compile(os.path.join(self.dir, "mlp.onnx")).fingerprint, exe.fingerprint)  # cached
        x = np.load(os.path.join(self.dir, "x.npy"))
        y_ref = np.load(os.path.join(self.dir, "y_ref.npy"))
        (in_name, _, in_shape), = exe.inputs
        (out_name, _, out_shape), = exe.outputs
        self.assertEqual(in_shape, x.shape)
        self.assertEqual(out_shape, y_ref.shape)
        r = c.execute(exe, {in_name: x}, trace=True)
        y = r.outputs[out_name]
        self.assertEqual(y.dtype, np.float32)  # bf16 outputs come back as float32
        cos = float(np.dot(y.ravel(), y_ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(y_ref)))
        self.assertGreaterEqual(cos, 0.999, f"cosine {cos}")
        self.assertGreater(r.stats["mxu"]["macs"], 0)
        self.assertGreater(len([g for g in r.profile()["regions"] if g["kind"] == "node"]), 0)
        # load() of an .onnx compiles it too (from the cache).
        self.assertEqual(c.load(os.path.join(self.dir, "mlp.onnx")).fingerprint, exe.fingerprint)

    def test_timing_only_compile(self):
        """compile(timing_only=True): a timing-only run of its program takes the cycles a functional run of the full
        compile does, and it reads no weight values: with its large weights overwritten by NaNs the model compiles
        to the very same program (while the full compile changes)."""
        import onnx
        from onnx import numpy_helper
        c = self.client
        path = os.path.join(self.dir, "mlp.onnx")
        full, fast = c.compile(path), c.compile(path, timing_only=True)
        self.assertNotEqual(full.fingerprint, fast.fingerprint)
        x = np.load(os.path.join(self.dir, "x.npy"))
        functional = c.execute(full, {"x": x})
        self.assertEqual(len(functional.outputs), 1)
        timing = c.execute(fast, {}, timing_only=True)  # (inputs may be left out of a timing-only run)
        self.assertEqual(timing.cycles, functional.cycles)
        self.assertGreater(timing.cycles, 0)
        with self.assertRaisesRegex(ValueError, "timing-only"):
            c.execute(fast, {"x": x})
        # The weights of 16 KiB or more (the two 128x64 ones) as NaNs: a timing-only compile never reads them.
        model = onnx.load(path)
        overwritten = 0
        for init in model.graph.initializer:
            w = numpy_helper.to_array(init)
            if w.nbytes >= 16384:
                init.CopyFrom(numpy_helper.from_array(np.full_like(w, np.nan), init.name))
                overwritten += 1
        self.assertEqual(overwritten, 2)
        self.assertEqual(c.compile(model, name="mlp.onnx", timing_only=True).fingerprint, fast.fingerprint)
        self.assertNotEqual(c.compile(model, name="mlp.onnx").fingerprint, full.fingerprint)


    def test_intermediates_in_vmem_or_hbm(self):
        """On a one-core chip of 16 MiB of VMEM (v4-like), the MLP's hidden activations stay in VMEM by default:
        bytes move within VMEM (stats "local") and HBM carries fewer; intermediates_in_hbm=True keeps them in
        HBM. The outputs are the same bits (the same f32 sums, whatever the kernels' tiles)."""
        c = self.client  # v4-like
        path = os.path.join(self.dir, "mlp.onnx")
        x = np.load(os.path.join(self.dir, "x.npy"))
        vmem, hbm = c.compile(path), c.compile(path, intermediates_in_hbm=True)
        self.assertNotEqual(vmem.fingerprint, hbm.fingerprint)
        rv, rh = c.execute(vmem, {"x": x}), c.execute(hbm, {"x": x})
        self.assertEqual(rv.outputs.keys(), rh.outputs.keys())
        for name in rv.outputs:
            np.testing.assert_array_equal(rv.outputs[name], rh.outputs[name])
        local = lambda r: r.stats["local"]["bytes_read"] + r.stats["local"]["bytes_written"]
        moved = lambda r: r.stats["hbm"]["bytes_read"] + r.stats["hbm"]["bytes_written"]
        self.assertGreater(local(rv), 0)
        self.assertEqual(local(rh), 0)
        self.assertLess(moved(rv), moved(rh))


    def test_overlap_kernels(self):
        """A LayerNorm and the whole-chip GEMM after it (a GELU as its epilogue, so the whole-chip GEMM even on
        v4-like's one matrix unit) overlap by default: the GEMM's first weights load while the LayerNorm runs.
        overlap_kernels=False puts a fence between them: another program, the same bits, more cycles
        (docs/compiler.md, "A kernel and the whole-chip GEMM after it, overlapped")."""
        from onnx import helper, numpy_helper, TensorProto
        rng = np.random.default_rng(3)
        f32 = lambda n, shape: helper.make_tensor_value_info(n, TensorProto.FLOAT, shape)
        consts = [numpy_helper.from_array(np.ones(768, np.float32), "g"),
                  numpy_helper.from_array(np.zeros(768, np.float32), "b"),
                  numpy_helper.from_array((rng.standard_normal((768, 1024)) / 28).astype(np.float32), "w"),
                  numpy_helper.from_array(np.array(2 ** 0.5, np.float32), "sqrt2"),
                  numpy_helper.from_array(np.array(1.0, np.float32), "one"),
                  numpy_helper.from_array(np.array(0.5, np.float32), "half")]
        nodes = [helper.make_node("LayerNormalization", ["x", "g", "b"], ["h"], axis=-1),
                 helper.make_node("MatMul", ["h", "w"], ["m"]),
                 helper.make_node("Div", ["m", "sqrt2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
                 helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["m", "p"], ["q"]),
                 helper.make_node("Mul", ["q", "half"], ["y"])]
        model = helper.make_model(helper.make_graph(nodes, "ln_fc", [f32("x", [128, 768])], [f32("y", [128, 1024])],
                                                    initializer=consts),
                                  opset_imports=[helper.make_opsetid("", 17)])
        c = self.client  # v4-like: one core, 4 DMA engines
        x = rng.standard_normal((128, 768)).astype(np.float32)
        on, off = c.compile(model, name="ln_fc.onnx"), c.compile(model, name="ln_fc.onnx", overlap_kernels=False)
        self.assertNotEqual(on.fingerprint, off.fingerprint)
        r_on, r_off = c.execute(on, {"x": x}), c.execute(off, {"x": x})
        np.testing.assert_array_equal(r_on.outputs["y"], r_off.outputs["y"])
        self.assertLess(r_on.cycles, r_off.cycles)


class BertTest(unittest.TestCase):
    """The small BERT workload: int64 token ids from numpy, bf16 and int8 (calibrated) against PyTorch."""

    @classmethod
    def setUpClass(cls):
        cls.dir = os.path.join(WORKLOADS, "bert_small")
        if not os.path.exists(os.path.join(cls.dir, "bert.onnx")):
            raise AssertionError(f"{cls.dir}/bert.onnx is missing (built by the workload_bert_small target)")
        cls.client = tpusim.Client()

    def test_precisions(self):
        c = self.client
        path = os.path.join(self.dir, "bert.onnx")
        inputs = {n: np.load(os.path.join(self.dir, n + ".npy")) for n in ("input_ids", "attention_mask", "token_type_ids")}
        self.assertEqual(inputs["input_ids"].dtype, np.int64)
        ref = np.load(os.path.join(self.dir, "last_hidden_state_ref.npy")).astype(np.float64)
        bf16 = c.compile(path)
        int8 = c.compile(path, precision="int8", calibration=inputs)
        self.assertNotEqual(bf16.fingerprint, int8.fingerprint)
        for exe, bound in ((bf16, 0.999), (int8, 0.99)):
            y = c.execute(exe, inputs).outputs["last_hidden_state"].astype(np.float64)
            cos = float(np.dot(y.ravel(), ref.ravel()) / (np.linalg.norm(y) * np.linalg.norm(ref)))
            self.assertGreaterEqual(cos, bound)
        with self.assertRaisesRegex(ValueError, "precision must be"):
            c.compile(path, precision="fp8")
        with self.assertRaisesRegex(ValueError, "int8 needs calibration inputs"):
            c.compile(path, precision="int8")
        big = dict(inputs, input_ids=np.full_like(inputs["input_ids"], 2**40))
        with self.assertRaisesRegex(ValueError, "does not fit the int32"):
            c.execute(bf16, big)


class Int8ExactTest(unittest.TestCase):
    """int8 post-training quantisation of Linear(40, 24) + ReLU, emulated in numpy with the scales the compiler
    documents (compiler.h Options) and the ISA's arithmetic, and required to match bit for bit. Calibrated on
    three sets of inputs that are not the test input; the one with the largest |x| is the middle one, so a merge
    that kept the first or the last set (instead of the maximum over all) gives other bits."""

    @classmethod
    def setUpClass(cls):
        import tempfile
        import torch
        cls.tmp = tempfile.TemporaryDirectory()
        torch.manual_seed(3)
        m = torch.nn.Sequential(torch.nn.Linear(40, 24), torch.nn.ReLU())
        cls.w = m[0].weight.detach().numpy().T.astype(np.float32)  # [K, N]
        cls.b = m[0].bias.detach().numpy().astype(np.float32)
        cls.path = os.path.join(cls.tmp.name, "lin.onnx")
        torch.onnx.export(m, torch.zeros(6, 40), cls.path, input_names=["x"], output_names=["y"], opset_version=13)
        cls.client = tpusim.Client()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    @staticmethod
    def emulate(x, absmax, w, b):
        """The quantised graph in float32 / int64 numpy, step by step as the compiler lowers it."""
        f = np.float32
        s_a = f(absmax) / f(127) if absmax > 0 else f(1)       # activation scale: absmax / 127 (f32)
        inv = f(1) / s_a                                       # quantize: cast.s with SCALE = 1 / s_a
        q = np.clip(np.rint(x.astype(f) * inv), -128, 127)     # f32 product, round to nearest even, saturate
        s_w = np.abs(w).max(axis=0)                            # per output column: max|w| / 127
        s_w = np.where(s_w > 0, s_w / f(127), f(1)).astype(f)
        qw = np.clip(np.rint(w / s_w), -127, 127)              # f32 division, nearest even
        acc = q.astype(np.int64) @ qw.astype(np.int64)         # int8 x int8 -> int32, exact
        assert np.abs(acc).max() < 2**24                       # so its f32 conversion is exact
        mult = (s_a * s_w).astype(f)                           # the dequantisation multiplier s_a * s_w[n] (f32)
        y = acc.astype(f) * mult + b                           # f32 multiply, then f32 add
        return np.maximum(y, f(0)), mult

    def test_bit_exact_against_numpy_with_merged_calibration(self):
        rng = np.random.default_rng(5)
        calib = [{"x": (rng.standard_normal((6, 40)) * s).astype(np.float32)} for s in (1.0, 2.5, 1.5)]
        x = rng.standard_normal((6, 40)).astype(np.float32)
        absmax = [float(np.abs(c["x"]).max()) for c in calib]
        self.assertEqual(max(absmax), absmax[1])
        exe = self.client.compile(self.path, precision="int8", calibration=calib)
        y = self.client.execute(exe, {"x": x}).outputs["y"]
        want, mult = self.emulate(x, max(absmax), self.w, self.b)
        self.assertEqual(y.dtype, np.float32)
        np.testing.assert_array_equal(y, want, "int8 Linear+ReLU: not the numpy emulation's bits")
        # The multiplier the emulation used is not a no-op: scaled by 2, the output changes.
        self.assertFalse(np.array_equal(y, self.emulate(x, 2 * max(absmax), self.w, self.b)[0]))
        # Calibrated on the first or the last set alone, the bits differ: the merge takes the maximum.
        for only in (absmax[0], absmax[2]):
            self.assertFalse(np.array_equal(y, self.emulate(x, only, self.w, self.b)[0]))
        single = self.client.compile(self.path, precision="int8", calibration=calib[1])
        self.assertEqual(single.fingerprint, exe.fingerprint)   # the set holding the maximum alone: same program
        other = self.client.compile(self.path, precision="int8", calibration=calib[0])
        self.assertNotEqual(other.fingerprint, exe.fingerprint)
        # Against float: relative L2 error of the quantised output.
        ref = np.maximum(x.astype(np.float64) @ self.w + self.b, 0)
        rel = float(np.linalg.norm(y - ref) / np.linalg.norm(ref))
        print(f"\n  int8 Linear+ReLU: bit-exact against numpy; rel L2 against float {rel:.3e}")
        self.assertLess(rel, 0.02)


class AsyncTest(unittest.TestCase):
    """Buffers and execute_async on two devices."""

    @classmethod
    def setUpClass(cls):
        cls.client = tpusim.Client("edge", devices=2)
        cls.exe = cls.client.assemble(os.path.join(KERNELS, "gemm_int8.s"), {"M": 40, "K": 64, "N": 33})

    def test_buffers(self):
        c = self.client
        self.assertEqual([d.id for d in c.devices], [0, 1])
        x = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
        b = c.buffer(x, device=1)
        self.assertEqual(b.dims, (2, 3, 4))
        self.assertEqual(b.dtype, "i32")
        self.assertEqual(b.device, 1)
        self.assertEqual(b.nbytes, 96)
        self.assertEqual(b.memory, "hbm")
        np.testing.assert_array_equal(b.to_numpy(), x)
        h = c.buffer(np.array([1.0, 1.00390625, -3.5], np.float32), dtype="bf16")
        self.assertEqual(h.dtype, "bf16")
        np.testing.assert_array_equal(h.to_numpy(), np.array([1.0, 1.0, -3.5], np.float32))
        # f8e4m3 (fp8, OCP E4M3 "fn"): float32 rounded to 3 fraction bits, nearest even (1.0625 ties to 1, 1.1875
        # to 1.25), 448 the largest, beyond 464 NaN (not saturated), 2^-9 the least subnormal; back as float32.
        h8 = c.buffer(np.array([1.0, 1.0625, 1.1875, 448.0, 470.0, 2.0 ** -9], np.float32), dtype="fp8")
        self.assertEqual(h8.dtype, "f8e4m3")
        self.assertEqual(h8.nbytes, 6)
        np.testing.assert_array_equal(h8.to_numpy(), np.array([1.0, 1.0, 1.25, 448.0, np.nan, 2.0 ** -9], np.float32))
        b.delete()
        self.assertTrue(b.deleted)
        with self.assertRaisesRegex(ValueError, "deleted"):
            b.to_numpy()

    def test_execute_async(self):
        c, exe = self.client, self.exe
        rng = np.random.default_rng(4)
        runs = []
        for dev in (0, 1):
            a, b = int8(rng, (40, 64)), int8(rng, (64, 33))
            f = c.execute_async(exe, {"a": c.buffer(a, dev), "b": c.buffer(b, dev)}, device=dev)
            runs.append((f, a.astype(np.int32) @ b.astype(np.int32), dev))
        for f, want, dev in runs:
            r = f.result()
            self.assertTrue(f.done())
            out = r.outputs["c"]
            self.assertIsInstance(out, tpusim.Buffer)
            self.assertEqual(out.device, dev)
            np.testing.assert_array_equal(out.to_numpy(), want)
            self.assertGreater(r.cycles, 0)
            self.assertEqual(r.stats["cycles"], r.cycles)
        # A deleted input buffer is a ValueError naming it.
        a = c.buffer(int8(rng, (40, 64)))
        a.delete()
        with self.assertRaisesRegex(ValueError, "input 'a'"):
            c.execute_async(exe, {"a": a, "b": c.buffer(int8(rng, (64, 33)))}).result()

    def test_threads(self):
        # Host threads submit and wait at the same time (result() releases the GIL).
        c, exe = self.client, self.exe
        errors, lock = [], threading.Lock()

        def work(seed):
            try:
                r = np.random.default_rng(seed)
                a, b = int8(r, (40, 64)), int8(r, (64, 33))
                dev = seed % 2
                f = c.execute_async(exe, {"a": c.buffer(a, dev), "b": c.buffer(b, dev)}, device=dev)
                got = f.result().outputs["c"].to_numpy()
                np.testing.assert_array_equal(got, a.astype(np.int32) @ b.astype(np.int32))
                got = c.execute(exe, {"a": a, "b": b}, device=dev).outputs["c"]
                np.testing.assert_array_equal(got, a.astype(np.int32) @ b.astype(np.int32))
            except Exception as e:  # noqa: BLE001 (reported below)
                with lock:
                    errors.append(e)

        threads = [threading.Thread(target=work, args=(s,)) for s in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(errors, [])

    def test_bf16_inputs(self):
        c = self.client
        exe = c.assemble(os.path.join(KERNELS, "gemm_bf16.s"), {"M": 16, "K": 48, "N": 20})
        self.assertEqual(exe.inputs[0][1], "bf16")
        rng = np.random.default_rng(5)
        a = rng.uniform(-1, 1, (16, 48)).astype(np.float32)
        b = rng.uniform(-1, 1, (48, 20)).astype(np.float32)
        want = bf16(a).astype(np.float64) @ bf16(b).astype(np.float64)
        got = c.execute(exe, {"a": a, "b": b}).outputs["c"]
        self.assertEqual(got.dtype, np.float32)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        f = c.execute_async(exe, {"a": c.buffer(a, dtype="bf16"), "b": c.buffer(b, dtype="bf16")})
        np.testing.assert_array_equal(f.result().outputs["c"].to_numpy(), got)


class ErrorsTest(unittest.TestCase):
    """The runtime's errors as Python exceptions, with its one-line messages."""

    def test_errors(self):
        with self.assertRaisesRegex(ValueError, "no-such-chip"):
            tpusim.Client("no-such-chip")
        with self.assertRaisesRegex(ValueError, "mxu.frobs"):
            tpusim.Client("edge", sets=["mxu.frobs=3"])
        with self.assertRaises(ValueError):
            tpusim.Client("edge", devices=0)
        # Failed attempts make no client: this one is the process's first.
        c = tpusim.Client("edge", sets=["hbm.size_mib=1"])
        exe = c.assemble(os.path.join(KERNELS, "gemm_int8.s"), {"M": 8, "K": 16, "N": 8})
        rng = np.random.default_rng(6)
        a, b = int8(rng, (8, 16)), int8(rng, (16, 8))
        np.testing.assert_array_equal(c.execute(exe, {"a": a, "b": b}).outputs["c"],
                                      a.astype(np.int32) @ b.astype(np.int32))
        with self.assertRaises(ValueError) as cm:
            c.execute(exe, {"a": a[:, :15], "b": b})
        self.assertEqual(str(cm.exception), "input 'a': expected i8 [8, 16], got i8 [8, 15]")
        # float64 is cast to float32 (the module's casting rules), which an int8 input does not take either.
        with self.assertRaisesRegex(ValueError, r"input 'a': expected i8 \[8, 16\], got f32 \[8, 16\]"):
            c.execute(exe, {"a": a.astype(np.float64), "b": b})
        with self.assertRaisesRegex(ValueError, r"input 'a': expected i8 \[8, 16\], got float16 \[8, 16\]"):
            c.execute(exe, {"a": a.astype(np.float16), "b": b})
        with self.assertRaisesRegex(ValueError, "has no input 'x'"):
            c.execute(exe, {"a": a, "b": b, "x": a})
        with self.assertRaisesRegex(ValueError, "missing input 'b'"):
            c.execute(exe, {"a": a})
        with self.assertRaisesRegex(ValueError, "device 3 does not exist"):
            c.execute(exe, {"a": a, "b": b}, device=3)
        with self.assertRaisesRegex(ValueError, "input 'a': expected i8"):
            c.execute_async(exe, {"a": c.buffer(a[:4]), "b": c.buffer(b)})
        with self.assertRaisesRegex(ValueError, "unsupported dtype uint8"):
            c.buffer(np.zeros(4, np.uint8))
        with self.assertRaisesRegex(ValueError, "zero_copy needs a C-contiguous array"):
            c.device_put(np.zeros((4, 4), np.int8)[:, ::2], zero_copy=True)
        with self.assertRaises(MemoryError) as cm:
            c.buffer(np.zeros(2 << 20, np.int8))  # HBM is 1 MiB
        self.assertIn("HBM", str(cm.exception))
        with self.assertRaises(ValueError):
            c.deserialize(b"not a program")
        with self.assertRaises(RuntimeError):
            c.assemble(os.path.join(KERNELS, "no_such_kernel.s"))
        with self.assertRaises(RuntimeError):
            c.execute(exe, {"a": a, "b": b}, max_cycles=5)  # the simulator's error
        c.close()
        with self.assertRaisesRegex(RuntimeError, "closed"):
            c.execute(exe, {"a": a, "b": b})
        with self.assertRaisesRegex(RuntimeError, "was closed"):
            tpusim.client()


class ApiTest(unittest.TestCase):
    """JAX's habits (issue 14): tpusim.client() fetched again, device_put, block_until_ready, np.asarray(buffer),
    numpy or Buffer inputs alike, float64 cast to float32, several devices in one call; compile from bytes."""

    @classmethod
    def setUpClass(cls):
        cls.client = tpusim.client("edge", devices=2)
        cls.gemm = cls.client.assemble(os.path.join(KERNELS, "gemm_int8.s"), {"M": 16, "K": 32, "N": 24})
        cls.vadd = cls.client.assemble(os.path.join(KERNELS, "vadd.s"), {"N": 256})

    def test_client_is_fetched_again(self):
        # A notebook cell re-run: the same Client, not an error (and not a second SystemC elaboration).
        self.assertIs(tpusim.client("edge", devices=2), self.client)
        self.assertIs(tpusim.client(), self.client)
        spaces = self.client.memory_spaces
        self.assertEqual([m["name"] for m in spaces], ["device 0 hbm", "device 1 hbm", "host"])
        self.assertEqual((spaces[1]["device"], spaces[2]["kind"], spaces[2]["device"]), (1, "host", -1))
        with self.assertRaisesRegex(RuntimeError, "'edge' with 2 device"):
            tpusim.client("v4-like")
        with self.assertRaisesRegex(RuntimeError, "one per process"):
            tpusim.Client("edge")

    def test_device_put_and_array(self):
        c = self.client
        x = np.arange(12, dtype=np.int32).reshape(3, 4)
        b = tpusim.device_put(x, device=1)
        self.assertIs(tpusim.block_until_ready(b), b)
        self.assertIs(b.block_until_ready(), b)
        self.assertTrue(b.is_ready())
        self.assertEqual((b.device, b.dtype, b.shape), (1, "i32", (3, 4)))
        got = np.asarray(b)  # was a 0-d object array
        self.assertEqual(got.dtype, np.int32)
        np.testing.assert_array_equal(got, x)
        np.testing.assert_array_equal(np.asarray(b, dtype=np.float64), x.astype(np.float64))
        self.assertIs(c.device_put(b, device=1), b)  # already there
        moved = c.device_put(b, device=0)
        self.assertEqual(moved.device, 0)
        np.testing.assert_array_equal(np.asarray(moved), x)
        f64 = c.device_put(np.array([0.1, 1e-50, -2.5]))  # float64 -> float32, to nearest (1e-50 -> 0)
        self.assertEqual(f64.dtype, "f32")
        np.testing.assert_array_equal(np.asarray(f64), np.array([0.1, 1e-50, -2.5]).astype(np.float32))
        z = c.device_put(x, zero_copy=True)
        self.assertEqual(z.memory, "host")
        np.testing.assert_array_equal(np.asarray(z), x)

    def test_numpy_or_buffer_alike(self):
        c, exe = self.client, self.gemm
        rng = np.random.default_rng(11)
        a, b = int8(rng, (16, 32)), int8(rng, (32, 24))
        want = a.astype(np.int32) @ b.astype(np.int32)
        for inputs in ({"a": a, "b": b}, {"a": c.device_put(a), "b": b}, {"a": c.device_put(a), "b": c.device_put(b)}):
            np.testing.assert_array_equal(c.execute(exe, inputs).outputs["c"], want)
            np.testing.assert_array_equal(np.asarray(c.execute_async(exe, inputs).result().outputs["c"]), want)
        f = c.execute_async(exe, {"a": a, "b": b})
        self.assertIs(f.block_until_ready(), f)
        self.assertTrue(f.done())
        # float64 data for an f32 program: cast to float32 first.
        x, y = rng.uniform(-1, 1, 256), rng.uniform(-1, 1, 256)
        got = c.execute(self.vadd, {"a": x, "b": y}).outputs["y"]
        np.testing.assert_array_equal(got, x.astype(np.float32) + y.astype(np.float32))

    def test_several_devices_in_one_call(self):
        c, exe = self.client, self.gemm
        rng = np.random.default_rng(12)
        ins = [{"a": int8(rng, (16, 32)), "b": int8(rng, (32, 24))} for _ in range(2)]
        wants = [i["a"].astype(np.int32) @ i["b"].astype(np.int32) for i in ins]
        results = c.execute(exe, ins)
        self.assertEqual(len(results), 2)
        for r, want in zip(results, wants):
            np.testing.assert_array_equal(r.outputs["c"], want)
        futures = c.execute_async(exe, [ins[1], ins[0]], devices=[1, 0])
        self.assertEqual([f.result().outputs["c"].device for f in futures], [1, 0])
        np.testing.assert_array_equal(np.asarray(futures[0].result().outputs["c"]), wants[1])
        np.testing.assert_array_equal(np.asarray(futures[1].result().outputs["c"]), wants[0])
        with self.assertRaisesRegex(ValueError, "2 dicts of inputs for 3 devices"):
            c.execute(exe, ins, devices=[0, 1, 2])
        bad = dict(ins[1])
        del bad["b"]
        with self.assertRaisesRegex(ValueError, "missing input 'b'"):
            c.execute_async(exe, [ins[0], bad])

    def test_compile_from_bytes_and_cache(self):
        c = self.client
        path = os.path.join(WORKLOADS, "mlp", "mlp.onnx")
        before = c.cache_stats()
        e1 = c.compile(path)
        e2 = c.compile(os.path.join(WORKLOADS, "mlp", "..", "mlp", ".", "mlp.onnx"))
        after = c.cache_stats()
        self.assertEqual(after["compilations"], before["compilations"] + 1)  # one file, two spellings
        self.assertEqual(e1.fingerprint, e2.fingerprint)
        with open(path, "rb") as f:
            data = f.read()
        e3 = c.compile(data, name="mlp.onnx")
        self.assertEqual(e3.fingerprint, e1.fingerprint)
        self.assertEqual(c.compile(bytearray(data), name="mlp.onnx").fingerprint, e1.fingerprint)
        self.assertEqual(c.cache_stats()["compilations"], before["compilations"] + 2)  # bytes: by content, once
        import onnx
        self.assertEqual(c.compile(onnx.load(path), name="mlp.onnx").fingerprint, e1.fingerprint)
        with self.assertRaisesRegex(ValueError, "junk.onnx"):
            c.compile(b"junk", name="junk.onnx")
        x = np.load(os.path.join(WORKLOADS, "mlp", "x.npy"))
        y = c.execute(e3, {"x": x.astype(np.float64)}).outputs
        np.testing.assert_allclose(list(y.values())[0], np.load(os.path.join(WORKLOADS, "mlp", "y_ref.npy")),
                                   rtol=0.05, atol=0.05)


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class MemoryTest(unittest.TestCase):
    """1,000 executions from Python with flat memory: the resident set grows by less than 4 MiB after a warm-up
    (each execution makes 16 KiB of outputs and 32 KiB of inputs on the device: a leak of either would be 16+ MiB)."""

    def test_thousand_executions_flat_rss(self):
        c = tpusim.client("edge")
        exe = c.assemble(os.path.join(KERNELS, "vadd.s"), {"N": 4096})
        rng = np.random.default_rng(13)
        a, b = rng.uniform(-1, 1, 4096).astype(np.float32), rng.uniform(-1, 1, 4096).astype(np.float32)
        want = a + b

        def step(i):
            if i % 2:
                out = c.execute(exe, {"a": a, "b": b}).outputs["y"]
            else:
                out = np.asarray(c.execute_async(exe, {"a": a, "b": c.device_put(b)}).result().outputs["y"])
            if i % 100 == 0:
                np.testing.assert_array_equal(out, want)

        for i in range(100):  # warm-up: allocator pools, caches, first-use costs
            step(i)
        before = rss_bytes()
        for i in range(1000):
            step(i)
        grown = rss_bytes() - before
        print(f"\nRSS over 1000 executions: {before / 2**20:.1f} MiB -> {(before + grown) / 2**20:.1f} MiB "
              f"({grown / 2**10:+.0f} KiB)")
        self.assertLess(grown, 4 << 20)
        self.assertEqual(c.memory_stats()["live_buffers"], 0)


if __name__ == "__main__":
    unittest.main()
