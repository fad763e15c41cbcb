#!/usr/bin/env python3
"""Expected f8e4m3 (OCP FP8 E4M3, "fn": torch.float8_e4m3fn) conversions for isa_tests (Numerics.F8E4M3*).

Prints one line per case, nothing else but a first line naming the reference used:
  source NAME                 torch, ml_dtypes or spec (below)
  decode BITS F32BITS|nan     every one of the 256 patterns: its value as f32 bits (hex), or nan
  encode F32BITS BITS         an f32 (hex bits) and the f8e4m3 pattern it converts to (hex)

The reference is torch.float8_e4m3fn where this torch has it (torch >= 2.1), else ml_dtypes.float8_e4m3fn,
else "spec": the format decoded from its definition (sign, 4 exponent bits with bias 7, 3 mantissa bits,
exponent 0 subnormal, S.1111.111 NaN) and each f32 converted by exhaustive search over the 254 finite values
with exact rational arithmetic: the nearest value, ties to the even pattern; 480 (S.1111.111 read as a number)
stands for "beyond 448", so anything that rounds to it (above 464), an infinity or NaN gives NaN; the sign is
the operand's (torch's c10::Float8_e4m3fn conversion: not saturating, sign bit kept). Debian 12's torch (1.13)
has no float8 types, hence the fallbacks; the spec reference was checked against ml_dtypes 0.5 once
(isa/tests/numerics_test.cpp says so).

Cases: every f8e4m3 value, every midpoint between neighbours (the ties) and the f32 values either side of it,
the edges (zeros, the subnormal boundary, 448..480, huge values, infinities, NaN, f32 subnormals) and 4000
random f32 patterns between 2^-12 and 2^10, both signs (fixed seed).
"""
import bisect
import math
import random
import struct
import sys
from fractions import Fraction


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def f32_from_bits(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def spec_value(bits):
    """The value of an f8e4m3 pattern from the format's definition (a Fraction, or None for NaN)."""
    s, e, m = bits >> 7, (bits >> 3) & 15, bits & 7
    if e == 15 and m == 7:
        return None
    v = Fraction(m, 8) * Fraction(2) ** -6 if e == 0 else (1 + Fraction(m, 8)) * Fraction(2) ** (e - 7)
    return -v if s else v


CANDS = None  # set in main: [(value, pattern)] for 0x00..0x7e, and (480, 0x7f)


def spec_encode(x):
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    if math.isnan(x) or math.isinf(x):
        return sign | 0x7F
    a = Fraction(abs(x))
    # Candidates: the 127 non-negative patterns 0x00..0x7e and 0x7f read as 480 (the value past 448), in order;
    # the nearest is one of the two around a (bisect), a tie goes to the even pattern.
    i = bisect.bisect_left(CANDS, (a, -1))
    near = CANDS[max(0, i - 1):i + 1]
    best = min(near, key=lambda c: (abs(c[0] - a), c[1] & 1))
    return sign | best[1]


def cases():
    xs = []
    finite = sorted({spec_value(b) for b in range(256) if spec_value(b) is not None})
    for v in finite:
        xs.append(float(v))
    for lo, hi in zip(finite, finite[1:]):
        mid = float((lo + hi) / 2)  # exact in f32: a few significant bits
        xs += [mid, math.nextafter(mid, -math.inf), math.nextafter(mid, math.inf)]
    xs += [0.0, -0.0, 2.0 ** -6, 2.0 ** -7, 2.0 ** -9, 2.0 ** -10, 2.0 ** -11, 2.0 ** -12, 3 * 2.0 ** -11,
           448.0, 449.0, 456.0, 463.99, 464.0, 464.01, 470.0, 479.99, 480.0, 481.0, 500.0, 1e4, 1e30, 3.4e38,
           math.inf, -math.inf, math.nan, -math.nan, -464.0, -465.0, -1e30, 1e-30, -1e-30, 1e-45, 2.0 ** -126]
    rng = random.Random(2026)
    while len(xs) < 6000:
        b = rng.randrange(f32_bits(2.0 ** -12), f32_bits(2.0 ** 10)) | (rng.randrange(2) << 31)
        xs.append(f32_from_bits(b))
    return [f32_from_bits(f32_bits(x)) for x in xs]  # as f32 (the inputs above are f32 values already)


def main():
    global CANDS
    CANDS = [(spec_value(b), b) for b in range(0x7F)] + [(Fraction(480), 0x7F)]
    xs = cases()
    bits_in = [f32_bits(x) for x in xs]
    source = "spec"
    dec = enc = None
    try:
        import torch
        if hasattr(torch, "float8_e4m3fn"):
            t = torch.tensor(xs, dtype=torch.float32)
            enc = t.to(torch.float8_e4m3fn).view(torch.uint8).tolist()
            dec = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().tolist()
            source = "torch"
    except ImportError:
        pass
    if enc is None:
        try:
            import ml_dtypes
            import numpy as np
            a = np.array(xs, dtype=np.float32)
            enc = a.astype(ml_dtypes.float8_e4m3fn).view(np.uint8).tolist()
            dec = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32).tolist()
            source = "ml_dtypes"
        except ImportError:
            pass
    if enc is None:
        enc = [spec_encode(x) for x in xs]
        dec = [math.nan if spec_value(b) is None else math.copysign(float(abs(spec_value(b))), 0.5 - (b >> 7))
               for b in range(256)]  # (a Fraction has no -0: the sign from the pattern)
    out = [f"source {source}"]
    for b in range(256):
        v = dec[b]
        out.append(f"decode {b:02x} " + ("nan" if math.isnan(v) else f"{f32_bits(v):08x}"))
    for bi, e in zip(bits_in, enc):
        out.append(f"encode {bi:08x} {e:02x}")
    if len(sys.argv) > 1 and sys.argv[1] == "--check-spec":  # the fallback against whatever reference was found
        bad = [(hex(bi), hex(e), hex(spec_encode(f32_from_bits(bi)))) for bi, e in zip(bits_in, enc)
               if spec_encode(f32_from_bits(bi)) != e]
        print(f"source {source}: {len(xs)} encodes, {len(bad)} differ from the spec reference {bad[:10]}")
        return
    print("\n".join(out))


if __name__ == "__main__":
    main()
