#!/usr/bin/env bash
# SDGP against the best dense backward-data and step (issue "SDGP against the best dense step"):
# the pixel- and Winograd-domain sparse kernels against oneDNN's direct and Winograd kernels per
# layer (ResNet-9 w=1 and w=0.25, ResNet-18 shapes), and whole steps with --sdgp-domain pixel /
# winograd / auto. Each benchmark measures its dense baseline in the same run and prints ratios.
# Records to docs/bench/hosts/<host-id>/sdgp-domain/ (--json, one object per line; the host id as bench/suite.sh
# derives it; OUT=DIR or HOST_ID=name to change it) with the machine.
# Usage: bench/run_sdgp_domain.sh [BUILD_DIR]    (on a quiet machine: the figures are wall-clock)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
. bench/record.sh
OUT=${OUT:-docs/bench/hosts/$(bench_host_id)/sdgp-domain}
bench_machine "$OUT"
run() { bench_run "$OUT" "$@"; }
run conv-resnet9 "$B/sdgp" bench conv --model all --threads 2 --nm 2:4,1:4,2:8,4:32
run conv-resnet18 "$B/sdgp" bench conv --model r18 --threads 2 --nm 2:4,1:4,2:8,4:32
# the three domains in one run, three runs (the machine's speed drifts by 5-15 % within a run too:
# read the median ratio of the three)
for i in 1 2 3; do
  run "step-run$i" "$B/sdgp" bench step --no-torch --prune magnitude --nm 2:4,1:4,4:32 --sdgp-domain pixel,winograd,auto
done
run layers "$B/sdgp" bench layers --sparse-kernel on --nm 2:4,4:32 --sdgp-domain pixel,winograd
bench_done "$OUT"
