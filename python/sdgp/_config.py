"""The configurations of sdgp.torch.sparsify_ (torchao's shape: one object per method, composable).

    SDGP(prune="rescaled", nm="2:4", kernel="auto", mask_block=1)    the data gradient dL/dD (the paper)
    MVUEWeightGrad(nm="2:4")                                         the weight gradient dL/dW (MVUE on dL/dO's rows)
    SparseWeights(method="sste", nm="2:4", groups="tap")             the forward: N:M weights W~ (S-STE / SR-STE)

They are frozen dataclasses, checked when made (a bad name or n:m raises ValueError / TypeError naming
it, with the library's own message where the library parses it). A list (or tuple) of them combines
methods; at most one of each kind. Importing this module does not import torch.
"""
from dataclasses import dataclass, fields
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _lib

__all__ = ["SDGP", "MVUEWeightGrad", "SparseWeights", "Config", "ConfigLike", "normalize"]

KERNELS = ("auto", "sparse", "dense", "fastest", "plain")
WGRAD_KERNELS = ("auto", "sparse", "dense")
WGRADS = ("torch", "sdgp", "auto")
MODULES = ("conv", "linear")  # SDGP(modules=...): nn.Conv2d, nn.Linear
WEIGHT_METHODS = {"sste": 1, "srste": 2}  # sdgp_weights_kind
WEIGHT_GROUPS = {"tap": 0, "kernel": 1, "block16": 2, "block32": 3, "cout": 4}  # sdgp_weights_group
FWD_KERNELS = ("auto", "on", "off")  # SparseWeights(kernel=...)
SPARSE_FWD_GROUPS = ("block16", "block32", "cout")  # the groups libsdgp's sparse forward kernels take


def _int_in(who: str, name: str, v: Any, lo: int, hi: int) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise ValueError("%s: %s must be an integer in [%d, %d], got %r" % (who, name, lo, hi, v))


def _bool(who: str, name: str, v: Any) -> None:
    if not isinstance(v, bool):
        raise TypeError("%s: %s must be True or False, got %r" % (who, name, v))


def _one_of(who: str, name: str, v: Any, choices: Sequence[str]) -> None:
    if v not in choices:
        raise ValueError("%s: %s must be one of %s, got %r" % (who, name, ", ".join(repr(c) for c in choices), v))


@dataclass(frozen=True)
class SDGP:
    """SDGP: dL/dO pruned to N:M along the output channels before the data-gradient product dL/dD =
    prune(dL/dO) x W, on libsdgp's sparse backward-data kernel (sdgp.torch's module docstring).

    prune: "random", "magnitude", "rescaled", "mvue", "mvue-approx" (include/sdgp/prune.h).
    nm: "N:M"; a layer needs out_channels / groups % M == 0.
    kernel: "auto" (per layer the faster of "sparse" and "dense", measured at its first backward),
        "sparse", "dense" (the pruned dL/dO through torch's dense kernel), "fastest" (also the unpruned
        product, "plain", which the layer keeps where it is the fastest: not pruned there), "plain".
    mask_block: P > 1 shares one mask between P neighbouring pixels of a row of dL/dO (sdgp train's
        --mask-block), or P consecutive tokens of a sequence (nn.Linear); 1 = a mask per pixel (the paper).
    scope: the rescaled function's L1 scope, "sample-channel" or "channel".
    seed: the key of the sampling functions (random, mvue, mvue-approx): (seed, step, layer), the rank
        mixed into the seed under torch.distributed (sdgp.torch's docstring, "DDP").
    wgrad: the dense dL/dW when MVUEWeightGrad is not used: "torch", "sdgp" (libsdgp's oneDNN kernel)
        or "auto" (the faster, measured).
    first_layer: also the first nn.Conv2d of the model (its input is normally the image: no dL/dD).
    modules: the layer types SDGP converts: ("conv",) (default: nn.Conv2d only), ("conv", "linear")
        or ("linear",). nn.Linear layers (sdgp.torch's docstring, "nn.Linear") need out_features % M
        == 0; their dL/dW is always torch's (wgrad applies to convs).
    classifier: also the model's last nn.Linear (in model.modules() order, normally the classifier)
        when modules has "linear"; a config dict naming it converts it too.
    """
    prune: str = "rescaled"
    nm: str = "2:4"
    kernel: str = "auto"
    mask_block: int = 1
    scope: str = "sample-channel"
    seed: int = 0
    wgrad: str = "torch"
    first_layer: bool = False
    modules: Tuple[str, ...] = ("conv",)
    classifier: bool = False

    def __post_init__(self) -> None:
        who = "sdgp.torch.SDGP"
        n, m = _lib.parse_nm(self.nm)
        fn = _lib.parse_fn(self.prune)
        if fn == 0 and n != m:
            raise ValueError("%s: prune='none' keeps dL/dO dense: use the plain model" % who)
        _one_of(who, "kernel", self.kernel, KERNELS)
        _one_of(who, "wgrad", self.wgrad, WGRADS)
        _lib.parse_choice("scope", self.scope, _lib.SCOPE)
        _lib.make_cfg(fn, n, m, seed=self.seed, mask_block=self.mask_block)  # seed, mask_block ranges
        _bool(who, "first_layer", self.first_layer)
        _bool(who, "classifier", self.classifier)
        mods = self.modules
        if isinstance(mods, str):
            mods = (mods,)
        if not isinstance(mods, (tuple, list)) or not mods or any(v not in MODULES for v in mods) or \
                len(set(mods)) != len(mods):
            raise ValueError("%s: modules must be a non-empty tuple of %s (each once), got %r" % (
                who, " and ".join(repr(v) for v in MODULES), self.modules))
        object.__setattr__(self, "modules", tuple(mods))  # frozen: a list or a single name normalized
        if self.mask_block > 1 and self.prune == "mvue-approx":
            raise ValueError("%s: mvue-approx has no shared-mask form (mask_block=%d); use mvue" % (who, self.mask_block))

    @property
    def n_m(self) -> Tuple[int, int]:
        return _lib.parse_nm(self.nm)


@dataclass(frozen=True)
class MVUEWeightGrad:
    """MVUE for the weight gradient: dL/dO pruned to N:M along its rows (for each output channel, n of
    every m consecutive rows r = (b*Ho + h)*Wo + w are kept, unbiased: E[pruned] = dL/dO) before
    dL/dW = X^T x prune(dL/dO), as `sdgp train --prune-wgrad mvue` (the key's seed is seed ^ "wgra",
    as the C model's, so its masks are independent of SDGP's). dL/db stays the exact sum.

    prune: "mvue" (default, unbiased), or "random", "magnitude", "rescaled" on the same row groups.
    nm: "N:M"; B*Ho*Wo must be a multiple of M at each backward (the library says so otherwise).
    kernel: "sparse" (libsdgp's sdgp_sparse_wgrad: only the kept rows, M | 8, no groups, mask_block 1),
        "dense" (torch's dense dL/dW on the pruned dL/dO) or "auto" (the faster at the layer's first
        backward; "dense" where the sparse kernel does not apply).
    mask_block: Q > 1 makes Q consecutive output channels share their row masks (dense kernel only).
    first_layer: also the first nn.Conv2d (off by default, as --prune-wgrad-first).
    """
    nm: str = "2:4"
    prune: str = "mvue"
    kernel: str = "auto"
    mask_block: int = 1
    seed: int = 0
    first_layer: bool = False

    def __post_init__(self) -> None:
        who = "sdgp.torch.MVUEWeightGrad"
        n, m = _lib.parse_nm(self.nm)
        fn = _lib.parse_fn(self.prune)
        if fn == 0:
            raise ValueError("%s: prune='none' keeps dL/dO dense: leave MVUEWeightGrad out" % who)
        if self.prune == "mvue-approx":
            raise ValueError("%s: mvue-approx has no row-axis form here; use prune='mvue'" % who)
        _one_of(who, "kernel", self.kernel, WGRAD_KERNELS)
        _lib.make_cfg(fn, n, m, axis=1, seed=self.seed, mask_block=self.mask_block)
        _bool(who, "first_layer", self.first_layer)

    @property
    def n_m(self) -> Tuple[int, int]:
        return _lib.parse_nm(self.nm)


@dataclass(frozen=True)
class SparseWeights:
    """N:M sparse weights in the forward: the layer computes with W~ = beta S(W) (method "sste", S-STE's
    continuous projection, beta frozen at conversion from the weights then) or W~ = M W ("srste"),
    n:m along input channels in the groups of include/sdgp/nn.h; W's gradient is W~'s
    (straight-through), plus srste_lambda (1 - M) W for SR-STE (docs/sparse-weights.md).

    groups: "tap" (per output channel and tap), "kernel" (per output channel, all taps), "block16",
        "block32" (16 / 32 output channels share a mask) or "cout" (m consecutive output channels).
        A layer needs in_channels / groups % M == 0 ("cout": out_channels / groups % M == 0).
    kernel: the forward's product on W~ (sdgp/_sparse_fwd.py): "auto" (per layer the fastest of torch's
        F.conv2d and libsdgp's sparse-weight kernels, measured at the layer's first forward), "on"
        (libsdgp's kernel with the fewest multiplies wherever the layer has one), "off" (torch's, as
        before). Only groups "block16", "block32" (direct; Winograd on 3x3 stride-1 layers) and "cout"
        have sparse kernels, and only ungrouped convs; other layers run torch's. The same choice, made
        at the first backward, applies to the data gradient of block-masked 3x3 stride-1 layers
        without SDGP (sdgp_sparse_wdata); with SDGP the data gradient is SDGP's.
    first_layer: also the first nn.Conv2d.
    """
    method: str = "sste"
    nm: str = "2:4"
    groups: str = "tap"
    srste_lambda: float = 2e-4
    first_layer: bool = False
    kernel: str = "auto"

    def __post_init__(self) -> None:
        who = "sdgp.torch.SparseWeights"
        _one_of(who, "method", self.method, tuple(WEIGHT_METHODS))
        n, m = _lib.parse_nm(self.nm)
        if n == m:
            raise ValueError("%s: nm=%r keeps every weight: leave SparseWeights out" % (who, self.nm))
        _one_of(who, "groups", self.groups, tuple(WEIGHT_GROUPS))
        if isinstance(self.srste_lambda, bool) or not isinstance(self.srste_lambda, (int, float)) or \
                not self.srste_lambda >= 0:
            raise ValueError("%s: srste_lambda must be a number >= 0, got %r" % (who, self.srste_lambda))
        _bool(who, "first_layer", self.first_layer)
        _one_of(who, "kernel", self.kernel, FWD_KERNELS)
        if self.kernel == "on" and self.groups not in SPARSE_FWD_GROUPS:
            raise ValueError("%s: kernel='on' needs groups with a sparse forward kernel (%s), got groups=%r" % (
                who, ", ".join(repr(g) for g in SPARSE_FWD_GROUPS), self.groups))

    @property
    def n_m(self) -> Tuple[int, int]:
        return _lib.parse_nm(self.nm)


Config = Union[SDGP, MVUEWeightGrad, SparseWeights]
ConfigLike = Union[Config, Sequence[Config], None]
KINDS: Dict[type, str] = {SDGP: "sdgp", MVUEWeightGrad: "mvue_wgrad", SparseWeights: "sparse_weights"}


def normalize(config: Any, who: str = "sdgp.torch.sparsify_") -> Dict[str, Config]:
    """A config, a list / tuple of them (or None: nothing) -> {kind: config}, one per kind."""
    if config is None:
        return {}
    items: List[Any] = list(config) if isinstance(config, (list, tuple)) else [config]
    out: Dict[str, Config] = {}
    for c in items:
        kind = KINDS.get(type(c))
        if kind is None:
            raise TypeError("%s: a config is SDGP(...), MVUEWeightGrad(...) or SparseWeights(...) (or a list of "
                            "them), got %s" % (who, type(c).__name__))
        if kind in out:
            raise ValueError("%s: two %s configs for one layer (%r and %r)" % (who, type(c).__name__, out[kind], c))
        out[kind] = c
    return out


def describe(c: Config) -> str:
    return "%s(%s)" % (type(c).__name__, ", ".join("%s=%r" % (f.name, getattr(c, f.name)) for f in fields(c)
                                                  if getattr(c, f.name) != f.default or f.name in ("nm",)))


