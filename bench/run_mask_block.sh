#!/usr/bin/env bash
# Shared N:M masks (--mask-block P): the sparse backward-data kernels with per-row masks (P = 1) and
# masks shared by P = 4 and 8 rows, in both domains, against the best dense kernel per layer
# (ResNet-9 w=1 and w=0.25), then whole steps with P = 1, 4, 8 measured in one run. Each benchmark
# measures its dense baseline in the same run and prints ratios.
# Records to docs/bench/hosts/<host-id>/mask-block/ (--json, one object per line; the host id as bench/suite.sh
# derives it; OUT=DIR or HOST_ID=name to change it) with the machine.
# Usage: bench/run_mask_block.sh [BUILD_DIR]    (on a quiet machine: the figures are wall-clock)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
. bench/record.sh
OUT=${OUT:-docs/bench/hosts/$(bench_host_id)/mask-block}
bench_machine "$OUT"
run() { bench_run "$OUT" "$@"; }
for P in 1 4 8; do
  run "conv-P$P" "$B/sdgp" bench conv --model all --threads 2 --nm 2:4,1:4,4:32 --sdgp-domain all --mask-block "$P"
done
run step "$B/sdgp" bench step --no-torch --prune magnitude --nm 2:4,1:4,4:32 --sdgp-domain pixel,winograd,auto --mask-block 1,4,8
bench_done "$OUT"
