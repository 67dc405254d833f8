#!/bin/bash
# issue 16: step time of each combination against the dense step of the same invocation
# Run quietly (nothing else on the machine): bash bench/run_nm_combos.sh > docs/bench/hosts/<host-id>/nm-weights/step-combos.jsonl
# (<host-id>: `. bench/record.sh; bench_host_id`, as bench/suite.sh names the host)
# The weights' mask form: G=block32 (default), G=cout, G=tap, ... (--weight-groups). The models and batches:
# MODELS="w0.25 512;w1 64" (default), or registry models, e.g. MODELS="resnet18 32;regnetx400mf 32;resnet50 32".
# Each variant row alternates its steps with a dense partner's in one process (--interleave), so its ratio
# survives the host's drift (repeats agree within about 2 %; separate processes spread by about 15 %).
cd "$(dirname "$0")/.." && B=build/sdgp && G=${G:-block32}
IFS=';' read -ra MS <<< "${MODELS:-w0.25 512;w1 64}"
for m in "${MS[@]}"; do set -- $m
  $B bench step --model $1 --batch $2 --no-torch --interleave --prune rescaled --nm 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --interleave --sparse-weights sste --weight-groups $G --nm-weights 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --interleave --sparse-weights sste --weight-groups $G --nm-weights 2:4 --prune-wgrad mvue --nm-wgrad 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --interleave --prune rescaled --nm 2:4 --sparse-weights sste --weight-groups $G --nm-weights 2:4 --json | tail -1
  $B bench step --model $1 --batch $2 --no-torch --interleave --prune rescaled --nm 2:4 --sparse-weights sste --weight-groups $G --nm-weights 2:4 --prune-wgrad mvue --nm-wgrad 2:4 --json | tail -1
done
