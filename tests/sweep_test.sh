#!/usr/bin/env bash
# `sdgp sweep` and `sdgp report` end to end: a tiny sweep (runs, skip when done, resume after a
# kill -9 in the middle of a run, equal to an uninterrupted run), reports on it and on hand-made
# logs whose numbers are worked out here, and bad input (exit 2 with file:line messages).
# Usage: sweep_test.sh PATH_TO_SDGP
set -u
SDGP=$1
. "$(dirname "$0")/harness.sh"
field() { grep -o "\"$2\":[^,}]*" "$1" | tail -1 | cut -d: -f2 | tr -d '"'; } # last value of a key in a file

# ---- sweep: bad input is refused before anything runs ---------------------------------------
cat > "$T/bad.sweep" <<'EOF'
# comment line
defaults --model smallcnn --max-steps 5
good  --seed 1
worse --speed 3
EOF
expect 2 "bad.sweep:4: run 'worse': unknown option '--speed'" -- "$SDGP" sweep "$T/bad.sweep" --results "$T/never"
printf 'a --lr abc\n' > "$T/bad2.sweep"
expect 2 "bad2.sweep:1: .*lr: 'abc' is not a number" -- "$SDGP" sweep "$T/bad2.sweep" --results "$T/never"
printf 'a --seed 1\nb --log x.jsonl\n' > "$T/bad3.sweep"
expect 2 "bad3.sweep:2: .*--log is set by the sweep" -- "$SDGP" sweep "$T/bad3.sweep" --results "$T/never"
printf 'a --seed 1\n\na --seed 2\n' > "$T/bad4.sweep"
expect 2 "bad4.sweep:3: run name 'a' already used on line 1" -- "$SDGP" sweep "$T/bad4.sweep" --results "$T/never"
printf 'defaults --epochs 0\na --seed 1\n' > "$T/bad5.sweep"
expect 2 "bad5.sweep: defaults .*epochs: 0 is out of range" -- "$SDGP" sweep "$T/bad5.sweep" --results "$T/never"
printf 'a --data-dir "unterminated\n' > "$T/bad6.sweep"
expect 2 "bad6.sweep:1: unterminated quote" -- "$SDGP" sweep "$T/bad6.sweep" --results "$T/never"
printf '# nothing\n' > "$T/empty.sweep"
expect 2 "no runs" -- "$SDGP" sweep "$T/empty.sweep" --results "$T/never"
expect 2 "missing.sweep" -- "$SDGP" sweep "$T/missing.sweep" --results "$T/never"
printf 'a --seed 1\n' > "$T/good.sweep"
expect 2 "flags after --: unknown option '--speed'" -- "$SDGP" sweep "$T/good.sweep" --results "$T/never" -- --speed 1
expect 2 "needs a sweep file" -- "$SDGP" sweep
expect 2 "unknown option '--fast'" -- "$SDGP" sweep "$T/bad.sweep" --fast
if [ ! -e "$T/never" ]; then ok; else bad "a refused sweep created its results folder"; fi

# ---- report: hand-made logs, numbers worked out here -----------------------------------------
# Group "dense" (2 seeds), "2:4" (2 seeds), "1:4", "2:8", "4:8" (1 seed): 3 epochs each;
# final accuracies chosen so that means are exact.
S="$T/syn"
mkrun() { # name seconds acc1 acc2 acc3 [t1 t2 t3]
  mkdir -p "$S/$1"
  local t1=${6:-10} t2=${7:-20} t3=${8:-30}
  {
    echo "{\"event\":\"epoch\",\"epoch\":1,\"step\":10,\"lr\":0.1,\"train_loss\":2.0,\"test_loss\":1.5,\"test_acc\":$3,\"elapsed_s\":$t1,\"img_per_s\":100}"
    echo "{\"event\":\"grad_stats\",\"step\":12,\"layers\":[{\"layer\":\"conv1\",\"rel_l2\":0.25,\"cosine\":0.5}]}"
    echo "{\"event\":\"epoch\",\"epoch\":2,\"step\":20,\"lr\":0.1,\"train_loss\":1.0,\"test_loss\":1.0,\"test_acc\":$4,\"elapsed_s\":$t2,\"img_per_s\":100}"
    echo "{\"event\":\"epoch\",\"epoch\":3,\"step\":30,\"lr\":0.1,\"train_loss\":0.5,\"test_loss\":0.5,\"test_acc\":$5,\"elapsed_s\":$t3,\"img_per_s\":100}"
  } > "$S/$1/log.jsonl"
  echo "{\"name\":\"$1\",\"state\":\"done\",\"seconds\":$2,\"spent_s\":$2,\"attempts\":1,\"exit\":0}" > "$S/$1/status.json"
}
mkrun dense-s1 40 0.5 0.8 0.903
mkrun dense-s2 40 0.5 0.8 0.907      # dense final mean 90.50%, target (default) 90.20%, reached at t=30
mkrun 2:4-s1   30 0.5 0.7 0.880
mkrun 2:4-s2   50 0.5 0.7 0.860      # final mean 87.00%, range 86.00-88.00, std 1.41; wall 40 -> 1.000x
mkrun 1:4      20 0.5 0.6 0.800      # wall 20 -> speedup 2.000x
mkrun 2:8      25 0.5 0.6 0.850
mkrun 4:8      16 0.5 0.95 0.950 5 8 16  # reaches 90.20% at epoch 2, t=8 -> 30/8 = 3.750x against dense
# an interrupted and resumed run: epoch 2 logged, killed before its checkpoint, resumed at
# offset 15 s: the rewritten epoch 2 (t = 15 + 6) and epoch 3 (t = 15 + 12 = 27) count
mkdir -p "$S/resumed"
cat > "$S/resumed/log.jsonl" <<'EOF'
{"event":"epoch","epoch":1,"step":10,"lr":0.1,"train_loss":2.0,"test_loss":1.5,"test_acc":0.5,"elapsed_s":10,"img_per_s":100}
{"event":"epoch","epoch":2,"step":20,"lr":0.1,"train_loss":1.0,"test_loss":1.0,"test_acc":0.1,"elapsed_s":20,"img_per_s":100}
{"event":"resume","attempt":2,"offset_s":15}
{"event":"epoch","epoch":2,"step":20,"lr":0.1,"train_loss":1.0,"test_loss":1.0,"test_acc":0.6,"elapsed_s":6,"img_per_s":100}
{"event":"epoch","epoch":3,"step":30,"lr":0.1,"train_loss":0.5,"test_loss":0.5,"test_acc":0.95,"elapsed_s":12,"img_per_s":100}
EOF
echo '{"name":"resumed","state":"done","seconds":29,"spent_s":35,"attempts":2,"exit":0}' > "$S/resumed/status.json"
cat > "$T/layers.jsonl" <<'EOF'
{"model":"resnet9-w0.25","layer":"conv0","threads":2,"prune":"magnitude","nm":"2:4","fwd_ms":2.0,"bwd_data_dense_ms":1.0,"bwd_data_sparse_ms":0.0,"prune_ms":0.0,"bwd_weights_ms":1.0}
{"model":"resnet9-w0.25","layer":"conv1","threads":2,"prune":"magnitude","nm":"2:4","fwd_ms":1.0,"bwd_data_dense_ms":2.0,"bwd_data_sparse_ms":0.8,"prune_ms":0.2,"bwd_weights_ms":1.0}
EOF
expect 0 "report: 6 groups from 8 runs" -- "$SDGP" report "$S" --layers "$T/layers.jsonl"
R="$S/report.md"
if grep -qE '^\| dense \| 2 \| 3 \| 90\.50 \| 90\.30–90\.70 \| 0\.28 \| — \| — \| 90\.50 \| 40\.0 \| 1\.000x' "$R"; then ok; else bad "dense row: $(grep '^| dense ' "$R")"; fi
# diff -3.50 points; Welch: t = -3.432, df = 1.080, two-sided p = 0.1657 (tests/report_test.sh checks p in depth)
if grep -qE '^\| 2:4 \| 2 \| 3 \| 87\.00 \| 86\.00–88\.00 \| 1\.41 \| -3\.50 \| 0\.166 \| 87\.00 \| 40\.0 \| 1\.000x' "$R"; then ok; else bad "2:4 row: $(grep '^| 2:4 ' "$R")"; fi
if grep -qE '^\| 1:4 \| 1 \| 3 \| 80\.00 .* 20\.0 \| 2\.000x' "$R"; then ok; else bad "1:4 row: $(grep '^| 1:4 ' "$R")"; fi
if grep -q 'Target: 90.20% ' "$R"; then ok; else bad "default target is not dense - 0.3: $(grep Target "$R")"; fi
if grep -qE '^\| dense \| 2/2 \| 30\.0 \| 1\.000x' "$R" && grep -qE '^\| 4:8 \| 1/1 \| 8\.0 \| 3\.750x' "$R"; then ok; else bad "time to target of 4:8: $(grep '^| 4:8 |' "$R")"; fi
if grep -qE '^\| resumed \| 1/1 \| 27\.0 \|' "$R"; then ok; else bad "resumed run's time axis: $(grep '^| resumed |' "$R")"; fi
if grep -qE '^\| 2:4 \| 0/2 \| not reached' "$R"; then ok; else bad "2:4 must not reach the target"; fi
if grep -qE '^\| dense \| conv1 \| 0\.2500 \| 0\.50000 \| 2 \|' "$R"; then ok; else bad "grad_stats table: $(grep '| conv1 |' "$R" | head -1)"; fi
if grep -qE '\| 3\.00 \| 3\.00 \| 2\.00 \| 2\.00 \| 37\.5% \| 12\.5% \|' "$R"; then ok; else bad "layers table: $(grep resnet9 "$R")"; fi
for f in fig6_train_loss fig7_test_acc fig8_nm_heatmap fig9_layers fig10_time_to_acc; do
  if is_png "$S/$f.png" && [ -s "$S/$f.gp" ] && [ -s "$S/$f.dat" ]; then ok; else bad "$f: no valid PNG with its script and data"; fi
done
# the heatmap holds one cell per n:m group: m/n = 2 for 2:4 and 4:8, 4 for 1:4 and 2:8
if [ "$(grep -cE '^[0-9]+ [0-9]+ [0-9.]+ [0-9]+:[0-9]+ ' "$S/fig8_nm_heatmap.dat")" = 4 ]; then ok; else bad "heatmap cells"; fi
if grep -q '^27.000 95' "$S/fig10_time_to_acc.dat"; then ok; else bad "fig10 data lacks the resumed run's (27 s, 95%)"; fi
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/out2" --target 85
if grep -q 'Target: 85.00% test accuracy (--target)' "$T/out2/report.md" && is_png "$T/out2/fig7_test_acc.png"; then ok; else bad "--out/--target"; fi
# no gnuplot: the markdown still, figures skipped, exit 0
expect 0 "gnuplot not found" -- env PATH=/nonexistent "$SDGP" report "$S" --out "$T/nogp"
if grep -q "Figures skipped" "$T/nogp/report.md" && [ -s "$T/nogp/fig6_train_loss.gp" ] && [ ! -e "$T/nogp/fig6_train_loss.png" ]; then ok; else bad "report without gnuplot"; fi

# ---- report: bad input -----------------------------------------------------------------------
expect 2 "nowhere" -- "$SDGP" report "$T/nowhere"
mkdir -p "$T/emptydir"
expect 2 "no runs in" -- "$SDGP" report "$T/emptydir"
mkdir -p "$T/mal/x"
printf '{"event":"epoch","epoch":1,"step":1,"train_loss":1,"test_acc":0.5,"elapsed_s":1}\n{"event":"epoch",\n' > "$T/mal/x/log.jsonl"
expect 2 "mal/x/log.jsonl:2: malformed" -- "$SDGP" report "$T/mal"
printf '{"event":"epoch","epoch":1,"step":1,"train_loss":1,"elapsed_s":1}\n' > "$T/mal/x/log.jsonl"
expect 2 "log.jsonl:1: .*test_acc" -- "$SDGP" report "$T/mal"
printf '{"event":"epoch","epoch":1,"step":1,"train_loss":1,"test_acc":0.5,"elapsed_s":1}\n' > "$T/mal/x/log.jsonl"
printf '{"state":"done"}\n' > "$T/mal/x/status.json"
expect 2 "status.json:1: malformed" -- "$SDGP" report "$T/mal"
rm "$T/mal/x/status.json" "$T/mal/x/log.jsonl"; mkdir "$T/mal/x/log.jsonl"
expect 2 "log.jsonl" -- "$SDGP" report "$T/mal"
expect 2 "missing-layers" -- "$SDGP" report "$S" --layers "$T/missing-layers.jsonl"
expect 2 "target: 101 is out of range" -- "$SDGP" report "$S" --target 101

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  echo "note: Fashion-MNIST not installed; the sweep runs are skipped"
  finish; exit
fi

# ---- a tiny real sweep ----------------------------------------------------------------------
cat > "$T/tiny.sweep" <<'EOF'
# tiny: SmallCNN, 30 steps
defaults --model smallcnn --batch-size 64 --max-steps 30 --no-tta
dense    --prune none --seed 1
mag-s1   --prune magnitude --nm 2:4 --seed 1 --grad-stats 10
mag-s2   --prune magnitude --nm 2:4 --seed 2
EOF
expect 0 "\[3/3\] mag-s2: new" -- "$SDGP" sweep "$T/tiny.sweep" --results "$T/res" --threads 1 --dry-run
if [ ! -e "$T/res" ]; then ok; else bad "--dry-run created the results folder"; fi
expect 2 "no run named 'nope'" -- "$SDGP" sweep "$T/tiny.sweep" --results "$T/res" --only nope
expect 0 "3 runs: 3 done \(3 now, 0 before\)" -- "$SDGP" sweep "$T/tiny.sweep" --results "$T/res" --threads 1
for r in dense mag-s1 mag-s2; do
  d="$T/res/$r"
  if grep -q '"event":"epoch"' "$d/log.jsonl" 2>/dev/null && grep -q '"state":"done"' "$d/status.json" 2>/dev/null &&
     [ -s "$d/checkpoint.safetensors" ] && grep -q -- "--log $d/log.jsonl" "$d/command.txt"; then ok; else bad "run $r: folder incomplete"; fi
done
before=$(cat "$T"/res/*/log.jsonl "$T"/res/*/status.json | md5sum)
expect 0 "3 runs: 3 done \(0 now, 3 before\)" -- "$SDGP" sweep "$T/tiny.sweep" --results "$T/res" --threads 1
if [ "$(cat "$T"/res/*/log.jsonl "$T"/res/*/status.json | md5sum)" = "$before" ]; then ok; else bad "a finished run was run again"; fi
expect 2 "made by another command" -- "$SDGP" sweep "$T/tiny.sweep" --results "$T/res" --threads 1 -- --lr 0.1
expect 0 "report: 2 groups from 3 runs" -- "$SDGP" report "$T/res"
a1=$(field "$T/res/mag-s1/log.jsonl" test_acc) a2=$(field "$T/res/mag-s2/log.jsonl" test_acc)
want=$(awk -v a="$a1" -v b="$a2" 'BEGIN { printf "%.2f", 50 * (a + b) }')
if grep -qE "^\| mag \| 2 \| 1 \| $want \|" "$T/res/report.md"; then ok; else bad "group mag: want mean $want: $(grep '^| mag ' "$T/res/report.md")"; fi
for f in fig6_train_loss fig7_test_acc fig10_time_to_acc; do
  if is_png "$T/res/$f.png"; then ok; else bad "$f.png from the tiny sweep"; fi
done

# ---- kill -9 the sweep in the middle of a run; the rerun resumes and ends as an uninterrupted run
# (--sparse-kernel on: `auto` picks the kernel by timing at start, and the two kernels round differently)
RUN="--model smallcnn --batch-size 64 --max-steps 160 --no-tta --prune magnitude --nm 2:4 --seed 7 --sparse-kernel on"
echo "long $RUN" > "$T/kill.sweep"
"$SDGP" sweep "$T/kill.sweep" --results "$T/kill" --threads 1 --checkpoint-every 10 > "$T/kill.out" 2>&1 &
sp=$!
for _ in $(seq 1 300); do [ -f "$T/kill/long/checkpoint.safetensors" ] && break; sleep 0.1; done
sleep 0.5
kill -9 "$sp"; wait "$sp" 2>/dev/null
sleep 0.5
if pgrep -f "$T/kill/long/log.jsonl" > /dev/null; then bad "the killed sweep left its trainer running"; else ok; fi
if [ -f "$T/kill/long/checkpoint.safetensors" ] && ! grep -q '"state":"done"' "$T/kill/long/status.json"; then ok; else
  bad "kill did not interrupt a run (status: $(cat "$T/kill/long/status.json" 2>/dev/null))"; fi
expect 0 "resuming from its checkpoint \(attempt 2" -- "$SDGP" sweep "$T/kill.sweep" --results "$T/kill" --threads 1 --checkpoint-every 10
if grep -q '"state":"done","seconds":[0-9.]*,"spent_s":[0-9.]*,"attempts":2' "$T/kill/long/status.json" &&
   grep -q '"event":"resume","attempt":2' "$T/kill/long/log.jsonl"; then ok; else bad "resumed run: status/log"; fi
# shellcheck disable=SC2086
"$SDGP" train $RUN --threads 1 --quiet --log "$T/ref.jsonl" > /dev/null 2>&1
for k in test_acc train_loss test_loss step; do
  if [ "$(field "$T/kill/long/log.jsonl" $k)" = "$(field "$T/ref.jsonl" $k)" ]; then ok; else
    bad "resumed run's $k $(field "$T/kill/long/log.jsonl" $k) differs from the uninterrupted $(field "$T/ref.jsonl" $k)"; fi
done
expect 0 "report: 1 groups from 1 runs" -- "$SDGP" report "$T/kill"

finish
