"""hybrid_jax: scaling studies of hybrid (full + efficient attention) language models."""

from hybrid_jax.blas_threads import one_blas_thread
from hybrid_jax.host_memory import keep_buffers_in_heap

__version__ = "0.1.0"

keep_buffers_in_heap()     # before JAX starts its CPU threads: see host_memory
one_blas_thread()          # before numpy loads OpenBLAS, where it has not yet: see blas_threads


def load_run(workdir, step=None):
  """(resolved config, model) of a run's checkpoint; see ``hybrid_jax.loading.load_run``."""
  from hybrid_jax.loading import load_run as _load_run   # lazy: importing the package stays cheap
  return _load_run(workdir, step)
