#!/usr/bin/env bash
# Installs everything tpusim needs from Debian 12 (bookworm) packages (docs/architecture.md, decision 8).
# Idempotent: when every package is already installed it does nothing and returns in about a second.
# Run as root on a fresh minimal Debian 12; the README's commands call it first.
# `setup.sh fuzz` also installs clang with its libFuzzer and sanitizer runtimes (about 200 MB), which only
# scripts/run-fuzz.sh needs.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

PACKAGES=(
  # toolchain
  g++ cmake ninja-build pkg-config make
  # C++ libraries
  libsystemc-dev libeigen3-dev libboost-program-options-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libonnx-dev libprotobuf-dev protobuf-compiler nlohmann-json3-dev
  # Python (Debian's interpreter, /usr/bin/python3): model export and numeric references
  python3 python3-numpy python3-torch python3-torchvision python3-onnx python3-venv
  # OpenBLAS (single-threaded) as the system's BLAS (libblas.so.3, by Debian's alternatives), which Debian's torch
  # and numpy call: their matrix products about 28 times faster than the reference BLAS that libblas3 is
  # (torch's 128 x 768 x 3072 Linear: 276 ms -> 9.8 ms here), so that exporting the full-size models takes seconds
  libopenblas0-serial
  # the Python module `tpusim` (runtime/python): headers and Debian's pybind11; pip installs it from the source
  # tree with Debian's setuptools and wheel (pyproject.toml, setup.py)
  python3-dev pybind11-dev python3-setuptools python3-wheel python3-pip
  # tpusim explore: sweeps over MPI ranks (mpirun), and the test that renders its HTML report in headless Chromium
  openmpi-bin libopenmpi-dev chromium
  ca-certificates
)
if [[ " $* " == *" fuzz "* ]]; then
  PACKAGES+=(clang libclang-rt-dev)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)
  if [[ "$status" != ii* ]]; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "setup.sh: all ${#PACKAGES[@]} packages already installed; nothing to do."
  exit 0
fi

echo "setup.sh: missing packages: ${missing[*]}"
if [[ $(id -u) -ne 0 ]]; then
  echo "setup.sh: installing packages needs root; run it as root (for example: sudo bash scripts/setup.sh)" >&2
  exit 1
fi

echo "setup.sh: apt-get update"
apt-get update
echo "setup.sh: apt-get install -y --no-install-recommends ${PACKAGES[*]}"
apt-get install -y --no-install-recommends "${PACKAGES[@]}"
echo "setup.sh: done."
