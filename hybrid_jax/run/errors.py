"""Why a run directory cannot be used as asked: one line each (a ``UserError``)."""

from hybrid_jax.errors import UserError


class RunDirError(UserError, RuntimeError):
  """The run directory cannot be used as asked (missing, no config, held by another
  process, another config)."""


class RunDirBusy(RunDirError):
  """Another process holds the run's lock (a launcher retries such a run later)."""
