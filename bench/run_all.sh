#!/usr/bin/env bash
# Runs every benchmark of sdgp and records its output under docs/bench/hosts/<host-id>/run-all/ (--json
# .jsonl, the host id as bench/suite.sh derives it), together with the machine it ran on (machine.txt) and
# summary.md (bench/summarize.py). Each benchmark measures its own baseline in the same run (plain copy,
# oneDNN dense, PyTorch) and prints ratios.
# Usage: bench/run_all.sh [BUILD_DIR]    (run it on a quiet machine: the figures are wall-clock)
#   OUT=DIR   where to write instead;  HOST_ID=name   the host folder's name instead of the derived one
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
. bench/record.sh
OUT=${OUT:-docs/bench/hosts/$(bench_host_id)/run-all}
bench_machine "$OUT"
run() { bench_run "$OUT" "$@"; }
run prune  "$B/sdgp" bench prune
run conv   "$B/sdgp" bench conv --threads 2,1
run step   "$B/sdgp" bench step --prune magnitude,rescaled   # defaults: --conv-algo auto --conv-workspace 48
run step-direct "$B/sdgp" bench step --conv-algo direct --prune rescaled --nm 2:4,4:32
# the conv workspace limit's trade-off between time and memory at w=1 (PyTorch measured in each run)
echo "== step-workspace: $B/sdgp bench step --model w1 --conv-workspace 0|128|64|48|32"
for ws in 0 128 64 48 32; do "$B/sdgp" bench step --model w1 --conv-workspace "$ws" --json; done > "$OUT/step-workspace.jsonl"
run layers "$B/sdgp" bench layers --sparse-kernel on --nm 2:4,4:32
bench_done "$OUT"
python3 bench/summarize.py "$OUT" > "$OUT/summary.md"
