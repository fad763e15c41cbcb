#!/usr/bin/env python3
"""Export a small MLP to ONNX with PyTorch, with an input and PyTorch's own output as a reference.

Run with Debian's interpreter (/usr/bin/python3, which sees python3-torch/onnx/numpy):

    /usr/bin/python3 workloads/mlp.py --out build/workloads/mlp

writes into the output directory:
    mlp.onnx   the model (opset 13, input "x" [batch, dims[0]] float32, output "y" [batch, dims[-1]] float32)
    x.npy      the input, float32
    y_ref.npy  PyTorch's float32 output for x
Default: Linear(64->128), ReLU, Linear(128->64), ReLU, Linear(64->10); batch 8; seed 0.
"""
import argparse
import os
import sys


def parse_dims(text):
    try:
        dims = [int(d) for d in text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--dims must be comma-separated integers, got {text!r}")
    if len(dims) < 2 or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"--dims needs at least two positive sizes, got {text!r}")
    return dims


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="output directory (created if missing)")
    ap.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    ap.add_argument("--seed", type=int, default=0, help="torch seed for weights and input (default 0)")
    ap.add_argument("--dims", type=parse_dims, default=[64, 128, 64, 10],
                    help="layer sizes, input first (default 64,128,64,10)")
    args = ap.parse_args(argv)
    if args.batch <= 0:
        ap.error("--batch must be positive")

    import numpy as np
    import torch

    torch.manual_seed(args.seed)
    layers = []
    for i in range(len(args.dims) - 1):
        layers.append(torch.nn.Linear(args.dims[i], args.dims[i + 1]))
        if i + 2 < len(args.dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers).eval()
    x = torch.randn(args.batch, args.dims[0], dtype=torch.float32)
    with torch.no_grad():
        y = model(x)

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, "mlp.onnx")
    torch.onnx.export(model, (x,), onnx_path, opset_version=13, input_names=["x"], output_names=["y"],
                      do_constant_folding=True)
    np.save(os.path.join(args.out, "x.npy"), x.numpy().astype(np.float32))
    np.save(os.path.join(args.out, "y_ref.npy"), y.numpy().astype(np.float32))
    print(f"mlp.py: wrote {onnx_path}, x.npy {tuple(x.shape)}, y_ref.npy {tuple(y.shape)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
