#!/bin/bash
# issue 16: step time of each combination against the dense step of the same invocation
# Run quietly (nothing else on the machine): bash bench/run_nm_combos.sh > docs/bench/nm-weights/step-combos.jsonl
cd "$(dirname "$0")/.." && B=build/sdgp
for m in "w0.25 512" "w1 64"; do set -- $m
  $B bench step --model $1 --batch $2 --no-torch --prune rescaled --nm 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --sparse-weights sste --weight-groups block32 --nm-weights 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --sparse-weights sste --weight-groups block32 --nm-weights 2:4 --prune-wgrad mvue --nm-wgrad 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --prune rescaled --nm 2:4 --sparse-weights sste --weight-groups block32 --nm-weights 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --prune rescaled --nm 2:4 --sparse-weights sste --weight-groups block32 --nm-weights 2:4 --prune-wgrad mvue --nm-wgrad 2:4 --json | tail -1
done
