#!/usr/bin/env bash
# `sdgp report`: Welch's t-test against dense (p-values checked against an independent Python
# computation: the Student-t density integrated numerically, itself checked on table values),
# error bars in the figures, the n:m line plot, and --step-times (quiet step times matched to the
# runs' settings; bad input exits 2 with file:line). Hand-made results folders, no training.
# Usage: report_test.sh PATH_TO_SDGP
set -u
SDGP=$1
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
. "$(dirname "$0")/harness.sh"
row() { grep -E "^\| $2 \|" "$1" | head -1; } # the first table row of a group in report.md

# mkrun DIR NAME ACC1 ACC2 "TRAIN FLAGS": a finished 2-epoch run (117 steps per epoch) like those
# `sdgp sweep` writes, with its command.txt (a quoted path with a space, as the sweep quotes it).
mkrun() {
  mkdir -p "$1/$2"
  {
    echo "{\"event\":\"epoch\",\"epoch\":1,\"step\":117,\"lr\":0.4,\"train_loss\":1.2,\"test_loss\":1.1,\"test_acc\":$3,\"elapsed_s\":10.000,\"img_per_s\":900.0}"
    echo "{\"event\":\"epoch\",\"epoch\":2,\"step\":234,\"lr\":0.1,\"train_loss\":0.8,\"test_loss\":0.8,\"test_acc\":$4,\"elapsed_s\":20.000,\"img_per_s\":900.0}"
  } > "$1/$2/log.jsonl"
  echo "{\"name\":\"$2\",\"state\":\"done\",\"seconds\":25.000,\"spent_s\":25.000,\"attempts\":1,\"exit\":0}" > "$1/$2/status.json"
  echo "/opt/sdgp/bin/sdgp train --checkpoint-every 25 --epochs 2 $5 --log '$1/with space/$2/log.jsonl' --checkpoint $1/$2/checkpoint.safetensors" > "$1/$2/command.txt"
}

# ---- the t-test: groups of known final accuracies --------------------------------------------
S="$T/syn"
DENSE="0.900000 0.901000 0.902000 0.903000 0.904000 0.905000"  # mean 90.25 %, s = 0.187 points
SHIFT="0.902160 0.903160 0.904160 0.905160 0.906160 0.907160"  # dense + 0.216: t = 2.000, df = 10
RND="0.880000 0.884000"
IDENT="0.905000 0.905000"                                      # no spread: p from dense's alone
MVUE="0.903000"                                                # one seed: no test
i=0; for a in $DENSE; do i=$((i + 1)); mkrun "$S" dense-s$i 0.85 $a "--threads 2 --prune none --seed $i"; done
i=0; for a in $SHIFT; do i=$((i + 1)); mkrun "$S" shift-s$i 0.895 $a "--threads 2 --prune magnitude --nm 2:4 --seed $i"; done
i=0; for a in $RND; do i=$((i + 1)); mkrun "$S" random-2:4-s$i 0.85 $a "--threads 2 --prune random --batch-size 256 --seed $i"; done
i=0; for a in $IDENT; do i=$((i + 1)); mkrun "$S" ident-s$i 0.85 $a "--prune rescaled --rescale-scope channel --seed $i"; done
mkrun "$S" mvue-2:4-s1 0.85 $MVUE "--threads 2 --prune mvue --seed 1"

# Bench lines as `sdgp bench step --json` prints them (mask_block: compared where the train flags
# have --mask-block). The Winograd-domain line comes before the
# pixel one: matching must look at the domain, not take the first magnitude 2:4 line.
cat > "$T/step.jsonl" <<'EOF'
{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"none","ours_ms":100.00,"torch_ms":0.00,"speedup":0.000,"ours_rss_mb":411.5,"torch_rss_mb":0.0}
{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"magnitude","nm":"2:4","sdgp_domain":"winograd","mask_block":1,"kernels":"-wwwwwws","dense_ms":100.00,"sdgp_ms":70.00,"speedup":1.429,"torch_ms":0.00,"vs_torch":0.000,"ours_rss_mb":491.8}
{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"magnitude","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"kernels":"-dddddds","dense_ms":100.00,"sdgp_ms":80.00,"speedup":1.250,"torch_ms":0.00,"vs_torch":0.000,"ours_rss_mb":491.8}
{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"rescaled","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"kernels":"-dddddds","dense_ms":100.00,"sdgp_ms":90.00,"speedup":1.111,"torch_ms":0.00,"vs_torch":0.000,"ours_rss_mb":491.8}
{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"mvue","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"kernels":"-sssssss","interleaved":true,"dense_ms":120.00,"sdgp_ms":60.00,"speedup":2.000,"torch_ms":0.00,"vs_torch":0.000}
EOF
expect 0 "report: 5 groups from 17 runs" -- "$SDGP" report "$S" --target 89 --step-times "$T/step.jsonl"
R="$S/report.md"
if grep -qF '| group | n | epochs | final acc % (mean) | range % | std | diff vs dense | p vs dense |' "$R"; then ok; else
  bad "accuracy table header: $(grep -m1 '^| group | n ' "$R")"; fi
if grep -q "Welch's two-sided t-test" "$R" && grep -q "low power" "$R" && grep -q "With 1–6 seeds per group" "$R"; then ok; else
  bad "the text does not explain the test and its power"; fi

# The oracle: Welch's t and df, and P(|T| >= |t|) by integrating Student's t density over the tail
# (x = |t| + tan(u), midpoint rule); checked first on table values (t = 2.0, df 10: 0.0734; the
# 97.5 % quantile 2.228 of df 10: 0.05; t = 1, df 1 (Cauchy): exactly 0.5).
cat > "$T/oracle.py" <<'EOF'
import math, sys

def tail2(t, df):
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)
    n, h, s = 200000, (math.pi / 2) / 200000, 0.0
    for i in range(n):
        u = (i + 0.5) * h
        x = abs(t) + math.tan(u)
        s += c * (1 + x * x / df) ** (-(df + 1) / 2) / math.cos(u) ** 2
    return 2 * s * h

for t, df, want, tol in ((2.0, 10, 0.0734, 1e-4), (2.228, 10, 0.05, 2e-4), (1.0, 1, 0.5, 1e-6)):
    got = tail2(t, df)
    if abs(got - want) > tol:
        print(f"FAIL: oracle p(t={t}, df={df}) = {got:.6f}, table {want}")
        sys.exit(1)

def stats(v):
    m = sum(v) / len(v)
    return m, (sum((x - m) ** 2 for x in v) / (len(v) - 1) if len(v) > 1 else float("nan")), len(v)

# argv: report.md, dense accuracies, then GROUP=accuracies ... (space-separated fractions)
rows = {}
for line in open(sys.argv[1]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 12 and cells[0] not in ("group", "---") and not cells[0].startswith("-"):
        rows.setdefault(cells[0], cells)
md, vd, nd = stats([float(x) for x in sys.argv[2].split()])
bad = 0
for spec in sys.argv[3:]:
    name, vals = spec.split("=")
    mg, vg, ng = stats([float(x) for x in vals.split()])
    r = rows.get(name)
    if r is None:
        print(f"FAIL: no row for {name}"); bad += 1; continue
    diff = 100 * (mg - md)
    if abs(float(r[6]) - diff) > 0.006:
        print(f"FAIL: {name}: diff vs dense {r[6]}, want {diff:+.4f}"); bad += 1
    if ng < 2 or (vg == 0 and vd == 0):
        want = None
    else:
        se2 = vg / ng + vd / nd
        t = (mg - md) / math.sqrt(se2)
        df = se2 ** 2 / ((vg / ng) ** 2 / (ng - 1) + (vd / nd) ** 2 / (nd - 1))
        want = tail2(t, df)
    if want is None:
        if r[7] != "—":
            print(f"FAIL: {name}: p vs dense {r[7]}, want — (no test)"); bad += 1
        else:
            print(f"ok: {name}: p — (no test)")
    elif r[7] == "—" or abs(float(r[7]) - want) > (0.05 * want if "e" in r[7] else 6e-4):  # %.1e or %.3f
        print(f"FAIL: {name}: p vs dense {r[7]}, want {want:.5f}"); bad += 1
    else:
        print(f"ok: {name}: p {r[7]} (oracle {want:.5f})")
sys.exit(1 if bad else 0)
EOF
if "$PY" "$T/oracle.py" "$R" "$DENSE" "shift=$SHIFT" "random-2:4=$RND" "ident=$IDENT" "mvue-2:4=$MVUE"; then ok; else
  bad "p-values against the oracle"; fi
if row "$R" shift | grep -qE '\| \+0\.22 \| 0\.073 \|'; then ok; else bad "shift (t = 2, df = 10): $(row "$R" shift)"; fi
if row "$R" dense | grep -qE '^\| dense \| 6 \| 2 \| 90\.25 \| 90\.00–90\.50 \| 0\.19 \| — \| — \|'; then ok; else
  bad "dense row: $(row "$R" dense)"; fi

# both groups without spread: no test, the difference still
Z="$T/zero"
mkrun "$Z" dense-s1 0.5 0.900000 "--prune none"; mkrun "$Z" dense-s2 0.5 0.900000 "--prune none"
mkrun "$Z" x-s1 0.5 0.880000 "--prune random"; mkrun "$Z" x-s2 0.5 0.880000 "--prune random"
expect 0 "report: 2 groups" -- "$SDGP" report "$Z"
if row "$Z/report.md" x | grep -qE '^\| x \| 2 \| 2 \| 88\.00 \| 88\.00–88\.00 \| 0\.00 \| -2\.00 \| — \|'; then ok; else
  bad "both variances 0: $(row "$Z/report.md" x)"; fi

# the runs table: each run's first epoch at or above the target (dense-s1 at epoch 2, shift-s1 at 1, random never)
if grep -qF '| first epoch >= 89.00 % |' "$R" && row "$R" dense-s1 | grep -qE '\| 2 \|$' && row "$R" shift-s1 | grep -qE '\| 1 \|$' &&
   row "$R" random-2:4-s1 | grep -qE '\| — \|$'; then ok; else
  bad "runs table, first epoch at the target: $(row "$R" dense-s1) / $(row "$R" shift-s1) / $(row "$R" random-2:4-s1)"; fi

# ---- quiet step times ------------------------------------------------------------------------
# target 89 %: dense reaches it after 234 steps (100 ms each: 23.4 s), shift after 117 (the pixel
# line's 80 ms: 9.36 s, 2.500x), ident after 234 (the rescaled line's 90 ms: 21.06 s, 1.111x; its
# runs have --threads 0, so threads are not compared), random never (batch 256 matches no line).
if grep -q "## Time to target from quiet step times" "$R" && grep -q "quiet measurements" "$R" &&
   grep -q "wall times above are not" "$R"; then ok; else bad "the step-times section or its text"; fi
if grep -qE '^\| dense \| 6/6 \| 234 \| 100\.00 \| 23\.4 \| 1\.000x \| row 1: resnet9-w0\.25-28x28x1, batch 512, 2 threads, none \|' "$R"; then ok; else
  bad "dense step time: $(grep -E '^\| dense \| 6/6 \| 234' "$R")"; fi
if grep -qE '^\| shift \| 6/6 \| 117 \| 80\.00 \| 9\.4 \| 2\.500x \| row 3: .*magnitude 2:4(; not compared: mask_block)? \|' "$R"; then ok; else
  bad "shift step time (must match the pixel line 3): $(grep -E '^\| shift \| 6/6 \| 117' "$R")"; fi
if grep -qE '^\| ident \| 2/2 \| 234 \| 90\.00 \| 21\.1 \| 1\.111x \| row 4: .*rescaled 2:4; not compared: threads(, mask_block)?, rescale_scope \|' "$R"; then ok; else
  bad "ident step time: $(grep -E '^\| ident \| 2/2 \| 234' "$R")"; fi
if grep -qE '^\| random-2:4 \| 0/2 \| not reached \| — \| — \| — \| no match \(closest: row 1, with batch 512 where the run has 256, prune none where the run has random\) \|' "$R"; then ok; else
  bad "random: $(grep -E '^\| random-2:4 \| 0/2 \| not' "$R")"; fi
# mvue's line is interleaved: its own ratio (60 / 120 ms) times the dense line's 100 ms, 50 ms: 11.7 s, 2.000x
if grep -qE '^\| mvue-2:4 \| 1/1 \| 234 \| 50\.00 \(i\) \| 11\.7 \| 2\.000x \| row 5: .*mvue 2:4(; not compared: threads)?(, mask_block)? \|' "$R"; then ok; else
  bad "mvue (interleaved line): $(grep -E '^\| mvue-2:4 \| 1/1 \| 234' "$R")"; fi
if grep -qF '(i): the line was measured with `--interleave`' "$R"; then ok; else bad "the (i) note"; fi
# --tta median: at 90.15 % four of dense's six seeds reach it (at step 234), so the mean rule has no
# time and the median has 234 steps (100 ms: 23.4 s); shift's six all reach it at 234 (80 ms: 18.7 s, 1.250x)
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/median" --target 90.15 --tta median --step-times "$T/step.jsonl"
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/mean" --target 90.15 --step-times "$T/step.jsonl"
if grep -qE '^\| dense \| 4/6 \| 234 \| 100\.00 \| 23\.4 \| 1\.000x \|' "$T/median/report.md" &&
   grep -qE '^\| shift \| 6/6 \| 234 \| 80\.00 \| 18\.7 \| 1\.250x \|' "$T/median/report.md" &&
   grep -q "median over seeds (a seed that never reached it counts as slower" "$T/median/report.md" &&
   grep -qE '^\| dense \| 4/6 \| not reached \|' "$T/mean/report.md"; then ok; else
  bad "--tta median: $(grep -E '^\| (dense|shift) \| [46]/6 \| (234|not)' "$T/median/report.md" "$T/mean/report.md")"; fi
expect 2 "--tta: 'avg' is not mean or median" -- "$SDGP" report "$S" --tta avg
# the rescale scope: a line that has it is matched on it, and of the matching lines the one that knows
# the most keys counts (line 7, channel scope, 95 ms: 22.2 s, not the scope-less line 4 before it)
{ cat "$T/step.jsonl"
  echo '{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"rescaled","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"rescale_scope":"sample-channel","dense_ms":100.00,"sdgp_ms":85.00,"speedup":1.176}'
  echo '{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"rescaled","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"rescale_scope":"channel","dense_ms":100.00,"sdgp_ms":95.00,"speedup":1.053}'
} > "$T/step-scope.jsonl"
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/scope" --target 89 --step-times "$T/step-scope.jsonl"
if grep -qE '^\| ident \| 2/2 \| 234 \| 95\.00 \| 22\.2 \| 1\.053x \| row 7: .*rescaled 2:4 \(channel scope\); not compared: threads(, mask_block)? \|' "$T/scope/report.md"; then ok; else
  bad "ident with scoped lines: $(grep -E '^\| ident \| 2/2 \| 234' "$T/scope/report.md")"; fi
# only the other scope's line: no match
grep -v '"rescale_scope":"channel"' "$T/step-scope.jsonl" | grep -v '"prune":"rescaled","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"kernels"' > "$T/step-sc.jsonl"
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/sc" --target 89 --step-times "$T/step-sc.jsonl"
if grep -qE '^\| ident \| 2/2 \| 234 \| — \| — \| — \| no match \(closest: ' "$T/sc/report.md"; then ok; else
  bad "ident against the other scope's line: $(grep -E '^\| ident \| 2/2 \| 234' "$T/sc/report.md")"; fi
# repeats of one measurement: the median of the matching lines (dense 90/100/130 ms: 100; shift's
# interleaved ratios 0.5/0.8/0.6: 0.6 of the dense group's 100 ms, 60 ms, 117 steps: 7.0 s, 3.333x)
D='{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"none","ours_ms":'
M='{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"prune":"magnitude","nm":"2:4","sdgp_domain":"pixel","mask_block":1,"interleaved":true,'
{ echo "$D"'130.0}'; echo "$D"'90.0}'; echo "$D"'100.0}'
  echo "$M"'"dense_ms":120.0,"sdgp_ms":60.0}'; echo "$M"'"dense_ms":100.0,"sdgp_ms":80.0}'; echo "$M"'"dense_ms":150.0,"sdgp_ms":90.0}'
} > "$T/step-rep.jsonl"
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/rep" --target 89 --step-times "$T/step-rep.jsonl"
if grep -qE '^\| dense \| 6/6 \| 234 \| 100\.00 \| 23\.4 \| 1\.000x \| rows 1, 2, 3 \(median of 3\): ' "$T/rep/report.md" &&
   grep -qE '^\| shift \| 6/6 \| 117 \| 60\.00 \(i\) \| 7\.0 \| 3\.333x \| rows 4, 5, 6 \(median of 3\): .*magnitude 2:4' "$T/rep/report.md"; then ok; else
  bad "repeated lines, median: $(grep -E '^\| (dense|shift) \| 6/6' "$T/rep/report.md")"; fi
# `bench step --inference` lines time inference forwards: never a training run's step time, even first
{ echo '{"model":"resnet9-w0.25-28x28x1","batch":512,"threads":2,"conv_algo":"auto","conv_ws_mb":48,"recompute":"none","prune":"none","inference":true,"ours_ms":30.00,"torch_ms":0.00,"speedup":0.000,"ours_rss_mb":100.0,"torch_rss_mb":0.0}'
  cat "$T/step.jsonl"; } > "$T/step-inf.jsonl"
expect 0 "report: " -- "$SDGP" report "$S" --out "$T/inf" --target 89 --step-times "$T/step-inf.jsonl"
if grep -qE '^\| dense \| 6/6 \| 234 \| 100\.00 \| 23\.4 \| 1\.000x \| row 2: ' "$T/inf/report.md"; then ok; else
  bad "an inference line was taken for a training step: $(grep -E '^\| dense \| 6/6 \| 234' "$T/inf/report.md")"; fi
# real `sdgp bench step --json` output (the training batch: its dense line matches our dense runs)
REAL="$SRC/docs/bench/hosts/amd-zen5-f26m2/sdgp-domain/step-train-batch.jsonl"
if [ -s "$REAL" ]; then
  expect 0 "report: " -- "$SDGP" report "$S" --out "$T/real" --target 89 --step-times "$REAL"
  if grep -qE '^\| dense \| 6/6 \| 234 \| [0-9.]+ \| [0-9.]+ \| 1\.000x \| row 1: resnet9-w0\.25-28x28x1, batch 512, 2 threads, none \|' "$T/real/report.md"; then ok; else
    bad "real bench step output: $(grep -E '^\| dense \| 6/6 \| 234' "$T/real/report.md")"; fi
fi
REAL="$SRC/docs/bench/hosts/amd-zen3-f25m1/step-train-batch.jsonl" # `--interleave` lines
if [ -s "$REAL" ]; then
  expect 0 "report: " -- "$SDGP" report "$S" --out "$T/real-i" --target 89 --step-times "$REAL"
  if grep -qE '^\| shift \| 6/6 \| 117 \| [0-9.]+ \(i\) \| [0-9.]+ \| [0-9.]+x \| row 2: .*magnitude 2:4' "$T/real-i/report.md"; then ok; else
    bad "real interleaved bench step output: $(grep -E '^\| shift \| 6/6' "$T/real-i/report.md")"; fi
fi

# bad --step-times input: exit 2, the file (and line) named
expect 2 "step-missing.jsonl" -- "$SDGP" report "$S" --step-times "$T/step-missing.jsonl"
: > "$T/empty.jsonl"
expect 2 "empty.jsonl: no lines" -- "$SDGP" report "$S" --step-times "$T/empty.jsonl"
{ head -1 "$T/step.jsonl"; echo '{"model":"resnet9-w0.25-28x28x1","batch":'; echo; } > "$T/bad1.jsonl"
expect 2 "bad1.jsonl:2: malformed line" -- "$SDGP" report "$S" --step-times "$T/bad1.jsonl"
echo '{"model":"resnet9-w0.25","layer":"conv1","threads":2,"prune":"magnitude","nm":"2:4","fwd_ms":1.0,"bwd_data_dense_ms":2.0,"bwd_data_sparse_ms":0.8,"prune_ms":0.2,"bwd_weights_ms":1.0}' > "$T/layers.jsonl"
expect 2 'layers.jsonl:1: .*not a `sdgp bench step --json` line: no "batch" \(a number\)' -- "$SDGP" report "$S" --step-times "$T/layers.jsonl"
echo '{"model":"m","batch":512,"threads":2,"prune":"magnitude","nm":"2:4","dense_ms":100.0}' > "$T/nosdgp.jsonl"
expect 2 'nosdgp.jsonl:1: .*no "sdgp_ms" \(a number\)' -- "$SDGP" report "$S" --step-times "$T/nosdgp.jsonl"
echo '{"model":"m","batch":512,"threads":2,"prune":"none","ours_ms":-1}' > "$T/neg.jsonl"
expect 2 'neg.jsonl:1: .*ours_ms is not a positive time' -- "$SDGP" report "$S" --step-times "$T/neg.jsonl"
echo '{"model":"m","batch":512,"threads":2,"prune":"mvue","nm":"2:4","interleaved":true,"sdgp_ms":50.0}' > "$T/nopartner.jsonl"
expect 2 'nopartner.jsonl:1: .*an interleaved line needs "dense_ms"' -- "$SDGP" report "$S" --step-times "$T/nopartner.jsonl"
expect 2 "--step-times needs a value" -- "$SDGP" report "$S" --step-times

# ---- figures: error bars where a group has seeds, the n:m line plot --------------------------
# fig7/fig10: mean and std columns; yerrorlines for groups of >= 2 seeds, plain lines for one seed
if grep -qE '^2 90\.25 0\.187083' "$S/fig7_test_acc.dat"; then ok; else bad "fig7 data: dense's epoch 2 mean and std"; fi
if grep -q 'index 0 using 1:2:3 with yerrorlines' "$S/fig7_test_acc.gp" && grep -q 'index 0 using 1:2:3 with yerrorlines' "$S/fig10_time_to_acc.gp" &&
   grep -qE 'index [0-9]+ using 1:2 with linespoints .*title "mvue-2:4"' "$S/fig7_test_acc.gp"; then ok; else
  bad "fig7/fig10 scripts: error bars for groups of several seeds only"; fi
N="$T/nm"
mkrun "$N" dense-s1 0.5 0.900000 "--prune none"; mkrun "$N" dense-s2 0.5 0.904000 "--prune none"
mkrun "$N" 2:4-s1 0.5 0.880000 "--prune rescaled"; mkrun "$N" 2:4-s2 0.5 0.860000 "--prune rescaled"
mkrun "$N" 4:8-s1 0.5 0.890000 "--prune rescaled --nm 4:8"; mkrun "$N" 1:4-s1 0.5 0.850000 "--prune rescaled --nm 1:4"
expect 0 "report: 4 groups" -- "$SDGP" report "$N"
# m/n = 2: 2:4 (87.00 +- 1.41) and 4:8 (89.00, one seed); m/n = 4: 1:4
if grep -qE '^4 87\.0000 1\.4142 2:4 2$' "$N/fig8_nm_acc.dat" && grep -qE '^8 89\.0000 0\.0000 4:8 1$' "$N/fig8_nm_acc.dat" &&
   grep -qE '^4 85\.0000 0\.0000 1:4 1$' "$N/fig8_nm_acc.dat" && grep -q 'yerrorlines' "$N/fig8_nm_acc.gp" &&
   grep -q 'title "m/n = 2: 2:4, 4:8"' "$N/fig8_nm_acc.gp" && grep -q 'dense (90.20%)' "$N/fig8_nm_acc.gp"; then ok; else
  bad "fig8_nm_acc data/script: $(cat "$N/fig8_nm_acc.dat" "$N/fig8_nm_acc.gp" 2>&1 | tail -8)"; fi
if [ ! -e "$S/fig8_nm_acc.gp" ]; then ok; else bad "fig8_nm_acc without n:m groups"; fi
if command -v gnuplot > /dev/null; then
  for f in "$S/fig7_test_acc" "$S/fig10_time_to_acc" "$N/fig8_nm_acc" "$N/fig8_nm_heatmap"; do
    if is_png "$f.png"; then ok; else bad "$f.png not drawn"; fi
  done
  if grep -q '](fig8_nm_acc.png)' "$N/report.md"; then ok; else bad "report.md does not show fig8_nm_acc"; fi
else
  echo "note: gnuplot not installed; PNGs not checked"
fi

finish
