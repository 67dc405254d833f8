"""The PyTorch twins of sdgp's models (ResNet9, SmallCNN, named_tensors, ...) for the scripts that need
torch only: tests/golden_*.py and bench/. Their one definition is python/sdgp/models.py (see there).

That file is run here, in this module's namespace, instead of `from sdgp.models import *`: importing the
package loads libsdgp.so, and with it oneDNN and an OpenMP runtime, into the process. The PyTorch peer of
the step benchmark (bench/torch_step.py) must stay plain PyTorch (it reports its time and peak RSS), and
bench/grad_fidelity.py runs without a build. A process that imports both gets two copies of the classes
(torch_models.ResNet9 is not sdgp.models.ResNet9); none of the scripts does.
"""
import os

_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sdgp", "models.py")
_DOC = __doc__
with open(_PATH) as _f:
    exec(compile(_f.read(), _PATH, "exec"))
__doc__ = _DOC  # the exec replaced it with models.py's
