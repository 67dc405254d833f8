"""pytest's setup for tests/test_python_*.py: pyproject.toml puts python/ and tests/ on sys.path;
the tests that start Python subprocesses need the package on PYTHONPATH as well (ctest sets it)."""
import os

_PY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
if _PY not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (_PY, os.environ.get("PYTHONPATH")) if p)
os.environ.setdefault("OMP_NUM_THREADS", "2")
