"""System tests of the small real workloads (build/workloads/*) through the `tpusim` program, and its errors on bad
models and inputs.

For every small workload (tinycnn, resnet18, BERT and GPT-2 at opsets 13 and 17, GPT-2 prefill and decode, and the
model zoo of workloads/zoo.py: LLaMA-style decoder, Whisper-style encoder-decoder, U-Net, Conformer block):
  - `tpusim run MODEL.onnx --input ...` (every graph input from meta.json) against PyTorch's outputs (*_ref.npy):
    bf16 (the default) must reach cosine similarity >= 0.999 and relative L2 error <= 2e-2 on every output;
  - `tpusim compile` to a .tpub, then `tpusim run` of that file gives bit-identical outputs;
  - `--timing-only` gives the same cycle count as the functional run;
  - int8 (`--precision int8 --calibrate ...`, where the program has it): cosine >= 0.99;
  - the zoo to tighter bounds, ZOO_MIN_COSINE and ZOO_MAX_REL_L2 (cosine >= 0.9999, rel L2 <= 1e-2), with the same
    .tpub and --timing-only checks, on v4-like (classes Zoo_<model>) and on the whole-chip v5e (Zoo_<model>_v5e).
The measured figures are printed (ctest -V, or --output-on-failure when a test fails).

Run by ctest (validation/system/CMakeLists.txt; one ctest test per class) with Debian's python3 (numpy, onnx):
    TPUSIM=build/tools/tpusim WORKLOADS_DIR=build/workloads WORKLOADS_SRC=workloads \\
        /usr/bin/python3 -m unittest -v test_workloads                  # everything
    ... /usr/bin/python3 -m unittest -v test_workloads.Workload_bert_small   # one workload
    ... /usr/bin/python3 -m unittest -v test_workloads.Zoo_llama test_workloads.Zoo_llama_v5e   # one zoo model
"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest

import numpy as np

from test_cli import Workdir  # a temporary directory per test, path() and save()

TPUSIM = os.environ.get("TPUSIM", "build/tools/tpusim")
WORKLOADS_DIR = os.environ.get("WORKLOADS_DIR", "build/workloads")
WORKLOADS_SRC = os.environ.get("WORKLOADS_SRC", "workloads")

RUN_TIMEOUT = 600  # a functional run of the largest small workload (resnet18) takes seconds
ERROR_TIMEOUT = 120  # a bad input must fail quickly, never hang

# name -> directory under WORKLOADS_DIR. The class for each is Workload_<name> (one ctest test each).
WORKLOADS = {
    "tinycnn": "tinycnn",
    "resnet18": "resnet18",
    "bert_small": "bert_small",
    "bert_small_op17": "bert_small_op17",
    "gpt2_prefill": "gpt2_small/prefill",
    "gpt2_decode": "gpt2_small/decode",
    "gpt2_op17_prefill": "gpt2_small_op17/prefill",
    "gpt2_op17_decode": "gpt2_small_op17/decode",
    "zoo_llama": "zoo_llama",
    "zoo_whisper": "zoo_whisper",
    "zoo_unet": "zoo_unet",
    "zoo_conformer": "zoo_conformer",
}
ZOO = ("llama", "whisper", "unet", "conformer")
INT8_WORKLOADS = {"tinycnn", "resnet18", "bert_small", "gpt2_prefill"}

BF16_MIN_COSINE, BF16_MAX_REL_L2 = 0.999, 2e-2
# The zoo against PyTorch's float32 outputs in bf16 (issue 12 asks for cosine >= 0.9999). Worst measured: rel L2
# 3.4e-3 (llama and whisper logits; unet 1.6e-3, conformer 7.9e-4), cosine 0.999994; the bound is about 3x that.
ZOO_MIN_COSINE, ZOO_MAX_REL_L2 = 0.9999, 1e-2
INT8_MIN_COSINE = 0.99
# int8 relative L2 error against PyTorch's float output: worst measured 3.9e-2 (resnet18 logits; gpt2_prefill
# 1.2e-2, bert_small 7.1e-3, tinycnn 4.0e-3). Bounded so that an output off by a scale factor fails even where its
# cosine stays high.
INT8_MAX_REL_L2 = 0.08


def tpusim(*args, check=True, timeout=RUN_TIMEOUT):
    env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
    p = subprocess.run([TPUSIM, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"tpusim {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}")
    return p


def compare(out, ref):
    """Cosine similarity and relative L2 error in float64."""
    o = np.asarray(out, dtype=np.float64).ravel()
    r = np.asarray(ref, dtype=np.float64).ravel()
    cos = float(o @ r / (np.linalg.norm(o) * np.linalg.norm(r)))
    rel = float(np.linalg.norm(o - r) / np.linalg.norm(r))
    return cos, rel


class Workload:
    """One exported workload: its directory, model, inputs and references (meta.json)."""

    def __init__(self, name):
        self.name = name
        self.dir = os.path.join(WORKLOADS_DIR, WORKLOADS[name])
        meta_path = os.path.join(self.dir, "meta.json")
        if not os.path.exists(meta_path):
            # scripts/setup.sh installs what every workload needs (resnet18: python3-torchvision): a missing one
            # is a failure, not a skip.
            raise AssertionError(f"{self.dir} was not built: run scripts/setup.sh, then build the target `workloads`")
        with open(meta_path) as f:
            self.meta = json.load(f)
        self.model = os.path.join(self.dir, self.meta["model"])
        self.inputs = {n: os.path.join(self.dir, v["file"]) for n, v in self.meta["inputs"].items()}
        self.refs = {n: os.path.join(self.dir, v["file"]) for n, v in self.meta["outputs"].items()}

    def input_args(self, **replace):
        args = []
        for n, path in self.inputs.items():
            args += ["--input", f"{n}={replace.get(n, path)}"]
        return args

    def load_outputs(self, out_dir):
        outs = {}
        for n in self.refs:
            path = os.path.join(out_dir, n + ".npy")
            if not os.path.exists(path):
                raise AssertionError(f"{self.name}: output {n} was not written to {out_dir}")
            outs[n] = np.load(path)
        return outs


def cycles_of(stdout, stats_path):
    with open(stats_path) as f:
        cycles = json.load(f)["cycles"]
    m = re.search(r"^\s*cycles (\d+)\b", stdout, re.M)
    if m is None:
        raise AssertionError(f"no 'cycles N' line in:\n{stdout}")
    if int(m.group(1)) != cycles:
        raise AssertionError(f"printed cycles {m.group(1)} != --stats cycles {cycles}")
    return cycles


class WorkloadTests(unittest.TestCase):
    """Base of the per-workload classes made below (Workload_<name>); NAME is set by each."""

    NAME = None
    CONFIG = "v4-like"
    MIN_COSINE, MAX_REL_L2 = BF16_MIN_COSINE, BF16_MAX_REL_L2

    @classmethod
    def setUpClass(cls):
        cls._tmp = tempfile.TemporaryDirectory()
        cls.tmp = cls._tmp.name
        cls.w = Workload(cls.NAME)
        # The functional run that (a), (b) and (c) share.
        cls.run_dir = os.path.join(cls.tmp, "onnx_out")
        stats = os.path.join(cls.tmp, "onnx_stats.json")
        p = tpusim("run", cls.w.model, "--config", cls.CONFIG, *cls.w.input_args(), "--output-dir", cls.run_dir,
                   "--stats", stats)
        cls.outputs = cls.w.load_outputs(cls.run_dir)
        cls.cycles = cycles_of(p.stdout, stats)

    @classmethod
    def tearDownClass(cls):
        cls._tmp.cleanup()

    def test_a_bf16_against_torch(self):
        print(f"\n{self.NAME} ({self.CONFIG}, bf16): {self.cycles} cycles")
        failures = []
        for n, ref_path in self.w.refs.items():
            ref = np.load(ref_path)
            out = self.outputs[n]
            self.assertEqual(out.shape, ref.shape, n)
            self.assertTrue(np.all(np.isfinite(out)), f"{n}: non-finite values")
            cos, rel = compare(out, ref)
            print(f"  {n:20s} {str(list(out.shape)):16s} cosine {cos:.6f}  rel L2 {rel:.3e}")
            if not (cos >= self.MIN_COSINE and rel <= self.MAX_REL_L2):
                failures.append(f"{n}: cosine {cos:.6f} (>= {self.MIN_COSINE}), rel L2 {rel:.3e} "
                                f"(<= {self.MAX_REL_L2})")
        self.assertFalse(failures, f"{self.NAME} ({self.CONFIG}): " + "; ".join(failures))

    def test_b_compiled_tpub_bit_identical(self):
        tpub = os.path.join(self.tmp, "m.tpub")
        tpusim("compile", self.w.model, "--config", self.CONFIG, "-o", tpub)
        out_dir = os.path.join(self.tmp, "tpub_out")
        stats = os.path.join(self.tmp, "tpub_stats.json")
        p = tpusim("run", tpub, "--config", self.CONFIG, *self.w.input_args(), "--output-dir", out_dir,
                   "--stats", stats)
        again = self.w.load_outputs(out_dir)
        for n, out in self.outputs.items():
            self.assertEqual(again[n].dtype, out.dtype, n)
            self.assertEqual(again[n].shape, out.shape, n)
            self.assertEqual(again[n].tobytes(), out.tobytes(), f"{n}: .tpub run differs from the .onnx run")
        self.assertEqual(cycles_of(p.stdout, stats), self.cycles)
        print(f"\n{self.NAME} ({self.CONFIG}): .tpub run bit-identical to the .onnx run ({len(again)} outputs, "
              f"{self.cycles} cycles)")

    def test_c_timing_only_same_cycles(self):
        stats = os.path.join(self.tmp, "timing_stats.json")
        p = tpusim("run", self.w.model, "--config", self.CONFIG, *self.w.input_args(), "--timing-only",
                   "--stats", stats)
        timing = cycles_of(p.stdout, stats)
        print(f"\n{self.NAME}: functional {self.cycles} cycles, --timing-only {timing} cycles")
        self.assertEqual(timing, self.cycles)


class Int8Tests:
    """int8 (`--precision int8`, calibrated on the workload's own inputs) against PyTorch: cosine >= 0.99 and
    relative L2 <= INT8_MAX_REL_L2; the compiled .tpub bit-identical."""

    def test_d_int8_against_torch(self):
        calib = []
        for n, path in self.w.inputs.items():
            calib += ["--calibrate", f"{n}={path}"]
        out_dir = os.path.join(self.tmp, "int8_out")
        tpusim("run", self.w.model, "--config", self.CONFIG, "--precision", "int8", *calib, *self.w.input_args(),
               "--output-dir", out_dir)
        outs = self.w.load_outputs(out_dir)
        print(f"\n{self.NAME} ({self.CONFIG}, int8):")
        failures = []
        for n, ref_path in self.w.refs.items():
            cos, rel = compare(outs[n], np.load(ref_path))
            print(f"  {n:20s} cosine {cos:.6f}  rel L2 {rel:.3e}")
            if not (cos >= INT8_MIN_COSINE and rel <= INT8_MAX_REL_L2):
                failures.append(f"{n}: cosine {cos:.6f} (>= {INT8_MIN_COSINE}), rel L2 {rel:.3e} (<= {INT8_MAX_REL_L2})")
        self.assertFalse(failures, f"{self.NAME} int8: " + "; ".join(failures))
        # The int8 program compiled to a .tpub runs the same.
        tpub = os.path.join(self.tmp, "int8.tpub")
        tpusim("compile", self.w.model, "--config", self.CONFIG, "--precision", "int8", *calib, "-o", tpub)
        tpub_dir = os.path.join(self.tmp, "int8_tpub_out")
        tpusim("run", tpub, "--config", self.CONFIG, *self.w.input_args(), "--output-dir", tpub_dir)
        again = self.w.load_outputs(tpub_dir)
        for n, out in outs.items():
            self.assertEqual(again[n].tobytes(), out.tobytes(), f"{n}: int8 .tpub run differs from the .onnx run")
        print(f"  int8 .tpub run bit-identical to the .onnx run")


for _name in WORKLOADS:
    if _name.startswith("zoo_"):
        continue
    _bases = (WorkloadTests, Int8Tests) if _name in INT8_WORKLOADS else (WorkloadTests,)
    globals()[f"Workload_{_name}"] = type(f"Workload_{_name}", _bases, {"NAME": _name})
del _name, _bases


# The zoo, to the tighter bounds: Zoo_<model> on v4-like and Zoo_<model>_v5e on the whole-chip v5e (ctest runs the
# two as one test per model).
for _model in ZOO:
    for _suffix, _config in (("", "v4-like"), ("_v5e", "v5e")):
        globals()[f"Zoo_{_model}{_suffix}"] = type(f"Zoo_{_model}{_suffix}", (WorkloadTests,),
                                                   {"NAME": f"zoo_{_model}", "CONFIG": _config,
                                                    "MIN_COSINE": ZOO_MIN_COSINE, "MAX_REL_L2": ZOO_MAX_REL_L2})
del _model, _suffix, _config


class Presets(unittest.TestCase):
    """tinycnn and bert_small on the v1-like and edge presets: the same accuracy bounds as on v4-like."""

    def check(self, name, config):
        w = Workload(name)
        with tempfile.TemporaryDirectory() as tmp:
            stats = os.path.join(tmp, "s.json")
            p = tpusim("run", w.model, "--config", config, *w.input_args(), "--output-dir", tmp, "--stats", stats)
            outs = w.load_outputs(tmp)
            print(f"\n{name} ({config}, bf16): {cycles_of(p.stdout, stats)} cycles")
        failures = []
        for n, ref_path in w.refs.items():
            cos, rel = compare(outs[n], np.load(ref_path))
            print(f"  {n:20s} {str(list(outs[n].shape)):16s} cosine {cos:.6f}  rel L2 {rel:.3e}")
            if not (cos >= BF16_MIN_COSINE and rel <= BF16_MAX_REL_L2):
                failures.append(f"{n}: cosine {cos:.6f}, rel L2 {rel:.3e}")
        self.assertFalse(failures, f"{name} on {config}: " + "; ".join(failures))

    def test_tinycnn_v1_like(self):
        self.check("tinycnn", "v1-like")

    def test_tinycnn_edge(self):
        self.check("tinycnn", "edge")

    def test_bert_small_v1_like(self):
        self.check("bert_small", "v1-like")

    def test_bert_small_edge(self):
        self.check("bert_small", "edge")

    def test_gpt2_outputs_written_while_layers_run_v4(self):
        # On v4 (two cores, the intermediates in the shared memory) a GPT-2's present keys and values (a Transpose of
        # the QKV projection's output, cast to f32: graph outputs) are written while the layers run (codegen.cpp,
        # place_output_moves), not by a copy each and a cast each at the program's end: at hidden 768 the attention
        # loads them into VMEM and the LayerNorm after its output projection casts and stores them; at hidden 256
        # (the output projection on one core) a block before the attention loads them and the attention casts and
        # stores them. Against torch, the same bytes as --no-kernel-overlap (which writes them at the end), in fewer
        # cycles; the compile report notes the kernels.
        for hidden, heads, both in ((768, 12, True), (256, 4, False)):
            with self.subTest(hidden=hidden), tempfile.TemporaryDirectory() as tmp:
                subprocess.run([sys.executable, os.path.join(os.environ["WORKLOADS_SRC"], "gpt2.py"), "--out", tmp,
                                "--layers", "2", "--hidden", str(hidden), "--heads", str(heads), "--vocab", "512",
                                "--mode", "prefill"], check=True, capture_output=True)
                model, ids = os.path.join(tmp, "gpt2.onnx"), os.path.join(tmp, "input_ids.npy")
                report = tpusim("compile", model, "--config", "v4", "--report", "-").stdout
                self.assertEqual(report.count("loads the sources of the graph outputs"), 2 if both else 0, report)
                self.assertEqual(report.count("writes the graph outputs of"), 2, report)
                cycles, outs = {}, {}
                for how, extra in (("early", []), ("fenced", ["--no-kernel-overlap"])):
                    d, stats = os.path.join(tmp, how), os.path.join(tmp, how + ".json")
                    p = tpusim("run", model, "--config", "v4", "-i", f"input_ids={ids}", "--output-dir", d,
                               "--stats", stats, *extra)
                    cycles[how] = cycles_of(p.stdout, stats)
                    outs[how] = {f[:-4]: np.load(os.path.join(d, f)) for f in os.listdir(d)}
                print(f"\nGPT-2 prefill, hidden {hidden}, on v4: {cycles['early']} cycles, {cycles['fenced']} fenced")
                self.assertEqual(sorted(outs["early"]), sorted(outs["fenced"]))
                self.assertEqual(len(outs["early"]), 5)  # the logits and 2 x 2 presents
                for n, a in outs["early"].items():
                    self.assertEqual(a.tobytes(), outs["fenced"][n].tobytes(), n)
                    cos, rel = compare(a, np.load(os.path.join(tmp, n + "_ref.npy")))
                    self.assertTrue(cos >= BF16_MIN_COSINE and rel <= BF16_MAX_REL_L2, (n, cos, rel))
                self.assertLess(cycles["early"], cycles["fenced"])


# --- bad models and inputs ------------------------------------------------------------------------------------

def _varint(b, i):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return v, i


def _fields(b, start, end):
    """The protobuf fields in b[start:end]: (field number, wire type, tag offset, payload start, end)."""
    i = start
    while i < end:
        tag_at = i
        key, i = _varint(b, i)
        wt, payload = key & 7, i
        if wt == 0:
            _, i = _varint(b, i)
        elif wt == 1:
            i += 8
        elif wt == 2:
            n, payload = _varint(b, i)
            i = payload + n
        elif wt == 5:
            i += 4
        else:
            raise ValueError(f"wire type {wt} at {tag_at}")
        yield key >> 3, wt, tag_at, payload, i


def corrupt_in_the_middle(data):
    """Gives the graph element (node or initializer) that spans the file's middle an invalid tag: its wire type
    becomes 7, which no protobuf parser accepts, so the file reliably fails to parse (flipping bytes at random
    may land in a weight's raw bytes and still parse)."""
    b = bytearray(data)
    graph = next(f for f in _fields(b, 0, len(b)) if f[0] == 7 and f[1] == 2)  # ModelProto.graph
    mid = len(b) // 2
    elem = next(f for f in _fields(b, graph[3], graph[4]) if f[2] <= mid < f[4])
    b[elem[2]] |= 0x07
    return bytes(b), elem


class BadInput(Workdir):
    """Each mistake: non-zero exit, one line on stderr naming the problem, no crash, no hang."""

    def expect_error(self, args, pattern, code=1):
        p = tpusim(*args, check=False, timeout=ERROR_TIMEOUT)
        err = p.stderr.strip()
        self.assertEqual(p.returncode, code, f"exit code for tpusim {' '.join(map(str, args))}: {p.stderr}")
        self.assertEqual(len(err.splitlines()), 1, f"one line expected, got:\n{err}")
        self.assertRegex(err, r"^tpusim: error: ")
        self.assertRegex(err, pattern)
        for crash in ["terminate called", "Segmentation", "Aborted", "core dumped", "what():"]:
            self.assertNotIn(crash, p.stderr)
        print(f"\n  {err}")
        return err

    # Broken model files.

    def test_truncated_onnx(self):
        bert = Workload("bert_small")
        with open(bert.model, "rb") as f:
            data = f.read()
        path = self.path("truncated_bert.onnx")
        with open(path, "wb") as f:
            f.write(data[: len(data) // 2])
        for cmd in (["run", path, "--random-inputs"], ["compile", path, "-o", self.path("t.tpub")]):
            self.expect_error(cmd, r"truncated_bert\.onnx: .*(not a valid ONNX|parse)")
        self.assertFalse(os.path.exists(self.path("t.tpub")))

    def test_corrupt_onnx(self):
        bert = Workload("bert_small")
        with open(bert.model, "rb") as f:
            data, elem = corrupt_in_the_middle(f.read())
        path = self.path("corrupt_bert.onnx")
        with open(path, "wb") as f:
            f.write(data)
        import onnx  # the corruption really is invalid protobuf
        from google.protobuf.message import DecodeError
        with self.assertRaises(DecodeError):
            onnx.load_model_from_string(data)
        print(f"\n  graph field {elem[0]} at byte {elem[2]} of {len(data)} given wire type 7")
        for cmd in (["run", path, "--random-inputs"], ["compile", path, "-o", self.path("c.tpub")]):
            self.expect_error(cmd, r"corrupt_bert\.onnx: .*(not a valid ONNX|parse)")

    def test_not_onnx_at_all(self):
        path = self.path("text.onnx")
        with open(path, "w") as f:
            f.write("this is not a model\n")
        self.expect_error(["run", path, "--random-inputs"], r"text\.onnx")

    # Models the compiler does not take as they are.

    def make_model(self, filename, nodes, inputs, outputs, initializers=(), graph="g", opset=13):
        import onnx
        from onnx import helper
        m = helper.make_model(helper.make_graph(nodes, graph, inputs, outputs, list(initializers)),
                              opset_imports=[helper.make_opsetid("", opset)])
        onnx.checker.check_model(m)
        path = self.path(filename)
        onnx.save(m, path)
        return path

    def test_unsupported_operator_lrn(self):
        from onnx import TensorProto, helper
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 8, 8])
        y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 4, 8, 8])
        r = helper.make_tensor_value_info("R", TensorProto.FLOAT, [1, 4, 8, 8])
        nodes = [helper.make_node("Relu", ["X"], ["R"], name="first_relu"),
                 helper.make_node("LRN", ["R"], ["Y"], name="norm_lrn_1", size=3)]
        path = self.make_model("lrn_model.onnx", nodes, [x], [y])
        for cmd in (["run", path, "--random-inputs"], ["compile", path, "-o", self.path("l.tpub")]):
            self.expect_error(cmd, r"(?=.*'?LRN'?)(?=.*norm_lrn_1)(?=.*lrn_model\.onnx)")

    def test_unsupported_einsum_equation(self):
        from onnx import TensorProto, helper
        a = helper.make_tensor_value_info("A", TensorProto.FLOAT, [3, 3])
        b = helper.make_tensor_value_info("B", TensorProto.FLOAT, [3, 4])
        c = helper.make_tensor_value_info("C", TensorProto.FLOAT, [3, 4])
        nodes = [helper.make_node("Einsum", ["A", "B"], ["C"], name="contract_ab", equation="ii,ik->ik")]
        path = self.make_model("einsum_model.onnx", nodes, [a, b], [c])
        self.expect_error(["run", path, "--random-inputs"],
                          r"(?=.*Einsum)(?=.*contract_ab)(?=.*einsum_model\.onnx)")

    def dynamic_matmul(self):
        from onnx import TensorProto, helper, numpy_helper
        w = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
        x = helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 8])
        y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4])
        nodes = [helper.make_node("MatMul", ["X", "W"], ["Y"], name="mm")]
        return self.make_model("dyn.onnx", nodes, [x], [y], [numpy_helper.from_array(w, "W")]), w

    def test_dynamic_shape_without_value(self):
        path, _ = self.dynamic_matmul()
        x = self.save("x.npy", np.ones((3, 8), np.float32))
        self.expect_error(["run", path, "--input", "X=" + x], r"(?=.*'X')(?=.*'batch')")
        self.expect_error(["compile", path, "-o", self.path("d.tpub")], r"(?=.*'X')(?=.*'batch')")

    def test_dynamic_shape_given_with_shape_option(self):
        path, w = self.dynamic_matmul()
        x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
        xf = self.save("x.npy", x)
        tpusim("run", path, "--input", "X=" + xf, "--shape", "X=3,8", "--output-dir", self.path("o1"))
        tpusim("compile", path, "--shape", "X=3,8", "-o", self.path("d.tpub"))
        tpusim("run", self.path("d.tpub"), "--input", "X=" + xf, "--output-dir", self.path("o2"))
        y1, y2 = np.load(self.path("o1/Y.npy")), np.load(self.path("o2/Y.npy"))
        self.assertEqual(y1.shape, (3, 4))
        self.assertEqual(y1.tobytes(), y2.tobytes())
        cos, rel = compare(y1, x.astype(np.float64) @ w)
        print(f"\n  dynamic MatMul with --shape X=3,8: cosine {cos:.6f}, rel L2 {rel:.3e}")
        self.assertGreaterEqual(cos, BF16_MIN_COSINE)
        self.assertLessEqual(rel, BF16_MAX_REL_L2)
        # A shape that contradicts the model's static dims is an error, not a guess.
        self.expect_error(["run", path, "--input", "X=" + xf, "--shape", "X=3,9"], r"'X'")

    def test_model_larger_than_hbm(self):
        # bert_small (~0.6 MB of weights) fits into the smallest HBM (hbm.size_mib >= 1); resnet18 does not.
        w = Workload("resnet18")
        err = self.expect_error(["run", w.model, *w.input_args(), "--set", "hbm.size_mib=1"],
                                r"needs (\d+) bytes of HBM, the chip has 1048576\b")
        self.assertGreater(int(re.search(r"needs (\d+) bytes", err).group(1)), 1 << 20)

    # Bad input tensors.

    def test_input_of_wrong_shape(self):
        bert = Workload("bert_small")
        ids = self.save("ids.npy", np.load(bert.inputs["input_ids"])[:, :15])
        self.expect_error(["run", bert.model, *bert.input_args(input_ids=ids)],
                          r"input 'input_ids': expected i(32|64) \[1, 16\], got i(32|64) \[1, 15\]")
        cnn = Workload("tinycnn")
        x = self.save("x.npy", np.zeros((1, 3, 16, 16), np.float32))
        self.expect_error(["run", cnn.model, *cnn.input_args(input=x)],
                          r"input 'input': expected \w+ \[1, 3, 32, 32\], got f32 \[1, 3, 16, 16\]")

    def test_input_of_wrong_dtype(self):
        bert = Workload("bert_small")
        ids = self.save("ids.npy", np.load(bert.inputs["input_ids"]).astype(np.float32))
        self.expect_error(["run", bert.model, *bert.input_args(input_ids=ids)],
                          r"input 'input_ids': expected i(32|64) \[1, 16\], got f32 \[1, 16\]")
        cnn = Workload("tinycnn")
        x = self.save("x.npy", np.zeros((1, 3, 32, 32), np.int8))
        self.expect_error(["run", cnn.model, *cnn.input_args(input=x)],
                          r"input 'input': expected \w+ \[1, 3, 32, 32\], got i8 \[1, 3, 32, 32\]")

    def test_token_id_beyond_vocabulary(self):
        bert = Workload("bert_small")
        ids = np.load(bert.inputs["input_ids"])
        ids[0, 5] = 10**6
        path = self.save("ids.npy", ids)
        self.expect_error(["run", bert.model, *bert.input_args(input_ids=path)],
                          r"(?i)(?=.*gather)(?=.*index 1000000\b)(?=.*\b100\b)")
        ids[0, 5] = -1  # negative ids too (ONNX Gather's negative indices are not token ids)
        path = self.save("ids_neg.npy", ids)
        self.expect_error(["run", bert.model, *bert.input_args(input_ids=path)], r"(?i)(?=.*gather)(?=.*-1)")
        ids[0, 5] = 2**32 + 5  # must not wrap around to id 5 on the way to the chip's int32
        path = self.save("ids_huge.npy", ids)
        self.expect_error(["run", bert.model, *bert.input_args(input_ids=path)], r"4294967301")


class DynamicBatchResnet(unittest.TestCase):
    """resnet18 exported with --dynamic-batch (dim 0 named 'batch'): an error without a shape, and right with
    --shape, at batch 2."""

    def test_dynamic_batch_resnet18(self):
        import torchvision  # noqa: F401  (scripts/setup.sh installs python3-torchvision: missing, this fails)
        with tempfile.TemporaryDirectory() as tmp:
            d = os.path.join(tmp, "r18dyn")
            subprocess.run([sys.executable, os.path.join(WORKLOADS_SRC, "resnet.py"), "--arch", "resnet18",
                            "--size", "32", "--batch", "2", "--dynamic-batch", "--seed", "0", "--out", d],
                           check=True, capture_output=True, timeout=RUN_TIMEOUT)
            model, x = os.path.join(d, "resnet18.onnx"), os.path.join(d, "input.npy")
            p = tpusim("run", model, "--input", "input=" + x, check=False, timeout=ERROR_TIMEOUT)
            err = p.stderr.strip()
            print(f"\n  {err}")
            self.assertEqual(p.returncode, 1, p.stderr)
            self.assertEqual(len(err.splitlines()), 1, err)
            self.assertRegex(err, r"(?=.*'input')(?=.*'batch')")
            out = os.path.join(tmp, "out")
            tpusim("run", model, "--input", "input=" + x, "--shape", "input=2,3,32,32", "--output-dir", out)
            logits, ref = np.load(os.path.join(out, "logits.npy")), np.load(os.path.join(d, "logits_ref.npy"))
            self.assertEqual(logits.shape, (2, 1000))
            cos, rel = compare(logits, ref)
            print(f"  resnet18 --dynamic-batch, --shape input=2,3,32,32: cosine {cos:.6f}, rel L2 {rel:.3e}")
            self.assertGreaterEqual(cos, BF16_MIN_COSINE)
            self.assertLessEqual(rel, BF16_MAX_REL_L2)


if __name__ == "__main__":
    unittest.main()
