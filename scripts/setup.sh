#!/usr/bin/env bash
# Installs the Debian packages sdgp needs to build, test and benchmark.
# Idempotent: installs only what is missing and prints nothing when all is there.
set -euo pipefail

PACKAGES=(
  build-essential cmake pkg-config   # toolchain
  libdnnl-dev                        # oneDNN: dense convolutions, the baseline to beat
  zlib1g-dev                         # .gz data files
  clang libclang-rt-14-dev libomp-dev  # fuzzing (libFuzzer with OpenMP) and sanitizers
  python3 python3-torch python3-numpy python3-torchvision  # test oracle, benchmark peer, Python package tests
  python3-pip python3-setuptools     # pip install --no-build-isolation . (pyproject.toml), offline
  python3-pytest                     # python3 -m pytest runs tests/test_python_*.py (ctest runs them too)
  libopenblas0-pthread               # PyTorch's GEMMs (nn.Linear, ...) on OpenBLAS, not the reference BLAS
  gnuplot-nox                        # figures
  dataset-fashion-mnist              # the default training data
  libopenmpi-dev openmpi-bin         # data-parallel training over more than one machine (optional at build time)
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "setup: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
