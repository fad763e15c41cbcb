#!/usr/bin/env python3
"""Export a BERT-style encoder (plain torch, random weights) to ONNX, with inputs and PyTorch's own outputs as references.

Run with Debian's interpreter (/usr/bin/python3, which sees python3-torch/onnx/numpy):

    /usr/bin/python3 workloads/bert.py --out build/workloads/bert_base                    # BERT-base, seq 128
    /usr/bin/python3 workloads/bert.py --layers 2 --hidden 64 --heads 4 --seq 16 --vocab 100 --out /tmp/bert

writes into the output directory:
    bert.onnx                  the model (static shapes), inputs input_ids, attention_mask, token_type_ids
                               (int64 [batch, seq]); outputs last_hidden_state [batch, seq, hidden] and
                               pooler_output [batch, hidden] (float32)
    input_ids.npy, attention_mask.npy, token_type_ids.npy        the inputs (int64)
    last_hidden_state_ref.npy, pooler_output_ref.npy             PyTorch's float32 outputs for them
    meta.json                  config, shapes, parameter count, MACs and FLOPs (2*MACs: Linear layers and the
                               two attention matmuls per layer), ONNX op types and node count

Model: token + position + segment embeddings, LayerNorm; per layer: self-attention (Q, K, V Linear, heads,
Q@K^T/sqrt(d) + (1-mask)*-10000 broadcast as [B,1,1,S], softmax, @V, merge heads, output Linear, residual,
LayerNorm), FFN (Linear 4H, GELU erf form, Linear, residual, LayerNorm); pooler: first token, Linear, tanh.
Opset 13 exports LayerNorm decomposed (ReduceMean/Sub/Pow/Sqrt/Div...), opset 17 as LayerNormalization.
Weights as BERT initialises them (normal std 0.02; biases too, so they are not zero), LayerNorm weight
1 + N(0, 0.02^2), bias N(0, 0.02^2), under torch.manual_seed(seed).
Inputs: input_ids uniform in [0, vocab); token_type_ids 0 for the first half of the sequence, 1 after;
attention_mask 1 except the last --pad positions (0: a padded example).
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


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def split(self, t):
        b, s, _ = t.shape
        return t.view(b, s, self.heads, self.head_dim).transpose(1, 2)  # [B, heads, S, d]

    def forward(self, x, mask_add):
        b, s, h = x.shape
        q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(self.head_dim) + mask_add
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        return self.norm(x + self.output(ctx))


class Layer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.attn = SelfAttention(hidden, heads)
        self.ffn_in = nn.Linear(hidden, inter)
        self.act = nn.GELU()  # erf form
        self.ffn_out = nn.Linear(inter, hidden)
        self.norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x, mask_add):
        x = self.attn(x, mask_add)
        return self.norm(x + self.ffn_out(self.act(self.ffn_in(x))))


class Bert(nn.Module):
    def __init__(self, vocab, hidden, layers, heads, inter, max_pos=512, type_vocab=2):
        super().__init__()
        self.word = nn.Embedding(vocab, hidden)
        self.position = nn.Embedding(max_pos, hidden)
        self.segment = nn.Embedding(type_vocab, hidden)
        self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList([Layer(hidden, heads, inter) for _ in range(layers)])
        self.pooler = nn.Linear(hidden, hidden)

    def forward(self, input_ids, attention_mask, token_type_ids):
        s = input_ids.shape[1]
        pos = torch.arange(s, dtype=torch.long).unsqueeze(0)
        x = self.word(input_ids) + self.position(pos) + self.segment(token_type_ids)
        x = self.emb_norm(x)
        mask_add = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0  # [B, 1, 1, S]
        for layer in self.layers:
            x = layer(x, mask_add)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        return x, pooled


def init_weights(model):
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0.0, 0.02)
                m.bias.normal_(0.0, 0.02)
            elif isinstance(m, nn.Embedding):
                m.weight.normal_(0.0, 0.02)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.02 * torch.randn_like(m.weight))
                m.bias.normal_(0.0, 0.02)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ec.add_common_args(ap)
    ap.add_argument("--layers", type=int, default=12, help="encoder layers (default 12)")
    ap.add_argument("--hidden", type=int, default=768, help="hidden size (default 768)")
    ap.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    ap.add_argument("--intermediate", type=int, default=None, help="FFN size (default 4 * hidden)")
    ap.add_argument("--seq", type=int, default=128, help="sequence length (default 128)")
    ap.add_argument("--vocab", type=int, default=30522, help="vocabulary size (default 30522)")
    ap.add_argument("--max-pos", type=int, default=512, help="position embeddings (default 512, raised to --seq)")
    ap.add_argument("--pad", type=int, default=0, help="mask out the last N positions (default 0)")
    args = ap.parse_args(argv)
    inter = args.intermediate or 4 * args.hidden
    ec.positive(ap, batch=args.batch, layers=args.layers, hidden=args.hidden, heads=args.heads, seq=args.seq,
                vocab=args.vocab, intermediate=inter)
    if args.hidden % args.heads:
        ap.error("--hidden must be a multiple of --heads")
    if not 0 <= args.pad < args.seq:
        ap.error("--pad must be in [0, seq)")
    max_pos = max(args.max_pos, args.seq)

    import numpy as np

    t0 = time.time()
    ec.set_determinism(args.seed)
    model = Bert(args.vocab, args.hidden, args.layers, args.heads, inter, max_pos=max_pos)
    init_weights(model)
    model.eval()

    b, s = args.batch, args.seq
    input_ids = torch.randint(0, args.vocab, (b, s), generator=ec.generator(args.seed, 1), dtype=torch.long)
    attention_mask = torch.ones(b, s, dtype=torch.long)
    if args.pad:
        attention_mask[:, s - args.pad:] = 0
    token_type_ids = torch.zeros(b, s, dtype=torch.long)
    token_type_ids[:, s // 2:] = 1
    inputs = (input_ids, attention_mask, token_type_ids)
    with torch.no_grad():
        hidden, pooled = model(*inputs)

    linear_macs = ec.count_macs_with_hooks(model, inputs)
    attn_macs = args.layers * b * 2 * s * s * args.hidden  # Q@K^T and probs@V over all heads
    macs = linear_macs + attn_macs
    params = ec.count_params(model)

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, "bert.onnx")
    in_names = ["input_ids", "attention_mask", "token_type_ids"]
    out_names = ["last_hidden_state", "pooler_output"]
    torch.onnx.export(model, inputs, onnx_path, opset_version=args.opset, input_names=in_names,
                      output_names=out_names, do_constant_folding=True)
    for name, t in zip(in_names, inputs):
        ec.save_npy(args.out, f"{name}.npy", t.numpy(), np.int64)
    outs = (hidden, pooled)
    for name, t in zip(out_names, outs):
        ec.save_npy(args.out, f"{name}_ref.npy", t.numpy(), np.float32)
    info = ec.check_and_describe(onnx_path)
    seconds = time.time() - t0
    ec.write_meta(args.out, {
        "model": os.path.basename(onnx_path),
        "config": {"layers": args.layers, "hidden": args.hidden, "heads": args.heads, "intermediate": inter,
                   "seq": s, "vocab": args.vocab, "max_pos": max_pos, "type_vocab": 2, "batch": b,
                   "pad": args.pad, "layer_norm_eps": 1e-12, "activation": "gelu_erf"},
        "opset": args.opset, "seed": args.seed,
        "inputs": {n: {"file": f"{n}.npy", "shape": list(t.shape), "dtype": "int64"} for n, t in zip(in_names, inputs)},
        "outputs": {n: {"file": f"{n}_ref.npy", "shape": list(t.shape), "dtype": "float32"}
                    for n, t in zip(out_names, outs)},
        "params": params, "macs": macs, "flops": 2 * macs, "linear_macs": linear_macs, "attention_macs": attn_macs,
        "flops_note": "2 * multiply-accumulates of the Linear layers (hooks) and the Q@K^T and probs@V matmuls "
                      "(layers*batch*2*seq^2*hidden); softmax, LayerNorm, GELU and adds excluded",
        "onnx": info,
    })
    ec.summary("bert.py", onnx_path, params, 2 * macs, seconds, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
