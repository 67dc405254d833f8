#!/usr/bin/env bash
# Sets everything up, builds, and runs the main job: ResNet-9 (width 0.25) on Fashion-MNIST.
# Extra arguments go to `sdgp train` (see ./build/sdgp train --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
exec ./build/sdgp train "$@"
