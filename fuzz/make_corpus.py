#!/usr/bin/env python3
"""Writes the seed corpora fuzz/corpus/<target>/ (reproducible: run again to regenerate).
Each corpus has small valid inputs plus a few invalid ones; the input formats are described at the
top of fuzz_idx.c, fuzz_cifar.c and fuzz_safetensors.c. Standard library only."""
import gzip
import json
import os
import struct
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))


def put(target, name, data):
    d = os.path.join(HERE, "corpus", target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def pixels(n, seed):
    return bytes((i * 131 + seed * 17 + (i >> 3)) & 0xFF for i in range(n))


# ---- IDX: mode byte, u32 LE split, images file, labels file ----
def idx_images(n, rows, cols, seed=1):
    return struct.pack(">IIII", 0x803, n, rows, cols) + pixels(n * rows * cols, seed)


def idx_labels(labels):
    return struct.pack(">II", 0x801, len(labels)) + bytes(labels)


def idx_input(mode, img, lab):
    return bytes([mode]) + struct.pack("<I", len(img)) + img + lab


img3, lab3 = idx_images(3, 4, 4), idx_labels([0, 5, 9])
put("fuzz_idx", "valid_mem", idx_input(0, img3, lab3))
put("fuzz_idx", "valid_file", idx_input(1, img3, lab3))
put("fuzz_idx", "valid_file_gz", idx_input(3, img3, lab3))
put("fuzz_idx", "valid_pregz", idx_input(1, gzip.compress(img3, mtime=0), gzip.compress(lab3, mtime=0)))
put("fuzz_idx", "valid_28x28", idx_input(0, idx_images(2, 28, 28), idx_labels([3, 7])))
put("fuzz_idx", "bad_magic", idx_input(0, lab3, lab3))
put("fuzz_idx", "truncated", idx_input(1, img3[:-3], lab3))
put("fuzz_idx", "label_10", idx_input(0, img3, idx_labels([0, 10, 1])))
put("fuzz_idx", "count_mismatch", idx_input(0, img3, idx_labels([1, 2])))
put("fuzz_idx", "zero_dim", idx_input(0, struct.pack(">IIII", 0x803, 3, 0, 4), lab3))
put("fuzz_idx", "huge_dims", idx_input(3, struct.pack(">IIII", 0x803, 0xFFFFFFFF, 0xFFFFFFFF, 2), lab3))
put("fuzz_idx", "trailing", idx_input(0, img3 + b"\0", lab3))

# ---- CIFAR-10: mode byte, batch file ----
def cifar(labels, seed=3):
    return b"".join(bytes([l]) + pixels(3072, seed + i) for i, l in enumerate(labels))


put("fuzz_cifar", "one_mem", b"\x00" + cifar([4]))
put("fuzz_cifar", "two_file", b"\x01" + cifar([0, 9]))
put("fuzz_cifar", "two_file_gz", b"\x03" + cifar([1, 2]))
put("fuzz_cifar", "twice_file", b"\x05" + cifar([6]))
put("fuzz_cifar", "short", b"\x00" + cifar([4])[:-1])
put("fuzz_cifar", "label_10", b"\x01" + cifar([10]))
put("fuzz_cifar", "empty", b"\x01")

# ---- safetensors: the file ----
def st_file(tensors, metadata=None, crc=True, order=None):
    """tensors: list of (name, dtype, shape, bytes); data laid out in list order."""
    header = {}
    data = b"".join(t[3] for t in tensors)
    meta = dict(metadata or {})
    if crc:
        meta["sdgp_crc32"] = "%08x" % zlib.crc32(data)
    if meta:
        header["__metadata__"] = meta
    off = 0
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + data


T = [
    ("step", "I64", [2], struct.pack("<qq", 1 << 40, -3)),
    ("conv.w", "F32", [2, 1, 1, 3], struct.pack("<6f", 1, -2, 0.5, 0, 3, 1e-3)),
    ("n", "I32", [], struct.pack("<i", -7)),
    ("u", "U32", [1], struct.pack("<I", 0xFFFFFFFF)),
    ("empty", "F32", [0, 4], b""),
    ("mask", "U8", [3], b"\x01\x00\xff"),
]
META = {"format": "sdgp", "config": json.dumps({"lr": 0.5, "s": "q\"\\\n\u00e9"}), "note": "\u65e5 \U0001F600"}
put("fuzz_safetensors", "sdgp_style", st_file(T, META))
put("fuzz_safetensors", "reference_style", st_file(T, None, crc=False))
put("fuzz_safetensors", "empty_object", st_file([], None, crc=False))
put("fuzz_safetensors", "escaped_names", st_file([("a\u00e9\n\"x\"", "U8", [2], b"ab")], {"k": "\\u"}))
good = st_file(T, META)
put("fuzz_safetensors", "bad_crc", good[:-1] + bytes([good[-1] ^ 1]))
put("fuzz_safetensors", "truncated", good[:-5])
put("fuzz_safetensors", "huge_header_len", struct.pack("<Q", 1 << 40) + good[8:])
overlap = b'{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}'
put("fuzz_safetensors", "overlap", struct.pack("<Q", len(overlap)) + overlap + bytes(12))
badjson = b'{"a":{"dtype":"F32","shape":[2,],"data_offsets":[0,8]}}'
put("fuzz_safetensors", "bad_json", struct.pack("<Q", len(badjson)) + badjson + bytes(8))
f16 = b'{"h":{"dtype":"F16","shape":[2],"data_offsets":[0,4]}}'
put("fuzz_safetensors", "f16", struct.pack("<Q", len(f16)) + f16 + bytes(4))
print("corpora written under", os.path.join(HERE, "corpus"))
