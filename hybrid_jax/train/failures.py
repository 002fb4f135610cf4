"""Failures of a training run that the user causes or can fix, as one line each: a loss that
is no longer finite (too high a learning rate, usually), and a disk that is full or
read-only. Both are :class:`~hybrid_jax.errors.UserError`; earlier checkpoints stay intact."""

import math

from hybrid_jax.errors import UserError
from hybrid_jax.run.files import describe_disk_errno, disk_errno


class NonFiniteLoss(UserError, FloatingPointError):
  """The training loss became NaN or infinite."""


class DiskError(UserError, OSError):
  """The run directory cannot be written (full, read-only, no permission)."""


class LossWatch:
  """Remembers the last finite loss, to say where a run diverged."""

  def __init__(self, lr: float):
    self.lr, self.last = lr, None

  def check(self, step: int, loss: float):
    if math.isfinite(loss):
      self.last = (step, loss)
      return
    last = f"last finite loss {self.last[1]:.4g} at step {self.last[0]}" if self.last else \
        "no finite loss logged before"
    raise NonFiniteLoss(f"loss is {loss} at step {step} ({last}); the run diverged: try a "
                        f"lower config.train.lr (now {self.lr:g}) or more warmup steps")


def disk_error(e: BaseException, where) -> DiskError | None:
  """A DiskError for ``e`` (or an error it wraps) when it is a full or read-only disk, in
  whichever form it came: an OSError, or orbax's ValueError carrying TensorStore's errno
  (``run.files.disk_errno``)."""
  code = disk_errno(e)
  if code is None:
    return None
  return DiskError(f"cannot write to {where}: {describe_disk_errno(code)}; earlier checkpoints "
                   "are intact: free space or fix permissions, then rerun to resume")
