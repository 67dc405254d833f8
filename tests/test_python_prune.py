"""sdgp.prune (python/sdgp): against a numpy oracle, numpy vs torch, dimension handling, the compressed
form, bad input (clear Python exceptions, never a crash), and the library loader.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_prune.py"""
import os
import subprocess
import sys

import numpy as np
import torch

import sdgp

from python_harness import check, finish  # noqa: E402 (tests/ is the script's directory)


def raises(exc, fn, what, contains=None):
    try:
        fn()
    except exc as e:
        ok = contains is None or contains in str(e)
        check(ok, "%s: message %r lacks %r" % (what, str(e), contains))
        return
    except Exception as e:  # noqa: BLE001 - the wrong class is a failure, reported
        check(False, "%s: raised %s(%s), expected %s" % (what, type(e).__name__, e, exc.__name__))
        return
    check(False, "%s: no exception, expected %s" % (what, exc.__name__))


def magnitude_oracle(x, n, m):
    """Keep the n largest |x| of every m consecutive values along the last axis; ties: lower index."""
    g = x.reshape(-1, m)
    order = np.argsort(-np.abs(g), axis=1, kind="stable")  # stable: the lower index first among equals
    keep = np.zeros_like(g, dtype=bool)
    np.put_along_axis(keep, order[:, :n], True, axis=1)
    return np.where(keep, g, 0).reshape(x.shape).astype(np.float32)


def rescaled_oracle(x, n, m):
    """Magnitude, then per (sample, channel) over the positions kept values times sum|x| / sum|kept|
    (1 where the kept sum is <= 2^-24 of the dense sum), include/sdgp/prune.h."""
    p = magnitude_oracle(x, n, m)
    B, C = x.shape[0], x.shape[-1]
    xs = np.abs(x.reshape(B, -1, C).astype(np.float64)).sum(1)
    ps = np.abs(p.reshape(B, -1, C).astype(np.float64)).sum(1)
    r = np.where(ps > xs * 2.0 ** -24, xs / np.where(ps > 0, ps, 1), 1.0).astype(np.float32)
    return (p.reshape(B, -1, C) * r[:, None, :]).reshape(x.shape)


rng = np.random.default_rng(1)
x = rng.standard_normal((3, 5, 7, 32)).astype(np.float32)
x[0, 0, 0, :4] = [1.0, -1.0, 1.0, 0.5]  # three equal |x|: 2:4 keeps the two of lower index
for nm in ("2:4", "1:4", "4:32", "3:8", "4:4", "1:1"):
    n, m = map(int, nm.split(":"))
    ref = magnitude_oracle(x, n, m)
    check(np.array_equal(sdgp.prune(x, "magnitude", nm), ref), "magnitude %s against the numpy oracle" % nm)
    got = sdgp.prune(x, "rescaled", nm)
    check(np.allclose(got, rescaled_oracle(x, n, m), rtol=1e-6, atol=0), "rescaled %s against the oracle" % nm)
check(np.array_equal(sdgp.prune(x, "magnitude", "2:4")[0, 0, 0, :4], [1.0, -1.0, 0, 0]),
      "magnitude ties keep the lower index")
x_before = x.copy()
sdgp.prune(x, "mvue", "2:4", seed=3)
check(np.array_equal(x, x_before), "prune leaves its input unchanged")

# numpy and torch give the same bits; random functions repeat for the same key, differ for another
t = torch.from_numpy(x)
for fn in ("magnitude", "rescaled", "random", "mvue", "mvue-approx"):
    a = sdgp.prune(x, fn, "2:4", seed=5, step=2, layer=1)
    b = sdgp.prune(t, fn, "2:4", seed=5, step=2, layer=1)
    check(isinstance(b, torch.Tensor) and np.array_equal(a, b.numpy()), "%s: numpy and torch agree" % fn)
    c = sdgp.prune(x, fn, "2:4", seed=5, step=2, layer=1, threads=1)
    check(np.array_equal(a, c), "%s: the same for 1 thread and the default" % fn)
    check((np.count_nonzero(a.reshape(-1, 4), axis=1) <= 2).all(), "%s: at most 2 of 4 nonzero" % fn)
check(not np.array_equal(sdgp.prune(x, "random", "2:4", step=0), sdgp.prune(x, "random", "2:4", step=1)),
      "random: another step, other masks")
tg = torch.from_numpy(x.copy()).requires_grad_()
check(not sdgp.prune(tg).requires_grad, "a tensor that requires grad is pruned as data")

# dim: NCHW tensors prune along dim 1, results in the input's dimension order
nchw = t.permute(0, 3, 1, 2).contiguous()
got = sdgp.prune(nchw, "magnitude", "2:4", dim=1)
check(got.shape == nchw.shape and got.is_contiguous(), "dim=1 keeps the NCHW shape, contiguous")
check(torch.equal(got, torch.from_numpy(magnitude_oracle(x, 2, 4)).permute(0, 3, 1, 2)), "dim=1 prunes channels")
check(np.array_equal(sdgp.prune(np.moveaxis(x, 3, 1), dim=1), np.moveaxis(magnitude_oracle(x, 2, 4), 3, 1)),
      "dim=1 on a non-contiguous numpy view")
check(np.array_equal(sdgp.prune(x[0, 0, 0]), magnitude_oracle(x[0, 0, 0], 2, 4)), "a 1-d array is one row")

# zero-copy: a float32 C-contiguous input is read in place (numpy's buffers are traced by tracemalloc)
import tracemalloc  # noqa: E402
big = rng.standard_normal((4, 64, 64, 64)).astype(np.float32)  # 4 MiB
tracemalloc.start()
sdgp.prune(big)
direct = tracemalloc.get_traced_memory()[1]
tracemalloc.reset_peak()
sdgp.prune(big, dim=1)  # NCHW: read and written in place by the library
nchw_peak = tracemalloc.get_traced_memory()[1]
tracemalloc.reset_peak()
sdgp.prune(big, dim=2)  # channels neither last nor in dim 1: one copy of x in, one of the result out
moved = tracemalloc.get_traced_memory()[1]
tracemalloc.stop()
check(direct < 1.25 * big.nbytes <= moved and nchw_peak < 1.25 * big.nbytes,
      "only the output is allocated: peak %d (NCHW %d) for %d bytes (%d with a copy)" %
      (direct, nchw_peak, big.nbytes, moved))

# NCHW read in place: bitwise the channels-last result for every function (same key: same masks), the
# compressed form channels last, shared masks along the rows of each sample; the row axis is refused
xl = rng.standard_normal((3, 6, 5, 16)).astype(np.float32)  # B H W C
xn = np.ascontiguousarray(np.moveaxis(xl, 3, 1))
for fn in ("random", "magnitude", "rescaled", "mvue", "mvue-approx"):
    for sc in ("sample-channel", "channel"):
        kw = dict(seed=3, step=1, layer=2, scope=sc)
        check(np.array_equal(sdgp.prune(xn, fn, "2:4", dim=1, **kw), np.moveaxis(sdgp.prune(xl, fn, "2:4", **kw), 3, 1)),
              "%s %s: NCHW in place = channels last" % (fn, sc))
        vn, i_n = sdgp.prune(xn, fn, "2:4", dim=1, compressed=True, **kw)
        vl, il = sdgp.prune(xl, fn, "2:4", compressed=True, **kw)
        check(np.array_equal(vn, vl) and np.array_equal(i_n, il), "%s %s: NCHW compressed = channels last" % (fn, sc))
check(np.array_equal(sdgp.prune(xn, "magnitude", "2:4", dim=1, mask_block=2, mask_line=5),
                     np.moveaxis(sdgp.prune(xl, "magnitude", "2:4", mask_block=2, mask_line=5), 3, 1)),
      "shared masks: NCHW in place = channels last")
raises(ValueError, lambda: sdgp.prune(xn, dim=1, axis="row"), "the row axis with NCHW", "axis='row'")

# the compressed form: shapes, indices in range, decompress gives the dense result back
v, i = sdgp.prune(x, "rescaled", "2:4", compressed=True)
check(v.shape == (3, 5, 7, 16) and i.dtype == np.uint8 and int(i.max()) < 4, "compressed shapes and indices")
check(np.array_equal(sdgp.decompress(v, i, "2:4"), sdgp.prune(x, "rescaled", "2:4")), "decompress(prune) = prune")
vt, it = sdgp.prune(t, "magnitude", "1:4", compressed=True)
check(isinstance(vt, torch.Tensor) and it.dtype == torch.uint8, "compressed torch tensors")
check(torch.equal(sdgp.decompress(vt, it, "1:4"), torch.from_numpy(magnitude_oracle(x, 1, 4))),
      "torch decompress(prune) = prune")
xr = rng.standard_normal((8, 6)).astype(np.float32)
vr, ir = sdgp.prune(xr, "magnitude", "2:4", axis="row", compressed=True)
check(vr.shape == (4, 6), "row axis: (rows/m*n, C) slots")
check(np.array_equal(sdgp.decompress(vr, ir, "2:4", axis="row"), magnitude_oracle(xr.T.copy(), 2, 4).T),
      "row axis: groups of m rows per channel")

# bad input: clear exceptions naming what is wrong
raises(TypeError, lambda: sdgp.prune(x.astype(np.float64)), "float64 array", "float64")
raises(TypeError, lambda: sdgp.prune(t.half()), "half tensor", "torch.float16")
raises(TypeError, lambda: sdgp.prune(t.double()), "double tensor", "float64")
# a tensor that is not on the CPU: CUDA is not available here, the meta device stands in for it
raises(TypeError, lambda: sdgp.prune(torch.empty(2, 8, device="meta")), "non-CPU tensor", "meta")
raises(TypeError, lambda: sdgp.prune(t.to_sparse()), "sparse tensor", "sparse")
raises(TypeError, lambda: sdgp.prune([1.0, 2.0, 3.0, 4.0]), "a list", "list")
raises(ValueError, lambda: sdgp.prune(np.ones((), np.float32)), "a 0-d array", "scalar")
raises(ValueError, lambda: sdgp.prune(np.ones((2, 6), np.float32)), "6 channels, m=4", "not a multiple of m=4")
raises(ValueError, lambda: sdgp.prune(x, nm="2:3"), "32 channels, m=3", "m=3")
raises(sdgp.InvalidArgumentError, lambda: sdgp.prune(x, nm="4:2"), "n > m", "4:2")
for bad in ("2-4", "2:", ":4", "0:4", "2:65", "two:four", ""):
    raises(ValueError, lambda bad=bad: sdgp.prune(x, nm=bad), "nm=%r" % bad)
raises(TypeError, lambda: sdgp.prune(x, nm=24), "nm=24 (not a string)", "'N:M'")
raises(ValueError, lambda: sdgp.prune(x, fn="magnitud"), "unknown fn", "magnitud")
raises(ValueError, lambda: sdgp.prune(x, axis="rows"), "unknown axis", "axis")
raises(ValueError, lambda: sdgp.prune(x, scope="batch"), "unknown scope", "scope")
raises(ValueError, lambda: sdgp.prune(x, dim=4), "dim out of range", "dim=4")
raises(ValueError, lambda: sdgp.prune(x, seed=-1), "negative seed", "seed")
raises(sdgp.UnsupportedError, lambda: sdgp.prune(x, fn="mvue-approx", nm="2:8"), "mvue-approx 2:8 (library: unsupported)",
       "mvue-approx")
raises(ValueError, lambda: sdgp.prune(np.ones((2, 3, 4), np.float32), axis="row"), "6 rows, m=4 on the row axis")
xn = x.copy()
xn[1, 2, 3, 4] = np.nan
raises(sdgp.NumericError, lambda: sdgp.prune(xn, "mvue", "2:4"), "NaN for mvue", "NaN")
raises(FloatingPointError, lambda: sdgp.prune(xn, "rescaled", "2:4"), "NaN for rescaled (a FloatingPointError)")
raises(TypeError, lambda: sdgp.decompress(v, i.astype(np.int32), "2:4"), "decompress: int32 index", "uint8")
bad_i = i.copy()
bad_i[0, 0, 0, 0] = 9
raises(ValueError, lambda: sdgp.decompress(v, bad_i, "2:4"), "decompress: an index >= m (library)")

# the loader: `import sdgp` stays free of torch; a wrong SDGP_LIBRARY is an ImportError naming it
env = dict(os.environ)
r = subprocess.run([sys.executable, "-c", "import sys, sdgp; print('torch' in sys.modules, sdgp.isa())"],
                   env=env, capture_output=True, text=True)
check(r.returncode == 0 and r.stdout.startswith("False"), "import sdgp does not import torch: %r %r" %
      (r.stdout, r.stderr[-300:]))
env["SDGP_LIBRARY"] = "/nonexistent/libsdgp.so"
r = subprocess.run([sys.executable, "-c", "import sdgp"], env=env, capture_output=True, text=True)
check(r.returncode == 1 and "ImportError" in r.stderr and "/nonexistent/libsdgp.so" in r.stderr,
      "a wrong SDGP_LIBRARY: ImportError naming it, got %r" % r.stderr[-300:])

# prune_kernel: the ISA's kernels for 2:4, the reference for mvue 3:4 (no vector kernel anywhere), shared masks
check(sdgp.prune_kernel("magnitude", "2:4") == sdgp.isa() and sdgp.prune_kernel("mvue", "3:4") == "ref" and
      sdgp.prune_kernel("magnitude", "2:4", mask_block=2) == "block" and sdgp.prune_kernel("rescaled", "4:4") == "copy",
      "prune_kernel: %s %s" % (sdgp.prune_kernel("magnitude", "2:4"), sdgp.prune_kernel("mvue", "3:4")))
raises(ValueError, lambda: sdgp.prune_kernel("mvue", "5:4"), "prune_kernel with n > m")

# onednn_isa: oneDNN's own ISA, which DNNL_MAX_CPU_ISA lowers (SSE4.1: every x86-64 CPU oneDNN runs on)
env = dict(os.environ, DNNL_MAX_CPU_ISA="SSE41", SDGP_ISA="ref")
r = subprocess.run([sys.executable, "-c", "import sdgp; print(sdgp.isa(), sdgp.onednn_isa())"], env=env,
                   capture_output=True, text=True)
check(r.returncode == 0 and r.stdout.split() == ["ref", "sse41"], "isa, onednn_isa under SDGP_ISA=ref "
      "DNNL_MAX_CPU_ISA=SSE41: %r %r" % (r.stdout, r.stderr[-300:]))

print("library: %s (%s, oneDNN %s)" % (sdgp.library_path, sdgp.isa(), sdgp.onednn_isa()))
finish()
