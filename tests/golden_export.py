"""`sdgp export` against PyTorch, run by ctest: a short S-STE training (2:4 weights, classifier too)
is exported, the file is loaded into the PyTorch twin of ResNet-9 (every tensor, nothing more), its sparse
weights must hold the N:M pattern, and PyTorch's test accuracy and loss on Fashion-MNIST (flip TTA,
the checkpoint's normalisation from the file's metadata) must equal what `sdgp eval` prints.
Usage: golden_export.py BUILD_DIR (skips without the data)."""
import gzip
import json
import os
import re
import struct
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from torch_models import ResNet9, named_tensors  # noqa: E402

SDGP = os.path.join(sys.argv[1], "sdgp")
DATA = "/usr/share/datasets/fashion-mnist"
problems = []


def check(cond, what):
    print(("ok " if cond else "FAIL ") + what)
    if not cond:
        problems.append(what)


def read_safetensors(path):
    blob = open(path, "rb").read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    types = {"F32": np.float32, "I64": np.int64}
    out = {k: np.frombuffer(blob[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]],
                            types[v["dtype"]]).reshape(v["shape"]) for k, v in header.items()}
    return meta, out


def idx(name):
    with gzip.open(os.path.join(DATA, name)) as f:
        raw = f.read()
    dims = raw[3]
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return np.frombuffer(raw[4 + 4 * dims:], np.uint8).reshape(shape)


def main():
    if not os.path.exists(os.path.join(DATA, "t10k-images-idx3-ubyte.gz")):
        print("skip: no Fashion-MNIST at " + DATA)
        return 0
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as d:
        ck, ex = os.path.join(d, "run.safetensors"), os.path.join(d, "export.safetensors")
        subprocess.run([SDGP, "train", "--sparse-weights", "sste", "--nm-weights", "2:4",
                        "--sparse-weights-classifier", "--max-steps", "6", "--epochs", "1", "--batch-size", "128", "--schedule", "constant", "--lr", "0.2",
                        "--threads", "2", "--checkpoint", ck, "--quiet"], check=True, capture_output=True)
        ev = subprocess.run([SDGP, "eval", "--checkpoint", ck, "--threads", "2"], check=True, capture_output=True,
                            text=True).stdout
        acc, loss = (float(v) for v in re.search(r"accuracy ([\d.]+)% \(loss ([\d.]+)\)", ev).groups())
        subprocess.run([SDGP, "export", "--checkpoint", ck, "--out", ex], check=True, capture_output=True)
        meta, tensors = read_safetensors(ex)
        bad = subprocess.run([SDGP, "export", "--checkpoint", ck], capture_output=True, text=True)
        check(bad.returncode == 2 and "--out" in bad.stderr, "export without --out: exit 2 naming the flag")

    check(meta.get("sparse_weights") == "sste 2:4 tap", f"metadata names the sparse weights ({meta.get('sparse_weights')})")
    check(not any(k.endswith("sste_beta") for k in tensors), "beta is folded into the weights, not exported")
    # sdgp's ResNet-9 names are its own (the zoo's torchvision models use torchvision's): the twin's
    # named_tensors maps them; every tensor must be there, nothing else but num_batches_tracked
    model = ResNet9(1, 10, 0.25)
    twin = named_tensors(model)
    extra = {k for k in tensors if k not in twin}
    check(set(twin) <= set(tensors) and all(k.endswith(".num_batches_tracked") for k in extra),
          f"the export holds exactly the model's tensors (missing {sorted(set(twin) - set(tensors))}, extra {sorted(extra)[:3]})")
    check(all(int(tensors[k]) == 6 for k in extra), "num_batches_tracked = the checkpoint's step")
    with torch.no_grad():
        for k, t in twin.items():
            t.copy_(torch.from_numpy(tensors[k].copy()))
    for name, w in tensors.items():
        if not re.fullmatch(r"conv[1-9]\.weight|linear\.weight", name):
            continue
        wt = w.reshape(w.shape[0], w.shape[1] // 4, 4, -1)  # (out, group, 4 input channels, taps)
        per_group = np.count_nonzero(wt, axis=2)
        check(per_group.max() <= 2 and per_group.mean() > 1.9, f"{name}: at most 2 of 4 nonzero "
              f"(mean {per_group.mean():.3f})")
    conv0 = tensors["conv0.weight"]
    check(np.count_nonzero(conv0) == conv0.size, "conv0 stays dense")

    mean, std = float(meta["mean"]), float(meta["std"])
    x = ((idx("t10k-images-idx3-ubyte.gz").astype(np.float64) / 255 - mean) / std).astype(np.float32)
    y = torch.from_numpy(idx("t10k-labels-idx1-ubyte.gz").astype(np.int64))
    xt = torch.from_numpy(x[:, None, :, :].copy())
    model.eval()
    with torch.no_grad():
        logits = torch.cat([0.5 * (model(b) + model(torch.flip(b, dims=[3]))) for b in xt.split(500)])
    t_loss = F.cross_entropy(logits, y, label_smoothing=0.1).item()
    t_acc = 100 * (logits.argmax(1) == y).double().mean().item()
    check(abs(t_acc - acc) <= 0.02, f"accuracy: PyTorch on the export {t_acc:.2f}% vs sdgp eval {acc:.2f}%")
    check(abs(t_loss - loss) <= 1e-3 * max(1.0, loss), f"loss: PyTorch {t_loss:.4f} vs sdgp eval {loss:.4f}")
    print(f"{len(problems)} problems")
    return 1 if problems else 0


sys.exit(main())
