"""N:M sparsity for PyTorch models' nn.Conv2d and nn.Linear layers, on libsdgp: SDGP (the data gradient), MVUE
(the weight gradient) and S-STE / SR-STE (sparse weights in the forward), one call for any of them.

    import sdgp.torch as st
    report = st.sparsify_(model, st.SDGP(prune="rescaled", nm="2:4"))            # SDGP alone
    report = st.sparsify_(model, [st.SDGP(), st.MVUEWeightGrad(nm="2:4"),         # all three
                                  st.SparseWeights(method="sste", nm="2:4", groups="tap")])
    report = st.sparsify_(model, {"layer1.0.conv1": st.SDGP(nm="1:4"), "layer2.0.conv1": [st.SDGP(), ...]})
    report = st.sparsify_(model, st.SDGP(), filter_fn=lambda mod, name: not name.startswith("layer4"))
    print(report)                   # what was converted with what, and why not elsewhere
    st.restore_model(model)         # plain nn.Conv2d layers again (dense weights W)
    plain = st.export_model(model)  # a plain copy whose weights are W~ (what the sparse forward used)
    model = st.convert_model(model, prune="rescaled", nm="2:4")   # the SDGP shorthand

sparsify_ converts in place (a class swap: parameters, hooks, optimizer references and state-dict
names stay the plain layer's). Without a dict, every nn.Conv2d that filter_fn (default: all) accepts
gets the config, but the first conv only where the config says first_layer=True; a layer a method
cannot take (SDGP's geometry rules, channels that M does not divide) keeps the others and the report
(and a SdgpConversionWarning; strict=True: an exception) says why. With a dict, the named layers get
their own configs and a layer a config cannot take is an error naming it.

nn.Linear (all three methods): SDGP(modules=("conv", "linear")) (or ("linear",)) also converts nn.Linear
layers into SdgpLinear (the same class swap; the default, ("conv",), leaves them alone and out of the report):
  forward      F.linear, bitwise the plain layer's (SparseWeights: below);
  dL/dW, dL/db torch's, of the unpruned dL/dY (wgrad does not apply); with MVUEWeightGrad (in the
               same list, or a dict naming the layer, alone too) dL/dW of dL/dY pruned along the tokens
               (the conv's rows), on sdgp_sparse_wgrad or torch's product (its kernel rule), the exact
               dL/dW in a step whose token count m does not divide (a last batch); with SparseWeights
               the layer computes with W~ (groups along in_features, or out_features for "cout"),
               its forward on libsdgp's sparse-weight kernels where they run (block16 / block32 / cout:
               the tokens as the pixels of a 1x1 convolution, kernel "auto" timed against torch's
               F.linear at the first forward, as for convs), else F.linear; dL/dX of W~;
  dL/dX        prune(dL/dY) x W, dL/dY flattened to tokens x out_features (any leading dimensions;
               dL/dX reshaped back), pruned along the out_features: the backward-data of a 1x1
               convolution whose samples are sequences (x of 3+ dimensions: x.shape[-2] tokens each,
               the leading dimensions the samples) or rows (2-d x), on sdgp_sparse_bwd_* (W (out, in)
               read in place as OIHW), or the same pruned dL/dY times W by torch (kernel "auto" /
               "sparse" / "dense" / "fastest" as for convs, the same pruning key, rank mixing and
               autocast rules). A sample is what rescaled's sample-channel scope sums over, and
               mask_block=P shares masks in blocks of P consecutive tokens of a sequence (2-d x: none).
Eligible: exactly nn.Linear (or NonDynamicallyQuantizableLinear, a marker subclass), out_features % m
== 0, float32 CPU weights; others stay plain with the reason. The pruning key's `layer`
is then the index among the model's nn.Conv2d and nn.Linear modules (model.modules() order). Without a
dict, the model's last nn.Linear (normally the classifier) stays plain unless SDGP(classifier=True);
a config dict naming it converts it.
Transformers: nn.TransformerEncoderLayer's MLP, linear1 and linear2, are nn.Linear modules and convert
(linear2 is the bare layer's last nn.Linear: classifier=True, or a model with a head after it).
nn.MultiheadAttention's in-projection is a parameter (in_proj_weight, or q/k/v_proj_weight), not a
module: it stays dense. Its out_proj is a NonDynamicallyQuantizableLinear module, but the attention
passes out_proj.weight to F.multi_head_attention_forward and never calls out_proj's forward, so a
conversion could not reach it: it stays plain with that reason (a dict naming it raises ValueError).

SDGP, what a converted layer computes (the rest of this docstring; MVUE and sparse weights below):

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

MVUEWeightGrad: dL/dW = X^T x prune_rows(dL/dO), dL/dO pruned along its rows B*Ho*Wo (NHWC order) for
every output channel with the key (seed ^ 0x77677261, step, layer) as the C model's --prune-wgrad;
on libsdgp's sdgp_sparse_wgrad kernel (only the kept rows) or torch's dense dL/dW of the pruned
tensor (kernel "auto": the faster at the first backward). dL/db is the exact sum of dL/dO. With SDGP
on the same layer both prune the same dL/dO independently (SDGP for dL/dD, MVUE for dL/dW).

SparseWeights: the layer's forward uses W~ = sdgp_weights_project(W) (S-STE: beta S(W), beta frozen
at conversion; SR-STE: M W), recomputed from W at every forward; W's gradient is W~'s (plus SR-STE's
lambda (1 - M) W). The forward, and SDGP's data gradient, multiply by W~ with the kernels above and
torch's (exact masks, dense products: libsdgp's sparse forward kernels are not wired to PyTorch).
beta lives in the layer (layer_report, pickled with the module), not in the state dict, which keeps
the plain model's keys and the dense W; export_model() gives a plain model that holds W~.

Autocast: under torch.autocast("cpu", dtype=torch.bfloat16) a converted layer's forward is torch's
bfloat16 convolution of the bfloat16 casts of x and W (or W~), as autocast runs a plain nn.Conv2d.
Its backward casts dL/dO, x and W's bfloat16 cast to float32 (exactly) and runs every N:M product
(pruning, sparse kernels, dL/dW) in float32; dL/dD is returned in x's dtype, dL/dW and dL/db in
float32 (the parameters'). Other autocast dtypes, and float16 / float64 / non-CPU tensors, raise
TypeError naming them: the library computes in float32 only.

DDP (torch.distributed): the key of the sampling functions (random, mvue, mvue-approx, for SDGP and
MVUE) is (seed', step, layer) with seed' = seed on rank 0 and seed ^ (rank * 0x9E3779B97F4A7C15 mod
2^64) on rank r > 0, read at each backward: ranks draw different masks (their dL/dO differ anyway),
a run is reproducible per rank, and one process computes what rank 0 does. The measured choices
(kernel "auto" / "fastest", wgrad "auto", MVUE's kernel "auto") are agreed on: each rank times the
candidates, an all_reduce takes each one's slowest time over the ranks and all keep the same
fastest. That all_reduce runs inside the layer's first backward, on the default process group
(every rank runs the same layers in the same order, so it matches DDP's own collectives' order).
"""
import copy
import ctypes
import threading
import time
from typing import Dict, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _lib
from ._config import WEIGHT_GROUPS, WEIGHT_METHODS, MVUEWeightGrad, SDGP, SparseWeights

__all__ = ["sparsify_", "SDGP", "MVUEWeightGrad", "SparseWeights", "SparsifyReport", "LayerResult", "convert_model",
           "restore_model", "export_model", "layer_report", "SdgpConv2d", "SdgpLinear", "SdgpConversionWarning"]

_WGRAD_SEED = 0x77677261  # "wgra": MVUE's masks independent of SDGP's (the C model's seed ^ this)
_RANK_MIX = 0x9E3779B97F4A7C15


def _rank_world() -> Tuple[int, int]:
    """(rank, world size) of torch.distributed's default group, (0, 1) without one."""
    d = torch.distributed
    if d.is_available() and d.is_initialized():
        return d.get_rank(), d.get_world_size()
    return 0, 1


def rank_seed(seed: int, rank: int) -> int:
    """The seed of the sampling functions on a rank (module docstring, "DDP"): seed on rank 0."""
    return seed if rank == 0 else seed ^ ((rank * _RANK_MIX) & (2 ** 64 - 1))


def _agree(best: Dict[str, float]) -> Dict[str, float]:
    """Under torch.distributed: each candidate's slowest time over the ranks (the same on every rank)."""
    _, world = _rank_world()
    if world == 1:
        return best
    keys = sorted(best)
    t = torch.tensor([best[k] for k in keys], dtype=torch.float64)
    torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
    return dict(zip(keys, t.tolist()))

def _time_each(kinds, run, reps=3):
    """Each candidate k of kinds run as run(k), reps times, interleaved (a noisy neighbour slows all
    alike): ({k: its best time in seconds, agreed over the ranks (_agree)}, {k: its last output})."""
    best, out = {k: float("inf") for k in kinds}, {}
    for _ in range(reps):
        for k in kinds:
            t0 = time.perf_counter()
            out[k] = run(k)
            best[k] = min(best[k], time.perf_counter() - t0)
    return _agree(best), out


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


def _basic_ineligible(conv: nn.Module) -> Optional[str]:
    """Why no method can convert this module (not exactly nn.Conv2d, weights other than float32 CPU)."""
    if not isinstance(conv, nn.Conv2d):
        return "%s is not an nn.Conv2d (sdgp converts nn.Conv2d layers)" % type(conv).__name__
    if type(conv) is not nn.Conv2d:
        return "%s is a subclass of nn.Conv2d (its forward may differ)" % type(conv).__name__
    w = conv.weight
    if w.dtype != torch.float32 or w.device.type != "cpu":
        return "weights are %s on %s (float32 CPU only)" % (w.dtype, w.device)
    return None


def _geometry_ineligible(conv: nn.Conv2d) -> Optional[str]:
    """Why libsdgp's kernels cannot take this conv's geometry, or None."""
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
    return None


def _ineligible(conv, m):
    """Why this conv cannot run SDGP's backward, or None."""
    why = _basic_ineligible(conv)
    if why and type(conv) is not nn.Conv2d:
        return why
    why2 = _geometry_ineligible(conv)
    if why2:
        return why2
    if conv.out_channels % m:
        return "out_channels=%d is not a multiple of m=%d" % (conv.out_channels, m)
    if (conv.out_channels // conv.groups) % m:  # a group of m channels within one conv group (the kernel's rule)
        return "groups=%d split out_channels=%d into %d per group, not a multiple of m=%d" % (
            conv.groups, conv.out_channels, conv.out_channels // conv.groups, m)
    return why


def _mvue_ineligible(conv: nn.Conv2d, c: MVUEWeightGrad) -> Optional[str]:
    why = _basic_ineligible(conv)
    if why:
        return why
    if c.kernel == "sparse":
        return _wgrad_sparse_ineligible(conv, c)
    return None


def _wgrad_sparse_ineligible(conv: nn.Conv2d, c: MVUEWeightGrad) -> Optional[str]:
    """Why sdgp_sparse_wgrad cannot run this layer's MVUE weight gradient, or None."""
    n, m = c.n_m
    why = _geometry_ineligible(conv)
    if why:
        return why
    if conv.groups != 1:
        return "groups=%d (the sparse weight-gradient kernel has no grouped form)" % conv.groups
    if 8 % m or n >= m:
        return "n:m %d:%d: the sparse weight-gradient kernel needs m dividing 8 and n < m" % (n, m)
    if c.mask_block > 1:
        return "mask_block=%d: the sparse weight-gradient kernel keeps a mask per channel" % c.mask_block
    return None


def _weights_ineligible(conv: nn.Conv2d, c: SparseWeights) -> Optional[str]:
    why = _basic_ineligible(conv)
    if why:
        return why
    n, m = c.n_m
    cin = conv.in_channels // conv.groups
    if c.groups == "cout":
        if conv.out_channels % m:
            return "out_channels=%d is not a multiple of m=%d (groups='cout')" % (conv.out_channels, m)
    elif cin % m:
        return "%d input channels per group (in_channels=%d, groups=%d) are not a multiple of m=%d" % (
            cin, conv.in_channels, conv.groups, m)
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
        # fn None: no SDGP on this layer (dL/dD is torch's of the exact dL/dO)
        self.name, self.layer, self.fn, self.n, self.m = name, layer, fn, n, m
        self.wg = None  # MVUEWeightGrad or None
        self.wg_kernel = None  # "sparse" | "dense"; None: measure at the first backward
        self.wg_times_ms = None
        self.wg_plans = {}
        self.sw = None  # SparseWeights or None
        self.sw_beta = 1.0
        self.fwd = None  # SparseWeights: the forward's kernel choice and plans (_sparse_fwd.SparseFwdState)
        self.wt_oihw = None  # channels_last weights: the last projection's OIHW W~, for the sparse forward's pack
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

    def describe(self) -> str:
        """The layer's methods, as its module's repr shows them."""
        parts = []
        if self.fn is not None:
            parts.append("sdgp=%s %d:%d%s kernel=%s" % (
                _lib.prune_fn_name(self.fn).decode(), self.n, self.m,
                " mask_block=%d" % self.mask_block if self.mask_block > 1 else "", self.choice or "auto (not measured yet)"))
        if self.wg is not None:
            parts.append("wgrad=%s %s kernel=%s" % (self.wg.prune, self.wg.nm, self.wg_kernel or "auto"))
        if self.sw is not None:
            parts.append("weights=%s %s %s" % (self.sw.method, self.sw.nm, self.sw.groups))
        return ", ".join(parts)

    # copies (deepcopy of the model, pickling) get the configuration, never the C plans
    def __deepcopy__(self, memo):
        new = copy.copy(self)
        new.plans, new.wplans, new.wg_plans, new.lock = {}, {}, {}, threading.Lock()
        new.fwd = copy.deepcopy(self.fwd, memo)  # its choices, without the plans
        new.wt_oihw = None
        return new

    def __getstate__(self):
        d = dict(self.__dict__)
        d["plans"], d["wplans"], d["wg_plans"], d["lock"] = {}, {}, {}, None
        d["wt_oihw"] = None
        return d

    def __setstate__(self, d):
        d.setdefault("mask_block", 1)  # pickled before shared masks existed
        d.setdefault("groups", 1)  # pickled before grouped convs
        d.setdefault("wgrad", "torch")  # pickled before wgrad
        d.setdefault("wgrad_times_ms", None)
        d.setdefault("wplans", {})
        d.setdefault("fastest", False)
        for k, v in (("wg", None), ("wg_kernel", None), ("wg_times_ms", None), ("wg_plans", {}), ("sw", None),
                     ("sw_beta", 1.0), ("fwd", None)):
            d.setdefault(k, v)
        self.__dict__.update(d)
        self.lock = threading.Lock()

    def close(self):
        for p in list(self.plans.values()) + list(self.wplans.values()) + list(self.wg_plans.values()):
            p.close()
        self.plans, self.wplans, self.wg_plans = {}, {}, {}
        if self.fwd is not None:
            self.fwd.close()

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
        cfg = _lib.make_cfg(self.fn, self.n, self.m, 0, self.scope, rank_seed(self.seed, _rank_world()[0]), self.step,
                            self.layer, threads, self.mask_block, Wo)
        cfg.layout = _lib.LAYOUT["nchw" if nchw else "nhwc"]
        return cfg

    def _sparse(self, go, nchw, x_shape, x_cl, w, threads):
        """go: dL/dO as the library reads it, NCHW (nchw) or NHWC, contiguous."""
        B, Cout, Ho, Wo = _nchw_dims(go, nchw)
        Cin, H, W = x_shape[1], x_shape[2], x_shape[3]
        p = self._plan(B, H, W, Cin, Cout, w.shape[2], w.shape[3], threads)
        cfg, err = self._cfg(threads, Wo, nchw), _lib.Error()
        # shared masks on NHWC dL/dO: pruned inside the kernel's packing (one read of dL/dO, no compressed
        # copy; sdgp_prune's block path is portable C for the sampled functions); otherwise sdgp_prune into
        # the compressed form
        fused = self.mask_block > 1 and not nchw
        if not fused:
            values = _scratch("values", (p.rows * p.slots,))
            index = _scratch("index", (p.rows * p.slots,), torch.uint8)
            p.nm.values, p.nm.index = values.data_ptr(), index.data_ptr()
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
        if fused:
            _lib.check(_lib.sparse_bwd_data_pruned(p.ptr, dD.data_ptr(), go.data_ptr(), ctypes.byref(cfg), ctypes.byref(err)),
                       err)
        else:
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
                best, out = _time_each(("torch", "sdgp"), lambda k: self._wgrad_torch(go, x, w, need_b) if k == "torch"
                                       else self._wgrad_sdgp(go, x, w, need_b))
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

        def run(kind):
            if kind == "sparse":
                return self._sparse(g, nchw, x.shape, self._is_cl(x), w, threads)
            if kind == "dense":
                return self._dense(g, nchw, x, w, threads)
            return self._plain(go, x, w)
        return self.run_kernel(run)

    def run_kernel(self, run):
        """run(kind) for the layer's data-gradient kernel ("sparse", "dense", "plain"): the one chosen,
        or at the first backward (kernel "auto" / "fastest") all candidates, timed (_time_each), the
        fastest kept (ties: the first, sparse). SdgpConv2d's and SdgpLinear's backward both use it."""
        with self.lock:  # the step counter moves at the end of the backward (_SdgpConvFn)
            if self.choice is not None:
                return run(self.choice)
            kinds = ("sparse", "dense", "plain") if self.fastest else ("sparse", "dense")
            best, out = _time_each(kinds, run)
            self.choice = min(kinds, key=lambda k: best[k])
            self.times_ms = {k: 1e3 * v for k, v in best.items()}
            if self.choice != "sparse":  # its plans are not needed any more
                for p in self.plans.values():
                    p.close()
                self.plans = {}
            return out[self.choice]

    def _plain(self, go, x, w):
        """torch's dL/dD of the unpruned dL/dO: the layer without SDGP (kernel "plain", "fastest")."""
        return self.torch_grads(go, x, w, (True, False, False))[0]

    # ---- MVUE's weight gradient ----
    def mvue_grad(self, go, x, w):
        """dL/dW of dL/dO pruned along its rows (MVUEWeightGrad); go NCHW logical, any strides."""
        c = self.wg
        n, m = c.n_m
        B, Cout, Ho, Wo = go.shape
        threads = torch.get_num_threads()
        g = go.permute(0, 2, 3, 1)  # the row axis is NHWC's (the library reads no NCHW there)
        if not g.is_contiguous():
            g = _relayout(_scratch("wg_dO", tuple(g.shape)), g)
        cfg = _lib.make_cfg(_lib.parse_fn(c.prune), n, m, 1, 0, rank_seed(c.seed ^ _WGRAD_SEED, _rank_world()[0]),
                            self.step, self.layer, threads, c.mask_block)
        with self.lock:
            if self.wg_kernel is None:
                best, out = _time_each(("sparse", "dense"), lambda k: self._mvue_run(k, cfg, g, x, w, threads))
                self.wg_kernel = min(("sparse", "dense"), key=lambda k: best[k])
                self.wg_times_ms = {k: 1e3 * v for k, v in best.items()}
                if self.wg_kernel != "sparse":
                    for p in self.wg_plans.values():
                        p.close()
                    self.wg_plans = {}
                return out[self.wg_kernel]
            return self._mvue_run(self.wg_kernel, cfg, g, x, w, threads)

    def _mvue_run(self, kernel, cfg, g, x, w, threads):
        B, Ho, Wo, Cout = g.shape
        err = _lib.Error()
        if kernel == "dense":
            pruned = _scratch("wg_pruned", tuple(g.shape))
            _lib.check(_lib.prune(ctypes.byref(cfg), g.data_ptr(), B, Ho * Wo, Cout, pruned.data_ptr(), None,
                                  ctypes.byref(err)), err)
            gp = pruned.permute(0, 3, 1, 2)
            if not self._is_cl(x):  # torch's kernel on a dL/dO of x's other layout reorders anyway
                gp = _relayout(_scratch("wg_pruned_x", tuple(gp.shape)), gp)
            return self.torch_grads(gp, x, w, (False, True, False))[1]
        Cin, H, W = x.shape[1], x.shape[2], x.shape[3]
        key = (B, H, W, Cin, Cout, w.shape[2], w.shape[3], threads)
        p = self.wg_plans.get(key)
        if p is None:
            while len(self.wg_plans) >= _PLAN_CACHE:
                self.wg_plans.pop(next(iter(self.wg_plans))).close()
            p = self.wg_plans[key] = _SparseWgradPlan(
                _geom(B, H, W, Cin, Cout, w.shape[2], w.shape[3], self.stride, self.pad, self.groups), cfg.n, cfg.m,
                threads)
        rows = B * Ho * Wo
        slots = rows // cfg.m * cfg.n * Cout
        values = _scratch("wg_values", (slots,))
        index = _scratch("wg_index", (slots,), torch.uint8)
        nm = _lib.NMTensor(1, cfg.n, cfg.m, rows, Cout, values.data_ptr(), index.data_ptr())
        _lib.check(_lib.prune(ctypes.byref(cfg), g.data_ptr(), B, Ho * Wo, Cout, None, ctypes.byref(nm),
                              ctypes.byref(err)), err)
        xn = _nhwc(x, "wg_x")
        gw = torch.empty(tuple(w.shape), dtype=torch.float32)  # OIHW
        _lib.check(_lib.sparse_wgrad_run(p.ptr, gw.data_ptr(), xn.data_ptr(), ctypes.byref(nm), ctypes.byref(err)), err)
        return gw

    # ---- sparse weights ----
    def project(self, w, scale=None):
        """W~ of w (SparseWeights): sdgp_weights_project, in w's memory format."""
        c = self.sw
        n, m = c.n_m
        wc = w.detach().contiguous()
        out = torch.empty_like(wc)
        cout, cin = wc.shape[0], wc.shape[1]  # OIHW, or a linear layer's (out, in): one tap
        _lib.weights_project(out.data_ptr(), wc.data_ptr(), cout, cin, wc[0, 0].numel(),
                             WEIGHT_METHODS[c.method], WEIGHT_GROUPS[c.groups], n, m,
                             self.sw_beta if scale is None else scale)
        self.wt_oihw = None
        if w.dim() == 4 and not w.is_contiguous() and w.is_contiguous(memory_format=torch.channels_last):
            self.wt_oihw = out  # the sparse forward packs from OIHW: no copy back (until the next projection)
            out = out.contiguous(memory_format=torch.channels_last)
        return out

    def take_oihw(self, wt):
        """W~ as OIHW for libsdgp's packing: the projection's own OIHW result when wt is its channels_last copy."""
        o, self.wt_oihw = getattr(self, "wt_oihw", None), None
        return o if o is not None and o.shape == wt.shape and torch.equal(o[:1, :1], wt[:1, :1]) else None

    def set_beta(self, w):
        """S-STE's beta from w (frozen from then on; 1 for SR-STE)."""
        if self.sw.method != "sste":
            self.sw_beta = 1.0
            return
        wc = w.detach().contiguous()
        s = self.project(wc, 1.0).contiguous()
        self.sw_beta = float(_lib.weights_sste_beta(wc.data_ptr(), s.data_ptr(), wc.numel()))


class _SparseWgradPlan(_Handle):
    """sdgp_sparse_wgrad for one geometry: MVUE's weight gradient on the kept rows."""
    _destroy = "sparse_wgrad_destroy"

    def __init__(self, geom, n, m, threads):
        err = _lib.Error()
        self.ptr = ctypes.c_void_p()
        _lib.check(_lib.sparse_wgrad_create(ctypes.byref(self.ptr), ctypes.byref(geom), n, m, _lib.ISA_AUTO, threads,
                                            ctypes.byref(err)), err)


def _autocast_dtype(who: str) -> Optional[torch.dtype]:
    """The CPU autocast dtype in effect (bfloat16), None without autocast; TypeError for others."""
    if not torch.is_autocast_cpu_enabled():
        return None
    dt = torch.get_autocast_cpu_dtype()
    if dt != torch.bfloat16:
        raise TypeError("sdgp layer %s: autocast dtype %s; sdgp's layers run under CPU autocast with torch.bfloat16 "
                        "only (their N:M products are float32)" % (who, dt))
    return dt


class _ProjectFn(torch.autograd.Function):
    """W -> W~ (SparseWeights), straight-through: dL/dW = dL/dW~ (+ SR-STE's lambda (1 - M) W)."""

    @staticmethod
    def forward(ctx, w, state):
        wt = state.project(w)
        ctx.lam = float(state.sw.srste_lambda) if state.sw.method == "srste" else 0.0
        if ctx.lam:
            ctx.save_for_backward(w, wt)  # SR-STE's W~ is M W at scale 1
        return wt

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, g):
        if ctx.lam:
            w, wt = ctx.saved_tensors
            g = g + ctx.lam * (w - wt)
        return g, None


def _saved_fp32(ctx, go):
    """go and what _forward_saving kept (x, w), in float32 under autocast: the N:M products run in float32
    (module docstring, "Autocast")."""
    x, w = ctx.saved_tensors
    if ctx.lowp is not None:
        go, x, w = go.float(), x.float(), w.float()
    return go, x, w


def _forward_saving(ctx, x, weight, bias, state, lowp, product):
    """A converted layer's forward: torch's own product (bitwise the plain layer's), saving what its backward
    reads. Under autocast (lowp: bfloat16) the product of the bfloat16 casts, as autocast runs a plain layer."""
    ctx.state, ctx.has_bias, ctx.lowp, ctx.x_dtype = state, bias is not None, lowp, x.dtype
    if lowp is None:
        ctx.save_for_backward(x, weight)
        return product(x, weight, bias)
    with torch.autocast("cpu", enabled=False):
        xl, wl = x.to(lowp), weight.to(lowp)
        y = product(xl, wl, None if bias is None else bias.to(lowp))
    ctx.save_for_backward(xl, wl)
    return y


def _dense_product(conv):
    """torch's product of the layer, as product(x, w, b)."""
    return lambda xx, ww, bb: F.conv2d(xx, ww, bb, conv.stride, conv.padding, conv.dilation, conv.groups)


def _sparse_forward(st, lowp):
    """The layer's SparseFwdState when its forward may run a libsdgp sparse-weight kernel (float32 only:
    under autocast the layer runs torch's bfloat16 product), else None."""
    f = st.fwd
    return f if f is not None and lowp is None and f.uses_sparse() else None


class _SdgpConvFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, conv, lowp):
        dense = _dense_product(conv)
        fwd = _sparse_forward(conv._sdgp, lowp)
        product = dense if fwd is None else (lambda xx, ww, bb: fwd.forward(xx, ww, bb, dense,
                                                                            conv._sdgp.take_oihw(ww)))
        return _forward_saving(ctx, x, weight, bias, conv._sdgp, lowp, product)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, go):
        go, x, w = _saved_fp32(ctx, go)
        st = ctx.state
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        need_b = need_b and ctx.has_bias
        gx = gw = gb = None
        wdata = st.fn is None and need_x and st.fwd is not None and st.fwd.wdata != "dense"
        try:
            if st.fn is None and st.wg is None and st.wgrad == "torch" and not wdata:  # torch's, one call
                gx, gw, gb = st.torch_grads(go, x, w, (need_x, need_w, need_b))
            elif need_x and st.fn is not None and st.choice == "plain" and st.wg is None and (
                    st.wgrad == "torch" or not need_w):  # no SDGP here: one torch call
                gx, gw, gb = st.torch_grads(go, x, w, (True, need_w, need_b))
            else:
                if need_w and st.wg is not None:  # MVUE: the pruned dL/dO's dL/dW, dL/db exact
                    gw = st.mvue_grad(go, x, w)
                    gb = go.sum((0, 2, 3)) if need_b else None
                elif need_w:  # dense dL/dW (and dL/db) of the unpruned dL/dO, torch's or libsdgp's
                    gw, gb = st.weight_grad(go, x, w, need_b)
                elif need_b:
                    gb = st.torch_grads(go, x, w, (False, False, True))[2]
                if need_x and st.fn is not None:
                    gx = st.data_grad(go, x, w)
                elif wdata:  # sparse weights without SDGP: W~'s sparse data gradient where it pays
                    with st.lock:
                        gx = st.fwd.wdata_grad(go, x, w, lambda: st.torch_grads(go, x, w, (True, False, False))[0])
                elif need_x:
                    gx = st.torch_grads(go, x, w, (True, False, False))[0]
        finally:
            with st.lock:
                st.step += 1
        if gx is not None and gx.dtype != ctx.x_dtype:
            gx = gx.to(ctx.x_dtype)
        return gx, gw, gb, None, None


def _check_forward(st, x, w, plain):
    """The autocast dtype of a converted layer's forward (None without autocast); TypeError for tensors
    the library cannot take (float32 CPU only; bfloat16 inputs under bfloat16 CPU autocast)."""
    who = st.name or "(model)"
    if w.dtype != torch.float32 or w.device.type != "cpu":
        raise TypeError("sdgp layer %s: weights %s on %s; sdgp's layers need float32 CPU weights (under CPU "
                        "autocast too; restore_model() gives back plain %s layers)" % (who, w.dtype, w.device, plain))
    lowp = _autocast_dtype(who)
    if x.device.type != "cpu" or not (x.dtype == torch.float32 or (lowp is not None and x.dtype == lowp)):
        raise TypeError("sdgp layer %s: input %s on %s, weights %s on %s; sdgp's layers need float32 CPU tensors "
                        "(or bfloat16 under torch.autocast('cpu', dtype=torch.bfloat16); restore_model() gives "
                        "back plain %s layers)" % (who, x.dtype, x.device, w.dtype, w.device, plain))
    return lowp


class SdgpConv2d(nn.Conv2d):
    """nn.Conv2d with sdgp's methods (module docstring). Made by sparsify_ / convert_model, not constructed."""
    _sdgp: "_LayerState"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        st = self._sdgp
        w = self.weight
        lowp = _check_forward(st, x, w, "nn.Conv2d")
        if st.sw is not None:
            w = _ProjectFn.apply(w, st)  # W~ (its gradient goes to W)
        fwd = _sparse_forward(st, lowp)
        if torch.is_grad_enabled() and ((x.requires_grad and (st.fn is not None or (
                st.fwd is not None and st.fwd.wdata != "dense"))) or (w.requires_grad and (
                st.wg is not None or (st.fn is not None and st.wgrad != "torch"))) or (fwd is not None and (
                x.requires_grad or w.requires_grad or (self.bias is not None and self.bias.requires_grad)))):
            return _SdgpConvFn.apply(x, w, self.bias, self, lowp)
        if fwd is not None:  # no gradient to keep (inference): libsdgp's sparse-weight product where chosen
            return fwd.forward(x, w, self.bias, _dense_product(self), st.take_oihw(w))
        return self._conv_forward(x, w, self.bias)  # torch's own (autocast as for a plain layer)

    def extra_repr(self) -> str:
        return "%s, %s" % (super().extra_repr(), self._sdgp.describe())


# nn.Linear's layer lives in _linear.py; imported here, after the helpers it uses.
from ._linear import SdgpLinear  # noqa: E402,F401

# The model-level API lives in _sparsify.py (this file holds the layer); imported last, as it uses the layer.
from . import _sparse_fwd  # noqa: E402  (it imports this module's helpers)
from ._sparsify import (LayerResult, SparsifyReport, sparsify_, convert_model, restore_model, export_model, sparse_weights, layer_report)  # noqa: E402
