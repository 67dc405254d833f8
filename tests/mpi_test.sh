#!/usr/bin/env bash
# Data-parallel training over MPI (2 ranks x 1 thread, oversubscribed on this machine): K = 2 against
# one process at the same global batch, bitwise reproducibility, resume under another K, a
# mismatched configuration, sdgp eval split over ranks, a killed rank. Registered only in builds
# with MPI (SDGP_MPI).
# Usage: mpi_test.sh PATH_TO_SDGP PATH_TO_SDGP_CKPT_DIFF
set -u
SDGP=$1
DIFF=$2
. "$(dirname "$0")/harness.sh"
[ -d /usr/share/datasets/fashion-mnist ] || { echo "no Fashion-MNIST: skipped"; exit 77; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
MPI="mpirun --oversubscribe -np 2"
# smallcnn: a smooth model, so that fp32 rounding differences stay at rounding size over steps
SMALL="train --model smallcnn --batch-size 64 --no-tta --threads 1 --quiet --lr 0.05"

# Tolerances, as max |a - b| / max |b| per tensor (weights, BatchNorm statistics and momentum
# buffers, which hold the summed gradients). K = 2 adds each weight gradient as two half-batch
# sums, and synced BatchNorm takes its variance as E[x^2] - E[x]^2 of the added sums, where one
# process sums blocks of rows; in fp32 that moves results by rounding only: measured 3e-5 for
# smallcnn (no max pools) after 8 steps, so TOL = 2e-4 there, and a wrong scale (a gradient counted
# twice, a mean over half the batch) is off by 0.5 or more.
TOL=2e-4
# ResNet-9's max pools route gradients by argmax, so rounding of either kind can flip a pooling
# decision and move the gradients upstream of it: one step at seed 0 with direct convs gave 6-8e-5 on
# the AVX2 path and 1.85e-3 on AVX-512 (a flip, conv4's gradient; 2026-12-02, Zen 4); Winograd
# convs 1.7-6 % (seeds 0-3). So the ResNet-9 comparison only rules out a wrong scale (>= 0.5);
# rounding-size agreement of the data-parallel sums is smallcnn's test below.
TOL_R9=0.1

# 1. one step of ResNet-9 w=0.25 (the default model): K = 2 with --sync-bn against one process, on
# direct convs (Winograd's transforms round 10-90x coarser than a direct product: more flips).
R9="train --batch-size 64 --max-steps 1 --no-tta --threads 1 --quiet --conv-algo direct"
expect 0 "test accuracy" -- "$SDGP" $R9 --checkpoint "$T/r9_k1.st"
expect 0 "test accuracy" -- $MPI "$SDGP" $R9 --sync-bn --checkpoint "$T/r9_k2.st"
expect 0 "max_rel_err" -- "$DIFF" "$T/r9_k1.st" "$T/r9_k2.st" $TOL_R9
# the same with --recompute blocks (its BatchNorm outputs recomputed from the synced statistics), a rank
# apart from the other: bitwise the step of ranks that keep z
expect 0 "test accuracy" -- mpirun --oversubscribe -np 1 "$SDGP" $R9 --sync-bn --recompute blocks --checkpoint \
  "$T/r9_k2_rb.st" : -np 1 "$SDGP" $R9 --sync-bn --checkpoint "$T/r9_k2_rb.st"
expect 0 "0 differ" -- "$DIFF" "$T/r9_k2.st" "$T/r9_k2_rb.st"

# 2. smallcnn, 8 steps: K = 2 --sync-bn against one process; the loss logged alike
expect 0 "test accuracy" -- "$SDGP" $SMALL --max-steps 8 --checkpoint "$T/k1_8.st" --log "$T/k1.jsonl"
expect 0 "data parallel: 2 ranks x 1 threads, global batch 64 \(32 per rank\), BN synced" -- \
  $MPI "$SDGP" ${SMALL/--quiet/} --max-steps 8 --sync-bn --checkpoint "$T/k2_8.st" --log "$T/k2.jsonl"
expect 0 "max_rel_err" -- "$DIFF" "$T/k1_8.st" "$T/k2_8.st" $TOL
l1=$(grep -o '"train_loss":[0-9.]*' "$T/k1.jsonl" | cut -d: -f2)
l2=$(grep -o '"train_loss":[0-9.]*' "$T/k2.jsonl" | cut -d: -f2)
if awk -v a="$l1" -v b="$l2" 'BEGIN { d = a - b; exit !(a > 0 && (d < 0 ? -d : d) <= 1e-5 * a) }'; then ok; else
  bad "train loss of K=2 ($l2) is not that of one process ($l1)"; fi
expect 0 '"ranks":2,"allreduce_bytes_per_step":[0-9]+,"buckets":[0-9]+' -- cat "$T/k2.jsonl"

# 3. bitwise reproducible run to run (SDGP on, the sparse kernel forced: no timing-based choice);
#    per-rank BatchNorm (the default)
SP="--prune magnitude --nm 2:4 --sparse-kernel on --max-steps 6"
expect 0 "test accuracy" -- $MPI "$SDGP" $SMALL $SP --checkpoint "$T/rep_a.st"
expect 0 "test accuracy" -- $MPI "$SDGP" $SMALL $SP --checkpoint "$T/rep_b.st"
expect 0 "0 differ" -- "$DIFF" "$T/rep_a.st" "$T/rep_b.st"
#    --allreduce end (blocking sums after backward) sums the same buckets: bitwise the same for 2 ranks
expect 0 "test accuracy" -- $MPI "$SDGP" $SMALL $SP --allreduce end --checkpoint "$T/rep_end.st"
expect 0 "0 differ" -- "$DIFF" "$T/rep_a.st" "$T/rep_end.st"

# 4. resume: K = 2 from its own step-4 checkpoint is bitwise the uninterrupted run; under K = 1 it
#    continues within rounding; a K = 1 checkpoint continues under K = 2 likewise
expect 0 "test accuracy" -- $MPI "$SDGP" $SMALL --max-steps 4 --sync-bn --checkpoint "$T/k2_4.st"
expect 0 "test accuracy" -- $MPI "$SDGP" train --resume "$T/k2_4.st" --max-steps 8 --quiet --checkpoint "$T/k2_r2.st"
expect 0 "0 differ" -- "$DIFF" "$T/k2_8.st" "$T/k2_r2.st"
expect 0 "test accuracy" -- "$SDGP" train --resume "$T/k2_4.st" --max-steps 8 --quiet --checkpoint "$T/k2_r1.st"
expect 0 "max_rel_err" -- "$DIFF" "$T/k2_8.st" "$T/k2_r1.st" $TOL
expect 0 "test accuracy" -- "$SDGP" $SMALL --max-steps 4 --sync-bn --checkpoint "$T/k1_4.st"
expect 0 "test accuracy" -- $MPI "$SDGP" train --resume "$T/k1_4.st" --max-steps 8 --quiet --checkpoint "$T/k1_r2.st"
expect 0 "max_rel_err" -- "$DIFF" "$T/k1_8.st" "$T/k1_r2.st" $TOL

# 5. bad input: a mismatched configuration, a batch that does not split (every rank fails, and the first
#    MPI_Abort may end the others before they print: either rank's message counts)
expect 2 "different configurations.*(rank 1 has 'lr=0.4|1 of 2 ranks differ)" -- \
  mpirun --oversubscribe -np 1 "$SDGP" $SMALL --max-steps 2 : -np 1 "$SDGP" $SMALL --max-steps 2 --lr 0.4
expect 2 "rank [01]: --batch-size 63 is not divisible by the 2 MPI ranks" -- $MPI "$SDGP" ${SMALL/64/63} --max-steps 2

# 6. a sweep passes its runs through the launcher
printf 'defaults --model smallcnn --batch-size 64 --no-tta --threads 1 --max-steps 3\nrunA --lr 0.05\n' > "$T/sw.sweep"
expect 0 "1 done" -- "$SDGP" sweep "$T/sw.sweep" --results "$T/sw" --mpi 2 --mpirun "mpirun --oversubscribe"
expect 0 "^mpirun --oversubscribe -np 2 /.* train " -- cat "$T/sw/runA/command.txt"
expect 0 "data parallel: 2 ranks" -- cat "$T/sw/runA/train.out"

# 7. sdgp eval under mpirun: each rank evaluates a contiguous run of whole batches (157 of 64 images
#    here, the last one short) and rank 0 alone prints. Tolerance 0: every batch's loss sum reaches
#    the sum in a slot of its own (plus zeros from the other ranks, exact) and is added in batch
#    order as one process adds it, so K ranks give bitwise one process's result (every digit of
#    --json; K = 3 too), with and without TTA
for tta in --no-tta --tta; do
  EV="eval --checkpoint $T/k1_8.st --threads 1 $tta"
  line1=$("$SDGP" $EV --json "$T/ev1.json" 2>&1 | head -1) # the result (the second line: its time)
  line2=$(timeout 120 $MPI "$SDGP" $EV --json "$T/ev2.json" 2>&1 | head -1)
  timeout 120 mpirun --oversubscribe -np 3 "$SDGP" $EV --json "$T/ev3.json" > /dev/null 2>&1
  one=$(sed 's/,"ranks":1}/}/' "$T/ev1.json")
  if [[ "$line1" == "test accuracy "* ]] && [ "$line2" = "$line1" ] && [ -n "$one" ] &&
     [ "$(sed 's/,"ranks":2}/}/' "$T/ev2.json")" = "$one" ] && [ "$(sed 's/,"ranks":3}/}/' "$T/ev3.json")" = "$one" ]; then
    ok; else bad "eval $tta under mpirun is not one process's: '$line2' against '$line1'"
    cat "$T/ev1.json" "$T/ev2.json" "$T/ev3.json"; fi
  rm -f "$T"/ev[123].json
done
#    failures end the job with the message, never a hang: a checkpoint that does not open on every rank or
#    on one only (rank 0 then waits in the weights check until rank 1's MPI_Abort), different checkpoints
expect 2 "rank [01]: cannot open $T/none.st" -- timeout 60 $MPI "$SDGP" eval --checkpoint "$T/none.st" --threads 1
expect 2 "rank 1: cannot open $T/none.st" -- timeout 60 mpirun --oversubscribe -np 1 "$SDGP" eval \
  --checkpoint "$T/k1_8.st" --threads 1 : -np 1 "$SDGP" eval --checkpoint "$T/none.st" --threads 1
expect 2 "different evaluation inputs.*(rank 1 has 'weights=fingerprint|1 of 2 ranks differ)" -- timeout 60 \
  mpirun --oversubscribe -np 1 "$SDGP" eval --checkpoint "$T/k1_8.st" --threads 1 : -np 1 "$SDGP" eval \
  --checkpoint "$T/k1_4.st" --threads 1

# 8. a rank killed mid-run ends the job with an error within the timeout; the last checkpoint loads
timeout 120 $MPI "$SDGP" $SMALL --max-steps 100000 --epochs 100 --checkpoint "$T/kill.st" --checkpoint-every 5 \
  > "$T/kill.out" 2>&1 &
tpid=$!
for _ in $(seq 100); do [ -f "$T/kill.st" ] && break; sleep 0.2; done
mpid=$(pgrep -P "$tpid" | head -1)
victim=$(pgrep -P "${mpid:-0}" | tail -1)
if [ -n "$victim" ]; then kill -9 "$victim"; else bad "no rank process found under mpirun"; fi
wait "$tpid"
rc=$?
if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q "exited on signal 9" "$T/kill.out"; then ok; else
  bad "a killed rank: mpirun exit $rc (want non-zero, not the timeout's 124)"; tail -5 "$T/kill.out"; fi
expect 0 "test accuracy" -- "$SDGP" eval --checkpoint "$T/kill.st" --threads 1

finish
