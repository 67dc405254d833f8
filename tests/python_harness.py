"""The checks of the Python tests (tests/test_python_*.py), for both runners:

- ctest (and `python3 tests/test_python_X.py`) runs a file as a script: check() counts, finish()
  prints the count and exits non-zero when a check failed. Files of test_ functions end with
  run_tests(globals()), which calls each test_ function (a failing assert or an exception is a
  failed check) and then finish().
- pytest (python3 -m pytest, pyproject.toml's settings) imports the files: test_ functions are its
  tests; a script-style file runs its checks at import, and finish() then adds a test named
  test_script_checks to that file that fails listing the failed checks."""
import sys
import traceback

_counts = {"passed": 0, "failed": 0}
_failures = []  # messages since the last finish()


def check(cond, what):
    if cond:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        _failures.append(what)
        print("FAIL:", what)


def _as_script(frame_globals):
    return frame_globals.get("__name__") == "__main__"


def finish():
    caller = sys._getframe(1).f_globals
    if not _as_script(caller):  # imported by pytest: report through a test of the calling module
        failed = list(_failures)
        del _failures[:]

        def test_script_checks():
            assert not failed, "%d check(s) failed:\n  %s" % (len(failed), "\n  ".join(failed))

        caller["test_script_checks"] = test_script_checks
        return
    print("%d passed, %d failed" % (_counts["passed"], _counts["failed"]))
    sys.exit(1 if _counts["failed"] else 0)


def run_tests(namespace):
    """As a script: every test_ function of namespace in definition order, then finish(). Under pytest
    (not __main__): nothing, pytest calls them."""
    if not _as_script(namespace):
        return
    for name, fn in list(namespace.items()):
        if name.startswith("test_") and callable(fn):
            try:
                fn()
                check(True, name)
                print("ok:", name)
            except Exception:  # noqa: BLE001 (a failed assert or an error: the test failed)
                check(False, "%s:\n%s" % (name, traceback.format_exc()))
    print("%d passed, %d failed" % (_counts["passed"], _counts["failed"]))
    sys.exit(1 if _counts["failed"] else 0)


def raises(exc, fn, contains):
    """fn() raises exc with `contains` in its message (an AssertionError otherwise)."""
    try:
        fn()
    except exc as e:
        assert contains in str(e), "%r lacks %r" % (str(e), contains)
        return
    raise AssertionError("no %s raised (expected one naming %r)" % (exc.__name__, contains))
