"""sdgp.prune: sdgp_prune for numpy arrays and CPU torch tensors."""
import ctypes
import sys
from typing import Any, Optional, Tuple, Union

import numpy as np

from . import _lib


def _is_torch(x):
    t = sys.modules.get("torch")  # never import torch for a numpy caller
    return t is not None and isinstance(x, t.Tensor)


def _as_float32_c(x, dim, who):
    """x -> (kind, C-contiguous float32 array, dim, nchw): channels last (nchw False), or x itself with
    the channels in dimension 1 of 3+ (nchw True: NCHW-like, read in place by the library).

    No copy when x already is float32, C-contiguous and dim is its last dimension or dimension 1."""
    if _is_torch(x):
        import torch
        if x.device.type != "cpu":
            raise TypeError("%s: the tensor is on %s; sdgp runs on the CPU: pass x.cpu()" % (who, x.device))
        if x.layout != torch.strided:
            raise TypeError("%s: %s tensors are not supported: pass a dense (strided) tensor" % (who, x.layout))
        if x.dtype != torch.float32:
            raise TypeError("%s: the tensor is %s; sdgp prunes float32 only: pass x.float()" % (who, x.dtype))
        kind, ndim = "torch", x.dim()
    elif isinstance(x, np.ndarray):
        if x.dtype != np.float32:
            raise TypeError("%s: the array is %s; sdgp prunes float32 only: pass x.astype(numpy.float32)" %
                            (who, x.dtype))
        kind, ndim = "numpy", x.ndim
    else:
        raise TypeError("%s: expected a numpy.ndarray or a torch.Tensor, got %s" % (who, type(x).__name__))
    if ndim < 1:
        raise ValueError("%s: x is a scalar; it needs at least a channel dimension" % who)
    if not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise ValueError("%s: dim=%r is not a dimension of a %d-d tensor" % (who, dim, ndim))
    dim %= ndim
    # channels in dimension 1 of a C-contiguous x of 3+ dimensions: B x C x P, which the library reads
    # in place (sdgp_prune_cfg.layout NCHW); the caller passes the layout on
    contiguous = x.is_contiguous() if kind == "torch" else x.flags["C_CONTIGUOUS"]
    if dim == 1 and ndim >= 3 and contiguous:
        return kind, (x.detach() if kind == "torch" else x), dim, True
    if kind == "torch":
        y = x.detach()
        if dim != ndim - 1:
            y = y.movedim(dim, -1)
        y = y.contiguous()
    else:
        y = np.ascontiguousarray(np.moveaxis(x, dim, -1) if dim != ndim - 1 else x)
    return kind, y, dim, False


def _ptr(kind, a):
    return a.data_ptr() if kind == "torch" else a.ctypes.data


def _empty(kind, shape, dtype):
    if kind == "torch":
        import torch
        return torch.empty(shape, dtype={"f": torch.float32, "u8": torch.uint8}[dtype])
    return np.empty(shape, dtype={"f": np.float32, "u8": np.uint8}[dtype])


def prune_kernel(fn: str = "magnitude", nm: str = "2:4", axis: str = "channel", mask_block: int = 1) -> str:
    """Which kernels sdgp.prune runs for these settings on this CPU (sdgp_prune_kernel): "avx512" or
    "avx2" (vector kernels), "ref" (the portable reference: SDGP_ISA=ref, or a shape the vector
    kernels do not take, e.g. mvue 3:4), "block" / "rowblock" (mask_block > 1), "copy" (n == m)."""
    n, m = _lib.parse_nm(nm)
    cfg = _lib.make_cfg(_lib.parse_fn(fn), n, m, _lib.parse_choice("axis", axis, _lib.AXIS), mask_block=mask_block)
    return _lib.prune_kernel(ctypes.byref(cfg)).decode()


def prune(x: Any, fn: str = "magnitude", nm: str = "2:4", axis: str = "channel", seed: int = 0,
          scope: str = "sample-channel", compressed: bool = False, dim: int = -1, step: int = 0, layer: int = 0,
          threads: int = 0, mask_block: int = 1, mask_line: int = 0) -> Union[Any, Tuple[Any, Any]]:
    """Prune x to N:M sparsity with sdgp_prune (include/sdgp/prune.h has the exact semantics).

    x: a float32 numpy array or CPU torch tensor; dimension `dim` (default: the last) holds the C
       channels, the first dimension the B samples, the dimensions between them the P positions
       (a 1-d x is one row, a 2-d x is B rows of one position). Not modified.
    fn: "random", "magnitude", "rescaled", "mvue", "mvue-approx" (or "none": a copy).
    nm: "N:M" (1 <= N <= M <= 64).
    axis: "channel" (groups of M consecutive channels of a row: SDGP's pruning of dL/dO, C % M == 0)
          or "row" (groups of M consecutive rows of a channel, rows = B*P, rows % M == 0).
    seed, step, layer: the key of the random functions (Philox): same key, same result, bitwise,
          for any thread count.
    scope: "sample-channel" or "channel", the rescaled function's L1 scope.
    compressed: False -> the pruned dense tensor, same type, shape and dimension order as x.
          True -> (values, index) in the compressed form of sdgp_nm_tensor, channels last:
          axis "channel": shapes x.shape (channel dim moved last) with C replaced by C/M*N;
          axis "row": (rows/M*N, C). index is uint8 (offset of the kept value in its group).
    threads: OpenMP team size (0: OpenMP's default of the calling thread).
    mask_block, mask_line: shared masks (axis "channel"): the positions of a sample form lines of
          mask_line positions (0: one line) cut into blocks of mask_block consecutive positions, and
          all rows of a block keep the same channels (include/sdgp/prune.h gives each function's
          block rule; mvue-approx has none). 1: a mask per row.
    No copy of x is made when it is float32, C-contiguous and dim is its last dimension, or dim is 1 of a
    3+-d x (NCHW: the library reads x and writes the dense result in place, bitwise as channels last;
    axis "channel" only).
    Raises TypeError (not an array, dtype other than float32, non-CPU tensor), ValueError (bad nm,
    fn, scope, shape: the library's message), sdgp.NumericError (NaN/Inf for mvue/rescaled).
    """
    who = "sdgp.prune"
    kind, y, dim, nchw = _as_float32_c(x, dim, who)
    n, m = _lib.parse_nm(nm)
    code = _lib.parse_fn(fn)
    ax = _lib.parse_choice("axis", axis, _lib.AXIS)
    sc = _lib.parse_choice("scope", scope, _lib.SCOPE)
    for name, v, lim in (("step", step, 2 ** 64), ("layer", layer, 2 ** 32)):
        if not isinstance(v, int) or not 0 <= v < lim:
            raise ValueError("%s: %s must be an integer in [0, %d), got %r" % (who, name, lim, v))
    cfg = _lib.make_cfg(code, n, m, ax, sc, seed, step, layer, threads, mask_block, mask_line)
    shape = tuple(y.shape)
    # nchw: x as it is, B x C x P
    if nchw and ax != 0:
        raise ValueError("%s: axis='row' needs the channels last (dim=-1); dim=1 is read as NCHW" % who)
    cfg.layout = _lib.LAYOUT["nchw" if nchw else "nhwc"]
    C = shape[1] if nchw else shape[-1]
    B = shape[0] if len(shape) >= 2 else 1
    P = 1
    for s in (shape[2:] if nchw else shape[1:-1]):
        P *= s
    err = _lib.Error()
    # the library checks shapes and n:m against the axis and names what is wrong
    _lib.check(_lib.prune_check(ctypes.byref(cfg), B, P, C, ctypes.byref(err)), err)
    if compressed:
        if nchw:  # the compressed form is channels last
            vshape = (B,) + shape[2:] + (C // m * n,)
        elif ax == 0:
            vshape = shape[:-1] + (C // m * n,)
        else:
            vshape = (B * P // m * n, C)
        values, index = _empty(kind, vshape, "f"), _empty(kind, vshape, "u8")
        t = _lib.NMTensor(ax, n, m, B * P, C, _ptr(kind, values), _ptr(kind, index))
        _lib.check(_lib.prune(ctypes.byref(cfg), _ptr(kind, y), B, P, C, None, ctypes.byref(t),
                              ctypes.byref(err)), err)
        return values, index
    out = _empty(kind, shape, "f")
    _lib.check(_lib.prune(ctypes.byref(cfg), _ptr(kind, y), B, P, C, _ptr(kind, out), None, ctypes.byref(err)), err)
    last = len(shape) - 1
    if dim != last and not nchw:  # back to x's dimension order, contiguous like x (NCHW: written so)
        out = out.movedim(-1, dim).contiguous() if kind == "torch" else np.ascontiguousarray(np.moveaxis(out, -1, dim))
    return out


def decompress(values: Any, index: Any, nm: str, axis: str = "channel", C: Optional[int] = None) -> Any:
    """The dense tensor of a compressed (values, index) pair from prune(..., compressed=True).

    axis "channel": values/index of shape (..., C/M*N) -> (..., C). axis "row": (rows/M*N, C) ->
    (rows, C). C is implied by the shapes and n:m (pass it only to have it checked)."""
    who = "sdgp.decompress"
    kind, v, _, _ = _as_float32_c(values, -1, who)
    n, m = _lib.parse_nm(nm)
    ax = _lib.parse_choice("axis", axis, _lib.AXIS)
    if _is_torch(index):
        import torch
        ok = index.dtype == torch.uint8 and index.device.type == "cpu"
        idx = index.contiguous() if ok else None
    else:
        ok = isinstance(index, np.ndarray) and index.dtype == np.uint8
        idx = np.ascontiguousarray(index) if ok else None
    if not ok or _is_torch(index) != (kind == "torch"):
        raise TypeError("%s: index must be a uint8 array of the same kind as values (as prune returns it)" % who)
    if tuple(idx.shape) != tuple(v.shape):
        raise ValueError("%s: values %s and index %s differ in shape" % (who, tuple(v.shape), tuple(idx.shape)))
    shape = tuple(v.shape)
    if ax == 0:
        if shape[-1] % n:
            raise ValueError("%s: %d slots per row is not a multiple of n=%d" % (who, shape[-1], n))
        out_shape = shape[:-1] + (shape[-1] // n * m,)
        rows = 1
        for s in shape[:-1]:
            rows *= s
        cols = out_shape[-1]
    else:
        if len(shape) != 2 or shape[0] % n:
            raise ValueError("%s: axis 'row' wants (rows/M*N, C) values with rows/M*N a multiple of n" % who)
        out_shape = (shape[0] // n * m, shape[1])
        rows, cols = out_shape
    if C is not None and cols != C:
        raise ValueError("%s: the shapes imply C=%d, not %d" % (who, cols, C))
    out = _empty(kind, out_shape, "f")
    t = _lib.NMTensor(ax, n, m, rows, cols, _ptr(kind, v), _ptr(kind, idx))
    err = _lib.Error()
    _lib.check(_lib.nm_decompress(ctypes.byref(t), _ptr(kind, out), ctypes.byref(err)), err)
    return out
