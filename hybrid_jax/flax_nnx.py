"""``flax.nnx``, imported without importing IPython into a process that is not running it.

flax asks ``IPython.get_ipython()`` at import time (to colour reprs and choose a display),
and so imports IPython wherever it is installed: importing the training loop took 2.15 s
with it and 1.86 s without on an idle 2-core host (medians of 4; 0.7-0.9 s apart while the
test suite loaded the cores), in every training, evaluation and sweep-worker process.
Outside a running IPython shell, IPython is not in ``sys.modules`` and ``get_ipython()`` can
only answer None, so for flax's own import an import of IPython fails instead (flax then
takes "not in IPython", the same answer) and the process can still import IPython
afterwards. Every project module takes ``nnx`` from here.
"""

import sys

_hide_ipython = "flax" not in sys.modules and "IPython" not in sys.modules
if _hide_ipython:
  sys.modules["IPython"] = None            # `import IPython` raises ImportError meanwhile
try:
  from flax import nnx                     # noqa: F401
finally:
  if _hide_ipython and sys.modules.get("IPython", 0) is None:
    del sys.modules["IPython"]
