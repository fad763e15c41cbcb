"""Bad input through the `tpusim` program: the error table of docs/errors.md, and the hardening findings of issue 13.

Run by ctest (validation/system/CMakeLists.txt) with Debian's python3 (numpy, onnx):
    TPUSIM=build/tools/tpusim DOCS=docs python3 -m unittest test_errors
"""
import json
import os
import re
import struct
import unittest

import numpy as np
import onnx
from onnx import TensorProto, helper

from test_cli import Workdir, read, tpusim

DOCS = os.environ.get("DOCS", os.path.join(os.path.dirname(__file__), "..", "..", "docs"))
CRASHES = ["terminate called", "Segmentation", "Aborted", "core dumped", "runtime error:", "AddressSanitizer"]

# A kernel that never ends (a vector add, then a jump back to it).
LOOP = "    li r1, 0\n    li r2, 8\nloop:\n    vpu.add r1, r1, r1, r2, f32\n    jmp loop\n"


def error_table():
    """The rows of docs/errors.md's table: {class: (message regex, exit code)}."""
    rows = {}
    text = read(os.path.join(DOCS, "errors.md"))
    table = text[text.index("| class | triggered by |"):]
    for line in table.splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        name, _trigger, pattern, code = cells
        rows[name] = (pattern.strip("`").replace("\\|", "|"), int(code))
    return rows


def tpub(tensors, version=4, code=()):
    """A .tpub file (layout in isa/src/program.cpp): `tensors` are (name, kind, dtype, space, dims, addr, offset)."""
    def section(sid, payload):
        return struct.pack("<IQ", sid, len(payload)) + payload
    t = struct.pack("<I", len(tensors))
    for name, kind, dtype, space, dims, addr, offset in tensors:
        b = name.encode()
        t += struct.pack("<I", len(b)) + b + struct.pack("<BBBI", kind, dtype, space, len(dims))
        t += b"".join(struct.pack("<q", d) for d in dims) + struct.pack("<QQ", addr, offset)
    body = section(1, b"".join(struct.pack("<Q", w) for w in code)) + section(2, t) + section(3, b"") + section(4, b"p")
    return b"TPUB" + struct.pack("<II", version, 4) + body


def onnx_model(nodes, inputs, outputs, initializers=(), opset=13):
    graph = helper.make_graph(nodes, "g", inputs, outputs, initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def f32(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


class ErrorsBase(Workdir):
    def run_error(self, args):
        p = tpusim(*args, check=False)
        for crash in CRASHES:
            self.assertNotIn(crash, p.stderr, f"{args}")
        return p

    def write_bytes(self, name, data):
        with open(self.path(name), "wb") as f:
            f.write(data)
        return self.path(name)

    def save_model(self, name, model):
        onnx.save(model, self.path(name))
        return self.path(name)

    def kernel(self, body, name="k.s"):
        return self.write(name, body)

    # ---- one trigger per row of docs/errors.md ------------------------------------------------------------------

    def trigger(self, name):
        k = lambda: self.kernel("    nop\n")
        if name == "unknown-command":
            return ["frobnicate"]
        if name == "unknown-option":
            return ["run", k(), "--frobs"]
        if name == "bad-option-value":
            return ["run", k(), "--seed", "%value%"]
        if name == "missing-file-argument":
            return ["run"]
        if name == "config-unknown-key":
            return ["config", "--show", "--set", "mxu.frobs=3"]
        if name == "config-bad-value":
            return ["config", "--show", "--set", "mxu.rows=many"]
        if name == "config-out-of-range":
            return ["config", "--show", "--set", "mxu.rows=0"]
        if name == "config-invalid-line":
            return ["config", "--show", self.write("bad.ini", "%invalid_line%\n")]
        if name == "config-line-break":
            return ["config", "--show", "--set", "mxu.rows=4\nx"]
        if name == "unknown-preset":
            return ["run", k(), "--config", "v9-like"]
        if name == "asm-syntax":
            return ["run", self.kernel("    li r1, 5\n    add r1, r2,\n")]
        if name == "asm-long-token":
            return ["run", self.kernel("x" * (1 << 20) + "\n")]
        if name == "asm-tensor-too-large":
            return ["run", self.kernel(".input a, f32, [1 << 40]\n"), "--timing-only"]
        if name == "asm-tensor-past-address-limit":
            return ["run", self.kernel(".input a, f32, [4] @ 1 << 62\n"), "--timing-only"]
        if name == "asm-tensors-overlap":
            return ["run", self.kernel(".input a, f32, [16] @ 0\n.output y, f32, [16] @ 32\n"), "--timing-only"]
        if name == "program-bad-magic":
            return ["run", self.write("bad.tpub", "TPUX" + "\0" * 20)]
        if name == "program-other-version":
            return ["run", self.write_bytes("old.tpub", tpub([], version=2))]
        if name == "program-truncated":
            return ["run", self.write_bytes("cut.tpub", tpub([("a", 0, 3, 0, [4], 0, 0)])[:-30])]
        if name == "program-tensor-past-address-limit":
            return ["disasm", self.write_bytes("far.tpub", tpub([("a", 0, 3, 0, [4], 1 << 63, 0)]))]
        if name == "npy-malformed":
            path = self.write_bytes("bad.npy", b"\x93NUMPY\x01\x00\x10\x00{'descr': <f4'  \n")
            return ["run", self.kernel(".input a, f32, [4]\n"), "--input", "a=" + path]
        if name == "input-missing":
            return ["run", self.kernel(".input a, f32, [4]\n")]
        if name == "input-wrong-shape":
            return ["run", self.kernel(".input a, f32, [4]\n"), "--input",
                    "a=" + self.save("x.npy", np.zeros(5, np.float32))]
        if name == "onnx-invalid":
            return ["run", self.write("m.onnx", "not a model"), "--timing-only"]
        if name == "onnx-opset":
            m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4])], [f32("y", [4])], opset=99)
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-shape-overflow":
            reps = helper.make_tensor("reps", TensorProto.INT64, [2], [1 << 62, 1])
            c = helper.make_tensor("c", TensorProto.FLOAT, [4, 4], [0.5] * 16)  # Tile folds: its input is constant
            m = onnx_model([helper.make_node("Tile", ["c", "reps"], ["t"], name="tile"),
                            helper.make_node("Add", ["x", "t"], ["y"], name="add")], [f32("x", [4, 4])],
                           [f32("y", None)], [reps, c])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-fold-overflow":
            # shape arithmetic of constants past int64 (fuzz_onnx's finding: it was undefined behaviour)
            a = helper.make_tensor("a", TensorProto.INT64, [1], [1 << 62])
            b = helper.make_tensor("b", TensorProto.INT64, [1], [4])
            m = onnx_model([helper.make_node("Mul", ["a", "b"], ["n"], name="mul"),
                            helper.make_node("Reshape", ["x", "n"], ["y"], name="reshape")],
                           [f32("x", [4])], [f32("y", None)], [a, b])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-unsupported-node":
            pads = helper.make_tensor("pads", TensorProto.INT64, [2], [1, 1])
            m = onnx_model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad", mode="reflect")],
                           [f32("x", [4])], [f32("y", None)], [pads])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-zero-elements":
            # a result of no elements (fuzz_onnx's finding: it reached the row-wise generator, copying an empty
            # constant through a null pointer on the way)
            empty = helper.make_tensor("e", TensorProto.FLOAT, [0, 63], [])
            m = onnx_model([helper.make_node("Mul", ["x", "e"], ["y"], name="mul")], [f32("x", [1])], [f32("y", None)],
                           [empty])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-unsupported-operators":
            m = onnx_model([helper.make_node("Range", ["x", "x", "x"], ["t"], name="range"),
                            helper.make_node("NonZero", ["t"], ["y"], name="nz"),
                            helper.make_node("ConstantOfShape", ["x"], ["fill"], name="fill")],
                           [f32("x", [2, 4])], [helper.make_tensor_value_info("y", TensorProto.INT64, None),
                                                helper.make_tensor_value_info("fill", TensorProto.FLOAT, None)])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-too-large":
            m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [1 << 20] * 3)], [f32("y", None)])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-output-is-input":
            m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4])],
                           [f32("y", [4]), f32("x", [4])])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-duplicate-input":
            m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4]), f32("x", [4])],
                           [f32("y", [4])])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-nameless-input":
            m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4]), f32("", [4])],
                           [f32("y", [4])])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "onnx-copy-too-large":
            m = onnx_model([helper.make_node("Transpose", ["x"], ["y"], name="t", perm=list(reversed(range(14))))],
                           [f32("x", [3] * 14)], [f32("y", None)])
            return ["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")]
        if name == "does-not-fit":
            return ["run", self.kernel(".input a, f32, [1 << 38]\n"), "--timing-only"]
        if name == "run-fault":
            return ["run", self.kernel("    li r1, 0\n    li r2, 0\n    li r3, 1\n    li r4, 4096\n"
                                       "    li r5, 0x7fffffff\n    dma.ld r5, r2, r3, r4, r4, r4\n"), "--config", "edge"]
        mcast = lambda: self.kernel("    li r1, 0\n    li r2, 0\n    li r3, 1\n    li r4, 64\n    li r5, 64\n"
                                    "    dma.ld r1, r2, r3, r4, r5, r5, mcast\n")
        if name == "mcast-unpaired":
            return ["run", mcast(), "--config", "h200-like", "--timing-only"]
        if name == "mcast-no-cluster":
            return ["run", mcast(), "--config", "v4", "--timing-only"]
        if name == "deadlock":
            return ["run", self.kernel("    mxu.sync wait=s3\n"), "--config", "edge"]
        if name == "max-cycles":
            return ["run", self.kernel(LOOP), "--max-cycles", "1000"]
        if name == "trace-limit":
            return ["run", self.kernel(LOOP), "--trace", self.path("t.json"), "--trace-limit", "1000"]
        if name == "cannot-write":
            tpusim("asm", k(), "-o", self.path("p.tpub"))
            return ["disasm", self.path("p.tpub"), "-o", "/dev/full"]
        raise KeyError(name)


class Errors(ErrorsBase):
    """docs/errors.md's table, row by row."""

    def test_every_error_class_in_the_table(self):
        """Each row's trigger gives exactly one stderr line matching the row's message, and the row's exit code."""
        rows = error_table()
        self.assertGreaterEqual(len(rows), 30)
        for name, (pattern, code) in rows.items():
            with self.subTest(error=name):
                p = self.run_error(self.trigger(name))
                err = p.stderr.rstrip("\n")
                self.assertEqual(len(err.splitlines()), 1, f"{name}: one line expected, got:\n{err[:2000]}")
                self.assertLess(len(err), 400, f"{name}: a message of {len(err)} bytes")
                self.assertRegex(err, pattern)
                self.assertEqual(p.returncode, code, f"{name}: {err}")

    def test_compiler_errors_share_one_shape(self):
        """Every compiler error about a node reads 'MODEL: node 'N' (Op): what is wrong', whichever pass finds it:
        import, the operator check, shape inference, constant folding, lowering."""
        i64 = lambda name, vals: helper.make_tensor(name, TensorProto.INT64, [len(vals)], vals)
        cases = {
            "import": (onnx_model([helper.make_node("Relu", ["nowhere"], ["y"], name="r")], [f32("x", [4])],
                                  [f32("y", [4])]), "r", "Relu", r"uses 'nowhere', which no earlier node.*"),
            "operator check": (onnx_model([helper.make_node("NonZero", ["x"], ["y"], name="nz")], [f32("x", [4])],
                                          [helper.make_tensor_value_info("y", TensorProto.INT64, None)]),
                               "nz", "NonZero", "unsupported operator"),
            "shape inference": (onnx_model([helper.make_node("Squeeze", ["x", "ax"], ["y"], name="sq")],
                                           [f32("x", [2, 3])], [f32("y", None)], [i64("ax", [1])]),
                                "sq", "Squeeze", r"dimension 1 of \[2,3\] is not 1"),
            "constant folding": (onnx_model([helper.make_node("Div", ["a", "z"], ["q"], name="div"),
                                             helper.make_node("Cast", ["q"], ["qf"], name="cast", to=1),
                                             helper.make_node("Add", ["x", "qf"], ["y"], name="add")],
                                            [f32("x", [1])], [f32("y", None)], [i64("a", [1]), i64("z", [0])]),
                                 "div", "Div", "integer division by zero in constant folding"),
            "lowering": (onnx_model([helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up")],
                                    [f32("x", [1, 2, 4, 4]), f32("w", [2, 3, 2, 2])], [f32("y", None)]),
                         "up", "ConvTranspose", "weights computed at run time are not supported"),
        }
        for pass_name, (model, node, op, what) in cases.items():
            with self.subTest(found_by=pass_name):
                path = self.save_model("m.onnx", model)
                p = self.run_error(["compile", path, "-o", self.path("m.tpub")])
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertRegex(p.stderr.rstrip("\n"),
                                 rf"^tpusim: error: {re.escape(path)}: node '{node}' \({op}\): {what}$")

    def test_every_trigger_has_a_row(self):
        source = read(__file__)
        triggers = set(re.findall(r'if name == "([a-z0-9-]+)"', source))
        self.assertEqual(triggers, set(error_table()))


class Hardening(ErrorsBase):
    """Regression tests of the findings of issue 13, each named after what it checks."""

    def test_output_names_never_leave_the_output_folder(self):
        # A program whose outputs are named as absolute and relative paths: each lands in the folder, by
        # runtime::npy_file_name's %XX mapping, and nothing is written elsewhere.
        outside = self.path("outside")
        src = (f'.output "{outside}", f32, [4]\n.output "../escaped", f32, [4]\n'
               '.output "/fc/Relu_output_0", f32, [4]\n.output ".", f32, [4]\n    nop\n')
        out = self.path("out")
        p = tpusim("run", self.kernel(src), "--output-dir", out)
        names = sorted(os.listdir(out))
        self.assertEqual(names, sorted(["%2E.npy", "%2E.%2Fescaped.npy", "%2Ffc%2FRelu_output_0.npy",
                                        outside.replace("/", "%2F") + ".npy"]))
        self.assertFalse(os.path.exists(outside + ".npy"))
        self.assertFalse(os.path.exists(self.path("escaped.npy")))
        self.assertIn("%2Ffc%2FRelu_output_0.npy", p.stdout)
        np.testing.assert_array_equal(np.load(os.path.join(out, "%2Ffc%2FRelu_output_0.npy")), np.zeros(4, np.float32))

    def test_onnx_output_named_like_a_pytorch_path_runs(self):
        m = onnx_model([helper.make_node("Relu", ["x"], ["/fc/Relu_output_0"], name="r")], [f32("x", [4])],
                       [f32("/fc/Relu_output_0", [4])])
        x = np.array([-1, 2, -3, 4], np.float32)
        out = self.path("out")
        tpusim("run", self.save_model("m.onnx", m), "--input", "x=" + self.save("x.npy", x), "--output-dir", out)
        np.testing.assert_array_equal(np.load(os.path.join(out, "%2Ffc%2FRelu_output_0.npy")), np.maximum(x, 0))

    def test_config_errors_that_hung_return_at_once(self):
        # Boost's message formatting looped forever on these (the 30 s timeout would catch a hang).
        for args in (["config", "--show", self.write("bad.ini", "%invalid_line%\n")],
                     ["config", "--show", "--set", "mxu.rows=4\n%invalid_line%"],
                     ["run", self.kernel("nop\n"), "--seed", "%canonical_option%"]):
            p = self.run_error(args)
            self.assertNotEqual(p.returncode, 0)

    def test_trace_of_a_looping_kernel_stops_at_its_limit(self):
        p = self.run_error(["run", self.kernel(LOOP), "--trace", self.path("t.json"), "--trace-limit", "5000"])
        self.assertEqual(p.returncode, 1)
        self.assertIn("the trace reached its limit of 5000 events", p.stderr)
        self.assertFalse(os.path.exists(self.path("t.json")))

    def test_profile_trace_of_a_looping_kernel_stops_at_its_limit(self):
        # `profile` always traces: the same limit and message as `run --trace`, and no trace or profile file left.
        p = self.run_error(["profile", self.kernel(LOOP), "--trace", self.path("t.json"), "--json",
                            self.path("p.json"), "--trace-limit", "5000"])
        self.assertEqual(p.returncode, 1)
        self.assertRegex(p.stderr.strip(), error_table()["trace-limit"][0].replace("1000", "5000"))
        self.assertFalse(os.path.exists(self.path("t.json")))
        self.assertFalse(os.path.exists(self.path("p.json")))

    def test_profile_trace_of_a_long_kernel_is_complete_json(self):
        # A kernel of N vector adds in a loop (li, li, li, then N times vpu.add, addi, blt, then halt): the
        # profile's trace file, written event by event, parses and holds one vpu busy slice per add.
        n = 20000
        loop = ("    li r1, 0\n    li r2, 8\n    li r3, 0\n    li r4, %d\nloop:\n"
                "    vpu.add r1, r1, r1, r2, f32\n    addi r3, r3, 1\n    blt r3, r4, loop\n    halt\n" % n)
        tpusim("profile", self.kernel(loop), "--trace", self.path("t.json"), "--trace-limit", str(4 * n))
        with open(self.path("t.json")) as f:
            events = json.load(f)["traceEvents"]
        adds = [e for e in events if e["ph"] == "X" and e["name"].startswith("vpu.add") and e["cat"] == "busy"]
        self.assertEqual(len(adds), n)
        self.assertEqual(sorted(e["args"]["pc"] for e in adds), [4] * n)

    def test_failed_output_leaves_no_partial_files(self):
        # --stats is written, then --trace cannot be: the stats file is removed again.
        stats = self.path("stats.json")
        p = self.run_error(["run", self.kernel("nop\n"), "--stats", stats, "--trace", self.path("no/such/dir/t.json")])
        self.assertEqual(p.returncode, 1)
        self.assertRegex(p.stderr, r"cannot open '.*t\.json' for writing")
        self.assertFalse(os.path.exists(stats))

    def test_nested_include_resolves_against_the_including_file(self):
        os.makedirs(self.path("lib/sub"))
        self.write("lib/a.inc", '.include "sub/b.inc"\n')
        self.write("lib/sub/b.inc", '.include "c.inc"\n')
        self.write("lib/sub/c.inc", ".set STEP, 7\n")
        main = self.write("main.s", '.include "lib/a.inc"\n    li r1, STEP\n')
        cwd = os.getcwd()
        try:
            os.chdir("/")  # nothing of it is relative to the working directory
            tpusim("asm", main, "-o", self.path("m.tpub"))
        finally:
            os.chdir(cwd)
        self.assertIn("li r1, 7", tpusim("disasm", self.path("m.tpub")).stdout)

    def test_compiled_program_loads_and_round_trips(self):
        # `compile` writes only what `run` and `disasm` accept; the disassembly assembles back to the same file.
        m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4])], [f32("y", [4])])
        tpusim("compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub"))
        tpusim("disasm", self.path("m.tpub"), "-o", self.path("m.s"))
        tpusim("asm", self.path("m.s"), "-o", self.path("m2.tpub"))
        # The same program (the source lines it records, shown only in comments, name the file it came from).
        again = tpusim("disasm", self.path("m2.tpub")).stdout
        strip = lambda text: [line.split("#")[0].rstrip() for line in text.splitlines()]
        self.assertEqual(strip(read(self.path("m.s"))), strip(again))
        self.assertRegex(again, r"\.output \"?y\"?, \w+, \[4\]")

    def test_loader_refuses_what_the_assembler_cannot_write(self):
        # An input with a constant offset, and overlapping tensors: accepted before, now refused with the rule.
        cases = {
            "offset.tpub": ([("a", 0, 3, 0, [4], 0, 8)], r"input 'a': a constant offset \(8\) on a tensor that is not const"),
            "overlap.tpub": ([("a", 0, 3, 0, [4], 0, 0), ("y", 1, 3, 0, [4], 8, 0)],
                             r"output 'y' \[8, 24\) overlaps input 'a' \[0, 16\) in hbm"),
            "huge.tpub": ([("a", 0, 3, 0, [1 << 40], 0, 0)], r"input 'a': more than 1 TiB"),
        }
        for name, (tensors, pattern) in cases.items():
            with self.subTest(file=name):
                p = self.run_error(["disasm", self.write_bytes(name, tpub(tensors))])
                self.assertEqual(p.returncode, 1)
                self.assertRegex(p.stderr, pattern)

    def test_tpub_empty_tensor_with_huge_other_sizes_is_refused(self):
        # [2^29 + 1, 2^52 + 1, 0] holds no element, but the product of its first two sizes overflows int64: the
        # loader passed it, and counting its elements was undefined behaviour (found by fuzz_tpub under UBSan).
        p = self.run_error(["disasm", self.write_bytes("e.tpub", tpub([("a", 0, 3, 0, [(1 << 29) + 1, (1 << 52) + 1, 0],
                                                                        0, 0)]))])
        self.assertEqual(p.returncode, 1, p.stderr)
        self.assertIn("input 'a': more than 1 TiB (the limit for one tensor) in its sizes other than 0", p.stderr)

    def test_disasm_to_a_full_device_fails(self):
        tpusim("asm", self.kernel("nop\n"), "-o", self.path("p.tpub"))
        p = self.run_error(["disasm", self.path("p.tpub"), "-o", "/dev/full"])
        self.assertEqual(p.returncode, 1)

    def test_onnx_opsets_outside_the_range_are_refused(self):
        for opset in (1, 6, 19, 99):
            with self.subTest(opset=opset):
                m = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", [4])], [f32("y", [4])],
                               opset=opset)
                p = self.run_error(["compile", self.save_model("m.onnx", m), "-o", self.path("m.tpub")])
                self.assertEqual(p.returncode, 1)
                self.assertIn(f"opset {opset} of the ONNX operators is not supported (7 to 18", p.stderr)

    def test_onnx_shape_arithmetic_overflow_names_the_node(self):
        # Pad and Reshape with sizes whose sums or products pass int64.
        pads = helper.make_tensor("pads", TensorProto.INT64, [2], [(1 << 63) - 1, 1])
        pad = onnx_model([helper.make_node("Pad", ["x", "pads"], ["y"], name="pad")], [f32("x", [4])],
                         [f32("y", None)], [pads])
        shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1 << 32, 1 << 32, 1 << 32])
        reshape = onnx_model([helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")], [f32("x", [4])],
                             [f32("y", None)], [shape])
        for model, node in ((pad, "pad"), (reshape, "reshape")):
            with self.subTest(node=node):
                p = self.run_error(["compile", self.save_model("m.onnx", model), "-o", self.path("m.tpub")])
                self.assertEqual(p.returncode, 1)
                self.assertRegex(p.stderr, rf"node '{node}' \(\w+\): size arithmetic overflows 64 bits")

    def test_onnx_huge_shape_with_a_zero_size_is_refused(self):
        # [2^40, 2^40, 0] holds no element, but the product of its other sizes (its row count) passes int64; found by
        # fuzz_onnx (onnx_import.cpp multiplied the sizes of such a constant in order and overflowed).
        big = [1 << 40, 1 << 40, 0]
        const = onnx_model([helper.make_node("Identity", ["c"], ["y"], name="id")], [], [f32("y", None)],
                           [helper.make_tensor("c", TensorProto.FLOAT, big, [])])
        inp = onnx_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [f32("x", big)], [f32("y", None)])
        for model, what in ((const, "constant 'c'"), (inp, "'x'")):
            with self.subTest(what=what):
                p = self.run_error(["compile", self.save_model("m.onnx", model), "-o", self.path("m.tpub")])
                self.assertEqual(p.returncode, 1, p.stderr)
                self.assertIn(what, p.stderr)
                self.assertIn("elements in its sizes other than 0, the limit (a tensor holds at most 1 TiB)", p.stderr)

    def test_onnx_output_folded_to_a_constant_keeps_its_name(self):
        # y = q * q with q = Squeeze(c) computed from constants only folds to a constant. The compiled program
        # declared 'y' twice (the output, and the constant copied into it), so `compile` could not save it; found by
        # fuzz_onnx. The constant now takes another name, and the saved program runs: y = 2 * 2.
        model = onnx_model([helper.make_node("Squeeze", ["c"], ["q"], name="sq"),
                            helper.make_node("Mul", ["q", "q"], ["y"], name="mul"),
                            helper.make_node("Relu", ["x"], ["z"], name="relu")],
                           [f32("x", [3])], [helper.make_tensor_value_info("y", TensorProto.INT64, None), f32("z", None)],
                           [helper.make_tensor("c", TensorProto.INT64, [1], [2])])
        prog = self.path("m.tpub")
        tpusim("compile", self.save_model("m.onnx", model), "-o", prog)
        np.save(self.path("x.npy"), np.array([-1, 0, 5], np.float32))
        tpusim("run", prog, "--input", "x=" + self.path("x.npy"), "--output-dir", self.path("out"))
        self.assertEqual(np.load(self.path("out/y.npy")).tolist(), 4)
        self.assertEqual(np.load(self.path("out/z.npy")).tolist(), [0, 0, 5])

    def test_messages_quote_binary_escaped(self):
        p = self.run_error(["run", self.kernel("\x01\x02\x7f bad\n")])
        self.assertEqual(p.returncode, 1)
        self.assertNotRegex(p.stderr, "[\x01\x02\x7f]")


if __name__ == "__main__":
    unittest.main()
