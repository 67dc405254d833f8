"""The checks of the Python tests (tests/test_python_*.py): check() counts, finish() prints the
count and exits non-zero when a check failed, so ctest sees it."""
import sys

_counts = {"passed": 0, "failed": 0}


def check(cond, what):
    if cond:
        _counts["passed"] += 1
    else:
        _counts["failed"] += 1
        print("FAIL:", what)


def finish():
    print("%d passed, %d failed" % (_counts["passed"], _counts["failed"]))
    sys.exit(1 if _counts["failed"] else 0)
