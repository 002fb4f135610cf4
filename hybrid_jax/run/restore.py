"""A run's checkpoints as a reader restores them, without touching the run.

The trainer's ``Checkpointer`` creates directories and cleans up temporary ones, which could
delete a step a live trainer is still writing; readers therefore open the checkpoint
directory with a read-only orbax manager (in-progress steps are invisible to it) and
restore only the parameters: the optimizer moments, twice their size, are never read.
Either checkpoint form is read: one array per leaf, or packed (``packed_state``), whose
params part is read alone just the same.
(Apart from ``checkpoints.py`` so that listing steps does not import orbax and JAX.)

Orbax's own noise around a failed restore or save is silenced here (``quiet_orbax_noise``):
the caller says what failed in one line.
"""

import logging
import os
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp

from hybrid_jax.run import packed_state
from hybrid_jax.run.checkpoints import checkpoint_dir
from hybrid_jax.run.errors import RunDirError
from hybrid_jax.run.files import disk_errno

_ORBAX_SOURCE = f"{os.sep}orbax{os.sep}"


def _closed_loop_callback(unraisable) -> bool:
  """Whether an unraisable error is a TensorStore future finishing after orbax closed the
  event loop that awaited it: orbax runs each read or write batch on a fresh loop and closes
  it as soon as one operation fails, while the batch's other operations are in flight; each
  of those later calls ``loop.call_soon_threadsafe`` on the closed loop. Nothing is lost
  (the failure itself is raised to the caller), but Python prints each as a traceback."""
  e, tb = unraisable.exc_value, unraisable.exc_traceback
  if not (isinstance(e, RuntimeError) and str(e) == "Event loop is closed"):
    return False
  while tb is not None:
    if tb.tb_frame.f_code.co_name == "call_soon_threadsafe":
      return True
    tb = tb.tb_next
  return False


class _OrbaxDiskErrorLogs(logging.Filter):
  """Drops orbax's log records of a full or read-only disk: every thread of a failed save
  logs the error with its traceback (~200 lines) before the save raises it, and the
  trainer says it in one line (``train.failures.disk_error``)."""

  def filter(self, record):
    if _ORBAX_SOURCE not in record.pathname or not record.exc_info:
      return True
    return disk_errno(record.exc_info[1]) is None


_FILTER = _OrbaxDiskErrorLogs()


def quiet_orbax_noise():
  """Silence, for this process, the two kinds of noise orbax makes around a failed restore or
  save (see ``_closed_loop_callback`` and ``_OrbaxDiskErrorLogs``); every other unraisable
  error and log record passes. Idempotent. The callbacks come when the in-flight operations
  finish, after the failed call returned, so this cannot be scoped to the call."""
  hook = sys.unraisablehook
  if not getattr(hook, "_hybrid_jax_quiet", False):
    def quiet_hook(unraisable, _next=hook):
      if not _closed_loop_callback(unraisable):
        _next(unraisable)
    quiet_hook._hybrid_jax_quiet = True
    sys.unraisablehook = quiet_hook
  absl_logger = logging.getLogger("absl")
  if _FILTER not in absl_logger.filters:
    absl_logger.addFilter(_FILTER)


def open_read_only(workdir) -> ocp.CheckpointManager:
  """A read-only orbax manager on the run's checkpoints (it never creates nor deletes),
  wherever they are (``checkpoint_dir``: the run's own directory or a bucket)."""
  quiet_orbax_noise()                       # a corrupt checkpoint is RunDirError's one line
  absl_logger = logging.getLogger("absl")   # read-only opening warns; that is what we want
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)
  try:
    return ocp.CheckpointManager(
        checkpoint_dir(workdir).absolute(),
        options=ocp.CheckpointManagerOptions(read_only=True, create=False),
        item_handlers=ocp.PyTreeCheckpointHandler())
  finally:
    absl_logger.setLevel(level)


def restore_params(manager, workdir, step: int, abstract_params, sharding):
  """The Param state of checkpoint ``step`` (a partial restore: params only), each array
  in ``sharding`` whatever mesh saved it; a corrupt or foreign checkpoint is one line."""
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        abstract_params)
  try:
    metadata = manager.item_metadata(step)
    if packed_state.is_packed(metadata):
      return _restore_packed_params(manager, step, metadata.tree, target)
    restore_args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=sharding),
                                abstract_params)
    return manager.restore(step, args=ocp.args.PyTreeRestore(
        item=dict(params=target), restore_args=dict(params=restore_args),
        partial_restore=True))["params"]
  except Exception as e:  # a corrupt or foreign checkpoint
    first = str(e).splitlines()[0] if str(e) else ""
    raise RunDirError(f"cannot restore checkpoint {step} of {workdir}: "
                      f"{type(e).__name__}: {first}") from e


def _restore_packed_params(manager, step: int, stored, target):
  """The params of a packed checkpoint: its params arrays and layout only, as host arrays of
  the shapes its metadata tree ``stored`` gives."""
  like = lambda m: np.empty(m.shape, m.dtype)
  item = {packed_state.PACKED: {"params": jax.tree.map(
              like, dict(stored[packed_state.PACKED]["params"]),
              is_leaf=lambda m: hasattr(m, "shape"))},
          packed_state.LAYOUT: like(stored[packed_state.LAYOUT])}
  host = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray), item)
  got = manager.restore(step, args=ocp.args.PyTreeRestore(item=item, restore_args=host,
                                                          partial_restore=True))
  return packed_state.unpack(got[packed_state.PACKED], got[packed_state.LAYOUT],
                             {"params": target})["params"]
