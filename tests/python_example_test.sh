#!/usr/bin/env bash
# Smoke runs of examples/torch_resnet18_fmnist.py (a few SDGP steps of ResNet-18 on Fashion-MNIST,
# progress lines, the kernel report and a test accuracy) and examples/vit_fashion_mnist.py. Exit 77 (skipped) without torchvision or
# the data. Usage: python_example_test.sh PYTHON LIBSDGP_SO SOURCE_DIR
set -u
py=$1; lib=$2; src=$3
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fail() { echo "FAIL: $*"; echo "0 passed, 1 failed"; exit 1; }
"$py" -c "import torchvision" 2>/dev/null || { echo "SKIP: no torchvision (apt-get install python3-torchvision)"; exit 77; }
[ -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] || { echo "SKIP: no Fashion-MNIST"; exit 77; }
SDGP_LIBRARY=$lib PYTHONPATH=$src/python "$py" "$src/examples/torch_resnet18_fmnist.py" --steps 4 --batch 16 \
    --eval-images 100 --log-every 2 --threads 2 > "$T/out" 2>&1
rc=$?
cat "$T/out"
[ $rc -eq 0 ] || fail "the example exited with $rc"
grep -q '^ResNet-18 on Fashion-MNIST: SDGP rescaled 2:4' "$T/out" || fail "no header line"
[ "$(grep -c '^step [0-9]*/4 .*loss [0-9.]* ' "$T/out")" -eq 2 ] || fail "expected 2 progress lines"
grep -q '^sparse kernel on [0-9]* of 19 converted conv layers' "$T/out" || fail "no kernel report for 19 layers"
grep -q '^test accuracy: [0-9.]* % on 100 images' "$T/out" || fail "no test accuracy"
# all three methods, channels_last, a JSON line at the end
SDGP_LIBRARY=$lib PYTHONPATH=$src/python "$py" "$src/examples/torch_resnet18_fmnist.py" --steps 2 --batch 16 \
    --eval-images 100 --threads 2 --method all --channels-last --log "$T/r18.jsonl" > "$T/all" 2>&1 ||
  fail "the example with all three methods: $(cat "$T/all")"
grep -q '^ResNet-18 on Fashion-MNIST: all three (+ MVUE, S-STE block32) rescaled 2:4' "$T/all" || fail "all: $(cat "$T/all")"
"$py" -c 'import json, sys; r = json.loads(open(sys.argv[1]).read()); assert r["method"] == "all" and r["steps"] == 2 and r["channels_last"]' \
  "$T/r18.jsonl" || fail "all: no JSON line"
# bad input is an error message, not a traceback
SDGP_LIBRARY=$lib PYTHONPATH=$src/python "$py" "$src/examples/torch_resnet18_fmnist.py" --data "$T/none" \
    > "$T/bad" 2>&1 && fail "a missing data directory did not fail"
grep -q "cannot read Fashion-MNIST" "$T/bad" && ! grep -q Traceback "$T/bad" || fail "bad --data: $(cat "$T/bad")"
# the ViT example: a tiny model, SDGP on its MLPs' dL/dY, two steps, an accuracy
SDGP_LIBRARY=$lib PYTHONPATH=$src/python "$py" "$src/examples/vit_fashion_mnist.py" --steps 2 --batch 16 --width 64 \
    --depth 2 --heads 2 --eval-images 100 --log-every 1 --threads 2 --log "$T/vit.jsonl" > "$T/vit" 2>&1
rc=$?
cat "$T/vit"
[ $rc -eq 0 ] || fail "the ViT example exited with $rc"
grep -q '^ViT (width 64, depth 2, 2 heads, 49 tokens) on Fashion-MNIST: SDGP rescaled 2:4, 4 converted layers' "$T/vit" ||
  fail "ViT: no header line naming 4 converted layers (2 blocks x 2 MLP linears)"
grep -q '^test accuracy: [0-9.]* % on 100 images' "$T/vit" || fail "ViT: no test accuracy"
"$py" -c 'import json, sys; r = json.loads(open(sys.argv[1]).read().splitlines()[-1]); assert r["step"] == 2 and 0 <= r["test_acc"] <= 1' \
  "$T/vit.jsonl" || fail "ViT: no JSON log line"
# all three methods on the MLPs (SDGP, MVUE's weight gradient, S-STE weights), masks shared by 2 tokens
SDGP_LIBRARY=$lib PYTHONPATH=$src/python "$py" "$src/examples/vit_fashion_mnist.py" --steps 2 --batch 16 --width 64 \
    --depth 2 --heads 2 --eval-images 100 --threads 2 --method all --mask-block 2 > "$T/vit2" 2>&1 ||
  fail "the ViT example with all three methods: $(cat "$T/vit2")"
grep -q '^ViT .*: ALL rescaled 2:4 mask_block 2, 4 converted layers' "$T/vit2" || fail "ViT all: $(cat "$T/vit2")"
echo "3 passed, 0 failed"
