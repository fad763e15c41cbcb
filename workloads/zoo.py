#!/usr/bin/env python3
"""Export one small model of the model zoo (plain torch modules, random weights) to ONNX, with its inputs and PyTorch's own outputs as references.

Run with Debian's interpreter (/usr/bin/python3, which sees python3-torch/onnx/numpy):

    /usr/bin/python3 workloads/zoo.py --model llama --out build/workloads/zoo_llama
    /usr/bin/python3 workloads/zoo.py --model whisper --out build/workloads/zoo_whisper
    /usr/bin/python3 workloads/zoo.py --model unet --out build/workloads/zoo_unet
    /usr/bin/python3 workloads/zoo.py --model conformer --out build/workloads/zoo_conformer

Each writes into DIR: <model>.onnx, every graph input as <name>.npy, every graph output (PyTorch's float32 result
for those inputs) as <name>_ref.npy, and meta.json (configuration, inputs, outputs, parameters, MACs, ONNX op types:
the conventions of workloads/README.md). The models are written as their originals are (Hugging Face's LLaMA and
Whisper, torchaudio's Conformer, the usual U-Net), at sizes that export in seconds into files under 1 MB:

  llama      LLaMA-style decoder, prefill: token embedding; per layer RMSNorm (x * rsqrt(mean(x^2) + eps) * w, as
             LlamaRMSNorm writes it), attention with rotary embeddings computed in the graph from the position_ids
             input (inv_freq @ positions, cat(freqs, freqs), cos, sin; rotate_half), grouped-query attention
             (4 query heads over 2 key/value heads, k and v repeated with expand + reshape as repeat_kv does), the
             causal mask of _make_causal_mask (finfo.min above the diagonal, added to the scores), softmax in
             float32 (softmax(dtype=float32).to(dtype): two Casts), o_proj; RMSNorm, SwiGLU MLP
             (down(silu(gate(x)) * up(x))); final RMSNorm, lm_head.
             Inputs input_ids, position_ids int64 [1, 16]; output logits [1, 16, 128].
  whisper    Whisper-style encoder-decoder: encoder = Conv1d(16 mels -> 48, k3, p1), GELU, Conv1d(48 -> 48, k3,
             stride 2, p1), GELU, sinusoidal positions, 2 pre-LN layers (bidirectional self-attention, GELU MLP),
             LayerNorm (d_model 48, 3 heads, MLP 192); decoder = token + learned position embeddings, 2 pre-LN
             layers (causal self-attention, cross-attention to the encoder output, GELU MLP), LayerNorm, lm_head
             tied to the token embedding.
             q/v projections with bias, k without, q scaled by head_dim^-0.5 as WhisperAttention does.
             Inputs input_features float32 [1, 16, 32], decoder_input_ids int64 [1, 8]; outputs logits [1, 8, 128],
             encoder_last_hidden_state [1, 16, 48].
  unet       U-Net, 3 levels: blocks of (Conv2d 3x3, BatchNorm2d, ReLU) x 2; down by MaxPool2d(2), then by a
             stride-2 Conv2d; up by ConvTranspose2d(k2, s2) at the lower level and nn.Upsample(bilinear) + Conv2d
             at the upper one, each followed by concatenation with the skip; 1x1 head, plus a deep-supervision head
             on the lower decoder level brought up with F.interpolate(nearest) and added.
             Input input float32 [1, 3, 32, 32]; output logits [1, 2, 32, 32].
  conformer  One Conformer block (torchaudio's ConformerLayer): x + 0.5 * FFN(x) (LayerNorm, Linear, SiLU,
             Linear); x + MHSA(LayerNorm(x)) (nn.MultiheadAttention); x + Conv(x) (LayerNorm, pointwise Conv1d to
             2x channels, GLU, depthwise Conv1d k15, BatchNorm1d, SiLU, pointwise Conv1d); x + 0.5 * FFN(x);
             LayerNorm. Input input float32 [1, 32, 64] (batch, time, features); output output [1, 32, 64].

BatchNorms get random running statistics and affine parameters (eval mode), so that they are not the identity.
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

# Multiply-accumulates of the attention matmuls (q @ k^T and probs @ v) of one forward, added up by attend() while a
# count is running (count_macs below); the Linear and Conv layers are counted with hooks.
_ATTENTION_MACS = []


def attend(q, k, v, mask=None, scale=None, softmax_fp32=False):
    """Eager attention as Hugging Face writes it: q [B, H, Sq, d], k and v [B, H, Sk, d]. softmax_fp32: the softmax
    in float32 and back to q's dtype, as LLaMA's attention does (two Casts in the export, identities here)."""
    scores = torch.matmul(q, k.transpose(2, 3))
    if scale is not None:
        scores = scores * scale
    if mask is not None:
        scores = scores + mask
    if softmax_fp32:
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
    else:
        probs = F.softmax(scores, dim=-1)
    if _ATTENTION_MACS:
        b, h, sq, d = q.shape
        _ATTENTION_MACS[-1] += 2 * b * h * sq * k.shape[2] * d
    return torch.matmul(probs, v)


def randomize_bn(bn):
    with torch.no_grad():
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
    return bn


# --- LLaMA-style decoder (transformers' modeling_llama, eager attention) -----------------------------------------

class LlamaRMSNorm(nn.Module):
    def __init__(self, hidden, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        input_dtype = hidden_states.dtype
        hidden_states = hidden_states.to(torch.float32)
        variance = hidden_states.pow(2).mean(-1, keepdim=True)
        hidden_states = hidden_states * torch.rsqrt(variance + self.variance_epsilon)
        return self.weight * hidden_states.to(input_dtype)


class LlamaRotaryEmbedding(nn.Module):
    def __init__(self, dim, base=10000.0):
        super().__init__()
        inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, x, position_ids):
        inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
        position_ids_expanded = position_ids[:, None, :].float()
        freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(x.dtype), emb.sin().to(x.dtype)


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)


def repeat_kv(hidden_states, n_rep):
    """[B, kv_heads, S, d] -> [B, kv_heads * n_rep, S, d], as transformers' repeat_kv (expand + reshape)."""
    batch, num_key_value_heads, slen, head_dim = hidden_states.shape
    if n_rep == 1:
        return hidden_states
    hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
    return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads, kv_heads):
        super().__init__()
        self.num_heads, self.num_key_value_heads = heads, kv_heads
        self.head_dim = hidden // heads
        self.num_key_value_groups = heads // kv_heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, hidden_states, position_embeddings, attention_mask):
        bsz, q_len, _ = hidden_states.size()
        q = self.q_proj(hidden_states).view(bsz, q_len, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(bsz, q_len, self.num_key_value_heads, self.head_dim).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = repeat_kv(k, self.num_key_value_groups)
        v = repeat_kv(v, self.num_key_value_groups)
        out = attend(q, k, v, attention_mask, scale=1.0 / math.sqrt(self.head_dim), softmax_fp32=True)
        out = out.transpose(1, 2).contiguous().reshape(bsz, q_len, -1)
        return self.o_proj(out)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.self_attn = LlamaAttention(cfg["hidden"], cfg["heads"], cfg["kv_heads"])
        self.mlp = LlamaMLP(cfg["hidden"], cfg["intermediate"])
        self.input_layernorm = LlamaRMSNorm(cfg["hidden"], cfg["rms_norm_eps"])
        self.post_attention_layernorm = LlamaRMSNorm(cfg["hidden"], cfg["rms_norm_eps"])

    def forward(self, x, position_embeddings, mask):
        x = x + self.self_attn(self.input_layernorm(x), position_embeddings, mask)
        return x + self.mlp(self.post_attention_layernorm(x))


def make_causal_mask(bsz, tgt_len, dtype):
    """transformers' _make_causal_mask (no past): 0 on and below the diagonal, finfo(dtype).min above."""
    mask = torch.full((tgt_len, tgt_len), torch.finfo(dtype).min)
    mask_cond = torch.arange(mask.size(-1))
    mask.masked_fill_(mask_cond < (mask_cond + 1).view(mask.size(-1), 1), 0)
    return mask.to(dtype)[None, None, :, :].expand(bsz, 1, tgt_len, tgt_len)


class Llama(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab"], cfg["hidden"])
        self.layers = nn.ModuleList([LlamaDecoderLayer(cfg) for _ in range(cfg["layers"])])
        self.norm = LlamaRMSNorm(cfg["hidden"], cfg["rms_norm_eps"])
        self.rotary_emb = LlamaRotaryEmbedding(cfg["hidden"] // cfg["heads"], cfg["rope_theta"])
        self.lm_head = nn.Linear(cfg["hidden"], cfg["vocab"], bias=False)

    def forward(self, input_ids, position_ids):
        x = self.embed_tokens(input_ids)
        mask = make_causal_mask(input_ids.shape[0], input_ids.shape[1], x.dtype)
        position_embeddings = self.rotary_emb(x, position_ids)
        for layer in self.layers:
            x = layer(x, position_embeddings, mask)
        return self.lm_head(self.norm(x))


def build_llama(args):
    cfg = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "intermediate": 176, "vocab": 128, "seq": 16,
           "rope_theta": 10000.0, "rms_norm_eps": 1e-6, "batch": args.batch}
    model = Llama(cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)  # initializer_range
            elif isinstance(m, LlamaRMSNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))  # trained norms are not all ones
    ids = torch.randint(0, cfg["vocab"], (args.batch, cfg["seq"]), generator=ec.generator(args.seed, 1))
    pos = torch.arange(cfg["seq"], dtype=torch.long).unsqueeze(0).expand(args.batch, -1).contiguous()
    return model, cfg, ["input_ids", "position_ids"], [ids, pos], ["logits"]


# --- Whisper-style encoder-decoder (transformers' modeling_whisper) ---------------------------------------------

def sinusoids(length, channels, max_timescale=10000):
    """Whisper's sinusoidal position embedding for the encoder."""
    log_timescale_increment = math.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, None] * inv_timescales[None, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


class WhisperAttention(nn.Module):
    def __init__(self, d_model, heads):
        super().__init__()
        self.num_heads, self.head_dim = heads, d_model // heads
        self.scaling = self.head_dim ** -0.5
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def _shape(self, t, bsz):
        return t.view(bsz, -1, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, hidden_states, key_value_states=None, attention_mask=None):
        bsz, tgt_len, _ = hidden_states.size()
        kv = hidden_states if key_value_states is None else key_value_states  # cross-attention: the encoder's
        q = self._shape(self.q_proj(hidden_states) * self.scaling, bsz)
        k = self._shape(self.k_proj(kv), bsz)
        v = self._shape(self.v_proj(kv), bsz)
        out = attend(q, k, v, attention_mask)
        return self.out_proj(out.transpose(1, 2).reshape(bsz, tgt_len, -1))


class WhisperEncoderLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.self_attn = WhisperAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x):
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class WhisperDecoderLayer(nn.Module):
    def __init__(self, d, heads, ffn):
        super().__init__()
        self.self_attn = WhisperAttention(d, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.encoder_attn = WhisperAttention(d, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d)
        self.fc1, self.fc2 = nn.Linear(d, ffn), nn.Linear(ffn, d)
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x, encoder_hidden_states, mask):
        x = x + self.self_attn(self.self_attn_layer_norm(x), attention_mask=mask)
        x = x + self.encoder_attn(self.encoder_attn_layer_norm(x), key_value_states=encoder_hidden_states)
        return x + self.fc2(F.gelu(self.fc1(self.final_layer_norm(x))))


class Whisper(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d, h, f = cfg["d_model"], cfg["heads"], cfg["ffn"]
        self.conv1 = nn.Conv1d(cfg["num_mel_bins"], d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.register_buffer("embed_positions", sinusoids(cfg["max_source_positions"], d))
        self.encoder_layers = nn.ModuleList([WhisperEncoderLayer(d, h, f) for _ in range(cfg["encoder_layers"])])
        self.encoder_layer_norm = nn.LayerNorm(d)
        self.embed_tokens = nn.Embedding(cfg["vocab"], d)
        self.decoder_positions = nn.Embedding(cfg["max_target_positions"], d)
        self.decoder_layers = nn.ModuleList([WhisperDecoderLayer(d, h, f) for _ in range(cfg["decoder_layers"])])
        self.decoder_layer_norm = nn.LayerNorm(d)

    def encode(self, input_features):
        x = F.gelu(self.conv1(input_features))
        x = F.gelu(self.conv2(x))
        x = x.permute(0, 2, 1)
        x = x + self.embed_positions[: x.shape[1]]
        for layer in self.encoder_layers:
            x = layer(x)
        return self.encoder_layer_norm(x)

    def forward(self, input_features, decoder_input_ids):
        enc = self.encode(input_features)
        bsz, tgt_len = decoder_input_ids.shape
        x = self.embed_tokens(decoder_input_ids) + self.decoder_positions.weight[:tgt_len]
        mask = make_causal_mask(bsz, tgt_len, x.dtype)
        for layer in self.decoder_layers:
            x = layer(x, enc, mask)
        x = self.decoder_layer_norm(x)
        logits = x @ self.embed_tokens.weight.transpose(0, 1)  # proj_out tied to the token embedding
        return logits, enc


def build_whisper(args):
    cfg = {"num_mel_bins": 16, "frames": 32, "d_model": 48, "heads": 3, "ffn": 192, "encoder_layers": 2,
           "decoder_layers": 2, "vocab": 128, "decoder_tokens": 8, "max_source_positions": 16,
           "max_target_positions": 32, "batch": args.batch}
    model = Whisper(cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, (nn.Linear, nn.Conv1d, nn.Embedding)):
                m.weight.normal_(0.0, 0.02)  # init_std
                if getattr(m, "bias", None) is not None:
                    m.bias.normal_(0.0, 0.02)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.normal_(0.0, 0.02)
    feats = torch.randn(args.batch, cfg["num_mel_bins"], cfg["frames"], generator=ec.generator(args.seed, 1))
    ids = torch.randint(0, cfg["vocab"], (args.batch, cfg["decoder_tokens"]), generator=ec.generator(args.seed, 2))
    return model, cfg, ["input_features", "decoder_input_ids"], [feats, ids], ["logits", "encoder_last_hidden_state"]


# --- U-Net -----------------------------------------------------------------------------------------------------

class DoubleConv(nn.Module):
    def __init__(self, cin, cout):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
            nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True))

    def forward(self, x):
        return self.net(x)


class UNet(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c, n_cls = cfg["base_channels"], cfg["classes"]
        self.inc = DoubleConv(cfg["in_channels"], c)
        self.pool = nn.MaxPool2d(2)
        self.down1 = DoubleConv(c, 2 * c)
        self.down2 = nn.Sequential(nn.Conv2d(2 * c, 2 * c, 3, stride=2, padding=1), DoubleConv(2 * c, 4 * c))
        self.up2 = nn.ConvTranspose2d(4 * c, 2 * c, kernel_size=2, stride=2)
        self.conv2 = DoubleConv(4 * c, 2 * c)
        self.up1 = nn.Sequential(nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False),
                                 nn.Conv2d(2 * c, c, 3, padding=1))
        self.conv1 = DoubleConv(2 * c, c)
        self.outc = nn.Conv2d(c, n_cls, 1)
        self.aux = nn.Conv2d(2 * c, n_cls, 1)  # deep supervision from the lower decoder level

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(self.pool(x1))
        x3 = self.down2(x2)
        d2 = self.conv2(torch.cat([x2, self.up2(x3)], dim=1))
        d1 = self.conv1(torch.cat([x1, self.up1(d2)], dim=1))
        return self.outc(d1) + F.interpolate(self.aux(d2), scale_factor=2, mode="nearest")


def build_unet(args):
    cfg = {"in_channels": 3, "base_channels": 16, "classes": 2, "size": 32, "batch": args.batch}
    model = UNet(cfg)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            randomize_bn(m)
    x = torch.randn(args.batch, cfg["in_channels"], cfg["size"], cfg["size"], generator=ec.generator(args.seed, 1))
    return model, cfg, ["input"], [x], ["logits"]


# --- Conformer block (torchaudio.models.conformer.ConformerLayer) ---------------------------------------------

class FeedForwardModule(nn.Module):
    def __init__(self, d, ffn):
        super().__init__()
        self.sequential = nn.Sequential(nn.LayerNorm(d), nn.Linear(d, ffn, bias=True), nn.SiLU(), nn.Dropout(0.1),
                                        nn.Linear(ffn, d, bias=True), nn.Dropout(0.1))

    def forward(self, x):
        return self.sequential(x)


class ConvolutionModule(nn.Module):
    def __init__(self, d, kernel):
        super().__init__()
        self.layer_norm = nn.LayerNorm(d)
        self.sequential = nn.Sequential(
            nn.Conv1d(d, 2 * d, 1), nn.GLU(dim=1),
            nn.Conv1d(d, d, kernel, stride=1, padding=(kernel - 1) // 2, groups=d), nn.BatchNorm1d(d), nn.SiLU(),
            nn.Conv1d(d, d, 1), nn.Dropout(0.1))

    def forward(self, x):  # [B, T, D]
        x = self.layer_norm(x).transpose(1, 2)
        return self.sequential(x).transpose(1, 2)


class ConformerLayer(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg["d_model"]
        self.ffn1 = FeedForwardModule(d, cfg["ffn"])
        self.self_attn_layer_norm = nn.LayerNorm(d)
        self.self_attn = nn.MultiheadAttention(d, cfg["heads"], dropout=0.1)
        self.self_attn_dropout = nn.Dropout(0.1)
        self.conv_module = ConvolutionModule(d, cfg["conv_kernel"])
        self.ffn2 = FeedForwardModule(d, cfg["ffn"])
        self.final_layer_norm = nn.LayerNorm(d)

    def forward(self, x):  # [B, T, D]
        x = x + 0.5 * self.ffn1(x)
        residual = x
        y = self.self_attn_layer_norm(x).transpose(0, 1)  # nn.MultiheadAttention is time-major
        y, _ = self.self_attn(y, y, y, need_weights=False)
        x = residual + self.self_attn_dropout(y.transpose(0, 1))
        x = x + self.conv_module(x)
        x = x + 0.5 * self.ffn2(x)
        return self.final_layer_norm(x)


def build_conformer(args):
    cfg = {"d_model": 64, "heads": 4, "ffn": 256, "conv_kernel": 15, "time": 32, "batch": args.batch}
    model = ConformerLayer(cfg)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                randomize_bn(m)
            elif isinstance(m, nn.LayerNorm):
                m.weight.copy_(1.0 + 0.1 * torch.randn_like(m.weight))
                m.bias.normal_(0.0, 0.05)
    x = torch.randn(args.batch, cfg["time"], cfg["d_model"], generator=ec.generator(args.seed, 1))
    return model, cfg, ["input"], [x], ["output"]


MODELS = {"llama": build_llama, "whisper": build_whisper, "unet": build_unet, "conformer": build_conformer}


def count_macs(model, inputs):
    """Multiply-accumulates of Conv/ConvTranspose/Linear layers (hooks), nn.MultiheadAttention's two matmuls and
    attend()'s, and Whisper's tied lm_head (a matmul of a parameter), in one forward."""
    macs = [0]
    handles = []

    def conv_hook(mod, inp, out):
        k = math.prod(mod.kernel_size)
        if isinstance(mod, nn.ConvTranspose2d):
            macs[0] += inp[0].numel() * (mod.out_channels // mod.groups) * k
        else:
            macs[0] += out.numel() * (mod.in_channels // mod.groups) * k

    def linear_hook(mod, inp, out):
        macs[0] += out.numel() * mod.in_features

    def mha_hook(mod, inp, out):
        t, b, e = inp[0].shape  # time-major query; self-attention here
        macs[0] += 2 * b * t * t * e

    for m in model.modules():
        if isinstance(m, (nn.Conv1d, nn.Conv2d, nn.ConvTranspose2d)):
            handles.append(m.register_forward_hook(conv_hook))
        elif isinstance(m, nn.Linear):
            handles.append(m.register_forward_hook(linear_hook))
        elif isinstance(m, nn.MultiheadAttention):
            handles.append(m.register_forward_hook(mha_hook))
    _ATTENTION_MACS.append(0)
    try:
        with torch.no_grad():
            outs = model(*inputs)
    finally:
        for h in handles:
            h.remove()
        attn = _ATTENTION_MACS.pop()
    if isinstance(model, Whisper):
        logits = outs[0]
        macs[0] += logits.numel() * model.embed_tokens.weight.shape[1]
    return macs[0] + attn


def main(argv=None):
    import numpy as np

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, choices=sorted(MODELS), help="which model to export")
    ec.add_common_args(ap)
    args = ap.parse_args(argv)
    ec.positive(ap, batch=args.batch)

    t0 = time.time()
    ec.set_determinism(args.seed)
    model, cfg, in_names, inputs, out_names = MODELS[args.model](args)
    model.eval()
    params = ec.count_params(model)
    macs = count_macs(model, inputs)
    with torch.no_grad():
        outs = model(*inputs)
    if not isinstance(outs, tuple):
        outs = (outs,)

    os.makedirs(args.out, exist_ok=True)
    onnx_path = os.path.join(args.out, f"{args.model}.onnx")
    torch.onnx.export(model, tuple(inputs), onnx_path, opset_version=args.opset, input_names=in_names,
                      output_names=out_names, do_constant_folding=True)
    for name, t in zip(in_names, inputs):
        ec.save_npy(args.out, f"{name}.npy", t.numpy(), np.int64 if t.dtype == torch.long else np.float32)
    for name, t in zip(out_names, outs):
        ec.save_npy(args.out, f"{name}_ref.npy", t.numpy(), np.float32)
    info = ec.check_and_describe(onnx_path)
    ec.write_meta(args.out, {
        "model": os.path.basename(onnx_path),
        "zoo_model": args.model,
        "config": cfg,
        "opset": args.opset, "seed": args.seed,
        **ec.io_meta(in_names, inputs, out_names, outs),
        "params": params, "macs": macs, "flops": 2 * macs,
        "flops_note": "2 * multiply-accumulates of the Conv, ConvTranspose and Linear layers, the attention matmuls "
                      "(q @ k^T and probs @ v) and Whisper's tied lm_head; norms, activations and adds excluded",
        "onnx": info,
    })
    ec.summary(f"zoo.py ({args.model})", onnx_path, params, 2 * macs, time.time() - t0, info)
    return 0


if __name__ == "__main__":
    sys.exit(main())
