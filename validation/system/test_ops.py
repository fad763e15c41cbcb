"""Operator-level conformance sweep of the ONNX compiler against PyTorch, through the `tpusim` program.

Each case is a tiny torch.nn.Module (fixed seed) exported with torch.onnx.export (opset 13, some at 17) into a
temporary folder, its inputs saved as .npy, run with `tpusim run model.onnx --input NAME=FILE --output-dir OUT`, and
compared in float64 with PyTorch's fp32 output.

What the chip does to precision (measured here, and what the bounds follow): graph inputs and outputs are f32;
matmuls and convolutions take bf16 operands and accumulate in f32; the row-wise vector kernel (elementwise chains,
softmax, layer norm, last-axis reductions) computes in f32; values passed between kernels are stored in bf16; the
copy kernel and dma.gather move words as they are; pooling and spatial means run NHWC on bf16 values.
Bounds, the tightest that hold:
  - anything with a matmul, a convolution, pooling or a bf16 intermediate: cosine similarity >= 0.999 and relative
    L2 error <= 2e-2 (measured: cosine >= 0.99998, rel L2 <= 6e-3);
  - data movement of an f32 graph input (Reshape, Flatten, Squeeze, Unsqueeze, Transpose, Slice, Split, Concat,
    Gather with constant indices, Expand, Pad, embeddings): bit-identical to PyTorch (exact="f32"); of a computed
    value: bit-identical to PyTorch's output rounded to bf16 (exact="bf16"); MaxPool: PyTorch's output in bf16;
  - one IEEE f32 operation (+ - * min max neg abs relu clamp leaky_relu reciprocal, masked_fill, where): bit-identical;
  - other f32 work on the vector unit (division, exp, tanh, erf, sigmoid, GELU, sqrt, softmax, layer norm, sums and
    means): relative L2 <= F32_REL_L2 = 2e-6 (worst measured 4.8e-7);
  - `--precision int8` (calibrated on the same input): cosine >= 0.99.
Unsupported operators must give a non-zero exit and one line on stderr naming the operator and the node.

Each case prints one line `CASE <name> cos=... relL2=... maxabs=...` (ctest -V shows them).

Run by ctest (validation/system/CMakeLists.txt; one ctest test per class) with Debian's python3 (torch, onnx):
    TPUSIM=build/tools/tpusim /usr/bin/python3 -m unittest -v test_ops              # everything
    TPUSIM=build/tools/tpusim /usr/bin/python3 -m unittest -v test_ops.Conv         # one class
"""
import copy
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import unittest
import warnings

import numpy as np

TPUSIM = os.environ.get("TPUSIM", "build/tools/tpusim")
METRICS_FILE = os.environ.get("TPUSIM_OPS_METRICS")  # optional: append one line per case

MIN_COSINE, MAX_REL_L2 = 0.999, 2e-2
F32_REL_L2 = 2e-6          # f32 work on the vector unit (worst measured: 4.8e-7, softmax over 300)
INT8_MIN_COSINE = 0.99
# int8 against PyTorch's float output, calibrated on other data (run_model): worst measured 5.1e-2 (the MLP with
# GELU), conv net 1.6e-2, attention block 4.4e-3. Any output scaled by more than ~8% fails.
INT8_MAX_REL_L2 = 0.08

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import onnx
    import onnx.numpy_helper
except ImportError as e:  # pragma: no cover - the build only registers these tests when torch is there
    torch = None
    _IMPORT_ERROR = str(e)

warnings.filterwarnings("ignore")


def bf16_round(x):
    """float32 -> bf16 -> float32, round to nearest even (numpy has no bf16)."""
    b = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    b = (b + 0x7FFF + ((b >> 16) & 1)) >> 16 << 16
    return b.astype(np.uint32).view(np.float32)


def metrics(got, ref):
    g = np.asarray(got, np.float64).ravel()
    r = np.asarray(ref, np.float64).ravel()
    ng, nr = np.linalg.norm(g), np.linalg.norm(r)
    if nr == 0:
        return (1.0 if ng == 0 else 0.0), float(ng), float(np.abs(g - r).max(initial=0))
    cos = float(g @ r / (ng * nr)) if ng > 0 else 0.0
    return cos, float(np.linalg.norm(g - r) / nr), float(np.abs(g - r).max(initial=0))


def record(line):
    """One case's line: on stderr, and appended to TPUSIM_OPS_METRICS when set."""
    print(line, file=sys.stderr)
    if METRICS_FILE:
        with open(METRICS_FILE, "a") as f:
            f.write(line + "\n")


def tpusim(*args, check=True, timeout=300):
    env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
    p = subprocess.run([TPUSIM, *map(str, args)], capture_output=True, text=True, env=env, timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"tpusim {' '.join(map(str, args))} failed ({p.returncode}):\n{p.stderr.strip()}")
    return p


class Fn(nn.Module if torch else object):
    """A module around a function of its inputs (and of its own parameters/buffers, passed as `self`)."""

    def __init__(self, fn, **tensors):
        super().__init__()
        self.fn = fn
        for name, t in tensors.items():
            if isinstance(t, nn.Parameter):
                self.register_parameter(name, t)
            else:
                self.register_buffer(name, t)

    def forward(self, *xs):
        return self.fn(self, *xs)


def fn(f, **tensors):
    return Fn(f, **tensors)


def randomize_bn(bn):
    """Non-trivial running statistics and affine parameters for an eval-mode BatchNorm."""
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 2.0)
        if bn.weight is not None:
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.uniform_(-0.5, 0.5)
    return bn


class OpCase(unittest.TestCase):
    def setUp(self):
        if torch is None:  # scripts/setup.sh installs python3-torch and python3-onnx: missing, this fails
            self.fail(f"torch/onnx not importable (run scripts/setup.sh): {_IMPORT_ERROR}")
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.n = 0
        torch.manual_seed(0)

    def tearDown(self):
        self._tmp.cleanup()

    # -- export and run -------------------------------------------------------------------------------------------

    def compiled(self, config="v5e", *extra):
        """The last case's model compiled on `config` (with the options `extra`): (kernel names, node names, notes)
        from its JSON report."""
        d = os.path.join(self.dir, f"case{self.n}")
        r = os.path.join(d, f"report-{config}.json")
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "--report-json", r, *extra)
        with open(r) as f:
            regions = json.load(f)["regions"]
        pick = lambda kind: [x["name"] for x in regions if x["kind"] == kind]
        return pick("kernel"), pick("node"), sorted(set(pick("note")))

    def cycles_of_last(self, config="v5e"):
        """The last case's model's cycles on `config` (its compile report)."""
        d = os.path.join(self.dir, f"case{self.n}")
        r = os.path.join(d, f"report-{config}-cycles.json")
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "--report-json", r)
        with open(r) as f:
            return json.load(f)["cycles"]

    def at_bandwidths(self, config, bandwidths, node):
        """The last case's model compiled on `config` at each HBM bandwidth (GB/s) of `bandwidths`: {bandwidth:
        (the run's cycles, the kernels of the one node whose name starts with `node`, their notes)}."""
        d = os.path.join(self.dir, f"case{self.n}")
        out = {}
        for bw in bandwidths:
            r = os.path.join(d, f"report-{config}-{bw}.json")
            tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "--set", f"hbm.bandwidth_gbs={bw}",
                   "--report-json", r)
            with open(r) as f:
                report = json.load(f)
            regions = report["regions"]
            at = [i for i, x in enumerate(regions) if x["kind"] == "node" and x["name"].startswith(node)]
            self.assertEqual(len(at), 1, [x["name"] for x in regions if x["kind"] == "node"])
            kernels = [i for i, x in enumerate(regions) if x["kind"] == "kernel" and x["parent"] == at[0]]
            out[bw] = (report["cycles"], [regions[i]["name"] for i in kernels],
                       [x["name"] for x in regions if x["kind"] == "note" and x["parent"] in kernels])
        return out

    def same_bits_as_fenced_at(self, config, bandwidth):
        """same_bits_as_fenced_in_fewer_cycles for the last case's model on `config` at HBM `bandwidth` GB/s."""
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x, config, "--set",
                                                 f"hbm.bandwidth_gbs={bandwidth}")

    def same_bits_as_fenced_in_fewer_cycles(self, model, x, config="v5e", *options, slack=0.0):
        """Runs `model` on input file x overlapped and with --no-kernel-overlap (both with `options`): the same
        outputs, fewer cycles (with `slack`, at most that fraction more: where the overlap's gain is not the
        point)."""
        d = os.path.dirname(model)
        runs = {}
        for mode, extra in (("overlap", []), ("fence", ["--no-kernel-overlap"])):
            out, stats = os.path.join(d, mode), os.path.join(d, mode + ".json")
            tpusim("run", model, "--input", f"{os.path.basename(x)[:-4]}={x}", "--config", config, *extra, *options,
                   "--output-dir", out, "--stats", stats)
            with open(stats) as f:
                runs[mode] = json.load(f)["cycles"]
            runs[mode + " out"] = [np.load(os.path.join(out, o)) for o in sorted(os.listdir(out))]
        for a, b in zip(runs["overlap out"], runs["fence out"]):
            np.testing.assert_array_equal(a, b)
        if slack:
            self.assertLessEqual(runs["overlap"], (1 + slack) * runs["fence"])
        else:
            self.assertLess(runs["overlap"], runs["fence"])

    def export(self, module, inputs, opset=13):
        """Exports `module` (eval) at `opset`; returns (case folder, model path, input names, output names, refs)."""
        self.n += 1
        d = os.path.join(self.dir, f"case{self.n}")
        os.makedirs(d)
        module = module.eval()
        names = [f"x{i}" for i in range(len(inputs))]
        with torch.no_grad():
            refs = module(*inputs)
        refs = list(refs) if isinstance(refs, (tuple, list)) else [refs]
        outs = ["y"] if len(refs) == 1 else [f"y{i}" for i in range(len(refs))]
        path = os.path.join(d, "model.onnx")
        with torch.no_grad():
            torch.onnx.export(module, tuple(inputs), path, opset_version=opset, input_names=names,
                              output_names=outs)
        return d, path, names, outs, [r.numpy() for r in refs]

    def run_model(self, module, inputs, opset=13, precision=None, config=None):
        d, path, names, outs, refs = self.export(module, inputs, opset)
        args = ["run", path, "--output-dir", os.path.join(d, "out")] + (["--config", config] if config else [])
        for name, x in zip(names, inputs):
            f = os.path.join(d, name + ".npy")
            np.save(f, x.numpy())
            args += ["--input", f"{name}={f}"]
        if precision:
            args += ["--precision", precision]
        if precision == "int8":
            # Calibrated on other data than the input it is checked on: as many standard normal draws of the same
            # shapes, from a generator of their own.
            g = torch.Generator().manual_seed(1234)
            for name, x in zip(names, inputs):
                f = os.path.join(d, name + ".calib.npy")
                np.save(f, torch.randn(tuple(x.shape), generator=g).to(x.dtype).numpy())
                args += ["--calibrate", f"{name}={f}"]
        tpusim(*args)
        got = [np.load(os.path.join(d, "out", o + ".npy")) for o in outs]
        return got, refs

    def check(self, module, *inputs, name="", opset=13, exact=None, rel=MAX_REL_L2, cos=MIN_COSINE,
              precision=None, ref64=False, config=None):
        """Runs the case and asserts the bounds on every output (on the chip `config`, default v4-like).

        exact: None (cosine/rel L2 bounds), "f32" (bit-identical to PyTorch), "bf16" (bit-identical to PyTorch's
        output rounded to bf16). ref64: the reference is PyTorch in float64 (module and inputs in double) instead
        of its float32 output."""
        got, refs = self.run_model(module, list(inputs), opset, precision, config)
        if ref64:
            with torch.no_grad():
                r = copy.deepcopy(module).double()(*[x.double() for x in inputs])
            refs = [t.numpy() for t in (r if isinstance(r, (tuple, list)) else [r])]
        label = f"{type(self).__name__}.{self._testMethodName}" + (f"[{name}]" if name else "") + \
            (f"@op{opset}" if opset != 13 else "") + (f"/{precision}" if precision else "")
        for i, (g, r) in enumerate(zip(got, refs)):
            c, e, m = metrics(g, r)
            record(f"CASE {label}{'' if len(got) == 1 else f'.y{i}'} cos={c:.6f} relL2={e:.3e} maxabs={m:.3e}")
            self.assertEqual(tuple(g.shape), tuple(r.shape), f"{label}: output {i} shape")
            if r.dtype.kind in "iub":  # integers and booleans: exactly (int32 on the chip)
                self.assertEqual(g.dtype, np.int32, f"{label}: integer outputs are int32")
                np.testing.assert_array_equal(g, r, err_msg=label)
                continue
            if exact == "f32":
                np.testing.assert_array_equal(g, r, err_msg=f"{label}: not bit-identical to PyTorch's f32")
            elif exact == "bf16":
                np.testing.assert_array_equal(g, bf16_round(r), err_msg=f"{label}: not PyTorch's output in bf16")
            else:
                self.assertGreaterEqual(c, cos, f"{label}: cosine {c:.6f} (rel L2 {e:.3e})")
                self.assertLessEqual(e, rel, f"{label}: rel L2 {e:.3e} (cosine {c:.6f})")
        return got, refs

    def check_onnx(self, nodes, inputs, refs, inits=(), name="", exact=False, rel=F32_REL_L2, opset=13):
        """A model made with onnx.helper (`nodes`; inputs {name: array}, float or integer; initializers), run, its
        outputs y0, y1, ... compared with `refs` (numpy, in order): integer and boolean outputs exactly (int32 on
        the chip), floats bit-identical with `exact`, else within relative L2 `rel`."""
        types = {"float32": onnx.TensorProto.FLOAT, "int64": onnx.TensorProto.INT64, "int32": onnx.TensorProto.INT32,
                 "bool": onnx.TensorProto.BOOL}

        def info(k, a):
            return onnx.helper.make_tensor_value_info(k, types[str(np.asarray(a).dtype)], list(np.shape(a)))
        outs = [f"y{i}" for i in range(len(refs))]
        graph = onnx.helper.make_graph(nodes, "g", [info(k, v) for k, v in inputs.items()],
                                       [info(o, r) for o, r in zip(outs, refs)], list(inits))
        self.n += 1
        d = os.path.join(self.dir, f"onnx{self.n}")
        os.makedirs(d)
        path = os.path.join(d, "model.onnx")
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)]), path)
        args = ["run", path, "--output-dir", os.path.join(d, "out")]
        for k, v in inputs.items():
            f = os.path.join(d, k + ".npy")
            np.save(f, v)
            args += ["--input", f"{k}={f}"]
        tpusim(*args)
        label = f"{type(self).__name__}.{self._testMethodName}" + (f"[{name}]" if name else "")
        for o, r in zip(outs, refs):
            g = np.load(os.path.join(d, "out", o + ".npy"))
            c, e, m = metrics(g, r)
            record(f"CASE {label}{'' if len(refs) == 1 else '.' + o} cos={c:.6f} relL2={e:.3e} maxabs={m:.3e}")
            self.assertEqual(tuple(g.shape), tuple(np.shape(r)), f"{label}: output {o} shape")
            if np.asarray(r).dtype.kind in "iub":
                self.assertEqual(g.dtype, np.int32, f"{label}: integer outputs are int32")
                np.testing.assert_array_equal(g, r, err_msg=label)
            elif exact:
                np.testing.assert_array_equal(g, r, err_msg=label)
            else:
                self.assertLessEqual(e, rel, f"{label}: rel L2 {e:.3e}")

    def expect_error(self, module, *inputs, op, opset=13):
        """tpusim must fail with one line on stderr naming the operator `op` and the node that has it."""
        d, path, names, outs, refs = self.export(module, list(inputs), opset)
        nodes = [n.name for n in onnx.load(path).graph.node if n.op_type == op]
        self.assertTrue(nodes, f"the exported model has no {op} node")
        args = ["run", path, "--output-dir", os.path.join(d, "out")]
        for name, x in zip(names, inputs):
            f = os.path.join(d, name + ".npy")
            np.save(f, x.numpy())
            args += ["--input", f"{name}={f}"]
        p = tpusim(*args, check=False, timeout=60)
        err = p.stderr.strip()
        print(f"ERROR-CASE {type(self).__name__}.{self._testMethodName}: rc={p.returncode} {err}", file=sys.stderr)
        self.assertNotEqual(p.returncode, 0, "an unsupported model must fail")
        self.assertGreater(p.returncode, 0, f"killed by a signal: {err}")
        self.assertEqual(len(err.splitlines()), 1, f"expected one line on stderr, got:\n{err}")
        self.assertIn(op, err)
        self.assertTrue(any(n in err for n in nodes), f"node name ({nodes}) missing from: {err}")
        for crash in ("terminate called", "Segmentation", "Aborted", "Traceback"):
            self.assertNotIn(crash, err)
        return err


def randn(*shape):
    return torch.randn(shape)


# ---------------------------------------------------------------------------------------------------------------------


class Conv(OpCase):
    """Conv2d over kernel sizes, strides, paddings, dilations, groups, bias, batch and odd spatial sizes."""

    # (cin, cout, kernel, stride, padding, dilation, groups, bias, batch, H, W)
    CASES = [
        (3, 5, 1, 1, 0, 1, 1, True, 1, 7, 9),
        (3, 5, 3, 1, 1, 1, 1, True, 1, 7, 9),
        (3, 6, 3, 2, 1, 1, 1, False, 1, 7, 9),
        (5, 7, 3, 3, 0, 1, 1, True, 3, 11, 13),
        (4, 6, 5, 1, 2, 1, 1, True, 1, 9, 7),
        (3, 10, 5, 2, 2, 1, 1, False, 3, 15, 17),
        (3, 8, 7, 2, 3, 1, 1, True, 1, 19, 21),   # a ResNet stem in small
        (6, 4, 7, 3, 0, 1, 1, True, 1, 16, 15),
        (5, 9, 3, 1, 2, 2, 1, True, 1, 9, 11),     # dilation 2
        (4, 6, 3, 2, 1, 2, 1, False, 3, 13, 9),    # dilation 2, stride 2
        (6, 10, 3, 1, 1, 1, 2, True, 1, 7, 9),     # groups 2
        (4, 6, 1, 1, 0, 1, 2, False, 3, 5, 7),     # grouped pointwise
        (12, 12, 3, 1, 1, 1, 3, True, 1, 8, 8),    # groups 3
        (7, 7, 3, 1, 1, 1, 7, True, 1, 7, 9),      # depthwise
        (9, 9, 3, 2, 1, 1, 9, False, 3, 11, 9),    # depthwise stride 2
        (6, 6, 5, 1, 2, 1, 6, True, 1, 9, 9),      # depthwise 5x5
        (5, 10, 3, 1, 1, 1, 5, True, 1, 7, 7),     # depthwise with multiplier 2
        (8, 8, 3, 1, 2, 2, 8, True, 1, 9, 9),      # dilated depthwise
        (3, 4, 3, 1, 0, 1, 1, True, 1, 3, 3),      # output 1x1
        (20, 33, 1, 1, 0, 1, 1, True, 1, 7, 9),    # wider than a vector row
        (3, 5, 2, 2, 0, 1, 1, True, 1, 8, 8),      # even kernel (patchify)
    ]

    def test_sweep(self):
        for (cin, cout, k, s, p, d, g, bias, b, h, w) in self.CASES:
            name = f"c{cin}->{cout} k{k} s{s} p{p} d{d} g{g} bias{int(bias)} {b}x{h}x{w}"
            with self.subTest(name):
                torch.manual_seed(1)
                m = nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
                self.check(m, randn(b, cin, h, w), name=name)

    def test_grouped_convolutions_pack_their_groups(self):
        # Grouped 3 x 3 convolutions (docs/compiler.md, "Grouped convolutions") on v5e: P consecutive groups as one
        # convolution of block-diagonal weights, P chosen by group_pack's estimate. 32 groups of 4 channels on 28 x
        # 28: all of them as one convolution (one GEMM); 32 groups of 32 channels on 7 x 7: 4 at a time (8 GEMMs);
        # 2 groups of 256 channels on 7 x 7: one GEMM per group. Each against torch; the first also against the
        # same convolution written as 32 convolutions and a Concat (one GEMM each, as every grouped convolution was
        # before): at least twice as fast.
        cases = [(128, 32, 28, 1, "32 groups as one convolution of block-diagonal weights"),
                 (1024, 32, 7, 8, "4 groups at a time, block-diagonal weights"),
                 (512, 2, 7, 2, None)]
        for c, g, hw, gemms, note in cases:
            with self.subTest(channels=c, groups=g):
                torch.manual_seed(12)
                m = nn.Conv2d(c, c, 3, padding=1, groups=g)
                x = randn(1, c, hw, hw)
                self.check(m, x, config="v5e", name=f"c{c} g{g}")
                kernels, _, notes = self.compiled("v5e")
                self.assertEqual(len([k for k in kernels if k.startswith("gemm")]), gemms, kernels)
                if note:
                    self.assertTrue([n for n in notes if n.startswith(note)], notes)
                else:
                    self.assertFalse([n for n in notes if "block-diagonal" in n], notes)
                if g != 32 or c != 128:
                    continue
                grouped = self.cycles_of_last("v5e")
                # forced (tpusim compile --group-pack P, for measuring the estimate): a GEMM per group, or 8 at a time
                for pack, count in ((1, 32), (8, 4)):
                    kernels, _, _ = self.compiled("v5e", "--group-pack", str(pack))
                    self.assertEqual(len([k for k in kernels if k.startswith("gemm")]), count, (pack, kernels))

                class Split(nn.Module):  # the same convolution, one per group
                    def __init__(self):
                        super().__init__()
                        self.convs = nn.ModuleList()
                        for i in range(g):
                            conv = nn.Conv2d(c // g, c // g, 3, padding=1)
                            conv.weight.data = m.weight.data[i * c // g:(i + 1) * c // g].clone()
                            conv.bias.data = m.bias.data[i * c // g:(i + 1) * c // g].clone()
                            self.convs.append(conv)

                    def forward(self, x):
                        return torch.cat([conv(x[:, i * c // g:(i + 1) * c // g]) for i, conv in enumerate(self.convs)], 1)
                self.check(Split(), x, config="v5e", name=f"c{c} g{g} as {g} convolutions")
                split = self.cycles_of_last("v5e")
                self.assertLess(2 * grouped, split)

    def test_depthwise_taps_read_in_f32_where_intermediates_stay_in_vmem(self):
        # A depthwise convolution of a bf16 input on a chip whose VMEM keeps the intermediates (v5e): the input is
        # cast to f32 once (a cast.s in its node) and the row-wise kernel's taps read that, where it cast each tap's
        # tile (docs/compiler.md, "Depthwise taps in f32"); the same bits as with the intermediates in HBM
        # (--intermediates-in-hbm, where each tap is still cast), and its row-wise kernel issues 25 vector
        # instructions fewer a tile (a cast a tap; 60 against 85 in one tile when written) and keeps the vector unit
        # busy fewer cycles. Against torch.
        torch.manual_seed(14)
        m = nn.Sequential(nn.Conv2d(32, 96, 1), nn.ReLU(), nn.Conv2d(96, 96, 5, padding=2, groups=96), nn.ReLU())
        self.check(m, randn(1, 32, 28, 28), config="v5e")
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        runs = {}
        for mode, extra in (("vmem", []), ("hbm", ["--intermediates-in-hbm"])):
            r = os.path.join(d, f"report-{mode}.json")
            tpusim("compile", os.path.join(d, "model.onnx"), "--config", "v5e", "--report-json", r, *extra)
            with open(r) as f:
                regions = json.load(f)["regions"]
            node = next(i for i, n in enumerate(regions) if n["kind"] == "node" and n["name"].startswith("/2/Conv"))
            runs[mode] = {k["name"]: k["units"]["vpu"] for k in regions if k["kind"] == "kernel" and k["parent"] == node}
            out = os.path.join(d, mode)
            tpusim("run", os.path.join(d, "model.onnx"), "--input", f"{os.path.basename(x)[:-4]}={x}", "--config",
                   "v5e", "--output-dir", out, *extra)
            runs[mode + " out"] = [np.load(os.path.join(out, o)) for o in sorted(os.listdir(out))]
        self.assertIn("cast.s", runs["vmem"])
        self.assertNotIn("cast.s", runs["hbm"])
        fewer = runs["hbm"]["rowwise"]["instructions"] - runs["vmem"]["rowwise"]["instructions"]
        self.assertTrue(fewer > 0 and fewer % 25 == 0, fewer)
        self.assertLess(runs["vmem"]["rowwise"]["cycles"]["busy"], runs["hbm"]["rowwise"]["cycles"]["busy"])
        for a, b in zip(runs["vmem out"], runs["hbm out"]):
            np.testing.assert_array_equal(a, b)

    def test_depthwise_taps_in_chunks_where_one_kernel_does_not_fit(self):
        # A depthwise convolution whose row-wise kernel (each tap and its weights an input) does not fit a core's
        # VMEM, as EfficientNet-B0's 5 x 5 convolutions of 1152 channels on h200-like (228 KB of shared memory):
        # its taps in chunks, each chunk's kernel adding its products to the f32 partial sums of the one before
        # (ops_conv.cpp, depthwise_chunk). Against torch, stride 1 and 2; the whole convolution one kernel on v5e.
        for stride in (1, 2):
            with self.subTest(stride=stride):
                torch.manual_seed(6)
                m = nn.Sequential(nn.Conv2d(1152, 1152, 5, stride=stride, padding=2, groups=1152), nn.ReLU())
                self.check(m, randn(1, 1152, 9, 9), name=f"s{stride}", config="h200-like")
                kernels, _, _ = self.compiled("h200-like")
                self.assertGreater(kernels.count("rowwise"), 1, kernels)
                kernels, _, _ = self.compiled("v5e")
                self.assertEqual(kernels.count("rowwise"), 1, kernels)

    def test_taps_read_in_place(self):
        # Channel rows of at least 64 bytes: the gemm reads the taps from the padded input in place (ops_conv.cpp,
        # implicit_im2col): strides 1 and 2, dilation 2, batches whose rows span images, 5x5 and 1x3 kernels,
        # channels that are not a multiple of the matrix unit's 128 rows (48 x 9 = 432) or exceed them (160), in
        # bf16 and int8, on one matrix unit (v4-like) and on the whole chip (v4: gemm_chip over 2 cores x 4 units).
        cases = [  # (cin, cout, kernel, stride, padding, dilation, batch, H, W)
            (32, 24, 3, 1, 1, 1, 2, 9, 7),
            (48, 40, 3, 2, 1, 1, 3, 11, 9),
            (64, 16, 3, 1, 2, 2, 1, 10, 8),
            (40, 72, 5, 2, 2, 1, 1, 13, 12),
            (160, 20, 3, 1, 1, 1, 1, 6, 5),
            (64, 32, (1, 3), 1, (0, 1), 1, 2, 5, 9),
            (64, 48, 1, 2, 0, 1, 2, 9, 7),            # a downsample: one of the four phases is read (and made)
        ]
        self.on_v4_chips(cases, 2)

    def on_v4_chips(self, cases, seed, after=None):
        """Each case (cin, cout, kernel, stride, padding, dilation, batch, H, W, ...) on v4-like and v4 against torch,
        bf16 and int8; after(case, name, config) once its bf16 model is checked (the last case's, for compiled())."""
        for config in ("v4-like", "v4"):
            for case in cases:
                (cin, cout, k, s, p, d, b, h, w) = case[:9]
                name = f"c{cin}->{cout} k{k} s{s} p{p} d{d} {b}x{h}x{w} {config}"
                torch.manual_seed(seed)
                m = nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d)
                x = randn(b, cin, h, w)
                with self.subTest(name):
                    self.check(m, x, name=name, config=config)
                    if after:
                        after(case, name, config)
                with self.subTest(name + " int8"):
                    self.check(m, x, name=name, config=config, precision="int8", cos=INT8_MIN_COSINE,
                               rel=INT8_MAX_REL_L2)

    def test_padded_inputs_filled_once_and_written_by_their_producers(self):
        # Two bottleneck blocks of one shape (docs/compiler.md, "Padded inputs filled once, written by their
        # producers"): their 3 x 3 convolutions pad inputs of one layout, so one buffer holds both, its borders
        # filled by the first block's copy (the only copy that reads the zeros' pattern from HBM); on v5e (one core)
        # the second's copy moves only the input in; on v4 (two cores) each 1 x 1 convolution before a 3 x 3 one
        # writes straight into the padded buffer (a row map) and each 3 x 3 one stores only its outputs, no copy
        # at all in the second block, whose 3 x 3 node then takes fewer cycles than the first's. Against torch, and
        # the same bits on both chips.
        torch.manual_seed(8)
        block = lambda: [nn.Conv2d(128, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                         nn.Conv2d(64, 128, 1), nn.ReLU()]
        m = nn.Sequential(*block(), *block())
        x = randn(1, 128, 28, 28)
        outs = {}
        for config in ("v5e", "v4"):
            outs[config], _ = self.check(m, x, config=config)
            d = os.path.join(self.dir, f"case{self.n}")
            r = os.path.join(d, f"report-{config}.json")
            tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "--report-json", r)
            with open(r) as f:
                regions = json.load(f)["regions"]
            node = {x["name"].split("+")[0]: i for i, x in enumerate(regions) if x["kind"] == "node"}
            kernels = {k: [x for x in regions if x["kind"] == "kernel" and x["parent"] == i] for k, i in node.items()}
            notes = [x["name"] for x in regions if x["kind"] == "note"]
            first, second = kernels["/2/Conv"], kernels["/8/Conv"]
            if config == "v5e":
                self.assertEqual([k["name"] for k in first], ["copy", "gemm_chip", "copy"])
                self.assertEqual([k["name"] for k in second], ["copy", "gemm_chip", "copy"])
                self.assertGreater(first[0]["bytes"], 0)   # the borders' zeros, from HBM
                self.assertEqual(second[0]["bytes"], 0)   # the input alone, within VMEM
            else:
                self.assertEqual([k["name"] for k in first], ["copy", "gemm_chip"])
                self.assertEqual([k["name"] for k in second], ["gemm_chip"])
                for producer, window in (("/0/Conv", "/2/Conv"), ("/6/Conv", "/8/Conv")):
                    self.assertTrue([n for n in notes if f"writes the padded input of {window}" in n], notes)
                cycles = {k: regions[i]["cycles"] for k, i in node.items()}
                self.assertLess(cycles["/8/Conv"], cycles["/2/Conv"])
        np.testing.assert_array_equal(outs["v5e"][0], outs["v4"][0])

    def test_fills_from_on_chip_patterns_and_drops_into_the_next_window(self):
        # On v5e (docs/compiler.md, "Padding values on chip, a drop into the next window"): the first padded
        # window's copy reads its zeros from HBM and loads the zeros' and the max pool's -inf rows into VMEM beside
        # them, so that the later windows' copies read nothing from HBM; and the copies that drop a convolution's
        # (or the pool's) virtual columns go, each folded into the copy of the next window's padded input. A
        # 3 x 3 convolution (16 channels: its taps copied), a max pool of stride 2 and a 3 x 3 convolution, against
        # torch.
        torch.manual_seed(10)
        m = nn.Sequential(nn.Conv2d(16, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          nn.Conv2d(64, 128, 3, padding=1))
        self.check(m, randn(1, 16, 28, 28), config="v5e")
        d = os.path.join(self.dir, f"case{self.n}")
        r = os.path.join(d, "report.json")
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", "v5e", "--report-json", r)
        with open(r) as f:
            regions = json.load(f)["regions"]
        kernels = {x["name"].split("+")[0]: [k for k in regions if k["kind"] == "kernel" and k["parent"] == i]
                   for i, x in enumerate(regions) if x["kind"] == "node"}
        self.assertEqual([k["name"] for k in kernels["/0/Conv"]], ["copy", "gemm_chip"])
        self.assertEqual([k["name"] for k in kernels["/2/MaxPool"]], ["copy", "rowwise"])
        self.assertGreater(kernels["/0/Conv"][0]["bytes"], 0)  # its zeros, and both rows loaded to VMEM
        self.assertEqual(kernels["/2/MaxPool"][0]["bytes"], 0)
        self.assertEqual(kernels["/3/Conv"][0]["bytes"], 0)

    def test_two_windows_of_one_layout_after_both_producers(self):
        # Two 3 x 3 convolutions whose inputs, made by two 1 x 1 convolutions one after the other, pad to one layout
        # and so share a buffer: on v4 the first producer writes into it, the second cannot (the first window
        # reads the buffer after it), so the second input is copied in after the first window (docs/compiler.md,
        # "Padded inputs filled once, written by their producers"). Against torch; the same bits as on v5e.
        torch.manual_seed(9)

        class TwoBranches(nn.Module):
            def __init__(self):
                super().__init__()
                self.a, self.b = nn.Conv2d(96, 64, 1), nn.Conv2d(96, 64, 1)
                self.c, self.d = nn.Conv2d(64, 64, 3, padding=1), nn.Conv2d(64, 64, 3, padding=1)

            def forward(self, x):
                a, b = torch.relu(self.a(x)), torch.relu(self.b(x))
                return self.c(a) + self.d(b)
        m, x = TwoBranches(), randn(1, 96, 20, 20)
        outs = {config: self.check(m, x, config=config)[0] for config in ("v5e", "v4")}
        _, _, notes = self.compiled("v4")
        self.assertEqual(len([n for n in notes if "writes the padded input of" in n]), 1, notes)
        np.testing.assert_array_equal(outs["v4"][0], outs["v5e"][0])

    def test_narrow_outputs_side_by_side(self):
        # Fewer output channels than the matrix unit's columns (128 on v4-like and v4): the gemm computes P outputs
        # of an image row per row, as P x cout channels of a kernel (P - 1) x stride columns wider (ops_conv.cpp,
        # pack_factor), where its matrix work is at most 0.8 of the plain convolution's: 4 side by side for 64 -> 32
        # at stride 1 (with dilation 2 too: a 3x8 kernel, taps 2 apart), 2 for 64 -> 64 and at stride 2; 2 where
        # the row's 30 outputs do not split into 4; none where the rows are too few to cover the wider kernel's
        # weight loads; 4 for a 1x1 convolution of 32 -> 24 (the GEMM on the input as it lies, [rows / 4, 4 x 32],
        # its weights block-diagonal), and a 1x2 kernel of stride 2, whose input is [rows, 2 x 16] as it lies.
        # Narrow channel rows, whose taps are copied into a matrix (ops_conv.cpp, window_tap_rows), where the copied
        # matrix is no larger: a ResNet stem (3 channels, 7x7 of stride 2: a 7x9 kernel of stride 2x4, 128
        # channels), 8 -> 32 at stride 1 (2: 4 side by side would need two folds of K). Against torch, bf16 and
        # int8, on one matrix unit and on the whole chip; the compile report notes it on the GEMM.
        cases = [  # (cin, cout, kernel, stride, padding, dilation, batch, H, W, P)
            (64, 32, 3, 1, 1, 1, 2, 32, 32, 4),
            (64, 64, 3, 1, 1, 1, 2, 32, 32, 2),
            (64, 32, 3, 2, 1, 1, 2, 64, 64, 2),
            (64, 32, 3, 1, 2, 2, 2, 32, 32, 4),
            (64, 32, 3, 1, 1, 1, 2, 30, 30, 2),
            (64, 32, 3, 1, 1, 1, 1, 8, 8, 1),
            (32, 24, 1, 1, 0, 1, 2, 32, 32, 4),        # 1x1: a GEMM on the input as it lies, 4 pixels a row
            (16, 200, (1, 2), (1, 2), 0, 1, 2, 8, 16, 1),  # 1x2 of stride 2: the input as [rows, 2 x 16]
            (3, 64, 7, 2, 3, 1, 1, 64, 64, 2),         # a stem: taps copied
            (8, 32, 3, 1, 1, 1, 2, 32, 32, 2),         # taps copied
        ]

        def noted(case, name, config):
            (_, cout, k, s, _, d, _, _, _, pack) = case
            kernels, _, notes = self.compiled(config)
            if k == (1, 2):  # read as it lies: the copies of the input and the output into and out of NHWC only
                self.assertEqual(kernels.count("copy"), 2, (name, kernels))
            side = [n for n in notes if "outputs of a row side by side" in n]
            if pack == 1:
                self.assertEqual(side, [], name)
                return
            self.assertEqual(len(side), 1, (name, notes))
            self.assertTrue(side[0].startswith(f"{pack} outputs of a row side by side: a {k}x"
                                               f"{(pack - 1) * s + (k - 1) * d + 1} kernel of stride {s}x{pack * s}, "
                                               f"{pack * cout} output channels"), (name, side))
        self.on_v4_chips(cases, 3, noted)

    def test_padding_same(self):
        # torch 1.13 cannot export padding="same" (aten::_convolution_mode), so 'same' is spelled out: symmetric
        # pads d*(k-1)/2 for odd kernels, an explicit F.pad (1 before, 2 after) for k=4 - a Pad node before the Conv.
        for (k, d) in [(3, 1), (5, 1), (3, 2), (7, 1)]:
            with self.subTest(k=k, d=d):
                ref = nn.Conv2d(5, 6, k, padding="same", dilation=d)
                m = nn.Conv2d(5, 6, k, padding=d * (k - 1) // 2, dilation=d)
                m.load_state_dict(ref.state_dict())
                x = randn(1, 5, 7, 9)
                torch.testing.assert_close(m(x), ref(x))
                self.check(m, x, name=f"same k{k} d{d}")
        ref = nn.Conv2d(5, 6, 4, padding="same")
        conv = nn.Conv2d(5, 6, 4)
        conv.load_state_dict(ref.state_dict())
        m = fn(lambda s, x: s.conv(F.pad(x, (1, 2, 1, 2))))
        m.conv = conv
        x = randn(1, 5, 7, 9)
        torch.testing.assert_close(m(x), ref(x))
        self.check(m, x, name="same k4 (Pad + Conv)")

    def test_larger_than_one_tile(self):
        # channels beyond the 128-wide matrix unit of the default chip
        self.check(nn.Conv2d(3, 140, 3, padding=1), randn(1, 3, 9, 9), name="3->140")
        self.check(nn.Conv2d(140, 130, 1), randn(2, 140, 5, 5), name="140->130 k1")
        self.check(nn.Conv2d(130, 130, 3, padding=1, groups=130), randn(1, 130, 5, 7), name="depthwise 130")

    def test_single_channel_and_downsample(self):
        self.check(nn.Conv2d(1, 4, 3), randn(3, 1, 7, 9), name="1 channel")
        self.check(nn.Conv2d(6, 8, 1, stride=2), randn(2, 6, 7, 9), name="1x1 stride 2")

    def test_asymmetric_padding_and_stride(self):
        m = nn.Conv2d(3, 5, (3, 5), stride=(1, 2), padding=(1, 2))
        self.check(m, randn(2, 3, 9, 11), name="k3x5 s1x2 p1x2")

    def test_opset17(self):
        m = nn.Conv2d(6, 6, 3, padding=1, groups=6)
        self.check(m, randn(1, 6, 7, 9), opset=17, name="depthwise")
        m = nn.Conv2d(3, 7, 5, stride=2, padding=2)
        self.check(m, randn(3, 3, 9, 9), opset=17, name="k5 s2")


class ConvFused(OpCase):
    """Conv followed by BatchNorm (eval) and an activation; standalone BatchNorm; conv stacks."""

    ACTS = {"relu": nn.ReLU, "relu6": nn.ReLU6, "silu": nn.SiLU, "hardswish": nn.Hardswish, "none": nn.Identity,
            "sigmoid": nn.Sigmoid, "gelu": nn.GELU, "leaky": lambda: nn.LeakyReLU(0.1), "hardsigmoid": nn.Hardsigmoid}

    def test_conv_bn_act(self):
        for act in self.ACTS:
            for groups in (1, 6):
                with self.subTest(act=act, groups=groups):
                    torch.manual_seed(2)
                    m = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1, groups=groups, bias=False),
                                      randomize_bn(nn.BatchNorm2d(6)), self.ACTS[act]())
                    self.check(m, randn(2, 6, 7, 9), name=f"{act} g{groups}")

    def test_standalone_batchnorm(self):
        for c, shape in [(5, (1, 5, 7, 9)), (3, (3, 3, 4, 6)), (20, (1, 20, 3, 3))]:
            with self.subTest(shape=shape):
                m = randomize_bn(nn.BatchNorm2d(c))
                # y = (x - mean) / sqrt(var + eps) * w + b on the vector unit in f32
                self.check(m, randn(*shape), name=f"bn {shape}", rel=F32_REL_L2)

    def test_batchnorm_after_relu(self):
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), randomize_bn(nn.BatchNorm2d(8)))
        self.check(m, randn(1, 3, 7, 9))

    def test_mobilenet_block(self):
        torch.manual_seed(3)
        m = nn.Sequential(
            nn.Conv2d(8, 24, 1, bias=False), randomize_bn(nn.BatchNorm2d(24)), nn.ReLU6(),
            nn.Conv2d(24, 24, 3, stride=2, padding=1, groups=24, bias=False), randomize_bn(nn.BatchNorm2d(24)),
            nn.Hardswish(),
            nn.Conv2d(24, 12, 1, bias=False), randomize_bn(nn.BatchNorm2d(12)))
        self.check(m, randn(1, 8, 13, 11))

    def test_residual(self):
        class Res(nn.Module):
            def __init__(self):
                super().__init__()
                self.c1 = nn.Conv2d(6, 6, 3, padding=1)
                self.c2 = nn.Conv2d(6, 6, 3, padding=1)

            def forward(self, x):
                return torch.relu(self.c2(torch.relu(self.c1(x))) + x)
        self.check(Res(), randn(2, 6, 7, 9))

    def test_few_rows_split_k(self):
        # ResNet-50's 14 x 14 convolutions on v6e (matrix units of 256 x 256): 196 output rows per GEMM, one tile of
        # a matrix unit, so gemm.s on one unit loads all 9 weight tiles of the 3 x 3 convolution (256 cycles each)
        # for streams of 196 rows. The compiler splits K over the 4 units (kernels/gemm_ksplit.h, codegen.cpp:
        # split_k_gemm): "gemm_ksplit" kernels, against torch; its bits are gemm.s's (the generator's tests).
        torch.manual_seed(5)
        m = nn.Sequential(nn.Conv2d(1024, 256, 1, bias=False), randomize_bn(nn.BatchNorm2d(256)), nn.ReLU(),
                          nn.Conv2d(256, 256, 3, padding=1, bias=False), randomize_bn(nn.BatchNorm2d(256)), nn.ReLU())
        x = randn(1, 1024, 14, 14)
        self.check(m, x, config="v6e")
        kernels, _, _ = self.compiled("v6e")
        self.assertIn("gemm_ksplit", kernels)
        # On v4 (2 cores of 4 units of 128 x 128) the whole-chip GEMM of the 3 x 3 convolution is one tile of 196 x
        # 256, which leaves a core idle: the two cores share its 2 strips instead, each splitting K over its units
        # (GemmKSplit::cores), a "gemm_ksplit" kernel on both cores; the same bits as on v5e (one core, units of the
        # same 128 rows: a fold's sum is the same there, where v6e's folds of 256 rows round differently).
        got_v5e, _ = self.run_model(m, [x], config="v5e")
        got_v4, _ = self.run_model(m, [x], config="v4")
        self.compiled("v4")
        with open(os.path.join(self.dir, f"case{self.n}", "report-v4.json")) as f:
            split = [r for r in json.load(f)["regions"] if r["kind"] == "kernel" and r["name"] == "gemm_ksplit"]
        self.assertTrue(split)
        self.assertTrue(all(r["cores"] == 2 for r in split), split)
        for a, b in zip(got_v4, got_v5e):
            np.testing.assert_array_equal(a, b)

    def test_gemms_take_their_first_weights_while_the_one_before_ends(self):
        # Four 1 x 1 convolutions of 28 x 28 in a row on v6e (whole-chip GEMMs, their a in VMEM): each later GEMM's
        # first weights load while the one before ends (prefetch_overlap) and its units take them into their
        # shadow buffers there too (GemmChip::lw_sem: a mxu.lw per unit after that GEMM's last products, so the
        # loads, 256 cycles on v6e, run during its drain), named in the program. Against torch; the same bits as
        # with --no-kernel-overlap, in fewer cycles.
        torch.manual_seed(16)
        m = nn.Sequential(nn.Conv2d(512, 128, 1), nn.ReLU(), nn.Conv2d(128, 512, 1), nn.ReLU(),
                          nn.Conv2d(512, 128, 1), nn.ReLU(), nn.Conv2d(128, 512, 1))
        self.check(m, randn(1, 512, 28, 28), config="v6e")
        d = os.path.join(self.dir, f"case{self.n}")
        model = os.path.join(d, "model.onnx")
        kernels, _, _ = self.compiled("v6e")
        self.assertEqual([k for k in kernels if k.startswith("gemm")], ["gemm_chip"] * 4)
        tpusim("compile", model, "--config", "v6e", "-o", os.path.join(d, "v6e.tpub"))
        dis = tpusim("disasm", os.path.join(d, "v6e.tpub")).stdout
        later = {"/2/Conv+/3/Relu", "/4/Conv+/5/Relu", "/6/Conv"}
        self.assertEqual(set(re.findall(r"the first weights of (\S+), loading while gemm_chip runs", dis)), later)
        self.assertEqual(set(re.findall(r"the semaphore that says the first weights of (\S+) are in VMEM", dis)), later)
        xf = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(model, xf, "v6e")

    def test_split_k_kernels_load_their_neighbours_weights(self):
        # Two bottleneck blocks of ResNet-50's 14 x 14 layers on v4 (1 x 1 to 256 channels, 3 x 3, 1 x 1 back to 1024
        # with the residual): in each, the first two are split-K kernels on both cores (gemm_ksplit), the third a
        # whole-chip GEMM. A GEMM's first weight tiles load while the kernel before it ends (prefetch_overlap,
        # codegen.cpp; GemmKSplit::b_preloaded, gemm_ksplit_first_b; "Split-K kernels' neighbours", docs/compiler.md):
        # a gemm_chip after a ksplit, a ksplit after a ksplit and after a gemm_chip (the first block's 3 x 3 follows
        # a copy that fills its padded input's borders: none there). (The 3 x 3's taps read its input's rows once
        # from the shared memory, KSplitPlan::stage_rows: GemmKSplit.StagedTapsReadTheirSpanOnce counts the bytes.)
        # Against torch; the same bits as with --no-kernel-overlap, in fewer cycles.
        torch.manual_seed(15)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(1024, 256, 1), nn.ReLU(), nn.Conv2d(256, 256, 3, padding=1),
                                          nn.ReLU(), nn.Conv2d(256, 1024, 1))

            def forward(self, x):
                return torch.relu(self.body(x) + x)
        x = randn(1, 1024, 14, 14)
        self.check(nn.Sequential(Block(), Block()), x, config="v4")
        d = os.path.join(self.dir, f"case{self.n}")
        model = os.path.join(d, "model.onnx")
        tpusim("compile", model, "--config", "v4", "-o", os.path.join(d, "v4.tpub"))
        dis = tpusim("disasm", os.path.join(d, "v4.tpub")).stdout
        short = lambda y: y.split("/")[1] + "." + y.split("/")[3]
        preloads = {(short(y), k) for y, k in re.findall(r"the first weights of (\S+), loading while (\S+) runs", dis)}
        self.assertEqual(preloads, {("0.body.4", "gemm_ksplit"), ("1.body.0", "gemm_chip"),
                                    ("1.body.2", "gemm_ksplit"), ("1.body.4", "gemm_ksplit")})
        # (a split-K kernel's units take their first tiles into their shadow buffers ahead only where its a lies in
        # VMEM, GemmKSplit::lw_sem: not on v4, whose a's loads from the shared memory take longer)
        self.assertNotIn("the semaphore that says the first weights of", dis)
        kernels, _, _ = self.compiled("v4")
        self.assertEqual([k for k in kernels if k.startswith("gemm")], ["gemm_ksplit", "gemm_ksplit", "gemm_chip"] * 2)
        xf = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(model, xf, "v4")
        # On v6e (one core): copies within VMEM around each 3 x 3 (its padded input's borders, its virtual columns
        # dropped), which the first weights' loads pass where the copy is a few direct transfers (Overlap::skip,
        # kernels::copy_direct: the kernel before the copy loads the weights of the GEMM after it; the first
        # block's border fill is staged through VMEM, not passed). The units take their first weights into their
        # shadow buffers too (their a lies in VMEM): the first block's last 1 x 1 (past a copy), the second block's
        # first 1 x 1, its 3 x 3 (past a copy) and its last 1 x 1 (past a copy; its VMEM past the 3 x 3's, which
        # lies past a base of its own: below it, it would plan fewer rows of K a chunk); the same bits as fenced, in
        # fewer cycles
        tpusim("compile", model, "--config", "v6e", "-o", os.path.join(d, "v6e.tpub"))
        dis = tpusim("disasm", os.path.join(d, "v6e.tpub")).stdout
        kernels, _, _ = self.compiled("v6e")
        self.assertEqual([k for k in kernels if k.startswith("gemm") or k == "copy"][1:7],
                         ["gemm_ksplit", "copy", "gemm_ksplit", "copy", "gemm_chip", "gemm_ksplit"])
        self.assertEqual({short(y) for y in re.findall(r"the semaphore that says the first weights of (\S+) are in VMEM",
                                                         dis)}, {"0.body.4", "1.body.0", "1.body.2", "1.body.4"})
        self.same_bits_as_fenced_in_fewer_cycles(model, xf, "v6e")

    def test_squeeze_and_excitation_pools_and_scales_on_the_vector_unit(self):
        # A squeeze-and-excitation block (EfficientNet's, MobileNet-v3's, RegNetY's): the global pool on the vector
        # unit (colmean.s: no matrix unit loading a weight tile per block of the image for one row), and the two 1 x
        # 1 convolutions of the pooled 1 x 1 image matrix-vector products on it too (gemv: a row-wise kernel over
        # the weights), so no gemm at all; against torch, on a chip of one core and of two
        torch.manual_seed(17)

        class SE(nn.Module):
            def __init__(self, c=240, r=4):
                super().__init__()
                self.fc1, self.fc2 = nn.Conv2d(c, c // r, 1), nn.Conv2d(c // r, c, 1)

            def forward(self, x):
                s = torch.sigmoid(self.fc2(torch.relu(self.fc1(nn.functional.adaptive_avg_pool2d(x, 1)))))
                return x * s
        x = randn(1, 240, 14, 14)
        for config in ("v6e", "v4"):
            self.check(SE(), x, config=config)
            kernels, _, _ = self.compiled(config)
            self.assertIn("colmean.s", kernels)
            self.assertEqual([k for k in kernels if k.startswith("gemm")], [])
            self.assertGreaterEqual(kernels.count("rowwise"), 2)

    def test_row_blocks_that_wait_on_weight_loads_split_k_instead(self):
        # ResNet-50's 7 x 7 bottleneck block on v6e: its first 1 x 1 convolution, 49 x 2048 x 512, as the whole-chip
        # GEMM would split its 49 rows in two row blocks over the units of each of its 2 strips, each unit loading
        # all 8 weight tiles of its strip for 25 rows (split_k_gemm, codegen.cpp: there the split kernel need only
        # beat it with the weights in VMEM); its units share the loads instead
        # (GemmChip.RowBlocksThatWaitOnWeightLoadsLoseToSplitK times both). Against torch; the same bits as with
        # --no-kernel-overlap, in fewer cycles.
        torch.manual_seed(16)

        class Block(nn.Module):
            def __init__(self):
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(2048, 512, 1), nn.ReLU(), nn.Conv2d(512, 512, 3, padding=1),
                                          nn.ReLU(), nn.Conv2d(512, 2048, 1))

            def forward(self, x):
                return torch.relu(self.body(x) + x)
        x = randn(1, 2048, 7, 7)
        self.check(Block(), x, config="v6e")
        kernels, _, _ = self.compiled("v6e")
        self.assertEqual([k for k in kernels if k.startswith("gemm")][0], "gemm_ksplit")
        d = os.path.join(self.dir, f"case{self.n}")
        xf = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), xf, "v6e")

    def test_opset17(self):
        m = nn.Sequential(nn.Conv2d(5, 7, 3, padding=1), randomize_bn(nn.BatchNorm2d(7)), nn.SiLU())
        self.check(m, randn(1, 5, 7, 9), opset=17)


class ConvNd(OpCase):
    """Conv1d and Conv3d (lowered onto the 2-D convolution: 1-D as H = 1, 3-D over depth taps gathered as channels)."""

    # (cin, cout, kernel, stride, padding, dilation, groups, bias, batch, L)
    CASES_1D = [
        (3, 5, 3, 1, 1, 1, 1, True, 2, 11),
        (4, 6, 5, 2, 2, 1, 1, False, 1, 17),
        (80, 32, 3, 1, 1, 1, 1, True, 1, 30),    # Whisper's first conv in small
        (32, 32, 3, 2, 1, 1, 1, True, 1, 30),    # Whisper's second conv (stride 2)
        (5, 7, 3, 1, 2, 2, 1, True, 1, 13),      # dilation 2
        (6, 10, 3, 1, 1, 1, 2, True, 3, 9),      # groups 2
        (8, 8, 31, 1, 15, 1, 8, True, 1, 40),    # Conformer's depthwise conv, kernel 31
        (7, 7, 3, 2, 1, 1, 7, False, 2, 12),     # depthwise stride 2
        (3, 4, 1, 1, 0, 1, 1, True, 2, 9),       # pointwise
        (3, 4, 4, 4, 0, 1, 1, True, 1, 16),      # patchify
    ]
    # (cin, cout, kernel, stride, padding, dilation, groups, bias, batch, D, H, W)
    CASES_3D = [
        (3, 5, 3, 1, 1, 1, 1, True, 1, 5, 6, 7),
        (3, 4, (3, 1, 1), 1, (1, 0, 0), 1, 1, False, 2, 4, 5, 5),  # temporal-only kernel
        (4, 6, (1, 3, 3), 1, (0, 1, 1), 1, 1, True, 1, 3, 7, 6),   # spatial-only kernel
        (3, 6, 3, 2, 1, 1, 1, True, 1, 7, 8, 9),                   # stride 2
        (4, 6, (3, 2, 3), (2, 1, 2), (1, 0, 1), 1, 2, True, 2, 5, 6, 7),  # groups 2, mixed strides
        (3, 4, 3, 1, 2, 2, 1, True, 1, 6, 7, 7),                   # dilation 2
        (5, 5, 3, 1, 1, 1, 5, True, 1, 4, 5, 6),                   # depthwise
        (3, 8, (2, 4, 4), (2, 4, 4), 0, 1, 1, True, 1, 4, 8, 8),   # video patchify
    ]

    def test_conv1d(self):
        for (cin, cout, k, s, p, d, g, bias, b, n) in self.CASES_1D:
            name = f"c{cin}->{cout} k{k} s{s} p{p} d{d} g{g} bias{int(bias)} {b}x{n}"
            with self.subTest(name):
                torch.manual_seed(1)
                m = nn.Conv1d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
                self.check(m, randn(b, cin, n), name=name)

    def test_conv3d(self):
        for (cin, cout, k, s, p, d, g, bias, b, dd, h, w) in self.CASES_3D:
            name = f"c{cin}->{cout} k{k} s{s} p{p} d{d} g{g} bias{int(bias)} {b}x{dd}x{h}x{w}"
            with self.subTest(name):
                torch.manual_seed(1)
                m = nn.Conv3d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)
                self.check(m, randn(b, cin, dd, h, w), name=name)

    def test_fused_batchnorm_relu(self):
        torch.manual_seed(2)
        m = nn.Sequential(nn.Conv1d(6, 8, 3, padding=1, bias=False), randomize_bn(nn.BatchNorm1d(8)), nn.ReLU())
        self.check(m, randn(2, 6, 15), name="conv1d+bn+relu")
        m = nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), randomize_bn(nn.BatchNorm3d(4)), nn.ReLU())
        self.check(m, randn(1, 3, 4, 5, 6), name="conv3d+bn+relu")

    def test_conv1d_stack(self):
        # a Whisper-style front end: conv, GELU, strided conv, GELU, then time-major for the transformer
        torch.manual_seed(3)
        c1, c2 = nn.Conv1d(16, 24, 3, padding=1), nn.Conv1d(24, 24, 3, stride=2, padding=1)
        m = fn(lambda s, x: F.gelu(s.c2(F.gelu(s.c1(x)))).transpose(1, 2))
        m.c1, m.c2 = c1, c2
        self.check(m, randn(2, 16, 40), name="whisper front end")

    def test_opset17(self):
        self.check(nn.Conv1d(4, 6, 3, padding=1, groups=2), randn(1, 4, 10), opset=17, name="conv1d")
        self.check(nn.Conv3d(3, 4, 3, stride=2, padding=1), randn(1, 3, 5, 6, 7), opset=17, name="conv3d")


class ConvTranspose(OpCase):
    """ConvTranspose 1-D/2-D/3-D (a convolution with flipped weights over the input placed on a zero canvas)."""

    # (cin, cout, kernel, stride, padding, output_padding, dilation, groups, bias, batch, H, W)
    CASES_2D = [
        (3, 4, 2, 2, 0, 0, 1, 1, True, 1, 5, 5),    # U-Net upsampling
        (8, 4, 2, 2, 0, 0, 1, 1, False, 2, 4, 6),
        (3, 5, 3, 2, 1, 1, 1, 1, True, 2, 5, 6),    # k3 s2 p1 output_padding 1: exactly x2
        (4, 6, 4, 2, 1, 0, 1, 1, True, 1, 5, 6),    # DCGAN-style k4 s2 p1
        (4, 6, 4, 2, 1, 0, 1, 2, True, 1, 5, 6),    # groups 2
        (5, 3, 3, 1, 1, 0, 1, 1, True, 1, 7, 8),    # stride 1 (a flipped convolution)
        (3, 4, 3, 3, 0, 2, 1, 1, True, 1, 4, 5),    # stride 3, output_padding 2
        (3, 4, 3, 2, 2, 0, 2, 1, False, 1, 5, 5),   # dilation 2
        (6, 6, 3, 2, 1, 1, 1, 6, True, 1, 5, 5),    # depthwise
        (3, 4, 5, 2, 3, 1, 1, 1, True, 1, 4, 4),    # padding larger than the kernel's reach (crops)
        (20, 140, 2, 2, 0, 0, 1, 1, True, 1, 3, 3),  # wider than the matrix unit
    ]

    def test_2d(self):
        for (cin, cout, k, s, p, op, d, g, bias, b, h, w) in self.CASES_2D:
            name = f"c{cin}->{cout} k{k} s{s} p{p} op{op} d{d} g{g} bias{int(bias)} {b}x{h}x{w}"
            with self.subTest(name):
                torch.manual_seed(1)
                m = nn.ConvTranspose2d(cin, cout, k, stride=s, padding=p, output_padding=op, dilation=d,
                                       groups=g, bias=bias)
                self.check(m, randn(b, cin, h, w), name=name)

    def test_asymmetric(self):
        m = nn.ConvTranspose2d(3, 4, (2, 3), stride=(2, 1), padding=(0, 1))
        self.check(m, randn(2, 3, 5, 6), name="k2x3 s2x1 p0x1")

    def test_1d(self):
        for (cin, cout, k, s, p, op, g) in [(3, 4, 4, 2, 1, 0, 1), (4, 6, 3, 2, 1, 1, 2), (5, 5, 2, 2, 0, 0, 1),
                                            (8, 4, 16, 8, 4, 0, 1)]:  # a vocoder-style x8 upsampler
            name = f"c{cin}->{cout} k{k} s{s} p{p} op{op} g{g}"
            with self.subTest(name):
                torch.manual_seed(1)
                self.check(nn.ConvTranspose1d(cin, cout, k, stride=s, padding=p, output_padding=op, groups=g),
                           randn(2, cin, 9), name=name)

    def test_3d(self):
        for (cin, cout, k, s, p, op) in [(3, 4, 2, 2, 0, 0), (3, 5, 3, 2, 1, 1), (4, 3, (1, 2, 2), (1, 2, 2), 0, 0)]:
            name = f"c{cin}->{cout} k{k} s{s} p{p} op{op}"
            with self.subTest(name):
                torch.manual_seed(1)
                self.check(nn.ConvTranspose3d(cin, cout, k, stride=s, padding=p, output_padding=op),
                           randn(1, cin, 3, 4, 5), name=name)

    def test_fused_batchnorm_relu(self):
        torch.manual_seed(2)
        m = nn.Sequential(nn.ConvTranspose2d(6, 4, 2, stride=2, bias=False), randomize_bn(nn.BatchNorm2d(4)),
                          nn.ReLU())
        self.check(m, randn(2, 6, 5, 5), name="convT+bn+relu")

    def onnx_model(self, x, w, attrs, out_shape):
        """A one-node ConvTranspose model made with onnx.helper (attributes torch does not export)."""
        node = onnx.helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", **attrs)
        graph = onnx.helper.make_graph(
            [node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, out_shape)],
            [onnx.numpy_helper.from_array(w, "w")])
        self.n += 1
        path = os.path.join(self.dir, f"convT{self.n}.onnx")
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), path)
        np.save(os.path.join(self.dir, "x.npy"), x)
        return path

    def test_output_shape_and_auto_pad(self):
        # The ONNX spec's pads from output_shape / auto_pad: total = stride*(in-1) + output_padding + k - out,
        # SAME_UPPER puts total//2 first, otherwise the larger half. Reference: torch's full (unpadded) transposed
        # convolution, cropped by those pads.
        x, w = randn(1, 3, 5, 6).numpy(), randn(3, 4, 3, 3).numpy()
        full = F.conv_transpose2d(torch.from_numpy(x), torch.from_numpy(w), stride=2).numpy()  # [1, 4, 11, 13]
        for name, attrs, (t, l, b, r) in [
                ("SAME_UPPER", {"auto_pad": "SAME_UPPER"}, (0, 0, 1, 1)),       # out = in * 2: total 1
                ("SAME_LOWER", {"auto_pad": "SAME_LOWER"}, (1, 1, 0, 0)),
                ("output_shape", {"output_shape": [8, 10]}, (2, 2, 1, 1))]:    # totals 3, 3: the larger half first
            with self.subTest(name):
                ref = full[:, :, t:full.shape[2] - b, l:full.shape[3] - r]
                path = self.onnx_model(x, w, dict(strides=[2, 2], **attrs), list(ref.shape))
                out = os.path.join(self.dir, f"out{self.n}")
                tpusim("run", path, "--input", "x=" + os.path.join(self.dir, "x.npy"), "--output-dir", out)
                got = np.load(os.path.join(out, "y.npy"))
                c, e, m = metrics(got, ref)
                print(f"CASE {type(self).__name__}.{self._testMethodName}[{name}] cos={c:.6f} relL2={e:.3e} "
                      f"maxabs={m:.3e}", file=sys.stderr)
                self.assertEqual(got.shape, ref.shape)
                self.assertGreaterEqual(c, MIN_COSINE)
                self.assertLessEqual(e, MAX_REL_L2)

    def test_opset17(self):
        self.check(nn.ConvTranspose2d(4, 3, 2, stride=2), randn(1, 4, 5, 6), opset=17, name="k2 s2")


class Resize(OpCase):
    """Resize as torch's Upsample / interpolate export it (nearest: asymmetric + floor; linear and cubic: half_pixel
    or align_corners; scales or sizes), and ONNX's own defaults. On a graph input the taps are moved as they are and
    weighted in f32: nearest is bit-identical, linear and cubic within F32_REL_L2."""

    MODES = [("nearest", None), ("bilinear", False), ("bilinear", True), ("bicubic", False), ("bicubic", True)]

    def test_scales(self):
        for mode, ac in self.MODES:
            for sf in (2, 3, 1.5, 0.5, (2, 1), (0.75, 2.5)):
                name = f"{mode} align_corners={ac} x{sf}"
                with self.subTest(name):
                    kw = {} if ac is None else {"align_corners": ac}
                    m = fn(lambda s, x, sf=sf, mode=mode, kw=kw: F.interpolate(x, scale_factor=sf, mode=mode, **kw))
                    exact = "f32" if mode == "nearest" else None
                    self.check(m, randn(2, 3, 5, 6), name=name, exact=exact, rel=F32_REL_L2)

    def test_sizes(self):
        for mode, ac in self.MODES:
            for size in ((7, 9), (3, 4), (1, 6), (10, 1)):
                name = f"{mode} align_corners={ac} size{size}"
                with self.subTest(name):
                    kw = {} if ac is None else {"align_corners": ac}
                    m = fn(lambda s, x, size=size, mode=mode, kw=kw: F.interpolate(x, size=size, mode=mode, **kw))
                    exact = "f32" if mode == "nearest" else None
                    self.check(m, randn(1, 4, 5, 6), name=name, exact=exact, rel=F32_REL_L2)

    def test_upsample_modules(self):
        self.check(nn.Upsample(scale_factor=2), randn(1, 3, 4, 4), name="Upsample nearest", exact="f32")
        self.check(nn.Upsample(scale_factor=2, mode="bilinear"), randn(1, 3, 4, 4), name="Upsample bilinear",
                   rel=F32_REL_L2)
        self.check(nn.UpsamplingBilinear2d(scale_factor=2), randn(1, 3, 4, 4), name="UpsamplingBilinear2d",
                   rel=F32_REL_L2)
        self.check(nn.Upsample(scale_factor=2), randn(1, 1, 4, 4), name="one channel", exact="f32")
        self.check(nn.Upsample(scale_factor=4, mode="bilinear"), randn(2, 3, 1, 1), name="from 1x1", rel=F32_REL_L2)

    def test_1d_and_3d(self):
        self.check(nn.Upsample(scale_factor=3), randn(2, 3, 5), name="nearest 1d", exact="f32")
        self.check(nn.Upsample(scale_factor=2.5, mode="linear"), randn(2, 3, 5), name="linear 1d", rel=F32_REL_L2)
        self.check(nn.Upsample(scale_factor=2, mode="linear", align_corners=True), randn(2, 3, 5),
                   name="linear 1d align_corners", rel=F32_REL_L2)
        self.check(nn.Upsample(scale_factor=2), randn(1, 3, 3, 4, 5), name="nearest 3d", exact="f32")
        self.check(nn.Upsample(scale_factor=(1, 2, 2), mode="trilinear"), randn(1, 3, 3, 4, 5), name="trilinear",
                   rel=F32_REL_L2)
        self.check(nn.Upsample(size=(5, 3, 7), mode="trilinear", align_corners=True), randn(1, 2, 3, 4, 5),
                   name="trilinear align_corners sizes", rel=F32_REL_L2)

    def test_computed_values(self):
        # Resize of a conv's (bf16, NHWC) output and a conv after it: the matmul bounds
        torch.manual_seed(4)
        for mode in ("nearest", "bilinear", "bicubic"):
            with self.subTest(mode):
                m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Upsample(scale_factor=2, mode=mode),
                                  nn.Conv2d(8, 4, 3, padding=1))
                self.check(m, randn(2, 3, 6, 7), name=f"conv {mode} conv")
        m = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.Upsample(scale_factor=2))
        x = randn(1, 3, 5, 5)
        got, _ = self.check(m, x, name="nearest of a conv output")
        with torch.no_grad():  # nearest moves the conv's bf16 values: exactly them, repeated
            np.testing.assert_array_equal(got[0], np.repeat(np.repeat(got[0][:, :, ::2, ::2], 2, 2), 2, 3))

    def onnx_resize(self, x, attrs, scales=None, sizes=None):
        """A one-node Resize made with onnx.helper (what other exporters emit); returns tpusim's output."""
        inits, inputs = [], ["x", ""]
        if scales is not None:
            inits.append(onnx.helper.make_tensor("scales", onnx.TensorProto.FLOAT, [len(scales)], scales))
            inputs.append("scales")
        else:
            inits.append(onnx.helper.make_tensor("sizes", onnx.TensorProto.INT64, [len(sizes)], sizes))
            inputs += ["", "sizes"]
        node = onnx.helper.make_node("Resize", inputs, ["y"], name="resize", **attrs)
        graph = onnx.helper.make_graph(
            [node], "g", [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
        self.n += 1
        path = os.path.join(self.dir, f"resize{self.n}.onnx")
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), path)
        np.save(os.path.join(self.dir, "x.npy"), x.numpy())
        out = os.path.join(self.dir, f"out{self.n}")
        tpusim("run", path, "--input", "x=" + os.path.join(self.dir, "x.npy"), "--output-dir", out)
        return np.load(os.path.join(out, "y.npy"))

    def test_onnx_defaults_nearest(self):
        # ONNX's default nearest (half_pixel, round_prefer_floor) and round_prefer_ceil against torch's nearest-exact,
        # floor((o + 0.5) * in / out): the same index as rounding (o + 0.5) / scale - 0.5 half up, and as rounding
        # it half down where no tie occurs (scales 2 and 3: (o + 0.5) / scale is never an integer).
        # With sizes, the scale is out / in, as torch's.
        x = randn(2, 3, 5, 6)
        for mode, scale in [("round_prefer_floor", 2.0), ("round_prefer_floor", 3.0), ("round_prefer_ceil", 2.0),
                            ("round_prefer_ceil", 0.5), ("round_prefer_ceil", (7, 9))]:
            with self.subTest(f"{mode} x{scale}"):
                attrs = {"mode": "nearest"} if mode == "round_prefer_floor" else {"mode": "nearest", "nearest_mode": mode}
                if isinstance(scale, tuple):
                    size = scale
                    got = self.onnx_resize(x, attrs, sizes=[2, 3, *size])
                else:
                    size = (int(5 * scale), int(6 * scale))
                    got = self.onnx_resize(x, attrs, scales=[1, 1, scale, scale])
                ref = F.interpolate(x, size=size, mode="nearest-exact").numpy()
                print(f"CASE {type(self).__name__}.{self._testMethodName}[{mode} x{scale}] exact={np.array_equal(got, ref)}",
                      file=sys.stderr)
                np.testing.assert_array_equal(got, ref)

    def test_onnx_other_transforms(self):
        x = randn(2, 3, 5, 6)
        # pytorch_half_pixel is half_pixel except for an output of length 1 (coordinate 0: the first element)
        got = self.onnx_resize(x, {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"},
                               sizes=[2, 3, 7, 1])
        ref = F.interpolate(x, size=(7, 6), mode="bilinear").numpy()[:, :, :, :1]
        c, e, m = metrics(got, ref)
        print(f"CASE {type(self).__name__}.{self._testMethodName}[pytorch_half_pixel] relL2={e:.3e}", file=sys.stderr)
        self.assertEqual(got.shape, ref.shape)
        self.assertLessEqual(e, F32_REL_L2)
        # asymmetric linear at an integer scale: output 2i is input i, output 2i+1 the mean of inputs i and i+1
        # (the last one clamped to the edge)
        got = self.onnx_resize(x, {"mode": "linear", "coordinate_transformation_mode": "asymmetric"},
                               scales=[1, 1, 1, 2])
        xn = x.numpy().astype(np.float64)
        nxt = np.concatenate([xn[..., 1:], xn[..., -1:]], -1)
        ref = np.stack([xn, (xn + nxt) / 2], -1).reshape(2, 3, 5, 12)
        c, e, m = metrics(got, ref)
        print(f"CASE {type(self).__name__}.{self._testMethodName}[asymmetric linear] relL2={e:.3e}", file=sys.stderr)
        self.assertLessEqual(e, F32_REL_L2)

    def test_opset17(self):
        self.check(nn.Upsample(scale_factor=2), randn(1, 3, 4, 5), opset=17, name="nearest", exact="f32")
        self.check(nn.Upsample(scale_factor=2, mode="bilinear"), randn(1, 3, 4, 5), opset=17, name="bilinear",
                   rel=F32_REL_L2)


class SmallNetworks(OpCase):
    """Small models with the new operators end to end, against torch: a U-Net and a 1-D convolution stack."""

    class UNet(nn.Module if torch else object):
        def __init__(self):
            super().__init__()
            def block(cin, cout):
                return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1), randomize_bn(nn.BatchNorm2d(cout)), nn.ReLU(),
                                     nn.Conv2d(cout, cout, 3, padding=1), nn.ReLU())
            self.enc1, self.enc2, self.mid = block(3, 8), block(8, 16), block(16, 32)
            self.pool = nn.MaxPool2d(2)
            self.up2 = nn.ConvTranspose2d(32, 16, 2, stride=2)
            self.dec2 = block(32, 16)
            self.up1 = nn.Upsample(scale_factor=2, mode="bilinear")
            self.dec1 = block(16 + 8, 8)
            self.head = nn.Conv2d(8, 2, 1)
            self.skip = nn.Upsample(scale_factor=4)  # nearest

        def forward(self, x):
            e1 = self.enc1(x)
            e2 = self.enc2(self.pool(e1))
            m = self.mid(self.pool(e2))
            d2 = self.dec2(torch.cat([self.up2(m), e2], 1))
            d1 = self.dec1(torch.cat([self.up1(d2), e1], 1))
            return self.head(d1) + self.skip(self.head(self.pool(self.pool(e1))))

    def test_unet(self):
        torch.manual_seed(5)
        m = self.UNet()
        self.check(m, randn(2, 3, 16, 16), name="unet", cos=0.9999)
        self.check(m, randn(2, 3, 16, 16), name="unet", opset=17, cos=0.9999)

    def test_conv1d_stack(self):
        # Conv1d, BatchNorm, GELU, a depthwise conv1d, a transposed conv1d back to the input rate
        torch.manual_seed(6)
        m = nn.Sequential(nn.Conv1d(8, 16, 5, padding=2), randomize_bn(nn.BatchNorm1d(16)), nn.GELU(),
                          nn.Conv1d(16, 16, 7, stride=2, padding=3, groups=16), nn.SiLU(),
                          nn.Conv1d(16, 32, 1), nn.ReLU(), nn.ConvTranspose1d(32, 8, 4, stride=2, padding=1))
        self.check(m, randn(2, 8, 64), name="conv1d stack", cos=0.9999)


class Pool(OpCase):
    """MaxPool2d, AvgPool2d, AdaptiveAvgPool2d(1) and spatial means."""

    def test_maxpool(self):
        for k, s, p, ceil in [(2, 2, 0, False), (3, 1, 1, False), (3, 2, 1, False), (3, 2, 0, True), (2, 2, 0, True),
                              (3, 2, 1, True), (2, 1, 0, False), (3, 3, 1, False)]:
            name = f"k{k} s{s} p{p} ceil{int(ceil)}"
            with self.subTest(name):
                m = nn.MaxPool2d(k, stride=s, padding=p, ceil_mode=ceil)
                # pooling runs NHWC in bf16: the f32 input is rounded to bf16 on the way in, and rounding commutes
                # with max, so the output is PyTorch's rounded to bf16, bit for bit (measured)
                self.check(m, randn(2, 5, 7, 9), name=name, exact="bf16")

    def test_maxpool_after_conv(self):
        m = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.check(m, randn(1, 3, 11, 9))

    def test_avgpool(self):
        for k, s, p, cip, ceil in [(2, 2, 0, True, False), (3, 1, 1, True, False), (3, 1, 1, False, False),
                                   (3, 2, 1, True, False), (3, 2, 1, False, False), (2, 2, 0, True, True),
                                   (3, 2, 0, True, True), (3, 2, 1, False, True)]:
            name = f"k{k} s{s} p{p} cip{int(cip)} ceil{int(ceil)}"
            with self.subTest(name):
                m = nn.AvgPool2d(k, stride=s, padding=p, count_include_pad=cip, ceil_mode=ceil)
                # bf16 input and output (f32 sums): the default bounds (measured rel L2 ~2.5e-3)
                self.check(m, randn(2, 5, 7, 9), name=name)

    def test_other_windows(self):
        self.check(nn.MaxPool2d(3, 1, 0, dilation=2), randn(2, 3, 7, 9), name="max dilation 2", exact="bf16")
        self.check(nn.MaxPool2d((3, 2), (2, 1), (1, 0)), randn(2, 3, 7, 9), name="max 3x2", exact="bf16")
        self.check(nn.AvgPool2d((2, 3), (1, 2)), randn(2, 3, 7, 9), name="avg 2x3")
        self.check(nn.AdaptiveAvgPool2d(2), randn(1, 3, 8, 8), name="adaptive 2")
        self.check(nn.Sequential(nn.MaxPool2d(2), nn.AvgPool2d(2)), randn(1, 3, 9, 11), name="pool of pool")
        self.check(fn(lambda s, x: torch.cat([F.max_pool2d(x, 3, 1, 1), F.avg_pool2d(x, 3, 1, 1), x], 1)),
                   randn(2, 3, 7, 9), name="concat of pools")

    def test_adaptive_avgpool_1(self):
        for shape in [(1, 5, 7, 9), (3, 20, 4, 4)]:
            with self.subTest(shape=shape):
                m = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten())
                self.check(m, randn(*shape), name=f"{shape}")

    def test_mean_hw(self):
        for keep in (True, False):
            with self.subTest(keepdim=keep):
                m = fn(lambda s, x, keep=keep: x.mean((2, 3), keepdim=keep))
                # lowered like GlobalAveragePool: the input goes through bf16 (measured rel L2 ~2e-3)
                self.check(m, randn(2, 6, 7, 9), name=f"keepdim{int(keep)}")

    def test_conv_pool_head(self):
        m = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 5))
        self.check(m, randn(3, 3, 9, 9))

    def test_opset17(self):
        self.check(nn.MaxPool2d(3, 2, 1, ceil_mode=True), randn(1, 4, 7, 9), opset=17, name="max", exact="bf16")
        self.check(nn.AvgPool2d(3, 2, 1), randn(1, 4, 7, 9), opset=17, name="avg")


    def test_pool1d(self):
        x = randn(2, 5, 17)
        for k, st, p, ceil in [(2, 2, 0, False), (3, 1, 1, False), (3, 2, 1, True), (5, 3, 2, False)]:
            name = f"k{k} s{st} p{p} ceil{int(ceil)}"
            self.check(nn.MaxPool1d(k, st, p, ceil_mode=ceil), x, name="max " + name, exact="bf16")
            for cip in (True, False):
                self.check(nn.AvgPool1d(k, st, p, ceil_mode=ceil, count_include_pad=cip), x,
                           name=f"avg {name} cip{int(cip)}")
        self.check(nn.MaxPool1d(3, 1, 0, dilation=2), x, name="max dilation 2", exact="bf16")

    def test_pool3d(self):
        # over H and W, then over D: a maximum is exact (bf16), a mean rounds to bf16 twice (measured rel L2 <= 3e-3)
        x = randn(2, 3, 5, 6, 7)
        for k, st, p, ceil in [(2, 2, 0, False), (3, 1, 1, False), ((3, 2, 3), (2, 1, 2), (1, 0, 1), True)]:
            name = f"k{k} s{st} p{p} ceil{int(ceil)}"
            self.check(nn.MaxPool3d(k, st, p, ceil_mode=ceil), x, name="max " + name, exact="bf16")
            for cip in (True, False):
                self.check(nn.AvgPool3d(k, st, p, ceil_mode=ceil, count_include_pad=cip), x,
                           name=f"avg {name} cip{int(cip)}")
        self.check(nn.MaxPool3d(2, 1, 0, dilation=(1, 2, 2)), x, name="max dilation", exact="bf16")
        self.check(nn.Sequential(nn.Conv3d(3, 4, 3, padding=1), nn.ReLU(), nn.MaxPool3d(2)), x, name="after conv3d")


class MatMul(OpCase):
    """Linear on 2-D and 3-D inputs, batched matmuls of two activations (broadcast), attention's q @ k^T, x @ W."""

    def test_linear(self):
        for shape, fin, fout, bias in [((4, 20), 20, 12, True), ((1, 20), 20, 12, True), ((2, 5, 20), 20, 12, True),
                                       ((3, 7, 33), 33, 17, False), ((1, 1, 64), 64, 130, True),
                                       ((2, 3, 4, 16), 16, 8, True), ((300, 40), 40, 3, True)]:
            with self.subTest(shape=shape, fout=fout):
                torch.manual_seed(4)
                self.check(nn.Linear(fin, fout, bias=bias), randn(*shape), name=f"{shape}->{fout}")

    def test_batched_products_in_one_call_a_run_per_core(self):
        # A batched MatMul of two activations without broadcast (a Swin-style window attention whose scores take a
        # bias, so that it is not fused) is one gemm.s call of BATCH items per core (docs/compiler.md, "Batched
        # products in one call"), where it was a call per item: on v5e one call for its 48 items, on v4 two (24
        # each, one per core); a broadcast batch stays a call per item. Against torch on both chips, and the same
        # bits on both (each item the same tiles, folds and drains as its own call).
        torch.manual_seed(13)

        def windows(self, q, k, v):
            s = q @ k.transpose(-2, -1) * 0.125 + self.bias
            return s.softmax(-1) @ v
        m = fn(windows, bias=randn(3, 49, 49))
        q, k, v = randn(16, 3, 49, 32), randn(16, 3, 49, 32), randn(16, 3, 49, 32)
        outs = {}
        for config, calls in (("v5e", 1), ("v4", 2)):
            with self.subTest(config=config):
                outs[config], _ = self.check(m, q, k, v, config=config, name=config)
                d = os.path.join(self.dir, f"case{self.n}")
                r = os.path.join(d, f"report-{config}-batch.json")
                tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "--report-json", r)
                with open(r) as f:
                    regions = json.load(f)["regions"]
                products = [i for i, x in enumerate(regions) if x["kind"] == "node" and "MatMul" in x["name"]]
                self.assertEqual(len(products), 2, [x["name"] for x in regions if x["kind"] == "node"])
                for i in products:
                    gemms = [x["name"] for x in regions if x["kind"] == "kernel" and x["parent"] == i and
                             x["name"].startswith("gemm")]
                    self.assertEqual(gemms, ["gemm.s"] * calls, regions[i]["name"])
        np.testing.assert_array_equal(outs["v5e"][0], outs["v4"][0])
        # broadcast: k and v shared by the 16 windows, a call per item
        kb, vb = randn(1, 3, 49, 32), randn(1, 3, 49, 32)
        self.check(m, q, kb, vb, config="v5e", name="broadcast")
        kernels, _, _ = self.compiled("v5e")
        self.assertGreaterEqual(kernels.count("gemm.s"), 2 * 48)

    def test_gemv_on_the_matrix_unit_where_a_row_does_not_fit(self):
        # A product of one row runs on the vector unit, its weights as rows (ops_matmul.cpp, gemv), where a row of
        # them fits a core's VMEM; on h200-like (228 KB) a row of 25,088 weights (VGG's classifier) does not, and
        # the product runs as the GEMM. Against torch on both chips.
        torch.manual_seed(7)
        m = nn.Sequential(nn.Linear(25088, 64), nn.ReLU())
        for config, on_vector_unit in (("h200-like", False), ("v5e", True)):
            with self.subTest(config=config):
                self.check(m, randn(1, 25088), name=config, config=config)
                kernels, _, _ = self.compiled(config)
                self.assertEqual("rowwise" in kernels, on_vector_unit, kernels)
                self.assertEqual(any(k.startswith("gemm") for k in kernels), not on_vector_unit, kernels)

    def test_weights_stream_into_vmem_ahead_of_their_gemms(self):
        # On v5e (one core, the intermediates kept in VMEM) a GEMM whose matrix work leaves HBM idle loads later
        # GEMMs' weights into the part of VMEM the intermediates leave, a piece after each chunk of its own
        # (GemmChip::background), and those GEMMs read them from there (docs/compiler.md, "The weight stream"): an
        # MLP of 2048 rows whose first Linear (256 -> 1024) has about 8k cycles of matrix work for 0.5 MB of weights.
        # The report notes both; against torch, and the same bits as with a fence between every two kernels
        # (--no-kernel-overlap, which streams nothing), in fewer cycles.
        torch.manual_seed(5)
        mlp = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 512))
        self.check(mlp, randn(2048, 256), config="v5e")
        _, _, notes = self.compiled("v5e")
        self.assertTrue([n for n in notes if re.search(r"streams \d+ bytes of later GEMMs' weights into VMEM", n)],
                        notes)
        self.assertIn("its weights read from VMEM (streamed in before it)", notes)
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x)

    def test_weights_a_gemm_hides_stream_where_the_budgets_spare_them(self):
        # A GEMM whose estimate says its matrix work hides its loads streams its weights too where the budgets
        # stream every weight that waits and have bytes to spare, and not from a row-wise kernel's budget
        # (docs/compiler.md, "The weight stream"): on v5e at 9600 GB/s the middle Linear (768 -> 3072, GELU) of this
        # MLP of 128 rows is such a GEMM; streamed, the model takes fewer cycles than at 2400 GB/s (before, it read
        # its weights from HBM there and took 19,725 cycles against 19,184 at 2400). Against torch (at v5e's own
        # bandwidth), and the same bits at 9600 GB/s as with a fence between every two kernels, in fewer cycles.
        torch.manual_seed(3)
        m = nn.Sequential(nn.Linear(768, 768), nn.GELU(), nn.Linear(768, 3072), nn.GELU(), nn.Linear(3072, 768))
        self.check(m, randn(128, 768), config="v5e")
        runs = self.at_bandwidths("v5e", (2400, 9600), "/2/Gemm")
        self.assertIn("its weights read from VMEM (streamed in before it)", runs[9600][2])
        self.assertLess(runs[9600][0], runs[2400][0])
        self.same_bits_as_fenced_at("v5e", 9600)

    def test_a_split_k_convolution_with_streamed_weights_need_only_beat_one_unit(self):
        # Where the weight stream runs, the split-K kernel (K over a core's matrix units) replaces gemm.s on one unit
        # where its estimate with its weights in VMEM beats gemm.s's at all, not by a tenth: gemm.s loads every
        # fold's weights from HBM, which its estimate counts below its run where HBM is fast (docs/compiler.md,
        # "The stream goes on past the next kernel's sem.set"). ResNet-50's layer-3 1 x 1 convolution (1024 -> 256
        # on 14 x 14) between two others on v6e at 2400 GB/s: split, and the model takes fewer cycles than at v6e's
        # own 1640 GB/s (before, it stayed on gemm.s there: 9,300 cycles against 9,156); against torch at v6e's
        # bandwidth, the same bits at 2400 GB/s as with a fence between every two kernels.
        torch.manual_seed(4)
        m = nn.Sequential(nn.Conv2d(256, 1024, 1), nn.ReLU(), nn.Conv2d(1024, 256, 1), nn.ReLU(),
                          nn.Conv2d(256, 256, 3, padding=1), nn.ReLU())
        self.check(m, randn(1, 256, 14, 14), config="v6e")
        runs = self.at_bandwidths("v6e", (1640, 2400), "/2/Conv")
        for bw, (_, kernels, _) in runs.items():
            self.assertEqual(kernels, ["gemm_ksplit"], bw)
        self.assertLess(runs[2400][0], runs[1640][0])
        self.same_bits_as_fenced_at("v6e", 2400)

    def test_a_gemv_s_weights_stream_into_vmem_too(self):
        # A Linear on one row (a classifier head after a global pool) runs on the vector unit with its weights as
        # rows (docs/compiler.md, "Weights as rows where narrow tiles win"), and its weights' loads take longer
        # than its vector work: a compute-bound convolution before it streams them into VMEM (docs/compiler.md,
        # "The weight stream": "A row-wise kernel's weights"). The Linear's node then reads under a tenth of its
        # weights' bytes from HBM (its input vector and output only), where with --no-kernel-overlap (no stream) it
        # reads them all; against torch, the same bits as fenced, in fewer cycles.
        torch.manual_seed(9)
        m = nn.Sequential(nn.Conv2d(64, 256, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(256, 2048))
        self.check(m, randn(1, 64, 56, 56), config="v5e")
        weights = 256 * 2048 * 2
        d = os.path.join(self.dir, f"case{self.n}")
        for extra, streamed in (([], True), (["--no-kernel-overlap"], False)):
            with self.subTest(streamed=streamed):
                r = os.path.join(d, f"report-{len(extra)}.json")
                tpusim("compile", os.path.join(d, "model.onnx"), "--config", "v5e", "--report-json", r, *extra)
                with open(r) as f:
                    regions = json.load(f)["regions"]
                head = [x for x in regions if x["kind"] == "node" and "Gemm" in x["name"]]
                self.assertEqual(len(head), 1, [x["name"] for x in regions if x["kind"] == "node"])
                self.assertEqual(head[0]["mxu_utilization"], 0.0)  # on the vector unit
                notes = [x["name"] for x in regions if x["kind"] == "note"]
                self.assertEqual("its weights read from VMEM (streamed in before it)" in notes, streamed, notes)
                if streamed:
                    self.assertLess(head[0]["bytes"], weights / 10)
                else:
                    self.assertGreaterEqual(head[0]["bytes"], weights)
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x)

    def test_a_kernel_after_a_streaming_gemm_does_not_wait_for_the_stream(self):
        # A kernel that begins with no sem.set of its own (a copy: a 3 x 3 convolution's padded input, the drop of
        # its overhanging columns) waits for the kernel before by a sem.set of a semaphore it does not use, a drain
        # that lets the weight stream's background loads go on, where a fence waited for them; a GEMM's tail
        # streams in background loads too (docs/compiler.md, "Kernels that do not wait for the stream"). A
        # bottleneck block and two 3 x 3 convolutions of 512 channels whose weights stream, on v5e: against torch;
        # the program's drains before its copies are sem.sets; with each made a fence again (tpusim disasm, then
        # asm), the same bits in more cycles (69,859 against 69,494 when this was written).
        torch.manual_seed(6)
        m = nn.Sequential(nn.Conv2d(256, 64, 1), nn.ReLU(), nn.Conv2d(64, 64, 3, padding=1), nn.ReLU(),
                          nn.Conv2d(64, 256, 1), nn.ReLU(), nn.Conv2d(256, 512, 3, stride=2, padding=1), nn.ReLU(),
                          nn.Conv2d(512, 512, 3, padding=1))
        self.check(m, randn(1, 256, 56, 56), config="v5e")
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", "v5e", "-o", os.path.join(d, "drained.tpub"))
        tpusim("disasm", os.path.join(d, "drained.tpub"), "-o", os.path.join(d, "drained.s"))
        with open(os.path.join(d, "drained.s")) as f:
            text = f.read()
        drain = re.compile(r"^(\s*)(\S+)( s\d+, 0)?(\s+# pc \d+ \([^\n]*: drain before copy\))$", re.M)
        found = drain.findall(text)
        self.assertGreaterEqual(len(found), 2, text[:2000])
        self.assertEqual({op for _, op, _, _ in found}, {"sem.set"})
        with open(os.path.join(d, "fenced.s"), "w") as f:
            f.write(drain.sub(lambda g: g.group(1) + "fence" + g.group(4), text))
        tpusim("asm", os.path.join(d, "fenced.s"), "-o", os.path.join(d, "fenced.tpub"))
        runs = {}
        for name in ("drained", "fenced"):
            out, stats = os.path.join(d, name), os.path.join(d, name + ".json")
            tpusim("run", os.path.join(d, name + ".tpub"), "--config", "v5e", "--input",
                   f"{os.path.basename(x)[:-4]}={x}", "--output-dir", out, "--stats", stats)
            with open(stats) as f:
                runs[name] = json.load(f)["cycles"]
            runs[name + " out"] = [np.load(os.path.join(out, o)) for o in sorted(os.listdir(out))]
        for a, b in zip(runs["drained out"], runs["fenced out"]):
            np.testing.assert_array_equal(a, b)
        self.assertLess(runs["drained"], runs["fenced"])

    def test_outputs_are_written_while_later_kernels_run(self):
        # On v5e (one core, the intermediates kept in VMEM) a graph output held as bf16 (here the transposes of a
        # Linear's output, as a decoder's present keys and values are) is cast to f32 and stored while the first
        # kernel after its producer runs, not after the last node ("writes the graph outputs of ... while it runs",
        # codegen.cpp: place_output_casts): against torch, and the same bits as with a fence between every two
        # kernels (--no-kernel-overlap, which leaves every output to the end), in fewer cycles. Where that kernel is
        # a LayerNorm overlapped with the GEMM after it (neither can take them) and no kernel after can, they run as
        # a kernel of their own at the end ("early_casts"): the same bits too, and the cycles within 0.1% of the
        # fenced run's (both write the outputs at the end; the LayerNorm's overlap with its GEMM gains little here:
        # 11,237 against 11,274, and since its scale and shift load behind its first passes, 11,108 against 11,106).
        class Present(nn.Module):
            def __init__(self, norm_last):
                super().__init__()
                self.a, self.b, self.c = nn.Linear(256, 512), nn.Linear(512, 512), nn.Linear(512, 256)
                self.norm = nn.LayerNorm(512)
                self.norm_last = norm_last

            def forward(self, x):
                h = self.a(x)
                k, v = h[:, :256].t(), h[:, 256:].t()
                if self.norm_last:
                    return k, v, self.c(self.norm(h))
                g = torch.softmax(h @ self.b(h).t(), dim=-1) @ h
                return k, v, self.c(g)

        for norm_last in (False, True):
            with self.subTest(norm_last=norm_last):
                torch.manual_seed(8)
                self.check(Present(norm_last), randn(384, 256), config="v5e")
                kernels, _, notes = self.compiled("v5e")
                early = [n for n in notes if n.startswith("writes the graph outputs of")]
                self.assertEqual(bool(early), not norm_last, notes)
                self.assertEqual("early_casts" in kernels, norm_last, kernels)
                d = os.path.join(self.dir, f"case{self.n}")
                x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
                self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x,
                                                         slack=0.001 if norm_last else 0.0)

    def test_sibling_linears_share_one_gemm(self):
        # Linears reading one activation (a transformer's q, k and v projections; k and v narrower, as grouped-query
        # attention makes them) run as one GEMM on their weights side by side and a Split (fuse_siblings.cpp): the
        # compile report has the one node "/q/MatMul+...+/v/MatMul" (with "+/q/Add+...+/v/Add"), and the outputs are those of the same
        # Linears each on a copy of the input (x + 0, x * 1: not siblings), bit for bit, and torch's within bounds.
        # Shapes: 3-D, 2-D, and a decoded token (one row: the Split is a view); bf16 and int8; with and without bias;
        # one matrix unit (v4-like) and the whole chip (v4).
        # Parts of equal size in whole strips of the matrix unit (128 columns here) are stored one after the other by
        # the GEMM (GROUP_N), so that the Split is views: no copy kernel in its node then.
        class Siblings(nn.Module):
            def __init__(self, k, n, bias, apart, equal=False):
                super().__init__()
                kv = n if equal else n // 2
                self.q, self.k, self.v = (nn.Linear(k, n, bias=bias), nn.Linear(k, kv, bias=bias),
                                          nn.Linear(k, kv, bias=bias))
                self.apart = apart

            def forward(self, x):
                xk, xv = (x + 0, x * 1) if self.apart else (x, x)
                return self.q(x), self.k(xk), self.v(xv)

        for shape, bias, precision, n, config in [
                ((2, 5, 32), True, None, 48, None), ((7, 32), False, None, 48, None),
                ((1, 1, 32), True, None, 48, None), ((2, 5, 32), True, "int8", 48, None),
                ((2, 5, 32), True, None, 128, None), ((9, 32), False, "int8", 256, None),
                ((4, 10, 32), True, None, 128, "v4"), ((4, 10, 32), True, "int8", 128, "v4")]:
            name = f"{shape} bias{int(bias)} {precision or 'bf16'} n{n} {config or 'v4-like'}"
            with self.subTest(name):
                torch.manual_seed(6)
                fused = Siblings(shape[-1], n, bias, False, equal=n % 128 == 0)
                apart = Siblings(shape[-1], n, bias, True, equal=n % 128 == 0)
                apart.load_state_dict(fused.state_dict())
                x = randn(*shape)
                bounds = {"cos": INT8_MIN_COSINE, "rel": INT8_MAX_REL_L2} if precision else {}
                got, _ = self.check(fused, x, name=name, precision=precision, config=config, **bounds)
                ref, _ = self.run_model(apart, [x], precision=precision, config=config)
                for g, r in zip(got, ref):
                    np.testing.assert_array_equal(g, r, err_msg=name)
                d, path, _, _, _ = self.export(fused, [x])
                report = os.path.join(d, "r.json")
                tpusim("compile", path, "--report-json", report, *(["--precision", precision] if precision else []),
                       *(["--config", config] if config else []))
                regions = json.load(open(report))["regions"]
                nodes = {r["name"]: i for i, r in enumerate(regions) if r["kind"] == "node"}
                one = "/q/MatMul+...+/v/MatMul" + ("+/q/Add+...+/v/Add" if bias else "")
                self.assertIn(one, nodes, name)
                # the Split's kernels (the outputs' casts to float32 are there either way)
                split = nodes.get("/q/MatMul+...+/v/MatMul.split", -1)
                kernels = [r["name"] for r in regions if r["kind"] == "kernel" and r.get("parent") == split]
                self.assertEqual("copy" in kernels, not (n % 128 == 0 or shape[:-1] == (1, 1)), f"{name}: {kernels}")

    def test_mlp(self):
        m = nn.Sequential(nn.Linear(24, 48), nn.GELU(), nn.Linear(48, 10))
        self.check(m, randn(5, 24))
        self.check(m, randn(1, 24), name="batch1")

    def test_matmul_activations(self):
        for a, b in [((5, 8), (8, 6)), ((2, 5, 8), (2, 8, 6)), ((2, 3, 5, 8), (2, 3, 8, 6)),
                     ((2, 3, 5, 8), (8, 6)), ((2, 5, 8), (8, 6)), ((1, 3, 5, 8), (2, 1, 8, 6)),
                     ((2, 1, 5, 8), (3, 8, 6)), ((3, 5, 8), (1, 8, 6)), ((1, 4, 1, 8), (1, 4, 8, 9))]:
            with self.subTest(a=a, b=b):
                m = fn(lambda s, x, y: torch.matmul(x, y))
                self.check(m, randn(*a), randn(*b), name=f"{a}@{b}")

    def test_q_kT(self):
        for shape in [(2, 4, 6, 8), (1, 2, 16, 32), (3, 5, 8)]:
            with self.subTest(shape=shape):
                m = fn(lambda s, q, k: q @ k.transpose(-1, -2) / 8 ** 0.5)
                self.check(m, randn(*shape), randn(*shape), name=f"{shape}")

    def test_attention_scores_softmax_v(self):
        def attn(s, q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
        self.check(fn(attn), randn(2, 3, 6, 16), randn(2, 3, 6, 16), randn(2, 3, 6, 16))

    def test_outer_product(self):
        # a contracted dimension of 1: a broadcasting Mul on the vector unit, one f32 product per element as PyTorch
        # computes it (bit-identical), not bf16 operands on the matrix unit
        for a, b in [((5, 1), (1, 6)), ((2, 3, 5, 1), (1, 6)), ((3, 1), (2, 1, 4)), ((2, 1, 4, 1), (3, 1, 5))]:
            with self.subTest(a=a, b=b):
                self.check(fn(lambda s, x, y: torch.matmul(x, y)), randn(*a) * 100, randn(*b), name=f"{a}@{b}",
                           exact="f32")
        self.check(fn(lambda s, x: x @ s.w, w=randn(1, 7)), randn(4, 1), name="x @ constant [1, 7]", exact="f32")

    def test_x_at_parameter(self):
        for shape, w in [((3, 5, 16), (16, 10)), ((4, 16), (16, 10)), ((1, 16), (16, 10))]:
            with self.subTest(shape=shape):
                m = fn(lambda s, x: x @ s.w, w=nn.Parameter(torch.randn(*w)))
                self.check(m, randn(*shape), name=f"{shape}@{w}")

    def test_parameter_at_x(self):
        m = fn(lambda s, x: s.w @ x, w=nn.Parameter(torch.randn(6, 16)))
        self.check(m, randn(2, 16, 5))

    def test_larger_than_one_tile(self):
        self.check(nn.Linear(300, 260), randn(5, 300), name="linear 300->260")
        self.check(nn.Linear(300, 260), randn(1, 300), name="linear 300->260 batch 1")
        self.check(fn(lambda s, a, b: a @ b), randn(2, 130, 200), randn(2, 200, 140), name="bmm 130x200x140")

    def test_transposed_and_broadcast_operands(self):
        self.check(fn(lambda s, a, b: a.t() @ b), randn(6, 5), randn(6, 4), name="a.T @ b")
        self.check(fn(lambda s, a, b: a @ b), randn(1, 4, 6, 8), randn(3, 4, 8, 5), name="batch-1 a")

    def test_opset17(self):
        self.check(nn.Linear(20, 12), randn(2, 5, 20), opset=17, name="linear")
        self.check(fn(lambda s, q, k: q @ k.transpose(-1, -2)), randn(2, 4, 6, 8), randn(2, 4, 6, 8), opset=17,
                   name="qkT")


class Attention(OpCase):
    """Self-attention blocks as torch exports them (projections, view/transpose into heads, q @ k^T / sqrt(d), a mask,
    softmax, @ v, transpose back; also Hugging Face's float32 softmax, grouped-query attention through repeat_kv and
    nn.MultiheadAttention's 3-D batched matmuls) compile to one call of the whole-chip attention kernel per block
    (compiler_backend/src/ops_attention.cpp), checked in the compile report's kernels; results against PyTorch
    (bf16 operands: cosine >= 0.9999). A mask the kernel cannot take (one that varies per query row and comes from
    the inputs) keeps the per-head lowering, and the report says why."""

    COS = 0.9999

    class Block(nn.Module if torch else object):
        def __init__(self, hidden=64, heads=4, seq=24, causal=None):
            super().__init__()
            self.h, self.causal = heads, causal
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.register_buffer("tril", torch.tril(torch.ones(seq, seq, dtype=torch.bool)))

        def forward(self, x, mask=None):
            B, S, E = x.shape
            D = E // self.h
            q, k, v = (t.view(B, S, self.h, D).transpose(1, 2) for t in self.qkv(x).split(E, dim=2))
            s = q @ k.transpose(-1, -2) / math.sqrt(D)
            if self.causal is not None:  # GPT-2's export: Where(constant mask, fill, scores)
                s = s.masked_fill(~self.tril[:S, :S], self.causal)
            if mask is not None:
                s = s + mask
            o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(B, S, E)
            return self.proj(o)

    def expect_fused(self, blocks):
        for config in ("v5e", "v4-like"):
            kernels, nodes, notes = self.compiled(config)
            self.assertEqual(kernels.count("attention_chip"), blocks, f"{config}: {kernels}")
            self.assertFalse([n for n in nodes if "Softmax" in n and "+...+" not in n], f"{config}: {nodes}")
            self.assertEqual(notes, [], config)

    def uses_cdot(self, config="v5e"):
        """Whether the last case's program, compiled on `config`, has vpu.cdot: the vector unit's attention."""
        d = os.path.join(self.dir, f"case{self.n}")
        b = os.path.join(d, f"model-{config}.tpub")
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", config, "-o", b)
        s = os.path.join(d, f"model-{config}.s")
        tpusim("disasm", b, "-o", s)
        with open(s) as f:
            return "vpu.cdot" in f.read()

    def test_bidirectional(self):
        self.check(self.Block(), randn(2, 24, 64), cos=self.COS)
        self.expect_fused(1)
        self.assertFalse(self.uses_cdot())  # 24 query rows per head: the matrix units

    def test_causal(self):
        for fill in (-10000.0, float("-inf")):
            with self.subTest(fill=fill):
                self.check(self.Block(causal=fill), randn(2, 24, 64), cos=self.COS, name=f"fill {fill}")
                self.expect_fused(1)

    def test_padding_mask(self):
        # BERT's: (1 - attention_mask) * -10000 over [B, 1, 1, S], from an input: one bias per key and batch.
        m = fn(lambda s, x, am: s.b(x, (1.0 - am[:, None, None, :].float()) * -10000.0))
        m.b = self.Block()
        am = torch.ones(2, 24, dtype=torch.int64)
        am[1, 17:] = 0
        self.check(m, randn(2, 24, 64), am, cos=self.COS)
        self.expect_fused(1)

    def test_decode_one_query_over_many_keys(self):
        def attn(s, q, k, v):
            return torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1) @ v
        self.check(fn(attn), randn(2, 4, 1, 16), randn(2, 4, 40, 16), randn(2, 4, 40, 16), cos=self.COS)
        self.expect_fused(1)
        # one query row per head: the vector unit's kernel (docs/compiler.md), on every chip
        for config in ("v5e", "v4-like", "h200-like"):
            self.assertTrue(self.uses_cdot(config), config)

    def test_mask_per_query_from_the_inputs_is_not_fused(self):
        # A [B, 1, S, S] mask computed from an input varies per query row: the kernel takes a constant causal mask
        # or a bias per key only, so the block keeps the per-head lowering, and the report says why.
        m = fn(lambda s, x, mask: s.b(x, mask))
        m.b = self.Block()
        mask = torch.zeros(2, 1, 24, 24)
        mask[0, 0, 3:, :2] = -10000.0
        self.check(m, randn(2, 24, 64), mask, cos=self.COS)
        kernels, nodes, notes = self.compiled()
        self.assertNotIn("attention_chip", kernels)
        self.assertEqual(len(notes), 1, notes)
        self.assertIn("attention not fused: the mask [2,1,24,24] is neither a constant causal mask nor one bias per "
                      "key", notes[0])

    def test_softmax_in_float32(self):
        # Hugging Face's softmax(s, dim=-1, dtype=torch.float32).to(q.dtype) in a float32 model exports two Casts to
        # float between the Softmax and the MatMul with V: nothing to compute, the group still fuses.
        def attn(s, q, k, v):
            p = torch.softmax(q @ k.transpose(-1, -2) * 0.25, dim=-1, dtype=torch.float32).to(q.dtype)
            return p @ v
        self.check(fn(attn), randn(2, 4, 12, 16), randn(2, 4, 12, 16), randn(2, 4, 12, 16), cos=self.COS)
        self.expect_fused(1)

    @staticmethod
    def repeat_kv(x, n_rep):
        """transformers' repeat_kv: [B, KV, S, D] -> [B, KV * n_rep, S, D] by expand + reshape."""
        b, kv, s, d = x.shape
        return x[:, :, None, :, :].expand(b, kv, n_rep, s, d).reshape(b, kv * n_rep, s, d)

    def test_grouped_query_attention(self):
        # 8 query heads over 2 key/value heads, k and v repeated as repeat_kv does, the causal mask of
        # _make_causal_mask added (finfo.min above the diagonal): read unrepeated (the kernel's kv_heads), the
        # repeats (Unsqueeze, Expand, Reshape) gone. k given as [B, KV, S, D], v through a transpose of [B, S, KV, D].
        S = 20
        mask = torch.full((S, S), torch.finfo(torch.float32).min).triu(1)[None, None]

        def attn(s, q, k, v):
            k, v = Attention.repeat_kv(k, 4), Attention.repeat_kv(v.transpose(1, 2), 4)
            return torch.softmax(q @ k.transpose(2, 3) / 4.0 + s.mask, dim=-1) @ v
        self.check(fn(attn, mask=mask), randn(2, 8, S, 16), randn(2, 2, S, 16), randn(2, S, 2, 16), cos=self.COS)
        self.expect_fused(1)
        _, nodes, _ = self.compiled()
        self.assertFalse([n for n in nodes if "Expand" in n or "Reshape" in n], nodes)

    def test_output_projection_weights_load_during_the_attention(self):
        # On v5e (one core) the output projection's first chunk of weights loads while the fused attention before it
        # runs (docs/compiler.md, "A row-wise kernel and the GEMM after it, overlapped": the load's instructions
        # follow the attention's, and the GEMM's VMEM starts past the attention's). Against torch, and the same bits
        # as the model compiled with a fence between every two kernels (--no-kernel-overlap), in fewer cycles.
        self.check(self.Block(hidden=768, heads=12, seq=128), randn(1, 128, 768), cos=self.COS, config="v5e")
        d = os.path.join(self.dir, f"case{self.n}")
        model = os.path.join(d, "model.onnx")
        names = [f for f in os.listdir(d) if f.endswith(".npy")]
        self.assertEqual(len(names), 1, names)
        x = os.path.join(d, names[0])
        tpusim("compile", model, "--config", "v5e", "-o", os.path.join(d, "m.tpub"))
        dis = tpusim("disasm", os.path.join(d, "m.tpub")).stdout
        self.assertRegex(dis, r"the first weights of \S*proj\S*, loading while attention_chip runs")
        self.same_bits_as_fenced_in_fewer_cycles(model, x)

    class Layer(nn.Module if torch else object):
        """A BERT-style layer: the attention Block, then a residual LayerNorm and the FFN (GELU)."""
        def __init__(self, hidden, heads, seq):
            super().__init__()
            self.attn = Attention.Block(hidden=hidden, heads=heads, seq=seq)
            self.ln1, self.ln2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.ffn = nn.Sequential(nn.Linear(hidden, 4 * hidden), nn.GELU(), nn.Linear(4 * hidden, hidden))

        def forward(self, x):
            h = self.ln1(x + self.attn(x))
            return self.ln2(h + self.ffn(h))

    def test_ffn_weights_load_during_the_attention(self):
        # On v5e (one core) with the intermediates in HBM (no weight stream, which otherwise loads these weights
        # itself), the fused attention issues, right after its own loads, the loads of the FFN's first Linear's
        # first weights (two kernels later: after the output projection and the LayerNorm) into the top of VMEM,
        # where that GEMM finds them (docs/compiler.md, "Weights that stream in during the attention"), and the QKV
        # projection before it loads the output projection's first weights after its last tile's loads; the compile
        # report notes both, and neither where the weight stream runs (the intermediates in VMEM). Against torch,
        # and the same bits as with a fence between every two kernels (--no-kernel-overlap), in fewer cycles.
        self.check(self.Layer(hidden=512, heads=8, seq=128), randn(1, 128, 512), cos=self.COS, config="v5e")
        for extra, areas in ((["--intermediates-in-hbm"], True), ([], False)):
            _, _, notes = self.compiled("v5e", *extra)
            for target in ("ffn", "proj"):
                found = [n for n in notes if re.search(rf"loads \d+ bytes of the weights of \S*{target}\S*", n)]
                self.assertEqual(bool(found), areas, (extra, target, notes))
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x, "v5e", "--intermediates-in-hbm")

    def test_ffn_weights_load_during_the_attention_on_each_core(self):
        # On v4 (two cores, the intermediates in the shared memory: no weight stream), each core issues, right after
        # its attention item's loads, the loads of its own first tile's first weights of the FFN's first Linear (the
        # tiles of 512 columns: core 0's columns 0-511, core 1's 512-1023) into the top of its VMEM, where that
        # core's first tile finds them; the report notes it. Against torch, and the same bits as with a fence
        # between every two kernels, in fewer cycles.
        self.check(self.Layer(hidden=512, heads=8, seq=128), randn(1, 128, 512), cos=self.COS, config="v4")
        _, _, notes = self.compiled("v4")
        found = [n for n in notes if re.search(r"loads \d+ bytes of the weights of \S*ffn\S*", n)]
        self.assertTrue(found, notes)
        d = os.path.join(self.dir, f"case{self.n}")
        x = os.path.join(d, [f for f in os.listdir(d) if f.endswith(".npy")][0])
        self.same_bits_as_fenced_in_fewer_cycles(os.path.join(d, "model.onnx"), x, "v4")

    def test_grouped_query_decode_step(self):
        # A LLaMA-style decode step: one query for each of 8 heads over a cache of 33 keys of 2 kv heads (4 query rows
        # per kv head) and a padding mask per key: the vector unit's kernel, against torch on v4-like and on
        # h200-like (132 cores, 228 KB of VMEM).
        def attn(s, q, k, v, am):
            k, v = Attention.repeat_kv(k, 4), Attention.repeat_kv(v, 4)
            bias = (1.0 - am[:, None, None, :].float()) * -10000.0
            return torch.softmax(q @ k.transpose(2, 3) * 0.25 + bias, dim=-1) @ v
        am = torch.ones(2, 33, dtype=torch.int64)
        am[1, :5] = 0
        for config in ("v4-like", "h200-like"):
            with self.subTest(config=config):
                self.check(fn(attn), randn(2, 8, 1, 16), randn(2, 2, 33, 16), randn(2, 2, 33, 16), am, cos=self.COS,
                           config=config, name=config)
                self.expect_fused(1)
                self.assertTrue(self.uses_cdot(config), config)

    def test_causal_mask_expanded_over_the_batch(self):
        # transformers' _make_causal_mask(...).expand(bsz, 1, S, S): a constant [B, 1, S, S] mask, causal in every
        # batch; as an Add (finfo.min) and as a Where
        S = 16
        tri = torch.full((S, S), torch.finfo(torch.float32).min).triu(1)[None, None].expand(2, 1, S, S).contiguous()
        add = fn(lambda s, q, k, v: torch.softmax(q @ k.transpose(2, 3) * 0.25 + s.m, dim=-1) @ v, m=tri)
        where = fn(lambda s, q, k, v: torch.softmax((q @ k.transpose(2, 3) * 0.25).masked_fill(s.m != 0, -1e4),
                                                    dim=-1) @ v, m=tri)
        for name, m in (("add", add), ("where", where)):
            with self.subTest(name):
                self.check(m, randn(2, 4, S, 16), randn(2, 4, S, 16), randn(2, 4, S, 16), cos=self.COS, name=name)
                self.expect_fused(1)

    def test_grouped_query_attention_repeat_also_read_elsewhere(self):
        # The repeated k is an output too: it is computed, and the kernel still reads k unrepeated.
        def attn(s, q, k, v):
            k, v = Attention.repeat_kv(k, 2), Attention.repeat_kv(v, 2)
            return torch.softmax(q @ k.transpose(2, 3) * 0.25, dim=-1) @ v, k
        self.check(fn(attn), randn(1, 4, 10, 16), randn(1, 2, 10, 16), randn(1, 2, 10, 16), cos=self.COS)
        self.expect_fused(1)

    def test_multihead_attention_module(self):
        # nn.MultiheadAttention exports batched matmuls of 3-D [batch * heads, S, head_dim] operands: one batch of
        # batch * heads heads for the kernel. Without and with a constant causal attn_mask.
        torch.manual_seed(8)
        mha = nn.MultiheadAttention(64, 4)
        S = 18
        causal = torch.full((S, S), float("-inf")).triu(1)
        for mask in (None, causal):
            with self.subTest(mask=mask is not None):
                m = fn(lambda s, x, mask=mask: s.mha(x, x, x, attn_mask=mask, need_weights=False)[0])
                m.mha = mha
                self.check(m, randn(S, 2, 64), cos=self.COS)
                self.expect_fused(1)

    def test_same_bits_on_one_unit_and_the_whole_chip(self):
        # The kernel's results depend on its key block only, which the compiler takes from one unit's plan.
        self.check(self.Block(causal=-10000.0, seq=40), randn(2, 40, 64), cos=self.COS)
        d = os.path.join(self.dir, f"case{self.n}")
        outs = []
        for sets in ([], ["--set", "chip.cores=1", "--set", "core.mxus=1"]):
            out = os.path.join(d, f"chip{len(outs)}")
            tpusim("run", os.path.join(d, "model.onnx"), "--input", f"x0={os.path.join(d, 'x0.npy')}", "--config",
                   "h200-like", *sets, "--output-dir", out)
            outs.append(np.load(os.path.join(out, "y.npy")))
        np.testing.assert_array_equal(outs[0], outs[1])


class Elementwise(OpCase):
    """Binary arithmetic with every kind of broadcast, unary functions and activations, masks (f32 on the VPU)."""

    BROADCASTS = [(3, 1, 1), (1, 9), (), (2, 1, 1, 9), (2, 3, 7, 9), (9,), (1, 3, 1, 1), (7, 1)]
    OPS = {"add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b,
           "div": lambda a, b: a / b}

    def test_binary_with_input(self):
        for op, f in self.OPS.items():
            for bshape in self.BROADCASTS:
                with self.subTest(op=op, other=bshape):
                    y = torch.rand(bshape) + 0.5 if op == "div" else randn(*bshape)
                    # + - * are one f32 rounding each: bit-identical (measured); / within F32_REL_L2
                    self.check(fn(lambda s, a, b, f=f: f(a, b)), randn(2, 3, 7, 9), y, name=f"{op} {bshape}",
                               **self.bound(op))

    def test_binary_reversed_broadcast(self):
        # the smaller operand first: [C,1,1] - x, [1,W] / x
        self.check(fn(lambda s, a, b: b - a), randn(2, 3, 7, 9), randn(3, 1, 1), name="c11-x", exact="f32")
        self.check(fn(lambda s, a, b: b / a), torch.rand(2, 3, 7, 9) + 0.5, randn(1, 9), name="1w/x", rel=F32_REL_L2)
        # both operands broadcast: [2,1,7,1] * [1,3,1,9]
        self.check(fn(lambda s, a, b: a * b), randn(2, 1, 7, 1), randn(1, 3, 1, 9), name="both", exact="f32")
        self.check(fn(lambda s, a, b: torch.minimum(a, b)), randn(2, 3, 7, 9), randn(1, 9), name="min", exact="f32")
        self.check(fn(lambda s, a, b: torch.maximum(a, b)), randn(2, 3, 7, 9), randn(1, 9), name="max", exact="f32")
        self.check(fn(lambda s, a, b: a / (b.abs() + 1)), randn(2, 3, 7, 9), randn(3, 1, 1), name="a/(|b|+1)",
                   rel=F32_REL_L2)

    def test_binary_with_constant(self):
        for op, f in self.OPS.items():
            for bshape in [(3, 1, 1), (1, 9), (2, 1, 1, 9), (9,)]:
                with self.subTest(op=op, other=bshape):
                    c = torch.rand(*bshape) + 0.5 if op == "div" else randn(*bshape)
                    m = fn(lambda s, a, f=f: f(a, s.c), c=c)
                    self.check(m, randn(2, 3, 7, 9), name=f"{op} const{bshape}", **self.bound(op))

    @staticmethod
    def bound(op):
        return {"rel": F32_REL_L2} if op == "div" else {"exact": "f32"}

    def test_scalars(self):
        for name, f in {"x+1.5": lambda x: x + 1.5, "x-2": lambda x: x - 2, "2-x": lambda x: 2 - x,
                        "x*3": lambda x: x * 3, "x/7": lambda x: x / 7, "1/x": lambda x: 1 / x,
                        "x*0.5+1": lambda x: x * 0.5 + 1}.items():
            with self.subTest(name):
                # x/7 may run as x * (1/7): one ulp off; the others are bit-identical (measured)
                bound = {"rel": F32_REL_L2} if name == "x/7" else {"exact": "f32"}
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9) + 4, name=name, **bound)

    UNARY = {
        "pow2": (lambda x: x ** 2, "any"), "pow3": (lambda x: x ** 3, "any"), "pow0.5": (lambda x: x ** 0.5, "pos"),
        "sqrt": (torch.sqrt, "pos"), "exp": (torch.exp, "any"), "abs": (torch.abs, "any"), "neg": (torch.neg, "any"),
        "reciprocal": (torch.reciprocal, "pos"), "sigmoid": (torch.sigmoid, "any"), "tanh": (torch.tanh, "any"),
        "erf": (torch.erf, "any"), "relu": (torch.relu, "any"), "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), "any"),
        "clamp": (lambda x: torch.clamp(x, -0.5, 0.8), "any"), "clamp_min": (lambda x: torch.clamp(x, min=0.1), "any"),
        "relu6": (F.relu6, "any"), "gelu": (F.gelu, "any"), "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), "any"),
        "silu": (F.silu, "any"), "hardswish": (F.hardswish, "any"), "hardsigmoid": (F.hardsigmoid, "any"),
        "rsqrt": (torch.rsqrt, "pos"), "x*sigmoid(1.702x)": (lambda x: x * torch.sigmoid(1.702 * x), "any"),
        "hardtanh": (F.hardtanh, "any"), "clamp_max": (lambda x: x.clamp(max=0.3), "any"),
    }
    # one IEEE f32 operation (or none): bit-identical to PyTorch (measured)
    EXACT = {"abs", "neg", "relu", "leaky_relu", "clamp", "clamp_min", "clamp_max", "relu6", "hardtanh", "pow2",
             "reciprocal"}

    def test_unary(self):
        for name, (f, domain) in self.UNARY.items():
            with self.subTest(name):
                x = randn(2, 3, 7, 9) * 2
                if domain == "pos":
                    x = x.abs() + 0.1
                bound = {"exact": "f32"} if name in self.EXACT else {"rel": F32_REL_L2}
                self.check(fn(lambda s, x, f=f: f(x)), x, name=name, **bound)

    def test_unary_opset17(self):
        for name in ("gelu", "gelu_tanh", "sigmoid", "erf"):
            with self.subTest(name):
                f = self.UNARY[name][0]
                self.check(fn(lambda s, x, f=f: f(x)), randn(3, 40) * 2, name=name, opset=17, rel=F32_REL_L2)

    def test_operators_torch_does_not_emit(self):
        """Operators other exporters emit (torch decomposes them): a model made with onnx.helper, against numpy."""
        cases = {"Softsign": lambda x: x / (1 + np.abs(x))}
        for op, ref in cases.items():
            with self.subTest(op):
                x = (randn(3, 40) * 3).numpy()
                graph = onnx.helper.make_graph(
                    [onnx.helper.make_node(op, ["x"], ["y"], name="n")], "g",
                    [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))],
                    [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, list(x.shape))])
                path = os.path.join(self.dir, op + ".onnx")
                onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), path)
                np.save(os.path.join(self.dir, "x.npy"), x)
                out = os.path.join(self.dir, op + "_out")
                tpusim("run", path, "--input", "x=" + os.path.join(self.dir, "x.npy"), "--output-dir", out)
                c, e, m = metrics(np.load(os.path.join(out, "y.npy")), ref(x.astype(np.float64)))
                print(f"CASE {type(self).__name__}.{self._testMethodName}[{op}] cos={c:.6f} relL2={e:.3e} "
                      f"maxabs={m:.3e}", file=sys.stderr)
                self.assertLessEqual(e, F32_REL_L2, op)

    def test_chain(self):
        # a fused chain of elementwise ops with broadcast operands: (x * g + b).sigmoid() * x - 1 / (x^2 + 1)
        m = fn(lambda s, x: torch.sigmoid(x * s.g + s.b) * x - 1 / (x * x + 1), g=randn(3, 1, 1), b=randn(1, 9))
        self.check(m, randn(2, 3, 7, 9), rel=F32_REL_L2)

    def causal(self, fill, softmax, T=8, sliced=False):
        mask = torch.tril(torch.ones(16 if sliced else T, 16 if sliced else T, dtype=torch.bool))

        def f(s, x):
            m = s.mask[:x.shape[-2], :x.shape[-1]] if sliced else s.mask
            y = x.masked_fill(~m, fill)
            return torch.softmax(y, dim=-1) if softmax else y
        return fn(f, mask=mask)

    def test_masked_fill_causal(self):
        x = randn(2, 3, 8, 8)
        self.check(self.causal(-1e4, False), x, name="-1e4", exact="f32")
        self.check(self.causal(-1e4, True), x, name="-1e4 softmax", rel=F32_REL_L2)
        self.check(self.causal(float("-inf"), True), x, name="-inf softmax", rel=F32_REL_L2)
        self.check(self.causal(float("-inf"), True, sliced=True), x, name="-inf softmax, sliced buffer",
                   rel=F32_REL_L2)

    def test_masked_fill_minus_inf_alone(self):
        got, ref = self.run_model(self.causal(float("-inf"), False), [randn(1, 2, 8, 8)])
        np.testing.assert_array_equal(got[0], ref[0])  # -inf where masked, x elsewhere
        print(f"CASE {type(self).__name__}.{self._testMethodName} exact (with -inf)", file=sys.stderr)

    def test_where_constant_mask(self):
        mask = torch.rand(7, 9) > 0.5
        m = fn(lambda s, x, y: torch.where(s.mask, x, y), mask=mask)
        self.check(m, randn(2, 3, 7, 9), randn(2, 3, 7, 9), name="where(x,y)", exact="f32")
        m = fn(lambda s, x: torch.where(s.mask, x, torch.zeros(())), mask=mask)
        self.check(m, randn(2, 3, 7, 9), name="where(x,0)", exact="f32")

    def test_opset17_binary(self):
        self.check(fn(lambda s, a, b: a * b + a / (b.abs() + 1)), randn(2, 3, 7, 9), randn(1, 9), opset=17,
                   rel=F32_REL_L2)


class Normalize(OpCase):
    """Softmax, LayerNorm (opset 13 decomposed, 17 native), reductions over the last axis."""

    def test_softmax_last(self):
        for shape in [(4, 10), (2, 3, 17), (2, 3, 5, 7), (1, 300), (3, 1)]:
            with self.subTest(shape=shape):
                self.check(fn(lambda s, x: torch.softmax(x * 3, dim=-1)), randn(*shape), name=f"{shape}",
                           rel=F32_REL_L2)
        self.check(fn(lambda s, x: torch.softmax(x, dim=3)), randn(2, 3, 5, 7), name="dim=3", rel=F32_REL_L2)
        self.check(fn(lambda s, x: torch.softmax(x, dim=-1)), randn(2, 3, 5, 7), opset=17, name="4d",
                   rel=F32_REL_L2)

    def test_softmax_wide_and_transposed(self):
        self.check(fn(lambda s, x: x.softmax(-1)), randn(2, 1000), name="1000", rel=F32_REL_L2)
        self.check(fn(lambda s, x: x.softmax(-1)), randn(2, 5000), name="5000", rel=F32_REL_L2)
        self.check(fn(lambda s, x: x.transpose(-1, -2).softmax(-1)), randn(2, 3, 7, 9), name="after transpose",
                   rel=F32_REL_L2)
        self.check(fn(lambda s, x: x.softmax(-1)), randn(4, 3, 1), name="last dim 1", exact="f32")

    def test_softmax_large_values(self):
        # max subtraction: logits of 80 would overflow exp in f32 without it
        self.check(fn(lambda s, x: torch.softmax(x, dim=-1)), randn(3, 12) * 30 + 50, rel=F32_REL_L2)

    def test_layernorm(self):
        for shape, dim, affine in [((2, 5, 16), 16, True), ((4, 33), 33, True), ((1, 7, 64), 64, False),
                                   ((2, 3, 4, 10), 10, True), ((3, 1000), 1000, True)]:
            # torch 1.13 exports LayerNorm without affine parameters at opset 17 as a LayerNormalization with an
            # empty scale input, which its own ONNX checker rejects: that combination is exported at 13 only
            for opset in ((13, 17) if affine else (13,)):
                with self.subTest(shape=shape, opset=opset):
                    torch.manual_seed(5)
                    m = nn.LayerNorm(dim, elementwise_affine=affine)
                    if affine:
                        with torch.no_grad():
                            m.weight.uniform_(0.5, 1.5)
                            m.bias.uniform_(-0.5, 0.5)
                    self.check(m, randn(*shape) * 2 + 1, name=f"{shape}", opset=opset, rel=F32_REL_L2)

    def test_layernorm_over_two_axes_opset13(self):
        # decomposed: ReduceMean over axes (-2, -1) of a 4-D value (a spatial mean, bf16 on the matrix unit) ...
        self.check(nn.LayerNorm((7, 9)), randn(2, 3, 7, 9))

    def test_layernorm_over_several_axes_opset17(self):
        # one LayerNormalization node over the last 2 or 3 axes: rows of their 63 or 189 elements, in f32
        self.check(nn.LayerNorm((7, 9)), randn(2, 3, 7, 9), opset=17, name="(7, 9)", rel=F32_REL_L2)
        m = nn.LayerNorm((3, 7, 9))
        with torch.no_grad():
            m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.5, 0.5)
        self.check(m, randn(2, 3, 7, 9), opset=17, name="(3, 7, 9) affine", rel=F32_REL_L2)

    def test_softmax_other_axes(self):
        # the axis moved last by a copy, the row-wise softmax, moved back: f32 throughout on a graph input
        x = randn(2, 3, 5, 7)
        for name, f in [("softmax(1)", lambda x: torch.softmax(x, 1)), ("softmax(2)", lambda x: torch.softmax(x, 2)),
                        ("softmax(0)", lambda x: torch.softmax(x, 0)),
                        ("log_softmax(1)", lambda x: torch.log_softmax(x, 1))]:
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), x, name=name, rel=F32_REL_L2)
        self.check(fn(lambda s, x: torch.softmax(x, 1)), x, name="softmax(1)", opset=17, rel=F32_REL_L2)
        # of a conv's (NHWC, bf16) output: over the channels
        m = nn.Sequential(nn.Conv2d(3, 6, 3, padding=1), nn.Softmax(1))
        self.check(m, randn(2, 3, 5, 6), name="conv + softmax(1)")

    def test_reduce_other_axes(self):
        # the reduced axes moved last by a copy (none when they are last already), one row reduction
        x = randn(2, 3, 5, 7)
        for name, f in [("mean(1)", lambda x: x.mean(1)), ("mean(1, keepdim)", lambda x: x.mean(1, keepdim=True)),
                        ("sum((0, 2))", lambda x: x.sum((0, 2))), ("sum()", lambda x: x.sum()),
                        ("sum((2, 3))", lambda x: x.sum((2, 3))), ("amax(1)", lambda x: x.amax(1)),
                        ("amax((1, 3))", lambda x: x.amax((1, 3), keepdim=True)), ("amin(-1)", lambda x: x.amin(-1)),
                        ("amin(0)", lambda x: x.amin(0))]:
            with self.subTest(name):
                exact = "f32" if "am" in name else None  # max and min are exact
                self.check(fn(lambda s, x, f=f: f(x)), x, name=name, rel=F32_REL_L2, exact=exact)
        self.check(fn(lambda s, x: x.mean(1)), randn(2, 5, 8), name="mean(1)", opset=17, rel=F32_REL_L2)

    def test_layernorm_in_block(self):
        m = nn.Sequential(nn.Linear(16, 32), nn.LayerNorm(32), nn.GELU(), nn.Linear(32, 16))
        for opset in (13, 17):
            with self.subTest(opset=opset):
                self.check(m, randn(2, 5, 16), opset=opset)

    def test_reduce_last(self):
        fns = {"sum": lambda x, k: x.sum(-1, keepdim=k), "mean": lambda x, k: x.mean(-1, keepdim=k),
               "amax": lambda x, k: x.amax(-1, keepdim=k), "max": lambda x, k: x.max(-1, keepdim=k)[0]}
        for name, f in fns.items():
            for keep in (True, False):
                for shape in [(2, 3, 17), (4, 9)]:
                    with self.subTest(name, keepdim=keep, shape=shape):
                        m = fn(lambda s, x, f=f, keep=keep: f(x, keep))
                        exact = "f32" if name in ("amax", "max") else None
                        self.check(m, randn(*shape), name=f"{name} keep{int(keep)} {shape}", rel=F32_REL_L2,
                                   exact=exact)

    def test_reduce_last_opset17(self):
        self.check(fn(lambda s, x: x.mean(-1, keepdim=True)), randn(2, 3, 17), opset=17, rel=F32_REL_L2)

    def test_reduce_then_broadcast_back(self):
        self.check(fn(lambda s, x: x.sum(-1, keepdim=True) * x), randn(2, 3, 7, 9), rel=F32_REL_L2)
        self.check(fn(lambda s, x: x - x.mean(-1).unsqueeze(-1)), randn(2, 3, 17))
        self.check(fn(lambda s, x: x.mean(-1)), randn(2, 3, 7, 9), name="4-D", rel=F32_REL_L2)
        # keepdim + squeeze splits the row-wise group: the reduced value goes through bf16, then softmax
        self.check(fn(lambda s, x: x.sum(-1, keepdim=True).squeeze(-1).softmax(-1)), randn(2, 3, 8),
                   name="sum keepdim, squeeze, softmax")

    # Reductions without keepdims followed by ops over the new last axis (a compiler bug found by this sweep,
    # fixed: the fused group used to read each reduced value as a row of its own).

    def test_reduced_sum_twice(self):
        self.check(fn(lambda s, x: x.sum(-1).sum(-1)), randn(3, 8), rel=F32_REL_L2)

    def test_reduced_sum_twice_3d(self):
        self.check(fn(lambda s, x: x.mean(-1).mean(-1)), randn(2, 3, 8), rel=F32_REL_L2)

    def test_reduced_amax_twice(self):
        self.check(fn(lambda s, x: x.amax(-1).amax(-1)), randn(3, 8), exact="f32")

    def test_reduced_sum_then_softmax(self):
        # attention pooling: scores = (h * w).sum(-1); weights = scores.softmax(-1)
        m = fn(lambda s, x: (x * s.w).sum(-1).softmax(-1), w=randn(8))
        self.check(m, randn(2, 3, 8), rel=F32_REL_L2)

    def test_reduced_mean_then_layernorm(self):
        self.check(fn(lambda s, x: F.layer_norm(x.mean(-1), (3,))), randn(2, 3, 8), rel=F32_REL_L2)

    def test_reduced_reduce_then_add_constant_row(self):
        self.check(fn(lambda s, x: x.sum(-1) + s.b, b=torch.tensor([1.0, 2.0, 3.0])), randn(2, 3, 8),
                   rel=F32_REL_L2)

    def test_reduced_reduce_then_add_input_row(self):
        self.check(fn(lambda s, x, b: x.sum(-1) + b), randn(2, 3, 8), randn(3), rel=F32_REL_L2)

    def test_rms_norm_decomposed(self):
        m = fn(lambda s, x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * s.w, w=torch.rand(24) + 0.5)
        self.check(m, randn(2, 5, 24), rel=F32_REL_L2)


    def test_reductions_over_any_axes(self):
        # ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSumExp (torch decomposes all but the last): onnx.helper
        # models against numpy in float64
        x = randn(3, 5, 7).numpy()
        refs = {"ReduceL1": lambda a, ax, k: np.abs(a).sum(ax, keepdims=k),
                "ReduceL2": lambda a, ax, k: np.sqrt((a * a).sum(ax, keepdims=k)),
                "ReduceSumSquare": lambda a, ax, k: (a * a).sum(ax, keepdims=k),
                "ReduceLogSumExp": lambda a, ax, k: np.log(np.exp(a).sum(ax, keepdims=k))}
        for op, ref in refs.items():
            for axes in ([2], [0], [1], [0, 2], [0, 1, 2]):
                for keep in (0, 1):
                    node = onnx.helper.make_node(op, ["x"], ["y0"], axes=axes, keepdims=keep)
                    r = ref(x.astype(np.float64), tuple(axes), bool(keep)).astype(np.float32)
                    self.check_onnx([node], {"x": x}, [r], name=f"{op} axes{axes} keep{keep}")
        self.check(fn(lambda s, x: torch.logsumexp(x, 1)), randn(3, 5, 7), name="torch logsumexp", rel=F32_REL_L2)
        self.check(fn(lambda s, x: torch.logsumexp(x * 100, -1)), randn(3, 9), name="logsumexp, large",
                   rel=F32_REL_L2)
        self.check(fn(lambda s, x: x.norm(dim=-1)), randn(4, 9), name="torch norm", rel=F32_REL_L2)

    def test_instance_norm(self):
        for shape in [(2, 4, 5, 6), (1, 3, 17), (2, 2, 3, 4, 5)]:
            torch.manual_seed(6)
            m = {4: nn.InstanceNorm2d, 3: nn.InstanceNorm1d, 5: nn.InstanceNorm3d}[len(shape)](shape[1], affine=True)
            with torch.no_grad():
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
            self.check(m, randn(*shape), name=f"{shape}", rel=F32_REL_L2)
        self.check(nn.InstanceNorm2d(3), randn(2, 3, 4, 4), name="no affine", rel=F32_REL_L2)
        # GroupNorm exports as InstanceNormalization over [N, G, -1] and an affine Mul/Add: the normalised value
        # reaches them through a Reshape, stored in bf16
        self.check(nn.GroupNorm(3, 6), randn(2, 6, 5, 5), name="GroupNorm")
        self.check(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.InstanceNorm2d(8, affine=True), nn.ReLU()),
                   randn(1, 3, 9, 9), name="conv, instance norm")


class MathFunctions(OpCase):
    """The vector unit's logarithm, sine, cosine and roundings (vpu.log, vpu.sin, vpu.cos, vpu.floor, vpu.ceil,
    vpu.round) and what composes from them: ONNX Log, Sin, Cos, Floor, Ceil, Round, Sign, Softplus, Mish (opset 18;
    torch exports x * tanh(softplus(x)) before), LogSoftmax, and rotary embeddings computed in the graph. Against
    PyTorch in float64 (ref64): f32 in and out of one row-wise kernel within F32_REL_L2 (log, sin and cos are the
    f32 nearest the exact value of the f32 input), the roundings and Sign bit-identical to float64's (exact)."""

    # name: (function, input)
    UNARY = {
        "log": (torch.log, lambda: torch.exp(torch.rand(4, 5, 33) * 14 - 7)),  # 1e-3 .. 1e3
        "sin": (torch.sin, lambda: randn(4, 5, 33) * 10),
        "cos": (torch.cos, lambda: randn(4, 5, 33) * 10),
        "sin_large": (torch.sin, lambda: randn(4, 5, 33) * 1e4),  # range reduction
        "cos_large": (torch.cos, lambda: randn(4, 5, 33) * 1e4),
        "softplus": (F.softplus, lambda: randn(4, 5, 33) * 10),
        "softplus_beta2": (lambda x: F.softplus(x, beta=2.0), lambda: randn(4, 5, 33) * 10),
        "mish": (F.mish, lambda: randn(4, 5, 33) * 5),
        "log_sigmoid": (F.logsigmoid, lambda: randn(4, 5, 33) * 5),
    }
    # exact in float64 too: the roundings of f32 inputs are f32 values; ties (k + 0.5) and zeros included
    EXACT = {
        "floor": (torch.floor, lambda: randn(4, 5, 33) * 10),
        "ceil": (torch.ceil, lambda: randn(4, 5, 33) * 10),
        "round": (torch.round, lambda: torch.randint(-40, 40, (4, 5, 33)).float() / 4),  # half to even
        "sign": (torch.sign, lambda: torch.randn(4, 5, 33) * (torch.rand(4, 5, 33) > 0.2)),
    }

    def test_unary(self):
        for opset in (13, 17):
            for name, (f, make) in self.UNARY.items():
                with self.subTest(name, opset=opset):
                    torch.manual_seed(3)
                    self.check(fn(lambda s, x, f=f: f(x)), make(), name=name, opset=opset, rel=F32_REL_L2,
                               ref64=True)

    def test_exact(self):
        for opset in (13, 17):
            for name, (f, make) in self.EXACT.items():
                with self.subTest(name, opset=opset):
                    torch.manual_seed(4)
                    self.check(fn(lambda s, x, f=f: f(x)), make(), name=name, opset=opset, exact="f32",
                               ref64=True)

    def test_log_softmax(self):
        for shape, scale in [((4, 10), 1), ((2, 3, 17), 3), ((1, 300), 1), ((3, 12), 30)]:
            for opset in (13, 17):
                with self.subTest(shape=shape, opset=opset):
                    self.check(fn(lambda s, x, k=scale: torch.log_softmax(x * k, dim=-1)), randn(*shape),
                               name=f"{shape}x{scale}", opset=opset, rel=F32_REL_L2, ref64=True)

    def test_in_a_network(self):
        # between matmuls: values in bf16 between kernels, bounds of a bf16 network
        m = nn.Sequential(nn.Linear(16, 32), nn.Mish(), nn.Linear(32, 32), nn.Softplus(), nn.Linear(32, 10),
                          nn.LogSoftmax(-1))
        self.check(m, randn(3, 7, 16), ref64=True)

    def test_rotary_embedding_in_graph(self):
        # LLaMA's rotary embedding with its cos and sin computed in the graph. rotate_half's Neg and Concat leave
        # a computed value in bf16 between kernels, so the result has a bf16 network's bounds (measured rel L2
        # 6.6e-4 against float64). The angles stay f32 although they pass through a Concat (the compiler keeps a
        # value that reaches Sin or Cos through data movement in f32): in bf16 they were off by up to 2^-9 of
        # their size, whole radians at position 1000 (rel L2 0.36 there before).
        d, T = 16, 12
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2).float() / d))

        def rotate_half(x):
            return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)

        def angles(pos, inv):  # as LLaMA writes it: the angles of one half, concatenated with themselves
            freqs = pos[:, None] * inv[None, :]
            return torch.cat((freqs, freqs), dim=-1)

        def rope(x, pos, inv):
            emb = angles(pos, inv)
            return x * emb.cos() + rotate_half(x) * emb.sin()

        # constant positions: Range, Mul, Concat, Cos and Sin fold at compile time (with the vector unit's cos, sin)
        const = fn(lambda s, x: rope(x, torch.arange(x.shape[-2]).float(), s.inv), inv=inv_freq)
        self.check(const, randn(2, 3, T, d), name="constant positions", ref64=True)
        # positions as an input: Sin and Cos run on the chip
        given = fn(lambda s, x, pos: rope(x, pos, s.inv), inv=inv_freq)
        pos = torch.arange(1000, 1000 + T).float()
        self.check(given, randn(2, 3, T, d), pos, name="positions 1000.. as input", ref64=True)
        # the cos table alone, f32 from the positions to the output: the f32 angle pos * inv is within 2^-24 of
        # the exact one (6e-5 rad at 1011), which moves cos by as much: rel L2 <= 2e-5 (measured 3.1e-6)
        self.check(fn(lambda s, pos: angles(pos, s.inv).cos(), inv=inv_freq), pos, name="cos table", rel=2e-5,
                   ref64=True)

    def test_rotary_tables_from_position_ids_as_hugging_face_writes_them(self):
        # LlamaRotaryEmbedding: the angles are a MatMul, inv_freq [B, d/2, 1] @ positions [B, 1, T], then cat, cos
        # and sin. A MatMul over a dimension of 1 is an outer product, computed as a Mul in f32 on the vector unit
        # (the matrix unit rounds its operands to bf16: position 1001 became 1000, the tables were off by rel L2 0.37
        # at positions 1000.. and 0.64 at 4000.., measured before). Now the tables are f32 from int64 position_ids
        # to the outputs: within 2e-5 of float64 as test_rotary_embedding_in_graph's (measured 1.5e-8 in float32).
        d = 16
        inv_freq = 1.0 / (10000 ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))

        def tables(s, position_ids):
            inv = s.inv[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
            emb = torch.cat((freqs, freqs), dim=-1)
            return emb.cos(), emb.sin()
        for start in (0, 1000, 4000):
            with self.subTest(start=start):
                pos = torch.arange(start, start + 12).unsqueeze(0).repeat(2, 1)
                self.check(fn(tables, inv=inv_freq), pos, name=f"positions {start}..", rel=2e-5, ref64=True)


class DataMovement(OpCase):
    """Reshape/view/flatten/squeeze/unsqueeze, permute, slices, split/chunk, cat, indexing, embeddings, expand, pad.

    Graph inputs and outputs are f32, values between kernels are stored in bf16, and data movement copies words
    as they are: moving an f32 graph input gives PyTorch's output bit for bit (exact="f32", measured for every case
    here, Concat included), moving a computed value gives PyTorch's output rounded to bf16 bit for bit
    (exact="bf16", test_intermediates_are_bf16)."""

    def test_reshape_family(self):
        cases = {"reshape": lambda x: x.reshape(2, -1), "view": lambda x: x.view(6, 7, 9),
                 "flatten": lambda x: torch.flatten(x, 1), "flatten2": lambda x: x.flatten(2),
                 "unflatten": lambda x: x.reshape(2, 3, 63).reshape(2, 3, 7, 9),
                 "unsqueeze0": lambda x: x.unsqueeze(0), "unsqueeze-1": lambda x: x.unsqueeze(-1),
                 "squeeze": lambda x: x[:, :1].squeeze(1), "squeeze_unsqueeze": lambda x: x.unsqueeze(2).squeeze(2),
                 "view_as_heads": lambda x: x.reshape(2, 3, 63).view(2, 3, 7, 9).transpose(1, 2).reshape(2, 7, 27)}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="f32")

    def test_permute(self):
        for perm in [(0, 2, 3, 1), (0, 3, 1, 2), (0, 1, 3, 2), (1, 0, 2, 3), (3, 2, 1, 0), (2, 0, 3, 1), (0, 2, 1, 3)]:
            with self.subTest(perm=perm):
                self.check(fn(lambda s, x, p=perm: x.permute(*p)), randn(2, 3, 7, 9), name=f"{perm}", exact="f32")
        for perm in [(1, 0), (0, 2, 1), (2, 0, 1)]:
            with self.subTest(perm=perm):
                shape = (5, 11) if len(perm) == 2 else (3, 5, 11)
                self.check(fn(lambda s, x, p=perm: x.permute(*p)), randn(*shape), name=f"{perm}", exact="f32")
        # Only axes of one element move (a decoded token's heads): a view of the same bytes, no copy; and one that
        # also swaps two longer axes, which is a copy.
        for perm, shape in [((0, 2, 1, 3), (1, 1, 12, 16)), ((1, 0, 2), (1, 5, 11)), ((0, 3, 1, 2), (2, 1, 1, 9)),
                            ((2, 1, 0, 3), (1, 7, 1, 5)), ((3, 1, 2, 0), (6, 1, 1, 4))]:
            with self.subTest(perm=perm, shape=shape):
                self.check(fn(lambda s, x, p=perm: x.permute(*p)), randn(*shape), name=f"{perm} of {shape}", exact="f32")

    def test_nhwc_roundtrip(self):
        self.check(fn(lambda s, x: x.permute(0, 2, 3, 1).permute(0, 3, 1, 2)), randn(2, 3, 7, 9), exact="f32")

    def test_slices(self):
        cases = {"steps": lambda x: x[:, 1:, ::2, 1::3], "negative": lambda x: x[..., -3:-1],
                 "neg_start": lambda x: x[:, -2:, -5:, :], "last": lambda x: x[:, -1], "mid": lambda x: x[:, :, 2:5],
                 "step_neg": lambda x: x[:, :, -6::2, :-2], "channel_step": lambda x: x[:, ::2],
                 "batch": lambda x: x[1:], "narrow": lambda x: x.narrow(3, 2, 4)}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="f32")

    def test_split_chunk(self):
        cases = {"split2": lambda x: torch.split(x, 4, dim=-1), "split_sizes": lambda x: torch.split(x, [1, 2], 1),
                 "chunk3": lambda x: torch.chunk(x, 3, dim=1), "chunk_h": lambda x: x.chunk(2, dim=2),
                 "qkv": lambda x: x.reshape(2, 21, 9).split(3, dim=-1)}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="f32")
        # Every axis before the split's of one element: the parts are views of the input's bytes, no copy.
        runs = {"token_qkv": (lambda x: x.split(4, dim=-1), randn(1, 1, 12)),
                "batch1_dim1": (lambda x: x.chunk(3, dim=1), randn(1, 6, 7, 9))}
        for name, (f, x) in runs.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), x, name=name, exact="f32")

    def test_cat(self):
        for dim in (0, 1, 2, 3, -1):
            with self.subTest(dim=dim):
                m = fn(lambda s, x, y, d=dim: torch.cat([x, y, x], dim=d))
                self.check(m, randn(2, 3, 7, 9), randn(2, 3, 7, 9), name=f"dim{dim}", exact="f32")
        self.check(fn(lambda s, x, y: torch.cat([x, y], 1)), randn(2, 3, 7, 9), randn(2, 5, 7, 9), name="uneven",
                   exact="f32")
        self.check(fn(lambda s, x, y: torch.cat([x, y], -1)), randn(4, 5), randn(4, 3), name="2d", exact="f32")
        # ViT's class token: a constant expanded over the batch, then concatenated
        self.check(fn(lambda s, x: torch.cat([s.cls.expand(x.shape[0], -1, -1), x], 1), cls=randn(1, 1, 8)),
                   randn(2, 5, 8), name="cls token", exact="f32")

    def test_intermediates_are_bf16(self):
        # x * 2 is computed in f32 (exact), stored in bf16 as the copy kernel's input, then moved word for word
        cases = {"permute": lambda x: (x * 2).permute(0, 2, 3, 1), "slice": lambda x: (x * 2)[:, :2],
                 "cat": lambda x: torch.cat([x, x * 2], 1), "cat_dim-1": lambda x: torch.cat([x * 2, x + 1], -1),
                 "expand": lambda x: (x * 2).expand(3, 2, 3, 7, 9)}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="bf16")
        # a graph output straight from the elementwise kernel stays f32; a Concat feeding another kernel too
        self.check(fn(lambda s, x: x * 2), randn(2, 3, 7, 9), name="x*2", exact="f32")
        self.check(fn(lambda s, x, y: torch.cat([x, y], 1) + 0.0), randn(2, 3, 7, 9), randn(2, 3, 7, 9),
                   name="cat+0", exact="f32")

    def test_cat_of_conv_outputs(self):
        class Inception(nn.Module):
            def __init__(self):
                super().__init__()
                self.a = nn.Conv2d(5, 3, 1)
                self.b = nn.Conv2d(5, 6, 3, padding=1)
                self.c = nn.Conv2d(5, 4, 5, padding=2)

            def forward(self, x):
                return torch.relu(torch.cat([self.a(x), self.b(x), self.c(x), x], 1))
        self.check(Inception(), randn(2, 5, 7, 9))

    def test_index_select(self):
        cases = {"x[:,0]": lambda x: x[:, 0], "x[0]": lambda x: x[0], "x[...,2]": lambda x: x[..., 2],
                 "x[:,:,3]": lambda x: x[:, :, 3], "cls": lambda x: x.flatten(2).transpose(1, 2)[:, 0]}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="f32")

    def test_index_constant_list(self):
        self.check(fn(lambda s, x: x[:, [2, 0, 1]]), randn(2, 3, 7, 9), exact="f32")
        self.check(fn(lambda s, x: x.index_select(1, torch.tensor([2, 0]))), randn(2, 3, 7, 9), name="index_select",
                   exact="f32")
        self.check(fn(lambda s, x: x[..., ::20]), randn(2, 3, 7, 9), name="step beyond size", exact="f32")

    def test_embedding(self):
        for vocab, dim, ids in [(50, 16, (2, 7)), (20, 33, (1, 5)), (100, 8, (13,)), (10, 4, (2, 3, 4))]:
            with self.subTest(vocab=vocab, dim=dim, ids=ids):
                torch.manual_seed(6)
                m = nn.Embedding(vocab, dim)
                self.check(m, torch.randint(0, vocab, ids, dtype=torch.int64), name=f"{vocab}x{dim} ids{ids}",
                           exact="f32")

    def test_embedding_plus_position(self):
        class Emb(nn.Module):
            def __init__(self):
                super().__init__()
                self.tok = nn.Embedding(40, 16)
                self.pos = nn.Embedding(12, 16)

            def forward(self, ids):
                return self.tok(ids) + self.pos(torch.arange(ids.shape[1]))
        self.check(Emb(), torch.randint(0, 40, (2, 9)), exact="f32")

    def test_expand(self):
        cases = {"c11": (lambda x: x.expand(2, 3, 7, 9), (3, 1, 1)), "1w": (lambda x: x.expand(4, 5, 9), (1, 9)),
                 "batch": (lambda x: x.expand(3, -1, -1), (1, 5, 6)),
                 "new_dims": (lambda x: x.expand(2, 3, 4, 6), (4, 1))}
        for name, (f, shape) in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(*shape), name=name, exact="f32")

    def test_tile(self):
        # one strided copy; of a graph input bit-identical, of a computed (bf16) value its bf16 bits
        x = randn(2, 3, 5)
        for reps in [(1, 2, 1), (2, 1, 3), (3, 2, 2), (1, 1, 1)]:
            with self.subTest(reps):
                self.check(fn(lambda s, x, r=reps: x.repeat(*r)), x, name=f"repeat{reps}", exact="f32")
        self.check(fn(lambda s, x: x.repeat(2, 1, 3, 1)), x, name="new axis", exact="f32")
        self.check(fn(lambda s, x: (x * 2).repeat(1, 2, 2) @ s.w, w=randn(10, 4)), x, name="of a computed value")

    def test_pad(self):
        cases = {"zeros": lambda x: F.pad(x, (1, 1, 1, 1)), "asym": lambda x: F.pad(x, (0, 3, 2, 0)),
                 "value": lambda x: F.pad(x, (1, 2, 0, 1), value=1.5), "last_only": lambda x: F.pad(x, (2, 5)),
                 "channels": lambda x: F.pad(x, (0, 0, 0, 0, 1, 2))}
        for name, f in cases.items():
            with self.subTest(name):
                self.check(fn(lambda s, x, f=f: f(x)), randn(2, 3, 7, 9), name=name, exact="f32")

    def test_opset17(self):
        self.check(fn(lambda s, x: x.permute(0, 2, 3, 1).reshape(2, -1)[:, 1::2]), randn(2, 3, 7, 9), opset=17,
                   exact="f32")
        self.check(fn(lambda s, x: torch.split(x, [4, 5], -1)), randn(2, 3, 7, 9), opset=17, exact="f32")


    def test_depth_to_space(self):
        # torch's pixel_shuffle exports as DepthToSpace (CRD); DCR and SpaceToDepth by onnx.helper against numpy
        self.check(fn(lambda s, x: F.pixel_shuffle(x, 2)), randn(2, 8, 3, 5), name="pixel_shuffle", exact="f32")
        self.check(fn(lambda s, x: F.pixel_shuffle(x * 2 + 1, 3)), randn(1, 18, 2, 3), name="of computed values",
                   exact="bf16")
        x = randn(2, 12, 3, 5).numpy()
        for mode in ("DCR", "CRD"):
            b, (n, c, h, w) = 2, x.shape
            if mode == "DCR":
                r = x.reshape(n, b, b, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * b, w * b)
            else:
                r = x.reshape(n, c // 4, b, b, h, w).transpose(0, 1, 4, 2, 5, 3).reshape(n, c // 4, h * b, w * b)
            node = onnx.helper.make_node("DepthToSpace", ["x"], ["y0"], blocksize=b, mode=mode)
            self.check_onnx([node], {"x": x}, [r], name=mode, exact=True)
        z = randn(2, 3, 6, 9).numpy()
        for b in (1, 3):
            n, c, h, w = z.shape
            r = z.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * b * b, h // b, w // b)
            node = onnx.helper.make_node("SpaceToDepth", ["x"], ["y0"], blocksize=b)
            self.check_onnx([node], {"x": z}, [r], name=f"SpaceToDepth {b}", exact=True)

    def test_trilu_of_computed_values(self):
        x = randn(2, 5, 6)
        for k in (-1, 0, 2):
            self.check(fn(lambda s, x, k=k: torch.triu(x * 2, k)), x, name=f"triu {k}", opset=14, exact="f32")
            self.check(fn(lambda s, x, k=k: torch.tril(x + 1, k)), x, name=f"tril {k}", opset=14, exact="f32")
        self.check(fn(lambda s, x: torch.tril(x)), x, name="of an input", opset=14, exact="f32")


class Folding(OpCase):
    """Subgraphs computed from constants only fold away at compile time, whatever operators they use."""

    def sin_cos_instructions(self, path):
        tpub = path + ".tpub"
        tpusim("compile", path, "-o", tpub)
        code = tpusim("disasm", tpub).stdout
        return code.count("vpu.sin") + code.count("vpu.cos")

    def test_rotary_embedding_tables_in_the_graph(self):
        class Rope(nn.Module):
            """LLaMA's rotary embedding as Hugging Face writes it (LlamaRotaryEmbedding, apply_rotary_pos_emb): the
            positions, the inv_freq outer product (a MatMul of constants), cos and sin are computed in the graph."""

            def __init__(self, dim=16, base=10000.0):
                super().__init__()
                inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
                self.register_buffer("inv_freq", inv_freq, persistent=False)

            def forward(self, q, k):
                position_ids = torch.arange(q.shape[2]).unsqueeze(0)
                inv = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
                freqs = (inv @ position_ids[:, None, :].float()).transpose(1, 2)
                emb = torch.cat((freqs, freqs), dim=-1)
                cos, sin = emb.cos().unsqueeze(1), emb.sin().unsqueeze(1)

                def rotate_half(x):
                    return torch.cat((-x[..., x.shape[-1] // 2:], x[..., : x.shape[-1] // 2]), dim=-1)
                return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

        # The check of the check: a Sin of an input is computed on the chip.
        _, path, *_ = self.export(fn(lambda s, x: x.sin()), [randn(4, 8)])
        self.assertGreater(self.sin_cos_instructions(path), 0)
        for opset in (13, 17):
            with self.subTest(opset=opset):
                _, path, *_ = self.export(Rope(), [randn(1, 2, 8, 16), randn(1, 2, 8, 16)], opset)
                ops = {n.op_type for n in onnx.load(path).graph.node}
                self.assertTrue({"Cos", "Sin", "MatMul", "Concat"} <= ops, f"the export computes no tables: {ops}")
                self.assertEqual(self.sin_cos_instructions(path), 0, "the cos and sin tables were not folded")
                # rotate_half's negation and concatenation store bf16 between kernels: the bf16 bounds.
                self.check(Rope(), randn(1, 2, 8, 16), randn(1, 2, 8, 16), opset=opset)

    def test_shifted_window_mask_in_the_graph(self):
        # torchvision's Swin Transformer builds its shifted windows' attention mask in the graph: the padding to a
        # whole window (Mod of the input's sizes), the mask's regions written by slice assignment (ScatterND of a
        # constant), and a dropout exported in training mode with p = 0 (the identity). All fold away (Mod and
        # ScatterND have no kernel: they fold or are refused); against torch.
        class ShiftMask(nn.Module):
            def forward(self, x):  # [1, H, W, C]
                h, w, win, shift = x.shape[1], x.shape[2], 4, 2
                pad_h, pad_w = (win - h % win) % win, (-w) % win  # (a negative dividend: Python's %)
                mask = x.new_full((h + pad_h, w + pad_w), 0.5)  # (not zeros: an assignment is no addition)
                count = 0
                for hs in (slice(0, -win), slice(-win, -shift), slice(-shift, None)):
                    for ws in (slice(0, -win), slice(-win, -shift), slice(-shift, None)):
                        mask[hs, ws] = count
                        count += 1
                y = x + mask[:h, :w][None, :, :, None]
                return torch.nn.functional.dropout(y, p=0.0, training=True)

        _, path, *_ = self.export(ShiftMask(), [randn(1, 10, 6, 8)])
        ops = {n.op_type for n in onnx.load(path).graph.node}
        self.assertTrue({"Mod", "ScatterND", "Dropout"} <= ops, f"the export has no Mod, ScatterND or Dropout: {ops}")
        self.check(ShiftMask(), randn(1, 10, 6, 8))


class Int8(OpCase):
    """`--precision int8` (calibrated on other inputs than the checked one) on a conv net, an MLP and a tiny
    attention block: cosine and relative L2 error against PyTorch's float output."""

    def test_conv_net(self):
        torch.manual_seed(7)
        m = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), randomize_bn(nn.BatchNorm2d(16)), nn.ReLU(),
                          nn.Conv2d(16, 16, 3, stride=2, padding=1, groups=16), nn.ReLU6(),
                          nn.Conv2d(16, 24, 1), nn.ReLU(), nn.MaxPool2d(2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(24, 10))
        self.check(m, randn(2, 3, 17, 15), precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)

    def test_conv1d_conv3d_conv_transpose(self):
        # int8 inputs made channels-last, placed on a zero canvas (ConvTranspose) or gathered over depth (3-D)
        torch.manual_seed(9)
        for name, m, x in [
                ("conv1d", nn.Sequential(nn.Conv1d(8, 16, 5, padding=2), nn.ReLU(), nn.Conv1d(16, 8, 3, stride=2)),
                 randn(2, 8, 30)),
                ("conv3d", nn.Sequential(nn.Conv3d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv3d(8, 4, 3, stride=2)),
                 randn(1, 3, 5, 6, 7)),
                ("convT", nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.ConvTranspose2d(8, 4, 2, stride=2),
                                        nn.ReLU(), nn.ConvTranspose2d(4, 3, 3, stride=2, padding=1, output_padding=1)),
                 randn(2, 3, 6, 7))]:
            with self.subTest(name):
                self.check(m, x, name=name, precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)

    def test_residual_blocks_fuse_their_adds(self):
        # Two residual blocks (a 3x3 and a 1x1 convolution, as ResNet-50's end in one): each residual Add (and its
        # ReLU), the first of which writes the int8 copy of its sum for the
        # next block's first convolution, runs in the epilogue of the int8 GEMM before it (gemm_chip's residual
        # with q, fuse_residual_adds: the sum as stored and its copy from it, as the row-wise Add computes them), so
        # that the compile report has no Add node of its own; against torch on v5e.
        class Block(nn.Module):
            def __init__(self, c):
                super().__init__()
                self.body = nn.Sequential(nn.Conv2d(c, c, 3, padding=1), randomize_bn(nn.BatchNorm2d(c)), nn.ReLU(),
                                          nn.Conv2d(c, c, 1), randomize_bn(nn.BatchNorm2d(c)))

            def forward(self, x):
                return torch.relu(x + self.body(x))

        torch.manual_seed(10)
        m = nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), Block(32), Block(32), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Linear(32, 10))
        self.check(m, randn(1, 3, 16, 16), precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2, config="v5e")
        d = os.path.join(self.dir, f"case{self.n}")
        r = os.path.join(d, "report.json")
        tpusim("compile", os.path.join(d, "model.onnx"), "--config", "v5e", "--precision", "int8", "--calibrate",
               f"x0={os.path.join(d, 'x0.calib.npy')}", "--report-json", r)
        with open(r) as f:
            nodes = [x["name"] for x in json.load(f)["regions"] if x["kind"] == "node"]
        self.assertEqual(len([n for n in nodes if "Add" in n]), 2, nodes)
        self.assertFalse([n for n in nodes if "Add" in n and "Conv" not in n], nodes)

    def test_mlp(self):
        torch.manual_seed(8)
        m = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 10))
        self.check(m, randn(8, 32), precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)

    def test_attention_block(self):
        class Block(nn.Module):
            def __init__(self, d=32, h=4):
                super().__init__()
                self.h = h
                self.ln = nn.LayerNorm(d)
                self.qkv = nn.Linear(d, 3 * d)
                self.proj = nn.Linear(d, d)
                self.ln2 = nn.LayerNorm(d)
                self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))
                self.register_buffer("mask", torch.tril(torch.ones(16, 16, dtype=torch.bool)))

            def forward(self, x):
                b, t, d = x.shape
                q, k, v = self.qkv(self.ln(x)).split(d, -1)
                q, k, v = (z.reshape(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))
                a = (q @ k.transpose(-1, -2)) * (d // self.h) ** -0.5
                a = a.masked_fill(~self.mask[:t, :t], float("-inf")).softmax(-1)
                x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, d))
                return x + self.ff(self.ln2(x))
        torch.manual_seed(9)
        m = Block()
        x = randn(2, 10, 32)
        self.check(m, x, name="bf16")
        self.check(m, x, precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)
        self.check(m, x, opset=17, precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)


def bf16_module(m):
    """The module with its parameters rounded to bf16 (the chip's matmul operands): its products are then exact on
    the chip, and a ranking of its outputs (argmax) does not hang on the rounding."""
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.from_numpy(bf16_round(p.numpy())))
    return m


def bf16_randn(*shape):
    return torch.from_numpy(bf16_round(randn(*shape).numpy()))


def arg_ref(x, axis, keepdims, last, is_min):
    """numpy's argmax/argmin with ONNX's select_last_index (the last of equal extremes)."""
    f = np.argmin if is_min else np.argmax
    if last:
        n = x.shape[axis]
        r = n - 1 - f(np.flip(x, axis), axis=axis)
    else:
        r = f(x, axis=axis)
    return np.expand_dims(r, axis) if keepdims else r


class ArgMinMax(OpCase):
    """ArgMax/ArgMin over any axis (int64 results: int32 on the chip, exact), select_last_index, of computed values,
    and the integer patterns around them: a graph output, Gather by the index, Equal/Cast/mean (accuracy)."""

    def test_axes_and_keepdims(self):
        x = randn(3, 7, 5)
        for dim in (0, 1, 2, -1):
            for keep in (False, True):
                for op in ("argmax", "argmin"):
                    self.check(fn(lambda s, x, d=dim, k=keep, op=op: getattr(x, op)(d, keepdim=k)), x,
                               name=f"{op} dim{dim} keep{int(keep)}")
        self.check(fn(lambda s, x: x.argmax(-1)), randn(2, 3000), name="3000 classes")
        self.check(fn(lambda s, x: x.argmin(0)), randn(1, 9), name="axis of 1")
        self.check(fn(lambda s, x: x.argmax()), randn(4, 6), name="flattened")

    def test_select_last_index(self):
        # ties on purpose: small integers
        x = np.random.default_rng(0).integers(0, 3, (4, 6, 5)).astype(np.float32)
        for op in ("ArgMax", "ArgMin"):
            for axis in (0, 1, -1):
                for keep in (0, 1):
                    for last in (0, 1):
                        node = onnx.helper.make_node(op, ["x"], ["y0"], axis=axis, keepdims=keep, select_last_index=last)
                        self.check_onnx([node], {"x": x}, [arg_ref(x, axis, keep, last, op == "ArgMin").astype(np.int64)],
                                        name=f"{op} axis{axis} keep{keep} last{last}")

    def test_of_computed_values(self):
        torch.manual_seed(3)
        m = fn(lambda s, x: s.fc(x).argmax(-1))
        m.fc = bf16_module(nn.Linear(16, 10))
        self.check(m, bf16_randn(6, 16), name="argmax(linear)")
        self.check(fn(lambda s, x: (x * 2).softmax(-1).argmax(-1)), randn(4, 9), name="argmax(softmax)")
        self.check(fn(lambda s, x: (x.exp() - 1).argmin(1)), randn(3, 8, 4), name="argmin(exp) over axis 1")

    def test_consumers(self):
        torch.manual_seed(4)
        # greedy decoding: the next token's embedding (Gather of a constant table by a computed index)
        m = fn(lambda s, x: s.emb(x.argmax(-1)))
        m.emb = nn.Embedding(12, 6)
        self.check(m, randn(4, 12), name="embedding of argmax", exact="f32")
        # accuracy: Equal, Cast, ReduceMean
        self.check(fn(lambda s, x, y: (x.argmax(-1) == y.argmax(-1)).float().mean()), randn(64, 5), randn(64, 5),
                   name="accuracy", rel=F32_REL_L2)
        self.check(fn(lambda s, x, t: (x.argmax(-1) == t).sum()), randn(32, 5),
                   torch.randint(0, 5, (32,)), name="correct against integer labels")
        self.check(fn(lambda s, x: (x.argmax(-1) + 1) * 3 - x.argmin(-1)), randn(5, 7), name="integer arithmetic")
        self.check(fn(lambda s, x: x.argmax(-1).float() * 0.5), randn(5, 7), name="cast to float", exact="f32")
        self.check(fn(lambda s, x: (x.argmax(-1), x.max(-1).values)), randn(5, 7), name="index and value")

    def test_folds(self):
        # of a constant: folded at compile time
        c = randn(3, 5)
        self.check(fn(lambda s, x: x + s.c.argmax(-1).float(), c=c), randn(2, 3), name="constant", exact="f32")


class Logic(OpCase):
    """Comparisons, logic, Where and Cast on values computed at run time (BOOL and integers are exact values in f32
    on the chip), against torch: bit-identical."""

    def test_comparisons(self):
        x, y = randn(3, 9), randn(3, 9)
        y[0] = x[0]  # equal elements
        for name, f in [("gt", torch.gt), ("lt", torch.lt), ("ge", torch.ge), ("le", torch.le), ("eq", torch.eq),
                        ("ne", torch.ne)]:
            self.check(fn(lambda s, a, b, f=f: f(a, b)), x, y, name=name)
        self.check(fn(lambda s, a: a > 0.5), x, name="against a constant")
        self.check(fn(lambda s, a: a.exp() < s.t, t=randn(9).exp()), x, name="against a constant row")
        self.check(fn(lambda s, a, b: ~((a > 0) & (b > 0)) | ((a < b) ^ (b < -0.5))), x, y, name="logic")

    def test_where(self):
        x, y = randn(2, 3, 9), randn(2, 3, 9)
        self.check(fn(lambda s, x: torch.where(x > 0, x, x * 0.1)), x, name="leaky", exact="f32")
        self.check(fn(lambda s, x, y: torch.where(x > y, x - y, y * y)), x, y, name="two computed sides", exact="f32")
        self.check(fn(lambda s, x: torch.where(x.sum(-1, keepdim=True) > 0, x, -x)), x, name="per-row condition",
                   exact="f32")
        self.check(fn(lambda s, x, y: x.masked_fill(y > 0.5, float("-inf"))), x, y, name="masked_fill -inf",
                   exact="f32")
        self.check(fn(lambda s, x, y: x.masked_fill(y > 0.5, float("-inf")).softmax(-1)), x, y,
                   name="masked softmax", rel=F32_REL_L2)
        self.check(fn(lambda s, x, y: x.masked_fill(y < 0, torch.finfo(torch.float32).min)), x, y,
                   name="masked_fill finfo.min", exact="f32")

    def test_attention_mask_from_an_integer_input(self):
        # Hugging Face style: an int64 padding mask turned into an additive mask of the scores
        m = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
        scores = randn(2, 3, 5, 5)

        def f(s, sc, m):
            mask = (m[:, None, None, :] == 0)
            return sc.masked_fill(mask, torch.finfo(torch.float32).min).softmax(-1)
        self.check(fn(f), scores, m, rel=F32_REL_L2)
        # position ids from the padding mask
        self.check(fn(lambda s, m: (m.cumsum(-1) - 1).masked_fill(m == 0, 1)), m, name="position ids")

    def test_casts(self):
        x = randn(4, 9) * 5
        self.check(fn(lambda s, x: x.long()), x, name="to int64 (truncation)")
        self.check(fn(lambda s, x: x.int()), x, name="to int32")
        self.check(fn(lambda s, x: x.bool()), torch.tensor([[0.0, 1.5, -2.0, 0.0, 3.0]]), name="to bool")
        self.check(fn(lambda s, x: (x > 0).float() * x), x, name="bool to float", exact="f32")
        self.check(fn(lambda s, x: (x > 0).long() + (x > 1).long()), x, name="bool to int64")
        self.check(fn(lambda s, t: t.float() * 0.5 + t), torch.randint(-9, 9, (3, 7)), name="int input", exact="f32")


class CumSum(OpCase):
    """CumSum over any axis, exclusive and reverse, of f32 and integer values (a log2(N)-step scan in f32)."""

    def test_torch(self):
        for shape, dim in [((2, 10), -1), ((5,), 0), ((3, 7, 4), 1), ((17, 3), 0), ((2, 3, 33), 2), ((1, 300), 1)]:
            x = randn(*shape)
            # f32 additions in a tree order, torch's in sequence (measured rel L2 <= 8e-8)
            self.check(fn(lambda s, x, d=dim: torch.cumsum(x, d)), x, name=f"{shape} dim{dim}", rel=F32_REL_L2)
        self.check(fn(lambda s, x: torch.cumsum(x * 2, 1).exp()), randn(2, 6, 3), name="of computed values",
                   rel=F32_REL_L2)
        self.check(fn(lambda s, t: torch.cumsum(t, 0)), torch.randint(-100, 100, (40, 3)), name="int64")

    def test_exclusive_reverse(self):
        x = randn(3, 6, 5).numpy()
        for axis in (0, 1, 2, -1):
            for excl in (0, 1):
                for rev in (0, 1):
                    a = np.flip(x, axis) if rev else x
                    r = np.cumsum(a.astype(np.float64), axis=axis)
                    if excl:
                        r = np.concatenate([np.zeros_like(np.take(r, [0], axis=axis)),
                                            np.take(r, range(x.shape[axis] - 1), axis=axis)], axis=axis)
                    if rev:
                        r = np.flip(r, axis)
                    ax = onnx.numpy_helper.from_array(np.array(axis, np.int64), "axis")
                    node = onnx.helper.make_node("CumSum", ["x", "axis"], ["y0"], exclusive=excl, reverse=rev)
                    self.check_onnx([node], {"x": x}, [r.astype(np.float32)], [ax],
                                    name=f"axis{axis} exclusive{excl} reverse{rev}")

    def test_folds(self):
        self.check(fn(lambda s, x: x + torch.cumsum(s.c, 0), c=randn(4, 3)), randn(4, 3), exact="f32")


class Einsum(OpCase):
    """Einsum as exporters emit it, expanded into Transpose/Reshape/MatMul/ReduceSum/Mul."""

    CASES = [("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("bhqd,bhkd->bhqk", [(2, 3, 5, 8), (2, 3, 6, 8)]),
             ("bhqk,bhkd->bhqd", [(2, 3, 5, 6), (2, 3, 6, 8)]), ("bqhd,bkhd->bhqk", [(2, 5, 3, 8), (2, 6, 3, 8)]),
             ("ij,jk->ik", [(5, 7), (7, 3)]), ("ij,kj->ik", [(5, 7), (3, 7)]), ("bnd,dh->bnh", [(2, 5, 8), (8, 6)]),
             ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]), ("ijk,jkl->il", [(3, 4, 5), (4, 5, 6)]),
             ("ab,bc,cd->ad", [(3, 4), (4, 5), (5, 2)]), ("bij,bjk", [(2, 3, 4), (2, 4, 5)])]
    EXACT = [("ij->ji", [(4, 6)]), ("bij->bji", [(2, 4, 6)]), ("i,j->ij", [(4,), (5,)]),
             ("bij,bij->bij", [(2, 3, 4), (2, 3, 4)]), ("bij,j->bij", [(2, 3, 4), (4,)])]
    SUMS = [("bij->bi", [(2, 3, 5)]), ("bij->j", [(2, 3, 5)]), ("ij->", [(3, 5)]), ("i,i->", [(7,), (7,)]),
            ("bij,bij->bi", [(2, 3, 4), (2, 3, 4)]), ("bhd,bhd->bh", [(2, 3, 40), (2, 3, 40)])]

    def test_products(self):
        for eq, shapes in self.CASES:  # MatMul: bf16 operands
            self.check(fn(lambda s, *x, eq=eq: torch.einsum(eq, *x)), *[randn(*sh) for sh in shapes], name=eq)

    def test_moves_and_elementwise(self):
        for eq, shapes in self.EXACT:  # copies and one f32 product: bit-identical
            self.check(fn(lambda s, *x, eq=eq: torch.einsum(eq, *x)), *[randn(*sh) for sh in shapes], name=eq,
                       exact="f32")
        for eq, shapes in self.SUMS:  # f32 products and sums on the vector unit (positive terms: no cancellation)
            self.check(fn(lambda s, *x, eq=eq: torch.einsum(eq, *x)), *[randn(*sh).abs() + 0.1 for sh in shapes],
                       name=eq, rel=F32_REL_L2)

    def test_weights(self):
        torch.manual_seed(5)
        w = nn.Parameter(torch.randn(8, 6))
        self.check(fn(lambda s, x: torch.einsum("bnd,dh->bnh", x, s.w), w=w), randn(2, 5, 8), name="bnd,dh->bnh")
        self.check(fn(lambda s, x: torch.einsum("bnd,hd->bnh", x, s.w.t().contiguous()), w=w), randn(2, 5, 8),
                   name="bnd,hd->bnh")
        self.check(fn(lambda s, x: torch.einsum("bnd,dh->bnh", x, s.w), w=w), randn(2, 5, 8), name="int8",
                   precision="int8", cos=INT8_MIN_COSINE, rel=INT8_MAX_REL_L2)

    def test_attention(self):
        q, k, v = randn(2, 4, 6, 8), randn(2, 4, 6, 8), randn(2, 4, 6, 8)

        def f(s, q, k, v):
            a = torch.einsum("bhqd,bhkd->bhqk", q, k).mul(8 ** -0.5).softmax(-1)
            return torch.einsum("bhqk,bhkd->bhqd", a, v)
        self.check(fn(f), q, k, v)


class Errors(OpCase):
    """Unsupported operators: non-zero exit, one line on stderr naming the operator and the node."""

    def test_layernorm_scale_computed_at_run_time_over_several_axes(self):
        err = self.expect_error(fn(lambda s, x, w: F.layer_norm(x, (5, 7), weight=w)), randn(2, 3, 5, 7),
                                randn(5, 7), op="LayerNormalization", opset=17)
        self.assertIn("run time", err)

    def test_pad_modes(self):
        self.assertIn("reflect", self.expect_error(fn(lambda s, x: F.pad(x, (1, 1, 1, 1), mode="reflect")),
                                                   randn(1, 2, 5, 5), op="Pad"))
        self.assertIn("negative", self.expect_error(fn(lambda s, x: F.pad(x, (-1, -1))), randn(1, 2, 5, 5), op="Pad"))

    def test_tensor_exponent_and_vector_operand(self):
        self.expect_error(fn(lambda s, x: torch.pow(2.0, x)), randn(2, 9), op="Pow")
        self.expect_error(fn(lambda s, a, b: a @ b), randn(3, 8), randn(8), op="MatMul")

    def expect_onnx_error(self, nodes, inputs, inits, op, name):
        """A model made with onnx.helper (`nodes`, float inputs {name: array}, initializers) must fail with one line
        on stderr naming `op` and the node `name`."""
        graph = onnx.helper.make_graph(
            nodes, "g", [onnx.helper.make_tensor_value_info(k, onnx.TensorProto.FLOAT, list(v.shape))
                         for k, v in inputs.items()],
            [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], inits)
        self.n += 1
        path = os.path.join(self.dir, f"m{self.n}.onnx")
        onnx.save(onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)]), path)
        args = ["run", path, "--output-dir", os.path.join(self.dir, f"out{self.n}")]
        for k, v in inputs.items():
            f = os.path.join(self.dir, f"{k}{self.n}.npy")
            np.save(f, v)
            args += ["--input", f"{k}={f}"]
        p = tpusim(*args, check=False, timeout=60)
        err = p.stderr.strip()
        print(f"ERROR-CASE {type(self).__name__}.{self._testMethodName}: rc={p.returncode} {err}", file=sys.stderr)
        self.assertGreater(p.returncode, 0, err)
        self.assertEqual(len(err.splitlines()), 1, f"expected one line on stderr, got:\n{err}")
        self.assertIn(f"node '{name}' ({op})", err)
        return err

    def test_resize_unsupported(self):
        x = randn(1, 2, 4, 4).numpy()
        scales = onnx.helper.make_tensor("scales", onnx.TensorProto.FLOAT, [4], [1, 1, 2, 2])
        for attrs, what in [({"coordinate_transformation_mode": "tf_crop_and_resize"}, "tf_crop_and_resize"),
                            ({"mode": "cubic", "exclude_outside": 1}, "exclude_outside"),
                            ({"antialias": 1}, "antialias"), ({"mode": "area"}, "area")]:
            with self.subTest(what):
                node = onnx.helper.make_node("Resize", ["x", "", "scales"], ["y"], name="rs", **attrs)
                self.assertIn(what, self.expect_onnx_error([node], {"x": x}, [scales], "Resize", "rs"))
        with self.subTest("scales at run time"):
            node = onnx.helper.make_node("Resize", ["x", "", "s"], ["y"], name="rs")
            err = self.expect_onnx_error([node], {"x": x, "s": np.ones(4, np.float32)}, [], "Resize", "rs")
            self.assertIn("constant", err)

    def test_conv_transpose_unsupported(self):
        # weights computed at run time; output_padding not below the stride (ONNX's and torch's rule)
        err = self.expect_error(fn(lambda s, x, w: F.conv_transpose2d(x, w, stride=2)), randn(1, 3, 4, 4),
                                randn(3, 2, 2, 2), op="ConvTranspose")
        self.assertIn("run time", err)
        w = onnx.numpy_helper.from_array(randn(2, 3, 3, 3).numpy(), "w")
        node = onnx.helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", strides=[2, 2],
                                     output_padding=[2, 2])
        err = self.expect_onnx_error([node], {"x": randn(1, 2, 4, 4).numpy()}, [w], "ConvTranspose", "up")
        self.assertIn("output_padding", err)

    def test_conv_four_spatial_axes(self):
        w = onnx.numpy_helper.from_array(randn(2, 2, 1, 1, 1, 1).numpy(), "w")
        node = onnx.helper.make_node("Conv", ["x", "w"], ["y"], name="c4")
        err = self.expect_onnx_error([node], {"x": randn(1, 2, 3, 3, 3, 3).numpy()}, [w], "Conv", "c4")
        self.assertIn("3-D", err)

    def test_other_unsupported(self):
        for op, f in [("TopK", lambda x: x.topk(3, -1)[0]), ("Elu", F.elu)]:
            with self.subTest(op):
                self.expect_error(fn(lambda s, x, f=f: f(x)), randn(3, 10).abs() + 0.1, op=op)

    def test_new_operators_refuse_clearly(self):
        """What ArgMax, CumSum, Einsum, DepthToSpace, InstanceNormalization and Trilu do not support: one line naming
        the node and what is wrong."""
        x = randn(2, 3, 4, 4).numpy()
        a = onnx.numpy_helper.from_array(np.array(1, np.int64), "a")
        cases = [
            ([onnx.helper.make_node("Einsum", ["x"], ["y"], name="diag", equation="ii->i")],
             {"x": randn(3, 3).numpy()}, [], "Einsum", "diag", "diagonal"),
            ([onnx.helper.make_node("Einsum", ["x", "x"], ["y"], name="count", equation="ij->ji")],
             {"x": randn(3, 3).numpy()}, [], "Einsum", "count", "1 operand, the node has 2 inputs"),
            ([onnx.helper.make_node("Einsum", ["x", "w"], ["y"], name="bcast", equation="ij,jk->ik")],
             {"x": randn(3, 1).numpy(), "w": randn(4, 2).numpy()}, [], "Einsum", "bcast", "broadcasting"),
            ([onnx.helper.make_node("ArgMax", ["x"], ["y"], name="am", select_last_index=2)], {"x": x}, [], "ArgMax",
             "am", "select_last_index=2"),
            ([onnx.helper.make_node("CumSum", ["x", "k"], ["y"], name="cs")], {"x": x, "k": np.ones(1, np.float32)},
             [], "CumSum", "cs", "constant"),
            ([onnx.helper.make_node("CumSum", ["x", "a"], ["y"], name="cs2", exclusive=2)], {"x": x}, [a], "CumSum",
             "cs2", "exclusive=2"),
            ([onnx.helper.make_node("DepthToSpace", ["x"], ["y"], name="d2s", blocksize=2, mode="XYZ")], {"x": x},
             [], "DepthToSpace", "d2s", "mode"),
            ([onnx.helper.make_node("SpaceToDepth", ["x"], ["y"], name="s2d", blocksize=3)], {"x": x}, [],
             "SpaceToDepth", "s2d", "multiples of blocksize"),
            ([onnx.helper.make_node("InstanceNormalization", ["x", "g", "b"], ["y"], name="inorm")],
             {"x": x, "g": np.ones(3, np.float32), "b": np.zeros(3, np.float32)}, [], "InstanceNormalization", "inorm",
             "run time"),
            ([onnx.helper.make_node("Trilu", ["x", "k"], ["y"], name="tri")], {"x": x, "k": np.ones(1, np.float32)},
             [], "Trilu", "tri", "constant"),
        ]
        for nodes, inputs, inits, op, name, what in cases:
            with self.subTest(name):
                self.assertIn(what, self.expect_onnx_error(nodes, inputs, inits, op, name))


if __name__ == "__main__":
    unittest.main()
