"""sdgp.torch's model-level API: sparsify_ and its report, convert_model, restore_model, export_model,
sparse_weights and layer_report (the layer itself, SdgpConv2d, and what it computes: sdgp/torch.py).
Imported by sdgp.torch, which re-exports every public name here."""
import copy
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Type, Union

import torch
import torch.nn as nn

from . import _lib
from ._config import ConfigLike, MVUEWeightGrad, SDGP, SparseWeights, describe, normalize
from . import _sparse_fwd
from ._linear import SdgpLinear, _LinearState, _linear_ineligible, _linear_wgrad_sparse_ineligible
from .torch import (SdgpConv2d, SdgpConversionWarning, _LayerState, _basic_ineligible, _geometry_ineligible, _ineligible,
                    _mvue_ineligible, _pair, _resolve_padding, _weights_ineligible, _wgrad_sparse_ineligible)


@dataclass
class LayerResult:
    """One nn.Conv2d or nn.Linear (or a module named in a config dict) of a sparsify_ call."""
    name: str
    index: int  # among the model's nn.Conv2d (and nn.Linear where an SDGP config takes them; model.modules()
    # order): the `layer` of the pruning key
    methods: Dict[str, str] = field(default_factory=dict)  # kind -> the config applied
    skipped: Dict[str, str] = field(default_factory=dict)  # kind (or "all") -> why not
    linear: bool = False  # an nn.Linear (else an nn.Conv2d)

    @property
    def converted(self) -> bool:
        return bool(self.methods)


@dataclass
class SparsifyReport:
    """What sparsify_ converted, with what, and why not elsewhere. str() gives a table."""
    layers: List[LayerResult]

    @property
    def converted(self) -> List[str]:
        return [r.name for r in self.layers if r.converted]

    @property
    def skipped(self) -> Dict[str, Dict[str, str]]:
        return {r.name: r.skipped for r in self.layers if r.skipped}

    def __getitem__(self, name: str) -> LayerResult:
        for r in self.layers:
            if r.name == name:
                return r
        raise KeyError(name)

    def __str__(self) -> str:
        what = "conv and linear" if any(r.linear for r in self.layers) else "conv"
        lines = ["sdgp.torch.sparsify_: %d of %d %s layers converted" % (len(self.converted), len(self.layers), what)]
        for r in self.layers:
            what = "; ".join(r.methods.values()) if r.methods else "plain"
            why = "; ".join("%s: %s" % kv for kv in r.skipped.items())
            lines.append("  %-28s %s%s" % (r.name, what, "  (not: %s)" % why if why else ""))
        return "\n".join(lines)


_KIND_ORDER = ("sdgp", "mvue_wgrad", "sparse_weights")


def _method_reason(kind: str, conv: nn.Module, c: Any) -> Optional[str]:
    if kind == "sdgp":
        return _ineligible(conv, c.n_m[1]) if isinstance(conv, nn.Conv2d) else _basic_ineligible(conv)
    if kind == "mvue_wgrad":
        return _mvue_ineligible(conv, c) if isinstance(conv, nn.Conv2d) else _basic_ineligible(conv)
    return _weights_ineligible(conv, c) if isinstance(conv, nn.Conv2d) else _basic_ineligible(conv)


def _error_class(why: str) -> Type[Exception]:
    return TypeError if ("weights are" in why or "not an nn.Conv2d" in why or "subclass" in why) else ValueError


def _takes_linear(cfgs: Mapping[str, Any]) -> bool:
    sd = cfgs.get("sdgp")
    return sd is not None and "linear" in sd.modules


def _linear_reason(kind: str, lin: nn.Module, c: Any, model_why: Optional[str]) -> Optional[str]:
    """Why config c (of kind) cannot convert this nn.Linear, or None."""
    if kind == "sdgp" and "linear" not in c.modules:
        return "%s is not an nn.Conv2d (SDGP(modules=%r); modules=(\"conv\", \"linear\") converts nn.Linear " \
               "layers)" % (type(lin).__name__, c.modules)
    # SDGP prunes along the out_features; MVUE along the tokens (any out_features); sparse weights along the
    # in_features (the out_features for groups "cout")
    why = _linear_ineligible(lin, c.n_m[1] if kind == "sdgp" else 1)
    if why is None and kind == "sparse_weights":
        width, what = (lin.out_features, "out_features") if c.groups == "cout" else (lin.in_features, "in_features")
        if width % c.n_m[1]:
            why = "%s=%d is not a multiple of m=%d (SparseWeights groups=%r)" % (what, width, c.n_m[1], c.groups)
        elif c.groups.startswith("block") and lin.out_features % int(c.groups[5:]):
            why = "out_features=%d is not a multiple of the %s block" % (lin.out_features, c.groups)
    if why:
        return why
    return model_why


def _sparsify(model: nn.Module, config: Any, filter_fn: Optional[Callable[[nn.Module, str], bool]], strict: bool,
              who: str) -> SparsifyReport:
    if not isinstance(model, nn.Module):
        raise TypeError("%s: expected an nn.Module, got %s" % (who, type(model).__name__))
    if filter_fn is not None and not callable(filter_fn):
        raise TypeError("%s: filter_fn must be callable as filter_fn(module, name), got %r" % (who, filter_fn))
    per_layer = isinstance(config, Mapping)
    if per_layer:
        modules = dict(model.named_modules())
        unknown = [k for k in config if not isinstance(k, str) or k not in modules]
        if unknown:
            raise ValueError("%s: the config dict names %s, not module(s) of the model" % (
                who, ", ".join(repr(k) for k in unknown)))
        layer_cfgs = {k: normalize(v, who) for k, v in config.items()}
        for k in config:
            mod = modules[k]
            if isinstance(mod, nn.Linear):  # SDGP needs modules with "linear"; every method's other reasons below
                for kind in _KIND_ORDER:
                    c = layer_cfgs[k].get(kind)
                    if c is not None and kind == "sdgp" and "linear" not in c.modules:
                        why = _linear_reason(kind, mod, c, None)
                        raise _error_class(why)("%s: layer %s, %s: %s" % (who, k, type(c).__name__, why))
                continue
            why = _basic_ineligible(mod)
            if why and layer_cfgs[k]:
                raise _error_class(why)("%s: layer %s: %s" % (who, k, why))
        with_linear = any(isinstance(modules[k], nn.Linear) for k in config)
    else:
        all_cfgs = normalize(config, who)
        if not all_cfgs:
            raise ValueError("%s: no config given (SDGP(...), MVUEWeightGrad(...), SparseWeights(...), a list of them "
                             "or a dict from layer name to them)" % who)
        with_linear = _takes_linear(all_cfgs)
    layers = [(name, mod) for name, mod in model.named_modules()
              if isinstance(mod, nn.Conv2d) or (with_linear and isinstance(mod, nn.Linear))]
    for name, mod in layers:
        if isinstance(mod, (SdgpConv2d, SdgpLinear)):
            raise ValueError("%s: layer %s is converted already" % (who, name or "(model)"))
    # model-level reasons for linear layers: the classifier, and nn.MultiheadAttention's out_proj, whose
    # weight the attention multiplies inside F.multi_head_attention_forward (its forward is never called)
    linears = [mod for mod in model.modules() if isinstance(mod, nn.Linear)]
    classifier = linears[-1] if linears else None
    out_projs = {id(mod.out_proj) for mod in model.modules() if isinstance(mod, nn.MultiheadAttention)}
    rows, todo, problems = [], [], []
    conv_i = 0
    for i, (name, layer) in enumerate(layers):
        shown = name or "(model)"
        is_linear = isinstance(layer, nn.Linear)
        r = LayerResult(shown, i, linear=is_linear)
        rows.append(r)
        first_conv = not is_linear and conv_i == 0
        conv_i += 0 if is_linear else 1
        model_why = None  # a reason that is not a problem (no warning), as first_layer's
        if is_linear and id(layer) in out_projs:
            model_why = "the out_proj of an nn.MultiheadAttention, which multiplies by its weight in " \
                        "F.multi_head_attention_forward and never calls its forward: SDGP cannot reach it"
        if per_layer:
            cfgs = layer_cfgs.get(name)
            if cfgs is None:
                r.skipped["all"] = "not in the config dict"
                continue
        else:
            cfgs = {}
            for kind, c in all_cfgs.items():
                if is_linear:  # (the SDGP config takes linear layers: with_linear)
                    if layer is classifier and not all_cfgs["sdgp"].classifier and model_why is None:
                        r.skipped[kind] = "the model's last nn.Linear, taken as its classifier (classifier=False)"
                    elif model_why is not None:
                        r.skipped[kind] = model_why
                    else:
                        cfgs[kind] = c
                elif kind == "sdgp" and "conv" not in c.modules:
                    r.skipped[kind] = "nn.Conv2d (SDGP(modules=%r))" % (c.modules,)
                elif first_conv and not c.first_layer:
                    r.skipped[kind] = "first layer (first_layer=False)"
                else:
                    cfgs[kind] = c
            if not cfgs and r.skipped and len(set(r.skipped.values())) == 1:
                r.skipped = {"all": next(iter(r.skipped.values()))}
        if not cfgs:
            continue
        if filter_fn is not None and not filter_fn(layer, name):
            r.skipped["all"] = "filter_fn"
            continue
        ok = {}
        for kind in _KIND_ORDER:
            c = cfgs.get(kind)
            if c is None:
                continue
            if is_linear:
                why = _linear_reason(kind, layer, c, model_why)
            elif kind == "sdgp" and "conv" not in c.modules:
                why = "nn.Conv2d (SDGP(modules=%r))" % (c.modules,)
            else:
                why = _method_reason(kind, layer, c)
            if why is None:
                ok[kind] = c
                continue
            if per_layer:  # a layer the user named: its config must apply
                raise _error_class(why)("%s: layer %s, %s: %s" % (who, shown, type(c).__name__, why))
            r.skipped[kind] = why
            problems.append((shown, kind, why))
        if ok:
            r.methods = {k: describe(c) for k, c in ok.items()}
            todo.append((i, name, layer, ok))
    if problems:
        kinds = {k for _, k, _ in problems}
        msg = "%s: %d layer(s) cannot be converted (plain torch): %s" % (
            who, len({p[0] for p in problems}),
            "; ".join(("%s: %s" % (s, why)) if len(kinds) == 1 else ("%s (%s): %s" % (s, k, why))
                      for s, k, why in problems))
        if strict:
            raise _error_class(problems[0][2])(msg)
        warnings.warn(msg, SdgpConversionWarning, stacklevel=3)
    for i, name, conv, ok in todo:
        if isinstance(conv, nn.Linear):
            sd = ok.get("sdgp")
            if sd is not None:
                n, m = sd.n_m
                st = _LinearState(name, i, _lib.parse_fn(sd.prune), n, m, _lib.SCOPE[sd.scope], sd.seed, sd.kernel,
                                  type(conv), sd.mask_block)
            else:  # MVUE's weight gradient alone: dL/dX is torch's of the exact dL/dY
                st = _LinearState(name, i, None, 1, 1, 0, 0, "plain", type(conv))
            wg = ok.get("mvue_wgrad")
            if wg is not None:
                st.wg = wg
                if wg.kernel == "dense" or _linear_wgrad_sparse_ineligible(wg):
                    st.wg_kernel = "dense"
                elif wg.kernel == "sparse":
                    st.wg_kernel = "sparse"
            sw = ok.get("sparse_weights")
            if sw is not None:  # its forward: the sparse-weight kernels as a 1x1 conv over the tokens (_linear.py)
                st.sw = sw
                st.set_beta(conv.weight)
                n, m = sw.n_m
                st.fwd = _sparse_fwd.SparseFwdState(sw.kernel, sw.groups, n, m, 1, 0, 1, (1, 1))
            conv._sdgp = st
            conv.__class__ = SdgpLinear  # the class swap, as for the convs below
            continue
        pad, _ = _resolve_padding(conv)
        stride = _pair(conv.stride)[0]
        sd = ok.get("sdgp")
        if sd is not None:
            n, m = sd.n_m
            st = _LayerState(name, i, _lib.parse_fn(sd.prune), n, m, _lib.SCOPE[sd.scope], sd.seed, sd.kernel, stride,
                             pad, sd.mask_block, conv.groups, sd.wgrad)
        else:
            st = _LayerState(name, i, None, 1, 1, 0, 0, "plain", stride, pad, 1, conv.groups, "torch")
        wg = ok.get("mvue_wgrad")
        if wg is not None:
            st.wg = wg
            if wg.kernel == "dense" or _wgrad_sparse_ineligible(conv, wg):
                st.wg_kernel = "dense"
            elif wg.kernel == "sparse":
                st.wg_kernel = "sparse"
        sw = ok.get("sparse_weights")
        if sw is not None:
            st.sw = sw
            st.set_beta(conv.weight)
            n, m = sw.n_m
            st.fwd = _sparse_fwd.SparseFwdState(sw.kernel, sw.groups, n, m, stride, pad, conv.groups,
                                                _pair(conv.kernel_size), _geometry_ineligible(conv))
        conv._sdgp = st
        # the class swap keeps the object: its parameters (and an optimizer's references to
        # them), hooks and state-dict names stay exactly the plain layer's
        conv.__class__ = SdgpConv2d
    model._sdgp_skipped = {r.name: "; ".join(r.skipped.values()) for r in rows if not r.converted and r.skipped}
    return SparsifyReport(rows)


def sparsify_(model: nn.Module, config: Union[ConfigLike, Mapping[str, ConfigLike]],
              filter_fn: Optional[Callable[[nn.Module, str], bool]] = None, *, strict: bool = False) -> SparsifyReport:
    """Convert model's nn.Conv2d layers (and nn.Linear ones for SDGP(modules=("conv", "linear"))) in place
    to run the configured methods; return the report.

    config: SDGP(...), MVUEWeightGrad(...), SparseWeights(...), a list of them (one of each kind at
        most: the methods combine on each layer), or a dict {module name: config or list or None} for
        per-layer settings (layers not named stay plain; a named layer a config cannot take raises).
    filter_fn(module, name) -> bool: only layers it accepts (torchao's signature); default all.
    strict: raise (ValueError; TypeError for a dtype) instead of warning when a layer cannot take a method.
    A layer converted already, an unknown name or a config of another type raise ValueError / TypeError.
    """
    return _sparsify(model, config, filter_fn, strict, "sdgp.torch.sparsify_")


def convert_model(model: nn.Module, prune: str = "rescaled", nm: str = "2:4", first_layer: bool = False,
                  strict: bool = False, kernel: str = "auto", scope: str = "sample-channel", seed: int = 0,
                  mask_block: int = 1, wgrad: str = "torch") -> nn.Module:
    """Convert, in place, each eligible nn.Conv2d of model into an SdgpConv2d; return the model.
    The SDGP shorthand: sparsify_(model, SDGP(prune, nm, kernel, mask_block, scope, seed, wgrad, first_layer)).

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
    who = "sdgp.torch.convert_model"
    if not isinstance(model, nn.Module):
        raise TypeError("%s: expected an nn.Module, got %s" % (who, type(model).__name__))
    try:
        cfg = SDGP(prune=prune, nm=nm, kernel=kernel, mask_block=mask_block, scope=scope, seed=seed, wgrad=wgrad,
                   first_layer=first_layer)
    except (ValueError, TypeError) as e:
        raise type(e)(str(e).replace("sdgp.torch.SDGP", who)) from None
    _sparsify(model, cfg, None, strict, who)
    return model


def restore_model(model: nn.Module) -> nn.Module:
    """Turn every SdgpConv2d of model back into a plain nn.Conv2d and every SdgpLinear into the nn.Linear
    (or its NonDynamicallyQuantizableLinear) it was (in place; the dense weights W); return it."""
    for mod in model.modules():
        if isinstance(mod, (SdgpConv2d, SdgpLinear)):
            st = mod._sdgp
            st.close()
            del mod._sdgp
            mod.__class__ = nn.Conv2d if isinstance(mod, SdgpConv2d) else st.restore_class
    if "_sdgp_skipped" in model.__dict__:
        del model.__dict__["_sdgp_skipped"]
    return model


def export_model(model: nn.Module) -> nn.Module:
    """A plain copy of model (nn.Conv2d layers) whose sparse-weight layers hold W~ (what their forward
    used: exactly N:M, S-STE's beta applied) instead of W: its state dict loads into the plain model."""
    out = copy.deepcopy(model)
    with torch.no_grad():
        for mod in out.modules():
            if isinstance(mod, SdgpConv2d) and mod._sdgp.sw is not None:
                mod.weight.copy_(mod._sdgp.project(mod.weight))
    return restore_model(out)


def sparse_weights(model: nn.Module) -> Dict[str, torch.Tensor]:
    """{"<layer>.weight": W~} of the sparse-weight layers of model (new tensors)."""
    with torch.no_grad():
        return {(name + "." if name else "") + "weight": mod._sdgp.project(mod.weight)
                for name, mod in model.named_modules() if isinstance(mod, SdgpConv2d) and mod._sdgp.sw is not None}


def _mvue_and_weights_fields(r: Dict[str, Any], s: Any) -> None:
    """A converted layer's report fields of MVUEWeightGrad and SparseWeights (state s), into row r."""
    if s.wg is not None:
        r.update(wgrad_prune=s.wg.prune, wgrad_nm=s.wg.nm, wgrad_kernel=s.wg_kernel or "auto",
                 wgrad_kernel_times_ms=s.wg_times_ms)
    if s.sw is not None:
        r.update(weights=s.sw.method, weights_nm=s.sw.nm, weights_groups=s.sw.groups, beta=s.sw_beta)


def layer_report(model: nn.Module) -> List[Dict[str, Any]]:
    """One dict per nn.Conv2d of model (and per nn.Linear that sparsify_ converted or gave a reason for,
    "type": "Linear"): name, type, converted, methods; for layers with SDGP the n:m, the pruning
    function, the kernel choice and the auto measurement (ms); with MVUE its kernel ("wgrad_kernel",
    "wgrad_kernel_times_ms"); with sparse weights the config and beta; for the others the reason."""
    rows = []
    first = True
    ms = [mod._sdgp.m for mod in model.modules() if isinstance(mod, SdgpConv2d) and mod._sdgp.fn is not None]
    m = ms[0] if ms else 1
    skipped = model.__dict__.get("_sdgp_skipped", {})
    for name, mod in model.named_modules():
        shown = name or "(model)"
        if isinstance(mod, nn.Linear):
            if isinstance(mod, SdgpLinear):
                s = mod._sdgp
                r = {"name": shown, "type": "Linear", "converted": True,
                     "methods": [k for k, on in (("sdgp", s.fn is not None), ("mvue_wgrad", s.wg is not None),
                                                        ("sparse_weights", s.sw is not None)) if on],
                     "steps": s.step}
                if s.fn is not None:
                    r.update(nm="%d:%d" % (s.n, s.m), prune=_lib.prune_fn_name(s.fn).decode(),
                             kernel=s.choice or ("fastest" if s.fastest else "auto"), pruned=s.choice != "plain",
                             times_ms=s.times_ms, mask_block=s.mask_block, wgrad="torch", wgrad_times_ms=None)
                _mvue_and_weights_fields(r, s)
                if s.sw is not None and s.fwd is not None:
                    r.update(s.fwd.report(s.fn is not None))  # dL/dX: SDGP's, else torch's ("dense": no wdata here)
                rows.append(r)
            elif shown in skipped:
                rows.append({"name": shown, "type": "Linear", "converted": False, "reason": skipped[shown]})
            continue
        if not isinstance(mod, nn.Conv2d):
            continue
        r = {"name": shown, "type": "Conv2d", "converted": isinstance(mod, SdgpConv2d)}
        if r["converted"]:
            s = mod._sdgp
            r["methods"] = [k for k, on in (("sdgp", s.fn is not None), ("mvue_wgrad", s.wg is not None),
                                            ("sparse_weights", s.sw is not None)) if on]
            if s.fn is not None:
                r.update(nm="%d:%d" % (s.n, s.m), prune=_lib.prune_fn_name(s.fn).decode(),
                         kernel=s.choice or ("fastest" if s.fastest else "auto"), pruned=s.choice != "plain",
                         times_ms=s.times_ms, mask_block=s.mask_block, wgrad=s.wgrad or "auto",
                         wgrad_times_ms=s.wgrad_times_ms)
            r["steps"] = s.step
            _mvue_and_weights_fields(r, s)
            if s.sw is not None and s.fwd is not None:
                r.update(s.fwd.report(s.fn is not None))
        else:
            why = skipped.get(r["name"]) or _ineligible(mod, m)
            r["reason"] = why or ("first layer (first_layer=False)" if first else "not converted")
        first = False
        rows.append(r)
    return rows
