"""The held-out split of the goldens, written again from its definition (validation/validate/validate.cpp: a case is held out
when the FNV-1a 64-bit hash of its key is 0 modulo 5), so the sample tests check tpusim's split independently."""


def fnv1a(s):
    h = 1469598103934665603
    for c in s.encode():
        h = ((h ^ c) * 1099511628211) % (1 << 64)
    return h
