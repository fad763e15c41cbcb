#!/usr/bin/python3
"""Mutation loop over programs run through the tpusim program (the simulator cannot be fuzzed in-process: one
SystemC kernel per process). Starts from the programs in the --seeds folders (their disassembly, and the binaries),
mutates them, and runs each mutant with `tpusim run FILE --timing-only --random-inputs --max-cycles N` under a
wall-clock timeout and a memory limit. Every run must end by itself with status 0, or with status 1 or 2 and a
last line on stderr that is one clear `tpusim: ...` message (no "internal error"); a signal, a timeout or any
other ending is a finding, saved with its command under --findings. Deterministic for a given --seed.

  validation/fuzz/cli_mutate.py --tpusim build/tools/tpusim --seconds 60 [--runs N] [--seed S]
"""
import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Values that tend to break arithmetic: zero, one, boundaries of the operand widths, huge and negative numbers.
INTERESTING = [0, 1, 2, 3, 7, 8, 15, 16, 31, 32, 63, 64, 127, 128, 255, 256, 4095, 4096, 65535, 65536,
               (1 << 31) - 1, 1 << 31, (1 << 32) - 1, 1 << 32, (1 << 47) - 1, -1, -2, -128, -(1 << 31), -(1 << 47)]
INSTR = re.compile(r"^\s+[a-z]")  # an instruction line of the disassembly (directives start in column 0)
NUMBER = re.compile(r"(?<![\w.])-?(0x[0-9a-fA-F]+|\d+)(?![\w.])")
REG = re.compile(r"\br(\d+)\b")
SEM = re.compile(r"\b(wait|signal)=s(\d+)\b")


def mutate_text(lines, rng):
    """A few random edits of the disassembly's instruction lines (numbers, registers, semaphores, order)."""
    out = list(lines)
    code = [i for i, l in enumerate(out) if INSTR.match(l)]
    if not code:
        return out
    for _ in range(rng.randint(1, 4)):
        i = rng.choice(code)
        kind = rng.randrange(7)
        line = out[i].split("#", 1)[0]
        if kind == 0:  # one number becomes an interesting value (operand, branch target, immediate)
            nums = list(NUMBER.finditer(line))
            if nums:
                m = rng.choice(nums)
                line = line[:m.start()] + str(rng.choice(INTERESTING)) + line[m.end():]
        elif kind == 1:  # one register becomes another
            regs = list(REG.finditer(line))
            if regs:
                m = rng.choice(regs)
                line = line[:m.start()] + "r%d" % rng.randrange(32) + line[m.end():]
        elif kind == 2:  # a semaphore changes, or a wait/signal appears where there was none
            sems = list(SEM.finditer(line))
            if sems:
                m = rng.choice(sems)
                line = line[:m.start()] + "%s=s%d" % (m.group(1), rng.randrange(1, 32)) + line[m.end():]
            elif not line.lstrip().startswith(("li", "add", "sub", "mul", "div", "rem", "and", "or", "xor", "shl",
                                              "shr", "min", "max", "b", "jmp", "nop", "halt", "sem", "fence")):
                line = line.rstrip() + ", %s=s%d" % (rng.choice(["wait", "signal"]), rng.randrange(1, 32))
        elif kind == 3:  # an instruction is deleted
            line = ""
        elif kind == 4:  # an instruction is duplicated
            line = line + "\n" + line
        elif kind == 5:  # two instructions swap
            j = rng.choice(code)
            out[j], line = line, out[j].split("#", 1)[0]
        else:  # an instruction moves to the position of another
            j = rng.choice(code)
            line = out[j].split("#", 1)[0]
        out[i] = line
    return out


def mutate_bytes(data, rng):
    """A few random byte edits of a .tpub file (most are refused by the loader, some reach the simulator)."""
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        i = rng.randrange(len(b))
        kind = rng.randrange(3)
        if kind == 0:
            b[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            b[i] = rng.choice([0, 1, 0x7f, 0x80, 0xff])
        else:
            v = rng.choice(INTERESTING) & 0xFFFFFFFF
            b[i:i + 4] = v.to_bytes(4, "little")
    return bytes(b)


def limit_memory(mib):
    def apply():
        resource.setrlimit(resource.RLIMIT_AS, (mib << 20, mib << 20))
    return apply


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tpusim", required=True)
    ap.add_argument("--seconds", type=float, default=60, help="stop starting runs after this long")
    ap.add_argument("--runs", type=int, default=0, help="stop after this many runs (0: no limit)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=30, help="a run that takes longer is a hang")
    ap.add_argument("--max-cycles", type=int, default=2_000_000)
    ap.add_argument("--memory-mib", type=int, default=4096, help="address-space limit of each run")
    ap.add_argument("--findings", default="build-fuzz/findings/cli")
    ap.add_argument("--seeds", action="append", help="a folder of .tpub seeds (repeatable; default corpus/tpub)")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    env = dict(os.environ, SC_COPYRIGHT_MESSAGE="DISABLE")
    work = tempfile.mkdtemp(prefix="tpusim-cli-fuzz-")
    seeds = []  # (kind, content)
    paths = [os.path.join(d, name) for d in args.seeds or [os.path.join(HERE, "corpus", "tpub")]
             for name in sorted(os.listdir(d)) if name.endswith(".tpub")]
    for path in paths:
        data = open(path, "rb").read()
        seeds.append(("tpub", data))
        # Seeds the loader refuses (reproducers of findings) are mutated as bytes only. Latin-1 keeps any byte.
        dis = subprocess.run([args.tpusim, "disasm", path], capture_output=True, env=env)
        if dis.returncode == 0:
            seeds.append(("s", dis.stdout.decode("latin-1").splitlines()))

    counts = {"ran": 0, "ok": 0, "error": 0, "refused at load": 0}
    findings = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < args.seconds and (not args.runs or counts["ran"] < args.runs):
            kind, seed = rng.choice(seeds)
            if kind == "s":
                content = ("\n".join(mutate_text(seed, rng)) + "\n").encode("latin-1")
            else:
                content = mutate_bytes(seed, rng)
            path = os.path.join(work, "mutant." + kind)
            with open(path, "wb") as f:
                f.write(content)
            cmd = [args.tpusim, "run", path, "--timing-only", "--random-inputs",
                   "--max-cycles", str(args.max_cycles)]
            counts["ran"] += 1
            why = None
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, errors="replace", env=env,
                                   timeout=args.timeout, preexec_fn=limit_memory(args.memory_mib))
                last = r.stderr.strip().splitlines()[-1] if r.stderr.strip() else ""
                if r.returncode < 0:
                    why = "killed by signal %d" % -r.returncode
                elif r.returncode == 0:
                    counts["ok"] += 1
                elif r.returncode not in (1, 2):
                    why = "exit status %d" % r.returncode
                elif not last.startswith("tpusim: ") or "internal error" in last or len(last) > 2000:
                    why = "status %d without one clear message (last line: %r)" % (r.returncode, last[:300])
                else:
                    counts["error"] += 1
                    if re.search(r"\.tpub|not a tpusim|section|offset", last) and kind == "tpub":
                        counts["refused at load"] += 1
            except subprocess.TimeoutExpired:
                why = "no answer after %g s (hang)" % args.timeout
            if why:
                findings += 1
                os.makedirs(args.findings, exist_ok=True)
                keep = os.path.join(args.findings, "finding-%d.%s" % (counts["ran"], kind))
                shutil.copy(path, keep)
                print("cli_mutate.py: FINDING: %s: %s" % (why, " ".join(cmd).replace(path, keep)))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    took = time.monotonic() - start
    print("cli_mutate.py: %d runs in %.0f s (%.1f/s): %d ended normally, %d with a clear error (%d of them .tpub "
          "mutants refused by the loader), %d findings" % (counts["ran"], took, counts["ran"] / max(took, 1e-9),
                                                         counts["ok"], counts["error"], counts["refused at load"],
                                                         findings))
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
