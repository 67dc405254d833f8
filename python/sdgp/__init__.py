"""sdgp for Python: N:M pruning of gradients and SDGP convolutions for PyTorch, on libsdgp (ctypes).

    PYTHONPATH=python python3 -c "import sdgp; print(sdgp.library_path)"

libsdgp is loaded from, in order: the environment variable SDGP_LIBRARY (a path; when set, nothing
else is tried), python/sdgp/libsdgp.so (the build copies the library there), the system library
path (ctypes.util.find_library("sdgp"), then "libsdgp.so" through the dynamic loader).

    sdgp.prune(x, fn="magnitude", nm="2:4", ...)     numpy arrays and CPU torch tensors
    sdgp.prune_kernel(fn, nm, axis)                  which pruning kernels that runs here
    sdgp.isa(), sdgp.onednn_isa()                    which instruction sets sdgp's and oneDNN's kernels run
    sdgp.torch.sparsify_(model, config, filter_fn)   PyTorch models: SDGP, MVUE weight gradient, S-STE / SR-STE
    sdgp.torch.convert_model(model, ...)             the SDGP shorthand
    python3 -m sdgp.bench [--overhead]               plain vs converted training steps [binding overhead]

numpy is the only import of `import sdgp`; torch is imported by sdgp.torch.
Installing: `pip install --no-build-isolation .` (pyproject.toml) after the build; README.md "Python".

sdgp.__version__ is the loaded library's version (sdgp_version()), which is the package's own
(sdgp/_version.py, the project version of CMakeLists.txt) unless a stale library is loaded; a
library too old to say falls back to the package's.
"""
from . import _version
from ._lib import (InvalidArgumentError, NumericError, OutOfMemoryError, SdgpError, UnsupportedError,
                   library_path, library_version)
from ._prune import decompress, prune, prune_kernel

__version__: str = library_version or _version.__version__

__all__ = ["prune", "decompress", "prune_kernel", "isa", "onednn_isa", "library_path", "library_version",
           "__version__", "SdgpError", "InvalidArgumentError", "UnsupportedError", "NumericError", "OutOfMemoryError"]


def isa() -> str:
    """The kernel path libsdgp runs here: "ref", "avx2" or "avx512" (after SDGP_ISA)."""
    import ctypes
    from . import _lib
    out, err = ctypes.c_int(), _lib.Error()
    _lib.check(_lib.isa_resolve(_lib.ISA_AUTO, ctypes.byref(out), ctypes.byref(err)), err)
    return _lib.isa_name(out.value).decode()


def onednn_isa() -> str:
    """The instruction set oneDNN's convolutions run here, as oneDNN names it ("avx512_core_bf16", "avx2",
    ...): the CPU's best, lowered by DNNL_MAX_CPU_ISA (SDGP_ISA does not reach oneDNN)."""
    from . import _lib
    return _lib.conv_onednn_isa().decode()


def __getattr__(name):
    # `sdgp.torch` without an explicit import, while `import sdgp` alone stays free of torch
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError("module 'sdgp' has no attribute %r" % name)
