#!/usr/bin/env bash
# Data parallel over MPI on this machine: 2 ranks x 1 thread against 1 process x 2 threads at the
# same global batch, in one run, alternating (ROUNDS times each) so that a drift of the machine's
# speed hits both alike. Each is a short `sdgp train` (--max-steps STEPS, no TTA); its log's
# train_img_per_s leaves evaluation out. The K = 2 logs also give the gradient allreduce's figures:
# bytes per step, one blocking allreduce of all gradients (measured at start), the time the training
# thread spent in communication calls (comm_exposed_s: starts, tests between layers, the final waits)
# and overlap = 1 - exposed / (steps x blocking).
# Records to docs/bench/hosts/<host-id>/mpi/ (the logs, summary.jsonl, machine.txt; the host id as bench/suite.sh
# derives it; OUT=DIR or HOST_ID=name to change it).
# Usage: bench/run_mpi.sh [BUILD_DIR]    (CONFIGS, STEPS, ROUNDS from the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
STEPS=${STEPS:-20}
ROUNDS=${ROUNDS:-2}
# name:flags, the training recipe's batch for w=0.25 and a smaller one for w=1 (memory of 2 ranks)
CONFIGS=${CONFIGS:-"w0.25-b512:--width 0.25 --batch-size 512;w1-b128:--width 1 --batch-size 128"}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
. bench/record.sh
OUT=${OUT:-docs/bench/hosts/$(bench_host_id)/mpi}
bench_machine "$OUT"
: > "$OUT/summary.jsonl"
field() { grep -o "\"$2\":[0-9.e+-]*" "$1" | tail -1 | cut -d: -f2; }
IFS=';' read -ra cfgs <<< "$CONFIGS"
for c in "${cfgs[@]}"; do
  name=${c%%:*} flags=${c#*:}
  common="train $flags --max-steps $STEPS --no-tta --quiet"
  for r in $(seq "$ROUNDS"); do
    echo "== $name round $r: 1 process x 2 threads"
    OMP_NUM_THREADS=2 "$B/sdgp" $common --threads 2 --log "$OUT/$name-1x2-r$r.jsonl" > /dev/null
    echo "== $name round $r: 2 ranks x 1 thread"
    OMP_NUM_THREADS=1 mpirun --oversubscribe --bind-to none -np 2 "$B/sdgp" $common --threads 1 \
      --log "$OUT/$name-2x1-r$r.jsonl" > /dev/null
    one=$(field "$OUT/$name-1x2-r$r.jsonl" train_img_per_s)
    two=$(field "$OUT/$name-2x1-r$r.jsonl" train_img_per_s)
    L="$OUT/$name-2x1-r$r.jsonl"
    printf '{"config":"%s","round":%d,"steps":%d,"img_per_s_1x2":%s,"img_per_s_2x1":%s,"ratio":%.3f,"allreduce_bytes_per_step":%s,"buckets":%s,"allreduce_blocking_ms":%s,"comm_exposed_s":%s,"comm_wait_s":%s,"comm_inflight_s":%s,"overlap":%s}\n' \
      "$name" "$r" "$STEPS" "$one" "$two" "$(echo "$two / $one" | bc -l)" "$(field "$L" allreduce_bytes_per_step)" \
      "$(field "$L" buckets)" "$(field "$L" allreduce_blocking_ms)" "$(field "$L" comm_exposed_s)" \
      "$(field "$L" comm_wait_s)" "$(field "$L" comm_inflight_s)" "$(field "$L" overlap)" | tee -a "$OUT/summary.jsonl"
  done
done
bench_done "$OUT"
