#!/usr/bin/env python3
"""Writes the ONNX import fuzzer's seeds (small graphs over the operators real exports use) into a folder.

Model files are not kept in git: scripts/run-fuzz.sh makes these at run time.
    /usr/bin/python3 validation/fuzz/make_onnx_seeds.py OUT_DIR
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
rng = np.random.default_rng(0)


def init(name, shape=None, values=None):
    a = np.asarray(values, np.int64) if values is not None else rng.standard_normal(shape).astype(np.float32)
    return numpy_helper.from_array(a, name)


def scalar(name, v):
    return numpy_helper.from_array(np.array(v, np.float32), name)


def model(nodes, inputs, outputs, inits, opset=13):
    g = helper.make_graph(nodes, "seed", [helper.make_tensor_value_info(*i) for i in inputs],
                          [helper.make_tensor_value_info(*o) for o in outputs], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


N = helper.make_node
SEEDS = {
    "mlp": model([N("MatMul", ["x", "w"], ["m"]), N("Add", ["m", "b"], ["a"]), N("Relu", ["a"], ["y"])],
                 [("x", F, [2, 4])], [("y", F, [2, 3])], [init("w", [4, 3]), init("b", [3])]),
    "gemm_softmax": model([N("Gemm", ["x", "w", "b"], ["g"], transB=1), N("Softmax", ["g"], ["y"], axis=-1)],
                          [("x", F, [3, 5])], [("y", F, [3, 2])], [init("w", [2, 5]), init("b", [2])]),
    "conv_pool": model([N("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
                        N("Relu", ["c"], ["r"]), N("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                        N("GlobalAveragePool", ["p"], ["q"]), N("Flatten", ["q"], ["y"], axis=1)],
                       [("x", F, [1, 2, 6, 6])], [("y", F, [1, 3])], [init("w", [3, 2, 3, 3]), init("b", [3])]),
    "gather_concat": model([N("Gather", ["emb", "ids"], ["e"], axis=0), N("Concat", ["e", "e"], ["c"], axis=1),
                            N("ReduceMean", ["c"], ["m"], axes=[1], keepdims=1), N("Sub", ["c", "m"], ["y"])],
                           [("ids", I64, [3])], [("y", F, [3, 8])], [init("emb", [10, 4])]),
    "layernorm_transpose": model([N("LayerNormalization", ["x", "s", "o"], ["l"], axis=-1, epsilon=1e-5),
                                  N("Transpose", ["l"], ["t"], perm=[1, 0]), N("Reshape", ["t", "shape"], ["r"]),
                                  N("Erf", ["r"], ["y"])],
                                 [("x", F, [2, 8])], [("y", F, [4, 4])],
                                 [init("s", [8]), init("o", [8]), init("shape", values=[4, 4])], opset=17),
    "shape_slice": model([N("Shape", ["x"], ["s"]), N("Slice", ["x", "st", "en", "ax"], ["sl"]),
                          N("Unsqueeze", ["sl", "ua"], ["u"]), N("Squeeze", ["u", "ua"], ["q"]),
                          N("Mul", ["q", "q"], ["y"])],
                         [("x", F, [4, 6])], [("y", F, [4, 3])],
                         [init("st", values=[1]), init("en", values=[4]), init("ax", values=[1]),
                          init("ua", values=[0])]),
    # GELU as torch exports it below opset 20 (the compiler's fuse_gelu pass): erf form, then the tanh form
    "gelu_erf": model([N("MatMul", ["x", "w"], ["h"]), N("Div", ["h", "sqrt2"], ["d"]), N("Erf", ["d"], ["e"]),
                       N("Add", ["e", "one"], ["a"]), N("Mul", ["h", "a"], ["m"]), N("Mul", ["m", "half"], ["y"])],
                      [("x", F, [2, 4])], [("y", F, [2, 3])],
                      [init("w", [4, 3]), scalar("sqrt2", 1.4142135), scalar("one", 1.0), scalar("half", 0.5)]),
    "gelu_tanh": model([N("Mul", ["x", "half"], ["h"]), N("Pow", ["x", "three"], ["p"]), N("Mul", ["p", "c"], ["t"]),
                        N("Add", ["x", "t"], ["u"]), N("Mul", ["u", "k"], ["v"]), N("Tanh", ["v"], ["e"]),
                        N("Add", ["e", "one"], ["a"]), N("Mul", ["h", "a"], ["y"])],
                       [("x", F, [2, 4])], [("y", F, [2, 4])],
                       [scalar("half", 0.5), scalar("three", 3.0), scalar("c", 0.044715), scalar("k", 0.7978846),
                        scalar("one", 1.0)]),
    # A decode step's attention (one query per head over 5 cached keys): the fused kernel on the vector unit
    # (vpu.rdot, vpu.cdot)
    "attention_decode": model([N("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]), N("MatMul", ["q", "kt"], ["s"]),
                               N("Mul", ["s", "scale"], ["ss"]), N("Softmax", ["ss"], ["p"], axis=-1),
                               N("MatMul", ["p", "v"], ["y"])],
                              [("q", F, [1, 2, 1, 8]), ("k", F, [1, 2, 5, 8]), ("v", F, [1, 2, 5, 8])],
                              [("y", F, [1, 2, 1, 8])], [scalar("scale", 0.35355339)]),
    # Findings' reproducers (validation/fuzz/README.md, "Findings fixed"): int64 shape arithmetic past the range in
    # constant folding; a result of no elements (a constant of shape [0, 0, 0, 63] in the tanh GELU chain)
    "regress_int64_mul_overflow_in_folding": model(
        [N("Mul", ["a", "b"], ["n"]), N("Reshape", ["x", "n"], ["y"])], [("x", F, [4])], [("y", F, [4])],
        [init("a", values=[1 << 62]), init("b", values=[4])]),
    "regress_zero_element_result": model(
        [N("Mul", ["x", "half"], ["h"]), N("Tanh", ["x"], ["e"]), N("Add", ["e", "one"], ["a"]),
         N("Mul", ["h", "a"], ["y"])],
        [("x", F, [])], [("y", F, [0, 0, 0, 63])],
        [numpy_helper.from_array(np.zeros((0, 0, 0, 63), np.float32), "half"), scalar("one", 1.0)]),
}

if __name__ == "__main__":
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, m in SEEDS.items():
        onnx.checker.check_model(m)
        onnx.save(m, os.path.join(out, name + ".onnx"))
