#!/usr/bin/env bash
# The command line: exit codes and messages for good and bad input, and a tiny real run.
# Usage: cli_test.sh PATH_TO_SDGP
set -u
SDGP=$1
. "$(dirname "$0")/harness.sh"

expect 0 "usage: sdgp" -- "$SDGP" --help
expect 0 "^sdgp [0-9]+\.[0-9]+" -- "$SDGP" --version
expect 2 "usage" -- "$SDGP"
expect 2 "unknown command 'fly'" -- "$SDGP" fly
expect 2 "unknown bench subcommand" -- "$SDGP" bench nothing
expect 0 "--prune" -- "$SDGP" train --help
expect 2 "unknown option '--speed'" -- "$SDGP" train --speed 3
expect 2 "lr: 'abc' is not a number" -- "$SDGP" train --lr abc
expect 2 "epochs: 0 is out of range" -- "$SDGP" train --epochs 0
expect 2 "nm" -- "$SDGP" train --nm 5:4
expect 2 "needs a value" -- "$SDGP" train --lr
expect 2 "prune: unknown" -- "$SDGP" train --prune sideways
expect 2 "$T/nowhere" -- "$SDGP" train --data-dir "$T/nowhere" --quiet
expect 2 "not a multiple of m=64" -- "$SDGP" train --model smallcnn --prune magnitude --nm 2:64 --prune-first-layer --max-steps 1
expect 1 "only [0-9.]+ GB of memory is available" -- "$SDGP" train --batch-size 65536 --width 4 --quiet
expect 2 "sdgp-domain: unknown value 'fourier'" -- "$SDGP" train --sdgp-domain fourier
expect 2 "sparse-kernel off" -- "$SDGP" train --model smallcnn --prune magnitude --sdgp-domain winograd --sparse-kernel off --max-steps 1 --quiet
expect 2 "sdgp-domain: .*'fourier'" -- "$SDGP" bench step --sdgp-domain fourier
expect 2 "sdgp-domain: at most 3 values" -- "$SDGP" bench step --sdgp-domain pixel,winograd,auto,pixel
expect 2 "recompute: unknown value 'all'" -- "$SDGP" train --recompute all
expect 2 "recompute: 'all' is not none or blocks" -- "$SDGP" bench step --recompute none,all
expect 2 "recompute: bench layers takes one value" -- "$SDGP" bench layers --recompute none,blocks
expect 2 "conv-algo: empty list" -- "$SDGP" bench step --conv-algo ,
expect 2 "conv-algo: unknown conv algorithm 'bogus'" -- "$SDGP" bench step --conv-algo auto,bogus
expect 2 "batch: 0 is out of range" -- "$SDGP" bench step --batch 0
expect 2 "needs --checkpoint" -- "$SDGP" eval
printf 'not a checkpoint at all' > "$T/bad.safetensors"
expect 2 "bad.safetensors" -- "$SDGP" eval --checkpoint "$T/bad.safetensors"
expect 2 "missing.safetensors" -- "$SDGP" train --resume "$T/missing.safetensors"

# a tiny real run: train, log, checkpoint, evaluate, resume
if [ -d /usr/share/datasets/fashion-mnist ]; then
  expect 0 "test accuracy" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 12 --no-tta \
    --prune magnitude --nm 2:4 --log "$T/log.jsonl" --checkpoint "$T/run.safetensors" --threads 2 --quiet
  expect 0 '"event":"epoch".*"test_acc"' -- cat "$T/log.jsonl"
  expect 0 "test accuracy .* step 12" -- "$SDGP" eval --checkpoint "$T/run.safetensors" --threads 2
  expect 0 "evaluated in [0-9.]+ s \([0-9]+ images/s\), choice [-a-z]{3}:[dw]{3}," -- "$SDGP" eval --checkpoint "$T/run.safetensors" --threads 2
  # a checkpoint written before the later settings existed (their cfg.* keys removed; the CRC covers the
  # tensors only) loads as the run it was: the same evaluation, bit for bit
  /usr/bin/python3 - "$T/run.safetensors" "$T/old.safetensors" <<'PY'
import json, struct, sys
blob = open(sys.argv[1], "rb").read()
(n,) = struct.unpack("<Q", blob[:8])
head = json.loads(blob[8:8 + n])
for k in ("conv-algo", "conv-workspace", "sdgp-domain", "mask-block", "sync-bn", "allreduce", "sparse-weights",
          "nm-weights", "weight-groups", "srste-lambda", "sparse-weights-first", "sparse-weights-classifier",
          "recompute", "wgrad-block", "prune-wgrad-first", "kernels"):
    del head["__metadata__"]["cfg." + k]
h = json.dumps(head, separators=(",", ":")).encode()
h += b" " * (-len(h) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(h)) + h + blob[8 + n:])
PY
  # (the first line: the result; the second has the evaluation's time)
  new_eval=$("$SDGP" eval --checkpoint "$T/run.safetensors" --threads 2 --conv-algo direct --conv-workspace 0 2>&1 | head -1)
  old_eval=$("$SDGP" eval --checkpoint "$T/old.safetensors" --threads 2 2>&1 | head -1)
  if [ "$old_eval" = "$new_eval" ]; then ok; else bad "older checkpoint: '$old_eval' vs '$new_eval'"; fi
  expect 0 "test accuracy" -- "$SDGP" train --resume "$T/run.safetensors" --max-steps 16 --quiet
  expect 2 "past this run's end" -- "$SDGP" train --resume "$T/run.safetensors" --max-steps 8 --quiet
  # per-layer data-gradient statistics, and MVUE on the weight gradient
  expect 0 "weight gradient: mvue 2:4 along positions" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 4 \
    --no-tta --prune magnitude --nm 2:4 --prune-first-layer --grad-stats 2 --prune-wgrad mvue --nm-wgrad 2:4 \
    --log "$T/stats.jsonl" --threads 2
  expect 0 '"event":"grad_stats","step":2,"layers":\[\{"layer":"conv1","rel_l2":0\.[0-9]' -- cat "$T/stats.jsonl"
  # the N:M weight-gradient kernel: on puts it in every pruned conv, all but the first unless --prune-wgrad-first
  # (the start-up line says so)
  expect 0 "kernel per layer: conv0=dense conv1=sparse" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 \
    --no-tta --prune-wgrad mvue --nm-wgrad 2:4 --sparse-kernel on --threads 2
  expect 0 "kernel per layer: conv0=sparse conv1=sparse" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 \
    --no-tta --prune-wgrad mvue --nm-wgrad 2:4 --prune-wgrad-first --sparse-kernel on --threads 2
  # the Winograd domain: the start-up line names it per layer; grad-stats measures it after the inverse transform
  expect 0 "domain winograd, mask block 1; data gradient per layer: conv0=dense conv1=winograd" -- "$SDGP" train --model smallcnn \
    --batch-size 64 --max-steps 4 --no-tta --prune mvue --nm 2:4 --sdgp-domain winograd --grad-stats 2 --log "$T/wstats.jsonl" --threads 2
  expect 0 '"event":"grad_stats","step":2,"layers":\[\{"layer":"conv1","rel_l2":0\.[0-9]' -- cat "$T/wstats.jsonl"
  # shared masks: the start-up line names the block; limits and functions without a block form are refused
  expect 0 "domain winograd, mask block 4; data gradient per layer: conv0=dense conv1=winograd" -- "$SDGP" train --model smallcnn \
    --batch-size 64 --max-steps 2 --no-tta --prune rescaled --nm 2:4 --sdgp-domain winograd --mask-block 4 --threads 2
  expect 0 "domain pixel, mask block 4; data gradient per layer: conv0=dense conv1=sparse" -- "$SDGP" train --model smallcnn \
    --batch-size 64 --max-steps 2 --no-tta --prune mvue --nm 2:4 --mask-block 4 --sparse-kernel on --threads 2
  # which pruning kernels run: the ISA's, the shared-mask ones, or the reference for a shape no vector kernel takes
  expect 0 "mvue 2:4 \((avx2|avx512|ref) pruning\), domain pixel, mask block 1;" -- "$SDGP" train --model smallcnn \
    --batch-size 64 --max-steps 1 --no-tta --prune mvue --nm 2:4 --threads 2
  expect 0 "mvue 3:4 \(ref pruning\), domain pixel" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 1 --no-tta \
    --prune mvue --nm 3:4 --threads 2
  expect 0 "rescaled 2:4 \(ref pruning\)" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 1 --no-tta \
    --prune rescaled --nm 2:4 --isa ref --threads 2
  # which instruction sets run: sdgp's (SDGP_ISA, --isa) and oneDNN's (DNNL_MAX_CPU_ISA; SSE4.1 is on every x86-64 CPU
  # oneDNN runs on)
  expect 0 "kernel ISA: sdgp ref, oneDNN sse41" -- env SDGP_ISA=ref DNNL_MAX_CPU_ISA=SSE41 "$SDGP" train --model smallcnn \
    --batch-size 64 --max-steps 1 --no-tta --threads 2
  expect 0 "kernel ISA: sdgp (ref|(avx2|avx512) \(pruning and sparse kernels ref: --isa\)), oneDNN [a-z0-9_]+" -- "$SDGP" train \
    --model smallcnn --batch-size 64 --max-steps 1 --no-tta --threads 2 --isa ref
  # the kernel choice: printed as text; --kernels runs on it instead of timing at start (the bits of the run that
  # had it: here --sparse-kernel on's), refused where it does not fit the model or a resumed run's
  expect 0 "choice .* ---:[dw]{3},-d-:[dw]{3} \(as given\)" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 \
    --no-tta --prune magnitude --nm 2:4 --kernels -d --threads 2
  expect 0 "choice .* ---:[dw]{3},-s-:[dw]{3} \(as given\)" -- "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 --no-tta \
    --prune magnitude --nm 2:4 --kernels -s --threads 2 --checkpoint "$T/given.safetensors"
  "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 --no-tta --prune magnitude --nm 2:4 --sparse-kernel on \
    --threads 2 --checkpoint "$T/on.safetensors" --quiet > /dev/null 2>&1
  given_eval=$("$SDGP" eval --checkpoint "$T/given.safetensors" --threads 2 2>&1 | head -1)
  on_eval=$("$SDGP" eval --checkpoint "$T/on.safetensors" --threads 2 2>&1 | head -1)
  if [ -n "$on_eval" ] && [ "$given_eval" = "$on_eval" ]; then ok; else bad "--kernels -s: '$given_eval' vs on: '$on_eval'"; fi
  # eval builds the training run's model with its choice: SDGP and sparse weights together (the data
  # gradient's letters once did not fit a model built without pruning)
  "$SDGP" train --model smallcnn --batch-size 64 --max-steps 2 --no-tta --prune rescaled --nm 2:4 --sparse-weights sste \
    --weight-groups cout --threads 2 --checkpoint "$T/both.safetensors" --quiet > /dev/null 2>&1
  expect 0 "choice ---:[dw]{3},[cd][a-z]-:[dw]{3}" -- "$SDGP" eval --checkpoint "$T/both.safetensors" --threads 2
  expect 2 "choice 'sss' does not fit a model of 2 conv layers" -- "$SDGP" train --model smallcnn --max-steps 1 \
    --prune magnitude --kernels sss --quiet
  expect 2 "choice 'ss': layer 0 \(conv0\) cannot be 's'" -- "$SDGP" train --model smallcnn --max-steps 1 --prune magnitude \
    --kernels ss --quiet
  expect 2 "a resumed run keeps its choice" -- "$SDGP" train --resume "$T/given.safetensors" --kernels -d --max-steps 3 --quiet
  expect 0 "choice .* ---:[dw]{3},-[sf]-:[dw]{3} \(the checkpoint's, not timed\)" -- "$SDGP" train --resume "$T/on.safetensors" --max-steps 3
  expect 2 "mask-block: 0 is out of range" -- "$SDGP" train --model smallcnn --max-steps 1 --prune magnitude --mask-block 0
  expect 2 "mvue-approx has no shared-mask form" -- "$SDGP" train --model smallcnn --max-steps 1 --prune mvue-approx --mask-block 2
  # a truncated checkpoint is never taken for good
  head -c 3000 "$T/run.safetensors" > "$T/cut.safetensors"
  expect 2 "cut.safetensors" -- "$SDGP" eval --checkpoint "$T/cut.safetensors"
fi

# sdgp kernels: every pass's list, one JSON object per implementation; the sparse kernels' ISA follows
# SDGP_ISA (ref: the portable path), oneDNN's entries say so
expect 2 "unknown option '--yaml'" -- "$SDGP" kernels --yaml
out=$("$SDGP" kernels --json 2>&1)
out_ref=$(SDGP_ISA=ref "$SDGP" kernels --json 2>&1)
if python3 -c '
import json, sys
for text, isa in ((sys.argv[1], None), (sys.argv[2], "ref")):
    rows = [json.loads(l) for l in text.splitlines()]
    assert {r["pass"] for r in rows} == {"fwd", "bwd_data", "bwd_weights"}, rows
    for p in ("fwd", "bwd_data", "bwd_weights"):
        codes = [r["code"] for r in rows if r["pass"] == p]
        assert len(codes) == len(set(codes)), codes  # a letter names one entry of its pass
    names = {(r["pass"], r["name"]) for r in rows}
    assert {("bwd_data", "sparse"), ("bwd_data", "sparse-fused"), ("fwd", "sparse-weights-cout"), ("bwd_weights", "sparse")} <= names
    for r in rows:
        assert r["blocking"], r
        if r["isa"].startswith("onednn:"):
            assert r["sparse"] == 0, r
        else:
            assert r["isa"] in ("ref", "avx2", "avx512") and (isa is None or r["isa"] == isa), r
' "$out" "$out_ref" 2>/dev/null; then ok; else bad "sdgp kernels --json: $out / $out_ref"; fi
# bench impls: every list entry a layer could run, against oneDNN on the same layer: per (layer, pass) the
# baseline first, one choice marked, names from `sdgp kernels`, no data gradient for the conv on the image,
# per-pass totals; the recipe through sdgp train's flags
kernels_json=$("$SDGP" kernels --json 2>&1)
out=$("$SDGP" bench impls --model smallcnn --batch-size 8 --threads 2 --prune magnitude --nm 2:4 --sparse-weights sste \
  --weight-groups cout --prune-wgrad mvue --reps 1 --json 2>&1)
if python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
head, rows, totals = lines[0], [l for l in lines if "impl" in l], [l for l in lines if "total" in l]
assert {"host", "isa", "onednn_isa", "l1d_kib", "l2_kib", "threads", "fma_ceiling_gflops", "model", "batch"} <= set(head), head
assert head["model"] == "smallcnn" and head["batch"] == 8 and head["threads"] == 2, head
names = {(k["pass"], k["name"]) for k in map(json.loads, sys.argv[2].splitlines())}
cases = {}
for r in rows:
    cases.setdefault((r["layer"], r["pass"]), []).append(r)
    assert r["impl"] == "onednn" or (r["pass"], r["impl"]) in names, r
    assert r["ms"] > 0 and abs(r["speedup"] - r["onednn_ms"] / r["ms"]) < 0.01 * r["speedup"] + 0.002, r
for (layer, p), rs in cases.items():
    assert rs[0]["impl"] == "onednn" and sum(r["chosen"] for r in rs) == 1, rs
    # the oneDNN rows: direct, then Winograd where it runs the pass; the baseline is the faster
    base = [r for r in rs if r["impl"] == "onednn"]
    assert [r["algo"] for r in base] in (["direct"], ["direct", "winograd"]), base
    assert all(abs(r["onednn_ms"] - min(b["ms"] for b in base)) < 1e-3 for r in rs), rs
    assert all((r["algo"] in ("direct", "winograd")) == (r["impl"] in ("onednn", "dense", "unpruned")) for r in rs), rs
assert ("conv0", "bwd_data") not in cases and ("conv0", "fwd") in cases
impls = {(r["pass"], r["impl"]) for r in rows}
assert {("bwd_data", "sparse-fused"), ("fwd", "sparse-weights-cout"), ("bwd_weights", "sparse")} <= impls, impls
assert {t["total"] for t in totals} == {"fwd", "bwd_data", "bwd_weights"}, totals
' "$out" "$kernels_json" 2>/dev/null; then ok; else bad "bench impls --json: $out"; fi
expect 2 "--pass: 'bogus' is not fwd, bwd_data or bwd_weights" -- "$SDGP" bench impls --model smallcnn --pass fwd,bogus
expect 2 "--input: '32x32' is not HxWxC" -- "$SDGP" bench impls --input 32x32
expect 2 "unknown option '--yaml'" -- "$SDGP" bench impls --yaml
# bench conv --model: the registry's layers (no tables of shapes); an unknown name says what it takes
expect 0 "smallcnn/conv1 " -- "$SDGP" bench conv --model smallcnn --nm 2:4 --threads 1 --repeat 1
expect 2 "--model: 'foo' is not w1, w0.25, all, r18, r50, rx or a registry model" -- "$SDGP" bench conv --model foo
# bench layers --interleave: both models in one process; the sums object adds up the layers from conv1 on
out=$("$SDGP" bench layers --model smallcnn --batch 8 --steps 2 --interleave --nm 2:4 --json 2>&1)
if python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
layers, sums = [r for r in rows if "layer" in r and r["layer"] != "conv0"], [r for r in rows if "sums" in r]
assert len(sums) == 1 and sums[0]["interleaved"] is True and sums[0]["sums"] == "conv1-conv%d" % len(layers)
s = sums[0]
for key, parts in (("fwd_variant_ms", ["fwd_variant_ms"]), ("bwd_data_sparse_prune_ms", ["bwd_data_sparse_ms", "prune_ms"]),
                   ("bwd_weights_ms", ["bwd_weights_ms"])):
    assert abs(s[key] - sum(r[p] for r in layers for p in parts)) <= 0.002 * len(layers) * len(parts), key
# the times are printed to 0.001 ms: the ratio of the printed ones is that close only up to their rounding
r = s["fwd_ms"] / s["fwd_variant_ms"]
assert abs(s["fwd_ratio"] - r) <= 0.001 + r * (0.0005 / s["fwd_ms"] + 0.0005 / s["fwd_variant_ms"]), "fwd_ratio"
# each step holds its conv products: per step products <= step, so their medians too (the layer sums once
# came from another configuration than the step: bench layers forced the sparse kernel on); the variant ran
# the step training runs (--sparse-kernel auto) and names its kernels
assert 0 < s["convs_ms"] <= s["step_ms"] + 0.0015 and 0 < s["convs_variant_ms"] <= s["step_variant_ms"] + 0.0015, "convs > step"
assert s["sparse_kernel"] == "auto" and s["choice"].startswith("---:"), s["choice"]
' "$out" 2>/dev/null; then ok; else bad "bench layers --interleave: $out"; fi
# --sparse-kernel on: every pruned layer on a sparse kernel (the paper's Figure 9)
out=$("$SDGP" bench layers --model smallcnn --batch 8 --steps 2 --nm 2:4 --sparse-kernel on --json --no-torch 2>&1)
if python3 -c '
import json, sys
s = [json.loads(l) for l in sys.argv[1].splitlines() if "sums" in l][0]
layers = s["choice"].split(",")  # per layer "FBW:abc": the image conv has no data gradient, the others a sparse one
assert s["sparse_kernel"] == "on" and layers[0][1] == "-" and {t[1] for t in layers[1:]} <= set("sfw"), s["choice"]
' "$out" 2>/dev/null; then ok; else bad "bench layers --sparse-kernel on: $out"; fi
# bench prune names what ran: mvue 3:4 has no vector kernel on any ISA; --isa ref is the reference;
# magnitude 2:4 runs the ISA the line names
out=$("$SDGP" bench prune --fn mvue --nm 3:4 --threads 1 --shape 1,4,16 --repeat 1 --json 2>&1)
out2=$("$SDGP" bench prune --fn magnitude --nm 2:4 --threads 1 --shape 1,4,16 --repeat 1 --isa ref --json 2>&1)
out3=$("$SDGP" bench prune --fn magnitude --nm 2:4 --threads 1 --shape 1,4,16 --repeat 1 --json 2>&1)
if grep -q '"kernel":"ref"' <<<"$out" && grep -q '"kernel":"ref"' <<<"$out2" &&
   python3 -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["kernel"] == r["isa"]' "$out3" 2>/dev/null; then ok; else
  bad "bench prune kernel: $out / $out2 / $out3"; fi
# bench step --interleave: the variant row's ratio is its own dense partner's median over its own, no RSS column
out=$("$SDGP" bench step --model smallcnn --batch 8 --steps 3 --no-torch --interleave --prune magnitude --nm 2:4 --json 2>&1)
row=$(tail -1 <<<"$out")
if grep -q '"interleaved":true' <<<"$row" && ! grep -q ours_rss_mb <<<"$row" &&
   grep -q '"isa":"ref","onednn_isa":"sse41"' <<<"$(SDGP_ISA=ref DNNL_MAX_CPU_ISA=SSE41 "$SDGP" bench step --model smallcnn \
     --batch 8 --steps 1 --no-torch --json 2>&1)" &&
   python3 -c 'import json,sys; r=json.loads(sys.argv[1]); d,v=r["dense_ms"],r["sdgp_ms"]; assert abs(r["speedup"]-d/v) <= 6e-4+d/v*(0.005/d+0.005/v)' "$row" 2>/dev/null; then ok; else
  bad "bench step --interleave: $out"; fi
# bench step --interleave with two --conv-algo: the second one's dense step against the first's, a dense
# line for the report with the partner's algorithm and time
out=$("$SDGP" bench step --model smallcnn --batch 8 --steps 2 --no-torch --interleave --conv-algo direct,auto --json 2>&1)
row=$(grep '"vs_conv_algo"' <<<"$out")
if [ "$(grep -c . <<<"$out")" = 3 ] && python3 -c 'import json,sys; r=json.loads(sys.argv[1])
assert r["conv_algo"] == "auto" and r["vs_conv_algo"] == "direct" and r["prune"] == "none" and r["interleaved"]
v, o = r["vs_ms"], r["ours_ms"]  # printed to 0.01 ms: the ratio of the printed ones is off by their rounding, as above
assert abs(r["vs_speedup"] - v / o) <= 6e-4 + v / o * (0.005 / v + 0.005 / o)' "$row" 2>/dev/null; then ok; else
  bad "bench step --interleave --conv-algo direct,auto: $out"; fi
# bench step --inference: both lines say so (the report never takes them for training steps), no PyTorch peer
out=$("$SDGP" bench step --model smallcnn --batch 8 --steps 2 --inference --interleave --sparse-weights sste --json 2>&1)
if [ "$(grep -c '"inference":true' <<<"$out")" = 2 ] && grep -q '"torch_ms":0.00' <<<"$out"; then ok; else
  bad "bench step --inference: $out"; fi
expect 2 "unknown option or missing value: --inference" -- "$SDGP" bench layers --inference
# bench step --rescale-scope: rescaled rows write their scope (sdgp report matches runs on it); the
# other functions have none
out=$("$SDGP" bench step --model smallcnn --batch 8 --steps 2 --no-torch --prune rescaled,magnitude --nm 2:4 --rescale-scope channel --json 2>&1)
if grep '"prune":"rescaled"' <<<"$out" | grep -q '"rescale_scope":"channel"' && grep -q '"prune":"magnitude"' <<<"$out" &&
   ! grep '"prune":"magnitude"' <<<"$out" | grep -q rescale_scope; then ok; else bad "bench step --rescale-scope: $out"; fi
expect 2 "rescale-scope: unknown value 'row' \\(sample-channel \\| channel\\)" -- "$SDGP" bench step --rescale-scope row

# bench linear: one small shape, every product's rows with their fields, checked; a bad --shape names the flag
out=$("$SDGP" bench linear --shape 256,64,128 --repeat 1 --threads 1 --json 2>&1)
if python3 -c '
import json, sys
lines = [json.loads(l) for l in sys.argv[1].splitlines()]
head, rows = lines[0], lines[1:]
assert {"host", "isa", "l1d_kib", "l2_kib", "threads", "fma_ceiling_gflops"} <= set(head), head
keys = {"shape", "nm", "threads", "product", "form", "kernel", "matmul_impl", "dense_matmul_ms", "dense_conv_ms",
        "best_dense_ms", "sparse_ms", "prune_ms", "kernel_ms", "speedup_vs_best", "gflops_useful", "ceiling_fraction",
        "rel_l2_err", "dense_rel_l2_err"}
assert len(rows) == 12 and all(keys <= set(r) for r in rows), rows
assert {r["product"] for r in rows} == {"fwd", "dgrad", "wgrad"} and all(r["rel_l2_err"] <= 1e-3 for r in rows)
assert all(abs(r["sparse_ms"] - r["prune_ms"] - r["kernel_ms"]) <= 0.0015 for r in rows)
' "$out" 2>/dev/null; then ok; else bad "bench linear --json: $out"; fi
expect 2 "--shape: '256,64' is not T,IN,OUT" -- "$SDGP" bench linear --shape 256,64 --repeat 1 --threads 1
# shared masks along sequences of 64 tokens: the data gradient's rows say so and pass their check
out=$("$SDGP" bench linear --shape 256,64,128,64 --mask-block 4 --nm 2:4 --repeat 1 --threads 2 --json 2>&1)
if python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()][1:]
dg = [r for r in rows if r.get("product") == "dgrad"]
assert len(dg) == 2 and all(r["mask_block"] == 4 and r["seq"] == 64 and r["rel_l2_err"] <= 1e-3 for r in dg), dg
' "$out" 2>/dev/null; then ok; else bad "bench linear --mask-block: $out"; fi
expect 2 "SEQ=48 does not divide the T=256 tokens" -- "$SDGP" bench linear --shape 256,64,128,48
expect 2 "--model: 'bert' is not vit, gpt2 or all" -- "$SDGP" bench linear --model bert

finish
