"""Helpers shared by the exporters in workloads/ (resnet.py, bert.py, gpt2.py).

Not a script: the exporters import it from their own directory. Everything here runs under Debian's
/usr/bin/python3 (torch, onnx, numpy); onnxruntime is not needed.
"""
import collections
import json
import os

# Ops that compute shapes at run time. With static input shapes and do_constant_folding=True the exporter
# folds most of them; whatever is left is listed in meta.json so the compiler knows what to expect.
SHAPE_SOURCES = ("Shape", "Size")


def shape_subgraph(graph):
    """Nodes that only compute shapes: Shape/Size nodes and everything fed solely by them, constants and
    initializers (e.g. Shape -> Gather -> Unsqueeze -> Concat feeding a Reshape), plus ConstantOfShape/Range
    nodes whose inputs are such values. Returns {op_type: count}."""
    const = {t.name for t in graph.initializer}
    shape_vals = set()
    found = collections.Counter()
    for n in graph.node:  # ONNX graphs are topologically sorted
        ins = [i for i in n.input if i]
        if n.op_type == "Constant":
            const.update(n.output)
            continue
        if n.op_type in SHAPE_SOURCES or (ins and all(i in shape_vals or i in const for i in ins)
                                          and any(i in shape_vals for i in ins)):
            shape_vals.update(n.output)
            found[n.op_type] += 1
    return dict(sorted(found.items()))


def add_common_args(ap, opset_default=13):
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--batch", type=int, default=1, help="batch size (default 1)")
    ap.add_argument("--opset", type=int, default=opset_default, choices=(13, 17),
                    help=f"ONNX opset (13 or 17, default {opset_default})")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for weights and inputs (default 0)")


def positive(ap, **values):
    for name, value in values.items():
        if value is None or value <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive (got {value})")


def set_determinism(seed):
    import warnings
    import torch
    # The exports are traced with static shapes on purpose; python-level decisions on sizes are intended.
    warnings.filterwarnings("ignore", category=torch.jit.TracerWarning)
    torch.manual_seed(seed)
    # CPU kernels are deterministic for a fixed thread count; this makes a nondeterministic op an error.
    torch.use_deterministic_algorithms(True)


def generator(seed, offset):
    """A torch.Generator for inputs, independent of how many numbers the weight initialisation drew."""
    import torch
    g = torch.Generator()
    g.manual_seed(seed * 1000003 + offset)
    return g


def count_params(model):
    seen = set()
    total = 0
    for p in model.parameters():  # parameters() already de-duplicates tied weights
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel()
    return total


def count_macs_with_hooks(model, inputs):
    """Multiply-accumulates of Conv*d and Linear modules in one forward of `inputs` (a tuple)."""
    import torch
    macs = [0]
    handles = []

    def conv_hook(mod, inp, out):
        k = 1
        for d in mod.kernel_size:
            k *= d
        macs[0] += out.numel() * (mod.in_channels // mod.groups) * k

    def linear_hook(mod, inp, out):
        macs[0] += out.numel() * mod.in_features

    for m in model.modules():
        if isinstance(m, (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, torch.nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
    try:
        with torch.no_grad():
            model(*inputs)
    finally:
        for h in handles:
            h.remove()
    return macs[0]


def save_npy(out_dir, name, array, dtype):
    import numpy as np
    np.save(os.path.join(out_dir, name), np.ascontiguousarray(array, dtype=dtype))


def check_and_describe(onnx_path):
    """Runs onnx.checker on the file and returns what the compiler needs to know about the graph."""
    import onnx
    onnx.checker.check_model(onnx_path)
    model = onnx.load(onnx_path)
    g = model.graph
    ops = collections.Counter(n.op_type for n in g.node)

    def dims(vi):
        out = []
        for d in vi.type.tensor_type.shape.dim:
            out.append(d.dim_param if d.dim_param else d.dim_value)
        return out

    def elem(vi):
        return onnx.TensorProto.DataType.Name(vi.type.tensor_type.elem_type).lower()

    init_names = {t.name for t in g.initializer}
    return {
        "opset": max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
        "nodes": len(g.node),
        "initializers": len(g.initializer),
        "op_types": dict(sorted(ops.items())),
        "shape_subgraph_ops": shape_subgraph(g),
        "inputs": [{"name": i.name, "shape": dims(i), "dtype": elem(i)} for i in g.input if i.name not in init_names],
        "outputs": [{"name": o.name, "shape": dims(o), "dtype": elem(o)} for o in g.output],
        "file_bytes": os.path.getsize(onnx_path),
    }


def io_meta(in_names, inputs, out_names, outs):
    """meta.json's "inputs" and "outputs": each tensor's .npy file (NAME.npy, NAME_ref.npy), shape and dtype (the
    outputs are saved as float32)."""
    return {
        "inputs": {n: {"file": f"{n}.npy", "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
                   for n, t in zip(in_names, inputs)},
        "outputs": {n: {"file": f"{n}_ref.npy", "shape": list(t.shape), "dtype": "float32"}
                    for n, t in zip(out_names, outs)},
    }


def write_meta(out_dir, meta):
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=2, sort_keys=False)
        f.write("\n")


def human(n):
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g}{unit}"
        n /= 1000.0
    return f"{n:.3g}P"


def summary(script, onnx_path, params, flops, seconds, info):
    print(f"{script}: wrote {onnx_path} ({info['file_bytes'] / 1e6:.1f} MB, {info['nodes']} nodes, "
          f"opset {info['opset']}), params {human(params)}, FLOPs {human(flops)}, {seconds:.1f} s")
