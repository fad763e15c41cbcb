#!/usr/bin/env python3
"""Export a torchvision classification model (random weights) or a tiny CNN to ONNX, with an input and PyTorch's own output as a reference.

Run with Debian's interpreter (/usr/bin/python3, which sees python3-torch/torchvision/onnx/numpy):

    /usr/bin/python3 workloads/resnet.py --out build/workloads/resnet50                  # resnet50, 1x3x224x224
    /usr/bin/python3 workloads/resnet.py --arch resnet18 --size 32 --out build/workloads/resnet18
    /usr/bin/python3 workloads/resnet.py --arch tinycnn --size 32 --out build/workloads/tinycnn

writes into the output directory:
    <arch>.onnx     the model: input "input" [batch, 3, size, size] float32, output "logits" [batch, classes] float32
                    (static shapes unless --dynamic-batch, which names dim 0 of both "batch")
    input.npy       the input, float32, standard normal from the seed
    logits_ref.npy  PyTorch's float32 output for input.npy
    meta.json       arch, sizes, opset, input/output names and shapes, parameter count, MACs and FLOPs (2*MACs,
                    Conv/Linear only, counted with forward hooks), ONNX op types and node count

Weights: torchvision's own initialisation under torch.manual_seed(seed) (no download, weights=None). BatchNorm
statistics are then calibrated on a random batch of 4 (BN layers alone in train mode) and perturbed:
running_var * U[0.5, 1.5], running_mean + 0.1*N(0, 1)*std, weight ~ U[0.5, 1.0], bias ~ N(0, 0.1^2), so
eval-mode BN is not the identity and activations stay well-scaled for any architecture (e.g. inception_v3,
whose std-0.1 initialisation would otherwise reach logits of 1e8).

--arch tinycnn is a small CNN (no torchvision) for fast compiler tests: conv 3x3 s1 p1 + BN + ReLU,
conv 3x3 s2 p1 + BN + ReLU, depthwise conv 3x3 (groups=channels) + BN + ReLU, 1x1 conv, residual add,
maxpool 3x3 s2 p1, dilated conv 3x3 (dilation 2, pad 2) + ReLU, global average pool, flatten, linear.
"""
import argparse
import os
import sys
import time

sys.dont_write_bytecode = True  # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_common as ec  # noqa: E402


def tinycnn(num_classes=10, width=16):
    import torch.nn as nn

    class TinyCNN(nn.Module):
        def __init__(self):
            super().__init__()
            c1, c2 = width, 2 * width
            self.stem = nn.Sequential(nn.Conv2d(3, c1, 3, stride=1, padding=1, bias=False),
                                      nn.BatchNorm2d(c1), nn.ReLU())
            self.down = nn.Sequential(nn.Conv2d(c1, c2, 3, stride=2, padding=1, bias=False),
                                      nn.BatchNorm2d(c2), nn.ReLU())
            self.dw = nn.Sequential(nn.Conv2d(c2, c2, 3, stride=1, padding=1, groups=c2, bias=False),
                                    nn.BatchNorm2d(c2), nn.ReLU())
            self.pw = nn.Conv2d(c2, c2, 1, bias=True)
            self.pool = nn.MaxPool2d(3, stride=2, padding=1)
            self.dil = nn.Sequential(nn.Conv2d(c2, c2, 3, stride=1, padding=2, dilation=2, bias=True), nn.ReLU())
            self.gap = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(c2, num_classes)

        def forward(self, x):
            x = self.stem(x)
            x = self.down(x)
            x = x + self.pw(self.dw(x))  # residual add
            x = self.pool(x)
            x = self.dil(x)
            x = self.gap(x).flatten(1)
            return self.fc(x)

    return TinyCNN()


def build(arch):
    if arch == "tinycnn":
        return tinycnn()
    import torchvision
    ctor = getattr(torchvision.models, arch, None)
    if ctor is None or not callable(ctor) or arch.startswith("_") or arch[0].isupper():
        names = sorted(n for n in dir(torchvision.models)
                       if not n.startswith("_") and n[0].islower() and callable(getattr(torchvision.models, n))
                       and n not in ("get_model", "get_weight", "get_model_weights", "list_models"))
        raise SystemExit(f"resnet.py: unknown --arch {arch!r}; torchvision.models has: {' '.join(names)}, "
                         "or use tinycnn")
    kwargs = {"weights": None}
    if arch in ("inception_v3", "googlenet"):
        kwargs.update(aux_logits=False, init_weights=True)
    return ctor(**kwargs)


def randomise_batchnorm(model, calib):
    """Gives every BatchNorm non-trivial eval-mode statistics that keep activations well-scaled whatever the
    architecture's weight initialisation: running stats measured on `calib` (BN layers alone in train mode,
    cumulative average), then running_var scaled by U[0.5, 1.5], running_mean shifted by 0.1*N(0, 1)*std,
    weight ~ U[0.5, 1.0], bias ~ N(0, 0.1^2)."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    model.eval()
    saved = []
    for m in bns:
        if m.track_running_stats:
            saved.append((m, m.momentum))
            m.reset_running_stats()
            m.momentum = None  # cumulative average over the calibration pass
            m.train()
    with torch.no_grad():
        if saved:
            model(calib)
        for m, momentum in saved:
            m.momentum = momentum
            m.eval()
            n = m.num_features
            m.running_var.mul_(torch.rand(n) + 0.5)
            m.running_mean.add_(0.1 * torch.randn(n) * m.running_var.sqrt())
        for m in bns:
            if m.affine:
                n = m.num_features
                m.weight.copy_(torch.rand(n) * 0.5 + 0.5)
                m.bias.copy_(torch.randn(n) * 0.1)
    model.eval()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ec.add_common_args(ap)
    ap.add_argument("--arch", default="resnet50",
                    help="torchvision.models classification constructor (resnet18, resnet50, mobilenet_v2, ...) "
                         "or tinycnn (default resnet50)")
    ap.add_argument("--size", type=int, default=224, help="input height = width (default 224)")
    ap.add_argument("--dynamic-batch", action="store_true", help="mark dim 0 of input and logits dynamic ('batch')")
    args = ap.parse_args(argv)
    ec.positive(ap, batch=args.batch, size=args.size)

    import numpy as np
    import torch

    t0 = time.time()
    ec.set_determinism(args.seed)
    model = build(args.arch)
    calib = torch.randn(4, 3, args.size, args.size, generator=ec.generator(args.seed, 2))
    randomise_batchnorm(model, calib)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=ec.generator(args.seed, 1))
    with torch.no_grad():
        y = model(x)
    if not torch.isfinite(y).all():
        raise SystemExit(f"resnet.py: {args.arch} produced non-finite logits")
    macs = ec.count_macs_with_hooks(model, (x,))
    params = ec.count_params(model)

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, f"{args.arch}.onnx")
    dynamic_axes = {"input": {0: "batch"}, "logits": {0: "batch"}} if args.dynamic_batch else None
    torch.onnx.export(model, (x,), onnx_path, opset_version=args.opset, input_names=["input"],
                      output_names=["logits"], dynamic_axes=dynamic_axes, do_constant_folding=True)
    ec.save_npy(args.out, "input.npy", x.numpy(), np.float32)
    ec.save_npy(args.out, "logits_ref.npy", y.numpy(), np.float32)
    info = ec.check_and_describe(onnx_path)
    seconds = time.time() - t0
    ec.write_meta(args.out, {
        "model": os.path.basename(onnx_path),
        "arch": args.arch, "batch": args.batch, "size": args.size, "opset": args.opset, "seed": args.seed,
        "dynamic_batch": args.dynamic_batch,
        "inputs": {"input": {"file": "input.npy", "shape": list(x.shape), "dtype": "float32"}},
        "outputs": {"logits": {"file": "logits_ref.npy", "shape": list(y.shape), "dtype": "float32"}},
        "params": params, "macs": macs, "flops": 2 * macs,
        "flops_note": "2 * multiply-accumulates of Conv and Linear layers (forward hooks); BN/ReLU/pool/add excluded",
        "logits_stats": {"mean": float(y.mean()), "std": float(y.std()), "absmax": float(y.abs().max())},
        "onnx": info,
    })
    ec.summary("resnet.py", onnx_path, params, 2 * macs, seconds, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
