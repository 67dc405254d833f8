"""SDGP for PyTorch models: nn.Conv2d layers whose backward prunes dL/dO to N:M along the channels
and computes dL/dD on libsdgp's sparse backward-data kernel.

    import sdgp.torch
    model = sdgp.torch.convert_model(model, prune="rescaled", nm="2:4")

What a converted layer computes (SdgpConv2d, a subclass of nn.Conv2d with the same parameters):
  forward      torch's own conv2d (F.conv2d): bitwise what the plain layer computes;
  dL/dW, dL/db the dense gradients of the *unpruned* dL/dO: torch's (aten.convolution_backward), or
               with wgrad="auto" / "sdgp" (below) libsdgp's dense oneDNN kernels for dL/dW;
  dL/dD        sdgp_prune(dL/dO) (groups of m channels) x W: sdgp_sparse_bwd_* with the
               weights packed at each backward, or, where that measured slower, the same pruned
               dL/dO through torch's dense backward-data (kernel="auto", below).
Layouts: the library reads dL/dO and writes dL/dD in place in both of torch's memory formats
(sdgp_prune's and the sparse plan's NCHW layout for contiguous tensors, NHWC for channels_last), so
neither model needs a layout copy; dL/dD takes x's layout.
The pruning is keyed (seed, step, layer): `layer` is the conv's index in model.modules() order,
`step` counts the layer's backward passes, so random/MVUE masks differ per step and layer and
repeat run to run.

kernel="auto" (default): at a layer's first backward both implementations run on its real dL/dO,
three interleaved repetitions each (pruning, packing and the torch call included), and the layer
keeps the faster one, as `sdgp train --sparse-kernel auto` does. The choice is made once per layer
(other batch sizes reuse it); layer_report() shows it with the timings. "sparse" / "dense" force one.

wgrad="torch" (default): dL/dW is torch's, so a converted step differs from the plain one by SDGP
alone. wgrad="auto": at a layer's first backward dL/dW is timed both ways (torch's, and libsdgp's dense
oneDNN kernel, Winograd where it pays, on NHWC views or copies of x and dL/dO) and the layer keeps the
faster: a dense gain that has nothing to do with SDGP (torch 1.13's dL/dW of ResNet-18's 512-channel
4x4 layers runs at a seventh of its usual speed here). "sdgp" forces libsdgp's. The two differ by
float rounding (about 1e-6 relative).

Threads: each backward uses torch.get_num_threads() threads (torch.set_num_threads sets both).
Memory: per layer and geometry (up to 4 batch/image sizes) a plan holding the packed weights, and with
libsdgp's dL/dW a dense conv (its oneDNN workspace, at most 48 MB per pass); per thread, buffers that all
layers reuse, as large as the largest layer's dL/dO (pruned), its compressed form, (channels_last
models) dL/dD and (NCHW models with libsdgp's dL/dW) NHWC copies of x and dL/dO.
State dicts keep the names and tensors of the plain model (SdgpConv2d adds no parameter or
buffer), so they load into the unconverted model and back; restore_model() undoes the conversion.
Double backward (create_graph=True through a converted layer) is not supported.
"""
import copy
import ctypes
import threading
import time
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _lib

__all__ = ["convert_model", "restore_model", "layer_report", "SdgpConv2d", "SdgpConversionWarning"]

_PLAN_CACHE = 4  # geometries (batch size, image size, threads) kept per layer; the oldest is freed beyond

# What a converted layer's backward spends outside Python goes through these module attributes and
# _lib.prune / _lib.sparse_bwd_pack_strided / _lib.sparse_bwd_data: `python3 -m sdgp.bench --overhead`
# (sdgp/_overhead.py) swaps them for timed wrappers while it measures, so the normal path has no timer.
_conv_backward = torch.ops.aten.convolution_backward  # torch's dense kernels: dL/dW, dL/db, dense dL/dD


def _relayout(dst, src):
    """dst.copy_(src) between torch's layouts where the library cannot read or write one in place (a
    dL/dO of other strides, a dL/dO and x of different layouts): marshalling of the binding."""
    return dst.copy_(src)


class SdgpConversionWarning(UserWarning):
    """convert_model left some nn.Conv2d layers dense (the message lists them and why)."""


def _pair(v):
    return tuple(v) if isinstance(v, (tuple, list)) else (v, v)


def _resolve_padding(conv):
    """The symmetric padding sdgp's geometry has (one pad for both dimensions), or a reason why not."""
    kh, kw = conv.kernel_size
    p = conv.padding
    if isinstance(p, str):
        if p == "valid":
            return 0, None
        # 'same' (stride 1 only in torch) pads k-1 in total: symmetric only for odd kernels
        if (kh - 1) % 2 or (kw - 1) % 2 or kh != kw:
            return None, "padding='same' with a %dx%d kernel is not one symmetric pad" % (kh, kw)
        return (kh - 1) // 2, None
    ph, pw = _pair(p)
    if ph != pw:
        return None, "padding %s: the C API has one pad for both dimensions" % ((ph, pw),)
    return ph, None


def _ineligible(conv, m):
    """Why this conv cannot run SDGP's backward, or None."""
    if type(conv) is not nn.Conv2d:
        return "%s is a subclass of nn.Conv2d (its forward may differ)" % type(conv).__name__
    if _pair(conv.dilation) != (1, 1):
        return "dilation %s" % (tuple(conv.dilation),)
    if conv.padding_mode != "zeros":
        return "padding_mode=%r (only zero padding)" % conv.padding_mode
    sh, sw = _pair(conv.stride)
    if sh != sw:
        return "stride %s: the C API has one stride for both dimensions" % ((sh, sw),)
    pad, why = _resolve_padding(conv)
    if why:
        return why
    kh, kw = conv.kernel_size
    if pad >= kh or pad >= kw:
        return "pad=%d is not smaller than the kernel %dx%d" % (pad, kh, kw)
    if kh > 64 or kw > 64:
        return "kernel %dx%d is larger than 64" % (kh, kw)
    if conv.out_channels % m:
        return "out_channels=%d is not a multiple of m=%d" % (conv.out_channels, m)
    if (conv.out_channels // conv.groups) % m:  # a group of m channels within one conv group (the kernel's rule)
        return "groups=%d split out_channels=%d into %d per group, not a multiple of m=%d" % (
            conv.groups, conv.out_channels, conv.out_channels // conv.groups, m)
    w = conv.weight
    if w.dtype != torch.float32 or w.device.type != "cpu":
        return "weights are %s on %s (float32 CPU only)" % (w.dtype, w.device)
    return None


_scratch_local = threading.local()


def _scratch(slot, shape, dtype=torch.float32):
    """A buffer that lives across calls, one per (thread, slot), shared by all converted layers: their
    backward passes never overlap within a thread. Fresh large tensors cost page faults at every
    call (glibc returns them to the kernel on free); measured here, 2048 faults (8 MB) took 26 ms
    against 12 ms for the sparse kernel of that layer. Only for data that does not leave the call."""
    pool = _scratch_local.__dict__.setdefault("pool", {})
    numel = 1
    for d in shape:
        numel *= d
    buf = pool.get(slot)
    if buf is None or buf.dtype != dtype or buf.numel() < numel:
        buf = pool[slot] = torch.empty(numel, dtype=dtype)
    return buf[:numel].view(shape)


def _nchw_dims(t, nchw):
    """(B, C, H, W) of a tensor stored NCHW (nchw) or NHWC."""
    return tuple(t.shape) if nchw else (t.shape[0], t.shape[3], t.shape[1], t.shape[2])


def _geom(B, H, W, Cin, Cout, kh, kw, stride, pad, groups):
    """A checked sdgp_conv_geom."""
    geom, err = _lib.ConvGeom(), _lib.Error()
    _lib.check(_lib.conv_geom_init(ctypes.byref(geom), B, H, W, Cin, Cout, kh, kw, stride, pad, ctypes.byref(err)), err)
    _lib.check(_lib.conv_geom_set_groups(ctypes.byref(geom), groups, ctypes.byref(err)), err)
    return geom


class _Handle:
    """A libsdgp object owned here (self.ptr), freed by close() or when collected."""
    _destroy = None  # the name of its destroy function in _lib

    def close(self):
        destroy = getattr(_lib, self._destroy, None) if _lib is not None else None
        if self.ptr and destroy is not None:
            destroy(self.ptr)
        self.ptr = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


class _Plan(_Handle):
    """A sparse backward-data plan for one geometry (it holds the packed weights)."""
    _destroy = "sparse_bwd_destroy"

    def __init__(self, geom, n, m, threads, mask_block):
        err = _lib.Error()
        self.ptr = ctypes.c_void_p()
        _lib.check(_lib.sparse_bwd_create(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, _lib.ISA_AUTO, threads,
                                          ctypes.byref(err)), err)
        if mask_block > 1:  # dL/dO's masks are shared along its rows (_cfg): the kernel may rely on it
            _lib.check(_lib.sparse_bwd_set_mask_block(self.ptr, mask_block, ctypes.byref(err)), err)
        self.rows, self.slots = geom.B * geom.Ho * geom.Wo, geom.Cout // m * n
        self.nm = _lib.NMTensor(0, n, m, self.rows, geom.Cout, None, None)
        self.layout = _lib.LAYOUT["nhwc"]  # of dL/dD

    def set_layout(self, layout):
        if layout != self.layout:
            err = _lib.Error()
            _lib.check(_lib.sparse_bwd_set_output_layout(self.ptr, layout, ctypes.byref(err)), err)
            self.layout = layout


class _WgradPlan(_Handle):
    """libsdgp's dense convolution for one geometry: the weight gradient of wgrad="sdgp"."""
    _destroy = "conv_destroy"

    def __init__(self, geom, threads):
        err = _lib.Error()
        self.ptr = ctypes.c_void_p()
        opt = _lib.ConvOptions(_lib.CONV_AUTO, _lib.CONV_WORKSPACE_MB << 20)
        _lib.check(_lib.conv_create_opts(ctypes.byref(self.ptr), ctypes.byref(geom), 0, threads, ctypes.byref(opt),
                                         ctypes.byref(err)), err)


def _nhwc(t, slot):
    """t (B, C, H, W) as a contiguous NHWC tensor: a view of channels_last memory, else a copy into a
    per-thread scratch buffer (marshalling of the binding)."""
    v = t.permute(0, 2, 3, 1)
    if v.is_contiguous():
        return v
    return _relayout(_scratch(slot, tuple(v.shape)), v)


class _LayerState:
    """Per converted layer: configuration, the kernel choice, plans per geometry, the step counter."""

    def __init__(self, name, layer, fn, n, m, scope, seed, kernel, stride, pad, mask_block=1, groups=1,
                 wgrad="torch"):
        self.name, self.layer, self.fn, self.n, self.m = name, layer, fn, n, m
        self.wgrad = None if wgrad == "auto" else wgrad  # "torch" | "sdgp"; None: measure at the first backward
        self.wgrad_times_ms = None  # {"torch": ms, "sdgp": ms} of that measurement
        self.wplans = {}
        self.mask_block, self.groups = mask_block, groups
        self.scope, self.seed, self.kernel, self.stride, self.pad = scope, seed, kernel, stride, pad
        self.fastest = kernel == "fastest"  # the measurement also times the unpruned dL/dD ("plain")
        self.choice = None if kernel in ("auto", "fastest") else kernel  # "sparse" | "dense" | "plain"
        self.times_ms = None  # {"sparse": ms, "dense": ms} of the auto measurement
        self.step = 0
        self.plans = {}
        self.lock = threading.Lock()  # a plan's buffers serve one call at a time

    # copies (deepcopy of the model, pickling) get the configuration, never the C plans
    def __deepcopy__(self, memo):
        new = copy.copy(self)
        new.plans, new.wplans, new.lock = {}, {}, threading.Lock()
        return new

    def __getstate__(self):
        d = dict(self.__dict__)
        d["plans"], d["wplans"], d["lock"] = {}, {}, None
        return d

    def __setstate__(self, d):
        d.setdefault("mask_block", 1)  # pickled before shared masks existed
        d.setdefault("groups", 1)  # pickled before grouped convs
        d.setdefault("wgrad", "torch")  # pickled before wgrad
        d.setdefault("wgrad_times_ms", None)
        d.setdefault("wplans", {})
        d.setdefault("fastest", False)
        self.__dict__.update(d)
        self.lock = threading.Lock()

    def close(self):
        for p in list(self.plans.values()) + list(self.wplans.values()):
            p.close()
        self.plans, self.wplans = {}, {}

    def _plan(self, B, H, W, Cin, Cout, kh, kw, threads):
        key = (B, H, W, Cin, Cout, kh, kw, threads)
        p = self.plans.pop(key, None)
        if p is None:
            p = _Plan(_geom(B, H, W, Cin, Cout, kh, kw, self.stride, self.pad, self.groups), self.n, self.m, threads,
                      self.mask_block)
            while len(self.plans) >= _PLAN_CACHE:
                self.plans.pop(next(iter(self.plans))).close()
        self.plans[key] = p  # most recently used last
        return p

    def _cfg(self, threads, Wo, nchw):
        # shared masks: blocks of mask_block pixels along each row of dL/dO (as `sdgp train`)
        cfg = _lib.make_cfg(self.fn, self.n, self.m, 0, self.scope, self.seed, self.step, self.layer, threads,
                            self.mask_block, Wo)
        cfg.layout = _lib.LAYOUT["nchw" if nchw else "nhwc"]
        return cfg

    def _sparse(self, go, nchw, x_shape, x_cl, w, threads):
        """go: dL/dO as the library reads it, NCHW (nchw) or NHWC, contiguous."""
        B, Cout, Ho, Wo = _nchw_dims(go, nchw)
        Cin, H, W = x_shape[1], x_shape[2], x_shape[3]
        p = self._plan(B, H, W, Cin, Cout, w.shape[2], w.shape[3], threads)
        values = _scratch("values", (p.rows * p.slots,))
        index = _scratch("index", (p.rows * p.slots,), torch.uint8)
        p.nm.values, p.nm.index = values.data_ptr(), index.data_ptr()
        cfg, err = self._cfg(threads, Wo, nchw), _lib.Error()
        _lib.check(_lib.prune(ctypes.byref(cfg), go.data_ptr(), B, Ho * Wo, Cout, None, ctypes.byref(p.nm),
                              ctypes.byref(err)), err)
        # the weights in place, in any layout (channels_last ones too: no copy)
        strides = (ctypes.c_int64 * 4)(*w.stride())
        _lib.check(_lib.sparse_bwd_pack_strided(p.ptr, w.data_ptr(), strides, ctypes.byref(err)), err)
        # the gradient takes x's layout: elementwise backward ops (ReLU, add, BatchNorm) on tensors of
        # mixed layouts ran up to 10x slower, far more than the transpose costs (ResNet-18, torch 1.13);
        # the plan writes either (an NCHW dL/dD is transposed per work unit while in cache)
        p.set_layout(_lib.LAYOUT["nhwc" if x_cl else "nchw"])
        dD = torch.empty((B, H, W, Cin) if x_cl else (B, Cin, H, W), dtype=torch.float32)  # returned: its own
        _lib.check(_lib.sparse_bwd_data(p.ptr, dD.data_ptr(), ctypes.byref(p.nm), ctypes.byref(err)), err)
        return dD.permute(0, 3, 1, 2) if x_cl else dD  # channels_last: the NCHW view of the NHWC result

    def _dense(self, go, nchw, x, w, threads):
        B, Cout, Ho, Wo = _nchw_dims(go, nchw)
        pruned = _scratch("pruned", go.shape)  # dense output in go's layout
        cfg, err = self._cfg(threads, Wo, nchw), _lib.Error()
        _lib.check(_lib.prune(ctypes.byref(cfg), go.data_ptr(), B, Ho * Wo, Cout, pruned.data_ptr(), None,
                              ctypes.byref(err)), err)
        if not nchw:
            pruned = pruned.permute(0, 3, 1, 2)
        if nchw == self._is_cl(x):  # torch's kernel on a dL/dO of x's other layout reorders into fresh memory
            to = _scratch("pruned_x", (B, Ho, Wo, Cout)).permute(0, 3, 1, 2) if not nchw else \
                _scratch("pruned_x", (B, Cout, Ho, Wo))
            pruned = _relayout(to, pruned)
        return self.torch_grads(pruned, x, w, (True, False, False))[0]

    def torch_grads(self, go, x, w, mask):
        """torch's (dL/dD, dL/dW, dL/db) of go for this layer, each only where mask says (else None)."""
        return _conv_backward(go, x, w, [w.shape[0]] if mask[2] else None, (self.stride,) * 2, (self.pad,) * 2, (1, 1),
                              False, (0, 0), self.groups, mask)

    @staticmethod
    def _is_cl(x):
        return not x.is_contiguous() and x.is_contiguous(memory_format=torch.channels_last)

    def weight_grad(self, go, x, w, need_b):
        """(dL/dW, dL/db or None) of the unpruned dL/dO, torch's or libsdgp's (wgrad)."""
        with self.lock:
            if self.wgrad is None:  # first backward: both, interleaved; the faster stays
                best, out = {"torch": float("inf"), "sdgp": float("inf")}, {}
                for _ in range(3):
                    for k in best:
                        t0 = time.perf_counter()
                        out[k] = self._wgrad_torch(go, x, w, need_b) if k == "torch" else self._wgrad_sdgp(go, x, w,
                                                                                                           need_b)
                        best[k] = min(best[k], time.perf_counter() - t0)
                self.wgrad = "sdgp" if best["sdgp"] < best["torch"] else "torch"
                self.wgrad_times_ms = {k: 1e3 * v for k, v in best.items()}
                if self.wgrad == "torch":
                    for p in self.wplans.values():
                        p.close()
                    self.wplans = {}
                return out[self.wgrad]
            if self.wgrad == "sdgp":
                return self._wgrad_sdgp(go, x, w, need_b)
        return self._wgrad_torch(go, x, w, need_b)

    def _wgrad_torch(self, go, x, w, need_b):
        return self.torch_grads(go, x, w, (False, True, need_b))[1:]

    def _wgrad_sdgp(self, go, x, w, need_b):
        B, Cin, H, W = x.shape
        threads = torch.get_num_threads()
        key = (B, H, W, Cin, w.shape[0], w.shape[2], w.shape[3], threads)
        p = self.wplans.get(key)
        if p is None:
            while len(self.wplans) >= _PLAN_CACHE:
                self.wplans.pop(next(iter(self.wplans))).close()
            p = self.wplans[key] = _WgradPlan(_geom(B, H, W, Cin, w.shape[0], w.shape[2], w.shape[3], self.stride,
                                                    self.pad, self.groups), threads)
        xn, gon = _nhwc(x, "wgrad_x"), _nhwc(go, "wgrad_dO")
        gw, err = torch.empty(w.shape, dtype=torch.float32), _lib.Error()  # OIHW, as torch's weights
        _lib.check(_lib.conv_backward_weights(p.ptr, gw.data_ptr(), None, xn.data_ptr(), gon.data_ptr(),
                                              ctypes.byref(err)), err)
        return gw, (go.sum((0, 2, 3)) if need_b else None)

    def data_grad(self, go, x, w):
        """dL/dD of the pruned dL/dO (go: NCHW, any strides)."""
        threads = torch.get_num_threads()
        # the library reads NCHW (torch's default) and channels_last dL/dO in place
        nchw = go.is_contiguous()
        g = go if nchw else go.permute(0, 2, 3, 1)
        if not g.is_contiguous():  # other strides: an NCHW copy
            g, nchw = _relayout(_scratch("dO", go.shape), go), True
        with self.lock:
            try:
                if self.choice is None:
                    return self._measure(g, nchw, x, w, threads)
                if self.choice == "sparse":
                    return self._sparse(g, nchw, x.shape, self._is_cl(x), w, threads)
                if self.choice == "plain":
                    return self._plain(go, x, w)
                return self._dense(g, nchw, x, w, threads)
            finally:
                self.step += 1

    def _plain(self, go, x, w):
        """torch's dL/dD of the unpruned dL/dO: the layer without SDGP (kernel "plain", "fastest")."""
        return self.torch_grads(go, x, w, (True, False, False))[0]

    def _measure(self, go, nchw, x, w, threads):
        kinds = ("sparse", "dense", "plain") if self.fastest else ("sparse", "dense")
        best, out = {k: float("inf") for k in kinds}, {}
        for _ in range(3):  # interleaved: a noisy neighbour slows all alike
            for k in kinds:
                t0 = time.perf_counter()
                if k == "sparse":
                    out[k] = self._sparse(go, nchw, x.shape, self._is_cl(x), w, threads)
                elif k == "dense":
                    out[k] = self._dense(go, nchw, x, w, threads)
                else:
                    out[k] = self._plain(go if nchw else go.permute(0, 3, 1, 2), x, w)
                best[k] = min(best[k], time.perf_counter() - t0)
        self.choice = min(kinds, key=lambda k: best[k])  # ties: the first, sparse
        self.times_ms = {k: 1e3 * v for k, v in best.items()}
        if self.choice != "sparse":
            self.close()  # its plan is not needed any more
        return out[self.choice]


class _SdgpConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, conv):
        ctx.save_for_backward(x, weight)
        ctx.state = conv._sdgp
        ctx.has_bias = bias is not None
        return F.conv2d(x, weight, bias, conv.stride, conv.padding, conv.dilation, conv.groups)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, go):
        x, w = ctx.saved_tensors
        st = ctx.state
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        gx = gw = gb = None
        if st.choice == "plain" and need_x and (st.wgrad == "torch" or not need_w):  # no SDGP here: one torch call
            with st.lock:
                st.step += 1
            return tuple(st.torch_grads(go, x, w, (True, need_w, need_b and ctx.has_bias))) + (None,)
        if need_w:  # dense dL/dW (and dL/db) of the unpruned dL/dO, torch's or libsdgp's
            gw, gb = st.weight_grad(go, x, w, need_b and ctx.has_bias)
        elif need_b and ctx.has_bias:
            gb = st.torch_grads(go, x, w, (False, False, True))[2]
        if need_x:
            gx = st.data_grad(go, x, w)
        return gx, gw, gb, None


class SdgpConv2d(nn.Conv2d):
    """nn.Conv2d with SDGP's backward (module docstring). Made by convert_model, not constructed."""

    def forward(self, x):
        if not (torch.is_grad_enabled() and x.requires_grad):
            return self._conv_forward(x, self.weight, self.bias)  # no data gradient: plain torch
        if x.dtype != torch.float32 or x.device.type != "cpu" or self.weight.dtype != torch.float32 or \
                self.weight.device.type != "cpu":
            raise TypeError("sdgp layer %s: input %s on %s, weights %s on %s; SDGP's backward needs float32 CPU "
                            "tensors (restore_model() gives back plain nn.Conv2d layers)" %
                            (self._sdgp.name or "(model)", x.dtype, x.device, self.weight.dtype, self.weight.device))
        return _SdgpConvFn.apply(x, self.weight, self.bias, self)

    def extra_repr(self):
        s = self._sdgp
        return "%s, sdgp=%s %d:%d%s kernel=%s" % (
            super().extra_repr(), _lib.prune_fn_name(s.fn).decode(), s.n, s.m,
            " mask_block=%d" % s.mask_block if s.mask_block > 1 else "", s.choice or "auto (not measured yet)")


def convert_model(model, prune="rescaled", nm="2:4", first_layer=False, strict=False, kernel="auto",
                  scope="sample-channel", seed=0, mask_block=1, wgrad="torch"):
    """Convert, in place, each eligible nn.Conv2d of model into an SdgpConv2d; return the model.

    prune: "random", "magnitude", "rescaled", "mvue", "mvue-approx" (sdgp.prune's functions).
    nm: "N:M"; a layer needs out_channels % M == 0 (grouped: out_channels / groups % M == 0).
    first_layer: also convert the first nn.Conv2d (in model.modules() order). Off by default, as in
        the paper and `sdgp train`: its input is normally the image, which needs no data gradient.
    strict: raise ValueError if any other nn.Conv2d cannot be converted; otherwise those layers stay
        plain and an SdgpConversionWarning lists them with the reason (layer_report() too).
    kernel: "auto" (measure at the first backward, keep the faster), "sparse" or "dense"; "fastest" also
        times the layer without pruning (torch's dL/dD of the exact dL/dO) and keeps that where it is the
        fastest, as `sdgp train --sparse-kernel fastest`: never slower than plain torch, and such a layer
        is not pruned (layer_report: kernel "plain", pruned False); "plain" forces that.
    wgrad: who computes dL/dW: "torch" (default), "sdgp" (libsdgp's dense oneDNN kernels) or "auto"
        (per layer the faster, measured at the first backward); see the module docstring.
    scope, seed: the rescaled function's scope; the seed of the random functions.
    mask_block: P > 1 makes P neighbouring pixels along a row of dL/dO share one N:M mask (sdgp
        train's --mask-block; the sparse kernel of stride-1 layers loads each kept weight row once
        per block); every function but mvue-approx has a block form. 1: a mask per pixel (the paper).
    Eligible: exactly nn.Conv2d, groups whose output channels M divides, dilation 1, zero padding, the
    same stride and pad in both dimensions (pad < kernel), kernels up to 64x64 (rectangular too),
    float32 CPU weights.
    """
    if not isinstance(model, nn.Module):
        raise TypeError("sdgp.torch.convert_model: expected an nn.Module, got %s" % type(model).__name__)
    n, m = _lib.parse_nm(nm)
    fn = _lib.parse_fn(prune)
    if fn == 0 and n != m:
        raise ValueError("sdgp.torch.convert_model: prune='none' keeps dL/dO dense: use the plain model")
    sc = _lib.parse_choice("scope", scope, _lib.SCOPE)
    _lib.parse_choice("kernel", kernel, {"auto": 0, "sparse": 1, "dense": 2, "fastest": 3, "plain": 4})
    _lib.parse_choice("wgrad", wgrad, {"torch": 0, "sdgp": 1, "auto": 2})
    _lib.make_cfg(fn, n, m, seed=seed, mask_block=mask_block)  # validates seed and mask_block
    if mask_block > 1 and _lib.prune_fn_name(fn).decode() == "mvue-approx":
        raise ValueError("sdgp.torch.convert_model: mvue-approx has no shared-mask form (mask_block=%d); use mvue"
                         % mask_block)
    convs = [(name, mod) for name, mod in model.named_modules() if isinstance(mod, nn.Conv2d)]
    skipped = []
    todo = []
    for i, (name, conv) in enumerate(convs):
        if isinstance(conv, SdgpConv2d):
            raise ValueError("sdgp.torch.convert_model: layer %s is converted already" % (name or "(model)"))
        if i == 0 and not first_layer:
            continue
        why = _ineligible(conv, m)
        if why:
            skipped.append((name or "(model)", why))
        else:
            todo.append((i, name, conv))
    if skipped:
        msg = "sdgp.torch.convert_model: %d conv layer(s) cannot be converted (plain torch): %s" % (
            len(skipped), "; ".join("%s: %s" % s for s in skipped))
        if strict:
            raise ValueError(msg)
        warnings.warn(msg, SdgpConversionWarning, stacklevel=2)
    for i, name, conv in todo:
        pad, _ = _resolve_padding(conv)
        conv._sdgp = _LayerState(name, i, fn, n, m, sc, seed, kernel, _pair(conv.stride)[0], pad, mask_block,
                                  conv.groups, wgrad)
        # the class swap keeps the object: its parameters (and an optimizer's references to
        # them), hooks and state-dict names stay exactly the plain layer's
        conv.__class__ = SdgpConv2d
    return model


def restore_model(model):
    """Turn every SdgpConv2d of model back into a plain nn.Conv2d (in place); return the model."""
    for mod in model.modules():
        if isinstance(mod, SdgpConv2d):
            mod._sdgp.close()
            del mod._sdgp
            mod.__class__ = nn.Conv2d
    return model


def layer_report(model):
    """One dict per nn.Conv2d of model: name, converted, and for converted layers the n:m, the pruning
    function, the kernel choice and the auto measurement (ms); for the others the reason."""
    rows = []
    first = True
    ms = [mod._sdgp.m for mod in model.modules() if isinstance(mod, SdgpConv2d)]
    m = ms[0] if ms else 1
    for name, mod in model.named_modules():
        if not isinstance(mod, nn.Conv2d):
            continue
        r = {"name": name or "(model)", "converted": isinstance(mod, SdgpConv2d)}
        if r["converted"]:
            s = mod._sdgp
            r.update(nm="%d:%d" % (s.n, s.m), prune=_lib.prune_fn_name(s.fn).decode(),
                     kernel=s.choice or ("fastest" if s.fastest else "auto"), pruned=s.choice != "plain",
                     times_ms=s.times_ms, steps=s.step, mask_block=s.mask_block, wgrad=s.wgrad or "auto",
                     wgrad_times_ms=s.wgrad_times_ms)
        else:
            why = _ineligible(mod, m)
            r["reason"] = why or ("first layer (first_layer=False)" if first else "not converted")
        first = False
        rows.append(r)
    return rows
