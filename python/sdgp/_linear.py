"""nn.Linear with SDGP's data gradient, MVUE's weight gradient and S-STE / SR-STE weights (sdgp.torch's
module docstring, "nn.Linear"): the layer, its autograd function and its eligibility. sdgp.torch
re-exports SdgpLinear; sparsify_ (_sparsify.py) makes it."""
import ctypes
from typing import Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import _lib
from .torch import (_LayerState, _ProjectFn, _check_forward, _forward_saving, _relayout, _saved_fp32, _scratch,
                    _sparse_forward)


def _row_tokens(T: int) -> int:
    """Tokens per image row of the 1x1 view of a linear forward: the largest divisor of T up to 256 (the
    tokens are independent there; rows of many tokens fill the kernels' tiles, as `sdgp bench linear`'s)."""
    for L in range(min(T, 256), 0, -1):
        if T % L == 0:
            return L
    return 1


def _linear_product(fwd):
    """product(x, w, b) of a linear layer with SparseWeights: Y = x W~^T (+ b) by the layer's forward
    kernel (_sparse_fwd.SparseFwdState: libsdgp's sparse-weight kernel on the tokens as the NHWC pixels of
    a 1x1 convolution, or torch's F.linear, measured per layer under kernel="auto")."""
    def product(x, w, b):
        cin, cout = w.shape[1], w.shape[0]
        x2 = x.reshape(-1, cin)
        if not x2.is_contiguous():
            x2 = x2.contiguous()
        T = x2.shape[0]
        if T == 0:
            return F.linear(x, w, b)
        L = _row_tokens(T)
        x4 = x2.view(T // L, 1, L, cin).permute(0, 3, 1, 2)  # NCHW view of the tokens x features memory

        def dense(xx, ww, bb):  # torch's product, as the plain layer runs it, in the same 4-d view
            return F.linear(x2, w, bb).view(T // L, 1, L, cout).permute(0, 3, 1, 2)
        y4 = fwd.forward(x4, w[:, :, None, None], b, dense)
        return y4.permute(0, 2, 3, 1).reshape(*x.shape[:-1], cout)
    return product


# ---- nn.Linear: SDGP's data gradient as a 1x1 convolution over the tokens ----
class _LinearState(_LayerState):
    """A converted nn.Linear's state. Its data gradient dL/dX = prune(dL/dY) x W is the backward-data
    of a 1x1 convolution with B = samples, H = 1, W = seq tokens per sample, Cin = in_features, Cout =
    out_features, stride 1, pad 0: dL/dY (tokens x out, contiguous) is that convolution's NHWC dL/dO,
    W (out, in) its OIHW weights, dL/dX its NHWC dL/dD. A sample is a sequence (x of 3 or more
    dimensions: seq = x.shape[-2], the leading ones the samples) or a row (2-d x: seq = 1), as a
    conv layer's sample is an image: the rescaled function's sample-channel scope sums over it, and
    shared masks (mask_block) are blocks of consecutive tokens of a sequence. The plans, the pruning
    key and the kernel choice are the conv layer's (_LayerState)."""

    def __init__(self, name, layer, fn, n, m, scope, seed, kernel, restore_class, mask_block=1):
        super().__init__(name, layer, fn, n, m, scope, seed, kernel, 1, 0, mask_block)
        self.restore_class = restore_class  # what restore_model() makes of the layer again

    def linear_data_grad(self, go, w, seq):
        """dL/dX (tokens x in, a new tensor) of go = dL/dY (tokens x out, float32, contiguous), seq
        tokens per sample (class docstring)."""
        T, cout = go.shape
        threads = torch.get_num_threads()

        def run(kind):
            if kind == "sparse":
                return self._sparse_linear(go, w, seq, threads)
            if kind == "dense":  # the same pruned dL/dY through torch's dense product
                pruned = _scratch("pruned", (T, cout))
                cfg, err = self._cfg(threads, seq, False), _lib.Error()
                _lib.check(_lib.prune(ctypes.byref(cfg), go.data_ptr(), T // seq, seq, cout, pruned.data_ptr(), None,
                                      ctypes.byref(err)), err)
                return pruned.mm(w)
            return go.mm(w)  # "plain": the unpruned product
        return self.run_kernel(run)

    def linear_weight_grad(self, go, x, w, seq):
        """MVUEWeightGrad's dL/dW (out x in) of go = dL/dY (tokens x out, contiguous), x (tokens x in): the
        conv layer's mvue_grad on the 1x1 view (dL/dY pruned along the tokens, samples of seq tokens)."""
        T, cout = go.shape
        cin = w.shape[1]
        B = T // seq
        go4 = go.view(B, 1, seq, cout).permute(0, 3, 1, 2)  # NCHW logical views of the NHWC memory
        x4 = x.reshape(T, cin).contiguous().view(B, 1, seq, cin).permute(0, 3, 1, 2)
        return self.mvue_grad(go4, x4, w[:, :, None, None]).reshape(cout, cin)

    def _sparse_linear(self, go, w, seq, threads):
        # sdgp_prune, then sdgp_sparse_bwd_data: the conv path (_sparse) on the 1x1 view
        T, cout = go.shape
        cin = w.shape[1]
        # OIHW with kh = kw = 1 read in place; dL/dX written NHWC (B, 1, seq, in), which is (tokens, in)
        dx = self._sparse(go.view(T // seq, 1, seq, cout), False, (T // seq, cin, 1, seq), True, w[:, :, None, None],
                          threads)
        return dx.permute(0, 2, 3, 1).reshape(T, cin)


class _SdgpLinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, state, lowp):
        fwd = _sparse_forward(state, lowp)
        return _forward_saving(ctx, x, weight, bias, state, lowp, F.linear if fwd is None else _linear_product(fwd))

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, go):
        go, x, w = _saved_fp32(ctx, go)
        st = ctx.state
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        cout, cin = w.shape
        gx = gw = gb = None
        try:
            g = go.reshape(-1, cout)  # any leading dimensions: tokens x features
            if not g.is_contiguous():
                g = _relayout(_scratch("dO", tuple(g.shape)), g)
            seq = x.shape[-2] if x.dim() >= 3 else 1  # tokens per sample (_LinearState)
            if need_w:  # MVUE's of dL/dY pruned along the tokens, or torch's of the unpruned dL/dY (also where
                # m does not divide the token count, as a last batch's: the rows cannot form groups of m)
                if st.wg is not None and g.shape[0] and g.shape[0] % st.wg.n_m[1] == 0:
                    gw = st.linear_weight_grad(g, x, w, seq)
                else:
                    gw = g.t().mm(x.reshape(-1, cin))
            if need_b and ctx.has_bias:
                gb = g.sum(0)
            if need_x:
                gx = (st.linear_data_grad(g, w, seq) if g.shape[0] and st.fn is not None else g.mm(w)).reshape(x.shape)
        finally:
            with st.lock:
                st.step += 1
        if gx is not None and gx.dtype != ctx.x_dtype:
            gx = gx.to(ctx.x_dtype)
        return gx, gw, gb, None, None


class SdgpLinear(nn.Linear):
    """nn.Linear with any of the three methods (module docstring, "nn.Linear"). Made by sparsify_, not
    constructed."""
    _sdgp: "_LinearState"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        st = self._sdgp
        w = self.weight
        lowp = _check_forward(st, x, w, "nn.Linear")
        if st.sw is not None:
            w = _ProjectFn.apply(w, st)  # W~ (its gradient goes to W)
        fwd = _sparse_forward(st, lowp)
        if torch.is_grad_enabled() and ((x.requires_grad and st.fn is not None) or (w.requires_grad and st.wg is not None)
                                        or (fwd is not None and (x.requires_grad or w.requires_grad or (
                                            self.bias is not None and self.bias.requires_grad)))):
            return _SdgpLinearFn.apply(x, w, self.bias, st, lowp)
        if fwd is not None:  # no gradient to keep (inference): libsdgp's sparse-weight product where chosen
            return _linear_product(fwd)(x, w, self.bias)
        return F.linear(x, w, self.bias)  # torch's own (autocast as for a plain layer)

    def extra_repr(self) -> str:
        return "%s, %s" % (super().extra_repr(), self._sdgp.describe())


def _linear_wgrad_sparse_ineligible(c) -> Optional[str]:
    """Why sdgp_sparse_wgrad cannot run a linear layer's MVUE weight gradient (c: MVUEWeightGrad), or None."""
    n, m = c.n_m
    if 8 % m or n >= m:
        return "n:m %d:%d: the sparse weight-gradient kernel needs m dividing 8 and n < m" % (n, m)
    if c.mask_block > 1:
        return "mask_block=%d: the sparse weight-gradient kernel keeps a mask per channel" % c.mask_block
    return None


def _linear_ineligible(lin: nn.Module, m: int) -> Optional[str]:
    """Why SDGP cannot convert this nn.Linear, or None (the model-level reasons, the classifier and
    nn.MultiheadAttention's out_proj, are _sparsify's)."""
    if type(lin) not in _LINEAR_CLASSES:
        return "%s is a subclass of nn.Linear (its forward may differ)" % type(lin).__name__
    w = lin.weight
    if w.dtype != torch.float32 or w.device.type != "cpu":
        return "weights are %s on %s (float32 CPU only)" % (w.dtype, w.device)
    if lin.out_features % m:
        return "out_features=%d is not a multiple of m=%d" % (lin.out_features, m)
    return None


# nn.MultiheadAttention's out_proj is a NonDynamicallyQuantizableLinear: nn.Linear itself (a marker
# for the quantization tools), so it would convert; but see the docstring: its forward is never called.
_LINEAR_CLASSES = (nn.Linear, nn.modules.linear.NonDynamicallyQuantizableLinear)
