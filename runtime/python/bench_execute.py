"""Per-call cost of the Python module's executions and the resident set over them (a benchmark: not a test).
    PYTHONPATH=build/runtime/python /usr/bin/python3 runtime/python/bench_execute.py [calls]
Runs vadd (N = 256, f32) on the edge preset: Client.execute with numpy inputs (waits), and execute_async with
Buffer inputs then result() (one device, and two devices submitted back to back), `calls` times each after a
warm-up; prints wall and process-CPU (both threads) microseconds per call, and the RSS before and after."""
import os
import sys
import time

import numpy as np

import tpusim

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def rss_mib():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main():
    calls = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    c = tpusim.Client("edge", devices=2)
    exe = c.assemble(os.path.join(SOURCE, "kernels", "vadd.s"), {"N": 256})
    a, b = np.ones(256, np.float32), np.full(256, 2, np.float32)
    bufs = [{"a": c.buffer(a, d), "b": c.buffer(b, d)} for d in (0, 1)]
    cases = {
        "execute (numpy, waits)": lambda: c.execute(exe, {"a": a, "b": b}),
        "execute_async + result (Buffers)": lambda: c.execute_async(exe, bufs[0]).result(),
        "execute_async x2 devices + results": lambda: [f.result() for f in
                                                        [c.execute_async(exe, bufs[d], device=d) for d in (0, 1)]],
    }
    print(f"tpusim {tpusim.__file__}")
    for name, f in cases.items():
        for _ in range(100):
            f()
        before = rss_mib()
        t, cpu = time.perf_counter(), time.process_time()
        for _ in range(calls):
            f()
        us = (time.perf_counter() - t) / calls * 1e6
        cpu_us = (time.process_time() - cpu) / calls * 1e6
        print(f"{name:38s} {us:7.1f} us/call wall {cpu_us:7.1f} us CPU   RSS {before:.1f} -> {rss_mib():.1f} MiB "
              f"over {calls} calls")


main()
