"""One OpenBLAS thread for numpy (a leaf module, applied when ``hybrid_jax`` is imported).

The project's numpy linear algebra is small: scaling-law fits (L-BFGS-B on 4-5 numbers),
bootstrap statistics. OpenBLAS's worker threads spin while they wait for work, so on a host
whose cores are busy (a training step beside the analysis, a second test process) every
small call costs a scheduler quantum: the scaling report's fabricated test took 87 s beside
one busy core against 42 s with one BLAS thread (in the 2-worker test suite: 540 s before,
56 s after, its bootstrap also made once for its two report modes). JAX does not use OpenBLAS, so its steps are untouched. OpenBLAS reads the
variable once, when numpy loads it: a process that imported numpy first keeps its threads,
and the child processes it starts get one. A value the user set wins.
"""

import os

VARIABLE = "OPENBLAS_NUM_THREADS"


def one_blas_thread() -> str:
  """Default OpenBLAS to one thread in this process and its children; the value in force."""
  return os.environ.setdefault(VARIABLE, "1")
