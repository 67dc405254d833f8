"""The package installs with pip from pyproject.toml (Debian's setuptools, offline, no build isolation)
into a temporary --target, and from there, in a fresh process outside the source tree, imports with
its own copy of libsdgp, says the library's version and trains one converted step.
Run: SDGP_LIBRARY=build/libsdgp.so PYTHONPATH=python python3 tests/test_python_install.py, or pytest.
The library installed is the one SDGP_LIBRARY names (else python/sdgp/libsdgp.so)."""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import sdgp

from python_harness import run_tests

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

STEP = r"""
import os, sys, torch, torch.nn as nn, torch.nn.functional as F
import sdgp, sdgp.torch as st
print("path", sdgp.__file__)
print("library", sdgp.library_path)
print("version", sdgp.__version__, sdgp.library_version)
torch.manual_seed(0)
model = nn.Sequential(nn.Conv2d(3, 16, 3, 1, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 1, 1), nn.ReLU(),
                      nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))
rep = st.sparsify_(model, [st.SDGP(), st.MVUEWeightGrad(), st.SparseWeights()])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x, y = torch.randn(8, 3, 8, 8), torch.randint(0, 10, (8,))
loss = F.cross_entropy(model(x), y)
loss.backward()
opt.step()
print("converted", ",".join(rep.converted), "steps", st.layer_report(model)[1]["steps"], "loss", loss.item())
"""


def cmake_version():
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        return re.search(r"project\(sdgp VERSION ([0-9.]+)", f.read()).group(1)


def test_version_is_the_library_and_the_project():
    from sdgp import _version
    assert sdgp.library_version is not None, "the library has no sdgp_version(): rebuild it"
    assert sdgp.__version__ == sdgp.library_version == _version.__version__ == cmake_version(), (
        sdgp.__version__, sdgp.library_version, _version.__version__, cmake_version())


def test_pip_install_target_trains_a_step():
    with tempfile.TemporaryDirectory() as tmp:
        # a copy of the sources (pip builds in place: keep the checkout clean), with the library under test
        src = os.path.join(tmp, "src")
        os.makedirs(os.path.join(src, "python"))
        for f in ("pyproject.toml", "setup.cfg", "README.md"):
            shutil.copy(os.path.join(ROOT, f), src)
        shutil.copytree(os.path.join(ROOT, "python", "sdgp"), os.path.join(src, "python", "sdgp"),
                        ignore=shutil.ignore_patterns("__pycache__", "libsdgp.so*"))
        shutil.copy(os.path.realpath(sdgp.library_path), os.path.join(src, "python", "sdgp", "libsdgp.so"))
        target = os.path.join(tmp, "site")
        env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation", "--no-deps", "--no-index",
                            "--target", target, src], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "pip install failed:\n" + r.stdout[-3000:] + r.stderr[-3000:]
        assert os.path.exists(os.path.join(target, "sdgp", "libsdgp.so")), os.listdir(os.path.join(target, "sdgp"))
        assert os.path.exists(os.path.join(target, "sdgp", "py.typed"))
        # a fresh process that sees only the installed copy: no SDGP_LIBRARY, no source tree on the path
        env = {k: v for k, v in os.environ.items() if k not in ("SDGP_LIBRARY", "PYTHONPATH")}
        env["PYTHONPATH"] = target
        r = subprocess.run([sys.executable, "-c", STEP], cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, "the installed package failed:\n" + r.stdout + r.stderr[-3000:]
        out = dict(line.split(" ", 1) for line in r.stdout.strip().splitlines())
        assert out["path"].startswith(target), out
        assert os.path.realpath(out["library"]).startswith(os.path.realpath(target)), out
        assert out["version"] == "%s %s" % (cmake_version(), cmake_version()), out
        assert out["converted"].startswith("2 steps 1 loss"), out


run_tests(globals())
