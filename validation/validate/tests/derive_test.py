#!/usr/bin/env python3
"""derive.py's procedures against the numbers in use (ctest validate.Derive): the two it can run whole in
seconds, every case of them, must give back what the project uses to the digits it states:
  - tile (the goldens alone): kAttentionTileUs as validate.h holds it (two decimals);
  - attention (every one-token case of one wave, both modules, simulated, with that tile): kCausalModuleUs and
    kEncoderModuleUs as validate.h holds them (two decimals);
  - write (the goldens alone, no simulation): hbm.write_efficiency as configs/h200-like.ini holds it (two decimals).
The others (hbm.efficiency, the fp8 module) simulate thousands of cases: run derive.py by hand (docs/validation.md).
usage: derive_test.py TPUSIM GOLDENS_DIR OUT_DIR
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


def main():
    tpusim, goldens, out = sys.argv[1:4]
    text = subprocess.run([sys.executable, os.path.join(HERE, "..", "derive.py"), tpusim, goldens, out, "--only",
                           "tile,attention,write"], check=True, capture_output=True, text=True).stdout
    derived = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 4 and cells[1] == "tune":
            derived[cells[0]] = float(cells[3])
    header = open(os.path.join(ROOT, "validation", "validate", "validate.h")).read()
    ini = open(os.path.join(ROOT, "configs", "h200-like.ini")).read()
    expected = {k: float(re.search(rf"inline constexpr double {k} = ([0-9.]+);", header).group(1))
                for k in ("kAttentionTileUs", "kCausalModuleUs", "kEncoderModuleUs")}
    expected["hbm.write_efficiency"] = float(re.search(r"^write_efficiency = ([0-9.]+)$", ini, re.M).group(1))
    for k, v in expected.items():
        assert k in derived, (k, text)
        assert round(derived[k], 2) == v, f"{k}: derive.py gives {derived[k]} from the tuning part, {v} is in use"
        print(f"{k}: derived {derived[k]}, in use {v}")


if __name__ == "__main__":
    main()
