"""Loading libsdgp and the ctypes declarations of the part of its C API that the package calls.

Only ctypes: no compiler at import time and nothing to build for Python. The structs below mirror
include/sdgp/{status,prune,conv}.h field by field; ctypes lays them out with the C ABI's natural
alignment, so they match what the C compiler did.
"""
import ctypes
import ctypes.util
import os

c_int, c_int64, c_uint8, c_uint32, c_uint64 = ctypes.c_int, ctypes.c_int64, ctypes.c_uint8, ctypes.c_uint32, ctypes.c_uint64
c_size_t, c_void_p, c_char_p = ctypes.c_size_t, ctypes.c_void_p, ctypes.c_char_p

# Mirrors of the C enums (include/sdgp/prune.h, isa.h, status.h).
AXIS = {"channel": 0, "row": 1}
SCOPE = {"sample-channel": 0, "channel": 1}
LAYOUT = {"nhwc": 0, "nchw": 1}  # sdgp_layout
ISA_AUTO = -1
NM_MAX_M = 64


class Error(ctypes.Structure):  # sdgp_error
    _fields_ = [("code", c_int), ("msg", ctypes.c_char * 512)]


class PruneCfg(ctypes.Structure):  # sdgp_prune_cfg
    _fields_ = [("fn", c_int), ("n", c_int), ("m", c_int), ("axis", c_int), ("scope", c_int),
                ("seed", c_uint64), ("step", c_uint64), ("layer", c_uint32), ("isa", c_int),
                ("threads", c_int), ("mask_block", c_int), ("mask_line", c_int64), ("layout", c_int)]


class NMTensor(ctypes.Structure):  # sdgp_nm_tensor
    _fields_ = [("axis", c_int), ("n", c_int), ("m", c_int), ("rows", c_int64), ("C", c_int64),
                ("values", c_void_p), ("index", c_void_p)]


class ConvGeom(ctypes.Structure):  # sdgp_conv_geom
    _fields_ = [("B", c_int), ("H", c_int), ("W", c_int), ("Cin", c_int), ("Cout", c_int), ("kh", c_int),
                ("kw", c_int), ("stride", c_int), ("pad", c_int), ("Ho", c_int), ("Wo", c_int), ("groups", c_int)]


class ConvOptions(ctypes.Structure):  # sdgp_conv_options
    _fields_ = [("algo", c_int), ("workspace_limit", ctypes.c_size_t)]


CONV_AUTO = 2  # SDGP_CONV_AUTO: Winograd (oneDNN's, else sdgp's) where it pays, direct elsewhere
CONV_WORKSPACE_MB = 48  # SDGP_CONV_WORKSPACE_MB_DEFAULT, as `sdgp train`


# ---- exceptions: one class per sdgp_status, each also a builtin Python users already catch ----
class SdgpError(RuntimeError):
    """An error reported by libsdgp; .code is the sdgp_status, the message is the library's."""

    def __init__(self, message, code=7):
        super().__init__(message)
        self.code = code


class InvalidArgumentError(SdgpError, ValueError):
    """SDGP_ERR_INVALID: a bad shape, n:m, name or other argument."""


class UnsupportedError(SdgpError, ValueError):
    """SDGP_ERR_UNSUPPORTED: a request this build or CPU cannot do (mvue-approx other than 2:4, an
    SDGP_ISA path this CPU lacks). A ValueError: the arguments (or SDGP_ISA) decide it."""


class NumericError(SdgpError, FloatingPointError):
    """SDGP_ERR_NUMERIC: NaN or Inf where the pruning function needs finite numbers."""


class OutOfMemoryError(SdgpError, MemoryError):
    """SDGP_ERR_NOMEM."""


_ERROR_CLASS = {1: InvalidArgumentError, 2: OutOfMemoryError, 5: UnsupportedError, 6: NumericError}


def raise_status(status, err):
    msg = bytes(err.msg).split(b"\0", 1)[0].decode("utf-8", "replace") or "sdgp error %d" % status
    raise _ERROR_CLASS.get(status, SdgpError)(msg, status)


def check(status, err):
    if status != 0:
        raise_status(status, err)


# ---- loading ----
def _candidates():
    """Where libsdgp is looked for, in order, as (description, path or name)."""
    env = os.environ.get("SDGP_LIBRARY")
    if env:
        # An explicit choice is final: falling back silently would test or run another library.
        return [("SDGP_LIBRARY", env)]
    out = []
    here = os.path.dirname(os.path.abspath(__file__))
    local = os.path.join(here, "libsdgp.so")
    if os.path.exists(local):
        out.append(("the copy next to the package", local))
    found = ctypes.util.find_library("sdgp")
    if found:
        out.append(("the system library path", found))
    out.append(("the dynamic loader's search path", "libsdgp.so"))
    return out


def _load():
    tried = []
    for where, path in _candidates():
        try:
            return ctypes.CDLL(path), path
        except OSError as e:
            tried.append("%s (%s): %s" % (path, where, e))
    raise ImportError("sdgp: cannot load libsdgp. Build it (cmake --build build) so that the build copies it "
                      "into python/sdgp/, or set SDGP_LIBRARY=/path/to/libsdgp.so. Tried:\n  " + "\n  ".join(tried))


lib, library_path = _load()


def _sig(name, restype, *argtypes):
    try:
        f = getattr(lib, name)
    except AttributeError:
        raise ImportError("sdgp: %s (%s) lacks %s: it is older than this package; rebuild it" %
                          (library_path, "SDGP_LIBRARY" if os.environ.get("SDGP_LIBRARY") else "found", name))
    f.restype = restype
    f.argtypes = list(argtypes)
    return f


P_ERR = ctypes.POINTER(Error)
P_CFG = ctypes.POINTER(PruneCfg)
P_NM = ctypes.POINTER(NMTensor)
P_GEOM = ctypes.POINTER(ConvGeom)

status_name = _sig("sdgp_status_name", c_char_p, c_int)
isa_best = _sig("sdgp_isa_best", c_int)
isa_name = _sig("sdgp_isa_name", c_char_p, c_int)
isa_resolve = _sig("sdgp_isa_resolve", c_int, c_int, ctypes.POINTER(c_int), P_ERR)
conv_onednn_isa = _sig("sdgp_conv_onednn_isa", c_char_p)
prune_cfg_make = _sig("sdgp_prune_cfg_make", PruneCfg, c_int, c_int, c_int)
prune_fn_parse = _sig("sdgp_prune_fn_parse", c_int, c_char_p, ctypes.POINTER(c_int), P_ERR)
prune_fn_name = _sig("sdgp_prune_fn_name", c_char_p, c_int)
nm_parse = _sig("sdgp_nm_parse", c_int, c_char_p, ctypes.POINTER(c_int), ctypes.POINTER(c_int), P_ERR)
prune_check = _sig("sdgp_prune_check", c_int, P_CFG, c_int64, c_int64, c_int64, P_ERR)
prune = _sig("sdgp_prune", c_int, P_CFG, c_void_p, c_int64, c_int64, c_int64, c_void_p, P_NM, P_ERR)
prune_kernel = _sig("sdgp_prune_kernel", c_char_p, P_CFG)
nm_decompress = _sig("sdgp_nm_decompress", c_int, P_NM, c_void_p, P_ERR)
conv_geom_init = _sig("sdgp_conv_geom_init", c_int, P_GEOM, *([c_int] * 9), P_ERR)
conv_geom_set_groups = _sig("sdgp_conv_geom_set_groups", c_int, P_GEOM, c_int, P_ERR)
sparse_bwd_create = _sig("sdgp_sparse_bwd_create", c_int, ctypes.POINTER(c_void_p), P_GEOM, c_int, c_int, c_int,
                         c_int, P_ERR)
sparse_bwd_destroy = _sig("sdgp_sparse_bwd_destroy", None, c_void_p)
sparse_bwd_isa = _sig("sdgp_sparse_bwd_isa", c_int, c_void_p)
sparse_bwd_pack_strided = _sig("sdgp_sparse_bwd_pack_strided", c_int, c_void_p, c_void_p, ctypes.POINTER(ctypes.c_int64), P_ERR)
sparse_bwd_set_output_layout = _sig("sdgp_sparse_bwd_set_output_layout", c_int, c_void_p, c_int, P_ERR)
sparse_bwd_set_mask_block = _sig("sdgp_sparse_bwd_set_mask_block", c_int, c_void_p, c_int, P_ERR)
MASK_BLOCK_MAX = 64  # SDGP_MASK_BLOCK_MAX
sparse_bwd_data = _sig("sdgp_sparse_bwd_data", c_int, c_void_p, c_void_p, P_NM, P_ERR)
sparse_bwd_data_pruned = _sig("sdgp_sparse_bwd_data_pruned", c_int, c_void_p, c_void_p, c_void_p, P_CFG, P_ERR)
conv_create_opts = _sig("sdgp_conv_create_opts", c_int, ctypes.POINTER(c_void_p), P_GEOM, c_int, c_int,
                        ctypes.POINTER(ConvOptions), P_ERR)
conv_destroy = _sig("sdgp_conv_destroy", None, c_void_p)
conv_backward_weights = _sig("sdgp_conv_backward_weights", c_int, c_void_p, c_void_p, c_void_p, c_void_p, c_void_p,
                             P_ERR)


# N:M sparse weights (include/sdgp/nn.h)
weights_project = _sig("sdgp_weights_project", None, c_void_p, c_void_p, c_int, c_int, c_int, c_int, c_int, c_int, c_int,
                       ctypes.c_float)
weights_sste_beta = _sig("sdgp_weights_sste_beta", ctypes.c_double, c_void_p, c_void_p, c_size_t)
# MVUE's weight gradient on the kept rows (include/sdgp/sparse.h)
sparse_wgrad_create = _sig("sdgp_sparse_wgrad_create", c_int, ctypes.POINTER(c_void_p), P_GEOM, c_int, c_int, c_int,
                           c_int, P_ERR)
sparse_wgrad_destroy = _sig("sdgp_sparse_wgrad_destroy", None, c_void_p)
sparse_wgrad_run = _sig("sdgp_sparse_wgrad_run", c_int, c_void_p, c_void_p, c_void_p, P_NM, P_ERR)
# The sparse-weight forward Y = conv(X, W~) and its Winograd data gradient (include/sdgp/sparse.h):
# block masks (direct, Winograd) and masks along output channels (cout); X, Y NHWC, W~ OIHW
P_PTR = ctypes.POINTER(c_void_p)
sparse_fwd_create = _sig("sdgp_sparse_fwd_create", c_int, P_PTR, P_GEOM, c_int, c_int, c_int, c_int, c_int, P_ERR)
sparse_fwd_create_wino = _sig("sdgp_sparse_fwd_create_wino", c_int, P_PTR, P_GEOM, c_int, c_int, c_int, c_int, c_int,
                              c_int, P_ERR)
sparse_fwd_create_cout = _sig("sdgp_sparse_fwd_create_cout", c_int, P_PTR, P_GEOM, c_int, c_int, c_int, c_int, P_ERR)
sparse_fwd_wino_supports = _sig("sdgp_sparse_fwd_wino_supports", c_int, P_GEOM)
sparse_fwd_cout_supports = _sig("sdgp_sparse_fwd_cout_supports", c_int, P_GEOM, c_int, c_int)
sparse_fwd_destroy = _sig("sdgp_sparse_fwd_destroy", None, c_void_p)
sparse_fwd_isa = _sig("sdgp_sparse_fwd_isa", c_int, c_void_p)
sparse_fwd_pack = _sig("sdgp_sparse_fwd_pack", c_int, c_void_p, c_void_p, P_ERR)
sparse_fwd_run = _sig("sdgp_sparse_fwd_run", c_int, c_void_p, c_void_p, c_void_p, P_ERR)
sparse_fwd_workspace_bytes = _sig("sdgp_sparse_fwd_workspace_bytes", c_size_t, c_void_p)
sparse_fwd_set_workspace = _sig("sdgp_sparse_fwd_set_workspace", c_int, c_void_p, c_void_p, c_size_t, P_ERR)
sparse_wdata_supports = _sig("sdgp_sparse_wdata_supports", c_int, P_GEOM)
sparse_wdata_create = _sig("sdgp_sparse_wdata_create", c_int, P_PTR, P_GEOM, c_int, c_int, c_int, c_int, c_int, c_int,
                           P_ERR)
sparse_wdata_destroy = _sig("sdgp_sparse_wdata_destroy", None, c_void_p)
sparse_wdata_pack = _sig("sdgp_sparse_wdata_pack", c_int, c_void_p, c_void_p, P_ERR)
sparse_wdata_run = _sig("sdgp_sparse_wdata_run", c_int, c_void_p, c_void_p, c_void_p, P_ERR)


def _version() -> "str | None":
    """The library's version (sdgp_version, include/sdgp/version.h); None for a library older than it."""
    f = getattr(lib, "sdgp_version", None)
    if f is None:
        return None
    f.restype, f.argtypes = c_char_p, []
    return f().decode()


library_version = _version()


def parse_nm(nm: "str | tuple[int, int]") -> "tuple[int, int]":
    """'N:M' (or an (n, m) pair) -> (n, m), checked by the library (its message on error)."""
    if isinstance(nm, (tuple, list)) and len(nm) == 2 and all(isinstance(v, int) for v in nm):
        nm = "%d:%d" % tuple(nm)
    if not isinstance(nm, str):
        raise TypeError("sdgp: nm must be a string 'N:M' such as '2:4', got %r" % (nm,))
    n, m, err = c_int(), c_int(), Error()
    check(nm_parse(nm.encode(), ctypes.byref(n), ctypes.byref(m), ctypes.byref(err)), err)
    return n.value, m.value


def parse_fn(fn: str) -> int:
    """A pruning function name -> its sdgp_prune_fn code (the library's message on error)."""
    if not isinstance(fn, str):
        raise TypeError("sdgp: fn must be a pruning function name such as 'magnitude', got %r" % (fn,))
    code, err = c_int(), Error()
    check(prune_fn_parse(fn.encode(), ctypes.byref(code), ctypes.byref(err)), err)
    return code.value


def parse_choice(kind: str, value: object, table: dict) -> int:
    if value not in table:
        raise ValueError("sdgp: %s must be one of %s, got %r" % (kind, ", ".join(repr(k) for k in table), value))
    return table[value]


def make_cfg(fn, n, m, axis=0, scope=0, seed=0, step=0, layer=0, threads=0, mask_block=1, mask_line=0):
    if not isinstance(seed, int) or not 0 <= seed < 2 ** 64:
        raise ValueError("sdgp: seed must be an integer in [0, 2^64), got %r" % (seed,))
    if not isinstance(threads, int) or threads < 0:
        raise ValueError("sdgp: threads must be an integer >= 0 (0: OpenMP's default), got %r" % (threads,))
    cfg = prune_cfg_make(fn, n, m)
    if not isinstance(mask_block, int) or not 1 <= mask_block <= MASK_BLOCK_MAX:
        raise ValueError("sdgp: mask_block must be an integer in [1, %d], got %r" % (MASK_BLOCK_MAX, mask_block))
    if not isinstance(mask_line, int) or mask_line < 0:
        raise ValueError("sdgp: mask_line must be an integer >= 0 (0: all positions), got %r" % (mask_line,))
    cfg.axis, cfg.scope, cfg.seed, cfg.step, cfg.layer, cfg.threads = axis, scope, seed, step, layer, threads
    cfg.mask_block, cfg.mask_line = mask_block, mask_line
    return cfg
