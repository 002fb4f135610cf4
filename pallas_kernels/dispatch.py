"""Which implementation of an op runs, and whether a Pallas kernel runs interpreted.

Every ``api.py`` shares this so that ``implementation="auto"`` means the same thing for every
op: the Pallas kernel of the current accelerator (Mosaic on TPU, Triton on GPU) and the XLA
path on CPU. A Pallas kernel asked for on CPU runs in interpret mode (how it is tested); asked
for on the other kind of accelerator it cannot run, and that is an error at trace time.
"""

import jax

IMPLEMENTATIONS = ("auto", "reference", "xla", "pallas_tpu", "pallas_gpu")
_PALLAS_BACKEND = {"pallas_tpu": "tpu", "pallas_gpu": "gpu"}


def resolve(implementation: str, interpret=None) -> tuple[str, object]:
  """(concrete implementation, interpret) for this process's default backend.

  ``interpret=None`` interprets exactly when the backend is CPU; ``interpret=False`` on CPU is
  allowed (lowering for an accelerator with ``jax.export``). ``interpret`` may also be the TPU
  interpreter's options (a ``pltpu.InterpretParams``: race detection, bounds checks), which
  mean "interpret" and are handed on to ``pallas_tpu``; other kernels get ``True``."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")
  backend = jax.default_backend()
  if implementation == "auto":
    implementation = {"tpu": "pallas_tpu", "gpu": "pallas_gpu"}.get(backend, "xla")
  if implementation not in _PALLAS_BACKEND:
    return implementation, False
  options = None if interpret is None or isinstance(interpret, bool) else interpret
  wanted = _PALLAS_BACKEND[implementation]
  interpret = backend == "cpu" if interpret is None else bool(interpret)
  if backend not in ("cpu", wanted) and not interpret:
    raise ValueError(f"implementation={implementation!r} needs a {wanted.upper()} (or "
                     f"interpret=True); this process's backend is {backend}")
  if interpret and options is not None and implementation == "pallas_tpu":
    return implementation, options
  return implementation, interpret
