"""The README's examples, run as written.

Every command of README.md's ```sh blocks runs from the repository root, in the README's order, with `bash`; the
```python block runs with Debian's python3 and PYTHONPATH=build/runtime/python, as the README says. The README's
commands name build/, so ctest registers this test only where its build folder is the repository's build/,
configured as the README's first command configures it (validation/system/CMakeLists.txt).

`tpusim` is found the way a user finds it: the first command, `bash scripts/run-demo.sh`, links it into a folder
(TPUSIM_BIN_DIR, here a temporary one instead of /usr/local/bin) that is first on the PATH of every later command.
The commands that build and test the project (NOT_RUN) are not run here: they are what runs this test.

Each command must exit with 0 and leave behind every file or folder it names with an output option; a few print
what they are about (the demo passes, tpusim is put on the PATH). Afterwards `git status` lists nothing new: the
examples write under build/, which git ignores.

    REPO=. BUILD=build /usr/bin/python3 -m unittest validation/system/test_readme.py
"""
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import unittest

REPO = os.path.abspath(os.environ.get("REPO", os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD = os.path.abspath(os.environ.get("BUILD", os.path.join(REPO, "build")))

# Commands of the README this test does not run, and why; each must still be in the README.
NOT_RUN = {
    "bash scripts/run-tests.sh": "builds everything and runs every test, this one included",
    "cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release && cmake --build build":
        "the build these tests run from (run-tests.sh has just done it)",
    "ctest --test-dir build -j2": "runs every test, this one included",
    "bash scripts/run-chip-bench.sh": "minutes of whole-chip GEMMs (a benchmark; chip_bench's command above runs)",
    "cmake --install build --prefix /opt/tpusim":
        "writes outside the repository; the examples test installs into a fresh prefix and builds from it",
    "cmake -S examples -B /tmp/ex -DCMAKE_PREFIX_PATH=/opt/tpusim && cmake --build /tmp/ex": "the examples test does",
    "/tmp/ex/example_c examples/matmul.s": "the examples test runs the installed examples",
    "/usr/bin/python3 -m venv --system-site-packages .venv": "python.pip_install makes its own environment",
    ".venv/bin/pip install --no-build-isolation --no-index .":
        "builds the whole project again (minutes); python.pip_install runs it",
}

# Options whose value is a file or folder the command writes.
OUTPUT_OPTIONS = {"--output-dir", "-o", "--stats", "--trace", "--report", "--report-json", "--json", "--out"}


def code_blocks(text, language):
    return re.findall(r"^```" + language + r"\n(.*?)^```$", text, re.M | re.S)


def commands(block):
    """The block's commands: lines joined where one ends with a backslash or leaves a quote open; lines that are
    only a comment are not commands."""
    out, pending = [], ""
    for line in block.splitlines():
        pending = pending + "\n" + line if pending else line
        if pending.endswith("\\"):
            continue
        try:
            words = shlex.split(pending, comments=True)
        except ValueError:  # an open quote: the command goes on
            continue
        if words:  # not a blank or comment-only line
            out.append(pending)
        pending = ""
    assert not pending, f"unfinished command at the end of a block: {pending}"
    return out


def without_comment(command):
    """The command as its words, without the trailing comment (for comparing and for finding outputs)."""
    return " ".join(shlex.split(command.replace("\\\n", " "), comments=True))


def outputs_named(command):
    """Every path the command names after an output option ("-" is standard output)."""
    words = shlex.split(command.replace("\\\n", " "), comments=True)
    return [value for option, value in zip(words, words[1:]) if option in OUTPUT_OPTIONS and value != "-"]


def git_status():
    p = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=all"], capture_output=True,
                       text=True)
    return set(p.stdout.splitlines()) if p.returncode == 0 else None


class Examples(unittest.TestCase):
    def setUp(self):
        with open(os.path.join(REPO, "README.md")) as f:
            self.readme = f.read()
        self._bin = tempfile.TemporaryDirectory()
        self.bin = self._bin.name
        env = {k: v for k, v in os.environ.items() if k not in ("SC_COPYRIGHT_MESSAGE", "PYTHONPATH")}
        # As after the set-up: the folder that run-demo.sh links tpusim into comes first on the PATH.
        self.env = dict(env, PATH=self.bin + os.pathsep + env.get("PATH", "/usr/bin:/bin"), TPUSIM_BIN_DIR=self.bin)

    def tearDown(self):
        self._bin.cleanup()

    def run_command(self, command, **kwargs):
        start = time.monotonic()
        p = subprocess.run(["bash", "-o", "pipefail", "-c", command], cwd=REPO, env=self.env, capture_output=True,
                           text=True, timeout=600, **kwargs)
        print(f"[{time.monotonic() - start:5.1f} s, exit {p.returncode}] {without_comment(command)}", flush=True)
        self.assertEqual(p.returncode, 0, f"README command failed: {command}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
        for path in outputs_named(command):
            self.assertTrue(os.path.exists(os.path.join(REPO, path)), f"{command}: wrote no {path}")
        return p

    def test_every_command_runs_as_written(self):
        self.assertEqual(BUILD, os.path.join(REPO, "build"), "the README's commands name build/")
        # The first command rebuilds what is out of date; here nothing may be, or it would rebuild under the feet of
        # the tests running beside this one.
        p = subprocess.run(["ninja", "-C", BUILD, "-n", "tpusim"], capture_output=True, text=True)
        self.assertIn("no work to do", p.stdout, "build/ is not up to date: build it (cmake --build build) first")
        before = git_status()

        sh = [c for block in code_blocks(self.readme, "sh") for c in commands(block)]
        words = [without_comment(c) for c in sh]
        for skipped in NOT_RUN:
            self.assertIn(skipped, words, "NOT_RUN names a command the README no longer has")
        self.assertEqual(words[0], "bash scripts/run-demo.sh", "the README's first command")
        self.assertGreaterEqual(len(sh) - len(NOT_RUN), 20)  # the extraction found the commands
        for command, w in zip(sh, words):
            if w in NOT_RUN:
                print(f"[not run: {NOT_RUN[w]}] {w}")
                continue
            p = self.run_command(command)
            if w == "bash scripts/run-demo.sh":
                self.assertIn("link-tpusim.sh: tpusim is on the PATH: " + os.path.join(self.bin, "tpusim"), p.stdout)
                self.assertIn("demo passed", p.stdout)
                found = shutil.which("tpusim", path=self.env["PATH"])
                self.assertEqual(found, os.path.join(self.bin, "tpusim"))
                self.assertEqual(os.path.realpath(found), os.path.realpath(os.path.join(BUILD, "tools", "tpusim")))
            elif w == "tpusim demo":
                self.assertIn("demo passed", p.stdout)

        python = code_blocks(self.readme, "python")
        self.assertEqual(len(python), 1)
        self.assertIn("PYTHONPATH=build/runtime/python /usr/bin/python3", self.readme)
        start = time.monotonic()
        p = subprocess.run(["/usr/bin/python3", "-c", python[0]], cwd=REPO, capture_output=True, text=True,
                           env=dict(self.env, PYTHONPATH="build/runtime/python"), timeout=600)
        print(f"[{time.monotonic() - start:5.1f} s, exit {p.returncode}] the python block")
        self.assertEqual(p.returncode, 0, p.stderr)
        # Its last line prints c = a @ b for a, b of ones (64 x 96 @ 96 x 48): every element 96.
        self.assertRegex(p.stdout, r"\[\[96 96 96")

        after = git_status()
        if before is None or after is None:
            print("not a git checkout: whether the examples leave files in the repository is not checked")
            return
        self.assertEqual(sorted(after - before), [], "the README's commands left files in the repository")


if __name__ == "__main__":
    unittest.main()
