#!/usr/bin/env bash
# Crash safety: kill -9 a training run at random moments (during steps and during checkpoint
# writes) many times; after every kill the newest checkpoint must load, and resuming until the end
# must give bitwise the weights of an uninterrupted run. Also: the numerical guard stops a run
# that diverges, naming the step, and keeps the last good checkpoint.
# Usage: crash_test.sh PATH_TO_SDGP [KILLS]
set -u
SDGP=$1
KILLS=${2:-12}
PY=/usr/bin/python3
. "$(dirname "$0")/harness.sh"

if [ ! -d /usr/share/datasets/fashion-mnist ]; then
  echo "note: Fashion-MNIST not installed; crash test skipped"; echo "0 passed, 0 failed"; exit 0
fi
RUN=(--model smallcnn --batch-size 64 --max-steps 60 --checkpoint-every 2 --no-tta --threads 1 --seed 5
     --prune mvue --nm 2:4 --sparse-kernel on --quiet)

# tensors of a checkpoint, for a bitwise comparison (the metadata names paths, so compare data only)
tensors_digest() {
  "$PY" - "$1" <<'PYEOF'
import hashlib, json, struct, sys
b = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n]); data = b[8 + n:]
d = hashlib.sha256()
for k in sorted(x for x in h if x != "__metadata__"):
    s, e = h[k]["data_offsets"]; d.update(k.encode()); d.update(data[s:e])
print(d.hexdigest(), h["__metadata__"]["step"])
PYEOF
}

"$SDGP" train "${RUN[@]}" --checkpoint "$T/ref.safetensors" >/dev/null 2>&1 || bad "reference run failed"
REF=$(tensors_digest "$T/ref.safetensors")

CK="$T/run.safetensors"
seed=12345
for i in $(seq 1 "$KILLS"); do
  if [ -f "$CK" ]; then args=(--resume "$CK"); else args=("${RUN[@]}" --checkpoint "$CK"); fi
  "$SDGP" train "${args[@]}" >/dev/null 2>&1 &
  pid=$!
  seed=$(( (seed * 1103515245 + 12345) % 2147483648 ))
  sleep "0.$(printf '%03d' $(( seed % 900 + 50 )))"
  kill -9 "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  if [ -f "$CK" ]; then
    if "$SDGP" eval --checkpoint "$CK" --threads 1 --batch-size 500 >/dev/null 2>&1; then ok; else bad "kill $i: newest checkpoint does not load"; fi
  fi
done
# finish the run from whatever survived
if [ -f "$CK" ]; then args=(--resume "$CK"); else args=("${RUN[@]}" --checkpoint "$CK"); fi
"$SDGP" train "${args[@]}" >/dev/null 2>&1 || bad "final resume failed"
GOT=$(tensors_digest "$CK")
if [ "$GOT" = "$REF" ]; then ok; else bad "resumed-after-kills run differs from the uninterrupted one ($GOT vs $REF)"; fi
leftovers=$(ls "$T" | grep -c '\.tmp\.' || true)
echo "kills: $KILLS, temporary files left by killed writers: $leftovers (never read)"

# numerical guard: a diverging run stops, names the step, keeps the last good checkpoint
out=$("$SDGP" train --model smallcnn --batch-size 64 --max-steps 40 --lr 1000 --no-tta --threads 1 --quiet \
      --checkpoint "$T/nan.safetensors" --checkpoint-every 1 2>&1); rc=$?
if [ "$rc" -ne 0 ] && grep -q "NaN or Inf" <<<"$out" && grep -q "step" <<<"$out"; then ok; else bad "divergence not stopped (rc $rc): $out"; fi
if [ -f "$T/nan.safetensors" ]; then
  if "$SDGP" eval --checkpoint "$T/nan.safetensors" --threads 1 >/dev/null 2>&1; then ok; else bad "last good checkpoint does not load"; fi
fi
out=$("$SDGP" train --model smallcnn --batch-size 64 --max-steps 40 --lr 1000 --no-tta --threads 1 --quiet --on-nan skip 2>&1); rc=$?
if [ "$rc" -eq 0 ]; then ok; else bad "--on-nan skip must finish (rc $rc): $out"; fi

finish
