"""safetensors compatibility: files sdgp writes are read by an independent Python reader written
from the format specification, and files written the way the reference implementation writes
them (tensors sorted by alignment then name, compact JSON, no sdgp checksum) are read by sdgp.

Usage: /usr/bin/python3 tests/golden_safetensors.py <build-dir>   (loads <build-dir>/libsdgp.so)
The `safetensors` package is not installed, so the Python side parses the format by hand:
u64 little-endian header length, JSON header, data section."""
import ctypes as C
import json
import os
import struct
import sys
import tempfile
import zlib

import numpy as np
import torch

DTYPES = {"F32": (0, np.float32), "I64": (1, np.int64), "U8": (2, np.uint8), "I32": (3, np.int32), "U32": (4, np.uint32)}
BY_CODE = {code: (name, npt) for name, (code, npt) in DTYPES.items()}


class Tensor(C.Structure):
    _fields_ = [("name", C.c_char_p), ("dtype", C.c_int), ("ndim", C.c_int), ("shape", C.c_int64 * 4), ("data", C.c_void_p)]


class Meta(C.Structure):
    _fields_ = [("key", C.c_char_p), ("value", C.c_char_p)]


class Error(C.Structure):
    _fields_ = [("code", C.c_int), ("msg", C.c_char * 512)]


failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what, file=sys.stderr)


def load(build):
    lib = C.CDLL(os.path.join(build, "libsdgp.so"))
    lib.sdgp_safetensors_write.argtypes = [C.c_char_p, C.POINTER(Tensor), C.c_int, C.POINTER(Meta), C.c_int, C.POINTER(Error)]
    lib.sdgp_safetensors_read.argtypes = [C.POINTER(C.c_void_p), C.c_char_p, C.POINTER(Error)]
    lib.sdgp_safetensors_count.argtypes = [C.c_void_p]
    lib.sdgp_safetensors_at.argtypes = [C.c_void_p, C.c_int]
    lib.sdgp_safetensors_at.restype = C.POINTER(Tensor)
    lib.sdgp_safetensors_meta.argtypes = [C.c_void_p, C.c_char_p]
    lib.sdgp_safetensors_meta.restype = C.c_char_p
    lib.sdgp_safetensors_free.argtypes = [C.c_void_p]
    return lib


def fixture():
    g = torch.Generator().manual_seed(0)
    return {
        "conv1.weight": torch.randn(4, 3, 3, 3, generator=g).numpy(),
        "bn.running_var": torch.rand(7, generator=g).numpy(),
        "step": np.array([2**40 + 3, -5], dtype=np.int64),
        "mask": np.array([[1, 0, 255]], dtype=np.uint8),
        "scalar": np.array(-17, dtype=np.int32),
        "empty": np.zeros((0,), dtype=np.float32),
        "empty2": np.zeros((2, 0, 3), dtype=np.uint32),
        "counts": np.array([0, 1, 2**32 - 1], dtype=np.uint32),
        "unicode \u00e9\u65e5 \"q\" \\ \n": np.arange(3, dtype=np.float32),
    }


META = {"config": json.dumps({"lr": 0.5, "name": "run \"a\"\\b\n", "tags": ["x", "\u00e9"]}), "note": "\u65e5\u672c \U0001F600 \t\x01"}


def parse_by_hand(blob):
    """The format, from its specification."""
    (n,) = struct.unpack("<Q", blob[:8])
    header = blob[8:8 + n].decode("utf-8")
    data = blob[8 + n:]
    obj = json.loads(header)
    meta = obj.pop("__metadata__", {})
    tensors = {}
    spans = []
    for name, info in obj.items():
        code, npt = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        arr = np.frombuffer(data[b:e], dtype=npt).reshape(info["shape"])
        tensors[name] = arr
        spans.append((b, e))
    spans.sort()
    pos = 0
    for b, e in spans:
        check(b == pos, "data_offsets must tile the data section")
        pos = e
    check(pos == len(data), "data section fully covered")
    return n, header, meta, tensors, data


def c_writes_python_reads(lib, tmp):
    fx = fixture()
    keep = []
    arr = (Tensor * len(fx))()
    for i, (name, a) in enumerate(fx.items()):
        a = np.array(a, order="C")  # (ascontiguousarray would make a 0-d array 1-d)
        keep.append(a)
        code = DTYPES[[k for k, v in DTYPES.items() if v[1] == a.dtype.type][0]][0]
        shape = (C.c_int64 * 4)(*(list(a.shape) + [0] * (4 - a.ndim)))
        arr[i] = Tensor(name.encode(), code, a.ndim, shape, a.ctypes.data if a.size else None)
    metas = (Meta * len(META))(*[Meta(k.encode(), v.encode()) for k, v in META.items()])
    path = os.path.join(tmp, "c.safetensors")
    err = Error()
    st = lib.sdgp_safetensors_write(path.encode(), arr, len(fx), metas, len(META), C.byref(err))
    check(st == 0, "C write: " + err.msg.decode())
    blob = open(path, "rb").read()
    n, header, meta, tensors, data = parse_by_hand(blob)
    check(n % 8 == 0 and header.startswith("{") and header.rstrip(" ").endswith("}"), "header padded with spaces to 8")
    check(list(tensors) == list(fx), "tensor order as given")
    for name, a in fx.items():
        t = tensors.get(name)
        check(t is not None and t.dtype == a.dtype and t.shape == a.shape and np.array_equal(t, a), "tensor %r round trip" % name)
    for k, v in META.items():
        check(meta.get(k) == v, "metadata %r: %r" % (k, meta.get(k)))
    check(json.loads(meta["config"])["name"] == "run \"a\"\\b\n", "config JSON survives as a string")
    check(meta.get("sdgp_crc32") == "%08x" % zlib.crc32(data), "sdgp_crc32 is the CRC-32 of the data section")
    # torch agrees on the float data
    w = torch.from_numpy(tensors["conv1.weight"].copy())
    check(torch.equal(w, torch.from_numpy(fx["conv1.weight"])), "torch view of conv1.weight")


def reference_style_file(tensors, metadata=None):
    """As the reference implementation writes: sorted by (alignment desc, name), compact JSON,
    header padded with spaces to a multiple of 8, no gaps."""
    align = {np.dtype(np.float32): 4, np.dtype(np.int64): 8, np.dtype(np.uint8): 1, np.dtype(np.int32): 4, np.dtype(np.uint32): 4}
    names = sorted(tensors, key=lambda k: (-align[tensors[k].dtype], k))
    header = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    off = 0
    chunks = []
    for k in names:
        a = np.array(tensors[k], order="C")
        dt = [d for d, v in DTYPES.items() if v[1] == a.dtype.type][0]
        header[k] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        off += a.nbytes
        chunks.append(a.tobytes())
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(chunks)


def python_writes_c_reads(lib, tmp):
    fx = fixture()
    for label, metadata in (("no metadata", None), ("metadata", {"format": "pt", "k": "\u00e9\"\\"})):
        path = os.path.join(tmp, "py.safetensors")
        with open(path, "wb") as f:
            f.write(reference_style_file(fx, metadata))
        h = C.c_void_p()
        err = Error()
        st = lib.sdgp_safetensors_read(C.byref(h), path.encode(), C.byref(err))
        check(st == 0, "C read of a reference-style file (%s): %s" % (label, err.msg.decode()))
        if st != 0:
            continue
        check(lib.sdgp_safetensors_count(h) == len(fx), "count")
        seen = set()
        for i in range(lib.sdgp_safetensors_count(h)):
            t = lib.sdgp_safetensors_at(h, i).contents
            name = t.name.decode()
            seen.add(name)
            dt, npt = BY_CODE[t.dtype]
            shape = tuple(t.shape[d] for d in range(t.ndim))
            a = fx[name]
            nbytes = a.nbytes
            got = np.frombuffer(C.string_at(t.data, nbytes) if nbytes else b"", dtype=npt).reshape(shape)
            check(got.dtype == a.dtype and got.shape == a.shape and np.array_equal(got, a), "C sees %r as written (%s)" % (name, label))
        check(seen == set(fx), "all names")
        if metadata:
            for k, v in metadata.items():
                got = lib.sdgp_safetensors_meta(h, k.encode())
                check(got is not None and got.decode() == v, "metadata %r via C" % k)
        lib.sdgp_safetensors_free(h)
    # a reference-style file carrying a wrong sdgp_crc32 is rejected
    path = os.path.join(tmp, "bad.safetensors")
    with open(path, "wb") as f:
        f.write(reference_style_file(fx, {"sdgp_crc32": "%08x" % (zlib.crc32(b"x"))}))
    h = C.c_void_p()
    err = Error()
    st = lib.sdgp_safetensors_read(C.byref(h), path.encode(), C.byref(err))
    check(st == 4 and b"checksum mismatch" in err.msg, "wrong checksum rejected: %s" % err.msg.decode())


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lib = load(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        c_writes_python_reads(lib, tmp)
        python_writes_c_reads(lib, tmp)
    print("golden_safetensors: %s" % ("FAILED (%d)" % len(failures) if failures else "ok"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
