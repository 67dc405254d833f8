"""libsdgp's sparse-weight kernels behind a SparseWeights layer (sdgp.torch's docstring, "SparseWeights").

The forward Y = conv(X, W~) of a layer whose W~ has a mask libsdgp can skip on runs one of:
  "dense"   torch's F.conv2d on W~ (every layer can);
  "direct"  sdgp_sparse_fwd_create: block masks (groups "block16" / "block32"), the product over each
            block's kept input channels only (n/m of the multiplies);
  "wino"    sdgp_sparse_fwd_create_wino: the same inside a Winograd F(4x4, 3x3) forward (3x3 stride-1
            layers, padding <= 2; torch's own 3x3 products are often Winograd-class, so this is the one
            that can beat them on wide layers);
  "cout"    sdgp_sparse_fwd_create_cout: masks along output channels (groups "cout"; stride 1 or 2).
Groups "tap" and "kernel" have no sparse kernel (their masks change along the reduction at every tap):
such layers always run "dense". Without SDGP on the layer, its data gradient dL/dX = W~^T dL/dY can
also run sparse: "wdata" (sdgp_sparse_wdata_*, block masks, 3x3 stride 1, Winograd) against torch's.

Why measured per layer (kernel="auto", as `sdgp train --sparse-kernel auto` for the forward): the sparse
kernels skip n/m of the multiplies but reach a lower fraction of the FMA peak than torch's oneDNN
kernels (src/kernels/spfwd.md: 2:4 block32 from 0.49x to 1.7x of oneDNN per layer), so the winner
depends on the layer's shape and the machine. At the layer's first forward (with or without
gradients) each candidate runs three interleaved times on the real x, packing W~ and the layout
copies included, and the layer keeps the fastest (agreed over torch.distributed ranks, as the data
gradient's choice); the data gradient's choice likewise at its first backward. "on" takes the kernel
with the fewest multiplies the layer has (cout, else wino, else direct; wdata where supported), "off"
torch's everywhere.

Layouts: the kernels read X and write Y as NHWC: a channels_last x is read in place and Y returned as
the channels_last view of the NHWC result; an NCHW x is transposed into a per-thread buffer and Y
transposed back (the auto measurement includes both copies). W~ is packed at every forward (it
changes with W at each step), from its OIHW form. The products are float32 (under autocast the
layer runs torch's bfloat16 convolution instead) and differ from torch's by rounding (about 1e-6
relative for direct and cout, more for Winograd's transforms: about 1e-5).
"""
import ctypes
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from . import _lib
from .torch import _Handle, _geom, _nhwc, _relayout, _scratch, _time_each

_BLOCK = {"block16": 16, "block32": 32}
_WINO_TILE = 4  # F(4x4, 3x3): the C model's choice (2.25x fewer multiplies than direct on top of n/m)
_PLAN_CACHE = 4  # geometries per layer and kernel kept (batch size, image size, threads)


class _FwdPlan(_Handle):
    """One sdgp_sparse_fwd plan (a kernel and a geometry); it holds the packed W~."""
    _destroy = "sparse_fwd_destroy"

    def __init__(self, impl: str, geom: _lib.ConvGeom, n: int, m: int, block: int, threads: int) -> None:
        err = _lib.Error()
        self.ptr = ctypes.c_void_p()
        if impl == "cout":
            st = _lib.sparse_fwd_create_cout(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, _lib.ISA_AUTO, threads,
                                             ctypes.byref(err))
        elif impl == "wino":
            st = _lib.sparse_fwd_create_wino(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, block, _WINO_TILE,
                                             _lib.ISA_AUTO, threads, ctypes.byref(err))
        else:
            st = _lib.sparse_fwd_create(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, block, _lib.ISA_AUTO, threads,
                                        ctypes.byref(err))
        _lib.check(st, err)
        self.ws_bytes = int(_lib.sparse_fwd_workspace_bytes(self.ptr))
        self.out_hw = (geom.Ho, geom.Wo)


class _WdataPlan(_Handle):
    """One sdgp_sparse_wdata plan: dL/dX of a block-masked 3x3 stride-1 layer by Winograd."""
    _destroy = "sparse_wdata_destroy"

    def __init__(self, geom: _lib.ConvGeom, n: int, m: int, block: int, threads: int) -> None:
        err = _lib.Error()
        self.ptr = ctypes.c_void_p()
        _lib.check(_lib.sparse_wdata_create(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, block, _WINO_TILE,
                                            _lib.ISA_AUTO, threads, ctypes.byref(err)), err)


def _is_cl(x: torch.Tensor) -> bool:
    return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)


def _oihw(w: torch.Tensor) -> torch.Tensor:
    return w if w.is_contiguous() else w.contiguous()


class SparseFwdState:
    """Per SparseWeights layer: the forward kernel ("auto" / "on" / "off"), its choice and timings, the
    data gradient's (wdata) likewise, and the plans per geometry. Copies and pickles keep the choices,
    never the C plans."""

    def __init__(self, kernel: str, groups: str, n: int, m: int, stride: int, pad: Optional[int], groups_conv: int,
                 kernel_size: Tuple[int, int], geometry_why: Optional[str] = None) -> None:
        self.kernel, self.groups, self.n, self.m = kernel, groups, n, m
        self.stride, self.pad, self.conv_groups, self.kernel_size = stride, pad, groups_conv, kernel_size
        self.choice: Optional[str] = "dense" if kernel == "off" else None  # None: decided at the first forward
        self.times_ms: Optional[Dict[str, float]] = None
        self.reason: Optional[str] = None  # why no sparse forward runs here (report)
        self.wdata: Optional[str] = "dense" if kernel == "off" else None  # data gradient: "wdata" | "dense"
        self.wdata_times_ms: Optional[Dict[str, float]] = None
        self.plans: Dict[tuple, _FwdPlan] = {}
        self.wplans: Dict[tuple, _WdataPlan] = {}
        if groups not in _BLOCK and groups != "cout":
            self.choice, self.wdata = "dense", "dense"
            self.reason = "groups=%r has no sparse forward kernel (block16, block32 or cout)" % groups
        elif groups_conv != 1:
            self.choice, self.wdata = "dense", "dense"
            self.reason = "grouped convolution (groups=%d): the sparse forward kernels take groups=1" % groups_conv
        elif geometry_why:  # torch's geometry that libsdgp's sdgp_conv_geom cannot describe
            self.choice, self.wdata = "dense", "dense"
            self.reason = geometry_why
        if self.choice == "dense" or groups == "cout" or kernel_size != (3, 3) or stride != 1 or pad > 2:
            self.wdata = "dense"  # sdgp_sparse_wdata: block masks, 3x3 stride 1, padding <= 2

    def __deepcopy__(self, memo: Dict[int, Any]) -> "SparseFwdState":
        new = SparseFwdState.__new__(SparseFwdState)
        new.__dict__.update(self.__dict__)
        new.plans, new.wplans = {}, {}
        return new

    def __getstate__(self) -> Dict[str, Any]:
        d = dict(self.__dict__)
        d["plans"], d["wplans"] = {}, {}
        return d

    def close(self) -> None:
        for p in list(self.plans.values()) + list(self.wplans.values()):
            p.close()
        self.plans, self.wplans = {}, {}

    # ---- the forward ----
    def _candidates(self) -> List[str]:
        """The sparse kernels this layer's masks and geometry have, fewest multiplies first."""
        if self.groups == "cout":
            return ["cout"]
        kh, kw = self.kernel_size
        if kh == 3 and kw == 3 and self.stride == 1 and self.pad <= 2:
            return ["wino", "direct"]
        return ["direct"]

    def _plan(self, impl: str, B: int, H: int, W: int, Cin: int, Cout: int, threads: int) -> _FwdPlan:
        kh, kw = self.kernel_size
        key = (impl, B, H, W, Cin, Cout, threads)
        p = self.plans.pop(key, None)
        if p is None:
            geom = _geom(B, H, W, Cin, Cout, kh, kw, self.stride, self.pad, 1)
            p = _FwdPlan(impl, geom, self.n, self.m, _BLOCK.get(self.groups, 0), threads)
            while len(self.plans) >= _PLAN_CACHE * 3:
                self.plans.pop(next(iter(self.plans))).close()
        self.plans[key] = p  # most recently used last
        return p

    def _run_sparse(self, impl: str, x: torch.Tensor, wt: torch.Tensor, bias: Optional[torch.Tensor],
                    oihw: Optional[torch.Tensor] = None) -> torch.Tensor:
        B, Cin, H, W = x.shape
        Cout = wt.shape[0]
        p = self._plan(impl, B, H, W, Cin, Cout, torch.get_num_threads())
        err, wc = _lib.Error(), oihw if oihw is not None else _oihw(wt)  # referenced until the pack returns
        _lib.check(_lib.sparse_fwd_pack(p.ptr, wc.data_ptr(), ctypes.byref(err)), err)
        if p.ws_bytes:  # the cout form's transposes: one per-thread buffer that all layers share
            ws = _scratch("fwd_ws", (p.ws_bytes + 64,), torch.uint8)
            off = (-ws.data_ptr()) % 64
            _lib.check(_lib.sparse_fwd_set_workspace(p.ptr, ws.data_ptr() + off, p.ws_bytes, ctypes.byref(err)), err)
        xn = _nhwc(x, "fwd_x")
        Ho, Wo = p.out_hw
        cl = _is_cl(x)
        y = torch.empty((B, Ho, Wo, Cout), dtype=torch.float32) if cl else _scratch("fwd_y", (B, Ho, Wo, Cout))
        _lib.check(_lib.sparse_fwd_run(p.ptr, y.data_ptr(), xn.data_ptr(), ctypes.byref(err)), err)
        y = y.permute(0, 3, 1, 2)
        if not cl:  # NCHW model: its own NCHW tensor (mixed layouts slow torch's elementwise ops)
            y = _relayout(torch.empty((B, Cout, Ho, Wo), dtype=torch.float32), y)
        if bias is not None:
            y.add_(bias.view(1, -1, 1, 1))
        return y

    def _run(self, impl: str, x: torch.Tensor, wt: torch.Tensor, bias: Optional[torch.Tensor], dense,
             oihw: Optional[torch.Tensor] = None) -> torch.Tensor:
        return dense(x, wt, bias) if impl == "dense" else self._run_sparse(impl, x, wt, bias, oihw)

    def uses_sparse(self) -> bool:
        """Whether the forward may run a libsdgp kernel (chosen, or still to be measured)."""
        return self.choice != "dense"

    def forward(self, x: torch.Tensor, wt: torch.Tensor, bias: Optional[torch.Tensor], dense,
                oihw: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Y = conv(x, W~) (+ bias) by the chosen kernel; dense(x, w, b) is torch's product. x, W~ float32;
        oihw: W~ as a contiguous OIHW tensor when the caller has one (channels_last weights: no copy)."""
        if self.choice is None:
            return self._choose(x, wt, bias, dense, oihw)
        return self._run(self.choice, x, wt, bias, dense, oihw)

    def _choose(self, x, wt, bias, dense, oihw=None) -> torch.Tensor:
        """The first forward: the kernel to keep (measured under "auto"), and its output."""
        kinds = []
        for impl in self._candidates():
            try:  # a geometry a kernel refuses (the library says why) leaves that kernel out
                B, Cin, H, W = x.shape
                self._plan(impl, B, H, W, Cin, wt.shape[0], torch.get_num_threads())
                kinds.append(impl)
            except (_lib.UnsupportedError, _lib.InvalidArgumentError) as e:
                self.reason = "%s: %s" % (impl, e)
        if self.kernel == "on":
            kinds = kinds[:1]
            self.choice = kinds[0] if kinds else "dense"
        else:
            kinds = ["dense"] + kinds
            best, out = _time_each(kinds, lambda k: self._run(k, x, wt, bias, dense, oihw))
            self.times_ms = {k: 1e3 * v for k, v in best.items()}
            self.choice = min(kinds, key=lambda k: best[k])
            self._keep_plans()
            return out[self.choice]
        self._keep_plans()
        return self._run(self.choice, x, wt, bias, dense, oihw)

    def _keep_plans(self) -> None:
        """Frees the plans of the kernels not chosen (a Winograd plan holds 4x the kept weights)."""
        for key in [k for k in self.plans if k[0] != self.choice]:
            self.plans.pop(key).close()

    # ---- the data gradient of a layer without SDGP ----
    def wdata_grad(self, go: torch.Tensor, x: torch.Tensor, wt: torch.Tensor, torch_dx) -> torch.Tensor:
        """dL/dX = W~^T dL/dY: sdgp_sparse_wdata or torch_dx() (torch's), by the layer's choice."""
        if self.wdata == "dense":
            return torch_dx()
        if self.wdata == "wdata":
            return self._wdata(go, x, wt)
        kinds = ("wdata",) if self.kernel == "on" else ("dense", "wdata")
        try:
            best, out = _time_each(kinds, lambda k: torch_dx() if k == "dense" else self._wdata(go, x, wt))
        except (_lib.UnsupportedError, _lib.InvalidArgumentError) as e:
            self.wdata = "dense"
            self.reason = (self.reason + "; " if self.reason else "") + "wdata: %s" % e
            return torch_dx()
        self.wdata_times_ms = {k: 1e3 * v for k, v in best.items()}
        self.wdata = min(kinds, key=lambda k: best[k])
        if self.wdata != "wdata":
            for p in self.wplans.values():
                p.close()
            self.wplans = {}
        return out[self.wdata]

    def _wdata(self, go: torch.Tensor, x: torch.Tensor, wt: torch.Tensor) -> torch.Tensor:
        B, Cin, H, W = x.shape
        Cout = wt.shape[0]
        threads = torch.get_num_threads()
        key = (B, H, W, Cin, Cout, threads)
        p = self.wplans.get(key)
        if p is None:
            while len(self.wplans) >= _PLAN_CACHE:
                self.wplans.pop(next(iter(self.wplans))).close()
            p = self.wplans[key] = _WdataPlan(_geom(B, H, W, Cin, Cout, 3, 3, self.stride, self.pad, 1), self.n,
                                              self.m, _BLOCK[self.groups], threads)
        err, wc = _lib.Error(), _oihw(wt)  # wc stays referenced until the pack returns
        _lib.check(_lib.sparse_wdata_pack(p.ptr, wc.data_ptr(), ctypes.byref(err)), err)
        gn = _nhwc(go, "wdata_dy")
        cl = _is_cl(x)
        dx = torch.empty((B, H, W, Cin), dtype=torch.float32) if cl else _scratch("wdata_dx", (B, H, W, Cin))
        _lib.check(_lib.sparse_wdata_run(p.ptr, dx.data_ptr(), gn.data_ptr(), ctypes.byref(err)), err)
        dx = dx.permute(0, 3, 1, 2)
        if not cl:
            dx = _relayout(torch.empty((B, Cin, H, W), dtype=torch.float32), dx)
        return dx

    def report(self, sdgp: bool) -> Dict[str, Any]:
        """layer_report's fields of the sparse forward and the data gradient (sdgp: the layer's data
        gradient is SDGP's, so wdata does not apply)."""
        r: Dict[str, Any] = {"fwd_kernel": self.choice or self.kernel, "fwd_times_ms": self.times_ms,
                             "weights_dgrad": "sdgp" if sdgp else self.wdata or self.kernel,
                             "weights_dgrad_times_ms": None if sdgp else self.wdata_times_ms}
        if self.reason:
            r["fwd_reason"] = self.reason
        return r
