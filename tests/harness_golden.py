"""What the golden step tests share (golden_step.py for ResNet-9 and the small CNN, golden_zoo.py
for the registry's other models): the relative-error check that records a seed's problems, the
reader of the driver's dumps, and the rule that a case passes when at most one of its data seeds
shows a problem (rounding on the other side of a ReLU moves a little gradient; see GRAD_TOL there)."""
import os

import numpy as np


class Cases:
    def __init__(self, seeds, stop_early=False):
        self.seeds, self.stop_early = seeds, stop_early
        self.passed = self.failed = 0
        self.problems = []  # failures of the seed being run

    def check(self, what, got, ref, tol):
        """Max-norm error of got against ref, relative to ref's largest value; a problem when above tol,
        of another shape, or not finite."""
        got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
        scale = max(np.abs(ref).max(), 1e-30) if ref.size else 1.0
        err = np.abs(got - ref).max() / scale if got.size and got.shape == ref.shape else float("inf")
        if not (got.shape == ref.shape and err <= tol and np.all(np.isfinite(got))):
            self.problems.append(f"{what}: rel err {err:.3g} > {tol:g} (shape {got.shape} vs {ref.shape})")
        return err

    def run_case(self, run_seed, name, *args, **kwargs):
        """run_seed(name, seed, ...) on the data seeds; the case passes when at most one shows a problem.
        stop_early: stop once the outcome is settled (two seeds passed, or two failed)."""
        bad = []
        for seed in range(self.seeds):
            if self.stop_early and (seed - len(bad) >= 2 or len(bad) >= 2):
                break
            self.problems = []
            run_seed(name, seed, *args, **kwargs)
            if self.problems:
                bad.append((seed, self.problems))
        for seed, probs in bad:
            print(f"{'FAIL' if len(bad) > 1 else 'note'} {name} data seed {seed}: {len(probs)} problems, e.g. {probs[0]}")
        if len(bad) > 1:
            self.failed += 1
        else:
            self.passed += 1

    def finish(self):
        print(f"{self.passed} passed, {self.failed} failed")
        return 1 if self.failed else 0


def load(d, sub, name, shape):
    """One float32 tensor the driver dumped: d/sub/name.bin."""
    return np.fromfile(os.path.join(d, sub, name + ".bin"), dtype=np.float32).reshape(shape)
