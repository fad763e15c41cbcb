"""A Python client of tpusim (installed with pip, or PYTHONPATH=build/runtime/python): an int8 matmul on a
simulated "edge" chip, from numpy and from a device buffer, checked against numpy. Run: python3 example.py matmul.s"""
import sys

import numpy as np

import tpusim

c = tpusim.client("edge")  # the process's Client; running this again in a notebook gets the same one
exe = c.assemble(sys.argv[1], {"M": 16, "K": 32, "N": 24})
rng = np.random.default_rng(0)
a = rng.integers(-128, 128, (16, 32), dtype=np.int8)
b = rng.integers(-128, 128, (32, 24), dtype=np.int8)
r = c.execute(exe, {"a": a, "b": tpusim.device_put(b)})  # numpy or Buffer alike; waits
f = c.execute_async(exe, {"a": a, "b": b})  # returns at once
out = np.asarray(f.result().outputs["c"])  # a Buffer, as numpy
want = a.astype(np.int32) @ b.astype(np.int32)
ok = np.array_equal(r.outputs["c"], want) and np.array_equal(out, want)
print(f"example.py: matmul 16x32x24 on edge in {r.cycles} cycles, {'exact' if ok else 'WRONG'}")
sys.exit(0 if ok else 1)
