#!/usr/bin/env python3
"""Export a GPT-2-style decoder (plain torch, random weights) to ONNX for prefill and/or one decode step, with inputs and PyTorch's own outputs as references.

Run with Debian's interpreter (/usr/bin/python3, which sees python3-torch/onnx/numpy):

    /usr/bin/python3 workloads/gpt2.py --mode both --out build/workloads/gpt2_small      # GPT-2 small, 128 + 1
    /usr/bin/python3 workloads/gpt2.py --layers 2 --hidden 64 --heads 4 --seq 16 --past 16 --vocab 128 \\
        --mode both --out /tmp/gpt2

--mode prefill writes into DIR (--mode both: into DIR/prefill):
    gpt2.onnx         input input_ids int64 [B, seq]; outputs logits float32 [B, seq, vocab] and, per layer i,
                      present_k_<i>, present_v_<i> float32 [B, heads, seq, head_dim]
    input_ids.npy     the prompt (int64)
    logits_ref.npy, present_k_<i>_ref.npy, present_v_<i>_ref.npy    PyTorch's outputs for it
--mode decode writes into DIR (--mode both: into DIR/decode):
    gpt2.onnx         inputs input_ids int64 [B, 1] and past_k_<i>, past_v_<i> float32 [B, heads, past, head_dim];
                      outputs logits [B, 1, vocab] and present_k_<i>, present_v_<i> [B, heads, past+1, head_dim]
    input_ids.npy     the next token: argmax of the prefill logits at the last prompt position
    past_k_<i>.npy, past_v_<i>.npy  the present_k/v outputs of PyTorch's prefill of a prompt of --past tokens
                      (the first --past tokens of the same random token stream the prefill prompt starts with)
    logits_ref.npy, present_k_<i>_ref.npy, present_v_<i>_ref.npy    PyTorch's outputs for them
and in each directory meta.json: config, shapes, parameter count, MACs and FLOPs (2*MACs: Linear layers,
lm_head and the two attention matmuls), ONNX op types and node count.

Model: token + learned position embeddings; per layer (pre-LN): LN, causal self-attention (fused c_attn
Linear(H, 3H) split into q, k, v; heads; Q@K^T/sqrt(d); causal mask from a registered tril buffer, sliced
to [past:past+S, :past+S], applied with masked_fill(-10000) (a Where in ONNX; not emitted when S = 1, i.e.
decode, where every cached position is visible); softmax; @V; c_proj), residual; LN, MLP
(Linear(H, 4H), GELU tanh approximation 0.5*x*(1+tanh(sqrt(2/pi)*(x+0.044715*x^3))) written out, Linear(4H, H)),
residual; final LN; lm_head tied to the token embedding. Shapes are static: the decode position id is the
constant --past. Weights: normal std 0.02 (biases too), c_proj weights std 0.02/sqrt(2*layers) as GPT-2,
LayerNorm weight 1 + N(0, 0.02^2), bias N(0, 0.02^2), under torch.manual_seed(seed).
"""
import argparse
import math
import os
import sys
import time

sys.dont_write_bytecode = True  # do not leave __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_common as ec  # noqa: E402

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class Attention(nn.Module):
    def __init__(self, hidden, heads, n_positions):
        super().__init__()
        self.hidden, self.heads, self.head_dim = hidden, heads, hidden // heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.register_buffer("bias", torch.tril(torch.ones(n_positions, n_positions, dtype=torch.bool)),
                             persistent=False)

    def forward(self, x, past_k=None, past_v=None):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(self.hidden, dim=2)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [B, heads, S, d]
        k = k.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        p = 0
        if past_k is not None:
            p = past_k.shape[2]
            k = torch.cat([past_k, k], dim=2)
            v = torch.cat([past_v, v], dim=2)
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim)
        if s > 1:  # one new token (decode) sees every cached position: no mask to apply
            causal = self.bias[p:p + s, :p + s]  # static slice of a buffer: a constant in the ONNX graph
            scores = scores.masked_fill(~causal, -10000.0)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.c_proj(ctx), k, v


class Block(nn.Module):
    def __init__(self, hidden, heads, n_positions):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden, eps=1e-5)
        self.attn = Attention(hidden, heads, n_positions)
        self.ln_2 = nn.LayerNorm(hidden, eps=1e-5)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.mlp_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x, past_k=None, past_v=None):
        a, k, v = self.attn(self.ln_1(x), past_k, past_v)
        x = x + a
        x = x + self.mlp_proj(gelu_tanh(self.c_fc(self.ln_2(x))))
        return x, k, v


class GPT2(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, n_positions):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(n_positions, hidden)
        self.h = nn.ModuleList([Block(hidden, heads, n_positions) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(hidden, eps=1e-5)

    def forward(self, input_ids, pasts=None):
        """pasts: None (prefill) or a list of (past_k, past_v) per layer. Returns logits, [(k, v)] per layer."""
        s = input_ids.shape[1]
        p = 0 if pasts is None else pasts[0][0].shape[2]
        pos = torch.arange(p, p + s, dtype=torch.long).unsqueeze(0)
        x = self.wte(input_ids) + self.wpe(pos)
        presents = []
        for i, block in enumerate(self.h):
            pk, pv = (None, None) if pasts is None else pasts[i]
            x, k, v = block(x, pk, pv)
            presents.append((k, v))
        x = self.ln_f(x)
        # lm_head tied to the token embedding. The exporter folds the weight's transpose into a second,
        # [hidden, vocab] initializer for the MatMul (as it does for every Linear), so the ONNX file holds the
        # table twice (+154 MB at full size); the PyTorch model has one.
        logits = F.linear(x, self.wte.weight)
        return logits, presents


class Prefill(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids):
        logits, presents = self.model(input_ids)
        return (logits,) + tuple(t for kv in presents for t in kv)


class Decode(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, *past):
        pasts = [(past[2 * i], past[2 * i + 1]) for i in range(len(past) // 2)]
        logits, presents = self.model(input_ids, pasts)
        return (logits,) + tuple(t for kv in presents for t in kv)


def init_weights(model, layers):
    with torch.no_grad():
        for name, m in model.named_modules():
            if isinstance(m, nn.Linear):
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("c_proj", "mlp_proj")) else 0.02
                m.weight.normal_(0.0, std)
                m.bias.normal_(0.0, 0.02)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 0.02 if m is model.wte else 0.01)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.02 * torch.randn_like(m.weight))
                m.bias.normal_(0.0, 0.02)


def kv_names(prefix, layers):
    return [f"{prefix}_{kv}_{i}" for i in range(layers) for kv in ("k", "v")]


def export_one(args, model, mode, out_dir, in_names, inputs, out_names, macs, params, t0):
    import numpy as np

    os.makedirs(out_dir, exist_ok=True)
    wrapper = (Prefill if mode == "prefill" else Decode)(model).eval()
    with torch.no_grad():
        outs = wrapper(*inputs)
    onnx_path = os.path.join(out_dir, "gpt2.onnx")
    torch.onnx.export(wrapper, tuple(inputs), onnx_path, opset_version=args.opset, input_names=in_names,
                      output_names=out_names, do_constant_folding=True)
    for name, t in zip(in_names, inputs):
        ec.save_npy(out_dir, f"{name}.npy", t.numpy(), np.int64 if t.dtype == torch.long else np.float32)
    for name, t in zip(out_names, outs):
        ec.save_npy(out_dir, f"{name}_ref.npy", t.numpy(), np.float32)
    info = ec.check_and_describe(onnx_path)
    seconds = time.time() - t0
    s = inputs[0].shape[1]
    past = 0 if mode == "prefill" else args.past
    ec.write_meta(out_dir, {
        "model": os.path.basename(onnx_path),
        "mode": mode,
        "config": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads,
                   "head_dim": args.hidden // args.heads, "vocab": args.vocab, "n_positions": args.positions,
                   "batch": args.batch, "seq": s, "past": past, "layer_norm_eps": 1e-5,
                   "activation": "gelu_tanh", "tied_lm_head": True},
        "opset": args.opset, "seed": args.seed,
        **ec.io_meta(in_names, inputs, out_names, outs),
        "params": params, "macs": macs, "flops": 2 * macs,
        "flops_note": "2 * multiply-accumulates of the Linear layers, the tied lm_head and the Q@K^T and probs@V "
                      "matmuls (full, unmasked: layers*batch*2*seq*(past+seq)*hidden); softmax, LayerNorm, GELU, "
                      "adds excluded",
        "onnx": info,
    })
    ec.summary(f"gpt2.py ({mode})", onnx_path, params, 2 * macs, seconds, info)


def count_macs(args, s, past):
    b, h, L = args.batch, args.hidden, args.layers
    linear = L * b * s * (h * 3 * h + h * h + h * 4 * h + 4 * h * h) + b * s * h * args.vocab
    attn = L * b * 2 * s * (past + s) * h
    return linear + attn


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ec.add_common_args(ap)
    ap.add_argument("--layers", type=int, default=12, help="decoder blocks (default 12)")
    ap.add_argument("--hidden", type=int, default=768, help="hidden size (default 768)")
    ap.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    ap.add_argument("--seq", type=int, default=128, help="prefill length (default 128)")
    ap.add_argument("--past", type=int, default=None, help="decode: cached positions (default --seq)")
    ap.add_argument("--vocab", type=int, default=50257, help="vocabulary size (default 50257)")
    ap.add_argument("--positions", type=int, default=1024,
                    help="position embeddings / causal-mask size (default 1024, raised to fit)")
    ap.add_argument("--mode", choices=("prefill", "decode", "both"), default="both",
                    help="what to export (default both: DIR/prefill and DIR/decode)")
    args = ap.parse_args(argv)
    if args.past is None:
        args.past = args.seq
    ec.positive(ap, batch=args.batch, layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                past=args.past, vocab=args.vocab, positions=args.positions)
    if args.hidden % args.heads:
        ap.error("--hidden must be a multiple of --heads")
    args.positions = max(args.positions, args.seq, args.past + 1)

    t0 = time.time()
    ec.set_determinism(args.seed)
    model = GPT2(args.vocab, args.hidden, args.layers, args.heads, args.positions)
    init_weights(model, args.layers)
    model.eval()
    params = ec.count_params(model)

    # One random token stream: the prefill prompt is its first --seq tokens, the decode prompt its first --past.
    b = args.batch
    stream = torch.randint(0, args.vocab, (b, max(args.seq, args.past)), generator=ec.generator(args.seed, 1),
                           dtype=torch.long)
    modes = ("prefill", "decode") if args.mode == "both" else (args.mode,)
    for mode in modes:
        out_dir = os.path.join(args.out, mode) if args.mode == "both" else args.out
        t_mode = t0 if mode == modes[0] else time.time()
        if mode == "prefill":
            ids = stream[:, :args.seq].contiguous()
            export_one(args, model, mode, out_dir, ["input_ids"], [ids],
                       ["logits"] + kv_names("present", args.layers), count_macs(args, args.seq, 0), params, t_mode)
        else:
            prompt = stream[:, :args.past].contiguous()
            with torch.no_grad():
                logits, presents = model(prompt)
            next_ids = logits[:, -1:, :].argmax(dim=-1)  # [B, 1]
            past = [t.contiguous() for kv in presents for t in kv]
            export_one(args, model, mode, out_dir, ["input_ids"] + kv_names("past", args.layers), [next_ids] + past,
                       ["logits"] + kv_names("present", args.layers), count_macs(args, 1, args.past), params, t_mode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
