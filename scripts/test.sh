#!/usr/bin/env bash
# Sets everything up, builds, and runs the whole test suite (C tests, PyTorch golden tests, CLI tests).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
ctest --test-dir "${BUILD_DIR:-build}" --output-on-failure -j2
